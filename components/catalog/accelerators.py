"""Accelerators inferplane can size for.

Memory is what the cloud API reports (MiB), not the marketing figure: EC2 ``DescribeInstanceTypes``
``GpuInfo.Gpus[].MemoryInfo.SizeInMiB`` reports 22888 MiB for the "24 GB" L4 and A10G and 45776 MiB for the
"48 GB" L40S. Fit arithmetic must use the reported figure or a plan that "fits" OOMs at start-up.

Throughput figures are dense (no 2:4 sparsity) peak tensor-core numbers from the vendors' datasheets; the
sizing engine applies its own efficiency factors on top of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

AcceleratorId = Literal["h100-80gb", "h200-141gb", "l40s-48gb", "l4-24gb", "a10g-24gb", "a100-80gb", "tpu-v5e"]
"""Catalog identifiers, as used in stack files (``pools[].accelerator``)."""

Interconnect = Literal["nvlink4", "nvlink3", "pcie4", "tpu-ici"]


class Accelerator(BaseModel):
    """One accelerator chip (a GPU, or one TPU chip)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: AcceleratorId = Field(description="Catalog identifier.")
    display_name: str = Field(description="Vendor name, as EC2 or GKE shows it.")
    vendor: Literal["nvidia", "google"] = Field(
        description="Who makes it; decides the device plugin and resource name."
    )
    memory_mib: int = Field(gt=0, description="Device memory as the cloud API reports it, in MiB.")
    memory_bandwidth_gbps: float = Field(gt=0, description="Peak device-memory bandwidth, GB/s (10^9 bytes/s).")
    bf16_dense_tflops: float = Field(gt=0, description="Peak dense BF16 tensor throughput, TFLOP/s.")
    fp8_dense_tflops: float | None = Field(description="Peak dense FP8 tensor throughput; None without FP8 units.")
    interconnect: Interconnect = Field(description="Chip-to-chip link inside one node.")
    interconnect_gbps: float = Field(gt=0, description="Per-chip interconnect bandwidth, GB/s, bidirectional.")
    source: str = Field(description="Where the figures come from, with the date they were read.")

    @property
    def memory_bytes(self) -> int:
        """Device memory in bytes (MiB x 2^20)."""
        return self.memory_mib * 1024 * 1024

    @property
    def supports_fp8(self) -> bool:
        """Whether the chip has native FP8 tensor cores (Ada and Hopper do; Ampere and TPU v5e do not)."""
        return self.fp8_dense_tflops is not None

    @property
    def resource_name(self) -> str:
        """The Kubernetes extended resource a pod requests for this accelerator."""
        return "google.com/tpu" if self.vendor == "google" else "nvidia.com/gpu"


_EC2_MEMORY = "EC2 DescribeInstanceTypes GpuInfo (moto 5.2.5 bundled AWS data, read 2026-11-29)"

ACCELERATORS: dict[AcceleratorId, Accelerator] = {
    a.id: a
    for a in (
        Accelerator(
            id="h100-80gb",
            display_name="NVIDIA H100",
            vendor="nvidia",
            memory_mib=81920,
            memory_bandwidth_gbps=3350,
            bf16_dense_tflops=989,
            fp8_dense_tflops=1979,
            interconnect="nvlink4",
            interconnect_gbps=900,
            source=f"{_EC2_MEMORY}; NVIDIA H100 SXM5 datasheet (nvidia.com/en-us/data-center/h100), read 2026-11-29",
        ),
        Accelerator(
            id="h200-141gb",
            display_name="NVIDIA H200",
            vendor="nvidia",
            memory_mib=144384,
            memory_bandwidth_gbps=4800,
            bf16_dense_tflops=989,
            fp8_dense_tflops=1979,
            interconnect="nvlink4",
            interconnect_gbps=900,
            source=f"{_EC2_MEMORY}; NVIDIA H200 SXM datasheet (nvidia.com/en-us/data-center/h200), read 2026-11-29",
        ),
        Accelerator(
            id="l40s-48gb",
            display_name="NVIDIA L40S",
            vendor="nvidia",
            memory_mib=45776,
            memory_bandwidth_gbps=864,
            bf16_dense_tflops=362,
            fp8_dense_tflops=733,
            interconnect="pcie4",
            interconnect_gbps=64,
            source=f"{_EC2_MEMORY}; NVIDIA L40S datasheet (dense = half the sparse figures), read 2026-11-29",
        ),
        Accelerator(
            id="l4-24gb",
            display_name="NVIDIA L4",
            vendor="nvidia",
            memory_mib=22888,
            memory_bandwidth_gbps=300,
            bf16_dense_tflops=121,
            fp8_dense_tflops=242,
            interconnect="pcie4",
            interconnect_gbps=64,
            source=f"{_EC2_MEMORY}; NVIDIA L4 datasheet (dense = half the sparse figures), read 2026-11-29",
        ),
        Accelerator(
            id="a10g-24gb",
            display_name="NVIDIA A10G",
            vendor="nvidia",
            memory_mib=22888,
            memory_bandwidth_gbps=600,
            bf16_dense_tflops=125,
            fp8_dense_tflops=None,
            interconnect="pcie4",
            interconnect_gbps=64,
            source=(
                f"{_EC2_MEMORY}; NVIDIA A10 datasheet as the closest published figures (AWS publishes none for the"
                " A10G variant), read 2026-11-29"
            ),
        ),
        Accelerator(
            id="a100-80gb",
            display_name="NVIDIA A100",
            vendor="nvidia",
            memory_mib=81920,
            memory_bandwidth_gbps=2039,
            bf16_dense_tflops=312,
            fp8_dense_tflops=None,
            interconnect="nvlink3",
            interconnect_gbps=600,
            source=f"{_EC2_MEMORY}; NVIDIA A100 80GB SXM datasheet, read 2026-11-29",
        ),
        Accelerator(
            id="tpu-v5e",
            display_name="Google TPU v5e",
            vendor="google",
            memory_mib=16384,
            memory_bandwidth_gbps=819,
            bf16_dense_tflops=197,
            fp8_dense_tflops=None,
            interconnect="tpu-ici",
            interconnect_gbps=200,
            source=(
                "cloud.google.com/tpu/docs/v5e (16 GiB HBM2, 819 GBps, 197 TFLOPs bf16, 1600 Gbps ICI), read 2026-11-29"
            ),
        ),
    )
}


def get_accelerator(accelerator_id: str) -> Accelerator:
    """Look an accelerator up by id; the error names the known ids."""
    try:
        return ACCELERATORS[accelerator_id]  # type: ignore[index]
    except KeyError:
        known = ", ".join(sorted(ACCELERATORS))
        raise KeyError(f"unknown accelerator {accelerator_id!r}; known: {known}") from None
