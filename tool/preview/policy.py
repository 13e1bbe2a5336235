"""The seam between the preview and a policy pack.

A :class:`PolicyRunner` is any callable that takes the plan's resources and the stack and returns every policy it
evaluated plus the violations it found. The preview puts both lists in the plan, prints them, and exits 1 on a
mandatory violation. Without ``policies/PulumiPolicy.yaml`` there is no pack and :func:`no_policies` answers with
two empty lists. With one, :func:`policy_runner_for` asks ``inferplane.tool.analyzer`` (the CrossGuard pack driven over
Pulumi's Analyzer gRPC protocol) for the runner: that module exposes ``policy_runner(project_dir) -> PolicyRunner``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from inferplane.tool.preview.model import PlanResource, PolicyInfo, Violation
from inferplane.tool.stackfile import Stack

POLICY_PACK_FILE = Path("policies") / "PulumiPolicy.yaml"
"""Where a CrossGuard pack declares itself, relative to the project directory."""

ANALYZER_MODULE = "inferplane.tool.analyzer"
"""The module that runs the pack; it exposes ``policy_runner(project_dir: Path) -> PolicyRunner``."""


@dataclass(frozen=True)
class PolicyReport:
    """What a policy run found: every policy evaluated, and each violation."""

    policies: tuple[PolicyInfo, ...] = ()
    violations: tuple[Violation, ...] = ()


class PolicyRunner(Protocol):
    """Evaluates a policy pack against one stack's resources."""

    def __call__(self, resources: Sequence[PlanResource], stack: Stack) -> PolicyReport:
        """Every policy evaluated and every violation, for ``resources`` of ``stack``."""
        ...


class PolicySession(Protocol):
    """A policy pack started for one stack, perhaps still starting: :meth:`evaluate` once, then :meth:`close`."""

    def evaluate(self, resources: Sequence[PlanResource]) -> PolicyReport:
        """Every policy evaluated and every violation, for ``resources`` (waits for the pack to be up)."""
        ...

    def close(self) -> None:
        """Stop the pack (it may finish stopping after this returns)."""
        ...


@dataclass(frozen=True)
class _DeferredSession:
    """A session for a runner that cannot start ahead: it runs when evaluated."""

    runner: PolicyRunner
    stack: Stack

    def evaluate(self, resources: Sequence[PlanResource]) -> PolicyReport:
        return self.runner(resources, self.stack)

    def close(self) -> None:
        return None


def start_policies(runner: PolicyRunner, stack: Stack) -> PolicySession:
    """A session of ``runner`` for ``stack``, started now where the runner can start ahead of the plan.

    A runner with a ``start(stack) -> PolicySession`` method (``inferplane.tool.analyzer``'s has one) launches its
    pack here, so the pack's process start, handshake and configuration overlap the program's evaluation; any other
    runner is called when the session is evaluated.
    """
    start = getattr(runner, "start", None)
    if callable(start):
        session: PolicySession = start(stack)
        return session
    return _DeferredSession(runner, stack)


class PolicySetupError(Exception):
    """A policy pack exists but cannot be run."""


def no_policies(resources: Sequence[PlanResource], stack: Stack) -> PolicyReport:
    """The runner when the project has no policy pack: nothing evaluated, nothing violated."""
    return PolicyReport()


def policy_runner_for(project_dir: Path) -> PolicyRunner:
    """The project's runner: :func:`no_policies` without a pack, else the one ``inferplane.tool.analyzer`` provides.

    A pack that exists but cannot be run is an error, never a silent pass.
    """
    if not (project_dir / POLICY_PACK_FILE).is_file():
        return no_policies
    try:
        module = importlib.import_module(ANALYZER_MODULE)
    except ImportError as exc:
        raise PolicySetupError(
            f"{POLICY_PACK_FILE} exists but {ANALYZER_MODULE} cannot be imported to run it: {exc}"
        ) from None
    factory = getattr(module, "policy_runner", None)
    if not callable(factory):
        raise PolicySetupError(f"{ANALYZER_MODULE} has no policy_runner(project_dir) to run {POLICY_PACK_FILE}")
    runner: PolicyRunner = factory(project_dir)
    return runner
