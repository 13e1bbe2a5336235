"""Hosted providers in the processor: a request goes to the tier's provider only where it would otherwise be refused
(no slot within the queue timeout, a cold start that did not finish) or where neither its model nor the tier's
fallbacks has a ready replica, and only for a tenant the provider lists; the body names the provider's model, the
metadata the provider's route; the provider's usage is accounted with its cost, and its answer is never cached."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from inferplane.processor import metrics as gm
from inferplane.processor import providers
from inferplane.processor.config import (
    PROVIDER_METADATA_KEY,
    ProcessorConfig,
    ProviderConfig,
    TenantConfig,
    TierConfig,
)
from inferplane.processor.ext_proc import Processor
from tests.processor.test_ext_proc import (
    Stream,
    _body,
    _chat,
    _error,
    _forwarded,
    _headers,
    _model,
    _picked,
    _processor,
    _ready,
    _status,
    settle,
)
from tests.processor.test_ext_proc import _config as base_config

PROVIDER = ProviderConfig(
    name="hosted",
    model="vendor/llama-3.3-70b",
    input_usd_per_million=0.9,
    output_usd_per_million=2.5,
    tenants=("t",),
)


def _config(tokenizer: str, *, consenting: bool = True, fallback: bool = False, **model: Any) -> ProcessorConfig:
    """One model ``short`` in tier ``standard`` with provider ``hosted``; tenant ``t`` consents, ``u`` never."""
    models = [_model("short", tokenizer, max_num_seqs=1, fallback_share=1, queue_max=0, **model)]
    if fallback:
        models.append(_model("spare", tokenizer, max_num_seqs=1, fallback_share=1))
    base = base_config(tokenizer, *models)
    names = ("short",)
    tier = TierConfig(
        name="standard", models=names, fallback=("spare",) if fallback else (), providers=(PROVIDER.name,)
    )
    tenants = (
        base.tenants[0],
        TenantConfig(name="u", tiers=("standard",), requests_per_minute=100, tokens_per_minute=100_000),
    )
    provider = PROVIDER if consenting else PROVIDER.model_copy(update={"tenants": ()})
    return base.model_copy(update={"tiers": (tier,), "tenants": tenants, "providers": (provider,)})


async def _ask(processor: Processor, tenant: str = "t", **extra: Any) -> tuple[Stream, Any]:
    stream = Stream(processor)
    await stream.send(_headers(tenant=tenant))
    return stream, await stream.send(_body(_chat("w1 w2 w3", **extra)))


def _provider_of(response: Any) -> str | None:
    fields = response.dynamic_metadata.fields
    if "inferplane" not in fields or PROVIDER_METADATA_KEY not in fields["inferplane"].struct_value.fields:
        return None
    name: str = fields["inferplane"].struct_value.fields[PROVIDER_METADATA_KEY].string_value
    return name


def _handed(processor: Processor, reason: str, tenant: str = "t") -> float:
    value: float = processor.providers.request(PROVIDER.name, "standard", tenant, reason)._value.get()
    return value


def test_a_saturated_model_hands_the_consenting_tenants_request_to_the_provider(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        _ready(processor, "short", "127.0.0.1:1")
        holder, first = await _ask(processor)
        assert _picked(first) == "127.0.0.1:1" and _provider_of(first) is None
        _, spilled = await _ask(processor)  # the one slot is taken and no queue: the provider takes it
        body = _forwarded(spilled)
        assert body["model"] == PROVIDER.model
        assert _provider_of(spilled) == PROVIDER.name
        assert _picked(spilled) is None  # no replica pick: the provider's route has no override_host
        assert _handed(processor, "saturated") == 1
        _, refused = await _ask(processor, tenant="u")  # no consent: the platform's own 429
        assert (_status(refused), _error(refused)["code"]) == (429, "capacity_exceeded")
        assert _handed(processor, "saturated", "u") == 0
        await holder.close()

    asyncio.run(run())


def test_without_any_consent_a_saturated_model_refuses(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file, consenting=False))
        _ready(processor, "short", "127.0.0.1:1")
        holder, _ = await _ask(processor)
        _, refused = await _ask(processor)
        assert _status(refused) == 429
        await holder.close()

    asyncio.run(run())


@pytest.mark.parametrize("spare_ready", [False, True])
def test_no_ready_replica_goes_to_the_provider_unless_a_fallback_is_ready(
    tokenizer_file: str, spare_ready: bool
) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file, fallback=True))
        if spare_ready:
            _ready(processor, "spare", "127.0.0.1:2")
        _, response = await _ask(processor)
        if spare_ready:  # Envoy's retries reach the tier's own fallback: nothing leaves the VPC
            assert _forwarded(response)["model"] == "short" and _provider_of(response) is None
            assert processor.metrics.routed("short", "fallback")._value.get() == 1
        else:
            assert _forwarded(response)["model"] == PROVIDER.model and _provider_of(response) == PROVIDER.name
            assert _handed(processor, "unavailable") == 1

    asyncio.run(run())


def test_a_cold_start_past_its_hold_goes_to_the_provider_instead_of_503(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file, scale_to_zero=True, cold_start_hold_seconds=0.05))
        _, response = await _ask(processor)
        assert _provider_of(response) == PROVIDER.name
        assert _handed(processor, "cold_start") == 1
        _, refused = await _ask(processor, tenant="u")
        assert _status(refused) == 503

    asyncio.run(run())


def test_the_providers_usage_is_accounted_with_its_cost_and_never_cached(tokenizer_file: str) -> None:
    async def run() -> None:
        processor = _processor(_config(tokenizer_file))
        _ready(processor, "short", "127.0.0.1:1")
        holder, _ = await _ask(processor)
        stream, spilled = await _ask(processor, stream=True)
        assert _provider_of(spilled) == PROVIDER.name
        await stream.close()
        settle(processor, spilled, usage=(2_000, 400), stream=True)
        providers = processor.providers
        assert providers.token(PROVIDER.name, "standard", "t", "prompt")._value.get() == 2_000
        assert providers.token(PROVIDER.name, "standard", "t", "completion")._value.get() == 400
        assert providers.cost(PROVIDER.name, "standard", "t")._value.get() == pytest.approx(
            (2_000 * 0.9 + 400 * 2.5) / 1e6
        )
        # The platform's token series counts only what its own models served.
        assert processor.metrics.token("t", "standard", "short", "prompt")._value.get() == 0
        assert processor.metrics.request("short", "standard", "t", "provider")._value.get() == 1
        await holder.close()

    asyncio.run(run())


def test_a_tier_names_only_known_providers() -> None:
    with pytest.raises(ValueError, match="unknown provider 'nowhere'"):
        ProcessorConfig.model_validate(
            {
                **_minimal(),
                "tiers": [{"name": "standard", "models": ["short"], "providers": ["nowhere"]}],
            }
        )


def _minimal() -> dict[str, Any]:
    return {
        "grpc_port": 1,
        "metrics_port": 2,
        "tenant_header": "x-inferplane-tenant",
        "auth_required": True,
        "redis_url_env": "UNUSED",
        "models": [_model("short", None).model_dump()],
    }


def test_the_provider_metrics_are_named_once() -> None:
    assert gm.PROVIDER_REQUESTS_TOTAL == "inferplane_gateway_provider_requests_total"
    assert gm.PROVIDER_COST_USD_TOTAL.endswith("_usd_total")
    assert set(gm.PROVIDER_REASONS) == {"saturated", "unavailable", "cold_start"}
    # LiteLLM 1.110.2's router defaults (providers-routing-facts §1.2), which the cooldown follows.
    assert (providers.ALLOWED_FAILS, providers.COOLDOWN_SECONDS) == (3, 5.0)


async def _spill_and_answer(processor: Processor, answer: dict[str, Any]) -> Any:
    """A request the saturated model spills: its forward, then its access log entry with ``answer`` (what Envoy read
    of the response)."""
    stream, forwarded = await _ask(processor)
    await stream.close()
    if _provider_of(forwarded) is not None:
        settle(processor, forwarded, **answer)
    return forwarded


FAILED: dict[str, Any] = {"status": 503}  # the provider's error: no usage read
ANSWERED: dict[str, Any] = {"status": 200, "usage": (3, 1)}


def test_a_provider_failing_three_times_in_a_row_is_passed_over_while_it_cools_down(
    tokenizer_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failures in a row (answers without usage) cool the provider down: the tier's next consenting provider takes
    the spill, and with none left the platform refuses as without a provider; a success in between clears the
    count; once the cooldown passes the provider is used again."""
    monkeypatch.setattr(providers, "COOLDOWN_SECONDS", 0.2)

    async def run() -> None:
        second = PROVIDER.model_copy(update={"name": "second", "model": "vendor/other"})
        config = _config(tokenizer_file)
        tier = config.tiers[0].model_copy(update={"providers": (PROVIDER.name, "second")})
        processor = _processor(config.model_copy(update={"tiers": (tier,), "providers": (PROVIDER, second)}))
        _ready(processor, "short", "127.0.0.1:1")
        holder, _ = await _ask(processor)
        for answer in (FAILED, FAILED, ANSWERED, FAILED, FAILED):  # the success clears the first two
            assert _provider_of(await _spill_and_answer(processor, answer)) == PROVIDER.name
        assert processor.providers._cooldowns.labels(PROVIDER.name)._value.get() == 0
        assert _provider_of(await _spill_and_answer(processor, FAILED)) == PROVIDER.name  # the third in a row
        assert processor.providers._cooldowns.labels(PROVIDER.name)._value.get() == 1
        assert _provider_of(await _spill_and_answer(processor, FAILED)) == "second"
        assert _provider_of(await _spill_and_answer(processor, FAILED)) == "second"
        assert _provider_of(await _spill_and_answer(processor, FAILED)) == "second"  # now both cool down
        _, refused = await _ask(processor)
        assert (_status(refused), _error(refused)["code"]) == (429, "capacity_exceeded")
        deadline = asyncio.get_running_loop().time() + 5
        while _provider_of(forwarded := (await _ask(processor))[1]) is None:
            assert asyncio.get_running_loop().time() < deadline, "the cooldown never ended"
            await asyncio.sleep(0.05)
        assert _provider_of(forwarded) == PROVIDER.name
        await holder.close()

    asyncio.run(run())


def test_a_stream_without_usage_counts_as_failed_only_when_the_gateway_asked_for_usage(tokenizer_file: str) -> None:
    async def run() -> None:
        for inject, failures in ((True, 1), (False, 0)):
            processor = _processor(_config(tokenizer_file).model_copy(update={"inject_stream_usage": inject}))
            _ready(processor, "short", "127.0.0.1:1")
            holder, _ = await _ask(processor)
            stream, spilled = await _ask(processor, stream=True)
            assert _provider_of(spilled) == PROVIDER.name
            await stream.close()
            settle(processor, spilled, status=200, stream=True)  # a whole stream, without usage
            assert processor.providers._failed.get(PROVIDER.name, 0) == failures
            await holder.close()

    asyncio.run(run())
