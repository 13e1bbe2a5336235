"""Exact and semantic response caching for the gateway's processor (Redis/Valkey with FT.* vector search).

:mod:`~inferplane.processor.cache.request` decides what may be cached and under which keys,
:mod:`~inferplane.processor.cache.store` looks up and stores, :mod:`~inferplane.processor.cache.guards` refuses unsafe
semantic matches, :mod:`~inferplane.processor.cache.sse` replays cached streams, and
:mod:`~inferplane.processor.cache.metrics` names what is counted.
"""
