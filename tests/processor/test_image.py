"""The processor ships alone in its image: it imports nothing of inferplane's infrastructure code, and the image's
layout (``inferplane/__init__.py`` plus ``processor/`` as ``inferplane/processor``) is enough to run it."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from inferplane.components.gateway import renderer as gc
from tests.conftest import PROJECT_DIR

PROCESSOR = PROJECT_DIR / "processor"
FORBIDDEN = ("pulumi", "inferplane.components", "inferplane.infra", "inferplane.tool", "inferplane.policies")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_processor_imports_no_infrastructure_code() -> None:
    for path in PROCESSOR.glob("*.py"):
        bad = {n for n in _imports(path) if n.split(".")[0] in {"components", "infra", "tool", "policies"}}
        bad |= {n for n in _imports(path) if any(n == f or n.startswith(f"{f}.") for f in FORBIDDEN)}
        assert not bad, f"{path.name} imports {bad}"


def test_the_image_layout_runs_the_processor(tmp_path: Path) -> None:
    """What processor/Dockerfile copies, and nothing else: the processor imports and parses its arguments."""
    app = tmp_path / "app"
    (app / "inferplane").mkdir(parents=True)
    shutil.copy(PROJECT_DIR / "inferplane" / "__init__.py", app / "inferplane" / "__init__.py")
    shutil.copytree(PROCESSOR, app / "inferplane" / "processor", ignore=shutil.ignore_patterns("__pycache__"))
    blocked = ", ".join(repr(m) for m in ("pulumi", "pulumi_kubernetes", "inferplane.components"))
    code = (
        f"import sys; sys.path.insert(0, {str(app)!r})\n"
        f"for name in ({blocked},): sys.modules[name] = None\n"
        "import inferplane, inferplane.processor.server, inferplane.processor.supervisor\n"
        "import inferplane.processor.__main__ as main\n"
        f"assert inferplane.__file__.startswith({str(app)!r}), inferplane.__file__\n"
        "main.main(['--help'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "--config" in result.stdout


def test_the_dockerfile_installs_the_gateway_extra() -> None:
    dockerfile = (PROCESSOR / "Dockerfile").read_text()
    assert "['project']['optional-dependencies']['gateway']" in dockerfile
    extra = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gateway"]
    assert {re.split(r"[<>=~]", r)[0] for r in extra} >= {"grpcio", "xds-protos", "redis", "tokenizers", "pydantic"}
    assert "USER 65532:65532" in dockerfile
    assert "synonyms.keep_only_read_files()" in dockerfile  # WordNet's unread databases left out of the image


def test_the_publish_workflow_checks_the_pinned_version() -> None:
    workflow = (PROJECT_DIR / ".github" / "workflows" / "processor-image.yml").read_text()
    assert 'tags: ["processor-v*"]' in workflow
    version_line = f'PROCESSOR_VERSION = "{gc.PROCESSOR_VERSION}"'
    assert version_line in (PROJECT_DIR / "components" / "gateway" / "renderer.py").read_text().splitlines()
    assert f"ghcr.io/inferplane/inferplane-processor:{gc.PROCESSOR_VERSION}" == gc.PROCESSOR_IMAGE
