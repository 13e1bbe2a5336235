"""``inferplane cache eval`` on the shipped labelled set and on files a team writes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from inferplane.components.spec.platform_spec import CacheEmbedderSpec, CacheSpec
from inferplane.processor.cache.guards import names
from inferplane.tool.cache_eval import (
    CHECKS,
    NEAR_MISS_CLASSES,
    PARAPHRASE_CLASSES,
    Pair,
    Scored,
    by_class,
    by_guard,
    embedder_option,
    load_pairs,
    point,
    score,
)
from inferplane.tool.cli import main


@pytest.fixture(scope="module")
def shipped() -> list[Scored]:
    _, pairs = load_pairs(None)
    return score(pairs, CacheSpec())


def test_the_shipped_set_has_500_pairs_in_every_class_half_of_them_near_misses() -> None:
    _, pairs = load_pairs(None)
    assert len(pairs) >= 500
    same = sum(p.same for p in pairs)
    assert abs(same - (len(pairs) - same)) <= 0.05 * len(pairs)
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)
    counts = Counter(p.kind for p in pairs)
    assert set(counts) == {*PARAPHRASE_CLASSES, *NEAR_MISS_CLASSES}  # every pair has a class, every class pairs
    assert min(counts.values()) >= 15


def test_the_default_threshold_has_no_false_hit_and_the_counterpart_check_stands_without_the_guards(
    shipped: list[Scored],
) -> None:
    spec = CacheSpec()
    guarded = point(shipped, spec.threshold, guards=True)
    bare = point(shipped, spec.threshold, guards=False)
    assert (guarded.false_hits, guarded.precision) == (0, 1.0)
    assert guarded.recall >= 0.35  # static embeddings, and only the differences shown harmless (docs/caching.md)
    assert bare.false_hits >= 80
    # Static embeddings cannot see word order: role swaps ("Did the dog bite the man?" / "... the man bite the
    # dog?") score 1.0 and differ in no word; both the order guard and the check's order refuse them.
    swaps = [s for s in shipped if s.pair.kind == "direction" and s.similarity > 0.999 and "order" in s.refused_by]
    assert len(swaps) >= 8 and all("counterpart" in s.refused_by for s in swaps)
    without = {g.left_out: g.at.false_hits for g in by_guard(shipped, spec.threshold)}
    assert without[None] == 0 and without["all"] == bare.false_hits
    # Any one guard left out costs nothing: the check stands on its own; the guards alone were tuned on this set, so
    # leaving the check out adds nothing here either (the generated set is where it counts:
    # tests/tool/test_cache_adversary.py, tests/e2e).
    assert {name for name in CHECKS if without[name] > 0} == set()
    checked_alone = point(shipped, spec.threshold, True, frozenset(names()))
    # ... and the guards refuse no paraphrase the check admits (alternatives trading places, an acronym spelled out,
    # a synonym or an inflection of a word of opposites: each a guard's refusal until they were read as such).
    assert checked_alone.false_hits == 0 and checked_alone.recall == guarded.recall
    leaks = {c.kind: c.bare.false_hits for c in by_class(shipped, spec.threshold, True)}
    assert leaks["entity"] == 0 and min(v for k, v in leaks.items() if k in NEAR_MISS_CLASSES and k != "entity") > 0


def test_a_class_must_agree_with_the_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"a": "x", "b": "y", "same": true, "class": "voice"}\n')
    assert load_pairs(pairs)[1] == [Pair(a="x", b="y", same=True, kind="voice")]
    pairs.write_text('{"a": "x", "b": "y", "same": true, "class": "negation"}\n')
    assert main(["cache", "eval", "--pairs", str(pairs)]) == 2
    assert "pairs.jsonl:1: line: Value error, class 'negation' is a near-miss class but same is true" in (
        capsys.readouterr().err.replace("\n", " ")
    )
    pairs.write_text('{"a": "x", "b": "y", "same": false, "class": "sarcasm"}\n')
    assert main(["cache", "eval", "--pairs", str(pairs)]) == 2
    assert "Input should be 'reorder', 'synonym'" in capsys.readouterr().err.replace("\n", " ")


def _four_pairs(tmp_path: Path) -> Path:
    pairs = tmp_path / "pairs.jsonl"
    lines = [
        {"a": "How do I reset my password?", "b": "How can I reset my password?", "same": True, "class": "synonym"},
        # 1.0 with wordllama; the order guard refuses it.
        {"a": "Did the dog bite the man?", "b": "Did the man bite the dog?", "same": False, "class": "direction"},
        # Above 0.9; the number guard refuses it.
        {"a": "Is 17 a prime number?", "b": "Is 15 a prime number?", "same": False},
        # 0.73 with wordllama, no guard reads it: a false hit at 0.7 before the counterpart check ("car" and "bike"
        # are 0.50 as lone words).
        {"a": "How do I change a car tire?", "b": "How do I change a bike tire?", "same": False, "class": "entity"},
    ]
    pairs.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return pairs


def test_json_reports_each_class_and_each_guard_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "eval", "--pairs", str(_four_pairs(tmp_path)), "--json", "--threshold", "0.7"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["threshold"], result["false_hits"], result["recall"], result["embedder"]) == (
        0.7,
        0,
        1.0,
        "wordllama",
    )
    assert list(result["classes"]) == ["synonym", "entity", "direction", "unclassified"]
    assert result["classes"]["entity"] == {
        "pairs": 1,
        "hits": 0,
        "precision": 1.0,
        "recall": 1.0,
        "false_hits": 0,
        "false_hits_without_guards": 1,
    }
    assert result["classes"]["direction"]["false_hits"] == 0
    assert result["classes"]["direction"]["false_hits_without_guards"] == 1
    assert result["classes"]["synonym"]["recall"] == 1.0
    assert list(result["guards"]) == ["all", *(f"without_{name}" for name in CHECKS), "none"]
    false_hits = {name: figures["false_hits"] for name, figures in result["guards"].items()}
    # The role swap and the other number are refused by the check and a guard each; the bike only by the check.
    assert false_hits == {"all": 0, "without_counterpart": 1, "none": 3} | {f"without_{name}": 0 for name in names()}


def test_embedder_option_measures_another_embedder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pairs = str(_four_pairs(tmp_path))
    assert main(["cache", "eval", "--pairs", pairs, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recall"] == 1.0
    # 64 dimensions: the car and the bike come closer (0.76), above 0.75 without guards.
    bare: list[int] = []
    for option in ((), ("--embedder", "wordllama,dimensions=64")):
        assert main(["cache", "eval", "--pairs", pairs, *option, "--threshold", "0.75", "--json"]) == 0
        bare.append(json.loads(capsys.readouterr().out)["guards"]["none"]["false_hits"])
    assert bare == [2, 3]
    assert embedder_option("endpoint, url=http://127.0.0.1:9/v1, model=m, dimensions=384") == CacheEmbedderSpec(
        kind="endpoint", url="http://127.0.0.1:9/v1", model="m", dimensions=384
    )
    for option, message in (
        (("--embedder", "endpoint,url=http://127.0.0.1:9/v1"), "an endpoint embedder needs model, dimensions"),
        (("--embedder", "wordllama,size=3"), "'size=3' is not url=..., model=... or dimensions=N"),
        (("--threshold", "0.5"), "--threshold: 0.5 is not above 0.5 and at most 1.0"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["cache", "eval", "--pairs", pairs, *option])
        assert exited.value.code == 2 and message in capsys.readouterr().err


def test_cli_json_prints_the_figures_by_class_and_guard(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "eval", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"threshold", "precision", "recall", "false_hits", "pairs", "embedder", "classes", "guards"}
    assert result["threshold"] == 0.95 and result["false_hits"] == 0 and result["pairs"] >= 500
    assert set(result["classes"]) == {*PARAPHRASE_CLASSES, *NEAR_MISS_CLASSES}


def test_cli_exits_1_and_names_the_false_hit_when_the_threshold_lets_one_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "pairs.jsonl"
    # A plural with its own meaning that wordllama scores as the same word ("custom"/"customs" 0.99 as lone words):
    # the counterpart check's known limit with a static embedder (all-MiniLM-L6-v2 scores them 0.40 and refuses it).
    line = {"a": "Where do I get a custom form?", "b": "Where do I get a customs form?", "same": False}
    pairs.write_text(json.dumps({**line, "class": "entity"}) + "\n" + _four_pairs(tmp_path).read_text())
    assert main(["cache", "eval", "--pairs", str(pairs), "--threshold", "0.7"]) == 1
    out = capsys.readouterr().out
    assert "threshold 0.70, guards on: precision 0.500, recall 1.000, false hits 1" in out
    assert "false hit (0.995): 'Where do I get a custom form?' / 'Where do I get a customs form?'" in out
    assert "│ all but counterpart │     0.333 │  1.000 │          2 │" in out


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
