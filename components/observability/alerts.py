"""Recording and alerting rules for served models and their GPUs, from the spec's SLOs.

The rules are typed Python (:class:`RuleGroup`), rendered two ways from the same objects: the ``spec`` of a
``monitoring.coreos.com/v1`` PrometheusRule (what the cluster gets) and a Prometheus rule file (what ``promtool check
rules`` and ``promtool test rules`` read in the tests). Every PromQL expression comes from
:class:`components.observability.metrics.ModelSeries`, the same source as the KEDA trigger.

Per model (``inferplane:<model>`` group):

* recording rules ``inferplane:ttft_seconds:p50|p95|p99``, ``inferplane:itl_seconds:p50|p95|p99`` (vLLM),
  ``inferplane:generation_tokens:rate5m``, ``inferplane:prompt_tokens:rate5m``, ``inferplane:queue_depth`` (the
  KEDA query, verbatim) and ``inferplane:kv_cache_usage:max``, each labelled ``model`` and ``namespace``;
* alerts: TTFT p95 above the SLO, ITL p95 above the SLO (vLLM), KV cache above 95% for 5 minutes, any preemption
  (vLLM), queue above the autoscaler's target while KEDA's HPA sits at its ceiling, no available replica while some
  are wanted.

Platform-wide (``inferplane:gpus``): an XID error on any GPU, a GPU above ``GPU_TEMPERATURE_ALERT_CELSIUS``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.observability.metrics import (
    DCGM_GPU_TEMP,
    DCGM_XID_ERRORS,
    KSM_HPA_CURRENT,
    KSM_HPA_MAX,
    ModelSeries,
)
from inferplane.components.spec.platform_spec import SloSpec

KV_CACHE_ALERT_RATIO = 0.95
"""KV-cache usage above which new sequences start preempting running ones."""
KV_CACHE_ALERT_FOR = "5m"
GPU_TEMPERATURE_ALERT_CELSIUS = 85
"""Data-centre GPUs (A10G, L4, L40S, H100, H200) start clock slowdown near 87-90 degrees C ("GPU Slowdown Temp" in
``nvidia-smi -q``); alerting at 85 leaves room to act before throughput drops."""
SLO_ALERT_FOR = "10m"
"""How long a percentile must stay above its objective: a 5m window plus two evaluations rides out one slow burst."""
QUANTILES = (0.5, 0.95, 0.99)
RECORD_PREFIX = "inferplane"


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    expr: str = Field(description="PromQL.")
    labels: dict[str, str] = Field(default_factory=dict)


class RecordingRule(_Rule):
    """A series computed at each evaluation (``record``)."""

    record: str


class AlertingRule(_Rule):
    """An alert (``alert``) that fires after ``expr`` returns for ``for_``."""

    alert: str
    for_: str = Field(default="0m", description="Pending time before firing (``for``).")
    annotations: dict[str, str] = Field(default_factory=dict)


class RuleGroup(BaseModel):
    """A Prometheus rule group: rules evaluated in order, so alerts see this evaluation's recorded series."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    interval: str | None = None
    rules: tuple[RecordingRule | AlertingRule, ...]

    def render(self) -> dict[str, Any]:
        """The group as Prometheus and the PrometheusRule CRD spell it."""
        rules: list[dict[str, Any]] = []
        for rule in self.rules:
            if isinstance(rule, RecordingRule):
                item: dict[str, Any] = {"record": rule.record, "expr": rule.expr}
            else:
                item = {"alert": rule.alert, "expr": rule.expr, "for": rule.for_}
                if rule.annotations:
                    item["annotations"] = dict(rule.annotations)
            if rule.labels:
                item["labels"] = dict(rule.labels)
            rules.append(item)
        group: dict[str, Any] = {"name": self.name, "rules": rules}
        if self.interval is not None:
            group["interval"] = self.interval
        return group


def rule_file(groups: Sequence[RuleGroup]) -> str:
    """A Prometheus rule file (YAML) for ``promtool``."""
    return yaml.safe_dump({"groups": [g.render() for g in groups]}, sort_keys=False)


def _duration(seconds: float) -> str:
    return f"{math.ceil(seconds / 60)}m"


@dataclass(frozen=True)
class ModelAlertInputs:
    """What the rules of one model need beyond its series."""

    series: ModelSeries
    slo: SloSpec
    target_waiting_per_replica: int
    """The autoscaler's target (``AutoscalingPolicy.target_waiting_per_replica``)."""
    max_replicas: int
    cold_start_seconds: float
    """From sizing: how long a new replica takes to become available."""


def record_name(metric: str, operation: str) -> str:
    """``inferplane:<metric>:<operation>``, the recording-rule naming convention (level:metric:operations)."""
    return f"{RECORD_PREFIX}:{metric}:{operation}"


def _q(quantile: float) -> str:
    return f"p{round(quantile * 100)}"


def model_rule_group(inputs: ModelAlertInputs) -> RuleGroup:
    """Recording rules and alerts for one served model.

    Rules are evaluated in order, so the recording rules come first and the alerts read this evaluation's series.
    """
    s = inputs.series
    rules: list[RecordingRule | AlertingRule] = [
        *_recording_rules(s),
        *_latency_alerts(inputs),
        *_saturation_alerts(s),
        *_capacity_alerts(inputs),
    ]
    return RuleGroup(name=f"inferplane:{s.namespace}:{s.name}", rules=tuple(rules))


def _model_selector(s: ModelSeries) -> str:
    """Matchers selecting one model's recorded series (the labels :func:`_recording_rules` puts on them)."""
    return f'model="{s.name}",namespace="{s.namespace}"'


def _alert_labels(s: ModelSeries) -> dict[str, str]:
    """Labels of a model's alerts: warning unless raised, and which model it is about."""
    return {"severity": "warning", "model": s.name, "namespace": s.namespace}


def _recording_rules(s: ModelSeries) -> list[RecordingRule]:
    """Latency percentiles (ITL for vLLM only), token rates, queue depth and KV-cache usage, labelled per model."""
    labels = {"model": s.name, "namespace": s.namespace}
    rules: list[RecordingRule] = []
    for quantile in QUANTILES:
        rules.append(
            RecordingRule(
                record=record_name("ttft_seconds", _q(quantile)), expr=s.ttft_quantile(quantile), labels=labels
            )
        )
        itl = s.itl_quantile(quantile)
        if itl is not None:
            rules.append(RecordingRule(record=record_name("itl_seconds", _q(quantile)), expr=itl, labels=labels))
    rules += [
        RecordingRule(
            record=record_name("generation_tokens", "rate5m"), expr=s.generation_tokens_rate(), labels=labels
        ),
        RecordingRule(record=record_name("prompt_tokens", "rate5m"), expr=s.prompt_tokens_rate(), labels=labels),
        RecordingRule(record=record_name("queue_depth", "sum"), expr=s.queue_depth(), labels=labels),
        RecordingRule(record=record_name("kv_cache_usage", "max"), expr=s.kv_cache_usage(), labels=labels),
    ]
    return rules


def _latency_alerts(inputs: ModelAlertInputs) -> list[AlertingRule]:
    """TTFT p95 above its objective, and ITL p95 above its objective where the engine reports ITL (vLLM, SGLang)."""
    s, slo = inputs.series, inputs.slo
    alerts = [
        _p95_above_objective(
            s,
            "InferplaneTtftP95AboveSlo",
            quantity="ttft_seconds",
            summary=f"time to first token p95 above its {slo.ttft_p95_ms} ms objective",
            objective_ms=slo.ttft_p95_ms,
            description="TTFT p95 over 5m has been above the objective for 10m. Requests queue or prefill is "
            "starved: check queue depth, replicas and KV-cache usage.",
        )
    ]
    if s.itl_quantile(0.95) is not None:
        alerts.append(
            _p95_above_objective(
                s,
                "InferplaneItlP95AboveSlo",
                quantity="itl_seconds",
                summary=f"inter-token latency p95 above its {slo.itl_p95_ms} ms objective",
                objective_ms=slo.itl_p95_ms,
                description="ITL p95 over 5m has been above the objective for 10m: the batch is too large for the "
                "hardware or long prefills stall decodes.",
            )
        )
    return alerts


def _p95_above_objective(
    s: ModelSeries, alert: str, *, quantity: str, summary: str, objective_ms: int, description: str
) -> AlertingRule:
    """A latency alert: the recorded p95 of ``quantity`` (seconds) above its objective for :data:`SLO_ALERT_FOR`."""
    return AlertingRule(
        alert=alert,
        expr=f"{record_name(quantity, 'p95')}{{{_model_selector(s)}}} > {objective_ms / 1000:g}",
        for_=SLO_ALERT_FOR,
        labels=_alert_labels(s),
        annotations={"summary": f"{s.name}: {summary}", "description": description},
    )


def _saturation_alerts(s: ModelSeries) -> list[AlertingRule]:
    """The KV cache nearly full for a while, and any preemption where the engine reports them (vLLM; SGLang's
    retractions)."""
    alerts = [
        AlertingRule(
            alert="InferplaneKvCacheNearlyFull",
            expr=f"{record_name('kv_cache_usage', 'max')}{{{_model_selector(s)}}} > {KV_CACHE_ALERT_RATIO:g}",
            for_=KV_CACHE_ALERT_FOR,
            labels=_alert_labels(s),
            annotations={
                "summary": f"{s.name}: KV cache above {KV_CACHE_ALERT_RATIO:.0%} on a replica",
                "description": "New sequences will preempt running ones; lower concurrency, use an fp8 KV cache or "
                "add replicas.",
            },
        )
    ]
    preemptions = s.preemptions_rate()
    if preemptions is not None:
        alerts.append(
            AlertingRule(
                alert="InferplanePreemptions",
                expr=f"{preemptions} > 0",
                labels=_alert_labels(s),
                annotations={
                    "summary": f"{s.name}: the engine is preempting sequences",
                    "description": "The KV cache ran out and running sequences are being recomputed, which "
                    "multiplies their latency.",
                },
            )
        )
    return alerts


def _capacity_alerts(inputs: ModelAlertInputs) -> list[AlertingRule]:
    """Critical: requests queue while KEDA's HPA sits at its ceiling, or no replica is available though some are
    wanted."""
    s = inputs.series
    critical = {**_alert_labels(s), "severity": "critical"}
    ceiling = inputs.target_waiting_per_replica * inputs.max_replicas
    hpa = s.hpa_selector()
    return [
        AlertingRule(
            alert="InferplaneQueueAtMaxReplicas",
            expr=(
                f"{record_name('queue_depth', 'sum')}{{{_model_selector(s)}}} > {ceiling}"
                f" and on() ({KSM_HPA_CURRENT}{{{hpa}}}"
                f" >= on(namespace, horizontalpodautoscaler) {KSM_HPA_MAX}{{{hpa}}})"
            ),
            for_=SLO_ALERT_FOR,
            labels=critical,
            annotations={
                "summary": f"{s.name}: requests queue at the replica ceiling ({inputs.max_replicas})",
                "description": "More requests wait than the autoscaler's target at max_replicas, and it sits "
                "there: raise max_replicas (and the pool's limits) or shed load.",
            },
        ),
        AlertingRule(
            alert="InferplaneNoReadyReplicas",
            expr=f"{s.available_replicas()} == 0 and on() {s.desired_replicas()} > 0",
            # A replica may legitimately take its cold start to become ready; page only after that plus 5 minutes.
            for_=_duration(inputs.cold_start_seconds + 300),
            labels=critical,
            annotations={
                "summary": f"{s.name}: no replica is available",
                "description": "Replicas are wanted but none has been available for longer than the cold start: "
                "check pod events (image pull, GPU scheduling, startup probe).",
            },
        ),
    ]


def gpu_rule_group() -> RuleGroup:
    """Alerts on every GPU dcgm-exporter reports, whoever uses it."""
    context = {"severity": "critical"}
    return RuleGroup(
        name="inferplane:gpus",
        rules=(
            AlertingRule(
                alert="InferplaneGpuXidError",
                expr=f"{DCGM_XID_ERRORS} > 0",
                labels=context,
                annotations={
                    "summary": "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}",
                    "description": "The driver reported an XID error (NVIDIA XID catalogue): 48/63/64/74/79/94/95 "
                    "mean the GPU needs a reset or the node a drain.",
                },
            ),
            AlertingRule(
                alert="InferplaneGpuTemperatureHigh",
                expr=f"{DCGM_GPU_TEMP} > {GPU_TEMPERATURE_ALERT_CELSIUS}",
                for_="10m",
                labels={"severity": "warning"},
                annotations={
                    "summary": "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} at {{ $value }} C",
                    "description": f"Above {GPU_TEMPERATURE_ALERT_CELSIUS} C for 10 minutes; clocks slow down "
                    "soon after. Check the node's cooling and power.",
                },
            ),
        ),
    )


@dataclass(frozen=True)
class ServingRulesArgs:
    """Inputs of :class:`ServingRules`."""

    namespace: pulumi.Input[str]
    """Where the PrometheusRules live (the monitoring namespace; Prometheus selects rules in every namespace)."""
    models: Sequence[tuple[str, pulumi.Input[ModelAlertInputs]]]
    """(logical name, inputs) per model; the inputs may wait on the Deployment's name."""
    labels: Mapping[str, str]
    """Labels Prometheus's rule selector matches (``components.serving.annotations.SCRAPE_LABELS``)."""


class ServingRules(pulumi.ComponentResource):
    """PrometheusRules: one per served model, and one for the GPUs."""

    rules: list[k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: ServingRulesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:ServingRules", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.rules = [
            k8s.apiextensions.CustomResource(
                f"{name}-gpus",
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{name}-gpus", namespace=args.namespace, labels=args.labels),
                spec={"groups": [gpu_rule_group().render()]},
                opts=child,
            )
        ]
        for model_name, inputs in args.models:
            self.rules.append(
                k8s.apiextensions.CustomResource(
                    f"{name}-{model_name}",
                    api_version="monitoring.coreos.com/v1",
                    kind="PrometheusRule",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=f"{name}-{model_name}", namespace=args.namespace, labels=args.labels
                    ),
                    spec=pulumi.Output.from_input(inputs).apply(lambda i: {"groups": [model_rule_group(i).render()]}),
                    opts=child,
                )
            )
        self.register_outputs({})
