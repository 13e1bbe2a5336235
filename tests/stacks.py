"""Evaluating a shipped stack's real program as ``inferplane preview`` does (its config, secret placeholders)."""

from __future__ import annotations

from collections.abc import Callable

from inferplane.infra import program as platform_program
from inferplane.tool.mockengine import Evaluation
from inferplane.tool.preview.engine import evaluate_stack
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR


def evaluate_shipped_stack(name: str, program: Callable[[], None] = platform_program.main) -> Evaluation:
    """Run ``program`` (the real one by default) with stack ``name``'s config, secrets as placeholders."""
    evaluation, _ = evaluate_stack(load_stack(PROJECT_DIR, name), program)
    return evaluation
