"""Evaluating a shipped stack's real program as ``inferplane preview`` does (its config, secret placeholders)."""

from __future__ import annotations

from collections.abc import Callable

from infra import program as platform_program
from infra.mockengine import Evaluation, PlatformMocks, evaluate
from infra.preview.engine import evaluation_config
from infra.stackfile import load_stack
from tests.conftest import PROJECT_DIR


def evaluate_shipped_stack(name: str, program: Callable[[], None] = platform_program.main) -> Evaluation:
    """Run ``program`` (the real one by default) with stack ``name``'s config, secrets as placeholders."""
    stack = load_stack(PROJECT_DIR, name)
    config = evaluation_config(stack)
    return evaluate(
        program,
        mocks=PlatformMocks(stack.platform.region),
        stack=name,
        config=config.values,
        secret_keys=config.secret_keys,
    )
