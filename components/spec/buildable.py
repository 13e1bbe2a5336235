"""Whole validation of a platform spec: :func:`~inferplane.components.spec.platform_spec.parse_platform`, then what the
components themselves would refuse once the program runs (versions without pinned add-ons, cache node types,
partial TPU slices), so a stack the CLI accepts never fails inside the program.

Kept apart from :mod:`inferplane.components.spec.platform_spec` because these facts live in the components that own
them, which load the Pulumi SDK; the spec module stays light for ``inferplane size``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferplane.components.catalog import INSTANCE_TYPES
from inferplane.components.catalog.eks import ADDON_VERSIONS, CLUSTER_AUTOSCALER_IMAGE_TAGS
from inferplane.components.catalog.instances import slice_shape
from inferplane.components.spec.platform_spec import PlatformSpec, SpecError, SpecIssue, parse_platform
from inferplane.components.spec.tags import PLATFORM_TAG_KEYS


def check_buildable(spec: PlatformSpec) -> list[SpecIssue]:
    """Every way ``spec`` would be refused by a component; empty when the program can declare it."""
    issues: list[SpecIssue] = []
    version = spec.cluster.kubernetes_version
    supported = sorted(set(ADDON_VERSIONS) & set(CLUSTER_AUTOSCALER_IMAGE_TAGS))
    if version not in supported:
        issues.append(
            SpecIssue(
                "cluster.kubernetes_version",
                f"{version} is not supported: add-ons and the cluster autoscaler are pinned for {', '.join(supported)}",
            )
        )
    issues += [
        SpecIssue(f"tags[{key!r}]", f"the platform sets the tag {key!r} itself on every resource; choose another key")
        for key in spec.tags
        if key in PLATFORM_TAG_KEYS
    ]
    # Control-plane log types: the spec itself requires every one (``check_platform``).
    if spec.cache.enabled and spec.cache.node_type.split(".")[1].endswith("gd"):
        issues.append(
            SpecIssue(
                "cache.node_type", f"{spec.cache.node_type} needs data tiering, which a response cache does not use"
            )
        )
    for i, pool in enumerate(spec.pools):
        instance = INSTANCE_TYPES[pool.instance_type]
        if instance.cloud != "gcp" or pool.tpu_topology is None:
            continue
        shape = slice_shape(pool.instance_type, pool.tpu_topology)
        if shape.multi_host and pool.min_nodes % shape.hosts:
            issues.append(
                SpecIssue(
                    f"pools[{i}].min_nodes",
                    f"{pool.min_nodes} nodes is not a whole number of {pool.tpu_topology} slices "
                    f"({shape.hosts} {pool.instance_type} hosts each)",
                )
            )
    return issues


def validate_platform(raw: Mapping[str, Any], region: str) -> PlatformSpec:
    """:func:`parse_platform` plus :func:`check_buildable`; raises :class:`SpecError` with every issue."""
    spec = parse_platform(raw, region)
    issues = check_buildable(spec)
    if issues:
        raise SpecError(issues)
    return spec
