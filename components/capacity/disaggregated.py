"""Performance of a disaggregated model: prefill replicas, decode replicas and the KV transfer between them.

Pure Python, no Pulumi. The planner (:mod:`.planner`) weighs it against the aggregated replica of
:mod:`.perf_model`, whose step roofline both share; only the queues differ.

* **Prefill role**: a replica runs prompts only, batched into steps of up to its budget (sizing's largest,
  ``--max-num-batched-tokens 16384``: no decode waits on it). Prompts batched in one step share its weights' read, so
  a prompt occupies the replica for its share of a full step, ``input / budget x step(budget)``: one server whose
  work arrives with the prompts. The mix's prompts are all one length, so the service time is fixed: an M/D/1 queue.
  Its wait exceeds ``t`` with probability about ``rho x e^(-theta t)``: ``rho`` is exactly the chance of waiting at
  all in any M/G/1 queue, and ``theta`` the decay rate of its tail, the positive root of ``lambda (E[e^(theta S)] -
  1) = theta`` (the Cramer-Lundberg exponent; with exponential service it gives M/M/1's ``mu - lambda`` exactly, with a
  fixed ``S`` the root of ``lambda (e^(theta S) - 1) = theta``). An exponential service time, as the aggregated
  model's many-slot queue assumes, would charge one server's queue about twice the wait its fixed-length prompts
  see. A prompt's own compute is its chunks alone (a short prompt alone is a step bound by the weights' read, not
  by its FLOPs).
* **KV transfer**: the prompt's KV (``input x bytes per token``) at the rate :mod:`.kv_transfer` models between the
  roles' nodes (EFA where the node type has it, TCP otherwise).
* **Decode role**: a replica is an M/M/c queue (``c`` = batch slots, as many as its KV pool holds) of sequences that
  only decode: every step is a decode step at the concurrency Little's law gives, so ITL p95 is that step. This is
  what disaggregation buys: in an aggregated replica a share of steps carries a prompt chunk and, above
  ``perf_model.PREFILL_TAIL_SHARE`` of steps, that chunk's step is ITL p95 (DistServe, Zhong et al. OSDI 2024: prefill
  interference with decoding, the motivation of every disaggregated engine).
* **TTFT p95** = the prefill queue's p95 wait + the prompt's compute + the transfer + the decode queue's p95 wait for
  a slot + one decode step. The p95s are summed, a bound above the p95 of the sum (they are not independent tails).
  The decode queue's wait is held to :data:`DECODE_WAIT_SHARE` of the objective; the prefill role gets the rest.

Not modelled: the gateway's own fallback (a prompt whose prefill replica is busy is computed where it decodes), a
prefill replica holding finished prompts' KV until the decode side pulls them (its pool is sized for its batch), and
roles on two node types (each role has its own TP, on one accelerator and node type).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.perf_model import TAIL_SHARE, Latency, Replica, Workload

DECODE_WAIT_SHARE = 0.1
"""Share of the TTFT objective a request may wait for a decode replica's slot (p95): the decode role's queue is
sized to be short, the prefill role's compute and transfer take the rest."""

DECAY_RATE_STEPS = 60


@dataclass(frozen=True)
class PrefillLatency:
    """One prefill replica at a request rate."""

    requests_per_second: float
    service_seconds: float
    """The replica's time per prompt, batched: its share of full steps."""
    compute_seconds: float
    """The prompt's own compute: its chunks, alone."""
    wait_p95_seconds: float
    stable: bool


def prefill_at_rate(replica: Replica, workload: Workload, requests_per_second: float) -> PrefillLatency:
    """A prefill replica (sized for the role: its step budget is the largest) serving ``requests_per_second``
    prompts of the mix (M/D/1 over batched service)."""
    budget = replica.max_num_batched_tokens
    prompt = workload.input_tokens
    full = perf_model.step_time(replica, 0, budget, prompt, prompt).seconds
    service = prompt / budget * full
    chunks, last = divmod(prompt, budget)
    compute = chunks * full + (perf_model.step_time(replica, 0, last, prompt, prompt).seconds if last else 0.0)
    load = requests_per_second * service
    if load >= 1:
        return PrefillLatency(requests_per_second, service, compute, math.inf, stable=False)
    # M/D/1: P(wait > t) ~ load x e^(-theta t); at light load a waiting prompt waits mostly for the one in service,
    # whose rest is uniform over a service: P(wait > t) >= load x (1 - t / service), the floor below.
    wait_p95 = 0.0
    if load > TAIL_SHARE:
        tail = math.log(load / TAIL_SHARE) / fixed_service_decay_rate(requests_per_second, service)
        wait_p95 = max(tail, service * (1 - TAIL_SHARE / load))
    return PrefillLatency(requests_per_second, service, compute, wait_p95, stable=True)


def fixed_service_decay_rate(rate: float, service: float) -> float:
    """The decay rate ``theta`` of an M/D/1 queue's waiting-time tail: the positive root of ``rate x (e^(theta x
    service) - 1) = theta`` (stable queue: ``rate x service < 1``). The left side is convex and starts below the
    right one (its slope at 0 is the load), so the root is unique: bracketed by doubling, then bisected."""
    x_load = rate * service

    def excess(x: float) -> float:  # in units of 1 / service: load x (e^x - 1) - x
        return x_load * math.expm1(x) - x

    high = 1.0
    while excess(high) <= 0:
        high *= 2
    low = 0.0
    for _ in range(DECAY_RATE_STEPS):
        middle = (low + high) / 2
        if excess(middle) <= 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2 / service


def decode_at_rate(replica: Replica, workload: Workload, requests_per_second: float) -> Latency:
    """A decode replica serving ``requests_per_second`` sequences whose prompts were computed elsewhere.

    Its TTFT fields are the decode side's part alone: the p95 wait for a slot and one decode step."""
    batch, _ = perf_model.max_batch(replica, workload)
    mean_context = workload.input_tokens + workload.output_tokens / 2
    rate = requests_per_second
    # The aggregated replica's steady step with no prompt tokens in its steps: the same solver, settled to the
    # same tolerance (a batch of at least one, so a replica where nothing fits still reports a step).
    concurrency, step = perf_model.steady_step(replica, workload, rate, max(batch, 1), mean_context, prompt_tokens=0)
    service = workload.output_tokens * step.seconds
    offered = rate * service
    stable = batch >= 1 and offered < batch
    wait_mean, wait_p95 = perf_model.slot_wait(batch, service, rate) if stable else (math.inf, math.inf)
    return Latency(
        requests_per_second=rate,
        concurrency=concurrency if stable else float(batch),
        in_service=offered if stable else float(batch),
        ttft_mean_ms=(wait_mean + step.seconds) * 1000,
        ttft_p95_ms=(wait_p95 + step.seconds) * 1000,
        itl_mean_ms=step.seconds * 1000,
        itl_p95_ms=step.seconds * 1000,
        limit=step.limit,
        stable=stable,
        batch=batch,
        service_seconds=service,
    )


@dataclass(frozen=True)
class DisaggregatedLatency:
    """A disaggregated model at a rate: its prefill replicas' and decode replicas' shares of it, and the sum."""

    prefill: PrefillLatency
    decode: Latency
    transfer_seconds: float

    @property
    def stable(self) -> bool:
        return self.prefill.stable and self.decode.stable

    @property
    def ttft_p95_ms(self) -> float:
        """The prefill side's p95 (wait + compute) + the transfer + the decode side's p95 (wait + a step)."""
        prefill = self.prefill.wait_p95_seconds + self.prefill.compute_seconds
        return (prefill + self.transfer_seconds) * 1000 + self.decode.ttft_p95_ms

    @property
    def itl_p95_ms(self) -> float:
        return self.decode.itl_p95_ms


def at_rate(
    prefill: Replica,
    decode: Replica,
    workload: Workload,
    *,
    prefill_rate: float,
    decode_rate: float,
    transfer_seconds: float,
) -> DisaggregatedLatency:
    """Each role at its replicas' share of the rate, and the transfer between them."""
    return DisaggregatedLatency(
        prefill=prefill_at_rate(prefill, workload, prefill_rate),
        decode=decode_at_rate(decode, workload, decode_rate),
        transfer_seconds=transfer_seconds,
    )


def decode_output_tokens_per_second(replica: Replica, workload: Workload) -> float:
    """One decode replica at saturation: its whole batch decoding, no prompt in any step."""
    batch, _ = perf_model.max_batch(replica, workload)
    if batch < 1:
        return 0.0
    mean_context = workload.input_tokens + workload.output_tokens / 2
    return batch / perf_model.step_time(replica, batch, 0, mean_context, workload.input_tokens).seconds
