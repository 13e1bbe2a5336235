"""Reading stack files as the pulumi CLI does: namespaced keys, secure values kept secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplane.tool.stackfile import SecretValue, StackFileError, load_stack, read_stack_config, stack_names
from tests.conftest import PROJECT_DIR


def _project(tmp_path: Path, stack_yaml: str) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: inferplane\nruntime: python\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.dev.yaml").write_text(stack_yaml)
    return tmp_path


def test_shipped_stacks_are_found() -> None:
    assert stack_names(PROJECT_DIR) == ["dev", "prod", "staging"]
    stack = load_stack(PROJECT_DIR, "prod")
    assert stack.project == "inferplane"
    assert stack.display_file == "stacks/Pulumi.prod.yaml"
    assert stack.platform.environment == "prod"


def test_secure_values_become_secrets(tmp_path: Path) -> None:
    dev = (PROJECT_DIR / "stacks" / "Pulumi.dev.yaml").read_text()
    project = _project(tmp_path, dev + "  inferplane:hfToken:\n    secure: v1:AAAABBBBCCCC\n")
    config = read_stack_config(project, "dev").config
    token = config["inferplane:hfToken"]
    assert isinstance(token, SecretValue)
    assert str(token) == "[secret]"
    assert "AAAABBBBCCCC" not in repr(token)


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("config: [1, 2]\n", "stacks/Pulumi.dev.yaml: config: must be a mapping"),
        ("config:\n  platform: {}\n",
         "stacks/Pulumi.dev.yaml: platform: config keys are namespaced, e.g. inferplane:platform"),
        ("configs: {}\n", "stacks/Pulumi.dev.yaml: configs: unknown top-level key"),
        ("config:\n  aws:region: us-east-1\n",
         "stacks/Pulumi.dev.yaml: inferplane:platform: a mapping describing the platform is required"),
        ("config: {a: [\n", "stacks/Pulumi.dev.yaml: not valid YAML"),
        (
            "config:\n  aws:region: us-east-1\n  inferplane:platform:\n    environment: {secure: abc}\n",
            "stacks/Pulumi.dev.yaml: inferplane:platform: "
            "secrets do not belong in the platform spec; use their own keys",
        ),
    ],
)  # fmt: skip
def test_malformed_stack_files_name_file_and_key(tmp_path: Path, yaml_text: str, message: str) -> None:
    project = _project(tmp_path, yaml_text)
    with pytest.raises(StackFileError) as caught:
        load_stack(project, "dev")
    assert str(caught.value).startswith(message)


def test_no_project_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from inferplane.tool.stackfile import find_project_dir

    monkeypatch.chdir(tmp_path)
    with pytest.raises(StackFileError, match=r"no Pulumi\.yaml here or in any parent directory"):
        find_project_dir()
