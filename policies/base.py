"""How the pack's policies are written: plain validator functions plus metadata, and safe reads of preview values.

A validator is an ordinary function over a :class:`Resource` snapshot (plain dicts and lists, camelCase keys as the
engine sends them) and its policy's config. :func:`resource_policy` and :func:`stack_policy` attach the metadata
(name, description saying why, severity, enforcement, JSON-schema config) and turn it into the SDK's
``ResourceValidationPolicy``/``StackValidationPolicy``, so the same function runs under ``pulumi preview
--policy-pack`` and in plain unit tests.

Unknown values (outputs not computed yet during preview) never count as violations. The SDK's property proxy raises
``UnknownValueError`` when a policy touches one, which the SDK turns into an advisory "can't run policy" diagnostic;
:func:`snapshot` instead replaces every unknown with :data:`UNKNOWN` up front, and the helpers below (:func:`dig`,
:func:`known`) let validators skip what they cannot judge, so a preview reports nothing it cannot prove.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeAlias

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
    proxy,
)
from pulumi_policy.proxy import UnknownValueError

__all__ = [
    "UNKNOWN",
    "AnyPolicy",
    "EnforcementLevel",
    "Resource",
    "Severity",
    "dig",
    "known",
    "resource_policy",
    "snapshot",
    "stack_policy",
]


class _Unknown:
    """A value the engine does not know yet (preview)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = _Unknown()
"""Stands in for every value unknown during preview."""


_UNKNOWN_SENTINELS = frozenset(
    {
        proxy.UNKNOWN_BOOLEAN_VALUE,
        proxy.UNKNOWN_NUMBER_VALUE,
        proxy.UNKNOWN_STRING_VALUE,
        proxy.UNKNOWN_ARRAY_VALUE,
        proxy.UNKNOWN_ASSET_VALUE,
        proxy.UNKNOWN_ARCHIVE_VALUE,
        proxy.UNKNOWN_OBJECT_VALUE,
    }
)
"""How the engine spells unknown values on the wire (the policy SDK's sentinels)."""


def _read(container: Any, key: Any) -> Any:
    try:
        return container[key]
    except UnknownValueError:
        return UNKNOWN


def snapshot(value: Any) -> Any:
    """Plain dicts and lists from the SDK's unknown-checking proxies, unknowns replaced by :data:`UNKNOWN`.

    Properties cross the Analyzer protocol as a protobuf ``Struct``, where every number is a double: ``replicas: 2``
    arrives as ``2.0``. Integral numbers become ``int`` again so validators compare counts as counts.
    """
    if isinstance(value, Mapping):
        return {key: snapshot(_read(value, key)) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [snapshot(_read(value, i)) for i in range(len(value))]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value in _UNKNOWN_SENTINELS:
        return UNKNOWN
    return value


def dig(value: Any, *path: str | int) -> Any:
    """``value[path[0]][path[1]]...``: None where a key is absent, :data:`UNKNOWN` where a step is unknown."""
    for step in path:
        if value is UNKNOWN:
            return UNKNOWN
        if isinstance(step, int):
            if not isinstance(value, list) or step >= len(value):
                return None
            value = value[step]
        else:
            if not isinstance(value, dict):
                return None
            value = value.get(step)
    return value


def known(value: Any) -> bool:
    """Whether ``value`` holds nothing unknown, at any depth."""
    if value is UNKNOWN:
        return False
    if isinstance(value, dict):
        return all(known(v) for v in value.values())
    if isinstance(value, list):
        return all(known(v) for v in value)
    return True


@dataclass(frozen=True)
class Resource:
    """One resource as a policy sees it: plain properties (camelCase), options and its provider's inputs."""

    type: str
    name: str
    urn: str
    props: dict[str, Any]
    protect: bool = False
    parent: str | None = None
    dependencies: tuple[str, ...] = ()
    provider_props: dict[str, Any] = field(default_factory=dict)

    def get(self, *path: str | int) -> Any:
        """A property by path (see :func:`dig`)."""
        return dig(self.props, *path)


Config: TypeAlias = Mapping[str, Any]
Report: TypeAlias = Callable[[str], None]
StackReport: TypeAlias = Callable[[str, str | None], None]
ResourceValidator: TypeAlias = Callable[[Resource, Config, Report], None]
StackValidator: TypeAlias = Callable[[list[Resource], Config, StackReport], None]


@dataclass(frozen=True)
class PolicyMeta:
    """What every policy declares besides its validator."""

    name: str
    description: str
    severity: Severity
    enforcement: EnforcementLevel
    config: Mapping[str, Mapping[str, Any]]
    """JSON-schema properties of the policy's config; each should carry a ``default``."""
    remediation: str
    types: frozenset[str] = frozenset()
    """Type tokens a resource policy applies to (empty for stack policies)."""

    def defaults(self) -> dict[str, Any]:
        """The schema's defaults: what the engine fills in when the config file is silent."""
        return {key: schema["default"] for key, schema in self.config.items() if "default" in schema}

    def schema(self) -> PolicyConfigSchema | None:
        """The SDK's config schema, or None when the policy takes no config."""
        if not self.config:
            return None
        return PolicyConfigSchema(properties={k: dict(v) for k, v in self.config.items()})


def _config(meta: PolicyMeta, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Schema defaults overlaid with the configured values (numbers normalised as in :func:`snapshot`)."""
    configured: dict[str, Any] = snapshot(dict(given or {}))
    return {**meta.defaults(), **configured}


def _resource_from_args(args: ResourceValidationArgs) -> Resource:
    provider_props: dict[str, Any] = {}
    if args.provider is not None:
        provider_props = snapshot(args.provider.props)
    return Resource(
        type=args.resource_type,
        name=args.name,
        urn=args.urn,
        props=snapshot(args.props),
        protect=bool(args.opts.protect),
        parent=args.opts.parent,
        provider_props=provider_props,
    )


@dataclass(frozen=True)
class InferplaneResourcePolicy:
    """A resource validator with its metadata; :meth:`to_sdk` builds the ``ResourceValidationPolicy``."""

    meta: PolicyMeta
    validator: ResourceValidator

    def check(self, resource: Resource, config: Mapping[str, Any] | None = None) -> list[str]:
        """Run the validator directly (no engine); return the messages it reports."""
        messages: list[str] = []
        if resource.type in self.meta.types:
            resource = replace(resource, props=snapshot(resource.props))
            self.validator(resource, _config(self.meta, config), messages.append)
        return messages

    def to_sdk(self) -> ResourceValidationPolicy:
        """The SDK policy the pack serves."""

        def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
            if args.resource_type not in self.meta.types:
                return
            resource = _resource_from_args(args)
            self.validator(resource, _config(self.meta, args.get_config()), lambda m: report_violation(m, None))

        return ResourceValidationPolicy(
            name=self.meta.name,
            description=self.meta.description,
            enforcement_level=self.meta.enforcement,
            validate=validate,
            config_schema=self.meta.schema(),
            severity=self.meta.severity,
            remediation_steps=self.meta.remediation,
        )


@dataclass(frozen=True)
class InferplaneStackPolicy:
    """A stack validator with its metadata; :meth:`to_sdk` builds the ``StackValidationPolicy``."""

    meta: PolicyMeta
    validator: StackValidator

    def check(self, resources: list[Resource], config: Mapping[str, Any] | None = None) -> list[tuple[str, str | None]]:
        """Run the validator directly (no engine); return (message, urn) pairs."""
        found: list[tuple[str, str | None]] = []
        resources = [replace(r, props=snapshot(r.props)) for r in resources]
        self.validator(resources, _config(self.meta, config), lambda m, u: found.append((m, u)))
        return found

    def to_sdk(self) -> StackValidationPolicy:
        """The SDK policy the pack serves."""

        def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
            resources = [
                Resource(
                    type=r.resource_type,
                    name=r.name,
                    urn=r.urn,
                    props=snapshot(r.props),
                    protect=bool(r.opts.protect),
                    parent=r.parent.urn if r.parent is not None else None,
                    dependencies=tuple(d.urn for d in r.dependencies),
                )
                for r in args.resources
            ]
            self.validator(resources, _config(self.meta, args.get_config()), report_violation)

        return StackValidationPolicy(
            name=self.meta.name,
            description=self.meta.description,
            enforcement_level=self.meta.enforcement,
            validate=validate,
            config_schema=self.meta.schema(),
            severity=self.meta.severity,
            remediation_steps=self.meta.remediation,
        )


AnyPolicy: TypeAlias = "InferplaneResourcePolicy | InferplaneStackPolicy"
"""Either kind of policy, as the pack lists them."""


def resource_policy(
    *,
    name: str,
    description: str,
    severity: Severity,
    enforcement: EnforcementLevel,
    types: Collection[str],
    remediation: str,
    config: Mapping[str, Mapping[str, Any]] | None = None,
) -> Callable[[ResourceValidator], InferplaneResourcePolicy]:
    """Attach metadata to a resource validator."""

    def wrap(fn: ResourceValidator) -> InferplaneResourcePolicy:
        meta = PolicyMeta(name, description, severity, enforcement, config or {}, remediation, frozenset(types))
        return InferplaneResourcePolicy(meta, fn)

    return wrap


def stack_policy(
    *,
    name: str,
    description: str,
    severity: Severity,
    enforcement: EnforcementLevel,
    remediation: str,
    config: Mapping[str, Mapping[str, Any]] | None = None,
) -> Callable[[StackValidator], InferplaneStackPolicy]:
    """Attach metadata to a stack validator."""

    def wrap(fn: StackValidator) -> InferplaneStackPolicy:
        return InferplaneStackPolicy(
            PolicyMeta(name, description, severity, enforcement, config or {}, remediation), fn
        )

    return wrap


# --- small readers shared by the domain modules -------------------------------------------------------------


def as_list(value: Any) -> list[Any]:
    """A list property, or [] when absent or unknown."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """A map property, or {} when absent or unknown."""
    return value if isinstance(value, dict) else {}


def truthy(value: Any) -> bool | None:
    """A boolean property (EC2 launch templates spell booleans as strings); None when absent or unknown."""
    if value is UNKNOWN or value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def of_type(resources: list[Resource], *types: str) -> Iterator[Resource]:
    """Resources of the given types, in order."""
    return (r for r in resources if r.type in types)
