"""Issue 23's hardening of ``schema``, ``preview --project-dir``, ``--project-dir`` itself and ``cache eval``, where a
row of ``tests/test_bad_inputs.py`` cannot show it: files written or left alone, what runs, what an endpoint is sent.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.components.spec.platform_spec import CacheSpec
from inferplane.tool import schema
from inferplane.tool.cache_eval import ENDPOINT_BATCH, EmbedderFailedError, Pair, load_pairs, point, score
from inferplane.tool.cli import main
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.preview.command import format_program_error
from inferplane.tool.preview.project import project_main
from inferplane.tool.stackfile import StackFileError, find_project_dir, read_project

# --- schema --write / --check --------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch inferplane tree standing in for the one this inferplane runs from, with stale generated files."""
    root = tmp_path / "checkout"
    (root / "components" / "platform").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text("name: inferplane\nruntime: python\n")
    (root / schema.ARGS_PATH).write_text("old args\n")
    (root / schema.SCHEMA_PATH).write_text("{}\n")
    monkeypatch.setattr(schema, "PACKAGE_ROOT", root.resolve())
    return root


def test_the_schema_is_inferred_from_the_new_args_text_not_the_imported_module() -> None:
    source = schema.generate_args_module()
    marker = "Stamped by the test."
    anchor = '    environment: Environment\n    """'
    assert source.count(anchor) == 1
    inferred = schema.schema_of_args(source.replace(anchor, anchor + marker + " "))
    environment = inferred["resources"]["inferplane:index:Platform"]["inputProperties"]["environment"]
    assert environment["description"] == f"{marker} dev, staging or prod; decides the secure defaults' strictness."
    assert marker not in json.dumps(schema.schema_of_args(source))
    assert "inferplane.components.platform._generated_args" not in sys.modules


def test_write_generates_in_process_and_renames_both_files_into_the_tree(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A package called inferplane in the working directory: `python -m` would have imported it and written its output.
    (tree / "inferplane" / "tool").mkdir(parents=True)
    (tree / "inferplane" / "__init__.py").write_text("")
    (tree / "inferplane" / "tool" / "__init__.py").write_text("")
    (tree / "inferplane" / "tool" / "schema.py").write_text("print('{\"planted\": true}')\n")
    monkeypatch.chdir(tree)
    args_source, schema_text = schema.generate()

    assert main(["schema", "--write"]) == EXIT_OK

    assert (tree / schema.ARGS_PATH).read_text() == args_source
    assert (tree / schema.SCHEMA_PATH).read_text() == schema_text
    out = capsys.readouterr().out
    assert f"wrote {tree.resolve() / schema.ARGS_PATH} and {tree.resolve() / schema.SCHEMA_PATH}" in out
    assert f"in the tree {tree.resolve()}" in out
    assert sorted(p.name for p in (tree / "components" / "platform").iterdir()) == ["args.py"]
    assert main(["schema", "--check"]) == EXIT_OK
    assert f"of the tree {tree.resolve()} are current" in capsys.readouterr().err


def test_a_failing_generator_is_exit_3_with_its_error_and_writes_nothing(
    tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(_: str) -> dict[str, Any]:
        raise ValueError("PoolSpec.zone: no schema type for <class 'ipaddress.IPv4Address'>")

    monkeypatch.setattr(schema, "schema_of_args", broken)  # args.py is generated first; the schema then fails
    monkeypatch.chdir(tree)

    assert main(["schema", "--write"]) == EXIT_FAILED

    err = capsys.readouterr().err
    assert "generating components/platform/args.py and schema.json failed: ValueError: PoolSpec.zone: no schema" in err
    assert (tree / schema.ARGS_PATH).read_text() == "old args\n"
    assert (tree / schema.SCHEMA_PATH).read_text() == "{}\n"
    assert sorted(p.name for p in tree.iterdir()) == ["Pulumi.yaml", "components", "schema.json"]
    assert main(["schema", "--check"]) == EXIT_FAILED


def test_check_names_each_stale_file_of_the_tree(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args_source, _ = schema.generate()
    (tree / schema.ARGS_PATH).write_text(args_source)

    assert main(["schema", "--check", "--project-dir", str(tree)]) == EXIT_REFUSED

    err = capsys.readouterr().err
    assert f"{tree.resolve() / schema.SCHEMA_PATH} is stale" in err
    assert "args.py is stale" not in err


def test_write_refuses_a_tree_other_than_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    (other / "components" / "platform").mkdir(parents=True)
    (other / "Pulumi.yaml").write_text("name: inferplane\nruntime: python\n")

    assert main(["schema", "--write", "--project-dir", str(other)]) == EXIT_INVALID

    assert f"the project at {other.resolve()} is not the inferplane tree this command runs from" in (
        capsys.readouterr().err
    )
    assert not (other / schema.ARGS_PATH).exists()


# --- preview --project-dir: what runs ------------------------------------------------------------------------------


def _project(root: Path, document: dict[str, Any]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "p", **document}))
    return root


def test_a_directory_main_whose_program_links_out_is_refused(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", {"runtime": {"name": "python"}, "main": "src/"})
    (project / "src").mkdir()
    (tmp_path / "elsewhere.py").write_text("")
    (project / "src" / "__main__.py").symlink_to(tmp_path / "elsewhere.py")
    with pytest.raises(StackFileError, match=r"^Pulumi.yaml: main: src/__main__.py resolves outside the project$"):
        project_main(read_project(project))
    (project / "src" / "__main__.py").unlink()
    (project / "src" / "__main__.py").write_text("")
    assert project_main(read_project(project)) == (project / "src").resolve()


@pytest.mark.parametrize(
    ("runtime", "shown"), [(None, "missing"), ({"name": "nodejs"}, "'nodejs'"), (["python"], "['python']")]
)
def test_only_the_python_runtime_runs(tmp_path: Path, runtime: Any, shown: str) -> None:
    project = _project(tmp_path, {"runtime": runtime, "main": "app.py"})
    (project / "app.py").write_text("")
    with pytest.raises(
        StackFileError, match=rf"runtime: .*Python programs only \(runtime: python\), not {re.escape(shown)}$"
    ):
        project_main(read_project(project))


def test_a_syntax_error_names_the_file_and_line_but_never_shows_the_line(tmp_path: Path) -> None:
    try:
        compile("fine = 1\nroot:x:0:0:root:/root:/bin/bash\n", str(tmp_path / "main.py"), "exec")
    except SyntaxError as exc:
        message = format_program_error(exc, tmp_path)
    assert message == 'the program failed:\nSyntaxError: invalid syntax (File "main.py", line 2)'
    runtime_error = RuntimeError("bad \x1b[2J value")
    assert format_program_error(runtime_error, tmp_path) == "the program failed:\nRuntimeError: bad \\x1b[2J value"


# --- an explicit --project-dir -------------------------------------------------------------------------------------


def test_an_explicit_project_dir_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: p\nruntime: python\n")
    (tmp_path / "sub").mkdir()
    with pytest.raises(StackFileError, match=r"sub: --project-dir has no Pulumi.yaml \(the directory given is used"):
        find_project_dir(tmp_path / "sub")
    assert find_project_dir(tmp_path) == tmp_path.resolve()
    monkeypatch.chdir(tmp_path / "sub")
    assert find_project_dir() == tmp_path.resolve()  # without the flag, the nearest project above


# --- cache eval ----------------------------------------------------------------------------------------------------


class _Embeddings(BaseHTTPRequestHandler):
    """``POST /v1/embeddings``: one-hot vectors (a text's slot is its first appearance), answered after 0.2 s."""

    batches: list[int]
    slots: dict[str, int]
    dimensions = 128

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.batches.append(len(body["input"]))
        time.sleep(0.2)  # four times the gateway's 50 ms per-prompt timeout
        data = []
        for index, text in enumerate(body["input"]):
            slot = self.slots.setdefault(text, len(self.slots))
            data.append({"index": index, "embedding": [float(i == slot) for i in range(self.dimensions)]})
        payload = json.dumps({"data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[str, type[_Embeddings]]]:
    handler = type("Handler", (_Embeddings,), {"batches": [], "slots": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        server.shutdown()
        server.server_close()


def _endpoint_cache(url: str, dimensions: int = 128) -> CacheSpec:
    return CacheSpec(embedder={"kind": "endpoint", "url": url, "model": "e5", "dimensions": dimensions})


def test_an_endpoint_embeds_an_offline_batch_in_bounded_requests_without_the_gateway_timeout(
    endpoint: tuple[str, type[_Embeddings]],
) -> None:
    url, handler = endpoint
    pairs = [Pair(a=f"prompt {i}", b=f"prompt {i}", same=True) for i in range(30)]
    pairs += [Pair(a=f"near {i} a", b=f"near {i} b", same=False) for i in range(25)]
    cache = _endpoint_cache(url)
    assert cache.embedder.timeout_ms == 50

    scored = score(pairs, cache)

    # Each prompt once (80 distinct); the near misses' differing words ("b" against an article) need no embedding.
    assert handler.batches == [ENDPOINT_BATCH, 80 - ENDPOINT_BATCH]
    at = point(scored, 0.95, guards=True)
    assert (at.hits, at.false_hits, at.precision, at.recall) == (30, 0, 1.0, 1.0)


def test_an_endpoint_answering_the_wrong_vectors_is_a_failure_naming_it(
    endpoint: tuple[str, type[_Embeddings]],
) -> None:
    url, _ = endpoint
    # The two prompts and their two differing words ("x" / "y"), in one request.
    with pytest.raises(EmbedderFailedError, match=rf"^embedder endpoint {url} failed: .*expected 4 vectors of 64"):
        score([Pair(a="x", b="y", same=False)], _endpoint_cache(url, dimensions=64))


def test_pairs_lines_split_on_newline_only(tmp_path: Path) -> None:
    pairs_file = tmp_path / "pairs.jsonl"
    pairs_file.write_text(
        '{"a": "one\u2028two", "b": "one two", "same": true}\r\n\n{"a": "x", "b": "y", "same": false}'
    )
    name, pairs = load_pairs(pairs_file)
    assert name == str(pairs_file)
    assert [(p.a, p.same) for p in pairs] == [("one\u2028two", True), ("x", False)]
