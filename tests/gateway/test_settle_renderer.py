"""The rendered usage filter and settlement log on the real Envoy 1.40.0: what reaches the processor of a response.

Envoy runs exactly :func:`usage_filter` and :func:`settle_log` (the placing filter's settlement stood in for by a
``set_metadata`` filter) in front of a stub upstream that answers as an engine does, chunk by chunk, and the access
log goes to an ``AccessLogService`` of the test's own, which keeps each entry by its request id.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from google.protobuf import json_format

from inferplane.components.gateway.envoy_fields import socket, typed
from inferplane.components.gateway.settle_renderer import settle_log, usage_filter
from inferplane.processor.config import SETTLE_METADATA_NAMESPACE, USAGE_METADATA_NAMESPACE
from tests.envoy import envoy_binary
from tests.gateway_support import Procs, wait_port, wait_until
from tests.ports import free_port

ALS_CLUSTER = "processor"
USAGE = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16, "prompt_tokens_details": {"cached_tokens": 0}}


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


TOKEN = _event({"choices": [{"delta": {"content": "w "}}], "usage": None})
FINAL = _event({"choices": [], "usage": USAGE})
QUOTING = _event({"choices": [{"delta": {"content": 'see "prompt_tokens": 99, "completion_tokens": 98'}}]})
"""A completion whose text quotes a usage: inside a JSON string its quotes are escaped, so it is no usage."""

ANSWERS: dict[str, tuple[int, list[bytes]]] = {
    # a stream whose usage is split across two chunks, as a TCP read may split it
    "stream": (200, [TOKEN, TOKEN, FINAL[:40], FINAL[40:], b"data: [DONE]\n\n"]),
    "json": (200, [json.dumps({"choices": [{"message": {"content": "w"}}], "usage": USAGE}).encode()]),
    "error": (500, [json.dumps({"error": {"message": "failed"}, "usage": USAGE}).encode()]),
    "quoting": (200, [TOKEN, QUOTING, b"data: [DONE]\n\n"]),
    "comment": (200, [b": keep-alive\n\n", TOKEN, FINAL, b"data: [DONE]\n\n"]),  # an SSE comment first
    "long": (200, [TOKEN] * 400),
    "late": (200, [TOKEN]),  # after LATE_SECONDS: the client has left by then
    "slow-end": (200, [TOKEN, FINAL, b"data: [DONE]\n\n"]),  # the body's end LATE_SECONDS after "[DONE]"
}
LATE_SECONDS = 1.0


class Upstream(BaseHTTPRequestHandler):
    """Answers ``ANSWERS[body["case"]]``, a chunk per write (HTTP/1.1 chunked), 5 ms apart."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        case = json.loads(self.rfile.read(int(self.headers["content-length"])))["case"]
        status, chunks = ANSWERS[case]
        if case == "late":
            time.sleep(LATE_SECONDS)
        self.send_response(status)
        event_stream = chunks[0].startswith((b"data:", b": "))
        self.send_header("content-type", "text/event-stream" if event_stream else "application/json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                time.sleep(0.005)
            if case == "slow-end":
                time.sleep(LATE_SECONDS)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left


class Entries(als_pb2_grpc.AccessLogServiceServicer):  # type: ignore[misc]
    """The entries Envoy logged, by request id: their status and the two namespaces the processor reads."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}

    def StreamAccessLogs(self, request_iterator: Iterator[Any], context: Any) -> Any:  # noqa: N802
        for message in request_iterator:
            for entry in message.http_logs.log_entry:
                metadata = entry.common_properties.metadata.filter_metadata
                self.by_id[entry.request.request_id] = {
                    "status": entry.response.response_code.value,
                    **{name: json_format.MessageToDict(metadata[name]) for name in metadata},
                }
        return als_pb2.StreamAccessLogsResponse()


def _cluster(name: str, port: int, *, http2: bool = False) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": socket("127.0.0.1", port)}}]}],
        },
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": typed(
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                explicit_http_config={"http2_protocol_options": {}},
            )
        }
    return cluster


def _bootstrap(listen: int, upstream: int, als: int, admin: int) -> dict[str, Any]:
    settle = {"tenant": "t", "tier": "standard", "model": "m", "reserved": 7, "provider": "", "cache": ""}
    manager = typed(
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        stat_prefix="api",
        access_log=[settle_log(ALS_CLUSTER)],
        route_config={
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [
                        {
                            # a request the placing filter did not settle (a local reply's, say): never logged
                            "match": {"prefix": "/unsettled"},
                            "route": {"cluster": "upstream", "timeout": "0s"},
                            "typed_per_filter_config": {
                                "settle": typed("envoy.config.route.v3.FilterConfig", disabled=True)
                            },
                        },
                        {"match": {"prefix": "/"}, "route": {"cluster": "upstream", "timeout": "0s"}},
                    ],
                }
            ]
        },
        http_filters=[
            {
                "name": "settle",  # stands in for the placing filter, which sets the settlement
                "typed_config": typed(
                    "envoy.extensions.filters.http.set_metadata.v3.Config",
                    metadata=[{"metadata_namespace": SETTLE_METADATA_NAMESPACE, "value": settle}],
                ),
            },
            usage_filter(),
            {"name": "router", "typed_config": typed("envoy.extensions.filters.http.router.v3.Router")},
        ],
    )
    return {
        "admin": {"address": socket("127.0.0.1", admin)},
        "static_resources": {
            "listeners": [
                {
                    "name": "api",
                    "address": socket("127.0.0.1", listen),
                    "filter_chains": [
                        {
                            "filters": [
                                {"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}
                            ]
                        }
                    ],
                }
            ],
            "clusters": [_cluster("upstream", upstream), _cluster(ALS_CLUSTER, als, http2=True)],
        },
    }


class Envoy:
    def __init__(self, port: int, entries: Entries) -> None:
        self.port = port
        self.entries = entries

    def send(
        self, case: str, path: str = "/v1/chat/completions", read: int | None = None, timeout: float = 10
    ) -> tuple[str, bytes]:
        """Post ``case``; read the whole answer, or only ``read`` bytes before leaving, or leave after ``timeout``.
        Its request id and what was read."""
        request_id = str(uuid.uuid4())
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=json.dumps({"case": case}).encode(),
            headers={"content-type": "application/json", "x-request-id": request_id},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return request_id, response.read(read) if read is not None else response.read()
        except urllib.error.HTTPError as error:
            return request_id, error.read()
        except TimeoutError:
            return request_id, b""

    def entry(self, request_id: str) -> dict[str, Any]:
        wait_until(lambda: request_id in self.entries.by_id, 10, f"the access log entry of {request_id}")
        return self.entries.by_id[request_id]


@pytest.fixture(scope="module")
def envoy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Envoy]:
    binary = envoy_binary()
    directory = tmp_path_factory.mktemp("settle")
    upstream = ThreadingHTTPServer(("127.0.0.1", free_port()), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    entries = Entries()
    als = grpc.server(futures.ThreadPoolExecutor(4))
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(entries, als)
    als_port = als.add_insecure_port("127.0.0.1:0")
    als.start()
    listen, admin = free_port(), free_port()
    config = Path(directory) / "envoy.yaml"
    config.write_text(yaml.safe_dump(_bootstrap(listen, upstream.server_address[1], als_port, admin)))
    procs = Procs(Path(directory))
    try:
        procs.start(
            "envoy",
            [str(binary), "-c", str(config), "--concurrency", "1", "--log-level", "warn", "--disable-hot-restart"],
        )  # no shared memory of base id 0: another test's Envoy may be starting beside this one
        wait_port(listen, 30)
        yield Envoy(listen, entries)
        assert "script log" not in procs.log("envoy")  # the Lua script never failed
    finally:
        procs.stop_all()
        als.stop(0)
        upstream.shutdown()


def _read(entry: dict[str, Any]) -> dict[str, Any]:
    return dict(entry.get(USAGE_METADATA_NAMESPACE, {}))


def test_a_streams_usage_split_across_chunks_is_read_whole(envoy: Envoy) -> None:
    request_id, body = envoy.send("stream")
    assert body.endswith(b"data: [DONE]\n\n")  # the stream passed unchanged
    entry = envoy.entry(request_id)
    assert entry["status"] == 200
    assert entry[SETTLE_METADATA_NAMESPACE]["tenant"] == "t"  # the settlement travels with it
    assert _read(entry) == {"prompt": 11.0, "completion": 5.0, "stream": True, "ended": True}


def test_a_stream_that_opens_with_a_comment_is_an_event_stream(envoy: Envoy) -> None:
    request_id, _ = envoy.send("comment")
    assert _read(envoy.entry(request_id)) == {"prompt": 11.0, "completion": 5.0, "stream": True, "ended": True}


def test_a_json_bodys_usage_is_read(envoy: Envoy) -> None:
    request_id, _ = envoy.send("json")
    assert _read(envoy.entry(request_id)) == {"prompt": 11.0, "completion": 5.0, "stream": False, "ended": True}


def test_an_errors_body_is_not_read_for_usage(envoy: Envoy) -> None:
    request_id, _ = envoy.send("error")
    entry = envoy.entry(request_id)
    assert entry["status"] == 500
    assert _read(entry) == {"stream": False, "ended": True}


def test_a_completion_quoting_a_usage_is_no_usage(envoy: Envoy) -> None:
    request_id, body = envoy.send("quoting")
    assert b'\\"prompt_tokens\\": 99' in body
    assert _read(envoy.entry(request_id)) == {"stream": True, "ended": True}


def test_a_client_gone_mid_stream_is_logged_without_an_end(envoy: Envoy) -> None:
    """Its reservation is then returned: the processor settles it with no usage."""
    request_id, read = envoy.send("long", read=len(TOKEN))
    assert read == TOKEN
    entry = envoy.entry(request_id)
    assert entry["status"] == 200
    assert "ended" not in _read(entry)


def test_a_usage_read_before_the_client_left_is_still_logged(envoy: Envoy) -> None:
    """A client that closes at "[DONE]", before the body's end reaches Envoy (the openai client may): no end, but
    the usage it was sent is there, and the processor accounts it."""
    answer = TOKEN + FINAL + b"data: [DONE]\n\n"
    request_id, read = envoy.send("slow-end", read=len(answer))
    assert read == answer
    assert _read(envoy.entry(request_id)) == {"prompt": 11.0, "completion": 5.0, "stream": True}


def test_a_client_gone_before_the_response_is_logged_with_no_status(envoy: Envoy) -> None:
    """Status 0: the processor keeps its prompt's reservation (the engine had the prompt)."""
    request_id, read = envoy.send("late", timeout=LATE_SECONDS / 5)
    assert read == b""
    entry = envoy.entry(request_id)
    assert entry["status"] == 0
    assert _read(entry) == {}


def test_a_request_without_a_settlement_is_not_logged(envoy: Envoy) -> None:
    unsettled, _ = envoy.send("json", path="/unsettled")
    settled, _ = envoy.send("json")
    envoy.entry(settled)  # logged after the unsettled one, on the same stream
    assert unsettled not in envoy.entries.by_id
