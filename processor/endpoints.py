"""A model's replicas as the processor sees them: found by DNS as Envoy finds them, loaded as the engines report.

In a cluster each model's ``endpoints`` name its headless Service, which resolves to one address per ready pod (and
to nothing while none is ready: a model scaled to zero); Envoy's ``STRICT_DNS`` cluster resolves the same name, so
the processor's picks are hosts Envoy knows. No Kubernetes API access is needed. Locally the endpoints are addresses.

Every ``scrape_interval_seconds`` each replica's ``/metrics`` is read for the engine's running and waiting requests
and KV-cache usage (:class:`~inferplane.processor.config.LoadSeries`). A replica is ready while it resolves and its
last scrape answered 200: a replica that dies stops being picked within one interval, before DNS forgets it (up to
the CoreDNS TTL later). Each scrape reads a few lines of a text the engine builds anyway.

A pod reads each replica once a round whatever its number of workers: the supervisor's watcher
(:mod:`inferplane.processor.watch`) runs the tables that scrape and sends each round to every worker, which its
own table follows (:meth:`~EndpointTable.follow`); a worker run alone (tests, or a watcher that went away)
refreshes its tables itself. At the default 0.5 s with three replicas that is six small HTTP requests a second per pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from inferplane.processor.config import MetricSelector, ModelConfig

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_SECONDS = 2.0
SLOW_SCRAPES_BEFORE_UNREADY = 3
"""A replica that refuses the connection or answers an error is unready at once (it died, or is shutting down); one
that is only slow to answer (busy decoding) stays ready with its last load until this many reads in a row time
out: otherwise a loaded machine would see its replicas flicker out, and requests would go around the cap."""
MAX_SCRAPE_BYTES = 4 * 1024 * 1024
"""A metrics text larger than this is cut off (vLLM's is tens of kilobytes)."""
READY_POLL_SECONDS = 0.25
"""While requests wait for a first replica (scale from zero), the table is re-read this often."""


@dataclass
class Endpoint:
    """One replica: its address, the engine's last reported load and this processor's own requests on it."""

    address: str
    """``ip:port``, as Envoy names the host."""
    ready: bool = False
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    inflight: int = 0
    """Requests this processor put on the replica that have not finished."""
    inflight_blocks: int = 0
    """KV blocks those requests' prompts occupy (the decode load this processor knows exactly)."""
    scraped_at: float = field(default=0.0, repr=False)
    inflight_at_scrape: int = field(default=0, repr=False)
    """This processor's requests on the replica when the engine reported its load (the larger of the counts before
    and after the read): the engine's sequences beyond them are other gateways'."""
    inflight_at_round: int = field(default=0, repr=False)
    """This processor's requests on the replica when the round being read elsewhere began (:meth:`EndpointTable.
    begin_round`): the count before the read, when the watcher reads."""
    slow_scrapes: int = field(default=0, repr=False)

    @property
    def engine_active(self) -> float:
        """Sequences the engine reported running or waiting at the last scrape (every gateway's requests)."""
        return self.running + self.waiting


@dataclass(frozen=True)
class Load:
    """What one round read of one replica: the part of an :class:`Endpoint` a watcher sends its workers."""

    address: str
    ready: bool
    running: float
    waiting: float
    kv_usage: float

    @classmethod
    def of(cls, endpoint: Endpoint) -> Load:
        """The round's reading of ``endpoint``."""
        return cls(endpoint.address, endpoint.ready, endpoint.running, endpoint.waiting, endpoint.kv_usage)


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) as host and port; a missing or bad port raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"endpoint {address!r} is not host:port")
    return host.strip("[]"), int(port)


def is_address_literal(host: str) -> bool:
    """Whether ``host`` is an IP address (nothing to resolve)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _format(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def resolve_address(host: str, port: int) -> set[str]:
    """``ip:port`` of every address ``host`` resolves to now (a headless Service: one per ready pod); none when it does
    not resolve (NXDOMAIN: a headless Service without ready pods). An address literal is itself."""
    if is_address_literal(host):
        return {_format(host, port)}
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {_format(str(info[4][0]), port) for info in infos}


def parse_samples(text: bytes, selector: MetricSelector) -> float | None:
    """The sum of the samples of ``selector`` in a Prometheus text (several engines per pod add up); None when the
    series is absent."""
    name = selector.name.encode()
    wanted = [f'{label}="{value}"'.encode() for label, value in selector.labels]
    total: float | None = None
    start = 0
    while (found := text.find(name, start)) >= 0:
        start = found + len(name)
        if found > 0 and text[found - 1 : found] != b"\n":
            continue
        following = text[start : start + 1]
        if following not in (b"{", b" "):
            continue
        end = text.find(b"\n", start)
        line = text[found : end if end >= 0 else len(text)]
        if not all(label in line for label in wanted):
            continue
        try:
            value = float(line.rsplit(b" ", 1)[1])
        except (IndexError, ValueError):
            continue
        total = (total or 0.0) + value
    return total


class Slow(enum.Enum):
    """What :func:`fetch_metrics` returns for a replica that did not answer in time (None: it refused)."""

    SLOW = "slow"


SLOW = Slow.SLOW


async def fetch_metrics(host: str, port: int, path: str) -> bytes | Literal[Slow.SLOW] | None:
    """The body of ``GET path`` when it answers 200; :data:`SLOW` when it does not answer within
    :data:`SCRAPE_TIMEOUT_SECONDS`; None when the connection is refused or reset or the answer is not 200."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), SCRAPE_TIMEOUT_SECONDS)
    except TimeoutError:
        return SLOW
    except OSError:
        return None
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/plain\r\n\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(MAX_SCRAPE_BYTES), SCRAPE_TIMEOUT_SECONDS)
        while len(raw) < MAX_SCRAPE_BYTES and (more := await asyncio.wait_for(reader.read(65536), 1.0)):
            raw += more
    except TimeoutError:
        return SLOW
    except OSError:
        return None
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return body if head.split(b" ", 2)[1:2] == [b"200"] else None


class EndpointTable:
    """One model's replicas, kept current by a background task (:meth:`run`)."""

    def __init__(
        self,
        model: ModelConfig,
        on_change: Callable[[EndpointTable], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self.endpoints: dict[str, Endpoint] = {}
        self._on_change = on_change
        self._clock = clock
        self._resolved_at = -1e9
        self._ready_changed = asyncio.Event()

    def ready(self) -> list[Endpoint]:
        """The replicas that may be picked now."""
        return [e for e in self.endpoints.values() if e.ready]

    @property
    def capacity(self) -> int:
        """Sequences the model may run at once: ``max_num_seqs`` of every ready replica."""
        return self.model.max_num_seqs * sum(1 for e in self.endpoints.values() if e.ready)

    async def resolve(self) -> set[str]:
        """Every address the model's endpoint names resolve to now (a name that does not resolve adds none)."""
        found: set[str] = set()
        for name in self.model.endpoints:
            found.update(await resolve_address(*split_address(name)))
        return found

    def apply(self, addresses: set[str]) -> list[str]:
        """Make the table hold exactly ``addresses``; returns the addresses that left."""
        gone = [a for a in self.endpoints if a not in addresses]
        for address in gone:
            del self.endpoints[address]
        for address in addresses:
            self.endpoints.setdefault(address, Endpoint(address))
        return gone

    async def scrape(self, endpoint: Endpoint) -> None:
        """Read one replica's load; it is ready while reads succeed (or are only slow, a few times in a row)."""
        host, port = split_address(endpoint.address)
        inflight_before = endpoint.inflight
        body = await fetch_metrics(host, port, self.model.metrics_path)
        load = self.model.routing.load
        was_ready = endpoint.ready
        if body is SLOW:
            endpoint.slow_scrapes += 1
            endpoint.ready = was_ready and endpoint.slow_scrapes < SLOW_SCRAPES_BEFORE_UNREADY
        else:
            endpoint.slow_scrapes = 0
            endpoint.ready = body is not None
        if isinstance(body, bytes):
            endpoint.running = parse_samples(body, load.running) or 0.0
            endpoint.waiting = parse_samples(body, load.waiting) or 0.0
            endpoint.kv_usage = (parse_samples(body, load.kv_usage) or 0.0) if load.kv_usage else 0.0
            endpoint.scraped_at = self._clock()
            endpoint.inflight_at_scrape = max(inflight_before, endpoint.inflight)
        if endpoint.ready != was_ready:
            self._ready_changed.set()

    async def refresh(self) -> list[str]:
        """One round: resolve when due, then scrape every replica; returns the addresses that left or went unready
        (the router forgets what they held)."""
        lost: list[str] = []
        if self._clock() - self._resolved_at >= self.model.routing.dns_refresh_seconds:
            self._resolved_at = self._clock()
            lost = self.apply(await self.resolve())
        before = {a for a, e in self.endpoints.items() if e.ready}
        await asyncio.gather(*(self.scrape(e) for e in list(self.endpoints.values())))
        lost += [a for a in before if a in self.endpoints and not self.endpoints[a].ready]
        self._on_change(self)
        return lost

    def begin_round(self) -> None:
        """A round read elsewhere begins: note this processor's requests on each replica (see :meth:`follow`)."""
        for endpoint in self.endpoints.values():
            endpoint.inflight_at_round = endpoint.inflight

    def follow(self, loads: list[Load]) -> list[str]:
        """Take a round read elsewhere (the pod's watcher): the table holds exactly the round's replicas, each with
        its readiness and load; returns the addresses that left or went unready, as :meth:`refresh` does. The
        engine's count is compared with this processor's requests when the round began or now, the larger, as
        :meth:`scrape` compares it with the counts before and after its own read."""
        before = {a for a, e in self.endpoints.items() if e.ready}
        lost = self.apply({load.address for load in loads})
        now = self._clock()
        for load in loads:
            endpoint = self.endpoints[load.address]
            if endpoint.ready != load.ready:
                self._ready_changed.set()
            endpoint.ready = load.ready
            endpoint.running, endpoint.waiting, endpoint.kv_usage = load.running, load.waiting, load.kv_usage
            endpoint.scraped_at = now
            endpoint.inflight_at_scrape = max(endpoint.inflight_at_round, endpoint.inflight)
        lost += [a for a in before if a in self.endpoints and not self.endpoints[a].ready]
        self._on_change(self)
        return lost

    async def run(self, on_lost: Callable[[list[str]], None], before_round: Callable[[], None] = lambda: None) -> None:
        """Refresh forever (cancelled at shutdown); a round's failure is logged and the next round goes on.
        ``before_round`` runs as each round begins (the watcher tells its workers)."""
        while True:
            before_round()
            try:
                lost = await self.refresh()
                if lost:
                    on_lost(lost)
            except Exception:
                log.exception("refreshing the replicas of %s", self.model.name)
            await self._sleep()

    async def _sleep(self) -> None:
        interval = self.model.routing.scrape_interval_seconds
        if not self.ready():
            interval = min(interval, READY_POLL_SECONDS)
            self._resolved_at = -1e9  # nothing ready: ask DNS every round (a pod may just have become ready)
        await asyncio.sleep(interval)

    async def wait_ready(self, hold_seconds: float) -> bool:
        """Wait up to ``hold_seconds`` for a ready replica; False when none came up in time."""
        deadline = self._clock() + hold_seconds
        while not self.ready():
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            self._ready_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready_changed.wait(), min(READY_POLL_SECONDS, remaining))
        return True
