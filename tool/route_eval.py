"""``inferplane route eval``: how well routing by difficulty trades quality for strong-model calls, on labelled prompts.

Reads prompts labelled with whether a tier's cheap model and its strong model answered each correctly (JSON lines
``{"prompt": ..., "cheap_correct": true|false, "strong_correct": true|false}``, the format a tier's ``route.examples``
file has; or a CSV with a ``prompt`` column and the two models' columns named by ``--cheap-column`` and
``--strong-column``, as RouteLLM publishes its MMLU labels), leaves out ``--exclude``'s prompts (JSON lines with a
``prompt`` or an ``eval_prompt``: RouteLLM's list of prompts its routers were trained on), and splits the rest at
random (``--seed``) into training prompts, the examples, and test prompts no choice ever sees. Every prompt is
embedded with the configured embedder (``--stack S``: that stack's ``cache.embedder``, the one the gateway scores
with; ``--embedder`` overrides it) and each test prompt scored by its nearest training examples exactly as the
gateway's processor scores it (:class:`inferplane.processor.difficulty.DifficultyScorer`).

It prints, on the test prompts, RouteLLM's figures (:mod:`inferplane.tool.route_figures`): the curve of quality against
the share of strong calls beside a random router's and the perfect one's, CPT(50%) and CPT(80%) and what they save
against random, APGR; the thresholds that send 10%..90% of the *training* prompts (each scored without itself) to the
strong model, with the share and quality each gives on the test prompts (a tier's ``route.threshold`` is chosen
here); CPT over ``--repeat`` more random splits (how much one split's figure can be trusted); and the decision's CPU
time per prompt beside the embedding's.

Exit 0 with the figures, 2 when the labels are invalid (named by file and line), 3 when the embedder fails.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from inferplane.components.spec.platform_spec import CacheSpec
from inferplane.processor.cache.embedders import Embedder
from inferplane.processor.difficulty import (
    DifficultyScorer,
    ExamplesError,
    LabelledExample,
    decide,
    gains,
    parse_examples,
    route_text,
)
from inferplane.tool.cache_eval import (
    EmbedderFailedError,
    embed_texts,
    embedder_name,
    embedder_option,
    with_offline_embedder,
)
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from inferplane.tool.files import UnreadableFileError, read_regular_file
from inferplane.tool.route_figures import Curve, curve, oracle_scores, threshold_for_share
from inferplane.tool.stackfile import find_project_dir, load_stack, printable

MAX_LABELS_FILE_BYTES = 64 * 1024 * 1024
"""A labels file over 64 MiB is refused unread (RouteLLM's 14,042 MMLU prompts take 7 MB)."""
DEFAULT_NEIGHBOURS = 100
"""Examples a score averages unless ``--neighbours`` says otherwise (see docs/routing.md for the sweep behind it)."""
SHARES = tuple(round(i / 10, 1) for i in range(1, 10))
"""Strong-call shares the thresholds are calibrated for."""
CPU_SAMPLE = 500
"""Test prompts whose decision is timed one at a time, as the processor makes it."""
TRUE_VALUES = {"true": True, "false": False}


class LabelsError(Exception):
    """The labels cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Labels:
    """Labelled prompts, those left out taken away."""

    name: str
    examples: tuple[LabelledExample, ...]
    excluded: int

    @cached_property
    def cheap_correct(self) -> npt.NDArray[np.bool_]:
        """Whether the cheap model answered each prompt, in order."""
        return np.array([e.cheap_correct for e in self.examples])

    @cached_property
    def strong_correct(self) -> npt.NDArray[np.bool_]:
        """Whether the strong model answered each prompt, in order."""
        return np.array([e.strong_correct for e in self.examples])


@dataclass(frozen=True)
class Split:
    """One random split's figures on its test prompts."""

    seed: int
    scorer: DifficultyScorer
    """The examples of its training prompts."""
    routed: Curve
    training_scores: npt.NDArray[np.float64]
    test_scores: npt.NDArray[np.float64]
    test: npt.NDArray[np.int64]


def _flag(value: str | None, name: str, column: str, line: int) -> bool:
    text = (value or "").strip().lower()
    if text not in TRUE_VALUES:
        raise LabelsError(f"{name}:{line}: column {column!r} is {value!r}, not True or False")
    return TRUE_VALUES[text]


def _csv_examples(text: str, name: str, cheap: str, strong: str) -> list[LabelledExample]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in ("prompt", cheap, strong) if c not in (reader.fieldnames or ())]
    if missing:
        raise LabelsError(f"{name}:1: no column {', '.join(repr(c) for c in missing)} (has {reader.fieldnames})")
    examples = []
    for row in reader:
        line = reader.line_num
        try:
            examples.append(
                LabelledExample(
                    prompt=row["prompt"],
                    cheap_correct=_flag(row[cheap], name, cheap, line),
                    strong_correct=_flag(row[strong], name, strong, line),
                )
            )
        except ValueError as error:  # pydantic's ValidationError is one
            raise LabelsError(f"{name}:{line}: {error}") from None
    return examples


def _excluded(path: Path) -> set[str]:
    try:
        text = read_regular_file(path, MAX_LABELS_FILE_BYTES)
    except UnreadableFileError as error:
        raise LabelsError(f"{path}: {error}") from None
    prompts = set()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as error:
            raise LabelsError(f"{path}:{number}: {error}") from None
        prompt = item.get("prompt", item.get("eval_prompt")) if isinstance(item, dict) else None
        if not isinstance(prompt, str):
            raise LabelsError(f"{path}:{number}: an object with a prompt or an eval_prompt string is expected")
        prompts.add(prompt)
    return prompts


def load_labels(path: Path, *, cheap_column: str | None, strong_column: str | None, exclude: Path | None) -> Labels:
    """The labelled prompts of ``path`` (JSON lines, or a CSV when the columns are named), those of ``exclude`` left
    out; raises :class:`LabelsError`."""
    try:
        text = read_regular_file(path, MAX_LABELS_FILE_BYTES)
    except UnreadableFileError as error:
        raise LabelsError(f"{path}: {error}") from None
    if cheap_column is not None and strong_column is not None:
        examples = _csv_examples(text, str(path), cheap_column, strong_column)
    else:
        try:
            examples = list(parse_examples(text, str(path)))
        except ExamplesError as error:
            raise LabelsError(str(error)) from None
    left_out = _excluded(exclude) if exclude is not None else set()
    kept = tuple(e for e in examples if e.prompt not in left_out)
    if len({e.gain for e in kept}) < 2 or len(kept) < 4:
        raise LabelsError(f"{path}: too few prompts, or all with the same gain, to split and score")
    return Labels(str(path), kept, len(examples) - len(kept))


def random_split(n: int, test_share: float, seed: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Training and test indices of ``n`` prompts, ``test_share`` of them for the test, shuffled by ``seed``."""
    order = np.random.default_rng(seed).permutation(n)
    cut = n - max(1, min(n - 1, round(n * test_share)))
    return order[:cut], order[cut:]


def evaluate_split(
    vectors: npt.NDArray[np.float32],
    labels: Labels,
    *,
    seed: int,
    test_share: float,
    neighbours: int,
    max_examples: int | None,
) -> Split:
    """Examples from a random training split (at most ``max_examples``), scored on the rest."""
    train, test = random_split(len(labels.examples), test_share, seed)
    if max_examples is not None:
        train = train[:max_examples]
    examples = [labels.examples[i] for i in train]
    scorer = DifficultyScorer(vectors[train], gains(examples), neighbours)
    test_scores = scorer.scores(vectors[test])
    return Split(
        seed=seed,
        scorer=scorer,
        routed=curve(test_scores, labels.cheap_correct[test], labels.strong_correct[test]),
        training_scores=scorer.scores(vectors[train], leave_out_self=True),
        test_scores=test_scores,
        test=test,
    )


def decision_micros(vectors: npt.NDArray[np.float32], split: Split) -> list[float]:
    """Microseconds of one decision (score and compare), one test prompt at a time as the processor makes it."""
    timings = []
    for index in split.test[:CPU_SAMPLE]:
        started = time.perf_counter()
        decide(split.scorer.score(vectors[index]), 0.0)
        timings.append((time.perf_counter() - started) * 1e6)
    return timings


@dataclass(frozen=True)
class Calibrated:
    """A threshold chosen on the training prompts for a share of strong calls, and what it gives on the test."""

    target: float
    threshold: float
    test_share: float
    test_quality: float


def calibrate(split: Split, labels: Labels) -> list[Calibrated]:
    """The threshold for each of :data:`SHARES`, chosen on the training prompts' scores, applied to the test."""
    cheap, strong = labels.cheap_correct[split.test], labels.strong_correct[split.test]
    rows = []
    for target in SHARES:
        threshold = threshold_for_share(split.training_scores, target)
        to_strong = split.test_scores >= threshold
        rows.append(
            Calibrated(target, threshold, float(to_strong.mean()), float(np.where(to_strong, strong, cheap).mean()))
        )
    return rows


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


@dataclass(frozen=True)
class Report:
    """Everything ``route eval`` prints."""

    labels: Labels
    embedder: str
    neighbours: int
    examples: int
    main: Split
    oracle: Curve
    calibrated: list[Calibrated]
    repeats: list[Split]
    decision_us: list[float]
    embed_us: list[float]

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` result."""
        routed = self.main.routed
        spread = [s.routed for s in [self.main, *self.repeats]]
        return {
            "labels": self.labels.name,
            "excluded": self.labels.excluded,
            "embedder": self.embedder,
            "neighbours": self.neighbours,
            "examples": self.examples,
            "test_prompts": len(self.main.test),
            "seed": self.main.seed,
            "cheap_accuracy": round(routed.cheap, 4),
            "strong_accuracy": round(routed.strong, 4),
            "cpt50": round(routed.cpt(0.5), 4),
            "cpt80": round(routed.cpt(0.8), 4),
            "oracle_cpt50": round(self.oracle.cpt(0.5), 4),
            "oracle_cpt80": round(self.oracle.cpt(0.8), 4),
            "apgr": round(routed.apgr(), 4),
            "curve": [
                {"strong_share": share, "quality": round(routed.quality_at(share), 4)} for share in (0.0, *SHARES, 1.0)
            ],
            "thresholds": [
                {
                    "target_share": c.target,
                    "threshold": round(c.threshold, 4),
                    "test_share": round(c.test_share, 4),
                    "test_quality": round(c.test_quality, 4),
                }
                for c in self.calibrated
            ],
            "splits": [
                {"seed": s.seed, "cpt50": round(s.routed.cpt(0.5), 4), "cpt80": round(s.routed.cpt(0.8), 4)}
                for s in [self.main, *self.repeats]
            ],
            "cpt80_range": [round(min(c.cpt(0.8) for c in spread), 4), round(max(c.cpt(0.8) for c in spread), 4)],
            "decision_us_p50": round(_percentile(self.decision_us, 50), 1),
            "decision_us_p99": round(_percentile(self.decision_us, 99), 1),
            "embed_us_p50": round(_percentile(self.embed_us, 50), 1),
        }


def _saving(cpt: float, recovered: float) -> str:
    return f"{1 - cpt / recovered:+.1%} strong calls saved against random"


def render(out: Console, report: Report) -> None:
    """The report as text and tables."""
    routed, main = report.main.routed, report.main
    out.print(
        escape(
            printable(
                f"{len(report.labels.examples)} labelled prompts from {report.labels.name} "
                f"({report.labels.excluded} left out); split seed {main.seed}: {report.examples} examples, "
                f"{len(main.test)} test prompts; embedder {report.embedder}; {report.neighbours} neighbours"
            )
        ),
        highlight=False,
    )
    out.print(
        f"test prompts: cheap model {routed.cheap:.3f}, strong model {routed.strong:.3f} correct (gap {routed.gap:.3f})"
    )
    for recovered in (0.5, 0.8):
        cpt = routed.cpt(recovered)
        out.print(
            f"CPT({recovered:.0%}): {cpt:.3f} strong calls ({_saving(cpt, recovered)}; random {recovered:.3f}, "
            f"perfect {report.oracle.cpt(recovered):.3f})"
        )
    out.print(f"APGR {routed.apgr():.3f} (random 0.500, perfect {report.oracle.apgr():.3f})")
    table = Table(title="quality by share of strong calls (test prompts)")
    for column in ("strong share", "difficulty", "random", "perfect"):
        table.add_column(column, justify="right")
    for share in (0.0, *SHARES, 1.0):
        table.add_row(
            f"{share:.1f}",
            f"{routed.quality_at(share):.3f}",
            f"{routed.cheap + share * routed.gap:.3f}",
            f"{report.oracle.quality_at(share):.3f}",
        )
    out.print(table)
    thresholds = Table(
        title="route.threshold for a share of strong calls (chosen on the examples, applied to the test)"
    )
    for column in ("target share", "threshold", "test share", "test quality"):
        thresholds.add_column(column, justify="right")
    for c in report.calibrated:
        thresholds.add_row(f"{c.target:.1f}", f"{c.threshold:.4f}", f"{c.test_share:.3f}", f"{c.test_quality:.3f}")
    out.print(thresholds)
    splits = [main, *report.repeats]
    for recovered in (0.5, 0.8):
        values = sorted(s.routed.cpt(recovered) for s in splits)
        out.print(
            f"CPT({recovered:.0%}) over {len(splits)} random splits: min {values[0]:.3f}, "
            f"median {values[len(values) // 2]:.3f}, max {values[-1]:.3f}"
        )
    out.print(
        f"decision: p50 {_percentile(report.decision_us, 50):.0f} us, p99 {_percentile(report.decision_us, 99):.0f} "
        f"us a prompt over {report.examples} examples; the embedding it reuses: p50 "
        f"{_percentile(report.embed_us, 50):.0f} us a prompt"
    )


def embed_micros(texts: Sequence[str], cache: CacheSpec) -> list[float]:
    """Microseconds of embedding one prompt, one at a time with one embedder (what a request pays before the
    decision); raises :class:`EmbedderFailedError`."""

    async def timed(embedder: Embedder) -> list[float]:
        timings = []
        for text in texts:
            started = time.perf_counter()
            await embedder.embed([text])
            timings.append((time.perf_counter() - started) * 1e6)
        return timings

    return with_offline_embedder(cache, timed)


def _configured(args: argparse.Namespace) -> CacheSpec:
    cache = CacheSpec()
    if args.stack:
        project_dir = find_project_dir(Path(args.project_dir) if args.project_dir else None)
        cache = load_stack(project_dir, args.stack).platform.cache
    return cache if args.embedder is None else cache.model_copy(update={"embedder": args.embedder})


def build_report(args: argparse.Namespace, labels: Labels, cache: CacheSpec) -> Report:
    """Embed, split, score and calibrate; raises :class:`EmbedderFailedError`."""
    vectors = np.asarray(embed_texts([route_text(e.prompt) for e in labels.examples], cache), dtype=np.float32)
    options = {"test_share": args.test_share, "neighbours": args.neighbours, "max_examples": args.max_examples}
    main = evaluate_split(vectors, labels, seed=args.seed, **options)
    repeats = [evaluate_split(vectors, labels, seed=args.seed + i, **options) for i in range(1, args.repeat + 1)]
    cheap, strong = labels.cheap_correct[main.test], labels.strong_correct[main.test]
    sample = [route_text(labels.examples[i].prompt) for i in main.test[: args.embed_sample]]
    return Report(
        labels=labels,
        embedder=embedder_name(cache),
        neighbours=main.scorer.neighbours,
        examples=len(main.scorer),
        main=main,
        oracle=curve(oracle_scores(cheap, strong), cheap, strong),
        calibrated=calibrate(main, labels),
        repeats=repeats,
        decision_us=decision_micros(vectors, main),
        embed_us=embed_micros(sample, cache),
    )


def route_eval_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``inferplane route eval``."""
    if (args.cheap_column is None) != (args.strong_column is None):
        err.print("inferplane route eval: --cheap-column and --strong-column go together (a CSV's two models)")
        return EXIT_INVALID
    cache = _configured(args)
    try:
        labels = load_labels(
            Path(args.labels),
            cheap_column=args.cheap_column,
            strong_column=args.strong_column,
            exclude=Path(args.exclude) if args.exclude else None,
        )
    except LabelsError as error:
        err.print(printable(f"inferplane route eval: {error}"), markup=False, highlight=False)
        return EXIT_INVALID
    try:
        report = build_report(args, labels, cache)
    except EmbedderFailedError as error:
        err.print(printable(f"inferplane route eval: {error}"), markup=False, highlight=False)
        return EXIT_FAILED
    if args.json:
        out.print_json(json.dumps(report.as_json()))
    else:
        render(out, report)
    return EXIT_OK


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1")
    return value


def _count(least: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is less than {least}")
        return value

    return parse


def add_route_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inferplane route eval`` on the CLI's subcommands."""
    route = sub.add_parser("route", help="the gateway's routing by prompt difficulty")
    commands = route.add_subparsers(dest="route_command", required=True)
    evaluate = commands.add_parser(
        "eval",
        help="quality against strong-model calls of routing by difficulty, on labelled prompts (RouteLLM's figures)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument(
        "--labels",
        required=True,
        metavar="FILE",
        help='JSON lines {"prompt", "cheap_correct", "strong_correct"}, or a CSV with --cheap-column/--strong-column',
    )
    evaluate.add_argument("--cheap-column", help="a CSV's column of the cheap model's correctness (True/False)")
    evaluate.add_argument("--strong-column", help="a CSV's column of the strong model's correctness (True/False)")
    evaluate.add_argument(
        "--exclude", metavar="FILE.jsonl", help='prompts to leave out: lines {"prompt"} or {"eval_prompt"}'
    )
    evaluate.add_argument(
        "--stack", help="use stacks/Pulumi.<stack>.yaml's cache embedder (what the gateway scores with)"
    )
    evaluate.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    evaluate.add_argument(
        "--embedder",
        type=embedder_option,
        metavar="KIND[,KEY=VALUE...]",
        help="embed with this instead: wordllama[,dimensions=N] or endpoint,url=URL,model=NAME,dimensions=N",
    )
    evaluate.add_argument("--neighbours", type=_count(1), default=DEFAULT_NEIGHBOURS, help="examples a score averages")
    evaluate.add_argument("--test-share", type=_share, default=0.5, help="share of the prompts kept for the test")
    evaluate.add_argument("--seed", type=_count(0), default=0, help="the split's random seed")
    evaluate.add_argument("--repeat", type=_count(0), default=4, help="more random splits, for CPT's spread")
    evaluate.add_argument("--max-examples", type=_count(1), help="use at most this many training prompts as examples")
    evaluate.add_argument("--embed-sample", type=_count(1), default=50, help="prompts embedded one at a time, timed")
    evaluate.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    evaluate.set_defaults(handler=route_eval_command)
