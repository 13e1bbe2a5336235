"""The cache policies outside prod, and on ConfigMaps that are not a processor's configuration."""

from __future__ import annotations

import json
from typing import Any

from inferplane.policies.base import Resource
from inferplane.policies.cache import cache_configs, cache_semantic_threshold, cache_tenant_isolation
from inferplane.policies.resource_types import T
from tests.policy_plan import PROD_CACHE


def config_map(**data: str) -> Resource:
    return Resource(type=T.CONFIG_MAP, name="gateway-config", urn="urn:x", props={"data": data})


def processor(**cache: Any) -> str:
    return json.dumps({"grpc_port": 50051, "cache": {**PROD_CACHE, **cache}})


def test_outside_prod_a_cache_may_share_across_tenants_and_use_a_lower_threshold() -> None:
    resource = config_map(**{"processor.json": processor(tenant_isolation=False, threshold=0.92)})
    assert cache_tenant_isolation.check(resource) == []
    assert cache_semantic_threshold.check(resource) == []
    assert cache_semantic_threshold.check(config_map(**{"p.json": processor(threshold=0.85)})) == [
        "p.json: semantic threshold 0.85 is below 0.9"
    ]


def test_prod_rules_follow_what_the_processor_runs() -> None:
    prod = {"requireTenantIsolation": True, "minThreshold": 0.95, "requireGuards": True}
    disabled = config_map(**{"processor.json": processor(enabled=False, tenant_isolation=False, threshold=0.6)})
    assert cache_tenant_isolation.check(disabled, prod) == cache_semantic_threshold.check(disabled, prod) == []
    exact_only = config_map(**{"processor.json": processor(semantic=False, threshold=0.6, guards=False)})
    assert cache_semantic_threshold.check(exact_only, prod) == []
    shared_tier = config_map(**{"processor.json": processor(shared_tiers=["public", "docs"])})
    assert cache_tenant_isolation.check(shared_tier, prod) == []


def test_other_config_maps_are_not_read_as_cache_settings() -> None:
    resource = config_map(
        **{
            "envoy.yaml": "static_resources: {}",
            "cache.json": '{"cache": "not an object"}',
            "broken.json": '{"cache": {',
            "invalid.json": json.dumps({"cache": {"threshold": 3}}),
        }
    )
    assert list(cache_configs(resource)) == []


def _served(threshold: float, model: str = "all-minilm-l6-v2") -> Resource:
    embedder = {"kind": "endpoint", "url": "http://e:8000/v1", "model": model, "dimensions": 384}
    return config_map(**{"processor.json": processor(threshold=threshold, embedder=embedder)})


def test_a_sentence_model_is_held_to_its_own_measured_threshold() -> None:
    prod = {"minThreshold": 0.95, "requireGuards": True}
    # The catalog's measured 0.89 for all-minilm-l6-v2, not the static embedder's 0.95.
    assert cache_semantic_threshold.check(_served(0.89), prod) == []
    assert cache_semantic_threshold.check(_served(0.88), prod) == [
        "processor.json: semantic threshold 0.88 is below 0.89 (all-minilm-l6-v2)"
    ]
    # An endpoint model the catalog has not measured, and the static embedder, fall back to minThreshold.
    assert cache_semantic_threshold.check(_served(0.89, model="bge-small"), prod) == [
        "processor.json: semantic threshold 0.89 is below 0.95"
    ]
    assert cache_semantic_threshold.check(config_map(**{"p.json": processor(threshold=0.89)}), prod) == [
        "p.json: semantic threshold 0.89 is below 0.95"
    ]
    # A stack's policy config may hold a model to more than its catalog figure.
    stricter = {**prod, "minThresholdByEmbedder": {"all-minilm-l6-v2": 0.92}}
    assert cache_semantic_threshold.check(_served(0.9), stricter) == [
        "processor.json: semantic threshold 0.9 is below 0.92 (all-minilm-l6-v2)"
    ]
