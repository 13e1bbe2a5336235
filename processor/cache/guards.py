"""Guards beyond the similarity threshold: reasons two prompts must not share an answer however close they embed.

Static embeddings (wordllama) average word vectors, so word order, a swapped digit or a small negation barely move
them: "Book a flight from Boston to Denver." and "... from Denver to Boston." score 1.0. Each guard compares one
feature of the two prompts and refuses the semantic hit when it differs:

* ``number``: the sequence of numbers (digits, and number words read as digits: "two" = "2");
* ``negation``: how many negations each carries ("not", "no", "never", "without", "n't", ...);
* ``entity``: the sequence of names (capitalised words not opening a sentence, or opening it but not a common
  sentence opener; acronyms; tokens mixing letters and digits; quoted strings), compared case-insensitively;
* ``direction``: the multiset of words with an opposite ("increase"/"decrease", "on"/"off", "buy"/"sell", ...);
* ``relation``: for each relational word both prompts use ("to", "from", "than", "into", "vs", ...), the word it
  governs must agree ("20 pounds to kilograms" / "20 kilograms to pounds").

They trade recall for safety: a paraphrase that spells a number differently from how both sides read it, or moves a
name, is answered by the engine instead. ``inferplane cache eval`` measures both sides on a labelled set.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

GuardName = Literal["number", "negation", "entity", "direction", "relation"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_TOKEN = re.compile(r"\"[^\"]+\"|'[^'\s][^']*[^'\s]'|[A-Za-z0-9]+(?:[.,:/'_-][A-Za-z0-9]+)*|[.!?;]")
_NUMBER = re.compile(r"^\d+(?:[.,:/-]\d+)*$")
_MIXED = re.compile(r"^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9.,:/'_-]+$")

_SMALL_NUMBERS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty"
)
NUMBER_WORDS: dict[str, str] = {word: str(value) for value, word in enumerate(_SMALL_NUMBERS.split(" "))} | {
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "seventy": "70",
    "eighty": "80",
    "ninety": "90",
    "hundred": "100",
    "thousand": "1000",
    "million": "1000000",
    "billion": "1000000000",
    "dozen": "12",
    "half": "0.5",
    "quarter": "0.25",
    "double": "x2",
    "twice": "x2",
    "triple": "x3",
    "once": "x1",
    "first": "#1",
    "second": "#2",
    "third": "#3",
    "fourth": "#4",
    "fifth": "#5",
    "tenth": "#10",
}
"""Number words read as numbers; ``a``/``an`` are not counted (too common to mean "1")."""

NEGATIONS = _words(
    "not no never without none nothing nobody nowhere neither nor cannot cant wont dont doesnt didnt isnt arent "
    "wasnt werent shouldnt wouldnt couldnt hasnt havent hadnt mustnt except excluding exclude unless lacking "
    "non"
)

OPPOSITES: tuple[tuple[str, str], ...] = (
    ("increase", "decrease"),
    ("increasing", "decreasing"),
    ("raise", "lower"),
    ("up", "down"),
    ("upgrade", "downgrade"),
    ("upload", "download"),
    ("upstream", "downstream"),
    ("buy", "sell"),
    ("buying", "selling"),
    ("add", "remove"),
    ("enable", "disable"),
    ("enabled", "disabled"),
    ("open", "close"),
    ("on", "off"),
    ("in", "out"),
    ("start", "stop"),
    ("lock", "unlock"),
    ("encrypt", "decrypt"),
    ("import", "export"),
    ("push", "pull"),
    ("send", "receive"),
    ("sent", "received"),
    ("deposit", "withdraw"),
    ("credit", "debit"),
    ("arrive", "depart"),
    ("arrival", "departure"),
    ("arrivals", "departures"),
    ("inbound", "outbound"),
    ("incoming", "outgoing"),
    ("before", "after"),
    ("above", "below"),
    ("over", "under"),
    ("more", "less"),
    ("most", "least"),
    ("higher", "lower"),
    ("highest", "lowest"),
    ("larger", "smaller"),
    ("largest", "smallest"),
    ("bigger", "smaller"),
    ("biggest", "smallest"),
    ("longer", "shorter"),
    ("longest", "shortest"),
    ("faster", "slower"),
    ("fastest", "slowest"),
    ("cheaper", "pricier"),
    ("cheapest", "priciest"),
    ("maximum", "minimum"),
    ("max", "min"),
    ("ascending", "descending"),
    ("asc", "desc"),
    ("oldest", "newest"),
    ("older", "newer"),
    ("earliest", "latest"),
    ("earlier", "later"),
    ("first", "last"),
    ("left", "right"),
    ("north", "south"),
    ("east", "west"),
    ("northbound", "southbound"),
    ("eastbound", "westbound"),
    ("win", "lose"),
    ("gain", "loss"),
    ("profit", "loss"),
    ("positive", "negative"),
    ("true", "false"),
    ("allow", "deny"),
    ("accept", "reject"),
    ("approve", "reject"),
    ("include", "exclude"),
    ("hot", "cold"),
    ("warm", "cool"),
    ("heat", "cool"),
    ("light", "dark"),
    ("attach", "detach"),
    ("connect", "disconnect"),
    ("subscribe", "unsubscribe"),
    ("follow", "unfollow"),
    ("install", "uninstall"),
    ("mount", "unmount"),
    ("expand", "collapse"),
    ("zoom", "shrink"),
    ("forward", "backward"),
    ("forwards", "backwards"),
    ("next", "previous"),
    ("past", "future"),
    ("yesterday", "tomorrow"),
    ("morning", "evening"),
    ("am", "pm"),
    ("sunrise", "sunset"),
    ("plus", "minus"),
    ("multiply", "divide"),
    ("encode", "decode"),
    ("compress", "decompress"),
    ("borrow", "lend"),
    ("hire", "fire"),
    ("pros", "cons"),
    ("advantages", "disadvantages"),
    ("benefits", "risks"),
    ("odd", "even"),
    ("inner", "outer"),
    ("internal", "external"),
    ("public", "private"),
    ("input", "output"),
    ("client", "server"),
    ("sender", "recipient"),
    ("buyer", "seller"),
    ("parent", "child"),
    ("source", "target"),
)
DIRECTION_WORDS = frozenset(w for pair in OPPOSITES for w in pair) - {"in", "on", "am"}
"""Words of :data:`OPPOSITES`; "in", "on" and "am" are too common to count, their opposites still do."""

RELATIONS = _words("to from into onto than vs versus per towards toward via between instead")
"""Words whose object decides the meaning ("from Boston to Denver", "pounds to kilograms", "cheaper than X")."""

_SKIP = _words("a an the my your our their his her its this that these those some any one")
"""Determiners skipped when reading the word a relation governs."""

COMMON_OPENERS = _words(
    """what whats how hows why whys when whens where wheres who whos whom whose which is are am was were be can could
    would should will shall
    do does did done please pls tell give show list find explain describe write summarize summarise translate
    convert book cancel stop help i im ive id my me the a an get set make create send check reset change update
    delete remove add open close turn calculate compute define name let hi hello hey thanks thank in on for to from
    with of and or but if it its this that these those there here we you your our they them he she his her will
    generate recommend suggest compare say draft fix need want have has had any some all every each no not never
    yes ok okay so then also just now today tomorrow yesterday quick quickly briefly kindly could would is
    order buy sell pay track print read play call email rename move copy paste sort count search look
    before after during while since until as at by into about over under up down out off again
    use using install run start restart stop schedule plan remind note save show display"""
)
"""Sentence openers that are not names ("Please", "Convert", "What"); any other capitalised opener counts as one."""

NOT_NAMES = _words("i im ive id ill")
"""Capitalised anywhere, never a name: the pronoun "I" and its contractions."""

NEGATING_PREFIXES = ("un", "dis", "non", "in", "im", "ir", "il")
"""A word in one prompt that is another's word with one of these prefixes negates it ("safe" / "unsafe")."""


@dataclass(frozen=True)
class Features:
    """What the guards compare, read once per prompt."""

    numbers: tuple[str, ...]
    negations: int
    entities: tuple[str, ...]
    directions: tuple[tuple[str, int], ...]
    relations: dict[str, tuple[str, ...]]
    words: frozenset[str]


def _plain(token: str) -> str:
    return token.lower().replace("'", "").replace("\u2019", "")


def _name(token: str, plain: str, opening: bool) -> bool:
    """A capitalised word that is not the pronoun I, nor a common word opening a sentence (acronyms always count)."""
    if plain in NOT_NAMES or plain in NEGATIONS or not token[0].isupper():
        return False
    return not opening or plain not in COMMON_OPENERS or (token.isupper() and len(token) > 1)


def features(text: str) -> Features:
    """The guard features of one prompt."""
    raw = _TOKEN.findall(text.replace("\u2019", "'"))
    numbers: list[str] = []
    entities: list[str] = []
    negations = 0
    directions: Counter[str] = Counter()
    words: list[str] = []
    opening = True
    for token in raw:
        if token in ".!?;":
            opening = True
            continue
        if token[0] in "\"'" and len(token) > 2:
            entities.append(token[1:-1].lower())
            opening = False
            continue
        plain = _plain(token)
        if _NUMBER.match(token):
            numbers.append(token.replace(",", ""))
        elif plain in NUMBER_WORDS:
            numbers.append(NUMBER_WORDS[plain])
        elif _MIXED.match(token) or _name(token, plain, opening):
            entities.append(plain)
        if plain in NEGATIONS or token.lower().endswith("n't"):
            negations += 1
        if plain in DIRECTION_WORDS:
            directions[plain] += 1
        words.append(plain)
        opening = False
    relations: dict[str, list[str]] = {}
    for index, word in enumerate(words):
        if word in RELATIONS:
            governed = next((w for w in words[index + 1 :] if w not in _SKIP), "")
            relations.setdefault(word, []).append(governed)
    return Features(
        numbers=tuple(numbers),
        negations=negations,
        entities=tuple(entities),
        directions=tuple(sorted(directions.items())),
        relations={k: tuple(v) for k, v in relations.items()},
        words=frozenset(words),
    )


def _negated(a: frozenset[str], b: frozenset[str]) -> bool:
    """Some word of ``b`` is a word of ``a`` with a negating prefix, the stem absent from ``b``."""
    return any(p + w in b and w not in b for w in a - b for p in NEGATING_PREFIXES)


def refusals(a: str | Features, b: str | Features) -> tuple[GuardName, ...]:
    """The guards that refuse treating ``a`` and ``b`` as the same question; empty when none does."""
    fa = a if isinstance(a, Features) else features(a)
    fb = b if isinstance(b, Features) else features(b)
    found: list[GuardName] = []
    if fa.numbers != fb.numbers:
        found.append("number")
    if fa.negations != fb.negations or _negated(fa.words, fb.words) or _negated(fb.words, fa.words):
        found.append("negation")
    if fa.entities != fb.entities:
        found.append("entity")
    if fa.directions != fb.directions:
        found.append("direction")
    if any(fa.relations[r] != fb.relations[r] for r in fa.relations.keys() & fb.relations.keys()):
        found.append("relation")
    return tuple(found)


def all_pass(a: str | Features, b: str | Features, enabled: bool = True) -> bool:
    """True when no guard refuses (or guards are off)."""
    return not enabled or not refusals(a, b)


def names() -> Sequence[GuardName]:
    """Every guard, in the order :func:`refusals` reports them."""
    return ("number", "negation", "entity", "direction", "relation")
