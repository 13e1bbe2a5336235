"""The AWS half of a stack: network, EKS cluster, one GPU node group per EC2 pool, node add-ons.

GKE TPU pools (instance types of cloud ``gcp``) are left to the GKE composition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.aws.eks_cluster import EksCluster, EksClusterArgs
from inferplane.components.aws.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from inferplane.components.aws.network import Network, NetworkArgs
from inferplane.components.aws.node_addons import NodeAddons, NodeAddonsArgs
from inferplane.components.capacity.sizing import PlatformSizing
from inferplane.components.catalog import get_instance_type
from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.components.spec.tags import PLATFORM_TAG_KEYS


@dataclass(frozen=True)
class AwsFoundation:
    """What the AWS foundation built, for the components that come after it."""

    network: Network
    cluster: EksCluster
    node_groups: Mapping[str, GpuNodeGroup]
    """GPU node groups by pool name (EC2 pools only)."""
    addons: NodeAddons
    k8s_provider: k8s.Provider
    """The cluster's single Kubernetes provider; pass it to every Kubernetes component."""


def platform_tags(spec: PlatformSpec) -> dict[str, str]:
    """The spec's tags plus the environment and the tool that manages the resource (the spec may not set these
    keys: :data:`~inferplane.components.spec.tags.PLATFORM_TAG_KEYS`)."""
    own = dict(zip(PLATFORM_TAG_KEYS, (spec.environment, "pulumi", "inferplane"), strict=True))
    return {**spec.tags, **own}


def cluster_name_for(stack: str) -> str:
    """The EKS cluster's name for a stack."""
    return f"inferplane-{stack}"


def build_aws_foundation(
    spec: PlatformSpec, plan: PlatformSizing, tags: Mapping[str, str], *, parent: pulumi.Resource | None = None
) -> AwsFoundation:
    """Declare the network, cluster, GPU node groups and node add-ons ``spec`` asks for, sized by ``plan``.

    ``parent``: the component that owns them (:class:`~inferplane.components.platform.Platform`); ``None`` in the
    stack's own program, where they sit at the top of the stack.
    """
    cluster_name = cluster_name_for(pulumi.get_stack())
    opts = pulumi.ResourceOptions(parent=parent)
    network = _network(spec, cluster_name, tags, opts=opts)
    cluster = _cluster(spec, cluster_name, network, tags, opts=opts)
    node_groups = _gpu_node_groups(spec, plan, cluster, network, tags, opts=opts)
    addons = NodeAddons(
        "node-addons",
        NodeAddonsArgs(cluster=cluster, region=spec.region, node_groups=list(node_groups.values())),
        opts=opts,
    )
    return AwsFoundation(
        network=network, cluster=cluster, node_groups=node_groups, addons=addons, k8s_provider=cluster.k8s_provider
    )


def _network(
    spec: PlatformSpec, cluster_name: str, tags: Mapping[str, str], *, opts: pulumi.ResourceOptions
) -> Network:
    """The VPC the cluster, its nodes and the caches live in."""
    return Network(
        "network",
        NetworkArgs(
            cluster_name=cluster_name,
            zones=spec.zones,
            # One NAT per zone in prod (a zone outage cannot strand the others); one shared elsewhere.
            nat_per_zone=spec.environment == "prod",
            tags=tags,
            environment=spec.environment,
            flow_log_retention_days=spec.log_retention_days,
        ),
        opts=opts,
    )


def _cluster(
    spec: PlatformSpec, cluster_name: str, network: Network, tags: Mapping[str, str], *, opts: pulumi.ResourceOptions
) -> EksCluster:
    """The EKS cluster, with its system nodes, on the network's private subnets."""
    return EksCluster(
        "eks",
        EksClusterArgs(
            cluster_name=cluster_name,
            environment=spec.environment,
            region=spec.region,
            subnet_ids=network.private_subnet_ids,
            kubernetes_version=spec.cluster.kubernetes_version,
            endpoint_access=spec.cluster.endpoint_access,
            public_access_cidrs=spec.cluster.public_access_cidrs,
            log_types=spec.cluster.log_types,
            log_retention_days=spec.log_retention_days,
            admin_principal_arns=spec.cluster.admin_principals,
            system_instance_type=spec.cluster.system_instance_type,
            system_nodes=spec.cluster.system_nodes,
            tags=tags,
        ),
        opts=opts,
    )


def _gpu_node_groups(
    spec: PlatformSpec,
    plan: PlatformSizing,
    cluster: EksCluster,
    network: Network,
    tags: Mapping[str, str],
    *,
    opts: pulumi.ResourceOptions,
) -> dict[str, GpuNodeGroup]:
    """One GPU node group per EC2 pool, in the spec's order, sized by the plan (GKE pools are skipped)."""
    sizing = {pool.name: pool for pool in plan.pools}
    node_groups: dict[str, GpuNodeGroup] = {}
    for pool in spec.pools:
        if get_instance_type(pool.instance_type).cloud != "aws":
            continue
        node_groups[pool.name] = GpuNodeGroup(
            f"gpu-{pool.name}",
            GpuNodeGroupArgs(
                cluster=cluster,
                pool_name=pool.name,
                accelerator=pool.accelerator,
                instance_type=pool.instance_type,
                sizing=sizing[pool.name],
                subnet_ids_by_zone=network.private_subnet_ids_by_zone,
                gpus_per_replica=[d.gpus_per_replica for d in plan.deployments if d.pool == pool.name],
                capacity_type=pool.capacity_type,
                capacity_reservation_id=pool.capacity_reservation_id,
                zone=pool.zone,
                efa=pool.efa,
                disk_gib=pool.disk_gib,
                ami_family=pool.ami_family,
                tags=tags,
            ),
            opts=opts,
        )
    return node_groups
