"""The ``inferplane`` command line.

Exit codes, shared by every subcommand: 0 fine; 1 the plan is refused (a model that does not fit, a limit
exceeded); 2 the input is invalid (the message names the file and the key); 3 the program failed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import NoReturn, get_args

from rich.console import Console

from inferplane.components.capacity.sizing import SizingRequest, SizingResult, size, size_platform
from inferplane.components.catalog import (
    ACCELERATORS,
    MODELS,
    Accelerator,
    ModelArchitecture,
    get_accelerator,
    get_model,
    instances_for,
)
from inferplane.components.catalog.models import MAX_CONTEXT_TOKENS
from inferplane.components.spec.buildable import validate_platform
from inferplane.components.spec.platform_spec import (
    MAX_CONCURRENCY,
    MAX_GPUS_PER_REPLICA,
    PLATFORM_KEY,
    Engine,
    KvCacheDtype,
    SpecError,
    WeightsDtype,
    tensor_parallel_problem,
)
from inferplane.tool import plan as plan_cmd
from inferplane.tool.cache_eval import add_cache_commands
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.gateway_run import add_gateway_commands
from inferplane.tool.preflight import (
    AwsCaller,
    PreflightError,
    boto3_client_for,
    iam_policy,
    partition_for,
    render_report,
    report_json,
    run_preflight,
)
from inferplane.tool.route_eval import add_route_commands
from inferplane.tool.simulate.arguments import add_simulate_command
from inferplane.tool.sizing_report import render_platform, render_result
from inferplane.tool.stackfile import InvalidSpecError, StackFileError, find_project_dir, load_stack, printable


def _size_stack(args: argparse.Namespace, out: Console, err: Console) -> int:
    given = [
        flag
        for flag, value in (("--model", args.model), ("--accelerator", args.accelerator), ("--gpus", args.gpus))
        if value is not None
    ]
    if given:
        err.print(
            f"inferplane size: --stack sizes the stack's own models; drop {' and '.join(given)}",
            markup=False,
            highlight=False,
        )
        return EXIT_INVALID
    project_dir = find_project_dir(Path(args.project_dir) if args.project_dir is not None else None)
    stack = load_stack(project_dir, args.stack)
    plan = size_platform(stack.platform)
    if args.json:
        out.print_json(json.dumps(plan.model_dump(mode="json"), sort_keys=True))
    else:
        render_platform(out, plan)
    return EXIT_OK if plan.ok else EXIT_REFUSED


def _size_model(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``size --model M --accelerator A``: check the flags, size, report."""
    if not args.model or not args.accelerator:
        err.print("inferplane size: give --stack S, or --model M and --accelerator A")
        return EXIT_INVALID
    try:
        model = get_model(args.model)
        accelerator = get_accelerator(args.accelerator)
    except KeyError as exc:
        err.print(f"inferplane size: {exc.args[0]}")
        return EXIT_INVALID
    if not _model_flags_valid(args, model, accelerator, err):
        return EXIT_INVALID
    request = _sizing_request(args, model, accelerator)
    if accelerator.vendor == "google":
        tpu_result = _size_tpu(args, request, accelerator, err)
        if tpu_result is None:
            return EXIT_INVALID
        result = tpu_result
    else:
        result = size(request)
    return _report_model_size(args, out, model, accelerator, result)


def _model_flags_valid(
    args: argparse.Namespace, model: ModelArchitecture, accelerator: Accelerator, err: Console
) -> bool:
    """Check the flags against the model and the accelerator; print the first problem and return False."""
    if args.context > model.max_context:
        err.print(
            f"inferplane size: --context {args.context} exceeds the {model.max_context} tokens {args.model} supports"
        )
        return False
    if args.input_tokens + args.output_tokens > args.context:
        # A sequence holds its prompt and its output: a longer one cannot exist, so its throughput means nothing.
        err.print(
            f"inferplane size: --input-tokens {args.input_tokens} + --output-tokens {args.output_tokens} exceed "
            f"--context {args.context} (at most {model.max_context} for {args.model})"
        )
        return False
    if accelerator.vendor == "google" and (args.weights_dtype != "bf16" or args.kv_cache_dtype not in ("auto", "bf16")):
        err.print(f"inferplane size: {accelerator.id} serves bf16 weights and KV cache")
        return False
    if accelerator.vendor == "google" and args.engine in plan_cmd.GPU_ONLY_ENGINES:
        engine = f"{args.engine} ({plan_cmd.GPU_ONLY_ENGINES[args.engine]})"
        err.print(f"inferplane size: --engine {engine} serves NVIDIA GPUs, not {accelerator.id}")
        return False
    if not 0.5 <= args.gpu_memory_utilization <= 0.93:
        err.print("inferplane size: --gpu-memory-utilization must be within 0.5 and 0.93")
        return False
    if accelerator.vendor != "google" and args.gpus is not None:
        instance = instances_for(accelerator.id)[0]
        problem = tensor_parallel_problem(args.gpus, instance.accelerators_per_node, instance.name)
        if problem:
            err.print(f"inferplane size: --gpus {problem}", markup=False, highlight=False)
            return False
    return True


def _sizing_request(args: argparse.Namespace, model: ModelArchitecture, accelerator: Accelerator) -> SizingRequest:
    """The sizing request the flags describe, on the accelerator's first instance type."""
    return SizingRequest(
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


def _size_tpu(
    args: argparse.Namespace, request: SizingRequest, accelerator: Accelerator, err: Console
) -> SizingResult | None:
    """Size on the smallest TPU host that fits (or the one ``--gpus`` names); None after printing a bad host size."""
    # A TPU pod takes every chip of its host, so the host size is the choice: the smallest that fits.
    hosts = sorted({n.accelerators_per_node for n in instances_for(accelerator.id)})
    if args.gpus is not None and args.gpus not in hosts:
        err.print(f"inferplane size: no {accelerator.id} host has {args.gpus} chips ({', '.join(map(str, hosts))})")
        return None
    tried = [
        size(replace(request, accelerators_per_node=chips, tensor_parallel_size=chips, whole_node=True))
        for chips in hosts
        if args.gpus in (None, chips)
    ]
    return next((r for r in tried if r.fits), tried[-1])


def _report_model_size(
    args: argparse.Namespace, out: Console, model: ModelArchitecture, accelerator: Accelerator, result: SizingResult
) -> int:
    """Print the sizing and its performance (a table or one JSON object); the exit code says whether it fits.

    A configuration that does not fit has no performance: no line, and no performance keys in the JSON.
    """
    performance = plan_cmd.size_performance(args, model, accelerator, result) if result.fits else {}
    if args.json:
        out.print_json(json.dumps({**result.model_dump(mode="json"), **performance}, sort_keys=True))
    else:
        render_result(out, result)
        if performance:
            plan_cmd.render_performance(out, args, performance)
    return EXIT_OK if result.fits else EXIT_REFUSED


def _preview(args: argparse.Namespace, out: Console, err: Console) -> int:
    # Imported here: the preview loads the Pulumi SDK and the providers, which `size` and `preflight` never need.
    from inferplane.tool.preview.command import preview_command  # noqa: PLC0415

    return preview_command(args, out, err)


def _schema(args: argparse.Namespace, out: Console, err: Console) -> int:
    # Imported here: inferring the schema loads the Pulumi SDK and every component.
    from inferplane.tool.schema import schema_command  # noqa: PLC0415

    return schema_command(args, out, err)


def _preflight(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.print_iam_policy:
        out.print_json(data=iam_policy(partition_for(args.region or "")))
        return EXIT_OK
    if not args.stack:
        err.print("inferplane preflight: give --stack S, or --print-iam-policy")
        return EXIT_INVALID
    project_dir = find_project_dir(Path(args.project_dir) if args.project_dir else None)
    stack = load_stack(project_dir, args.stack)
    spec = stack.platform
    if args.region and args.region != spec.region:
        # As if aws:region were set to R: the spec is validated again, so its zones must belong to R.
        try:
            spec = validate_platform(stack.config[PLATFORM_KEY], args.region)
        except SpecError as exc:
            raise InvalidSpecError(stack.display_file, exc) from None
    caller = AwsCaller(boto3_client_for(spec.region))
    try:
        report = run_preflight(spec, size_platform(spec), caller, horizon=timedelta(hours=args.horizon_hours))
    except PreflightError as exc:
        err.print(f"inferplane preflight: {exc}", markup=False, highlight=False)
        return EXIT_FAILED
    if args.json:
        out.print_json(report_json(report, args.stack))
    else:
        render_report(out, report, args.stack)
    return EXIT_OK if report.ok else EXIT_REFUSED


MAX_HORIZON_HOURS = 24 * 366
"""``preflight --horizon-hours`` looks at most a year ahead (capacity blocks and support windows are shorter)."""


def _positive_hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours") from None
    if not 0 < value <= MAX_HORIZON_HOURS:  # also false for nan
        raise argparse.ArgumentTypeError(f"{text!r} is not within 0 and {MAX_HORIZON_HOURS} hours")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose own errors (``unrecognized arguments: ...``) print control characters escaped.

    Subcommand parsers are made of the same class (``add_subparsers`` defaults to the parent's class).
    """

    def error(self, message: str) -> NoReturn:
        super().error(printable(message))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser: argparse.ArgumentParser = _Parser(prog="inferplane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_size_parser(sub)
    plan_cmd.add_parser(sub)
    _add_preview_parser(sub)
    _add_preflight_parser(sub)
    _add_schema_parser(sub)
    add_cache_commands(sub)
    add_route_commands(sub)
    add_gateway_commands(sub)
    add_simulate_command(sub)
    return parser


def _add_size_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inferplane size``: one model on an accelerator, or every model of a stack."""
    size_cmd = sub.add_parser("size", help="size one model on an accelerator, or every model of a stack")
    size_cmd.add_argument("--stack", help="size every model of stacks/Pulumi.<stack>.yaml")
    size_cmd.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    size_cmd.add_argument("--model", choices=sorted(MODELS), help="catalog model")
    size_cmd.add_argument("--accelerator", choices=sorted(ACCELERATORS), help="catalog accelerator")
    size_cmd.add_argument(
        "--gpus",
        type=plan_cmd.whole(MAX_GPUS_PER_REPLICA),
        help="GPUs per replica (tensor parallel); default: smallest fit",
    )
    size_cmd.add_argument("--weights-dtype", choices=get_args(WeightsDtype), default="bf16")
    size_cmd.add_argument("--kv-cache-dtype", choices=get_args(KvCacheDtype), default="auto")
    size_cmd.add_argument(
        "--context", type=plan_cmd.whole(MAX_CONTEXT_TOKENS), default=8192, help="max context, tokens (default 8192)"
    )
    size_cmd.add_argument(
        "--concurrency", type=plan_cmd.whole(MAX_CONCURRENCY), default=32, help="concurrent sequences (default 32)"
    )
    size_cmd.add_argument("--gpu-memory-utilization", type=_utilization, default=0.90)
    size_cmd.add_argument(
        "--input-tokens",
        type=plan_cmd.whole(MAX_CONTEXT_TOKENS),
        default=1000,
        help="prompt tokens of the mix (default 1000)",
    )
    size_cmd.add_argument(
        "--output-tokens",
        type=plan_cmd.whole(MAX_CONTEXT_TOKENS),
        default=1000,
        help="output tokens (default 1000)",
    )
    size_cmd.add_argument(
        "--engine", choices=get_args(Engine), default="vllm", help="triton = TensorRT-LLM; sglang = SGLang"
    )
    size_cmd.add_argument("--json", action="store_true", help="print one JSON object")
    size_cmd.set_defaults(handler=lambda a, o, e: _size_stack(a, o, e) if a.stack else _size_model(a, o, e))


def _add_preview_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inferplane preview``: the offline plan of one stack."""
    preview_cmd = sub.add_parser("preview", help="the offline plan of one stack: tree, sizing, cost, policies, diff")
    preview_cmd.add_argument("--stack", required=True, help="evaluate stacks/Pulumi.<stack>.yaml")
    preview_cmd.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    preview_cmd.add_argument("--json", metavar="FILE", help="write the plan (byte-identical for the same inputs)")
    preview_cmd.add_argument("--against", metavar="OLD.json", help="diff against a plan written earlier with --json")
    preview_cmd.add_argument("--markdown", metavar="FILE", help="write the pull-request comment (Markdown)")
    preview_cmd.set_defaults(handler=_preview)


def _add_preflight_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inferplane preflight``: check the AWS account a stack deploys to."""
    preflight = sub.add_parser(
        "preflight",
        help="check the AWS account before pulumi up: zones, GPU facts, vCPU quota, capacity blocks, AMI, version",
        description="Check the AWS account a stack deploys to, with the caller's credentials (boto3's usual chain; "
        "AWS_ENDPOINT_URL is honoured). Exit 0: every check passed or warned; 1: a check failed; 2: the stack is "
        "invalid; 3: nothing could be checked (no credentials, no endpoint).",
    )
    preflight.add_argument("--stack", help="check stacks/Pulumi.<stack>.yaml")
    preflight.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    preflight.add_argument(
        "--region", help="check as if the stack's aws:region were REGION (its zones must then be in REGION)"
    )
    preflight.add_argument(
        "--horizon-hours",
        type=_positive_hours,
        default=24.0,
        help="capacity blocks and standard support must last at least this long from now (default 24)",
    )
    preflight.add_argument("--json", action="store_true", help="print one JSON object")
    preflight.add_argument(
        "--print-iam-policy", action="store_true", help="print the read-only IAM policy the checks need, and exit"
    )
    preflight.set_defaults(handler=_preflight)


def _add_schema_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inferplane schema``: the Pulumi package schema of the component package."""
    schema_cmd = sub.add_parser(
        "schema", help="the Pulumi package schema of the multi-language component package (inferplane:index:Platform)"
    )
    schema_mode = schema_cmd.add_mutually_exclusive_group()
    schema_mode.add_argument(
        "--write", action="store_true", help="regenerate components/platform/args.py and schema.json"
    )
    schema_mode.add_argument("--check", action="store_true", help="exit 1 when args.py or schema.json is stale")
    schema_cmd.add_argument(
        "--project-dir", help="the inferplane source tree to --write or --check (default: the nearest with Pulumi.yaml)"
    )
    schema_cmd.set_defaults(handler=_schema)


def _utilization(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def argument_problem(args: argparse.Namespace) -> str | None:
    """The first option given an empty value or control characters, as a message; None when every one is fine.

    An empty ``--project-dir ''`` or ``--pairs ''`` would otherwise read as "not given" and fall back to a default,
    and a control character in any argument (``--region``) would reach the terminal wherever the value is shown.
    """
    names = ("command", "cache_command", "route_command", "gateway_command")
    command = " ".join(str(getattr(args, name)) for name in names if getattr(args, name, None))
    for name, value in vars(args).items():
        flag = "--" + name.replace("_", "-")
        for item in value if isinstance(value, list) else [value]:
            if item == "":
                return f"inferplane {command}: {flag} is empty; give a value or leave the flag out"
            if isinstance(item, str) and _CONTROL_CHARACTERS.search(item):
                return (
                    f"inferplane {command}: {flag} {item!r}: control characters (escape sequences, NUL, newlines) "
                    "are not accepted"
                )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``inferplane`` console script."""
    args = build_parser().parse_args(argv)
    # Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; plans read better wide. emoji=False:
    # a ``:x:`` in a path or a stack file is text, never an emoji.
    out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160, emoji=False)
    err = Console(stderr=True, soft_wrap=True, width=None if sys.stderr.isatty() else 160, emoji=False)
    problem = argument_problem(args)
    if problem is not None:
        err.print(problem, markup=False, highlight=False)
        return EXIT_INVALID
    try:
        code: int = args.handler(args, out, err)
    except (StackFileError, InvalidSpecError) as exc:
        err.print(printable(str(exc)), markup=False, highlight=False)
        return EXIT_INVALID
    return code


if __name__ == "__main__":
    sys.exit(main())
