"""Long texts tokenized in segments (:mod:`inferplane.processor.token_segments`): cut only at seams, the same cuts
for the same beginning, the same ids as the whole text for every kind of tokenizer it accepts, and every kind that
could differ refused, by its reason."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Encoding, Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from inferplane.processor.prefix_index import MESSAGE_SEPARATOR
from inferplane.processor.token_segments import CHECK_TEXT, SEGMENT_CHARS, agrees, refusal, segments
from inferplane.processor.tokens import TokenCounter
from inferplane.tool.simulate.model_dir import build_tokenizer
from tests.tiny_model import words

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Llama 3's pre-tokenizer pattern (its ``tokenizer.json``), GPT-4's as well."""
CORPUS = [CHECK_TEXT * 3, "the quick brown fox jumps over the lazy dog " * 50, "Σίσυφος ΟΔΟΣ 東京 café 1234567 it's"]
ALPHABET = list("abcdefghij ABC  0123456789'\".,;:!?-\n\t éñÜ東京Σςσ🙂_")


def _byte_level(split: str | None) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    if split is None:  # GPT-2's: the pattern inside ByteLevel
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    else:  # Llama 3's and Qwen 2's: a Split, then bytes mapped without a pattern
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def _metaspace(split: bool) -> Tokenizer:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=split)
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def _bert() -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[UNK]"]))
    return tokenizer


def _sentencepiece_legacy() -> Tokenizer:
    """Llama 2's file: spaces made ``▁`` and one prepended by the normalizer, no pre-tokenizer."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>"]))
    return tokenizer


ACCEPTED: dict[str, Callable[[], Tokenizer]] = {
    "llama3 byte-level BPE": lambda: _byte_level(LLAMA3_SPLIT),
    "gpt2 byte-level BPE": lambda: _byte_level(None),
    "sentencepiece unigram, metaspace split": lambda: _metaspace(True),
    "bert wordpiece": _bert,
    "the simulated model's word level": build_tokenizer,
}


@pytest.fixture(scope="module")
def accepted() -> dict[str, Tokenizer]:
    return {name: build() for name, build in ACCEPTED.items()}


def _whole_and_cut(tokenizer: Tokenizer, text: str, size: int) -> tuple[list[int], list[int]]:
    whole = tokenizer.encode(text, add_special_tokens=False).ids
    parts = tokenizer.encode_batch_fast(segments(text, size), add_special_tokens=False)
    return whole, [i for part in parts for i in part.ids]


texts = st.lists(st.sampled_from(ALPHABET), max_size=400).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=texts, size=st.integers(1, 40))
def test_a_text_is_cut_only_at_seams_each_segment_at_least_the_size(text: str, size: int) -> None:
    cut = segments(text, size)
    assert "".join(cut) == text
    assert all(len(piece) >= size for piece in cut[:-1])
    for piece, after in itertools.pairwise(cut):
        assert piece[-1].isalnum() and piece[-1] != "_"
        assert after[0] == " " and after[1].isalpha()


@settings(max_examples=200, deadline=None)
@given(shared=texts, first=texts, second=texts, size=st.integers(1, 40))
def test_texts_that_start_the_same_are_cut_the_same_within_the_shared_part(
    shared: str, first: str, second: str, size: int
) -> None:
    a, b = segments(shared + first, size), segments(shared + second, size)
    ends = 0
    for piece, other in zip(a[:-1], b[:-1], strict=False):
        ends += len(piece)
        if ends + 1 >= len(shared):  # the seam's next letter lies past the shared part
            break
        assert piece == other


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_every_accepted_kind_of_tokenizer_passes_both_checks(accepted: dict[str, Tokenizer], name: str) -> None:
    assert refusal(accepted[name]) is None
    assert agrees(accepted[name])


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(list(ACCEPTED)), text=texts, size=st.integers(1, 30))
def test_the_segments_ids_are_the_whole_texts(accepted: dict[str, Tokenizer], name: str, text: str, size: int) -> None:
    whole, cut = _whole_and_cut(accepted[name], text, size)
    assert cut == whole


def _truncating() -> Tokenizer:
    tokenizer = build_tokenizer()
    tokenizer.enable_truncation(128)
    return tokenizer


def _spaced_token() -> Tokenizer:
    tokenizer = build_tokenizer()
    tokenizer.add_special_tokens(["<end of turn>"])
    return tokenizer


def _stripping() -> Tokenizer:
    tokenizer = build_tokenizer()
    tokenizer.normalizer = normalizers.Strip()
    return tokenizer


def _dropout() -> Tokenizer:
    tokenizer = _byte_level(LLAMA3_SPLIT)
    tokenizer.model.dropout = 0.1
    return tokenizer


def _bare_bytes() -> Tokenizer:
    tokenizer = _byte_level(LLAMA3_SPLIT)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return tokenizer


REFUSED: dict[str, tuple[Callable[[], Tokenizer], str]] = {
    "llama2's normalizer": (
        _sentencepiece_legacy,
        "its normalizer Prepend may join characters across a space or add text",
    ),
    "metaspace without split": (
        lambda: _metaspace(False),
        "its pre-tokenizer (Metaspace) does not cut at a space",
    ),
    "byte level without a pattern": (_bare_bytes, "its pre-tokenizer (ByteLevel) does not cut at a space"),
    "strip": (_stripping, "its normalizer Strip may join characters across a space or add text"),
    "truncation": (_truncating, "it truncates or pads"),
    "an added token with a space": (_spaced_token, "the added token '<end of turn>' has a space in it"),
    "bpe dropout": (_dropout, "its BPE drops merges at random"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_tokenizer_that_could_differ_is_refused_with_its_reason(name: str) -> None:
    build, reason = REFUSED[name]
    assert refusal(build()) == reason


def test_a_split_pattern_that_keeps_the_space_behind_its_word_fails_the_check() -> None:
    behind = _byte_level(r"\S+\s*")  # "abc " then "def": a cut before the space differs
    assert refusal(behind) is None  # a Split's pattern is not read...
    assert not agrees(behind)  # ...the check catches it
    whole, cut = _whole_and_cut(behind, CHECK_TEXT, 1)
    assert whole != cut


def test_a_counter_tokenizes_a_shared_beginning_once_and_counts_the_same(
    tokenizer_file: str, caplog: pytest.LogCaptureFixture
) -> None:
    shared = "doc " + words(2000)  # about 10,000 characters: 4-5 segments
    prompts = [shared + f" question {n} " + words(30 + n) for n in range(4)]
    counter = TokenCounter({"m": tokenizer_file}, 2**22)
    whole = Tokenizer.from_file(tokenizer_file)
    for prompt in prompts:
        count, exact, ids = counter.encode("m", [prompt, "short"], 2, 8)
        expected = whole.encode(prompt, add_special_tokens=False).ids
        short = whole.encode("short", add_special_tokens=False).ids
        assert ids == [*expected, MESSAGE_SEPARATOR, *short, MESSAGE_SEPARATOR]
        assert count == len(expected) + len(short) + 2 * 8 and exact
    kept = len(segments(shared)) - 1  # every segment that ends inside the shared part
    assert len(counter.cache) == kept
    assert counter.cache.hits == 2 * kept  # seen, kept, then hit by the third and fourth prompts
    assert not caplog.records


def test_a_counter_with_a_refused_tokenizer_tokenizes_whole_and_says_why(
    tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path_factory.mktemp("legacy") / "tokenizer.json"
    legacy = _sentencepiece_legacy()
    legacy.save(str(path))
    shared = "doc " + words(2000)
    counter = TokenCounter({"m": str(path)}, 2**22)
    with caplog.at_level(logging.INFO, logger="inferplane.processor.tokens"):
        for n in range(3):
            prompt = shared + f" question {n}"
            expected = legacy.encode(prompt, add_special_tokens=False).ids
            assert counter.encode("m", [prompt], 1, 0)[2] == [*expected, MESSAGE_SEPARATOR]
    assert len(counter.cache) == 0  # three different whole texts: none seen twice
    assert [r.getMessage() for r in caplog.records] == [
        "m's long texts are tokenized whole: its normalizer Prepend may join characters across a space or add text"
    ]
    assert len(shared) > SEGMENT_CHARS


class _Recording:
    """The counter's tokenizer, recording what each call tokenizes."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls: list[list[str]] = []

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool) -> list[Encoding]:
        self.calls.append(list(texts))
        return self.tokenizer.encode_batch_fast(texts, add_special_tokens=add_special_tokens)


def test_a_text_is_tokenized_in_one_call_first_its_shared_segments_alone_next_then_only_its_tail(
    tokenizer_file: str,
) -> None:
    shared = "doc " + words(2000)
    prompts = [shared + f" question {n} " + words(30 + n) for n in range(3)]
    counter = TokenCounter({"m": tokenizer_file}, 2**22)
    tokenizer = counter.tokenizer("m")
    assert tokenizer is not None
    recording = _Recording(tokenizer)
    counter._loaded["m"] = cast(Tokenizer, recording)
    for prompt in prompts:
        counter.encode("m", [prompt, "short"], 2, 0)
    kept = len(segments(shared)) - 1
    second, third = segments(prompts[1]), segments(prompts[2])
    assert (
        recording.calls
        == [
            [prompts[0], "short"],  # seen for the first time: whole, one call for all its segments
            [*second[:kept], "".join(second[kept:]), "short"],  # the shared segments seen before: alone, to be kept
            ["".join(third[kept:]), "short"],  # the shared ones kept: only the rest
        ]
    )


@pytest.fixture(scope="module")
def accepted_files(accepted: dict[str, Tokenizer], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("accepted")
    files = {}
    for n, (name, tokenizer) in enumerate(accepted.items()):
        files[name] = str(directory / f"{n}.json")
        tokenizer.save(files[name])
    return files


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(list(ACCEPTED)),
    documents=st.lists(
        st.lists(st.sampled_from(ALPHABET), min_size=40, max_size=400).map("".join), min_size=1, max_size=3
    ),
    asked=st.lists(st.tuples(st.integers(0, 2), texts, texts), min_size=1, max_size=6),
)
def test_a_counter_gives_the_whole_texts_ids_whatever_it_has_kept(
    accepted: dict[str, Tokenizer],
    accepted_files: dict[str, str],
    name: str,
    documents: list[str],
    asked: list[tuple[int, str, str]],
) -> None:
    """Prompts of a long shared document (repeated to several segments) and a tail, with a second message; the
    counter's ids are the tokenizer's own for each text, whatever it kept from the prompts before."""
    counter = TokenCounter({"m": accepted_files[name]}, 2**22)
    whole = accepted[name]
    for document, tail, other in asked:
        first = documents[document % len(documents)] * (6000 // len(documents[document % len(documents)]))
        prompt = [first + tail, other]
        expected = [
            *whole.encode(prompt[0], add_special_tokens=False).ids,
            MESSAGE_SEPARATOR,
            *whole.encode(prompt[1], add_special_tokens=False).ids,
            MESSAGE_SEPARATOR,
        ]
        assert counter.encode("m", prompt, 2, 3) == (len(expected) - 2 + 6, True, expected)
