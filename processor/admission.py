"""KV-capacity admission and scale from zero, per model, inside one processor.

:class:`ModelGate` lets at most ``inflight_limit`` requests reach a model at once (sizing's replicas x
``max_num_seqs``, split across gateway replicas); beyond that up to ``queue_max`` requests wait, each at most
``queue_timeout_seconds``, and the rest are refused (429 + Retry-After). A slot is held until the response ends
(or the client goes away), so the engine never holds more sequences than its KV cache was sized for.

:class:`Readiness` answers "does this model have a ready replica?" for models that scale to zero, by asking the
model Service's health path; while none is ready, requests wait (raising the pending gauge, which is what the
model's KEDA ScaledObject wakes on) up to the hold bound derived from the cold start, then 503 + Retry-After.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

READY_CACHE_SECONDS = 2.0
"""A positive health answer is reused this long; a negative one is re-asked every poll."""
POLL_SECONDS = 0.5
HEALTH_TIMEOUT_SECONDS = 1.0


class ModelGate:
    """In-flight slots for one model with a short bounded FIFO queue."""

    def __init__(self, limit: int, queue_max: int, queue_timeout: float, on_change: Callable[[], None]) -> None:
        self.limit = limit
        self.queue_max = queue_max
        self.queue_timeout = queue_timeout
        self.inflight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._on_change = on_change

    @property
    def waiting(self) -> int:
        """Requests queued for a slot."""
        return len(self._waiters)

    async def acquire(self) -> bool:
        """Take a slot, waiting in the queue if it has room; False when refused (queue full or timed out)."""
        if self.inflight < self.limit and not self._waiters:
            self.inflight += 1
            self._on_change()
            return True
        if len(self._waiters) >= self.queue_max:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._on_change()
        try:
            await asyncio.wait_for(waiter, self.queue_timeout)
        except TimeoutError:
            self._forget(waiter)
            return False
        except asyncio.CancelledError:  # the client went away while queued
            self._forget(waiter)
            raise
        self._on_change()
        return True

    def _forget(self, waiter: asyncio.Future[None]) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        elif waiter.done() and not waiter.cancelled():  # granted a slot it will not use: hand it on
            self.release()
        self._on_change()

    def release(self) -> None:
        """Give a slot back: to the first waiter, or to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on; inflight stays
                self._on_change()
                return
        self.inflight -= 1
        self._on_change()


class Readiness:
    """Whether a model has a ready replica, from its Service's health path."""

    def __init__(self, upstream_url: str, health_path: str, clock: Callable[[], float] = time.monotonic) -> None:
        parts = urlsplit(upstream_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._path = health_path
        self._clock = clock
        self._ready_until = 0.0

    async def probe(self) -> bool:
        """GET the health path once: True on HTTP 200."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port), HEALTH_TIMEOUT_SECONDS
            )
        except (OSError, TimeoutError):
            return False
        try:
            request = f"GET {self._path} HTTP/1.1\r\nHost: {self._host}\r\nConnection: close\r\n\r\n"
            writer.write(request.encode())
            await writer.drain()
            status = await asyncio.wait_for(reader.readline(), HEALTH_TIMEOUT_SECONDS)
            return status.split(b" ")[1:2] == [b"200"]
        except (OSError, TimeoutError, IndexError):
            return False
        finally:
            writer.close()

    async def ready(self) -> bool:
        """True when a replica answered ready recently (cached) or answers now."""
        if self._clock() < self._ready_until:
            return True
        if await self.probe():
            self._ready_until = self._clock() + READY_CACHE_SECONDS
            return True
        return False

    async def wait(self, hold_seconds: float) -> bool:
        """Wait up to ``hold_seconds`` for a ready replica; False when none came up in time."""
        deadline = self._clock() + hold_seconds
        while True:
            if await self.ready():
                return True
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(POLL_SECONDS, remaining))
