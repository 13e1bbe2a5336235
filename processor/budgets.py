"""Per-tenant budgets shared by every gateway replica: requests and tokens per minute, in Redis/Valkey.

Fixed one-minute windows keyed ``<prefix><tenant>:<kind>:<minute>`` hold what every replica has taken from a
tenant's budget. A replica does not ask Redis once per request: it *leases* a slice of the budget (requests and
prompt tokens) in one atomic round trip and admits from that slice locally until it runs dry, the way Envoy's rate
limit quota service hands out quota. A slice is sized from the tenant's recent traffic on this replica (about
:data:`SLICE_SECONDS` of it) and never more than :data:`SLICE_MAX_FRACTION` of what the window still has free, so:

* nothing is ever admitted beyond the budget: every permit a replica hands out was counted in Redis first;
* at low rates a slice is one request and exactly its prompt's tokens, so the budget is exact request by request;
* under load Redis sees about ``1 / SLICE_SECONDS`` leases per tenant per replica, not one call per request (the
  round trip cost the processor more CPU than everything else it does for a request);
* what a replica leased and did not use is at most one slice; it goes back to Redis after
  :data:`IDLE_RETURN_SECONDS` without traffic and on shutdown, and a window's leftovers lapse with the window.

When the response's ``usage`` arrives the prompt reservation is corrected to the real prompt + completion count
(summed in memory, written every :data:`FLUSH_SECONDS`). Redis unreachable or slow (beyond
``redis_timeout_seconds``): the shared budgets fail OPEN (the request goes on,
``processor_errors_total{stage="redis"}`` counts it) and Envoy's per-replica request bucket still holds.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

WINDOW_SECONDS = 60
KEY_TTL_SECONDS = 2 * WINDOW_SECONDS
FLUSH_SECONDS = 0.1
"""Token corrections (usage minus the reservation) and idle slices reach Redis within this delay."""
SLICE_SECONDS = 0.1
"""A lease covers about this long of the tenant's recent traffic on this replica."""
SLICE_MAX_FRACTION = 0.1
"""A lease takes at most this share of what the window still has free (at least what the request needs), so the
replicas of a gateway together can strand only a small part of a tenant's budget."""
IDLE_RETURN_SECONDS = 1.0
LEASE_ABANDONED = -1
"""A lease's outcome when its request went away mid-flight (its waiters look again and lease themselves)."""
"""A slice unused this long goes back to Redis for the other replicas."""

LEASE_SCRIPT = """
local used_requests = tonumber(redis.call('GET', KEYS[1]) or '0')
local used_tokens = tonumber(redis.call('GET', KEYS[2]) or '0')
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local need_requests, want_requests = tonumber(ARGV[3]), tonumber(ARGV[4])
local need_tokens, want_tokens = tonumber(ARGV[5]), tonumber(ARGV[6])
local fraction = tonumber(ARGV[7])
if need_requests > 0 and used_requests + need_requests > rpm then return {1, 0, 0} end
if need_tokens > 0 and used_tokens > 0 and used_tokens + need_tokens > tpm then return {2, 0, 0} end
local requests = math.min(want_requests, math.max(need_requests, math.floor((rpm - used_requests) * fraction)))
local tokens = math.min(want_tokens, math.max(need_tokens, math.floor((tpm - used_tokens) * fraction)))
if requests > 0 and redis.call('INCRBY', KEYS[1], requests) == requests then
  redis.call('EXPIRE', KEYS[1], ARGV[8])
end
if tokens > 0 and redis.call('INCRBY', KEYS[2], tokens) == tokens then
  redis.call('EXPIRE', KEYS[2], ARGV[8])
end
return {0, requests, tokens}
"""
"""KEYS: the tenant's request and token counters of this window. ARGV: requests/min, tokens/min, the requests and
tokens this admission needs, the slice wanted of each, :data:`SLICE_MAX_FRACTION`, the keys' TTL. Returns
``{verdict, requests granted, tokens granted}``: verdict 0 granted (at least what was needed), 1 over the request
budget, 2 over the token budget (a prompt alone may take a window nobody has used yet, however large, up to the
whole budget: the caller refuses larger ones without asking)."""


@dataclass(frozen=True)
class Verdict:
    """A budget decision: ``retry_after`` is None when the request may go on."""

    retry_after: int | None
    redis_ok: bool = True


@dataclass
class _Slice:
    """What this replica holds of one tenant's budget in one window, and how fast it spends it."""

    window: int
    requests: int = 0
    tokens: int = 0
    leased_at: float = 0.0
    spent_requests: int = 0
    """Requests admitted from the slice since the last lease (the rate that sizes the next one)."""
    spent_tokens: int = 0
    last_used: float = 0.0
    refill: asyncio.Future[int | None] | None = field(default=None, repr=False)
    """Set while a lease for this tenant is in flight: other requests wait for it instead of leasing too. Its
    result is the lease's verdict (None: Redis failed, and the waiters fail open at once rather than queue behind
    one timeout after another)."""


class SharedBudgets:
    """Request and token budgets per tenant and minute, leased from Redis in slices."""

    def __init__(
        self,
        redis: Redis | None,
        prefix: str,
        on_error: Callable[[], None],
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._on_error = on_error
        self._clock = clock
        self._monotonic = monotonic
        self._script: AsyncScript | None = None
        self._slices: dict[str, _Slice] = {}
        self._pending: dict[str, int] = {}
        self._flusher: asyncio.Future[None] | None = None
        self.leases = 0
        """Lease round trips made so far (the benchmark and tests read it)."""

    def _window(self) -> tuple[int, int]:
        now = self._clock()
        window = int(now // WINDOW_SECONDS)
        retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
        return window, retry_after

    def _key(self, tenant: str, kind: str, window: int) -> str:
        return f"{self._prefix}{tenant}:{kind}:{window}"

    def _slice(self, tenant: str, window: int) -> _Slice:
        held = self._slices.get(tenant)
        if held is None or held.window != window:
            # a new window: the old slice's leftovers lapse with their keys; the spending rate carries over
            fresh = _Slice(window)
            if held is not None:
                fresh.leased_at, fresh.spent_requests, fresh.spent_tokens = (
                    held.leased_at,
                    held.spent_requests,
                    held.spent_tokens,
                )
            self._slices[tenant] = held = fresh
        return held

    async def admit(
        self, tenant: str, requests_per_minute: int, tokens_per_minute: int, prompt_tokens: int
    ) -> tuple[Verdict, str]:
        """Count one request and reserve its prompt tokens: from this replica's slice when it holds enough,
        else by leasing a new slice (one atomic round trip). A refusal says which budget
        (``requests_per_minute`` or ``tokens_per_minute``) and when the window turns."""
        if self._redis is None:
            return Verdict(None, redis_ok=False), ""
        if prompt_tokens > tokens_per_minute:  # larger than a whole minute's budget: it never fits
            return Verdict(WINDOW_SECONDS), "tokens_per_minute"
        while True:
            window, retry_after = self._window()
            held = self._slice(tenant, window)
            if held.requests >= 1 and held.tokens >= prompt_tokens:
                held.requests -= 1
                held.tokens -= prompt_tokens
                held.spent_requests += 1
                held.spent_tokens += prompt_tokens
                held.last_used = self._monotonic()
                return Verdict(None), ""
            if held.refill is not None:  # another request of this tenant is leasing: wait, then look again
                if await asyncio.shield(held.refill) is None:
                    return Verdict(None, redis_ok=False), ""
                continue
            refill = held.refill = asyncio.get_running_loop().create_future()
            verdict: int | None = LEASE_ABANDONED
            try:
                verdict = await self._lease(tenant, held, requests_per_minute, tokens_per_minute, prompt_tokens)
            finally:
                refill.set_result(verdict)
                held.refill = None
            if verdict == 1:
                return Verdict(retry_after), "requests_per_minute"
            if verdict == 2:
                return Verdict(retry_after), "tokens_per_minute"
            if verdict is None:
                return Verdict(None, redis_ok=False), ""

    async def _lease(
        self, tenant: str, held: _Slice, requests_per_minute: int, tokens_per_minute: int, prompt_tokens: int
    ) -> int | None:
        """Lease at least what one request needs, and about :data:`SLICE_SECONDS` of recent traffic, into
        ``held``; the verdict (0 granted, 1/2 refused), or None when Redis failed (fail open)."""
        assert self._redis is not None
        if self._script is None:
            self._script = self._redis.register_script(LEASE_SCRIPT)
        now = self._monotonic()
        elapsed = max(now - held.leased_at, 1e-3)
        need_requests = 0 if held.requests >= 1 else 1
        need_tokens = max(0, prompt_tokens - held.tokens)
        want_requests = max(need_requests, math.ceil(held.spent_requests / elapsed * SLICE_SECONDS))
        want_tokens = max(need_tokens, math.ceil(held.spent_tokens / elapsed * SLICE_SECONDS))
        keys = [self._key(tenant, "req", held.window), self._key(tenant, "tok", held.window)]
        args = [
            requests_per_minute,
            tokens_per_minute,
            need_requests,
            want_requests,
            need_tokens,
            want_tokens,
            SLICE_MAX_FRACTION,
            KEY_TTL_SECONDS,
        ]
        self.leases += 1
        try:
            verdict, requests, tokens = await self._script(keys=keys, args=args)
        except (RedisError, OSError, TimeoutError):
            self._on_error()
            return None
        if verdict == 0:
            held.requests += int(requests)
            held.tokens += int(tokens)
            held.leased_at = now
            held.spent_requests = held.spent_tokens = 0
            held.last_used = now
            self._schedule_flush()
        return int(verdict)

    def add_tokens(self, tenant: str, tokens: int) -> None:
        """Add (or, negative, return) tokens to the tenant's current window. Corrections are summed in memory and
        written every :data:`FLUSH_SECONDS` in one pipeline (not one Redis round trip per request)."""
        if self._redis is None or tokens == 0:
            return
        window, _ = self._window()
        key = self._key(tenant, "tok", window)
        self._pending[key] = self._pending.get(key, 0) + tokens
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_later())

    async def _flush_later(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush(everything=False)
            if not self._pending and not any(s.requests or s.tokens for s in self._slices.values()):
                return

    def _return_slices(self, everything: bool) -> None:
        """Queue what slices idle for :data:`IDLE_RETURN_SECONDS` (or all, on shutdown) hold for Redis."""
        now = self._monotonic()
        window, _ = self._window()
        for tenant, held in self._slices.items():
            if not (held.requests or held.tokens) or held.refill is not None:
                continue
            if held.window != window:  # lapsed with its window
                held.requests = held.tokens = 0
                continue
            if everything or now - held.last_used >= IDLE_RETURN_SECONDS:
                for kind, amount in (("req", held.requests), ("tok", held.tokens)):
                    if amount:
                        key = self._key(tenant, kind, held.window)
                        self._pending[key] = self._pending.get(key, 0) - amount
                held.requests = held.tokens = 0

    async def aclose(self) -> None:
        """Give back every slice, write what is pending and stop the background flusher (shutdown)."""
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
        await self.flush()

    async def flush(self, *, everything: bool = True) -> None:
        """Write the summed corrections and idle slices now (``everything``: every slice, as on shutdown)."""
        self._return_slices(everything)
        pending, self._pending = self._pending, {}
        if self._redis is None or not pending:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for key, tokens in pending.items():
                    pipe.incrby(key, tokens)
                    pipe.expire(key, KEY_TTL_SECONDS)
                await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            self._on_error()
