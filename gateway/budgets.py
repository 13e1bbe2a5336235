"""Per-tenant budgets shared by every gateway replica: requests and tokens per minute, in Redis/Valkey.

Fixed one-minute windows keyed ``<prefix><tenant>:<kind>:<minute>``: a request increments its tenant's request
counter and reserves its prompt tokens; when the response's ``usage`` arrives the reservation is corrected to the
real prompt + completion count. Every replica reads and writes the same keys, so a tenant's limit holds across
replicas. Redis unreachable or slow (beyond ``redis_timeout_seconds``): the shared budgets fail OPEN (the request
goes on, ``processor_errors_total{stage="redis"}`` counts it) and Envoy's per-replica request bucket still holds.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

WINDOW_SECONDS = 60
KEY_TTL_SECONDS = 2 * WINDOW_SECONDS
FLUSH_SECONDS = 0.1
"""Token corrections (usage minus the reservation) reach Redis within this delay."""

ADMIT_SCRIPT = """
local requests = redis.call('INCR', KEYS[1])
if requests == 1 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
if requests > tonumber(ARGV[1]) then return {1, requests} end
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
local prompt = tonumber(ARGV[3])
if prompt > tonumber(ARGV[2]) then return {3, used} end
if used > 0 and used + prompt > tonumber(ARGV[2]) then return {2, used} end
local total = redis.call('INCRBY', KEYS[2], prompt)
if total == prompt then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
return {0, total}
"""
"""KEYS: the tenant's request and token counters of this window; ARGV: requests/min, tokens/min, the prompt's
tokens, the keys' TTL. Returns {verdict, count}: 0 admitted (prompt reserved), 1 over the request budget, 2 over
the token budget, 3 a prompt larger than the whole token budget."""


@dataclass(frozen=True)
class Verdict:
    """A budget decision: ``retry_after`` is None when the request may go on."""

    retry_after: int | None
    redis_ok: bool = True


class SharedBudgets:
    """Request and token counters per tenant and minute."""

    def __init__(
        self, redis: Redis | None, prefix: str, on_error: Callable[[], None], clock: Callable[[], float] = time.time
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._on_error = on_error
        self._clock = clock
        self._script: AsyncScript | None = None
        self._pending: dict[str, int] = {}
        self._flusher: asyncio.Future[None] | None = None

    def _window(self) -> tuple[int, int]:
        now = self._clock()
        window = int(now // WINDOW_SECONDS)
        retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
        return window, retry_after

    def _key(self, tenant: str, kind: str, window: int) -> str:
        return f"{self._prefix}{tenant}:{kind}:{window}"

    async def admit(
        self, tenant: str, requests_per_minute: int, tokens_per_minute: int, prompt_tokens: int
    ) -> tuple[Verdict, str]:
        """Count one request and reserve its prompt tokens, in one round trip (a Lua script, atomic); a refusal
        says which budget (``requests_per_minute`` or ``tokens_per_minute``) and when the window turns."""
        window, retry_after = self._window()
        if self._redis is None:
            return Verdict(None, redis_ok=False), ""
        if self._script is None:
            self._script = self._redis.register_script(ADMIT_SCRIPT)
        keys = [self._key(tenant, "req", window), self._key(tenant, "tok", window)]
        try:
            verdict, _ = await self._script(
                keys=keys, args=[requests_per_minute, tokens_per_minute, prompt_tokens, KEY_TTL_SECONDS]
            )
        except (RedisError, OSError, TimeoutError):
            self._on_error()
            return Verdict(None, redis_ok=False), ""
        if verdict == 1:
            return Verdict(retry_after), "requests_per_minute"
        if verdict == 2:
            return Verdict(retry_after), "tokens_per_minute"
        if verdict == 3:  # larger than a whole minute's budget: it never fits
            return Verdict(WINDOW_SECONDS), "tokens_per_minute"
        return Verdict(None), ""

    def add_tokens(self, tenant: str, tokens: int) -> None:
        """Add (or, negative, return) tokens to the tenant's current window. Corrections are summed in memory and
        written every :data:`FLUSH_SECONDS` in one pipeline (one Redis round trip per request, not two)."""
        if self._redis is None or tokens == 0:
            return
        window, _ = self._window()
        key = self._key(tenant, "tok", window)
        self._pending[key] = self._pending.get(key, 0) + tokens
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(FLUSH_SECONDS)
        await self.flush()

    async def flush(self) -> None:
        """Write the summed corrections now."""
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
