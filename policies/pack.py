"""Every policy of the pack, in one list, and the pack's identity.

Importing this module starts nothing (``PolicyPack(...)`` blocks serving gRPC, so only ``__main__.py`` builds it);
tests and the offline preview read the policies from here.
"""

from __future__ import annotations

from inferplane.policies import (
    autoscaling,
    baseline,
    cache,
    cost,
    ec2,
    eks,
    elasticache,
    gateway,
    governance,
    observability,
    serving,
    workloads,
)
from inferplane.policies.base import AnyPolicy

PACK_NAME = "inferplane"
PACK_DESCRIPTION = (
    "Guardrails for the inferplane LLM inference platform: GPU limits and cost ceilings per environment, model/GPU "
    "fit, engine settings, autoscaling on queue depth, and the security baseline of EKS, ElastiCache and workloads."
)

POLICIES: list[AnyPolicy] = [
    *eks.POLICIES,
    *ec2.POLICIES,
    *elasticache.POLICIES,
    *cache.POLICIES,
    *governance.POLICIES,
    *workloads.POLICIES,
    *serving.POLICIES,
    *autoscaling.POLICIES,
    *cost.POLICIES,
    *observability.POLICIES,
    *baseline.POLICIES,
    *gateway.POLICIES,
]


def policy_named(name: str) -> AnyPolicy:
    """The policy called ``name``."""
    return next(p for p in POLICIES if p.meta.name == name)
