"""Sizing from first principles: does a model fit its accelerators, and with which engine settings.

Pure Python, no Pulumi: the CLI, the Pulumi program, the components and the policy pack all call this, so the
flags an engine gets, the GPUs a pod requests and the verdict a policy gives can never disagree.

The physics:

* weights = parameters x bytes per parameter. Quantized checkpoints keep the embedding and LM head in 16 bits,
  and AWQ adds an fp16 scale and a 4-bit zero point per group of 128 weights.
* KV cache per token = 2 (K and V) x layers x KV heads x head dim x bytes per element. When tensor parallelism
  exceeds the KV heads, engines replicate heads so every rank holds one: the cache grows by TP / KV heads.
* Usable memory per replica = GPUs x device memory x gpu_memory_utilization (never above 0.93). From it come
  the weights, a reserve (CUDA graphs, NCCL buffers, allocator slack, peak activations) and the KV pool.
* Tensor parallelism never crosses a node: the size is a power of two dividing the node's accelerators and the
  model's attention heads; sizing picks the smallest that fits the target.
* Decode is memory-bandwidth bound: a step reads the (active) weights once plus every running sequence's KV
  cache, and the roofline gives tokens per second.

Sliding-window layers are costed at full context: engines that do not run the hybrid KV allocator allocate full
pages for them, and a plan must not fit only on the best case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity.embedder import EmbedderSizing, size_embedder
from inferplane.components.capacity.host_memory import engine_host_bytes, host_kv_tier_bytes, replica_host_share
from inferplane.components.capacity.kv_transfer import KvTransferSizing, TransferBackend, size_transfer
from inferplane.components.capacity.prometheus import (
    PrometheusSizing,
    cluster_series,
    retention_problem,
    size_prometheus,
)
from inferplane.components.capacity.system_nodes import (
    SCALE_OUT_FACTOR,
    SystemNodesSizing,
    size_system_nodes,
    system_node_counts,
)
from inferplane.components.catalog import (
    ACCELERATORS,
    Accelerator,
    InstanceType,
    ModelArchitecture,
    get_instance_type,
    hourly_price,
    instances_for,
)
from inferplane.components.spec.platform_spec import (
    PLATFORM_KEY,
    RESPONSE_CACHE_CLUSTERS,
    STREAM_CHUNK_MS,
    Engine,
    KvCacheDtype,
    ModelDeploymentSpec,
    PlatformSpec,
    PoolSpec,
    ServingCluster,
    WeightsDtype,
    serving_cluster,
)

GIB = 1024**3

BYTES_PER_PARAMETER: dict[WeightsDtype, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5}
"""Storage per weight by checkpoint dtype."""

AWQ_GROUP_SIZE = 128
AWQ_GROUP_OVERHEAD_BYTES = 2.5
"""AWQ keeps an fp16 scale (2 bytes) and a packed 4-bit zero point (0.5 bytes) per group of 128 weights."""

KV_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1}

MAX_GPU_MEMORY_UTILIZATION = 0.93
"""Above this the CUDA context, NCCL and the allocator run out of room outside the engine's share."""

RUNTIME_RESERVE_BYTES_PER_GPU = int(1.5 * GIB)
"""Per GPU, inside the engine's share: CUDA graphs (vLLM captures 0.5-1 GiB), NCCL buffers, allocator slack."""

ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN = 24
"""Peak activations of a prefill chunk, per token and per hidden unit: residual, QKV, attention output and the
gated MLP's two intermediate projections (about 3.5 x hidden each) in 16 bits, sharded by tensor parallelism."""

LOGITS_BYTES = 4
"""The sampler holds fp32 logits over the vocabulary for every running sequence."""

MEMORY_BANDWIDTH_EFFICIENCY = 0.75
"""Share of peak device-memory bandwidth a decode step achieves (measured vLLM/TensorRT-LLM kernels: 0.7-0.85)."""

COMPUTE_EFFICIENCY = 0.5
"""Share of peak tensor throughput prefill achieves (model FLOP utilisation)."""

INTERCONNECT_EFFICIENCY = 0.5
"""Share of the per-chip link bandwidth an all-reduce achieves (ring all-reduce on small messages)."""

WEIGHTS_FETCH_BYTES_PER_SECOND = 1.0e9
"""Model cache sync from S3 to node-local NVMe (s5cmd on 25+ Gbit/s instances sustains 1-3 GB/s)."""

WEIGHTS_LOAD_BYTES_PER_SECOND = 2.0e9
"""safetensors from node-local NVMe into device memory, for the node as a whole."""

WARMUP_SECONDS = {"nvidia": 60.0, "google": 300.0}
"""Engine warm-up after loading: torch.compile and CUDA-graph capture on GPUs; XLA precompilation on TPUs."""

MIN_BATCHED_TOKENS = 2048
MAX_BATCHED_TOKENS = 16384
"""Bounds on the per-step token budget; vLLM's online-serving default is 2048, throughput peaks near 8-16k."""


ServingRole = Literal["aggregated", "prefill", "decode"]
"""What a model's replicas do: both phases (aggregated), or one role of a disaggregated model."""


def weights_bytes(model: ModelArchitecture, dtype: WeightsDtype) -> int:
    """Bytes of the weights in ``dtype``; quantized formats keep embeddings and LM head in 16 bits."""
    if dtype in ("bf16", "fp16"):
        return model.parameters * 2
    embedding = model.embedding_parameters
    body = model.parameters - embedding
    quantized = body * BYTES_PER_PARAMETER[dtype]
    if dtype == "int4":
        quantized += body / AWQ_GROUP_SIZE * AWQ_GROUP_OVERHEAD_BYTES
    return math.ceil(quantized) + embedding * 2


def kv_element_bytes(model: ModelArchitecture, kv_dtype: KvCacheDtype, weights_dtype: WeightsDtype) -> int:
    """Bytes per KV element; ``auto`` follows the activation dtype, as vLLM does."""
    if kv_dtype == "auto":
        return 2
    return KV_BYTES[kv_dtype]


def kv_cache_bytes_per_token(model: ModelArchitecture, element_bytes: int) -> int:
    """2 x layers x KV heads x head dim x bytes: the model's KV cache for one token."""
    return 2 * model.layers * model.kv_heads * model.head_dim * element_bytes


def activation_dtype(model: ModelArchitecture, weights_dtype: WeightsDtype) -> Literal["bf16", "fp16"]:
    """What the engine computes in: AWQ kernels and fp16 checkpoints run in fp16, the rest in the model's dtype."""
    if weights_dtype in ("fp16", "int4"):
        return "fp16"
    return model.native_dtype


VLLM_BLOCK_SIZE = 16
"""vLLM's KV block on GPUs: ``DEFAULT_BLOCK_SIZE`` 16 tokens (vLLM 0.32 ``vllm/config/cache.py``), set explicitly so
a version's default never parts the engine from the gateway's prefix index. vLLM on TPU pages its cache with a size
of its own backend's choosing and gets no flag (the gateway indexes 16-token blocks there: finer, still ordered)."""
TRTLLM_TOKENS_PER_BLOCK = 32
"""TensorRT-LLM's KV block, set at engine build (``trtllm-build --tokens_per_block``; "a power of two greater than
1", TensorRT-LLM docs ``features/kvcache``). The build default has moved between releases (128, 64, 32), so it is
pinned: smaller blocks reuse more of a shared prefix (reuse matches whole blocks) at some kernel efficiency."""


SGLANG_PAGE_SIZE = 16
"""SGLang's KV page (``--page-size``), set like vLLM's block: its radix cache reuses whole pages, and the gateway's
prefix index then hashes the engine's own blocks. The attention backends an NVIDIA GPU resolves for these models
(FlashAttention 3, FlashInfer, Triton, TensorRT-LLM MHA: 16, 32, 64 or 128) take 16; a backend that cannot
replaces it with a warning (``_mla_backend_page_constraints``, ``_fa4_page_constraint``,
``sglang/srt/arg_groups/overrides.py`` of sglang 0.5.23). The chunk size must be a multiple of it
(``validation_hook.py``)."""


def stream_interval(chunk_ms: int, step_ms: float) -> int:
    """Tokens a streamed chunk gathers (vLLM's and SGLang's ``--stream-interval``): as many decode steps as fit in
    ``chunk_ms`` at the planned batch's step, at least 1 (every token alone). Both engines send the first token at
    once and the last with the finish, whatever the interval (vLLM 0.32 ``RequestState.make_request_output``, SGLang
    0.5.23 ``OutputStreamer.accept``), so time to first token is not delayed; the engines' own inter-token latency
    metrics are recorded each step, before the chunking (vLLM ``OutputProcessor.process_outputs``), so the ITL alert
    still sees every token."""
    return max(1, math.floor(chunk_ms / step_ms)) if step_ms > 0 else 1


KvRole = Literal["kv_producer", "kv_consumer"]
"""A disaggregated replica's side of the KV transfer: the prefill role produces, the decode role consumes (vLLM 0.32
``KVTransferConfig.kv_role``; ``kv_both`` is deprecated with NixlConnector, whose roles come per request)."""


class KvTransferSettings(BaseModel):
    """A disaggregated role's NixlConnector: its side and NIXL's backend (rendered as ``--kv-transfer-config``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: KvRole = Field(description="``kv_producer`` on the prefill role, ``kv_consumer`` on the decode role.")
    backend: TransferBackend = Field(description="NIXL backend: LIBFABRIC where both roles' pools have EFA, else UCX.")


class VllmSettings(BaseModel):
    """vLLM engine arguments, named as the CLI flags (``--tensor-parallel-size`` ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tensor_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: Literal["auto", "fp8"]
    dtype: Literal["bfloat16", "float16"]
    quantization: Literal["fp8", "awq"] | None
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    block_size: int = Field(
        description="Tokens per KV-cache block (``--block-size``), rendered for GPUs; also the gateway's prefix-index "
        "block, so the router's blocks are the engine's."
    )
    kv_offloading_size_gib: int | None = Field(
        default=None,
        description="``--kv-offloading-size``: GiB of host memory holding KV blocks beyond the device pool, summed "
        "over the tensor-parallel ranks (vLLM 0.32 ``CacheConfig.kv_offloading_size``), with the ``native`` backend "
        "(its OffloadingConnector); None: no host tier.",
    )
    kv_transfer: KvTransferSettings | None = Field(
        default=None,
        description="The KV transfer of a disaggregated role (NixlConnector; with a host tier, both connectors "
        "under vLLM's MultiConnector); None when aggregated.",
    )
    stream_interval: int = Field(
        ge=1,
        description="``--stream-interval``: tokens a streamed chunk gathers after the first, sent alone "
        "(:func:`stream_interval`).",
    )


class TrtLlmSettings(BaseModel):
    """TensorRT-LLM build and Triton ``tensorrt_llm`` model settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tensor_parallel: int
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    kv_cache_free_gpu_mem_fraction: float
    kv_cache_dtype: Literal["auto", "fp8"]
    weights_qformat: Literal["full_prec", "fp8"]
    enable_chunked_context: bool
    enable_kv_cache_reuse: bool
    tokens_per_block: int = Field(
        description="Tokens per KV-cache block (``trtllm-build --tokens_per_block``): KV reuse matches whole blocks; "
        "also the gateway's prefix-index block."
    )


class SglangSettings(BaseModel):
    """SGLang server arguments (``python3 -m sglang.launch_server``), named as its flags (``--tp-size`` ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp_size: int = Field(description="``--tp-size``: tensor-parallel ranks, one per GPU of the replica.")
    context_length: int = Field(description="``--context-length``: the longest sequence served (prompt + output).")
    max_running_requests: int = Field(
        description="``--max-running-requests``: sequences in the running batch, the gateway's per-replica slots."
    )
    mem_fraction_static: float = Field(
        description="``--mem-fraction-static``: share of the memory free before loading that holds the weights and "
        "the KV pool (:func:`sglang_mem_fraction_static`); activations and CUDA graphs live in the rest."
    )
    chunked_prefill_size: int = Field(
        description="``--chunked-prefill-size``: prompt tokens per prefill chunk, -1 when chunking is off."
    )
    kv_cache_dtype: Literal["auto", "fp8_e4m3"] = Field(
        description="``--kv-cache-dtype``: ``auto`` (the model's dtype) or FP8 E4M3 (what vLLM's ``fp8`` means)."
    )
    dtype: Literal["bfloat16", "float16"] = Field(description="``--dtype``: weights' and activations' dtype.")
    quantization: Literal["fp8", "awq"] | None = Field(description="``--quantization``; None for 16-bit weights.")
    schedule_policy: Literal["lpm", "fcfs"] = Field(
        description="``--schedule-policy``: ``lpm`` (longest cached prefix first) for prefix-heavy traffic, else "
        "``fcfs``."
    )
    disable_radix_cache: bool = Field(description="``--disable-radix-cache``: no prefix cache (RadixAttention off).")
    stream_interval: int = Field(
        ge=1,
        description="``--stream-interval``: tokens a streamed chunk gathers after the first, sent alone "
        "(:func:`stream_interval`).",
    )
    page_size: int = Field(
        description="``--page-size``: tokens per KV page; the radix cache reuses whole pages, and the gateway's "
        "prefix index hashes blocks of this size."
    )


class SizingResult(BaseModel):
    """What sizing concluded for one model on one accelerator; ``fits`` False comes with ``reason``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="Model id or repository.")
    accelerator: str = Field(description="Accelerator id.")
    accelerators_per_node: int = Field(description="Accelerators per node; tensor parallelism stays within it.")
    weights_dtype: WeightsDtype
    kv_cache_dtype: KvCacheDtype
    context: int = Field(description="max_context, tokens.")
    concurrency: int = Field(description="Target concurrent sequences per replica.")
    gpu_memory_utilization: float
    weights_bytes: int = Field(description="All weights of one replica.")
    kv_cache_bytes_per_token: int = Field(description="2 x layers x KV heads x head dim x bytes.")
    kv_cache_bytes_required: int = Field(description="Per token x context x concurrency.")
    kv_head_replication: float = Field(description="Cache growth when TP exceeds KV heads (1.0 otherwise).")
    tensor_parallel_size: int = Field(
        description="Chosen TP (accelerators per replica); the largest tried if none fit."
    )
    usable_bytes: int = Field(description="TP x device memory x gpu_memory_utilization.")
    reserve_bytes: int = Field(description="Runtime reserve plus peak activations, whole replica.")
    kv_pool_bytes: int = Field(description="What is left for the KV cache (negative when weights do not fit).")
    host_kv_cache_bytes: int = Field(
        description="The host-memory KV tier of one replica (vLLM's ``--kv-offloading-size``): its share of the "
        "node's memory less ``/dev/shm`` and the engine's own processes; 0 when the deployment has none."
    )
    max_concurrent_sequences: int = Field(description="Sequences of full context the KV pool holds.")
    fits: bool
    reason: str | None = Field(description="Why it does not fit (None when it does).")
    alternatives: tuple[str, ...] = Field(description="Concrete changes that would fit, when it does not.")
    max_num_batched_tokens: int = Field(description="Per-step token budget derived from the ITL objective.")
    decode_tokens_per_second: float = Field(description="Roofline estimate for one replica at target concurrency.")
    decode_step_ms: float = Field(description="Roofline decode step, i.e. estimated inter-token latency.")
    weights_fetch_seconds: float = Field(description="S3 to node-local NVMe, once per node.")
    engine_start_seconds: float = Field(description="Load into device memory plus warm-up (startup probe budget).")
    cold_start_seconds: float = Field(description="Fetch plus engine start.")
    vllm: VllmSettings
    trtllm: TrtLlmSettings
    sglang: SglangSettings


@dataclass(frozen=True)
class SizingRequest:
    """Inputs of one sizing question."""

    model: ModelArchitecture
    model_label: str
    accelerator: Accelerator
    accelerators_per_node: int
    weights_dtype: WeightsDtype = "bf16"
    kv_cache_dtype: KvCacheDtype = "auto"
    context: int = 8192
    concurrency: int = 32
    gpu_memory_utilization: float = 0.90
    tensor_parallel_size: int | None = None
    chunked_prefill: bool = True
    prefix_caching: bool = True
    itl_slo_ms: int = 100
    stream_chunk_ms: int = STREAM_CHUNK_MS
    """How long a stream's tokens may gather into one chunk (:func:`stream_interval`)."""
    whole_node: bool = False
    """TPU pods take every chip of their host, so TP is the host's chip count."""
    prefix_heavy: bool = False
    """Prompts mostly share long prefixes: SGLang schedules the longest cached prefix first."""
    host_kv_node: InstanceType | None = None
    """The node type whose host memory holds a host KV tier for each replica (vLLM's KV offloading), sized from the
    replica's share of it; None: no host tier."""
    role: ServingRole = "aggregated"
    """What the replicas do: both phases, or one role of a disaggregated model (a prefill replica runs no decodes, so
    its step budget is not bounded by the ITL objective)."""
    transfer_backend: TransferBackend = "UCX"
    """NIXL's backend for a disaggregated role's KV transfer (LIBFABRIC where both roles' pools have EFA)."""


def tensor_parallel_candidates(request: SizingRequest) -> list[int]:
    """Powers of two that divide the node's accelerators and the attention heads, smallest first."""
    if request.whole_node:
        return [request.accelerators_per_node]
    sizes = []
    size = 1
    while size <= request.accelerators_per_node:
        divides = request.accelerators_per_node % size == 0 and request.model.attention_heads % size == 0
        kv_ok = size <= request.model.kv_heads or size % request.model.kv_heads == 0
        if divides and kv_ok:
            sizes.append(size)
        size *= 2
    return sizes


def _tp_problem(request: SizingRequest, tp: int) -> str | None:
    if tp > request.accelerators_per_node:
        return (
            f"tensor parallel {tp} exceeds the {request.accelerators_per_node} accelerators of one node; "
            "tensor parallelism never crosses a node"
        )
    if tp & (tp - 1):
        return f"tensor parallel {tp} is not a power of two"
    if request.accelerators_per_node % tp:
        return f"tensor parallel {tp} does not divide the {request.accelerators_per_node} accelerators of a node"
    if request.model.attention_heads % tp:
        return f"tensor parallel {tp} does not divide the model's {request.model.attention_heads} attention heads"
    if tp > request.model.kv_heads and tp % request.model.kv_heads:
        return f"tensor parallel {tp} is not a multiple of the model's {request.model.kv_heads} KV heads"
    return None


@dataclass(frozen=True)
class _Evaluation:
    tp: int
    usable: int
    reserve: int
    kv_pool: int
    kv_effective_per_token: int
    replication: float
    max_sequences: int
    batched_tokens: int
    fits: bool


def _peak_tflops(request: SizingRequest) -> float:
    acc = request.accelerator
    if request.weights_dtype == "fp8" and acc.fp8_dense_tflops is not None:
        return acc.fp8_dense_tflops
    return acc.bf16_dense_tflops


def _batched_tokens(request: SizingRequest, tp: int) -> int:
    """Tokens per engine step: as many prefill tokens as compute within one ITL objective, within bounds; a prefill
    role's steps carry no decodes to keep flowing, so it takes the largest budget (the fewest, fullest steps)."""
    if request.role == "prefill":
        return max(MAX_BATCHED_TOKENS if request.chunked_prefill else request.context, request.concurrency)
    if not request.chunked_prefill:
        # Without chunking a whole prompt is one step, so the budget must hold the longest one.
        return max(request.context, request.concurrency)
    flops_per_token = 2 * request.model.decode_parameters
    budget_seconds = request.itl_slo_ms / 1000
    tokens = budget_seconds * tp * _peak_tflops(request) * 1e12 * COMPUTE_EFFICIENCY / flops_per_token
    power: int = 2 ** math.floor(math.log2(max(tokens, 1)))
    bounded = min(max(power, MIN_BATCHED_TOKENS), MAX_BATCHED_TOKENS)
    return max(bounded, request.concurrency)


def vllm_kv_pool_bytes(*, device_bytes: int, gpu_memory_utilization: float, weights: int, non_kv: int) -> int:
    """vLLM's KV pool: what ``gpu_memory_utilization`` of the device leaves after everything that is not KV cache.

    vLLM v1 requests ``total_memory x gpu_memory_utilization`` of each GPU (``Worker.init_device``) and gives the KV
    cache ``requested_memory - non_kv_cache_memory``: the weights, the profile run's peak activations and the
    non-torch memory such as NCCL buffers (``Worker.determine_available_memory``;
    vllm-project/vllm@35d5cda123ec28581759b6d34cde8052314fb1e6, ``vllm/v1/worker/gpu_worker.py``). The budget is a
    share of the device, so near the memory edge the weights take nearly all of it. ``device_bytes`` and the
    result are the whole replica's; ``non_kv`` is the reserve besides the weights (CUDA graphs, NCCL, allocator,
    activations, logits). Negative when the weights and reserve exceed the budget.
    """
    return int(device_bytes * gpu_memory_utilization) - weights - non_kv


def trtllm_kv_pool_bytes(*, device_bytes: int, free_fraction: float, weights: int, runtime_buffers: int) -> int:
    """TensorRT-LLM's KV pool: ``kv_cache_free_gpu_mem_fraction`` of the memory still free once the weights and
    the runtime's own buffers are allocated, not a share of the device.

    The C++ runtime takes ``(cudaMemGetInfo free + memory pool free) x freeGpuMemoryFraction`` when it builds the
    KV cache manager, after loading the engine (``BaseKVCacheManager::calculateFreeMemBytes``, called from
    ``TrtGptModelInflightBatching``; NVIDIA/TensorRT-LLM@002ba6a7cc5eb28f180d45d4a91142d9d927a606,
    ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``); the PyTorch backend the same after a profiling run,
    ``(total_gpu_memory - peak_memory) x fraction`` (``KvCacheCreator._cal_max_memory``,
    NVIDIA/TensorRT-LLM@0004396720054fd8e205cbf616f21f0b57c6b412, ``tensorrt_llm/_torch/pyexecutor/_util.py``).
    ``device_bytes`` and the result are the whole replica's. Negative when the weights and buffers do not fit.
    """
    free = device_bytes - weights - runtime_buffers
    return int(free * free_fraction) if free > 0 else free


def sglang_kv_pool_bytes(*, device_bytes: int, mem_fraction_static: float, weights: int) -> int:
    """SGLang's KV pool: ``mem_fraction_static`` of the memory free before loading, less the weights.

    SGLang measures the free memory ``B`` before it loads the model, then sizes the KV pool from the memory still free
    after loading, ``available``, as ``available - B x (1 - mem_fraction_static)``: the remainder ``1 -
    mem_fraction_static`` is the runtime's slack, where activations, CUDA graphs and NCCL buffers live
    (``KvCacheConfigurator._profile_available_bytes``, ``sglang/srt/mem_cache/kv_cache_configurator.py`` of sglang
    0.5.23; "The fraction of the memory used for static allocation (model weights and KV cache memory pool)",
    ``--mem-fraction-static``'s help in ``sglang/srt/arg_groups/fields/schedule.py``). With ``available = B -
    weights`` that is ``B x mem_fraction_static - weights``. So unlike vLLM's ``gpu_memory_utilization``, whose
    budget also holds the profiled activations and non-torch memory, the fraction covers only weights and KV cache.
    ``B`` is modelled as the device memory; the CUDA context SGLang creates before measuring it (a few hundred MiB
    per GPU) makes the real pool smaller by that times the fraction, an optimism this model keeps (unmeasured here).
    ``device_bytes`` and the result are the whole replica's; negative when the weights do not fit.
    """
    return int(device_bytes * mem_fraction_static) - weights


def sglang_mem_fraction_static(*, device_bytes: int, weights: int, kv_pool: int, cap: float) -> float:
    """The ``--mem-fraction-static`` that gives SGLang the KV pool sizing planned, floored to three decimals.

    The plan's budget is vLLM's: ``gpu_memory_utilization`` of the device holds weights, reserve and KV pool. SGLang
    keeps the reserve outside its fraction, so the fraction is ``(weights + kv_pool) / device``, i.e. the utilization
    less the reserve's share; the engine's whole footprint then stays within the utilization cap (``cap``) as
    vLLM's does. A misfit (no KV pool) is rendered at the cap, never above it."""
    fraction = (weights + max(kv_pool, 0)) / device_bytes
    return min(_fraction_floor(fraction, 3), cap)


def _evaluate(request: SizingRequest, tp: int, weights: int, kv_per_token: int) -> _Evaluation:
    model = request.model
    usable = int(tp * request.accelerator.memory_bytes * request.gpu_memory_utilization)
    batched = _batched_tokens(request, tp)
    activations = batched * model.hidden_size * ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN
    logits = request.concurrency * model.vocab_size * LOGITS_BYTES
    reserve = tp * RUNTIME_RESERVE_BYTES_PER_GPU + activations + logits
    replication = max(model.kv_heads, tp) / model.kv_heads
    kv_effective = int(kv_per_token * replication)
    # The platform's budget is vLLM's (a share of the device) for every engine: TensorRT-LLM gets the fraction of its
    # free memory and SGLang the static fraction that yield the same pool (``_kv_cache_fraction``,
    # ``sglang_mem_fraction_static``), so the safety cap holds for all three.
    kv_pool = vllm_kv_pool_bytes(
        device_bytes=tp * request.accelerator.memory_bytes,
        gpu_memory_utilization=request.gpu_memory_utilization,
        weights=weights,
        non_kv=reserve,
    )
    per_sequence = kv_effective * request.context
    max_sequences = max(kv_pool, 0) // per_sequence
    return _Evaluation(
        tp=tp,
        usable=usable,
        reserve=reserve,
        kv_pool=kv_pool,
        kv_effective_per_token=kv_effective,
        replication=replication,
        max_sequences=int(max_sequences),
        batched_tokens=batched,
        fits=max_sequences >= request.concurrency,
    )


def _decode_roofline(request: SizingRequest, ev: _Evaluation, weights: int) -> tuple[float, float]:
    """(tokens per second, step milliseconds) at target concurrency, sequences half-way through their context."""
    model = request.model
    acc = request.accelerator
    batch = max(1, min(request.concurrency, ev.max_sequences)) if ev.fits else max(1, request.concurrency)
    active_weights = weights * model.decode_parameters / model.parameters
    mean_context = request.context / 2
    bytes_per_gpu = (active_weights + batch * mean_context * ev.kv_effective_per_token) / ev.tp
    memory_seconds = bytes_per_gpu / (acc.memory_bandwidth_gbps * 1e9 * MEMORY_BANDWIDTH_EFFICIENCY)
    attention_flops = 4 * model.layers * model.attention_heads * model.head_dim * mean_context
    flops_per_gpu = batch * (2 * model.decode_parameters + attention_flops) / ev.tp
    compute_seconds = flops_per_gpu / (_peak_tflops(request) * 1e12 * COMPUTE_EFFICIENCY)
    # Two all-reduces of the hidden state per layer; a ring moves 2(tp-1)/tp of the message per rank.
    comm_bytes = 2 * model.layers * batch * model.hidden_size * 2 * 2 * (ev.tp - 1) / ev.tp
    comm_seconds = comm_bytes / (acc.interconnect_gbps * 1e9 * INTERCONNECT_EFFICIENCY)
    step = max(memory_seconds, compute_seconds) + comm_seconds
    return batch / step, step * 1000


def _fraction_floor(value: float, digits: int = 2) -> float:
    scale = 10.0**digits
    return math.floor(value * scale) / scale


def size(request: SizingRequest) -> SizingResult:
    """Size one model on one accelerator type; never raises for a misfit, it explains it."""
    model = request.model
    weights = weights_bytes(model, request.weights_dtype)
    element = kv_element_bytes(model, request.kv_cache_dtype, request.weights_dtype)
    kv_per_token = kv_cache_bytes_per_token(model, element)
    utilization = min(request.gpu_memory_utilization, MAX_GPU_MEMORY_UTILIZATION)
    request = replace(request, gpu_memory_utilization=utilization)

    problem, candidates = _tp_plan(request)
    chosen = _choose(request, candidates=candidates, problem=problem, weights=weights, kv_per_token=kv_per_token)
    fits = problem is None and chosen.fits
    reason, alternatives = _verdict(request, chosen, problem=problem, weights=weights, fits=fits)
    host_tier = _host_tier(request, chosen)
    if fits and host_tier.problem is not None:
        fits, reason, alternatives = False, host_tier.problem, host_tier.alternatives
    return _result(
        request,
        chosen,
        weights=weights,
        kv_per_token=kv_per_token,
        fits=fits,
        reason=reason,
        alternatives=alternatives,
        host_kv_bytes=max(host_tier.bytes, 0),
    )


@dataclass(frozen=True)
class _HostTier:
    bytes: int
    problem: str | None = None
    alternatives: tuple[str, ...] = ()


def _host_tier(request: SizingRequest, chosen: _Evaluation) -> _HostTier:
    """The host KV tier one replica can pin, or why it cannot have one worth having.

    vLLM's OffloadingConnector stores a copy of each completed prompt block in host memory and loads it back on a
    prefix hit (``docs/features/kv_offloading_usage.md``), so a tier no larger than the device's pool holds nothing
    the device does not: that is refused, as is a node whose memory share cannot hold one at all."""
    node = request.host_kv_node
    if node is None:
        return _HostTier(bytes=0)
    tier = host_kv_tier_bytes(node, chosen.tp)
    if tier > max(chosen.kv_pool, 0):
        return _HostTier(bytes=tier)
    share = replica_host_share(node, chosen.tp)
    problem = (
        f"host_kv_cache: a TP {chosen.tp} replica's share of {node.name} is {_gib(share.memory_bytes)} of host "
        f"memory, which leaves {_gib(max(tier, 0))} for a host KV tier after {_gib(share.shm_bytes)} of /dev/shm and "
        f"{_gib(engine_host_bytes(chosen.tp))} for the engine's processes: no more than its "
        f"{_gib(max(chosen.kv_pool, 0))} device KV pool, so the tier would hold nothing the device does not"
    )
    larger = [
        other.name
        for other in instances_for(request.accelerator.id)
        if other.accelerators_per_node % chosen.tp == 0 and host_kv_tier_bytes(other, chosen.tp) > chosen.kv_pool
    ]
    alternatives = ["host_kv_cache: false"]
    if larger:
        alternatives.append(f"a node with more host memory per GPU: {', '.join(larger)}")
    return _HostTier(bytes=tier, problem=problem, alternatives=tuple(alternatives))


def _tp_plan(request: SizingRequest) -> tuple[str | None, list[int]]:
    """Why the requested tensor-parallel size cannot run (None if it can), and the sizes to evaluate."""
    problem: str | None = None
    if request.tensor_parallel_size is not None:
        problem = _tp_problem(request, request.tensor_parallel_size)
        if request.whole_node and request.tensor_parallel_size != request.accelerators_per_node:
            problem = f"a TPU host's {request.accelerators_per_node} chips serve one replica"
        candidates = [request.tensor_parallel_size]
    else:
        candidates = tensor_parallel_candidates(request)
        if not candidates:
            problem = (
                f"no tensor-parallel size divides both the node and {request.model.attention_heads} attention heads"
            )
    return problem, candidates


def _choose(
    request: SizingRequest, *, candidates: list[int], problem: str | None, weights: int, kv_per_token: int
) -> _Evaluation:
    """The smallest candidate that fits, else the largest tried; a size that cannot run is still costed."""
    evaluations = [_evaluate(request, tp, weights, kv_per_token) for tp in candidates] if not problem else []
    chosen = next((ev for ev in evaluations if ev.fits), evaluations[-1] if evaluations else None)
    if chosen is None:
        # Nothing was evaluated: cost the requested size (or one accelerator) so the result still has numbers.
        tp = request.tensor_parallel_size or 1
        chosen = _evaluate(request, tp, weights, kv_per_token)
    return chosen


def _verdict(
    request: SizingRequest, chosen: _Evaluation, *, problem: str | None, weights: int, fits: bool
) -> tuple[str | None, tuple[str, ...]]:
    """The reason a misfit does not fit and the alternatives that would; (None, ()) when it fits."""
    reason: str | None = None
    alternatives: tuple[str, ...] = ()
    if not fits:
        reason = problem or _misfit_reason(request, chosen, weights)
        # A tensor-parallel size that cannot run leaves nothing to vary but the size itself.
        alternatives = tuple(_tp_alternatives(request) if problem else _alternatives(request, chosen))
    return reason, alternatives


def _result(
    request: SizingRequest,
    chosen: _Evaluation,
    *,
    weights: int,
    kv_per_token: int,
    fits: bool,
    reason: str | None,
    alternatives: tuple[str, ...],
    host_kv_bytes: int,
) -> SizingResult:
    """Assemble the result: memory budget, verdict, performance and cold-start estimates, engine settings."""
    tokens_per_second, step_ms = _decode_roofline(request, chosen, weights)
    fetch = weights / WEIGHTS_FETCH_BYTES_PER_SECOND
    engine_start = weights / WEIGHTS_LOAD_BYTES_PER_SECOND + WARMUP_SECONDS[request.accelerator.vendor]
    kv_engine: Literal["auto", "fp8"] = "fp8" if request.kv_cache_dtype == "fp8" else "auto"
    kv_fraction = _kv_cache_fraction(request, chosen, weights)
    interval = stream_interval(request.stream_chunk_ms, step_ms)
    return SizingResult(
        model=request.model_label,
        accelerator=request.accelerator.id,
        accelerators_per_node=request.accelerators_per_node,
        weights_dtype=request.weights_dtype,
        kv_cache_dtype=request.kv_cache_dtype,
        context=request.context,
        concurrency=request.concurrency,
        gpu_memory_utilization=request.gpu_memory_utilization,
        weights_bytes=weights,
        kv_cache_bytes_per_token=kv_per_token,
        kv_cache_bytes_required=kv_per_token * request.context * request.concurrency,
        kv_head_replication=chosen.replication,
        tensor_parallel_size=chosen.tp,
        usable_bytes=chosen.usable,
        reserve_bytes=chosen.reserve,
        kv_pool_bytes=chosen.kv_pool,
        host_kv_cache_bytes=host_kv_bytes,
        max_concurrent_sequences=chosen.max_sequences,
        fits=fits,
        reason=reason,
        alternatives=alternatives,
        max_num_batched_tokens=chosen.batched_tokens,
        decode_tokens_per_second=round(tokens_per_second, 1),
        decode_step_ms=round(step_ms, 2),
        weights_fetch_seconds=round(fetch, 1),
        engine_start_seconds=round(engine_start, 1),
        cold_start_seconds=round(fetch + engine_start, 1),
        vllm=_vllm_settings(request, chosen, kv_engine=kv_engine, host_kv_bytes=host_kv_bytes, interval=interval),
        trtllm=_trtllm_settings(request, chosen, kv_engine=kv_engine, kv_fraction=kv_fraction),
        sglang=_sglang_settings(request, chosen, weights=weights, interval=interval),
    )


def _kv_cache_fraction(request: SizingRequest, chosen: _Evaluation, weights: int) -> float:
    """TensorRT-LLM's KV share of the device memory left after weights and reserve, per GPU, floored."""
    device = request.accelerator.memory_bytes
    weights_per_gpu = weights / chosen.tp
    reserve_per_gpu = chosen.reserve / chosen.tp
    free_after_weights = device - weights_per_gpu - reserve_per_gpu
    return _fraction_floor(max(chosen.kv_pool, 0) / chosen.tp / free_after_weights) if free_after_weights > 0 else 0.0


def _vllm_settings(
    request: SizingRequest,
    chosen: _Evaluation,
    *,
    kv_engine: Literal["auto", "fp8"],
    host_kv_bytes: int,
    interval: int,
) -> VllmSettings:
    """vLLM's engine arguments for the chosen evaluation."""
    act = activation_dtype(request.model, request.weights_dtype)
    quantization: Literal["fp8", "awq"] | None = {"fp8": "fp8", "int4": "awq"}.get(request.weights_dtype)  # type: ignore[assignment]
    return VllmSettings(
        tensor_parallel_size=chosen.tp,
        max_model_len=request.context,
        max_num_seqs=request.concurrency,
        max_num_batched_tokens=chosen.batched_tokens,
        gpu_memory_utilization=request.gpu_memory_utilization,
        kv_cache_dtype=kv_engine,
        dtype="float16" if act == "fp16" else "bfloat16",
        quantization=quantization,
        enable_prefix_caching=request.prefix_caching,
        enable_chunked_prefill=request.chunked_prefill,
        block_size=VLLM_BLOCK_SIZE,
        kv_offloading_size_gib=host_kv_bytes // GIB if host_kv_bytes else None,
        kv_transfer=None
        if request.role == "aggregated"
        else KvTransferSettings(
            role="kv_producer" if request.role == "prefill" else "kv_consumer", backend=request.transfer_backend
        ),
        stream_interval=interval,
    )


def _sglang_settings(request: SizingRequest, chosen: _Evaluation, *, weights: int, interval: int) -> SglangSettings:
    """SGLang's server arguments for the chosen evaluation: the same pool, batch and chunk as the other engines."""
    act = activation_dtype(request.model, request.weights_dtype)
    quantization: Literal["fp8", "awq"] | None = {"fp8": "fp8", "int4": "awq"}.get(request.weights_dtype)  # type: ignore[assignment]
    fraction = sglang_mem_fraction_static(
        device_bytes=chosen.tp * request.accelerator.memory_bytes,
        weights=weights,
        kv_pool=chosen.kv_pool,
        cap=request.gpu_memory_utilization,
    )
    return SglangSettings(
        tp_size=chosen.tp,
        context_length=request.context,
        max_running_requests=request.concurrency,
        mem_fraction_static=fraction,
        # SGLang refuses a chunk that is not a whole number of pages.
        chunked_prefill_size=-(-chosen.batched_tokens // SGLANG_PAGE_SIZE) * SGLANG_PAGE_SIZE
        if request.chunked_prefill
        else -1,
        kv_cache_dtype="fp8_e4m3" if request.kv_cache_dtype == "fp8" else "auto",
        dtype="float16" if act == "fp16" else "bfloat16",
        quantization=quantization,
        schedule_policy="lpm" if request.prefix_heavy and request.prefix_caching else "fcfs",
        disable_radix_cache=not request.prefix_caching,
        page_size=SGLANG_PAGE_SIZE,
        stream_interval=interval,
    )


def _trtllm_settings(
    request: SizingRequest, chosen: _Evaluation, *, kv_engine: Literal["auto", "fp8"], kv_fraction: float
) -> TrtLlmSettings:
    """TensorRT-LLM's build and model settings for the chosen evaluation."""
    return TrtLlmSettings(
        tensor_parallel=chosen.tp,
        max_batch_size=request.concurrency,
        max_input_len=request.context - 1,
        max_seq_len=request.context,
        max_num_tokens=chosen.batched_tokens,
        kv_cache_free_gpu_mem_fraction=min(kv_fraction, 0.95),
        kv_cache_dtype=kv_engine,
        weights_qformat="fp8" if request.weights_dtype == "fp8" else "full_prec",
        enable_chunked_context=request.chunked_prefill,
        enable_kv_cache_reuse=request.prefix_caching,
        tokens_per_block=TRTLLM_TOKENS_PER_BLOCK,
    )


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def _misfit_reason(request: SizingRequest, ev: _Evaluation, weights: int) -> str:
    where = (
        f"{ev.tp} x {request.accelerator.id} (TP {ev.tp}, {_gib(ev.usable)} usable at {request.gpu_memory_utilization})"
    )
    if weights + ev.reserve > ev.usable:
        return (
            f"{request.model_label} weights in {request.weights_dtype} take {_gib(weights)}, plus a "
            f"{_gib(ev.reserve)} runtime reserve, more than {where}"
        )
    needed = ev.kv_effective_per_token * request.context * request.concurrency
    return (
        f"the KV cache for {request.concurrency} sequences x {request.context} tokens needs {_gib(needed)}, "
        f"but {where} leaves {_gib(ev.kv_pool)} after {_gib(weights)} of weights; "
        f"it holds {ev.max_sequences} of them"
    )


def _fits_with(request: SizingRequest, **changes: object) -> SizingResult:
    return size(replace(request, **changes))  # type: ignore[arg-type]


def _tp_alternatives(request: SizingRequest) -> list[str]:
    """The tensor-parallel sizes that run on this node and model, each sized again; those that fit first."""
    if request.whole_node:
        return [f"a TPU host's {request.accelerators_per_node} chips serve one replica; pick another host size"]
    sizes = [
        tp
        for tp in tensor_parallel_candidates(replace(request, tensor_parallel_size=None))
        if tp != request.tensor_parallel_size and _tp_problem(request, tp) is None
    ]
    fitting = [alt for alt in (_fits_with(request, tensor_parallel_size=tp) for tp in sizes) if alt.fits]
    if fitting:
        return [f"TP {alt.tensor_parallel_size}: fits ({alt.max_concurrent_sequences} sequences)" for alt in fitting]
    if not sizes:
        return [f"no tensor-parallel size divides both the node and {request.model.attention_heads} attention heads"]
    return [f"tensor-parallel sizes that run here: {', '.join(map(str, sizes))}; none fits at these settings"]


def _alternatives(request: SizingRequest, largest: _Evaluation) -> list[str]:
    """Concrete changes that fit, each checked by sizing again."""
    found: list[str] = []

    def offer(label: str, alt: SizingResult) -> bool:
        if alt.fits:
            found.append(f"{label}: fits at TP {alt.tensor_parallel_size} ({alt.max_concurrent_sequences} sequences)")
        return alt.fits

    # NVIDIA GPUs serve fp8 (natively on Ada/Hopper, weight-only Marlin kernels on Ampere); TPU v5e does not.
    if request.accelerator.vendor == "nvidia":
        sixteen_bit = request.weights_dtype in ("bf16", "fp16")
        fp8_weights = sixteen_bit and offer("fp8 weights", _fits_with(request, weights_dtype="fp8"))
        fp8_kv = request.kv_cache_dtype != "fp8" and offer("fp8 KV cache", _fits_with(request, kv_cache_dtype="fp8"))
        if sixteen_bit and request.kv_cache_dtype != "fp8" and not (fp8_weights or fp8_kv):
            offer("fp8 weights and KV cache", _fits_with(request, weights_dtype="fp8", kv_cache_dtype="fp8"))
    if request.tensor_parallel_size is not None and largest.tp < request.accelerators_per_node:
        alt = _fits_with(request, tensor_parallel_size=None)
        if alt.fits:
            found.append(f"more GPUs per replica: fits at TP {alt.tensor_parallel_size}")
    for other in sorted(ACCELERATORS.values(), key=lambda a: a.memory_mib):
        if other.vendor != request.accelerator.vendor or other.memory_mib <= request.accelerator.memory_mib:
            continue
        nodes = instances_for(other.id)
        if not nodes:
            continue
        alt = _fits_with(
            request,
            accelerator=other,
            accelerators_per_node=nodes[0].accelerators_per_node,
            tensor_parallel_size=None,
            host_kv_node=None,  # the device's fit; the host tier is sized again on the node chosen
        )
        if alt.fits:
            tp = alt.tensor_parallel_size
            # The smallest node type that holds one replica, not the largest the sizing tried.
            smallest = min((n for n in nodes if n.accelerators_per_node % tp == 0), key=lambda n: n.vcpus)
            found.append(f"a larger GPU: {other.id} fits at TP {tp} ({smallest.name})")
            break
    if largest.kv_pool > 0:
        per_sequence_token = largest.kv_effective_per_token * request.concurrency
        context = int(largest.kv_pool // per_sequence_token) // 1024 * 1024
        if context >= 1024:
            found.append(f"shorter context: {context} tokens at {request.concurrency} sequences (TP {largest.tp})")
        if largest.max_sequences >= 1:
            found.append(f"fewer sequences: {largest.max_sequences} at {request.context} tokens (TP {largest.tp})")
    if not found:
        found.append("no single change fits: combine fp8 weights and KV cache with a larger GPU, or shard across nodes")
    return found


# --- the whole platform -------------------------------------------------------------------------------------


class DeploymentSizing(BaseModel):
    """Sizing and cost for one model deployment of a stack."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    pool: str
    instance_type: str
    engine: Engine
    result: SizingResult
    gpus_per_replica: int
    min_replicas: int
    max_replicas: int
    replica_hourly_usd: float | None = Field(description="Share of the node price one replica occupies.")
    hourly_usd_min: float | None
    hourly_usd_max: float | None
    role: ServingRole = Field(default="aggregated", description="What these replicas do.")
    prefill: DeploymentSizing | None = Field(
        default=None, description="A disaggregated model's prefill role (this sizing is then its decode role)."
    )
    transfer: KvTransferSizing | None = Field(
        default=None, description="A disaggregated model's KV transfer from its prefill role to its decode role."
    )

    @property
    def roles(self) -> tuple[DeploymentSizing, ...]:
        """This sizing and its prefill role's: every set of replicas the model runs."""
        return (self,) if self.prefill is None else (self, self.prefill)


class PoolSizing(BaseModel):
    """Node counts and cost for one accelerator pool, from the deployments placed on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    instance_type: str
    accelerator: str
    accelerators_per_node: int
    min_nodes: int
    max_nodes: int
    node_hourly_usd: float | None
    hourly_usd_min: float | None
    hourly_usd_max: float | None


class PlatformSizing(BaseModel):
    """Sizing for a whole stack, with its verdict against the environment's limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str
    deployments: tuple[DeploymentSizing, ...]
    pools: tuple[PoolSizing, ...]
    total_gpus_max: int
    hourly_usd_min: float | None
    hourly_usd_max: float | None
    problems: tuple[str, ...] = Field(description="Misfits and exceeded limits; empty when the plan is sound.")
    embedder: EmbedderSizing | None = Field(
        default=None, description="The semantic cache's served embedder, when the platform runs one."
    )
    prometheus: tuple[PrometheusSizing, ...] = Field(
        default=(),
        description="Each serving cluster's Prometheus: the series it holds, its requests, the disk its retention "
        "needs.",
    )
    system_nodes: tuple[SystemNodesSizing, ...] = Field(
        default=(),
        description="Each cluster's system nodes against the gateway, the embedder and the add-ons placed there.",
    )

    @property
    def ok(self) -> bool:
        """True when every model fits and every limit holds."""
        return not self.problems

    @property
    def servings(self) -> dict[str, DeploymentSizing]:
        """Every set of replicas by name: each model's sizing and a disaggregated model's prefill role's
        (``spec.serving_deployments``)."""
        return {role.name: role for d in self.deployments for role in d.roles}

    def serving(self, name: str) -> DeploymentSizing:
        """The sizing of a model, or of a disaggregated model's prefill role, by name."""
        return self.servings[name]


def request_for(
    deployment: ModelDeploymentSpec,
    spec: PlatformSpec,
    role: ServingRole = "aggregated",
    transfer_backend: TransferBackend = "UCX",
) -> SizingRequest:
    """The sizing question a deployment (or one role of it) of a validated spec asks."""
    pool = spec.pool(deployment.pool)
    instance = get_instance_type(pool.instance_type)
    accelerator = ACCELERATORS[instance.accelerator]
    return SizingRequest(
        model=deployment.architecture_resolved,
        model_label=deployment.model_label,
        accelerator=accelerator,
        accelerators_per_node=instance.accelerators_per_node,
        weights_dtype=deployment.weights_dtype,
        kv_cache_dtype=deployment.kv_cache_dtype,
        context=deployment.max_context,
        concurrency=deployment.concurrency,
        gpu_memory_utilization=deployment.gpu_memory_utilization,
        tensor_parallel_size=deployment.gpus_per_replica,
        chunked_prefill=deployment.chunked_prefill,
        prefix_caching=deployment.prefix_caching,
        itl_slo_ms=deployment.slo.itl_p95_ms,
        stream_chunk_ms=deployment.stream_chunk_ms,
        whole_node=accelerator.vendor == "google",
        prefix_heavy=deployment.prefix_heavy,
        host_kv_node=instance if deployment.host_kv_cache else None,
        role=role,
        transfer_backend=transfer_backend,
    )


def _sum_or_none(values: list[float | None]) -> float | None:
    if any(v is None for v in values):
        return None
    return round(sum(v for v in values if v is not None), 4)


LIMIT_POLICIES: dict[str, str] = {
    "max_total_gpus": "compute-stack-limit-total-accelerators",
    "max_hourly_cost_usd": "cost-stack-limit-hourly-cost",
    "allowed_accelerators": "eks-nodegroup-configure-allowed-instance-types",
    "allow_spot": "eks-nodegroup-disallow-spot-capacity",
    "max_context": "inference-server-limit-max-model-len",
}
"""Each of ``spec.limits``' fields and the policy of the pack (``policies/``) that enforces it on the plan."""


def _limit(field: str, message: str) -> str:
    """A limit breach as reported: the limit's key, the policy enforcing it, then what breaks it."""
    return f"{PLATFORM_KEY}.limits.{field} (policy {LIMIT_POLICIES[field]}): {message}"


def _limit_breaches(spec: PlatformSpec) -> list[str]:
    """Pools and models outside the environment's limits other than the totals: refused plans (exit 1), not
    invalid input, as a total over the ceiling is."""
    problems: list[str] = []
    allowed = spec.limits.allowed_accelerators
    for i, pool in enumerate(spec.pools):
        if pool.accelerator not in allowed:
            problems.append(
                _limit(
                    "allowed_accelerators",
                    f"pools[{i}] {pool.name}: {pool.accelerator} is not allowed in {spec.environment} "
                    f"({', '.join(allowed)})",
                )
            )
        if pool.capacity_type == "spot" and not spec.limits.allow_spot:
            problems.append(
                _limit("allow_spot", f"pools[{i}] {pool.name}: spot capacity is not allowed in {spec.environment}")
            )
    for i, deployment in enumerate(spec.models):
        if deployment.max_context > spec.limits.max_context:
            problems.append(
                _limit(
                    "max_context",
                    f"models[{i}] {deployment.name}: max_context {deployment.max_context} exceeds the limit of "
                    f"{spec.limits.max_context} tokens",
                )
            )
    return problems


def size_platform(spec: PlatformSpec) -> PlatformSizing:
    """Size every deployment, then the pools they land on, then check the environment's limits and that the system
    nodes hold what the platform puts there."""
    deployments = [_size_deployment(spec, deployment) for deployment in spec.models]
    problems = _misfits(deployments)
    pools = [_size_pool(spec, pool, deployments) for pool in spec.pools]
    total_gpus = sum(p.max_nodes * p.accelerators_per_node for p in pools)
    cost_min = _sum_or_none([p.hourly_usd_min for p in pools])
    cost_max = _sum_or_none([p.hourly_usd_max for p in pools])
    problems += _total_breaches(spec, pools, total_gpus=total_gpus, cost_max=cost_max)
    problems += _limit_breaches(spec)
    embedder = size_embedder(
        spec.cache, fetch_bytes_per_second=WEIGHTS_FETCH_BYTES_PER_SECOND, gateway_scale_out=SCALE_OUT_FACTOR
    )
    prometheus = _size_prometheus(spec, deployments, pools, embedder)
    problems += [p for p in (retention_problem(m, PLATFORM_KEY) for m in prometheus) if p is not None]
    system_nodes = size_system_nodes(spec, embedder, prometheus)
    problems += [problem for verdict in system_nodes for problem in verdict.problems]
    return PlatformSizing(
        environment=spec.environment,
        deployments=tuple(deployments),
        pools=tuple(pools),
        total_gpus_max=total_gpus,
        hourly_usd_min=cost_min,
        hourly_usd_max=cost_max,
        problems=tuple(problems),
        embedder=embedder,
        system_nodes=system_nodes,
        prometheus=prometheus,
    )


def _size_prometheus(
    spec: PlatformSpec,
    deployments: list[DeploymentSizing],
    pools: list[PoolSizing],
    embedder: EmbedderSizing | None,
) -> tuple[PrometheusSizing, ...]:
    """Each serving cluster's Prometheus (its monitoring stack runs where models are served), from what it scrapes at
    the platform's ceiling: the model replicas, the pools' GPUs and nodes, the system nodes, the gateway's pods."""
    cluster_of = {d.name: serving_cluster(spec, d) for d in spec.models}
    sized: list[PrometheusSizing] = []
    for cluster in dict.fromkeys(cluster_of[d.name] for d in deployments):
        on_cluster = [p for p in pools if _pool_cluster(p) == cluster]
        system_type, system_nodes = system_node_counts(spec, cluster)
        nodes = [(p.max_nodes, get_instance_type(p.instance_type).vcpus) for p in on_cluster]
        series = cluster_series(
            model_replicas=sum(r.max_replicas for d in deployments if cluster_of[d.name] == cluster for r in d.roles),
            gpus=sum(p.max_nodes * p.accelerators_per_node for p in on_cluster if cluster == "eks"),
            nodes=[*nodes, (system_nodes[1], system_type.vcpus)],
            gateway_pods=spec.gateway.replicas * SCALE_OUT_FACTOR,
            gateway_models=sum(1 for d in deployments if cluster_of[d.name] == cluster),
            tenants=len(spec.gateway.tenants),
            other_pods=embedder.max_replicas if embedder is not None and cluster in RESPONSE_CACHE_CLUSTERS else 0,
        )
        sized.append(size_prometheus(cluster, spec.observability, spec.environment, series))
    return tuple(sized)


def _pool_cluster(pool: PoolSizing) -> ServingCluster:
    return "eks" if get_instance_type(pool.instance_type).cloud == "aws" else "gke"


def _size_deployment(
    spec: PlatformSpec,
    deployment: ModelDeploymentSpec,
    role: ServingRole | None = None,
    transfer_backend: TransferBackend = "UCX",
) -> DeploymentSizing:
    """Size one deployment on its pool's instance type and price its replicas; a disaggregated one as its decode
    role, with its prefill role and the KV transfer between them."""
    pool = spec.pool(deployment.pool)
    instance = get_instance_type(pool.instance_type)
    prefill_role = deployment.prefill_role
    prefill_pool = None if prefill_role is None else spec.pool(prefill_role.pool)
    if prefill_pool is not None:
        transfer_backend = "LIBFABRIC" if pool.efa and prefill_pool.efa else "UCX"
    role = role or ("decode" if prefill_role is not None else "aggregated")
    result = size(request_for(deployment, spec, role, transfer_backend))
    price = hourly_price(instance.cloud, instance.name)
    gpus = result.tensor_parallel_size
    replica_price = None if price is None else price * gpus / instance.accelerators_per_node
    prefill = transfer = None
    if prefill_role is not None and prefill_pool is not None:
        prefill = _size_deployment(spec, prefill_role, "prefill", transfer_backend)
        transfer = size_transfer(
            decode_instance=instance,
            decode_gpus=gpus,
            prefill_instance=get_instance_type(prefill_pool.instance_type),
            prefill_gpus=prefill.gpus_per_replica,
            efa=transfer_backend == "LIBFABRIC",
            bytes_per_token=round(result.kv_cache_bytes_per_token * result.kv_head_replication),
            context=deployment.max_context,
            ttft_slo_ms=deployment.slo.ttft_p95_ms,
        )
    return DeploymentSizing(
        name=deployment.name,
        pool=pool.name,
        instance_type=instance.name,
        engine=deployment.engine,
        result=result,
        gpus_per_replica=gpus,
        min_replicas=deployment.min_replicas,
        max_replicas=deployment.max_replicas,
        replica_hourly_usd=None if replica_price is None else round(replica_price, 4),
        hourly_usd_min=None if replica_price is None else round(replica_price * deployment.min_replicas, 4),
        hourly_usd_max=None if replica_price is None else round(replica_price * deployment.max_replicas, 4),
        role=role,
        prefill=prefill,
        transfer=transfer,
    )


def _misfits(deployments: list[DeploymentSizing]) -> list[str]:
    """A problem for each deployment that does not fit, in the order of ``spec.models``."""
    problems = []
    for index, sizing in enumerate(deployments):
        for role in sizing.roles:
            if not role.result.fits:
                label = sizing.name if role is sizing else f"{sizing.name} (prefill role {role.name})"
                problems.append(f"models[{index}] {label}: does not fit: {role.result.reason}")
        if sizing.transfer is not None and sizing.transfer.problem is not None:
            problems.append(f"models[{index}] {sizing.name}: the KV transfer does not fit: {sizing.transfer.problem}")
    return problems


def _size_pool(spec: PlatformSpec, pool: PoolSpec, deployments: list[DeploymentSizing]) -> PoolSizing:
    """Node counts and cost of one pool from the replicas of the deployments placed on it."""
    instance = get_instance_type(pool.instance_type)
    placed = [role for d in deployments for role in d.roles if role.pool == pool.name]
    per_node = instance.accelerators_per_node
    # Replica sizes are powers of two dividing the node, so replicas pack nodes without fragments. Prod
    # spreads each deployment's replicas over zones, so those replicas never share a node.
    spread = len(spec.zones) if spec.environment == "prod" else 0
    min_nodes = max(
        pool.min_nodes,
        math.ceil(sum(d.gpus_per_replica * d.min_replicas for d in placed) / per_node),
        max((min(d.min_replicas, spread) for d in placed), default=0),
    )
    max_nodes = max(
        min_nodes,
        math.ceil(sum(d.gpus_per_replica * d.max_replicas for d in placed) / per_node),
        max((min(d.max_replicas, spread) for d in placed), default=0),
    )
    price = hourly_price(instance.cloud, instance.name)
    return PoolSizing(
        name=pool.name,
        instance_type=instance.name,
        accelerator=instance.accelerator,
        accelerators_per_node=per_node,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        node_hourly_usd=price,
        hourly_usd_min=None if price is None else round(price * min_nodes, 4),
        hourly_usd_max=None if price is None else round(price * max_nodes, 4),
    )


def _total_breaches(
    spec: PlatformSpec, pools: list[PoolSizing], *, total_gpus: int, cost_max: float | None
) -> list[str]:
    """The stack-wide limits at max scale: total accelerators, then the hourly cost (or why it is unknown)."""
    problems: list[str] = []
    if total_gpus > spec.limits.max_total_gpus:
        problems.append(
            _limit(
                "max_total_gpus",
                f"{total_gpus} accelerators at max scale exceed the limit of {spec.limits.max_total_gpus}",
            )
        )
    if cost_max is None:
        unpriced = sorted({p.instance_type for p in pools if p.node_hourly_usd is None})
        problems.append(
            _limit(
                "max_hourly_cost_usd",
                f"no on-demand price for {', '.join(unpriced)}; the cost ceiling cannot be checked",
            )
        )
    elif cost_max > spec.limits.max_hourly_cost_usd:
        problems.append(
            _limit(
                "max_hourly_cost_usd",
                f"${cost_max:,.2f}/h at max scale exceeds the limit of ${spec.limits.max_hourly_cost_usd:,.2f}/h",
            )
        )
    return problems
