"""``python -m inferplane`` (the component provider's entry point) takes the engine's arguments and nothing else."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from inferplane.tool import provider
from inferplane.tool.exitcodes import EXIT_INVALID
from tests.conftest import PROJECT_DIR


def test_the_engines_own_arguments_are_accepted() -> None:
    # As pulumi's buildPluginArguments orders them: logging flags, tracing, then the plugin's own (the address).
    argv = ["--logtostderr", "-v=9", "--tracing", "http://127.0.0.1:9411", "127.0.0.1:50051"]
    assert provider.engine_address(argv) == "127.0.0.1:50051"
    assert provider.engine_address(["127.0.0.1:50051"]) == "127.0.0.1:50051"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus", "127.0.0.1:1"], "unrecognized arguments: --bogus"),
        (["127.0.0.1:1", "extra"], "unrecognized arguments: extra"),
        (["-v=loud", "127.0.0.1:1"], "argument -v: invalid int value: 'loud'"),
        ([], "the following arguments are required: engine"),
    ],
)
def test_anything_else_is_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        provider.engine_address(argv)
    assert exited.value.code == EXIT_INVALID
    assert f"python -m inferplane: error: {message}" in capsys.readouterr().err


def test_the_sdk_is_given_the_address_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK's server re-reads sys.argv leniently and would take --tracing's endpoint for the address.
    served: list[tuple[Any, list[str], list[str]]] = []
    monkeypatch.setattr(provider, "serve", lambda p, args: served.append((p, args, list(sys.argv))))
    monkeypatch.setattr(sys, "argv", ["inferplane", "--tracing", "http://127.0.0.1:9411", "127.0.0.1:50051"])
    provider.main()
    [(served_provider, args, argv)] = served
    assert isinstance(served_provider, provider.InferplaneProvider)
    assert args == ["127.0.0.1:50051"]
    assert argv == ["inferplane", "127.0.0.1:50051"]


def test_python_dash_m_inferplane_refuses_an_unknown_flag() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "inferplane", "--bogus", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PROJECT_DIR,
        check=False,
    )
    assert finished.returncode == EXIT_INVALID
    assert finished.stdout == ""  # no port: the engine is never told a server runs
    assert "python -m inferplane: error: unrecognized arguments: --bogus" in finished.stderr
    assert "Traceback" not in finished.stderr
