"""What may be cached, and under which keys: the request side of the response cache.

:func:`classify` turns one OpenAI request (``/v1/chat/completions`` or ``/v1/completions``) into either a
:class:`Bypass` (with the reason counted in the metrics) or a :class:`Cacheable` carrying

* ``exact_key``: a SHA-256 over the canonical JSON of everything that decides the answer: the served model and its
  revision (a model upgrade changes every key), the messages or prompt, every sampling parameter, tools and
  response format, and the sharing scope (the tenant, or the tier when the tier shares entries). Only fields that
  cannot change the generated text are left out (``stream``, ``stream_options``, ``user``); integral floats are
  written as integers, so ``"temperature": 0.0`` and ``0`` are one key.
* ``scope``: the same hash with the last user message taken out: the semantic cache compares only that message,
  and only between requests whose scope (model, revision, tenant, earlier turns, parameters) is identical.
* ``text``: the last user message, when it may be matched semantically.

Safe by default: only deterministic requests (``temperature`` 0; a client may opt a sampled request in with
``x-inferplane-cache: allow`` when the config allows it), never requests offering tools or carrying non-text
content unless configured, and ``x-inferplane-cache: bypass`` skips lookup and store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from inferplane.processor.cache.config import CacheConfig

CACHE_HEADER = "x-inferplane-cache"
"""Request: ``bypass`` (neither look up nor store) or ``allow`` (cache a sampled request). Response: ``hit``,
``miss`` or ``bypass``."""
CACHE_KIND_HEADER = "x-inferplane-cache-kind"
"""Response header on a hit: ``exact`` or ``semantic``."""
CACHE_SIMILARITY_HEADER = "x-inferplane-cache-similarity"
"""Response header on a semantic hit: the cosine similarity, 4 decimals."""

Endpoint = Literal["chat", "completions"]
BypassReason = Literal["disabled", "header", "model", "sampling", "tools", "non_text", "invalid", "unavailable"]
"""Why a request skipped the cache (the ``reason`` label of the bypass counter)."""

UNKEYED_FIELDS = frozenset({"stream", "stream_options", "user"})
"""Request fields that cannot change the generated text."""
TOOL_FIELDS = ("tools", "functions", "tool_choice", "function_call")
NON_TEXT_FIELDS = ("modalities", "audio")
KEY_VERSION = 1
"""Bumped when the key layout changes, so old entries are never read under a new meaning."""


@dataclass(frozen=True)
class Bypass:
    """The request goes to the engine untouched and its response is not stored."""

    reason: BypassReason


@dataclass(frozen=True)
class Cacheable:
    """A request the cache may answer and store."""

    endpoint: Endpoint
    model: str
    exact_key: str
    """Hex SHA-256 of everything that decides the answer."""
    scope: str
    """Hex SHA-256 of the same without the last user message: semantic matches stay inside it."""
    text: str | None
    """The last user message when it may be matched semantically, else ``None``."""
    stream: bool
    """The client asked for server-sent events."""
    include_usage: bool
    """``stream_options.include_usage``: a replayed stream ends with a usage chunk."""


def _normal(value: Any) -> Any:
    """JSON values with integral floats as integers (``0.0`` and ``0`` hash alike)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, integral floats as integers: one spelling per meaning."""
    return json.dumps(_normal(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def _text_parts(content: Any) -> str | None:
    """The text of a message's content (a string or a list of text parts); ``None`` when any part is not text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                return None
            texts.append(part["text"])
        return "\n".join(texts)
    if content is None:
        return ""
    return None


def _has_non_text(body: Mapping[str, Any], endpoint: Endpoint) -> bool:
    if any(body.get(f) not in (None, [], ["text"]) for f in NON_TEXT_FIELDS):
        return True
    if endpoint == "chat":
        return any(isinstance(m, Mapping) and _text_parts(m.get("content")) is None for m in body.get("messages") or ())
    return False


def _deterministic(body: Mapping[str, Any]) -> bool:
    temperature = body.get("temperature")
    return isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature == 0


def _well_formed(body: Mapping[str, Any], endpoint: Endpoint) -> bool:
    if not isinstance(body.get("model"), str):
        return False
    if endpoint == "chat":
        messages = body.get("messages")
        return isinstance(messages, list) and bool(messages) and all(isinstance(m, Mapping) for m in messages)
    return isinstance(body.get("prompt"), str | list)


def sharing_scope(config: CacheConfig, tenant: str, tier: str) -> str:
    """Whose entries a request may see: its tenant's, or its tier's when the tier shares across tenants."""
    if not config.tenant_isolation or tier in config.shared_tiers:
        return f"tier:{tier}"
    return f"tenant:{tenant}"


def classify(
    config: CacheConfig,
    endpoint: Endpoint,
    body: Mapping[str, Any],
    *,
    tenant: str,
    tier: str,
    header: str | None = None,
) -> Cacheable | Bypass:
    """Decide whether the cache may answer ``body``, and under which keys."""
    bypass = _bypass(config, endpoint, body, (header or "").strip().lower())
    if bypass is not None:
        return bypass
    keyed = {k: v for k, v in body.items() if k not in UNKEYED_FIELDS}
    head = {
        "v": KEY_VERSION,
        "endpoint": endpoint,
        "model": body["model"],
        "revision": config.models[body["model"]].revision,
        "scope": sharing_scope(config, tenant, tier),
    }
    exact_key = _digest({**head, "request": keyed})
    text, semantic_rest = _split_last_text(endpoint, keyed)
    if not config.semantic or text is None or not text.strip() or len(text) > config.semantic_max_chars:
        text = None
    scope = _digest({**head, "semantic": semantic_rest})
    options = body.get("stream_options")
    return Cacheable(
        endpoint=endpoint,
        model=body["model"],
        exact_key=exact_key,
        scope=scope,
        text=text,
        stream=body.get("stream") is True,
        include_usage=isinstance(options, Mapping) and options.get("include_usage") is True,
    )


def _bypass(config: CacheConfig, endpoint: Endpoint, body: Mapping[str, Any], directive: str) -> Bypass | None:
    """Why the cache must leave ``body`` alone (the first reason that applies), or ``None`` when it may cache it."""
    if not config.enabled:
        return Bypass("disabled")
    if directive == "bypass":
        return Bypass("header")
    if not _well_formed(body, endpoint):
        return Bypass("invalid")
    if body["model"] not in config.models:
        return Bypass("model")
    if not _deterministic(body) and not (config.nondeterministic_opt_in and directive == "allow"):
        return Bypass("sampling")
    if not config.cache_tools and any(body.get(f) not in (None, [], "none") for f in TOOL_FIELDS):
        return Bypass("tools")
    if not config.cache_non_text and _has_non_text(body, endpoint):
        return Bypass("non_text")
    return None


def last_user_text(path: str, body: Mapping[str, Any]) -> str | None:
    """The text of a request's last user message (a completion's prompt string), or None: what the semantic cache
    compares and what a difficulty-routed tier scores."""
    if path == "/v1/completions":
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else None
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
        return None
    last = messages[-1]
    return _text_parts(last.get("content")) if last.get("role") == "user" else None


def _split_last_text(endpoint: Endpoint, keyed: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The last user message's text (``None`` when it has none) and the keyed request without it."""
    text: str | None = None
    semantic_rest: dict[str, Any]
    if endpoint == "chat":
        messages = list(keyed["messages"])
        last = messages[-1]
        last_text = _text_parts(last.get("content")) if last.get("role") == "user" else None
        if last_text is not None:
            text = last_text
            messages[-1] = {k: v for k, v in last.items() if k != "content"}
        semantic_rest = {**keyed, "messages": messages}
    else:
        prompt = keyed["prompt"]
        if isinstance(prompt, str):
            text = prompt
        semantic_rest = {k: v for k, v in keyed.items() if k != "prompt"}
    return text, semantic_rest


def storable(config: CacheConfig, response: Mapping[str, Any], size: int) -> bool:
    """Whether an engine's (assembled) response may be stored: a complete answer within the size bound."""
    if size > config.max_entry_bytes:
        return False
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    for choice in choices:
        if not isinstance(choice, Mapping) or choice.get("finish_reason") is None:
            return False
        message = choice.get("message")
        if isinstance(message, Mapping) and message.get("tool_calls") and not config.cache_tools:
            return False
    return True
