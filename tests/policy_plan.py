"""A happy-path prod plan for the policy pack: every policy passes, and each test changes one thing.

The resources are written as the engine would see the platform's components register them (camelCase inputs of
the pulumi_aws / pulumi_kubernetes ``...Args``), with the model server's settings and annotations taken from the
prod stack's sizing, so the plan is what the components will produce, not a guess.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

from inferplane.components.capacity.sizing import DeploymentSizing, size_platform
from inferplane.components.capacity.system_nodes import EKS_SYSTEM_SCALE_OUT
from inferplane.components.gateway.renderer import REDIS_URL_ENV
from inferplane.components.serving.annotations import (
    COMPONENT_LABEL,
    GATEWAY,
    MODEL_SERVER,
    NAME_LABEL,
    SERVED_MODEL_LABEL,
    GatewayRoute,
    gateway_annotations,
    serving_annotations,
)
from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.components.spec.scheduling import ACCELERATOR_LABEL, GPU_TAINT, NVIDIA_GPU_RESOURCE, POOL_LABEL
from inferplane.policies.resource_types import T
from inferplane.tool.mockengine import SECRET_PLACEHOLDER, Registration
from inferplane.tool.stackfile import find_project_dir, load_stack

STACK = "prod"
DIGEST = "@sha256:" + "ab" * 32
TAGS = {"team": "ml-platform", "cost-center": "ml-prod"}
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/cluster-key-0000-0000"
KEY_POLICY = (
    '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": '
    '"arn:aws:iam::123456789012:root"}, "Action": ["kms:Describe*", "kms:Put*"], "Resource": "*"}, '
    '{"Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam::123456789012:role/eks"]}, '
    '"Action": ["kms:Encrypt", "kms:Decrypt"], "Resource": "*"}]}'
)
ADMIN_TRUST = (
    '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": '
    '["arn:aws:iam::123456789012:role/platform-admins"]}, "Action": "sts:AssumeRole"}]}'
)


def urn(type_token: str, name: str) -> str:
    """A top-level URN in the prod stack."""
    return f"urn:pulumi:{STACK}::inferplane::{type_token}::{name}"


def registration(
    type_token: str, name: str, inputs: dict[str, Any], *, protect: bool = False, depends: tuple[str, ...] = ()
) -> Registration:
    """A custom resource as the mock engine records it."""
    return Registration(
        urn=urn(type_token, name),
        type=type_token,
        name=name,
        parent="",
        provider="",
        custom=True,
        protect=protect,
        dependencies=depends,
        inputs=inputs,
    )


@cache
def prod_spec() -> PlatformSpec:
    """The prod stack's platform, as every command reads it."""
    return load_stack(find_project_dir(), STACK).platform


@cache
def prod_llama() -> DeploymentSizing:
    """Sizing of the prod stack's llama-70b deployment (vLLM on p5.48xlarge)."""
    return next(d for d in size_platform(prod_spec()).deployments if d.name == "llama-70b")


def system_node_group() -> dict[str, Any]:
    """The EKS system node group's inputs as ``EksCluster`` writes them for the prod stack: its type and node count
    from the stack (``cluster.system_instance_type``, ``cluster.system_nodes``), growing to ``EKS_SYSTEM_SCALE_OUT``
    times that."""
    cluster = prod_spec().cluster
    nodes = cluster.system_nodes
    return {
        "instanceTypes": [cluster.system_instance_type],
        "scalingConfig": {"minSize": nodes, "desiredSize": nodes, "maxSize": EKS_SYSTEM_SCALE_OUT * nodes},
        "tags": TAGS,
    }


def vllm_args(sizing: DeploymentSizing) -> list[str]:
    """The container args of ``vllm serve`` as the serving component writes them: the model first, then flags."""
    v = sizing.result.vllm
    return [
        "/models/meta-llama/Llama-3.3-70B-Instruct",  # the node-local model cache, laid out by repository
        "--served-model-name",
        sizing.name,
        "--tensor-parallel-size",
        str(v.tensor_parallel_size),
        "--max-model-len",
        str(v.max_model_len),
        "--max-num-seqs",
        str(v.max_num_seqs),
        "--max-num-batched-tokens",
        str(v.max_num_batched_tokens),
        "--gpu-memory-utilization",
        f"{v.gpu_memory_utilization:g}",
        "--kv-cache-dtype",
        v.kv_cache_dtype,
        "--dtype",
        v.dtype,
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
    ]


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": period, "failureThreshold": failures}


def model_server(name: str = "llama-70b") -> Registration:
    """The prod model server Deployment."""
    sizing = prod_llama()
    gpus = sizing.gpus_per_replica
    selector = {NAME_LABEL: name, COMPONENT_LABEL: MODEL_SERVER}
    pod_labels = {**selector, SERVED_MODEL_LABEL: name, "app.kubernetes.io/part-of": "inferplane"}
    return registration(
        T.DEPLOYMENT,
        name,
        {
            "metadata": {
                "name": name,
                "namespace": "inference",
                "labels": pod_labels,
                "annotations": serving_annotations(sizing),
            },
            "spec": {
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "nodeSelector": {POOL_LABEL: sizing.pool, ACCELERATOR_LABEL: sizing.result.accelerator},
                        "tolerations": [
                            {"key": GPU_TAINT.key, "operator": "Exists", "effect": GPU_TAINT.kubernetes_effect}
                        ],
                        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [
                            {
                                "name": "vllm",
                                "image": f"vllm/vllm-openai:v0.11.0{DIGEST}",
                                "args": vllm_args(sizing),
                                "env": [{"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/huggingface/token"}],
                                "resources": {
                                    "requests": {"cpu": "16", "memory": "256Gi", NVIDIA_GPU_RESOURCE: gpus},
                                    "limits": {"memory": "256Gi", NVIDIA_GPU_RESOURCE: gpus},
                                },
                                "startupProbe": _probe(10, 30),
                                "readinessProbe": _probe(5, 3),
                                "livenessProbe": _probe(10, 3),
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]},
                                    "runAsNonRoot": True,
                                    "runAsUser": 65532,
                                },
                            }
                        ],
                    },
                },
            },
        },
    )


def happy_plan() -> list[Registration]:
    """Every resource kind the pack polices, configured as prod requires."""
    lt = registration(
        T.LAUNCH_TEMPLATE,
        "h100-lt",
        {
            "metadataOptions": {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1},
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"encrypted": "true", "volumeSize": 500, "volumeType": "gp3"}}
            ],
            "tags": TAGS,
        },
    )
    vpc = registration("aws:ec2/vpc:Vpc", "vpc", {"cidrBlock": "10.0.0.0/16", "tags": TAGS})
    bucket = registration(T.S3_BUCKET, "model-cache", {"tags": TAGS}, protect=True)
    log_bucket = registration(T.S3_BUCKET, "model-cache-logs", {"tags": TAGS}, protect=True)
    return [
        registration(
            T.KMS_KEY, "cluster-key", {"enableKeyRotation": True, "policy": KEY_POLICY, "tags": TAGS}, protect=True
        ),
        registration(
            T.CLOUDWATCH_LOG_GROUP,
            "cluster-logs",
            {"name": "/aws/eks/x/cluster", "retentionInDays": 365, "kmsKeyId": KEY_ARN, "tags": TAGS},
        ),
        registration(
            T.IAM_ROLE,
            "admin-role",
            {"assumeRolePolicy": ADMIN_TRUST, "tags": TAGS},
        ),
        vpc,
        registration(T.FLOW_LOG, "vpc-flow-log", {"trafficType": "ALL", "tags": TAGS}, depends=(vpc.urn,)),
        bucket,
        log_bucket,
        registration(T.S3_BUCKET_LOGGING, "model-cache-logging", {}, depends=(bucket.urn, log_bucket.urn)),
        registration(
            T.NETWORK_POLICY,
            "default-deny",
            {
                "metadata": {"name": "default-deny", "namespace": "inference"},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
            },
        ),
        registration(
            T.GKE_CLUSTER,
            "gke",
            {
                "datapathProvider": "ADVANCED_DATAPATH",
                "enableIntranodeVisibility": True,
                "binaryAuthorization": {"evaluationMode": "PROJECT_SINGLETON_POLICY_ENFORCE"},
                "masterAuth": {"clientCertificateConfig": {"issueClientCertificate": False}},
            },
        ),
        registration(T.GCP_SUBNETWORK, "gke-subnet", {"logConfig": {"aggregationInterval": "INTERVAL_5_SEC"}}),
        registration(
            T.EKS_CLUSTER,
            "cluster",
            {
                "version": "1.34",
                "vpcConfig": {
                    "subnetIds": ["subnet-a", "subnet-b", "subnet-c"],
                    "endpointPrivateAccess": True,
                    "endpointPublicAccess": False,
                },
                "encryptionConfig": {"provider": {"keyArn": KEY_ARN}, "resources": ["secrets"]},
                "enabledClusterLogTypes": ["api", "audit", "authenticator", "controllerManager", "scheduler"],
                "tags": TAGS,
            },
        ),
        lt,
        registration(
            T.EKS_NODE_GROUP,
            "h100",
            {
                "instanceTypes": ["p5.48xlarge"],
                "capacityType": "ON_DEMAND",
                "scalingConfig": {"minSize": 1, "desiredSize": 1, "maxSize": 4},
                "taints": [{"key": GPU_TAINT.key, "value": GPU_TAINT.value, "effect": GPU_TAINT.eks_effect}],
                "labels": {POOL_LABEL: "h100", ACCELERATOR_LABEL: "h100-80gb"},
                "tags": TAGS,
            },
            depends=(lt.urn,),
        ),
        registration(T.EKS_NODE_GROUP, "system", system_node_group()),
        registration(
            T.SECURITY_GROUP,
            "gateway-lb",
            {
                "ingress": [{"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]}],
                "tags": TAGS,
            },
        ),
        registration(
            T.ELASTICACHE_REPLICATION_GROUP,
            "cache",
            {
                "engine": "valkey",
                "transitEncryptionEnabled": True,
                "atRestEncryptionEnabled": True,
                "authToken": SECRET_PLACEHOLDER,
                "automaticFailoverEnabled": True,
                "multiAzEnabled": True,
                "numCacheClusters": 3,
                "tags": TAGS,
            },
            protect=True,
        ),
        model_server(),
        registration(
            T.SCALED_OBJECT,
            "llama-70b-scaler",
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {"name": "llama-70b", "labels": {SERVED_MODEL_LABEL: "llama-70b"}},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b"},
                    "minReplicaCount": 2,
                    "maxReplicaCount": 8,
                    "cooldownPeriod": 300,
                    "triggers": [
                        {
                            "type": "prometheus",
                            "metadata": {
                                "serverAddress": "http://prometheus.monitoring:9090",
                                "query": 'sum(vllm:num_requests_waiting{model_name="llama-70b"})',
                                "threshold": "6",
                            },
                        },
                        {
                            "type": "prometheus",
                            "name": "wake",
                            "metadata": {
                                "serverAddress": "http://prometheus.monitoring:9090",
                                "query": 'sum(gateway_pending_requests{model="llama-70b"})',
                                "threshold": "6",
                            },
                        },
                    ],
                },
            },
        ),
        registration(
            T.POD_DISRUPTION_BUDGET,
            "llama-70b-pdb",
            {
                "spec": {
                    "selector": {"matchLabels": {NAME_LABEL: "llama-70b", COMPONENT_LABEL: MODEL_SERVER}},
                    "maxUnavailable": 1,
                }
            },
        ),
        registration(
            T.DEPLOYMENT,
            "gateway",
            {
                "metadata": {
                    "name": "gateway",
                    "labels": {COMPONENT_LABEL: GATEWAY},
                    "annotations": gateway_annotations(
                        auth="api_key",
                        requests_per_minute=1200,
                        tokens_per_minute=1_000_000,
                        routes={"llama-70b": GatewayRoute(tiers=("premium",), max_context=32768)},
                    ),
                },
                "spec": {
                    "replicas": 3,
                    "selector": {"matchLabels": {NAME_LABEL: "gateway"}},
                    "template": {
                        "metadata": {"labels": {NAME_LABEL: "gateway", COMPONENT_LABEL: GATEWAY}},
                        "spec": {
                            "containers": [
                                {
                                    "name": "gateway",
                                    "image": f"ghcr.io/inferplane/gateway:0.1.0{DIGEST}",
                                    "env": [
                                        {
                                            "name": "CACHE_AUTH_TOKEN",
                                            "valueFrom": {"secretKeyRef": {"name": "cache", "key": "token"}},
                                        },
                                        {
                                            "name": REDIS_URL_ENV,
                                            "valueFrom": {"secretKeyRef": {"name": "gateway-redis", "key": "url"}},
                                        },
                                    ],
                                    "resources": {
                                        "requests": {"cpu": "500m", "memory": "512Mi"},
                                        "limits": {"memory": "512Mi"},
                                    },
                                }
                            ]
                        },
                    },
                },
            },
        ),
        registration(
            T.POD_DISRUPTION_BUDGET,
            "gateway-pdb",
            {"spec": {"selector": {"matchLabels": {NAME_LABEL: "gateway"}}, "maxUnavailable": 1}},
        ),
        registration(
            T.PROMETHEUS_RULE,
            "alerts",
            {
                "spec": {
                    "groups": [
                        {
                            "name": "inferplane",
                            "rules": [
                                {
                                    "alert": "InferplanePreemptions",
                                    "expr": 'sum(rate(vllm:num_preemptions_total{model_name="llama-70b"}[5m])) > 0',
                                    "labels": {"severity": "warning", "model": "llama-70b", "namespace": "inference"},
                                }
                            ],
                        }
                    ]
                }
            },
        ),
        registration(T.CONFIG_MAP, "gateway-config", {"data": {"processor.json": json.dumps({"cache": PROD_CACHE})}}),
    ]


PROD_CACHE: dict[str, Any] = {
    "threshold": 0.95,
    "guards": True,
    "tenant_isolation": True,
    "shared_tiers": ["public"],
    "models": {"llama-70b": {"revision": "0123456789abcdef", "usd_per_token": 2e-6}},
}
"""The cache section of the gateway's processor config, as prod requires (a tier may opt in to sharing)."""


DELETE = object()
"""Marks a key for removal in :func:`changed`."""


def changed(
    plan: list[Registration],
    name: str,
    edit: Callable[[dict[str, Any]], None] | None = None,
    *,
    protect: bool | None = None,
) -> list[Registration]:
    """The plan with resource ``name``'s inputs edited in place on a deep copy (and its protect option changed)."""
    result = []
    for item in plan:
        if item.name != name:
            result.append(item)
            continue
        inputs = copy.deepcopy(dict(item.inputs))
        if edit is not None:
            edit(inputs)
        result.append(replace(item, inputs=inputs, protect=item.protect if protect is None else protect))
    return result


def at(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets (or with :data:`DELETE`, removes) ``inputs[path...]``."""

    def edit(inputs: dict[str, Any]) -> None:
        target: Any = inputs
        for step in path[:-1]:
            target = target[step]
        if value is DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return edit


def container(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit inside the first container of a workload's pod template."""
    return at("spec", "template", "spec", "containers", 0, *path, value=value)


def pod(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit inside a workload's pod spec."""
    return at("spec", "template", "spec", *path, value=value)
