"""``inferplane cache eval`` on the shipped labelled set and on files a team writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferplane.components.spec.platform_spec import CacheSpec
from inferplane.tool.cache_eval import Scored, load_pairs, point, score
from inferplane.tool.cli import main


@pytest.fixture(scope="module")
def shipped() -> list[Scored]:
    _, pairs = load_pairs(None)
    return score(pairs, CacheSpec())


def test_the_shipped_set_has_200_pairs_half_of_them_near_misses() -> None:
    _, pairs = load_pairs(None)
    assert len(pairs) >= 200
    same = sum(p.same for p in pairs)
    assert abs(same - (len(pairs) - same)) <= 0.05 * len(pairs)
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)


def test_default_threshold_has_no_false_hit_and_guards_are_what_makes_it_so(shipped: list[Scored]) -> None:
    spec = CacheSpec()
    guarded = point(shipped, spec.semantic_similarity_threshold, guards=True)
    bare = point(shipped, spec.semantic_similarity_threshold, guards=False)
    assert guarded.false_hits == 0 and guarded.precision == 1.0
    assert guarded.recall >= 0.75
    assert bare.false_hits >= 20  # similarity alone serves reversed routes, swapped digits, "with"/"without"
    assert point(shipped, 0.98, guards=False).false_hits > 0  # even the guidance's strictest end


def test_cli_json_prints_the_five_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "eval", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"threshold", "precision", "recall", "false_hits", "pairs"}
    assert result["threshold"] == 0.95 and result["false_hits"] == 0 and result["pairs"] >= 200


def test_cli_exits_1_and_names_the_false_hit_when_the_threshold_lets_one_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "pairs.jsonl"
    lines = [
        {"a": "How do I reset my password?", "b": "How can I reset my password?", "same": True},
        # Word order alone, no name, number, negation or relation word: static embeddings and guards both miss it.
        {"a": "Did the dog bite the man?", "b": "Did the man bite the dog?", "same": False},
    ]
    pairs.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert main(["cache", "eval", "--pairs", str(pairs)]) == 1
    out = capsys.readouterr().out
    assert "false hits 1" in out and "'Did the dog bite the man?' / 'Did the man bite the dog?'" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"a": "x", "b": "y", "same": true}\n{"a": "x", "same": false}\n', "pairs.jsonl:2: b: Field required"),
        ('{"a": "x", "b": "y", "same": "maybe"}\n', "pairs.jsonl:1: same: Input should be a valid boolean"),
        ("not json\n", "pairs.jsonl:1: line: Invalid JSON"),
        ("\n", "pairs.jsonl: no pairs"),
    ],
)
def test_invalid_pairs_exit_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(content)
    assert main(["cache", "eval", "--pairs", str(pairs)]) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
