"""The gateway end to end with real parts: Envoy 1.40 running the rendered bootstrap, the real processor, Redis 8.2
and two vLLM 0.32 OpenAI servers on CPU (a tiny Llama with dummy weights) of the run's fleet (tests/fleet.py),
driven by the official ``openai`` client.

Topology: tier ``standard`` = ``alpha`` with fallback ``beta``; tier ``batch`` = ``gamma``, which scales to zero.
vLLM "alpha" serves the names ``alpha`` and ``gamma``; vLLM "beta" serves ``beta`` and ``alpha`` (a fallback server
must accept the primary's name). Two gateway replicas (A and B) share the module's Redis. ``alpha``'s address is
the module's relay to vLLM "alpha", which the fallback test kills (the fleet's server lives on); ``gamma``'s is a
relay that refuses connections (no replica) until the test opens it to vLLM "alpha" (the replica coming up).

The tests run in file order on one worker (xdist group): the destructive ones (Redis, the primary, a processor
stopped) come last.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.processor import metrics as gm
from inferplane.processor.cache import metrics as cm
from tests.fleet import Fleet, check_fits, tokenizers_dir
from tests.gateway_support import (
    BUSY_SCRAPE_TIMEOUT_S,
    Gateway,
    Procs,
    Relay,
    StoredAnswers,
    gateway_addresses,
    gateway_metric,
    most_at_once,
    scrape,
    start_gateway,
    start_redis,
    wait_until,
)
from tests.tiny_model import tiny_platform, words

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("vllm-fleet")]

QUEUE_MAX = 2
"""The gateway's admission queue per model."""
CACHE_TTL_SECONDS = 8
"""Short, so the response cache's expiry is observable (``test_cache_entries_expire``)."""
TENANTS: dict[str, dict[str, Any]] = {
    "team-a": {"tiers": ["standard", "batch"]},
    "accounting": {"tiers": ["standard"]},
    "rpm-tight": {"tiers": ["standard"], "requests_per_minute": 3},
    "tpm-tight": {"tiers": ["standard"], "tokens_per_minute": 150},
    "batch-only": {"tiers": ["batch"]},
}


def _spec() -> Any:
    return tiny_platform(
        [
            {"name": "alpha", "routing_tier": "standard"},
            {"name": "beta", "routing_tier": "standard"},
            {"name": "gamma", "routing_tier": "batch", "min_replicas": 0, "scale_to_zero": True},
        ],
        {
            "replicas": 2,
            "tiers": [
                {"name": "standard", "models": ["alpha"], "fallback": ["beta"]},
                {"name": "batch", "models": ["gamma"]},
            ],
            "tenants": [{"name": name, **limits} for name, limits in TENANTS.items()],
            "admission": {"queue_max": QUEUE_MAX, "queue_timeout_seconds": 1.5},
        },
        # The spec's largest lookup bound: on a loaded test machine (vLLM servers sharing two cores) a 50 ms bound
        # would turn lookups into misses and a stalled health ping into bypasses.
        cache={"ttl_seconds": CACHE_TTL_SECONDS, "lookup_timeout_ms": 1000},
    )


@dataclass
class Platform:
    """Everything the tests talk to."""

    procs: Procs
    a: Gateway
    b: Gateway
    keys: dict[str, str]
    fleet: Fleet
    primary: Relay
    relay: Relay
    stored: StoredAnswers

    def client(self, tenant: str, gateway: Gateway | None = None) -> openai.OpenAI:
        """An OpenAI client with the tenant's key, no retries (429 and 5xx must surface)."""
        return openai.OpenAI(base_url=(gateway or self.a).base_url, api_key=self.keys[tenant], max_retries=0)

    def vllm_posts(self, name: str) -> int:
        """Completion requests vLLM ``name`` has received (its access log)."""
        return self.fleet[name].posts()


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory, fleet: Fleet) -> Iterator[Platform]:
    directory = tmp_path_factory.mktemp("gateway-e2e")
    procs = Procs(directory)
    spec = _spec()
    plan = size_platform(spec)
    for deployment in plan.deployments:
        check_fits(deployment.result.vllm.max_model_len, deployment.result.vllm.max_num_seqs, deployment.name)
    tokenizers = tokenizers_dir(fleet)
    keys = {tenant: secrets.token_urlsafe(32) for tenant in TENANTS}
    keys_dir = directory / "keys"
    keys_dir.mkdir()
    (keys_dir / gc.API_KEYS_FILE).write_text(gc.render_api_key_file(keys))
    primary = Relay(fleet["vllm-alpha"].port, opened=True)
    relay = Relay(fleet["vllm-alpha"].port)
    try:
        redis_url = f"redis://127.0.0.1:{start_redis(procs)}/0"
        upstreams = {
            "alpha": [("127.0.0.1", primary.port)],
            "beta": [("127.0.0.1", fleet["vllm-beta"].port)],
            "gamma": [("127.0.0.1", relay.port)],
        }
        gateways = [
            start_gateway(
                procs,
                name,
                spec=spec,
                plan=plan,
                addresses=gateway_addresses(upstreams, keys_dir, tokenizers, f"-{name}"),
                redis_url=redis_url,
            )
            for name in ("gw-a", "gw-b")
        ]
        yield Platform(
            procs, gateways[0], gateways[1], keys, fleet, primary, relay, StoredAnswers(redis_url, gateways[0])
        )
    finally:
        procs.stop_all()
        primary.close()
        relay.close()


BUDGET_TEST_SECONDS = 20
"""The clock minute a budget test needs left when it starts (the budgets count per clock minute): its few requests
took more than 8 s once, with two suites on two cores, and the last one landed in the next minute's whole budget."""


def _fresh_window() -> None:
    """Do not start a budget test in a clock minute's last :data:`BUDGET_TEST_SECONDS`."""
    left = 60 - time.time() % 60
    if left < BUDGET_TEST_SECONDS:
        time.sleep(left + 0.5)


def _chat(client: openai.OpenAI, model: str, prompt: str = "w1 w2 w3", **kwargs: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], **{"max_tokens": 8, **kwargs}
    )


def test_routes_by_model_and_by_tier(platform: Platform) -> None:
    client = platform.client("team-a")
    by_model = _chat(client, "alpha")
    assert by_model.parse().model == "alpha"
    assert by_model.headers[gc.UPSTREAM_HEADER] == "alpha"  # the replica's model (a fallback would say beta)
    assert _chat(client, "beta").parse().model == "beta"
    by_tier = _chat(client, "standard")  # the tier's first model answers
    assert by_tier.parse().model == "alpha"
    models = {m.id for m in client.models.list()}
    assert models == {"alpha", "beta", "gamma", "standard", "batch"}


def test_missing_or_unknown_key_is_401(platform: Platform) -> None:
    for key in ("not-a-key-of-anyone-0123456789", ""):
        client = openai.OpenAI(base_url=platform.a.base_url, api_key=key or "x", max_retries=0)
        if not key:
            client = client.with_options(default_headers={"Authorization": ""})
        with pytest.raises(openai.AuthenticationError) as error:
            _chat(client, "alpha")
        assert error.value.code == "invalid_api_key"


def test_tier_and_model_checks(platform: Platform) -> None:
    with pytest.raises(openai.PermissionDeniedError) as forbidden:
        _chat(platform.client("batch-only"), "alpha")
    assert forbidden.value.code == "tier_forbidden"
    with pytest.raises(openai.NotFoundError) as missing:
        _chat(platform.client("team-a"), "no-such-model")
    assert missing.value.code == "model_not_found"


def test_request_limit_is_shared_by_the_replicas(platform: Platform) -> None:
    _fresh_window()
    a, b = platform.client("rpm-tight", platform.a), platform.client("rpm-tight", platform.b)
    for client in (a, b, a):  # 3 per minute, each replica saw at most 2: Envoy's local buckets never fire
        _chat(client, "alpha")
    with pytest.raises(openai.RateLimitError) as error:
        _chat(b, "alpha")
    assert error.value.code == "rate_limit_exceeded"
    assert 1 <= int(error.value.response.headers["retry-after"]) <= 60
    assert gateway_metric(platform.b, gm.REJECTIONS_TOTAL, reason="requests_per_minute") == 1


def test_token_limit_is_shared_by_the_replicas(platform: Platform) -> None:
    _fresh_window()
    first = _chat(platform.client("tpm-tight", platform.a), "alpha", words(90), max_tokens=10).parse()
    assert first.usage.total_tokens <= 150
    with pytest.raises(openai.RateLimitError) as error:
        _chat(platform.client("tpm-tight", platform.b), "alpha", words(60), max_tokens=10)
    assert error.value.code == "rate_limit_exceeded"
    assert "tokens per minute" in error.value.message
    assert int(error.value.response.headers["retry-after"]) >= 1


def test_context_length_exceeded_never_reaches_vllm(platform: Platform) -> None:
    client = platform.client("team-a")
    before = platform.vllm_posts("vllm-alpha")
    with pytest.raises(openai.BadRequestError) as error:
        _chat(client, "alpha", words(2100), max_tokens=10)
    assert error.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        _chat(client, "alpha", words(1500), max_tokens=1000)  # prompt fits, prompt + max_tokens does not
    assert platform.vllm_posts("vllm-alpha") == before
    # Without max_tokens the processor clamps the completion to what is left of the context.
    clamped = client.chat.completions.create(model="alpha", messages=[{"role": "user", "content": words(2000)}])
    assert clamped.usage is not None and clamped.usage.total_tokens <= 2048


CAPPED_TOKENS = 500
"""Tokens each request of the in-flight cap test generates (``ignore_eos``): the burst arrives within milliseconds and
each request runs for hundreds of decode steps, so requests let past the cap would run together and show in the
engine's request log, which counts every request (at 1,500 this was a 16 s test)."""
STREAMED_TOKENS = 256
"""Tokens the streaming test asks for (``ignore_eos``): 64 chunks at 4 tokens a chunk, enough to see them arrive over
time; every token costs the engine, Envoy and the processor CPU on the run's two cores (at 1,500: a 9 s test)."""


def _running(platform: Platform, server: str) -> float:
    """``vllm:num_requests_running`` of one vLLM server, from its own metrics."""
    samples = scrape(f"http://127.0.0.1:{platform.fleet[server].port}/metrics", BUSY_SCRAPE_TIMEOUT_S)
    return sum(v for k, v in samples.items() if k.startswith("vllm:num_requests_running"))


def _retries(platform: Platform, model: str) -> float:
    """Envoy's retries to ``model``'s cluster, summed over both gateways (``upstream_rq_retry``)."""
    cluster = f'envoy_cluster_name="{gc.model_cluster_name(model)}"'
    counts = [
        value
        for gateway in (platform.a, platform.b)
        for key, value in scrape(gateway.stats_url).items()
        if key.startswith("envoy_cluster_upstream_rq_retry{") and cluster in key
    ]
    assert len(counts) == 2, "each gateway's Envoy counts the cluster's retries"
    return sum(counts)


def _gateway_inflight(platform: Platform, model: str) -> float:
    """Requests both gateways' processors hold in flight on ``model``'s replicas (their per-replica gauge)."""
    return sum(
        value
        for gateway in (platform.a, platform.b)
        for key, value in scrape(gateway.metrics_url, BUSY_SCRAPE_TIMEOUT_S).items()
        if key.startswith(gm.ENDPOINT_INFLIGHT) and f'model="{model}"' in key
    )


def _wait_idle(platform: Platform, server: str, timeout: float = 60.0) -> None:
    """Wait until ``server``'s engine runs and queues nothing (an earlier test's request would count in the peak)."""
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{platform.fleet[server].port}/metrics"
    while True:
        samples = scrape(url, BUSY_SCRAPE_TIMEOUT_S)
        busy = sum(
            v for k, v in samples.items() if k.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))
        )
        if busy == 0:
            return
        assert time.monotonic() < deadline, f"{server} still has {busy:g} requests after {timeout:.0f} s"
        time.sleep(0.2)


def test_inflight_cap_holds_at_vllm(platform: Platform) -> None:
    cap = 4  # max_num_seqs x the one ready replica, shared by both gateway replicas through Redis
    client = platform.client("team-a")
    _wait_idle(platform, "vllm-beta")
    retries_before = _retries(platform, "beta")
    rejections_before = gateway_metric(platform.a, gm.REJECTIONS_TOTAL, reason="kv_capacity", model="beta")
    server = platform.fleet["vllm-beta"]
    log_before = len(server.log())
    peak = gateway_peak = 0
    samples = 0
    trace: list[tuple[float, int]] = []  # (s, engine's running) where over the cap
    done = threading.Event()

    def watch() -> None:
        nonlocal peak, samples
        while not done.is_set():
            try:
                running = int(_running(platform, "vllm-beta"))
            except OSError:  # a scrape that times out on a busy machine is a sample lost, not the watch
                continue
            peak, samples = max(peak, running), samples + 1
            if running > cap:
                trace.append((round(time.monotonic() - started, 2), running))
            time.sleep(0.02)

    def watch_gateways() -> None:
        """Apart from the engine's watch: the gateways' metrics (every worker's files merged) take a while to read
        on a loaded machine, and the engine's samples must not wait for them."""
        nonlocal gateway_peak
        while not done.is_set():
            try:
                gateway_peak = max(gateway_peak, int(_gateway_inflight(platform, "beta")))
            except OSError:
                continue
            time.sleep(0.02)

    def one(_: int) -> int:
        try:
            _chat(client, "beta", max_tokens=CAPPED_TOKENS, extra_body={"ignore_eos": True})
        except openai.RateLimitError as error:
            assert error.code == "capacity_exceeded"
            assert error.response.headers["retry-after"] == "1"
            return 429
        return 200

    started = time.monotonic()
    watchers = [threading.Thread(target=watch), threading.Thread(target=watch_gateways)]
    for watcher in watchers:
        watcher.start()
    try:
        # Twice the cap and its queue at once, so some are refused however fast the engine decodes; and two waves,
        # since a vLLM CPU server busy decoding answers its /metrics slowly (seconds a scrape on two shared cores)
        # and one wave can end before the watch has sampled it a few times.
        burst = 2 * (cap + QUEUE_MAX)
        with ThreadPoolExecutor(burst) as pool:
            statuses = [status for _ in range(2) for status in pool.map(one, range(burst))]
    finally:
        done.set()
        for watcher in watchers:
            watcher.join()
    elapsed = time.monotonic() - started
    # A try Envoy retries (a connection reset under it) holds no slot where it lands, and the engine may still run
    # the first try until it sees the reset: the one way past the cap the gateway leaves open (docs/gateway.md,
    # "a retry holds no slot where it lands"). Anything beyond the retries counted is a fault.
    retried = _retries(platform, "beta") - retries_before
    fallbacks = sum(
        value
        for gateway in (platform.a, platform.b)
        for key, value in scrape(gateway.metrics_url).items()
        if key.startswith(gm.SLOT_STORE_FALLBACKS_TOTAL)
    )
    # Three measures, so a failure says which layer went past the cap. The engine's request log counts every request
    # from its hand-off to the engine to its last output, an upper bound on what the engine ran together, and is the
    # one held to the cap first; the engine's own gauge and the gateways' in-flight gauges are sampled (a loaded
    # machine's scrapes take seconds, so they may miss the peak, never invent one).
    logged, left = most_at_once(server.log()[log_before:])
    message = (
        f"engine log's most at once {logged} ({left} left at the end), engine gauge peak {peak} ({samples} samples "
        f"over {elapsed:.1f} s), gateways' in flight peak {gateway_peak}; {retried:g} retries, {fallbacks:g} "
        f"slot-store fallbacks; the engine's gauge over the cap at {trace}; statuses {statuses}"
    )
    assert 1 <= logged <= cap + retried, message
    assert peak <= cap + retried and gateway_peak <= cap, message
    assert statuses.count(200) >= cap and statuses.count(429) >= 1
    rejections = gateway_metric(platform.a, gm.REJECTIONS_TOTAL, reason="kv_capacity", model="beta") - rejections_before
    assert rejections == statuses.count(429)


def test_streaming_is_unbuffered_and_tokens_match_usage(platform: Platform) -> None:
    usage_total = 0
    # Through gateway b the tokens come 4 a chunk after the first, as sizing's --stream-interval 4 sends them (here
    # vLLM's per-request field, the same rule: RequestState.make_request_output): the accounting stays exact.
    for gateway, interval in ((platform.a, 1), (platform.b, 4)):
        client = platform.client("accounting", gateway)
        usage = _chat(client, "alpha", words(40), max_tokens=16).parse().usage
        usage_total += usage.prompt_tokens + usage.completion_tokens
        started = time.monotonic()
        arrivals: list[float] = []
        stream = client.chat.completions.create(
            model="alpha",
            messages=[{"role": "user", "content": words(30)}],
            max_tokens=STREAMED_TOKENS,
            stream=True,
            extra_body={"ignore_eos": True, **({"stream_interval": interval} if interval > 1 else {})},
        )
        streamed_usage = None
        token_chunks = 0
        for chunk in stream:
            arrivals.append(time.monotonic() - started)
            token_chunks += bool(chunk.choices and chunk.choices[0].delta.content)
            if chunk.usage is not None:  # the processor asked vLLM for it (stream_options.include_usage)
                streamed_usage = chunk.usage
        assert streamed_usage is not None and streamed_usage.completion_tokens == STREAMED_TOKENS
        usage_total += streamed_usage.prompt_tokens + streamed_usage.completion_tokens
        assert len({round(t, 3) for t in arrivals}) > 10  # chunks over time (unbuffered: see the relay test below)
        # The first token alone, then a chunk per `interval` tokens, the last with fewer (vLLM may merge more when
        # its API server falls behind, never split them).
        assert token_chunks <= 1 + math.ceil((STREAMED_TOKENS - 1) / interval)

    def accounted() -> float:
        return sum(
            gateway_metric(g, gm.TOKENS_TOTAL, tenant="accounting", model="alpha") for g in (platform.a, platform.b)
        )

    # Settled from Envoy's access log (the usage its Lua filter read), flushed at most 100 ms after the response.
    wait_until(lambda: accounted() >= usage_total, 10, "the responses' usage accounted")
    assert accounted() == usage_total


def test_scale_from_zero_holds_until_a_replica_is_ready(platform: Platform) -> None:
    client = platform.client("team-a")
    result: dict[str, Any] = {}

    def call() -> None:
        result["response"] = _chat(client, "batch")

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 10
    while gateway_metric(platform.a, gm.PENDING_REQUESTS, model="gamma") != 1:
        assert time.monotonic() < deadline, "the pending gauge never rose"
        time.sleep(0.1)
    assert caller.is_alive()  # held at the gateway, not refused
    platform.relay.open()  # a replica comes up
    caller.join(timeout=30)
    assert result["response"].status_code == 200
    assert gateway_metric(platform.a, gm.PENDING_REQUESTS, model="gamma") == 0


# --- the response cache (issue 14): Redis 8.2 with RediSearch, so exact and semantic ---------------------------------

RESET = "How do I reset my password?"


def _cached(client: openai.OpenAI, prompt: str, **kwargs: Any) -> tuple[str, str, str]:
    """(x-inferplane-cache, its kind, the answer) of a deterministic chat request to ``alpha``."""
    response = _chat(client, "alpha", prompt, temperature=0, **kwargs)
    answer = response.parse().choices[0].message.content or ""
    return response.headers.get("x-inferplane-cache", ""), response.headers.get("x-inferplane-cache-kind", ""), answer


def _cache_state(platform: Platform) -> str:
    """What both processors say about their cache (bypasses by reason, errors by operation, up), for a failure's
    message: a bypass where a miss was expected is told apart from a wrong verdict."""
    names = (cm.BYPASSES, cm.ERRORS, cm.UP)
    return "; ".join(
        f"gateway {label} {sample}={value:g}"
        for label, gateway in (("a", platform.a), ("b", platform.b))
        for sample, value in sorted(scrape(gateway.metrics_url).items())
        if sample.partition("{")[0] in names and value
    )


@pytest.fixture
def cache_up(platform: Platform) -> None:
    """The cache tests judge verdicts of a cache that is up. A health ping that ran past the lookup bound on a loaded
    machine marks it down (requests bypass it) until the next ping, at most 5 s later, succeeds: wait for that rather
    than read a bypass as a wrong verdict."""
    deadline = time.monotonic() + 15
    while not all(gateway_metric(gateway, cm.UP) == 1 for gateway in (platform.a, platform.b)):
        assert time.monotonic() < deadline, _cache_state(platform)
        time.sleep(0.2)


def _vllm_requests(platform: Platform) -> int:
    return platform.vllm_posts("vllm-alpha") + platform.vllm_posts("vllm-beta")


def test_a_stream_reaches_the_client_while_the_server_withholds_the_rest(platform: Platform) -> None:
    """Unbuffered, deterministically: the relay in front of gamma's server forwards the response up to its first
    event and withholds the rest; the client must read that event meanwhile. Were Envoy or the processor buffering
    the response, the first read would wait for the whole body, which the relay only lets through afterwards (or
    after its timeout, which the test then reports). Runs after the scale-from-zero test, which opens the relay."""
    if not platform.relay.is_open:
        platform.relay.open()
    client = platform.client("team-a")
    platform.relay.hold_after_first_event()
    try:
        stream = client.chat.completions.create(
            model="gamma",
            messages=[{"role": "user", "content": words(10)}],
            max_tokens=64,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        chunks = iter(stream)
        first = next(chunks)
        withheld = platform.relay.holding.is_set()
    finally:
        platform.relay.release()
    rest = list(chunks)
    assert withheld and not platform.relay.hold_timed_out
    # Every token still arrives once the relay lets it through (vLLM may merge tokens that waited into one chunk,
    # so count them by the usage the processor asked for, not by chunks).
    usage = next(chunk.usage for chunk in reversed(rest) if chunk.usage is not None)
    assert first.model and usage.completion_tokens == 64


@pytest.mark.usefixtures("cache_up")
def test_cache_answers_repeats_and_paraphrases_without_vllm(platform: Platform) -> None:
    client = platform.client("team-a")
    stored = platform.stored.count()
    first = _cached(client, RESET)
    assert first[0] == "miss", _cache_state(platform)
    platform.stored.wait_beyond(stored)  # the processor stores in the background, after the answer went out
    before = _vllm_requests(platform)
    exact = _cached(client, RESET)
    paraphrase = _cached(client, "How can I reset my password?")
    other_replica = _cached(platform.client("team-a", platform.b), RESET)  # the replicas share the cache
    assert exact == ("hit", "exact", first[2])
    assert paraphrase == ("hit", "semantic", first[2])
    assert other_replica == ("hit", "exact", first[2])
    assert _vllm_requests(platform) == before  # vLLM never saw them
    near_miss = _cached(client, "How do I not reset my password?")  # a guard (negation) refuses the match
    assert near_miss[0] == "miss" and _vllm_requests(platform) == before + 1
    assert (
        gateway_metric(platform.a, cm.HITS, kind="exact") >= 1
        and gateway_metric(platform.a, cm.HITS, kind="semantic") >= 1
    )
    assert gateway_metric(platform.a, gm.REQUESTS_TOTAL, outcome="cached") >= 2


@pytest.mark.usefixtures("cache_up")
def test_cache_never_serves_another_tenant(platform: Platform) -> None:
    stored = platform.stored.count()
    _cached(platform.client("team-a"), "Where is my package?")
    platform.stored.wait_beyond(stored)
    before = _vllm_requests(platform)
    other = _cached(platform.client("accounting"), "Where is my package?")
    assert other[0] == "miss" and _vllm_requests(platform) == before + 1


@pytest.mark.usefixtures("cache_up")
def test_cache_replays_streams_and_bypasses_on_request(platform: Platform) -> None:
    client = platform.client("team-a")
    stored = platform.stored.count()
    answer = _cached(client, "Summarize the plot of Hamlet.")[2]
    platform.stored.wait_beyond(stored)
    before = _vllm_requests(platform)
    stream = client.chat.completions.create(
        model="alpha",
        messages=[{"role": "user", "content": "Summarize the plot of Hamlet."}],
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
    assert chunks[-1].usage is not None
    assert _vllm_requests(platform) == before
    bypass = _chat(
        client, "alpha", "Summarize the plot of Hamlet.", temperature=0, extra_headers={"x-inferplane-cache": "bypass"}
    )
    assert bypass.headers["x-inferplane-cache"] == "bypass" and _vllm_requests(platform) == before + 1
    sampled = _chat(client, "alpha", "Summarize the plot of Hamlet.", temperature=0.8)
    assert sampled.headers["x-inferplane-cache"] == "bypass"


@pytest.mark.usefixtures("cache_up")
def test_cache_entries_expire(platform: Platform) -> None:
    client = platform.client("team-a")
    before = platform.stored.keys()
    assert _cached(client, "What is the boiling point of water?")[0] == "miss"
    stored = platform.stored.wait_new(before)
    started = time.monotonic()
    assert _cached(client, "What is the boiling point of water?")[0] == "hit"
    # The entry's expiry is what is under test: Redis drops it within the TTL, and then the gateway misses.
    platform.stored.wait_gone(stored, timeout=CACHE_TTL_SECONDS + 10)
    assert time.monotonic() - started <= CACHE_TTL_SECONDS + 2
    assert _cached(client, "What is the boiling point of water?")[0] == "miss"


def test_redis_down_fails_open_and_envoys_own_limit_holds(platform: Platform) -> None:
    platform.procs.stop("redis")
    client = platform.client("team-a")
    assert _chat(client, "alpha").parse().model == "alpha"
    assert gateway_metric(platform.a, gm.PROCESSOR_ERRORS_TOTAL, stage="redis") >= 1
    # Without the shared budget, each replica's Envoy bucket (3 a minute for rpm-tight) still limits the tenant.
    tight = platform.client("rpm-tight", platform.a)
    with pytest.raises(openai.RateLimitError) as error:
        for _ in range(4):
            _chat(tight, "alpha")
    headers = error.value.response.headers
    assert error.value.code == "rate_limit_exceeded"
    assert (headers["x-ratelimit-limit"], headers["retry-after"]) == ("3", "20")
    # The cache too: a deterministic request is answered by vLLM within the lookup timeout, and counted.
    started = time.monotonic()
    response = _chat(client, "alpha", RESET, temperature=0)
    assert response.status_code == 200 and response.headers["x-inferplane-cache"] in ("miss", "bypass")
    assert time.monotonic() - started < 10
    assert (
        gateway_metric(platform.a, cm.ERRORS) >= 1 or gateway_metric(platform.a, cm.BYPASSES, reason="unavailable") >= 1
    )


def test_fallback_when_the_primary_is_killed(platform: Platform) -> None:
    platform.primary.kill()  # the primary's address refuses connections, as a killed server's does
    response = _chat(platform.client("team-a"), "alpha")
    assert response.parse().model == "beta"  # the fallback server answered, and says so


def test_processor_down_fails_closed(platform: Platform) -> None:
    platform.procs.stop("gw-b-processor")
    with pytest.raises(openai.InternalServerError) as error:
        _chat(platform.client("team-a", platform.b), "beta")
    assert error.value.status_code == 500
    assert error.value.code == "processor_unavailable"
