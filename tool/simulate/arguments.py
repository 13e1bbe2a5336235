"""``inferplane simulate``'s arguments. The command itself (:mod:`.command`) needs the ``gateway`` extra (the
processor's runtime, numpy, httpx, tokenizers), so it is imported only when the command runs: every other command
keeps working on the base install."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from rich.console import Console

from inferplane.tool.simulate.workload import GENERATORS, PLAN_RATE

COMMAND_DOC = (
    "Run the stack's gateway (real Envoy, processor, a local Redis) in front of a simulated GPU fleet of one model "
    "(NVIDIA Dynamo's mocker engines with the engine settings sizing renders, timed by the performance model), replay "
    "a workload through it and print the tails it sees: TTFT and ITL percentiles, throughput, prefix hits, "
    "preemptions, requests per replica, 429s, whether the model's slo held, and $ per million output tokens. "
    "Exit 0 the slo held, 1 it did not, 2 bad input, 3 a part failed. See docs/simulate.md."
)


def _simulate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from inferplane.tool.simulate.command import simulate_command  # noqa: PLC0415 - needs the gateway extra

    return simulate_command(args, out, err)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def _rate(text: str) -> float | str:
    """Requests per second, or ``plan``: the rate the plan says the replicas serve within the model's slo and the
    gateway's admission."""
    return PLAN_RATE if text == PLAN_RATE else _positive(text)


def simulate_args(argv: Sequence[str]) -> argparse.Namespace:
    """``inferplane simulate ARGV``'s arguments as the command gets them, for scripts and tests that plan or run a
    simulation in-process: every option and default is the CLI's own, so a new option cannot leave them behind."""
    parser = argparse.ArgumentParser(prog="inferplane")
    add_simulate_command(parser.add_subparsers())
    return parser.parse_args(["simulate", *argv])


def add_simulate_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inferplane simulate`` on the CLI's subcommands."""
    cmd = sub.add_parser(
        "simulate",
        help="the stack's gateway in front of a simulated GPU fleet of one model: the tails a plan will see",
        description=COMMAND_DOC,
    )
    cmd.add_argument("--stack", required=True, help="simulate stacks/Pulumi.<stack>.yaml")
    cmd.add_argument("--model", help="the model deployment (default: the stack's only one)")
    cmd.add_argument("--replicas", metavar="min|max|N", help="simulated replicas: the plan's min (default), max or N")
    cmd.add_argument("--gateway-replicas", type=int, metavar="K", help="gateways sharing one Redis (default 1)")
    cmd.add_argument(
        "--serving",
        choices=["aggregated", "disaggregated"],
        help="serve the model aggregated or disaggregated (default: as the stack does; disaggregated needs the "
        "model's `disaggregation`)",
    )
    cmd.add_argument(
        "--prefill-replicas",
        metavar="min|max|N",
        help="a disaggregated model's prefill workers: its prefill role's min (default), max or N",
    )
    cmd.add_argument(
        "--workload",
        required=True,
        metavar="|".join(GENERATORS) + "|FILE.jsonl",
        help="a generated workload, or a JSON-lines file (docs/simulate.md)",
    )
    cmd.add_argument(
        "--rate",
        type=_rate,
        metavar="R|plan",
        help="requests per second of a generated workload; `plan`: the replicas x what one serves within the slo "
        "and the gateway's admission, by the performance model (what the plan promises)",
    )
    cmd.add_argument("--ramp", action="store_true", help="raise the rate linearly from 0 to --rate over the run")
    cmd.add_argument("--duration", type=_positive, help="seconds of arrivals (a file's: only those before it)")
    cmd.add_argument("--seed", type=int, default=1, help="the generator's seed (default 1)")
    cmd.add_argument("--routing", choices=["prefix_aware", "least_request"], help="override the model's routing")
    cmd.add_argument(
        "--keep-rate-limits", action="store_true", help="apply the tenants' rate limits (lifted by default)"
    )
    cmd.add_argument("--json", action="store_true", help="print the result as JSON (no progress bar)")
    cmd.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    cmd.add_argument("--envoy", metavar="PATH", help="the Envoy binary (default: as `inferplane gateway run` finds it)")
    cmd.set_defaults(handler=_simulate)
