"""``python -m inferplane.tool.simulate.join ROUTE ...``: one address per simulated replica serving both the OpenAI API
and ``/metrics``, as a pod's IP serves a vLLM server's both.

A simulated replica is two processes (Dynamo's mocker, whose ``vllm:*`` metrics are on its system port, and a
one-worker Dynamo frontend serving the OpenAI API), and the gateway reaches a replica at one address: Envoy sends
``/v1/*`` there and the processor scrapes ``/metrics`` there. Each ``ROUTE`` is ``HOST:PORT=API_PORT,METRICS_PORT``:
a listener on ``HOST:PORT`` that splices each connection to ``HOST:METRICS_PORT`` when its first request asks for
``/metrics`` and to ``HOST:API_PORT`` otherwise.

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

    def text(self) -> str:
        """As given on the command line."""
        return f"{self.host}:{self.port}={self.api_port},{self.metrics_port}"


def parse_route(text: str) -> Route:
    """``HOST:PORT=API_PORT,METRICS_PORT``."""
    address, _, ports = text.partition("=")
    host, _, port = address.rpartition(":")
    api, _, metrics = ports.partition(",")
    try:
        return Route(host=host, port=int(port), api_port=int(api), metrics_port=int(metrics))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT=API_PORT,METRICS_PORT") from None


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
        up_reader, up_writer = await asyncio.open_connection(route.host, backend_port(route, head))
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
    parser.add_argument("routes", nargs="+", type=parse_route, metavar="HOST:PORT=API_PORT,METRICS_PORT")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.routes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
