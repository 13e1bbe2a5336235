"""Long texts cut where the tokenizer cuts anyway, so a beginning many prompts share is tokenized once.

A prompt made of one long text (a document and a question in one user message, llm-d's prefix benchmark, a RAG
prompt) is new every time as a whole, so :class:`inferplane.processor.tokens.TokenizedTexts` never sees it twice, and
tokenizing it was most of the processor's decision on such requests (issue 33: a 6,400-token text cost 3-4 ms of CPU
here idle, twice that on busy cores, 80% of the decision's time in a profile on 8 simulated replicas). Cut into
segments of about :data:`SEGMENT_CHARS` characters at the same places in every text that starts the same way, the
segments of the shared beginning are the same strings each time and are kept like any other long text; only the
segments past it are tokenized.

Where a text is cut (:func:`segments`): before a space that follows a letter or a digit and precedes a letter, the
first such place at least :data:`SEGMENT_CHARS` characters after the last cut. Every pre-tokenizer :func:`refusal`
accepts ends a pre-token there and starts the next with that space (GPT-2's and Llama 3's split patterns, ``\\p{L}+``
and ``\\p{N}{1,3}`` then ``[^\\r\\n\\p{L}\\p{N}]?\\p{L}+``; whitespace and BERT splitting; SentencePiece's
``Metaspace`` with ``split``), no pattern looks behind, and the models (BPE, WordPiece, WordLevel, Unigram) tokenize
each pre-token alone, so the ids of the segments, each tokenized alone, are the ids of the whole text. What would break
that is refused: a normalizer that sees more than one character at a time or adds text (``Prepend``, ``Replace``,
``Strip``, SentencePiece's ``Precompiled``: Llama 2's and Gemma's files), a pre-tokenizer that does not split there
(``Metaspace`` without ``split``, ``ByteLevel`` alone without its pattern), an added token with a space in it,
truncation, padding, BPE dropout. A tokenizer that passes must also give the same ids both ways on
:data:`CHECK_TEXT` cut at every seam (:func:`agrees`): a ``Split`` pattern is trusted on that check, not read.
Nothing here imports the platform's other packages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from tokenizers import Tokenizer

SEGMENT_CHARS = 2048
"""A text is cut about every 2,048 characters (about 450 tokens of English): the part of a shared beginning that is
tokenized again each time is at most one segment, and a 40,000-character text is 20 cache entries."""

_SEAM = re.compile(r"(?<=[^\W_]) (?=[^\W\d_])")
"""A space after a letter or digit (``\\w`` without ``_``) and before a letter."""

_NORMALIZERS = frozenset({"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "BertNormalizer"})
"""Normalizers that map each character on its own (Unicode normalization cannot join a space to the letter after it;
BERT's cleans, spaces out CJK characters and lowercases, a character at a time)."""

_SPLITTING = frozenset({"Whitespace", "WhitespaceSplit", "BertPreTokenizer"})
"""Pre-tokenizers that always end a pre-token at a space."""

_WITHIN = frozenset({"Digits", "Punctuation"})
"""Pre-tokenizers that only cut pre-tokens further."""

_MODELS = frozenset({"BPE", "WordPiece", "WordLevel", "Unigram"})

CHECK_TEXT = (
    "It's 2026 and the cluster's 4x H100 nodes serve Llama-3.3 70B at 1,920 blocks. Don't   stop; "
    'naïve café owners said "ok" then left.\n\nNew line:\tTABS and ÉLAN, 東京 ok 42nd street x1 y22 z333 '
    "a4444 b 5 c. Ünïcödé wörds, Σίσυφος ΟΔΟΣ ends, under_score words_ here, e-mail me@x.io now 3.14 pi "
    "emoji 🙂 ok -- dashes — and “quotes” in text ABC123 def456 ghi 7 8 9 end"
)
"""What :func:`agrees` tokenizes whole and cut at every seam: contractions, digits, runs of spaces, newlines, tabs,
accents, CJK, Greek final sigma, underscores, an emoji, punctuation."""


def segments(text: str, size: int = SEGMENT_CHARS) -> list[str]:
    """``text`` cut before the first seam at least ``size`` characters after the previous cut (``"".join`` gives it
    back). Two texts that start the same way get the same segments up to the last cut inside the shared part."""
    cuts: list[str] = []
    start = 0
    while len(text) - start > size:
        found = _SEAM.search(text, start + size)
        if found is None:
            break
        cuts.append(text[start : found.start()])
        start = found.start()
    cuts.append(text[start:])
    return cuts


def refusal(tokenizer: Tokenizer) -> str | None:
    """Why ``tokenizer`` cannot be given a text in segments (None: it can, subject to :func:`agrees`)."""
    config: dict[str, Any] = json.loads(tokenizer.to_str())
    if config.get("truncation") is not None or config.get("padding") is not None:
        return "it truncates or pads"
    spaced = [t.get("content", "") for t in config.get("added_tokens") or () if " " in t.get("content", "")]
    if spaced:
        return f"the added token {spaced[0]!r} has a space in it"
    normalizer = _normalizer_refusal(config.get("normalizer"))
    if normalizer is not None:
        return normalizer
    pre_tokenizer = config.get("pre_tokenizer")
    members = _members(pre_tokenizer, "pretokenizers")
    if not members:
        return "it has no pre-tokenizer, so its model sees the whole text"
    if not any(_splits(m) for m in members):
        return f"its pre-tokenizer ({_kind(pre_tokenizer)}) does not cut at a space"
    strange = [_kind(m) for m in members if not _splits(m) and _kind(m) not in _WITHIN and _kind(m) != "ByteLevel"]
    if strange:
        return f"its pre-tokenizer {strange[0]} is not one whose cuts are known"
    model = config.get("model") or {}
    if model.get("type") not in _MODELS:
        return f"its model {model.get('type')!r} is not one that tokenizes each pre-token alone"
    if model.get("dropout"):
        return "its BPE drops merges at random"
    return None


def agrees(tokenizer: Tokenizer) -> bool:
    """Whether ``tokenizer`` gives :data:`CHECK_TEXT`'s ids whole and cut at every seam alike."""
    whole = tokenizer.encode(CHECK_TEXT, add_special_tokens=False).ids
    parts = tokenizer.encode_batch_fast(segments(CHECK_TEXT, 1), add_special_tokens=False)
    return whole == [i for part in parts for i in part.ids]


def _normalizer_refusal(normalizer: Mapping[str, Any] | None) -> str | None:
    for member in _members(normalizer, "normalizers"):
        if _kind(member) not in _NORMALIZERS:
            return f"its normalizer {_kind(member)} may join characters across a space or add text"
    return None


def _members(step: Mapping[str, Any] | None, key: str) -> list[Mapping[str, Any]]:
    """A pipeline step's parts: a ``Sequence``'s members (flattened), the step alone, or none."""
    if step is None:
        return []
    if step.get("type") == "Sequence":
        return [m for inner in step.get(key) or () for m in _members(inner, key)]
    return [step]


def _splits(step: Mapping[str, Any]) -> bool:
    kind = _kind(step)
    if kind in _SPLITTING:
        return True
    if kind == "ByteLevel":
        return bool(step.get("use_regex", True))
    if kind == "Metaspace":
        return bool(step.get("split", True))
    if kind == "Split":
        return step.get("behavior") in ("Isolated", "Removed") and not step.get("invert", False)
    return False


def _kind(step: Mapping[str, Any] | None) -> str:
    return str((step or {}).get("type"))
