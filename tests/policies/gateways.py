"""A gateway Deployment as the policy pack sees it, carrying one gateway annotation: what the gateway policies'
tests judge."""

from __future__ import annotations

from typing import Any

from inferplane.components.serving.annotations import COMPONENT_LABEL, GATEWAY
from inferplane.policies.base import Resource
from inferplane.policies.resource_types import T


def gateway_with(key: str, value: Any, *, labels: Any = None) -> Resource:
    """A gateway Deployment whose metadata carries ``value`` as annotation ``key`` (omitted when None);
    ``labels`` replace the gateway's own (UNKNOWN, or another component's)."""
    annotations = {} if value is None else {key: value}
    metadata = {"name": "gateway", "labels": {COMPONENT_LABEL: GATEWAY} if labels is None else labels}
    return Resource(
        type=T.DEPLOYMENT,
        name="gateway",
        urn="urn:gateway",
        props={"metadata": {**metadata, "annotations": annotations}},
    )
