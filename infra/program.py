"""The Pulumi program for one stack: stack config -> typed spec -> sizing -> components.

``infra/__main__.py`` calls :func:`main` under the ``pulumi`` CLI; the offline preview calls the same function
under Pulumi's mock engine, so both evaluate exactly this code.
"""

from __future__ import annotations

import pulumi

from components.sizing import PlatformSizing, size_platform
from components.spec import PlatformSpec, SpecError, parse_platform
from infra.aws_foundation import build_aws_foundation, platform_tags
from infra.gke_foundation import build_gke_foundation
from infra.stackfile import PLATFORM_KEY

SECRET_CONFIG_KEYS: tuple[str, ...] = ("inferplane:hfToken",)
"""Secrets the program reads with ``require_secret``. Stack files in the repository cannot carry them (``secure:``
ciphertext is made by ``pulumi config set --secret`` for one stack's key); the offline preview stands a
``[secret]`` placeholder in for any that a stack lacks."""


def platform_from_config() -> PlatformSpec:
    """Read ``inferplane:platform`` and ``aws:region`` through Pulumi's config, as the CLI provides them."""
    raw = pulumi.Config("inferplane").require_object("platform")
    region = pulumi.Config("aws").require("region")
    try:
        return parse_platform(raw, region)
    except SpecError as exc:
        stack_file = f"Pulumi.{pulumi.get_stack()}.yaml"
        raise pulumi.RunError(exc.render(stack_file, PLATFORM_KEY)) from None


def build(spec: PlatformSpec) -> PlatformSizing:
    """Size the platform, refuse it if anything does not fit, then declare its resources."""
    plan = size_platform(spec)
    if not plan.ok:
        raise pulumi.RunError("the plan is refused:\n" + "\n".join(plan.problems))
    pulumi.export("environment", spec.environment)
    pulumi.export("sizing", plan.model_dump(mode="json"))
    aws_foundation = build_aws_foundation(spec, plan, platform_tags(spec))
    pulumi.export("clusterName", aws_foundation.cluster.cluster.name)
    pulumi.export(
        "gpuNodeGroups", {pool: group.node_group.node_group_name for pool, group in aws_foundation.node_groups.items()}
    )
    build_gke_foundation(spec, plan, platform_tags(spec))
    return plan


def main() -> None:
    """The program's entry point."""
    build(platform_from_config())
