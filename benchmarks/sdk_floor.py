"""The Pulumi SDK's floor for a set of resources, in a fresh interpreter that imports nothing of inferplane.

    python benchmarks/sdk_floor.py RESOURCES.json   # [{"urn", "type", "name", "parent"}, ...], parents first

Loads the provider class of every resource type (as a program's own imports would: the provider package, then the
module its registry names), then registers the same resources bare (same types, names and parents, no inputs) under
``set_mocks``. ``benchmarks/preview_overhead.py`` times it against the whole ``inferplane preview``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.settings import set_root_resource
from pulumi.runtime.stack import run_in_stack


class BareMocks(pulumi_mocks.Mocks):
    """The cheapest engine answers: an id, no outputs."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        return f"{args.name}-id", {}

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


def provider_class(type_token: str) -> type[pulumi.Resource]:
    """The SDK class behind a type token, imported as the program's own imports would import it: the provider
    package's module registry names the module and class (CRDs are ``apiextensions.CustomResource``)."""
    package, _, rest = type_token.partition(":")
    if package == "pulumi" and rest.startswith("providers:"):
        provider: type[pulumi.Resource] = importlib.import_module(f"pulumi_{rest.removeprefix('providers:')}").Provider
        return provider
    importlib.import_module(f"pulumi_{package}")
    modules = rpc._RESOURCE_MODULES.get(type_token.rsplit(":", 1)[0], [])
    for module in modules:
        info: dict[str, Any] = getattr(module, "mod_info", {})
        if type_token in info.get("classes", {}):
            found: type[pulumi.Resource] = getattr(importlib.import_module(info["fqn"]), info["classes"][type_token])
            return found
    custom: type[pulumi.Resource] = importlib.import_module("pulumi_kubernetes.apiextensions").CustomResource
    return custom


def register_bare(resources: list[dict[str, str]]) -> None:
    """Load every resource type's provider class, then register ``resources`` bare, parents first (the plan's order);
    runs in this fresh interpreter."""
    for token in sorted({r["type"] for r in resources if not r["type"].startswith(("inferplane:", "pulumi:pulumi:"))}):
        provider_class(token)

    def program() -> None:
        made: dict[str, pulumi.Resource] = {}
        for r in resources:
            kind, name, parent = r["type"], r["name"], made.get(r["parent"])
            opts = pulumi.ResourceOptions(parent=parent)
            if kind.startswith("inferplane:"):
                made[r["urn"]] = pulumi.ComponentResource(kind, name, None, opts)
            elif kind.startswith("pulumi:providers:"):
                made[r["urn"]] = pulumi.ProviderResource(kind.removeprefix("pulumi:providers:"), name, {}, opts)
            elif not kind.startswith("pulumi:pulumi:"):
                made[r["urn"]] = pulumi.CustomResource(kind, name, {}, opts)

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pulumi_mocks.set_mocks(BareMocks(), project="inferplane", stack="floor", preview=True)
    set_root_resource(None)  # type: ignore[arg-type]
    loop.run_until_complete(run_in_stack(program))
    loop.close()


if __name__ == "__main__":
    register_bare(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
