"""SGLang's own command-line parser, built offline from the pinned release, and argument lists checked against it.

SGLang's ``prepare_server_args`` (``sglang/srt/server_args.py``) builds ``argparse.ArgumentParser`` and calls
``ServerArgs.add_cli_args``, which registers every field of the ``ServerArgs`` dataclasses (``sglang/srt/arg_groups/
fields/*.py``) with its type and choices. Building it imports torch and a few small packages, none of which the
project's venv has: it runs in a child process with the vLLM CPU venv's Python (torch for CPU and most of the imports)
and the pinned ``sglang`` (installed ``--no-deps``) plus the small packages that venv lacks on ``PYTHONPATH``
(:func:`tests.references.sglang_runtime`). No GPU and no network are needed: only the parser is built.

A list is accepted when SGLang's parser takes it and every option is spelled in full: argparse would also accept an
unambiguous abbreviation (``--enable-metric``), which the check refuses so a typo never passes by luck.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CHILD = r"""
import argparse, json, sys

from sglang.srt.server_args import ServerArgs


class Refused(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print and exit
        raise Refused(message)


parser = Parser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
options = set(parser._option_string_actions)
import sglang


def check(argv):
    unknown = [t.split("=", 1)[0] for t in argv if t.startswith("--") and t.split("=", 1)[0] not in options]
    if unknown:
        return {"error": "not options of SGLang: " + ", ".join(unknown)}
    try:
        namespace = parser.parse_args(argv)
    except Refused as exc:
        return {"error": str(exc)}
    return {"values": {k: v for k, v in vars(namespace).items() if v is None or isinstance(v, (bool, int, float, str))}}


print(json.dumps({"version": sglang.__version__}), flush=True)
for line in sys.stdin:  # one JSON list of argument lists per line, one JSON list of results back
    print(json.dumps([check(argv) for argv in json.loads(line)]), flush=True)
"""


@dataclass(frozen=True)
class Parsed:
    """What SGLang's parser made of one argument list: its values by destination, or why it refused the list."""

    values: dict[str, Any]
    error: str | None


class SglangParser:
    """SGLang's parser in a child process started once (importing SGLang takes seconds): the Python with torch, and
    the ``PYTHONPATH`` holding the pinned SGLang."""

    def __init__(self, python: Path, path: tuple[Path, ...]) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "PYTHONPATH": os.pathsep.join(str(p) for p in path),
            # Offline: nothing the parser builds may reach a network.
            "HF_HUB_OFFLINE": "1",
        }
        # Its warnings go to a file: a pipe nobody reads would fill and stall the child.
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        self._child = subprocess.Popen(
            [str(python), "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        self.version = str(self._read()["version"])

    def _read(self) -> Any:
        assert self._child.stdout is not None
        line = self._child.stdout.readline()
        if not line:
            self._child.wait(timeout=30)
            self._log.seek(0)
            raise RuntimeError(f"SGLang's parser could not be built: {self._log.read()[-4000:]}")
        return json.loads(line)

    def parse(self, arg_lists: list[list[str]]) -> list[Parsed]:
        """Each list as SGLang's parser takes it."""
        assert self._child.stdin is not None
        self._child.stdin.write(json.dumps(arg_lists) + "\n")
        self._child.stdin.flush()
        return [Parsed(values=r.get("values", {}), error=r.get("error")) for r in self._read()]

    def close(self) -> None:
        """End the child process."""
        if self._child.stdin is not None:
            self._child.stdin.close()
        self._child.wait(timeout=30)
        if self._child.stdout is not None:
            self._child.stdout.close()
        self._log.close()
