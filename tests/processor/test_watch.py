"""The pod's one reader of the replicas (``processor/watch.py``): a worker's table follows a round read elsewhere
exactly as it would its own read; one watcher's rounds reach every worker, each replica read once a round however
many workers follow; and a worker whose watcher is absent or goes away reads its replicas itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from inferplane.processor import admission, watch
from inferplane.processor.admission import Turn
from inferplane.processor.config import ModelConfig
from inferplane.processor.endpoints import Endpoint, EndpointTable, Load
from inferplane.processor.ext_proc import Placement, Processor
from inferplane.processor.pick_bus import PickBus
from inferplane.processor.prefix_index import pack_hashes
from inferplane.processor.redis_connection import connect_redis
from inferplane.processor.slots import Slot
from inferplane.processor.watch import Feed, Watcher
from tests.gateway_support import model_config, routing_config, until
from tests.processor.test_ext_proc import _config

UP, DOWN = "10.0.0.1:8000", "10.0.0.2:8000"


def _model(*endpoints: str, tokenizer: str | None = None) -> ModelConfig:
    routing = routing_config(scrape_interval_seconds=0.05, dns_refresh_seconds=0.05)
    return model_config("m", endpoints, tokenizer_path=tokenizer, routing=routing)


class Replica:
    """An engine's ``/metrics`` that reports as running requests how many times it has been read."""

    def __init__(self) -> None:
        self.reads = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.reads += 1
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nvllm:num_requests_running %d\n" % self.reads)
        await writer.drain()
        writer.close()

    def close(self) -> None:
        assert self._server is not None
        self._server.close()


async def _read_by_the_worker(processor: Processor, replica: Replica) -> None:
    """Wait for a few more reads of the replica (nothing else reads it) and the worker's table showing them."""
    table, reads = processor.tables["m"], replica.reads
    await until(lambda: replica.reads > reads + 2 and table.ready()[0].running > reads + 2, 10.0)


def test_a_followed_round_is_read_as_the_tables_own() -> None:
    """The engine's count is compared with the worker's requests when the round began or when it ended, the larger
    (as a worker's own read compares the counts before and after it); a replica that left or went unready is lost,
    and a replica becoming ready wakes a request waiting for one."""

    async def run() -> None:
        changes: list[int] = []
        table = EndpointTable(_model(UP), lambda t: changes.append(len(t.ready())))
        assert table.follow([Load(UP, True, 3, 1, 0.5), Load(DOWN, False, 0, 0, 0)]) == []
        up = table.endpoints[UP]
        assert (up.ready, up.running, up.waiting, up.kv_usage, up.engine_active) == (True, 3, 1, 0.5, 4)
        assert not table.endpoints[DOWN].ready and changes == [1]
        up.inflight = 3
        table.begin_round()
        up.inflight = 1  # two of this worker's requests ended while the watcher read
        assert table.follow([Load(UP, True, 5, 0, 0), Load(DOWN, False, 0, 0, 0)]) == []
        assert up.inflight_at_scrape == 3
        table.begin_round()
        up.inflight = 2  # one started while the watcher read
        table.follow([Load(UP, True, 5, 0, 0), Load(DOWN, False, 0, 0, 0)])
        assert up.inflight_at_scrape == 2
        waiting = asyncio.ensure_future(table.wait_ready(5.0))
        assert table.follow([Load(UP, False, 0, 0, 0), Load(DOWN, False, 0, 0, 0)]) == [UP]  # went unready
        await asyncio.sleep(0.01)
        assert not waiting.done()
        assert table.follow([Load(DOWN, True, 0, 0, 0)]) == [UP]  # left
        assert await asyncio.wait_for(waiting, 0.1)  # woken by the round, not the 0.25 s poll
        assert list(table.endpoints) == [DOWN] and changes == [1, 1, 1, 0, 1]

    asyncio.run(run())


def _recorder(readings: list[float]) -> Callable[[EndpointTable], None]:
    """A table's change callback that notes each round's running count of its replica."""
    return lambda table: readings.extend(e.running for e in table.endpoints.values())


def test_one_read_a_round_reaches_every_worker(tmp_path: Path) -> None:
    """Two workers follow one watcher: both see every round's reading (the replica's read count, one more each
    round, no round skipped), and the replica is read once a round, not once per worker."""

    async def run() -> None:
        replica = Replica()
        model = _model(await replica.start())
        path = str(tmp_path / watch.SOCKET_NAME)
        listening = asyncio.Event()
        watcher = asyncio.ensure_future(Watcher([model], path).serve(listening.set))
        await listening.wait()
        seen: list[list[float]] = [[], []]
        feeds = []
        for readings in seen:
            table = EndpointTable(model, _recorder(readings))
            feed = Feed(path, {"m": table}, lambda _model, _lost: None)
            assert await feed.connect()
            feeds.append(feed)
        followers = [asyncio.ensure_future(feed.run()) for feed in feeds]
        await until(lambda: all(len(readings) >= 6 for readings in seen), 10.0)
        for readings in seen:
            assert readings == list(range(int(readings[0]), int(readings[0]) + len(readings)))
        assert replica.reads - max(r[-1] for r in seen) <= 1  # a round may be in flight
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await asyncio.wait_for(asyncio.gather(*followers), 5)  # the watcher went away: each feed's run ends
        for feed in feeds:
            await feed.aclose()
        replica.close()

    asyncio.run(run())


def test_a_workers_picks_reach_every_other_worker_of_the_pod(tmp_path: Path, tokenizer_file: str) -> None:
    """A pick one worker sends reaches the pod's other workers, not itself: a following processor's prefix index
    records it as its own (a replica it knows), and a pick for a model or replica it lacks changes nothing."""

    async def run() -> None:
        replica = Replica()
        model = _model(await replica.start(), tokenizer=tokenizer_file)
        address = next(iter(model.endpoints))
        path = str(tmp_path / watch.SOCKET_NAME)
        listening = asyncio.Event()
        watcher = asyncio.ensure_future(Watcher([model], path).serve(listening.set))
        await listening.wait()
        got: list[list[tuple[str, str, list[int]]]] = [[], []]
        feeds = []
        for picks in got:
            feed = Feed(path, {"m": EndpointTable(model, lambda _t: None)}, lambda _m, _l: None, _appender(picks))
            assert await feed.connect()
            feeds.append(feed)
        followers = [asyncio.ensure_future(feed.run()) for feed in feeds]
        processor = Processor(_config(tokenizer_file, model), None, CollectorRegistry())
        await processor.start(path)
        index = processor.routers["m"].index
        feeds[0].picked("m", address, [11, 12, 13])
        feeds[0].picked("other", address, [21])  # a model the workers lack
        feeds[0].picked("m", "10.9.9.9:8000", [31])  # a replica the processor does not know
        await until(lambda: len(got[1]) == 2 and index.overlap(address, [11, 12, 13]) == 3, 10.0)
        assert got == [[], [("m", address, [11, 12, 13]), ("m", "10.9.9.9:8000", [31])]]
        assert index.endpoints() == (address,) and index.size(address) == 3
        # The processor's own pick goes out to both other workers, with the prompt's hashes.
        placement = await processor._place(model, [41, 42], 32)
        assert placement is not None and placement.endpoint.address == address
        await until(lambda: all(len(picks) == (1, 3)[n] for n, picks in enumerate(got)), 10.0)
        assert got[0] == [("m", address, [41, 42])] and got[1][-1] == ("m", address, [41, 42])
        await processor.aclose()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await asyncio.wait_for(asyncio.gather(*followers), 5)
        for feed in feeds:
            await feed.aclose()
        replica.close()

    asyncio.run(run())


@contextlib.asynccontextmanager
async def _two_workers(
    tmp_path: Path, tokenizer_file: str, redis_port: int | None = None
) -> AsyncIterator[list[Processor]]:
    """Two processor workers of one pod on its watcher (and on one slot store with ``redis_port``); closed after."""
    replica = Replica()
    model = _model(await replica.start(), tokenizer=tokenizer_file)
    path = str(tmp_path / watch.SOCKET_NAME)
    listening = asyncio.Event()
    watcher = asyncio.ensure_future(Watcher([model], path).serve(listening.set))
    await listening.wait()
    config = _config(tokenizer_file, model)
    redis = (lambda: connect_redis(f"redis://127.0.0.1:{redis_port}/0", 0.5)) if redis_port else (lambda: None)
    workers = [Processor(config, redis(), CollectorRegistry()) for _ in range(2)]
    for worker in workers:
        await worker.start(path)
    try:
        yield workers
    finally:
        for worker in workers:
            await worker.aclose()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        replica.close()


def test_a_slot_one_worker_gives_back_is_offered_to_another_workers_waiter_preferring_it(
    tmp_path: Path, tokenizer_file: str, redis_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers of a pod on one watcher and one slot store. The first holds replica A's only slot and queues a
    request waiting for B; the second queues one waiting for A. When the first's request on A ends, none of its
    waiters wants A: the slot goes back to the store, the second worker is told, and its waiter leases it. Nobody
    polls here (``RETRY_SECONDS`` past the queue's timeout, the heads never take any replica): only the message can
    wake it."""
    monkeypatch.setattr(admission, "RETRY_SECONDS", 60.0)
    monkeypatch.setattr(admission, "HEAD_PATIENCE_SECONDS", 60.0)

    async def run() -> None:
        async with _two_workers(tmp_path, tokenizer_file, redis_port) as (first, second):
            await gives_back(first, second)

    async def gives_back(first: Processor, second: Processor) -> None:
        slot = await first.slots.acquire("m", ["a:1"], 1, 1)
        assert slot is not None and await second.slots.acquire("m", ["a:1"], 1, 1) is None  # A's only slot

        def waiting_for(worker: Processor, address: str) -> Callable[[Turn], Awaitable[Slot | None]]:
            async def attempt(turn: Turn) -> Slot | None:
                turn.prefers = frozenset({address})
                return await worker.slots.acquire("m", [address], 1, 1) if address == "a:1" else None

            return attempt

        waiting_b = asyncio.ensure_future(first.gates["m"].admit(waiting_for(first, "b:1")))
        waiting_a = asyncio.ensure_future(second.gates["m"].admit(waiting_for(second, "a:1")))
        await until(lambda: first.gates["m"].waiting == second.gates["m"].waiting == 1, 2.0)
        first._unplace(Placement("m", Endpoint("a:1"), slot, 1))
        taken = await asyncio.wait_for(waiting_a, 5.0)
        assert taken is not None and taken.endpoint == "a:1" and second.slots.leased("m", "a:1") == 1
        assert first.slots.leased("m", "a:1") == 0 and not waiting_b.done()
        waiting_b.cancel()

    asyncio.run(run())


def test_each_worker_hears_which_replicas_the_others_queues_wait_for(
    tmp_path: Path, tokenizer_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers of a pod on one watcher: what the second's queue waits for reaches the first within a send, and
    again when it changes (its queue emptied); what the first says of its own never comes back to it."""
    monkeypatch.setattr(admission, "RETRY_SECONDS", 60.0)  # nobody polls: the queue stays as built

    async def run() -> None:
        async with _two_workers(tmp_path, tokenizer_file) as (first, second):
            await hears(first, second)

    async def hears(first: Processor, second: Processor) -> None:
        async def waits_for_a(turn: Turn) -> None:
            turn.prefers = frozenset({"a:1"})

        queued = [asyncio.ensure_future(gate.admit(waits_for_a)) for gate in (first.gates["m"], second.gates["m"])]
        await until(lambda: first.gates["m"].waiting == second.gates["m"].waiting == 1, 2.0)
        await until(lambda: first.peer_queues.wanted("m") == {"a:1"}, 5.0)
        assert second.peer_queues.wanted("m") == {"a:1"}
        queued[1].cancel()
        await until(lambda: first.peer_queues.wanted("m") == frozenset(), 5.0)
        assert second.peer_queues.wanted("m") == {"a:1"}  # the first's queue still waits for A
        queued[0].cancel()

    asyncio.run(run())


def test_a_pods_picks_reach_every_other_pod_through_redis_once(tmp_path: Path, redis_port: int) -> None:
    """Two pods (two watchers on one channel of a real Redis), two workers on the first and one on the second: a
    pick of the first pod's first worker reaches its other worker over the socket and the second pod's worker over
    Redis, each exactly once, and the first pod hears nothing of its own back; Redis dropping the subscriptions stops
    nothing for good."""

    async def run() -> None:
        replica = Replica()
        model = _model(await replica.start())
        channel = f"test:{tmp_path.name}:{watch.SOCKET_NAME}:picks"
        url = f"redis://127.0.0.1:{redis_port}"
        watchers, serving = [], []
        for pod in ("a", "b"):
            (tmp_path / pod).mkdir()
            path = str(tmp_path / pod / watch.SOCKET_NAME)
            listening = asyncio.Event()
            watcher = Watcher([model], path, lambda deliver: PickBus(url, channel, deliver, 1.0))
            serving.append(asyncio.ensure_future(watcher.serve(listening.set)))
            await listening.wait()
            assert watcher.bus is not None
            await until(watcher.bus.subscribed.is_set, 10.0)
            watchers.append((path, watcher))
        got: list[list[tuple[str, str, list[int]]]] = [[], [], []]
        feeds = []
        for path, picks in zip((watchers[0][0], watchers[0][0], watchers[1][0]), got, strict=True):
            feed = Feed(path, {"m": EndpointTable(model, lambda _t: None)}, lambda _m, _l: None, _appender(picks))
            assert await feed.connect()
            feeds.append(feed)
        followers = [asyncio.ensure_future(feed.run()) for feed in feeds]
        feeds[0].picked("m", UP, [1, 2])
        feeds[0].picked("m", UP, [1, 2, 3])
        await until(lambda: len(got[1]) == 2 and len(got[2]) == 2, 10.0)
        feeds[2].picked("m", DOWN, [7])  # and back: the second pod's pick reaches both workers of the first
        # Redis delivers a channel's messages to each subscriber in order: an echo of the first pod's own picks would
        # have reached it before the second pod's.
        await until(lambda: len(got[0]) == 1 and len(got[1]) == 3, 10.0)
        assert got[0] == [("m", DOWN, [7])]
        assert got[1] == [("m", UP, [1, 2]), ("m", UP, [1, 2, 3]), ("m", DOWN, [7])]
        assert got[2] == [("m", UP, [1, 2]), ("m", UP, [1, 2, 3])]
        # Redis drops every subscription (a restart, a failover): picks flow again once the pods have subscribed again
        # (a pick sent in between is lost, as the index's estimate allows).
        admin = Redis(port=redis_port)
        assert await admin.client_kill_filter(_type="pubsub") == 2
        await admin.aclose()
        async with asyncio.timeout(10):
            while ("m", UP, [4]) not in got[2]:
                feeds[0].picked("m", UP, [4])
                await asyncio.sleep(0.1)
        for task in serving:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*serving)
        await asyncio.wait_for(asyncio.gather(*followers), 5)
        for feed in feeds:
            await feed.aclose()
        replica.close()

    asyncio.run(run())


def test_a_pick_a_worker_cannot_read_is_passed_over_and_the_stream_followed_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker of another release (the hashes as a JSON list, as before they were packed) or any garbled pick or
    queue's wants: the worker logs it once and goes on following the watcher, its rounds and the readable picks after
    it."""

    async def run() -> None:
        replica = Replica()
        model = _model(await replica.start())
        address = next(iter(model.endpoints))
        path = str(tmp_path / watch.SOCKET_NAME)
        listening = asyncio.Event()
        watcher = asyncio.ensure_future(Watcher([model], path).serve(listening.set))
        await listening.wait()
        picks: list[tuple[str, str, list[int]]] = []
        feed = Feed(path, {"m": EndpointTable(model, lambda _t: None)}, lambda _m, _l: None, _appender(picks))
        assert await feed.connect()
        follower = asyncio.ensure_future(feed.run())
        _, other = await asyncio.open_unix_connection(path)  # a worker of the pod that writes its own lines
        for picked in ([address, [11, 12]], [address, "not base64!"], [address], "x"):
            other.write(json.dumps({"model": "m", "picked": picked}).encode() + b"\n")
        for wants in ({"wants": [address]}, {"wants": 7, "from": "w"}):  # no sender; not a list
            other.write(json.dumps({"model": "m", **wants}).encode() + b"\n")
        other.write(json.dumps({"model": "m", "picked": [address, pack_hashes([13, 14])]}).encode() + b"\n")
        await other.drain()
        await until(lambda: picks == [("m", address, [13, 14])], 10.0)
        reads = replica.reads
        await until(lambda: replica.reads > reads + 1, 10.0)  # rounds go on arriving, and the worker still follows them
        assert not follower.done()
        logged = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
        assert len(logged) == 1 and logged[0].endswith(f"{[address, [11, 12]]!r}"), logged  # once, the first
        other.close()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await asyncio.wait_for(follower, 5)
        await feed.aclose()
        replica.close()

    with caplog.at_level(logging.WARNING, logger="inferplane.processor.watch"):
        asyncio.run(run())


def _appender(picks: list[tuple[str, str, list[int]]]) -> Callable[[str, str, list[int]], None]:
    return lambda model, address, hashes: picks.append((model, address, hashes))


def test_a_worker_reads_its_replicas_itself_without_a_watcher(tmp_path: Path, tokenizer_file: str) -> None:
    """A watcher that cannot be reached, and one that goes away: either way the worker's table goes on being read,
    by the worker."""

    async def run() -> None:
        replica = Replica()
        config = _config(tokenizer_file, _model(await replica.start(), tokenizer=tokenizer_file))
        alone = Processor(config, None, CollectorRegistry())
        await alone.start(str(tmp_path / "absent.sock"))
        assert alone.tables["m"].ready()  # read before the first request, as without a watcher
        await _read_by_the_worker(alone, replica)
        await alone.aclose()

        path = str(tmp_path / watch.SOCKET_NAME)
        listening = asyncio.Event()
        watcher = asyncio.ensure_future(Watcher(config.models, path).serve(listening.set))
        await listening.wait()
        following = Processor(config, None, CollectorRegistry())
        await following.start(path)
        table = following.tables["m"]
        await until(lambda: bool(table.ready()), 10.0)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await _read_by_the_worker(following, replica)
        await following.aclose()
        replica.close()

    asyncio.run(run())


def test_a_line_the_watcher_does_not_write_ends_the_following(tmp_path: Path, tokenizer_file: str) -> None:
    """A stream that garbles (a line that is not JSON, or misses its model): before the first round the worker does
    not follow at all, after it the worker stops following; either way it reads its replicas itself."""

    async def run() -> None:
        replica = Replica()
        address = await replica.start()
        config = _config(tokenizer_file, _model(address, tokenizer=tokenizer_file))
        for lines in (
            [b"not json\n"],
            [b'{"model": "m", "replicas": [["%s", true, 0, 0, 0]]}\n' % address.encode(), b'{"replicas": []}\n'],
        ):

            async def watcher(
                _reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sent: list[bytes] = lines
            ) -> None:
                writer.writelines(sent)
                await writer.drain()
                await asyncio.sleep(3600)  # holds the stream open: the worker must not wait on it

            path = str(tmp_path / f"garbled-{len(lines)}.sock")
            server = await asyncio.start_unix_server(watcher, path)
            processor = Processor(config, None, CollectorRegistry())
            await processor.start(path)
            await _read_by_the_worker(processor, replica)
            await processor.aclose()
            server.close()
        replica.close()

    asyncio.run(run())
