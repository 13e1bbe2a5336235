"""The Pulumi program for one stack: stack config -> typed spec -> sizing -> components.

``infra/__main__.py`` calls :func:`main` under the ``pulumi`` CLI; the offline preview calls the same function
under Pulumi's mock engine, so both evaluate exactly this code.
"""

from __future__ import annotations

import pulumi

from inferplane.components.capacity.sizing import PlatformSizing
from inferplane.components.platform.compose import compose_platform
from inferplane.components.spec.buildable import validate_platform
from inferplane.components.spec.platform_spec import PLATFORM_KEY, PlatformSpec, SpecError

SECRET_CONFIG_KEYS: tuple[str, ...] = ("inferplane:hfToken",)
"""Secrets the program reads with ``require_secret``. Stack files in the repository cannot carry them (``secure:``
ciphertext is made by ``pulumi config set --secret`` for one stack's key); the offline preview stands a
``[secret]`` placeholder in for any that a stack lacks."""


def platform_from_config() -> PlatformSpec:
    """Read ``inferplane:platform`` and ``aws:region`` through Pulumi's config, as the CLI provides them."""
    raw = pulumi.Config("inferplane").require_object("platform")
    region = pulumi.Config("aws").require("region")
    try:
        return validate_platform(raw, region)
    except SpecError as exc:
        stack_file = f"Pulumi.{pulumi.get_stack()}.yaml"
        raise pulumi.RunError(exc.render(stack_file, PLATFORM_KEY)) from None


def build(spec: PlatformSpec) -> PlatformSizing:
    """Size the platform, refuse it if anything does not fit, then declare its resources and export its outputs.

    The composition is :func:`~inferplane.components.platform.compose.compose_platform`, the one the
    :class:`~inferplane.components.platform.Platform` component runs too; here its resources sit at the top of the
    stack (no parent), so their URNs are those the stacks always had.
    """
    composed = compose_platform(spec, hf_token=pulumi.Config("inferplane").require_secret("hfToken"))
    for name, value in composed.outputs().items():
        pulumi.export(name, value)
    return composed.plan


def main() -> None:
    """The program's entry point."""
    build(platform_from_config())
