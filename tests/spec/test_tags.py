"""Tags: AWS's rules, the Kubernetes labels derived from them, and the files the CLI writes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity.sizing import LIMIT_POLICIES
from inferplane.components.spec.tags import aws_tag_problems, is_label_value, kubernetes_labels, label_problems
from inferplane.policies.pack import policy_named
from inferplane.tool.files import OutputFiles, UnwritableFileError

# Kubernetes' own expressions (apimachinery validation: qualifiedName and label value).
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _valid_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=0, max_size=140), st.text(max_size=300), max_size=8))
def test_tags_the_spec_accepts_always_become_valid_labels(tags: dict[str, str]) -> None:
    if aws_tag_problems(tags) or label_problems(tags):
        with pytest.raises(ValueError) if label_problems(tags) else _nothing():
            kubernetes_labels(tags)
        return
    labels = kubernetes_labels(tags)
    assert len(labels) == len(tags)
    assert all(_valid_label_key(key) for key in labels), labels
    assert all(is_label_value(value) for value in labels.values()), labels


class _nothing:  # noqa: N801 (a context manager used like pytest.raises)
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_aws_tag_rules_name_the_tag() -> None:
    assert aws_tag_problems({"team": "ML Platform EU", "cost-center": "ml/dev", "Équipe": "données"}) == []
    assert aws_tag_problems({"team": "ML Platform (EU)"}) == [
        ("team", "the tag value may use letters, digits, spaces and _ . : / = + - @ only")
    ]
    assert aws_tag_problems({"aws:owner": "x"}) == [
        ("aws:owner", "the tag key starts with 'aws:', which AWS reserves for itself")
    ]
    assert aws_tag_problems({f"t{i}": "" for i in range(47)}) == []
    assert aws_tag_problems({f"t{i}": "" for i in range(48)})[0][0] is None


def test_every_limit_names_a_policy_of_the_pack() -> None:
    assert set(LIMIT_POLICIES) == {
        "max_total_gpus",
        "max_hourly_cost_usd",
        "allowed_accelerators",
        "allow_spot",
        "max_context",
    }
    for policy in LIMIT_POLICIES.values():
        assert policy_named(policy).meta.name == policy


def test_outputs_are_written_together_or_not_at_all(tmp_path: Path) -> None:
    plan, comment = tmp_path / "plan.json", tmp_path / "comment.md"
    plan.write_text("old plan\n")
    with pytest.raises(RuntimeError), OutputFiles() as outputs:
        outputs.claim("--json", str(plan))
        outputs.claim("--markdown", str(comment))
        outputs.publish(str(plan), "new plan\n")
        raise RuntimeError("the evaluation failed")
    assert plan.read_text() == "old plan\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]

    with OutputFiles() as outputs:
        outputs.claim("--json", str(plan))
        outputs.claim("--markdown", str(comment))
        outputs.publish(str(plan), "new plan\n")
        outputs.publish(str(comment), "# comment\n")
    assert plan.read_text() == "new plan\n" and comment.read_text() == "# comment\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["comment.md", "plan.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert comment.stat().st_mode & 0o777 == 0o666 & ~umask


def test_claims_refuse_directories_missing_folders_and_repeats(tmp_path: Path) -> None:
    with OutputFiles() as outputs:
        with pytest.raises(UnwritableFileError, match="is a directory"):
            outputs.claim("--json", str(tmp_path))
        with pytest.raises(UnwritableFileError, match="does not exist"):
            outputs.claim("--json", str(tmp_path / "no" / "plan.json"))
        outputs.claim("--json", str(tmp_path / "plan.json"))
        with pytest.raises(UnwritableFileError, match="the same file as --json"):
            outputs.claim("--markdown", str(tmp_path / "." / "plan.json"))
    assert list(tmp_path.iterdir()) == []
