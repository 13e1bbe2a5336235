"""The gateway's rendered configuration: every shipped stack's Envoy bootstrap passes the real ``envoy --mode
validate``, the processor config follows sizing, and the spec's gateway section is checked with key paths."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.catalog import get_accelerator
from inferplane.components.gateway import renderer as gc
from inferplane.components.gateway.settle_renderer import USAGE_FILTER, USAGE_LUA
from inferplane.components.serving.naming import model_endpoints_host
from inferplane.components.spec.platform_spec import PlatformSpec, SpecError, parse_platform
from inferplane.processor.config import LoadSeries, MetricSelector, ProcessorConfig
from tests.envoy import validate
from tests.serving_support import stack_spec
from tests.stacks import ROUTED_TIER

STACKS = ("dev", "staging", "prod")
KEYS = {"assistant": "k" * 32, "batch-summaries": "b" * 32, "ml-dev": "d" * 32, "qa": "q" * 32}
OVERRIDE_HOST = {
    "policies": [
        {
            "typed_extension_config": {
                "name": "envoy.load_balancing_policies.override_host",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies."
                    "override_host.v3.OverrideHost",
                    # The endpoint-picker protocol's names (GIE docs/proposals/004-endpoint-picker-protocol): the
                    # processor's pick, read from dynamic metadata only, never from a client's header.
                    "override_host_sources": [
                        {"metadata": {"key": "envoy.lb", "path": [{"key": "x-gateway-destination-endpoint"}]}}
                    ],
                    "fallback_policy": {
                        "policies": [
                            {
                                "typed_extension_config": {
                                    "name": "envoy.load_balancing_policies.least_request",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies."
                                        "least_request.v3.LeastRequest",
                                        "choice_count": 2,
                                    },
                                }
                            }
                        ]
                    },
                },
            }
        }
    ]
}
"""Every model cluster's load balancing: the processor's pick when Envoy knows the host, else least-request."""
VLLM_LOAD = LoadSeries(
    running=MetricSelector(name="vllm:num_requests_running"),
    waiting=MetricSelector(name="vllm:num_requests_waiting"),
    kv_usage=MetricSelector(name="vllm:kv_cache_usage_perc"),
)
TRTLLM_LOAD = LoadSeries(
    running=MetricSelector(name="nv_trt_llm_request_metrics", labels=(("request_type", "active"),)),
    waiting=MetricSelector(name="nv_trt_llm_request_metrics", labels=(("request_type", "waiting"),)),
    kv_usage=MetricSelector(name="nv_trt_llm_kv_cache_block_metrics", labels=(("kv_cache_block_type", "fraction"),)),
)
"""What the router reads from each replica's /metrics (Triton's tensorrtllm_backend README, "Triton Metrics":
``nv_trt_llm_request_metrics{request_type=...}`` and ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=...}``);
vLLM on TPU reports vLLM's series."""


def _write_keys(directory: Path) -> gc.GatewayAddresses:
    """A key file in ``directory`` and a config directory beside it, for the files Envoy reads while validating."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / gc.API_KEYS_FILE).write_text(gc.render_api_key_file(KEYS))
    config_dir = directory.parent / "config"
    config_dir.mkdir(exist_ok=True)
    return gc.GatewayAddresses(api_keys_dir=str(directory), config_dir=str(config_dir))


def _write_config(rendered: gc.RenderedGateway, tmp_path: Path) -> Path:
    """The bootstrap, with the providers' SDS files where :func:`_write_keys` put the config directory."""
    for name, text in rendered.provider_files.items():
        (tmp_path / "config" / name).write_text(text)
    config = tmp_path / "envoy.yaml"
    config.write_text(rendered.envoy_yaml)
    return config


def _rendered(stack: str, cluster: gc.Cluster, tmp_path: Path) -> gc.RenderedGateway:
    spec = stack_spec(stack)
    return gc.render_gateway(spec, size_platform(spec), cluster, _write_keys(tmp_path / "keys"))


def _stack_clusters() -> list[tuple[str, gc.Cluster]]:
    return [(stack, cluster) for stack in STACKS for cluster in gc.serving_clusters(stack_spec(stack))]


@pytest.mark.parametrize(("stack", "cluster"), _stack_clusters())
def test_every_stack_renders_a_config_envoy_accepts(stack: str, cluster: gc.Cluster, tmp_path: Path) -> None:
    rendered = _rendered(stack, cluster, tmp_path)
    config = _write_config(rendered, tmp_path)
    result = validate(config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"configuration '{config}' OK" in result.stdout + result.stderr
    ProcessorConfig.model_validate_json(rendered.processor_json)  # the processor reads exactly this


def test_clusters_per_stack() -> None:
    assert gc.serving_clusters(stack_spec("dev")) == ("eks",)
    assert gc.serving_clusters(stack_spec("staging")) == ("eks", "gke")
    assert gc.serving_clusters(stack_spec("prod")) == ("eks",)


def _mutated(rendered: gc.RenderedGateway, mutate: Any, tmp_path: Path) -> str:
    bootstrap = yaml.safe_load(rendered.envoy_yaml)
    mutate(bootstrap)
    config = _write_config(rendered, tmp_path).with_name("mutated.yaml")
    config.write_text(yaml.safe_dump(bootstrap))
    result = validate(config)
    assert result.returncode != 0
    return result.stdout + result.stderr


def _api_manager(bootstrap: dict[str, Any]) -> dict[str, Any]:
    manager: dict[str, Any] = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0][
        "typed_config"
    ]
    return manager


def test_validation_catches_a_route_to_a_missing_cluster(tmp_path: Path) -> None:
    rendered = _rendered("prod", "eks", tmp_path)

    def drop_fallback_cluster(bootstrap: dict[str, Any]) -> None:
        clusters = bootstrap["static_resources"]["clusters"]
        bootstrap["static_resources"]["clusters"] = [c for c in clusters if c["name"] != "route-llama-70b"]

    assert "route-llama-70b" in _mutated(rendered, drop_fallback_cluster, tmp_path)


def test_validation_catches_an_unknown_filter_field(tmp_path: Path) -> None:
    rendered = _rendered("dev", "eks", tmp_path)

    def typo(bootstrap: dict[str, Any]) -> None:
        ext_proc = next(
            f for f in _api_manager(bootstrap)["http_filters"] if f["name"] == "envoy.filters.http.ext_proc"
        )
        ext_proc["typed_config"]["failure_mode_alow"] = True

    assert "failure_mode_alow" in _mutated(rendered, typo, tmp_path)


def test_validation_catches_a_missing_api_key_file(tmp_path: Path) -> None:
    spec = stack_spec("dev")
    rendered = gc.render_gateway(spec, size_platform(spec), "eks", gc.GatewayAddresses(api_keys_dir=str(tmp_path)))
    config = tmp_path / "envoy.yaml"
    config.write_text(rendered.envoy_yaml)
    result = validate(config)
    assert result.returncode != 0
    assert f"{tmp_path}/{gc.API_KEYS_FILE}" in result.stdout + result.stderr


PROVIDER = "fireworks-llama-70b"


def test_prods_provider_is_a_tls_cluster_with_its_key_injected_and_a_route_only_the_processor_selects(
    tmp_path: Path,
) -> None:
    rendered = _rendered("prod", "eks", tmp_path)
    bootstrap = yaml.safe_load(rendered.envoy_yaml)
    clusters = {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}
    cluster = clusters[f"provider-{PROVIDER}"]
    host = "api.fireworks.ai"
    assert (cluster["type"], cluster["dns_lookup_family"]) == ("LOGICAL_DNS", "V4_PREFERRED")
    assert cluster["load_assignment"]["endpoints"] == [
        {
            "lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": host, "port_value": 443}}, "hostname": host}}
            ]
        }
    ]
    tls = cluster["transport_socket"]["typed_config"]
    assert tls == {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "sni": host,
        "common_tls_context": {
            "validation_context": {
                "trusted_ca": {"filename": "/etc/ssl/certs/ca-certificates.crt"},
                "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": host}}],
            }
        },
    }
    options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    injector, codec = options["http_filters"]
    assert codec["name"] == "envoy.filters.http.upstream_codec"  # the last upstream filter, as Envoy requires
    config_dir = str(tmp_path / "config")
    assert injector["typed_config"]["overwrite"] is True
    assert injector["typed_config"]["credential"]["typed_config"] == {
        "@type": "type.googleapis.com/envoy.extensions.http.injected_credentials.generic.v3.Generic",
        "credential": {
            "name": f"provider-{PROVIDER}",
            "sds_config": {
                "path_config_source": {
                    "path": f"{config_dir}/provider-{PROVIDER}-sds.yaml",
                    "watched_directory": {"path": config_dir},
                }
            },
        },
        "header_value_prefix": "Bearer ",
    }
    assert cluster["circuit_breakers"]["thresholds"][0]["max_requests"] == 64
    assert cluster["outlier_detection"]["consecutive_5xx"] == 5
    routes = {r["name"]: r for r in _api_manager(bootstrap)["route_config"]["virtual_hosts"][0]["routes"]}
    names = list(routes)
    assert names.index(f"provider-{PROVIDER}") < names.index("model-llama-70b")  # matched before the models
    route = routes[f"provider-{PROVIDER}"]
    assert route["match"]["dynamic_metadata"] == [
        {"filter": "inferplane", "path": [{"key": "provider"}], "value": {"string_match": {"exact": PROVIDER}}}
    ]
    assert (route["route"]["prefix_rewrite"], route["route"]["auto_host_rewrite"]) == ("/inference/v1/", True)
    assert set(route["request_headers_to_remove"]) >= {
        "authorization", "x-api-key", "api-key", gc.TENANT_HEADER, "x-request-id", "x-forwarded-for",
    }  # fmt: skip
    assert route["response_headers_to_add"][0]["header"] == {"key": gc.UPSTREAM_HEADER, "value": f"provider/{PROVIDER}"}
    router = _api_manager(bootstrap)["http_filters"][-1]
    assert router["typed_config"]["suppress_envoy_headers"] is True
    # The key's file in the Secret mounted in Envoy's container, watched for rotation; the processor learns only
    # the provider's name, model, prices and tenants.
    sds = yaml.safe_load(rendered.provider_files[f"provider-{PROVIDER}-sds.yaml"])
    mount = f"/etc/inferplane/providers/{PROVIDER}"
    assert sds["resources"][0]["generic_secret"] == {
        "secret": {"filename": f"{mount}/api-key", "watched_directory": {"path": mount}}
    }
    assert [m.model_dump() for m in rendered.provider_mounts] == [
        {"provider": PROVIDER, "secret": "fireworks-api-key", "key": "api-key", "mount_dir": mount}
    ]
    assert (rendered.provider_ports, dict(rendered.provider_hosts)) == ((443,), {PROVIDER: host})
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    assert [p.model_dump() for p in config.providers] == [
        {
            "name": PROVIDER,
            "model": "accounts/fireworks/models/llama-v3p3-70b-instruct",
            "input_usd_per_million": 0.9,
            "output_usd_per_million": 0.9,
            "tenants": ("assistant",),
        }
    ]
    assert config.tier("premium").providers == (PROVIDER,)  # type: ignore[union-attr]
    assert "fireworks-api-key" not in rendered.processor_json


def test_validation_catches_the_credential_type_of_the_protos_own_example(tmp_path: Path) -> None:
    """The CredentialInjector proto's comment names ``...injected_credentials.generic.v3.Generic`` without
    ``.http.``; Envoy 1.40 refuses it (providers-routing-facts §1.3), so the validation above is not vacuous."""
    rendered = _rendered("prod", "eks", tmp_path)

    def proto_example(bootstrap: dict[str, Any]) -> None:
        cluster = next(c for c in bootstrap["static_resources"]["clusters"] if c["name"] == f"provider-{PROVIDER}")
        options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        credential = options["http_filters"][0]["typed_config"]["credential"]["typed_config"]
        credential["@type"] = "type.googleapis.com/envoy.extensions.injected_credentials.generic.v3.Generic"

    assert "envoy.extensions.injected_credentials.generic.v3.Generic" in _mutated(rendered, proto_example, tmp_path)


def test_prod_routes_each_model_with_its_tier_fallback(tmp_path: Path) -> None:
    rendered = _rendered("prod", "eks", tmp_path)
    bootstrap = yaml.safe_load(rendered.envoy_yaml)
    clusters = {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}
    # One cluster, the fallback's replicas a priority lower: an aggregate cluster's load balancer would hide the
    # request's stream info from the override_host policy, which then never reads the processor's pick.
    route = clusters["route-llama-70b"]
    assert "cluster_type" not in route
    assert route["load_balancing_policy"] == OVERRIDE_HOST
    assert [(e.get("priority", 0), e["lb_endpoints"]) for e in route["load_assignment"]["endpoints"]] == [
        (0, clusters["model-llama-70b"]["load_assignment"]["endpoints"][0]["lb_endpoints"]),
        (1, clusters["model-llama-8b"]["load_assignment"]["endpoints"][0]["lb_endpoints"]),
    ]
    assert route["circuit_breakers"]["thresholds"][0]["max_requests"] == sum(
        clusters[f"model-{m}"]["circuit_breakers"]["thresholds"][0]["max_requests"] for m in ("llama-70b", "llama-8b")
    )
    assert "route-llama-8b" not in clusters  # standard has no fallback
    endpoint = clusters["model-llama-70b"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"] == {"address": model_endpoints_host("llama-70b"), "port_value": 8000}
    assert clusters["model-llama-70b"]["type"] == "STRICT_DNS"
    # The Triton fallback answers on its OpenAI frontend's port, not KServe's 8000.
    triton = clusters["model-llama-8b"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert triton["address"]["socket_address"] == {"address": model_endpoints_host("llama-8b"), "port_value": 9000}
    routes = {r["name"]: r for r in _api_manager(bootstrap)["route_config"]["virtual_hosts"][0]["routes"]}
    premium = routes["model-llama-70b"]
    assert premium["route"]["cluster"] == "route-llama-70b"
    assert premium["match"]["dynamic_metadata"][0]["value"] == {"string_match": {"exact": "llama-70b"}}
    assert premium["route"]["retry_policy"]["retriable_status_codes"] == [429, 503]
    assert premium["route"]["retry_policy"]["num_retries"] == 2  # once on llama-70b, once on its fallback
    assert routes["model-llama-8b"]["route"]["retry_policy"]["num_retries"] == 1
    assert premium["response_headers_to_add"][0]["header"] == {
        "key": gc.UPSTREAM_HEADER,
        "value": "%UPSTREAM_METADATA(inferplane:model)%",
    }
    assert routes["model-llama-8b"]["route"]["cluster"] == "model-llama-8b"
    assert routes["not-found"]["direct_response"]["status"] == 404
    assert rendered.upstream_hosts == {
        "llama-70b-prefill": ("llama-70b-prefill-endpoints.inference.svc.cluster.local:8000",),
        "llama-70b": ("llama-70b-endpoints.inference.svc.cluster.local:8000",),
        "llama-8b": ("llama-8b-endpoints.inference.svc.cluster.local:9000",),
    }
    # The prefill role has neither route nor cluster: clients never name it, the processor calls it itself.
    assert "model-llama-70b-prefill" not in routes
    assert "model-llama-70b-prefill" not in clusters


def test_prods_disaggregated_model_names_its_prefill_role(tmp_path: Path) -> None:
    spec = stack_spec("prod")
    plan = size_platform(spec)
    config = ProcessorConfig.model_validate_json(_rendered("prod", "eks", tmp_path).processor_json)
    decode, role = config.model("llama-70b"), config.model("llama-70b-prefill")
    assert decode is not None and role is not None
    assert decode.prefill is not None
    assert (decode.role, decode.prefill.model, decode.prefill.min_uncached_tokens) == ("serve", role.name, 256)
    assert (role.role, role.prefill, role.longer_context, role.tier) == ("prefill", None, (), "premium")
    assert role.endpoints == ("llama-70b-prefill-endpoints.inference.svc.cluster.local:8000",)
    prefill_sizing = plan.serving("llama-70b-prefill")
    assert role.max_num_seqs == gc.max_num_seqs(prefill_sizing) == 24
    # Both roles hash the engine's 16-token blocks (the processor refuses a role hashing others).
    assert role.routing.block_tokens == decode.routing.block_tokens == 16
    assert all("llama-70b-prefill" not in (*t.models, *t.fallback) for t in config.tiers)


def test_each_model_cluster_resolves_its_replicas_and_takes_the_processors_pick(tmp_path: Path) -> None:
    bootstrap = yaml.safe_load(_rendered("prod", "eks", tmp_path).envoy_yaml)
    clusters = {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}
    # One host per ready pod: STRICT_DNS over the headless Service (an A record per ready pod), never its ClusterIP,
    # which would pin every request of a kept-alive connection to one pod.
    assert clusters["model-llama-70b"] == {
        "name": "model-llama-70b",
        "type": "STRICT_DNS",
        "connect_timeout": "2s",
        "load_assignment": {
            "cluster_name": "model-llama-70b",
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {
                                        "address": "llama-70b-endpoints.inference.svc.cluster.local",
                                        "port_value": 8000,
                                    }
                                }
                            },
                            "metadata": {"filter_metadata": {"inferplane": {"model": "llama-70b"}}},
                        }
                    ]
                }
            ],
        },
        "dns_lookup_family": "V4_PREFERRED",
        "load_balancing_policy": OVERRIDE_HOST,
        # Envoy closes an idle connection (4 s) before vLLM does (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s): never a request
        # sent on a connection the server is closing.
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "common_http_protocol_options": {"idle_timeout": "2s"},
                "explicit_http_config": {"http_protocol_options": {}},
            }
        },
        # (max_num_seqs 24 x max_replicas 5 + queue_max 64) x 2, retries a quarter of the ceiling
        "circuit_breakers": {
            "thresholds": [
                {
                    "priority": "DEFAULT",
                    "max_connections": 368,
                    "max_pending_requests": 368,
                    "max_requests": 368,
                    "max_retries": 46,
                }
            ]
        },
        "outlier_detection": {
            "consecutive_5xx": 5,
            "consecutive_gateway_failure": 3,
            "enforcing_consecutive_gateway_failure": 100,
            "interval": "5s",
            "base_ejection_time": "15s",
            "max_ejection_percent": 100,
        },
    }
    triton = clusters["model-llama-8b"]
    assert (triton["type"], triton["load_balancing_policy"]) == ("STRICT_DNS", OVERRIDE_HOST)
    # (48 x 8 + 64) x 2: every replica's slots plus this pod's queue, with a margin for retries
    assert triton["circuit_breakers"]["thresholds"][0]["max_requests"] == 896
    assert triton["circuit_breakers"]["thresholds"][0]["max_retries"] == 112


def test_the_processors_cluster_admits_two_streams_for_every_request_the_pod_may_hold(tmp_path: Path) -> None:
    """Every request holds a processing and an observing stream to the processor while it is queued or served; at
    Envoy's default of 1,024 streams prod's pod (696 requests at most) would refuse streams with 500s past ~512."""
    bootstrap = yaml.safe_load(_rendered("prod", "eks", tmp_path).envoy_yaml)
    processor = next(c for c in bootstrap["static_resources"]["clusters"] if c["name"] == "inferplane-processor")
    # llama-70b 24 x 5 + 64 queued, llama-8b 48 x 8 + 64 queued, the provider's 64 in flight; two streams each, x 2
    streams = 2 * 2 * (24 * 5 + 64 + 48 * 8 + 64 + 64)
    assert processor["circuit_breakers"] == {
        "thresholds": [{"priority": "DEFAULT", "max_pending_requests": streams, "max_requests": streams}]
    }


def test_retries_avoid_the_failed_replica_and_no_client_chooses_one(tmp_path: Path) -> None:
    bootstrap = yaml.safe_load(_rendered("prod", "eks", tmp_path).envoy_yaml)
    manager = _api_manager(bootstrap)
    [virtual_host] = manager["route_config"]["virtual_hosts"]
    # Only the processor chooses a pod: a client's copy of the header goes before any filter reads it.
    assert virtual_host["request_headers_to_remove"] == ["x-gateway-destination-endpoint"]
    for name in ("model-llama-70b", "model-llama-8b"):
        retry = next(r for r in virtual_host["routes"] if r["name"] == name)["route"]["retry_policy"]
        # A retry goes to another replica than the one that failed (a killed pod stays in DNS for a while).
        assert retry["retry_host_predicate"] == [
            {
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
                },
            }
        ]
        assert retry["host_selection_retry_max_attempts"] == 3


def test_listed_local_replicas_are_static_hosts_and_named_ones_are_resolved(tmp_path: Path) -> None:
    spec = stack_spec("dev")
    replicas = (("127.0.0.1", 18000), ("127.0.0.2", 18001), ("127.0.0.3", 18002))
    addresses = _write_keys(tmp_path / "keys").model_copy(update={"upstreams": {"llama-8b": replicas}})
    rendered = gc.render_gateway(spec, size_platform(spec), "eks", addresses)
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    model = config.model("llama-8b")
    assert model is not None
    assert model.endpoints == ("127.0.0.1:18000", "127.0.0.2:18001", "127.0.0.3:18002")
    assert rendered.upstream_hosts == {"llama-8b": model.endpoints}
    clusters = yaml.safe_load(rendered.envoy_yaml)["static_resources"]["clusters"]
    [cluster] = [c for c in clusters if c["name"] == "model-llama-8b"]
    assert cluster["type"] == "STATIC"
    assert cluster["load_assignment"]["endpoints"] == [
        {
            "lb_endpoints": [
                {
                    "endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}},
                    "metadata": {"filter_metadata": {"inferplane": {"model": "llama-8b"}}},
                }
                for host, port in replicas
            ]
        }
    ]
    assert cluster["load_balancing_policy"] == OVERRIDE_HOST
    envoy = tmp_path / "envoy.yaml"
    envoy.write_text(rendered.envoy_yaml)
    result = validate(envoy)
    assert result.returncode == 0, result.stdout + result.stderr
    # A name among the replicas: Envoy resolves them all (a literal address resolves to itself).
    named = addresses.model_copy(update={"upstreams": {"llama-8b": (("localhost", 18000), ("127.0.0.2", 18001))}})
    bootstrap = yaml.safe_load(gc.render_gateway(spec, size_platform(spec), "eks", named).envoy_yaml)
    [resolved] = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == "model-llama-8b"]
    assert resolved["type"] == "STRICT_DNS"
    assert len(resolved["load_assignment"]["endpoints"][0]["lb_endpoints"]) == 2


def test_validation_refuses_an_override_host_policy_without_its_fallback(tmp_path: Path) -> None:
    """Envoy requires the fallback: without it a request the processor did not place would have no host."""
    rendered = _rendered("dev", "eks", tmp_path)

    def drop_fallback(bootstrap: dict[str, Any]) -> None:
        [cluster] = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == "model-llama-8b"]
        del cluster["load_balancing_policy"]["policies"][0]["typed_extension_config"]["typed_config"]["fallback_policy"]

    refused = _mutated(rendered, drop_fallback, tmp_path)
    assert "OverrideHostValidationError.FallbackPolicy: value is required" in refused


def test_without_the_response_cache_nothing_is_observed(tmp_path: Path) -> None:
    """The observing filter only feeds the response cache: without it, no filter, no twin routes, and still the
    usage filter and the settlement log (Envoy accepts the config)."""
    spec = stack_spec("prod")
    spec = spec.model_copy(update={"cache": spec.cache.model_copy(update={"enabled": False})})
    rendered = gc.render_gateway(spec, size_platform(spec), "eks", _write_keys(tmp_path / "keys"))
    assert gc.OBSERVE_FILTER not in rendered.envoy_yaml
    assert "-cacheable" not in rendered.envoy_yaml
    manager = _api_manager(yaml.safe_load(rendered.envoy_yaml))
    assert [f["name"] for f in manager["http_filters"]][-2:] == [USAGE_FILTER, "envoy.filters.http.router"]
    assert [a["name"] for a in manager["access_log"]] == [
        "envoy.access_loggers.stdout",
        "envoy.access_loggers.http_grpc",
    ]
    result = validate(_write_config(rendered, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_filter_chain_order_and_failure_modes(tmp_path: Path) -> None:
    bootstrap = yaml.safe_load(_rendered("prod", "eks", tmp_path).envoy_yaml)
    filters = _api_manager(bootstrap)["http_filters"]
    assert [f["name"] for f in filters] == [
        gc.API_KEY_FILTER,
        "envoy.filters.http.local_ratelimit",
        "envoy.filters.http.ext_proc",
        "envoy.filters.http.json_to_metadata",
        gc.OBSERVE_FILTER,  # after json_to_metadata: its per-route config is the body's model's route's
        USAGE_FILTER,  # last before the router: the first to see a response
        "envoy.filters.http.router",
    ]
    assert filters[5]["typed_config"]["default_source_code"]["inline_string"] == USAGE_LUA
    ext_proc = filters[2]["typed_config"]
    assert ext_proc["failure_mode_allow"] is False  # processor down: fail closed
    assert ext_proc["processing_mode"] == {
        "request_header_mode": "SKIP",  # what the processor reads of the headers comes as attributes with the body
        "response_header_mode": "SKIP",
        "request_body_mode": "BUFFERED",
        "response_body_mode": "NONE",  # the observing filter reads the response
        "request_trailer_mode": "SKIP",
        "response_trailer_mode": "SKIP",
    }
    assert ext_proc["request_attributes"] == [
        "request.path",
        "request.method",
        "request.headers['x-inferplane-tenant']",
        "request.headers['x-inferplane-cache']",
    ]
    # The processor's own metadata, its pick of a replica under envoy.lb (what override_host reads) and the
    # request's settlement for the observing filter.
    assert ext_proc["metadata_options"] == {
        "receiving_namespaces": {"untyped": ["inferplane", "envoy.lb", "inferplane.settle"]}
    }
    observe = filters[4]["typed_config"]
    assert observe["grpc_service"] == ext_proc["grpc_service"]
    assert observe["observability_mode"] is True
    assert observe["failure_mode_allow"] is True  # a lost observation never fails a response
    assert observe["processing_mode"] == {
        "request_header_mode": "SKIP",
        "response_header_mode": "SKIP",
        "request_body_mode": "NONE",
        "response_body_mode": "STREAMED",  # the only body mode observability_mode sends
        "request_trailer_mode": "SKIP",
        "response_trailer_mode": "SKIP",
    }
    assert observe["response_attributes"] == ["response.code"]
    assert observe["metadata_options"] == {"forwarding_namespaces": {"untyped": ["inferplane.settle"]}}
    assert observe["deferred_close_timeout"] == "0.500s"  # a cacheable answer is stored as Envoy closes the stream
    # Each settled request's access log entry goes to the processor's workers, with the usage the Lua filter read.
    [stdout, settled] = _api_manager(bootstrap)["access_log"]
    assert stdout["name"] == "envoy.access_loggers.stdout"
    assert settled["name"] == "envoy.access_loggers.http_grpc"
    assert settled["filter"]["metadata_filter"] == {
        "matcher": {"filter": "inferplane.settle", "path": [{"key": "tenant"}], "value": {"present_match": True}},
        "match_if_key_not_found": False,
    }
    common = settled["typed_config"]["common_config"]
    assert common["grpc_service"] == ext_proc["grpc_service"]
    assert (common["log_name"], common["transport_api_version"], common["buffer_flush_interval"]) == (
        "inferplane.settle",
        "V3",
        "0.100s",
    )
    routes = _api_manager(bootstrap)["route_config"]["virtual_hosts"][0]["routes"]
    assert routes[0]["name"] == "models"  # GET /v1/models alone sends the processor its headers: it answers there
    override = routes[0]["typed_per_filter_config"]["envoy.filters.http.ext_proc"]["overrides"]["processing_mode"]
    assert (override["request_header_mode"], override["request_body_mode"]) == ("SEND", "NONE")
    # The observing filter is on for a cacheable miss only: each model's route has a twin before it that matches
    # a settlement carrying a held lookup's token and leaves the filter on; every other route turns it off.
    twins = [i for i, r in enumerate(routes) if r["name"].endswith("-cacheable")]
    assert twins and all(routes[i + 1]["name"] == routes[i]["name"].removesuffix("-cacheable") for i in twins)
    for i in twins:
        twin, own = routes[i], routes[i + 1]
        assert own["name"].startswith("model-")
        assert twin["match"]["dynamic_metadata"] == [*own["match"]["dynamic_metadata"], gc.CACHEABLE_MATCHER]
        assert gc.OBSERVE_FILTER not in twin.get("typed_per_filter_config", {})
        assert {k: v for k, v in twin.items() if k not in ("name", "match")} == {
            k: v for k, v in own.items() if k not in ("name", "match", "typed_per_filter_config")
        }
    assert gc.CACHEABLE_MATCHER == {
        "filter": "inferplane.settle",
        "path": [{"key": "cache"}],
        "value": {"string_match": {"safe_regex": {"regex": ".+"}}},
    }
    others = [r for i, r in enumerate(routes) if i not in twins]
    assert {r["name"] for r in others} >= {"models", "not-found"}
    assert all(r["typed_per_filter_config"][gc.OBSERVE_FILTER]["disabled"] is True for r in others)
    assert all(
        h["header"]["value"] == "%DYNAMIC_METADATA(inferplane:cache_result)%"
        for r in routes
        for h in r.get("response_headers_to_add", ())
        if h["header"]["key"] == "x-inferplane-cache"
    )
    ecds = filters[0]["config_discovery"]["config_source"]["path_config_source"]
    assert ecds["watched_directory"]["path"] == str(tmp_path / "keys")
    limits = filters[1]["typed_config"]
    assert {d["entries"][0]["value"]: d["token_bucket"]["max_tokens"] for d in limits["descriptors"]} == {
        "assistant": 1200,
        "batch-summaries": 300,
    }


def test_no_key_value_in_the_bootstrap_and_the_key_file_is_the_ecds_resource(tmp_path: Path) -> None:
    rendered = _rendered("prod", "eks", tmp_path)
    assert all(key not in rendered.envoy_yaml and key not in rendered.processor_json for key in KEYS.values())
    resource = json.loads(gc.render_api_key_file({"assistant": "a" * 20}))["resources"][0]
    assert resource["name"] == gc.API_KEY_FILTER
    assert resource["typed_config"]["credentials"] == [{"key": "a" * 20, "client": "assistant"}]
    assert resource["typed_config"]["forwarding"] == {"header": gc.TENANT_HEADER, "hide_credentials": True}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({}, "at least one tenant"),
        ({"a": "short"}, "key of tenant 'a' is not a valid API key"),
        ({"a": 'x"' * 10}, "key of tenant 'a' is not a valid API key"),
        ({"a": "s" * 20, "b": "s" * 20}, "two tenants share a key"),
    ],
)
def test_bad_key_files_are_refused(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gc.render_api_key_file(keys)


def test_processor_config_follows_sizing(tmp_path: Path) -> None:
    spec = stack_spec("prod")
    plan = size_platform(spec)
    config = ProcessorConfig.model_validate_json(_rendered("prod", "eks", tmp_path).processor_json)
    # Each worker keeps long prompt texts' token ids within the share of its memory sizing gives them.
    assert config.tokenized_text_cache_bytes == 64 * 2**20
    for deployment, sizing in zip(spec.models, plan.deployments, strict=True):
        model = config.model(deployment.name)
        assert model is not None
        assert model.max_model_len == gc.max_model_len(sizing)
        assert model.max_num_seqs == gc.max_num_seqs(sizing)
        assert model.cold_start_hold_seconds == round(sizing.result.cold_start_seconds * 1.2, 1)
        # vLLM's OpenAI server on 8000; Triton's OpenAI frontend on 9000; each replica's load on /metrics there.
        port = {"vllm": 8000, "triton": 9000}[deployment.engine]
        assert model.engine == deployment.engine
        assert model.endpoints == (f"{deployment.name}-endpoints.inference.svc.cluster.local:{port}",)
        assert model.metrics_path == "/metrics"
        # Redis down: every worker that may run (3 replicas x 4 scale-out x 2 workers) keeps within max_num_seqs.
        assert model.fallback_share == max(1, model.max_num_seqs // (3 * 4 * 2))
        # The engine's KV block (vLLM --block-size, TensorRT-LLM --tokens_per_block) and its pool in such blocks.
        result = sizing.result
        block = result.vllm.block_size if deployment.engine == "vllm" else result.trtllm.tokens_per_block
        assert block == {"vllm": 16, "triton": 32}[deployment.engine]
        assert model.routing.block_tokens == block
        # Every full block of an admitted prompt is hashed: the context in blocks, not GIE's 256 (4,096 tokens here).
        assert model.routing.max_prefix_blocks == model.max_model_len // block
        # What a replica holds, in blocks: with a host KV tier (prod's llama-70b: 917 GiB per replica) what the
        # tier holds. The index remembers that within its share of a worker's 192 MiB at 150 bytes a block, over
        # the 16 replicas the EKS gateway may route to (llama-70b's 5 and its prefill role's 3, llama-8b's 8).
        held = result.host_kv_cache_bytes if deployment.host_kv_cache else result.kv_pool_bytes
        assert held == {"llama-70b": 917 * 2**30}.get(deployment.name, result.kv_pool_bytes)
        share = 192 * 2**20 // 150 // 16
        assert share == 83_886
        assert model.routing.index_blocks == min(held // (result.kv_cache_bytes_per_token * block), share)
        assert model.routing.index_blocks == {"llama-70b": share}.get(
            deployment.name, result.kv_pool_bytes // (result.kv_cache_bytes_per_token * block)
        )
        assert model.routing.load == {"vllm": VLLM_LOAD, "triton": TRTLLM_LOAD}[deployment.engine]
        # A held request waits at most the prefill it saves: a block's prefill is compute-bound, at least its GEMM
        # FLOPs at the accelerators' peak (one GPU's BF16 or FP8, x TP) and within 4x of that (50% efficiency,
        # attention, all-reduces, kernel overheads).
        accelerator = get_accelerator(result.accelerator)
        peak = accelerator.bf16_dense_tflops if result.weights_dtype == "bf16" else accelerator.fp8_dense_tflops
        assert peak is not None
        flops_floor = (
            2 * deployment.architecture_resolved.parameters * block / (result.tensor_parallel_size * peak * 1e12)
        )
        assert flops_floor < gc.prefill_seconds_per_block(deployment, sizing) < 4 * flops_floor
        # Holding is off unless the spec turns it on (measured: docs/simulate.md): a full replica spills at once.
        assert model.routing.prefill_seconds_per_block == 0.0
        # prod sets no routing: the spec's defaults (the measured overlap weight 8, the load bound on)
        assert (model.routing.policy, model.routing.overlap_weight, model.routing.load_bound) == (
            "prefix_aware",
            8.0,
            True,
        )
    assert {m.name: m.fallback_share for m in config.models} == {"llama-70b-prefill": 1, "llama-70b": 1, "llama-8b": 2}
    assert config.workers == spec.gateway.processor_workers == 2
    assert config.auth_required and config.anonymous_tenant is None
    assistant = next(t for t in config.tenants if t.name == "assistant")
    assert (assistant.tiers, assistant.requests_per_minute, assistant.tokens_per_minute) == (
        ("premium", "standard"),
        1200,
        2_000_000,
    )


def test_staging_splits_the_tier_by_cluster(tmp_path: Path) -> None:
    eks = ProcessorConfig.model_validate_json(_rendered("staging", "eks", tmp_path).processor_json)
    gke = ProcessorConfig.model_validate_json(_rendered("staging", "gke", tmp_path).processor_json)
    assert [(t.name, t.models, t.fallback) for t in eks.tiers] == [("standard", ("llama-8b", "qwen-agent"), ())]
    assert [(t.name, t.models, t.fallback) for t in gke.tiers] == [("standard", ("qwen-7b",), ())]
    assert [m.name for m in gke.models] == ["qwen-7b"]
    # SGLang behind the gateway: its port, its running-request slots, its 16-token pages, its own load series.
    agent = eks.model("qwen-agent")
    assert agent is not None
    assert agent.engine == "sglang"
    assert agent.endpoints == ("qwen-agent-endpoints.inference.svc.cluster.local:30000",)
    assert (agent.max_num_seqs, agent.max_model_len, agent.routing.block_tokens) == (16, 16384, 16)
    assert agent.routing.load == LoadSeries(
        running=MetricSelector(name="sglang:num_running_reqs"),
        waiting=MetricSelector(name="sglang:num_queue_reqs"),
        kv_usage=MetricSelector(name="sglang:token_usage"),
    )
    # vLLM on TPU: no --block-size flag, but the prefix index still cuts prompts into sizing's 16-token blocks, and
    # the router reads vLLM's series.
    [qwen] = gke.models
    assert (qwen.engine, qwen.routing.block_tokens, qwen.routing.load) == ("vllm", 16, VLLM_LOAD)


def test_routing_comes_from_the_model_then_its_tier_then_the_gateway() -> None:
    raw = _raw("prod")
    raw["gateway"]["routing"] = {"policy": "least_request", "overlap_weight": 0.0}
    raw["gateway"]["tiers"][0]["routing"] = {"overlap_weight": 2.5}  # premium: llama-70b, fallback llama-8b
    spec = _parse(raw)
    config = gc.processor_config(spec, size_platform(spec), "eks", gc.GatewayAddresses())
    picked = {m.name: (m.routing.policy, m.routing.overlap_weight, m.routing.load_bound) for m in config.models}
    # A tier's routing speaks for its primaries only: the fallback llama-8b takes the gateway's.
    # llama-70b's prefill role routes as its model does (it is in its model's tier).
    assert picked == {
        "llama-70b-prefill": ("prefix_aware", 2.5, True),
        "llama-70b": ("prefix_aware", 2.5, True),
        "llama-8b": ("least_request", 0.0, True),
    }
    raw["gateway"]["tiers"][1]["routing"] = {"overlap_weight": 3.0}  # standard: llama-8b
    raw["models"][0]["routing"] = {"load_bound": False}  # llama-70b's own, over premium's
    spec = _parse(raw)
    config = gc.processor_config(spec, size_platform(spec), "eks", gc.GatewayAddresses())
    picked = {m.name: (m.routing.policy, m.routing.overlap_weight, m.routing.load_bound) for m in config.models}
    assert picked == {
        "llama-70b-prefill": ("prefix_aware", 8.0, False),
        "llama-70b": ("prefix_aware", 8.0, False),
        "llama-8b": ("prefix_aware", 3.0, True),
    }


def _raw(stack: str) -> dict[str, Any]:
    path = Path(__file__).resolve().parents[2] / "stacks" / f"Pulumi.{stack}.yaml"
    raw: dict[str, Any] = yaml.safe_load(path.read_text())["config"]["inferplane:platform"]
    return raw


def _parse(raw: dict[str, Any]) -> PlatformSpec:
    return parse_platform(raw, "us-east-1")


def _staging_with_a_second_eks_model() -> dict[str, Any]:
    """Staging plus ``llama-8b-b``, a copy of ``llama-8b`` on the same EKS pool (a fallback that can serve it)."""
    raw = _raw("staging")
    raw["models"].append({**raw["models"][0], "name": "llama-8b-b"})
    return raw


CLUSTERS_OF_STAGING_MODELS = {"llama-8b": "eks", "llama-8b-b": "eks", "qwen-7b": "gke", "qwen-agent": "eks"}
STAGING_SIZING = size_platform(_parse(_staging_with_a_second_eks_model()))


def test_a_fallback_on_its_primarys_cluster_is_served_there_only(tmp_path: Path) -> None:
    raw = _staging_with_a_second_eks_model()
    raw["models"][1]["routing_tier"] = "tpu"
    raw["gateway"]["tiers"] = [
        {"name": "standard", "models": ["llama-8b"], "fallback": ["llama-8b-b"]},
        {"name": "tpu", "models": ["qwen-7b"]},
    ]
    raw["gateway"]["tenants"][0]["tiers"] = ["standard", "tpu"]
    spec = _parse(raw)
    eks = gc.processor_config(spec, STAGING_SIZING, "eks", gc.GatewayAddresses())
    gke = gc.processor_config(spec, STAGING_SIZING, "gke", gc.GatewayAddresses())
    # qwen-agent's routing_tier is standard: it joins the tier as a primary after the listed one.
    assert [(t.name, t.models, t.fallback) for t in eks.tiers] == [
        ("standard", ("llama-8b", "qwen-agent"), ("llama-8b-b",))
    ]
    assert [(t.name, t.models, t.fallback) for t in gke.tiers] == [("tpu", ("qwen-7b",), ())]
    # The fallback answers to both primaries' names (Envoy retries the body unchanged).
    assert gc.fallback_aliases(spec, "llama-8b-b") == ("llama-8b", "qwen-agent")
    assert gc.fallback_aliases(spec, "qwen-7b") == ()
    rendered = gc.render_gateway(spec, STAGING_SIZING, "eks", _write_keys(tmp_path / "keys"))
    bootstrap = yaml.safe_load(rendered.envoy_yaml)
    [route] = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == "route-llama-8b"]
    assert [
        {lb["metadata"]["filter_metadata"]["inferplane"]["model"] for lb in e["lb_endpoints"]}
        for e in route["load_assignment"]["endpoints"]
    ] == [{"llama-8b"}, {"llama-8b-b"}]


def test_holding_for_a_prefix_renders_its_prefill_time(tmp_path: Path) -> None:
    raw = _raw("prod")
    raw["gateway"]["routing"] = {"hold": True}
    spec = _parse(raw)
    plan = size_platform(spec)
    config = gc.processor_config(spec, plan, "eks", gc.GatewayAddresses())
    for deployment, sizing in zip(spec.models, plan.deployments, strict=True):
        model = config.model(deployment.name)
        assert model is not None
        assert model.routing.prefill_seconds_per_block == gc.prefill_seconds_per_block(deployment, sizing) > 0


def test_a_fallback_on_another_cluster_is_refused_naming_both_clusters() -> None:
    raw = _staging_with_a_second_eks_model()
    raw["gateway"]["tiers"] = [{"name": "standard", "models": ["llama-8b", "qwen-7b"], "fallback": ["llama-8b-b"]}]
    with pytest.raises(SpecError) as error:
        _parse(raw)
    assert [(i.path, i.message) for i in error.value.issues] == [
        (
            "gateway.tiers[0].fallback",
            "llama-8b-b runs on eks but primary qwen-7b on gke: a gateway falls back only to models on its own "
            "cluster (nothing joins the EKS and GKE networks); list the model under models instead",
        )
    ]


@settings(max_examples=40, deadline=None)
@given(
    st.permutations(tuple(CLUSTERS_OF_STAGING_MODELS)).flatmap(
        lambda order: st.tuples(st.integers(min_value=1, max_value=3), st.integers(min_value=0, max_value=2)).map(
            lambda counts: (order[: counts[0]], order[counts[0] : counts[0] + counts[1]])
        )
    )
)
def test_a_tier_is_refused_or_served_with_every_fallback(tier: tuple[list[str], list[str]]) -> None:
    """Over every tier staging's four models can make (each with ``routing_tier: standard``, so a model the tier
    does not name joins it as a primary after the listed ones): the spec refuses a fallback off a primary's
    cluster, and otherwise each cluster with a primary serves the tier with its own primaries and every fallback
    (none dropped); a cluster without a primary does not serve the tier."""
    listed, fallbacks = tuple(tier[0]), tuple(tier[1])
    raw = _staging_with_a_second_eks_model()
    raw["gateway"]["tiers"] = [{"name": "standard", "models": list(listed), "fallback": list(fallbacks)}]
    joined = tuple(m["name"] for m in raw["models"] if m["name"] not in (*listed, *fallbacks))
    primaries = (*listed, *joined)
    split = any(CLUSTERS_OF_STAGING_MODELS[p] != CLUSTERS_OF_STAGING_MODELS[f] for p in primaries for f in fallbacks)
    if split:
        with pytest.raises(SpecError) as error:
            _parse(raw)
        assert [i.path for i in error.value.issues] == ["gateway.tiers[0].fallback"]
        return
    spec = _parse(raw)
    for cluster in ("eks", "gke"):
        here = tuple(p for p in primaries if CLUSTERS_OF_STAGING_MODELS[p] == cluster)
        served = gc.processor_config(spec, STAGING_SIZING, cluster, gc.GatewayAddresses()).tiers
        assert [(t.models, t.fallback) for t in served] == ([(here, fallbacks)] if here else [])


def test_longer_context_reroute_within_the_tier() -> None:
    raw = _raw("prod")
    raw["gateway"]["tiers"][1]["models"] = ["llama-8b", "llama-70b"]
    spec = _parse(raw)
    config = gc.processor_config(spec, size_platform(spec), "eks", gc.GatewayAddresses())
    short = config.model("llama-8b")
    assert short is not None and short.longer_context == ("llama-70b",)


def test_auth_none_gives_the_budgets_to_an_anonymous_tenant(tmp_path: Path) -> None:
    raw = _raw("dev")
    raw["gateway"]["auth"] = "none"
    del raw["gateway"]["tenants"]
    spec = _parse(raw)
    rendered = gc.render_gateway(spec, size_platform(spec), "eks")
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    assert not config.auth_required
    assert config.anonymous_tenant is not None and config.anonymous_tenant.requests_per_minute == 60
    assert gc.API_KEY_FILTER not in rendered.envoy_yaml
    envoy = tmp_path / "envoy.yaml"
    envoy.write_text(rendered.envoy_yaml)
    assert validate(envoy).returncode == 0


def test_checksum_follows_the_config(tmp_path: Path) -> None:
    raw = _raw("dev")
    spec = _parse(raw)
    first = gc.render_gateway(spec, size_platform(spec), "eks")
    assert first.checksum == gc.render_gateway(spec, size_platform(spec), "eks").checksum
    raw["gateway"]["rate_limit"]["tokens_per_minute"] = 60_000
    changed = _parse(raw)
    assert gc.render_gateway(changed, size_platform(changed), "eks").checksum != first.checksum


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [
        (lambda g: g["tenants"].append({"name": "ml-dev", "tiers": ["standard"]}), "gateway.tenants[1].name", "twice"),
        (lambda g: g["tenants"][0].update(tiers=["gold"]), "gateway.tenants[0].tiers[0]", "no gateway tier"),
        (lambda g: g.update(auth="none"), "gateway.tenants", "tenants need authentication"),
        (lambda g: g.update(auth="oidc"), "gateway.auth", "oidc is not supported"),
        (lambda g: g["tenants"][0].update(requests_per_minute=0), "gateway.tenants[0].requests_per_minute", ""),
        (lambda g: g.update(admission={"queue_timeout_seconds": 0}), "gateway.admission.queue_timeout_seconds", ""),
    ],
)
def test_gateway_spec_errors_name_the_key(mutate: Any, path: str, message: str) -> None:
    raw = _raw("dev")
    mutate(raw["gateway"])
    with pytest.raises(SpecError) as error:
        _parse(raw)
    assert any(i.path == path and message in i.message for i in error.value.issues), error.value.issues


@given(st.integers(min_value=1, max_value=1_000_000))
def test_request_buckets_hold_the_rate_exactly(per_minute: int) -> None:
    bucket, retry_after = gc._bucket(per_minute)
    interval = float(bucket["fill_interval"].removesuffix("s"))
    assert interval >= 0.05  # Envoy's shortest fill interval
    assert bucket["max_tokens"] == per_minute
    assert bucket["tokens_per_fill"] * 60 / interval == pytest.approx(per_minute, rel=0.01)
    assert retry_after >= math.ceil(interval) and retry_after >= 1


def test_envoy_closes_an_idle_replica_connection_before_the_pinned_vllm_does() -> None:
    """The keep-alive the renderer assumes is the pinned vLLM's own default (read from its source, not imported)."""
    from tests.gateway_support import VLLM_MISSING, VLLM_READY_MARKER, VLLM_VENV

    if not VLLM_READY_MARKER.is_file():
        pytest.skip(VLLM_MISSING)
    [envs] = VLLM_VENV.glob("lib/python*/site-packages/vllm/envs.py")
    default = re.search(r'"VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "(\d+)"', envs.read_text())
    assert default is not None
    assert int(default.group(1)) == gc.ENGINE_KEEP_ALIVE_SECONDS > gc.UPSTREAM_IDLE_TIMEOUT_SECONDS


def test_the_processors_metrics_listen_where_envoys_stats_do(tmp_path: Path) -> None:
    """In a pod, every interface (Prometheus scrapes it); in a local run, loopback: a laptop does not serve its
    gateway's metrics to the network, and a wildcard bind would take the port from every loopback address."""
    spec = stack_spec("dev")
    addresses = _write_keys(tmp_path / "keys")
    pod = ProcessorConfig.model_validate_json(
        gc.render_gateway(spec, size_platform(spec), "eks", addresses).processor_json
    )
    local_addresses = addresses.model_copy(update={"listener_host": "127.0.0.1"})
    local = gc.render_gateway(spec, size_platform(spec), "eks", local_addresses)
    assert (pod.metrics_host, ProcessorConfig.model_validate_json(local.processor_json).metrics_host) == (
        "0.0.0.0",
        "127.0.0.1",
    )


def _routed_prod() -> PlatformSpec:
    """Prod with a third tier, ``auto``, routing between its two models by difficulty."""
    document = yaml.safe_load((Path(__file__).parents[2] / "stacks" / "Pulumi.prod.yaml").read_text())
    raw = document["config"]["inferplane:platform"]
    raw["gateway"]["tiers"].append(ROUTED_TIER)
    raw["gateway"]["tenants"][0]["tiers"].append("auto")
    return parse_platform(raw, document["config"]["aws:region"])


EXAMPLES = '{"prompt": "hi", "cheap_correct": true, "strong_correct": true}\n' + (
    '{"prompt": "prove it", "cheap_correct": false, "strong_correct": true}\n'
)


def test_a_routed_tier_is_rendered_with_its_examples_beside_the_processors_config(tmp_path: Path) -> None:
    spec = _routed_prod()
    addresses = _write_keys(tmp_path / "keys")
    rendered = gc.render_gateway(spec, size_platform(spec), "eks", addresses, route_examples={"auto": EXAMPLES})
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    tiers = {t.name: t for t in config.tiers}
    assert tiers["premium"].route is None
    route = tiers["auto"].route
    assert route is not None
    assert (route.cheap, route.strong, route.threshold, route.neighbours) == ("llama-8b", "llama-70b", 0.12, 50)
    assert route.examples_file == f"{addresses.config_dir}/route-auto.jsonl"
    assert config.cache is not None and route.embedder == config.cache.embedder  # the cache's embedder scores
    assert rendered.route_examples == {"route-auto.jsonl": EXAMPLES}
    # The decision is echoed on every model route, beside the cache's verdict.
    bootstrap = yaml.safe_load(rendered.envoy_yaml)
    routes = {r["name"]: r for r in _api_manager(bootstrap)["route_config"]["virtual_hosts"][0]["routes"]}
    assert {
        "key": "x-inferplane-route",
        "value": "%DYNAMIC_METADATA(inferplane:route)%",
    } in [h["header"] for h in routes["model-llama-8b"]["response_headers_to_add"]]
    assert validate(_write_config(rendered, tmp_path)).returncode == 0
    # The examples roll the pods as the configs do: another file, another checksum.
    other = gc.render_gateway(spec, size_platform(spec), "eks", addresses, route_examples={"auto": EXAMPLES + "\n"})
    assert other.checksum != rendered.checksum
    unrouted = gc.render_gateway(stack_spec("prod"), size_platform(stack_spec("prod")), "eks", addresses)
    assert unrouted.route_examples == {}


def test_a_routed_tier_without_its_examples_is_not_rendered(tmp_path: Path) -> None:
    spec = _routed_prod()
    with pytest.raises(ValueError, match="tier auto routes by difficulty but its examples were not read"):
        gc.render_gateway(spec, size_platform(spec), "eks", _write_keys(tmp_path / "keys"))


def test_a_config_map_over_a_mebibyte_is_refused(tmp_path: Path) -> None:
    spec = _routed_prod()
    huge = EXAMPLES * (2**20 // len(EXAMPLES) + 1)
    with pytest.raises(
        ValueError, match=r"the gateway's ConfigMap would hold .* bytes; Kubernetes takes at most 1048576"
    ):
        gc.render_gateway(spec, size_platform(spec), "eks", _write_keys(tmp_path / "k"), route_examples={"auto": huge})
