"""The response cache's pure parts: what may be cached, its keys, the guards, SSE replay (no Redis)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplane.processor.cache.config import CacheConfig, CachedModel
from inferplane.processor.cache.guards import features, refusals
from inferplane.processor.cache.request import Bypass, Cacheable, canonical_json, classify, storable
from inferplane.processor.cache.sse import assemble, events, replay

CONFIG = CacheConfig(models={"m": CachedModel(revision="r1")})


def chat(text: str = "How do I reset my password?", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "temperature": 0, **extra}


def cacheable(body: dict[str, Any], config: CacheConfig = CONFIG, **kw: Any) -> Cacheable:
    result = classify(config, "chat", body, tenant=kw.get("tenant", "a"), tier=kw.get("tier", "t"), header=None)
    assert isinstance(result, Cacheable), result
    return result


def test_deterministic_chat_is_cacheable_with_its_last_message_as_text() -> None:
    request = cacheable(chat(stream=True, stream_options={"include_usage": True}))
    assert (request.model, request.text, request.stream, request.include_usage) == (
        "m",
        "How do I reset my password?",
        True,
        True,
    )
    assert len(request.exact_key) == len(request.scope) == 64


@pytest.mark.parametrize(
    ("body", "header", "config", "reason"),
    [
        (chat(), "bypass", CONFIG, "header"),
        (chat(), "BYPASS ", CONFIG, "header"),
        (chat(), None, CONFIG.model_copy(update={"enabled": False}), "disabled"),
        ({**chat(), "model": "other"}, None, CONFIG, "model"),
        ({k: v for k, v in chat().items() if k != "temperature"}, None, CONFIG, "sampling"),
        (chat(temperature=0.7), None, CONFIG, "sampling"),
        (chat(temperature=0.7), "allow", CONFIG.model_copy(update={"nondeterministic_opt_in": False}), "sampling"),
        (chat(temperature=True), None, CONFIG, "sampling"),
        (chat(tools=[{"type": "function", "function": {"name": "f"}}]), None, CONFIG, "tools"),
        (chat(tool_choice="auto"), None, CONFIG, "tools"),
        (chat(functions=[{"name": "f"}]), None, CONFIG, "tools"),
        (
            {**chat(), "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            None,
            CONFIG,
            "non_text",
        ),
        (chat(modalities=["text", "audio"]), None, CONFIG, "non_text"),
        ({"model": "m", "temperature": 0}, None, CONFIG, "invalid"),
        ({**chat(), "messages": "hello"}, None, CONFIG, "invalid"),
    ],
)
def test_unsafe_requests_bypass_with_their_reason(
    body: dict[str, Any], header: str | None, config: CacheConfig, reason: str
) -> None:
    assert classify(config, "chat", body, tenant="a", tier="t", header=header) == Bypass(reason)  # type: ignore[arg-type]


def test_opt_ins_make_sampled_tool_and_image_requests_cacheable() -> None:
    assert isinstance(classify(CONFIG, "chat", chat(temperature=0.7), tenant="a", tier="t", header="allow"), Cacheable)
    tools = CONFIG.model_copy(update={"cache_tools": True})
    assert isinstance(classify(tools, "chat", chat(tool_choice="auto"), tenant="a", tier="t"), Cacheable)
    images = CONFIG.model_copy(update={"cache_non_text": True})
    body = {**chat(), "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
    request = classify(images, "chat", body, tenant="a", tier="t")
    assert isinstance(request, Cacheable) and request.text is None  # never matched semantically


def test_key_ignores_only_what_cannot_change_the_answer() -> None:
    base = cacheable(chat())
    assert cacheable(chat(temperature=0.0)).exact_key == base.exact_key
    assert cacheable(chat(stream=True, user="u1", stream_options={"include_usage": True})).exact_key == base.exact_key
    for change in (
        {"max_tokens": 5},
        {"top_p": 0.5},
        {"seed": 1},
        {"stop": ["\n"]},
        {"response_format": {"type": "json_object"}},
        {"n": 2},
    ):
        changed = cacheable(chat(**change))
        assert changed.exact_key != base.exact_key, change
        assert changed.scope != base.scope, change


def test_revision_tenant_and_endpoint_are_part_of_every_key() -> None:
    base = cacheable(chat())
    upgraded = CacheConfig(models={"m": CachedModel(revision="r2")})
    assert cacheable(chat(), upgraded).exact_key != base.exact_key
    assert cacheable(chat(), upgraded).scope != base.scope
    other = cacheable(chat(), tenant="b")
    assert (other.exact_key, other.scope) != (base.exact_key, base.scope)
    assert other.exact_key != base.exact_key and other.scope != base.scope
    completions = classify(CONFIG, "completions", {"model": "m", "prompt": "x", "temperature": 0}, tenant="a", tier="t")
    assert isinstance(completions, Cacheable) and completions.text == "x"


def test_shared_tier_and_no_isolation_share_across_tenants_only_within_the_tier() -> None:
    shared = CONFIG.model_copy(update={"shared_tiers": ("public",)})
    a = cacheable(chat(), shared, tenant="a", tier="public")
    b = cacheable(chat(), shared, tenant="b", tier="public")
    assert a.exact_key == b.exact_key
    assert (
        cacheable(chat(), shared, tenant="a", tier="t").exact_key
        != cacheable(chat(), shared, tenant="b", tier="t").exact_key
    )
    open_config = CONFIG.model_copy(update={"tenant_isolation": False})
    assert cacheable(chat(), open_config, tenant="a").exact_key == cacheable(chat(), open_config, tenant="b").exact_key
    assert cacheable(chat(), open_config, tier="x").exact_key != cacheable(chat(), open_config, tier="y").exact_key


def test_semantic_scope_holds_the_conversation_but_not_the_last_user_message() -> None:
    one = cacheable(chat("How do I reset my password?"))
    two = cacheable(chat("How can I reset my password?"))
    assert one.scope == two.scope and one.exact_key != two.exact_key
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How can I reset my password?"}]
    other_system = cacheable({**chat(), "messages": history})
    assert other_system.scope != one.scope
    assistant_last = cacheable({**chat(), "messages": [*history, {"role": "assistant", "content": "ok"}]})
    assert assistant_last.text is None
    assert cacheable(chat("x" * 1001)).text is None  # longer than semantic_max_chars: exact only
    assert cacheable(chat(), CONFIG.model_copy(update={"semantic": False})).text is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    params=st.dictionaries(
        st.sampled_from(["max_tokens", "top_p", "top_k", "seed", "presence_penalty", "stop"]),
        st.one_of(st.integers(0, 1000), st.floats(0, 2, allow_nan=False), st.text(max_size=5)),
        max_size=4,
    )
)
def test_keys_are_independent_of_field_order_and_change_with_any_value(params: dict[str, Any]) -> None:
    body = chat(**params)
    reordered = dict(reversed(list(body.items())))
    assert cacheable(body).exact_key == cacheable(reordered).exact_key
    for name, value in params.items():
        mutated = {**body, name: [value]}
        assert cacheable(mutated).exact_key != cacheable(body).exact_key
    assert json.loads(canonical_json(body)) == json.loads(canonical_json(reordered))


def test_storable_bounds_entries_and_refuses_incomplete_answers() -> None:
    answer = completion("Click forgot password.")
    assert storable(CONFIG, answer, 2000)
    assert not storable(CONFIG, answer, CONFIG.max_entry_bytes + 1)
    assert not storable(CONFIG, {**answer, "choices": [{**answer["choices"][0], "finish_reason": None}]}, 10)
    assert not storable(CONFIG, {**answer, "choices": []}, 10)
    tool_call = {**answer["choices"][0], "message": {"role": "assistant", "tool_calls": [{"id": "1"}]}}
    assert not storable(CONFIG, {**answer, "choices": [tool_call]}, 10)


# --- guards ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "guard"),
    [
        ("Book a flight from Boston to Denver.", "Book a flight from Denver to Boston.", "entity"),
        ("Convert 20 pounds to kilograms.", "Convert 20 kilograms to pounds.", "relation"),
        ("What is the status of ticket 30571?", "What is the status of ticket 30517?", "number"),
        ("Coffee with sugar, please.", "Coffee without sugar, please.", "negation"),
        ("Is the water safe to drink?", "Is the water unsafe to drink?", "negation"),
        ("I can attend.", "I can't attend.", "negation"),
        ("Turn on the lights.", "Turn off the lights.", "direction"),
        ("Give me three tips.", "Give me five tips.", "number"),
        ("Translate hello into Spanish.", "Translate hello into French.", "entity"),
        ("Compare the A100 and the H100.", "Compare the A100 and the H200.", "entity"),
        ("Is 'foo' a keyword?", "Is 'bar' a keyword?", "entity"),
        ("Is the refund taxable?", "Is the refund non-taxable?", "negation"),
        (
            "Which city is warmer in winter, Rome or Madrid?",
            "Which city is colder in winter, Rome or Madrid?",
            "direction",
        ),
        # A sentence model scores this 0.984 (the held-out set, benchmarks/data/cache_heldout_pairs.jsonl).
        ("Is Python easier to learn than Java?", "Is Python harder to learn than Java?", "direction"),
        ("Set a timer for 10 minutes.", "Set a timer for 10 seconds.", "unit"),
        ("How many kms is a marathon?", "How many miles is a marathon?", "unit"),
        ("Remind me to call mom at noon.", "Remind me to call mom at midnight.", "time"),
        ("Did the dog bite the man?", "Did the man bite the dog?", "order"),
        ("Should the guest tip the host?", "Should the host tip the guest?", "order"),
        ("Does the company owe me money?", "Do I owe the company money?", "order"),  # "I", "me", "my": one word
        ("Can my employer read my emails?", "Can I read my employer's emails?", "order"),  # another subject
        # What the guards now read as the same (a synonym, an inflection, an acronym, alternatives) still keeps
        # an opposite, another name and another alternative apart.
        ("How do I buy a ticket?", "How do I sell a ticket?", "direction"),
        ("How do I purchase a ticket?", "How do I sell a ticket?", "direction"),  # no synonym of "sell" there
        ("Did the bank approve my loan?", "Was my loan rejected by the bank?", "direction"),
        ("What is the quickest way to learn?", "What is the slowest way to learn?", "direction"),
        ("Is the app available in the US?", "Is the app available in the UK?", "entity"),
        ("Is the app available in the US?", "Is the app available in the United Kingdom?", "entity"),
        ("Is it cheaper to rent or buy a house?", "Is it cheaper to rent or build a house?", "relation"),
        ("Should I learn React or Vue first?", "Should I learn React or Svelte first?", "entity"),
    ],
)
def test_guards_refuse_the_near_misses_static_embeddings_cannot_see(a: str, b: str, guard: str) -> None:
    assert guard in refusals(a, b)
    assert guard in refusals(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I reset my password?", "How can I reset my password?"),
        ("Stop my order.", "Please stop my order."),
        ("Give me three tips for better sleep.", "Give me 3 tips for better sleep."),
        ("How do I make pancakes?", "How do you make pancakes?"),
        ("What is the capital of France?", "What's the capital of France?"),
        ("I want to cancel my order.", "Cancel my order please."),
        ("In Python, how do I read a file?", "How do I read a file in Python?"),  # a phrase moved: no swap
        ("Tomorrow, will it rain in Seattle?", "Will it rain in Seattle tomorrow?"),
        ("Which is healthier, tea or coffee?", "Which is healthier, coffee or tea?"),  # alternatives may swap
        ("Has the team fixed the login bug?", "Has the login bug been fixed by the team?"),  # passive
        ("Has anyone reviewed my application?", "Has my application been reviewed?"),
        ("Outline the steps to write a business plan.", "Please outline the steps to write a business plan."),
        ("How many mins does the test take?", "How many minutes does the test take?"),
        ("What's the max file size for uploads?", "What is the maximum file size for uploads?"),
        ("Paraphrase the plan.", "Please paraphrase the plan."),  # an opener written in lower case: no name
        # Alternatives trading places as a relation's object or as names; an acronym spelled out; a dictionary
        # synonym or an inflection of a word of opposites (the counterpart check holds the embedder to each).
        ("Is it cheaper to rent or buy a house?", "Is it cheaper to buy or rent a house?"),
        (
            "What is the difference between a virus and a bacterium?",
            "What is the difference between a bacterium and a virus?",
        ),
        ("Should I learn React or Vue first?", "Should I learn Vue or React first?"),
        ("What is the capital of the US?", "What is the capital of the United States?"),
        (
            "What are the benefits of AI in healthcare?",
            "What are the benefits of artificial intelligence in healthcare?",
        ),
        ("How do I purchase a ticket?", "How do I buy a ticket?"),
        ("How do I begin meditating?", "How do I start meditating?"),
        ("What is the quickest way to learn to type?", "What is the fastest way to learn to type?"),
        ("Did the bank approve my loan?", "Was my loan approved by the bank?"),
    ],
)
def test_guards_let_paraphrases_through(a: str, b: str) -> None:
    assert refusals(a, b) == ()


def test_features_read_numbers_names_and_negations() -> None:
    found = features("Don't send 2,500 USD to Alice in Paris before Friday.")
    assert found.numbers == ("2500",)
    assert found.entities == ("usd", "alice", "paris", "friday")
    assert found.negations == 1
    assert dict(found.directions) == {"send": 1, "before": 1}
    assert found.relations == {"to": ("alice",)}


def test_features_read_units_times_roles_and_the_asked_subject() -> None:
    found = features("Can my employer's office send 3 kms of cable to me tonight?")
    assert found.units == ("kilometer",)
    assert found.times == ("tonight",)
    assert found.sequence[:4] == ("can", "i", "employer", "office")  # "my" is "I"; "employer's" is "employer"
    assert found.subject == ("can", "employer")
    assert features("Is 17 prime?").subject is None  # a number is the number guard's
    assert features("Paraphrase the plan.").openers == {"paraphrase"}  # a name unless the other says "paraphrase"


# --- streams ----------------------------------------------------------------------------------------------------------


def completion(text: str, **usage: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13, **usage},
    }


def test_replayed_stream_reads_unchanged_through_the_openai_client() -> None:
    answer = completion("Use the reset link.")
    body = replay(answer, include_usage=True)

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = openai.OpenAI(
        api_key="k",
        base_url="http://gateway.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Use the reset link."
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, None, "stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 13
    assert {c.id for c in chunks} == {"chatcmpl-1"}


def test_assemble_is_the_inverse_of_replay_and_refuses_incomplete_streams() -> None:
    answer = completion("Use the reset link.")
    chunks = list(events(replay(answer, include_usage=True)))
    assert assemble(chunks) == {**answer, "choices": [{**answer["choices"][0], "logprobs": None}]}
    assert assemble(chunks[:-2]) is None  # no finish_reason yet
    text = {"id": "c", "object": "text_completion", "created": 1, "model": "m"}
    replayed = replay({**text, "choices": [{"index": 0, "text": "hi", "finish_reason": "length"}]}, include_usage=False)
    assert replayed.endswith(b"data: [DONE]\n\n")
    assert assemble(events(replayed)) == {
        **text,
        "choices": [{"index": 0, "text": "hi", "logprobs": None, "finish_reason": "length"}],
    }
