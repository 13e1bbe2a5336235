"""Reading a stack the way the ``pulumi`` CLI does: ``Pulumi.yaml``, then ``<stackConfigDir>/Pulumi.<stack>.yaml``.

Only what the CLI itself would accept is accepted: config keys are namespaced (``inferplane:platform``,
``aws:region``), structured values are YAML objects, and ``secure:`` values are ciphertext this tool never
decrypts (no passphrase is at hand offline); they become :class:`SecretValue` placeholders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from inferplane.components.spec import PLATFORM_KEY, REGION_KEY, PlatformSpec, SpecError, parse_platform


class StackFileError(Exception):
    """A stack that cannot be read: names the file and, where there is one, the key."""

    def __init__(self, file: str, message: str, key: str | None = None) -> None:
        self.file = file
        self.key = key
        self.message = message
        super().__init__(f"{file}: {key}: {message}" if key else f"{file}: {message}")


class InvalidSpecError(Exception):
    """A stack whose platform spec fails validation; ``str()`` is one line per issue."""

    def __init__(self, file: str, error: SpecError) -> None:
        self.file = file
        self.error = error
        super().__init__(error.render(file, PLATFORM_KEY))


@dataclass(frozen=True)
class SecretValue:
    """A ``secure:`` config value. Its ciphertext is kept only to be handed back to Pulumi, never shown."""

    ciphertext: str = field(repr=False)

    def __str__(self) -> str:
        return "[secret]"


@dataclass(frozen=True)
class StackConfig:
    """One stack's config as the CLI sees it, whatever program reads it (a stack without ``inferplane:platform``)."""

    project: str
    name: str
    project_dir: Path
    config_file: Path
    config: Mapping[str, Any]

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


def find_project_dir(start: Path | None = None) -> Path:
    """The nearest directory at or above ``start`` holding ``Pulumi.yaml``."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "Pulumi.yaml").is_file():
            return candidate
    raise StackFileError(str(here), "no Pulumi.yaml here or in any parent directory")


def _read_yaml(path: Path, display: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StackFileError(display, "no such file") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise StackFileError(display, f"not valid YAML: {exc}") from None


def _decode(value: Any) -> Any:
    """Turn ``{secure: ...}`` leaves into :class:`SecretValue`, recursively."""
    if isinstance(value, dict):
        if set(value) == {"secure"} and isinstance(value["secure"], str):
            return SecretValue(value["secure"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def project_settings(project_dir: Path) -> tuple[str, Path]:
    """(project name, stack config directory) from ``Pulumi.yaml``."""
    project = _read_yaml(project_dir / "Pulumi.yaml", "Pulumi.yaml")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str):
        raise StackFileError("Pulumi.yaml", "a project file needs a name", key="name")
    config_dir = project.get("stackConfigDir", ".")
    if not isinstance(config_dir, str):
        raise StackFileError("Pulumi.yaml", "must be a path", key="stackConfigDir")
    return project["name"], project_dir / config_dir


def stack_names(project_dir: Path) -> list[str]:
    """Stacks that have a config file, sorted."""
    _, config_dir = project_settings(project_dir)
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in config_dir.glob("Pulumi.*.yaml"))


def read_config(project_dir: Path, stack: str) -> tuple[str, Path, dict[str, Any]]:
    """(project, stack file, decoded config) for ``stack``; no validation of the platform yet."""
    project, config_dir = project_settings(project_dir)
    path = config_dir / f"Pulumi.{stack}.yaml"
    display = str(path.relative_to(project_dir)) if path.is_relative_to(project_dir) else str(path)
    document = _read_yaml(path, display)
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
        if not isinstance(key, str) or ":" not in key:
            raise StackFileError(display, "config keys are namespaced, e.g. inferplane:platform", key=str(key))
    return project, path, {k: _decode(v) for k, v in config.items()}


def load_stack(project_dir: Path, stack: str) -> Stack:
    """Read and validate ``stack``; raises :class:`StackFileError` or :class:`InvalidSpecError`."""
    project, path, config = read_config(project_dir, stack)
    display = str(path.relative_to(project_dir)) if path.is_relative_to(project_dir) else str(path)
    region = config.get(REGION_KEY)
    if not isinstance(region, str):
        raise StackFileError(display, "the AWS region is required (pulumi config set aws:region ...)", key=REGION_KEY)
    raw = config.get(PLATFORM_KEY)
    if not isinstance(raw, dict):
        raise StackFileError(display, "a mapping describing the platform is required", key=PLATFORM_KEY)
    if any(isinstance(v, SecretValue) for v in _leaves(raw)):
        raise StackFileError(
            display, "secrets do not belong in the platform spec; use their own keys", key=PLATFORM_KEY
        )
    try:
        platform = parse_platform(raw, region)
    except SpecError as exc:
        raise InvalidSpecError(display, exc) from None
    return Stack(
        project=project, name=stack, project_dir=project_dir, config_file=path, config=config, platform=platform
    )


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def load_stack_config(project_dir: Path, stack: str) -> StackConfig:
    """``stack`` of any project: a :class:`Stack` (validated as :func:`load_stack` does) when its config carries
    ``inferplane:platform``, else its plain :class:`StackConfig`."""
    project, path, config = read_config(project_dir, stack)
    if PLATFORM_KEY in config:
        return load_stack(project_dir, stack)
    return StackConfig(project=project, name=stack, project_dir=project_dir, config_file=path, config=config)


def project_document(project_dir: Path) -> dict[str, Any]:
    """``Pulumi.yaml`` as a mapping (checked to have a name), for the keys beyond name and stackConfigDir."""
    project = _read_yaml(project_dir / "Pulumi.yaml", "Pulumi.yaml")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str):
        raise StackFileError("Pulumi.yaml", "a project file needs a name", key="name")
    return project
