"""The router's parts on their own: the prefix index's chained block hashes, the cost ranking and its rendezvous
home, the slots shared through a real Redis 8.2 by several processors, and the replica table read from Prometheus
text exposed by prometheus_client under vLLM's series names."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from redis.asyncio import Redis

from inferplane.processor import admission, endpoints
from inferplane.processor.admission import Hold, ModelGate, Turn
from inferplane.processor.config import MetricSelector, ModelConfig
from inferplane.processor.endpoints import Endpoint, EndpointTable, parse_samples
from inferplane.processor.prefix_index import (
    FRESH_SECONDS,
    PrefixIndex,
    byte_blocks,
    home_block,
    pack_hashes,
    rendezvous,
    token_blocks,
    unpack_hashes,
)
from inferplane.processor.redis_connection import connect_redis
from inferplane.processor.router import Router
from inferplane.processor.slots import Slot, SlotStore
from tests.gateway_support import HandClock, model_config, routing_config, until
from tests.ports import free_port
from tests.redis_server import RedisServer, redis_server

BLOCK = 16


def _model(*endpoints: str) -> ModelConfig:
    routing = routing_config(block_tokens=BLOCK, index_blocks=64, scrape_interval_seconds=0.1, dns_refresh_seconds=0.1)
    return model_config("m", endpoints, max_num_seqs=2, cold_start_hold_seconds=5.0, routing=routing)


# -- block hashes ---------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 50_000), min_size=0, max_size=200), cut=st.integers(0, 200))
def test_a_shared_prefix_shares_exactly_its_full_blocks(ids: list[int], cut: int) -> None:
    other = [*ids[:cut], 50_001, *ids[cut + 1 :]]  # differs from ``ids`` at ``cut`` (when cut < len)
    mine, theirs = token_blocks(ids, BLOCK, 256, 7), token_blocks(other, BLOCK, 256, 7)
    assert len(mine) == len(ids) // BLOCK
    shared = min(cut, len(ids)) // BLOCK
    assert mine[:shared] == theirs[:shared]
    if cut < len(ids) and shared < len(mine):
        assert mine[shared:] != theirs[shared:]  # a chain: every block after a difference differs


def test_hashes_depend_on_the_model_and_stop_at_the_cap() -> None:
    ids = list(range(100))
    assert token_blocks(ids, BLOCK, 256, 1) != token_blocks(ids, BLOCK, 256, 2)
    assert len(token_blocks(ids, BLOCK, 3, 1)) == 3
    texts = ["a" * 200, "b" * 100]
    assert len(byte_blocks(texts, 16, 256, 1)) == (200 + 1 + 100) // (16 * 4)


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=64))
def test_packed_hashes_read_back_exactly(hashes: list[int]) -> None:
    assert unpack_hashes(pack_hashes(hashes)) == hashes


def test_packed_hashes_are_8_little_endian_bytes_each_and_anything_else_is_refused() -> None:
    assert pack_hashes([1, -1]) == "AQAAAAAAAAD//////////w=="  # 01 00.. then ff x 8
    assert len(pack_hashes(token_blocks(list(range(6400)), BLOCK, 512, 1))) == 4268  # 400 hashes
    # 7 bytes; not base64; the list the lines once carried; not ASCII
    for bad in ("AQAAAAAAAA==", "not base64!", "[1, 2]", "AQAAAAAAAAé="):
        with pytest.raises(ValueError, match="not packed block hashes"):
            unpack_hashes(bad)


def test_the_index_forgets_least_recently_used_blocks_first() -> None:
    index = PrefixIndex(capacity_blocks=4)
    old, new = token_blocks(list(range(48)), BLOCK, 256, 1), token_blocks(list(range(1000, 1032)), BLOCK, 256, 1)
    index.record("a", old)
    assert index.overlap("a", old) == 3
    index.record("a", new)  # 5 blocks for 4 places: the oldest prompt's last block goes, its prefix stays
    assert (index.size("a"), index.overlap("a", old), index.overlap("a", new)) == (4, 2, 2)
    index.record("a", token_blocks(list(range(2000, 2032)), BLOCK, 256, 1))  # 2 more: old's 2 left go, new stays
    assert (index.size("a"), index.overlap("a", old), index.overlap("a", new)) == (4, 0, 2)
    index.forget("a")
    assert index.overlap("a", new) == 0


def test_the_index_counts_the_blocks_used_again_while_it_holds_them() -> None:
    index = PrefixIndex(capacity_blocks=6)
    shared, other = token_blocks(list(range(48)), BLOCK, 256, 1), token_blocks(list(range(1000, 1032)), BLOCK, 256, 1)
    index.record("a", shared)
    assert index.reused("a") == 0  # computed once: nothing reused yet
    index.record("a", shared)
    index.record("a", shared)  # a block counts once however often it is used again
    assert index.reused("a") == 3
    index.record("a", other)  # 2 one-off blocks beside them: 5 of 6 places
    assert (index.size("a"), index.reused("a")) == (5, 3)
    index.record("a", token_blocks(list(range(2000, 2032)), BLOCK, 256, 1))  # 2 more: the oldest reused block goes
    assert (index.size("a"), index.reused("a"), index.overlap("a", shared)) == (6, 2, 2)  # its last: the prefix stays
    index.forget("a")
    assert index.reused("a") == 0


def test_the_index_claims_blocks_just_computed_until_their_reuse_could_have_shown() -> None:
    """A block computed in the last FRESH_SECONDS counts as kept (claimed) before it is used again; used again it
    counts once, as reused; unused it stops counting when its time is up, as it does when the LRU drops it."""
    clock = HandClock()
    index = PrefixIndex(capacity_blocks=6, clock=clock)
    shared, other = token_blocks(list(range(48)), BLOCK, 256, 1), token_blocks(list(range(1000, 1032)), BLOCK, 256, 1)
    index.record("a", shared)
    assert (index.reused("a"), index.claimed("a")) == (0, 3)
    clock.now += FRESH_SECONDS / 2
    index.record("a", other)
    index.record("a", shared)  # used again: reused, no longer fresh (never counted twice)
    assert (index.reused("a"), index.claimed("a")) == (3, 5)
    clock.now += FRESH_SECONDS + 0.001  # ``other``'s time is up
    assert (index.size("a"), index.claimed("a")) == (5, 3)
    index.record("a", token_blocks(list(range(2000, 2032)), BLOCK, 256, 1))  # 2 fresh; 1 of ``other`` dropped
    assert (index.size("a"), index.claimed("a")) == (6, 5)
    index.record("a", token_blocks(list(range(3000, 3064)), BLOCK, 256, 1))  # 4 more drop ``other``'s and ``shared``
    assert (index.reused("a"), index.claimed("a")) == (0, 6)
    index.forget("a")
    assert index.claimed("a") == 0


# -- ranking --------------------------------------------------------------------------------------------------------


def _endpoints(*addresses: str) -> list[Endpoint]:
    return [Endpoint(address, ready=True) for address in addresses]


REPLICAS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
PROMPT = list(range(160))  # 10 blocks


def test_a_held_prefix_wins_until_its_replica_is_loaded() -> None:
    router = Router(BLOCK, 1.0, True, PrefixIndex(1024))
    ready = _endpoints(*REPLICAS)
    hashes = token_blocks(PROMPT, BLOCK, 256, 1)
    router.index.record(REPLICAS[2], hashes)
    ranking = router.rank(ready, hashes, len(PROMPT))
    assert (ranking.ranked[0].address, ranking.reason, ranking.overlaps[REPLICAS[2]]) == (REPLICAS[2], "prefix_hit", 10)
    ready[2].inflight, ready[2].inflight_blocks = 3, 11  # 11 blocks of decode outweigh 10 blocks of prefill saved
    ranking = router.rank(ready, hashes, len(PROMPT))
    assert ranking.ranked[0].address != REPLICAS[2] and ranking.reason == "load_spill"
    assert ranking.reason_for(REPLICAS[2]) == "prefix_hit"


def test_other_gateways_requests_count_through_the_engines_numbers() -> None:
    router = Router(BLOCK, 1.0, False, PrefixIndex(1024))
    ready = _endpoints(*REPLICAS)
    ready[0].running, ready[1].running, ready[2].running = 5, 1, 3
    ranking = router.rank(ready, [], 100)
    assert [e.address for e in ranking.ranked] == [REPLICAS[1], REPLICAS[2], REPLICAS[0]]
    assert ranking.reason == "least_load"


def test_a_request_that_ended_since_the_scrape_is_nobody_elses() -> None:
    """The engine counted 2 sequences when this processor had 2 there; one has ended since (the scrape is up to an
    interval old). Its replica holds the prefix and 1 sequence: it stays first, as it would without the ended one.
    Counted against the requests in flight now, the ended one would be another gateway's (mean blocks each) and
    send the request away from its prefix."""
    router = Router(BLOCK, 1.0, True, PrefixIndex(1024))
    router.mean_blocks = 11.0
    ready = _endpoints(*REPLICAS)
    hashes = token_blocks(PROMPT, BLOCK, 256, 1)
    router.index.record(REPLICAS[0], hashes)
    ready[0].running, ready[0].inflight_at_scrape = 2, 2
    ready[0].inflight, ready[0].inflight_blocks = 1, 2
    ranking = router.rank(ready, hashes, len(PROMPT))
    assert (ranking.ranked[0].address, ranking.reason) == (REPLICAS[0], "prefix_hit")
    ready[0].inflight_at_scrape = 1  # a third sequence the engine counts is another gateway's: 11 more blocks
    assert router.rank(ready, hashes, len(PROMPT)).reason == "load_spill"


@pytest.mark.parametrize("group", range(12))
def test_two_gateways_send_a_new_prefix_to_the_same_home(group: int) -> None:
    """Each gateway ranks on its own index; an unseen prefix gets the same home on both, for every group."""
    prompt = [group * 1000 + i for i in range(64)]
    hashes = token_blocks(prompt, BLOCK, 256, 1)
    picks = {Router(BLOCK, 1.0, True, PrefixIndex(64)).rank(_endpoints(*REPLICAS), hashes, 64).ranked[0].address}
    picks.add(
        Router(BLOCK, 1.0, True, PrefixIndex(64)).rank(_endpoints(*reversed(REPLICAS)), hashes, 64).ranked[0].address
    )
    home = max(REPLICAS, key=lambda r: rendezvous(home_block(hashes, BLOCK), r))
    assert picks == {home}


def test_homes_spread_over_the_replicas() -> None:
    homes = [
        max(REPLICAS, key=lambda r: rendezvous(home_block(token_blocks([g] * 64, BLOCK, 256, 1), BLOCK), r))
        for g in range(300)
    ]
    assert {r: homes.count(r) for r in REPLICAS}.keys() == set(REPLICAS)
    assert min(homes.count(r) for r in REPLICAS) > 60  # about 100 each


def _addresses(count: int, seed: int) -> list[str]:
    """``count`` distinct pod addresses, as a headless Service resolves them, drawn by ``seed``."""
    draw = random.Random(seed)
    return [f"10.{draw.randrange(256)}.{draw.randrange(256)}.{a}:8000" for a in draw.sample(range(1, 255), count)]


SPREAD_BLOCKS = token_blocks(range(2_400 * BLOCK), BLOCK, 2_400, 1)
"""2,400 chained block hashes, as the gateway computes them for a long prompt: stand-ins for prefixes' homes."""


@pytest.mark.parametrize("seed", range(40))
def test_either_replica_of_a_pair_is_home_to_half_the_prefixes(seed: int) -> None:
    """Whatever two addresses the replicas get, each is home to half of the prefixes, as chance has it (a binomial
    spread of 1% over 2,400): a pair whose weights are alike for most blocks (Python's tuple hash: for 57% of pairs
    one replica homed more than 60%) sends one replica most of the new prefixes."""
    first, second = _addresses(2, seed)
    share = sum(rendezvous(b, first) > rendezvous(b, second) for b in SPREAD_BLOCKS) / len(SPREAD_BLOCKS)
    assert 0.45 < share < 0.55


@pytest.mark.parametrize("seed", range(8))
def test_among_eight_replicas_each_is_home_to_its_share(seed: int) -> None:
    """Eight replicas, 2,400 prefixes: each is home to 300 give or take 75 (4.6 binomial deviations)."""
    replicas = _addresses(8, seed)
    homes = [max(replicas, key=lambda r: rendezvous(b, r)) for b in SPREAD_BLOCKS]
    assert all(225 <= homes.count(r) <= 375 for r in replicas), {r: homes.count(r) for r in replicas}


def test_a_busy_home_is_passed_over() -> None:
    hashes = token_blocks(PROMPT, BLOCK, 256, 1)
    ready = _endpoints(*REPLICAS)
    home = max(REPLICAS, key=lambda r: rendezvous(home_block(hashes, BLOCK), r))
    busy = next(e for e in ready if e.address == home)
    busy.inflight, busy.inflight_blocks = 2, 11  # more than one prompt's prefill (10 blocks) above the others
    ranking = Router(BLOCK, 1.0, True, PrefixIndex(64)).rank(ready, hashes, len(PROMPT))
    assert ranking.ranked[0].address != home and ranking.reason == "least_load"


def test_a_queued_request_prefers_the_replicas_holding_most_of_it_or_its_new_prefixs_home() -> None:
    hashes = token_blocks(PROMPT, BLOCK, 256, 1)
    router = Router(BLOCK, 1.0, True, PrefixIndex(64))
    home = max(REPLICAS, key=lambda r: rendezvous(home_block(hashes, BLOCK), r))
    assert router.rank(_endpoints(*REPLICAS), hashes, len(PROMPT)).preferred() == {home}
    router.index.record(REPLICAS[0], hashes[:4])
    router.index.record(REPLICAS[1], hashes[:4])
    router.index.record(REPLICAS[2], hashes[:2])
    assert router.rank(_endpoints(*REPLICAS), hashes, len(PROMPT)).preferred() == {REPLICAS[0], REPLICAS[1]}
    assert Router(BLOCK, 1.0, True, PrefixIndex(64)).rank(_endpoints(*REPLICAS), [], 100).preferred() == set()
    ready = _endpoints(*REPLICAS)
    busy = next(e for e in ready if e.address == home)
    busy.inflight, busy.inflight_blocks = 2, 11  # the home passed over for load: nothing to wait for
    assert Router(BLOCK, 1.0, True, PrefixIndex(64)).rank(ready, hashes, len(PROMPT)).preferred() == set()


def test_a_new_prefix_passes_a_home_full_of_reused_prefixes_to_the_next_in_its_order() -> None:
    """The prefix's home already keeps reusing 3/4 of its pool: the prefix goes to the second replica of its
    rendezvous order, which every gateway computes alike; a home with room keeps it."""
    hashes = token_blocks(PROMPT, BLOCK, 256, 1)
    order = sorted(REPLICAS, key=lambda r: rendezvous(home_block(hashes, BLOCK), r), reverse=True)
    router = Router(BLOCK, 1.0, True, PrefixIndex(64))  # 3/4 of 64 blocks: 48, so 38 reused leave room for 10
    filler = token_blocks(list(range(5000, 5000 + 38 * BLOCK)), BLOCK, 256, 1)
    router.index.record(order[0], filler)
    router.index.record(order[0], filler)
    ranking = router.rank(_endpoints(*REPLICAS), hashes, len(PROMPT))
    assert (ranking.ranked[0].address, ranking.reason) == (order[0], "prefix_home")
    router.index.record(order[0], token_blocks(list(range(9000, 9000 + BLOCK)), BLOCK, 256, 1) * 2)  # one more
    ranking = router.rank(_endpoints(*REPLICAS), hashes, len(PROMPT))
    assert (ranking.ranked[0].address, ranking.reason) == (order[1], "prefix_home")


def test_new_prefixes_arriving_together_fill_a_home_before_any_is_reused() -> None:
    """Four new prefixes of 16 blocks whose home is the same replica arrive before any comes back: the first three
    fill its room (3/4 of 64 blocks, 48), the fourth goes to the second in its order, though nothing is reused yet."""
    clock = HandClock()
    router = Router(BLOCK, 1.0, True, PrefixIndex(64, clock=clock))
    prefixes = [token_blocks([g] * 16 * BLOCK, BLOCK, 256, 1) for g in range(200)]
    first = rendezvous_order(prefixes[0])[0]
    same_home = [p for p in prefixes if rendezvous_order(p)[0] == first][:4]
    assert len(same_home) == 4
    homes = []
    for hashes in same_home:
        ranking = router.rank(_endpoints(*REPLICAS), hashes, 16 * BLOCK)
        assert ranking.reason == "prefix_home"
        homes.append(ranking.ranked[0].address)
        router.picked(ranking.ranked[0], hashes, 16 * BLOCK)
        clock.now += 1.0
    assert homes == [first] * 3 + [rendezvous_order(same_home[3])[1]]
    assert router.index.reused(first) == 0


def test_one_off_prompts_fill_a_home_only_while_fresh() -> None:
    """Blocks computed once (unique prompts) and not used again within FRESH_SECONDS stop counting: a pool full of
    them leaves every home where it is."""
    clock = HandClock()
    hashes = token_blocks(PROMPT, BLOCK, 256, 1)
    home = max(REPLICAS, key=lambda r: rendezvous(home_block(hashes, BLOCK), r))
    router = Router(BLOCK, 1.0, True, PrefixIndex(64, clock=clock))
    for n in range(1, 9):  # none shares a block with PROMPT
        router.index.record(home, token_blocks(list(range(n * 1000, n * 1000 + 8 * BLOCK)), BLOCK, 256, 1))
    assert (router.index.size(home), router.index.reused(home), router.index.overlap(home, hashes)) == (64, 0, 0)
    fresh = router.rank(_endpoints(*REPLICAS), hashes, len(PROMPT))
    assert (fresh.ranked[0].address, fresh.reason) == (rendezvous_order(hashes)[1], "prefix_home")
    clock.now += FRESH_SECONDS + 0.001
    later = router.rank(_endpoints(*REPLICAS), hashes, len(PROMPT))
    assert (later.ranked[0].address, later.reason) == (home, "prefix_home")


def rendezvous_order(hashes: list[int]) -> list[str]:
    """The replicas in a prefix's rendezvous order, first choice first."""
    return sorted(REPLICAS, key=lambda r: rendezvous(home_block(hashes, BLOCK), r), reverse=True)


# -- shared slots ---------------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_prefix(redis_port: int) -> Iterator[str]:
    yield f"slots-test:{free_port()}:"


def _where(slot: Slot | None) -> tuple[str, bool] | None:
    return None if slot is None else (slot.endpoint, slot.shared)


def _store(redis: Redis, prefix: str, name: str, **options: Any) -> SlotStore:
    return SlotStore(redis, prefix, lambda _: None, processor=name, **options)


async def _counts(redis: Redis, prefix: str, endpoint: str) -> dict[str, int]:
    """What the store counts on ``endpoint`` per processor."""
    held = await redis.hgetall(f"{prefix}slots:{{m}}:leases:{endpoint}")
    return {(n.decode() if isinstance(n, bytes) else n): int(c) for n, c in held.items() if int(c)}


def test_a_lease_granted_after_its_script_timed_out_is_found_and_returned(tmp_path: Path) -> None:
    """Redis answers too late (stopped, as a stalled or failing-over server; the script waits in its socket while the
    processor gives up): no slot this time (the queue retries). The lease the script took once Redis resumed is
    found by its grant token a second later and returned, never leaked; failures in a row turn to the share."""
    now = [0.0]
    failures: list[str] = []

    async def late(store: SlotStore, server: RedisServer) -> Slot | None:
        server.pause()
        try:
            return await store.acquire("m", ["a:1"], 1, 1)
        finally:
            server.resume()
            await asyncio.sleep(0.2)  # the script runs now

    async def run(server: RedisServer) -> None:
        redis = Redis(port=server.port)
        slow = SlotStore(redis, "p:", failures.append, processor="slow", timeout_seconds=0.05, clock=lambda: now[0])
        timely = _store(Redis(port=server.port), "p:", "timely")
        # Ready, with no 50 ms bound (ci82's clean clone failed here on a loaded machine when ``slow`` did it): the
        # script loaded on the server through ``timely`` (a late EVALSHA of an unloaded script would only answer
        # NOSCRIPT) and ``slow``'s connection opened (a paused server would never finish its handshake)
        assert await timely.acquire("warm", ["a:1"], 1, 1) is not None and await redis.ping()
        assert [await late(slow, server) for _ in range(2)] == [None, None] and failures == []
        assert await _counts(redis, "p:", "a:1") == {"slow": 1}  # the first script leased; the second found it full
        assert await timely.acquire("m", ["a:1"], 1, 1) is None  # the late lease holds the slot
        await slow.trim()  # too early: a late script might not have run yet
        assert await _counts(redis, "p:", "a:1") == {"slow": 1}
        now[0] += 1.0
        await slow.trim()
        assert await _counts(redis, "p:", "a:1") == {} and slow.leased("m", "a:1") == 0
        assert _where(await timely.acquire("m", ["a:1"], 1, 1)) == ("a:1", True)
        assert _where(await late(slow, server)) == ("a:1", False)  # the third failure in a row: the share
        assert failures == ["m"]
        await redis.aclose()

    with redis_server(tmp_path) as server:
        asyncio.run(run(server))


def test_processors_together_never_exceed_a_replicas_cap(redis_port: int, fresh_prefix: str) -> None:
    async def run() -> None:
        redis = Redis(port=redis_port)
        stores = [_store(redis, fresh_prefix, f"p{i}") for i in range(3)]
        ranked = ["a:1", "b:1"]
        taken = await asyncio.gather(*(s.acquire("m", ranked, 2, 1) for s in stores for _ in range(3)))
        granted = [t for t in taken if t is not None]
        assert sorted(slot.endpoint for slot in granted) == ["a:1", "a:1", "b:1", "b:1"]
        assert all(slot.shared for slot in granted)
        for endpoint in ranked:
            assert sum((await _counts(redis, fresh_prefix, endpoint)).values()) == 2
        await redis.aclose()

    asyncio.run(run())


def test_a_released_slot_is_taken_again_without_the_store(redis_port: int, fresh_prefix: str) -> None:
    """A slot given back stays leased: the next request takes it locally (the store, paused, is never asked), and
    a slot given back twice frees one place."""

    async def run() -> None:
        redis, admin = Redis(port=redis_port), Redis(port=redis_port)
        store = _store(redis, fresh_prefix, "p", timeout_seconds=0.05)
        first, second = [await store.acquire("m", ["a:1"], 2, 1) for _ in range(2)]
        assert first is not None and second is not None
        store.release("m", first)
        store.release("m", first)
        await admin.client_pause(300, all=False)  # WRITE: a script would time out
        again = await store.acquire("m", ["a:1"], 2, 1)
        assert _where(again) == ("a:1", True) and await store.acquire("m", ["a:1"], 2, 1) is None
        await asyncio.sleep(0.4)
        assert await _counts(redis, fresh_prefix, "a:1") == {"p": 2}
        await redis.aclose()
        await admin.aclose()

    asyncio.run(run())


def test_a_slot_left_unneeded_for_a_trim_goes_back_to_the_others(redis_port: int, fresh_prefix: str) -> None:
    async def run() -> None:
        redis = Redis(port=redis_port)
        holder, other = _store(redis, fresh_prefix, "holder"), _store(redis, fresh_prefix, "other")
        slot = await holder.acquire("m", ["a:1"], 1, 1)
        assert slot is not None and await other.acquire("m", ["a:1"], 1, 1) is None
        holder.release("m", slot)
        await holder.trim()  # needed during this period: kept
        assert await other.acquire("m", ["a:1"], 1, 1) is None
        await holder.trim()  # not needed during the last one: returned
        assert _where(await other.acquire("m", ["a:1"], 1, 1)) == ("a:1", True)
        assert await _counts(redis, fresh_prefix, "a:1") == {"other": 1}
        await redis.aclose()

    asyncio.run(run())


def test_a_slot_given_back_at_once_goes_to_the_others_and_one_the_store_missed_at_the_next_trim(
    redis_port: int, fresh_prefix: str
) -> None:
    """A slot given back is told (``on_given_back``: the other workers' waiters preferring its replica then ask for it)
    only once the store has it. One the store never took (the client gave up while the server was paused, and the
    command died with its connection) is found by its token's absence at the first trim a second later, leased again
    and returned; it is not told."""

    async def run() -> None:
        redis, admin = Redis(port=redis_port), Redis(port=redis_port)
        told: list[tuple[str, str, dict[str, int]]] = []
        now = [0.0]

        def tell(model: str, endpoint: str) -> None:
            counts = asyncio.ensure_future(_counts(redis, fresh_prefix, endpoint))  # read as the waiters would
            counts.add_done_callback(lambda done: told.append((model, endpoint, done.result())))

        holder = _store(redis, fresh_prefix, "holder", on_given_back=tell)  # 0.5 s
        other = _store(redis, fresh_prefix, "other", on_given_back=tell, clock=lambda: now[0])
        slot = await holder.acquire("m", ["a:1"], 1, 1)
        assert slot is not None
        holder.release("m", slot)
        holder.give_back("m", slot)  # no trim
        assert holder.leased("m", "a:1") == 0
        await until(lambda: len(told) == 1, 2.0)
        assert told == [("m", "a:1", {})]  # in the store when told
        taken = await other.acquire("m", ["a:1"], 1, 1)
        assert _where(taken) == ("a:1", True) and await holder.acquire("m", ["a:1"], 1, 1) is None
        assert taken is not None
        other.release("m", taken)
        await admin.client_pause(1200, all=False)  # WRITE: the give-back times out (0.5 s)
        other.give_back("m", taken)
        assert other.leased("m", "a:1") == 0
        await admin.set(f"{fresh_prefix}probe", 1)  # a write: answered when the pause ends, long after the timeout
        assert await _counts(redis, fresh_prefix, "a:1") == {"other": 1}  # it never ran
        await other.trim()  # too early: a late give-back might not have run yet
        assert await _counts(redis, fresh_prefix, "a:1") == {"other": 1} and other.leased("m", "a:1") == 0
        now[0] += 1.0
        await other.trim()  # no token: leased again, and returned
        assert await _counts(redis, fresh_prefix, "a:1") == {} and other.leased("m", "a:1") == 0
        assert len(told) == 1  # the give-back the store did not take was not told
        await redis.aclose()
        await admin.aclose()

    asyncio.run(run())


def test_a_give_back_that_ran_after_its_timeout_is_not_leased_again(tmp_path: Path) -> None:
    """Redis stalls while a slot is given back (stopped: the script waits in its socket and runs when the server
    resumes, after the processor gave up): the store no longer counts the slot, so the processor must not either.
    Leasing it again at once (as before) left the store counting one slot fewer than the processor used, one request
    above the replica's cap for as long as the processor lived; the trim a second later finds the token and leaves it
    given back."""
    now = [0.0]

    async def run(server: RedisServer) -> None:
        redis = Redis(port=server.port)
        slow = SlotStore(redis, "p:", lambda _: None, processor="slow", timeout_seconds=0.05, clock=lambda: now[0])
        timely = _store(Redis(port=server.port), "p:", "timely")
        slot = await slow.acquire("m", ["a:1"], 1, 1)  # the lease script loaded and the connection open
        assert _where(slot) == ("a:1", True) and slot is not None
        assert await timely.acquire("m", ["a:1"], 1, 1) is None
        warm = await slow.acquire("m", ["b:1"], 1, 1)  # the give-back script loaded too (a late EVALSHA of an
        assert warm is not None  # unloaded script would only answer NOSCRIPT)
        slow.release("m", warm)
        slow.give_back("m", warm)
        await until(lambda: slow.leased("m", "b:1") == 0, 2.0)
        async with asyncio.timeout(2.0):
            while await _counts(redis, "p:", "b:1"):
                await asyncio.sleep(0.005)
        slow.release("m", slot)
        server.pause()
        try:
            slow.give_back("m", slot)
            await until(lambda: bool(slow._unanswered), 2.0)  # past the 50 ms timeout: the processor gave up
        finally:
            server.resume()
        async with asyncio.timeout(2.0):  # the script runs now
            while await _counts(redis, "p:", "a:1"):
                await asyncio.sleep(0.005)
        now[0] += 1.0
        await slow.trim()
        assert slow.leased("m", "a:1") == 0 and await _counts(redis, "p:", "a:1") == {}
        assert _where(await timely.acquire("m", ["a:1"], 1, 1)) == ("a:1", True)
        assert await slow.acquire("m", ["a:1"], 1, 1) is None  # the cap holds: the slot is timely's alone
        await redis.aclose()

    with redis_server(tmp_path) as server:
        asyncio.run(run(server))


def test_a_dead_processors_slots_free_when_its_lease_lapses(redis_port: int, fresh_prefix: str) -> None:
    async def run() -> None:
        redis = Redis(port=redis_port)
        dead = _store(redis, fresh_prefix, "dead", lease_seconds=0.3)
        alive = _store(redis, fresh_prefix, "alive", lease_seconds=0.3)
        assert _where(await dead.acquire("m", ["a:1"], 1, 1)) == ("a:1", True)
        assert await alive.acquire("m", ["a:1"], 1, 1) is None
        await asyncio.sleep(0.4)  # ``dead`` never renews its lease
        assert _where(await alive.acquire("m", ["a:1"], 1, 1)) == ("a:1", True)
        await redis.aclose()

    asyncio.run(run())


def test_a_processor_back_after_its_lease_lapsed_writes_back_what_it_holds(redis_port: int, fresh_prefix: str) -> None:
    """Cut off longer than its lease, a processor's counts were dropped while its request ran on: when it renews,
    it writes that request's slot back (a second leased slot, free, is gone), so the store counts what runs."""

    async def run() -> None:
        redis = Redis(port=redis_port)
        away = _store(redis, fresh_prefix, "away", lease_seconds=0.3)
        other = _store(redis, fresh_prefix, "other", lease_seconds=0.3)
        held, spare = [await away.acquire("m", ["a:1"], 2, 1) for _ in range(2)]
        assert held is not None and spare is not None
        away.release("m", spare)
        await asyncio.sleep(0.4)  # ``away`` renews nothing: lapsed
        assert _where(await other.acquire("m", ["a:1"], 2, 1)) == ("a:1", True)  # its script drops away's counts
        await away.renew(["m"])
        await away.trim()
        assert await _counts(redis, fresh_prefix, "a:1") == {"away": 1, "other": 1}
        assert away.leased("m", "a:1") == 1
        await redis.aclose()

    asyncio.run(run())


def test_with_the_store_down_what_a_processor_holds_counts_against_its_share(tmp_path: Path) -> None:
    """A processor whose requests hold both its leased slots on a replica (cap 2) must not take a share slot there
    once the store stops answering (its share is 1): that ran vLLM one past its cap. A leased slot freed meanwhile
    is still its own, counted by the store for no one else, so it is used first."""
    failures: list[str] = []

    async def run(server: RedisServer) -> None:
        redis = Redis(port=server.port)
        store = SlotStore(redis, "q:", failures.append, processor="p", timeout_seconds=0.05, clock=lambda: 0.0)
        held = [await store.acquire("m", ["a:1"], 2, 1) for _ in range(2)]
        assert [_where(s) for s in held] == [("a:1", True)] * 2
        server.pause()
        try:
            # Two failures are a blip (no slot this time); the third turns to the share, and both leases are used.
            assert [await store.acquire("m", ["a:1"], 2, 1) for _ in range(3)] == [None, None, None]
            assert failures == ["m"]
            assert held[0] is not None
            store.release("m", held[0])
            assert _where(await store.acquire("m", ["a:1"], 2, 1)) == ("a:1", True)  # its own free lease
            assert await store.acquire("m", ["a:1"], 2, 1) is None
        finally:
            server.resume()
        await redis.aclose()

    with redis_server(tmp_path) as server:
        asyncio.run(run(server))


def test_one_stall_of_the_store_counts_once_however_many_scripts_it_caught(tmp_path: Path) -> None:
    """Five requests ask the store at once while it is stopped: their scripts time out together, one failure, no
    fallback share. Counted one by one (as before), one stall of the store, or of a busy processor's own event loop,
    whose timeouts all fire when it resumes, sent the processor to its share at once. Failures of scripts asked
    after the last one was seen are counted: the third in a row falls back."""
    failures: list[str] = []

    async def run(server: RedisServer) -> None:
        redis = Redis(port=server.port)
        store = SlotStore(redis, "s:", failures.append, processor="p", timeout_seconds=0.05)
        assert _where(await store.acquire("m", ["a:1"], 8, 1)) == ("a:1", True)  # the script loaded, connected
        server.pause()
        try:
            caught = await asyncio.gather(*(store.acquire("m", ["b:1"], 8, 1) for _ in range(5)))
            assert caught == [None] * 5 and failures == []
            assert await store.acquire("m", ["b:1"], 8, 1) is None and failures == []  # the second
            assert _where(await store.acquire("m", ["b:1"], 8, 1)) == ("b:1", False)  # the third: the share
            assert failures == ["m"]
        finally:
            server.resume()
        await redis.aclose()

    with redis_server(tmp_path) as server:
        asyncio.run(run(server))


def test_without_redis_each_processor_keeps_to_its_share() -> None:
    async def run() -> None:
        failures: list[str] = []
        redis = connect_redis(f"redis://127.0.0.1:{free_port()}/0", 0.2)  # as deployed
        store = SlotStore(redis, "x:", failures.append)
        assert [await store.acquire("m", ["a:1", "b:1"], 8, 1) for _ in range(2)] == [None, None]  # maybe a blip
        first = await store.acquire("m", ["a:1", "b:1"], 8, 1)  # three failures in a row: down, the share
        assert _where(first) == ("a:1", False)
        assert _where(await store.acquire("m", ["a:1", "b:1"], 8, 1)) == ("b:1", False)
        assert await store.acquire("m", ["a:1", "b:1"], 8, 1) is None
        assert first is not None
        store.release("m", first)
        assert _where(await store.acquire("m", ["a:1", "b:1"], 8, 1)) == ("a:1", False)
        assert failures == ["m"] * 4  # down for FALLBACK_SECONDS: the store is not asked again meanwhile
        await redis.aclose()

    asyncio.run(run())


# -- the replica table ----------------------------------------------------------------------------------------------


def _exposition(running: float, waiting: float) -> tuple[int, CollectorRegistry]:
    registry = CollectorRegistry()
    for name, value in (("vllm:num_requests_running", running), ("vllm:num_requests_waiting", waiting)):
        gauge = Gauge(name, "", ["model_name", "engine"], registry=registry)
        gauge.labels("m", "0").set(value)
        gauge.labels("m", "1").set(value)  # two engines in one pod add up
    Gauge("vllm:kv_cache_usage_perc", "", registry=registry).set(0.25)
    port = free_port()
    start_http_server(port, addr="127.0.0.1", registry=registry)
    return port, registry


def test_a_replica_is_ready_while_it_answers_and_reports_its_load() -> None:
    async def run() -> None:
        port, _ = _exposition(running=3, waiting=1)
        silent = f"127.0.0.1:{free_port()}"
        table = EndpointTable(_model(f"127.0.0.1:{port}", silent))
        await table.refresh()
        answering = table.endpoints[f"127.0.0.1:{port}"]
        answering.inflight = 4  # this processor's requests there when the engine is next read
        lost = await table.refresh()
        assert (answering.ready, answering.running, answering.waiting, answering.kv_usage) == (True, 6, 2, 0.25)
        assert answering.inflight_at_scrape == 4
        assert [e.address for e in table.ready()] == [f"127.0.0.1:{port}"] and lost == []
        assert table.capacity == 2

    asyncio.run(run())


def test_a_name_resolves_to_every_address() -> None:
    async def run() -> None:
        table = EndpointTable(_model("localhost:8000", "no-such-host.invalid:8000"))
        assert "127.0.0.1:8000" in await table.resolve()
        table.apply({"127.0.0.1:8000", "10.0.0.9:8000"})
        assert table.apply({"127.0.0.1:8000"}) == ["10.0.0.9:8000"]

    asyncio.run(run())


def test_samples_are_selected_by_name_and_labels() -> None:
    text = (
        b'# HELP x\nnv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 7\n'
        b'nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 2\n'
        b"vllm:num_requests_running_other 9\nvllm:num_requests_running 4\n"
    )
    active = MetricSelector(name="nv_trt_llm_request_metrics", labels=(("request_type", "active"),))
    assert parse_samples(text, active) == 7
    assert parse_samples(text, MetricSelector(name="vllm:num_requests_running")) == 4
    assert parse_samples(text, MetricSelector(name="absent")) is None


# -- the queue ------------------------------------------------------------------------------------------------------


def test_the_queue_serves_in_order_and_times_out() -> None:
    async def run() -> None:
        gate = ModelGate(queue_max=2, queue_timeout=0.5, on_change=lambda: None)
        free: list[str] = []

        async def attempt(turn: Turn) -> str | None:
            return free.pop(0) if free else None

        first = asyncio.ensure_future(gate.admit(attempt))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(gate.admit(attempt))
        await asyncio.sleep(0.01)
        assert await gate.admit(attempt) is None  # the queue holds two
        free.append("s1")
        gate.released()
        assert await first == "s1" and not second.done()
        assert await second is None  # nothing freed within its 0.5 s

    asyncio.run(run())


def test_a_held_request_takes_a_released_slot_and_never_jumps_the_queue() -> None:
    async def run() -> None:
        gate = ModelGate(queue_max=2, queue_timeout=0.5, on_change=lambda: None)
        free: list[str] = []

        async def attempt(hold: Hold) -> str | None:
            hold.patience = 5.0
            return free.pop(0) if free else None

        held = asyncio.ensure_future(gate.hold_for(attempt))
        await asyncio.sleep(0.01)
        free.append("s1")
        assert gate.released() is True  # kept here: the held request may take it
        assert await asyncio.wait_for(held, 0.05) == "s1"  # woken by the release, not by the 50 ms retry
        queued = asyncio.ensure_future(gate.admit(lambda turn: attempt(Hold(0.0))))
        await asyncio.sleep(0.01)
        assert await asyncio.wait_for(gate.hold_for(attempt), 0.01) is None  # someone queues: no holding
        free.append("s2")
        gate.released()
        assert await queued == "s2"

    asyncio.run(run())


class _Replicas:
    """Free slots by replica, and what each request (by name) prefers: an attempt takes the first free slot among
    every replica when the turn may take any, among those it prefers else."""

    def __init__(self, prefers: dict[str, set[str]]) -> None:
        self.free: list[str] = []
        self.prefers = prefers
        self.attempts = dict.fromkeys(prefers, 0)

    def attempt(self, name: str) -> Any:
        async def attempt(turn: Turn) -> str | None:
            self.attempts[name] += 1
            turn.prefers = frozenset(self.prefers[name])
            slot = next((r for r in self.free if turn.anywhere or r in turn.prefers), None)
            if slot is not None:
                self.free.remove(slot)
                return f"{name}@{slot}"
            return None

        return attempt


def test_a_slot_freed_on_a_replica_goes_to_the_oldest_waiter_preferring_it_else_back_to_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three queued: the head waits for A, the two behind it for B. A slot freed on B goes to the older of the two
    (not to the head, whose prefix B does not hold). One freed on C, which nobody here prefers, is not the head's
    while it waits for A (another worker's waiters may want C: the caller gives it back to the store); after
    HEAD_PATIENCE_SECONDS first in line the head takes a slot anywhere. Arrival order alone would give the head B's
    slot: a miss there, and B's own requests' prefix evicted."""
    patience = 1.0  # past any stall of a loaded machine between the steps below
    monkeypatch.setattr(admission, "HEAD_PATIENCE_SECONDS", patience)
    # Only the head polls: a polling w3 whose 50 ms poll fires before w2 wakes to its offer would take B first (a
    # fair race in production, where any waiter preferring B may have it; here it would hide which one was offered).
    monkeypatch.setattr(admission, "POLLING_WAITERS", 1)

    async def run() -> None:
        gate = ModelGate(queue_max=8, queue_timeout=5.0, on_change=lambda: None)
        replicas = _Replicas({"w1": {"A"}, "w2": {"B"}, "w3": {"B"}})
        waiters = {}
        started = time.monotonic()
        for name in ("w1", "w2", "w3"):
            waiters[name] = asyncio.ensure_future(gate.admit(replicas.attempt(name)))
            await until(lambda: gate.waiting == len(waiters), 2.0)
        replicas.free.append("B")
        assert gate.released("B") is True
        assert await asyncio.wait_for(waiters["w2"], 1.0) == "w2@B"
        assert not waiters["w1"].done() and not waiters["w3"].done()
        assert gate.released("C") is False  # nobody here wants C now: back to the store
        replicas.free.append("C")  # as another worker gives it back to the store
        assert await asyncio.wait_for(waiters["w1"], 3.0) == "w1@C"
        assert time.monotonic() - started >= patience  # first in line that long (since before it queued)
        replicas.free.append("B")
        assert gate.released("B") is True
        assert await asyncio.wait_for(waiters["w3"], 1.0) == "w3@B"
        assert gate.released("D") is False  # nobody queues: back to the store, for another worker's requests

    asyncio.run(run())


def test_a_slot_another_worker_gave_back_is_offered_to_the_oldest_waiter_preferring_it_never_to_the_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``offer`` (another worker gave a slot back to the store): the oldest waiter preferring its replica asks for it;
    when none does, nobody is woken, not even a head that may take any replica (the waiters of the other workers that
    prefer it ask first; the head finds it on its next poll)."""
    monkeypatch.setattr(admission, "RETRY_SECONDS", 60.0)  # no poll during the test: only an offer wakes a waiter

    async def run() -> None:
        gate = ModelGate(queue_max=8, queue_timeout=5.0, on_change=lambda: None)
        replicas = _Replicas({"w1": set(), "w2": {"B"}, "w3": {"B"}})
        waiters = {}
        for name in ("w1", "w2", "w3"):
            waiters[name] = asyncio.ensure_future(gate.admit(replicas.attempt(name)))
            await until(lambda: gate.waiting == len(waiters), 2.0)
        attempts = dict(replicas.attempts)
        replicas.free.append("C")
        assert gate.offer("C") is False
        await asyncio.sleep(0.05)  # a woken waiter would have asked by now (no condition marks its not asking)
        assert replicas.attempts == attempts  # w1, which may take C, did not ask
        replicas.free.append("B")
        assert gate.offer("B") is True
        assert await asyncio.wait_for(waiters["w2"], 1.0) == "w2@B"  # the older of the two preferring B
        for task in waiters.values():
            task.cancel()

    asyncio.run(run())


def test_a_head_that_may_take_any_replica_is_told_those_the_others_wait_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue says which replicas its requests prefer (what the other workers hear, ``peer_queues``), and a head
    allowed to take any replica is told those the requests behind it prefer (``Turn.others_want``: its attempt leaves
    them to them); both follow the queue as requests leave."""
    monkeypatch.setattr(admission, "RETRY_SECONDS", 0.01)  # the head asks again often

    async def run() -> None:
        gate = ModelGate(queue_max=8, queue_timeout=5.0, on_change=lambda: None)
        seen: list[tuple[bool, frozenset[str]]] = []

        async def head(turn: Turn) -> str | None:
            seen.append((turn.anywhere, turn.others_want))
            return None  # nothing it may take is free

        replicas = _Replicas({"w2": {"B"}, "w3": {"B", "C"}})
        waiters = {"w1": asyncio.ensure_future(gate.admit(head))}  # prefers nothing: it may take any replica
        await until(lambda: gate.waiting == 1, 2.0)
        for name in ("w2", "w3"):
            waiters[name] = asyncio.ensure_future(gate.admit(replicas.attempt(name)))
            await until(lambda: gate.waiting == len(waiters), 2.0)
        assert gate.wants() == {"B", "C"}
        count = len(seen)
        await until(lambda: len(seen) > count + 1, 2.0)
        assert seen[-1] == (True, frozenset({"B", "C"}))
        waiters["w3"].cancel()
        await until(lambda: gate.waiting == 2, 2.0)
        count = len(seen)
        await until(lambda: len(seen) > count + 1, 2.0)
        assert seen[-1] == (True, frozenset({"B"})) and gate.wants() == {"B"}
        for task in waiters.values():
            task.cancel()

    asyncio.run(run())


def test_only_the_front_of_the_queue_asks_again_the_rest_sleep_until_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The POLLING_WAITERS at the front ask every RETRY_SECONDS for the replicas they prefer (slots other workers and
    gateways give back are seen only by asking); the one behind them tried once on arrival and then sleeps, neither
    trying nor waking, until it reaches the front: a thousand waiters waking every 50 ms took the processor's CPU on
    the simulated fleet past its capacity."""
    waits: list[float] = []
    wait_for = asyncio.wait_for

    async def counted(awaitable: Any, timeout: float) -> Any:
        waits.append(timeout)
        return await wait_for(awaitable, timeout)

    monkeypatch.setattr(asyncio, "wait_for", counted)  # admission reads asyncio.wait_for at each wait
    front = [f"f{i}" for i in range(admission.POLLING_WAITERS)]

    async def run() -> None:
        gate = ModelGate(queue_max=64, queue_timeout=5.0, on_change=lambda: None)
        replicas = _Replicas({**{name: {"A"} for name in front}, "behind": {"B"}})
        queued = {}
        for name in [*front, "behind"]:
            queued[name] = asyncio.ensure_future(gate.admit(replicas.attempt(name)))
            await until(lambda: gate.waiting == len(queued), 2.0)
        await until(lambda: min(replicas.attempts[name] for name in front) >= 4, 2.0)
        assert replicas.attempts["behind"] == 1
        assert len([w for w in waits if w > admission.RETRY_SECONDS]) == 1  # behind: one wait, to its deadline
        replicas.free.append("A")
        assert gate.released("A") is True  # offered to f0; a front waiter whose poll fires first may take it instead
        done, _ = await asyncio.wait([queued[name] for name in front], timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
        assert [task.result() for task in done] in [[f"{name}@A"] for name in front]
        await until(lambda: replicas.attempts["behind"] >= 3, 2.0)  # at the front now: it asks again
        for task in queued.values():
            task.cancel()

    asyncio.run(run())


def test_a_slow_replica_stays_ready_a_while_a_refusing_one_goes_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy replica answering its metrics late keeps its place (requests keep counting against its cap) until
    three reads in a row time out; one that refuses or errs is out at the next read."""
    monkeypatch.setattr(endpoints, "SCRAPE_TIMEOUT_SECONDS", 0.1)

    async def run() -> None:
        mode = {"now": "ok"}

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            if mode["now"] == "slow":
                await asyncio.sleep(1)
            status = b"200 OK" if mode["now"] == "ok" else b"503 Service Unavailable"
            writer.write(b"HTTP/1.0 " + status + b"\r\n\r\nvllm:num_requests_running 2\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        table = EndpointTable(_model(address))
        await table.refresh()
        assert table.endpoints[address].ready and table.endpoints[address].running == 2
        mode["now"] = "slow"
        readiness = []
        for _ in range(3):
            await table.refresh()
            readiness.append(table.endpoints[address].ready)
        assert readiness == [True, True, False]
        mode["now"] = "ok"
        await table.refresh()
        assert table.endpoints[address].ready
        mode["now"] = "error"
        await table.refresh()
        assert not table.endpoints[address].ready
        server.close()

    asyncio.run(run())


def test_requests_sharing_a_prefix_count_its_blocks_once() -> None:
    """Requests sharing a 10-block prefix each add 2 blocks (their question's and their output's), not 12: with a
    prefill block worth two of decode, the replica holding the prefix stays cheaper than an idle one prefilling
    all 11 blocks, for the second request and the fourth (counted whole, the third would spill)."""
    router = Router(BLOCK, 2.0, True, PrefixIndex(1024))
    ready = _endpoints(*REPLICAS)
    prompt = [*PROMPT, 7]  # the prefix's 10 blocks and a question in an 11th, partial one
    hashes = token_blocks(prompt, BLOCK, 256, 1)
    first = router.rank(ready, hashes, len(prompt)).ranked[0]
    router.picked(first, hashes, len(prompt), 0)
    for _ in range(3):
        ranking = router.rank(ready, hashes, len(prompt))
        assert (ranking.ranked[0], ranking.reason) == (first, "prefix_hit")
        router.picked(first, hashes, len(prompt), ranking.overlaps[first.address])
    assert first.inflight_blocks == 12 + 3 * 2  # 11 blocks and an output block, then 2 for each sharer


def test_block_hashes_and_homes_agree_across_processes_without_a_tokenizer() -> None:
    """Two workers (processes with different hash seeds) hash a prompt's text the same way and pick the same home, so
    a pod's workers send a new prefix to one replica even without a tokenizer."""
    code = (
        "from inferplane.processor.prefix_index import byte_blocks, home_block, rendezvous\n"
        "hashes = byte_blocks(['a shared system prompt ' * 40], 16, 256, 7)\n"
        "print(hashes[-1], max(('10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000'),"
        " key=lambda r: rendezvous(home_block(hashes, 16), r)))\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, check=True
        ).stdout
        for seed in ("1", "2")
    }
    assert len(seen) == 1
