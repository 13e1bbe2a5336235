"""``inferplane cache eval``: how well the semantic cache's threshold and guards separate paraphrases from near misses.

Reads labelled pairs (JSON lines ``{"a": ..., "b": ..., "same": true|false, "class": ...}``, the class optional),
embeds both sides with the configured embedder (``--stack S``: that stack's ``cache.embedder``, threshold and guards;
otherwise the defaults; ``--embedder`` and ``--threshold`` override them), and counts a pair as a predicted hit when
the similarity reaches the threshold and no guard refuses it, exactly as
:meth:`inferplane.processor.cache.store.ResponseCache.lookup` decides. Precision = true hits / predicted hits, recall =
true hits / pairs labelled same, false hits = near misses that would be served another prompt's answer. It prints them
at the threshold, per class of pair, with each guard left out in turn (which guards the embedder still needs), and over
a sweep of thresholds.

Exit 0 when the configured threshold has no false hit on the pairs, 1 when it has (a team's CI can hold its
threshold to its own traffic), 2 when the pairs file is invalid (read as stack files are: a regular UTF-8 file of at
most 8 MiB, lines split on ``\n`` only, prompts of at most the 1000 characters the gateway embeds, ``same`` a JSON
boolean), 3 when the embedder fails (an endpoint that cannot be reached or answers wrongly).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from inferplane.components.gateway.cache_renderer import embedder_config, word_bounds
from inferplane.components.spec.platform_spec import CacheEmbedderSpec, CacheSpec
from inferplane.processor.cache.config import CacheConfig, EndpointEmbedderConfig
from inferplane.processor.cache.counterparts import decide, difference
from inferplane.processor.cache.embedders import (
    Embedder,
    EmbedderError,
    EndpointEmbedder,
    Vector,
    WordLlamaEmbedder,
    embed_in_batches,
)
from inferplane.processor.cache.guards import GuardName, names, refusals
from inferplane.processor.cache.synonyms import default_lexicon
from inferplane.processor.json_lines import JsonLinesError, parse_json_lines
from inferplane.tool.cache_adversary import GENERATED_CLASSES, GeneratedClass, generate
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.files import UnreadableFileError, read_regular_file
from inferplane.tool.stackfile import find_project_dir, load_stack, printable

T = TypeVar("T")

SHIPPED_PAIRS = "cache/eval_pairs.jsonl"
"""The labelled set shipped in the package (``inferplane.processor``), used when ``--pairs`` is not given."""
CURVE = tuple(round(0.80 + i / 100, 2) for i in range(21))
"""Thresholds of the precision/recall curve."""
MAX_PAIRS_FILE_BYTES = 8 * 1024 * 1024
"""A pairs file over 8 MiB is refused unread (the shipped set is about 30 KB; 8 MiB holds 4,000 pairs of the longest
prompts)."""
MAX_PROMPT_CHARS: int = CacheConfig.model_fields["semantic_max_chars"].default
"""The gateway embeds prompts of at most this many characters (longer ones are only cached exactly), so no longer
prompt can be a semantic hit and none is evaluated."""
OFFLINE_TIMEOUT_S = 30.0
"""Per-request timeout of an endpoint embedder here: the gateway's ``timeout_ms`` (50 ms by default) bounds one
prompt on the request path, not a batch embedded offline."""
ENDPOINT_BATCH = 64
"""Texts per embeddings request, so one request's size and time stay bounded whatever the file's length."""


ParaphraseClass = Literal["reorder", "synonym", "voice", "politeness", "abbreviation", "filler"]
"""How a paraphrase (``same``: one answer serves both) differs: clauses or alternatives reordered, a word swapped for a
synonym, active and passive voice, politeness added, a word abbreviated (or a number written as digits), or a word
added or dropped that does not change what is asked."""
NearMissClass = Literal["entity", "number", "unit", "negation", "direction", "time", "comparison"]
"""How a near miss (not ``same``) differs: another entity, number or unit; a negation; a direction or word order (an
opposite action, swapped roles or route); another time; another comparison (the comparative flipped or its sides
swapped)."""
PairClass = Literal[ParaphraseClass, NearMissClass]
PARAPHRASE_CLASSES: tuple[str, ...] = get_args(ParaphraseClass)
NEAR_MISS_CLASSES: tuple[str, ...] = get_args(NearMissClass)
Check = GuardName | Literal["counterpart"]
"""What may refuse a pair above the threshold: a guard, or the counterpart check (``processor/cache/counterparts``)."""
CHECKS: tuple[Check, ...] = (*names(), "counterpart")


class Pair(BaseModel):
    """One labelled line of the pairs file."""

    # strict: ``"same": "yes"`` or ``1`` is a mistake in the labels, not a boolean. populate_by_name: code builds
    # pairs with ``kind=``, files say ``"class"``.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    a: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS, description="A prompt.")
    b: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS, description="Another prompt.")
    same: bool = Field(description="Whether one answer serves both.")
    kind: PairClass | GeneratedClass | None = Field(
        default=None,
        alias="class",
        description="How the two differ (a paraphrase's or a near miss's class, or a generated near miss's).",
    )

    @model_validator(mode="after")
    def _class_agrees_with_label(self) -> Pair:
        if self.kind is not None and (self.kind in PARAPHRASE_CLASSES) != self.same:
            side = "paraphrase" if self.kind in PARAPHRASE_CLASSES else "near-miss"
            raise ValueError(f"class {self.kind!r} is a {side} class but same is {str(self.same).lower()}")
        return self


class PairsError(Exception):
    """The pairs file cannot be read; the message names the file and line."""


class EmbedderFailedError(Exception):
    """The embedder produced no vectors; the message names it."""


@dataclass(frozen=True)
class Scored:
    """A pair with its similarity and the guards that refuse it."""

    pair: Pair
    similarity: float
    refused_by: tuple[str, ...]


@dataclass(frozen=True)
class Point:
    """Precision, recall and false hits at one threshold."""

    threshold: float
    precision: float
    recall: float
    false_hits: int
    hits: int


@dataclass(frozen=True)
class ClassFigures:
    """One class of pairs at the configured threshold: with the configured guards, and without any."""

    kind: str
    pairs: int
    at: Point
    bare: Point


@dataclass(frozen=True)
class GuardFigures:
    """The configured threshold with one guard left out (``None``: every guard; ``"all"``: none)."""

    left_out: Check | Literal["all"] | None
    at: Point


def load_pairs(path: Path | None) -> tuple[str, list[Pair]]:
    """The pairs of ``path`` (or the shipped set) and the name to show for it."""
    if path is None:
        resource = files("inferplane.processor").joinpath(SHIPPED_PAIRS)
        name, text = f"<shipped {SHIPPED_PAIRS}>", resource.read_text(encoding="utf-8")
    else:
        try:
            name, text = str(path), read_regular_file(path, MAX_PAIRS_FILE_BYTES)
        except UnreadableFileError as error:
            raise PairsError(f"{path}: {error}") from None
    try:
        pairs = parse_json_lines(text, name, Pair)
    except JsonLinesError as error:
        raise PairsError(str(error)) from None
    if not pairs:
        raise PairsError(f"{name}: no pairs")
    return name, pairs


def adversarial_pairs() -> list[Pair]:
    """The shipped paraphrases and the near misses :mod:`inferplane.tool.cache_adversary` generates from them."""
    _, shipped = load_pairs(None)
    paraphrases = [p for p in shipped if p.same]
    generated = [
        Pair(a=kept, b=changed, same=False, kind=kind)
        for kind, kept, changed in generate((p.a, p.b) for p in paraphrases)
        if len(changed) <= MAX_PROMPT_CHARS
    ]
    return paraphrases + generated


def score(pairs: Sequence[Pair], cache: CacheSpec) -> list[Scored]:
    """Similarity (cosine of unit vectors), guard refusals and the counterpart check's of every pair, with the
    configured embedder and its word bounds (the differing words embedded once each, as lone words, as the processor
    does); raises :class:`EmbedderFailedError` naming the embedder when it produces no vectors."""
    diffs = [difference(p.a, p.b) for p in pairs]
    words = sorted(set().union(*(d.to_embed for d in diffs)))
    texts = sorted({p.a for p in pairs} | {p.b for p in pairs})  # each prompt once: generated sets repeat a side
    vectors = dict(zip(texts + words, embed_texts(texts + words, cache), strict=True))
    bounds = {**CacheConfig().model_dump(include={"word_similarity", "inflection_similarity"}), **word_bounds(cache)}
    lexicon = default_lexicon()
    scored: list[Scored] = []
    for pair, diff in zip(pairs, diffs, strict=True):
        verdict = decide(diff, vectors, bounds["word_similarity"], bounds["inflection_similarity"], lexicon)
        refused: tuple[str, ...] = refusals(pair.a, pair.b) + (() if verdict.refused is None else ("counterpart",))
        scored.append(Scored(pair, float(np.dot(vectors[pair.a], vectors[pair.b])), refused))
    return scored


def embedder_name(cache: CacheSpec) -> str:
    """The embedder as messages name it: ``wordllama`` or ``endpoint <url>``."""
    return "wordllama" if cache.embedder.kind == "wordllama" else f"endpoint {cache.embedder.url}"


def with_offline_embedder(cache: CacheSpec, use: Callable[[Embedder], Awaitable[T]]) -> T:
    """``use`` run with ``cache``'s embedder as the CLI runs it: wordllama in process, or an endpoint through a client
    whose per-request bound (:data:`OFFLINE_TIMEOUT_S`) suits batches; raises :class:`EmbedderFailedError` naming the
    embedder."""
    config = embedder_config(cache)

    async def run() -> T:
        if isinstance(config, EndpointEmbedderConfig):
            async with httpx.AsyncClient(timeout=OFFLINE_TIMEOUT_S) as client:
                return await use(EndpointEmbedder(config, client=client))
        return await use(WordLlamaEmbedder(config))

    try:
        return asyncio.run(run())
    except EmbedderError as error:
        raise EmbedderFailedError(f"embedder {embedder_name(cache)} failed: {error}") from None
    # wordllama's files missing or unreadable; a URL httpx cannot use (InvalidURL is no HTTPError, which the embedder
    # catches).
    except (OSError, ValueError, RuntimeError, httpx.InvalidURL) as error:
        raise EmbedderFailedError(f"embedder {embedder_name(cache)} failed: {type(error).__name__}: {error}") from None


def embed_texts(texts: list[str], cache: CacheSpec) -> list[Vector]:
    """The unit vectors of ``texts`` from ``cache``'s embedder (an endpoint in batches of :data:`ENDPOINT_BATCH`,
    wordllama in one call); raises :class:`EmbedderFailedError` naming the embedder."""

    async def embed(embedder: Embedder) -> list[Vector]:
        if isinstance(embedder, EndpointEmbedder):
            return await embed_in_batches(embedder, texts, ENDPOINT_BATCH)
        return await embedder.embed(texts)

    return with_offline_embedder(cache, embed)


def point(scored: Sequence[Scored], threshold: float, guards: bool, leave_out: frozenset[Check] = frozenset()) -> Point:
    """Precision, recall and false hits at ``threshold``, the checks of ``leave_out`` ignored (``guards``: the
    guards and the counterpart check, as the processor's ``guards`` setting turns both on or off)."""
    predicted = [s for s in scored if s.similarity >= threshold and (not guards or not set(s.refused_by) - leave_out)]
    true_hits = sum(1 for s in predicted if s.pair.same)
    positives = sum(1 for s in scored if s.pair.same)
    return Point(
        threshold=threshold,
        precision=true_hits / len(predicted) if predicted else 1.0,
        recall=true_hits / positives if positives else 1.0,
        false_hits=len(predicted) - true_hits,
        hits=len(predicted),
    )


def by_class(scored: Sequence[Scored], threshold: float, guards: bool) -> list[ClassFigures]:
    """The figures of every class present, paraphrase classes first, each in :data:`PairClass`'s order; pairs without
    a class are ``unclassified``."""
    order = list(dict.fromkeys([*PARAPHRASE_CLASSES, *NEAR_MISS_CLASSES, *GENERATED_CLASSES, "unclassified"]))
    groups: dict[str, list[Scored]] = {}
    for s in scored:
        groups.setdefault(s.pair.kind or "unclassified", []).append(s)
    return [
        ClassFigures(
            kind, len(groups[kind]), point(groups[kind], threshold, guards), point(groups[kind], threshold, False)
        )
        for kind in order
        if kind in groups
    ]


def by_guard(scored: Sequence[Scored], threshold: float) -> list[GuardFigures]:
    """Every check on, each guard (and the counterpart check) left out in turn, and none: a check whose absence adds
    false hits is still needed."""
    return [
        GuardFigures(None, point(scored, threshold, True)),
        *(GuardFigures(name, point(scored, threshold, True, frozenset({name}))) for name in CHECKS),
        GuardFigures("all", point(scored, threshold, False)),
    ]


def _class_row(figures: ClassFigures) -> tuple[str, ...]:
    paraphrase = figures.kind in PARAPHRASE_CLASSES
    near_miss = figures.kind in NEAR_MISS_CLASSES or figures.kind in GENERATED_CLASSES
    return (
        figures.kind,
        "paraphrase" if paraphrase else "near miss" if near_miss else "-",
        str(figures.pairs),
        str(figures.at.hits),
        f"{figures.at.precision:.3f}" if figures.at.hits else "-",
        "-" if near_miss else f"{figures.at.recall:.3f}",
        "-" if paraphrase else str(figures.at.false_hits),
        "-" if paraphrase else str(figures.bare.false_hits),
    )


def _render_tables(out: Console, cache: CacheSpec, scored: Sequence[Scored], at: Point) -> None:
    guards = cache.semantic_guards
    classes = Table(title=f"by class at {at.threshold:.2f}")
    for column in ("class", "side", "pairs", "hits", "precision", "recall", "false hits", "without guards"):
        classes.add_column(column, justify="left" if column in ("class", "side") else "right")
    for figures in by_class(scored, at.threshold, guards):
        classes.add_row(*_class_row(figures))
    out.print(classes)
    ablation = Table(title=f"guards at {at.threshold:.2f}")
    for column in ("guards", "precision", "recall", "false hits"):
        ablation.add_column(column, justify="left" if column == "guards" else "right")
    for row in by_guard(scored, at.threshold):
        label = "all" if row.left_out is None else "none" if row.left_out == "all" else f"all but {row.left_out}"
        ablation.add_row(label, f"{row.at.precision:.3f}", f"{row.at.recall:.3f}", str(row.at.false_hits))
    out.print(ablation)
    sweep = Table(title="precision / recall by threshold")
    for column in ("threshold", "precision", "recall", "false hits", "false hits without guards"):
        sweep.add_column(column, justify="right")
    for threshold in sorted({*CURVE, at.threshold}):
        with_guards = point(scored, threshold, guards)
        bare = point(scored, threshold, False)
        marker = " *" if threshold == at.threshold else ""
        sweep.add_row(
            f"{threshold:.2f}{marker}",
            f"{with_guards.precision:.3f}",
            f"{with_guards.recall:.3f}",
            str(with_guards.false_hits),
            str(bare.false_hits),
        )
    out.print(sweep)


def _render(out: Console, name: str, cache: CacheSpec, scored: Sequence[Scored], at: Point) -> None:
    guards = "on" if cache.semantic_guards else "off"
    # The file name and the URL are printed as they are: a "[/d]" in a folder's name is no markup.
    out.print(
        escape(
            printable(
                f"{len(scored)} pairs from {name} ({sum(s.pair.same for s in scored)} labelled same); "
                f"embedder {embedder_name(cache)}"
            )
        ),
        highlight=False,
    )
    out.print(
        f"threshold {at.threshold:.2f}, guards {guards}: precision {at.precision:.3f}, recall {at.recall:.3f}, "
        f"false hits {at.false_hits}"
    )
    _render_tables(out, cache, scored, at)
    for s in scored:
        if not s.pair.same and s.similarity >= at.threshold and (not cache.semantic_guards or not s.refused_by):
            out.print(f"false hit ({s.similarity:.3f}): {s.pair.a!r} / {s.pair.b!r}", markup=False, highlight=False)


def _figures(at: Point) -> dict[str, Any]:
    return {"precision": round(at.precision, 4), "recall": round(at.recall, 4), "false_hits": at.false_hits}


def as_json(cache: CacheSpec, scored: Sequence[Scored], at: Point) -> dict[str, Any]:
    """The ``--json`` result: the figures at the threshold, per class (``hits``, and ``false_hits_without_guards``)
    and with each guard left out (``guards``: ``all``, ``without_<guard>``, ``none``)."""
    guards = {
        "all" if row.left_out is None else "none" if row.left_out == "all" else f"without_{row.left_out}": _figures(
            row.at
        )
        for row in by_guard(scored, at.threshold)
    }
    return {
        "threshold": at.threshold,
        **_figures(at),
        "pairs": len(scored),
        "embedder": embedder_name(cache),
        "classes": {
            c.kind: {
                "pairs": c.pairs,
                "hits": c.at.hits,
                **_figures(c.at),
                "false_hits_without_guards": c.bare.false_hits,
            }
            for c in by_class(scored, at.threshold, cache.semantic_guards)
        },
        "guards": guards,
    }


def embedder_option(text: str) -> CacheEmbedderSpec:
    """``--embedder``: ``wordllama``, ``wordllama,dimensions=128`` or
    ``endpoint,url=http://127.0.0.1:8000/v1,model=NAME,dimensions=384``, validated as the spec's ``cache.embedder``."""
    kind, *settings = text.split(",")
    fields: dict[str, Any] = {"kind": kind.strip()}
    for setting in settings:
        key, equals, value = setting.partition("=")
        if not equals or key.strip() not in ("url", "model", "dimensions"):
            raise argparse.ArgumentTypeError(f"{setting!r} is not url=..., model=... or dimensions=N")
        fields[key.strip()] = value.strip()
    try:
        return CacheEmbedderSpec.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'embedder'}: {e['msg']}" for e in error.errors())
        raise argparse.ArgumentTypeError(problems) from None


def threshold_option(text: str) -> float:
    """``--threshold``: a cosine similarity the spec accepts (above 0.5, at most 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.5 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not above 0.5 and at most 1.0")
    return value


def _configured(args: argparse.Namespace) -> CacheSpec:
    cache = CacheSpec()
    if args.stack:
        project_dir = find_project_dir(Path(args.project_dir) if args.project_dir else None)
        cache = load_stack(project_dir, args.stack).platform.cache
    overrides: dict[str, Any] = {}
    if args.embedder is not None:
        overrides["embedder"] = args.embedder
    if args.threshold is not None:
        overrides["semantic_similarity_threshold"] = args.threshold
    return cache.model_copy(update=overrides)


def cache_eval_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``inferplane cache eval``."""
    cache = _configured(args)
    try:
        if args.adversarial:
            name, pairs = "the shipped paraphrases and the near misses generated from them", adversarial_pairs()
        else:
            name, pairs = load_pairs(Path(args.pairs) if args.pairs is not None else None)
    except PairsError as error:
        err.print(printable(f"inferplane cache eval: {error}"), markup=False, highlight=False)
        return EXIT_INVALID
    try:
        scored = score(pairs, cache)
    except EmbedderFailedError as error:
        err.print(printable(f"inferplane cache eval: {error}"), markup=False, highlight=False)
        return EXIT_FAILED
    at = point(scored, cache.threshold, cache.semantic_guards)
    if args.json:
        out.print_json(json.dumps(as_json(cache, scored, at)))
    else:
        _render(out, name, cache, scored, at)
    return EXIT_OK if at.false_hits == 0 else EXIT_REFUSED


def add_cache_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inferplane cache eval`` on the CLI's subcommands."""
    cache = sub.add_parser("cache", help="the gateway's response cache")
    commands = cache.add_subparsers(dest="cache_command", required=True)
    evaluate = commands.add_parser(
        "eval",
        help="precision and recall of the semantic cache's threshold and guards on labelled prompt pairs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = evaluate.add_mutually_exclusive_group()
    which.add_argument(
        "--pairs",
        metavar="FILE.jsonl",
        help='lines {"a": ..., "b": ..., "same": true|false, "class": ...} (default: the labelled set shipped with '
        "inferplane)",
    )
    which.add_argument(
        "--adversarial",
        action="store_true",
        help="measure on the shipped paraphrases and the near misses generated from them by rule (an opposite, a "
        "sibling, another number or unit, a negation, a preposition, a place or a degree; thousands of pairs)",
    )
    evaluate.add_argument("--stack", help="use stacks/Pulumi.<stack>.yaml's embedder, threshold and guards")
    evaluate.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    evaluate.add_argument(
        "--embedder",
        type=embedder_option,
        metavar="KIND[,KEY=VALUE...]",
        help="measure this embedder instead: wordllama[,dimensions=N] or endpoint,url=URL,model=NAME,dimensions=N",
    )
    evaluate.add_argument(
        "--threshold", type=threshold_option, help="measure at this similarity instead of the configured one"
    )
    evaluate.add_argument(
        "--json",
        action="store_true",
        help='print {"threshold", "precision", "recall", "false_hits", "pairs", "embedder", "classes", "guards"}',
    )
    evaluate.set_defaults(handler=cache_eval_command)
