"""Routing by prompt difficulty: whether a tier's cheap or its strong model answers a prompt, from labelled examples.

A labelled example is a prompt with whether the tier's cheap model and its strong model each answered it correctly:
the labels RouteLLM judges routers by (arXiv 2406.18665; its MMLU set pairs Mixtral-8x7B with GPT-4). An example's
*gain* is what sending it to the strong model buys: 1 when only the strong model got it right, -1 when only the cheap
one did, 0 when both or neither did. A prompt's score is the mean gain of its ``neighbours`` nearest examples by
cosine similarity of the gateway's own embeddings (the semantic cache's embedder: one embedding serves both), and
the strong model answers when the score reaches the tier's threshold. Nearest labelled neighbours over input
embeddings match or beat learned routers because a model's success is locally consistent in embedding space
("When Simple kNN Beats Complex Learned Routers", arXiv 2505.12601).

Scoring is one matrix-vector product and a partial sort over the examples; the threshold is the stack's knob,
chosen with ``inferplane route eval`` on the team's own labels. Nothing here imports the platform's other packages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from inferplane.processor.json_lines import JsonLinesError, parse_json_lines

Decision = Literal["strong", "cheap"]
"""Which model of a difficulty-routed tier answers a prompt."""
DECISIONS: tuple[Decision, ...] = ("strong", "cheap")
MAX_EXAMPLE_CHARS = 8192
"""Longest example prompt read: embedders see at most a few hundred tokens (all-MiniLM-L6-v2: 256), so a longer
example only costs room."""

MAX_ROUTE_CHARS = 1000
"""A prompt is scored by its first 1,000 characters, as many as the response cache embeds
(``CacheConfig.semantic_max_chars``): all-MiniLM-L6-v2 reads at most 256 tokens (about 1,000 characters of English),
and a served embedder refuses a longer input rather than cut it."""

Vectors = npt.NDArray[np.float32]


def route_text(text: str) -> str:
    """What of a prompt is embedded for its score (the examples' and the requests' alike)."""
    return text[:MAX_ROUTE_CHARS]


class LabelledExample(BaseModel):
    """One line of an examples file: a prompt and how each model of the tier did on it."""

    # strict: ``"cheap_correct": "yes"`` or ``1`` is a mistake in the labels, not a boolean.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    prompt: str = Field(min_length=1, max_length=MAX_EXAMPLE_CHARS, description="The prompt (a last user message).")
    cheap_correct: bool = Field(description="The tier's cheap model answered it correctly.")
    strong_correct: bool = Field(description="The tier's strong model answered it correctly.")

    @property
    def gain(self) -> int:
        """What the strong model buys on this prompt: 1, 0 or -1."""
        return int(self.strong_correct) - int(self.cheap_correct)


class ExamplesError(ValueError):
    """An examples file cannot be read; the message names the file and the line."""


def parse_examples(text: str, name: str) -> tuple[LabelledExample, ...]:
    """The examples of a JSON-lines text (one :class:`LabelledExample` a line, blank lines skipped), or
    :class:`ExamplesError` naming ``name`` and the line."""
    try:
        examples = parse_json_lines(text, name, LabelledExample)
    except JsonLinesError as error:
        raise ExamplesError(str(error)) from None
    if not examples:
        raise ExamplesError(f"{name}: no examples")
    if len({e.gain for e in examples}) < 2:
        raise ExamplesError(f"{name}: every example has the same gain, so no prompt could score apart from another")
    return tuple(examples)


def gains(examples: Sequence[LabelledExample]) -> npt.NDArray[np.float32]:
    """The examples' gains as a vector, in order."""
    return np.fromiter((e.gain for e in examples), dtype=np.float32, count=len(examples))


class DifficultyScorer:
    """Scores prompts by the mean gain of their nearest labelled examples."""

    def __init__(self, vectors: Vectors, example_gains: npt.NDArray[np.float32], neighbours: int) -> None:
        """``vectors``: the examples' unit embeddings, one row each; ``example_gains``: their gains, in order;
        ``neighbours``: how many nearest examples a score averages (all of them when there are fewer)."""
        if vectors.ndim != 2 or len(vectors) != len(example_gains) or len(vectors) == 0:
            raise ValueError(f"{len(example_gains)} gains for vectors of shape {vectors.shape}")
        if neighbours < 1:
            raise ValueError(f"neighbours must be at least 1, not {neighbours}")
        # Stored a dimension a row: a prompt's similarities are then one row vector times a matrix, which OpenBLAS
        # runs twice as fast here as the matrix times a vector (1,500 x 256: 180 -> 81 us p50; memory-bound beyond).
        self._columns = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32).T)
        self._gains = np.asarray(example_gains, dtype=np.float32)
        self.neighbours = min(neighbours, len(vectors))

    @property
    def dimensions(self) -> int:
        """Length of the vectors it compares."""
        return int(self._columns.shape[0])

    def __len__(self) -> int:
        return int(self._columns.shape[1])

    def score(self, vector: Vectors) -> float:
        """One prompt's score, in [-1, 1]: the mean gain of its nearest examples."""
        similarities = vector @ self._columns
        k = self.neighbours
        if k < len(similarities):
            nearest = np.argpartition(similarities, len(similarities) - k)[-k:]
            return float(self._gains[nearest].mean())
        return float(self._gains.mean())

    def scores(self, vectors: Vectors, *, leave_out_self: bool = False) -> npt.NDArray[np.float64]:
        """Many prompts' scores at once (an evaluation's). ``leave_out_self``: ``vectors`` are the examples
        themselves, in order, and each is scored without itself (a fair score of a training prompt)."""
        similarities = vectors @ self._columns
        if leave_out_self:
            if similarities.shape[0] != similarities.shape[1]:
                raise ValueError("leave_out_self scores the examples themselves")
            np.fill_diagonal(similarities, -np.inf)
        k = min(self.neighbours, similarities.shape[1] - (1 if leave_out_self else 0))
        if k < 1:
            raise ValueError("no example is left to score by")
        nearest = np.argpartition(similarities, similarities.shape[1] - k, axis=1)[:, -k:]
        return np.asarray(self._gains[nearest].mean(axis=1), dtype=np.float64)


def decide(score: float, threshold: float) -> Decision:
    """The strong model at or above the threshold, else the cheap one."""
    return "strong" if score >= threshold else "cheap"
