"""The response cache on Redis/Valkey: exact entries, a vector index for semantic matches, and failure handling.

Layout (``{p}`` is ``CacheConfig.key_prefix``, ``{e}`` the embedder's ident, ``{k}`` a request's exact key):

* ``{p}:x:{k}``: a string, the JSON entry (the answer, the prompt text the semantic guards compare, the model),
  with the TTL of the spec. A request whose exact key is there is answered from it.
* ``{p}:s:{e}:{k}``: a hash with ``scope`` (TAG: the request's semantic scope) and ``v`` (the FLOAT32 embedding),
  same TTL, indexed by ``{p}:idx:{e}``. A miss looks up the nearest vectors inside its own scope; a candidate at
  least ``threshold`` similar whose guards all pass answers from its exact entry.
* ``{p}:h:{t}``: a missed request's lookup held for its answer (:meth:`ResponseCache.hold`), ``t`` a random token:
  the worker that places a request is not the one that reads its response (the processor's module docstring), so
  the lookup waits here, for :data:`HELD_SECONDS` at most, until the answer's reader takes it.

The index uses only the FT.* subset that ElastiCache for Valkey 8.2's valkey-search shares with RediSearch
(AWS ElastiCache docs, "FT.CREATE" and "FT.SEARCH" vector search commands; RediSearch's vector search docs)::

    FT.CREATE {p}:idx:{e} ON HASH PREFIX 1 {p}:s:{e}: SCHEMA scope TAG v VECTOR HNSW 6 TYPE FLOAT32 DIM {d}
        DISTANCE_METRIC COSINE
    FT.SEARCH {p}:idx:{e} "(@scope:{<hex>})=>[KNN 3 @v $q]" PARAMS 2 q <blob> DIALECT 2

(hash only, a TAG pre-filter, no RETURN clause, the distance read from the ``__v_score`` field both return).

Failure: every lookup and store is bounded by ``timeout_ms`` (socket timeouts, no client retries, and an
``asyncio`` timeout over the whole lookup). A failed round trip is counted, sets the ``up`` gauge to 0 and makes
requests skip the cache for ``retry_after_failure_s`` (doubling up to 60 s while it keeps failing), so a dead or
stalled cache costs at most one timeout per back-off period and never an error. A successful health ping ends the
skip at once: the cache answered, so a stall that has passed costs no more bypasses (and ``up`` = 1 always means
requests use the cache).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inferplane.processor.cache.config import CacheConfig
from inferplane.processor.cache.counterparts import WordVectors, decide, difference
from inferplane.processor.cache.embedders import Embedder, EmbedderError, Vector, embed_timeout, make_embedder
from inferplane.processor.cache.guards import all_pass
from inferplane.processor.cache.metrics import CacheMetrics
from inferplane.processor.cache.request import (
    CACHE_HEADER,
    CACHE_KIND_HEADER,
    CACHE_SIMILARITY_HEADER,
    Bypass,
    Cacheable,
    Endpoint,
    classify,
    storable,
)
from inferplane.processor.cache.sse import SSE_CONTENT_TYPE, replay
from inferplane.processor.cache.synonyms import WORDNET_DISTRIBUTION, default_lexicon

HitKind = Literal["exact", "semantic"]
KNN_CANDIDATES = 3
"""Nearest neighbours read per semantic lookup: the first may fail a guard while the second passes."""
MAX_BACKOFF_S = 60.0
MAX_WORDS_PER_LOOKUP = 16
"""Words (not cached yet) the counterpart check sends to the embedder for one lookup, at most: candidates whose words
would pass it are refused (counted as ``too_different``), so the one extra call stays the size of a short batch."""
HELD_SECONDS = 3_600
"""How long a held lookup waits for its answer: longer than any generation the gateway lets stream."""
SCORE_FIELD = b"__v_score"
"""The distance field RediSearch and valkey-search add to KNN results (``__<vector field>_score``)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hit:
    """A cached answer."""

    kind: HitKind
    answer: dict[str, Any]
    similarity: float


@dataclass
class Lookup:
    """The outcome of a lookup, kept by the processor until the response is stored."""

    request: Cacheable | Bypass
    hit: Hit | None = None
    vector: Vector | None = None
    seconds: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)

    def response_headers(self) -> dict[str, str]:
        """``x-inferplane-cache`` (hit, miss or bypass) and, on a hit, its kind (and similarity)."""
        if isinstance(self.request, Bypass):
            return {CACHE_HEADER: "bypass"}
        if self.hit is None:
            return {CACHE_HEADER: "miss"}
        headers = {CACHE_HEADER: "hit", CACHE_KIND_HEADER: self.hit.kind}
        if self.hit.kind == "semantic":
            headers[CACHE_SIMILARITY_HEADER] = f"{self.hit.similarity:.4f}"
        return headers

    def response(self) -> tuple[bytes, str]:
        """The body and content type that answer the request from the hit (JSON, or SSE for a stream)."""
        assert self.hit is not None and isinstance(self.request, Cacheable)
        answer = dict(self.hit.answer)
        answer["id"] = f"{'chatcmpl' if self.request.endpoint == 'chat' else 'cmpl'}-cache-{secrets.token_hex(12)}"
        answer["created"] = int(time.time())
        if self.request.stream:
            return replay(answer, include_usage=self.request.include_usage), SSE_CONTENT_TYPE
        return json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode(), "application/json"


def _error_kind(error: BaseException) -> str:
    if isinstance(error, RedisTimeoutError | TimeoutError):
        return "timeout"
    if isinstance(error, RedisConnectionError | OSError):
        return "connection"
    return "response"


def connect(url: str, config: CacheConfig) -> aioredis.Redis:
    """A client for ``url`` (``rediss://:token@host:6379``) whose round trips are bounded and never retried."""
    timeout = config.timeout_ms / 1000
    return aioredis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
        decode_responses=False,
        protocol=2,  # RESP2 replies: FT.SEARCH's flat array, the form valkey-search documents
        max_connections=64,
    )


class ResponseCache:
    """Exact and semantic response caching for the processor: :meth:`lookup` on the request, :meth:`store` after."""

    def __init__(
        self,
        config: CacheConfig,
        metrics: CacheMetrics,
        *,
        client: aioredis.Redis,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.client = client
        self.embedder: Embedder | None = None
        if config.semantic:
            self.embedder = embedder if embedder is not None else make_embedder(config.embedder)
        self._clock = clock
        self._words = WordVectors()
        self._lexicon = default_lexicon()
        if config.semantic and self._lexicon is None:
            log.warning(
                "WordNet (%s) is not installed: semantic hits admit no dictionary synonym", WORDNET_DISTRIBUTION
            )
        self._skip_until = 0.0
        self._backoff = 0.0
        self._index_ready = False
        ident = self.embedder.ident if self.embedder is not None else "none"
        self.index_name = f"{config.key_prefix}:idx:{ident}"
        self.doc_prefix = f"{config.key_prefix}:s:{ident}:"
        self.exact_prefix = f"{config.key_prefix}:x:"
        self.held_prefix = f"{config.key_prefix}:h:"
        self._timeout = config.timeout_ms / 1000
        self._embed_timeout = embed_timeout(config.embedder)

    # --- availability ---------------------------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        """False while a recent failure makes requests skip the cache."""
        return self._clock() >= self._skip_until

    def _failed(self, operation: str, error: BaseException) -> None:
        self.metrics.errors.labels(operation=operation, error=_error_kind(error)).inc()
        if _error_kind(error) == "response":
            return  # the cache answered: it is up, the command was wrong (e.g. the index is missing)
        base = self.config.retry_after_failure_s
        self._backoff = min(max(self._backoff * 2, base), MAX_BACKOFF_S)
        self._skip_until = self._clock() + self._backoff
        self.metrics.up.set(0)

    def _succeeded(self) -> None:
        self._backoff = 0.0
        self.metrics.up.set(1)

    async def check(self) -> bool:
        """One PING (the processor runs it periodically so the ``up`` gauge follows an idle gateway too)."""
        try:
            async with asyncio.timeout(self._timeout):
                await self.client.ping()
        except (RedisError, OSError, TimeoutError) as error:
            self._failed("health", error)
            return False
        self._succeeded()
        self._skip_until = 0.0
        return True

    async def ensure_index(self) -> bool:
        """Create the vector index when it does not exist yet (idempotent; several gateways may race)."""
        if self.embedder is None or self._index_ready:
            return self._index_ready
        try:
            async with asyncio.timeout(self._timeout * 5):
                await self.client.execute_command(*self.index_definition())  # type: ignore[no-untyped-call]
        except ResponseError as error:
            if "already exists" not in str(error).lower():
                self._failed("index", error)
                return False
        except (RedisError, OSError, TimeoutError) as error:
            self._failed("index", error)
            return False
        self._index_ready = True
        return True

    def index_definition(self) -> tuple[str | int, ...]:
        """The FT.CREATE command (the subset valkey-search and RediSearch share)."""
        assert self.embedder is not None
        return (
            "FT.CREATE",
            self.index_name,
            "ON",
            "HASH",
            "PREFIX",
            1,
            self.doc_prefix,
            "SCHEMA",
            "scope",
            "TAG",
            "v",
            "VECTOR",
            "HNSW",
            6,
            "TYPE",
            "FLOAT32",
            "DIM",
            self.embedder.dimensions,
            "DISTANCE_METRIC",
            "COSINE",
        )

    # --- lookup ---------------------------------------------------------------------------------------------------

    def _model_label(self, body: Mapping[str, Any]) -> str:
        model = body.get("model")
        return model if isinstance(model, str) and model in self.config.models else "other"

    async def lookup(
        self,
        endpoint: Endpoint,
        body: Mapping[str, Any],
        *,
        tenant: str,
        tier: str,
        header: str | None = None,
        embedded: tuple[str, Vector] | None = None,
    ) -> Lookup:
        """Classify the request and, when cacheable, look for an exact then a semantic answer. Never raises.
        ``embedded``: a text this request already embedded with this cache's embedder, and its vector: when it is
        the text compared, it is not embedded again."""
        request = classify(self.config, endpoint, body, tenant=tenant, tier=tier, header=header)
        if isinstance(request, Cacheable) and not self.available:
            request = Bypass("unavailable")
        if isinstance(request, Bypass):
            self.metrics.bypasses.labels(model=self._model_label(body), reason=request.reason).inc()
            return Lookup(request)
        started = time.perf_counter()
        result = Lookup(request)
        if embedded is not None and embedded[0] == request.text:
            result.vector = embedded[1]
        else:
            await self._embed(result)
        candidates: list[tuple[float, dict[str, Any]]] = []
        try:
            async with asyncio.timeout(self._timeout):
                candidates = await self._lookup(result)
        except (RedisError, OSError, TimeoutError) as error:
            self._failed("lookup", error)
            result.hit = None
            outcome = "error"
        else:
            if result.hit is None and candidates:
                await self._verify(result, candidates)
            outcome = "hit" if result.hit else "miss"
        result.seconds = time.perf_counter() - started
        self.metrics.lookup_seconds.labels(result=outcome).observe(result.seconds)
        if result.hit is not None:
            self._count_hit(request, result.hit)
        else:
            self.metrics.misses.labels(model=request.model).inc()
        return result

    async def _embed(self, result: Lookup) -> None:
        """The prompt's vector, within the embedder's own ``timeout_ms``. Apart from the Redis round trip's bound on
        purpose: a slow or down embedder (a served model) costs this request its semantic lookup, counted in
        ``errors_total{operation="embed"}``, but never the exact lookup nor the cache's health and back-off."""
        request = result.request
        assert isinstance(request, Cacheable)
        if request.text is None or self.embedder is None:
            return
        try:
            async with asyncio.timeout(self._embed_timeout):
                result.vector = (await self.embedder.embed([request.text]))[0]
        except TimeoutError:
            self.metrics.errors.labels(operation="embed", error="timeout").inc()
            result.extra["embed_error"] = f"no vector within {self._embed_timeout} s"
        except EmbedderError as error:
            self.metrics.errors.labels(operation="embed", error="response").inc()
            result.extra["embed_error"] = str(error)

    async def _lookup(self, result: Lookup) -> list[tuple[float, dict[str, Any]]]:
        """The exact hit (set on ``result``), else the cached entries above the threshold whose guards pass, best
        first, for :meth:`_verify`."""
        request = result.request
        assert isinstance(request, Cacheable)
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.exact_prefix + request.exact_key)
        if result.vector is not None:
            pipe.execute_command(
                "FT.SEARCH",
                self.index_name,
                f"(@scope:{{{request.scope}}})=>[KNN {KNN_CANDIDATES} @v $q]",
                "PARAMS",
                2,
                "q",
                result.vector.astype("<f4").tobytes(),
                "DIALECT",
                2,
            )
        replies = await pipe.execute(raise_on_error=False)
        self._succeeded()
        exact = replies[0]
        if isinstance(exact, Exception):
            raise exact
        if exact is not None:
            result.hit = Hit("exact", json.loads(exact)["answer"], 1.0)
            return []
        if result.vector is None:
            return []
        search = replies[1]
        if isinstance(search, ResponseError):
            self._index_ready = False  # e.g. flushed: recreated on the next store
            self.metrics.errors.labels(operation="lookup", error="response").inc()
            return []
        candidates = [c for c in _knn(search) if c[1] >= self.config.threshold]
        if not candidates:
            return []
        refs = [self.exact_prefix + key.removeprefix(self.doc_prefix) for key, _ in candidates]
        entries = await self.client.mget(refs)
        passed: list[tuple[float, dict[str, Any]]] = []
        for (_, similarity), raw in zip(candidates, entries, strict=True):
            if raw is None:
                continue
            entry = json.loads(raw)
            if entry.get("text") is None:
                continue
            if not all_pass(request.text or "", entry["text"], self.config.guards):
                self.metrics.semantic_refusals.labels(reason="guard").inc()
                continue
            passed.append((similarity, entry))
        return passed

    async def _verify(self, result: Lookup, candidates: list[tuple[float, dict[str, Any]]]) -> None:
        """Serve the first candidate whose differing words all have a counterpart (:mod:`.counterparts`). The words
        not cached yet go to the embedder in one call, under the embedder's own bound and apart from Redis's: a slow
        or down embedder costs this semantic hit (counted as ``errors_total{operation="embed_words"}``), never the
        cache's health. With the guards off, the best candidate is served as it is."""
        request = result.request
        assert isinstance(request, Cacheable) and self.embedder is not None
        if not self.config.guards:
            similarity, entry = candidates[0]
            result.hit = Hit("semantic", entry["answer"], similarity)
            return
        diffs = [difference(request.text or "", entry["text"]) for _, entry in candidates]
        wanted: set[str] = set()
        for at, diff in enumerate(diffs):  # the best candidates whose words fit one bounded call
            if len(self._words.missing(wanted | diff.to_embed)) > MAX_WORDS_PER_LOOKUP:
                self.metrics.semantic_refusals.labels(reason="too_different").inc(len(diffs) - at)
                candidates, diffs = candidates[:at], diffs[:at]
                break
            wanted |= diff.to_embed
        missing = self._words.missing(wanted)
        vectors = self._words.get(wanted - set(missing))
        if missing:
            try:
                async with asyncio.timeout(self._embed_timeout):
                    embedded = await self.embedder.embed(missing)
            except (TimeoutError, EmbedderError) as error:
                kind = "timeout" if isinstance(error, TimeoutError) else "response"
                self.metrics.errors.labels(operation="embed_words", error=kind).inc()
                self.metrics.semantic_refusals.labels(reason="embed_error").inc(len(candidates))
                result.extra["embed_error"] = str(error) or f"no word vectors within {self._embed_timeout} s"
                return
            self.metrics.word_embeddings.inc(len(missing))
            self._words.add(missing, embedded)
            vectors |= dict(zip(missing, embedded, strict=True))
        for (similarity, entry), diff in zip(candidates, diffs, strict=True):
            verdict = decide(
                diff, vectors, self.config.word_similarity, self.config.inflection_similarity, self._lexicon
            )
            if verdict.refused is None:
                result.hit = Hit("semantic", entry["answer"], similarity)
                return
            self.metrics.semantic_refusals.labels(reason=verdict.refused).inc()

    def _count_hit(self, request: Cacheable, hit: Hit) -> None:
        self.metrics.hits.labels(model=request.model, kind=hit.kind).inc()
        usage = hit.answer.get("usage") or {}
        total = usage.get("total_tokens") or 0
        completion = usage.get("completion_tokens") or 0
        self.metrics.tokens_saved.labels(model=request.model).inc(max(int(total), 0))
        price = self.config.models[request.model].usd_per_token
        if price is not None:
            self.metrics.usd_saved.labels(model=request.model).inc(max(int(completion), 0) * price)

    # --- store ----------------------------------------------------------------------------------------------------

    async def store(self, lookup: Lookup, answer: Mapping[str, Any]) -> bool:
        """Store the engine's (assembled) answer for a missed cacheable request. Never raises; True when stored."""
        request = lookup.request
        if not isinstance(request, Cacheable) or lookup.hit is not None or not self.available:
            return False
        entry = json.dumps(
            {"answer": answer, "text": request.text, "model": request.model, "stored_at": int(time.time())},
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        if not storable(self.config, answer, len(entry)):
            return False
        ttl = self.config.ttl_seconds
        try:
            if lookup.vector is not None and not self._index_ready:
                await self.ensure_index()
            async with asyncio.timeout(self._timeout):
                pipe = self.client.pipeline(transaction=False)
                pipe.set(self.exact_prefix + request.exact_key, entry, ex=ttl)
                if lookup.vector is not None:
                    doc = self.doc_prefix + request.exact_key
                    pipe.hset(doc, mapping={"scope": request.scope, "v": lookup.vector.astype("<f4").tobytes()})
                    pipe.expire(doc, ttl)
                await pipe.execute()
        except (RedisError, OSError, TimeoutError) as error:
            self._failed("store", error)
            return False
        self._succeeded()
        return True

    def hold_token(self, lookup: Lookup) -> str:
        """The token a missed cacheable request's lookup is to be held under (:meth:`hold`), or "" for any other
        lookup or while the cache is unavailable (then the answer is not cached)."""
        request = lookup.request
        if not isinstance(request, Cacheable) or lookup.hit is not None or not self.available:
            return ""
        return secrets.token_hex(16)

    async def hold(self, lookup: Lookup, token: str) -> bool:
        """Keep ``lookup`` in the cache under ``token`` until its answer is read (:meth:`take_held`); whether it was
        stored. Never raises."""
        request = lookup.request
        assert isinstance(request, Cacheable)
        held: dict[str, Any] = {"request": asdict(request)}
        if lookup.vector is not None:
            held["vector"] = base64.b64encode(lookup.vector.astype("<f4").tobytes()).decode()
        try:
            async with asyncio.timeout(self._timeout):
                await self.client.set(self.held_prefix + token, json.dumps(held, ensure_ascii=False), ex=HELD_SECONDS)
        except (RedisError, OSError, TimeoutError) as error:
            self._failed("store", error)
            return False
        return True

    async def take_held(self, token: str) -> Lookup | None:
        """The lookup :meth:`hold` kept under ``token``, removed (None: gone, expired or unreadable). Never raises."""
        try:
            async with asyncio.timeout(self._timeout):
                raw = await self.client.getdel(self.held_prefix + token)
        except (RedisError, OSError, TimeoutError) as error:
            self._failed("store", error)
            return None
        if raw is None:
            return None
        try:
            held = json.loads(raw)
            vector = held.get("vector")
            return Lookup(
                Cacheable(**held["request"]),
                vector=None if vector is None else np.frombuffer(base64.b64decode(vector), dtype="<f4"),
            )
        except (ValueError, TypeError, KeyError):
            log.warning("a held cache lookup cannot be read back; its answer is not stored")
            return None

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self.client.aclose()


def _knn(reply: Any) -> list[tuple[str, float]]:
    """(document key, cosine similarity) pairs of an FT.SEARCH reply, best first."""
    found: list[tuple[str, float]] = []
    rows: list[tuple[Any, dict[Any, Any]]] = []
    if isinstance(reply, dict):  # RESP3: {"results": [{"id": ..., "extra_attributes": {...}}]}
        for row in reply.get(b"results") or ():
            rows.append((row.get(b"id"), row.get(b"extra_attributes") or {}))
    elif isinstance(reply, list) and reply:  # RESP2: [total, key, [field, value, ...], key, [...], ...]
        rest = reply[1:]
        for key, fields in zip(rest[0::2], rest[1::2], strict=False):
            if isinstance(fields, list):
                rows.append((key, dict(zip(fields[0::2], fields[1::2], strict=False))))
    for key, values in rows:
        distance = values.get(SCORE_FIELD)
        if distance is None:
            continue
        name = key.decode() if isinstance(key, bytes) else str(key)
        found.append((name, 1.0 - float(distance)))
    return sorted(found, key=lambda pair: -pair[1])
