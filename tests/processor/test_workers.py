"""Processor workers: the per-pod admission queues split exactly between them (the per-replica slots are shared
through Redis, not split), the renderer runs ``gateway.processor_workers`` of them and lists each in Envoy's processor
cluster, and, with the real Envoy 1.40, two workers behind one supervisor share the requests, report them through one
metrics endpoint, and stop together: on SIGTERM cleanly, and when one dies the supervisor fails (so Kubernetes
restarts the container) rather than run on half."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.processor import metrics as gm
from inferplane.processor.config import ProcessorConfig
from tests.gateway_support import (
    SCRAPE_TIMEOUT_S,
    Gateway,
    Procs,
    gateway_addresses,
    gateway_metric,
    read_http_request,
    start_gateway,
    start_redis,
    wait_until,
)
from tests.ports import free_port, free_ports
from tests.processor.test_cache_rules import completion
from tests.tiny_model import ARCHITECTURE, tiny_platform, write_model

MODEL = "tiny"
KEY = "worker-test-key-0123456789abcdefghij"
COMPLETION = json.dumps(completion("w5")).encode()


def _spec(workers: int, concurrency: int = 64) -> PlatformSpec:
    return tiny_platform(
        [{"name": MODEL, "concurrency": concurrency, "routing_tier": "standard"}],
        {
            "replicas": 1,
            "processor_workers": workers,
            "rate_limit": {"requests_per_minute": 100_000, "tokens_per_minute": 10_000_000},
            "tenants": [{"name": "t", "tiers": ["standard"]}],
        },
    )


@given(total=st.integers(min_value=0, max_value=10_000), workers=st.integers(min_value=1, max_value=16))
def test_worker_shares_add_up_to_the_pods_queue(total: int, workers: int) -> None:
    config = _processor_config(workers=1).model_copy(update={"workers": workers})
    shares = [config.worker_share(total, worker) for worker in range(workers)]
    assert sum(shares) == total
    assert max(shares) - min(shares) <= 1


def _processor_config(workers: int, concurrency: int = 64) -> ProcessorConfig:
    spec = _spec(workers, concurrency)
    return ProcessorConfig.model_validate_json(gc.render_gateway(spec, size_platform(spec), "eks").processor_json)


def test_the_renderer_runs_and_lists_every_worker_the_spec_asks_for() -> None:
    spec = _spec(workers=3)
    rendered = gc.render_gateway(spec, size_platform(spec), "eks")
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    assert config.workers == 3
    clusters = {c["name"]: c for c in yaml.safe_load(rendered.envoy_yaml)["static_resources"]["clusters"]}
    processor = clusters[gc.PROCESSOR_CLUSTER]
    assert processor["lb_policy"] == "LEAST_REQUEST"
    ports = [
        e["endpoint"]["address"]["socket_address"]["port_value"]
        for e in processor["load_assignment"]["endpoints"][0]["lb_endpoints"]
    ]
    assert ports == [config.grpc_port, config.grpc_port + 1, config.grpc_port + 2]
    # More workers than a replica has sequences: no longer capped, since no worker holds a share of the slots.
    small = _processor_config(workers=16, concurrency=2)
    assert small.workers == 16
    [model] = small.models
    assert model.max_num_seqs == 2
    # With Redis down each worker keeps to one request a replica: max(1, 2 // (1 replica x 4 x 16 workers)).
    assert model.fallback_share == 1


def test_each_pods_queue_is_split_whole_and_the_worker_count_is_bounded() -> None:
    config = _processor_config(workers=16, concurrency=2)
    [model] = config.models
    shares = [config.worker_share(model.queue_max, worker) for worker in range(16)]
    assert (model.queue_max, shares) == (32, [2] * 16)
    raw = config.model_dump()
    raw["workers"] = 17
    with pytest.raises(ValueError, match=r"workers\n  Input should be less than or equal to 16"):
        ProcessorConfig.model_validate(raw)


class Stub:
    """An OpenAI chat completion for every POST, on a thread (keep-alive, chunked bodies read)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.metrics_reads: list[float] = []
        """When each ``GET /metrics`` came (monotonic seconds)."""
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._run, daemon=True).start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head, _ = await read_http_request(reader)
                    if head.startswith(b"GET /metrics "):
                        self.metrics_reads.append(time.monotonic())
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                        + str(len(COMPLETION)).encode()
                        + b"\r\n\r\n"
                        + COMPLETION
                    )
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        async def main() -> None:
            await asyncio.start_server(answer, "127.0.0.1", self.port)
            self._ready.set()
            await asyncio.Event().wait()

        self._loop.run_until_complete(main())


@pytest.fixture
def stub() -> Stub:
    return Stub()


@pytest.fixture
def two_workers(tmp_path: Path, stub: Stub) -> Iterator[tuple[Procs, Gateway]]:
    procs = Procs(tmp_path)
    try:
        spec = _spec(workers=2)
        keys, tokenizers = tmp_path / "keys", tmp_path / "tokenizers"
        keys.mkdir()
        (keys / gc.API_KEYS_FILE).write_text(gc.render_api_key_file({"t": KEY}))
        write_model(tokenizers / ARCHITECTURE["hf_repo"])
        addresses = gateway_addresses({MODEL: [("127.0.0.1", stub.port)]}, keys, tokenizers, "-workers")
        addresses = addresses.model_copy(update={"processor_port": free_ports(2)})
        gateway = start_gateway(
            procs,
            "gw",
            spec=spec,
            plan=size_platform(spec),
            addresses=addresses,
            redis_url=f"redis://127.0.0.1:{start_redis(procs)}/0",
        )
        yield procs, gateway
    finally:
        procs.stop_all()


def _chat(gateway: Gateway) -> int:
    request = urllib.request.Request(
        f"{gateway.base_url}/chat/completions",
        data=json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "w1 w2"}], "max_tokens": 4}).encode(),
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        status: int = response.status
        return status


def _workers(procs: Procs) -> list[int]:
    supervisor = procs.procs["gw-processor"].pid
    return [int(p) for p in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_two_workers_share_the_requests_and_report_them_as_one(two_workers: tuple[Procs, Gateway]) -> None:
    procs, gateway = two_workers
    assert len(_workers(procs)) == 2
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda _: _chat(gateway), range(40))) == [200] * 40
    metrics = urllib.request.urlopen(gateway.metrics_url, timeout=SCRAPE_TIMEOUT_S).read().decode()
    admitted = re.search(rf'^{gm.REQUESTS_TOTAL}\{{[^}}]*outcome="admitted"[^}}]*\}} (\S+)$', metrics, re.M)
    assert admitted is not None and float(admitted.group(1)) == 40  # one endpoint, the workers' sum
    # The workers' CPU, summed into one series, counted once a second (the run may have begun within the first).
    deadline = time.monotonic() + 10
    while (cpu := _cpu_seconds(gateway)) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cpu > 0
    # A slot is given back when Envoy closes the request's ext_proc stream, just after the client has its answer.
    deadline = time.monotonic() + 10
    while (inflight := _inflight(gateway)) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert inflight == 0  # the live workers' sum: every slot came back

    # Every answer's usage settled from Envoy's access log entries, whichever worker got them (the stub's 9 + 4
    # tokens, read by Envoy's Lua filter).
    def tokens(kind: str) -> float:
        return gateway_metric(gateway, gm.TOKENS_TOTAL, kind=kind)

    wait_until(lambda: tokens("completion") >= 40 * 4, 10, "every answer's usage accounted")
    assert (tokens("completion"), tokens("prompt")) == (40 * 4, 40 * 9)

    # Read once the entries arrived, so the access log's streams are open: one ext_proc stream a request (the
    # placing filter's: the observing filter is off for an answer the cache does not store), both workers taking
    # some, and the access log's, one per Envoy worker thread that logged (``--concurrency 2``), long-lived.
    admin = urllib.request.urlopen(
        f"http://127.0.0.1:{gateway.addresses.admin_port}/clusters", timeout=SCRAPE_TIMEOUT_S
    ).read()
    served = {
        int(port): int(count)
        for port, count in re.findall(rf"{gc.PROCESSOR_CLUSTER}::127\.0\.0\.1:(\d+)::rq_total::(\d+)", admin.decode())
    }
    first = gateway.addresses.processor_port
    assert set(served) == {first, first + 1}
    assert 40 < sum(served.values()) <= 42 and min(served.values()) > 0

    # Envoy's access log: a line a completion, with the gateway's own share of its time to first token.
    def completions() -> list[dict[str, object]]:
        lines = [json.loads(line) for line in procs.log("gw-envoy").splitlines() if line.startswith("{")]
        return [line for line in lines if line["path"] == "/v1/chat/completions"]

    wait_until(lambda: len(completions()) == 40, 10, "a log line a completion")
    decisions = [line["decision_us"] for line in completions()]
    assert all(isinstance(us, int) and 0 < us < 10_000_000 for us in decisions), decisions


READS = 4
"""Metric reads the round test watches."""


def test_the_pod_reads_each_replica_once_a_round_for_both_workers(
    two_workers: tuple[Procs, Gateway], stub: Stub
) -> None:
    """The supervisor's watcher reads the replica and both workers follow its rounds: the reads come one round apart,
    where two workers reading on their own would interleave theirs (of any two consecutive gaps between their reads,
    one is at most half an interval: four reads, three gaps, show which)."""
    _, gateway = two_workers
    interval = ProcessorConfig.model_validate_json(gateway.rendered.processor_json).models[0].routing
    seen = len(stub.metrics_reads)
    deadline = time.monotonic() + 30
    while len(stub.metrics_reads) < seen + READS and time.monotonic() < deadline:
        time.sleep(0.05)
    reads = stub.metrics_reads[seen : seen + READS]
    assert len(reads) == READS
    gaps = [later - earlier for earlier, later in itertools.pairwise(reads)]
    assert min(gaps) >= 0.8 * interval.scrape_interval_seconds, gaps  # a round sleeps its interval after its read
    assert _chat(gateway) == 200  # and the workers route from what it read


def _cpu_seconds(gateway: Gateway) -> float:
    metrics = urllib.request.urlopen(gateway.metrics_url, timeout=SCRAPE_TIMEOUT_S).read().decode()
    found = re.search(rf"^{gm.PROCESSOR_CPU_SECONDS_TOTAL} (\S+)$", metrics, re.M)
    assert found is not None, "the series is exposed from the start"
    return float(found.group(1))


def _inflight(gateway: Gateway) -> float | None:
    metrics = urllib.request.urlopen(gateway.metrics_url, timeout=SCRAPE_TIMEOUT_S).read().decode()
    found = re.search(rf'^{gm.INFLIGHT_REQUESTS}\{{model="{MODEL}"\}} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else None


def test_sigterm_stops_the_supervisor_and_every_worker(two_workers: tuple[Procs, Gateway]) -> None:
    procs, _ = two_workers
    workers, supervisor = _workers(procs), procs.procs["gw-processor"]
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=40) == 0
    assert not any(_alive(pid) for pid in workers)


def test_a_dead_worker_fails_the_supervisor_and_takes_the_other_down(two_workers: tuple[Procs, Gateway]) -> None:
    procs, _ = two_workers
    first, second = _workers(procs)
    supervisor = procs.procs["gw-processor"]
    os.kill(first, signal.SIGKILL)
    assert supervisor.wait(timeout=40) == 1  # Kubernetes restarts the container
    deadline = time.monotonic() + 10
    while _alive(second) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(second)


def test_a_worker_that_cannot_listen_fails_the_start(tmp_path: Path) -> None:
    config = _processor_config(workers=2).model_dump(mode="json")
    config.update(grpc_port=free_ports(2), metrics_port=free_port(), redis_url_env="UNSET_FOR_THIS_TEST")
    path = tmp_path / "processor.json"
    path.write_text(json.dumps(config))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", config["grpc_port"] + 1))
        taken.listen()
        result = subprocess.run(
            [sys.executable, "-m", "inferplane.processor", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1
    assert "processor worker 1 exited (status 1): stopping the others" in result.stderr
