"""Per-replica in-flight slots shared by every processor of every gateway replica, in the platform's Redis/Valkey.

A replica must never be sent more than its ``max_num_seqs`` at once, however many gateway pods and workers run (the
gateway autoscales). Each replica has a hash in Redis, ``<prefix>slots:{<model>}:leases:<ip:port>``, holding how many of
its slots each processor *leases*; each model a sorted set of live processors scored by when their lease on the
store expires (renewed every :data:`HEARTBEAT_SECONDS`; Redis's own clock, so pod clocks never matter).

A processor puts requests only on slots it leases, so the leases' sum, never above the cap, bounds what every gateway
sends. A request takes a free slot this processor leases on a replica it prefers, else asks the store (one script: walk
the preferred replicas and lease one more slot on the first whose live leases number fewer than the cap). A slot a
request frees goes to a request of this processor waiting for its replica (:mod:`~inferplane.processor.admission`), else
back to the store at once (:meth:`SlotStore.give_back`, in the background), unless the replica is quiet
(:meth:`SlotStore.keeps`): then one free slot stays leased for this processor's next request, which takes it with no
round trip, until a read of the replicas finds the replica busy (:meth:`SlotStore.busy`). Two round trips, to lease and
give back, cost the processor 0.39 ms of CPU a request, against 0.06 ms for all of routing with the slot kept
(``benchmarks/routing_cpu.py``). Freed slots used to stay leased whatever the replica's load, until a trim found them
unneeded; but then the pod's other worker, and every other gateway, found a busy replica full while its slots sat free
in this one, and spilled requests to a replica without their prefix, which computed it again and evicted another's. On
the simulated fleet past its capacity (8 replicas of prod's 70B, 20 shared 6,144-token prefixes, 40 requests/s offered;
``docs/simulate.md``), one gateway of two workers spilled 143 of 2,403 requests and its engines served 89.0% of prompt
tokens from cache, where with every slot given back 17 and 94.5%, as with one worker alone (one run each, back to back);
over three runs each in one hour, 33-106 spills and 93.4% before, 11-24 and 94.5% with slots given back and kept on
quiet replicas; behind three gateways, 84.5% before and 88.0% after (median of six runs). Every :data:`TRIM_SECONDS` the
processor still returns what it leased and no request needed since the last trim (a slot a woken waiter passed over, a
lease granted late): the low-water mark of its free leased slots. Trims are decrements (``HINCRBY``), which commute with
a lease being granted meanwhile.

A processor that dies stops counting when its lease on the store lapses: its requests died with it. One that comes
back after its lease lapsed (a partition longer than the lease) finds its counts dropped, and writes back what its
requests in flight really hold.

Failure mode (docs/gateway.md, "Routing to replicas"): one answer slower than ``slot_store_timeout_seconds`` (a busy
moment) means no new lease this time: the request takes a slot it already leases on a less preferred replica, or
waits in the queue and tries again. The processor cannot know whether a late script ran, so each script leaves a
grant token naming the replica it leased on; :data:`RECONCILE_AFTER_SECONDS` later the processor reads the token and
counts a lease granted late as its own (free, so the next trim returns it): a slot is never leaked. Every change of
a count is an increment, so the store and the processors agree whatever the order of their commands; only the
write-back after a lapse sets a count, and waits until no script of the model is in flight. After
:data:`FAILURES_BEFORE_FALLBACK` failures in a row (Redis down, or slow for good) the processor falls back, for
:data:`FALLBACK_SECONDS` at a time, to a fixed share of every replica, ``ModelConfig.fallback_share``
(``max_num_seqs`` split over the most gateway workers that may run), so the bound holds at lower utilisation; each
fallback is counted.

All of a model's keys share a Redis Cluster hash slot (``{model}`` hash tag), so the scripts run on clustered Valkey
too.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

LEASE_SECONDS = 15
"""A processor that has not renewed its lease on the store for this long no longer counts (its pod is gone)."""
HEARTBEAT_SECONDS = 3.0
TRIM_SECONDS = 2.0
"""How long a leased slot may stay unneeded before it goes back to the store."""
KEEP_BELOW_SHARE = 0.5
"""A slot freed while nothing of this processor waits stays leased for its next request (no round trip) only while
the replica's engine ran fewer than this share of its ``max_num_seqs`` at the last scrape and this processor keeps no
other free slot there; else it goes back to the store at once (:meth:`SlotStore.keeps`)."""
RECONCILE_AFTER_SECONDS = 1.0
"""How long after a timed-out script its grant token is read (a late script has run by then)."""
GRANT_TOKEN_TTL_MS = 60_000
FAILURES_BEFORE_FALLBACK = 3
FALLBACK_SECONDS = 5.0
"""How long the fallback share is used before the store is tried again."""
MEMBER_TTL_MS = 86_400_000
"""A replica's hash outlives its last use by a day at most (pods come and go with new addresses)."""

LEASE_SCRIPT = """
local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local live, me, cap = KEYS[1], ARGV[1], tonumber(ARGV[2])
local expiry = redis.call('ZSCORE', live, me)
local lapsed = 0
if not expiry or tonumber(expiry) <= now_ms then
  lapsed = 1
end
redis.call('ZADD', live, now_ms + tonumber(ARGV[3]), me)
for i = 3, #KEYS do
  local total = 0
  local held = redis.call('HGETALL', KEYS[i])
  for j = 1, #held, 2 do
    local until_ms = redis.call('ZSCORE', live, held[j])
    if until_ms and tonumber(until_ms) > now_ms then
      total = total + tonumber(held[j + 1])
    else
      redis.call('HDEL', KEYS[i], held[j])
    end
  end
  if total < cap then
    redis.call('HINCRBY', KEYS[i], me, 1)
    redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[4]))
    redis.call('SET', KEYS[2], i - 2, 'PX', tonumber(ARGV[5]))
    return {i - 2, lapsed}
  end
end
return {0, lapsed}
"""
"""KEYS: the model's live set, this call's grant token, then the preferred replicas' hashes in order; ARGV: this
processor, the cap, the lease (ms), the hashes' expiry (ms), the token's expiry (ms). Leases one slot on the first
replica with room and returns its 1-based position (0 when all are full; also left in the token) and whether this
processor's lease on the store had lapsed (or never existed)."""

GIVE_BACK_SCRIPT = """
redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
redis.call('SET', KEYS[2], 1, 'PX', tonumber(ARGV[2]))
"""
"""KEYS: the replica's hash, this call's token; ARGV: this processor, the token's expiry (ms). Gives one leased slot
back and leaves the token, so a processor that gave up waiting learns later whether it ran."""

HEARTBEAT_SCRIPT = """
local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local lapsed = {}
for i = 1, #KEYS do
  local expiry = redis.call('ZSCORE', KEYS[i], ARGV[1])
  if not expiry or tonumber(expiry) <= now_ms then
    table.insert(lapsed, i)
  end
  redis.call('ZADD', KEYS[i], now_ms + tonumber(ARGV[2]), ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now_ms)
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 4)
end
return lapsed
"""
"""KEYS: the models' live sets; ARGV: this processor, the lease (ms). Renews the lease; returns the 1-based positions
of the models where it had lapsed (or never existed), whose counts of this processor others may have dropped."""


def quiet(engine_active: float, cap: int) -> bool:
    """Whether a replica whose engine ran ``engine_active`` sequences at the last scrape is quiet enough for this
    processor to keep a free slot there (:data:`KEEP_BELOW_SHARE` of ``cap``)."""
    return engine_active < KEEP_BELOW_SHARE * cap


def processor_id() -> str:
    """This process's name in the slot store: pod, pid and a random part (a restarted pid is a new processor)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Slot:
    """A slot one request holds on one replica."""

    __slots__ = ("endpoint", "released", "shared")

    def __init__(self, endpoint: str, shared: bool) -> None:
        self.endpoint = endpoint
        self.shared = shared
        """Leased from the shared store (else taken from this processor's fallback share)."""
        self.released = False


@dataclass
class _Lease:
    """What this processor leases on one replica of one model."""

    leased: int = 0
    """Slots the store counts for this processor."""
    used: int = 0
    """Of which requests in flight hold."""
    low_water: int = 0
    """The fewest free leased slots since the last trim: that many were never needed."""

    @property
    def free(self) -> int:
        return self.leased - self.used

    def take(self) -> None:
        self.used += 1
        self.low_water = min(self.low_water, self.free)


@dataclass(frozen=True)
class _Unanswered:
    """A lease script that timed out: it may still have leased a slot on one of ``asked``; or a give-back that did
    (``given_back``): it may still have given back the slot on ``asked[0]``."""

    model: str
    token: str
    asked: tuple[str, ...]
    at: float
    given_back: bool = False


class SlotStore:
    """Takes and gives back per-replica slots: leased from Redis when it answers in time, this processor's share when
    not."""

    def __init__(
        self,
        redis: Redis | None,
        key_prefix: str,
        on_fallback: Callable[[str], None],
        *,
        processor: str | None = None,
        lease_seconds: float = LEASE_SECONDS,
        timeout_seconds: float = 0.5,
        trim_seconds: float = TRIM_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        on_given_back: Callable[[str, str], None] = lambda _model, _endpoint: None,
    ) -> None:
        """``on_given_back(model, endpoint)``: called once a slot :meth:`give_back` returned is in the store."""
        self._redis = redis
        self._on_given_back = on_given_back
        self._prefix = key_prefix
        self._on_fallback = on_fallback
        self.processor = processor or processor_id()
        self._lease_ms = int(lease_seconds * 1000)
        self._heartbeat_seconds = min(HEARTBEAT_SECONDS, lease_seconds / 3)
        self._trim_seconds = trim_seconds
        self._timeout = timeout_seconds
        self._clock = clock
        self._tokens = itertools.count()
        self._leases: dict[str, dict[str, _Lease]] = {}
        self._local: dict[tuple[str, str], int] = {}
        self._unanswered: list[_Unanswered] = []
        self._in_flight: dict[str, int] = {}
        self._rehold: set[str] = set()
        self._giving: set[asyncio.Task[None]] = set()
        self._lease_script = redis.register_script(LEASE_SCRIPT) if redis is not None else None
        self._give_back_script = redis.register_script(GIVE_BACK_SCRIPT) if redis is not None else None
        self._heartbeat = redis.register_script(HEARTBEAT_SCRIPT) if redis is not None else None
        self._failures = 0
        self._failure_seen = -math.inf
        """When the last counted failure was seen (see :meth:`_store_failed`)."""
        self._down_until = 0.0

    def _live_key(self, model: str) -> str:
        return f"{self._prefix}slots:{{{model}}}:live"

    def _slot_key(self, model: str, endpoint: str) -> str:
        return f"{self._prefix}slots:{{{model}}}:leases:{endpoint}"

    def _token_key(self, model: str, token: str) -> str:
        return f"{self._prefix}slots:{{{model}}}:grant:{token}"

    def leased(self, model: str, endpoint: str) -> int:
        """Slots this processor leases on ``endpoint`` (free or held)."""
        lease = self._leases.get(model, {}).get(endpoint)
        return 0 if lease is None else lease.leased

    def keeps(self, model: str, endpoint: str, engine_active: float, cap: int) -> bool:
        """Whether a slot just released on ``endpoint``, which nothing of this processor waits for, stays leased here:
        the replica quiet (``engine_active``, its engine's sequences at the last scrape, below
        :data:`KEEP_BELOW_SHARE` of ``cap``) and no other free slot kept there. A quiet replica has slots to spare
        for the other processors; on a busy one a slot kept here is one they find taken while it sits free."""
        lease = self._leases.get(model, {}).get(endpoint)
        return lease is not None and lease.free <= 1 and quiet(engine_active, cap)

    async def acquire(self, model: str, ranked: Sequence[str], cap: int, fallback_cap: int) -> Slot | None:
        """A slot on the first of ``ranked`` with room; None when all are full."""
        if not ranked:
            return None
        if self._lease_script is None or self._clock() < self._down_until:
            return self._from_share(model, ranked, fallback_cap)
        leases = self._leases.setdefault(model, {})
        free = next((i for i, e in enumerate(ranked) if (lease := leases.get(e)) and lease.free > 0), len(ranked))
        if free > 0:  # a replica preferred to every one with a free leased slot: ask the store for one there
            granted = await self._lease(model, tuple(ranked[:free]), cap)
            if granted is False:
                return self._from_share(model, ranked, fallback_cap)
            if isinstance(granted, Slot):
                return granted
        # Whatever ran while the script was out, the leases now: the most preferred free one.
        for endpoint in ranked:
            lease = leases.get(endpoint)
            if lease is not None and lease.free > 0:
                lease.take()
                return Slot(endpoint, True)
        return None

    async def _lease(self, model: str, preferred: tuple[str, ...], cap: int) -> Slot | bool | None:
        """Lease one slot on the first of ``preferred`` with room: the slot, None (all full, or no answer this
        time), or False (the store is down: use the fallback share)."""
        assert self._lease_script is not None
        token = f"{self.processor}:{next(self._tokens)}"
        keys = [self._live_key(model), self._token_key(model, token), *(self._slot_key(model, e) for e in preferred)]
        args: list[str | int] = [self.processor, cap, self._lease_ms, MEMBER_TTL_MS, GRANT_TOKEN_TTL_MS]
        self._in_flight[model] = self._in_flight.get(model, 0) + 1
        asked = self._clock()
        try:
            async with asyncio.timeout(self._timeout):
                position, lapsed = await self._lease_script(keys=keys, args=args)
        except (RedisError, OSError, TimeoutError) as error:
            self._unanswered.append(_Unanswered(model, token, preferred, self._clock()))
            return self._store_failed(model, error, asked)
        finally:
            self._in_flight[model] -= 1
        self._failures = 0
        if lapsed:
            self._lapsed(model)
        if not position:
            return None
        lease = self._leases[model].setdefault(preferred[int(position) - 1], _Lease())
        lease.leased += 1
        lease.take()
        return Slot(preferred[int(position) - 1], True)

    def _store_failed(self, model: str, error: BaseException, asked: float) -> bool | None:
        """Count a failed script asked at ``asked``: None (no new lease this time), or False once the store counts
        as down. A script asked before the last counted failure was seen failed in the same stall and is not counted
        again: one stall (of the store, or of this processor's own event loop, whose timeouts fire together when it
        resumes) caught every script then in flight, and counted one by one they sent a busy processor to its
        fallback share at once: behind three gateways on the simulated fleet, the two cores 94% busy and Redis never
        down, the share placed 589 of a run's 2,403 requests, each on whichever replica had a share slot left."""
        if asked < self._failure_seen:
            return None
        self._failure_seen = self._clock()
        self._failures += 1
        if self._failures < FAILURES_BEFORE_FALLBACK:
            log.warning("slot store did not answer (%r): no new lease this time", error)
            return None
        log.warning("slot store unavailable (%r): this processor's share of each replica for a while", error)
        self._down_until = self._clock() + FALLBACK_SECONDS
        return False

    def _lapsed(self, model: str) -> None:
        """The store had dropped this processor (its lease lapsed): others may have deleted its counts, so only what
        its requests hold is real; written back at the next trim."""
        for lease in self._leases.get(model, {}).values():
            lease.leased = lease.used
            lease.low_water = 0
        if self._leases.get(model):
            self._rehold.add(model)

    def _from_share(self, model: str, ranked: Sequence[str], fallback_cap: int) -> Slot | None:
        """With the store down: a free slot this processor still leases (the store counts it for no one else), else
        one of its share, where what it holds on the replica, leased or not, is within the share. The share alone
        let a processor whose requests held all its leases on a replica take one more there (vLLM ran 5 where the
        cap is 4 on a loaded machine: tests/e2e/test_gateway_e2e.py::test_inflight_cap_holds_at_vllm)."""
        if self._lease_script is not None:
            self._on_fallback(model)
        leases = self._leases.get(model, {})
        for endpoint in ranked:
            lease = leases.get(endpoint)
            if lease is not None and lease.free > 0:
                lease.take()
                return Slot(endpoint, True)
        for endpoint in ranked:
            lease = leases.get(endpoint)
            held = self._local.get((model, endpoint), 0) + (lease.used if lease is not None else 0)
            if held < fallback_cap:
                self._local[(model, endpoint)] = self._local.get((model, endpoint), 0) + 1
                return Slot(endpoint, False)
        return None

    def release(self, model: str, slot: Slot) -> None:
        """Give a slot back (idempotent). A leased slot stays leased until a trim finds it unneeded."""
        if slot.released:
            return
        slot.released = True
        if slot.shared:
            lease = self._leases.get(model, {}).get(slot.endpoint)
            if lease is not None:
                lease.used = max(0, lease.used - 1)
            return
        count = self._local.get((model, slot.endpoint), 0) - 1
        if count > 0:
            self._local[(model, slot.endpoint)] = count
        else:
            self._local.pop((model, slot.endpoint), None)

    def give_back(self, model: str, slot: Slot) -> None:
        """Return a released slot to the store at once (not at the next trim): none of this processor's queued
        requests wants its replica, and another processor's may (:mod:`~inferplane.processor.admission`). Sent in
        the background, then ``on_given_back`` called; when the store does not answer in time, a later trim finds
        out whether it ran and, when not, returns it again. Nothing when the slot is not this processor's to give
        back (its fallback share, or counts to be written back)."""
        if slot.shared:
            self._give_back_free(model, slot.endpoint, 1)

    def busy(self, model: str, endpoint: str, engine_active: float, cap: int) -> None:
        """After a read of the replicas' load: the free slots kept on ``endpoint`` (:meth:`keeps`) go back to the
        store when its engine is no longer quiet, where other processors' requests may need them."""
        if not quiet(engine_active, cap):
            lease = self._leases.get(model, {}).get(endpoint)
            if lease is not None:
                self._give_back_free(model, endpoint, lease.free)

    def _give_back_free(self, model: str, endpoint: str, count: int) -> None:
        """Give back up to ``count`` of the free slots leased on ``endpoint``, each in the background."""
        lease = self._leases.get(model, {}).get(endpoint)
        if self._redis is None or lease is None or model in self._rehold:
            return
        for _ in range(min(count, lease.free)):
            lease.leased -= 1
            lease.low_water = min(lease.low_water, lease.free)
            task = asyncio.get_running_loop().create_task(self._give_back(model, endpoint))
            self._giving.add(task)
            task.add_done_callback(self._giving.discard)

    async def _give_back(self, model: str, endpoint: str) -> None:
        """Give back one slot; one the store did not answer for in time may still be given back late (a stalled
        server runs what waits in its socket when it resumes): a trim :data:`RECONCILE_AFTER_SECONDS` later reads
        its token and leases it again here only when it never ran. Leased again at once, a give-back that ran late
        left the store counting one slot fewer than this processor used: one request above the replica's cap for as
        long as this processor lived."""
        assert self._give_back_script is not None
        token = f"{self.processor}:{next(self._tokens)}"
        keys = [self._slot_key(model, endpoint), self._token_key(model, token)]
        try:
            async with asyncio.timeout(self._timeout):
                await self._give_back_script(keys=keys, args=[self.processor, GRANT_TOKEN_TTL_MS])
        except (RedisError, OSError, TimeoutError) as error:
            log.warning("a slot given back was not answered for in time (%r): its token is read later", error)
            self._unanswered.append(_Unanswered(model, token, (endpoint,), self._clock(), given_back=True))
            return
        self._on_given_back(model, endpoint)

    async def trim(self) -> None:
        """Count the leases granted late, return every slot not needed since the last trim, and write back the
        counts of models where this processor's lease had lapsed."""
        if self._redis is None:
            return
        await self._reconcile()
        returns: list[tuple[str, str, int]] = []
        for model, leases in self._leases.items():
            for endpoint, lease in list(leases.items()):
                if lease.low_water > 0 and model not in self._rehold:
                    returns.append((model, endpoint, lease.low_water))
                    lease.leased -= lease.low_water
                lease.low_water = lease.free
                if lease.leased == 0 and model not in self._rehold:
                    del leases[endpoint]
        rehold = [m for m in self._rehold if not self._in_flight.get(m)]
        if not returns and not rehold:
            return
        try:
            async with asyncio.timeout(self._timeout * 4), self._redis.pipeline(transaction=False) as pipe:
                for model, endpoint, count in returns:
                    pipe.hincrby(self._slot_key(model, endpoint), self.processor, -count)
                for model in rehold:
                    for endpoint, lease in self._leases[model].items():
                        pipe.hset(self._slot_key(model, endpoint), self.processor, lease.leased)
                await pipe.execute()
        except (RedisError, OSError, TimeoutError) as error:
            # Counted high meanwhile, which keeps the bound; a lapse will make the counts be written back.
            log.warning("cannot give back leased slots: %s", error)
            return
        self._rehold.difference_update(rehold)

    async def _reconcile(self) -> None:
        """Read the grant tokens of scripts that timed out long enough ago; a lease granted late is this
        processor's (free: the next trim returns it)."""
        now = self._clock()
        due = [u for u in self._unanswered if now - u.at >= RECONCILE_AFTER_SECONDS]
        if not due or self._redis is None:
            return
        try:
            async with asyncio.timeout(self._timeout * 4), self._redis.pipeline(transaction=False) as pipe:
                for unanswered in due:
                    pipe.getdel(self._token_key(unanswered.model, unanswered.token))
                positions = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as error:
            log.warning("cannot read the slot store's grant tokens: %s", error)
            return
        for unanswered, position in zip(due, positions, strict=True):
            self._unanswered.remove(unanswered)
            if unanswered.given_back:  # never ran: the slot is still this processor's, and this trim returns it
                endpoint = None if position else unanswered.asked[0]
            else:  # a lease granted late: this processor's, never needed, and this trim returns it
                endpoint = unanswered.asked[int(position) - 1] if position else None
            if endpoint is not None:
                lease = self._leases.setdefault(unanswered.model, {}).setdefault(endpoint, _Lease())
                lease.leased += 1
                lease.low_water += 1

    async def renew(self, models: Sequence[str]) -> None:
        """Renew this processor's lease on the store; where it had lapsed, its counts are written back at the next
        trim."""
        assert self._heartbeat is not None
        lapsed = await self._heartbeat(keys=[self._live_key(m) for m in models], args=[self.processor, self._lease_ms])
        for position in lapsed:
            self._lapsed(models[int(position) - 1])

    async def heartbeat(self, models: Sequence[str]) -> None:
        """Renew this processor's lease on the store and trim its leased slots, forever (cancelled at shutdown)."""
        if self._heartbeat is None:
            return
        renewed = -1e9
        while True:
            try:
                async with asyncio.timeout(self._timeout * 8):
                    if self._clock() - renewed >= self._heartbeat_seconds:
                        await self.renew(models)
                        renewed = self._clock()
                    await self.trim()
            except (RedisError, OSError, TimeoutError) as error:
                log.warning("cannot renew the slot lease: %s", error)
            await asyncio.sleep(min(self._trim_seconds, self._heartbeat_seconds))

    async def drain(self) -> None:
        """Give every leased slot back (shutdown; best effort: the lease on the store lapsing frees them anyway)."""
        if self._redis is None or not any(self._leases.values()):
            return
        try:
            async with asyncio.timeout(self._timeout * 4), self._redis.pipeline(transaction=False) as pipe:
                for model, leases in self._leases.items():
                    for endpoint in leases:
                        pipe.hdel(self._slot_key(model, endpoint), self.processor)
                await pipe.execute()
        except (RedisError, OSError, TimeoutError) as error:
            log.warning("cannot give back leased slots at shutdown: %s", error)
        self._leases.clear()
