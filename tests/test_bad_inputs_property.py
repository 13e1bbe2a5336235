"""Property: any mutation of a shipped stack file gets a verdict (exit 0, 1 or 2), never a traceback.

Hypothesis mutates the shipped stack files the way hands and tools break them: keys deleted, lines duplicated,
values retyped or perturbed (huge and non-finite numbers, unicode and control characters, nesting), unknown keys
inserted. Each mutated stack goes through ``inferplane size --stack`` in-process (the validation every command
shares), and a few through the whole ``inferplane preview``. An exit 2 names the stack file; an exit 1 says what is
refused. Run time is bounded by a generous per-example alarm (a hang fails the example), not by a timed assert;
``benchmarks/bad_inputs.py`` prints the ratios.
"""

from __future__ import annotations

import copy
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, get_args

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplane.components.catalog import ACCELERATORS, MODELS
from inferplane.components.spec.platform_spec import KvCacheDtype, WeightsDtype
from inferplane.tool.exitcodes import EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from tests.conftest import PROJECT_DIR
from tests.stacks import copy_project
from tests.test_bad_inputs import run_cli

STACKS = ("dev", "staging", "prod")
EXAMPLE_TIMEOUT_S = 60
"""Far above the slowest honest run (a full preview takes seconds): only a hang or a blow-up reaches it."""

Path_ = tuple[str | int, ...]


class ExampleTimeoutError(Exception):
    """One example ran past :data:`EXAMPLE_TIMEOUT_S`."""


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    """Raise :class:`ExampleTimeoutError` in the main thread after ``seconds`` (POSIX ``SIGALRM``)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise ExampleTimeoutError(f"no verdict after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _shipped(stack: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((PROJECT_DIR / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return document


def _paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every path to a value under ``node``, parents before children."""
    found: list[Path_] = []
    items: list[tuple[str | int, Any]] = (
        list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
    )
    for key, value in items:
        path = (*prefix, key)
        found.append(path)
        found.extend(_paths(value, path))
    return found


def _parent(document: dict[str, Any], path: Path_) -> Any:
    node: Any = document
    for part in path[:-1]:
        node = node[part]
    return node


SCALARS = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, 2**63, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=300),
    st.sampled_from(["", " ", "\x1b[31m", "\x00", "aws:x", "0.0.0.0/0", "1.20", "ML Platform (EU)", "secure"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=12), children, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def mutated_stack(draw: st.DrawFn) -> tuple[str, str]:
    """(stack name, stack file text) after one to three mutations of a shipped stack."""
    stack = draw(st.sampled_from(STACKS))
    document = copy.deepcopy(_shipped(stack))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths)) if paths else ()
        kind = draw(st.sampled_from(["delete", "retype", "perturb", "insert", "nest", "unicode", "duplicate"]))
        if not path:
            continue
        parent = _parent(document, path)
        key = path[-1]
        value = parent[key]
        if kind == "delete":
            del parent[key]
        elif kind == "retype":
            parent[key] = draw(VALUES)
        elif kind == "perturb" and isinstance(value, bool):
            parent[key] = not value
        elif kind == "perturb" and isinstance(value, int | float):
            parent[key] = draw(st.sampled_from([value * 1000, -value, value + 1, value - 1, 0, value * 10**300]))
        elif kind == "perturb" and isinstance(value, str):
            parent[key] = value + draw(st.sampled_from(["x", "0", "-", " ", "\u00e9", "\u202e", "\t", "."]))
        elif kind == "insert" and isinstance(value, dict):
            value[draw(st.text(min_size=0, max_size=12))] = draw(VALUES)
        elif kind == "nest":
            parent[key] = draw(st.sampled_from([[value], {"value": value}, [value, value]]))
        elif kind == "unicode" and isinstance(value, str):
            parent[key] = draw(st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=80))
        elif kind == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(value))
    text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False)
    if draw(st.booleans()):
        # Line-level damage YAML-aware edits cannot make: a repeated line (duplicate keys), a cut file.
        lines = text.splitlines(keepends=True)
        index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        lines.insert(index, lines[index]) if draw(st.booleans()) else lines.__setitem__(index, "")
        text = "".join(lines)
    return stack, text


def _check_verdict(stack: str, code: int, out: str, err: str) -> None:
    text = out + err
    assert "Traceback" not in text, text
    assert code in {EXIT_OK, EXIT_REFUSED, EXIT_INVALID}, text
    if code == EXIT_INVALID:
        assert f"stacks/Pulumi.{stack}.yaml" in err, err
    if code == EXIT_REFUSED:
        assert "refused" in text, text


_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


def _project_with(case: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    stack, text = case
    project = copy_project(tmp_path_factory.mktemp("mutated"))
    (project / "stacks" / f"Pulumi.{stack}.yaml").write_text(text, encoding="utf-8")
    return stack, project


@settings(max_examples=120, deadline=None, suppress_health_check=_HEALTH)
@given(case=mutated_stack())
def test_mutated_stack_gets_a_verdict_from_size(
    case: tuple[str, str], tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, project = _project_with(case, tmp_path_factory)
    with alarm(EXAMPLE_TIMEOUT_S):
        code, out, err = run_cli(["size", "--stack", stack, "--project-dir", str(project)], capsys)
    _check_verdict(stack, code, out, err)


@settings(max_examples=4, deadline=None, suppress_health_check=_HEALTH)
@given(case=mutated_stack())
def test_mutated_stack_gets_a_verdict_from_preview(
    case: tuple[str, str], tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, project = _project_with(case, tmp_path_factory)
    plan = project / "plan.json"
    with alarm(EXAMPLE_TIMEOUT_S):
        code, out, err = run_cli(
            ["preview", "--stack", stack, "--project-dir", str(project), "--json", str(plan)], capsys
        )
    _check_verdict(stack, code, out, err)
    # A plan is written only when the preview reached one; never a temporary file left behind.
    assert plan.exists() == (code == EXIT_OK or (code == EXIT_REFUSED and "mandatory policy" in err))
    assert not list(Path(project).glob(".plan.json.*"))


NUMBERS = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.sampled_from(
        ["0", "1", "3", "64", "65", "4096", "4097", "1e308", "inf", "-inf", "nan", "0x10", "", " 8", "1_0"]
    ),
    st.floats().map(str),
    st.text(max_size=8),
)


@settings(max_examples=150, deadline=None, suppress_health_check=_HEALTH)
@given(
    model=st.sampled_from(sorted(MODELS)),
    accelerator=st.sampled_from(sorted(ACCELERATORS)),
    flags=st.dictionaries(
        st.sampled_from(["--gpus", "--context", "--concurrency", "--gpu-memory-utilization"]), NUMBERS, max_size=3
    ),
    dtypes=st.tuples(st.sampled_from(get_args(WeightsDtype)), st.sampled_from(get_args(KvCacheDtype))),
)
def test_size_flags_get_a_verdict(
    model: str, accelerator: str, flags: dict[str, str], dtypes: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["size", "--model", model, "--accelerator", accelerator, "--weights-dtype", dtypes[0]]
    argv += ["--kv-cache-dtype", dtypes[1], *(f"{flag}={value}" for flag, value in flags.items())]
    with alarm(EXAMPLE_TIMEOUT_S):
        code, out, err = run_cli(argv, capsys)
    assert "Traceback" not in out + err
    assert code in {EXIT_OK, EXIT_REFUSED, EXIT_INVALID}, out + err
    if code == EXIT_INVALID:
        assert err.strip(), "an invalid flag is explained"
