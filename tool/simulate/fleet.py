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

A disaggregated model (:class:`PrefillWorkers`): each replica's mocker runs as a decode worker, and the prefill role's
mockers (``--disaggregation-mode prefill``) join the replicas' namespaces in turn (prefill worker j in replica j mod
N's), each on a loopback address of its own. The replica's frontend then sends every request to one of its namespace's
prefill workers first (Dynamo's own prefill router, also under round-robin: measured on ai-dynamo 1.6.1) and the decode
worker receives the KV at the transfer's bandwidth (``--kv-transfer-bandwidth``). The gateway picks the decode replica
as it picks any replica; which prefill worker computes a prompt is the replica's frontend's choice among its own,
because the mockers do not speak vLLM's proxy protocol that the gateway's own prefill step uses. A replica whose
namespace would hold no prefill worker (more decode replicas than prefill ones) runs aggregated and computes its
prompts itself (a decode-mode worker alone in its namespace never became ready: measured on ai-dynamo 1.6.1); the
run says how many did.
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
from typing import Literal

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


DisaggregationMode = Literal["prefill", "decode"]


def disaggregation_args(mode: DisaggregationMode, transfer_gbps: float, bootstrap_port: int | None = None) -> list[str]:
    """A disaggregated worker's extra ``dynamo.mocker`` arguments (ai-dynamo 1.6.1's ``--help``): its role, the KV
    transfer's bandwidth in GB/s (the decode side waits ``bytes / bandwidth`` for a prompt's KV), and a prefill
    worker's bootstrap port, where its decode peers rendezvous."""
    args = ["--disaggregation-mode", mode, "--kv-transfer-bandwidth", f"{transfer_gbps:g}"]
    if mode == "prefill":
        if bootstrap_port is None:
            raise ValueError("a prefill worker needs its bootstrap port")
        args += ["--bootstrap-ports", str(bootstrap_port)]
    return args


GENERATE_REQUESTS = MetricSelector(name="dynamo_component_requests_total", labels=(("dynamo_endpoint", "generate"),))
"""Requests a worker's ``generate`` endpoint took: a prefill worker's prompts too (its engine's
``vllm:e2e_request_latency_seconds`` counts none; measured on ai-dynamo 1.6.1)."""


def generate_requests(urls: Sequence[str]) -> list[int]:
    """Requests each worker's ``/metrics`` at ``urls`` says it took so far (-1 where they did not answer)."""
    counts = []
    for url in urls:
        body = _get(url, timeout=5.0)
        counts.append(-1 if body is None else round(parse_samples(body, GENERATE_REQUESTS) or 0.0))
    return counts


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


class PrefillWorkers(BaseModel):
    """A disaggregated model's prefill role in the fleet: its mockers, shared out among the replicas' namespaces."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    settings: EngineSettings = Field(
        description="The prefill role's engine as sized; it serves the model's name (Dynamo pairs the roles by it)."
    )
    profile: Path = Field(description="The timing profile of one prefill replica.")
    count: int = Field(ge=1, le=MAX_REPLICAS, description="Prefill workers.")
    transfer_gbps: float = Field(gt=0, description="The KV transfer's bandwidth, GB/s, as sizing models the pools'.")


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
    """N replicas started in ``directory`` (discovery, logs), owned by ``procs`` (stopped with it); with ``prefill``,
    the replicas are a disaggregated model's decode workers and the prefill workers join their namespaces."""

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
        prefill: PrefillWorkers | None = None,
    ) -> None:
        if not 1 <= replicas <= MAX_REPLICAS:
            raise SimulatorError(f"--replicas {replicas}: give 1 to {MAX_REPLICAS}", 2)
        hosts = replicas + (prefill.count if prefill is not None else 0)
        if hosts > MAX_REPLICAS:
            raise SimulatorError(f"{hosts} simulated workers: give at most {MAX_REPLICAS} in all", 2)
        self.prefill = prefill
        self.prefill_metrics: dict[int, tuple[str, ...]] = {}
        """Each replica's prefill workers' ``/metrics`` (none for an aggregated fleet)."""
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
        processes = 2 * self.count + (self.prefill.count if self.prefill is not None else 0)
        needed = processes * INOTIFY_PER_PROCESS
        if room is not None and needed > room - 16:
            raise SimulatorError(
                f"{self.count} replicas need {needed} inotify instances ({processes} Dynamo processes, "
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
            args = mocker_args(self.settings, self.model_dir, self.profile, namespace)
            if self.prefill is not None and i < self.prefill.count:  # prefill worker j joins replica j mod N
                args += disaggregation_args("decode", self.prefill.transfer_gbps)
            self.procs.start(f"{self.name}-mocker-{i}", [str(self.python), *args], mocker_env)
            self.procs.start(f"{self.name}-frontend-{i}", [str(self.python), *frontend_args(host, api, namespace)], env)
            replicas.append(SimulatedReplica(index=i, namespace=namespace, route=route))
        self._start_prefill_workers(discovery, taken)
        routes = [r.route.text() for r in replicas]
        self.procs.start(f"{self.name}-join", [sys.executable, "-m", "inferplane.tool.simulate.join", *routes])
        self.replicas = tuple(replicas)
        if not self._wait_ready():
            return ()
        return self.replicas

    def _start_prefill_workers(self, discovery: Path, taken: set[int]) -> None:
        """Prefill worker j in replica j mod N's namespace, on the loopback address after the replicas'."""
        prefill = self.prefill
        if prefill is None:
            return
        groups: dict[int, list[str]] = {}
        for j in range(prefill.count):
            group = j % self.count
            host = replica_host(self.count + j)
            metrics, bootstrap = (pick_ports(1, taken) for _ in range(2))
            args = mocker_args(prefill.settings, self.model_dir, prefill.profile, f"{self.name}{group}")
            args += disaggregation_args("prefill", prefill.transfer_gbps, bootstrap)
            env = {**dynamo_env(host, discovery), "DYN_SYSTEM_PORT": str(metrics)}
            self.procs.start(f"{self.name}-prefill-{j}", [str(self.python), *args], env)
            groups.setdefault(group, []).append(f"http://{host}:{metrics}/metrics")
        self.prefill_metrics = {group: tuple(urls) for group, urls in groups.items()}

    def _ready(self, replica: SimulatedReplica) -> bool:
        models = _get(f"http://{replica.host}:{replica.route.api_port}/v1/models")
        if models is None or self.settings.served_model.encode() not in models:
            return False
        body = {"model": self.settings.served_model, "prompt": "w0", "max_tokens": 1}
        if not post_ok(f"{replica.url}/v1/completions", body):
            return False
        metrics = _get(f"{replica.url}/metrics")
        if metrics is None or LOAD_SERIES[self.settings.engine].running.name.encode() not in metrics:
            return False
        # The frontend's prefill router starts once discovery shows it a prefill worker; until then its probes
        # decode where they land. Ready once one of this replica's prefill workers has taken a probe.
        prefill = self.prefill_metrics.get(replica.index)
        return not prefill or any(n > 0 for n in generate_requests(prefill))

    def _wait_ready(self) -> bool:
        workers = self.count + (self.prefill.count if self.prefill is not None else 0)
        deadline = time.monotonic() + max(60.0, READY_SECONDS_PER_REPLICA * workers)
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
                    f"{len(waiting)} of {self.count} simulated replicas not ready in time (with a prefill worker of "
                    f"theirs, where they have one); replica {first.index}'s "
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


def fleet_args_summary(
    settings: EngineSettings, replicas: Sequence[SimulatedReplica], prefill: PrefillWorkers | None = None
) -> str:
    """One line saying what runs."""
    line = (
        f"{len(replicas)} simulated replicas of {settings.served_model} ({settings.engine_type} scheduler, "
        f"{settings.max_num_seqs} slots, {settings.max_num_batched_tokens}-token steps, "
        f"{settings.num_gpu_blocks} blocks of {settings.block_size} tokens)"
    )
    if prefill is None:
        return line
    alone = max(0, len(replicas) - prefill.count)
    return (
        f"{line} decoding, and {prefill.count} prefill workers ({prefill.settings.max_num_batched_tokens}-token "
        f"steps, {prefill.settings.num_gpu_blocks} blocks) moving the KV at {prefill.transfer_gbps:g} GB/s"
        + (f"; {alone} replicas with no prefill worker of their own compute their prompts" if alone else "")
    )
