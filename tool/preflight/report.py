"""How a preflight report reads: a table per run, a summary line, or one JSON object."""

from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from inferplane.tool.preflight.checks import Report, Status
from inferplane.tool.preflight.registry import CHECKS

_STYLE: dict[Status, str] = {"pass": "green", "warn": "yellow", "fail": "red"}


def render_report(console: Console, report: Report, stack: str) -> None:
    """The findings in check order, the skipped pools, and a one-line verdict."""
    who = f"account {report.account}" if report.account else "account unknown"
    console.print(
        f"Preflight of stack {escape(stack)} ({report.environment}) in {report.region}, {who}, "
        f"horizon {report.horizon_hours:g} h"
    )
    table = Table(show_header=True, title_justify="left")
    for column in ("check", "subject", "status", "detail"):
        table.add_column(column)
    order = {spec.id: index for index, spec in enumerate(CHECKS)}
    for finding in sorted(report.findings, key=lambda f: order.get(f.check, len(order))):
        style = _STYLE[finding.status]
        table.add_row(
            finding.check,
            escape(finding.subject),
            f"[{style}]{finding.status}[/{style}]",
            escape(finding.message),
        )
    console.print(table)
    for pool in report.skipped:
        console.print(f"skipped: pool {escape(pool.pool)} ({pool.instance_type}): {escape(pool.reason)}")
    unchecked = sorted({spec.id for spec in CHECKS} - {f.check for f in report.findings})
    if unchecked:
        console.print(f"nothing to check in this stack: {', '.join(unchecked)}")
    verdict = "[green]ready[/green]" if report.ok else "[red]not ready[/red]"
    console.print(f"{verdict}: {report.count('pass')} pass, {report.count('warn')} warn, {report.count('fail')} fail")


def report_json(report: Report, stack: str) -> str:
    """The report as one JSON object (``--json``)."""
    document = {"stack": stack, "ok": report.ok, **report.model_dump(mode="json")}
    return json.dumps(document, sort_keys=True)
