"""The public surface of ``inferplane.components``: every exported name resolves, loads lazily, and every component's
Pulumi type token is pinned (a changed token replaces every resource under the component in a deployed stack)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pulumi
import pytest

import inferplane.components as public
from tests.import_graph import PROJECT_DIR

PINNED_TYPE_TOKENS = (
    "inferplane:index:EksCluster",
    "inferplane:index:EmbedderService",
    "inferplane:index:Gateway",
    "inferplane:index:GkeCluster",
    "inferplane:index:GpuNodeGroup",
    "inferplane:index:Keda",
    "inferplane:index:MemorystoreRedis",
    "inferplane:index:ModelCache",
    "inferplane:index:MonitoringStack",
    "inferplane:index:Network",
    "inferplane:index:NodeAddons",
    "inferplane:index:Platform",
    "inferplane:index:QueueDepthAutoscaler",
    "inferplane:index:RedisCache",
    "inferplane:index:ServingDashboards",
    "inferplane:index:ServingNetworkPolicy",
    "inferplane:index:ServingRules",
    "inferplane:index:SglangService",
    "inferplane:index:TpuNodePool",
    "inferplane:index:TritonTrtLlmService",
    "inferplane:index:VllmService",
)
"""Every component type token as released (0.1.0 and 0.2.0; ``SglangService`` added after 0.4.0, ``EmbedderService``
after 0.5.0). A rename edits this list deliberately and keeps the old token as a ``pulumi.Alias(type_=...)`` on the
component (docs/public-api.md)."""


def _registered_tokens() -> dict[str, str]:
    """Class -> the type token its ``__init__`` passes to ``super().__init__`` (a literal, or a module-level string
    constant of the same file), for every class under ``components/``, read from the source."""
    found: dict[str, str] = {}
    for path in sorted((PROJECT_DIR / "components").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            target.id: stmt.value.value
            for stmt in tree.body
            if isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
            for target in stmt.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "__init__"
                    and isinstance(call.func.value, ast.Call)
                    and isinstance(call.func.value.func, ast.Name)
                    and call.func.value.func.id == "super"
                    and call.args
                    and (token := _token_of(call.args[0], constants)) is not None
                ):
                    found[node.name] = token
    return found


def _token_of(argument: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        value: str | None = argument.value
    elif isinstance(argument, ast.Name):
        value = constants.get(argument.id)
    else:
        value = None
    return value if value is not None and value.startswith("inferplane:") else None


def test_type_tokens_are_pinned() -> None:
    registered = _registered_tokens()
    assert sorted(registered.values()) == list(PINNED_TYPE_TOKENS)
    assert registered == public.COMPONENT_TYPES


def test_every_component_token_is_its_class_name() -> None:
    for name, token in public.COMPONENT_TYPES.items():
        assert token == f"inferplane:index:{name}"
        component = getattr(public, name)
        assert issubclass(component, pulumi.ComponentResource)
        assert f"{name}Args" in public.__all__


@pytest.mark.parametrize("name", sorted(public.__all__))
def test_every_public_name_resolves_to_its_module(name: str) -> None:
    value = getattr(public, name)
    if name == "COMPONENT_TYPES":
        return
    module = importlib.import_module(f"inferplane.components.{public._EXPORTS[name]}")
    assert getattr(module, name) is value
    assert name in dir(public)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        _ = public.Nothing  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "module", ["inferplane.components", "inferplane.components.capacity.sizing", "inferplane.tool.cli"]
)
def test_sizing_does_not_load_the_cloud_sdks(module: str) -> None:
    probe = (
        f"import sys, {module}; print(sorted(m for m in ('pulumi', 'pulumi_aws', 'pulumi_gcp') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=Path.home(), capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_component_loads_its_sdk_on_first_use() -> None:
    probe = "import sys, inferplane.components as c; c.Network; print('pulumi_aws' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=Path.home(), capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "True"
