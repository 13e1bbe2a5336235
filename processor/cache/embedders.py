"""Embedders for the semantic cache: in-process ``wordllama`` (default) or an OpenAI-compatible endpoint.

Both return unit-length float32 vectors, so cosine similarity is a dot product and the FT index's COSINE distance is
``1 - similarity``. :attr:`Embedder.ident` names the model and its dimensions: it is part of the index name and key
prefix, so vectors of different embedders never meet in one index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
import numpy.typing as npt
import wordllama

from inferplane.processor.cache.config import EmbedderConfig, EndpointEmbedderConfig, WordLlamaEmbedderConfig

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


class EndpointEmbedder:
    """``POST {url}/embeddings`` with ``{"model", "input"}``, as OpenAI and vLLM's ``--task embed`` serve it."""

    def __init__(self, config: EndpointEmbedderConfig, client: httpx.AsyncClient | None = None) -> None:
        self._config = config
        self._client = client or httpx.AsyncClient(timeout=config.timeout_ms / 1000)

    @property
    def ident(self) -> str:
        safe = "".join(c if c.isalnum() else "-" for c in self._config.model.lower())[:24]
        return f"ep-{safe}-{self._config.dimensions}"

    @property
    def dimensions(self) -> int:
        return self._config.dimensions

    async def embed(self, texts: list[str]) -> list[Vector]:
        url = self._config.url.rstrip("/") + "/embeddings"
        try:
            response = await self._client.post(url, json={"model": self._config.model, "input": texts})
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = _unit(np.array([item["embedding"] for item in data], dtype=np.float32))
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as error:
            raise EmbedderError(f"{url}: {error}") from error
        if len(vectors) != len(texts) or any(v.shape != (self.dimensions,) for v in vectors):
            raise EmbedderError(f"{url}: expected {len(texts)} vectors of {self.dimensions} dimensions")
        return vectors

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


def make_embedder(config: EmbedderConfig) -> WordLlamaEmbedder | EndpointEmbedder:
    """The embedder a config names."""
    if isinstance(config, WordLlamaEmbedderConfig):
        return WordLlamaEmbedder(config)
    return EndpointEmbedder(config)
