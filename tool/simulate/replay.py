"""The load generator of ``inferplane simulate``: replay a workload against an OpenAI-compatible server, on time, and
summarize what came back.

:func:`replay` sends each request of a workload at its arrival time (an open loop: a slow response never delays the
next send), streams the chat completion and records an :class:`Outcome`: HTTP status, time to first token, the gaps
between tokens, and the usage the server reports, cached prompt tokens included. :func:`summarize` reduces the
outcomes to a :class:`Summary` (counts, percentiles, throughput, the cache's hit share).

Owns the HTTP side of a simulation (httpx, the SSE stream, timing on the event loop's clock). May import
:mod:`inferplane.tool.simulate.workload`; nothing of the Pulumi components, nor the fleet: it only knows a base URL.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from itertools import pairwise
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from inferplane.tool.simulate.workload import WorkloadRequest, words

CONNECT_TIMEOUT_S = 30.0
"""How long a connection may take to open: far above a loaded local machine's worst; a server that is down refuses at
once, so only an unreachable address waits this long."""

READ_TIMEOUT_S = 600.0
"""The longest silence between two bytes of a response: a request queued behind a saturated fleet may wait minutes
for its first token, and a replay measures that wait rather than cutting it short."""

ERROR_BODY_CHARS = 200
"""How much of a refused request's body is kept as its error: enough for a gateway's or engine's one-line reason."""


class Outcome(BaseModel):
    """What one request of a replay got. Times are seconds on the event loop's clock, from the replay's start (``_s``
    fields ending a point in time) or between two events (``ttft_s``, ``itl_s``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: int = Field(description="The HTTP status; 0 when no response came (the connection failed or timed out).")
    sent_s: float = Field(description="When the request was sent, from the replay's start.")
    ttft_s: float | None = Field(
        description="From the send to the first streamed content token; None when no token came."
    )
    itl_s: tuple[float, ...] = Field(
        description="The gaps between successive content chunks (one fewer than the chunks)."
    )
    last_token_s: float | None = Field(
        description="When the last content chunk came, from the replay's start; None when no token came."
    )
    finished_s: float = Field(description="When the response ended (or failed), from the replay's start.")
    output_tokens: int = Field(
        description="Tokens generated: the usage's completion_tokens where reported, else the content chunks counted."
    )
    prompt_tokens: int = Field(description="The usage's prompt_tokens; 0 when the server reported no usage.")
    cached_tokens: int = Field(
        description="The usage's prompt_tokens_details.cached_tokens: prompt tokens served from the prefix cache; 0 "
        "when absent."
    )
    error: str | None = Field(
        description="Why the request failed: the body's first 200 characters for a non-200 status, or the connection "
        "or stream error; None for a complete stream."
    )
    group: str | None = Field(description="The workload request's group (prefix group or session), carried through.")

    @property
    def ok(self) -> bool:
        """A 2xx response whose stream completed."""
        return 200 <= self.status < 300 and self.error is None


class ChatStream:
    """The reader of one streamed chat completion (OpenAI's server-sent events), fed line by line with the time each
    line arrived: kept apart from the HTTP so its timing is exact for any clock.

    A content token is a chunk whose first choice's ``delta`` carries non-empty ``content`` (or ``reasoning_content``,
    which a reasoning model streams first); the role-only first chunk and the usage chunk are not tokens. ``data:
    [DONE]`` ends the stream; a line that is not ``data:`` (a comment, ``event:``, ``id:``) is skipped.
    """

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.token_times: list[float] = []
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None
        self.done = False

    def feed(self, line: str, at: float) -> bool:
        """Read one line that arrived at ``at``; True once the stream has ended (``[DONE]`` or an error)."""
        line = line.rstrip("\r\n")
        if not line.startswith("data:"):
            return False
        data = line[5:].removeprefix(" ")
        if data == "[DONE]":
            self.done = True
            return True
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            return self._fail(f"malformed stream data ({exc.msg}): {data[:ERROR_BODY_CHARS]}")
        if not isinstance(chunk, dict):
            return self._fail(f"malformed stream data (not an object): {data[:ERROR_BODY_CHARS]}")
        if chunk.get("error") is not None:  # vLLM and Dynamo stream a failure mid-response this way
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else None
            return self._fail(f"the server streamed an error: {message or error}"[:ERROR_BODY_CHARS])
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            delta = choices[0].get("delta")
            if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")):
                self.token_times.append(at)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        return False

    def _fail(self, error: str) -> bool:
        self.error = error
        return True

    def usage_count(self, name: str) -> int | None:
        """A count of the reported usage (``completion_tokens``), or None where not reported as an integer."""
        value = (self.usage or {}).get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def cached_tokens(self) -> int:
        """``usage.prompt_tokens_details.cached_tokens``, 0 where absent."""
        details = (self.usage or {}).get("prompt_tokens_details")
        value = details.get("cached_tokens") if isinstance(details, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def outcome(self, *, status: int, start: float, finished: float, group: str | None) -> Outcome:
        """The outcome of the stream read so far, times taken from ``start``; a stream that ended without ``[DONE]``
        or an error is an error (cut short)."""
        times = self.token_times
        completion = self.usage_count("completion_tokens")
        error = self.error
        if error is None and not self.done:
            error = "the stream ended before data: [DONE]"
        return Outcome(
            status=status,
            sent_s=self.sent - start,
            ttft_s=times[0] - self.sent if times else None,
            itl_s=tuple(later - earlier for earlier, later in pairwise(times)),
            last_token_s=times[-1] - start if times else None,
            finished_s=finished - start,
            output_tokens=completion if completion is not None else len(times),
            prompt_tokens=self.usage_count("prompt_tokens") or 0,
            cached_tokens=self.cached_tokens(),
            error=error,
            group=group,
        )


def completions_url(base_url: str) -> str:
    """The chat-completions URL of a server at ``base_url``: its root (``http://127.0.0.1:8080``) or, as the OpenAI
    clients take it, its ``/v1`` (``http://127.0.0.1:8080/v1``); either gets ``/v1/chat/completions``."""
    url = httpx.URL(base_url)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"base_url: {base_url!r} is not an http:// or https:// URL with a host")
    root = base_url.rstrip("/").removesuffix("/v1")
    return f"{root}/v1/chat/completions"


def request_body(request: WorkloadRequest, model: str) -> dict[str, Any]:
    """The chat-completions body for ``request``: one user message, exactly ``output_tokens`` streamed tokens
    (``ignore_eos``: a simulated or real engine would otherwise stop at a sampled end of sequence), usage in the last
    chunk (where the cached tokens are reported)."""
    prompt = request.prompt if request.prompt is not None else words(request.token_ids or ())
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": request.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


async def _until(loop: asyncio.AbstractEventLoop, start: float, offset: float) -> None:
    # A timer may fire up to the clock's resolution early (asyncio counts a handle due within it): sleep again until
    # the loop's clock has truly passed the offset. Compared as `now - start`, the very subtraction an outcome's
    # sent_s is, so sent_s >= offset holds exactly, not to within a rounding of start + offset.
    while (remaining := offset - (loop.time() - start)) > 0:
        await asyncio.sleep(remaining)


async def _send(client: httpx.AsyncClient, url: str, request: WorkloadRequest, model: str, start: float) -> Outcome:
    loop = asyncio.get_running_loop()
    stream = ChatStream(loop.time())
    status = 0
    try:
        async with client.stream("POST", url, json=request_body(request, model)) as response:
            status = response.status_code
            if status != 200:
                body = ""
                async for text in response.aiter_text():
                    body += text
                    if len(body) >= ERROR_BODY_CHARS:
                        break
                stream.error = body[:ERROR_BODY_CHARS] or f"HTTP {status} with an empty body"
            else:
                async for line in response.aiter_lines():
                    if stream.feed(line, loop.time()):
                        break
    except httpx.HTTPError as exc:  # refused, reset, timed out, or a protocol error mid-stream
        reason = str(exc)
        stream.error = (f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__)[:ERROR_BODY_CHARS]
    return stream.outcome(status=status, start=start, finished=loop.time(), group=request.group)


async def replay(
    requests: Sequence[WorkloadRequest],
    *,
    base_url: str,
    model: str,
    api_key: str | None,
    on_done: Callable[[Outcome], None] | None = None,
    time_scale: float = 1.0,
    headers: Mapping[str, str] | None = None,
) -> tuple[Outcome, ...]:
    """Send every request at ``start + arrival_s x time_scale`` on the event loop's clock and return the outcomes in
    request order.

    ``time_scale`` stretches the workload's timeline (0.5 replays it twice as fast; 0 sends everything at once).
    ``on_done`` is called with each outcome as its response ends, in completion order (for a progress display).
    ``headers`` go with every request (a gateway's cache bypass), and ``Authorization: Bearer <api_key>`` where a key
    is given. One httpx client serves the replay, its pool unbounded so a send never waits for another request's
    connection (that wait would be counted as the server's time to first token). A response's failure is its outcome;
    only a bug raises.
    """
    if not (math.isfinite(time_scale) and time_scale >= 0):
        raise ValueError(f"time_scale: must be a finite number >= 0, got {time_scale}")
    url = completions_url(base_url)
    sent_headers = {**(headers or {}), **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S, pool=None)
    loop = asyncio.get_running_loop()
    outcomes: list[Outcome | None] = [None] * len(requests)

    async def send(index: int, request: WorkloadRequest, start: float) -> None:
        outcome = await _send(client, url, request, model, start)
        outcomes[index] = outcome
        if on_done is not None:
            on_done(outcome)

    async with httpx.AsyncClient(headers=sent_headers, limits=limits, timeout=timeout) as client:
        start = loop.time()
        async with asyncio.TaskGroup() as tasks:
            # One task per request, created at its arrival: the dispatcher never waits on a response.
            for index, request in enumerate(requests):
                await _until(loop, start, request.arrival_s * time_scale)
                tasks.create_task(send(index, request, start))
    done = tuple(outcome for outcome in outcomes if outcome is not None)
    assert len(done) == len(requests)  # every task set its outcome, or the task group raised
    return done


# --- the summary -------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``q`` percent of ``values`` at or below it
    (``q`` in 0 ... 100; 0 gives the least). Always one of the values, never an interpolation between two, so a p99
    is a latency some request really had. Raises ValueError for no values."""
    if not values:
        raise ValueError("percentile: no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile: q must be in 0 ... 100, got {q}")
    ordered = sorted(values)
    # Fraction(str(q)): 99.9 is 999/10 exactly, so a rank that is a whole number is not pushed up by binary rounding.
    rank = math.ceil(Fraction(str(q)) * len(ordered) / 100)
    return ordered[max(rank, 1) - 1]


class Summary(BaseModel):
    """A replay in numbers. Latencies are over the requests that completed (``ok``); percentiles are nearest-rank
    (:func:`percentile`), None where there is nothing to rank."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int = Field(description="Requests sent.")
    ok: int = Field(description="Requests answered 2xx whose stream completed.")
    rejected_429: int = Field(description="Requests refused with 429 (the gateway's or engine's admission limit).")
    errors: int = Field(description="Every other failure: another status, no connection (0), a stream cut short.")
    ttft_p50_s: float | None = Field(description="Median time to first token of the ok requests, seconds.")
    ttft_p90_s: float | None = Field(description="90th percentile time to first token, seconds.")
    ttft_p99_s: float | None = Field(description="99th percentile time to first token, seconds.")
    itl_p50_s: float | None = Field(description="Median gap between tokens, over every gap of the ok requests.")
    itl_p90_s: float | None = Field(description="90th percentile gap between tokens, seconds.")
    itl_p99_s: float | None = Field(description="99th percentile gap between tokens, seconds.")
    output_tokens: int = Field(description="Tokens generated by the ok requests.")
    prompt_tokens: int = Field(description="Prompt tokens of the ok requests, as their usage reported.")
    cached_tokens: int = Field(description="Of those, the tokens served from the prefix cache.")
    output_tokens_per_second: float | None = Field(
        description="Output tokens of the ok requests over the time from the first send to the last token; None "
        "when no token came."
    )
    hit_share: float | None = Field(
        description="cached_tokens / prompt_tokens over the ok requests; None when they reported no prompt tokens."
    )
    duration_s: float = Field(description="From the first send to the last response's end, seconds; 0 for none.")


def summarize(outcomes: Sequence[Outcome]) -> Summary:
    """The :class:`Summary` of a replay's outcomes."""
    ok = [outcome for outcome in outcomes if outcome.ok]
    rejected = sum(1 for outcome in outcomes if outcome.status == 429)
    ttfts = [outcome.ttft_s for outcome in ok if outcome.ttft_s is not None]
    gaps = [gap for outcome in ok for gap in outcome.itl_s]

    def ranked(values: list[float], q: float) -> float | None:
        return percentile(values, q) if values else None

    output = sum(outcome.output_tokens for outcome in ok)
    prompt = sum(outcome.prompt_tokens for outcome in ok)
    cached = sum(outcome.cached_tokens for outcome in ok)
    first_send = min((outcome.sent_s for outcome in outcomes), default=0.0)
    last_token = max((outcome.last_token_s for outcome in ok if outcome.last_token_s is not None), default=None)
    span = last_token - first_send if last_token is not None else 0.0
    return Summary(
        requests=len(outcomes),
        ok=len(ok),
        rejected_429=rejected,
        errors=len(outcomes) - len(ok) - rejected,
        ttft_p50_s=ranked(ttfts, 50),
        ttft_p90_s=ranked(ttfts, 90),
        ttft_p99_s=ranked(ttfts, 99),
        itl_p50_s=ranked(gaps, 50),
        itl_p90_s=ranked(gaps, 90),
        itl_p99_s=ranked(gaps, 99),
        output_tokens=output,
        prompt_tokens=prompt,
        cached_tokens=cached,
        output_tokens_per_second=output / span if span > 0 else None,
        hit_share=cached / prompt if prompt else None,
        duration_s=max((outcome.finished_s for outcome in outcomes), default=first_send) - first_send,
    )
