"""The offline preview: evaluation as the CLI would, canonical plans, diffs with replacements, secrets, exit codes."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from inferplane.components.serving.annotations import (
    GATEWAY_PROVIDERS,
    GatewayProvider,
    gateway_providers_annotation,
)
from inferplane.tool.cli import build_parser
from inferplane.tool.cli import main as cli_main
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.preview.command import preview_command
from inferplane.tool.preview.diff import diff_plans, diff_values, format_path
from inferplane.tool.preview.engine import evaluation_config, run_preview, size_stack
from inferplane.tool.preview.markdown import mermaid_diagram, render_markdown
from inferplane.tool.preview.model import Enforcement, Plan, PlanResource, PolicyInfo, Violation, load_plan
from inferplane.tool.preview.policy import PolicyReport, PolicyRunner, PolicySetupError, no_policies, policy_runner_for
from inferplane.tool.preview.replace_rules import effect_of
from inferplane.tool.stackfile import Stack, load_stack, stack_names
from tests.conftest import PROJECT_DIR
from tests.preview_fixture import program as fixture_program

CIPHERTEXT = "v1:Q2lwaGVydGV4dE5ldmVyU2hvd24=:AAAABBBBCCCCDDDD"
SHIPPED_STACKS = stack_names(PROJECT_DIR)


# --- helpers ---------------------------------------------------------------------------------------------------


def make_project(tmp_path: Path, stacks: dict[str, dict[str, Any]] | None = None) -> Path:
    """A project directory with the repository's Pulumi.yaml and stacks, plus any stacks given."""
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copytree(PROJECT_DIR / "stacks", tmp_path / "stacks")
    for name, document in (stacks or {}).items():
        (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    return tmp_path


def shipped(stack: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((PROJECT_DIR / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return document


def run_cli(
    argv: list[str],
    *,
    program: Callable[[], None] = fixture_program,
    policy_runner: PolicyRunner | None = None,
) -> tuple[int, str, str]:
    """``inferplane preview ...`` with the fixture program; (exit code, stdout, stderr)."""
    if policy_runner is None and program is fixture_program:
        # The fixture is a deliberately bare toy that the pack rightly refuses; the pack is exercised through the
        # real program in the tests that pass ``program=``.
        policy_runner = no_policies
    out = Console(file=io.StringIO(), width=200, force_terminal=False)
    err = Console(file=io.StringIO(), width=200, force_terminal=False)
    args = build_parser().parse_args(argv)
    code = preview_command(args, out, err, program=program, policy_runner=policy_runner)
    stdout = out.file.getvalue()  # type: ignore[attr-defined]
    stderr = err.file.getvalue()  # type: ignore[attr-defined]
    return code, stdout, stderr


def fixture_plan(project: Path, stack: str) -> Plan:
    loaded = load_stack(project, stack)
    return run_preview(loaded, size_stack(loaded), program=fixture_program).plan


def with_platform(stack: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document = shipped(stack)
    change(document["config"]["inferplane:platform"])
    return document


# --- evaluation ------------------------------------------------------------------------------------------------


def test_config_is_set_as_the_cli_sets_it_with_secret_placeholders(tmp_path: Path) -> None:
    document = shipped("dev")
    document["config"]["inferplane:hfToken"] = {"secure": CIPHERTEXT}
    document["config"]["inferplane:extra"] = {"nested": [{"secure": CIPHERTEXT}, "plain"]}
    project = make_project(tmp_path, {"sec": document})

    config = evaluation_config(load_stack(project, "sec"))

    assert config.values["aws:region"] == "us-east-1"
    assert config.values["inferplane:hfToken"] == "[secret]"
    assert config.values["inferplane:extra"] == {"nested": ["[secret]", "plain"]}
    assert config.values["inferplane:platform"]["environment"] == "dev"
    assert config.secret_keys == ("inferplane:extra", "inferplane:hfToken")
    assert config.notes == ()
    assert CIPHERTEXT not in json.dumps(config.values)


def test_a_program_secret_the_stack_lacks_gets_a_placeholder_and_a_note() -> None:
    config = evaluation_config(load_stack(PROJECT_DIR, "dev"))
    assert config.values["inferplane:hfToken"] == "[secret]"
    assert config.secret_keys == ("inferplane:hfToken",)
    assert config.notes == (
        "inferplane:hfToken is not set in stacks/Pulumi.dev.yaml; a [secret] placeholder stands in for it "
        "(set it with: pulumi config set --secret inferplane:hfToken ... --stack dev)",
    )


def test_the_plan_records_every_resource_in_tree_order_with_inputs() -> None:
    plan = fixture_plan(PROJECT_DIR, "dev")

    stack_urn = "urn:pulumi:dev::inferplane::pulumi:pulumi:Stack::inferplane-dev"
    assert plan.project == "inferplane" and plan.stack == "dev"
    assert [(r.type, r.name) for r in plan.resources] == [
        ("aws:eks/cluster:Cluster", "dev-cluster"),
        ("inferplane:index:Gateway", "gateway"),
        ("kubernetes:core/v1:ConfigMap", "gateway-routes"),
        ("inferplane:index:GpuNodeGroup", "l4-spot"),
        ("aws:ec2/launchTemplate:LaunchTemplate", "l4-spot-lt"),
        ("aws:eks/nodeGroup:NodeGroup", "l4-spot-ng"),
        ("aws:iam/role:Role", "l4-spot-role"),
        ("inferplane:index:VllmService", "llama-8b"),
        ("kubernetes:apps/v1:Deployment", "llama-8b"),
        ("kubernetes:core/v1:Secret", "llama-8b-token"),
    ]
    by_name = {r.name: r for r in plan.resources if r.type != "kubernetes:apps/v1:Deployment"}
    pool, node_group = by_name["l4-spot"], by_name["l4-spot-ng"]
    assert pool.parent == stack_urn and node_group.parent == pool.urn
    assert (
        node_group.urn
        == "urn:pulumi:dev::inferplane::inferplane:index:GpuNodeGroup$aws:eks/nodeGroup:NodeGroup::l4-spot-ng"
    )
    assert node_group.inputs["instanceTypes"] == ["g6.2xlarge"]
    assert node_group.inputs["capacityType"] == "SPOT"
    assert node_group.inputs["scalingConfig"] == {"desiredSize": 0, "maxSize": 1, "minSize": 0}
    assert node_group.inputs["nodeRoleArn"] == "arn:aws:iam::123456789012:role/l4-spot-role"
    assert node_group.dependencies == tuple(
        sorted([by_name["l4-spot-lt"].urn, by_name["l4-spot-role"].urn, by_name["dev-cluster"].urn])
    )
    assert by_name["dev-cluster"].protect is False
    assert (
        fixture_plan(PROJECT_DIR, "prod")
        .by_urn()["urn:pulumi:prod::inferplane::pulumi:pulumi:Stack$aws:eks/cluster:Cluster::prod-cluster"]
        .protect
    )
    assert plan.outputs["endpoint"].endswith(".gr7.us-east-1.eks.amazonaws.com")
    assert plan.cost.hourly_max == 0.9776 and plan.cost.monthly_max == 713.65
    assert plan.sizing["deployments"][0]["name"] == "llama-8b"
    assert plan.policies == () and plan.violations == ()


def test_stacks_evaluated_in_one_process_do_not_leak_into_each_other() -> None:
    alone = fixture_plan(PROJECT_DIR, "dev").to_json()
    prod = fixture_plan(PROJECT_DIR, "prod")
    after_prod = fixture_plan(PROJECT_DIR, "dev")

    assert after_prod.to_json() == alone
    assert not any("prod" in r.urn for r in after_prod.resources)
    assert {r.name for r in prod.resources} >= {"llama-70b", "h100-ng"}
    assert not {r.name for r in after_prod.resources} & {"llama-70b", "h100-ng", "prod-cluster"}


# --- the plan file ---------------------------------------------------------------------------------------------


def _previewed_twice(stack: str, tmp_path: Path) -> Plan:
    """``stack`` previewed twice in this process with the real program: the same bytes (no state carried over)."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert cli_main(["preview", "--stack", stack, "--project-dir", str(PROJECT_DIR), "--json", str(first)]) == 0
    assert cli_main(["preview", "--stack", stack, "--project-dir", str(PROJECT_DIR), "--json", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()
    plan = load_plan(first)
    assert plan.stack == stack and plan.project == "inferplane"
    assert plan.outputs["environment"] == shipped(stack)["config"]["inferplane:platform"]["environment"]
    return plan


@pytest.mark.parametrize("stack", [s for s in SHIPPED_STACKS if s != "prod"])
def test_every_shipped_stack_previews_with_the_real_program_byte_identically(stack: str, tmp_path: Path) -> None:
    """prod's is :func:`test_the_plan_file_is_byte_identical_across_processes`, against another process too."""
    _previewed_twice(stack, tmp_path)


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_stack_previews_with_the_fixture_program(stack: str, tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    code, stdout, _ = run_cli(["preview", "--stack", stack, "--project-dir", str(PROJECT_DIR), "--json", str(path)])
    assert code == EXIT_OK
    assert f"+ pulumi:pulumi:Stack inferplane-{stack}" in stdout
    assert "+ inferplane:index:GpuNodeGroup" in stdout
    assert "Sizing" in stdout and "Pools" in stdout
    assert load_plan(path).to_json() == path.read_text()


def test_the_plan_file_is_byte_identical_across_processes(tmp_path: Path) -> None:
    """prod previewed twice here and once in an interpreter with another hash seed: the same bytes (no hash(), no
    addresses, no time, no state carried over), for the real program with the policy pack's verdicts."""
    _previewed_twice("prod", tmp_path)
    ours = os.environ.get("PYTHONHASHSEED", "random")
    # Unset or "random": this process's seed is random, so 0 (no randomization) differs; a fixed one gets its next.
    seed = "0" if not ours.isdigit() else str((int(ours) + 1) % 4294967296)
    other = tmp_path / "other.json"
    script = "import sys; from inferplane.tool.cli import main; sys.exit(main(sys.argv[1:]))"
    args = ["preview", "--stack", "prod", "--project-dir", str(PROJECT_DIR), "--json", str(other)]
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(PROJECT_DIR)}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=tmp_path, env=env, capture_output=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    files = [(tmp_path / "first.json").read_bytes(), other.read_bytes()]
    assert files[0] == files[1]
    document = json.loads(files[0])
    assert list(document) == sorted(document)
    assert set(document) == {"project", "stack", "resources", "outputs", "sizing", "cost", "policies", "violations"}
    assert set(document["resources"][0]) == {
        "urn",
        "type",
        "name",
        "parent",
        "provider",
        "inputs",
        "dependencies",
        "protect",
    }


# --- diff ------------------------------------------------------------------------------------------------------


def test_a_plan_diffed_against_itself_reports_no_change(tmp_path: Path) -> None:
    plan_file = tmp_path / "prod.json"
    code, _, _ = run_cli(["preview", "--stack", "prod", "--json", str(plan_file)])
    assert code == EXIT_OK
    code, stdout, _ = run_cli(["preview", "--stack", "prod", "--against", str(plan_file)])

    assert code == EXIT_OK
    assert "no changes" in stdout
    assert "Resources: 0 to create, 0 to update, 0 to replace, 0 to delete, 17 unchanged" in stdout
    plan = load_plan(plan_file)
    assert not diff_plans(plan, plan).has_changes


def test_diff_reports_added_removed_nested_and_replaced_resources(tmp_path: Path) -> None:
    def change(platform: dict[str, Any]) -> None:
        platform["models"][1]["name"] = "llama-8b-v2"  # removes llama-8b, adds llama-8b-v2
        platform["models"][0]["max_replicas"] = 9  # (9 + 3 prefill) x 4 GPUs: h100 max nodes 4 -> 6, a nested update
        platform["pools"][1]["instance_type"] = "g6e.2xlarge"  # ForceNew: the l40s node group is replaced
        platform["gateway"]["tiers"][1]["models"] = ["llama-8b-v2"]
        platform["gateway"]["tiers"][0]["fallback"] = ["llama-8b-v2"]
        platform["limits"]["max_total_gpus"] = 64
        platform["limits"]["max_hourly_cost_usd"] = 400

    project = make_project(tmp_path, {"next": with_platform("prod", change), "base": shipped("prod")})
    old, new = fixture_plan(project, "base"), fixture_plan(project, "next")
    # Same stack name in the URNs, as a pull request's head and base would have.
    old = Plan.model_validate_json(old.to_json().replace(":base::", ":next::").replace("-base", "-next"))
    old = old.model_copy(update={"stack": "next"})
    diff = diff_plans(old, new)

    ops = {(c.op, c.type, c.name) for c in diff.changes}
    assert ("create", "inferplane:index:VllmService", "llama-8b-v2") in ops
    assert ("create", "kubernetes:core/v1:Secret", "llama-8b-v2-token") in ops
    assert ("delete", "inferplane:index:VllmService", "llama-8b") in ops
    assert ("delete", "kubernetes:apps/v1:Deployment", "llama-8b") in ops
    by_name = {c.name: c for c in diff.changes if c.op in ("update", "replace")}

    h100 = by_name["h100-ng"]
    assert h100.op == "update"
    assert [(p.path, p.kind, p.old, p.new, p.effect) for p in h100.changes] == [
        ("scalingConfig.maxSize", "update", 4, 6, "update")
    ]
    l40s = by_name["l40s-ng"]
    assert l40s.op == "replace"
    assert [(p.path, p.old, p.new, p.effect) for p in l40s.changes] == [
        ("instanceTypes[0]", "g6e.xlarge", "g6e.2xlarge", "replace")
    ]
    assert l40s.changes[0].reason == "instanceTypes: ForceNew in the Terraform schema the provider is bridged from"
    routes = by_name["gateway-routes"]
    assert [(p.path, p.kind) for p in routes.changes] == [
        ('data["llama-8b"]', "delete"),
        ('data["llama-8b-v2"]', "add"),
        ("(dependsOn)", "update"),
    ]
    assert diff.count("create") == 3 and diff.count("delete") == 3 and diff.count("replace") == 1
    assert diff.old_cost.hourly_max != diff.new_cost.hourly_max

    code, stdout, _ = run_cli(
        ["preview", "--stack", "next", "--project-dir", str(project), "--against", str(_write(tmp_path, old))]
    )
    assert code == EXIT_OK
    assert "+- aws:eks/nodeGroup:NodeGroup l40s-ng (replace)" in stdout
    assert '~ instanceTypes[0]: "g6e.xlarge" => "g6e.2xlarge"  [replaces: instanceTypes: ForceNew' in stdout
    assert "~ scalingConfig.maxSize: 4 => 6" in stdout
    assert "- inferplane:index:VllmService llama-8b (delete)" in stdout
    assert "Resources: 3 to create, 2 to update, 1 to replace, 3 to delete, 11 unchanged" in stdout


def _write(tmp_path: Path, plan: Plan) -> Path:
    path = tmp_path / "old.json"
    path.write_text(plan.to_json(), encoding="utf-8")
    return path


def _resource(type_token: str, inputs: dict[str, Any], **fields: Any) -> PlanResource:
    return PlanResource(
        urn=f"urn:pulumi:s::p::{type_token}::r",
        type=type_token,
        name="r",
        parent="urn:pulumi:s::p::pulumi:pulumi:Stack::p-s",
        provider=fields.get("provider", ""),
        inputs=inputs,
        dependencies=(),
        protect=fields.get("protect", False),
    )


def _one_change_plan(base: Plan, resource: PlanResource) -> Plan:
    return base.model_copy(update={"resources": (resource,)})


@pytest.mark.parametrize(
    ("type_token", "old", "new", "op", "effect"),
    [
        (
            "aws:eks/nodeGroup:NodeGroup",
            {"amiType": "AL2023_x86_64_NVIDIA"},
            {"amiType": "BOTTLEROCKET_x86_64_NVIDIA"},
            "replace",
            "replace",
        ),
        (
            "aws:eks/nodeGroup:NodeGroup",
            {"launchTemplate": {"id": "lt-1", "version": "1"}},
            {"launchTemplate": {"id": "lt-2", "version": "1"}},
            "replace",
            "replace",
        ),
        (
            "aws:eks/nodeGroup:NodeGroup",
            {"launchTemplate": {"id": "lt-1", "version": "1"}},
            {"launchTemplate": {"id": "lt-1", "version": "2"}},
            "update",
            "roll",
        ),
        ("aws:eks/nodeGroup:NodeGroup", {"labels": {"a": "1"}}, {"labels": {"a": "2"}}, "update", "update"),
        ("aws:ec2/launchTemplate:LaunchTemplate", {"userData": "a"}, {"userData": "b"}, "update", "roll"),
        ("aws:eks/cluster:Cluster", {"name": "a"}, {"name": "b"}, "replace", "replace"),
        ("aws:eks/cluster:Cluster", {"encryptionConfig": {"resources": ["secrets"]}}, {}, "replace", "replace"),
        ("aws:eks/cluster:Cluster", {}, {"encryptionConfig": {"resources": ["secrets"]}}, "update", "update"),
        (
            "kubernetes:apps/v1:Deployment",
            {"spec": {"template": {"x": 1}}},
            {"spec": {"template": {"x": 2}}},
            "update",
            "roll",
        ),
        (
            "kubernetes:keda.sh/v1alpha1:ScaledObject",
            {"metadata": {"name": "a"}},
            {"metadata": {"name": "b"}},
            "replace",
            "replace",
        ),
        ("inferplane:index:VllmService", {"name": "a"}, {"name": "b"}, "update", "update"),
    ],
)
def test_replace_rules_decide_the_operation(
    type_token: str, old: dict[str, Any], new: dict[str, Any], op: str, effect: str
) -> None:
    base = fixture_plan(PROJECT_DIR, "dev")
    diff = diff_plans(
        _one_change_plan(base, _resource(type_token, old)), _one_change_plan(base, _resource(type_token, new))
    )
    assert [c.op for c in diff.changes] == [op]
    assert [c.effect for c in diff.changes[0].changes] == [effect]


def test_a_provider_change_replaces_and_protect_is_an_update() -> None:
    base = fixture_plan(PROJECT_DIR, "dev")
    old = _resource("aws:iam/role:Role", {"tags": {}})
    moved = _resource("aws:iam/role:Role", {"tags": {}}, provider="urn:pulumi:s::p::pulumi:providers:aws::west::id")
    protected = _resource("aws:iam/role:Role", {"tags": {}}, protect=True)
    moved_diff = diff_plans(_one_change_plan(base, old), _one_change_plan(base, moved))
    protect_diff = diff_plans(_one_change_plan(base, old), _one_change_plan(base, protected))
    assert [(c.op, [p.path for p in c.changes]) for c in moved_diff.changes] == [("replace", ["(provider)"])]
    assert [(c.op, [p.path for p in c.changes]) for c in protect_diff.changes] == [("update", ["(protect)"])]


def test_paths_name_nested_fields_list_items_and_odd_keys() -> None:
    assert (
        format_path(("spec", "template", "spec", "containers", 0, "image")) == "spec.template.spec.containers[0].image"
    )
    assert format_path(("tags", "kubernetes.io/cluster")) == 'tags["kubernetes.io/cluster"]'
    assert diff_values({"a": [1, 2]}, {"a": [1]}) == [("a[1]", "delete", 2, None)]
    assert diff_values({"a": 1}, {"a": 1.5}) == [("a", "update", 1, 1.5)]
    assert effect_of("aws:eks/nodeGroup:NodeGroup", "launchTemplate", "add") == (
        "replace",
        "launchTemplate.id: ForceNew in the Terraform schema the provider is bridged from",
    )


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=12,
)


@given(old=_json, new=_json)
def test_values_differ_exactly_when_the_diff_is_not_empty(old: Any, new: Any) -> None:
    assert (diff_values(old, new) == []) == (json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True))
    assert diff_values(old, old) == []


# --- secrets ---------------------------------------------------------------------------------------------------


def test_secrets_never_appear_in_the_plan_the_comment_or_stdout(tmp_path: Path) -> None:
    document = shipped("dev")
    document["config"]["inferplane:hfToken"] = {"secure": CIPHERTEXT}
    project = make_project(tmp_path, {"sec": document})
    plan_file, comment = tmp_path / "plan.json", tmp_path / "comment.md"

    code, stdout, stderr = run_cli(
        [
            "preview",
            "--stack",
            "sec",
            "--project-dir",
            str(project),
            "--json",
            str(plan_file),
            "--markdown",
            str(comment),
        ]
    )

    assert code == EXIT_OK
    texts = {"json": plan_file.read_text(), "markdown": comment.read_text(), "stdout": stdout, "stderr": stderr}
    for where, text in texts.items():
        assert CIPHERTEXT not in text, where
        assert "Q2lwaGVydGV4dE5ldmVyU2hvd24" not in text, where
    plan = load_plan(plan_file)
    secret = next(r for r in plan.resources if r.type == "kubernetes:core/v1:Secret")
    assert secret.inputs["stringData"] == "[secret]"
    assert plan.outputs["token"] == "[secret]"
    assert "note:" not in stdout  # the stack has the secret: no placeholder note


# --- exit codes ------------------------------------------------------------------------------------------------


def test_an_invalid_stack_file_exits_2_naming_the_file_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_region = shipped("dev")
    del no_region["config"]["aws:region"]
    bad_pool = with_platform("dev", lambda p: p["models"][0].update(pool="nowhere"))
    project = make_project(tmp_path, {"noregion": no_region, "badpool": bad_pool})

    assert cli_main(["preview", "--stack", "noregion", "--project-dir", str(project)]) == EXIT_INVALID
    assert "stacks/Pulumi.noregion.yaml: aws:region: the AWS region is required" in capsys.readouterr().err
    assert cli_main(["preview", "--stack", "badpool", "--project-dir", str(project)]) == EXIT_INVALID
    assert "stacks/Pulumi.badpool.yaml: inferplane:platform.models[0].pool:" in capsys.readouterr().err
    assert cli_main(["preview", "--stack", "missing", "--project-dir", str(project)]) == EXIT_INVALID
    assert "stacks/Pulumi.missing.yaml: no such file" in capsys.readouterr().err


def test_an_unreadable_base_plan_exits_2_naming_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "old.json"
    broken.write_text('{"project": "inferplane"}', encoding="utf-8")
    code, _, stderr = run_cli(["preview", "--stack", "dev", "--against", str(broken)])
    assert code == EXIT_INVALID
    assert f"--against {broken}: not an inferplane plan: stack: Field required" in stderr


def _failing_program() -> None:
    fixture_program()
    raise ValueError("the program broke")


def test_a_failing_program_exits_3_with_the_project_frames_only() -> None:
    code, _, stderr = run_cli(["preview", "--stack", "dev"], program=_failing_program)
    assert code == EXIT_FAILED
    assert stderr.startswith("the program failed:\nTraceback (project frames only, most recent call last):\n")
    assert 'File "tests/tool/test_preview.py"' in stderr and "in _failing_program" in stderr
    assert stderr.rstrip().endswith("ValueError: the program broke")
    assert "site-packages" not in stderr and "mockengine" not in stderr and "asyncio" not in stderr


def test_a_plan_that_does_not_fit_exits_1(tmp_path: Path) -> None:
    def misfit(platform: dict[str, Any]) -> None:
        platform["models"][0]["max_context"] = 32768
        platform["models"][0]["concurrency"] = 64
        platform["models"][0]["kv_cache_dtype"] = "auto"

    project = make_project(tmp_path, {"misfit": with_platform("dev", misfit)})
    code, stdout, stderr = run_cli(["preview", "--stack", "misfit", "--project-dir", str(project)])
    assert code == EXIT_REFUSED
    assert "refused:" in stdout and "does not fit" in stdout
    assert "the plan of misfit is refused; nothing was evaluated" in stderr


def _runner(enforcement: Enforcement) -> PolicyRunner:
    def run(resources: Sequence[PlanResource], stack: Stack) -> PolicyReport:
        node_group = next(r for r in resources if r.type == "aws:eks/nodeGroup:NodeGroup")
        return PolicyReport(
            policies=(
                PolicyInfo(name="eks-nodegroup-no-spot", enforcement=enforcement),
                PolicyInfo(name="a-first-policy", enforcement="advisory"),
            ),
            violations=(
                Violation(
                    policy="eks-nodegroup-no-spot",
                    enforcement=enforcement,
                    urn=node_group.urn,
                    message=f"{stack.name}: spot capacity in a | table",
                ),
            ),
        )

    return run


def test_a_mandatory_violation_exits_1_and_an_advisory_one_passes(tmp_path: Path) -> None:
    plan_file, comment = tmp_path / "plan.json", tmp_path / "comment.md"
    code, stdout, stderr = run_cli(
        ["preview", "--stack", "dev", "--json", str(plan_file), "--markdown", str(comment)],
        policy_runner=_runner("mandatory"),
    )
    assert code == EXIT_REFUSED
    assert "Policies: 2 evaluated, 1 violations (1 mandatory): failed" in stdout
    assert "inferplane preview: 1 mandatory policy violations" in stderr
    plan = load_plan(plan_file)
    assert [p.name for p in plan.policies] == ["a-first-policy", "eks-nodegroup-no-spot"]
    assert plan.violations[0].urn.endswith("::l4-spot-ng")
    assert "| `eks-nodegroup-no-spot` | mandatory | `l4-spot-ng` | dev: spot capacity in a \\| table |" in (
        comment.read_text()
    )
    code, stdout, _ = run_cli(["preview", "--stack", "dev"], policy_runner=_runner("advisory"))
    assert code == EXIT_OK
    assert "(0 mandatory): passed" in stdout


def test_the_policy_seam_is_empty_without_a_pack_and_refuses_a_pack_it_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path)
    assert policy_runner_for(project) is no_policies
    (project / "policies").mkdir()
    (project / "policies" / "PulumiPolicy.yaml").write_text("runtime: python\n", encoding="utf-8")
    assert policy_runner_for(project) is not no_policies  # inferplane.tool.analyzer runs the pack
    # A pack whose driver cannot be imported is an error, never a silent pass (None in sys.modules fails import).
    monkeypatch.setitem(sys.modules, "inferplane.tool.analyzer", None)
    with pytest.raises(
        PolicySetupError, match=r"policies/PulumiPolicy.yaml exists but inferplane.tool.analyzer cannot be"
    ):
        policy_runner_for(project)


# --- markdown --------------------------------------------------------------------------------------------------


def test_markdown_holds_counts_diff_cost_and_a_mermaid_picture_of_the_components() -> None:
    plan = fixture_plan(PROJECT_DIR, "prod")
    diff = diff_plans(plan, plan)
    text = render_markdown(plan, diff, against="base/prod.json")

    assert "**Resources: 0 to create, 0 to update, 0 to replace, 0 to delete, 17 unchanged**" in text
    assert "| per hour | $113.80 -> $113.80 (+$0.00) | $235.05 -> $235.05 (+$0.00) |" in text
    assert "```mermaid\nflowchart LR\n" in text
    assert mermaid_diagram(plan).splitlines() == [
        "flowchart LR",
        '  stack(["inferplane/prod"])',
        '  subgraph g0["Accelerator pools"]',
        '    c1["GpuNodeGroup<br/>h100"]',
        '    c2["GpuNodeGroup<br/>l40s"]',
        "  end",
        '  subgraph g1["Model servers"]',
        '    c3["VllmService<br/>llama-70b"]',
        '    c4["VllmService<br/>llama-8b"]',
        "  end",
        '  subgraph g2["Gateway"]',
        '    c0["Gateway<br/>gateway"]',
        "  end",
        "  stack --- c0",
        "  stack --- c1",
        "  stack --- c2",
        "  stack --- c3",
        "  stack --- c4",
        "  c0 --> c3",
        "  c0 --> c4",
        "  c3 --> c1",
        "  c4 --> c2",
    ]


def _with_gateway(plan: Plan, providers: str | None) -> Plan:
    """``plan`` plus a gateway Deployment carrying ``providers`` as its providers annotation (none when None)."""
    annotations = {} if providers is None else {GATEWAY_PROVIDERS: providers}
    gateway = PlanResource(
        urn=f"urn:pulumi:{plan.stack}::inferplane::kubernetes:apps/v1:Deployment::gateway-deployment",
        type="kubernetes:apps/v1:Deployment",
        name="gateway-deployment",
        parent="",
        provider="",
        inputs={"metadata": {"name": "gateway", "annotations": annotations}},
        dependencies=(),
        protect=False,
    )
    return plan.model_copy(update={"resources": (*plan.resources, gateway)})


def test_markdown_shows_who_may_reach_which_hosted_provider() -> None:
    plan = fixture_plan(PROJECT_DIR, "prod")
    providers = gateway_providers_annotation(
        {
            "fireworks": GatewayProvider(host="api.fireworks.ai", tiers=("premium",), tenants=("assistant",)),
            "openai": GatewayProvider(host="api.openai.com", tiers=("premium", "standard"), tenants=()),
        }
    )
    text = render_markdown(_with_gateway(plan, providers), diff_plans(plan, plan), against=None)
    assert (
        "#### Hosted providers\n\n"
        "| gateway | provider | host | tiers | tenants whose prompts may go there |\n"
        "|---|---|---|---|---|\n"
        "| `gateway-deployment` | `fireworks` | api.fireworks.ai | premium | assistant |\n"
        "| `gateway-deployment` | `openai` | api.openai.com | premium, standard | **none** |\n"
    ) in text
    assert "#### Hosted providers" not in render_markdown(
        _with_gateway(plan, None), diff_plans(plan, plan), against=None
    )
    unreadable = render_markdown(_with_gateway(plan, "{"), diff_plans(plan, plan), against=None)
    assert f"| `gateway-deployment` | unreadable: {GATEWAY_PROVIDERS}=" in unreadable


def test_the_cli_writes_the_comment_with_a_mermaid_block(tmp_path: Path) -> None:
    comment = tmp_path / "dev.md"
    assert cli_main(["preview", "--stack", "dev", "--project-dir", str(PROJECT_DIR), "--markdown", str(comment)]) == 0
    text = comment.read_text()
    assert text.startswith("### `dev`: inferplane offline preview\n")
    assert "```mermaid\nflowchart LR\n" in text
