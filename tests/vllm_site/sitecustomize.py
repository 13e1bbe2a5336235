"""Run by every Python process of the test's NIXL vLLM servers (``nixl_env`` puts this directory on ``PYTHONPATH``):
asks Linux for the AMX tile state before any kernel runs.

vLLM 0.32's CPU attention takes its AMX kernel wherever torch reports AMX (bf16, blocks of 32 tokens) but never asks
for the state itself (``torch.cpu._init_amx``); oneDNN asks, lazily, at its first AMX matmul. A server whose first
forward is the decode of a KV cache pulled from another (the disaggregated E2E's consumer) runs that attention first
and dies of SIGILL ("Fatal Python error: Illegal instruction" in ``cpu_attention_with_kv_cache``) on a machine with
AMX, as this project's CI machine of 2026-12-05 has. Not the product's concern: it serves on GPUs.
"""

import contextlib
import importlib
import os

if os.environ.get("INFERPLANE_TEST_INIT_AMX") == "1":
    # torch is the vLLM venv's, not this project's: imported by name. Another torch, or no AMX: nothing to ask for.
    with contextlib.suppress(ImportError, AttributeError, RuntimeError):
        importlib.import_module("torch.cpu")._init_amx()
