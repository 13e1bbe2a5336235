"""Any Pulumi project's program, run as the ``pulumi`` CLI runs it, and the config its ``Pulumi.yaml`` declares.

The Python language host's ``pulumi-language-python-exec`` runs ``runpy.run_path(<main>, run_name="__main__")``
inside ``run_in_stack``, where ``<main>`` is ``Pulumi.yaml``'s ``main`` (default: the project directory). For a
directory, ``runpy`` runs its ``__main__.py`` with the directory first on ``sys.path``, so the project imports its own
modules (a ``components/`` package of its own included) beside ``inferplane``'s.

``Pulumi.yaml``'s ``config`` block declares keys (``name: {type, description, secret, default}``; a bare name is in
the project's namespace): the CLI applies a declared ``default`` to a stack that lacks the key, and the offline
preview stands a ``[secret]`` placeholder in for a declared secret that the stack lacks (it has no way to ask).
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferplane.tool.stackfile import PROJECT_FILE, ProjectFile, StackFileError


@dataclass(frozen=True)
class ConfigDeclarations:
    """What ``Pulumi.yaml``'s ``config`` block declares, with full (namespaced) keys."""

    defaults: Mapping[str, Any]
    """Key -> the declared ``default``."""
    secrets: tuple[str, ...]
    """Keys declared ``secret: true``, in file order."""


def project_main(project: ProjectFile) -> Path:
    """The program ``Pulumi.yaml``'s ``main`` names (default: the project directory), checked to be runnable.

    Only a Python project's own program runs: ``runtime`` must be ``python`` (a Node.js ``index.js`` is no Python),
    and ``main`` must resolve, symlinks followed, inside the project to a directory with a ``__main__.py`` or to a
    ``.py`` file, each a regular file (a FIFO would block the read, ``/dev/zero`` would never end it).
    """
    _check_python_runtime(project)
    main = project.document.get("main") or "."
    if not isinstance(main, str):
        raise StackFileError(PROJECT_FILE, "must be a path", key="main")
    root = project.project_dir.resolve()
    try:
        path = (root / main).resolve()
        if not path.exists():
            raise StackFileError(PROJECT_FILE, f"{main} does not exist", key="main")
        if not path.is_relative_to(root):
            raise StackFileError(PROJECT_FILE, f"{main} resolves outside the project ({path})", key="main")
        if path.is_dir():
            program = (path / "__main__.py").resolve()
            if not program.is_file():
                raise StackFileError(PROJECT_FILE, f"{main} has no __main__.py to run", key="main")
            if not program.is_relative_to(root):
                raise StackFileError(
                    PROJECT_FILE, f"{main.rstrip('/')}/__main__.py resolves outside the project", key="main"
                )
        elif not (path.is_file() and path.suffix == ".py"):
            raise StackFileError(PROJECT_FILE, f"{main} is neither a directory nor a regular .py file", key="main")
    except (OSError, RuntimeError, ValueError) as exc:  # a loop of symlinks, a NUL byte, an unreadable folder
        raise StackFileError(PROJECT_FILE, f"{main} cannot be read ({type(exc).__name__})", key="main") from None
    return path


def _check_python_runtime(project: ProjectFile) -> None:
    """``runtime`` (``python`` or ``{name: python, options: ...}``) names Python; the Pulumi CLI requires the key
    (https://www.pulumi.com/docs/iac/concepts/projects/project-file/: ``runtime`` is required)."""
    runtime = project.document.get("runtime")
    name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if name != "python":
        shown = "missing" if name is None else repr(name)
        raise StackFileError(
            PROJECT_FILE, f"the offline preview runs Python programs only (runtime: python), not {shown}", key="runtime"
        )


def config_declarations(project: ProjectFile) -> ConfigDeclarations:
    """The ``config`` block of ``Pulumi.yaml``; empty when there is none."""
    block = project.document.get("config") or {}
    if not isinstance(block, dict):
        raise StackFileError(PROJECT_FILE, "must be a mapping of key to declaration", key="config")
    defaults: dict[str, Any] = {}
    secrets: list[str] = []
    for name, declaration in block.items():
        key = name if ":" in str(name) else f"{project.name}:{name}"
        if isinstance(declaration, dict):
            if "default" in declaration:
                defaults[key] = declaration["default"]
            if declaration.get("secret") is True:
                secrets.append(key)
        else:  # the short form, `key: value`, is a default
            defaults[key] = declaration
    return ConfigDeclarations(defaults=defaults, secrets=tuple(secrets))


def project_program(project: ProjectFile) -> Callable[[], None]:
    """The project's program as a function the mock engine can run (once per evaluation).

    Modules the program loads from its own directory are forgotten afterwards, so another project evaluated in the
    same process (with its own ``components`` package, say) imports its own; ``inferplane`` stays loaded.
    """
    main = project_main(project)
    home = main if main.is_dir() else main.parent

    def program() -> None:
        before = set(sys.modules)
        try:
            runpy.run_path(str(main), run_name="__main__")
        finally:
            for name in set(sys.modules) - before:
                if name == "inferplane" or name.startswith("inferplane."):
                    continue
                file = getattr(sys.modules[name], "__file__", None)
                if file and Path(file).resolve().is_relative_to(home):
                    del sys.modules[name]

    return program
