"""make test runs the tests marked ``alone`` in a second phase of their own, collecting only ``tests/e2e`` (``pytest
-m alone tests/e2e``: about 5 s less than collecting the whole suite to select four tests); the first phase deselects
them. A test so marked anywhere else would run in neither."""

from __future__ import annotations

import re
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
ALONE_DIR = TESTS_DIR / "e2e"
MARKED = re.compile(r"\bmark\s*\.\s*alone\b")


def test_every_test_marked_alone_is_in_the_folder_the_second_phase_collects() -> None:
    marked = sorted(path for path in TESTS_DIR.rglob("*.py") if MARKED.search(path.read_text(encoding="utf-8")))
    assert marked, "the disaggregated E2E is marked alone"
    assert [path.relative_to(TESTS_DIR).as_posix() for path in marked if ALONE_DIR not in path.parents] == []
