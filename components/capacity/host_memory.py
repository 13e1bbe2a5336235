"""A replica's share of its node's CPU and host memory, and the host-memory KV tier that share leaves room for.

One source for both: the model servers request exactly :func:`replica_host_share` (memory guaranteed, limit =
request), and sizing sizes vLLM's ``--kv-offloading-size`` from the same share (:func:`host_kv_tier_bytes`), so the
offload buffer the engine pins can never exceed what its pod may hold.

A node's allocatable resources are what it has less a system reserve; a replica gets them in proportion to the
accelerators it takes (``tensor parallel / accelerators per node``), so replicas sharing a node never crowd each
other out and the scheduler's bin-packing follows the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplane.components.catalog import InstanceType

GIB = 1024**3
MIB = 1024**2

SYSTEM_RESERVED_CPU_MILLI = 1000
SYSTEM_RESERVED_CPU_SHARE = 0.04
SYSTEM_RESERVED_MEMORY_BYTES = 2 * GIB
SYSTEM_RESERVED_MEMORY_SHARE = 0.06
"""Per node, kept for the kubelet's kube-reserved (EKS AL2023: 255 MiB + 11 MiB per pod of max-pods), the eviction
threshold and the node daemons (CNI, kube-proxy, device plugin, DCGM exporter, node exporter, log shipper)."""

SHM_MAX_BYTES = 16 * GIB
"""NCCL and vLLM's custom all-reduce use /dev/shm between tensor-parallel ranks; a quarter of the pod's memory,
at most 16 GiB, is what NVIDIA's and vLLM's container guides pass as ``--shm-size``."""

ENGINE_HOST_BYTES = 4 * GIB
ENGINE_HOST_BYTES_PER_GPU = 6 * GIB
"""What the engine's own processes keep in host memory besides a KV tier: the API server and tokenizer (the first),
and per tensor-parallel rank a worker with torch's and CUDA's host state, pinned staging buffers and the transient
buffers of loading its shard of the weights (the second). An allowance, not a measurement: no engine documents a
figure, and the host tier must never push a replica into the OOM killer, so it is generous."""


@dataclass(frozen=True)
class ReplicaHostShare:
    """CPU and memory one replica may take of its node, proportional to its share of the accelerators."""

    cpu_milli: int
    """CPU request, millicores (never a limit: no CFS throttling of the tokenizer and scheduler threads)."""
    memory_bytes: int
    """Memory request and limit (guaranteed), whole MiB."""
    shm_bytes: int
    """The memory-backed ``/dev/shm`` within ``memory_bytes``, whole GiB."""


def replica_host_share(instance: InstanceType, accelerators_per_replica: int) -> ReplicaHostShare:
    """The node's allocatable CPU and memory (after the system reserve), shared in proportion to accelerators."""
    share = accelerators_per_replica / instance.accelerators_per_node
    cpu_node = instance.vcpus * 1000
    cpu_free = cpu_node - SYSTEM_RESERVED_CPU_MILLI - cpu_node * SYSTEM_RESERVED_CPU_SHARE
    memory_node = instance.memory_mib * MIB
    memory_free = memory_node - SYSTEM_RESERVED_MEMORY_BYTES - memory_node * SYSTEM_RESERVED_MEMORY_SHARE
    memory = int(memory_free * share // MIB * MIB)
    return ReplicaHostShare(
        cpu_milli=int(cpu_free * share // 100 * 100),
        memory_bytes=memory,
        shm_bytes=min(SHM_MAX_BYTES, memory // 4 // GIB * GIB),
    )


def engine_host_bytes(accelerators_per_replica: int) -> int:
    """Host memory the engine's processes keep for themselves (:data:`ENGINE_HOST_BYTES_PER_GPU`)."""
    return ENGINE_HOST_BYTES + ENGINE_HOST_BYTES_PER_GPU * accelerators_per_replica


def host_kv_tier_bytes(instance: InstanceType, accelerators_per_replica: int) -> int:
    """The host-memory KV tier one replica can pin, whole GiB: its memory share less ``/dev/shm`` (memory-backed,
    counted against the same limit) and the engine's own processes. Zero or less when the share cannot hold one."""
    share = replica_host_share(instance, accelerators_per_replica)
    free = share.memory_bytes - share.shm_bytes - engine_host_bytes(accelerators_per_replica)
    return free // GIB * GIB if free > 0 else free
