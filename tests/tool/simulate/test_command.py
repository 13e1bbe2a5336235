"""``inferplane simulate``: every bad input exits 2 naming it (nothing started), a missing simulator exits 3 naming
``make simulator``, ``--rate plan`` is what the planner promises, and a real run (a simulated fleet of 2, the dev
stack's gateway) replays a workload file and reports it, as a user runs it."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.components.capacity.planner import replica_capacity_rps
from inferplane.components.capacity.sizing import size_platform
from inferplane.tool.cli import main
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_REFUSED
from inferplane.tool.simulate import command as sim
from inferplane.tool.simulate import disaggregated
from inferplane.tool.simulate.arguments import simulate_args
from inferplane.tool.simulate.replay import Outcome
from inferplane.tool.simulate.workload import (
    WorkloadRequest,
    WorkloadShape,
    ideal_hit_share,
    unique,
    words,
    write_workload,
)
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR
from tests.tool.simulate.simulator import simulator_python

PROD_70B = ["--stack", "prod", "--model", "llama-70b"]
"""prod's disaggregated model."""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["simulate", "--project-dir", str(PROJECT_DIR), *args])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--stack", "prod", "--workload", "unique", "--rate", "1", "--duration", "5"],
            "stack prod serves 2 models (llama-70b, llama-8b): give --model",
        ),
        (
            ["--stack", "dev", "--model", "nope", "--workload", "unique", "--rate", "1", "--duration", "5"],
            "--model nope: stack dev has no such model (its models: llama-8b)",
        ),
        (
            ["--stack", "dev", "--replicas", "x", "--workload", "unique", "--rate", "1", "--duration", "5"],
            "--replicas x: give min, max or a number from 1 to 250",
        ),
        (
            ["--stack", "dev", "--replicas", "0", "--workload", "unique", "--rate", "1", "--duration", "5"],
            "--replicas 0: give min, max or a number from 1 to 250",
        ),
        (
            ["--stack", "dev", "--gateway-replicas", "9", "--workload", "unique", "--rate", "1", "--duration", "5"],
            "--gateway-replicas 9: give 1 to 8",
        ),
        (["--stack", "dev", "--workload", "unique"], "--workload unique needs --rate (requests per second); "),
        (["--stack", "dev", "--workload", "unique", "--rate", "2"], "--workload unique needs --duration (seconds)"),
        (
            ["--stack", "dev", "--workload", "/no/such.jsonl"],
            "--workload /no/such.jsonl: neither a generator (shared-prefix, multi-turn, unique) nor a file",
        ),
        (
            ["--stack", "dev", "--serving", "disaggregated", "--workload", "unique", "--rate", "1", "--duration", "5"],
            "--serving disaggregated: stacks/Pulumi.dev.yaml serves llama-8b aggregated (add its `disaggregation`",
        ),
        (
            ["--stack", "dev", "--prefill-replicas", "2", "--workload", "unique", "--rate", "1", "--duration", "5"],
            "--prefill-replicas 2: only for a model simulated disaggregated",
        ),
        (
            [*PROD_70B, "--prefill-replicas", "0", "--workload", "unique", "--rate", "1", "--duration", "5"],
            "--prefill-replicas 0: give min, max or a number from 1 to 250",
        ),
        (
            [*PROD_70B, "--workload", "unique", "--rate", "plan", "--duration", "5"],
            "--rate plan: the plan's rate is an aggregated replica's; give a rate for llama-70b served disaggregated",
        ),
    ],
)
def test_bad_input_exits_2_naming_it(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, said = run(capsys, *args)
    assert code == EXIT_INVALID
    assert message in said


@pytest.mark.parametrize(("rate", "said"), [("0", "'0' must be above 0"), ("fast", "'fast' is not a number")])
def test_a_bad_rate_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str], rate: str, said: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--stack", "dev", "--workload", "unique", "--rate", rate, "--duration", "1"])
    assert exited.value.code == EXIT_INVALID
    assert said in capsys.readouterr().err


def test_a_file_workload_names_its_bad_line_and_refuses_a_rate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text('{"arrival_s": 0, "prompt": "w1", "output_tokens": 2}\n{"arrival_s": 1, "prompt": "w1"}\n')
    code, said = run(capsys, "--stack", "dev", "--workload", str(path))
    assert code == EXIT_INVALID
    assert "w.jsonl line 2: output_tokens:" in said
    code, said = run(capsys, "--stack", "dev", "--workload", str(path), "--rate", "3")
    assert code == EXIT_INVALID
    assert "a file carries its own arrival times; drop --rate and --ramp" in said


def test_a_missing_simulator_exits_3_naming_the_target(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERPLANE_SIMULATOR_PYTHON", "/no/python")
    code, said = run(capsys, "--stack", "dev", "--workload", "unique", "--rate", "1", "--duration", "2")
    assert code == EXIT_FAILED
    assert "make simulator" in said


def test_the_plans_rate_is_replicas_times_what_one_serves_within_the_slo() -> None:
    args = _args(workload="unique", rate="plan", duration=30.0, replicas="3")
    plan = sim.plan_simulation(args, {"INFERPLANE_SIMULATOR_PYTHON": sys.executable})
    shape = WorkloadShape()
    slo = plan.deployment.slo
    admission = plan.spec.gateway.admission
    one = replica_capacity_rps(
        plan.replica, shape.prompt_tokens, shape.output_tokens, slo.ttft_p95_ms, slo.itl_p95_ms, admission=admission
    )
    assert one > 0
    assert plan.workload == unique(
        rate=3 * one,
        duration=30.0,
        seed=1,
        prompt_tokens=shape.prompt_tokens,
        output_tokens=shape.output_tokens,
    )
    assert f"(the plan's: 3 x {one:.3g} within the slo)" in plan.workload_label


HOUR_OF_TOKENS = Outcome(
    status=200,
    sent_s=0.0,
    ttft_s=0.1,
    itl_s=(),
    last_token_s=1.0,
    finished_s=1.0,
    output_tokens=3600,
    prompt_tokens=10,
    cached_tokens=0,
    error=None,
    group=None,
)
"""One request served: 3,600 output tokens in the run's one second."""


def test_a_disaggregated_model_runs_as_its_two_roles_behind_a_gateway_without_the_prefill_step() -> None:
    """prod serves llama-70b disaggregated: the fleet runs its decode role's engine on the decode replicas and its
    prefill role's on the prefill workers, both as sized, with sizing's transfer rate; the gateway renders the model
    without its prefill role (the replicas' frontends send prompts to the prefill workers), and the price counts
    both roles."""
    args = _args(stack="prod", model="llama-70b", workload="unique", rate=1.0, duration=5.0)
    plan = sim.plan_simulation(args, {"INFERPLANE_SIMULATOR_PYTHON": sys.executable})
    stack_spec = load_stack(PROJECT_DIR, "prod").platform
    stack_model = next(m for m in stack_spec.models if m.name == "llama-70b")
    assert stack_model.disaggregation is not None and stack_model.prefill_role is not None
    decode = size_platform(stack_spec).serving("llama-70b")
    assert decode.prefill is not None and decode.transfer is not None
    assert plan.served_disaggregated and plan.prefill is not None
    assert plan.deployment.disaggregation is None and plan.deployment_sizing.prefill is None  # the gateway's view
    assert plan.settings == disaggregated.role_of(stack_model, decode, "llama-70b").settings
    role = plan.prefill.role
    assert role.settings == disaggregated.role_of(stack_model.prefill_role, decode.prefill, "llama-70b").settings
    assert role.settings.served_model == "llama-70b"  # Dynamo pairs the roles by the served name
    assert role.settings.max_num_batched_tokens == decode.prefill.result.vllm.max_num_batched_tokens
    assert plan.settings.max_num_batched_tokens == decode.result.vllm.max_num_batched_tokens
    assert (plan.replicas, plan.prefill.count) == (decode.min_replicas, decode.prefill.min_replicas)
    assert plan.prefill.transfer_gbps == decode.transfer.bytes_per_second / 1e9
    # The gateway admits as many as a decode replica holds.
    assert plan.deployment_sizing.result.vllm.max_num_seqs == plan.settings.max_num_seqs
    widest = sim.plan_simulation(
        _args(**{**vars(args), "replicas": "max", "prefill_replicas": "max"}),
        {"INFERPLANE_SIMULATOR_PYTHON": sys.executable},
    )
    assert widest.prefill is not None
    assert (widest.replicas, widest.prefill.count) == (decode.max_replicas, decode.prefill.max_replicas)
    result = sim.result_of(
        plan, [HOUR_OF_TOKENS], finished=[1, 0], preemptions=0, most_held=[1, 0], decisions={}, prefilled=1
    )
    assert (result.serving, result.prefill_replicas, result.prefilled, result.transfer_gbps) == (
        "disaggregated",
        2,
        1,
        38.4,
    )
    assert decode.replica_hourly_usd is not None and decode.prefill.replica_hourly_usd is not None
    fleet_hourly = 2 * decode.replica_hourly_usd + 2 * decode.prefill.replica_hourly_usd
    assert result.usd_per_million_output_tokens == pytest.approx(fleet_hourly / 3600 / 3600 * 1e6)


def test_a_disaggregated_model_served_aggregated_is_sized_aggregated_on_its_decode_role_and_said_so() -> None:
    args = _args(stack="prod", model="llama-70b", workload="unique", rate=1.0, duration=5.0, serving="aggregated")
    plan = sim.plan_simulation(args, {"INFERPLANE_SIMULATOR_PYTHON": sys.executable})
    stack_model = next(m for m in load_stack(PROJECT_DIR, "prod").platform.models if m.name == "llama-70b")
    assert plan.served_disaggregated and plan.prefill is None
    assert plan.deployment.disaggregation is None and plan.deployment_sizing.prefill is None
    assert (plan.deployment.pool, plan.deployment.gpus_per_replica, plan.replicas) == (
        stack_model.pool,
        stack_model.gpus_per_replica,
        stack_model.min_replicas,
    )
    assert plan.settings.max_num_seqs == plan.deployment_sizing.result.vllm.max_num_seqs
    result = sim.result_of(plan, [], finished=[0, 0], preemptions=0, most_held=[0, 0], decisions={})
    assert (result.serving, result.prefill_replicas, result.prefilled, result.transfer_gbps) == (
        "aggregated",
        0,
        0,
        None,
    )
    assert "note: the stack serves llama-70b disaggregated; this run simulated it aggregated" in "\n".join(
        sim.report_lines(result)
    )
    dev = sim.plan_simulation(_args(rate=1.0, duration=5.0), {"INFERPLANE_SIMULATOR_PYTHON": sys.executable})
    assert not dev.served_disaggregated and dev.prefill is None


def _args(**given: object) -> argparse.Namespace:
    """The CLI's own arguments for ``--stack dev --workload unique``, with ``given`` set as the parser would."""
    defaults = simulate_args(["--stack", "dev", "--workload", "unique", "--project-dir", str(PROJECT_DIR)])
    return argparse.Namespace(**{**vars(defaults), **given})


def _simulate_json(workload: Path, *args: str) -> tuple[dict[str, Any], int]:
    """``inferplane simulate ARGS --workload FILE --json`` run as a user runs it: its result and exit code (0 or 1)."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "inferplane"), "simulate", *args, "--workload", str(workload), "--json"],
        capture_output=True,
        text=True,
        cwd=PROJECT_DIR,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout), done.returncode


@pytest.mark.e2e
@pytest.mark.xdist_group("simulated-fleet")
def test_a_run_replays_a_file_and_reports_it(tmp_path: Path) -> None:
    simulator_python()
    path = tmp_path / "w.jsonl"
    prefix = list(range(100, 600))
    requests = [
        WorkloadRequest(arrival_s=0.6 * i, prompt=words([*prefix, 1000 + i]), output_tokens=2, group="g")
        for i in range(6)
    ]
    write_workload(path, requests)
    result, code = _simulate_json(path, "--stack", "dev", "--replicas", "2")
    assert result["fleet"].startswith("simulated")
    assert (result["requests"], result["ok"], result["rejected_429"], result["failed"]) == (6, 6, 0, 0)
    assert sum(result["requests_per_replica"]) == 6 and len(result["requests_per_replica"]) == 2
    assert max(result["requests_per_replica"]) == 6, "one prefix, one replica: each request ends before the next"
    ideal = ideal_hit_share(requests, 16)
    assert result["ideal_hit_share"] == ideal == pytest.approx(5 / 6 * 496 / 501), "5 of 6 find 31 blocks"
    assert result["hit_share"] >= 0.95 * ideal, "the engines served the prefix from cache"
    assert result["slo_held"] == (code == 0)
    assert result["max_num_seqs"] == 4


@pytest.mark.e2e
@pytest.mark.xdist_group("simulated-fleet")
def test_a_disaggregated_run_prefills_on_the_prefill_workers_of_the_replicas_namespace(tmp_path: Path) -> None:
    """prod's llama-70b as 2 decode replicas and 1 prefill worker: the worker joins replica 0's namespace, so it
    computes exactly replica 0's prompts, and replica 1, with none of its own, computes its prompts itself."""
    simulator_python()
    path = tmp_path / "w.jsonl"
    # Each unique prompt's replica is its rendezvous home, which hangs on the replicas' random ports: with 16 prompts
    # the chance that one replica homes them all is 2 in 65,536. It was 0.8% of port pairs while the weights were
    # Python's tuple hash, which for some pairs ranked one replica first for nearly every prompt (CI saw [0, 16]).
    requests = [
        WorkloadRequest(arrival_s=0.15 * i, prompt=words(range(1000 * i, 1000 * i + 600)), output_tokens=4)
        for i in range(16)
    ]
    write_workload(path, requests)
    result, _ = _simulate_json(path, *PROD_70B, "--replicas", "2", "--prefill-replicas", "1")
    assert (result["serving"], result["prefill_replicas"], result["transfer_gbps"]) == ("disaggregated", 1, 38.4)
    assert (result["requests"], result["ok"], result["failed"]) == (16, 16, 0)
    assert sum(result["requests_per_replica"]) == 16
    assert all(result["requests_per_replica"]), "the gateway sent each replica some of the prompts"
    assert result["prefilled"] == result["requests_per_replica"][0]


def test_a_disaggregated_plan_the_stack_refuses_exits_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without EFA the 70B's prompts move over TCP, slower than its TTFT objective: the stack's plan is refused, and
    so is a disaggregated run of it, though the model sized aggregated would fit."""
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    document = yaml.safe_load((PROJECT_DIR / "stacks" / "Pulumi.prod.yaml").read_text())
    (pool,) = (p for p in document["config"]["inferplane:platform"]["pools"] if p["name"] == "h100")
    pool["efa"] = False
    (tmp_path / "stacks" / "Pulumi.prod.yaml").write_text(yaml.safe_dump(document))
    args = [*PROD_70B, "--project-dir", str(tmp_path), "--workload", "unique", "--rate", "1", "--duration", "5"]
    assert main(["simulate", *args]) == EXIT_REFUSED
    said = capsys.readouterr().err
    assert "stacks/Pulumi.prod.yaml: the plan is refused: " in said and "llama-70b" in said
