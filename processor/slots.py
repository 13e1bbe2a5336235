"""Per-replica in-flight slots shared by every processor of every gateway replica, in the platform's Redis/Valkey.

A replica must never be sent more than its ``max_num_seqs`` at once, however many gateway pods and workers run (the
gateway autoscales). Each replica has a sorted set of the requests holding one of its slots (member
``<processor>|<request>``), and each model a sorted set of live processors scored by when their lease expires
(renewed every :data:`HEARTBEAT_SECONDS`; Redis's own clock, so pod clocks never matter). Taking a slot is one
script: walk the router's ranked replicas and take the first whose requests from live processors number fewer than
the cap. A processor that dies stops counting when its lease lapses: its requests died with it.

Giving a slot back removes the request's member, which is idempotent: when taking a slot times out the processor
cannot know whether the script ran, so it removes the member from every ranked replica (a slot taken after all is
never leaked), and the request falls back as below.

All of a model's keys share a Redis Cluster hash slot (``{model}`` hash tag), so the script runs on clustered
Valkey too.

Failure mode (docs/gateway.md, "Routing to replicas"): one answer slower than ``slot_store_timeout_seconds`` (a busy
moment) means no slot this time: the request waits in the queue and tries again. After
:data:`FAILURES_BEFORE_FALLBACK` failures in a row (Redis down, or slow for good) the processor falls back, for
:data:`FALLBACK_SECONDS` at a time, to a fixed share of every replica, ``ModelConfig.fallback_share``
(``max_num_seqs`` split over the most gateway workers that may run), so the bound holds at lower utilisation; each
fallback is counted.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import socket
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

LEASE_SECONDS = 15
"""A processor that has not renewed its lease for this long no longer counts (its pod is gone)."""
HEARTBEAT_SECONDS = 3.0
FAILURES_BEFORE_FALLBACK = 3
FALLBACK_SECONDS = 5.0
"""How long the fallback share is used before the store is tried again."""
MEMBER_TTL_MS = 86_400_000
"""A replica's set outlives its last use by a day at most (pods come and go with new addresses)."""

ACQUIRE_SCRIPT = """
local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local live, me, cap, member = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[4]
redis.call('ZADD', live, now_ms + tonumber(ARGV[3]), me)
for i = 2, #KEYS do
  local total = 0
  for _, holder in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
    local expiry = redis.call('ZSCORE', live, string.match(holder, '^[^|]*'))
    if expiry and tonumber(expiry) > now_ms then
      total = total + 1
    else
      redis.call('ZREM', KEYS[i], holder)
    end
  end
  if total < cap then
    redis.call('ZADD', KEYS[i], now_ms, member)
    redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[5]))
    return i - 1
  end
end
return 0
"""
"""KEYS: the model's live set, then the ranked replicas' sets; ARGV: this processor, the cap, the lease (ms), the
request's member, the sets' expiry (ms). Returns the 1-based position of the replica taken, 0 when all are full."""

HEARTBEAT_SCRIPT = """
local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], now_ms + tonumber(ARGV[2]), ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now_ms)
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 4)
end
return 0
"""


def processor_id() -> str:
    """This process's name in the slot store: pod, pid and a random part (a restarted pid is a new processor)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Slot:
    """A slot one request holds on one replica."""

    __slots__ = ("endpoint", "member", "shared")

    def __init__(self, endpoint: str, member: str, shared: bool) -> None:
        self.endpoint = endpoint
        self.member = member
        self.shared = shared
        """Held in the shared store (else in this processor's fallback share)."""


class SlotStore:
    """Takes and gives back per-replica slots; Redis when it answers in time, this processor's share when not."""

    def __init__(
        self,
        redis: Redis | None,
        key_prefix: str,
        on_fallback: Callable[[str], None],
        *,
        processor: str | None = None,
        lease_seconds: float = LEASE_SECONDS,
        timeout_seconds: float = 0.5,
    ) -> None:
        self._redis = redis
        self._prefix = key_prefix
        self._on_fallback = on_fallback
        self.processor = processor or processor_id()
        self._lease_ms = int(lease_seconds * 1000)
        self._heartbeat_seconds = min(HEARTBEAT_SECONDS, lease_seconds / 3)
        self._timeout = timeout_seconds
        self._requests = itertools.count()
        self._local: dict[tuple[str, str], int] = {}
        self._acquire = redis.register_script(ACQUIRE_SCRIPT) if redis is not None else None
        self._heartbeat = redis.register_script(HEARTBEAT_SCRIPT) if redis is not None else None
        self._pending: set[asyncio.Task[Any]] = set()
        self._failures = 0
        self._down_until = 0.0

    def _live_key(self, model: str) -> str:
        return f"{self._prefix}slots:{{{model}}}:live"

    def _slot_key(self, model: str, endpoint: str) -> str:
        return f"{self._prefix}slots:{{{model}}}:{endpoint}"

    async def acquire(self, model: str, ranked: Sequence[str], cap: int, fallback_cap: int) -> Slot | None:
        """A slot on the first of ``ranked`` with room; None when all are full."""
        if not ranked:
            return None
        member = f"{self.processor}|{next(self._requests)}"
        loop = asyncio.get_running_loop()
        if self._acquire is not None and loop.time() >= self._down_until:
            keys = [self._live_key(model), *(self._slot_key(model, e) for e in ranked)]
            try:
                position = int(
                    await asyncio.wait_for(
                        self._acquire(keys=keys, args=[self.processor, cap, self._lease_ms, member, MEMBER_TTL_MS]),
                        self._timeout,
                    )
                )
            except (RedisError, OSError, TimeoutError) as error:
                self._forget(model, ranked, member)  # in case the script ran after all
                self._failures += 1
                if self._failures < FAILURES_BEFORE_FALLBACK:
                    log.warning("slot store did not answer (%r): no slot this time", error)
                    return None
                log.warning("slot store unavailable (%r): this processor's share of each replica for a while", error)
                self._down_until = loop.time() + FALLBACK_SECONDS
            else:
                self._failures = 0
                return Slot(ranked[position - 1], member, True) if position else None
        if self._acquire is not None:
            self._on_fallback(model)
        for endpoint in ranked:
            if self._local.get((model, endpoint), 0) < fallback_cap:
                self._local[(model, endpoint)] = self._local.get((model, endpoint), 0) + 1
                return Slot(endpoint, member, False)
        return None

    def release(self, model: str, slot: Slot) -> None:
        """Give a slot back (in the background when shared: the response has already left)."""
        if not slot.shared:
            count = self._local.get((model, slot.endpoint), 0) - 1
            if count > 0:
                self._local[(model, slot.endpoint)] = count
            else:
                self._local.pop((model, slot.endpoint), None)
            return
        self._forget(model, (slot.endpoint,), slot.member)

    def _forget(self, model: str, endpoints: Sequence[str], member: str) -> None:
        if self._redis is None:
            return
        task = asyncio.ensure_future(self._remove(model, endpoints, member))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _remove(self, model: str, endpoints: Sequence[str], member: str) -> None:
        assert self._redis is not None
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for endpoint in endpoints:
                    pipe.zrem(self._slot_key(model, endpoint), member)
                await asyncio.wait_for(pipe.execute(), self._timeout * 4)
        except (RedisError, OSError, TimeoutError) as error:  # the lease lapsing frees it in the end
            log.warning("cannot give back a slot of %s: %s", model, error)

    async def heartbeat(self, models: Sequence[str]) -> None:
        """Renew this processor's lease for every model, forever (cancelled at shutdown)."""
        if self._heartbeat is None:
            return
        keys = [self._live_key(m) for m in models]
        while True:
            try:
                await asyncio.wait_for(self._heartbeat(keys=keys, args=[self.processor, self._lease_ms]), self._timeout)
            except (RedisError, OSError, TimeoutError) as error:
                log.warning("cannot renew the slot lease: %s", error)
            await asyncio.sleep(self._heartbeat_seconds)

    async def drain(self) -> None:
        """Wait for slots being given back (shutdown)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
