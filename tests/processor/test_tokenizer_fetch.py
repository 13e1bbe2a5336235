"""The GKE gateway's tokenizer fetch against a Hub stand-in on 127.0.0.1: the Hub's URL layout, the token from its
file, redirects without the token, the processor's layout, and every failure leaving the step successful."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from inferplane.processor.tokenizer_fetch import hub_url, main, read_token
from inferplane.processor.tokens import TokenCounter
from tests.tiny_model import build_tokenizer, words

REPO = "Qwen/Qwen2.5-7B-Instruct"
FILE = f"{REPO}/tokenizer.json"


@dataclass
class Hub:
    """A server answering GET with the registered bodies (or statuses, or redirects), recording each request."""

    server: ThreadingHTTPServer
    routes: dict[str, tuple[int, bytes, dict[str, str]]] = field(default_factory=dict)
    seen: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def _start() -> Hub:
    hub: Hub

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hub.seen.append((self.path, self.headers.get("Authorization")))
            status, body, headers = hub.routes.get(self.path, (404, b"not found", {}))
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    hub = Hub(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    threading.Thread(target=hub.server.serve_forever, daemon=True).start()
    return hub


@pytest.fixture
def hubs() -> Iterator[tuple[Hub, Hub]]:
    """The Hub and a second origin (its CDN) that redirects point to."""
    main_hub, cdn = _start(), _start()
    yield main_hub, cdn
    for hub in (main_hub, cdn):
        hub.server.shutdown()
        hub.server.server_close()


@pytest.fixture
def token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "secret" / "token"
    path.parent.mkdir()
    path.write_text("hf_TESTtoken\n", encoding="utf-8")
    monkeypatch.setenv("HF_TOKEN_PATH", str(path))
    return path


def tokenizer_json() -> bytes:
    return build_tokenizer().to_str().encode()


def test_the_hub_url_is_the_resolve_url_of_the_main_revision() -> None:
    assert hub_url("https://huggingface.co/", FILE) == f"https://huggingface.co/{REPO}/resolve/main/tokenizer.json"
    for bad in ("tokenizer.json", "org/tokenizer.json", "org//tokenizer.json", "org/../x/tokenizer.json"):
        with pytest.raises(ValueError, match="is not <org>/<name>/<file>"):
            hub_url("https://huggingface.co", bad)


def test_fetches_into_the_processors_layout_with_the_token_from_its_file(
    hubs: tuple[Hub, Hub], token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, _ = hubs
    body = tokenizer_json()
    hub.routes[f"/{REPO}/resolve/main/tokenizer.json"] = (200, body, {})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    dest = tmp_path / "tokenizers"

    assert main(["--dest", str(dest), FILE]) == 0

    assert hub.seen == [(f"/{REPO}/resolve/main/tokenizer.json", "Bearer hf_TESTtoken")]
    assert (dest / FILE).read_bytes() == body
    assert [p.name for p in (dest / REPO).iterdir()] == ["tokenizer.json"]  # no partial file left behind
    # The processor counts with it exactly (the word-level test vocabulary: one token per word).
    counted, exact = TokenCounter({"qwen-7b": str(dest / FILE)}).count(
        "qwen-7b", [words(12)], messages=0, overhead_per_message=0
    )
    assert (counted, exact) == (12, True)


def test_a_redirect_to_the_cdn_is_followed_without_the_token(
    hubs: tuple[Hub, Hub], token_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, cdn = hubs
    hub.routes[f"/{REPO}/resolve/main/tokenizer.json"] = (302, b"", {"Location": f"{cdn.url}/signed/blob"})
    cdn.routes["/signed/blob"] = (200, tokenizer_json(), {})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)

    assert main(["--dest", str(tmp_path), FILE]) == 0

    assert hub.seen == [(f"/{REPO}/resolve/main/tokenizer.json", "Bearer hf_TESTtoken")]
    assert cdn.seen == [("/signed/blob", None)]
    assert (tmp_path / FILE).read_bytes() == tokenizer_json()


def test_failures_are_logged_skipped_and_never_fail_the_pod(
    hubs: tuple[Hub, Hub], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    hub, _ = hubs
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    hub.routes["/gated/model/resolve/main/tokenizer.json"] = (401, b"unauthorized", {})
    hub.routes["/broken/model/resolve/main/tokenizer.json"] = (200, b'{"not": "a tokenizer"}', {})
    hub.routes[f"/{REPO}/resolve/main/tokenizer.json"] = (200, tokenizer_json(), {})
    files = ["gated/model/tokenizer.json", "broken/model/tokenizer.json", "missing/model/tokenizer.json", FILE]

    assert main(["--dest", str(tmp_path), *files]) == 0

    assert all(auth is None for _, auth in hub.seen)  # no token file: anonymous requests
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [FILE]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 3
    assert all("its prompt tokens will be estimated" in e for e in errors)
    # The processor then estimates those models (the existing fallback) and counts the others exactly.
    counter = TokenCounter({"gated": str(tmp_path / files[0]), "qwen": str(tmp_path / FILE)})
    assert counter.count("gated", [words(12)], messages=0, overhead_per_message=0)[1] is False
    assert counter.count("qwen", [words(12)], messages=0, overhead_per_message=0) == (12, True)


def test_the_token_file_is_read_stripped_and_optional(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  hf_abc \n", encoding="utf-8")
    assert read_token(str(path)) == "hf_abc"
    path.write_text("\n", encoding="utf-8")
    assert read_token(str(path)) is None
    assert read_token(str(tmp_path / "absent")) is None
    assert read_token(None) is None
