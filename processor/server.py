"""One processor worker: ext_proc over gRPC (grpc.aio) on the pod's loopback (``grpc_port + worker``), and on the same
port Envoy's access log service, which brings each settled request's entry. Its metrics are served by the supervisor
(:mod:`inferplane.processor.supervisor`) for all workers together."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import grpc
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from prometheus_client import CollectorRegistry

from inferplane.processor.config import ProcessorConfig
from inferplane.processor.ext_proc import Processor

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 30.0
"""On SIGTERM, streams in flight (long generations) get this long to finish."""
SHUTDOWN_DEADLINE_SECONDS = SHUTDOWN_GRACE_SECONDS + 10.0
"""Past this after SIGTERM the worker exits whatever its shutdown still awaits, logging the step it was in. Every step
is bounded, yet two workers of about 40 gateways the routing benchmark started and stopped (2026-12-08) stayed alive
after their supervisor, ignoring SIGTERM, their loop idle: a step that never ended, not found. Kubernetes kills a pod
after its grace anyway; ``inferplane gateway run`` would leave the worker holding its port."""


class ExternalProcessor(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """Envoy's ``envoy.service.ext_proc.v3.ExternalProcessor`` service, answered by :class:`Processor`."""

    def __init__(self, processor: Processor) -> None:
        self.processor = processor

    async def Process(self, request_iterator: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:  # noqa: N802
        async for response in self.processor.process(request_iterator):
            yield response


class SettlementLog(als_pb2_grpc.AccessLogServiceServicer):  # type: ignore[misc]
    """Envoy's ``envoy.service.accesslog.v3.AccessLogService``: the settled requests' entries, batched by Envoy, each
    settled by :meth:`Processor.settle`.

    Envoy keeps one such stream open per worker thread for as long as it runs, so a draining worker ends them
    (:meth:`close`) before it waits for the requests in flight: otherwise the drain would wait out its whole grace
    for streams that never end. Envoy sends later entries on a new stream, to a worker still serving."""

    def __init__(self, processor: Processor) -> None:
        self.processor = processor
        self._closing = asyncio.Event()

    def close(self) -> None:
        """End every open stream (and any opened later) after the message it is reading."""
        self._closing.set()

    async def StreamAccessLogs(self, request_iterator: AsyncIterator[Any], context: Any) -> Any:  # noqa: N802
        messages = aiter(request_iterator)
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            while not self._closing.is_set():
                message = asyncio.ensure_future(anext(messages, None))
                await asyncio.wait((message, closing), return_when=asyncio.FIRST_COMPLETED)
                if not message.done():
                    message.cancel()
                    break
                if (received := message.result()) is None:
                    break
                self.processor.settle(received.http_logs.log_entry)
        finally:
            closing.cancel()
        return als_pb2.StreamAccessLogsResponse()


def awaiting(task: asyncio.Task[Any]) -> str:
    """Where ``task`` is suspended, innermost last: each coroutine it awaits, as ``file:line function``
    (``Task.get_stack`` shows only the outermost frame of a suspended coroutine)."""
    frames: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None and (frame := getattr(awaited, "cr_frame", None)) is not None:
        frames.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        awaited = awaited.cr_await
    return " -> ".join(frames) or repr(task)


async def serve(
    config: ProcessorConfig, worker: int = 0, processor: Processor | None = None, watch_socket: str | None = None
) -> None:
    """Run worker ``worker`` until SIGTERM/SIGINT, then drain for :data:`SHUTDOWN_GRACE_SECONDS`; ``watch_socket``:
    the pod's replica watcher (:mod:`inferplane.processor.watch`)."""
    processor = processor or Processor.from_environment(config, CollectorRegistry(), worker)
    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(ExternalProcessor(processor), server)
    settlement_log = SettlementLog(processor)
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(settlement_log, server)
    port = config.grpc_port + worker
    server.add_insecure_port(f"{config.listen_host}:{port}")
    await processor.start(watch_socket)
    await server.start()
    if processor.cache is not None:
        await processor.cache.start()
    log.info("worker %d: ext_proc on %s:%d", worker, config.listen_host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    step = "closing the access log"

    def overdue() -> None:
        log.error("worker %d: shutdown still %s after %.0f s: exiting", worker, step, SHUTDOWN_DEADLINE_SECONDS)
        for task in asyncio.all_tasks(loop):  # what each task still awaits: the step's cause
            log.error("worker %d: %s awaits %s", worker, task.get_name(), awaiting(task))
        os._exit(1)

    loop.call_later(SHUTDOWN_DEADLINE_SECONDS, overdue)
    settlement_log.close()
    step = "draining the ext_proc streams"
    await server.stop(SHUTDOWN_GRACE_SECONDS)
    step = "closing the processor"
    await processor.aclose()
    step = "closing the budgets"
    await processor.budgets.aclose()
    if processor.cache is not None:
        step = "closing the cache"
        await processor.cache.aclose()
