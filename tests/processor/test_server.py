"""The worker's gRPC services on a real grpc.aio server: the access log's stream settles entries and ends at a drain."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import grpc
import pytest
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from inferplane.processor import server as worker_server
from inferplane.processor.config import SETTLE_METADATA_NAMESPACE
from inferplane.processor.server import SettlementLog
from tests.gateway_support import until
from tests.ports import free_port
from tests.processor.test_ext_proc import _config, _logged, _processor


class Recorder:
    """Stands in for the processor: the entries it was asked to settle."""

    def __init__(self) -> None:
        self.settled: list[Any] = []

    def settle(self, entries: Any) -> None:
        self.settled.extend(entries)


def test_the_access_log_stream_settles_each_entry_and_a_drain_ends_it_at_once() -> None:
    """Envoy never ends its access log streams: a worker that drained with one open would wait out its grace."""

    async def run() -> tuple[int, float, int]:
        recorder = Recorder()
        log = SettlementLog(recorder)  # type: ignore[arg-type]
        server = grpc.aio.server()
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(log, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        sent = asyncio.Queue[Any]()

        async def messages() -> Any:
            while (message := await sent.get()) is not None:
                yield message

        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = als_pb2_grpc.AccessLogServiceStub(channel).StreamAccessLogs(messages())
            message = als_pb2.StreamAccessLogsMessage()
            message.http_logs.log_entry.extend([_logged(_settled(), usage=(3, 1)), _logged(_settled())])
            await sent.put(message)
            deadline = time.monotonic() + 5
            while len(recorder.settled) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            settled = len(recorder.settled)
            started = time.monotonic()
            log.close()
            await server.stop(30)  # the worker's grace: ended by the stream's end, not by the grace
            stopped = time.monotonic() - started
            response = await call
            await sent.put(None)
        return settled, stopped, response.ByteSize()

    settled, stopped, response = asyncio.run(run())
    assert settled == 2
    assert stopped < 5
    assert response == 0  # the service's (empty) answer: the stream ended cleanly


def _settled() -> Any:
    """A placing answer that handed a settlement on."""
    response = pb.ProcessingResponse()
    response.dynamic_metadata.update(
        {
            SETTLE_METADATA_NAMESPACE: {
                "tenant": "t",
                "tier": "s",
                "model": "m",
                "reserved": 4,
                "provider": "",
                "cache": "",
            }
        }
    )
    return response


def test_a_worker_whose_shutdown_hangs_exits_at_its_deadline(
    tokenizer_file: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A step of the shutdown that never ends (here the processor's close) no longer keeps the worker alive after its
    supervisor: past ``SHUTDOWN_DEADLINE_SECONDS`` it exits (1), saying which step and what each task awaited."""
    exits: list[int] = []
    monkeypatch.setattr(worker_server, "SHUTDOWN_GRACE_SECONDS", 0.05)
    monkeypatch.setattr(worker_server, "SHUTDOWN_DEADLINE_SECONDS", 0.3)
    monkeypatch.setattr(os, "_exit", exits.append)
    original = signal.getsignal(signal.SIGTERM)

    async def run() -> None:
        config = _config(tokenizer_file).model_copy(update={"grpc_port": free_port()})
        processor = _processor(config)

        async def never() -> None:
            await asyncio.Event().wait()

        processor.aclose = never  # type: ignore[method-assign]
        serving = asyncio.ensure_future(worker_server.serve(config, processor=processor))
        await until(lambda: signal.getsignal(signal.SIGTERM) is not original, 5.0)  # the worker's handler is in
        os.kill(os.getpid(), signal.SIGTERM)
        await until(lambda: bool(exits), 3.0)
        assert exits == [1] and not serving.done()  # still awaiting the close when it exits
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving

    try:
        asyncio.run(run())
    finally:
        signal.signal(signal.SIGTERM, original)
    logged = [r.getMessage() for r in caplog.records if r.name == worker_server.__name__]
    assert logged[0] == "worker 0: shutdown still closing the processor after 0 s: exiting"
    assert any(" serve -> " in line and " never -> " in line for line in logged[1:])  # the coroutine that hung
