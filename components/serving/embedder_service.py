"""``EmbedderService``: the semantic cache's sentence-embedding model, served by vLLM's pooling runner on CPU.

The gateway's processor embeds every cacheable prompt over the OpenAI embeddings API (``/v1/embeddings``) of this
server, with its own bound (``cache.embedder.timeout_ms``): a slow or missing embedder costs a request its semantic
lookup, never an error. Children, named from the component's name: a ServiceAccount without an API token, the
Deployment on the system nodes' CPUs, its headless Service (:data:`naming.CACHE_EMBEDDER_SERVICE`, what the
processor calls: it resolves to every ready pod and the processor balances each request over them, where a ClusterIP
would pin each keep-alive connection to one pod), a HorizontalPodAutoscaler on CPU between the sized floor and
ceiling, a PodDisruptionBudget when it runs more than one pod, a PodMonitor for vLLM's ``/metrics``, and a
NetworkPolicy: only the gateway's pods reach the API, only Prometheus the metrics, and the pods may fetch their
weights over HTTPS and nothing else. ``tests/serving/test_embedder_service.py`` checks the argument list against the
pinned vLLM's own definitions, and the gateway's E2E runs exactly this argument list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.capacity.embedder import EmbedderSizing
from inferplane.components.catalog.images import image_reference
from inferplane.components.serving import model_server as ms
from inferplane.components.serving.annotations import CACHE_EMBEDDER, COMPONENT_LABEL, NAME_LABEL
from inferplane.components.serving.naming import (
    CACHE_EMBEDDER_PORT,
    CACHE_EMBEDDER_SERVICE,
    MONITORING_NAMESPACE,
    VLLM_HEALTH_PATH,
    cache_embedder_url,
)
from inferplane.components.serving.network_policy import gateway_peer, https_egress_rule, prometheus_peer
from inferplane.components.spec.platform_spec import Environment

EMBEDDER_COMMAND = ("vllm", "serve")
"""Set explicitly, as for the GPU image: the CPU image's entrypoint has changed between releases."""

EMBEDDER_CONTAINER = "embedder"

SHUTDOWN_SECONDS = 5
"""An embedding takes milliseconds: five seconds drain whatever is in flight when a pod stops."""


def embedder_args(
    sizing: EmbedderSizing, *, model: str | None = None, host: str = "0.0.0.0", port: int = CACHE_EMBEDDER_PORT
) -> list[str]:
    """``vllm serve`` of the embedding model with the pooling runner (``/v1/embeddings``).

    ``model``: where the weights are (default: the Hugging Face repository, fetched into ``HF_HOME``; a local run
    passes a directory, its own ``host`` and ``port``). ``--enforce-eager`` runs the model without torch.compile:
    the catalog's start time, threshold and latency were measured that way, and compiling was never measured here.
    """
    return [
        model or sizing.hf_repo,
        "--runner",
        "pooling",
        "--served-model-name",
        sizing.model,
        "--max-model-len",
        str(sizing.max_model_len),
        # An encoder keeps no KV cache. Saying so also stops vLLM's CPU worker from first requiring
        # --gpu-memory-utilization (0.92) of the node's memory to be free, which fails on a shared node
        # (vllm/v1/worker/cpu_worker.py of 0.32: the check runs only while kv_cache_memory_bytes is unset).
        "--kv-cache-memory-bytes",
        "0",
        # The checkpoint's own precision. vLLM otherwise downcasts a float32 model to float16 on CPU (its log:
        # "Downcasting torch.float32 to torch.float16"), which x86 cores without AVX512-FP16 compute slowly (Ice Lake
        # and older Xeons, AMD EPYC: the catalog's m6i and m5 system nodes, GKE's e2; on Sapphire Rapids, m7i, the
        # precision changed nothing measurable, docs/caching.md): 640 prompts of the shipped pairs took
        # 12.1-14.4 s in float16 and 2.0-2.3 s in float32 on this project's 2-core test machine (one thread, Ice
        # Lake-class Xeon), and the vectors differ by at most 6e-4 in cosine (docs/caching.md).
        "--dtype",
        "float32",
        "--enforce-eager",
        "--host",
        host,  # in a pod, its own interfaces; the Service is headless and internal
        "--port",
        str(port),
        "--shutdown-timeout",
        str(SHUTDOWN_SECONDS),
    ]


IN_PROCESS_WORKER_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""Run the model in the engine core's process (vLLM's ``uni`` executor) instead of a worker process beside it.

vLLM 0.32 on CPU otherwise starts a worker process (vllm/platforms/cpu.py switches ``uni`` to ``mp`` unless this is
0) and passes every step between the two through a shared-memory queue whose reader spins on ``sched_yield`` for a
second after each read (vllm/distributed/device_communicators/shm_broadcast.py, ``SpinCondition``, ``busy_loop_s=1``,
no setting): the engine core spins while the worker computes, the worker between steps. Measured by
``benchmarks/embedder_process.py`` on this 2-core machine with this module's arguments and environment (one OpenMP
thread), 2026-12-06: at a steady 2 embeddings a second the pod used 105% of a core with the worker process and 7%
without; 400 embeddings one at a time 58 vs 64 a second at 192% vs 98% of a core, eight at a time 114 vs 173 a
second at 193% vs 131%; resident 2,118 vs 1,549 MiB; started in 23.5 vs 20.7 s (an earlier run: 105% vs 6%, 59 vs
57 and 141 vs 153 a second). The spin would be the HorizontalPodAutoscaler's signal (CPU against a one-core request:
any steady trickle reads over 100% and scales the embedder to its ceiling) and CPU taken from the gateway's pods on
the same system nodes. vLLM's reason for ``mp``
on CPU is that the worker sets OpenMP's environment before torch starts; here :func:`embedder_env` sets it for the
whole container, binding no core."""


def embedder_env(sizing: EmbedderSizing) -> dict[str, str]:
    """The engine's environment: as many OpenMP threads as requested cores, none pinned to a core (the system nodes
    are shared and the kubelet's CPU quota, not a cpuset, bounds the pod), the model computed in the engine core's
    process (:data:`IN_PROCESS_WORKER_ENV`), no usage reports."""
    return {
        "OMP_NUM_THREADS": str(sizing.cpus),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        **IN_PROCESS_WORKER_ENV,
        "VLLM_NO_USAGE_STATS": "1",
    }


@dataclass(frozen=True)
class EmbedderServiceArgs:
    """Inputs of :class:`EmbedderService`."""

    sizing: EmbedderSizing
    """What each pod asks for and how many run (:func:`components.capacity.embedder.size_embedder`)."""
    namespace: pulumi.Input[str]
    """Namespace of every object: the gateway's (the serving namespace)."""
    node_selector: Mapping[str, pulumi.Input[str]]
    """The system nodes' label, where the gateway runs too."""
    environment: Environment
    """``prod`` spreads the pods over zones."""
    scrape_interval_seconds: int = 15
    """PodMonitor scrape interval."""
    monitoring_namespace: str = MONITORING_NAMESPACE
    """Namespace of the Prometheus admitted to ``/metrics``."""
    image_digest: str | None = None
    """Pinned ``sha256:`` digest of the ``vllm-cpu`` image; wins over the catalog's tag."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Stack tags, added to every object's labels."""


class EmbedderService(pulumi.ComponentResource):
    """The semantic cache's embedder: vLLM's pooling runner on CPU, reachable from the gateway's pods only.

    Pods: read-only root filesystem (weights, ``$HOME`` and ``/tmp`` are ``emptyDir`` volumes), every capability
    dropped, RuntimeDefault seccomp, uid :data:`model_server.RUN_AS_USER`; memory request equal to the limit, no CPU
    limit (throttling would stretch every embedding). Outputs: ``service_name``, ``url``.
    """

    service_name: pulumi.Output[str]
    url: pulumi.Output[str]
    """``http://<service>.<namespace>.svc.cluster.local:<port>/v1`` (:func:`naming.cache_embedder_url` of the
    namespace): the processor's ``cache.embedder.url``."""

    def __init__(self, name: str, args: EmbedderServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        _validate(args)  # before registering anything: bad input declares nothing
        super().__init__("inferplane:index:EmbedderService", name, None, opts)
        selector = {NAME_LABEL: CACHE_EMBEDDER_SERVICE, COMPONENT_LABEL: CACHE_EMBEDDER}
        labels = {**args.labels, **selector, "app.kubernetes.io/part-of": "inferplane"}
        child = pulumi.ResourceOptions(parent=self)
        meta = k8s.meta.v1.ObjectMetaArgs(name=CACHE_EMBEDDER_SERVICE, namespace=args.namespace, labels=labels)

        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=meta, automount_service_account_token=False, opts=child
        )
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=meta,
            spec=_deployment_spec(args, account, selector, labels),
            # The autoscaler owns the replica count once it exists; Pulumi sets only the first one.
            opts=pulumi.ResourceOptions(
                parent=self,
                ignore_changes=["spec.replicas"],
                custom_timeouts=ms.rollout_timeouts(args.sizing.start_seconds),
            ),
        )
        service = _service(name, meta, selector, child)
        _autoscaler(name, args, meta, deployment, child)
        _availability_and_monitoring(name, args, selector, labels, child)
        _network_policy(name, args, selector, labels, child)
        self.service_name = service.metadata.name
        # One builder of the URL, the one the gateway checks its processor config against; it resolves once the
        # Service is registered (the Service is named CACHE_EMBEDDER_SERVICE, as the URL says).
        self.url = pulumi.Output.all(service.metadata.name, args.namespace).apply(
            lambda values: cache_embedder_url(values[1])
        )
        self.register_outputs({"serviceName": self.service_name, "url": self.url})


def _service(
    name: str, meta: k8s.meta.v1.ObjectMetaArgs, selector: Mapping[str, str], opts: pulumi.ResourceOptions
) -> k8s.core.v1.Service:
    """The headless Service the processor calls (:data:`naming.CACHE_EMBEDDER_SERVICE`): its name resolves to the
    ready pods' addresses, over which the processor balances each request (``processor/cache/embedders.py``)."""
    return k8s.core.v1.Service(
        f"{name}-service",
        metadata=meta,
        spec=k8s.core.v1.ServiceSpecArgs(
            type="ClusterIP",
            cluster_ip="None",
            selector=dict(selector),
            ports=[
                k8s.core.v1.ServicePortArgs(name="http", port=CACHE_EMBEDDER_PORT, target_port="http", protocol="TCP")
            ],
        ),
        opts=opts,
    )


def _autoscaler(
    name: str,
    args: EmbedderServiceArgs,
    meta: k8s.meta.v1.ObjectMetaArgs,
    deployment: k8s.apps.v1.Deployment,
    opts: pulumi.ResourceOptions,
) -> k8s.autoscaling.v2.HorizontalPodAutoscaler:
    """Pods between the sized floor and ceiling, added above the sized CPU use. CPU is a CPU encoder's load (the
    model servers scale on queue depth instead, through KEDA); scaling down waits Kubernetes' default five minutes."""
    sizing = args.sizing
    return k8s.autoscaling.v2.HorizontalPodAutoscaler(
        f"{name}-autoscaler",
        metadata=meta,
        spec=k8s.autoscaling.v2.HorizontalPodAutoscalerSpecArgs(
            scale_target_ref=k8s.autoscaling.v2.CrossVersionObjectReferenceArgs(
                api_version="apps/v1", kind="Deployment", name=deployment.metadata.name
            ),
            min_replicas=sizing.replicas,
            max_replicas=sizing.max_replicas,
            metrics=[
                k8s.autoscaling.v2.MetricSpecArgs(
                    type="Resource",
                    resource=k8s.autoscaling.v2.ResourceMetricSourceArgs(
                        name="cpu",
                        target=k8s.autoscaling.v2.MetricTargetArgs(
                            type="Utilization", average_utilization=sizing.target_cpu_utilization
                        ),
                    ),
                )
            ],
        ),
        opts=opts,
    )


def _availability_and_monitoring(
    name: str,
    args: EmbedderServiceArgs,
    selector: Mapping[str, str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> None:
    """One pod drained at a time when there may be several, and Prometheus scraping vLLM's ``/metrics``."""
    if args.sizing.max_replicas > 1:
        ms.disruption_budget(f"{name}-pdb", args.namespace, selector, labels, opts)
    ms.pod_monitor(
        f"{name}-monitor",
        args.namespace,
        selector,
        "http",
        labels=labels,
        interval_seconds=args.scrape_interval_seconds,
        opts=opts,
    )


def _deployment_spec(
    args: EmbedderServiceArgs,
    account: k8s.core.v1.ServiceAccount,
    selector: Mapping[str, str],
    labels: Mapping[str, str],
) -> k8s.apps.v1.DeploymentSpecArgs:
    """Surge-first rollouts (a new pod is ready before an old one goes), the pods spread over zones in prod."""
    sizing = args.sizing
    pod = k8s.core.v1.PodSpecArgs(
        service_account_name=account.metadata.name,
        automount_service_account_token=False,
        enable_service_links=False,
        node_selector=dict(args.node_selector),
        topology_spread_constraints=ms.zone_spread(selector) if args.environment == "prod" else None,
        termination_grace_period_seconds=ms.PRE_STOP_SLEEP_SECONDS + SHUTDOWN_SECONDS + 15,
        security_context=ms.pod_security(non_root=True),
        containers=[_container(args)],
        volumes=[
            ms.disk_volume("models", sizing.weights_bytes * 2 + ms.GIB),
            ms.disk_volume("home", ms.GIB),
            ms.disk_volume("tmp", ms.GIB),
        ],
    )
    return k8s.apps.v1.DeploymentSpecArgs(
        replicas=sizing.replicas,
        selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(selector)),
        strategy=k8s.apps.v1.DeploymentStrategyArgs(
            type="RollingUpdate",
            rolling_update=k8s.apps.v1.RollingUpdateDeploymentArgs(max_surge=1, max_unavailable=0),
        ),
        progress_deadline_seconds=ms.progress_deadline_seconds(sizing.start_seconds),
        template=k8s.core.v1.PodTemplateSpecArgs(metadata=k8s.meta.v1.ObjectMetaArgs(labels=dict(labels)), spec=pod),
    )


def _container(args: EmbedderServiceArgs) -> k8s.core.v1.ContainerArgs:
    """``vllm serve --runner pooling`` with its probes and a memory request equal to its limit."""
    sizing = args.sizing
    startup, readiness, liveness = ms.probes(VLLM_HEALTH_PATH, "http", sizing.start_seconds)
    memory = f"{sizing.memory_bytes // ms.MIB}Mi"
    env = {
        "HOME": ms.HOME_MOUNT,
        "HF_HOME": f"{ms.MODELS_MOUNT}/.hf",
        **embedder_env(sizing),
    }
    return k8s.core.v1.ContainerArgs(
        name=EMBEDDER_CONTAINER,
        image=image_reference("vllm-cpu", {"vllm-cpu": args.image_digest} if args.image_digest else None),
        command=list(EMBEDDER_COMMAND),
        args=embedder_args(sizing),
        ports=[k8s.core.v1.ContainerPortArgs(name="http", container_port=CACHE_EMBEDDER_PORT, protocol="TCP")],
        env=[ms.user_env(), *(k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in env.items())],
        resources=k8s.core.v1.ResourceRequirementsArgs(
            requests={"cpu": str(sizing.cpus), "memory": memory}, limits={"memory": memory}
        ),
        startup_probe=startup,
        readiness_probe=readiness,
        liveness_probe=liveness,
        lifecycle=ms.pre_stop_sleep(),
        volume_mounts=[
            k8s.core.v1.VolumeMountArgs(name="models", mount_path=ms.MODELS_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="home", mount_path=ms.HOME_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
        ],
        security_context=ms.container_security(non_root=True),
    )


def _network_policy(
    name: str,
    args: EmbedderServiceArgs,
    selector: Mapping[str, str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> k8s.networking.v1.NetworkPolicy:
    """The gateway's pods on the API, Prometheus on ``/metrics`` (the same port), HTTPS out for the weights. The
    namespace's own policies deny the rest and allow DNS (:class:`network_policy.ServingNetworkPolicy`)."""
    port = [k8s.networking.v1.NetworkPolicyPortArgs(port=CACHE_EMBEDDER_PORT, protocol="TCP")]
    return k8s.networking.v1.NetworkPolicy(
        f"{name}-network-policy",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=CACHE_EMBEDDER_SERVICE, namespace=args.namespace, labels=dict(labels)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(selector)),
            policy_types=["Ingress", "Egress"],
            ingress=[
                k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                    from_=[gateway_peer(), prometheus_peer(args.monitoring_namespace)], ports=port
                )
            ],
            egress=[https_egress_rule()],
        ),
        opts=opts,
    )


def _validate(args: EmbedderServiceArgs) -> None:
    """Refuse inputs that cannot serve, naming the field; nothing is created when any check fails."""
    errors: list[pulumi.errors.InputPropertyErrorDetails] = []
    if not args.node_selector:
        errors.append({"property_path": "node_selector", "reason": "name the system nodes the embedder runs on"})
    if args.scrape_interval_seconds <= 0:
        errors.append({"property_path": "scrape_interval_seconds", "reason": "must be positive"})
    if args.sizing.replicas < 1:
        errors.append({"property_path": "sizing.replicas", "reason": "must be at least 1"})
    if errors:
        raise pulumi.InputPropertiesError("invalid EmbedderService arguments", errors=errors)
