"""``GpuNodeGroup``: an EKS managed node group of NVIDIA GPU instances for model servers.

A separate component that takes the :class:`~components.aws.eks_cluster.EksCluster` as an input, as pulumi-eks's
``ManagedNodeGroup`` does, so pools come and go without touching the control plane.

What a node gets:

* a launch template: IMDSv2 only with hop limit 1 (pods cannot reach the node role), an encrypted gp3 root volume
  of ``disk_gib`` (serving images are 10-20 GB; provisioned at 6000 IOPS / 500 MiB/s so image pulls are not what
  a cold start waits on), and instance tags on instances, volumes and interfaces;
* the instance's local NVMe as the model cache. AL2023: a nodeadm ``NodeConfig`` MIME part with
  ``spec.instance.localStorage.strategy: RAID0``, which stripes every instance-store disk (mounted at
  ``/mnt/k8s-disks/0``) and moves containerd's and kubelet's directories onto it, so a pod's ``emptyDir`` model
  cache lives on NVMe (the same part terraform-aws-eks's EFA/GPU examples pass as ``cloudinit_pre_nodeadm``).
  Bottlerocket: the ``apiclient ephemeral-storage init`` / ``bind`` bootstrap commands, exactly what Karpenter
  emits for Bottlerocket with ``instanceStorePolicy: RAID0`` (aws/karpenter-provider-aws, Bottlerocket bootstrap).
  EKS merges either with its own bootstrap configuration because the AMI type is EKS-provided. Instance types
  without instance storage get no user data. Sources are third-party code read 2026-11-29 (no AWS page was
  reachable); they agree with one another;
* the accelerated AMI: ``AL2023_x86_64_NVIDIA`` (driver installed, device plugin installed by
  :class:`~components.aws.node_addons.NodeAddons`) or ``BOTTLEROCKET_x86_64_NVIDIA`` (driver and device plugin built
  in);
* the taint :data:`~components.spec.scheduling.GPU_TAINT` in EKS spelling and the pool, accelerator and AMI-family
  labels, so only GPU workloads land here and they can pick their pool;
* on-demand, spot or a Capacity Block (launch template market type ``capacity-block`` targeting the reservation,
  subnets of the reservation's zone only: docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html);
* EFA on request: one EFA interface per network card (``efa`` on card 0, ``efa-only`` on the others, which need no
  IP address; both are EC2 ``NetworkInterfaceType`` values in botocore's ec2 model) and a cluster placement group,
  in one zone;
* scaling bounds from :class:`~components.capacity.sizing.PoolSizing` (desired = min; the cluster autoscaler owns it
  after creation) and the cluster-autoscaler tags: auto-discovery (``k8s.io/cluster-autoscaler/enabled`` and
  ``.../<cluster>``) and node templates for scale-from-zero (GPU count, labels, taint), set on the node group and,
  because EKS does not copy node-group tags to the Auto Scaling group it creates (aws/containers-roadmap#608), on that
  group too (kubernetes/autoscaler, cluster-autoscaler/cloudprovider/aws/README.md, "Auto-Discovery Setup", read
  2026-11-29).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_aws as aws

from inferplane.components.aws.eks_cluster import IMDS_V2_ONLY, EksCluster, instance_tag_specifications, root_volume
from inferplane.components.capacity.sizing import PoolSizing
from inferplane.components.catalog import INSTANCE_TYPES, AcceleratorId, InstanceType
from inferplane.components.spec.input_errors import raise_input_errors
from inferplane.components.spec.platform_spec import AmiFamily, CapacityType
from inferplane.components.spec.scheduling import (
    ACCELERATOR_LABEL,
    EFA_RESOURCE,
    GPU_TAINT,
    NVIDIA_GPU_RESOURCE,
    POOL_LABEL,
)

AMI_FAMILY_LABEL = "inferplane.io/ami-family"
"""``al2023`` or ``bottlerocket``: the NVIDIA device plugin runs only where the AMI does not bring its own."""

EksAmiType = Literal["AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA"]
EksCapacityType = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"]

AMI_TYPES: dict[AmiFamily, EksAmiType] = {
    "al2023": "AL2023_x86_64_NVIDIA",
    "bottlerocket": "BOTTLEROCKET_x86_64_NVIDIA",
}
"""EKS ``AMITypes`` values (botocore eks 2017-11-01 model; checked in the tests)."""

CAPACITY_TYPES: dict[CapacityType, EksCapacityType] = {
    "on_demand": "ON_DEMAND",
    "spot": "SPOT",
    "capacity_block": "CAPACITY_BLOCK",
}
"""EKS ``CapacityTypes`` values (botocore eks 2017-11-01 model; checked in the tests)."""

ROOT_DEVICE = "/dev/xvda"
BOTTLEROCKET_DATA_DEVICE = "/dev/xvdb"
"""Bottlerocket boots from a small OS volume (``/dev/xvda``) and keeps images and pods on ``/dev/xvdb``."""
BOTTLEROCKET_OS_GIB = 4

ROOT_IOPS = 6000
ROOT_THROUGHPUT_MIBPS = 500

CA_TAG_PREFIX = "k8s.io/cluster-autoscaler"

AL2023_LOCAL_NVME_USER_DATA = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  instance:
    localStorage:
      strategy: RAID0

--//--
"""
"""nodeadm configuration striping the instance-store NVMe disks (RAID0) under containerd and kubelet."""

BOTTLEROCKET_LOCAL_NVME_USER_DATA = """[settings.bootstrap-commands.k8s-ephemeral-storage]
commands = [
  ["apiclient", "ephemeral-storage", "init"],
  ["apiclient", "ephemeral-storage", "bind", "--dirs", "/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods"],
]
essential = true
mode = "always"
"""
"""Bottlerocket settings doing the same: stripe the instance-store disks and bind the runtime directories onto them."""


@dataclass(frozen=True)
class GpuNodeGroupArgs:
    """Inputs of :class:`GpuNodeGroup`."""

    cluster: EksCluster
    """The cluster the nodes join; provides the name, node role, Kubernetes version and security group."""
    pool_name: str
    """Pool name; the value of the pool label model servers select."""
    accelerator: AcceleratorId
    """Catalog accelerator; must be what ``instance_type`` carries."""
    instance_type: str
    """Catalog EC2 instance type."""
    sizing: PoolSizing
    """Node bounds derived from the deployments placed on the pool."""
    subnet_ids_by_zone: Mapping[str, pulumi.Input[str]]
    """Private subnet per zone (``Network.private_subnet_ids_by_zone``)."""
    gpus_per_replica: Sequence[int] = ()
    """GPUs each deployment on the pool takes per replica; none may exceed a node's."""
    capacity_type: CapacityType = "on_demand"
    """on_demand, spot or capacity_block."""
    capacity_reservation_id: str | None = None
    """The Capacity Block reservation (``cr-...``); required for, and only for, capacity_block."""
    zone: str | None = None
    """Pin the group to one zone; required for capacity blocks (the reservation's zone) and EFA (placement group)."""
    efa: bool = False
    """EFA interfaces on every network card plus a cluster placement group."""
    disk_gib: int = 200
    """Root (AL2023) or data (Bottlerocket) volume, GiB."""
    ami_family: AmiFamily = "al2023"
    """al2023 (default) or bottlerocket."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Added to every taggable child."""


def _check(args: GpuNodeGroupArgs) -> tuple[list[tuple[str, str]], InstanceType | None]:
    errors: list[tuple[str, str]] = []
    add = errors.append
    instance = INSTANCE_TYPES.get(args.instance_type)
    if instance is None:
        add(("instance_type", f"unknown instance type {args.instance_type!r}"))
    elif instance.cloud != "aws":
        add(("instance_type", f"{args.instance_type} is a GKE machine type, not an EC2 instance type"))
        instance = None
    if instance is not None:
        if instance.accelerator != args.accelerator:
            add(("accelerator", f"{args.instance_type} carries {instance.accelerator}, not {args.accelerator}"))
        if args.efa and not instance.supports_efa:
            add(("efa", f"{args.instance_type} does not support EFA"))
        if args.capacity_type == "capacity_block" and not instance.capacity_block:
            add(("capacity_type", f"{args.instance_type} is not sold as a capacity block"))
        for index, gpus in enumerate(args.gpus_per_replica):
            if gpus > instance.accelerators_per_node:
                add(
                    (
                        f"gpus_per_replica[{index}]",
                        f"{gpus} GPUs per replica exceeds the {instance.accelerators_per_node} per "
                        f"{args.instance_type} node",
                    )
                )
    for index, gpus in enumerate(args.gpus_per_replica):
        if gpus < 1:
            add((f"gpus_per_replica[{index}]", f"must be at least 1, got {gpus}"))
    if args.capacity_type == "capacity_block":
        if args.capacity_reservation_id is None:
            add(("capacity_reservation_id", "a capacity block needs its reservation id (cr-...)"))
        if args.zone is None:
            add(("zone", "a capacity block needs the reservation's zone"))
    elif args.capacity_reservation_id is not None:
        add(("capacity_reservation_id", "only capacity_block groups take a reservation id"))
    if args.efa and args.zone is None:
        add(("zone", "EFA groups need one zone: a cluster placement group lives in a single zone"))
    if args.zone is not None and args.zone not in args.subnet_ids_by_zone:
        add(("zone", f"{args.zone!r} has no subnet ({', '.join(args.subnet_ids_by_zone)})"))
    if not args.subnet_ids_by_zone:
        add(("subnet_ids_by_zone", "at least one subnet is needed"))
    if not 50 <= args.disk_gib <= 16384:
        add(("disk_gib", f"between 50 and 16384 GiB, got {args.disk_gib}"))
    if args.sizing.name != args.pool_name:
        add(("sizing", f"sizing is for pool {args.sizing.name!r}, not {args.pool_name!r}"))
    if args.sizing.instance_type != args.instance_type:
        add(("sizing", f"sizing is for {args.sizing.instance_type}, not {args.instance_type}"))
    if args.sizing.max_nodes < 1:
        add(("sizing.max_nodes", "a node group holds at least one node at max scale"))
    if args.sizing.min_nodes > args.sizing.max_nodes:
        add(("sizing.min_nodes", f"{args.sizing.min_nodes} exceeds max_nodes {args.sizing.max_nodes}"))
    return errors, instance


def node_labels(pool_name: str, accelerator: str, ami_family: AmiFamily) -> dict[str, str]:
    """The Kubernetes labels every node of a pool carries."""
    return {POOL_LABEL: pool_name, ACCELERATOR_LABEL: accelerator, AMI_FAMILY_LABEL: ami_family}


def autoscaler_tags(cluster_name: str, labels: Mapping[str, str], gpus: int, efa_interfaces: int) -> dict[str, str]:
    """Cluster-autoscaler auto-discovery and node-template tags, so a group at zero nodes can still be chosen."""
    tags = {f"{CA_TAG_PREFIX}/enabled": "true", f"{CA_TAG_PREFIX}/{cluster_name}": "owned"}
    tags[f"{CA_TAG_PREFIX}/node-template/resources/{NVIDIA_GPU_RESOURCE}"] = str(gpus)
    if efa_interfaces:
        tags[f"{CA_TAG_PREFIX}/node-template/resources/{EFA_RESOURCE}"] = str(efa_interfaces)
    for key, value in labels.items():
        tags[f"{CA_TAG_PREFIX}/node-template/label/{key}"] = value
    tags[f"{CA_TAG_PREFIX}/node-template/taint/{GPU_TAINT.key}"] = f"{GPU_TAINT.value}:{GPU_TAINT.kubernetes_effect}"
    return tags


def _autoscaling_group_name(resources: Sequence[aws.eks.outputs.NodeGroupResource] | None) -> str:
    """The Auto Scaling group EKS created for a managed node group (one per group)."""
    groups = resources[0].autoscaling_groups if resources else None
    name = groups[0].name if groups else None
    if name is None:
        raise ValueError("EKS reported no Auto Scaling group for the node group")
    return name


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class GpuNodeGroup(pulumi.ComponentResource):
    """An EKS managed node group of GPU instances, with its launch template and autoscaler tags.

    Children (``name`` = this component's name): ``{name}-placement`` (EFA only), ``{name}-lt``, ``{name}-nodes``
    and one ``{name}-asg-tag:<key>`` (``aws.autoscaling.Tag``) per cluster-autoscaler tag.
    """

    node_group: aws.eks.NodeGroup
    launch_template: aws.ec2.LaunchTemplate
    placement_group: aws.ec2.PlacementGroup | None
    labels: dict[str, str]
    """Node labels, for selectors."""
    autoscaler_tags: dict[str, str]
    ami_family: AmiFamily
    efa: bool

    def __init__(self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:GpuNodeGroup", name, None, opts)
        errors, instance = _check(args)
        raise_input_errors(f"The input properties for GPU node group {args.pool_name!r} are invalid.", errors)
        assert instance is not None  # _check reports a missing instance type

        cluster = args.cluster
        tags = {**cluster.tags, **args.tags}
        self.ami_family = args.ami_family
        self.efa = args.efa
        self.labels = node_labels(args.pool_name, args.accelerator, args.ami_family)
        efa_interfaces = instance.efa_max_interfaces if args.efa else 0
        self.autoscaler_tags = autoscaler_tags(
            cluster.cluster_name, self.labels, instance.accelerators_per_node, efa_interfaces
        )

        self.placement_group = None
        if args.efa:
            self.placement_group = aws.ec2.PlacementGroup(
                f"{name}-placement", strategy="cluster", tags=tags, opts=pulumi.ResourceOptions(parent=self)
            )
        self.launch_template = self._launch_template(name, args, instance, tags, self.placement_group)
        self.node_group = self._node_group(name, args, tags, self.launch_template)
        self._autoscaling_group_tags(name, self.node_group, self.autoscaler_tags)
        self.register_outputs({"nodeGroupName": self.node_group.node_group_name, "labels": self.labels})

    def _launch_template(
        self,
        name: str,
        args: GpuNodeGroupArgs,
        instance: InstanceType,
        tags: Mapping[str, str],
        placement_group: aws.ec2.PlacementGroup | None,
    ) -> aws.ec2.LaunchTemplate:
        """What each node boots with: IMDSv2, volumes, NVMe user data, EFA interfaces, placement, capacity block."""
        capacity_block = args.capacity_type == "capacity_block"
        return aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"GPU pool {args.pool_name} of EKS cluster {args.cluster.cluster_name}",
            metadata_options=IMDS_V2_ONLY,
            block_device_mappings=self._volumes(args),
            user_data=self._user_data(args, instance),
            network_interfaces=self._efa_interfaces(args.cluster, instance) if args.efa else None,
            placement=(
                aws.ec2.LaunchTemplatePlacementArgs(group_name=placement_group.name)
                if placement_group is not None
                else None
            ),
            # A capacity block is bought for one instance type; EKS wants it in the template, not the node group.
            instance_type=args.instance_type if capacity_block else None,
            instance_market_options=(
                aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
                if capacity_block
                else None
            ),
            capacity_reservation_specification=(
                aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                    capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                        capacity_reservation_id=args.capacity_reservation_id
                    )
                )
                if capacity_block
                else None
            ),
            tag_specifications=instance_tag_specifications(tags),
            update_default_version=True,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _node_group(
        self, name: str, args: GpuNodeGroupArgs, tags: Mapping[str, str], launch_template: aws.ec2.LaunchTemplate
    ) -> aws.eks.NodeGroup:
        """The managed node group: accelerated AMI, GPU taint, pool labels, autoscaler tags, bounds from sizing."""
        cluster = args.cluster
        zones = [args.zone] if args.zone is not None else list(args.subnet_ids_by_zone)
        sizing = args.sizing
        return aws.eks.NodeGroup(
            f"{name}-nodes",
            cluster_name=cluster.cluster.name,
            node_group_name_prefix=f"{cluster.cluster_name}-{args.pool_name}-",
            node_role_arn=cluster.node_role.arn,
            subnet_ids=[args.subnet_ids_by_zone[zone] for zone in zones],
            version=cluster.kubernetes_version,
            ami_type=AMI_TYPES[args.ami_family],
            capacity_type=CAPACITY_TYPES[args.capacity_type],
            instance_types=None if args.capacity_type == "capacity_block" else [args.instance_type],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=sizing.min_nodes, desired_size=sizing.min_nodes, max_size=sizing.max_nodes
            ),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=launch_template.id, version=launch_template.latest_version.apply(str)
            ),
            labels=self.labels,
            taints=[aws.eks.NodeGroupTaintArgs(key=GPU_TAINT.key, value=GPU_TAINT.value, effect=GPU_TAINT.eks_effect)],
            # Replace one node at a time: each GPU node carries whole replicas of a model.
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=True),
            tags={**tags, **self.autoscaler_tags},
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[cluster.addons["vpc-cni"], cluster.addons["kube-proxy"]],
                ignore_changes=["scalingConfig.desiredSize"],
            ),
        )

    def _autoscaling_group_tags(
        self, name: str, node_group: aws.eks.NodeGroup, tags: Mapping[str, str]
    ) -> list[aws.autoscaling.Tag]:
        """The autoscaler tags again on the Auto Scaling group EKS created, which does not inherit the group's."""
        asg_name = node_group.resources.apply(_autoscaling_group_name)
        return [
            aws.autoscaling.Tag(
                f"{name}-asg-tag:{key}",
                autoscaling_group_name=asg_name,
                tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for key, value in tags.items()
        ]

    @staticmethod
    def _volumes(args: GpuNodeGroupArgs) -> list[aws.ec2.LaunchTemplateBlockDeviceMappingArgs]:
        data = root_volume(
            BOTTLEROCKET_DATA_DEVICE if args.ami_family == "bottlerocket" else ROOT_DEVICE,
            args.disk_gib,
            iops=ROOT_IOPS,
            throughput=ROOT_THROUGHPUT_MIBPS,
        )
        if args.ami_family == "bottlerocket":
            return [root_volume(ROOT_DEVICE, BOTTLEROCKET_OS_GIB), data]
        return [data]

    @staticmethod
    def _user_data(args: GpuNodeGroupArgs, instance: InstanceType) -> str | None:
        if instance.local_nvme_gb == 0:
            return None
        if args.ami_family == "bottlerocket":
            return _b64(BOTTLEROCKET_LOCAL_NVME_USER_DATA)
        return _b64(AL2023_LOCAL_NVME_USER_DATA)

    @staticmethod
    def _efa_interfaces(
        cluster: EksCluster, instance: InstanceType
    ) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
        # With interfaces in the template, EKS no longer attaches the cluster security group itself.
        groups = [cluster.cluster_security_group_id]
        return [
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                device_index=0 if card == 0 else 1,
                network_card_index=card,
                interface_type="efa" if card == 0 else "efa-only",
                delete_on_termination="true",
                security_groups=groups,
            )
            for card in range(instance.efa_max_interfaces)
        ]
