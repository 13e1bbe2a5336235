"""The first step of a disaggregated request: its prompt computed on a prefill replica, whose KV cache the decode
replica then pulls (vLLM's KV transfer: NixlConnector).

The protocol is vLLM's own proxy's (``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` of vLLM, which
llm-d's routing sidecar follows): the prefill replica gets the client's body unstreamed, for one output token, with
``kv_transfer_params`` asking for a remote decode (:data:`REMOTE_DECODE`), and answers with the
``kv_transfer_params`` (its engine, the blocks it holds, its side-channel host and port) that the decode request
carries unchanged; the decode replica pulls those blocks before it generates.

As llm-d's prefix-based decider does, a request whose decode replica lacks fewer than ``min_uncached_tokens`` of its
prompt skips the step (moving a short remainder costs more than computing it), and so does one whose step fails in
any way (no prefill replica free, a timeout, an error, an answer without the parameters): the decode replica then
computes the prompt itself, so the client sees at most the time lost, never an error.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import httpx

from inferplane.processor.config import ModelConfig
from inferplane.processor.metrics import PrefillOutcome

log = logging.getLogger(__name__)

REMOTE_DECODE: Mapping[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
"""What the prefill request's ``kv_transfer_params`` say: compute the prompt and keep its blocks for a remote decode
(vLLM's proxy sends exactly these keys)."""

KV_TRANSFER_PARAMS = "kv_transfer_params"
"""The field of vLLM's completion and chat requests and responses that carries the transfer
(``vllm/entrypoints/openai/{completion,chat_completion}/protocol.py``)."""

_DECODE_ONLY_FIELDS = ("stream_options", "min_tokens", "min_completion_tokens")
"""Fields the prefill request drops: it is not streamed and generates one token."""


def prefill_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The prefill replica's body: the client's, unstreamed, one output token, asking for a remote decode."""
    request = {k: copy.deepcopy(v) for k, v in body.items() if k not in _DECODE_ONLY_FIELDS}
    request["stream"] = False
    request["max_tokens"] = 1
    if "max_completion_tokens" in request:
        request["max_completion_tokens"] = 1
    request[KV_TRANSFER_PARAMS] = dict(REMOTE_DECODE)
    return request


def transfer_params(status: int, payload: bytes) -> dict[str, Any] | None:
    """The ``kv_transfer_params`` of a prefill replica's answer, or None when it gave none worth sending on (an error,
    not JSON, or parameters naming no blocks: nothing was kept for the decode replica)."""
    if status != 200:
        return None
    try:
        answer = json.loads(payload)
    except ValueError:
        return None
    params = answer.get(KV_TRANSFER_PARAMS) if isinstance(answer, dict) else None
    if not isinstance(params, dict) or not params.get("remote_block_ids"):
        return None
    return params


class Placed(Protocol):
    """A slot taken on one replica (the processor's ``Placement``)."""

    @property
    def address(self) -> str:
        """``ip:port`` of the replica."""
        ...


PlacedT = TypeVar("PlacedT", bound=Placed)


@dataclass(frozen=True)
class PrefillCall:
    """One request's prefill step as decided: where, with what, and how much its decode replica already holds."""

    model: ModelConfig
    """The decode model (its ``prefill`` names the role)."""
    role: ModelConfig
    """The prefill role's model."""
    path: str
    """The request's path (``/v1/completions``, ``/v1/chat/completions``): the prefill replica serves the same API."""
    body: Mapping[str, Any]
    """The client's body as the decode replica will get it."""
    prompt_tokens: int
    cached_tokens: int
    """Prompt tokens the chosen decode replica is estimated to hold already (its prefix overlap)."""
    hashes: Sequence[int]
    """The prompt's block hashes: the prefill replica is picked by prefix overlap and load, as any replica is."""


class PrefillStage(Generic[PlacedT]):
    """Runs the prefill step of each request of a disaggregated model; one per processor worker."""

    def __init__(
        self,
        place: Callable[[PrefillCall], Awaitable[PlacedT | None]],
        unplace: Callable[[PlacedT], None],
        count: Callable[[str, PrefillOutcome], None],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._place = place
        self._unplace = unplace
        self._count = count
        self._client = httpx.AsyncClient(transport=transport)

    async def run(self, call: PrefillCall) -> dict[str, Any] | None:
        """The ``kv_transfer_params`` the decode request carries, or None: the decode replica computes the prompt."""
        assert call.model.prefill is not None
        settings = call.model.prefill
        if call.prompt_tokens - call.cached_tokens < settings.min_uncached_tokens:
            self._count(call.model.name, "short")
            return None
        placed = await self._place(call)
        if placed is None:
            self._count(call.model.name, "busy")
            return None
        try:
            params = await self._ask(placed.address, call, settings.timeout_seconds)
        finally:
            self._unplace(placed)
        self._count(call.model.name, "transferred" if params is not None else "failed")
        return params

    async def _ask(self, address: str, call: PrefillCall, timeout: float) -> dict[str, Any] | None:
        try:
            reply = await self._client.post(
                f"http://{address}{call.path}",
                json=prefill_request(call.body),
                headers={"x-request-id": f"prefill-{uuid.uuid4().hex}"},
                timeout=timeout,
            )
        except httpx.HTTPError as error:
            log.warning(
                "prefill of %s on %s failed: %r; its decode replica computes the prompt",
                call.model.name,
                address,
                error,
            )
            return None
        params = transfer_params(reply.status_code, reply.content)
        if params is None:
            log.warning(
                "prefill of %s on %s answered %d without transfer parameters",
                call.model.name,
                address,
                reply.status_code,
            )
        return params

    async def aclose(self) -> None:
        """Close the connections to the prefill replicas."""
        await self._client.aclose()
