"""What every model server shares: placement, fitted resources, probes from sizing, pod security, weights cache.

``VllmService``, ``TritonTrtLlmService`` and ``SglangService`` are built here, each engine supplying only what is its
own (:class:`ServerProcess`: image, command, arguments, ports, health path; Triton also its model repository and engine
build): :meth:`ModelServer._serve` makes the Deployment, the Services, the PodDisruptionBudget and the PodMonitor,
:func:`server_container` the server container, :func:`checkpoint_server_pod` the whole pod of an engine that loads a
Hugging Face checkpoint itself. So the engines agree on how a replica lands on its pool, how much of the node it may
take, how long it may take to start and how it is locked down. Nothing here recomputes an engine setting: those come
from :mod:`components.capacity.sizing`.

Model weights (decision, see README "Model servers"): an S3 model bucket, synced by an init container onto the
node's local NVMe (the instance store backs the kubelet's ephemeral storage, so an ``emptyDir`` lives on it), is
the primary source; the Hugging Face hub is the fallback when no bucket is configured. ``emptyDir`` rather than a
``hostPath`` keeps the pods inside the Pod Security "restricted" profile (``hostPath`` is refused even by
"baseline"); the price is one S3 sync per new pod, which sizing already counts in ``cold_start_seconds`` (S3 at
1 GB/s in-region), while container restarts keep the directory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.capacity.host_memory import replica_host_share
from inferplane.components.capacity.kv_transfer import efa_interfaces_per_replica
from inferplane.components.capacity.sizing import DeploymentSizing
from inferplane.components.catalog import ACCELERATORS, Accelerator, InstanceType, get_instance_type
from inferplane.components.catalog.images import image_reference
from inferplane.components.serving.annotations import (
    COMPONENT_LABEL,
    MODEL_SERVER,
    NAME_LABEL,
    SCRAPE_LABELS,
    SERVED_MODEL_LABEL,
    serving_annotations,
)
from inferplane.components.serving.naming import model_endpoints_service_name, model_service_name
from inferplane.components.spec.platform_spec import Engine, Environment, ModelDeploymentSpec
from inferplane.components.spec.scheduling import (
    EFA_RESOURCE,
    GKE_TPU_ACCELERATOR_LABEL,
    GKE_TPU_TOPOLOGY_LABEL,
    GKE_TPU_V5E_ACCELERATOR,
    GPU_TAINT,
    NVIDIA_GPU_RESOURCE,
    POOL_LABEL,
    TPU_RESOURCE,
    TPU_TAINT,
)

GIB = 1024**3
MIB = 1024**2

AWS_CLI_IMAGE = image_reference("aws-cli")
"""Syncs weights and engines between S3 and node-local disk (catalog ``aws-cli``, unpinned; entrypoint ``aws``)."""

HF_TOKEN_SECRET_KEY = "token"
"""Key of the Hugging Face token inside the Kubernetes Secret the composition creates."""


MODELS_MOUNT = "/models"
"""Node-local weights (and engines); an ``emptyDir`` on the instance-store NVMe."""

HOME_MOUNT = "/home/inferplane"
"""Writable home for non-root engines: vLLM, torch.compile, Triton-lang and FlashInfer caches live under ``$HOME``."""

RUN_AS_USER = 65532
"""Numeric non-root uid (and gid, and ``fsGroup``): the vLLM, Triton and AWS CLI images declare no ``USER`` (they
run as root by default), so ``runAsNonRoot`` needs an explicit numeric uid. A high uid that no image's
``/etc/passwd`` maps (65532, the ``nonroot`` uid of distroless images; Checkov CKV_K8S_40 asks for >= 10000) cannot
coincide with a host account if a container ever escaped. Every path the engines write is a mounted volume, so the
root filesystem is read-only (:func:`container_security`)."""

RUN_AS_USER_NAME = "inferplane"
"""``USER`` for the uid above, which has no ``/etc/passwd`` entry: Python's ``getpass.getuser()`` reads ``USER``
first and raises without it (torch.compile names its cache directory after the user)."""

HF_TOKEN_VOLUME = "hf-token"
HF_TOKEN_DIR = "/var/run/secrets/huggingface"
"""Where the Hugging Face token Secret is mounted, read-only; ``HF_TOKEN_PATH`` points huggingface_hub at the file
(``huggingface_hub.constants.HF_TOKEN_PATH`` reads that variable), so the token never sits in the environment,
where ``/proc/<pid>/environ``, crash dumps and ``kubectl describe`` of a pod spec would show it."""

STARTUP_PERIOD_SECONDS = 10
STARTUP_BUDGET_FACTOR = 1.5
STARTUP_BUDGET_MARGIN_SECONDS = 60
"""The startup probe allows 1.5 x sizing's ``engine_start_seconds`` + 60 s. The estimate divides the weights by an
average 2 GB/s load rate and adds a fixed warm-up; a slow NVMe, a cold page cache or a longer CUDA-graph capture
stretches both, and a probe that fires early restarts the load from scratch (the crash loop this prevents).
Init containers (the S3 sync) run before probes start, so the fetch is not part of this budget."""

PRE_STOP_SLEEP_SECONDS = 15
"""Endpoints and the gateway stop routing to a terminating pod asynchronously; sleeping first avoids new requests
arriving after the engine began to shut down."""

MIN_DRAIN_SECONDS = 30
MAX_DRAIN_SECONDS = 300
"""In-flight requests get the time one full-length generation takes at sizing's decode step, within bounds."""

WEIGHTS_DISK_FACTOR = 1.15
SCRATCH_DISK_BYTES = 20 * GIB
"""The weights ``emptyDir`` holds the checkpoint plus tokenizer and config files; scratch covers caches and logs."""


@dataclass(frozen=True)
class ModelServerArgs:
    """What every engine's ``...ServiceArgs`` starts with: the deployment, its sizing, where its objects go and the
    Secret holding the Hugging Face token. Each engine's args add their own fields after these."""

    deployment: ModelDeploymentSpec
    """The model deployment from the platform spec (served model name, speculative decoding, replicas)."""
    sizing: DeploymentSizing
    """Sizing's verdict for this deployment: every engine setting, the pool, cold-start estimates."""
    environment: Environment
    """``prod`` spreads replicas over zones."""
    namespace: pulumi.Input[str]
    """Namespace of every object (the composition creates it)."""
    hf_token_secret_name: pulumi.Input[str]
    """Kubernetes Secret holding the Hugging Face token under :data:`HF_TOKEN_SECRET_KEY` (read where the hub is:
    the weights without a model cache, Triton's engine build)."""


def ceil_to(value: float, step: int) -> int:
    """``value`` rounded up to a multiple of ``step``."""
    return int(math.ceil(value / step) * step)


@dataclass(frozen=True)
class Placement:
    """Where a deployment's replicas run: its pool, node type and accelerator (from the catalog)."""

    pool: str
    instance: InstanceType
    accelerator: Accelerator
    tpu_topology: str | None

    @property
    def is_tpu(self) -> bool:
        """TPU pools are GKE node pools with Google's labels and taint."""
        return self.accelerator.vendor == "google"

    @staticmethod
    def of(sizing: DeploymentSizing, tpu_topology: str | None) -> Placement:
        """The placement sizing chose for one deployment."""
        instance = get_instance_type(sizing.instance_type)
        return Placement(
            pool=sizing.pool,
            instance=instance,
            accelerator=ACCELERATORS[instance.accelerator],
            tpu_topology=tpu_topology,
        )


def accelerator_resources(placement: Placement, sizing: DeploymentSizing) -> dict[str, str]:
    """The device request: ``nvidia.com/gpu`` = tensor parallel size, or ``google.com/tpu`` = the host's chips; a
    disaggregated replica moving its KV cache over EFA also takes its share of the node's EFA interfaces."""
    if placement.is_tpu:
        return {TPU_RESOURCE: str(placement.instance.accelerators_per_node)}
    gpus = sizing.result.tensor_parallel_size
    devices = {NVIDIA_GPU_RESOURCE: str(gpus)}
    transfer = sizing.result.vllm.kv_transfer
    if transfer is not None and transfer.backend == "LIBFABRIC":
        devices[EFA_RESOURCE] = str(efa_interfaces_per_replica(placement.instance, gpus))
    return devices


@dataclass(frozen=True)
class FittedResources:
    """CPU and memory one replica may take of its node (:func:`components.capacity.host_memory.replica_host_share`,
    which sizing's host KV tier is carved from), and the disk its weights and scratch need."""

    cpu_milli: int
    memory_bytes: int
    shm_bytes: int
    ephemeral_bytes: int
    weights_volume_bytes: int

    def requirements(self, accelerators: Mapping[str, str]) -> k8s.core.v1.ResourceRequirementsArgs:
        """Requests and limits: memory is guaranteed (limit = request), CPU is not capped (no CFS throttling
        of the tokenizer and scheduler threads), accelerators are whole devices."""
        memory = f"{self.memory_bytes // MIB}Mi"
        ephemeral = f"{self.ephemeral_bytes // GIB}Gi"
        return k8s.core.v1.ResourceRequirementsArgs(
            requests={"cpu": f"{self.cpu_milli}m", "memory": memory, "ephemeral-storage": ephemeral, **accelerators},
            limits={"memory": memory, "ephemeral-storage": ephemeral, **accelerators},
        )


def fit_resources(placement: Placement, accelerators_per_replica: int, weights_bytes: int) -> FittedResources:
    """The replica's share of its node's CPU and memory, and an ephemeral volume for its weights plus scratch."""
    share = replica_host_share(placement.instance, accelerators_per_replica)
    weights_volume = ceil_to(weights_bytes * WEIGHTS_DISK_FACTOR, GIB)
    return FittedResources(
        cpu_milli=share.cpu_milli,
        memory_bytes=share.memory_bytes,
        shm_bytes=share.shm_bytes,
        ephemeral_bytes=weights_volume + SCRATCH_DISK_BYTES,
        weights_volume_bytes=weights_volume,
    )


def progress_deadline_seconds(cold_start_seconds: float) -> int:
    """How long a rollout may go without progress before Kubernetes marks it failed: three cold starts, 10 min at
    least (the S3 sync, the load and the warm-up of a surge replica, with room for a node to be added first)."""
    return max(600, int(cold_start_seconds * 3))


def rollout_timeouts(cold_start_seconds: float) -> pulumi.CustomTimeouts:
    """Pulumi waits for a rollout past Kubernetes' own deadline (its default of 10 min is shorter for large
    models), so a failed rollout is reported by Kubernetes' condition, not by Pulumi giving up first."""
    limit = f"{progress_deadline_seconds(cold_start_seconds) + 300}s"
    return pulumi.CustomTimeouts(create=limit, update=limit)


def startup_failure_threshold(engine_start_seconds: float) -> int:
    """Startup-probe failures allowed so that failureThreshold x period covers the engine start with margin."""
    budget = engine_start_seconds * STARTUP_BUDGET_FACTOR + STARTUP_BUDGET_MARGIN_SECONDS
    return math.ceil(budget / STARTUP_PERIOD_SECONDS)


def drain_seconds(context_tokens: int, decode_step_ms: float) -> int:
    """How long in-flight requests may take to finish: one full-length generation, within bounds."""
    longest = context_tokens * decode_step_ms / 1000
    return int(min(max(math.ceil(longest), MIN_DRAIN_SECONDS), MAX_DRAIN_SECONDS))


def probes(
    ready_path: str, port: str, engine_start_seconds: float, *, live_path: str | None = None
) -> tuple[k8s.core.v1.ProbeArgs, k8s.core.v1.ProbeArgs, k8s.core.v1.ProbeArgs]:
    """(startup, readiness, liveness): startup and readiness on ``ready_path``, liveness on ``live_path``.

    Liveness is the gentlest (5 failures 30 s apart): a busy engine answers health checks late, and killing it
    throws away minutes of loading; readiness reacts in 15 s so traffic leaves a sick replica quickly.
    """
    ready = k8s.core.v1.HTTPGetActionArgs(path=ready_path, port=port)
    live = k8s.core.v1.HTTPGetActionArgs(path=live_path or ready_path, port=port)
    startup = k8s.core.v1.ProbeArgs(
        http_get=ready,
        period_seconds=STARTUP_PERIOD_SECONDS,
        timeout_seconds=5,
        failure_threshold=startup_failure_threshold(engine_start_seconds),
    )
    readiness = k8s.core.v1.ProbeArgs(http_get=ready, period_seconds=5, timeout_seconds=5, failure_threshold=3)
    liveness = k8s.core.v1.ProbeArgs(http_get=live, period_seconds=30, timeout_seconds=10, failure_threshold=5)
    return startup, readiness, liveness


def container_security(*, non_root: bool, uid: int = RUN_AS_USER) -> k8s.core.v1.SecurityContextArgs:
    """No privilege escalation, every capability dropped, the runtime's default seccomp profile, a read-only root
    filesystem (every writable path is an ``emptyDir``: the weights, ``$HOME``, ``/tmp``, ``/dev/shm``); ``non_root``
    runs as ``uid`` (also the gid)."""
    return k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        privileged=False,
        read_only_root_filesystem=True,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
        run_as_non_root=True if non_root else None,
        run_as_user=uid if non_root else None,
        run_as_group=uid if non_root else None,
    )


def pod_security(*, non_root: bool, uid: int = RUN_AS_USER) -> k8s.core.v1.PodSecurityContextArgs:
    """Pod-level defaults; ``fsGroup`` makes the mounted volumes writable by the non-root ``uid``."""
    return k8s.core.v1.PodSecurityContextArgs(
        run_as_non_root=True if non_root else None,
        run_as_user=uid if non_root else None,
        run_as_group=uid if non_root else None,
        fs_group=uid if non_root else None,
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
    )


def node_selector(placement: Placement) -> dict[str, str]:
    """GPU pools: the pool label inferplane's node groups set. TPU pools: GKE's own accelerator/topology labels."""
    if placement.is_tpu:
        assert placement.tpu_topology is not None  # check_platform requires it for TPU pools
        return {GKE_TPU_ACCELERATOR_LABEL: GKE_TPU_V5E_ACCELERATOR, GKE_TPU_TOPOLOGY_LABEL: placement.tpu_topology}
    return {POOL_LABEL: placement.pool}


def tolerations(placement: Placement) -> list[k8s.core.v1.TolerationArgs]:
    """Tolerate exactly the pool's accelerator taint."""
    taint = TPU_TAINT if placement.is_tpu else GPU_TAINT
    return [
        k8s.core.v1.TolerationArgs(key=taint.key, operator="Equal", value=taint.value, effect=taint.kubernetes_effect)
    ]


def zone_spread(selector: Mapping[str, str]) -> list[k8s.core.v1.TopologySpreadConstraintArgs]:
    """Replicas spread evenly over zones (a zone outage takes at most its share of capacity)."""
    return [
        k8s.core.v1.TopologySpreadConstraintArgs(
            max_skew=1,
            topology_key="topology.kubernetes.io/zone",
            when_unsatisfiable="DoNotSchedule",
            label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(selector)),
        )
    ]


def memory_volume(name: str, size_bytes: int) -> k8s.core.v1.VolumeArgs:
    """A memory-backed ``emptyDir`` (``/dev/shm``)."""
    return k8s.core.v1.VolumeArgs(
        name=name, empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(medium="Memory", size_limit=f"{size_bytes // GIB}Gi")
    )


def disk_volume(name: str, size_bytes: int) -> k8s.core.v1.VolumeArgs:
    """An ``emptyDir`` on the node's ephemeral storage (the instance-store NVMe on GPU nodes)."""
    return k8s.core.v1.VolumeArgs(
        name=name, empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit=f"{ceil_to(size_bytes, GIB) // GIB}Gi")
    )


def s3_sync_container(
    name: str,
    source: pulumi.Input[str],
    target: pulumi.Input[str],
    volume: str,
    *,
    include: tuple[str, ...] = (),
    image: str = AWS_CLI_IMAGE,
) -> k8s.core.v1.ContainerArgs:
    """A container copying between S3 and a mounted volume (``aws s3 sync`` skips unchanged files).

    ``include`` limits the copy to matching names (``--exclude '*' --include ...``); ``image`` is the AWS CLI
    reference to run (pinned by the stack's digest when it has one).
    """
    filters: list[pulumi.Input[str]] = []
    if include:
        filters = ["--exclude", "*"]
        for pattern in include:
            filters += ["--include", pattern]
    return k8s.core.v1.ContainerArgs(
        name=name,
        image=image,
        command=["aws"],
        args=["s3", "sync", "--only-show-errors", *filters, source, target],
        env=[k8s.core.v1.EnvVarArgs(name="HOME", value="/tmp")],
        volume_mounts=[
            k8s.core.v1.VolumeMountArgs(name=volume, mount_path=MODELS_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
        ],
        resources=k8s.core.v1.ResourceRequirementsArgs(
            requests={"cpu": "1", "memory": "1Gi"}, limits={"memory": "2Gi"}
        ),
        security_context=container_security(non_root=True),
    )


def user_env() -> k8s.core.v1.EnvVarArgs:
    """``USER`` for :data:`RUN_AS_USER` (see :data:`RUN_AS_USER_NAME`)."""
    return k8s.core.v1.EnvVarArgs(name="USER", value=RUN_AS_USER_NAME)


def engine_env(*engine: k8s.core.v1.EnvVarArgs) -> list[k8s.core.v1.EnvVarArgs]:
    """Every engine container's environment: a writable ``$HOME``, ``USER`` for the uid, the hub's cache on the
    models disk; then the engine's own ``engine`` variables."""
    return [
        k8s.core.v1.EnvVarArgs(name="HOME", value=HOME_MOUNT),
        user_env(),
        k8s.core.v1.EnvVarArgs(name="HF_HOME", value=f"{MODELS_MOUNT}/.hf"),
        *engine,
    ]


def engine_mounts(*engine: k8s.core.v1.VolumeMountArgs) -> list[k8s.core.v1.VolumeMountArgs]:
    """Where every engine container sees the models disk and the volumes of :func:`scratch_volumes`; then the
    engine's own ``engine`` mounts."""
    return [
        k8s.core.v1.VolumeMountArgs(name="models", mount_path=MODELS_MOUNT),
        k8s.core.v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
        k8s.core.v1.VolumeMountArgs(name="home", mount_path=HOME_MOUNT),
        k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
        *engine,
    ]


def scratch_volumes(resources: FittedResources) -> list[k8s.core.v1.VolumeArgs]:
    """``/dev/shm``, ``$HOME`` and ``/tmp`` of an engine container (the models disk is sized by its pod)."""
    return [
        memory_volume("dshm", resources.shm_bytes),
        disk_volume("home", 10 * GIB),
        disk_volume("tmp", 2 * GIB),
    ]


@dataclass(frozen=True)
class ServerProcess:
    """An engine's server as only the engine knows it; :func:`server_container` adds what every server shares."""

    name: str
    """Container name (the engine's: ``vllm``, ``sglang``, ``triton``)."""
    image: str
    """Image reference, pinned by the stack's digest when it has one."""
    command: tuple[str, ...]
    """The server's entry point."""
    args: tuple[str, ...]
    """Its arguments, every engine setting from sizing."""
    ports: tuple[tuple[str, int], ...]
    """Named TCP ports; the first is the OpenAI API: probed, published to the gateway (:func:`endpoints_service`)
    and scraped for ``/metrics`` (every engine serves its metrics there)."""
    health_path: str
    """What the startup, readiness and liveness probes get on the API port."""
    env: tuple[k8s.core.v1.EnvVarArgs, ...] = ()
    """The engine's own variables, after those of :func:`engine_env`."""
    mounts: tuple[k8s.core.v1.VolumeMountArgs, ...] = ()
    """The engine's own mounts, after those of :func:`engine_mounts`."""


def server_container(
    process: ServerProcess,
    resources: k8s.core.v1.ResourceRequirementsArgs,
    engine_start_seconds: float,
    *,
    non_root: bool,
) -> k8s.core.v1.ContainerArgs:
    """The server container of ``process``: probes from sizing's start estimate, the ``preStop`` sleep, the shared
    environment and volumes, locked down by :func:`container_security`."""
    startup, readiness, liveness = probes(process.health_path, process.ports[0][0], engine_start_seconds)
    return k8s.core.v1.ContainerArgs(
        name=process.name,
        image=process.image,
        command=list(process.command),
        args=list(process.args),
        ports=[
            k8s.core.v1.ContainerPortArgs(name=port_name, container_port=port, protocol="TCP")
            for port_name, port in process.ports
        ],
        env=engine_env(*process.env),
        resources=resources,
        startup_probe=startup,
        readiness_probe=readiness,
        liveness_probe=liveness,
        lifecycle=pre_stop_sleep(),
        volume_mounts=engine_mounts(*process.mounts),
        security_context=container_security(non_root=non_root),
    )


def hf_token_volume(secret_name: pulumi.Input[str]) -> k8s.core.v1.VolumeArgs:
    """The Hugging Face token Secret as a volume holding one file, ``token``, readable by owner and group only (the
    pod's ``fsGroup``)."""
    return k8s.core.v1.VolumeArgs(
        name=HF_TOKEN_VOLUME,
        secret=k8s.core.v1.SecretVolumeSourceArgs(
            secret_name=secret_name,
            items=[k8s.core.v1.KeyToPathArgs(key=HF_TOKEN_SECRET_KEY, path="token")],
            default_mode=0o440,
        ),
    )


def hf_token_file() -> tuple[k8s.core.v1.VolumeMountArgs, k8s.core.v1.EnvVarArgs]:
    """(the read-only mount of :func:`hf_token_volume`, ``HF_TOKEN_PATH`` naming the file): the token as a file."""
    return (
        k8s.core.v1.VolumeMountArgs(name=HF_TOKEN_VOLUME, mount_path=HF_TOKEN_DIR, read_only=True),
        k8s.core.v1.EnvVarArgs(name="HF_TOKEN_PATH", value=f"{HF_TOKEN_DIR}/token"),
    )


@dataclass(frozen=True)
class Weights:
    """Where the pods read the checkpoint, and what the pod needs for it: ``model`` is the engine's model argument
    (a local folder when the cache syncs it, the hub id otherwise)."""

    model: str
    env: tuple[k8s.core.v1.EnvVarArgs, ...]
    init_containers: tuple[k8s.core.v1.ContainerArgs, ...]
    mounts: tuple[k8s.core.v1.VolumeMountArgs, ...]
    volumes: tuple[k8s.core.v1.VolumeArgs, ...]


def weights_source(
    deployment: ModelDeploymentSpec,
    *,
    hf_token_secret_name: pulumi.Input[str],
    model_cache_uri: pulumi.Input[str] | None,
    image_digests: Mapping[str, str],
) -> Weights:
    """The model cache, synced onto the node by an init container, or else the hub, read with the token file.

    Shared by the engines that load a Hugging Face checkpoint themselves (vLLM, SGLang)."""
    repo = deployment.weights_repo or deployment.architecture_resolved.hf_repo
    if model_cache_uri is None:
        token_mount, token_env = hf_token_file()
        return Weights(
            model=repo,
            env=(token_env,),
            init_containers=(),
            mounts=(token_mount,),
            volumes=(hf_token_volume(hf_token_secret_name),),
        )
    model = f"{MODELS_MOUNT}/{repo}"
    source = pulumi.Output.concat(model_cache_uri, repo, "/")
    fetch = s3_sync_container("fetch-weights", source, model, "models", image=image_reference("aws-cli", image_digests))
    # Offline: a missing file must fail the pod, not silently pull the checkpoint from the hub.
    offline = k8s.core.v1.EnvVarArgs(name="HF_HUB_OFFLINE", value="1")
    return Weights(model=model, env=(offline,), init_containers=(fetch,), mounts=(), volumes=())


def checkpoint_server_pod(
    args: ModelServerArgs,
    account: k8s.core.v1.ServiceAccount,
    placement: Placement,
    selector: Mapping[str, str],
    process: Callable[[str, int], ServerProcess],
    *,
    tensor_parallel_size: int,
    model_cache_uri: pulumi.Input[str] | None,
    image_digests: Mapping[str, str],
    non_root: bool,
) -> k8s.core.v1.PodSpecArgs:
    """The pod of an engine that loads a Hugging Face checkpoint itself (vLLM, SGLang): the weights' sync when they
    come from the cache (:func:`weights_source`), the engine's ``process(model, drain)`` (``model``: its model
    argument, ``drain``: the seconds in-flight requests get, :func:`drain_seconds`), its volumes."""
    sizing = args.sizing
    resources = fit_resources(placement, tensor_parallel_size, sizing.result.weights_bytes)
    drain = drain_seconds(sizing.result.context, sizing.result.decode_step_ms)
    weights = weights_source(
        args.deployment,
        hf_token_secret_name=args.hf_token_secret_name,
        model_cache_uri=model_cache_uri,
        image_digests=image_digests,
    )
    server = process(weights.model, drain)
    server = replace(server, env=(*server.env, *weights.env), mounts=(*server.mounts, *weights.mounts))
    requirements = resources.requirements(accelerator_resources(placement, sizing))
    return server_pod(
        account,
        placement,
        selector,
        args.environment,
        drain,
        non_root=non_root,
        init_containers=list(weights.init_containers) or None,
        containers=[server_container(server, requirements, sizing.result.engine_start_seconds, non_root=non_root)],
        volumes=[
            disk_volume("models", resources.weights_volume_bytes),
            *scratch_volumes(resources),
            *weights.volumes,
        ],
    )


def pod_monitor(
    name: str,
    namespace: pulumi.Input[str],
    selector: Mapping[str, str],
    port: str,
    *,
    labels: Mapping[str, str],
    interval_seconds: int,
    opts: pulumi.ResourceOptions,
) -> k8s.apiextensions.CustomResource:
    """A Prometheus Operator PodMonitor scraping ``/metrics`` on ``port``, labelled for the monitoring stack."""
    return k8s.apiextensions.CustomResource(
        name,
        api_version="monitoring.coreos.com/v1",
        kind="PodMonitor",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels={**labels, **SCRAPE_LABELS}),
        spec={
            "selector": {"matchLabels": dict(selector)},
            "podMetricsEndpoints": [{"port": port, "path": "/metrics", "interval": f"{interval_seconds}s"}],
        },
        opts=opts,
    )


def disruption_budget(
    name: str,
    namespace: pulumi.Input[str],
    selector: Mapping[str, str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> k8s.policy.v1.PodDisruptionBudget:
    """At most one replica voluntarily disrupted at a time (node drains, upgrades)."""
    return k8s.policy.v1.PodDisruptionBudget(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=dict(labels)),
        spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(
            max_unavailable=1,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(selector)),
        ),
        opts=opts,
    )


def service_account_name(deployment: str) -> str:
    """The Kubernetes name of a model server's ServiceAccount: what the model cache binds its role to."""
    return f"{deployment}-sa"


def service_account(
    name: str, deployment: str, namespace: pulumi.Input[str], labels: Mapping[str, str], opts: pulumi.ResourceOptions
) -> k8s.core.v1.ServiceAccount:
    """The pods' own identity (never ``default``): resource ``name``, Kubernetes name from the deployment's.

    It carries no role annotation: on EKS the model cache's ``aws.eks.PodIdentityAssociation`` binds this
    (namespace, name) to the cache's IAM role (see :mod:`components.aws.model_cache`), and the Pod Identity agent hands
    the pods their credentials.
    """
    return k8s.core.v1.ServiceAccount(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=service_account_name(deployment), namespace=namespace, labels=dict(labels)
        ),
        automount_service_account_token=False,
        opts=opts,
    )


def labels_for(name: str, tags: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(selector labels, all labels) of a model server (the contract in :mod:`components.serving.annotations`).

    The selector never changes; the rest adds the served model name and the stack's tags.
    """
    selector = {NAME_LABEL: name, COMPONENT_LABEL: MODEL_SERVER}
    return selector, {**tags, **selector, SERVED_MODEL_LABEL: name, "app.kubernetes.io/part-of": "inferplane"}


def pre_stop_sleep() -> k8s.core.v1.LifecycleArgs:
    """The server container's ``preStop``: :data:`PRE_STOP_SLEEP_SECONDS` asleep before the engine sees SIGTERM."""
    return k8s.core.v1.LifecycleArgs(
        pre_stop=k8s.core.v1.LifecycleHandlerArgs(sleep=k8s.core.v1.SleepActionArgs(seconds=PRE_STOP_SLEEP_SECONDS))
    )


def server_pod(
    account: k8s.core.v1.ServiceAccount,
    placement: Placement,
    selector: Mapping[str, str],
    environment: Environment,
    drain: int,
    *,
    non_root: bool,
    init_containers: list[k8s.core.v1.ContainerArgs] | None,
    containers: list[k8s.core.v1.ContainerArgs],
    volumes: list[k8s.core.v1.VolumeArgs],
) -> k8s.core.v1.PodSpecArgs:
    """A model server's pod: its own identity without an API token, on its pool, spread over zones in ``prod``.

    The grace period covers the ``preStop`` sleep, ``drain`` seconds of in-flight requests and 15 s for the engine
    to exit, so the kubelet's SIGKILL never cuts a drain short.
    """
    return k8s.core.v1.PodSpecArgs(
        service_account_name=account.metadata.name,
        automount_service_account_token=False,
        enable_service_links=False,
        node_selector=node_selector(placement),
        tolerations=tolerations(placement),
        topology_spread_constraints=zone_spread(selector) if environment == "prod" else None,
        termination_grace_period_seconds=PRE_STOP_SLEEP_SECONDS + drain + 15,
        security_context=pod_security(non_root=non_root),
        init_containers=init_containers,
        containers=containers,
        volumes=volumes,
    )


def server_deployment(
    name: str,
    spec: ModelDeploymentSpec,
    sizing: DeploymentSizing,
    pod: k8s.core.v1.PodSpecArgs,
    *,
    namespace: pulumi.Input[str],
    selector: Mapping[str, str],
    labels: Mapping[str, str],
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource] | None = None,
) -> k8s.apps.v1.Deployment:
    """The server's Deployment, named after the model deployment: surge-first rollouts, KEDA's replica count."""
    return k8s.apps.v1.Deployment(
        name,
        # What the policy pack and humans read back: model, engine, placement, sizing
        # (components.serving.annotations).
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=spec.name, namespace=namespace, labels=dict(labels), annotations=serving_annotations(sizing)
        ),
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=spec.min_replicas,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(selector)),
            # A new replica must be Ready before an old one goes: no capacity dip during a rollout. The
            # cluster autoscaler adds a node when the surge pod does not fit.
            strategy=k8s.apps.v1.DeploymentStrategyArgs(
                type="RollingUpdate",
                rolling_update=k8s.apps.v1.RollingUpdateDeploymentArgs(max_surge=1, max_unavailable=0),
            ),
            progress_deadline_seconds=progress_deadline_seconds(sizing.result.cold_start_seconds),
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels=dict(labels)), spec=pod
            ),
        ),
        # KEDA owns the replica count once the ScaledObject exists; Pulumi only sets the initial one.
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=depends_on,
            ignore_changes=["spec.replicas"],
            custom_timeouts=rollout_timeouts(sizing.result.cold_start_seconds),
        ),
    )


def server_service(
    name: str,
    deployment: str,
    ports: Sequence[tuple[str, int]],
    *,
    namespace: pulumi.Input[str],
    selector: Mapping[str, str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.Service:
    """The server's ClusterIP Service (:func:`components.serving.naming.model_service_name`): one TCP port per
    ``(name, port)``, each targeting the container port of the same name."""
    return k8s.core.v1.Service(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=model_service_name(deployment), namespace=namespace, labels=dict(labels)
        ),
        spec=k8s.core.v1.ServiceSpecArgs(
            type="ClusterIP",
            selector=dict(selector),
            ports=[
                k8s.core.v1.ServicePortArgs(name=port_name, port=port, target_port=port_name, protocol="TCP")
                for port_name, port in ports
            ],
        ),
        opts=opts,
    )


def endpoints_service(
    name: str,
    deployment: str,
    port: tuple[str, int],
    *,
    namespace: pulumi.Input[str],
    selector: Mapping[str, str],
    labels: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.Service:
    """The server's headless Service (:func:`components.serving.naming.model_endpoints_service_name`): the same pods
    and OpenAI API ``port`` as :func:`server_service`, resolved by DNS to one address per ready pod, so the gateway
    picks the replica of each request (a ClusterIP pins a kept-alive connection to one pod).

    ``publishNotReadyAddresses`` stays false: only pods whose readiness probe passes are published (Kubernetes API,
    ServiceSpec), so readiness alone decides which replicas the gateway sees, starting, draining or failed ones never.
    """
    port_name, number = port
    return k8s.core.v1.Service(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=model_endpoints_service_name(deployment), namespace=namespace, labels=dict(labels)
        ),
        spec=k8s.core.v1.ServiceSpecArgs(
            type="ClusterIP",
            cluster_ip="None",
            publish_not_ready_addresses=False,
            selector=dict(selector),
            ports=[k8s.core.v1.ServicePortArgs(name=port_name, port=number, target_port=port_name, protocol="TCP")],
        ),
        opts=opts,
    )


class ModelServer(pulumi.ComponentResource):
    """What every model server exposes: the autoscaler's target and the identity the model cache binds."""

    deployment_name: pulumi.Output[str]
    namespace: pulumi.Output[str]
    service_name: pulumi.Output[str]
    service_account_name: pulumi.Output[str]

    def _serve(
        self,
        name: str,
        args: ModelServerArgs,
        account: k8s.core.v1.ServiceAccount,
        pod: k8s.core.v1.PodSpecArgs,
        *,
        selector: Mapping[str, str],
        labels: Mapping[str, str],
        ports: Sequence[tuple[str, int]],
        scrape_interval_seconds: int,
        depends_on: list[pulumi.Resource] | None = None,
    ) -> None:
        """The server around its engine's ``pod``: the Deployment (after ``depends_on``), the ClusterIP Service on
        every one of ``ports`` (the pod's named ports; the first is the OpenAI API), then :meth:`_finish`; the last
        thing a server's constructor does."""
        spec = args.deployment
        child = pulumi.ResourceOptions(parent=self)
        deployment = server_deployment(
            f"{name}-deployment",
            spec,
            args.sizing,
            pod,
            namespace=args.namespace,
            selector=selector,
            labels=labels,
            parent=self,
            depends_on=depends_on,
        )
        service = server_service(
            f"{name}-service", spec.name, ports, namespace=args.namespace, selector=selector, labels=labels, opts=child
        )
        self._finish(
            name,
            deployment=deployment,
            service=service,
            account=account,
            spec=spec,
            selector=selector,
            labels=labels,
            api_port=ports[0],
            metrics_port=ports[0][0],
            scrape_interval_seconds=scrape_interval_seconds,
            opts=child,
        )

    def _finish(
        self,
        name: str,
        *,
        deployment: k8s.apps.v1.Deployment,
        service: k8s.core.v1.Service,
        account: k8s.core.v1.ServiceAccount,
        spec: ModelDeploymentSpec,
        selector: Mapping[str, str],
        labels: Mapping[str, str],
        api_port: tuple[str, int],
        metrics_port: str,
        scrape_interval_seconds: int,
        opts: pulumi.ResourceOptions,
    ) -> None:
        """The children every engine's server has after its Deployment and Service (the headless Service on the
        OpenAI ``api_port``, a PDB when replicas can exceed one, the PodMonitor), then the outputs."""
        namespace = deployment.metadata.namespace
        endpoints_service(
            f"{name}-endpoints",
            spec.name,
            api_port,
            namespace=namespace,
            selector=selector,
            labels=labels,
            opts=opts,
        )
        if spec.max_replicas > 1:
            disruption_budget(f"{name}-pdb", namespace, selector, labels, opts)
        pod_monitor(
            f"{name}-monitor",
            namespace,
            selector,
            metrics_port,
            labels=labels,
            interval_seconds=scrape_interval_seconds,
            opts=opts,
        )
        self.deployment_name = deployment.metadata.name
        self.namespace = namespace
        self.service_name = service.metadata.name
        self.service_account_name = account.metadata.name
        self.register_outputs(
            {
                "deploymentName": self.deployment_name,
                "namespace": self.namespace,
                "serviceName": self.service_name,
                "serviceAccountName": self.service_account_name,
            }
        )


def check_engine_inputs(
    component: str,
    engine: Engine,
    spec: ModelDeploymentSpec,
    sizing: DeploymentSizing,
    add: Callable[[str, str], None],
) -> None:
    """The checks every server makes of its deployment and sizing: the right engine, the same deployment, a fit."""
    if spec.engine != engine:
        add("deployment.engine", f"{component} serves engine {engine!r}, got {spec.engine!r}")
    if sizing.name != spec.name:
        add("sizing.name", f"sizing is for {sizing.name!r}, not deployment {spec.name!r}")
    if sizing.engine != engine:
        add("sizing.engine", f"sizing was made for engine {sizing.engine!r}")
    if not sizing.result.fits:
        add("sizing.result", f"the model does not fit: {sizing.result.reason}")
