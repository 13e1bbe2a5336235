"""Comparing two plans of one stack: what is created, deleted, updated or replaced, property by property.

Resources are matched by URN (as the engine matches them). Inputs are compared recursively; each difference is a
:class:`PropertyChange` at a nested path (``scalingConfig.maxSize``, ``instanceTypes[0]``,
``tags["cost-center"]``) whose effect comes from :mod:`.replace_rules`. A resource is replaced when
any change replaces it, or when its provider changes.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from inferplane.tool.preview.model import Cost, Plan, PlanResource
from inferplane.tool.preview.replace_rules import Effect, effect_of

Operation = Literal["create", "delete", "update", "replace", "same"]
ChangeKind = Literal["add", "delete", "update"]

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PropertyChange(_Model):
    """One changed input, at a nested path."""

    path: str
    kind: ChangeKind
    old: Any = None
    new: Any = None
    effect: Effect
    reason: str = ""


class ResourceChange(_Model):
    """One resource that differs between the plans."""

    urn: str
    type: str
    name: str
    parent: str
    op: Literal["create", "delete", "update", "replace"]
    changes: tuple[PropertyChange, ...] = ()

    @property
    def rolls(self) -> bool:
        """True when an in-place update recycles the nodes or pods behind the resource."""
        return any(c.effect == "roll" for c in self.changes)


class PlanDiff(_Model):
    """Every difference between an old plan and a new one."""

    changes: tuple[ResourceChange, ...]
    unchanged: int
    old_cost: Cost
    new_cost: Cost

    def count(self, op: Operation) -> int:
        """How many resources have ``op``."""
        if op == "same":
            return self.unchanged
        return sum(1 for c in self.changes if c.op == op)

    @property
    def has_changes(self) -> bool:
        """False when the plans register the same resources with the same inputs."""
        return bool(self.changes)

    def op_of(self, urn: str) -> Operation:
        """The operation for one URN (``same`` when unchanged)."""
        for change in self.changes:
            if change.urn == urn:
                return change.op
        return "same"


def format_path(parts: tuple[str | int, ...]) -> str:
    """``("tags", "cost-center")`` -> ``tags["cost-center"]``; ``("a", 0, "b")`` -> ``a[0].b``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part):
            text += f".{part}" if text else part
        else:
            escaped = part.replace("\\", "\\\\").replace('"', '\\"')
            text += f'["{escaped}"]'
    return text


def diff_values(old: Any, new: Any, parts: tuple[str | int, ...] = ()) -> list[tuple[str, ChangeKind, Any, Any]]:
    """(path, kind, old, new) for every difference between two JSON values, depth first, keys sorted."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[tuple[str, ChangeKind, Any, Any]] = []
        for key in sorted(set(old) | set(new)):
            if key not in new:
                found.append((format_path((*parts, key)), "delete", old[key], None))
            elif key not in old:
                found.append((format_path((*parts, key)), "add", None, new[key]))
            else:
                found.extend(diff_values(old[key], new[key], (*parts, key)))
        return found
    if isinstance(old, list) and isinstance(new, list):
        found = []
        for index in range(max(len(old), len(new))):
            if index >= len(new):
                found.append((format_path((*parts, index)), "delete", old[index], None))
            elif index >= len(old):
                found.append((format_path((*parts, index)), "add", None, new[index]))
            else:
                found.extend(diff_values(old[index], new[index], (*parts, index)))
        return found
    if old == new and type(old) is type(new):
        return []
    return [(format_path(parts), "update", old, new)]


def _resource_change(old: PlanResource, new: PlanResource) -> ResourceChange | None:
    changes: list[PropertyChange] = []
    for path, kind, before, after in diff_values(old.inputs, new.inputs):
        effect, reason = effect_of(new.type, path, kind)
        changes.append(PropertyChange(path=path, kind=kind, old=before, new=after, effect=effect, reason=reason))
    if old.provider != new.provider:
        changes.append(
            PropertyChange(
                path="(provider)",
                kind="update",
                old=old.provider,
                new=new.provider,
                effect="replace",
                reason="a resource moved to another provider is replaced",
            )
        )
    if old.protect != new.protect:
        changes.append(
            PropertyChange(path="(protect)", kind="update", old=old.protect, new=new.protect, effect="update")
        )
    if old.dependencies != new.dependencies:
        changes.append(
            PropertyChange(
                path="(dependsOn)",
                kind="update",
                old=list(old.dependencies),
                new=list(new.dependencies),
                effect="update",
            )
        )
    if not changes:
        return None
    op: Literal["update", "replace"] = "replace" if any(c.effect == "replace" for c in changes) else "update"
    return ResourceChange(urn=new.urn, type=new.type, name=new.name, parent=new.parent, op=op, changes=tuple(changes))


def diff_plans(old: Plan, new: Plan) -> PlanDiff:
    """Every resource created, deleted, updated or replaced going from ``old`` to ``new``, in tree order."""
    before = old.by_urn()
    after = new.by_urn()
    changes: list[ResourceChange] = []
    unchanged = 0
    for resource in new.resources:
        previous = before.get(resource.urn)
        if previous is None:
            changes.append(
                ResourceChange(
                    urn=resource.urn, type=resource.type, name=resource.name, parent=resource.parent, op="create"
                )
            )
            continue
        change = _resource_change(previous, resource)
        if change is None:
            unchanged += 1
        else:
            changes.append(change)
    for resource in old.resources:
        if resource.urn not in after:
            changes.append(
                ResourceChange(
                    urn=resource.urn, type=resource.type, name=resource.name, parent=resource.parent, op="delete"
                )
            )
    return PlanDiff(changes=tuple(changes), unchanged=unchanged, old_cost=old.cost, new_cost=new.cost)


def creation_diff(plan: Plan) -> PlanDiff:
    """The diff against an empty stack: every resource is created (what a first ``pulumi up`` would do)."""
    nothing = Cost(hourly_min=0.0, hourly_max=0.0, monthly_min=0.0, monthly_max=0.0)
    empty = plan.model_copy(update={"resources": (), "cost": nothing})
    return diff_plans(empty, plan)
