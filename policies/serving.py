"""Model servers: does the model fit its accelerators, with engine settings that make sense, and can it start?

What a generic Deployment cannot say (which model, on which accelerator, how long it takes to start) comes from the
serving annotations of :mod:`components.serving.annotations`. What the engine will actually do comes from the
container's own arguments where they say it (vLLM's ``--tensor-parallel-size``, ``--max-model-len``, ``--max-num-seqs``,
``--gpu-memory-utilization``, ``--kv-cache-dtype``, ``--quantization``, ``--max-num-batched-tokens``): arguments win
over annotations, because they are what runs. The verdicts come from :mod:`components.capacity.sizing`, the same
arithmetic that chose the settings, so a plan and its policy can never disagree about what fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, get_args

from inferplane.components.capacity.host_memory import GIB, engine_host_bytes
from inferplane.components.capacity.sizing import (
    COMPUTE_EFFICIENCY,
    MAX_GPU_MEMORY_UTILIZATION,
    WARMUP_SECONDS,
    WEIGHTS_LOAD_BYTES_PER_SECOND,
    SizingRequest,
    SizingResult,
    size,
    weights_bytes,
)
from inferplane.components.catalog import (
    ACCELERATORS,
    INSTANCE_TYPES,
    MODELS,
    Accelerator,
    InstanceType,
    ModelArchitecture,
    instances_for,
)
from inferplane.components.serving.annotations import (
    COMPONENT_LABEL,
    ENGINE,
    GATEWAY,
    MODEL,
    MODEL_SERVER,
    AnnotationError,
    ServingAnnotations,
    parse_serving_annotations,
)
from inferplane.components.spec.platform_spec import Engine, KvCacheDtype, WeightsDtype
from inferplane.components.spec.scheduling import ACCELERATOR_LABEL, POOL_LABEL, TPU_RESOURCE
from inferplane.policies.autoscaling import replica_bounds, scaled_object_for
from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    StackReport,
    as_dict,
    as_list,
    known,
    of_type,
    resource_policy,
    stack_policy,
)
from inferplane.policies.cost import pool_instance_types
from inferplane.policies.resource_types import T
from inferplane.policies.workloads import (
    accelerators_requested,
    as_int,
    container_label,
    containers,
    containers_known,
    memory_volumes_bytes,
    object_annotations,
    object_labels,
    pod_accelerators,
    pod_spec,
    quantity_bytes,
    workload_name,
)

SERVER_TYPES = {T.DEPLOYMENT, T.STATEFUL_SET}

VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default ``--gpu-memory-utilization`` (vLLM engine arguments reference)."""


def is_model_server(resource: Resource) -> bool:
    """Labelled a model server, or carrying the model annotation."""
    return object_labels(resource).get(COMPONENT_LABEL) == MODEL_SERVER or MODEL in object_annotations(resource)


def container_flags(container: dict[str, Any]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` pairs from one container's command and args (bare flags: "").

    The model is ``--model``, or the first positional of ``vllm serve <model>``: the ``vllm/vllm-openai`` image's
    entrypoint is ``vllm serve``, so its container args start with the model.
    """
    command = [t for t in as_list(container.get("command")) if isinstance(t, str)]
    args = [t for t in as_list(container.get("args")) if isinstance(t, str)]
    tokens = command + args
    flags: dict[str, str] = {}
    for index, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        if "=" in token:
            key, value = token[2:].split("=", maxsplit=1)
        else:
            following = tokens[index + 1] if index + 1 < len(tokens) else ""
            key, value = token[2:], "" if following.startswith("--") else following
        flags[key] = value
    positional = tokens[tokens.index("serve") + 1 :] if "serve" in tokens else ([] if command else args)
    if positional and not positional[0].startswith("-"):
        flags.setdefault("model", positional[0])
    return flags


def engine_flags(resource: Resource) -> dict[str, str]:
    """:func:`container_flags` over the main containers, a later container's flag over an earlier one's."""
    flags: dict[str, str] = {}
    for _, container in containers(resource, init=False):
        flags.update(container_flags(container))
    return flags


def engine_flags_known(resource: Resource) -> bool:
    """Whether :func:`engine_flags` reads every token: it drops an unknown container or token, and the one dropped may
    be the flag (or the value) a verdict turns on."""
    return containers_known(resource, init=False) and all(
        known(c.get(k)) for _, c in containers(resource, init=False) for k in ("command", "args")
    )


ENGINES: tuple[Engine, ...] = get_args(Engine)
"""The engines the platform serves with (the spec's ``Engine``)."""


def engine_of(resource: Resource) -> str | None:
    """``vllm``, ``triton`` or ``sglang``: the engine annotation, else the engine's image; None when neither says."""
    engine = object_annotations(resource).get(ENGINE)
    if engine in ENGINES:
        return str(engine)
    for _, container in containers(resource, init=False):
        image = container.get("image")
        if isinstance(image, str):
            if "tritonserver" in image:
                return "triton"
            if "sglang" in image:
                return "sglang"
            if "vllm" in image:
                return "vllm"
    return None


def _float(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


@dataclass(frozen=True)
class ServingSettings:
    """What a model server runs, resolved from its arguments and annotations (None where neither says)."""

    model_id: str | None
    model: ModelArchitecture | None
    accelerator: Accelerator | None
    accelerators_per_node: int | None
    instance_type: str | None
    tensor_parallel_size: int | None
    requested: int
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    gpu_memory_utilization: float | None
    weights_dtype: WeightsDtype
    kv_cache_dtype: KvCacheDtype
    engine_start_seconds: float | None
    chunked_prefill: bool


def _model(ann: ServingAnnotations, flags: dict[str, str]) -> tuple[str | None, ModelArchitecture | None]:
    if ann.model is not None and ann.model in MODELS:
        return ann.model, MODELS[ann.model]
    repo = flags.get("model") or ann.model
    for model_id, arch in MODELS.items():
        # The engine may load from a local cache laid out by repository: /models/<org>/<name>.
        if repo is not None and (repo == arch.hf_repo or repo.endswith(f"/{arch.hf_repo}")):
            return model_id, arch
    return repo, None


def serving_settings(resource: Resource, pool_instance: InstanceType | None = None) -> ServingSettings:
    """Resolve a model server's settings; raises :class:`AnnotationError` when its annotations are malformed.

    ``pool_instance`` is the instance type of the pool the pods select (known to stack policies): where the pods
    actually land beats what the annotations declare.
    """
    ann = parse_serving_annotations(object_annotations(resource))
    flags = engine_flags(resource)
    model_id, model = _model(ann, flags)
    requested = pod_accelerators(resource)
    instance = pool_instance or INSTANCE_TYPES.get(ann.instance_type or "")
    accelerator_id: Any = ann.accelerator or as_dict(pod_spec(resource).get("nodeSelector")).get(ACCELERATOR_LABEL)
    if pool_instance is not None:
        accelerator_id = pool_instance.accelerator
    if accelerator_id is None and TPU_RESOURCE in requested:
        accelerator_id = "tpu-v5e"
    accelerator = ACCELERATORS.get(accelerator_id) if isinstance(accelerator_id, str) else None  # type: ignore[call-overload]
    per_node = instance.accelerators_per_node if instance is not None else None
    if per_node is None and accelerator is not None:
        # A TPU pod takes its whole host, so its chips are the host's; a GPU node is at most the largest catalog one.
        largest = max((i.accelerators_per_node for i in instances_for(accelerator.id)), default=None)
        per_node = requested.get(TPU_RESOURCE) if accelerator.vendor == "google" else largest

    quantization = flags.get("quantization")
    weights: WeightsDtype = ann.weights_dtype or (
        "fp8" if quantization == "fp8" else "int4" if quantization == "awq" else "bf16"
    )
    kv_flag = flags.get("kv-cache-dtype")
    kv: KvCacheDtype = ("fp8" if kv_flag.startswith("fp8") else "auto") if kv_flag else (ann.kv_cache_dtype or "auto")
    gmu = _float(flags.get("gpu-memory-utilization")) or ann.gpu_memory_utilization
    if gmu is None and "vllm" in (ann.engine or "vllm") and flags:
        gmu = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    return ServingSettings(
        model_id=model_id,
        model=model,
        accelerator=accelerator,
        accelerators_per_node=per_node,
        instance_type=instance.name if instance is not None else ann.instance_type,
        tensor_parallel_size=_int(flags.get("tensor-parallel-size")) or ann.tensor_parallel_size,
        requested=sum(requested.values()),
        max_model_len=_int(flags.get("max-model-len")) or ann.max_model_len,
        max_num_seqs=_int(flags.get("max-num-seqs")) or ann.max_num_seqs,
        max_num_batched_tokens=_int(flags.get("max-num-batched-tokens")) or ann.max_num_batched_tokens,
        gpu_memory_utilization=gmu,
        weights_dtype=weights,
        kv_cache_dtype=kv,
        engine_start_seconds=ann.engine_start_seconds,
        chunked_prefill=flags.get("enable-chunked-prefill", "true").lower() != "false"
        and "no-enable-chunked-prefill" not in flags,
    )


def _itl_for_batched_tokens(request: SizingRequest, tokens: int) -> int:
    """The ITL objective (ms) for which sizing picks ``tokens`` per step: sizing's budget, inverted.

    Sizing derives the per-step token budget (and with it the activation reserve) from the ITL objective. The
    deployed budget is in the engine's arguments, so the policy asks sizing the question that yields that budget.
    """
    acc = request.accelerator
    tp = request.tensor_parallel_size or 1
    peak = acc.fp8_dense_tflops if request.weights_dtype == "fp8" and acc.fp8_dense_tflops else acc.bf16_dense_tflops
    per_ms = tp * peak * 1e12 * COMPUTE_EFFICIENCY / (2 * request.model.decode_parameters) / 1000
    return max(1, math.ceil(tokens / per_ms))


def sizing_for(settings: ServingSettings) -> SizingResult | None:
    """Sizing's verdict on the deployed settings, or None when model, accelerator, context or sequences are unknown."""
    if (
        settings.model is None
        or settings.accelerator is None
        or settings.max_model_len is None
        or settings.max_num_seqs is None
    ):
        return None
    tp = settings.tensor_parallel_size or settings.requested or 1
    per_node = settings.accelerators_per_node or tp
    request = SizingRequest(
        model=settings.model,
        model_label=settings.model_id or settings.model.hf_repo,
        accelerator=settings.accelerator,
        accelerators_per_node=per_node,
        weights_dtype=settings.weights_dtype,
        kv_cache_dtype=settings.kv_cache_dtype,
        context=settings.max_model_len,
        concurrency=settings.max_num_seqs,
        gpu_memory_utilization=settings.gpu_memory_utilization or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
        tensor_parallel_size=tp,
        chunked_prefill=settings.chunked_prefill,
        whole_node=settings.accelerator.vendor == "google",
    )
    if settings.max_num_batched_tokens is not None and settings.chunked_prefill:
        request = replace(request, itl_slo_ms=_itl_for_batched_tokens(request, settings.max_num_batched_tokens))
    return size(request)


def _decidable(resource: Resource) -> bool:
    """Whether what the serving policies read is known: annotations, placement, and the engine's command, args and
    resources (an env value computed from another resource's output does not matter)."""
    spec = pod_spec(resource)
    if not (known(object_annotations(resource)) and known(spec.get("nodeSelector")) and known(spec.get("containers"))):
        return False
    return all(known(c.get(k)) for _, c in containers(resource, init=False) for k in ("command", "args", "resources"))


def _settings_or_report(resource: Resource, report: Report) -> ServingSettings | None:
    if not is_model_server(resource) or not _decidable(resource):
        return None
    try:
        return serving_settings(resource)
    except AnnotationError as exc:
        report(f"serving annotations do not parse: {exc}")
        return None


_TYPES = SERVER_TYPES


@stack_policy(
    name="inference-server-require-memory-fit",
    description=(
        "A model server's weights plus the KV cache for max-model-len x max-num-seqs, plus the runtime reserve, must "
        "fit the usable memory of its tensor-parallel accelerators (device memory x gpu-memory-utilization, never "
        "above 0.93): otherwise the engine refuses to start or OOMs under load, after the GPUs were paid for."
    ),
    severity=Severity.CRITICAL,
    enforcement=EnforcementLevel.MANDATORY,
    remediation="Follow the alternatives `inferplane size` prints: fp8 weights or KV cache, a larger GPU, more GPUs "
    "per replica, a shorter context or fewer sequences.",
)
def memory_fit(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Sizing's fit arithmetic (components.capacity.sizing) on the deployed settings, on the accelerator of the pool the
    pods select (a stack policy, so it can look the pool's node group up; the serving annotations otherwise)."""
    pools = pool_instance_types(resources)
    for server in of_type(resources, *SERVER_TYPES):
        if not is_model_server(server) or not _decidable(server):
            continue
        pool = as_dict(pod_spec(server).get("nodeSelector")).get(POOL_LABEL)
        try:
            settings = serving_settings(server, pools.get(pool) if isinstance(pool, str) else None)
        except AnnotationError:
            continue  # the resource policies report malformed annotations
        result = sizing_for(settings)
        if result is None or result.fits:
            continue
        report(
            f"{result.model} ({settings.weights_dtype}) on {result.tensor_parallel_size} x {result.accelerator} does "
            f"not fit: {result.reason}",
            server.urn,
        )


@resource_policy(
    name="inference-server-configure-gpu-memory-utilization",
    description=(
        "gpu-memory-utilization stays within the environment's band: below it the KV cache is needlessly small, "
        "above 0.93 the CUDA context, NCCL buffers and allocator have no room outside the engine's share."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={
        "min": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.8, "description": "Lowest share."},
        "max": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "default": MAX_GPU_MEMORY_UTILIZATION,
            "description": "Highest share (sizing never exceeds 0.93).",
        },
    },
    remediation="Set models[].gpu_memory_utilization within the band.",
)
def gpu_memory_utilization(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: components.capacity.sizing.MAX_GPU_MEMORY_UTILIZATION; vLLM engine arguments."""
    settings = _settings_or_report(resource, report)
    if settings is None or settings.gpu_memory_utilization is None:
        return
    value = settings.gpu_memory_utilization
    if not config["min"] <= value <= config["max"]:
        report(f"gpu-memory-utilization {value} is outside {config['min']}-{config['max']}")


@resource_policy(
    name="inference-server-require-host-kv-fit",
    description=(
        "vLLM's host KV tier (--kv-offloading-size, GiB of pinned host memory) fits the server container's memory "
        "limit after the pod's memory-backed volumes (/dev/shm) and the engine's own processes: a larger tier is an "
        "OOM kill that comes only once the tier fills, under load."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    remediation="Leave --kv-offloading-size to sizing (models[].host_kv_cache sizes it from the node's memory).",
)
def host_kv_fit(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: components.capacity.host_memory (the tier is the replica's memory share less /dev/shm and
    :func:`~inferplane.components.capacity.host_memory.engine_host_bytes`)."""
    if not is_model_server(resource) or not _decidable(resource):
        return
    shm = memory_volumes_bytes(resource)
    for path, container in containers(resource, init=False):
        flags = container_flags(container)
        size = _float(flags.get("kv-offloading-size"))
        if size is None:
            continue
        limit = quantity_bytes(as_dict(as_dict(container.get("resources")).get("limits")).get("memory"))
        tp = _int(flags.get("tensor-parallel-size")) or 1
        if limit is None or shm is None:
            report(f"{container_label(path, container)}: --kv-offloading-size {size:g} with no bounded memory limit")
            continue
        needed = size * GIB + shm + engine_host_bytes(tp)
        if needed > limit:
            report(
                f"{container_label(path, container)}: --kv-offloading-size {size:g} GiB plus {shm / GIB:g} GiB of "
                f"memory-backed volumes and {engine_host_bytes(tp) / GIB:g} GiB for the engine's {tp}-rank processes "
                f"need {needed / GIB:,.1f} GiB, more than the memory limit of {limit / GIB:,.1f} GiB"
            )


@resource_policy(
    name="inference-server-configure-tensor-parallel",
    description=(
        "Tensor parallelism stays within one node, is a power of two dividing the node's accelerators and the "
        "model's attention heads, and equals the accelerators the pod requests: anything else fails at engine start "
        "or leaves paid GPUs idle."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    remediation="Leave models[].gpus_per_replica unset (sizing picks a valid size) or choose one that divides both.",
)
def tensor_parallel(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: components.capacity.sizing tensor-parallel rules (vLLM: heads must divide; TP within NVLink domain)."""
    settings = _settings_or_report(resource, report)
    if settings is None or settings.tensor_parallel_size is None:
        return
    tp = settings.tensor_parallel_size
    if settings.requested and tp != settings.requested:
        report(f"tensor parallel {tp} differs from the {settings.requested} accelerators the pod requests")
    if tp & (tp - 1):
        report(f"tensor parallel {tp} is not a power of two")
    if settings.accelerators_per_node is not None and settings.instance_type is not None:
        if tp > settings.accelerators_per_node:
            report(
                f"tensor parallel {tp} exceeds the {settings.accelerators_per_node} accelerators of a "
                f"{settings.instance_type} node"
            )
        elif settings.accelerators_per_node % tp:
            report(
                f"tensor parallel {tp} does not divide the {settings.accelerators_per_node} accelerators of a "
                f"{settings.instance_type} node"
            )
    if settings.model is not None and settings.model.attention_heads % tp:
        report(
            f"tensor parallel {tp} does not divide {settings.model_id}'s {settings.model.attention_heads} "
            "attention heads"
        )


@resource_policy(
    name="inference-server-limit-max-model-len",
    description=(
        "max-model-len stays within what the checkpoint supports and the environment's cap: beyond the trained "
        "context quality collapses, and long contexts multiply the KV cache each sequence reserves."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={"maxContext": {"type": "integer", "minimum": 1, "default": 131072, "description": "Context cap, tokens."}},
    remediation="Lower models[].max_context.",
)
def max_model_len(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: the model's config.json max_position_embeddings (components.catalog.models)."""
    settings = _settings_or_report(resource, report)
    if settings is None or settings.max_model_len is None:
        return
    length = settings.max_model_len
    if settings.model is not None and length > settings.model.max_context:
        report(f"max-model-len {length} exceeds the {settings.model.max_context} tokens {settings.model_id} supports")
    if length > config["maxContext"]:
        report(f"max-model-len {length} exceeds this environment's cap of {config['maxContext']} tokens")


def engine_start_seconds(settings: ServingSettings) -> float | None:
    """The annotation, else sizing's estimate (weights into device memory plus warm-up)."""
    if settings.engine_start_seconds is not None:
        return settings.engine_start_seconds
    if settings.model is None or settings.accelerator is None:
        return None
    weights = weights_bytes(settings.model, settings.weights_dtype)
    return round(weights / WEIGHTS_LOAD_BYTES_PER_SECOND + WARMUP_SECONDS[settings.accelerator.vendor], 1)


def probe_budget(probe: dict[str, Any]) -> int | None:
    """Seconds a startup probe waits before giving up: delay + failureThreshold x periodSeconds (k8s defaults 3, 10)."""
    values = [probe.get("initialDelaySeconds", 0), probe.get("failureThreshold", 3), probe.get("periodSeconds", 10)]
    if not all(isinstance(v, int) for v in values):
        return None
    delay, failures, period = (int(v) for v in values)
    return delay + failures * period


@resource_policy(
    name="inference-server-require-startup-probe",
    description=(
        "Model servers need readiness and liveness probes and a startup probe that outlasts the engine's start "
        "(loading weights into device memory, then warm-up): a shorter one has the kubelet kill the engine mid-load, "
        "forever."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={
        "margin": {
            "type": "number",
            "minimum": 1,
            "default": 1.0,
            "description": "Factor the startup budget must exceed the engine start by.",
        }
    },
    remediation="Derive startupProbe.failureThreshold from the sizing's engine_start_seconds.",
)
def startup_probe(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_K8S_8/9; Kyverno require-pod-probes; vLLM chart startup probe; components.capacity.sizing cold
    start."""
    settings = _settings_or_report(resource, report)
    if settings is None:
        return
    serving = list(containers(resource, init=False))
    if not serving:
        return
    # The engine is the container holding the accelerators; sidecars (log shippers, proxies) start in seconds.
    path, container = next(((p, c) for p, c in serving if accelerators_requested(c)), serving[0])
    label = container_label(path, container)
    for kind in ("readinessProbe", "livenessProbe"):
        if container.get(kind) is None:
            report(f"{label} has no {kind}")
    probe = container.get("startupProbe")
    if probe is UNKNOWN:
        return
    if probe is None:
        report(f"{label} has no startupProbe: the liveness probe would kill the engine while it loads")
        return
    needed = engine_start_seconds(settings)
    budget = probe_budget(as_dict(probe))
    if needed is None or budget is None:
        return
    if budget < needed * config["margin"]:
        report(f"{label} startupProbe allows {budget}s but the engine needs {needed:g}s to start")


# --- stack-wide -----------------------------------------------------------------------------------------------


def _role(resource: Resource) -> str | None:
    if is_model_server(resource):
        return MODEL_SERVER
    role = object_labels(resource).get(COMPONENT_LABEL)
    return role if isinstance(role, str) else None


def minimum_replicas(workload: Resource, resources: list[Resource]) -> Any:
    """Replicas the workload never goes below: its ScaledObject's minimum, else spec.replicas (default 1)."""
    scaled = scaled_object_for(workload, resources)
    if isinstance(scaled, Resource):
        return replica_bounds(scaled)[0]
    if scaled is UNKNOWN:
        return UNKNOWN
    replicas = workload.get("spec", "replicas")
    return 1 if replicas is None else replicas


def maximum_replicas(workload: Resource, resources: list[Resource]) -> Any:
    """Replicas the workload may reach: its ScaledObject's maximum, else spec.replicas (default 1)."""
    scaled = scaled_object_for(workload, resources)
    if isinstance(scaled, Resource):
        return replica_bounds(scaled)[1]
    if scaled is UNKNOWN:
        return UNKNOWN
    replicas = workload.get("spec", "replicas")
    return 1 if replicas is None else replicas


@stack_policy(
    name="kubernetes-deployment-configure-min-replicas",
    description=(
        "Model servers and the gateway keep at least the environment's minimum of replicas (their ScaledObject's "
        "minReplicaCount, or spec.replicas): a single replica turns every node drain, spot reclaim or rollout into "
        "an outage."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    config={
        "minReplicas": {"type": "integer", "minimum": 0, "default": 1, "description": "Minimum replicas."},
        "roles": {
            "type": "array",
            "items": {"type": "string"},
            "default": [MODEL_SERVER, GATEWAY],
            "description": f"Values of the {COMPONENT_LABEL} label the minimum applies to.",
        },
    },
    remediation="Raise models[].min_replicas and gateway.replicas.",
)
def min_replicas(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchors: compliance-policies kubernetes ...configure-minimum-replica-count; EKS Best Practices (singletons)."""
    for workload in of_type(resources, T.DEPLOYMENT, T.STATEFUL_SET):
        if _role(workload) not in config["roles"]:
            continue
        low = minimum_replicas(workload, resources)
        if isinstance(low, int) and low < config["minReplicas"]:
            report(
                f"{workload_name(workload)} runs at least {low} replica(s); this environment requires "
                f"{config['minReplicas']}",
                workload.urn,
            )


def _selects_pod(pdb: Resource, workload: Resource) -> bool | None:
    """Whether the budget's selector matches the workload's pods; None when either side is unknown."""
    selector = pdb.get("spec", "selector", "matchLabels")
    pod_labels = workload.get("spec", "template", "metadata", "labels")
    if not (known(selector) and known(pod_labels)):
        return None
    return bool(selector) and all(as_dict(pod_labels).get(k) == v for k, v in as_dict(selector).items())


@stack_policy(
    name="kubernetes-deployment-require-pdb",
    description=(
        "Every workload that runs more than one replica has a PodDisruptionBudget that still allows a voluntary "
        "disruption: without one a node drain evicts all replicas at once, with maxUnavailable 0 (or minAvailable "
        "equal to the replicas) no node can ever drain."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    remediation="Create the PDB with the server (maxUnavailable: 1).",
)
def require_pdb(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchors: Kyverno require-pdb, pdb-maxunavailable; Gatekeeper poddisruptionbudget; compliance-policies."""
    budgets = list(of_type(resources, T.POD_DISRUPTION_BUDGET))
    for workload in of_type(resources, T.DEPLOYMENT, T.STATEFUL_SET):
        high, low = maximum_replicas(workload, resources), minimum_replicas(workload, resources)
        if not isinstance(high, int) or high <= 1:
            continue
        name = workload_name(workload)
        verdicts = [(b, _selects_pod(b, workload)) for b in budgets]
        pdb = next((b for b, verdict in verdicts if verdict), None)
        if pdb is None and any(verdict is None for _, verdict in verdicts):
            continue
        if pdb is None:
            report(f"{name} runs up to {high} replicas without a PodDisruptionBudget", workload.urn)
            continue
        spec = as_dict(pdb.get("spec"))
        if spec.get("maxUnavailable") in (0, "0", "0%"):
            report(f"{name}: PodDisruptionBudget maxUnavailable 0 blocks every voluntary disruption", pdb.urn)
        available = as_int(spec.get("minAvailable"))
        if available is not None and isinstance(low, int) and low > 0 and available >= low:
            report(
                f"{name}: PodDisruptionBudget minAvailable {available} blocks every voluntary disruption at "
                f"{low} replica(s)",
                pdb.urn,
            )


@stack_policy(
    name="inference-server-require-scaledobject",
    description=(
        "Every model server has a KEDA ScaledObject: a fixed replica count either pays for idle GPUs or queues "
        "requests until the time-to-first-token objective is gone."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    remediation="Create the ScaledObject with the model server (the autoscaling component does).",
)
def require_scaled_object(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchor: EKS Best Practices AI/ML (autoscale inference on request metrics)."""
    for workload in of_type(resources, T.DEPLOYMENT, T.STATEFUL_SET):
        if is_model_server(workload) and scaled_object_for(workload, resources) is None:  # UNKNOWN: cannot tell
            report(f"{workload_name(workload)} has no ScaledObject", workload.urn)


@resource_policy(
    name="inference-server-configure-allowed-engines",
    description=(
        "A model server runs an engine this environment allows: a team adopts an engine (SGLang, say) in dev and "
        "staging before production serves with it."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={
        "allowedEngines": {
            "type": "array",
            "items": {"type": "string", "enum": list(ENGINES)},
            "default": list(ENGINES),
            "description": "Engines model servers may run (vllm, triton, sglang).",
        }
    },
    remediation="Set models[].engine to an allowed engine, or allow it in this environment's policy config.",
)
def allowed_engines(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: the spec's ``engine`` (components.spec.platform_spec.Engine), read back from the engine annotation."""
    if not is_model_server(resource) or not known(object_annotations(resource)):
        return
    engine = engine_of(resource)
    if engine is not None and engine not in config["allowedEngines"]:
        report(f"engine {engine} is not allowed here ({', '.join(config['allowedEngines'])})")


@resource_policy(
    name="inference-server-require-engine-metrics",
    description=(
        "An SGLang server exports its Prometheus metrics (--enable-metrics): KEDA scales it on sglang:num_queue_reqs "
        "and its alerts and dashboards read its series, and without the flag it serves no metrics, so the model is "
        "neither scaled nor watched. vLLM and Triton's OpenAI frontend always export theirs."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={"required": {"type": "boolean", "default": False, "description": "Require SGLang's --enable-metrics."}},
    remediation="Serve through components.serving.sglang_service.SglangService (it always passes --enable-metrics).",
)
def engine_metrics(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: SGLang ``ServerArgs.enable_metrics`` ("Enable log prometheus metrics", default off)."""
    if not config["required"] or not is_model_server(resource) or engine_of(resource) != "sglang":
        return
    if engine_flags_known(resource) and "enable-metrics" not in engine_flags(resource):
        report("SGLang runs without --enable-metrics: no /metrics for KEDA, alerts or dashboards")


POLICIES: list[AnyPolicy] = [
    allowed_engines,
    engine_metrics,
    memory_fit,
    gpu_memory_utilization,
    host_kv_fit,
    tensor_parallel,
    max_model_len,
    startup_probe,
    min_replicas,
    require_pdb,
    require_scaled_object,
]
