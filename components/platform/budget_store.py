"""The GKE gateway's shared budget store: a :class:`~inferplane.components.gcp.memorystore.MemorystoreRedis` in the GKE
cluster's network, declared when the GKE cluster serves a model.

Sized like the EKS cache (:mod:`components.platform.cache`) from ``cache.replicas``: two or more nodes there mean a
multi-AZ replication group, here ``STANDARD_HA`` (a failover replica in another zone). Prod always gets
``STANDARD_HA``, even with the cache off (``check_platform`` asks prod for two cache nodes only when it is on). The
instance exists even when ``cache.enabled`` is off: it holds the budgets, never cached responses.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from inferplane.components.gateway.renderer import cluster_of
from inferplane.components.gcp.memorystore import MemorystoreRedis, MemorystoreRedisArgs
from inferplane.components.platform.gke_foundation import GkeFoundation
from inferplane.components.spec.gcp_labels import to_gcp_labels
from inferplane.components.spec.platform_spec import PlatformSpec


def build_budget_store(
    spec: PlatformSpec, gke: GkeFoundation | None, tags: Mapping[str, str], *, parent: pulumi.Resource | None = None
) -> MemorystoreRedis | None:
    """The store, or nothing (``None``) when no model is served on GKE."""
    if gke is None or not any(cluster_of(spec, d) == "gke" for d in spec.models):
        return None
    assert spec.gcp is not None  # check_platform requires a gcp block for GKE pools
    return MemorystoreRedis(
        f"inferplane-{spec.environment}-budgets",
        MemorystoreRedisArgs(
            project=spec.gcp.project,
            region=spec.gcp.region,
            zone=spec.gcp.zone,
            network=gke.cluster.network.id,
            environment=spec.environment,
            high_availability=spec.environment == "prod" or spec.cache.replicas >= 2,
            key_ring=gke.cluster.key_ring.id,
            labels=to_gcp_labels(tags),  # the GKE foundation already refused tags that are no labels
        ),
        opts=pulumi.ResourceOptions(parent=parent, providers=[gke.provider]),
    )
