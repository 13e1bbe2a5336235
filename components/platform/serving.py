"""The model servers of a stack: one ``VllmService``, ``TritonTrtLlmService`` or ``SglangService`` per deployment.

Each deployment's objects go to the cluster of its pool (EKS for GPU pools, GKE for TPU pools), through the
Kubernetes provider the caller maps the pool to. Per cluster this also creates the serving namespace (Pod Security
admission enforced), the Secret holding the Hugging Face token, which pods mount as a read-only file only, and the
namespace's NetworkPolicies (:class:`components.serving.network_policy.ServingNetworkPolicy`: default deny, then DNS,
the gateway and Prometheus in, model loading out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.capacity.sizing import DeploymentSizing, PlatformSizing
from inferplane.components.catalog import get_instance_type
from inferplane.components.catalog.images import engine_image
from inferplane.components.gateway.renderer import fallback_aliases
from inferplane.components.serving import model_server as ms
from inferplane.components.serving.annotations import PLATFORM_NAMESPACE_LABELS
from inferplane.components.serving.naming import SERVING_NAMESPACE, SGLANG_PORT, TRITON_OPENAI_PORT, VLLM_PORT
from inferplane.components.serving.network_policy import (
    KvTransferFlow,
    ServingNetworkPolicy,
    ServingNetworkPolicyArgs,
)
from inferplane.components.serving.sglang_service import SglangService, SglangServiceArgs
from inferplane.components.serving.triton_service import TritonTrtLlmService, TritonTrtLlmServiceArgs
from inferplane.components.serving.vllm_service import VllmService, VllmServiceArgs
from inferplane.components.spec.platform_spec import Environment, ModelDeploymentSpec, PlatformSpec
from inferplane.components.spec.tags import kubernetes_labels

HF_TOKEN_SECRET = "hf-token"

POD_SECURITY_LEVEL = {"aws": "restricted", "gcp": "baseline"}
"""Pod Security admission per cluster: GPU pods meet "restricted" (non-root, no privilege escalation, capabilities
dropped, RuntimeDefault seccomp). Exception: the TPU image runs as root (access to the TPU device nodes,
``/dev/vfio/*``, by a non-root uid is unverified on GKE TPU nodes; it is otherwise locked down like the GPU pods:
read-only root filesystem, every capability dropped, no privilege escalation, RuntimeDefault seccomp), so the GKE
namespace enforces "baseline", which still refuses privileged pods, host namespaces and hostPath, and warns at
"restricted"."""

ENGINE_PORTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "vllm": ((VLLM_PORT,), (VLLM_PORT,)),
    "triton": ((TRITON_OPENAI_PORT,), (TRITON_OPENAI_PORT,)),
    "sglang": ((SGLANG_PORT,), (SGLANG_PORT,)),
}
"""(API ports the gateway calls, metrics ports Prometheus scrapes) per engine: what the NetworkPolicy admits. Triton's
OpenAI frontend serves both the API and ``/metrics``, as SGLang's server does; Triton's KServe ports are reached by
port-forward only."""

ModelServer = VllmService | TritonTrtLlmService | SglangService


class _CommonServerArgs(TypedDict):
    """The fields every engine's ``...ServiceArgs`` takes, filled the same way for each (``**`` into the args)."""

    deployment: ModelDeploymentSpec
    sizing: DeploymentSizing
    environment: Environment
    namespace: pulumi.Input[str]
    hf_token_secret_name: pulumi.Input[str]
    scrape_interval_seconds: int
    labels: Mapping[str, str]
    image_digests: Mapping[str, str]


@dataclass
class _ServingCluster:
    """One cluster's serving objects, and the ports its servers listen on (what its NetworkPolicy admits)."""

    prefix: str
    """Prefix of the cluster's resource names (``eks``, ``gke``; ``<cluster>-<n>`` for a second provider)."""
    cloud: str
    """Cloud of the first pool served through this provider: it sets Pod Security and Pod Identity."""
    provider: pulumi.ProviderResource
    namespace: k8s.core.v1.Namespace
    secret: k8s.core.v1.Secret
    api_ports: set[int] = field(default_factory=set)
    metrics_ports: set[int] = field(default_factory=set)
    kv_transfers: list[KvTransferFlow] = field(default_factory=list)
    """Disaggregated models served here: their roles' pods reach each other for the KV transfer."""


def build_model_servers(
    spec: PlatformSpec,
    plan: PlatformSizing,
    providers_by_pool: Mapping[str, pulumi.ProviderResource],
    *,
    hf_token: pulumi.Input[str],
    model_cache_uri: pulumi.Input[str] | None = None,
    parent: pulumi.Resource | None = None,
) -> dict[str, ModelServer]:
    """One model server per deployment, keyed by deployment name, on the cluster of its pool.

    ``hf_token`` is the stack's secret (``pulumi.Config("inferplane").require_secret("hfToken")``);
    ``model_cache_uri`` (``s3://bucket/prefix/``, the ``uri`` of
    :func:`~inferplane.components.platform.model_cache.build_model_cache`) points GPU pools at the S3 model cache
    (required for Triton deployments; vLLM falls back to the Hugging Face hub without it). The pods reach it as their
    ServiceAccount, bound to the cache's role by EKS Pod Identity. ``parent``: the component that owns the servers
    (``None`` in the stack's own program).
    """
    _require_providers(plan, providers_by_pool)
    tags = kubernetes_labels(spec.tags)
    # Keyed by the provider's identity: pools on the same provider share one cluster's namespace and Secret.
    clusters: dict[int, _ServingCluster] = {}
    servers: dict[str, ModelServer] = {}
    for model, model_sizing in zip(spec.models, plan.deployments, strict=True):
        # A disaggregated model's prefill role is a server of its own, answering to the model's names too: the
        # gateway's prefill step sends it the client's body unchanged but for the transfer parameters.
        aliases = fallback_aliases(spec, model.name)
        roles = [(model, model_sizing, aliases)]
        if model.prefill_role is not None and model_sizing.prefill is not None:
            roles.append((model.prefill_role, model_sizing.prefill, (model.name, *aliases)))
        for deployment, sizing, names in roles:
            provider = providers_by_pool[sizing.pool]
            cloud = get_instance_type(sizing.instance_type).cloud
            if id(provider) not in clusters:
                clusters[id(provider)] = _serving_cluster(
                    clusters.values(), cloud, provider, hf_token, tags, parent=parent
                )
            cluster = clusters[id(provider)]
            api_ports, metrics_ports = ENGINE_PORTS[deployment.engine]
            cluster.api_ports.update(api_ports)
            cluster.metrics_ports.update(metrics_ports)
            transfer = sizing.result.vllm.kv_transfer
            if transfer is not None and transfer.role == "kv_producer":
                cluster.kv_transfers.append(
                    KvTransferFlow(decode=model.name, prefill=deployment.name, any_port=transfer.backend == "UCX")
                )
            servers[deployment.name] = _model_server(
                spec, deployment, sizing, cluster, tags, aliases=names, model_cache_uri=model_cache_uri, parent=parent
            )
    for cluster in clusters.values():
        _network_policy(cluster, tags, parent=parent)
    return servers


def _require_providers(plan: PlatformSizing, providers_by_pool: Mapping[str, pulumi.ProviderResource]) -> None:
    """Refuse a plan with a serving pool that no Kubernetes provider reaches, before anything is declared."""
    missing = sorted({r.pool for d in plan.deployments for r in d.roles} - set(providers_by_pool))
    if missing:
        raise pulumi.InputPropertiesError(
            "every pool that serves a model needs a Kubernetes provider",
            errors=[{"property_path": f"providers_by_pool.{pool}", "reason": "no provider"} for pool in missing],
        )


def _serving_cluster(
    existing: Iterable[_ServingCluster],
    cloud: str,
    provider: pulumi.ProviderResource,
    hf_token: pulumi.Input[str],
    tags: Mapping[str, str],
    *,
    parent: pulumi.Resource | None,
) -> _ServingCluster:
    """A cluster's namespace and Secret, named ``eks``/``gke`` unless an earlier provider took the name."""
    used = {cluster.prefix for cluster in existing}
    name = "eks" if cloud == "aws" else "gke"
    prefix = name if name not in used else f"{name}-{len(used)}"
    namespace, secret = _cluster_objects(prefix, cloud, provider, hf_token, tags, parent=parent)
    return _ServingCluster(prefix=prefix, cloud=cloud, provider=provider, namespace=namespace, secret=secret)


def _model_server(
    spec: PlatformSpec,
    deployment: ModelDeploymentSpec,
    sizing: DeploymentSizing,
    cluster: _ServingCluster,
    tags: Mapping[str, str],
    *,
    aliases: tuple[str, ...],
    model_cache_uri: pulumi.Input[str] | None,
    parent: pulumi.Resource | None,
) -> ModelServer:
    """The deployment's server on its cluster, after the namespace and Secret it runs in and reads."""
    opts = pulumi.ResourceOptions(
        parent=parent, providers=[cluster.provider], depends_on=[cluster.namespace, cluster.secret]
    )
    cloud = get_instance_type(sizing.instance_type).cloud
    common = _CommonServerArgs(
        deployment=deployment,
        sizing=sizing,
        environment=spec.environment,
        namespace=cluster.namespace.metadata.name,
        hf_token_secret_name=cluster.secret.metadata.name,
        scrape_interval_seconds=spec.observability.scrape_interval_seconds,
        labels=tags,
        image_digests=spec.image_digests_for(deployment, engine_image(deployment.engine, tpu=cloud == "gcp")),
    )
    if deployment.engine == "vllm":
        # TPU pools on GKE read the hub: the S3 cache is reached through EKS Pod Identity.
        cache = model_cache_uri if cloud == "aws" else None
        vllm = VllmServiceArgs(
            **common,
            tpu_topology=spec.pool(sizing.pool).tpu_topology,
            model_cache_uri=cache,
            served_model_aliases=aliases,
        )
        return VllmService(deployment.name, vllm, opts)
    if deployment.engine == "sglang":
        # SGLang answers to one name and ignores the request's (its module docstring): no aliases.
        return SglangService(deployment.name, SglangServiceArgs(**common, model_cache_uri=model_cache_uri), opts)
    triton = TritonTrtLlmServiceArgs(**common, model_cache_uri=model_cache_uri, served_model_aliases=aliases)
    return TritonTrtLlmService(deployment.name, triton, opts)


def _network_policy(cluster: _ServingCluster, tags: Mapping[str, str], *, parent: pulumi.Resource | None) -> None:
    """The serving namespace's NetworkPolicies, admitting the ports of every engine the cluster serves."""
    ServingNetworkPolicy(
        f"{cluster.prefix}-serving-network-policy",
        ServingNetworkPolicyArgs(
            namespace=cluster.namespace.metadata.name,
            api_ports=sorted(cluster.api_ports),
            metrics_ports=sorted(cluster.metrics_ports),
            pod_identity=cluster.cloud == "aws",
            kv_transfers=tuple(cluster.kv_transfers),
            labels={**tags, **PLATFORM_NAMESPACE_LABELS},
        ),
        pulumi.ResourceOptions(parent=parent, providers=[cluster.provider], depends_on=[cluster.namespace]),
    )


def _cluster_objects(
    prefix: str,
    cloud: str,
    provider: pulumi.ProviderResource,
    hf_token: pulumi.Input[str],
    tags: Mapping[str, str],
    *,
    parent: pulumi.Resource | None,
) -> tuple[k8s.core.v1.Namespace, k8s.core.v1.Secret]:
    """The serving namespace and the Hugging Face token Secret in one cluster."""
    opts = pulumi.ResourceOptions(parent=parent, provider=provider)
    level = POD_SECURITY_LEVEL[cloud]
    namespace = k8s.core.v1.Namespace(
        f"{prefix}-serving-namespace",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=SERVING_NAMESPACE,
            labels={
                **tags,
                **PLATFORM_NAMESPACE_LABELS,
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/warn": "restricted",
            },
        ),
        opts=opts,
    )
    secret = k8s.core.v1.Secret(
        f"{prefix}-hf-token",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=HF_TOKEN_SECRET,
            namespace=namespace.metadata.name,
            labels={**tags, "app.kubernetes.io/part-of": "inferplane"},
        ),
        type="Opaque",
        string_data={ms.HF_TOKEN_SECRET_KEY: pulumi.Output.secret(hf_token)},
        opts=opts,
    )
    return namespace, secret
