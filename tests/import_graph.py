"""The import graph of the ``inferplane`` package, read from the source with :mod:`ast` (nothing is imported).

Every ``import`` and ``from ... import`` in every module counts, wherever it stands (module level, a function body,
an ``if TYPE_CHECKING:`` block): a lazy import is still a dependency, and the layering rule is about dependencies.
An edge goes to the most specific module named: ``from inferplane.tool.preview import engine`` is an edge to
``inferplane.tool.preview.engine``, ``from inferplane.tool.preview.model import Plan`` one to
``inferplane.tool.preview.model``. The implicit import of a parent package (Python runs ``inferplane/tool/__init__``
before ``inferplane.tool.cli``) is not an edge: a package's ``__init__`` that re-exports its modules would otherwise
be in a circle with each of them by construction.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
PACKAGE = "inferplane"


@dataclass(frozen=True)
class Import:
    """One import statement's target, as written and as resolved to a module of the project (or not)."""

    module: str
    """The importing module, e.g. ``inferplane.tool.cli``."""
    target: str
    """The absolute name imported: the module for ``import x.y``, the module or module.name for ``from``."""
    line: int


def modules(root: Path = PROJECT_DIR / PACKAGE) -> dict[str, Path]:
    """Every module under the package (following the ``inferplane/`` symlinks), by dotted name."""
    found: dict[str, Path] = {}

    def walk(directory: Path, prefix: str) -> None:
        for path in sorted(directory.iterdir()):
            if path.is_dir() and (path / "__init__.py").is_file():
                walk(path, f"{prefix}.{path.name}")
            elif path.suffix == ".py":
                name = prefix if path.stem == "__init__" else f"{prefix}.{path.stem}"
                found[name] = path

    walk(root, PACKAGE)
    return found


def imports(name: str, path: Path) -> Iterator[Import]:
    """The imports in module ``name`` (at ``path``), relative ones made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base = ".".join(base_parts[: len(base_parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                yield Import(name, f"{source}.{alias.name}", node.lineno)


def resolve(target: str, known: dict[str, Path]) -> str | None:
    """The project module ``target`` names: itself, or the longest known prefix (``module.name``); else None."""
    candidate = target
    while candidate:
        if candidate in known:
            return candidate
        candidate = candidate.rpartition(".")[0]
    return None


def graph(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    known = known if known is not None else modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for item in imports(name, path):
            target = resolve(item.target, known)
            if target not in (None, name):
                edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def layer(module: str) -> str | None:
    """The top-level folder a module lives in (``components``, ``infra``, ``policies``, ``tool``), or None for the
    root package's own modules (``inferplane``, and ``inferplane.__main__``, the component provider's entry point)."""
    parts = module.split(".")
    if len(parts) < 3 and (len(parts) == 1 or parts[1] == "__main__"):
        return None
    return parts[1] if parts[0] == PACKAGE else None
