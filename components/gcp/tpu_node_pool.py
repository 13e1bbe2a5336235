"""``TpuNodePool``: GKE node pools of TPU v5e slices, taking the :class:`GkeCluster` they join.

Slices (cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus and /tpus; cloud.google.com/tpu/docs/v5e, read
2026-11-29; ``../shared/reference/facts.md`` section 4):

* A single-host slice is one VM: ``ct5lp-hightpu-1t`` as 1x1, ``ct5lp-hightpu-4t`` as 2x2, ``ct5lp-hightpu-8t``
  as 2x4. Every node is a whole slice, so one node pool autoscales node by node, and takes no placement policy.
* A multi-host slice (4x4 and up, always on ``ct5lp-hightpu-4t``) spans ``chips / 4`` VMs joined by ICI. GKE
  treats the hosts of a slice as one atomic unit: a multi-host node pool holds exactly one slice, its size is 0
  or the slice's host count, and it autoscales between those two; it needs a COMPACT placement policy with the
  topology. More slices means more node pools, so this component makes one pool per slice: the first
  ``min_nodes / hosts`` slices are kept, the rest scale from zero, and node counts must be whole slices.

Nodes carry the labels GKE itself puts on TPU nodes (accelerator and topology; workloads select on them) plus
inferplane's pool and accelerator labels, and the ``google.com/tpu=present:NoSchedule`` taint. GKE adds that taint
to TPU nodes on its own; declaring it too is what Google's cluster-toolkit does (modules/internal/tpu-definition)
and keeps the plan honest about what workloads must tolerate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_gcp as gcp

from inferplane.components.catalog import INSTANCE_TYPES
from inferplane.components.catalog.instances import SliceShape, slice_shape
from inferplane.components.gcp.gke_cluster import GkeCluster, node_config
from inferplane.components.spec.gcp_labels import label_problems
from inferplane.components.spec.input_errors import InputErrors, raise_input_errors
from inferplane.components.spec.scheduling import (
    ACCELERATOR_LABEL,
    GKE_TPU_ACCELERATOR_LABEL,
    GKE_TPU_TOPOLOGY_LABEL,
    GKE_TPU_V5E_ACCELERATOR,
    POOL_LABEL,
    TPU_TAINT,
)

COMPACT_PLACEMENT = "COMPACT"
"""The only placement policy type GKE supports (pulumi_gcp ``NodePoolPlacementPolicyArgs.type``)."""

GKE_ACCELERATOR_VALUES: dict[str, str] = {"tpu-v5e": GKE_TPU_V5E_ACCELERATOR}
"""GKE's ``cloud.google.com/gke-tpu-accelerator`` value per catalog accelerator (ct5lp machine types)."""


@dataclass(frozen=True)
class TpuNodePoolArgs:
    """Inputs of :class:`TpuNodePool`."""

    cluster: GkeCluster
    """The cluster the pool joins (its project, zone and node service account are used)."""
    pool_name: str
    """The platform's pool name; nodes carry it as ``inferplane.io/pool``."""
    machine_type: str
    """A GKE TPU v5e machine type from the catalog: ``ct5lp-hightpu-1t``, ``-4t`` or ``-8t``."""
    tpu_topology: str
    """Slice topology, one of the machine type's catalog topologies (``2x2``, ``4x4`` ...)."""
    min_nodes: int
    """Nodes kept when idle (from the sizing's ``PoolSizing.min_nodes``); whole slices for multi-host."""
    max_nodes: int
    """Node ceiling (``PoolSizing.max_nodes``); whole slices for multi-host."""
    capacity: Literal["on_demand", "spot"] = "on_demand"
    """Spot VMs are cheaper and can be preempted at any time."""
    disk_size_gb: int = 200
    """Boot disk per node, GB: the serving image and the model cache."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """GCP resource labels for the node VMs."""


def validate(args: TpuNodePoolArgs) -> InputErrors:
    """Every problem with ``args``, each naming its field; empty when the pool can be built."""
    errors: InputErrors = []
    instance = INSTANCE_TYPES.get(args.machine_type)
    if instance is None or instance.cloud != "gcp" or instance.accelerator not in GKE_ACCELERATOR_VALUES:
        known = ", ".join(sorted(n for n, i in INSTANCE_TYPES.items() if i.accelerator in GKE_ACCELERATOR_VALUES))
        errors.append(("machine_type", f"{args.machine_type!r} is not a GKE TPU machine type ({known})"))
    elif args.tpu_topology not in instance.tpu_topologies:
        errors.append(
            (
                "tpu_topology",
                f"{args.tpu_topology} is not a {args.machine_type} topology ({', '.join(instance.tpu_topologies)})",
            )
        )
    if args.min_nodes < 0:
        errors.append(("min_nodes", f"{args.min_nodes} is negative"))
    if args.max_nodes < 1:
        errors.append(("max_nodes", f"{args.max_nodes}: a pool that can never have a node serves nothing"))
    if args.min_nodes > args.max_nodes:
        errors.append(("min_nodes", f"{args.min_nodes} exceeds max_nodes {args.max_nodes}"))
    if not errors:
        shape = slice_shape(args.machine_type, args.tpu_topology)
        if shape.multi_host:
            for field_name in ("min_nodes", "max_nodes"):
                value = getattr(args, field_name)
                if value % shape.hosts:
                    errors.append(
                        (
                            field_name,
                            f"{value} nodes is not a whole number of {args.tpu_topology} slices "
                            f"({shape.hosts} {args.machine_type} hosts each)",
                        )
                    )
    if args.disk_size_gb < 50:
        errors.append(("disk_size_gb", f"{args.disk_size_gb} GB cannot hold a serving image and a model"))
    errors += [("labels", problem) for problem in label_problems(args.labels)]
    return errors


class TpuNodePool(pulumi.ComponentResource):
    """TPU v5e slices on a :class:`GkeCluster`: one node pool, or one per slice when slices span hosts."""

    node_pools: list[gcp.container.NodePool]
    """The GKE node pools: one for single-host slices, one per slice for multi-host."""
    node_selector: dict[str, str]
    """The node labels a workload selects to land on this pool."""

    def __init__(self, name: str, args: TpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # Refuse before registering anything: bad input leaves nothing half-declared.
        raise_input_errors(f"The input properties for TPU node pool {args.pool_name!r} are invalid.", validate(args))

        super().__init__("inferplane:index:TpuNodePool", name, None, opts)

        instance = INSTANCE_TYPES[args.machine_type]
        shape = slice_shape(args.machine_type, args.tpu_topology)
        self.shape = shape
        self.node_selector = {
            GKE_TPU_ACCELERATOR_LABEL: GKE_ACCELERATOR_VALUES[instance.accelerator],
            GKE_TPU_TOPOLOGY_LABEL: args.tpu_topology,
            POOL_LABEL: args.pool_name,
        }
        self.taint = TPU_TAINT
        """The taint every node carries; workloads tolerate it with its Kubernetes spelling."""
        config = _tpu_node_config(args, {**self.node_selector, ACCELERATOR_LABEL: instance.accelerator})

        if not shape.multi_host:
            self.node_pools = [self._single_host_pool(name, args, config)]
        else:
            self.node_pools = self._slice_pools(name, args, config, shape)

        self.register_outputs(
            {
                "nodePools": [pool.name for pool in self.node_pools],
                "nodeSelector": self.node_selector,
                "hostsPerSlice": shape.hosts,
            }
        )

    def _single_host_pool(
        self, name: str, args: TpuNodePoolArgs, config: gcp.container.NodePoolNodeConfigArgs
    ) -> gcp.container.NodePool:
        """One pool of single-host slices, autoscaled node by node between ``min_nodes`` and ``max_nodes``."""
        cluster = args.cluster
        return gcp.container.NodePool(
            f"{name}-nodes",
            project=cluster.project,
            location=cluster.location,
            cluster=cluster.cluster.name,
            node_locations=[cluster.zone],
            initial_node_count=args.min_nodes,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=args.min_nodes, total_max_node_count=args.max_nodes
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=config,
            opts=self._keep_count(),
        )

    def _slice_pools(
        self, name: str, args: TpuNodePoolArgs, config: gcp.container.NodePoolNodeConfigArgs, shape: SliceShape
    ) -> list[gcp.container.NodePool]:
        """One compact-placed pool per multi-host slice: the first ``min_nodes / hosts`` are kept, the rest scale
        between zero and the whole slice."""
        cluster = args.cluster
        kept = args.min_nodes // shape.hosts
        management = gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True)
        keep_count = self._keep_count()
        return [
            gcp.container.NodePool(
                f"{name}-slice-{index}",
                project=cluster.project,
                location=cluster.location,
                cluster=cluster.cluster.name,
                node_locations=[cluster.zone],
                initial_node_count=shape.hosts if index < kept else 0,
                autoscaling=gcp.container.NodePoolAutoscalingArgs(
                    total_min_node_count=shape.hosts if index < kept else 0, total_max_node_count=shape.hosts
                ),
                placement_policy=gcp.container.NodePoolPlacementPolicyArgs(
                    type=COMPACT_PLACEMENT, tpu_topology=args.tpu_topology
                ),
                management=management,
                node_config=config,
                opts=keep_count,
            )
            for index in range(args.max_nodes // shape.hosts)
        ]

    def _keep_count(self) -> pulumi.ResourceOptions:
        """Options of every pool: a child of this component whose node count the autoscaler owns."""
        # initial_node_count only seeds creation (changing it replaces the pool); the autoscaler owns the count
        # afterwards, so later sizing changes move the autoscaling bounds instead.
        return pulumi.ResourceOptions(parent=self, ignore_changes=["initial_node_count"])


def _tpu_node_config(
    args: TpuNodePoolArgs, kubernetes_labels: Mapping[str, str]
) -> gcp.container.NodePoolNodeConfigArgs:
    """The cluster's hardened node configuration for TPU nodes: their labels, the TPU taint, spot or not."""
    return node_config(
        machine_type=args.machine_type,
        service_account=args.cluster.node_service_account_email,
        labels=args.labels,
        kubernetes_labels=kubernetes_labels,
        taints=[
            gcp.container.NodePoolNodeConfigTaintArgs(
                key=TPU_TAINT.key, value=TPU_TAINT.value, effect=TPU_TAINT.eks_effect
            )
        ],
        spot=args.capacity == "spot",
        disk_size_gb=args.disk_size_gb,
    )
