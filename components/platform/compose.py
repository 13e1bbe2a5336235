"""The whole platform of one spec: the composition both the stack's program and :class:`Platform` run.

Order: the clusters and their pools, the caches, the model servers on the cluster of their pool, KEDA and
monitoring beside the servers they scale, then a gateway in front of each serving cluster's models.
``parent=None`` puts every resource at the top of the stack, as the stack's own program (``infra/program.py``)
always has; :class:`~inferplane.components.platform.Platform` passes itself, so the same resources, under the same
names, become its children.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from inferplane.components.aws.model_cache import ModelCache
from inferplane.components.aws.redis_cache import REDIS_PORT, RedisCache
from inferplane.components.capacity.sizing import PlatformSizing, size_platform
from inferplane.components.catalog import get_instance_type
from inferplane.components.gateway.component import Gateway
from inferplane.components.gateway.observability import wake_query
from inferplane.components.gcp.memorystore import TLS_PORT, MemorystoreRedis
from inferplane.components.platform.aws_foundation import AwsFoundation, build_aws_foundation, platform_tags
from inferplane.components.platform.budget_store import build_budget_store
from inferplane.components.platform.cache import build_cache
from inferplane.components.platform.gateway import (
    ClusterInputs,
    build_gateways,
    eks_system_nodes,
    gke_system_nodes,
    redis_url,
    route_examples,
)
from inferplane.components.platform.gke_foundation import GkeFoundation, build_gke_foundation
from inferplane.components.platform.model_cache import build_model_cache
from inferplane.components.platform.observability import Observability, ServingTarget, build_observability
from inferplane.components.platform.serving import HF_TOKEN_SECRET, ModelServer, build_model_servers
from inferplane.components.spec.platform_spec import PlatformSpec


@dataclass(frozen=True)
class ComposedPlatform:
    """What :func:`compose_platform` declared."""

    spec: PlatformSpec
    plan: PlatformSizing
    aws: AwsFoundation
    gke: GkeFoundation | None
    response_cache: RedisCache | None
    model_cache: ModelCache | None
    budget_store: MemorystoreRedis | None
    """The GKE gateway's Memorystore for Redis (shared budgets), when GKE serves a model."""
    servers: Mapping[str, ModelServer]
    """Model servers by deployment name."""
    observability: Observability
    gateways: Mapping[str, Gateway]
    """The gateway in front of each serving cluster's models, by cluster."""

    def outputs(self) -> dict[str, Any]:
        """The platform's outputs, by their stack-output names (the program exports exactly these)."""
        outputs: dict[str, Any] = {
            "environment": self.spec.environment,
            "sizing": self.plan.model_dump(mode="json"),
            "clusterName": self.aws.cluster.cluster.name,
            "gpuNodeGroups": {pool: group.node_group.node_group_name for pool, group in self.aws.node_groups.items()},
        }
        if self.response_cache is not None:
            outputs["cacheEndpoint"] = self.response_cache.primary_endpoint
        if self.model_cache is not None:
            outputs["modelCacheUri"] = self.model_cache.uri
        outputs["modelServers"] = {name: server.service_name for name, server in self.servers.items()}
        outputs["gatewayEndpoints"] = {cluster: gateway.endpoint for cluster, gateway in self.gateways.items()}
        outputs["gatewayApiKeys"] = pulumi.Output.secret(
            {cluster: gateway.api_keys for cluster, gateway in self.gateways.items()}
        )
        return outputs


def compose_platform(
    spec: PlatformSpec, *, hf_token: pulumi.Input[str], parent: pulumi.Resource | None = None
) -> ComposedPlatform:
    """Size the platform, refuse it if anything does not fit, then declare its resources under ``parent``.

    ``hf_token`` is the Hugging Face token the servers read through a Kubernetes Secret (a secret input).
    """
    plan = _accepted_plan(spec)
    examples = route_examples(spec)  # read before anything is declared: a bad file is refused whole
    tags = platform_tags(spec)
    aws_foundation = build_aws_foundation(spec, plan, tags, parent=parent)
    gke_foundation = build_gke_foundation(spec, plan, tags, parent=parent)
    response_cache, model_cache = _caches(spec, tags, aws_foundation, parent=parent)
    budget_store = build_budget_store(spec, gke_foundation, tags, parent=parent)
    clusters = _cluster_of_pools(spec)
    providers = _kubernetes_providers(aws_foundation, gke_foundation)
    servers = build_model_servers(
        spec,
        plan,
        {pool: providers[cluster] for pool, cluster in clusters.items()},
        hf_token=hf_token,
        model_cache_uri=model_cache.uri if model_cache is not None else None,
        parent=parent,
    )
    observability = build_observability(spec, plan, providers, _serving_targets(spec, servers, clusters), parent=parent)
    gateway_inputs = _gateway_inputs(
        spec,
        providers,
        clusters,
        servers,
        observability,
        gke=gke_foundation,
        response_cache=response_cache,
        model_cache=model_cache,
        budget_store=budget_store,
    )
    gateways = build_gateways(spec, plan, gateway_inputs, examples, parent=parent)
    return ComposedPlatform(
        spec=spec,
        plan=plan,
        aws=aws_foundation,
        gke=gke_foundation,
        response_cache=response_cache,
        model_cache=model_cache,
        budget_store=budget_store,
        servers=servers,
        observability=observability,
        gateways=gateways,
    )


def _accepted_plan(spec: PlatformSpec) -> PlatformSizing:
    """The spec's sizing plan; a plan with problems stops the program before anything is declared."""
    plan = size_platform(spec)
    if not plan.ok:
        raise pulumi.RunError("the plan is refused:\n" + "\n".join(plan.problems))
    return plan


def _caches(
    spec: PlatformSpec, tags: Mapping[str, str], aws: AwsFoundation, *, parent: pulumi.Resource | None
) -> tuple[RedisCache | None, ModelCache | None]:
    """The response cache (in the cluster's VPC, reachable from its nodes) and the S3 model cache."""
    response_cache = build_cache(
        spec,
        tags,
        vpc_id=aws.network.vpc.id,
        subnet_ids=aws.network.private_subnet_ids,
        allowed_security_group_ids=[aws.cluster.cluster_security_group_id],
        parent=parent,
    )
    model_cache = build_model_cache(
        spec,
        aws.cluster.cluster.name,
        tags,
        # Pod Identity associations act through the agent add-on; binding before it runs would only be retried.
        opts=pulumi.ResourceOptions(depends_on=[aws.cluster.addons["eks-pod-identity-agent"]]),
        parent=parent,
    )
    return response_cache, model_cache


def _serving_targets(
    spec: PlatformSpec, servers: Mapping[str, ModelServer], clusters: Mapping[str, str]
) -> dict[str, ServingTarget]:
    """What the autoscalers scale and the dashboards watch: each deployment's server (a disaggregated model's prefill
    role's too), on its pool's cluster."""
    return {
        deployment.name: ServingTarget(
            deployment=servers[deployment.name].deployment_name,
            namespace=servers[deployment.name].namespace,
            cluster=clusters[deployment.pool],
            # A model at zero replicas exposes no queue: the gateway's pending requests wake it.
            wake_query=wake_query(deployment.name) if deployment.scale_to_zero else None,
        )
        for deployment in spec.serving_deployments
    }


def _gateway_inputs(
    spec: PlatformSpec,
    providers: Mapping[str, pulumi.ProviderResource],
    clusters: Mapping[str, str],
    servers: Mapping[str, ModelServer],
    observability: Observability,
    *,
    gke: GkeFoundation | None,
    response_cache: RedisCache | None,
    model_cache: ModelCache | None,
    budget_store: MemorystoreRedis | None,
) -> dict[str, ClusterInputs]:
    """Each serving cluster's gateway inputs, declared after the cluster's KEDA, monitoring and model servers."""
    inputs: dict[str, ClusterInputs] = {}
    for cluster, stack in observability.clusters.items():
        served = [servers[d.name] for d in spec.serving_deployments if clusters[d.pool] == cluster]
        after = (stack.keda, stack.monitoring, *served)
        if cluster == "eks":
            inputs[cluster] = _eks_gateway_inputs(
                providers[cluster], stack.monitoring.prometheus_url, after, response_cache, model_cache
            )
        else:
            inputs[cluster] = _gke_gateway_inputs(
                providers[cluster],
                stack.monitoring.prometheus_url,
                gke_system_nodes(gke.cluster.system_pool.name if gke else ""),
                after,
                budget_store,
            )
    return inputs


def _eks_gateway_inputs(
    provider: pulumi.ProviderResource,
    prometheus_url: pulumi.Input[str],
    after: tuple[pulumi.Resource, ...],
    response_cache: RedisCache | None,
    model_cache: ModelCache | None,
) -> ClusterInputs:
    """The EKS gateway's inputs: the response cache's Redis (URL with its AUTH token) and the S3 model cache."""
    return ClusterInputs(
        provider=provider,
        prometheus_url=prometheus_url,
        system_nodes=eks_system_nodes(),
        after=after,
        redis_url=redis_url(response_cache.primary_endpoint, response_cache.auth_token)
        if response_cache is not None
        else None,
        model_cache_uri=model_cache.uri if model_cache is not None else None,
    )


def _gke_gateway_inputs(
    provider: pulumi.ProviderResource,
    prometheus_url: pulumi.Input[str],
    system_nodes: Mapping[str, pulumi.Input[str]],
    after: tuple[pulumi.Resource, ...],
    store: MemorystoreRedis | None,
) -> ClusterInputs:
    """The GKE gateway's inputs: its Memorystore (URL, TLS port, CA) and the Hub token Secret of the serving
    namespace (the TPU servers read their weights from the Hub with it, and the gateway its tokenizers)."""
    return ClusterInputs(
        provider=provider,
        prometheus_url=prometheus_url,
        system_nodes=system_nodes,
        after=(*after, *([store] if store is not None else [])),
        redis_url=store.url if store is not None else None,
        redis_port=TLS_PORT if store is not None else REDIS_PORT,
        redis_ca_certificates=store.ca_certificates if store is not None else None,
        hf_token_secret_name=HF_TOKEN_SECRET,
    )


def _cluster_of_pools(spec: PlatformSpec) -> dict[str, str]:
    """Which cluster each pool's nodes join: EKS for EC2 instance types, GKE for GKE machine types."""
    return {pool.name: "gke" if get_instance_type(pool.instance_type).cloud == "gcp" else "eks" for pool in spec.pools}


def _kubernetes_providers(
    aws_foundation: AwsFoundation, gke_foundation: GkeFoundation | None
) -> dict[str, pulumi.ProviderResource]:
    providers: dict[str, pulumi.ProviderResource] = {"eks": aws_foundation.k8s_provider}
    if gke_foundation is not None:
        providers["gke"] = gke_foundation.cluster.provider
    return providers
