"""The timing profile a simulated engine follows, generated from the performance model.

NVIDIA Dynamo's mocker times each engine step from ``--planner-profile-data FILE.npz`` (ai-dynamo 1.6.1,
``dynamo/mocker/args.py`` ``resolve_planner_profile_data``): ``prefill_isl`` and ``prefill_ttft_ms`` (a prefill's time
by its new prompt tokens) and ``decode_active_kv_tokens`` x ``decode_context_length`` -> ``decode_itl`` (ms; row i is
``decode_active_kv_tokens[i]``, column j ``decode_context_length[j]``, the orientation Dynamo's own converter writes:
``dynamo/mocker/utils/planner_profiler_perf_data_converter.py``). Both axes must rise strictly (its interpolator
refuses otherwise).

The mocker times a step as the sum of its two parts: ``decode_itl`` at the step's active KV tokens plus
``prefill_ttft_ms`` of the step's new prompt tokens (measured here on one simulated H100 x 4 replica: a 200-token
prompt arriving during a stream stretched that step from 17.3 to 38.7 ms, the two table values added). The
performance model's step reads the weights once for both (:func:`~inferplane.components.capacity.perf_model.step_time`:
``max(weights, GEMM FLOPs) + max(KV reads, attention FLOPs)``). So the decode table is the model's decode step of
``kv / ctx`` sequences, and the prefill table is what prompt tokens *add* to a step that already decodes (their GEMM
FLOPs beyond the weights' read, and their attention), not a prefill step alone: then every step the mocker runs,
decode, prefill or mixed, is the model's step (to within the one-sequence decode the marginal is taken over), and a
simulated fleet inherits the model's calibration against published benchmarks
(``benchmarks/perf_model_accuracy.py``) and its error. A prompt longer than the step budget is its chunks' steps, as
chunked prefill runs it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity.perf_model import Replica, step_time

PREFILL_POINTS = 96
"""Points on the prefill axis: every chunk boundary is one, plus a geometric spread below the first (the short
prompts whose time the fixed per-step overhead dominates)."""
DECODE_POINTS = 48
"""Points on each decode axis (48 x 48 step times: under a second to compute for the largest catalog model)."""


class TimingProfile(BaseModel):
    """The arrays of one mocker-format profile, in milliseconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_isl: tuple[float, ...] = Field(description="New prompt tokens, rising strictly.")
    prefill_ttft_ms: tuple[float, ...] = Field(description="Time to prefill that many tokens (chunked), ms.")
    decode_active_kv_tokens: tuple[float, ...] = Field(description="KV tokens of the decoding batch, rising.")
    decode_context_length: tuple[float, ...] = Field(description="Mean context of a decoding sequence, rising.")
    decode_itl: tuple[tuple[float, ...], ...] = Field(
        description="One decode step, ms: row i is decode_active_kv_tokens[i], column j decode_context_length[j]."
    )


def _rising(low: float, high: float, count: int) -> list[float]:
    """``count`` points from ``low`` to ``high``, geometric (the short end matters most), strictly rising."""
    points = [low * (high / low) ** (i / (count - 1)) for i in range(count)]
    result: list[float] = []
    for point in points:
        value = float(round(point))
        if not result or value > result[-1]:
            result.append(value)
    return result


def prefill_added_seconds(replica: Replica, chunk: int, prompt: int) -> float:
    """What ``chunk`` tokens of a ``prompt``-token prompt add to a step decoding one sequence."""
    return step_time(replica, 1, chunk, 0, prompt).seconds - step_time(replica, 1, 0, 0, prompt).seconds


def prefill_ms(replica: Replica, tokens: int) -> float:
    """What prefilling ``tokens`` new tokens adds to the steps that carry them: one step per chunk of the step
    budget (the mocker adds each step's decode part)."""
    budget = replica.max_num_batched_tokens
    full, rest = divmod(tokens, budget)
    seconds = full * prefill_added_seconds(replica, budget, tokens)
    if rest:
        seconds += prefill_added_seconds(replica, rest, tokens)
    return seconds * 1000


def decode_ms(replica: Replica, active_kv_tokens: float, context: float) -> float:
    """One decode step of a batch holding ``active_kv_tokens`` at mean context ``context`` (at least one sequence)."""
    sequences = max(1.0, active_kv_tokens / context)
    return step_time(replica, sequences, 0, context, math.ceil(context)).seconds * 1000


def timing_profile(replica: Replica, max_context: int) -> TimingProfile:
    """The profile of ``replica`` for prompts and contexts up to ``max_context`` tokens."""
    isl = _rising(1, max_context, PREFILL_POINTS)
    kv = [0.0, *_rising(16, max(replica.kv_capacity_tokens, 32), DECODE_POINTS - 1)]
    context = _rising(1, max_context, DECODE_POINTS)
    return TimingProfile(
        prefill_isl=tuple(isl),
        prefill_ttft_ms=tuple(prefill_ms(replica, int(n)) for n in isl),
        decode_active_kv_tokens=tuple(kv),
        decode_context_length=tuple(context),
        decode_itl=tuple(tuple(decode_ms(replica, k, c) for c in context) for k in kv),
    )


def write_profile(profile: TimingProfile, path: Path) -> Path:
    """The profile as the mocker reads it (``numpy.savez``, float64 arrays); returns ``path``."""
    np.savez(
        path,
        prefill_isl=np.array(profile.prefill_isl),
        prefill_ttft_ms=np.array(profile.prefill_ttft_ms),
        decode_active_kv_tokens=np.array(profile.decode_active_kv_tokens),
        decode_context_length=np.array(profile.decode_context_length),
        decode_itl=np.array(profile.decode_itl),
    )
    return path
