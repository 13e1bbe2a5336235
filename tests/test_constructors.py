"""Every component's constructor reads as a short list of named steps (one private method or function per group of
children), as pulumi-eks builds its cluster from separate pieces: no constructor grows back into a wall of
resource declarations."""

from __future__ import annotations

import importlib
import inspect

import pulumi
import pytest

from tests.import_graph import modules

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
