"""An HTTPS OpenAI-compatible server standing for a hosted LLM provider (OpenAI, Groq...) in end-to-end tests.

The gateway's Envoy reaches hosted providers over TLS with a bearer key; this server lets the tests check that path
without the network: it serves ``{path_prefix}/chat/completions`` on 127.0.0.1 with a certificate from its own test
CA (:func:`write_certificates`), accepts one API key, records every request it gets (:meth:`ProviderServer.received`)
and can be told to fail (:meth:`ProviderServer.fail_next`). Its answers are fixed (:data:`REPLY`) and its usage
deterministic (:func:`prompt_tokens`, :data:`COMPLETION_TOKENS`), so tests can assert exact token counts.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import socket
import ssl
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from http.client import responses
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPLY = "hello from the provider"
"""Every completion's text, streamed one word per chunk."""
COMPLETION_TOKENS = len(REPLY.split())
"""The usage's ``completion_tokens`` of every completion: :data:`REPLY`'s words."""
CERT_DAYS = 1
"""A test's certificates need not outlive it."""
HANDSHAKE_TIMEOUT_SECONDS = 10.0
"""A client that connects and says nothing must not hold a thread for ever."""
IDLE_TIMEOUT_SECONDS = 60.0
"""How long a kept-alive connection may sit idle before its thread lets it go."""


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files :func:`write_certificates` wrote: the CA clients trust, the server's chain and its key."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Received:
    """One request as the handler saw it, refused ones included: header names lowercased, the body's JSON (``{}``
    when it had none or it was not a JSON object)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _key_usage(**allowed: bool) -> x509.KeyUsage:
    """A key usage extension naming only what is ``allowed`` (the constructor wants all nine flags)."""
    names = (
        "digital_signature",
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    )
    return x509.KeyUsage(**{name: allowed.get(name, False) for name in names})


def _builder(
    *,
    issuer: x509.Name,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    start: datetime.datetime,
    end: datetime.datetime,
) -> x509.CertificateBuilder:
    """A certificate for ``key``'s public half, named and dated, its extensions still to add."""
    return x509.CertificateBuilder(
        issuer_name=issuer,
        subject_name=subject,
        public_key=key.public_key(),
        serial_number=x509.random_serial_number(),
        not_valid_before=start,
        not_valid_after=end,
    )


def write_certificates(directory: Path) -> TlsFiles:
    """Write a fresh test CA and a ``localhost``/``127.0.0.1`` server certificate it signed into ``directory``
    (``ca.pem``, ``server.pem``, ``server.key``); the extensions are those strict verifiers (OpenSSL's X509_STRICT,
    Envoy's BoringSSL) insist on, so the same files serve Python and Envoy clients."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=CERT_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "inferplane test provider CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_usage = _key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True)
    ca = (
        _builder(issuer=ca_name, subject=ca_name, key=ca_key, start=start, end=end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(ca_usage, critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    alt_names = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]
    )
    leaf_usage = _key_usage(digital_signature=True)
    leaf = (
        _builder(issuer=ca_name, subject=name, key=key, start=start, end=end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(leaf_usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(alt_names, critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(ca=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server.key")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    files.key.touch(mode=0o600)
    files.key.write_bytes(_pem_key(key))
    return files


def write_secret(directory: Path, key: str, version: str) -> None:
    """The provider's Secret as a Kubernetes Secret volume lays it out and updates it: the key file behind a
    ``..data`` link that an update swaps atomically to a new timestamped directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / version).mkdir()
    (directory / version / "api-key").write_text(key)
    staged = directory / "..data_tmp"
    staged.symlink_to(version)
    staged.rename(directory / "..data")  # rename(2) over the old link: the swap kubelet makes
    link = directory / "api-key"
    if not link.is_symlink():
        link.symlink_to("..data/api-key")


def prompt_tokens(body: dict[str, Any]) -> int:
    """The usage's ``prompt_tokens`` for a request ``body``: the whitespace-separated words of all its messages'
    text (plain strings or ``text`` parts), at least 1, so tests can predict it without a tokenizer."""
    words = 0
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        parts = content if isinstance(content, list) else [{"text": content}]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str):
                words += len(text.split())
    return max(1, words)


def error_body(status: int, message: str, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error envelope for ``status``, with the ``type`` and ``code`` its API gives such failures."""
    default_code = responses.get(status, "error").lower().replace(" ", "_")
    if status == HTTPStatus.TOO_MANY_REQUESTS:
        kind, default_code = "requests", "rate_limit_exceeded"
    else:
        kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": code or default_code}}


def _usage(body: dict[str, Any]) -> dict[str, int]:
    prompt = prompt_tokens(body)
    return {"prompt_tokens": prompt, "completion_tokens": COMPLETION_TOKENS, "total_tokens": prompt + COMPLETION_TOKENS}


def completion(body: dict[str, Any]) -> dict[str, Any]:
    """The non-streamed answer to a chat request ``body``: :data:`REPLY`, the body's model echoed, exact usage."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
        "usage": _usage(body),
    }


def completion_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The streamed answer to ``body`` as OpenAI sends it: one ``chat.completion.chunk`` per word of :data:`REPLY`
    (the first with the role, the last with the finish reason) and, when ``stream_options.include_usage`` is set,
    a last chunk with no choices and the usage (the others then carry ``"usage": null``, as OpenAI's do)."""
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    base: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk"}
    base |= {"created": int(time.time()), "model": body.get("model")}
    words = REPLY.split()
    chunks: list[dict[str, Any]] = []
    for index, word in enumerate(words):
        delta = {"role": "assistant", "content": word} if index == 0 else {"content": f" {word}"}
        finish = "stop" if index == len(words) - 1 else None
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        chunks.append({**chunk, "usage": None} if include_usage else chunk)
    if include_usage:
        chunks.append({**base, "choices": [], "usage": _usage(body)})
    return chunks


class _State:
    """What the handlers share: the key, the prefix, the record and the failures still to give, under one lock."""

    def __init__(self, api_key: str, path_prefix: str) -> None:
        self.api_key = api_key
        self.chat_path = f"{path_prefix.rstrip('/')}/chat/completions"
        self.lock = threading.Lock()
        self.received: list[Received] = []
        self.failures: list[int] = []

    def record(self, request: Received) -> None:
        with self.lock:
            self.received.append(request)

    def take_failure(self) -> int | None:
        with self.lock:
            return self.failures.pop(0) if self.failures else None


class _Handler(BaseHTTPRequestHandler):
    """One connection: HTTP/1.1 with kept-alive connections, every reply JSON with its length except the streams,
    which are chunked so the connection outlives them (as behind a real provider's front end)."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_SECONDS
    server_version = "inferplane-provider"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read :meth:`ProviderServer.received`, not a log."""

    @property
    def _state(self) -> _State:
        return cast(_ProviderHTTPServer, self.server).state

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def _serve(self) -> None:
        """Answer one request; an error of ours answers 500 (or drops a stream already under way) and the connection
        closes, while the server goes on."""
        self._answered = False
        try:
            self._answer(self._read_body())
        except (ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True
        except Exception as error:
            self.close_connection = True
            if not self._answered:
                self._send_json(HTTPStatus.INTERNAL_SERVER_ERROR, error_body(500, f"provider stand-in: {error!r}"))

    def _read_body(self) -> bytes:
        """The request's body, by its length or its chunks (Envoy sends chunks when its client gave no length)."""
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            data = bytearray()
            while size := int(self.rfile.readline(65537).split(b";")[0].strip() or b"0", 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(data)
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _answer(self, raw: bytes) -> None:
        """Record the request, then refuse it (path, key, a failure asked for, a body that is no chat) or answer."""
        state = self._state
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = None
        body: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            headers[name.lower()] = f"{headers[name.lower()]}, {value}" if name.lower() in headers else value
        state.record(Received(self.path, headers, body))
        if self.path.split("?", 1)[0] != state.chat_path:
            self._send_json(HTTPStatus.NOT_FOUND, error_body(404, f"Unknown path {self.path}.", "unknown_url"))
        elif self.command != "POST":
            self._send_json(HTTPStatus.METHOD_NOT_ALLOWED, error_body(405, f"Use POST on {state.chat_path}."))
        elif self.headers.get("authorization") != f"Bearer {state.api_key}":
            self._send_json(HTTPStatus.UNAUTHORIZED, error_body(401, "Incorrect API key provided.", "invalid_api_key"))
        elif (failure := state.take_failure()) is not None:
            self._send_json(failure, error_body(failure, f"Failure {failure} asked for by the test."))
        elif parsed is None or not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list):
            self._send_json(HTTPStatus.BAD_REQUEST, error_body(400, "A chat request needs a model and messages."))
        elif body.get("stream") is True:
            self._send_stream(completion_chunks(body))
        else:
            self._send_json(HTTPStatus.OK, completion(body))

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self._answered = True
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if self.close_connection:
            self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, chunks: list[dict[str, Any]]) -> None:
        """Server-sent events, each in its own HTTP chunk and flushed, then ``[DONE]`` and the last chunk."""
        self._answered = True
        self.send_response(HTTPStatus.OK)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in [*(json.dumps(chunk) for chunk in chunks), "[DONE]"]:
            data = f"data: {event}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _ProviderHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server whose connections speak TLS; the handshake runs on the connection's own thread, so a
    slow or refused client holds up no other, and the open connections are kept to be cut at close."""

    daemon_threads = True

    def __init__(self, state: _State, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.context = context
        self.connections: set[ssl.SSLSocket] = set()
        self.connections_lock = threading.Lock()

    def finish_request(self, request: Any, client_address: Any) -> None:
        sock = cast(socket.socket, request)
        sock.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        tls = self.context.wrap_socket(sock, server_side=True)
        with self.connections_lock:
            self.connections.add(tls)
        try:
            super().finish_request(tls, client_address)
        finally:
            with self.connections_lock:
                self.connections.discard(tls)
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet for the clients that hang up or refuse our certificate (a test may mean them to); loud otherwise."""
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError | ssl.SSLError):
            super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        """Shut the kept-alive connections, so their threads end with the server rather than at their idle timeout."""
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class ProviderServer:
    """The HTTPS stand-in for a hosted provider; a context manager, or :meth:`start` and :meth:`close` by hand.

    It writes its CA and certificate into ``directory`` and accepts only ``Bearer {api_key}``; the chat endpoint is
    ``{path_prefix}/chat/completions`` (anything else answers 404).
    """

    def __init__(self, directory: Path, api_key: str, path_prefix: str = "/v1") -> None:
        self.directory = directory
        self.path_prefix = path_prefix.rstrip("/")
        self._state = _State(api_key, self.path_prefix)
        self._server: _ProviderHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ProviderServer:
        """Write the certificates, bind a free port on 127.0.0.1 and serve on a daemon thread."""
        if self._server is not None:
            return self
        files = write_certificates(self.directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(files.cert, files.key)
        context.set_alpn_protocols(["http/1.1"])  # a client offering h2 (Envoy's auto) settles on HTTP/1.1
        self._server = _ProviderHTTPServer(self._state, context)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="provider-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, cut the open connections and free the port; safe to call twice."""
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.cut_connections()
        if thread is not None:
            thread.join()

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The port the OS chose; the server must be started."""
        if self._server is None:
            raise RuntimeError("the provider server is not started")
        return int(self._server.server_address[1])

    @property
    def ca_file(self) -> Path:
        """The CA a client must trust to reach the server (written by :meth:`start`)."""
        return self.directory / "ca.pem"

    @property
    def base_url(self) -> str:
        """What an OpenAI client's ``base_url`` is set to; ``localhost`` so that the certificate's name matches."""
        return f"https://localhost:{self.port}{self.path_prefix}"

    def received(self) -> list[Received]:
        """Every request that reached the handler since the start or the last :meth:`clear`, in order."""
        with self._state.lock:
            return list(self._state.received)

    def fail_next(self, status: int, count: int = 1) -> None:
        """Answer the next ``count`` authorised chat requests with ``status`` and OpenAI's error body."""
        with self._state.lock:
            self._state.failures.extend([status] * count)

    def rotate(self, api_key: str) -> None:
        """Accept only ``api_key`` from now on (the provider's side of a key rotation)."""
        with self._state.lock:
            self._state.api_key = api_key

    def clear(self) -> None:
        """Forget the requests received (and any failures still asked for), for the next test."""
        with self._state.lock:
            self._state.received.clear()
            self._state.failures.clear()
