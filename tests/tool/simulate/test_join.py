"""The join process: one address per replica, ``/metrics`` to the mocker's system port and everything else to the
frontend, bytes spliced unchanged both ways (real sockets)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from inferplane.tool.simulate.join import Route, backend_port, parse_route, serve


def test_routes_parse_and_print_alike() -> None:
    route = parse_route("127.0.1.3:20001=20002,20003")
    assert route == Route(host="127.0.1.3", port=20001, api_port=20002, metrics_port=20003)
    assert parse_route(route.text()) == route


@pytest.mark.parametrize("text", ["127.0.1.3:20001", "127.0.1.3:x=1,2", "127.0.1.3:1=2"])
def test_a_malformed_route_is_refused(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="expected HOST:PORT=API_PORT,METRICS_PORT"):
        parse_route(text)


@pytest.mark.parametrize(
    ("head", "metrics"),
    [
        (b"GET /metrics HTTP/1.0\r\n", True),
        (b"GET /metrics?name=x HTTP/1.1\r\n", True),
        (b"POST /v1/chat/completions HTTP/1.1\r\n", False),
        (b"GET /metricsx HTTP/1.1\r\n", False),
        (b"GET /health HTTP/1.1\r\n", False),
    ],
)
def test_only_metrics_goes_to_the_mocker(head: bytes, metrics: bool) -> None:
    route = Route(host="127.0.0.1", port=1, api_port=2, metrics_port=3)
    assert backend_port(route, head) == (3 if metrics else 2)


@contextlib.asynccontextmanager
async def echo_server(tag: bytes) -> AsyncIterator[int]:
    """Answers each connection with ``tag`` and the bytes it received, then closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.readuntil(b"\r\n\r\n")
        writer.write(tag + b":" + data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _ask(port: int, request: bytes) -> bytes:
    for _ in range(200):  # the join's listener comes up in the same loop: wait for it, not a fixed time
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.01)
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


def test_connections_are_spliced_to_their_backend() -> None:
    async def scenario() -> tuple[bytes, bytes]:
        async with echo_server(b"api") as api, echo_server(b"metrics") as metrics:
            route = Route(host="127.0.0.1", port=_free_port(), api_port=api, metrics_port=metrics)
            task = asyncio.create_task(serve([route]))
            try:
                chat = await _ask(route.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
                scrape = await _ask(route.port, b"GET /metrics HTTP/1.0\r\n\r\n")
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            return chat, scrape

    chat, scrape = asyncio.run(scenario())
    assert chat == b"api:POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"
    assert scrape == b"metrics:GET /metrics HTTP/1.0\r\n\r\n"
