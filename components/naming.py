"""Names and ports of the model servers' Kubernetes objects that other parts of the platform address.

Pure (no Pulumi): the model-server components name their Services with these helpers and the gateway's renderer
(:mod:`components.gateway_config`) derives its upstream addresses from the same helpers, so the two never disagree.
"""

from __future__ import annotations

from typing import Literal

SERVING_NAMESPACE = "inference"
"""Namespace of the model servers in every cluster (the gateway and KEDA look for them here)."""

VLLM_PORT = 8000
"""vLLM's default ``--port``; ``/health``, ``/metrics`` and the OpenAI API share it."""

TRITON_HTTP_PORT = 8000
"""Triton's default HTTP port (KServe v2 protocol and ``/v2/health/ready``)."""

CLUSTER_DOMAIN = "cluster.local"
"""The clusters' DNS domain (the EKS and GKE default)."""


def model_service_name(deployment: str) -> str:
    """The Service of a model deployment: named after the deployment (the served model name)."""
    return deployment


def model_service_host(deployment: str, namespace: str = SERVING_NAMESPACE) -> str:
    """The in-cluster DNS name of a model deployment's Service."""
    return f"{model_service_name(deployment)}.{namespace}.svc.{CLUSTER_DOMAIN}"


def model_service_port(engine: Literal["vllm", "triton"]) -> int:
    """The Service port that carries a model server's HTTP API."""
    return VLLM_PORT if engine == "vllm" else TRITON_HTTP_PORT
