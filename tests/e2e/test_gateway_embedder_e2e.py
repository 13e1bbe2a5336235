"""The gateway's semantic cache with the served embedder, end to end with real parts: Envoy 1.40 running the rendered
bootstrap, the real processor, Redis 8.2 with RediSearch, a vLLM 0.32 CPU server answering completions (the tiny
dummy-weight Llama) and another serving the catalog's sentence-embedding model (all-MiniLM-L6-v2) with exactly the
argument list and environment ``EmbedderService`` deploys (``vllm serve ... --runner pooling``), which the processor
calls over ``/v1/embeddings``; driven by the official ``openai`` client.

First the embedder itself: the pooling runner's vectors, and the catalog's threshold measured on the shipped labelled
set as ``inferplane cache eval`` does (no false hit, recall at least 0.85). Then the gateway: the stack asks for the
served embedder as prod does (``cache.embedder: {kind: served, model: all-minilm-l6-v2}``, the catalog's threshold by
default; a local run names where it answers, as ``inferplane gateway run --embedder-url`` does); paraphrases static
embeddings miss are answered from the cache, and near misses the sentence model scores above the threshold still
reach the model (a guard refuses them). Last, the embedder goes down (the module's relay to it is killed; the fleet's
embedder lives on): semantic lookups are lost, nothing else. Both vLLM servers are the run's fleet's (tests/fleet.py;
their start is the slow part); the tests run in file order on one worker (xdist group).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import openai
import pytest

from inferplane.components.capacity.embedder import EmbedderSizing
from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.components.serving.embedder_service import embedder_args
from inferplane.components.spec.platform_spec import CacheSpec
from inferplane.processor.cache import metrics as cm
from inferplane.processor.cache.config import EndpointEmbedderConfig
from inferplane.processor.cache.embedders import EndpointEmbedder
from inferplane.processor.cache.guards import names
from inferplane.processor.config import ProcessorConfig
from inferplane.tool.cache_eval import Scored, as_json, by_class, by_guard, load_pairs, point, score
from inferplane.tool.cli import main
from tests.e2e.conftest import SERVED_EMBEDDER as EMBEDDER
from tests.e2e.conftest import ServedScores, served_cache_spec
from tests.fleet import Fleet, check_fits, tokenizers_dir
from tests.gateway_support import (
    Gateway,
    Procs,
    Relay,
    StoredAnswers,
    embedder_model_dir,
    gateway_addresses,
    scrape,
    start_gateway,
    start_redis,
)
from tests.tiny_model import tiny_platform

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("vllm-fleet")]

TENANT = "team-a"
EMBED_TIMEOUT_MS = 2000
"""Generous, as the other E2E's lookup bound: on a loaded 2-core test machine a CPU embedding can take longer than
production's 50 ms, and a timeout would turn the semantic lookups under test into misses."""


@dataclass
class Served:
    """What the tests talk to."""

    procs: Procs
    gateway: Gateway
    key: str
    embedder_url: str
    fleet: Fleet
    embedder_relay: Relay
    stored: StoredAnswers

    @property
    def gateways_embedder_url(self) -> str:
        """Where the gateway calls the embedder: the module's relay to it."""
        return f"http://127.0.0.1:{self.embedder_relay.port}/v1"

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url, api_key=self.key, max_retries=0)

    def completions(self) -> int:
        """Completion requests the model's vLLM has received (its access log)."""
        return self.fleet["vllm-alpha"].posts("/v1/chat/completions")

    def embeddings(self) -> int:
        """Embedding requests the embedder's vLLM has received."""
        return self.fleet.embedder.posts("/v1/embeddings")


SERVED = {"kind": "served", "model": EMBEDDER.name, "timeout_ms": EMBED_TIMEOUT_MS}
"""What the stack asks for: the catalog's model, served by the platform."""


def _spec(cache: dict[str, Any]) -> Any:
    return tiny_platform(
        [{"name": "alpha", "routing_tier": "standard"}],
        {"replicas": 1, "tenants": [{"name": TENANT, "tiers": ["standard"]}]},
        cache=cache,
    )


def _embedder_sizing() -> EmbedderSizing:
    sizing = size_platform(_spec({"embedder": SERVED, "lookup_timeout_ms": 500})).embedder
    assert sizing is not None
    return sizing


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, fleet: Fleet) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("gateway-embedder-e2e")
    procs = Procs(directory)
    embedder = fleet.embedder
    # The fleet's embedder runs exactly the argument list EmbedderService deploys for this module's stack.
    wanted = embedder_args(_embedder_sizing(), model=str(embedder_model_dir()), host="127.0.0.1", port=embedder.port)
    assert embedder.args[-len(wanted) :] == tuple(wanted)
    # The engine as sizing sets it (the cache section does not change sizing).
    engine = size_platform(_spec({})).deployments[0].result.vllm
    check_fits(engine.max_model_len, engine.max_num_seqs, "alpha")
    key = secrets.token_urlsafe(32)
    keys_dir = directory / "keys"
    keys_dir.mkdir()
    (keys_dir / gc.API_KEYS_FILE).write_text(gc.render_api_key_file({TENANT: key}))
    relay = Relay(embedder.port, opened=True)  # the gateway's way to the embedder, which the last test kills
    try:
        redis_url = f"redis://127.0.0.1:{start_redis(procs)}/0"
        spec = _spec({"embedder": SERVED, "lookup_timeout_ms": 500})
        upstreams = {"alpha": [("127.0.0.1", fleet["vllm-alpha"].port)]}
        addresses = gateway_addresses(
            upstreams, keys_dir, tokenizers_dir(fleet), "-emb", embedder_url=f"http://127.0.0.1:{relay.port}/v1"
        )  # the same URL as Served.gateways_embedder_url
        gateway = start_gateway(
            procs, "gw", spec=spec, plan=size_platform(spec), addresses=addresses, redis_url=redis_url
        )
        yield Served(procs, gateway, key, embedder.url, fleet, relay, StoredAnswers(redis_url, gateway))
    finally:
        procs.stop_all()
        relay.close()


# --- the embedder on its own ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured(served: Served, served_scores: ServedScores) -> list[Scored]:
    """The shipped set scored against the fleet's embedder, once for the run (tests/e2e/conftest.py)."""
    assert served.embedder_url == served.fleet.embedder.url  # the embedder the shared scores come from
    return served_scores.shipped


def test_the_pooling_runner_answers_unit_vectors_of_the_catalog_dimensions(served: Served) -> None:
    config = EndpointEmbedderConfig(
        url=served.embedder_url, model=EMBEDDER.name, dimensions=EMBEDDER.dimensions, timeout_ms=5000
    )

    async def embed() -> list[npt.NDArray[np.float32]]:
        async with httpx.AsyncClient(timeout=5.0) as client:
            return await EndpointEmbedder(config, client=client).embed(["Did the dog bite the man?", "Hello"])

    assert [v.shape for v in asyncio.run(embed())] == [(384,), (384,)]
    raw = httpx.post(f"{served.embedder_url}/embeddings", json={"model": EMBEDDER.name, "input": ["Hello"]}).json()
    assert len(raw["data"][0]["embedding"]) == 384
    assert abs(float(np.linalg.norm(raw["data"][0]["embedding"])) - 1.0) < 1e-3  # sentence-transformers' Normalize


RECALL_FLOOR = 0.6
"""The shipped paraphrases served from the cache at the catalog's threshold, at least: 0.630 measured with the
counterpart check, which refuses lexical synonyms and added words it cannot vouch for (0.851 before it; the
near misses it keeps out are in docs/caching.md)."""


def test_the_catalog_threshold_has_no_false_hit_and_recall_above_its_floor(measured: list[Scored]) -> None:
    at = point(measured, EMBEDDER.threshold, guards=True)
    assert (at.false_hits, at.precision) == (0, 1.0)
    assert at.recall >= RECALL_FLOOR
    # The counterpart check, not the threshold, keeps the near misses out: lower, still none gets through.
    assert point(measured, EMBEDDER.threshold - 0.02, guards=True).false_hits == 0
    # A sentence model alone still reads roles, numbers and units poorly: without any check, near misses of every
    # class but entities pass.
    bare = {c.kind: c.bare.false_hits for c in by_class(measured, EMBEDDER.threshold, True)}
    assert all(bare[kind] > 0 for kind in ("number", "unit", "negation", "direction", "time", "comparison"))
    # Each check left out alone, the others still let none through (the guards are a second layer now).
    without = {g.left_out: g.at.false_hits for g in by_guard(measured, EMBEDDER.threshold)}
    assert all(without[name] == 0 for name in names()) and without["all"] > 0


def test_wordllama_with_the_checks_lets_no_near_miss_through_at_any_threshold(measured: list[Scored]) -> None:
    _, pairs = load_pairs(None)
    static = score(pairs, CacheSpec())
    assert all(point(static, t / 100, True).false_hits == 0 for t in range(50, 100))
    assert point(static, 0.5, False).false_hits > 0  # the embedding alone does not


CLI_SAMPLE_STRIDE = 8
"""``cache eval``'s test reads every 8th pair of the shipped set (65 of 520, every class): the whole set's figures are
the tests above, from the same scoring; this one checks that the command reports exactly what they compute."""


def test_cache_eval_measures_the_served_embedder(
    served: Served, measured: list[Scored], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = measured[::CLI_SAMPLE_STRIDE]
    assert {s.pair.kind for s in sample} == {s.pair.kind for s in measured}
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(s.pair.model_dump_json(by_alias=True, exclude_none=True) + "\n" for s in sample))
    option = f"endpoint,url={served.embedder_url},model={EMBEDDER.name},dimensions={EMBEDDER.dimensions}"
    argv = ["cache", "eval", "--pairs", str(pairs), "--embedder", option, "--threshold", str(EMBEDDER.threshold)]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    spec = served_cache_spec(served.embedder_url)
    assert result == as_json(spec, sample, point(sample, EMBEDDER.threshold, guards=True))
    assert result["embedder"] == f"endpoint {served.embedder_url}" and result["false_hits"] == 0


# --- through the gateway ----------------------------------------------------------------------------------------------


def _ask(served: Served, prompt: str) -> tuple[str, str, str]:
    """(x-inferplane-cache, its kind, the answer) of a deterministic chat request."""
    response = served.client().chat.completions.with_raw_response.create(
        model="alpha", messages=[{"role": "user", "content": prompt}], max_tokens=8, temperature=0
    )
    answer = response.parse().choices[0].message.content or ""
    return response.headers.get("x-inferplane-cache", ""), response.headers.get("x-inferplane-cache-kind", ""), answer


def _errors(served: Served) -> dict[str, float]:
    return {k: v for k, v in scrape(served.gateway.metrics_url).items() if k.startswith(cm.ERRORS) and v}


def test_the_processor_is_configured_with_the_served_embedder(served: Served) -> None:
    cache = ProcessorConfig.model_validate_json(served.gateway.rendered.processor_json).cache
    assert cache is not None and cache.threshold == EMBEDDER.threshold and cache.guards  # the catalog's, by default
    assert cache.embedder == EndpointEmbedderConfig(
        url=served.gateways_embedder_url, model=EMBEDDER.name, dimensions=384, timeout_ms=EMBED_TIMEOUT_MS
    )


@pytest.mark.parametrize(
    ("asked", "paraphrase", "embedder_calls"),
    [
        # wordllama scores these 0.71 and 0.76 (both misses at any safe threshold); MiniLM 0.96 and 0.97. The first
        # differs only by a request's framing, which the counterpart check sets aside: one call, the prompt's vector.
        ("Explain what a mortgage is.", "I was wondering if you could explain what a mortgage is.", 1),
        # 'cancel' / 'canceled' differ: a second call embeds the two words (0.626, an inflection at >= 0.6).
        ("Did the system cancel my booking?", "Was my booking canceled by the system?", 2),
    ],
)
def test_a_paraphrase_is_answered_from_the_cache_without_the_model(
    served: Served, asked: str, paraphrase: str, embedder_calls: int
) -> None:
    stored = served.stored.count()
    first = _ask(served, asked)
    assert first[0] == "miss", _errors(served)
    served.stored.wait_beyond(stored)  # the processor stores in the background, after the answer went out
    completions, embeddings = served.completions(), served.embeddings()
    assert _ask(served, paraphrase) == ("hit", "semantic", first[2]), _errors(served)
    assert served.completions() == completions  # the model never saw it
    assert served.embeddings() == embeddings + embedder_calls  # the embedder did


def test_a_near_miss_the_embedder_cannot_tell_apart_still_reaches_the_model(served: Served) -> None:
    # MiniLM scores the role swap 0.988 (above the threshold); the order guard refuses the match.
    stored = served.stored.count()
    first = _ask(served, "Did the dog bite the man?")
    assert first[0] == "miss", _errors(served)
    served.stored.wait_beyond(stored)
    completions = served.completions()
    near_miss = _ask(served, "Did the man bite the dog?")
    assert near_miss[0] == "miss" and served.completions() == completions + 1
    assert _ask(served, "Did the dog bite the man?")[:2] == ("hit", "exact")


def _metric_total(served: Served, name: str, **labels: Any) -> float:
    total = 0.0
    for sample, value in scrape(served.gateway.metrics_url).items():
        metric, _, rest = sample.partition("{")
        if metric == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


def test_an_embedder_that_is_down_costs_semantic_hits_only(served: Served) -> None:
    """Last: it stops the embedder. The exact lookup still answers, the failure is counted, nothing fails."""
    asked = "Describe the water cycle."
    stored = served.stored.count()
    first = _ask(served, asked)
    served.stored.wait_beyond(stored)
    served.embedder_relay.kill()  # the embedder is down for the gateway
    assert _ask(served, asked)[:2] == ("hit", "exact")
    completions = served.completions()
    assert _ask(served, "Please describe the water cycle.")[0] == "miss"  # 0.98 with MiniLM, but no vector now
    assert served.completions() == completions + 1 and first[0] == "miss"
    assert _metric_total(served, cm.ERRORS, operation="embed") >= 2
    assert _metric_total(served, cm.UP) == 1
