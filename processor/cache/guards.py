"""Guards beyond the similarity threshold: reasons two prompts must not share an answer however close they embed.

Static embeddings (wordllama) average word vectors, so word order, a swapped digit or a small negation barely move
them: "Book a flight from Boston to Denver." and "... from Denver to Boston." score 1.0. Each guard compares one
feature of the two prompts and refuses the semantic hit when it differs:

* ``number``: the sequence of numbers (digits, and number words read as digits: "two" = "2");
* ``negation``: how many negations each carries ("not", "no", "never", "without", "n't", ...);
* ``entity``: the sequence of names (capitalised words not opening a sentence, or opening it but not a common
  sentence opener; acronyms; tokens mixing letters and digits; quoted strings), compared case-insensitively; a
  sentence's capitalised first word that the other prompt writes in lower case is no name ("Outline the steps" /
  "Please outline the steps"); two names joined by "or"/"and" may trade places ("React or Vue"), and an acronym the
  other prompt spells out is the name it stands for ("US" / "United States", "AI" / "artificial intelligence");
* ``direction``: the multiset of words with an opposite ("increase"/"decrease", "on"/"off", "buy"/"sell", ...), an
  inflection read as its word ("approved" is "approve"); one the other prompt lacks passes only where that prompt has
  its dictionary synonym instead and no word of opposites of its own ("buy" / "purchase", "start" / "begin");
* ``relation``: for each relational word both prompts use ("to", "from", "than", "into", "vs", ...), the word it
  governs must agree ("20 pounds to kilograms" / "20 kilograms to pounds"); two alternatives it governs may trade
  places ("to rent or buy" / "to buy or rent");
* ``unit``: the sequence of units of measure, abbreviations read as the unit ("10 minutes" / "10 seconds",
  "5 kms" = "5 kilometers");
* ``time``: the sequence of times of day, seasons and relative days ("noon" / "midnight", "summer" / "winter",
  "tonight" / "tomorrow"); weekdays and months are names, which ``entity`` compares;
* ``order``: two content words both prompts share swap sides around a third content word they share ("Did the dog
  bite the man?" / "Did the man bite the dog?"; "I", "me" and "my" are one word here, so "Does the company owe me
  money?" / "Do I owe the company money?" is a swap too): who does what to whom. A phrase moved to the front or the
  end never puts a shared word between the two it passes, alternatives joined by "or"/"and" may swap, and a passive
  agent ("... fixed by the team") is no swap. Two questions opening with the same auxiliary must also ask it of the
  same subject ("Can my employer read my emails?" / "Can I read my employer's emails?"), unless one is passive.

They trade recall for safety: a paraphrase that spells a number differently from how both sides read it, or moves a
name, is answered by the engine instead. ``inferplane cache eval`` measures both sides on a labelled set.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from inferplane.processor.cache.synonyms import default_lexicon

GuardName = Literal["number", "negation", "entity", "direction", "relation", "unit", "time", "order"]


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
    ("easier", "harder"),
    ("easiest", "hardest"),
    ("closer", "farther"),
    ("closest", "farthest"),
    ("louder", "quieter"),
    ("brighter", "darker"),
    ("happier", "sadder"),
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
    ("better", "worse"),
    ("best", "worst"),
    ("warmer", "colder"),
    ("hotter", "colder"),
    ("warmest", "coldest"),
    ("hottest", "coldest"),
    ("stronger", "weaker"),
    ("strongest", "weakest"),
    ("heavier", "lighter"),
    ("heaviest", "lightest"),
    ("deeper", "shallower"),
    ("deepest", "shallowest"),
    ("younger", "older"),
    ("youngest", "oldest"),
    ("richer", "poorer"),
    ("richest", "poorest"),
    ("wider", "narrower"),
    ("thicker", "thinner"),
    ("safer", "riskier"),
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
    excuse sorry may outline proofread
    order buy sell pay track print read play call email rename move copy paste sort count search look
    before after during while since until as at by into about over under up down out off again
    use using install run start restart stop schedule plan remind note save show display"""
)
"""Sentence openers that are not names ("Please", "Convert", "What"); any other capitalised opener counts as one."""

NOT_NAMES = _words("i im ive id ill")
"""Capitalised anywhere, never a name: the pronoun "I" and its contractions."""

NEGATING_PREFIXES = ("un", "dis", "non", "in", "im", "ir", "il")
"""A word in one prompt that is another's word with one of these prefixes negates it ("safe" / "unsafe")."""


_UNIT_NAMES = """minute hour day week month year decade century millisecond
    millimeter centimeter meter kilometer inch foot yard mile acre hectare
    milligram gram kilogram ounce pound ton tonne
    milliliter liter teaspoon tablespoon cup pint quart gallon
    celsius fahrenheit kelvin degree percent
    byte kilobit kilobyte megabit megabyte gigabit gigabyte terabit terabyte
    watt kilowatt megawatt horsepower joule calorie volt
    dollar euro yen cent rupee peso franc yuan"""
UNITS: dict[str, tuple[str, ...]] = {name: (name,) for name in _UNIT_NAMES.split()} | {
    "seconds": ("second",),
    "secs": ("second",),
    "sec": ("second",),
    "mins": ("minute",),
    "hrs": ("hour",),
    "bits": ("bit",),
    "mm": ("millimeter",),
    "cm": ("centimeter",),
    "km": ("kilometer",),
    "kms": ("kilometer",),
    "feet": ("foot",),
    "ft": ("foot",),
    "inches": ("inch",),
    "metre": ("meter",),
    "kilometre": ("kilometer",),
    "litre": ("liter",),
    "mg": ("milligram",),
    "g": ("gram",),
    "kg": ("kilogram",),
    "kgs": ("kilogram",),
    "lb": ("pound",),
    "lbs": ("pound",),
    "oz": ("ounce",),
    "ml": ("milliliter",),
    "tsp": ("teaspoon",),
    "tbsp": ("tablespoon",),
    "kb": ("kilobyte",),
    "mb": ("megabyte",),
    "gb": ("gigabyte",),
    "tb": ("terabyte",),
    "kw": ("kilowatt",),
    "hp": ("horsepower",),
    "kcal": ("calorie",),
    "mph": ("mile", "hour"),
    "kph": ("kilometer", "hour"),
}
"""Units of measure (singular) and their abbreviations. Plurals ending in "s" are read as the singular; "second"
alone is an ordinal (a number word), so only its plural and abbreviations are a unit; "min" is left out (it is also
"minimum"), and so are "hr" (also "human resources"), "ms" ("MS Word"), "bit" ("a bit more"), "stone" and "amp";
only the plural "bits" is a unit."""

DIRECTION_ALIASES = {"max": "maximum", "min": "minimum"}
"""Abbreviations counted as the word they abbreviate by the ``direction`` guard ("max" / "maximum" is no change)."""

TIME_WORDS = _words(
    """today tonight tomorrow yesterday morning afternoon evening night noon midday midnight dawn dusk sunrise sunset
    weekend weekday weekdays spring summer autumn winter"""
)
"""Words naming a time of day, a season or a day relative to now ("fall" is left out: mostly the verb)."""

FIRST_PERSON = _words("i me my mine myself")
"""One speaker, whatever the case: the ``order`` guard reads them all as "i"."""

ORDER_FUNCTION_WORDS = _SKIP | _words(
    """is are was were be been being do does did has have had can could would should will shall may might must
    you he she it we they him them us what how why when where who which whom whose to of in on at for with by
    from about and or nor but vs versus not if than as there"""
)
"""Words whose position carries no role: only the other words' order is compared, around another such word (so
alternatives joined by "or"/"and" may swap). The first person is compared: see :data:`FIRST_PERSON`."""


@dataclass(frozen=True)
class Features:
    """What the guards compare, read once per prompt."""

    numbers: tuple[str, ...]
    negations: int
    entities: tuple[str, ...]
    directions: tuple[tuple[str, int], ...]
    relations: dict[str, tuple[str, ...]]
    words: frozenset[str]
    units: tuple[str, ...] = ()
    times: tuple[str, ...] = ()
    sequence: tuple[str, ...] = ()
    openers: frozenset[str] = frozenset()
    subject: tuple[str, str] | None = None
    acronyms: frozenset[str] = frozenset()
    """Names written in capitals ("US", "AI"): each may stand for the words its letters open in the other prompt."""


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
    entities: list[tuple[int, str]] = []
    acronyms: set[str] = set()
    negations = 0
    directions: Counter[str] = Counter()
    words: list[str] = []
    openers: set[str] = set()
    opening = True
    for token in raw:
        if token in ".!?;":
            opening = True
            continue
        if token[0] in "\"'" and len(token) > 2:
            entities.append((len(words), token[1:-1].lower()))
            opening = False
            continue
        plain = _plain(token)
        if _NUMBER.match(token):
            numbers.append(token.replace(",", ""))
        elif plain in NUMBER_WORDS:
            numbers.append(NUMBER_WORDS[plain])
        elif _MIXED.match(token) or _name(token, plain, opening):
            entities.append((len(words), plain))
            if opening and not token.isupper():
                openers.add(plain)
            if token.isupper() and token.isalpha() and len(token) > 1:
                acronyms.add(plain)
        if plain in NEGATIONS or token.lower().endswith("n't") or plain.startswith("non-"):
            negations += 1
        direction = _direction(plain)
        if direction is not None:
            directions[direction] += 1
        words.append(plain[:-1] if token.lower().endswith("'s") else plain)  # "employer's" is "employer"
        opening = False
    relations: dict[str, list[str]] = {}
    for index, word in enumerate(words):
        if word in RELATIONS:
            relations.setdefault(word, []).append(_governed(words, index + 1))
    return Features(
        numbers=tuple(numbers),
        negations=negations,
        entities=_alternatives_sorted(entities, words),
        directions=tuple(sorted(directions.items())),
        relations={k: tuple(v) for k, v in relations.items()},
        words=frozenset(words),
        units=tuple(unit for word in words for unit in _unit(word)),
        times=tuple(word for word in words if word in TIME_WORDS),
        sequence=tuple("i" if word in FIRST_PERSON else word for word in words),
        openers=frozenset(openers),
        subject=_subject(tuple(words)),
        acronyms=frozenset(acronyms),
    )


def _direction(plain: str) -> str | None:
    """The word of :data:`OPPOSITES` that ``plain`` is, or is a regular inflection of ("approved" is "approve",
    "closes" is "close"), with :data:`DIRECTION_ALIASES` read as the word they abbreviate."""
    plain = DIRECTION_ALIASES.get(plain, plain)
    if plain in DIRECTION_WORDS:
        return plain
    for suffix in ("s", "es", "d", "ed", "ing"):
        stem = plain.removesuffix(suffix)
        if stem != plain and len(stem) >= 3 and stem in DIRECTION_WORDS and stem not in DIRECTION_ALIASES:
            return stem  # not "min": "mins" are minutes
    return None


_ALTERNATIVES = frozenset({"or", "and"})


def _next_content(words: Sequence[str], start: int) -> int | None:
    return next((i for i in range(start, len(words)) if words[i] not in _SKIP), None)


def _governed(words: Sequence[str], start: int) -> str:
    """The word a relation governs, determiners skipped; two alternatives joined by "or"/"and" are read as one, in
    either order ("to rent or buy" / "to buy or rent", "between a virus and a bacterium")."""
    first = _next_content(words, start)
    if first is None:
        return ""
    joiner = _next_content(words, first + 1)
    if joiner is not None and words[joiner] in _ALTERNATIVES:
        second = _next_content(words, joiner + 1)
        if second is not None:
            return "|".join(sorted((words[first], words[second])))
    return words[first]


def _alternatives_sorted(entities: Sequence[tuple[int, str]], words: Sequence[str]) -> tuple[str, ...]:
    """The names in order, two names joined by "or"/"and" in either order ("React or Vue" / "Vue or React")."""
    names = [name for _, name in entities]
    for i in range(len(entities) - 1):
        at, next_at = entities[i][0], entities[i + 1][0]
        if next_at == at + 2 and words[at + 1] in _ALTERNATIVES:
            names[i], names[i + 1] = sorted((names[i], names[i + 1]))
    return tuple(names)


def _unit(word: str) -> tuple[str, ...]:
    """The units a word names: ``hours`` is ``hour``; none for other words."""
    if word in UNITS:
        return UNITS[word]
    if word.endswith("s") and word[:-1] in UNITS:
        return UNITS[word[:-1]]
    return ()


def _first_positions(sequence: tuple[str, ...]) -> dict[str, int]:
    positions: dict[str, int] = {}
    for index, word in enumerate(sequence):
        positions.setdefault(word, index)
    return positions


def _agents(sequence: tuple[str, ...]) -> list[bool]:
    """For each position, whether its word is introduced by "by" (determiners between): "fixed by the team"."""
    flags: list[bool] = []
    previous = ""
    for word in sequence:
        flags.append(previous == "by")
        if word not in _SKIP:
            previous = word
    return flags


AUXILIARIES: dict[str, str] = {
    "do": "do",
    "does": "do",
    "did": "do",
    "is": "be",
    "are": "be",
    "was": "be",
    "were": "be",
    "am": "be",
    "has": "have",
    "have": "have",
    "had": "have",
} | {word: word for word in ("can", "could", "will", "would", "should", "shall", "may", "might", "must")}
"""Auxiliaries that open a yes/no question, by verb ("does" and "did" ask alike)."""


def _subject(sequence: tuple[str, ...]) -> tuple[str, str] | None:
    """The opening auxiliary's verb and the word after it (determiners skipped): ``("can", "employer")``."""
    if not sequence or sequence[0] not in AUXILIARIES:
        return None
    subject = next((w for w in sequence[1:] if w not in _SKIP), "")
    if _NUMBER.match(subject) or subject in NUMBER_WORDS:
        return None  # a number is the number guard's to compare ("Is 17 a prime?" / "Is 15 a prime?")
    return AUXILIARIES[sequence[0]], subject


def _passive(sequence: tuple[str, ...], agent: str) -> bool:
    """ "been"/"being", or ``agent`` after "by": the subject of the other prompt may be this one's object."""
    if "been" in sequence or "being" in sequence:
        return True
    agent = "i" if agent in FIRST_PERSON else agent
    return any(flag and word == agent for word, flag in zip(sequence, _agents(sequence), strict=True))


def _other_subject(a: Features, b: Features) -> bool:
    sa, sb = a.subject, b.subject
    if sa is None or sb is None or sa[0] != sb[0] or sa[1] == sb[1]:
        return False
    return not (_passive(a.sequence, sb[1]) or _passive(b.sequence, sa[1]))


def swapped_roles(a: Features, b: Features) -> bool:
    """Two shared words other than function words swap sides around a third shared word other than one (x before z
    before y in ``a``, y before z before x in ``b``), or two questions opening with the same auxiliary ask it of
    different subjects. A swap whose later word is a passive agent in one prompt only ("the team fixed ..." /
    "... fixed by the team") is no swap. Quadratic in the shared words (prompts are at most 1000 characters)."""
    if _other_subject(a, b):
        return True
    pa, pb = _first_positions(a.sequence), _first_positions(b.sequence)
    agent_a, agent_b = _agents(a.sequence), _agents(b.sequence)
    content = [w for w in pa.keys() & pb.keys() if w not in ORDER_FUNCTION_WORDS]
    for z in content:
        # x: before z in a and after it in b (the later of the pair in b); y: after z in a (the later in a) and
        # before it in b. Any x with any y swap; one pair whose later words agree on being an agent is enough.
        xs = {agent_b[pb[x]] for x in content if pa[x] < pa[z] and pb[x] > pb[z]}
        ys = {agent_a[pa[y]] for y in content if pa[y] > pa[z] and pb[y] < pb[z]}
        if xs & ys:
            return True
    return False


def _negated(a: frozenset[str], b: frozenset[str]) -> bool:
    """Some word of ``b`` is a word of ``a`` with a negating prefix, the stem absent from ``b``."""
    return any(p + w in b and w not in b for w in a - b for p in NEGATING_PREFIXES)


def _names(own: Features, other: Features) -> tuple[str, ...]:
    """``own``'s names less the sentence openers ``other`` writes in lower case (a word, not a name)."""
    common = own.openers & (other.words - set(other.entities))
    return tuple(name for name in own.entities if name not in common)


def _spelled_out(names_: tuple[str, ...], own: Features, other: Features) -> tuple[str, ...]:
    """``own``'s names with an acronym the other prompt spells out ("US" / "United States", "AI" / "artificial
    intelligence") left out, and the words that spell out one of the other's acronyms left out too: the acronym and
    its words are one name. The counterpart check still holds the embedder to the pair."""
    spelled = {a for a in own.acronyms if _spells(a, other.sequence)}
    out = [n for n in names_ if n not in spelled]
    for acronym in other.acronyms:
        for start in range(len(out) - len(acronym) + 1):
            run = out[start : start + len(acronym)]
            if "".join(w[0] for w in run) == acronym and acronym not in own.acronyms:
                out[start : start + len(acronym)] = []
                break
    return tuple(out)


def _spells(acronym: str, sequence: Sequence[str]) -> bool:
    """Whether a run of words in ``sequence`` opens with the acronym's letters in turn."""
    n = len(acronym)
    return any("".join(w[:1] for w in sequence[i : i + n]) == acronym for i in range(len(sequence) - n + 1))


def _synonymous_directions(a: Features, b: Features) -> bool:
    """Whether every word of opposites one prompt has and the other lacks has a dictionary synonym among the other's
    words ("buy" / "purchase", "start" / "begin", "fastest" / "quickest"): a synonym is no change of direction, and
    the dictionary never lists an opposite as one (:mod:`.synonyms`)."""
    lexicon = default_lexicon()
    if lexicon is None:
        return False
    da, db = Counter(dict(a.directions)), Counter(dict(b.directions))
    if (da - db) and (db - da):
        return False  # a word of opposites on each side that the other lacks: "buy" / "sell"
    for own, other_words in ((da - db, b.words), (db - da, a.words)):
        for word in own:
            if not any(lexicon.synonyms(word, w) for w in other_words if _direction(w) is None):
                return False
    return True


def refusals(a: str | Features, b: str | Features) -> tuple[GuardName, ...]:
    """The guards that refuse treating ``a`` and ``b`` as the same question; empty when none does."""
    fa = a if isinstance(a, Features) else features(a)
    fb = b if isinstance(b, Features) else features(b)
    found: list[GuardName] = []
    if fa.numbers != fb.numbers:
        found.append("number")
    if fa.negations != fb.negations or _negated(fa.words, fb.words) or _negated(fb.words, fa.words):
        found.append("negation")
    if _spelled_out(_names(fa, fb), fa, fb) != _spelled_out(_names(fb, fa), fb, fa):
        found.append("entity")
    if fa.directions != fb.directions and not _synonymous_directions(fa, fb):
        found.append("direction")
    if any(fa.relations[r] != fb.relations[r] for r in fa.relations.keys() & fb.relations.keys()):
        found.append("relation")
    if fa.units != fb.units:
        found.append("unit")
    if fa.times != fb.times:
        found.append("time")
    if swapped_roles(fa, fb):
        found.append("order")
    return tuple(found)


def all_pass(a: str | Features, b: str | Features, enabled: bool = True) -> bool:
    """True when no guard refuses (or guards are off)."""
    return not enabled or not refusals(a, b)


def names() -> Sequence[GuardName]:
    """Every guard, in the order :func:`refusals` reports them."""
    return ("number", "negation", "entity", "direction", "relation", "unit", "time", "order")
