"""Prompt tokens, counted with the served model's own tokenizer (``tokenizer.json`` from the model cache).

A model whose tokenizer file is missing falls back to an estimate (one token per three UTF-8 bytes, which
over-counts for English text with Llama-family vocabularies) and the processor counts a ``tokenizer`` error, so
context admission errs on the side of rejecting early rather than letting an over-long prompt reach the engine.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from inferplane.processor.prefix_index import MESSAGE_SEPARATOR

log = logging.getLogger(__name__)

ESTIMATE_BYTES_PER_TOKEN = 3


def _text_parts(content: Any) -> list[str]:
    """The text of a message's ``content``: a string, or a list of parts of which ``text`` parts count."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return []


def prompt_texts(body: Mapping[str, Any]) -> tuple[list[str], int]:
    """The texts to count in an OpenAI request body and how many chat messages carry them.

    Chat completions: every message's text content (tool-call arguments included); completions: ``prompt`` (a
    string or a list of strings). Raises ``ValueError`` when neither is present.
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        texts: list[str] = []
        for message in messages:
            if not isinstance(message, dict):
                raise ValueError("messages must be objects")
            texts.extend(_text_parts(message.get("content")))
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    texts.append(str(call["function"].get("arguments", "")))
        return texts, len(messages)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt], 0
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return list(prompt), 0
    raise ValueError("the body has neither messages nor a text prompt")


class TokenCounter:
    """Counts prompt tokens per model; tokenizers load once, on first use."""

    def __init__(self, paths: Mapping[str, str | None]) -> None:
        self._paths = dict(paths)
        self._loaded: dict[str, Tokenizer | None] = {}

    def tokenizer(self, model: str) -> Tokenizer | None:
        """The model's tokenizer, or None when its file is missing or unreadable."""
        if model not in self._loaded:
            path = self._paths.get(model)
            tokenizer = None
            if path and Path(path).is_file():
                try:
                    tokenizer = Tokenizer.from_file(path)
                except Exception:  # a corrupt file: estimate, and say so once
                    log.exception("cannot load tokenizer %s for %s", path, model)
            else:
                log.warning("no tokenizer file for %s at %s: prompt tokens are estimated", model, path)
            self._loaded[model] = tokenizer
        return self._loaded[model]

    def count(self, model: str, texts: list[str], messages: int, overhead_per_message: int) -> tuple[int, bool]:
        """Prompt tokens of ``texts`` for ``model`` plus the chat template's per-message overhead, and whether the
        count is exact (False: estimated without a tokenizer)."""
        tokens, exact, _ = self.encode(model, texts, messages, overhead_per_message)
        return tokens, exact

    def encode(
        self, model: str, texts: list[str], messages: int, overhead_per_message: int
    ) -> tuple[int, bool, list[int] | None]:
        """As :meth:`count`, with the token ids of the texts in order, each text's followed by
        :data:`~inferplane.processor.prefix_index.MESSAGE_SEPARATOR` (None without a tokenizer): the prefix
        router hashes them, so a prompt is tokenized once."""
        tokenizer = self.tokenizer(model)
        overhead = messages * overhead_per_message
        if tokenizer is None:
            estimate = sum(math.ceil(len(t.encode()) / ESTIMATE_BYTES_PER_TOKEN) for t in texts)
            return estimate + overhead, False, None
        if not texts:
            return overhead, True, []
        # encode_batch_fast: the ids without the character offsets encode() also tracks, which the processor never
        # reads. CPU per call, a word-level tokenizer on this machine (benchmarks/gateway_cpu.py, issue 33): one
        # 6,000-token text 2.75 -> 1.67 ms, one of 200 tokens 0.105 -> 0.059 ms, four of 3,000 5.57 -> 3.47 ms (over
        # encode() one by one); two texts of 20 tokens 0.030 -> 0.044 ms, the one case it loses.
        encoded = [e.ids for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        ids: list[int] = []
        for part in encoded:
            ids.extend(part)
            ids.append(MESSAGE_SEPARATOR)
        return len(ids) - len(encoded) + overhead, True, ids
