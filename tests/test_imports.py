"""Import names that cannot collide, an import graph without circles, layers that depend one way, and a wheel that
installs only ``inferplane``.

Circles are checked between modules (the finest grain: a circle between two modules of one package is still a
circle), over every import wherever it stands; see :mod:`tests.import_graph` for what counts as an edge.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.import_graph import PROJECT_DIR, cycles, graph, imports, layer, modules

TOP_LEVEL_FOLDERS = tuple(sorted(p.name for p in (PROJECT_DIR / "inferplane").iterdir() if p.is_symlink()))
"""The top-level folders ``inferplane/`` links (components, infra, policies, tool, and any added later)."""

FORBIDDEN: dict[str, frozenset[str]] = {
    "components": frozenset({"infra", "tool", "policies"}),
    "infra": frozenset({"tool", "policies"}),
    "policies": frozenset({"infra", "tool"}),
    "processor": frozenset({"components", "infra", "tool", "policies"}),
}
"""Layer -> the layers it must not import. Data flows one way: the library (components) knows nothing of the program,
the tool or the policies; the program (infra) composes the library and knows nothing of the tool; the policy pack
judges resources by their types and inputs and knows nothing of the program or the tool."""


COMPONENT_SUBPACKAGES: dict[str, frozenset[str]] = {
    "catalog": frozenset(),
    "spec": frozenset({"catalog"}),
    "capacity": frozenset({"catalog", "spec"}),
    "aws": frozenset({"catalog", "spec", "capacity"}),
    "gcp": frozenset({"catalog", "spec", "capacity"}),
    "serving": frozenset({"catalog", "spec", "capacity", "aws", "gcp"}),
    "observability": frozenset({"catalog", "spec", "capacity", "aws", "gcp", "serving"}),
    "gateway": frozenset({"catalog", "spec", "capacity", "aws", "gcp", "serving", "observability"}),
    "platform": frozenset({"catalog", "spec", "capacity", "aws", "gcp", "serving", "observability", "gateway"}),
}
"""Subpackage of ``inferplane.components`` -> the subpackages it may import (besides itself). A DAG: the catalog at
the bottom, then the spec, capacity (sizing, performance, planning), the two clouds' foundations (siblings that never
import each other), the model servers, what watches and scales them, the gateway, and the platform's composition on
top. Each subpackage's ``__init__`` docstring says the same in words."""

RUNTIME_READERS = frozenset({"gateway"})
"""The component subpackages that may import the gateway's runtime (its pure configuration and metric names, which
the renderer fills in): only the gateway's own."""


def component_subpackage(module: str) -> str | None:
    """``aws`` for ``inferplane.components.aws.network``; None outside components or for its facade ``__init__``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["inferplane", "components"] else None


def subpackage_crossings(edges: dict[str, set[str]]) -> list[str]:
    """Every import between component subpackages that :data:`COMPONENT_SUBPACKAGES` does not allow, and every
    import of the gateway's runtime from a component subpackage other than :data:`RUNTIME_READERS`."""
    found: list[str] = []
    for module, targets in edges.items():
        source = component_subpackage(module)
        if source is None:
            continue
        allowed = COMPONENT_SUBPACKAGES.get(source, frozenset())
        for target in targets:
            into = component_subpackage(target)
            if into is not None and into != source and into not in allowed:
                found.append(f"{module} -> {target} ({source} may import {sorted(allowed) or 'nothing'})")
            elif layer(target) == "processor" and source not in RUNTIME_READERS:
                found.append(f"{module} -> {target} (only {sorted(RUNTIME_READERS)} read the runtime)")
    return sorted(found)


def test_every_layer_is_read() -> None:
    found = modules()
    assert {"components", "infra", "policies", "tool"} <= set(TOP_LEVEL_FOLDERS)
    assert {layer(name) for name in found} == {None, *TOP_LEVEL_FOLDERS}
    assert "inferplane.components.catalog.models" in found
    assert "inferplane.tool.preview.engine" in found


def test_no_import_circle_between_modules() -> None:
    assert cycles(graph()) == []


def test_a_circle_is_found(tmp_path: Path) -> None:
    package = tmp_path / "inferplane"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from inferplane.sub import a\n")
    (package / "sub" / "a.py").write_text("def f() -> None:\n    from . import b\n")
    (package / "sub" / "b.py").write_text("from inferplane.sub.a import f\n")
    (package / "c.py").write_text("import inferplane.sub.b\n")
    found = modules(package)
    assert cycles(graph(found)) == [["inferplane.sub.a", "inferplane.sub.b"]]


def test_nothing_imports_the_top_level_folders_by_their_bare_names() -> None:
    bare = [
        f"{item.module}:{item.line} imports {item.target}"
        for name, path in modules().items()
        for item in imports(name, path)
        if item.target.split(".")[0] in TOP_LEVEL_FOLDERS
    ]
    assert bare == []


def test_layers_depend_one_way() -> None:
    crossings = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        for target in targets
        if layer(target) in FORBIDDEN.get(layer(module) or "", frozenset())
    )
    assert crossings == []


def test_the_library_is_its_subpackages() -> None:
    """Every module of ``components`` lives in one of the known subpackages; only the facade sits at the top."""
    flat = sorted(name for name in modules() if name.startswith("inferplane.components.") and name.count(".") == 2)
    assert flat == sorted(f"inferplane.components.{name}" for name in COMPONENT_SUBPACKAGES)
    assert {component_subpackage(name) for name in modules()} == {None, *COMPONENT_SUBPACKAGES}


def test_every_subpackage_says_what_it_owns_and_may_import() -> None:
    for name, allowed in COMPONENT_SUBPACKAGES.items():
        doc = ast.get_docstring(ast.parse((PROJECT_DIR / "components" / name / "__init__.py").read_text()))
        assert doc is not None, name
        assert "May import:" in doc, name
        said = doc[doc.index("May import:") :]
        if said.startswith("May import: every"):  # the gateway and the platform, which sit near the top
            continue
        named = {other for other in COMPONENT_SUBPACKAGES if f"components.{other}`" in said}
        assert named >= allowed, (name, sorted(allowed - named))


def test_subpackages_depend_one_way() -> None:
    assert subpackage_crossings(graph()) == []


def test_the_subpackage_table_is_acyclic_and_layered() -> None:
    edges = {name: set(allowed) for name, allowed in COMPONENT_SUBPACKAGES.items()}
    assert cycles(edges) == []
    assert not COMPONENT_SUBPACKAGES["aws"] & {"gcp"} and not COMPONENT_SUBPACKAGES["gcp"] & {"aws"}
    for name, allowed in COMPONENT_SUBPACKAGES.items():
        # Layered: what a subpackage may import, it may import transitively (no rule is bypassed through another).
        for lower in allowed:
            assert COMPONENT_SUBPACKAGES[lower] <= allowed, (name, lower)


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("catalog", "spec", False),
        ("spec", "capacity", False),
        ("aws", "gcp", False),
        ("gcp", "aws", False),
        ("serving", "observability", False),
        ("observability", "gateway", False),
        ("capacity", "serving", False),
        ("gateway", "platform", False),
        ("serving", "aws", True),
        ("platform", "gateway", True),
    ],
)
def test_a_subpackage_crossing_is_named(tmp_path: Path, source: str, target: str, allowed: bool) -> None:
    package = tmp_path / "inferplane"
    for folder in ("components", f"components/{source}", f"components/{target}"):
        (package / folder).mkdir(parents=True, exist_ok=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "components" / source / "a.py").write_text(f"from ..{target} import b\n")
    (package / "components" / target / "b.py").write_text("")
    crossings = subpackage_crossings(graph(modules(package)))
    edge = f"inferplane.components.{source}.a -> inferplane.components.{target}.b"
    assert [c.startswith(edge) for c in crossings] == ([] if allowed else [True])


def test_only_the_gateway_subpackage_reads_the_runtime(tmp_path: Path) -> None:
    package = tmp_path / "inferplane"
    for folder in ("components", "components/serving", "components/gateway", "processor"):
        (package / folder).mkdir(parents=True, exist_ok=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "processor" / "config.py").write_text("")
    (package / "components" / "serving" / "a.py").write_text("from inferplane.processor import config\n")
    (package / "components" / "gateway" / "b.py").write_text("from inferplane.processor import config\n")
    assert subpackage_crossings(graph(modules(package))) == [
        "inferplane.components.serving.a -> inferplane.processor.config (only ['gateway'] read the runtime)"
    ]


def test_a_crossing_is_named(tmp_path: Path) -> None:
    package = tmp_path / "inferplane"
    for folder in ("components", "tool"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "components" / "x.py").write_text("from ..tool import cli\n")
    (package / "tool" / "cli.py").write_text("")
    edges = graph(modules(package))
    assert edges["inferplane.components.x"] == {"inferplane.tool.cli"}
    assert layer("inferplane.tool.cli") in FORBIDDEN["components"]


CONSUMER_PROGRAM = """
import components
import inferplane.components
from components.network import NAME
from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.components.aws.network import Network

print(components.__file__)
print(inferplane.components.__file__)
print(NAME, PlatformSpec.__name__, Network.__name__)
"""


def test_a_consumer_with_its_own_components_package_imports_both(tmp_path: Path) -> None:
    consumer = tmp_path / "consumer"
    (consumer / "components").mkdir(parents=True)
    (consumer / "components" / "__init__.py").write_text('"""The consumer\'s own components."""\n')
    (consumer / "components" / "network.py").write_text('NAME = "consumer-network"\n')
    (consumer / "__main__.py").write_text(CONSUMER_PROGRAM)
    result = subprocess.run(
        [sys.executable, "__main__.py"], cwd=consumer, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    own, ours, names = result.stdout.splitlines()
    assert Path(own) == consumer / "components" / "__init__.py"
    assert Path(ours).resolve() == PROJECT_DIR / "components" / "__init__.py"
    assert names == "consumer-network PlatformSpec Network"


def test_the_bare_name_components_is_not_installed(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import components"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "No module named 'components'" in result.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The distribution's wheel, built from a copy of the source (the build writes build/ and *.egg-info)."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(PROJECT_DIR / name, source / name)
    for name in ("inferplane", *TOP_LEVEL_FOLDERS):
        shutil.copytree(PROJECT_DIR / name, source / name, symlinks=True, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", str(source), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (built,) = out.glob("inferplane-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_installs_only_inferplane(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"inferplane"}
    for path in (
        "inferplane/__init__.py",
        "inferplane/py.typed",
        "inferplane/components/__init__.py",
        "inferplane/components/py.typed",
        "inferplane/components/spec/platform_spec.py",
        "inferplane/components/catalog/prices.toml",
        "inferplane/infra/program.py",
        "inferplane/policies/PulumiPolicy.yaml",
        "inferplane/tool/cli.py",
        "inferplane/tool/preview/engine.py",
    ):
        assert path in names, path
    every_module = {f"{name.replace('.', '/')}" for name in modules()}
    packaged = {name.removesuffix(".py").removesuffix("/__init__") for name in names if name.endswith(".py")}
    assert every_module == packaged


def test_the_wheel_declares_the_version_and_the_command(wheel: zipfile.ZipFile) -> None:
    (metadata,) = (n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    (entry_points,) = (n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    version = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert f"\nVersion: {version}\n" in wheel.read(metadata).decode()
    assert "inferplane = inferplane.tool.cli:main" in wheel.read(entry_points).decode()
