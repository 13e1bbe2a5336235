"""What the end-to-end modules share beyond the fleet: the served embedder's URL and the labelled sets scored against
it once.

Scoring is the costly part of the embedder's tests (about 20 ms of one core a prompt: all-MiniLM-L6-v2 on vLLM's CPU
build with the one thread ``EmbedderService`` gives it), and three tests scored the same shipped set again (the
semantic guard E2E, the gateway embedder E2E and its ``cache eval`` test). Both modules are in the fleet's xdist group,
so one worker scores the shipped set and the generated near misses once, in one pass, for both.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from inferplane.components.catalog.embedders import get_embedding_model
from inferplane.components.spec.platform_spec import CacheSpec
from inferplane.tool.cache_eval import Scored, adversarial_pairs, load_pairs, score
from tests.fleet import Fleet

SERVED_EMBEDDER = get_embedding_model("all-minilm-l6-v2")
"""The catalog's embedder the fleet serves."""


def served_cache_spec(url: str) -> CacheSpec:
    """The served model at ``url`` under its catalog name: the catalog's threshold and word bounds apply."""
    embedder = {
        "kind": "endpoint",
        "url": url,
        "model": SERVED_EMBEDDER.name,
        "dimensions": SERVED_EMBEDDER.dimensions,
    }
    return CacheSpec.model_validate({"embedder": embedder, "semantic_similarity_threshold": SERVED_EMBEDDER.threshold})


@dataclass(frozen=True)
class ServedScores:
    """The labelled sets scored against the served embedder."""

    shipped: list[Scored]
    """The shipped labelled set (``load_pairs(None)``), in its file's order."""
    generated: list[Scored]
    """The near misses generated from its paraphrases (``adversarial_pairs()`` less its paraphrases), in order."""


@pytest.fixture(scope="session")
def served_embedder_url(fleet: Fleet) -> str:
    """The fleet's served embedder (one for the whole run; skips where the fleet has none)."""
    return fleet.embedder.url


@pytest.fixture(scope="session")
def served_scores(served_embedder_url: str) -> ServedScores:
    """Both sets scored in one pass (each prompt and each differing word embedded once)."""
    _, shipped = load_pairs(None)
    generated = [p for p in adversarial_pairs() if not p.same]
    scored = score([*shipped, *generated], served_cache_spec(served_embedder_url))
    return ServedScores(shipped=scored[: len(shipped)], generated=scored[len(shipped) :])
