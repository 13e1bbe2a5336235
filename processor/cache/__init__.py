"""Exact and semantic response caching for the gateway's processor (Redis/Valkey with FT.* vector search).

:mod:`~inferplane.processor.cache.request` decides what may be cached and under which keys,
:mod:`~inferplane.processor.cache.store` looks up and stores, :mod:`~inferplane.processor.cache.guards` and
:mod:`~inferplane.processor.cache.counterparts` refuse unsafe semantic matches (both read WordNet's synonyms through
:mod:`~inferplane.processor.cache.synonyms`), :mod:`~inferplane.processor.cache.sse` replays cached streams, and
:mod:`~inferplane.processor.cache.metrics` names what is counted.
"""
