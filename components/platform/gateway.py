"""The gateways of a platform: one :class:`~inferplane.components.gateway.component.Gateway` per cluster that serves
models.

Each is rendered from the spec and the sizing plan for its cluster
(:func:`~inferplane.components.gateway.renderer.render_gateway`: the models whose pools are on that cluster), runs in
the serving namespace on the cluster's system nodes, and is declared after the model servers and the cluster's
monitoring (its ScaledObject, PodMonitor and PrometheusRule need their CRDs). On EKS it reaches the platform's
Redis/Valkey (the response cache's replication group, over TLS with its AUTH token) and reads the models' tokenizers
from the S3 model cache. On GKE it reaches the cluster's Memorystore for Redis
(:mod:`~inferplane.components.platform.budget_store`: budgets only, over TLS with AUTH, trusting the instance's own CA)
and fetches the tokenizers from the Hugging Face Hub, where the TPU servers read their weights (see README, "The
gateway").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pulumi

from inferplane.components.aws.eks_cluster import SYSTEM_ROLE, SYSTEM_ROLE_LABEL
from inferplane.components.aws.redis_cache import REDIS_PORT
from inferplane.components.capacity.sizing import PlatformSizing
from inferplane.components.catalog import get_instance_type
from inferplane.components.gateway.component import Gateway, GatewayArgs, service_account_name
from inferplane.components.gateway.observability import ModelCost
from inferplane.components.gateway.renderer import render_gateway, serving_clusters
from inferplane.components.gateway.route_examples import read_route_examples
from inferplane.components.observability.metrics import ModelSeries
from inferplane.components.serving.naming import SERVING_NAMESPACE
from inferplane.components.spec.platform_spec import RESPONSE_CACHE_CLUSTERS, PlatformSpec, SpecError
from inferplane.components.spec.tags import kubernetes_labels

GATEWAY_NAME = "gateway"
"""The gateway on the primary (EKS) cluster; another cluster's is ``gateway-<cluster>``."""

GKE_NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
"""The label GKE puts on every node with its node pool's name (GKE docs, "About node pools")."""


def gateway_name(cluster: str) -> str:
    """The gateway's name (its Kubernetes objects' names) on ``cluster``."""
    return GATEWAY_NAME if cluster == "eks" else f"{GATEWAY_NAME}-{cluster}"


def gateway_service_account(spec: PlatformSpec) -> str | None:
    """The EKS gateway's ServiceAccount, which the model cache binds (tokenizers); None when EKS serves nothing."""
    on_eks = any(get_instance_type(spec.pool(m.pool).instance_type).cloud == "aws" for m in spec.models)
    return service_account_name(gateway_name("eks")) if on_eks else None


@dataclass(frozen=True)
class ClusterInputs:
    """What a cluster offers its gateway."""

    provider: pulumi.ProviderResource
    prometheus_url: pulumi.Input[str]
    system_nodes: Mapping[str, pulumi.Input[str]]
    """Node selector of the cluster's system nodes."""
    after: tuple[pulumi.Resource, ...] = ()
    """What must exist first: the model servers, KEDA and the monitoring stack of the cluster."""
    redis_url: pulumi.Input[str] | None = None
    redis_port: int = REDIS_PORT
    redis_ca_certificates: pulumi.Input[str] | None = None
    """The store's own certificate authorities, where the processor trusts only those (GKE's Memorystore)."""
    model_cache_uri: pulumi.Input[str] | None = None
    hf_token_secret_name: pulumi.Input[str] | None = None
    """The Hugging Face token Secret the tokenizers are fetched with, where no model cache exists (GKE)."""


def eks_system_nodes() -> dict[str, pulumi.Input[str]]:
    """The EKS system node group's label."""
    return {SYSTEM_ROLE_LABEL: SYSTEM_ROLE}


def gke_system_nodes(pool_name: pulumi.Input[str]) -> dict[str, pulumi.Input[str]]:
    """The GKE system node pool, by the label GKE sets."""
    return {GKE_NODE_POOL_LABEL: pool_name}


def redis_url(host: pulumi.Input[str], token: pulumi.Input[str]) -> pulumi.Output[str]:
    """``rediss://`` (TLS is required by the cache) with the AUTH token as password; always secret."""
    return pulumi.Output.secret(pulumi.Output.format("rediss://:{0}@{1}:{2}", token, host, REDIS_PORT))


def project_dir() -> Path:
    """The project's directory (the one with ``Pulumi.yaml``), as the CLI tells the program; the working directory
    where it does not (an older CLI)."""
    return Path(pulumi.get_root_directory() or os.getcwd())


def route_examples(spec: PlatformSpec) -> dict[str, str]:
    """The difficulty-routed tiers' examples, read from the project; a missing or bad file stops the program with
    every problem named by key and file, before any resource is declared."""
    if not any(tier.route is not None for tier in spec.gateway.tiers):
        return {}
    try:
        return read_route_examples(spec, project_dir())
    except SpecError as exc:
        raise pulumi.RunError(exc.render(f"Pulumi.{pulumi.get_stack()}.yaml")) from None


def build_gateways(
    spec: PlatformSpec,
    plan: PlatformSizing,
    clusters: Mapping[str, ClusterInputs],
    examples: Mapping[str, str] | None = None,
    *,
    parent: pulumi.Resource | None = None,
) -> dict[str, Gateway]:
    """One gateway per serving cluster, keyed by cluster; every serving cluster must be in ``clusters``.

    ``examples``: the difficulty-routed tiers' examples by tier (when not given, read from the project:
    :func:`route_examples`).
    ``parent``: the component that owns them (:class:`~inferplane.components.platform.Platform`), or None.
    """
    missing = [c for c in serving_clusters(spec) if c not in clusters]
    if missing:
        raise pulumi.RunError(f"gateways cannot be built: no inputs for serving cluster(s) {', '.join(missing)}")
    sizing = plan.servings
    engines = {m.name: m.engine for m in spec.serving_deployments}
    if examples is None:
        examples = route_examples(spec)
    gateways: dict[str, Gateway] = {}
    for cluster in serving_clusters(spec):
        inputs = clusters[cluster]
        rendered = render_gateway(spec, plan, cluster, route_examples=examples)
        costs = {
            model: ModelCost(
                series=ModelSeries(model, engines[model], SERVING_NAMESPACE, model),
                replica_hourly_usd=price,
            )
            for model in rendered.models
            if (price := sizing[model].replica_hourly_usd) is not None
        }
        gateways[cluster] = Gateway(
            gateway_name(cluster),
            GatewayArgs(
                rendered=rendered,
                environment=spec.environment,
                cloud="aws" if cluster == "eks" else "gcp",
                namespace=SERVING_NAMESPACE,
                replicas=spec.gateway.replicas,
                prometheus_url=inputs.prometheus_url,
                node_selector=inputs.system_nodes,
                redis_url=inputs.redis_url,
                redis_port=inputs.redis_port,
                redis_ca_certificates=inputs.redis_ca_certificates,
                model_cache_uri=inputs.model_cache_uri,
                hf_token_secret_name=inputs.hf_token_secret_name,
                scrape_interval_seconds=spec.observability.scrape_interval_seconds,
                dashboard=spec.observability.grafana,
                model_costs=costs,
                labels=kubernetes_labels(spec.tags),
                # The served embedder runs beside the gateway that has the response cache.
                embedder=plan.embedder if cluster in RESPONSE_CACHE_CLUSTERS else None,
                embedder_image_digest=spec.image_digests.get("vllm-cpu"),
            ),
            opts=pulumi.ResourceOptions(parent=parent, providers=[inputs.provider], depends_on=list(inputs.after)),
        )
    return gateways
