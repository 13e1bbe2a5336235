"""The processor's token counts: the ids of long texts tokenized more than once, kept per model
(:class:`TokenizedTexts`), exactly what tokenizing them again gives, within a byte budget, least recently used out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from inferplane.processor import tokens
from inferplane.processor.prefix_index import MESSAGE_SEPARATOR
from inferplane.processor.tokens import CACHED_TEXT_MIN_CHARS, TokenCounter, TokenizedTexts
from tests.tiny_model import words

LONG = words(600)  # 600 tokens, about 2,900 characters: kept
SHORT = words(20)  # under CACHED_TEXT_MIN_CHARS: tokenized each time
assert len(LONG) >= CACHED_TEXT_MIN_CHARS > len(SHORT)


def _counter(tokenizer_file: str, cache_bytes: int) -> TokenCounter:
    return TokenCounter({"m": tokenizer_file, "other": tokenizer_file}, cache_bytes)


def test_a_long_text_seen_twice_is_kept_and_counted_the_same(tokenizer_file: str) -> None:
    cached, plain = _counter(tokenizer_file, 2**20), _counter(tokenizer_file, 0)
    prompts = [[LONG, SHORT], [LONG, words(30)], [LONG, words(40)]]
    for texts in prompts:
        assert cached.encode("m", texts, 2, 8) == plain.encode("m", texts, 2, 8)
    first = cached.encode("m", prompts[0], 2, 8)
    assert first[0] == 600 + 20 + 2 * 8 and first[1] is True
    assert first[2] is not None and first[2][600] == MESSAGE_SEPARATOR
    # Missed twice (seen, then kept), then hit; the short texts were never looked up.
    assert (cached.cache.misses, cached.cache.hits, len(cached.cache)) == (2, 2, 1)
    assert (plain.cache.misses, plain.cache.hits, len(plain.cache)) == (0, 0, 0)


def test_a_tokenizer_saved_truncating_and_padding_still_counts_prompts_whole(
    tokenizer_file: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A ``tokenizer.json`` saved with truncation at 16 tokens and fixed-length padding to 64 counts a 600-token
    prompt as 600 and a 20-token one as 20, the ids the same as the plain file's: as the engine counts them."""
    saved = Tokenizer.from_file(tokenizer_file)
    saved.enable_truncation(16)
    saved.enable_padding(length=64)
    path = tmp_path_factory.mktemp("truncating") / "tokenizer.json"
    saved.save(str(path))
    truncating, plain = _counter(str(path), 2**20), _counter(tokenizer_file, 2**20)
    for texts in ([LONG], [SHORT], [LONG, SHORT]):
        assert truncating.encode("m", texts, 1, 0) == plain.encode("m", texts, 1, 0)
    assert truncating.encode("m", [LONG, SHORT], 2, 0)[0] == 620


def test_a_text_tokenized_once_takes_no_room(tokenizer_file: str) -> None:
    counter = _counter(tokenizer_file, 2**20)
    for n in range(20):  # questions asked once each, all long enough to keep, none starting like another
        counter.encode("m", [f"q{n} " + words(380 + n)], 1, 8)
    assert (len(counter.cache), counter.cache.used_bytes) == (0, 0)


def test_each_model_keeps_its_own_ids(tokenizer_file: str) -> None:
    counter = _counter(tokenizer_file, 2**20)
    for model in ("m", "other", "m", "other"):
        counter.encode(model, [LONG], 1, 0)
    assert (counter.cache.misses, counter.cache.hits, len(counter.cache)) == (4, 0, 2)


def _keep(cache: TokenizedTexts, text: str, ids: list[int]) -> None:
    cache.put("m", text, ids)  # seen
    cache.put("m", text, ids)  # kept


def test_the_budget_holds_and_the_least_recently_used_leaves_first() -> None:
    texts = [f"{i} " + "x" * 2000 for i in range(3)]
    ids = list(range(500))
    one = TokenizedTexts(10**9)
    _keep(one, texts[0], ids)
    entry = one.used_bytes
    cache = TokenizedTexts(2 * entry + entry // 2)  # room for two
    _keep(cache, texts[0], ids)
    _keep(cache, texts[1], ids)
    assert cache.get("m", texts[0]) is not None  # now the most recently used
    _keep(cache, texts[2], ids)
    assert cache.get("m", texts[1]) is None  # the least recently used left
    assert cache.get("m", texts[0]) is not None and cache.get("m", texts[2]) is not None
    assert cache.used_bytes == 2 * entry <= cache.budget_bytes
    assert list(cache.get("m", texts[2]) or ()) == ids


def test_a_text_larger_than_the_budget_or_a_zero_budget_keeps_nothing() -> None:
    big = TokenizedTexts(1000)
    _keep(big, "x" * 5000, [1, 2, 3])
    assert (len(big), big.used_bytes) == (0, 0)
    off = TokenizedTexts(0)
    _keep(off, "x" * 5000, [1, 2, 3])
    assert off.get("m", "x" * 5000) is None and len(off) == 0


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(
        st.lists(st.sampled_from([LONG, words(700), SHORT, words(1200), ""]), min_size=1, max_size=4),
        min_size=1,
        max_size=8,
    ),
    budget=st.sampled_from([0, 9000, 40_000, 2**20]),
)
def test_kept_ids_are_always_what_tokenizing_again_gives(
    tokenizer_file: str, prompts: list[list[str]], budget: int
) -> None:
    cached, plain = _counter(tokenizer_file, budget), _counter(tokenizer_file, 0)
    for texts in prompts:
        assert cached.encode("m", texts, len(texts), 8) == plain.encode("m", texts, len(texts), 8)
    assert cached.cache.used_bytes <= budget


def test_the_texts_seen_once_are_bounded_oldest_forgotten_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "SEEN_TEXTS", 4)
    cache = TokenizedTexts(10**9)
    texts = [f"{i} " + "x" * 2000 for i in range(6)]
    for text in texts:  # six seen once: the first two are forgotten
        cache.put("m", text, [1])
    for text in (texts[5], texts[4], texts[0]):  # the last seen are kept, the first is new again
        cache.put("m", text, [1])
    assert [cache.get("m", text) is not None for text in texts] == [False, False, False, False, True, True]


def test_a_text_seen_inside_a_longer_one_is_kept_the_next_time_it_is_put() -> None:
    cache = TokenizedTexts(10**9)
    text = "x" * 2000
    assert not cache.wants("m", text)
    cache.see("m", text)  # tokenized inside a longer text: no ids of its own
    assert cache.wants("m", text) and not cache.wants("other", text)
    cache.put("m", text, [1, 2])
    assert list(cache.get("m", text) or ()) == [1, 2]
    cache.see("m", SHORT)  # too short to keep: never wanted
    assert not cache.wants("m", SHORT)


def test_texts_seen_inside_longer_ones_are_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "SEEN_TEXTS", 2)
    cache = TokenizedTexts(10**9)
    texts = [f"{i} " + "x" * 2000 for i in range(3)]
    for text in texts:
        cache.see("m", text)
    assert [cache.wants("m", text) for text in texts] == [False, True, True]
