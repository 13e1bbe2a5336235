"""``TritonTrtLlmService``: one model served by Triton with the TensorRT-LLM backend, built and sized from sizing.

Children: a ConfigMap with the generated model repository (``config.pbtxt`` per model, see
:mod:`components.triton_config`), an engine-build Job (checkpoint conversion with TensorRT-LLM's ``quantize.py`` and
``trtllm-build``, every limit from :class:`components.sizing.TrtLlmSettings`) that uploads the engine to the model
cache, the Deployment that syncs the engine onto node-local NVMe and serves it, its Service (HTTP 8000, gRPC 8001,
metrics 8002), a PodDisruptionBudget when it can scale past one replica and a PodMonitor on the metrics port.

Engines are tied to the TensorRT-LLM version and the build settings, so they live in the cache under a fingerprint of
both: a changed setting builds a new engine under a new Job name and the old one stays until it is cleaned up.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components import model_server as ms
from inferplane.components import triton_config as tc
from inferplane.components.annotations import COMPONENT_LABEL, ENGINE_BUILD, serving_annotations
from inferplane.components.catalog.images import image_reference
from inferplane.components.naming import TRITON_HTTP_PORT, model_service_name
from inferplane.components.sizing import DeploymentSizing, TrtLlmSettings
from inferplane.components.spec import Environment, ModelDeploymentSpec

TRITON_IMAGE = image_reference("triton-trtllm")
"""NGC Triton with the TensorRT-LLM backend (catalog ``triton-trtllm``: 26.05, TensorRT-LLM 1.2.1). The image
carries ``trtllm-build``, TensorRT-LLM's examples under ``/app/tensorrt_llm`` and
the ``inflight_batcher_llm`` Python models under ``/app/all_models``."""

TRTLLM_EXAMPLES = "/app/tensorrt_llm/examples"
TEMPLATE_REPOSITORY = "/app/all_models/inflight_batcher_llm"

HTTP_PORT = TRITON_HTTP_PORT
GRPC_PORT = 8001
METRICS_PORT = 8002
"""Triton's defaults; ``/metrics`` is served on the metrics port only."""

READY_PATH = "/v2/health/ready"
LIVE_PATH = "/v2/health/live"

CALIBRATION_SAMPLES = 512
"""fp8 calibration batch for ModelOpt (TensorRT-LLM's quantize.py default)."""

REPOSITORY_MOUNT = "/repository"
CONFIG_MOUNT = "/config"


def engine_fingerprint(trtllm: TrtLlmSettings, repo: str) -> str:
    """Ten hex digits naming an engine: the image tag (TensorRT-LLM version; a pinned digest of the same tag builds
    the same engine), the checkpoint and every build setting."""
    payload = json.dumps({"image": TRITON_IMAGE, "repo": repo, "settings": trtllm.model_dump()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:10]


def engine_build_commands(
    trtllm: TrtLlmSettings, *, dtype: str, checkpoint_dir: str, engine_dir: str
) -> list[list[str]]:
    """Checkpoint conversion (and fp8 quantization) then ``trtllm-build``, from sizing's settings only."""
    convert = [
        "python3",
        f"{TRTLLM_EXAMPLES}/quantization/quantize.py",
        "--model_dir",
        f"{ms.MODELS_MOUNT}/hf",
        "--output_dir",
        checkpoint_dir,
        "--dtype",
        dtype,
        "--qformat",
        trtllm.weights_qformat,
        "--tp_size",
        str(trtllm.tensor_parallel),
        "--calib_size",
        str(CALIBRATION_SAMPLES),
    ]
    if trtllm.kv_cache_dtype == "fp8":
        convert += ["--kv_cache_dtype", "fp8"]
    build = [
        "trtllm-build",
        "--checkpoint_dir",
        checkpoint_dir,
        "--output_dir",
        engine_dir,
        "--max_batch_size",
        str(trtllm.max_batch_size),
        "--max_input_len",
        str(trtllm.max_input_len),
        "--max_seq_len",
        str(trtllm.max_seq_len),
        "--max_num_tokens",
        str(trtllm.max_num_tokens),
        "--gemm_plugin",
        "auto",
        # Paged context attention is what KV-cache reuse and chunked context run on.
        "--use_paged_context_fmha",
        "enable",
    ]
    if trtllm.kv_cache_dtype == "fp8":
        build += ["--use_fp8_context_fmha", "enable"]
    return [convert, build]


def assemble_repository_script() -> str:
    """Copy the image's Python models and put the generated ``config.pbtxt`` files in place."""
    lines = ["set -eu"]
    for model in tc.MODELS:
        lines.append(f"mkdir -p {REPOSITORY_MOUNT}/{model}/1")
        if model in (tc.PREPROCESSING, tc.POSTPROCESSING):
            lines.append(f"cp {TEMPLATE_REPOSITORY}/{model}/1/model.py {REPOSITORY_MOUNT}/{model}/1/model.py")
        lines.append(f"cp {CONFIG_MOUNT}/{model}.pbtxt {REPOSITORY_MOUNT}/{model}/config.pbtxt")
    return "\n".join(lines)


@dataclass(frozen=True)
class TritonTrtLlmServiceArgs:
    """Inputs of :class:`TritonTrtLlmService`."""

    deployment: ModelDeploymentSpec
    """The model deployment from the platform spec."""
    sizing: DeploymentSizing
    """Sizing's verdict: TensorRT-LLM build and runtime settings, pool, cold-start estimates."""
    environment: Environment
    """``prod`` spreads replicas over zones."""
    namespace: pulumi.Input[str]
    """Namespace of every object."""
    hf_token_secret_name: pulumi.Input[str]
    """Kubernetes Secret with the Hugging Face token (the build Job's calibration data comes from the hub)."""
    model_cache_uri: pulumi.Input[str] | None
    """``s3://bucket/prefix/`` holding checkpoints and built engines (``ModelCache.uri``); required (engines are built
    once, not per pod). The engine-build Job writes under ``engines/`` as ``service_account_name``, so the cache must
    grant that ServiceAccount write access."""
    scrape_interval_seconds: int = 15
    """PodMonitor scrape interval."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Stack tags, added to every object's labels."""
    image_digests: Mapping[str, str] = field(default_factory=dict)
    """Pinned ``sha256:`` digests by catalog image name (``triton-trtllm``, ``aws-cli``); a digest wins over the
    catalog's tag (:mod:`components.catalog.images`)."""


class TritonTrtLlmService(ms.ModelServer):
    """A Triton + TensorRT-LLM model server: model repository, engine-build Job, Deployment, Service, PDB, PodMonitor.

    Outputs for the autoscaler: ``deployment_name``, ``namespace``, ``service_name``; for the model cache's Pod
    Identity association: ``service_account_name`` (:func:`model_server.service_account_name` of the deployment).
    """

    def __init__(self, name: str, args: TritonTrtLlmServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        _validate(args)  # before registering anything: bad input declares nothing
        super().__init__("inferplane:index:TritonTrtLlmService", name, None, opts)
        assert args.model_cache_uri is not None  # _validate
        deployment, sizing = args.deployment, args.sizing
        trtllm = sizing.result.trtllm
        placement = ms.Placement.of(sizing, None)
        selector, labels = ms.labels_for(deployment.name, args.labels)
        child = pulumi.ResourceOptions(parent=self)
        repo = deployment.weights_repo or deployment.architecture_resolved.hf_repo
        fingerprint = engine_fingerprint(trtllm, repo)
        engine_uri = pulumi.Output.concat(
            args.model_cache_uri, ms.ENGINES_PREFIX, deployment.name, "/", fingerprint, "/"
        )
        checkpoint_uri = pulumi.Output.concat(args.model_cache_uri, repo, "/")
        resources = ms.fit_resources(placement, trtllm.tensor_parallel, sizing.result.weights_bytes)
        accelerators = ms.accelerator_resources(placement, sizing)

        account = ms.service_account(f"{name}-sa", deployment.name, args.namespace, labels, child)
        configs = tc.model_repository(
            trtllm, engine_dir=f"{ms.MODELS_MOUNT}/engine", tokenizer_dir=f"{ms.MODELS_MOUNT}/tokenizer"
        )
        repository = k8s.core.v1.ConfigMap(
            f"{name}-model-repository",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"{deployment.name}-model-repository", namespace=args.namespace, labels=labels
            ),
            data={f"{model}.pbtxt": tc.render(config) for model, config in configs.items()},
            opts=child,
        )

        common_volumes = [
            ms.memory_volume("dshm", resources.shm_bytes),
            ms.disk_volume("home", 10 * ms.GIB),
            ms.disk_volume("tmp", 2 * ms.GIB),
        ]
        engine_mounts = [
            k8s.core.v1.VolumeMountArgs(name="models", mount_path=ms.MODELS_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
            k8s.core.v1.VolumeMountArgs(name="home", mount_path=ms.HOME_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="tmp", mount_path="/tmp"),
        ]
        home_env = [
            k8s.core.v1.EnvVarArgs(name="HOME", value=ms.HOME_MOUNT),
            ms.user_env(),
            k8s.core.v1.EnvVarArgs(name="HF_HOME", value=f"{ms.MODELS_MOUNT}/.hf"),
        ]
        if trtllm.tensor_parallel > 1:
            # Orchestrator mode: one tritonserver process spawns a worker per rank (no mpirun in the pod).
            home_env.append(k8s.core.v1.EnvVarArgs(name="TRTLLM_ORCHESTRATOR", value="1"))

        checkpoint_dir = f"{ms.MODELS_MOUNT}/checkpoint"
        engine_dir = f"{ms.MODELS_MOUNT}/engine"
        build_script = "\n".join(
            ["set -eu"]
            + [
                shlex.join(command)
                for command in engine_build_commands(
                    trtllm, dtype=sizing.result.vllm.dtype, checkpoint_dir=checkpoint_dir, engine_dir=engine_dir
                )
            ]
        )
        token_mount, token_env = ms.hf_token_file()
        engine_image = image_reference("triton-trtllm", args.image_digests)
        cli_image = image_reference("aws-cli", args.image_digests)
        build_job = k8s.batch.v1.Job(
            f"{name}-engine-build",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"{deployment.name}-engine-{fingerprint}", namespace=args.namespace, labels=labels
            ),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=2,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels={**labels, COMPONENT_LABEL: ENGINE_BUILD}),
                    spec=k8s.core.v1.PodSpecArgs(
                        restart_policy="Never",
                        service_account_name=account.metadata.name,
                        automount_service_account_token=False,
                        enable_service_links=False,
                        node_selector=ms.node_selector(placement),
                        tolerations=ms.tolerations(placement),
                        security_context=ms.pod_security(non_root=True),
                        init_containers=[
                            ms.s3_sync_container(
                                "fetch-checkpoint", checkpoint_uri, f"{ms.MODELS_MOUNT}/hf", "models", image=cli_image
                            ),
                            k8s.core.v1.ContainerArgs(
                                name="build-engine",
                                image=engine_image,
                                command=["/bin/sh", "-c", build_script],
                                env=[*home_env, token_env],
                                resources=resources.requirements(accelerators),
                                volume_mounts=[*engine_mounts, token_mount],
                                security_context=ms.container_security(non_root=True),
                            ),
                        ],
                        containers=[
                            ms.s3_sync_container("upload-engine", engine_dir, engine_uri, "models", image=cli_image)
                        ],
                        volumes=[
                            # Checkpoint, quantized checkpoint and engine side by side.
                            ms.disk_volume("models", resources.weights_volume_bytes * 3),
                            *common_volumes,
                            ms.hf_token_volume(args.hf_token_secret_name),
                        ],
                    ),
                ),
            ),
            # Calibration and the build take tens of minutes; Pulumi waits for the Job to complete.
            opts=pulumi.ResourceOptions(parent=self, custom_timeouts=pulumi.CustomTimeouts(create="90m")),
        )

        drain = ms.drain_seconds(sizing.result.context, sizing.result.decode_step_ms)
        startup, readiness, liveness = ms.probes(
            READY_PATH, "http", sizing.result.engine_start_seconds, live_path=LIVE_PATH
        )
        server = k8s.core.v1.ContainerArgs(
            name="triton",
            image=engine_image,
            command=["tritonserver"],
            args=[
                f"--model-repository={REPOSITORY_MOUNT}",
                f"--http-port={HTTP_PORT}",
                f"--grpc-port={GRPC_PORT}",
                f"--metrics-port={METRICS_PORT}",
                "--allow-metrics=true",
                "--allow-gpu-metrics=true",
                # Time to first token: the ensemble's first-response histogram (components.metrics) is opt-in.
                "--metrics-config=histogram_latencies=true",
                # In-flight requests finish before the server exits on SIGTERM.
                f"--exit-timeout-secs={drain}",
            ],
            ports=[
                k8s.core.v1.ContainerPortArgs(name="http", container_port=HTTP_PORT, protocol="TCP"),
                k8s.core.v1.ContainerPortArgs(name="grpc", container_port=GRPC_PORT, protocol="TCP"),
                k8s.core.v1.ContainerPortArgs(name="metrics", container_port=METRICS_PORT, protocol="TCP"),
            ],
            env=home_env,
            resources=resources.requirements(accelerators),
            startup_probe=startup,
            readiness_probe=readiness,
            liveness_probe=liveness,
            lifecycle=k8s.core.v1.LifecycleArgs(
                pre_stop=k8s.core.v1.LifecycleHandlerArgs(
                    sleep=k8s.core.v1.SleepActionArgs(seconds=ms.PRE_STOP_SLEEP_SECONDS)
                )
            ),
            volume_mounts=[
                *engine_mounts,
                k8s.core.v1.VolumeMountArgs(name="repository", mount_path=REPOSITORY_MOUNT),
            ],
            security_context=ms.container_security(non_root=True),
        )
        assemble = k8s.core.v1.ContainerArgs(
            name="assemble-repository",
            image=engine_image,
            command=["/bin/sh", "-c", assemble_repository_script()],
            resources=k8s.core.v1.ResourceRequirementsArgs(
                requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "256Mi"}
            ),
            volume_mounts=[
                k8s.core.v1.VolumeMountArgs(name="repository", mount_path=REPOSITORY_MOUNT),
                k8s.core.v1.VolumeMountArgs(name="config", mount_path=CONFIG_MOUNT, read_only=True),
            ],
            security_context=ms.container_security(non_root=True),
        )
        pod = k8s.core.v1.PodSpecArgs(
            service_account_name=account.metadata.name,
            automount_service_account_token=False,
            enable_service_links=False,
            node_selector=ms.node_selector(placement),
            tolerations=ms.tolerations(placement),
            topology_spread_constraints=ms.zone_spread(selector) if args.environment == "prod" else None,
            termination_grace_period_seconds=ms.PRE_STOP_SLEEP_SECONDS + drain + 15,
            security_context=ms.pod_security(non_root=True),
            init_containers=[
                ms.s3_sync_container("fetch-engine", engine_uri, engine_dir, "models", image=cli_image),
                ms.s3_sync_container(
                    "fetch-tokenizer",
                    checkpoint_uri,
                    f"{ms.MODELS_MOUNT}/tokenizer",
                    "models",
                    image=cli_image,
                    include=("tokenizer*", "special_tokens_map.json", "config.json", "generation_config.json"),
                ),
                assemble,
            ],
            containers=[server],
            volumes=[
                ms.disk_volume("models", resources.weights_volume_bytes),
                *common_volumes,
                k8s.core.v1.VolumeArgs(
                    name="repository", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit="1Gi")
                ),
                k8s.core.v1.VolumeArgs(
                    name="config", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=repository.metadata.name)
                ),
            ],
        )
        self._deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            # What the policy pack and humans read back: model, engine, placement, sizing (components.annotations).
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=deployment.name,
                namespace=args.namespace,
                labels=labels,
                annotations=serving_annotations(sizing),
            ),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=deployment.min_replicas,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
                strategy=k8s.apps.v1.DeploymentStrategyArgs(
                    type="RollingUpdate",
                    rolling_update=k8s.apps.v1.RollingUpdateDeploymentArgs(max_surge=1, max_unavailable=0),
                ),
                progress_deadline_seconds=ms.progress_deadline_seconds(sizing.result.cold_start_seconds),
                template=k8s.core.v1.PodTemplateSpecArgs(metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels), spec=pod),
            ),
            # The engine must exist in the cache before a replica fetches it; KEDA owns the replica count.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[build_job],
                ignore_changes=["spec.replicas"],
                custom_timeouts=ms.rollout_timeouts(sizing.result.cold_start_seconds),
            ),
        )
        self._service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=model_service_name(deployment.name), namespace=args.namespace, labels=labels
            ),
            spec=k8s.core.v1.ServiceSpecArgs(
                type="ClusterIP",
                selector=selector,
                ports=[
                    k8s.core.v1.ServicePortArgs(name="http", port=HTTP_PORT, target_port="http", protocol="TCP"),
                    k8s.core.v1.ServicePortArgs(name="grpc", port=GRPC_PORT, target_port="grpc", protocol="TCP"),
                    k8s.core.v1.ServicePortArgs(
                        name="metrics", port=METRICS_PORT, target_port="metrics", protocol="TCP"
                    ),
                ],
            ),
            opts=child,
        )
        self._finish(
            name,
            deployment=self._deployment,
            service=self._service,
            account=account,
            spec=deployment,
            selector=selector,
            labels=labels,
            metrics_port="metrics",
            scrape_interval_seconds=args.scrape_interval_seconds,
            opts=child,
        )


def _validate(args: TritonTrtLlmServiceArgs) -> None:
    """Refuse inputs that cannot serve, naming the field; nothing is created when any check fails."""
    errors: list[pulumi.errors.InputPropertyErrorDetails] = []

    def add(path: str, reason: str) -> None:
        errors.append({"property_path": path, "reason": reason})

    deployment, sizing = args.deployment, args.sizing
    ms.check_engine_inputs("TritonTrtLlmService", "triton", deployment, sizing, add)
    if ms.Placement.of(sizing, None).is_tpu:
        add("sizing.pool", f"pool {sizing.pool!r} is a TPU pool; TensorRT-LLM needs NVIDIA GPUs")
    if args.model_cache_uri is None:
        add("model_cache_uri", "TensorRT-LLM engines are built once into the model cache: give an s3:// prefix")
    if args.scrape_interval_seconds <= 0:
        add("scrape_interval_seconds", "must be positive")
    if errors:
        raise pulumi.InputPropertiesError("invalid TritonTrtLlmService arguments", errors=errors)
