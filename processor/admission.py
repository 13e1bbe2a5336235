"""KV-capacity admission per model: a slot on a ready replica now, or a short wait in a bounded queue, or 429.

A request is admitted when one of the model's ready replicas has a free slot (:mod:`inferplane.processor.slots`:
fewer than its ``max_num_seqs`` in flight from every gateway), so the model's cap is the sum over its ready replicas
of ``max_num_seqs`` and follows them as they come and go. Beyond that up to ``queue_max`` requests wait in FIFO
order, each at most ``queue_timeout_seconds``, and the rest are refused (429 + Retry-After). The queue's head
retries when this processor frees a slot and every :data:`RETRY_SECONDS` (other gateways free slots unseen).

Before that, a request whose best replica is full while others have room may be *held* for it a short while
(:meth:`ModelGate.hold_for`): not queued, not counted as waiting, and never ahead of the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

RETRY_SECONDS = 0.05
"""How often the queue's head asks again while no local release wakes it."""

T = TypeVar("T")


@dataclass
class Hold:
    """A request held for the replica that holds its prefix."""

    started: float
    """When the hold began (monotonic seconds)."""
    patience: float = 0.0
    """How long it may be held in all, as the last attempt found it: the prefill its best replica saves over the
    replica that would save the least."""

    @property
    def waited(self) -> float:
        """Seconds held so far."""
        return time.monotonic() - self.started


class ModelGate:
    """The bounded FIFO queue in front of one model's slots."""

    def __init__(self, queue_max: int, queue_timeout: float, on_change: Callable[[], None]) -> None:
        self.queue_max = queue_max
        self.queue_timeout = queue_timeout
        self._waiters: deque[asyncio.Event] = deque()
        self._holders: list[asyncio.Event] = []
        self._on_change = on_change

    @property
    def waiting(self) -> int:
        """Requests queued for a slot."""
        return len(self._waiters)

    async def admit(self, attempt: Callable[[], Awaitable[T | None]]) -> T | None:
        """``attempt()``'s slot, now or after waiting in the queue; None when refused (queue full or timed out)."""
        if not self._waiters:
            taken = await attempt()
            if taken is not None:
                return taken
        if len(self._waiters) >= self.queue_max:
            return None
        turn = asyncio.Event()
        self._waiters.append(turn)
        self._on_change()
        deadline = time.monotonic() + self.queue_timeout
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                if self._waiters[0] is turn:
                    taken = await attempt()
                    if taken is not None:
                        return taken
                turn.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(turn.wait(), min(RETRY_SECONDS, remaining))
            return None
        finally:
            self._waiters.remove(turn)
            if self._waiters:
                self._waiters[0].set()  # the next in line tries at once
            self._on_change()

    async def hold_for(self, attempt: Callable[[Hold], Awaitable[T | None]]) -> T | None:
        """``attempt(hold)``'s slot, tried now and again on every release (and every :data:`RETRY_SECONDS`) for as
        long as the attempts set ``hold.patience``; None then, or at once when requests queue (every replica was
        full: the FIFO queue decides who goes first)."""
        hold = Hold(time.monotonic())
        while not self._waiters:
            taken = await attempt(hold)
            if taken is not None:
                return taken
            if (left := hold.patience - hold.waited) <= 0:
                break
            release = asyncio.Event()
            self._holders.append(release)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), min(RETRY_SECONDS, left))
            finally:
                self._holders.remove(release)
        return None

    def released(self) -> None:
        """A slot of this processor came free: the queue's head and every request held for a replica try at once."""
        if self._waiters:
            self._waiters[0].set()
        for release in self._holders:
            release.set()
