"""Exact and semantic response caching for the gateway's processor (Redis/Valkey with FT.* vector search).

:mod:`~inferplane.gateway.cache.request` decides what may be cached and under which keys,
:mod:`~inferplane.gateway.cache.store` looks up and stores, :mod:`~inferplane.gateway.cache.guards` refuses unsafe
semantic matches, :mod:`~inferplane.gateway.cache.sse` replays cached streams, and
:mod:`~inferplane.gateway.cache.metrics` names what is counted.
"""
