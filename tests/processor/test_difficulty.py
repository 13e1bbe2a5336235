"""Routing by difficulty's scoring: the examples file, the gains, and the mean gain of the nearest examples, checked
against a brute-force sort (:mod:`inferplane.processor.difficulty`)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.processor.difficulty import (
    MAX_ROUTE_CHARS,
    DifficultyScorer,
    ExamplesError,
    LabelledExample,
    decide,
    gains,
    parse_examples,
    route_text,
)


def _line(prompt: str, cheap: object, strong: object) -> str:
    return json.dumps({"prompt": prompt, "cheap_correct": cheap, "strong_correct": strong})


@pytest.mark.parametrize(("cheap", "strong"), list(itertools.product((False, True), repeat=2)))
def test_the_gain_is_what_the_strong_model_buys(cheap: bool, strong: bool) -> None:
    example = LabelledExample(prompt="p", cheap_correct=cheap, strong_correct=strong)
    assert example.gain == {(False, True): 1, (True, False): -1}.get((cheap, strong), 0)


def test_an_examples_file_is_read_line_by_line_blank_lines_skipped() -> None:
    text = "\n".join([_line("easy", True, True), "", _line("hard", False, True), "  ", _line("odd", True, False)])
    examples = parse_examples(text + "\n", "f.jsonl")
    assert [e.prompt for e in examples] == ["easy", "hard", "odd"]
    assert gains(examples).tolist() == [0.0, 1.0, -1.0]
    # JSON may hold U+2028 unescaped inside a string: still one line.
    assert parse_examples(_line("a\u2028b", True, True) + "\n" + _line("c", False, True), "f")[0].prompt == "a\u2028b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _line("ok", True, True) + "\n" + _line("p", "yes", True),
            "f.jsonl:2: cheap_correct: Input should be a valid boolean",
        ),
        (_line("ok", True, True) + "\n" + _line("p", 1, True), "f.jsonl:2: cheap_correct"),
        (json.dumps({"prompt": "p", "cheap_correct": True}), "f.jsonl:1: strong_correct: Field required"),
        (json.dumps({"prompt": "p", "cheap_correct": True, "strong_correct": True, "x": 1}), "f.jsonl:1: x: Extra"),
        (_line("", True, False), "f.jsonl:1: prompt: String should have at least 1 character"),
        ("not json", "f.jsonl:1:"),
        ("\n\n", "f.jsonl: no examples"),
        (_line("a", True, True) + "\n" + _line("b", False, False), "f.jsonl: every example has the same gain"),
    ],
)
def test_a_bad_examples_file_is_refused_naming_the_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ExamplesError) as raised:
        parse_examples(text, "f.jsonl")
    assert message in str(raised.value)


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return unit


def _brute(vectors: np.ndarray, example_gains: np.ndarray, query: np.ndarray, k: int, skip: int | None = None) -> float:
    order = sorted((i for i in range(len(vectors)) if i != skip), key=lambda i: -float(np.dot(vectors[i], query)))
    return float(np.mean([example_gains[i] for i in order[:k]]))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=40),
    k=st.integers(min_value=1, max_value=50),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_a_score_is_the_mean_gain_of_the_nearest_examples(n: int, k: int, seed: int) -> None:
    """Random vectors (no two similarities tie): one prompt's score, the batch's and the leave-one-out batch's are
    each the mean gain of the k most similar examples (all of them when there are fewer than k)."""
    rng = np.random.default_rng(seed)
    vectors = _unit(rng.normal(size=(n, 8)))
    example_gains = rng.integers(-1, 2, size=n).astype(np.float32)
    queries = _unit(rng.normal(size=(5, 8)))
    scorer = DifficultyScorer(vectors, example_gains, k)
    expected = [_brute(vectors, example_gains, q, min(k, n)) for q in queries]
    assert [scorer.score(q) for q in queries] == pytest.approx(expected, abs=1e-6)
    assert scorer.scores(queries).tolist() == pytest.approx(expected, abs=1e-6)
    left_out = [_brute(vectors, example_gains, vectors[i], min(k, n - 1), skip=i) for i in range(n)]
    assert scorer.scores(vectors, leave_out_self=True).tolist() == pytest.approx(left_out, abs=1e-6)


def test_the_threshold_itself_goes_to_the_strong_model() -> None:
    assert decide(0.25, 0.25) == "strong"
    assert decide(0.2499, 0.25) == "cheap"
    assert decide(-1.0, -1.0) == "strong"


def test_a_scorer_refuses_mismatched_inputs() -> None:
    vectors = _unit(np.eye(3))
    with pytest.raises(ValueError, match="2 gains for vectors of shape"):
        DifficultyScorer(vectors, np.zeros(2, dtype=np.float32), 1)
    with pytest.raises(ValueError, match="neighbours must be at least 1"):
        DifficultyScorer(vectors, np.zeros(3, dtype=np.float32), 0)


def test_a_prompt_is_scored_by_its_first_characters() -> None:
    long = "x" * (MAX_ROUTE_CHARS + 10)
    assert route_text(long) == "x" * MAX_ROUTE_CHARS
    assert route_text("short") == "short"
