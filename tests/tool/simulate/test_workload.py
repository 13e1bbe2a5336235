"""The workload format, its reader's every error, the three generators' shapes over their parameter space, and the
ideal hit share against a brute-force reference."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.tool.simulate.workload import (
    GENERATORS,
    MAX_REPORTED_ERRORS,
    VOCABULARY_WORDS,
    WorkloadError,
    WorkloadRequest,
    WorkloadShape,
    ideal_hit_share,
    multi_turn,
    prompt_token_ids,
    read_workload,
    shared_prefix,
    unique,
    words,
    write_workload,
)

VALID = '{"arrival_s": 0.5, "prompt": "w1 w2", "output_tokens": 4}'


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "workload.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def _error(path: Path) -> str:
    with pytest.raises(WorkloadError) as raised:
        read_workload(path)
    return str(raised.value)


# --- the format and the file -------------------------------------------------------------------------------------


def test_a_request_has_exactly_one_of_prompt_and_token_ids() -> None:
    assert WorkloadRequest(arrival_s=0, prompt="w1", output_tokens=1).token_ids is None
    assert WorkloadRequest(arrival_s=0, token_ids=(3, 4), output_tokens=1).prompt is None
    for extra in ({}, {"prompt": "w1", "token_ids": (1,)}):
        with pytest.raises(ValueError, match=r"prompt, token_ids: exactly one is required"):
            WorkloadRequest(arrival_s=0, output_tokens=1, **extra)


def test_words_and_prompt_token_ids_are_inverses() -> None:
    assert words([0, 12, 29999]) == "w0 w12 w29999"
    assert words([]) == ""
    request = WorkloadRequest(arrival_s=0, prompt=" w0  w12\tw29999\n", output_tokens=1)
    assert prompt_token_ids(request) == (0, 12, 29999)
    assert prompt_token_ids(WorkloadRequest(arrival_s=0, token_ids=(7, 7), output_tokens=1)) == (7, 7)


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ("w1 hello", "prompt: word 2 ('hello') is not a vocabulary word, w0 ... w29999"),
        ("w01", "prompt: word 1 ('w01') is not a vocabulary word, w0 ... w29999"),  # not one token of the tokenizer
        ("w1 w2 w30000", "prompt: word 3 ('w30000') is not a vocabulary word, w0 ... w29999"),
        ("w1,w2", "prompt: word 1 ('w1,w2') is not a vocabulary word, w0 ... w29999"),
    ],
)
def test_a_prompt_word_outside_the_vocabulary_is_named(prompt: str, message: str) -> None:
    with pytest.raises(WorkloadError) as raised:
        prompt_token_ids(WorkloadRequest(arrival_s=0, prompt=prompt, output_tokens=1))
    assert str(raised.value) == message


@st.composite
def _workloads(draw: st.DrawFn) -> list[WorkloadRequest]:
    """Valid workloads of any text: prompts or token ids, sessions and groups or none, arrivals rising or tied."""
    arrival, requests = 0.0, []
    for _ in range(draw(st.integers(1, 8))):
        arrival += draw(st.floats(0, 10))
        prompt: dict[str, str | tuple[int, ...]] = draw(
            st.one_of(
                st.builds(
                    dict,
                    prompt=st.lists(st.sampled_from(["w0 ", "w29999\n", " w17\t", "\tw3 "]), min_size=1).map("".join),
                ),
                st.builds(dict, token_ids=st.lists(st.integers(0, VOCABULARY_WORDS - 1), min_size=1).map(tuple)),
            )
        )
        requests.append(
            WorkloadRequest.model_validate(
                {
                    "arrival_s": arrival,
                    **prompt,
                    "output_tokens": draw(st.integers(1, 10_000)),
                    "session": draw(st.none() | st.text(min_size=1)),
                    "group": draw(st.none() | st.text(min_size=1)),
                }
            )
        )
    return requests


@settings(max_examples=60, deadline=None)
@given(requests=_workloads())
def test_a_written_workload_reads_back_equal(
    tmp_path_factory: pytest.TempPathFactory, requests: list[WorkloadRequest]
) -> None:
    """Any text (U+2028, newlines, quotes) in sessions and groups, and any whitespace in prompts, survives the JSON
    lines."""
    path = tmp_path_factory.mktemp("roundtrip") / "workload.jsonl"
    write_workload(path, requests)
    assert read_workload(path) == tuple(requests)
    assert path.read_text(encoding="utf-8").count("\n") == len(requests)


def test_the_file_is_one_compact_object_a_line_without_absent_fields(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    write_workload(path, [WorkloadRequest(arrival_s=0.25, token_ids=(1, 2), output_tokens=3, group="g0")])
    assert (
        path.read_text(encoding="utf-8")
        == '{"arrival_s": 0.25, "token_ids": [1, 2], "output_tokens": 3, "group": "g0"}\n'
    )


def test_blank_lines_are_skipped_and_line_numbers_stay_the_files(tmp_path: Path) -> None:
    path = _write(tmp_path, "", VALID, "   ", '{"arrival_s": 0.75, "token_ids": [5], "output_tokens": 1}', "")
    assert [r.arrival_s for r in read_workload(path)] == [0.5, 0.75]
    path = _write(tmp_path, "", VALID, "", '{"arrival_s": 0.75, "token_ids": [5], "output_tokens": 0}')
    assert _error(path) == f"{path} line 4: output_tokens: must be >= 1"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"arrival_s": 1, "prompt": "w1", "output_tokens": 0}', "output_tokens: must be >= 1"),
        ('{"arrival_s": 1, "prompt": "w1", "output_tokens": 1.5}', "output_tokens: must be an integer"),
        ('{"arrival_s": 1, "prompt": "w1", "output_tokens": "3"}', "output_tokens: must be an integer"),
        ('{"arrival_s": 1, "prompt": "w1", "output_tokens": true}', "output_tokens: must be an integer"),
        ('{"arrival_s": 1, "prompt": "w1"}', "output_tokens: is required"),
        ('{"prompt": "w1", "output_tokens": 1}', "arrival_s: is required"),
        ('{"arrival_s": "1", "prompt": "w1", "output_tokens": 1}', "arrival_s: must be a number"),
        ('{"arrival_s": NaN, "prompt": "w1", "output_tokens": 1}', "arrival_s: must be a finite number"),
        ('{"arrival_s": 1e400, "prompt": "w1", "output_tokens": 1}', "arrival_s: must be a finite number"),
        ('{"arrival_s": 1, "prompt": 5, "output_tokens": 1}', "prompt: must be a string"),
        ('{"arrival_s": 1, "prompt": " \\t", "output_tokens": 1}', "prompt: must hold at least one word"),
        ('{"arrival_s": 1, "output_tokens": 1}', "prompt, token_ids: exactly one is required, found neither"),
        (
            '{"arrival_s": 1, "prompt": "w1", "token_ids": [1], "output_tokens": 1}',
            "prompt, token_ids: exactly one is required, found both",
        ),
        ('{"arrival_s": 1, "token_ids": [], "output_tokens": 1}', "token_ids: must not be empty"),
        ('{"arrival_s": 1, "token_ids": "w1", "output_tokens": 1}', "token_ids: must be a list of integers"),
        ('{"arrival_s": 1, "token_ids": [1, -1], "output_tokens": 1}', "token_ids[1]: must be >= 0"),
        ('{"arrival_s": 1, "token_ids": [30000], "output_tokens": 1}', "token_ids[0]: must be < 30000"),
        ('{"arrival_s": 1, "token_ids": [1, 2.5], "output_tokens": 1}', "token_ids[1]: must be an integer"),
        ('{"arrival_s": 1, "prompt": "w1", "output_tokens": 1, "session": ""}', "session: must not be empty"),
        ('{"arrival_s": 1, "prompt": "w1", "output_tokens": 1, "group": 3}', "group: must be a string"),
        (
            '{"arrival_s": 1, "prompt": "w1", "output_tokens": 1, "prompts": "w2"}',
            "prompts: is not a field of a workload request (fields: arrival_s, prompt, token_ids, output_tokens, "
            "session, group)",
        ),
        (
            '{"arrival_s": 1, "prompt": "w1 hello", "output_tokens": 1}',
            "prompt: word 2 ('hello') is not a vocabulary word, w0 ... w29999",
        ),
        ("[1, 2]", "must be a JSON object"),
        ('"w1 w2"', "must be a JSON object"),
        ('{"arrival_s": 1,', "invalid JSON: Expecting property name enclosed in double quotes (column 17)"),
        ("arrival_s=1", "invalid JSON: Expecting value (column 1)"),
    ],
)
def test_each_bad_line_is_named_by_file_line_and_field(tmp_path: Path, line: str, problem: str) -> None:
    path = _write(tmp_path, VALID, line, VALID.replace("0.5", "2"))
    assert _error(path) == f"{path} line 2: {problem}"


def test_an_arrival_before_the_previous_names_both_lines(tmp_path: Path) -> None:
    earlier = VALID.replace("0.5", "0.25")
    path = _write(tmp_path, VALID, "", earlier)
    assert _error(path) == (f"{path} line 3: arrival_s: 0.25 is before line 1's 0.5; arrival times must not decrease")
    # A broken line between two valid ones: the order is checked against the last line that was read.
    path = _write(tmp_path, VALID, "{", earlier)
    assert _error(path).splitlines() == [
        f"{path} line 2: invalid JSON: Expecting property name enclosed in double quotes (column 2)",
        f"{path} line 3: arrival_s: 0.25 is before line 1's 0.5; arrival times must not decrease",
    ]


def test_every_line_error_is_reported_together_up_to_a_cap(tmp_path: Path) -> None:
    bad = '{"arrival_s": 1, "prompt": "w1", "output_tokens": 0, "sesion": "s1"}'
    path = _write(tmp_path, *[bad] * 3)
    assert _error(path).splitlines() == [
        message
        for number in (1, 2, 3)
        for message in (
            f"{path} line {number}: output_tokens: must be >= 1",
            f"{path} line {number}: sesion: is not a field of a workload request (fields: arrival_s, prompt, "
            "token_ids, output_tokens, session, group)",
        )
    ]
    path = _write(tmp_path, VALID, *["{"] * (MAX_REPORTED_ERRORS + 7))
    lines = _error(path).splitlines()
    assert lines[0] == f"{path} line 2: invalid JSON: Expecting property name enclosed in double quotes (column 2)"
    assert lines[MAX_REPORTED_ERRORS - 1].startswith(f"{path} line {MAX_REPORTED_ERRORS + 1}: invalid JSON")
    assert lines[MAX_REPORTED_ERRORS:] == ["and 7 more"]


def test_an_empty_missing_or_unreadable_file_is_refused(tmp_path: Path) -> None:
    for text in ("", "\n  \n"):
        path = tmp_path / "empty.jsonl"
        path.write_text(text, encoding="utf-8")
        assert _error(path) == f"{path}: holds no request (a workload needs at least one JSON line)"
    assert _error(tmp_path / "absent.jsonl") == f"{tmp_path / 'absent.jsonl'}: no such file"
    assert _error(tmp_path) == f"{tmp_path}: is a directory, not a file"
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(VALID.encode() + b"\n\xff\n")
    assert _error(binary) == f"{binary}: is not UTF-8 text: byte 0xff on line 2 (offset {len(VALID) + 1})"


def test_writing_refuses_what_reading_would(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    with pytest.raises(WorkloadError) as raised:
        write_workload(path, [])
    assert str(raised.value) == f"{path}: no request to write (a workload needs at least one)"
    late, early = (WorkloadRequest(arrival_s=t, prompt="w1", output_tokens=1) for t in (2.0, 1.0))
    with pytest.raises(WorkloadError) as raised:
        write_workload(path, [late, early])
    assert str(raised.value) == (
        f"{path}: request 2 arrives at 1.0, before request 1's 2.0; arrival times must not decrease"
    )
    with pytest.raises(WorkloadError) as raised:
        write_workload(tmp_path / "missing" / "w.jsonl", [late])
    assert str(raised.value).startswith(f"{tmp_path / 'missing' / 'w.jsonl'}: cannot write there: ")
    assert not path.exists()


# --- the generators ----------------------------------------------------------------------------------------------


_LOAD = {
    "rate": st.floats(0.5, 40),
    "duration": st.floats(0.5, 8),
    "seed": st.integers(0, 2**64),
    "ramp": st.booleans(),
}


def _check_arrivals(requests: Sequence[WorkloadRequest], rate: float, duration: float, ramp: bool) -> None:
    """Sorted arrivals in ``[0, duration)``, their count and their first half's count each within six standard
    deviations (plus 6, for tiny means) of a Poisson count's mean: a correct generator fails this for one seed in
    about 10^8, a wrong rate or ramp shape for almost every seed."""
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals)
    assert all(0 <= t < duration for t in arrivals)
    mean = rate * duration / 2 if ramp else rate * duration
    first_half = mean / 4 if ramp else mean / 2  # a linear ramp's cumulative rate at half time is a quarter
    for count, expected in ((len(arrivals), mean), (sum(t < duration / 2 for t in arrivals), first_half)):
        assert abs(count - expected) <= 6 * math.sqrt(expected) + 6, (count, expected)


@settings(max_examples=40, deadline=None)
@given(
    **_LOAD,
    groups=st.integers(1, 6),
    prefix_tokens=st.integers(1, 40),
    question_tokens=st.integers(1, 12),
    output_tokens=st.integers(1, 300),
)
def test_shared_prefix_requests_are_one_of_the_groups_prefixes_and_a_question_of_their_own(
    *,
    rate: float,
    duration: float,
    seed: int,
    ramp: bool,
    groups: int,
    prefix_tokens: int,
    question_tokens: int,
    output_tokens: int,
) -> None:
    sizes = {"groups": groups, "prefix_tokens": prefix_tokens, "question_tokens": question_tokens}
    requests = shared_prefix(rate=rate, duration=duration, seed=seed, output_tokens=output_tokens, ramp=ramp, **sizes)
    assert requests == shared_prefix(
        rate=rate, duration=duration, seed=seed, output_tokens=output_tokens, ramp=ramp, **sizes
    )
    _check_arrivals(requests, rate, duration, ramp)
    prefixes: dict[str, tuple[int, ...]] = {}
    questions = []
    for request in requests:
        ids = prompt_token_ids(request)
        assert len(ids) == prefix_tokens + question_tokens
        assert request.group is not None and request.session is None and request.output_tokens == output_tokens
        assert prefixes.setdefault(request.group, ids[:prefix_tokens]) == ids[:prefix_tokens]
        questions.append(ids[prefix_tokens:])
    assert set(prefixes) <= {f"g{k}" for k in range(groups)}
    assert len({prefix[0] for prefix in prefixes.values()}) == len(prefixes)  # distinct from the first word
    assert len(set(questions)) == len(questions)


@settings(max_examples=40, deadline=None)
@given(
    **_LOAD,
    sessions=st.integers(1, 6),
    system_tokens=st.integers(1, 30),
    turn_tokens=st.integers(1, 10),
    output_tokens=st.integers(1, 10),
    max_turns=st.integers(1, 5),
)
def test_multi_turn_prompts_extend_their_sessions_previous_prompt_exactly(
    *,
    rate: float,
    duration: float,
    seed: int,
    ramp: bool,
    sessions: int,
    system_tokens: int,
    turn_tokens: int,
    output_tokens: int,
    max_turns: int,
) -> None:
    sizes = {"sessions": sessions, "system_tokens": system_tokens, "turn_tokens": turn_tokens, "max_turns": max_turns}
    requests = multi_turn(rate=rate, duration=duration, seed=seed, output_tokens=output_tokens, ramp=ramp, **sizes)
    assert requests == multi_turn(
        rate=rate, duration=duration, seed=seed, output_tokens=output_tokens, ramp=ramp, **sizes
    )
    _check_arrivals(requests, rate, duration, ramp)
    previous: dict[str, tuple[int, ...]] = {}
    turns: Counter[str] = Counter()
    closed = 0
    for request in requests:
        name = request.session
        assert name is not None and request.group == name and request.output_tokens == output_tokens
        # s0 ... s{sessions-1} open first; each later one only once an earlier one has closed.
        assert int(name.removeprefix("s")) < sessions + closed
        ids = prompt_token_ids(request)
        if name in previous:
            before = previous[name]
            assert ids[: len(before)] == before and len(ids) == len(before) + output_tokens + turn_tokens
        else:
            assert len(ids) == system_tokens + turn_tokens
        previous[name] = ids
        turns[name] += 1
        assert turns[name] <= max_turns
        closed += turns[name] == max_turns
    assert len({ids[0] for ids in previous.values()}) == len(previous)  # system prompts distinct from the first word


@settings(max_examples=40, deadline=None)
@given(**_LOAD, prompt_tokens=st.integers(1, 30), output_tokens=st.integers(1, 300))
def test_unique_prompts_differ_from_their_first_word(
    *, rate: float, duration: float, seed: int, ramp: bool, prompt_tokens: int, output_tokens: int
) -> None:
    requests = unique(
        rate=rate, duration=duration, seed=seed, prompt_tokens=prompt_tokens, output_tokens=output_tokens, ramp=ramp
    )
    assert requests == unique(
        rate=rate, duration=duration, seed=seed, prompt_tokens=prompt_tokens, output_tokens=output_tokens, ramp=ramp
    )
    _check_arrivals(requests, rate, duration, ramp)
    ids = [prompt_token_ids(r) for r in requests]
    assert all(len(i) == prompt_tokens for i in ids)
    assert len({i[0] for i in ids}) == len(ids)
    assert all(r.group is None and r.session is None and r.output_tokens == output_tokens for r in requests)
    assert ideal_hit_share(requests, 1) == 0.0


def test_beyond_the_vocabulary_unique_prompts_differ_from_their_second_word() -> None:
    requests = unique(rate=31_000, duration=1, seed=5, prompt_tokens=3, output_tokens=1)
    ids = [prompt_token_ids(r) for r in requests]
    assert len(ids) > VOCABULARY_WORDS
    assert len({i[0] for i in ids[:VOCABULARY_WORDS]}) == VOCABULARY_WORDS
    assert len({i[:2] for i in ids}) == len(ids)
    assert ideal_hit_share(requests, 2) == 0.0
    with pytest.raises(WorkloadError) as raised:
        unique(rate=31_000, duration=1, seed=5, prompt_tokens=1, output_tokens=1)
    assert str(raised.value) == (
        "prompt_tokens: a one-word text can be distinct only 30,000 times; this workload needs more (make it at "
        "least 2 words, or generate fewer requests)"
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: unique(rate=0, duration=1, seed=0, prompt_tokens=1, output_tokens=1),
            "rate: must be a finite number > 0 requests/s, got 0",
        ),
        (
            lambda: unique(rate=math.inf, duration=1, seed=0, prompt_tokens=1, output_tokens=1),
            "rate: must be a finite number > 0 requests/s, got inf",
        ),
        (
            lambda: unique(rate=1, duration=-1, seed=0, prompt_tokens=1, output_tokens=1),
            "duration: must be a finite number > 0 seconds, got -1",
        ),
        (
            lambda: unique(rate=1000, duration=3600, seed=0, prompt_tokens=1, output_tokens=1),
            "rate x duration: 3,600,000 requests expected, more than the 1,000,000 a generated workload holds; lower "
            "the rate or the duration",
        ),
        (
            lambda: unique(rate=1, duration=1, seed=0, prompt_tokens=0, output_tokens=1),
            "prompt_tokens: must be >= 1, got 0",
        ),
        (
            lambda: shared_prefix(
                rate=1, duration=1, seed=0, groups=0, prefix_tokens=1, question_tokens=1, output_tokens=1
            ),
            "groups: must be >= 1, got 0",
        ),
        (
            lambda: multi_turn(
                rate=1, duration=1, seed=0, sessions=1, system_tokens=1, turn_tokens=1, output_tokens=1, max_turns=0
            ),
            "max_turns: must be >= 1, got 0",
        ),
    ],
)
def test_a_bad_generator_parameter_is_named(call: Callable[[], object], message: str) -> None:
    with pytest.raises(WorkloadError) as raised:
        call()
    assert str(raised.value) == message


def test_one_word_questions_are_refused_where_they_cannot_all_differ() -> None:
    requests = len(unique(rate=31_000, duration=1, seed=0, prompt_tokens=2, output_tokens=1))  # the same arrivals
    with pytest.raises(WorkloadError) as raised:
        shared_prefix(rate=31_000, duration=1, seed=0, groups=1, prefix_tokens=1, question_tokens=1, output_tokens=1)
    assert str(raised.value) == (
        f"question_tokens: one-word questions can be distinct only 30,000 times, and this workload has {requests:,} "
        "requests; make questions at least 2 words"
    )


def test_the_named_generators_take_their_sizes_from_the_shape() -> None:
    shape = WorkloadShape(
        groups=2,
        prefix_tokens=5,
        question_tokens=3,
        sessions=2,
        system_tokens=4,
        turn_tokens=2,
        max_turns=3,
        prompt_tokens=6,
        output_tokens=7,
    )
    assert set(GENERATORS) == {"shared-prefix", "multi-turn", "unique"}
    assert GENERATORS["shared-prefix"](5.0, 4.0, 9, True, shape) == shared_prefix(
        rate=5.0, duration=4.0, seed=9, ramp=True, groups=2, prefix_tokens=5, question_tokens=3, output_tokens=7
    )
    assert GENERATORS["multi-turn"](5.0, 4.0, 9, True, shape) == multi_turn(
        rate=5.0,
        duration=4.0,
        seed=9,
        ramp=True,
        sessions=2,
        system_tokens=4,
        turn_tokens=2,
        output_tokens=7,
        max_turns=3,
    )
    assert GENERATORS["unique"](5.0, 4.0, 9, True, shape) == unique(
        rate=5.0, duration=4.0, seed=9, ramp=True, prompt_tokens=6, output_tokens=7
    )
    assert WorkloadShape().model_dump() == {
        "groups": 16,
        "prefix_tokens": 2048,
        "question_tokens": 64,
        "sessions": 32,
        "system_tokens": 512,
        "turn_tokens": 96,
        "max_turns": 6,
        "prompt_tokens": 1024,
        "output_tokens": 128,
    }
    assert all(
        f"({value:,})" in (field.description or "")
        for value, field in zip(WorkloadShape().model_dump().values(), WorkloadShape.model_fields.values(), strict=True)
    )


def test_a_generated_workload_is_a_valid_file(tmp_path: Path) -> None:
    for name, generate in GENERATORS.items():
        requests = generate(3.0, 2.0, 1, False, WorkloadShape(prefix_tokens=20, system_tokens=20, prompt_tokens=20))
        path = tmp_path / f"{name}.jsonl"
        write_workload(path, requests)
        assert read_workload(path) == requests
        assert json.loads(path.read_text(encoding="utf-8").splitlines()[0])["output_tokens"] == 128


# --- the ideal hit share -----------------------------------------------------------------------------------------


def _brute_force_share(prompts: Sequence[Sequence[int]], block: int) -> float:
    """The definition, pair by pair: each prompt's longest whole-block prefix shared with any earlier prompt's full
    blocks, never the prompt's last token."""
    hits = total = 0
    for i, prompt in enumerate(prompts):
        total += len(prompt)
        best = 0
        for earlier in prompts[:i]:
            k = 0
            while (
                k < (len(prompt) - 1) // block
                and k < len(earlier) // block
                and prompt[k * block : (k + 1) * block] == earlier[k * block : (k + 1) * block]
            ):
                k += 1
            best = max(best, k)
        hits += best * block
    return hits / total if total else 0.0


@settings(max_examples=300, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=14), min_size=1, max_size=12),
    block=st.integers(1, 4),
)
def test_ideal_hit_share_matches_the_pairwise_definition(prompts: list[list[int]], block: int) -> None:
    """Three words only, so prompts share prefixes often and every boundary case (a block ending at the last token, a
    longer earlier prompt, a mismatch in a later block) turns up."""
    requests = [WorkloadRequest(arrival_s=0, token_ids=tuple(p), output_tokens=1) for p in prompts]
    assert ideal_hit_share(requests, block) == _brute_force_share(prompts, block)


def test_ideal_hit_share_counts_whole_blocks_and_never_the_last_token() -> None:
    def share(*prompts: list[int], block: int = 4) -> float:
        return ideal_hit_share(
            [WorkloadRequest(arrival_s=0, token_ids=tuple(p), output_tokens=1) for p in prompts], block
        )

    assert share([1] * 8, [1] * 8) == 4 / 16  # the second's last block holds its last token
    assert share([1] * 8, [1] * 9) == 8 / 17
    assert share([1] * 7, [1] * 9) == 4 / 16  # the first's partial second block was never cached
    assert share([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 9, 5, 6, 7, 8, 0]) == 0.0  # block 1 matches, block 0 does not
    requests = shared_prefix(
        rate=20, duration=2, seed=3, groups=1, prefix_tokens=32, question_tokens=8, output_tokens=1
    )
    assert ideal_hit_share(requests, 16) == (len(requests) - 1) * 32 / (len(requests) * 40)
    with pytest.raises(WorkloadError, match=r"^block_tokens: must be >= 1, got 0$"):
        ideal_hit_share(requests, 0)
