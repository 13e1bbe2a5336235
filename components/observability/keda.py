"""KEDA, and autoscaling a model server on its queue depth.

GPU utilisation sits near 100% whenever a batch runs and engines take ~90% of device memory at start, so CPU, GPU
and memory say nothing about demand. The queue does: requests waiting for a batch slot. Each model server gets a
KEDA ScaledObject with a Prometheus trigger on its waiting requests (:meth:`ModelSeries.queue_depth`), never a
CPU or memory trigger.

A disaggregated model's decode role scales on two more: its running sequences and its KV-cache use. Its requests
arrive with their prompt already computed, so its capacity is batch slots and KV blocks, and long contexts fill the
KV pool well before the batch: by the time requests queue there, the engine is already preempting. Dynamo's planner
splits the roles' signals the same way (its load-based mode: prefill on its queue, decode on average KV-cache
utilisation; docs.nvidia.com/dynamo/latest/components/planner/planner-guide). The prefill role, like an aggregated
replica, scales on its queue: prompts waiting to be computed.

The numbers come from the sizing, not from guesses:

* target waiting requests per replica = ``QUEUE_TARGET_FRACTION`` x the batch size the engine runs
  (``SizingResult.vllm.max_num_seqs`` or ``SizingResult.trtllm.max_batch_size``), at least 1;
* scale down only after a stabilisation window of twice the cold start (``SizingResult.cold_start_seconds``), at
  least five minutes: a replica given back costs a full cold start to get again;
* scale up at once (no stabilisation), doubling or adding four replicas per 15 s, whichever is more;
* a decode role also aims at ``RUNNING_TARGET_FRACTION`` of its batch running per replica and at an average KV-cache
  use of ``KV_USAGE_TARGET`` (the HPA takes the largest replica count any trigger asks for).

KEDA reference: keda-docs ``content/docs/2.22/reference/scaledobject-spec.md`` and ``scalers/prometheus.md``
(facts.md 7.1); the spec is validated against the ScaledObject CRD in ``../shared/schemas/crds``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity.sizing import ServingRole, SizingResult
from inferplane.components.observability.metrics import Engine, ModelSeries

KEDA_CHART = "keda"
KEDA_CHART_VERSION = "2.20.2"
"""kedacore/charts ``keda/Chart.yaml`` @2026-08-13 (1444d00): chart 2.20.2, app 2.20.2."""
KEDA_REPOSITORY = "https://kedacore.github.io/charts"

QUEUE_TARGET_FRACTION = 0.25
"""Waiting requests per replica the autoscaler aims for, as a share of the batch. A queue of a quarter of the batch
is admitted as a quarter of the running sequences finish, so time to first token stays bounded, while a few waiting
requests (bursts shorter than a poll) do not buy a GPU node."""

RUNNING_TARGET_FRACTION = 0.8
"""Running sequences per decode replica the autoscaler aims for, as a share of the batch: the rest is room for the
requests that arrive while a new replica starts (minutes), at the utilisation HPA users aim CPU at."""

KV_USAGE_TARGET = 0.8
"""Average KV-cache use (``vllm:kv_cache_usage_perc``: blocks held by requests, not cached free ones) a decode role
aims for; below ``alerts.KV_CACHE_ALERT_RATIO`` (0.95, where new sequences start preempting running ones) by the
blocks one more replica's worth of streams take while it starts."""

MIN_SCALE_DOWN_WINDOW_SECONDS = 300
"""Never give a replica back sooner than the HPA default (5 minutes), even for fast-starting models."""
MAX_STABILIZATION_WINDOW_SECONDS = 3600
"""Kubernetes caps ``stabilizationWindowSeconds`` at one hour (autoscaling/v2 validation)."""
SCALE_UP_PERIOD_SECONDS = 15
FALLBACK_FAILURE_THRESHOLD = 3
"""Consecutive failed Prometheus reads before KEDA applies the fallback replica count."""


class AutoscalingPolicy(BaseModel):
    """What the ScaledObject says, derived from the spec and the sizing (see :func:`autoscaling_policy`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_replicas: int = Field(ge=0, description="``minReplicaCount``; 0 lets KEDA itself scale to zero.")
    max_replicas: int = Field(ge=1, description="``maxReplicaCount``.")
    idle_replicas: int | None = Field(
        description="``idleReplicaCount``: 0 when scale-to-zero is allowed above a non-zero minimum, else unset."
    )
    target_waiting_per_replica: int = Field(ge=1, description="Trigger ``threshold`` (AverageValue).")
    activation_waiting: int = Field(ge=0, description="Trigger ``activationThreshold``: wake from zero above this.")
    polling_interval_seconds: int = Field(ge=1, description="``pollingInterval``: at the scrape interval.")
    scale_down_window_seconds: int = Field(description="HPA scale-down stabilisation, longer than the cold start.")
    cooldown_seconds: int = Field(description="``cooldownPeriod``: idle time before going to zero.")
    fallback_replicas: int = Field(ge=1, description="Replicas held when Prometheus cannot be read.")
    target_running_per_replica: int | None = Field(
        default=None, ge=1, description="Decode role: running sequences per replica the ``running`` trigger aims for."
    )
    target_kv_usage: float | None = Field(
        default=None, gt=0, lt=1, description="Decode role: average KV-cache use the ``kv-usage`` trigger aims for."
    )


def target_waiting_per_replica(batch: int) -> int:
    """The trigger threshold for an engine running ``batch`` sequences (``QUEUE_TARGET_FRACTION`` of it, >= 1)."""
    return max(1, math.floor(batch * QUEUE_TARGET_FRACTION))


def target_running_per_replica(batch: int) -> int:
    """The decode role's ``running`` threshold for a batch of ``batch`` (``RUNNING_TARGET_FRACTION`` of it, >= 1)."""
    return max(1, math.floor(batch * RUNNING_TARGET_FRACTION))


def autoscaling_policy(
    sizing: SizingResult,
    *,
    engine: Engine,
    min_replicas: int,
    max_replicas: int,
    scale_to_zero: bool,
    scrape_interval_seconds: int,
    role: ServingRole = "aggregated",
) -> AutoscalingPolicy:
    """The autoscaling policy for one model deployment.

    Raises ``ValueError`` when the cold start is so long that no HPA stabilisation window (capped at an hour) can
    exceed it: such a model must not be autoscaled down at all.
    """
    cold_start = math.ceil(sizing.cold_start_seconds)
    window = max(MIN_SCALE_DOWN_WINDOW_SECONDS, 2 * cold_start)
    if window > MAX_STABILIZATION_WINDOW_SECONDS:
        if cold_start >= MAX_STABILIZATION_WINDOW_SECONDS:
            raise ValueError(
                f"a cold start of {cold_start}s is longer than the longest HPA stabilisation window "
                f"({MAX_STABILIZATION_WINDOW_SECONDS}s); set min_replicas equal to max_replicas"
            )
        window = MAX_STABILIZATION_WINDOW_SECONDS
    # The batch the engine runs: vLLM --max-num-seqs, TensorRT-LLM's max_batch_size, SGLang --max-running-requests.
    batch = {
        "vllm": sizing.vllm.max_num_seqs,
        "triton": sizing.trtllm.max_batch_size,
        "sglang": sizing.sglang.max_running_requests,
    }[engine]
    decode = role == "decode"
    return AutoscalingPolicy(
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        # KEDA: idleReplicaCount must be below minReplicaCount; with a minimum of 0 KEDA scales to zero by itself.
        idle_replicas=0 if scale_to_zero and min_replicas > 0 else None,
        target_waiting_per_replica=target_waiting_per_replica(batch),
        activation_waiting=0,
        polling_interval_seconds=scrape_interval_seconds,
        scale_down_window_seconds=window,
        cooldown_seconds=window,
        # Never below the spec's floor, never zero; KEDA keeps the current count when it is higher.
        fallback_replicas=max(1, min_replicas),
        target_running_per_replica=target_running_per_replica(batch) if decode else None,
        target_kv_usage=KV_USAGE_TARGET if decode else None,
    )


def scaled_object_spec(
    policy: AutoscalingPolicy,
    series: ModelSeries,
    *,
    prometheus_url: str,
    wake_query: str | None = None,
) -> dict[str, Any]:
    """The ScaledObject ``spec`` (keda.sh/v1alpha1) for ``series``'s Deployment."""
    waiting = str(policy.target_waiting_per_replica)
    triggers = [_prometheus_trigger("queue-depth", series.queue_depth(), waiting, policy, prometheus_url)]
    if policy.target_running_per_replica is not None:
        running = str(policy.target_running_per_replica)
        triggers.append(_prometheus_trigger("running", series.running(), running, policy, prometheus_url))
    if policy.target_kv_usage is not None:
        usage = f"{policy.target_kv_usage:g}"
        triggers.append(_prometheus_trigger("kv-usage", series.kv_cache_usage_total(), usage, policy, prometheus_url))
    if wake_query is not None:
        triggers.append(_prometheus_trigger("wake", wake_query, waiting, policy, prometheus_url))
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": series.deployment},
        "pollingInterval": policy.polling_interval_seconds,
        "cooldownPeriod": policy.cooldown_seconds,
        "minReplicaCount": policy.min_replicas,
        "maxReplicaCount": policy.max_replicas,
        "fallback": {
            "failureThreshold": FALLBACK_FAILURE_THRESHOLD,
            "replicas": policy.fallback_replicas,
            "behavior": "currentReplicasIfHigher",
        },
        "advanced": {
            "restoreToOriginalReplicaCount": False,
            "horizontalPodAutoscalerConfig": {"behavior": _scaling_behavior(policy)},
        },
        "triggers": triggers,
    }
    if policy.idle_replicas is not None:
        spec["idleReplicaCount"] = policy.idle_replicas
    return spec


def _prometheus_trigger(
    name: str, query: str, threshold: str, policy: AutoscalingPolicy, prometheus_url: str
) -> dict[str, Any]:
    """A Prometheus trigger on ``query`` (a sum over the replicas) aiming at ``threshold`` per replica."""
    return {
        "type": "prometheus",
        "name": name,
        # AverageValue: desired = ceil(sum over replicas / target per replica); fallback requires it.
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": prometheus_url,
            "query": query,
            "threshold": threshold,
            "activationThreshold": str(policy.activation_waiting),
            # An empty result (no replica exposes the metric) reads as 0 rather than an error.
            "ignoreNullValues": "true",
        },
    }


def _scaling_behavior(policy: AutoscalingPolicy) -> dict[str, Any]:
    """The HPA's ``behavior``: scale up at once and fast, scale down one replica at a time after the window."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            # Doubling or four more per period, whichever is more.
            "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": SCALE_UP_PERIOD_SECONDS},
                {"type": "Pods", "value": 4, "periodSeconds": SCALE_UP_PERIOD_SECONDS},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": policy.scale_down_window_seconds,
            "selectPolicy": "Min",
            # One replica at a time: each one given back is a cold start to get again.
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
    }


@dataclass(frozen=True)
class KedaArgs:
    """Inputs of :class:`Keda`."""

    namespace: str = "keda"
    """Namespace of the operator (created by the release)."""


class Keda(pulumi.ComponentResource):
    """The KEDA operator and its CRDs, as the pinned ``kedacore/keda`` Helm release."""

    namespace: pulumi.Output[str]
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: KedaArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:Keda", name, None, opts)
        self.release = k8s.helm.v3.Release(
            f"{name}-chart",
            k8s.helm.v3.ReleaseArgs(
                name="keda",
                chart=KEDA_CHART,
                version=KEDA_CHART_VERSION,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KEDA_REPOSITORY),
                namespace=args.namespace,
                create_namespace=True,
                atomic=True,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.register_outputs({"namespace": self.namespace})


@dataclass(frozen=True)
class QueueDepthAutoscalerArgs:
    """Inputs of :class:`QueueDepthAutoscaler`."""

    served_model_name: str
    """The model's served name (vLLM ``--served-model-name``); selects its series."""
    engine: Engine
    """``vllm``, ``triton`` or ``sglang``."""
    deployment_name: pulumi.Input[str]
    """The model server's Deployment (the scale target); the ScaledObject takes its name."""
    namespace: pulumi.Input[str]
    """The Deployment's namespace; the ScaledObject lives beside it."""
    sizing: SizingResult
    """The deployment's sizing: batch size and cold start."""
    min_replicas: int
    max_replicas: int
    scale_to_zero: bool
    prometheus_url: pulumi.Input[str]
    """Prometheus KEDA queries (``MonitoringStack.prometheus_url``)."""
    scrape_interval_seconds: int = 15
    role: ServingRole = "aggregated"
    """What the replicas do (``DeploymentSizing.role``): a decode role also scales on its running sequences and
    KV-cache use."""
    wake_query: str | None = None
    """PromQL that is above zero when requests wait for this model outside the engine (e.g. the gateway's pending
    requests). A deployment at zero replicas exposes no engine queue, so without it nothing wakes it from zero."""


class QueueDepthAutoscaler(pulumi.ComponentResource):
    """A KEDA ScaledObject scaling one model server's Deployment on its queue of waiting requests (a decode role's
    also on its running sequences and KV-cache use: :func:`scaled_object_spec`)."""

    scaled_object: k8s.apiextensions.CustomResource
    policy: AutoscalingPolicy

    def __init__(self, name: str, args: QueueDepthAutoscalerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        policy = _validated_policy(name, args)
        super().__init__("inferplane:index:QueueDepthAutoscaler", name, None, opts)
        self.policy = policy
        if args.scale_to_zero and args.wake_query is None:
            pulumi.log.warn(
                f"{name}: scales to zero, but only the engine's own queue is watched and it vanishes with the last "
                "replica; pass wake_query (the gateway's pending requests) so requests can wake it",
                resource=self,
            )

        def spec(values: list[Any]) -> dict[str, Any]:
            deployment, namespace, url = values
            series = ModelSeries(args.served_model_name, args.engine, namespace, deployment)
            return scaled_object_spec(policy, series, prometheus_url=url, wake_query=args.wake_query)

        self.scaled_object = k8s.apiextensions.CustomResource(
            f"{name}-scaledobject",
            api_version="keda.sh/v1alpha1",
            kind="ScaledObject",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                # Named after the Deployment, so KEDA's HPA is keda-hpa-<deployment> (what the alerts query).
                name=args.deployment_name,
                namespace=args.namespace,
                labels={"app.kubernetes.io/managed-by": "inferplane", "inferplane.io/model": args.served_model_name},
            ),
            spec=pulumi.Output.all(args.deployment_name, args.namespace, args.prometheus_url).apply(spec),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"scaledObjectName": args.deployment_name})


def _validated_policy(name: str, args: QueueDepthAutoscalerArgs) -> AutoscalingPolicy:
    """Check every input, raising all problems together before anything is registered."""
    errors: list[pulumi.InputPropertyErrorDetails] = []

    def error(path: str, reason: str) -> None:
        errors.append(pulumi.InputPropertyErrorDetails(property_path=path, reason=reason))

    if args.engine not in ("vllm", "triton", "sglang"):
        error("engine", f"unknown engine {args.engine!r} (vllm, triton or sglang)")
    if args.min_replicas < 0:
        error("min_replicas", f"{args.min_replicas} is negative")
    if args.max_replicas < max(1, args.min_replicas):
        error("max_replicas", f"{args.max_replicas} is below 1 or below min_replicas ({args.min_replicas})")
    if args.min_replicas == 0 and not args.scale_to_zero:
        error("min_replicas", "0 needs scale_to_zero")
    if not 5 <= args.scrape_interval_seconds <= 120:
        error("scrape_interval_seconds", f"{args.scrape_interval_seconds} is outside 5..120")
    policy: AutoscalingPolicy | None = None
    if not errors:
        try:
            policy = autoscaling_policy(
                args.sizing,
                engine=args.engine,
                min_replicas=args.min_replicas,
                max_replicas=args.max_replicas,
                scale_to_zero=args.scale_to_zero,
                scrape_interval_seconds=args.scrape_interval_seconds,
                role=args.role,
            )
        except ValueError as exc:
            error("sizing", str(exc))
    if errors or policy is None:
        details = "; ".join(f"{e['property_path']}: {e['reason']}" for e in errors)
        raise pulumi.InputPropertiesError(f"QueueDepthAutoscaler {name}: {details}", errors=errors)
    return policy
