"""Published benchmark results (``tests/data/published_benchmarks.csv``) and the performance model's prediction of each.

Like with like: a ``max_throughput`` row is a saturation run, compared with :func:`perf_model.saturation` under the
benchmarked engine's own settings: for TensorRT-LLM ``trtllm-bench throughput`` (every request queued at once, a
batch of up to 4096 sequences and 8192 tokens per step, KV cache at 0.95 of free memory); for SGLang
``sglang.bench_serving`` at an infinite request rate against a server on its defaults (:func:`sglang_replica`). A
``rate`` row is an online run at a request rate, compared with :func:`perf_model.at_rate` at that rate (mean ITL
against mean ITL).
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.sizing import sglang_kv_pool_bytes, weights_bytes
from inferplane.components.catalog import get_accelerator, get_model
from inferplane.components.spec.platform_spec import Engine, KvCacheDtype, WeightsDtype

DATA = Path(__file__).parent / "data" / "published_benchmarks.csv"

TRTLLM_BENCH_MAX_BATCH = 4096
TRTLLM_BENCH_MAX_TOKENS = 8192
"""``Max Runtime Batch Size: 4096`` and ``Max Runtime Tokens: 8192``, as the perf overview's sample output of
``trtllm-bench throughput`` prints them (same source as the rows)."""
TRTLLM_BENCH_KV_FRACTION = 0.95
"""``--kv_cache_free_gpu_mem_fraction 0.95``, which the perf overview says most runs used."""

SGLANG_040_MEM_FRACTION_STATIC = {16: 0.79, 8: 0.81, 4: 0.85, 2: 0.87, 1: 0.88}
"""SGLang 0.4.0's ``--mem-fraction-static`` default by the least TP size it applies from (``ServerArgs.__post_init__``
in ``sglang/srt/server_args.py`` of the sglang 0.4.0 and 0.4.0.post1 wheels on PyPI), which the SGLang rows' servers
ran on: their launch commands set no fraction."""
SGLANG_040_CHUNKED_PREFILL_SIZE = 8192
"""SGLang 0.4.0's ``--chunked-prefill-size`` default on a GPU of 25 GB or more (same source)."""


def sglang_040_max_running_requests(kv_capacity_tokens: int, context_length: int) -> int:
    """SGLang 0.4.0's default batch slots: ``min(max_total_num_tokens // 2, req_to_token_pool.size)``, the pool
    holding ``min(max(int(tokens / context_len x 512), 2048), 4096) + 1`` requests (``TpModelWorker.__init__`` in
    ``sglang/srt/managers/tp_worker.py`` and ``ModelRunner.init_memory_pool`` in
    ``sglang/srt/model_executor/model_runner.py`` of the sglang 0.4.0 wheel)."""
    pool = min(max(int(kv_capacity_tokens / context_length * 512), 2048), 4096) + 1
    return min(kv_capacity_tokens // 2, pool)


Metric = Literal["output_tokens_per_second", "mean_itl_ms"]


@dataclass(frozen=True)
class Published:
    """One row of the data file."""

    source: str
    engine: Engine
    model: str
    accelerator: str
    gpus: int
    weights_dtype: WeightsDtype
    kv_cache_dtype: KvCacheDtype
    input_tokens: int
    output_tokens: int
    scenario: Literal["max_throughput", "rate"]
    requests_per_second: float | None
    metric: Metric
    published: float
    measured: str


@dataclass(frozen=True)
class Comparison:
    """A published figure and the model's prediction of it."""

    row: Published
    predicted: float

    @property
    def error(self) -> float:
        """Signed relative error, (predicted - published) / published."""
        return (self.predicted - self.row.published) / self.row.published

    @property
    def ratio(self) -> float:
        """How far off, as a factor >= 1 either way."""
        return max(self.predicted / self.row.published, self.row.published / self.predicted)


def load() -> list[Published]:
    """Every row of the data file (comment lines start with ``#``)."""
    with DATA.open(encoding="utf-8") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    rows = []
    for raw in csv.DictReader(lines):
        rate = raw["requests_per_second"]
        rows.append(
            Published(
                source=raw["source"],
                engine=cast(Engine, raw["engine"]),
                model=raw["model"],
                accelerator=raw["accelerator"],
                gpus=int(raw["gpus"]),
                weights_dtype=cast(WeightsDtype, raw["weights_dtype"]),
                kv_cache_dtype=cast(KvCacheDtype, raw["kv_cache_dtype"]),
                input_tokens=int(raw["input_tokens"]),
                output_tokens=int(raw["output_tokens"]),
                scenario=cast(Literal["max_throughput", "rate"], raw["scenario"]),
                requests_per_second=float(rate) if rate else None,
                metric=cast(Metric, raw["metric"]),
                published=float(raw["published"]),
                measured=raw["measured"],
            )
        )
    return rows


def sglang_replica(row: Published) -> perf_model.Replica:
    """The replica an SGLang row's server ran: SGLang 0.4.0's defaults for its TP size and GPU (the rows' launch
    commands set only the model, ``--tp-size``, ``--disable-radix-cache`` and ``--enable-torch-compile``). Its KV pool
    is the fraction of the memory free before loading less what loading took, as in 0.5.23
    (``ModelRunner.profile_max_num_token`` of the sglang 0.4.0 wheel): :func:`sizing.sglang_kv_pool_bytes`."""
    model = get_model(row.model)
    accelerator = get_accelerator(row.accelerator)
    fraction = next(value for size, value in SGLANG_040_MEM_FRACTION_STATIC.items() if row.gpus >= size)
    pool = sglang_kv_pool_bytes(
        device_bytes=row.gpus * accelerator.memory_bytes,
        mem_fraction_static=fraction,
        weights=weights_bytes(model, row.weights_dtype),
    )
    # The KV bytes per token (heads replicated past the KV heads) are the replica's own arithmetic: build it, then
    # fill in the pool and the slots that follow from it.
    replica = perf_model.Replica(
        model=model,
        accelerator=accelerator,
        tensor_parallel_size=row.gpus,
        weights_dtype=row.weights_dtype,
        kv_cache_dtype=row.kv_cache_dtype,
        engine=row.engine,
        max_num_seqs=0,
        max_num_batched_tokens=SGLANG_040_CHUNKED_PREFILL_SIZE,
        kv_capacity_tokens=0,
    )
    tokens = max(pool // replica.kv_bytes_per_token, 0)
    slots = sglang_040_max_running_requests(tokens, model.max_context)
    return dataclasses.replace(replica, max_num_seqs=slots, kv_capacity_tokens=tokens)


def replica_for(row: Published) -> perf_model.Replica:
    """The replica the benchmark ran, with the benchmark tool's engine settings."""
    if row.engine == "sglang":
        return sglang_replica(row)
    model = get_model(row.model)
    accelerator = get_accelerator(row.accelerator)
    capacity = perf_model.trtllm_kv_capacity_tokens(
        model,
        accelerator,
        tensor_parallel_size=row.gpus,
        weights_dtype=row.weights_dtype,
        kv_cache_dtype=row.kv_cache_dtype,
        free_fraction=TRTLLM_BENCH_KV_FRACTION,
    )
    return perf_model.Replica(
        model=model,
        accelerator=accelerator,
        tensor_parallel_size=row.gpus,
        weights_dtype=row.weights_dtype,
        kv_cache_dtype=row.kv_cache_dtype,
        engine=row.engine,
        max_num_seqs=TRTLLM_BENCH_MAX_BATCH,
        max_num_batched_tokens=TRTLLM_BENCH_MAX_TOKENS,
        kv_capacity_tokens=capacity,
    )


def predict(row: Published) -> Comparison:
    """The model's figure for the row's scenario and metric."""
    replica = replica_for(row)
    workload = perf_model.Workload(input_tokens=row.input_tokens, output_tokens=row.output_tokens)
    if row.metric == "output_tokens_per_second":
        value = perf_model.saturation(replica, workload).output_tokens_per_second
    else:
        assert row.requests_per_second is not None
        value = perf_model.at_rate(replica, workload, row.requests_per_second).itl_mean_ms
    return Comparison(row=row, predicted=value)


def compare() -> list[Comparison]:
    """A comparison for every row."""
    return [predict(row) for row in load()]


def median_abs_error(comparisons: list[Comparison], metric: Metric) -> float:
    """Median of |relative error| over one metric's rows."""
    return statistics.median(abs(c.error) for c in comparisons if c.row.metric == metric)
