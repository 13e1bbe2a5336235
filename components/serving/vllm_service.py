"""``VllmService``: one model served by vLLM's OpenAI-compatible server, configured entirely from the sizing plan.

A Deployment on the deployment's pool, its ClusterIP Service and the headless ``<deployment>-endpoints`` Service the
gateway picks replicas through, a PodDisruptionBudget when it can scale past one replica and a PodMonitor for
``/metrics``. Every engine flag comes from :class:`components.capacity.sizing.VllmSettings`
(rendered by :func:`vllm_args`), so the flags, the accelerator request and the probes agree with the hardware by
construction; ``tests/serving/test_vllm_service.py`` checks every argument list against the pinned vLLM version's own
argument definitions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.capacity.sizing import DeploymentSizing, VllmSettings
from inferplane.components.catalog.images import engine_image, image_reference
from inferplane.components.serving import model_server as ms
from inferplane.components.serving.naming import VLLM_HEALTH_PATH, VLLM_PORT
from inferplane.components.spec.platform_spec import Environment, ModelDeploymentSpec, SpeculativeDecodingSpec

VLLM_IMAGE = image_reference("vllm")
"""Docker Hub ``vllm/vllm-openai`` at ``catalog.images.VLLM_VERSION`` (catalog ``vllm``), unpinned; a stack's
digest pins it."""

VLLM_COMMAND = ("vllm", "serve")
"""Set explicitly: images before ~v0.10 used ``python3 -m vllm.entrypoints.openai.api_server`` (which wants
``--model``), and the TPU image's entrypoint is not documented; ``vllm serve`` is the CLI in both images."""

VLLM_TPU_IMAGE = image_reference("vllm-tpu")
"""Docker Hub ``vllm/vllm-tpu`` (catalog ``vllm-tpu``); same ``vllm serve`` entrypoint and engine arguments, backed
by ``tpu-inference``."""


HEALTH_PATH = VLLM_HEALTH_PATH
"""200 once the engine is up, 503 when it died (``EngineDeadError``)."""


def speculative_config(spec: SpeculativeDecodingSpec) -> str:
    """``--speculative-config`` JSON (keys are vLLM ``SpeculativeConfig`` fields)."""
    config: dict[str, object] = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.draft_model is not None:
        config["model"] = spec.draft_model
    if spec.prompt_lookup_max is not None:
        config["prompt_lookup_max"] = spec.prompt_lookup_max
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def vllm_args(
    settings: VllmSettings,
    *,
    model: str,
    served_model_name: str,
    speculative: SpeculativeDecodingSpec | None,
    shutdown_timeout_seconds: int,
    aliases: tuple[str, ...] = (),
    tpu: bool = False,
) -> list[str]:
    """The container args of ``vllm serve``: the model first, then one flag per sizing setting.

    Booleans use vLLM's ``BooleanOptionalAction`` pairs (``--enable-x`` / ``--no-enable-x``) so the spec's choice is
    explicit rather than resting on a version's default.
    """
    args = [
        model,
        "--served-model-name",
        served_model_name,
        *aliases,
        "--tensor-parallel-size",
        str(settings.tensor_parallel_size),
        "--max-model-len",
        str(settings.max_model_len),
        "--max-num-seqs",
        str(settings.max_num_seqs),
        "--max-num-batched-tokens",
        str(settings.max_num_batched_tokens),
        "--gpu-memory-utilization",
        f"{settings.gpu_memory_utilization:g}",
        "--kv-cache-dtype",
        settings.kv_cache_dtype,
        "--dtype",
        settings.dtype,
    ]
    if not tpu:  # vLLM's TPU backend sizes its own pages
        args += ["--block-size", str(settings.block_size)]
    if settings.quantization is not None:
        args += ["--quantization", settings.quantization]
    args.append("--enable-prefix-caching" if settings.enable_prefix_caching else "--no-enable-prefix-caching")
    args.append("--enable-chunked-prefill" if settings.enable_chunked_prefill else "--no-enable-chunked-prefill")
    if speculative is not None:
        args += ["--speculative-config", speculative_config(speculative)]
    args += [
        "--host",
        "0.0.0.0",  # the pod's own interfaces; the Service is ClusterIP-only
        "--port",
        str(VLLM_PORT),
        "--shutdown-timeout",
        str(shutdown_timeout_seconds),
    ]
    return args


@dataclass(frozen=True)
class VllmServiceArgs:
    """Inputs of :class:`VllmService`: the validated deployment, its sizing and where it gets weights and secrets."""

    deployment: ModelDeploymentSpec
    """The model deployment from the platform spec (served model name, speculative decoding, replicas)."""
    sizing: DeploymentSizing
    """Sizing's verdict for this deployment: every engine setting, the pool, cold-start estimates."""
    environment: Environment
    """``prod`` spreads replicas over zones."""
    namespace: pulumi.Input[str]
    """Namespace of every object (the composition creates it)."""
    hf_token_secret_name: pulumi.Input[str]
    """Kubernetes Secret holding the Hugging Face token under :data:`model_server.HF_TOKEN_SECRET_KEY`."""
    tpu_topology: str | None = None
    """The TPU pool's slice topology (``2x2``); TPU pools only."""
    model_cache_uri: pulumi.Input[str] | None = None
    """``s3://bucket/prefix/`` holding the checkpoint (``ModelCache.uri``); ``None`` falls back to the Hugging Face
    hub. The pods read it as the ServiceAccount ``service_account_name``, which the cache binds to its role."""
    scrape_interval_seconds: int = 15
    """PodMonitor scrape interval (the spec's observability interval)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Stack tags, added to every object's labels."""
    image_digests: Mapping[str, str] = field(default_factory=dict)
    """Pinned ``sha256:`` digests by catalog image name (``vllm``, ``vllm-tpu``, ``aws-cli``); a digest wins over
    the catalog's tag (:mod:`components.catalog.images`)."""
    served_model_aliases: tuple[str, ...] = ()
    """More names the server answers to: the primaries it is the gateway's fallback for
    (:func:`components.gateway.renderer.fallback_aliases`), since Envoy retries the request body unchanged. The
    first name (the deployment's) is the one responses carry, so they say which model answered."""


class VllmService(ms.ModelServer):
    """A vLLM model server: Deployment, Services (ClusterIP and headless), PodDisruptionBudget (when replicas can
    exceed one), PodMonitor.

    Pods: read-only root filesystem (weights, ``$HOME``, ``/tmp`` and ``/dev/shm`` are ``emptyDir`` volumes), every
    capability dropped, RuntimeDefault seccomp, uid :data:`model_server.RUN_AS_USER`; the Hugging Face token, when
    the hub is read, is a mounted file. Exception: on TPU pools the container runs as root, because non-root access to
    the TPU device nodes is unverified (README "Security baseline").

    Kubernetes objects go to the cluster of the provider the caller passes (``opts.providers`` or ``parent``).
    Outputs for the autoscaler: ``deployment_name``, ``namespace``, ``service_name``; for the model cache's Pod
    Identity association: ``service_account_name`` (:func:`model_server.service_account_name` of the deployment).
    """

    def __init__(self, name: str, args: VllmServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        _validate(args)  # before registering anything: bad input declares nothing
        super().__init__("inferplane:index:VllmService", name, None, opts)
        deployment = args.deployment
        placement = ms.Placement.of(args.sizing, args.tpu_topology)
        selector, labels = ms.labels_for(deployment.name, args.labels)
        child = pulumi.ResourceOptions(parent=self)

        account = ms.service_account(f"{name}-sa", deployment.name, args.namespace, labels, child)
        pod = _server_pod(args, placement, selector, account)
        server = ms.server_deployment(
            f"{name}-deployment",
            deployment,
            args.sizing,
            pod,
            namespace=args.namespace,
            selector=selector,
            labels=labels,
            parent=self,
        )
        service = ms.server_service(
            f"{name}-service",
            deployment.name,
            [("http", VLLM_PORT)],
            namespace=args.namespace,
            selector=selector,
            labels=labels,
            opts=child,
        )
        self._finish(
            name,
            deployment=server,
            service=service,
            account=account,
            spec=deployment,
            selector=selector,
            labels=labels,
            api_port=("http", VLLM_PORT),
            metrics_port="http",
            scrape_interval_seconds=args.scrape_interval_seconds,
            opts=child,
        )


def _server_pod(
    args: VllmServiceArgs,
    placement: ms.Placement,
    selector: Mapping[str, str],
    account: k8s.core.v1.ServiceAccount,
) -> k8s.core.v1.PodSpecArgs:
    """The pod: the weights' sync when they come from the cache, the engine, its volumes."""
    sizing = args.sizing
    resources = ms.fit_resources(placement, sizing.result.vllm.tensor_parallel_size, sizing.result.weights_bytes)
    drain = ms.drain_seconds(sizing.result.context, sizing.result.decode_step_ms)
    weights = ms.weights_source(
        args.deployment,
        hf_token_secret_name=args.hf_token_secret_name,
        model_cache_uri=args.model_cache_uri,
        image_digests=args.image_digests,
    )
    return ms.server_pod(
        account,
        placement,
        selector,
        args.environment,
        drain,
        non_root=not placement.is_tpu,
        init_containers=list(weights.init_containers) or None,
        containers=[_server_container(args, placement, resources, weights, drain)],
        volumes=[
            ms.disk_volume("models", resources.weights_volume_bytes),
            ms.memory_volume("dshm", resources.shm_bytes),
            ms.disk_volume("home", 10 * ms.GIB),
            ms.disk_volume("tmp", 2 * ms.GIB),
            *weights.volumes,
        ],
    )


def _server_container(
    args: VllmServiceArgs, placement: ms.Placement, resources: ms.FittedResources, weights: ms.Weights, drain: int
) -> k8s.core.v1.ContainerArgs:
    """``vllm serve`` with every flag from sizing, its probes, and a drain as long as one full generation."""
    deployment, sizing = args.deployment, args.sizing
    startup, readiness, liveness = ms.probes(HEALTH_PATH, "http", sizing.result.engine_start_seconds)
    return k8s.core.v1.ContainerArgs(
        name="vllm",
        image=image_reference(engine_image("vllm", tpu=placement.is_tpu), args.image_digests),
        command=list(VLLM_COMMAND),
        args=vllm_args(
            sizing.result.vllm,
            model=weights.model,
            served_model_name=deployment.name,
            speculative=deployment.speculative_decoding,
            shutdown_timeout_seconds=drain,
            aliases=args.served_model_aliases,
            tpu=placement.is_tpu,
        ),
        ports=[k8s.core.v1.ContainerPortArgs(name="http", container_port=VLLM_PORT, protocol="TCP")],
        env=[
            k8s.core.v1.EnvVarArgs(name="HOME", value=ms.HOME_MOUNT),
            ms.user_env(),
            k8s.core.v1.EnvVarArgs(name="HF_HOME", value=f"{ms.MODELS_MOUNT}/.hf"),
            k8s.core.v1.EnvVarArgs(name="VLLM_NO_USAGE_STATS", value="1"),
            *weights.env,
        ],
        resources=resources.requirements(ms.accelerator_resources(placement, sizing)),
        startup_probe=startup,
        readiness_probe=readiness,
        liveness_probe=liveness,
        lifecycle=ms.pre_stop_sleep(),
        volume_mounts=[
            k8s.core.v1.VolumeMountArgs(name="models", mount_path=ms.MODELS_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
            k8s.core.v1.VolumeMountArgs(name="home", mount_path=ms.HOME_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
            *weights.mounts,
        ],
        security_context=ms.container_security(non_root=not placement.is_tpu),
    )


def _validate(args: VllmServiceArgs) -> None:
    """Refuse inputs that cannot serve, naming the field; nothing is created when any check fails."""
    errors: list[pulumi.errors.InputPropertyErrorDetails] = []

    def add(path: str, reason: str) -> None:
        errors.append({"property_path": path, "reason": reason})

    deployment, sizing = args.deployment, args.sizing
    ms.check_engine_inputs("VllmService", "vllm", deployment, sizing, add)
    placement = ms.Placement.of(sizing, args.tpu_topology)
    if placement.is_tpu and args.tpu_topology is None:
        add("tpu_topology", f"pool {sizing.pool!r} is a TPU pool: give its slice topology")
    if not placement.is_tpu and args.tpu_topology is not None:
        add("tpu_topology", f"pool {sizing.pool!r} is not a TPU pool")
    if placement.is_tpu and args.model_cache_uri is not None:
        add(
            "model_cache_uri",
            "the S3 cache is read through EKS Pod Identity; TPU pools on GKE read the Hugging Face hub",
        )
    if args.scrape_interval_seconds <= 0:
        add("scrape_interval_seconds", "must be positive")
    if errors:
        raise pulumi.InputPropertiesError("invalid VllmService arguments", errors=errors)
