"""The Pulumi program for one stack: stack config -> typed spec -> sizing -> components.

``infra/__main__.py`` calls :func:`main` under the ``pulumi`` CLI; the offline preview calls the same function
under Pulumi's mock engine, so both evaluate exactly this code.
"""

from __future__ import annotations

import pulumi

from inferplane.components.catalog import get_instance_type
from inferplane.components.gateway_observability import wake_query
from inferplane.components.sizing import PlatformSizing, size_platform
from inferplane.components.spec import PLATFORM_KEY, PlatformSpec, SpecError, parse_platform
from inferplane.infra.aws_foundation import AwsFoundation, build_aws_foundation, platform_tags
from inferplane.infra.cache import build_cache
from inferplane.infra.gateway import ClusterInputs, build_gateways, eks_system_nodes, gke_system_nodes, redis_url
from inferplane.infra.gke_foundation import GkeFoundation, build_gke_foundation
from inferplane.infra.model_cache import build_model_cache
from inferplane.infra.observability import ServingTarget, build_observability
from inferplane.infra.serving import build_model_servers

SECRET_CONFIG_KEYS: tuple[str, ...] = ("inferplane:hfToken",)
"""Secrets the program reads with ``require_secret``. Stack files in the repository cannot carry them (``secure:``
ciphertext is made by ``pulumi config set --secret`` for one stack's key); the offline preview stands a
``[secret]`` placeholder in for any that a stack lacks."""


def platform_from_config() -> PlatformSpec:
    """Read ``inferplane:platform`` and ``aws:region`` through Pulumi's config, as the CLI provides them."""
    raw = pulumi.Config("inferplane").require_object("platform")
    region = pulumi.Config("aws").require("region")
    try:
        return parse_platform(raw, region)
    except SpecError as exc:
        stack_file = f"Pulumi.{pulumi.get_stack()}.yaml"
        raise pulumi.RunError(exc.render(stack_file, PLATFORM_KEY)) from None


def build(spec: PlatformSpec) -> PlatformSizing:
    """Size the platform, refuse it if anything does not fit, then declare its resources.

    Order: the clusters and their pools, the caches, the model servers on the cluster of their pool, then KEDA and
    monitoring beside the servers they scale.
    """
    plan = size_platform(spec)
    if not plan.ok:
        raise pulumi.RunError("the plan is refused:\n" + "\n".join(plan.problems))
    pulumi.export("environment", spec.environment)
    pulumi.export("sizing", plan.model_dump(mode="json"))
    tags = platform_tags(spec)

    aws_foundation = build_aws_foundation(spec, plan, tags)
    pulumi.export("clusterName", aws_foundation.cluster.cluster.name)
    pulumi.export(
        "gpuNodeGroups", {pool: group.node_group.node_group_name for pool, group in aws_foundation.node_groups.items()}
    )
    gke_foundation = build_gke_foundation(spec, plan, tags)

    response_cache = build_cache(
        spec,
        tags,
        vpc_id=aws_foundation.network.vpc.id,
        subnet_ids=aws_foundation.network.private_subnet_ids,
        allowed_security_group_ids=[aws_foundation.cluster.cluster_security_group_id],
    )
    if response_cache is not None:
        pulumi.export("cacheEndpoint", response_cache.primary_endpoint)
    model_cache = build_model_cache(
        spec,
        aws_foundation.cluster.cluster.name,
        tags,
        # Pod Identity associations act through the agent add-on; binding before it runs would only be retried.
        opts=pulumi.ResourceOptions(depends_on=[aws_foundation.cluster.addons["eks-pod-identity-agent"]]),
    )
    if model_cache is not None:
        pulumi.export("modelCacheUri", model_cache.uri)

    clusters = _cluster_of_pools(spec)
    providers = _kubernetes_providers(aws_foundation, gke_foundation)
    servers = build_model_servers(
        spec,
        plan,
        {pool: providers[cluster] for pool, cluster in clusters.items()},
        hf_token=pulumi.Config("inferplane").require_secret("hfToken"),
        model_cache_uri=model_cache.uri if model_cache is not None else None,
    )
    pulumi.export("modelServers", {name: server.service_name for name, server in servers.items()})
    observability = build_observability(
        spec,
        plan,
        providers,
        {
            deployment.name: ServingTarget(
                deployment=servers[deployment.name].deployment_name,
                namespace=servers[deployment.name].namespace,
                cluster=clusters[deployment.pool],
                # A model at zero replicas exposes no queue: the gateway's pending requests wake it.
                wake_query=wake_query(deployment.name) if deployment.scale_to_zero else None,
            )
            for deployment in spec.models
        },
    )
    gateways = build_gateways(
        spec,
        plan,
        {
            cluster: ClusterInputs(
                provider=providers[cluster],
                prometheus_url=stack.monitoring.prometheus_url,
                system_nodes=eks_system_nodes()
                if cluster == "eks"
                else gke_system_nodes(gke_foundation.cluster.system_pool.name if gke_foundation else ""),
                after=(
                    stack.keda,
                    stack.monitoring,
                    *(servers[m.name] for m in spec.models if clusters[m.pool] == cluster),
                ),
                redis_url=redis_url(response_cache.primary_endpoint, response_cache.auth_token)
                if cluster == "eks" and response_cache is not None
                else None,
                model_cache_uri=model_cache.uri if cluster == "eks" and model_cache is not None else None,
            )
            for cluster, stack in observability.clusters.items()
        },
    )
    pulumi.export("gatewayEndpoints", {cluster: gateway.endpoint for cluster, gateway in gateways.items()})
    pulumi.export(
        "gatewayApiKeys",
        pulumi.Output.secret({cluster: gateway.api_keys for cluster, gateway in gateways.items()}),
    )
    return plan


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


def main() -> None:
    """The program's entry point."""
    build(platform_from_config())
