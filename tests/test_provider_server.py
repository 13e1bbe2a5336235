"""The hosted-provider stand-in (tests/provider_server.py) as the official ``openai`` client sees it: over TLS with
its test CA, the reply and exact usage streamed or not, the key checked, failures on demand and an untrusted CA
refused."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.provider_server import COMPLETION_TOKENS, REPLY, ProviderServer, prompt_tokens

API_KEY = "sk-test-provider"
MODEL = "gpt-test-mini"
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": [{"type": "text", "text": "Say hello to me"}]},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProviderServer]:
    with ProviderServer(tmp_path_factory.mktemp("provider"), api_key=API_KEY) as provider:
        yield provider


@pytest.fixture
def provider(server: ProviderServer) -> ProviderServer:
    """The module's server with nothing received and no failure pending."""
    server.clear()
    return server


def client(server: ProviderServer, api_key: str = API_KEY, *, trust: bool = True) -> openai.OpenAI:
    """An OpenAI client for ``server``, trusting its CA unless ``trust`` is false, that never retries."""
    verify = ssl.create_default_context(cafile=server.ca_file) if trust else True
    http_client = httpx2.Client(verify=verify)
    return openai.OpenAI(base_url=server.base_url, api_key=api_key, http_client=http_client, max_retries=0)


def test_prompt_tokens_counts_the_words_of_every_message() -> None:
    assert prompt_tokens({"messages": MESSAGES}) == 7
    assert prompt_tokens({"messages": []}) == 1
    assert len(REPLY.split()) == COMPLETION_TOKENS


def test_a_completion_returns_the_reply_and_exact_usage(provider: ProviderServer) -> None:
    with client(provider) as openai_client:
        reply = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert reply.model == MODEL
    assert reply.choices[0].message.content == REPLY
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    prompt = prompt_tokens({"messages": MESSAGES})
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (prompt, COMPLETION_TOKENS)
    assert reply.usage.total_tokens == prompt + COMPLETION_TOKENS
    [received] = provider.received()
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {API_KEY}"
    assert received.body["model"] == MODEL
    assert received.body["messages"] == MESSAGES


def test_a_stream_yields_the_reply_word_by_word_and_the_usage(provider: ProviderServer) -> None:
    with client(provider) as openai_client:
        stream = openai_client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)

    contents = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices]
    assert contents == [REPLY.split()[0], *(f" {word}" for word in REPLY.split()[1:])]
    assert "".join(content or "" for content in contents) == REPLY
    assert all(chunk.model == MODEL for chunk in chunks)
    usage = chunks[-1].usage
    assert not chunks[-1].choices
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompt_tokens({"messages": MESSAGES}), COMPLETION_TOKENS)
    assert provider.received()[0].body["stream"] is True


def test_a_wrong_key_is_refused(provider: ProviderServer) -> None:
    with client(provider, api_key="sk-wrong") as openai_client, pytest.raises(openai.AuthenticationError) as refused:
        openai_client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert refused.value.code == "invalid_api_key"
    assert [received.headers["authorization"] for received in provider.received()] == ["Bearer sk-wrong"]


def test_fail_next_fails_once_then_answers(provider: ProviderServer) -> None:
    provider.fail_next(503)
    with client(provider) as openai_client:
        with pytest.raises(openai.InternalServerError) as failed:
            openai_client.chat.completions.create(model=MODEL, messages=MESSAGES)
        reply = openai_client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert failed.value.status_code == 503
    assert failed.value.type == "server_error"
    assert reply.choices[0].message.content == REPLY
    assert len(provider.received()) == 2


def test_an_unknown_path_is_not_found(provider: ProviderServer) -> None:
    with client(provider) as openai_client, pytest.raises(openai.NotFoundError):
        openai_client.completions.create(model=MODEL, prompt="hello")

    assert [received.path for received in provider.received()] == ["/v1/completions"]


def test_a_client_that_does_not_trust_the_ca_cannot_connect(provider: ProviderServer) -> None:
    with client(provider, trust=False) as openai_client, pytest.raises(openai.APIConnectionError):
        openai_client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert provider.received() == []


def test_the_wire_format_is_what_a_proxy_expects(provider: ProviderServer) -> None:
    """JSON replies carry their length on a kept-alive connection, streams are chunked event streams, and a chunked
    request body (what Envoy sends when its client gave no length) is read whole."""
    headers = {"authorization": f"Bearer {API_KEY}"}
    body = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "stream": true}' % MODEL.encode()
    verify = ssl.create_default_context(cafile=provider.ca_file)
    with httpx2.Client(base_url=provider.base_url, headers=headers, verify=verify) as http:
        plain = http.post("/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        stream = http.post("/chat/completions", content=iter([body[:20], body[20:]]))
        missing = http.get("/models")

    assert plain.status_code == 200
    assert plain.headers["content-length"] == str(len(plain.content))
    assert plain.headers.get("connection") != "close"
    assert stream.headers["content-type"] == "text/event-stream"
    assert stream.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in stream.headers
    assert stream.text.endswith("data: [DONE]\n\n")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "unknown_url"
    assert provider.received()[1].headers["transfer-encoding"] == "chunked"
    assert provider.received()[1].body["stream"] is True
