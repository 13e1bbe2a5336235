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

import argparse
import os
import signal
import sys
from collections.abc import Sequence
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


def engine_address(argv: Sequence[str]) -> str:
    """The engine's address from the provider's arguments; any other argument exits 2 (argparse), naming it.

    Besides the address, the engine may pass ``--logtostderr``, ``-v=N`` and ``--tracing ENDPOINT`` before it
    (``buildPluginArguments`` in pulumi/pulumi ``sdk/go/common/resource/plugin/plugin.go``), and the SDK's own server
    accepts ``--logflow`` (``pulumi.provider.server.main``); those are accepted and otherwise unused.
    """
    parser = argparse.ArgumentParser(
        prog="python -m inferplane",
        description="The inferplane component provider (inferplane:index:Platform); the Pulumi engine starts it.",
    )
    parser.add_argument("engine", help="the Pulumi engine's gRPC address")
    parser.add_argument("--logtostderr", action="store_true", help="passed by the engine; unused")
    parser.add_argument("--logflow", action="store_true", help="passed by the engine; unused")
    parser.add_argument("-v", type=int, metavar="LEVEL", help="the engine's log verbosity; unused")
    parser.add_argument("--tracing", metavar="ENDPOINT", help="the engine's tracing endpoint; unused")
    address: str = parser.parse_args(argv).engine
    return address


def _exit_now(signum: int, frame: object) -> None:
    """Exit at once: the engine asked, every answer is sent, and nothing is left to write."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    """Serve the hosted components until the engine stops the process (arguments: the engine's address)."""
    address = engine_address(sys.argv[1:])
    # The SDK's server reads sys.argv again, leniently (parse_known_args): it would take --tracing's endpoint for the
    # engine's address. It gets the address alone.
    sys.argv[1:] = [address]
    # The engine stops a plugin with SIGINT (then SIGKILL after 5 s) and the SDK's server stops on KeyboardInterrupt,
    # which Python raises only where SIGINT was not ignored at start: a provider launched from a background job
    # inherits it ignored and was killed 5 s later. And the interpreter's ordinary exit after it takes 0.7 s idle
    # here (0.016 s this way), which a loaded machine stretches toward the 5 s. So it exits at once on SIGINT, as
    # policies/__main__.py.
    signal.signal(signal.SIGINT, _exit_now)
    serve(InferplaneProvider(), [address])
