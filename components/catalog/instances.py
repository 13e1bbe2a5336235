"""Node types that carry accelerators: EC2 GPU instance types and GKE TPU v5e machine types.

EC2 rows: EC2 ``DescribeInstanceTypes`` (``GpuInfo``, ``VCpuInfo.DefaultVCpus``, ``MemoryInfo.SizeInMiB``,
``NetworkInfo.EfaInfo.MaximumEfaInterfaces``, ``NetworkInfo.NetworkPerformance``, ``InstanceStorageInfo.TotalSizeInGB``,
``SupportedUsageClasses``) as
bundled with moto 5.2.5, read 2026-11-29. ``tests/catalog/test_catalog.py`` re-reads every row through boto3 against
that data, so a typo here fails the suite. Preflight checks the same facts against the live account.

GKE rows: cloud.google.com/tpu/docs/v5e (machine types and single-host topologies), read 2026-11-29.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.catalog.accelerators import AcceleratorId

Cloud = Literal["aws", "gcp"]
QuotaFamily = Literal["P", "G", "TPU"]
"""EC2 vCPU quota bucket (Running On-Demand P / G and VT instances) or GKE TPU chips."""


class InstanceType(BaseModel):
    """One node type: what a node of it has, and what it can be bought as."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="EC2 instance type or GKE machine type.")
    cloud: Cloud = Field(description="Which cloud sells it.")
    accelerator: AcceleratorId = Field(description="The accelerator on every node of this type.")
    accelerators_per_node: int = Field(gt=0, description="GPUs (or TPU chips) per node.")
    vcpus: int = Field(gt=0, description="Default vCPUs.")
    memory_mib: int = Field(gt=0, description="Host memory, MiB.")
    efa_max_interfaces: int = Field(ge=0, description="Maximum EFA interfaces; 0 means EFA is not supported.")
    network_gbps: float | None = Field(
        gt=0,
        description="Sustained network bandwidth of a node, Gbit/s (EC2's ``NetworkPerformance``; the baseline of an "
        '"Up to" type, not its burst); what EFA and TCP share. None: not in the catalog (GKE TPU machine types).',
    )
    local_nvme_gb: int = Field(ge=0, description="Instance-store NVMe, GB (10^9); 0 when there is none.")
    capacity_block: bool = Field(description="Sold as EC2 Capacity Blocks for ML (usage class capacity-block).")
    spot: bool = Field(description="Sold as spot (EC2) or preemptible/spot (GKE).")
    quota_family: QuotaFamily = Field(description="Which vCPU (or TPU chip) quota bucket it draws from.")
    tpu_topologies: tuple[str, ...] = Field(
        default=(), description="GKE TPU slice topologies a node pool of this machine type can form."
    )

    @property
    def supports_efa(self) -> bool:
        """Whether any EFA interface can be attached."""
        return self.efa_max_interfaces > 0

    @property
    def efa_interface_gbps(self) -> float | None:
        """Line rate of one EFA interface: the node's bandwidth spread over its interfaces (100 Gbit/s on a p5, 200
        on a p5en); None without EFA."""
        if not self.supports_efa or self.network_gbps is None:
            return None
        return self.network_gbps / self.efa_max_interfaces

    @property
    def memory_gib(self) -> float:
        """Host memory, GiB."""
        return self.memory_mib / 1024


def _ec2(  # noqa: PLR0917 - one positional per table column keeps the rows readable
    name: str,
    accelerator: AcceleratorId,
    count: int,
    vcpus: int,
    memory_gib: int,
    efa: int,
    network_gbps: float,
    nvme_gb: int,
    capacity_block: bool = False,
) -> InstanceType:
    family: QuotaFamily = "P" if name.startswith("p") else "G"
    return InstanceType(
        name=name,
        cloud="aws",
        accelerator=accelerator,
        accelerators_per_node=count,
        vcpus=vcpus,
        memory_mib=memory_gib * 1024,
        efa_max_interfaces=efa,
        network_gbps=network_gbps,
        local_nvme_gb=nvme_gb,
        capacity_block=capacity_block,
        spot=True,
        quota_family=family,
    )


def _gke_tpu(name: str, chips: int, vcpus: int, memory_gb: int, topologies: tuple[str, ...]) -> InstanceType:
    return InstanceType(
        name=name,
        cloud="gcp",
        accelerator="tpu-v5e",
        accelerators_per_node=chips,
        vcpus=vcpus,
        # Google's table quotes host memory in GB; the VMs report the same figure in GiB.
        memory_mib=memory_gb * 1024,
        efa_max_interfaces=0,
        network_gbps=None,
        local_nvme_gb=0,
        capacity_block=False,
        spot=True,
        quota_family="TPU",
        tpu_topologies=topologies,
    )


_ROWS: tuple[InstanceType, ...] = (
    # name, accelerator, GPUs, vCPU, GiB, max EFA interfaces, network Gbit/s, NVMe GB, capacity block
    _ec2("p5.48xlarge", "h100-80gb", 8, 192, 2048, 32, 3200, 30400, capacity_block=True),
    _ec2("p5e.48xlarge", "h200-141gb", 8, 192, 2048, 32, 3200, 30400, capacity_block=True),
    _ec2("p5en.48xlarge", "h200-141gb", 8, 192, 2048, 16, 3200, 30400, capacity_block=True),
    _ec2("p4de.24xlarge", "a100-80gb", 8, 96, 1152, 4, 400, 8000, capacity_block=True),
    _ec2("g6e.xlarge", "l40s-48gb", 1, 4, 32, 0, 2.5, 250),
    _ec2("g6e.2xlarge", "l40s-48gb", 1, 8, 64, 0, 5, 450),
    _ec2("g6e.4xlarge", "l40s-48gb", 1, 16, 128, 0, 20, 600),
    _ec2("g6e.8xlarge", "l40s-48gb", 1, 32, 256, 1, 25, 900),
    _ec2("g6e.12xlarge", "l40s-48gb", 4, 48, 384, 1, 100, 3800),
    _ec2("g6e.16xlarge", "l40s-48gb", 1, 64, 512, 1, 35, 1900),
    _ec2("g6e.24xlarge", "l40s-48gb", 4, 96, 768, 2, 200, 3800),
    _ec2("g6e.48xlarge", "l40s-48gb", 8, 192, 1536, 4, 400, 7600),
    _ec2("g6.xlarge", "l4-24gb", 1, 4, 16, 0, 2.5, 250),
    _ec2("g6.2xlarge", "l4-24gb", 1, 8, 32, 0, 5, 450),
    _ec2("g6.4xlarge", "l4-24gb", 1, 16, 64, 0, 10, 600),
    _ec2("g6.8xlarge", "l4-24gb", 1, 32, 128, 1, 25, 900),
    _ec2("g6.12xlarge", "l4-24gb", 4, 48, 192, 1, 40, 3760),
    _ec2("g6.16xlarge", "l4-24gb", 1, 64, 256, 1, 25, 1880),
    _ec2("g6.24xlarge", "l4-24gb", 4, 96, 384, 1, 50, 3760),
    _ec2("g6.48xlarge", "l4-24gb", 8, 192, 768, 1, 100, 7520),
    _ec2("g5.xlarge", "a10g-24gb", 1, 4, 16, 0, 2.5, 250),
    _ec2("g5.2xlarge", "a10g-24gb", 1, 8, 32, 0, 5, 450),
    _ec2("g5.4xlarge", "a10g-24gb", 1, 16, 64, 0, 10, 600),
    _ec2("g5.8xlarge", "a10g-24gb", 1, 32, 128, 1, 25, 900),
    _ec2("g5.12xlarge", "a10g-24gb", 4, 48, 192, 1, 40, 3800),
    _ec2("g5.16xlarge", "a10g-24gb", 1, 64, 256, 1, 25, 1900),
    _ec2("g5.24xlarge", "a10g-24gb", 4, 96, 384, 1, 50, 3800),
    _ec2("g5.48xlarge", "a10g-24gb", 8, 192, 768, 1, 100, 7600),
    # GKE TPU v5e: 1t is a 1x1 slice; 4t a 2x2 slice or a host of a multi-host slice; 8t a 2x4 slice.
    _gke_tpu("ct5lp-hightpu-1t", 1, 24, 48, ("1x1",)),
    _gke_tpu("ct5lp-hightpu-4t", 4, 112, 192, ("2x2", "4x4", "4x8", "8x8", "8x16", "16x16")),
    _gke_tpu("ct5lp-hightpu-8t", 8, 224, 384, ("2x4",)),
)

INSTANCE_TYPES: dict[str, InstanceType] = {row.name: row for row in _ROWS}


def get_instance_type(name: str) -> InstanceType:
    """Look an instance type up; the error lists the known ones."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        known = ", ".join(sorted(INSTANCE_TYPES))
        raise KeyError(f"unknown instance type {name!r}; known: {known}") from None


def instances_for(accelerator: AcceleratorId) -> tuple[InstanceType, ...]:
    """Every catalog node type carrying ``accelerator``, largest node first."""
    rows = [row for row in _ROWS if row.accelerator == accelerator]
    return tuple(sorted(rows, key=lambda r: (-r.accelerators_per_node, r.vcpus)))


def tpu_topology_chips(topology: str) -> int:
    """Chips in a TPU slice topology such as ``2x4``."""
    x, y = topology.split("x")
    return int(x) * int(y)


@dataclass(frozen=True)
class SliceShape:
    """How a topology maps onto VMs of a machine type."""

    chips: int
    """TPU chips in one slice."""
    chips_per_host: int
    """TPU chips on one VM (node)."""

    @property
    def hosts(self) -> int:
        """VMs (Kubernetes nodes) in one slice."""
        return self.chips // self.chips_per_host

    @property
    def multi_host(self) -> bool:
        """Whether a slice spans more than one VM (and needs COMPACT placement)."""
        return self.hosts > 1


def slice_shape(machine_type: str, topology: str) -> SliceShape:
    """The slice shape of ``topology`` on ``machine_type`` (both valid per the catalog)."""
    return SliceShape(
        chips=tpu_topology_chips(topology), chips_per_host=INSTANCE_TYPES[machine_type].accelerators_per_node
    )
