"""One command reads ``Pulumi.yaml`` once and its stack file once, then passes the parsed project and stack down.

Every read of either file goes through :func:`inferplane.tool.files.read_regular_file` as ``inferplane.tool.stackfile``
imports it; the spy counts its calls per file while one command runs in this process.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from inferplane.tool import stackfile
from inferplane.tool.cli import main as cli_main
from inferplane.tool.exitcodes import EXIT_OK
from inferplane.tool.files import read_regular_file
from inferplane.tool.preview.engine import evaluation_config
from tests.conftest import PROJECT_DIR

EXAMPLE = PROJECT_DIR / "examples" / "custom-platform"
PLAN = [
    "plan",
    "--model",
    "llama-3.1-8b",
    "--input-tokens",
    "500",
    "--output-tokens",
    "200",
    "--requests-per-second",
    "2",
    "--ttft-p95-ms",
    "2000",
    "--itl-p95-ms",
    "100",
]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """Reads of each file (resolved path) by ``inferplane.tool.stackfile`` from now on."""
    counts: Counter[Path] = Counter()

    def spy(path: Path, limit: int) -> str:
        counts[Path(path).resolve()] += 1
        return read_regular_file(path, limit)

    monkeypatch.setattr(stackfile, "read_regular_file", spy)
    return counts


def test_one_preview_reads_the_project_and_the_stack_file_once(reads: Counter[Path], tmp_path: Path) -> None:
    # The whole command, as the console script runs it: the stack, sizing, the real program, the policy pack.
    argv = ["preview", "--stack", "dev", "--project-dir", str(PROJECT_DIR), "--json", str(tmp_path / "dev.json")]
    assert cli_main(argv) == EXIT_OK
    assert reads == {PROJECT_DIR / "Pulumi.yaml": 1, PROJECT_DIR / "stacks" / "Pulumi.dev.yaml": 1}


def test_a_projects_own_program_reads_them_once_too(reads: Counter[Path], tmp_path: Path) -> None:
    # No platform spec: the project's main and its config declarations come from the one Pulumi.yaml read.
    argv = ["preview", "--project-dir", str(EXAMPLE), "--stack", "dev", "--json", str(tmp_path / "example.json")]
    assert cli_main(argv) == EXIT_OK
    assert reads == {EXAMPLE / "Pulumi.yaml": 1, EXAMPLE / "Pulumi.dev.yaml": 1}


def test_size_reads_them_once(reads: Counter[Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["size", "--stack", "dev", "--project-dir", str(PROJECT_DIR), "--json"]) == EXIT_OK
    capsys.readouterr()
    assert reads == {PROJECT_DIR / "Pulumi.yaml": 1, PROJECT_DIR / "stacks" / "Pulumi.dev.yaml": 1}


def test_plan_write_stack_reads_them_once_and_edits_the_text_it_read(
    reads: Counter[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(PROJECT_DIR / "stacks", tmp_path / "stacks")
    stack_file = tmp_path / "stacks" / "Pulumi.staging.yaml"
    read_as_text: list[Path] = []
    real_read_text = Path.read_text

    def read_text(self: Path, encoding: str | None = None, errors: str | None = None) -> str:
        read_as_text.append(self.resolve())
        return real_read_text(self, encoding=encoding, errors=errors)

    argv = [*PLAN, "--write-stack", "staging", "--project-dir", str(tmp_path), "--name", "chat-8b"]
    with monkeypatch.context() as patch:
        patch.setattr(Path, "read_text", read_text)
        assert cli_main(argv) == EXIT_OK
    assert "wrote pool plan-" in capsys.readouterr().out
    assert reads == {tmp_path.resolve() / "Pulumi.yaml": 1, stack_file.resolve(): 1}
    assert stack_file.resolve() not in read_as_text  # the edit starts from the text load_stack read
    assert "      - name: chat-8b" in stack_file.read_text(encoding="utf-8")


def test_a_stack_built_by_hand_reads_its_project_when_asked(reads: Counter[Path]) -> None:
    from inferplane.tool.stackfile import load_stack, project_of, read_project

    loaded = load_stack(PROJECT_DIR, "dev")
    assert project_of(loaded) is loaded.project_file
    reads.clear()
    by_hand = replace(loaded, project_file=None, source=None)
    assert by_hand == loaded  # what was read along is no part of the stack's identity
    assert project_of(by_hand) == read_project(PROJECT_DIR)
    assert evaluation_config(by_hand) == evaluation_config(loaded)
    # By hand, each ask reads Pulumi.yaml (project_of, read_project, evaluation_config); the stack file never.
    assert reads == {PROJECT_DIR / "Pulumi.yaml": 3}
