"""Aggregated against disaggregated serving at equal GPUs, on a simulated fleet timed by the performance model.

Fleet: NVIDIA Dynamo's mocker engines (ai-dynamo 1.6.1, ``make simulator``), every engine timed by a profile the
performance model generates for the prod stack's ``llama-70b`` (TP 4 on p5.48xlarge H100s) as sizing renders each
role:

* aggregated: N workers with the aggregated sizing (chunked prefill within the ITL objective's step budget);
* disaggregated: x prefill workers (``--disaggregation-mode prefill``, the prefill role's sizing: the largest step
  budget) and N - x decode workers (``--disaggregation-mode decode``, the decode role's sizing), the KV moved at the
  rate sizing models for the stack's EFA pool (``--kv-transfer-bandwidth``).

Routers (``--router``, both side by side when both are given):

* ``gateway`` (default): ``inferplane simulate``'s run, the stack's own gateway (real Envoy and processor) in front:
  it picks the decode replica; each replica's Dynamo frontend sends the prompt to a prefill worker of its namespace
  (``tool/simulate/fleet.py``: the gateway's own prefill step speaks vLLM's proxy protocol, which the mockers do not);
* ``dynamo``: one Dynamo frontend (``--router-mode kv``) over every worker, with its own prefill router.

Equal GPUs: every worker is one TP-4 replica. Workloads (seeded, Poisson arrivals):

* ``long``: 10,000-token prompts, 1,000 output tokens, plus bursts of long prompts (a burst of B at once every P s);
* ``short``: 200 / 200.

Printed side by side for each: TTFT p50/p99, ITL p50/p99 over every gap, ITL p99 of the gaps that fall within a
burst's window (the running streams' stall while the burst's prompts are computed), output tokens/s and per GPU,
requests served. This is the issue's goal measured: disaggregated ITL p99 during bursts at most half aggregated's,
at no more than 10% fewer tokens/s per GPU; a simulated fleet, not a GPU (say so beside every figure).

Run: ``.venv/bin/python benchmarks/disagg_sim.py [--workers 4] [--prefill-workers 2] [--workload long,short]
[--router gateway,dynamo]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from inferplane.components.capacity.sizing import size_platform  # noqa: E402
from inferplane.components.gateway import renderer as gc  # noqa: E402
from inferplane.tool import gateway_run as gr  # noqa: E402
from inferplane.tool.simulate import command as sim  # noqa: E402
from inferplane.tool.simulate import fleet as fl  # noqa: E402
from inferplane.tool.simulate.arguments import simulate_args  # noqa: E402
from inferplane.tool.simulate.disaggregated import Role as SizedRole  # noqa: E402
from inferplane.tool.simulate.disaggregated import disaggregated_roles, role_of  # noqa: E402
from inferplane.tool.simulate.model_dir import write_model_dir  # noqa: E402
from inferplane.tool.simulate.profile import timing_profile, write_profile  # noqa: E402
from inferplane.tool.simulate.replay import Outcome, percentile, replay  # noqa: E402
from inferplane.tool.simulate.workload import VOCABULARY_WORDS, WorkloadRequest, words, write_workload  # noqa: E402
from inferplane.tool.stackfile import load_stack  # noqa: E402

STACK, MODEL = "prod", "llama-70b"
NAMESPACE = "pd"
ROUTERS = {
    "gateway": "the stack's gateway (each replica's frontend picks its prefill worker)",
    "dynamo": "one Dynamo frontend (--router-mode kv)",
}
BURST_WINDOW_S = 5.0
"""A gap counts as "during a burst" when it ends within this long after the burst's arrival (the burst's prompts
are being computed then)."""


@dataclass(frozen=True)
class Role:
    """One kind of worker: its engine settings, timing profile and Dynamo mode."""

    mode: Literal["agg"] | fl.DisaggregationMode
    settings: fl.EngineSettings
    profile: Path


@dataclass(frozen=True)
class Shape:
    """A workload's shape."""

    name: str
    prompt: int
    output: int
    rate: float
    duration: float
    burst: int
    burst_period: float


SHAPES = {
    "long": Shape("long", 10_000, 1_000, rate=0.25, duration=60.0, burst=4, burst_period=20.0),
    "short": Shape("short", 200, 200, rate=6.0, duration=30.0, burst=0, burst_period=0.0),
}


@dataclass(frozen=True)
class Bench:
    """What every fleet of a run shares: the simulated model's directory, the KV transfer rate and the TP."""

    model_dir: Path
    bandwidth_gbps: float
    """GB/s, as sizing models the stack's pools."""
    tp: int
    simulator: Path


def roles(directory: Path) -> tuple[dict[str, Role], Bench]:
    """The three roles as the prod stack's sizing renders them, and what every fleet shares."""
    stack = load_stack(PROJECT, STACK)
    spec = stack.platform
    model = next(m for m in spec.models if m.name == MODEL)
    aggregated_spec = spec.model_copy(
        update={
            "models": tuple(m.model_copy(update={"disaggregation": None}) if m is model else m for m in spec.models)
        }
    )
    aggregated = role_of(model, size_platform(aggregated_spec).serving(MODEL), MODEL)
    decode, prefill, transfer_gbps = disaggregated_roles(model, size_platform(spec), stack.display_file)
    repo = gc.tokenizer_file(model).removesuffix("/tokenizer.json")
    model_dir = write_model_dir(directory / "tokenizers", repo, model.architecture_resolved, model.max_context)

    def role(mode: Literal["agg"] | fl.DisaggregationMode, sized: SizedRole) -> Role:
        # Every worker serves the model's name (role_of): Dynamo pairs prefill and decode workers by it.
        profile = write_profile(timing_profile(sized.replica, model.max_context), directory / f"{mode}.npz")
        return Role(mode, sized.settings, profile)

    found = {"agg": role("agg", aggregated), "prefill": role("prefill", prefill), "decode": role("decode", decode)}
    bench = Bench(
        model_dir=model_dir,
        bandwidth_gbps=transfer_gbps,
        tp=decode.sizing.result.tensor_parallel_size,
        simulator=fl.find_simulator({}, PROJECT),
    )
    return found, bench


def workload(shape: Shape, seed: int = 1) -> list[WorkloadRequest]:
    """Poisson arrivals of unique prompts, plus the bursts (each burst's prompts all at once)."""
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = rng.expovariate(shape.rate)
    while t < shape.duration:
        arrivals.append(t)
        t += rng.expovariate(shape.rate)
    if shape.burst:
        arrivals += [b for b in _bursts(shape) for _ in range(shape.burst)]
    return [
        WorkloadRequest(
            arrival_s=round(a, 3),
            prompt=words(rng.randrange(VOCABULARY_WORDS) for _ in range(shape.prompt)),
            output_tokens=shape.output,
        )
        for a in sorted(arrivals)
    ]


def _bursts(shape: Shape) -> list[float]:
    return (
        [shape.burst_period * (i + 1) for i in range(int(shape.duration // shape.burst_period))] if shape.burst else []
    )


def start_fleet(procs: gr.Processes, directory: Path, bench: Bench, plan: list[Role]) -> tuple[str, list[str]]:
    """Start the workers and the frontend; return its URL once it has every decode worker (and answers), and each
    worker's ``/metrics``."""
    discovery = directory / "discovery"
    discovery.mkdir()
    ports: set[int] = set()
    metrics: list[str] = []
    for i, role in enumerate(plan):
        host = fl.replica_host(i)
        system = gr.pick_ports(1, ports)
        metrics.append(f"http://{host}:{system}/metrics")
        env = {**fl.dynamo_env(host, discovery), "DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(system)}
        args = [*fl.mocker_args(role.settings, bench.model_dir, role.profile, NAMESPACE)]
        if role.mode == "agg":
            args += ["--disaggregation-mode", "agg"]
        else:
            bootstrap = gr.pick_ports(1, ports) if role.mode == "prefill" else None
            args += fl.disaggregation_args(role.mode, bench.bandwidth_gbps, bootstrap)
        procs.start(f"{role.mode}-{i}", [str(bench.simulator), *args], env)
    port = gr.pick_ports(1, ports)
    serving = sum(1 for r in plan if r.mode != "prefill")
    frontend = [
        *("-m", "dynamo.frontend", "--http-host", gr.LISTEN_HOST, "--http-port", str(port)),
        *("--discovery-backend", "file", "--namespace", NAMESPACE, "--router-mode", "kv"),
        *("--kv-cache-block-size", str(plan[0].settings.block_size), "--router-min-initial-workers", str(serving)),
    ]
    procs.start("frontend", [str(bench.simulator), *frontend], fl.dynamo_env(gr.LISTEN_HOST, discovery))
    url = f"http://{gr.LISTEN_HOST}:{port}"
    body = {"model": MODEL, "prompt": "w1 w2 w3", "max_tokens": 1}
    prefill_metrics = [m for m, role in zip(metrics, plan, strict=True) if role.mode == "prefill"]

    def ready() -> bool:
        # A probe answers; with prefill workers, one of them has taken a probe: the frontend's prefill router starts
        # only once discovery shows it a prefill worker, and until then requests decode where they land.
        return fl.post_ok(f"{url}/v1/completions", body) and (
            not prefill_metrics or any(n > 0 for n in fl.generate_requests(prefill_metrics))
        )

    deadline = time.monotonic() + max(60.0, fl.READY_SECONDS_PER_REPLICA * len(plan))
    while not ready():
        gone = procs.exited()
        if gone is not None:
            raise RuntimeError(f"{gone[0]} exited with {gone[1]}: {procs.log_tail(gone[0])}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the frontend did not answer through every role: {procs.log_tail('frontend')}")
        time.sleep(0.5)
    return url, metrics


@dataclass(frozen=True)
class Result:
    fleet: str
    served: int
    sent: int
    ttft: tuple[float, float]
    itl: tuple[float, float]
    itl_burst_p99: float | None
    tokens_per_second: float
    gpus: int
    per_worker: tuple[int, ...]
    """Requests each worker took during the replay, in fleet order (prefill workers first)."""

    @property
    def per_gpu(self) -> float:
        return self.tokens_per_second / self.gpus


def measure(fleet: str, outcomes: tuple[Outcome, ...], shape: Shape, gpus: int, per_worker: tuple[int, ...]) -> Result:
    served = [o for o in outcomes if o.ok]
    ttfts = [o.ttft_s * 1000 for o in served if o.ttft_s is not None]
    gaps = [g * 1000 for o in served for g in o.itl_s]
    during: list[float] = []
    bursts = _bursts(shape)
    for o in served:
        if o.ttft_s is None:
            continue
        at = o.sent_s + o.ttft_s
        for gap in o.itl_s:
            at += gap
            if any(b <= at <= b + BURST_WINDOW_S for b in bursts):
                during.append(gap * 1000)
    span = max((o.finished_s for o in served), default=0.0) - min((o.sent_s for o in served), default=0.0)
    tokens = sum(o.output_tokens for o in served)
    return Result(
        fleet=fleet,
        served=len(served),
        sent=len(outcomes),
        ttft=(percentile(ttfts, 50), percentile(ttfts, 99)) if ttfts else (float("nan"), float("nan")),
        itl=(percentile(gaps, 50), percentile(gaps, 99)) if gaps else (float("nan"), float("nan")),
        itl_burst_p99=percentile(during, 99) if during else None,
        tokens_per_second=tokens / span if span > 0 else 0.0,
        gpus=gpus,
        per_worker=per_worker,
    )


def run_one(label: str, plan: list[Role], shape: Shape, bench: Bench) -> Result:
    """One fleet, fresh, replaying the workload once."""
    with tempfile.TemporaryDirectory(prefix="disagg-sim-") as tmp:
        directory = Path(tmp)
        (directory / "logs").mkdir()
        procs = gr.Processes(directory / "logs", threading.Event())
        try:
            url, metrics = start_fleet(procs, directory, bench, plan)
            before = fl.generate_requests(metrics)
            outcomes = asyncio.run(replay(workload(shape), base_url=url, model=MODEL, api_key=None))
            per_worker = tuple(
                after - first for after, first in zip(fl.generate_requests(metrics), before, strict=True)
            )
        finally:
            procs.stop_all()
    return measure(label, outcomes, shape, len(plan) * bench.tp, per_worker)


def through_gateway(label: str, replicas: int, prefill: int, shape: Shape, bench: Bench) -> Result:
    """One ``inferplane simulate`` fleet (``prefill`` > 0: disaggregated), fresh, behind the stack's gateway."""
    with tempfile.TemporaryDirectory(prefix="disagg-sim-") as tmp:
        directory = Path(tmp)
        path = directory / "workload.jsonl"
        write_workload(path, workload(shape))
        # Said either way: simulate's default is how the stack serves the model, and prod's is disaggregated.
        serving = ("disaggregated", "--prefill-replicas", str(prefill)) if prefill else ("aggregated",)
        args = simulate_args(
            [
                *("--stack", STACK, "--model", MODEL, "--replicas", str(replicas), "--serving", *serving),
                *("--workload", str(path), "--project-dir", str(PROJECT)),
            ]
        )
        plan = sim.plan_simulation(args, os.environ)
        run_dir = directory / "run"
        (run_dir / "logs").mkdir(parents=True)
        stop = threading.Event()
        procs = gr.Processes(run_dir / "logs", stop)
        run = sim.SimulationRun(plan, run_dir, stop, Console(stderr=True))
        try:
            fleet = run.start_fleet(procs)
            gateways = run.start_gateways(procs, fleet) if fleet is not None else None
            if fleet is None or gateways is None:
                raise RuntimeError("stopped before the run")
            urls, key = gateways
            workers = [u for urls_ in fleet.prefill_metrics.values() for u in urls_]
            workers += [f"{r.url}/metrics" for r in fleet.replicas]
            before = fl.generate_requests(workers)
            outcomes = tuple(run.replay(urls, key, None))
            per_worker = tuple(
                after - first for after, first in zip(fl.generate_requests(workers), before, strict=True)
            )
        finally:
            procs.stop_all()
    return measure(label, outcomes, shape, (replicas + prefill) * bench.tp, per_worker)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="TP-4 workers in each fleet (equal GPUs)")
    parser.add_argument("--prefill-workers", type=int, default=2, help="of them, prefill workers when disaggregated")
    parser.add_argument("--workload", default="long,short")
    parser.add_argument("--router", default="gateway", help="gateway, dynamo, or both (comma-separated)")
    args = parser.parse_args()
    routers = args.router.split(",")
    if not set(routers) <= {"gateway", "dynamo"}:
        parser.error(f"--router {args.router}: give gateway, dynamo or both")
    decode = args.workers - args.prefill_workers
    with tempfile.TemporaryDirectory(prefix="disagg-roles-") as tmp:
        found, bench = roles(Path(tmp))
        disaggregated = f"{args.prefill_workers}P{decode}D"
        fleets = {
            "aggregated": [found["agg"]] * args.workers,
            disaggregated: [found["prefill"]] * args.prefill_workers + [found["decode"]] * decode,
        }
        print(
            f"fleet: simulated (NVIDIA Dynamo mocker engines timed by the performance model; not a GPU), {STACK}'s "
            f"{MODEL}, TP {bench.tp}, {args.workers} workers a fleet ({args.workers * bench.tp} GPUs); routers: "
            + ", ".join(ROUTERS[r] for r in routers)
            + f"; KV transfer {bench.bandwidth_gbps:.1f} GB/s"
        )
        header = (
            "fleet",
            "served",
            "TTFT p50",
            "TTFT p99",
            "ITL p50",
            "ITL p99",
            "ITL p99 burst",
            "tok/s",
            "tok/s/GPU",
        )
        for name in args.workload.split(","):
            shape = SHAPES[name]
            results = []
            for router in routers:
                for label, plan in fleets.items():
                    if router == "dynamo":
                        results.append(run_one(f"{label} dynamo", plan, shape, bench))
                    else:
                        prefill = 0 if label == "aggregated" else args.prefill_workers
                        replicas = args.workers if label == "aggregated" else decode
                        results.append(through_gateway(f"{label} gateway", replicas, prefill, shape, bench))
            burst = f", bursts of {shape.burst} every {shape.burst_period:g} s" if shape.burst else ""
            print(
                f"\n{name}: {shape.prompt} in / {shape.output} out, {shape.rate:g} req/s for {shape.duration:g} s"
                + burst
            )
            print(f"{header[0]:<20}" + "  ".join(f"{h:>13}" for h in header[1:]))
            for r in results:
                cells = (
                    r.fleet,
                    f"{r.served}/{r.sent}",
                    f"{r.ttft[0]:.0f}",
                    f"{r.ttft[1]:.0f}",
                    f"{r.itl[0]:.1f}",
                    f"{r.itl[1]:.1f}",
                    "-" if r.itl_burst_p99 is None else f"{r.itl_burst_p99:.1f}",
                    f"{r.tokens_per_second:.0f}",
                    f"{r.per_gpu:.1f}",
                )
                row = f"{cells[0]:<20}" + "  ".join(f"{c:>13}" for c in cells[1:])
                print(f"{row}  per worker {list(r.per_worker)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
