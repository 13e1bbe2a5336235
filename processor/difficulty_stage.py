"""Routing by difficulty as a stage of the processor: each routed tier's examples embedded once, a decision a request.

:class:`inferplane.processor.ext_proc.Processor` asks :meth:`DifficultyStage.embed`, then
:meth:`DifficultyStage.decide`, when a request names a tier with a ``route``: the last user message (its first
:data:`inferplane.processor.difficulty.MAX_ROUTE_CHARS` characters) is embedded by the tier's embedder, which is the
response cache's (the vector is handed to the cache's lookup, so one embedding serves both), and scored against the
tier's examples. A prompt that cannot be scored (no user text, the
embedder failing or slower than its bound, the examples not embedded yet) goes to the strong model: a wrong
``cheap`` costs an answer, a wrong ``strong`` only money.

The examples are embedded in the background at start (a served embedder may still be starting; the examples are
tried again, backing off up to :data:`RETRY_MAX_SECONDS`), with a client of their own whose timeout suits batches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
import numpy as np

from inferplane.processor.cache.config import EmbedderConfig, EndpointEmbedderConfig
from inferplane.processor.cache.embedders import (
    Embedder,
    EmbedderError,
    EndpointEmbedder,
    Vector,
    embed_in_batches,
    embed_timeout,
    make_embedder,
)
from inferplane.processor.config import DifficultyRouteConfig, TierConfig
from inferplane.processor.difficulty import DifficultyScorer, decide, gains, parse_examples, route_text

log = logging.getLogger(__name__)

Outcome = Literal["strong", "cheap", "unscored"]
"""A routed request's decision as counted and echoed: ``unscored`` went to the strong model unscored."""
EXAMPLES_BATCH = 64
"""Examples per embeddings request at start."""
EXAMPLES_TIMEOUT_SECONDS = 60.0
"""Bound on one batch of examples from a served embedder (the request path's bound is the embedder's ``timeout_ms``)."""
RETRY_MAX_SECONDS = 30.0
"""Longest wait between two tries at embedding a tier's examples."""


@dataclass(frozen=True)
class Routed:
    """One request's decision: the model, why, and the prompt's vector when it was embedded."""

    model: str
    outcome: Outcome
    score: float | None
    text: str | None
    vector: Vector | None
    embedder: str
    """:func:`embedder_key` of what made ``vector``."""


def embedder_key(config: EmbedderConfig) -> str:
    """One key per distinct embedder configuration: equal configurations share one embedder."""
    return config.model_dump_json()


class DifficultyStage:
    """The routed tiers' scorers and the embedders that feed them."""

    def __init__(
        self,
        tiers: tuple[TierConfig, ...],
        shared: Mapping[str, Embedder],
        counted: Callable[[str, Outcome], None],
    ) -> None:
        """``shared``: embedders already made (the response cache's), by :func:`embedder_key`; ``counted`` is
        called with the tier and the outcome of every decision."""
        self.routes: dict[str, DifficultyRouteConfig] = {t.name: t.route for t in tiers if t.route is not None}
        self.embedders: dict[str, Embedder] = dict(shared)
        self._made: list[Embedder] = []
        for route in self.routes.values():
            key = embedder_key(route.embedder)
            if key not in self.embedders:
                self.embedders[key] = made = make_embedder(route.embedder)
                self._made.append(made)
        self.scorers: dict[str, DifficultyScorer] = {}
        self._counted = counted
        self._timeouts = {tier: embed_timeout(route.embedder) for tier, route in self.routes.items()}
        self._tasks: list[asyncio.Task[None]] = []

    def routes_tier(self, tier: str) -> bool:
        """Whether requests for ``tier`` are routed by difficulty."""
        return tier in self.routes

    async def start(self) -> None:
        """Embed every routed tier's examples in the background."""
        for tier in self.routes:
            self._tasks.append(asyncio.ensure_future(self._load(tier)))

    async def _load(self, tier: str) -> None:
        try:
            await self._embed_tier(tier)
        except Exception:  # a file the renderer checked cannot fail here; if it does, the tier stays unscored
            log.exception("tier %s: its examples cannot be used; every prompt goes to the strong model", tier)

    async def _embed_tier(self, tier: str) -> None:
        route = self.routes[tier]
        path = Path(route.examples_file)  # the renderer writes where it mounts them: absolute
        examples = parse_examples(path.read_text(encoding="utf-8"), str(path))
        texts = [route_text(e.prompt) for e in examples]
        wait = 1.0
        while True:
            try:
                vectors = await self._embed_examples(route.embedder, texts)
                break
            except EmbedderError as error:
                log.warning(
                    "tier %s: embedding its %d examples failed (%s); again in %.0f s", tier, len(texts), error, wait
                )
                await asyncio.sleep(wait)
                wait = min(wait * 2, RETRY_MAX_SECONDS)
        self.scorers[tier] = DifficultyScorer(np.stack(vectors), gains(examples), route.neighbours)
        log.info("tier %s: %d examples embedded; routing by difficulty", tier, len(texts))

    async def _embed_examples(self, config: EmbedderConfig, texts: list[str]) -> list[Vector]:
        if not isinstance(config, EndpointEmbedderConfig):
            return await self.embedders[embedder_key(config)].embed(texts)
        async with httpx.AsyncClient(timeout=EXAMPLES_TIMEOUT_SECONDS) as client:
            return await embed_in_batches(EndpointEmbedder(config, client=client), texts, EXAMPLES_BATCH)

    async def embed(self, tier: str, text: str | None) -> tuple[str | None, Vector | None]:
        """A request's last user message for ``tier`` as scored (its first characters) and its vector, the
        embedder's own bound applied; no vector when there is nothing to score, the tier's examples are not embedded
        yet, or the embedder failed or was late. Awaits: kept apart from :meth:`decide`, whose CPU is measured."""
        if tier not in self.scorers or not text:
            return None, None
        text = route_text(text)
        try:
            async with asyncio.timeout(self._timeouts[tier]):
                return text, (await self.embedders[embedder_key(self.routes[tier].embedder)].embed([text]))[0]
        except (EmbedderError, TimeoutError) as error:
            log.debug("tier %s: prompt not embedded (%s); strong model", tier, error)
            return text, None

    def decide(self, tier: str, text: str | None, vector: Vector | None) -> Routed:
        """Where a request for ``tier`` (a routed one) goes, from :meth:`embed`'s result; counted."""
        route = self.routes[tier]
        scorer = self.scorers.get(tier)
        key = embedder_key(route.embedder)
        routed = Routed(route.strong, "unscored", None, None, None, key)
        if scorer is not None and vector is not None:
            score = scorer.score(vector)
            outcome = decide(score, route.threshold)
            routed = Routed(route.strong if outcome == "strong" else route.cheap, outcome, score, text, vector, key)
        self._counted(tier, routed.outcome)
        return routed

    async def aclose(self) -> None:
        """Stop embedding examples; close the embedders this stage made."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for embedder in self._made:  # the shared ones are their owners' to close
            close = getattr(embedder, "aclose", None)
            if close is not None:
                await close()
