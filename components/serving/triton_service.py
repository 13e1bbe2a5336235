"""``TritonTrtLlmService``: one model served by Triton with the TensorRT-LLM backend, built and sized from sizing.

Children: a ConfigMap with the generated model repository (``config.pbtxt`` per model, see
:mod:`components.serving.triton_config`), an engine-build Job (checkpoint conversion with TensorRT-LLM's ``quantize.py``
and ``trtllm-build``, every limit from :class:`components.capacity.sizing.TrtLlmSettings`) that uploads the engine to
the model cache, the Deployment that syncs the engine onto node-local NVMe and serves it, its Service (OpenAI 9000,
KServe HTTP 8000 and gRPC 8001) and the headless ``<deployment>-endpoints`` Service on the OpenAI port the gateway
picks replicas through, a PodDisruptionBudget when it can scale past one replica and a PodMonitor on
``/metrics`` of the OpenAI port.

The server starts through Triton's OpenAI-compatible frontend (:func:`frontend_launcher`), so the gateway speaks the
same OpenAI API to Triton as to vLLM: ``/v1/chat/completions`` and ``/v1/completions`` for the ensembles named after
the served model names (:func:`components.serving.triton_config.model_repository`), chat templates from the checkpoint's
tokenizer files (synced from the model cache beside the engine), ``usage`` from the engine's token counts.

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

from inferplane.components.aws.model_cache import ENGINES_PREFIX
from inferplane.components.capacity.sizing import DeploymentSizing, TrtLlmSettings
from inferplane.components.catalog.images import image_reference
from inferplane.components.serving import model_server as ms
from inferplane.components.serving import triton_config as tc
from inferplane.components.serving.annotations import COMPONENT_LABEL, ENGINE_BUILD
from inferplane.components.serving.naming import (
    TRITON_GRPC_PORT,
    TRITON_HEALTH_PATH,
    TRITON_HTTP_PORT,
    TRITON_OPENAI_PORT,
)

TRITON_IMAGE = image_reference("triton-trtllm")
"""NGC Triton with the TensorRT-LLM backend (catalog ``triton-trtllm``: 26.05, TensorRT-LLM 1.2.1). The image
carries ``trtllm-build``, TensorRT-LLM's examples under ``/app/tensorrt_llm`` and
the ``inflight_batcher_llm`` Python models under ``/app/all_models``."""

TRTLLM_EXAMPLES = "/app/tensorrt_llm/examples"
TEMPLATE_REPOSITORY = "/app/all_models/inflight_batcher_llm"

OPENAI_FRONTEND_DIR = "/opt/tritonserver/python/openai/openai_frontend"
"""Triton's OpenAI-compatible frontend in the image: NGC containers carry ``python/openai`` under
``/opt/tritonserver/python`` with the ``tritonserver`` and ``tritonfrontend`` wheels and the frontend's requirements
installed (``build.py`` of triton-inference-server/server r26.05, whose production stage also builds the
``tensorrtllm`` images: ``cpdir(python/openai, install/python)``, ``pip install tritonserver-*.whl
tritonfrontend-*.whl``, ``pip3 install -r python/openai/requirements.txt``; added by server PR #7895, merged
2024-12-19, already in the r24.12 branch; ``qa/L0_openai/test.sh``: "Should be pre-installed in container"). The
frontend's README runs it as ``python3 openai_frontend/main.py --model-repository ... --tokenizer ...`` and names
``ensemble`` or ``tensorrt_llm_bls`` as the TensorRT-LLM models it serves (its TensorRT-LLM section still shows the
older manual ``pip install`` of the wheels). Not run here: no NGC registry is reachable from where this was
written, so the image's contents are read from the build script, not listed."""

METRICS_SETTINGS: dict[str, dict[str, str]] = {"": {"histogram_latencies": "true"}}
"""``tritonserver.Options.metrics_configuration``: the global group (``""``, ``GLOBAL_CONFIG_GROUP`` in core's
``metric_model_reporter.cc``) with the first-response histogram on, what ``--metrics-config
histogram_latencies=true`` sets for ``tritonserver`` (time to first token, :mod:`components.observability.metrics`)."""

CALIBRATION_SAMPLES = 512
"""fp8 calibration batch for ModelOpt (TensorRT-LLM's quantize.py default)."""

REPOSITORY_MOUNT = "/repository"
CONFIG_MOUNT = "/config"

CHECKPOINT_DIR = f"{ms.MODELS_MOUNT}/checkpoint"
ENGINE_DIR = f"{ms.MODELS_MOUNT}/engine"
TOKENIZER_DIR = f"{ms.MODELS_MOUNT}/tokenizer"
"""On the node-local models disk: the quantized checkpoint (build Job only), the built engine (built there, then
synced into every replica), and the checkpoint's tokenizer files (:data:`TOKENIZER_FILES`, replicas only)."""

TOKENIZER_FILES = (
    "tokenizer*",
    "special_tokens_map.json",
    "chat_template*",
    "config.json",
    "generation_config.json",
)
"""What of the checkpoint each replica syncs beside the engine, into ``<models>/tokenizer``: the preprocessing and
postprocessing models (``tokenizer_dir``) and the OpenAI frontend (``--tokenizer``, ``AutoTokenizer.from_pretrained``
of a local folder) read it; the chat template sits in ``tokenizer_config.json`` or, in newer checkpoints,
``chat_template.jinja``."""


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
        "--tokens_per_block",
        str(trtllm.tokens_per_block),
        "--gemm_plugin",
        "auto",
        # Paged context attention is what KV-cache reuse and chunked context run on.
        "--use_paged_context_fmha",
        "enable",
    ]
    if trtllm.kv_cache_dtype == "fp8":
        build += ["--use_fp8_context_fmha", "enable"]
    return [convert, build]


def frontend_launcher(exit_timeout_seconds: int, frontend_dir: str = OPENAI_FRONTEND_DIR) -> str:
    """The Python program (for ``python3 -c``) that runs the frontend's own ``main.py`` with its command line (the
    container's arguments), after giving its in-process server two options ``main.py`` has no flag for.

    ``main.py`` builds ``tritonserver.Server(model_repository=..., model_control_mode=..., log_*=...)`` from its
    flags and nothing else (r26.05), so the first-response histogram (:data:`METRICS_SETTINGS`) and the drain on
    SIGTERM (``exit_timeout``, ``--exit-timeout-secs`` of ``tritonserver``; default 30 s) are bound onto that
    constructor (``tritonserver.Options`` fields of core r26.05). Everything else, flags, signal handling, the
    KServe frontends, is upstream's. ``/metrics`` on the OpenAI port serves the server's Prometheus text, GPU and
    TensorRT-LLM families included (``routers/observability.py``: ``server.metrics()``; metrics are on by default
    in ``tritonserver.Options``), so no separate metrics port is needed.
    """
    server_options = {"metrics_configuration": METRICS_SETTINGS, "exit_timeout": exit_timeout_seconds}
    return "\n".join(
        [
            "import functools, runpy, sys",
            "import tritonserver",
            f"tritonserver.Server = functools.partial(tritonserver.Server, **{server_options!r})",
            # main.py imports its packages (engine, frontend, utils) from its own directory.
            f"sys.path.insert(0, {frontend_dir!r})",
            f"runpy.run_path({frontend_dir + '/main.py'!r}, run_name='__main__')",
        ]
    )


def frontend_args(tokenizer_dir: str) -> list[str]:
    """``main.py``'s flags: the repository, the tokenizer for chat templates, the ports (OpenAI and KServe)."""
    return [
        f"--model-repository={REPOSITORY_MOUNT}",
        # Chat templates come from the checkpoint's tokenizer files (HF id or local folder; a folder here).
        f"--tokenizer={tokenizer_dir}",
        f"--openai-port={TRITON_OPENAI_PORT}",
        # KServe v2 HTTP and gRPC stay available (perf_analyzer, genai-perf, port-forwarded debugging).
        "--enable-kserve-frontends",
        f"--kserve-http-port={TRITON_HTTP_PORT}",
        f"--kserve-grpc-port={TRITON_GRPC_PORT}",
        "--uvicorn-log-level=warning",
    ]


def assemble_repository_script(models: tuple[str, ...]) -> str:
    """Copy the image's Python models and put the generated ``config.pbtxt`` files in place."""
    lines = ["set -eu"]
    for model in models:
        lines.append(f"mkdir -p {REPOSITORY_MOUNT}/{model}/1")
        if model in (tc.PREPROCESSING, tc.POSTPROCESSING):
            lines.append(f"cp {TEMPLATE_REPOSITORY}/{model}/1/model.py {REPOSITORY_MOUNT}/{model}/1/model.py")
        lines.append(f"cp {CONFIG_MOUNT}/{model}.pbtxt {REPOSITORY_MOUNT}/{model}/config.pbtxt")
    return "\n".join(lines)


PORTS = (("openai", TRITON_OPENAI_PORT), ("http", TRITON_HTTP_PORT), ("grpc", TRITON_GRPC_PORT))
"""The OpenAI frontend (the API and ``/metrics``), then KServe v2 HTTP and gRPC."""


@dataclass(frozen=True)
class TritonTrtLlmServiceArgs(ms.ModelServerArgs):
    """Inputs of :class:`TritonTrtLlmService`: the first five fields are :class:`model_server.ModelServerArgs`
    (sizing's verdict carries the TensorRT-LLM build and runtime settings; the build Job's calibration data comes from
    the hub with the token), then Triton's own."""

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
    served_model_aliases: tuple[str, ...] = ()
    """More names the server answers to: the primaries it is the gateway's fallback for
    (:func:`components.gateway.renderer.fallback_aliases`), since Envoy retries the request body unchanged. Triton has
    no alias for a model, so each is an ensemble of its own over the same engine; the frontend echoes the requested
    name in the response's ``model``, and the gateway's ``x-inferplane-upstream`` header says which server answered."""


class TritonTrtLlmService(ms.ModelServer):
    """A Triton + TensorRT-LLM model server: model repository, engine-build Job, Deployment, Services (ClusterIP and
    headless), PDB, PodMonitor.

    Outputs for the autoscaler: ``deployment_name``, ``namespace``, ``service_name``; for the model cache's Pod
    Identity association: ``service_account_name`` (:func:`model_server.service_account_name` of the deployment).
    """

    def __init__(self, name: str, args: TritonTrtLlmServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        _validate(args)  # before registering anything: bad input declares nothing
        super().__init__("inferplane:index:TritonTrtLlmService", name, None, opts)
        layout = _Layout.of(args)
        child = pulumi.ResourceOptions(parent=self)

        account = ms.service_account(f"{name}-sa", args.deployment.name, args.namespace, layout.labels, child)
        repository, models = _model_repository(name, args, layout, child)
        build_job = self._engine_build(name, args, layout, account)
        self._serve(
            name,
            args,
            account,
            _server_pod(args, layout, account, repository, models),
            selector=layout.selector,
            labels=layout.labels,
            ports=PORTS,
            scrape_interval_seconds=args.scrape_interval_seconds,
            # The engine must exist in the cache before a replica fetches it.
            depends_on=[build_job],
        )

    def _engine_build(
        self, name: str, args: TritonTrtLlmServiceArgs, layout: _Layout, account: k8s.core.v1.ServiceAccount
    ) -> k8s.batch.v1.Job:
        """The Job that builds the engine once into the model cache, named after its fingerprint."""
        return k8s.batch.v1.Job(
            f"{name}-engine-build",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"{args.deployment.name}-engine-{layout.fingerprint}",
                namespace=args.namespace,
                labels=layout.labels,
            ),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=2,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels={**layout.labels, COMPONENT_LABEL: ENGINE_BUILD}),
                    spec=_build_pod(args, layout, account),
                ),
            ),
            # Calibration and the build take tens of minutes; Pulumi waits for the Job to complete.
            opts=pulumi.ResourceOptions(parent=self, custom_timeouts=pulumi.CustomTimeouts(create="90m")),
        )


@dataclass(frozen=True)
class _Layout:
    """What the children share, derived once from the inputs: labels, placement and the share of the node, where the
    checkpoint and the engine live in the cache, and the images."""

    selector: dict[str, str]
    labels: dict[str, str]
    placement: ms.Placement
    resources: ms.FittedResources
    accelerators: dict[str, str]
    fingerprint: str
    engine_uri: pulumi.Output[str]
    checkpoint_uri: pulumi.Output[str]
    engine_image: str
    cli_image: str

    @staticmethod
    def of(args: TritonTrtLlmServiceArgs) -> _Layout:
        """The layout of validated inputs."""
        assert args.model_cache_uri is not None  # _validate
        deployment, sizing = args.deployment, args.sizing
        trtllm = sizing.result.trtllm
        placement = ms.Placement.of(sizing, None)
        selector, labels = ms.labels_for(deployment.name, args.labels)
        repo = deployment.weights_repo or deployment.architecture_resolved.hf_repo
        fingerprint = engine_fingerprint(trtllm, repo)
        return _Layout(
            selector=selector,
            labels=labels,
            placement=placement,
            resources=ms.fit_resources(placement, trtllm.tensor_parallel, sizing.result.weights_bytes),
            accelerators=ms.accelerator_resources(placement, sizing),
            fingerprint=fingerprint,
            engine_uri=pulumi.Output.concat(
                args.model_cache_uri, ENGINES_PREFIX, deployment.name, "/", fingerprint, "/"
            ),
            checkpoint_uri=pulumi.Output.concat(args.model_cache_uri, repo, "/"),
            engine_image=image_reference("triton-trtllm", args.image_digests),
            cli_image=image_reference("aws-cli", args.image_digests),
        )


def _model_repository(
    name: str, args: TritonTrtLlmServiceArgs, layout: _Layout, opts: pulumi.ResourceOptions
) -> tuple[k8s.core.v1.ConfigMap, tuple[str, ...]]:
    """The ConfigMap of generated ``config.pbtxt`` files, and the names of the models it configures."""
    configs = tc.model_repository(
        args.sizing.result.trtllm,
        engine_dir=ENGINE_DIR,
        tokenizer_dir=TOKENIZER_DIR,
        served_names=(args.deployment.name, *args.served_model_aliases),
    )
    repository = k8s.core.v1.ConfigMap(
        f"{name}-model-repository",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=f"{args.deployment.name}-model-repository", namespace=args.namespace, labels=layout.labels
        ),
        data={f"{model}.pbtxt": tc.render(config) for model, config in configs.items()},
        opts=opts,
    )
    return repository, tuple(configs)


def _orchestrator_env(trtllm: TrtLlmSettings) -> tuple[k8s.core.v1.EnvVarArgs, ...]:
    """What both engine containers (the build and the server) add to :func:`model_server.engine_env`."""
    if trtllm.tensor_parallel > 1:
        # Orchestrator mode: one tritonserver process spawns a worker per rank (no mpirun in the pod).
        return (k8s.core.v1.EnvVarArgs(name="TRTLLM_ORCHESTRATOR", value="1"),)
    return ()


def _build_pod(
    args: TritonTrtLlmServiceArgs, layout: _Layout, account: k8s.core.v1.ServiceAccount
) -> k8s.core.v1.PodSpecArgs:
    """Fetch the checkpoint, convert and build it (:func:`engine_build_commands`), upload the engine."""
    sizing = args.sizing
    commands = engine_build_commands(
        sizing.result.trtllm, dtype=sizing.result.vllm.dtype, checkpoint_dir=CHECKPOINT_DIR, engine_dir=ENGINE_DIR
    )
    build_script = "\n".join(["set -eu"] + [shlex.join(command) for command in commands])
    token_mount, token_env = ms.hf_token_file()
    placement, cli_image = layout.placement, layout.cli_image
    return k8s.core.v1.PodSpecArgs(
        restart_policy="Never",
        service_account_name=account.metadata.name,
        automount_service_account_token=False,
        enable_service_links=False,
        node_selector=ms.node_selector(placement),
        tolerations=ms.tolerations(placement),
        security_context=ms.pod_security(non_root=True),
        init_containers=[
            ms.s3_sync_container(
                "fetch-checkpoint", layout.checkpoint_uri, f"{ms.MODELS_MOUNT}/hf", "models", image=cli_image
            ),
            k8s.core.v1.ContainerArgs(
                name="build-engine",
                image=layout.engine_image,
                command=["/bin/sh", "-c", build_script],
                env=ms.engine_env(*_orchestrator_env(sizing.result.trtllm), token_env),
                resources=layout.resources.requirements(layout.accelerators),
                volume_mounts=ms.engine_mounts(token_mount),
                security_context=ms.container_security(non_root=True),
            ),
        ],
        containers=[ms.s3_sync_container("upload-engine", ENGINE_DIR, layout.engine_uri, "models", image=cli_image)],
        volumes=[
            # Checkpoint, quantized checkpoint and engine side by side.
            ms.disk_volume("models", layout.resources.weights_volume_bytes * 3),
            *ms.scratch_volumes(layout.resources),
            ms.hf_token_volume(args.hf_token_secret_name),
        ],
    )


def _server_pod(
    args: TritonTrtLlmServiceArgs,
    layout: _Layout,
    account: k8s.core.v1.ServiceAccount,
    repository: k8s.core.v1.ConfigMap,
    models: tuple[str, ...],
) -> k8s.core.v1.PodSpecArgs:
    """Fetch the engine and the tokenizer, assemble the model repository, serve."""
    sizing = args.sizing
    drain = ms.drain_seconds(sizing.result.context, sizing.result.decode_step_ms)
    cli_image = layout.cli_image
    return ms.server_pod(
        account,
        layout.placement,
        layout.selector,
        args.environment,
        drain,
        non_root=True,
        init_containers=[
            ms.s3_sync_container("fetch-engine", layout.engine_uri, ENGINE_DIR, "models", image=cli_image),
            ms.s3_sync_container(
                "fetch-tokenizer",
                layout.checkpoint_uri,
                TOKENIZER_DIR,
                "models",
                image=cli_image,
                include=TOKENIZER_FILES,
            ),
            _assemble_container(layout.engine_image, models),
        ],
        containers=[
            ms.server_container(
                _server_process(sizing, layout, drain),
                layout.resources.requirements(layout.accelerators),
                sizing.result.engine_start_seconds,
                non_root=True,
            )
        ],
        volumes=[
            ms.disk_volume("models", layout.resources.weights_volume_bytes),
            *ms.scratch_volumes(layout.resources),
            k8s.core.v1.VolumeArgs(name="repository", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit="1Gi")),
            k8s.core.v1.VolumeArgs(
                name="config", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=repository.metadata.name)
            ),
        ],
    )


def _assemble_container(image: str, models: tuple[str, ...]) -> k8s.core.v1.ContainerArgs:
    """The init container that lays out the model repository (:func:`assemble_repository_script`)."""
    return k8s.core.v1.ContainerArgs(
        name="assemble-repository",
        image=image,
        command=["/bin/sh", "-c", assemble_repository_script(models)],
        resources=k8s.core.v1.ResourceRequirementsArgs(
            requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "256Mi"}
        ),
        volume_mounts=[
            k8s.core.v1.VolumeMountArgs(name="repository", mount_path=REPOSITORY_MOUNT),
            k8s.core.v1.VolumeMountArgs(name="config", mount_path=CONFIG_MOUNT, read_only=True),
        ],
        security_context=ms.container_security(non_root=True),
    )


def _server_process(sizing: DeploymentSizing, layout: _Layout, drain: int) -> ms.ServerProcess:
    """Triton behind its OpenAI frontend (:func:`frontend_launcher`), with KServe HTTP and gRPC beside it."""
    return ms.ServerProcess(
        name="triton",
        image=layout.engine_image,
        # In-flight requests finish before the server exits on SIGTERM (uvicorn drains its connections first).
        command=("python3", "-c", frontend_launcher(drain)),
        args=tuple(frontend_args(TOKENIZER_DIR)),
        ports=PORTS,
        # The frontend's readiness is the in-process server's: every model loaded (strict readiness).
        health_path=TRITON_HEALTH_PATH,
        # Offline: the tokenizer is a local folder; a missing file must fail the pod, not reach for the hub.
        env=(*_orchestrator_env(sizing.result.trtllm), k8s.core.v1.EnvVarArgs(name="HF_HUB_OFFLINE", value="1")),
        mounts=(k8s.core.v1.VolumeMountArgs(name="repository", mount_path=REPOSITORY_MOUNT),),
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
    for reason in tc.served_name_errors((deployment.name, *args.served_model_aliases)):
        add("served_model_aliases", reason)
    if errors:
        raise pulumi.InputPropertiesError("invalid TritonTrtLlmService arguments", errors=errors)
