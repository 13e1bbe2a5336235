"""The performance model against published results: one line per row of tests/data/published_benchmarks.csv.

Prints each published figure, the prediction and the signed error, then per engine and metric the median absolute
error and the worst ratio (the goal: median within 25%, nothing off by more than 2x; each engine's rows are
summarised apart, so a handful of SGLang rows is not hidden among TensorRT-LLM's). ``--markdown`` prints a table.
The rows near the memory edge (weights at least half the replica's device memory, where how each engine sizes
its KV pool decides the batch) are listed after the others, with their weights' share, and summarised apart.

    python benchmarks/perf_model_accuracy.py [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests package, from a checkout

from inferplane.components.capacity import perf_model
from tests.published import Comparison, Metric, compare, median_abs_error, replica_for

METRICS: tuple[Metric, ...] = ("output_tokens_per_second", "mean_itl_ms")


def _label(c: Comparison) -> str:
    r = c.row
    what = (
        "out tok/s (saturation)"
        if r.metric == "output_tokens_per_second"
        else f"mean ITL ms @ {r.requests_per_second:g} rps"
    )
    mix = f"{r.input_tokens}/{r.output_tokens}"
    return f"{r.engine} | {r.model} | {r.accelerator} x{r.gpus} | {r.weights_dtype} | {mix} | {what}"


def _print_rows(comparisons: list[Comparison], *, markdown: bool, edge: bool) -> None:
    if markdown:
        share = " weights' share |" if edge else ""
        print(f"| engine | model | GPUs | precision | ISL/OSL | figure |{share} published | predicted | error |")
        print(f"|---|---|---|---|---|---|{'---:|' if edge else ''}---:|---:|---:|")
    labels = [_label(c) for c in comparisons]
    if edge:
        labels = [
            f"{label} | {'' if markdown else 'weights '}{perf_model.weights_share(replica_for(c.row)):.0%}"
            for label, c in zip(labels, comparisons, strict=True)
        ]
    width = max([80, *map(len, labels)])
    for label, c in zip(labels, comparisons, strict=True):
        if markdown:
            print(f"| {label} | {c.row.published:,.1f} | {c.predicted:,.1f} | {c.error:+.0%} |")
        else:
            print(
                f"{label:{width}} published {c.row.published:10,.1f}  predicted {c.predicted:10,.1f}  {c.error:+5.0%}"
            )


def _summary(comparisons: list[Comparison], metric: Metric, what: str) -> str:
    rows = [c for c in comparisons if c.row.metric == metric]
    if not rows:
        return f"{metric} ({what}): no rows"
    return (
        f"{metric} ({what}): {len(rows)} rows, median |error| {median_abs_error(rows, metric):.1%}, "
        f"mean signed error {statistics.mean(c.error for c in rows):+.1%}, "
        f"worst ratio {max(c.ratio for c in rows):.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    comparisons = compare()
    edge = [c for c in comparisons if perf_model.at_memory_edge(replica_for(c.row))]
    rest = [c for c in comparisons if c not in edge]
    _print_rows(rest, markdown=args.markdown, edge=False)
    share = f"{perf_model.MEMORY_EDGE_WEIGHTS_SHARE:.0%}"
    print(f"\nNear the memory edge (weights at least {share} of the replica's device memory):\n")
    _print_rows(edge, markdown=args.markdown, edge=True)
    for engine in sorted({c.row.engine for c in comparisons}):
        print(f"\n{engine}:")
        for metric in METRICS:
            print(_summary([c for c in comparisons if c.row.engine == engine], metric, "all"))
            print(_summary([c for c in rest if c.row.engine == engine], metric, "away from the memory edge"))
            print(_summary([c for c in edge if c.row.engine == engine], metric, "near the memory edge"))


if __name__ == "__main__":
    main()
