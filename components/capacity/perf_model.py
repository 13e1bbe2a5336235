"""Performance of one replica under load: saturation throughput, and TTFT and ITL at a request rate.

Pure Python, no Pulumi. Everything comes from physics and the catalogs; there is no per-benchmark table.

One engine step (continuous batching, chunked prefill) runs the running sequences' decode tokens and a share of
prompt tokens together. Its duration is a roofline:

* memory: the weights once (for a mixture of experts, only the experts the step's tokens are routed to), plus
  every decoding sequence's KV cache, over ``TP x HBM bandwidth x MEMORY_BANDWIDTH_EFFICIENCY``;
* compute: ``2 x active parameters`` FLOPs per token plus attention (``4 x layers x heads x head dim x context``
  per token), over ``TP x peak dense FLOP/s for the compute dtype x COMPUTE_EFFICIENCY``;
* interconnect (TP > 1): two all-reduces of the step's hidden states per layer, ring-sized, over the chip's link
  bandwidth (one direction) x ``INTERCONNECT_EFFICIENCY``, plus a fixed latency per all-reduce;

The GEMMs and attention are separate kernels, so each gets its own roofline and they add up:
step = max(weights, GEMM FLOPs) + max(KV reads, attention FLOPs) + interconnect + a per-layer kernel overhead.
The largest of memory traffic, FLOPs and interconnect names the limit.

Saturation (what ``trtllm-bench throughput`` and ``vllm bench throughput`` measure): the batch is as large as the
KV cache and ``max_num_seqs`` allow; every finished sequence is replaced, so each step also carries
``batch x input / output`` prompt tokens, within the per-step token budget. TensorRT-LLM's default capacity
scheduler (guaranteed no evict) reserves a sequence's whole input + output in the KV cache up front; vLLM and
SGLang allocate pages as tokens arrive, so a sequence holds input + output / 2 on average.

SGLang runs prompts and decodes in separate steps (``--enable-mixed-chunk`` is off by default and sizing does not
set it): a prefill step carries up to ``--chunked-prefill-size`` prompt tokens and no decodes, a decode step only
decodes, so every prefill step reads the weights once more and stalls the running sequences for its length
(:func:`engine_step`). Its batch is ``--max-running-requests``; the chunk bounds a prefill step, not the batch.

Under a request rate the replica is an M/M/c queue (Erlang C): ``c`` = batch slots, service time = a request's
prefill plus ``output x ITL``, where ITL is the step time at the concurrency Little's law gives (solved as a fixed
point, since ITL grows with concurrency). TTFT p95 = the queue's exact p95 wait + the prompt's prefill steps;
ITL p95 = a step that carries a full prefill chunk when at least 4% of steps carry one on average (the p95's 5%, less
a margin for bursts: :data:`PREFILL_TAIL_SHARE`), else a decode-only step;
the mean step is the decode step plus that share of a chunk's extra time (:func:`engine_step`). A gateway in front
refuses what would wait longer than its queue timeout: :meth:`Latency.refused_share`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

from inferplane.components.capacity.sizing import (
    ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN,
    COMPUTE_EFFICIENCY,
    INTERCONNECT_EFFICIENCY,
    MEMORY_BANDWIDTH_EFFICIENCY,
    RUNTIME_RESERVE_BYTES_PER_GPU,
    SizingResult,
    kv_cache_bytes_per_token,
    kv_element_bytes,
    sglang_kv_pool_bytes,
    trtllm_kv_pool_bytes,
    weights_bytes,
)
from inferplane.components.catalog import Accelerator, ModelArchitecture
from inferplane.components.spec.platform_spec import Engine, KvCacheDtype, WeightsDtype

Limit = Literal["bandwidth", "compute", "interconnect"]
Capacity = Literal["kv-capacity", "max-num-seqs", "token-budget"]

ALLREDUCE_LATENCY_SECONDS = 10e-6
"""Fixed cost of one small all-reduce inside a node: an order-of-magnitude estimate for NCCL's low-latency
protocol over NVLink or PCIe (not a measured figure). It is what keeps TP from scaling single-stream decode
linearly."""

KERNEL_OVERHEAD_SECONDS_PER_LAYER = 20e-6
"""Launch, ramp-up and tail of the ~10 kernels a transformer layer runs per step (a few us each, even replayed
from a CUDA graph): what keeps a small batch from reaching the bandwidth roofline exactly. An estimate: one
constant for every model and GPU, not fitted per benchmark row; the published single-stream ITLs in
``tests/data/published_benchmarks.csv`` sit 0.5-5 ms above the pure bandwidth term, of this order."""

TAIL_SHARE = 0.05
"""p95: the share of steps (or requests) allowed above the reported figure."""

PREFILL_TAIL_SHARE = 0.04
"""ITL p95 is a step carrying a prefill chunk once this share of steps carry one on average: below
:data:`TAIL_SHARE` because prompts arrive in Poisson bursts and a chunk can straddle two steps, so a run's share
wanders above the mean. On the simulated fleet at a mean share of 5.0%, ITL p95 was 22.7 and 47.3 ms in two runs of
prod's llama-70b (decode step 21 ms, chunked step 95 ms) and 33.7 and 45.3 ms of prod's Triton 8B (17 and 47 ms):
a coin toss on a 60 ms and a 40 ms objective; at 4.6%, 27 ms (docs/simulate.md)."""


TRTLLM_DEFAULT_MAX_NUM_TOKENS = 8192
"""TensorRT-LLM's ``max_num_tokens`` by default (``BuildConfig`` in ``tensorrt_llm/builder.py``,
NVIDIA/TensorRT-LLM@008b2b8d23af95e4e19fa6f354f9c5f6349b2bfc) and ``trtllm-bench``'s "Max Runtime Tokens: 8192":
the step its activation buffers are sized for."""

SGLANG_DEFAULT_MAX_PREFILL_TOKENS = 16384
"""SGLang's ``--max-prefill-tokens`` default, the prompt tokens of one prefill step when chunking is off
(``--chunked-prefill-size -1``): ``max_prefill_tokens`` in ``sglang/srt/arg_groups/fields/schedule.py`` of
sglang 0.5.23."""

MEMORY_EDGE_WEIGHTS_SHARE = 0.5
"""A replica runs near the memory edge when its weights take at least half its device memory: the KV pool is then
smaller than the weights, so the base an engine's memory fraction is read against changes it most (a 70B FP8 model
on one 80 GB GPU: 0.85). The accuracy table lists such rows apart (``benchmarks/perf_model_accuracy.py``)."""


@dataclass(frozen=True)
class Replica:
    """One replica of one model on ``tensor_parallel_size`` accelerators, as an engine runs it."""

    model: ModelArchitecture
    accelerator: Accelerator
    tensor_parallel_size: int
    weights_dtype: WeightsDtype
    kv_cache_dtype: KvCacheDtype
    engine: Engine
    max_num_seqs: int
    """vLLM ``--max-num-seqs`` / TensorRT-LLM ``max_batch_size`` / SGLang ``--max-running-requests``: the batch
    slots."""
    max_num_batched_tokens: int
    """vLLM ``--max-num-batched-tokens`` / TensorRT-LLM ``max_num_tokens``: tokens per step; SGLang
    ``--chunked-prefill-size``: prompt tokens per prefill step."""
    kv_capacity_tokens: int
    """Tokens the KV pool holds (whole replica)."""

    @functools.cached_property
    def kv_bytes_per_token(self) -> int:
        """KV cache per token of the replica, with heads replicated when TP exceeds the KV heads."""
        element = kv_element_bytes(self.model, self.kv_cache_dtype, self.weights_dtype)
        replication = max(self.model.kv_heads, self.tensor_parallel_size) / self.model.kv_heads
        return int(kv_cache_bytes_per_token(self.model, element) * replication)

    @functools.cached_property
    def step_terms(self) -> StepTerms:
        """What every :func:`step_time` of this replica shares, worked out once (the planner's bisections call it
        hundreds of thousands of times; the fields are frozen, so the terms never go stale)."""
        return StepTerms.of(self)


@dataclass(frozen=True)
class StepTerms:
    """The parts of a step's roofline that depend only on the replica, each computed exactly as :func:`step_time`
    combines them (same operands, same order), so hoisting them changes no result."""

    expert_bytes: float
    """One expert of every layer (0 for a dense model)."""
    shared_bytes: float
    """A mixture of experts' weights outside its experts (0 for a dense model: :attr:`dense_weights_seconds`)."""
    bandwidth: float
    """Bytes/s the replica reads at: TP x HBM bandwidth x efficiency."""
    gemm_flops_per_second: float
    """One chip's peak dense FLOP/s for the compute dtype x efficiency (a step divides its FLOPs by TP)."""
    attention_flops_per_second: float
    """One chip's peak dense 16-bit FLOP/s x efficiency: attention's rate (a step divides its FLOPs by TP)."""
    attention_flops_per_token_context: float
    """``4 x layers x heads x head dim``: attention FLOPs per token per token of context."""
    allreduce_share: float
    """``2 (TP - 1) / TP``: a ring all-reduce's bytes per rank over the message."""
    interconnect_bytes_per_second: float
    """One direction of the chip's link x efficiency."""
    overhead_seconds: float
    """Kernel launches and tails of every layer, per step."""
    tensor_parallel_size: int
    """The replica's TP: what a step divides its FLOPs by."""
    decode_parameters: int
    """Parameters a token's GEMMs multiply (the active experts of a MoE)."""
    hidden_size: int
    """The model's hidden size: an all-reduce's message per token, in elements."""
    allreduces_per_step: int
    """``2 x layers``: two all-reduces per layer."""
    dense_weights_seconds: float | None
    """A dense model's weights read once, in seconds (None for a mixture of experts, whose read depends on the
    step's tokens: :func:`_routed_weights_read_bytes`)."""

    @classmethod
    def of(cls, replica: Replica) -> StepTerms:
        """The terms of ``replica``."""
        model, acc, tp = replica.model, replica.accelerator, replica.tensor_parallel_size
        total = weights_bytes(model, replica.weights_dtype)
        bandwidth = tp * acc.memory_bandwidth_gbps * 1e9 * MEMORY_BANDWIDTH_EFFICIENCY
        expert_bytes = shared = 0.0
        dense_weights_seconds: float | None = float(total) / bandwidth
        if model.experts is not None and model.experts_per_token is not None:
            expert_bytes = model.expert_parameters * (total / model.parameters)
            shared = total - model.experts * expert_bytes
            dense_weights_seconds = None
        return cls(
            expert_bytes=expert_bytes,
            shared_bytes=shared,
            bandwidth=bandwidth,
            gemm_flops_per_second=_peak_flops(replica) * COMPUTE_EFFICIENCY,
            attention_flops_per_second=acc.bf16_dense_tflops * 1e12 * COMPUTE_EFFICIENCY,
            attention_flops_per_token_context=float(4 * model.layers * model.attention_heads * model.head_dim),
            allreduce_share=2 * (tp - 1) / tp,
            interconnect_bytes_per_second=acc.interconnect_gbps / 2 * 1e9 * INTERCONNECT_EFFICIENCY,
            overhead_seconds=model.layers * KERNEL_OVERHEAD_SECONDS_PER_LAYER,
            tensor_parallel_size=tp,
            decode_parameters=model.decode_parameters,
            hidden_size=model.hidden_size,
            allreduces_per_step=2 * model.layers,
            dense_weights_seconds=dense_weights_seconds,
        )


def kv_pool_bytes(sizing: SizingResult, accelerator: Accelerator, engine: Engine) -> int:
    """The KV pool ``engine`` allocates under the flags the sizing sets, computed as that engine computes it.

    vLLM: ``gpu_memory_utilization`` of the device less the weights and the reserve (``sizing.kv_pool_bytes``,
    from :func:`~inferplane.components.capacity.sizing.vllm_kv_pool_bytes`). TensorRT-LLM: the
    ``kv_cache_free_gpu_mem_fraction`` the sizing sets (floored to two digits, capped at 0.95) of the memory left
    after the weights and its runtime buffers (:func:`~inferplane.components.capacity.sizing.trtllm_kv_pool_bytes`),
    so the floor of the flag is what the engine gets, not the budget it was derived from. SGLang: the
    ``mem_fraction_static`` the sizing sets (floored to three digits) of the device less the weights
    (:func:`~inferplane.components.capacity.sizing.sglang_kv_pool_bytes`).
    """
    if engine == "sglang":
        return sglang_kv_pool_bytes(
            device_bytes=sizing.tensor_parallel_size * accelerator.memory_bytes,
            mem_fraction_static=sizing.sglang.mem_fraction_static,
            weights=sizing.weights_bytes,
        )
    if engine != "triton":
        return sizing.kv_pool_bytes
    return trtllm_kv_pool_bytes(
        device_bytes=sizing.tensor_parallel_size * accelerator.memory_bytes,
        free_fraction=sizing.trtllm.kv_cache_free_gpu_mem_fraction,
        weights=sizing.weights_bytes,
        runtime_buffers=sizing.reserve_bytes,
    )


def replica_from_sizing(
    sizing: SizingResult, model: ModelArchitecture, accelerator: Accelerator, engine: Engine
) -> Replica:
    """The replica a sizing configures: its TP, precisions, batch (``concurrency``; SGLang's
    ``--max-running-requests``), step budget (SGLang's ``--chunked-prefill-size``, the rendered multiple of its page)
    and the KV pool the engine allocates (:func:`kv_pool_bytes`)."""
    per_token = sizing.kv_cache_bytes_per_token * sizing.kv_head_replication
    slots, budget = sizing.concurrency, sizing.max_num_batched_tokens
    if engine == "sglang":
        slots = sizing.sglang.max_running_requests
        chunk = sizing.sglang.chunked_prefill_size
        budget = chunk if chunk > 0 else SGLANG_DEFAULT_MAX_PREFILL_TOKENS
    return Replica(
        model=model,
        accelerator=accelerator,
        tensor_parallel_size=sizing.tensor_parallel_size,
        weights_dtype=sizing.weights_dtype,
        kv_cache_dtype=sizing.kv_cache_dtype,
        engine=engine,
        max_num_seqs=slots,
        max_num_batched_tokens=budget,
        kv_capacity_tokens=max(int(kv_pool_bytes(sizing, accelerator, engine) // per_token), 0),
    )


@dataclass(frozen=True)
class Workload:
    """A request mix: fixed input and output lengths, tokens."""

    input_tokens: int
    output_tokens: int


class Step(NamedTuple):
    """One engine step (a named tuple: the planner makes millions, and a frozen dataclass costs twice as much to
    build)."""

    seconds: float
    limit: Limit


@dataclass(frozen=True)
class Saturation:
    """One replica at its maximum sustainable throughput for a mix."""

    batch: int
    output_tokens_per_second: float
    requests_per_second: float
    itl_ms: float
    capacity: Capacity
    """What caps the batch: KV cache, the engine's batch slots, or the per-step token budget (prefill)."""
    limit: Limit
    """What bounds a step at that batch."""


@dataclass(frozen=True)
class Latency:
    """One replica at a request rate (M/M/c, see the module docstring)."""

    requests_per_second: float
    concurrency: float
    """Sequences decoding at once (Little's law over the output: rate x output x ITL), what a step's batch is."""
    in_service: float
    """Requests holding a batch slot, in prefill or decoding (Little's law over the whole service: rate x (prefill
    + output x ITL)); the whole batch past the rate the replica sustains. A request whose prompt is still being
    prefilled is already running (it counts against vLLM's ``--max-num-seqs``), so this, not :attr:`concurrency`, is
    the batch a rate needs: with long prompts and short outputs it is several times more."""
    ttft_mean_ms: float
    ttft_p95_ms: float
    itl_mean_ms: float
    itl_p95_ms: float
    limit: Limit
    stable: bool
    """False when the rate reaches the replica's saturation: the queue grows without bound."""
    batch: int
    """Batch slots: the servers of the queue."""
    service_seconds: float
    """How long a request holds its slot: its prefill and its output's steps."""

    def refused_share(self, timeout_seconds: float, queue_max: int) -> float:
        """Share of arrivals a gateway refuses (429) when it holds a request at most ``timeout_seconds`` for a slot
        and at most ``queue_max`` requests waiting: the two refusals of an M/M/c queue whose arrivals leave after a
        fixed patience (M/M/c+D), and of one with a waiting room of ``queue_max`` (M/M/c/K), summed (a bound: each
        refusal shortens the queue for the other). Defined past saturation too, where refusals are what keeps the
        queue finite.

        With ``w_k = a^k / k!`` (``a`` = offered load) for ``k <= c`` busy slots, the virtual wait ``V`` of an
        arrival is 0 with weight ``F = sum(w_k, k < c)``, has density ``w_c c mu e^(-delta v)`` below the patience
        ``tau`` (``delta = c mu - lambda``) and ``w_c c mu e^(-delta tau) e^(-c mu (v - tau))`` above it, whose mass
        ``w_c e^(-delta tau)`` leaves (``tau`` infinite gives Erlang C). ``tests/capacity/test_perf_model.py`` checks
        both terms against a simulated queue."""
        c, rate = self.batch, self.requests_per_second
        if c < 1 or not math.isfinite(self.service_seconds):
            return 1.0
        if rate <= 0:
            return 0.0
        mu = 1 / self.service_seconds
        # F / w_c from Erlang B, w_c / (F + w_c), whose recursion neither overflows nor underflows for a batch of
        # hundreds (w_k itself does). A blocking probability that rounds to 0: a free slot is all but certain.
        blocking = _erlang_b(c, rate * self.service_seconds)
        if blocking <= 0:
            return 0.0
        free = 1 / blocking - 1
        delta = c * mu - rate
        if delta >= 0:
            late = math.exp(-delta * timeout_seconds)
            waiting = timeout_seconds if delta == 0 else (1 - late) / delta
            patience = late / (free + c * mu * waiting + late)
        else:  # past saturation: the same, over e^(-delta tau), which would overflow
            early = math.exp(delta * timeout_seconds)
            patience = 1 / (free * early + c * mu * (early - 1) / delta + 1)
        load = rate / (c * mu)
        if load <= 1:
            full = load**queue_max / (free + math.fsum(load**j for j in range(queue_max + 1)))
        else:
            full = 1 / (free * load**-queue_max + math.fsum(load**-j for j in range(queue_max + 1)))
        return min(1.0, patience + full)


def _peak_flops(replica: Replica) -> float:
    acc = replica.accelerator
    # FP8 checkpoints run FP8 GEMMs where the chip has FP8 units (W8A8); everything else computes in 16 bits.
    if replica.weights_dtype == "fp8" and acc.fp8_dense_tflops is not None:
        return acc.fp8_dense_tflops * 1e12
    return acc.bf16_dense_tflops * 1e12


def _routed_weights_read_bytes(replica: Replica, tokens: float) -> float:
    """Weight bytes one step of a mixture of experts reads: its shared layers plus the experts its tokens are routed
    to (a dense model reads all of them: :attr:`StepTerms.dense_weights_seconds`)."""
    model = replica.model
    terms = replica.step_terms
    assert model.experts is not None and model.experts_per_token is not None, "a dense model has no routed read"
    # Each token picks k of E experts; the chance an expert is untouched by n tokens is (1 - k/E)^n.
    touched = model.experts * (1 - (1 - model.experts_per_token / model.experts) ** max(tokens, 1.0))
    return float(terms.shared_bytes + touched * terms.expert_bytes)


def step_time(
    replica: Replica, decode_seqs: float, prefill_tokens: float, mean_context: float, input_tokens: int
) -> Step:
    """Duration of one step running ``decode_seqs`` decodes and ``prefill_tokens`` prompt tokens.

    The planner's searches call this millions of times, so it reads the replica's hoisted :class:`StepTerms` and
    compares with conditional expressions rather than ``max``; every product and quotient keeps its operands and
    their order, so the result is the same to the last bit."""
    terms = replica.step_terms
    tp = terms.tensor_parallel_size
    tokens = decode_seqs + prefill_tokens
    # The GEMMs: weights once per step, 2 FLOPs per active parameter per token.
    weights_s = terms.dense_weights_seconds
    if weights_s is None:
        weights_s = _routed_weights_read_bytes(replica, tokens) / terms.bandwidth
    linear_s = tokens * 2 * terms.decode_parameters / tp / terms.gemm_flops_per_second
    # Attention, a separate kernel: reads every decoding sequence's KV cache; computes in 16 bits.
    kv_s = decode_seqs * mean_context * replica.kv_bytes_per_token / terms.bandwidth
    attention_flops = terms.attention_flops_per_token_context
    attention_flops *= decode_seqs * mean_context + prefill_tokens * input_tokens / 2
    attention_s = attention_flops / tp / terms.attention_flops_per_second
    comm_s = 0.0
    if tp > 1:
        message = (tokens if tokens >= 1.0 else 1.0) * terms.hidden_size * 2  # 16-bit activations
        per_rank = terms.allreduce_share * message
        comm_s = terms.allreduces_per_step * (
            per_rank / terms.interconnect_bytes_per_second + ALLREDUCE_LATENCY_SECONDS
        )
    memory_s = weights_s + kv_s
    compute_s = linear_s + attention_s
    seconds = (
        (weights_s if weights_s >= linear_s else linear_s)
        + (kv_s if kv_s >= attention_s else attention_s)
        + comm_s
        + terms.overhead_seconds
    )
    # The largest part names the limit; a tie goes to the earlier of bandwidth, compute, interconnect.
    limit: Limit = "bandwidth"
    if compute_s > memory_s:
        limit = "compute"
    if comm_s > (memory_s if memory_s >= compute_s else compute_s):
        limit = "interconnect"
    return Step(seconds=seconds, limit=limit)


def prefill_seconds_per_token(replica: Replica) -> float:
    """What the replica takes per prompt token when a step runs a whole step budget of one prompt and nothing else:
    the price of a prefix block the replica lacks, against which the gateway weighs waiting for the replica that
    holds it (``RoutingConfig.prefill_seconds_per_block``)."""
    budget = replica.max_num_batched_tokens
    return step_time(replica, 0, budget, 0, budget).seconds / budget


def engine_step(
    replica: Replica, decode_seqs: float, prefill_tokens: float, mean_context: float, input_tokens: int
) -> Step:
    """The time the running sequences wait for one token, on average, while ``prefill_tokens`` of prompts a step
    are also run.

    vLLM and TensorRT-LLM put both in one step (:func:`step_time`): a share ``prefill_tokens / chunk`` of steps
    carries a chunk (a whole prompt, within what the step budget leaves the decodes), the rest only decode. SGLang
    runs a decode step and, apart, prefill steps of what is waiting (at least one prompt, at most
    ``--chunked-prefill-size`` tokens), a share of one per decode step on average, so the prompts cost the weights'
    read again and the decodes wait for them."""
    if prefill_tokens <= 0:
        return step_time(replica, decode_seqs, 0, mean_context, input_tokens)
    decode = step_time(replica, decode_seqs, 0, mean_context, input_tokens)
    if replica.engine != "sglang":
        # A step carries a chunk of a waiting prompt (a whole prompt, within the budget's room) or none: the
        # scheduler takes what waits, it does not spread it. So the prompts a rate brings make a share of steps
        # longer, not every step a little: under the roofline's max(weights' read, GEMM FLOPs) a sliver of prompt
        # in every step rode free under the weights' read, and the mean step came out short (staging's Triton 8B
        # at 8.7 requests/s: 16.7 ms, where the simulated fleet, whose steps are these same step times, ran 24 slots
        # at 7.7 requests/s with a standing queue).
        chunk = min(max(replica.max_num_batched_tokens - decode_seqs, 1.0), max(prefill_tokens, float(input_tokens)))
        if prefill_tokens >= chunk:
            return step_time(replica, decode_seqs, prefill_tokens, mean_context, input_tokens)
        full = step_time(replica, decode_seqs, chunk, mean_context, input_tokens)
        extra_s = prefill_tokens / chunk * (full.seconds - decode.seconds)
        return Step(seconds=decode.seconds + extra_s, limit=full.limit if extra_s > decode.seconds else decode.limit)
    # A prefill step runs what is waiting, at least one whole prompt, at most a chunk.
    chunk = float(min(replica.max_num_batched_tokens, max(prefill_tokens, input_tokens, 1)))
    prefill = step_time(replica, 0, chunk, mean_context, input_tokens)
    prefill_s = prefill_tokens / chunk * prefill.seconds
    limit = prefill.limit if prefill_s > decode.seconds else decode.limit
    return Step(seconds=decode.seconds + prefill_s, limit=limit)


def resident_tokens(replica: Replica, workload: Workload) -> float:
    """KV tokens one running sequence holds: reserved in full (TensorRT-LLM), or on average as it grows (vLLM,
    SGLang). SGLang's admission also sets aside ``new_token_ratio`` of each running request's remaining output (0.7
    decaying to 0.098 over 600 steps, ``new_token_ratio_tracker.py`` of sglang 0.5.23); that reserve only delays
    admissions and is not modelled."""
    if replica.engine == "triton":
        return float(workload.input_tokens + workload.output_tokens)
    return workload.input_tokens + workload.output_tokens / 2


def max_batch(replica: Replica, workload: Workload) -> tuple[int, Capacity]:
    """Sequences running at once at saturation, and what caps them."""
    kv_seqs = int(replica.kv_capacity_tokens // resident_tokens(replica, workload))
    ratio = workload.input_tokens / workload.output_tokens
    # Each step must carry batch x input/output prompt tokens besides the batch's decodes. SGLang's prompts run in
    # steps of their own, so its chunk bounds a prefill step, not the batch.
    budget_seqs = int(replica.max_num_batched_tokens // (1 + ratio))
    if replica.engine == "sglang":
        budget_seqs = replica.max_num_seqs
    options: list[tuple[int, Capacity]] = [
        (kv_seqs, "kv-capacity"),
        (replica.max_num_seqs, "max-num-seqs"),
        (budget_seqs, "token-budget"),
    ]
    batch, capacity = min(options, key=lambda option: option[0])
    return max(batch, 0), capacity


def saturation(replica: Replica, workload: Workload) -> Saturation:
    """Maximum sustainable output tokens/s of one replica for the mix (batch as large as memory and slots allow)."""
    batch, capacity = max_batch(replica, workload)
    if batch < 1:
        return Saturation(
            batch=0,
            output_tokens_per_second=0.0,
            requests_per_second=0.0,
            itl_ms=math.inf,
            capacity=capacity,
            limit="bandwidth",
        )
    prefill = batch * workload.input_tokens / workload.output_tokens
    mean_context = workload.input_tokens + workload.output_tokens / 2
    step = engine_step(replica, batch, prefill, mean_context, workload.input_tokens)
    tokens_per_second = batch / step.seconds
    return Saturation(
        batch=batch,
        output_tokens_per_second=tokens_per_second,
        requests_per_second=tokens_per_second / workload.output_tokens,
        itl_ms=step.seconds * 1000,
        capacity=capacity,
        limit=step.limit,
    )


def single_stream_itl_ms(replica: Replica, workload: Workload) -> float:
    """Inter-token latency of one request alone, half-way through its output."""
    mean_context = workload.input_tokens + workload.output_tokens / 2
    return step_time(replica, 1, 0, mean_context, workload.input_tokens).seconds * 1000


@functools.lru_cache(maxsize=256)
def _erlang_b(servers: int, offered: float) -> float:
    """Probability that an arrival finds every server busy in an M/M/c queue with no waiting room (Erlang B), by
    its recursion over the servers: ``w_c / sum(w_k, k <= c)`` with ``w_k = offered^k / k!``, any load.

    Remembered: a rate's TTFT (:func:`slot_wait`) and its refused share (:meth:`Latency.refused_share`) ask for the
    same ``(batch, rate x service)``, and the recursion over hundreds of slots was a seventh of a plan's time."""
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    return blocking


def _erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (``offered`` = arrival rate x service time < c)."""
    blocking = _erlang_b(servers, offered)
    return servers * blocking / (servers - offered * (1 - blocking))


def slot_wait(batch: int, service_seconds: float, requests_per_second: float) -> tuple[float, float]:
    """The mean and p95 wait for one of ``batch`` slots held ``service_seconds`` each, at a rate below their capacity
    (M/M/c: Erlang C's chance of waiting, then an exponential wait draining at ``batch / service - rate``)."""
    waits = _erlang_c(batch, requests_per_second * service_seconds)
    drain = batch / service_seconds - requests_per_second  # rate at which the queue empties
    wait_p95 = math.log(waits / TAIL_SHARE) / drain if waits > TAIL_SHARE else 0.0
    return waits / drain, wait_p95


FIXED_POINT_TOLERANCE_SECONDS = 1e-9
"""The steady step is settled when one more round of the map moves it less than this."""
FIXED_POINT_ROUNDS = 30
"""At most this many rounds of two steps each (the plain rounds' cap was 60 steps)."""
MAX_EXTRAPOLATED_RATIO = 0.9
"""Extrapolate only while each move is at most this share of the one before: past it the guess lands more than nine
last moves ahead, and near saturation, where the map has a second fixed point, it can land beyond that one (one
unstable replica's step went from 224 ms to 10.6 s with no cap). Slower approaches take plain rounds."""


def steady_step(
    replica: Replica, workload: Workload, rate: float, batch: int, mean_context: float, *, prompt_tokens: int
) -> tuple[float, Step]:
    """The step at which ``rate`` settles and the decodes it runs: a step of ``x`` seconds runs ``rate x output x
    x`` decodes beside ``rate x prompt_tokens x x`` prompt tokens, which make the next step; the steady step is that
    map's fixed point, approached from the unloaded step. ``prompt_tokens`` is what each request brings to this
    replica's steps: the workload's input where the replica computes its prompts, 0 on a decode replica whose
    prompts were computed elsewhere (:func:`components.capacity.disaggregated.decode_at_rate`).

    Plain rounds approach it geometrically, 20 a rate on average over one plan's search (``inferplane plan``'s time
    was mostly this loop), and 15-24% of the rates below stopped at their cap of 60 unsettled. So two rounds are
    followed by Aitken's extrapolation to where that geometric approach ends (Steffensen's method), and the answer
    is still a step whose next round moved it less than :data:`FIXED_POINT_TOLERANCE_SECONDS`: for that plan 5 steps
    a rate on average instead of 21, the plan in 0.34 s instead of 0.85. Checked against the plain rounds on every
    rate twelve seeded plans' searches asked for, and 3,000 of them at 0.5-3x their rate (about 96,000 rates a seed,
    two seeds): where the plain rounds settled, the same stability, limit and batch, TTFT within 3e-5 of itself and
    ITL and concurrency within 7e-7; ITL p95 differs only at rates whose prefill share is within 1e-6 of its 4%
    threshold (3,818 of them, all there), where the planner's bisection looks for the capacity; where the plain
    rounds did not settle, every one of 80 sampled steps is nearer the map's limit (100,000 plain rounds) than the
    60th round was."""

    def next_step(seconds: float) -> tuple[float, Step]:
        concurrency = min(float(batch), max(1.0, rate * workload.output_tokens * seconds))
        prefill_per_step = rate * prompt_tokens * seconds
        return concurrency, engine_step(replica, concurrency, prefill_per_step, mean_context, workload.input_tokens)

    step = step_time(replica, 1, 0, mean_context, workload.input_tokens)
    start, concurrency = step.seconds, 1.0
    for _ in range(FIXED_POINT_ROUNDS):
        concurrency, step = next_step(start)
        first = step.seconds
        if abs(first - start) < FIXED_POINT_TOLERANCE_SECONDS:
            break
        concurrency, step = next_step(first)
        second = step.seconds
        if abs(second - first) < FIXED_POINT_TOLERANCE_SECONDS:
            break
        ratio = (second - first) / (first - start)
        start = second + (second - first) * ratio / (1.0 - ratio) if 0.0 < ratio < MAX_EXTRAPOLATED_RATIO else second
    return concurrency, step


def at_rate(replica: Replica, workload: Workload, requests_per_second: float) -> Latency:
    """TTFT and ITL (mean and p95) of one replica serving ``requests_per_second`` of the mix."""
    batch, _ = max_batch(replica, workload)
    mean_context = workload.input_tokens + workload.output_tokens / 2
    rate = requests_per_second
    chunk = max(replica.max_num_batched_tokens - 1, 1)
    concurrency, step = steady_step(replica, workload, rate, batch, mean_context, prompt_tokens=workload.input_tokens)
    # A mixed step shares its budget with the decodes; SGLang's prefill step has the whole chunk to itself.
    room = float(replica.max_num_batched_tokens) if replica.engine == "sglang" else max(chunk - concurrency, 1.0)
    chunk_tokens = float(min(workload.input_tokens, room))
    prefill_steps = math.ceil(workload.input_tokens / chunk_tokens)
    chunk_step = engine_step(replica, concurrency, chunk_tokens, mean_context, workload.input_tokens)
    share_with_prefill = min(1.0, rate * step.seconds * prefill_steps)
    itl_p95 = chunk_step.seconds if share_with_prefill >= PREFILL_TAIL_SHARE else step.seconds
    prefill_s = prefill_steps * chunk_step.seconds
    service = prefill_s + workload.output_tokens * step.seconds
    offered = rate * service
    stable = batch >= 1 and offered < batch
    if not stable:
        return Latency(
            requests_per_second=rate,
            concurrency=float(batch),
            in_service=float(batch),
            ttft_mean_ms=math.inf,
            ttft_p95_ms=math.inf,
            itl_mean_ms=step.seconds * 1000,
            itl_p95_ms=itl_p95 * 1000,
            limit=step.limit,
            stable=False,
            batch=batch,
            service_seconds=service,
        )
    wait_mean, wait_p95 = slot_wait(batch, service, rate)
    return Latency(
        requests_per_second=rate,
        concurrency=concurrency,
        in_service=offered,
        ttft_mean_ms=(wait_mean + prefill_s) * 1000,
        ttft_p95_ms=(wait_p95 + prefill_s) * 1000,
        itl_mean_ms=step.seconds * 1000,
        itl_p95_ms=itl_p95 * 1000,
        limit=step.limit,
        stable=True,
        batch=batch,
        service_seconds=service,
    )


def trtllm_kv_capacity_tokens(
    model: ModelArchitecture,
    accelerator: Accelerator,
    *,
    tensor_parallel_size: int,
    weights_dtype: WeightsDtype,
    kv_cache_dtype: KvCacheDtype,
    free_fraction: float,
    max_num_tokens: int = TRTLLM_DEFAULT_MAX_NUM_TOKENS,
) -> int:
    """KV tokens TensorRT-LLM allocates at ``kv_cache_free_gpu_mem_fraction`` (``trtllm-bench`` runs at 0.95): that
    fraction of the memory free after the weights and the runtime's buffers, the runtime reserve plus the
    activations of one ``max_num_tokens`` step (:func:`~inferplane.components.capacity.sizing.trtllm_kv_pool_bytes`).
    """
    activations = max_num_tokens * model.hidden_size * ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN
    pool = trtllm_kv_pool_bytes(
        device_bytes=tensor_parallel_size * accelerator.memory_bytes,
        free_fraction=free_fraction,
        weights=weights_bytes(model, weights_dtype),
        runtime_buffers=tensor_parallel_size * RUNTIME_RESERVE_BYTES_PER_GPU + activations,
    )
    element = kv_element_bytes(model, kv_cache_dtype, weights_dtype)
    replication = max(model.kv_heads, tensor_parallel_size) / model.kv_heads
    per_token = kv_cache_bytes_per_token(model, element) * replication
    return max(int(pool // per_token), 0)


def weights_share(replica: Replica) -> float:
    """Share of the replica's device memory the weights take: how near the memory edge it runs."""
    device = replica.tensor_parallel_size * replica.accelerator.memory_bytes
    return weights_bytes(replica.model, replica.weights_dtype) / device


def at_memory_edge(replica: Replica) -> bool:
    """Whether the weights take at least :data:`MEMORY_EDGE_WEIGHTS_SHARE` of the replica's device memory."""
    return weights_share(replica) >= MEMORY_EDGE_WEIGHTS_SHARE
