"""Published benchmark results (``tests/data/published_benchmarks.csv``) and the performance model's prediction of each.

Like with like: a ``max_throughput`` row is a saturation run (``trtllm-bench throughput``: every request queued at
once, TensorRT-LLM's batch of up to 4096 sequences and 8192 tokens per step, KV cache at 0.95 of free memory), so
it is compared with :func:`perf_model.saturation`; a ``rate`` row is an online run at a request rate, compared with
:func:`perf_model.at_rate` at that rate (mean ITL against mean ITL).
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from inferplane.components.capacity import perf_model
from inferplane.components.catalog import get_accelerator, get_model
from inferplane.components.spec.platform_spec import Engine, KvCacheDtype, WeightsDtype

DATA = Path(__file__).parent / "data" / "published_benchmarks.csv"

TRTLLM_BENCH_MAX_BATCH = 4096
TRTLLM_BENCH_MAX_TOKENS = 8192
"""``Max Runtime Batch Size: 4096`` and ``Max Runtime Tokens: 8192``, as the perf overview's sample output of
``trtllm-bench throughput`` prints them (same source as the rows)."""
TRTLLM_BENCH_KV_FRACTION = 0.95
"""``--kv_cache_free_gpu_mem_fraction 0.95``, which the perf overview says most runs used."""

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


def replica_for(row: Published) -> perf_model.Replica:
    """The replica the benchmark ran, with the benchmark tool's engine settings."""
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
