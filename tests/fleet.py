"""The test run's one fleet of real vLLM 0.32 CPU servers, started once and shared by every E2E module.

Each vLLM server costs tens of seconds of both cores to start, and the E2E modules used to start eight of them, one
module after another, each waiting for its own. The fleet starts four (three completion servers of the tiny Llama and
the semantic cache's embedder) as soon as the run has collected its tests, in the background, so they load while the
unit tests run; the E2E modules take what they need from it (:func:`fleet`, a session fixture) and leave it as they
found it.

- **Who starts it.** The process that configures the run (pytest-xdist's controller, or the one process without
  xdist) names the fleet's directory in :data:`FLEET_DIR_ENV` before any worker starts, and a thread of its waits
  there. A worker whose selected tests ask for the fleet says so (:data:`WANTED_FILE`) as soon as it has collected;
  the thread then starts the servers, waits for every ``/health`` and writes :data:`READY_FILE` (or
  :data:`FAILED_FILE`). The controller owns the processes, outlives every worker and stops them at the run's end.
- **What is shared.** The servers, their access logs (a test counts the requests it caused as a difference) and
  their metrics. What a test breaks on purpose is its own: a killed replica or a stopped embedder is a
  :class:`~tests.gateway_support.Relay` of the test module's in front of a fleet server, killed; each module's Redis,
  processors and Envoys are its own. A test that pauses a fleet server (SIGSTOP, as a pod failing readiness) resumes
  it before it ends (:meth:`FleetServer.paused`).
- **What the servers serve.** vLLM answers with the first of its ``--served-model-name`` values whatever name a
  request used, and the E2E tests read that to tell which server answered, so each server's first name is the
  model it stands for (:data:`SERVERS`). The gateway E2E and the embedder E2E share ``vllm-alpha``, the semantic
  guard E2E and the embedder E2E the embedder; the routing E2E takes the three completion servers as three replicas
  of one model.
- **How they run.** Each completion server logs every request as it hands it to its engine and as its output comes
  back (:data:`~tests.gateway_support.REQUEST_LOG_ARGS`: what an engine held at once is counted from its log, not
  sampled), and its engine core runs at a lower priority than its HTTP side
  (:func:`~tests.gateway_support.lower_engine_priority`), as on a GPU node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.tiny_model import ARCHITECTURE, write_model

if TYPE_CHECKING:  # the module imports tests.gateway_support (sizing, the renderer) only where a fleet starts
    from tests.gateway_support import Procs

FLEET_DIR_ENV = "INFERPLANE_TEST_FLEET_DIR"
"""The fleet's directory (logs, model, :data:`READY_FILE`), set by whoever starts the fleet before the workers."""
READY_FILE = "ready.json"
"""Written once every server answers ``/health``: each server's port, pid and log."""
FAILED_FILE = "failed.txt"
"""Written instead when a server could not start: why (the workers' tests fail with it)."""
SKIPPED_FILE = "skipped.txt"
"""Written instead when the fleet cannot exist here (vLLM or the embedding model not installed): the reason to skip."""
WANTED_FILE = "wanted"
"""Created by a worker whose selected tests use the fleet: the fleet starts then."""
FIXTURE = "fleet"
"""The session fixture a test asks for; the fleet starts only when a collected test does (directly or through its
module's fixtures)."""

MAX_MODEL_LEN = 2048
"""The tiny model's context as sizing sets it for the E2E stacks (each module checks its own sizing against it)."""
MAX_NUM_SEQS = 8
"""Twice what the gateway admits to a replica (sizing gives the tiny model 4): an overshoot by the gateway would show
as requests running at the engine, not hide in the engine's own queue."""
EMBEDDER = "embedder"
"""The served all-MiniLM-L6-v2, run exactly as ``EmbedderService`` runs it."""


@dataclass(frozen=True)
class ServerPlan:
    """One fleet server: its name and the model names it serves (the first is the one it answers with)."""

    name: str
    served_names: tuple[str, ...]


SERVERS = (
    ServerPlan("vllm-alpha", ("alpha", "gamma", "delta")),
    ServerPlan("vllm-beta", ("beta", "alpha", "delta")),
    ServerPlan("vllm-tiny", ("tiny", "delta")),
)
"""The completion servers. ``vllm-beta`` serves ``alpha`` too, as a fallback server must accept the primary's name;
all three serve ``delta``, the routing E2E's model of three replicas."""


@dataclass(frozen=True)
class FleetServer:
    """A running fleet server."""

    name: str
    port: int
    pid: int
    log_path: Path
    args: tuple[str, ...]
    """The command it was started with (a module checks its server runs exactly the arguments it would give)."""

    @property
    def url(self) -> str:
        """Its OpenAI base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def log(self) -> str:
        """What it wrote so far (vLLM's access log among it)."""
        return self.log_path.read_text(errors="replace")

    def posts(self, path: str = "/v1/") -> int:
        """Requests it has received under ``path`` (``POST``), from its access log."""
        return self.log().count(f'"POST {path}')

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP the server (it stops answering, as a pod failing readiness), SIGCONT it on the way out."""
        os.killpg(self.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.pid, signal.SIGCONT)


@dataclass(frozen=True)
class Fleet:
    """The running fleet: its servers by name and the tiny model's directory (tokenizer and config)."""

    servers: dict[str, FleetServer]
    model_dir: Path
    embedder_skip_reason: str | None

    def __getitem__(self, name: str) -> FleetServer:
        return self.servers[name]

    @property
    def embedder(self) -> FleetServer:
        """The served embedder; skips the test with the reason where the fleet has none."""
        if self.embedder_skip_reason is not None:
            pytest.skip(self.embedder_skip_reason)
        return self.servers[EMBEDDER]


def tokenizers_dir(fleet: Fleet) -> Path:
    """The directory a gateway's processor reads the tiny model's tokenizer from (``<dir>/<org>/<name>``)."""
    return tokenizers_root(fleet.model_dir)


def tokenizers_root(model_dir: Path) -> Path:
    """The tokenizers directory above a model written by :func:`write_fleet_model` (``<dir>/<org>/<name>``)."""
    return model_dir.parent.parent


def write_fleet_model(directory: Path) -> Path:
    """The tiny model as the fleet's servers load it, written under ``directory`` (``tokenizers/<org>/<name>``, the
    layout a processor reads tokenizers from); returns the model's directory."""
    return write_model(directory / "tokenizers" / ARCHITECTURE["hf_repo"])


def check_fits(max_model_len: int, max_num_seqs: int, where: str) -> None:
    """Refuse a module whose sizing the fleet's engines do not match: the fleet's context is the one sizing gives, and
    its batch at least twice the module's."""
    assert max_model_len == MAX_MODEL_LEN, f"{where}: sizing gives max_model_len {max_model_len}, the fleet runs 2048"
    assert 2 * max_num_seqs <= MAX_NUM_SEQS, f"{where}: max_num_seqs {max_num_seqs} is over half the fleet's"


# --- starting it (the controller, or the one process) -------------------------------------------------------------


def prepare(config: pytest.Config) -> None:
    """Name the fleet's directory in the environment before any worker starts (the workers inherit it) and wait, in
    the background, for a worker to say its tests want the fleet (:func:`request`)."""
    if os.environ.get(FLEET_DIR_ENV) or config.option.collectonly:
        return
    directory = Path(tempfile.mkdtemp(prefix="inferplane-fleet-"))
    os.environ[FLEET_DIR_ENV] = str(directory)
    boot = _Boot(directory)
    config.stash[_BOOT] = boot
    boot.watch()


def request(session: pytest.Session) -> None:
    """Ask for the fleet when a selected test uses it (each worker collects every test, so each may ask; once is
    enough). Called once the run's tests are collected and selected."""
    named = os.environ.get(FLEET_DIR_ENV)
    if named and any(FIXTURE in getattr(item, "fixturenames", ()) for item in session.items):
        with contextlib.suppress(FileExistsError):
            (Path(named) / WANTED_FILE).touch(exist_ok=False)


def stop(config: pytest.Config) -> None:
    """Stop the fleet's processes and remove its directory (the process that prepared it, at the run's end)."""
    boot = config.stash.get(_BOOT, None)
    if boot is not None:
        boot.stop()


class _Boot:
    """The fleet's processes, started by a thread that waits for each and writes what became of them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._thread: threading.Thread | None = None
        self._procs: Procs | None = None
        self._stopping = threading.Event()

    def watch(self) -> None:
        self._thread = threading.Thread(target=self._run, name="inferplane-fleet", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not (self.directory / WANTED_FILE).exists():
            if self._stopping.wait(0.1):
                return  # the run ended and no test asked for the fleet
        try:
            outcome, text = self._boot()
        except Exception as error:  # anything: the workers must hear of it, not wait for a file that never comes
            outcome, text = FAILED_FILE, f"the test fleet failed to start: {error!r}"
        _write_atomically(self.directory / outcome, text)

    def _boot(self) -> tuple[str, str]:
        from tests import gateway_support as gs  # heavy (sizing, the renderer): imported only where a fleet starts
        from tests.tiny_model import tiny_platform

        if not gs.VLLM_READY_MARKER.is_file():
            return SKIPPED_FILE, gs.VLLM_MISSING
        procs = gs.Procs(self.directory)
        self._procs = procs
        model_dir = write_fleet_model(self.directory)
        ports = {
            plan.name: gs.start_vllm(
                procs,
                plan.name,
                model_dir,
                list(plan.served_names),
                max_model_len=MAX_MODEL_LEN,
                max_num_seqs=MAX_NUM_SEQS,
                extra_args=gs.REQUEST_LOG_ARGS,
            )
            for plan in SERVERS
        }
        embedder_skip = None
        if (gs.EMBEDDER_DIR / "model.safetensors").is_file():
            served = {"kind": "served", "model": "all-minilm-l6-v2"}
            spec = tiny_platform([{"name": "alpha", "routing_tier": "standard"}], {}, cache={"embedder": served})
            from inferplane.components.capacity.sizing import size_platform

            sizing = size_platform(spec).embedder
            assert sizing is not None
            ports[EMBEDDER] = gs.start_vllm_embedder(procs, EMBEDDER, sizing)
        else:
            embedder_skip = gs.EMBEDDER_MISSING
        ready = {}
        for name, started_on in ports.items():
            if self._stopping.is_set():
                return FAILED_FILE, "the run ended before the fleet was up"
            try:
                port = gs.wait_vllm(procs, name, started_on)
            except (RuntimeError, TimeoutError) as error:
                return FAILED_FILE, f"fleet server {name} did not start: {error}\n{procs.log(name)[-4000:]}"
            if name != EMBEDDER:
                gs.lower_engine_priority(procs, name)
            process = procs.procs[name]
            assert isinstance(process.args, list)
            ready[name] = {
                "port": port,
                "pid": process.pid,
                "log": str(self.directory / f"{name}.log"),
                "args": [str(arg) for arg in process.args],
            }
        document = {"servers": ready, "model_dir": str(model_dir), "embedder_skip_reason": embedder_skip}
        return READY_FILE, json.dumps(document)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            # A boot still waiting for a server is told to give up; its processes are stopped below either way.
            self._thread.join(timeout=5)
        if self._procs is not None:
            self._procs.stop_all()
        shutil.rmtree(self.directory, ignore_errors=True)


_BOOT = pytest.StashKey[_Boot]()


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(path)


# --- when its tests run (the controller's scheduler) ----------------------------------------------------------

FLEET_GROUP = "vllm-fleet"
"""The xdist group of every module that uses the fleet: one worker runs them one after another, so no two tests read
the same server's logs and load at once. A module that times a hold against a timeout joins it too (the cold-start
E2E): there it runs once the fleet is up, never beside another end-to-end module's load."""


def fleet_settled() -> bool:
    """Whether the fleet is up, or will never be (failed, skipped): its group may then be handed out."""
    named = os.environ.get(FLEET_DIR_ENV)
    if not named:
        return True
    return any((Path(named) / name).exists() for name in (READY_FILE, FAILED_FILE, SKIPPED_FILE))


def scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's ``--dist loadgroup`` scheduler, holding the fleet's group back while the fleet loads: a worker
    asking for work then gets the next other unit, so no worker sits waiting for vLLM while unit tests are left."""
    from xdist.scheduler import LoadGroupScheduling

    class FleetAwareScheduling(LoadGroupScheduling):  # type: ignore[misc]  # pytest-xdist ships no types
        def _assign_work_unit(self, node: object) -> None:
            queue = self.workqueue
            if next(iter(queue), None) == FLEET_GROUP and len(queue) > 1 and not fleet_settled():
                queue.move_to_end(next(k for k in queue if k != FLEET_GROUP), last=False)  # the next unit first
            super()._assign_work_unit(node)

    return FleetAwareScheduling(config, log)


# --- using it (a worker) ------------------------------------------------------------------------------------------

FLEET_WAIT_SECONDS = 900.0
"""How long a worker waits for the fleet: four servers loading at once on two busy cores take minutes at worst
(each waits up to ``VLLM_START_TIMEOUT_SECONDS`` itself, and says so in :data:`FAILED_FILE`)."""


def wait_for_fleet() -> Fleet:
    """The fleet once it is up; fails with the reason when it could not start, skips where it cannot exist here."""
    named = os.environ.get(FLEET_DIR_ENV)
    if not named:
        pytest.fail(f"no test fleet: {FLEET_DIR_ENV} is unset (tests/conftest.py starts the fleet for the run)")
    directory = Path(named)
    deadline = time.monotonic() + FLEET_WAIT_SECONDS
    while time.monotonic() < deadline:
        if (directory / READY_FILE).is_file():
            document = json.loads((directory / READY_FILE).read_text())
            servers = {
                name: FleetServer(name, entry["port"], entry["pid"], Path(entry["log"]), tuple(entry["args"]))
                for name, entry in document["servers"].items()
            }
            return Fleet(servers, Path(document["model_dir"]), document["embedder_skip_reason"])
        if (directory / SKIPPED_FILE).is_file():
            pytest.skip((directory / SKIPPED_FILE).read_text())
        if (directory / FAILED_FILE).is_file():
            pytest.fail((directory / FAILED_FILE).read_text())
        time.sleep(0.2)
    pytest.fail(f"the test fleet in {directory} was not up after {FLEET_WAIT_SECONDS:.0f} s")
