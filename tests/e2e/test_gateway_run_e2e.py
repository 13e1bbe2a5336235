"""``inferplane gateway run`` end to end, as a user runs it: the command started as a subprocess in front of a real
vLLM 0.32 server on CPU (the tiny Llama, dummy weights; one of the run's fleet, tests/fleet.py), its printed base URL
and keys read from its output, and the official ``openai`` client driving it: a completion, a stream, 401, 429 at a
tenant's request limit, ``context_length_exceeded``; then Ctrl-C (SIGINT to its process group, as a terminal sends
it) leaves no process of that group and no file in its temporary directory, while the vLLM it did not start keeps
serving.

The stack is written by the test into a temporary project: model ``tiny`` (tier ``standard``), tenants ``team-a``
and ``rpm-tight`` (2 requests a minute). The tests run in file order on one worker (xdist group); Ctrl-C comes last.
"""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.tool.exitcodes import EXIT_OK
from inferplane.tool.stackfile import load_stack
from tests.envoy import envoy_binary
from tests.fleet import Fleet, FleetServer, check_fits
from tests.ports import free_port
from tests.tiny_model import words
from tests.tool.test_gateway_run import GatewayRun, tiny_stack, write_project, write_tokenizers

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("vllm-fleet")]

MODEL = "tiny"
TIGHT_RPM = 2


@dataclass
class Running:
    """The command, the vLLM server behind it and its port."""

    gateway: GatewayRun
    server: FleetServer

    @property
    def vllm_port(self) -> int:
        """The port of the vLLM server the command was pointed at."""
        return self.server.port

    def client(self, tenant: str) -> openai.OpenAI:
        """The tenant's client with the key the command printed; no client retries (429 and 5xx must surface)."""
        assert self.gateway.keys is not None
        return openai.OpenAI(base_url=self.gateway.base_url, api_key=self.gateway.keys[tenant], max_retries=0)

    def vllm_posts(self) -> int:
        """Completion requests vLLM has received (its access log)."""
        return self.server.posts()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, fleet: Fleet) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("gateway-run-e2e")
    tenants = [
        {"name": "team-a", "tiers": ["standard"]},
        {"name": "rpm-tight", "tiers": ["standard"], "requests_per_minute": TIGHT_RPM},
    ]
    document = tiny_stack([{"name": MODEL, "routing_tier": "standard"}], {"tenants": tenants})
    project = write_project(directory / "project", "local", document)
    settings = size_platform(load_stack(project, "local").platform).deployments[0].result.vllm
    check_fits(settings.max_model_len, settings.max_num_seqs, MODEL)
    tokenizers = write_tokenizers(directory / "tokenizers")
    server = fleet["vllm-tiny"]
    gateway: GatewayRun | None = None
    try:
        argv = [
            "--project-dir",
            str(project),
            "--stack",
            "local",
            "--upstream",
            f"{MODEL}=http://127.0.0.1:{server.port}",
        ]
        argv += ["--tokenizers", str(tokenizers), "--port", str(free_port()), "--envoy", str(envoy_binary())]
        gateway = GatewayRun.start(argv, directory / "run")
        gateway.wait_ready()
        yield Running(gateway, server)
    finally:
        if gateway is not None:
            gateway.kill()


def _fresh_window() -> None:
    """Budgets count per clock minute: do not start a budget test in a window's last seconds."""
    left = 60 - time.time() % 60
    if left < 8:
        time.sleep(left + 0.5)


def _chat(client: openai.OpenAI, model: str = MODEL, prompt: str = "w1 w2 w3", **kwargs: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}], **{"max_tokens": 8, **kwargs}
    )


def test_the_banner_has_one_key_per_tenant_and_the_routes(running: Running) -> None:
    assert running.gateway.keys is not None and sorted(running.gateway.keys) == ["rpm-tight", "team-a"]
    assert running.gateway.base_url.startswith("http://127.0.0.1:") and running.gateway.base_url.endswith("/v1")
    assert f"    {MODEL}      model, tier standard, context " in running.gateway.out
    assert f"-> http://127.0.0.1:{running.vllm_port}\n" in running.gateway.out
    assert f"    standard  tier -> {MODEL}\n" in running.gateway.out
    assert "no tokenizer.json" not in running.gateway.err


def test_a_completion_by_model_and_by_tier(running: Running) -> None:
    client = running.client("team-a")
    by_model = _chat(client)
    completion = by_model.parse()
    assert completion.model == MODEL
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert 1 <= completion.usage.completion_tokens <= 8
    assert by_model.headers[gc.UPSTREAM_HEADER] == MODEL
    assert _chat(client, "standard").parse().model == MODEL  # a tier names its first model


def test_a_stream_ends_with_the_usage_the_gateway_asked_for(running: Running) -> None:
    stream = running.client("team-a").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "w4 w5 w6"}], max_tokens=8, stream=True
    )
    chunks = list(stream)
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert content, chunks
    # The client did not ask for usage; the processor sets stream_options.include_usage, so the last chunk has it.
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


def test_a_wrong_key_is_401(running: Running) -> None:
    client = openai.OpenAI(base_url=running.gateway.base_url, api_key="not-a-key-of-anyone-0123456789", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as error:
        _chat(client)
    assert error.value.code == "invalid_api_key"


def test_a_tenant_past_its_request_limit_gets_429(running: Running) -> None:
    _fresh_window()
    client = running.client("rpm-tight")
    for _ in range(TIGHT_RPM):
        assert _chat(client).parse().model == MODEL
    with pytest.raises(openai.RateLimitError) as error:
        _chat(client)
    assert error.value.code == "rate_limit_exceeded"
    assert int(error.value.response.headers["retry-after"]) >= 1


def test_a_prompt_longer_than_the_context_never_reaches_vllm(running: Running) -> None:
    before = running.vllm_posts()
    with pytest.raises(openai.BadRequestError) as error:
        _chat(running.client("team-a"), prompt=words(2100), max_tokens=10)
    assert error.value.code == "context_length_exceeded"
    assert running.vllm_posts() == before


def test_ctrl_c_leaves_no_process_and_no_file(running: Running) -> None:
    gateway = running.gateway
    assert gateway.group_alive()
    assert gateway.stop(signal.SIGINT, group=True) == EXIT_OK
    assert not gateway.group_alive()
    assert list(gateway.tmp.iterdir()) == []
    assert "inferplane gateway run: stopping envoy, processor, redis, removing " in gateway.out
    # Only what it started: the vLLM server it was pointed at still answers.
    with urllib.request.urlopen(f"http://127.0.0.1:{running.vllm_port}/health", timeout=10) as response:
        assert response.status == 200
