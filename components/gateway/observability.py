"""The gateway's alerts, dashboard and the KEDA query that wakes a model from zero, from one set of selectors.

Series come from three places, each labelled ``namespace``/``pod``: the first two scraped by the gateway's PodMonitor
(the Prometheus Operator attaches the labels), the third by kube-prometheus-stack's kubelet scrape:

* Envoy's Prometheus statistics (``/stats/prometheus``): the API listener's connection manager has the stat prefix
  ``gateway``, which Envoy's default tag extraction turns into ``envoy_http_conn_manager_prefix="gateway"``;
  ``http.gateway.downstream_rq_5xx`` becomes ``envoy_http_downstream_rq_xx{envoy_response_code_class="5"}``;
* the processor's own metrics, named once in :mod:`inferplane.processor.metrics`;
* cAdvisor's CPU of Envoy's container (:data:`~inferplane.components.observability.metrics.CADVISOR_SELECTOR`).

Alerts (``inferplane:gateway:<namespace>:<name>`` group): the share of 5xx answers, the share of 429s per tier, any
processor error, the admission queue's p95 wait close to the queue timeout, the processor's CPU per request doubled
against a day before (Envoy's and the processor's together, Envoy's from cAdvisor), and the replica router's health: its
estimated prefix hit ratio drifting from the engines' real one (vLLM models), no ready replica of a model that does
not scale to zero, and per-replica slots decided without the shared slot store. The wake query is the processor's
pending-requests gauge for one model, summed over gateway replicas: KEDA activates the model's ScaledObject when it
rises above the activation threshold (0), which is what brings a scaled-to-zero model back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferplane.components.gateway.cache_observability import cache_panels, cache_rule_group
from inferplane.components.observability.alerts import AlertingRule, RecordingRule, RuleGroup, record_name
from inferplane.components.observability.dashboards import PANEL_HEIGHT, Dashboard, PanelDraft, two_column_panels
from inferplane.components.observability.metrics import (
    CADVISOR_SELECTOR,
    CONTAINER_CPU_USAGE_SECONDS_TOTAL,
    ModelSeries,
)
from inferplane.components.serving.naming import SERVING_NAMESPACE
from inferplane.processor import metrics as gm
from inferplane.processor.config import ModelConfig, ProcessorConfig

ENVOY_DOWNSTREAM_RQ_TOTAL = "envoy_http_downstream_rq_total"
"""Counter: requests received by an HTTP connection manager (Envoy statistics, "HTTP connection manager")."""
ENVOY_DOWNSTREAM_RQ_XX = "envoy_http_downstream_rq_xx"
"""Counter: responses by class; ``http.<prefix>.downstream_rq_5xx`` exposed with ``envoy_response_code_class``."""
ENVOY_DOWNSTREAM_RQ_ACTIVE = "envoy_http_downstream_rq_active"
"""Gauge: requests in flight on an HTTP connection manager."""
ENVOY_CLUSTER_RQ_TOTAL = "envoy_cluster_upstream_rq_total"
"""Counter: attempts sent to a cluster's hosts (``cluster.<name>.upstream_rq_total``)."""
ENVOY_CLUSTER_RQ_XX = "envoy_cluster_upstream_rq_xx"
"""Counter: a cluster's answers by class (``cluster.<name>.upstream_rq_5xx`` with ``envoy_response_code_class``)."""
ENVOY_CLUSTER_LABEL = "envoy_cluster_name"
PROVIDER_CLUSTER_PATTERN = "provider-.+"
"""The hosted providers' Envoy clusters (:func:`~.provider_renderer.provider_cluster_name`)."""
ENVOY_HCM_LABEL = "envoy_http_conn_manager_prefix"
"""The tag Envoy extracts from ``http.<stat_prefix>.`` statistics (Envoy's default tag specifiers)."""
ENVOY_CODE_CLASS_LABEL = "envoy_response_code_class"
ENVOY_API_STAT_PREFIX = "gateway"
"""The API listener's ``stat_prefix`` in the rendered bootstrap (``components.gateway.renderer``)."""
ENVOY_CONTAINER = "envoy"
"""Envoy's container in the gateway pod (:mod:`.component` names it with this); its CPU is cAdvisor's (Envoy's
statistics have none)."""

ERROR_RATIO_ALERT = 0.05
"""5xx answers above 5% of requests for 5 minutes: more than retries and cold-start holds explain."""
THROTTLE_RATIO_ALERT = 0.10
"""429s above 10% of a tier's requests for 15 minutes: its tenants' limits or its models' capacity are too small."""
QUEUE_WAIT_ALERT_FRACTION = 0.5
"""The admission queue's p95 wait above half of the queue timeout: requests are about to be turned away."""
THROTTLE_REASONS: tuple[gm.RejectionReason, ...] = ("requests_per_minute", "tokens_per_minute", "kv_capacity")
"""The processor's rejections answered with 429 (the others are 400, 401, 403, 404 and 503)."""

PREFIX_HIT_RATIO_ESTIMATED = record_name("gateway_prefix_hit_ratio_estimated", "rate5m")
"""Recorded per model: the prompt tokens the router expected the picked replica to hold, over those it looked up."""
PREFIX_HIT_RATIO_ENGINE = record_name("gateway_prefix_hit_ratio_engine", "rate5m")
"""Recorded per vLLM model: the prompt tokens its replicas found in their prefix caches, over those they looked up."""
PREFIX_DRIFT_ESTIMATED_MIN = 0.5
"""The estimated hit ratio above which the router counts on prefix hits, so a collapse of the real one matters."""
PREFIX_DRIFT_REAL_FRACTION = 0.5
"""The real hit ratio below this fraction of the estimated one: the index promises blocks the engines no longer hold.
Half leaves room for the ratios' different bases: the router hashes a prompt's full blocks, the engine looks up every
prompt token."""
PREFIX_DRIFT_FOR = "15m"
NO_READY_REPLICA_FOR = "5m"
SLOT_STORE_DOWN_FOR = "5m"


@dataclass(frozen=True)
class GatewaySeries:
    """Where one gateway's series live: its namespace and Deployment (the pods' name prefix)."""

    name: str
    namespace: str

    def __post_init__(self) -> None:
        # Same name rules as a model's series; ModelSeries checks them.
        ModelSeries(self.name, "vllm", self.namespace, self.name)

    @property
    def pods(self) -> str:
        """Matchers for the gateway's pods (``<deployment>-<pod-template-hash>-<suffix>``)."""
        return f'namespace="{self.namespace}",pod=~"{self.name}-[a-z0-9]+-[a-z0-9]+"'

    @property
    def api(self) -> str:
        """Matchers for Envoy's API listener statistics."""
        return f'{self.pods},{ENVOY_HCM_LABEL}="{ENVOY_API_STAT_PREFIX}"'

    def inflight(self) -> str:
        """Requests in flight through every replica's Envoy: the autoscaler's signal."""
        return f"sum({ENVOY_DOWNSTREAM_RQ_ACTIVE}{{{self.api}}})"

    def request_rate(self) -> str:
        """Requests per second over 5m, all replicas."""
        return f"sum(rate({ENVOY_DOWNSTREAM_RQ_TOTAL}{{{self.api}}}[5m]))"

    def error_rate(self) -> str:
        """5xx answers per second over 5m, all replicas."""
        return f'sum(rate({ENVOY_DOWNSTREAM_RQ_XX}{{{self.api},{ENVOY_CODE_CLASS_LABEL}="5"}}[5m]))'

    def tier_requests_rate(self, tier: str) -> str:
        """Requests the processor decided on for ``tier``, per second over 5m."""
        return f'sum(rate({gm.REQUESTS_TOTAL}{{{self.pods},{gm.TIER_LABEL}="{tier}"}}[5m]))'

    def throttled_rate(self, models: Sequence[str]) -> str:
        """429 answers (rate, tokens, KV capacity) for ``models``, per second over 5m."""
        reasons = "|".join(THROTTLE_REASONS)
        names = "|".join(sorted(models))
        return (
            f'sum(rate({gm.REJECTIONS_TOTAL}{{{self.pods},{gm.REASON_LABEL}=~"{reasons}",'
            f'{gm.MODEL_LABEL}=~"{names}"}}[5m]))'
        )

    def processor_errors_rate(self) -> str:
        """Processor failures per second over 5m, by stage."""
        return f"sum by ({gm.STAGE_LABEL}) (rate({gm.PROCESSOR_ERRORS_TOTAL}{{{self.pods}}}[5m]))"

    def prefix_hit_ratio_estimated(self) -> str:
        """Per model, the share of looked-up prompt tokens the router estimated the picked replica holds, over 5m."""
        tokens = f"rate({gm.PREFIX_TOKENS_TOTAL}{{{self.pods},{gm.KIND_LABEL}="
        by = f"sum by ({gm.MODEL_LABEL})"
        return f'{by} ({tokens}"matched"}}[5m])) / {by} ({tokens}"queried"}}[5m]))'

    def ready_endpoints(self, model: str) -> str:
        """Ready replicas of ``model`` as the gateway's replicas see them, summed over them (0: none sees one)."""
        return f'sum({gm.READY_ENDPOINTS}{{{self.pods},{gm.MODEL_LABEL}="{model}"}})'

    def slot_store_fallbacks_rate(self) -> str:
        """Slot decisions taken without the shared slot store, per second over 5m, all replicas and models."""
        return f"sum(rate({gm.SLOT_STORE_FALLBACKS_TOTAL}{{{self.pods}}}[5m]))"

    def decided_rate(self) -> str:
        """Requests the processor decided on, per second over 5m, all replicas."""
        return f"sum(rate({gm.REQUESTS_TOTAL}{{{self.pods}}}[5m]))"

    def route_share(self, decision: str) -> str:
        """Per difficulty-routed tier, the share of its decisions over 5m whose ``decision`` label matches
        ``decision`` (a PromQL matcher and value: ``'!="cheap"'``)."""
        routes = gm.DIFFICULTY_ROUTES_TOTAL
        part = f"sum by ({gm.TIER_LABEL}) (rate({routes}{{{self.pods},{gm.DECISION_LABEL}{decision}}}[5m]))"
        return f"{part} / sum by ({gm.TIER_LABEL}) (rate({routes}{{{self.pods}}}[5m]))"

    def processor_cpu_rate(self) -> str:
        """The processor's CPU seconds per second over 5m, all replicas and workers."""
        return f"sum(rate({gm.PROCESSOR_CPU_SECONDS_TOTAL}{{{self.pods}}}[5m]))"

    def envoy_cpu_rate(self) -> str:
        """Envoy's CPU seconds per second over 5m, all replicas (its container's, from cAdvisor)."""
        selector = f'{CADVISOR_SELECTOR},{self.pods},container="{ENVOY_CONTAINER}"'
        return f"sum(rate({CONTAINER_CPU_USAGE_SECONDS_TOTAL}{{{selector}}}[5m]))"

    def processor_cpu_per_request(self) -> str:
        """The processor's CPU seconds per request it decided on, over 5m, all replicas and workers."""
        return f"{self.processor_cpu_rate()} / {self.decided_rate()}"

    def envoy_cpu_per_request(self) -> str:
        """Envoy's CPU seconds per request the processor decided on, over 5m, all replicas."""
        return f"{self.envoy_cpu_rate()} / {self.decided_rate()}"

    def gateway_cpu_per_request(self) -> str:
        """The gateway's CPU seconds per request, Envoy's and the processor's, over 5m; the processor's alone where
        cAdvisor is not scraped (no series of Envoy's CPU), so the alert on it still watches that."""
        return f"({self.processor_cpu_rate()} + ({self.envoy_cpu_rate()} or vector(0))) / {self.decided_rate()}"

    def stage_cpu_per_request(self) -> str:
        """The processor's CPU seconds per request in each measured stage of the request path, by ``stage``."""
        stages = f"sum by ({gm.STAGE_LABEL}) (rate({gm.PROCESSOR_STAGE_CPU_SECONDS_TOTAL}{{{self.pods}}}[5m]))"
        return f"{stages} / on() group_left() {self.decided_rate()}"

    def provider_share(self, tier: str) -> str:
        """The share of ``tier``'s requests handed to a hosted provider over 5m (prompts that left the VPC)."""
        handed = f'sum(rate({gm.PROVIDER_REQUESTS_TOTAL}{{{self.pods},{gm.TIER_LABEL}="{tier}"}}[5m]))'
        return f"{handed} / {self.tier_requests_rate(tier)}"

    def provider_error_ratio(self) -> str:
        """Per provider cluster, the share of its attempts answered 5xx (or reset) over 5m, Envoy's count."""
        clusters = f'{self.pods},{ENVOY_CLUSTER_LABEL}=~"{PROVIDER_CLUSTER_PATTERN}"'
        by = f"sum by ({ENVOY_CLUSTER_LABEL})"
        errors = f'{by} (rate({ENVOY_CLUSTER_RQ_XX}{{{clusters},{ENVOY_CODE_CLASS_LABEL}="5"}}[5m]))'
        return f"{errors} / {by} (rate({ENVOY_CLUSTER_RQ_TOTAL}{{{clusters}}}[5m]))"

    def queue_wait_p95(self, model: str) -> str:
        """p95 of the admission wait for ``model`` over 5m, seconds."""
        buckets = f'{gm.QUEUE_SECONDS}_bucket{{{self.pods},{gm.MODEL_LABEL}="{model}"}}'
        return f"histogram_quantile(0.95, sum by (le) (rate({buckets}[5m])))"


def wake_query(model: str) -> str:
    """KEDA's wake trigger for ``model``: requests the gateway holds for it, over every gateway replica of the
    cluster (the model's ScaledObject and the gateway share the cluster's Prometheus)."""
    return f'sum({gm.PENDING_REQUESTS}{{{gm.MODEL_LABEL}="{model}"}})'


def model_series(model: ModelConfig) -> ModelSeries:
    """Where a model's engine series live: its Deployment, named after the model, in the serving namespace
    (``components.serving.naming``)."""
    return ModelSeries(model.name, model.engine, SERVING_NAMESPACE, model.name)


def engine_prefix_hit_ratio(model: ModelSeries) -> str | None:
    """The engines' own prefix-cache hit ratio over 5m across the model's replicas; None where the engine exports none.

    Triton: the TensorRT-LLM backend's ``CustomMetricsReporter`` (tensorrtllm_backend
    ``inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc``) exports
    ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="reused"}``, a gauge of reused KV-cache blocks, but
    no missed or looked-up count beside it; TensorRT-LLM's own ``cacheHitRate`` = reused / (reused + missed)
    (``cpp/include/tensorrt_llm/batch_manager/kvCacheManager.h``, ``getKvCacheStats``) never reaches Prometheus, so
    no ratio can be formed.
    """
    return model.prefix_cache_hit_ratio()


def _models_of_tier(config: ProcessorConfig) -> dict[str, list[str]]:
    tiers: dict[str, list[str]] = {}
    for model in config.models:
        tiers.setdefault(model.tier, []).append(model.name)
    for tier in config.tiers:
        for name in (*tier.models, *tier.fallback):
            if name not in tiers.setdefault(tier.name, []):
                tiers[tier.name].append(name)
    return tiers


def gateway_rule_group(series: GatewaySeries, config: ProcessorConfig) -> RuleGroup:
    """Recording rules and alerts for one gateway, from the processor config it runs with.

    Each recording rule precedes the alert that reads it, so the alert sees this evaluation's series.
    """
    rules: list[RecordingRule | AlertingRule] = [
        *_error_ratio_rules(series),
        *_throttling_rules(series, config),
        _processor_errors_alert(series),
        *_queue_wait_alerts(series, config),
        *_prefix_routing_rules(series, config),
        *_no_ready_replica_alerts(series, config),
        _slot_store_alert(series),
        *_cpu_per_request_rules(series),
        *_provider_rules(series, config),
    ]
    return RuleGroup(name=f"inferplane:gateway:{series.namespace}:{series.name}", rules=tuple(rules))


def _recorded_labels(series: GatewaySeries) -> dict[str, str]:
    """Labels on the gateway's recorded series."""
    return {"gateway": series.name, "namespace": series.namespace}


def _recorded_selector(series: GatewaySeries) -> str:
    """Matchers selecting the gateway's recorded series (:func:`_recorded_labels`)."""
    return f'gateway="{series.name}",namespace="{series.namespace}"'


def _alert_labels(series: GatewaySeries) -> dict[str, str]:
    """Labels of the gateway's alerts: warning unless raised, and which gateway it is about."""
    return {"severity": "warning", "gateway": series.name, "namespace": series.namespace}


def _error_ratio_rules(series: GatewaySeries) -> list[RecordingRule | AlertingRule]:
    """Request and 5xx rates, and the critical alert on their ratio."""
    requests = record_name("gateway_requests", "rate5m")
    errors = record_name("gateway_errors", "rate5m")
    labels = _recorded_labels(series)
    selector = _recorded_selector(series)
    return [
        RecordingRule(record=requests, expr=series.request_rate(), labels=labels),
        RecordingRule(record=errors, expr=series.error_rate(), labels=labels),
        AlertingRule(
            alert="InferplaneGatewayErrorRatioHigh",
            expr=f"{errors}{{{selector}}} / {requests}{{{selector}}} > {ERROR_RATIO_ALERT:g}",
            for_="5m",
            labels={**_alert_labels(series), "severity": "critical"},
            annotations={
                "summary": f"{series.name}: more than {ERROR_RATIO_ALERT:.0%} of requests answered 5xx",
                "description": "Model servers fail or time out beyond what fallback absorbs, the processor is down "
                "(Envoy answers 500), or models stay at zero past their cold-start hold (503).",
            },
        ),
    ]


def _throttling_rules(series: GatewaySeries, config: ProcessorConfig) -> list[RecordingRule | AlertingRule]:
    """Per tier, in tier order: the share of its requests answered 429, and the alert on it."""
    record = record_name("gateway_throttled_ratio", "rate5m")
    rules: list[RecordingRule | AlertingRule] = []
    for tier, models in sorted(_models_of_tier(config).items()):
        rules.append(
            RecordingRule(
                record=record,
                expr=f"{series.throttled_rate(models)} / {series.tier_requests_rate(tier)}",
                labels={**_recorded_labels(series), "tier": tier},
            )
        )
        rules.append(
            AlertingRule(
                alert="InferplaneGatewayThrottlingHigh",
                expr=f'{record}{{{_recorded_selector(series)},tier="{tier}"}} > {THROTTLE_RATIO_ALERT:g}',
                for_="15m",
                labels={**_alert_labels(series), "tier": tier},
                annotations={
                    "summary": f"{series.name}: more than {THROTTLE_RATIO_ALERT:.0%} of tier {tier} answered 429",
                    "description": "Tenants hit their request or token budgets, or the tier's models are at their "
                    "in-flight cap (KV capacity): raise the limits or the models' max_replicas.",
                },
            )
        )
    return rules


PROCESSOR_CPU_PER_REQUEST = record_name("gateway_processor_cpu_per_request", "rate5m")
"""Recorded per gateway: the processor's CPU seconds per request it decided on."""
ENVOY_CPU_PER_REQUEST = record_name("gateway_envoy_cpu_per_request", "rate5m")
"""Recorded per gateway: Envoy's CPU seconds per request the processor decided on."""
GATEWAY_CPU_PER_REQUEST = record_name("gateway_cpu_per_request", "rate5m")
"""Recorded per gateway: Envoy's and the processor's CPU seconds per request together (the alert's measure: since
Envoy reads each response's usage, it spends about as much as the processor a request, more on long streams)."""
CPU_PER_REQUEST_GROWTH_ALERT = 2.0
"""The gateway's CPU per request at least this many times its value a day before, for :data:`CPU_ALERT_FOR`."""
CPU_ALERT_FOR = "30m"
CPU_ALERT_MIN_RATE = 1.0
"""Requests per second below which the CPU-per-request alert stays silent: with few requests, the CPU of watching
the replicas (about 0.3 ms a replica a second a worker) dominates the quotient."""


def _cpu_per_request_rules(series: GatewaySeries) -> list[RecordingRule | AlertingRule]:
    """The processor's, Envoy's and the gateway's CPU per request, recorded, and the alert when the gateway's doubles
    against the same time a day before (a release, a config or a traffic shape that makes every request dearer;
    issue 33's goal is ~10 ms)."""
    labels, selector = _recorded_labels(series), _recorded_selector(series)
    recorded = f"{GATEWAY_CPU_PER_REQUEST}{{{selector}}}"
    return [
        RecordingRule(record=PROCESSOR_CPU_PER_REQUEST, expr=series.processor_cpu_per_request(), labels=labels),
        RecordingRule(record=ENVOY_CPU_PER_REQUEST, expr=series.envoy_cpu_per_request(), labels=labels),
        RecordingRule(record=GATEWAY_CPU_PER_REQUEST, expr=series.gateway_cpu_per_request(), labels=labels),
        AlertingRule(
            alert="InferplaneGatewayCpuPerRequestDoubled",
            expr=f"{recorded} > {CPU_PER_REQUEST_GROWTH_ALERT:g} * ({recorded} offset 1d)"
            f" and on() {series.decided_rate()} > {CPU_ALERT_MIN_RATE:g}",
            for_=CPU_ALERT_FOR,
            labels=_alert_labels(series),
            annotations={
                "summary": f"{series.name}: the gateway's CPU per request (Envoy and the processor) is "
                f"{CPU_PER_REQUEST_GROWTH_ALERT:g}x yesterday's",
                "description": "Every request costs the gateway more CPU than a day ago: a release, a config change "
                "(tokenizers, routing, the cache, the streams' chunking) or longer prompts and outputs. Its pods need "
                "more CPU for the same traffic; the dashboard's CPU panel says whether Envoy or the processor grew, "
                "benchmarks/gateway_cpu.py where it goes.",
            },
        ),
    ]


PROVIDER_SHARE_ALERT = 0.10
"""Share of a tier's requests handed to hosted providers above which, for 15m, the tier is short of capacity."""
PROVIDER_ERROR_ALERT = 0.05
"""Share of a provider's attempts answered 5xx above which, for 5m, its requests fail."""


def _provider_rules(series: GatewaySeries, config: ProcessorConfig) -> list[AlertingRule]:
    """Where a tier falls back to hosted providers: an alert on the share that leaves the VPC, per tier, and one on
    the providers' errors (nothing without a provider)."""
    tiers = sorted(t.name for t in config.tiers if t.providers)
    rules = [
        AlertingRule(
            alert="InferplaneProviderShareHigh",
            expr=f"{series.provider_share(tier)} > {PROVIDER_SHARE_ALERT:g}",
            for_="15m",
            labels={**_alert_labels(series), "tier": tier},
            annotations={
                "summary": f"{series.name}: more than {PROVIDER_SHARE_ALERT:.0%} of tier {tier} goes to hosted "
                "providers",
                "description": "The tier's own models are saturated or down, so consenting tenants' prompts leave the "
                "VPC and are paid per token: raise the models' max_replicas, or see why their replicas are not ready.",
            },
        )
        for tier in tiers
    ]
    if tiers:
        rules.append(
            AlertingRule(
                alert="InferplaneProviderErrors",
                expr=f"{series.provider_error_ratio()} > {PROVIDER_ERROR_ALERT:g}",
                for_="5m",
                labels=_alert_labels(series),
                annotations={
                    "summary": f"{series.name}: hosted provider {{{{ $labels.{ENVOY_CLUSTER_LABEL} }}}} answers more "
                    f"than {PROVIDER_ERROR_ALERT:.0%} 5xx",
                    "description": "The provider fails or rejects the key (a rotated or revoked Secret shows as 401 in "
                    "the access log); requests handed to it fail.",
                },
            )
        )
    return rules


def _processor_errors_alert(series: GatewaySeries) -> AlertingRule:
    """Any processor failure, by stage."""
    return AlertingRule(
        alert="InferplaneGatewayProcessorErrors",
        expr=f"{series.processor_errors_rate()} > 0",
        for_="5m",
        labels=_alert_labels(series),
        annotations={
            "summary": f"{series.name}: the processor fails at stage {{{{ $labels.{gm.STAGE_LABEL} }}}}",
            "description": "redis: token budgets are not shared (the processor fails open on them); tokenizer: "
            "prompt tokens are estimated; internal: see the processor's log.",
        },
    )


def _queue_wait_alerts(series: GatewaySeries, config: ProcessorConfig) -> list[AlertingRule]:
    """Per model: the admission queue's p95 wait close to its queue timeout."""
    alerts = []
    for model in config.models:
        bound = model.queue_timeout_seconds * QUEUE_WAIT_ALERT_FRACTION
        alerts.append(
            AlertingRule(
                alert="InferplaneGatewayQueueWaitHigh",
                expr=f"{series.queue_wait_p95(model.name)} > {bound:g}",
                for_="10m",
                labels={**_alert_labels(series), "model": model.name},
                annotations={
                    "summary": f"{series.name}: requests for {model.name} wait over {bound:g}s for admission (p95)",
                    "description": f"The in-flight cap (max_num_seqs {model.max_num_seqs} x the ready replicas, "
                    "shared by every gateway replica through Redis) is reached and requests queue; past the queue "
                    "timeout they get 429. Raise the model's max_replicas.",
                },
            )
        )
    return alerts


def _prefix_routing_rules(series: GatewaySeries, config: ProcessorConfig) -> list[RecordingRule | AlertingRule]:
    """The router's estimated prefix hit ratio per model; per vLLM model, the engines' real one and the drift alert."""
    labels = _recorded_labels(series)
    rules: list[RecordingRule | AlertingRule] = [
        RecordingRule(record=PREFIX_HIT_RATIO_ESTIMATED, expr=series.prefix_hit_ratio_estimated(), labels=labels)
    ]
    for model in config.models:
        real = engine_prefix_hit_ratio(model_series(model))
        if real is None:
            continue  # Triton: no hit ratio to compare with (engine_prefix_hit_ratio)
        rules.append(RecordingRule(record=PREFIX_HIT_RATIO_ENGINE, expr=real, labels={**labels, "model": model.name}))
        rules.append(_prefix_drift_alert(series, model.name))
    return rules


def _prefix_drift_alert(series: GatewaySeries, model: str) -> AlertingRule:
    """The estimated hit ratio high while the engines' real one is under a fraction of it."""
    selector = f'{_recorded_selector(series)},{gm.MODEL_LABEL}="{model}"'
    estimated = f"{PREFIX_HIT_RATIO_ESTIMATED}{{{selector}}}"
    real = f"{PREFIX_HIT_RATIO_ENGINE}{{{selector}}}"
    return AlertingRule(
        alert="InferplanePrefixIndexDrift",
        expr=f"{estimated} > {PREFIX_DRIFT_ESTIMATED_MIN:g} and {real} < {PREFIX_DRIFT_REAL_FRACTION:g} * {estimated}",
        for_=PREFIX_DRIFT_FOR,
        labels={**_alert_labels(series), "model": model},
        annotations={
            "summary": f"{series.name}: the router's prefix index for {model} promises hits its replicas do not have",
            "description": f"The estimated prefix hit ratio is above {PREFIX_DRIFT_ESTIMATED_MIN:.0%} while the "
            f"engines report under {PREFIX_DRIFT_REAL_FRACTION:.0%} of it: the index has drifted from what the "
            "replicas hold. Check replica restarts (a restarted engine starts empty) and the KV pool size against "
            "routing.index_blocks (an index larger than the pool remembers evicted blocks).",
        },
    )


def _no_ready_replica_alerts(series: GatewaySeries, config: ProcessorConfig) -> list[AlertingRule]:
    """Critical, per model that never scales to zero: no gateway replica sees a ready replica of it."""
    return [
        AlertingRule(
            alert="InferplaneNoReadyReplica",
            expr=f"{series.ready_endpoints(model.name)} == 0",
            for_=NO_READY_REPLICA_FOR,
            labels={**_alert_labels(series), "severity": "critical", "model": model.name},
            annotations={
                "summary": f"{series.name}: no ready replica of {model.name}",
                "description": "The gateway resolves no replica of the model that answers its metrics scrape, so "
                "its requests wait out the cold-start hold and get 503. If the Deployment has available replicas, "
                "check the headless Service's DNS and the NetworkPolicy from the gateway to the metrics port.",
            },
        )
        for model in config.models
        # A model that scales to zero has no replica while idle by design; its wake-up is KEDA's.
        if not model.scale_to_zero
    ]


def _slot_store_alert(series: GatewaySeries) -> AlertingRule:
    """Per-replica slots decided without the shared slot store (Redis)."""
    return AlertingRule(
        alert="InferplaneSlotStoreDown",
        expr=f"{series.slot_store_fallbacks_rate()} > 0",
        for_=SLOT_STORE_DOWN_FOR,
        labels=_alert_labels(series),
        annotations={
            "summary": f"{series.name}: per-replica slots are decided without the shared slot store",
            "description": "Redis does not answer: per-replica caps are held per worker only, each worker taking "
            "its fallback share of every replica, so replicas run below max_num_seqs under uneven load. Check "
            "Redis (processor errors at stage redis).",
        },
    )


@dataclass(frozen=True)
class ModelCost:
    """What the cost panel needs of one model: its series (for available replicas) and its replica price."""

    series: ModelSeries
    replica_hourly_usd: float


def gateway_dashboard(
    series: GatewaySeries,
    costs: Mapping[str, ModelCost],
    *,
    cache: bool = False,
    difficulty: bool = False,
    providers: bool = False,
) -> Dashboard:
    """Requests, rejections by reason, tokens per tenant and on-demand cost per 1,000 tokens per model; with
    ``difficulty`` (a tier routes by it), its strong share per tier; with ``providers`` (a tier falls back to one),
    the share handed to them and what they cost; with ``cache``, the response cache's panels below
    (``components.gateway.cache_observability``)."""
    routing = [
        *_routing_panels(series),
        *([_difficulty_panel(series)] if difficulty else []),
        *([_provider_panel(series)] if providers else []),
    ]
    panels = two_column_panels([*_traffic_panels(series), *routing, *_cost_panels(series, costs), _cpu_panel(series)])
    if cache:
        # Starting on the row after the last one the panels above occupy.
        panels += cache_panels(series.pods, first_id=len(panels) + 1, y=((len(panels) + 1) // 2) * PANEL_HEIGHT)
    return Dashboard(
        uid=f"inferplane-gw-{series.name}"[:40],
        title=f"inferplane / gateway {series.name}",
        tags=("inferplane", "gateway"),
        panels=panels,
    )


def _cpu_panel(series: GatewaySeries) -> PanelDraft:
    """What the gateway costs in CPU per request (issue 33's measure)."""
    return PanelDraft(
        "Gateway CPU per request",
        "s",
        [
            (f"{PROCESSOR_CPU_PER_REQUEST}{{{_recorded_selector(series)}}}", "processor"),
            (f"{ENVOY_CPU_PER_REQUEST}{{{_recorded_selector(series)}}}", "Envoy"),
            (series.stage_cpu_per_request(), f"processor: {{{{{gm.STAGE_LABEL}}}}}"),
        ],
        description="CPU seconds the processor's workers used per request they decided on (watching the replicas "
        "included, which dominates at low traffic), Envoy's (its container's, from cAdvisor: relaying and reading "
        "each response, about 0.05 ms a streamed chunk), and the share of the processor's each synchronous stage of "
        "the request path took (parse, difficulty, tokenize, context, route, forward, response chunks, account); "
        "what the stages leave is the event loop, gRPC and the Redis clients. Alerted when Envoy's and the "
        "processor's together double against a day before.",
    )


def _by(label: str, query: str) -> tuple[str, str]:
    """``query`` summed by ``label``, one line per value of it (legend ``{{label}}``)."""
    return f"sum by ({label}) ({query})", f"{{{{{label}}}}}"


def _traffic_panels(series: GatewaySeries) -> list[PanelDraft]:
    """What the gateway answered and holds: requests, rejections, tokens per tenant, in flight and pending."""
    pods = series.pods
    return [
        PanelDraft(
            "Requests",
            "reqps",
            [_by(gm.MODEL_LABEL, f"rate({gm.REQUESTS_TOTAL}{{{pods}}}[5m])"), (series.error_rate(), "5xx")],
            description="Requests the processor decided on, per model; Envoy's 5xx answers.",
        ),
        PanelDraft(
            "Rejections by reason",
            "reqps",
            [_by(gm.REASON_LABEL, f"rate({gm.REJECTIONS_TOTAL}{{{pods}}}[5m])")],
            description="Answered by the gateway itself: 401, 400 context_length_exceeded, 429 budgets and "
            "capacity, 503.",
        ),
        PanelDraft(
            "Tokens per tenant",
            "short",
            [_by(gm.TENANT_LABEL, f"rate({gm.TOKENS_TOTAL}{{{pods}}}[5m])")],
            description="Prompt + completion tokens per second, from the model servers' usage.",
        ),
        PanelDraft(
            "Requests in flight and pending",
            "short",
            [
                (series.inflight(), "in flight (Envoy)"),
                (f"sum by ({gm.MODEL_LABEL}) ({gm.PENDING_REQUESTS}{{{pods}}})", "pending {{model}}"),
            ],
            description="Pending: waiting at the gateway for an in-flight slot or a replica (the wake signal).",
        ),
    ]


def _routing_panels(series: GatewaySeries) -> list[PanelDraft]:
    """How the router picks replicas: decisions by reason, prefix hit ratios, load per replica, ready replicas."""
    pods = series.pods
    recorded = _recorded_selector(series)
    model = gm.MODEL_LABEL
    return [
        PanelDraft(
            "Routing decisions by reason",
            "reqps",
            [_by(gm.REASON_LABEL, f"rate({gm.ROUTING_DECISIONS_TOTAL}{{{pods}}}[5m])")],
            description="Replica picks per second: prefix_hit and prefix_home follow the prompt's prefix, "
            "load_spill and least_load the load, fallback leaves it to Envoy, no_endpoint found no ready replica.",
        ),
        PanelDraft(
            "Prefix hit ratio: estimated vs engine",
            "percentunit",
            [
                (f"{PREFIX_HIT_RATIO_ESTIMATED}{{{recorded}}}", "estimated {{model}}"),
                (f"{PREFIX_HIT_RATIO_ENGINE}{{{recorded}}}", "engine {{model}}"),
            ],
            description="Prompt tokens the router expected the picked replica to hold, beside those the engines "
            "found in their prefix caches (vLLM only). A gap that opens means the index has drifted.",
        ),
        PanelDraft(
            "In flight per replica",
            "short",
            [(f"sum by ({model}, {gm.ENDPOINT_LABEL}) ({gm.ENDPOINT_INFLIGHT}{{{pods}}})", "{{model}} {{endpoint}}")],
            description="Requests the gateway's replicas have in flight on each model replica (ip:port).",
        ),
        PanelDraft(
            "Ready replicas and admission capacity",
            "short",
            # max, not sum: every gateway replica sees the same model replicas and the same shared cap.
            [
                (f"max by ({model}) ({gm.READY_ENDPOINTS}{{{pods}}})", "ready {{model}}"),
                (f"max by ({model}) ({gm.ADMISSION_CAPACITY}{{{pods}}})", "capacity {{model}}"),
            ],
            description="Replicas the gateway sees ready, and the sequences it admits at once to the model "
            "(max_num_seqs summed over them).",
        ),
    ]


def _difficulty_panel(series: GatewaySeries) -> PanelDraft:
    """What the difficulty-routed tiers send to their strong model."""
    return PanelDraft(
        "Difficulty routes: strong share per tier",
        "percentunit",
        [
            (series.route_share('!="cheap"'), "strong {{tier}}"),
            (series.route_share('="unscored"'), "unscored {{tier}}"),
        ],
        description="Of the requests for each tier routed by difficulty, the share sent to its strong model "
        "(unscored ones included: no user text, the embedder failing, the examples not embedded yet), against "
        "the share the tier's threshold was chosen for with inferplane route eval (docs/routing.md).",
    )


def _provider_panel(series: GatewaySeries) -> PanelDraft:
    """What the tiers hand to hosted providers, and what it costs."""
    pods = series.pods
    handed = f"sum by ({gm.TIER_LABEL}) (rate({gm.PROVIDER_REQUESTS_TOTAL}{{{pods}}}[5m]))"
    decided = f"sum by ({gm.TIER_LABEL}) (rate({gm.REQUESTS_TOTAL}{{{pods}}}[5m]))"
    return PanelDraft(
        "Hosted providers: share per tier, $ per hour",
        "percentunit",
        [
            (f"{handed} / {decided}", "handed out {{tier}}"),
            (
                f"sum by ({gm.PROVIDER_LABEL}) (rate({gm.PROVIDER_COST_USD_TOTAL}{{{pods}}}[5m])) * 3600",
                "$/h {{provider}}",
            ),
        ],
        description="Of each tier's requests, the share its own models could not take and a hosted provider answered "
        "(consenting tenants only; alerted above 10% for 15m), and each provider's cost per hour at the spec's prices "
        "from its reported usage (docs/providers.md).",
    )


def _cost_panels(series: GatewaySeries, costs: Mapping[str, ModelCost]) -> list[PanelDraft]:
    """On-demand dollars per 1,000 tokens the gateway accounted, one line per priced model; none without prices."""
    if not costs:
        return []
    targets = []
    for model, cost in sorted(costs.items()):
        tokens = f'sum(rate({gm.TOKENS_TOTAL}{{{series.pods},{gm.MODEL_LABEL}="{model}"}}[5m]))'
        replicas = cost.series.available_replicas()
        targets.append((f"({cost.replica_hourly_usd:g} * {replicas}) / ({tokens} * 3600 / 1000)", model))
    return [
        PanelDraft(
            "$ per 1k tokens",
            "currencyUSD",
            targets,
            description="On-demand price per replica-hour (catalog) x available replicas, over the tokens the "
            "gateway accounted for the model.",
        )
    ]


def render_rules(series: GatewaySeries, config: ProcessorConfig) -> dict[str, Any]:
    """The PrometheusRule ``spec`` for one gateway."""
    groups = [gateway_rule_group(series, config).render()]
    if config.cache is not None and config.cache.enabled:
        groups.append(cache_rule_group(f"{series.namespace}:{series.name}", series.pods).render())
    return {"groups": groups}
