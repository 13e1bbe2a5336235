"""The plan: what one stack's program registers, with sizing, cost and policy verdicts, as a stable JSON file.

The file is the contract between a pull request's head and its base (``--against``), so it is written canonically:
keys sorted, resources in tree order (siblings by URN), dependencies sorted, two-space indent, no timestamps.
Same inputs give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferplane.components.capacity.sizing import PlatformSizing
from inferplane.tool.files import UnreadableFileError, read_regular_file

HOURS_PER_MONTH = 730
"""The month AWS's pricing calculator and Google's price list use (8,760 hours / 12)."""

Enforcement = Literal["advisory", "mandatory", "remediate", "disabled"]
"""Pulumi's enforcement levels (``pulumi_policy.EnforcementLevel``)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlanResource(_Model):
    """One registered resource, as the engine saw it."""

    urn: str = Field(description="The resource's URN, unique within the stack.")
    type: str = Field(description="Type token, e.g. aws:eks/nodeGroup:NodeGroup or inferplane:index:VllmService.")
    name: str = Field(description="Logical name.")
    parent: str = Field(description="URN of the parent (the stack's URN for top-level resources).")
    provider: str = Field(
        description="Explicit provider reference (urn::id) as registered; empty for the package's default provider."
    )
    inputs: dict[str, Any] = Field(description="Inputs as registered (camelCase); secrets are '[secret]'.")
    dependencies: tuple[str, ...] = Field(description="URNs this resource depends on, sorted.")
    protect: bool = Field(description="Whether the resource is protected from deletion.")
    custom: bool = Field(
        default=True, exclude=True, description="False for component resources. Kept in memory, not in the file."
    )
    outputs: dict[str, Any] = Field(
        default_factory=dict,
        exclude=True,
        description="The mock engine's output properties, for policies that check outputs. Not in the file.",
    )


class PolicyInfo(_Model):
    """One policy the pack evaluated."""

    name: str
    enforcement: Enforcement


class Violation(_Model):
    """One policy violation."""

    policy: str
    enforcement: Enforcement
    urn: str = Field(description="The violating resource's URN; empty for stack-level violations.")
    message: str


class Cost(_Model):
    """The environment's on-demand accelerator node cost at minimum and maximum scale, from the sizing."""

    currency: Literal["USD"] = "USD"
    hourly_min: float | None = Field(description="USD per hour at min scale; null when a price is unknown.")
    hourly_max: float | None = Field(description="USD per hour at max scale; null when a price is unknown.")
    monthly_min: float | None = Field(description=f"hourly_min x {HOURS_PER_MONTH} hours.")
    monthly_max: float | None = Field(description=f"hourly_max x {HOURS_PER_MONTH} hours.")

    @classmethod
    def from_sizing(cls, sizing: PlatformSizing) -> Cost:
        """The cost the sizing engine computed (components/catalog/prices.toml)."""

        def monthly(hourly: float | None) -> float | None:
            return None if hourly is None else round(hourly * HOURS_PER_MONTH, 2)

        return cls(
            hourly_min=sizing.hourly_usd_min,
            hourly_max=sizing.hourly_usd_max,
            monthly_min=monthly(sizing.hourly_usd_min),
            monthly_max=monthly(sizing.hourly_usd_max),
        )

    @classmethod
    def unknown(cls) -> Cost:
        """The cost of a stack without a platform spec: nothing sized, so nothing priced."""
        return cls(hourly_min=None, hourly_max=None, monthly_min=None, monthly_max=None)


class Plan(_Model):
    """The offline plan of one stack (``inferplane preview --json``)."""

    project: str
    stack: str
    resources: tuple[PlanResource, ...] = Field(description="In tree order: parents first, siblings by URN.")
    outputs: dict[str, Any] = Field(description="The stack's exports; secrets are '[secret]'.")
    sizing: dict[str, Any] = Field(description="inferplane.components.capacity.sizing.PlatformSizing, as JSON.")
    cost: Cost
    policies: tuple[PolicyInfo, ...] = Field(description="Every policy evaluated; empty without a policy pack.")
    violations: tuple[Violation, ...]

    @property
    def mandatory_violations(self) -> tuple[Violation, ...]:
        """Violations that fail the preview."""
        return tuple(v for v in self.violations if v.enforcement == "mandatory")

    def by_urn(self) -> dict[str, PlanResource]:
        """Resources keyed by URN."""
        return {r.urn: r for r in self.resources}

    def to_json(self) -> str:
        """The canonical file text: sorted keys, two-space indent, trailing newline."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


class PlanFileError(Exception):
    """A plan file that cannot be read (``--against``); names the file."""

    def __init__(self, file: str, message: str) -> None:
        self.file = file
        super().__init__(f"{file}: {message}")


MAX_PLAN_FILE_BYTES = 256 * 1024 * 1024
"""A plan of a few hundred resources is a few megabytes; a file over 256 MiB is refused unread."""


def load_plan(path: Path) -> Plan:
    """Read a plan written by :meth:`Plan.to_json`."""
    try:
        document = json.loads(read_regular_file(path, MAX_PLAN_FILE_BYTES))
    except UnreadableFileError as exc:
        raise PlanFileError(str(path), str(exc)) from None
    except json.JSONDecodeError as exc:
        raise PlanFileError(str(path), f"not valid JSON: {exc}") from None
    except RecursionError:
        raise PlanFileError(str(path), "not valid JSON: nested too deeply") from None
    try:
        return Plan.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PlanFileError(str(path), f"not an inferplane plan: {where}: {first['msg']}") from None


def tree_order(resources: Sequence[PlanResource], root: str) -> list[PlanResource]:
    """Depth-first from ``root`` (the stack URN), siblings sorted by URN; orphans (unknown parent) follow, by URN.

    Registration order depends on when each ``Output`` resolves; this order depends only on the resources.
    """
    children: dict[str, list[PlanResource]] = {}
    for resource in resources:
        children.setdefault(resource.parent, []).append(resource)
    for siblings in children.values():
        siblings.sort(key=lambda r: r.urn)
    ordered: list[PlanResource] = []
    seen: set[str] = set()

    def visit(urn: str) -> None:
        for child in children.get(urn, []):
            if child.urn not in seen:
                seen.add(child.urn)
                ordered.append(child)
                visit(child.urn)

    visit(root)
    for resource in sorted(resources, key=lambda r: r.urn):
        if resource.urn not in seen:
            seen.add(resource.urn)
            ordered.append(resource)
            visit(resource.urn)
    return ordered


def stack_urn(project: str, stack: str) -> str:
    """The URN of the stack resource every top-level resource is parented to."""
    return f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}"


def plain_value(value: Any) -> Any:
    """JSON data as the Pulumi engine prints it: integral numbers as integers.

    Property values cross the resource-monitor protocol as protobuf ``Struct``s, where every number is a double;
    the engine's own JSON (``pulumi preview --json``) writes ``2``, not ``2.0``, and so does the plan.
    """
    if isinstance(value, Mapping):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def plain_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    """A plain ``dict`` copy with integral numbers as integers (see :func:`plain_value`)."""
    return {k: plain_value(v) for k, v in value.items()}
