"""Every bad input ends in a verdict, never a traceback (issue 12, part A).

One table, :data:`CASES`: each row is a hostile input to ``inferplane size``, ``preview`` or ``preflight``, run
in-process through :func:`inferplane.tool.cli.main` against a copy of the shipped project, with the exact exit code
it must give (2 invalid input, 1 a limit or a refused plan, 3 nothing could be checked) and the fragments its message
must hold: the file, and the key or path. No row may print "Traceback". Rows are grouped by class (``yaml``,
``file``, ``output``, ``against``, ``validation``, ``tags``, ``numbers``, ``limits``, ``preflight``, ``terminal``,
``cli``) so the count per class is easy to read: ``pytest tests/test_bad_inputs.py --collect-only -q``.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.components.catalog import MODELS
from inferplane.components.spec.tags import is_label_value, kubernetes_labels
from inferplane.tool.cli import main
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from tests.conftest import PROJECT_DIR
from tests.spec.test_spec import _set as set_path
from tests.stacks import ROUTED_TIER, copy_project

Edit = Callable[[dict[str, Any]], None]
"""Changes a stack file's parsed document in place (the file is then written back as YAML)."""
Setup = Callable[[Path, pytest.MonkeyPatch], None]
"""Prepares the copied project (``tmp/project``) or the process for one case."""


@dataclass(frozen=True)
class Case:
    """One bad input and the verdict it must get."""

    id: str
    cls: str
    argv: tuple[str, ...]
    code: int
    expect: tuple[str, ...]
    stack: str = "dev"
    edit: Edit | None = None
    text: str | bytes | None = None
    setup: Setup | None = None
    absent: tuple[str, ...] = ()
    no_files: tuple[str, ...] = field(default=())


def _set(path: str, value: Any) -> Edit:
    """Set ``inferplane:platform.<path>`` (dots and [i]) to ``value``."""
    set_in_platform = set_path(path, value)
    return lambda document: set_in_platform(document["config"]["inferplane:platform"])


def _config(key: str, value: Any) -> Edit:
    def apply(document: dict[str, Any]) -> None:
        document["config"][key] = value

    return apply


def _tags(tags: dict[str, str]) -> Edit:
    return _set("tags", tags)


def _raw_stack(transform: Callable[[str], str], stack: str = "dev") -> str:
    return transform((PROJECT_DIR / "stacks" / f"Pulumi.{stack}.yaml").read_text())


_DEV_MAX_REPLICAS_LINE = (PROJECT_DIR / "stacks" / "Pulumi.dev.yaml").read_text().split("\n").index(
    "        max_replicas: 1"
) + 1
"""Where the shipped dev stack sets ``max_replicas`` (1-based), so the duplicate-key case follows edits to the file."""


def billion_laughs() -> str:
    """Nine levels of nine aliases: under 500 bytes that expand to 9**8 x 5 strings once decoded."""
    lines = ["config:", "  aws:region: us-east-1", "  other:unread:", '    a: &a ["lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"    {name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
        previous = name
    return "\n".join(lines) + "\n"


def _fifo(project: Path, _: pytest.MonkeyPatch) -> None:
    os.mkfifo(project / "stacks" / "Pulumi.fifo.yaml")


def _directory(project: Path, _: pytest.MonkeyPatch) -> None:
    (project / "stacks" / "Pulumi.dir.yaml").mkdir()


def _denied(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests may run as root, which no mode bit stops: refuse the open the way the kernel would.
    target = str(project / "stacks" / "Pulumi.dev.yaml")
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == target:
            raise PermissionError(13, "Permission denied", target)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)


def _plan_of(project: str, stack: str) -> Setup:
    def write(root: Path, _: pytest.MonkeyPatch) -> None:
        plan = {
            "project": project,
            "stack": stack,
            "resources": [],
            "outputs": {},
            "sizing": {},
            "cost": {
                "currency": "USD",
                "hourly_min": 1.0,
                "hourly_max": 2.0,
                "monthly_min": 730.0,
                "monthly_max": 1460.0,
            },
            "policies": [],
            "violations": [],
        }
        (root / "old.json").write_text(json.dumps(plan))

    return write


def _write(name: str, content: str) -> Setup:
    def write(root: Path, _: pytest.MonkeyPatch) -> None:
        (root / name).write_text(content)

    return write


def _env(key: str, value: str) -> Setup:
    def apply(_: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(key, value)

    return apply


def _pairs(content: str | bytes, name: str = "pairs.jsonl") -> Setup:
    """A ``cache eval`` pairs file at ``tmp/project/<name>`` (folders created)."""

    def write(root: Path, _: pytest.MonkeyPatch) -> None:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")

    return write


def _project_file(main: str, runtime: str = "python", make: Callable[[Path], object] | None = None) -> Setup:
    """``Pulumi.yaml`` running ``main`` with ``runtime``; ``make(project)`` prepares what ``main`` names."""

    def write(root: Path, _: pytest.MonkeyPatch) -> None:
        (root / "Pulumi.yaml").write_text(
            f"name: inferplane\nruntime: {runtime}\nmain: {main}\nstackConfigDir: stacks\n", encoding="utf-8"
        )
        if make is not None:
            make(root)

    return write


def _outside_program(project: Path) -> None:
    (project.parent / "outside").mkdir()
    (project.parent / "outside" / "__main__.py").write_text("raise SystemExit('ran')\n")


PAIR = '{"a": "How do I reset my password?", "b": "How can I reset my password?", "same": true}\n'
PLAN_8B = ("plan", "--model", "llama-3.1-8b", "--input-tokens", "1000", "--output-tokens", "200",
           "--requests-per-second", "1", "--ttft-p95-ms", "2000", "--itl-p95-ms", "100")  # fmt: skip


def _read_only(name: str) -> Setup:
    """``tmp/project/<name>`` made read-only by its mode bits (which bind root too, as plan reads them)."""
    return lambda root, _: (root / name).chmod(0o444)


def _failing(module: Any, function: str, error: BaseException) -> Setup:
    """``module.function`` raises ``error`` for the case (a full disk, a quota) and is restored after it."""

    def fail(*_: Any, **__: Any) -> None:
        raise error

    return lambda _, monkeypatch: monkeypatch.setattr(module, function, fail)


DEV = "stacks/Pulumi.dev.yaml"
PROD = "stacks/Pulumi.prod.yaml"
STAGING = "stacks/Pulumi.staging.yaml"
P = "inferplane:platform"
SIZE = ("size", "--stack", "dev")


def _write_route(project: Path, text: str) -> None:
    (project / "routes").mkdir(exist_ok=True)
    (project / "routes" / "auto.jsonl").write_text(text, encoding="utf-8")


PREVIEW = ("preview", "--stack", "dev")
PREFLIGHT = ("preflight", "--stack", "dev")
MODEL_8B = ("size", "--model", "llama-3.1-8b", "--accelerator", "l4-24gb")
MODEL_70B = ("size", "--model", "llama-3.3-70b", "--accelerator", "h100-80gb")
ARCH = {**MODELS["llama-3.1-8b"].model_dump(exclude={"source"}), "hf_repo": "acme/huge", "parameters": 10**400}

# fmt: off
CASES: tuple[Case, ...] = (
    # 1. YAML resource exhaustion, and nesting beyond any spec.
    Case("yaml-aliases", "yaml", SIZE, EXIT_INVALID, (DEV, "alias *", "not allowed in a stack file"),
         text=billion_laughs()),
    Case("yaml-deep-nesting", "yaml", SIZE, EXIT_INVALID, (DEV, "nested deeper than 64 levels"),
         text="config:\n  other:unread: " + "[" * 20000 + "]" * 20000 + "\n"),
    Case("yaml-deep-mapping", "yaml", SIZE, EXIT_INVALID, (DEV, "nested deeper than 64 levels"),
         text="config:\n  other:unread: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n"),
    Case("yaml-syntax", "yaml", SIZE, EXIT_INVALID, (DEV, "not valid YAML", "line 3, column 1"),
         text="config:\n  a: [\n"),
    # 2. Duplicate keys name both lines.
    Case("duplicate-key-nested", "yaml", SIZE, EXIT_INVALID,
         (DEV, f"duplicate key 'max_replicas' on line {_DEV_MAX_REPLICAS_LINE} and line {_DEV_MAX_REPLICAS_LINE + 1}"),
         text=_raw_stack(lambda t: t.replace("max_replicas: 1\n", "max_replicas: 1\n        max_replicas: 50\n"))),
    Case("duplicate-key-region", "yaml", SIZE, EXIT_INVALID, (DEV, "duplicate key 'aws:region' on line 3 and line 4"),
         text=_raw_stack(lambda t: t.replace("  aws:region: us-east-1\n", "  aws:region: us-east-1\n" * 2))),
    # 3. Unreadable stack files: each named, none hangs.
    Case("non-utf8", "file", SIZE, EXIT_INVALID, (DEV, "is not UTF-8 text: byte 0xff on line 2"),
         text=b"config:\n  aws:region: \xff\xfe\n"),
    Case("directory", "file", ("size", "--stack", "dir"), EXIT_INVALID,
         ("stacks/Pulumi.dir.yaml", "is a directory"), setup=_directory),
    Case("fifo", "file", ("size", "--stack", "fifo"), EXIT_INVALID,
         ("stacks/Pulumi.fifo.yaml", "not a regular file"), setup=_fifo),
    Case("permission-denied", "file", SIZE, EXIT_INVALID, (DEV, "cannot read: Permission denied"), setup=_denied),
    Case("path-through-file", "file", ("size", "--stack", "dev.yaml/x"), EXIT_INVALID,
         ("stacks/Pulumi.dev.yaml/x.yaml", "--stack: a stack name is 1 to 100")),
    Case("name-too-long", "file", ("size", "--stack", "a" * 300), EXIT_INVALID,
         ("stacks/Pulumi.aaaa", "(300 characters given)")),
    Case("missing-stack", "file", ("size", "--stack", "qa"), EXIT_INVALID, ("stacks/Pulumi.qa.yaml", "no such file")),
    Case("too-large", "file", SIZE, EXIT_INVALID, (DEV, "bytes, more than the 262144 accepted"),
         text="# " + "x" * (256 * 1024) + "\n"),
    Case("project-dir-is-file", "file", ("size", "--stack", "dev", "--project-dir", "{project}/Pulumi.yaml"),
         EXIT_INVALID, ("Pulumi.yaml", "--project-dir is not a directory")),
    Case("project-dir-missing", "file", ("size", "--stack", "dev", "--project-dir", "{project}/nowhere"),
         EXIT_INVALID, ("nowhere", "--project-dir does not exist")),
    Case("project-file-nul", "file", SIZE, EXIT_INVALID, ("Pulumi.yaml: stackConfigDir: must be a path",),
         setup=_write("Pulumi.yaml", 'name: inferplane\nstackConfigDir: "st\\0acks"\n')),
    Case("project-file-duplicate-key", "file", SIZE, EXIT_INVALID, ("Pulumi.yaml", "duplicate key 'name'"),
         setup=_write("Pulumi.yaml", "name: inferplane\nname: other\nstackConfigDir: stacks\n")),
    Case("project-config-not-a-mapping", "file", PREVIEW, EXIT_INVALID,
         ("Pulumi.yaml: config: must be a mapping of key to declaration",),
         setup=_write("Pulumi.yaml", "name: inferplane\nmain: infra/\nstackConfigDir: stacks\nconfig: 5\n")),
    Case("config-dir-through-file", "file", SIZE, EXIT_INVALID,
         ("stacks/Pulumi.dev.yaml/Pulumi.dev.yaml", "a part of the path is a file"),
         setup=_write("Pulumi.yaml", "name: inferplane\nstackConfigDir: stacks/Pulumi.dev.yaml\n")),
    # 4. Output paths: checked before evaluating, nothing left behind.
    Case("json-into-directory", "output", (*PREVIEW, "--json", "{project}/stacks"), EXIT_INVALID,
         ("--json", "stacks: is a directory")),
    Case("json-missing-folder", "output", (*PREVIEW, "--json", "{project}/nowhere/plan.json"), EXIT_INVALID,
         ("--json", "nowhere/plan.json", "does not exist")),
    Case("markdown-unwritable", "output", (*PREVIEW, "--json", "{project}/good.json", "--markdown", "/proc/x.md"),
         EXIT_INVALID, ("--markdown /proc/x.md", "cannot write there"), no_files=("good.json",)),
    Case("same-output-twice", "output", (*PREVIEW, "--json", "{project}/p.json", "--markdown", "{project}/./p.json"),
         EXIT_INVALID, ("--markdown", "the same file as --json"), no_files=("p.json",)),
    # 5. --against only a plan of the same project and stack.
    Case("against-other-stack", "against", (*PREVIEW, "--against", "{project}/old.json"), EXIT_INVALID,
         ("old.json", "stack 'prod', not of project 'inferplane' stack 'dev'"), setup=_plan_of("inferplane", "prod")),
    Case("against-other-project", "against", (*PREVIEW, "--against", "{project}/old.json"), EXIT_INVALID,
         ("old.json", "project 'other'", "not of project 'inferplane'"), setup=_plan_of("other", "dev")),
    Case("against-directory", "against", (*PREVIEW, "--against", "{project}/stacks"), EXIT_INVALID,
         ("--against", "stacks: is a directory")),
    Case("against-not-json", "against", (*PREVIEW, "--against", "{project}/old.json"), EXIT_INVALID,
         ("--against", "old.json: not valid JSON"), setup=_write("old.json", "{")),
    Case("against-not-a-plan", "against", (*PREVIEW, "--against", "{project}/old.json"), EXIT_INVALID,
         ("--against", "old.json: not an inferplane plan"), setup=_write("old.json", "[1]")),
    # 6. Whatever the program or a component would refuse, the spec refuses first (size and preview alike).
    Case("kubernetes-1.20-size", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cluster.kubernetes_version: 1.20 is not supported"),
         edit=_set("cluster.kubernetes_version", "1.20")),
    Case("kubernetes-1.20-preview", "validation", PREVIEW, EXIT_INVALID,
         (DEV, f"{P}.cluster.kubernetes_version: 1.20 is not supported"),
         edit=_set("cluster.kubernetes_version", "1.20")),
    Case("unused-pool", "validation", SIZE, EXIT_INVALID, (DEV, f"{P}.pools[1].name: no model runs on pool 'spare'"),
         edit=lambda d: _platform_of(d)["pools"].append(
             {"name": "spare", "accelerator": "l4-24gb", "instance_type": "g6.xlarge"})),
    Case("unused-pool-preview", "validation", PREVIEW, EXIT_INVALID, (DEV, f"{P}.pools[1].name: no model runs"),
         edit=lambda d: _platform_of(d)["pools"].append(
             {"name": "spare", "accelerator": "l4-24gb", "instance_type": "g6.xlarge"})),
    Case("unknown-system-instance-type", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cluster.system_instance_type: 'm7i.8xlarge' is not an EKS system node type of the catalog",
          "known: m5.2xlarge"), edit=_set("cluster.system_instance_type", "m7i.8xlarge")),
    Case("unknown-system-instance-type-preview", "validation", PREVIEW, EXIT_INVALID,
         (DEV, f"{P}.cluster.system_instance_type: 'm7i.8xlarge' is not an EKS system node type"),
         edit=_set("cluster.system_instance_type", "m7i.8xlarge")),
    Case("gke-type-as-system-instance-type", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cluster.system_instance_type: 'e2-standard.8' is not an EKS system node type"),
         edit=_set("cluster.system_instance_type", "e2-standard.8")),
    Case("route-examples-missing", "validation", ("preview", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.gateway.tiers[2].route.examples: ", "routes/auto.jsonl: No such file or directory"),
         stack="prod", edit=lambda d: _platform_of(d)["gateway"]["tiers"].append(ROUTED_TIER)),
    Case("route-examples-bad-line", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.gateway.tiers[2].route.examples: ", "routes/auto.jsonl:1: strong_correct: Field required"),
         stack="prod", edit=lambda d: _platform_of(d)["gateway"]["tiers"].append(ROUTED_TIER),
         setup=lambda project, _: _write_route(project, '{"prompt": "p", "cheap_correct": true}\n')),
    Case("prod-single-cache-node", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.replicas: prod needs at least 2 cache nodes"), stack="prod",
         edit=_set("cache.replicas", 1)),
    Case("open-endpoint", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cluster.public_access_cidrs[0]: 0.0.0.0/0 opens the API endpoint"),
         edit=_set("cluster.public_access_cidrs", ["0.0.0.0/0"])),
    Case("prod-public-endpoint", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cluster.endpoint_access: prod clusters keep the API endpoint private"), stack="prod",
         edit=lambda d: _platform_of(d)["cluster"].update(
             endpoint_access="public_and_private", public_access_cidrs=["198.51.100.0/24"])),
    Case("missing-log-types", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cluster.log_types: every control-plane log is kept; missing audit, authenticator"),
         edit=_set("cluster.log_types", ["api"])),
    Case("gcp-zone-elsewhere", "validation", ("size", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.gcp.zone: 'europe-west4-a' is not a zone of GCP region us-west4"), stack="staging",
         edit=_set("gcp.zone", "europe-west4-a")),
    Case("efa-without-zone", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.pools[0].zone: EFA pools need one zone"), stack="prod",
         edit=lambda d: _platform_of(d)["pools"][0].update(efa=True, zone=None)),
    Case("gcp-tag-collision", "validation", ("size", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.tags: as GCP labels: tags 'Team' and 'team' both become the GCP label key 'team'"),
         stack="staging", edit=_tags({"Team": "a", "team": "b"})),
    Case("tpu-partial-slice", "validation", ("size", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.pools[2].min_nodes: 6 nodes is not a whole number of 4x4 slices"), stack="staging",
         edit=lambda d: _platform_of(d)["pools"].append({"name": "tpu-slice", "accelerator": "tpu-v5e",
             "instance_type": "ct5lp-hightpu-4t", "tpu_topology": "4x4", "min_nodes": 6})),
    Case("tier-fallback-other-cluster", "validation", ("size", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.gateway.tiers[0].fallback: qwen-7b runs on gke but primary llama-8b, qwen-agent on eks"),
         stack="staging", edit=_set("gateway.tiers[0]", {"name": "standard", "models": ["llama-8b"],
                                                           "fallback": ["qwen-7b"]})),
    Case("tier-fallback-other-cluster-preview", "validation", ("preview", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.gateway.tiers[0].fallback: qwen-7b runs on gke but primary llama-8b, qwen-agent on eks"),
         stack="staging", edit=lambda d: _platform_of(d)["gateway"]["tiers"][0].update(
             models=["llama-8b"], fallback=["qwen-7b"])),
    Case("data-tiering-cache", "validation", SIZE, EXIT_INVALID, (DEV, f"{P}.cache.node_type: cache.r6gd.xlarge"),
         edit=_set("cache.node_type", "cache.r6gd.xlarge")),
    # 7. Tags: AWS's rules (IAM's characters), and Kubernetes labels that can always be derived.
    Case("tag-nul-byte", "tags", SIZE, EXIT_INVALID, (DEV, f"{P}.tags['team']: the tag value may use letters"),
         edit=_tags({"team": "ml\x00platform"})),
    Case("tag-parentheses", "tags", SIZE, EXIT_INVALID, (DEV, f"{P}.tags['team']: the tag value may use letters"),
         edit=_tags({"team": "ML Platform (EU)"})),
    Case("tag-key-200", "tags", SIZE, EXIT_INVALID, (DEV, "a tag key is 1 to 128 characters, got 200"),
         edit=_tags({"k" * 200: "v"})),
    Case("tag-value-300", "tags", SIZE, EXIT_INVALID, (DEV, f"{P}.tags['team']: a tag value is at most 256"),
         edit=_tags({"team": "v" * 300})),
    Case("tag-aws-prefix", "tags", SIZE, EXIT_INVALID,
         (DEV, f"{P}.tags['AWS:owner']: the tag key starts with 'aws:'"), edit=_tags({"AWS:owner": "me"})),
    Case("tag-too-many", "tags", SIZE, EXIT_INVALID, (DEV, f"{P}.tags: 48 tags; AWS allows 50 per resource"),
         edit=_tags({f"t{i}": "x" for i in range(48)})),
    Case("tag-platform-key", "tags", SIZE, EXIT_INVALID,
         (DEV, f"{P}.tags['environment']: the platform sets the tag 'environment' itself"),
         edit=_tags({"environment": "production"})),
    Case("tag-reserved-label-prefix", "tags", SIZE, EXIT_INVALID,
         (DEV, "the label prefix 'kubernetes.io' is reserved"), edit=_tags({"kubernetes.io/team": "x"})),
    Case("tag-label-collision", "tags", SIZE, EXIT_INVALID,
         (DEV, "tags 'cost center' and 'cost_center' both become the Kubernetes label 'cost_center'"),
         edit=_tags({"cost center": "a", "cost_center": "b"})),
    Case("tag-not-a-string", "tags", SIZE, EXIT_INVALID, (DEV, f"{P}.tags.team: Input should be a valid string"),
         edit=_set("tags.team", 5)),
    # 8. Numbers stay finite; the CLI holds the spec's bounds.
    Case("min-nodes-huge", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.pools[0].min_nodes: Input should be less than or equal to 1000"),
         edit=_set("pools[0].min_nodes", 10**400)),
    Case("parameters-huge", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.models[0].architecture.parameters: Input should be less than or equal to"),
         edit=lambda d: _platform_of(d)["models"][0].update(model=None, architecture=ARCH)),
    Case("max-context-huge", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.models[0].max_context: Input should be less than or equal to 100000000"),
         edit=_set("models[0].max_context", 10**400)),
    Case("cost-limit-infinite", "numbers", SIZE, EXIT_INVALID, (DEV, f"{P}.limits.max_hourly_cost_usd"),
         text=_raw_stack(lambda t: t.replace("max_hourly_cost_usd: 5", "max_hourly_cost_usd: .inf"))),
    Case("cli-concurrency-huge", "numbers", (*MODEL_8B, "--concurrency", str(10**18)), EXIT_INVALID,
         ("--concurrency", "is not within 1 and 4096")),
    Case("cli-gpus-3", "numbers", (*MODEL_70B, "--gpus", "3"), EXIT_INVALID,
         ("--gpus 3 does not divide the 8 accelerators of a p5.48xlarge node",)),
    Case("cli-gpus-1000", "numbers", (*MODEL_70B, "--gpus", "1000"), EXIT_INVALID,
         ("--gpus", "is not within 1 and 64")),
    Case("cli-tp-alternatives-run", "numbers", ("size", "--model", "qwen2.5-7b", "--accelerator", "h100-80gb",
                                                "--gpus", "8"), EXIT_REFUSED,
         ("tensor parallel 8 does not divide the model's 28 attention heads", "TP 4: fits"), absent=("TP 8: fits",)),
    Case("cli-tpu-host-heads", "numbers", ("size", "--model", "qwen2.5-7b", "--accelerator", "tpu-v5e", "--gpus", "8"),
         EXIT_REFUSED, ("does not divide the model's 28 attention heads", "pick another host size")),
    Case("cli-context-huge", "numbers", (*MODEL_8B, "--context", str(10**400)), EXIT_INVALID,
         ("--context", "is not within 1 and 100000000")),
    Case("cli-utilization-nan", "numbers", (*MODEL_8B, "--gpu-memory-utilization", "nan"), EXIT_INVALID,
         ("--gpu-memory-utilization must be within 0.5 and 0.93",)),
    # 9. Every stack-limit breach: exit 1, naming the limit and the policy that enforces it.
    Case("limit-spot", "limits", SIZE, EXIT_REFUSED,
         (f"{P}.limits.allow_spot (policy eks-nodegroup-disallow-spot-capacity)", "pools[0] l4-spot"),
         edit=_set("limits.allow_spot", False)),
    Case("no-platform-preview", "validation", PREVIEW, EXIT_INVALID,
         (DEV, "inferplane:platform: required by the program and not set"),
         text="config:\n  aws:region: us-east-1\n"),
    Case("limit-spot-preview", "limits", PREVIEW, EXIT_REFUSED,
         (f"{P}.limits.allow_spot (policy eks-nodegroup-disallow-spot-capacity)", "nothing was evaluated"),
         edit=_set("limits.allow_spot", False)),
    Case("limit-accelerator", "limits", SIZE, EXIT_REFUSED,
         (f"{P}.limits.allowed_accelerators (policy eks-nodegroup-configure-allowed-instance-types)",
          "l4-24gb is not allowed in dev"), edit=_set("limits.allowed_accelerators", ["a10g-24gb"])),
    Case("limit-gpus", "limits", SIZE, EXIT_REFUSED,
         (f"{P}.limits.max_total_gpus (policy compute-stack-limit-total-accelerators)",),
         edit=_set("models[0].max_replicas", 3)),
    Case("limit-cost", "limits", SIZE, EXIT_REFUSED,
         (f"{P}.limits.max_hourly_cost_usd (policy cost-stack-limit-hourly-cost)",),
         edit=_set("limits.max_hourly_cost_usd", 0.5)),
    Case("limit-context", "limits", SIZE, EXIT_REFUSED,
         (f"{P}.limits.max_context (policy inference-server-limit-max-model-len)", "max_context 65536"),
         edit=_set("models[0].max_context", 65536)),
    # The system nodes must hold the gateway: a pod larger than a node, and pods no packing fits, are refused plans.
    Case("system-node-too-small", "limits", SIZE, EXIT_REFUSED,
         (f"{P}.cluster.system_instance_type: m7i.large system nodes cannot run gateway pods",
          "fix: system_instance_type m7i.xlarge"), edit=_set("cluster.system_instance_type", "m7i.large")),
    Case("system-node-too-small-preview", "limits", PREVIEW, EXIT_REFUSED,
         (f"{P}.cluster.system_instance_type: m7i.large system nodes cannot run gateway pods",),
         edit=_set("cluster.system_instance_type", "m7i.large")),
    Case("system-nodes-too-few", "limits", ("size", "--stack", "prod"), EXIT_REFUSED,
         (f"{P}.cluster.system_nodes: at the ceiling", "left without a node: gateway x4, cache-embedder x4",
          "fix: system_nodes 4"),
         stack="prod", edit=_set("cluster.system_nodes", 2)),
    # 10. Preflight: bounded horizon, a broken endpoint in one line.
    Case("horizon-inf", "preflight", (*PREFLIGHT, "--horizon-hours", "inf"), EXIT_INVALID,
         ("--horizon-hours", "'inf' is not within 0 and 8784")),
    Case("horizon-1e11", "preflight", (*PREFLIGHT, "--horizon-hours", "1e11"), EXIT_INVALID,
         ("--horizon-hours", "'1e11' is not within 0 and 8784")),
    Case("horizon-nan", "preflight", (*PREFLIGHT, "--horizon-hours", "nan"), EXIT_INVALID, ("--horizon-hours",)),
    Case("endpoint-not-a-url", "preflight", PREFLIGHT, EXIT_FAILED,
         ("inferplane preflight: cannot make an AWS", "Invalid endpoint: not a url"),
         setup=_env("AWS_ENDPOINT_URL", "not a url")),
    # 11. Terminal escapes, ignored flags, messages with an empty key or a second, wrong line.
    Case("escape-in-argv", "terminal", ("size", "--stack", "\x1b[31mred"), EXIT_INVALID, ("\\x1b[31mred",),
         absent=("\x1b",)),
    Case("escape-in-stack-key", "terminal", SIZE, EXIT_INVALID, (DEV, "inferplane:platform['\\x1b[2Jbad']"),
         absent=("\x1b",), edit=lambda d: _platform_of(d).update({"\x1b[2Jbad": 1})),
    Case("escape-in-yaml", "terminal", SIZE, EXIT_INVALID, (DEV, "unacceptable character #x001b"),
         absent=("\x1b",), text="config:\n  a: \x1b[2J\n"),
    Case("escape-in-spec-value", "terminal", SIZE, EXIT_INVALID,
         (DEV, f"{P}.zones: control characters (escape sequences, NUL, newlines) are not allowed"),
         absent=("\x1b",), edit=_set("zones[1]", "us-east-1b\x1b[2J")),
    Case("stack-with-model", "cli", (*SIZE, "--model", "llama-3.1-8b"), EXIT_INVALID,
         ("--stack sizes the stack's own models; drop --model",)),
    Case("one-item-list", "cli", SIZE, EXIT_INVALID, (DEV, f"{P}.limits.allowed_accelerators[0]: Input should be"),
         absent=("Tuple should have at least",), edit=_set("limits.allowed_accelerators", ["h900"])),
    Case("region-not-a-string", "cli", SIZE, EXIT_INVALID, (DEV, "aws:region: must be a region name", "not int 42"),
         edit=_config("aws:region", 42)),
    Case("config-key-colon", "cli", SIZE, EXIT_INVALID, (DEV, "':': config keys are namespaced"),
         edit=_config(":", 1)),
    Case("platform-empty-key", "cli", SIZE, EXIT_INVALID, (DEV, f"{P}['']: unknown key"),
         edit=lambda d: _platform_of(d).update({"": 1})),
    Case("platform-list-item", "cli", SIZE, EXIT_INVALID, (DEV, f"{P}.zones[1]: Input should be a valid string"),
         absent=("Tuple should have",), edit=_set("zones[1]", 5)),
    Case("platform-not-a-mapping", "cli", SIZE, EXIT_INVALID,
         (DEV, f"{P}: must be a mapping describing the platform, not list"), edit=_config(P, [1, 2])),
    # 12. Issue 23: cache eval reads its pairs as stack files are read; a failing embedder is exit 3 naming it.
    Case("pairs-non-utf8", "file", ("cache", "eval", "--pairs", "{project}/pairs.jsonl"), EXIT_INVALID,
         ("pairs.jsonl: is not UTF-8 text: byte 0xff on line 1",), setup=_pairs(b'{"a": "\xff"}\n')),
    Case("pairs-fifo", "file", ("cache", "eval", "--pairs", "{project}/pairs.jsonl"), EXIT_INVALID,
         ("pairs.jsonl: is not a regular file",), setup=lambda root, _: os.mkfifo(root / "pairs.jsonl")),
    Case("pairs-dev-zero", "file", ("cache", "eval", "--pairs", "/dev/zero"), EXIT_INVALID,
         ("/dev/zero: is not a regular file",)),
    Case("pairs-too-large", "file", ("cache", "eval", "--pairs", "{project}/pairs.jsonl"), EXIT_INVALID,
         ("pairs.jsonl: is 10000001 bytes, more than the 8388608 accepted",), setup=_pairs("x" * 10_000_001)),
    Case("pairs-prompt-too-long", "file", ("cache", "eval", "--pairs", "{project}/pairs.jsonl"), EXIT_INVALID,
         ("pairs.jsonl:1: a: String should have at most 1000 characters",),
         setup=_pairs(json.dumps({"a": "x" * 1001, "b": "y", "same": False}) + "\n")),
    Case("pairs-same-not-boolean", "file", ("cache", "eval", "--pairs", "{project}/pairs.jsonl"), EXIT_INVALID,
         ("pairs.jsonl:2: same: Input should be a valid boolean",),
         setup=_pairs(PAIR + '{"a": "x", "b": "y", "same": "false"}\n')),
    Case("embedder-unreachable", "file", ("cache", "eval", "--stack", "dev"), EXIT_FAILED,
         ("inferplane cache eval: embedder endpoint http://127.0.0.1:9/v1 failed",),
         edit=_set("cache.embedder", {"kind": "endpoint", "url": "http://127.0.0.1:9/v1", "model": "e5",
                                      "dimensions": 8})),
    Case("pairs-path-markup", "terminal", ("cache", "eval", "--pairs", "{project}/[/d][blink]:x:/pairs.jsonl"),
         EXIT_OK, ("1 pairs from ", "/[/d][blink]:x:/pairs.jsonl (1 labelled same)"), absent=("\u274c",),
         setup=_pairs(PAIR, "[/d][blink]:x:/pairs.jsonl")),
    # 13. Issue 23: an explicit --project-dir is used as it is, never a parent's project.
    Case("project-dir-no-project-size", "file", ("size", "--stack", "dev", "--project-dir", "{project}/stacks"),
         EXIT_INVALID, ("stacks: --project-dir has no Pulumi.yaml",)),
    Case("project-dir-no-project-preview", "file", (*PREVIEW, "--project-dir", "{project}/stacks"), EXIT_INVALID,
         ("stacks: --project-dir has no Pulumi.yaml",)),
    Case("project-dir-no-project-plan", "file", (*PLAN_8B, "--write-stack", "dev", "--project-dir", "{project}/stacks"),
         EXIT_INVALID, ("stacks: --project-dir has no Pulumi.yaml",)),
    Case("project-dir-no-project-cache", "file", ("cache", "eval", "--stack", "dev", "--project-dir",
                                                  "{project}/stacks"), EXIT_INVALID,
         ("stacks: --project-dir has no Pulumi.yaml",)),
    # 14. Issue 23: preview runs only the project's own Python program, and never shows a file it could not run.
    Case("main-outside", "file", PREVIEW, EXIT_INVALID, ("Pulumi.yaml: main: ../outside resolves outside the project",),
         setup=_project_file("../outside", make=_outside_program), absent=("ran",)),
    Case("main-symlink-out", "file", PREVIEW, EXIT_INVALID,
         ("Pulumi.yaml: main: passwd.py resolves outside the project",),
         setup=_project_file("passwd.py", make=lambda root: (root / "passwd.py").symlink_to("/etc/passwd")),
         absent=("root:",)),
    Case("main-fifo", "file", PREVIEW, EXIT_INVALID,
         ("Pulumi.yaml: main: prog.py is neither a directory nor a regular .py file",),
         setup=_project_file("prog.py", make=lambda root: os.mkfifo(root / "prog.py"))),
    Case("main-not-py", "file", PREVIEW, EXIT_INVALID,
         ("Pulumi.yaml: main: index.js is neither a directory nor a regular .py file",),
         setup=_project_file("index.js", make=lambda root: (root / "index.js").write_text("console.log(1)\n"))),
    Case("runtime-nodejs", "file", PREVIEW, EXIT_INVALID,
         ("Pulumi.yaml: runtime: the offline preview runs Python programs only (runtime: python), not 'nodejs'",),
         setup=_project_file("infra/", runtime="nodejs")),
    Case("main-not-python", "file", PREVIEW, EXIT_FAILED, ('SyntaxError: invalid syntax (File "bad.py", line 1)',),
         setup=_project_file("bad.py", make=lambda root: (root / "bad.py").write_text("TOP SECRET line :x:\n")),
         absent=("TOP SECRET", "\u274c")),
    # 15. Issue 23: empty arguments and control characters in any argument are refused before anything runs.
    Case("empty-pairs", "cli", ("cache", "eval", "--pairs", ""), EXIT_INVALID,
         ("inferplane cache eval: --pairs is empty",)),
    Case("empty-cache-stack", "cli", ("cache", "eval", "--stack", ""), EXIT_INVALID,
         ("inferplane cache eval: --stack is empty",)),
    Case("empty-project-dir", "cli", (*SIZE, "--project-dir", ""), EXIT_INVALID,
         ("inferplane size: --project-dir is empty",)),
    Case("empty-write-stack", "cli", (*PLAN_8B, "--write-stack", ""), EXIT_INVALID,
         ("inferplane plan: --write-stack is empty",)),
    Case("escape-in-region", "terminal", (*PREFLIGHT, "--region", "us-east-1\x1b[2J"), EXIT_INVALID,
         ("inferplane preflight: --region 'us-east-1\\x1b[2J': control characters",), absent=("\x1b",)),
    Case("escape-in-plan-region", "terminal", (*PLAN_8B, "--region", "\x9b31m"), EXIT_INVALID,
         ("inferplane plan: --region '\\x9b31m': control characters",), absent=("\x9b",)),
    Case("escape-in-unknown-flag", "terminal", (*SIZE, "--\x1b[2J"), EXIT_INVALID,
         ("unrecognized arguments: --\\x1b[2J",), absent=("\x1b",)),
    Case("emoji-in-stack-name", "terminal", ("size", "--stack", ":x:"), EXIT_INVALID, ("stacks/Pulumi.:x:.yaml",),
         absent=("\u274c",)),
    # 16. Issue 23: schema --write/--check act on the tree this inferplane runs from, found from --project-dir.
    Case("schema-other-tree", "cli", ("schema", "--check"), EXIT_INVALID,
         ("is not the inferplane tree this command runs from",)),
    # 17. Issue 23: plan's numbers are finite and bounded; --name and the stack file are checked before the search;
    # the stack file is replaced by rename; size refuses a sequence longer than its context.
    Case("plan-rate-inf", "numbers", (*PLAN_8B, "--requests-per-second", "inf"), EXIT_INVALID,
         ("argument --requests-per-second: 'inf' is not within 0.001 and 100000 requests per second",)),
    Case("plan-rate-1e20", "numbers", (*PLAN_8B, "--requests-per-second", "1e20"), EXIT_INVALID,
         ("argument --requests-per-second: '1e20' is not within 0.001 and 100000 requests per second",)),
    Case("plan-peak-overflow", "numbers", (*PLAN_8B, "--peak-requests-per-second", "1e308"), EXIT_INVALID,
         ("argument --peak-requests-per-second: '1e308' is not within 0.001 and 100000",)),
    Case("plan-itl-inf", "numbers", (*PLAN_8B, "--itl-p95-ms", "inf"), EXIT_INVALID,
         ("argument --itl-p95-ms: 'inf' is not above 0 and at most 60000 ms",)),
    Case("size-tokens-beyond-context", "numbers", (*MODEL_8B, "--input-tokens", "8000", "--output-tokens", "1000"),
         EXIT_INVALID, ("inferplane size: --input-tokens 8000 + --output-tokens 1000 exceed --context 8192",),
         absent=("output tokens/s",)),
    Case("plan-name-invalid", "cli", (*PLAN_8B, "--write-stack", "staging", "--name", "Chat 8B!"), EXIT_INVALID,
         ("--name 'Chat 8B!': a deployment name is a lower-case RFC 1123 label",), absent=("refuses every",)),
    Case("plan-name-taken", "cli", (*PLAN_8B, "--write-stack", "staging", "--name", "llama-8b"), EXIT_INVALID,
         (f"--name llama-8b: {STAGING} already deploys a model named llama-8b",), absent=("refuses every",)),
    Case("plan-json-no-candidate", "cli", (*PLAN_8B[:-1], "1", "--json"), EXIT_REFUSED,
         ("inferplane plan: no configuration fits and meets the objectives; dropped for: itl",)),
    Case("plan-stack-read-only", "file", (*PLAN_8B, "--write-stack", "staging"), EXIT_INVALID,
         (STAGING, "is read-only; nothing was written"), setup=_read_only(STAGING)),
    Case("plan-stack-disk-full", "output", (*PLAN_8B, "--write-stack", "staging", "--name", "chat"), EXIT_FAILED,
         (f"{STAGING}: writing it failed: No space left on device; the file is unchanged",),
         setup=_failing(os, "fsync", OSError(errno.ENOSPC, "No space left on device"))),
    # 18. Issue 21: --engine takes the spec's engines, SGLang among them, and a GPU-only engine is refused on TPUs.
    Case("plan-engine-unknown", "cli", (*PLAN_8B, "--engine", "tgi"), EXIT_INVALID,
         ("argument --engine: invalid choice: 'tgi' (choose from 'vllm', 'triton', 'sglang')",)),
    Case("size-engine-unknown", "cli", (*MODEL_8B, "--engine", "SGLang"), EXIT_INVALID,
         ("argument --engine: invalid choice: 'SGLang' (choose from 'vllm', 'triton', 'sglang')",)),
    Case("plan-sglang-on-tpu", "cli", (*PLAN_8B, "--engine", "sglang", "--accelerator", "tpu-v5e"), EXIT_INVALID,
         ("inferplane plan: --engine sglang (SGLang) serves NVIDIA GPUs; --accelerator tpu-v5e names only TPUs",),
         absent=("Candidates",)),
    Case("size-sglang-on-tpu", "cli", ("size", "--model", "qwen2.5-7b", "--accelerator", "tpu-v5e", "--engine",
         "sglang"), EXIT_INVALID, ("inferplane size: --engine sglang (SGLang) serves NVIDIA GPUs, not tpu-v5e",),
         absent=("output tokens/s",)),
    # 19. Issue 36: the newest keys. Gateway routing (gateway.routing, a tier's, a model's): policy, overlap_weight,
    # load_bound, nothing else (the hold and the prefix index are derived, not keys); an item's error is the only line.
    Case("routing-policy-unknown", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing.policy: Input should be 'prefix_aware' or 'least_request'"),
         edit=_set("gateway.routing.policy", "round_robin")),
    Case("routing-policy-unknown-preview", "validation", PREVIEW, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing.policy: Input should be 'prefix_aware' or 'least_request'"),
         edit=_set("gateway.routing.policy", "round_robin")),
    Case("routing-overlap-weight-above", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing.overlap_weight: Input should be less than or equal to 16"),
         edit=_set("gateway.routing.overlap_weight", 17)),
    Case("routing-overlap-weight-negative", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing.overlap_weight: Input should be greater than or equal to 0"),
         edit=_set("gateway.routing.overlap_weight", -1)),
    Case("routing-overlap-weight-nan", "numbers", SIZE, EXIT_INVALID, (DEV, f"{P}.gateway.routing.overlap_weight: "),
         text=_raw_stack(lambda t: t.replace("    gateway:\n", "    gateway:\n      routing: {overlap_weight: .nan}\n",
                                             1))),
    Case("routing-overlap-weight-text", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing.overlap_weight: Input should be a valid number"),
         edit=_set("gateway.routing.overlap_weight", "heavy")),
    Case("routing-load-bound-not-boolean", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing.load_bound: Input should be a valid boolean"),
         edit=_set("gateway.routing.load_bound", "maybe")),
    Case("routing-hold-not-boolean", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing.hold: Input should be a valid boolean"),
         edit=_set("gateway.routing.hold", "sometimes")),
    Case("routing-index-size-unknown-key", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing.index_size: unknown key"), edit=_set("gateway.routing.index_size", 4096)),
    Case("routing-not-a-mapping", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.gateway.routing: Input should be a valid dictionary"),
         edit=_set("gateway.routing", "prefix_aware")),
    Case("tier-routing-policy-unknown", "validation", ("size", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.gateway.tiers[0].routing.policy: Input should be 'prefix_aware' or 'least_request'"),
         stack="staging", edit=_set("gateway.tiers[0].routing", {"policy": "random"})),
    Case("model-routing-policy-unknown", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.models[0].routing.policy: Input should be 'prefix_aware' or 'least_request'"),
         absent=("Tuple should have at least",), edit=_set("models[0].routing", {"policy": "random"})),
    Case("model-routing-overlap-weight-preview", "numbers", PREVIEW, EXIT_INVALID,
         (DEV, f"{P}.models[0].routing.overlap_weight: Input should be less than or equal to 16"),
         absent=("Tuple should have at least",), edit=_set("models[0].routing", {"overlap_weight": 100})),
    # How long a stream's tokens gather into one chunk (the engines' --stream-interval).
    Case("model-stream-chunk-negative", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.models[0].stream_chunk_ms: Input should be greater than or equal to 0"),
         edit=_set("models[0].stream_chunk_ms", -5)),
    Case("model-stream-chunk-text-preview", "validation", PREVIEW, EXIT_INVALID,
         (DEV, f"{P}.models[0].stream_chunk_ms: Input should be a valid integer"),
         edit=_set("models[0].stream_chunk_ms", "fast")),
    # The cache's embedder: kind, a served model from the catalog, its replicas, CPUs, timeout and the threshold.
    Case("embedder-kind-unknown", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder.kind: Input should be 'wordllama', 'endpoint' or 'served'"), stack="prod",
         edit=_set("cache.embedder.kind", "onnx")),
    Case("embedder-served-without-model", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cache.embedder: a served embedder needs model, one of: all-minilm-l6-v2"),
         edit=_set("cache.embedder", {"kind": "served"})),
    Case("embedder-served-unknown-model", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder: model 'all-mpnet-base-v2' is not a catalog embedding model; known: "),
         stack="prod", edit=_set("cache.embedder.model", "all-mpnet-base-v2")),
    Case("embedder-served-unknown-model-preview", "validation", ("preview", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder: model 'all-mpnet-base-v2' is not a catalog embedding model"),
         stack="prod", edit=_set("cache.embedder.model", "all-mpnet-base-v2")),
    Case("embedder-served-with-url", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder: a served embedder's url is its in-cluster Service"), stack="prod",
         edit=_set("cache.embedder.url", "http://embed.ml:8000/v1")),
    Case("embedder-served-dimensions", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder: all-minilm-l6-v2 embeds in 384 dimensions, not 768"), stack="prod",
         edit=_set("cache.embedder.dimensions", 768)),
    Case("embedder-unknown-key", "validation", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder.threads: unknown key"), stack="prod", edit=_set("cache.embedder.threads", 4)),
    Case("embedder-replicas-zero", "numbers", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder.replicas: Input should be greater than or equal to 1"), stack="prod",
         edit=_set("cache.embedder.replicas", 0)),
    Case("embedder-replicas-above", "numbers", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder.replicas: Input should be less than or equal to 16"), stack="prod",
         edit=_set("cache.embedder.replicas", 17)),
    Case("embedder-cpus-fraction", "numbers", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder.cpus: Input should be a valid integer, got a number with a fractional part"),
         stack="prod", edit=_set("cache.embedder.cpus", 0.5)),
    Case("embedder-cpus-above", "numbers", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder.cpus: Input should be less than or equal to 16"), stack="prod",
         edit=_set("cache.embedder.cpus", 17)),
    Case("embedder-timeout-zero", "numbers", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder.timeout_ms: Input should be greater than or equal to 1"), stack="prod",
         edit=_set("cache.embedder.timeout_ms", 0)),
    Case("embedder-timeout-huge", "numbers", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.embedder.timeout_ms: Input should be less than or equal to 5000"), stack="prod",
         edit=_set("cache.embedder.timeout_ms", 10**400)),
    Case("embedder-threshold-below", "numbers", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.semantic_similarity_threshold: Input should be greater than 0.5"), stack="prod",
         edit=_set("cache.semantic_similarity_threshold", 0.3)),
    Case("embedder-threshold-text", "numbers", ("size", "--stack", "prod"), EXIT_INVALID,
         (PROD, f"{P}.cache.semantic_similarity_threshold: Input should be a valid number"), stack="prod",
         edit=_set("cache.semantic_similarity_threshold", "high")),
    # An embedder pod no catalog system node holds, and more pods than the nodes hold: exit 1 with the key to change.
    Case("embedder-pod-larger-than-any-node", "limits", ("size", "--stack", "prod"), EXIT_REFUSED,
         (f"{P}.cluster.system_instance_type: m7i.2xlarge system nodes cannot run cache-embedder pods (16 CPU",
          "fix: fewer cache.embedder.cpus (no catalog type fits)"), stack="prod",
         edit=_set("cache.embedder.cpus", 16)),
    Case("embedder-pod-larger-than-any-node-preview", "limits", ("preview", "--stack", "prod"), EXIT_REFUSED,
         ("fix: fewer cache.embedder.cpus (no catalog type fits)", "nothing was evaluated"), stack="prod",
         edit=_set("cache.embedder.cpus", 16)),
    Case("embedder-replicas-beyond-system-nodes", "limits", ("size", "--stack", "prod"), EXIT_REFUSED,
         (f"{P}.cluster.system_nodes: at the floor", "left without a node: cache-embedder x8",
          "fix: system_instance_type m7i.4xlarge with system_nodes 6"),
         stack="prod", edit=lambda d: _platform_of(d)["cache"]["embedder"].update(cpus=2, replicas=16)),
    # The system nodes: the EKS type and count, the GKE system pool's machine type.
    Case("system-instance-type-not-a-string", "validation", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cluster.system_instance_type: Input should be a valid string"),
         edit=_set("cluster.system_instance_type", 5)),
    Case("system-nodes-zero", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cluster.system_nodes: Input should be greater than or equal to 1"),
         edit=_set("cluster.system_nodes", 0)),
    Case("system-nodes-above", "numbers", SIZE, EXIT_INVALID,
         (DEV, f"{P}.cluster.system_nodes: Input should be less than or equal to 10"),
         edit=_set("cluster.system_nodes", 10**400)),
    Case("gke-system-machine-type-unknown", "validation", ("size", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.gcp.system_machine_type: 'n1-standard-4' is not a GKE system pool type of the catalog",
          "known: e2-standard-16"), stack="staging", edit=_set("gcp.system_machine_type", "n1-standard-4")),
    Case("gke-system-machine-type-unknown-preview", "validation", ("preview", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.gcp.system_machine_type: 'n1-standard-4' is not a GKE system pool type"), stack="staging",
         edit=_set("gcp.system_machine_type", "n1-standard-4")),
    Case("eks-type-as-gke-system-machine-type", "validation", ("size", "--stack", "staging"), EXIT_INVALID,
         (STAGING, f"{P}.gcp.system_machine_type: String should match pattern"), stack="staging",
         edit=_set("gcp.system_machine_type", "m7i.2xlarge")),
    Case("gke-system-node-too-small", "limits", ("size", "--stack", "staging"), EXIT_REFUSED,
         (f"{P}.gcp.system_machine_type: e2-standard-2 system nodes cannot run gateway pods",
          "fix: system_machine_type e2-standard-8"), stack="staging",
         edit=_set("gcp.system_machine_type", "e2-standard-2")),
    Case("gke-system-node-too-small-preview", "limits", ("preview", "--stack", "staging"), EXIT_REFUSED,
         (f"{P}.gcp.system_machine_type: e2-standard-2 system nodes cannot run gateway pods", "nothing was evaluated"),
         stack="staging", edit=_set("gcp.system_machine_type", "e2-standard-2")),
    # The served embedder's flag of `gateway run` (the routing and system node keys have none; issue 36's simulated
    # fleet command does not exist yet): refused before anything starts.
    Case("gateway-run-embedder-url-not-served", "cli",
         ("gateway", "run", "--stack", "dev", "--embedder-url", "http://127.0.0.1:8001/v1"), EXIT_INVALID,
         (f"inferplane gateway run: --embedder-url: {DEV}: cache.embedder is not a served model",)),
    Case("gateway-run-embedder-url-no-scheme", "cli",
         ("gateway", "run", "--stack", "prod", "--embedder-url", "127.0.0.1:8001"), EXIT_INVALID,
         ("inferplane gateway run: --embedder-url 127.0.0.1:8001: give the OpenAI base URL",), stack="prod"),
)
# fmt: on


def _platform_of(document: dict[str, Any]) -> dict[str, Any]:
    platform: dict[str, Any] = document["config"]["inferplane:platform"]
    return platform


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)`` in-process: (exit code, stdout, stderr); argparse's own exits count as codes."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_INVALID
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("case", CASES, ids=[f"{c.cls}:{c.id}" for c in CASES])
def test_bad_input_gets_its_verdict(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = copy_project(tmp_path)
    stack_file = project / "stacks" / f"Pulumi.{case.stack}.yaml"
    if case.edit is not None:
        document = yaml.safe_load(stack_file.read_text())
        case.edit(document)
        stack_file.write_text(yaml.safe_dump(document, allow_unicode=False))
    if isinstance(case.text, bytes):
        stack_file.write_bytes(case.text)
    elif case.text is not None:
        stack_file.write_text(case.text)
    if case.setup is not None:
        case.setup(project, monkeypatch)
    monkeypatch.chdir(project)
    argv = [arg.replace("{project}", str(project)) for arg in case.argv]
    if "--project-dir" not in argv:
        argv += ["--project-dir", str(project)]
    before = set(os.listdir(project))

    code, out, err = run_cli(argv, capsys)

    text = out + err
    assert "Traceback" not in text
    assert code == case.code, text
    for fragment in case.expect:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    for fragment in case.absent:
        assert fragment not in text
    for name in case.no_files:
        assert not (project / name).exists()
    # A refused or failed command leaves nothing behind: no output, no temporary file.
    assert set(os.listdir(project)) == before


def test_case_table_covers_every_class() -> None:
    classes = {c.cls for c in CASES}
    assert classes == {
        "yaml", "file", "output", "against", "validation", "tags", "numbers", "limits", "preflight", "terminal", "cli"
    }  # fmt: skip
    assert len({c.id for c in CASES}) == len(CASES)


def test_ml_platform_tag_previews_with_valid_kubernetes_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A valid AWS tag value that is no Kubernetes label value (spaces, '/') is derived, not passed on."""
    project = copy_project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.dev.yaml"
    document = yaml.safe_load(stack_file.read_text())
    _tags({"Team": "ML Platform EU", "cost center": "ml/dev"})(document)
    stack_file.write_text(yaml.safe_dump(document))
    plan_file = project / "plan.json"
    code, out, err = run_cli(
        ["preview", "--stack", "dev", "--project-dir", str(project), "--json", str(plan_file)], capsys
    )
    assert code == EXIT_OK, out + err
    plan = json.loads(plan_file.read_text())
    labelled = []
    for resource in plan["resources"]:
        if not resource["type"].startswith("kubernetes:"):
            continue
        labels = (resource["inputs"].get("metadata") or {}).get("labels") or {}
        if "Team" in labels:
            labelled.append(resource["name"])
            assert labels["Team"] == "ML_Platform_EU"
            assert labels["cost_center"] == "ml_dev"
        assert all(is_label_value(str(value)) for value in labels.values()), labels
    assert len(labelled) >= 6
    assert not list(project.glob(".plan.json.*"))


def test_kubernetes_labels_are_always_valid() -> None:
    labels = kubernetes_labels({"Team": "ML Platform (EU)", "a/b": "-x-", "example.com/owner": "@me", "k": ""})
    assert labels == {"Team": "ML_Platform__EU", "a/b": "x", "example.com/owner": "me", "k": ""}
    assert all(is_label_value(v) for v in labels.values())


def _size_as_nobody(argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` in a forked child that dropped root for ``nobody``: (exit code, stderr).

    The child keeps the modules already imported (nothing it needs lives under root's home); it writes stderr
    into a pipe and leaves with ``os._exit``, so nothing of the test process runs twice.
    """
    nobody = pwd.getpwnam("nobody")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            sys.stderr = os.fdopen(write_fd, "w")
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the child exits without closing anything
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else EXIT_INVALID
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        err = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err


def test_permission_denied_is_not_root_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real mode-000 file read by a user who is not root. As root (CI), the command runs as ``nobody`` in a forked
    child, over a copy of the project that ``nobody`` may traverse (pytest's own temporary folders are root's)."""
    if os.geteuid() != 0:
        project = copy_project(tmp_path)
        (project / "stacks" / "Pulumi.dev.yaml").chmod(0)
        code, _, err = run_cli(["size", "--stack", "dev", "--project-dir", str(project)], capsys)
    else:
        shared = Path(tempfile.mkdtemp(prefix="inferplane-denied-"))
        try:
            project = copy_project(shared)
            for directory in (shared, project, project / "stacks"):
                directory.chmod(0o755)
            for readable in (project / "Pulumi.yaml", *(project / "stacks").iterdir()):
                readable.chmod(0o644)
            (project / "stacks" / "Pulumi.dev.yaml").chmod(0)
            code, err = _size_as_nobody(["size", "--stack", "dev", "--project-dir", str(project)])
        finally:
            shutil.rmtree(shared, ignore_errors=True)
    assert code == EXIT_INVALID, err
    assert "stacks/Pulumi.dev.yaml: cannot read: Permission denied" in err
