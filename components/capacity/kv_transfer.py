"""The KV transfer of a disaggregated model: what one request moves from a prefill replica to a decode replica, over
which fabric, how fast, and whether that fits the model's TTFT objective.

The decode replica pulls the prompt's KV blocks from the prefill replica (vLLM's NixlConnector): over EFA with NIXL's
LIBFABRIC backend where both roles' pools have EFA, else over TCP with NIXL's default UCX backend. Its bytes are the
prompt's tokens times the KV cache's bytes per token (``2 x layers x KV heads x head dim x bytes``, times the head
replication when tensor parallelism exceeds the KV heads, since every rank ships its own copy).

The rates are published measurements, not line rates (``../shared/reference/pd-offload-facts.md`` section 6):

- EFA: NVIDIA Dynamo's disaggregation communication guide measured "~9.6 GB/s" with NIXL + libfabric + GDRCopy and
  4 EFA interfaces per worker on p5.48xlarge, whose interfaces carry 100 Gbit/s each: 19.2 % of the line rate. A
  replica gets its share of the node's interfaces (a pod requests whole ``vpc.amazonaws.com/efa`` devices), each
  taken at that fraction of its line rate (:attr:`InstanceType.efa_interface_gbps`). Scaling the 4-interface figure
  linearly to 16 is a model, unmeasured.
- TCP: the same guide's "TCP fallback: ~100 MB/s" ("~98s TTFT" for Llama-3.1-8B at 8,000 prompt tokens), whatever the
  node's bandwidth: UCX over TCP is a fallback, and sizing says so by refusing it wherever a long prompt meets a TTFT
  objective.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.catalog.instances import InstanceType

TransferBackend = Literal["LIBFABRIC", "UCX"]
"""NIXL's backend for the transfer (``kv_connector_extra_config.backends``): LIBFABRIC on EFA (UCX on EFA "lands on a
slow transport (effectively TCP-speed at ~1-3 GB/s)", Dynamo's EKS EFA guide), UCX elsewhere."""

GBIT = 1e9 / 8
"""Bytes per second in one Gbit/s."""

EFA_TRANSFER_EFFICIENCY = 9.6e9 / (4 * 100 * GBIT)
"""Share of the EFA line rate a NIXL KV transfer reaches: Dynamo's "~9.6 GB/s" over 4 interfaces of 100 Gbit/s
(p5.48xlarge, NIXL + libfabric + GDRCopy)."""

TCP_TRANSFER_BYTES_PER_SECOND = 100e6
"""NIXL over UCX on TCP: Dynamo's measured "~100 MB/s" fallback."""


class KvTransferSizing(BaseModel):
    """How a disaggregated model's KV cache moves from its prefill role to its decode role."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: TransferBackend = Field(description="NIXL backend: LIBFABRIC over EFA, UCX (TCP) elsewhere.")
    efa_interfaces: int = Field(
        description="EFA devices each replica of the slower side gets (``vpc.amazonaws.com/efa``); 0 over TCP."
    )
    bytes_per_token: int = Field(description="KV bytes one prompt token moves, over every tensor-parallel rank.")
    bytes_per_second: float = Field(description="Modelled transfer rate between one prefill and one decode replica.")
    context: int = Field(description="The longest prompt the check moves: the model's max_context, tokens.")
    bytes_at_context: int = Field(description="KV bytes of a prompt filling max_context.")
    seconds_at_context: float | None = Field(
        description="Its transfer time, added to that prompt's time to first token; None when a side has no EFA "
        "interface."
    )
    ttft_slo_ms: int = Field(description="The model's TTFT objective (p95) the transfer is checked against.")
    problem: str | None = Field(description="Why the transfer does not fit; None when it does.")


def efa_interfaces_per_replica(instance: InstanceType, gpus_per_replica: int) -> int:
    """Whole EFA devices a replica of ``gpus_per_replica`` gets: its share of the node's interfaces (0 without EFA,
    or when the node has fewer interfaces than replicas)."""
    return instance.efa_max_interfaces * gpus_per_replica // instance.accelerators_per_node


def _rate(instance: InstanceType, interfaces: int) -> float:
    line = instance.efa_interface_gbps
    assert line is not None  # EFA pools only
    return interfaces * line * GBIT * EFA_TRANSFER_EFFICIENCY


def size_transfer(
    *,
    decode_instance: InstanceType,
    decode_gpus: int,
    prefill_instance: InstanceType,
    prefill_gpus: int,
    efa: bool,
    bytes_per_token: int,
    context: int,
    ttft_slo_ms: int,
) -> KvTransferSizing:
    """The transfer between one prefill and one decode replica, checked against the TTFT objective at a prompt filling
    ``context``: the prefill's compute is the same aggregated or not, the transfer is what disaggregation adds."""
    total = bytes_per_token * context
    problem = None
    if efa:
        sides = (("decode", decode_instance, decode_gpus), ("prefill", prefill_instance, prefill_gpus))
        counts = [efa_interfaces_per_replica(instance, gpus) for _, instance, gpus in sides]
        short = [
            f"a {role} replica of {gpus} GPU(s) on {instance.name} gets none of its {instance.efa_max_interfaces} EFA "
            f"interface(s) for {instance.accelerators_per_node} GPUs"
            for (role, instance, gpus), count in zip(sides, counts, strict=True)
            if count == 0
        ]
        backend: TransferBackend = "LIBFABRIC"
        interfaces = min(counts)
        rate = min(_rate(instance, count) for (_, instance, _), count in zip(sides, counts, strict=True))
        if short:
            problem = f"{'; '.join(short)}: give the role a larger share of the node (more GPUs per replica)"
    else:
        interfaces, rate, backend = 0, TCP_TRANSFER_BYTES_PER_SECOND, "UCX"
    seconds = total / rate if rate else None
    if problem is None and seconds is not None and seconds * 1000 > ttft_slo_ms:
        over = "EFA" if efa else "TCP (no EFA on the pools)"
        problem = (
            f"moving the KV of a {context:,}-token prompt ({total / 1e9:,.2f} GB) to a decode replica takes "
            f"{seconds * 1000:,.0f} ms over {over} at {rate / 1e9:,.2f} GB/s, more than the {ttft_slo_ms} ms TTFT "
            "objective: use EFA pools (p5, p5e, p5en), an fp8 KV cache, a shorter max_context, or serve aggregated"
        )
    return KvTransferSizing(
        backend=backend,
        efa_interfaces=interfaces,
        bytes_per_token=bytes_per_token,
        bytes_per_second=round(rate, 1),
        context=context,
        bytes_at_context=total,
        seconds_at_context=None if seconds is None else round(seconds, 4),
        ttft_slo_ms=ttft_slo_ms,
        problem=problem,
    )
