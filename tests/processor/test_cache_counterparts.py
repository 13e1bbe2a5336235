"""The counterpart check's pure parts (no embedder: vectors are made up here) and its place in a lookup (a real Redis,
an embedder that counts its calls)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from inferplane.processor.cache.config import CacheConfig, CachedModel
from inferplane.processor.cache.counterparts import (
    MAX_DIFFERING_WORDS,
    MAX_ORDERED_WORDS,
    Difference,
    Vector,
    Verdict,
    WordVectors,
    decide,
    difference,
    inflected,
    words,
)
from inferplane.processor.cache.metrics import CacheMetrics
from inferplane.processor.cache.store import ResponseCache, connect
from tests.processor.test_cache_rules import completion
from tests.redis_server import RedisServer, redis_server


def unit(*values: float) -> Vector:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What's the capital of France?", ["what", "is", "the", "capital", "of", "france^"]),  # a name: marked
        ("Copy column A. A cat, I'm sure.", ["copy", "column", "a^", "a", "cat", "i", "am", "sure"]),
        ("I can't log in", ["i", "can", "not", "log", "in"]),
        ("I cannot attend", ["i", "can", "not", "attend"]),
        ("Isn't it late?", ["is", "not", "it", "late"]),
        (
            "Can my employer read my employer's emails?",
            ["can", "my", "employer", "read", "my", "employer", "'s", "emails"],
        ),
        ("Is this non-taxable?", ["is", "this", "non", "taxable"]),
        ("Give me three tips for the third time", ["give", "me", "3", "tips", "for", "the", "#3", "time"]),
        ("I'd like the twenty-first one", ["i", "would", "like", "the", "20", "#1", "1"]),
    ],
)
def test_words_expand_contractions_split_possessives_read_numbers_and_mark_names(
    text: str, expected: list[str]
) -> None:
    assert words(text) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("In Python, how do I read a file?", "How do I read a file in Python?"),  # reordered: nothing differs
        ("What is the capital of France?", "What's the capital of France?"),
        ("北京的天气怎么样\uff1f", "北京的天气怎么样"),  # the same words, another punctuation
        ("Explain what a mortgage is.", "I was wondering if you could explain what a mortgage is."),
        ("Cancel my subscription.", "Could you please cancel my subscription? Thank you."),
        ("Name the largest desert in the world.", "Hi there, could you name the largest desert in the world for me?"),
        ("How do I reset my password?", "How can I reset my password?"),
        ("How do I write a cover letter?", "How should I write a cover letter?"),
        ("I want to cancel my order.", "I'd like to cancel my order."),
        ("What payment methods do you accept?", "Which payment methods do you accept?"),
        ("Who wrote Hamlet?", "By whom was Hamlet written?"),  # an irregular verb, the agent after "by"
        ("Has anyone reviewed my application?", "Has my application been reviewed?"),  # the passive drops "anyone"
        ("Has the team fixed the login bug?", "Has the login bug been fixed by the team?"),  # subject = agent
        ("Which is healthier, tea or coffee?", "Which is healthier, coffee or tea?"),  # alternatives trade places
        ("Who owns Instagram?", "By whom is Instagram owned?"),  # a third person and a present passive's participle
        ("Which company makes the PlayStation?", "By which company is the PlayStation made?"),
        ("Who cuts the cake?", "By whom is the cake cut?"),
        ("Who wrote Hamlet?", "By whom was Hamlet written?"),
    ],
)
def test_paraphrases_that_differ_in_grammar_only_leave_nothing_to_compare(a: str, b: str) -> None:
    diff = difference(a, b)
    assert diff.refused is None and diff.to_embed == frozenset()
    assert decide(diff, {}, 0.9, 0.6, None).refused is None


@pytest.mark.parametrize(
    ("a", "b", "refusal"),
    [
        ("Is 17 a prime number?", "Is 15 a prime number?", "number"),
        ("Give me three tips for better sleep.", "Give me five tips for better sleep.", "number"),
        ("Is the store open?", "Was the store open?", "tense"),
        # An active prompt shows its tense by its verb alone; a passive's "be" shows the other's.
        ("Who owned Instagram?", "By whom is Instagram owned?", "tense"),
        ("Who owns Instagram?", "By whom was Instagram owned?", "tense"),
        ("Who cuts the cake?", "By whom was the cake cut?", "tense"),
        ("Which company made the PlayStation?", "By which company is the PlayStation made?", "tense"),
        # Another script or an accent: the check vouches only for words it reads (an ideograph run is one word).
        ("北京的天气怎么样\uff1f", "上海的天气怎么样\uff1f", "unread"),
        ("Is the café open?", "Is the cafe open?", "unread"),
        ("Is Apple a good investment?", "Is apple a good investment?", "unread"),  # a name is compared as written
        ("What is 2+3?", "What is 2*3?", "unread"),  # a symbol is a word, matched only by itself
        ("Is 5 > 3?", "Is 5 < 3?", "unread"),
        ("Is it -5 degrees outside?", "Is it 5 degrees outside?", "unread"),
        ("Did the dog bite the man?", "Did the man bite the dog?", "order"),  # the same words, roles turned around
        ("Book a flight from Boston to Denver.", "Book a flight from Denver to Boston.", "order"),
        ("Convert 20 pounds to kilograms.", "Convert 20 kilograms to pounds.", "order"),
        ("Is Tokyo bigger than Osaka?", "Is Osaka bigger than Tokyo?", "order"),
        ("Copy column A into column B.", "Copy column B into column A.", "order"),  # a capital "A" is no article
        ("Cancel my subscription.", "Do not cancel my subscription.", "no_counterpart"),  # an added word
        ("Should I sell my shares?", "Do I sell my shares?", "no_counterpart"),  # "should" asks a way only after how
        ("Is it cold?", "Is it cold here?", "no_counterpart"),  # an adverb of place
        ("Is the water hot?", "Is the water very hot?", "no_counterpart"),  # a word of degree
        ("What are common symptoms of the flu?", "What are the symptoms of the flu?", "no_counterpart"),
        (" ".join(f"a{c}" for c in "abcdefgh"), " ".join(f"b{c}" for c in "abcdefgh"), "too_different"),
    ],
)
def test_refused_before_any_embedding(a: str, b: str, refusal: str) -> None:
    diff = difference(a, b)
    assert diff.refused == refusal and diff.to_embed == frozenset()
    assert decide(diff, {}, 0.9, 0.6, None).refused == refusal


def test_a_passive_whose_agent_is_not_the_actives_subject_keeps_by_which_has_no_counterpart() -> None:
    turned = difference("Did the dog bite the man?", "Was the dog bitten by the man?")
    assert (turned.left, turned.right) == (("bite",), ("bite@past", "by"))
    vectors = {"bite": unit(1, 0), "by": unit(0, 1)}
    assert decide(turned, vectors, 0.9, 0.6, None) == Verdict("no_counterpart", "by")
    same = difference("Did the system cancel my booking?", "Was my booking canceled by the system?")
    assert "by" not in same.right
    mine = difference("Did my manager approve the report?", "Was the report approved by my manager?")
    assert (mine.left, mine.right, mine.refused) == (("approve",), ("approved",), None)  # the agent past "my"
    swapped = difference("Did my manager approve the report?", "Was my manager approved by the report?")
    assert "by" in swapped.right


def test_a_long_prompt_in_another_order_is_refused_rather_than_searched() -> None:
    many = [f"x{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(MAX_ORDERED_WORDS + 1)]
    assert difference(" ".join(many), " ".join(many[1:] + many[:1])).refused == "order"
    few = many[:MAX_ORDERED_WORDS]
    assert difference(" ".join(few), " ".join(few[1:] + few[:1])).refused is None  # one word moved to the end


def test_more_differing_words_than_the_bound_are_refused_unembedded() -> None:
    a = " ".join(f"x{c}" for c in "abcdefghijklmnop"[: MAX_DIFFERING_WORDS // 2 + 1])
    b = " ".join(f"y{c}" for c in "abcdefghijklmnop"[: MAX_DIFFERING_WORDS // 2 + 1])
    assert difference(a, b).refused == "too_different"
    assert difference(a[:-3], b[:-3]).refused is None  # one word fewer on each side: at the bound


def test_a_substitution_needs_a_word_the_embedder_scores_as_the_same() -> None:
    diff = difference("Is it easier to learn Python than Java?", "Is it harder to learn Python than Java?")
    assert (diff.left, diff.right, diff.refused) == (("easier",), ("harder",), None)
    assert diff.to_embed == {"easier", "harder"}
    close = {"easier": unit(1, 0.3), "harder": unit(1, 0.0)}  # 0.958 apart
    far = {"easier": unit(1, 1.0), "harder": unit(1, 0.0)}  # 0.707 apart
    assert decide(diff, close, 0.9, 0.6, None).refused is None
    assert decide(diff, far, 0.9, 0.6, None) == decide(diff, far, 0.9, 0.6, None)
    assert (
        decide(diff, far, 0.9, 0.6, None).refused == "no_counterpart"
        and decide(diff, far, 0.9, 0.6, None).word == "easier"
    )


def test_an_inflection_needs_only_the_lower_bound_and_a_change_of_degree_is_no_inflection() -> None:
    diff = difference("Did the system cancel my booking?", "Was my booking canceled by the system?")
    assert (diff.left, diff.right) == (("cancel",), ("canceled",))
    vectors = {"cancel": unit(1, 0.0), "canceled": unit(1, 1.2)}  # 0.64
    assert decide(diff, vectors, 0.9, 0.6, None).refused is None
    assert decide(diff, vectors, 0.9, 0.7, None).refused == "no_counterpart"  # "news" is not "new"
    for a, b in (("cancel", "canceled"), ("bite", "bitten"), ("earthquake", "earthquakes"), ("study", "studies")):
        assert inflected(a, b) and inflected(b, a)
    for a, b in (("safe", "safer"), ("cheap", "cheapest"), ("with", "without"), ("harm", "harmless"), ("go", "goes")):
        assert not inflected(a, b)
    safer = difference("Is it safe?", "Is it safer?")
    assert decide(safer, {"safe": unit(1, 0.0), "safer": unit(1, 0.5)}, 0.9, 0.6, None).refused == "no_counterpart"


def test_an_acronym_is_its_initials_confirmed_by_the_embedder() -> None:
    diff = difference("What is a CPU?", "What is a central processing unit?")
    assert (diff.left, diff.right, diff.acronyms) == ((), (), (("cpu", "central processing unit"),))
    assert diff.to_embed == {"cpu", "central processing unit"}
    assert decide(diff, {"cpu": unit(1, 0.2), "central processing unit": unit(1, 0)}, 0.9, 0.6, None).refused is None
    assert decide(diff, {"cpu": unit(0, 1), "central processing unit": unit(1, 0)}, 0.9, 0.6, None).refused is not None
    eta = difference("What is the ETA?", "What is the estimated time of arrival?")
    assert eta.acronyms == (("eta", "estimated time of arrival"),)


def test_politeness_is_set_aside_only_where_it_opens_or_closes_the_prompt() -> None:
    diff = difference("How do I say hello in French?", "How do I say thanks in French?")
    assert (diff.left, diff.right) == (("hello",), ("thanks",))
    assert decide(diff, {"hello": unit(1, 0), "thanks": unit(1, 1)}, 0.9, 0.6, None).refused == "no_counterpart"


def test_every_differing_word_on_both_sides_needs_its_counterpart() -> None:
    diff = Difference(("kids",), ("children", "sick"), None)
    vectors = {"kids": unit(1, 0.1), "children": unit(1, 0), "sick": unit(0, 1)}
    verdict = decide(diff, vectors, 0.9, 0.6, None)
    assert (verdict.refused, verdict.word) == ("no_counterpart", "sick")


def test_word_vectors_are_cached_least_recently_used_out() -> None:
    cache = WordVectors(capacity=2)
    cache.add(["a", "b"], [unit(1, 0), unit(0, 1)])
    assert cache.missing(["b", "c", "a"]) == ["c"]
    cache.get(["a"])  # "b" is now the oldest
    cache.add(["c"], [unit(1, 1)])
    assert cache.missing(["a", "b", "c"]) == ["b"] and len(cache) == 2


# --- in a lookup ------------------------------------------------------------------------------------------------------


class CountingEmbedder:
    """Prompts (texts with a space) embed to one vector, so every cached prompt is a candidate; words to the vectors
    given, or one of their own; each call recorded."""

    ident = "count4"
    dimensions = 4

    def __init__(self, words_: dict[str, Vector], delay: float = 0.0) -> None:
        self.words = words_
        self.delay = delay
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[Vector]:
        self.calls.append(list(texts))
        if self.delay and all(t in self.words for t in texts):
            await asyncio.sleep(self.delay)
        return [self.words.get(t, unit(1, 1, 1, 1) if " " in t else self._other(t)) for t in texts]

    @staticmethod
    def _other(word: str) -> Vector:
        """A word not given: a vector of its own (its letters' codes), far from the others'."""
        rng = np.random.default_rng(sum(ord(c) * 31**i for i, c in enumerate(word)) % 2**32)
        return unit(*rng.normal(size=4))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


def _lookups(
    port: int, fake: CountingEmbedder, prompts: list[str], stored: int = 1, **config: Any
) -> tuple[list[Any], CacheMetrics]:
    """Store the answers of the first ``stored`` prompts, then look the others up: ([their response headers, whether
    the cache is available, the key prefix], the metrics)."""
    cfg = CacheConfig(
        models={"m": CachedModel(revision="r1")},
        key_prefix=config.pop("key_prefix", "c" + secrets.token_hex(6)),
        timeout_ms=500,
        **config,
    )
    metrics = CacheMetrics(CollectorRegistry())

    async def main() -> list[Any]:
        cache = ResponseCache(cfg, metrics, client=connect(f"redis://127.0.0.1:{port}", cfg), embedder=fake)
        try:
            for prompt in prompts[:stored]:
                body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "temperature": 0}
                first = await cache.lookup("chat", body, tenant="a", tier="t")
                assert await cache.store(first, completion("cached answer"))
            found = []
            for prompt in prompts[stored:]:
                body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "temperature": 0}
                found.append((await cache.lookup("chat", body, tenant="a", tier="t")).response_headers())
            return [found, cache.available, cfg.key_prefix]
        finally:
            await cache.aclose()

    return asyncio.run(main()), metrics


def _value(metrics: CacheMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_lookup_embeds_the_differing_words_once_in_one_call_and_refuses_those_without_a_counterpart(
    server: RedisServer,
) -> None:
    # Words no guard lists: only the counterpart check can tell them apart.
    vectors = {"tricky": unit(1, 0, 0, 0), "fun": unit(1, 1, 0, 0), "kids": unit(0, 0, 1, 0)}
    vectors["children"] = unit(0, 0.1, 1, 0)
    embedder = CountingEmbedder(vectors)
    prompts = [
        "Is it tricky to learn Python for kids?",
        "Is it fun to learn Python for kids?",  # 0.707: refused
        "Is it fun to learn Python for kids?",  # the words are cached now: no call for them
        "Is it tricky to learn Python for children?",  # 0.995: served
        "Could you tell me: is it tricky to learn Python for kids?",  # nothing differs: no word call
    ]
    (found, available, _), metrics = _lookups(server.port, embedder, prompts)
    assert [f.get("x-inferplane-cache-kind", f["x-inferplane-cache"]) for f in found] == [
        "miss",
        "miss",
        "semantic",
        "semantic",
    ]
    word_calls = [c for c in embedder.calls if all(" " not in t for t in c)]
    assert word_calls == [["fun", "tricky"], ["children", "kids"]]
    assert _value(metrics, "inferplane_gateway_cache_word_embeddings_total") == 4
    assert _value(metrics, "inferplane_gateway_cache_semantic_refusals_total", reason="no_counterpart") == 2
    assert available


def _wait_indexed(port: int, prefix: str, documents: int, timeout: float = 20.0) -> None:
    """Wait until the vector index under ``prefix`` holds ``documents`` and indexes nothing more: another process's
    lookup searches it next (a loaded run saw a search find nothing just after the stores)."""
    import time

    import redis

    client = redis.Redis(port=port, decode_responses=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            listed: list[str] = client.execute_command("FT._LIST")  # type: ignore[no-untyped-call]
            names = [name for name in listed if name.startswith(f"{prefix}:idx:")]
            infos = [client.ft(name).info() for name in names]  # type: ignore[no-untyped-call]
            done = [int(info["num_docs"]) == documents and int(info["indexing"]) == 0 for info in infos]
            if done and all(done):
                return
            assert time.monotonic() < deadline, f"{names}: not {documents} documents indexed after {timeout} s"
            time.sleep(0.05)
    finally:
        client.close()


def test_one_lookup_embeds_at_most_16_words_and_refuses_the_candidates_past_them(server: RedisServer) -> None:
    stored = ["alpha bravo charlie delta echo foxtrot", "golf hotel india juliet kilo lima"]
    asked = "mike november oscar papa quebec romeo"  # six words against six, with either stored prompt
    (_, _, prefix), _ = _lookups(server.port, CountingEmbedder({}), stored, stored=2)
    _wait_indexed(server.port, prefix, 2)
    embedder = CountingEmbedder({})  # another processor: no word cached yet
    (found, _, _), metrics = _lookups(server.port, embedder, [asked], stored=0, key_prefix=prefix)
    assert found == [{"x-inferplane-cache": "miss"}]
    word_calls = [c for c in embedder.calls if len(c) > 1]
    assert len(word_calls) == 1 and len(word_calls[0]) == 12  # one candidate's words; two would be 18
    assert _value(metrics, "inferplane_gateway_cache_semantic_refusals_total", reason="too_different") == 1
    assert _value(metrics, "inferplane_gateway_cache_semantic_refusals_total", reason="no_counterpart") == 1


def test_a_slow_embedder_costs_the_semantic_hit_only(server: RedisServer) -> None:
    from inferplane.processor.cache.config import EndpointEmbedderConfig

    vectors = {"kids": unit(0, 0, 1, 0), "children": unit(0, 0.1, 1, 0)}
    embedder = CountingEmbedder(vectors, delay=0.3)
    endpoint = EndpointEmbedderConfig(url="http://127.0.0.1:9/v1", model="m", dimensions=4, timeout_ms=100)
    prompts = ["What are healthy snacks for kids?", "What are healthy snacks for children?"]
    (found, available, _), metrics = _lookups(server.port, embedder, prompts, embedder=endpoint)
    assert found == [{"x-inferplane-cache": "miss"}] and available
    assert _value(metrics, "inferplane_gateway_cache_errors_total", operation="embed_words", error="timeout") == 1
    assert _value(metrics, "inferplane_gateway_cache_semantic_refusals_total", reason="embed_error") == 1
    assert _value(metrics, "inferplane_gateway_cache_up") == 1


def test_guards_off_serve_the_candidate_without_the_check(server: RedisServer) -> None:
    embedder = CountingEmbedder({})
    prompts = ["Is it easier to learn Python?", "Is it harder to learn Python?"]
    (found, _, _), _ = _lookups(server.port, embedder, prompts, guards=False)
    assert found == [
        {"x-inferplane-cache": "hit", "x-inferplane-cache-kind": "semantic", "x-inferplane-cache-similarity": "1.0000"}
    ]
    assert all(" " in t for c in embedder.calls for t in c)  # prompts only


@pytest.mark.parametrize(
    ("a", "b", "word"),
    [
        ("They live in Paris.", "They lived in Paris.", "live"),
        ("Who owns Instagram?", "Who owned Instagram?", "owns"),  # both inflections of "own": 0.897 as lone words
        ("They win the cup.", "They won the cup.", "win"),
        ("I want a refund.", "I wanted a refund.", "want"),
    ],
)
def test_without_an_auxiliary_a_verbs_past_is_no_counterpart_of_its_present(a: str, b: str, word: str) -> None:
    """Neither prompt shows its tense but by the verb: another tense however close the embedder places the two (here
    the same vector)."""
    diff = difference(a, b)
    assert diff.untensed and diff.refused is None
    same = {w: unit(1, 0) for w in diff.to_embed}
    assert decide(diff, same, 0.9, 0.6, None) == Verdict("no_counterpart", word)
    tensed = difference("Did the system cancel my booking?", "Was my booking canceled by the system?")
    assert (
        not tensed.untensed and decide(tensed, {w: unit(1, 0) for w in tensed.to_embed}, 0.9, 0.6, None).refused is None
    )
    plural = difference("How many earthquakes hit Japan?", "How many earthquake hit Japan?")  # no past: not a tense
    assert plural.untensed and decide(plural, {w: unit(1, 0) for w in plural.to_embed}, 0.9, 0.6, None).refused is None
