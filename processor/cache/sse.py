"""Cached answers as server-sent events, and streamed answers back into one cacheable response.

A cache entry holds the non-streamed form of the answer (``chat.completion`` or ``text_completion``). A client that
asked for ``stream: true`` gets it replayed in OpenAI's chunk format: a first chunk with the role, one content chunk
per choice, a last chunk with the ``finish_reason``, a usage chunk when ``stream_options.include_usage`` asked for
one, then ``data: [DONE]``. :func:`assemble` does the reverse for the response path: the chunks vLLM streamed become
the entry that is stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

SSE_CONTENT_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"


def _event(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def replay(answer: Mapping[str, Any], *, include_usage: bool) -> bytes:
    """The SSE body for a cached answer (chat or text completion)."""
    chat = answer.get("object") == "chat.completion"
    head = {
        "id": answer.get("id", ""),
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": answer.get("created", 0),
        "model": answer.get("model", ""),
    }
    events: list[bytes] = []
    choices = [c for c in answer.get("choices", ()) if isinstance(c, Mapping)]
    for choice in choices:
        index = choice.get("index", 0)
        if chat:
            message = choice.get("message") or {}
            events.append(
                _event(
                    {
                        **head,
                        "choices": [
                            {"index": index, "delta": {"role": message.get("role", "assistant"), "content": ""}}
                            | {"logprobs": None, "finish_reason": None}
                        ],
                    }
                )
            )
            delta: dict[str, Any] = {"content": message.get("content") or ""}
            if message.get("tool_calls"):
                delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            body = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
            events.append(_event({**head, "choices": [body]}))
            end = {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice.get("finish_reason")}
            events.append(_event({**head, "choices": [end]}))
        else:
            text = {"index": index, "text": choice.get("text", ""), "logprobs": None, "finish_reason": None}
            events.append(_event({**head, "choices": [text]}))
            end = {"index": index, "text": "", "logprobs": None, "finish_reason": choice.get("finish_reason")}
            events.append(_event({**head, "choices": [end]}))
    if include_usage and isinstance(answer.get("usage"), Mapping):
        events.append(_event({**head, "choices": [], "usage": answer["usage"]}))
    events.append(DONE)
    return b"".join(events)


def events(body: bytes) -> Iterator[dict[str, Any]]:
    """The JSON payloads of an SSE body (``[DONE]`` and comments skipped)."""
    for block in body.split(b"\n\n"):
        for line in block.splitlines():
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data and data != b"[DONE]":
                    yield json.loads(data)


def assemble(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The non-streamed answer that a stream of chunks spells; ``None`` when it is incomplete or malformed."""
    head: dict[str, Any] = {}
    texts: dict[int, list[str]] = {}
    roles: dict[int, str] = {}
    finish: dict[int, str | None] = {}
    usage: Any = None
    chat = True
    for chunk in chunks:
        if not head:
            chat = chunk.get("object") == "chat.completion.chunk"
            head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            index = int(choice.get("index", 0))
            if chat:
                delta = choice.get("delta") or {}
                if delta.get("tool_calls"):
                    return None  # tool calls are not reassembled: such answers are not stored
                if delta.get("role"):
                    roles[index] = delta["role"]
                piece = delta.get("content")
            else:
                piece = choice.get("text")
            if piece:
                texts.setdefault(index, []).append(piece)
            else:
                texts.setdefault(index, [])
            if choice.get("finish_reason") is not None:
                finish[index] = choice["finish_reason"]
    if not head or not texts or set(finish) != set(texts):
        return None
    choices: list[dict[str, Any]] = []
    for index in sorted(texts):
        content = "".join(texts[index])
        if chat:
            message = {"role": roles.get(index, "assistant"), "content": content}
            choices.append({"index": index, "message": message, "logprobs": None, "finish_reason": finish[index]})
        else:
            choices.append({"index": index, "text": content, "logprobs": None, "finish_reason": finish[index]})
    answer: dict[str, Any] = {**head, "object": "chat.completion" if chat else "text_completion", "choices": choices}
    if usage is not None:
        answer["usage"] = usage
    return answer
