"""The response cache's part of the processor's configuration (``ProcessorConfig.cache``).

The renderer (``components/gateway/cache_renderer.py``) fills it from the stack's ``cache`` section, the gateway tiers
and the sizing; the processor reads it at start. The server's address and AUTH token are not here: they come with the
processor's Redis URL (``ProcessorConfig.redis_url_env``). Nothing here imports Pulumi or the platform's other
packages.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WordLlamaEmbedderConfig(_Config):
    """In-process static embeddings from the ``wordllama`` wheel (its bundled weights, loaded offline)."""

    kind: Literal["wordllama"] = Field(default="wordllama", description="Embedder kind.")
    dimensions: Literal[64, 128, 256] = Field(
        default=256, description="Matryoshka truncation of the bundled 256-dimension ``l2_supercat`` model."
    )


class EndpointEmbedderConfig(_Config):
    """An OpenAI-compatible ``POST /v1/embeddings`` endpoint."""

    kind: Literal["endpoint"] = Field(default="endpoint", description="Embedder kind.")
    url: str = Field(
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description="Base URL of the OpenAI-compatible API (``http://embed:8000/v1``); ``/embeddings`` is appended.",
    )
    model: str = Field(min_length=1, description="``model`` sent in the embeddings request.")
    dimensions: int = Field(ge=2, le=32768, description="Length of the vectors the endpoint returns.")
    timeout_ms: int = Field(default=50, ge=1, le=5000, description="Per-request timeout; a miss when exceeded.")


EmbedderConfig = Annotated[WordLlamaEmbedderConfig | EndpointEmbedderConfig, Field(discriminator="kind")]


class CachedModel(_Config):
    """What the cache needs to know about one served model."""

    revision: str = Field(
        min_length=1, description="Identity of the weights and engine behind the name: part of every key."
    )
    usd_per_token: float | None = Field(
        default=None, ge=0, description="Serving cost of one generated token (from sizing), for the dollars saved."
    )


class CacheConfig(_Config):
    """Exact and semantic response caching, safe by default."""

    enabled: bool = Field(default=True, description="Look up and store responses at all.")
    semantic: bool = Field(default=True, description="Also answer prompts whose embedding is close enough.")
    threshold: float = Field(default=0.95, gt=0.5, le=1.0, description="Least cosine similarity of a semantic hit.")
    guards: bool = Field(
        default=True,
        description="Refuse semantic hits whose numbers, negations, names or directions differ (gateway.cache.guards), "
        "and those with a differing word the embedder scores as no counterpart of the other prompt's words "
        "(gateway.cache.counterparts).",
    )
    word_similarity: float = Field(
        default=0.9,
        gt=0.0,
        le=1.0,
        description="Least similarity of two lone words, as the embedder scores them, for one to stand for the other "
        "in a semantic hit (measured per embedder above its antonyms and sibling entities).",
    )
    inflection_similarity: float = Field(
        default=0.3,
        gt=0.0,
        le=1.0,
        description="Least similarity of a word and its inflection (plural, past, participle) for one to stand for "
        "the other (so that 'news' is not 'new'); measured per embedder.",
    )
    semantic_max_chars: int = Field(
        default=1000, ge=1, description="Longer last user messages are only cached exactly (static embeddings blur)."
    )
    ttl_seconds: int = Field(default=3600, ge=1, description="Entry lifetime.")
    max_entry_bytes: int = Field(default=262_144, ge=1024, description="Larger responses are not stored.")
    cache_tools: bool = Field(default=False, description="Cache requests that offer tools or functions.")
    cache_non_text: bool = Field(default=False, description="Cache requests with non-text content (images, audio).")
    nondeterministic_opt_in: bool = Field(
        default=True,
        description="Clients may ask to cache sampled (temperature > 0) requests with ``x-inferplane-cache: allow``.",
    )
    tenant_isolation: bool = Field(
        default=True, description="Key entries by tenant; false shares every tier's entries across its tenants."
    )
    shared_tiers: tuple[str, ...] = Field(
        default=(), description="Tiers whose tenants share entries (the tier opted in); others key entries by tenant."
    )
    embedder: EmbedderConfig = Field(default_factory=WordLlamaEmbedderConfig, description="Semantic embedder.")
    timeout_ms: int = Field(
        default=50, ge=1, le=5000, description="Bound on one lookup or store; past it the request goes on uncached."
    )
    retry_after_failure_s: float = Field(
        default=2.0,
        ge=0.0,
        le=300.0,
        description="After a failed round trip, requests skip the cache this long (doubling while it keeps failing).",
    )
    models: dict[str, CachedModel] = Field(
        default_factory=dict, description="Served model name -> revision and cost; other models are never cached."
    )
    key_prefix: str = Field(default="ipc", pattern=r"^[a-z][a-z0-9-]{0,15}$", description="Prefix of every key.")
