"""Node types of the clusters' system nodes, and the cluster add-ons that land on them without asking.

The system nodes carry everything that is not a model server: the gateway, the served cache embedder, the cluster's
own add-ons (CoreDNS, the EBS CSI controller, KEDA, the cluster autoscaler, the monitoring charts) and a DaemonSet pod
of every node-level add-on. GPU and TPU nodes are tainted, so a pod without a toleration lands here whatever its node
selector says. :mod:`components.capacity.system_nodes` checks that the platform's pods fit these nodes.

EC2 rows (EKS system managed node group): vCPUs and memory from EC2 ``DescribeInstanceTypes``
(``VCpuInfo.DefaultVCpus``, ``MemoryInfo.SizeInMiB``) as bundled with moto 5.2.5; ``eni_max_pods`` is the
awslabs/amazon-eks-ami figure ``# of ENIs x (IPv4 addresses per ENI - 1) + 2``: ``templates/shared/runtime/
eni-max-pods.txt`` at 2bed73dc (the last commit that shipped it, 2026-03-19) and the same formula in
``nodeadm/internal/kubelet/eni_max_pods.go`` (``calculateStandardMaxPods``) over ``instance-info.jsonl`` at 81fec2e
(2026-07-23), read 2026-12-02. ``tests/catalog/test_system_nodes.py`` re-derives every EC2 row from moto's data.

GKE rows (the GKE system node pool): cloud.google.com/compute/docs/general-purpose-machines (E2 and N2 standard
machine types: N vCPUs and 4 x N GB, which the VMs report as GiB), read 2026-12-02.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SystemCloud = Literal["aws", "gcp"]

MNG_MAX_PODS_SMALL = 110
MNG_MAX_PODS_LARGE = 250
MNG_LARGE_VCPUS = 30
"""An EKS managed node group without a custom AMI caps ``maxPods`` in the node's user data: 110 for instances with
fewer than 30 vCPUs, 250 above (EKS user guide, choosing-instance-type.html, "How maxPods is determined", commit
3a23761 of awsdocs/amazon-eks-user-guide). The cap wins over nodeadm's ENI figure; nodeadm still sizes the kubelet's
memory reservation from its own ENI figure (``withDefaultReservedResources`` in ``nodeadm/internal/kubelet/
config.go``), so both numbers are kept."""

GKE_MAX_PODS_PER_NODE = 110
"""GKE Standard's default maximum Pods per node, the Kubernetes default (cloud.google.com/kubernetes-engine/docs/how-to/
flexible-pod-cidr, "Configure maximum Pods per node", read 2026-12-02); ``GkeCluster`` sets no other."""


class SystemNodeType(BaseModel):
    """A node type the system nodes may use: what a node of it has, and how many pods the kubelet admits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="EC2 instance type or GKE machine type.")
    cloud: SystemCloud = Field(description="Which cloud sells it (EKS system node group or GKE system pool).")
    vcpus: int = Field(gt=0, description="vCPUs.")
    memory_mib: int = Field(gt=0, description="Nominal memory, MiB.")
    eni_max_pods: int | None = Field(
        description="EC2 only: the amazon-eks-ami ENI figure, # ENIs x (IPv4 per ENI - 1) + 2, from which nodeadm "
        "sizes the kubelet's memory reservation; None for GKE."
    )

    @property
    def max_pods(self) -> int:
        """Pods the kubelet admits: EKS managed node groups cap the ENI figure; GKE keeps its default."""
        if self.eni_max_pods is None:
            return GKE_MAX_PODS_PER_NODE
        cap = MNG_MAX_PODS_SMALL if self.vcpus < MNG_LARGE_VCPUS else MNG_MAX_PODS_LARGE
        return min(self.eni_max_pods, cap)


def _ec2(name: str, vcpus: int, memory_gib: int, eni_max_pods: int) -> SystemNodeType:
    return SystemNodeType(name=name, cloud="aws", vcpus=vcpus, memory_mib=memory_gib * 1024, eni_max_pods=eni_max_pods)


def _gce(name: str, vcpus: int) -> SystemNodeType:
    # General-purpose standard shapes have 4 GB (GiB on the VM) per vCPU.
    return SystemNodeType(name=name, cloud="gcp", vcpus=vcpus, memory_mib=vcpus * 4 * 1024, eni_max_pods=None)


_ROWS: tuple[SystemNodeType, ...] = (
    # name, vCPU, GiB, ENI max pods
    *(
        row
        for family in ("m7i", "m6i", "m5")
        for row in (
            _ec2(f"{family}.large", 2, 8, 29),
            _ec2(f"{family}.xlarge", 4, 16, 58),
            _ec2(f"{family}.2xlarge", 8, 32, 58),
            _ec2(f"{family}.4xlarge", 16, 64, 234),
        )
    ),
    *(_gce(f"{family}-standard-{vcpus}", vcpus) for family in ("e2", "n2") for vcpus in (2, 4, 8, 16)),
)

SYSTEM_NODE_TYPES: Mapping[str, SystemNodeType] = {row.name: row for row in _ROWS}
"""Every node type the system nodes may use, by name."""

DEFAULT_EKS_SYSTEM_INSTANCE_TYPE = "m7i.2xlarge"
"""The EKS system node group's type when the stack names none: the smallest m7i on which the default gateway fits,
2 pods of 2 CPUs (Envoy's and a processor worker's) at the floor on the default 2 nodes, 8 at the ceiling on the 4 the
group may grow to; an m7i.xlarge node (3.9 CPUs allocatable) holds one such pod, an m7i.2xlarge three."""
DEFAULT_GKE_SYSTEM_MACHINE_TYPE = "e2-standard-8"
"""The GKE system pool's machine type when the stack names none: the smallest e2-standard on which the default
gateway fits its pool (two 2-CPU pods on the single node outside prod; eight on three)."""


def system_node_types(cloud: SystemCloud) -> tuple[SystemNodeType, ...]:
    """The cloud's system node types, smallest first (fewest vCPUs, then name)."""
    return tuple(sorted((r for r in _ROWS if r.cloud == cloud), key=lambda r: (r.vcpus, r.name)))


def get_system_node_type(name: str) -> SystemNodeType:
    """Look a system node type up; the error lists the known ones."""
    try:
        return SYSTEM_NODE_TYPES[name]
    except KeyError:
        known = ", ".join(sorted(SYSTEM_NODE_TYPES))
        raise KeyError(f"unknown system node type {name!r}; known: {known}") from None


class ClusterAddonPod(BaseModel):
    """A cluster add-on's pod that lands on the system nodes, with the requests its upstream manifest sets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Workload name as it appears in the cluster.")
    cloud: SystemCloud = Field(description="Whose cluster runs it.")
    per_node: bool = Field(description="A DaemonSet: one pod on every system node; else a Deployment of ``replicas``.")
    replicas: int = Field(ge=1, description="Pods of a Deployment (1 for a DaemonSet: its pod per node).")
    serving_only: bool = Field(
        default=False, description="Installed only on a cluster that serves models (KEDA); else on every cluster."
    )
    cpu_millicores: int = Field(ge=0, description="CPU request of one pod (all its containers), millicores.")
    memory_mib: int = Field(ge=0, description="Memory request of one pod (all its containers), MiB.")
    source: str = Field(description="Where the requests were read.")


CLUSTER_ADDON_PODS: tuple[ClusterAddonPod, ...] = (
    ClusterAddonPod(
        name="aws-node",
        cloud="aws",
        per_node=True,
        replicas=1,
        cpu_millicores=25,
        memory_mib=0,
        source="aws/amazon-vpc-cni-k8s charts/aws-vpc-cni/values.yaml (chart 1.23.1, b52188387 2026-08-20): "
        "resources.requests.cpu 25m; the network policy agent container requests nothing (nodeAgent.resources {})",
    ),
    ClusterAddonPod(
        name="kube-proxy",
        cloud="aws",
        per_node=True,
        replicas=1,
        cpu_millicores=100,
        memory_mib=0,
        source="the EKS kube-proxy add-on's DaemonSet requests cpu 100m and no memory (aws/containers-roadmap#1509 "
        "and #2852, which ask for them to become configurable); third-party: the add-on's manifest is not public",
    ),
    ClusterAddonPod(
        name="ebs-csi-node",
        cloud="aws",
        per_node=True,
        replicas=1,
        cpu_millicores=30,
        memory_mib=104,
        source="kubernetes-sigs/aws-ebs-csi-driver chart 2.64.0 (429e202e 2026-08-19): node.resources 10m/40Mi "
        "(ebs-plugin), node-driver-registrar and liveness-probe 10m/32Mi each (templates/_node.tpl defaults)",
    ),
    ClusterAddonPod(
        name="coredns",
        cloud="aws",
        per_node=False,
        replicas=2,
        cpu_millicores=100,
        memory_mib=70,
        source="CoreDNS's Kubernetes manifest (kubernetes/kubernetes cluster/addons/dns/coredns): requests cpu "
        "100m, memory 70Mi; the EKS add-on runs 2 replicas by default",
    ),
    ClusterAddonPod(
        name="ebs-csi-controller",
        cloud="aws",
        per_node=False,
        replicas=2,
        cpu_millicores=50,
        memory_mib=192,
        source="kubernetes-sigs/aws-ebs-csi-driver chart 2.64.0: controller.replicaCount 2; ebs-plugin, "
        "csi-provisioner, csi-attacher, csi-resizer at controller.resources 10m/40Mi, liveness-probe 10m/32Mi "
        "(the snapshotter runs only where snapshot CRDs exist; this platform installs none)",
    ),
    *(
        ClusterAddonPod(
            name=f"keda-{part}",
            cloud=cloud,
            per_node=False,
            replicas=1,
            serving_only=True,
            cpu_millicores=100,
            memory_mib=100,
            source=f"kedacore/charts keda/values.yaml, chart 2.20.2 (the pinned one): resources.{key}.requests "
            "cpu 100m, memory 100Mi; replicaCount 1",
        )
        for cloud in ("aws", "gcp")
        for part, key in (
            ("operator", "operator"),
            ("metrics-apiserver", "metricServer"),
            ("admission-webhooks", "webhooks"),
        )
    ),
)
"""Add-on pods on the system nodes that request CPU or memory. Left out because they request nothing (the scheduler
counts them as zero, though they use memory): eks-pod-identity-agent (aws/eks-pod-identity-agent chart,
``resources: {}``), the cluster autoscaler and the kube-prometheus-stack pods other than Prometheus (Alertmanager,
Grafana, the operator, kube-state-metrics, node-exporter: the charts' defaults are ``{}`` and ``chart_values`` sets
none). Prometheus itself requests what ``components.capacity.prometheus`` sizes from the series it holds, and the
system-node check counts it there, not in this table.
GKE's own system pods (kube-dns, fluentbit-gke, gke-metrics-agent, pdcsi-node, ...) are not listed: their requests
vary by GKE version and are not documented as figures; the GKE check counts only what this platform adds there."""


def cluster_addon_pods(cloud: SystemCloud) -> tuple[ClusterAddonPod, ...]:
    """The add-on pods of ``cloud``'s cluster that request resources on its system nodes."""
    return tuple(pod for pod in CLUSTER_ADDON_PODS if pod.cloud == cloud)
