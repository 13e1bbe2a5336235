"""Routing by difficulty in the processor: a routed tier's examples embedded at start with the real wordllama
embedder, each request for the tier sent to the cheap or the strong model by its last user message, the decision
counted and reported to Envoy, a model named by the client left alone, and unscorable prompts sent to the strong
model (:mod:`inferplane.processor.difficulty_stage`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from inferplane.processor import metrics as gm
from inferplane.processor.cache.config import EndpointEmbedderConfig, WordLlamaEmbedderConfig
from inferplane.processor.config import (
    METADATA_NAMESPACE,
    ROUTE_METADATA_KEY,
    DifficultyRouteConfig,
    ProcessorConfig,
    TenantConfig,
    TierConfig,
)
from inferplane.processor.difficulty_stage import DifficultyStage, Outcome, Routed
from inferplane.processor.ext_proc import Processor
from tests.gateway_support import until
from tests.ports import free_port
from tests.processor.test_ext_proc import _chat, _forwarded, _model, _request

EASY = [f"hello there, how is the weather in city number {i} today? any sunshine?" for i in range(12)]
HARD = [f"prove the theorem on prime gaps and modular forms for lemma {i} rigorously" for i in range(12)]
EASY_ASKED = "hello, how is the weather in the city today? sunshine?"
HARD_ASKED = "prove the theorem on prime gaps and modular forms rigorously"


@pytest.fixture
def examples(tmp_path: Path) -> str:
    lines = [{"prompt": p, "cheap_correct": True, "strong_correct": True} for p in EASY]
    lines += [{"prompt": p, "cheap_correct": False, "strong_correct": True} for p in HARD]
    path = tmp_path / "route-auto.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    return str(path)


def _route(examples: str, **overrides: Any) -> DifficultyRouteConfig:
    fields: dict[str, Any] = {
        "cheap": "small",
        "strong": "large",
        "threshold": 0.5,
        "neighbours": 5,
        "examples_file": examples,
        "embedder": WordLlamaEmbedderConfig(),
    }
    return DifficultyRouteConfig(**{**fields, **overrides})


def _tier(examples: str, **overrides: Any) -> TierConfig:
    return TierConfig(name="auto", models=("large", "small"), route=_route(examples, **overrides))


async def _decide(stage: DifficultyStage, tier: str, text: str | None) -> Routed:
    """What the processor does: embed (awaiting the embedder), then decide."""
    scored, vector = await stage.embed(tier, text)
    return stage.decide(tier, scored, vector)


def test_the_stage_sends_easy_prompts_to_the_cheap_model_and_hard_ones_to_the_strong(examples: str) -> None:
    counted: list[tuple[str, Outcome]] = []

    async def run() -> None:
        stage = DifficultyStage((_tier(examples),), {}, lambda tier, outcome: counted.append((tier, outcome)))
        assert stage.routes_tier("auto") and not stage.routes_tier("other")
        unready = await _decide(stage, "auto", EASY_ASKED)  # examples not embedded yet: strong, unscored
        assert (unready.model, unready.outcome, unready.vector) == ("large", "unscored", None)
        await stage.start()
        await until(lambda: "auto" in stage.scorers, 20.0)
        easy, hard = await _decide(stage, "auto", EASY_ASKED), await _decide(stage, "auto", HARD_ASKED)
        assert (easy.model, easy.outcome, easy.score) == ("small", "cheap", 0.0)
        assert (hard.model, hard.outcome, hard.score) == ("large", "strong", 1.0)
        assert easy.text == EASY_ASKED and easy.vector is not None and len(easy.vector) == 256
        nothing = await _decide(stage, "auto", None)  # no user text (a tool result last): strong
        assert (nothing.model, nothing.outcome) == ("large", "unscored")
        await stage.aclose()

    asyncio.run(run())
    assert counted == [("auto", "unscored"), ("auto", "cheap"), ("auto", "strong"), ("auto", "unscored")]


def test_a_down_embedder_sends_every_prompt_to_the_strong_model(examples: str) -> None:
    down = EndpointEmbedderConfig(url=f"http://127.0.0.1:{free_port()}/v1", model="m", dimensions=384, timeout_ms=50)

    async def run() -> None:
        stage = DifficultyStage((_tier(examples, embedder=down),), {}, lambda tier, outcome: None)
        await stage.start()
        routed = await _decide(stage, "auto", EASY_ASKED)
        assert (routed.model, routed.outcome) == ("large", "unscored")
        assert "auto" not in stage.scorers  # still trying the examples, backing off
        await stage.aclose()

    asyncio.run(run())


def _config(tokenizer: str, examples: str) -> ProcessorConfig:
    large, small = _model("large", tokenizer, tier="premium"), _model("small", tokenizer, tier="standard")
    return ProcessorConfig(
        grpc_port=1,
        metrics_port=2,
        tenant_header="x-inferplane-tenant",
        auth_required=True,
        redis_url_env="UNUSED",
        models=(large, small),
        tiers=(TierConfig(name="premium", models=("large",)), _tier(examples)),
        tenants=(TenantConfig(name="t", tiers=("premium", "auto"), requests_per_minute=100, tokens_per_minute=10**5),),
    )


def test_a_request_for_a_routed_tier_goes_where_its_prompt_scores(tokenizer_file: str, examples: str) -> None:
    registry = CollectorRegistry()

    async def run() -> None:
        processor = Processor(_config(tokenizer_file, examples), None, registry)
        stage = processor.difficulty
        assert stage is not None
        await stage.start()  # what Processor.start does beside following the (here absent) replicas
        await until(lambda: "auto" in stage.scorers, 20.0)
        for asked, model, outcome in ((EASY_ASKED, "small", "cheap"), (HARD_ASKED, "large", "strong")):
            _, response = await _request(processor, _chat(asked, model="auto"))
            assert _forwarded(response)["model"] == model
            metadata = response.dynamic_metadata.fields[METADATA_NAMESPACE].struct_value.fields
            assert metadata[ROUTE_METADATA_KEY].string_value == outcome
        # A client naming a model pins it: no decision, no route in the metadata.
        _, response = await _request(processor, _chat(HARD_ASKED, model="small"))
        assert _forwarded(response)["model"] == "small"
        assert METADATA_NAMESPACE not in response.dynamic_metadata.fields
        await processor.aclose()

    asyncio.run(run())
    counts = {
        (s.labels["tier"], s.labels["decision"]): s.value
        for metric in registry.collect()
        if metric.name == gm.DIFFICULTY_ROUTES_TOTAL.removesuffix("_total")
        for s in metric.samples
        if s.name.endswith("_total")
    }
    assert counts == {("auto", "cheap"): 1.0, ("auto", "strong"): 1.0}


def test_a_route_must_name_its_tiers_models(examples: str) -> None:
    with pytest.raises(ValueError, match="tier 'auto' routes to tiny, not among its models"):
        TierConfig(name="auto", models=("large", "small"), route=_route(examples, cheap="tiny"))
