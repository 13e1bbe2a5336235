"""The capacity planner: the cheapest configuration that serves a workload within its latency objectives.

Pure Python, no Pulumi. It searches accelerators x node types x precisions x tensor parallelism x engines, and for
each the replica count, over the catalogs and the price book:

1. memory: :func:`sizing.size` must fit the model at context ``input + output`` (rounded up to 1024) with at least
   one sequence; otherwise the configuration is dropped (``memory``);
2. capacity: the highest request rate one replica serves with TTFT p95 and ITL p95 within their objectives and
   at most :data:`REFUSED_SHARE` of its requests refused by the gateway's admission (:func:`perf_model.at_rate`,
   bisection; the predictions rise with the rate), with as many batch slots as the KV cache holds at that context;
3. batch slots: ``max_num_seqs`` is then capped at the fewest slots that still serve that rate within the
   objectives and the refusal bound: at least the requests in service, in prefill or decoding (Little's law over the
   whole service), so an overload queues requests instead of stretching every sequence's ITL past its objective.
   The autoscaler's queue threshold derives from this batch (:mod:`components.observability.keda`), so it adds
   replicas when the batch is full;
4. replicas: ``ceil(rate / capacity)`` for the steady rate (``min_replicas``) and the peak rate (``max_replicas``);
   nodes: replicas x TP over the node's accelerators; cost: nodes x the node's on-demand price.

Weight and KV-cache quantization change a model's outputs, so only the weight dtypes the caller allows are tried,
and an FP8 KV cache only when FP8 is among them.

A vLLM configuration on NVIDIA GPUs is also weighed **disaggregated** (:mod:`.disaggregated`): x prefill and y
decode replicas on one node type, each role with its own TP (as in AIConfigurator's and llm-d's published pairs) and
sized for itself (the prefill role's step budget is the largest), with the prompt's KV moved between them at the
node type's modelled rate (:mod:`.kv_transfer`: EFA where it has it, TCP otherwise) inside the TTFT objective. The
decode role's capacity is the highest rate at which its decode-only steps meet the ITL objective and its slot wait
stays within ``DECODE_WAIT_SHARE`` of the TTFT objective; the prefill role's, the highest rate at which its queue,
compute and the transfer fit the rest. Each role's replicas follow from its capacity; both share the pool's nodes,
priced together and ranked with the aggregated candidates, cheapest first.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity import disaggregated, perf_model
from inferplane.components.capacity.kv_transfer import size_transfer
from inferplane.components.capacity.sizing import (
    ServingRole,
    SizingRequest,
    SizingResult,
    size,
    tensor_parallel_candidates,
)
from inferplane.components.catalog import (
    ACCELERATORS,
    Accelerator,
    InstanceType,
    ModelArchitecture,
    hourly_price,
    instances_for,
)
from inferplane.components.catalog.accelerators import AcceleratorId
from inferplane.components.spec.platform_spec import AdmissionSpec, CapacityType, Engine, KvCacheDtype, WeightsDtype

CONTEXT_GRANULE = 1024
"""Context is rounded up to a multiple of this, so a stack's ``max_context`` reads as a round number."""

MAX_BATCH_SLOTS = 1024
"""Most batch slots the planner configures: vLLM's own ``--max-num-seqs`` default for GPUs of 70 GiB or more
other than the A100 (``vllm/engine/arg_utils.py`` ``get_batch_defaults``: 1024; 256 on smaller GPUs)."""

BISECTION_STEPS = 30

REFUSED_SHARE = 0.001
"""Most arrivals a plan may leave to the gateway's admission to refuse (429): a request that finds every batch slot
taken waits at the gateway at most ``admission.queue_timeout_seconds``, behind at most ``admission.queue_max``
others. The TTFT objective alone did not bound it: a plan at the rate where TTFT p95 *equals* a 2 s objective waits
about as long as the gateway's 2 s timeout, and the simulated fleet refused 15-18% of staging's requests there
(docs/simulate.md, the planner's promise). One in a thousand: a refusal is a failed request, not a slow one."""


ServingMode = Literal["aggregated", "disaggregated"]
"""How a candidate serves: every replica runs both phases, or prefill and decode roles (``models[].disaggregation``)."""


@dataclass(frozen=True)
class Workload:
    """What the planner is asked: a model, a request mix, a rate and objectives."""

    model: ModelArchitecture
    model_label: str
    input_tokens: int
    output_tokens: int
    requests_per_second: float
    peak_requests_per_second: float
    ttft_p95_ms: float
    itl_p95_ms: float
    admission: AdmissionSpec = field(default_factory=AdmissionSpec)
    """The gateway's admission in front of the replicas (the stack's ``gateway.admission``; its defaults for
    ``inferplane plan``): how long and how many requests may wait for a slot before a 429."""


@dataclass(frozen=True)
class Filters:
    """What the caller allows."""

    accelerators: tuple[AcceleratorId, ...] = ()
    """Empty: every catalog accelerator."""
    engines: tuple[Engine, ...] = ("vllm", "triton", "sglang")
    weights_dtypes: tuple[WeightsDtype, ...] = ("bf16",)
    capacity_type: CapacityType = "on_demand"
    max_gpus: int | None = None
    """Most accelerators per replica."""
    cloud: str | None = None
    """``aws`` or ``gcp``; None for both."""
    serving: tuple[ServingMode, ...] = ("aggregated", "disaggregated")
    """Which ways of serving to weigh (disaggregated: vLLM on NVIDIA GPUs only, as the spec allows)."""


@dataclass(frozen=True)
class Configuration:
    """One replica shape, before replicas and node types are chosen."""

    accelerator: Accelerator
    accelerators_per_node: int
    tensor_parallel_size: int
    weights_dtype: WeightsDtype
    kv_cache_dtype: KvCacheDtype
    engine: Engine


class Candidate(BaseModel):
    """A configuration that fits and meets the objectives, with its cost."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accelerator: AcceleratorId
    instance_type: str
    tensor_parallel_size: int
    engine: Engine
    weights_dtype: WeightsDtype
    kv_cache_dtype: KvCacheDtype
    replicas: int = Field(description="Replicas for the steady rate (the autoscaler's minimum).")
    max_replicas: int = Field(description="Replicas for the peak rate (the autoscaler's maximum).")
    nodes: int = Field(description="Nodes for the steady rate.")
    max_num_seqs: int = Field(description="Batch slots per replica: the KV cache and the ITL objective allow this.")
    max_context: int = Field(description="Context each sequence is sized for: input + output, rounded up.")
    hourly_cost_usd: float = Field(description="Nodes x on-demand node price, at the steady rate.")
    cost_per_million_output_tokens_usd: float
    ttft_p95_ms: float = Field(description="Predicted at the steady rate per replica.")
    itl_p95_ms: float = Field(description="Predicted at the steady rate per replica.")
    max_output_tokens_per_second: float = Field(description="One replica at saturation, for this mix.")
    replica_capacity_rps: float = Field(description="Highest rate one replica serves within both objectives.")
    headroom: float = Field(description="Capacity of the replicas over the steady rate, minus one.")
    limit: str = Field(description="What limits it: kv capacity, itl objective, bandwidth, compute, interconnect.")
    serving: ServingMode = Field(
        default="aggregated", description="Both phases per replica, or prefill and decode roles."
    )
    prefill_tensor_parallel_size: int = Field(default=0, description="Disaggregated: GPUs per prefill replica.")
    prefill_max_num_seqs: int = Field(
        default=0, description="Disaggregated: the prefill role's batch slots (as many prompts as its KV cache holds)."
    )
    prefill_replicas: int = Field(
        default=0, description="Disaggregated: prefill replicas for the steady rate (``replicas`` are decode's)."
    )
    prefill_max_replicas: int = Field(default=0, description="Disaggregated: prefill replicas for the peak rate.")
    kv_transfer_ms: float = Field(
        default=0.0, description="Disaggregated: moving one prompt's KV to its decode replica."
    )


@dataclass(frozen=True)
class Rejection:
    """A configuration the search dropped, and why."""

    configuration: Configuration
    reason: str


@dataclass(frozen=True)
class Evaluation:
    """A configuration evaluated: its sizing, its replica model, and its per-replica capacity."""

    configuration: Configuration
    sizing: SizingResult
    replica: perf_model.Replica
    capacity_rps: float
    limit: str


@dataclass(frozen=True)
class PrefillEvaluation:
    """A configuration sized as a disaggregated model's prefill role (its capacity depends on the transfer to the
    decode role, so on the node type: :func:`disaggregated_candidate`)."""

    configuration: Configuration
    sizing: SizingResult
    replica: perf_model.Replica


@dataclass(frozen=True)
class DecodeEvaluation:
    """A configuration sized as a disaggregated model's decode role, with one replica's capacity."""

    configuration: Configuration
    sizing: SizingResult
    replica: perf_model.Replica
    capacity_rps: float
    limit: str


@dataclass(frozen=True)
class Plan:
    """Every candidate, cheapest first, and what was dropped."""

    candidates: tuple[Candidate, ...]
    rejections: tuple[Rejection, ...]
    weights_dtypes: tuple[WeightsDtype, ...]


def context_for(workload: Workload) -> int:
    """Input + output, rounded up to :data:`CONTEXT_GRANULE` and within what the model supports."""
    tokens = workload.input_tokens + workload.output_tokens
    return min(math.ceil(tokens / CONTEXT_GRANULE) * CONTEXT_GRANULE, workload.model.max_context)


def _sizing_request(
    workload: Workload, config: Configuration, concurrency: int, role: ServingRole = "aggregated"
) -> SizingRequest:
    return SizingRequest(
        model=workload.model,
        model_label=workload.model_label,
        accelerator=config.accelerator,
        accelerators_per_node=config.accelerators_per_node,
        weights_dtype=config.weights_dtype,
        kv_cache_dtype=config.kv_cache_dtype,
        context=context_for(workload),
        concurrency=concurrency,
        tensor_parallel_size=config.tensor_parallel_size,
        itl_slo_ms=max(1, int(workload.itl_p95_ms)),
        whole_node=config.accelerator.vendor == "google",
        role=role,
    )


def replica_model(workload: Workload, config: Configuration, sizing: SizingResult) -> perf_model.Replica:
    """The performance model's replica for a sized configuration (batch slots = the sizing's concurrency)."""
    return perf_model.replica_from_sizing(sizing, workload.model, config.accelerator, config.engine)


def _mix(workload: Workload) -> perf_model.Workload:
    return perf_model.Workload(input_tokens=workload.input_tokens, output_tokens=workload.output_tokens)


def meets(workload: Workload, replica: perf_model.Replica, rate: float) -> bool:
    """Whether one replica serving ``rate`` meets both objectives and the gateway's admission refuses at most
    :data:`REFUSED_SHARE` of its requests, by the model's predictions."""
    latency = perf_model.at_rate(replica, _mix(workload), rate)
    admission = workload.admission
    return (
        latency.stable
        and latency.ttft_p95_ms <= workload.ttft_p95_ms
        and latency.itl_p95_ms <= workload.itl_p95_ms
        and latency.refused_share(admission.queue_timeout_seconds, admission.queue_max) <= REFUSED_SHARE
    )


def _fitted(workload: Workload, config: Configuration, role: ServingRole) -> SizingResult | Rejection:
    """The configuration sized for ``role`` with as many batch slots as its KV cache holds (at most
    :data:`MAX_BATCH_SLOTS`), or why it does not fit."""
    first = size(_sizing_request(workload, config, 1, role))
    if not first.fits or first.tensor_parallel_size != config.tensor_parallel_size:
        return Rejection(config, f"memory: {first.reason}")
    slots = min(first.max_concurrent_sequences, MAX_BATCH_SLOTS)
    # The logits reserve grows with the batch: shrink until the sizing agrees.
    sizing = size(_sizing_request(workload, config, slots, role))
    while not sizing.fits and slots > 1:
        slots = max(1, min(slots - 1, sizing.max_concurrent_sequences))
        sizing = size(_sizing_request(workload, config, slots, role))
    if not sizing.fits:
        return Rejection(config, f"memory: {sizing.reason}")
    return sizing


def evaluate(workload: Workload, config: Configuration) -> Evaluation | Rejection:
    """Size the configuration, choose its batch slots, and find one replica's capacity within the objectives."""
    sizing = _fitted(workload, config, "aggregated")
    if isinstance(sizing, Rejection):
        return sizing
    slots = kv_slots = sizing.concurrency
    replica = replica_model(workload, config, sizing)
    capacity = _capacity(workload, replica)
    if capacity <= 0:
        return _latency_rejection(workload, config, replica)
    # Cap the batch at the requests in service at the rate the objectives allow: beyond it requests queue (and the
    # autoscaler, whose threshold derives from this batch, adds replicas) instead of stretching every sequence's ITL.
    # A request being prefilled holds a slot too; counting only the decoding ones left long-prompt workloads a batch
    # too small for their own capacity (Qwen2.5 7B, 30000 in / 100 out on an L40S: 2 slots, 0.21 request/s, where
    # 3 slots served 0.28, by the model of the time). SGLang escaped it, its decode step carrying the prompts'
    # separate prefill steps, so the old count made it the cheapest engine there.
    # The batch also keeps the gateway's queue short enough that it refuses at most REFUSED_SHARE: the requests in
    # service alone leave no slot to spare, and with slots that tight the queue criterion cut the capacity itself
    # (Llama 3.3 70B FP8 on one H200, 2000 in / 400 out: 0.74 requests/s on 17 slots where the uncapped batch
    # serves 1.4). So: the smallest batch from the requests in service up that still meets everything at this rate.
    allowed = _smallest_batch(
        functools.partial(meets, workload),
        replica,
        capacity,
        max(1, math.ceil(perf_model.at_rate(replica, _mix(workload), capacity).in_service)),
    )
    if allowed < slots:
        slots = allowed
        sizing = size(_sizing_request(workload, config, slots))
        replica = replica_model(workload, config, sizing)
        capacity = _capacity(workload, replica)
        if capacity <= 0:
            return _latency_rejection(workload, config, replica)
    operating = perf_model.at_rate(replica, _mix(workload), capacity)
    limit: str = operating.limit
    if slots == kv_slots and operating.concurrency >= 0.95 * slots:
        limit = "kv capacity"
    return Evaluation(configuration=config, sizing=sizing, replica=replica, capacity_rps=capacity, limit=limit)


def decode_meets(workload: Workload, replica: perf_model.Replica, rate: float) -> bool:
    """Whether one decode replica serving ``rate`` meets the ITL objective, waits at most
    ``disaggregated.DECODE_WAIT_SHARE`` of the TTFT objective for a slot (p95) and leaves the gateway to refuse at
    most :data:`REFUSED_SHARE`."""
    latency = disaggregated.decode_at_rate(replica, _mix(workload), rate)
    wait_ms = latency.ttft_p95_ms - latency.itl_mean_ms
    admission = workload.admission
    return (
        latency.stable
        and latency.itl_p95_ms <= workload.itl_p95_ms
        and wait_ms <= disaggregated.DECODE_WAIT_SHARE * workload.ttft_p95_ms
        and latency.refused_share(admission.queue_timeout_seconds, admission.queue_max) <= REFUSED_SHARE
    )


def evaluate_prefill(workload: Workload, config: Configuration) -> PrefillEvaluation | Rejection:
    """Size the configuration as a prefill role (its step budget the largest: no decode waits on a step)."""
    sizing = _fitted(workload, config, "prefill")
    if isinstance(sizing, Rejection):
        return Rejection(config, f"prefill role {sizing.reason}")
    return PrefillEvaluation(configuration=config, sizing=sizing, replica=replica_model(workload, config, sizing))


def evaluate_decode(workload: Workload, config: Configuration) -> DecodeEvaluation | Rejection:
    """Size the configuration as a decode role, choose its batch slots, and find one replica's capacity."""
    sizing = _fitted(workload, config, "decode")
    if isinstance(sizing, Rejection):
        return Rejection(config, f"decode role {sizing.reason}")
    replica = replica_model(workload, config, sizing)
    criterion = functools.partial(decode_meets, workload)
    saturation = disaggregated.decode_output_tokens_per_second(replica, _mix(workload)) / workload.output_tokens
    capacity = _bisect(criterion, replica, saturation)
    if capacity <= 0:
        return Rejection(config, "itl: a decode replica alone misses the ITL objective (disaggregated)")
    # As aggregated: the fewest slots that still serve this rate, so an overload queues instead of stretching ITL.
    in_service = disaggregated.decode_at_rate(replica, _mix(workload), capacity).in_service
    allowed = _smallest_batch(criterion, replica, capacity, max(1, math.ceil(in_service)))
    if allowed < sizing.concurrency:
        sizing = size(_sizing_request(workload, config, allowed, "decode"))
        replica = replica_model(workload, config, sizing)
        capacity = _bisect(criterion, replica, saturation)
        if capacity <= 0:
            return Rejection(config, "itl: a decode replica alone misses the ITL objective (disaggregated)")
    limit = disaggregated.decode_at_rate(replica, _mix(workload), capacity).limit
    return DecodeEvaluation(
        configuration=config, sizing=sizing, replica=replica, capacity_rps=capacity, limit=f"decode {limit}"
    )


def _prefill_capacity(
    workload: Workload, prefill: PrefillEvaluation, decode: DecodeEvaluation, transfer_seconds: float
) -> float:
    """Highest rate one prefill replica serves with its queue's p95 wait, the prompt's compute and the transfer
    within what the decode side leaves of the TTFT objective (0 when even the lightest load misses it)."""
    first_step_ms = disaggregated.decode_at_rate(decode.replica, _mix(workload), 1e-9).itl_mean_ms
    budget_s = (workload.ttft_p95_ms * (1 - disaggregated.DECODE_WAIT_SHARE) - first_step_ms) / 1000 - transfer_seconds

    def fits(replica: perf_model.Replica, rate: float) -> bool:
        latency = disaggregated.prefill_at_rate(replica, _mix(workload), rate)
        return latency.stable and latency.wait_p95_seconds + latency.compute_seconds <= budget_s

    service = disaggregated.prefill_at_rate(prefill.replica, _mix(workload), 0.0).service_seconds
    return _bisect(fits, prefill.replica, 1 / service)


def _bisect(criterion: Callable[[perf_model.Replica, float], bool], replica: perf_model.Replica, high: float) -> float:
    """Highest rate below ``high`` at which ``criterion`` holds (it holds below some rate and not above)."""
    low = 0.0
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if criterion(replica, middle):
            low = middle
        else:
            high = middle
    return low if low > 0 and criterion(replica, low) else 0.0


def _smallest_batch(
    criterion: Callable[[perf_model.Replica, float], bool], replica: perf_model.Replica, rate: float, least: int
) -> int:
    """The fewest batch slots, at least ``least``, with which ``replica`` still meets ``criterion`` (the objectives
    and the admission) at ``rate`` (more slots only shorten the queue: bisection); the replica's own when none fewer
    does."""
    low, high = least, replica.max_num_seqs
    if low >= high or not criterion(replace(replica, max_num_seqs=high), rate):
        return high
    while low < high:
        middle = (low + high) // 2
        if criterion(replace(replica, max_num_seqs=middle), rate):
            high = middle
        else:
            low = middle + 1
    return low


def replica_capacity_rps(
    replica: perf_model.Replica,
    input_tokens: int,
    output_tokens: int,
    ttft_p95_ms: float,
    itl_p95_ms: float,
    *,
    admission: AdmissionSpec,
) -> float:
    """Highest rate one configured replica serves a mix within both objectives behind ``admission``, by the model
    (0 when even the lightest load misses one): what a plan's replicas promise, which ``inferplane simulate --rate
    plan`` checks."""
    workload = Workload(
        model=replica.model,
        model_label=replica.model.hf_repo,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        requests_per_second=0.0,
        peak_requests_per_second=0.0,
        ttft_p95_ms=ttft_p95_ms,
        itl_p95_ms=itl_p95_ms,
        admission=admission,
    )
    return _capacity(workload, replica)


def _capacity(workload: Workload, replica: perf_model.Replica) -> float:
    """Highest rate one replica serves within both objectives (0 when even the lightest load misses one)."""
    high = perf_model.saturation(replica, _mix(workload)).requests_per_second
    return _bisect(functools.partial(meets, workload), replica, high)


def _latency_rejection(workload: Workload, config: Configuration, replica: perf_model.Replica) -> Rejection:
    lightest = perf_model.at_rate(replica, _mix(workload), 1e-9)
    if lightest.itl_p95_ms > workload.itl_p95_ms:
        return Rejection(
            config, f"itl: {lightest.itl_p95_ms:.1f} ms alone exceeds the {workload.itl_p95_ms:g} ms objective"
        )
    return Rejection(
        config, f"ttft: {lightest.ttft_p95_ms:.0f} ms alone exceeds the {workload.ttft_p95_ms:g} ms objective"
    )


def _replica_counts(workload: Workload, capacity_rps: float) -> tuple[int, int]:
    """Replicas of one capacity for the steady rate (at least one) and for the peak."""
    replicas = max(1, math.ceil(workload.requests_per_second / capacity_rps))
    return replicas, max(replicas, math.ceil(workload.peak_requests_per_second / capacity_rps))


def _priced(
    workload: Workload, config: Configuration, instance: InstanceType, nodes: int, price: float
) -> dict[str, Any]:
    """A candidate's shape and what its nodes cost, aggregated or disaggregated alike."""
    hourly = nodes * price
    output_per_hour = workload.requests_per_second * workload.output_tokens * 3600
    return {
        "accelerator": config.accelerator.id,
        "instance_type": instance.name,
        "tensor_parallel_size": config.tensor_parallel_size,
        "engine": config.engine,
        "weights_dtype": config.weights_dtype,
        "kv_cache_dtype": config.kv_cache_dtype,
        "nodes": nodes,
        "hourly_cost_usd": round(hourly, 4),
        "cost_per_million_output_tokens_usd": round(hourly / output_per_hour * 1e6, 4),
    }


def candidate(workload: Workload, evaluation: Evaluation, instance: InstanceType, price: float) -> Candidate:
    """Replicas, nodes and cost of an evaluated configuration on one node type."""
    config = evaluation.configuration
    replicas, max_replicas = _replica_counts(workload, evaluation.capacity_rps)
    nodes = math.ceil(replicas * config.tensor_parallel_size / instance.accelerators_per_node)
    per_replica_rate = workload.requests_per_second / replicas
    latency = perf_model.at_rate(evaluation.replica, _mix(workload), per_replica_rate)
    return Candidate(
        **_priced(workload, config, instance, nodes, price),
        replicas=replicas,
        max_replicas=max_replicas,
        max_num_seqs=evaluation.sizing.concurrency,
        max_context=evaluation.sizing.context,
        ttft_p95_ms=round(latency.ttft_p95_ms, 1),
        itl_p95_ms=round(latency.itl_p95_ms, 2),
        max_output_tokens_per_second=round(
            perf_model.saturation(evaluation.replica, _mix(workload)).output_tokens_per_second, 1
        ),
        replica_capacity_rps=math.floor(evaluation.capacity_rps * 1e4) / 1e4,  # never above what was checked
        headroom=round(evaluation.capacity_rps * replicas / workload.requests_per_second - 1, 3),
        limit=evaluation.limit,
    )


def disaggregated_candidate(
    workload: Workload, prefill: PrefillEvaluation, decode: DecodeEvaluation, instance: InstanceType, price: float
) -> Candidate | Rejection:
    """Both roles' replicas, nodes and cost on one node type, with the KV transfer its network allows."""
    config = replace(decode.configuration, accelerators_per_node=instance.accelerators_per_node)
    tp, prefill_tp = config.tensor_parallel_size, prefill.configuration.tensor_parallel_size
    sizing = decode.sizing
    transfer = size_transfer(
        decode_instance=instance,
        decode_gpus=tp,
        prefill_instance=instance,
        prefill_gpus=prefill_tp,
        efa=instance.efa_max_interfaces > 0,
        bytes_per_token=round(sizing.kv_cache_bytes_per_token * sizing.kv_head_replication),
        context=workload.input_tokens,
        ttft_slo_ms=max(1, math.floor(workload.ttft_p95_ms)),
    )
    shape = f"{prefill_tp}-GPU prefill, {tp}-GPU decode replicas on {instance.name}"
    if transfer.problem is not None or transfer.seconds_at_context is None:
        return Rejection(config, f"transfer: {shape}: {transfer.problem}")
    transfer_s = transfer.seconds_at_context
    prefill_capacity = _prefill_capacity(workload, prefill, decode, transfer_s)
    if prefill_capacity <= 0:
        return Rejection(
            config,
            f"ttft: {shape}: a prompt's prefill and its {transfer_s * 1000:,.0f} ms transfer leave nothing of the "
            "TTFT objective (disaggregated)",
        )

    decode_replicas, decode_max = _replica_counts(workload, decode.capacity_rps)
    prefill_replicas, prefill_max = _replica_counts(workload, prefill_capacity)
    # Both roles on one pool (the spec's default for the prefill role), so their replicas share its nodes.
    gpus = decode_replicas * tp + prefill_replicas * prefill_tp
    nodes = math.ceil(gpus / instance.accelerators_per_node)
    latency = disaggregated.at_rate(
        prefill.replica,
        decode.replica,
        _mix(workload),
        prefill_rate=workload.requests_per_second / prefill_replicas,
        decode_rate=workload.requests_per_second / decode_replicas,
        transfer_seconds=transfer_s,
    )
    served = min(decode.capacity_rps * decode_replicas, prefill_capacity * prefill_replicas)
    return Candidate(
        **_priced(workload, config, instance, nodes, price),
        replicas=decode_replicas,
        max_replicas=decode_max,
        max_num_seqs=sizing.concurrency,
        max_context=sizing.context,
        ttft_p95_ms=round(latency.ttft_p95_ms, 1),
        itl_p95_ms=round(latency.itl_p95_ms, 2),
        max_output_tokens_per_second=round(
            disaggregated.decode_output_tokens_per_second(decode.replica, _mix(workload)), 1
        ),
        replica_capacity_rps=math.floor(decode.capacity_rps * 1e4) / 1e4,
        headroom=round(served / workload.requests_per_second - 1, 3),
        limit=decode.limit,
        serving="disaggregated",
        prefill_tensor_parallel_size=prefill_tp,
        prefill_max_num_seqs=prefill.sizing.concurrency,
        prefill_replicas=prefill_replicas,
        prefill_max_replicas=prefill_max,
        kv_transfer_ms=round(transfer_s * 1000, 1),
    )


def disaggregable(config: Configuration) -> bool:
    """Whether the spec can serve the configuration disaggregated: vLLM (NixlConnector) on NVIDIA GPUs."""
    return config.engine == "vllm" and config.accelerator.vendor == "nvidia"


def _sold_as(instance: InstanceType, capacity_type: CapacityType) -> bool:
    if capacity_type == "spot":
        return instance.spot
    if capacity_type == "capacity_block":
        return instance.capacity_block
    return True


def configurations(workload: Workload, filters: Filters) -> list[tuple[Configuration, list[InstanceType]]]:
    """Every replica shape the filters allow, with the priced node types that can host it."""
    found: list[tuple[Configuration, list[InstanceType]]] = []
    for accelerator in ACCELERATORS.values():
        if filters.accelerators and accelerator.id not in filters.accelerators:
            continue
        nodes = [
            n
            for n in instances_for(accelerator.id)
            if _sold_as(n, filters.capacity_type)
            and hourly_price(n.cloud, n.name) is not None
            and (filters.cloud is None or n.cloud == filters.cloud)
        ]
        if not nodes:
            continue
        tpu = accelerator.vendor == "google"
        for weights in filters.weights_dtypes:
            if tpu and weights != "bf16":
                continue  # vLLM on TPU v5e serves bf16 (sizing refuses the rest)
            kv_options: list[KvCacheDtype] = ["auto"]
            if "fp8" in filters.weights_dtypes and not tpu:
                kv_options.append("fp8")
            for kv in kv_options:
                for engine in filters.engines:
                    fp8_units = accelerator.supports_fp8
                    if engine == "triton" and (tpu or weights == "int4" or ("fp8" in (weights, kv) and not fp8_units)):
                        continue  # TensorRT-LLM: full precision or FP8 (on FP8 tensor cores), on GPUs only
                    if engine == "sglang" and tpu:
                        continue  # SGLang's image serves NVIDIA GPUs (the spec refuses it on TPU pools)
                    shapes: dict[int, list[InstanceType]] = {}
                    for node in nodes:
                        probe = SizingRequest(
                            model=workload.model,
                            model_label=workload.model_label,
                            accelerator=accelerator,
                            accelerators_per_node=node.accelerators_per_node,
                            whole_node=tpu,
                        )
                        for tp in tensor_parallel_candidates(probe):
                            if filters.max_gpus is None or tp <= filters.max_gpus:
                                shapes.setdefault(tp, []).append(node)
                    for tp, hosts in sorted(shapes.items()):
                        config = Configuration(
                            accelerator=accelerator,
                            accelerators_per_node=max(h.accelerators_per_node for h in hosts),
                            tensor_parallel_size=tp,
                            weights_dtype=weights,
                            kv_cache_dtype=kv,
                            engine=engine,
                        )
                        found.append((config, hosts))
    return found


def plan(workload: Workload, filters: Filters) -> Plan:
    """Every candidate that fits and meets the objectives, aggregated and disaggregated, cheapest first."""
    candidates: list[Candidate] = []
    rejections: list[Rejection] = []
    # Disaggregated: each decode shape with each prefill shape of the same accelerator, precisions and engine.
    prefill_shapes: dict[tuple[str, str, str, str], list[PrefillEvaluation]] = {}
    decode_shapes: list[tuple[DecodeEvaluation, list[tuple[InstanceType, float]]]] = []
    for config, hosts in configurations(workload, filters):
        priced = [
            (host, price)
            for host in hosts
            if (price := hourly_price(host.cloud, host.name)) is not None
            # TPU replicas take the whole host; GPU replicas of TP t need a node with a multiple of t.
            and host.accelerators_per_node % config.tensor_parallel_size == 0
        ]
        if "aggregated" in filters.serving:
            result = evaluate(workload, config)
            if isinstance(result, Rejection):
                rejections.append(result)
            else:
                for host, price in priced:
                    evaluation = replace(
                        result, configuration=replace(config, accelerators_per_node=host.accelerators_per_node)
                    )
                    candidates.append(candidate(workload, evaluation, host, price))
        if "disaggregated" in filters.serving and disaggregable(config):
            for role in (evaluate_prefill(workload, config), evaluate_decode(workload, config)):
                if isinstance(role, Rejection):
                    rejections.append(role)
                elif isinstance(role, PrefillEvaluation):
                    prefill_shapes.setdefault(_group(config), []).append(role)
                else:
                    decode_shapes.append((role, priced))
    for decode, priced in decode_shapes:
        for prefill in prefill_shapes.get(_group(decode.configuration), []):
            for host, price in priced:
                if host.accelerators_per_node % prefill.configuration.tensor_parallel_size:
                    continue
                found = disaggregated_candidate(workload, prefill, decode, host, price)
                if isinstance(found, Rejection):
                    rejections.append(found)
                else:
                    candidates.append(found)
    candidates.sort(key=_cost_order)
    return Plan(candidates=tuple(candidates), rejections=tuple(rejections), weights_dtypes=filters.weights_dtypes)


def _group(config: Configuration) -> tuple[str, str, str, str]:
    """What a disaggregated model's two roles share: accelerator, precisions and engine (their TP may differ)."""
    return (config.accelerator.id, config.weights_dtype, config.kv_cache_dtype, config.engine)


def _cost_order(c: Candidate) -> tuple[float, float, bool, float, str, int, str, str, str, int]:
    # At equal cost aggregated first: one role to run and no transfer to fail.
    return (
        c.hourly_cost_usd,
        c.cost_per_million_output_tokens_usd,
        c.serving == "disaggregated",
        -c.headroom,
        c.accelerator,
        c.tensor_parallel_size,
        c.instance_type,
        c.engine,
        c.weights_dtype + c.kv_cache_dtype,
        c.prefill_tensor_parallel_size,
    )
