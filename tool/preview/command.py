"""``inferplane preview``: evaluate one stack offline, print the plan, write it, diff it, and exit with a verdict.

Exit codes: 0 fine; 1 the plan is refused (a model that does not fit, a limit exceeded) or a mandatory policy is
violated; 2 the configuration is invalid (the message names the file and the key); 3 the program failed (the
traceback is trimmed to the project's own frames).
"""

from __future__ import annotations

import argparse
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn

from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.files import OutputFiles, UnwritableFileError
from inferplane.tool.preview.diff import PlanDiff, creation_diff, diff_plans
from inferplane.tool.preview.engine import PreviewResult, run_preview, size_stack
from inferplane.tool.preview.markdown import render_markdown
from inferplane.tool.preview.model import Plan, PlanFileError, load_plan
from inferplane.tool.preview.policy import PolicyRunner, PolicySetupError, no_policies, policy_runner_for
from inferplane.tool.preview.project import project_program
from inferplane.tool.preview.render import render_preview
from inferplane.tool.sizing_report import render_platform
from inferplane.tool.stackfile import Stack, StackConfig, find_project_dir, load_stack_config, printable, project_of

_TOOL_FILES = ("tool/mockengine.py", "tool/preview/")
"""The preview's own machinery: not the program, so left out of a failed program's traceback."""


def project_frames(exc: BaseException, project_dir: Path) -> list[traceback.FrameSummary]:
    """The frames of ``exc``'s traceback in the project's own code (not the SDK, the venv or the preview tool)."""
    root = project_dir.resolve()
    kept: list[traceback.FrameSummary] = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if not Path(frame.filename).is_absolute():  # "<frozen runpy>", "<string>": no file, and not the project's
            continue
        path = Path(frame.filename).resolve()
        if not path.is_relative_to(root):
            continue
        relative = path.relative_to(root).as_posix()
        if relative.startswith((".venv/", "venv/")) or "site-packages" in relative:
            continue
        if relative.startswith(_TOOL_FILES):
            continue
        kept.append(frame)
    return kept


def format_program_error(exc: BaseException, project_dir: Path) -> str:
    """The program's failure as a traceback of the project's own frames, then the exception."""
    frames = project_frames(exc, project_dir)
    root = project_dir.resolve()
    lines = ["the program failed:"]
    if frames:
        lines.append("Traceback (project frames only, most recent call last):")
        for frame in frames:
            where = Path(frame.filename).resolve().relative_to(root).as_posix()
            lines.append(f'  File "{where}", line {frame.lineno}, in {frame.name}')
            if frame.line:
                lines.append(f"    {frame.line}")
    if isinstance(exc, SyntaxError):
        # Never the offending line itself: a file that is not Python (a symlinked system file) would be shown.
        failed = Path(exc.filename or "<unknown>")
        shown = failed.relative_to(root).as_posix() if failed.is_absolute() and failed.is_relative_to(root) else failed
        lines.append(f'{type(exc).__name__}: {exc.msg} (File "{shown}", line {exc.lineno})')
    else:
        lines.extend(line.rstrip("\n") for line in traceback.format_exception_only(exc))
    return printable("\n".join(lines))


@contextmanager
def progress(err: Console) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr naming the current step; silent off a terminal (CI logs stay clean)."""
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), console=err, transient=True, disable=not err.is_terminal
    ) as bar:
        task = bar.add_task("reading the stack")

        def step(description: str) -> None:
            bar.update(task, description=description)

        yield step


def _missing_config_key(exc: BaseException) -> str | None:
    """The config key a program's ``require``/``require_object`` found missing, or None for any other failure."""
    from pulumi.config import ConfigMissingError  # noqa: PLC0415 - the SDK is loaded by the evaluation already

    return exc.key if isinstance(exc, ConfigMissingError) else None


def preview_command(
    args: argparse.Namespace,
    out: Console,
    err: Console,
    *,
    program: Callable[[], None] | None = None,
    policy_runner: PolicyRunner | None = None,
) -> int:
    """Run ``inferplane preview`` with parsed ``args``; returns the exit code.

    The program is the project's own (the ``main`` of its ``Pulumi.yaml``, run as the ``pulumi`` CLI runs it)
    unless ``program`` is given. A stack with an ``inferplane:platform`` spec is sized first (a refused plan
    evaluates nothing) and checked by the project's policy pack; any other stack previews its resources and outputs.
    Stack-file errors propagate (the CLI maps them to exit 2 with the file and the key).
    """
    project_dir = find_project_dir(Path(args.project_dir) if args.project_dir else None)
    old_plan = None
    if args.against:
        try:
            old_plan = load_plan(Path(args.against))
        except PlanFileError as exc:
            err.print(printable(f"inferplane preview: --against {exc}"), markup=False, highlight=False)
            return EXIT_INVALID
    stack = load_stack_config(project_dir, args.stack)  # reads Pulumi.yaml and the stack file, the only time
    if old_plan is not None and (old_plan.project, old_plan.stack) != (stack.project, stack.name):
        err.print(
            printable(
                f"inferplane preview: --against {args.against} is the plan of project {old_plan.project!r} "
                f"stack {old_plan.stack!r}, not of project {stack.project!r} stack {stack.name!r}: "
                "diff a stack only against an earlier plan of itself"
            ),
            markup=False,
            highlight=False,
        )
        return EXIT_INVALID
    # Destinations are claimed before the evaluation and written only if it ends with a plan; a command that
    # fails leaves no new or half-written file.
    try:
        with OutputFiles() as outputs:
            try:
                for flag, path in (("--json", args.json), ("--markdown", args.markdown)):
                    if path:
                        outputs.claim(flag, path)
            except UnwritableFileError as exc:
                err.print(printable(f"inferplane preview: {exc}"), markup=False, highlight=False)
                return EXIT_INVALID
            return _evaluate(
                args,
                out,
                err,
                stack=stack,
                old_plan=old_plan,
                outputs=outputs,
                program=program or project_program(project_of(stack)),
                policy_runner=policy_runner,
            )
    except UnwritableFileError as exc:
        err.print(printable(f"inferplane preview: {exc}"), markup=False, highlight=False)
        return EXIT_FAILED


def _evaluate(
    args: argparse.Namespace,
    out: Console,
    err: Console,
    *,
    stack: StackConfig,
    old_plan: Plan | None,
    outputs: OutputFiles,
    program: Callable[[], None],
    policy_runner: PolicyRunner | None,
) -> int:
    """Size, evaluate, render and stage the outputs of a stack whose inputs and destinations were checked."""
    project_dir = stack.project_dir
    sizing = size_stack(stack) if isinstance(stack, Stack) else None
    if sizing is not None and not sizing.ok:
        render_platform(out, sizing)
        err.print(f"inferplane preview: the plan of {stack.name} is refused; nothing was evaluated")
        return EXIT_REFUSED
    try:
        runner = policy_runner or (policy_runner_for(project_dir) if sizing is not None else no_policies)
    except PolicySetupError as exc:
        err.print(f"inferplane preview: {exc}", markup=False, highlight=False)
        return EXIT_FAILED
    try:
        with progress(err) as step:
            result: PreviewResult = run_preview(stack, sizing, program=program, policy_runner=runner, on_step=step)
    except Exception as exc:  # the program may raise anything; report it as the CLI would, trimmed
        missing = _missing_config_key(exc)
        if missing is not None:  # a stack file without a key the program requires: bad input, not a crash
            err.print(
                printable(
                    f"{stack.display_file}: {missing}: required by the program and not set "
                    f"(pulumi config set {missing} ... --stack {stack.name})"
                ),
                markup=False,
                highlight=False,
            )
            return EXIT_INVALID
        err.print(format_program_error(exc, project_dir), markup=False, highlight=False)
        return EXIT_FAILED
    plan = result.plan
    diff: PlanDiff = creation_diff(plan) if old_plan is None else diff_plans(old_plan, plan)
    render_preview(
        out,
        plan,
        result.sizing,
        diff=diff if old_plan is not None else None,
        against=args.against,
        notes=result.notes,
    )
    if args.json:
        outputs.publish(args.json, plan.to_json())
    if args.markdown:
        outputs.publish(args.markdown, render_markdown(plan, diff, against=args.against, notes=result.notes))
    if plan.mandatory_violations:
        err.print(f"inferplane preview: {len(plan.mandatory_violations)} mandatory policy violations")
        return EXIT_REFUSED
    return EXIT_OK
