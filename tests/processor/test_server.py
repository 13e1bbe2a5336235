"""The worker's gRPC services on a real grpc.aio server: the access log's stream settles entries and ends at a drain."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from inferplane.processor.config import SETTLE_METADATA_NAMESPACE
from inferplane.processor.server import SettlementLog
from tests.processor.test_ext_proc import _logged


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
