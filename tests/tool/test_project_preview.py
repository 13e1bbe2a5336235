"""``inferplane preview --project-dir`` runs any project's own program (its ``Pulumi.yaml``'s ``main``), as the
``pulumi`` CLI runs it: the consumer example, a project with its own ``components`` package, and the default project,
whose plans stay what ``inferplane.infra.program.main`` gives."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from inferplane.infra.program import main as program_main
from inferplane.tool.cli import build_parser
from inferplane.tool.cli import main as cli_main
from inferplane.tool.exitcodes import EXIT_INVALID, EXIT_OK
from inferplane.tool.mockengine import SECRET_PLACEHOLDER
from inferplane.tool.preview.command import preview_command
from inferplane.tool.preview.engine import evaluation_config, run_preview, size_stack
from inferplane.tool.preview.model import Cost, Plan
from inferplane.tool.preview.project import config_declarations, project_main, project_program
from inferplane.tool.stackfile import (
    Stack,
    StackConfig,
    StackFileError,
    load_stack,
    load_stack_config,
    read_project,
)
from tests.conftest import PROJECT_DIR

EXAMPLE = PROJECT_DIR / "examples" / "custom-platform"


def preview(argv: list[str]) -> tuple[int, str, str]:
    """``inferplane preview ...`` in this process with the project's own program; (exit code, stdout, stderr)."""
    out = Console(file=io.StringIO(), width=200, force_terminal=False)
    err = Console(file=io.StringIO(), width=200, force_terminal=False)
    code = preview_command(build_parser().parse_args(argv), out, err)
    return code, out.file.getvalue(), err.file.getvalue()  # type: ignore[attr-defined]


def write_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


# --- the consumer example ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, str]:
    plan_file = tmp_path_factory.mktemp("example") / "plan.json"
    code, stdout, stderr = preview(
        ["preview", "--project-dir", str(EXAMPLE), "--stack", "dev", "--json", str(plan_file)]
    )
    assert code == EXIT_OK, stderr
    return Plan.model_validate_json(plan_file.read_text(encoding="utf-8")), stdout


def test_the_example_previews_its_own_program(example_plan: tuple[Plan, str]) -> None:
    plan, _ = example_plan
    assert (plan.project, plan.stack) == ("custom-platform", "dev")
    components = sorted((r.type, r.name) for r in plan.resources if r.type.startswith("inferplane:index:"))
    assert components == [
        ("inferplane:index:EksCluster", "eks"),
        ("inferplane:index:GpuNodeGroup", "gpu"),
        ("inferplane:index:Keda", "keda"),
        ("inferplane:index:MonitoringStack", "monitoring"),
        ("inferplane:index:Network", "network"),
        ("inferplane:index:NodeAddons", "node-addons"),
        ("inferplane:index:QueueDepthAutoscaler", "chat-autoscaler"),
        ("inferplane:index:VllmService", "chat"),
    ]
    assert len(plan.resources) == 85  # with the baseline: VPC flow logs, encrypted log groups and their keys
    assert plan.outputs == {
        "clusterName": "custom-platform-dev",
        "hourlyUsdMax": 3.722,
        "modelService": "chat",
        "tensorParallelSize": 1,
    }


def test_the_example_wires_the_components_together(example_plan: tuple[Plan, str]) -> None:
    plan, _ = example_plan
    by_name = {r.name: r for r in plan.resources}
    nodes = by_name["gpu-nodes"].inputs
    assert nodes["clusterName"] == "custom-platform-dev"
    assert nodes["scalingConfig"] == {"desiredSize": 1, "maxSize": 2, "minSize": 1}
    scaled = by_name["chat-autoscaler-scaledobject"].inputs
    assert scaled["spec"]["scaleTargetRef"]["name"] == "chat"
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 2)
    secret = by_name["hf-token"].inputs
    assert secret["stringData"] == SECRET_PLACEHOLDER  # the whole map is secret, as the engine shows it
    container = by_name["chat-deployment"].inputs["spec"]["template"]["spec"]["containers"][0]
    assert "--kv-cache-dtype" in container["args"]


def test_a_stack_without_a_platform_spec_has_no_sizing_cost_or_policies(example_plan: tuple[Plan, str]) -> None:
    plan, stdout = example_plan
    assert plan.sizing == {}
    assert plan.cost == Cost.unknown()
    assert (plan.policies, plan.violations) == ((), ())
    assert "note: Pulumi.dev.yaml has no inferplane:platform spec" in stdout
    assert "note: custom-platform:hfToken is not set in Pulumi.dev.yaml" in stdout
    assert "│ tensorParallelSize │ 1" in stdout
    assert "Cost (on-demand" not in stdout


def test_the_example_previews_through_the_installed_command(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    command = [str(Path(sys.executable).parent / "inferplane"), "preview", "--project-dir", str(EXAMPLE)]
    result = subprocess.run(
        [*command, "--stack", "dev", "--json", str(plan_file)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == EXIT_OK, result.stderr
    assert json.loads(plan_file.read_text())["outputs"]["clusterName"] == "custom-platform-dev"


def test_the_example_pins_the_library_to_this_minor_series() -> None:
    version = yaml.safe_load((PROJECT_DIR / "CHANGELOG.md").read_text().split("## [")[2].split("]")[0])
    major, minor, _ = str(version).split(".")
    requirement = (EXAMPLE / "requirements.txt").read_text().split("\n")
    assert f"inferplane>={major}.{minor},<{major}.{int(minor) + 1}" in requirement


# --- any project ---------------------------------------------------------------------------------------------------

CONSUMER_MAIN = """
import pulumi
from components.naming import prefixed
from inferplane.components import Network, NetworkArgs

network = Network(prefixed("net"), NetworkArgs(cluster_name=prefixed("eks"), zones=["us-west-2a", "us-west-2b"]))
pulumi.export("vpc", network.vpc.id)
pulumi.export("owner", pulumi.Config().require("owner"))
pulumi.export("token", pulumi.Config().require_secret("token"))
"""


def consumer(root: Path, prefix: str) -> Path:
    """A project with its own ``components`` package, ``main: src/``, and declared config."""
    return write_project(
        root,
        {
            "Pulumi.yaml": yaml.safe_dump(
                {
                    "name": "consumer",
                    "runtime": "python",
                    "main": "src/",
                    "config": {"owner": {"type": "string", "default": "platform"}, "token": {"secret": True}},
                }
            ),
            "Pulumi.test.yaml": yaml.safe_dump({"config": {"aws:region": "us-west-2"}}),
            "src/__main__.py": CONSUMER_MAIN,
            "src/components/__init__.py": "",
            "src/components/naming.py": f"def prefixed(name: str) -> str:\n    return '{prefix}-' + name\n",
        },
    )


def test_a_project_with_its_own_components_package_previews(tmp_path: Path) -> None:
    first = consumer(tmp_path / "first", "alpha")
    second = consumer(tmp_path / "second", "beta")
    plans = {}
    for project in (first, second):
        stack = load_stack_config(project, "test")
        assert type(stack) is StackConfig
        plans[project.name] = run_preview(stack, None).plan
    assert (
        "urn:pulumi:test::consumer::pulumi:pulumi:Stack$inferplane:index:Network::alpha-net" in plans["first"].by_urn()
    )
    assert (
        "urn:pulumi:test::consumer::pulumi:pulumi:Stack$inferplane:index:Network::beta-net" in plans["second"].by_urn()
    )
    assert plans["first"].outputs["owner"] == "platform"
    assert plans["first"].outputs["token"] == SECRET_PLACEHOLDER
    assert "components" not in sys.modules


def test_declared_config_fills_defaults_and_secret_placeholders(tmp_path: Path) -> None:
    project = consumer(tmp_path, "x")
    declared = config_declarations(read_project(project))
    assert declared.defaults == {"consumer:owner": "platform"}
    assert declared.secrets == ("consumer:token",)
    config = evaluation_config(load_stack_config(project, "test"))
    assert dict(config.values) == {
        "aws:region": "us-west-2",
        "consumer:owner": "platform",
        "consumer:token": SECRET_PLACEHOLDER,
    }
    assert config.secret_keys == ("consumer:token",)
    assert config.notes == (
        "consumer:token is not set in Pulumi.test.yaml; a [secret] placeholder stands in for it "
        "(set it with: pulumi config set --secret consumer:token ... --stack test)",
    )


def test_the_main_is_the_projects_and_must_be_runnable(tmp_path: Path) -> None:
    project = consumer(tmp_path, "x")
    assert project_main(read_project(project)) == (project / "src").resolve()
    assert project_main(read_project(PROJECT_DIR)) == PROJECT_DIR / "infra"
    (project / "src" / "__main__.py").unlink()
    with pytest.raises(StackFileError, match=r"Pulumi.yaml: main: src/ has no __main__.py to run"):
        project_main(read_project(project))


def test_a_project_whose_main_cannot_run_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = consumer(tmp_path, "x")
    (project / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "consumer", "runtime": "python", "main": "gone/"}))
    code = cli_main(["preview", "--project-dir", str(project), "--stack", "test"])
    assert code == EXIT_INVALID
    assert "Pulumi.yaml: main: gone/ does not exist" in capsys.readouterr().err


# --- the default project -------------------------------------------------------------------------------------------


def test_the_default_project_runs_infra_main_with_the_same_plan() -> None:
    stack = load_stack(PROJECT_DIR, "dev")
    assert isinstance(load_stack_config(PROJECT_DIR, "dev"), Stack)
    own: dict[str, Any] = json.loads(run_preview(stack, size_stack(stack)).plan.to_json())
    direct: dict[str, Any] = json.loads(run_preview(stack, size_stack(stack), program=program_main).plan.to_json())
    assert own == direct
    assert len(own["resources"]) > 100
    program = project_program(read_project(PROJECT_DIR))
    assert callable(program)
