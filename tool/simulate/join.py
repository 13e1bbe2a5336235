"""``python -m inferplane.tool.simulate.join ROUTE ...``: one address per simulated replica serving both the OpenAI API
and ``/metrics``, as a pod's IP serves a vLLM server's both.

A simulated replica is two processes (Dynamo's mocker, whose ``vllm:*`` metrics are on its system port, and a
one-worker Dynamo frontend serving the OpenAI API), and the gateway reaches a replica at one address: Envoy sends
``/v1/*`` there and the processor scrapes ``/metrics`` there. Each ``ROUTE`` is ``HOST:PORT=API_PORT,METRICS_PORT``:
a listener on ``HOST:PORT`` that splices each connection to ``HOST:METRICS_PORT`` when its first request asks for
``/metrics`` and to ``HOST:API_PORT`` otherwise.

Dynamo's mocker names its series after the engine it simulates, in its own way (``trtllm:num_requests_running``),
where a Triton pod serves ``nv_trt_llm_request_metrics{request_type="active"}``; the gateway reads the real engine's
names. So for a Triton replica (``--engine triton``) a ``/metrics`` answer gets the real names' lines appended
(:data:`TRANSLATIONS`), as the pod would serve them; vLLM's and SGLang's load series already match.

A connection keeps the backend its first request chose: the parties here never mix the two on one connection (the
processor scrapes over HTTP/1.0, one request a connection; Envoy's upstream connections carry only ``/v1/*``). A
byte splice, not an HTTP proxy, so it adds no HTTP behaviour of its own (timeouts, buffering, headers) between the
gateway and the engine; its cost is the per-replica hop the routing benchmark measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from inferplane.processor.config import MetricSelector
from inferplane.processor.endpoints import parse_samples

TRANSLATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "triton": (
        ("trtllm:num_requests_running", 'nv_trt_llm_request_metrics{request_type="active"}'),
        ("trtllm:num_requests_waiting", 'nv_trt_llm_request_metrics{request_type="waiting"}'),
        ("trtllm:kv_cache_usage_perc", 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}'),
    ),
}
"""Per engine, the mocker's series and the line the real engine's pod serves for it (Triton's TensorRT-LLM backend:
``components/observability/metrics.py`` ``TRTLLM_REQUESTS``, ``TRTLLM_KV_CACHE_BLOCKS``)."""
HEAD_LIMIT = 64 * 1024
"""Bytes read at most before the request line is complete (a request line is far shorter)."""
CHUNK = 65536


class Route(BaseModel):
    """One replica's address and the two ports behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(description="The replica's loopback address (its 'pod IP').")
    port: int = Field(ge=1, le=65535, description="The port the gateway reaches the replica at.")
    api_port: int = Field(ge=1, le=65535, description="The replica's Dynamo frontend (the OpenAI API).")
    metrics_port: int = Field(ge=1, le=65535, description="The replica's mocker system port (``/metrics``).")
    engine: str = Field(default="vllm", description="The engine the replica stands for (its metric names).")

    def text(self) -> str:
        """As given on the command line."""
        return f"{self.host}:{self.port}={self.api_port},{self.metrics_port},{self.engine}"


def parse_route(text: str) -> Route:
    """``HOST:PORT=API_PORT,METRICS_PORT[,ENGINE]``."""
    address, _, ports = text.partition("=")
    host, _, port = address.rpartition(":")
    api, _, rest = ports.partition(",")
    metrics, _, engine = rest.partition(",")
    try:
        return Route(host=host, port=int(port), api_port=int(api), metrics_port=int(metrics), engine=engine or "vllm")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT=API_PORT,METRICS_PORT[,ENGINE]") from None


def translated(body: bytes, engine: str) -> bytes:
    """``body`` with the real engine's lines for the mocker's series appended (unchanged for vLLM and SGLang)."""
    lines = []
    for source, target in TRANSLATIONS.get(engine, ()):
        value = parse_samples(body, MetricSelector(name=source))
        if value is not None:
            lines.append(f"{target} {value}".encode())
    return body + b"".join(line + b"\n" for line in lines)


async def _translate_metrics(route: Route, head: bytes, writer: asyncio.StreamWriter) -> None:
    """Answer one ``/metrics`` request with the mocker's series and their real names (HTTP/1.0, then close)."""
    reader, upstream = await asyncio.open_connection(route.host, route.metrics_port)
    request_line = head.split(b"\r\n", 1)[0].rsplit(b" ", 1)[0]
    upstream.write(request_line + b" HTTP/1.0\r\nHost: " + route.host.encode() + b"\r\n\r\n")
    await upstream.drain()
    raw = await reader.read()
    upstream.close()
    status, _, body = raw.partition(b"\r\n\r\n")
    if b" 200 " not in status.split(b"\r\n", 1)[0] + b" ":
        writer.write(raw)
    else:
        body = translated(body, route.engine)
        writer.write(
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
    await writer.drain()


def backend_port(route: Route, head: bytes) -> int:
    """The port a connection whose first bytes are ``head`` goes to."""
    parts = head.split(b" ", 2)
    path = parts[1] if len(parts) > 1 else b""
    return (
        route.metrics_port if path == b"/metrics" or path.startswith((b"/metrics?", b"/metrics/")) else route.api_port
    )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _serve(route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = b""
    try:
        while b"\r\n" not in head and len(head) < HEAD_LIMIT:
            data = await reader.read(CHUNK)
            if not data:
                return
            head += data
        port = backend_port(route, head)
        if port == route.metrics_port and route.engine in TRANSLATIONS:
            await _translate_metrics(route, head, writer)
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(route.host, port)
    except (ConnectionError, OSError):
        writer.close()
        return
    up_writer.write(head)
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        for w in (writer, up_writer):
            w.close()


async def serve(routes: Sequence[Route]) -> None:
    """Listen on every route until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    servers = []
    for route in routes:

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter, route: Route = route) -> None:
            await _serve(route, r, w)

        servers.append(await asyncio.start_server(handle, route.host, route.port, backlog=1024))
    print(f"joining {len(servers)} replicas", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the routes and serve them."""
    parser = argparse.ArgumentParser(prog="python -m inferplane.tool.simulate.join", description=__doc__)
    parser.add_argument("routes", nargs="+", type=parse_route, metavar="HOST:PORT=API_PORT,METRICS_PORT[,ENGINE]")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.routes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
