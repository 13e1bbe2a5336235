"""The response cache's Prometheus metrics: names (the one source alerts and dashboards import) and the recorder."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

HITS = "inferplane_gateway_cache_hits_total"
"""Counter, labels ``model``, ``kind`` (``exact`` or ``semantic``): requests answered from the cache."""
MISSES = "inferplane_gateway_cache_misses_total"
"""Counter, label ``model``: cacheable requests the cache could not answer."""
BYPASSES = "inferplane_gateway_cache_bypasses_total"
"""Counter, labels ``model``, ``reason`` (``gateway.cache.request.BypassReason``): requests that skipped the cache."""
ERRORS = "inferplane_gateway_cache_errors_total"
"""Counter, labels ``operation`` (``lookup``, ``store``, ``index``, ``embed``, ``embed_words``), ``error`` (``timeout``,
``connection``, ``response``): cache round trips that failed; the request itself went on."""
LOOKUP_SECONDS = "inferplane_gateway_cache_lookup_seconds"
"""Histogram, label ``result`` (``hit``, ``miss``, ``error``): time the request spent in the cache lookup."""
TOKENS_SAVED = "inferplane_gateway_cache_tokens_saved_total"
"""Counter, label ``model``: prompt plus completion tokens of answers served from the cache."""
USD_SAVED = "inferplane_gateway_cache_usd_saved_total"
"""Counter, label ``model``: completion tokens served from the cache times the model's serving cost per token."""
SEMANTIC_REFUSALS = "inferplane_gateway_cache_semantic_refusals_total"
"""Counter, label ``reason`` (``guard``, ``number``, ``unread``, ``tense``, ``order``, ``too_different``,
``no_counterpart``, ``embed_error``): cached prompts above the similarity threshold that were not served (a guard or
the counterpart check refused them, or the differing words could not be embedded)."""
WORD_EMBEDDINGS = "inferplane_gateway_cache_word_embeddings_total"
"""Counter: words the counterpart check sent to the embedder (each word once per process; the check's cost)."""
UP = "inferplane_gateway_cache_up"
"""Gauge: 1 while the last cache round trip (or health check) succeeded, 0 while the cache is unreachable."""

LOOKUP_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25)
"""Lookup latency buckets, seconds: a lookup is sub-millisecond on a healthy cache and bounded by the timeout."""


def _name(metric: str, suffix: str) -> str:
    """prometheus_client appends ``_total`` to counters itself."""
    return metric.removesuffix(suffix)


class CacheMetrics:
    """The cache's metrics in one registry (the processor's, or a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.hits = Counter(
            _name(HITS, "_total"), "Requests answered from the cache.", ["model", "kind"], registry=registry
        )
        self.misses = Counter(
            _name(MISSES, "_total"), "Cacheable requests not in the cache.", ["model"], registry=registry
        )
        self.bypasses = Counter(
            _name(BYPASSES, "_total"), "Requests that skipped the cache.", ["model", "reason"], registry=registry
        )
        self.errors = Counter(
            _name(ERRORS, "_total"), "Failed cache round trips.", ["operation", "error"], registry=registry
        )
        self.lookup_seconds = Histogram(
            LOOKUP_SECONDS, "Time spent in cache lookups.", ["result"], buckets=LOOKUP_BUCKETS, registry=registry
        )
        self.tokens_saved = Counter(
            _name(TOKENS_SAVED, "_total"), "Tokens served from the cache.", ["model"], registry=registry
        )
        self.usd_saved = Counter(
            _name(USD_SAVED, "_total"), "Serving cost of tokens served from the cache.", ["model"], registry=registry
        )
        self.semantic_refusals = Counter(
            _name(SEMANTIC_REFUSALS, "_total"),
            "Cached prompts above the threshold not served.",
            ["reason"],
            registry=registry,
        )
        self.word_embeddings = Counter(
            _name(WORD_EMBEDDINGS, "_total"), "Words embedded by the counterpart check.", registry=registry
        )
        self.up = Gauge(
            UP,
            "1 while the cache answers, 0 while it is unreachable.",
            registry=registry,
            multiprocess_mode="livemin",  # several workers: 0 as soon as one of them cannot reach it
        )
        self.up.set(1)
