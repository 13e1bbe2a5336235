"""The prefill step of a disaggregated model: vLLM's proxy protocol exactly, each outcome counted once, the slot always
given back, and a config that cannot name a prefill role wrongly. The real transfer between two vLLM servers is
``tests/e2e/test_disaggregated_e2e.py``; here the prefill replica is ``httpx.MockTransport``, which injects the failures
a real server does not produce on demand (a timeout, a reset, an answer without parameters)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from inferplane.processor.config import PrefillConfig, ProcessorConfig, TenantConfig, TierConfig
from inferplane.processor.ext_proc import Processor, RejectError
from inferplane.processor.prefill import REMOTE_DECODE, PrefillCall, PrefillStage, prefill_request, transfer_params
from tests.gateway_support import model_config, routing_config

PARAMS = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [[1, 2, 3]],
    "remote_engine_id": "a9373d3c",
    "remote_request_id": "cmpl-1",
    "remote_host": "10.0.0.7",
    "remote_port": 5600,
    "tp_size": 1,
    "remote_num_tokens": 360,
}
"""What vLLM 0.32's prefill replica answered on this machine (``NixlPullConnectorScheduler.request_finished``)."""

DECODE = model_config("pd", ["10.0.0.8:8000"], prefill=PrefillConfig(model="pd-prefill", min_uncached_tokens=64))
ROLE = model_config("pd-prefill", ["10.0.0.7:8000"], role="prefill")


def test_the_prefill_request_is_the_clients_unstreamed_for_one_token_asking_for_a_remote_decode() -> None:
    body = {
        "model": "pd",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 50,
        "min_tokens": 4,
        "temperature": 0.2,
    }
    assert prefill_request(body) == {
        "model": "pd",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        "max_tokens": 1,
        "max_completion_tokens": 1,
        "temperature": 0.2,
        "kv_transfer_params": {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        },
    }
    assert body["stream"] is True and body["max_completion_tokens"] == 50  # the decode request's body is untouched
    assert REMOTE_DECODE["do_remote_decode"] is True


@pytest.mark.parametrize(
    ("status", "payload", "expected"),
    [
        (200, json.dumps({"kv_transfer_params": PARAMS}).encode(), PARAMS),
        (500, json.dumps({"kv_transfer_params": PARAMS}).encode(), None),
        (200, b"not json", None),
        (200, json.dumps(["a list"]).encode(), None),
        (200, json.dumps({"choices": []}).encode(), None),
        (200, json.dumps({"kv_transfer_params": {**PARAMS, "remote_block_ids": None}}).encode(), None),
        (200, json.dumps({"kv_transfer_params": "yes"}).encode(), None),
    ],
    ids=["params", "error-status", "not-json", "not-an-object", "no-params", "no-blocks", "params-not-an-object"],
)
def test_only_parameters_naming_blocks_are_sent_on(status: int, payload: bytes, expected: Any) -> None:
    assert transfer_params(status, payload) == expected


@dataclass(frozen=True)
class Slot:
    address: str


class Run:
    """One :class:`PrefillStage` against a mock prefill replica, recording what it did."""

    def __init__(self, handler: Callable[[httpx.Request], httpx.Response] | None, *, free: bool = True) -> None:
        self.requests: list[httpx.Request] = []
        self.outcomes: list[tuple[str, str]] = []
        self.placed: list[Slot] = []
        self.released: list[Slot] = []

        def record(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            assert handler is not None
            return handler(request)

        async def place(call: PrefillCall) -> Slot | None:
            assert call.role is ROLE
            slot = Slot("10.0.0.7:8000") if free else None
            if slot is not None:
                self.placed.append(slot)
            return slot

        self.stage = PrefillStage(
            place,
            self.released.append,
            lambda model, outcome: self.outcomes.append((model, outcome)),
            transport=httpx.MockTransport(record),
        )

    def call(self, prompt_tokens: int = 400, cached_tokens: int = 0) -> dict[str, Any] | None:
        call = PrefillCall(
            model=DECODE,
            role=ROLE,
            path="/v1/chat/completions",
            body={"model": "pd", "messages": [{"role": "user", "content": "w " * prompt_tokens}], "stream": True},
            prompt_tokens=prompt_tokens,
            cached_tokens=cached_tokens,
            hashes=[1, 2, 3],
        )

        async def go() -> dict[str, Any] | None:
            try:
                return await self.stage.run(call)
            finally:
                await self.stage.aclose()

        return asyncio.run(go())


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"text": "w"}], "kv_transfer_params": PARAMS})


def test_a_long_prompt_is_sent_to_the_prefill_replica_and_its_parameters_returned() -> None:
    run = Run(_answer)
    assert run.call() == PARAMS
    (request,) = run.requests
    assert str(request.url) == "http://10.0.0.7:8000/v1/chat/completions"
    sent = json.loads(request.content)
    assert sent["kv_transfer_params"] == dict(REMOTE_DECODE) and sent["stream"] is False and sent["max_tokens"] == 1
    assert request.headers["x-request-id"].startswith("prefill-")
    assert run.outcomes == [("pd", "transferred")]
    assert run.released == run.placed == [Slot("10.0.0.7:8000")]


def test_fewer_uncached_tokens_than_the_threshold_stay_on_the_decode_replica() -> None:
    run = Run(_answer)
    # 400 prompt tokens of which the decode replica holds 337: 63 uncached, under the 64 of the config.
    assert run.call(prompt_tokens=400, cached_tokens=337) is None
    assert run.requests == [] and run.placed == []
    assert run.outcomes == [("pd", "short")]
    assert Run(_answer).call(prompt_tokens=400, cached_tokens=336) == PARAMS


def test_no_free_prefill_replica_skips_the_step_at_once() -> None:
    run = Run(_answer, free=False)
    assert run.call() is None
    assert run.requests == [] and run.released == []
    assert run.outcomes == [("pd", "busy")]


def _raise(error: type[httpx.HTTPError]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error("injected", request=request)  # type: ignore[call-arg]

    return handler


@pytest.mark.parametrize(
    "handler",
    [
        lambda request: httpx.Response(503, json={"error": "overloaded"}),
        lambda request: httpx.Response(200, json={"choices": []}),
        _raise(httpx.ConnectError),
        _raise(httpx.ReadTimeout),
        _raise(httpx.RemoteProtocolError),
    ],
    ids=["503", "no-parameters", "refused", "timeout", "reset"],
)
def test_a_failed_step_leaves_the_prompt_to_the_decode_replica_and_frees_the_slot(
    handler: Callable[[httpx.Request], httpx.Response],
) -> None:
    run = Run(handler)
    assert run.call() is None
    assert run.outcomes == [("pd", "failed")]
    assert run.released == run.placed and len(run.placed) == 1


def _config(*models: Any, tiers: tuple[TierConfig, ...] | None = None) -> ProcessorConfig:
    return ProcessorConfig(
        grpc_port=1,
        metrics_port=2,
        tenant_header="x-inferplane-tenant",
        auth_required=True,
        redis_url_env="UNUSED",
        models=models,
        tiers=tiers if tiers is not None else (TierConfig(name="standard", models=("pd",)),),
        tenants=(TenantConfig(name="t", tiers=("standard",), requests_per_minute=1, tokens_per_minute=1),),
    )


def test_a_model_and_its_prefill_role_make_a_config() -> None:
    config = _config(DECODE, ROLE)
    assert config.model("pd-prefill") == ROLE


@pytest.mark.parametrize(
    ("models", "tiers", "problem"),
    [
        ((DECODE,), None, "model 'pd' names 'pd-prefill' as its prefill, not a role: prefill model"),
        (
            (DECODE, model_config("pd-prefill", ["10.0.0.7:8000"])),
            None,
            "model 'pd' names 'pd-prefill' as its prefill, not a role: prefill model",
        ),
        (
            (
                DECODE,
                model_config("pd-prefill", ["10.0.0.7:8000"], role="prefill", routing=routing_config(block_tokens=32)),
            ),
            None,
            "model 'pd' and its prefill 'pd-prefill' hash different blocks",
        ),
        (
            (DECODE, ROLE),
            (TierConfig(name="standard", models=("pd", "pd-prefill")),),
            "tier 'standard' names prefill model 'pd-prefill'",
        ),
        (
            (DECODE.model_copy(update={"longer_context": ("pd-prefill",)}), ROLE),
            None,
            "model 'pd' reroutes to prefill model 'pd-prefill'",
        ),
        (
            (DECODE, ROLE.model_copy(update={"longer_context": ("pd",)})),
            None,
            "prefill model 'pd-prefill' can have no prefill or longer_context of its own",
        ),
    ],
    ids=["unknown", "not-a-role", "other-blocks", "in-a-tier", "rerouted-to", "role-reroutes"],
)
def test_a_prefill_role_is_named_only_as_one(models: tuple[Any, ...], tiers: Any, problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _config(*models, tiers=tiers)
    assert problem in str(caught.value)


def test_a_client_can_neither_ask_for_nor_see_a_prefill_role() -> None:
    processor = Processor(_config(DECODE, ROLE), None, CollectorRegistry())
    tenant = processor.config.tenants[0]
    with pytest.raises(RejectError) as caught:
        processor._resolve("pd-prefill", tenant)
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")
    assert [entry["id"] for entry in processor._model_list(tenant)["data"]] == ["pd", "standard"]
    assert processor.prefill_stage is not None
    asyncio.run(processor.prefill_stage.aclose())
