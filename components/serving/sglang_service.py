"""``SglangService``: one model served by SGLang's OpenAI-compatible server, configured entirely from the sizing plan.

Built like :class:`components.serving.vllm_service.VllmService` from the shared pieces of
:mod:`components.serving.model_server`: a Deployment on the deployment's pool, its ClusterIP Service and the headless
``<deployment>-endpoints`` Service the gateway picks replicas through, a PodDisruptionBudget when it can scale past one
replica and a PodMonitor for ``/metrics``. Every server argument comes from
:class:`components.capacity.sizing.SglangSettings` (rendered by :func:`sglang_args`);
``tests/serving/test_sglang_service.py`` parses every argument list with the pinned SGLang release's own parser.

SGLang answers to one ``--served-model-name`` and does not compare a request's ``model`` with it (it only splits a
``base:adapter`` LoRA suffix, ``OpenAIServingBase._parse_model_parameter`` in ``sglang/srt/entrypoints/openai/
serving_base.py`` of sglang 0.5.23), so as a gateway fallback it answers the primary's requests unchanged and takes no
aliases.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from inferplane.components.capacity.sizing import SglangSettings
from inferplane.components.catalog.images import image_reference
from inferplane.components.serving import model_server as ms
from inferplane.components.serving.naming import SGLANG_HEALTH_PATH, SGLANG_PORT
from inferplane.components.spec.platform_spec import SpeculativeDecodingSpec

SGLANG_COMMAND = ("python3", "-m", "sglang.launch_server")
"""SGLang's server entry point (``sglang/launch_server.py``), as its docs and the image run it."""

SPECULATIVE_ALGORITHMS: dict[str, str] = {
    "ngram": "NGRAM",
    "draft_model": "STANDALONE",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
}
"""The spec's speculative methods as SGLang's ``--speculative-algorithm`` builtins ("Builtins: EAGLE, EAGLE3, NEXTN,
STANDALONE, NGRAM, ...", ``sglang/srt/arg_groups/fields/spec.py`` of sglang 0.5.23; STANDALONE is a separate small
draft model)."""


def speculative_args(spec: SpeculativeDecodingSpec) -> list[str]:
    """SGLang's speculative-decoding flags: a chain of ``num_speculative_tokens`` drafts verified at once.

    A draft model (EAGLE, EAGLE3, STANDALONE) proposes ``num_speculative_tokens`` steps with top-1 each, and SGLang
    verifies ``steps + 1`` tokens (with ``--speculative-eagle-topk 1`` it forces ``--speculative-num-draft-tokens`` to
    ``steps + 1``, ``sglang/srt/arg_groups/speculative_hook.py``), so both are set to what it would resolve. NGRAM
    drafts from a token trie: ``--speculative-num-draft-tokens`` is its verify width (default 12), the spec's count."""
    args = ["--speculative-algorithm", SPECULATIVE_ALGORITHMS[spec.method]]
    if spec.method == "ngram":
        return [*args, "--speculative-num-draft-tokens", str(spec.num_speculative_tokens)]
    assert spec.draft_model is not None  # SpeculativeDecodingSpec requires it except for ngram
    return [
        *args,
        "--speculative-draft-model-path",
        spec.draft_model,
        "--speculative-num-steps",
        str(spec.num_speculative_tokens),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(spec.num_speculative_tokens + 1),
    ]


def sglang_args(
    settings: SglangSettings,
    *,
    model: str,
    served_model_name: str,
    speculative: SpeculativeDecodingSpec | None,
) -> list[str]:
    """The arguments of ``python3 -m sglang.launch_server``: one flag per sizing setting, metrics always on.

    Values SGLang would otherwise resolve from the model or the GPU (``--context-length``, ``--mem-fraction-static``,
    ``--chunked-prefill-size``, ``--max-running-requests``) are passed, so the plan, not a release's heuristics, decides
    them."""
    args = [
        "--model-path",
        model,
        "--served-model-name",
        served_model_name,
        "--tp-size",
        str(settings.tp_size),
        "--context-length",
        str(settings.context_length),
        "--max-running-requests",
        str(settings.max_running_requests),
        "--mem-fraction-static",
        f"{settings.mem_fraction_static:g}",
        "--chunked-prefill-size",
        str(settings.chunked_prefill_size),
        "--kv-cache-dtype",
        settings.kv_cache_dtype,
        "--dtype",
        settings.dtype,
        "--schedule-policy",
        settings.schedule_policy,
        "--page-size",
        str(settings.page_size),
        "--stream-interval",
        str(settings.stream_interval),
    ]
    if settings.quantization is not None:
        args += ["--quantization", settings.quantization]
    if settings.disable_radix_cache:
        args.append("--disable-radix-cache")
    if speculative is not None:
        args += speculative_args(speculative)
    args += [
        "--enable-metrics",
        "--host",
        "0.0.0.0",  # the pod's own interfaces; the Service is ClusterIP-only
        "--port",
        str(SGLANG_PORT),
    ]
    return args


PORTS = (("http", SGLANG_PORT),)
"""The server's one port: the OpenAI API and ``/metrics``."""


@dataclass(frozen=True)
class SglangServiceArgs(ms.ModelServerArgs):
    """Inputs of :class:`SglangService`: the validated deployment, its sizing and where it gets weights and secrets
    (the first five fields, :class:`model_server.ModelServerArgs`), then SGLang's own."""

    model_cache_uri: pulumi.Input[str] | None = None
    """``s3://bucket/prefix/`` holding the checkpoint (``ModelCache.uri``); ``None`` falls back to the Hugging Face
    hub. The pods read it as the ServiceAccount ``service_account_name``, which the cache binds to its role."""
    scrape_interval_seconds: int = 15
    """PodMonitor scrape interval (the spec's observability interval)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Stack tags, added to every object's labels."""
    image_digests: Mapping[str, str] = field(default_factory=dict)
    """Pinned ``sha256:`` digests by catalog image name (``sglang``, ``aws-cli``); a digest wins over the catalog's
    tag (:mod:`components.catalog.images`)."""


class SglangService(ms.ModelServer):
    """An SGLang model server: Deployment, Services (ClusterIP and headless), PodDisruptionBudget (when replicas can
    exceed one), PodMonitor.

    Pods: NVIDIA GPU pools only; read-only root filesystem (weights, ``$HOME``, ``/tmp`` and ``/dev/shm`` are
    ``emptyDir`` volumes), every capability dropped, RuntimeDefault seccomp, uid :data:`model_server.RUN_AS_USER`; the
    Hugging Face token, when the hub is read, is a mounted file.

    Kubernetes objects go to the cluster of the provider the caller passes (``opts.providers`` or ``parent``).
    Outputs for the autoscaler: ``deployment_name``, ``namespace``, ``service_name``; for the model cache's Pod
    Identity association: ``service_account_name``.
    """

    def __init__(self, name: str, args: SglangServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        _validate(args)  # before registering anything: bad input declares nothing
        super().__init__("inferplane:index:SglangService", name, None, opts)
        selector, labels = ms.labels_for(args.deployment.name, args.labels)
        account = ms.service_account(
            f"{name}-sa", args.deployment.name, args.namespace, labels, pulumi.ResourceOptions(parent=self)
        )
        pod = ms.checkpoint_server_pod(
            args,
            account,
            ms.Placement.of(args.sizing, None),
            selector,
            lambda model, _drain: _server_process(args, model),
            tensor_parallel_size=args.sizing.result.sglang.tp_size,
            model_cache_uri=args.model_cache_uri,
            image_digests=args.image_digests,
            non_root=True,
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


def _server_process(args: SglangServiceArgs, model: str) -> ms.ServerProcess:
    """``sglang.launch_server`` with every flag from sizing.

    SGLang has no drain flag of its own: the pod's grace period (:func:`model_server.server_pod`) gives in-flight
    requests one full generation after the ``preStop`` sleep."""
    deployment = args.deployment
    return ms.ServerProcess(
        name="sglang",
        image=image_reference("sglang", args.image_digests),
        command=SGLANG_COMMAND,
        args=tuple(
            sglang_args(
                args.sizing.result.sglang,
                model=model,
                served_model_name=deployment.name,
                speculative=deployment.speculative_decoding,
            )
        ),
        ports=PORTS,
        health_path=SGLANG_HEALTH_PATH,
    )


def _validate(args: SglangServiceArgs) -> None:
    """Refuse inputs that cannot serve, naming the field; nothing is created when any check fails."""
    errors: list[pulumi.errors.InputPropertyErrorDetails] = []

    def add(path: str, reason: str) -> None:
        errors.append({"property_path": path, "reason": reason})

    ms.check_engine_inputs("SglangService", "sglang", args.deployment, args.sizing, add)
    if ms.Placement.of(args.sizing, None).is_tpu:
        add("sizing.pool", f"pool {args.sizing.pool!r} is a TPU pool; SGLang's image serves NVIDIA GPUs")
    if args.scrape_interval_seconds <= 0:
        add("scrape_interval_seconds", "must be positive")
    if errors:
        raise pulumi.InputPropertiesError("invalid SglangService arguments", errors=errors)
