"""custom-platform: one team's inference platform, built from inferplane's components directly.

A VPC and an EKS cluster, one GPU node group, one vLLM model server that KEDA scales on its queue depth, and the
monitoring stack KEDA reads it from. inferplane's typed spec and sizing decide the engine settings and the pool's
size; this program decides the rest (names, tags, namespace, what to export).
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components import (
    HF_TOKEN_SECRET_KEY,
    EksCluster,
    EksClusterArgs,
    GpuNodeGroup,
    GpuNodeGroupArgs,
    Keda,
    KedaArgs,
    MonitoringStack,
    MonitoringStackArgs,
    Network,
    NetworkArgs,
    NodeAddons,
    NodeAddonsArgs,
    QueueDepthAutoscaler,
    QueueDepthAutoscalerArgs,
    VllmService,
    VllmServiceArgs,
    parse_platform,
    size_platform,
)

config = pulumi.Config()
region = pulumi.Config("aws").require("region")
cluster_name = f"{pulumi.get_project()}-{pulumi.get_stack()}"
tags = {"team": config.require("team"), "managed-by": "pulumi"}

# The typed spec (validated together, every problem named) and the sizing it implies.
spec = parse_platform(
    {
        "environment": "dev",
        "zones": config.require_object("zones"),
        "pools": [
            {
                "name": "gpu",
                "accelerator": config.require("accelerator"),
                "instance_type": config.require("instanceType"),
            }
        ],
        "models": [
            {
                "name": "chat",
                "model": config.require("model"),
                "pool": "gpu",
                "weights_dtype": "fp8",
                "kv_cache_dtype": "fp8",
                "max_context": 8192,
                "concurrency": 16,
                "max_replicas": config.get_int("maxReplicas") or 1,
            }
        ],
        "limits": {
            "max_total_gpus": 8,
            "max_hourly_cost_usd": 20,
            "allowed_accelerators": [config.require("accelerator")],
        },
        "tags": tags,
    },
    region,
)
plan = size_platform(spec)
if not plan.ok:
    raise pulumi.RunError("the plan is refused:\n" + "\n".join(plan.problems))
(model,), (pool,), (sizing,) = spec.models, plan.pools, plan.deployments

network = Network("network", NetworkArgs(cluster_name=cluster_name, zones=spec.zones, nat_per_zone=False, tags=tags))
cluster = EksCluster(
    "eks",
    EksClusterArgs(
        cluster_name=cluster_name, environment="dev", region=region, subnet_ids=network.private_subnet_ids, tags=tags
    ),
)
gpus = GpuNodeGroup(
    "gpu",
    GpuNodeGroupArgs(
        cluster=cluster,
        pool_name=pool.name,
        accelerator=spec.pools[0].accelerator,
        instance_type=pool.instance_type,
        sizing=pool,
        subnet_ids_by_zone=network.private_subnet_ids_by_zone,
        gpus_per_replica=[sizing.gpus_per_replica],
        tags=tags,
    ),
)
NodeAddons("node-addons", NodeAddonsArgs(cluster=cluster, region=region, node_groups=[gpus]))

on_cluster = pulumi.ResourceOptions(providers=[cluster.k8s_provider])
keda = Keda("keda", KedaArgs(), opts=on_cluster)
monitoring = MonitoringStack(
    "monitoring", MonitoringStackArgs(observability=spec.observability, environment="dev"), opts=on_cluster
)

namespace = k8s.core.v1.Namespace(
    "serving",
    metadata=k8s.meta.v1.ObjectMetaArgs(name="serving", labels={"pod-security.kubernetes.io/enforce": "restricted"}),
    opts=pulumi.ResourceOptions(provider=cluster.k8s_provider),
)
token = k8s.core.v1.Secret(
    "hf-token",
    metadata=k8s.meta.v1.ObjectMetaArgs(name="hf-token", namespace=namespace.metadata.name),
    type="Opaque",
    string_data={HF_TOKEN_SECRET_KEY: config.require_secret("hfToken")},
    opts=pulumi.ResourceOptions(provider=cluster.k8s_provider),
)
server = VllmService(
    model.name,
    VllmServiceArgs(
        deployment=model,
        sizing=sizing,
        environment="dev",
        namespace=namespace.metadata.name,
        hf_token_secret_name=token.metadata.name,
        labels=tags,
    ),
    pulumi.ResourceOptions(providers=[cluster.k8s_provider], depends_on=[token, monitoring]),
)
QueueDepthAutoscaler(
    f"{model.name}-autoscaler",
    QueueDepthAutoscalerArgs(
        served_model_name=model.name,
        engine="vllm",
        deployment_name=server.deployment_name,
        namespace=server.namespace,
        sizing=sizing.result,
        min_replicas=model.min_replicas,
        max_replicas=model.max_replicas,
        scale_to_zero=False,
        prometheus_url=monitoring.prometheus_url,
    ),
    opts=pulumi.ResourceOptions(providers=[cluster.k8s_provider], depends_on=[keda, monitoring]),
)

pulumi.export("clusterName", cluster.cluster.name)
pulumi.export("modelService", server.service_name)
pulumi.export("tensorParallelSize", sizing.result.tensor_parallel_size)
pulumi.export("hourlyUsdMax", plan.hourly_usd_max)
