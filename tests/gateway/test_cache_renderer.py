"""The processor's cache settings rendered from each shipped stack: revisions, costs, sharing, embedders."""

from __future__ import annotations

import pytest

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway.cache_renderer import (
    UNMEASURED_WORD_BOUNDS,
    model_revision,
    render_cache_config,
    usd_per_token,
    word_bounds,
)
from inferplane.components.spec.platform_spec import CacheSpec, PlatformSpec
from inferplane.processor.cache.config import CacheConfig, EndpointEmbedderConfig, WordLlamaEmbedderConfig
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR


def spec_of(stack: str) -> PlatformSpec:
    return load_stack(PROJECT_DIR, stack).platform


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_shipped_stack_renders_a_valid_cache_config(stack: str) -> None:
    spec = spec_of(stack)
    sizing = size_platform(spec)
    config = render_cache_config(spec, sizing)
    assert config is not None
    assert CacheConfig.model_validate_json(config.model_dump_json()) == config
    assert set(config.models) == {d.name for d in spec.models}
    assert config.ttl_seconds == spec.cache.ttl_seconds
    assert config.timeout_ms == spec.cache.lookup_timeout_ms
    if stack == "prod":  # the served sentence model at its measured threshold (docs/caching.md)
        assert config.threshold == spec.cache.threshold == 0.89
        assert (config.word_similarity, config.inflection_similarity) == (0.9, 0.6)  # its measured word bounds
        assert config.embedder == EndpointEmbedderConfig(
            url="http://cache-embedder.inference.svc.cluster.local:8000/v1",
            model="all-minilm-l6-v2",
            dimensions=384,
            timeout_ms=50,
        )
    else:
        assert config.threshold == spec.cache.threshold == 0.95
        assert config.embedder == WordLlamaEmbedderConfig(dimensions=256)
        assert (config.word_similarity, config.inflection_similarity) == (0.9, 0.3)  # wordllama's
    for deployment in sizing.deployments:
        cost = config.models[deployment.name].usd_per_token
        assert cost == usd_per_token(deployment)
        if deployment.replica_hourly_usd is not None:
            expected = deployment.replica_hourly_usd / 3600 / deployment.result.decode_tokens_per_second
            assert cost == pytest.approx(expected)


def test_revision_changes_with_what_decides_the_answers_and_nothing_else() -> None:
    spec = spec_of("prod")
    deployment = spec.models[0]
    base = model_revision(deployment, spec)
    assert len(base) == 16 and base == model_revision(deployment, spec)
    changes: list[dict[str, object]] = [{"weights_dtype": "fp8"}, {"kv_cache_dtype": "auto"}, {"weights_repo": "o/x"}]
    for change in changes:
        assert model_revision(deployment.model_copy(update=change), spec) != base, change
    unrelated: list[dict[str, object]] = [{"max_replicas": 3}, {"concurrency": 2}, {"routing_tier": "x"}]
    for change in unrelated:
        assert model_revision(deployment.model_copy(update=change), spec) == base, change
    triton = spec.models[1]
    assert model_revision(triton.model_copy(update={"engine": "vllm"}), spec) != model_revision(triton, spec)


def test_sharing_comes_from_tier_opt_ins_and_the_isolation_switch() -> None:
    spec = spec_of("prod")
    tiers = tuple(t.model_copy(update={"share_cache_across_tenants": i == 1}) for i, t in enumerate(spec.gateway.tiers))
    shared = spec.model_copy(update={"gateway": spec.gateway.model_copy(update={"tiers": tiers})})
    config = render_cache_config(shared, size_platform(shared))
    assert config is not None and config.shared_tiers == (spec.gateway.tiers[1].name,) and config.tenant_isolation
    opened = spec.model_copy(update={"cache": spec.cache.model_copy(update={"tenant_isolation": False})})
    assert (config := render_cache_config(opened, size_platform(opened))) is not None and not config.tenant_isolation


def test_disabled_cache_renders_nothing_and_an_endpoint_embedder_is_passed_on() -> None:
    spec = spec_of("dev")
    off = spec.model_copy(update={"cache": spec.cache.model_copy(update={"enabled": False})})
    assert render_cache_config(off, size_platform(off)) is None
    raw = spec.cache.model_dump() | {
        "embedder": {"kind": "endpoint", "url": "http://embed:8000/v1", "model": "bge-small", "dimensions": 384}
    }
    endpoint = spec.model_copy(update={"cache": type(spec.cache).model_validate(raw)})
    config = render_cache_config(endpoint, size_platform(endpoint), models=[spec.models[0].name])
    assert config is not None and set(config.models) == {spec.models[0].name}
    assert config.embedder == EndpointEmbedderConfig(
        url="http://embed:8000/v1", model="bge-small", dimensions=384, timeout_ms=50
    )


def test_a_served_embedder_is_called_at_its_service_or_where_a_local_run_serves_it() -> None:
    spec = spec_of("prod")
    local = render_cache_config(spec, size_platform(spec), embedder_url="http://127.0.0.1:18000/v1")
    assert local is not None and local.embedder == EndpointEmbedderConfig(
        url="http://127.0.0.1:18000/v1", model="all-minilm-l6-v2", dimensions=384, timeout_ms=50
    )
    # The stack's own threshold wins over the catalog's.
    raw = spec.cache.model_dump() | {"semantic_similarity_threshold": 0.93}
    stricter = spec.model_copy(update={"cache": type(spec.cache).model_validate(raw)})
    assert (config := render_cache_config(stricter, size_platform(stricter))) is not None and config.threshold == 0.93


def test_the_counterpart_checks_bounds_are_the_embedders_measured_ones_or_strict() -> None:
    served = {"kind": "endpoint", "url": "http://e:8000/v1", "model": "all-minilm-l6-v2", "dimensions": 384}
    assert word_bounds(CacheSpec(embedder=served)) == {"word_similarity": 0.9, "inflection_similarity": 0.6}
    other = {**served, "model": "e5-small"}
    assert (
        word_bounds(CacheSpec(embedder=other))
        == UNMEASURED_WORD_BOUNDS
        == {
            "word_similarity": 1.0,
            "inflection_similarity": 0.8,
        }
    )
    assert word_bounds(CacheSpec()) == {}  # wordllama: the processor's defaults, measured on it
