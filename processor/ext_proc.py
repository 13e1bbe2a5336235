"""The ext_proc processor: one gRPC stream per HTTP request, deciding what needs LLM knowledge.

Request headers go to the processor only on the ``GET /v1/models`` route, which is answered here (the models and tiers
the tenant may use). Completions reach it once, as the request body (Envoy buffers it), with the path, method and the
headers it reads sent alongside as request attributes (one gRPC round trip less per request than a headers message):
the tenant (from Envoy's api_key_auth), the model or tier asked for and whether the tenant may use it,
prompt tokens with the model's tokenizer, context admission (400 ``context_length_exceeded`` in OpenAI's error
shape, or a reroute to a longer-context model of the same tier; a missing ``max_tokens`` is clamped to what is
left), shared request and token budgets (429 + Retry-After), scale from zero (hold, then 503 + Retry-After) and
KV-capacity admission (bounded queue, then 429 + Retry-After). The body goes on with ``model`` rewritten to the
deployment that serves it (Envoy routes on it), ``max_tokens`` set and, for streams,
``stream_options.include_usage`` on so the last chunk carries ``usage``, and the request's settlement in Envoy's
dynamic metadata. This stream ends when the response does, which frees the replica slot. Response: Envoy reads its
``usage`` as it streams through and sends the request's access log entry, with the settlement, to the processor;
:mod:`inferplane.processor.settlement` accounts the usage per tenant, tier and model and corrects the tenant's token
reservation (:meth:`Processor.settle`). With the response cache on, a second filter streams a cacheable miss's
response chunks to the processor in Envoy's observability mode (no answers), with the settlement, so the answer is
stored.

Failure modes (README "Gateway runtime"): processor down: Envoy answers 500 (fail closed, ``failure_mode_allow``
false). Redis down: shared budgets fail open, Envoy's per-replica request limit holds. Tokenizer missing: prompt
tokens are estimated (over-counting).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from redis.asyncio import Redis

from inferplane.processor import metrics as m
from inferplane.processor.admission import Hold, ModelGate, Turn
from inferplane.processor.budgets import SharedBudgets, Verdict
from inferplane.processor.cache.embedders import Embedder, Vector
from inferplane.processor.cache.metrics import CacheMetrics
from inferplane.processor.cache.request import last_user_text
from inferplane.processor.cache.stage import CacheStage
from inferplane.processor.cache.store import Lookup, ResponseCache, connect
from inferplane.processor.config import (
    ATTRIBUTES_NAMESPACE,
    DESTINATION_ENDPOINT_KEY,
    LB_METADATA_NAMESPACE,
    METADATA_NAMESPACE,
    METHOD_ATTRIBUTE,
    PATH_ATTRIBUTE,
    PROVIDER_METADATA_KEY,
    ROUTE_HEADER,
    ROUTE_METADATA_KEY,
    SETTLE_METADATA_NAMESPACE,
    ModelConfig,
    ProcessorConfig,
    ProviderConfig,
    TenantConfig,
)
from inferplane.processor.difficulty_stage import DifficultyStage, Routed, embedder_key
from inferplane.processor.endpoints import Endpoint, EndpointTable
from inferplane.processor.peer_queues import KEEPALIVE_SECONDS, SEND_SECONDS, PeerQueues
from inferplane.processor.prefill import KV_TRANSFER_PARAMS, PrefillCall, PrefillStage
from inferplane.processor.prefix_index import PrefixIndex, byte_blocks, model_seed, token_blocks
from inferplane.processor.providers import Providers
from inferplane.processor.redis_connection import connect_redis, redis_tls, redis_url
from inferplane.processor.router import Router
from inferplane.processor.settlement import Settlement, Settler
from inferplane.processor.slots import Slot, SlotStore
from inferplane.processor.stage_clock import StageClock
from inferplane.processor.tokens import TokenCounter, prompt_texts
from inferplane.processor.watch import Feed

log = logging.getLogger(__name__)

ERROR_TYPE_HEADER = "x-inferplane-error-type"
ERROR_CODE_HEADER = "x-inferplane-error-code"
KV_RETRY_AFTER_SECONDS = 1
UNBOUNDED_SLOTS = 1 << 30
"""The per-replica cap with ``load_bound`` off: slots are still counted, never refused."""
MAX_ALTERNATES = 3
"""Replicas listed after the pick for Envoy's retries. A route retries a request once on its own model; the others
cover listed hosts Envoy's DNS view does not hold yet, which it skips. The list stays short: it rides on every
request."""
FALLBACK_ALTERNATES = 1
"""Replicas listed after the pick of a model with tier fallbacks: its route's cluster holds the fallbacks' replicas
too (at lower priorities), and Envoy takes listed hosts before any other, so one alternate leaves the route's further
retries to the fallbacks."""
COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")
CPU_COUNT_SECONDS = 1.0
"""How often a worker adds the CPU it used to ``inferplane_gateway_processor_cpu_seconds_total``."""


class RejectError(Exception):
    """A request the processor answers itself, in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        reason: m.RejectionReason,
        message: str,
        error_type: str,
        code: str,
        *,
        retry_after: int | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.error_type = error_type
        self.code = code
        self.retry_after = retry_after
        self.param = param


@dataclass
class _Stream:
    """What one request's stream has learnt so far."""

    path: str = ""
    method: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    headers_message: bool = False
    """Envoy sent the request headers as a message of their own (else they came as attributes with the body)."""
    tenant: TenantConfig | None = None
    model: ModelConfig | None = None
    tier: str = ""
    reserved_tokens: int = 0
    placement: Placement | None = None
    settling: bool = False
    """The request went upstream with its settlement: the observing stream returns or corrects its reservation."""
    cache_lookup: Lookup | None = None
    routed: Routed | None = None
    """A difficulty-routed tier's decision, when the request asked for one."""
    provider: ProviderConfig | None = None
    """The hosted provider the request was handed (its own models could not take it), if any."""


@dataclass
class Placement:
    """The replica a request holds a slot on, until its response ends."""

    model: str
    endpoint: Endpoint
    slot: Slot
    blocks: int
    alternates: tuple[str, ...] = ()
    """The next ready replicas in the router's order, where Envoy sends a retry (see :meth:`destination`)."""
    cached_blocks: int = 0
    """Leading blocks of the prompt the replica is estimated to hold (its prefix overlap)."""

    @property
    def address(self) -> str:
        """``ip:port`` of the picked replica."""
        return self.endpoint.address

    def destination(self) -> str:
        """The override_host metadata value: the pick, then its alternates, comma-separated (the endpoint-picker
        protocol's fallback list, GIE ``docs/proposals/004-endpoint-picker-protocol``). Envoy takes the next listed
        host it knows on each attempt, and the least-request fallback only when the list is used up; a retry after
        a pick that died (still ready here until a scrape fails) thus goes to another replica for sure. Without the
        list the retry was least-request's with ``previous_hosts`` rejecting the dead host, a best effort of four
        draws that returns the last draw anyway, and least-request favours a dead host (it holds no requests)."""
        return ",".join((self.endpoint.address, *self.alternates))


def _unchanged(kind: str) -> Any:
    """The empty answer to a message of ``kind`` (a trailers or response message the processor leaves as it is)."""
    if kind.endswith("_body"):
        return pb.ProcessingResponse(**{kind: pb.BodyResponse()})
    if kind.endswith("_headers"):
        return pb.ProcessingResponse(**{kind: pb.HeadersResponse()})
    return pb.ProcessingResponse(**{kind: pb.TrailersResponse()})


def _header(key: str, value: str) -> Any:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def _headers_of(message: Any) -> dict[str, str]:
    return {h.key: (h.raw_value.decode("latin-1") if h.raw_value else h.value) for h in message.headers.headers}


def _immediate(status: int, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
    mutation = pb.HeaderMutation(
        set_headers=[_header("content-type", "application/json"), *(_header(k, v) for k, v in headers.items())]
    )
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),
            headers=mutation,
            body=json.dumps(body).encode(),
            details=f"inferplane_{headers.get(ERROR_CODE_HEADER, 'reply')}",
        )
    )


def error_reply(reply: RejectError) -> Any:
    """The immediate response for ``reply``: status, OpenAI error body, Retry-After when it applies."""
    headers = {ERROR_TYPE_HEADER: reply.error_type, ERROR_CODE_HEADER: reply.code}
    if reply.retry_after is not None:
        headers["retry-after"] = str(reply.retry_after)
    body = {"error": {"message": reply.message, "type": reply.error_type, "param": reply.param, "code": reply.code}}
    return _immediate(reply.status, body, headers)


class Metrics:
    """The processor's Prometheus metrics (names from :mod:`inferplane.processor.metrics`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            m.counter_name(m.REQUESTS_TOTAL),
            "Requests the processor decided on.",
            [m.MODEL_LABEL, m.TIER_LABEL, m.TENANT_LABEL, m.OUTCOME_LABEL],
            registry=registry,
        )
        self.rejections = Counter(
            m.counter_name(m.REJECTIONS_TOTAL),
            "Requests the processor answered itself.",
            [m.REASON_LABEL, m.MODEL_LABEL],
            registry=registry,
        )
        self.tokens = Counter(
            m.counter_name(m.TOKENS_TOTAL),
            "Tokens accounted from the model server's usage.",
            [m.TENANT_LABEL, m.TIER_LABEL, m.MODEL_LABEL, m.KIND_LABEL],
            registry=registry,
        )
        # With several workers (prometheus_client's multiprocess mode) a pod's gauge is the sum over its live workers.
        self.pending = Gauge(
            m.PENDING_REQUESTS,
            "Requests waiting at the gateway for a model.",
            [m.MODEL_LABEL],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.inflight = Gauge(
            m.INFLIGHT_REQUESTS,
            "Requests admitted to a model and not finished.",
            [m.MODEL_LABEL],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.queue_seconds = Histogram(
            m.QUEUE_SECONDS,
            "Time a request waited at the gateway before admission or rejection.",
            [m.MODEL_LABEL],
            buckets=m.QUEUE_BUCKETS,
            registry=registry,
        )
        self.errors = Counter(
            m.counter_name(m.PROCESSOR_ERRORS_TOTAL),
            "Failures inside the processor.",
            [m.STAGE_LABEL],
            registry=registry,
        )
        self.cpu_seconds = Counter(
            m.counter_name(m.PROCESSOR_CPU_SECONDS_TOTAL), "CPU the processor's workers have used.", registry=registry
        )
        self._stage_series(registry)
        self.stage_cpu_seconds = Counter(
            m.counter_name(m.PROCESSOR_STAGE_CPU_SECONDS_TOTAL),
            "CPU the processor's workers spent in each synchronous stage of the request path.",
            [m.STAGE_LABEL],
            registry=registry,
        )
        self._routing_series(registry)
        self.routed = functools.cache(self.routing.labels)
        # The labelled children of the per-request series, looked up once per label set: ``labels()`` validates
        # and joins its arguments on every call, which cost more than the rest of a request's bookkeeping. The label
        # sets are bounded by the config (models x tiers x tenants x outcomes).
        self.request = functools.cache(self.requests.labels)
        self.token = functools.cache(self.tokens.labels)
        self.queued = functools.cache(self.queue_seconds.labels)

    def _stage_series(self, registry: CollectorRegistry) -> None:
        """The series of the stages some tiers use: disaggregated models' prefill steps, difficulty routes."""
        self.prefills = Counter(
            m.counter_name(m.PREFILL_TOTAL),
            "Requests of disaggregated models by what became of their prefill step.",
            [m.MODEL_LABEL, m.OUTCOME_LABEL],
            registry=registry,
        )
        self.prefill = functools.cache(self.prefills.labels)
        self.difficulty_routes = Counter(
            m.counter_name(m.DIFFICULTY_ROUTES_TOTAL),
            "Requests for difficulty-routed tiers by decision.",
            [m.TIER_LABEL, m.DECISION_LABEL],
            registry=registry,
        )

    def _routing_series(self, registry: CollectorRegistry) -> None:
        """The replica router's series: decisions, the prefix index's estimate, replicas and their load."""

        self.routing = Counter(
            m.counter_name(m.ROUTING_DECISIONS_TOTAL),
            "Replica picks by reason.",
            [m.MODEL_LABEL, m.REASON_LABEL],
            registry=registry,
        )
        self.prefix_tokens = Counter(
            m.counter_name(m.PREFIX_TOKENS_TOTAL),
            "Prompt tokens looked up in the prefix index, and those estimated cached on the picked replica.",
            [m.MODEL_LABEL, m.KIND_LABEL],
            registry=registry,
        )
        self.endpoint_inflight = Gauge(
            m.ENDPOINT_INFLIGHT,
            "Requests this processor has in flight on a replica.",
            [m.MODEL_LABEL, m.ENDPOINT_LABEL],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.ready_endpoints = Gauge(
            m.READY_ENDPOINTS,
            "Replicas the processor sees ready.",
            [m.MODEL_LABEL],
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.capacity = Gauge(
            m.ADMISSION_CAPACITY,
            "Sequences the model may run at once over its ready replicas.",
            [m.MODEL_LABEL],
            registry=registry,
            multiprocess_mode="livemax",
        )
        self.slot_fallbacks = Counter(
            m.counter_name(m.SLOT_STORE_FALLBACKS_TOTAL),
            "Slot decisions taken locally because the slot store did not answer.",
            [m.MODEL_LABEL],
            registry=registry,
        )


class Processor:
    """The decisions; transport-free (the gRPC servicer feeds it ``ProcessingRequest`` messages)."""

    def __init__(
        self,
        config: ProcessorConfig,
        redis: Redis | None,
        registry: CollectorRegistry,
        cache: CacheStage | None = None,
        worker: int = 0,
        *,
        slots_redis: Redis | None = None,
    ) -> None:
        self.config = config
        self.cache = cache
        self.metrics = Metrics(registry)
        self.stages = StageClock()
        self.budgets = SharedBudgets(redis, config.redis_key_prefix, self._redis_error)
        self.tokens = TokenCounter(
            {model.name: model.tokenizer_path for model in config.models}, config.tokenized_text_cache_bytes
        )
        self._slots_redis = slots_redis  # closed here; ``redis`` belongs to the budgets
        self.slots = SlotStore(
            slots_redis or redis,
            config.redis_key_prefix,
            self._slot_store_failed,
            timeout_seconds=config.slot_store_timeout_seconds,
            on_given_back=self._gave_back,
        )
        self.gates: dict[str, ModelGate] = {}
        self.tables: dict[str, EndpointTable] = {}
        self.routers: dict[str, Router] = {}
        self._feed: Feed | None = None
        self.peer_queues = PeerQueues()
        self._waiting_ready: dict[str, int] = {}
        self._update_gauges: dict[str, Callable[[], None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        has_fallback = {m for tier in config.tiers if tier.fallback for m in tier.models}
        self.alternates = {
            m.name: FALLBACK_ALTERNATES if m.name in has_fallback else MAX_ALTERNATES for m in config.models
        }
        for model in config.models:
            self._add_model(model, config.worker_share(model.queue_max, worker))
        self._tenants = {t.name: t for t in config.tenants}
        self._header_attributes = config.header_attributes()
        self.difficulty = self._difficulty_stage(config, cache)
        self.providers = Providers(config, registry)
        self.settler = Settler(
            config,
            self.budgets,
            providers=self.providers,
            cache=cache,
            token=self.metrics.token,
            stages=self.stages,
        )
        self.prefill_stage = (
            PrefillStage(
                self._place_prefill, self._unplace, lambda model, outcome: self.metrics.prefill(model, outcome).inc()
            )
            if any(model.prefill is not None for model in config.models)
            else None
        )

    def _add_model(self, model: ModelConfig, queue_share: int) -> None:
        """The model's gauges, admission gate (this worker's ``queue_share`` of its queue), replicas and router."""
        self._update_gauges[model.name] = self._gauges(model.name)
        self.gates[model.name] = ModelGate(queue_share, model.queue_timeout_seconds, self._update_gauges[model.name])
        self.tables[model.name] = EndpointTable(model, self._table_changed)
        routing = model.routing
        self.routers[model.name] = Router(
            routing.block_tokens,
            routing.overlap_weight,
            routing.policy == "prefix_aware",
            PrefixIndex(routing.index_blocks),
        )
        self._waiting_ready[model.name] = 0
        self.metrics.pending.labels(model.name).set(0)
        self.metrics.inflight.labels(model.name).set(0)

    def _difficulty_stage(self, config: ProcessorConfig, cache: CacheStage | None) -> DifficultyStage | None:
        """The stage of the tiers routed by difficulty (None without one), sharing the response cache's embedder."""
        if not any(tier.route is not None for tier in config.tiers):
            return None
        shared: dict[str, Embedder] = {}
        if cache is not None and cache.cache.embedder is not None and config.cache is not None:
            shared[embedder_key(config.cache.embedder)] = cache.cache.embedder
        counted = functools.cache(self.metrics.difficulty_routes.labels)
        return DifficultyStage(config.tiers, shared, lambda tier, outcome: counted(tier, outcome).inc())

    @classmethod
    def from_environment(cls, config: ProcessorConfig, registry: CollectorRegistry, worker: int = 0) -> Processor:
        """A processor with the Redis named by ``config.redis_url_env`` (None: budgets fail open, logged)."""
        url = redis_url(config)
        redis = slots_redis = None
        if url:
            tls = redis_tls(config, url)
            redis = connect_redis(url, config.redis_timeout_seconds, **tls)
            # The slots wait longer than the budgets: a timeout there costs a fallback share, not a fail-open.
            slots_redis = connect_redis(url, config.slot_store_timeout_seconds, **tls)
        else:
            log.error(
                "neither %s nor %s holds a Redis URL: shared budgets and slots are off",
                config.redis_url_file,
                config.redis_url_env,
            )
        cache = None
        if url and config.cache is not None and config.cache.enabled:
            client = connect(url, config.cache)
            cache = CacheStage(ResponseCache(config.cache, CacheMetrics(registry), client=client))
        return cls(config, redis, registry, cache, worker, slots_redis=slots_redis)

    def _redis_error(self) -> None:
        self.metrics.errors.labels("redis").inc()

    def _gauges(self, model: str) -> Callable[[], None]:
        """The update of ``model``'s pending and in-flight gauges, made once per model (``_update_gauges``)."""
        pending, inflight = self.metrics.pending.labels(model), self.metrics.inflight.labels(model)

        def update() -> None:  # twice a request: the labelled children are looked up once, here
            pending.set(self.gates[model].waiting + self._waiting_ready[model])
            inflight.set(sum(e.inflight for e in self.tables[model].endpoints.values()))

        return update

    def _slot_store_failed(self, model: str) -> None:
        self.metrics.slot_fallbacks.labels(model).inc()
        self._redis_error()

    def _table_changed(self, table: EndpointTable) -> None:
        """After each refresh of a model's replicas: the readiness and capacity gauges, per-replica in flight, and
        the free slots kept on a replica that turned busy back to the store."""
        name = table.model.name
        self.metrics.ready_endpoints.labels(name).set(len(table.ready()))
        self.metrics.capacity.labels(name).set(table.capacity)
        for endpoint in table.endpoints.values():
            self.metrics.endpoint_inflight.labels(name, endpoint.address).set(endpoint.inflight)
            self.slots.busy(name, endpoint.address, endpoint.engine_active, table.model.max_num_seqs)

    def _lost(self, model: str, addresses: list[str]) -> None:
        """Replicas of ``model`` that left or went unready: what they held died with them (or with a restart)."""
        for address in addresses:
            self.routers[model].index.forget(address)
            if address not in self.tables[model].endpoints:
                with contextlib.suppress(KeyError):
                    self.metrics.endpoint_inflight.remove(model, address)

    async def _read_replicas(self) -> None:
        """Read every model's replicas in this worker, round after round (cancelled at shutdown)."""
        await asyncio.gather(*(table.run(functools.partial(self._lost, name)) for name, table in self.tables.items()))

    def _peer_picked(self, model: str, address: str, hashes: list[int]) -> None:
        """Another worker of the pod placed a prompt of ``hashes`` on ``address``: the replica holds them now."""
        router = self.routers[model]
        if router.prefix_aware and address in self.tables[model].endpoints:
            router.index.record(address, hashes)

    def _gave_back(self, model: str, address: str) -> None:
        """A slot on ``address`` none of this worker's queued requests wanted is back in the store: the other
        workers, of this pod and the others, offer it to a request of theirs that prefers the replica."""
        if self._feed is not None:
            self._feed.freed(model, address)

    def _peer_freed(self, model: str, address: str) -> None:
        """Another worker gave a slot on ``address`` back to the store: the oldest request here preferring it asks."""
        self.gates[model].offer(address)

    async def _tell_wants(self, feed: Feed) -> None:
        """Send the other workers what each model's queue waits for (:mod:`.peer_queues`), forever (cancelled at
        shutdown)."""
        said: dict[str, tuple[float, frozenset[str]]] = {}
        while True:
            await asyncio.sleep(SEND_SECONDS)
            now = time.monotonic()
            for model, gate in self.gates.items():
                wants = gate.wants()
                sent, before = said.get(model, (0.0, frozenset()))
                if wants != before or (wants and now - sent >= KEEPALIVE_SECONDS):
                    feed.wants(model, self.slots.processor, wants)
                    said[model] = (now, wants)

    async def _follow(self, feed: Feed) -> None:
        """Follow the watcher's rounds; when it goes away, read the replicas here instead."""
        try:
            await feed.run()
        finally:
            self._feed = None
            await feed.aclose()
        log.error("this worker reads its replicas itself from now on")
        await self._read_replicas()

    async def start(self, watch_socket: str | None = None) -> None:
        """Start following every model's replicas and renewing the slot lease (the worker's event loop runs).
        ``watch_socket``: the pod's replica watcher (:mod:`inferplane.processor.watch`), whose rounds the tables
        follow; None, or a watcher that cannot be reached: this worker reads its replicas itself."""
        feed = (
            Feed(
                watch_socket,
                self.tables,
                self._lost,
                self._peer_picked,
                on_freed=self._peer_freed,
                on_wants=self.peer_queues.heard,
            )
            if watch_socket is not None
            else None
        )
        if feed is not None and await feed.connect():
            self._feed = feed
            self._tasks.append(asyncio.ensure_future(self._follow(feed)))
            self._tasks.append(asyncio.ensure_future(self._tell_wants(feed)))
        else:
            for table in self.tables.values():
                await table.refresh()  # a first view before the first request
            self._tasks.append(asyncio.ensure_future(self._read_replicas()))
        self._tasks.append(asyncio.ensure_future(self.slots.heartbeat(tuple(self.tables))))
        self._tasks.append(asyncio.ensure_future(self._count_cpu()))
        if self.difficulty is not None:
            await self.difficulty.start()

    async def _count_cpu(self) -> None:
        """Add this worker's CPU to :attr:`Metrics.cpu_seconds` every :data:`CPU_COUNT_SECONDS` (once a second
        costs a clock read and a counter update, not one per request)."""
        counted = time.process_time()
        while True:
            await asyncio.sleep(CPU_COUNT_SECONDS)
            now = time.process_time()
            self.metrics.cpu_seconds.inc(now - counted)
            self.stages.flush(self.metrics.stage_cpu_seconds)
            counted = now

    async def aclose(self) -> None:
        """Stop the background tasks and give back the slots still being released."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.difficulty is not None:
            await self.difficulty.aclose()
        await self.slots.drain()
        if self.prefill_stage is not None:
            await self.prefill_stage.aclose()
        if self._slots_redis is not None:
            await self._slots_redis.aclose()

    # -- the stream -------------------------------------------------------------------------------------------

    def settle(self, entries: Iterable[Any]) -> None:
        """Settle the requests of Envoy's access log entries (``HTTPAccessLogEntry``: each settled request's, with
        the usage Envoy read; :mod:`inferplane.processor.settlement`)."""
        for entry in entries:
            self.settler.logged(entry)

    async def process(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Answer each ``ProcessingRequest`` of one HTTP request's placing stream; read an observing stream's
        cacheable answer into the cache (:mod:`inferplane.processor.settlement`), answering nothing."""
        first = await anext(requests, None)
        if first is None:
            return
        if first.observability_mode:
            await self.settler.observe(first, requests)
            return
        stream = _Stream()
        try:
            message = first
            while message is not None:
                kind = message.WhichOneof("request")
                if kind == "request_headers":
                    yield self._on_request_headers(stream, message.request_headers)
                elif kind == "request_body":
                    if not stream.headers_message:  # what the processor reads came as attributes with the body
                        self._from_attributes(stream, message)
                    yield await self._on_request_body(stream, message.request_body)
                else:  # the response's parts are the observing stream's: the placing filter asks for none
                    yield _unchanged(kind)
                message = await anext(requests, None)
        finally:
            if stream.placement is not None:
                self._unplace(stream.placement)
            if stream.tenant is not None and not stream.settling and stream.reserved_tokens:
                # never forwarded (a rejection, a processor error): return the prompt's reservation
                self.budgets.add_tokens(stream.tenant.name, -stream.reserved_tokens)

    def _on_request_headers(self, stream: _Stream, message: Any) -> Any:
        stream.headers_message = True
        stream.headers = _headers_of(message)
        stream.path = stream.headers.get(":path", "").split("?", 1)[0]
        stream.method = stream.headers.get(":method", "")
        if stream.method == "GET" and stream.path == "/v1/models":
            try:
                tenant = self._tenant(stream.headers)
            except RejectError as reply:
                return self._reject(reply, "")
            return _immediate(200, self._model_list(tenant), {})
        if message.end_of_stream and stream.path in COMPLETION_PATHS:
            return self._reject(
                RejectError(400, "bad_request", "a JSON body is required", "invalid_request_error", "bad_request"), ""
            )
        return pb.ProcessingResponse(request_headers=pb.HeadersResponse())

    def _from_attributes(self, stream: _Stream, message: Any) -> None:
        fields = message.attributes[ATTRIBUTES_NAMESPACE].fields
        stream.path = fields[PATH_ATTRIBUTE].string_value.split("?", 1)[0] if PATH_ATTRIBUTE in fields else ""
        stream.method = fields[METHOD_ATTRIBUTE].string_value if METHOD_ATTRIBUTE in fields else ""
        for name, attribute in self._header_attributes:
            if attribute in fields:
                stream.headers[name] = fields[attribute].string_value

    def _model_list(self, tenant: TenantConfig) -> dict[str, Any]:
        names = [model.name for model in self.config.models if self._allowed(tenant, model.name)]
        names += [tier.name for tier in self.config.tiers if tier.name in tenant.tiers and tier.name not in names]
        created = int(time.time())
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "created": created, "owned_by": "inferplane"} for n in names],
        }

    def _tenant(self, headers: Mapping[str, str]) -> TenantConfig:
        if not self.config.auth_required:
            assert self.config.anonymous_tenant is not None  # ProcessorConfig guarantees it
            return self.config.anonymous_tenant
        name = headers.get(self.config.tenant_header)
        if not name:
            raise RejectError(
                401, "unauthenticated", "no authenticated tenant", "invalid_request_error", "invalid_api_key"
            )
        tenant = self._tenants.get(name)
        if tenant is None:
            raise RejectError(
                403,
                "tier_forbidden",
                f"tenant {name!r} has no tier on this gateway",
                "permission_error",
                "tier_forbidden",
            )
        return tenant

    def _allowed(self, tenant: TenantConfig, model: str) -> bool:
        return any(tier.name in tenant.tiers and model in (*tier.models, *tier.fallback) for tier in self.config.tiers)

    def _reject(self, reply: RejectError, model: str, tenant: str = "", tier: str = "") -> Any:
        self.metrics.rejections.labels(reply.reason, model).inc()
        self.metrics.request(model, tier, tenant, "rejected").inc()
        return error_reply(reply)

    async def _on_request_body(self, stream: _Stream, message: Any) -> Any:
        try:
            return await self._admit(stream, message.body)
        except RejectError as reply:
            model = stream.model.name if stream.model else ""
            tenant = stream.tenant.name if stream.tenant else ""
            return self._reject(reply, model, tenant, stream.tier)
        except Exception:
            log.exception("processor failure on a request body")
            self.metrics.errors.labels("internal").inc()
            raise

    def _resolve(self, asked: str, tenant: TenantConfig) -> tuple[ModelConfig, str]:
        tier = self.config.tier(asked)
        if tier is not None:
            if tier.name not in tenant.tiers:
                raise RejectError(
                    403,
                    "tier_forbidden",
                    f"tier {asked!r} is not allowed for this key",
                    "permission_error",
                    "tier_forbidden",
                )
            model = self.config.model(tier.models[0])
            assert model is not None  # ProcessorConfig checks tier references
            return model, tier.name
        model = self.config.model(asked)
        if model is None or model.role == "prefill":  # a prefill role is the processor's to call, never a client's
            raise RejectError(
                404,
                "model_not_found",
                f"the model {asked!r} does not exist",
                "invalid_request_error",
                "model_not_found",
                param="model",
            )
        if not self._allowed(tenant, model.name):
            raise RejectError(
                403,
                "tier_forbidden",
                f"model {asked!r} is not in a tier allowed for this key",
                "permission_error",
                "tier_forbidden",
            )
        return model, model.tier

    def _fit_context(self, body: dict[str, Any], model: ModelConfig, prompt: int, tenant: TenantConfig) -> ModelConfig:
        """The model that fits prompt + output (this one, or a longer-context one of its tier); clamps max_tokens."""
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        requested = body.get(key)
        if requested is not None and (not isinstance(requested, int) or isinstance(requested, bool) or requested < 1):
            raise RejectError(
                400,
                "bad_request",
                f"{key} must be a positive integer",
                "invalid_request_error",
                "bad_request",
                param=key,
            )
        needed = prompt + (requested or 1)
        candidates = [model, *(self.config.model(n) for n in model.longer_context)]
        for candidate in candidates:
            if candidate is not None and needed <= candidate.max_model_len and self._allowed(tenant, candidate.name):
                if requested is None:
                    body["max_tokens"] = candidate.max_model_len - prompt
                return candidate
        limit = max(c.max_model_len for c in candidates if c is not None)
        raise RejectError(
            400,
            "context_length_exceeded",
            f"This model's maximum context length is {limit} tokens. However, you requested {needed} tokens "
            f"({prompt} in the messages, {needed - prompt} in the completion). Please reduce the length of the "
            "messages or completion.",
            "invalid_request_error",
            "context_length_exceeded",
            param="messages",
        )

    async def _admit(self, stream: _Stream, raw: bytes) -> Any:
        """Admit one completion request, step by step, or raise the :class:`RejectError` that answers it."""
        stages = self.stages
        started = stages.read()
        stream.tenant = tenant = self._tenant(stream.headers)
        body = _json_object(raw)
        asked = _asked_model(body)
        stream.model, stream.tier = self._resolve(asked, tenant)
        started = stages.add("parse", started)
        if self.difficulty is not None and asked == stream.tier and self.difficulty.routes_tier(asked):
            text, vector = await self.difficulty.embed(asked, last_user_text(stream.path, body))
            started = stages.read()  # the embedding awaited: other requests ran meanwhile
            stream.routed = routed = self.difficulty.decide(asked, text, vector)
            stream.model = self.config.model(routed.model)
            assert stream.model is not None  # ProcessorConfig checks that a route's models are its tier's
            started = stages.add("difficulty", started)
        prompt, ids, texts = self._count_prompt(stream.model, body)
        started = stages.add("tokenize", started)
        stream.model = model = self._fit_context(body, stream.model, prompt, tenant)
        started = stages.add("context", started)
        hashes = self._hashes(model, ids, texts)
        stages.add("route", started)
        verdict, budget = await self.budgets.admit(
            tenant.name, tenant.requests_per_minute, tenant.tokens_per_minute, prompt
        )
        self._reserve(stream, verdict, budget, prompt)
        if self.cache is not None:
            body["model"] = model.name  # the key names the deployment that answers, whatever tier was asked
            stream.cache_lookup = lookup = await self.cache.lookup(
                stream.path,
                body,
                tenant=tenant.name,
                tier=stream.tier,
                headers=stream.headers,
                embedded=self._shared(stream.routed),
            )
            if lookup is not None and lookup.hit is not None:
                self._unreserve(stream, tenant)  # a cached answer spends no model tokens
                self.metrics.request(model.name, stream.tier, tenant.name, "cached").inc()
                return self.cache.reply(lookup, {ROUTE_HEADER: stream.routed.outcome} if stream.routed else {})
        await self._take_slot(stream, model, tenant, hashes, prompt)
        held = ""  # the token of a cacheable miss's lookup, held for the observing stream that reads its answer
        if self.cache is not None and stream.cache_lookup is not None and stream.provider is None:
            # A provider's answer is not this deployment's: never cached as its. Only a cacheable miss is held.
            held = self.cache.hold(stream.cache_lookup)
        await self._prefill(stream, model, body, hashes, prompt)
        self.metrics.request(model.name, stream.tier, tenant.name, "provider" if stream.provider else "admitted").inc()
        started = stages.read()
        forwarded = self._forward(stream, body, model, held)
        if self.cache is not None:
            forwarded = self.cache.tag(forwarded, stream.cache_lookup)
        if stream.routed is not None:
            # Beside the cache's verdict in the same namespace: the model routes echo it as x-inferplane-route.
            forwarded.dynamic_metadata.get_or_create_struct(METADATA_NAMESPACE)[ROUTE_METADATA_KEY] = (
                stream.routed.outcome
            )
        stages.add("forward", started)
        return forwarded

    def _shared(self, routed: Routed | None) -> tuple[str, Vector] | None:
        """A routed prompt's text and vector, for the response cache when its embedder made it (one embedding)."""
        if routed is None or routed.text is None or routed.vector is None or self.config.cache is None:
            return None
        if routed.embedder != embedder_key(self.config.cache.embedder):
            return None
        return routed.text, routed.vector

    def _count_prompt(self, model: ModelConfig, body: Mapping[str, Any]) -> tuple[int, list[int] | None, list[str]]:
        """The prompt's tokens with ``model``'s tokenizer (an estimate, counted as an error, without one), their ids
        (None without a tokenizer) and the texts: what the prefix router hashes."""
        try:
            texts, messages = prompt_texts(body)
        except ValueError as exc:
            raise RejectError(400, "bad_request", str(exc), "invalid_request_error", "bad_request") from None
        prompt, exact, ids = self.tokens.encode(model.name, texts, messages, self.config.chat_message_overhead_tokens)
        if not exact:
            self.metrics.errors.labels("tokenizer").inc()
        return prompt, ids, texts

    @staticmethod
    def _hashes(model: ModelConfig, ids: list[int] | None, texts: list[str]) -> list[int]:
        """The prompt's chained block hashes for ``model``'s prefix index (none under ``least_request``): of the
        token ids, or of the texts' bytes without a tokenizer."""
        routing = model.routing
        if routing.policy != "prefix_aware":
            return []
        seed = model_seed(model.name)
        if ids is None:
            return byte_blocks(texts, routing.block_tokens, routing.max_prefix_blocks, seed)
        return token_blocks(ids, routing.block_tokens, routing.max_prefix_blocks, seed)

    def _reserve(self, stream: _Stream, verdict: Verdict, budget: str, prompt: int) -> None:
        """Refuse the request over a budget (429), else note its prompt tokens as reserved when Redis counted them."""
        if verdict.retry_after is not None:
            kind = "requests" if budget == "requests_per_minute" else "tokens"
            raise RejectError(
                429,
                "requests_per_minute" if kind == "requests" else "tokens_per_minute",
                f"Rate limit reached for {kind} per minute on this key. Please try again in {verdict.retry_after}s.",
                kind,
                "rate_limit_exceeded",
                retry_after=verdict.retry_after,
            )
        if verdict.redis_ok:
            stream.reserved_tokens = prompt

    async def _take_slot(
        self, stream: _Stream, model: ModelConfig, tenant: TenantConfig, hashes: list[int], prompt: int
    ) -> None:
        """Hold through a cold start, then take a slot on one of ``model``'s replicas (the router's pick, bounded by
        ``max_num_seqs`` per replica over every gateway); a refusal returns the reservation."""
        started = time.monotonic()
        try:
            table = self.tables[model.name]
            if not table.ready():
                if not model.scale_to_zero:  # Envoy balances, retries and falls back to the tier's fallback
                    if self._hand_to_provider(stream, tenant, "unavailable"):
                        return
                    self.metrics.routed(model.name, "fallback").inc()
                    return
                try:
                    await self._wait_ready(model, table)
                except RejectError:
                    if self._hand_to_provider(stream, tenant, "cold_start"):
                        return
                    raise
            gate = self.gates[model.name]
            placement = await gate.hold_for(lambda hold: self._place(model, hashes, prompt, hold))
            if placement is None:
                placement = await gate.admit(lambda turn: self._place(model, hashes, prompt, turn=turn))
            if placement is None:
                if self._hand_to_provider(stream, tenant, "saturated"):
                    return
                raise RejectError(
                    429,
                    "kv_capacity",
                    f"{model.name} is at capacity; please retry shortly",
                    "server_busy",
                    "capacity_exceeded",
                    retry_after=KV_RETRY_AFTER_SECONDS,
                )
            stream.placement = placement
        except RejectError:
            self._unreserve(stream, tenant)
            raise
        finally:
            self.metrics.queued(model.name).observe(time.monotonic() - started)

    def _fallback_ready(self, tier: str) -> bool:
        """Whether one of the tier's fallback models has a ready replica (Envoy's retries reach it)."""
        config = self.config.tier(tier)
        return config is not None and any(self.tables[f].ready() for f in config.fallback if f in self.tables)

    def _hand_to_provider(self, stream: _Stream, tenant: TenantConfig, reason: m.ProviderReason) -> bool:
        """Hand the request to the tier's first provider ``tenant`` consented to; False where there is none, or,
        for a model with no ready replica, where one of the tier's fallbacks has one (nothing leaves the VPC)."""
        provider = self.providers.choose(stream.tier, tenant)
        if provider is None or (reason == "unavailable" and self._fallback_ready(stream.tier)):
            return False
        stream.provider = provider
        self.providers.handed(provider, stream.tier, tenant.name, reason)
        return True

    async def _place(
        self, model: ModelConfig, hashes: list[int], prompt: int, hold: Hold | None = None, turn: Turn | None = None
    ) -> Placement | None:
        """One try: rank the ready replicas and take a slot on the first with room (None: every one is full).

        A request on ``hold`` for its prefix accepts only the replicas that lack no more blocks than the router's
        first choice, plus as many as it has waited prefill times of a block: ski rental, so holding costs at most
        the prefill it saves, and the request never does worse than twice the better of waiting and spilling. A
        queued one (``turn``) notes the replicas it prefers and accepts only those, or when it may take any
        (:class:`Turn`) those and every replica no other request of any worker waits for; one that prefers none has
        no replica's line to wait in and takes any (else, past the fleet's capacity, it would wait for every replica
        to have no line, and time out while the others are served). One arriving while this worker's queue is empty
        (``hold``) leaves the other workers' likewise: their queues are the line it would jump."""
        router = self.routers[model.name]
        started = self.stages.read()
        ranking = router.rank(self.tables[model.name].ready(), hashes, prompt)
        self.stages.add("route", started)
        bounded = model.routing.load_bound
        ranked = [e.address for e in ranking.ranked]
        if hold is not None and bounded and ranking.overlaps:
            first = ranking.overlaps[ranked[0]]
            per_block = model.routing.prefill_seconds_per_block
            hold.patience = (first - min(ranking.overlaps.values())) * per_block
            ranked = [a for a in ranked if (first - ranking.overlaps[a]) * per_block <= hold.waited]
        prefers = ranking.preferred()
        if turn is not None:
            turn.prefers = prefers
            if not turn.anywhere:
                ranked = [a for a in ranked if a in prefers]
        if prefers and (hold is not None or (turn is not None and turn.anywhere)):
            # Its own replicas, or one no queued request (of any worker) waits for.
            theirs = self.peer_queues.wanted(model.name) | (turn.others_want if turn is not None else frozenset())
            ranked = [a for a in ranked if a in prefers or a not in theirs]
        taken = await self.slots.acquire(
            model.name,
            ranked,
            model.max_num_seqs if bounded else UNBOUNDED_SLOTS,
            model.fallback_share if bounded else UNBOUNDED_SLOTS,
        )
        if taken is None:
            return None
        address = taken.endpoint
        endpoint = next(e for e in ranking.ranked if e.address == address)
        self.metrics.routed(model.name, ranking.reason_for(address)).inc()
        if hashes:
            block_tokens = model.routing.block_tokens
            self.metrics.prefix_tokens.labels(model.name, "queried").inc(len(hashes) * block_tokens)
            self.metrics.prefix_tokens.labels(model.name, "matched").inc(ranking.overlaps[address] * block_tokens)
        overlap = ranking.overlaps.get(address, 0)
        alternates = tuple(e.address for e in ranking.ranked if e.address != address)[: self.alternates[model.name]]
        blocks = router.picked(endpoint, hashes, prompt, overlap)
        if hashes and router.prefix_aware and self._feed is not None:
            self._feed.picked(model.name, address, hashes)
        placement = Placement(model.name, endpoint, taken, blocks, alternates, cached_blocks=overlap)
        self._update_gauges[model.name]()
        return placement

    async def _prefill(
        self, stream: _Stream, model: ModelConfig, body: dict[str, Any], hashes: list[int], prompt: int
    ) -> None:
        """A disaggregated model's prefill step (:mod:`.prefill`): when it is taken, the decode request carries the
        transfer parameters its prefill replica answered with."""
        if model.prefill is None or self.prefill_stage is None or stream.placement is None:
            return
        role = self.config.model(model.prefill.model)
        assert role is not None  # ProcessorConfig checks prefill references
        body["model"] = model.name  # both roles serve the deployment's name, whatever tier was asked
        call = PrefillCall(
            model=model,
            role=role,
            path=stream.path,
            body=body,
            prompt_tokens=prompt,
            cached_tokens=stream.placement.cached_blocks * model.routing.block_tokens,
            hashes=hashes,
        )
        params = await self.prefill_stage.run(call)
        if params is not None:
            body[KV_TRANSFER_PARAMS] = params

    async def _place_prefill(self, call: PrefillCall) -> Placement | None:
        """A slot on one of the prefill role's replicas, by prefix overlap and load; None at once when all are full
        or none is ready (the decode replica then computes the prompt: waiting would only add to its TTFT)."""
        if not self.tables[call.role.name].ready():
            return None
        return await self._place(call.role, list(call.hashes), call.prompt_tokens)

    def _unplace(self, placement: Placement) -> None:
        """The request holding ``placement`` ended: free its slot and wake the model's queue, or, when none of its
        requests wants the replica, give the slot back to the store for the other workers' (kept for the next
        request here only when nothing queues and the replica is quiet: :meth:`SlotStore.keeps`)."""
        Router.finished(placement.endpoint, placement.blocks)
        model, address = placement.model, placement.endpoint.address
        self.slots.release(model, placement.slot)
        gate = self.gates[model]
        if not gate.released(address) and (
            gate.waiting
            or not self.slots.keeps(
                model, address, placement.endpoint.engine_active, self.tables[model].model.max_num_seqs
            )
        ):
            self.slots.give_back(model, placement.slot)
        self._update_gauges[placement.model]()

    def _unreserve(self, stream: _Stream, tenant: TenantConfig) -> None:
        """Give the request's prompt-token reservation back to the tenant's budget."""
        if stream.reserved_tokens:
            self.budgets.add_tokens(tenant.name, -stream.reserved_tokens)
            stream.reserved_tokens = 0

    async def _wait_ready(self, model: ModelConfig, table: EndpointTable) -> None:
        """Hold a request for a model scaled to zero until a replica is ready (the pending gauge wakes it), or 503."""
        self._waiting_ready[model.name] += 1
        self._update_gauges[model.name]()
        try:
            ready = await table.wait_ready(model.cold_start_hold_seconds)
        finally:
            self._waiting_ready[model.name] -= 1
            self._update_gauges[model.name]()
        if not ready:
            self.metrics.routed(model.name, "no_endpoint").inc()
            raise RejectError(
                503,
                "cold_start_timeout",
                f"{model.name} is starting (scaled from zero); please retry",
                "service_unavailable",
                "model_starting",
                retry_after=self.config.retry_after_seconds_503,
            )

    def _forward(self, stream: _Stream, body: dict[str, Any], model: ModelConfig, held: str = "") -> Any:
        body["model"] = model.name if stream.provider is None else stream.provider.model
        if body.get("stream") and self.config.inject_stream_usage:
            options = body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        payload = json.dumps(body, separators=(",", ":")).encode()
        # No clear_route_cache: json_to_metadata, after this filter, reads the rewritten ``model`` and routes on it
        # (Envoy ignores a route-cache clear from a body response anyway, counting ``clear_route_cache_ignored``).
        common = pb.CommonResponse(body_mutation=pb.BodyMutation(body=payload))
        if stream.headers_message:
            # Envoy held the headers for this processor and forwards them as they are: the length must follow the
            # body. (Without a headers message Envoy drops the stale length itself and sends the body chunked.)
            common.header_mutation.set_headers.append(_header("content-length", str(len(payload))))
        response = pb.ProcessingResponse(request_body=pb.BodyResponse(response=common))
        if stream.provider is not None:
            # The provider's route matches on this: only the processor sends a request out of the VPC.
            response.dynamic_metadata.get_or_create_struct(METADATA_NAMESPACE)[PROVIDER_METADATA_KEY] = (
                stream.provider.name
            )
        if stream.placement is not None:
            # The pick and where a retry goes, for Envoy's override_host load balancing (hosts it does not know are
            # skipped; none left: least-request instead).
            response.dynamic_metadata.update(
                {LB_METADATA_NAMESPACE: {DESTINATION_ENDPOINT_KEY: stream.placement.destination()}}
            )
        if stream.tenant is not None:
            settlement = Settlement(
                tenant=stream.tenant.name,
                tier=stream.tier,
                model=model.name,
                reserved=stream.reserved_tokens,
                provider=stream.provider.name if stream.provider is not None else "",
                cache=held,
            )
            response.dynamic_metadata.update({SETTLE_METADATA_NAMESPACE: settlement.metadata()})
            stream.settling = True
        return response


def _json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400."""
    try:
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ValueError("not an object")
    except ValueError:
        raise RejectError(
            400, "bad_request", "the body is not a JSON object", "invalid_request_error", "bad_request"
        ) from None
    return body


def _asked_model(body: Mapping[str, Any]) -> str:
    """The model or tier the body asks for, or a 400 without one."""
    asked = body.get("model")
    if not isinstance(asked, str):
        raise RejectError(
            400,
            "bad_request",
            "you must provide a model parameter",
            "invalid_request_error",
            "bad_request",
            param="model",
        )
    return asked
