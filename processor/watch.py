"""One reader of every replica's metrics per pod, whatever its number of workers.

Each worker routes from a table of its models' replicas (:class:`~inferplane.processor.endpoints.EndpointTable`):
ready or not, and the engine's running and waiting requests. Were every worker to read every replica, the pod's
idle cost would be replicas x workers scrapes a round; the supervisor instead runs a :class:`Watcher` on a thread of
its own, whose tables read each replica once a round and send what they read to every worker over a Unix socket in
a directory only the pod's user may enter. A worker's :class:`Feed` hands each round to its own table
(:meth:`~inferplane.processor.endpoints.EndpointTable.follow`), which keeps what only the worker knows: its requests
on each replica, and so how much of the engine's load is other workers' and other gateways'.

The stream is JSON lines, one per event: ``{"model": M}`` when a round of ``M`` begins (the worker notes its
requests on each replica, the count before the read) and ``{"model": M, "replicas": [[address, ready, running,
waiting, kv_usage], ...]}`` when it ends. A worker that connects gets each model's last round at once. When the
watcher cannot be reached, or goes away, the worker reads its replicas itself (logged): routing never rests on it.

The workers learn from each other's picks over the same socket: after each pick a worker sends ``{"model": M, "picked":
[address, hashes]}`` (the block hashes packed as text, :func:`~inferplane.processor.prefix_index.pack_hashes`), which
the watcher passes unread to every other worker, whose prefix index records it as its own. Each worker learning only
from its own picks made them disagree: the room a new prefix's home needs
(:meth:`~inferplane.processor.router.Router.home`) is counted from a worker's index, so two workers placed one prefix on
two replicas, each computing it and each holding a copy. On the simulated fleet (8 replicas of prod's 70B, 20 shared
6,144-token prefixes, 8 req/s, ``docs/simulate.md``) the engines served 83.5-91.5% of prompt tokens from cache behind
the stack's two workers, 91.9-92.1% (the ideal: 92.1%) behind one. A pick's line is about 11 bytes a block; a worker
that leaves :data:`BACKLOG_LIMIT_BYTES` unsent stops sending (its index learns alone). With a Redis, the watcher also
publishes its workers' picks to the gateway's other pods and passes theirs on to its workers (:mod:`.pick_bus`).

The same way the workers share their queues: each sends the replicas its queued requests prefer, ``{"model": M,
"from": worker, "wants": [address, ...]}`` (:mod:`.peer_queues`: a request allowed to take any replica leaves those to
them), and a worker that gives a slot back to the store because none of its queued requests wanted the replica says
so, ``{"model": M, "freed": address}``: every other worker wakes its oldest request preferring the replica to lease
the slot (:meth:`~inferplane.processor.admission.ModelGate.offer`) within a message's latency, where it saw such a
slot only by polling the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Callable, Sequence

from inferplane.processor.config import ModelConfig
from inferplane.processor.endpoints import EndpointTable, Load
from inferplane.processor.pick_bus import PickBus
from inferplane.processor.prefix_index import pack_hashes, unpack_hashes

log = logging.getLogger(__name__)

SOCKET_NAME = "replicas.sock"
"""The watcher's socket, in a directory the supervisor makes for it (``mkdtemp``: only the pod's user enters)."""
LINE_LIMIT_BYTES = 16 * 1024 * 1024
"""Longest line a worker reads: a round of thousands of replicas (about 60 bytes each)."""
BACKLOG_LIMIT_BYTES = 4 * 1024 * 1024
"""A worker that leaves this much unread is cut off (it then reads its replicas itself): a stalled worker must not
make the supervisor hold rounds without end."""
FIRST_ROUND_SECONDS = 10.0
"""How long a starting worker waits for every model's first round (a round waits at most for DNS and the scrape
timeout); past it the worker starts anyway, its tables filled as rounds come."""


def _begin(model: str) -> bytes:
    return json.dumps({"model": model}).encode() + b"\n"


def _round(table: EndpointTable) -> bytes:
    replicas = [
        [load.address, load.ready, load.running, load.waiting, load.kv_usage]
        for load in map(Load.of, table.endpoints.values())
    ]
    return json.dumps({"model": table.model.name, "replicas": replicas}).encode() + b"\n"


class Watcher:
    """The pod's reader: every model's replicas read once a round, each round sent to every connected worker."""

    def __init__(
        self,
        models: Sequence[ModelConfig],
        path: str,
        bus: Callable[[Callable[[bytes], None]], PickBus] | None = None,
    ) -> None:
        """``bus``: makes the pod's end of the gateway's pick channel (:mod:`.pick_bus`) from the watcher's hand-off
        to its workers; None: the pod's workers learn only from each other."""
        self.path = path
        self.tables = {model.name: EndpointTable(model, self._publish) for model in models}
        self._latest: dict[str, bytes] = {}
        self._workers: set[asyncio.StreamWriter] = set()
        self.bus = bus(self._send) if bus is not None else None

    async def serve(self, listening: Callable[[], None] = lambda: None) -> None:
        """Listen on :attr:`path` (``listening`` is called once it does), then read every model's replicas until
        cancelled."""
        server = await asyncio.start_unix_server(self._connected, self.path, limit=LINE_LIMIT_BYTES)
        listening()
        tasks = [table.run(lambda _lost: None, self._beginner(name)) for name, table in self.tables.items()]
        if self.bus is not None:
            tasks.append(self.bus.run())
        try:
            async with server:
                await asyncio.gather(*tasks)
        finally:  # the workers read for themselves from now on (a closed server leaves its connections open)
            for writer in self._workers:
                writer.close()
            if self.bus is not None:
                await self.bus.aclose()

    def _beginner(self, model: str) -> Callable[[], None]:
        line = _begin(model)
        return lambda: self._send(line)

    def _publish(self, table: EndpointTable) -> None:
        line = _round(table)
        self._latest[table.model.name] = line
        self._send(line)

    def _send(self, line: bytes, sender: asyncio.StreamWriter | None = None) -> None:
        for writer in list(self._workers):
            if writer is sender:
                continue
            if writer.transport.get_write_buffer_size() > BACKLOG_LIMIT_BYTES:
                log.error("a processor worker left %d bytes of rounds unread: cut off", BACKLOG_LIMIT_BYTES)
                self._workers.discard(writer)
                writer.close()
                continue
            writer.write(line)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A worker: every model's last round at once, then each round as it ends, until it goes away; each of its
        picks passed to the other workers as it comes (unread: the workers check it)."""
        writer.writelines(list(self._latest.values()))
        self._workers.add(writer)
        try:
            while (line := await reader.readline()).endswith(b"\n"):
                self._send(line, writer)
                if self.bus is not None:
                    await self.bus.publish(line)
        except (OSError, ValueError):  # ValueError: a line past the limit; the worker is then cut off
            pass
        finally:
            self._workers.discard(writer)
            writer.close()


HINTS = ("picked", "freed", "wants")
"""The keys of the lines the workers send each other (:class:`Feed`), beside the watcher's rounds."""
PickedCallback = Callable[[str, str, list[int]], None]
"""Called with a model, a replica's address and a prompt's block hashes another worker placed there."""
FreedCallback = Callable[[str, str], None]
"""Called with a model and a replica's address where another worker gave a slot back to the store."""
WantsCallback = Callable[[str, str, frozenset[str]], None]
"""Called with a model, another worker, and the replicas its queued requests prefer."""


class Feed:
    """A worker's end of the watcher's socket: each round it sends is followed by the worker's table of that model,
    each pick of another worker handed to ``on_picked``, each slot it freed to ``on_freed`` and what its queue waits
    for to ``on_wants``, and this worker's sent (:meth:`picked`, :meth:`freed`, :meth:`wants`)."""

    def __init__(
        self,
        path: str,
        tables: dict[str, EndpointTable],
        on_lost: Callable[[str, list[str]], None],
        on_picked: PickedCallback = lambda _model, _address, _hashes: None,
        *,
        on_freed: FreedCallback = lambda _model, _address: None,
        on_wants: WantsCallback = lambda _model, _worker, _wants: None,
    ) -> None:
        self.path = path
        self.tables = tables
        self._on_lost = on_lost
        self._on_picked = on_picked
        self._on_freed = on_freed
        self._on_wants = on_wants
        self._unreadable_hint_logged = False
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def connect(self) -> bool:
        """Connect and take rounds until every model has had one (at most :data:`FIRST_ROUND_SECONDS`); False when
        the watcher cannot be reached, or ends or garbles the stream before that."""
        try:
            self._reader, self._writer = await asyncio.open_unix_connection(self.path, limit=LINE_LIMIT_BYTES)
        except OSError as error:
            log.error("the pod's replica watcher at %s cannot be reached (%s)", self.path, error)
            return False
        unseen = set(self.tables)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_ROUND_SECONDS):
                while unseen:
                    if (model := await self._next()) is None:  # gone already, or not the watcher
                        await self.aclose()
                        return False
                    unseen.discard(model)
        if unseen:
            log.warning("no first round from the replica watcher for %s: starting without", sorted(unseen))
        return True

    async def run(self) -> None:
        """Take rounds until the watcher goes away."""
        while await self._next() is not None:
            pass
        log.error("the pod's replica watcher went away")

    async def _next(self) -> str | None:
        """Take one line; the model of a round that ended (or of a round's beginning: ''), None at the end."""
        assert self._reader is not None, "connect() first"
        try:
            line = await self._reader.readline()
        except (OSError, ValueError):  # ValueError: a line past the limit, the stream is then unusable
            return None
        if not line.endswith(b"\n"):
            return None
        try:
            event = json.loads(line)
            model = str(event["model"])
            if self._hint(model, event):
                return ""
            replicas = event.get("replicas")
            loads = [Load(str(a), bool(r), float(n), float(w), float(kv)) for a, r, n, w, kv in replicas or ()]
        except (ValueError, KeyError, TypeError, IndexError):  # not the watcher's line: stop following, read alone
            log.exception("an unreadable line from the replica watcher: %r", line[:200])
            return None
        table = self.tables.get(model)
        if table is None:  # a model this worker's config lacks (none today: both read one file)
            return ""
        if replicas is None:
            table.begin_round()
            return ""
        lost = table.follow(loads)
        if lost:
            self._on_lost(model, lost)
        return model

    def _hint(self, model: str, event: dict[str, object]) -> bool:
        """Another worker's pick (to the index), freed slot or queue's wants, handed on; False when ``event`` is none
        of them (a round's line). One this worker cannot read is passed over (logged once), the stream followed on:
        these are hints, and the rounds on the same stream are what the worker routes by."""
        kind = next((k for k in HINTS if event.get(k) is not None), None)
        if kind is None:
            return False
        value = event[kind]
        hand: Callable[[], None]
        try:
            if kind == "picked":
                if not isinstance(value, list) or len(value) != 2:
                    raise ValueError("not [address, hashes]")
                hand = functools.partial(self._on_picked, model, str(value[0]), unpack_hashes(str(value[1])))
            elif kind == "freed":
                hand = functools.partial(self._on_freed, model, str(value))
            else:
                if not isinstance(value, list) or "from" not in event:
                    raise ValueError("not [address, ...] from a worker")
                hand = functools.partial(self._on_wants, model, str(event["from"]), frozenset(map(str, value)))
        except ValueError as error:
            if not self._unreadable_hint_logged:
                log.warning(
                    "passed over a %s another worker sent that this one cannot read (%s): %r", kind, error, value
                )
                self._unreadable_hint_logged = True
            return True
        if model in self.tables:
            hand()
        return True

    def picked(self, model: str, address: str, hashes: Sequence[int]) -> None:
        """Tell the other workers that this one placed a prompt of ``hashes`` on ``address`` (nothing when not
        connected, or when the watcher has left :data:`BACKLOG_LIMIT_BYTES` unread)."""
        self._send({"model": model, "picked": [address, pack_hashes(hashes)]})

    def freed(self, model: str, address: str) -> None:
        """Tell the other workers that this one gave a slot on ``address`` back to the store (nothing when not
        connected, or when the watcher has left :data:`BACKLOG_LIMIT_BYTES` unread)."""
        self._send({"model": model, "freed": address})

    def wants(self, model: str, worker: str, wants: frozenset[str]) -> None:
        """Tell the other workers which replicas this one's (``worker``'s) queued requests prefer."""
        self._send({"model": model, "from": worker, "wants": sorted(wants)})

    def _send(self, event: dict[str, object]) -> None:
        writer = self._writer
        if writer is None or writer.is_closing():
            return
        if writer.transport.get_write_buffer_size() > BACKLOG_LIMIT_BYTES:
            return
        writer.write(json.dumps(event).encode() + b"\n")

    async def aclose(self) -> None:
        """Disconnect."""
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
