"""How a processor reaches the gateway's Redis (budgets, slots, the pods' picks): its URL and TLS, and a client."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from inferplane.processor.config import ProcessorConfig


def redis_url(config: ProcessorConfig) -> str | None:
    """The Redis URL: from ``redis_url_file`` when it exists (the mounted Secret), else ``redis_url_env``."""
    if config.redis_url_file is not None:
        try:
            return Path(config.redis_url_file).read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            pass
    return os.environ.get(config.redis_url_env) or None


def redis_tls(config: ProcessorConfig, url: str) -> dict[str, Any]:
    """The client's TLS arguments for ``url`` (none unless ``rediss://`` with a CA file)."""
    if config.redis_ca_file is None or not url.startswith("rediss://"):
        return {}
    # Trust only the server's own CA (Memorystore: one per instance, so a chain to it is this server). No hostname
    # check: the client connects by IP, and Memorystore's certificate names that IP in its subject CN
    # (envoyproxy/ratelimit#409), which Python's matcher ignores (it reads subjectAltName).
    return {"ssl_ca_certs": config.redis_ca_file, "ssl_check_hostname": False}


def connect_redis(url: str, timeout: float, **tls: Any) -> Redis:
    """A client for the budgets' or the slots' store (or the pods' picks), every round trip bounded by ``timeout``.

    One retry at once, no backoff: it replaces a pooled connection Redis closed (a restart, an idle timeout), while a
    Redis that is down costs a request two refused connects. redis-py's default (ten retries backing off up to 1 s
    each) held every request about 4 s before its budget failed open (measured: 11.7 s for three requests)."""
    return Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 1), **tls
    )
