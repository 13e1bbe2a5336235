"""The gateway's response cache, composed from the spec and the AWS network it lives in.

Not yet called by :func:`infra.program.build`: the VPC, its private subnets and the EKS cluster security group come
from the AWS foundation, built on another branch. Once both are merged, ``build`` calls::

    build_cache(
        spec,
        tags,
        vpc_id=network.vpc_id,
        subnet_ids=network.private_subnet_ids,
        allowed_security_group_ids=[eks.cluster_security_group_id],
    )
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from components.redis_cache import RedisCache, RedisCacheArgs
from components.spec import PlatformSpec


def build_cache(
    spec: PlatformSpec,
    tags: Mapping[str, str],
    *,
    vpc_id: pulumi.Input[str],
    subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]],
    allowed_security_group_ids: Sequence[pulumi.Input[str]],
) -> RedisCache | None:
    """Declare the cache ``spec.cache`` describes, or nothing (``None``) when it is disabled."""
    if not spec.cache.enabled:
        return None
    return RedisCache(
        f"inferplane-{spec.environment}-cache",
        RedisCacheArgs(
            vpc_id=vpc_id,
            subnet_ids=subnet_ids,
            allowed_security_group_ids=allowed_security_group_ids,
            environment=spec.environment,
            engine=spec.cache.engine,
            node_type=spec.cache.node_type,
            nodes=spec.cache.replicas,
            tags=tags,
        ),
    )
