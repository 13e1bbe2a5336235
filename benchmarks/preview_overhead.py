"""How much the offline preview costs over the Pulumi SDK's own floor.

For each shipped stack, and for synthetic platforms of 1, 10 and 50 model deployments, this evaluates the program
as ``inferplane preview`` does (config, mock engine, plan, canonical JSON) and prints the resources registered,
seconds, milliseconds per resource, and the ratio to the floor: the same number of bare resources registered
under ``pulumi.runtime.set_mocks`` with the SDK's own mock monitor, measured in the same process. Each figure is
the best of ``--repeat`` runs (the machine is shared; the minimum is the least disturbed).

    python benchmarks/preview_overhead.py                     # the real program (inferplane.infra.program:main)
    python benchmarks/preview_overhead.py --program tests.preview_fixture:program

Then the whole command against the SDK's floor for the same resources, each in a fresh process, wall-clock: the
whole ``inferplane preview --stack <largest> --json FILE`` (interpreter start, imports, sizing, evaluation, the policy
pack's process and its Analyzer calls, rendering) against loading the provider classes of every resource type the
stack registers and registering the same resources bare (same types, names and parents, no inputs) under
``set_mocks``, in a fresh interpreter. CPU seconds (this process's children, the pack's process included) are printed
beside the wall-clock figures; the ratio is of the best wall-clock runs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime.config import set_all_config
from pulumi.runtime.settings import reset_options, set_root_resource
from pulumi.runtime.stack import run_in_stack
from sdk_floor import BareMocks  # beside this file; the script's directory is first on sys.path

from inferplane.components.spec.platform_spec import PLATFORM_KEY, REGION_KEY, parse_platform
from inferplane.tool.mockengine import PlatformMocks
from inferplane.tool.preview.engine import evaluation_config, run_preview, size_stack
from inferplane.tool.preview.model import Plan
from inferplane.tool.stackfile import Stack, find_project_dir, load_stack, stack_names

GOAL_RATIO = 1.25


def floor_seconds(count: int) -> float:
    """Register ``count`` bare custom resources under ``set_mocks``, on a fresh loop, as an evaluation does."""

    def program() -> None:
        for index in range(count):
            pulumi.CustomResource("bench:index:Bare", f"r{index}", {})

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    start = time.process_time()
    try:
        reset_options()
        pulumi_mocks.set_mocks(BareMocks(), project="bench", stack="floor", preview=True)
        set_root_resource(None)  # type: ignore[arg-type]
        loop.run_until_complete(run_in_stack(program))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
        reset_options()
    return time.process_time() - start


def program_floor_seconds(stack: Stack, program: Callable[[], None]) -> float:
    """The same program with the same config and mocks under the SDK's own mock monitor, with no recording,
    plan or JSON: what the program costs the SDK, so the preview's own overhead is the difference."""
    config = evaluation_config(stack)
    region = stack.config[REGION_KEY]
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    start = time.process_time()
    try:
        reset_options()
        set_all_config(
            {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.values.items()}, list(config.secret_keys)
        )
        pulumi_mocks.set_mocks(PlatformMocks(region), project=stack.project, stack=stack.name, preview=True)
        set_root_resource(None)  # type: ignore[arg-type]
        loop.run_until_complete(run_in_stack(program))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
        set_all_config({}, [])
        reset_options()
    return time.process_time() - start


def preview_seconds(stack: Stack, program: Callable[[], None]) -> tuple[int, float]:
    """(resources, seconds) for one preview of ``stack``: sizing, evaluation, plan and its JSON."""
    start = time.process_time()
    result = run_preview(stack, size_stack(stack), program=program)
    result.plan.to_json()
    return len(result.plan.resources), time.process_time() - start


def synthetic_stack(base: Stack, models: int) -> Stack:
    """``base`` (a shipped stack) with ``models`` 8B deployments spread over L40S pools of ten each."""
    pools = [
        {
            "name": f"l40s-{index}",
            "accelerator": "l40s-48gb",
            "instance_type": "g6e.xlarge",
            "capacity_type": "on_demand",
        }
        for index in range((models + 9) // 10)
    ]
    deployments = [
        {
            "name": f"model-{index}",
            "model": "llama-3.1-8b",
            "engine": "vllm" if index % 2 == 0 else "triton",
            "pool": f"l40s-{index // 10}",
            "weights_dtype": "fp8",
            "kv_cache_dtype": "fp8",
            "max_context": 8192,
            "concurrency": 16,
            "min_replicas": 1,
            "max_replicas": 2,
            "routing_tier": "standard",
        }
        for index in range(models)
    ]
    raw = {
        "environment": "staging",
        "zones": ["us-east-1a", "us-east-1b"],
        "cluster": {"kubernetes_version": "1.34", "endpoint_access": "private"},
        "pools": pools,
        "models": deployments,
        # Authentication is required on every gateway: without a tenant no key exists and the Gateway refuses.
        "gateway": {"replicas": 2, "tenants": [{"name": "bench", "tiers": ["standard"]}]},
        "limits": {
            "max_total_gpus": 4 * models,
            "max_hourly_cost_usd": 10 * models,
            "allowed_accelerators": ["l40s-48gb"],
            "max_context": 32768,
        },
        "tags": {"team": "bench"},
    }
    region = base.config[REGION_KEY]
    config = {**base.config, PLATFORM_KEY: raw}
    # replace() keeps what the base stack carries (its parsed Pulumi.yaml), so the project is not read again.
    return dataclasses.replace(base, name=f"synthetic-{models}", config=config, platform=parse_platform(raw, region))


def _timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and every process it waited for) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def whole_preview_table(stack: Stack, plan: Plan, repeat: int) -> None:
    """The whole ``inferplane preview`` of ``stack`` against the SDK floor for the same resources, fresh processes."""
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as scratch:
        resources = Path(scratch) / "resources.json"
        resources.write_text(
            json.dumps([{"urn": r.urn, "type": r.type, "name": r.name, "parent": r.parent} for r in plan.resources])
        )
        preview = [str(bin_dir / "inferplane"), "preview", "--stack", stack.name, "--json", f"{scratch}/plan.json"]
        preview += ["--project-dir", str(stack.project_dir)]
        floor = [sys.executable, str(Path(__file__).with_name("sdk_floor.py")), str(resources)]
        runs = {
            "whole preview": [_timed(preview) for _ in range(repeat)],
            "SDK floor": [_timed(floor) for _ in range(repeat)],
        }
    print()
    print(
        f"whole `inferplane preview --stack {stack.name}` ({len(plan.resources)} resources), "
        f"fresh processes, best of {repeat}"
    )
    header = f"{'run':<16}{'wall s':>9}{'CPU s':>9}{'wall runs':>40}"
    print(header)
    print("-" * len(header))
    best = {label: min(wall for wall, _ in timings) for label, timings in runs.items()}
    for label, timings in runs.items():
        cpu = min(c for _, c in timings)
        walls = " ".join(f"{wall:.2f}" for wall, _ in timings)
        print(f"{label:<16}{best[label]:>9.2f}{cpu:>9.2f}{walls:>40}")
    ratio = best["whole preview"] / best["SDK floor"]
    print(
        f"ratio (wall): {ratio:.2f}x the SDK floor; goal <= {GOAL_RATIO}x; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )


def load_program(spec: str) -> Callable[[], None]:
    """``module:function`` -> the function."""
    module_name, _, function = spec.partition(":")
    program: Callable[[], None] = getattr(importlib.import_module(module_name), function)
    return program


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 0 (a benchmark reports, it does not judge)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--program", default="inferplane.infra.program:main", help="module:function to evaluate")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case; the best is reported")
    parser.add_argument("--models", type=int, nargs="*", default=[1, 10, 50], help="synthetic platform sizes")
    parser.add_argument("--whole-repeat", type=int, default=3, help="runs of the whole command and its floor")
    parser.add_argument("--whole-only", action="store_true", help="only the whole command against its SDK floor")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    program = load_program(args.program)
    project_dir = find_project_dir(Path(__file__).resolve().parent.parent)  # the repository's own project
    stacks = [load_stack(project_dir, name) for name in stack_names(project_dir)]
    cases = [(s.name, s) for s in stacks] + [(f"synthetic x{n}", synthetic_stack(stacks[0], n)) for n in args.models]
    plans = {s.name: run_preview(s, size_stack(s), program=program).plan for s in stacks}
    largest = max(stacks, key=lambda s: len(plans[s.name].resources))
    if args.whole_only:
        whole_preview_table(largest, plans[largest.name], args.whole_repeat)
        return 0

    print(f"program: {args.program}; best of {args.repeat}; goal: <= {GOAL_RATIO}x the SDK floor, linear")
    header = (
        f"{'case':<16}{'resources':>10}{'preview s':>11}{'ms/resource':>13}{'bare floor s':>14}{'ratio':>8}"
        f"{'program floor s':>17}{'ratio':>8}"
    )
    print(header)
    print("-" * len(header))
    for label, stack in cases:
        runs = [preview_seconds(stack, program) for _ in range(args.repeat)]
        resources = runs[0][0]
        seconds = min(s for _, s in runs)
        floor = min(floor_seconds(resources) for _ in range(args.repeat))
        program_floor = min(program_floor_seconds(stack, program) for _ in range(args.repeat))
        per_resource = f"{1000 * seconds / resources:.2f}" if resources else "n/a"
        ratio = f"{seconds / floor:.2f}" if resources else "n/a"
        print(
            f"{label:<16}{resources:>10}{seconds:>11.3f}{per_resource:>13}{floor:>14.3f}{ratio:>8}"
            f"{program_floor:>17.3f}{seconds / program_floor:>8.2f}"
        )
    whole_preview_table(largest, plans[largest.name], args.whole_repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
