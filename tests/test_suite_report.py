"""The suite reports its own cost at the end of every run (tests/suite_report.py): checked on a run of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import PROJECT_DIR

SAMPLE = """
import pytest

@pytest.fixture
def slow_setup():
    total = sum(range(10_000_000))  # work, not a sleep: the setup's time counts as the test's
    yield total

def test_with_a_costly_setup(slow_setup):
    assert slow_setup > 0

def test_quick():
    assert True

@pytest.mark.parametrize("n", range(12))
def test_many(n):
    assert n >= 0
"""


def _run(directory: Path, *options: str) -> str:
    (directory / "test_sample.py").write_text(SAMPLE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.suite_report", "-p", "no:cacheprovider", *options, directory],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _report(output: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "suite report" in line)
    return lines[start + 1 : start + 3 + 10]


def test_the_report_gives_the_wall_time_and_the_ten_slowest_tests_with_their_setup(tmp_path: Path) -> None:
    report = _report(_run(tmp_path, "-q", "-c", "/dev/null"))
    assert report[0].startswith("wall ") and " s for 14 tests (14 passed); the tests' own time " in report[0]
    assert report[1] == "the 10 slowest tests:"
    listed = [line.split(" s  ", 1)[1] for line in report[2:]]
    assert len(listed) == 10 and listed[0].endswith("test_sample.py::test_with_a_costly_setup")


def test_under_xdist_the_controller_reports_every_workers_tests(tmp_path: Path) -> None:
    report = _report(_run(tmp_path, "-q", "-c", "/dev/null", "-n", "2"))
    assert " s for 14 tests (14 passed)" in report[0]
