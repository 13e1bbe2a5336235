"""The typed description of one environment's inference platform (``PlatformSpec``).

A stack file carries it under the ``inferplane:platform`` config key, the same YAML the ``pulumi`` CLI reads.
Validation happens in two passes, and both collect every problem before raising:

1. structure (pydantic): types, ranges, unknown keys (``extra="forbid"`` everywhere);
2. meaning (:func:`check_platform`): references between sections and against the catalogs, e.g. a model's
   ``max_context`` against what the model supports, a pool's accelerator against its instance type.

Either pass raises :class:`SpecError`, whose issues carry the key path (``models[1].max_context``) so the CLI can
name the stack file and the key. Nothing downstream ever sees a spec that failed either pass.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inferplane.components.catalog import INSTANCE_TYPES, MODELS, ModelArchitecture, get_accelerator
from inferplane.components.catalog.accelerators import AcceleratorId
from inferplane.components.catalog.embedders import EMBEDDING_MODELS, EmbeddingModel
from inferplane.components.catalog.images import DIGEST_PATTERN, ImageName
from inferplane.components.catalog.instances import tpu_topology_chips
from inferplane.components.catalog.models import HF_REPO_PATTERN, MAX_CONTEXT_TOKENS
from inferplane.components.catalog.system_nodes import (
    DEFAULT_EKS_SYSTEM_INSTANCE_TYPE,
    DEFAULT_GKE_SYSTEM_MACHINE_TYPE,
    SYSTEM_NODE_TYPES,
    SystemCloud,
)
from inferplane.components.spec.gcp_labels import to_gcp_labels
from inferplane.components.spec.tags import aws_tag_problems, label_problems

Environment = Literal["dev", "staging", "prod"]
CapacityType = Literal["on_demand", "spot", "capacity_block"]
WeightsDtype = Literal["bf16", "fp16", "fp8", "int4"]
KvCacheDtype = Literal["auto", "bf16", "fp16", "fp8"]
Engine = Literal["vllm", "triton", "sglang"]
AmiFamily = Literal["al2023", "bottlerocket"]
EndpointAccess = Literal["private", "public_and_private"]
ControlPlaneLog = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]
SpeculativeMethod = Literal["ngram", "draft_model", "eagle", "eagle3"]
RoutingPolicy = Literal["prefix_aware", "least_request"]

# RFC 1123 label: every name becomes part of Kubernetes and AWS resource names.
NAME_MAX_LENGTH = 40
"""Longest name of a pool, model or tier (what :data:`Name` admits)."""
_DNS_LABEL = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
Name = Annotated[str, Field(pattern=_DNS_LABEL, description="Lower-case RFC 1123 label, at most 40 characters.")]
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")

ALL_CONTROL_PLANE_LOGS: tuple[ControlPlaneLog, ...] = (
    "api",
    "audit",
    "authenticator",
    "controllerManager",
    "scheduler",
)
"""Every EKS control-plane log type (botocore ``eks`` model, ``LogType``); all are enabled by default."""

LOG_RETENTION_DAYS: dict[Environment, int] = {"dev": 90, "staging": 365, "prod": 365}
"""Control-plane log retention when ``cluster.log_retention_days`` is not given. AWS FSBP CloudWatch.16 keeps log
groups at least a year: staging and prod do; dev keeps 90 days (a disposable environment's logs)."""

LOG_RETENTION_VALUES: frozenset[int] = frozenset(
    (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
)
"""The retention periods CloudWatch Logs accepts (botocore ``logs`` model, shape ``Days``; tests check it)."""

MIN_PROD_LOG_RETENTION_DAYS = 365
"""Prod never keeps less than a year of audit trail (AWS FSBP CloudWatch.16)."""

_IAM_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")


MAX_CONCURRENCY = 4096
"""Most concurrent sequences per replica, for the spec and ``inferplane size --concurrency`` alike."""
MAX_GPUS_PER_REPLICA = 64
"""Most accelerators one replica may span (tensor parallelism stays within a node; none has more)."""
MAX_SYSTEM_NODES = 10
"""Most nodes ``cluster.system_nodes`` may keep."""
MAX_POOL_NODES = 1000
"""Most nodes a pool may keep at minimum (an EKS managed node group holds at most 1000 nodes per group quota)."""


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class _Spec(BaseModel):
    """Base for every spec model: unknown keys are errors and values never change after validation.

    No text may hold control characters: they end up in resource names, arguments and terminals (an escape
    sequence in a stack file would otherwise reach whoever reads the preview).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _printable(cls, value: Any) -> Any:
        texts = (
            [value]
            if isinstance(value, str)
            else [v for v in value if isinstance(v, str)]
            if isinstance(value, tuple)
            else []
        )
        if any(_CONTROL_CHARACTERS.search(text) for text in texts):
            raise ValueError("control characters (escape sequences, NUL, newlines) are not allowed")
        return value


class ClusterSpec(_Spec):
    """The EKS control plane."""

    kubernetes_version: str = Field(
        default="1.35", pattern=r"^1\.\d{2}$", description="EKS Kubernetes minor version, e.g. ``1.35``."
    )
    endpoint_access: EndpointAccess = Field(
        default="private",
        description="``private``: the API server is reachable only inside the VPC (prod). ``public_and_private``: "
        "also from ``public_access_cidrs``.",
    )
    public_access_cidrs: tuple[str, ...] = Field(
        default=(), description="CIDRs allowed to reach a public endpoint; required when the endpoint is public."
    )
    log_types: tuple[ControlPlaneLog, ...] = Field(
        default=ALL_CONTROL_PLANE_LOGS,
        description="Control-plane log types sent to CloudWatch; every type by default, and the cluster refuses "
        "fewer (CIS EKS 2.1.1, EKS Best Practices).",
    )
    log_retention_days: int | None = Field(
        default=None,
        description="Days CloudWatch keeps the control-plane logs; one of CloudWatch's retention values. By default "
        "per environment (``LOG_RETENTION_DAYS``: dev 90, staging and prod 365); prod refuses less than 365.",
    )
    admin_principals: tuple[str, ...] = Field(
        default=(),
        description="IAM role or user ARNs that may assume the cluster-admin role. Empty: only the principal that "
        "deploys the stack (its role or user) is trusted; never the whole account.",
    )
    system_instance_type: str = Field(
        default=DEFAULT_EKS_SYSTEM_INSTANCE_TYPE,
        pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$",
        description="Instance type of the system node group, from the catalog's system node types (m7i, m6i, m5; "
        "large to 4xlarge). It carries the gateway, the served embedder and the cluster's add-ons: sizing refuses a "
        "type whose nodes cannot hold them.",
    )
    system_nodes: int = Field(
        default=2,
        ge=1,
        le=MAX_SYSTEM_NODES,
        description="Nodes the system node group keeps; the cluster autoscaler may grow it to twice that. Sizing "
        "refuses a count whose nodes cannot hold the gateway at its floor (minimum) and its ceiling (maximum).",
    )

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a valid CIDR block: {exc}") from None
        return value

    @field_validator("admin_principals")
    @classmethod
    def _principals(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arn in value:
            if not _IAM_PRINCIPAL.match(arn):
                raise ValueError(f"{arn!r} is not an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)")
        if len(set(value)) != len(value):
            raise ValueError("admin_principals repeat")
        return value

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int | None) -> int | None:
        if value is not None and value not in LOG_RETENTION_VALUES:
            allowed = ", ".join(str(days) for days in sorted(LOG_RETENTION_VALUES))
            raise ValueError(f"{value} is not a CloudWatch Logs retention period ({allowed})")
        return value

    @model_validator(mode="after")
    def _endpoint(self) -> ClusterSpec:
        if self.endpoint_access == "public_and_private" and not self.public_access_cidrs:
            raise ValueError("a public endpoint needs an explicit public_access_cidrs allowlist")
        if self.endpoint_access == "private" and self.public_access_cidrs:
            raise ValueError("public_access_cidrs is set but endpoint_access is private")
        return self


class PoolSpec(_Spec):
    """An accelerator node pool: an EKS managed node group, or a GKE TPU node pool."""

    name: Name = Field(description="Pool name; model deployments refer to it.")
    accelerator: AcceleratorId = Field(description="Catalog accelerator; must match the instance type.")
    instance_type: str = Field(description="EC2 instance type or GKE machine type from the catalog.")
    capacity_type: CapacityType = Field(default="on_demand", description="How the nodes are bought.")
    capacity_reservation_id: str | None = Field(
        default=None,
        pattern=r"^cr-[0-9a-f]{8,17}$",
        description="Capacity Block reservation (``cr-...``); required for ``capacity_block``.",
    )
    zone: str | None = Field(
        default=None, description="Pin the pool to one zone (required for capacity blocks: the reservation's zone)."
    )
    efa: bool = Field(default=False, description="Attach EFA interfaces and a cluster placement group.")
    disk_gib: int = Field(default=200, ge=50, le=16384, description="Encrypted gp3 root volume, GiB.")
    ami_family: AmiFamily = Field(default="al2023", description="EKS accelerated AMI: AL2023 NVIDIA or Bottlerocket.")
    min_nodes: int = Field(
        default=0, ge=0, le=MAX_POOL_NODES, description="Nodes kept even when no replica needs them."
    )
    tpu_topology: str | None = Field(
        default=None, pattern=r"^\d+x\d+$", description="GKE TPU slice topology (``2x4``); TPU pools only."
    )


class SpeculativeDecodingSpec(_Spec):
    """Speculative decoding, passed to vLLM as ``--speculative-config`` JSON."""

    method: SpeculativeMethod = Field(description="``ngram`` (prompt lookup), ``draft_model``, ``eagle``/``eagle3``.")
    draft_model: str | None = Field(
        default=None,
        pattern=HF_REPO_PATTERN,
        description="Hugging Face repo of the draft or EAGLE head; required except for ``ngram``.",
    )
    num_speculative_tokens: int = Field(default=3, ge=1, le=10, description="Tokens proposed per step.")
    prompt_lookup_max: int | None = Field(default=None, ge=1, le=16, description="n-gram window (``ngram`` only).")

    @model_validator(mode="after")
    def _draft(self) -> SpeculativeDecodingSpec:
        if self.method != "ngram" and not self.draft_model:
            raise ValueError(f"method {self.method!r} needs draft_model")
        if self.method == "ngram" and self.draft_model:
            raise ValueError("method 'ngram' takes no draft_model")
        if self.method != "ngram" and self.prompt_lookup_max is not None:
            raise ValueError("prompt_lookup_max applies to method 'ngram' only")
        return self


STREAM_CHUNK_MS = 100
"""Default longest wait of a streamed token for the ones sent with it: 0.1 s is about the limit for a reader to feel
the system react instantaneously (J. Nielsen, "Response Times: The 3 Important Limits", 1993, after Card, Moran and
Newell). At a GPU's 10-30 ms decode step, a token a chunk means 30-100 SSE events a second per stream, each relayed
and read for its usage by the gateway's Envoy (about 0.05 ms of its CPU a chunk: docs/gateway.md, "The gateway pod's
CPU"); a chunk of every token of the last 100 ms reads the same."""

PREFILL_ROLE_SUFFIX = "-prefill"
"""The prefill role of a disaggregated model is named ``<model>-prefill`` (its Deployment, Service, scaler and the
gateway's cluster)."""


class PrefillRoleSpec(_Spec):
    """The prefill role of a disaggregated model: replicas that compute prompts and hold their KV blocks until the
    decode replicas (the model's own ``pool``, ``gpus_per_replica`` and replica range) pull them over the pools'
    interconnect (vLLM's NixlConnector)."""

    pool: Name | None = Field(
        default=None, description="Pool of the prefill replicas; the model's own pool when unset."
    )
    gpus_per_replica: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS_PER_REPLICA,
        description="Force the prefill role's tensor-parallel size; by default sizing picks the smallest fit.",
    )
    concurrency: int | None = Field(
        default=None,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Prompts one prefill replica holds at once, computing or waiting for the decode's pull; the "
        "model's concurrency when unset.",
    )
    min_replicas: int = Field(default=1, ge=1, description="Prefill replicas kept when idle.")
    max_replicas: int = Field(default=1, ge=1, le=256, description="Prefill replica ceiling for the autoscaler.")

    @model_validator(mode="after")
    def _range(self) -> PrefillRoleSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} exceeds max_replicas {self.max_replicas}")
        return self


class DisaggregationSpec(_Spec):
    """Serve the model as two roles: long prompts are computed on prefill replicas and their KV cache moved to the
    decode replicas, so a burst of long prompts never stalls running streams. Worth it for medium-large models with
    long prompts (llm-d's guide: "10k ISL | 1k OSL, not 200 ISL | 200 OSL"); vLLM's own docs: it "DOES NOT improve
    throughput"."""

    prefill: PrefillRoleSpec = Field(default_factory=PrefillRoleSpec, description="The prefill role.")
    min_uncached_tokens: int = Field(
        default=256,
        ge=1,
        le=MAX_CONTEXT_TOKENS,
        description="Prompts with fewer tokens than this beyond the decode replica's cached prefix skip the prefill "
        "role and are computed where they decode (llm-d's ``nonCachedTokens``).",
    )


class SloSpec(_Spec):
    """Latency objectives at p95; alerts and engine batching budgets derive from them."""

    ttft_p95_ms: int = Field(default=2000, gt=0, le=600_000, description="Time to first token, p95, milliseconds.")
    itl_p95_ms: int = Field(default=100, gt=0, le=60_000, description="Inter-token latency, p95, milliseconds.")


class RoutingSpec(_Spec):
    """How the gateway picks a replica of a model for each request."""

    policy: RoutingPolicy = Field(
        default="prefix_aware",
        description="``prefix_aware``: the replica likely to hold the prompt's prefix in its KV cache, bounded by "
        "load (NVIDIA Dynamo's KV router cost: overlap_weight x prefill blocks + decode blocks); ``least_request``: "
        "the least loaded replica.",
    )
    # NVIDIA Dynamo's ``overlap_score_weight`` (ai-dynamo/dynamo docs/design_docs/router_design.md and
    # docs/router/kv_cache_routing.md, ``--kv-overlap-score-weight``: default 1, 0 = pure load balancing). Ours is 8,
    # measured (benchmarks/routing.py, docs/gateway.md "The weight"): at Dynamo's 1 a replica holding a hot prefix
    # looked busy after a few requests sharing it, the next ones recomputed the prefix elsewhere and the copies
    # evicted other prefixes (75% of prompt tokens served from cache against an ideal 89%; 85% at 8). The load bound,
    # not the weight, keeps a hot replica from overload.
    overlap_weight: float = Field(
        default=8.0,
        ge=0.0,
        le=16.0,
        description="What a cached prefix block is worth against a block of decode load (Dynamo's "
        "``overlap_score_weight``); 0 is pure load balancing.",
    )
    # llm-d's "Intelligent Inference Scheduling" (llm-d/llm-d.github.io
    # blog/2025-09-03_intelligent-inference-scheduling-with-llm-d.md): with high prefix sharing a prefix-only scorer
    # "frequently overloaded replicas, succeeding in only ~55% of requests"; prefix + load kept 100%.
    load_bound: bool = Field(
        default=True,
        description="A replica running its ``max_num_seqs`` is never picked; requests wait in the gateway's bounded "
        "queue or get 429. Off only for experiments: affinity without a load bound piles requests onto hot replicas "
        "(llm-d measured about 55% success). Prod's policy pack refuses it off.",
    )
    # Measured on the simulated fleet (benchmarks/routing_sim.py, docs/simulate.md "The routing benchmark"): prod's
    # 70B on 8 replicas, 20 groups of 6k-token prefixes at 8 req/s. Behind one gateway, holding changed nothing
    # beyond the runs' spread (hit share 82.9% with, 82.5% without; TTFT p90 595 / 638 ms); behind three it lost
    # (75.2% against 85.4%, TTFT p90 1,740 against 648 ms, one replica taking 35 times another's requests): each
    # gateway worker held requests for the replica its own index named, and they piled up there.
    hold: bool = Field(
        default=False,
        description="Hold a request whose prefix's replica is full for that replica, at most as long as the prefill "
        "it would save elsewhere (ski rental), instead of spilling at once. Off by default: at GPU speed a slot frees "
        "within milliseconds anyway, and with several gateways holding piled requests onto one replica.",
    )


class ModelDeploymentSpec(_Spec):
    """One served model: what it is, where it runs, how far it scales."""

    name: Name = Field(description="Deployment name; also the served model name clients ask for.")
    model: str | None = Field(default=None, description="Catalog model id (e.g. ``llama-3.3-70b``).")
    architecture: ModelArchitecture | None = Field(
        default=None, description="A custom model's architecture, instead of ``model``."
    )
    engine: Engine = Field(
        default="vllm",
        description="Serving engine: vLLM, Triton + TensorRT-LLM, or SGLang (RadixAttention: wins on prefix-heavy "
        "agentic and multi-turn traffic).",
    )
    pool: Name = Field(description="Name of the pool the replicas run on.")
    weights_dtype: WeightsDtype = Field(default="bf16", description="Weight precision: bf16, fp16, fp8 or int4 (AWQ).")
    weights_repo: str | None = Field(
        default=None,
        pattern=HF_REPO_PATTERN,
        description="Override the weights repository (an AWQ checkpoint for int4).",
    )
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto", description="KV-cache precision; ``auto`` is the model's 16-bit dtype, as in vLLM."
    )
    max_context: int = Field(
        gt=0, le=MAX_CONTEXT_TOKENS, description="Longest sequence (prompt + output) served, tokens."
    )
    concurrency: int = Field(
        gt=0, le=MAX_CONCURRENCY, description="Target concurrent sequences per replica at max_context."
    )
    gpus_per_replica: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS_PER_REPLICA,
        description="Force the tensor-parallel size; by default sizing picks the smallest fit.",
    )
    gpu_memory_utilization: float = Field(
        default=0.90, ge=0.5, le=0.93, description="Share of device memory the engine may take (never above 0.93)."
    )
    min_replicas: int = Field(default=1, ge=0, description="Replicas kept when idle (0 needs scale_to_zero).")
    max_replicas: int = Field(default=1, ge=1, le=256, description="Replica ceiling for the autoscaler.")
    scale_to_zero: bool = Field(default=False, description="Allow the autoscaler to remove every replica when idle.")
    routing_tier: Name = Field(default="standard", description="Gateway tier that routes to this model.")
    routing: RoutingSpec | None = Field(
        default=None,
        description="How the gateway picks this model's replica; overrides its tier's ``routing`` and "
        "``gateway.routing``.",
    )
    prefix_caching: bool = Field(default=True, description="Reuse KV blocks across requests sharing a prefix.")
    prefix_heavy: bool = Field(
        default=False,
        description="Most prompts share long prefixes (agentic loops, multi-turn chat, few-shot templates). SGLang "
        "then schedules the waiting request with the longest cached prefix first (``--schedule-policy lpm``); needs "
        "prefix_caching.",
    )
    chunked_prefill: bool = Field(default=True, description="Split long prompts so decodes keep flowing.")
    host_kv_cache: bool = Field(
        default=False,
        description="Keep prefix blocks beyond the device's KV pool in the node's host memory (vLLM's KV offloading, "
        "``--kv-offloading-size``), sized from the replica's share of the node's memory: prefix reuse is then capped "
        "by host memory (2 TiB on a p5), not HBM. vLLM on NVIDIA GPUs, with prefix_caching.",
    )
    disaggregation: DisaggregationSpec | None = Field(
        default=None,
        description="Serve prefill and decode as separate roles with a KV transfer between them (vLLM on NVIDIA "
        "pools); aggregated (one role doing both) when unset.",
    )
    speculative_decoding: SpeculativeDecodingSpec | None = Field(default=None, description="Optional speculation.")
    slo: SloSpec = Field(default_factory=SloSpec, description="Latency objectives.")
    stream_chunk_ms: int = Field(
        default=STREAM_CHUNK_MS,
        ge=0,
        le=2000,
        description="How long a streamed answer's tokens may gather before they are sent, milliseconds: the engine "
        "sends the first token at once, then every floor(stream_chunk_ms / decode step) tokens together (vLLM's and "
        "SGLang's ``--stream-interval``), each chunk one SSE event to the client that the gateway's Envoy relays "
        "(about 0.05 ms of its CPU a chunk); 0 sends every token alone.",
    )
    image_digest: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="``sha256:`` digest pinning this deployment's engine image (vLLM, vLLM TPU, Triton or SGLang); "
        "wins over the platform's ``image_digests`` and the catalog's tag.",
    )

    @model_validator(mode="after")
    def _shape(self) -> ModelDeploymentSpec:
        if (self.model is None) == (self.architecture is None):
            raise ValueError("give exactly one of model (a catalog id) or architecture (a custom model)")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} exceeds max_replicas {self.max_replicas}")
        if self.min_replicas == 0 and not self.scale_to_zero:
            raise ValueError("min_replicas 0 needs scale_to_zero: true")
        return self

    @property
    def architecture_resolved(self) -> ModelArchitecture:
        """The architecture, from the catalog or the custom block (valid after :func:`check_platform`)."""
        if self.architecture is not None:
            return self.architecture
        assert self.model is not None  # guaranteed by _shape
        return MODELS[self.model]

    @property
    def model_label(self) -> str:
        """What to call the model in messages: the catalog id or the custom repository."""
        return self.model or self.architecture_resolved.hf_repo

    @property
    def prefill_role(self) -> ModelDeploymentSpec | None:
        """The prefill role of a disaggregated model as a deployment of its own (named ``<name>-prefill``, on its
        pool, with its size and replica range; the same model, precisions, context and prefix cache); None when the
        model is aggregated. Its engine settings are sized for the role (:mod:`components.capacity.sizing`)."""
        if self.disaggregation is None:
            return None
        role = self.disaggregation.prefill
        return self.model_copy(
            update={
                "name": f"{self.name}{PREFILL_ROLE_SUFFIX}",
                "pool": role.pool or self.pool,
                "gpus_per_replica": role.gpus_per_replica,
                "concurrency": role.concurrency or self.concurrency,
                "min_replicas": role.min_replicas,
                "max_replicas": role.max_replicas,
                "scale_to_zero": False,
                "speculative_decoding": None,
                "disaggregation": None,
            }
        )


CacheEvictionPolicy = Literal[
    "volatile-lru", "allkeys-lru", "volatile-lfu", "allkeys-lfu", "volatile-ttl", "volatile-random", "allkeys-random"
]
"""``maxmemory-policy`` values the cache may use (``noeviction`` would turn a full cache into failed writes)."""


STATIC_EMBEDDER_THRESHOLD = 0.95
"""Default least similarity of a semantic hit for the static and endpoint embedders: static word vectors cannot see
word order, so the guards carry the safety, and a margin above the 0.81 from which ``inferplane cache eval`` finds no
false hit on the shipped set with every guard on keeps it safe on prompts the set lacks. A served catalog model brings
its own measured threshold (:data:`components.catalog.embedders.EMBEDDING_MODELS`)."""


class CacheEmbedderSpec(_Spec):
    """What turns prompts into vectors for the semantic cache."""

    kind: Literal["wordllama", "endpoint", "served"] = Field(
        default="wordllama",
        description="``wordllama``: in the processor, static embeddings the image ships (no network, ~20 us); "
        "``endpoint``: an OpenAI-compatible ``/v1/embeddings`` service you run; ``served``: a sentence-embedding "
        "model from the catalog that the platform deploys beside the gateway (vLLM's pooling runner on the system "
        "nodes' CPUs), reachable from the gateway only.",
    )
    url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description="Base URL of the endpoint's OpenAI API (``http://embed.ml:8000/v1``); endpoint only.",
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        description="``endpoint``: the ``model`` of the embeddings requests; ``served``: the catalog's embedding "
        "model (``all-minilm-l6-v2``).",
    )
    dimensions: int | None = Field(
        default=None,
        ge=2,
        le=32768,
        description="Vector length: 64, 128 or 256 for wordllama (default 256); the endpoint's; a served model's "
        "comes from the catalog.",
    )
    timeout_ms: int = Field(default=50, ge=1, le=5000, description="Per-request timeout of the endpoint.")
    replicas: int = Field(
        default=2, ge=1, le=16, description="Served embedder pods (two by default: one can be drained at a time)."
    )
    cpus: int = Field(
        default=1,
        ge=1,
        le=16,
        description="CPU cores per served embedder pod, also its OpenMP threads: one embeds a short prompt in a "
        "few milliseconds and a pod serves requests in batches.",
    )

    @model_validator(mode="after")
    def _kind(self) -> CacheEmbedderSpec:
        if self.kind == "endpoint":
            missing = [f for f in ("url", "model", "dimensions") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"an endpoint embedder needs {', '.join(missing)}")
        elif self.kind == "served":
            if self.model is None:
                raise ValueError(f"a served embedder needs model, one of: {', '.join(sorted(EMBEDDING_MODELS))}")
            if self.model not in EMBEDDING_MODELS:
                known = ", ".join(sorted(EMBEDDING_MODELS))
                raise ValueError(f"model {self.model!r} is not a catalog embedding model; known: {known}")
            if self.url is not None:
                raise ValueError("a served embedder's url is its in-cluster Service; set kind 'endpoint' for your own")
            served = EMBEDDING_MODELS[self.model]
            if self.dimensions not in (None, served.dimensions):
                raise ValueError(f"{self.model} embeds in {served.dimensions} dimensions, not {self.dimensions}")
        else:
            if self.url is not None or self.model is not None:
                raise ValueError("url and model apply to kinds 'endpoint' and 'served' only")
            if self.dimensions not in (None, 64, 128, 256):
                raise ValueError(f"wordllama's bundled model has 64, 128 or 256 dimensions, not {self.dimensions}")
        return self

    @property
    def served_model(self) -> EmbeddingModel | None:
        """The catalog model the platform serves, for kind ``served``."""
        return EMBEDDING_MODELS[self.model] if self.kind == "served" and self.model is not None else None


class CacheSpec(_Spec):
    """The gateway's response cache: an ElastiCache replication group."""

    enabled: bool = Field(default=True, description="Create the cache.")
    engine: Literal["valkey", "redis"] = Field(default="valkey", description="ElastiCache engine.")
    node_type: str = Field(
        default="cache.r7g.large", pattern=r"^cache\.[a-z0-9]+\.[a-z0-9]+$", description="Node type."
    )
    replicas: int = Field(default=2, ge=1, le=6, description="Cache nodes (primary plus replicas).")
    semantic: bool = Field(default=True, description="Also serve near-duplicate prompts by embedding similarity.")
    semantic_similarity_threshold: float | None = Field(
        default=None,
        gt=0.5,
        le=1.0,
        description="Least cosine similarity of a semantic hit. Default: a served model's measured threshold from "
        "the catalog, 0.95 for the other embedders (``inferplane cache eval`` measures one).",
    )
    ttl_seconds: int = Field(default=3600, ge=1, description="Entry lifetime.")
    embedder: CacheEmbedderSpec = Field(default_factory=CacheEmbedderSpec, description="Semantic cache embedder.")
    semantic_guards: bool = Field(
        default=True,
        description="Refuse semantic hits whose numbers, negations, names or directions differ (never off in prod).",
    )
    max_entry_bytes: int = Field(
        default=262_144, ge=1024, le=16 * 1024 * 1024, description="Larger answers are not stored."
    )
    eviction_policy: CacheEvictionPolicy = Field(
        default="volatile-lru", description="``maxmemory-policy`` of the cache's parameter group."
    )
    cache_tool_requests: bool = Field(default=False, description="Cache requests that offer tools or functions.")
    cache_non_text: bool = Field(default=False, description="Cache requests with non-text content (images, audio).")
    allow_nondeterministic_opt_in: bool = Field(
        default=True, description="Let clients cache sampled requests with the ``x-inferplane-cache: allow`` header."
    )
    tenant_isolation: bool = Field(
        default=True,
        description="Key entries by tenant. ``false`` shares every tier's entries across its tenants (not in prod: "
        "there a tier opts in with ``share_cache_across_tenants``).",
    )
    lookup_timeout_ms: int = Field(
        default=50, ge=1, le=1000, description="Bound on one cache lookup; past it the request goes on uncached."
    )

    @property
    def threshold(self) -> float:
        """The similarity a semantic hit needs: the stack's, else the served model's measured one, else 0.95."""
        if self.semantic_similarity_threshold is not None:
            return self.semantic_similarity_threshold
        served = self.embedder.served_model
        return served.threshold if served is not None else STATIC_EMBEDDER_THRESHOLD


class RateLimitSpec(_Spec):
    """Per API key limits; excess requests are answered with HTTP 429."""

    requests_per_minute: int = Field(default=600, ge=1, description="Requests per key per minute.")
    tokens_per_minute: int = Field(default=200_000, ge=1, description="Prompt + completion tokens per key per minute.")


ROUTE_EXAMPLES_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*\.jsonl$"
"""A route's examples file: a relative ``.jsonl`` path inside the project (no segment starts with a dot, so no
``..``), so every machine that runs ``pulumi up`` reads the same file from the same checkout."""
DEFAULT_ROUTE_NEIGHBOURS = 100
"""Examples a difficulty score averages by default: the best of 25-200 on RouteLLM's MMLU labels with the shipped
embedder (``inferplane route eval``, docs/routing.md)."""


class DifficultyRouteSpec(_Spec):
    """Route each prompt asked of a tier to its cheap or its strong model by the prompt's difficulty: the mean gain
    of its nearest labelled examples, as the gateway's embedder places them (docs/routing.md)."""

    by: Literal["difficulty"] = Field(description="What decides the model: the prompt's difficulty.")
    cheap: Name = Field(description="The tier's model that answers prompts scored below ``threshold``.")
    strong: Name = Field(description="The tier's model that answers prompts scored at or above ``threshold``.")
    examples: str = Field(
        pattern=ROUTE_EXAMPLES_PATTERN,
        description="JSON lines ``{prompt, cheap_correct, strong_correct}``: prompts labelled with whether each model "
        "answered them correctly; a path relative to the project directory (the one with Pulumi.yaml).",
    )
    threshold: float = Field(
        ge=-1.0,
        le=1.0,
        description="Least score (the neighbours' mean of strong correct minus cheap correct) sent to ``strong``; "
        "``inferplane route eval`` prints the threshold for each share of strong calls.",
    )
    neighbours: int = Field(
        default=DEFAULT_ROUTE_NEIGHBOURS, ge=1, le=1000, description="Nearest examples a score averages."
    )


class RoutingTierSpec(_Spec):
    """A gateway tier: the models it routes to, in order of preference."""

    name: Name = Field(description="Tier name clients select.")
    share_cache_across_tenants: bool = Field(
        default=False, description="The tier's tenants share response-cache entries (public, tenant-neutral answers)."
    )
    models: tuple[Name, ...] = Field(min_length=1, description="Deployments serving the tier, preferred first.")
    fallback: tuple[Name, ...] = Field(default=(), description="Deployments tried when all of ``models`` fail.")
    routing: RoutingSpec | None = Field(
        default=None,
        description="How the gateway picks replicas of the tier's primary ``models``; overrides ``gateway.routing`` "
        "(a model's own ``routing`` wins over it).",
    )
    route: DifficultyRouteSpec | None = Field(
        default=None,
        description="Send each prompt asked of the tier to one of two of its ``models`` by its difficulty (a client "
        "naming a model pins it); without it the tier's first model answers.",
    )
    providers: tuple[Name, ...] = Field(
        default=(),
        description="Hosted providers (``gateway.providers``) answering, in order, what the tier's own models cannot "
        "take (no ready replica, or no slot within the queue timeout), for the tenants each provider lists.",
    )


class TenantSpec(_Spec):
    """A caller of the gateway. Its API key is generated at deploy time and never appears in stack config."""

    name: Name = Field(description="Tenant name; Envoy forwards it upstream and metrics are labelled with it.")
    tiers: tuple[Name, ...] = Field(min_length=1, description="Tiers the tenant may use (and the models behind them).")
    requests_per_minute: int | None = Field(
        default=None, ge=1, description="Overrides ``gateway.rate_limit.requests_per_minute`` for this tenant."
    )
    tokens_per_minute: int | None = Field(
        default=None, ge=1, description="Overrides ``gateway.rate_limit.tokens_per_minute`` for this tenant."
    )


PROVIDER_BASE_URL_PATTERN = r"^https://[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)*/?$"
"""A hosted provider's OpenAI-compatible base URL: HTTPS only (prompts leave the VPC over TLS, verified against the
system CAs), a DNS host, an optional port and path (``https://api.groq.com/openai/v1``); no query, no credentials."""
_SECRET_KEY = r"^[-._a-zA-Z0-9]{1,253}$"
"""A key of a Kubernetes Secret's data (Kubernetes' ``IsConfigMapKey``)."""


class ProviderCredentialSpec(_Spec):
    """Where the gateway finds a provider's API key: a Kubernetes Secret in the gateway's namespace, mounted into
    Envoy alone (the processor never reads it) and sent as ``Authorization: Bearer <key>``. The value is never in
    the stack."""

    secret: Name = Field(description="Name of the Secret holding the key (created apart from the stack).")
    key: str = Field(default="api-key", pattern=_SECRET_KEY, description="The Secret's data key holding the API key.")


class ProviderSpec(_Spec):
    """A hosted OpenAI-compatible provider a tier may fall back to, for the tenants that consent."""

    name: Name = Field(description="Provider name: metrics, dashboards and the tiers' ``providers`` use it.")
    base_url: str = Field(
        pattern=PROVIDER_BASE_URL_PATTERN,
        max_length=300,
        description="OpenAI-compatible base URL, HTTPS (``https://api.openai.com/v1``); ``/chat/completions`` and "
        "``/completions`` are appended.",
    )
    model: str = Field(
        min_length=1, max_length=200, description="The provider's model id the request's ``model`` is rewritten to."
    )
    input_usd_per_million: float = Field(ge=0, le=1000, description="Price per million prompt tokens, USD.")
    output_usd_per_million: float = Field(ge=0, le=1000, description="Price per million completion tokens, USD.")
    credential: ProviderCredentialSpec = Field(description="The Secret holding the provider's API key.")
    tenants: tuple[Name, ...] = Field(
        default=(),
        description="Tenants whose prompts may leave the VPC for this provider (consent; none by default).",
    )
    max_concurrency: int = Field(
        default=64, ge=1, le=MAX_CONCURRENCY, description="Most requests in flight to the provider per gateway pod."
    )


class AdmissionSpec(_Spec):
    """KV-capacity admission at the gateway: what happens beyond replicas x ``max_num_seqs`` in flight."""

    queue_max: int = Field(
        default=32, ge=0, le=4096, description="Requests per model and gateway replica that may wait for a slot."
    )
    queue_timeout_seconds: float = Field(
        default=2.0, gt=0, le=60, description="Longest wait for a slot; then 429 with Retry-After."
    )
    cold_start_hold_factor: float = Field(
        default=1.2,
        ge=1.0,
        le=5.0,
        description="A request for a model with no ready replica waits this times sizing's cold start, then 503.",
    )


class GatewaySpec(_Spec):
    """The OpenAI-compatible front door."""

    replicas: int = Field(default=2, ge=1, le=50, description="Gateway replicas.")
    auth: Literal["api_key", "oidc", "none"] = Field(
        default="api_key", description="How callers authenticate (``none`` only outside prod)."
    )
    rate_limit: RateLimitSpec = Field(default_factory=RateLimitSpec, description="Limits answered with 429.")
    tiers: tuple[RoutingTierSpec, ...] = Field(
        default=(), description="Routing tiers; by default one per ``routing_tier`` named by the models."
    )
    tenants: tuple[TenantSpec, ...] = Field(default=(), description="Callers, their tiers and limits (never keys).")
    providers: tuple[ProviderSpec, ...] = Field(
        default=(), description="Hosted providers tiers may fall back to (egress on 443 opens only with one)."
    )
    admission: AdmissionSpec = Field(default_factory=AdmissionSpec, description="Queueing beyond KV capacity.")
    routing: RoutingSpec = Field(
        default_factory=RoutingSpec,
        description="How the gateway picks a replica of each model: the default for every model, overridden by a "
        "tier's or a model's own ``routing``.",
    )
    request_timeout_seconds: int = Field(
        default=900, ge=10, le=7200, description="Longest a whole request (a long stream included) may take."
    )
    stream_idle_timeout_seconds: int = Field(
        default=300, ge=5, le=3600, description="Longest silence on a stream (e.g. waiting for the first token)."
    )
    max_request_bytes: int = Field(
        default=4 * 1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024, description="Largest request body accepted."
    )
    processor_workers: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Processor worker processes per gateway pod, a CPU each: one Python event loop saturates a core "
        "long before Envoy does, so a pod's throughput grows with them (Envoy sends each request to the least busy). "
        "Every model's in-flight cap is split between them; a pod never runs more workers than its smallest cap.",
    )


class ObservabilitySpec(_Spec):
    """Prometheus, alerting and dashboards."""

    retention_days: int = Field(default=15, ge=1, le=365, description="Prometheus retention.")
    storage_gib: int = Field(default=50, ge=10, description="Prometheus persistent volume.")
    scrape_interval_seconds: int = Field(default=15, ge=5, le=120, description="Scrape interval.")
    grafana: bool = Field(default=True, description="Install Grafana with the dashboards.")


class LimitsSpec(_Spec):
    """The environment's own ceilings, checked at preview time."""

    max_total_gpus: int = Field(ge=1, le=1_000_000, description="Accelerators across all pools at max scale.")
    max_hourly_cost_usd: float = Field(
        gt=0, le=1e9, allow_inf_nan=False, description="On-demand USD per hour at max scale."
    )
    allowed_accelerators: tuple[AcceleratorId, ...] = Field(min_length=1, description="Accelerators pools may use.")
    max_context: int = Field(
        default=131072, gt=0, le=MAX_CONTEXT_TOKENS, description="Longest max_context any deployment may serve."
    )
    allow_spot: bool = Field(default=True, description="Whether pools may use spot capacity.")


class GcpSpec(_Spec):
    """Where GKE TPU pools live (only when a pool uses a GKE machine type), and the GKE system pool's machine type."""

    project: str = Field(pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$", description="GCP project id.")
    region: str = Field(pattern=r"^[a-z]+-[a-z]+\d$", description="GCP region, e.g. ``us-west4``.")
    zone: str = Field(pattern=r"^[a-z]+-[a-z]+\d-[a-z]$", description="Zone of the TPU node pools.")
    system_machine_type: str = Field(
        default=DEFAULT_GKE_SYSTEM_MACHINE_TYPE,
        pattern=r"^[a-z][a-z0-9]*-[a-z0-9-]+$",
        description="Machine type of the GKE system node pool (e2-standard or n2-standard, 2 to 16 vCPUs): the GKE "
        "gateway and the cluster's add-ons run there, and sizing refuses a type whose nodes cannot hold them.",
    )


class PlatformSpec(_Spec):
    """Everything one environment's inference platform is made of."""

    environment: Environment = Field(description="dev, staging or prod; decides the secure defaults' strictness.")
    region: str = Field(description="AWS region (from the stack's ``aws:region``).")
    zones: tuple[str, ...] = Field(min_length=2, max_length=6, description="Availability zones for the VPC.")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, description="The EKS control plane.")
    pools: tuple[PoolSpec, ...] = Field(min_length=1, description="Accelerator node pools.")
    models: tuple[ModelDeploymentSpec, ...] = Field(min_length=1, description="Served models.")
    cache: CacheSpec = Field(default_factory=CacheSpec, description="Gateway cache.")
    gateway: GatewaySpec = Field(default_factory=GatewaySpec, description="Gateway.")
    observability: ObservabilitySpec = Field(default_factory=ObservabilitySpec, description="Monitoring.")
    limits: LimitsSpec = Field(description="Ceilings for this environment.")
    gcp: GcpSpec | None = Field(default=None, description="GKE location, needed by TPU pools.")
    tags: dict[str, str] = Field(default_factory=dict, description="Tags added to every cloud resource.")
    image_digests: dict[ImageName, Annotated[str, Field(pattern=DIGEST_PATTERN)]] = Field(
        default_factory=dict,
        description="``sha256:`` digests pinning catalog images by name (``vllm``, ``vllm-tpu``, ``triton-trtllm``, "
        "``sglang``, ``aws-cli``); a pinned digest wins over the catalog's tag. Prod's policy config asks for every "
        "image.",
    )

    def image_digests_for(self, deployment: ModelDeploymentSpec, image: ImageName) -> dict[str, str]:
        """The digests a deployment's pods use: the platform's, with the deployment's own for its engine
        ``image``."""
        digests: dict[str, str] = {str(name): digest for name, digest in self.image_digests.items()}
        if deployment.image_digest is not None:
            digests[image] = deployment.image_digest
        return digests

    @property
    def log_retention_days(self) -> int:
        """The control-plane log retention: ``cluster.log_retention_days`` or the environment's default."""
        return self.cluster.log_retention_days or LOG_RETENTION_DAYS[self.environment]

    def pool(self, name: str) -> PoolSpec:
        """The pool called ``name`` (valid after :func:`check_platform`)."""
        return next(p for p in self.pools if p.name == name)

    @property
    def serving_deployments(self) -> tuple[ModelDeploymentSpec, ...]:
        """Every set of replicas the platform runs: each model, then its prefill role when it is disaggregated (a
        server, an autoscaler and a model-cache identity each; clients and tiers know the models only)."""
        return tuple(d for model in self.models for d in (model, model.prefill_role) if d is not None)


@dataclass(frozen=True)
class SpecIssue:
    """One problem with a spec: where (``models[1].max_context``) and what."""

    path: str
    message: str


PLATFORM_KEY = "inferplane:platform"
"""The stack config key that holds the platform spec (``pulumi config set --path inferplane:platform...``)."""
REGION_KEY = "aws:region"
"""The stack config key of the AWS region the platform is planned in."""


class SpecError(ValueError):
    """A spec that cannot be used; carries every issue found, not just the first."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = issues
        super().__init__("; ".join(f"{i.path}: {i.message}" for i in issues))

    def render(self, file: str, key: str = "inferplane:platform") -> str:
        """One line per issue, naming the file and the full key path."""
        lines = []
        for issue in self.issues:
            path = f"{key}.{issue.path}" if issue.path and not issue.path.startswith("[") else f"{key}{issue.path}"
            lines.append(f"{file}: {path}: {issue.message}")
        return "\n".join(lines)


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]":  # pydantic's marker: the mapping key just named is itself invalid
            path += " (key)"
        elif not _PLAIN_KEY.match(part):  # an empty key, a tag key with '-' or spaces: quoted, never blank
            path += f"[{part!r}]"
        else:
            path += f".{part}" if path else part
    return path


def parse_platform(raw: Mapping[str, Any], region: str) -> PlatformSpec:
    """Validate raw config into a :class:`PlatformSpec`, or raise :class:`SpecError` with every issue."""
    if "region" in raw:
        raise SpecError([SpecIssue("region", "set the region once, as aws:region, not inside the platform block")])
    try:
        spec = PlatformSpec.model_validate({**raw, "region": region})
    except ValidationError as exc:
        issues = []
        errors = exc.errors()
        # Every list holding a failed item, at any depth (``models`` for ``models[0].engine`` as for ``models[0]``).
        item_errors = {tuple(e["loc"][:i]) for e in errors for i, part in enumerate(e["loc"]) if isinstance(part, int)}
        for err in errors:
            if err["type"] == "too_short" and tuple(err["loc"]) in item_errors:
                continue  # the list is short only because its items failed, which are reported
            # Pydantic reports model-validator errors at the model's location with a "Value error, " prefix.
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            issues.append(SpecIssue(_loc_to_path(loc), message))
        raise SpecError(issues) from None
    issues = check_platform(spec)
    if issues:
        raise SpecError(issues)
    return spec


def check_platform(spec: PlatformSpec) -> list[SpecIssue]:
    """Cross-checks between sections and against the catalogs; returns every issue found."""
    issues: list[SpecIssue] = []
    add = issues.append

    if not _AWS_REGION.match(spec.region):
        add(SpecIssue("region", f"{spec.region!r} is not an AWS region name (from aws:region)"))
    for i, zone in enumerate(spec.zones):
        if not zone.startswith(spec.region) or len(zone) != len(spec.region) + 1:
            add(SpecIssue(f"zones[{i}]", f"{zone!r} is not a zone of region {spec.region}"))
    if len(set(spec.zones)) != len(spec.zones):
        add(SpecIssue("zones", "zones repeat"))
    if spec.environment == "prod" and len(spec.zones) < 3:
        add(SpecIssue("zones", f"prod spreads over at least 3 zones, got {len(spec.zones)}"))
    _check_cluster_security(spec, add)
    _check_system_nodes(spec, add)

    _check_pools(spec, add)
    _check_models(spec, add)
    _check_gateway(spec, add)
    _check_surface(spec, add)
    return issues


def _check_system_node_type(path: str, name: str, cloud: SystemCloud, add: Any) -> None:
    """``name`` must be one of the catalog's system node types of ``cloud``; the error lists them."""
    row = SYSTEM_NODE_TYPES.get(name)
    if row is None or row.cloud != cloud:
        known = ", ".join(sorted(n for n, r in SYSTEM_NODE_TYPES.items() if r.cloud == cloud))
        where = "an EKS system node" if cloud == "aws" else "a GKE system pool"
        add(SpecIssue(path, f"{name!r} is not {where} type of the catalog; known: {known}"))


def _check_system_nodes(spec: PlatformSpec, add: Any) -> None:
    _check_system_node_type("cluster.system_instance_type", spec.cluster.system_instance_type, "aws", add)
    if spec.gcp is not None:
        _check_system_node_type("gcp.system_machine_type", spec.gcp.system_machine_type, "gcp", add)


def _check_cluster_security(spec: PlatformSpec, add: Any) -> None:
    missing = [log for log in ALL_CONTROL_PLANE_LOGS if log not in spec.cluster.log_types]
    if missing:
        add(SpecIssue("cluster.log_types", f"every control-plane log is kept; missing {', '.join(missing)}"))
    if spec.environment == "prod" and spec.log_retention_days < MIN_PROD_LOG_RETENTION_DAYS:
        add(
            SpecIssue(
                "cluster.log_retention_days",
                f"prod keeps control-plane logs at least {MIN_PROD_LOG_RETENTION_DAYS} days, got "
                f"{spec.log_retention_days}",
            )
        )


def tensor_parallel_problem(gpus: int, per_node: int, instance_type: str) -> str | None:
    """Why ``gpus`` accelerators per replica cannot run on ``instance_type`` nodes, or None when they can.

    One rule for the spec's ``gpus_per_replica`` and ``inferplane size --gpus``.
    """
    if gpus > per_node:
        return (
            f"{gpus} GPUs per replica exceeds the {per_node} per {instance_type} node: "
            "tensor parallelism never crosses a node"
        )
    if per_node % gpus:
        return f"{gpus} does not divide the {per_node} accelerators of a {instance_type} node"
    return None


def _check_surface(spec: PlatformSpec, add: Any) -> None:
    """What the cloud or the components would refuse later: tags, open endpoints, single points of failure."""
    for key, problem in aws_tag_problems(spec.tags) + label_problems(spec.tags):
        add(SpecIssue("tags" if key is None else f"tags[{key!r}]", problem))
    if spec.gcp is not None:
        try:
            to_gcp_labels(spec.tags)
        except ValueError as exc:
            add(SpecIssue("tags", f"as GCP labels: {exc}"))
        if not spec.gcp.zone.startswith(f"{spec.gcp.region}-"):
            add(SpecIssue("gcp.zone", f"{spec.gcp.zone!r} is not a zone of GCP region {spec.gcp.region}"))
    for i, cidr in enumerate(spec.cluster.public_access_cidrs):
        if ipaddress.ip_network(cidr).prefixlen == 0:
            add(SpecIssue(f"cluster.public_access_cidrs[{i}]", f"{cidr} opens the API endpoint to the whole internet"))
    if spec.environment == "prod":
        if spec.cluster.endpoint_access != "private":
            add(SpecIssue("cluster.endpoint_access", "prod clusters keep the API endpoint private"))
        if spec.cache.enabled and spec.cache.replicas < 2:
            add(
                SpecIssue(
                    "cache.replicas",
                    f"prod needs at least 2 cache nodes (multi-AZ automatic failover), got {spec.cache.replicas}",
                )
            )


def _check_pools(spec: PlatformSpec, add: Any) -> None:
    seen: set[str] = set()
    for i, pool in enumerate(spec.pools):
        at = f"pools[{i}]"
        if pool.name in seen:
            add(SpecIssue(f"{at}.name", f"pool name {pool.name!r} is used twice"))
        seen.add(pool.name)
        instance = INSTANCE_TYPES.get(pool.instance_type)
        if instance is None:
            add(SpecIssue(f"{at}.instance_type", f"unknown instance type {pool.instance_type!r}"))
            continue
        if instance.accelerator != pool.accelerator:
            add(
                SpecIssue(
                    f"{at}.accelerator",
                    f"{pool.instance_type} carries {instance.accelerator}, not {pool.accelerator}",
                )
            )
        if pool.capacity_type == "capacity_block":
            if not instance.capacity_block:
                add(SpecIssue(f"{at}.capacity_type", f"{pool.instance_type} is not sold as a capacity block"))
            if pool.capacity_reservation_id is None:
                add(SpecIssue(f"{at}.capacity_reservation_id", "a capacity block needs its reservation id (cr-...)"))
            if pool.zone is None:
                add(SpecIssue(f"{at}.zone", "a capacity block needs the reservation's zone"))
        elif pool.capacity_reservation_id is not None:
            add(SpecIssue(f"{at}.capacity_reservation_id", "only capacity_block pools take a reservation id"))
        if pool.zone is not None and instance.cloud == "aws" and pool.zone not in spec.zones:
            add(SpecIssue(f"{at}.zone", f"{pool.zone!r} is not one of the platform's zones"))
        if pool.efa and not instance.supports_efa:
            add(SpecIssue(f"{at}.efa", f"{pool.instance_type} does not support EFA"))
        elif pool.efa and pool.zone is None and instance.cloud == "aws":
            add(SpecIssue(f"{at}.zone", "EFA pools need one zone: a cluster placement group lives in a single zone"))
        if pool.min_nodes == 0 and not any(m.pool == pool.name for m in spec.serving_deployments):
            # A standby pool (min_nodes > 0, no model yet) is fine; one that can never hold a node is a mistake.
            add(
                SpecIssue(
                    f"{at}.name",
                    f"no model runs on pool {pool.name!r} and it keeps no nodes: place a model on it, "
                    "keep standby nodes (min_nodes), or remove it",
                )
            )
        if pool.min_nodes > 0 and pool.capacity_type == "capacity_block":
            add(SpecIssue(f"{at}.min_nodes", "capacity-block pools scale from 0 (the block ends on a schedule)"))
        if instance.cloud == "gcp":
            if spec.gcp is None:
                add(SpecIssue(f"{at}.instance_type", f"{pool.instance_type} is a GKE machine type: add a gcp block"))
            if pool.tpu_topology is None:
                add(SpecIssue(f"{at}.tpu_topology", f"TPU pools need a topology, one of {instance.tpu_topologies}"))
            elif pool.tpu_topology not in instance.tpu_topologies:
                add(
                    SpecIssue(
                        f"{at}.tpu_topology",
                        f"{pool.tpu_topology} is not a {pool.instance_type} topology "
                        f"({', '.join(instance.tpu_topologies)})",
                    )
                )
            if pool.capacity_type == "capacity_block" or pool.efa:
                add(SpecIssue(f"{at}.capacity_type", "capacity blocks and EFA are EC2 features"))
        elif pool.tpu_topology is not None:
            add(SpecIssue(f"{at}.tpu_topology", "only GKE TPU pools take a topology"))


def _check_models(spec: PlatformSpec, add: Any) -> None:
    pools = {p.name: p for p in spec.pools}
    seen: set[str] = set()
    for i, deployment in enumerate(spec.models):
        at = f"models[{i}]"
        if deployment.name in seen:
            add(SpecIssue(f"{at}.name", f"model name {deployment.name!r} is used twice"))
        seen.add(deployment.name)
        if deployment.model is not None and deployment.model not in MODELS:
            add(SpecIssue(f"{at}.model", f"unknown model {deployment.model!r}; known: {', '.join(sorted(MODELS))}"))
            continue
        arch = deployment.architecture_resolved
        if deployment.max_context > arch.max_context:
            add(
                SpecIssue(
                    f"{at}.max_context",
                    f"{deployment.max_context} exceeds the {arch.max_context} tokens {deployment.model_label} supports",
                )
            )
        kv_16bit = {"bf16": "bf16", "fp16": "fp16"}.get(deployment.kv_cache_dtype)
        compute_dtype = "fp16" if deployment.weights_dtype in ("fp16", "int4") else arch.native_dtype
        if kv_16bit is not None and kv_16bit != compute_dtype:
            add(
                SpecIssue(
                    f"{at}.kv_cache_dtype",
                    f"a {kv_16bit} KV cache with {compute_dtype} activations is not supported; use auto or fp8",
                )
            )
        if deployment.weights_dtype == "int4" and deployment.weights_repo is None:
            add(SpecIssue(f"{at}.weights_repo", "int4 weights need an AWQ checkpoint: set weights_repo"))
        pool = pools.get(deployment.pool)
        if pool is None:
            add(SpecIssue(f"{at}.pool", f"no pool named {deployment.pool!r} ({', '.join(pools)})"))
            continue
        instance = INSTANCE_TYPES.get(pool.instance_type)
        if instance is None:
            continue
        accelerator = get_accelerator(instance.accelerator)
        if deployment.gpus_per_replica is not None:
            problem = tensor_parallel_problem(
                deployment.gpus_per_replica, instance.accelerators_per_node, pool.instance_type
            )
            if problem:
                add(SpecIssue(f"{at}.gpus_per_replica", problem))
        if accelerator.vendor == "google":
            chips = tpu_topology_chips(pool.tpu_topology) if pool.tpu_topology else instance.accelerators_per_node
            if deployment.engine != "vllm":
                add(
                    SpecIssue(
                        f"{at}.engine",
                        "TPU pools serve with vLLM's TPU image; Triton TensorRT-LLM and SGLang's image need NVIDIA",
                    )
                )
            if deployment.weights_dtype != "bf16" or deployment.kv_cache_dtype not in ("auto", "bf16"):
                add(SpecIssue(f"{at}.weights_dtype", "TPU v5e serves bf16 weights and KV cache"))
            if chips > instance.accelerators_per_node:
                add(SpecIssue(f"{at}.pool", f"pool {pool.name!r} is a multi-host slice; serving needs one host"))
        if deployment.engine == "triton" and deployment.speculative_decoding is not None:
            add(
                SpecIssue(
                    f"{at}.speculative_decoding",
                    "speculative decoding with Triton needs the BLS model and a draft engine; not supported",
                )
            )
        _check_sglang(deployment, at, add)
        _check_host_kv_cache(deployment, accelerator.vendor, at, add)
        _check_disaggregation(spec, deployment, pool, at, add)
        if deployment.engine == "triton" and deployment.weights_dtype == "int4":
            add(SpecIssue(f"{at}.weights_dtype", "int4 (AWQ) is served with vLLM; build TensorRT-LLM engines in fp8"))


def _check_sglang(deployment: ModelDeploymentSpec, at: str, add: Any) -> None:
    """What SGLang cannot be asked for: vLLM's n-gram window, and longest-prefix scheduling without a prefix cache."""
    speculative = deployment.speculative_decoding
    if deployment.engine == "sglang" and speculative is not None and speculative.prompt_lookup_max is not None:
        add(
            SpecIssue(
                f"{at}.speculative_decoding.prompt_lookup_max",
                "SGLang's NGRAM speculation matches against its own token trie and takes no prompt-lookup window",
            )
        )
    if deployment.prefix_heavy and not deployment.prefix_caching:
        add(SpecIssue(f"{at}.prefix_heavy", "prefix-heavy traffic is served from the prefix cache: set prefix_caching"))


def _check_host_kv_cache(deployment: ModelDeploymentSpec, accelerator_vendor: str, at: str, add: Any) -> None:
    """What the host KV tier needs: vLLM's OffloadingConnector, which runs on CUDA (and ROCm, XPU) devices only
    (``vllm/v1/kv_offload/cpu/spec.py`` of vLLM 0.32) and extends the prefix cache, so needs it on."""
    if not deployment.host_kv_cache:
        return
    where = f"{at}.host_kv_cache"
    if deployment.engine != "vllm":
        add(
            SpecIssue(
                where,
                f"the host KV tier is rendered for vLLM (its OffloadingConnector); {deployment.engine}'s host cache "
                "is not sized by the platform yet: serve with vllm or turn it off",
            )
        )
    if accelerator_vendor != "nvidia":
        add(SpecIssue(where, "vLLM offloads KV blocks from CUDA devices only; TPU pools cannot have a host KV tier"))
    if not deployment.prefix_caching:
        add(SpecIssue(where, "the host KV tier extends the prefix cache: set prefix_caching"))


def _check_disaggregation(
    spec: PlatformSpec, deployment: ModelDeploymentSpec, pool: PoolSpec, at: str, add: Any
) -> None:
    """What two roles with a KV transfer between them need: vLLM's NixlConnector on NVIDIA pools of one cluster, a
    role name that is a valid and unused name, and, where EFA carries the transfer, both roles in one zone (EFA does
    not cross availability zones: AWS ParallelCluster's docs; llm-d pins the roles to one zone for it)."""
    disaggregation = deployment.disaggregation
    if disaggregation is None:
        return
    where = f"{at}.disaggregation"
    if deployment.engine != "vllm":
        add(
            SpecIssue(
                where,
                f"disaggregated serving is rendered for vLLM (NixlConnector); {deployment.engine}'s disaggregated mode "
                "(SGLang's --disaggregation-mode, TensorRT-LLM's disaggregated executor) is not sized or rendered "
                "yet: serve with vllm or leave disaggregation unset",
            )
        )
    role = deployment.prefill_role
    assert role is not None
    if len(role.name) > NAME_MAX_LENGTH:
        add(
            SpecIssue(
                f"{at}.name",
                f"the prefill role is named {role.name!r}, longer than {NAME_MAX_LENGTH} characters: shorten the name "
                f"to at most {NAME_MAX_LENGTH - len(PREFILL_ROLE_SUFFIX)}",
            )
        )
    if any(m.name == role.name for m in spec.models):
        add(SpecIssue(f"{at}.name", f"the prefill role's name {role.name!r} is another model's name"))
    _check_disaggregated_pools(spec, role, pool, where, add)


def _check_disaggregated_pools(
    spec: PlatformSpec, role: ModelDeploymentSpec, pool: PoolSpec, where: str, add: Any
) -> None:
    """The prefill role's pool: known, NVIDIA, a valid size for its node, on the decode pool's fabric and zone."""
    pools = {p.name: p for p in spec.pools}
    prefill_pool = pools.get(role.pool)
    if prefill_pool is None:
        add(SpecIssue(f"{where}.prefill.pool", f"no pool named {role.pool!r} ({', '.join(pools)})"))
        return
    instances = [INSTANCE_TYPES.get(p.instance_type) for p in (pool, prefill_pool)]
    if any(i is None for i in instances):
        return  # refused where the pools are checked
    if any(get_accelerator(i.accelerator).vendor != "nvidia" for i in instances if i is not None):
        add(
            SpecIssue(
                where,
                "the KV transfer is rendered for NVIDIA pools (NIXL over EFA or UCX); TPU pools serve aggregated",
            )
        )
        return
    if role.gpus_per_replica is not None:
        problem = tensor_parallel_problem(
            role.gpus_per_replica,
            INSTANCE_TYPES[prefill_pool.instance_type].accelerators_per_node,
            prefill_pool.instance_type,
        )
        if problem:
            add(SpecIssue(f"{where}.prefill.gpus_per_replica", problem))
    if pool.efa != prefill_pool.efa:
        add(
            SpecIssue(
                f"{where}.prefill.pool",
                f"pool {pool.name!r} {'has' if pool.efa else 'lacks'} EFA and pool {prefill_pool.name!r} "
                f"{'has' if prefill_pool.efa else 'lacks'} it: the KV transfer runs over one fabric, so both roles' "
                "pools set efa alike",
            )
        )
    elif pool.efa and pool.zone != prefill_pool.zone:
        add(
            SpecIssue(
                f"{where}.prefill.pool",
                f"pools {pool.name!r} ({pool.zone}) and {prefill_pool.name!r} ({prefill_pool.zone}) are in different "
                "zones: EFA does not cross availability zones, so both roles' pools need the same zone",
            )
        )


ServingCluster = Literal["eks", "gke"]
"""The Kubernetes cluster a model runs on: EKS for EC2 pools, GKE for GKE TPU pools. Nothing joins their networks
(the platform builds no VPN or interconnect), so each cluster's gateway reaches only the models on its own cluster."""


RESPONSE_CACHE_CLUSTERS: tuple[ServingCluster, ...] = ("eks",)
"""Clusters whose Redis-protocol store serves the response cache (and whose gateway has the served embedder beside
it): it needs ``FT.CREATE``/``FT.SEARCH`` vector search (ElastiCache for Valkey 8.2). The GKE gateway's Memorystore
for Redis holds budgets only (README, "The gateway")."""


def _cluster_of_cloud(cloud: str) -> ServingCluster:
    return "eks" if cloud == "aws" else "gke"


def serving_cluster(spec: PlatformSpec, deployment: ModelDeploymentSpec) -> ServingCluster:
    """The cluster ``deployment`` runs on, from its pool's instance type (valid after :func:`check_platform`)."""
    return _cluster_of_cloud(INSTANCE_TYPES[spec.pool(deployment.pool).instance_type].cloud)


def gateway_tiers(spec: PlatformSpec) -> tuple[RoutingTierSpec, ...]:
    """The gateway's tiers: ``gateway.tiers`` when given, else one per ``routing_tier`` (models in spec order).

    A model's ``routing_tier`` is the tier that routes to it, so a given tier that does not name a model whose
    ``routing_tier`` it is (as a primary or a fallback) serves it after its own primaries, in spec order: a model
    added with only a ``routing_tier`` (``inferplane plan --write-stack`` adds them so) is reachable, not refused
    by every gateway."""
    if spec.gateway.tiers:
        tiers = []
        for tier in spec.gateway.tiers:
            named = {*tier.models, *tier.fallback}
            joined = tuple(d.name for d in spec.models if d.routing_tier == tier.name and d.name not in named)
            tiers.append(tier.model_copy(update={"models": (*tier.models, *joined)}) if joined else tier)
        return tuple(tiers)
    order: dict[str, list[str]] = {}
    for deployment in spec.models:
        order.setdefault(deployment.routing_tier, []).append(deployment.name)
    return tuple(RoutingTierSpec(name=tier, models=tuple(models)) for tier, models in order.items())


def routing_of(spec: PlatformSpec, deployment: ModelDeploymentSpec) -> RoutingSpec:
    """How the gateway picks ``deployment``'s replica: the model's own ``routing``, else that of the first tier (in
    :func:`gateway_tiers` order) that lists it among its ``models`` and sets one, else ``gateway.routing``.

    A fallback takes no tier's routing: a tier's ``routing`` speaks for its primaries, and the replicas of a model
    are picked the same way whichever tier the request came through."""
    if deployment.routing is not None:
        return deployment.routing
    for tier in gateway_tiers(spec):
        if tier.routing is not None and deployment.name in tier.models:
            return tier.routing
    return spec.gateway.routing


def _check_tenants(spec: PlatformSpec, add: Any) -> None:
    gateway = spec.gateway
    tiers = {t.name for t in gateway_tiers(spec)}
    seen: set[str] = set()
    for i, tenant in enumerate(gateway.tenants):
        if tenant.name in seen:
            add(SpecIssue(f"gateway.tenants[{i}].name", f"tenant {tenant.name!r} is defined twice"))
        seen.add(tenant.name)
        for j, tier in enumerate(tenant.tiers):
            if tier not in tiers:
                add(SpecIssue(f"gateway.tenants[{i}].tiers[{j}]", f"no gateway tier named {tier!r}"))
    if gateway.auth == "none" and gateway.tenants:
        add(SpecIssue("gateway.tenants", "tenants need authentication: set auth to api_key"))
    if gateway.auth == "oidc":
        add(SpecIssue("gateway.auth", "the gateway implements api_key authentication; oidc is not supported yet"))


def _check_providers(spec: PlatformSpec, add: Any) -> None:
    """Providers are named once, apart from models and tiers (one name, one thing in metrics and routes); each
    tenant a provider lists exists; each tier's providers exist; a provider no tier names is dead config."""
    gateway = spec.gateway
    taken = {m.name for m in spec.models} | {t.name for t in gateway_tiers(spec)}
    tenants = {t.name for t in gateway.tenants}
    seen: set[str] = set()
    for i, provider in enumerate(gateway.providers):
        where = f"gateway.providers[{i}]"
        if provider.name in seen:
            add(SpecIssue(f"{where}.name", f"provider {provider.name!r} is defined twice"))
        elif provider.name in taken:
            add(SpecIssue(f"{where}.name", f"{provider.name!r} already names a model or a tier"))
        seen.add(provider.name)
        for j, tenant in enumerate(provider.tenants):
            if tenant not in tenants:
                add(SpecIssue(f"{where}.tenants[{j}]", f"no tenant named {tenant!r}"))
        if not any(provider.name in tier.providers for tier in gateway.tiers):
            add(SpecIssue(f"{where}.name", f"no tier names provider {provider.name!r} in its providers"))
    for i, tier in enumerate(gateway.tiers):
        for j, name in enumerate(tier.providers):
            if name not in seen:
                add(SpecIssue(f"gateway.tiers[{i}].providers[{j}]", f"no provider named {name!r}"))
        if len(set(tier.providers)) != len(tier.providers):
            add(SpecIssue(f"gateway.tiers[{i}].providers", "a provider is listed twice"))


def _check_gateway(spec: PlatformSpec, add: Any) -> None:
    _check_tenants(spec, add)
    _check_providers(spec, add)
    names = {m.name for m in spec.models}
    tier_names: set[str] = set()
    effective = gateway_tiers(spec)
    for i, tier in enumerate(spec.gateway.tiers):
        if tier.name in tier_names:
            add(SpecIssue(f"gateway.tiers[{i}].name", f"tier {tier.name!r} is defined twice"))
        tier_names.add(tier.name)
        for field in ("models", "fallback"):
            for j, name in enumerate(getattr(tier, field)):
                if name not in names:
                    add(SpecIssue(f"gateway.tiers[{i}].{field}[{j}]", f"no model deployment named {name!r}"))
        overlap = set(tier.models) & set(tier.fallback)
        if overlap:
            add(SpecIssue(f"gateway.tiers[{i}].fallback", f"{', '.join(sorted(overlap))} is both primary and fallback"))
        _check_fallback_clusters(spec, i, effective[i], add)
        if tier.route is not None:
            _check_route(spec, i, tier, tier.route, add)
    for i, deployment in enumerate(spec.models):
        if spec.gateway.tiers and deployment.routing_tier not in tier_names:
            add(SpecIssue(f"models[{i}].routing_tier", f"no gateway tier named {deployment.routing_tier!r}"))


def _check_route(spec: PlatformSpec, index: int, tier: RoutingTierSpec, route: DifficultyRouteSpec, add: Any) -> None:
    """The two models of a difficulty route are two of the tier's own models, on one cluster (one gateway decides
    between them)."""
    where = f"gateway.tiers[{index}].route"
    for side in ("cheap", "strong"):
        if getattr(route, side) not in tier.models:
            add(SpecIssue(f"{where}.{side}", f"{getattr(route, side)!r} is not one of the tier's models"))
    if route.cheap == route.strong:
        add(SpecIssue(f"{where}.strong", f"the strong model is the cheap one ({route.cheap!r})"))
    pools = {p.name: p for p in spec.pools}
    clouds = {
        INSTANCE_TYPES[pools[m.pool].instance_type].cloud
        for m in spec.models
        if m.name in (route.cheap, route.strong) and m.pool in pools and pools[m.pool].instance_type in INSTANCE_TYPES
    }
    if len(clouds) > 1:
        add(
            SpecIssue(
                where, "the cheap and the strong model run on different clusters; one gateway decides between them"
            )
        )


def _check_fallback_clusters(spec: PlatformSpec, index: int, tier: RoutingTierSpec, add: Any) -> None:
    """A fallback must run on the cluster of every primary of its tier: Envoy retries a failed request on the
    fallback from the gateway of the primary's cluster, and nothing joins the clusters' networks. Primaries may span
    clusters (each cluster's gateway serves the tier with its own primaries); a fallback elsewhere would be promised
    and never tried."""
    pools = {p.name: p for p in spec.pools}
    clusters = {
        m.name: _cluster_of_cloud(INSTANCE_TYPES[pools[m.pool].instance_type].cloud)
        for m in spec.models
        if m.pool in pools and pools[m.pool].instance_type in INSTANCE_TYPES  # else refused elsewhere
    }
    stranded = []
    for fallback in tier.fallback:
        away = [m for m in tier.models if m in clusters and fallback in clusters and clusters[m] != clusters[fallback]]
        if away:
            stranded.append(
                f"{fallback} runs on {clusters[fallback]} but primary {', '.join(away)} on {clusters[away[0]]}"
            )
    if stranded:
        add(
            SpecIssue(
                f"gateway.tiers[{index}].fallback",
                f"{'; '.join(stranded)}: a gateway falls back only to models on its own cluster (nothing joins the "
                "EKS and GKE networks); list the model under models instead",
            )
        )
