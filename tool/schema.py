"""The multi-language package: the typed inputs of :class:`~inferplane.components.platform.Platform`, generated
from the pydantic spec, and the Pulumi package schema the SDK infers from them.

One source of truth: :class:`~inferplane.components.spec.platform_spec.PlatformSpec`. Pulumi's schema inference
(``pulumi.provider.experimental``) reads type annotations: TypedDicts of plain types, lists, string-keyed dicts,
``NotRequired`` and ``Enum`` subclasses, with property docs taken from the docstring under each annotation. It does
not read pydantic models, ``Literal`` or ``tuple``. :func:`generate_args_module` therefore writes
``components/platform/args.py`` from the pydantic models (``Literal`` -> ``Enum``, ``tuple`` -> ``list``, a field
with a default -> ``NotRequired``, ``Field(description=...)`` -> the property docstring). The file is committed;
``inferplane schema --write`` regenerates it and ``schema.json``, and a test fails when either is stale.

Both are generated in this process (:func:`generate`), the schema from the new ``args.py`` text loaded as a module of
its own, so nothing is imported from the working directory (``python -m`` would put it first on ``sys.path``), and
``--write`` renames both into place only once both exist. ``--write`` and ``--check`` act on the project found from
the working directory (or ``--project-dir``), which must be the tree this inferplane runs from: another checkout's
files would be judged against this one's spec.
"""

from __future__ import annotations

import argparse
import json
import linecache
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pulumi.provider.experimental.util import camel_case
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rich.console import Console

from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.files import OutputFiles, UnreadableFileError, UnwritableFileError, read_regular_file
from inferplane.tool.stackfile import find_project_dir, printable

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
"""The source tree this inferplane runs from (``inferplane/`` links its folders)."""
ARGS_PATH = Path("components") / "platform" / "args.py"
"""The generated module of the Platform component's input types, in a tree."""
SCHEMA_PATH = Path("schema.json")
"""The committed package schema (without ``version``, which is the distribution's, stamped when the provider runs)."""
ARGS_MODULE = PACKAGE_ROOT / ARGS_PATH
ARGS_MODULE_NAME = "inferplane.components.platform.args"
"""The imported module of those types (maybe an older text than the spec generates now)."""
SCHEMA_FILE = PACKAGE_ROOT / SCHEMA_PATH
MAX_GENERATED_BYTES = 16 * 1024 * 1024
"""``--check`` reads at most this much of each committed file (both are well under 1 MB)."""

PLATFORM_ARGS = "PlatformArgs"
EXTRA_PLATFORM_INPUTS: tuple[tuple[str, str, str], ...] = (
    (
        "hf_token",
        "pulumi.Input[str]",
        "Hugging Face token the model servers download gated weights with; pass it as a secret. In the stack's own "
        "program this is the ``inferplane:hfToken`` secret config.",
    ),
)
"""Inputs of the Platform component that are not part of the spec: (python name, annotation, description)."""


def _type_name(model: type[BaseModel]) -> str:
    if model is PlatformSpec:
        return PLATFORM_ARGS
    return model.__name__.removesuffix("Spec") + "Args"


class _Generator:
    """Walks the spec's models depth first, emitting one TypedDict per model and one Enum per ``Literal``."""

    def __init__(self) -> None:
        self.enums: dict[str, tuple[str, ...]] = {}
        self.classes: dict[str, str] = {}
        self.order: list[str] = []

    def enum_for(self, literal: Any, model: type[BaseModel], field: str) -> str:
        values = tuple(str(v) for v in get_args(literal))
        module = sys.modules[model.__module__]
        aliases = [name for name, value in vars(module).items() if value == literal and not name.startswith("_")]
        name = aliases[0] if aliases else model.__name__.removesuffix("Spec") + _pascal(field)
        known = self.enums.get(name)
        if known is not None and known != values:
            raise ValueError(f"two enums would be called {name}: {known} and {values}")
        if known is None:
            self.enums[name] = values
            self.order.append(name)
        return name

    def annotation(self, hint: Any, model: type[BaseModel], field: str) -> str:
        origin = get_origin(hint)
        if origin is Annotated:  # constrained types (``Name``): the constraints stay with the spec's validation
            return self.annotation(get_args(hint)[0], model, field)
        if hint in (str, int, float, bool):
            return str(hint.__name__)
        if origin is Literal:
            return self.enum_for(hint, model, field)
        if origin in (typing.Union, types.UnionType):
            members = [a for a in get_args(hint) if a is not type(None)]
            if len(members) != 1:
                raise ValueError(f"{model.__name__}.{field}: unions other than X | None cannot be inputs")
            return self.annotation(members[0], model, field)
        if origin is tuple:
            items = get_args(hint)
            if len(items) != 2 or items[1] is not Ellipsis:
                raise ValueError(f"{model.__name__}.{field}: only tuple[X, ...] maps to a list")
            if get_origin(_unannotated(items[0])) is Literal:
                # The SDK's Construct maps a list whose items are a named type as objects, turning enum strings into
                # {} (pulumi 3.272, ComponentProvider.map_input_properties): lists of choices stay strings.
                return "list[str]"
            return f"list[{self.annotation(items[0], model, field)}]"
        if origin is dict:
            key, value = get_args(hint)
            # A map keyed by choices (``dict[ImageName, ...]``) is a map of strings to the schema; the spec's own
            # validation (run before anything registers) refuses a key outside the choices.
            if key is not str and get_origin(_unannotated(key)) is not Literal:
                raise ValueError(f"{model.__name__}.{field}: map keys must be strings")
            return f"dict[str, {self.annotation(value, model, field)}]"
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            return self.model(hint)
        raise ValueError(f"{model.__name__}.{field}: no schema type for {hint!r}")

    def model(self, model: type[BaseModel]) -> str:
        name = _type_name(model)
        if name in self.classes:
            return name
        lines = [f"class {name}(TypedDict):", _docstring(_doc(model), "    "), ""]
        for field, info in model.model_fields.items():
            lines.append(f"    {field}: {self.field_annotation(info, model, field)}")
            description = info.description or ""
            choices = _list_choices(info.annotation)
            if choices:
                description = f"{description} Each one of: {', '.join(choices)}.".strip()
            if description:
                lines.append(_docstring(description, "    "))
        if model is PlatformSpec:
            for field, annotation, description in EXTRA_PLATFORM_INPUTS:
                lines.append(f"    {field}: {annotation}")
                lines.append(_docstring(description, "    "))
        self.classes[name] = "\n".join(lines)
        self.order.append(name)  # after the types of its fields: a TypedDict's annotations are evaluated at once
        return name

    def field_annotation(self, info: FieldInfo, model: type[BaseModel], field: str) -> str:
        annotation = self.annotation(info.annotation, model, field)
        return annotation if info.is_required() else f"NotRequired[{annotation}]"

    def render(self) -> str:
        blocks = []
        for name in self.order:
            if name in self.enums:
                # A docstring per member: without one the SDK writes "description": null, which the package
                # metaschema refuses (an enum value's description must be a string).
                members = "\n".join(f'    {_member(v)} = "{v}"\n    """``{v}``."""' for v in self.enums[name])
                values = ", ".join(self.enums[name])
                blocks.append(f'class {name}(StrEnum):\n    """One of: {values}."""\n\n{members}')
            else:
                blocks.append(self.classes[name])
        return "\n\n\n".join(blocks)


def _list_choices(hint: Any) -> tuple[str, ...]:
    """The values of a ``tuple[Literal[...], ...]`` field (a list of choices), else nothing."""
    if get_origin(hint) is tuple and get_origin(_unannotated(get_args(hint)[0])) is Literal:
        return tuple(str(v) for v in get_args(_unannotated(get_args(hint)[0])))
    return ()


def _unannotated(hint: Any) -> Any:
    return get_args(hint)[0] if get_origin(hint) is Annotated else hint


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _member(value: str) -> str:
    member = re.sub(r"[^0-9A-Za-z]+", "_", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", value)).strip("_").upper()
    return member if member[:1].isalpha() else f"V_{member}"


def _doc(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or model.__name__).split())


def _docstring(text: str, indent: str) -> str:
    text = " ".join(text.split()).replace("\\", "\\\\")
    return f'{indent}"""{text}"""'


HEADER = '''# ruff: noqa: E501
"""The Platform component's inputs, generated from :class:`~inferplane.components.spec.platform_spec.PlatformSpec`.

GENERATED by ``inferplane schema --write`` (:mod:`inferplane.tool.schema`): do not edit; change the spec and
regenerate. No ``from __future__ import annotations`` here: Pulumi's schema inference reads these annotations at
runtime. Every value is plain (not ``pulumi.Input``): sizing needs the whole spec before anything is declared.
"""

from enum import StrEnum
from typing import NotRequired, TypedDict

import pulumi
'''


def generate_args_module() -> str:
    """The source of ``components/platform/args.py`` for the current spec."""
    generator = _Generator()
    generator.model(PlatformSpec)
    return f"{HEADER}\n\n{generator.render()}\n"


def schema_inputs(raw: Mapping[str, Any], model: type[BaseModel] = PlatformSpec) -> dict[str, Any]:
    """A spec in stack-file form (snake_case keys, as under ``inferplane:platform``) as the component's inputs
    (the schema's camelCase names). Keys of map fields (``tags``) are data and stay as they are."""
    inputs: dict[str, Any] = {}
    for key, value in raw.items():
        info = model.model_fields.get(key)
        nested = _model_of(info.annotation) if info is not None else None
        if nested is not None and isinstance(value, Mapping):
            inputs[camel_case(key)] = schema_inputs(value, nested)
        elif nested is not None and isinstance(value, (list, tuple)):
            inputs[camel_case(key)] = [schema_inputs(v, nested) if isinstance(v, Mapping) else v for v in value]
        else:
            inputs[camel_case(key)] = value
    return inputs


def _model_of(hint: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds, directly, optionally or as a tuple's items; ``None`` for anything else."""
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return hint
    if get_origin(hint) in (typing.Union, types.UnionType, tuple):
        for arg in get_args(hint):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def package_schema(version: str | None = None) -> dict[str, Any]:
    """The package schema Pulumi's SDK infers from the hosted components (``version`` omitted when ``None``)."""
    from inferplane.tool.provider import InferplaneProvider  # noqa: PLC0415 - loads the Pulumi SDK, every component

    provider = InferplaneProvider(version or "0.0.0")
    assert provider.schema is not None
    schema: dict[str, Any] = json.loads(provider.schema)
    if version is None:
        schema.pop("version", None)
    return schema


def render_schema(schema: dict[str, Any]) -> str:
    """The schema as committed: indented, keys in the SDK's order, a final newline."""
    return json.dumps(schema, indent=2) + "\n"


def schema_of_args(args_source: str) -> dict[str, Any]:
    """The package schema (no ``version``) the SDK infers when the Platform component's inputs are ``args_source``.

    The text is loaded as a module of its own, registered in ``sys.modules`` and ``linecache`` only while the SDK
    reads it (its property docs come from ``inspect.getsource``), and the hosted components are rebound to its
    types: the module already imported may be the old file.
    """
    from pulumi.provider.experimental.component import ComponentProvider  # noqa: PLC0415 - loads the Pulumi SDK

    from inferplane.components.platform import HOSTED_COMPONENTS  # noqa: PLC0415 - loads every component
    from inferplane.components.platform.component import PACKAGE_NAME  # noqa: PLC0415

    name = "inferplane.components.platform._generated_args"
    filename = f"<generated {ARGS_PATH.as_posix()}>"
    module = types.ModuleType(name)
    module.__file__ = filename
    linecache.cache[filename] = (len(args_source), None, args_source.splitlines(keepends=True), filename)
    sys.modules[name] = module
    try:
        # dont_inherit: this module's ``from __future__ import annotations`` would turn the annotations the SDK
        # reads into strings. The text is our own generated one, never a user's.
        exec(compile(args_source, filename, "exec", dont_inherit=True), module.__dict__)
        components = [_rebound(component, module) for component in HOSTED_COMPONENTS]
        provider = ComponentProvider(components, PACKAGE_NAME, version="0.0.0")
    finally:
        del sys.modules[name]
        linecache.cache.pop(filename, None)
    assert provider.schema is not None
    schema: dict[str, Any] = json.loads(provider.schema)
    schema.pop("version", None)
    return schema


def _rebound(component: type[Any], args_module: types.ModuleType) -> type[Any]:
    """A subclass of ``component`` whose ``__init__`` annotations name ``args_module``'s types instead of the
    imported ``args`` module's; the SDK reads only the annotations, the docstring and the class name."""
    init = component.__init__
    annotations = {
        key: getattr(args_module, value.__name__) if getattr(value, "__module__", None) == ARGS_MODULE_NAME else value
        for key, value in init.__annotations__.items()
    }
    rebound_init = types.FunctionType(
        init.__code__, init.__globals__, init.__name__, init.__defaults__, init.__closure__
    )
    rebound_init.__annotations__ = annotations
    return type(
        component.__name__,
        (component,),
        {"__init__": rebound_init, "__doc__": component.__doc__, "__module__": component.__module__},
    )


def generate() -> tuple[str, str]:
    """``args.py`` and ``schema.json`` as the spec generates them now: (args source, schema text)."""
    args_source = generate_args_module()
    return args_source, render_schema(schema_of_args(args_source))


def source_tree(project_dir: str | None) -> Path:
    """The tree ``--write``/``--check`` act on: the project found from the working directory (or ``project_dir``),
    which must be the one this inferplane runs from; raises :class:`SchemaTreeError`."""
    tree = find_project_dir(Path(project_dir) if project_dir else None)
    if tree != PACKAGE_ROOT:
        raise SchemaTreeError(
            f"the project at {tree} is not the inferplane tree this command runs from ({PACKAGE_ROOT}): "
            "its args.py and schema.json would be judged against another tree's spec; run that tree's own "
            "inferplane (its .venv/bin/inferplane)"
        )
    return tree


class SchemaTreeError(Exception):
    """``--write``/``--check`` in a tree other than the one this inferplane runs from."""


def stale(tree: Path = PACKAGE_ROOT) -> list[str]:
    """Which of ``tree``'s committed files differ from what the spec generates now (empty when both are current)."""
    args_source, schema_text = generate()
    problems = []
    for relative, expected in ((ARGS_PATH, args_source), (SCHEMA_PATH, schema_text)):
        try:
            current = read_regular_file(tree / relative, MAX_GENERATED_BYTES)
        except UnreadableFileError:
            current = None
        if current != expected:
            problems.append(str(tree / relative))
    return problems


def _write(tree: Path, out: Console, err: Console) -> int:
    """Generate both files, then rename both into ``tree``; nothing is written unless both were generated."""
    targets = (tree / ARGS_PATH, tree / SCHEMA_PATH)
    try:
        with OutputFiles() as outputs:
            for target in targets:
                outputs.claim("--write", str(target))
            try:
                texts = generate()
            except Exception as exc:  # the generator may fail anyhow (a spec type it cannot map, the SDK)
                _say(err, f"inferplane schema: generating {ARGS_PATH} and {SCHEMA_PATH} failed: {_error(exc)}")
                return EXIT_FAILED
            for target, text in zip(targets, texts, strict=True):
                outputs.publish(str(target), text)
    except UnwritableFileError as exc:
        _say(err, f"inferplane schema: {exc}; {tree} is left as it was")
        return EXIT_FAILED
    _say(out, f"inferplane schema: wrote {targets[0]} and {targets[1]} ({len(texts[1])} bytes) in the tree {tree}")
    return EXIT_OK


def _check(tree: Path, err: Console) -> int:
    try:
        problems = stale(tree)
    except Exception as exc:  # as for --write: a failing generator is the tool's failure, not a stale file
        _say(err, f"inferplane schema: generating {ARGS_PATH} and {SCHEMA_PATH} failed: {_error(exc)}")
        return EXIT_FAILED
    for path in problems:
        _say(err, f"inferplane schema: {path} is stale; run `inferplane schema --write`")
    if not problems:
        _say(err, f"inferplane schema: {ARGS_PATH} and {SCHEMA_PATH} of the tree {tree} are current")
    return EXIT_REFUSED if problems else EXIT_OK


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _say(console: Console, text: str) -> None:
    console.print(printable(text), markup=False, highlight=False)


def schema_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``inferplane schema``: print the package schema (as ``GetSchema`` answers), or ``--write`` / ``--check`` the
    committed ``args.py`` and ``schema.json`` of the project's tree."""
    if args.write or args.check:
        try:
            tree = source_tree(args.project_dir)
        except SchemaTreeError as exc:
            _say(err, f"inferplane schema: {exc}")
            return EXIT_INVALID
        return _write(tree, out, err) if args.write else _check(tree, err)
    from inferplane import __version__  # noqa: PLC0415

    out.file.write(render_schema(package_schema(__version__)))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m inferplane.tool.schema``: print the committed form of the schema (no version)."""
    parser = argparse.ArgumentParser(prog="python -m inferplane.tool.schema")
    parser.parse_args(argv)
    sys.stdout.write(render_schema(package_schema()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
