"""The processor's decisions, driven message by message as Envoy drives them, with a real Redis 8.2 and a real
tokenizer (``tokenizers``, built by the test): context admission, reroute, clamping, budgets, the KV gate, the
scale-from-zero hold and token accounting."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from inferplane.processor import admission, ext_proc
from inferplane.processor import metrics as gm
from inferplane.processor.admission import Hold, ModelGate, Turn
from inferplane.processor.config import (
    ATTRIBUTES_NAMESPACE,
    SETTLE_METADATA_NAMESPACE,
    STATUS_ATTRIBUTE,
    USAGE_COMPLETION_KEY,
    USAGE_ENDED_KEY,
    USAGE_METADATA_NAMESPACE,
    USAGE_PROMPT_KEY,
    USAGE_STREAM_KEY,
    ModelConfig,
    ProcessorConfig,
    TenantConfig,
    TierConfig,
)
from inferplane.processor.endpoints import Endpoint
from inferplane.processor.ext_proc import FALLBACK_ALTERNATES, MAX_ALTERNATES, Placement, Processor
from inferplane.processor.redis_connection import connect_redis
from inferplane.processor.slots import Slot, SlotStore
from tests.gateway_support import model_config, routing_config, until, vllm_load
from tests.ports import free_port
from tests.tiny_model import words

OVERHEAD = 8


def _model(name: str, tokenizer: str | None, **overrides: Any) -> ModelConfig:
    fields: dict[str, Any] = {
        "max_model_len": 1024,
        "fallback_share": 4,
        "queue_max": 2,
        "tokenizer_path": tokenizer,
        "routing": routing_config(load=vllm_load(kv_usage=False)),
    }
    return model_config(name, (f"127.0.0.1:{free_port()}",), **{**fields, **overrides})


def _config(tokenizer: str | None, *models: ModelConfig, **tenant: Any) -> ProcessorConfig:
    models = models or (_model("short", tokenizer),)
    tiers: dict[str, list[str]] = {}
    for model in models:
        tiers.setdefault(model.tier, []).append(model.name)
    limits = {"requests_per_minute": 100, "tokens_per_minute": 100_000, **tenant}
    return ProcessorConfig(
        grpc_port=1,
        metrics_port=2,
        tenant_header="x-inferplane-tenant",
        auth_required=True,
        redis_url_env="UNUSED",
        redis_key_prefix=f"test:{free_port()}:",
        chat_message_overhead_tokens=OVERHEAD,
        models=models,
        tiers=tuple(TierConfig(name=t, models=tuple(ms)) for t, ms in tiers.items()),
        tenants=(TenantConfig(name="t", tiers=tuple(tiers), **limits),),
    )


def _headers(path: str = "/v1/chat/completions", method: str = "POST", tenant: str | None = "t") -> Any:
    values = {":path": path, ":method": method, **({"x-inferplane-tenant": tenant} if tenant else {})}
    header_map = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
    )
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=header_map, end_of_stream=method == "GET"))


def _body(payload: dict[str, Any]) -> Any:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=json.dumps(payload).encode(), end_of_stream=True))


def _observed(forwarded: Any, chunk: bytes, end: bool, status: int | None = None) -> Any:
    """A response chunk as the observing filter sends it: one way, with the settlement the placing stream handed on
    in ``forwarded``'s dynamic metadata (and the response's status as an attribute, where given)."""
    message = pb.ProcessingRequest(response_body=pb.HttpBody(body=chunk, end_of_stream=end), observability_mode=True)
    namespaces = forwarded.dynamic_metadata.fields
    if SETTLE_METADATA_NAMESPACE in namespaces:
        message.metadata_context.filter_metadata[SETTLE_METADATA_NAMESPACE].CopyFrom(
            namespaces[SETTLE_METADATA_NAMESPACE].struct_value
        )
    if status is not None:
        message.attributes[ATTRIBUTES_NAMESPACE].update({STATUS_ATTRIBUTE: status})
    return message


def _logged(
    forwarded: Any,
    *,
    status: int = 200,
    usage: tuple[int, int] | None = None,
    stream: bool = False,
    ended: bool = True,
) -> Any:
    """The access log entry Envoy sends for the request ``forwarded`` answered: the settlement the placing stream
    handed on in its dynamic metadata, and what the Lua filter read of the response (``usage``, whether it was an
    event stream, whether it ended), as the rendered filter records them."""
    entry = accesslog_pb2.HTTPAccessLogEntry()
    entry.response.response_code.value = status
    namespaces = forwarded.dynamic_metadata.fields
    metadata = entry.common_properties.metadata.filter_metadata
    if SETTLE_METADATA_NAMESPACE in namespaces:
        metadata[SETTLE_METADATA_NAMESPACE].CopyFrom(namespaces[SETTLE_METADATA_NAMESPACE].struct_value)
    read: dict[str, Any] = {}
    if usage is not None:
        read[USAGE_PROMPT_KEY], read[USAGE_COMPLETION_KEY] = usage
    if stream:
        read[USAGE_STREAM_KEY] = True
    if ended:
        read[USAGE_ENDED_KEY] = True
    if read:
        metadata[USAGE_METADATA_NAMESPACE].update(read)
    return entry


def settle(processor: Processor, forwarded: Any, **read: Any) -> None:
    """Settle the request ``forwarded`` answered from its access log entry (:func:`_logged`'s ``read``)."""
    processor.settle([_logged(forwarded, **read)])


async def _messages_of(messages: Iterable[Any]) -> AsyncIterator[Any]:
    for message in messages:
        yield message


async def observe(
    processor: Processor, forwarded: Any, chunks: Sequence[tuple[bytes, bool]], status: int | None = None
) -> None:
    """Run the observing stream of the request ``forwarded`` answered: ``chunks`` one way, nothing answered."""
    messages = [_observed(forwarded, chunk, end, status if i == 0 else None) for i, (chunk, end) in enumerate(chunks)]
    assert [reply async for reply in processor.process(_messages_of(messages))] == []


class Stream:
    """One ext_proc stream kept open: send a message, read the processor's answer."""

    def __init__(self, processor: Processor) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._responses = processor.process(self._messages())

    async def _messages(self) -> AsyncIterator[Any]:
        while (message := await self._queue.get()) is not None:
            yield message

    async def send(self, message: Any) -> Any:
        await self._queue.put(message)
        return await anext(self._responses)

    async def close(self) -> None:
        await self._queue.put(None)
        with pytest.raises(StopAsyncIteration):
            await anext(self._responses)


def _processor(config: ProcessorConfig, redis_port: int | None = None) -> Processor:
    redis = connect_redis(f"redis://127.0.0.1:{redis_port}/0", 0.5) if redis_port else None
    return Processor(config, redis, CollectorRegistry())


async def _request(processor: Processor, payload: dict[str, Any]) -> tuple[Stream, Any]:
    stream = Stream(processor)
    first = await stream.send(_headers())
    assert first.WhichOneof("response") == "request_headers"
    return stream, await stream.send(_body(payload))


def _status(response: Any) -> int:
    if response.WhichOneof("response") != "immediate_response":
        return 0
    code: int = response.immediate_response.status.code
    return code


def _error(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(response.immediate_response.body)["error"]
    return body


def _headers_of(response: Any) -> dict[str, str]:
    return {h.header.key: h.header.raw_value.decode() for h in response.immediate_response.headers.set_headers}


def _forwarded(response: Any) -> dict[str, Any]:
    assert response.WhichOneof("response") == "request_body", response
    body: dict[str, Any] = json.loads(response.request_body.response.body_mutation.body)
    return body


def _chat(content: str, model: str = "short", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def test_context_is_checked_with_the_models_tokenizer(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        fits = 1024 - OVERHEAD - 24
        _, response = await _request(processor, _chat(words(fits), max_tokens=24))
        assert _forwarded(response)["max_tokens"] == 24
        _, response = await _request(processor, _chat(words(fits), max_tokens=25))
        assert _status(response) == 400
        error = _error(response)
        assert (error["code"], error["type"], error["param"]) == (
            "context_length_exceeded",
            "invalid_request_error",
            "messages",
        )
        assert "maximum context length is 1024 tokens" in error["message"]

    asyncio.run(run())


@settings(max_examples=25, deadline=None)
@given(prompt=st.integers(min_value=0, max_value=1100), max_tokens=st.none() | st.integers(min_value=1, max_value=1100))
def test_admission_holds_exactly_the_context(tokenizer_file: str, prompt: int, max_tokens: int | None) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        extra: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
        _, response = await _request(processor, _chat(words(prompt), **extra))
        counted = prompt + OVERHEAD
        if counted + (max_tokens or 1) <= 1024:
            assert _forwarded(response)["max_tokens"] == (max_tokens or 1024 - counted)
        else:
            assert _error(response)["code"] == "context_length_exceeded"

    asyncio.run(run())


def test_longer_context_model_of_the_tier_takes_what_does_not_fit(tokenizer_file: str) -> None:
    async def run() -> None:
        long = _model("long", tokenizer_file, max_model_len=4096)
        short = _model("short", tokenizer_file, longer_context=("long",))
        processor = _processor(_config(tokenizer_file, short, long))
        _, response = await _request(processor, _chat(words(2000), max_tokens=100))
        assert _forwarded(response)["model"] == "long"
        _, response = await _request(processor, _chat(words(5000)))
        assert _error(response)["code"] == "context_length_exceeded"
        assert "4096" in _error(response)["message"]

    asyncio.run(run())


def test_tiers_models_and_streams(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        _, response = await _request(processor, _chat("w1", model="standard"))
        assert _forwarded(response)["model"] == "short"
        _, response = await _request(processor, _chat("w1", model="nope"))
        assert (_status(response), _error(response)["code"]) == (404, "model_not_found")
        _, response = await _request(processor, _chat("w1", stream=True, stream_options={"x": 1}))
        assert _forwarded(response)["stream_options"] == {"x": 1, "include_usage": True}
        _, response = await _request(processor, {"model": "short"})
        assert (_status(response), _error(response)["code"]) == (400, "bad_request")
        stream = Stream(processor)
        models = await stream.send(_headers("/v1/models", "GET"))
        assert [m["id"] for m in json.loads(models.immediate_response.body)["data"]] == ["short", "standard"]

    asyncio.run(run())


def _attributed_body(payload: dict[str, Any], tenant: str | None = "t") -> Any:
    """A request body as Envoy sends it without a headers message: path, method and headers as attributes."""
    message = _body(payload)
    fields = {"request.path": "/v1/chat/completions?trace=1", "request.method": "POST"}
    if tenant is not None:
        fields["request.headers['x-inferplane-tenant']"] = tenant
    message.attributes["envoy.filters.http.ext_proc"].update(fields)
    return message


def test_a_body_without_a_headers_message_reads_its_attributes(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        forwarded = await Stream(processor).send(_attributed_body(_chat("w1", model="standard")))
        assert _forwarded(forwarded)["model"] == "short"
        # Envoy held no headers for the processor: it drops the stale length itself and sends the new body chunked
        assert not forwarded.request_body.response.header_mutation.set_headers
        _, with_headers = await _request(processor, _chat("w1", model="standard"))
        [length] = with_headers.request_body.response.header_mutation.set_headers
        assert length.header.key == "content-length"
        assert int(length.header.raw_value) == len(with_headers.request_body.response.body_mutation.body)
        anonymous = await Stream(processor).send(_attributed_body(_chat("w1"), tenant=None))
        assert (_status(anonymous), _error(anonymous)["code"]) == (401, "invalid_api_key")
        stranger = await Stream(processor).send(_attributed_body(_chat("w1"), tenant="stranger"))
        assert (_status(stranger), _error(stranger)["code"]) == (403, "tier_forbidden")

    asyncio.run(run())


def test_unknown_tenant_is_forbidden(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        stream = Stream(processor)
        await stream.send(_headers(tenant="stranger"))
        response = await stream.send(_body(_chat("w1")))
        assert (_status(response), _error(response)["code"]) == (403, "tier_forbidden")

    asyncio.run(run())


def test_request_and_token_budgets_in_redis(tokenizer_file: str, redis_port: int) -> None:
    async def run() -> None:
        config = _config(tokenizer_file, requests_per_minute=2, tokens_per_minute=100)
        processor = _processor(config, redis_port)
        for _ in range(2):
            _, response = await _request(processor, _chat("w1", max_tokens=5))
            _forwarded(response)
        _, response = await _request(processor, _chat("w1", max_tokens=5))
        assert _status(response) == 429
        assert _error(response)["type"] == "requests"
        assert 1 <= int(_headers_of(response)["retry-after"]) <= 60
        tokens = _processor(_config(tokenizer_file, tokens_per_minute=100), redis_port)
        _, response = await _request(tokens, _chat(words(60)))
        _forwarded(response)
        _, response = await _request(tokens, _chat(words(60)))
        assert (_status(response), _error(response)["type"]) == (429, "tokens")

    asyncio.run(run())


def test_redis_unreachable_fails_open(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file, requests_per_minute=1), free_port())
        for _ in range(3):
            _, response = await _request(processor, _chat("w1"))
            _forwarded(response)
        errors = processor.metrics.errors.labels("redis")._value.get()
        assert errors >= 3

    asyncio.run(run())


def _ready(processor: Processor, model: str, *addresses: str) -> None:
    """Make ``addresses`` the model's ready replicas, as a refresh that found them answering would."""
    table = processor.tables[model]
    table.apply(set(addresses))
    for address in addresses:
        table.endpoints[address].ready = True


def _destinations(response: Any) -> list[str]:
    """The replicas the processor told Envoy to use (the override_host metadata), the pick first; none: no pick."""
    metadata = response.dynamic_metadata
    if "envoy.lb" not in metadata.fields:
        return []
    listed: str = metadata.fields["envoy.lb"].struct_value.fields["x-gateway-destination-endpoint"].string_value
    return listed.split(",")


def _picked(response: Any) -> str | None:
    """The replica the processor told Envoy to use first, if any."""
    return next(iter(_destinations(response)), None)


def test_kv_gate_queues_briefly_then_refuses(tokenizer_file: str) -> None:
    async def run() -> None:
        model = _model(
            "short", tokenizer_file, max_num_seqs=1, fallback_share=1, queue_max=1, queue_timeout_seconds=0.3
        )
        processor = _processor(_config(tokenizer_file, model))
        _ready(processor, "short", "127.0.0.1:1")
        holder, response = await _request(processor, _chat("w1"))
        assert _picked(response) == "127.0.0.1:1"
        queued = asyncio.ensure_future(_request(processor, _chat("w1")))
        await asyncio.sleep(0.05)
        assert processor.metrics.pending.labels("short")._value.get() == 1
        _, refused = await _request(processor, _chat("w1"))  # the queue is full
        assert (_status(refused), _error(refused)["code"]) == (429, "capacity_exceeded")
        assert _headers_of(refused)["retry-after"] == "1"
        _, timed_out = await queued  # no slot within 0.3 s
        assert _status(timed_out) == 429
        waiter = asyncio.ensure_future(_request(processor, _chat("w1")))
        await asyncio.sleep(0.05)
        await holder.close()  # the slot passes to the waiter
        _, admitted = await waiter
        assert _picked(admitted) == "127.0.0.1:1"
        assert processor.metrics.inflight.labels("short")._value.get() == 1
        assert processor.metrics.pending.labels("short")._value.get() == 0

    asyncio.run(run())


def test_a_second_replica_doubles_the_cap_and_takes_the_spill(tokenizer_file: str) -> None:
    async def run() -> None:
        model = _model("short", tokenizer_file, max_num_seqs=1, fallback_share=1, queue_max=0)
        processor = _processor(_config(tokenizer_file, model))
        _ready(processor, "short", "127.0.0.1:1", "127.0.0.1:2")
        responses = [(await _request(processor, _chat(words(40))))[1] for _ in range(3)]
        assert sorted(str(_picked(r)) for r in responses[:2]) == ["127.0.0.1:1", "127.0.0.1:2"]
        assert _error(responses[2])["code"] == "capacity_exceeded"
        assert processor.tables["short"].capacity == 2

    asyncio.run(run())


async def _second_of_a_prefix(per_block: float, tokenizer: str, free_after: float) -> tuple[str, str, float]:
    """Two replicas of one slot each; a request holds its prefix's replica while a second one sharing the prefix
    arrives, and the first ends ``free_after`` seconds later (never, if infinite): where each went, and how long the
    second took to be placed. The spec's default weight, 8, ranks the prefix's replica first though it is busy."""
    routing = routing_config(load=vllm_load(kv_usage=False), overlap_weight=8.0, prefill_seconds_per_block=per_block)
    model = _model("short", tokenizer, max_num_seqs=1, fallback_share=1, queue_max=0, routing=routing)
    processor = _processor(_config(tokenizer, model))
    _ready(processor, "short", "127.0.0.1:1", "127.0.0.1:2")
    prefix = words(200)
    holder, first = await _request(processor, _chat(f"{prefix} first"))
    if free_after != float("inf"):
        asyncio.get_running_loop().call_later(free_after, lambda: asyncio.ensure_future(holder.close()))
    started = asyncio.get_running_loop().time()
    _, second = await _request(processor, _chat(f"{prefix} second"))
    return str(_picked(first)), str(_picked(second)), asyncio.get_running_loop().time() - started


def test_a_request_is_held_for_its_prefixs_replica_while_that_costs_less_than_its_prefill(
    tokenizer_file: str,
) -> None:
    """The 200-word prefix is 12+ blocks: at 0.1 s a block the second request may wait over a second for the first's
    replica, which frees after 0.1 s, so it goes there; spilled, it would have recomputed the prefix."""
    first, second, _ = asyncio.run(_second_of_a_prefix(0.1, tokenizer_file, free_after=0.1))
    assert second == first


def test_a_request_spills_at_once_when_holding_is_off(tokenizer_file: str) -> None:
    """Held, it would have gone to the first replica when that freed, 0.1 s on: placed on the other, it did not wait
    (proved by where it went, not by wall time, which a loaded machine stretches)."""
    first, second, _ = asyncio.run(_second_of_a_prefix(0.0, tokenizer_file, free_after=0.1))
    assert second != first


def test_a_held_request_spills_once_it_has_waited_its_prefixs_prefill(tokenizer_file: str) -> None:
    """At 5 ms a block the 12+ blocks are worth at least 60 ms of waiting, and the first replica never frees."""
    first, second, took = asyncio.run(_second_of_a_prefix(0.005, tokenizer_file, free_after=float("inf")))
    assert second != first and took >= 0.06


def test_a_retry_goes_to_the_next_ready_replicas_in_the_routers_order(tokenizer_file: str) -> None:
    """The pick, then the next ready replicas, cheapest first, at most MAX_ALTERNATES: a retry after a pick that
    died goes to one of them, never to least-request's draw (which favours the dead host, holding nothing)."""

    async def run() -> None:
        processor = _processor(_config(tokenizer_file, _model("short", tokenizer_file, max_num_seqs=64)))
        addresses = [f"127.0.0.1:{port}" for port in range(1, 7)]
        _ready(processor, "short", *addresses)
        table = processor.tables["short"]
        for load, address in enumerate(addresses):
            table.endpoints[address].running = 10.0 * load  # a clear order: :1 cheapest, :6 dearest
        table.endpoints["127.0.0.1:3"].ready = False  # a replica whose last scrape failed is never listed
        _, response = await _request(processor, _chat("w1"))
        assert MAX_ALTERNATES == 3
        assert _destinations(response) == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4", "127.0.0.1:5"]
        for address in addresses[1:]:
            table.endpoints[address].ready = False
        _, alone = await _request(processor, _chat("w2"))
        assert _destinations(alone) == ["127.0.0.1:1"]  # the only ready replica: nothing to list after it

    asyncio.run(run())


def test_a_model_with_a_tier_fallback_lists_one_alternate(tokenizer_file: str) -> None:
    """Its route's cluster holds the fallback's replicas a priority lower and Envoy takes listed hosts first: one
    alternate leaves the route's further retry to the fallback."""

    async def run() -> None:
        primary = _model("short", tokenizer_file, max_num_seqs=64)
        base = _config(tokenizer_file, primary, _model("spare", tokenizer_file, max_num_seqs=64))
        tiers = (TierConfig(name="standard", models=("short",), fallback=("spare",)),)
        processor = _processor(base.model_copy(update={"tiers": tiers}))
        assert processor.alternates == {"short": FALLBACK_ALTERNATES, "spare": MAX_ALTERNATES}
        addresses = [f"127.0.0.1:{port}" for port in range(1, 5)]
        _ready(processor, "short", *addresses)
        for load, address in enumerate(addresses):
            processor.tables["short"].endpoints[address].running = 10.0 * load
        _, response = await _request(processor, _chat("w1"))
        assert FALLBACK_ALTERNATES == 1
        assert _destinations(response) == ["127.0.0.1:1", "127.0.0.1:2"]

    asyncio.run(run())


def test_without_a_ready_replica_envoy_balances_and_falls_back(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file))  # the model's one address answers nothing: not ready
        _, response = await _request(processor, _chat("w1"))
        assert _forwarded(response)["model"] == "short" and _picked(response) is None
        assert processor.metrics.routing.labels("short", "fallback")._value.get() == 1

    asyncio.run(run())


def test_gate_cancellation_frees_the_queue() -> None:
    async def run() -> None:
        gate = ModelGate(2, 5.0, lambda: None)
        full: Any = None

        async def nothing_free(turn: Any) -> Any:
            return full

        waiter = asyncio.ensure_future(gate.admit(nothing_free))
        await asyncio.sleep(0.01)
        assert gate.waiting == 1
        waiter.cancel()
        await asyncio.sleep(0.01)
        assert gate.waiting == 0
        full = "slot"
        assert await gate.admit(nothing_free) == "slot"

    asyncio.run(run())


def test_a_slot_none_of_its_waiters_wants_goes_back_to_the_store_at_once(
    tokenizer_file: str, redis_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request ends on replica A while the worker's queue waits for B: the slot goes back to the store for
    another worker's waiters (``admission``), not to this one's head; one its waiters want is kept and taken."""
    monkeypatch.setattr(admission, "HEAD_PATIENCE_SECONDS", 60.0)  # the head never takes any slot here

    async def run() -> None:
        processor = _processor(_config(tokenizer_file), redis_port)
        slots, gate = processor.slots, processor.gates["short"]
        taken = [await slots.acquire("short", ["a:1"], 2, 2) for _ in range(2)]
        first, second = (Placement("short", Endpoint("a:1"), slot, 1) for slot in taken if slot is not None)

        async def wait_for(address: str, turn: Turn) -> Slot | None:
            turn.prefers = frozenset({address})
            return await slots.acquire("short", [address], 1, 1) if address == "a:1" else None

        waiting_b = asyncio.ensure_future(gate.admit(functools.partial(wait_for, "b:1")))
        await until(lambda: gate.waiting == 1, 2.0)
        processor._unplace(first)
        await until(lambda: slots.leased("short", "a:1") == 1, 2.0)
        redis = Redis(port=redis_port)
        key = f"{processor.config.redis_key_prefix}slots:{{short}}:leases:a:1"
        assert int(await redis.hget(key, slots.processor) or 0) == 1  # the store counts the one still held
        waiting_a = asyncio.ensure_future(gate.admit(functools.partial(wait_for, "a:1")))
        await until(lambda: gate.waiting == 2, 2.0)  # A is full (cap 1): it queues
        processor._unplace(second)  # a waiter wants A: kept here and taken by it
        slot = await asyncio.wait_for(waiting_a, 2.0)
        assert slot is not None and slot.endpoint == "a:1" and slots.leased("short", "a:1") == 1
        waiting_b.cancel()
        await redis.aclose()

    asyncio.run(run())


def test_a_slot_freed_on_a_busy_replica_with_nothing_waiting_here_goes_back_to_the_store_at_once(
    tokenizer_file: str, redis_port: int
) -> None:
    """A request ends on A while nothing queues or is held in this worker. A quiet (its engine below half its
    ``max_num_seqs``): one free slot stays leased for this worker's next request, no round trip; a second is given
    back, and the kept one too once a read of the replicas finds A busy. A busy: given back at once, no trim, and
    another worker's next request leases it. Kept whatever the load, it made the pod's other worker find A full and
    spill its request to a replica without its prefix (``slots``)."""

    async def run() -> None:
        processor = _processor(_config(tokenizer_file), redis_port)  # max_num_seqs 4
        slots = processor.slots
        redis = Redis(port=redis_port)
        key = f"{processor.config.redis_key_prefix}slots:{{short}}:leases:a:1"
        other = SlotStore(redis, processor.config.redis_key_prefix, lambda _: None, processor="other")

        async def counted() -> int:
            await until(lambda: not slots._giving, 2.0)  # every give-back's script has answered
            return int(await redis.hget(key, slots.processor) or 0)

        quiet = Endpoint("a:1", running=1.0)
        held = [await slots.acquire("short", ["a:1"], 4, 1) for _ in range(2)]
        for slot in held:
            assert slot is not None
            processor._unplace(Placement("short", quiet, slot, 1))
        assert slots.leased("short", "a:1") == 1 and await counted() == 1  # one kept, the second given back
        slot = await slots.acquire("short", ["a:1"], 1, 1)  # the kept one: no store, even at cap 1
        assert slot is not None and await other.acquire("short", ["a:1"], 1, 1) is None
        processor._unplace(Placement("short", quiet, slot, 1))  # kept again
        _ready(processor, "short", "a:1")
        processor.tables["short"].endpoints["a:1"].running = 2.0  # half of 4: a read finds A busy
        processor._table_changed(processor.tables["short"])
        assert slots.leased("short", "a:1") == 0 and await counted() == 0  # the kept slot went back
        busy = Endpoint("a:1", running=1.0, waiting=1.0)
        slot = await slots.acquire("short", ["a:1"], 1, 1)
        assert slot is not None and await other.acquire("short", ["a:1"], 1, 1) is None
        processor._unplace(Placement("short", busy, slot, 1))
        assert slots.leased("short", "a:1") == 0 and await counted() == 0
        taken = await other.acquire("short", ["a:1"], 1, 1)
        assert taken is not None and taken.endpoint == "a:1"
        await redis.aclose()

    asyncio.run(run())


def test_a_request_that_may_take_any_replica_leaves_those_others_wait_for(tokenizer_file: str) -> None:
    """Allowed to take any replica (:class:`Turn`), a request preferring one (its prefix's holder, here full) tries
    it and then the others that no other queued request prefers, this worker's (``others_want``) or another's
    (``peer_queues``); one preferring none (no prefix) tries every replica: it has no line to wait in."""

    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        model = processor.config.models[0]
        home, cheap, dear = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
        _ready(processor, "short", home, cheap, dear)
        processor.tables["short"].endpoints[cheap].running = 5.0
        processor.tables["short"].endpoints[dear].running = 10.0
        hashes = [11, 12, 13]
        processor.routers["short"].index.record(home, hashes)
        tried: list[list[str]] = []

        async def full(model: str, ranked: Sequence[str], cap: int, fallback_cap: int) -> Slot | None:
            tried.append(list(ranked))  # every replica full: the order tried is what the test reads
            return None

        processor.slots.acquire = full  # type: ignore[method-assign]

        async def tries(turn: Turn, prompt: list[int] = hashes) -> list[str]:
            assert await processor._place(model, prompt, 48, turn=turn) is None
            return tried.pop()

        assert await tries(Turn(anywhere=False)) == [home]
        assert await tries(Turn(anywhere=True)) == [home, cheap, dear]
        assert await tries(Turn(anywhere=True, others_want=frozenset({cheap, home}))) == [home, dear]
        processor.peer_queues.heard("short", "another worker", frozenset({dear}))
        assert await tries(Turn(anywhere=True)) == [home, cheap]
        assert await tries(Turn(anywhere=True, others_want=frozenset({cheap}))) == [home]
        no_prefix = Turn(anywhere=True, others_want=frozenset({cheap}))
        assert await tries(no_prefix, []) == [home, cheap, dear] and no_prefix.prefers == frozenset()
        # Arriving at an empty queue (the hold path, before it queues), the same: only the others' replicas left.
        assert await processor._place(model, hashes, 48, hold=Hold(time.monotonic())) is None
        assert tried.pop() == [home, cheap]
        assert await processor._place(model, [], 48, hold=Hold(time.monotonic())) is None
        assert tried.pop() == [home, cheap, dear]

    asyncio.run(run())


def test_scale_from_zero_holds_then_503(tokenizer_file: str) -> None:
    async def run() -> None:
        model = _model("short", tokenizer_file, scale_to_zero=True, cold_start_hold_seconds=0.8)
        processor = _processor(_config(tokenizer_file, model))
        pending = asyncio.ensure_future(_request(processor, _chat("w1")))
        await asyncio.sleep(0.3)
        assert processor.metrics.pending.labels("short")._value.get() == 1  # what KEDA wakes the model on
        _, response = await pending
        assert (_status(response), _error(response)["code"]) == (503, "model_starting")
        assert _headers_of(response)["retry-after"] == "30"
        assert processor.metrics.pending.labels("short")._value.get() == 0
        assert processor.metrics.rejections.labels("cold_start_timeout", "short")._value.get() == 1

    asyncio.run(run())


async def _tokens_counted(config: ProcessorConfig, redis_port: int) -> list[int]:
    redis = Redis(port=redis_port)
    keys = [k async for k in redis.scan_iter(f"{config.redis_key_prefix}t:tok:*")]
    counted = [int(await redis.get(k) or 0) for k in keys]
    await redis.aclose()
    return counted


def _reserved(forwarded: Any) -> int:
    """The prompt tokens the settlement handed on with ``forwarded`` says were reserved (the prompt, counted)."""
    reserved = int(
        forwarded.dynamic_metadata.fields[SETTLE_METADATA_NAMESPACE].struct_value.fields["reserved"].number_value
    )
    assert reserved > 0
    return reserved


@pytest.mark.parametrize(
    "read",
    [
        {"status": 200},  # an answer without usage
        {"status": 502},  # an error: Envoy reads no usage from its body
        {"status": 200, "stream": True, "ended": False},  # cut short (a client gone)
        {"status": 0, "ended": False},  # no response at all: the client left before it began
    ],
    ids=["no-usage", "error-status", "cut-short", "no-response"],
)
def test_a_response_without_usage_returns_the_reservation(
    tokenizer_file: str, redis_port: int, read: dict[str, Any]
) -> None:
    """Except where no response began: the engine had the prompt, and its reservation stands."""
    stands = read["status"] == 0

    async def run() -> None:
        config = _config(tokenizer_file)
        processor = _processor(config, redis_port)
        stream, response = await _request(processor, _chat(words(10)))
        _forwarded(response)
        await stream.close()  # the placing stream ends with the response: the reservation is the settlement's
        await processor.budgets.flush()
        assert await _tokens_counted(config, redis_port) == [_reserved(response)]
        settle(processor, response, **read)
        await processor.budgets.flush()
        assert await _tokens_counted(config, redis_port) == [_reserved(response) if stands else 0]

    asyncio.run(run())


def test_the_observing_stream_of_an_answer_not_to_cache_closes_at_its_first_chunk(tokenizer_file: str) -> None:
    """The usage comes with the access log entry, so a response the cache does not store costs its observing
    stream one message: the processor reads no further (and Envoy sends no more once the stream is closed)."""

    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        stream, response = await _request(processor, _chat(words(10), stream=True))
        _forwarded(response)
        await stream.close()
        chunk = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
        sent = [_observed(response, chunk, False, 200), *(_observed(response, chunk, False) for _ in range(5))]
        read = 0

        async def chunks() -> AsyncIterator[Any]:
            nonlocal read
            for message in sent:
                read += 1
                yield message

        assert [reply async for reply in processor.process(chunks())] == []
        assert read == 1

    asyncio.run(run())


def test_a_request_never_forwarded_returns_its_reservation_and_an_unsettled_response_is_left_alone(
    tokenizer_file: str, redis_port: int
) -> None:
    """A placing stream that ends before its body is answered (Envoy gave up) settles there; a response that
    carries no settlement (a local reply: a rejection, a cached answer) is read by no one."""

    async def run() -> None:
        model = _model(
            "short", tokenizer_file, max_num_seqs=1, fallback_share=1, queue_max=1, queue_timeout_seconds=0.1
        )
        config = _config(tokenizer_file, model)
        processor = _processor(config, redis_port)
        _ready(processor, "short", "127.0.0.1:1")
        holder, held = await _request(processor, _chat(words(10)))
        _forwarded(held)
        refused_stream, refused = await _request(processor, _chat(words(10)))  # no slot within 0.1 s
        assert _status(refused) == 429
        await refused_stream.close()
        await holder.close()
        await processor.budgets.flush()
        assert await _tokens_counted(config, redis_port) == [_reserved(held)]  # the forwarded one's, for its observer
        settle(processor, pb.ProcessingResponse(), usage=(13, 7))  # no settlement: a local reply's entry
        await processor.budgets.flush()
        assert await _tokens_counted(config, redis_port) == [_reserved(held)]
        assert processor.metrics.tokens.labels("t", "standard", "short", "prompt")._value.get() == 0

    asyncio.run(run())


@pytest.mark.parametrize("streamed", [True, False])
def test_usage_is_accounted_per_tenant_and_corrects_the_reservation(
    tokenizer_file: str, redis_port: int, streamed: bool
) -> None:
    async def run() -> None:
        config = _config(tokenizer_file)
        processor = _processor(config, redis_port)
        stream, response = await _request(processor, _chat(words(10), stream=streamed))
        _forwarded(response)
        await stream.close()
        settle(processor, response, usage=(13, 7), stream=streamed)
        tokens = processor.metrics.tokens
        assert tokens.labels("t", "standard", "short", "prompt")._value.get() == 13
        assert tokens.labels("t", "standard", "short", "completion")._value.get() == 7
        await processor.budgets.flush()
        redis = Redis(port=redis_port)
        keys = [k async for k in redis.scan_iter(f"{config.redis_key_prefix}t:tok:*")]
        assert [int(await redis.get(k) or 0) for k in keys] == [20]
        await redis.aclose()

    asyncio.run(run())


def test_metric_names_are_the_ones_registered(tokenizer_file: str) -> None:
    registry = CollectorRegistry()
    Processor(_config(tokenizer_file), None, registry)
    names = {metric.name for metric in registry.collect()}
    exposed = {
        gm.REQUESTS_TOTAL.removesuffix("_total"),
        gm.REJECTIONS_TOTAL.removesuffix("_total"),
        gm.TOKENS_TOTAL.removesuffix("_total"),
        gm.PENDING_REQUESTS,
        gm.INFLIGHT_REQUESTS,
        gm.QUEUE_SECONDS,
        gm.PROCESSOR_ERRORS_TOTAL.removesuffix("_total"),
        gm.ROUTING_DECISIONS_TOTAL.removesuffix("_total"),
        gm.PREFIX_TOKENS_TOTAL.removesuffix("_total"),
        gm.ENDPOINT_INFLIGHT,
        gm.READY_ENDPOINTS,
        gm.ADMISSION_CAPACITY,
        gm.SLOT_STORE_FALLBACKS_TOTAL.removesuffix("_total"),
        gm.PROCESSOR_CPU_SECONDS_TOTAL.removesuffix("_total"),
        gm.PROCESSOR_STAGE_CPU_SECONDS_TOTAL.removesuffix("_total"),
        gm.PREFILL_TOTAL.removesuffix("_total"),
        gm.DIFFICULTY_ROUTES_TOTAL.removesuffix("_total"),
        gm.PROVIDER_REQUESTS_TOTAL.removesuffix("_total"),
        gm.PROVIDER_TOKENS_TOTAL.removesuffix("_total"),
        gm.PROVIDER_COST_USD_TOTAL.removesuffix("_total"),
        gm.PROVIDER_COOLDOWNS_TOTAL.removesuffix("_total"),
    }
    assert names == exposed


def test_a_worker_counts_the_cpu_it_used(tokenizer_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker burns between two counts reaches ``processor_cpu_seconds_total``, to the clock's resolution."""
    monkeypatch.setattr(ext_proc, "CPU_COUNT_SECONDS", 0.05)
    registry = CollectorRegistry()
    processor = Processor(_config(tokenizer_file), None, registry)

    def counted() -> float:
        return registry.get_sample_value(gm.PROCESSOR_CPU_SECONDS_TOTAL) or 0.0

    async def burn() -> tuple[float, float]:
        task = asyncio.ensure_future(processor._count_cpu())  # the loop start() runs
        await asyncio.sleep(0.06)
        before, started = counted(), time.process_time()
        while time.process_time() - started < 0.3:  # CPU, not a sleep: the count is of CPU
            sum(range(10_000))
        used = time.process_time() - started
        while counted() < before + used * 0.9:  # the next count reports it
            await asyncio.sleep(0.01)
        task.cancel()
        return counted() - before, used

    loop = asyncio.new_event_loop()
    try:
        reported, used = loop.run_until_complete(asyncio.wait_for(burn(), 10))
    finally:
        loop.close()
    assert used * 0.9 <= reported <= used + 0.2


def test_each_stage_of_a_streamed_request_is_timed_once_where_it_runs(tokenizer_file: str, redis_port: int) -> None:
    """The stage clock read by a counter that steps once a read: each measured span adds exactly one, so the spans
    a request ran are counted where they are and nowhere else, and reach the counter by stage when flushed."""
    reads = itertools.count()

    async def run() -> dict[str, float]:
        processor = _processor(_config(tokenizer_file), redis_port)
        processor.stages.read = lambda: float(next(reads))
        _ready(processor, "short", "127.0.0.1:1")  # a replica to rank and place the request on
        stream, response = await _request(processor, _chat(words(10), stream=True))
        _forwarded(response)
        final = b'data: {"choices":[],"usage":{"prompt_tokens":13,"completion_tokens":2}}\n\ndata: [DONE]\n\n'
        await stream.close()
        await observe(  # not cacheable: read no further than its first chunk
            processor, response, [(b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n', False), (final, True)]
        )
        settle(processor, response, usage=(13, 2), stream=True)
        spent = dict(processor.stages.spent)
        processor.stages.flush(processor.metrics.stage_cpu_seconds)
        assert set(processor.stages.spent.values()) == {0.0}  # started again
        registry = processor.metrics.stage_cpu_seconds
        assert {stage: registry.labels(stage)._value.get() for stage in gm.CPU_STAGES} == spent
        return spent

    # route: the prefix hashes, then the replicas' ranking; response: none (only a cacheable answer's chunks are
    # read); account: its access log entry; no tier routes by difficulty.
    assert asyncio.run(run()) == {
        "parse": 1, "difficulty": 0, "tokenize": 1, "context": 1, "route": 2, "forward": 1, "response": 0,
        "account": 1,
    }  # fmt: skip


def test_the_redis_url_is_read_from_its_file_before_the_environment(
    tokenizer_file: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inferplane.processor.redis_connection import redis_url

    monkeypatch.setenv("UNUSED", "redis://from-env:6379/0")
    url_file = tmp_path / "url"
    config = _config(tokenizer_file).model_copy(update={"redis_url_file": str(url_file)})
    assert redis_url(config) == "redis://from-env:6379/0"  # no file (a local run): the environment
    url_file.write_text("rediss://:secret@cache:6379\n")
    assert redis_url(config) == "rediss://:secret@cache:6379"  # the mounted Secret wins
    url_file.write_text("")
    monkeypatch.delenv("UNUSED")
    assert redis_url(config) is None
