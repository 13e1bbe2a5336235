"""A replica's share of its node, and the host KV tier sizing carves from it: exact on the shipped node, bounded on
every node and tensor-parallel size of the catalog, refused where it would hold nothing the device does not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplane.components.capacity.host_memory import (
    ENGINE_HOST_BYTES,
    ENGINE_HOST_BYTES_PER_GPU,
    GIB,
    MIB,
    engine_host_bytes,
    host_kv_tier_bytes,
    replica_host_share,
)
from inferplane.components.capacity.sizing import SizingRequest, size
from inferplane.components.catalog import INSTANCE_TYPES, get_accelerator, get_instance_type, get_model

P5 = get_instance_type("p5.48xlarge")
G6_XL = get_instance_type("g6.xlarge")

SEVENTY_B_ON_P5 = SizingRequest(
    model=get_model("llama-3.3-70b"),
    model_label="llama-3.3-70b",
    accelerator=get_accelerator("h100-80gb"),
    accelerators_per_node=8,
    kv_cache_dtype="fp8",
    context=32768,
    concurrency=24,
    host_kv_node=P5,
)
"""Prod's llama-70b: TP 4 on a p5.48xlarge (192 vCPU, 2,048 GiB)."""

EIGHT_B_ON_L4 = SizingRequest(
    model=get_model("llama-3.1-8b"),
    model_label="llama-3.1-8b",
    accelerator=get_accelerator("l4-24gb"),
    accelerators_per_node=1,
    kv_cache_dtype="fp8",
    context=8192,
    concurrency=4,
    host_kv_node=G6_XL,
)
"""Dev's llama-8b on a g6.xlarge (4 vCPU, 16 GiB)."""


def test_a_tp4_replica_takes_half_the_p5_after_the_system_reserve() -> None:
    share = replica_host_share(P5, 4)
    # (2,048 GiB - 2 GiB - 6 %) / 2, whole MiB; (192,000m - 1,000m - 4 %) / 2, whole 100m.
    assert share.memory_bytes == 984_637 * MIB
    assert share.cpu_milli == 91_600
    assert share.shm_bytes == 16 * GIB


def test_the_p5_replica_pins_917_gib_of_host_kv() -> None:
    # 984,637 MiB (961.56 GiB) - 16 GiB /dev/shm - (4 + 4 x 6) GiB for the engine = 917.56, floored to whole GiB.
    assert engine_host_bytes(4) == ENGINE_HOST_BYTES + 4 * ENGINE_HOST_BYTES_PER_GPU == 28 * GIB
    assert host_kv_tier_bytes(P5, 4) == 917 * GIB
    result = size(SEVENTY_B_ON_P5)
    assert result.fits is True
    assert result.tensor_parallel_size == 4
    assert result.host_kv_cache_bytes == 917 * GIB
    assert result.vllm.kv_offloading_size_gib == 917


def test_without_a_host_node_there_is_no_tier() -> None:
    result = size(replace(SEVENTY_B_ON_P5, host_kv_node=None))
    assert result.host_kv_cache_bytes == 0
    assert result.vllm.kv_offloading_size_gib is None
    assert result.fits is True


@pytest.mark.parametrize(
    ("instance", "tp"),
    [
        (name, tp)
        for name, row in sorted(INSTANCE_TYPES.items())
        if row.cloud == "aws"
        for tp in (1, 2, 4, 8)
        if row.accelerators_per_node % tp == 0
    ],
)
def test_the_tier_never_exceeds_the_pods_memory_less_shm_and_engine(instance: str, tp: int) -> None:
    node = get_instance_type(instance)
    share = replica_host_share(node, tp)
    tier = host_kv_tier_bytes(node, tp)
    assert share.memory_bytes <= node.memory_mib * MIB * tp / node.accelerators_per_node
    assert share.shm_bytes % GIB == 0
    if tier > 0:
        assert tier % GIB == 0
        assert tier + share.shm_bytes + engine_host_bytes(tp) <= share.memory_bytes
        assert share.memory_bytes - share.shm_bytes - engine_host_bytes(tp) - tier < GIB


def test_a_node_too_small_for_a_tier_is_refused_with_the_nodes_that_hold_one() -> None:
    result = size(EIGHT_B_ON_L4)
    assert result.fits is False
    assert result.reason == (
        "host_kv_cache: a TP 1 replica's share of g6.xlarge is 13.0 GiB of host memory, which leaves 0.0 GiB for a "
        "host KV tier after 3.0 GiB of /dev/shm and 10.0 GiB for the engine's processes: no more than its "
        f"{result.kv_pool_bytes / GIB:.1f} GiB device KV pool, so the tier would hold nothing the device does not"
    )
    # Every other L4 node holds a tier larger than the pool; largest node first, as the catalog lists them.
    assert result.alternatives == (
        "host_kv_cache: false",
        "a node with more host memory per GPU: g6.48xlarge, g6.12xlarge, g6.24xlarge, g6.2xlarge, g6.4xlarge, "
        "g6.8xlarge, g6.16xlarge",
    )
    assert size(replace(EIGHT_B_ON_L4, host_kv_node=get_instance_type("g6.2xlarge"))).fits is True


def test_a_device_misfit_keeps_its_own_reason() -> None:
    result = size(replace(SEVENTY_B_ON_P5, tensor_parallel_size=1, kv_cache_dtype="auto"))
    assert result.fits is False
    assert result.reason is not None
    assert result.reason.startswith("llama-3.3-70b weights in bf16")
