"""Budgets leased from a real Redis 8.2 in slices: every permit a replica hands out was counted in Redis first, at low
rates a lease is one request and exactly its prompt's tokens, under load a tenant costs Redis a lease per slice rather
than a round trip per request, idle slices and shutdown give back what was not used, and a Redis outage fails open at
once for every waiting request."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from inferplane.processor import budgets as b
from inferplane.processor.redis_connection import connect_redis
from tests.ports import free_port

EXAMPLES = itertools.count()
"""Each hypothesis example's own key prefix (the examples share one Redis and one window)."""
WINDOW_START = 1_800_000_000.0  # a minute boundary: every admission below falls in one window


class Clock:
    """Wall and monotonic time the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def wall(self) -> float:
        return WINDOW_START + self.now

    def monotonic(self) -> float:
        return 1000.0 + self.now


def _budgets(redis: Redis | None, prefix: str, clock: Clock, errors: list[int] | None = None) -> b.SharedBudgets:
    return b.SharedBudgets(
        redis,
        prefix,
        lambda: errors.append(1) if errors is not None else None,
        clock=clock.wall,
        monotonic=clock.monotonic,
    )


async def _counted(redis: Redis, prefix: str, kind: str) -> int:
    window = int(WINDOW_START // b.WINDOW_SECONDS)
    return int(await redis.get(f"{prefix}tenant:{kind}:{window}") or 0)


def test_low_rates_lease_exactly_one_request_and_its_prompt(redis_port: int) -> None:
    async def run() -> None:
        redis, clock, prefix = Redis(port=redis_port), Clock(), f"low:{free_port()}:"
        budgets = _budgets(redis, prefix, clock)
        for _ in range(5):
            verdict, _ = await budgets.admit("tenant", 1000, 100_000, 40)
            assert verdict.retry_after is None and verdict.redis_ok
            clock.now += 10.0  # one request every 10 s
        assert budgets.leases == 5
        assert (await _counted(redis, prefix, "req"), await _counted(redis, prefix, "tok")) == (5, 200)
        await budgets.aclose()
        await redis.aclose()

    asyncio.run(run())


def test_a_busy_tenant_costs_a_lease_per_slice_not_a_round_trip_per_request(redis_port: int) -> None:
    async def run() -> None:
        redis, clock, prefix = Redis(port=redis_port), Clock(), f"busy:{free_port()}:"
        budgets = _budgets(redis, prefix, clock)
        for _ in range(2000):  # 1000 requests a second for 2 s
            verdict, _ = await budgets.admit("tenant", 10_000_000, 1_000_000_000, 12)
            assert verdict.retry_after is None
            clock.now += 0.001
        # about one lease per SLICE_SECONDS of traffic once the rate is known
        assert budgets.leases <= 2 * 2.0 / b.SLICE_SECONDS + 5
        leased = await _counted(redis, prefix, "req")
        assert 2000 <= leased <= 2000 + 1000 * b.SLICE_SECONDS * 2
        await budgets.aclose()  # shutdown: what was leased and not used goes back
        assert (await _counted(redis, prefix, "req"), await _counted(redis, prefix, "tok")) == (2000, 24_000)
        await redis.aclose()

    asyncio.run(run())


def test_an_idle_slice_goes_back_for_the_other_replicas(redis_port: int) -> None:
    async def run() -> None:
        redis, clock, prefix = Redis(port=redis_port), Clock(), f"idle:{free_port()}:"
        budgets = _budgets(redis, prefix, clock)
        for _ in range(300):
            await budgets.admit("tenant", 10_000_000, 1_000_000_000, 1)
            clock.now += 0.001
        assert await _counted(redis, prefix, "req") > 300  # the last slice is held
        await budgets.flush(everything=False)
        assert await _counted(redis, prefix, "req") > 300  # still in use: kept
        clock.now += b.IDLE_RETURN_SECONDS
        await budgets.flush(everything=False)
        assert await _counted(redis, prefix, "req") == 300
        await budgets.aclose()
        await redis.aclose()

    asyncio.run(run())


@settings(max_examples=25, deadline=None)
@given(
    requests_per_minute=st.integers(min_value=1, max_value=60),
    # pauses from back-to-back to past the idle return; at most 48 s in all, so one window holds every arrival
    arrivals=st.lists(st.tuples(st.integers(0, 1), st.sampled_from([0.0, 0.0005, 0.01, 0.25, 1.2])), max_size=40),
)
def test_two_replicas_never_admit_beyond_the_budget(
    redis_port: int, requests_per_minute: int, arrivals: list[tuple[int, float]]
) -> None:
    async def run() -> None:
        redis, clock, prefix = Redis(port=redis_port), Clock(), f"pair:{next(EXAMPLES)}:"
        replicas = (_budgets(redis, prefix, clock), _budgets(redis, prefix, clock))
        admitted = 0
        for index, pause in arrivals:
            verdict, budget = await replicas[index].admit("tenant", requests_per_minute, 10**9, 1)
            if verdict.retry_after is None:
                admitted += 1
            else:
                assert budget == "requests_per_minute"
            clock.now += pause
        counted = await _counted(redis, prefix, "req")
        assert admitted <= counted <= requests_per_minute  # every permit handed out was counted first
        for replica in replicas:
            await replica.aclose()
        assert await _counted(redis, prefix, "req") == admitted
        await redis.aclose()

    asyncio.run(run())


def test_redis_down_fails_every_waiting_request_open_after_one_attempt() -> None:
    async def run() -> None:
        errors: list[int] = []
        redis = connect_redis(f"redis://127.0.0.1:{free_port()}/0", 0.2)  # nothing listens there, as deployed
        budgets = _budgets(redis, "down:", Clock(), errors)
        verdicts = await asyncio.gather(*(budgets.admit("tenant", 10, 1000, 5) for _ in range(10)))
        assert all(v.retry_after is None and not v.redis_ok for v, _ in verdicts)
        assert budgets.leases == 1 and errors == [1]  # the nine waiters did not queue behind nine more timeouts
        await redis.aclose()

    asyncio.run(run())


def test_a_prompt_larger_than_the_whole_budget_is_refused_without_asking() -> None:
    async def run() -> None:
        budgets = _budgets(Redis(port=free_port()), "big:", Clock())
        verdict, budget = await budgets.admit("tenant", 10, 100, 101)
        assert (verdict.retry_after, budget, budgets.leases) == (b.WINDOW_SECONDS, "tokens_per_minute", 0)

    asyncio.run(run())
