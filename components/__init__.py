"""inferplane's library: typed catalogs, the platform spec, sizing, and Pulumi components.

Data flows one way: stack config -> :mod:`~inferplane.components.spec` -> :mod:`~inferplane.components.capacity`
-> components -> resources. Nothing in this package reads a stack file or talks to a cloud.

One subpackage per concern, each allowed to import only those listed before it (``tests/test_imports.py`` holds
every subpackage to its list; its ``__init__`` says what it owns):

=================  ==================================================================  ==========================
subpackage         owns                                                                may import
=================  ==================================================================  ==========================
``catalog``        accelerators, instances, models, images, charts, EKS versions,      nothing
                   prices
``spec``           the platform spec, whole-stack validation, tags, scheduling labels  catalog
``capacity``       sizing, the performance model, the planner                          catalog, spec
``aws``            VPC, EKS, GPU node groups, add-ons, ElastiCache, model cache, KMS   catalog, spec, capacity
``gcp``            GKE, TPU node pools, Memorystore                                    catalog, spec, capacity
``serving``        model servers (vLLM, Triton + TensorRT-LLM), network policy         the above
``observability``  metric names, alerts, dashboards, monitoring, KEDA                  the above
``gateway``        the gateway's renderer, component and observability                 all the above
``platform``       the composition of one stack (``Platform``)                         everything
=================  ==================================================================  ==========================

The public surface (semantic versioning applies to it; module paths below it are internal and may move in a minor
release, listed in CHANGELOG.md):

* the platform spec: :class:`PlatformSpec` and its parts, :func:`parse_platform`, :func:`check_platform`;
* sizing: :func:`size` for one deployment, :func:`size_platform` for a platform, and their result models;
* the components, each with one typed args object (``Network(name, NetworkArgs(...))``) and a stable type token
  ``inferplane:index:<Noun>`` (:data:`COMPONENT_TYPES`).

Every name is importable from here (``from inferplane.components import VllmService``). The names load on first use
(PEP 562), so ``import inferplane.components.capacity.sizing`` does not import the cloud providers' SDKs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferplane.components.aws.eks_cluster import (
        EksCluster,
        EksClusterArgs,
    )
    from inferplane.components.aws.gpu_node_group import (
        GpuNodeGroup,
        GpuNodeGroupArgs,
    )
    from inferplane.components.aws.model_cache import (
        ModelCache,
        ModelCacheArgs,
    )
    from inferplane.components.aws.network import (
        Network,
        NetworkArgs,
    )
    from inferplane.components.aws.node_addons import (
        NodeAddons,
        NodeAddonsArgs,
    )
    from inferplane.components.aws.redis_cache import (
        RedisCache,
        RedisCacheArgs,
    )
    from inferplane.components.capacity.sizing import (
        DeploymentSizing,
        PlatformSizing,
        PoolSizing,
        SglangSettings,
        SizingRequest,
        SizingResult,
        TrtLlmSettings,
        VllmSettings,
        request_for,
        size,
        size_platform,
    )
    from inferplane.components.gateway.component import (
        Gateway,
        GatewayArgs,
    )
    from inferplane.components.gcp.gke_cluster import (
        GkeCluster,
        GkeClusterArgs,
    )
    from inferplane.components.gcp.memorystore import (
        MemorystoreRedis,
        MemorystoreRedisArgs,
    )
    from inferplane.components.gcp.tpu_node_pool import (
        TpuNodePool,
        TpuNodePoolArgs,
    )
    from inferplane.components.observability.alerts import (
        ServingRules,
        ServingRulesArgs,
    )
    from inferplane.components.observability.dashboards import (
        ServingDashboards,
        ServingDashboardsArgs,
    )
    from inferplane.components.observability.keda import (
        AutoscalingPolicy,
        Keda,
        KedaArgs,
        QueueDepthAutoscaler,
        QueueDepthAutoscalerArgs,
    )
    from inferplane.components.observability.monitoring import (
        MonitoringStack,
        MonitoringStackArgs,
    )
    from inferplane.components.platform import Platform
    from inferplane.components.platform.args import PlatformArgs
    from inferplane.components.serving.embedder_service import (
        EmbedderService,
        EmbedderServiceArgs,
    )
    from inferplane.components.serving.model_server import HF_TOKEN_SECRET_KEY
    from inferplane.components.serving.network_policy import (
        ServingNetworkPolicy,
        ServingNetworkPolicyArgs,
    )
    from inferplane.components.serving.sglang_service import (
        SglangService,
        SglangServiceArgs,
    )
    from inferplane.components.serving.triton_service import (
        TritonTrtLlmService,
        TritonTrtLlmServiceArgs,
    )
    from inferplane.components.serving.vllm_service import (
        VllmService,
        VllmServiceArgs,
    )
    from inferplane.components.spec.platform_spec import (
        PLATFORM_KEY,
        REGION_KEY,
        CacheSpec,
        ClusterSpec,
        GatewaySpec,
        GcpSpec,
        LimitsSpec,
        ModelDeploymentSpec,
        ObservabilitySpec,
        PlatformSpec,
        PoolSpec,
        RateLimitSpec,
        RoutingSpec,
        RoutingTierSpec,
        SloSpec,
        SpecError,
        SpecIssue,
        SpeculativeDecodingSpec,
        check_platform,
        parse_platform,
    )

_EXPORTS: dict[str, str] = {
    "HF_TOKEN_SECRET_KEY": "serving.model_server",
    "CacheSpec": "spec.platform_spec",
    "ClusterSpec": "spec.platform_spec",
    "GatewaySpec": "spec.platform_spec",
    "GcpSpec": "spec.platform_spec",
    "LimitsSpec": "spec.platform_spec",
    "ModelDeploymentSpec": "spec.platform_spec",
    "ObservabilitySpec": "spec.platform_spec",
    "PLATFORM_KEY": "spec.platform_spec",
    "PlatformSpec": "spec.platform_spec",
    "PoolSpec": "spec.platform_spec",
    "REGION_KEY": "spec.platform_spec",
    "RateLimitSpec": "spec.platform_spec",
    "RoutingSpec": "spec.platform_spec",
    "RoutingTierSpec": "spec.platform_spec",
    "SloSpec": "spec.platform_spec",
    "SpecError": "spec.platform_spec",
    "SpecIssue": "spec.platform_spec",
    "SpeculativeDecodingSpec": "spec.platform_spec",
    "check_platform": "spec.platform_spec",
    "parse_platform": "spec.platform_spec",
    "DeploymentSizing": "capacity.sizing",
    "PlatformSizing": "capacity.sizing",
    "PoolSizing": "capacity.sizing",
    "SizingRequest": "capacity.sizing",
    "SizingResult": "capacity.sizing",
    "TrtLlmSettings": "capacity.sizing",
    "VllmSettings": "capacity.sizing",
    "SglangSettings": "capacity.sizing",
    "request_for": "capacity.sizing",
    "size": "capacity.sizing",
    "size_platform": "capacity.sizing",
    "Network": "aws.network",
    "NetworkArgs": "aws.network",
    "Gateway": "gateway.component",
    "GatewayArgs": "gateway.component",
    "ServingNetworkPolicy": "serving.network_policy",
    "ServingNetworkPolicyArgs": "serving.network_policy",
    "Platform": "platform",
    "PlatformArgs": "platform.args",
    "EksCluster": "aws.eks_cluster",
    "EksClusterArgs": "aws.eks_cluster",
    "GpuNodeGroup": "aws.gpu_node_group",
    "GpuNodeGroupArgs": "aws.gpu_node_group",
    "NodeAddons": "aws.node_addons",
    "NodeAddonsArgs": "aws.node_addons",
    "AutoscalingPolicy": "observability.keda",
    "Keda": "observability.keda",
    "KedaArgs": "observability.keda",
    "QueueDepthAutoscaler": "observability.keda",
    "QueueDepthAutoscalerArgs": "observability.keda",
    "VllmService": "serving.vllm_service",
    "VllmServiceArgs": "serving.vllm_service",
    "TritonTrtLlmService": "serving.triton_service",
    "TritonTrtLlmServiceArgs": "serving.triton_service",
    "EmbedderService": "serving.embedder_service",
    "EmbedderServiceArgs": "serving.embedder_service",
    "SglangService": "serving.sglang_service",
    "SglangServiceArgs": "serving.sglang_service",
    "MonitoringStack": "observability.monitoring",
    "MonitoringStackArgs": "observability.monitoring",
    "ServingRules": "observability.alerts",
    "ServingRulesArgs": "observability.alerts",
    "ServingDashboards": "observability.dashboards",
    "ServingDashboardsArgs": "observability.dashboards",
    "ModelCache": "aws.model_cache",
    "ModelCacheArgs": "aws.model_cache",
    "RedisCache": "aws.redis_cache",
    "RedisCacheArgs": "aws.redis_cache",
    "MemorystoreRedis": "gcp.memorystore",
    "MemorystoreRedisArgs": "gcp.memorystore",
    "GkeCluster": "gcp.gke_cluster",
    "GkeClusterArgs": "gcp.gke_cluster",
    "TpuNodePool": "gcp.tpu_node_pool",
    "TpuNodePoolArgs": "gcp.tpu_node_pool",
}
"""Public name -> the module of this package that defines it."""

COMPONENT_TYPES: dict[str, str] = {
    "Network": "inferplane:index:Network",
    "EksCluster": "inferplane:index:EksCluster",
    "GpuNodeGroup": "inferplane:index:GpuNodeGroup",
    "NodeAddons": "inferplane:index:NodeAddons",
    "Keda": "inferplane:index:Keda",
    "QueueDepthAutoscaler": "inferplane:index:QueueDepthAutoscaler",
    "VllmService": "inferplane:index:VllmService",
    "TritonTrtLlmService": "inferplane:index:TritonTrtLlmService",
    "EmbedderService": "inferplane:index:EmbedderService",
    "SglangService": "inferplane:index:SglangService",
    "MonitoringStack": "inferplane:index:MonitoringStack",
    "ServingRules": "inferplane:index:ServingRules",
    "ServingDashboards": "inferplane:index:ServingDashboards",
    "ModelCache": "inferplane:index:ModelCache",
    "RedisCache": "inferplane:index:RedisCache",
    "MemorystoreRedis": "inferplane:index:MemorystoreRedis",
    "GkeCluster": "inferplane:index:GkeCluster",
    "TpuNodePool": "inferplane:index:TpuNodePool",
    "ServingNetworkPolicy": "inferplane:index:ServingNetworkPolicy",
    "Platform": "inferplane:index:Platform",
    "Gateway": "inferplane:index:Gateway",
}
"""Component class -> its Pulumi type token. Tokens are part of the public surface: a changed token makes Pulumi
replace every resource under the component, so a rename keeps the old token as an alias (see CHANGELOG.md)."""

__all__ = [
    "COMPONENT_TYPES",
    "HF_TOKEN_SECRET_KEY",
    "PLATFORM_KEY",
    "REGION_KEY",
    "AutoscalingPolicy",
    "CacheSpec",
    "ClusterSpec",
    "DeploymentSizing",
    "EksCluster",
    "EksClusterArgs",
    "EmbedderService",
    "EmbedderServiceArgs",
    "Gateway",
    "GatewayArgs",
    "GatewaySpec",
    "GcpSpec",
    "GkeCluster",
    "GkeClusterArgs",
    "GpuNodeGroup",
    "GpuNodeGroupArgs",
    "Keda",
    "KedaArgs",
    "LimitsSpec",
    "MemorystoreRedis",
    "MemorystoreRedisArgs",
    "ModelCache",
    "ModelCacheArgs",
    "ModelDeploymentSpec",
    "MonitoringStack",
    "MonitoringStackArgs",
    "Network",
    "NetworkArgs",
    "NodeAddons",
    "NodeAddonsArgs",
    "ObservabilitySpec",
    "Platform",
    "PlatformArgs",
    "PlatformSizing",
    "PlatformSpec",
    "PoolSizing",
    "PoolSpec",
    "QueueDepthAutoscaler",
    "QueueDepthAutoscalerArgs",
    "RateLimitSpec",
    "RedisCache",
    "RedisCacheArgs",
    "RoutingSpec",
    "RoutingTierSpec",
    "ServingDashboards",
    "ServingDashboardsArgs",
    "ServingNetworkPolicy",
    "ServingNetworkPolicyArgs",
    "ServingRules",
    "ServingRulesArgs",
    "SglangService",
    "SglangServiceArgs",
    "SglangSettings",
    "SizingRequest",
    "SizingResult",
    "SloSpec",
    "SpecError",
    "SpecIssue",
    "SpeculativeDecodingSpec",
    "TpuNodePool",
    "TpuNodePoolArgs",
    "TritonTrtLlmService",
    "TritonTrtLlmServiceArgs",
    "TrtLlmSettings",
    "VllmService",
    "VllmServiceArgs",
    "VllmSettings",
    "check_platform",
    "parse_platform",
    "request_for",
    "size",
    "size_platform",
]


if not TYPE_CHECKING:  # mypy sees the names above; a typo in an import from here stays a type error

    def __getattr__(name: str) -> Any:
        """Load a public name's module on first use (PEP 562)."""
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
