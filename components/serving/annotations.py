"""The labels and annotations inferplane puts on its Kubernetes objects, and what they mean.

This is the contract between the components that create workloads and everything that reads them back: the policy
pack (``policies/``), dashboards, and humans running ``kubectl describe``. The model-server components put
:func:`serving_annotations` on every model-server Deployment (its ``metadata.annotations``; the pod template may carry
them too), and :data:`COMPONENT_LABEL` on every workload, so a policy can judge what a generic Kubernetes object
cannot say: which model a pod serves, on which accelerator, with how much time to start.

Keys live under the ``inferplane.io/`` prefix (Kubernetes' recommended ``<dns-prefix>/<name>`` form). Values are
strings, as Kubernetes requires.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferplane.components.capacity.sizing import DeploymentSizing
from inferplane.components.spec.platform_spec import Engine, RoutingSpec
from inferplane.components.spec.scheduling import ACCELERATOR_LABEL, POOL_LABEL

PREFIX = "inferplane.io/"

SCRAPE_LABELS: dict[str, str] = {"inferplane.io/scrape": "true"}
"""Labels every PodMonitor/ServiceMonitor and PrometheusRule carries (the model servers', the gateway's, the
monitoring stack's own); kube-prometheus-stack's monitor selectors match exactly these."""

COMPONENT_LABEL = "app.kubernetes.io/component"
"""Label on every workload saying what part of the platform it is (one of :data:`ComponentRole`): the Kubernetes
recommended label (kubernetes.io/docs/concepts/overview/working-with-objects/common-labels), as
``components.serving.model_server.labels_for`` sets it."""
NAME_LABEL = "app.kubernetes.io/name"
"""The workload's name (the spec's ``models[].name`` for a model server)."""

ComponentRole = Literal["model-server", "gateway", "cache", "cache-embedder", "monitoring", "system"]
MODEL_SERVER: ComponentRole = "model-server"
GATEWAY: ComponentRole = "gateway"
CACHE_EMBEDDER: ComponentRole = "cache-embedder"
"""The semantic cache's served embedder (``components.serving.embedder_service``): a model server for the gateway's
own use, labelled apart so that serving's policies (GPUs, engine flags, autoscaling) do not apply to it."""
ENGINE_BUILD = "engine-build"
""":data:`COMPONENT_LABEL` of Triton's engine-build Job pods (they fetch checkpoints like a model server)."""

PART_OF_LABEL = "app.kubernetes.io/part-of"
PLATFORM = "inferplane"
"""``app.kubernetes.io/part-of: inferplane``: on every platform object, and on the namespaces the platform's own
workloads run in (the serving namespace, the gateway's)."""

GATEWAY_POD_LABELS: dict[str, str] = {COMPONENT_LABEL: GATEWAY}
"""The one contract between the gateway and the model servers' NetworkPolicy: pods labelled
``app.kubernetes.io/component: gateway``, in a namespace labelled ``app.kubernetes.io/part-of: inferplane``
(:data:`PLATFORM_NAMESPACE_LABELS`), may call the servers' API ports; nothing else may
(``components.serving.network_policy``)."""

PLATFORM_NAMESPACE_LABELS: dict[str, str] = {PART_OF_LABEL: PLATFORM}
"""Namespace labels the gateway's namespace must carry for :data:`GATEWAY_POD_LABELS` to be admitted."""

SERVED_MODEL_LABEL = f"{PREFIX}model"
"""Label with the served model name (``--served-model-name``), on the model server and on its ScaledObject
(``components.observability.keda.QueueDepthAutoscaler`` sets it there)."""

MODEL = f"{PREFIX}catalog-model"
"""Annotation: catalog model id (``llama-3.3-70b``) or, for a custom architecture, its Hugging Face repository."""
ENGINE = f"{PREFIX}engine"
"""``vllm``, ``triton`` or ``sglang``."""
ACCELERATOR = ACCELERATOR_LABEL
"""Catalog accelerator id the replicas run on (the node label of the same name)."""
POOL = POOL_LABEL
"""Pool the replicas are placed on (the node label of the same name)."""
INSTANCE_TYPE = f"{PREFIX}instance-type"
"""EC2 instance type or GKE machine type of the pool's nodes."""
TENSOR_PARALLEL_SIZE = f"{PREFIX}tensor-parallel-size"
"""Accelerators per replica (tensor-parallel size)."""
MAX_MODEL_LEN = f"{PREFIX}max-model-len"
"""Longest sequence served, tokens."""
MAX_NUM_SEQS = f"{PREFIX}max-num-seqs"
"""Concurrent sequences per replica the KV cache is sized for."""
MAX_NUM_BATCHED_TOKENS = f"{PREFIX}max-num-batched-tokens"
"""Tokens per engine step (prefill chunk budget); part of the activation reserve."""
GPU_MEMORY_UTILIZATION = f"{PREFIX}gpu-memory-utilization"
"""Share of device memory the engine may take."""
WEIGHTS_DTYPE = f"{PREFIX}weights-dtype"
"""``bf16``, ``fp16``, ``fp8`` or ``int4``."""
KV_CACHE_DTYPE = f"{PREFIX}kv-cache-dtype"
"""``auto``, ``bf16``, ``fp16`` or ``fp8``."""
ENGINE_START_SECONDS = f"{PREFIX}engine-start-seconds"
"""Seconds from container start until the engine serves: load into device memory plus warm-up. The startup
probe must allow at least this long."""
COLD_START_SECONDS = f"{PREFIX}cold-start-seconds"
"""Weights fetch plus engine start: how long a new replica takes on a fresh node."""

ALERT_KIND_LABEL = f"{PREFIX}alert"
"""Label on a PrometheusRule alert saying which risk it covers (one of :data:`AlertKind`); alerts named like
``InferplanePreemptions`` (``components.observability.alerts``) are recognised without it."""
AlertKind = Literal["preemption", "saturation", "latency", "errors"]
PREEMPTION_ALERT: AlertKind = "preemption"


def serving_annotations(deployment: DeploymentSizing) -> dict[str, str]:
    """The annotations a model-server Deployment carries, from its sizing (the one source of engine settings)."""
    result = deployment.result
    return {
        MODEL: result.model,
        ENGINE: deployment.engine,
        ACCELERATOR: result.accelerator,
        POOL: deployment.pool,
        INSTANCE_TYPE: deployment.instance_type,
        TENSOR_PARALLEL_SIZE: str(result.tensor_parallel_size),
        MAX_MODEL_LEN: str(result.context),
        MAX_NUM_SEQS: str(result.concurrency),
        MAX_NUM_BATCHED_TOKENS: str(result.max_num_batched_tokens),
        GPU_MEMORY_UTILIZATION: str(result.gpu_memory_utilization),
        WEIGHTS_DTYPE: result.weights_dtype,
        KV_CACHE_DTYPE: result.kv_cache_dtype,
        ENGINE_START_SECONDS: str(result.engine_start_seconds),
        COLD_START_SECONDS: str(result.cold_start_seconds),
    }


class ServingAnnotations(BaseModel):
    """The serving annotations read back from an object; a key that is absent is None."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(default=None, description=MODEL)
    engine: Engine | None = Field(default=None, description=ENGINE)
    accelerator: str | None = Field(default=None, description=ACCELERATOR)
    pool: str | None = Field(default=None, description=POOL)
    instance_type: str | None = Field(default=None, description=INSTANCE_TYPE)
    tensor_parallel_size: int | None = Field(default=None, ge=1, description=TENSOR_PARALLEL_SIZE)
    max_model_len: int | None = Field(default=None, ge=1, description=MAX_MODEL_LEN)
    max_num_seqs: int | None = Field(default=None, ge=1, description=MAX_NUM_SEQS)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, description=MAX_NUM_BATCHED_TOKENS)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1, description=GPU_MEMORY_UTILIZATION)
    weights_dtype: Literal["bf16", "fp16", "fp8", "int4"] | None = Field(default=None, description=WEIGHTS_DTYPE)
    kv_cache_dtype: Literal["auto", "bf16", "fp16", "fp8"] | None = Field(default=None, description=KV_CACHE_DTYPE)
    engine_start_seconds: float | None = Field(default=None, ge=0, description=ENGINE_START_SECONDS)
    cold_start_seconds: float | None = Field(default=None, ge=0, description=COLD_START_SECONDS)


_FIELDS: dict[str, str] = {
    MODEL: "model",
    ENGINE: "engine",
    ACCELERATOR: "accelerator",
    POOL: "pool",
    INSTANCE_TYPE: "instance_type",
    TENSOR_PARALLEL_SIZE: "tensor_parallel_size",
    MAX_MODEL_LEN: "max_model_len",
    MAX_NUM_SEQS: "max_num_seqs",
    MAX_NUM_BATCHED_TOKENS: "max_num_batched_tokens",
    GPU_MEMORY_UTILIZATION: "gpu_memory_utilization",
    WEIGHTS_DTYPE: "weights_dtype",
    KV_CACHE_DTYPE: "kv_cache_dtype",
    ENGINE_START_SECONDS: "engine_start_seconds",
    COLD_START_SECONDS: "cold_start_seconds",
}


class AnnotationError(ValueError):
    """Serving annotations that do not parse; the message names the key."""


def parse_serving_annotations(annotations: Mapping[str, object]) -> ServingAnnotations:
    """Read the serving annotations back (other keys are ignored); raise :class:`AnnotationError` naming the key."""
    values = {field: annotations[key] for key, field in _FIELDS.items() if isinstance(annotations.get(key), str)}
    try:
        return ServingAnnotations.model_validate(values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0])
            key = next(k for k, f in _FIELDS.items() if f == field)
            problems.append(f"{key}={annotations.get(key)!r}: {err['msg']}")
        raise AnnotationError("; ".join(problems)) from None


# --- the gateway ------------------------------------------------------------------------------------------------

GATEWAY_AUTH = f"{PREFIX}gateway-auth"
"""Annotation on the gateway Deployment: how callers authenticate (``api_key``, ``oidc``) or ``none``."""
GATEWAY_REQUESTS_PER_MINUTE = f"{PREFIX}gateway-requests-per-minute"
"""The highest requests-per-minute limit any tenant has (absent: requests are not limited)."""
GATEWAY_TOKENS_PER_MINUTE = f"{PREFIX}gateway-tokens-per-minute"
"""The highest tokens-per-minute budget any tenant has (absent: tokens are not limited)."""
GATEWAY_ROUTES = f"{PREFIX}gateway-routes"
"""JSON object: served model name -> ``{"tiers": [...], "max_context": n}``, the tiers that reach the model and the
context cap (prompt + max_tokens) the gateway enforces for it."""

GATEWAY_ROUTING = f"{PREFIX}gateway-routing"
"""JSON object: served model name -> ``{"policy": ..., "overlap_weight": x, "load_bound": b}``, how the gateway picks
the model's replica (:class:`~inferplane.components.spec.platform_spec.RoutingSpec`, resolved per model by
:func:`~inferplane.components.spec.platform_spec.routing_of`); written by :func:`gateway_routing_annotation`."""

GATEWAY_PROVIDERS = f"{PREFIX}gateway-providers"
"""JSON object: hosted provider name -> ``{"host": ..., "tiers": [...], "tenants": [...]}``, where the gateway may
send prompts out of the VPC and for whom (``gateway.providers``); absent without a provider. Written by
:func:`gateway_providers_annotation`, so the preview's diff shows any change of who may reach which provider."""

GatewayAuth = Literal["api_key", "oidc", "none"]


class GatewayRoute(BaseModel):
    """How the gateway reaches one served model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tiers: tuple[str, ...] = Field(description="Tiers whose requests may reach the model (primary or fallback).")
    max_context: int = Field(ge=1, description="Longest prompt + max_tokens the gateway admits for the model.")


class GatewayProvider(BaseModel):
    """Where one hosted provider is, which tiers fall back to it and which tenants' prompts may go there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(description="The provider's host, from its base URL.")
    tiers: tuple[str, ...] = Field(description="Tiers that fall back to the provider.")
    tenants: tuple[str, ...] = Field(description="Tenants whose prompts may be sent to it.")


class GatewayAnnotations(BaseModel):
    """The gateway annotations read back from an object; an absent limit is None (unlimited)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    auth: GatewayAuth | None = Field(default=None, description=GATEWAY_AUTH)
    requests_per_minute: int | None = Field(default=None, ge=1, description=GATEWAY_REQUESTS_PER_MINUTE)
    tokens_per_minute: int | None = Field(default=None, ge=1, description=GATEWAY_TOKENS_PER_MINUTE)
    routes: dict[str, GatewayRoute] | None = Field(default=None, description=GATEWAY_ROUTES)
    routing: dict[str, RoutingSpec] | None = Field(default=None, description=GATEWAY_ROUTING)
    providers: dict[str, GatewayProvider] | None = Field(default=None, description=GATEWAY_PROVIDERS)


def gateway_annotations(
    *,
    auth: GatewayAuth,
    requests_per_minute: int | None,
    tokens_per_minute: int | None,
    routes: Mapping[str, GatewayRoute],
) -> dict[str, str]:
    """The annotations the gateway Deployment carries (what the policy pack judges it by)."""
    result = {
        GATEWAY_AUTH: auth,
        GATEWAY_ROUTES: json.dumps({name: route.model_dump(mode="json") for name, route in sorted(routes.items())}),
    }
    if requests_per_minute is not None:
        result[GATEWAY_REQUESTS_PER_MINUTE] = str(requests_per_minute)
    if tokens_per_minute is not None:
        result[GATEWAY_TOKENS_PER_MINUTE] = str(tokens_per_minute)
    return result


def gateway_routing_annotation(routing: Mapping[str, RoutingSpec]) -> str:
    """The value of :data:`GATEWAY_ROUTING` for each served model's routing (keys sorted, so an unchanged spec
    renders an unchanged annotation and the Deployment is not rolled)."""
    return json.dumps({name: spec.model_dump(mode="json") for name, spec in routing.items()}, sort_keys=True)


def gateway_providers_annotation(providers: Mapping[str, GatewayProvider]) -> str:
    """The value of :data:`GATEWAY_PROVIDERS` (keys sorted, as :func:`gateway_routing_annotation`)."""
    return json.dumps({name: p.model_dump(mode="json") for name, p in providers.items()}, sort_keys=True)


_GATEWAY_FIELDS: dict[str, str] = {
    GATEWAY_AUTH: "auth",
    GATEWAY_REQUESTS_PER_MINUTE: "requests_per_minute",
    GATEWAY_TOKENS_PER_MINUTE: "tokens_per_minute",
    GATEWAY_ROUTES: "routes",
    GATEWAY_ROUTING: "routing",
    GATEWAY_PROVIDERS: "providers",
}
_GATEWAY_JSON = frozenset({GATEWAY_ROUTES, GATEWAY_ROUTING, GATEWAY_PROVIDERS})
"""The gateway annotations whose values are JSON documents."""


def parse_gateway_annotations(annotations: Mapping[str, object]) -> GatewayAnnotations:
    """Read the gateway annotations back (other keys are ignored); raise :class:`AnnotationError` naming the key."""
    values: dict[str, object] = {}
    for key, field in _GATEWAY_FIELDS.items():
        raw = annotations.get(key)
        if not isinstance(raw, str):
            continue
        if key in _GATEWAY_JSON:
            try:
                values[field] = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise AnnotationError(f"{key}={raw!r}: not JSON ({exc.msg})") from None
        else:
            values[field] = raw
    try:
        return GatewayAnnotations.model_validate(values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = next(k for k, f in _GATEWAY_FIELDS.items() if f == err["loc"][0])
            where = ".".join(str(p) for p in err["loc"][1:])
            problems.append(f"{key}{'[' + where + ']' if where else ''}={annotations.get(key)!r}: {err['msg']}")
        raise AnnotationError("; ".join(problems)) from None
