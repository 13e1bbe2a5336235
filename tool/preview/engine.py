"""Evaluating one stack offline: the stack's config as the ``pulumi`` CLI would set it, the real program under the
mock engine, then the plan.

Every evaluation runs on a fresh event loop and a reset Pulumi runtime (:func:`inferplane.tool.mockengine.evaluate`), so
stacks evaluated one after another in the same process do not see each other's config, resources or exports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferplane.components.capacity.sizing import PlatformSizing, size_platform
from inferplane.components.spec.platform_spec import PLATFORM_KEY, REGION_KEY
from inferplane.tool.mockengine import SECRET_PLACEHOLDER, Evaluation, PlatformMocks, Registration, evaluate
from inferplane.tool.preview.model import Cost, Plan, PlanResource, plain_mapping, stack_urn, tree_order
from inferplane.tool.preview.policy import PolicyReport, PolicyRunner, no_policies, start_policies
from inferplane.tool.preview.project import config_declarations, project_program
from inferplane.tool.stackfile import SecretValue, Stack, StackConfig, project_of

DEFAULT_REGION = "us-east-1"
"""The region the mock engine answers for when a stack without a platform spec sets no ``aws:region``."""


@dataclass(frozen=True)
class EvaluationConfig:
    """The config the program sees, which keys are secret, and notes for the reader about placeholders."""

    values: Mapping[str, Any]
    secret_keys: tuple[str, ...]
    notes: tuple[str, ...]


def _redact(value: Any) -> tuple[Any, bool]:
    """``value`` with every ``secure:`` leaf replaced by the placeholder, and whether there was one."""
    if isinstance(value, SecretValue):
        return SECRET_PLACEHOLDER, True
    if isinstance(value, dict):
        pairs = {k: _redact(v) for k, v in value.items()}
        return {k: v for k, (v, _) in pairs.items()}, any(s for _, s in pairs.values())
    if isinstance(value, list):
        items = [_redact(v) for v in value]
        return [v for v, _ in items], any(s for _, s in items)
    return value, False


def evaluation_config(stack: StackConfig) -> EvaluationConfig:
    """The stack's config as the CLI hands it to the program.

    ``secure:`` values cannot be decrypted offline (no passphrase or KMS key is at hand): each becomes the
    ``[secret]`` placeholder and its key is marked secret, as the CLI marks it, so the program's
    ``require_secret`` gets a secret ``Output``. Secrets the program requires that the stack lacks get the same
    placeholder, with a note saying so: for a platform stack, ``inferplane.infra.program.SECRET_CONFIG_KEYS``; for
    any stack, the keys its ``Pulumi.yaml`` declares ``secret: true``. Declared defaults fill keys the stack lacks,
    as the CLI fills them.
    """
    values: dict[str, Any] = {}
    secret_keys: list[str] = []
    notes: list[str] = []
    for key in sorted(stack.config):
        value, secret = _redact(stack.config[key])
        values[key] = value
        if secret:
            secret_keys.append(key)
    declared = config_declarations(project_of(stack))
    for key in sorted(set(declared.defaults) - set(values)):
        values[key] = declared.defaults[key]
        if key in declared.secrets:
            secret_keys.append(key)
    required = platform_secrets() if isinstance(stack, Stack) else ()
    for key in (*required, *(k for k in declared.secrets if k not in required)):
        if key not in values:
            values[key] = SECRET_PLACEHOLDER
            secret_keys.append(key)
            notes.append(
                f"{key} is not set in {stack.display_file}; a {SECRET_PLACEHOLDER} placeholder stands in for it "
                f"(set it with: pulumi config set --secret {key} ... --stack {stack.name})"
            )
    return EvaluationConfig(values=values, secret_keys=tuple(secret_keys), notes=tuple(notes))


def platform_secrets() -> tuple[str, ...]:
    """``inferplane.infra.program.SECRET_CONFIG_KEYS``, imported on first use: the program module loads every
    provider SDK, which the preview needs only once the policy pack is starting beside the evaluation."""
    from inferplane.infra.program import SECRET_CONFIG_KEYS  # noqa: PLC0415

    return SECRET_CONFIG_KEYS


def plan_resources(evaluation: Evaluation, project: str, stack: str) -> tuple[PlanResource, ...]:
    """The registrations as plan resources, in tree order."""
    resources = [_plan_resource(r) for r in evaluation.registrations]
    return tuple(tree_order(resources, stack_urn(project, stack)))


def _plan_resource(registration: Registration) -> PlanResource:
    return PlanResource(
        urn=registration.urn,
        type=registration.type,
        name=registration.name,
        parent=registration.parent,
        provider=registration.provider,
        inputs=plain_mapping(registration.inputs),
        dependencies=tuple(sorted(set(registration.dependencies))),
        protect=registration.protect,
        custom=registration.custom,
        outputs=plain_mapping(registration.outputs),
    )


@dataclass(frozen=True)
class PreviewResult:
    """One stack's preview: the plan, the sizing it was built from (none without a platform spec), and notes about
    placeholders."""

    plan: Plan
    sizing: PlatformSizing | None
    notes: tuple[str, ...]


def evaluate_stack(
    stack: StackConfig, program: Callable[[], None] | None = None
) -> tuple[Evaluation, EvaluationConfig]:
    """Run ``program`` (default: the project's own, :func:`~.project.project_program`) under the mock engine with
    ``stack``'s config as the CLI hands it over.

    Secrets become placeholders (:func:`evaluation_config`). The one way a stack is evaluated offline: the preview,
    the policy-pack driver and the tests all call it.
    """
    config = evaluation_config(stack)
    region = stack.platform.region if isinstance(stack, Stack) else str(stack.config.get(REGION_KEY, DEFAULT_REGION))
    evaluation = evaluate(
        program or project_program(project_of(stack)),
        mocks=PlatformMocks(region),
        project=stack.project,
        stack=stack.name,
        config=config.values,
        secret_keys=config.secret_keys,
        root_directory=str(stack.project_dir),
    )
    return evaluation, config


def run_preview(
    stack: StackConfig,
    sizing: PlatformSizing | None,
    *,
    program: Callable[[], None] | None = None,
    policy_runner: PolicyRunner = no_policies,
    on_step: Callable[[str], None] | None = None,
) -> PreviewResult:
    """Evaluate ``program`` (default: the project's own) with ``stack``'s config under the mock engine, run the
    policies, build the plan.

    ``sizing`` is the platform's (:func:`size_stack`) for a stack with a platform spec, ``None`` for any other
    stack: its plan has the program's resources and outputs, no sizing or cost, and a note saying so.
    Exceptions the program raises propagate unchanged (the command trims their tracebacks).
    """
    step = on_step or (lambda _: None)
    # The pack starts first and comes up beside the program's evaluation (and the provider SDKs' imports).
    policies = start_policies(policy_runner, stack) if isinstance(stack, Stack) else None
    try:
        step(f"evaluating the program for {stack.name}")
        evaluation, config = evaluate_stack(stack, program)
        resources = plan_resources(evaluation, stack.project, stack.name)
        step(f"running policies on {len(resources)} resources")
        report = policies.evaluate(resources) if policies is not None else PolicyReport()
    finally:
        if policies is not None:
            policies.close()
    plan = build_plan(
        stack.project, stack.name, resources=resources, outputs=evaluation.outputs, sizing=sizing, report=report
    )
    notes = config.notes
    if sizing is None:
        notes += (
            f"{stack.display_file} has no {PLATFORM_KEY} spec: the plan shows the program's resources and outputs, "
            "without sizing, cost or the platform's policies",
        )
    return PreviewResult(plan=plan, sizing=sizing, notes=notes)


def build_plan(
    project: str,
    stack: str,
    *,
    resources: Sequence[PlanResource],
    outputs: Mapping[str, Any],
    sizing: PlatformSizing | None,
    report: PolicyReport,
) -> Plan:
    """Assemble the plan; policies and violations are sorted so the file does not depend on the pack's order.
    Without ``sizing`` the plan's sizing is empty and its cost unknown."""
    return Plan(
        project=project,
        stack=stack,
        resources=tuple(resources),
        outputs=plain_mapping(outputs),
        sizing=sizing.model_dump(mode="json") if sizing is not None else {},
        cost=Cost.from_sizing(sizing) if sizing is not None else Cost.unknown(),
        policies=tuple(sorted(report.policies, key=lambda p: p.name)),
        violations=tuple(sorted(report.violations, key=lambda v: (v.policy, v.urn, v.message))),
    )


def size_stack(stack: Stack) -> PlatformSizing:
    """The sizing the program itself computes (``inferplane.infra.program.build`` calls the same function)."""
    return size_platform(stack.platform)
