"""Embedders for the semantic cache: in-process ``wordllama`` (default) or an OpenAI-compatible endpoint.

Both return unit-length float32 vectors, so cosine similarity is a dot product and the FT index's COSINE distance is
``1 - similarity``. :attr:`Embedder.ident` names the model and its dimensions: it is part of the index name and key
prefix, so vectors of different embedders never meet in one index.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
import numpy.typing as npt
import wordllama

from inferplane.processor.cache.config import EmbedderConfig, EndpointEmbedderConfig, WordLlamaEmbedderConfig
from inferplane.processor.endpoints import is_address_literal, resolve_address

Vector = npt.NDArray[np.float32]


class EmbedderError(Exception):
    """The embedder could not produce a vector (the request goes on uncached)."""


class Embedder(Protocol):
    """Turns prompts into unit vectors."""

    @property
    def ident(self) -> str:
        """Short, key-safe name of model and dimensions (``wl256``)."""
        ...

    @property
    def dimensions(self) -> int:
        """Vector length."""
        ...

    async def embed(self, texts: list[str]) -> list[Vector]:
        """One unit vector per text."""
        ...


def _unit(matrix: npt.NDArray[Any]) -> list[Vector]:
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return list(rows / norms)


class WordLlamaEmbedder:
    """Static word embeddings (wordllama's bundled ``l2_supercat`` model): about 20 microseconds a prompt on CPU.

    The wheel ships its weights and tokenizer config, but ``WordLlama.load()`` looks for ``tokenizer/`` while the
    wheel has ``tokenizers/`` and would try to download; pointing ``cache_dir`` at the package's own folder with
    downloads disabled loads the bundled files offline.
    """

    def __init__(self, config: WordLlamaEmbedderConfig | None = None) -> None:
        self._dimensions = (config or WordLlamaEmbedderConfig()).dimensions
        self._model = wordllama.WordLlama.load(
            dim=256,
            trunc_dim=None if self._dimensions == 256 else self._dimensions,
            cache_dir=Path(wordllama.__file__).parent,
            disable_download=True,
        )

    @property
    def ident(self) -> str:
        return f"wl{self._dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed_now(self, texts: list[str]) -> list[Vector]:
        """The vectors, synchronously (the model is in process and fast enough not to need a thread)."""
        return _unit(self._model.embed(texts, norm=False))

    async def embed(self, texts: list[str]) -> list[Vector]:
        return self.embed_now(texts)


RESOLVE_SECONDS = 5.0
"""How often an embedder's host name is resolved again: a headless Service's name lists its ready pods, so a pod the
autoscaler adds gets requests within this, and one that leaves stops getting them (CoreDNS's default TTL is 5 s)."""
DOWN_SECONDS = 5.0
"""An address whose connection was refused or reset gets no request for this long (while another is up): a pod that
died is skipped before DNS forgets it."""


class EndpointEmbedder:
    """``POST {url}/embeddings`` with ``{"model", "input"}``, as OpenAI and vLLM's ``--task embed`` serve it.

    Balanced per request: over plain HTTP a host name is resolved (every :data:`RESOLVE_SECONDS`) to all its addresses
    (the served embedder's headless Service: one per ready pod) and each request goes to the address with the fewest
    of this process's requests in flight, ties taken in turn. Through a ClusterIP Service a processor's keep-alive
    connections would pin it to the pod its first connection drew. An HTTPS URL (a hosted API, whose certificate
    names the host) and an address literal are called as written."""

    def __init__(
        self,
        config: EndpointEmbedderConfig,
        client: httpx.AsyncClient | None = None,
        *,
        resolve: Callable[[str, int], Awaitable[set[str]]] = resolve_address,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._client = client or httpx.AsyncClient(timeout=config.timeout_ms / 1000)
        self._resolve = resolve
        self._clock = clock
        url = httpx.URL(config.url.rstrip("/") + "/embeddings")
        self._url = url
        self._balanced = url.scheme == "http" and not is_address_literal(url.host)
        self._addresses: list[str] = []
        self._resolved_at = -1e9
        self._inflight: dict[str, int] = {}
        self._down_until: dict[str, float] = {}
        self._turn = 0

    @property
    def ident(self) -> str:
        safe = "".join(c if c.isalnum() else "-" for c in self._config.model.lower())[:24]
        return f"ep-{safe}-{self._config.dimensions}"

    @property
    def dimensions(self) -> int:
        return self._config.dimensions

    async def _pick(self) -> str | None:
        """The address for the next request (None: call the URL as written)."""
        if not self._balanced:
            return None
        now = self._clock()
        if now - self._resolved_at >= RESOLVE_SECONDS:
            self._resolved_at = now
            found = sorted(await self._resolve(self._url.host, self._url.port or 80))
            if found:  # a failed lookup keeps the last addresses rather than none
                self._addresses = found
        if not self._addresses:
            return None
        up = [a for a in self._addresses if self._down_until.get(a, 0.0) <= now] or self._addresses
        self._turn += 1
        least = min(self._inflight.get(a, 0) for a in up)
        tied = [a for a in up if self._inflight.get(a, 0) == least]
        return tied[self._turn % len(tied)]

    async def embed(self, texts: list[str]) -> list[Vector]:
        address = await self._pick()
        url = self._url if address is None else self._url.copy_with(netloc=address.encode())
        headers = {} if address is None else {"Host": self._url.netloc.decode()}
        if address is not None:
            self._inflight[address] = self._inflight.get(address, 0) + 1
        try:
            response = await self._client.post(url, json={"model": self._config.model, "input": texts}, headers=headers)
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = _unit(np.array([item["embedding"] for item in data], dtype=np.float32))
        except (httpx.ConnectError, httpx.RemoteProtocolError) as error:
            if address is not None:
                self._down_until[address] = self._clock() + DOWN_SECONDS
            raise EmbedderError(f"{url}: {error}") from error
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as error:
            raise EmbedderError(f"{url}: {error}") from error
        finally:
            if address is not None:
                self._inflight[address] -= 1
        if len(vectors) != len(texts) or any(v.shape != (self.dimensions,) for v in vectors):
            raise EmbedderError(f"{url}: expected {len(texts)} vectors of {self.dimensions} dimensions")
        return vectors

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


async def embed_in_batches(embedder: Embedder, texts: list[str], batch: int) -> list[Vector]:
    """``texts`` embedded ``batch`` at a time, so one request's size and time stay bounded whatever their number."""
    vectors: list[Vector] = []
    for start in range(0, len(texts), batch):
        vectors.extend(await embedder.embed(texts[start : start + batch]))
    return vectors


def embed_timeout(config: EmbedderConfig) -> float | None:
    """Seconds one prompt's embedding may take on the request path: an endpoint's own ``timeout_ms``; None for an
    in-process embedder, which runs synchronously (nothing to time out)."""
    return config.timeout_ms / 1000 if isinstance(config, EndpointEmbedderConfig) else None


def make_embedder(config: EmbedderConfig) -> WordLlamaEmbedder | EndpointEmbedder:
    """The embedder a config names."""
    if isinstance(config, WordLlamaEmbedderConfig):
        return WordLlamaEmbedder(config)
    return EndpointEmbedder(config)
