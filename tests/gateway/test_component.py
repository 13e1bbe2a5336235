"""Gateway: the rendered configuration on the cluster, exactly; keys generated and kept secret; pods locked down;
schema-valid Kubernetes objects and custom resources; bad input refused together, naming the fields."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.capacity.system_nodes import SCALE_OUT_FACTOR
from inferplane.components.gateway.component import (
    AWS_INTERNAL_LB_ANNOTATIONS,
    CONFIG_CHECKSUM_ANNOTATION,
    GKE_INTERNAL_LB_ANNOTATIONS,
    RUN_AS_USER,
    TARGET_INFLIGHT_PER_REPLICA,
    Gateway,
    GatewayArgs,
    policy_annotations,
)
from inferplane.components.gateway.observability import GatewaySeries, render_rules
from inferplane.components.gateway.renderer import (
    API_KEYS_DIR,
    API_KEYS_FILE,
    CONFIG_DIR,
    ENVOY_CONFIG_FILE,
    PROCESSOR_CONFIG_FILE,
    PROCESSOR_IMAGE,
    REDIS_CA_DIR,
    REDIS_CA_FILE,
    REDIS_URL_DIR,
    REDIS_URL_KEY,
    TOKENIZERS_DIR,
    GatewayAddresses,
    RenderedGateway,
    processor_config,
    render_api_key_file,
    render_gateway,
)
from inferplane.components.gcp.memorystore import TLS_PORT
from inferplane.components.platform.serving import HF_TOKEN_SECRET
from inferplane.components.serving.annotations import (
    COMPONENT_LABEL,
    GATEWAY,
    GATEWAY_AUTH,
    GATEWAY_REQUESTS_PER_MINUTE,
    GATEWAY_ROUTES,
    GATEWAY_TOKENS_PER_MINUTE,
    AnnotationError,
    GatewayProvider,
    parse_gateway_annotations,
)
from inferplane.components.serving.model_server import HF_TOKEN_DIR
from inferplane.components.serving.naming import cache_embedder_url
from inferplane.components.spec.platform_spec import RoutingTierSpec
from inferplane.processor.config import ProcessorConfig, TenantConfig
from inferplane.tool.mockengine import SECRET_PLACEHOLDER, Evaluation, PlatformMocks, Registration, evaluate
from tests.crds import errors as crd_errors
from tests.crds import integral
from tests.envoy import validate
from tests.serving.test_serving import kubernetes_schema_version
from tests.serving_support import kubernetes_objects, stack_spec
from tests.stacks import evaluate_shipped_stack

STACKS = ("dev", "staging", "prod")
PROMETHEUS = "http://prometheus.monitoring.svc:9090"
REDIS_URL = "rediss://:TESTredisTOKEN0123456789@cache.example:6379"


@pytest.fixture(scope="module")
def stacks() -> Iterator[dict[str, Evaluation]]:
    """Every shipped stack's real program, evaluated once for the module."""
    yield {name: evaluate_shipped_stack(name) for name in STACKS}


def _rendered(stack: str, cluster: str = "eks") -> RenderedGateway:
    spec = stack_spec(stack)
    return render_gateway(spec, size_platform(spec), cluster)  # type: ignore[arg-type]


def _args(rendered: RenderedGateway, **overrides: Any) -> GatewayArgs:
    values: dict[str, Any] = {
        "rendered": rendered,
        "environment": "prod",
        "cloud": "aws",
        "namespace": "inference",
        "replicas": 3,
        "prometheus_url": PROMETHEUS,
        "node_selector": {"inferplane.io/role": "system"},
        "redis_url": REDIS_URL,
        "model_cache_uri": "s3://models-123456789012/models/",
    }
    values.update(overrides)
    return GatewayArgs(**values)


def _evaluate(args: GatewayArgs, name: str = "gateway") -> Evaluation:
    def program() -> None:
        gateway = Gateway(name, args, pulumi.ResourceOptions(provider=k8s.Provider("eks", kubeconfig="{}")))
        pulumi.export("endpoint", gateway.endpoint)
        pulumi.export("keys", gateway.api_keys)
        pulumi.export("plainKeys", pulumi.Output.unsecret(gateway.api_keys))
        if gateway.api_key_secret is not None:
            pulumi.export("keyFile", pulumi.Output.unsecret(gateway.api_key_secret.string_data))

    return evaluate(program, mocks=PlatformMocks("us-east-1"))


def _pod(deployment: Registration) -> dict[str, Any]:
    return dict(deployment.inputs["spec"]["template"]["spec"])


def _container(deployment: Registration, name: str) -> dict[str, Any]:
    pod = _pod(deployment)
    return next(c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == name)


def test_children_are_exactly_the_gateways_objects() -> None:
    rendered = _rendered("prod")
    evaluation = _evaluate(_args(rendered))
    component = evaluation.named("gateway")
    assert component.type == "inferplane:index:Gateway"
    children = {(r.type, r.name) for r in evaluation.children_of(component.urn)}
    keys = {("random:index/randomPassword:RandomPassword", f"gateway-key-{t}") for t in rendered.tenants}
    assert rendered.tenants  # prod names its tenants
    assert children == keys | {
        ("kubernetes:core/v1:ServiceAccount", "gateway-sa"),
        ("kubernetes:core/v1:ConfigMap", "gateway-config"),
        ("kubernetes:core/v1:Secret", "gateway-api-keys"),
        ("kubernetes:core/v1:Secret", "gateway-redis"),
        ("kubernetes:apps/v1:Deployment", "gateway-deployment"),
        ("kubernetes:core/v1:Service", "gateway-service"),
        ("kubernetes:policy/v1:PodDisruptionBudget", "gateway-pdb"),
        ("kubernetes:keda.sh/v1alpha1:ScaledObject", "gateway-scaledobject"),
        ("kubernetes:monitoring.coreos.com/v1:PodMonitor", "gateway-monitor"),
        ("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "gateway-rules"),
        ("kubernetes:core/v1:ConfigMap", "gateway-dashboard"),
        ("kubernetes:networking.k8s.io/v1:NetworkPolicy", "gateway-netpol"),
    }


def test_the_config_map_holds_the_rendered_files_and_the_checksum_rolls_the_pods() -> None:
    rendered = _rendered("prod")
    evaluation = _evaluate(_args(rendered))
    data = evaluation.named("gateway-config").inputs["data"]
    assert data == {
        rendered.envoy_config_file: rendered.envoy_yaml,
        rendered.processor_config_file: rendered.processor_json,
        # prod's hosted provider: the SDS file naming its key's file in the mounted Secret
        "provider-fireworks-llama-70b-sds.yaml": rendered.provider_files["provider-fireworks-llama-70b-sds.yaml"],
    }
    deployment = evaluation.named("gateway-deployment")
    template = deployment.inputs["spec"]["template"]["metadata"]
    assert template["annotations"] == {CONFIG_CHECKSUM_ANNOTATION: rendered.checksum}
    # A change of the spec (a tighter request limit) is a new checksum, so a new pod template.
    spec = stack_spec("prod")
    tighter = spec.model_copy(
        update={
            "gateway": spec.gateway.model_copy(
                update={"rate_limit": spec.gateway.rate_limit.model_copy(update={"requests_per_minute": 7})}
            )
        }
    )
    assert render_gateway(tighter, size_platform(tighter), "eks").checksum != rendered.checksum


def test_envoy_and_the_processor_run_locked_down_on_the_system_nodes() -> None:
    rendered = _rendered("prod")
    deployment = _evaluate(_args(rendered)).named("gateway-deployment")
    pod = _pod(deployment)
    assert pod["nodeSelector"] == {"inferplane.io/role": "system"}
    assert "tolerations" not in pod  # never on the accelerator nodes
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "gateway-sa"
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert RUN_AS_USER >= 10000
    for name in ("envoy", "processor", "fetch-tokenizers"):
        assert _container(deployment, name)["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
        }, name
    envoy = _container(deployment, "envoy")
    assert envoy["image"] == rendered.envoy_image
    assert envoy["command"] == ["envoy"]
    assert envoy["args"] == [
        "--config-path", f"{rendered.config_dir}/{rendered.envoy_config_file}",
        "--concurrency", "2",
        "--log-level", "info",
    ]  # fmt: skip
    assert envoy["ports"] == [
        {"name": "http", "containerPort": rendered.listener_port, "protocol": "TCP"},
        {"name": "stats", "containerPort": rendered.stats_port, "protocol": "TCP"},
    ]
    assert envoy["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "stats"}
    mounts = {m["name"]: m for m in envoy["volumeMounts"]}
    assert mounts["api-keys"] == {"name": "api-keys", "mountPath": rendered.api_keys_dir, "readOnly": True}
    assert "subPath" not in mounts["api-keys"]  # Envoy watches the directory: the Secret's atomic swap reaches it
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["api-keys"]["secret"] == {"secretName": "gateway-api-keys", "defaultMode": 0o440}
    processor = _container(deployment, "processor")
    assert processor["image"] == rendered.processor_image
    assert processor["args"] == ["--config", f"{rendered.config_dir}/{rendered.processor_config_file}"]
    assert processor["readinessProbe"]["tcpSocket"] == {"port": "processor-metrics"}
    assert "env" not in processor  # the Redis URL (it may carry a password) is a mounted file, never the environment
    assert {"name": "redis-url", "mountPath": rendered.redis_url_dir, "readOnly": True} in processor["volumeMounts"]
    assert volumes["redis-url"]["secret"] == {"secretName": "gateway-redis", "defaultMode": 0o440}
    assert json.loads(rendered.processor_json)["redis_url_file"] == f"{rendered.redis_url_dir}/{REDIS_URL_KEY}"
    fetch = _container(deployment, "fetch-tokenizers")
    for file in rendered.tokenizer_files.values():
        assert ["--include", file] == fetch["args"][fetch["args"].index(file) - 1 : fetch["args"].index(file) + 1]
    spread = pod["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert deployment.inputs["spec"]["replicas"] == 3
    assert deployment.inputs["spec"]["template"]["metadata"]["labels"][COMPONENT_LABEL] == GATEWAY


def test_envoys_threads_and_cpu_grow_with_the_processors_workers() -> None:
    """Four workers run flat out would outrun Envoy's two threads: the pod asks sizing's 2.6 CPU and 3 threads."""
    prod = stack_spec("prod")
    spec = prod.model_copy(update={"gateway": prod.gateway.model_copy(update={"processor_workers": 4})})
    rendered = render_gateway(spec, size_platform(spec), "eks")
    deployment = _evaluate(_args(rendered)).named("gateway-deployment")
    envoy, processor = _container(deployment, "envoy"), _container(deployment, "processor")
    assert envoy["args"][envoy["args"].index("--concurrency") + 1] == "3"
    assert envoy["resources"] == {"requests": {"cpu": "2600m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}}
    assert processor["resources"]["requests"]["cpu"] == "4"


def test_one_key_per_tenant_generated_secret_and_written_as_the_api_key_file() -> None:
    rendered = _rendered("prod")
    evaluation = _evaluate(_args(rendered))
    assert evaluation.outputs["keys"] == SECRET_PLACEHOLDER
    keys = evaluation.outputs["plainKeys"]
    assert sorted(keys) == sorted(rendered.tenants)
    assert len(set(keys.values())) == len(keys)
    for tenant in rendered.tenants:
        password = evaluation.named(f"gateway-key-{tenant}").inputs
        assert password["length"] == 48 and password["special"] is False
    assert evaluation.named("gateway-api-keys").inputs["stringData"] == SECRET_PLACEHOLDER
    assert evaluation.outputs["keyFile"] == {rendered.api_keys_file: render_api_key_file(keys)}
    everything = json.dumps([dict(r.inputs) for r in evaluation.registrations])
    for key in keys.values():
        assert key not in everything
    assert "TESTredisTOKEN" not in everything


def test_policy_annotations_say_what_the_processor_enforces() -> None:
    rendered = _rendered("prod")
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    annotations = _evaluate(_args(rendered)).named("gateway-deployment").inputs["metadata"]["annotations"]
    parsed = parse_gateway_annotations(annotations)
    assert parsed.auth == "api_key"
    assert annotations[GATEWAY_REQUESTS_PER_MINUTE] == str(max(t.requests_per_minute for t in config.tenants))
    assert annotations[GATEWAY_TOKENS_PER_MINUTE] == str(max(t.tokens_per_minute for t in config.tenants))
    assert parsed.routes is not None
    assert {name: route.max_context for name, route in parsed.routes.items()} == {
        m.name: m.max_model_len for m in config.models
    }
    for model in config.models:
        assert model.tier in parsed.routes[model.name].tiers
    assert set(json.loads(annotations[GATEWAY_ROUTES])) == set(rendered.models)
    assert annotations[GATEWAY_AUTH] == "api_key"
    # Who may reach which hosted provider, in the diff of every preview that changes it.
    assert parsed.providers == {
        "fireworks-llama-70b": GatewayProvider(host="api.fireworks.ai", tiers=("premium",), tenants=("assistant",))
    }


def test_a_providers_key_is_mounted_in_envoy_alone_from_the_teams_secret() -> None:
    rendered = _rendered("prod")
    deployment = _evaluate(_args(rendered)).named("gateway-deployment")
    volume = next(v for v in _pod(deployment)["volumes"] if v["name"] == "provider-fireworks-llama-70b")
    assert volume == {
        "name": "provider-fireworks-llama-70b",
        "secret": {
            "secretName": "fireworks-api-key",
            "items": [{"key": "api-key", "path": "api-key"}],
            "defaultMode": 0o440,
        },
    }
    mount = {
        "name": "provider-fireworks-llama-70b",
        "mountPath": "/etc/inferplane/providers/fireworks-llama-70b",
        "readOnly": True,
    }
    assert mount in _container(deployment, "envoy")["volumeMounts"]
    assert all(m["name"] != volume["name"] for m in _container(deployment, "processor")["volumeMounts"])


@pytest.mark.parametrize(
    ("environment", "cloud", "kind", "annotations"),
    [
        ("dev", "aws", "ClusterIP", None),
        ("staging", "aws", "LoadBalancer", AWS_INTERNAL_LB_ANNOTATIONS),
        ("prod", "aws", "LoadBalancer", AWS_INTERNAL_LB_ANNOTATIONS),
        ("prod", "gcp", "LoadBalancer", GKE_INTERNAL_LB_ANNOTATIONS),
    ],
)
def test_the_service_is_internal_where_the_environment_needs_a_load_balancer(
    environment: str, cloud: str, kind: str, annotations: dict[str, str] | None
) -> None:
    service = _evaluate(_args(_rendered("prod"), environment=environment, cloud=cloud)).named("gateway-service")
    assert service.inputs["spec"]["type"] == kind
    assert service.inputs["metadata"].get("annotations") == annotations
    assert service.inputs["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]


def test_autoscaling_on_requests_in_flight_never_cpu_and_custom_resources_fit_their_crds() -> None:
    evaluation = _evaluate(_args(_rendered("prod")))
    scaled = evaluation.named("gateway-scaledobject")
    spec = scaled.inputs["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gateway"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (3, 12)
    [trigger] = spec["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == (
        'sum(envoy_http_downstream_rq_active{namespace="inference",pod=~"gateway-[a-z0-9]+-[a-z0-9]+",'
        'envoy_http_conn_manager_prefix="gateway"})'
    )
    assert trigger["metadata"]["threshold"] == str(TARGET_INFLIGHT_PER_REPLICA)
    monitor = evaluation.named("gateway-monitor")
    assert monitor.inputs["spec"]["podMetricsEndpoints"] == [
        {"port": "stats", "path": "/stats/prometheus", "interval": "15s"},
        {"port": "processor-metrics", "path": "/metrics", "interval": "15s"},
    ]
    for registration in (scaled, monitor, evaluation.named("gateway-rules")):
        manifest = integral(dict(registration.inputs))
        assert crd_errors(manifest) == [], registration.name
    bad = integral(dict(scaled.inputs))
    bad["spec"]["triggers"][0]["metadat"] = bad["spec"]["triggers"][0].pop("metadata")
    assert crd_errors(bad)


def test_the_autoscalers_ceiling_stays_within_what_the_fallback_share_assumes() -> None:
    """The processors' share of each model replica while Redis is down is sized for ``SCALE_OUT_FACTOR`` (4) x
    ``replicas`` pods at most, so a ceiling above that is refused, naming the field."""
    rendered = _rendered("prod")
    assert SCALE_OUT_FACTOR == 4
    scaled = _evaluate(_args(rendered, replicas=3, max_replicas=12)).named("gateway-scaledobject").inputs["spec"]
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (3, 12)
    with pytest.raises(pulumi.InputPropertiesError) as raised:
        _evaluate(_args(rendered, replicas=3, max_replicas=13))
    assert raised.value.errors == [
        {
            "property_path": "max_replicas",
            "reason": "13 is above 4 x replicas (12): the processors' share of each model replica while Redis is "
            "down is sized for that many pods",
        }
    ]


def test_network_policy_admits_callers_on_the_api_port_and_prometheus_on_the_metrics_ports() -> None:
    rendered = _rendered("prod")
    policy = _evaluate(_args(rendered)).named("gateway-netpol").inputs["spec"]
    assert policy["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "gateway", COMPONENT_LABEL: GATEWAY}}
    assert policy["ingress"] == [
        {"ports": [{"port": rendered.listener_port, "protocol": "TCP"}]},
        {
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
            "ports": [
                {"port": rendered.stats_port, "protocol": "TCP"},
                {"port": rendered.processor_metrics_port, "protocol": "TCP"},
            ],
        },
    ]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["egress"] == [
        {
            "to": [{"podSelector": {"matchLabels": {COMPONENT_LABEL: "model-server"}}}],
            # vLLM's port and Triton's OpenAI frontend (prod's EKS cluster serves both engines).
            "ports": [{"port": 8000, "protocol": "TCP"}, {"port": 9000, "protocol": "TCP"}],
        },
        # the serving namespace's DNS rule, to kube-dns only (tests/serving/test_serving.py asserts the same rule there)
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                },
                {"ipBlock": {"cidr": "169.254.20.10/32"}},  # NodeLocal DNSCache on the node
            ],
            "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
        },
        {"ports": [{"port": 6379, "protocol": "TCP"}]},
        {"ports": [{"port": 443, "protocol": "TCP"}]},
        # prod embeds prompts with the served embedder: its pods, on its port
        {
            "to": [{"podSelector": {"matchLabels": {COMPONENT_LABEL: "cache-embedder"}}}],
            "ports": [{"port": 8000, "protocol": "TCP"}],
        },
    ]
    # Without Redis or a model cache (the GKE cluster), Redis's port closes; 443 stays open for prod's provider.
    bare = _evaluate(_args(rendered, redis_url=None, model_cache_uri=None)).named("gateway-netpol").inputs["spec"]
    assert bare["egress"] == [*policy["egress"][:2], *policy["egress"][-2:]]
    # Without a provider either, HTTPS closes too.
    spec = stack_spec("prod")
    unprovided = spec.model_copy(
        update={
            "gateway": spec.gateway.model_copy(
                update={
                    "providers": (),
                    "tiers": tuple(t.model_copy(update={"providers": ()}) for t in spec.gateway.tiers),
                }
            )
        }
    )
    closed = render_gateway(unprovided, size_platform(unprovided), "eks")
    none = _evaluate(_args(closed, redis_url=None, model_cache_uri=None)).named("gateway-netpol").inputs["spec"]
    assert none["egress"] == [*policy["egress"][:2], policy["egress"][-1]]
    # The ports are the replicas' own (each endpoint's), once each: two vLLM replicas and the prefill role's one on
    # 8100, Triton on 9100.
    spec = stack_spec("prod")
    replicas = {
        "llama-70b": (("10.0.0.5", 8100), ("10.0.0.6", 8100)),
        "llama-70b-prefill": (("10.0.0.8", 8100),),
        "llama-8b": (("10.0.0.7", 9100),),
    }
    moved = render_gateway(spec, size_platform(spec), "eks", GatewayAddresses(upstreams=replicas))
    egress = _evaluate(_args(moved)).named("gateway-netpol").inputs["spec"]["egress"]
    assert egress[0]["ports"] == [{"port": 8100, "protocol": "TCP"}, {"port": 9100, "protocol": "TCP"}]


def test_the_served_embedder_is_the_gateways_child_and_an_outside_one_is_reached_by_its_port() -> None:
    spec = stack_spec("prod")
    plan = size_platform(spec)
    assert plan.embedder is not None
    evaluation = _evaluate(_args(_rendered("prod"), embedder=plan.embedder, embedder_image_digest="sha256:" + "c" * 64))
    gateway = evaluation.named("gateway")
    embedder = evaluation.named("gateway-embedder")
    assert (embedder.type, embedder.parent) == ("inferplane:index:EmbedderService", gateway.urn)
    deployment = evaluation.named("gateway-embedder-deployment")
    assert _container(deployment, "embedder")["image"] == "vllm/vllm-openai-cpu:v0.32.0@sha256:" + "c" * 64
    assert _pod(deployment)["nodeSelector"] == {"inferplane.io/role": "system"}
    # A stack that runs its own embedder: the gateway may reach its port, anywhere.
    raw = spec.cache.model_dump() | {
        "embedder": {"kind": "endpoint", "url": "https://embed.example:8443/v1", "model": "e5", "dimensions": 1024}
    }
    outside = spec.model_copy(update={"cache": type(spec.cache).model_validate(raw)})
    rendered = render_gateway(outside, size_platform(outside), "eks")
    egress = _evaluate(_args(rendered)).named("gateway-netpol").inputs["spec"]["egress"]
    assert egress[-1] == {"ports": [{"port": 8443, "protocol": "TCP"}]}


def test_a_served_embedder_is_called_in_the_gateways_own_namespace() -> None:
    spec = stack_spec("prod")
    served = size_platform(spec).embedder
    assert served is not None
    elsewhere = GatewayAddresses(embedder_url=cache_embedder_url("tenant-b"))
    rendered = render_gateway(spec, size_platform(spec), "eks", elsewhere)
    evaluation = _evaluate(_args(rendered, namespace="tenant-b", embedder=served))
    assert evaluation.named("gateway-embedder-service").inputs["metadata"]["namespace"] == "tenant-b"
    policy = evaluation.named("gateway-netpol").inputs
    # The embedder's pods in the policy's own namespace, tenant-b, where the processor calls them.
    assert policy["metadata"]["namespace"] == "tenant-b"
    assert policy["spec"]["egress"][-1] == {
        "to": [{"podSelector": {"matchLabels": {COMPONENT_LABEL: "cache-embedder"}}}],
        "ports": [{"port": 8000, "protocol": "TCP"}],
    }
    # The default namespace's embedder called from tenant-b: not the one beside this gateway.
    with pytest.raises(
        pulumi.InputPropertiesError,
        match=r"embedder: the processor embeds with http://cache-embedder\.inference\.svc\.cluster\.local:8000/v1, "
        "not the served all-minilm-l6-v2",
    ):
        _evaluate(_args(_rendered("prod"), namespace="tenant-b", embedder=served))
    # Without a served embedder here, the inference namespace's is an outside one: its port only, not these pods.
    outside = _evaluate(_args(_rendered("prod"), namespace="tenant-b")).named("gateway-netpol").inputs["spec"]
    assert outside["egress"][-1] == {"ports": [{"port": 8000, "protocol": "TCP"}]}


def test_a_served_embedder_needs_the_namespace_known_at_preview() -> None:
    spec = stack_spec("prod")
    served = size_platform(spec).embedder

    def program() -> None:
        unknown = pulumi.Output.from_input("tenant-b")
        Gateway("gateway", _args(_rendered("prod"), namespace=unknown, embedder=served))

    with pytest.raises(pulumi.InputPropertiesError, match=r"namespace: a gateway with a served embedder needs its"):
        evaluate(program, mocks=PlatformMocks("us-east-1"))


def test_a_served_embedder_the_processor_does_not_call_is_refused() -> None:
    spec = stack_spec("prod")
    served = size_platform(spec).embedder
    assert served is not None
    static = spec.model_copy(update={"cache": spec.cache.model_copy(update={"embedder": type(spec.cache.embedder)()})})
    rendered = render_gateway(static, size_platform(static), "eks")
    with pytest.raises(
        pulumi.InputPropertiesError, match=r"embedder: the processor embeds with wordllama, not the served"
    ):
        _evaluate(_args(rendered, embedder=served))
    narrower = served.model_copy(update={"dimensions": 768})
    with pytest.raises(pulumi.InputPropertiesError, match=r"embedder: the processor expects 384 dimensions"):
        _evaluate(_args(_rendered("prod"), embedder=narrower))
    off = spec.model_copy(update={"cache": spec.cache.model_copy(update={"semantic": False})})
    with pytest.raises(pulumi.InputPropertiesError, match=r"embedder: the rendered processor config has no semantic"):
        _evaluate(_args(render_gateway(off, size_platform(off), "eks"), embedder=served))


KUBE_DNS_ONLY = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    },
    {"ipBlock": {"cidr": "169.254.20.10/32"}},  # NodeLocal DNSCache on the node
]


@pytest.mark.parametrize("stack", STACKS)
def test_port_53_is_open_only_to_kube_dns_in_every_network_policy(stack: str, stacks: dict[str, Evaluation]) -> None:
    """No policy of the plan (the gateway's on each cluster, the serving namespaces') opens DNS more widely than
    another: NetworkPolicies add up, so one rule to any peer would make every other DNS rule moot."""
    rules = [
        (policy.name, rule)
        for policy in stacks[stack].of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        for rule in policy.inputs["spec"].get("egress", [])
        if any(port.get("port") == 53 for port in rule.get("ports", []))
    ]
    names = {name for name, _ in rules}
    assert {n for n in names if "gateway" in n} and {n for n in names if "serving-network-policy-dns" in n}
    assert [name for name, rule in rules if rule.get("to") != KUBE_DNS_ONLY] == []


def test_every_object_validates_strictly_against_the_clusters_kubernetes() -> None:
    version = kubernetes_schema_version(stack_spec("prod").cluster.kubernetes_version)
    evaluation = _evaluate(_args(_rendered("prod")))
    objects = [
        r
        for r in kubernetes_objects(evaluation)
        if not any(group in r.type for group in ("monitoring.coreos.com", "keda.sh"))
    ]
    assert len(objects) == 9
    for registration in objects:
        manifest = integral(dict(registration.inputs))
        if manifest.get("stringData") == SECRET_PLACEHOLDER:
            manifest["stringData"] = {"redacted": "redacted"}
        manifest.setdefault("apiVersion", registration.type.split(":")[1].replace("core/", ""))
        manifest.setdefault("kind", registration.type.rsplit(":", 1)[-1])
        assert kubernetes_validate.validate(manifest, version, strict=True) == version[:-2], registration.name


def test_bad_arguments_are_refused_together_naming_fields() -> None:
    rendered = _rendered("prod")
    args = _args(rendered, replicas=1, max_replicas=0, scrape_interval_seconds=1, node_selector={})
    with pytest.raises(pulumi.InputPropertiesError) as raised:
        _evaluate(args, name="Bad_Name")
    text = str(raised.value)
    for field in ("name", "replicas", "max_replicas", "scrape_interval_seconds", "node_selector"):
        assert f"{field}:" in text, field
    keyless = rendered.model_copy(update={"tenants": ()})
    with pytest.raises(pulumi.InputPropertiesError, match=r"rendered\.tenants: authentication is required"):
        _evaluate(_args(keyless))
    broken = rendered.model_copy(update={"processor_json": "{}"})
    with pytest.raises(pulumi.InputPropertiesError, match=r"rendered\.processor_json: not a valid ProcessorConfig"):
        _evaluate(_args(broken))


@pytest.mark.parametrize(
    ("cluster", "overrides", "field", "reason"),
    [
        ("eks", {"redis_ca_certificates": "PEM"}, "redis_ca_certificates", "names no redis_ca_file to trust them"),
        ("gke", {"model_cache_uri": None}, "redis_ca_certificates", "trusts only /etc/inferplane/redis-ca/ca.pem"),
        (
            "gke",
            {"redis_url": None, "redis_ca_certificates": "PEM", "model_cache_uri": None},
            "redis_ca_certificates",
            "given without a redis_url",
        ),
        ("eks", {"hf_token_secret_name": "hf-token"}, "hf_token_secret_name", "the model cache or the Hub"),
        ("eks", {"redis_port": 0}, "redis_port", "0 is not a TCP port"),
    ],
)
def test_redis_tls_and_tokenizer_sources_are_refused_when_they_disagree(
    cluster: str, overrides: dict[str, Any], field: str, reason: str
) -> None:
    spec = stack_spec("staging")
    rendered = render_gateway(spec, size_platform(spec), cluster)  # type: ignore[arg-type]
    with pytest.raises(pulumi.InputPropertiesError) as raised:
        _evaluate(_args(rendered, environment="staging", **overrides))
    [error] = raised.value.errors or []
    assert error["property_path"] == field
    assert reason in error["reason"]


def test_a_gke_gateway_with_its_store_mounts_the_ca_and_fetches_tokenizers_from_the_hub() -> None:
    spec = stack_spec("staging")
    rendered = render_gateway(spec, size_platform(spec), "gke")
    args = _args(
        rendered,
        environment="staging",
        cloud="gcp",
        redis_url="rediss://:auth@10.24.0.3:6378",
        redis_port=6378,
        redis_ca_certificates="-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n",
        model_cache_uri=None,
        hf_token_secret_name="hf-token",
    )
    evaluation = _evaluate(args, name="gateway-gke")
    component = evaluation.named("gateway-gke")
    assert sorted(
        r.name for r in evaluation.children_of(component.urn) if r.type == "kubernetes:core/v1:ConfigMap"
    ) == [
        "gateway-gke-config",
        "gateway-gke-dashboard",
        "gateway-gke-redis-ca",
    ]
    assert evaluation.named("gateway-gke-redis-ca").inputs["data"] == {
        REDIS_CA_FILE: "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
    }
    deployment = evaluation.named("gateway-gke-deployment")
    assert [c["name"] for c in _pod(deployment)["initContainers"]] == ["fetch-tokenizers"]
    assert _container(deployment, "fetch-tokenizers")["image"] == rendered.processor_image
    egress = evaluation.named("gateway-gke-netpol").inputs["spec"]["egress"]
    assert [rule["ports"] for rule in egress[2:]] == [
        [{"protocol": "TCP", "port": 6378}],
        [{"protocol": "TCP", "port": 443}],
    ]


# --- the whole program -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_runs_one_gateway_per_serving_cluster(stacks: dict[str, Evaluation], stack: str) -> None:
    evaluation = stacks[stack]
    gateways = evaluation.of_type("inferplane:index:Gateway")
    expected = {"dev": ["gateway"], "staging": ["gateway", "gateway-gke"], "prod": ["gateway"]}[stack]
    assert sorted(g.name for g in gateways) == expected
    assert evaluation.outputs["gatewayApiKeys"] == SECRET_PLACEHOLDER
    assert sorted(evaluation.outputs["gatewayEndpoints"]) == sorted(
        "eks" if name == "gateway" else "gke" for name in expected
    )
    for gateway in gateways:
        config_map = next(
            r
            for r in evaluation.children_of(gateway.urn)
            if r.type == "kubernetes:core/v1:ConfigMap" and "config" in r.name
        )
        assert "static_resources" in config_map.inputs["data"]["envoy.yaml"]


def test_the_gke_gateway_runs_on_the_system_pool_with_memorystore_budgets_and_hub_tokenizers(
    stacks: dict[str, Evaluation],
) -> None:
    evaluation = stacks["staging"]
    eks, gke = evaluation.named("gateway-deployment"), evaluation.named("gateway-gke-deployment")
    assert _pod(eks)["nodeSelector"] == {"inferplane.io/role": "system"}
    [(label, pool)] = _pod(gke)["nodeSelector"].items()
    assert label == "cloud.google.com/gke-nodepool"
    assert pool == evaluation.named("inferplane-staging-system").outputs["name"]
    assert [c["name"] for c in _pod(eks)["initContainers"]] == ["fetch-tokenizers"]
    assert _container(eks, "fetch-tokenizers")["image"].startswith("amazon/aws-cli:")

    # Tokenizers: the processor's own image fetches them from the Hub, the token a read-only file of the Secret
    # the TPU servers read their weights with.
    assert _pod(gke)["initContainers"] == [
        {
            "name": "fetch-tokenizers",
            "image": PROCESSOR_IMAGE,
            "command": ["python", "-m", "inferplane.processor.tokenizer_fetch"],
            "args": ["--dest", TOKENIZERS_DIR, "Qwen/Qwen2.5-7B-Instruct/tokenizer.json"],
            "env": [
                {"name": "HOME", "value": "/tmp"},
                {"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_DIR}/token"},
            ],
            "volumeMounts": [
                {"name": "tokenizers", "mountPath": TOKENIZERS_DIR},
                {"name": "tmp", "mountPath": "/tmp"},
                {"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True},
            ],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
            "securityContext": _container(gke, "processor")["securityContext"],
        }
    ]
    volumes = {v["name"]: v for v in _pod(gke)["volumes"]}
    assert volumes["hf-token"] == {
        "name": "hf-token",
        "secret": {"secretName": HF_TOKEN_SECRET, "items": [{"key": "token", "path": "token"}], "defaultMode": 0o440},
    }

    # Budgets: the Memorystore URL as a Secret mounted into the processor, its CA as a ConfigMap mounted
    # where the processor config says it trusts only that.
    redis_secret = evaluation.named("gateway-gke-redis")
    assert redis_secret.parent == evaluation.named("gateway-gke").urn
    assert redis_secret.inputs["stringData"] == SECRET_PLACEHOLDER
    assert "env" not in _container(gke, "processor")
    assert volumes["redis-url"] == {
        "name": "redis-url",
        "secret": {"secretName": "gateway-gke-redis", "defaultMode": 0o440},
    }
    assert {"name": "redis-url", "mountPath": REDIS_URL_DIR, "readOnly": True} in _container(gke, "processor")[
        "volumeMounts"
    ]
    ca = evaluation.named("gateway-gke-redis-ca")
    instance = evaluation.named("inferplane-staging-budgets-redis")
    assert ca.inputs["data"] == {REDIS_CA_FILE: instance.outputs["serverCaCerts"][0]["cert"]}
    assert volumes["redis-ca"] == {"name": "redis-ca", "configMap": {"name": "gateway-gke-redis-ca"}}
    assert {"name": "redis-ca", "mountPath": REDIS_CA_DIR, "readOnly": True} in _container(gke, "processor")[
        "volumeMounts"
    ]
    config = ProcessorConfig.model_validate_json(
        evaluation.named("gateway-gke-config").inputs["data"][PROCESSOR_CONFIG_FILE]
    )
    assert config.redis_ca_file == f"{REDIS_CA_DIR}/{REDIS_CA_FILE}"
    assert config.cache is None  # budgets only: the response cache stays on EKS
    egress = evaluation.named("gateway-gke-netpol").inputs["spec"]["egress"]
    assert {"ports": [{"protocol": "TCP", "port": TLS_PORT}]} in egress
    assert {"ports": [{"protocol": "TCP", "port": 443}]} in egress
    # The gateway waits for its store.
    assert instance.urn in evaluation.named("gateway-gke").dependencies

    # The EKS gateway's ServiceAccount is the one the model cache binds.
    bound = {
        r.inputs["serviceAccount"] for r in evaluation.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    assert _pod(eks)["serviceAccountName"] in bound


def test_scale_to_zero_models_wake_on_the_gateways_pending_requests(stacks: dict[str, Evaluation]) -> None:
    spec = stack_spec("dev")
    sleepy = [m.name for m in spec.models if m.scale_to_zero]
    assert sleepy
    for scaled in stacks["dev"].of_type("kubernetes:keda.sh/v1alpha1:ScaledObject"):
        triggers = {t.get("name"): t for t in scaled.inputs["spec"]["triggers"]}
        target = scaled.inputs["spec"]["scaleTargetRef"]["name"]
        if target in sleepy:
            assert (
                triggers["wake"]["metadata"]["query"] == f'sum(inferplane_gateway_pending_requests{{model="{target}"}})'
            )


@pytest.mark.parametrize("stack", STACKS)
def test_every_stacks_planned_gateway_config_passes_envoy_validate(
    stacks: dict[str, Evaluation], stack: str, tmp_path: Path
) -> None:
    """The bootstrap as the plan's ConfigMap holds it; only the key and config directories move to where this test
    wrote the key file and the ConfigMap's files (Envoy reads the watched files and the providers' SDS files while
    validating), since /etc/inferplane is not writable here."""
    evaluation = stacks[stack]
    config_maps = [
        r
        for g in evaluation.of_type("inferplane:index:Gateway")
        for r in evaluation.children_of(g.urn)
        if r.name == f"{g.name}-config"
    ]
    assert config_maps
    for config_map in config_maps:
        envoy_yaml = config_map.inputs["data"][ENVOY_CONFIG_FILE]
        processor = ProcessorConfig.model_validate_json(config_map.inputs["data"][PROCESSOR_CONFIG_FILE])
        keys_dir = tmp_path / config_map.name
        keys_dir.mkdir()
        tenants = [t.name for t in processor.tenants] or ["nobody"]
        (keys_dir / API_KEYS_FILE).write_text(render_api_key_file({t: f"test-key-{t}-0123456789" for t in tenants}))
        assert (API_KEYS_DIR in envoy_yaml) == processor.auth_required
        mounted = tmp_path / f"{config_map.name}-mounted"  # the ConfigMap's files, as its volume holds them
        mounted.mkdir()
        for file_name, text in config_map.inputs["data"].items():
            (mounted / file_name).write_text(text)
        config = tmp_path / f"{config_map.name}.yaml"
        config.write_text(envoy_yaml.replace(API_KEYS_DIR, str(keys_dir)).replace(CONFIG_DIR, str(mounted)))
        result = validate(config)
        assert result.returncode == 0, (config_map.name, result.stdout + result.stderr)


_LIMITS = st.integers(min_value=1, max_value=10_000_000)


@settings(max_examples=40, deadline=None)
@given(
    limits=st.lists(st.tuples(_LIMITS, _LIMITS), min_size=1, max_size=5),
    auth=st.booleans(),
    contexts=st.tuples(st.integers(1, 262144), st.integers(1, 262144)),
)
def test_policy_annotations_round_trip_over_the_config_space(
    limits: list[tuple[int, int]], auth: bool, contexts: tuple[int, int]
) -> None:
    base = ProcessorConfig.model_validate_json(_rendered("prod").processor_json)
    models = tuple(m.model_copy(update={"max_model_len": contexts[i % 2]}) for i, m in enumerate(base.models))
    tenants = tuple(
        TenantConfig(name=f"t{i}", tiers=(base.tiers[0].name,), requests_per_minute=rpm, tokens_per_minute=tpm)
        for i, (rpm, tpm) in enumerate(limits)
    )
    config = base.model_copy(
        update={
            "models": models,
            "auth_required": auth,
            "tenants": tenants if auth else (),
            "anonymous_tenant": None if auth else tenants[0],
        }
    )
    parsed = parse_gateway_annotations(policy_annotations(config))
    budgets = tenants if auth else tenants[:1]
    assert parsed.auth == ("api_key" if auth else "none")
    assert parsed.requests_per_minute == max(t.requests_per_minute for t in budgets)
    assert parsed.tokens_per_minute == max(t.tokens_per_minute for t in budgets)
    assert parsed.routes is not None
    assert {name: r.max_context for name, r in parsed.routes.items()} == {m.name: m.max_model_len for m in models}
    reached = {m for t in config.tiers for m in (*t.models, *t.fallback)}
    # A prefill role is reached through its model's tiers (prod's llama-70b-prefill through llama-70b's).
    reached |= {m.prefill.model for m in models if m.prefill is not None and m.name in reached}
    assert "llama-70b-prefill" in reached
    assert {name for name, r in parsed.routes.items() if r.tiers} == reached


def test_a_model_its_tier_does_not_list_joins_the_tier_by_its_routing_tier() -> None:
    """llama-8b keeps ``routing_tier: standard`` while no tier lists it (as ``inferplane plan --write-stack`` adds a
    model): the tier serves it after its own primaries, so the processor admits requests for it and its route, read
    from the tiers the processor enforces, says so."""
    spec = stack_spec("prod")
    tiers = (
        RoutingTierSpec(name="premium", models=("llama-70b",)),
        RoutingTierSpec(name="standard", models=("llama-70b",)),
    )
    spec = spec.model_copy(update={"gateway": spec.gateway.model_copy(update={"tiers": tiers})})
    config = processor_config(spec, size_platform(spec), "eks", GatewayAddresses())
    assert [(t.name, t.models, t.fallback) for t in config.tiers] == [
        ("premium", ("llama-70b",), ()),
        ("standard", ("llama-70b", "llama-8b"), ()),
    ]
    routes = parse_gateway_annotations(policy_annotations(config)).routes
    assert routes is not None
    assert {name: route.tiers for name, route in routes.items()} == {
        "llama-70b-prefill": ("premium", "standard"),
        "llama-70b": ("premium", "standard"),
        "llama-8b": ("standard",),
    }


def test_malformed_gateway_annotations_name_the_key() -> None:
    with pytest.raises(AnnotationError, match=f"{GATEWAY_ROUTES}=.*not JSON"):
        parse_gateway_annotations({GATEWAY_ROUTES: "{"})
    with pytest.raises(AnnotationError, match=f"{GATEWAY_TOKENS_PER_MINUTE}='0'"):
        parse_gateway_annotations({GATEWAY_TOKENS_PER_MINUTE: "0"})
    with pytest.raises(AnnotationError, match=f"{GATEWAY_AUTH}='basic'"):
        parse_gateway_annotations({GATEWAY_AUTH: "basic"})


def test_rules_and_dashboard_are_the_gateways_own(stacks: dict[str, Evaluation]) -> None:
    evaluation = stacks["prod"]
    rendered = _rendered("prod")
    config = ProcessorConfig.model_validate_json(rendered.processor_json)
    series = GatewaySeries("gateway", "inference")
    rules = evaluation.named("gateway-rules").inputs
    assert rules["metadata"]["labels"]["inferplane.io/scrape"] == "true"
    assert integral(rules["spec"]) == render_rules(series, config)
    dashboard = evaluation.named("gateway-dashboard").inputs
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    [document] = dashboard["data"].values()
    panels = {p["title"]: p for p in json.loads(document)["panels"]}
    # Every routed model has a catalog price in prod, so each gets its cost line.
    assert [t["legendFormat"] for t in panels["$ per 1k tokens"]["targets"]] == sorted(rendered.models)
