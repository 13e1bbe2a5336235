"""The counterpart check's dictionary synonyms (processor/cache/synonyms.py): the installed WordNet 3.0, and a tiny
database written here where a behaviour needs exact senses."""

from __future__ import annotations

import importlib.util
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from inferplane.processor.cache import synonyms
from inferplane.processor.cache.counterparts import Verdict, decide, difference
from inferplane.processor.cache.synonyms import WORDNET_FILES, Lexicon, default_lexicon
from inferplane.tool import cache_adversary


@pytest.fixture(scope="module")
def wordnet() -> Lexicon:
    lexicon = default_lexicon()
    assert lexicon is not None, "wn (the gateway extra) is installed with the test extra"
    return lexicon


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("fix", "repair"),
        ("big", "large"),
        ("hard", "difficult"),
        ("purchase", "buy"),
        ("begin", "start"),
        ("kids", "children"),  # a plural by rule and one by WordNet's exception list
        ("fixed", "repaired"),
        ("quickest", "fastest"),  # superlatives both (quickest by rule, fastest by the exception list)
        ("info", "information"),
    ],
)
def test_words_whose_most_frequent_senses_are_one_synset_are_synonyms(wordnet: Lexicon, a: str, b: str) -> None:
    assert wordnet.synonyms(a, b) and wordnet.synonyms(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("minutes", "seconds"),  # one synset ("a short time"), neither word's most frequent sense
        ("hours", "minutes"),
        ("mother", "father"),  # one verb synset ("to beget"), the nouns' senses first
        ("fixes", "repaired"),  # another inflection
        ("quick", "faster"),  # another degree
        ("monday", "tuesday"),
        ("legal", "illegal"),
        ("easier", "harder"),
        ("husband", "wife"),
        ("Apple", "apple"),  # not a lower-case word: a name is compared as written
        ("caf\u00e9", "cafe"),
    ],
)
def test_antonyms_siblings_other_senses_and_other_inflections_are_not(wordnet: Lexicon, a: str, b: str) -> None:
    assert not wordnet.synonyms(a, b) and not wordnet.synonyms(b, a)


def _adversary_word_pairs() -> list[tuple[str, str]]:
    """Every pair of single words the adversary swaps (tool/cache_adversary.py): its opposites and prepositions, and
    every two words of one sibling or unit group (all of them, not the three per word it generates from)."""
    pairs: set[tuple[str, str]] = set()
    for table in (cache_adversary.OPPOSITES, cache_adversary.PREPOSITIONS):
        pairs |= {(a, b) for a, others in table.items() for b in others}
    for text in (cache_adversary._SIBLINGS, cache_adversary._UNITS):
        for group in text.split(";"):
            pairs |= set(combinations(group.split(), 2))
    return sorted((a.lower(), b.lower()) for a, b in pairs if " " not in a and " " not in b)


def test_no_pair_the_adversary_swaps_is_a_synonym(wordnet: Lexicon) -> None:
    """The finite space enumerated: 1,121 opposites, siblings, units and prepositions, none a synonym here."""
    pairs = _adversary_word_pairs()
    assert len(pairs) > 1000
    assert [(a, b) for a, b in pairs if wordnet.synonyms(a, b)] == []


def _database(directory: Path, nouns: list[str], exceptions: str = "") -> Path:
    """A WordNet database of the given index lines (the license header WordNet opens its files with first)."""
    header = "  1 This software and database is being provided to you, the LICENSEE, by\n  2 Princeton University\n"
    files = dict.fromkeys(WORDNET_FILES, "")
    files["index.noun"] = header + "".join(f"{line}\n" for line in sorted(nouns))
    files["index.verb"] = header
    files["noun.exc"] = exceptions
    for name, text in files.items():
        (directory / name).write_text(text, encoding="ascii")
    return directory


def _entry(lemma: str, pos: str, *offsets: str) -> str:
    """An index line: lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt synset_offset..."""
    return f"{lemma} {pos} {len(offsets)} 1 @ {len(offsets)} 0 {' '.join(offsets)}  "


def test_only_each_words_first_sense_counts_and_the_search_passes_the_license_lines(tmp_path: Path) -> None:
    nouns = [
        _entry("alpha", "n", "00000001", "00000009"),
        _entry("beta", "n", "00000001"),
        _entry("gamma", "n", "00000002", "00000001"),  # alpha's first sense is gamma's second
        _entry("goose", "n", "00000003"),
        _entry("mouse", "n", "00000004"),
        _entry("rodent", "n", "00000004"),
        _entry("zulu", "n", "00000005"),
    ]
    lexicon = Lexicon(_database(tmp_path, nouns, exceptions="mice mouse\ngeese goose\n"))
    assert lexicon.first_sense("alpha", "n") == "00000001" and lexicon.first_sense("zulu", "n") == "00000005"
    assert lexicon.first_sense("  1", "n") is None and lexicon.first_sense("omega", "n") is None
    assert lexicon.synonyms("alpha", "beta")
    assert not lexicon.synonyms("alpha", "gamma")
    assert lexicon.synonyms("mice", "rodents")  # a plural by the exception list and one by rule
    assert not lexicon.synonyms("mice", "rodent")  # a plural is not the singular
    assert not lexicon.synonyms("alpha", "alpha")


def test_a_database_missing_a_file_is_refused_naming_it(tmp_path: Path) -> None:
    _database(tmp_path, [])
    (tmp_path / "verb.exc").unlink()
    with pytest.raises(FileNotFoundError, match=r"verb\.exc missing"):
        Lexicon(tmp_path)


def test_without_wordnet_installed_there_is_no_lexicon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    synonyms.default_lexicon.cache_clear()
    try:
        assert synonyms.default_lexicon() is None
    finally:
        monkeypatch.undo()
        synonyms.default_lexicon.cache_clear()
    assert synonyms.default_lexicon() is not None


def test_a_dictionary_synonym_is_a_counterpart_wherever_the_embedder_places_it(wordnet: Lexicon) -> None:
    diff = difference("How do I mend a torn shirt?", "How do I repair a torn shirt?")
    assert (diff.left, diff.right) == (("mend",), ("repair",))

    def pair(similarity: float) -> dict[str, np.typing.NDArray[np.float32]]:
        return {
            "mend": np.array([1.0, 0.0], dtype=np.float32),
            "repair": np.array([similarity, (1 - similarity**2) ** 0.5], dtype=np.float32),
        }

    assert decide(diff, pair(0.276), 0.9, 0.6, wordnet).refused is None  # all-MiniLM-L6-v2's measured 0.276
    assert decide(diff, pair(0.276), 0.9, 0.6, None) == Verdict("no_counterpart", "mend")  # no dictionary: as before
    swapped = difference("Is it easier to fix?", "Is it harder to fix?")
    close = {"easier": np.array([1.0, 0.0], dtype=np.float32), "harder": np.array([0.842, 0.539], dtype=np.float32)}
    assert decide(swapped, close, 0.9, 0.6, wordnet) == Verdict("no_counterpart", "easier")  # 0.842: no synonym


def test_the_image_keeps_only_the_files_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "wn" / "data"
    (data / "wordnet-3.0").mkdir(parents=True)
    _database(data / "wordnet-3.0", [_entry("alpha", "n", "00000001")])
    for extra in ("wordnet-3.0/LICENSE", "wordnet-3.0/data.noun", "wordnet-3.3/index.noun", "omw/x.tab"):
        (data / extra).parent.mkdir(parents=True, exist_ok=True)
        (data / extra).write_text("x")
    monkeypatch.setattr(synonyms, "wordnet_directory", lambda: data / "wordnet-3.0")
    deleted = synonyms.keep_only_read_files()
    assert {p.relative_to(data).as_posix() for p in deleted} == {
        "wordnet-3.0/data.noun",
        "wordnet-3.3/index.noun",
        "omw/x.tab",
    }
    assert Lexicon(data / "wordnet-3.0").first_sense("alpha", "n") == "00000001"
    assert (data / "wordnet-3.0" / "LICENSE").is_file()
