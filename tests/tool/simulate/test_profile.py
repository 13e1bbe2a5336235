"""The timing profile: every point is the performance model's step time, in the orientation and units the mocker
reads, and the mocker accepts the file."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import numpy as np
import pytest

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.sizing import size_platform
from inferplane.components.catalog import get_accelerator
from inferplane.tool.simulate.profile import (
    DECODE_POINTS,
    decode_ms,
    prefill_ms,
    timing_profile,
    write_profile,
)
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR
from tests.tool.simulate.simulator import simulator_python

SHIPPED = [
    (stack, deployment.name)
    for stack in ("dev", "staging", "prod")
    for deployment in load_stack(PROJECT_DIR, stack).platform.models
]


def replica_of(stack: str, model: str) -> tuple[perf_model.Replica, int]:
    spec = load_stack(PROJECT_DIR, stack).platform
    sizing = next(d for d in size_platform(spec).deployments if d.name == model)
    deployment = next(d for d in spec.models if d.name == model)
    accelerator = get_accelerator(sizing.result.accelerator)
    replica = perf_model.replica_from_sizing(
        sizing.result, deployment.architecture_resolved, accelerator, sizing.engine
    )
    return replica, deployment.max_context


@pytest.mark.parametrize(("stack", "model"), SHIPPED)
def test_every_point_is_the_models_step_time(stack: str, model: str) -> None:
    replica, context = replica_of(stack, model)
    profile = timing_profile(replica, context)
    for axis in (profile.prefill_isl, profile.decode_active_kv_tokens, profile.decode_context_length):
        assert all(b > a for a, b in itertools.pairwise(axis)), "the mocker's interpolator needs rising axes"
    assert profile.prefill_isl[0] == 1 and profile.prefill_isl[-1] == context
    assert profile.decode_context_length[-1] == context
    assert profile.decode_active_kv_tokens[0] == 0
    assert profile.decode_active_kv_tokens[-1] == replica.kv_capacity_tokens
    for tokens, ms in zip(profile.prefill_isl, profile.prefill_ttft_ms, strict=True):
        assert ms == prefill_ms(replica, int(tokens))
    assert len(profile.decode_itl) == DECODE_POINTS
    for i, kv in enumerate(profile.decode_active_kv_tokens):
        for j, ctx in enumerate(profile.decode_context_length):
            assert profile.decode_itl[i][j] == decode_ms(replica, kv, ctx)


def test_a_prompt_longer_than_the_step_budget_is_its_chunks() -> None:
    replica, _ = replica_of("prod", "llama-70b")
    budget = replica.max_num_batched_tokens
    tokens = 2 * budget + 100

    def added(chunk: int) -> float:
        with_chunk = perf_model.step_time(replica, 1, chunk, 0, tokens).seconds
        return with_chunk - perf_model.step_time(replica, 1, 0, 0, tokens).seconds

    assert prefill_ms(replica, tokens) == pytest.approx((2 * added(budget) + added(100)) * 1000)


def test_the_mockers_sum_of_parts_is_the_models_step() -> None:
    """The mocker adds a step's decode and prefill parts; the model reads the weights once for both. The prefill
    table is what prompt tokens add, so decode + prefill is the model's mixed step (to the one sequence the
    difference is taken over), where the plain prefill time would count the weights twice."""
    replica, _ = replica_of("prod", "llama-70b")
    for chunk in (16, 200, 1000, replica.max_num_batched_tokens):
        mixed = perf_model.step_time(replica, 1, chunk, 0, chunk).seconds * 1000
        assert decode_ms(replica, 0, 1) + prefill_ms(replica, chunk) == pytest.approx(mixed, rel=0.02)
    alone = perf_model.step_time(replica, 0, 200, 0, 200).seconds * 1000
    assert decode_ms(replica, 0, 1) + alone > 1.5 * perf_model.step_time(replica, 1, 200, 0, 200).seconds * 1000


def test_a_decode_step_runs_active_tokens_over_context_sequences() -> None:
    replica, _ = replica_of("prod", "llama-70b")
    expected = perf_model.step_time(replica, 12.0, 0, 1000, 1000).seconds * 1000
    assert decode_ms(replica, 12_000, 1000) == expected
    alone = perf_model.step_time(replica, 1.0, 0, 1000, 1000).seconds * 1000
    assert decode_ms(replica, 0, 1000) == alone, "an empty batch is timed as one sequence"


def test_the_file_holds_the_arrays_the_mocker_reads(tmp_path: Path) -> None:
    replica, context = replica_of("dev", "llama-8b")
    profile = timing_profile(replica, context)
    with np.load(write_profile(profile, tmp_path / "p.npz")) as data:
        assert sorted(data.files) == sorted(type(profile).model_fields)
        assert data["decode_itl"].shape == (len(profile.decode_active_kv_tokens), len(profile.decode_context_length))
        assert data["decode_itl"][3, 5] == profile.decode_itl[3][5]
        assert list(data["prefill_ttft_ms"]) == list(profile.prefill_ttft_ms)


def test_the_mocker_accepts_the_file(tmp_path: Path) -> None:
    """Dynamo's own check of a profile (``is_mocker_format_npz``, which ``--planner-profile-data`` runs)."""
    python = simulator_python()
    replica, context = replica_of("dev", "llama-8b")
    path = write_profile(timing_profile(replica, context), tmp_path / "p.npz")
    check = (
        "import sys; from pathlib import Path; "
        "from dynamo.mocker.utils.planner_profiler_perf_data_converter import is_mocker_format_npz; "
        "sys.exit(0 if is_mocker_format_npz(Path(sys.argv[1])) else 1)"
    )
    subprocess.run([str(python), "-c", check, str(path)], check=True, timeout=120)
