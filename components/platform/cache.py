"""The gateway's response cache, composed from the spec and the AWS network it lives in.

:func:`~inferplane.components.platform.compose.compose_platform` calls :func:`build_cache` with the AWS
foundation's VPC, its private subnets and the EKS cluster security group (the only clients the cache admits)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from inferplane.components.aws.redis_cache import RedisCache, RedisCacheArgs
from inferplane.components.spec.platform_spec import PlatformSpec


def build_cache(
    spec: PlatformSpec,
    tags: Mapping[str, str],
    *,
    vpc_id: pulumi.Input[str],
    subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]],
    allowed_security_group_ids: Sequence[pulumi.Input[str]],
    parent: pulumi.Resource | None = None,
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
            eviction_policy=spec.cache.eviction_policy,
            tags=tags,
        ),
        opts=pulumi.ResourceOptions(parent=parent),
    )
