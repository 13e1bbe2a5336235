"""The processor with its cache stage, driven message by message as Envoy drives it (real Redis with RediSearch):
a miss goes on and is stored from the response; a repeat is answered by the processor itself."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from google.protobuf import json_format
from prometheus_client import CollectorRegistry

from inferplane.processor.cache.config import CacheConfig, CachedModel
from inferplane.processor.cache.metrics import CacheMetrics
from inferplane.processor.cache.sse import assemble, events
from inferplane.processor.cache.stage import CacheStage
from inferplane.processor.cache.store import ResponseCache, connect
from inferplane.processor.ext_proc import Processor
from tests.processor.test_cache_rules import completion
from tests.processor.test_ext_proc import (
    Stream,
    _body,
    _config,
    _headers,
    observe,
)

PROMPT = {"role": "user", "content": "How do I reset my password?"}


def _metadata(response: Any) -> dict[str, Any]:
    return json_format.MessageToDict(response.dynamic_metadata)


async def _until_stored(client: Any, pattern: str, seconds: float = 10.0) -> None:
    """Wait until a key matching ``pattern`` exists (the answer is stored in the background)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not [key async for key in client.scan_iter(pattern)]:
        assert asyncio.get_running_loop().time() < deadline, f"nothing stored under {pattern}"
        await asyncio.sleep(0.02)


def test_a_miss_is_stored_from_the_response_and_a_repeat_is_answered_by_the_processor(redis_port: int) -> None:
    """The answer is read by another worker than the one that placed the request (Envoy balances the observing
    stream on its own): the lookup travels through the cache, held under the token the settlement carries."""

    async def main() -> list[Any]:
        config = _config(None).model_copy(
            update={
                "cache": CacheConfig(models={"short": CachedModel(revision="r1")}, key_prefix="proc", timeout_ms=1000)
            }
        )
        assert config.cache is not None
        stages = [
            CacheStage(
                ResponseCache(
                    config.cache,
                    CacheMetrics(CollectorRegistry()),
                    client=connect(f"redis://127.0.0.1:{redis_port}", config.cache),
                )
            )
            for _ in range(2)
        ]
        for stage in stages:
            await stage.start()
        processor, other_worker = (Processor(config, None, CollectorRegistry(), stage) for stage in stages)
        payload = {"model": "short", "messages": [PROMPT], "temperature": 0, "max_tokens": 8}

        miss = Stream(processor)
        await miss.send(_headers())
        forwarded = await miss.send(_body(payload))
        await miss.close()
        client = stages[0].cache.client
        await _until_stored(client, "proc:h:*")  # held for the answer, written as the request went on
        answer = json.dumps(completion("Use the reset link.")).encode()
        await observe(other_worker, forwarded, [(answer[:20], False), (answer[20:], True)], 200)
        await _until_stored(client, "proc:x:*")
        assert not [key async for key in client.scan_iter("proc:h:*")]  # taken by the reader

        results = [forwarded.WhichOneof("response"), _metadata(forwarded)]
        for extra in ({}, {"stream": True}):
            repeat = Stream(processor)
            await repeat.send(_headers())
            reply = await repeat.send(_body({**payload, **extra}))
            results.append(reply.immediate_response)
        for stage in stages:
            await stage.aclose()
        return results

    forwarded, miss_metadata, hit, streamed = asyncio.run(main())
    assert forwarded == "request_body"
    assert miss_metadata["inferplane"] == {"cache_result": "miss"}  # the model route echoes it as x-inferplane-cache
    assert len(miss_metadata["inferplane.settle"]["cache"]) == 32  # the held lookup's token
    assert hit.status.code == 200 and json.loads(hit.body)["choices"][0]["message"]["content"] == "Use the reset link."
    hit_headers = {h.header.key: h.header.raw_value.decode() for h in hit.headers.set_headers}
    assert hit_headers == {
        "content-type": "application/json",
        "x-inferplane-cache": "hit",
        "x-inferplane-cache-kind": "exact",
    }
    stream_headers = {h.header.key: h.header.raw_value.decode() for h in streamed.headers.set_headers}
    assert stream_headers["content-type"] == "text/event-stream"
    rebuilt = assemble(events(streamed.body))
    assert rebuilt is not None and rebuilt["choices"][0]["message"]["content"] == "Use the reset link."


def test_a_miss_goes_on_while_its_lookup_is_still_being_held(redis_port: int) -> None:
    """Redis takes no write for a while (``CLIENT PAUSE ... WRITE``: reads, the lookup's GET and KNN, still answer):
    the miss is forwarded with its held lookup's token before the lookup is in Redis, and the lookup lands once
    writes resume. The request never waits on that write; its answer is read no sooner than the response's end."""

    async def main() -> tuple[Any, bool]:
        config = _config(None).model_copy(
            update={
                "cache": CacheConfig(
                    models={"short": CachedModel(revision="r1")}, key_prefix="paused", timeout_ms=5_000
                )
            }
        )
        assert config.cache is not None
        stage = CacheStage(
            ResponseCache(
                config.cache,
                CacheMetrics(CollectorRegistry()),
                client=connect(f"redis://127.0.0.1:{redis_port}", config.cache),
            )
        )
        await stage.start()
        processor = Processor(config, None, CollectorRegistry(), stage)
        client = stage.cache.client
        await client.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")  # type: ignore[no-untyped-call]
        try:
            miss = Stream(processor)
            await miss.send(_headers())
            forwarded = await miss.send(
                _body({"model": "short", "messages": [PROMPT], "temperature": 0, "max_tokens": 8})
            )
            await miss.close()
            held_while_paused = bool([key async for key in client.scan_iter("paused:h:*")])
        finally:
            await client.execute_command("CLIENT", "UNPAUSE")  # type: ignore[no-untyped-call]
        await _until_stored(client, "paused:h:*")
        await stage.aclose()
        return forwarded, held_while_paused

    forwarded, held_while_paused = asyncio.run(main())
    assert forwarded.WhichOneof("response") == "request_body"
    assert len(_metadata(forwarded)["inferplane.settle"]["cache"]) == 32  # the token the answer's reader will use
    assert not held_while_paused  # and _until_stored saw it land once writes resumed
