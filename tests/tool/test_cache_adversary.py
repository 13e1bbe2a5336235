"""The adversary's generated near misses, and ``inferplane cache eval --adversarial`` on them with wordllama (the
served embedder's figures: tests/e2e/test_semantic_guard_e2e.py)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from inferplane.tool.cache_adversary import GENERATED_CLASSES, generate, mutations
from inferplane.tool.cache_eval import adversarial_pairs
from inferplane.tool.cli import main


def test_each_rule_changes_one_thing() -> None:
    found = set(mutations("Is it easier to learn Python than Java in 3 weeks?"))
    assert ("opposite", "Is it harder to learn Python than Java in 3 weeks?") in found
    assert ("sibling", "Is it easier to learn Rust than Java in 3 weeks?") in found
    assert ("number", "Is it easier to learn Python than Java in 4 weeks?") in found
    assert ("unit", "Is it easier to learn Python than Java in 3 months?") in found
    assert ("negation", "Is it not easier to learn Python than Java in 3 weeks?") in found
    assert ("preposition", "Is it easier to learn Python than Java outside 3 weeks?") in found
    places = [text for kind, text in found if kind == "place"]
    assert len(places) == 2 and all(t.startswith("Is it easier to learn Python than Java in 3 weeks ") for t in places)
    assert ("degree", "Is it very safe to eat raw eggs?") in set(mutations("Is it safe to eat raw eggs?"))
    assert ("negation", "Do not cancel my order.") in set(mutations("Cancel my order."))


def test_the_generated_set_has_thousands_of_near_misses_in_every_class_each_once() -> None:
    pairs = adversarial_pairs()
    near = [p for p in pairs if not p.same]
    counts = Counter(p.kind for p in near)
    assert len(near) >= 3000 and set(counts) == set(GENERATED_CLASSES)
    assert len({(p.a, p.b) for p in near}) == len(near)
    assert all(p.a != p.b for p in near)
    assert generate([("Cancel my order.", "Please cancel my order.")]) == generate(
        [("Cancel my order.", "Please cancel my order.")] * 2
    )


def test_cache_eval_adversarial_has_no_false_hit_where_the_guards_alone_had_hundreds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for threshold in ("0.95", "0.81"):  # wordllama's default, and its lowest with no false hit on the shipped set
        assert main(["cache", "eval", "--adversarial", "--threshold", threshold, "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["false_hits"] == 0 and result["pairs"] >= 3000
        assert all(result["classes"][kind]["false_hits"] == 0 for kind in GENERATED_CLASSES)
        assert result["guards"]["without_counterpart"]["false_hits"] >= 250


def test_adversarial_and_pairs_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["cache", "eval", "--adversarial", "--pairs", "x.jsonl"])
    assert exited.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
