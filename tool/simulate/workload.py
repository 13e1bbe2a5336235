"""Workloads for ``inferplane simulate``: the request format, its JSON-lines file, three seeded generators, and the
share of prompt tokens a perfect fleet-wide cache could serve.

A workload is a sequence of :class:`WorkloadRequest`, one JSON object a line, in arrival order::

    {"arrival_s": 0.132, "prompt": "w12 w5 w907", "output_tokens": 128, "session": "s3", "group": "s3"}

Prompts are words of a word-level vocabulary, ``w0`` ... ``w29999`` (:data:`VOCABULARY_WORDS`): the simulated model's
tokenizer maps each such word to one token, so a workload's token counts are exact without a real tokenizer, and two
prompts share a KV-cache block exactly when they share its words. A request may give ``token_ids`` (the word ids)
instead of a ``prompt``; :func:`words` turns them into the text sent.

The generators are pure functions of their parameters and seed (:class:`random.Random`), so a benchmark's workload is
reproducible from its command line. This module owns the format and the generators; it does no I/O beyond reading and
writing workload files (:func:`read_workload`, :func:`write_workload`), imports nothing of the Pulumi components, and
is imported by the replay client (``replay.py``) and by the simulated model's directory (for :func:`words` and
:data:`VOCABULARY_WORDS`).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from inferplane.tool.files import UnreadableFileError, os_reason, read_regular_file

VOCABULARY_WORDS = 30000
"""How many distinct words (``w0`` ... ``w29999``) the generators draw from and a ``token_ids`` entry may name. The
simulated model directory's tokenizer must hold at least these words, each one token: a word it lacked would become
``<unk>``, and two different prompts would share cache blocks they do not share in the workload."""

MAX_REPORTED_ERRORS = 20
"""How many line errors :func:`read_workload` spells out; the rest are counted (a file broken on every line would
otherwise bury the first, most telling, error under thousands)."""

WORKLOAD_FILE_LIMIT = 1 << 30
"""The largest workload file read (1 GiB): an hour of multi-turn traffic at 10 requests/s is about 300 MB; a file
larger than this is far more likely a wrong path than a workload, and would be read whole into memory."""

MAX_WORKLOAD_REQUESTS = 1_000_000
"""The most requests a generator is asked for (rate x duration, halved for a ramp): every prompt is held in memory, so
an hour at 1,000 requests/s is refused up front rather than exhausting the machine."""

_WORDS = tuple(f"w{i}" for i in range(VOCABULARY_WORDS))
_WORD_IDS = {word: i for i, word in enumerate(_WORDS)}
_VOCABULARY = range(VOCABULARY_WORDS)


class WorkloadError(ValueError):
    """A workload file, request or generator parameter that cannot be used; ``str()`` names the file, the line and
    the field where there is one."""


class WorkloadRequest(BaseModel):
    """One request of a workload: when it arrives, what it asks, and how many tokens it makes the engine generate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival_s: float = Field(
        ge=0,
        allow_inf_nan=False,
        description="Seconds from the run's start at which the request is sent; non-decreasing along a workload.",
    )
    prompt: str | None = Field(
        default=None,
        description="The user message sent: words of the vocabulary (w0 w17 ...), separated by whitespace; exactly "
        "one of prompt and token_ids is given.",
    )
    token_ids: tuple[Annotated[int, Field(ge=0, lt=VOCABULARY_WORDS)], ...] | None = Field(
        default=None,
        description="The prompt as word ids (w{i} for each i), instead of prompt; each below VOCABULARY_WORDS.",
    )
    output_tokens: int = Field(
        ge=1,
        description="Tokens the engine generates (sent as max_tokens with ignore_eos, so exactly this many).",
    )
    session: str | None = Field(
        default=None,
        min_length=1,
        description="The multi-turn conversation this request is a turn of, if any. Informative only: the prompt "
        "already carries the whole conversation so far.",
    )
    group: str | None = Field(
        default=None,
        min_length=1,
        description="The prefix group (g3) or session (s3) a generator drew the request from, for per-group "
        "summaries; optional in files.",
    )

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        # A blank prompt tokenizes to nothing: the engine would compute only the chat template's tokens, and the
        # request would measure nothing the workload meant to measure.
        if value is not None and not value.strip():
            raise ValueError("must hold at least one word")
        return value

    @field_validator("token_ids")
    @classmethod
    def _not_empty(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        # Checked here rather than by min_length, which would also call a list whose one word is out of range empty.
        if value is not None and not value:
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> Self:
        if (self.prompt is None) == (self.token_ids is None):
            found = "neither" if self.prompt is None else "both"
            raise ValueError(f"prompt, token_ids: exactly one is required, found {found}")
        return self


def words(ids: Iterable[int]) -> str:
    """The prompt text of word ids: ``w{i}`` for each, separated by single spaces (what a ``token_ids`` request
    sends, and the simulated tokenizer's vocabulary when given ``range(VOCABULARY_WORDS)``)."""
    return " ".join(f"w{i}" for i in ids)


def prompt_token_ids(request: WorkloadRequest) -> tuple[int, ...]:
    """The word ids of ``request``'s prompt (its ``token_ids`` as given, or its ``prompt``'s words parsed).

    Raises :class:`WorkloadError` for a word that is not ``w{i}`` with ``0 <= i < VOCABULARY_WORDS`` written without
    leading zeros: the tokenizer would not hold it as one token, so the request's cache blocks would be unknown.
    """
    if request.token_ids is not None:
        return request.token_ids
    assert request.prompt is not None  # one of the two, by validation
    try:
        return tuple(_WORD_IDS[word] for word in request.prompt.split())
    except KeyError as missing:
        position = request.prompt.split().index(missing.args[0]) + 1
        raise WorkloadError(
            f"prompt: word {position} ({missing.args[0]!r}) is not a vocabulary word, w0 ... w{VOCABULARY_WORDS - 1}"
        ) from None


# --- the file ----------------------------------------------------------------------------------------------------


_FIELDS = ", ".join(WorkloadRequest.model_fields)
_LOCATION_INDEX = re.compile(r"\.(\d+)")


def _problem(error: ErrorDetails) -> str:
    """One validation error as ``field: reason`` in the file's own terms (JSON types, the field's name)."""
    kind, ctx = error["type"], error.get("ctx", {})
    reasons: dict[str, str] = {
        "missing": "is required",
        "extra_forbidden": f"is not a field of a workload request (fields: {_FIELDS})",
        "int_type": "must be an integer",
        "int_from_float": "must be an integer",
        "float_type": "must be a number",
        "finite_number": "must be a finite number",
        "string_type": "must be a string",
        "tuple_type": "must be a list of integers",
        "model_type": "must be a JSON object",
        "string_too_short": "must not be empty",
    }
    if kind in reasons:
        reason = reasons[kind]
    elif kind == "greater_than_equal":
        reason = f"must be >= {ctx['ge']}"
    elif kind == "less_than":
        reason = f"must be < {ctx['lt']}"
    elif kind == "value_error":
        reason = str(ctx["error"])
    else:
        reason = error["msg"]
    field = _LOCATION_INDEX.sub(r"[\1]", ".".join(str(part) for part in error["loc"]))
    return f"{field}: {reason}" if field else reason


def _parse_line(text: str) -> WorkloadRequest | list[str]:
    """The request on one line, or the line's problems."""
    try:
        # strict: a JSON "3" is not an integer, nor true a count; JSON's arrays still fill the tuple.
        return WorkloadRequest.model_validate_json(text, strict=True)
    except ValidationError as exc:
        errors = exc.errors()
    if any(error["type"] == "json_invalid" for error in errors):
        try:
            json.loads(text)
        except json.JSONDecodeError as bad:
            return [f"invalid JSON: {bad.msg} (column {bad.colno})"]
        except RecursionError:
            return ["invalid JSON: nested too deeply"]
        return [f"invalid JSON: {errors[0]['msg']}"]  # accepted by json, refused by pydantic's stricter parser
    return [_problem(error) for error in errors]


def read_workload(path: Path) -> tuple[WorkloadRequest, ...]:
    """The requests of the JSON-lines workload at ``path``, in file order.

    Blank lines are skipped (line numbers stay the file's). Every line's errors are collected and raised together as
    one :class:`WorkloadError`, a line each (``workload.jsonl line 7: output_tokens: must be >= 1``), the first
    :data:`MAX_REPORTED_ERRORS` spelt out and the rest counted; an empty file, invalid JSON, a prompt word outside
    the vocabulary (:func:`prompt_token_ids`) and an arrival time earlier than the line before's are errors too.
    """
    try:
        text = read_regular_file(path, WORKLOAD_FILE_LIMIT)
    except UnreadableFileError as exc:
        raise WorkloadError(f"{path}: {exc}") from None
    requests: list[WorkloadRequest] = []
    problems: list[str] = []
    previous: tuple[int, float] | None = None  # the last valid line's number and arrival
    # split("\n"), not splitlines(): U+2028 and its kin may stand raw inside a JSON string and do not end a line.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        parsed = _parse_line(line)
        if isinstance(parsed, list):
            problems.extend(f"{path} line {number}: {problem}" for problem in parsed)
            continue
        try:
            prompt_token_ids(parsed)  # refused here, where the line is known, not later by a caller counting blocks
        except WorkloadError as exc:
            problems.append(f"{path} line {number}: {exc}")
            continue
        if previous is not None and parsed.arrival_s < previous[1]:
            problems.append(
                f"{path} line {number}: arrival_s: {parsed.arrival_s} is before line {previous[0]}'s {previous[1]}; "
                "arrival times must not decrease"
            )
        previous = (number, parsed.arrival_s)
        requests.append(parsed)
    if problems:
        shown = problems[:MAX_REPORTED_ERRORS]
        if len(problems) > MAX_REPORTED_ERRORS:
            shown.append(f"and {len(problems) - MAX_REPORTED_ERRORS} more")
        raise WorkloadError("\n".join(shown))
    if not requests:
        raise WorkloadError(f"{path}: holds no request (a workload needs at least one JSON line)")
    return tuple(requests)


def write_workload(path: Path, requests: Sequence[WorkloadRequest]) -> None:
    """Write ``requests`` to ``path`` as JSON lines that :func:`read_workload` reads back equal.

    Refuses what :func:`read_workload` would (no request, decreasing arrivals), so a written file always reads. The
    file is replaced atomically: a reader never sees half a workload, and a failed write leaves the old file.
    """
    if not requests:
        raise WorkloadError(f"{path}: no request to write (a workload needs at least one)")
    for index in range(1, len(requests)):
        if requests[index].arrival_s < requests[index - 1].arrival_s:
            raise WorkloadError(
                f"{path}: request {index + 1} arrives at {requests[index].arrival_s}, before request {index}'s "
                f"{requests[index - 1].arrival_s}; arrival times must not decrease"
            )
    text = "".join(json.dumps(request.model_dump(exclude_none=True), ensure_ascii=False) + "\n" for request in requests)
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot write there: {os_reason(exc)}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; a workload is data to share, not a secret
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise WorkloadError(f"{path}: cannot write: {os_reason(exc)}") from None


# --- the generators ----------------------------------------------------------------------------------------------


def _at_least_one(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise WorkloadError(f"{name}: must be >= 1, got {value}")


def _arrivals(rng: random.Random, rate: float, duration: float, ramp: bool) -> list[float]:
    """Poisson arrival times in ``[0, duration)``: at ``rate`` per second, or with ``ramp`` at a rate rising linearly
    from 0 to ``rate``.

    The ramp inverts the cumulative rate ``L(t) = rate t^2 / (2 duration)``: the events of a unit-rate Poisson process
    on ``[0, L(duration))``, mapped through ``t = sqrt(2 duration s / rate)``, are the ramp's events (no thinning, so
    no draw is thrown away and a seed's arrivals stay few and stable).
    """
    if not (math.isfinite(rate) and rate > 0):
        raise WorkloadError(f"rate: must be a finite number > 0 requests/s, got {rate}")
    if not (math.isfinite(duration) and duration > 0):
        raise WorkloadError(f"duration: must be a finite number > 0 seconds, got {duration}")
    total = rate * duration / 2 if ramp else rate * duration
    if total > MAX_WORKLOAD_REQUESTS:
        raise WorkloadError(
            f"rate x duration: {total:,.0f} requests expected, more than the {MAX_WORKLOAD_REQUESTS:,} a generated "
            "workload holds; lower the rate or the duration"
        )
    times: list[float] = []
    elapsed = rng.expovariate(1.0)
    while elapsed < total:
        times.append(math.sqrt(2 * duration * elapsed / rate) if ramp else elapsed / rate)
        elapsed += rng.expovariate(1.0)
    return times


def _random_words(rng: random.Random, count: int) -> list[int]:
    return rng.choices(_VOCABULARY, k=count)


class _Leads:
    """Leading words for texts that must not share a first cache block with one another (group prefixes, session
    system prompts, unique prompts): every text's first word differs from every other's for the first
    :data:`VOCABULARY_WORDS` texts; beyond that (each word leads again, once a round) its first two words do."""

    def __init__(self, rng: random.Random, what: str) -> None:
        self._rng = rng
        self._what = what
        self._order: list[int] = []
        self._issued = 0
        self._pairs: set[tuple[int, int]] = set()

    def text(self, length: int) -> list[int]:
        """A new text of ``length`` words, distinct from every earlier one by its lead."""
        if not self._order:
            self._order = list(_VOCABULARY)
            self._rng.shuffle(self._order)
        first = self._order.pop()
        again = self._issued >= VOCABULARY_WORDS
        self._issued += 1
        if length == 1:
            if again:
                raise WorkloadError(
                    f"{self._what}: a one-word text can be distinct only {VOCABULARY_WORDS:,} times; this workload "
                    f"needs more (make it at least 2 words, or generate fewer requests)"
                )
            return [first]
        second = self._rng.randrange(VOCABULARY_WORDS)
        while again and (first, second) in self._pairs:
            second = self._rng.randrange(VOCABULARY_WORDS)
        self._pairs.add((first, second))
        return [first, second, *_random_words(self._rng, length - 2)]


def _request(
    arrival: float, ids: Sequence[int], output_tokens: int, group: str | None, session: str | None = None
) -> WorkloadRequest:
    return WorkloadRequest(
        arrival_s=arrival, prompt=words(ids), output_tokens=output_tokens, session=session, group=group
    )


def shared_prefix(
    *,
    rate: float,
    duration: float,
    seed: int,
    groups: int,
    prefix_tokens: int,
    question_tokens: int,
    output_tokens: int,
    ramp: bool = False,
) -> tuple[WorkloadRequest, ...]:
    """llm-d's prefix-cache benchmark shape: ``groups`` fixed system prompts of ``prefix_tokens`` words (distinct from
    their first word), each request one of them, drawn uniformly, followed by a question of ``question_tokens`` words
    that no other request asks. ``group`` is ``g{k}``. A prefix-aware router serves each group's prefix from cache on
    the replica that holds it; a blind one recomputes it on every replica a group's requests land on."""
    _at_least_one(groups=groups, prefix_tokens=prefix_tokens, question_tokens=question_tokens)
    _at_least_one(output_tokens=output_tokens)
    rng = random.Random(seed)
    arrivals = _arrivals(rng, rate, duration, ramp)
    if question_tokens == 1 and len(arrivals) > VOCABULARY_WORDS:
        raise WorkloadError(
            f"question_tokens: one-word questions can be distinct only {VOCABULARY_WORDS:,} times, and this workload "
            f"has {len(arrivals):,} requests; make questions at least 2 words"
        )
    leads = _Leads(rng, "prefix_tokens")
    prefixes = [leads.text(prefix_tokens) for _ in range(groups)]
    asked: set[tuple[int, ...]] = set()
    requests: list[WorkloadRequest] = []
    for arrival in arrivals:
        group = rng.randrange(groups)
        question = tuple(_random_words(rng, question_tokens))
        while question in asked:  # rare but for very short questions: a repeat would be a cache hit by chance
            question = tuple(_random_words(rng, question_tokens))
        asked.add(question)
        requests.append(_request(arrival, [*prefixes[group], *question], output_tokens, f"g{group}"))
    return tuple(requests)


@dataclass
class _Session:
    """An open conversation of :func:`multi_turn`."""

    name: str
    context: list[int]
    """Its words so far: the system prompt, then each turn's user words and reply."""
    turns: int = 0


def multi_turn(
    *,
    rate: float,
    duration: float,
    seed: int,
    sessions: int,
    system_tokens: int,
    turn_tokens: int,
    output_tokens: int,
    max_turns: int,
    ramp: bool = False,
) -> tuple[WorkloadRequest, ...]:
    """The chat and agent shape: ``sessions`` conversations open at once, whose context grows turn by turn.

    Each arrival (Poisson overall) is the next turn of an open conversation drawn uniformly. Turn ``t``'s prompt is the
    conversation's system prompt (``system_tokens`` words, distinct from their first word), then for each earlier turn
    its user words (``turn_tokens``) and the assistant's reply (``output_tokens`` words invented here: the simulated
    engine's text is random, so the client could not resend the real one and stay reproducible), then the new user
    words. So each turn's prompt extends the previous turn's exactly. A conversation that reaches ``max_turns`` closes
    and a new one opens in its place; ``session`` and ``group`` are ``s{k}``, numbered as they open. Turns are
    assigned in arrival order, so a turn never arrives before its conversation's previous one.
    """
    _at_least_one(sessions=sessions, system_tokens=system_tokens, turn_tokens=turn_tokens)
    _at_least_one(output_tokens=output_tokens, max_turns=max_turns)
    rng = random.Random(seed)
    arrivals = _arrivals(rng, rate, duration, ramp)
    leads = _Leads(rng, "system_tokens")
    opened = 0

    def open_session() -> _Session:
        nonlocal opened
        opened += 1
        return _Session(f"s{opened - 1}", leads.text(system_tokens))

    open_sessions = [open_session() for _ in range(min(sessions, len(arrivals)))]
    requests: list[WorkloadRequest] = []
    for arrival in arrivals:
        slot = rng.randrange(len(open_sessions))
        session = open_sessions[slot]
        prompt = [*session.context, *_random_words(rng, turn_tokens)]
        requests.append(_request(arrival, prompt, output_tokens, session.name, session=session.name))
        session.context = [*prompt, *_random_words(rng, output_tokens)]
        session.turns += 1
        if session.turns == max_turns:
            open_sessions[slot] = open_session()
    return tuple(requests)


def unique(
    *, rate: float, duration: float, seed: int, prompt_tokens: int, output_tokens: int, ramp: bool = False
) -> tuple[WorkloadRequest, ...]:
    """Prompts of ``prompt_tokens`` random words with nothing to share: each differs from every other from its first
    word (from its second beyond :data:`VOCABULARY_WORDS` requests, still inside any engine's first cache block). The
    cache-cold baseline: no router can find a hit, so it measures balance alone. No ``group``: no two requests have
    anything in common."""
    _at_least_one(prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    rng = random.Random(seed)
    arrivals = _arrivals(rng, rate, duration, ramp)
    leads = _Leads(rng, "prompt_tokens")
    return tuple(_request(arrival, leads.text(prompt_tokens), output_tokens, None) for arrival in arrivals)


class WorkloadShape(BaseModel):
    """The sizes a named generator (:data:`GENERATORS`) uses; each generator reads the fields it names. The defaults
    are realistic for one GPU replica of a 7-8B model: prompts of one to two thousand tokens and 128-token answers,
    enough that prefill dominates and a cache hit shows in time to first token."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: int = Field(default=16, ge=1, description="shared-prefix: how many system prompts requests share (16).")
    prefix_tokens: int = Field(default=2048, ge=1, description="shared-prefix: words of each system prompt (2,048).")
    question_tokens: int = Field(default=64, ge=1, description="shared-prefix: words of each question (64).")
    sessions: int = Field(default=32, ge=1, description="multi-turn: conversations open at once (32).")
    system_tokens: int = Field(default=512, ge=1, description="multi-turn: words of each system prompt (512).")
    turn_tokens: int = Field(default=96, ge=1, description="multi-turn: words of each user turn (96).")
    max_turns: int = Field(default=6, ge=1, description="multi-turn: turns before a conversation closes (6).")
    prompt_tokens: int = Field(default=1024, ge=1, description="unique: words of each prompt (1,024).")
    output_tokens: int = Field(
        default=128,
        ge=1,
        description="every generator: tokens each request generates (128); in multi-turn also the "
        "words of each invented assistant reply.",
    )


PLAN_RATE = "plan"
"""``inferplane simulate --rate plan``: a generator's rate is what the plan promises (the replicas x what one serves
within the model's slo, by the performance model), worked out by the command from the workload's mix."""

WorkloadGenerator = Callable[[float, float, int, bool, WorkloadShape], tuple[WorkloadRequest, ...]]
"""A named generator: ``(rate, duration, seed, ramp, shape)`` -> the workload."""


def _shared_prefix(
    rate: float, duration: float, seed: int, ramp: bool, shape: WorkloadShape
) -> tuple[WorkloadRequest, ...]:
    return shared_prefix(
        rate=rate,
        duration=duration,
        seed=seed,
        ramp=ramp,
        groups=shape.groups,
        prefix_tokens=shape.prefix_tokens,
        question_tokens=shape.question_tokens,
        output_tokens=shape.output_tokens,
    )


def _multi_turn(
    rate: float, duration: float, seed: int, ramp: bool, shape: WorkloadShape
) -> tuple[WorkloadRequest, ...]:
    return multi_turn(
        rate=rate,
        duration=duration,
        seed=seed,
        ramp=ramp,
        sessions=shape.sessions,
        system_tokens=shape.system_tokens,
        turn_tokens=shape.turn_tokens,
        output_tokens=shape.output_tokens,
        max_turns=shape.max_turns,
    )


def _unique(rate: float, duration: float, seed: int, ramp: bool, shape: WorkloadShape) -> tuple[WorkloadRequest, ...]:
    return unique(
        rate=rate,
        duration=duration,
        seed=seed,
        ramp=ramp,
        prompt_tokens=shape.prompt_tokens,
        output_tokens=shape.output_tokens,
    )


GENERATORS: Mapping[str, WorkloadGenerator] = MappingProxyType(
    {"shared-prefix": _shared_prefix, "multi-turn": _multi_turn, "unique": _unique}
)
"""The generators by the name the CLI takes (``--workload shared-prefix``)."""


# --- what a cache could serve ------------------------------------------------------------------------------------


def ideal_hit_share(requests: Iterable[WorkloadRequest], block_tokens: int) -> float:
    """The share of all prompt tokens an engine could serve from its prefix cache were every earlier request's KV
    still cached wherever this one is served (one unbounded cache for the whole fleet): the ceiling a router and
    cache can approach, never pass.

    Counted as vLLM and Dynamo count hits: in whole blocks of ``block_tokens``, block ``k`` a hit only if blocks
    ``0 .. k`` all match an earlier prompt's, and never the prompt's last token (the engine computes at least one
    token to produce the first output), so a prompt of ``n`` tokens can hit at most ``(n - 1) // block_tokens`` blocks.
    An earlier prompt leaves all its full blocks cached. Counted over the workload's words; the chat template's tokens
    around them, shared by every request, are not in it. 0.0 for a workload without prompt tokens.

    Each block is keyed by its words and its parent block's key, interned to an integer, so a lookup is one dict
    access per block (linear in the workload's tokens, and exact: no hash can collide).
    """
    if block_tokens < 1:
        raise WorkloadError(f"block_tokens: must be >= 1, got {block_tokens}")
    blocks: dict[tuple[int, tuple[int, ...]], int] = {}
    total = hits = 0
    for request in requests:
        ids = prompt_token_ids(request)
        total += len(ids)
        hittable = (len(ids) - 1) // block_tokens
        parent = -1
        for k in range(len(ids) // block_tokens):
            key = (parent, ids[k * block_tokens : (k + 1) * block_tokens])
            found = blocks.get(key)
            if found is None:
                # A new block: every later block of this prompt has a new parent, so none is found either.
                found = blocks[key] = len(blocks)
            elif k < hittable:
                hits += block_tokens
            parent = found
    return hits / total if total else 0.0
