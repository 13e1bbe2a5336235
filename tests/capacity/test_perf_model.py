"""The performance model: its physics on small cases, and its error against published results."""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
import random
from urllib.parse import urlparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.sizing import MEMORY_BANDWIDTH_EFFICIENCY, weights_bytes
from inferplane.components.catalog import ModelArchitecture, get_accelerator, get_model
from tests.published import compare, load, median_abs_error, sglang_040_max_running_requests, sglang_replica


def _replica(model: str = "llama-3.1-8b", accelerator: str = "h100-80gb", **changes: object) -> perf_model.Replica:
    values: dict[str, object] = {
        "model": get_model(model),
        "accelerator": get_accelerator(accelerator),
        "tensor_parallel_size": 1,
        "weights_dtype": "bf16",
        "kv_cache_dtype": "auto",
        "engine": "vllm",
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "kv_capacity_tokens": 400_000,
    }
    values.update(changes)
    return perf_model.Replica(**values)  # type: ignore[arg-type]


def test_the_data_file_covers_the_models_gpus_precisions_and_mixes_asked_for() -> None:
    rows = load()
    assert len(rows) >= 30
    assert {r.model for r in rows} >= {"llama-3.1-8b", "llama-3.3-70b", "llama-3.1-405b", "mixtral-8x7b"}
    assert {r.accelerator for r in rows} >= {"h100-80gb", "h200-141gb", "l40s-48gb", "a100-80gb"}
    assert {r.weights_dtype for r in rows} >= {"fp8", "bf16", "fp16"}
    assert {r.metric for r in rows} == {"output_tokens_per_second", "mean_itl_ms"}
    assert {r.engine for r in rows} == {"triton", "sglang"}
    assert min(r.input_tokens for r in rows) <= 128 and max(r.input_tokens for r in rows) >= 20000
    for row in rows:
        assert urlparse(row.source).scheme == "https" and row.measured and row.published > 0


@pytest.mark.parametrize(("engine", "metrics"), [("triton", 2), ("sglang", 1)])
def test_predictions_meet_the_goal_on_published_results(engine: str, metrics: int) -> None:
    """Each engine's rows apart, so five SGLang rows cannot hide among TensorRT-LLM's 139 (SGLang has no published
    mean-ITL row yet: ``metrics`` says how many metrics each engine's rows cover)."""
    comparisons = [c for c in compare() if c.row.engine == engine]
    measured = {c.row.metric for c in comparisons}
    assert len(measured) == metrics
    for metric in measured:
        assert median_abs_error(comparisons, metric) <= 0.25, metric
    worst = max(comparisons, key=lambda c: c.ratio)
    assert worst.ratio <= 2.0, (worst.row, worst.predicted)


def test_sglang_rows_run_on_sglang_040_defaults() -> None:
    """The SGLang rows' servers set no memory fraction, batch or chunk: SGLang 0.4.0's defaults for TP 4 on H200
    (fraction 0.85 of the device less the weights, chunks of 8192, slots capped by its request pool)."""
    row = next(r for r in load() if r.engine == "sglang")
    replica = sglang_replica(row)
    model, h200 = get_model("llama-3.3-70b"), get_accelerator("h200-141gb")
    pool = int(4 * h200.memory_bytes * 0.85) - weights_bytes(model, "bf16")
    assert replica.kv_capacity_tokens == pool // (2 * 80 * 8 * 128 * 2)
    assert (replica.engine, replica.max_num_batched_tokens, replica.max_num_seqs) == ("sglang", 8192, 4097)


@pytest.mark.parametrize(
    ("tokens", "slots"),
    [(1_140_272, 4097), (100_000, 2049), (300_000, 2049), (600_000, 2344), (3_000, 1500)],
)
def test_sglang_040_slots_follow_its_request_pool(tokens: int, slots: int) -> None:
    """``min(tokens // 2, min(max(tokens / context x 512, 2048), 4096) + 1)`` at Llama's 131072 context."""
    assert sglang_040_max_running_requests(tokens, 131072) == slots


def test_single_stream_decode_reads_the_weights_once_per_token() -> None:
    replica = _replica()
    model = replica.model
    mix = perf_model.Workload(input_tokens=1, output_tokens=2)
    bandwidth = 3350e9 * MEMORY_BANDWIDTH_EFFICIENCY
    kv = 2 * (1 + 1) * replica.kv_bytes_per_token / 2  # one sequence at a mean context of 2 tokens
    expected = (
        weights_bytes(model, "bf16") + kv
    ) / bandwidth + model.layers * perf_model.KERNEL_OVERHEAD_SECONDS_PER_LAYER
    assert perf_model.single_stream_itl_ms(replica, mix) == pytest.approx(expected * 1000, rel=1e-3)


def test_a_mixture_of_experts_reads_only_the_routed_experts_for_one_token() -> None:
    mixtral = get_model("mixtral-8x7b")
    replica = _replica("mixtral-8x7b", "h200-141gb")
    one = perf_model.step_time(replica, 1, 0, 1, 1).seconds
    many = perf_model.step_time(replica, 256, 0, 1, 1).seconds
    total = weights_bytes(mixtral, "bf16")
    # Two of eight experts for one token: about 12.9B of 46.7B parameters; every expert for 256 tokens.
    assert many / one == pytest.approx(total / (total * mixtral.active_parameters / mixtral.parameters), rel=0.1)  # type: ignore[operator]


def test_saturation_is_capped_by_the_kv_cache_and_trtllm_reserves_whole_sequences() -> None:
    mix = perf_model.Workload(input_tokens=1000, output_tokens=1000)
    vllm = perf_model.saturation(_replica(kv_capacity_tokens=60_000), mix)
    trt = perf_model.saturation(_replica(kv_capacity_tokens=60_000, engine="triton"), mix)
    assert (vllm.batch, vllm.capacity) == (40, "kv-capacity")  # 60000 // (1000 + 500)
    assert (trt.batch, trt.capacity) == (30, "kv-capacity")  # 60000 // 2000
    assert vllm.output_tokens_per_second > trt.output_tokens_per_second
    slots = perf_model.saturation(_replica(max_num_seqs=8), mix)
    assert (slots.batch, slots.capacity) == (8, "max-num-seqs")


def test_sglang_runs_prompts_in_steps_of_their_own() -> None:
    """SGLang (no ``--enable-mixed-chunk``): one decode step, plus prefill steps of what waits (at least one prompt,
    at most a chunk), a share of one per decode step; vLLM runs both in one step, a share of its steps carrying a
    whole prompt."""
    sglang = _replica(engine="sglang", max_num_batched_tokens=2048)
    decode = perf_model.step_time(sglang, 64, 0, 1500, 1000)
    # 100 waiting prompt tokens: one prefill step runs a whole 1000-token prompt, a tenth of it per decode step.
    prompt = perf_model.step_time(sglang, 0, 1000, 1500, 1000)
    step = perf_model.engine_step(sglang, 64, 100, 1500, 1000)
    assert step.seconds == pytest.approx(decode.seconds + 0.1 * prompt.seconds, rel=1e-12)
    # 5000 waiting tokens: steps of a full 2048-token chunk, 5000 / 2048 of one per decode step.
    chunk = perf_model.step_time(sglang, 0, 2048, 1500, 1000)
    step = perf_model.engine_step(sglang, 64, 5000, 1500, 1000)
    assert step.seconds == pytest.approx(decode.seconds + 5000 / 2048 * chunk.seconds, rel=1e-12)
    assert perf_model.engine_step(sglang, 64, 0, 1500, 1000) == decode
    vllm = _replica(max_num_batched_tokens=2048)
    vllm_decode = perf_model.step_time(vllm, 64, 0, 1500, 1000)
    mixed = perf_model.step_time(vllm, 64, 1000, 1500, 1000)
    # vLLM: a tenth of the steps carry the whole prompt beside the decodes (not a sliver of it in every step).
    step = perf_model.engine_step(vllm, 64, 100, 1500, 1000)
    assert step.seconds == pytest.approx(vllm_decode.seconds + 0.1 * (mixed.seconds - vllm_decode.seconds), rel=1e-12)
    assert step.seconds > perf_model.step_time(vllm, 64, 100, 1500, 1000).seconds
    # Prompts filling the budget's room every step: each step carries them all.
    assert perf_model.engine_step(vllm, 64, 1984, 1500, 1000) == perf_model.step_time(vllm, 64, 1984, 1500, 1000)


def test_sglang_batch_is_its_running_requests_not_the_chunk() -> None:
    """A prompt-heavy mix: vLLM's step must carry batch x (1 + input/output) tokens within its budget, SGLang's
    chunk bounds only its prefill steps, so ``--max-running-requests`` caps its batch."""
    mix = perf_model.Workload(input_tokens=4000, output_tokens=100)
    vllm = perf_model.saturation(_replica(max_num_batched_tokens=2048, max_num_seqs=64), mix)
    sglang = perf_model.saturation(_replica(engine="sglang", max_num_batched_tokens=2048, max_num_seqs=64), mix)
    assert (vllm.batch, vllm.capacity) == (49, "token-budget")  # 2048 // 41
    assert (sglang.batch, sglang.capacity) == (64, "max-num-seqs")  # the KV cache holds 400000 // 4050 = 98


def test_latency_rises_with_the_rate_and_the_queue_diverges_at_saturation() -> None:
    replica = _replica(max_num_seqs=64)
    mix = perf_model.Workload(input_tokens=500, output_tokens=200)
    peak = perf_model.saturation(replica, mix).requests_per_second
    light, busy = (perf_model.at_rate(replica, mix, peak * share) for share in (0.1, 0.9))
    assert light.stable and busy.stable
    assert light.ttft_p95_ms < busy.ttft_p95_ms and light.itl_mean_ms < busy.itl_mean_ms
    assert light.concurrency < busy.concurrency <= 64
    beyond = perf_model.at_rate(replica, mix, peak * 1.01)
    assert not beyond.stable and math.isinf(beyond.ttft_p95_ms)


def test_requests_in_service_count_the_prefill_as_well_as_the_decode() -> None:
    """Little's law over the whole service: a long prompt holds its slot while it is prefilled, so the requests in
    service exceed the decoding ones by the rate x the prefill time; overloaded, they are the whole batch."""
    replica = _replica(model="qwen2.5-7b", accelerator="l40s-48gb", max_num_seqs=8, max_num_batched_tokens=2048)
    mix = perf_model.Workload(input_tokens=30000, output_tokens=100)
    rate = 0.01  # light: the queue wait is negligible, so the mean TTFT is the prefill
    light = perf_model.at_rate(replica, mix, rate)
    service_s = (light.ttft_mean_ms + mix.output_tokens * light.itl_mean_ms) / 1000
    assert light.in_service == pytest.approx(rate * service_s, rel=1e-6)
    assert light.in_service > 2 * rate * mix.output_tokens * light.itl_mean_ms / 1000
    overload = perf_model.at_rate(replica, mix, 10.0)
    batch, capacity = perf_model.max_batch(replica, mix)
    assert (batch, capacity) == (6, "token-budget")  # 2048 // (1 + 300)
    assert not overload.stable and overload.in_service == overload.concurrency == batch


def test_tensor_parallelism_pays_for_its_all_reduces() -> None:
    mix = perf_model.Workload(input_tokens=100, output_tokens=100)
    one = perf_model.single_stream_itl_ms(_replica("llama-3.3-70b", "h200-141gb"), mix)
    two = perf_model.single_stream_itl_ms(_replica("llama-3.3-70b", "h200-141gb", tensor_parallel_size=2), mix)
    assert one / 2 < two < one


def test_mixtral_expert_arithmetic() -> None:
    mixtral = get_model("mixtral-8x7b")
    expert = mixtral.expert_parameters
    shared = mixtral.parameters - 8 * expert
    assert expert == (46_702_792_704 - 12_879_921_152) // 6
    assert shared + 2 * expert == pytest.approx(mixtral.active_parameters, abs=6)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"experts": 8}, "experts and experts_per_token go together"),
        ({"experts": 8, "experts_per_token": 2}, "needs active_parameters"),
        ({"experts": 2, "experts_per_token": 4, "active_parameters": 1}, "experts_per_token exceeds experts"),
    ],
)
def test_a_mixture_of_experts_needs_consistent_fields(changes: dict[str, int], message: str) -> None:
    base = get_model("llama-3.1-8b").model_dump()
    with pytest.raises(ValueError, match=message):
        ModelArchitecture.model_validate({**base, **changes})


def _mmc_refused(servers: int, rate: float, service_s: float, timeout_s: float, queue_max: int, *, seed: int) -> float:
    """Share of arrivals an M/M/c queue in front of a gateway refuses, by simulation: each arrival waits for the
    earliest server free (first come, first served) and is refused when that wait passes ``timeout_s`` or
    ``queue_max`` are waiting before it (a refused arrival takes no server)."""
    rng = random.Random(seed)
    free_at = [0.0] * servers  # when each server next frees, a heap
    starts: list[float] = []  # start times of admitted arrivals still waiting at some arrival, ascending
    now, refused, arrivals = 0.0, 0, 200_000
    for _ in range(arrivals):
        now += rng.expovariate(rate)
        while starts and starts[0] <= now:
            starts.pop(0)
        start = max(now, free_at[0])
        if start - now > timeout_s or len(starts) >= queue_max:
            refused += 1
            continue
        heapq.heapreplace(free_at, start + rng.expovariate(1 / service_s))
        if start > now:
            starts.append(start)  # FIFO: starts arrive in order
    return refused / arrivals


@pytest.mark.parametrize(
    ("rate", "timeout_s", "queue_max", "slack"),
    [
        (1.6, 2.0, 1000, 1.05),  # the timeout refuses (M/M/c+D, exact)
        (1.8, 1.0, 1000, 1.05),
        (1.8, 30.0, 3, 1.05),  # the waiting room refuses (M/M/c/K, exact)
        (2.0, 2.0, 2, 1.6),  # both: their sum, a bound
    ],
)
def test_the_refused_share_is_what_a_queue_with_the_gateways_limits_refuses(
    rate: float, timeout_s: float, queue_max: int, slack: float
) -> None:
    """:meth:`Latency.refused_share` against a simulated queue with the same batch and service time, whose arrivals
    the gateway's limits refuse (200,000 arrivals: the measured share is good to about 2%)."""
    replica = _replica(max_num_seqs=4, kv_capacity_tokens=400_000)
    mix = perf_model.Workload(input_tokens=1000, output_tokens=200)
    latency = perf_model.at_rate(replica, mix, rate)
    assert latency.batch == perf_model.max_batch(replica, mix)[0] == 4
    predicted = latency.refused_share(timeout_s, queue_max)
    measured = _mmc_refused(latency.batch, rate, latency.service_seconds, timeout_s, queue_max, seed=7)
    assert measured > 0.01
    assert measured / 1.05 <= predicted <= measured * slack
    assert perf_model.at_rate(replica, mix, 1000.0).refused_share(timeout_s, queue_max) >= 0.99
    assert perf_model.at_rate(replica, mix, 1e-6).refused_share(timeout_s, queue_max) < 1e-12


@settings(max_examples=300, deadline=None)
@given(
    batch=st.integers(1, 1024),
    service_s=st.floats(0.01, 600),
    rate=st.floats(1e-6, 1e5),
    more=st.floats(1.0, 10.0),
    timeout_s=st.floats(0.01, 60),
    queue_max=st.integers(0, 4096),
)
def test_the_refused_share_is_a_share_that_grows_with_the_rate_and_shrinks_with_the_limits(
    *, batch: int, service_s: float, rate: float, more: float, timeout_s: float, queue_max: int
) -> None:
    """Over the whole range the flags and the spec allow: finite, within 0 and 1, no overflow, monotone."""
    base = perf_model.at_rate(_replica(max_num_seqs=4), perf_model.Workload(input_tokens=100, output_tokens=10), 1.0)
    at = functools.partial(dataclasses.replace, base, batch=batch, service_seconds=service_s)
    share = at(requests_per_second=rate).refused_share(timeout_s, queue_max)
    assert 0.0 <= share <= 1.0
    assert at(requests_per_second=rate * more).refused_share(timeout_s, queue_max) >= share - 1e-12
    assert at(requests_per_second=rate).refused_share(timeout_s * more, queue_max) <= share + 1e-12
    assert at(requests_per_second=rate).refused_share(timeout_s, queue_max + 1) <= share + 1e-12
