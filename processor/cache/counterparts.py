"""The counterpart check: a semantic hit needs every word that differs between the two prompts to have a counterpart
in the other prompt that the embedder itself scores as the same word.

Why not more guards: a sentence embedding averages its tokens, so one swapped word ("easier"/"harder", "to"/"from",
"here"/"there", "very") barely moves it, and the word-list guards (:mod:`.guards`) only see the words someone thought
of. This check turns the question around: instead of listing the words that change a meaning (never complete), it lets
through only the differences it can show change nothing, and refuses everything else.

How two prompts are compared (:func:`difference`):

1. Both are read as lower-case words; contractions are expanded ("what's" = "what is", "can't" = "can not", "I'd" =
   "I would"), a possessive is its own word ("employer's" = "employer" + "'s"), hyphenated words are split ("non-
   taxable" = "non" + "taxable") and number words are read as numbers ("three" = "3", "third" = "#3").
2. Politeness and a request's framing are dropped where they open or close the prompt ("Could you tell me ...",
   "..., please", "... thank you"); words of closed grammatical classes that do not decide an answer are dropped
   anywhere: the articles and the auxiliaries "do", "be" and "have" in any form (their tense is kept and must agree:
   "Is the store open?" / "Was the store open?" is refused). A few forms are read as one ("which"/"what",
   "whom"/"who", "how can I" and "how should I"/"how do I", "I would like"/"I want", an irregular verb's past and
   participle), a passive's "by" is dropped when its agent is the active's subject, and an indefinite subject when
   the other prompt is a passive without an agent.
   These lists are **fail-safe**: a word missing from them is compared as a content word, which costs a hit, never a
   wrong answer; none of them names a word that changes a meaning.
3. What is left on each side, less what the other side also has (as multisets), are the differing words. A word holding
   a digit (so any number) has no counterpart but itself: another number is always refused. The words both sides have
   must keep their order, up to one run of words moved (or two alternatives trading places around "or"/"and"): a role
   swap ("Did the man bite the dog?") is refused. More than :data:`MAX_DIFFERING_WORDS` differing words is refused
   without asking the embedder (no paraphrase the cache should serve changes that much, and it bounds the cost).

Then (:func:`decide`) every differing word on each side needs a counterpart among the other side's differing words:
a word the embedder scores, as a lone word, at least ``word_similarity`` similar (near-synonyms), or an inflection of
it (the same stem with a regular inflectional suffix: -s, -es, -ed, -d, -ing, -en, -n; never -er/-est, which change
degree) that the embedder scores at least ``inflection_similarity`` similar (so "news" is not "new" and "goods" is not
"good"), or its synonym in WordNet (the most frequent sense of each, in the same inflection: :mod:`.synonyms`;
"fix"/"repair", "kids"/"children"). A word with none, an insertion or a deletion included ("here", "very", "not",
"only"), refuses the hit.

The bounds are measured per embedder (``docs/caching.md``): the embedder places antonyms and sibling entities close
together ("monday"/"tuesday" 0.874, "husband"/"wife" 0.869, "easier"/"harder" 0.842 with all-MiniLM-L6-v2), so its
near-synonym bound has to sit above them, and by itself it admits little beyond spelling variants: the synonyms come
from the dictionary, which lists words of one meaning and never opposites, so what it lacks costs a hit, not an answer.

Cost: the words to embed are only the differing words of the candidates that passed the threshold and the guards,
:data:`MAX_DIFFERING_WORDS` per candidate at most and ``MAX_WORDS_PER_LOOKUP`` in all (``store.py``), sent in one
embedder call, and cached per word (:class:`WordVectors`) so a word is embedded once per process.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from inferplane.processor.cache.synonyms import Lexicon

Vector = npt.NDArray[np.float32]
Refusal = Literal["number", "unread", "tense", "order", "too_different", "no_counterpart"]
"""Why the check refused a pair: another number, a differing word outside the English alphabet or a symbol (which the
check does not vouch for), another tense, the shared words in another order than one phrase moved, too many differing
words, a word without a counterpart."""

MAX_DIFFERING_WORDS = 12
"""Differing words (both sides together) past which a pair is refused without embedding: bounds one check's cost."""

_PUNCTUATION = (
    ".,!?;:'\"()[]{}\u2026\u201c\u201d\u2018\u00ab\u00bb\u00bf\u00a1"
    "\u3001\u3002\u300c\u300d\u300e\u300f\uff01\uff08\uff09\uff0c\uff1a\uff1b\uff1f"
)
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?|[^\w\s" + re.escape(_PUNCTUATION) + "]")
"""A word: letters and digits of any script (a run of ideographs, unspaced, is one word) and an apostrophe's part; or
one symbol ("+", "<", "$", "%", a minus sign: each a word, so "2+3" is not "2*3"). Sentence punctuation (Latin and
CJK) is no word; a mark not listed is a symbol, compared as written (fail-safe)."""
_HYPHEN_IN_WORD = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")
_SENTENCE_ENDS = ".!?:\u2026\u3002\uff01\uff1f"
NAME_MARK = "^"
"""Appended to a word capitalised inside a sentence: a name is compared as written, never matched to another word."""

ARTICLES = frozenset({"a", "an", "the"})
PRESENT = frozenset({"do", "does", "is", "are", "am", "has", "have"})
PAST = frozenset({"did", "was", "were", "had"})
NEUTRAL_AUXILIARIES = frozenset({"be", "been", "being"})
"""Auxiliaries without a tense. Not "by": dropping it would let a passive turn the roles around ("Did the dog bite
the man?" / "Was the dog bitten by the man?")."""
POLITENESS = frozenset({"please", "pls", "plz", "kindly", "thanks", "thank", "hi", "hello", "hey"})
IGNORED = ARTICLES | PRESENT | PAST | NEUTRAL_AUXILIARIES
"""Words dropped before comparing: closed classes that do not decide an answer (the tense of the auxiliaries is kept
apart and compared). Fail-safe: anything not here is compared. :data:`POLITENESS` is dropped only where it opens or
closes the prompt (:func:`_drop_framing`)."""

FRAMINGS: tuple[tuple[str, ...], ...] = tuple(
    tuple(phrase.split())
    for phrase in (
        "i was wondering if you could",
        "i would appreciate it if you could",
        "would you be so kind as to",
        "sorry to bother you but",
        "would you mind",
        "could you",
        "can you",
        "would you",
        "will you",
        "may i ask",
        "excuse me",
        "thank you",
        "hi there",
        "tell me",
    )
)
"""A request's framing, dropped where it opens the prompt (after a greeting or another framing): "Could you tell me
what X is?" asks what "What is X?" asks. Fail-safe as :data:`IGNORED`: a framing not listed is compared word by word."""

_CONTRACTIONS = {"n't": ("not",), "'re": ("are",), "'ve": ("have",), "'ll": ("will",), "'d": ("would",), "'m": ("am",)}
_IRREGULAR_NEGATIVES = {"can't": ("can", "not"), "won't": ("will", "not"), "cannot": ("can", "not"), "ain't": ("not",)}
_IS_AFTER = frozenset(
    ["what", "where", "who", "how", "when", "why", "it", "that", "there", "here", "he", "she", "this"]
)
"""Words whose "'s" is "is" ("what's"); after any other word it is a possessive."""

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
_ONES += "seventeen eighteen nineteen"
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
CARDINALS: dict[str, str] = {w: str(i) for i, w in enumerate(_ONES.split())} | {
    w: str(20 + 10 * i) for i, w in enumerate(_TENS)
}
CARDINALS |= {"hundred": "100", "thousand": "1000", "million": "1000000", "billion": "1000000000", "dozen": "12"}
CARDINALS |= {"half": "0.5", "quarter": "0.25", "once": "x1", "twice": "x2", "thrice": "x3"}
CARDINALS |= {"double": "x2", "triple": "x3", "single": "x1"}
_ORDINAL_STEMS = {"first": "1", "second": "2", "third": "3", "fifth": "5", "eighth": "8", "ninth": "9", "twelfth": "12"}
ORDINALS: dict[str, str] = {w: f"#{n}" for w, n in _ORDINAL_STEMS.items()} | {
    w + "th": f"#{n}" for w, n in CARDINALS.items() if n.isdigit() and w + "th" not in _ORDINAL_STEMS
}
ORDINALS |= {w[:-1] + "ieth": f"#{CARDINALS[w]}" for w in _TENS}
NUMBERS = CARDINALS | ORDINALS
"""Number words, read as numbers so that another number is refused as digits are (generated from the cardinals: the
class is closed and complete up to "ninety-ninth"; compounds are split at the hyphen)."""

QUESTION_WORDS = frozenset({"who", "what", "which", "whose"})
_CASES = {"whom": "who", "which": "what"}
"""Forms read as one word: a case ("By whom was it written?" asks "Who wrote it?") and the interrogative determiner
("Which payment methods ...?" / "What payment methods ...?")."""
_MANNER = frozenset({"how", "where"})
_ADVERBIAL_QUESTIONS = frozenset({"how", "when", "where", "why"})
_BE = frozenset({"is", "are", "was", "were", "be", "been", "being", "am"})
INDEFINITE_AGENTS = frozenset({"someone", "somebody", "anyone", "anybody", "they", "people", "you"})
"""Subjects a passive without "by" may leave out ("Did someone ...?" / "Was it ...?"; "Have you shipped my order?" /
"Has my order been shipped?"): the passive names no other agent."""
_POSSESSIVES = frozenset({"my", "your", "his", "her", "its", "our", "their"})
_ACRONYM_JOINERS = frozenset({"of", "and", "for", "the", "a", "an"})
_ASKERS = frozenset({"i", "we"})

_IRREGULAR_VERBS = """
be was were been; begin began begun; bite bit bitten; blow blew blown; break broke broken; bring brought; build built;
buy bought; catch caught; choose chose chosen; come came; cut; do did done; draw drew drawn; drink drank drunk;
drive drove driven; eat ate eaten; fall fell fallen; feel felt; fight fought; find found; fly flew flown;
forget forgot forgotten; freeze froze frozen; get got gotten; give gave given; go went gone; grow grew grown;
hang hung; have had; hear heard; hide hid hidden; hold held; keep kept; know knew known; lay laid;
leave left; lend lent; lose lost; make made; mean meant; meet met; pay paid; ride rode ridden; ring rang rung;
rise rose risen; run ran; say said; see saw seen; sell sold; send sent; shake shook shaken; shoot shot; show shown;
shut; sing sang sung; sink sank sunk; sit sat; sleep slept; speak spoke spoken; spend spent; stand stood;
steal stole stolen; stick stuck; strike struck; swim swam swum; take took taken; teach taught; tear tore torn;
tell told; think thought; throw threw thrown; understand understood; wake woke woken; wear wore worn; win won;
write wrote written"""
_IRREGULAR: dict[str, str] = {
    form: entry.split()[0] + "@past" for entry in _IRREGULAR_VERBS.split(";") for form in entry.split()[1:]
}
"""Irregular verbs' past and participle forms, read as one past form of the verb (as a regular verb's "-ed" serves
both): "Who wrote Hamlet?" / "By whom was Hamlet written?". A verb missing here is compared as any other word."""

INFLECTIONS = ("s", "es", "d", "ed", "ing", "n", "en")
"""Regular inflectional suffixes (plural, third person, past, participles). Not "-er"/"-est": they change degree."""


def words(text: str) -> list[str]:
    """The prompt as lower-case words, contractions expanded, possessives split, number words as numbers; a word
    capitalised inside a sentence (a name: "Apple", "column A", "The Starry Night") is marked with :data:`NAME_MARK`,
    so it is not the same word as its lower-case spelling ("apple", the article "a")."""
    out: list[str] = []
    text = _HYPHEN_IN_WORD.sub(" ", text.replace("\u2019", "'"))  # "non-taxable" = "non taxable"; "-5" keeps its sign
    for match in _WORD.finditer(text):
        original = match.group()
        token = original.lower()
        before = text[: match.start()].rstrip()
        name = original[0].isupper() and bool(before) and before[-1] not in _SENTENCE_ENDS
        if token in _IRREGULAR_NEGATIVES:
            out.extend(_IRREGULAR_NEGATIVES[token])
            continue
        stem, apostrophe, rest = token.partition("'")
        mark = NAME_MARK if name and stem != "i" else ""
        if apostrophe:
            suffix = "'" + rest
            if stem.endswith("n") and suffix == "'t":
                out.extend((stem[:-1] + mark, "not"))
            elif suffix in _CONTRACTIONS:
                out.extend((stem + mark, *_CONTRACTIONS[suffix]))
            elif suffix == "'s":
                out.extend((stem + mark, "is" if stem in _IS_AFTER else "us" if stem == "let" else "'s"))
            else:
                out.append(token + mark)
            continue
        out.append(NUMBERS.get(token, token + mark))
    return out


def _drop_framing(sequence: list[str]) -> list[str]:
    """The words without the politeness and framings that open the prompt (repeatedly: "Hi there, could you tell me
    ..."), and without those that close it ("..., please", "... thank you", and "for me" after an opening framing).
    Only at the ends: "How do I say hello in French?" is not "How do I say thanks in French?"."""
    start = 0
    while True:
        framing = next((f for f in FRAMINGS if tuple(sequence[start : start + len(f)]) == f), None)
        if framing is not None:
            start += len(framing)
        elif start < len(sequence) and sequence[start] in POLITENESS:
            start += 1
        else:
            break
    end = len(sequence)
    while end > start:
        if sequence[end - 1] in POLITENESS:
            end -= 1
        elif end - 2 >= start and sequence[end - 2 : end] == ["thank", "you"]:
            end -= 2
        elif start and end - 2 >= start and sequence[end - 2 : end] == ["for", "me"]:
            end -= 2  # "Could you name ... for me?": the request's framing, closing it
        else:
            break
    return sequence[start:end]


def _tense(sequence: Iterable[str]) -> frozenset[str]:
    return frozenset("present" if w in PRESENT else "past" for w in sequence if w in PRESENT or w in PAST)


@dataclass(frozen=True)
class Difference:
    """What two prompts differ in, once grammar and politeness are set aside."""

    left: tuple[str, ...]
    """Words of the first prompt the second lacks (a word twice in one and once in the other counts once)."""
    right: tuple[str, ...]
    """Words of the second prompt the first lacks."""
    refused: Refusal | None
    """Refused without asking the embedder (another number or tense, too many differing words), else ``None``."""
    acronyms: tuple[tuple[str, str], ...] = ()
    """Acronyms of one prompt and the words of the other whose initials spell them, taken out of ``left`` and
    ``right``: the embedder must score each pair at least ``inflection_similarity``."""
    untensed: bool = False
    """Neither prompt shows its tense by an auxiliary (nor by its verb against the other's passive): a verb's past
    against its present form is then the only mark of another tense, so :func:`decide` finds no counterpart in it
    ("They live in Paris." / "They lived in Paris.", "Who owns Instagram?" / "Who owned Instagram?")."""

    @property
    def to_embed(self) -> frozenset[str]:
        """The words (and acronym expansions) whose vectors :func:`decide` needs: none when refused already."""
        if self.refused is not None:
            return frozenset()
        words_ = (*self.left, *self.right) if self.left and self.right else ()
        phrases = (p for pair in self.acronyms for p in pair)
        return frozenset(w for w in (*words_, *phrases) if "@" not in w)


_ASKING_MODALS = frozenset({"can", "should"})
"""Modals that ask for a way after "how"/"where" and a first person: "How can I ...?" and "How should I ...?" ask
what "How do I ...?" asks. Not "should" elsewhere: "Should I buy it?" is not "Do I buy it?"."""
_WANTERS = _ASKERS | {"you", "they"}
"""Subjects after which "would like" is "want" (not "it": "What would it look like?")."""


def _sequence(text: str) -> list[str]:
    sequence = [_CASES.get(w, w) for w in _drop_framing(words(text))]
    for at in range(len(sequence) - 2):
        if sequence[at] in _MANNER and sequence[at + 1] in _ASKING_MODALS and sequence[at + 2] in _ASKERS:
            sequence[at + 1] = "do"
    for at in range(len(sequence) - 2, 0, -1):  # "I would like ..." (and "I'd like ...") says "I want ..."
        if sequence[at : at + 2] == ["would", "like"] and sequence[at - 1] in _WANTERS:
            sequence[at : at + 2] = ["want"]
    return [w if w in IGNORED else _IRREGULAR.get(w, w) for w in sequence]


def content(text: str) -> tuple[Counter[str], frozenset[str]]:
    """The compared words of a prompt (a multiset) and the tenses of its auxiliaries."""
    sequence = _sequence(text)
    return Counter(w for w in sequence if w not in IGNORED), _tense(sequence)


def _subject(sequence: list[str]) -> str | None:
    """The first word that is not grammar, a possessive or a question word other than the subject: an active
    question's subject ("Did the system cancel ..." -> "system"; "Who wrote ..." -> "who"; "Did my employer ..." ->
    "employer")."""
    skipped = IGNORED | _ADVERBIAL_QUESTIONS | _POSSESSIVES
    return next((w for w in sequence if w not in skipped), None)


def _passive(sequence: list[str]) -> bool:
    """A form of "be" and a past participle (a word ending in "-ed"/"-en", or an irregular one)."""
    return any(w in _BE for w in sequence) and any(w.endswith(("ed", "en", "@past")) for w in sequence)


def _past_forms(sequence: Iterable[str]) -> set[str]:
    """Words that are a verb's past or participle by their form: an irregular one, or a regular "-ed" of five letters
    or more (so not "red", "bed" or "need"; a longer word that only looks past costs a hit, see :func:`_verb_tense`)."""
    return {w for w in sequence if w.endswith("@past") or (len(w) >= 5 and w.endswith("ed"))}


def _be_tense(sequence: Iterable[str]) -> frozenset[str]:
    return _tense(w for w in sequence if w in _BE)


def _third_person_participles(active: Counter[str], passive: Counter[str]) -> list[tuple[str, str]]:
    """Differing words that are one verb's third person (``active``) and its participle (``passive``): "owns" /
    "owned", "makes" / "made", "carries" / "carried", "cuts" / "cut"."""
    pairs: list[tuple[str, str]] = []
    taken: set[str] = set()
    for word in sorted(active):
        stems = {word[:-1]} if word.endswith("s") else set()
        stems |= {word[:-2]} if word.endswith("es") else set()
        stems |= {word[:-3] + "y"} if word.endswith("ies") else set()
        for participle in sorted(set(passive) - taken):
            irregular = participle in {f"{stem}@past" for stem in stems} or participle in stems  # "cuts" / "cut"
            regular = participle.endswith("d") and any(len(stem) >= 3 and inflected(stem, participle) for stem in stems)
            if irregular or regular:
                pairs.append((word, participle))
                taken.add(participle)
                break
    return pairs


def _verb_tense(
    untensed: list[str], tensed: list[str], own: Counter[str], other: Counter[str]
) -> tuple[frozenset[str], list[tuple[str, str]]]:
    """The tense of a prompt without a tense-bearing auxiliary where the other prompt's "be" shows its own (empty: not
    compared), and the pairs of differing words that need no counterpart. Past when it uses as its verb a past form the
    other uses as a participle ("Who owned Instagram?" / "By whom is Instagram owned?": past against present); present
    when its verb is the third person of the other's participle ("Who owns Instagram?" / "By whom was Instagram
    owned?": present against past); a present passive of that verb then asks the same ("Who owns Instagram?" / "By
    whom is Instagram owned?"), so that pair is set aside."""
    be = _be_tense(tensed)
    if not be:
        return frozenset(), []
    if _past_forms(untensed) & _past_forms(tensed):
        return frozenset({"past"}), []
    pairs = _third_person_participles(own, other)
    if not pairs:
        return frozenset(), []
    return frozenset({"present"}), pairs if be == {"present"} else []


def _dropped_agent(active: list[str], passive: list[str]) -> str | None:
    """The indefinite subject of ``active`` that a passive without "by" leaves out ("When did someone first climb
    Everest?" / "When was Everest first climbed?"), when ``passive`` is one and lacks it."""
    subject = _subject(active)
    if subject in INDEFINITE_AGENTS and subject not in passive and "by" not in passive and _passive(passive):
        return subject
    return None


def _acronyms(own: Counter[str], other: Counter[str], other_sequence: list[str]) -> list[tuple[str, str]]:
    """Words of ``own`` spelled by the initials of a run of ``other``'s differing words ("cpu" / "central processing
    unit", "eta" / "estimated time of arrival"); the matches are taken out of both and returned, for the embedder to
    confirm (:func:`decide`)."""
    found: list[tuple[str, str]] = []
    for word in list(own):
        letters = word.rstrip(NAME_MARK)
        if not (2 <= len(letters) <= 6 and letters.isalpha()):
            continue
        for start in range(len(other_sequence)):
            run: list[str] = []
            initials = ""
            for candidate in other_sequence[start:]:
                plain = candidate.rstrip(NAME_MARK)
                if run and plain in _ACRONYM_JOINERS:
                    run.append(candidate)
                    continue
                if not plain.isalpha() or other[candidate] < run.count(candidate) + 1:
                    break
                run.append(candidate)
                initials += plain[0]
                if not letters.startswith(initials) or len(initials) == len(letters):
                    break
            while run and run[-1].rstrip(NAME_MARK) in _ACRONYM_JOINERS:
                run.pop()
            if initials == letters and len(run) >= 2:
                own[word] -= 1
                for taken in run:
                    if other[taken] > 0:
                        other[taken] -= 1
                found.append((letters, " ".join(w.rstrip(NAME_MARK) for w in run)))
                break
    return found


def _agent(sequence: list[str]) -> str | None:
    """A passive's agent: the word after "by" (articles skipped), or the opening question word when "by" ends the
    question ("Who was it written by?")."""
    at = sequence.index("by")
    after = [w for w in sequence[at + 1 :] if w not in ARTICLES and w not in _POSSESSIVES]
    if after:
        return after[0]
    return sequence[0] if sequence and sequence[0] in QUESTION_WORDS else None


def _same_agent(a: list[str], b: list[str]) -> bool:
    """When only one prompt has "by" (once), it is a passive of the other only if its agent is the other's subject:
    "Was my booking canceled by the system?" / "Did the system cancel my booking?", not "Was the dog bitten by the
    man?" / "Did the dog bite the man?"."""
    passive, active = (a, b) if "by" in a else (b, a)
    if passive.count("by") != 1 or "by" in active:
        return False
    agent = _agent(passive)
    return agent is not None and agent == _subject(active)


def difference(a: str, b: str) -> Difference:
    """The differing words of ``a`` and ``b`` and whether they are refused before any embedding."""
    sa, sb = _sequence(a), _sequence(b)
    ca, cb = Counter(w for w in sa if w not in IGNORED), Counter(w for w in sb if w not in IGNORED)
    ta, tb = _tense(sa), _tense(sb)
    agent: str | None = None
    if ("by" in sa) != ("by" in sb) and _same_agent(sa, sb):
        ca.pop("by", None)
        cb.pop("by", None)
        agent = _agent(sa if "by" in sa else sb)  # the active's subject: its place is the passive's to change
    for active, passive, counts in ((sa, sb, ca), (sb, sa, cb)):
        dropped = _dropped_agent(active, passive)
        if dropped is not None:
            counts[dropped] -= 1
    da, db = ca - cb, cb - ca
    if bool(ta) != bool(tb):  # one prompt shows its tense by its verb alone
        untensed, tensed, own, other = (sa, sb, da, db) if not ta else (sb, sa, db, da)
        shown, same = _verb_tense(untensed, tensed, own, other)
        ta, tb = (shown, tb) if not ta else (ta, shown)
        for word, participle in same:
            own[word] -= 1
            other[participle] -= 1
    ordered = ca & cb
    if agent is not None:
        ordered[agent] -= 1
    moved = _one_phrase_moved(_order(sa, ordered), _order(sb, ordered))
    phrases = _acronyms(da, db, sb) + [(w, x) for x, w in _acronyms(db, da, sa)]
    da, db = +da, +db
    left, right = tuple(sorted(da.elements())), tuple(sorted(db.elements()))
    refused: Refusal | None = None
    if any(any(c.isdigit() for c in w) for w in (*left, *right)):
        refused = "number"
    elif not all(_readable(w) for w in (*left, *right)):
        refused = "unread"  # another script, an accent, a symbol: compared as written, nothing more
    elif ta and tb and ta != tb:
        refused = "tense"
    elif not moved:
        refused = "order"
    elif len(left) + len(right) > MAX_DIFFERING_WORDS:
        refused = "too_different"
    elif bool(left) != bool(right):
        refused = "no_counterpart"  # a word added or dropped: nothing on the other side can stand for it
    return Difference(left, right, refused, tuple(phrases), untensed=not ta and not tb)


_COORDINATORS = frozenset({"or", "and"})
MAX_ORDERED_WORDS = 60
"""Shared words past which two prompts in another order are refused rather than compared (bounds the quadratic
search of :func:`_one_phrase_moved`)."""


def _order(sequence: list[str], shared: Counter[str]) -> list[str]:
    """The words both prompts have, in this prompt's order (a repeated word numbered by its occurrence)."""
    seen: Counter[str] = Counter()
    out: list[str] = []
    for word in sequence:
        if word in IGNORED or seen[word] >= shared[word]:
            continue
        out.append(f"{word}#{seen[word]}")
        seen[word] += 1
    return out


def _one_phrase_moved(a: list[str], b: list[str]) -> bool:
    """Whether ``b`` is ``a``, or ``a`` with one run of words moved elsewhere ("In Python, how do I read a file?" /
    "How do I read a file in Python?"), or two words joined by "or"/"and" that trade places. Two words that trade
    places around others ("Did the dog bite the man?" / "Did the man bite the dog?", "from Boston to Denver" / "from
    Denver to Boston") are no such move. A passive's agent, once shown to be the active's subject, is left out of both
    (:func:`difference`): "Has the team fixed the bug?" / "Has the bug been fixed by the team?"."""
    if a == b:
        return True
    if len(a) > MAX_ORDERED_WORDS:
        return False
    start = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    a, b = a[start:], b[start:]
    if len(a) >= 3 and a[1].partition("#")[0] in _COORDINATORS and b[:3] == [a[2], a[1], a[0]] and b[3:] == a[3:]:
        return True  # alternatives that trade places: "tea or coffee" / "coffee or tea"
    for first in range(1, len(a)):  # a = X Y Z and b = Y X Z, X of ``first`` words
        for second in range(1, len(a) - first + 1):
            end = first + second
            if b[:second] == a[first:end] and b[second:end] == a[:first] and b[end:] == a[end:]:
                return True
    return False


def _readable(word: str) -> bool:
    """A word of the English alphabet (and digits), which the check may match to another: not another script, an
    accented letter or a symbol."""
    plain = word.removesuffix("@past").replace("'", "")
    return plain.isascii() and plain.isalnum()


def inflected(a: str, b: str) -> bool:
    """Whether one word is the other with a regular inflectional suffix ("cancel"/"canceled", "bite"/"bitten",
    "earthquake"/"earthquakes", "study"/"studied"); never a change of degree ("safe"/"safer")."""
    if a.endswith("@past") or b.endswith("@past"):
        return a.removesuffix("@past") == b.removesuffix("@past") and a != b
    short, long = sorted((a, b), key=len)
    if short == long or len(short) < 3:
        return False
    stems = {short, short + short[-1]}
    if short.endswith("e"):
        stems |= {short[:-1], short[:-1] + short[-2]}
    if short.endswith("y"):
        stems.add(short[:-1] + "i")
    return any(long == stem + suffix for stem in stems for suffix in INFLECTIONS)


def _past(word: str) -> bool:
    return word.endswith(("@past", "ed"))


def one_stem(a: str, b: str) -> bool:
    """Whether two words are forms of one stem: one an inflection of the other, or both inflections of a third
    ("owns" / "owned", "win" / "win@past")."""
    a, b = a.removesuffix("@past"), b.removesuffix("@past")
    if a == b or inflected(a, b):
        return True
    return any(
        inflected(a[: len(a) - len(x)], b) and inflected(a[: len(a) - len(x)], a)
        for x in INFLECTIONS
        if a.endswith(x) and len(a) - len(x) >= 3
    )


@dataclass(frozen=True)
class Verdict:
    """The check's answer for one pair: ``refused`` is ``None`` when the hit may be served."""

    refused: Refusal | None
    word: str | None = None
    """The word without a counterpart (``no_counterpart``)."""


def decide(
    diff: Difference,
    vectors: Mapping[str, Vector],
    word_similarity: float,
    inflection_similarity: float,
    lexicon: Lexicon | None,
) -> Verdict:
    """Every differing word has a counterpart on the other side (``vectors`` holds :attr:`Difference.to_embed`):
    its synonym in ``lexicon`` (:mod:`.synonyms`; ``None``: no dictionary synonyms), a word the embedder scores at
    least ``word_similarity``, or an inflection of it the embedder scores at least ``inflection_similarity``."""
    if diff.refused is not None:
        return Verdict(diff.refused)
    for acronym, expansion in diff.acronyms:
        if float(np.dot(vectors[acronym], vectors[expansion])) < inflection_similarity:
            return Verdict("no_counterpart", acronym)

    def counterpart(word: str, others: tuple[str, ...]) -> bool:
        for other in others:
            if diff.untensed and _past(word) != _past(other) and one_stem(word, other):
                continue  # another tense, however close the embedder places the two
            if "@" in word or "@" in other:
                if inflected(word, other):
                    return True
                continue
            if lexicon is not None and lexicon.synonyms(word, other):
                return True  # the dictionary's word, not the embedder's: it scores "mend"/"repair" 0.28
            similarity = float(np.dot(vectors[word], vectors[other]))
            if similarity >= word_similarity or (similarity >= inflection_similarity and inflected(word, other)):
                return True
        return False

    for word in diff.left:
        if not counterpart(word, diff.right):
            return Verdict("no_counterpart", word)
    for word in diff.right:
        if not counterpart(word, diff.left):
            return Verdict("no_counterpart", word)
    return Verdict(None)


class WordVectors:
    """Word vectors cached per word (least recently used out first), so a word is embedded once per process."""

    def __init__(self, capacity: int = 8192) -> None:
        self.capacity = capacity
        self._vectors: OrderedDict[str, Vector] = OrderedDict()

    def missing(self, wanted: Iterable[str]) -> list[str]:
        """The words of ``wanted`` not cached, sorted (one embedder call takes them all)."""
        return sorted({w for w in wanted if w not in self._vectors})

    def add(self, words_: Iterable[str], vectors: Iterable[Vector]) -> None:
        """Cache the vectors of ``words_``."""
        for word, vector in zip(words_, vectors, strict=True):
            self._vectors[word] = vector
            self._vectors.move_to_end(word)
        while len(self._vectors) > self.capacity:
            self._vectors.popitem(last=False)

    def get(self, wanted: Iterable[str]) -> dict[str, Vector]:
        """The cached vectors of ``wanted`` (all of them must be cached)."""
        found: dict[str, Vector] = {}
        for word in wanted:
            found[word] = self._vectors[word]
            self._vectors.move_to_end(word)
        return found

    def __len__(self) -> int:
        return len(self._vectors)
