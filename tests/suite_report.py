"""The suite's own cost, printed at the end of every run: its wall time, the time its tests took (setup, call and
teardown summed, across workers), and the slowest tests, so a contributor sees a test grow slow before the suite
does (``make test`` promises at most 6 minutes on two cores). A report, never an assertion: timings on a shared
machine are not a test's verdict.

Registered by tests/conftest.py (``pytest_plugins``); under pytest-xdist the controller prints it from the reports
every worker sends.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

SLOWEST = 10
"""How many of the slowest tests the report lists."""
TITLE = "suite report"


class _Report:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.outcomes: defaultdict[str, int] = defaultdict(int)

    def add(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.outcome] += 1


_reports: list[_Report] = []
"""The running session's report, kept by the process that configured the run (``pytest_runtest_logreport`` is
given no config)."""


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or the one process) sums what every worker reports
        _reports.append(_Report())


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and _reports:
        _reports.pop()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every phase of every test (xdist forwards the workers' reports to the controller's hook)."""
    if _reports:
        _reports[-1].add(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The wall time, the tests' own time and the slowest tests."""
    if hasattr(config, "workerinput") or not _reports or not _reports[-1].seconds:
        return
    report = _reports[-1]
    wall = time.monotonic() - report.started
    total = sum(report.seconds.values())
    terminalreporter.write_sep("=", TITLE)
    outcomes = ", ".join(f"{count} {outcome}" for outcome, count in sorted(report.outcomes.items()))
    terminalreporter.write_line(
        f"wall {wall:.1f} s for {len(report.seconds)} tests ({outcomes}); the tests' own time {total:.1f} s "
        f"(setup, call and teardown, summed over workers)"
    )
    terminalreporter.write_line(f"the {min(SLOWEST, len(report.seconds))} slowest tests:")
    slowest = sorted(report.seconds.items(), key=lambda item: (-item[1], item[0]))[:SLOWEST]
    for nodeid, seconds in slowest:
        terminalreporter.write_line(f"  {seconds:7.2f} s  {nodeid}")
