"""The planner's promise, checked on the simulated fleet: for every model of the shipped stacks, ``inferplane simulate
--rate plan`` (the replicas x what the performance model says one serves within the model's ``slo``) on the plan's
minimum replicas, and again on its maximum replicas (the peak the autoscaler's ceiling is for), each holding its slo.

Each row is one run of the command as a user runs it (a subprocess, ``--json``), on a fresh simulated fleet: NVIDIA
Dynamo's mocker engines timed from the performance model, behind the stack's real gateway. The workload is
``unique`` (every prompt distinct: no prefix-cache hit, as the planner assumes), Poisson arrivals.

What a row says when the slo does not hold: the simulated engine's scheduler differs from the performance model's
M/M/c queue (a vLLM step's chunked prefill, the mocker's TTFT floor of about 20 ms, its first token after a decode
step), or the planner promised a rate its own model cannot serve. The closing columns say which: the model's own
prediction at the rate (``perf_model.at_rate``) beside the measured p95.

Usage: ``.venv/bin/python benchmarks/planner_check.py [--duration 60] [--stacks dev,staging,prod] [--markdown]``.
Needs ``make simulator`` and ``make envoy``. About 2 minutes a row at the default duration.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.sizing import size_platform
from inferplane.components.catalog import get_accelerator
from inferplane.tool.simulate.workload import WorkloadShape
from inferplane.tool.stackfile import load_stack

PROJECT_DIR = Path(__file__).resolve().parent.parent


def predicted(stack: str, model: str, replicas: int, rate: float) -> tuple[perf_model.Latency, float]:
    """The performance model's TTFT and ITL p95 for one replica at its share of ``rate``, and the share of requests
    the stack's gateway admission refuses by the model."""
    spec = load_stack(PROJECT_DIR, stack).platform
    sizing = next(d for d in size_platform(spec).deployments if d.name == model)
    deployment = next(d for d in spec.models if d.name == model)
    accelerator = get_accelerator(sizing.result.accelerator)
    replica = perf_model.replica_from_sizing(
        sizing.result, deployment.architecture_resolved, accelerator, sizing.engine
    )
    shape = WorkloadShape()
    mix = perf_model.Workload(input_tokens=shape.prompt_tokens, output_tokens=shape.output_tokens)
    latency = perf_model.at_rate(replica, mix, rate / replicas)
    admission = spec.gateway.admission
    return latency, latency.refused_share(admission.queue_timeout_seconds, admission.queue_max)


def simulate(stack: str, model: str, replicas: str, duration: float, *, aggregated: bool) -> dict[str, Any]:
    """One ``inferplane simulate --json`` run; its result, or the error it printed. ``aggregated`` runs a model the
    stack serves disaggregated as aggregated replicas: the plan's rate is an aggregated replica's, and the command
    refuses ``--rate plan`` for the two roles."""
    command = [
        str(Path(sys.executable).parent / "inferplane"),
        "simulate",
        "--stack",
        stack,
        "--model",
        model,
        "--replicas",
        replicas,
        "--workload",
        "unique",
        "--rate",
        "plan",
        "--duration",
        str(duration),
        "--json",
        *(["--serving", "aggregated"] if aggregated else []),
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_DIR, check=False)
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-400:]}", "wall_s": wall}
    result: dict[str, Any] = json.loads(done.stdout)
    result["wall_s"] = wall
    return result


def main() -> None:
    """Every shipped model at min and max replicas; a table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per run (default 60)")
    parser.add_argument("--stacks", default="dev,staging,prod")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    header = [
        "stack",
        "model",
        "replicas",
        "rate req/s",
        "TTFT p95 ms (slo)",
        "ITL p95 ms (slo)",
        "model's TTFT/ITL p95",
        "served",
        "429s (the model's share)",
        "slo",
    ]
    rows: list[list[str]] = []
    print("fleet: simulated (NVIDIA Dynamo mocker engines timed by the performance model; not a GPU)", flush=True)
    for stack in args.stacks.split(","):
        spec = load_stack(PROJECT_DIR, stack).platform
        for deployment in spec.models:
            aggregated = deployment.disaggregation is not None
            for which in ("min", "max"):
                result = simulate(stack, deployment.name, which, args.duration, aggregated=aggregated)
                if "error" in result:
                    rows.append([stack, deployment.name, which, "-", "-", "-", "-", "-", "-", result["error"]])
                    print(rows[-1], flush=True)
                    continue
                # The rate the plan promises, unrounded (at 3 digits a rate on the edge of an objective can cross
                # it), not the Poisson draw's realized count.
                rate = float(result["rate"])
                model, refused = predicted(stack, deployment.name, result["replicas"], rate)
                rows.append(
                    [
                        stack,
                        deployment.name,
                        f"{which} = {result['replicas']}" + (" (aggregated)" if aggregated else ""),
                        f"{rate:.3g}",
                        f"{result['ttft_ms']['p95']:.0f} ({result['slo_ttft_p95_ms']})",
                        f"{result['itl_ms']['p95']:.1f} ({result['slo_itl_p95_ms']})",
                        f"{model.ttft_p95_ms:.0f} / {model.itl_p95_ms:.1f}",
                        f"{result['ok']}/{result['requests']}",
                        f"{result['rejected_429']} ({refused:.2%})",
                        "held" if result["slo_held"] else "NOT held",
                    ]
                )
                print(rows[-1], f"({result['wall_s']:.0f} s)", flush=True)
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
