"""Names and ports of the model servers' Kubernetes objects that other parts of the platform address.

Pure (no Pulumi): the model-server components name their Services with these helpers and the gateway's renderer
(:mod:`components.gateway.renderer`) derives its upstream addresses from the same helpers, so the two never disagree.
"""

from __future__ import annotations

from inferplane.components.spec.platform_spec import Engine

SERVING_NAMESPACE = "inference"
"""Namespace of the model servers in every cluster (the gateway and KEDA look for them here)."""

MONITORING_NAMESPACE = "monitoring"
"""Namespace of the monitoring stack by default (the model servers' NetworkPolicy admits its Prometheus)."""

VLLM_PORT = 8000
"""vLLM's default ``--port``; ``/health``, ``/metrics`` and the OpenAI API share it."""

VLLM_HEALTH_PATH = "/health"
"""vLLM's health endpoint: 200 once the engine serves, 503 when it is dead."""

TRITON_OPENAI_PORT = 9000
"""Triton's OpenAI-compatible frontend (``--openai-port``, default 9000 in ``python/openai/openai_frontend/main.py``
of triton-inference-server/server r26.05): ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``,
``/health/ready`` and ``/metrics`` (the in-process server's Prometheus text, ``routers/observability.py``)."""

TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001
"""Triton's KServe v2 frontends, started by the OpenAI frontend with ``--enable-kserve-frontends`` on
``--kserve-http-port`` / ``--kserve-grpc-port`` (defaults 8000 and 8001, same ``main.py``)."""

TRITON_HEALTH_PATH = "/health/ready"
"""The OpenAI frontend's readiness: 200 when the in-process Triton server is ready, 400 when not
(``routers/observability.py`` of the same release)."""

SGLANG_PORT = 30000
"""SGLang's default ``--port`` (``ServerArgs.port``, ``sglang/srt/arg_groups/fields/serving.py`` of sglang 0.5.23),
passed explicitly; the OpenAI API, ``/health`` and, with ``--enable-metrics``, ``/metrics`` share it."""

SGLANG_HEALTH_PATH = "/health"
"""SGLang's health endpoint: 503 while the server starts or shuts down, 200 once it serves (``health_generate`` in
``sglang/srt/entrypoints/http_server.py`` of sglang 0.5.23; ``/health`` generates no token unless
``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` is set, so probes cost the engine nothing)."""

CLUSTER_DOMAIN = "cluster.local"
"""The clusters' DNS domain (the EKS and GKE default)."""

CACHE_EMBEDDER_SERVICE = "cache-embedder"
"""The served embedder's Service in the serving namespace: one per cluster whose gateway has the response cache."""

CACHE_EMBEDDER_PORT = VLLM_PORT
"""The served embedder is vLLM (pooling runner): the OpenAI API, ``/health`` and ``/metrics`` on vLLM's port."""


def cache_embedder_url(namespace: str = SERVING_NAMESPACE) -> str:
    """Base URL of the served embedder's OpenAI API, as the processor calls it (``.../v1/embeddings``)."""
    return f"http://{CACHE_EMBEDDER_SERVICE}.{namespace}.svc.{CLUSTER_DOMAIN}:{CACHE_EMBEDDER_PORT}/v1"


def model_service_name(deployment: str) -> str:
    """The Service of a model deployment: named after the deployment (the served model name)."""
    return deployment


def model_service_host(deployment: str, namespace: str = SERVING_NAMESPACE) -> str:
    """The in-cluster DNS name of a model deployment's Service."""
    return f"{model_service_name(deployment)}.{namespace}.svc.{CLUSTER_DOMAIN}"


def model_endpoints_service_name(deployment: str) -> str:
    """The headless Service of a model deployment, beside its ClusterIP Service (``<deployment>-endpoints``).

    The gateway balances requests, not connections: through the ClusterIP, kube-proxy picks a pod once per TCP
    connection (kubernetes.io, "Virtual IPs and Service Proxies"), so every request Envoy multiplexes over a kept-alive
    connection lands on the same replica and no per-request choice (prefix affinity, load bound) can take effect. A
    headless Service (``clusterIP: None``) instead answers DNS with one A record per ready pod (kubernetes.io, "DNS for
    Services and Pods"), which Envoy's ``STRICT_DNS`` cluster turns into one host per replica."""
    return f"{deployment}-endpoints"


def model_endpoints_host(deployment: str, namespace: str = SERVING_NAMESPACE) -> str:
    """The in-cluster DNS name of a model deployment's headless Service: it resolves to the addresses of the
    deployment's ready pods, one A record each."""
    return f"{model_endpoints_service_name(deployment)}.{namespace}.svc.{CLUSTER_DOMAIN}"


_SERVICE_PORTS: dict[Engine, int] = {"vllm": VLLM_PORT, "triton": TRITON_OPENAI_PORT, "sglang": SGLANG_PORT}
_HEALTH_PATHS: dict[Engine, str] = {
    "vllm": VLLM_HEALTH_PATH,
    "triton": TRITON_HEALTH_PATH,
    "sglang": SGLANG_HEALTH_PATH,
}


def model_service_port(engine: Engine) -> int:
    """The Service port that carries a model server's OpenAI API (what the gateway calls)."""
    return _SERVICE_PORTS[engine]


def model_health_path(engine: Engine) -> str:
    """The path on :func:`model_service_port` answering 200 when a replica is ready (probes and the gateway)."""
    return _HEALTH_PATHS[engine]
