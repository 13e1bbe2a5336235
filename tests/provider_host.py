"""Starting the component provider as the engine does, and a resource monitor for its ``Construct`` calls.

The engine runs a python plugin through ``pulumi-language-python``: ``python -m pulumi.run.plugin <distribution>
<engine address>`` in the plugin's directory (``PulumiPlugin.yaml``, no ``__main__.py`` there), reads the gRPC port
from the first line of stdout, then talks ``ResourceProvider``. For ``Construct`` the provider registers the
component's children with the resource monitor named in the request; here that monitor is the mock engine's
:class:`~inferplane.tool.mockengine.RecordingMonitor` behind a real gRPC server, answering with the same
:class:`~inferplane.tool.mockengine.PlatformMocks` the offline preview uses, so both sides see the same outputs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import engine_pb2_grpc, provider_pb2_grpc, resource_pb2, resource_pb2_grpc

from inferplane.tool.mockengine import PlatformMocks, RecordingMonitor, Registration

PORT_TIMEOUT_SECONDS = 240.0
"""How long the provider may take to write its port. Its imports take 6.6 s on an idle 2-core machine
(``python -c "import inferplane.__main__"``, 2026-12-06); 60 s was passed while the suite's vLLM engines compiled on
both cores (ci95), so the bound is a hang's, not a speed's."""


class _Monitor(RecordingMonitor):
    """The recording mock monitor with the URNs of a fixed project and stack (not this process's settings)."""

    def __init__(self, mocks: PlatformMocks, project: str, stack: str) -> None:
        super().__init__(mocks)
        self.project = project
        self.stack = stack

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        if parent:
            type_ = parent.split("::")[2].rsplit("$", maxsplit=1)[-1] + "$" + type_
        return f"urn:pulumi:{self.stack}::{self.project}::{type_}::{name}"


class _MonitorService(resource_pb2_grpc.ResourceMonitorServicer):
    """gRPC face of :class:`_Monitor`; one call at a time (the mock monitor keeps plain dicts)."""

    def __init__(self, monitor: _Monitor) -> None:
        self.monitor = monitor
        self.lock = threading.Lock()

    def _call(self, method: str, request: Any) -> Any:
        with self.lock:
            if not hasattr(_thread_loops, "loop"):  # the mock monitor awaits serialisation on this thread's loop
                _thread_loops.loop = asyncio.new_event_loop()
                asyncio.set_event_loop(_thread_loops.loop)
            return getattr(self.monitor, method)(request)

    def RegisterResource(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._call("RegisterResource", request)

    def RegisterResourceOutputs(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._call("RegisterResourceOutputs", request)

    def Invoke(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._call("Invoke", request)

    def ReadResource(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._call("ReadResource", request)

    def GetDeploymentInfo(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._call("GetDeploymentInfo", request)

    def SupportsFeature(self, request: Any, context: Any) -> resource_pb2.SupportsFeatureResponse:  # noqa: N802
        # As the mock monitor: everything but output values, so inputs arrive resolved, as in the offline preview.
        return resource_pb2.SupportsFeatureResponse(hasSupport=request.id != "outputValues")

    def RegisterPackage(self, request: Any, context: Any) -> Any:  # noqa: N802
        return self._call("RegisterPackage", request)

    def SignalAndWaitForShutdown(self, request: Any, context: Any) -> empty_pb2.Empty:  # noqa: N802
        return empty_pb2.Empty()


_thread_loops = threading.local()


class _Engine(engine_pb2_grpc.EngineServicer):
    """The engine's own service at the address the provider is given: keeps what it logs."""

    def __init__(self) -> None:
        self.logs: list[str] = []

    def Log(self, request: Any, context: Any) -> empty_pb2.Empty:  # noqa: N802
        self.logs.append(request.message)
        return empty_pb2.Empty()


def _port(process: subprocess.Popen[str], output: list[str]) -> int:
    """The first line of stdout, as the engine reads it; afterwards both streams are drained into ``output``."""
    assert process.stdout is not None and process.stderr is not None
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(process.stdout.readline() if process.stdout else ""))
    reader.start()
    reader.join(PORT_TIMEOUT_SECONDS)
    for stream in (process.stdout, process.stderr):
        threading.Thread(target=lambda s=stream: output.extend(iter(s.readline, "")), daemon=True).start()
    line = first[0].strip() if first else ""
    if not line.isdigit():
        raise RuntimeError(f"the provider wrote no port (exit status {process.poll()}): {line!r} {''.join(output)}")
    return int(line)


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGINT the provider's process group (the SDK's server stops on KeyboardInterrupt), SIGKILL after 5 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass
class ProviderProcess:
    """A running provider: its ``ResourceProvider`` stub, the monitor its constructs register with."""

    stub: provider_pb2_grpc.ResourceProviderStub
    monitor: _Monitor
    monitor_address: str
    output: list[str]
    process: subprocess.Popen[str]

    @property
    def registrations(self) -> list[Registration]:
        """What the provider registered so far, in order."""
        return list(self.monitor.registrations)


def plugin_command(distribution: str, engine_address: str) -> list[str]:
    """What ``pulumi-language-python``'s ``RunPlugin`` runs for a buildable package without a root ``__main__.py``."""
    return [sys.executable, "-m", "pulumi.run.plugin", distribution, engine_address]


@contextmanager
def provider_process(plugin_dir: Path, *, project: str, stack: str, region: str) -> Iterator[ProviderProcess]:
    """Start the provider in ``plugin_dir`` as the engine does, with a monitor for its constructs; stop it on exit."""
    engine_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    engine_pb2_grpc.add_EngineServicer_to_server(_Engine(), engine_server)
    engine_port = engine_server.add_insecure_port("127.0.0.1:0")
    monitor = _Monitor(PlatformMocks(region), project, stack)
    monitor_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(_MonitorService(monitor), monitor_server)
    monitor_port = monitor_server.add_insecure_port("127.0.0.1:0")
    engine_server.start()
    monitor_server.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
    process = subprocess.Popen(
        plugin_command("inferplane", f"127.0.0.1:{engine_port}"),
        cwd=plugin_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as the engine starts plugins
    )
    output: list[str] = []
    channel: grpc.Channel | None = None
    try:
        port = _port(process, output)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        yield ProviderProcess(
            stub=provider_pb2_grpc.ResourceProviderStub(channel),
            monitor=monitor,
            monitor_address=f"127.0.0.1:{monitor_port}",
            output=output,
            process=process,
        )
    finally:
        if channel is not None:
            channel.close()
        _stop(process)
        monitor_server.stop(0)
        engine_server.stop(0)


def secret(value: Any) -> dict[str, Any]:
    """A secret as the wire carries it (the engine's secret signature object)."""
    return {rpc._special_sig_key: rpc._special_secret_sig, "value": value}
