"""The KV transfer of a disaggregated model: bytes from the KV formula, the rate from the catalog's EFA interfaces at
Dynamo's measured efficiency (or its TCP fallback), and the refusals: no EFA device for a replica, a transfer longer
than the TTFT objective."""

from __future__ import annotations

import pytest

from inferplane.components.capacity.kv_transfer import (
    EFA_TRANSFER_EFFICIENCY,
    KvTransferSizing,
    efa_interfaces_per_replica,
    size_transfer,
)
from inferplane.components.catalog import INSTANCE_TYPES, InstanceType, get_instance_type

P5 = get_instance_type("p5.48xlarge")
G6E_12XL = get_instance_type("g6e.12xlarge")
G6E_XL = get_instance_type("g6e.xlarge")


@pytest.mark.parametrize(("gpus", "interfaces"), [(1, 4), (2, 8), (4, 16), (8, 32)])
def test_a_p5_replica_gets_its_share_of_the_32_interfaces(gpus: int, interfaces: int) -> None:
    assert efa_interfaces_per_replica(P5, gpus) == interfaces


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_no_replica_gets_more_interfaces_than_its_node_has(name: str) -> None:
    instance = INSTANCE_TYPES[name]
    shares = [efa_interfaces_per_replica(instance, gpus) for gpus in range(1, instance.accelerators_per_node + 1)]
    assert all(0 <= share <= instance.efa_max_interfaces for share in shares)
    assert shares[-1] == instance.efa_max_interfaces


def _transfer(
    instance: InstanceType,
    *,
    decode_gpus: int = 1,
    prefill_gpus: int = 1,
    efa: bool = True,
    bytes_per_token: int = 131_072,
    context: int = 8192,
    ttft_slo_ms: int = 2000,
) -> KvTransferSizing:
    """Both roles on ``instance``; Llama-3.1-8B's bf16 KV (131,072 B a token) at 8k tokens against 2 s unless told."""
    return size_transfer(
        decode_instance=instance,
        decode_gpus=decode_gpus,
        prefill_instance=instance,
        prefill_gpus=prefill_gpus,
        efa=efa,
        bytes_per_token=bytes_per_token,
        context=context,
        ttft_slo_ms=ttft_slo_ms,
    )


def test_an_8b_prompt_of_8000_tokens_reproduces_dynamos_109_ms_on_one_p5_gpu() -> None:
    # Llama-3.1-8B bf16: 131,072 B per token; 4 interfaces at 19.2 % of 100 Gbit/s = 9.6 GB/s (facts section 6).
    transfer = _transfer(P5, context=8000)
    assert transfer.backend == "LIBFABRIC"
    assert transfer.efa_interfaces == 4
    assert transfer.bytes_per_second == pytest.approx(9.6e9)
    assert transfer.bytes_at_context == 1_048_576_000
    assert transfer.seconds_at_context == pytest.approx(0.1092, abs=1e-4)
    assert transfer.problem is None


def test_the_prod_70b_at_32k_moves_5_4_gb_in_140_ms_over_16_interfaces() -> None:
    # Llama-3.3-70B's fp8 KV: 80 layers x 2 x 8 KV heads x 128 x 1 byte = 163,840 B a token.
    transfer = _transfer(P5, decode_gpus=4, prefill_gpus=4, bytes_per_token=163_840, context=32768, ttft_slo_ms=1500)
    assert transfer.efa_interfaces == 16
    assert transfer.bytes_per_second == pytest.approx(38.4e9)
    assert transfer.seconds_at_context == pytest.approx(5_368_709_120 / 38.4e9, abs=1e-4)
    assert transfer.problem is None


def test_the_slower_side_sets_the_rate() -> None:
    transfer = _transfer(P5, decode_gpus=8, prefill_gpus=2)
    assert transfer.efa_interfaces == 8
    assert transfer.bytes_per_second == pytest.approx(8 * 12.5e9 * EFA_TRANSFER_EFFICIENCY)


def test_a_replica_left_without_an_efa_device_is_refused() -> None:
    transfer = _transfer(G6E_12XL, decode_gpus=4, prefill_gpus=1)
    assert transfer.seconds_at_context is None
    assert transfer.problem == (
        "a prefill replica of 1 GPU(s) on g6e.12xlarge gets none of its 1 EFA interface(s) for 4 GPUs: give the role "
        "a larger share of the node (more GPUs per replica)"
    )


def test_tcp_is_refused_where_a_long_prompt_meets_the_ttft_objective() -> None:
    transfer = _transfer(G6E_XL, efa=False)
    assert (transfer.backend, transfer.efa_interfaces) == ("UCX", 0)
    assert transfer.problem == (
        "moving the KV of a 8,192-token prompt (1.07 GB) to a decode replica takes 10,737 ms over TCP (no EFA on the "
        "pools) at 0.10 GB/s, more than the 2000 ms TTFT objective: use EFA pools (p5, p5e, p5en), an fp8 KV cache, "
        "a shorter max_context, or serve aggregated"
    )


def test_tcp_fits_a_short_context() -> None:
    transfer = _transfer(G6E_XL, efa=False, bytes_per_token=65_536, context=2048)
    assert transfer.seconds_at_context == pytest.approx(1.3422, abs=1e-4)
    assert transfer.problem is None
