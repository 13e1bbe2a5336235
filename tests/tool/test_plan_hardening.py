"""``inferplane plan`` and ``size`` against hostile input (issue 23): bounded numeric flags, ``--name`` checked
first, a second ``--write-stack`` that reuses its pool, a stack file replaced by rename (never left half-written),
YAML tags every command reads alike, and ``size``'s performance only for sequences and configurations that exist."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.components.capacity import planner
from inferplane.components.capacity.planner import Filters, Plan, Workload
from inferplane.tool import plan as plan_module
from inferplane.tool.cli import main
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from tests.conftest import PROJECT_DIR

PLAN = [
    "plan",
    "--model",
    "llama-3.1-8b",
    "--input-tokens",
    "500",
    "--output-tokens",
    "200",
    "--requests-per-second",
    "0.2",
    "--ttft-p95-ms",
    "3000",
    "--itl-p95-ms",
    "150",
]
"""A workload the dev and staging stacks both take (one small replica)."""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", project / "Pulumi.yaml")
    for stack in (PROJECT_DIR / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(stack, project / "stacks" / stack.name)
    return project


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code if isinstance(exc.code, int) else EXIT_INVALID
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _write(project: Path, stack: str, *extra: str) -> list[str]:
    return [*PLAN, "--write-stack", stack, "--project-dir", str(project), *extra]


def _platform(project: Path, stack: str) -> dict[str, Any]:
    platform: dict[str, Any] = yaml.safe_load((project / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"][
        "inferplane:platform"
    ]
    return platform


# --- numeric flags ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--requests-per-second", "inf", "'inf' is not within 0.001 and 100000 requests per second"),
        ("--requests-per-second", "1e20", "'1e20' is not within 0.001 and 100000 requests per second"),
        ("--requests-per-second", "0", "'0' is not within 0.001 and 100000 requests per second"),
        ("--peak-requests-per-second", "1e308", "'1e308' is not within 0.001 and 100000 requests per second"),
        ("--itl-p95-ms", "inf", "'inf' is not above 0 and at most 60000 ms"),
        ("--ttft-p95-ms", "nan", "'nan' is not above 0 and at most 600000 ms"),
        ("--ttft-p95-ms", "0", "'0' is not above 0 and at most 600000 ms"),
        ("--ttft-p95-ms", "fast", "'fast' is not a number"),
        ("--input-tokens", str(10**9), f"'{10**9}' is not within 1 and 100000000"),
        ("--max-gpus", "65", "'65' is not within 1 and 64"),
        ("--top", "0", "'0' is not within 1 and 1000"),
        ("--queue-timeout-seconds", "0", "'0' is not above 0 and at most 60 s"),
        ("--queue-timeout-seconds", "61", "'61' is not above 0 and at most 60 s"),
    ],
)
def test_numeric_flags_are_finite_and_bounded(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    code, out, err = _run([*PLAN, flag, value], capsys)
    assert code == EXIT_INVALID
    assert f"inferplane plan: error: argument {flag}: {message}" in err
    assert out == "" and "Traceback" not in err


def test_the_bounds_themselves_are_accepted() -> None:
    rate = plan_module.finite(plan_module.MIN_REQUESTS_PER_SECOND, plan_module.MAX_REQUESTS_PER_SECOND, "requests/s")
    assert rate("0.001") == 0.001
    assert rate("100000") == 100_000.0
    latency = plan_module.finite(0, plan_module.MAX_ITL_P95_MS, "ms", above=True)
    assert latency("60000") == 60_000.0
    assert plan_module.MAX_TTFT_P95_MS == 600_000.0  # the spec's own slo bounds
    assert plan_module.whole(64)("64") == 64


def test_json_with_no_candidate_says_why_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run([*PLAN[:-1], "1", "--accelerator", "l4-24gb", "--json"], capsys)
    assert code == EXIT_REFUSED
    assert json.loads(out) == {"candidates": []}
    assert err == "inferplane plan: no configuration fits and meets the objectives; dropped for: itl\n"


# --- --name and --write-stack, checked before the search -----------------------------------------------------------


_SEARCHED: dict[tuple[Workload, Filters], Plan] = {}
"""Each workload and filters' plan, searched once for the module."""


@pytest.fixture(autouse=True)
def searched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's search remembered by its inputs: the tests here check what ``inferplane plan`` does around the
    search (arguments, names, writing the stack file) and mostly plan the same workload (one to five seconds of one
    core each time); the search itself is tests/capacity/test_planner.py's. It is a function of its workload and
    filters alone (both frozen), and its result is frozen, so a remembered plan is the plan."""
    search = planner.plan

    def remembered(workload: Workload, filters: Filters) -> Plan:
        key = (workload, filters)
        if key not in _SEARCHED:
            _SEARCHED[key] = search(workload, filters)
        return _SEARCHED[key]

    monkeypatch.setattr(plan_module, "plan", remembered)


@pytest.fixture
def no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search must not run: every case below is refused on its arguments."""

    def refuse(*_: Any) -> None:
        raise AssertionError("planned before the arguments were checked")

    monkeypatch.setattr(plan_module, "plan", refuse)


@pytest.mark.usefixtures("no_search")
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--name", "Chat 8B!"],
            "inferplane plan: --name 'Chat 8B!': a deployment name is a lower-case RFC 1123 label",
        ),
        (["--name", "-"], "inferplane plan: --name '-': a deployment name is a lower-case RFC 1123 label"),
        (["--name", "llama-8b"], "inferplane plan: --name llama-8b: stacks/Pulumi.dev.yaml already deploys a model"),
        (
            ["--name", "chat", "--queue-timeout-seconds", "5"],
            "inferplane plan: --queue-timeout-seconds: with --write-stack the stack's gateway.admission applies "
            "(stacks/Pulumi.dev.yaml); set it there",
        ),
    ],
)
def test_a_bad_name_is_exit_2_before_planning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    project = _project(tmp_path)
    before = (project / "stacks" / "Pulumi.dev.yaml").read_bytes()
    code, _, err = _run(_write(project, "dev", *extra), capsys)
    assert code == EXIT_INVALID
    assert err.startswith(message), err
    assert (project / "stacks" / "Pulumi.dev.yaml").read_bytes() == before


@pytest.mark.usefixtures("no_search")
def test_name_without_write_stack_and_empty_values_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run([*PLAN, "--name", "chat"], capsys)[2] == (
        "inferplane plan: --name names the deployment --write-stack adds; give --write-stack S too\n"
    )
    project = str(_project(tmp_path))
    for empty in (["--write-stack", ""], ["--write-stack", "dev", "--name", ""]):
        code, _, err = _run([*PLAN, *empty, "--project-dir", project], capsys)
        assert code == EXIT_INVALID
        assert err.startswith(f"inferplane plan: {empty[-2]} ")


def test_a_normalised_name_is_said_and_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    code, _, err = _run(_write(project, "dev", "--name", "Chat_8B"), capsys)
    assert code == EXIT_OK, err
    assert err == "inferplane plan: --name 'Chat_8B' is written as 'chat-8b'\n"
    assert [m["name"] for m in _platform(project, "dev")["models"]] == ["llama-8b", "chat-8b"]


def test_the_default_name_taken_asks_for_a_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    assert _run(_write(project, "staging"), capsys)[0] == EXIT_OK
    code, _, err = _run(_write(project, "staging"), capsys)
    assert code == EXIT_INVALID
    assert err == (
        "inferplane plan: the default name (the model id; give --name) llama-3-1-8b: stacks/Pulumi.staging.yaml "
        "already deploys a model named llama-3-1-8b\n"
    )


def test_a_second_write_reuses_the_pool_the_first_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    code, first, _ = _run(_write(project, "staging", "--name", "chat-a", "--json"), capsys)
    assert code == EXIT_OK
    assert json.loads(first)["written"].startswith("wrote pool plan-")
    pools_after_first = _platform(project, "staging")["pools"]
    code, second, _ = _run(_write(project, "staging", "--name", "chat-b", "--json"), capsys)
    assert code == EXIT_OK
    platform = _platform(project, "staging")
    assert platform["pools"] == pools_after_first  # no second pool
    new_pool = pools_after_first[-1]["name"]
    assert json.loads(second)["written"].startswith(f"wrote model chat-b on the pool {new_pool} to ")
    assert [m["pool"] for m in platform["models"][-2:]] == [new_pool, new_pool]
    assert main(["size", "--stack", "staging", "--project-dir", str(project)]) == EXIT_OK


def test_a_taken_pool_name_on_other_hardware_gets_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.staging.yaml"
    # The team's own pool happens to carry the name plan would pick, on another machine size.
    text = (
        stack_file.read_text()
        .replace("name: l40s\n", "name: plan-g6e-xlarge\n")
        .replace("pool: l40s\n", "pool: plan-g6e-xlarge\n")
    )
    stack_file.write_text(text.replace("instance_type: g6e.xlarge", "instance_type: g6e.2xlarge"))
    argv = _write(project, "staging", "--accelerator", "l40s-48gb", "--json")
    code, out, err = _run([*argv, "--name", "chat-a"], capsys)
    assert code == EXIT_OK, err
    assert json.loads(out)["written"].startswith("wrote pool plan-g6e-xlarge-2 and model chat-a ")
    code, out, _ = _run([*argv, "--name", "chat-b"], capsys)
    assert json.loads(out)["written"].startswith("wrote model chat-b on the pool plan-g6e-xlarge-2 ")
    assert [p["name"] for p in _platform(project, "staging")["pools"]] == [
        "plan-g6e-xlarge",
        "tpu-v5e",
        "plan-g6e-xlarge-2",
    ]


def test_numbered_names_stay_valid() -> None:
    base = "plan-" + "x" * 35
    assert plan_module._unique("plan-a", {"plan-a", "plan-a-2"}) == "plan-a-3"
    assert plan_module._unique(base, {base}) == "plan-" + "x" * 33 + "-2"
    assert plan_module._named_by_plan("plan-" + "x" * 33 + "-2", base)
    assert not plan_module._named_by_plan("plan-a-team", "plan-a")


def test_a_yaml_1_1_boolean_name_is_quoted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    assert _run(_write(project, "staging", "--name", "on"), capsys)[0] == EXIT_OK
    assert '      - name: "on"\n' in (project / "stacks" / "Pulumi.staging.yaml").read_text()
    assert main(["size", "--stack", "staging", "--project-dir", str(project)]) == EXIT_OK


def test_an_edit_that_would_not_read_back_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path)
    before = (project / "stacks" / "Pulumi.staging.yaml").read_bytes()
    monkeypatch.setattr(plan_module, "_yaml_scalar", lambda value: value)  # ruamel.yaml then writes `name: on`
    code, _, err = _run(_write(project, "staging", "--name", "on"), capsys)
    assert code == EXIT_FAILED
    assert err == (
        "inferplane plan: stacks/Pulumi.staging.yaml: the edit would not read back as validated; nothing was written\n"
    )
    assert (project / "stacks" / "Pulumi.staging.yaml").read_bytes() == before


# --- YAML tags: one verdict in every command -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "tag"),
    [
        ("zones: [us-east-1a, us-east-1b]", "zones: !!set {us-east-1a, us-east-1b}", "set"),
        ("      - name: llama-8b\n", "      - name: !!binary bGxhbWEtOGI=\n", "binary"),
    ],
)
def test_yaml_tags_without_a_json_form_get_one_verdict_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, tag: str
) -> None:
    """A set (in no stable order) or bytes cannot be Pulumi config (JSON): size, preview and plan all refuse the
    file, naming the tag, and plan writes nothing."""
    project = _project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    stack_file.write_text(stack_file.read_text().replace(old, new))
    before = stack_file.read_bytes()
    for command in (
        ["size", "--stack", "dev", "--project-dir", str(project)],
        ["preview", "--stack", "dev", "--project-dir", str(project)],
        _write(project, "dev", "--name", "chat"),
    ):
        code, _, err = _run(command, capsys)
        assert code == EXIT_INVALID and f"{tag} values have no JSON form" in err, command
    assert stack_file.read_bytes() == before


@pytest.mark.parametrize(
    "written",
    [
        "created: 2026-01-31",  # PyYAML's safe_load reads a date: the read-back once differed from the stack's text
        "at: 2026-01-31 10:00:00",
        "iso: 2001-12-14t21:59:43.10-05:00",  # ruamel.yaml's own timestamp writes 2001-12-14T21:59:43.100000-05:00
    ],
)
def test_a_date_in_the_tags_is_written_back_as_the_user_wrote_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], written: str
) -> None:
    """``size`` and ``preview`` keep a timestamp-looking value as its text (Pulumi config has no dates); ``plan
    --write-stack`` takes the same stack and leaves that line byte for byte."""
    project = _project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    line = f"      {written}\n"
    team = "      team: ml-platform\n"
    stack_file.write_text(stack_file.read_text().replace(team, team + line))
    assert _run(["size", "--stack", "dev", "--project-dir", str(project)], capsys)[0] == EXIT_OK
    code, _, err = _run(_write(project, "dev", "--name", "chat"), capsys)
    assert (code, err) == (EXIT_OK, "")
    text = stack_file.read_text()
    assert line in text
    key, value = written.split(": ", 1)
    assert _platform(project, "dev")["models"][-1]["name"] == "chat"
    assert plan_module._reread(text)["tags"][key] == value
    assert _run(["size", "--stack", "dev", "--project-dir", str(project)], capsys)[0] == EXIT_OK


# --- the stack file is replaced by rename ----------------------------------------------------------------------


def _stacks(project: Path) -> list[str]:
    return sorted(os.listdir(project / "stacks"))


def _fail(error: BaseException) -> Any:
    def fail(*_: Any, **__: Any) -> None:
        raise error

    return fail


FAILURES = {
    "disk-full": ((os, "fsync"), OSError(errno.ENOSPC, "No space left on device"), EXIT_FAILED,
                  "writing it failed: No space left on device; the file is unchanged"),
    "quota": ((os, "replace"), OSError(errno.EDQUOT, "Disk quota exceeded"), EXIT_FAILED,
              "writing it failed: Disk quota exceeded; the file is unchanged"),
    "folder-denied": ((tempfile, "mkstemp"), PermissionError(errno.EACCES, "Permission denied"),
                      EXIT_INVALID, "cannot write beside it: Permission denied; nothing was written"),
}  # fmt: skip
"""Where a write fails (the function made to raise), the error, the exit code and the message after the file name."""


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_write_leaves_the_stack_file_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    (module, function), error, code, message = FAILURES[failure]
    project = _project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    before, listing = stack_file.read_bytes(), _stacks(project)
    monkeypatch.setattr(module, function, _fail(error))
    result, _, err = _run(_write(project, "dev", "--name", "chat"), capsys)
    assert (result, err) == (code, f"inferplane plan: stacks/Pulumi.dev.yaml: {message}\n")
    assert stack_file.read_bytes() == before
    assert _stacks(project) == listing  # no temporary file left beside it


def test_an_interrupted_write_leaves_the_stack_file_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    before, listing = stack_file.read_bytes(), _stacks(project)
    monkeypatch.setattr(os, "fsync", _fail(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        main(_write(project, "dev", "--name", "chat"))
    assert stack_file.read_bytes() == before
    assert _stacks(project) == listing


@pytest.mark.usefixtures("no_search")
def test_a_read_only_stack_file_is_exit_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    stack_file.chmod(0o444)  # refused by its mode bits, so also when the tests run as root
    before = stack_file.read_bytes()
    code, _, err = _run(_write(project, "dev", "--name", "chat"), capsys)
    assert code == EXIT_INVALID
    assert err == (
        "inferplane plan: --write-stack dev: stacks/Pulumi.dev.yaml: is read-only; nothing was written (make it "
        "writable, or plan without --write-stack)\n"
    )
    assert stack_file.read_bytes() == before


def test_the_written_file_keeps_its_mode_and_its_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    real = tmp_path / "kept" / "dev.yaml"
    real.parent.mkdir()
    shutil.move(project / "stacks" / "Pulumi.dev.yaml", real)
    real.chmod(0o600)
    (project / "stacks" / "Pulumi.dev.yaml").symlink_to(real)
    assert _run(_write(project, "dev", "--name", "chat"), capsys)[0] == EXIT_OK
    assert (project / "stacks" / "Pulumi.dev.yaml").is_symlink()
    assert real.stat().st_mode & 0o777 == 0o600
    assert "      - name: chat\n" in real.read_text()
    assert os.listdir(real.parent) == ["dev.yaml"]


# --- size: sequences that exist, performance only for what fits --------------------------------------------------

SIZE_8B = ["size", "--model", "llama-3.1-8b", "--accelerator", "l4-24gb"]


def test_size_refuses_tokens_beyond_the_context(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run([*SIZE_8B, "--input-tokens", "8000", "--output-tokens", "193"], capsys)
    assert (code, out) == (EXIT_INVALID, "")
    assert err == (
        "inferplane size: --input-tokens 8000 + --output-tokens 193 exceed --context 8192 (at most 131072 for "
        "llama-3.1-8b)\n"
    )
    assert _run([*SIZE_8B, "--input-tokens", "8000", "--output-tokens", "192"], capsys)[0] == EXIT_OK


def test_size_prints_no_performance_for_what_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    refused = ["size", "--model", "llama-3.3-70b", "--accelerator", "h100-80gb", "--gpus", "1"]
    code, out, _ = _run(refused, capsys)
    assert code == EXIT_REFUSED
    assert "refused:" in out and "output tokens/s at saturation" not in out
    code, out, _ = _run([*refused, "--json"], capsys)
    document = json.loads(out)
    assert code == EXIT_REFUSED and document["fits"] is False
    assert "max_output_tokens_per_second" not in document and "single_stream_itl_ms" not in document
    code, out, _ = _run([*SIZE_8B], capsys)
    assert code == EXIT_OK and "output tokens/s at saturation" in out


def test_the_gateways_queue_timeout_is_planned_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A request the gateway holds longer than its queue timeout is refused, so a shorter timeout needs more
    replicas for the same objectives; with --write-stack the stack's own admission is the one planned for."""

    def first(argv: list[str]) -> dict[str, Any]:
        code, out, err = _run([*argv, "--json"], capsys)
        assert code == EXIT_OK, err
        row: dict[str, Any] = json.loads(out)["candidates"][0]
        return row

    patient = first([*PLAN, "--queue-timeout-seconds", "60"])
    default = first(PLAN)
    hasty = first([*PLAN, "--queue-timeout-seconds", "0.5"])
    assert hasty["replica_capacity_rps"] < default["replica_capacity_rps"] <= patient["replica_capacity_rps"]
    assert first([*PLAN, "--queue-timeout-seconds", "2"]) == default  # the spec's default, 2 s
    project = _project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.staging.yaml"
    stack_file.write_text(
        stack_file.read_text(encoding="utf-8").replace(
            "    gateway:\n", "    gateway:\n      admission: {queue_timeout_seconds: 0.5}\n", 1
        ),
        encoding="utf-8",
    )
    assert first(_write(project, "staging", "--name", "chat")) == hasty
