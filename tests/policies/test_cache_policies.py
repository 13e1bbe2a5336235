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
