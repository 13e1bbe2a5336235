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
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.capacity.sizing import KvRole, VllmSettings
from inferplane.components.catalog.images import engine_image, image_reference
from inferplane.components.serving import model_server as ms
from inferplane.components.serving.naming import VLLM_HEALTH_PATH, VLLM_PORT
from inferplane.components.spec.platform_spec import SpeculativeDecodingSpec

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


NIXL_SIDE_CHANNEL_PORT = 5600
"""Where a NixlConnector engine's scheduler answers the handshake its peers open before pulling blocks
(``VLLM_NIXL_SIDE_CHANNEL_PORT``, vLLM 0.32 default 5600, plus the data-parallel rank). Its host must be an address
the peer reaches (``VLLM_NIXL_SIDE_CHANNEL_HOST``: the pod's IP), not the default ``localhost``."""


def nixl_transfer_config(
    role: KvRole, *, efa: bool, device: Literal["cuda", "cpu"] = "cuda", lease_seconds: int | None = None
) -> str:
    """``--kv-transfer-config`` JSON for vLLM's NixlConnector (keys are vLLM 0.32 ``KVTransferConfig`` fields).

    On EFA the LIBFABRIC backend: NIXL's default UCX lands on a TCP-speed transport there ("For EFA, the LIBFABRIC
    backend must be selected", NVIDIA Dynamo ``docs/kubernetes/cloud-providers/eks/efa.md``; llm-d's AWS overlay
    passes the same); UCX elsewhere (NVLink, RoCE, TCP). ``device`` is where the KV buffers live: ``cpu`` only in
    vLLM's CPU build, which the tests run.

    ``kv_load_failure_policy: recompute``: a decode replica whose pull fails (the peer's handshake timed out, a
    transfer failed) computes the prompt itself instead of failing the request (vLLM 0.32's default ``fail``); seen
    here when a loaded machine kept the prefill side from answering the 5 s handshake.

    ``lease_seconds`` sets ``kv_lease_duration``, how long a prefill replica holds a request's blocks for the pull
    (vLLM's default 30 s when None; the tests pass it explicitly). NIXL 1.5.1's Python agent runs a progress thread
    that spins on ``sched_yield`` (``pthrDelay = 0``), a core per server: one of many on a GPU node, but on the tests'
    2-core machine it stalled each pull until the lease ran out, so the tests' servers run without it
    (``tests/nixl_quiet``)."""
    config = {
        "kv_connector": "NixlConnector",
        "kv_role": role,
        "kv_buffer_device": device,
        "kv_connector_extra_config": {
            "backends": ["LIBFABRIC" if efa else "UCX"],
            **({"kv_lease_duration": lease_seconds} if lease_seconds is not None else {}),
        },
        "kv_load_failure_policy": "recompute",
    }
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


OFFLOADING_CONNECTOR = "OffloadingConnector"
"""vLLM's native host-memory KV tier, what ``--kv-offloading-size ... --kv-offloading-backend native`` installs."""


def kv_transfer_config(settings: VllmSettings) -> str | None:
    """``--kv-transfer-config`` of a disaggregated role: its NixlConnector; with a host KV tier as well, vLLM's
    MultiConnector over both, the NixlConnector first (``kv_connector_extra_config.connectors``). vLLM 0.32's
    ``--kv-offloading-size`` overwrites the connector of a given ``--kv-transfer-config``
    (``VllmConfig._post_init_kv_transfer_config``), so with a transfer the tier goes into the MultiConnector as the
    OffloadingConnector with the ``cpu_bytes_to_use`` that flag would have set (GiB x 2^30, summed over the ranks).
    None when the replica is aggregated."""
    transfer = settings.kv_transfer
    if transfer is None:
        return None
    nixl = nixl_transfer_config(transfer.role, efa=transfer.backend == "LIBFABRIC")
    if settings.kv_offloading_size_gib is None:
        return nixl
    offloading = {
        "kv_connector": OFFLOADING_CONNECTOR,
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": settings.kv_offloading_size_gib * 2**30},
    }
    config = {
        "kv_connector": "MultiConnector",
        "kv_role": transfer.role,
        "kv_connector_extra_config": {"connectors": [json.loads(nixl), offloading]},
    }
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


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
    args += ["--stream-interval", str(settings.stream_interval)]
    transfer = kv_transfer_config(settings)
    if transfer is not None:
        args += ["--kv-transfer-config", transfer]
    elif settings.kv_offloading_size_gib is not None:
        # ``native`` is vLLM's own OffloadingConnector, which takes the size; ``lmcache`` would ignore it.
        args += ["--kv-offloading-size", str(settings.kv_offloading_size_gib), "--kv-offloading-backend", "native"]
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


PORTS = (("http", VLLM_PORT),)
"""The server's one port: the OpenAI API and ``/metrics``."""


@dataclass(frozen=True)
class VllmServiceArgs(ms.ModelServerArgs):
    """Inputs of :class:`VllmService`: the validated deployment, its sizing and where it gets weights and secrets
    (the first five fields, :class:`model_server.ModelServerArgs`), then vLLM's own."""

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
        placement = ms.Placement.of(args.sizing, args.tpu_topology)
        selector, labels = ms.labels_for(args.deployment.name, args.labels)
        account = ms.service_account(
            f"{name}-sa", args.deployment.name, args.namespace, labels, pulumi.ResourceOptions(parent=self)
        )
        pod = ms.checkpoint_server_pod(
            args,
            account,
            placement,
            selector,
            lambda model, drain: _server_process(args, placement, model, drain),
            tensor_parallel_size=args.sizing.result.vllm.tensor_parallel_size,
            model_cache_uri=args.model_cache_uri,
            image_digests=args.image_digests,
            non_root=not placement.is_tpu,
        )
        self._serve(
            name,
            args,
            account,
            pod,
            selector=selector,
            labels=labels,
            ports=PORTS,
            scrape_interval_seconds=args.scrape_interval_seconds,
        )


def _server_process(args: VllmServiceArgs, placement: ms.Placement, model: str, drain: int) -> ms.ServerProcess:
    """``vllm serve`` with every flag from sizing, and a drain as long as one full generation."""
    deployment = args.deployment
    return ms.ServerProcess(
        name="vllm",
        image=image_reference(engine_image("vllm", tpu=placement.is_tpu), args.image_digests),
        command=VLLM_COMMAND,
        args=tuple(
            vllm_args(
                args.sizing.result.vllm,
                model=model,
                served_model_name=deployment.name,
                speculative=deployment.speculative_decoding,
                shutdown_timeout_seconds=drain,
                aliases=args.served_model_aliases,
                tpu=placement.is_tpu,
            )
        ),
        ports=PORTS,
        health_path=HEALTH_PATH,
        env=(
            k8s.core.v1.EnvVarArgs(name="VLLM_NO_USAGE_STATS", value="1"),
            *(_side_channel_env() if args.sizing.result.vllm.kv_transfer is not None else ()),
        ),
    )


def _side_channel_env() -> tuple[k8s.core.v1.EnvVarArgs, ...]:
    """Where a disaggregated replica answers NIXL's handshake: its pod's IP (the default ``localhost`` is unreachable
    from the peer pod; KServe's and llm-d's manifests set the same from the downward API) and the fixed port the
    NetworkPolicy opens between the roles."""
    pod_ip = k8s.core.v1.EnvVarSourceArgs(field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path="status.podIP"))
    return (
        k8s.core.v1.EnvVarArgs(name="VLLM_NIXL_SIDE_CHANNEL_HOST", value_from=pod_ip),
        k8s.core.v1.EnvVarArgs(name="VLLM_NIXL_SIDE_CHANNEL_PORT", value=str(NIXL_SIDE_CHANNEL_PORT)),
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
