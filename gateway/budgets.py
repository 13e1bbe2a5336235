"""Per-tenant budgets shared by every gateway replica: requests and tokens per minute, in Redis/Valkey.

Fixed one-minute windows keyed ``<prefix><tenant>:<kind>:<minute>``: a request increments its tenant's request
counter and reserves its prompt tokens; when the response's ``usage`` arrives the reservation is corrected to the
real prompt + completion count. Every replica reads and writes the same keys, so a tenant's limit holds across
replicas. Redis unreachable or slow (beyond ``redis_timeout_seconds``): the shared budgets fail OPEN (the request
goes on, ``processor_errors_total{stage="redis"}`` counts it) and Envoy's per-replica request bucket still holds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

WINDOW_SECONDS = 60
KEY_TTL_SECONDS = 2 * WINDOW_SECONDS


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
        """Count one request and reserve its prompt tokens; a refusal says which budget (``requests_per_minute``
        or ``tokens_per_minute``) and when the window turns."""
        window, retry_after = self._window()
        if self._redis is None:
            return Verdict(None, redis_ok=False), ""
        requests_key = self._key(tenant, "req", window)
        tokens_key = self._key(tenant, "tok", window)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.incr(requests_key)
                pipe.expire(requests_key, KEY_TTL_SECONDS)
                pipe.get(tokens_key)
                requests, _, tokens = await pipe.execute()
            if int(requests) > requests_per_minute:
                return Verdict(retry_after), "requests_per_minute"
            used = int(tokens or 0)
            if used + prompt_tokens > tokens_per_minute and used > 0:
                return Verdict(retry_after), "tokens_per_minute"
            if prompt_tokens > tokens_per_minute:  # can never fit a window
                return Verdict(WINDOW_SECONDS), "tokens_per_minute"
            await self.add_tokens(tenant, prompt_tokens)
        except (RedisError, OSError, TimeoutError):
            self._on_error()
            return Verdict(None, redis_ok=False), ""
        return Verdict(None), ""

    async def add_tokens(self, tenant: str, tokens: int) -> None:
        """Add (or, negative, return) tokens to the tenant's current window."""
        if self._redis is None or tokens == 0:
            return
        window, _ = self._window()
        key = self._key(tenant, "tok", window)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.incrby(key, tokens)
                pipe.expire(key, KEY_TTL_SECONDS)
                await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            self._on_error()
