"""The GKE side of a platform: a GCP provider, one :class:`GkeCluster` and a :class:`TpuNodePool` per TPU pool.

Built only when some pool of the spec uses a GKE machine type (``spec.gcp`` is then guaranteed by
``check_platform``). The GCP provider is created here, explicitly, from ``spec.gcp``: the spec is the one source of
where GKE lives, and an explicit provider means no ambient ``gcp:project`` config or ``GOOGLE_*`` environment can
silently redirect the resources. Components inherit it through ``providers=`` (they never build providers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from inferplane.components.capacity.sizing import PlatformSizing
from inferplane.components.catalog import INSTANCE_TYPES
from inferplane.components.gcp.gke_cluster import GkeCluster, GkeClusterArgs
from inferplane.components.gcp.tpu_node_pool import TpuNodePool, TpuNodePoolArgs
from inferplane.components.spec.gcp_labels import to_gcp_labels
from inferplane.components.spec.platform_spec import PlatformSpec


@dataclass(frozen=True)
class GkeFoundation:
    """What the GKE side provides to the rest of the program."""

    provider: gcp.Provider
    """The GCP provider every GKE resource uses."""
    cluster: GkeCluster
    """The cluster; ``cluster.provider`` is its Kubernetes provider."""
    tpu_pools: Mapping[str, TpuNodePool]
    """TPU node pools by the spec's pool name."""


def gke_pool_names(spec: PlatformSpec) -> list[str]:
    """Names of the spec's pools that run on GKE."""
    return [pool.name for pool in spec.pools if INSTANCE_TYPES[pool.instance_type].cloud == "gcp"]


def build_gke_foundation(
    spec: PlatformSpec, plan: PlatformSizing, tags: Mapping[str, str], *, parent: pulumi.Resource | None = None
) -> GkeFoundation | None:
    """Declare the GKE cluster and its TPU pools, or nothing (``None``) when no pool is on GKE.

    ``tags`` are the platform's cloud tags; they become GCP labels (lowercase, see :mod:`components.spec.gcp_labels`).
    """
    names = gke_pool_names(spec)
    if not names:
        return None
    assert spec.gcp is not None  # check_platform requires a gcp block for GKE pools
    try:
        labels = to_gcp_labels(tags)
    except ValueError as exc:
        raise pulumi.RunError(f"tags cannot label GCP resources: {exc}") from None

    provider = gcp.Provider(
        "gcp",
        project=spec.gcp.project,
        region=spec.gcp.region,
        zone=spec.gcp.zone,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    cluster = GkeCluster(
        f"inferplane-{spec.environment}",
        GkeClusterArgs(
            project=spec.gcp.project,
            region=spec.gcp.region,
            zone=spec.gcp.zone,
            environment=spec.environment,
            private_endpoint=spec.cluster.endpoint_access == "private",
            master_authorized_cidrs=spec.cluster.public_access_cidrs,
            system_machine_type=spec.gcp.system_machine_type,
            labels=labels,
        ),
        opts=pulumi.ResourceOptions(parent=parent, providers=[provider]),
    )
    sizing = {pool.name: pool for pool in plan.pools}
    pools: dict[str, TpuNodePool] = {}
    for name in names:
        pool = spec.pool(name)
        assert pool.tpu_topology is not None  # check_platform requires a topology for TPU pools
        pools[name] = TpuNodePool(
            name,
            TpuNodePoolArgs(
                cluster=cluster,
                pool_name=name,
                machine_type=pool.instance_type,
                tpu_topology=pool.tpu_topology,
                min_nodes=sizing[name].min_nodes,
                max_nodes=sizing[name].max_nodes,
                capacity="spot" if pool.capacity_type == "spot" else "on_demand",
                disk_size_gb=pool.disk_gib,
                labels={**labels, "inferplane-pool": name},
            ),
            opts=pulumi.ResourceOptions(parent=parent, providers=[provider]),
        )
    return GkeFoundation(provider=provider, cluster=cluster, tpu_pools=pools)
