"""inferplane's library: typed catalogs, the platform spec, sizing, and Pulumi components.

Data flows one way: stack config -> :mod:`inferplane.components.spec` -> :mod:`inferplane.components.sizing` ->
components -> resources. Nothing in this package reads a stack file or talks to a cloud.

The public surface (semantic versioning applies to it; everything else is internal and may change in a minor release):

* the platform spec: :class:`PlatformSpec` and its parts, :func:`parse_platform`, :func:`check_platform`;
* sizing: :func:`size` for one deployment, :func:`size_platform` for a platform, and their result models;
* the components, each with one typed args object (``Network(name, NetworkArgs(...))``) and a stable type token
  ``inferplane:index:<Noun>`` (:data:`COMPONENT_TYPES`).

Every name is importable from here (``from inferplane.components import VllmService``) or from its module. The names
load on first use (PEP 562), so ``import inferplane.components.sizing`` does not import the cloud providers' SDKs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferplane.components.alerts import (
        ServingRules,
        ServingRulesArgs,
    )
    from inferplane.components.dashboards import (
        ServingDashboards,
        ServingDashboardsArgs,
    )
    from inferplane.components.eks_cluster import (
        EksCluster,
        EksClusterArgs,
    )
    from inferplane.components.gateway import (
        Gateway,
        GatewayArgs,
    )
    from inferplane.components.gke_cluster import (
        GkeCluster,
        GkeClusterArgs,
    )
    from inferplane.components.gpu_node_group import (
        GpuNodeGroup,
        GpuNodeGroupArgs,
    )
    from inferplane.components.keda import (
        AutoscalingPolicy,
        Keda,
        KedaArgs,
        QueueDepthAutoscaler,
        QueueDepthAutoscalerArgs,
    )
    from inferplane.components.memorystore import (
        MemorystoreRedis,
        MemorystoreRedisArgs,
    )
    from inferplane.components.model_cache import (
        ModelCache,
        ModelCacheArgs,
    )
    from inferplane.components.model_server import HF_TOKEN_SECRET_KEY
    from inferplane.components.monitoring import (
        MonitoringStack,
        MonitoringStackArgs,
    )
    from inferplane.components.network import (
        Network,
        NetworkArgs,
    )
    from inferplane.components.network_policy import (
        ServingNetworkPolicy,
        ServingNetworkPolicyArgs,
    )
    from inferplane.components.node_addons import (
        NodeAddons,
        NodeAddonsArgs,
    )
    from inferplane.components.platform import Platform
    from inferplane.components.platform.args import PlatformArgs
    from inferplane.components.redis_cache import (
        RedisCache,
        RedisCacheArgs,
    )
    from inferplane.components.sizing import (
        DeploymentSizing,
        PlatformSizing,
        PoolSizing,
        SizingRequest,
        SizingResult,
        TrtLlmSettings,
        VllmSettings,
        request_for,
        size,
        size_platform,
    )
    from inferplane.components.spec import (
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
        RoutingTierSpec,
        SloSpec,
        SpecError,
        SpecIssue,
        SpeculativeDecodingSpec,
        check_platform,
        parse_platform,
    )
    from inferplane.components.tpu_node_pool import (
        TpuNodePool,
        TpuNodePoolArgs,
    )
    from inferplane.components.triton_service import (
        TritonTrtLlmService,
        TritonTrtLlmServiceArgs,
    )
    from inferplane.components.vllm_service import (
        VllmService,
        VllmServiceArgs,
    )

_EXPORTS: dict[str, str] = {
    "HF_TOKEN_SECRET_KEY": "model_server",
    "CacheSpec": "spec",
    "ClusterSpec": "spec",
    "GatewaySpec": "spec",
    "GcpSpec": "spec",
    "LimitsSpec": "spec",
    "ModelDeploymentSpec": "spec",
    "ObservabilitySpec": "spec",
    "PLATFORM_KEY": "spec",
    "PlatformSpec": "spec",
    "PoolSpec": "spec",
    "REGION_KEY": "spec",
    "RateLimitSpec": "spec",
    "RoutingTierSpec": "spec",
    "SloSpec": "spec",
    "SpecError": "spec",
    "SpecIssue": "spec",
    "SpeculativeDecodingSpec": "spec",
    "check_platform": "spec",
    "parse_platform": "spec",
    "DeploymentSizing": "sizing",
    "PlatformSizing": "sizing",
    "PoolSizing": "sizing",
    "SizingRequest": "sizing",
    "SizingResult": "sizing",
    "TrtLlmSettings": "sizing",
    "VllmSettings": "sizing",
    "request_for": "sizing",
    "size": "sizing",
    "size_platform": "sizing",
    "Network": "network",
    "NetworkArgs": "network",
    "Gateway": "gateway",
    "GatewayArgs": "gateway",
    "ServingNetworkPolicy": "network_policy",
    "ServingNetworkPolicyArgs": "network_policy",
    "Platform": "platform",
    "PlatformArgs": "platform.args",
    "EksCluster": "eks_cluster",
    "EksClusterArgs": "eks_cluster",
    "GpuNodeGroup": "gpu_node_group",
    "GpuNodeGroupArgs": "gpu_node_group",
    "NodeAddons": "node_addons",
    "NodeAddonsArgs": "node_addons",
    "AutoscalingPolicy": "keda",
    "Keda": "keda",
    "KedaArgs": "keda",
    "QueueDepthAutoscaler": "keda",
    "QueueDepthAutoscalerArgs": "keda",
    "VllmService": "vllm_service",
    "VllmServiceArgs": "vllm_service",
    "TritonTrtLlmService": "triton_service",
    "TritonTrtLlmServiceArgs": "triton_service",
    "MonitoringStack": "monitoring",
    "MonitoringStackArgs": "monitoring",
    "ServingRules": "alerts",
    "ServingRulesArgs": "alerts",
    "ServingDashboards": "dashboards",
    "ServingDashboardsArgs": "dashboards",
    "ModelCache": "model_cache",
    "ModelCacheArgs": "model_cache",
    "RedisCache": "redis_cache",
    "RedisCacheArgs": "redis_cache",
    "MemorystoreRedis": "memorystore",
    "MemorystoreRedisArgs": "memorystore",
    "GkeCluster": "gke_cluster",
    "GkeClusterArgs": "gke_cluster",
    "TpuNodePool": "tpu_node_pool",
    "TpuNodePoolArgs": "tpu_node_pool",
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
    "RoutingTierSpec",
    "ServingDashboards",
    "ServingDashboardsArgs",
    "ServingNetworkPolicy",
    "ServingNetworkPolicyArgs",
    "ServingRules",
    "ServingRulesArgs",
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
