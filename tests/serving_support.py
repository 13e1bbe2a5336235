"""Evaluating the model servers of a stack (or a spec) under the mock engine, with one provider per cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.catalog import get_instance_type
from inferplane.components.platform.serving import build_model_servers
from inferplane.components.spec.platform_spec import PlatformSpec, parse_platform
from inferplane.tool.mockengine import Evaluation, PlatformMocks, Registration, evaluate
from inferplane.tool.stackfile import find_project_dir, load_stack

HF_TOKEN = "hf_TESTtokenVALUE0123456789"
"""A recognisable fake token: it must never appear in any registered input."""

MODEL_CACHE = "s3://inferplane-models-123456789012/hf/"


def stack_spec(stack: str) -> PlatformSpec:
    """The validated spec of a shipped stack."""
    return load_stack(find_project_dir(), stack).platform


def spec_from(raw: Mapping[str, Any], region: str = "us-east-1") -> PlatformSpec:
    """A spec from a raw platform block."""
    return parse_platform(raw, region)


AWQ_8B_ON_L4: dict[str, Any] = {
    "name": "llama-8b-awq",
    "model": "llama-3.1-8b",
    "pool": "l4",
    "weights_dtype": "int4",
    "weights_repo": "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
    "max_context": 16384,
    "concurrency": 16,
    "prefix_caching": False,
}
"""Llama 3.1 8B with AWQ int4 weights on four L4s, without prefix caching (each engine's test adds its engine and
speculation)."""

FP8_70B_ON_H100: dict[str, Any] = {
    "name": "llama-70b-fp8",
    "model": "llama-3.3-70b",
    "pool": "h100",
    "weights_dtype": "fp8",
    "kv_cache_dtype": "fp8",
    "max_context": 65536,
    "concurrency": 32,
}
"""Llama 3.3 70B with fp8 weights and KV cache on H100s (each engine's test adds its engine and speculation)."""


def l4_and_h100_platform(*models: Mapping[str, Any]) -> dict[str, Any]:
    """A raw staging platform with an L4 pool (g6.12xlarge) and an H100 pool (p5.48xlarge) serving ``models``: the
    engines' tests' own deployments, beside the shipped stacks."""
    return {
        "environment": "staging",
        "zones": ["us-east-1a", "us-east-1b"],
        "cluster": {"endpoint_access": "public_and_private", "public_access_cidrs": ["198.51.100.0/24"]},
        "pools": [
            {"name": "l4", "accelerator": "l4-24gb", "instance_type": "g6.12xlarge"},
            {"name": "h100", "accelerator": "h100-80gb", "instance_type": "p5.48xlarge"},
        ],
        "models": [dict(model) for model in models],
        "limits": {
            "max_total_gpus": 32,
            "max_hourly_cost_usd": 200,
            "allowed_accelerators": ["l4-24gb", "h100-80gb"],
        },
    }


def evaluate_servers(spec: PlatformSpec, *, model_cache: str | None = MODEL_CACHE, stack: str = "test") -> Evaluation:
    """Run :func:`build_model_servers` for ``spec`` with an EKS and a GKE provider."""
    plan = size_platform(spec)

    def program() -> None:
        eks = k8s.Provider("eks", kubeconfig="{}")
        gke = k8s.Provider("gke", kubeconfig="{}")
        providers: dict[str, pulumi.ProviderResource] = {
            pool.name: gke if get_instance_type(pool.instance_type).cloud == "gcp" else eks for pool in spec.pools
        }
        servers = build_model_servers(
            spec,
            plan,
            providers,
            hf_token=pulumi.Output.secret(HF_TOKEN),
            model_cache_uri=model_cache,
        )
        for name, server in servers.items():
            pulumi.export(f"{name}-deployment", server.deployment_name)
            pulumi.export(f"{name}-namespace", server.namespace)
            pulumi.export(f"{name}-service", server.service_name)
            pulumi.export(f"{name}-service-account", server.service_account_name)

    return evaluate(program, mocks=PlatformMocks(spec.region), stack=stack)


def kubernetes_objects(evaluation: Evaluation) -> list[Registration]:
    """Registrations of Kubernetes objects (not providers or components)."""
    return [
        r
        for r in evaluation.registrations
        if r.type.startswith("kubernetes:") and r.custom and "providers" not in r.type
    ]


def container(registration: Registration, name: str) -> dict[str, Any]:
    """A (main or init) container of a Deployment or Job registration."""
    pod = registration.inputs["spec"]["template"]["spec"]
    for candidate in [*pod.get("initContainers", []), *pod["containers"]]:
        if candidate["name"] == name:
            return dict(candidate)
    raise KeyError(name)
