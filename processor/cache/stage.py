"""The response cache as a stage of the ext_proc processor: look up on the request body, store from the response.

:class:`inferplane.processor.ext_proc.Processor` calls :meth:`CacheStage.lookup` once a request is admitted (tenant,
model and budgets settled; the body as it will be forwarded). A hit is answered at once with an immediate response
(JSON, or the SSE replay for a stream) and never reaches the model server. A miss goes upstream with the verdict
(``miss`` or ``bypass``) in Envoy's dynamic metadata, which the model routes echo as the response's
``x-inferplane-cache``. A cacheable miss's lookup is held in the cache (:meth:`CacheStage.hold`) under a token that
travels with the request's settlement (:mod:`inferplane.processor.settlement`): the response's chunks reach the
observing filter's stream, possibly in another worker, which collects them (bounded by the entry size) and, when the
stream ends with a complete answer, takes the held lookup and stores the answer in the background, so the client
never waits on the cache."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2

from inferplane.processor.cache.embedders import Vector
from inferplane.processor.cache.request import CACHE_HEADER, Endpoint
from inferplane.processor.cache.sse import assemble, events
from inferplane.processor.cache.store import Lookup, ResponseCache
from inferplane.processor.config import CACHE_RESULT_METADATA_KEY, METADATA_NAMESPACE

log = logging.getLogger(__name__)

ENDPOINTS: dict[str, Endpoint] = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
HEALTH_INTERVAL_SECONDS = 5.0
"""How often an idle processor pings the cache, so the ``up`` gauge (and its alert) follow it."""


def header(key: str, value: str) -> Any:
    """One header to set (overwriting)."""
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


@dataclass
class Pending:
    """A missed request's answer being collected: the token of its held lookup and the response so far."""

    token: str
    body: bytearray = field(default_factory=bytearray)
    event_stream: bool = False
    overflow: bool = False


class CacheStage:
    """The processor's use of a :class:`ResponseCache`."""

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        """Create the vector index and start the health pings."""
        await self.cache.ensure_index()
        self._spawn(self._health())

    async def _health(self) -> None:
        while True:
            await self.cache.check()
            await asyncio.sleep(HEALTH_INTERVAL_SECONDS)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def lookup(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        tenant: str,
        tier: str,
        headers: Mapping[str, str],
        embedded: tuple[str, Vector] | None = None,
    ) -> Lookup | None:
        """The lookup for a completions request (``None`` for other paths). ``embedded``: a text already embedded
        for this request (a difficulty route's) with its vector, used if it is the text the cache compares."""
        endpoint = ENDPOINTS.get(path)
        if endpoint is None:
            return None
        return await self.cache.lookup(
            endpoint, body, tenant=tenant, tier=tier, header=headers.get(CACHE_HEADER), embedded=embedded
        )

    @staticmethod
    def reply(lookup: Lookup, extra_headers: Mapping[str, str] | None = None) -> Any:
        """The immediate 200 that answers a hit (with ``extra_headers``: the processor's own, such as the route)."""
        content, content_type = lookup.response()
        mutation = pb.HeaderMutation(
            set_headers=[
                header("content-type", content_type),
                *(header(k, v) for k, v in {**lookup.response_headers(), **(extra_headers or {})}.items()),
            ]
        )
        return pb.ProcessingResponse(
            immediate_response=pb.ImmediateResponse(
                status=http_status_pb2.HttpStatus(code=200),
                headers=mutation,
                body=content,
                details="inferplane_cache_hit",
            )
        )

    @staticmethod
    def tag(forwarded: Any, lookup: Lookup | None) -> Any:
        """Put the verdict (miss or bypass) of the request going upstream in Envoy's dynamic metadata
        (``inferplane.cache_result``); the model routes copy it into the response's ``x-inferplane-cache`` (response
        headers do not pass through the processor, and request headers set in the body phase are dropped)."""
        if lookup is not None:
            value = lookup.response_headers()[CACHE_HEADER]
            # Beside what the request already carries in the namespace (a provider's name, which its route matches).
            forwarded.dynamic_metadata.get_or_create_struct(METADATA_NAMESPACE)[CACHE_RESULT_METADATA_KEY] = value
        return forwarded

    def hold(self, lookup: Lookup) -> str:
        """Hold a cacheable miss's lookup for its answer, in the background; the token to collect it under ("" for
        any other lookup, or while the cache is unavailable). The request goes on without waiting for the write (a
        round trip, 0.25 ms of a miss's latency at c=1): its answer is read no sooner than the response's end, and
        Envoy hands the observing stream's last message over only as it closes the stream,
        ``deferred_close_timeout`` (0.5 s) later, long after the write. A write that fails or is still in flight
        then only leaves that answer uncached (:meth:`_store_held` finds nothing to store it under)."""
        token = self.cache.hold_token(lookup)
        if token:
            self._spawn(self.cache.hold(lookup, token))
        return token

    def on_response_body(self, pending: Pending | None, chunk: bytes, end: bool, event_stream: bool) -> None:
        """Collect a chunk; at the end of the response, take the held lookup and store a complete answer under it in
        the background. Error bodies carry no finished ``choices`` and are never stored."""
        if pending is None:
            return
        pending.event_stream = event_stream
        if not pending.overflow:
            limit = self.cache.config.max_entry_bytes * (4 if pending.event_stream else 1)
            if len(pending.body) + len(chunk) > limit:
                pending.overflow = True
                pending.body.clear()
            else:
                pending.body += chunk
        if not end:
            return
        answer: dict[str, Any] | None = None
        if not pending.overflow:
            try:
                if pending.event_stream:
                    answer = assemble(events(bytes(pending.body)))
                else:
                    parsed = json.loads(bytes(pending.body))
                    answer = parsed if isinstance(parsed, dict) else None
            except ValueError:
                answer = None
        pending.body.clear()
        self._spawn(self._store_held(pending.token, answer))

    async def _store_held(self, token: str, answer: Mapping[str, Any] | None) -> None:
        """Take the lookup held under ``token`` (gone from the cache either way) and store ``answer`` for it."""
        lookup = await self.cache.take_held(token)
        if lookup is not None and answer is not None:
            await self.cache.store(lookup, answer)

    async def aclose(self) -> None:
        """Stop the health pings, let stores finish, close the client."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.cache.aclose()
