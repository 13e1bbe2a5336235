"""The policy pack starts before the program is evaluated, so its process start, handshake and configuration overlap
the evaluation; it is stopped even when the program fails."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from inferplane.tool.analyzer import PackRunner, PackSession, policy_runner
from inferplane.tool.preview.engine import run_preview, size_stack
from inferplane.tool.preview.model import PlanResource, PolicyInfo
from inferplane.tool.preview.policy import PolicyReport, start_policies
from inferplane.tool.stackfile import Stack, load_stack
from tests.conftest import PROJECT_DIR
from tests.preview_fixture import program as fixture_program


@dataclass
class _Recorder:
    events: list[str] = field(default_factory=list)


@dataclass
class _Session:
    recorder: _Recorder

    def evaluate(self, resources: Sequence[PlanResource]) -> PolicyReport:
        self.recorder.events.append(f"evaluate {len(resources)}")
        return PolicyReport(policies=(PolicyInfo(name="recorded", enforcement="advisory"),))

    def close(self) -> None:
        self.recorder.events.append("close")


@dataclass
class _StartingRunner:
    recorder: _Recorder

    def __call__(self, resources: Sequence[PlanResource], stack: Stack) -> PolicyReport:
        raise AssertionError("a runner that can start ahead is started, not called")

    def start(self, stack: Stack) -> _Session:
        self.recorder.events.append(f"start {stack.name}")
        return _Session(self.recorder)


def test_the_pack_starts_before_the_program_and_closes_after_it() -> None:
    recorder = _Recorder()
    stack = load_stack(PROJECT_DIR, "dev")

    def program() -> None:
        recorder.events.append("program")
        fixture_program()

    result = run_preview(stack, size_stack(stack), program=program, policy_runner=_StartingRunner(recorder))
    count = len(result.plan.resources)
    assert recorder.events == ["start dev", "program", f"evaluate {count}", "close"]
    assert result.plan.policies == (PolicyInfo(name="recorded", enforcement="advisory"),)


def test_the_pack_is_closed_when_the_program_fails() -> None:
    recorder = _Recorder()
    stack = load_stack(PROJECT_DIR, "dev")

    def program() -> None:
        raise RuntimeError("the program broke")

    with pytest.raises(RuntimeError, match="the program broke"):
        run_preview(stack, size_stack(stack), program=program, policy_runner=_StartingRunner(recorder))
    assert recorder.events == ["start dev", "close"]


def test_a_plain_runner_is_called_when_the_session_is_evaluated() -> None:
    loaded = load_stack(PROJECT_DIR, "dev")
    calls: list[int] = []

    def runner(resources: Sequence[PlanResource], stack: Stack) -> PolicyReport:
        assert stack is loaded
        calls.append(len(resources))
        return PolicyReport()

    session = start_policies(runner, loaded)
    assert calls == []
    assert session.evaluate([]) == PolicyReport()
    assert calls == [0]


def test_the_analyzer_runner_starts_a_session_on_a_thread() -> None:
    runner = policy_runner(PROJECT_DIR)
    assert runner == PackRunner(PROJECT_DIR / "policies")
    stack = load_stack(PROJECT_DIR, "dev")
    session = start_policies(runner, stack)
    assert isinstance(session, PackSession)
    assert any(t.name == "policy-pack-start" for t in threading.enumerate())
    report = session.evaluate([])
    session.close()
    assert len(report.policies) > 40
    assert report.violations == ()
    stopping = [t for t in threading.enumerate() if t.name == "policy-pack-stop"]
    for thread in stopping:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in stopping)
