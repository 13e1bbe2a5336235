"""EmbedderService: the semantic cache's embedder as the platform deploys it. Exact children, the argument list
(accepted by the pinned vLLM's own definitions), resources from sizing, pod security, and a NetworkPolicy that lets
only the gateway and Prometheus in."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest

from inferplane.components.capacity.embedder import EmbedderSizing, size_embedder
from inferplane.components.capacity.sizing import WEIGHTS_FETCH_BYTES_PER_SECOND
from inferplane.components.serving.embedder_service import (
    EmbedderService,
    EmbedderServiceArgs,
    embedder_args,
    embedder_env,
)
from inferplane.components.spec.platform_spec import CacheSpec
from inferplane.tool.mockengine import Evaluation, PlatformMocks, Registration, evaluate
from tests import vllm_cli
from tests.crds import integral
from tests.references import vllm_definitions
from tests.serving.test_serving import kubernetes_schema_version
from tests.serving_support import container

SYSTEM_NODES = {"inferplane.io/role": "system"}
DIGEST = "sha256:" + "ab" * 32


def _sizing(**embedder: Any) -> EmbedderSizing:
    cache = CacheSpec(embedder={"kind": "served", "model": "all-minilm-l6-v2", **embedder})
    sizing = size_embedder(cache, fetch_bytes_per_second=WEIGHTS_FETCH_BYTES_PER_SECOND, gateway_scale_out=4)
    assert sizing is not None
    return sizing


def _args(**overrides: Any) -> EmbedderServiceArgs:
    values: dict[str, Any] = {
        "sizing": _sizing(),
        "namespace": "inference",
        "node_selector": SYSTEM_NODES,
        "environment": "prod",
        "labels": {"team": "ml"},
    }
    values.update(overrides)
    return EmbedderServiceArgs(**values)


def _evaluate(args: EmbedderServiceArgs) -> Evaluation:
    def program() -> None:
        service = EmbedderService("gateway-embedder", args, pulumi.ResourceOptions(provider=k8s.Provider("eks")))
        pulumi.export("url", service.url)

    return evaluate(program, mocks=PlatformMocks("us-east-1"))


def _pod(evaluation: Evaluation) -> dict[str, Any]:
    return dict(evaluation.named("gateway-embedder-deployment").inputs["spec"]["template"]["spec"])


def test_children_are_exactly_the_embedders_objects_and_the_url_is_the_processors() -> None:
    evaluation = _evaluate(_args())
    component = evaluation.named("gateway-embedder")
    assert component.type == "inferplane:index:EmbedderService"
    assert {(r.type, r.name) for r in evaluation.children_of(component.urn)} == {
        ("kubernetes:core/v1:ServiceAccount", "gateway-embedder-sa"),
        ("kubernetes:apps/v1:Deployment", "gateway-embedder-deployment"),
        ("kubernetes:core/v1:Service", "gateway-embedder-service"),
        ("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "gateway-embedder-autoscaler"),
        ("kubernetes:policy/v1:PodDisruptionBudget", "gateway-embedder-pdb"),
        ("kubernetes:monitoring.coreos.com/v1:PodMonitor", "gateway-embedder-monitor"),
        ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "gateway-embedder-network-policy"),
    }
    assert evaluation.outputs["url"] == "http://cache-embedder.inference.svc.cluster.local:8000/v1"
    service = evaluation.named("gateway-embedder-service").inputs
    assert service["metadata"]["name"] == "cache-embedder"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    # Headless: the name resolves to every ready pod, and the processor balances each request over them.
    assert service["spec"]["clusterIP"] == "None"
    labels = {"app.kubernetes.io/name": "cache-embedder", "app.kubernetes.io/component": "cache-embedder"}
    assert service["spec"]["selector"] == labels
    assert evaluation.named("gateway-embedder-sa").inputs["automountServiceAccountToken"] is False


def test_it_scales_on_cpu_between_the_sized_floor_and_the_gateways_scale_out() -> None:
    evaluation = _evaluate(_args(sizing=_sizing(replicas=3)))
    deployment = evaluation.named("gateway-embedder-deployment")
    assert deployment.inputs["spec"]["replicas"] == 3  # the first count; the autoscaler owns it afterwards
    assert deployment.ignore_changes == ("spec.replicas",)
    autoscaler = evaluation.named("gateway-embedder-autoscaler").inputs
    assert autoscaler["metadata"]["name"] == "cache-embedder"
    assert autoscaler["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cache-embedder"},
        "minReplicas": 3,
        "maxReplicas": 12,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
            }
        ],
    }


def test_one_pod_at_most_has_no_disruption_budget() -> None:
    evaluation = _evaluate(_args(sizing=_sizing(replicas=1).model_copy(update={"max_replicas": 1})))
    assert "kubernetes:policy/v1:PodDisruptionBudget" not in {r.type for r in evaluation.registrations}
    assert evaluation.named("gateway-embedder-deployment").inputs["spec"]["replicas"] == 1
    # One pod that may become four: a budget, so a drain takes one at a time once there are several.
    scalable = _evaluate(_args(sizing=_sizing(replicas=1)))
    assert scalable.named("gateway-embedder-pdb").inputs["spec"]["maxUnavailable"] == 1


def test_the_pooling_server_runs_as_sized_on_the_system_nodes_locked_down() -> None:
    evaluation = _evaluate(_args(image_digest=DIGEST))
    server = container(evaluation.named("gateway-embedder-deployment"), "embedder")
    assert server["image"] == f"vllm/vllm-openai-cpu:v0.32.0@{DIGEST}"
    assert server["command"] == ["vllm", "serve"]
    assert server["args"] == [
        "sentence-transformers/all-MiniLM-L6-v2",
        "--runner", "pooling",
        "--served-model-name", "all-minilm-l6-v2",
        "--max-model-len", "256",
        "--kv-cache-memory-bytes", "0",
        "--dtype", "float32",
        "--enforce-eager",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--shutdown-timeout", "5",
    ]  # fmt: skip
    assert {e["name"]: e["value"] for e in server["env"]} == {
        "USER": "inferplane",
        "HOME": "/home/inferplane",
        "HF_HOME": "/models/.hf",
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_NO_USAGE_STATS": "1",
    }
    # 1549 MiB measured (float32, the model in the engine core) x 1.25, rounded up to 256 MiB; request = limit;
    # no CPU limit.
    assert server["resources"] == {"requests": {"cpu": "1", "memory": "2048Mi"}, "limits": {"memory": "2048Mi"}}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": "http"}
    # (53 s measured + 0.09 s to fetch 91 MB) x 1.5 + 60 s = 139.7 s, in 10 s periods.
    assert server["startupProbe"]["failureThreshold"] == 14
    assert server["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
    }
    pod = _pod(evaluation)
    assert pod["nodeSelector"] == SYSTEM_NODES
    assert "tolerations" not in pod  # CPU work: never on a GPU node
    assert pod["automountServiceAccountToken"] is False
    assert [c["topologyKey"] for c in pod["topologySpreadConstraints"]] == ["topology.kubernetes.io/zone"]
    assert {v["name"]: v["emptyDir"]["sizeLimit"] for v in pod["volumes"]} == {
        "models": "2Gi",
        "home": "1Gi",
        "tmp": "1Gi",
    }


def test_outside_prod_the_pods_are_not_spread_and_the_image_is_the_catalogs_tag() -> None:
    evaluation = _evaluate(_args(environment="staging", sizing=_sizing(cpus=2)))
    pod = _pod(evaluation)
    assert "topologySpreadConstraints" not in pod
    server = container(evaluation.named("gateway-embedder-deployment"), "embedder")
    assert server["image"] == "vllm/vllm-openai-cpu:v0.32.0"
    assert server["resources"]["requests"]["cpu"] == "2"
    assert {e["name"]: e["value"] for e in server["env"]}["OMP_NUM_THREADS"] == "2"


def test_only_the_gateway_and_prometheus_reach_it_and_it_reaches_only_https() -> None:
    policy = _evaluate(_args()).named("gateway-embedder-network-policy").inputs["spec"]
    assert policy["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "cache-embedder", "app.kubernetes.io/component": "cache-embedder"}
    }
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {"matchLabels": {"app.kubernetes.io/part-of": "inferplane"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}},
                },
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                    "podSelector": {
                        "matchLabels": {
                            "app.kubernetes.io/name": "prometheus",
                            "app.kubernetes.io/managed-by": "prometheus-operator",
                        }
                    },
                },
            ],
            "ports": [{"port": 8000, "protocol": "TCP"}],
        }
    ]
    assert policy["egress"] == [
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    ]


def test_every_object_validates_strictly_against_kubernetes() -> None:
    version = kubernetes_schema_version("1.35")
    evaluation = _evaluate(_args())
    objects: list[Registration] = [
        r for r in evaluation.registrations if r.type.startswith("kubernetes:") and r.custom and "coreos" not in r.type
    ]
    assert len(objects) == 6
    for registration in objects:
        manifest = integral(dict(registration.inputs))
        manifest.setdefault("apiVersion", registration.type.split(":")[1].replace("core/", ""))
        manifest.setdefault("kind", registration.type.rsplit(":", 1)[-1])
        assert kubernetes_validate.validate(manifest, version, strict=True) == version[:-2], registration.name


def test_the_argument_list_is_accepted_by_the_pinned_vllm() -> None:
    cli = vllm_cli.load(vllm_definitions())
    assert vllm_cli.check(cli, embedder_args(_sizing())) == []
    assert vllm_cli.check(cli, embedder_args(_sizing(), model="/models/local", port=18000)) == []
    # A runner vLLM does not have is refused, as vLLM itself would.
    wrong = ["m", "--runner", "embedding"]
    assert vllm_cli.check(cli, wrong)[0].startswith("--runner: 'embedding' is not one of")


def test_the_environment_binds_no_core() -> None:
    assert embedder_env(_sizing(cpus=4)) == {
        "OMP_NUM_THREADS": "4",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # no worker process spinning beside the engine core
        "VLLM_NO_USAGE_STATS": "1",
    }


def test_bad_arguments_are_refused_together_naming_fields() -> None:
    with pytest.raises(pulumi.InputPropertiesError) as raised:
        _evaluate(_args(node_selector={}, scrape_interval_seconds=0))
    assert raised.value.errors == [
        {"property_path": "node_selector", "reason": "name the system nodes the embedder runs on"},
        {"property_path": "scrape_interval_seconds", "reason": "must be positive"},
    ]
