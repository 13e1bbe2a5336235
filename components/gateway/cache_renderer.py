"""The processor's cache settings (``inferplane.processor.cache.config.CacheConfig``) from the spec and the sizing.

The gateway renderer puts :func:`render_cache_config`'s result in ``ProcessorConfig.cache``. Two facts come from
elsewhere in the platform:

* each model's **revision**: a hash of what decides its answers (the catalog model or custom repository, the
  weights repository and dtype, the KV-cache dtype, the engine and its pinned image, speculative decoding). Every
  cache key includes it, so changing any of them (an upgrade) never serves an answer of the previous one;
* each model's **cost per generated token**: the replica's share of its node price over the replica's roofline
  decode throughput (:class:`~inferplane.components.capacity.sizing.SizingResult.decode_tokens_per_second`), what the
  dollars-saved metric multiplies cached completion tokens by.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from inferplane.components.capacity.sizing import DeploymentSizing, PlatformSizing
from inferplane.components.catalog.embedders import EMBEDDING_MODELS
from inferplane.components.catalog.images import engine_image as catalog_engine_image
from inferplane.components.catalog.images import image_reference
from inferplane.components.catalog.instances import get_instance_type
from inferplane.components.serving.naming import cache_embedder_url
from inferplane.components.spec.platform_spec import CacheSpec, ModelDeploymentSpec, PlatformSpec
from inferplane.processor.cache.config import (
    CacheConfig,
    CachedModel,
    EmbedderConfig,
    EndpointEmbedderConfig,
    WordLlamaEmbedderConfig,
)


def engine_image(deployment: ModelDeploymentSpec, spec: PlatformSpec) -> str:
    """The image reference that serves ``deployment`` (vLLM on GPU or TPU, or Triton), pinned by its digest where
    the stack gives one, exactly as the model server runs it: a new digest is a new revision."""
    on_tpu = get_instance_type(spec.pool(deployment.pool).instance_type).cloud == "gcp"
    image = catalog_engine_image(deployment.engine, tpu=on_tpu)
    return image_reference(image, spec.image_digests_for(deployment, image))


def model_revision(deployment: ModelDeploymentSpec, spec: PlatformSpec) -> str:
    """16 hex digits over everything that decides the deployment's answers."""
    identity = {
        "model": deployment.model or deployment.architecture_resolved.hf_repo,
        "weights_repo": deployment.weights_repo,
        "weights_dtype": deployment.weights_dtype,
        "kv_cache_dtype": deployment.kv_cache_dtype,
        "engine": deployment.engine,
        "image": engine_image(deployment, spec),
        "speculative": None
        if deployment.speculative_decoding is None
        else deployment.speculative_decoding.model_dump(),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def usd_per_token(sizing: DeploymentSizing) -> float | None:
    """Serving cost of one generated token at the sizing's decode throughput; ``None`` without a price."""
    per_second = sizing.result.decode_tokens_per_second
    if sizing.replica_hourly_usd is None or not per_second > 0:
        return None
    return sizing.replica_hourly_usd / 3600 / per_second


def embedder_config(cache: CacheSpec, served_url: str | None = None) -> EmbedderConfig:
    """The processor's embedder settings from ``cache.embedder``. A served model is called at its in-cluster
    Service (:func:`components.serving.naming.cache_embedder_url`), or at ``served_url`` where a local run serves it."""
    embedder = cache.embedder
    served = embedder.served_model
    if served is not None:
        return EndpointEmbedderConfig(
            url=served_url or cache_embedder_url(),
            model=served.name,
            dimensions=served.dimensions,
            timeout_ms=embedder.timeout_ms,
        )
    if embedder.kind == "endpoint":
        assert embedder.url is not None and embedder.model is not None and embedder.dimensions is not None
        return EndpointEmbedderConfig(
            url=embedder.url, model=embedder.model, dimensions=embedder.dimensions, timeout_ms=embedder.timeout_ms
        )
    dimensions = embedder.dimensions or 256
    assert dimensions in (64, 128, 256)
    return WordLlamaEmbedderConfig(dimensions=dimensions)


UNMEASURED_WORD_BOUNDS = {"word_similarity": 1.0, "inflection_similarity": 0.8}
"""The counterpart check's bounds for an endpoint the catalog has not measured: no near-synonym but the word itself,
inflections only when very close (a miss where a measured embedder would hit; never the other way round)."""


def word_bounds(cache: CacheSpec) -> dict[str, float]:
    """The counterpart check's bounds for ``cache.embedder``: the catalog's for a served model (or an endpoint serving
    a catalog model under its catalog name, as ``inferplane cache eval`` measures one), wordllama's measured ones (the
    processor's defaults), or :data:`UNMEASURED_WORD_BOUNDS` for another endpoint."""
    embedder = cache.embedder
    served = embedder.served_model
    if served is None and embedder.kind == "endpoint":
        served = EMBEDDING_MODELS.get(embedder.model or "")
        if served is None:
            return dict(UNMEASURED_WORD_BOUNDS)
    if served is not None:
        return {"word_similarity": served.word_similarity, "inflection_similarity": served.inflection_similarity}
    return {}


def render_cache_config(
    spec: PlatformSpec,
    sizing: PlatformSizing,
    models: Iterable[str] | None = None,
    *,
    embedder_url: str | None = None,
) -> CacheConfig | None:
    """The cache section for a gateway routing to ``models`` (default: all); ``None`` when the cache is off.
    ``embedder_url``: where a served embedder answers, when not at its in-cluster Service (a local run)."""
    cache = spec.cache
    if not cache.enabled:
        return None
    wanted = set(models) if models is not None else {d.name for d in spec.models}
    sized = {d.name: d for d in sizing.deployments}
    entries = {
        d.name: CachedModel(
            revision=model_revision(d, spec), usd_per_token=usd_per_token(sized[d.name]) if d.name in sized else None
        )
        for d in spec.models
        if d.name in wanted
    }
    return CacheConfig(
        enabled=True,
        semantic=cache.semantic,
        threshold=cache.threshold,
        guards=cache.semantic_guards,
        ttl_seconds=cache.ttl_seconds,
        max_entry_bytes=cache.max_entry_bytes,
        cache_tools=cache.cache_tool_requests,
        cache_non_text=cache.cache_non_text,
        nondeterministic_opt_in=cache.allow_nondeterministic_opt_in,
        tenant_isolation=cache.tenant_isolation,
        shared_tiers=tuple(t.name for t in spec.gateway.tiers if t.share_cache_across_tenants),
        embedder=embedder_config(cache, embedder_url),
        **word_bounds(cache),
        timeout_ms=cache.lookup_timeout_ms,
        models=entries,
    )
