"""The simulator venv for tests: where ``make simulator`` put it, or a skip saying how to get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplane.tool.simulate import fleet as fl
from tests.conftest import PROJECT_DIR


def simulator_python() -> Path:
    """The Python with ai-dynamo, or skip naming the make target."""
    try:
        return fl.find_simulator({}, PROJECT_DIR)
    except fl.SimulatorError as exc:
        pytest.skip(f"{exc} (make test installs it)")
