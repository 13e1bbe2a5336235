"""The multi-language component provider: Pulumi's component provider serving :class:`Platform`.

How the engine starts it: ``pulumi package add <repo>@<version>`` (or a ``packages:`` entry) finds
``PulumiPlugin.yaml`` (``runtime: python``) at the repository root. With no ``__main__.py`` there and a buildable
``pyproject.toml``, Pulumi makes the plugin's virtualenv ``venv`` and ``pip install .`` into it;
``pulumi-language-python`` then runs ``python -m pulumi.run.plugin inferplane <engine address>``, which imports
:mod:`inferplane`, finds no components exported there, and runs ``python -m inferplane`` (:mod:`inferplane.__main__`),
i.e. :func:`main`. The server prints its gRPC port on stdout and answers ``GetSchema`` (the schema the SDK infers from
the components' annotations) and ``Construct``.

This is what ``pulumi.provider.experimental.component_provider_host`` does, with one difference: a spec that fails
validation is refused before the component's constructor runs, so the ``InputPropertiesError`` (every bad property,
by its schema path) reaches the engine as structured property errors; raised inside the constructor, the SDK wraps
it (``ComponentInitError``) and only its text would.
"""

from __future__ import annotations

import sys
from typing import Any

import pulumi
from pulumi.provider import main as serve
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.provider import ConstructResult

from inferplane import __version__
from inferplane.components.platform import HOSTED_COMPONENTS, Platform
from inferplane.components.platform.component import PACKAGE_NAME, PLATFORM_TYPE, platform_spec


class InferplaneProvider(ComponentProvider):
    """The SDK's component provider for :data:`HOSTED_COMPONENTS`, validating a Platform's spec first."""

    def __init__(self, version: str = __version__) -> None:
        super().__init__(list(HOSTED_COMPONENTS), PACKAGE_NAME, version=version)

    def construct(
        self,
        name: str,
        resource_type: str,
        inputs: pulumi.Inputs,
        options: pulumi.ResourceOptions | None = None,
    ) -> ConstructResult:
        if resource_type == PLATFORM_TYPE:
            mapped: Any = self.map_inputs(inputs, self._component_defs[Platform.__name__])
            platform_spec(mapped)  # raises pulumi.InputPropertiesError, reported property by property
        return super().construct(name, resource_type, inputs, options)


def main() -> None:
    """Serve the hosted components until the engine stops the process (arguments: the engine's address)."""
    serve(InferplaneProvider(), sys.argv[1:])
