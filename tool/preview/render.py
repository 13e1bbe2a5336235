"""The preview in a terminal: a Pulumi-style resource tree, counts by type, the sizing tables, cost, policy verdicts
and the diff against an older plan. Everything printed comes from the plan, whose secrets are already
``[secret]``; nothing here sees a secret's value.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from inferplane.components.capacity.sizing import PlatformSizing
from inferplane.tool.preview.diff import Operation, PlanDiff, PropertyChange, ResourceChange
from inferplane.tool.preview.model import Cost, Plan, PlanResource, stack_urn
from inferplane.tool.sizing_report import render_platform

SYMBOLS: dict[Operation, str] = {"create": "+", "delete": "-", "update": "~", "replace": "+-", "same": " "}
"""Pulumi's operation symbols."""

_STYLES: dict[Operation, str] = {
    "create": "green",
    "delete": "red",
    "update": "yellow",
    "replace": "magenta",
    "same": "dim",
}

_MAX_VALUE = 100


def show_value(value: Any) -> str:
    """A value as compact JSON, cut at 100 characters (user data and policies can be long)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def usd(value: float | None) -> str:
    """Dollars with cents, or 'unknown' where a price is missing."""
    return "unknown" if value is None else f"${value:,.2f}"


def _label(op: Operation, type_token: str, name: str) -> str:
    style = _STYLES[op]
    return f"[{style}]{SYMBOLS[op]}[/{style}] [bold]{escape(type_token)}[/bold] {escape(name)}"


def resource_tree(plan: Plan, diff: PlanDiff | None) -> Tree:
    """The stack and its resources, children under their parents, marked with what will happen to each.

    Without a diff everything is created (a preview of a new stack). Deleted resources hang under their old
    parent when it still exists, else under the stack.
    """
    root_urn = stack_urn(plan.project, plan.stack)
    root = Tree(_label("create" if diff is None else "same", "pulumi:pulumi:Stack", f"{plan.project}-{plan.stack}"))
    nodes: dict[str, Tree] = {root_urn: root}

    def attach(urn: str, parent: str, label: str) -> None:
        nodes[urn] = nodes.get(parent, root).add(label)

    for resource in plan.resources:
        op: Operation = "create" if diff is None else diff.op_of(resource.urn)
        attach(resource.urn, resource.parent, _label(op, resource.type, resource.name))
    if diff is not None:
        for change in diff.changes:
            if change.op == "delete":
                attach(change.urn, change.parent, _label("delete", change.type, change.name))
    return root


def counts_table(resources: tuple[PlanResource, ...]) -> Table:
    """How many resources of each type, most numerous first."""
    table = Table(title=f"Resources by type ({len(resources)})", title_justify="left")
    table.add_column("type")
    table.add_column("count", justify="right")
    for type_token, count in sorted(Counter(r.type for r in resources).items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(escape(type_token), str(count))
    return table


def summary_line(diff: PlanDiff) -> str:
    """'Resources: 3 to create, 1 to update, ...' as Pulumi prints it."""
    parts = [
        f"{diff.count('create')} to create",
        f"{diff.count('update')} to update",
        f"{diff.count('replace')} to replace",
        f"{diff.count('delete')} to delete",
        f"{diff.count('same')} unchanged",
    ]
    return "Resources: " + ", ".join(parts)


def cost_line(cost: Cost) -> str:
    """The environment's accelerator cost at min and max scale, per hour and per month."""
    return (
        f"Cost (on-demand accelerator nodes): {usd(cost.hourly_min)}/h at min, {usd(cost.hourly_max)}/h at max "
        f"({usd(cost.monthly_min)} to {usd(cost.monthly_max)} a month)"
    )


def cost_delta(old: float | None, new: float | None) -> str:
    """'$1.00 -> $2.50 (+$1.50)'."""
    if old is None or new is None:
        return f"{usd(old)} -> {usd(new)}"
    change = new - old
    sign = "+" if change >= 0 else "-"
    return f"{usd(old)} -> {usd(new)} ({sign}{usd(abs(change))})"


def property_line(change: PropertyChange) -> str:
    """One property change, Pulumi style, with why it replaces or rolls."""
    if change.kind == "add":
        text = f"+ {change.path}: {show_value(change.new)}"
    elif change.kind == "delete":
        text = f"- {change.path}: {show_value(change.old)}"
    else:
        text = f"~ {change.path}: {show_value(change.old)} => {show_value(change.new)}"
    if change.effect != "update":
        text += f"  [{change.effect}s: {change.reason}]"
    return text


def change_heading(change: ResourceChange) -> str:
    """'+- aws:eks/nodeGroup:NodeGroup gpu (replace)'."""
    note = change.op + (", rolls nodes/pods" if change.op == "update" and change.rolls else "")
    return f"{SYMBOLS[change.op]} {change.type} {change.name} ({note})"


def render_diff(console: Console, diff: PlanDiff, against: str) -> None:
    """Every change with its property changes, then the summary and the cost delta."""
    console.print(f"[bold]Changes against {escape(against)}[/bold]")
    if not diff.has_changes:
        console.print("  no changes")
    for change in diff.changes:
        style = _STYLES[change.op]
        console.print(f"  [{style}]{escape(change_heading(change))}[/{style}]")
        for prop in change.changes:
            console.print(f"      {escape(property_line(prop))}", highlight=False)
    console.print(summary_line(diff))
    console.print(
        f"Cost delta: {cost_delta(diff.old_cost.hourly_min, diff.new_cost.hourly_min)}/h at min, "
        f"{cost_delta(diff.old_cost.hourly_max, diff.new_cost.hourly_max)}/h at max"
    )


def render_policies(console: Console, plan: Plan) -> None:
    """The policy verdicts: how many policies ran, then each violation."""
    if not plan.policies:
        console.print("Policies: no policy pack (policies/PulumiPolicy.yaml), nothing evaluated")
        return
    mandatory = len(plan.mandatory_violations)
    verdict = "[red]failed[/red]" if mandatory else "[green]passed[/green]"
    console.print(
        f"Policies: {len(plan.policies)} evaluated, {len(plan.violations)} violations "
        f"({mandatory} mandatory): {verdict}"
    )
    if plan.violations:
        table = Table(title="Policy violations", title_justify="left")
        for column in ("policy", "enforcement", "resource", "message"):
            table.add_column(column)
        for v in plan.violations:
            table.add_row(escape(v.policy), v.enforcement, escape(v.urn.rsplit("::", 1)[-1]), escape(v.message))
        console.print(table)


def outputs_table(plan: Plan) -> Table:
    """The stack's exports, one row each (for stacks without a platform spec, which have no sizing tables)."""
    table = Table(title="Outputs", title_justify="left")
    table.add_column("name")
    table.add_column("value")
    for name in sorted(plan.outputs):
        table.add_row(escape(name), escape(show_value(plan.outputs[name])))
    return table


def render_preview(
    console: Console,
    plan: Plan,
    sizing: PlatformSizing | None,
    *,
    diff: PlanDiff | None = None,
    against: str | None = None,
    notes: tuple[str, ...] = (),
) -> None:
    """The whole terminal report for one stack."""
    console.print(f"[bold]Previewing {escape(plan.project)}/{escape(plan.stack)}[/bold] (offline, mock engine)")
    for note in notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    console.print(resource_tree(plan, diff))
    console.print(counts_table(plan.resources))
    if sizing is not None:
        render_platform(console, sizing)
        console.print(cost_line(plan.cost))
    else:
        console.print(outputs_table(plan))
    render_policies(console, plan)
    if diff is not None and against is not None:
        render_diff(console, diff, against)
