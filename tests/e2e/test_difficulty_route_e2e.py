"""Routing by difficulty end to end with real parts: Envoy 1.40 running the rendered bootstrap, the real processor
(wordllama, the response cache's default embedder, embedding the tier's examples at start), Redis 8.2 and two vLLM
0.32 CPU servers of the run's fleet, driven by the official ``openai`` client.

Topology: tier ``auto`` = ``alpha`` (the strong model, vLLM "alpha") and ``tiny`` (the cheap one, vLLM "tiny"), routed
by the labelled examples below, the examples file read from the test's project directory as the program reads it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.components.gateway.route_examples import read_route_examples
from inferplane.processor import metrics as gm
from inferplane.processor.config import ROUTE_HEADER
from tests.fleet import Fleet, check_fits, tokenizers_dir
from tests.gateway_support import Gateway, Procs, gateway_addresses, scrape, start_gateway, start_redis
from tests.tiny_model import tiny_platform

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("vllm-fleet")]

EASY = [f"hello there, how is the weather in city number {i} today? any sunshine?" for i in range(12)]
HARD = [f"prove the theorem on prime gaps and modular forms for lemma {i} rigorously" for i in range(12)]
"""The examples: small talk the cheap model answers, proofs only the strong one gets right."""
EASY_ASKED = ["hello, how is the weather in the city today? sunshine?", "hello there, any sunshine today in my city?"]
HARD_ASKED = ["prove the theorem on prime gaps and modular forms rigorously", "rigorously prove a lemma on prime gaps"]
"""Prompts the examples do not hold, of each kind."""


@dataclass
class Routed:
    """What the tests talk to."""

    gateway: Gateway
    key: str
    fleet: Fleet

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url, api_key=self.key, max_retries=0)


def _spec() -> Any:
    route = {"by": "difficulty", "cheap": "tiny", "strong": "alpha", "examples": "routes/auto.jsonl"}
    return tiny_platform(
        [{"name": "alpha", "routing_tier": "auto"}, {"name": "tiny", "routing_tier": "auto"}],
        {
            "replicas": 1,
            "tiers": [
                {"name": "auto", "models": ["alpha", "tiny"], "route": {**route, "threshold": 0.5, "neighbours": 5}}
            ],
            "tenants": [{"name": "team", "tiers": ["auto"]}],
        },
        cache={"lookup_timeout_ms": 1000},
    )


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory, fleet: Fleet) -> Iterator[Routed]:
    directory = tmp_path_factory.mktemp("difficulty-e2e")
    project = directory / "project"
    (project / "routes").mkdir(parents=True)
    lines = [{"prompt": p, "cheap_correct": True, "strong_correct": True} for p in EASY]
    lines += [{"prompt": p, "cheap_correct": False, "strong_correct": True} for p in HARD]
    (project / "routes" / "auto.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    procs = Procs(directory)
    spec = _spec()
    plan = size_platform(spec)
    for deployment in plan.deployments:
        check_fits(deployment.result.vllm.max_model_len, deployment.result.vllm.max_num_seqs, deployment.name)
    key = secrets.token_urlsafe(32)
    keys_dir = directory / "keys"
    keys_dir.mkdir()
    (keys_dir / gc.API_KEYS_FILE).write_text(gc.render_api_key_file({"team": key}))
    try:
        redis_url = f"redis://127.0.0.1:{start_redis(procs)}/0"
        upstreams = {
            "alpha": [("127.0.0.1", fleet["vllm-alpha"].port)],
            "tiny": [("127.0.0.1", fleet["vllm-tiny"].port)],
        }
        gateway = start_gateway(
            procs,
            "gw",
            spec=spec,
            plan=plan,
            addresses=gateway_addresses(upstreams, keys_dir, tokenizers_dir(fleet), "-routed"),
            redis_url=redis_url,
            route_examples=read_route_examples(spec, project),
        )
        yield Routed(gateway, key, fleet)
    finally:
        procs.stop_all()


def _decisions(gateway: Gateway) -> dict[str, float]:
    prefix = gm.DIFFICULTY_ROUTES_TOTAL + "{"
    return {
        sample.split('decision="')[1].split('"')[0]: value
        for sample, value in scrape(gateway.metrics_url).items()
        if sample.startswith(prefix) and 'tier="auto"' in sample
    }


def _ask(client: openai.OpenAI, prompt: str, model: str = "auto", **kwargs: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], **{"max_tokens": 4, **kwargs}
    )


def _until_scored(routed: Routed) -> None:
    """The examples are embedded in the background at start: ask until a prompt is scored (an unscored one goes to
    the strong model, as it should), then forget the warm-up in the counts the tests read."""
    client = routed.client()
    for _ in range(200):
        if _ask(client, EASY[0]).headers.get(ROUTE_HEADER) != "unscored":
            return
    pytest.fail("the tier's examples were never embedded")


def test_easy_prompts_go_to_the_cheap_model_and_hard_ones_to_the_strong(routed: Routed) -> None:
    _until_scored(routed)
    client = routed.client()
    before = _decisions(routed.gateway)
    for prompt in [*EASY[:3], *EASY_ASKED]:
        response = _ask(client, prompt)
        assert (response.parse().model, response.headers[ROUTE_HEADER]) == ("tiny", "cheap"), prompt
        assert response.headers[gc.UPSTREAM_HEADER] == "tiny"
    for prompt in [*HARD[:3], *HARD_ASKED]:
        response = _ask(client, prompt, stream=False)
        assert (response.parse().model, response.headers[ROUTE_HEADER]) == ("alpha", "strong"), prompt
    after = _decisions(routed.gateway)
    assert after.get("cheap", 0) - before.get("cheap", 0) == 5
    assert after.get("strong", 0) - before.get("strong", 0) == 5


def test_a_streamed_answer_says_where_it_was_routed(routed: Routed) -> None:
    _until_scored(routed)
    with routed.client().chat.completions.with_streaming_response.create(
        model="auto", messages=[{"role": "user", "content": HARD_ASKED[0]}], max_tokens=4, stream=True
    ) as response:
        assert response.headers[ROUTE_HEADER] == "strong"
        models = {json.loads(line[6:])["model"] for line in response.iter_lines() if line.startswith("data: {")}
    assert models == {"alpha"}


def test_a_named_model_is_pinned_and_a_cached_answer_keeps_its_route(routed: Routed) -> None:
    _until_scored(routed)
    client = routed.client()
    pinned = _ask(client, HARD_ASKED[1], model="tiny")  # the tenant pins the cheap model: no decision
    assert pinned.parse().model == "tiny"
    assert ROUTE_HEADER not in pinned.headers  # an empty metadata value adds no header
    first = _ask(client, EASY_ASKED[1], temperature=0)
    assert first.headers[ROUTE_HEADER] == "cheap"
    for _ in range(100):  # the answer is stored in the background after it went out
        again = _ask(client, EASY_ASKED[1], temperature=0)
        if again.headers.get("x-inferplane-cache") == "hit":
            break
    else:
        pytest.fail("the answer was never served from the cache")
    assert (again.headers[ROUTE_HEADER], again.parse().model) == ("cheap", "tiny")


def test_the_routes_examples_are_read_from_the_project(tmp_path: Path) -> None:
    """The file the program reads is the one the spec names, relative to the project."""
    (tmp_path / "routes").mkdir()
    text = json.dumps({"prompt": "a", "cheap_correct": True, "strong_correct": False}) + "\n"
    (tmp_path / "routes" / "auto.jsonl").write_text(text + text.replace('"a"', '"b"').replace("false", "true"))
    assert set(read_route_examples(_spec(), tmp_path)) == {"auto"}
