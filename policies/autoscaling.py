"""KEDA ScaledObjects: model servers scale on queue depth, within bounds, and never past the GPU limit."""

from __future__ import annotations

from typing import Any

from inferplane.components.observability.metrics import (
    SGLANG_QUEUE_REQUESTS,
    TRITON_PENDING_REQUESTS,
    TRTLLM_REQUESTS,
    VLLM_REQUESTS_WAITING,
)
from inferplane.components.serving.annotations import COMPONENT_LABEL, GATEWAY, SERVED_MODEL_LABEL
from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    StackReport,
    _Unknown,
    as_dict,
    as_list,
    dig,
    known,
    of_type,
    resource_policy,
    stack_policy,
)
from inferplane.policies.resource_types import T
from inferplane.policies.workloads import as_int, object_label, pod_accelerators, workload_name

KEDA_MIN_REPLICAS_DEFAULT = 0
KEDA_MAX_REPLICAS_DEFAULT = 100
"""ScaledObject defaults (kedacore/keda-docs 2.22 reference/scaledobject-spec.md)."""

QUEUE_METRICS = [VLLM_REQUESTS_WAITING, TRITON_PENDING_REQUESTS, TRTLLM_REQUESTS, SGLANG_QUEUE_REQUESTS]
"""Queue-depth metrics of the pinned engines (:mod:`components.observability.metrics`, each with its source): vLLM's
waiting requests, Triton's pending requests, TensorRT-LLM's ``request_type="waiting"`` series and SGLang's waiting
queue."""


def targets(scaled_object: Resource, workload: Resource) -> bool | None:
    """Whether a ScaledObject scales a workload (by depending on it, by name, or by the deployment label); None
    when unknown values leave it open."""
    if workload.urn in scaled_object.dependencies:
        return True
    ref = scaled_object.get("spec", "scaleTargetRef")
    kind = dig(ref, "kind") or "Deployment"
    if kind is not UNKNOWN and kind != workload.type.rsplit(":", maxsplit=1)[-1]:
        return False
    name, theirs_name = dig(ref, "name"), workload.get("metadata", "name")
    if isinstance(name, str) and name == theirs_name:
        return True
    mine = object_label(workload, SERVED_MODEL_LABEL)  # UNKNOWN while a labels map that may hold it is unknown
    theirs = dig(scaled_object.get("metadata", "labels"), SERVED_MODEL_LABEL)
    if isinstance(mine, str) and mine == theirs:
        return True
    undecided = (kind, name, theirs_name, theirs, mine)
    return None if any(v is UNKNOWN for v in undecided) else False


def scaled_object_for(workload: Resource, resources: list[Resource]) -> Resource | _Unknown | None:
    """The ScaledObject that scales ``workload``: None if there is none, UNKNOWN if unknown values hide it."""
    verdicts = [(so, targets(so, workload)) for so in of_type(resources, T.SCALED_OBJECT)]
    match = next((so for so, verdict in verdicts if verdict), None)
    if match is None and any(verdict is None for _, verdict in verdicts):
        return UNKNOWN
    return match


def replica_bounds(scaled_object: Resource) -> tuple[Any, Any]:
    """(minReplicaCount, maxReplicaCount) with KEDA's defaults; either may be UNKNOWN."""
    low = scaled_object.get("spec", "minReplicaCount")
    high = scaled_object.get("spec", "maxReplicaCount")
    return (KEDA_MIN_REPLICAS_DEFAULT if low is None else low, KEDA_MAX_REPLICAS_DEFAULT if high is None else high)


@resource_policy(
    name="keda-scaledobject-require-queue-trigger",
    description=(
        "Model servers scale on queue depth (a prometheus trigger on the engine's waiting requests), never on CPU or "
        "memory: a GPU-bound engine idles its CPU while requests pile up, and its memory is preallocated, so "
        "resource triggers never fire when they should."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.SCALED_OBJECT},
    config={
        "queueMetrics": {
            "type": "array",
            "items": {"type": "string"},
            "default": QUEUE_METRICS,
            "description": "Metric names a prometheus trigger's query must use (any one of them).",
        }
    },
    remediation="Use a prometheus trigger on the engine's waiting-requests metric.",
)
def queue_trigger(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: EKS Best Practices AI/ML (scale on inference metrics); KEDA prometheus scaler."""
    if dig(resource.get("metadata", "labels"), COMPONENT_LABEL) == GATEWAY:
        return  # the gateway scales on requests in flight through Envoy (policies.gateway), not an engine queue
    triggers = resource.get("spec", "triggers")
    if not known(triggers):
        return
    if not triggers:
        report("spec.triggers is empty")
        return
    on_queue = False
    for index, trigger in enumerate(as_list(triggers)):
        kind = as_dict(trigger).get("type")
        if kind in ("cpu", "memory"):
            report(f"spec.triggers[{index}] scales on {kind}")
        query = dig(trigger, "metadata", "query")
        if not known(query) or kind is UNKNOWN:
            return  # an unknown trigger may be the queue trigger
        if kind == "prometheus" and isinstance(query, str) and any(m in query for m in config["queueMetrics"]):
            on_queue = True
    # Other prometheus triggers may sit beside it (a wake-from-zero trigger on the gateway's pending requests).
    if not on_queue:
        report(f"no prometheus trigger queries a queue metric ({', '.join(config['queueMetrics'])})")


@resource_policy(
    name="keda-scaledobject-configure-bounds",
    description=(
        "Autoscaling bounds must be explicit and sane: min <= max <= the environment's ceiling, an idle count below "
        "the minimum, a cooldown, and no scale-to-zero where a cold start (minutes of weight loading) is unacceptable."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.SCALED_OBJECT},
    config={
        "maxReplicas": {"type": "integer", "minimum": 1, "default": 64, "description": "Ceiling on maxReplicaCount."},
        "allowScaleToZero": {
            "type": "boolean",
            "default": True,
            "description": "Whether minReplicaCount may be 0 (every first request then waits for a cold start).",
        },
    },
    remediation="Set minReplicaCount, maxReplicaCount and cooldownPeriod from the model's min/max replicas.",
)
def scaling_bounds(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: KEDA ScaledObject spec; Gatekeeper horizontalpodautoscaler; EKS Best Practices (cooldown)."""
    if resource.get("spec") is UNKNOWN:
        return
    spec = as_dict(resource.get("spec"))
    low, high = spec.get("minReplicaCount"), spec.get("maxReplicaCount")
    if not (known(low) and known(high)):
        return
    if low is None or high is None:
        report("minReplicaCount and maxReplicaCount must both be set (KEDA defaults are 0 and 100)")
        return
    if low > high:
        report(f"minReplicaCount {low} exceeds maxReplicaCount {high}")
    if high > config["maxReplicas"]:
        report(f"maxReplicaCount {high} exceeds this environment's ceiling of {config['maxReplicas']}")
    if low == 0 and not config["allowScaleToZero"]:
        report("minReplicaCount is 0: this environment does not scale model servers to zero")
    idle = spec.get("idleReplicaCount")
    if isinstance(idle, int) and idle >= max(low, 1):
        report(f"idleReplicaCount {idle} must be below minReplicaCount {low}")
    if spec.get("cooldownPeriod") is None:
        report("cooldownPeriod is not set")


@stack_policy(
    name="keda-scaledobject-limit-max-gpus",
    description=(
        "At max scale the autoscalers may not ask for more accelerators than the environment's limit: "
        "sum over model servers of maxReplicaCount x accelerators per replica."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    config={"maxGpus": {"type": "integer", "minimum": 1, "default": 8, "description": "Accelerator limit."}},
    remediation="Lower models[].max_replicas or raise limits.max_total_gpus (and this config) together.",
)
def scaled_gpus(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchors: Gatekeeper replicalimits; testing-components 'use policies as guardrails'."""
    total = 0
    parts: list[str] = []
    for workload in of_type(resources, T.DEPLOYMENT, T.STATEFUL_SET):
        per_replica = sum(pod_accelerators(workload).values())
        if not per_replica:
            continue
        scaled = scaled_object_for(workload, resources)
        if isinstance(scaled, Resource):
            high: Any = replica_bounds(scaled)[1]
        elif scaled is UNKNOWN:
            continue
        else:
            replicas = workload.get("spec", "replicas")
            high = 1 if replicas is None else replicas
        if high is UNKNOWN or as_int(high) is None:
            continue
        count = per_replica * int(high)
        total += count
        parts.append(f"{workload_name(workload)} {high} x {per_replica}")
    if total > config["maxGpus"]:
        report(
            f"{total} accelerators at max replicas ({', '.join(parts)}) exceed the limit of {config['maxGpus']}", None
        )


POLICIES: list[AnyPolicy] = [queue_trigger, scaling_bounds, scaled_gpus]
