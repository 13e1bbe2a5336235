"""A replica that died while the processor still thinks it ready: the real Envoy 1.40 with the rendered model cluster
and route (override_host, its least-request fallback, the retry policy, outlier detection) sends each request to
the dead pick, then its one retry to the next replica the processor listed, never back to the dead one.

The pick comes from the processor's own :meth:`Placement.destination`, set as the ``envoy.lb`` metadata by Envoy's
``set_metadata`` filter (no processor runs here). Envoy holds a request to the live replica open while the others
run, so least-request (what a retry used before the list: ``previous_hosts`` rejects the host just tried for at most
three more draws, then the last draw stands) favours the dead host, which holds nothing. With the pick alone in the
metadata, 12 of 20 runs of this scenario had a client 503 (flags ``UF,URX``, the dead host its upstream) before
outlier detection ejected the dead host, and 13 of 20 broke the counts asserted here.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway import renderer as gc
from inferplane.processor.endpoints import Endpoint
from inferplane.processor.ext_proc import Placement
from inferplane.processor.slots import Slot
from tests.envoy import envoy_binary
from tests.gateway_support import Procs, gateway_addresses, scrape, wait_http
from tests.http_replies import send_json
from tests.ports import free_port
from tests.tiny_model import tiny_platform

MODEL = "delta"
REQUESTS = 40
HELD_PATH = "/v1/held"
"""A request the live replica answers only when the test ends: it keeps one request active on that host."""


class _Replica(BaseHTTPRequestHandler):
    """A live replica: answers every completion at once, except the held one."""

    release = threading.Event()
    served = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == HELD_PATH:
            _Replica.release.wait(30)
        else:
            _Replica.served += 1
        body = b"{}"
        send_json(self, body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test counts requests itself."""


@pytest.fixture
def live_replica() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Replica)
    _Replica.release.clear()
    _Replica.served = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        _Replica.release.set()
        server.shutdown()
        server.server_close()


def _bootstrap(tmp_path: Path, dead: int, live: int, listener_port: int, admin_port: int) -> dict[str, Any]:
    """The rendered model cluster and the model route's action behind one listener that sets the processor's
    override_host metadata: the pick ``dead``, then what :meth:`Placement.destination` lists."""
    spec = tiny_platform([{"name": MODEL, "routing_tier": "standard"}], {"replicas": 2})
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / gc.API_KEYS_FILE).write_text(gc.render_api_key_file({"team-a": "k" * 32}))
    addresses = gateway_addresses({MODEL: [("127.0.0.1", dead), ("127.0.0.1", live)]}, keys, tmp_path, "-t")
    rendered = yaml.safe_load(gc.render_gateway(spec, size_platform(spec), "eks", addresses).envoy_yaml)
    [cluster] = [c for c in rendered["static_resources"]["clusters"] if c["name"] == f"model-{MODEL}"]
    [route] = [
        r
        for listener in rendered["static_resources"]["listeners"]
        for chain in listener["filter_chains"]
        for f in chain["filters"]
        for host in f["typed_config"].get("route_config", {}).get("virtual_hosts", [])
        for r in host["routes"]
        if r.get("name") == f"model-{MODEL}"
    ]
    pick = Endpoint(f"127.0.0.1:{dead}", ready=True)
    destination = Placement(MODEL, pick, Slot(pick.address, shared=False), 1, (f"127.0.0.1:{live}",)).destination()
    metadata = {
        "name": "envoy.filters.http.set_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config",
            "metadata": [{"metadata_namespace": "envoy.lb", "value": {"x-gateway-destination-endpoint": destination}}],
        },
    }
    router = {
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
    }
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
        "HttpConnectionManager",
        "stat_prefix": "failover",
        "route_config": {
            "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [{**route, "match": {"prefix": "/"}}]}]
        },
        "http_filters": [metadata, router],
    }
    listener = {
        "name": "failover",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": listener_port}},
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {"listeners": [listener], "clusters": [cluster]},
    }


def _post(port: int, path: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_a_dead_picks_retry_goes_to_the_next_listed_replica(tmp_path: Path, live_replica: int) -> None:
    dead = free_port()  # nothing listens there: Envoy's connection is refused
    listener_port, admin_port = free_port(), free_port()
    config = tmp_path / "envoy.yaml"
    config.write_text(json.dumps(_bootstrap(tmp_path, dead, live_replica, listener_port, admin_port)))
    procs = Procs(tmp_path)
    envoy = procs.start(
        "envoy", [str(envoy_binary()), "-c", str(config), "--disable-hot-restart", "--concurrency", "1"]
    )
    held = threading.Thread(target=_post, args=(listener_port, HELD_PATH))
    stats_url = f"http://127.0.0.1:{admin_port}/stats/prometheus"
    try:
        wait_http(f"http://127.0.0.1:{admin_port}/ready", 30, envoy)
        held.start()  # its first try fails on the dead pick too; its retry holds the live host
        deadline = time.monotonic() + 10
        while not _active(scrape(stats_url)) and time.monotonic() < deadline:
            time.sleep(0.05)
        statuses = [_post(listener_port, "/v1/chat/completions") for _ in range(REQUESTS)]
        stats = scrape(stats_url)
    finally:
        _Replica.release.set()
        if held.is_alive():
            held.join(30)
        procs.stop_all()
    assert statuses == [200] * REQUESTS, procs.log("envoy")
    assert _Replica.served == REQUESTS
    # Every request (and the held one) tried the dead pick once and retried once, on the live replica.
    cluster = f'envoy_cluster_name="model-{MODEL}"'
    assert stats[f"envoy_cluster_upstream_cx_connect_fail{{{cluster}}}"] == REQUESTS + 1
    assert stats[f"envoy_cluster_upstream_rq_retry{{{cluster}}}"] == REQUESTS + 1
    # Outlier detection ejected the dead replica after 3 gateway failures, and override_host tried it first anyway:
    # the listed pick is taken whatever its health, so only the list keeps the retry off it.
    assert stats[f"envoy_cluster_outlier_detection_ejections_active{{{cluster}}}"] == 1
    assert stats[f"envoy_cluster_membership_healthy{{{cluster}}}"] == 1


def _active(stats: dict[str, float]) -> bool:
    return stats.get(f'envoy_cluster_upstream_rq_active{{envoy_cluster_name="model-{MODEL}"}}', 0.0) >= 1
