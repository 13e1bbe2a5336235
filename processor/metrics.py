"""The processor's Prometheus metrics: names and labels, defined once.

Alerts and dashboards (``components/observability/alerts.py``, ``components/observability/dashboards.py``) and the KEDA
wake query import these names from here; the processor registers exactly these. Counters carry the ``_total`` suffix as
exposed.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

NAMESPACE: Final = "inferplane_gateway"


def counter_name(name: str) -> str:
    """A counter's name as prometheus_client registers it (it appends ``_total`` itself)."""
    return name.removesuffix("_total")


REQUESTS_TOTAL: Final = f"{NAMESPACE}_requests_total"
"""Counter: requests the processor decided on, by ``model``, ``tier``, ``tenant`` and ``outcome``
(``admitted``, ``rejected``, ``cached``: answered from the response cache, ``gateway.cache``, or ``provider``: handed
to a hosted provider, ``gateway.providers``)."""
REJECTIONS_TOTAL: Final = f"{NAMESPACE}_rejections_total"
"""Counter: requests answered by the processor itself, by ``reason`` (one of :data:`RejectionReason`) and ``model``."""
TOKENS_TOTAL: Final = f"{NAMESPACE}_tokens_total"
"""Counter: tokens accounted from the model server's ``usage``, by ``tenant``, ``tier``, ``model`` and ``kind``
(``prompt`` or ``completion``)."""
PENDING_REQUESTS: Final = f"{NAMESPACE}_pending_requests"
"""Gauge: requests waiting at the gateway for ``model`` (for a ready replica or an in-flight slot). The model's KEDA
ScaledObject wakes it from zero on this gauge."""
INFLIGHT_REQUESTS: Final = f"{NAMESPACE}_inflight_requests"
"""Gauge: requests this processor let through to ``model`` that have not finished."""
QUEUE_SECONDS: Final = f"{NAMESPACE}_queue_seconds"
"""Histogram: time a request waited at the gateway before admission (or rejection), by ``model``."""
PROCESSOR_ERRORS_TOTAL: Final = f"{NAMESPACE}_processor_errors_total"
"""Counter: failures inside the processor, by ``stage`` (``redis``, ``tokenizer``, ``internal``)."""

PROCESSOR_CPU_SECONDS_TOTAL: Final = f"{NAMESPACE}_processor_cpu_seconds_total"
"""Counter: CPU (user + system) the processor's workers have used, summed over a pod's workers: over the
requests counter, the gateway's CPU per request (the gateway dashboard; an alert when it doubles)."""

PROCESSOR_STAGE_CPU_SECONDS_TOTAL: Final = f"{NAMESPACE}_processor_stage_cpu_seconds_total"
"""Counter: CPU the processor's workers spent in each synchronous stage of the request path, by ``stage`` (one of
:data:`CPU_STAGES`); over the requests counter, each stage's CPU per request. What the stages leave of
:data:`PROCESSOR_CPU_SECONDS_TOTAL` is the event loop, gRPC, the Redis clients and watching the replicas."""
CPU_STAGES: Final = ("parse", "difficulty", "tokenize", "context", "route", "forward", "response", "account")
"""The measured stages: ``parse`` the key, the body and the model; ``difficulty`` a difficulty-routed tier's
decision (the score; its embedding, awaited like the cache's, is not a stage); ``tokenize`` the prompt; ``context``
fitting it and its output in a model's context; ``route`` the prefix hashes and the replicas' ranking; ``forward``
the body sent on; ``response`` each chunk of a cacheable miss's answer (the cache's copy); ``account`` a settled
request's tokens counted (from Envoy's access log entry, which carries the usage Envoy read)."""

ROUTING_DECISIONS_TOTAL: Final = f"{NAMESPACE}_routing_decisions_total"
"""Counter: replica picks by ``model`` and ``reason`` (one of :data:`RoutingReason`)."""
PREFIX_TOKENS_TOTAL: Final = f"{NAMESPACE}_prefix_tokens_total"
"""Counter: prompt tokens the router looked up in its prefix index, by ``model`` and ``kind``: ``queried`` (every
hashed prompt token) or ``matched`` (those the picked replica is estimated to hold). matched / queried is the
estimated prefix-cache hit rate, to set beside the engines' own (``vllm:prefix_cache_hits_total /
vllm:prefix_cache_queries_total``)."""
ENDPOINT_INFLIGHT: Final = f"{NAMESPACE}_endpoint_inflight_requests"
"""Gauge: requests this processor has in flight on one replica, by ``model`` and ``endpoint`` (``ip:port``)."""
READY_ENDPOINTS: Final = f"{NAMESPACE}_ready_endpoints"
"""Gauge: replicas of ``model`` the processor sees ready (resolved and answering its metrics scrape)."""
ADMISSION_CAPACITY: Final = f"{NAMESPACE}_admission_capacity"
"""Gauge: sequences ``model`` may run at once across its ready replicas (their ``max_num_seqs`` summed): the cap
the gateway admits to, whatever the number of gateway replicas."""
SLOT_STORE_FALLBACKS_TOTAL: Final = f"{NAMESPACE}_slot_store_fallbacks_total"
"""Counter: per-replica slot decisions taken locally because the shared slot store (Redis) did not answer, by
``model``: each falls back to this processor's fixed share of every replica."""

PREFILL_TOTAL: Final = f"{NAMESPACE}_prefill_total"
"""Counter: requests of a disaggregated model by what became of their prefill step, by ``model`` and ``outcome`` (one
of :data:`PrefillOutcome`)."""

DIFFICULTY_ROUTES_TOTAL: Final = f"{NAMESPACE}_difficulty_routes_total"
"""Counter: requests for a difficulty-routed tier by ``tier`` and ``decision`` (``strong``, ``cheap``, or
``unscored``: sent to the strong model because the prompt could not be scored); strong over all is the tier's share of
strong-model calls, what ``inferplane route eval`` calibrates its threshold for."""

PROVIDER_REQUESTS_TOTAL: Final = f"{NAMESPACE}_provider_requests_total"
"""Counter: requests the processor handed a hosted provider, by ``provider``, ``tier``, ``tenant`` and ``reason``
(one of :data:`ProviderReason`); over :data:`REQUESTS_TOTAL`'s admitted it is the share that left the VPC."""
PROVIDER_TOKENS_TOTAL: Final = f"{NAMESPACE}_provider_tokens_total"
"""Counter: tokens a hosted provider's ``usage`` reported, by ``provider``, ``tier``, ``tenant`` and ``kind``
(``prompt`` or ``completion``); the tenant's token budget is charged the same as for the platform's models."""
PROVIDER_COST_USD_TOTAL: Final = f"{NAMESPACE}_provider_cost_usd_total"
"""Counter: what those tokens cost at the provider's prices (``gateway.providers[].*_usd_per_million``), USD, by
``provider``, ``tier`` and ``tenant``."""
PROVIDER_COOLDOWNS_TOTAL: Final = f"{NAMESPACE}_provider_cooldowns_total"
"""Counter: times a worker passed a hosted provider over after it failed in a row (``processor/providers.py``), by
``provider``."""

MODEL_LABEL: Final = "model"
PROVIDER_LABEL: Final = "provider"
DECISION_LABEL: Final = "decision"
TIER_LABEL: Final = "tier"
TENANT_LABEL: Final = "tenant"
REASON_LABEL: Final = "reason"
KIND_LABEL: Final = "kind"
OUTCOME_LABEL: Final = "outcome"
STAGE_LABEL: Final = "stage"

RejectionReason = Literal[
    "unauthenticated",
    "bad_request",
    "model_not_found",
    "tier_forbidden",
    "context_length_exceeded",
    "requests_per_minute",
    "tokens_per_minute",
    "kv_capacity",
    "cold_start_timeout",
]
REJECTION_REASONS: Final[tuple[RejectionReason, ...]] = get_args(RejectionReason)
"""Every ``reason`` label value of :data:`REJECTIONS_TOTAL`."""

ENDPOINT_LABEL: Final = "endpoint"

ProviderReason = Literal["saturated", "unavailable", "cold_start"]
"""Why a request went to a hosted provider: ``saturated`` no slot on the model's replicas within the queue timeout
(else 429); ``unavailable`` no ready replica of the model nor of any of its tier's fallbacks; ``cold_start`` a model
scaled to zero did not start within its hold (else 503)."""
PROVIDER_REASONS: Final[tuple[ProviderReason, ...]] = get_args(ProviderReason)

PrefillOutcome = Literal["transferred", "short", "busy", "failed"]
"""What became of a request's prefill step: ``transferred`` a prefill replica computed the prompt and the decode
replica pulls its KV cache; ``short`` skipped, the decode replica lacks fewer uncached tokens than the threshold;
``busy`` skipped, every prefill replica was full or none was ready; ``failed`` the step failed (timeout, error, an
answer without transfer parameters). In the last three the decode replica computes the prompt itself."""
PREFILL_OUTCOMES: Final[tuple[PrefillOutcome, ...]] = get_args(PrefillOutcome)

RoutingReason = Literal["prefix_hit", "prefix_home", "load_spill", "least_load", "fallback", "no_endpoint"]
"""Why the router picked what it picked: ``prefix_hit`` the replica with the longest cached prefix;
``prefix_home`` an unseen prefix sent to its rendezvous-hash home (every gateway replica picks the same one);
``load_spill`` a replica holding the prefix was full or too loaded, so another took it; ``least_load`` no prefix to
follow (or ``policy: least_request``), the least loaded replica; ``fallback`` no replica known, Envoy's own
least-request balancing picks; ``no_endpoint`` no ready replica (held for a cold start, then 503)."""
ROUTING_REASONS: Final[tuple[RoutingReason, ...]] = get_args(RoutingReason)
"""Every ``reason`` label value of :data:`ROUTING_DECISIONS_TOTAL`."""

QUEUE_BUCKETS: Final = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Buckets of :data:`QUEUE_SECONDS`: a millisecond of lock contention up to a cold start of minutes."""
