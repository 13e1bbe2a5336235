"""The ``inferplane`` command line.

Exit codes, shared by every subcommand: 0 fine; 1 the plan is refused (a model that does not fit, a limit
exceeded); 2 the input is invalid (the message names the file and the key); 3 the program failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import get_args

from rich.console import Console
from rich.table import Table

from components.catalog import ACCELERATORS, MODELS, get_accelerator, get_model, instances_for
from components.sizing import GIB, PlatformSizing, SizingRequest, SizingResult, size, size_platform
from components.spec import KvCacheDtype, WeightsDtype
from infra.stackfile import InvalidSpecError, StackFileError, find_project_dir, load_stack

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_INVALID = 2
EXIT_FAILED = 3


def _gib(value: float) -> str:
    return f"{value / GIB:,.1f} GiB"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def render_result(console: Console, result: SizingResult) -> None:
    """A readable table for one sizing result."""
    table = Table(title=f"{result.model} on {result.accelerator}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    rows = [
        ("fits", "[green]yes[/green]" if result.fits else "[red]no[/red]"),
        ("tensor parallel", str(result.tensor_parallel_size)),
        ("weights", f"{_gib(result.weights_bytes)} ({result.weights_dtype})"),
        ("KV cache per token", f"{result.kv_cache_bytes_per_token:,} bytes ({result.kv_cache_dtype})"),
        ("KV cache required", f"{_gib(result.kv_cache_bytes_required)} ({result.context} x {result.concurrency})"),
        ("usable memory", f"{_gib(result.usable_bytes)} at {result.gpu_memory_utilization}"),
        ("runtime reserve", _gib(result.reserve_bytes)),
        ("KV pool", _gib(result.kv_pool_bytes)),
        ("max sequences at context", str(result.max_concurrent_sequences)),
        ("decode estimate", f"{result.decode_tokens_per_second:,.0f} tokens/s, {result.decode_step_ms} ms/step"),
        ("cold start", f"{result.cold_start_seconds:,.0f} s (fetch {result.weights_fetch_seconds:,.0f} s)"),
    ]
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)
    if not result.fits:
        console.print(f"[red]refused:[/red] {result.reason}")
        for alternative in result.alternatives:
            console.print(f"  - {alternative}")
        return
    flags = result.vllm
    console.print(
        "vLLM: "
        f"--tensor-parallel-size {flags.tensor_parallel_size} --max-model-len {flags.max_model_len} "
        f"--max-num-seqs {flags.max_num_seqs} --max-num-batched-tokens {flags.max_num_batched_tokens} "
        f"--gpu-memory-utilization {flags.gpu_memory_utilization} --kv-cache-dtype {flags.kv_cache_dtype} "
        f"--dtype {flags.dtype}" + (f" --quantization {flags.quantization}" if flags.quantization else "")
    )
    trt = result.trtllm
    console.print(
        f"TensorRT-LLM: tp {trt.tensor_parallel}, max_batch_size {trt.max_batch_size}, max_input_len "
        f"{trt.max_input_len}, max_seq_len {trt.max_seq_len}, kv_cache_free_gpu_mem_fraction "
        f"{trt.kv_cache_free_gpu_mem_fraction}"
    )


def sizing_table(plan: PlatformSizing) -> Table:
    """The per-model sizing table the preview and ``size --stack`` print."""
    table = Table(title="Sizing", title_justify="left")
    for column in (
        "model",
        "pool",
        "accelerator",
        "TP",
        "fits",
        "max seqs",
        "decode tok/s",
        "cold start",
        "$/h min",
        "$/h max",
    ):
        table.add_column(column)
    for d in plan.deployments:
        r = d.result
        table.add_row(
            d.name,
            d.pool,
            f"{r.accelerator} ({d.instance_type})",
            str(r.tensor_parallel_size),
            "[green]yes[/green]" if r.fits else "[red]no[/red]",
            str(r.max_concurrent_sequences),
            f"{r.decode_tokens_per_second:,.0f}",
            f"{r.cold_start_seconds:,.0f} s",
            _usd(d.hourly_usd_min),
            _usd(d.hourly_usd_max),
        )
    return table


def render_platform(console: Console, plan: PlatformSizing) -> None:
    """Sizing table, pool table, totals and problems."""
    console.print(sizing_table(plan))
    pools = Table(title="Pools", title_justify="left")
    for column in ("pool", "instance", "nodes min", "nodes max", "$/node-h", "$/h min", "$/h max"):
        pools.add_column(column)
    for p in plan.pools:
        pools.add_row(
            p.name,
            p.instance_type,
            str(p.min_nodes),
            str(p.max_nodes),
            _usd(p.node_hourly_usd),
            _usd(p.hourly_usd_min),
            _usd(p.hourly_usd_max),
        )
    console.print(pools)
    console.print(
        f"{plan.environment}: {plan.total_gpus_max} accelerators at max scale, "
        f"{_usd(plan.hourly_usd_min)}/h at min, {_usd(plan.hourly_usd_max)}/h at max (on-demand)"
    )
    for problem in plan.problems:
        console.print(f"[red]refused:[/red] {problem}")


def _size_stack(args: argparse.Namespace, out: Console, err: Console) -> int:
    project_dir = find_project_dir(Path(args.project_dir) if args.project_dir else None)
    stack = load_stack(project_dir, args.stack)
    plan = size_platform(stack.platform)
    if args.json:
        out.print_json(json.dumps(plan.model_dump(mode="json"), sort_keys=True))
    else:
        render_platform(out, plan)
    return EXIT_OK if plan.ok else EXIT_REFUSED


def _size_model(args: argparse.Namespace, out: Console, err: Console) -> int:
    if not args.model or not args.accelerator:
        err.print("inferplane size: give --stack S, or --model M and --accelerator A")
        return EXIT_INVALID
    try:
        model = get_model(args.model)
        accelerator = get_accelerator(args.accelerator)
    except KeyError as exc:
        err.print(f"inferplane size: {exc.args[0]}")
        return EXIT_INVALID
    if args.context > model.max_context:
        err.print(
            f"inferplane size: --context {args.context} exceeds the {model.max_context} tokens {args.model} supports"
        )
        return EXIT_INVALID
    if accelerator.vendor == "google" and (args.weights_dtype != "bf16" or args.kv_cache_dtype not in ("auto", "bf16")):
        err.print(f"inferplane size: {accelerator.id} serves bf16 weights and KV cache")
        return EXIT_INVALID
    if not 0.5 <= args.gpu_memory_utilization <= 0.93:
        err.print("inferplane size: --gpu-memory-utilization must be within 0.5 and 0.93")
        return EXIT_INVALID
    request = SizingRequest(
        model=model,
        model_label=args.model,
        accelerator=accelerator,
        accelerators_per_node=instances_for(accelerator.id)[0].accelerators_per_node,
        weights_dtype=args.weights_dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        context=args.context,
        concurrency=args.concurrency,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.gpus,
    )
    if accelerator.vendor == "google":
        # A TPU pod takes every chip of its host, so the host size is the choice: the smallest that fits.
        hosts = sorted({n.accelerators_per_node for n in instances_for(accelerator.id)})
        if args.gpus is not None and args.gpus not in hosts:
            err.print(f"inferplane size: no {accelerator.id} host has {args.gpus} chips ({', '.join(map(str, hosts))})")
            return EXIT_INVALID
        tried = [
            size(replace(request, accelerators_per_node=chips, tensor_parallel_size=chips, whole_node=True))
            for chips in hosts
            if args.gpus in (None, chips)
        ]
        result = next((r for r in tried if r.fits), tried[-1])
    else:
        result = size(request)
    if args.json:
        out.print_json(json.dumps(result.model_dump(mode="json"), sort_keys=True))
    else:
        render_result(out, result)
    return EXIT_OK if result.fits else EXIT_REFUSED


def _preview(args: argparse.Namespace, out: Console, err: Console) -> int:
    # Imported here: the preview engine renders with this module's sizing tables and exit codes.
    from infra.preview.command import preview_command  # noqa: PLC0415

    return preview_command(args, out, err)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(prog="inferplane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    size_cmd = sub.add_parser("size", help="size one model on an accelerator, or every model of a stack")
    size_cmd.add_argument("--stack", help="size every model of stacks/Pulumi.<stack>.yaml")
    size_cmd.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    size_cmd.add_argument("--model", choices=sorted(MODELS), help="catalog model")
    size_cmd.add_argument("--accelerator", choices=sorted(ACCELERATORS), help="catalog accelerator")
    size_cmd.add_argument("--gpus", type=_positive, help="GPUs per replica (tensor parallel); default: smallest fit")
    size_cmd.add_argument("--weights-dtype", choices=get_args(WeightsDtype), default="bf16")
    size_cmd.add_argument("--kv-cache-dtype", choices=get_args(KvCacheDtype), default="auto")
    size_cmd.add_argument("--context", type=_positive, default=8192, help="max context, tokens (default 8192)")
    size_cmd.add_argument("--concurrency", type=_positive, default=32, help="concurrent sequences (default 32)")
    size_cmd.add_argument("--gpu-memory-utilization", type=float, default=0.90)
    size_cmd.add_argument("--json", action="store_true", help="print one JSON object")
    size_cmd.set_defaults(handler=lambda a, o, e: _size_stack(a, o, e) if a.stack else _size_model(a, o, e))

    preview_cmd = sub.add_parser("preview", help="the offline plan of one stack: tree, sizing, cost, policies, diff")
    preview_cmd.add_argument("--stack", required=True, help="evaluate stacks/Pulumi.<stack>.yaml")
    preview_cmd.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    preview_cmd.add_argument("--json", metavar="FILE", help="write the plan (byte-identical for the same inputs)")
    preview_cmd.add_argument("--against", metavar="OLD.json", help="diff against a plan written earlier with --json")
    preview_cmd.add_argument("--markdown", metavar="FILE", help="write the pull-request comment (Markdown)")
    preview_cmd.set_defaults(handler=_preview)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``inferplane`` console script."""
    args = build_parser().parse_args(argv)
    # Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; plans read better wide.
    out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 160)
    try:
        code: int = args.handler(args, out, err)
    except (StackFileError, InvalidSpecError) as exc:
        err.print(str(exc), markup=False, highlight=False)
        return EXIT_INVALID
    return code


if __name__ == "__main__":
    sys.exit(main())
