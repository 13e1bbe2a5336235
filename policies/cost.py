"""What the environment may cost at max scale: accelerators and on-demand dollars per hour, summed over its pools.

Counted like :func:`components.capacity.sizing.size_platform`: accelerator pools at their maximum node count, priced at
the dated on-demand price book (``components/catalog/prices.toml``); spot and capacity-block pools are costed at the
on-demand price, an upper bound. System node groups (non-accelerator types) are outside both limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferplane.components.catalog import INSTANCE_TYPES, InstanceType, hourly_price
from inferplane.components.spec.scheduling import POOL_LABEL
from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Resource,
    Severity,
    StackReport,
    as_dict,
    as_list,
    of_type,
    stack_policy,
)
from inferplane.policies.eks import pool_instance_types as pool_instance_types_of
from inferplane.policies.resource_types import T


@dataclass(frozen=True)
class PoolAtMax:
    """One accelerator pool at its maximum size."""

    resource: Resource
    instance: InstanceType
    max_nodes: int

    @property
    def accelerators(self) -> int:
        """Accelerators at max scale."""
        return self.max_nodes * self.instance.accelerators_per_node


def _launch_template_type(pool: Resource, resources: list[Resource]) -> Any:
    """A node group's instance type from the launch template it depends on (when instanceTypes is unset)."""
    for template in of_type(resources, T.LAUNCH_TEMPLATE):
        if template.urn in pool.dependencies:
            return template.get("instanceType")
    return None


def _max_nodes(pool: Resource) -> Any:
    if pool.type == T.GKE_NODE_POOL:
        autoscaling = as_dict(pool.get("autoscaling"))
        if autoscaling.get("totalMaxNodeCount") is not None:
            return autoscaling["totalMaxNodeCount"]
        if autoscaling.get("maxNodeCount") is not None:
            zones = max(len(as_list(pool.get("nodeLocations"))), 1)
            per_zone = autoscaling["maxNodeCount"]
            return per_zone * zones if isinstance(per_zone, int) else per_zone
        return pool.get("nodeCount") if pool.get("nodeCount") is not None else pool.get("initialNodeCount")
    return pool.get("scalingConfig", "maxSize")


def _pool_instance(pool: Resource, resources: list[Resource]) -> InstanceType | None:
    types = pool_instance_types_of(pool) or [_launch_template_type(pool, resources)]
    rows = [INSTANCE_TYPES[t] for t in types if isinstance(t, str) and t in INSTANCE_TYPES]
    # Mixed-type node groups are costed at their largest type.
    return max(rows, key=lambda r: (r.accelerators_per_node, hourly_price(r.cloud, r.name) or 0.0)) if rows else None


def pool_instance_types(resources: list[Resource]) -> dict[str, InstanceType]:
    """{pool label value: catalog instance type} for the accelerator pools whose type is known."""
    found: dict[str, InstanceType] = {}
    for pool in of_type(resources, T.EKS_NODE_GROUP, T.GKE_NODE_POOL):
        labels = pool.get("labels") if pool.type == T.EKS_NODE_GROUP else pool.get("nodeConfig", "labels")
        name = as_dict(labels).get(POOL_LABEL)
        instance = _pool_instance(pool, resources)
        if isinstance(name, str) and instance is not None:
            found[name] = instance
    return found


def pools_at_max(resources: list[Resource]) -> list[PoolAtMax]:
    """Accelerator pools whose instance type and maximum size are known."""
    found: list[PoolAtMax] = []
    for pool in of_type(resources, T.EKS_NODE_GROUP, T.GKE_NODE_POOL):
        instance = _pool_instance(pool, resources)
        nodes = _max_nodes(pool)
        if instance is None or nodes is UNKNOWN or not isinstance(nodes, int):
            continue
        found.append(PoolAtMax(pool, instance, nodes))
    return found


@stack_policy(
    name="compute-stack-limit-total-accelerators",
    description=(
        "The environment's accelerator pools at max scale stay within its accelerator limit: quotas, budgets and "
        "capacity reservations are sized per environment, and a typo in max_replicas should not book 64 H100s."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    config={"maxGpus": {"type": "integer", "minimum": 1, "default": 8, "description": "Accelerators at max scale."}},
    remediation="Lower models[].max_replicas, or raise limits.max_total_gpus (and this config) deliberately.",
)
def total_accelerators(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchors: pulumi examples aws-ts-finops; Gatekeeper replicalimits; limits.max_total_gpus in the spec."""
    pools = pools_at_max(resources)
    total = sum(p.accelerators for p in pools)
    if total > config["maxGpus"]:
        parts = ", ".join(f"{p.resource.name} {p.max_nodes} x {p.instance.name}" for p in pools)
        report(f"{total} accelerators at max scale ({parts}) exceed the limit of {config['maxGpus']}", None)


@stack_policy(
    name="cost-stack-limit-hourly-cost",
    description=(
        "The environment's accelerator pools at max scale cost no more per hour than its budget, at on-demand "
        "prices; a pool whose price is unknown cannot be vouched for and counts as a violation."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    config={
        "maxHourlyCostUsd": {"type": "number", "exclusiveMinimum": 0, "default": 10.0, "description": "USD per hour."}
    },
    remediation="Lower max replicas, pick cheaper accelerators, or raise limits.max_hourly_cost_usd deliberately.",
)
def hourly_cost(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchors: pulumi examples aws-ts-finops; components.catalog.prices (dated price book)."""
    pools = pools_at_max(resources)
    unpriced = sorted({p.instance.name for p in pools if hourly_price(p.instance.cloud, p.instance.name) is None})
    if unpriced:
        report(f"no on-demand price for {', '.join(unpriced)}; the cost ceiling cannot be checked", None)
        return
    cost = sum(p.max_nodes * (hourly_price(p.instance.cloud, p.instance.name) or 0.0) for p in pools)
    if cost > config["maxHourlyCostUsd"]:
        report(f"${cost:,.2f}/h at max scale exceeds the limit of ${config['maxHourlyCostUsd']:,.2f}/h", None)


POLICIES: list[AnyPolicy] = [total_accelerators, hourly_cost]
