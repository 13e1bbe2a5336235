"""A simulated fleet: N replicas of one model, each NVIDIA Dynamo's mocker engine with the engine settings the stack's
sizing renders and the timing profile the performance model gives, shaped like a pod.

Per replica (``../shared/reference/simulation-facts.md``, ai-dynamo 1.6.1): a mocker (``python -m dynamo.mocker``)
registered in a namespace of its own, a one-worker round-robin frontend (``python -m dynamo.frontend``, the OpenAI
API the mocker lacks) for that namespace, both on the replica's own loopback address (``127.0.1.i``, its "pod IP";
Dynamo's processes advertise the machine's external address unless ``DYN_*_HOST`` say otherwise), and one listener of
the join process (:mod:`.join`) on that address serving ``/v1/*`` and the mocker's ``/metrics`` together. No etcd or
NATS: file discovery (``DYN_FILE_KV``), the TCP request plane, the ZMQ event plane.

A replica is ready when its frontend lists the model, a one-token request through its address succeeds, and its
``/metrics`` carry the running-requests series the gateway reads for the engine: a mocker reports its series only
after its first request, and the gateway's router counts a replica without them as not ready.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity.perf_model import Replica
from inferplane.components.capacity.sizing import DeploymentSizing
from inferplane.components.gateway.renderer import LOAD_SERIES, kv_block_tokens
from inferplane.components.spec.platform_spec import Engine, ModelDeploymentSpec
from inferplane.processor.config import MetricSelector
from inferplane.processor.endpoints import parse_samples
from inferplane.tool.exitcodes import EXIT_FAILED
from inferplane.tool.gateway_run import GatewayRunError, Processes, pick_ports
from inferplane.tool.simulate.join import Route

SIMULATOR_ENV = "INFERPLANE_SIMULATOR_PYTHON"
"""A Python interpreter with ``ai-dynamo`` installed, when it is neither the project's ``make simulator`` venv nor
this interpreter."""
SIMULATOR_PROJECT_VENV = Path(".ci/cache/simulator-venv")
"""Where ``make simulator`` installs it (``.ci/simulator-env``)."""
INSTALL_HINT = (
    "NVIDIA Dynamo's mocker is not installed: run `make simulator` in the project (its own venv, "
    f"{SIMULATOR_PROJECT_VENV}), or `pip install 'inferplane[simulate]'` where ai-dynamo installs, or set "
    f"${SIMULATOR_ENV} to a Python that has it"
)
ENGINE_TYPES = {"vllm": "vllm", "triton": "trtllm", "sglang": "sglang"}
"""The mocker's ``--engine-type`` for each engine the platform runs: whose scheduler it simulates."""


class MockerSeries(BaseModel):
    """The mocker's own names for the series a run reads, per simulated engine (measured on ai-dynamo 1.6.1: it
    prefixes vLLM-style names with the engine, and SGLang's with SGLang's own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    running: str = Field(description="Requests in the running batch.")
    waiting: str = Field(description="Requests waiting for a batch slot.")
    finished: str = Field(description="Requests finished (a histogram's count).")
    preemptions: str | None = Field(description="Preemptions (None: the mocker reports none for the engine).")


MOCKER_SERIES = {
    "vllm": MockerSeries(
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        finished="vllm:e2e_request_latency_seconds_count",
        preemptions="vllm:num_preemptions_total",
    ),
    "trtllm": MockerSeries(
        running="trtllm:num_requests_running",
        waiting="trtllm:num_requests_waiting",
        finished="trtllm:e2e_request_latency_seconds_count",
        preemptions="trtllm:num_preemptions_total",
    ),
    "sglang": MockerSeries(
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        finished="sglang:e2e_request_latency_seconds_count",
        preemptions=None,
    ),
}
"""Per ``--engine-type``, what its mocker's ``/metrics`` call the series a run reads."""
READY_SECONDS_PER_REPLICA = 8.0
"""A replica's two processes take 1-3 s of a core to start; the fleet's wait is this per replica, at least a minute."""
INOTIFY_PER_PROCESS = 2
"""inotify instances each Dynamo process opens (the file discovery backend's watches): 64 processes reach Linux's
default ``fs.inotify.max_user_instances`` of 128 (measured: ``Too many open files (os error 24)``)."""
FIRST_HOST = (127, 0, 1, 1)
"""Replica i listens on 127.0.1.(1 + i): loopback, apart from the gateway's 127.0.0.1 ports."""
MAX_REPLICAS = 250


class SimulatorError(GatewayRunError):
    """Why a fleet cannot start (exit 3 unless said otherwise)."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message, code)


class EngineSettings(BaseModel):
    """What a simulated engine is started with: the settings sizing renders for the model's real engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    served_model: str = Field(description="The deployment's name: the model clients (and the gateway) ask for.")
    engine: Engine = Field(
        default="vllm", description="The engine the replica stands for (the gateway reads its metric names)."
    )
    engine_type: str = Field(description="The mocker's ``--engine-type``: whose scheduler it simulates.")
    max_num_seqs: int = Field(ge=1, description="Batch slots (vLLM ``--max-num-seqs`` and its equivalents).")
    max_num_batched_tokens: int = Field(ge=1, description="Tokens one step carries (the chunked-prefill budget).")
    block_size: int = Field(ge=1, description="Tokens per KV block (the gateway's prefix index uses the same).")
    num_gpu_blocks: int = Field(ge=1, description="Blocks of the KV pool the engine allocates (the whole replica).")
    max_model_len: int = Field(ge=1, description="The longest prompt + output a sequence may reach.")


def engine_settings(deployment: ModelDeploymentSpec, sizing: DeploymentSizing, replica: Replica) -> EngineSettings:
    """The settings of ``deployment``'s engine as sized: slots and step budget as the performance model reads them
    (:func:`~inferplane.components.capacity.perf_model.replica_from_sizing`), the engine's block, and the KV pool the
    engine allocates, in blocks."""
    block = kv_block_tokens(sizing)
    return EngineSettings(
        served_model=deployment.name,
        engine=sizing.engine,
        engine_type=ENGINE_TYPES[sizing.engine],
        max_num_seqs=replica.max_num_seqs,
        max_num_batched_tokens=replica.max_num_batched_tokens,
        block_size=block,
        num_gpu_blocks=max(1, replica.kv_capacity_tokens // block),
        max_model_len=deployment.max_context,
    )


def mocker_args(settings: EngineSettings, model_dir: Path, profile: Path, namespace: str) -> list[str]:
    """``dynamo.mocker``'s arguments (names from its ``--help``, ai-dynamo 1.6.1)."""
    return [
        "-m",
        "dynamo.mocker",
        "--model-path",
        str(model_dir),
        "--model-name",
        settings.served_model,
        "--discovery-backend",
        "file",
        "--endpoint",
        f"dyn://{namespace}.backend.generate",
        "--engine-type",
        settings.engine_type,
        "--block-size",
        str(settings.block_size),
        "--num-gpu-blocks-override",
        str(settings.num_gpu_blocks),
        "--max-num-seqs",
        str(settings.max_num_seqs),
        "--max-num-batched-tokens",
        str(settings.max_num_batched_tokens),
        "--max-model-len",
        str(settings.max_model_len),
        "--planner-profile-data",
        str(profile),
    ]


def frontend_args(host: str, port: int, namespace: str) -> list[str]:
    """``dynamo.frontend``'s arguments: the OpenAI API of one namespace's one worker."""
    return [
        "-m",
        "dynamo.frontend",
        "--http-host",
        host,
        "--http-port",
        str(port),
        "--discovery-backend",
        "file",
        "--namespace",
        namespace,
        "--router-mode",
        "round-robin",
    ]


def dynamo_env(host: str, discovery: Path) -> dict[str, str]:
    """The environment that keeps a Dynamo process on ``host`` (loopback) with file discovery in ``discovery``."""
    return {
        "DYN_FILE_KV": str(discovery),
        "DYN_TCP_RPC_HOST": host,
        "DYN_TCP_RESPONSE_STREAM_HOST": host,
        "DYN_EVENT_PLANE_HOST": host,
        "DYN_SYSTEM_HOST": host,
        "DYN_LOG": "warn",
        # vllm-router adds fields Dynamo's frontend does not know (return_hidden_states); refused with 400 otherwise.
        "DYN_IGNORE_OPENAI_FE_UNSUPPORTED_FIELDS": "true",
    }


def find_simulator(environ: Mapping[str, str], project_dir: Path) -> Path:
    """A Python with ``ai-dynamo``: ``$INFERPLANE_SIMULATOR_PYTHON``, the project's ``make simulator`` venv, or this
    interpreter; :class:`SimulatorError` naming the install otherwise."""
    given = environ.get(SIMULATOR_ENV)
    if given is not None:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise SimulatorError(f"${SIMULATOR_ENV} {given}: no executable there; {INSTALL_HINT}")
        return path
    venv_python = project_dir / SIMULATOR_PROJECT_VENV / "bin" / "python"
    if venv_python.is_file():
        return venv_python
    if importlib.util.find_spec("dynamo") is not None and importlib.util.find_spec("dynamo.mocker") is not None:
        return Path(sys.executable)
    raise SimulatorError(INSTALL_HINT)


def inotify_room() -> int | None:
    """``fs.inotify.max_user_instances`` (None where it cannot be read)."""
    try:
        return int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    except (OSError, ValueError):
        return None


def replica_host(index: int) -> str:
    """The loopback address of replica ``index``."""
    a, b, c, d = FIRST_HOST
    return f"{a}.{b}.{c}.{d + index}"


def _get(url: str, timeout: float = 2.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bytes(response.read()) if response.status == 200 else None
    except (OSError, ValueError):
        return None


def post_ok(url: str, body: Mapping[str, object], timeout: float = 10.0) -> bool:
    """Whether POSTing ``body`` as JSON to ``url`` answers 200 within ``timeout`` (a readiness probe)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


class SimulatedReplica(BaseModel):
    """One running replica."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0, description="Its position in the fleet.")
    namespace: str = Field(description="Its Dynamo namespace (one worker).")
    route: Route = Field(description="Its address and the two ports behind it.")

    @property
    def host(self) -> str:
        """Its loopback address."""
        return self.route.host

    @property
    def port(self) -> int:
        """The port the gateway reaches it at."""
        return self.route.port

    @property
    def url(self) -> str:
        """Its base URL."""
        return f"http://{self.route.host}:{self.route.port}"


class SimulatedFleet:
    """N replicas started in ``directory`` (discovery, logs), owned by ``procs`` (stopped with it)."""

    def __init__(
        self,
        *,
        python: Path,
        settings: EngineSettings,
        model_dir: Path,
        profile: Path,
        replicas: int,
        directory: Path,
        procs: Processes,
        stop: threading.Event,
        name: str = "sim",
    ) -> None:
        if not 1 <= replicas <= MAX_REPLICAS:
            raise SimulatorError(f"--replicas {replicas}: give 1 to {MAX_REPLICAS}", 2)
        self.python = python
        self.settings = settings
        self.model_dir = model_dir
        self.profile = profile
        self.count = replicas
        self.directory = directory
        self.procs = procs
        self.stop = stop
        self.name = name
        self.replicas: tuple[SimulatedReplica, ...] = ()

    def check_room(self) -> None:
        """Refuse a fleet the machine's inotify limit cannot hold (each Dynamo process opens two)."""
        room = inotify_room()
        needed = 2 * self.count * INOTIFY_PER_PROCESS
        if room is not None and needed > room - 16:
            raise SimulatorError(
                f"{self.count} replicas need {needed} inotify instances (2 processes each, "
                f"{INOTIFY_PER_PROCESS} apiece) and fs.inotify.max_user_instances is {room}: raise it, e.g. "
                f"`sudo sysctl fs.inotify.max_user_instances={max(1024, needed * 2)}`"
            )

    def start(self) -> tuple[SimulatedReplica, ...]:
        """Start every replica and the join process, and wait until each is ready (:class:`SimulatorError` with the
        failing part's log otherwise); an empty tuple when a stop was asked."""
        self.check_room()
        discovery = self.directory / "discovery"
        discovery.mkdir(parents=True, exist_ok=True)
        taken: set[int] = set()
        replicas = []
        for i in range(self.count):
            host = replica_host(i)
            # From the gateway's range and picker: one probe of every interface, so no part's port is another's.
            port, api, metrics = (pick_ports(1, taken) for _ in range(3))
            namespace = f"{self.name}{i}"
            route = Route(host=host, port=port, api_port=api, metrics_port=metrics, engine=self.settings.engine)
            env = dynamo_env(host, discovery)
            mocker_env = {**env, "DYN_SYSTEM_PORT": str(metrics)}
            self.procs.start(
                f"{self.name}-mocker-{i}",
                [str(self.python), *mocker_args(self.settings, self.model_dir, self.profile, namespace)],
                mocker_env,
            )
            self.procs.start(f"{self.name}-frontend-{i}", [str(self.python), *frontend_args(host, api, namespace)], env)
            replicas.append(SimulatedReplica(index=i, namespace=namespace, route=route))
        routes = [r.route.text() for r in replicas]
        self.procs.start(f"{self.name}-join", [sys.executable, "-m", "inferplane.tool.simulate.join", *routes])
        self.replicas = tuple(replicas)
        if not self._wait_ready():
            return ()
        return self.replicas

    def _ready(self, replica: SimulatedReplica) -> bool:
        models = _get(f"http://{replica.host}:{replica.route.api_port}/v1/models")
        if models is None or self.settings.served_model.encode() not in models:
            return False
        body = {"model": self.settings.served_model, "prompt": "w0", "max_tokens": 1}
        if not post_ok(f"{replica.url}/v1/completions", body):
            return False
        metrics = _get(f"{replica.url}/metrics")
        return metrics is not None and LOAD_SERIES[self.settings.engine].running.name.encode() in metrics

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + max(60.0, READY_SECONDS_PER_REPLICA * self.count)
        waiting = list(self.replicas)
        while waiting:
            if self.stop.is_set():
                return False
            gone = self.procs.exited()
            if gone is not None:
                raise SimulatorError(
                    f"{gone[0]} exited with status {gone[1]} while starting; the end of its log:\n"
                    f"{self.procs.log_tail(gone[0])}"
                )
            if time.monotonic() > deadline:
                first = waiting[0]
                raise SimulatorError(
                    f"{len(waiting)} of {self.count} simulated replicas not ready in time; replica {first.index}'s "
                    f"frontend log:\n{self.procs.log_tail(f'{self.name}-frontend-{first.index}')}\nits mocker's:\n"
                    f"{self.procs.log_tail(f'{self.name}-mocker-{first.index}')}"
                )
            waiting = [r for r in waiting if not self._ready(r)]
            if waiting:
                self.stop.wait(0.5)
        return True

    def kill(self, index: int) -> None:
        """SIGKILL replica ``index``'s mocker and frontend (a node lost): its address then refuses connections."""
        for part in ("mocker", "frontend"):
            proc = self.procs.procs.get(f"{self.name}-{part}-{index}")
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()

    def metrics(self) -> dict[int, bytes | None]:
        """Each replica's ``/metrics`` now (None where it does not answer)."""
        return {r.index: _get(f"{r.url}/metrics") for r in self.replicas}


def parse_metric(text: bytes, name: str) -> float:
    """The sum of ``name``'s samples (any labels) in a Prometheus text body; 0 when absent (the gateway's own reader,
    :func:`inferplane.processor.endpoints.parse_samples`)."""
    return parse_samples(text, MetricSelector(name=name)) or 0.0


def fleet_args_summary(settings: EngineSettings, replicas: Sequence[SimulatedReplica]) -> str:
    """One line saying what runs."""
    return (
        f"{len(replicas)} simulated replicas of {settings.served_model} ({settings.engine_type} scheduler, "
        f"{settings.max_num_seqs} slots, {settings.max_num_batched_tokens}-token steps, "
        f"{settings.num_gpu_blocks} blocks of {settings.block_size} tokens)"
    )
