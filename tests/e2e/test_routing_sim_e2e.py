"""Routing at more than three replicas, end to end at GPU speed: the dev stack's gateway (real Envoy 1.40, the
processor, Redis 8.2), three of it sharing one Redis, in front of a **simulated fleet of 8** replicas of its model
(NVIDIA Dynamo's mocker engines with the engine settings sizing renders and the performance model's timings: 4 batch
slots, 16-token blocks, an L4's prefill and decode), started exactly as ``inferplane simulate`` starts them.

Which replica served a request is read from the engines' own counters (``vllm:e2e_request_latency_seconds_count`` per
replica, before and after); what a replica held at once from its ``vllm:num_requests_running`` and
``vllm:num_requests_waiting``. The real-vLLM routing E2E (tests/e2e/test_routing_e2e.py) stays for compatibility with
the real engine; this one checks behaviour where a slot frees every few milliseconds, as on a GPU. The tests run in
file order on one worker: the destructive one (a replica killed) last.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from inferplane.tool import gateway_run as gr
from inferplane.tool.simulate import command as sim
from inferplane.tool.simulate import fleet as fl
from inferplane.tool.simulate.arguments import simulate_args
from inferplane.tool.simulate.workload import words
from tests.conftest import PROJECT_DIR
from tests.tool.simulate.simulator import simulator_python

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("simulated-fleet")]

REPLICAS = 8
GATEWAYS = 3
PREFIX_TOKENS = 1024
"""A prefix of 64 blocks: prefilling it costs the L4 about 0.3 s, reusing it a few ms."""


@dataclass
class SimPlatform:
    """The running fleet and gateways."""

    plan: sim.SimulationPlan
    fleet: fl.SimulatedFleet
    urls: list[str]
    key: str | None
    procs: gr.Processes

    def finished(self) -> list[int]:
        """Requests each replica's engine has finished so far."""
        return [
            int(fl.parse_metric(body or b"", fl.MOCKER_SERIES["vllm"].finished))
            for body in self.fleet.metrics().values()
        ]

    def chat(self, gateway: int, prompt: str, max_tokens: int = 4) -> httpx.Response:
        """One non-streamed chat completion through gateway ``gateway``."""
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        return httpx.post(
            f"{self.urls[gateway]}/v1/chat/completions",
            json={
                "model": self.plan.deployment.name,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens,
                "ignore_eos": True,
            },
            headers={**headers, **sim.CACHE_HEADER},
            timeout=120,
        )

    def served_by(self, gateway: int, prompt: str) -> int:
        """Send one request alone and return the replica whose engine finished it."""
        before = self.finished()
        response = self.chat(gateway, prompt)
        assert response.status_code == 200, response.text
        after = self.finished()
        moved = [i for i, (a, b) in enumerate(zip(after, before, strict=True)) if a != b]
        assert len(moved) == 1, f"one request, engines' counts moved at {moved}"
        return moved[0]


def _prefix() -> list[int]:
    rng = secrets.SystemRandom()
    return [rng.randrange(30000) for _ in range(PREFIX_TOKENS)]


def _prompt(prefix: list[int], question: int) -> str:
    return words([*prefix, 29000 + question, 29100 + question])


@pytest.fixture(scope="module")
def platform() -> Iterator[SimPlatform]:
    simulator_python()  # skip, naming `make simulator`, where it is not installed
    args = simulate_args(
        [
            *("--stack", "dev", "--replicas", str(REPLICAS), "--gateway-replicas", str(GATEWAYS)),
            *("--workload", "unique", "--rate", "1", "--duration", "1", "--project-dir", str(PROJECT_DIR)),
        ]
    )
    plan = sim.plan_simulation(args, {})
    directory = Path(tempfile.mkdtemp(prefix="inferplane-sim-e2e-"))
    stop = threading.Event()
    (directory / "logs").mkdir()
    procs = gr.Processes(directory / "logs", stop)
    run = sim.SimulationRun(plan, directory, stop, Console(stderr=True))
    try:
        fleet = run.start_fleet(procs)
        assert fleet is not None
        gateways = run.start_gateways(procs, fleet)
        assert gateways is not None
        urls, key = gateways
        yield SimPlatform(plan=plan, fleet=fleet, urls=urls, key=key, procs=procs)
    finally:
        procs.stop_all()
        shutil.rmtree(directory, ignore_errors=True)


def test_the_fleet_runs_sizings_engine(platform: SimPlatform) -> None:
    settings = platform.plan.settings
    assert (settings.max_num_seqs, settings.block_size, settings.engine_type) == (4, 16, "vllm")
    assert len(platform.fleet.replicas) == REPLICAS
    assert len({r.host for r in platform.fleet.replicas}) == REPLICAS, "a loopback address per replica, as pods"


def test_a_prefix_stays_on_its_replica_while_it_has_room(platform: SimPlatform) -> None:
    for _ in range(4):
        prefix = _prefix()
        homes = {platform.served_by(0, _prompt(prefix, q)) for q in range(4)}
        assert len(homes) == 1, f"one prefix, served by replicas {sorted(homes)}"


def test_gateways_agree_on_a_prefixs_home(platform: SimPlatform) -> None:
    for _ in range(4):
        prefix = _prefix()
        homes = [platform.served_by(g % GATEWAYS, _prompt(prefix, g)) for g in range(2 * GATEWAYS)]
        assert len(set(homes)) == 1, f"gateways 0, 1, 2, 0, 1, 2 sent one prefix to replicas {homes}"


def test_a_full_home_spills_and_no_engine_exceeds_its_slots(platform: SimPlatform) -> None:
    slots = platform.plan.settings.max_num_seqs
    prefix = _prefix()
    home = platform.served_by(0, _prompt(prefix, 0))
    before = platform.finished()
    extra = 2 * slots
    with (
        sim.HeldSampler([f"{r.url}/metrics" for r in platform.fleet.replicas], fl.MOCKER_SERIES["vllm"]) as sampler,
        ThreadPoolExecutor(slots + extra) as pool,
    ):
        # Long outputs (the L4's 4-sequence decode step is about 75 ms: several seconds) keep the home's slots busy
        # while the rest arrive.
        futures = [
            pool.submit(platform.chat, i % GATEWAYS, _prompt(prefix, 100 + i), 100) for i in range(slots + extra)
        ]
        statuses = [f.result().status_code for f in futures]
    assert statuses == [200] * (slots + extra)
    after = platform.finished()
    counts = [a - b for a, b in zip(after, before, strict=True)]
    assert counts[home] >= slots, f"the home replica {home} served {counts[home]} of {counts}"
    assert sum(counts) - counts[home] > 0, f"nothing spilled from the full home {home}: {counts}"
    assert max(sampler.most) <= slots, f"an engine held more than its {slots} slots: {sampler.most}"


def test_a_lost_replica_is_routed_around(platform: SimPlatform) -> None:
    prefix = _prefix()
    home = platform.served_by(0, _prompt(prefix, 0))
    platform.fleet.kill(home)
    for gateway in range(GATEWAYS):
        response = platform.chat(gateway, _prompt(prefix, 1 + gateway))
        assert response.status_code == 200, response.text
