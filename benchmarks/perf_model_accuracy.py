"""The performance model against published results: one line per row of tests/data/published_benchmarks.csv.

Prints each published figure, the prediction and the signed error, then per metric the median absolute error
and the worst ratio (the goal: median within 25%, nothing off by more than 2x). ``--markdown`` prints a table.

    python benchmarks/perf_model_accuracy.py [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests package, from a checkout

from tests.published import Comparison, compare, median_abs_error


def _label(c: Comparison) -> str:
    r = c.row
    what = (
        "out tok/s (saturation)"
        if r.metric == "output_tokens_per_second"
        else f"mean ITL ms @ {r.requests_per_second:g} rps"
    )
    return f"{r.model} | {r.accelerator} x{r.gpus} | {r.weights_dtype} | {r.input_tokens}/{r.output_tokens} | {what}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    comparisons = compare()
    if args.markdown:
        print("| model | GPUs | precision | ISL/OSL | figure | published | predicted | error |")
        print("|---|---|---|---|---|---:|---:|---:|")
    for c in comparisons:
        if args.markdown:
            print(f"| {_label(c)} | {c.row.published:,.1f} | {c.predicted:,.1f} | {c.error:+.0%} |")
        else:
            print(f"{_label(c):80} published {c.row.published:10,.1f}  predicted {c.predicted:10,.1f}  {c.error:+5.0%}")
    for metric in ("output_tokens_per_second", "mean_itl_ms"):
        rows = [c for c in comparisons if c.row.metric == metric]
        print(
            f"{metric}: {len(rows)} rows, median |error| {median_abs_error(comparisons, metric):.1%}, "
            f"mean signed error {statistics.mean(c.error for c in rows):+.1%}, "
            f"worst ratio {max(c.ratio for c in rows):.2f}x"
        )


if __name__ == "__main__":
    main()
