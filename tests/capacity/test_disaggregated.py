"""A disaggregated model's performance and its plans: the prefill role's M/D/1 queue against a simulated one, decode
steps free of prompt chunks, and the planner weighing prefill and decode roles against aggregated replicas."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplane.components.capacity import disaggregated, perf_model, planner
from inferplane.components.capacity.planner import Candidate, Filters, Workload, plan
from inferplane.components.catalog import get_model

H100_H200 = Filters(accelerators=("h100-80gb", "h200-141gb"), engines=("vllm",))


def _workload(**changes: Any) -> Workload:
    values: dict[str, Any] = {
        "model": get_model("llama-3.3-70b"),
        "model_label": "llama-3.3-70b",
        "input_tokens": 10_000,
        "output_tokens": 1_000,
        "requests_per_second": 4.0,
        "peak_requests_per_second": 4.0,
        "ttft_p95_ms": 3000.0,
        "itl_p95_ms": 20.0,
    }
    values.update(changes)
    return Workload(**values)


def _simulated_wait_p95(load: float, service: float, arrivals: int = 200_000) -> float:
    """The p95 wait of an M/D/1 queue by Lindley's recursion (seeded): each arrival waits for the work ahead of it."""
    rng = random.Random(7)
    wait, waits = 0.0, []
    for _ in range(arrivals):
        waits.append(wait)
        wait = max(0.0, wait + service - rng.expovariate(load / service))
    waits.sort()
    return waits[int(0.95 * len(waits))]


@pytest.mark.parametrize("load", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_the_prefill_queues_p95_wait_is_a_simulated_md1_queues_within_20_percent(load: float) -> None:
    """The model's tail (``load x e^(-theta t)``, floored by one service's rest) against Lindley's recursion: under
    by at most 20% (at load 0.3; 4% at 0.7 and above). M/M/1's tail, the aggregated queue's assumption, would be about
    twice it from load 0.5 up."""
    service = 0.2
    model = math.log(load / perf_model.TAIL_SHARE) / disaggregated.fixed_service_decay_rate(load / service, service)
    model = max(model, service * (1 - perf_model.TAIL_SHARE / load))
    simulated = _simulated_wait_p95(load, service)
    assert abs(model - simulated) <= 0.2 * simulated


@pytest.mark.parametrize("load", [0.05, 0.5, 0.99])
def test_the_decay_rate_solves_its_equation(load: float) -> None:
    service = 0.3
    rate = load / service
    theta = disaggregated.fixed_service_decay_rate(rate, service)
    assert rate * math.expm1(theta * service) == pytest.approx(theta, rel=1e-9)
    assert theta > 1 / service - rate  # a fixed service's tail falls faster than an exponential one's


def _replica(role: str) -> perf_model.Replica:
    """Llama 3.3 70B on 8 H100s as the prefill or decode role sizes it."""
    workload = _workload()
    config = next(
        c
        for c, _ in planner.configurations(workload, Filters(accelerators=("h100-80gb",), engines=("vllm",)))
        if c.tensor_parallel_size == 8
    )
    evaluation = (
        planner.evaluate_prefill(workload, config) if role == "prefill" else planner.evaluate_decode(workload, config)
    )
    assert not isinstance(evaluation, planner.Rejection)
    return evaluation.replica


def test_a_prefill_replica_computes_a_prompt_in_its_chunks_and_queues_the_rest() -> None:
    replica = _replica("prefill")
    mix = perf_model.Workload(input_tokens=10_000, output_tokens=1_000)
    assert replica.max_num_batched_tokens == 16384  # the role's budget: no decode waits on its steps
    alone = disaggregated.prefill_at_rate(replica, mix, 0.0)
    assert alone.compute_seconds == perf_model.step_time(replica, 0, 10_000, 10_000, 10_000).seconds
    assert alone.service_seconds == pytest.approx(
        10_000 / 16384 * perf_model.step_time(replica, 0, 16384, 10_000, 10_000).seconds
    )
    assert alone.wait_p95_seconds == 0.0
    busy = disaggregated.prefill_at_rate(replica, mix, 0.8 / alone.service_seconds)
    assert busy.stable and busy.wait_p95_seconds > alone.service_seconds
    assert not disaggregated.prefill_at_rate(replica, mix, 1 / alone.service_seconds).stable


def test_a_decode_replicas_steps_carry_no_prompt_so_its_itl_is_the_aggregated_replicas_without_the_chunk() -> None:
    """What disaggregation buys: at the same rate, an aggregated replica's ITL p95 is a step carrying a prompt chunk;
    a decode replica's is a decode step."""
    decode = _replica("decode")
    mix = perf_model.Workload(input_tokens=10_000, output_tokens=1_000)
    rate = 0.5
    split = disaggregated.decode_at_rate(decode, mix, rate)
    together = perf_model.at_rate(replace(decode, max_num_batched_tokens=2048), mix, rate)
    step = perf_model.step_time(decode, split.concurrency, 0, 10_500, 10_000).seconds
    assert split.itl_p95_ms == pytest.approx(step * 1000)
    assert together.itl_p95_ms > 1.5 * split.itl_p95_ms


def test_the_long_prompt_workload_is_planned_disaggregated() -> None:
    """10k in / 1k out at a 20 ms ITL objective: in an aggregated replica a 10k prompt's chunks stretch the steps the
    running streams wait on, so it takes more GPUs than decode replicas whose steps carry none."""
    result = plan(_workload(), H100_H200)
    first = result.candidates[0]
    aggregated = next(c for c in result.candidates if c.serving == "aggregated")
    assert first.serving == "disaggregated"
    assert first.hourly_cost_usd < aggregated.hourly_cost_usd
    assert first.itl_p95_ms <= 20 and first.ttft_p95_ms <= 3000
    assert first.kv_transfer_ms > 0 and first.prefill_replicas >= 1


def test_the_short_prompt_workload_is_planned_aggregated() -> None:
    """200 in / 200 out: a prompt is cheap to compute among the decodes; a second role only adds replicas and a
    transfer (the cheapest disaggregated pair costs as much at best, and at equal cost aggregated comes first)."""
    result = plan(
        _workload(input_tokens=200, output_tokens=200, requests_per_second=20.0, peak_requests_per_second=20.0,
                  ttft_p95_ms=500.0, itl_p95_ms=40.0),
        H100_H200,
    )  # fmt: skip
    disaggregated_first = next(c for c in result.candidates if c.serving == "disaggregated")
    assert result.candidates[0].serving == "aggregated"
    assert result.candidates[0].hourly_cost_usd <= disaggregated_first.hourly_cost_usd


def test_only_vllm_on_nvidia_gpus_is_planned_disaggregated() -> None:
    result = plan(
        _workload(model=get_model("llama-3.1-8b"), model_label="llama-3.1-8b"),
        Filters(accelerators=("h100-80gb", "tpu-v5e")),
    )
    split = [c for c in result.candidates if c.serving == "disaggregated"]
    assert split and {(c.engine, c.accelerator) for c in split} == {("vllm", "h100-80gb")}
    only = plan(_workload(), replace(H100_H200, serving=("aggregated",)))
    assert {c.serving for c in only.candidates} == {"aggregated"}


def _role_latency(
    workload: Workload, c: Candidate, prefill_replicas: int, decode_replicas: int
) -> disaggregated.DisaggregatedLatency:
    configs = {
        (config.tensor_parallel_size): config
        for config, _ in planner.configurations(workload, Filters(accelerators=(c.accelerator,), engines=("vllm",)))
        if config.kv_cache_dtype == c.kv_cache_dtype
    }
    prefill = planner.evaluate_prefill(workload, configs[c.prefill_tensor_parallel_size])
    decode = planner.evaluate_decode(workload, configs[c.tensor_parallel_size])
    assert not isinstance(prefill, planner.Rejection) and not isinstance(decode, planner.Rejection)
    mix = perf_model.Workload(input_tokens=workload.input_tokens, output_tokens=workload.output_tokens)
    return disaggregated.at_rate(
        prefill.replica,
        decode.replica,
        mix,
        prefill_rate=workload.requests_per_second / prefill_replicas,
        decode_rate=workload.requests_per_second / decode_replicas,
        transfer_seconds=c.kv_transfer_ms / 1000,
    )


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    input_tokens=st.integers(1000, 12_000),
    output_tokens=st.integers(50, 1500),
    rate=st.floats(0.5, 12),
    ttft=st.floats(1500, 6000),
    itl=st.floats(12, 60),
)
def test_every_disaggregated_candidate_meets_the_objectives_with_no_replica_to_spare(
    input_tokens: int, output_tokens: int, rate: float, ttft: float, itl: float
) -> None:
    """At its replica counts each disaggregated candidate's TTFT (prefill queue, compute, transfer, decode slot) and
    ITL are within the objectives; one decode replica fewer breaks the decode role's criterion."""
    workload = _workload(
        model=get_model("llama-3.1-8b"),
        model_label="llama-3.1-8b",
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        requests_per_second=rate,
        peak_requests_per_second=rate,
        ttft_p95_ms=ttft,
        itl_p95_ms=itl,
    )
    result = plan(workload, Filters(accelerators=("h100-80gb",), engines=("vllm",), serving=("disaggregated",)))
    for c in result.candidates[:3]:
        latency = _role_latency(workload, c, c.prefill_replicas, c.replicas)
        assert latency.stable
        assert latency.ttft_p95_ms <= ttft + 0.05 and latency.itl_p95_ms <= itl + 0.005
        assert c.ttft_p95_ms == pytest.approx(latency.ttft_p95_ms, abs=0.05)
        if c.replicas > 1:
            fewer = _role_latency(workload, c, c.prefill_replicas, c.replicas - 1).decode
            wait_ms = fewer.ttft_p95_ms - fewer.itl_mean_ms
            assert not (
                fewer.stable
                and fewer.itl_p95_ms <= itl
                and wait_ms <= disaggregated.DECODE_WAIT_SHARE * ttft
                and fewer.refused_share(2.0, 32) <= planner.REFUSED_SHARE
            )
