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
    _response_body,
)

PROMPT = {"role": "user", "content": "How do I reset my password?"}


def _metadata(response: Any) -> dict[str, Any]:
    return json_format.MessageToDict(response.dynamic_metadata)


def test_a_miss_is_stored_from_the_response_and_a_repeat_is_answered_by_the_processor(redis_port: int) -> None:
    async def main() -> list[Any]:
        config = _config(None).model_copy(
            update={
                "cache": CacheConfig(models={"short": CachedModel(revision="r1")}, key_prefix="proc", timeout_ms=1000)
            }
        )
        assert config.cache is not None
        client = connect(f"redis://127.0.0.1:{redis_port}", config.cache)
        stage = CacheStage(ResponseCache(config.cache, CacheMetrics(CollectorRegistry()), client=client))
        await stage.start()
        processor = Processor(config, None, CollectorRegistry(), stage)
        payload = {"model": "short", "messages": [PROMPT], "temperature": 0, "max_tokens": 8}

        miss = Stream(processor)
        await miss.send(_headers())
        forwarded = await miss.send(_body(payload))
        await miss.send(_response_body(json.dumps(completion("Use the reset link."))[:20].encode(), False))
        await miss.send(_response_body(json.dumps(completion("Use the reset link."))[20:].encode(), True))
        await miss.close()
        await asyncio.sleep(0.3)  # stored in the background

        results = [forwarded.WhichOneof("response"), _metadata(forwarded)]
        for extra in ({}, {"stream": True}):
            repeat = Stream(processor)
            await repeat.send(_headers())
            reply = await repeat.send(_body({**payload, **extra}))
            results.append(reply.immediate_response)
        await stage.aclose()
        return results

    forwarded, miss_metadata, hit, streamed = asyncio.run(main())
    assert forwarded == "request_body"
    assert miss_metadata == {"inferplane": {"cache_result": "miss"}}  # the model route echoes it as x-inferplane-cache
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
