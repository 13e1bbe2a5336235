"""Which replicas the other processor workers' queued requests wait for, so that a request allowed to take any
replica takes one nobody waits for.

Each worker keeps its own admission queue (:mod:`.admission`). Its head, once it may take any replica (it prefers
none, or has been first in line ``HEAD_PATIENCE_SECONDS``), took the first free slot anywhere, and every other
worker's head did the same: on a replica whose prefix other requests were waiting for, it computed its own prefix
there, evicting theirs, and took the slot one of them would have had. Past the fleet's capacity behind three gateways
(six workers) a fifth of the engines' prompt tokens were computed again: the engines served 78.6-79.7% from cache
against 91.9% behind one gateway (``docs/simulate.md``). Now such a request takes a replica some other request of
any worker prefers only when it prefers that replica too (one preferring none, its prefix's home passed over for
load, has no replica's line to wait in and takes any): 84.4-85.3% from cache and 3,381-3,588 output tokens/s
against 2,699 (three runs each), and against Dynamo's KV router's 2,438-3,135 behind three of its frontends.

Each worker tells the others (over the pod's watcher socket and the gateway's picks channel, :mod:`.watch`), every
:data:`SEND_SECONDS` while it changes and every :data:`KEEPALIVE_SECONDS` while it does not and is not empty, the
replicas its queued requests prefer (:meth:`~inferplane.processor.admission.ModelGate.wants`). What a worker heard
last from another counts for :data:`STALE_SECONDS` (a worker gone stops counting). Tried as well and left out: each
freed slot sent to the worker whose request preferring its replica had waited longest (a global order per replica,
the slot crossing workers through the store): the same throughput and hit share within the runs' spread, and one
more round trip to the store for most slots.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

SEND_SECONDS = 0.05
"""How often a worker sends what its queue waits for, when it changed."""
KEEPALIVE_SECONDS = 0.5
"""How often a worker sends what its queue waits for while it does not change (and is not empty)."""
STALE_SECONDS = 1.5
"""How long what a worker last sent counts: three keepalives."""


@dataclass(frozen=True)
class _Heard:
    at: float
    """When it was heard (this worker's monotonic clock)."""
    wants: frozenset[str]
    """The replicas that worker's queued requests prefer."""


class PeerQueues:
    """What every other worker last said its queue waits for, per model."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heard: dict[str, dict[str, _Heard]] = {}

    def heard(self, model: str, worker: str, wants: frozenset[str]) -> None:
        """``worker`` said its queue of ``model`` waits for ``wants`` (replaces what it said before)."""
        self._heard.setdefault(model, {})[worker] = _Heard(self._clock(), wants)

    def wanted(self, model: str) -> frozenset[str]:
        """The replicas some other worker's queued request prefers (what is stale dropped)."""
        heard = self._heard.get(model)
        if not heard:
            return frozenset()
        now = self._clock()
        for worker in [w for w, said in heard.items() if now - said.at > STALE_SECONDS]:
            del heard[worker]
        return frozenset().union(*(said.wants for said in heard.values()))
