"""A forwarded completion's settlement: its usage accounted, its budget reservation corrected, its answer cached.

Envoy runs the processor twice for a completion it forwards, and tells it once more when the response is over. The
placing filter gets the request body, decides, and its stream ends when the response does, which frees the replica
slot; with the forwarded body it hands the request's :class:`Settlement` on in Envoy's dynamic metadata
(:data:`SETTLE_METADATA_NAMESPACE`). Envoy's Lua filter reads the response's ``usage`` as it streams through
(``components/gateway/settle_renderer.py``) and Envoy's access log sends the request's entry, the settlement and the
usage in it, to the processor (:meth:`Settler.logged`), which accounts the tokens and corrects the reservation: no
message per chunk (issue 33: reading the chunks was most of the gateway's CPU on a streamed response,
``docs/gateway.md``). The observing filter, in Envoy's ``observability_mode``, streams a cacheable miss's response
chunks to the processor with the settlement, one way, and the answer is stored (:meth:`Settler.observe`); the routes
turn the filter off for every other response. Envoy balances the access log's and the observing filter's streams across
the pod's workers on its own, so everything the settlement needs travels with it: the budgets are shared in Redis,
and a cacheable answer's lookup waits in the cache (:meth:`inferplane.processor.cache.stage.CacheStage.hold`) under
the token the settlement carries.

Nothing here trusts a client: dynamic metadata is set by Envoy's filters only, and a response without a settlement
(a local reply, such as a rejection or a cached answer) is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from inferplane.processor.budgets import SharedBudgets
from inferplane.processor.cache.stage import CacheStage, Pending
from inferplane.processor.config import (
    ATTRIBUTES_NAMESPACE,
    EVENT_STREAM_STARTS,
    SETTLE_CACHE_KEY,
    SETTLE_METADATA_NAMESPACE,
    SETTLE_TENANT_KEY,
    STATUS_ATTRIBUTE,
    USAGE_COMPLETION_KEY,
    USAGE_ENDED_KEY,
    USAGE_METADATA_NAMESPACE,
    USAGE_PROMPT_KEY,
    USAGE_STREAM_KEY,
    ProcessorConfig,
)
from inferplane.processor.providers import Providers
from inferplane.processor.stage_clock import StageClock

log = logging.getLogger(__name__)

_EVENT_STREAM_STARTS = tuple(start.encode() for start in EVENT_STREAM_STARTS)


@dataclass(frozen=True)
class Settlement:
    """What settling a forwarded request's response needs, handed from the placing filter to the observing one."""

    tenant: str
    tier: str
    model: str
    reserved: int
    """Prompt tokens reserved on the tenant's token budget at admission (0 where Redis did not count them)."""
    provider: str = ""
    """The hosted provider the request was handed to, if any: its usage is the provider's, accounted as such."""
    cache: str = ""
    """The token of the response cache's held lookup, for a cacheable miss (else empty)."""

    def metadata(self) -> dict[str, Any]:
        """The settlement as the dynamic metadata struct (its namespace's fields)."""
        return {
            SETTLE_TENANT_KEY: self.tenant,
            "tier": self.tier,
            "model": self.model,
            "reserved": self.reserved,
            "provider": self.provider,
            SETTLE_CACHE_KEY: self.cache,
        }

    @classmethod
    def of(cls, message: Any) -> Settlement | None:
        """The settlement a ``ProcessingRequest`` carries in its forwarded metadata (None without one)."""
        return cls.in_metadata(message.metadata_context.filter_metadata)

    @classmethod
    def in_metadata(cls, namespaces: Any) -> Settlement | None:
        """The settlement in an Envoy ``Metadata``'s ``filter_metadata`` (None without one)."""
        if SETTLE_METADATA_NAMESPACE not in namespaces:
            return None
        fields = namespaces[SETTLE_METADATA_NAMESPACE].fields
        try:
            return cls(
                tenant=fields[SETTLE_TENANT_KEY].string_value,
                tier=fields["tier"].string_value,
                model=fields["model"].string_value,
                reserved=int(fields["reserved"].number_value),
                provider=fields["provider"].string_value if "provider" in fields else "",
                cache=fields[SETTLE_CACHE_KEY].string_value if SETTLE_CACHE_KEY in fields else "",
            )
        except (KeyError, ValueError):
            log.warning("a response's settlement metadata is incomplete; it is left unsettled")
            return None


@dataclass(frozen=True)
class _Response:
    """What Envoy read of one settled response (its access log entry)."""

    status: int
    """The response's status (0: none was sent)."""
    event_stream: bool
    ended: bool
    """Its last byte passed (not: the client left, or the upstream reset it)."""
    usage: tuple[int, int] | None
    """(prompt, completion) tokens of its ``usage``, if it had one."""

    @classmethod
    def logged(cls, entry: Any) -> _Response:
        """The response of an ``HTTPAccessLogEntry`` (the Lua filter's reading of it in its metadata)."""
        namespaces = entry.common_properties.metadata.filter_metadata
        fields = namespaces[USAGE_METADATA_NAMESPACE].fields if USAGE_METADATA_NAMESPACE in namespaces else {}
        usage = None
        if USAGE_PROMPT_KEY in fields and USAGE_COMPLETION_KEY in fields:
            usage = (int(fields[USAGE_PROMPT_KEY].number_value), int(fields[USAGE_COMPLETION_KEY].number_value))
        return cls(
            status=entry.response.response_code.value,
            event_stream=USAGE_STREAM_KEY in fields and fields[USAGE_STREAM_KEY].bool_value,
            ended=USAGE_ENDED_KEY in fields and fields[USAGE_ENDED_KEY].bool_value,
            usage=usage,
        )


class Settler:
    """Settles each forwarded request from its access log entry (:meth:`logged`) and stores a cacheable answer from
    its observing stream (:meth:`observe`)."""

    def __init__(
        self,
        config: ProcessorConfig,
        budgets: SharedBudgets,
        *,
        providers: Providers,
        cache: CacheStage | None,
        token: Callable[[str, str, str, str], Counter],
        stages: StageClock,
    ) -> None:
        self.config = config
        self.budgets = budgets
        self.providers = providers
        self.cache = cache
        self.token = token
        """The labelled child of the tokens counter (tenant, tier, model, kind)."""
        self.stages = stages

    def logged(self, entry: Any) -> None:
        """Settle the request of one of Envoy's access log entries (one without a settlement is left alone)."""
        settlement = Settlement.in_metadata(entry.common_properties.metadata.filter_metadata)
        if settlement is None:
            return
        started = self.stages.read()
        self._account(settlement, _Response.logged(entry))
        self.stages.add("account", started)

    async def observe(self, first: Any, rest: AsyncIterator[Any]) -> None:
        """Read a cacheable answer's chunks, ``first`` then ``rest``, into the response cache. Only a cacheable
        miss's response is observed (the rendered routes turn the filter off for every other); should another reach
        it, the stream is closed at once (Envoy sends no more of it)."""
        settlement = Settlement.of(first)
        if settlement is None or not settlement.cache or self.cache is None:
            return
        # An error's body is never stored; collecting nothing still takes the held lookup out at the end.
        pending = Pending(settlement.cache, overflow=_status(first) not in (0, 200))
        seen, event_stream, ended = False, False, False
        message: Any = first
        try:
            while message is not None and not ended:
                if message.WhichOneof("request") == "response_body":
                    started = self.stages.read()
                    body = message.response_body
                    if not seen:
                        seen, event_stream = True, body.body.startswith(_EVENT_STREAM_STARTS)
                    ended = body.end_of_stream
                    self.cache.on_response_body(pending, body.body, ended, event_stream)
                    self.stages.add("response", started)
                message = await anext(rest, None)
        finally:
            if not ended:
                # Cut short: the held lookup is taken out, nothing stored.
                pending.overflow = True
                self.cache.on_response_body(pending, b"", True, event_stream)

    def _account(self, settlement: Settlement, response: _Response) -> None:
        """Account the response's usage and correct the tenant's reservation by it (no usage: an error, a stream cut
        short, return it)."""
        provider = self.config.provider(settlement.provider) if settlement.provider else None
        if provider is not None and response.ended:
            # A success carries usage (a stream's too, when the gateway asked for it): none is the provider's error.
            expected = not response.event_stream or self.config.inject_stream_usage
            self.providers.answered(provider, ok=response.usage is not None or not expected)
        if response.usage is None:
            if response.status == 0:
                return  # the client left before the response began: the engine had the prompt, its reservation stands
            self.budgets.add_tokens(settlement.tenant, -settlement.reserved)
            return
        prompt, completion = response.usage
        if provider is not None:
            self.providers.account(provider, settlement.tier, settlement.tenant, prompt, completion)
        else:
            self.token(settlement.tenant, settlement.tier, settlement.model, "prompt").inc(prompt)
            self.token(settlement.tenant, settlement.tier, settlement.model, "completion").inc(completion)
        self.budgets.add_tokens(settlement.tenant, prompt + completion - settlement.reserved)


def _status(message: Any) -> int:
    """The response status the observing filter sent as an attribute (0 without it)."""
    attributes = message.attributes
    if ATTRIBUTES_NAMESPACE not in attributes:
        return 0
    fields = attributes[ATTRIBUTES_NAMESPACE].fields
    return int(fields[STATUS_ATTRIBUTE].number_value) if STATUS_ATTRIBUTE in fields else 0
