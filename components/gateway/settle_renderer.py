"""How a forwarded request's response reaches its settlement without a message per chunk: Envoy reads the usage.

The processor settles every request it forwarded (its tokens accounted per tenant, tier and model, its budget
reservation corrected, a provider's answer counted; :mod:`inferplane.processor.settlement`). It used to read each
response chunk on an ext_proc stream to find the usage, which cost a gRPC message per chunk: on a stream of a token
a chunk, as Dynamo's mocker engines send, most of the gateway's CPU (``docs/gateway.md``). Now Envoy reads it:

* :func:`usage_filter`, a Lua filter, follows each settled response's body as it streams through (``bodyChunks``:
  Envoy hands the script each chunk and passes it on, buffering nothing) and records in dynamic metadata
  (:data:`~inferplane.processor.config.USAGE_METADATA_NAMESPACE`) the last ``usage`` it saw, whether the body is an
  event stream, and whether it ended. Only a 200's body is read for usage, as before.
* :func:`settle_log`, an access log in the HTTP connection manager, sends each settled request's entry (its status,
  flags and dynamic metadata: the settlement the placing filter set and what the Lua filter read) to the processor
  over gRPC (``envoy.service.accesslog.v3.AccessLogService``), entries batched per flush. A request whose client left
  mid-stream is logged too, without ``ended``: its reservation is returned, as the observing stream did.

Both are checked with the real Envoy 1.40.0 (``tests/gateway/test_settle_renderer.py``): a usage split across chunks,
a JSON body, an error's body, a completion whose text quotes a usage, a client gone.
"""

from __future__ import annotations

from typing import Any

from inferplane.components.gateway.envoy_fields import duration, typed
from inferplane.processor.config import (
    EVENT_STREAM_STARTS,
    SETTLE_LOG_NAME,
    SETTLE_METADATA_NAMESPACE,
    SETTLE_TENANT_KEY,
    USAGE_COMPLETION_KEY,
    USAGE_ENDED_KEY,
    USAGE_METADATA_NAMESPACE,
    USAGE_PROMPT_KEY,
    USAGE_STREAM_KEY,
)

USAGE_FILTER = "inferplane.usage"
"""The Lua filter's name in the HTTP filter chain."""

SETTLE_LOG_FLUSH_SECONDS = 0.1
"""How long an entry may wait in Envoy's buffer before it is sent (Envoy's default is 1 s): a response is settled at
most this long after it ends, and at a busy gateway one message carries many entries (up to 16 KiB of them)."""

USAGE_TAIL_BYTES = 1024
"""What the Lua filter keeps of the body read so far, so a ``usage`` object split across chunks is still found (an
OpenAI usage object, with its details, is about 150 bytes)."""

# Why a pattern and not a JSON parser: the filter must not parse every chunk of every stream, and a usage object's
# keys cannot be forged by a completion's text: inside a JSON string every quote is escaped, so ``"prompt_tokens":``
# (a quote right after the key) only matches a key. The last match wins: a stream's ``usage`` comes in its final
# chunk (``stream_options.include_usage``, which the processor sets), or in every chunk, cumulative, with vLLM's
# ``continuous_usage_stats``.
USAGE_LUA = f"""
local SETTLE = "{SETTLE_METADATA_NAMESPACE}"
local USAGE = "{USAGE_METADATA_NAMESPACE}"
local TAIL = {USAGE_TAIL_BYTES}

local STARTS = {{{", ".join(f'"{start}"' for start in EVENT_STREAM_STARTS)}}}

local function event_stream(bytes)
  for _, start in ipairs(STARTS) do
    if string.sub(bytes, 1, #start) == start then
      return true
    end
  end
  return false
end

function envoy_on_request(handle)
end

function envoy_on_response(handle)
  -- Envoy's wrappers do not outlive a yield (each chunk is one): the metadata is looked up again where it is used.
  if handle:streamInfo():dynamicMetadata():get(SETTLE) == nil then
    return
  end
  local scan = handle:headers():get(":status") == "200"
  local first = true
  local tail = ""
  local prompt, completion
  for chunk in handle:bodyChunks() do
    local size = chunk:length()
    if size > 0 then
      local bytes = chunk:getBytes(0, size)
      if first then
        first = false
        handle:streamInfo():dynamicMetadata():set(USAGE, "{USAGE_STREAM_KEY}", event_stream(bytes))
      end
      if scan then
        local text = tail .. bytes
        if string.find(text, '"prompt_tokens"', 1, true) then
          for value in string.gmatch(text, '"prompt_tokens"%s*:%s*(%d+)') do prompt = value end
          for value in string.gmatch(text, '"completion_tokens"%s*:%s*(%d+)') do completion = value end
          -- Recorded as soon as read: a client that closes at "[DONE]", before the body's end reaches Envoy, ends
          -- this loop without an end, and its usage must still be accounted.
          if prompt ~= nil and completion ~= nil then
            local metadata = handle:streamInfo():dynamicMetadata()
            metadata:set(USAGE, "{USAGE_PROMPT_KEY}", tonumber(prompt))
            metadata:set(USAGE, "{USAGE_COMPLETION_KEY}", tonumber(completion))
          end
        end
        tail = string.sub(text, -TAIL)
      end
    end
  end
  handle:streamInfo():dynamicMetadata():set(USAGE, "{USAGE_ENDED_KEY}", true)
end
"""


def usage_filter() -> dict[str, Any]:
    """The Lua filter that reads a settled response's usage as it streams through (see the module's doc)."""
    return {
        "name": USAGE_FILTER,
        "typed_config": typed(
            "envoy.extensions.filters.http.lua.v3.Lua", default_source_code={"inline_string": USAGE_LUA}
        ),
    }


def settle_log(processor_cluster: str) -> dict[str, Any]:
    """The access log that sends each settled request's entry to the processor (the requests the placing filter
    handed a settlement; a local reply before it, such as a rejection, has none and is not sent)."""
    return {
        "name": "envoy.access_loggers.http_grpc",
        "filter": {
            "metadata_filter": {
                "matcher": {
                    "filter": SETTLE_METADATA_NAMESPACE,
                    "path": [{"key": SETTLE_TENANT_KEY}],
                    "value": {"present_match": True},
                },
                "match_if_key_not_found": False,
            }
        },
        "typed_config": typed(
            "envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig",
            common_config={
                "log_name": SETTLE_LOG_NAME,
                "grpc_service": {"envoy_grpc": {"cluster_name": processor_cluster}},
                "transport_api_version": "V3",
                "buffer_flush_interval": duration(SETTLE_LOG_FLUSH_SECONDS),
            },
        ),
    }
