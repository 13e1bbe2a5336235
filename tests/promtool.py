"""Running ``promtool`` (Debian's ``prometheus`` package, installed by ``.ci/run``) on generated rules.

Tests that need it skip with a reason when it is absent, so a machine without it still runs everything else.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.components.observability.alerts import RecordingRule, RuleGroup, rule_file


def promtool() -> str:
    """Path of promtool, or skip the test."""
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    return path


def run(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """promtool ``args`` in ``cwd``; the output is kept for assertion messages."""
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def check_rules(groups: Sequence[RuleGroup], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` on the groups' rule file."""
    path = tmp_path / "rules.yaml"
    path.write_text(rule_file(groups))
    return run(["check", "rules", str(path)], tmp_path)


def check_expressions(expressions: Iterable[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Parse arbitrary PromQL with promtool, each as a recording rule of one group."""
    rules = tuple(RecordingRule(record=f"check:expr:{i}", expr=e) for i, e in enumerate(expressions))
    return check_rules([RuleGroup(name="expressions", rules=rules)], tmp_path)


def run_rule_tests(
    groups: Sequence[RuleGroup], tests: Sequence[Mapping[str, Any]], tmp_path: Path, interval: str = "1m"
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` with ``tests`` (promtool's ``tests:`` items) against the groups."""
    (tmp_path / "rules.yaml").write_text(rule_file(groups))
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump(
            {"rule_files": ["rules.yaml"], "evaluation_interval": interval, "tests": list(tests)}, sort_keys=False
        )
    )
    return run(["test", "rules", "tests.yaml"], tmp_path)
