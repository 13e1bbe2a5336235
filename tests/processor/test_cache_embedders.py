"""The endpoint embedder balances per request over every address its host name resolves to (the served embedder's
headless Service: one per ready pod), against two real HTTP servers standing for two embedder pods."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from inferplane.processor.cache import embedders
from inferplane.processor.cache.config import EndpointEmbedderConfig
from inferplane.processor.cache.embedders import EmbedderError, EndpointEmbedder
from tests.gateway_support import HandClock
from tests.http_replies import send_json
from tests.ports import free_port

SERVICE = "cache-embedder.inference.svc.cluster.local"
PODS = ("127.0.0.2", "127.0.0.3")
"""Two loopback addresses on one port, as two pods behind a headless Service."""


class _Pod(BaseHTTPRequestHandler):
    """An embeddings API that counts the requests it answers, by the address it listens on."""

    served: ClassVar[dict[str, int]] = {}
    hosts: ClassVar[set[str]] = set()

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).hosts.add(self.headers["host"])
        address = self.connection.getsockname()[0]  # the pod it reached
        type(self).served[str(address)] = type(self).served.get(str(address), 0) + 1
        data = [{"index": i, "embedding": [1.0, 0.0, 0.0, float(len(t))]} for i, t in enumerate(request["input"])]
        body = json.dumps({"data": data}).encode()
        send_json(self, body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextlib.contextmanager
def _pods(port: int) -> Iterator[dict[str, ThreadingHTTPServer]]:
    _Pod.served, _Pod.hosts = {}, set()
    servers = {host: ThreadingHTTPServer((host, port), _Pod) for host in PODS}
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield servers
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def _embedder(port: int, found: list[set[str]], clock: HandClock, url: str | None = None) -> EndpointEmbedder:
    """An embedder of ``http://SERVICE:port/v1`` whose name resolves to ``found[-1]`` (each lookup recorded)."""
    lookups: list[tuple[str, int]] = []

    async def resolve(host: str, at: int) -> set[str]:
        lookups.append((host, at))
        return found[-1]

    config = EndpointEmbedderConfig(url=url or f"http://{SERVICE}:{port}/v1", model="m", dimensions=4, timeout_ms=2000)
    embedder = EndpointEmbedder(config, resolve=resolve, clock=clock)
    embedder.lookups = lookups  # type: ignore[attr-defined]
    return embedder


def test_requests_spread_evenly_over_the_pods_one_at_a_time_and_together() -> None:
    port = free_port()
    with _pods(port):

        async def body() -> None:
            embedder = _embedder(port, [{f"{h}:{port}" for h in PODS}], HandClock(0.0))
            for _ in range(20):
                await embedder.embed(["one prompt"])
            assert _Pod.served == {PODS[0]: 10, PODS[1]: 10}
            await asyncio.gather(*(embedder.embed(["together"]) for _ in range(16)))
            assert _Pod.served == {PODS[0]: 18, PODS[1]: 18}
            assert embedder.lookups == [(SERVICE, port)]  # type: ignore[attr-defined]  # once within RESOLVE_SECONDS
            await embedder.aclose()

        asyncio.run(body())
    assert _Pod.hosts == {f"{SERVICE}:{port}"}  # each pod sees the Service's name, as through the ClusterIP


def test_a_pod_added_gets_requests_after_the_next_lookup_and_a_dead_one_is_skipped() -> None:
    port = free_port()
    clock = HandClock(0.0)
    with _pods(port) as servers:

        async def body() -> None:
            found = [{f"{PODS[0]}:{port}"}]
            embedder = _embedder(port, found, clock)
            await embedder.embed(["a"])
            found.append({f"{h}:{port}" for h in PODS})  # the autoscaler added a pod
            await embedder.embed(["b"])
            assert _Pod.served == {PODS[0]: 2}  # not looked up again yet
            clock.now += embedders.RESOLVE_SECONDS
            for _ in range(4):
                await embedder.embed(["c"])
            assert _Pod.served == {PODS[0]: 4, PODS[1]: 2}
            servers[PODS[1]].shutdown()
            servers[PODS[1]].server_close()  # that pod died: its connections are refused
            refused = 0
            for _ in range(2):  # the two pods' turns: one request fails on the dead pod, the other is answered
                try:
                    await embedder.embed(["d"])
                except EmbedderError:
                    refused += 1
            assert refused == 1
            for _ in range(4):
                await embedder.embed(["e"])  # DNS still lists it; the embedder skips it
            assert _Pod.served == {PODS[0]: 9, PODS[1]: 2}
            clock.now += embedders.DOWN_SECONDS + embedders.RESOLVE_SECONDS
            found.append({f"{PODS[0]}:{port}"})  # DNS forgot it
            await embedder.embed(["f"])
            assert _Pod.served == {PODS[0]: 10, PODS[1]: 2}
            await embedder.aclose()

        asyncio.run(body())


def test_a_name_that_stops_resolving_keeps_the_last_pods() -> None:
    port = free_port()
    clock = HandClock(0.0)
    with _pods(port):

        async def body() -> None:
            found = [{f"{h}:{port}" for h in PODS}]
            embedder = _embedder(port, found, clock)
            await embedder.embed(["a"])
            found.append(set())  # a lookup that failed
            clock.now += embedders.RESOLVE_SECONDS
            await embedder.embed(["b"])
            assert sum(_Pod.served.values()) == 2
            await embedder.aclose()

        asyncio.run(body())


@pytest.mark.parametrize("url", ["https://api.example.com/v1", "http://127.0.0.2:8000/v1"])
def test_https_and_an_address_are_called_as_written(url: str) -> None:
    """A hosted API's certificate names its host, and an address has nothing to resolve: no lookup, no rewrite."""

    async def body() -> list[tuple[str, int]]:
        embedder = _embedder(8000, [{"10.0.0.1:8000"}], HandClock(0.0), url=url)
        assert await embedder._pick() is None
        await embedder.aclose()
        return embedder.lookups  # type: ignore[attr-defined,no-any-return]

    assert asyncio.run(body()) == []
