"""The pull-request comment for one stack: summary counts, the diff, policy results, the cost delta, who may reach
which hosted provider, and a Mermaid diagram of the platform.

The diagram is drawn from the program's components (type tokens ``inferplane:index:<Noun>``), whatever the program
registers: each component is a node in the group its noun names, and an arrow joins two components when a resource
of one depends on a resource of the other. The text is deterministic, like the plan it comes from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from inferplane.components.serving.annotations import GATEWAY_PROVIDERS, AnnotationError, parse_gateway_annotations
from inferplane.tool.preview.diff import PlanDiff
from inferplane.tool.preview.model import Plan, PlanResource
from inferplane.tool.preview.render import SYMBOLS, change_heading, cost_delta, property_line, summary_line, usd

COMPONENT_PREFIX = "inferplane:index:"

DIAGRAM_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Network", ("Network", "Vpc")),
    ("Clusters", ("Cluster",)),
    ("Accelerator pools", ("NodeGroup", "NodePool")),
    ("Model servers", ("Service", "Server")),
    ("Autoscaling", ("Autoscaler", "ScaledObject")),
    ("Gateway", ("Gateway", "Router")),
    ("Cache", ("Cache", "Redis")),
    ("Monitoring", ("Monitoring", "Alerts", "Dashboard", "Observability")),
)
"""Which group a component's noun falls in: the first group one of whose suffixes ends the noun. Other nouns land
in 'Other components'."""

_MAX_CHANGES = 200


def _group_of(noun: str) -> str:
    for group, suffixes in DIAGRAM_GROUPS:
        if noun.endswith(suffixes):
            return group
    return "Other components"


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def _owner(resource: PlanResource, by_urn: dict[str, PlanResource]) -> str | None:
    """The nearest inferplane component at or above a resource."""
    current: PlanResource | None = resource
    while current is not None:
        if current.type.startswith(COMPONENT_PREFIX):
            return current.urn
        current = by_urn.get(current.parent)
    return None


def mermaid_diagram(plan: Plan) -> str:
    """A Mermaid flowchart of the platform's components, grouped, with their dependencies."""
    by_urn = plan.by_urn()
    components = [r for r in plan.resources if r.type.startswith(COMPONENT_PREFIX)]
    ids = {c.urn: f"c{index}" for index, c in enumerate(components)}
    lines = ["flowchart LR", f'  stack(["{_mermaid_text(plan.project)}/{_mermaid_text(plan.stack)}"])']
    if not components:
        lines.append('  none["no inferplane components registered"]')
        lines.append("  stack --- none")
        return "\n".join(lines)
    grouped: dict[str, list[PlanResource]] = {}
    for component in components:
        grouped.setdefault(_group_of(component.type.removeprefix(COMPONENT_PREFIX)), []).append(component)
    order = [group for group, _ in DIAGRAM_GROUPS] + ["Other components"]
    for index, group in enumerate(g for g in order if g in grouped):
        lines.append(f'  subgraph g{index}["{group}"]')
        for component in grouped[group]:
            noun = component.type.removeprefix(COMPONENT_PREFIX)
            lines.append(f'    {ids[component.urn]}["{_mermaid_text(noun)}<br/>{_mermaid_text(component.name)}"]')
        lines.append("  end")
    edges: set[tuple[str, str, str]] = set()
    for component in components:
        parent = _owner(by_urn[component.parent], by_urn) if component.parent in by_urn else None
        if parent is not None:
            edges.add((ids[parent], "-.->", ids[component.urn]))
    for resource in plan.resources:
        source = _owner(resource, by_urn)
        for dependency in resource.dependencies:
            target = _owner(by_urn[dependency], by_urn) if dependency in by_urn else None
            if source is not None and target is not None and source != target:
                edges.add((ids[source], "-->", ids[target]))
    top_level = sorted(ids[c.urn] for c in components if _owner_above(c, by_urn) is None)
    lines.extend(f"  stack --- {node}" for node in top_level)
    lines.extend(f"  {a} {arrow} {b}" for a, arrow, b in sorted(edges))
    return "\n".join(lines)


def _owner_above(component: PlanResource, by_urn: dict[str, PlanResource]) -> str | None:
    parent = by_urn.get(component.parent)
    return None if parent is None else _owner(parent, by_urn)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code_block(language: str, lines: Iterable[str]) -> list[str]:
    """A fenced block whose fence is longer than any backtick run inside (CommonMark's rule)."""
    body = list(lines)
    longest = max((len(run) for line in body for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", *body, fence]


def render_markdown(plan: Plan, diff: PlanDiff, *, against: str | None, notes: tuple[str, ...] = ()) -> str:
    """The comment for one stack. ``against`` names the base plan; without one, everything is a create."""
    out: list[str] = [f"### `{plan.stack}`: inferplane offline preview", ""]
    out.extend(_summary_section(plan, diff, against=against))
    out.extend(_cost_section(diff))
    out.extend(_notes_section(notes))
    out.extend(_changes_section(diff))
    out.extend(_violations_section(plan))
    out.extend(_sizing_section(plan))
    out.extend(_providers_section(plan))
    out.extend(_platform_section(plan))
    return "\n".join(out)


def _summary_section(plan: Plan, diff: PlanDiff, *, against: str | None) -> list[str]:
    """The change counts against the base plan, and the policy verdict."""
    out: list[str] = []
    baseline = f"against `{against}`" if against else "against an empty stack (no base plan)"
    out.append(f"**{summary_line(diff)}** ({len(plan.resources)} resources, {baseline})")
    out.append("")
    mandatory = len(plan.mandatory_violations)
    if not plan.policies:
        out.append("**Policies:** no policy pack, nothing evaluated")
    else:
        verdict = "failed" if mandatory else "passed"
        out.append(
            f"**Policies:** {verdict}: {len(plan.policies)} evaluated, {len(plan.violations)} violations "
            f"({mandatory} mandatory)"
        )
    out.append("")
    return out


def _cost_section(diff: PlanDiff) -> list[str]:
    """The table of the cost delta, per hour and per month, at min and max scale."""
    return [
        "| cost (on-demand accelerator nodes) | at min scale | at max scale |",
        "|---|---|---|",
        f"| per hour | {cost_delta(diff.old_cost.hourly_min, diff.new_cost.hourly_min)} | "
        f"{cost_delta(diff.old_cost.hourly_max, diff.new_cost.hourly_max)} |",
        f"| per month | {cost_delta(diff.old_cost.monthly_min, diff.new_cost.monthly_min)} | "
        f"{cost_delta(diff.old_cost.monthly_max, diff.new_cost.monthly_max)} |",
        "",
    ]


def _notes_section(notes: tuple[str, ...]) -> list[str]:
    """One quoted note per paragraph."""
    out: list[str] = []
    for note in notes:
        out.append(f"> note: {note}")
        out.append("")
    return out


def _changes_section(diff: PlanDiff) -> list[str]:
    """The diff, folded, at most ``_MAX_CHANGES`` resources of it."""
    out = [f"<details><summary>Changes ({len(diff.changes)})</summary>", ""]
    lines: list[str] = []
    for change in diff.changes[:_MAX_CHANGES]:
        lines.append(change_heading(change))
        lines.extend(f"{' ' * (len(SYMBOLS[change.op]) + 1)}{property_line(p)}" for p in change.changes)
    if len(diff.changes) > _MAX_CHANGES:
        lines.append(f"... and {len(diff.changes) - _MAX_CHANGES} more")
    out.extend(_code_block("diff", lines or ["no changes"]))
    out.extend(["", "</details>", ""])
    return out


def _violations_section(plan: Plan) -> list[str]:
    """The table of policy violations; nothing when there are none."""
    if not plan.violations:
        return []
    out = ["#### Policy violations", "", "| policy | enforcement | resource | message |", "|---|---|---|---|"]
    for v in plan.violations:
        resource = v.urn.rsplit("::", 1)[-1] if v.urn else "(stack)"
        out.append(f"| `{_cell(v.policy)}` | {v.enforcement} | `{_cell(resource)}` | {_cell(v.message)} |")
    out.append("")
    return out


def _sizing_section(plan: Plan) -> list[str]:
    """The table of each deployment's sizing and hourly cost."""
    out = [
        "#### Sizing",
        "",
        "| model | accelerator | TP | fits | max seqs | decode tok/s | cold start | $/h min | $/h max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for deployment in plan.sizing.get("deployments", []):
        result = deployment["result"]
        out.append(
            f"| {_cell(deployment['name'])} | {result['accelerator']} ({deployment['instance_type']}) | "
            f"{result['tensor_parallel_size']} | {'yes' if result['fits'] else 'no'} | "
            f"{result['max_concurrent_sequences']} | {result['decode_tokens_per_second']:,.0f} | "
            f"{result['cold_start_seconds']:,.0f} s | {usd(deployment['hourly_usd_min'])} | "
            f"{usd(deployment['hourly_usd_max'])} |"
        )
    out.append("")
    return out


def _providers_section(plan: Plan) -> list[str]:
    """Per gateway, the hosted providers its tiers fall back to and the tenants whose prompts may leave the VPC for
    each (the gateway Deployment's ``inferplane.io/gateway-providers``); nothing without a provider."""
    rows = []
    for resource in plan.resources:
        annotations = resource.inputs.get("metadata", {}).get("annotations", {})
        raw = annotations.get(GATEWAY_PROVIDERS) if isinstance(annotations, dict) else None
        if not isinstance(raw, str):
            continue
        try:
            providers = parse_gateway_annotations({GATEWAY_PROVIDERS: raw}).providers or {}
        except AnnotationError as exc:
            rows.append(f"| `{_cell(resource.name)}` | unreadable: {_cell(str(exc))} | | | |")
            continue
        for name, provider in sorted(providers.items()):
            tenants = ", ".join(provider.tenants) or "**none**"
            rows.append(
                f"| `{_cell(resource.name)}` | `{_cell(name)}` | {_cell(provider.host)} | "
                f"{_cell(', '.join(provider.tiers))} | {_cell(tenants)} |"
            )
    if not rows:
        return []
    header = ["#### Hosted providers", "", "| gateway | provider | host | tiers | tenants whose prompts may go there |"]
    return [*header, "|---|---|---|---|---|", *rows, ""]


def _platform_section(plan: Plan) -> list[str]:
    """The Mermaid diagram of the platform's components."""
    return ["#### Platform", "", *_code_block("mermaid", mermaid_diagram(plan).splitlines()), ""]
