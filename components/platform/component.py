"""``Platform``: one environment's whole inference platform as a single component.

Its one input is the platform spec (:class:`~inferplane.components.platform.args.PlatformArgs`, generated from
:class:`~inferplane.components.spec.platform_spec.PlatformSpec`) plus the Hugging Face token. It validates the spec
exactly as a stack file is validated (:func:`~inferplane.components.spec.buildable.validate_platform`; every problem
reported at once as ``pulumi.InputPropertiesError`` naming the input's property paths), then runs the composition the
stack's own program runs (:func:`~inferplane.components.platform.compose.compose_platform`) with itself as the parent.

No ``from __future__ import annotations``: Pulumi's schema inference reads the annotations below at runtime.
"""

from collections.abc import Mapping
from enum import Enum
from typing import Any

import pulumi
from pulumi.provider.experimental.util import camel_case

from inferplane.components.platform.args import PlatformArgs
from inferplane.components.platform.compose import compose_platform
from inferplane.components.spec.buildable import validate_platform
from inferplane.components.spec.input_errors import raise_input_errors
from inferplane.components.spec.platform_spec import PlatformSpec, SpecError

PACKAGE_NAME = "inferplane"
"""The Pulumi package name: type tokens are ``inferplane:index:<Component>``."""
PLATFORM_TYPE = "inferplane:index:Platform"
NOT_SPEC_INPUTS = tuple(key for key in PlatformArgs.__annotations__ if key not in PlatformSpec.model_fields)
"""Inputs of :class:`Platform` that are not fields of :class:`PlatformSpec` (``hf_token``)."""


class Platform(pulumi.ComponentResource):
    """One environment's LLM inference platform: clusters, GPU/TPU pools, sized model servers, autoscaling, caches."""

    environment: pulumi.Output[str]
    """The environment (dev, staging or prod)."""
    cluster_name: pulumi.Output[str]
    """Name of the EKS cluster."""
    gpu_node_groups: pulumi.Output[dict[str, str]]
    """EKS managed node group name by pool name."""
    model_servers: pulumi.Output[dict[str, str]]
    """Kubernetes Service name of each model deployment's server, by deployment name."""
    cache_endpoint: pulumi.Output[str] | None
    """Primary endpoint of the response cache, when it is enabled."""
    model_cache_uri: pulumi.Output[str] | None
    """``s3://`` URI of the model cache, when a deployment runs on EKS."""
    sizing: pulumi.Output[dict[str, Any]]
    """The sizing of every pool and deployment (what ``inferplane size --stack`` prints as JSON)."""
    gateway_endpoints: pulumi.Output[dict[str, str]]
    """In-cluster URL of the gateway in front of each serving cluster's models, by cluster (``eks``, ``gke``)."""
    gateway_api_keys: pulumi.Output[dict[str, dict[str, str]]]
    """The gateway's API key of each tenant, by cluster then tenant (secret)."""

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        spec = platform_spec(args)  # before registering: a spec that fails leaves nothing half-declared
        super().__init__(PLATFORM_TYPE, name, None, opts)
        composed = compose_platform(spec, hf_token=pulumi.Output.secret(args["hf_token"]), parent=self)
        outputs = composed.outputs()
        self.environment = pulumi.Output.from_input(outputs["environment"])
        self.cluster_name = pulumi.Output.from_input(outputs["clusterName"])
        self.gpu_node_groups = pulumi.Output.from_input(outputs["gpuNodeGroups"])
        self.model_servers = pulumi.Output.from_input(outputs["modelServers"])
        self.cache_endpoint = pulumi.Output.from_input(outputs["cacheEndpoint"]) if "cacheEndpoint" in outputs else None
        self.model_cache_uri = (
            pulumi.Output.from_input(outputs["modelCacheUri"]) if "modelCacheUri" in outputs else None
        )
        self.sizing = pulumi.Output.from_input(outputs["sizing"])
        self.gateway_endpoints = pulumi.Output.from_input(outputs["gatewayEndpoints"])
        self.gateway_api_keys = pulumi.Output.secret(outputs["gatewayApiKeys"])
        self.register_outputs(outputs)


def platform_spec(args: Mapping[str, Any]) -> PlatformSpec:
    """The validated spec of a Platform's inputs, or ``pulumi.InputPropertiesError`` naming every bad property.

    Property paths are the schema's (camelCase: ``models[0].maxContext``), as a consumer in any language wrote them.
    """
    unknown = sorted(_unknown_paths(args, ""))
    raise_input_errors(
        "the platform spec must be known when the platform is planned (sizing reads all of it):",
        [(path, "is not known until deployment; pass a plain value") for path in unknown],
    )
    raw = {key: _plain(value) for key, value in args.items() if key not in NOT_SPEC_INPUTS and key != "region"}
    region = args.get("region")
    if not isinstance(region, str):
        raise_input_errors("the platform spec is invalid:", [("region", "the AWS region is required")])
        raise AssertionError("unreachable")  # raise_input_errors raised
    try:
        return validate_platform(raw, region)
    except SpecError as exc:
        raise_input_errors(
            "the platform spec is invalid:", [(schema_path(issue.path), issue.message) for issue in exc.issues]
        )
        raise AssertionError("unreachable") from None


def schema_path(path: str) -> str:
    """A spec issue's path (``models[0].max_context``) in the schema's names (``models[0].maxContext``)."""
    return ".".join(camel_case(part) for part in path.split("."))


def _plain(value: Any) -> Any:
    """Enum members back to their values, recursively: the spec's ``Literal`` fields take the strings."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _unknown_paths(value: Any, path: str) -> list[str]:
    if isinstance(value, pulumi.Output):
        return [path or "."]
    if isinstance(value, Mapping):
        return [
            p
            for k, v in value.items()
            if k not in NOT_SPEC_INPUTS
            for p in _unknown_paths(v, f"{path}.{camel_case(k)}" if path else camel_case(k))
        ]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _unknown_paths(v, f"{path}[{i}]")]
    return []
