"""Code reads as a list of named steps: every component's constructor is a short sequence of steps (one private
method or function per group of children), as pulumi-eks builds its cluster from separate pieces, and no function
of the library, the program, the tool, the processor or the policy pack grows back into a wall of statements."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pulumi
import pytest

from tests.import_graph import PROJECT_DIR, modules

MAX_FUNCTION_LINES = 70
"""The longest function allowed anywhere in the shipped code, signature and docstring included (the longest today is
67 lines; 30 functions ran past 70 before the code was split into steps)."""

MAX_CONSTRUCTOR_LINES = 45
"""The longest constructor allowed, signature and docstring included (the longest today, Gateway's, is 39)."""


def component_classes() -> list[type[pulumi.ComponentResource]]:
    """Every ComponentResource subclass defined in ``inferplane.components``, imported for real."""
    found: dict[str, type[pulumi.ComponentResource]] = {}
    for name in modules():
        if not name.startswith("inferplane.components."):
            continue
        module = importlib.import_module(name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, pulumi.ComponentResource) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return [found[key] for key in sorted(found)]


def test_every_component_is_found() -> None:
    names = {cls.__name__ for cls in component_classes()}
    # The public components (inferplane.components.COMPONENT_TYPES) and the engines' common base.
    assert names >= {"Gateway", "EksCluster", "GkeCluster", "TritonTrtLlmService", "VllmService", "Platform"}


@pytest.mark.parametrize("cls", component_classes(), ids=lambda cls: cls.__name__)
def test_the_constructor_is_a_short_list_of_steps(cls: type[pulumi.ComponentResource]) -> None:
    if "__init__" not in vars(cls):
        return  # inherits its base's constructor, measured there
    lines, _ = inspect.getsourcelines(vars(cls)["__init__"])
    assert len(lines) <= MAX_CONSTRUCTOR_LINES, (
        f"{cls.__module__}.{cls.__qualname__}.__init__ is {len(lines)} lines: move each group of children "
        "(workload, service, autoscaling, observability) into a named step"
    )


def long_functions(root: Path, folders: list[str], limit: int) -> list[str]:
    """``path:line name (N lines)`` for every function or method longer than ``limit`` lines under ``folders``."""
    found: list[str] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > limit:
                        relative = path.relative_to(root)
                        found.append(f"{relative}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_runs_past_the_limit() -> None:
    folders = ["components", "infra", "tool", "processor", "policies"]
    assert long_functions(PROJECT_DIR, folders, MAX_FUNCTION_LINES) == []


def test_a_long_function_is_named(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(f"def short() -> None:\n    pass\n\n\ndef wall() -> None:\n{body}\n")
    assert long_functions(tmp_path, ["pkg"], MAX_FUNCTION_LINES) == [
        f"pkg/m.py:5 wall ({MAX_FUNCTION_LINES + 1} lines)"
    ]
