"""Every stack's model servers: schema-valid objects, secrets only through secretKeyRef, a namespace per cluster."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.platform.aws_foundation import build_aws_foundation, platform_tags
from inferplane.components.platform.gateway import ClusterInputs, build_gateways, eks_system_nodes
from inferplane.components.platform.observability import ServingTarget, build_observability
from inferplane.components.platform.serving import build_model_servers
from inferplane.components.serving.model_server import HF_TOKEN_SECRET_KEY
from inferplane.components.serving.naming import model_endpoints_host, model_endpoints_service_name
from inferplane.components.serving.network_policy import ServingNetworkPolicy, ServingNetworkPolicyArgs
from inferplane.components.spec.platform_spec import parse_platform
from inferplane.tool.analyzer import PolicyPackProcess, load_policy_pack_config, policy_config_path
from inferplane.tool.mockengine import SECRET_PLACEHOLDER, PlatformMocks, Registration, evaluate
from tests.conftest import PROJECT_DIR, crd_dir
from tests.crds import errors as crd_errors
from tests.crds import integral
from tests.serving_support import HF_TOKEN, evaluate_servers, kubernetes_objects, stack_spec

STACKS = ["dev", "staging", "prod"]


def _manifest(registration: Registration) -> dict[str, Any]:
    manifest: dict[str, Any] = integral(dict(registration.inputs))
    if manifest.get("kind") == "Secret" and manifest.get("stringData") == SECRET_PLACEHOLDER:
        # pulumi-kubernetes marks the whole of stringData secret; the recording shows only the placeholder.
        manifest["stringData"] = {HF_TOKEN_SECRET_KEY: "redacted"}
    return manifest


def kubernetes_schema_version(cluster_version: str) -> str:
    """kubernetes-validate's schema set for the cluster's minor version; no silent fallback to an older one."""
    wanted = f"{cluster_version}.0"
    if wanted not in kv_utils.all_versions():
        pytest.fail(f"kubernetes-validate {kubernetes_validate.__version__} ships no schemas for {cluster_version}")
    return wanted


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_validates_strictly_against_the_clusters_kubernetes(stack: str) -> None:
    spec = stack_spec(stack)
    version = kubernetes_schema_version(spec.cluster.kubernetes_version)
    objects = [r for r in kubernetes_objects(evaluate_servers(spec)) if "monitoring.coreos.com" not in r.type]
    assert objects
    for registration in objects:
        assert kubernetes_validate.validate(_manifest(registration), version, strict=True) == version[:-2], (
            registration.name
        )


def test_strict_validation_catches_a_misspelt_field() -> None:
    version = kubernetes_schema_version("1.34")
    deployment = evaluate_servers(stack_spec("dev")).named("llama-8b-deployment")
    manifest = _manifest(deployment)
    manifest["spec"]["template"]["spec"]["containers"][0]["startupProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(manifest, version, strict=True)


def _crd_schema(kind_file: str) -> dict[str, Any]:
    document = yaml.safe_load((crd_dir() / kind_file).read_text())
    version = next(v for v in document["spec"]["versions"] if v["name"] == "v1")
    return _closed(version["schema"]["openAPIV3Schema"])


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """Structural schemas prune unknown fields silently; closing them turns a misspelt field into an error."""
    schema = dict(schema)
    if "properties" in schema and "additionalProperties" not in schema:
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        schema["properties"] = {k: _closed(v) for k, v in schema["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            schema[key] = _closed(schema[key])
    return schema


@pytest.mark.parametrize("stack", STACKS)
def test_pod_monitors_validate_against_the_prometheus_operator_crd(stack: str) -> None:
    schema = _crd_schema("monitoring.coreos.com_podmonitors.yaml")
    monitors = evaluate_servers(stack_spec(stack)).of_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")
    assert len(monitors) == len(stack_spec(stack).serving_deployments)
    for monitor in monitors:
        manifest = _manifest(monitor)
        assert crd_errors(manifest) == []
        jsonschema.Draft7Validator(schema).validate(manifest)
        assert manifest["metadata"]["labels"]["inferplane.io/scrape"] == "true"
    bad = _manifest(monitors[0])
    bad["spec"]["podMetricsEndpoints"][0]["paths"] = "/metrics"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(bad)


@pytest.mark.parametrize("stack", STACKS)
def test_the_token_reaches_pods_only_as_a_mounted_file(stack: str) -> None:
    evaluation = evaluate_servers(stack_spec(stack))
    everything = json.dumps(
        [[dict(r.inputs), dict(r.outputs)] for r in evaluation.registrations] + [dict(evaluation.outputs)]
    )
    assert HF_TOKEN not in everything
    secrets = evaluation.of_type("kubernetes:core/v1:Secret")
    assert [s.inputs["stringData"] for s in secrets] == ["[secret]"] * len(secrets)
    for registration in evaluation.registrations:
        for env in _env_vars(registration.inputs):
            # No secret reaches an environment (a disaggregated server's pod IP does, from the downward API).
            assert env["name"] != "HF_TOKEN" and set(env.get("valueFrom", {})) <= {"fieldRef"}
            assert "value" not in env or "hf_" not in str(env["value"])


def _env_vars(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "env" and isinstance(item, list):
                found += item
            else:
                found += _env_vars(item)
    elif isinstance(value, list):
        for item in value:
            found += _env_vars(item)
    return found


def test_one_namespace_and_secret_per_cluster() -> None:
    evaluation = evaluate_servers(stack_spec("staging"))
    namespaces = evaluation.of_type("kubernetes:core/v1:Namespace")
    # Registration order is the engine's; compare as sets. A provider reference ends in the provider's id.
    assert {(n.name, n.provider.rsplit("::", 1)[-1]) for n in namespaces} == {
        ("eks-serving-namespace", "eks-id"),
        ("gke-serving-namespace", "gke-id"),
    }
    levels = {n.name: n.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] for n in namespaces}
    assert levels == {"eks-serving-namespace": "restricted", "gke-serving-namespace": "baseline"}
    assert {s.name for s in evaluation.of_type("kubernetes:core/v1:Secret")} == {"eks-hf-token", "gke-hf-token"}
    assert evaluation.named("qwen-7b-deployment").provider.rsplit("::", 1)[-1] == "gke-id"
    assert evaluation.named("llama-8b-deployment").provider.rsplit("::", 1)[-1] == "eks-id"


def _policy_spec(evaluation: Any, name: str) -> Any:
    return evaluation.named(name).inputs["spec"]


def test_each_serving_namespace_denies_by_default_and_admits_the_gateway_prometheus_dns_and_model_loading() -> None:
    evaluation = evaluate_servers(stack_spec("staging"))
    policies = evaluation.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert {(p.name, p.inputs["metadata"]["name"], p.provider.rsplit("::", 1)[-1]) for p in policies} == {
        (f"{cluster}-serving-network-policy-{name}", name, f"{cluster}-id")
        for cluster in ("eks", "gke")
        for name in ("default-deny", "dns", "model-server-ingress", "model-loading-egress")
    }
    assert {p.inputs["metadata"]["namespace"] for p in policies} == {"inference"}
    for cluster in ("eks", "gke"):
        prefix = f"{cluster}-serving-network-policy"
        assert _policy_spec(evaluation, f"{prefix}-default-deny") == {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
        }
        assert _policy_spec(evaluation, f"{prefix}-dns") == {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        },
                        {"ipBlock": {"cidr": "169.254.20.10/32"}},  # NodeLocal DNSCache on the node
                    ],
                    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
                }
            ],
        }
    gateway = {
        "namespaceSelector": {"matchLabels": {"app.kubernetes.io/part-of": "inferplane"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "gateway"}},
    }
    prometheus = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "prometheus",
                "app.kubernetes.io/managed-by": "prometheus-operator",
            }
        },
    }
    servers = {"matchLabels": {"app.kubernetes.io/component": "model-server"}}
    # EKS serves Triton (its OpenAI frontend: the API and /metrics on 9000) and SGLang (both on 30000), GKE vLLM
    # (one port for all).
    eks_ports = [{"port": 9000, "protocol": "TCP"}, {"port": 30000, "protocol": "TCP"}]
    assert _policy_spec(evaluation, "eks-serving-network-policy-model-server-ingress") == {
        "podSelector": servers,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [gateway], "ports": eks_ports}, {"from": [prometheus], "ports": eks_ports}],
    }
    assert _policy_spec(evaluation, "gke-serving-network-policy-model-server-ingress")["ingress"] == [
        {"from": [gateway], "ports": [{"port": 8000, "protocol": "TCP"}]},
        {"from": [prometheus], "ports": [{"port": 8000, "protocol": "TCP"}]},
    ]
    loaders = {
        "matchExpressions": [
            {"key": "app.kubernetes.io/component", "operator": "In", "values": ["model-server", "engine-build"]}
        ]
    }
    https = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    pod_identity = {"to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}], "ports": [{"port": 80, "protocol": "TCP"}]}
    assert _policy_spec(evaluation, "eks-serving-network-policy-model-loading-egress") == {
        "podSelector": loaders,
        "policyTypes": ["Egress"],
        "egress": [https, pod_identity],
    }
    assert _policy_spec(evaluation, "gke-serving-network-policy-model-loading-egress")["egress"] == [https]
    # The selectors match what the servers and the engine build carry.
    llama = evaluation.named("llama-8b-deployment").inputs["spec"]["template"]["metadata"]["labels"]
    build = evaluation.named("llama-8b-engine-build").inputs["spec"]["template"]["metadata"]["labels"]
    assert llama["app.kubernetes.io/component"] == "model-server"
    assert build["app.kubernetes.io/component"] == "engine-build"
    namespace = evaluation.named("eks-serving-namespace").inputs["metadata"]["labels"]
    assert namespace["app.kubernetes.io/part-of"] == "inferplane"


@pytest.mark.parametrize(
    ("efa", "ports"), [(True, [{"port": 5600, "protocol": "TCP"}]), (False, [{"protocol": "TCP"}])]
)
def test_a_disaggregated_models_roles_reach_each_other_and_no_one_else(efa: bool, ports: list[dict[str, Any]]) -> None:
    spec = stack_spec("prod")
    pools = (spec.pools[0].model_copy(update={"efa": efa, "zone": "us-east-1a" if efa else None}), *spec.pools[1:])
    evaluation = evaluate_servers(spec.model_copy(update={"pools": pools}))
    roles = {
        "matchExpressions": [
            {"key": "app.kubernetes.io/name", "operator": "In", "values": ["llama-70b", "llama-70b-prefill"]}
        ],
        "matchLabels": {"app.kubernetes.io/component": "model-server"},
    }
    # EFA moves the blocks by SRD, past the IP stack: only NIXL's handshake port; UCX on TCP picks its own ports.
    assert _policy_spec(evaluation, "eks-serving-network-policy-kv-transfer-llama-70b") == {
        "podSelector": roles,
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": roles}], "ports": ports}],
        "egress": [{"to": [{"podSelector": roles}], "ports": ports}],
    }
    for name in ("llama-70b", "llama-70b-prefill"):
        labels = evaluation.named(f"{name}-deployment").inputs["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == name
    names = {p.name for p in evaluation.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    assert "eks-serving-network-policy-kv-transfer-llama-8b" not in names


@pytest.mark.parametrize(
    ("model", "component", "port"),
    [
        ("llama-70b", "inferplane:index:VllmService", {"name": "http", "port": 8000}),
        ("llama-8b", "inferplane:index:TritonTrtLlmService", {"name": "openai", "port": 9000}),
    ],
)
def test_each_model_server_has_a_headless_service_of_its_ready_pods(
    model: str, component: str, port: dict[str, Any]
) -> None:
    """The gateway resolves one address per ready replica (``<model>-endpoints``) beside the ClusterIP Service."""
    evaluation = evaluate_servers(stack_spec("prod"))
    server = evaluation.named(model)
    assert server.type == component
    headless = evaluation.named(f"{model}-endpoints")
    assert (headless.type, headless.parent) == ("kubernetes:core/v1:Service", server.urn)
    cluster_ip = evaluation.named(f"{model}-service").inputs
    assert headless.inputs["metadata"] == {**cluster_ip["metadata"], "name": f"{model}-endpoints"}
    assert headless.inputs["metadata"]["namespace"] == "inference"
    assert headless.inputs["spec"] == {
        "type": "ClusterIP",
        "clusterIP": "None",
        "publishNotReadyAddresses": False,
        "selector": {"app.kubernetes.io/name": model, "app.kubernetes.io/component": "model-server"},
        "ports": [{**port, "targetPort": port["name"], "protocol": "TCP"}],
    }
    selector = headless.inputs["spec"]["selector"]
    deployment = evaluation.named(f"{model}-deployment").inputs["spec"]
    assert selector == cluster_ip["spec"]["selector"] == deployment["selector"]["matchLabels"]
    assert selector.items() <= deployment["template"]["metadata"]["labels"].items()
    assert model_endpoints_service_name(model) == f"{model}-endpoints"
    assert model_endpoints_host(model) == f"{model}-endpoints.inference.svc.cluster.local"


def test_every_deployment_gets_its_engine() -> None:
    evaluation = evaluate_servers(stack_spec("prod"))
    components = {r.name: r.type for r in evaluation.registrations if r.type.startswith("inferplane:")}
    assert components == {
        "llama-70b": "inferplane:index:VllmService",
        "llama-70b-prefill": "inferplane:index:VllmService",
        "llama-8b": "inferplane:index:TritonTrtLlmService",
        "eks-serving-network-policy": "inferplane:index:ServingNetworkPolicy",
    }


def test_a_pool_without_a_provider_is_refused() -> None:
    spec = stack_spec("staging")
    plan = size_platform(spec)

    def program() -> None:
        eks = k8s.Provider("eks", kubeconfig="{}")
        build_model_servers(spec, plan, {"l40s": eks}, hf_token=pulumi.Output.secret(HF_TOKEN))

    with pytest.raises(pulumi.InputPropertiesError) as caught:
        evaluate(program, mocks=PlatformMocks())
    assert caught.value.errors == [{"property_path": "providers_by_pool.tpu-v5e", "reason": "no provider"}]


def test_the_intended_program_call_keeps_the_config_secret_secret() -> None:
    """What ``infra/program.py`` will do once the clusters exist: the token from stack config, as a secret."""
    spec = stack_spec("dev")
    plan = size_platform(spec)

    def program() -> None:
        eks = k8s.Provider("eks", kubeconfig="{}")
        build_model_servers(
            spec,
            plan,
            {pool.name: eks for pool in spec.pools},
            hf_token=pulumi.Config("inferplane").require_secret("hfToken"),
            model_cache_uri=None,
        )

    evaluation = evaluate(
        program,
        mocks=PlatformMocks(),
        config={"inferplane:hfToken": HF_TOKEN},
        secret_keys=("inferplane:hfToken",),
    )
    assert HF_TOKEN not in json.dumps([dict(r.inputs) for r in evaluation.registrations])
    assert evaluation.named("eks-hf-token").inputs["stringData"] == SECRET_PLACEHOLDER
    env = _env_vars(evaluation.named("llama-8b-deployment").inputs)
    assert {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/huggingface/token"} in env
    assert not [e for e in env if e["name"] == "HF_TOKEN" or "valueFrom" in e]


def test_on_the_aws_foundation_every_object_goes_through_the_eks_clusters_provider() -> None:
    """The intended wiring for EKS pools: the provider the foundation's EksCluster builds."""
    spec = stack_spec("prod")
    plan = size_platform(spec)

    def program() -> None:
        foundation = build_aws_foundation(spec, plan, platform_tags(spec))
        build_model_servers(
            spec,
            plan,
            {pool.name: foundation.k8s_provider for pool in spec.pools},
            hf_token=pulumi.Config("inferplane").require_secret("hfToken"),
            model_cache_uri="s3://inferplane-models/hf/",
        )

    evaluation = evaluate(
        program,
        mocks=PlatformMocks(spec.region),
        stack="prod",
        config={"inferplane:hfToken": HF_TOKEN},
        secret_keys=("inferplane:hfToken",),
    )
    [provider] = evaluation.of_type("pulumi:providers:kubernetes")
    objects = kubernetes_objects(evaluation)
    served = [r for r in objects if r.type in ("kubernetes:apps/v1:Deployment", "kubernetes:batch/v1:Job")]
    assert {r.name for r in served} == {
        "llama-70b-deployment",
        "llama-70b-prefill-deployment",
        "llama-8b-deployment",
        "llama-8b-engine-build",
    }
    assert {r.provider for r in objects} == {f"{provider.urn}::{provider.id}"}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_policy_pack_passes_the_model_servers_with_their_autoscalers(stack: str) -> None:
    """The servers as the pack sees them: with the observability stack's ScaledObjects and alert rules beside them
    (what the program will compose), no mandatory policy is violated. Image digests are advisory and left to the
    release process (no registry is reachable here to read them)."""
    spec = stack_spec(stack)
    plan = size_platform(spec)

    def program() -> None:
        provider = k8s.Provider("eks", kubeconfig="{}")
        servers = build_model_servers(
            spec,
            plan,
            {pool.name: provider for pool in spec.pools},
            hf_token=pulumi.Config("inferplane").require_secret("hfToken"),
            model_cache_uri="s3://inferplane-models/hf/",
        )
        targets = {n: ServingTarget(deployment=s.deployment_name, namespace=s.namespace) for n, s in servers.items()}
        observability = build_observability(spec, plan, {"eks": provider}, targets)
        # The gateway in front of them: every model must be reachable through a tier.
        build_gateways(
            spec,
            plan,
            {
                "eks": ClusterInputs(
                    provider=provider,
                    prometheus_url=observability.primary.monitoring.prometheus_url,
                    system_nodes=eks_system_nodes(),
                    after=tuple(servers.values()),
                    # prod's budgets are shared by the replicas (gateway-deployment-require-rate-limits)
                    redis_url=pulumi.Output.secret("rediss://:token@cache.example:6379"),
                )
            },
        )

    evaluation = evaluate(
        program,
        mocks=PlatformMocks(spec.region),
        stack=stack,
        config={"inferplane:hfToken": HF_TOKEN},
        secret_keys=("inferplane:hfToken",),
    )
    with PolicyPackProcess.start(stack=stack) as pack:
        pack.configure(load_policy_pack_config(policy_config_path(spec.environment)))
        report = pack.evaluate(list(evaluation.registrations))
    assert report.mandatory == ()
    assert {v.policy for v in report.violations} <= {"kubernetes-workload-require-image-digest"}


def test_the_network_policy_refuses_missing_and_impossible_ports_before_declaring_anything() -> None:
    def program() -> None:
        ServingNetworkPolicy(
            "policy", ServingNetworkPolicyArgs(namespace="inference", api_ports=[], metrics_ports=[8000, 70000])
        )

    with pytest.raises(pulumi.InputPropertiesError) as caught:
        evaluate(program, mocks=PlatformMocks())
    assert caught.value.errors == [
        {"property_path": "api_ports", "reason": "give at least one port"},
        {"property_path": "metrics_ports[1]", "reason": "70000 is not a TCP port"},
    ]


def test_pinned_digests_win_over_tags_and_a_deployments_own_wins_over_the_platforms() -> None:
    platform_digest, model_digest, cli_digest = "sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64
    spec = stack_spec("prod")
    triton = next(m for m in spec.models if m.engine == "triton")
    pinned = spec.model_copy(
        update={
            "image_digests": {"vllm": platform_digest, "triton-trtllm": platform_digest, "aws-cli": cli_digest},
            "models": tuple(
                m.model_copy(update={"image_digest": model_digest}) if m is triton else m for m in spec.models
            ),
        }
    )
    evaluation = evaluate_servers(pinned)
    vllm_pod = evaluation.named("llama-70b-deployment").inputs["spec"]["template"]["spec"]
    assert vllm_pod["containers"][0]["image"] == f"vllm/vllm-openai:v0.32.0@{platform_digest}"
    assert vllm_pod["initContainers"][0]["image"] == f"amazon/aws-cli:2.37.5@{cli_digest}"
    triton_pod = evaluation.named("llama-8b-deployment").inputs["spec"]["template"]["spec"]
    assert triton_pod["containers"][0]["image"] == f"nvcr.io/nvidia/tritonserver:26.05-trtllm-python-py3@{model_digest}"
    images = {c["image"] for c in [*triton_pod["initContainers"], *triton_pod["containers"]]}
    assert images == {
        f"amazon/aws-cli:2.37.5@{cli_digest}",
        f"nvcr.io/nvidia/tritonserver:26.05-trtllm-python-py3@{model_digest}",
    }
    # Unpinned, the catalog's tags run.
    plain = evaluate_servers(spec).named("llama-70b-deployment").inputs["spec"]["template"]["spec"]
    assert plain["containers"][0]["image"] == "vllm/vllm-openai:v0.32.0"


def test_a_vllm_fallback_also_answers_to_its_primarys_name() -> None:
    raw = yaml.safe_load((PROJECT_DIR / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["inferplane:platform"]
    raw["models"][1]["engine"] = "vllm"  # llama-8b, the premium tier's fallback for llama-70b
    evaluation = evaluate_servers(parse_platform(raw, "us-east-1"))
    args = {
        d.inputs["metadata"]["name"]: d.inputs["spec"]["template"]["spec"]["containers"][0]["args"]
        for d in evaluation.of_type("kubernetes:apps/v1:Deployment")
    }
    names = args["llama-8b"][args["llama-8b"].index("--served-model-name") + 1 :][:2]
    assert names == ["llama-8b", "llama-70b"]  # its own name first: responses say which model answered
    primary = args["llama-70b"]
    assert primary[primary.index("--served-model-name") + 2].startswith("--")  # a primary has no alias
