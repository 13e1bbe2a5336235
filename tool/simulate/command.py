"""``inferplane simulate``: the stack's gateway in front of a simulated GPU fleet of one of its models, a workload
replayed through it, and the tails it sees.

What runs: N replicas of the model (:mod:`.fleet`: Dynamo's mocker with the engine settings sizing renders, timed by
the performance model's profile, :mod:`.profile`), a local Redis, and K gateways rendered exactly as
``inferplane gateway run`` renders them (real Envoy and processor, the same Redis, the same API keys: a gateway's
pods). The workload (:mod:`.workload`: generated or a JSON-lines file) is sent round robin over the gateways.

A model the stack serves disaggregated runs as its two roles (:mod:`.disaggregated`): decode replicas behind the
gateway and prefill workers shared out among them, each replica's frontend sending prompts to its own; ``--serving
aggregated`` runs it aggregated on the same pool and replica size instead (the other side of the comparison).

Two things differ from the stack as deployed, each said in the output: the tenants' rate limits are lifted (the
simulation measures the fleet, not a tenant's quota; ``--keep-rate-limits`` keeps them), and requests carry
``x-inferplane-cache: bypass`` (random-word prompts would make the response cache's hits meaningless). The
tokenizer both the gateway and the engines use is the simulated model's (:mod:`.model_dir`).

Printed: TTFT and ITL p50/p90/p95/p99, output tokens/s, the engines' prefix-hit share (each response's
``usage.prompt_tokens_details.cached_tokens`` over its prompt tokens) against the workload's ideal, preemptions and
requests per replica (the mockers' ``vllm:num_preemptions_total`` and ``vllm:e2e_request_latency_seconds_count``),
the most requests any replica held at once (running + waiting, sampled), 429s, whether the model's ``slo`` held
(TTFT p95 and ITL p95 within it, every request served), and $ per million output tokens at the plan's price.

Exit codes (as ``gateway run``): 0 the SLO held; 1 it did not (or the plan is refused); 2 bad input; 3 a part
failed to start or died.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.planner import replica_capacity_rps
from inferplane.components.capacity.sizing import DeploymentSizing, PlatformSizing, size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.components.spec.platform_spec import (
    AdmissionSpec,
    ModelDeploymentSpec,
    PlatformSpec,
    RateLimitSpec,
    RoutingPolicy,
    gateway_tiers,
    routing_of,
)
from inferplane.processor.metrics import ROUTING_DECISIONS_TOTAL
from inferplane.tool import gateway_run as gr
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_REFUSED
from inferplane.tool.gateway_run_providers import local_providers
from inferplane.tool.simulate import fleet as fl
from inferplane.tool.simulate.disaggregated import PrefillPlan, Role, Serving, disaggregated_roles, role_of
from inferplane.tool.simulate.model_dir import write_model_dir
from inferplane.tool.simulate.profile import timing_profile, write_profile
from inferplane.tool.simulate.replay import Outcome, percentile, replay, summarize
from inferplane.tool.simulate.workload import (
    GENERATORS,
    PLAN_RATE,
    WorkloadError,
    WorkloadRequest,
    WorkloadShape,
    ideal_hit_share,
    prompt_token_ids,
    read_workload,
)
from inferplane.tool.stackfile import find_project_dir, load_stack

COMMAND = "inferplane simulate"
UNLIMITED = 1_000_000_000
"""Requests and tokens per minute once the rate limits are lifted (Envoy's token bucket takes up to 2^32)."""
CACHED_TOKENS_REPORTED = frozenset({"vllm", "trtllm"})
"""The mocker's engine types whose responses carry ``usage.prompt_tokens_details.cached_tokens`` (measured on
ai-dynamo 1.6.1: its SGLang mocker's carry none; it reports only a ``sglang:cache_hit_rate`` gauge)."""
CACHE_HEADER = {"x-inferplane-cache": "bypass"}
SAMPLE_SECONDS = 0.2
"""How often each replica's running and waiting requests are read during a run."""
MAX_GATEWAYS = 8


class SimulationError(gr.GatewayRunError):
    """Why the command stops, with its exit code."""


@dataclass(frozen=True)
class SimulationPlan:
    """Everything checked before anything starts."""

    stack: str
    display_file: str
    spec: PlatformSpec
    sizing: PlatformSizing
    deployment: ModelDeploymentSpec
    deployment_sizing: DeploymentSizing
    replica: perf_model.Replica
    settings: fl.EngineSettings
    cluster: gc.Cluster
    replicas: int
    gateways: int
    routing: RoutingPolicy
    workload: tuple[WorkloadRequest, ...]
    workload_label: str
    rate: float | None
    rate_limits_lifted: bool
    served_disaggregated: bool
    """The stack serves the model disaggregated."""
    prefill: PrefillPlan | None
    """The prefill role where the run simulates the model disaggregated; None: aggregated (:func:`simulated_spec`)."""
    envoy: Path
    envoy_version: str
    simulator: Path


class Percentiles(BaseModel):
    """A latency's percentiles, milliseconds (None: no sample)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p50: float | None = Field(description="Median.")
    p90: float | None = Field(description="90th percentile.")
    p95: float | None = Field(description="95th percentile: what the model's ``slo`` states.")
    p99: float | None = Field(description="99th percentile.")


class SimulationResult(BaseModel):
    """What one run measured (``--json`` prints it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fleet: str = Field(description="Which fleet produced these figures (always the simulated one, named).")
    stack: str = Field(description="The stack.")
    model: str = Field(description="The model deployment.")
    replicas: int = Field(description="Simulated replicas.")
    gateways: int = Field(description="Gateway replicas in front.")
    routing: str = Field(description="The routing policy the gateways ran.")
    workload: str = Field(description="The workload: a generator and its rate, or a file.")
    rate: float | None = Field(
        description="A generator's arrival rate, requests per second, unrounded (``--rate plan``: what the plan "
        "promises); None for a file."
    )
    requests: int = Field(description="Requests sent.")
    ok: int = Field(description="Requests answered 2xx.")
    rejected_429: int = Field(description="Requests answered 429.")
    failed: int = Field(description="Requests that failed otherwise.")
    ttft_ms: Percentiles = Field(description="Time to the first content token, over served requests.")
    itl_ms: Percentiles = Field(description="Gaps between content chunks, over served requests.")
    output_tokens_per_second: float = Field(description="Output tokens over the run's span.")
    hit_share: float | None = Field(
        description="Prompt tokens the engines served from their prefix caches (None: the simulated engine does not "
        "report them; Dynamo's SGLang mocker answers without ``prompt_tokens_details``)."
    )
    ideal_hit_share: float = Field(description="The most any routing could: an unbounded cache shared by all.")
    preemptions: int = Field(description="Engine preemptions during the run (all replicas).")
    requests_per_replica: tuple[int, ...] = Field(description="Requests each replica's engine finished.")
    most_held: tuple[int, ...] = Field(
        description="The most requests each replica held at once (running + waiting), sampled every 0.2 s."
    )
    max_num_seqs: int = Field(description="Each replica's batch slots.")
    routing_decisions: dict[str, int] = Field(
        description="The gateways' replica picks by reason (``inferplane_gateway_routing_decisions_total``)."
    )
    slo_ttft_p95_ms: int = Field(description="The model's TTFT objective.")
    slo_itl_p95_ms: int = Field(description="The model's ITL objective.")
    slo_held: bool = Field(description="TTFT and ITL p95 within the objectives, every request served.")
    usd_per_million_output_tokens: float | None = Field(description="At the plan's price per replica-hour.")
    rate_limits_lifted: bool = Field(description="Whether the tenants' rate limits were lifted for the run.")
    served_disaggregated: bool = Field(description="The stack serves the model disaggregated.")
    serving: Serving = Field(
        description="How the run served it: ``disaggregated`` (``replicas`` decode replicas and ``prefill_replicas`` "
        "prefill workers) or ``aggregated``."
    )
    prefill_replicas: int = Field(description="Prefill workers (0 aggregated).")
    prefilled: int = Field(
        description="Requests the prefill workers computed the prompt of (the rest were computed where they decoded)."
    )
    transfer_gbps: float | None = Field(description="The KV transfer's rate, GB/s (None aggregated).")
    duration_s: float = Field(description="First send to last answer.")


# --- input ------------------------------------------------------------------------------------------------------------


def choose_model(spec: PlatformSpec, stack: str, given: str | None) -> ModelDeploymentSpec:
    """``--model``, or the stack's only model."""
    names = [d.name for d in spec.models]
    if given is None:
        if len(names) != 1:
            raise SimulationError(f"stack {stack} serves {len(names)} models ({', '.join(names)}): give --model")
        return spec.models[0]
    for deployment in spec.models:
        if deployment.name == given:
            return deployment
    raise SimulationError(f"--model {given}: stack {stack} has no such model (its models: {', '.join(names)})")


def replica_count(given: str | None, sizing: DeploymentSizing, option: str = "--replicas") -> int:
    """``--replicas`` (or ``option``): ``min`` (the default; at least one), ``max`` or a number."""
    if given in (None, "min"):
        return max(1, sizing.min_replicas)
    if given == "max":
        return sizing.max_replicas
    try:
        count = int(str(given))
    except ValueError:
        raise SimulationError(f"{option} {given}: give min, max or a number from 1 to {fl.MAX_REPLICAS}") from None
    if not 1 <= count <= fl.MAX_REPLICAS:
        raise SimulationError(f"{option} {given}: give min, max or a number from 1 to {fl.MAX_REPLICAS}")
    return count


def serving_of(args: argparse.Namespace, model: ModelDeploymentSpec, display_file: str) -> Serving:
    """``--serving``, by default as the stack serves ``model``; disaggregated only where the stack file says how."""
    serving: Serving = args.serving or ("aggregated" if model.disaggregation is None else "disaggregated")
    if serving == "disaggregated" and model.disaggregation is None:
        raise SimulationError(
            f"--serving disaggregated: {display_file} serves {model.name} aggregated (add its `disaggregation`: "
            "docs/model-servers.md)"
        )
    return serving


def simulated_spec(
    spec: PlatformSpec, deployment: ModelDeploymentSpec, routing: RoutingPolicy | None, lift_limits: bool
) -> tuple[PlatformSpec, RoutingPolicy]:
    """The spec the gateway renders: ``routing`` for the model (its own otherwise), rate limits lifted when asked, and
    a disaggregated model without its prefill role: its decode replicas are the replicas the gateway picks among,
    and the prompt's trip to a prefill worker is the simulated replica's own (:mod:`.disaggregated`: the mocker's
    disaggregated mode rendezvouses through Dynamo's runtime, which the gateway's prefill step does not speak). With
    ``--serving aggregated`` this is also the model's sizing: aggregated on its decode role's pool, size and
    replicas."""
    own = routing_of(spec, deployment)
    policy = routing or own.policy
    update: dict[str, object] = {"routing": own.model_copy(update={"policy": policy}), "disaggregation": None}
    models = tuple(d.model_copy(update=update) if d.name == deployment.name else d for d in spec.models)
    gateway = spec.gateway
    if lift_limits:
        gateway = gateway.model_copy(
            update={
                "rate_limit": RateLimitSpec(requests_per_minute=UNLIMITED, tokens_per_minute=UNLIMITED),
                "tenants": tuple(
                    t.model_copy(update={"requests_per_minute": None, "tokens_per_minute": None})
                    for t in gateway.tenants
                ),
            }
        )
    return spec.model_copy(update={"models": models, "gateway": gateway}), policy


def planned_rate(
    requests: Sequence[WorkloadRequest],
    replica: perf_model.Replica,
    deployment: ModelDeploymentSpec,
    replicas: int,
    admission: AdmissionSpec,
) -> tuple[float, float]:
    """What the plan promises for this workload's mix (mean prompt and output tokens, no cache hit assumed, as the
    planner sizes): the fleet's rate within the model's slo, and one replica's."""
    prompt = round(statistics.fmean(len(prompt_token_ids(r)) for r in requests))
    output = round(statistics.fmean(r.output_tokens for r in requests))
    slo = deployment.slo
    one = replica_capacity_rps(
        replica, max(prompt, 1), max(output, 1), slo.ttft_p95_ms, slo.itl_p95_ms, admission=admission
    )
    if one <= 0:
        raise SimulationError(
            f"--rate plan: by the performance model one replica of {deployment.name} misses its slo even alone for "
            f"this workload ({prompt} prompt and {output} output tokens a request)",
            EXIT_REFUSED,
        )
    return one * replicas, one


def build_workload(
    args: argparse.Namespace,
    replica: perf_model.Replica,
    deployment: ModelDeploymentSpec,
    replicas: int,
    admission: AdmissionSpec,
) -> tuple[tuple[WorkloadRequest, ...], str, float | None]:
    """The requests, a label and the rate: a generator's at ``--rate`` (``plan``: what the plan promises behind the
    stack's gateway ``admission``) for ``--duration``, or ``--workload FILE``'s (no rate)."""
    name = args.workload
    if name in GENERATORS:
        problems = []
        if args.rate is None:
            problems.append(f"--workload {name} needs --rate (requests per second)")
        if args.duration is None:
            problems.append(f"--workload {name} needs --duration (seconds)")
        if problems:
            raise SimulationError("; ".join(problems))
        rate, source = args.rate, ""
        if rate == PLAN_RATE:
            sample = GENERATORS[name](1.0, args.duration, args.seed, False, WorkloadShape())
            rate, one = planned_rate(sample, replica, deployment, replicas, admission)
            source = f" (the plan's: {replicas} x {one:.3g} within the slo)"
        requests = GENERATORS[name](rate, args.duration, args.seed, args.ramp, WorkloadShape())
        ramp = ", ramp from 0" if args.ramp else ""
        return requests, f"{name} at {rate:.3g} req/s{source}{ramp} for {args.duration:g} s (seed {args.seed})", rate
    path = Path(name).expanduser()
    if not path.is_file():
        raise SimulationError(
            f"--workload {name}: neither a generator ({', '.join(GENERATORS)}) nor a file (JSON lines: "
            "docs/simulate.md)"
        )
    if args.rate is not None or args.ramp:
        raise SimulationError(f"--workload {name}: a file carries its own arrival times; drop --rate and --ramp")
    try:
        requests = read_workload(path)
    except WorkloadError as exc:
        raise SimulationError(str(exc)) from None
    if args.duration is not None:
        requests = tuple(r for r in requests if r.arrival_s < args.duration)
    return requests, f"{path.name} ({len(requests)} requests)", None


def fleet_roles(
    args: argparse.Namespace, model: ModelDeploymentSpec, stack_spec: PlatformSpec, display_file: str, aggregated: Role
) -> tuple[Role, int, PrefillPlan | None]:
    """The replicas' engine and count, and the prefill role where the run serves ``model`` disaggregated (as the
    stack sizes both roles); ``aggregated`` otherwise."""
    if serving_of(args, model, display_file) == "aggregated":
        if args.prefill_replicas is not None:
            raise SimulationError(
                f"--prefill-replicas {args.prefill_replicas}: only for a model simulated disaggregated"
            )
        return aggregated, replica_count(args.replicas, aggregated.sizing), None
    if args.rate == PLAN_RATE:
        raise SimulationError(
            f"--rate plan: the plan's rate is an aggregated replica's; give a rate for {model.name} served "
            "disaggregated, or --serving aggregated"
        )
    stack_sizing = size_platform(stack_spec)
    if not stack_sizing.ok:
        raise SimulationError(
            f"{display_file}: the plan is refused: {'; '.join(stack_sizing.problems)} (inferplane size)", EXIT_REFUSED
        )
    decode, prefill, transfer_gbps = disaggregated_roles(model, stack_sizing, display_file)
    count = replica_count(args.prefill_replicas, prefill.sizing, "--prefill-replicas")
    return decode, replica_count(args.replicas, decode.sizing), PrefillPlan(prefill, count, transfer_gbps)


def plan_simulation(args: argparse.Namespace, environ: Mapping[str, str]) -> SimulationPlan:
    """Check every input and find every part (nothing is written or started)."""
    project_dir = find_project_dir(Path(args.project_dir) if args.project_dir is not None else None)
    stack = load_stack(project_dir, args.stack)
    base = stack.platform
    deployment = chosen = choose_model(base, args.stack, args.model)
    if args.gateway_replicas is not None and not 1 <= args.gateway_replicas <= MAX_GATEWAYS:
        raise SimulationError(f"--gateway-replicas {args.gateway_replicas}: give 1 to {MAX_GATEWAYS}")
    spec, policy = simulated_spec(base, deployment, args.routing, lift_limits=not args.keep_rate_limits)
    deployment = next(d for d in spec.models if d.name == deployment.name)
    sizing = size_platform(spec)
    if not sizing.ok:
        raise SimulationError(
            f"stack {args.stack}: the plan is refused: {'; '.join(sizing.problems)} (inferplane size --stack "
            f"{args.stack})",
            EXIT_REFUSED,
        )
    deployment_sizing = next(d for d in sizing.deployments if d.name == deployment.name)
    aggregated = role_of(deployment, deployment_sizing, deployment.name)
    role, replicas, prefill = fleet_roles(args, chosen, base, stack.display_file, aggregated)
    replica, settings = role.replica, role.settings
    requests, label, rate = build_workload(args, replica, deployment, replicas, spec.gateway.admission)
    if not requests:
        raise SimulationError(f"--workload {args.workload}: no request to send")
    envoy = gr.find_envoy(args.envoy, environ, project_dir)
    simulator = fl.find_simulator(environ, project_dir)
    missing = gr.missing_processor_modules()
    if missing:
        raise SimulationError(
            f"the processor cannot start here: {', '.join(missing)} missing; pip install 'inferplane[gateway-local]'",
            EXIT_FAILED,
        )
    gr.local_redis_binaries()
    gr.local_ports()  # a malformed range is refused before anything starts
    return SimulationPlan(
        stack=args.stack,
        display_file=stack.display_file,
        spec=spec,
        sizing=sizing,
        deployment=deployment,
        deployment_sizing=deployment_sizing,
        replica=replica,
        settings=settings,
        cluster=gc.cluster_of(spec, deployment),
        replicas=replicas,
        gateways=args.gateway_replicas or 1,
        routing=policy,
        workload=requests,
        workload_label=label,
        rate=rate,
        rate_limits_lifted=not args.keep_rate_limits,
        served_disaggregated=chosen.disaggregation is not None,
        prefill=prefill,
        envoy=envoy,
        envoy_version=gr.envoy_version(envoy),
        simulator=simulator,
    )


def tenant_for(spec: PlatformSpec, model: str) -> str | None:
    """A tenant whose tiers reach ``model`` (as a primary or a fallback); None when none does."""
    reaching = {t.name for t in gateway_tiers(spec) if model in (*t.models, *t.fallback)}
    return next((t.name for t in spec.gateway.tenants if reaching.intersection(t.tiers)), None)


# --- a run ----------------------------------------------------------------------------------------------------------


class HeldSampler:
    """Reads each engine's running + waiting requests from its ``/metrics`` every ``seconds`` in a thread; the most
    seen."""

    def __init__(self, urls: Sequence[str], series: fl.MockerSeries, seconds: float = SAMPLE_SECONDS) -> None:
        self.urls = urls
        self.series = series
        self.seconds = seconds
        self.most = [0] * len(urls)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="held-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            for i, url in enumerate(self.urls):
                body = fl._get(url, timeout=1.0)
                if body is not None:
                    held = fl.parse_metric(body, self.series.running) + fl.parse_metric(body, self.series.waiting)
                    self.most[i] = max(self.most[i], int(held))

    def __enter__(self) -> HeldSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def counters(urls: Sequence[str], series: fl.MockerSeries) -> tuple[list[int], int]:
    """Each engine's finished requests and all engines' preemptions, now, from their ``/metrics`` at ``urls``
    (absent series: 0)."""
    finished, preemptions = [], 0
    for url in urls:
        text = fl._get(url) or b""
        finished.append(int(fl.parse_metric(text, series.finished)))
        if series.preemptions is not None:
            preemptions += int(fl.parse_metric(text, series.preemptions))
    return finished, preemptions


def _ms(values: Sequence[float]) -> Percentiles:
    if not values:
        return Percentiles(p50=None, p90=None, p95=None, p99=None)
    return Percentiles(
        p50=percentile(values, 50) * 1000,
        p90=percentile(values, 90) * 1000,
        p95=percentile(values, 95) * 1000,
        p99=percentile(values, 99) * 1000,
    )


def routing_decisions(urls: Sequence[str]) -> dict[str, int]:
    """The gateways' routing decisions so far, by reason, summed over the processors at ``urls``."""
    decisions: dict[str, int] = {}
    for url in urls:
        body = fl._get(url) or b""
        for line in body.decode(errors="replace").splitlines():
            if line.startswith(ROUTING_DECISIONS_TOTAL + "{") and 'reason="' in line:
                reason = line.split('reason="', 1)[1].split('"', 1)[0]
                decisions[reason] = decisions.get(reason, 0) + round(float(line.rsplit(" ", 1)[1]))
    return decisions


def result_of(
    plan: SimulationPlan,
    outcomes: Sequence[Outcome],
    *,
    finished: Sequence[int],
    preemptions: int,
    most_held: Sequence[int],
    decisions: Mapping[str, int],
    prefilled: int = 0,
) -> SimulationResult:
    """What the run measured, against the model's ``slo`` and the plan's price (the prefill workers' too)."""
    summary = summarize(outcomes)
    served = [o for o in outcomes if 200 <= o.status < 300]
    ttft = _ms([o.ttft_s for o in served if o.ttft_s is not None])
    itl = _ms([gap for o in served for gap in o.itl_s])
    slo = plan.deployment.slo
    held = (
        summary.ok == len(outcomes)
        and ttft.p95 is not None
        and ttft.p95 <= slo.ttft_p95_ms
        and (itl.p95 is None or itl.p95 <= slo.itl_p95_ms)
    )
    prefill = plan.prefill
    fleet_price: float | None = 0.0
    roles = [(plan.deployment_sizing, plan.replicas)] + (
        [] if prefill is None else [(prefill.role.sizing, prefill.count)]
    )
    for role, count in roles:
        price = role.replica_hourly_usd
        fleet_price = None if fleet_price is None or price is None else fleet_price + price * count
    tokens_per_second = summary.output_tokens_per_second or 0.0
    tokens_per_hour = tokens_per_second * 3600
    usd = fleet_price / tokens_per_hour * 1e6 if fleet_price is not None and tokens_per_hour > 0 else None
    return SimulationResult(
        fleet="simulated (NVIDIA Dynamo mocker engines timed by the performance model; not a GPU)",
        stack=plan.stack,
        model=plan.deployment.name,
        replicas=plan.replicas,
        gateways=plan.gateways,
        routing=plan.routing,
        workload=plan.workload_label,
        rate=plan.rate,
        requests=len(outcomes),
        ok=summary.ok,
        rejected_429=summary.rejected_429,
        failed=summary.errors,
        ttft_ms=ttft,
        itl_ms=itl,
        output_tokens_per_second=tokens_per_second,
        hit_share=summary.hit_share if plan.settings.engine_type in CACHED_TOKENS_REPORTED else None,
        ideal_hit_share=ideal_hit_share(plan.workload, plan.settings.block_size),
        preemptions=preemptions,
        requests_per_replica=tuple(finished),
        most_held=tuple(most_held),
        max_num_seqs=plan.settings.max_num_seqs,
        routing_decisions=dict(decisions),
        slo_ttft_p95_ms=slo.ttft_p95_ms,
        slo_itl_p95_ms=slo.itl_p95_ms,
        slo_held=held,
        usd_per_million_output_tokens=usd,
        rate_limits_lifted=plan.rate_limits_lifted,
        served_disaggregated=plan.served_disaggregated,
        serving="aggregated" if prefill is None else "disaggregated",
        prefill_replicas=0 if prefill is None else prefill.count,
        prefilled=prefilled,
        transfer_gbps=None if prefill is None else prefill.transfer_gbps,
        duration_s=summary.duration_s,
    )


class SimulationRun:
    """One run in ``directory``: the fleet, Redis, the gateways, the replay."""

    def __init__(self, plan: SimulationPlan, directory: Path, stop: threading.Event, err: Console) -> None:
        self.plan = plan
        self.directory = directory
        self.stop = stop
        self.err = err
        self.processor_metrics: list[str] = []

    def say(self, text: str) -> None:
        """A progress line on stderr."""
        gr._say(self.err, f"{COMMAND}: {text}")

    def start_fleet(self, procs: gr.Processes) -> fl.SimulatedFleet | None:
        """The model directory, the profile and the replicas."""
        plan = self.plan
        tokenizers = self.directory / "tokenizers"
        repo = gc.tokenizer_file(plan.deployment).removesuffix("/tokenizer.json")
        model_dir = write_model_dir(
            tokenizers, repo, plan.deployment.architecture_resolved, plan.settings.max_model_len
        )
        profile = write_profile(
            timing_profile(plan.replica, plan.settings.max_model_len), self.directory / "profile.npz"
        )
        prefill = None
        if plan.prefill is not None:
            role = plan.prefill.role
            prefill = fl.PrefillWorkers(
                settings=role.settings,
                profile=write_profile(
                    timing_profile(role.replica, role.settings.max_model_len), self.directory / "prefill-profile.npz"
                ),
                count=plan.prefill.count,
                transfer_gbps=plan.prefill.transfer_gbps,
            )
        fleet = fl.SimulatedFleet(
            python=plan.simulator,
            settings=plan.settings,
            model_dir=model_dir,
            profile=profile,
            replicas=plan.replicas,
            directory=self.directory / "fleet",
            procs=procs,
            stop=self.stop,
            prefill=prefill,
        )
        started = time.monotonic()
        if not fleet.start():
            return None
        summary = fl.fleet_args_summary(plan.settings, fleet.replicas, prefill)
        self.say(f"{summary} ready in {time.monotonic() - started:.0f} s")
        return fleet

    def start_gateways(self, procs: gr.Processes, fleet: fl.SimulatedFleet) -> tuple[list[str], str | None] | None:
        """K gateways sharing one Redis and one set of keys; their base URLs and the key requests use."""
        plan = self.plan
        taken: set[int] = set()
        redis_url = gr.start_redis(procs, self.directory, taken)
        if redis_url is None:
            return None
        upstreams: dict[str, tuple[gr.Upstream, ...]] = dict.fromkeys(gr.gateway_models(plan.spec, plan.cluster), ())
        upstreams[plan.deployment.name] = tuple(
            gr.Upstream(model=plan.deployment.name, host=r.host, port=r.port) for r in fleet.replicas
        )
        run_plan = gr.RunPlan(
            stack=plan.stack,
            spec=local_providers(plan.spec, (), (), None).spec,  # the simulated fleet alone: no hosted provider
            sizing=plan.sizing,
            cluster=plan.cluster,
            upstreams=upstreams,
            redis_url=redis_url,
            envoy=plan.envoy,
            envoy_version=plan.envoy_version,
            tokenizer_roots=(self.directory / "tokenizers",),
        )
        keys: dict[str, str] | None = None
        urls = []
        waits: list[Callable[[], bool]] = []
        with socket.socket() as closed:
            closed.bind((gr.LISTEN_HOST, gr.pick_ports(1, taken)))
            for k in range(plan.gateways):
                directory = self.directory / f"gateway-{k}"
                directory.mkdir(mode=0o700)
                ports = gr.LocalPorts(
                    api=gr.pick_ports(1, taken),
                    stats=gr.pick_ports(1, taken),
                    admin=gr.pick_ports(1, taken),
                    processor=gr.pick_ports(plan.spec.gateway.processor_workers, taken),
                    processor_metrics=gr.pick_ports(1, taken),
                    closed=closed.getsockname()[1],
                )
                gr.link_tokenizers(run_plan, directory / "tokenizers")
                rendered = gr.render_local(run_plan, ports, directory)
                keys = gr.write_run_files(rendered, directory, keys)
                # All start before any is waited for: each costs a second or more of CPU to come up.
                waits.append(gr.launch_gateway(procs, run_plan, rendered, directory, redis_url, suffix=f"-{k}"))
                urls.append(f"http://{gr.LISTEN_HOST}:{ports.api}")
                self.processor_metrics.append(f"http://{gr.LISTEN_HOST}:{ports.processor_metrics}/metrics")
        if not all(wait() for wait in waits):
            return None
        tenant = tenant_for(plan.spec, plan.deployment.name)
        key = keys.get(tenant) if keys and tenant else None
        if keys and key is None:
            raise SimulationError(f"{plan.display_file}: no tenant of the gateway may call {plan.deployment.name}")
        self.say(f"{plan.gateways} gateway(s) ready ({plan.routing} routing)")
        return urls, key

    def replay(self, urls: Sequence[str], key: str | None, progress: Progress | None) -> list[Outcome]:
        """The workload, request i through gateway i mod K, all on one clock."""
        plan = self.plan
        task = progress.add_task("requests", total=len(plan.workload)) if progress is not None else None

        def done(_: Outcome) -> None:
            if progress is not None and task is not None:
                progress.advance(task)

        async def all_gateways() -> list[Outcome]:
            shares = [plan.workload[k :: len(urls)] for k in range(len(urls))]
            runs = [
                replay(
                    share,
                    base_url=url,
                    model=plan.deployment.name,
                    api_key=key,
                    on_done=done,
                    headers=CACHE_HEADER,
                )
                for share, url in zip(shares, urls, strict=True)
            ]
            results = await asyncio.gather(*runs)
            ordered: list[Outcome] = []
            for i in range(len(plan.workload)):
                ordered.append(results[i % len(urls)][i // len(urls)])
            return ordered

        return asyncio.run(all_gateways())

    def run(self, progress: Progress | None) -> SimulationResult | None:
        """Start everything, replay, measure, stop everything (None when a stop was asked)."""
        logs = self.directory / "logs"
        logs.mkdir(mode=0o700)
        procs = gr.Processes(logs, self.stop)
        try:
            fleet = self.start_fleet(procs)
            if fleet is None:
                return None
            gateways = self.start_gateways(procs, fleet)
            if gateways is None:
                return None
            urls, key = gateways
            engines = [f"{r.url}/metrics" for r in fleet.replicas]
            series = fl.MOCKER_SERIES[fleet.settings.engine_type]
            prefill_workers = [url for urls in fleet.prefill_metrics.values() for url in urls]
            before, preempted = counters(engines, series)
            prefilled = sum(fl.generate_requests(prefill_workers))
            with HeldSampler(engines, series) as sampler:
                outcomes = self.replay(urls, key, progress)
            gone = procs.exited()
            if gone is not None:
                raise SimulationError(
                    f"{gone[0]} exited with status {gone[1]} during the run; the end of its log:\n"
                    f"{procs.log_tail(gone[0])}",
                    EXIT_FAILED,
                )
            after, preempted_after = counters(engines, series)
            prefilled = sum(fl.generate_requests(prefill_workers)) - prefilled
            finished = [a - b for a, b in zip(after, before, strict=True)]
            decisions = routing_decisions(self.processor_metrics)
            return result_of(
                self.plan,
                outcomes,
                finished=finished,
                preemptions=preempted_after - preempted,
                most_held=sampler.most,
                decisions=decisions,
                prefilled=prefilled,
            )
        finally:
            procs.stop_all()


# --- output -----------------------------------------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def report_lines(result: SimulationResult) -> list[str]:
    """The human-readable report."""
    t, i = result.ttft_ms, result.itl_ms
    verdict = "held" if result.slo_held else "NOT held"
    usd = result.usd_per_million_output_tokens
    lines = [
        f"{result.model} on {result.replicas} simulated replicas behind {result.gateways} gateway(s), "
        f"{result.routing}; {result.workload}",
        f"fleet: {result.fleet}",
        f"requests {result.requests}: {result.ok} served, {result.rejected_429} answered 429, {result.failed} failed",
        f"TTFT ms  p50 {_fmt(t.p50)}  p90 {_fmt(t.p90)}  p95 {_fmt(t.p95)}  p99 {_fmt(t.p99)}",
        f"ITL ms   p50 {_fmt(i.p50)}  p90 {_fmt(i.p90)}  p95 {_fmt(i.p95)}  p99 {_fmt(i.p99)}",
        f"output tokens/s {result.output_tokens_per_second:.0f}; prefix hits "
        + ("not reported by the simulated engine" if result.hit_share is None else f"{result.hit_share:.1%}")
        + f" of prompt tokens (ideal {result.ideal_hit_share:.1%}); preemptions {result.preemptions}",
        f"requests per replica {list(result.requests_per_replica)}; most held at once {list(result.most_held)} "
        f"(max_num_seqs {result.max_num_seqs})",
        "routing decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(result.routing_decisions.items()) if v),
        f"SLO (TTFT p95 <= {result.slo_ttft_p95_ms} ms, ITL p95 <= {result.slo_itl_p95_ms} ms, all served): {verdict}",
        "$ per million output tokens: " + ("-" if usd is None else f"{usd:.2f}"),
    ]
    if result.rate_limits_lifted:
        lines.append("note: the tenants' rate limits were lifted for the run (--keep-rate-limits keeps them)")
    if result.serving == "disaggregated":
        lines.append(
            f"disaggregated: {result.prefill_replicas} prefill workers computed {result.prefilled} prompts, the KV "
            f"moved at {result.transfer_gbps:g} GB/s; each replica's frontend picks among the prefill workers in its "
            "namespace (the gateway picks the decode replica; its own prefill step speaks vLLM's proxy protocol, "
            "which the mockers do not)"
        )
    elif result.served_disaggregated:
        lines.append(
            f"note: the stack serves {result.model} disaggregated; this run simulated it aggregated on its decode "
            "role's pool, size and replicas (--serving aggregated)"
        )
    return lines


def simulate_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``inferplane simulate``: check the input, run in a private temporary directory (removed whatever happens)."""
    # httpx logs every request at INFO once anything configures logging (the processor's modules do): thousands of
    # lines a run, each costing the load generator's core.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with gr.stop_on_signals() as stop:
        try:
            plan = plan_simulation(args, os.environ)
            directory = Path(tempfile.mkdtemp(prefix="inferplane-simulate-"))
            try:
                run = SimulationRun(plan, directory, stop, err)
                show = err.is_terminal and not args.json
                columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
                progress = Progress(*columns, console=err, transient=True) if show else None
                with progress if progress is not None else contextlib.nullcontext():
                    result = run.run(progress)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        except gr.GatewayRunError as error:
            gr._say(err, f"{COMMAND}: {error}")
            return error.code
    if result is None:
        return EXIT_OK
    if args.json:
        out.print_json(json.dumps(result.model_dump(mode="json")))
    else:
        for line in report_lines(result):
            gr._say(out, line)
    return EXIT_OK if result.slo_held else EXIT_REFUSED
