"""The gateway's response cache (ElastiCache Valkey/Redis replication group)."""

from __future__ import annotations

from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    known,
    resource_policy,
    truthy,
)
from inferplane.policies.resource_types import T

_TYPES = {T.ELASTICACHE_REPLICATION_GROUP}


@resource_policy(
    name="elasticache-replicationgroup-enable-transit-encryption",
    description=(
        "The cache must use TLS: it holds prompts and completions, which cross the VPC between the gateway and the "
        "cache nodes."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    remediation="Set transit_encryption_enabled=True.",
)
def cache_transit(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: CKV_AWS_30."""
    value = resource.get("transitEncryptionEnabled")
    if value is not UNKNOWN and truthy(value) is not True:
        report("transitEncryptionEnabled is not true")


@resource_policy(
    name="elasticache-replicationgroup-enable-at-rest-encryption",
    description="Cache snapshots and swap hold prompts and completions; they must be encrypted at rest.",
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    remediation="Set at_rest_encryption_enabled=True (with a customer kms_key_id).",
)
def cache_at_rest(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_AWS_29/191."""
    value = resource.get("atRestEncryptionEnabled")
    if value is not UNKNOWN and truthy(value) is not True:
        report("atRestEncryptionEnabled is not true")


@resource_policy(
    name="elasticache-replicationgroup-require-auth",
    description=(
        "The cache must require authentication (an AUTH token or RBAC user groups): anything in the VPC could "
        "otherwise read cached completions or poison them."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    remediation="Set auth_token from a Pulumi secret (requires transit encryption), or user_group_ids.",
)
def cache_auth(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_AWS_31; AWS ElastiCache AuthToken documentation."""
    candidates = [resource.get("authToken"), resource.get("authTokenWo"), resource.get("userGroupIds")]
    if any(c is UNKNOWN or c for c in candidates):
        return
    report("neither authToken nor userGroupIds is set: the cache accepts unauthenticated clients")


@resource_policy(
    name="elasticache-replicationgroup-configure-high-availability",
    description=(
        "Where the environment promises availability, the cache needs a replica in another zone with automatic "
        "failover: losing the only node empties the cache and sends every request to the GPUs at once."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={
        "requireHighAvailability": {
            "type": "boolean",
            "default": False,
            "description": "Require automatic failover, Multi-AZ and at least two cache nodes.",
        }
    },
    remediation="Set cache.replicas >= 2; the cache component then enables failover and Multi-AZ.",
)
def cache_high_availability(resource: Resource, config: Config, report: Report) -> None:
    """Derived from awsguard rds-instance-multi-az-enabled and the Pulumi Best Practices 'High Availability' set."""
    if not config["requireHighAvailability"]:
        return
    for key in ("automaticFailoverEnabled", "multiAzEnabled"):
        value = resource.get(key)
        if value is not UNKNOWN and truthy(value) is not True:
            report(f"{key} is not true")
    nodes = resource.get("numCacheClusters")
    replicas = resource.get("replicasPerNodeGroup")
    if not (known(nodes) and known(replicas)):
        return
    total = nodes if isinstance(nodes, int) else (1 + replicas if isinstance(replicas, int) else 1)
    if total < 2:
        report(f"{total} cache node(s): failover needs at least 2")


POLICIES: list[AnyPolicy] = [cache_transit, cache_at_rest, cache_auth, cache_high_availability]
