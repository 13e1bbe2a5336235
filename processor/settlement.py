"""A forwarded completion's settlement: its response read, its usage accounted, its budget reservation corrected,
its answer cached.

Envoy runs the processor twice for a completion it forwards. The placing filter gets the request body, decides, and
its stream ends when the response does, which frees the replica slot; with the forwarded body it hands the request's
:class:`Settlement` on in Envoy's dynamic metadata (:data:`SETTLE_METADATA_NAMESPACE`). The observing filter after it
runs in Envoy's ``observability_mode``: it streams the response's chunks to the processor with that metadata and
waits for no answer, so no chunk waits on the processor and a chunk costs a message one way instead of a round trip
(issue 33: the answered chunks were most of the gateway's CPU on a streamed response, ``docs/gateway.md``). Envoy
balances the two streams across the pod's workers on its own, so everything the settlement needs travels with it:
the budgets are shared in Redis, and a cacheable answer's lookup waits in the cache
(:meth:`inferplane.processor.cache.stage.CacheStage.hold`) under the token the settlement carries.

Nothing here trusts a client: dynamic metadata is set by Envoy's filters only, and a response without a settlement
(a local reply, such as a rejection or a cached answer) is left alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from inferplane.processor.budgets import SharedBudgets
from inferplane.processor.cache.stage import CacheStage, Pending
from inferplane.processor.config import (
    ATTRIBUTES_NAMESPACE,
    SETTLE_METADATA_NAMESPACE,
    STATUS_ATTRIBUTE,
    ProcessorConfig,
)
from inferplane.processor.providers import Providers
from inferplane.processor.stage_clock import StageClock

log = logging.getLogger(__name__)

MAX_ACCOUNTED_BODY_BYTES = 8 * 1024 * 1024
"""A non-streamed response larger than this is not parsed for ``usage`` (its reservation is returned)."""
SSE_STARTS = (b"data:", b"event", b": ", b"id: ")
"""How an event stream's body starts (response headers do not reach the processor); a JSON body starts with "{"."""


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
            "tenant": self.tenant,
            "tier": self.tier,
            "model": self.model,
            "reserved": self.reserved,
            "provider": self.provider,
            "cache": self.cache,
        }

    @classmethod
    def of(cls, message: Any) -> Settlement | None:
        """The settlement a ``ProcessingRequest`` carries in its forwarded metadata (None without one)."""
        namespaces = message.metadata_context.filter_metadata
        if SETTLE_METADATA_NAMESPACE not in namespaces:
            return None
        fields = namespaces[SETTLE_METADATA_NAMESPACE].fields
        try:
            return cls(
                tenant=fields["tenant"].string_value,
                tier=fields["tier"].string_value,
                model=fields["model"].string_value,
                reserved=int(fields["reserved"].number_value),
                provider=fields["provider"].string_value if "provider" in fields else "",
                cache=fields["cache"].string_value if "cache" in fields else "",
            )
        except (KeyError, ValueError):
            log.warning("a response's settlement metadata is incomplete; it is left unsettled")
            return None


@dataclass
class _Response:
    """What the observing stream has read of one response."""

    status: int = 0
    """The response's status (0: not sent)."""
    event_stream: bool = False
    seen: bool = False
    ended: bool = False
    buffer: bytearray = field(default_factory=bytearray)
    usage: tuple[int, int] | None = None
    unreadable: bool = False
    """Reading its usage failed: nothing more is read."""


class Settler:
    """Settles each forwarded request from its observing stream (:meth:`observe`)."""

    def __init__(
        self,
        config: ProcessorConfig,
        budgets: SharedBudgets,
        *,
        providers: Providers,
        cache: CacheStage | None,
        token: Callable[[str, str, str, str], Counter],
        errors: Counter,
        stages: StageClock,
    ) -> None:
        self.config = config
        self.budgets = budgets
        self.providers = providers
        self.cache = cache
        self.token = token
        """The labelled child of the tokens counter (tenant, tier, model, kind)."""
        self.errors = errors
        self.stages = stages

    async def observe(self, first: Any, rest: AsyncIterator[Any]) -> None:
        """Read one response's chunks, ``first`` then ``rest``, and settle it: at its last chunk, or when the stream
        ends without one (a client gone, an upstream reset), with no usage, which returns the reservation."""
        settlement = Settlement.of(first)
        if settlement is None:
            return  # a local reply (a rejection, a cached answer): nothing was reserved for it; the stream closes
        response = _Response(status=_status(first))
        pending = None
        if settlement.cache and self.cache is not None:
            # An error's body is never stored; collecting nothing still takes the held lookup out at the end.
            pending = Pending(settlement.cache, overflow=response.status not in (0, 200))
        message: Any = first
        try:
            while message is not None and not response.ended:
                if message.WhichOneof("request") == "response_body":
                    self._read(response, pending, message.response_body)
                message = await anext(rest, None)
        finally:
            if pending is not None and not response.ended:
                # Cut short: the held lookup is taken out, nothing stored.
                assert self.cache is not None
                pending.overflow = True
                self.cache.on_response_body(pending, b"", True, pending.event_stream)
            started = self.stages.read()
            self._account(settlement, response)
            self.stages.add("account", started)

    def _read(self, response: _Response, pending: Pending | None, body: Any) -> None:
        started = self.stages.read()
        if not response.seen:
            response.seen = True
            response.event_stream = body.body[:5] in SSE_STARTS
        response.ended = body.end_of_stream
        if pending is not None:
            assert self.cache is not None
            self.cache.on_response_body(pending, body.body, body.end_of_stream, response.event_stream)
        if response.usage is None and response.status in (0, 200) and not response.unreadable:
            try:
                _scan(response, body.body, body.end_of_stream)
            except Exception:
                log.exception("cannot read a response's usage")
                self.errors.labels("internal").inc()
                response.unreadable = True  # its reservation is returned
        self.stages.add("response", started)

    def _account(self, settlement: Settlement, response: _Response) -> None:
        """Account the response's usage and correct the tenant's reservation by it (no usage: return it)."""
        provider = self.config.provider(settlement.provider) if settlement.provider else None
        if provider is not None and response.ended:
            # A success carries usage (a stream's too, when the gateway asked for it): none is the provider's error.
            expected = not response.event_stream or self.config.inject_stream_usage
            self.providers.answered(provider, ok=response.usage is not None or not expected)
        if response.usage is None:
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


def _scan(response: _Response, chunk: bytes, end: bool) -> None:
    """Find ``usage`` in an event stream's final chunk, or in a JSON body once it is whole."""
    if response.event_stream:
        response.buffer += chunk
        *lines, rest = bytes(response.buffer).split(b"\n")
        response.buffer = bytearray(rest)
        for line in lines:
            if line.startswith(b"data:") and b'"prompt_tokens"' in line:
                usage = usage_of(json.loads(line[5:]))
                if usage is not None:
                    response.usage = usage
        return
    if len(response.buffer) + len(chunk) <= MAX_ACCOUNTED_BODY_BYTES:
        response.buffer += chunk
    if end and len(response.buffer) > 0:
        try:
            response.usage = usage_of(json.loads(bytes(response.buffer)))
        except ValueError:  # not JSON (a proxy's error page): nothing to account
            response.usage = None


def usage_of(payload: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens of an OpenAI ``usage`` object in ``payload``, if it has one."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        return prompt, completion
    return None
