"""The processor's worker processes and their one metrics endpoint.

One Python process runs one event loop, and the processor spends most of its CPU in gRPC's per-message work, so a
single process saturates one core long before Envoy does (README "Overhead"). ``ProcessorConfig.workers`` processes
therefore serve ext_proc side by side, worker ``i`` on ``grpc_port + i``; Envoy's processor cluster lists every
worker and sends each request's stream to the one with the fewest in flight. Each worker holds its share of every
model's admission queue (:meth:`~inferplane.processor.config.ProcessorConfig.worker_share`); the per-replica slots are
shared by every worker of every pod through Redis (:mod:`inferplane.processor.slots`), and so are the budgets.

This supervisor reads the replicas for every worker (its :class:`~inferplane.processor.watch.Watcher`, on a thread:
each replica read once a round per pod, not per worker), starts the workers, serves their metrics as one endpoint
(prometheus_client's multiprocess mode: counters and histograms add up, the pending and in-flight gauges are the sum
over live workers), opens that endpoint only once every worker accepts connections (the pod's readiness probe reads
it: Envoy answers 500 while a processor is away), forwards SIGTERM, and exits non-zero when a worker dies so that
Kubernetes restarts the container. A worker dies with its supervisor (``PR_SET_PDEATHSIG``), so none outlives it
serving stale decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, multiprocess, start_http_server

from inferplane.processor.config import ProcessorConfig
from inferplane.processor.pick_bus import CHANNEL_SUFFIX, PickBus
from inferplane.processor.redis_connection import redis_tls, redis_url
from inferplane.processor.watch import SOCKET_NAME, Watcher

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multiprocess mode: where each worker writes its samples (an emptyDir in the pod)."""
WORKER_START_SECONDS = 60.0
"""How long workers may take to accept connections (tokenizers load at start) before the supervisor gives up."""
WATCHER_START_SECONDS = 5.0
"""How long the replica watcher may take to listen; past it each worker reads its replicas itself."""
_PR_SET_PDEATHSIG = 1

log = logging.getLogger(__name__)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _worker_failed(index: int, wait_status: int) -> None:
    log.error(
        "processor worker %d exited (status %d): stopping the others", index, os.waitstatus_to_exitcode(wait_status)
    )


def supervise(config_path: str, log_level: str) -> int:
    """Run the workers of ``config_path``; the exit status (0 after SIGTERM/SIGINT, 1 when a worker failed)."""
    config = ProcessorConfig.load(config_path)
    given = os.environ.get(MULTIPROC_ENV)
    directory = Path(given or tempfile.mkdtemp(prefix="inferplane-processor-metrics-"))
    os.environ[MULTIPROC_ENV] = str(directory)  # the workers inherit it: their samples go there
    for stale in directory.glob("*.db"):  # a restarted container's old samples
        stale.unlink()
    watch_directory = Path(tempfile.mkdtemp(prefix="inferplane-watch-"))  # mode 0700: only the pod's user
    try:
        watch_socket = _start_watcher(config, str(watch_directory / SOCKET_NAME))
        return _run(config, config_path, log_level, directory, watch_socket)
    finally:
        shutil.rmtree(watch_directory, ignore_errors=True)
        if not given:
            shutil.rmtree(directory, ignore_errors=True)


def _start_watcher(config: ProcessorConfig, path: str) -> str | None:
    """The replica watcher on a daemon thread of its own event loop (it ends with the supervisor); its socket, or
    None when it did not listen in time (each worker then reads its replicas itself)."""
    listening = threading.Event()
    watcher = Watcher(config.models, path, _pick_bus(config))
    threading.Thread(
        target=lambda: asyncio.run(watcher.serve(listening.set)), name="replica-watcher", daemon=True
    ).start()
    if listening.wait(WATCHER_START_SECONDS):
        return path
    log.error("the replica watcher did not listen within %.0f s: each worker reads the replicas", WATCHER_START_SECONDS)
    return None


def _pick_bus(config: ProcessorConfig) -> Callable[[Callable[[bytes], None]], PickBus] | None:
    """How the watcher joins the gateway's pick channel (:mod:`.pick_bus`); None without a Redis (one pod alone)."""
    url = redis_url(config)
    if url is None:
        return None
    channel = config.redis_key_prefix + CHANNEL_SUFFIX
    timeout, tls = config.redis_timeout_seconds, redis_tls(config, url)
    return lambda deliver: PickBus(url, channel, deliver, timeout, **tls)


def _run(config: ProcessorConfig, config_path: str, log_level: str, directory: Path, watch_socket: str | None) -> int:
    command = [sys.executable, "-m", "inferplane.processor", "--config", config_path, "--log-level", log_level]
    if watch_socket is not None:
        command += ["--watch-socket", watch_socket]
    workers = {
        subprocess.Popen([*command, "--worker", str(index)], preexec_fn=_die_with_parent).pid: index  # noqa: PLW1509
        for index in range(config.workers)
    }
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):  # already gone (reaped below)
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    deadline = time.monotonic() + WORKER_START_SECONDS
    ports = [config.grpc_port + index for index in range(config.workers)]
    while not stopping and not all(_listening(config.listen_host, port) for port in ports):
        for pid in list(workers):
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                _worker_failed(workers.pop(pid), code)
                stop(signal.SIGTERM, None)
                return 1
        if time.monotonic() > deadline:
            log.error("processor workers did not listen within %.0f s: stopping them", WORKER_START_SECONDS)
            stop(signal.SIGTERM, None)
            return 1
        time.sleep(0.1)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    start_http_server(config.metrics_port, addr=config.metrics_host, registry=registry)
    log.info("processor workers on %s:%s, metrics on :%d", config.listen_host, ports, config.metrics_port)
    status = 0
    while workers:
        try:
            pid, code = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        index = workers.pop(pid, None)
        multiprocess.mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]
        if index is not None and not stopping:
            _worker_failed(index, code)
            status = 1
            stop(signal.SIGTERM, None)
    return status
