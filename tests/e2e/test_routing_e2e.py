"""Routing to replicas end to end: Envoy 1.40 running the rendered bootstrap (override_host over the model's replicas),
the real processor, Redis 8.2 and **three** vLLM 0.32 CPU replicas of one model, driven by the ``openai`` client.

Gateways A and B are two replicas of the same gateway (shared Redis, each its own prefix index); gateway C is the
same gateway with its processor unable to read any replica's metrics, so it never picks (Envoy's least-request
fallback does). Which replica served a request is read from each vLLM's own access log and metrics.

The replicas are the run's fleet's three completion servers (tests/fleet.py), each serving the model too, each
reached at its own port (the killed-replica test reaches them through relays of its own and kills the relay of the
prefix's replica; the server lives on). The fleet's engines log every request as it reaches the engine and as its
output comes back: the spill test counts from those logs what each engine held at once. The tests run in file order
on one worker: the destructive ones (a replica paused, one's relay killed) last.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.components.observability import metrics as engine_metrics
from inferplane.processor import metrics as gm
from tests.fleet import Fleet, FleetServer, check_fits, tokenizers_dir
from tests.gateway_support import (
    Gateway,
    Procs,
    Relay,
    gateway_addresses,
    gateway_metric,
    most_at_once,
    scrape,
    start_gateway,
    start_redis,
)
from tests.tiny_model import tiny_platform

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("vllm-fleet")]

MODEL = "delta"
REPLICAS = ("r0", "r1", "r2")
REPLICA_SERVERS = ("vllm-alpha", "vllm-beta", "vllm-tiny")
"""The fleet's server behind each replica (each serves :data:`MODEL` too, see tests/fleet.py)."""
LONG_GENERATION_TOKENS = 1_500
"""Tokens a long request generates (``ignore_eos``): long enough on the tiny model that requests sent together all
run together (600 took about a second on a warm engine: requests sent together ran one after another)."""

QUEUE_TIMEOUT_SECONDS = 60.0
"""The gateways' queue timeout in this module: the spec's longest (the spill test's last requests queue behind the
first twelve's long generations on a busy 2-core machine)."""
SLOT_STORE_TIMEOUT_SECONDS = 5.0
"""The processors' wait for the shared slots in this module (the config's ceiling; see the fixture)."""


def _spec() -> Any:
    return tiny_platform(
        [{"name": MODEL, "routing_tier": "standard"}],
        {
            "replicas": 2,
            "tenants": [{"name": "team-a", "tiers": ["standard"], "requests_per_minute": 10_000}],
            "admission": {"queue_max": 4, "queue_timeout_seconds": QUEUE_TIMEOUT_SECONDS},
        },
    )


@dataclass
class Platform:
    """Everything the tests talk to."""

    procs: Procs
    gateways: dict[str, Gateway]
    key: str
    servers: dict[str, FleetServer]
    """The fleet's server behind each replica name."""
    gateway_to: Callable[[str, dict[str, int]], Gateway]
    """Start one more gateway of the module's (name, each replica's port): the killed-replica test's, through relays."""
    max_num_seqs: int

    def client(self, gateway: str = "a") -> openai.OpenAI:
        """An OpenAI client of ``gateway``, no client retries (a failure must surface)."""
        return openai.OpenAI(base_url=self.gateways[gateway].base_url, api_key=self.key, max_retries=0)

    def posts(self) -> dict[str, int]:
        """Completion requests each replica has received so far (its server's access log)."""
        return {r: self.servers[r].posts() for r in REPLICAS}


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory, fleet: Fleet) -> Iterator[Platform]:
    directory = tmp_path_factory.mktemp("routing-e2e")
    procs = Procs(directory)
    spec = _spec()
    plan = size_platform(spec)
    settings = plan.deployments[0].result.vllm
    check_fits(settings.max_model_len, settings.max_num_seqs, MODEL)
    servers = {r: fleet[server] for r, server in zip(REPLICAS, REPLICA_SERVERS, strict=True)}
    assert all(MODEL in server.args for server in servers.values()), "a fleet server does not serve the model"
    key = secrets.token_urlsafe(32)
    keys_dir = directory / "keys"
    keys_dir.mkdir()
    (keys_dir / gc.API_KEYS_FILE).write_text(gc.render_api_key_file({"team-a": key}))
    try:
        redis_url = f"redis://127.0.0.1:{start_redis(procs)}/0"

        def patch(name: str, config: dict[str, Any]) -> None:
            # The CPU engines decoding saturate both cores: a processor's event loop can stall past the 0.5 s a
            # gateway pod gets for the shared slots, three times in a row, and fall back to its fixed share (seen in
            # one of four runs). The spill test asserts the shared slots decided every request, so they get the
            # longest wait the config allows.
            config["slot_store_timeout_seconds"] = SLOT_STORE_TIMEOUT_SECONDS
            if name == "c":
                for model in config["models"]:
                    model["metrics_path"] = "/no-such-metrics"  # no replica ever reads as ready: no pick

        def gateway_to(name: str, ports: dict[str, int]) -> Gateway:
            upstreams = {MODEL: [("127.0.0.1", ports[r]) for r in REPLICAS]}
            return start_gateway(
                procs,
                f"gw-{name}",
                spec=spec,
                plan=plan,
                addresses=gateway_addresses(upstreams, keys_dir, tokenizers_dir(fleet), f"-{name}"),
                redis_url=redis_url,
                processor_patch=functools.partial(patch, name),
            )

        # The servers' own ports: a relay in the path (threads of the test process) slowed every byte on a loaded
        # machine, so Envoy saw resets and retried long requests while their first attempt still ran (an engine at 5
        # or 6), and a paused server's neighbours' scrapes timed out (0 ready).
        direct = {r: server.port for r, server in servers.items()}
        gateways = {name: gateway_to(name, direct) for name in ("a", "b", "c")}
        yield Platform(procs, gateways, key, servers, gateway_to, settings.max_num_seqs)
    finally:
        procs.stop_all()


def _wait_metric(gateway: Gateway, name: str, expected: float, timeout: float = 10.0, **labels: str) -> None:
    deadline = time.monotonic() + timeout
    while (value := gateway_metric(gateway, name, **labels)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert value == expected, f"{name}{labels} = {value}, expected {expected}"


def _prefix(group: int) -> str:
    """A long shared context (about 300 tokens) that only ``group`` uses."""
    return " ".join(f"w{(group * 37 + i) % 400}" for i in range(300))


def _ask(client: openai.OpenAI, prefix: str, question: int, **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": prefix}, {"role": "user", "content": f"w{question} w{question + 1}"}],
        **{"max_tokens": 4, **kwargs},
    )


def _served_by(platform: Platform, send: Any) -> dict[str, int]:
    """Which replicas ``send()`` reached, and how often."""
    before = platform.posts()
    send()
    after = platform.posts()
    return {r: after[r] - before[r] for r in after if after[r] != before[r]}


def test_every_gateway_sees_every_replica_ready(platform: Platform) -> None:
    for name in ("a", "b"):
        _wait_metric(platform.gateways[name], gm.READY_ENDPOINTS, 3, model=MODEL)
        _wait_metric(platform.gateways[name], gm.ADMISSION_CAPACITY, 3 * platform.max_num_seqs, model=MODEL)


def test_requests_sharing_a_prefix_stay_on_one_replica(platform: Platform) -> None:
    client = platform.client("a")
    served = _served_by(platform, lambda: [_ask(client, _prefix(1), q) for q in range(6)])
    assert list(served.values()) == [6]
    assert gateway_metric(platform.gateways["a"], gm.ROUTING_DECISIONS_TOTAL, model=MODEL, reason="prefix_hit") >= 5


def test_every_vllm_series_the_plans_and_the_router_read_is_exposed(platform: Platform) -> None:
    """The names in components/observability/metrics.py (alerts, dashboards, KEDA, the router's load and the
    prefix-cache hit rate) against a real vLLM 0.32 replica's exposition, after it served requests."""
    exposed = {name.partition("{")[0] for name in scrape(f"http://127.0.0.1:{platform.servers['r0'].port}/metrics")}
    wanted = {
        value
        for key, value in vars(engine_metrics).items()
        if key.startswith("VLLM_") and isinstance(value, str) and value.startswith("vllm:")
    }
    assert len(wanted) >= 10
    missing = {name for name in wanted if name not in exposed and f"{name}_bucket" not in exposed}
    # A host KV tier's series come with its OffloadingConnector, which the CPU build cannot run (checked against
    # vLLM's source instead: tests/observability/test_metrics.py).
    assert missing == set(engine_metrics.VLLM_HOST_TIER_ONLY)


@pytest.mark.parametrize("group", range(10, 14))
def test_two_gateways_send_a_new_prefix_to_the_same_replica(platform: Platform, group: int) -> None:
    served = _served_by(
        platform, lambda: (_ask(platform.client("a"), _prefix(group), 1), _ask(platform.client("b"), _prefix(group), 2))
    )
    assert list(served.values()) == [2], served


def _outcomes(logs: dict[str, str]) -> dict[str, dict[str, int]]:
    """What became of each replica's requests in ``logs``: the access log's statuses, aborts and errors (the spill
    test's message when a count is off)."""
    outcomes: dict[str, dict[str, int]] = {}
    for replica, log in logs.items():
        counts: dict[str, int] = {}
        for line in log.splitlines():
            if '"POST /v1/' in line:
                key = line.rpartition('HTTP/1.1" ')[2].strip()
            elif "Aborted request" in line or "ERROR" in line:
                key = line.partition("] ")[2][:80]
            else:
                continue
            counts[key] = counts.get(key, 0) + 1
        outcomes[replica] = counts
    return outcomes


def test_a_full_replica_spills_and_none_ever_holds_more_than_max_num_seqs(platform: Platform) -> None:
    """As many long requests sharing one prefix as the replicas have slots, and two more, half through each gateway:
    the prefix's replica fills to max_num_seqs and the rest spill; no engine ever holds more (each could run twice
    as many); the two beyond the cap wait in the gateways' queues, and each is served when a slot frees or, where no
    slot freed within the queue timeout, refused with 429 ``capacity_exceeded`` no sooner than that timeout (both
    are the product's behaviour: on a loaded CI machine the first 1,500-token generations outlast the spec's
    longest timeout, 60 s, seen once in a clean clone's run). Nothing else is refused, and the shared slots (Redis)
    decided every one. What each engine held is read from its own request log, every request counted, not sampled."""
    seqs = platform.max_num_seqs
    before = {r: len(platform.servers[r].log()) for r in REPLICAS}
    refused_before = sum(gateway_metric(platform.gateways[g], gm.REJECTIONS_TOTAL, reason="kv_capacity") for g in "ab")

    sent = 3 * seqs + 2
    clients = {g: platform.client(g) for g in "ab"}  # made before, so no request waits on a client being built
    start = threading.Barrier(sent)
    refusals: list[float] = []
    """Seconds each refused request waited, as its client saw them."""

    def one(index: int) -> None:
        start.wait(timeout=30)
        asked = time.monotonic()
        try:
            _ask(
                clients["ab"[index % 2]],
                _prefix(2),
                index,
                max_tokens=LONG_GENERATION_TOKENS,
                extra_body={"ignore_eos": True},
            )
        except openai.RateLimitError as error:
            assert error.code == "capacity_exceeded", error
            refusals.append(time.monotonic() - asked)

    with ThreadPoolExecutor(sent) as pool:
        list(pool.map(one, range(sent)))
    logs = {r: platform.servers[r].log()[before[r] :] for r in REPLICAS}
    assert len(refusals) <= 2, refusals  # only the two beyond the cap ever waited
    assert all(waited >= QUEUE_TIMEOUT_SECONDS for waited in refusals), refusals
    refused = sum(gateway_metric(platform.gateways[g], gm.REJECTIONS_TOTAL, reason="kv_capacity") for g in "ab")
    assert refused - refused_before == len(refusals)
    assert sum(log.count("Received request ") for log in logs.values()) == sent - len(refusals), logs
    held = {r: most_at_once(log)[0] for r, log in logs.items()}
    assert max(held.values()) == seqs, (held, _outcomes(logs))
    assert sum(1 for h in held.values() if h > 0) >= 2, held
    spills = sum(gateway_metric(platform.gateways[g], gm.ROUTING_DECISIONS_TOTAL, reason="load_spill") for g in "ab")
    assert spills >= 1
    assert sum(gateway_metric(platform.gateways[g], gm.SLOT_STORE_FALLBACKS_TOTAL) for g in "ab") == 0


def test_without_the_processors_pick_envoy_still_balances(platform: Platform) -> None:
    served = _served_by(platform, lambda: [_ask(platform.client("c"), _prefix(3), q) for q in range(6)])
    assert sum(served.values()) == 6
    assert gateway_metric(platform.gateways["c"], gm.ROUTING_DECISIONS_TOTAL, model=MODEL, reason="fallback") >= 6


def test_the_cap_follows_replicas_going_and_coming(platform: Platform) -> None:
    with platform.servers["r2"].paused():  # its server stops answering, as a pod failing readiness
        _wait_metric(platform.gateways["a"], gm.READY_ENDPOINTS, 2, model=MODEL)
        _wait_metric(platform.gateways["a"], gm.ADMISSION_CAPACITY, 2 * platform.max_num_seqs, model=MODEL)
        served = _served_by(platform, lambda: [_ask(platform.client("a"), _prefix(20 + g), 1) for g in range(6)])
        assert "r2" not in served and sum(served.values()) == 6
    _wait_metric(platform.gateways["a"], gm.ADMISSION_CAPACITY, 3 * platform.max_num_seqs, model=MODEL)


def test_a_killed_replicas_traffic_moves_to_the_others(platform: Platform) -> None:
    """A gateway of its own reaches the shared servers through relays of its own: the prefix's replica is killed by
    killing its relay (nothing listens, open connections reset), the server lives on."""
    relays = {r: Relay(server.port, opened=True) for r, server in platform.servers.items()}
    try:
        gateway = platform.gateway_to("k", {r: relay.port for r, relay in relays.items()})
        _wait_metric(gateway, gm.READY_ENDPOINTS, 3, model=MODEL)
        client = openai.OpenAI(base_url=gateway.base_url, api_key=platform.key, max_retries=0)
        home = next(iter(_served_by(platform, lambda: _ask(client, _prefix(4), 1))))
        relays[home].kill()
        served = _served_by(platform, lambda: [_ask(client, _prefix(4), q) for q in range(2, 8)])
        assert home not in served and sum(served.values()) == 6  # no client error: Envoy retried the dead pick
        _wait_metric(gateway, gm.READY_ENDPOINTS, 2, model=MODEL)
    finally:
        for relay in relays.values():
            relay.close()
