"""Evaluating a shipped stack's real program as ``inferplane preview`` does (its config, secret placeholders)."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path

from inferplane.infra import program as platform_program
from inferplane.tool.mockengine import Evaluation
from inferplane.tool.preview.engine import evaluate_stack
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR

_SHIPPED: dict[str, Evaluation] = {}
"""The real program's evaluation of each shipped stack, made once per test process: a dozen modules read the same
three (seconds each under the mock engine), and neither the stack files nor the program change during a run."""


def evaluate_shipped_stack(name: str, program: Callable[[], None] = platform_program.main) -> Evaluation:
    """Run ``program`` (the real one by default) with stack ``name``'s config, secrets as placeholders.

    The real program's evaluation is run once per process and each caller gets its own deep copy, so no test sees
    what another changed; any other program is evaluated afresh.
    """
    if program is not platform_program.main:
        return evaluate_stack(load_stack(PROJECT_DIR, name), program)[0]
    if name not in _SHIPPED:
        _SHIPPED[name] = evaluate_stack(load_stack(PROJECT_DIR, name), program)[0]
    return copy.deepcopy(_SHIPPED[name])


ROUTED_TIER: dict[str, object] = {
    "name": "auto",
    "models": ["llama-70b", "llama-8b"],
    "route": {
        "by": "difficulty",
        "cheap": "llama-8b",
        "strong": "llama-70b",
        "examples": "routes/auto.jsonl",
        "threshold": 0.12,
        "neighbours": 50,
    },
}
"""A tier of prod's two models routed by difficulty, its examples in ``routes/auto.jsonl`` of the project: what a
test adds to prod's ``gateway.tiers`` (third, index 2)."""


def copy_project(root: Path) -> Path:
    """The project's ``Pulumi.yaml``, its program (linked) and shipped stacks under ``root/project``."""
    project = root / "project"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", project / "Pulumi.yaml")
    # The program Pulumi.yaml's ``main`` names, copied: the preview refuses a ``main`` that resolves outside.
    shutil.copytree(PROJECT_DIR / "infra", project / "infra", ignore=shutil.ignore_patterns("__pycache__"))
    for stack in (PROJECT_DIR / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(stack, project / "stacks" / stack.name)
    return project
