"""A disaggregated model in ``inferplane simulate``: its two roles as the stack's sizing renders them.

The run serves the model as the stack does: decode replicas (the model's own sizing as a decode role: the replicas
the gateway picks among) and prefill replicas (the prefill role's sizing: its larger step budget), the KV moved at the
rate sizing models over the pools' interconnect (:mod:`inferplane.components.capacity.kv_transfer`). The gateway in
front renders the model without its prefill step: in the simulated fleet each replica's Dynamo frontend sends the
prompt to a prefill worker itself (:mod:`.fleet`), because the mockers do not speak vLLM's proxy protocol that the
gateway's own step uses. ``--serving aggregated`` runs the other side of the comparison: the model's aggregated
sizing on the same pool and replica size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.sizing import DeploymentSizing, PlatformSizing
from inferplane.components.catalog import get_accelerator
from inferplane.components.spec.platform_spec import ModelDeploymentSpec
from inferplane.tool.simulate import fleet as fl

Serving = Literal["aggregated", "disaggregated"]


@dataclass(frozen=True)
class Role:
    """One role as sized, and the engine a simulated worker of it runs."""

    sizing: DeploymentSizing
    replica: perf_model.Replica
    settings: fl.EngineSettings


@dataclass(frozen=True)
class PrefillPlan:
    """The prefill role of a run that simulates the model disaggregated."""

    role: Role
    count: int
    """Prefill workers."""
    transfer_gbps: float
    """The KV transfer's modelled rate between one prefill and one decode replica, GB/s."""


def role_of(deployment: ModelDeploymentSpec, sizing: DeploymentSizing, served_model: str) -> Role:
    """``deployment``'s engine as sized, serving ``served_model`` (the model's name for both roles: Dynamo pairs
    prefill and decode workers by it)."""
    accelerator = get_accelerator(sizing.result.accelerator)
    replica = perf_model.replica_from_sizing(
        sizing.result, deployment.architecture_resolved, accelerator, sizing.engine
    )
    settings = fl.engine_settings(deployment, sizing, replica).model_copy(update={"served_model": served_model})
    return Role(sizing=sizing, replica=replica, settings=settings)


def disaggregated_roles(
    model: ModelDeploymentSpec, sizing: PlatformSizing, display_file: str
) -> tuple[Role, Role, float]:
    """The decode and prefill roles of ``model`` (served disaggregated in ``sizing``) and the KV transfer's GB/s."""
    prefill_deployment = model.prefill_role
    decode = sizing.serving(model.name)
    if prefill_deployment is None or decode.prefill is None or decode.transfer is None:
        raise ValueError(f"{display_file}: {model.name} is not sized as a disaggregated model")
    return (
        role_of(model, decode, model.name),
        role_of(prefill_deployment, decode.prefill, model.name),
        decode.transfer.bytes_per_second / 1e9,
    )
