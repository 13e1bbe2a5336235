"""Reading a stack the way the ``pulumi`` CLI does: ``Pulumi.yaml``, then ``<stackConfigDir>/Pulumi.<stack>.yaml``.

Only what the CLI itself would accept is accepted: config keys are namespaced (``inferplane:platform``,
``aws:region``), structured values are YAML objects, and ``secure:`` values are ciphertext this tool never
decrypts (no passphrase is at hand offline); they become :class:`SecretValue` placeholders.

A command reads each file once: :func:`read_project` gives the checked ``Pulumi.yaml`` (:class:`ProjectFile`),
:func:`read_stack_config` the stack's :class:`StackConfig`, which carries that project and the text it was read from;
whatever needs more of either (the program's ``main``, the declared config, an in-place edit) takes it from the stack
(:func:`project_of`, :attr:`StackConfig.source`) rather than reading the file again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node

from inferplane.components.gateway.route_examples import read_route_examples
from inferplane.components.spec.buildable import validate_platform
from inferplane.components.spec.platform_spec import PLATFORM_KEY, REGION_KEY, PlatformSpec, SpecError
from inferplane.tool.files import UnreadableFileError, os_reason, read_regular_file

_CONFIG_KEY = re.compile(r"^[^:\s]+:[^\s]+$")
"""A namespaced config key, as ``pulumi config`` takes it: ``namespace:name``, both parts non-empty."""


class StackFileError(Exception):
    """A stack that cannot be read: names the file and, where there is one, the key."""

    def __init__(self, file: str, message: str, key: str | None = None) -> None:
        self.file = file
        self.key = key
        self.message = message
        where = f"{file}: {key_label(key)}" if key is not None else file
        super().__init__(printable(f"{where}: {message}"))


_PLAIN_CONFIG_KEY = re.compile(r"^[\w.-]+(:[\w./-]+)?$")


def key_label(key: str) -> str:
    """A config key as messages show it: as is (``aws:region``), or quoted when it is empty or unusual."""
    return key if _PLAIN_CONFIG_KEY.match(key) else repr(key)


class InvalidSpecError(Exception):
    """A stack whose platform spec fails validation; ``str()`` is one line per issue."""

    def __init__(self, file: str, error: SpecError) -> None:
        self.file = file
        self.error = error
        super().__init__(printable(error.render(file, PLATFORM_KEY)))


@dataclass(frozen=True)
class SecretValue:
    """A ``secure:`` config value. Its ciphertext is kept only to be handed back to Pulumi, never shown."""

    ciphertext: str = field(repr=False)

    def __str__(self) -> str:
        return "[secret]"


PROJECT_FILE = "Pulumi.yaml"


@dataclass(frozen=True)
class ProjectFile:
    """A project's ``Pulumi.yaml``, read and checked once (:func:`read_project`) and passed down from there."""

    name: str
    project_dir: Path
    config_dir: Path
    """Where the stack files are: ``stackConfigDir`` (default: the project directory)."""
    document: Mapping[str, Any] = field(repr=False)
    """The whole file, for the keys beyond name and stackConfigDir (``main``, ``config``)."""


@dataclass(frozen=True)
class StackConfig:
    """One stack's config as the CLI sees it, whatever program reads it (a stack without ``inferplane:platform``)."""

    project: str
    name: str
    project_dir: Path
    config_file: Path
    config: Mapping[str, Any]
    project_file: ProjectFile | None = field(default=None, kw_only=True, repr=False, compare=False)
    """The ``Pulumi.yaml`` the stack was read with; None for a stack built by hand (see :func:`project_of`)."""
    source: str | None = field(default=None, kw_only=True, repr=False, compare=False)
    """The stack file's text as it was read; None for a stack built by hand."""

    @property
    def display_file(self) -> str:
        """The stack file relative to the project, as messages name it."""
        try:
            return str(self.config_file.relative_to(self.project_dir))
        except ValueError:
            return str(self.config_file)


@dataclass(frozen=True)
class Stack(StackConfig):
    """One stack of an inferplane platform: its config and the platform spec it carries."""

    platform: PlatformSpec
    route_examples: Mapping[str, str] = field(default_factory=dict, kw_only=True, repr=False, compare=False)
    """The difficulty-routed tiers' examples by tier, read from the project and checked with the stack."""


def find_project_dir(start: Path | None = None) -> Path:
    """The project directory: ``start`` itself (``--project-dir``), which must hold ``Pulumi.yaml``; without it, the
    nearest directory at or above the working directory that holds one.

    An explicit directory is used as it is, never a parent: a ``--project-dir`` that lacks ``Pulumi.yaml`` would
    otherwise silently act on whichever project lies above it.
    """
    if start is not None:
        try:
            is_dir = start.is_dir()
            has_project = is_dir and (start / PROJECT_FILE).is_file()
        except OSError as exc:
            raise StackFileError(str(start), f"--project-dir: cannot read: {os_reason(exc)}") from None
        if not is_dir:
            what = "does not exist" if not start.exists() else "is not a directory"
            raise StackFileError(str(start), f"--project-dir {what}")
        if not has_project:
            raise StackFileError(
                str(start), f"--project-dir has no {PROJECT_FILE} (the directory given is used as it is, not a parent)"
            )
        return start.resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate
    raise StackFileError(str(here), "no Pulumi.yaml here or in any parent directory")


MAX_STACK_FILE_BYTES = 256 * 1024
"""A stack file is a few kilobytes; one over 256 KiB is refused unparsed (PyYAML reads about 60 KB a second)."""
MAX_NESTING = 64
"""Deepest nesting of collections a stack file may use; the platform spec needs 6."""
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
"""Pulumi's stack names: alphanumerics, hyphens, underscores and periods, at most 100 characters."""


class _StackLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter the way a stack file should be read.

    * Aliases are refused: a config never needs them and a few hundred bytes of nested aliases expand into
      gigabytes once decoded (the "billion laughs").
    * Collections nest at most :data:`MAX_NESTING` deep (deeper input would exhaust the recursion limit).
    * A key given twice in one mapping is refused, naming both lines, rather than silently last-wins.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self._next_event()
            raise ComposerError(
                None,
                None,
                f"alias *{event.anchor} is not allowed in a stack file (write the value out)",
                event.start_mark,
            )
        if self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            self._depth += 1
            if self._depth > MAX_NESTING:
                raise ComposerError(
                    None, None, f"nested deeper than {MAX_NESTING} levels", self._next_event().start_mark
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise ConstructorError(
                    None,
                    None,
                    f"duplicate key '{printable(str(key))}' on line {first} and line {line} (say it once)",
                    key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def _next_event(self) -> Any:
        return self.peek_event()  # type: ignore[no-untyped-call]


def _read_text(path: Path, display: str) -> str:
    """The file's text, or a :class:`StackFileError` naming it: never a hang on a FIFO, never a traceback."""
    try:
        return read_regular_file(path, MAX_STACK_FILE_BYTES)
    except UnreadableFileError as exc:
        raise StackFileError(display, str(exc)) from None


def flow_nesting_line(text: str, limit: int = MAX_NESTING) -> int | None:
    """The line where ``[``/``{`` flow collections first nest deeper than ``limit``, or None.

    A linear pre-scan: PyYAML's scanner looks ahead over every open bracket for a possible key, which grows
    faster than linearly (20,000 brackets take a third of a second, 80,000 several seconds), so deep flow
    nesting is refused before the parser sees it. Quoted scalars and comments are skipped; brackets inside
    plain scalars count, which only matters for a file that no spec could use anyway.
    """
    depth = 0
    line = 1
    quote = ""
    comment = False
    previous = "\n"
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\n":
            line += 1
            comment = False
        elif comment:
            pass
        elif quote == '"':
            if char == "\\":
                index += 1
            elif char == '"':
                quote = ""
        elif quote == "'":
            if char == "'":
                quote = ""
        elif char == "#" and previous in " \t\n":
            comment = True
        elif char in "\"'" and previous in " \t\n[{,:-":
            quote = char
        elif char in "[{":
            depth += 1
            if depth > limit:
                return line
        elif char in "]}":
            depth = max(depth - 1, 0)
        previous = char
        index += 1
    return None


def _no_json_form(loader: _StackLoader, node: Node) -> Any:
    raise ConstructorError(
        None,
        None,
        f"{node.tag.rsplit(':', 1)[-1]} values have no JSON form (Pulumi config is JSON): write a list or a string",
        node.start_mark,
    )


def _timestamp_as_text(loader: _StackLoader, node: Node) -> Any:
    return loader.construct_scalar(node)  # type: ignore[arg-type]


# A set, bytes, ordered pairs or a date would reach the program as no JSON value, and a set in no stable order
# (one stack file, two plans): refused, and a date stays the text it is, as Pulumi's config keeps it.
for _tag in ("set", "binary", "omap", "pairs"):
    _StackLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _no_json_form)
_StackLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


def _read_yaml(path: Path, display: str) -> Any:
    return parse_yaml(_read_text(path, display), display)


def parse_yaml(text: str, display: str) -> Any:
    """``text`` of the file ``display`` names, parsed the strict way (:class:`_StackLoader`): as every command reads
    a stack file (``plan --write-stack`` reads its edit back with it)."""
    deep = flow_nesting_line(text)
    if deep is not None:
        raise StackFileError(display, f"not valid YAML: nested deeper than {MAX_NESTING} levels (line {deep})")
    try:
        return yaml.load(text, Loader=_StackLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        detail = str(exc).replace('in "<unicode string>", ', "")
        raise StackFileError(display, f"not valid YAML: {detail}") from None
    except RecursionError:
        raise StackFileError(display, f"nested deeper than {MAX_NESTING} levels") from None


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with control characters (terminal escapes among them) written as ``\\xNN``; newlines and tabs kept."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _decode(value: Any) -> Any:
    """Turn ``{secure: ...}`` leaves into :class:`SecretValue`, recursively."""
    if isinstance(value, dict):
        if set(value) == {"secure"} and isinstance(value["secure"], str):
            return SecretValue(value["secure"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def read_project(project_dir: Path) -> ProjectFile:
    """Read and check ``project_dir``'s ``Pulumi.yaml``: a name, a path for ``stackConfigDir`` and a mapping for
    ``config`` if they are given."""
    document = _read_yaml(project_dir / PROJECT_FILE, PROJECT_FILE)
    if not isinstance(document, dict) or not isinstance(document.get("name"), str):
        raise StackFileError(PROJECT_FILE, "a project file needs a name", key="name")
    config_dir = document.get("stackConfigDir", ".")
    if not isinstance(config_dir, str) or "\x00" in config_dir:
        raise StackFileError(PROJECT_FILE, "must be a path", key="stackConfigDir")
    if not isinstance(document.get("config") or {}, dict):  # checked with the rest, before any program runs
        raise StackFileError(PROJECT_FILE, "must be a mapping of key to declaration", key="config")
    return ProjectFile(
        name=document["name"], project_dir=project_dir, config_dir=project_dir / config_dir, document=document
    )


def _project(project: ProjectFile | Path) -> ProjectFile:
    """``project`` as read: the :class:`ProjectFile` given, or the one in the directory given (read now)."""
    return project if isinstance(project, ProjectFile) else read_project(project)


def project_of(stack: StackConfig) -> ProjectFile:
    """The ``Pulumi.yaml`` ``stack`` was read with; read now only for a stack built by hand, which carries none."""
    return stack.project_file if stack.project_file is not None else read_project(stack.project_dir)


def stack_names(project: ProjectFile | Path) -> list[str]:
    """Stacks that have a config file, sorted."""
    config_dir = _project(project).config_dir
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in config_dir.glob("Pulumi.*.yaml"))


def read_stack_config(project: ProjectFile | Path, stack: str) -> StackConfig:
    """Read ``stack``'s file once: its decoded config, with no validation of the platform yet."""
    project = _project(project)
    project_dir = project.project_dir
    path = project.config_dir / f"Pulumi.{stack}.yaml"
    display = str(path.relative_to(project_dir)) if path.is_relative_to(project_dir) else str(path)
    if not _STACK_NAME.match(stack):
        raise StackFileError(
            display,
            f"--stack: a stack name is 1 to 100 letters, digits, '-', '_' or '.' ({len(stack)} characters given)",
        )
    text = _read_text(path, display)
    document = parse_yaml(text, display)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise StackFileError(display, "a stack file is a mapping with a 'config' key")
    unknown = sorted(set(document) - {"config", "secretsprovider", "encryptionsalt", "encryptedkey", "environment"})
    if unknown:
        raise StackFileError(display, "unknown top-level key", key=unknown[0])
    config = document.get("config") or {}
    if not isinstance(config, dict):
        raise StackFileError(display, "must be a mapping", key="config")
    for key in config:
        if not isinstance(key, str) or not _CONFIG_KEY.match(key):
            raise StackFileError(display, "config keys are namespaced, e.g. inferplane:platform", key=str(key))
    return StackConfig(
        project=project.name,
        name=stack,
        project_dir=project_dir,
        config_file=path,
        config={k: _decode(v) for k, v in config.items()},
        project_file=project,
        source=text,
    )


def load_stack(project: ProjectFile | Path, stack: str) -> Stack:
    """Read and validate ``stack``; raises :class:`StackFileError` or :class:`InvalidSpecError`."""
    return platform_stack(read_stack_config(project, stack))


def platform_stack(stack: StackConfig) -> Stack:
    """``stack``'s config validated as an inferplane platform: its ``aws:region`` and ``inferplane:platform``."""
    config = stack.config
    display = stack.display_file
    if REGION_KEY not in config:
        raise StackFileError(display, "the AWS region is required (pulumi config set aws:region ...)", key=REGION_KEY)
    region = config[REGION_KEY]
    if not isinstance(region, str):
        raise StackFileError(
            display, f"must be a region name such as us-east-1, not {type(region).__name__} {region!r}", key=REGION_KEY
        )
    raw = config.get(PLATFORM_KEY)
    if not isinstance(raw, dict):
        if PLATFORM_KEY not in config:
            raise StackFileError(display, "a mapping describing the platform is required", key=PLATFORM_KEY)
        raise StackFileError(
            display, f"must be a mapping describing the platform, not {type(raw).__name__}", key=PLATFORM_KEY
        )
    if any(isinstance(v, SecretValue) for v in _leaves(raw)):
        raise StackFileError(
            display, "secrets do not belong in the platform spec; use their own keys", key=PLATFORM_KEY
        )
    try:
        platform = validate_platform(raw, region)
        route_examples = read_route_examples(platform, stack.project_dir)  # checked as the program reads them
    except SpecError as exc:
        raise InvalidSpecError(display, exc) from None
    return Stack(
        project=stack.project,
        name=stack.name,
        project_dir=stack.project_dir,
        config_file=stack.config_file,
        config=config,
        project_file=stack.project_file,
        source=stack.source,
        platform=platform,
        route_examples=route_examples,
    )


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def load_stack_config(project: ProjectFile | Path, stack: str) -> StackConfig:
    """``stack`` of any project: a :class:`Stack` (validated as :func:`load_stack` does) when its config carries
    ``inferplane:platform``, else its plain :class:`StackConfig`."""
    read = read_stack_config(project, stack)
    return platform_stack(read) if PLATFORM_KEY in read.config else read
