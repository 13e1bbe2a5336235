"""The gateway's response cache: whose answers a tenant may receive, and how close a semantic match must be.

The cache's settings reach the cluster as the processor's configuration: a ConfigMap whose data holds the
processor's JSON with a ``cache`` object (:class:`inferplane.processor.cache.config.CacheConfig`). These policies read
that object wherever it appears, so they judge what the processor will actually run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from inferplane.components.catalog.embedders import EMBEDDING_MODELS
from inferplane.policies.base import (
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    as_dict,
    resource_policy,
)
from inferplane.policies.resource_types import T
from inferplane.processor.cache.config import CacheConfig

_TYPES = {T.CONFIG_MAP}


def cache_configs(resource: Resource) -> Iterator[tuple[str, CacheConfig]]:
    """(data key, cache settings) for every data entry that is a processor configuration with a cache."""
    for key, value in sorted(as_dict(resource.get("data")).items()):
        if not isinstance(value, str) or '"cache"' not in value:
            continue
        try:
            document: Any = json.loads(value)
        except ValueError:
            continue
        if not isinstance(document, dict) or not isinstance(document.get("cache"), dict):
            continue
        try:
            yield key, CacheConfig.model_validate(document["cache"])
        except ValidationError:
            continue  # not this pack's business: the processor refuses to start on an invalid config


@resource_policy(
    name="gateway-cache-require-tenant-isolation",
    description=(
        "A tenant must never receive another tenant's cached answer: prompts and answers carry customer data. "
        "Sharing across tenants is allowed only per tier, where the tier opts in (share_cache_across_tenants)."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    remediation="Set cache.tenant_isolation: true; opt a public tier in with share_cache_across_tenants: true.",
    config={
        "requireTenantIsolation": {
            "type": "boolean",
            "default": False,
            "description": "Refuse a cache that shares every tier's entries across tenants.",
        }
    },
)
def cache_tenant_isolation(resource: Resource, config: Config, report: Report) -> None:
    """Own policy: the processor's ``tenant_isolation`` switch."""
    if not config["requireTenantIsolation"]:
        return
    for key, cache in cache_configs(resource):
        if cache.enabled and not cache.tenant_isolation:
            report(f"{key}: cache.tenant_isolation is false: every tier shares cached answers across its tenants")


@resource_policy(
    name="gateway-cache-configure-semantic-threshold",
    description=(
        "A semantic hit serves one prompt another prompt's answer: the similarity threshold must be high and the "
        "guards (numbers, negation, names, direction) on, or near misses get wrong answers."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    remediation="Set cache.semantic_similarity_threshold to at least the minimum (measure with `inferplane cache "
    "eval`) and keep cache.semantic_guards on.",
    config={
        "minThreshold": {
            "type": "number",
            "default": 0.9,
            "description": "Least cosine similarity a semantic hit may use (the static embedder, an endpoint the "
            "stack runs elsewhere).",
        },
        "minThresholdByEmbedder": {
            "type": "object",
            "additionalProperties": {"type": "number"},
            "default": {name: model.threshold for name, model in sorted(EMBEDDING_MODELS.items())},
            "description": "Per sentence-embedding model (the ``model`` the processor asks the endpoint for), the "
            "least similarity instead of minThreshold. Default: each catalog model's threshold measured by "
            "`inferplane cache eval` (no false hit on the labelled set with the guards on); a sentence model's "
            "similarities are lower than static word vectors' for the same pairs, so one number cannot serve both.",
        },
        "requireGuards": {"type": "boolean", "default": True, "description": "Refuse semantic caching without guards."},
    },
)
def cache_semantic_threshold(resource: Resource, config: Config, report: Report) -> None:
    """Own policy, from the issue's guidance (0.96-0.98 without guards) and ``inferplane cache eval``'s figures."""
    for key, cache in cache_configs(resource):
        if not (cache.enabled and cache.semantic):
            continue
        embedder = cache.embedder
        by_model: dict[str, float] = config["minThresholdByEmbedder"]
        named = embedder.model if embedder.kind == "endpoint" and embedder.model in by_model else None
        least = by_model[named] if named is not None else config["minThreshold"]
        if cache.threshold < least:
            report(f"{key}: semantic threshold {cache.threshold} is below {least}" + (f" ({named})" if named else ""))
        if config["requireGuards"] and not cache.guards:
            report(f"{key}: semantic guards are off")


POLICIES: list[AnyPolicy] = [cache_tenant_isolation, cache_semantic_threshold]
