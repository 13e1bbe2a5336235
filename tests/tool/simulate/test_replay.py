"""The replay client against a real local HTTP/1.1 server streaming like an OpenAI one, the stream reader's timing
on a clock the test sets, and the summary's arithmetic.

The server (:class:`Server`) is a hand-written ``asyncio.start_server`` on 127.0.0.1 sharing the test's event loop, so
its readings of the loop's clock and the replay's are one clock: a request read at server time ``S`` was sent no later
than ``S``, and a chunk written at ``W`` arrives no earlier than ``W``. Orderings are forced with events, never with
sleeps; the only waits are the served stream's own delays, whose bounds are asserted as "not before".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.tool.simulate.replay import (
    ChatStream,
    Outcome,
    completions_url,
    percentile,
    replay,
    request_body,
    summarize,
)
from inferplane.tool.simulate.workload import WorkloadRequest

HANG_GUARD_S = 60
"""Fails a test that would otherwise hang (a replay that never returns); no passing run comes near it."""


@dataclass
class Received:
    """One request the server read, and when (the loop's clock)."""

    at: float
    method: str
    target: str
    headers: dict[str, str]
    body: dict[str, Any]


Handler = Callable[[Received, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A minimal HTTP/1.1 server: one request a connection, answered by ``handler``, then the connection closed (the
    response is close-delimited: no length needed for a stream)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.received: list[Received] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method, target, _ = (await reader.readline()).decode().split(" ", 2)
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = json.loads(await reader.readexactly(int(headers["content-length"])))
        received = Received(asyncio.get_running_loop().time(), method, target, headers, body)
        self.received.append(received)
        try:
            await self.handler(received, writer)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def _chunk(content: str | None = None, *, role: bool = False, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A chat.completion.chunk as vLLM and Dynamo stream it."""
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
    if content is not None:
        delta["content"] = content
    choices = [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": None}]
    chunk: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", "choices": choices}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


async def _wait_until(since: float, delay: float) -> None:
    """Until the loop's clock reads ``delay`` past ``since`` (compared as a difference, as the client measures)."""
    loop = asyncio.get_running_loop()
    while (remaining := delay - (loop.time() - since)) > 0:
        await asyncio.sleep(remaining)


async def _stream(
    writer: asyncio.StreamWriter,
    chunks: Sequence[dict[str, Any]],
    *,
    before: Callable[[int], Awaitable[None]] | None = None,
    done: bool = True,
) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    await writer.drain()
    for index, chunk in enumerate(chunks):
        if before is not None:
            await before(index)
        writer.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await writer.drain()
    if done:
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()


def _run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    async def guarded() -> Any:
        async with asyncio.timeout(HANG_GUARD_S):
            return await coroutine

    return asyncio.run(guarded())


def _request(arrival: float = 0.0, *, group: str | None = None, output: int = 3) -> WorkloadRequest:
    return WorkloadRequest(arrival_s=arrival, prompt="w1 w2 w3", output_tokens=output, group=group)


# --- the stream reader, on a clock the test sets -----------------------------------------------------------------


def test_the_stream_reader_times_each_content_chunk_exactly() -> None:
    stream = ChatStream(sent=10.0)
    lines = [
        (": keep-alive comment", 10.1),
        ("data: " + json.dumps(_chunk(role=True)), 10.25),  # the role, no token yet
        ("", 10.25),
        ("data: " + json.dumps(_chunk("w5")), 10.5),
        ("event: message", 10.5),
        ("data:" + json.dumps(_chunk(" w9")), 10.75),  # "data:" without the space is SSE too
        ("data: " + json.dumps(_chunk("")), 10.8),  # an empty delta is not a token
        ("data: " + json.dumps({"choices": [{"delta": {"reasoning_content": "x"}}]}) + "\r", 11.5),
        ("data: " + json.dumps(_chunk(usage=_usage(prompt=40, completion=3, cached=32))), 11.6),
    ]
    assert not any(stream.feed(line, at) for line, at in lines)
    assert stream.feed("data: [DONE]", 11.7)
    outcome = stream.outcome(status=200, start=9.0, finished=12.0, group="g1")
    assert outcome == Outcome(
        status=200,
        sent_s=1.0,
        ttft_s=0.5,
        itl_s=(0.25, 0.75),
        last_token_s=2.5,
        finished_s=3.0,
        output_tokens=3,
        prompt_tokens=40,
        cached_tokens=32,
        error=None,
        group="g1",
    )
    assert outcome.ok


def test_without_usage_the_chunks_are_counted_and_nothing_is_cached() -> None:
    stream = ChatStream(sent=0.0)
    for at, content in ((1.0, "a"), (2.0, "b")):
        stream.feed("data: " + json.dumps(_chunk(content)), at)
    stream.feed("data: " + json.dumps(_chunk(usage={"prompt_tokens": 7})), 2.0)
    stream.feed("data: [DONE]", 2.0)
    outcome = stream.outcome(status=200, start=0.0, finished=2.0, group=None)
    assert (outcome.output_tokens, outcome.prompt_tokens, outcome.cached_tokens) == (2, 7, 0)
    assert (outcome.ttft_s, outcome.itl_s) == (1.0, (1.0,))


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("data: {not json", "malformed stream data (Expecting property name enclosed in double quotes): {not json"),
        ("data: [1, 2]", "malformed stream data (not an object): [1, 2]"),
        (
            'data: {"error": {"message": "engine died", "code": 500}}',
            "the server streamed an error: engine died",
        ),
        ('data: {"error": "overloaded"}', "the server streamed an error: overloaded"),
    ],
)
def test_a_broken_stream_ends_with_its_reason(line: str, error: str) -> None:
    stream = ChatStream(sent=0.0)
    stream.feed("data: " + json.dumps(_chunk("a")), 1.0)
    assert stream.feed(line, 2.0)
    outcome = stream.outcome(status=200, start=0.0, finished=2.0, group=None)
    assert outcome.error == error and outcome.output_tokens == 1 and not outcome.ok


def test_a_stream_cut_before_done_is_an_error() -> None:
    stream = ChatStream(sent=0.0)
    stream.feed("data: " + json.dumps(_chunk("a")), 1.0)
    outcome = stream.outcome(status=200, start=0.0, finished=1.0, group=None)
    assert outcome.error == "the stream ended before data: [DONE]" and not outcome.ok


# --- the request -------------------------------------------------------------------------------------------------


def test_the_url_is_the_servers_chat_completions_from_its_root_or_its_v1() -> None:
    for base in ("http://h:8080", "http://h:8080/", "http://h:8080/v1", "http://h:8080/v1/"):
        assert completions_url(base) == "http://h:8080/v1/chat/completions"
    assert completions_url("https://gw.example/prefix") == "https://gw.example/prefix/v1/chat/completions"
    for bad in ("h:8080", "ftp://h/", "http://", "/v1"):
        with pytest.raises(ValueError, match=r"^base_url: .* is not an http:// or https:// URL with a host$"):
            completions_url(bad)


def test_the_body_streams_exactly_the_output_tokens_with_usage() -> None:
    request = WorkloadRequest(arrival_s=0, token_ids=(4, 0, 29999), output_tokens=17)
    assert request_body(request, "m") == {
        "model": "m",
        "messages": [{"role": "user", "content": "w4 w0 w29999"}],
        "max_tokens": 17,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


# --- against a real server ---------------------------------------------------------------------------------------


def test_a_streamed_completion_is_sent_as_specified_and_read_back() -> None:
    first_token_delay, gap = 0.02, 0.01
    written: list[float] = []

    async def handler(received: Received, writer: asyncio.StreamWriter) -> None:
        async def before(index: int) -> None:
            if index == 1:
                await _wait_until(received.at, first_token_delay)
            elif index in (2, 3):
                await _wait_until(written[-1], gap)
            written.append(asyncio.get_running_loop().time())

        content = [_chunk(role=True), _chunk("w1"), _chunk(" w2"), _chunk(" w3"), _chunk()]
        await _stream(writer, [*content, _chunk(usage=_usage(prompt=100, completion=3, cached=64))], before=before)

    async def run() -> tuple[Server, tuple[Outcome, ...]]:
        async with Server(handler) as server:
            requests = [
                WorkloadRequest(arrival_s=0, prompt="w1 w2", output_tokens=3, group="g0"),
                WorkloadRequest(arrival_s=0, token_ids=(7, 8), output_tokens=3),
            ]
            outcomes = await replay(
                requests[:1], base_url=server.url + "/v1", model="sim", api_key="secret", headers={"x-extra": "1"}
            )
            outcomes += await replay(requests[1:], base_url=server.url, model="sim", api_key=None)
            return server, outcomes

    server, (with_key, without_key) = _run(run())
    first, second = server.received
    assert (first.method, first.target) == ("POST", "/v1/chat/completions")
    assert first.headers["authorization"] == "Bearer secret" and "authorization" not in second.headers
    assert first.headers["x-extra"] == "1" and "x-extra" not in second.headers
    assert first.headers["content-type"] == "application/json"
    assert first.body == {
        "model": "sim",
        "messages": [{"role": "user", "content": "w1 w2"}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    assert second.body["messages"] == [{"role": "user", "content": "w7 w8"}]
    for outcome, group in ((with_key, "g0"), (without_key, None)):
        assert outcome.ok and outcome.status == 200 and outcome.group == group
        assert (outcome.output_tokens, outcome.prompt_tokens, outcome.cached_tokens) == (3, 100, 64)
        assert len(outcome.itl_s) == 2 and all(gap >= 0 for gap in outcome.itl_s)
        # Sent no later than the server read it, the first token read no earlier than it was written.
        assert outcome.ttft_s is not None and outcome.ttft_s >= first_token_delay
        assert outcome.last_token_s is not None and outcome.sent_s <= outcome.last_token_s <= outcome.finished_s


def test_a_refusal_keeps_its_status_and_the_start_of_its_body() -> None:
    reason = "too many requests in flight for this model; " * 10

    async def handler(received: Received, writer: asyncio.StreamWriter) -> None:
        if received.body["max_tokens"] == 1:
            body = reason.encode()
            writer.write(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\n")
            writer.write(f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        elif received.body["max_tokens"] == 2:
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        else:  # two tokens, then the connection drops
            await _stream(writer, [_chunk("a"), _chunk("b")], done=False)

    async def run() -> tuple[Outcome, ...]:
        async with Server(handler) as server:
            requests = [_request(output=1), _request(output=2), _request(output=3)]
            return await replay(requests, base_url=server.url, model="m", api_key=None)

    refused, unavailable, cut = _run(run())
    assert (refused.status, refused.error, refused.ttft_s, refused.output_tokens) == (429, reason[:200], None, 0)
    assert (unavailable.status, unavailable.error) == (503, "HTTP 503 with an empty body")
    assert (cut.status, cut.error, cut.output_tokens) == (200, "the stream ended before data: [DONE]", 2)
    summary = summarize([refused, unavailable, cut])
    assert (summary.requests, summary.ok, summary.rejected_429, summary.errors) == (3, 0, 1, 2)


def test_a_refused_connection_is_status_zero() -> None:
    # Bound but never listening: a connection to it is refused at once, and no other process can take the port.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{holder.getsockname()[1]}"
        (outcome,) = _run(replay([_request(group="g2")], base_url=url, model="m", api_key=None))
    assert outcome.status == 0 and outcome.group == "g2" and not outcome.ok
    assert outcome.error is not None and outcome.error.startswith("ConnectError")
    assert (outcome.ttft_s, outcome.itl_s, outcome.output_tokens) == (None, (), 0)


@pytest.mark.parametrize("time_scale", [1.0, 2.0, 0.5])
def test_no_request_is_sent_before_its_arrival(time_scale: float) -> None:
    arrivals = (0.0, 0.01, 0.01, 0.03, 0.05)

    async def handler(received: Received, writer: asyncio.StreamWriter) -> None:
        await _stream(writer, [_chunk("a"), _chunk(usage=_usage(1, 1, 0))])

    async def run() -> tuple[Server, tuple[Outcome, ...]]:
        async with Server(handler) as server:
            requests = [_request(arrival, group=str(n), output=n + 1) for n, arrival in enumerate(arrivals)]
            outcomes = await replay(requests, base_url=server.url, model="m", api_key=None, time_scale=time_scale)
            return server, outcomes

    server, outcomes = _run(run())
    assert [o.group for o in outcomes] == ["0", "1", "2", "3", "4"]  # request order, whatever the completion order
    assert all(o.ok for o in outcomes)
    assert all(o.sent_s >= arrival * time_scale for o, arrival in zip(outcomes, arrivals, strict=True))
    # The server read the requests of distinct arrivals in their order (max_tokens names each request).
    read = [r.body["max_tokens"] - 1 for r in server.received]
    assert sorted(read) == [0, 1, 2, 3, 4]
    assert [arrivals[n] for n in read] == sorted(arrivals)


def test_a_slow_response_never_delays_a_later_send() -> None:
    """The first request's response waits until the second, arriving later, has been answered in full: a replay that
    waited on the first before sending the second would hang (and meet the guard)."""
    second_done = asyncio.Event()
    finished: list[str | None] = []

    async def handler(received: Received, writer: asyncio.StreamWriter) -> None:
        if received.body["max_tokens"] == 1:
            await second_done.wait()
            await _stream(writer, [_chunk("slow")])
        else:
            await _stream(writer, [_chunk("fast")])
            second_done.set()

    async def run() -> tuple[Outcome, ...]:
        async with Server(handler) as server:
            requests = [_request(0.0, group="slow", output=1), _request(0.01, group="fast", output=2)]
            return await replay(
                requests, base_url=server.url, model="m", api_key=None, on_done=lambda o: finished.append(o.group)
            )

    slow, fast = _run(run())
    assert (slow.group, fast.group) == ("slow", "fast") and slow.ok and fast.ok
    assert finished == ["fast", "slow"]
    assert fast.sent_s >= 0.01 and slow.finished_s >= fast.finished_s


def test_a_negative_or_infinite_time_scale_is_refused() -> None:
    for scale in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"^time_scale: must be a finite number >= 0, got "):
            _run(replay([_request()], base_url="http://127.0.0.1:1", model="m", api_key=None, time_scale=scale))


# --- the summary -------------------------------------------------------------------------------------------------


def _outcome(**fields: Any) -> Outcome:
    base: dict[str, Any] = {
        "status": 200,
        "sent_s": 0.0,
        "ttft_s": None,
        "itl_s": (),
        "last_token_s": None,
        "finished_s": 0.0,
        "output_tokens": 0,
        "prompt_tokens": 0,
        "cached_tokens": 0,
        "error": None,
        "group": None,
    }
    return Outcome(**{**base, **fields})


def test_the_summary_counts_and_ranks_only_the_completed_requests() -> None:
    outcomes = [
        _outcome(
            sent_s=1.0,
            ttft_s=0.5,
            itl_s=(0.25, 0.25),
            last_token_s=2.0,
            finished_s=2.0,
            output_tokens=3,
            prompt_tokens=100,
            cached_tokens=50,
        ),
        _outcome(
            sent_s=2.0,
            ttft_s=1.5,
            itl_s=(0.5,),
            last_token_s=5.0,
            finished_s=5.5,
            output_tokens=2,
            prompt_tokens=100,
            cached_tokens=0,
        ),
        _outcome(status=429, sent_s=3.0, finished_s=3.0, error="busy"),
        _outcome(status=0, sent_s=4.0, finished_s=7.0, error="ConnectError"),
        _outcome(sent_s=4.5, ttft_s=9.0, last_token_s=6.0, finished_s=6.0, output_tokens=9, prompt_tokens=5, error="x"),
    ]
    summary = summarize(outcomes)
    assert summary.model_dump() == {
        "requests": 5,
        "ok": 2,
        "rejected_429": 1,
        "errors": 2,
        "ttft_p50_s": 0.5,
        "ttft_p90_s": 1.5,
        "ttft_p99_s": 1.5,
        "itl_p50_s": 0.25,
        "itl_p90_s": 0.5,
        "itl_p99_s": 0.5,
        "output_tokens": 5,
        "prompt_tokens": 200,
        "cached_tokens": 50,
        "output_tokens_per_second": 5 / 4.0,  # from the first send (1.0) to the last ok token (5.0)
        "hit_share": 0.25,
        "duration_s": 6.0,  # from the first send to the last end (the refused connection's, at 7.0)
    }


def test_a_summary_of_nothing_completed_has_no_latencies() -> None:
    summary = summarize([_outcome(status=429, sent_s=1.0, finished_s=1.5, error="busy")])
    assert (summary.ok, summary.rejected_429, summary.duration_s) == (0, 1, 0.5)
    assert summary.ttft_p50_s is summary.itl_p99_s is summary.output_tokens_per_second is summary.hit_share is None
    empty = summarize([])
    assert (empty.requests, empty.duration_s, empty.ttft_p90_s) == (0, 0.0, None)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in (7, 1, 10, 3, 2, 9, 4, 8, 6, 5)]
    assert [percentile(values, q) for q in (0, 10, 50, 51, 90, 99, 100)] == [1, 1, 5, 6, 9, 10, 10]
    assert percentile([float(v) for v in range(1, 1001)], 99.9) == 999  # 99.9% of 1000 is 999 exactly
    with pytest.raises(ValueError, match=r"^percentile: no values$"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"^percentile: q must be in 0 \.\.\. 100, got 101$"):
        percentile([1.0], 101)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), q=st.integers(1, 100))
def test_a_percentile_is_the_least_value_with_q_percent_at_or_below(values: list[float], q: int) -> None:
    found = percentile(values, q)
    assert found in values
    assert 100 * sum(v <= found for v in values) >= q * len(values)
    assert 100 * sum(v < found for v in values) < q * len(values)
