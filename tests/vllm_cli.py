"""vLLM's command-line definitions, read (never imported or executed) from the pinned release's source with ``ast``.

vLLM builds its parser from config dataclasses: ``EngineArgs.add_cli_args`` in ``vllm/engine/arg_utils.py`` calls
``group.add_argument("--flag", **X_kwargs["field"])`` where ``X_kwargs = get_kwargs(SomeConfig)``, and
``_compute_kwargs`` turns each field's annotation into argparse settings: a config dataclass becomes JSON, ``bool``
a ``BooleanOptionalAction`` pair, a ``Literal`` its choices, ``int``/``float`` a typed value. The server's own
flags are the fields of ``FrontendArgs`` (``vllm/entrypoints/launchers/cli_args.py``), one ``--field-name`` each.
This module mirrors those rules over the syntax tree so an argument list can be checked against exactly the
version pinned, without installing vLLM (and torch).

Literal choices are enforced even where vLLM's annotation also admits ``str`` (``quantization``,
``cache_dtype``): argparse lets any string through there, but the engine's config validation then refuses values
outside the Literal, which is the crash-loop this check exists to prevent.
"""

from __future__ import annotations

import ast
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Kind = Literal["bool", "store_true", "json", "int", "float", "choice", "many", "str"]

_ALIAS_SOURCES = ("vllm/config", "vllm/model_executor/layers/quantization/__init__.py")
_CLASS_SOURCES = ("vllm/config", "vllm/entrypoints/launchers/cli_args.py")


@dataclass(frozen=True)
class Flag:
    """One command-line option as vLLM defines it."""

    names: tuple[str, ...]
    kind: Kind
    choices: tuple[str, ...] = ()
    json_class: str | None = None
    source: str = ""


@dataclass
class VllmCli:
    """Every option of ``vllm serve`` in one release, and the config classes behind them."""

    version: str
    flags: dict[str, Flag] = field(default_factory=dict)
    classes: dict[str, dict[str, ast.expr]] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)

    def literal_values(self, node: ast.expr) -> tuple[str, ...]:
        """Values of ``Literal[...]`` in an annotation, following module-level aliases and nested Literals."""
        values: list[str] = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Subscript) and _name(sub.value) == "Literal":
                elements = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
                for element in elements:
                    if isinstance(element, ast.Constant) and isinstance(element.value, str):
                        values.append(element.value)
                    elif isinstance(element, ast.Name) and element.id in self.aliases:
                        values += self.literal_values(self.aliases[element.id])
            elif isinstance(sub, ast.Name) and sub.id in self.aliases:
                values += self.literal_values(self.aliases[sub.id])
        return tuple(dict.fromkeys(values))

    def classify(self, annotation: ast.expr, source: str, names: tuple[str, ...]) -> Flag:
        """The argparse behaviour ``_compute_kwargs`` derives from a field annotation."""
        referenced = {_name(n) for n in ast.walk(annotation) if isinstance(n, (ast.Name, ast.Attribute))}
        dataclasses = sorted(r for r in referenced if r in self.classes)
        if dataclasses:
            return Flag(names, "json", json_class=dataclasses[0], source=source)
        if "bool" in referenced:
            return Flag(names, "bool", source=source)
        choices = self.literal_values(annotation)
        if choices:
            return Flag(names, "choice", choices=choices, source=source)
        if referenced & {"list", "tuple", "set"}:
            # ``collection_to_kwargs``: nargs "+", one or more values up to the next flag.
            return Flag(names, "many", source=source)
        if "int" in referenced:
            return Flag(names, "int", source=source)
        if "float" in referenced:
            return Flag(names, "float", source=source)
        return Flag(names, "str", source=source)

    def add(self, flag: Flag) -> None:
        for name in flag.names:
            self.flags[name] = flag
            if flag.kind == "bool" and name.startswith("--"):
                self.flags[f"--no-{name[2:]}"] = flag


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _python_files(root: Path, entry: str) -> list[Path]:
    path = root / entry
    return sorted(path.glob("*.py")) if path.is_dir() else [path]


def _fields(cli: VllmCli, class_name: str) -> dict[str, ast.expr]:
    return cli.classes.get(class_name, {})


@functools.cache
def load(root: Path) -> VllmCli:
    """Read the definitions under ``root`` (a directory holding ``vllm/...`` and ``vllm-<version>.dist-info``)."""
    metadata = next(root.glob("vllm-*.dist-info/METADATA"))
    version = next(
        line.split(":", 1)[1].strip() for line in metadata.read_text().splitlines() if line.startswith("Version:")
    )
    cli = VllmCli(version=version)
    bases: dict[str, list[str]] = {}
    for entry in _ALIAS_SOURCES:
        for path in _python_files(root, entry):
            for node in ast.parse(path.read_text()).body:
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Subscript)
                    and _name(node.value.value) == "Literal"
                ):
                    cli.aliases[node.targets[0].id] = node.value
    for entry in _CLASS_SOURCES:
        for path in _python_files(root, entry):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    cli.classes[node.name] = {
                        item.target.id: item.annotation
                        for item in node.body
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    }
                    bases[node.name] = [_name(b) for b in node.bases]
    for name, parents in bases.items():
        for parent in parents:
            for key, value in _fields(cli, parent).items():
                cli.classes[name].setdefault(key, value)

    _read_engine_args(cli, root / "vllm/engine/arg_utils.py")
    for name, annotation in _fields(cli, "FrontendArgs").items():
        flag = f"--{name.replace('_', '-')}"
        cli.add(cli.classify(annotation, f"FrontendArgs.{name}", (flag,)))
    return cli


def _read_engine_args(cli: VllmCli, path: Path) -> None:
    tree = ast.parse(path.read_text())
    function = next(
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "add_cli_args"
    )
    kwargs_of: dict[str, str] = {}
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and _name(node.value.func) == "get_kwargs"
            and node.value.args
        ):
            kwargs_of[node.targets[0].id] = _name(node.value.args[0])
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and _name(node.func) == "add_argument"):
            continue
        names = tuple(str(a.value) for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-"))
        if not names:
            continue
        explicit = {k.arg: k.value for k in node.keywords if k.arg is not None}
        spread = [k.value for k in node.keywords if k.arg is None]
        for value in list(spread):
            if isinstance(value, ast.Dict):
                spread += [v for k, v in zip(value.keys, value.values, strict=True) if k is None]
        source: tuple[str, str] | None = None
        for value in spread:
            if (
                isinstance(value, ast.Subscript)
                and isinstance(value.value, ast.Name)
                and value.value.id in kwargs_of
                and isinstance(value.slice, ast.Constant)
            ):
                source = (kwargs_of[value.value.id], str(value.slice.value))
        action = explicit.get("action")
        if action is not None and _name(action) == "BooleanOptionalAction":
            cli.add(Flag(names, "bool", source="explicit"))
        elif isinstance(action, ast.Constant) and action.value == "store_true":
            cli.add(Flag(names, "store_true", source="explicit"))
        elif "choices" in explicit and isinstance(explicit["choices"], (ast.List, ast.Tuple)):
            values = tuple(str(e.value) for e in explicit["choices"].elts if isinstance(e, ast.Constant))
            cli.add(Flag(names, "choice", choices=values, source="explicit"))
        elif source is not None and source[1] in _fields(cli, source[0]):
            cli.add(cli.classify(_fields(cli, source[0])[source[1]], f"{source[0]}.{source[1]}", names))
        elif "type" in explicit and _name(explicit["type"]) in ("int", "float"):
            cli.add(Flag(names, _name(explicit["type"]), source="explicit"))  # type: ignore[arg-type]
        else:
            cli.add(Flag(names, "str", source="explicit"))


def check(cli: VllmCli, args: list[str]) -> list[str]:
    """Problems ``vllm serve`` (this release) would have with ``args``; empty when it accepts them all."""
    problems: list[str] = []
    if not args or args[0].startswith("-"):
        return ["the first argument must be the model (the image's entrypoint is `vllm serve`)"]
    i = 1
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            problems.append(f"unexpected positional argument {token!r}")
            i += 1
            continue
        name, _, inline = token.partition("=")
        flag = cli.flags.get(name)
        if flag is None:
            problems.append(f"{name}: not an argument of vLLM {cli.version}")
            i += 1
            continue
        if flag.kind in ("bool", "store_true"):
            if inline:
                problems.append(f"{name}: takes no value")
            i += 1
            continue
        if flag.kind == "many" and not inline:
            values = []
            while i + 1 < len(args) and not args[i + 1].startswith("--"):
                values.append(args[i + 1])
                i += 1
            i += 1
            if not values:
                problems.append(f"{name}: missing value")
            continue
        if inline:
            value = inline
            i += 1
        elif i + 1 < len(args):
            value = args[i + 1]
            i += 2
        else:
            problems.append(f"{name}: missing value")
            break
        problems += _check_value(cli, name, flag, value)
    return problems


def _check_value(cli: VllmCli, name: str, flag: Flag, value: str) -> list[str]:
    if flag.kind == "int":
        try:
            int(value)
        except ValueError:
            return [f"{name}: {value!r} is not an integer"]
    elif flag.kind == "float":
        try:
            float(value)
        except ValueError:
            return [f"{name}: {value!r} is not a number"]
    elif flag.kind == "choice" and value not in flag.choices:
        return [f"{name}: {value!r} is not one of {', '.join(flag.choices)}"]
    elif flag.kind == "json":
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            return [f"{name}: not JSON ({exc})"]
        if not isinstance(decoded, dict):
            return [f"{name}: must be a JSON object"]
        assert flag.json_class is not None
        fields = _fields(cli, flag.json_class)
        problems = []
        for key, item in decoded.items():
            if key not in fields:
                problems.append(f"{name}: {key!r} is not a field of {flag.json_class}")
                continue
            choices = cli.literal_values(fields[key])
            if choices and isinstance(item, str) and item not in choices:
                problems.append(f"{name}: {key}={item!r} is not one of {', '.join(choices)}")
        return problems
    return []
