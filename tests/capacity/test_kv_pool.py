"""Each engine's KV pool as the engine computes it, and the rows of the accuracy table near the memory edge.

Every expected number is worked out by hand in the comments (GiB = 1,073,741,824 bytes).
"""

from __future__ import annotations

from dataclasses import replace

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.sizing import (
    SizingRequest,
    SizingResult,
    sglang_kv_pool_bytes,
    sglang_mem_fraction_static,
    size,
    trtllm_kv_pool_bytes,
    vllm_kv_pool_bytes,
    weights_bytes,
)
from inferplane.components.catalog import get_accelerator, get_model
from tests.published import load, replica_for

GIB = 1024**3
H100 = get_accelerator("h100-80gb")  # 80 GiB = 85,899,345,920 bytes
LLAMA_70B = get_model("llama-3.3-70b")
# FP8 weights: the body in one byte, the 2,101,346,304 embedding parameters in two:
# (70,553,706,496 - 2,101,346,304) + 2 x 2,101,346,304 = 72,655,052,800 bytes, 85% of one H100.
WEIGHTS_70B_FP8 = 72_655_052_800
# FP8 KV cache, per token: 2 (K and V) x 80 layers x 8 KV heads x 128 head dim x 1 byte = 163,840 bytes.
KV_PER_TOKEN_70B_FP8 = 163_840


def test_vllm_takes_its_share_of_the_device_then_subtracts_everything_else() -> None:
    # 0.9 x 80 GiB = 77,309,411,328; less 60 GiB of weights (64,424,509,440) and a 2 GiB reserve (2,147,483,648):
    # 10,737,418,240 bytes, exactly 10 GiB.
    pool = vllm_kv_pool_bytes(device_bytes=80 * GIB, gpu_memory_utilization=0.9, weights=60 * GIB, non_kv=2 * GIB)
    assert pool == 10_737_418_240
    # Weights beyond the budget: 77,309,411,328 - 76 GiB (81,604,378,624) - 2 GiB = -6,442,450,944 (negative).
    over = vllm_kv_pool_bytes(device_bytes=80 * GIB, gpu_memory_utilization=0.9, weights=76 * GIB, non_kv=2 * GIB)
    assert over == -6_442_450_944


def test_tensorrt_llm_takes_its_fraction_of_what_is_free_after_weights_and_buffers() -> None:
    # Free: 80 - 60 - 2 = 18 GiB = 19,327,352,832 bytes; x 0.9 = 17,394,617,548.8, floored to a byte.
    pool = trtllm_kv_pool_bytes(device_bytes=80 * GIB, free_fraction=0.9, weights=60 * GIB, runtime_buffers=2 * GIB)
    assert pool == 17_394_617_548
    # The same weights under vLLM's reading of 0.9 (a share of the device) leave 10 GiB: the fraction's base differs.
    assert pool > vllm_kv_pool_bytes(
        device_bytes=80 * GIB, gpu_memory_utilization=0.9, weights=60 * GIB, non_kv=2 * GIB
    )
    # Nothing free: 80 - 90 - 2 = -12 GiB = -12,884,901,888, reported unscaled (the engine cannot start).
    none = trtllm_kv_pool_bytes(device_bytes=80 * GIB, free_fraction=0.9, weights=90 * GIB, runtime_buffers=2 * GIB)
    assert none == -12_884_901_888


def test_sglang_takes_its_static_fraction_of_the_device_for_weights_and_kv_only() -> None:
    # 0.85 x 80 GiB = 73,014,444,032 (exactly 68 GiB) holds the weights and the KV pool; activations live in the
    # remaining 0.15. Less 60 GiB of weights: 8 GiB = 8,589,934,592 bytes.
    pool = sglang_kv_pool_bytes(device_bytes=80 * GIB, mem_fraction_static=0.85, weights=60 * GIB)
    assert pool == 8_589_934_592
    # vLLM's 0.85 would also have to hold the 2 GiB reserve: 6 GiB. The same number means less cache to vLLM.
    assert pool - 2 * GIB == vllm_kv_pool_bytes(
        device_bytes=80 * GIB, gpu_memory_utilization=0.85, weights=60 * GIB, non_kv=2 * GIB
    )
    # The fraction sizing renders for a 10 GiB pool under a 0.9 cap: (60 + 10) / 80 = 0.875; never above the cap.
    assert sglang_mem_fraction_static(device_bytes=80 * GIB, weights=60 * GIB, kv_pool=10 * GIB, cap=0.9) == 0.875
    assert sglang_mem_fraction_static(device_bytes=80 * GIB, weights=76 * GIB, kv_pool=-6 * GIB, cap=0.9) == 0.9


def test_at_the_memory_edge_trtllm_bench_allocates_far_more_than_a_device_share_would() -> None:
    assert weights_bytes(LLAMA_70B, "fp8") == WEIGHTS_70B_FP8
    # trtllm-bench at 0.95 of free memory. Runtime buffers: the 1.5 GiB reserve (1,610,612,736) plus one 8192-token
    # step's activations, 8192 x 8192 hidden x 24 bytes = 1,610,612,736; 3,221,225,472 in all.
    # Free: 85,899,345,920 - 72,655,052,800 - 3,221,225,472 = 10,023,067,648; x 0.95 = 9,521,914,265.6 bytes;
    # / 163,840 per token = 58,117.1 -> 58,117 tokens.
    tokens = perf_model.trtllm_kv_capacity_tokens(
        LLAMA_70B, H100, tensor_parallel_size=1, weights_dtype="fp8", kv_cache_dtype="fp8", free_fraction=0.95
    )
    assert tokens == 58_117
    # Read as a share of the device, 0.95 would leave 0.95 x 85,899,345,920 = 81,604,378,624
    # - 72,655,052,800 - 3,221,225,472 = 5,728,100,352 bytes: 34,961 tokens, 40% fewer than the engine allocates.
    device_share = vllm_kv_pool_bytes(
        device_bytes=H100.memory_bytes, gpu_memory_utilization=0.95, weights=WEIGHTS_70B_FP8, non_kv=3_221_225_472
    )
    assert device_share == 5_728_100_352
    assert device_share // KV_PER_TOKEN_70B_FP8 == 34_961


def _sized_70b_fp8_on_one_h100() -> SizingResult:
    request = SizingRequest(
        model=LLAMA_70B,
        model_label="llama-3.3-70b",
        accelerator=H100,
        accelerators_per_node=8,
        weights_dtype="fp8",
        kv_cache_dtype="fp8",
        context=2048,
        concurrency=1,
        gpu_memory_utilization=0.93,
        tensor_parallel_size=1,
    )
    return size(request)


def test_each_engine_gets_the_pool_its_flag_yields_and_the_platform_cap_holds() -> None:
    sizing = _sized_70b_fp8_on_one_h100()
    assert sizing.fits and sizing.gpu_memory_utilization == 0.93
    # Reserve: 1.5 GiB + 2048 tokens x 8192 x 24 (402,653,184) + 1 sequence x 128,256 vocab x 4 (513,024)
    # = 2,013,778,944. vLLM: int(0.93 x 85,899,345,920) = 79,886,391,705 - 72,655,052,800 - 2,013,778,944
    # = 5,217,559,961 bytes, the platform's budget.
    assert sizing.reserve_bytes == 2_013_778_944
    assert perf_model.kv_pool_bytes(sizing, H100, "vllm") == sizing.kv_pool_bytes == 5_217_559_961
    # TensorRT-LLM gets the fraction of its free memory that yields that budget: free = 85,899,345,920
    # - 72,655,052,800 - 2,013,778,944 = 11,230,514,176; 5,217,559,961 / 11,230,514,176 = 0.4646, floored to 0.46
    # (within the platform's 0.95 cap). The engine allocates int(0.46 x 11,230,514,176) = 5,166,036,520 bytes.
    assert sizing.trtllm.kv_cache_free_gpu_mem_fraction == 0.46
    assert perf_model.kv_pool_bytes(sizing, H100, "triton") == 5_166_036_520
    # In tokens: 5,217,559,961 // 163,840 = 31,845 (vLLM); 5,166,036,520 // 163,840 = 31,530 (TensorRT-LLM).
    vllm = perf_model.replica_from_sizing(sizing, LLAMA_70B, H100, "vllm")
    trt = perf_model.replica_from_sizing(sizing, LLAMA_70B, H100, "triton")
    assert (vllm.kv_capacity_tokens, trt.kv_capacity_tokens) == (31_845, 31_530)
    # SGLang's static fraction holds weights and pool: (72,655,052,800 + 5,217,559,961) / 85,899,345,920 = 0.90656,
    # floored to 0.906 (below the 0.93 cap: the reserve lives outside it). The engine allocates
    # int(0.906 x 85,899,345,920) - 72,655,052,800 = 5,169,754,603 bytes, 31,553 tokens.
    assert sizing.sglang.mem_fraction_static == 0.906
    assert perf_model.kv_pool_bytes(sizing, H100, "sglang") == 5_169_754_603
    assert perf_model.replica_from_sizing(sizing, LLAMA_70B, H100, "sglang").kv_capacity_tokens == 31_553


def test_sglang_replica_takes_its_batch_and_chunk_from_its_own_flags() -> None:
    """Batch = ``--max-running-requests``; step budget = ``--chunked-prefill-size`` (a whole number of 16-token
    pages); with chunking off, SGLang's ``--max-prefill-tokens`` default bounds a prefill step."""
    sized = _sized_70b_fp8_on_one_h100()
    sglang = sized.sglang.model_copy(update={"max_running_requests": 9, "chunked_prefill_size": 2016})
    sizing = sized.model_copy(update={"max_num_batched_tokens": 2000, "concurrency": 7, "sglang": sglang})
    replica = perf_model.replica_from_sizing(sizing, LLAMA_70B, H100, "sglang")
    assert (replica.max_num_seqs, replica.max_num_batched_tokens) == (9, 2016)
    vllm = perf_model.replica_from_sizing(sizing, LLAMA_70B, H100, "vllm")
    assert (vllm.max_num_seqs, vllm.max_num_batched_tokens) == (7, 2000)
    unchunked = sizing.model_copy(update={"sglang": sglang.model_copy(update={"chunked_prefill_size": -1})})
    replica = perf_model.replica_from_sizing(unchunked, LLAMA_70B, H100, "sglang")
    assert replica.max_num_batched_tokens == perf_model.SGLANG_DEFAULT_MAX_PREFILL_TOKENS == 16384


def test_the_memory_edge_is_where_the_weights_take_half_the_device_memory() -> None:
    sizing = _sized_70b_fp8_on_one_h100()
    one = perf_model.replica_from_sizing(sizing, LLAMA_70B, H100, "triton")
    # 72,655,052,800 / 85,899,345,920 = 0.846; on two H100s 0.423.
    assert round(perf_model.weights_share(one), 3) == 0.846
    assert perf_model.at_memory_edge(one)
    two = replace(one, tensor_parallel_size=2)
    assert round(perf_model.weights_share(two), 3) == 0.423
    assert not perf_model.at_memory_edge(two)


def test_the_accuracy_table_lists_these_published_configurations_at_the_memory_edge() -> None:
    edge = {
        (row.model, row.accelerator, row.gpus, row.weights_dtype)
        for row in load()
        if perf_model.at_memory_edge(replica_for(row))
    }
    # Mixtral FP8 on one H100 (0.547), Mixtral FP16 on two A100s (0.544), 405B FP8 on eight H100s (0.597); the
    # nearest below is 70B FP8 on one H200 (0.480).
    assert edge == {
        ("mixtral-8x7b", "h100-80gb", 1, "fp8"),
        ("mixtral-8x7b", "a100-80gb", 2, "fp16"),
        ("llama-3.1-405b", "h100-80gb", 8, "fp8"),
    }
