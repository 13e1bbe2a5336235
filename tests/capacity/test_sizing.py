"""Sizing: exact figures on hand-computed cases, refusals with their reasons, and properties over the space."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity.embedder import EmbedderSizing, size_embedder
from inferplane.components.capacity.sizing import (
    GIB,
    MAX_GPU_MEMORY_UTILIZATION,
    RUNTIME_RESERVE_BYTES_PER_GPU,
    WEIGHTS_FETCH_BYTES_PER_SECOND,
    SizingRequest,
    kv_cache_bytes_per_token,
    size,
    size_platform,
    stream_interval,
    weights_bytes,
)
from inferplane.components.catalog import ACCELERATORS, MODELS, get_accelerator, get_model, instances_for
from inferplane.components.spec.platform_spec import CacheSpec
from tests.serving_support import stack_spec

LLAMA_70B = get_model("llama-3.3-70b")
H100 = get_accelerator("h100-80gb")
L4 = get_accelerator("l4-24gb")


BASE = SizingRequest(model=LLAMA_70B, model_label="llama-3.3-70b", accelerator=H100, accelerators_per_node=8)


def _request(**changes: object) -> SizingRequest:
    return replace(BASE, **changes)  # type: ignore[arg-type]


def test_llama_70b_kv_cache_per_token_bf16_and_fp8() -> None:
    # 2 (K, V) x 80 layers x 8 KV heads x 128 head dim x bytes
    assert kv_cache_bytes_per_token(LLAMA_70B, 2) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert kv_cache_bytes_per_token(LLAMA_70B, 1) == 163_840
    assert size(_request(kv_cache_dtype="fp8")).kv_cache_bytes_per_token == 163_840
    assert size(_request(kv_cache_dtype="auto")).kv_cache_bytes_per_token == 327_680


def test_llama_70b_bf16_does_not_fit_one_h100() -> None:
    result = size(_request(tensor_parallel_size=1))
    assert result.fits is False
    assert result.weights_bytes == LLAMA_70B.parameters * 2 == 141_107_412_992
    assert result.usable_bytes == int(81920 * 2**20 * 0.90)
    assert result.reason is not None
    assert result.reason.startswith("llama-3.3-70b weights in bf16 take 131.4 GiB")
    assert "1 x h100-80gb (TP 1, 72.0 GiB usable at 0.9)" in result.reason
    assert "more GPUs per replica: fits at TP 4" in result.alternatives


def test_llama_70b_bf16_fits_four_h100_at_8k_by_32() -> None:
    result = size(_request(context=8192, concurrency=32))
    assert result.fits is True
    assert result.tensor_parallel_size == 4
    # Independent arithmetic: 4 x 80 GiB x 0.90, minus 2 bytes x 70.55B weights, minus the reserve.
    usable = int(4 * 81920 * 2**20 * 0.90)
    assert result.usable_bytes == usable
    assert result.kv_cache_bytes_required == 327_680 * 8192 * 32 == 85_899_345_920
    assert result.kv_pool_bytes == usable - 141_107_412_992 - result.reserve_bytes
    assert result.max_concurrent_sequences == result.kv_pool_bytes // (327_680 * 8192)
    assert result.max_concurrent_sequences >= 32
    # TP 2 is too small: 144 GiB usable leaves room for fewer than 32 sequences of 8k.
    assert size(_request(context=8192, concurrency=32, tensor_parallel_size=2)).fits is False


def test_reserve_is_runtime_plus_activations_plus_logits() -> None:
    result = size(_request(context=8192, concurrency=32))
    activations = result.max_num_batched_tokens * LLAMA_70B.hidden_size * 24
    logits = 32 * LLAMA_70B.vocab_size * 4
    assert result.reserve_bytes == 4 * RUNTIME_RESERVE_BYTES_PER_GPU + activations + logits


def test_quantized_weights_keep_embeddings_in_16_bits() -> None:
    embedding = 2 * 128256 * 8192
    body = LLAMA_70B.parameters - embedding
    assert weights_bytes(LLAMA_70B, "fp8") == body + embedding * 2
    awq = math.ceil(body * 0.5 + body / 128 * 2.5) + embedding * 2
    assert weights_bytes(LLAMA_70B, "int4") == awq
    gemma = get_model("gemma-2-9b")  # tied embeddings: one matrix
    assert weights_bytes(gemma, "fp8") == (gemma.parameters - 256000 * 3584) + 256000 * 3584 * 2


def test_engine_settings_follow_the_sizing() -> None:
    result = size(_request(context=8192, concurrency=32, kv_cache_dtype="fp8", weights_dtype="fp8"))
    assert result.vllm.tensor_parallel_size == result.tensor_parallel_size == result.trtllm.tensor_parallel
    assert result.vllm.max_model_len == 8192 == result.trtllm.max_seq_len
    assert result.trtllm.max_input_len == 8191
    assert result.vllm.max_num_seqs == 32 == result.trtllm.max_batch_size
    assert result.vllm.kv_cache_dtype == "fp8" and result.vllm.quantization == "fp8"
    assert result.vllm.dtype == "bfloat16"
    assert result.trtllm.weights_qformat == "fp8"
    assert 0 < result.trtllm.kv_cache_free_gpu_mem_fraction <= 0.95
    awq = size(_request(weights_dtype="int4"))
    assert awq.vllm.quantization == "awq" and awq.vllm.dtype == "float16"
    sglang = result.sglang
    assert (sglang.tp_size, sglang.context_length, sglang.max_running_requests) == (
        result.tensor_parallel_size,
        8192,
        32,
    )
    assert sglang.kv_cache_dtype == "fp8_e4m3" and sglang.quantization == "fp8" and sglang.dtype == "bfloat16"
    assert sglang.chunked_prefill_size == result.max_num_batched_tokens and sglang.page_size == 16
    assert (sglang.schedule_policy, sglang.disable_radix_cache) == ("fcfs", False)
    assert (awq.sglang.quantization, awq.sglang.dtype) == ("awq", "float16")


def test_sglang_schedules_longest_prefix_first_only_for_prefix_heavy_traffic_with_a_cache() -> None:
    assert size(_request(prefix_heavy=True)).sglang.schedule_policy == "lpm"
    assert size(_request(prefix_heavy=False)).sglang.schedule_policy == "fcfs"
    no_cache = size(_request(prefix_heavy=True, prefix_caching=False)).sglang
    assert (no_cache.schedule_policy, no_cache.disable_radix_cache) == ("fcfs", True)
    assert size(_request(chunked_prefill=False)).sglang.chunked_prefill_size == -1


def test_sglang_chunks_are_whole_pages() -> None:
    # 3000 concurrent sequences raise the step budget to 3000 tokens; SGLang's chunk rounds up to 3008 (188 pages).
    result = size(_request(concurrency=3000, context=1024, weights_dtype="fp8", kv_cache_dtype="fp8", itl_slo_ms=10))
    assert result.max_num_batched_tokens == 3000
    assert result.sglang.chunked_prefill_size == 3008


def test_batched_token_budget_tracks_the_itl_objective() -> None:
    tight = size(_request(context=8192, concurrency=32, itl_slo_ms=20))
    loose = size(_request(context=8192, concurrency=32, itl_slo_ms=2000))
    assert tight.max_num_batched_tokens == 2048  # floor
    assert loose.max_num_batched_tokens == 16384  # ceiling
    unchunked = size(_request(context=8192, concurrency=32, chunked_prefill=False))
    assert unchunked.max_num_batched_tokens == 8192  # must hold a whole prompt


@pytest.mark.parametrize(
    ("tp", "reason"),
    [
        (3, "tensor parallel 3 is not a power of two"),
        (16, "tensor parallel 16 exceeds the 8 accelerators of one node; tensor parallelism never crosses a node"),
    ],
)
def test_invalid_tensor_parallel_is_refused(tp: int, reason: str) -> None:
    result = size(_request(tensor_parallel_size=tp))
    assert result.fits is False
    assert result.reason == reason


def test_tensor_parallel_must_divide_attention_heads() -> None:
    qwen = get_model("qwen2.5-7b")  # 28 heads
    result = size(
        SizingRequest(
            model=qwen, model_label="qwen2.5-7b", accelerator=H100, accelerators_per_node=8, tensor_parallel_size=8
        )
    )
    assert result.reason == "tensor parallel 8 does not divide the model's 28 attention heads"


def test_kv_cache_misfit_names_the_shortfall_and_alternatives() -> None:
    model = get_model("llama-3.1-8b")
    base = SizingRequest(
        model=model, model_label="llama-3.1-8b", accelerator=L4, accelerators_per_node=1, context=16384, concurrency=8
    )
    result = size(base)
    assert result.fits is False
    assert result.reason == (
        "the KV cache for 8 sequences x 16384 tokens needs 16.0 GiB, but 1 x l4-24gb (TP 1, 20.1 GiB usable at 0.9) "
        "leaves 3.5 GiB after 15.0 GiB of weights; it holds 1 of them"
    )
    assert result.alternatives == (
        "fp8 weights and KV cache: fits at TP 1 (9 sequences)",
        "a larger GPU: l40s-48gb fits at TP 1 (g6e.xlarge)",
        "shorter context: 3072 tokens at 8 sequences (TP 1)",
        "fewer sequences: 1 at 16384 tokens (TP 1)",
    )
    # Each alternative is re-checked by sizing, so it really fits.
    assert size(replace(base, weights_dtype="fp8", kv_cache_dtype="fp8")).fits
    assert size(replace(base, accelerator=get_accelerator("l40s-48gb"))).fits
    assert size(replace(base, context=3072)).fits
    assert size(replace(base, concurrency=1)).fits


def test_larger_gpu_alternative_is_the_smallest_that_fits() -> None:
    result = size(_request(tensor_parallel_size=1))
    assert "a larger GPU: h200-141gb fits at TP 2 (p5e.48xlarge)" in result.alternatives


def test_gpu_memory_utilization_is_capped() -> None:
    result = size(_request(gpu_memory_utilization=0.99))
    assert result.gpu_memory_utilization == MAX_GPU_MEMORY_UTILIZATION


def test_decode_roofline_is_memory_bound_for_a_single_sequence() -> None:
    model = get_model("llama-3.1-8b")
    result = size(
        SizingRequest(
            model=model, model_label="m", accelerator=H100, accelerators_per_node=1, context=2048, concurrency=1
        )
    )
    # One sequence: reading 16 GB of weights at 0.75 x 3.35 TB/s takes ~6.4 ms, plus a little KV.
    weights_seconds = model.parameters * 2 / (3350e9 * 0.75)
    assert result.decode_step_ms == pytest.approx(weights_seconds * 1000, rel=0.02)
    assert result.decode_tokens_per_second == pytest.approx(1 / weights_seconds, rel=0.02)


def test_cold_start_is_fetch_plus_load_plus_warmup() -> None:
    result = size(_request(context=8192, concurrency=32))
    assert result.weights_fetch_seconds == pytest.approx(141.1, abs=0.1)
    assert result.engine_start_seconds == pytest.approx(141.107 / 2 + 60, abs=0.1)
    assert result.cold_start_seconds == pytest.approx(
        result.weights_fetch_seconds + result.engine_start_seconds, abs=0.1
    )


# --- properties ----------------------------------------------------------------------------------------------

NVIDIA = sorted(a for a, acc in ACCELERATORS.items() if acc.vendor == "nvidia")
requests = st.builds(
    lambda model, accelerator, context, concurrency, weights, kv, util: SizingRequest(
        model=MODELS[model],
        model_label=model,
        accelerator=ACCELERATORS[accelerator],
        accelerators_per_node=instances_for(accelerator)[0].accelerators_per_node,
        context=min(context, MODELS[model].max_context),
        concurrency=concurrency,
        weights_dtype=weights,
        kv_cache_dtype=kv,
        gpu_memory_utilization=util,
    ),
    model=st.sampled_from(sorted(MODELS)),
    accelerator=st.sampled_from(NVIDIA),
    context=st.integers(min_value=512, max_value=131072),
    concurrency=st.integers(min_value=1, max_value=256),
    weights=st.sampled_from(["bf16", "fp16", "fp8", "int4"]),
    kv=st.sampled_from(["auto", "fp8"]),
    util=st.floats(min_value=0.80, max_value=0.93),
)


@settings(max_examples=150, deadline=None)
@given(requests)
def test_more_gpus_never_turn_a_fit_into_a_misfit(request: SizingRequest) -> None:
    from inferplane.components.capacity.sizing import tensor_parallel_candidates

    verdicts = [size(replace(request, tensor_parallel_size=tp)).fits for tp in tensor_parallel_candidates(request)]
    first_fit = verdicts.index(True) if True in verdicts else len(verdicts)
    assert all(verdicts[first_fit:])


@settings(max_examples=150, deadline=None)
@given(requests, st.integers(min_value=1, max_value=8))
def test_longer_context_never_raises_the_sequence_count(request: SizingRequest, factor: int) -> None:
    tp = size(request).tensor_parallel_size
    short = size(replace(request, tensor_parallel_size=tp))
    longer_context = min(request.context * (factor + 1), request.model.max_context)
    long = size(replace(request, tensor_parallel_size=tp, context=longer_context))
    assert long.max_concurrent_sequences <= short.max_concurrent_sequences


@settings(max_examples=150, deadline=None)
@given(requests)
def test_chosen_tensor_parallel_divides_the_node_and_the_heads(request: SizingRequest) -> None:
    result = size(request)
    assert request.accelerators_per_node % result.tensor_parallel_size == 0
    assert request.model.attention_heads % result.tensor_parallel_size == 0
    assert result.tensor_parallel_size & (result.tensor_parallel_size - 1) == 0
    if result.fits:
        assert result.max_concurrent_sequences >= request.concurrency
        assert result.kv_pool_bytes >= result.kv_cache_bytes_required * result.kv_head_replication
    else:
        assert result.reason and result.alternatives


def test_gib_constant() -> None:
    assert GIB == 1024**3


def test_the_served_embedder_is_sized_from_its_measured_footprint_and_only_when_served() -> None:
    served = CacheSpec(embedder={"kind": "served", "model": "all-minilm-l6-v2", "replicas": 3, "cpus": 2})
    sizing = size_embedder(served, fetch_bytes_per_second=1e9, gateway_scale_out=4)
    assert sizing == EmbedderSizing(
        model="all-minilm-l6-v2",
        hf_repo="sentence-transformers/all-MiniLM-L6-v2",
        dimensions=384,
        replicas=3,
        max_replicas=12,  # as the gateway that calls it: four times its floor
        target_cpu_utilization=70,
        cpus=2,
        memory_bytes=2048 * 1024**2,  # 1549 MiB measured x 1.25 = 1936.25 MiB, up to a 256 MiB step
        max_model_len=256,
        weights_bytes=22_713_728 * 4,
        start_seconds=53.1,  # 53 s measured + 0.09 s for 91 MB at 1 GB/s
        timeout_ms=50,
    )
    assert (
        size_embedder(CacheSpec(), fetch_bytes_per_second=1e9, gateway_scale_out=4) is None
    )  # wordllama runs in the processor
    endpoint = {"kind": "endpoint", "url": "http://e:8000/v1", "model": "e5", "dimensions": 1024}
    assert size_embedder(CacheSpec(embedder=endpoint), fetch_bytes_per_second=1e9, gateway_scale_out=4) is None
    for off in ({"enabled": False}, {"semantic": False}):
        assert size_embedder(served.model_copy(update=off), fetch_bytes_per_second=1e9, gateway_scale_out=4) is None


def test_the_plan_carries_the_embedder_of_the_stack_that_serves_one() -> None:
    assert size_platform(stack_spec("prod")).embedder == size_embedder(
        stack_spec("prod").cache, fetch_bytes_per_second=WEIGHTS_FETCH_BYTES_PER_SECOND, gateway_scale_out=4
    )
    assert size_platform(stack_spec("dev")).embedder is None


def test_prods_70b_is_sized_as_two_roles_with_their_own_step_budgets() -> None:
    plan = size_platform(stack_spec("prod"))
    decode = plan.deployments[0]
    prefill = decode.prefill
    assert prefill is not None
    assert (decode.name, decode.role, prefill.name, prefill.role) == (
        "llama-70b",
        "decode",
        "llama-70b-prefill",
        "prefill",
    )
    assert plan.serving("llama-70b-prefill") is prefill
    assert (prefill.pool, prefill.gpus_per_replica, prefill.min_replicas, prefill.max_replicas) == ("h100", 4, 2, 3)
    # A prefill replica runs no decodes: its step takes the largest budget; the decode role keeps the ITL's.
    assert prefill.result.vllm.max_num_batched_tokens == 16384
    assert decode.result.vllm.max_num_batched_tokens < 16384
    assert decode.result.vllm.kv_transfer is not None and prefill.result.vllm.kv_transfer is not None
    assert decode.result.vllm.kv_transfer.model_dump() == {"role": "kv_consumer", "backend": "LIBFABRIC"}
    assert prefill.result.vllm.kv_transfer.model_dump() == {"role": "kv_producer", "backend": "LIBFABRIC"}
    # Both roles keep the host tier (917 GiB per TP-4 replica of a p5); the transfer is 16 interfaces' worth.
    assert decode.result.vllm.kv_offloading_size_gib == prefill.result.vllm.kv_offloading_size_gib == 917
    transfer = decode.transfer
    assert transfer is not None
    assert (transfer.efa_interfaces, transfer.bytes_per_token, transfer.bytes_at_context) == (
        16,
        163_840,
        5_368_709_120,
    )
    assert transfer.seconds_at_context == pytest.approx(0.1398, abs=1e-4)
    assert transfer.problem is None
    # The pool holds both roles: (2 + 2) x 4 GPUs at the floor, (5 + 3) x 4 at the ceiling, 8 per node.
    h100 = plan.pools[0]
    assert (h100.min_nodes, h100.max_nodes) == (2, 4)
    assert plan.ok, plan.problems


def test_a_transfer_over_tcp_is_refused_in_the_plan() -> None:
    spec = stack_spec("prod")
    pools = (spec.pools[0].model_copy(update={"efa": False, "zone": None}), *spec.pools[1:])
    plan = size_platform(spec.model_copy(update={"pools": pools}))
    assert plan.deployments[0].transfer is not None
    assert plan.deployments[0].result.vllm.kv_transfer is not None
    assert plan.deployments[0].result.vllm.kv_transfer.backend == "UCX"
    assert (
        "models[0] llama-70b: the KV transfer does not fit: moving the KV of a 32,768-token prompt (5.37 GB) to a "
        "decode replica takes 53,687 ms over TCP (no EFA on the pools) at 0.10 GB/s, more than the 1500 ms TTFT "
        "objective: use EFA pools (p5, p5e, p5en), an fp8 KV cache, a shorter max_context, or serve aggregated"
    ) in plan.problems


def test_an_aggregated_model_has_no_roles_and_no_transfer() -> None:
    plan = size_platform(stack_spec("prod"))
    eight_b = plan.deployments[1]
    assert (eight_b.role, eight_b.prefill, eight_b.transfer, eight_b.roles) == ("aggregated", None, None, (eight_b,))
    assert eight_b.result.vllm.kv_transfer is None


# --- streamed chunks --------------------------------------------------------------------------------------------


def test_prod_streams_four_tokens_a_chunk_at_its_planned_step() -> None:
    plan = size_platform(stack_spec("prod"))
    result = plan.serving("llama-70b").result
    assert result.decode_step_ms == 20.66
    # floor(100 / 20.66): a chunk every 82.6 ms at 24 sequences, never held past STREAM_CHUNK_MS.
    assert result.vllm.stream_interval == result.sglang.stream_interval == 4
    # Triton's TensorRT-LLM backend has no such setting: its settings carry none.
    assert "stream_interval" not in type(result.trtllm).model_fields


def test_a_stack_can_send_every_token_alone() -> None:
    spec = stack_spec("prod")
    every = spec.model_copy(update={"models": tuple(m.model_copy(update={"stream_chunk_ms": 0}) for m in spec.models)})
    for role in size_platform(every).servings.values():
        assert role.result.vllm.stream_interval == role.result.sglang.stream_interval == 1


@pytest.mark.parametrize(
    ("chunk_ms", "step_ms", "interval"),
    [(100, 20.66, 4), (100, 25.0, 4), (100, 25.01, 3), (100, 76.15, 1), (100, 150.0, 1), (0, 20.0, 1), (100, 0.0, 1)],
)
def test_stream_interval_counts_the_steps_that_fit_in_a_chunk(chunk_ms: int, step_ms: float, interval: int) -> None:
    assert stream_interval(chunk_ms, step_ms) == interval


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2000), st.floats(min_value=0.5, max_value=500.0))
def test_a_chunk_never_waits_longer_than_asked_unless_one_token_already_does(chunk_ms: int, step_ms: float) -> None:
    interval = stream_interval(chunk_ms, step_ms)
    assert interval >= 1
    if interval > 1:
        assert interval * step_ms <= chunk_ms
    assert (interval + 1) * step_ms > chunk_ms
