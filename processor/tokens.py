"""Prompt tokens, counted with the served model's own tokenizer (``tokenizer.json`` from the model cache).

A model whose tokenizer file is missing falls back to an estimate (one token per three UTF-8 bytes, which
over-counts for English text with Llama-family vocabularies) and the processor counts a ``tokenizer`` error, so
context admission errs on the side of rejecting early rather than letting an over-long prompt reach the engine.
Texts a worker tokenizes again (a shared system prompt, a conversation's earlier turns) are answered from
:class:`TokenizedTexts`; a long text is kept in segments (:mod:`inferplane.processor.token_segments`), so a beginning
many texts share is kept too when the texts as wholes never repeat.
"""

from __future__ import annotations

import logging
import math
import sys
from array import array
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from inferplane.processor.prefix_index import MESSAGE_SEPARATOR
from inferplane.processor.token_segments import agrees, refusal, segments

log = logging.getLogger(__name__)

ESTIMATE_BYTES_PER_TOKEN = 3
CACHED_TEXT_MIN_CHARS = 1024
"""Texts at least this long keep their token ids (:class:`TokenizedTexts`): system prompts, few-shot preambles and a
conversation's earlier turns, which clients resend whole with every request and which are most of a long prompt's
tokens. Shorter ones cost little to tokenize again (0.06 ms for 200 tokens) and would only churn the cache."""
ENTRY_OVERHEAD_BYTES = 200
"""What an entry costs beyond its text and ids: the ``OrderedDict`` slot, the key tuple and the array header."""
SEEN_TEXTS = 16_384
"""Long texts remembered as seen once (by hash, about 100 bytes each): a text's ids are kept the second time it is
tokenized, so a question asked once (most user turns) never takes a slot a shared system prompt could use."""


class TokenizedTexts:
    """The token ids of long texts tokenized more than once, per model, least recently used out past
    ``budget_bytes``.

    Each text of a prompt, or each segment of a long one, is tokenized alone (:meth:`TokenCounter.encode`), so its
    ids do not depend on the others and a kept entry is exactly what tokenizing it again would give. A hit costs
    hashing the text (once per string object) and comparing it with the kept one; ids are kept as 32-bit arrays (4
    bytes a token, against 36 for a list of Python ints)."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.used_bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, str], array[int]] = OrderedDict()
        self._seen: OrderedDict[int, None] = OrderedDict()

    def get(self, model: str, text: str) -> array[int] | None:
        """The kept ids of ``text`` for ``model`` (now the most recently used), or None."""
        if not self._keeps(text):
            return None
        key = (model, text)
        ids = self._entries.get(key)
        if ids is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return ids

    def put(self, model: str, text: str, ids: list[int]) -> None:
        """Keep ``ids`` for a long enough ``text`` tokenized before (:data:`SEEN_TEXTS`); the least recently used
        entries leave to make room."""
        if not self._keeps(text):
            return
        key = (model, text)
        if key in self._entries or not self._seen_before(hash(key)):
            return
        kept = array("i", ids)
        cost = _entry_bytes(text, kept)
        if cost > self.budget_bytes:
            return
        self._entries[key] = kept
        self.used_bytes += cost
        while self.used_bytes > self.budget_bytes:
            (_, old_text), old_ids = self._entries.popitem(last=False)
            self.used_bytes -= _entry_bytes(old_text, old_ids)

    def wants(self, model: str, text: str) -> bool:
        """Whether :meth:`put` would keep ``text`` now (long enough and tokenized before): the caller tokenizes such
        a text on its own, for its ids."""
        return self._keeps(text) and hash((model, text)) in self._seen

    def see(self, model: str, text: str) -> None:
        """Remember a long enough ``text`` as tokenized (inside a longer text, so with no ids of its own): the next
        :meth:`put` of it keeps it."""
        if self._keeps(text):
            digest = hash((model, text))
            self._seen.pop(digest, None)
            self._seen[digest] = None
            if len(self._seen) > SEEN_TEXTS:
                self._seen.popitem(last=False)

    def _keeps(self, text: str) -> bool:
        """Whether texts like ``text`` are kept at all: long enough, and a budget to keep them in."""
        return self.budget_bytes > 0 and len(text) >= CACHED_TEXT_MIN_CHARS

    def _seen_before(self, digest: int) -> bool:
        """Whether a text of this hash was tokenized before; remembers it if not (the oldest forgotten first)."""
        if digest in self._seen:
            del self._seen[digest]
            return True
        self._seen[digest] = None
        if len(self._seen) > SEEN_TEXTS:
            self._seen.popitem(last=False)
        return False

    def __len__(self) -> int:
        return len(self._entries)


def _entry_bytes(text: str, ids: array[int]) -> int:
    return sys.getsizeof(text) + ids.itemsize * len(ids) + ENTRY_OVERHEAD_BYTES


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

    def __init__(self, paths: Mapping[str, str | None], cache_bytes: int = 0) -> None:
        self._paths = dict(paths)
        self._loaded: dict[str, Tokenizer | None] = {}
        self._segmented: dict[str, bool] = {}
        self.cache = TokenizedTexts(cache_bytes)

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
                    _count_whole(model, tokenizer)
            else:
                log.warning("no tokenizer file for %s at %s: prompt tokens are estimated", model, path)
            self._loaded[model] = tokenizer
            self._segmented[model] = tokenizer is not None and _segments_agree(model, tokenizer)
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
        pieces = [segments(text) for text in texts] if self._segmented[model] else [[text] for text in texts]
        flat = [piece for cut in pieces for piece in cut]
        owner = [n for n, cut in enumerate(pieces) for _ in cut]
        parts: list[array[int] | list[int] | None] = [self.cache.get(model, piece) for piece in flat]
        runs = self._runs(model, flat, owner, parts)
        if runs:
            fresh = tokenizer.encode_batch_fast(["".join(flat[i:j]) for i, j in runs], add_special_tokens=False)
            for (i, j), encoding in zip(runs, fresh, strict=True):
                parts[i:j] = [encoding.ids, *([] for _ in range(i + 1, j))]  # a run's ids, on its first piece
                if j == i + 1:
                    self.cache.put(model, flat[i], encoding.ids)  # kept if tokenized before, else now seen
                else:
                    for piece in flat[i:j]:
                        self.cache.see(model, piece)
        ids: list[int] = []
        at = 0
        for cut in pieces:
            for part in parts[at : at + len(cut)]:
                assert part is not None
                ids.extend(part)
            at += len(cut)
            ids.append(MESSAGE_SEPARATOR)
        return len(ids) - len(texts) + overhead, True, ids

    def _runs(
        self, model: str, flat: list[str], owner: list[int], parts: list[array[int] | list[int] | None]
    ) -> list[tuple[int, int]]:
        """What to tokenize, as ranges of ``flat``: each missing piece the cache will keep, alone (its ids are
        kept); the missing pieces of one text next to each other that it will not, together. So a text seen for the
        first time is one piece, not one a segment: each piece costs the tokenizer a fixed part, and a call of many
        spreads them over its thread pool, whose threads spin as they wait (a unique 6,400-token prompt in 21 pieces
        cost 3.8-4.0 ms of CPU against 3.4-3.5 whole, here)."""
        runs: list[tuple[int, int]] = []
        i = 0
        while i < len(flat):
            if parts[i] is not None:
                i += 1
            elif self.cache.wants(model, flat[i]):
                runs.append((i, i + 1))
                i += 1
            else:
                j = i + 1
                while (
                    j < len(flat) and owner[j] == owner[i] and parts[j] is None and not self.cache.wants(model, flat[j])
                ):
                    j += 1
                runs.append((i, j))
                i = j
        return runs


def _count_whole(model: str, tokenizer: Tokenizer) -> None:
    """Turn off the truncation and padding a ``tokenizer.json`` may be saved with (a checkpoint's ``max_length`` of
    512, say): the engine never applies the file's own (vLLM 0.32 passes ``truncation`` and ``max_length`` with every
    call, ``vllm/renderers/params.py`` ``get_encode_kwargs``: off, or at the model's input limit + 1 so an overlong
    prompt still fails its length check), so a truncating count would let a prompt past the context check at a
    fraction of its length and reserve that fraction of the tenant's budget, and padding would count pad tokens that
    never reach the engine (a batch of texts is padded to its longest, or to a fixed length)."""
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        log.info("%s's tokenizer file truncates or pads: turned off, prompts are counted whole", model)
        tokenizer.no_truncation()
        tokenizer.no_padding()


def _segments_agree(model: str, tokenizer: Tokenizer) -> bool:
    """Whether ``model``'s long texts are tokenized in segments (:mod:`inferplane.processor.token_segments`); says
    once why not."""
    why = refusal(tokenizer)
    if why is None and not agrees(tokenizer):
        why = "it gives other ids for a text cut at its seams"
    if why is not None:
        log.info("%s's long texts are tokenized whole: %s", model, why)
    return why is None
