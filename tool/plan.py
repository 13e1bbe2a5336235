"""``inferplane plan``: the cheapest configuration for a workload, printed, and optionally written into a stack.

The search is :func:`components.capacity.planner.plan`; this module turns arguments into a workload, prints the
candidates, and with ``--write-stack S`` adds the first candidate the stack's limits accept to ``stacks/Pulumi.S.yaml``
as one pool and one model deployment, editing the file in place (ruamel.yaml round trip: comments and key order stay).
Before writing, the edited platform is validated and sized as ``preview`` would; a candidate that breaks a limit is
skipped with the reason, and when none is accepted nothing is written (exit 1).
"""

from __future__ import annotations

import argparse
import io
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.table import Table
from ruamel.yaml import YAML

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.planner import Candidate, Filters, Plan, Workload, plan
from inferplane.components.capacity.sizing import SizingResult, size_platform
from inferplane.components.catalog import PRICES, Accelerator, ModelArchitecture, get_instance_type, get_model
from inferplane.components.catalog.accelerators import AcceleratorId
from inferplane.components.spec.platform_spec import (
    PLATFORM_KEY,
    CapacityType,
    Engine,
    SpecError,
    WeightsDtype,
    parse_platform,
)
from inferplane.tool.exitcodes import EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.stackfile import find_project_dir, load_stack


def _invalid(err: Console, message: str) -> int:
    err.print(f"inferplane plan: {message}", markup=False, highlight=False)
    return EXIT_INVALID


def _cloud_for_region(region: str | None) -> str | None:
    if region is None:
        return None
    for cloud, book in (("aws", PRICES.aws), ("gcp", PRICES.gcp)):
        if book.region == region:
            return cloud
    raise ValueError(f"--region {region}: prices are known for {PRICES.aws.region} (aws) and {PRICES.gcp.region} (gcp)")


def keda_threshold(candidate: Candidate) -> int:
    """The autoscaler's queue threshold for the candidate's batch, from the function the ScaledObject uses."""
    from inferplane.components.observability.keda import target_waiting_per_replica  # noqa: PLC0415 - loads Pulumi only here

    return target_waiting_per_replica(candidate.max_num_seqs)


def _row(candidate: Candidate) -> dict[str, Any]:
    data = candidate.model_dump(mode="json")
    data["keda_target_waiting_per_replica"] = keda_threshold(candidate)
    return data


def plan_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Run ``inferplane plan``."""
    try:
        model = get_model(args.model)
    except KeyError as exc:
        return _invalid(err, str(exc.args[0]))
    if args.input_tokens + args.output_tokens > model.max_context:
        return _invalid(
            err, f"--input-tokens + --output-tokens exceed the {model.max_context} tokens {args.model} supports"
        )
    peak = args.peak_requests_per_second or args.requests_per_second
    if peak < args.requests_per_second:
        return _invalid(err, "--peak-requests-per-second is below --requests-per-second")
    try:
        cloud = _cloud_for_region(args.region)
    except ValueError as exc:
        return _invalid(err, str(exc))
    workload = Workload(
        model=model,
        model_label=args.model,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        requests_per_second=args.requests_per_second,
        peak_requests_per_second=peak,
        ttft_p95_ms=args.ttft_p95_ms,
        itl_p95_ms=args.itl_p95_ms,
    )
    filters = Filters(
        accelerators=tuple(cast(list[AcceleratorId], args.accelerator or [])),
        engines=(cast(Engine, args.engine),) if args.engine else ("vllm", "triton"),
        weights_dtypes=tuple(cast(list[WeightsDtype], args.weights_dtype or ["bf16"])),
        capacity_type=cast(CapacityType, args.capacity_type),
        max_gpus=args.max_gpus,
        cloud=cloud,
    )
    result = plan(workload, filters)
    written: str | None = None
    if args.write_stack:
        code, written = _write_stack(args, workload, result, out, err)
        if code != EXIT_OK:
            return code
    shown = result.candidates[: args.top]
    if args.json:
        document: dict[str, Any] = {"candidates": [_row(c) for c in shown]}
        if written is not None:
            document["written"] = written
        out.print_json(json.dumps(document))
    else:
        _render(out, workload, result, shown)
        if written is not None:
            out.print(written)
    return EXIT_OK if result.candidates else EXIT_REFUSED


def _render(out: Console, workload: Workload, result: Plan, shown: tuple[Candidate, ...]) -> None:
    out.print(
        f"{workload.model_label}: {workload.requests_per_second:g} req/s (peak {workload.peak_requests_per_second:g}), "
        f"{workload.input_tokens} in / {workload.output_tokens} out tokens, TTFT p95 <= {workload.ttft_p95_ms:g} ms, "
        f"ITL p95 <= {workload.itl_p95_ms:g} ms"
    )
    out.print(
        f"weight precisions considered: {', '.join(result.weights_dtypes)} (quantization changes outputs; allow "
        "others with --weights-dtype; an fp8 KV cache only when fp8 is allowed)"
    )
    table = Table(title="Candidates, cheapest first", title_justify="left")
    for column in (
        "#", "accelerator", "instance", "TP", "engine", "weights/KV", "replicas", "$/h", "$/M out",
        "TTFT p95", "ITL p95", "tok/s/replica", "headroom", "limit",
    ):  # fmt: skip
        table.add_column(column)
    for index, c in enumerate(shown, start=1):
        table.add_row(
            str(index), c.accelerator, c.instance_type, str(c.tensor_parallel_size), c.engine,
            f"{c.weights_dtype}/{c.kv_cache_dtype}", f"{c.replicas}-{c.max_replicas}", f"{c.hourly_cost_usd:,.2f}",
            f"{c.cost_per_million_output_tokens_usd:,.2f}", f"{c.ttft_p95_ms:,.0f} ms", f"{c.itl_p95_ms:,.1f} ms",
            f"{c.max_output_tokens_per_second:,.0f}", f"{c.headroom:.0%}", c.limit,
        )  # fmt: skip
    out.print(table)
    if not result.candidates:
        out.print("[red]no configuration fits and meets the objectives[/red]")
        reasons = sorted({r.reason.split(":")[0] for r in result.rejections})
        out.print(f"dropped for: {', '.join(reasons) or 'no catalog configuration matches the filters'}")


# --- the performance lines of ``inferplane size`` ---------------------------------------------------------------


def size_performance(
    args: argparse.Namespace, model: ModelArchitecture, accelerator: Accelerator, result: SizingResult
) -> dict[str, float]:
    """``max_output_tokens_per_second`` (one replica at saturation for the mix) and ``single_stream_itl_ms``."""
    replica = perf_model.replica_from_sizing(result, model, accelerator, cast(Engine, args.engine))
    mix = perf_model.Workload(input_tokens=args.input_tokens, output_tokens=args.output_tokens)
    return {
        "max_output_tokens_per_second": round(perf_model.saturation(replica, mix).output_tokens_per_second, 1),
        "single_stream_itl_ms": round(perf_model.single_stream_itl_ms(replica, mix), 2),
    }


def render_performance(out: Console, args: argparse.Namespace, performance: dict[str, float]) -> None:
    """One line under the sizing table."""
    out.print(
        f"{args.engine}, {args.input_tokens} in / {args.output_tokens} out: "
        f"{performance['max_output_tokens_per_second']:,.0f} output tokens/s at saturation (one replica, at most "
        f"{args.concurrency} sequences), {performance['single_stream_itl_ms']} ms per token for a single stream"
    )


# --- writing the stack ---------------------------------------------------------------------------------------


def _name(text: str) -> str:
    return text.replace(".", "-").replace("_", "-").lower()[:40].strip("-")


def _entries(args: argparse.Namespace, workload: Workload, c: Candidate) -> tuple[dict[str, Any], dict[str, Any]]:
    instance = get_instance_type(c.instance_type)
    pool_name = _name(f"plan-{c.instance_type}")
    pool: dict[str, Any] = {
        "name": pool_name,
        "accelerator": c.accelerator,
        "instance_type": c.instance_type,
        "capacity_type": args.capacity_type,
    }
    if instance.cloud == "gcp":
        pool.pop("capacity_type")
        pool["tpu_topology"] = instance.tpu_topologies[0]
    deployment: dict[str, Any] = {
        "name": _name(args.name or args.model),
        "model": args.model,
        "engine": c.engine,
        "pool": pool_name,
        "weights_dtype": c.weights_dtype,
        "kv_cache_dtype": c.kv_cache_dtype,
        "max_context": c.max_context,
        "concurrency": c.max_num_seqs,
        "gpus_per_replica": c.tensor_parallel_size,
        "min_replicas": c.replicas,
        "max_replicas": c.max_replicas,
        "slo": {"ttft_p95_ms": math.ceil(workload.ttft_p95_ms), "itl_p95_ms": math.ceil(workload.itl_p95_ms)},
    }
    return pool, deployment


def _problems(config: Mapping[str, Any], region: str, pool: dict[str, Any], model: dict[str, Any]) -> list[str]:
    platform = json.loads(json.dumps(config[PLATFORM_KEY]))
    platform.setdefault("pools", []).append(pool)
    platform.setdefault("models", []).append(model)
    try:
        spec = parse_platform(platform, region)
    except SpecError as exc:
        return [str(exc)]
    return list(size_platform(spec).problems)


def _write_stack(
    args: argparse.Namespace, workload: Workload, result: Plan, out: Console, err: Console
) -> tuple[int, str | None]:
    project_dir = find_project_dir(Path(args.project_dir) if args.project_dir else None)
    stack = load_stack(project_dir, args.write_stack)
    config, region, source = stack.config, stack.platform.region, stack.source
    assert source is not None  # load_stack keeps the text it read: the edit starts from it, not from a second read
    skipped: list[str] = []
    for c in result.candidates:
        pool, deployment = _entries(args, workload, c)
        problems = _problems(config, region, pool, deployment)
        if problems:
            skipped.append(f"{c.accelerator} {c.instance_type} TP {c.tensor_parallel_size}: {problems[0]}")
            continue
        _edit_in_place(stack.config_file, source, pool, deployment)
        return EXIT_OK, (
            f"wrote pool {pool['name']} and model {deployment['name']} to {stack.display_file} "
            f"({c.accelerator} {c.instance_type}, TP {c.tensor_parallel_size}, {c.engine}, {c.replicas}-"
            f"{c.max_replicas} replicas)"
            + (
                f"; skipped {len(skipped)} cheaper candidate(s) the stack refuses, first: {skipped[0]}"
                if skipped
                else ""
            )
        )
    if not result.candidates:
        err.print(f"inferplane plan: nothing to write to {stack.display_file}: no candidate", markup=False)
    else:
        err.print(
            f"inferplane plan: {stack.display_file} refuses every candidate; the cheapest would break: {skipped[0]}",
            markup=False,
            highlight=False,
        )
    return EXIT_REFUSED, None


def _edit_in_place(path: Path, source: str, pool: dict[str, Any], deployment: dict[str, Any]) -> None:
    """Write ``path`` as ``source`` (its text, as read) with ``pool`` and ``deployment`` added, comments kept."""
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    document = yaml.load(source.replace("\r\n", "\n").replace("\r", "\n"))  # newlines as a text-mode read has them
    platform = document["config"][PLATFORM_KEY]
    platform["pools"].append(pool)
    platform["models"].append(deployment)
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def add_parser(sub: Any) -> None:
    """Register ``plan`` on the CLI's subparsers."""
    from inferplane.components.catalog import ACCELERATORS, MODELS  # noqa: PLC0415

    def positive_float(text: str) -> float:
        value = float(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} is not a positive number")
        return value

    def positive_int(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
        return value

    cmd = sub.add_parser("plan", help="the cheapest configuration that serves a workload within its objectives")
    cmd.add_argument("--model", required=True, choices=sorted(MODELS), help="catalog model")
    cmd.add_argument("--input-tokens", type=positive_int, required=True, help="prompt tokens per request")
    cmd.add_argument("--output-tokens", type=positive_int, required=True, help="output tokens per request")
    cmd.add_argument("--requests-per-second", type=positive_float, required=True, help="steady request rate")
    cmd.add_argument("--peak-requests-per-second", type=positive_float, help="peak rate (max replicas); default R")
    cmd.add_argument("--ttft-p95-ms", type=positive_float, required=True, help="time to first token objective")
    cmd.add_argument("--itl-p95-ms", type=positive_float, required=True, help="inter-token latency objective")
    cmd.add_argument("--accelerator", action="append", choices=sorted(ACCELERATORS), help="allow only these")
    cmd.add_argument("--engine", choices=["vllm", "triton"], help="only this engine (triton = TensorRT-LLM)")
    cmd.add_argument(
        "--weights-dtype",
        action="append",
        choices=["bf16", "fp16", "fp8", "int4"],
        help="allowed weight precisions (repeatable; default bf16 only: quantization changes outputs)",
    )
    cmd.add_argument("--capacity-type", choices=["on_demand", "spot", "capacity_block"], default="on_demand")
    cmd.add_argument("--max-gpus", type=positive_int, help="most accelerators per replica")
    cmd.add_argument("--region", help="price region (the price book's aws or gcp region)")
    cmd.add_argument("--top", type=positive_int, default=10, help="candidates to print (default 10)")
    cmd.add_argument("--json", action="store_true", help='print {"candidates": [...]}')
    cmd.add_argument("--write-stack", metavar="S", help="add the chosen pool and model to stacks/Pulumi.S.yaml")
    cmd.add_argument("--name", help="deployment name for --write-stack (default: the model id)")
    cmd.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    cmd.set_defaults(handler=plan_command)
