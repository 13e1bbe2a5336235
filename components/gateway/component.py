"""``Gateway``: the platform's front door on one serving cluster, deployed from its rendered configuration.

What runs comes from :func:`components.gateway.renderer.render_gateway` (the Envoy bootstrap and the processor's
config, exactly what ``envoy --mode validate`` checks in the tests); this component only puts it on the cluster:

* a ServiceAccount (no token mounted; on EKS the model cache binds it, so the init container can fetch tokenizers;
  on GKE the init container reads them from the Hugging Face Hub with the model servers' token Secret instead);
* a ConfigMap with both files, and a Secret with the API-key file: one key per tenant, generated at deploy by
  ``pulumi_random.RandomPassword`` (kept encrypted in the state, handed out only as secret outputs) and written by
  :func:`components.gateway.renderer.render_api_key_file` inside ``Output.apply``. Envoy watches the Secret's mount
  (file-based ECDS), so a new key file takes effect without a restart;
* a Secret with the Redis URL (it carries the store's AUTH token) when a Redis is given, and a ConfigMap with its
  certificate authorities where the processor trusts only those (GKE's Memorystore);
* the Deployment: Envoy and the processor side by side, on the cluster's system nodes, the config checksum as a
  pod-template annotation (a config change rolls the pods), every container non-root with a read-only root file
  system, no capabilities and the runtime's seccomp profile; spread over zones and nodes;
* a Service (a load balancer where the environment needs one: internal, see :data:`LOAD_BALANCER`), a
  PodDisruptionBudget, a KEDA ScaledObject on the requests in flight through Envoy (never CPU), a PodMonitor for
  Envoy's and the processor's metrics, its alerts and dashboard, and a NetworkPolicy admitting callers only on the
  API port and Prometheus only on the metrics ports, and letting the pods reach only the model servers, DNS, Redis
  and HTTPS (S3 or the Hugging Face Hub, for the tokenizers).

The pods carry ``app.kubernetes.io/component: gateway`` (:data:`components.serving.annotations.GATEWAY`): the model
servers' NetworkPolicies admit exactly those pods. The Deployment carries the gateway annotations of
:mod:`components.serving.annotations`, derived from the processor config it ships, which the policy pack judges.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from inferplane.components.aws.redis_cache import REDIS_PORT
from inferplane.components.capacity.embedder import EmbedderSizing
from inferplane.components.capacity.system_nodes import (
    ENVOY_MEMORY_MIB,
    PROCESSOR_CPU_MILLICORES_PER_WORKER,
    PROCESSOR_MEMORY_MIB_PER_WORKER,
    SCALE_OUT_FACTOR,
    TOKENIZER_FETCH_CPU_MILLICORES,
    TOKENIZER_FETCH_MEMORY_LIMIT_MIB,
    TOKENIZER_FETCH_MEMORY_MIB,
    envoy_concurrency,
    envoy_cpu_millicores,
)
from inferplane.components.gateway.observability import (
    ENVOY_CONTAINER,
    GatewaySeries,
    ModelCost,
    gateway_dashboard,
    render_rules,
)
from inferplane.components.gateway.provider_renderer import ProviderMount
from inferplane.components.gateway.renderer import (
    REDIS_URL_KEY,
    RenderedGateway,
    render_api_key_file,
)
from inferplane.components.observability.dashboards import DASHBOARD_SIDECAR_LABELS
from inferplane.components.serving import model_server as ms
from inferplane.components.serving.annotations import (
    CACHE_EMBEDDER,
    COMPONENT_LABEL,
    GATEWAY,
    GATEWAY_PROVIDERS,
    GATEWAY_ROUTING,
    MODEL_SERVER,
    NAME_LABEL,
    SCRAPE_LABELS,
    GatewayProvider,
    GatewayRoute,
    gateway_annotations,
    gateway_providers_annotation,
    gateway_routing_annotation,
)
from inferplane.components.serving.embedder_service import EmbedderService, EmbedderServiceArgs
from inferplane.components.serving.naming import CACHE_EMBEDDER_PORT, cache_embedder_url
from inferplane.components.serving.network_policy import dns_egress_rule
from inferplane.components.spec.input_errors import InputErrors, raise_input_errors
from inferplane.components.spec.platform_spec import Environment, RoutingSpec
from inferplane.processor.config import ProcessorConfig

CONFIG_CHECKSUM_ANNOTATION = "inferplane.io/config-checksum"
"""Pod-template annotation holding the rendered config's sha256: a new value is a new pod template, so Kubernetes
rolls the pods onto the new configuration (a ConfigMap update alone never restarts anything)."""

RUN_AS_USER = 10001
"""A high numeric uid that exists in neither image's ``/etc/passwd`` (the Envoy image's own ``envoy`` user is 101):
nothing on the node or in the images shares it. Both processes only read their mounts and write to ``/tmp``."""

API_KEY_LENGTH = 48
"""Characters per generated API key: 48 of 62 alphanumerics are ~285 bits, and fit ``API_KEY_PATTERN``."""


def cpu_quantity(millicores: int) -> str:
    """A Kubernetes CPU quantity: whole cores as ``2``, the rest as ``250m``."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def envoy_resources(workers: int) -> k8s.core.v1.ResourceRequirementsArgs:
    """Envoy's container beside ``workers`` processor workers, from sizing's figures
    (:func:`~inferplane.components.capacity.system_nodes.envoy_cpu_millicores`), which also checks that the system
    nodes hold them; CPU not capped."""
    return k8s.core.v1.ResourceRequirementsArgs(
        requests={"cpu": cpu_quantity(envoy_cpu_millicores(workers)), "memory": f"{ENVOY_MEMORY_MIB}Mi"},
        limits={"memory": f"{ENVOY_MEMORY_MIB}Mi"},
    )


def processor_resources(workers: int) -> k8s.core.v1.ResourceRequirementsArgs:
    """The processor container: a CPU per worker and each worker's memory (sizing's figures; CPU not capped)."""
    memory = f"{PROCESSOR_MEMORY_MIB_PER_WORKER * workers}Mi"
    return k8s.core.v1.ResourceRequirementsArgs(
        requests={"cpu": cpu_quantity(PROCESSOR_CPU_MILLICORES_PER_WORKER * workers), "memory": memory},
        limits={"memory": memory},
    )


FETCH_RESOURCES = k8s.core.v1.ResourceRequirementsArgs(
    requests={"cpu": cpu_quantity(TOKENIZER_FETCH_CPU_MILLICORES), "memory": f"{TOKENIZER_FETCH_MEMORY_MIB}Mi"},
    limits={"memory": f"{TOKENIZER_FETCH_MEMORY_LIMIT_MIB}Mi"},
)
"""The init container that copies the models' tokenizer files from the S3 model cache or the Hugging Face Hub."""

TARGET_INFLIGHT_PER_REPLICA = 200
"""KEDA's target of requests in flight through one gateway replica (Envoy's ``downstream_rq_active``). Most of a
gateway's in-flight requests are streams waiting on the GPUs and cost it little: a request's admission (one ext_proc
message, 3.2 ms of processor CPU at 6,000-token prompts) and Envoy's relaying of its chunks (3.1 ms for 64 tokens at
prod's 4 tokens a chunk, about 0.05 ms a chunk; 2026-12-07, stub engines,
:data:`~inferplane.components.capacity.system_nodes.ENVOY_CPU_PERCENT_OF_PROCESSOR`). 200 such streams of ~1.3 s
are ~150 new requests/s, about half a core each of processor and Envoy; 200 streams of 1,000 tokens (~20 s) are ~10/s,
a sixth of a core of Envoy. Both within what a pod requests (a core a worker, Envoy's share beside them): replicas are
added for connection and failure spread before CPU binds, and a single replica never holds more than a few hundred
streams that a restart would cut."""

DRAIN_SECONDS = 300
"""In-flight streams get up to the model servers' longest drain (``components.serving.model_server.MAX_DRAIN_SECONDS``)
before the pod is killed; the preStop sleep first lets endpoints and the load balancer stop sending new requests."""

LoadBalancer = Literal["none", "internal"]

LOAD_BALANCER: dict[Environment, LoadBalancer] = {"dev": "none", "staging": "internal", "prod": "internal"}
"""How callers reach the gateway. dev: no load balancer (``kubectl port-forward`` or in-cluster clients; nothing is
exposed). staging and prod: an internal network load balancer in the VPC (EKS: the subnets tagged
``kubernetes.io/role/internal-elb`` by :mod:`components.aws.network`); nothing faces the internet, and callers outside
the VPC come through the organisation's own edge."""

AWS_INTERNAL_LB_ANNOTATIONS: dict[str, str] = {
    "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}
"""EKS without the AWS Load Balancer Controller (this project installs none): the Kubernetes service controller
built into EKS reads these two annotations and creates an internal Network Load Balancer. With the controller
installed they would need ``aws-load-balancer-scheme: internal`` instead (the controller's annotation reference)."""

GKE_INTERNAL_LB_ANNOTATIONS: dict[str, str] = {"networking.gke.io/load-balancer-type": "Internal"}
"""GKE: an internal passthrough Network Load Balancer (GKE docs, "Create an internal load balancer")."""

Cloud = Literal["aws", "gcp"]

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


@dataclass(frozen=True)
class GatewayArgs:
    """Inputs of :class:`Gateway`."""

    rendered: RenderedGateway
    """The configuration for this cluster (:func:`components.gateway.renderer.render_gateway`)."""
    environment: Environment
    """dev, staging or prod: decides the load balancer and the zone spread."""
    cloud: Cloud
    """Whose cluster: the load balancer's annotations differ between EKS and GKE."""
    namespace: pulumi.Input[str]
    """The serving namespace: the gateway lives beside the model servers whose NetworkPolicies admit it by label."""
    replicas: int
    """``gateway.replicas``: the replicas always kept (the autoscaler's floor and the initial count)."""
    prometheus_url: pulumi.Input[str]
    """The Prometheus KEDA queries (``MonitoringStack.prometheus_url``)."""
    node_selector: Mapping[str, pulumi.Input[str]]
    """The cluster's system nodes (EKS: the system node group's role label; GKE: the system pool's name)."""
    redis_url: pulumi.Input[str] | None = None
    """``rediss://:<token>@<host>:6379`` of the platform's Redis/Valkey (secret); None where the cluster cannot
    reach one (the processor then fails open on shared token budgets, see the README)."""
    model_cache_uri: pulumi.Input[str] | None = None
    """``s3://bucket/prefix/`` of the model cache: an init container copies the models' tokenizer files from it
    (EKS; the ServiceAccount must be bound to the cache). None: the processor estimates prompt tokens."""
    redis_port: int = REDIS_PORT
    """The store's port, which the NetworkPolicy opens (Memorystore with TLS serves on 6378)."""
    redis_ca_certificates: pulumi.Input[str] | None = None
    """PEM bundle of the store's certificate authorities (Memorystore's ``server_ca_certs``), mounted where the
    processor config's ``redis_ca_file`` points; required exactly when that is set and a Redis is given."""
    hf_token_secret_name: pulumi.Input[str] | None = None
    """The Secret holding the Hugging Face token (the model servers' on that cluster): an init container fetches
    the models' ``tokenizer.json`` from the Hub with it (GKE, where no model cache exists). Exclusive with
    ``model_cache_uri``."""
    max_replicas: int | None = None
    """The autoscaler's ceiling; by default :data:`SCALE_OUT_FACTOR` x ``replicas``."""
    scrape_interval_seconds: int = 15
    """Prometheus scrape and KEDA polling interval."""
    monitoring_namespace: str = "monitoring"
    """Where Prometheus runs (admitted to the metrics ports)."""
    dashboard: bool = True
    """Ship the gateway's Grafana dashboard (a ConfigMap the Grafana sidecar loads)."""
    model_costs: Mapping[str, ModelCost] = field(default_factory=dict)
    """Per routed model, its series and replica price: the dashboard's cost per 1,000 tokens."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels (the stack's tags) on every object."""
    embedder: EmbedderSizing | None = None
    """The semantic cache's served embedder (``PlatformSizing.embedder``), deployed as the child
    :class:`~components.serving.embedder_service.EmbedderService` beside the gateway; the rendered processor config
    must call it in the gateway's namespace (:func:`components.serving.naming.cache_embedder_url`)."""
    embedder_image_digest: str | None = None
    """Pinned digest of the embedder's ``vllm-cpu`` image (the stack's ``image_digests``)."""


def service_account_name(name: str) -> str:
    """The Kubernetes name of the gateway's ServiceAccount (what the model cache binds)."""
    return f"{name}-sa"


def policy_annotations(config: ProcessorConfig, provider_hosts: Mapping[str, str] | None = None) -> dict[str, str]:
    """The gateway annotations (:func:`components.serving.annotations.gateway_annotations`) of what the processor
    enforces.

    A model's route lists the tiers that serve it on this gateway (as a primary, a fallback, or by its
    ``routing_tier``: :func:`components.spec.platform_spec.gateway_tiers`), read from the tiers the processor admits
    requests by, so the policy pack judges what is enforced; so does each model's routing (``load_bound`` above all)."""
    tenants = list(config.tenants) or ([config.anonymous_tenant] if config.anonymous_tenant is not None else [])
    routes: dict[str, list[str]] = {m.name: [] for m in config.models}
    for tier in config.tiers:
        for model in (*tier.models, *tier.fallback):
            if tier.name not in routes[model]:
                routes[model].append(tier.name)
    # A prefill role is reached through its model's tiers: the processor sends it the model's long prompts.
    for served in config.models:
        if served.prefill is not None:
            routes[served.prefill.model] = list(routes[served.name])
    annotations = gateway_annotations(
        auth="api_key" if config.auth_required else "none",
        requests_per_minute=max((t.requests_per_minute for t in tenants), default=None),
        tokens_per_minute=max((t.tokens_per_minute for t in tenants), default=None),
        routes={m.name: GatewayRoute(tiers=tuple(routes[m.name]), max_context=m.max_model_len) for m in config.models},
    )
    routing = {
        m.name: RoutingSpec(
            policy=m.routing.policy, overlap_weight=m.routing.overlap_weight, load_bound=m.routing.load_bound
        )
        for m in config.models
    }
    annotations[GATEWAY_ROUTING] = gateway_routing_annotation(routing)
    if config.providers:
        annotations[GATEWAY_PROVIDERS] = gateway_providers_annotation(
            {
                p.name: GatewayProvider(
                    host=(provider_hosts or {}).get(p.name, ""),
                    tiers=tuple(t.name for t in config.tiers if p.name in t.providers),
                    tenants=p.tenants,
                )
                for p in config.providers
            }
        )
    return annotations


def validate(name: str, args: GatewayArgs) -> InputErrors:
    """Every problem with ``args``, each naming its field; empty when the gateway can be built."""
    errors: InputErrors = []
    if not _NAME.match(name):
        errors.append(("name", f"{name!r} is not a lower-case RFC 1123 label of at most 40 characters"))
    if args.replicas < 1:
        errors.append(("replicas", f"{args.replicas}: the gateway needs at least one replica"))
    if args.environment == "prod" and args.replicas < 2:
        errors.append(("replicas", f"prod runs at least 2 gateway replicas, got {args.replicas}"))
    if args.max_replicas is not None and args.max_replicas < args.replicas:
        errors.append(("max_replicas", f"{args.max_replicas} is below replicas ({args.replicas})"))
    if args.max_replicas is not None and args.max_replicas > args.replicas * SCALE_OUT_FACTOR:
        errors.append(
            (
                "max_replicas",
                f"{args.max_replicas} is above {SCALE_OUT_FACTOR} x replicas ({args.replicas * SCALE_OUT_FACTOR}): "
                "the processors' share of each model replica while Redis is down is sized for that many pods",
            )
        )
    if not 5 <= args.scrape_interval_seconds <= 120:
        errors.append(("scrape_interval_seconds", f"{args.scrape_interval_seconds} is outside 5..120"))
    if not args.node_selector:
        errors.append(("node_selector", "the gateway runs on the system nodes: give their label"))
    if args.rendered.auth_required and not args.rendered.tenants:
        errors.append(("rendered.tenants", "authentication is required but no tenant would get a key"))
    config_ok = False
    try:
        config = ProcessorConfig.model_validate_json(args.rendered.processor_json)
    except ValueError as exc:
        errors.append(("rendered.processor_json", f"not a valid ProcessorConfig: {exc}"))
    else:
        config_ok = True
        if args.redis_ca_certificates is not None and config.redis_ca_file is None:
            errors.append(("redis_ca_certificates", "the processor config names no redis_ca_file to trust them"))
        if args.redis_url is not None and config.redis_ca_file is not None and args.redis_ca_certificates is None:
            errors.append(("redis_ca_certificates", f"the processor trusts only {config.redis_ca_file}: give the CA"))
        if args.redis_ca_certificates is not None and args.redis_url is None:
            errors.append(("redis_ca_certificates", "given without a redis_url"))
    if args.model_cache_uri is not None and args.hf_token_secret_name is not None:
        errors.append(("hf_token_secret_name", "tokenizers come from one place: the model cache or the Hub"))
    if not 0 < args.redis_port < 65536:
        errors.append(("redis_port", f"{args.redis_port} is not a TCP port"))
    if args.embedder is not None and config_ok:
        errors += _embedder_errors(args.embedder, config, args.namespace)
    return errors


def _served_embedder_url(namespace: pulumi.Input[str]) -> str | None:
    """Where the served embedder of a gateway in ``namespace`` answers (it is deployed beside the gateway); None
    when the namespace is only known at deployment."""
    return cache_embedder_url(namespace) if isinstance(namespace, str) else None


def _embedder_errors(embedder: EmbedderSizing, config: ProcessorConfig, namespace: pulumi.Input[str]) -> InputErrors:
    """A served embedder is only of use when the processor calls it, in the gateway's namespace, for the same model
    and vector length."""
    cache = config.cache
    if cache is None or not cache.semantic:
        return [("embedder", "the rendered processor config has no semantic cache to embed for")]
    served_url = _served_embedder_url(namespace)
    if served_url is None:
        return [
            (
                "namespace",
                "a gateway with a served embedder needs its namespace as a string: the processor "
                "config names the embedder's URL in it",
            )
        ]
    called = cache.embedder
    if called.kind != "endpoint" or called.url != served_url or called.model != embedder.model:
        where = called.url if called.kind == "endpoint" else called.kind
        return [("embedder", f"the processor embeds with {where}, not the served {embedder.model}")]
    if called.dimensions != embedder.dimensions:
        return [
            (
                "embedder",
                f"the processor expects {called.dimensions} dimensions, {embedder.model} has {embedder.dimensions}",
            )
        ]
    return []


class Gateway(pulumi.ComponentResource):
    """Envoy and inferplane's processor in front of one cluster's model servers."""

    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service
    api_keys: pulumi.Output[dict[str, str]]
    """Tenant name -> API key; always secret."""
    api_key_secret: k8s.core.v1.Secret | None
    """The Secret holding the API-key file (None when authentication is off)."""
    endpoint: pulumi.Output[str]
    """``http://<service>.<namespace>.svc:<port>`` in the cluster (the load balancer's address is on the Service)."""

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        raise_input_errors(f"The input properties for gateway {name!r} are invalid.", validate(name, args))
        super().__init__("inferplane:index:Gateway", name, None, opts)
        config = ProcessorConfig.model_validate_json(args.rendered.processor_json)
        selector = {NAME_LABEL: name, COMPONENT_LABEL: GATEWAY}
        labels = {**args.labels, **selector, "app.kubernetes.io/part-of": "inferplane"}
        child = pulumi.ResourceOptions(parent=self)
        meta = _metadata(args.namespace, labels)

        account, config_map = _account_and_config(name, args.rendered, meta, child)
        self.api_keys, self.api_key_secret = _api_keys(name, args.rendered, meta, child)
        redis_url, redis_ca = _redis_objects(name, args, config, meta, child)
        mounted = _Mounted(config_map, self.api_key_secret, redis_url, redis_ca)
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=name,
                namespace=args.namespace,
                labels=labels,
                annotations=policy_annotations(config, args.rendered.provider_hosts),
            ),
            spec=_deployment_spec(args, config, account=account, mounted=mounted, selector=selector, labels=labels),
            # KEDA owns the replica count once the ScaledObject exists; Pulumi sets only the first one (else every
            # update, a config change's rollout among them, would reset a scaled-out gateway to its floor).
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["spec.replicas"]),
        )
        self.service = _service(name, args, selector, labels, child)
        # The autoscaler may always add replicas, so there is always a budget: one pod drained at a time.
        ms.disruption_budget(f"{name}-pdb", args.namespace, selector, labels, child)
        self.scaled_object = self._scaled_object(name, args, labels)
        _pod_monitor(name, args, selector, labels, child)
        _network_policy(
            name, args=args, rendered=args.rendered, config=config, selector=selector, labels=labels, opts=child
        )
        _rules_and_dashboard(name, args, config, labels, child)
        _embedder(name, args, child)
        self.endpoint = pulumi.Output.concat("http://", self.service.metadata.name, ".", args.namespace, ".svc:80")
        self.register_outputs(
            {
                "deploymentName": self.deployment.metadata.name,
                "serviceName": self.service.metadata.name,
                "endpoint": self.endpoint,
                "apiKeys": self.api_keys,
            }
        )

    def _scaled_object(
        self, name: str, args: GatewayArgs, labels: Mapping[str, str]
    ) -> k8s.apiextensions.CustomResource:
        """KEDA's ScaledObject on the requests in flight (:func:`scaled_object_spec`); it waits for the Deployment
        it scales."""
        return k8s.apiextensions.CustomResource(
            f"{name}-scaledobject",
            api_version="keda.sh/v1alpha1",
            kind="ScaledObject",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=args.namespace, labels=labels),
            spec=pulumi.Output.all(args.namespace, args.prometheus_url).apply(
                lambda values: scaled_object_spec(
                    name,
                    namespace=values[0],
                    prometheus_url=values[1],
                    min_replicas=args.replicas,
                    max_replicas=args.max_replicas or args.replicas * SCALE_OUT_FACTOR,
                    polling_interval=args.scrape_interval_seconds,
                )
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.deployment]),
        )


_Meta = Callable[[str], k8s.meta.v1.ObjectMetaArgs]
"""Builds the metadata of one of the gateway's objects from its Kubernetes name (:func:`_metadata`)."""


@dataclass(frozen=True)
class _Mounted:
    """The objects the gateway pods mount or read, created before the Deployment that refers to them."""

    config_map: k8s.core.v1.ConfigMap
    """Envoy's bootstrap and the processor's config."""
    api_keys: k8s.core.v1.Secret | None
    """The API-key file; None when authentication is off."""
    redis_url: k8s.core.v1.Secret | None
    """The Redis URL; None without a Redis."""
    redis_ca: tuple[k8s.core.v1.ConfigMap, str] | None
    """The store's certificate authorities and the directory the processor reads them from; None where it trusts
    the system's."""


def _metadata(namespace: pulumi.Input[str], labels: Mapping[str, str]) -> _Meta:
    def meta(object_name: str) -> k8s.meta.v1.ObjectMetaArgs:
        return k8s.meta.v1.ObjectMetaArgs(name=object_name, namespace=namespace, labels=dict(labels))

    return meta


def _account_and_config(
    name: str, rendered: RenderedGateway, meta: _Meta, opts: pulumi.ResourceOptions
) -> tuple[k8s.core.v1.ServiceAccount, k8s.core.v1.ConfigMap]:
    """The pods' ServiceAccount (no token mounted) and the ConfigMap with Envoy's and the processor's config."""
    account = k8s.core.v1.ServiceAccount(
        f"{name}-sa",
        metadata=meta(service_account_name(name)),
        automount_service_account_token=False,
        opts=opts,
    )
    config_map = k8s.core.v1.ConfigMap(
        f"{name}-config",
        metadata=meta(f"{name}-config"),
        data={
            rendered.envoy_config_file: rendered.envoy_yaml,
            rendered.processor_config_file: rendered.processor_json,
            **rendered.route_examples,  # the routed tiers' examples, read beside the processor's config
            **rendered.provider_files,  # the SDS files naming each provider's key file (Envoy's)
        },
        opts=opts,
    )
    return account, config_map


def _api_keys(
    name: str, rendered: RenderedGateway, meta: _Meta, opts: pulumi.ResourceOptions
) -> tuple[pulumi.Output[dict[str, str]], k8s.core.v1.Secret | None]:
    """(tenant -> generated key, always secret; the Secret holding the API-key file, None without tenants)."""
    keys = {
        tenant: random.RandomPassword(f"{name}-key-{tenant}", length=API_KEY_LENGTH, special=False, opts=opts).result
        for tenant in rendered.tenants
    }
    api_keys: pulumi.Output[dict[str, str]] = (
        pulumi.Output.secret(pulumi.Output.all(**keys)) if keys else pulumi.Output.secret({})
    )
    if not keys:
        return api_keys, None
    secret = k8s.core.v1.Secret(
        f"{name}-api-keys",
        metadata=meta(f"{name}-api-keys"),
        type="Opaque",
        string_data={rendered.api_keys_file: api_keys.apply(render_api_key_file)},
        opts=opts,
    )
    return api_keys, secret


def _redis_objects(
    name: str, args: GatewayArgs, config: ProcessorConfig, meta: _Meta, opts: pulumi.ResourceOptions
) -> tuple[k8s.core.v1.Secret | None, tuple[k8s.core.v1.ConfigMap, str] | None]:
    """(the Secret with the Redis URL, it carries the AUTH token; the ConfigMap of the store's certificate
    authorities and the directory the processor reads them from), each None where not needed."""
    if args.redis_url is None:
        return None, None
    url = k8s.core.v1.Secret(
        f"{name}-redis",
        metadata=meta(f"{name}-redis"),
        type="Opaque",
        string_data={REDIS_URL_KEY: pulumi.Output.secret(args.redis_url)},
        opts=opts,
    )
    if args.redis_ca_certificates is None:
        return url, None
    assert config.redis_ca_file is not None  # validate() refuses certificates nobody reads
    ca_dir, ca_file = posixpath.split(config.redis_ca_file)
    ca_map = k8s.core.v1.ConfigMap(
        f"{name}-redis-ca",
        metadata=meta(f"{name}-redis-ca"),
        data={ca_file: args.redis_ca_certificates},
        opts=opts,
    )
    return url, (ca_map, ca_dir)


def _deployment_spec(
    args: GatewayArgs,
    config: ProcessorConfig,
    *,
    account: k8s.core.v1.ServiceAccount,
    mounted: _Mounted,
    selector: Mapping[str, str],
    labels: Mapping[str, str],
) -> k8s.apps.v1.DeploymentSpecArgs:
    """Envoy and the processor side by side on the system nodes, rolled one surge pod at a time whenever the
    rendered config's checksum changes."""
    return k8s.apps.v1.DeploymentSpecArgs(
        replicas=args.replicas,
        selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
        strategy=k8s.apps.v1.DeploymentStrategyArgs(
            type="RollingUpdate",
            rolling_update=k8s.apps.v1.RollingUpdateDeploymentArgs(max_surge=1, max_unavailable=0),
        ),
        template=k8s.core.v1.PodTemplateSpecArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(
                labels={**labels}, annotations={CONFIG_CHECKSUM_ANNOTATION: args.rendered.checksum}
            ),
            spec=k8s.core.v1.PodSpecArgs(
                service_account_name=account.metadata.name,
                automount_service_account_token=False,
                node_selector=dict(args.node_selector),
                security_context=ms.pod_security(non_root=True, uid=RUN_AS_USER),
                termination_grace_period_seconds=ms.PRE_STOP_SLEEP_SECONDS + DRAIN_SECONDS,
                topology_spread_constraints=_spread(selector, zones=args.environment == "prod"),
                init_containers=_init_containers(args) or None,
                containers=[_envoy(args.rendered, config, mounted), _processor(args.rendered, config, mounted)],
                volumes=_volumes(args, mounted),
            ),
        ),
    )


def _volumes(args: GatewayArgs, mounted: _Mounted) -> list[k8s.core.v1.VolumeArgs]:
    """The pod's volumes: the config, scratch space and the tokenizers, then the API keys, the Redis CA and the
    Hugging Face token where each exists."""
    volumes = [
        k8s.core.v1.VolumeArgs(
            name="config", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=mounted.config_map.metadata.name)
        ),
        k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit="64Mi")),
        k8s.core.v1.VolumeArgs(name="tokenizers", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit="2Gi")),
    ]
    if mounted.api_keys is not None:
        volumes.append(
            k8s.core.v1.VolumeArgs(
                name="api-keys",
                # Readable by the pod's group (fsGroup) only: Envoy reads it, nothing writes it.
                secret=k8s.core.v1.SecretVolumeSourceArgs(
                    secret_name=mounted.api_keys.metadata.name, default_mode=0o440
                ),
            )
        )
    if mounted.redis_url is not None:
        volumes.append(
            k8s.core.v1.VolumeArgs(
                name="redis-url",
                secret=k8s.core.v1.SecretVolumeSourceArgs(
                    secret_name=mounted.redis_url.metadata.name, default_mode=0o440
                ),
            )
        )
    if mounted.redis_ca is not None:
        ca_map, _ = mounted.redis_ca
        volumes.append(
            k8s.core.v1.VolumeArgs(
                name="redis-ca", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=ca_map.metadata.name)
            )
        )
    if args.hf_token_secret_name is not None:
        volumes.append(ms.hf_token_volume(args.hf_token_secret_name))
    for mount in args.rendered.provider_mounts:
        # The team's own Secret (never the stack's), its one key only, readable by the pod's group (fsGroup).
        volumes.append(
            k8s.core.v1.VolumeArgs(
                name=_provider_volume(mount),
                secret=k8s.core.v1.SecretVolumeSourceArgs(
                    secret_name=mount.secret,
                    items=[k8s.core.v1.KeyToPathArgs(key=mount.key, path=mount.key)],
                    default_mode=0o440,
                ),
            )
        )
    return volumes


def _provider_volume(mount: ProviderMount) -> str:
    return f"provider-{mount.provider}"


def _init_containers(args: GatewayArgs) -> list[k8s.core.v1.ContainerArgs]:
    """The tokenizer fetch from the model cache or the Hugging Face Hub, if either is given (never both)."""
    rendered = args.rendered
    files = tuple(sorted(set(rendered.tokenizer_files.values())))
    init_containers = []
    if args.model_cache_uri is not None:
        init_containers.append(_tokenizer_fetch(args.model_cache_uri, files))
    if args.hf_token_secret_name is not None:
        init_containers.append(_hub_tokenizer_fetch(rendered.processor_image, rendered.tokenizers_dir, files))
    return init_containers


def _envoy(rendered: RenderedGateway, config: ProcessorConfig, mounted: _Mounted) -> k8s.core.v1.ContainerArgs:
    """Envoy: the API listener and its admin/stats port, ready once ``/ready`` answers; its threads and CPU grow with
    the processor's workers (sizing's figures)."""
    mounts = [
        k8s.core.v1.VolumeMountArgs(name="config", mount_path=rendered.config_dir, read_only=True),
        k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
    ]
    if mounted.api_keys is not None:
        # A directory mount, never subPath: Kubernetes swaps the Secret's files atomically (the ``..data``
        # symlink) and Envoy's watched directory sees the move; a subPath mount would never update.
        mounts.append(k8s.core.v1.VolumeMountArgs(name="api-keys", mount_path=rendered.api_keys_dir, read_only=True))
    # Each provider's key in Envoy's container alone (its credential injector reads it; the processor never sees
    # it), a directory mount for the same atomic swap on rotation.
    mounts += [
        k8s.core.v1.VolumeMountArgs(name=_provider_volume(m), mount_path=m.mount_dir, read_only=True)
        for m in rendered.provider_mounts
    ]
    return k8s.core.v1.ContainerArgs(
        name=ENVOY_CONTAINER,  # the name the gateway's CPU alert selects Envoy's cAdvisor series by
        image=rendered.envoy_image,
        command=["envoy"],
        args=[
            "--config-path",
            f"{rendered.config_dir}/{rendered.envoy_config_file}",
            "--concurrency",
            str(envoy_concurrency(config.workers)),
            "--log-level",
            "info",
        ],
        ports=[
            k8s.core.v1.ContainerPortArgs(name="http", container_port=rendered.listener_port, protocol="TCP"),
            k8s.core.v1.ContainerPortArgs(name="stats", container_port=rendered.stats_port, protocol="TCP"),
        ],
        resources=envoy_resources(config.workers),
        readiness_probe=k8s.core.v1.ProbeArgs(
            http_get=k8s.core.v1.HTTPGetActionArgs(path="/ready", port="stats"),
            period_seconds=5,
            timeout_seconds=2,
            failure_threshold=2,
        ),
        liveness_probe=_tcp_liveness("stats"),
        lifecycle=_pre_stop_sleep(),
        volume_mounts=mounts,
        security_context=ms.container_security(non_root=True, uid=RUN_AS_USER),
    )


def _processor(rendered: RenderedGateway, config: ProcessorConfig, mounted: _Mounted) -> k8s.core.v1.ContainerArgs:
    """The processor: its config, the fetched tokenizers, the Redis URL and CA where given, and its metrics port."""
    mounts = [
        k8s.core.v1.VolumeMountArgs(name="config", mount_path=rendered.config_dir, read_only=True),
        k8s.core.v1.VolumeMountArgs(name="tokenizers", mount_path=rendered.tokenizers_dir, read_only=True),
        k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
    ]
    if mounted.redis_url is not None:  # a file, not an environment variable: the URL may carry a password
        mounts.append(k8s.core.v1.VolumeMountArgs(name="redis-url", mount_path=rendered.redis_url_dir, read_only=True))
    if mounted.redis_ca is not None:
        _, ca_dir = mounted.redis_ca
        mounts.append(k8s.core.v1.VolumeMountArgs(name="redis-ca", mount_path=ca_dir, read_only=True))
    return k8s.core.v1.ContainerArgs(
        name="processor",
        image=rendered.processor_image,
        args=["--config", f"{rendered.config_dir}/{rendered.processor_config_file}"],
        ports=[
            k8s.core.v1.ContainerPortArgs(
                name="processor-metrics", container_port=rendered.processor_metrics_port, protocol="TCP"
            )
        ],
        resources=processor_resources(config.workers),
        # Envoy refuses requests (500) while its processor is away (failure_mode_allow: false), so the pod is
        # ready only once the processor serves too; its gRPC port is loopback-only, its metrics port is not, and
        # both open at start. Liveness restarts a processor that no longer accepts connections at all.
        readiness_probe=k8s.core.v1.ProbeArgs(
            tcp_socket=k8s.core.v1.TCPSocketActionArgs(port="processor-metrics"),
            period_seconds=5,
            timeout_seconds=2,
            failure_threshold=2,
        ),
        liveness_probe=_tcp_liveness("processor-metrics"),
        lifecycle=_pre_stop_sleep(),
        volume_mounts=mounts,
        security_context=ms.container_security(non_root=True, uid=RUN_AS_USER),
    )


def _service(
    name: str, args: GatewayArgs, selector: Mapping[str, str], labels: Mapping[str, str], opts: pulumi.ResourceOptions
) -> k8s.core.v1.Service:
    """The Service in front of the pods: cluster-internal in dev, an internal load balancer elsewhere."""
    lb = LOAD_BALANCER[args.environment]
    lb_annotations = (
        {} if lb == "none" else AWS_INTERNAL_LB_ANNOTATIONS if args.cloud == "aws" else GKE_INTERNAL_LB_ANNOTATIONS
    )
    return k8s.core.v1.Service(
        f"{name}-service",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=name, namespace=args.namespace, labels=labels, annotations=lb_annotations or None
        ),
        spec=k8s.core.v1.ServiceSpecArgs(
            type="ClusterIP" if lb == "none" else "LoadBalancer",
            selector=selector,
            ports=[k8s.core.v1.ServicePortArgs(name="http", port=80, target_port="http", protocol="TCP")],
            # Keep the caller's address (Envoy's access log and per-client limits see it) and skip a node hop.
            external_traffic_policy=None if lb == "none" else "Local",
        ),
        opts=opts,
    )


def _pod_monitor(
    name: str, args: GatewayArgs, selector: Mapping[str, str], labels: Mapping[str, str], opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    """Prometheus scrapes Envoy's stats and the processor's metrics."""
    return k8s.apiextensions.CustomResource(
        f"{name}-monitor",
        api_version="monitoring.coreos.com/v1",
        kind="PodMonitor",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=args.namespace, labels={**labels, **SCRAPE_LABELS}),
        spec={
            "selector": {"matchLabels": selector},
            "podMetricsEndpoints": [
                {"port": "stats", "path": "/stats/prometheus", "interval": f"{args.scrape_interval_seconds}s"},
                {"port": "processor-metrics", "path": "/metrics", "interval": f"{args.scrape_interval_seconds}s"},
            ],
        },
        opts=opts,
    )


def _rules_and_dashboard(
    name: str, args: GatewayArgs, config: ProcessorConfig, labels: Mapping[str, str], opts: pulumi.ResourceOptions
) -> None:
    """The gateway's alerts (a PrometheusRule) and, unless turned off, its Grafana dashboard."""
    series = pulumi.Output.from_input(args.namespace).apply(lambda namespace: GatewaySeries(name, namespace))
    k8s.apiextensions.CustomResource(
        f"{name}-rules",
        api_version="monitoring.coreos.com/v1",
        kind="PrometheusRule",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=f"{name}-rules", namespace=args.namespace, labels={**labels, **SCRAPE_LABELS}
        ),
        spec=series.apply(lambda s: render_rules(s, config)),
        opts=opts,
    )
    if args.dashboard:
        costs = dict(args.model_costs)
        k8s.core.v1.ConfigMap(
            f"{name}-dashboard",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"{name}-dashboard", namespace=args.namespace, labels={**labels, **DASHBOARD_SIDECAR_LABELS}
            ),
            data=series.apply(
                lambda s: {
                    f"inferplane-{name}.json": gateway_dashboard(
                        s,
                        costs,
                        cache=config.cache is not None,
                        difficulty=any(t.route for t in config.tiers),
                        providers=bool(config.providers),
                    ).to_json()
                }
            ),
            opts=opts,
        )


def _tcp_liveness(port: str) -> k8s.core.v1.ProbeArgs:
    """Restart a container whose port stops accepting connections for 30 s."""
    return k8s.core.v1.ProbeArgs(
        tcp_socket=k8s.core.v1.TCPSocketActionArgs(port=port), period_seconds=10, timeout_seconds=3, failure_threshold=3
    )


def _pre_stop_sleep() -> k8s.core.v1.LifecycleArgs:
    """Keep serving while endpoints and the load balancer stop sending new requests to a terminating pod."""
    return k8s.core.v1.LifecycleArgs(
        pre_stop=k8s.core.v1.LifecycleHandlerArgs(sleep=k8s.core.v1.SleepActionArgs(seconds=ms.PRE_STOP_SLEEP_SECONDS))
    )


def _tokenizer_fetch(model_cache_uri: pulumi.Input[str], files: tuple[str, ...]) -> k8s.core.v1.ContainerArgs:
    """``aws s3 sync`` of exactly the models' tokenizer files from the model cache into the tokenizers volume."""
    fetch = ms.s3_sync_container("fetch-tokenizers", model_cache_uri, ms.MODELS_MOUNT, "tokenizers", include=files)
    return k8s.core.v1.ContainerArgs(
        name=fetch.name,
        image=fetch.image,
        command=fetch.command,
        args=fetch.args,
        env=fetch.env,
        volume_mounts=fetch.volume_mounts,
        resources=FETCH_RESOURCES,
        security_context=ms.container_security(non_root=True, uid=RUN_AS_USER),
    )


def _hub_tokenizer_fetch(image: str, tokenizers_dir: str, files: tuple[str, ...]) -> k8s.core.v1.ContainerArgs:
    """The processor's own image running :mod:`inferplane.processor.tokenizer_fetch`: the models' tokenizer files
    from the Hugging Face Hub into the tokenizers volume, the token read from the mounted Secret."""
    token_mount, token_env = ms.hf_token_file()
    return k8s.core.v1.ContainerArgs(
        name="fetch-tokenizers",
        image=image,
        command=["python", "-m", "inferplane.processor.tokenizer_fetch"],
        args=["--dest", tokenizers_dir, *files],
        env=[k8s.core.v1.EnvVarArgs(name="HOME", value="/tmp"), token_env],
        volume_mounts=[
            k8s.core.v1.VolumeMountArgs(name="tokenizers", mount_path=tokenizers_dir),
            k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
            token_mount,
        ],
        resources=FETCH_RESOURCES,
        security_context=ms.container_security(non_root=True, uid=RUN_AS_USER),
    )


def _spread(selector: Mapping[str, str], *, zones: bool) -> list[k8s.core.v1.TopologySpreadConstraintArgs]:
    """Replicas on different nodes where possible; in prod also evenly over zones (a zone outage takes its share)."""
    constraints = [
        k8s.core.v1.TopologySpreadConstraintArgs(
            max_skew=1,
            topology_key="kubernetes.io/hostname",
            when_unsatisfiable="ScheduleAnyway",
            label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(selector)),
        )
    ]
    if zones:
        constraints += ms.zone_spread(selector)
    return constraints


def scaled_object_spec(
    name: str, *, namespace: str, prometheus_url: str, min_replicas: int, max_replicas: int, polling_interval: int
) -> dict[str, Any]:
    """The gateway's ScaledObject: one Prometheus trigger on requests in flight, scale-down after five quiet minutes."""
    return {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "pollingInterval": polling_interval,
        "cooldownPeriod": 300,
        "minReplicaCount": min_replicas,
        "maxReplicaCount": max_replicas,
        "fallback": {"failureThreshold": 3, "replicas": min_replicas, "behavior": "currentReplicasIfHigher"},
        "advanced": {
            "horizontalPodAutoscalerConfig": {
                "behavior": {
                    "scaleDown": {
                        "stabilizationWindowSeconds": 300,
                        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                    }
                }
            }
        },
        "triggers": [
            {
                "type": "prometheus",
                "name": "inflight",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": prometheus_url,
                    "query": GatewaySeries(name, namespace).inflight(),
                    "threshold": str(TARGET_INFLIGHT_PER_REPLICA),
                    "ignoreNullValues": "true",
                },
            }
        ],
    }


def _network_policy(
    name: str,
    *,
    args: GatewayArgs,
    rendered: RenderedGateway,
    config: ProcessorConfig,
    selector: Mapping[str, str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> k8s.networking.v1.NetworkPolicy:
    """What the gateway pods may receive and send; everything else stays denied (the serving namespace denies all
    traffic by default, so this policy grants exactly what the gateway needs).

    Ingress: anyone on the API port (authentication is Envoy's job; the load balancer keeps callers in the VPC),
    Prometheus on the metrics ports. Egress: the model servers' API ports (read from the processor config's
    upstream URLs), DNS to the cluster DNS pods only (:func:`components.serving.network_policy.dns_egress_rule`, the
    rule the serving namespace's ``dns`` policy uses, so neither is looser than the other), Redis/Valkey when one is
    configured (its address is only known after deploy; its security group admits the cluster's nodes only;
    Memorystore is reachable only from its peered network), and HTTPS for the tokenizer fetch from S3 or the Hugging
    Face Hub when either is given.
    """
    return k8s.networking.v1.NetworkPolicy(
        f"{name}-netpol",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=args.namespace, labels=dict(labels)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(selector)),
            policy_types=["Ingress", "Egress"],
            ingress=[
                k8s.networking.v1.NetworkPolicyIngressRuleArgs(ports=_tcp_ports(rendered.listener_port)),
                k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=[
                        k8s.networking.v1.NetworkPolicyPeerArgs(
                            namespace_selector=k8s.meta.v1.LabelSelectorArgs(
                                match_labels={"kubernetes.io/metadata.name": args.monitoring_namespace}
                            )
                        )
                    ],
                    ports=_tcp_ports(rendered.stats_port, rendered.processor_metrics_port),
                ),
            ],
            egress=_egress(args, config),
        ),
        opts=opts,
    )


def _embedder(name: str, args: GatewayArgs, opts: pulumi.ResourceOptions) -> EmbedderService | None:
    """The semantic cache's served embedder beside the gateway, when the stack asks for one."""
    if args.embedder is None:
        return None
    return EmbedderService(
        f"{name}-embedder",
        EmbedderServiceArgs(
            sizing=args.embedder,
            namespace=args.namespace,
            node_selector=args.node_selector,
            environment=args.environment,
            scrape_interval_seconds=args.scrape_interval_seconds,
            monitoring_namespace=args.monitoring_namespace,
            image_digest=args.embedder_image_digest,
            labels=args.labels,
        ),
        opts=opts,
    )


def _tcp_ports(*numbers: int) -> list[k8s.networking.v1.NetworkPolicyPortArgs]:
    return [k8s.networking.v1.NetworkPolicyPortArgs(port=n, protocol="TCP") for n in numbers]


def _egress(args: GatewayArgs, config: ProcessorConfig) -> list[k8s.networking.v1.NetworkPolicyEgressRuleArgs]:
    """Where the gateway pods may connect (see :func:`_network_policy`): the model servers' API ports, DNS, and
    Redis, HTTPS and the semantic cache's embedder where used."""
    upstream_ports = sorted({int(e.rpartition(":")[2]) for m in config.models for e in m.endpoints})
    egress = [
        k8s.networking.v1.NetworkPolicyEgressRuleArgs(
            to=[
                k8s.networking.v1.NetworkPolicyPeerArgs(
                    pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={COMPONENT_LABEL: MODEL_SERVER})
                )
            ],
            ports=_tcp_ports(*upstream_ports),
        ),
        dns_egress_rule(),
    ]
    if args.redis_url is not None:
        egress.append(k8s.networking.v1.NetworkPolicyEgressRuleArgs(ports=_tcp_ports(args.redis_port)))
    # HTTPS to any address, for the tokenizers' source and for hosted providers (a core NetworkPolicy names no
    # host; docs/gateway.md says what can: an egress gateway or the CNI's FQDN policies). None without either.
    anywhere = set(args.rendered.provider_ports)
    if args.model_cache_uri is not None or args.hf_token_secret_name is not None:
        anywhere.add(443)
    if anywhere:
        egress.append(k8s.networking.v1.NetworkPolicyEgressRuleArgs(ports=_tcp_ports(*sorted(anywhere))))
    embedder = config.cache.embedder if config.cache is not None and config.cache.semantic else None
    if embedder is not None and embedder.kind == "endpoint":
        if embedder.url == _served_embedder_url(args.namespace):
            # The served embedder beside the gateway: its pods only (in the gateway's namespace, the policy's own).
            to = [
                k8s.networking.v1.NetworkPolicyPeerArgs(
                    pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={COMPONENT_LABEL: CACHE_EMBEDDER})
                )
            ]
            egress.append(k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=to, ports=_tcp_ports(CACHE_EMBEDDER_PORT)))
        else:
            # An embedder the stack runs elsewhere, named by URL only: its port, wherever it is.
            egress.append(k8s.networking.v1.NetworkPolicyEgressRuleArgs(ports=_tcp_ports(_url_port(embedder.url))))
    return egress


def _url_port(url: str) -> int:
    """The TCP port of an ``http(s)://`` URL: its own, else the scheme's."""
    parsed = urllib.parse.urlsplit(url)
    return parsed.port or (443 if parsed.scheme == "https" else 80)
