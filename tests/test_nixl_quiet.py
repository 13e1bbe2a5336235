"""The disaggregated E2E's NIXL servers run without NIXL's spinning progress thread (tests/nixl_quiet): checked in
the vLLM venv's own interpreter, with the environment the servers get."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.gateway_support import VLLM_MISSING, VLLM_READY_MARKER, VLLM_VENV, nixl_env

PROBE = """
import json
from nixl._api import nixl_agent_config
print(json.dumps([nixl_agent_config().enable_pthread, nixl_agent_config(num_threads=4).enable_pthread]))
"""
"""What vLLM 0.32 constructs (``nixl_utils.nixl_agent_config``, with and without ``num_threads``), as NIXL reads it."""


def _progress_threads(env: dict[str, str]) -> list[bool]:
    if not VLLM_READY_MARKER.is_file():
        pytest.skip(VLLM_MISSING)
    python = VLLM_VENV / "bin" / "python"
    done = subprocess.run([str(python), "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=True)
    return list(json.loads(done.stdout))


def test_the_servers_environment_turns_the_progress_thread_off() -> None:
    assert _progress_threads({**os.environ, **nixl_env()}) == [False, False]


def test_without_it_nixl_starts_one() -> None:
    """NIXL's own default, which the servers would otherwise run with."""
    env = {k: v for k, v in {**os.environ, **nixl_env()}.items() if k != "PYTHONPATH"}
    assert _progress_threads(env) == [True, True]
