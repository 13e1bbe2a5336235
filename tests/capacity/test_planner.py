"""The capacity planner: brute-force reference, the CLI's JSON contract, and writing a stack in place."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplane.components.capacity import perf_model, planner
from inferplane.components.capacity.planner import (
    Configuration,
    Evaluation,
    Filters,
    Rejection,
    Workload,
    configurations,
    evaluate,
    meets,
    plan,
    replica_model,
)
from inferplane.components.capacity.sizing import SizingRequest, size
from inferplane.components.catalog import get_accelerator, get_instance_type, get_model, hourly_price
from inferplane.components.observability.keda import target_waiting_per_replica
from inferplane.components.spec.platform_spec import AdmissionSpec
from inferplane.tool.cli import main
from inferplane.tool.exitcodes import EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR

CANDIDATE_KEYS = {
    "accelerator",
    "instance_type",
    "tensor_parallel_size",
    "engine",
    "weights_dtype",
    "kv_cache_dtype",
    "replicas",
    "hourly_cost_usd",
    "cost_per_million_output_tokens_usd",
    "ttft_p95_ms",
    "itl_p95_ms",
    "max_output_tokens_per_second",
}

FILTERS = Filters(
    accelerators=("l4-24gb", "l40s-48gb", "tpu-v5e"), weights_dtypes=("bf16", "fp8"), serving=("aggregated",)
)
"""The aggregated search, which the brute force below checks (disaggregated: tests/capacity/test_disaggregated.py)."""
MAX_REPLICAS_TRIED = 256
"""The spec's most replicas for a deployment (``autoscaling.max_replicas``)."""


def _workload(**changes: Any) -> Workload:
    values: dict[str, Any] = {
        "model": get_model("llama-3.1-8b"),
        "model_label": "llama-3.1-8b",
        "input_tokens": 500,
        "output_tokens": 200,
        "requests_per_second": 2.0,
        "peak_requests_per_second": 4.0,
        "ttft_p95_ms": 2000.0,
        "itl_p95_ms": 100.0,
    }
    values.update(changes)
    return Workload(**values)


def _brute_force_cheapest(
    workload: Workload,
    evaluated: Mapping[Configuration, Evaluation | Rejection] | None = None,
    ceiling: float | None = None,
) -> float | None:
    """Every configuration, every host, every replica count from one up: the cheapest that meets both objectives
    with at most one request in a thousand refused by the gateway's admission.

    A configuration's evaluation (its batch and sizing) is the planner's :func:`evaluate`; ``evaluated`` holds the ones
    a plan of the same workload already made (the same function on the same inputs, so the same result), which the
    search reuses instead of making each again: it checks the choice among them, not the evaluation. Replica counts
    are tried while some host's cost stays within ``ceiling`` (the cost to beat: a dearer count cannot be the
    cheapest), else up to the spec's most replicas; a host's cost never falls as replicas are added, so a host's
    first count that meets is its cheapest."""
    mix = perf_model.Workload(input_tokens=workload.input_tokens, output_tokens=workload.output_tokens)
    admission = workload.admission
    best: float | None = None
    for config, hosts in configurations(workload, FILTERS):
        result = evaluated[config] if evaluated and config in evaluated else evaluate(workload, config)
        if not isinstance(result, Evaluation):
            continue
        replica = replica_model(workload, config, result.sizing)
        priced = [
            (host.accelerators_per_node, price)
            for host in hosts
            if (price := hourly_price(host.cloud, host.name)) is not None
            and host.accelerators_per_node % config.tensor_parallel_size == 0
        ]

        def cost(replicas: int, per_node: int, price: float, tp: int = config.tensor_parallel_size) -> float:
            return round(math.ceil(replicas * tp / per_node) * price, 4)

        for replicas in range(1, MAX_REPLICAS_TRIED + 1):
            costs = [cost(replicas, per_node, price) for per_node, price in priced]
            if not costs or (ceiling is not None and min(costs) > ceiling):
                break
            latency = perf_model.at_rate(replica, mix, workload.requests_per_second / replicas)
            refused = latency.refused_share(admission.queue_timeout_seconds, admission.queue_max)
            if (
                latency.stable
                and latency.ttft_p95_ms <= workload.ttft_p95_ms
                and latency.itl_p95_ms <= workload.itl_p95_ms
                and refused <= planner.REFUSED_SHARE
            ):
                best = min(costs) if best is None else min(best, *costs)
                break
    return best


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    input_tokens=st.integers(32, 4000),
    output_tokens=st.integers(16, 1000),
    rate=st.floats(0.05, 30),
    ttft=st.floats(150, 5000),
    itl=st.floats(15, 200),
)
def test_first_candidate_is_the_brute_force_cheapest_and_none_misses(
    input_tokens: int, output_tokens: int, rate: float, ttft: float, itl: float
) -> None:
    workload = _workload(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        requests_per_second=rate,
        peak_requests_per_second=rate,
        ttft_p95_ms=ttft,
        itl_p95_ms=itl,
    )
    evaluated: dict[Configuration, Evaluation | Rejection] = {}

    def recorded(workload: Workload, config: Configuration) -> Evaluation | Rejection:
        evaluated[config] = evaluate(workload, config)
        return evaluated[config]

    with mock.patch.object(planner, "evaluate", recorded):
        result = plan(workload, FILTERS)
    assert evaluated  # the plan evaluated through the recorder
    cheapest = _brute_force_cheapest(
        workload, evaluated, result.candidates[0].hourly_cost_usd if result.candidates else None
    )
    if cheapest is None:
        assert result.candidates == ()
        return
    assert result.candidates[0].hourly_cost_usd == cheapest
    costs = [c.hourly_cost_usd for c in result.candidates]
    assert costs == sorted(costs)
    for c in result.candidates:
        instance = get_instance_type(c.instance_type)
        fit = size(
            SizingRequest(
                model=workload.model,
                model_label=workload.model_label,
                accelerator=get_accelerator(c.accelerator),
                accelerators_per_node=instance.accelerators_per_node,
                weights_dtype=c.weights_dtype,
                kv_cache_dtype=c.kv_cache_dtype,
                context=c.max_context,
                concurrency=c.max_num_seqs,
                tensor_parallel_size=c.tensor_parallel_size,
                itl_slo_ms=max(1, int(itl)),
                whole_node=instance.cloud == "gcp",
            )
        )
        assert fit.fits, fit.reason
        assert c.ttft_p95_ms <= ttft + 0.05 and c.itl_p95_ms <= itl + 0.005
        assert c.max_context >= input_tokens + output_tokens
        assert c.weights_dtype in FILTERS.weights_dtypes


def test_only_allowed_precisions_are_used() -> None:
    result = plan(_workload(), Filters(accelerators=("l40s-48gb",)))
    assert result.candidates
    assert {(c.weights_dtype, c.kv_cache_dtype) for c in result.candidates} == {("bf16", "auto")}


def test_sglang_configurations_stay_on_nvidia_gpus() -> None:
    sglang = configurations(_workload(), Filters(accelerators=("l4-24gb", "tpu-v5e"), engines=("sglang",)))
    vllm = configurations(_workload(), Filters(accelerators=("l4-24gb", "tpu-v5e"), engines=("vllm",)))
    assert {c.accelerator.id for c, _ in sglang} == {"l4-24gb"}
    assert {c.accelerator.id for c, _ in vllm} == {"l4-24gb", "tpu-v5e"}


def test_peak_rate_sets_max_replicas_and_the_batch_sets_the_keda_threshold() -> None:
    workload = _workload(requests_per_second=3.0, peak_requests_per_second=30.0)
    first = plan(workload, Filters(accelerators=("l4-24gb",), engines=("vllm",), serving=("aggregated",))).candidates[0]
    assert first.max_replicas == math.ceil(30.0 / first.replica_capacity_rps)
    assert first.replicas == math.ceil(3.0 / first.replica_capacity_rps)
    evaluation = evaluate(
        workload,
        next(
            config
            for config, _ in configurations(workload, Filters(accelerators=("l4-24gb",), engines=("vllm",)))
            if config.tensor_parallel_size == first.tensor_parallel_size and config.kv_cache_dtype == "auto"
        ),
    )
    assert isinstance(evaluation, Evaluation)
    assert meets(workload, evaluation.replica, first.replica_capacity_rps)
    assert target_waiting_per_replica(first.max_num_seqs) == max(1, first.max_num_seqs // 4)


def test_the_batch_holds_the_requests_being_prefilled() -> None:
    """Long prompts, short outputs: most of a request's time in service is its prefill, during which it holds a
    batch slot. Capping the batch at the decoding requests alone left vLLM too few slots for its own capacity (2
    slots and 0.21 request/s per replica where 3 served 0.28, by the model of the time); counted with the requests
    in prefill, and a slot to spare for the gateway's queue, the batch is 6 slots at 0.24 request/s (21 replicas)."""
    qwen = get_model("qwen2.5-7b")
    workload = _workload(
        model=qwen,
        model_label="qwen2.5-7b",
        input_tokens=30000,
        output_tokens=100,
        requests_per_second=5.0,
        peak_requests_per_second=5.0,
        ttft_p95_ms=30000.0,
        itl_p95_ms=300.0,
        # A team with a 30 s TTFT objective lets the gateway hold a request that long (2 s, the default, would
        # refuse most of what waits for one of a few slots each busy ~10 s).
        admission=AdmissionSpec(queue_timeout_seconds=30),
    )
    first = plan(workload, Filters(accelerators=("l40s-48gb",), engines=("vllm",))).candidates[0]
    assert (first.instance_type, first.max_num_seqs, first.replicas) == ("g6e.xlarge", 6, 21)
    assert first.replica_capacity_rps == pytest.approx(0.239, abs=0.005)
    config = next(
        c
        for c, _ in configurations(workload, Filters(accelerators=("l40s-48gb",), engines=("vllm",)))
        if c.tensor_parallel_size == 1
    )
    evaluation = evaluate(workload, config)
    assert isinstance(evaluation, Evaluation)
    mix = perf_model.Workload(input_tokens=30000, output_tokens=100)
    operating = perf_model.at_rate(evaluation.replica, mix, evaluation.capacity_rps)
    # The batch holds every request in service, prefilling ones included (more than the decoding ones alone); a slot
    # beyond them is what keeps the gateway's queue, and so its refusals, short.
    assert math.ceil(operating.concurrency) < math.ceil(operating.in_service) <= first.max_num_seqs


def _plan_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, Any]]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


PLAN = [
    "plan",
    "--model",
    "llama-3.1-8b",
    "--input-tokens",
    "500",
    "--output-tokens",
    "200",
    "--requests-per-second",
    "2",
    "--peak-requests-per-second",
    "4",
    "--ttft-p95-ms",
    "2000",
    "--itl-p95-ms",
    "100",
]


def test_plan_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _plan_json(capsys, [*PLAN, "--accelerator", "l40s-48gb", "--accelerator", "l4-24gb", "--json"])
    assert code == EXIT_OK
    assert out["candidates"]
    for row in out["candidates"]:
        assert set(row) >= CANDIDATE_KEYS
        assert row["accelerator"] in {"l40s-48gb", "l4-24gb"}
    costs = [row["hourly_cost_usd"] for row in out["candidates"]]
    assert costs == sorted(costs)


def test_plan_with_nothing_feasible_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*PLAN[:-1], "1", "--accelerator", "l4-24gb", "--json"]
    code, out = _plan_json(capsys, argv)
    assert code == EXIT_REFUSED and out == {"candidates": []}


def test_plan_rejects_an_unpriced_region(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--region", "eu-west-1"]) == EXIT_INVALID
    assert "prices are known for us-east-1 (aws) and us-west4 (gcp)" in capsys.readouterr().err


def test_size_json_adds_throughput_and_single_stream_itl(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["size", "--model", "llama-3.1-8b", "--accelerator", "h100-80gb", "--json"]
    code = main([*argv, "--input-tokens", "128", "--output-tokens", "128", "--engine", "triton"])
    out = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK
    assert out["fits"] is True and out["vllm"]["max_num_seqs"] == 32
    replica = perf_model.Replica(
        model=get_model("llama-3.1-8b"),
        accelerator=get_accelerator("h100-80gb"),
        tensor_parallel_size=1,
        weights_dtype="bf16",
        kv_cache_dtype="auto",
        engine="triton",
        max_num_seqs=32,
        max_num_batched_tokens=out["max_num_batched_tokens"],
        kv_capacity_tokens=out["kv_pool_bytes"] // out["kv_cache_bytes_per_token"],
    )
    mix = perf_model.Workload(input_tokens=128, output_tokens=128)
    expected = perf_model.saturation(replica, mix).output_tokens_per_second
    assert out["max_output_tokens_per_second"] == pytest.approx(expected, abs=0.1)
    assert out["single_stream_itl_ms"] == pytest.approx(perf_model.single_stream_itl_ms(replica, mix), abs=0.01)


def _project_copy(tmp_path: Path) -> Path:
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(PROJECT_DIR / "infra", tmp_path / "infra")  # the program main names (a link out is refused)
    shutil.copytree(PROJECT_DIR / "stacks", tmp_path / "stacks")
    shutil.copytree(PROJECT_DIR / "policies", tmp_path / "policies")
    # The policy pack runs with the project's virtual environment (policies/PulumiPolicy.yaml: ../.venv).
    venv = PROJECT_DIR / ".venv"
    if venv.is_dir():
        os.symlink(venv, tmp_path / ".venv")
    return tmp_path


def test_write_stack_round_trip_keeps_comments_and_previews(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project_copy(tmp_path)
    stack_file = project / "stacks" / "Pulumi.staging.yaml"
    before = stack_file.read_text(encoding="utf-8")
    argv = [*PLAN, "--write-stack", "staging", "--project-dir", str(project), "--name", "chat-8b", "--json"]
    code, out = _plan_json(capsys, argv)
    assert code == EXIT_OK
    assert out["written"].startswith("wrote pool plan-")
    after = stack_file.read_text(encoding="utf-8")
    comments = [line for line in before.splitlines() if line.lstrip().startswith("#")]
    assert comments and all(line in after.splitlines() for line in comments)
    # Every original line is still there, in order; the new pool and model are added.
    remaining = iter(after.splitlines())
    assert all(any(line == other for other in remaining) for line in before.splitlines())
    assert "      - name: chat-8b" in after
    first = out["candidates"][0]
    assert f"        instance_type: {first['instance_type']}" in after
    assert main(["preview", "--stack", "staging", "--project-dir", str(project)]) == EXIT_OK


def test_write_stack_names_the_limit_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project_copy(tmp_path)
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    before = stack_file.read_text(encoding="utf-8")
    argv = [*PLAN, "--accelerator", "l40s-48gb", "--write-stack", "dev", "--project-dir", str(project)]
    assert main(argv) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert "stacks/Pulumi.dev.yaml refuses every candidate" in err
    assert "l40s-48gb is not allowed in dev" in err
    assert stack_file.read_text(encoding="utf-8") == before


@pytest.mark.parametrize(("engine", "product"), [("triton", "TensorRT-LLM"), ("sglang", "SGLang")])
def test_size_refuses_a_gpu_only_engine_on_a_tpu(capsys: pytest.CaptureFixture[str], engine: str, product: str) -> None:
    assert main(["size", "--model", "qwen2.5-7b", "--accelerator", "tpu-v5e", "--engine", engine]) == EXIT_INVALID
    assert capsys.readouterr().err.strip() == (
        f"inferplane size: --engine {engine} ({product}) serves NVIDIA GPUs, not tpu-v5e"
    )


def test_plan_searches_sglang_by_default_and_alone_with_engine_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    every = plan(_workload(), Filters(accelerators=("l40s-48gb",)))
    assert {c.engine for c in every.candidates} == {"vllm", "triton", "sglang"}
    code, out = _plan_json(
        capsys, [*PLAN, "--accelerator", "l40s-48gb", "--engine", "sglang", "--top", "1000", "--json"]
    )
    assert code == EXIT_OK
    assert [row["instance_type"] for row in out["candidates"]] == [
        c.instance_type for c in every.candidates if c.engine == "sglang"
    ]
    assert {row["engine"] for row in out["candidates"]} == {"sglang"}


def test_size_engine_sglang_predicts_with_sglang_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["size", "--model", "llama-3.1-8b", "--accelerator", "h100-80gb", "--json", "--engine", "sglang"]
    assert main([*argv, "--input-tokens", "128", "--output-tokens", "128"]) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    flags = out["sglang"]
    # The pool SGLang allocates at its --mem-fraction-static (weights and KV pool only), not vLLM's budget.
    pool = int(get_accelerator("h100-80gb").memory_bytes * flags["mem_fraction_static"]) - out["weights_bytes"]
    replica = perf_model.Replica(
        model=get_model("llama-3.1-8b"),
        accelerator=get_accelerator("h100-80gb"),
        tensor_parallel_size=flags["tp_size"],
        weights_dtype="bf16",
        kv_cache_dtype="auto",
        engine="sglang",
        max_num_seqs=flags["max_running_requests"],
        max_num_batched_tokens=flags["chunked_prefill_size"],
        kv_capacity_tokens=pool // out["kv_cache_bytes_per_token"],
    )
    mix = perf_model.Workload(input_tokens=128, output_tokens=128)
    expected = perf_model.saturation(replica, mix).output_tokens_per_second
    assert out["max_output_tokens_per_second"] == pytest.approx(expected, abs=0.1)
    assert out["single_stream_itl_ms"] == pytest.approx(perf_model.single_stream_itl_ms(replica, mix), abs=0.01)
    vllm = perf_model.saturation(replace(replica, engine="vllm"), mix).output_tokens_per_second
    assert out["max_output_tokens_per_second"] != pytest.approx(vllm, abs=0.1)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (["--input-tokens", "131000"], "inferplane plan: --input-tokens + --output-tokens exceed the 131072 tokens"),
        (["--peak-requests-per-second", "1"], "inferplane plan: --peak-requests-per-second is below"),
    ],
)
def test_plan_invalid_input_exits_2(capsys: pytest.CaptureFixture[str], changes: list[str], message: str) -> None:
    assert main([*PLAN, *changes]) == EXIT_INVALID
    assert capsys.readouterr().err.startswith(message)


def test_the_batch_cap_keeps_the_capacity_it_was_cut_for() -> None:
    """The batch is cut to the requests in service at the replica's capacity, plus what the gateway's queue needs to
    refuse at most one request in a thousand; cut to the requests in service alone, the queue criterion then cut
    the capacity itself (Llama 3.3 70B FP8 on one H200: 0.74 requests/s on 17 slots, where 27 serve 1.16)."""
    workload = _workload(
        model=get_model("llama-3.3-70b"),
        model_label="llama-3.3-70b",
        input_tokens=2000,
        output_tokens=400,
        requests_per_second=10.0,
        peak_requests_per_second=20.0,
        ttft_p95_ms=1500.0,
        itl_p95_ms=50.0,
    )
    filters = Filters(accelerators=("h200-141gb",), engines=("vllm",), weights_dtypes=("fp8",))
    config = next(
        c for c, _ in configurations(workload, filters) if c.tensor_parallel_size == 1 and c.kv_cache_dtype == "fp8"
    )
    evaluation = evaluate(workload, config)
    assert isinstance(evaluation, Evaluation)
    kv_slots = size(
        planner._sizing_request(workload, config, 1)
    ).max_concurrent_sequences  # what the KV cache holds: the batch before the cut
    assert evaluation.replica.max_num_seqs < kv_slots
    whole = planner.replica_capacity_rps(
        replace(evaluation.replica, max_num_seqs=kv_slots), 2000, 400, 1500.0, 50.0, admission=workload.admission
    )
    assert evaluation.capacity_rps == pytest.approx(whole, rel=0.02)
    assert evaluation.capacity_rps == pytest.approx(1.16, abs=0.01)
    assert meets(workload, evaluation.replica, evaluation.capacity_rps)
    fewer = replace(evaluation.replica, max_num_seqs=evaluation.replica.max_num_seqs - 1)
    assert not meets(workload, fewer, evaluation.capacity_rps)


LONG_PROMPTS = [
    "plan",
    "--model",
    "llama-3.1-8b",
    "--input-tokens",
    "8000",
    "--output-tokens",
    "500",
    "--requests-per-second",
    "2",
    "--ttft-p95-ms",
    "2000",
    "--itl-p95-ms",
    "20",
    "--accelerator",
    "l40s-48gb",
]


def test_plan_json_gives_a_disaggregated_candidates_roles(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _plan_json(capsys, [*LONG_PROMPTS, "--serving", "disaggregated", "--json"])
    assert code == EXIT_OK and out["candidates"]
    for row in out["candidates"]:
        assert row["serving"] == "disaggregated" and row["engine"] == "vllm"
        assert row["prefill_tensor_parallel_size"] >= 1 and 1 <= row["prefill_replicas"] <= row["prefill_max_replicas"]
        assert row["kv_transfer_ms"] > 0
    code, out = _plan_json(capsys, [*LONG_PROMPTS, "--serving", "aggregated", "--json"])
    assert code == EXIT_OK and {row["serving"] for row in out["candidates"]} == {"aggregated"}
    assert {row["prefill_replicas"] for row in out["candidates"]} == {0}


def test_write_stack_writes_a_disaggregated_candidate_with_its_prefill_role_on_an_efa_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The prefill role's TP and replicas under ``disaggregation.prefill``; the pool has EFA (the transfer was planned
    over it), pinned to the platform's first zone; the write validated and sized the result as ``size`` does."""
    project = _project_copy(tmp_path)
    stack_file = project / "stacks" / "Pulumi.staging.yaml"
    text = stack_file.read_text(encoding="utf-8")
    roomy = text.replace("max_total_gpus: 16", "max_total_gpus: 64")
    roomy = re.sub(r"max_hourly_cost_usd: \S+", "max_hourly_cost_usd: 5000", roomy)
    assert roomy != text
    stack_file.write_text(roomy, encoding="utf-8")
    argv = [*LONG_PROMPTS, "--serving", "disaggregated", "--write-stack", "staging", "--project-dir", str(project)]
    code, out = _plan_json(capsys, [*argv, "--name", "long-8b", "--json"])
    assert code == EXIT_OK
    first = out["candidates"][0]
    platform = load_stack(project, "staging").platform
    model = next(m for m in platform.models if m.name == "long-8b")
    pool = platform.pool(model.pool)
    assert (pool.instance_type, pool.efa, pool.zone) == (first["instance_type"], True, platform.zones[0])
    assert model.disaggregation is not None
    prefill = model.disaggregation.prefill
    assert (prefill.gpus_per_replica, prefill.concurrency, prefill.min_replicas, prefill.max_replicas) == (
        first["prefill_tensor_parallel_size"],
        first["prefill_max_num_seqs"],
        first["prefill_replicas"],
        first["prefill_max_replicas"],
    )
    assert (model.gpus_per_replica, model.min_replicas, model.max_replicas) == (
        first["tensor_parallel_size"],
        first["replicas"],
        first["max_replicas"],
    )
    roles = f"prefill {first['prefill_replicas']}-{first['prefill_max_replicas']} of TP {prefill.gpus_per_replica}"
    assert roles in out["written"]
