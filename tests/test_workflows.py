"""The GitHub workflows only use actions on the node24 runtime (GitHub removed node20 actions on 2026-09-23).

actionlint (``make lint-workflows``) checks the workflows' syntax, expressions and shell scripts; this pins the
runtime of each action, which the actionlint build on PyPI does not check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

WORKFLOWS = Path(__file__).resolve().parent.parent / ".github" / "workflows"

NODE24_SINCE: dict[str, int] = {
    "actions/checkout": 5,
    "actions/setup-python": 6,
    "actions/upload-artifact": 6,
    "actions/github-script": 8,
    "aws-actions/configure-aws-credentials": 6,
    "google-github-actions/auth": 3,
    "pulumi/actions": 7,
    "docker/setup-buildx-action": 4,
    "docker/metadata-action": 6,
    "docker/login-action": 4,
    "docker/build-push-action": 7,
}
"""The first major of each action whose ``action.yml`` declares ``runs.using: node24``.

Source: each repository's ``action.yml`` at its major tags (``git show vN:action.yml``), read 2026-12-01; the majors
before these declare node20 or older.
"""

_USES = re.compile(r"^(?P<action>[\w.-]+/[\w.-]+)@v(?P<major>\d+)(?:\.\d+)*$")


def _steps_uses(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "uses" and isinstance(value, str):
                yield value
            else:
                yield from _steps_uses(value)
    elif isinstance(node, list):
        for item in node:
            yield from _steps_uses(item)


def _workflow_uses() -> list[tuple[str, str]]:
    return [
        (path.name, uses)
        for path in sorted(WORKFLOWS.glob("*.yml"))
        for uses in _steps_uses(yaml.safe_load(path.read_text(encoding="utf-8")))
    ]


def test_the_workflows_use_actions() -> None:
    assert {uses.split("@")[0] for _, uses in _workflow_uses()} == set(NODE24_SINCE)


@pytest.mark.parametrize(("workflow", "uses"), _workflow_uses())
def test_every_action_runs_on_node24(workflow: str, uses: str) -> None:
    match = _USES.match(uses)
    assert match, f"{workflow}: {uses} is not pinned to a major version tag"
    action, major = match["action"], int(match["major"])
    assert action in NODE24_SINCE, f"{workflow}: {action} has no known node24 major; add it to NODE24_SINCE"
    assert major >= NODE24_SINCE[action], f"{workflow}: {uses} runs on node20 or older; use v{NODE24_SINCE[action]}+"
