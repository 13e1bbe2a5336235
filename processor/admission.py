"""KV-capacity admission per model: a slot on a ready replica now, or a short wait in a bounded queue, or 429.

A request is admitted when one of the model's ready replicas has a free slot (:mod:`inferplane.processor.slots`:
fewer than its ``max_num_seqs`` in flight from every gateway), so the model's cap is the sum over its ready replicas
of ``max_num_seqs`` and follows them as they come and go. Beyond that up to ``queue_max`` requests wait in arrival
order, each at most ``queue_timeout_seconds``, and the rest are refused (429 + Retry-After). The queue's head
retries when this processor frees a slot and every :data:`RETRY_SECONDS`.

A slot freed on a replica goes first to the oldest waiter that *prefers* it (:class:`Turn`: the replicas holding the
most of its prompt, or its new prefix's home), and to the head only when none does and the head may take any
replica: it has none to prefer, or has been first in line :data:`HEAD_PATIENCE_SECONDS`; and then only one that no
other request waits for (:attr:`Turn.others_want`, and the other workers' from :mod:`.peer_queues`). Each processor
worker keeps its own queue and sees only its own releases, and a slot one worker frees may be what another's waiters
wait for: a slot nobody here wants goes back to the store at once, and the other workers of every gateway pod are
told (:mod:`.watch`), where the oldest waiter preferring that replica is offered it (:meth:`ModelGate.offer`). The
:data:`POLLING_WAITERS` at the front of the queue also ask the store for the replicas they prefer every
:data:`RETRY_SECONDS` (a slot a trim returned, or a message lost); the rest sleep until offered a slot (each waking
every :data:`RETRY_SECONDS` cost the processor its CPU with a thousand queued).

First come, first served alone gave every freed slot to the head, whose prefix the freed replica seldom held: on the
simulated fleet past its capacity (8 replicas of prod's 70B, 20 shared 6,144-token prefixes, 40 requests/s offered
for about 22 served) half the requests spilled to a replica computing their prefix again and evicting another's,
the engines served 44% of prompt tokens from cache (ideal 95%) and the fleet 1,428 output tokens/s against 2,731
behind Dynamo's KV router, which queues each request at its cheapest engine (``docs/simulate.md``). Ordered by
preference within each worker, 92.6% and 3,982 tokens/s (median of three runs against Dynamo's 2,811), but one run
in three collapsed (2,107: a worker's head spilled onto replicas whose slots it held and the other worker's waiters
wanted); with one worker, three runs of three at 94.5-94.9%. With the workers sharing what they free, 91.9% and
3,816 tokens/s (3,581-3,865 against Dynamo's 2,583-3,392). SGLang orders its own waiting queue by longest prefix
match for the same reason (``--schedule-policy lpm``).

Before that, a request whose best replica is full while others have room may be *held* for it a short while
(:meth:`ModelGate.hold_for`): not queued, not counted as waiting, and never ahead of the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

RETRY_SECONDS = 0.05
"""How often the front of the queue asks again while no local release wakes it."""
POLLING_WAITERS = 16
"""The waiters at the front of the queue that ask again every :data:`RETRY_SECONDS` for the replicas they prefer:
slots other workers and gateways give back are seen only by asking. The rest sleep until offered a slot."""
HEAD_PATIENCE_SECONDS = 4 * RETRY_SECONDS
"""How long the queue's head waits for a replica it prefers before it takes a slot anywhere: long enough for another
worker's waiter preferring a slot given back to ask for it first."""

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


@dataclass
class Turn:
    """A queued request's place in line, as its attempts see it."""

    anywhere: bool
    """It may take a slot on any replica (first in line, with no replica to prefer or after
    :data:`HEAD_PATIENCE_SECONDS`); else only on one it :attr:`prefers`."""
    prefers: frozenset[str] = frozenset()
    """The replicas it waits for, as its last attempt ranked them (set by the attempt); empty when no prefix makes
    one better than another."""
    others_want: frozenset[str] = frozenset()
    """When it may take any replica: those the other requests of this queue prefer (set by the queue). Taking
    any replica means, for a request that prefers some, any that no request waits for: one another waits for is that
    request's, and taking it costs this request's prefill there and evicts what the replica held for the other."""


@dataclass(eq=False)
class _Waiter:
    turn: Turn
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    offered: bool = False
    """Woken for a slot freed on a replica it prefers (else only the front of the queue attempts)."""
    head_since: float | None = None
    """When it became first in line."""


class ModelGate:
    """The bounded queue in front of one model's slots."""

    def __init__(self, queue_max: int, queue_timeout: float, on_change: Callable[[], None]) -> None:
        self.queue_max = queue_max
        self.queue_timeout = queue_timeout
        self._waiters: deque[_Waiter] = deque()
        self._holders: list[asyncio.Event] = []
        self._on_change = on_change

    @property
    def waiting(self) -> int:
        """Requests queued for a slot."""
        return len(self._waiters)

    async def admit(self, attempt: Callable[[Turn], Awaitable[T | None]]) -> T | None:
        """``attempt(turn)``'s slot, now or after waiting in the queue; None when refused (queue full or timed out).

        A request arriving behind others first tries the replicas it prefers (a slot free there is one the head
        passed over or has not seen yet), then queues."""
        waiter = _Waiter(Turn(anywhere=not self._waiters))
        taken = await attempt(waiter.turn)
        if taken is not None:
            return taken
        if len(self._waiters) >= self.queue_max:
            return None
        self._waiters.append(waiter)
        self._on_change()
        deadline = time.monotonic() + self.queue_timeout
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                waiter.wake.clear()  # before the attempt: a release while it runs wakes the next wait at once
                position = next(
                    (i for i, w in enumerate(itertools.islice(self._waiters, POLLING_WAITERS)) if w is waiter), None
                )
                polling = position is not None
                if position == 0 and waiter.head_since is None:
                    waiter.head_since = time.monotonic()
                waiter.turn.anywhere = self._may_take_any(waiter)
                if waiter.turn.anywhere:
                    waiter.turn.others_want = self.wants(besides=waiter)
                if polling or waiter.offered:
                    offered, waiter.offered = waiter.offered and not waiter.turn.anywhere, False
                    taken = await attempt(waiter.turn)
                    if taken is not None:
                        return taken
                    if offered:  # its attempt no longer wanted the slot (the ranking moved): the head may
                        self._waiters[0].wake.set()
                    remaining = deadline - time.monotonic()
                poll = min(RETRY_SECONDS, remaining) if polling else remaining
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wake.wait(), max(poll, 0.0))
            return None
        finally:
            self._waiters.remove(waiter)
            if self._waiters:
                self._waiters[0].wake.set()  # the next in line tries at once
            if len(self._waiters) >= POLLING_WAITERS:
                self._waiters[POLLING_WAITERS - 1].wake.set()  # now at the front: it starts asking
            self._on_change()

    def wants(self, besides: _Waiter | None = None) -> frozenset[str]:
        """The replicas some queued request (other than ``besides``) prefers."""
        return frozenset().union(*(w.turn.prefers for w in self._waiters if w is not besides))

    def _may_take_any(self, waiter: _Waiter) -> bool:
        """First in line with no replica to prefer, or for :data:`HEAD_PATIENCE_SECONDS`."""
        if not self._waiters or self._waiters[0] is not waiter:
            return False
        if not waiter.turn.prefers:  # even before its first turn as head: a slot freed now is its
            return True
        return waiter.head_since is not None and time.monotonic() - waiter.head_since >= HEAD_PATIENCE_SECONDS

    async def hold_for(self, attempt: Callable[[Hold], Awaitable[T | None]]) -> T | None:
        """``attempt(hold)``'s slot, tried now and again on every release (and every :data:`RETRY_SECONDS`) for as
        long as the attempts set ``hold.patience``; None then, or at once when requests queue (every replica was
        full: the queue decides who goes first)."""
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

    def released(self, endpoint: str | None = None) -> bool:
        """A slot of this processor came free (on ``endpoint`` when known): the oldest waiter preferring that
        replica, else the queue's head if it may take any replica, and every request held for a replica try at once.
        False when no request here wants the slot now (none queued or held included): the caller gives it back to
        the store, where another worker's requests may take it (kept while nothing here waited, a pod's other worker
        found the replica full and spilled: see :mod:`.slots`)."""
        for release in self._holders:
            release.set()
        if not self._waiters:
            return bool(self._holders)  # a request held for its replica may take the slot here
        head = self._waiters[0]
        if endpoint is None:
            return self._wake(head)
        return self.offer(endpoint) or (self._may_take_any(head) and self._wake(head))

    def offer(self, endpoint: str) -> bool:
        """Wake the oldest waiter preferring ``endpoint``, where a slot came free (here, or given back to the store
        by another worker); False when none prefers it. The queue's head is not woken for a slot another worker
        freed even when it may take any replica: the waiters preferring it, of every worker, ask first."""
        chosen = next((w for w in self._waiters if endpoint in w.turn.prefers), None)
        return chosen is not None and self._wake(chosen)

    def _wake(self, waiter: _Waiter) -> bool:
        waiter.offered = waiter is not self._waiters[0]
        waiter.wake.set()
        return True
