"""The served embedder with vLLM's worker process and without it (``IN_PROCESS_WORKER_ENV``), side by side.

vLLM 0.32 on CPU computes the model in a worker process beside its engine core unless
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, and the two pass every step through a shared-memory queue whose reader spins
for a second after each read. ``EmbedderService`` turns the worker process off; this measures why. Each mode starts
vLLM's CPU build with ``EmbedderService``'s own arguments and environment for the prod stack's sizing (the worker
process put back for the first mode), then sends the same requests: ``--requests`` embeddings one at a time and eight
at a time, and a steady trickle of 2 a second for ``--trickle-seconds`` (what a HorizontalPodAutoscaler on CPU sees).
Printed per mode: seconds to ``/health`` and the CPU it took, embeddings a second and the pod's CPU (the server
and its descendants: ``cpu_seconds``) in percent of a core, and the resident memory measured as the catalog
measures it (``served_memory_bytes``: float32, after 640 of the shipped prompts in batches of 64, before the other
loads).

Usage: ``.venv/bin/python benchmarks/embedder_process.py [--requests 400] [--trickle-seconds 20]``. Needs
``make vllm-cpu references`` (the vLLM CPU venv and the unpacked all-MiniLM-L6-v2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from inferplane.components.capacity.embedder import EmbedderSizing  # noqa: E402
from inferplane.components.capacity.sizing import size_platform  # noqa: E402
from inferplane.components.serving.embedder_service import IN_PROCESS_WORKER_ENV  # noqa: E402
from inferplane.tool.cache_eval import load_pairs  # noqa: E402
from inferplane.tool.stackfile import load_stack  # noqa: E402
from tests import gateway_support  # noqa: E402
from tests.gateway_support import cpu_seconds  # noqa: E402

MODES = ("worker process", "in-process")
BATCHES = (10, 64)
"""The catalog's memory measurement: 10 requests of 64 of the shipped prompts each (``cache eval``'s labelled set)."""
TRICKLE_PER_SECOND = 2.0


@dataclass(frozen=True)
class Row:
    """One mode's figures."""

    mode: str
    start_seconds: float
    start_cpu_seconds: float
    rates: tuple[tuple[str, float, float], ...]
    """(load, embeddings a second, percent of a core)."""
    resident_mib: float
    """Every process of the server together after :data:`BATCHES` of the shipped prompts."""


def _resident_mib(pid: int) -> float:
    """Resident memory of every process of ``pid``'s session (the server's: vLLM's API server, engine core and the
    processes they start)."""
    pages = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[3]) == pid:
            pages += int(fields[21])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _embed(port: int, model: str) -> Callable[[str | list[str]], None]:
    def one(text: str | list[str]) -> None:
        body = json.dumps({"model": model, "input": text}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/embeddings", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    return one


def _burst(embed: Callable[[str | list[str]], None], texts: list[str], concurrency: int) -> float:
    """Seconds for every text, ``concurrency`` at a time."""
    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(embed, texts))
    return time.monotonic() - started


def _trickle(embed: Callable[[str | list[str]], None], texts: list[str], seconds: float) -> float:
    """Seconds for :data:`TRICKLE_PER_SECOND` embeddings a second over ``seconds``, each at its time."""
    started = time.monotonic()
    for index in range(int(seconds * TRICKLE_PER_SECOND)):
        embed(texts[index % len(texts)])
        time.sleep(max(0.0, started + (index + 1) / TRICKLE_PER_SECOND - time.monotonic()))
    return time.monotonic() - started


def _start(procs: gateway_support.Procs, sizing: EmbedderSizing, mode: str) -> int:
    """vLLM's CPU build as ``EmbedderService`` runs it, the worker process put back (vLLM's default, ``1``) in that
    mode. Returns its port once it answers."""
    worker = dict.fromkeys(IN_PROCESS_WORKER_ENV, "1") if mode == "worker process" else {}
    port = gateway_support.start_vllm_embedder(procs, "embedder", sizing, env=worker)
    return gateway_support.wait_vllm(procs, "embedder", port)


def _measure(mode: str, sizing: EmbedderSizing, texts: list[str], trickle_seconds: float) -> Row:
    """Start the embedder in ``mode``, load it, stop it."""
    procs = gateway_support.Procs(Path(tempfile.mkdtemp(prefix="embedder-process-")))
    try:
        started = time.monotonic()
        port = _start(procs, sizing, mode)
        pid = procs.procs["embedder"].pid
        start_seconds, start_cpu = time.monotonic() - started, cpu_seconds(pid)
        embed = _embed(port, sizing.model)
        count, size = BATCHES
        prompts = [text for pair in load_pairs(None)[1] for text in (pair.a, pair.b)][: count * size]
        for start in range(0, len(prompts), size):
            embed(prompts[start : start + size])
        resident = _resident_mib(pid)
        loads: tuple[tuple[str, Callable[[], float], int], ...] = (
            ("one at a time", lambda: _burst(embed, texts, 1), len(texts)),
            ("eight at a time", lambda: _burst(embed, texts, 8), len(texts)),
            (
                f"{TRICKLE_PER_SECOND:g} a second",
                lambda: _trickle(embed, texts, trickle_seconds),
                int(trickle_seconds * TRICKLE_PER_SECOND),
            ),
        )
        rates = []
        for label, run, done in loads:
            before = cpu_seconds(pid)
            seconds = run()
            rates.append((label, done / seconds, 100 * (cpu_seconds(pid) - before) / seconds))
        return Row(mode, start_seconds, start_cpu, tuple(rates), resident)
    finally:
        procs.stop_all()


def _print(rows: list[Row]) -> None:
    print(
        "| mode | to /health | its CPU | "
        + " | ".join(f"{r[0]}: per s, % of a core" for r in rows[0].rates)
        + f" | RSS after {BATCHES[0]} x {BATCHES[1]} prompts |"
    )
    print("|---" * (4 + len(rows[0].rates)) + "|")
    for row in rows:
        cells = " | ".join(f"{rate:.0f}/s, {cpu:.0f}%" for _, rate, cpu in row.rates)
        print(
            f"| {row.mode} | {row.start_seconds:.1f} s | {row.start_cpu_seconds:.1f} s | {cells} "
            f"| {row.resident_mib:,.0f} MiB |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="embeddings in each burst")
    parser.add_argument("--trickle-seconds", type=float, default=20.0, help="seconds of 2 embeddings a second")
    args = parser.parse_args()
    sizing = size_platform(load_stack(PROJECT, "prod").platform).embedder
    if sizing is None:
        raise SystemExit("the prod stack serves no embedder")
    if not (gateway_support.EMBEDDER_DIR / "model.safetensors").is_file():
        raise SystemExit(gateway_support.EMBEDDER_MISSING)
    texts = [
        f"what is the capital of country number {i} and why does it matter for question {i * 7}"
        for i in range(args.requests)
    ]
    print(f"{sizing.model}, {sizing.cpus} CPU (OpenMP threads), {args.requests} embeddings a burst")
    _print([_measure(mode, sizing, texts, args.trickle_seconds) for mode in MODES])


if __name__ == "__main__":
    main()
