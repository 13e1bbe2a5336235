"""``RedisCache``: the gateway's response cache, an ElastiCache (Valkey or Redis OSS) replication group.

Secure by default, and refused when it would not be:

* TLS in transit, required (``transit_encryption_mode = "required"``), and an AUTH token. The token is a
  ``pulumi_random.RandomPassword``: Pulumi keeps it encrypted in state as a secret, the program never needs a
  config key per stack, and the component hands it out only as a secret output (for the gateway's Kubernetes
  Secret). 64 alphanumeric characters: AWS allows 16-128 printable characters with only ``!&#$^<>-`` as specials
  (botocore elasticache model, ``CreateReplicationGroupMessage.AuthToken``), and leaving specials out keeps the
  token safe inside ``rediss://`` URLs.
* Encryption at rest with a customer-managed KMS key that rotates yearly.
* Multi-AZ with automatic failover whenever there are at least two nodes; prod is refused with fewer.
* A subnet group on the given private subnets and a security group with no egress and one ingress rule per
  allowed security group (the cluster's nodes) on the Redis port, nothing else.
* ``protect`` on the replication group and its key in prod.

* A parameter group of the engine's family carrying the spec's eviction policy (``maxmemory-policy``; default
  ``volatile-lru``, which evicts only keys with a TTL: every response-cache entry has one, so the gateway's other
  keys are never evicted to make room for cached answers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from inferplane.components.aws import kms_policy
from inferplane.components.spec.input_errors import InputErrors, raise_input_errors
from inferplane.components.spec.platform_spec import CacheEvictionPolicy, Environment

CacheEngine = Literal["valkey", "redis"]

REDIS_PORT = 6379

ENGINE_VERSIONS: dict[CacheEngine, str] = {"valkey": "8.2", "redis": "7.1"}
"""Pinned engine versions: Valkey 8.2 is the first ElastiCache Valkey with native vector search (what a semantic
cache needs); 7.1 is the last Redis OSS ElastiCache offers (docs.aws.amazon.com/AmazonElastiCache/latest/dg/
engine-versions.html, read 2026-11-29). Major and minor are required from 7 on (pulumi_aws ``engine_version``)."""

PARAMETER_GROUP_FAMILIES: dict[CacheEngine, str] = {"valkey": "valkey8", "redis": "redis7"}
"""Parameter group family of each pinned engine version (botocore elasticache model, ``CacheParameterGroupFamily``:
``valkey8 | valkey7 | ... | redis7``)."""

AUTH_TOKEN_LENGTH = 64

MAX_NODES = 6
"""A cluster-mode-disabled replication group has a primary and at most five replicas."""

_NAME = re.compile(r"^[a-z](?!.*--)[-a-z0-9]{0,27}[a-z0-9]$")
"""Replication group ids are at most 40 characters; ``<name>-rg`` plus Pulumi's 8-character suffix must fit."""
_NODE_TYPE = re.compile(r"^cache\.[a-z0-9]+\.[a-z0-9]+$")


@dataclass(frozen=True)
class RedisCacheArgs:
    """Inputs of :class:`RedisCache`; the network ones come from the AWS foundation (VPC and EKS cluster)."""

    vpc_id: pulumi.Input[str]
    """VPC of the cache's security group."""
    subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    """Private subnets, one per zone the nodes may land in."""
    allowed_security_group_ids: Sequence[pulumi.Input[str]]
    """Security groups admitted on the Redis port: the EKS cluster security group (its nodes)."""
    environment: Environment
    """dev, staging or prod: prod needs at least two nodes and gets ``protect``."""
    engine: CacheEngine = "valkey"
    """ElastiCache engine."""
    node_type: str = "cache.r7g.large"
    """Cache node type."""
    nodes: int = 2
    """Cache nodes: the primary plus replicas."""
    eviction_policy: CacheEvictionPolicy = "volatile-lru"
    """``maxmemory-policy`` of the cache's parameter group."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Tags for every taggable child."""


def validate(name: str, args: RedisCacheArgs) -> InputErrors:
    """Every problem with ``args``, each naming its field; empty when the cache can be built."""
    errors: InputErrors = []
    if not _NAME.match(name):
        errors.append(("name", f"{name!r}: lowercase letters, digits and single '-', 2-29 characters"))
    if args.engine not in ENGINE_VERSIONS:
        errors.append(("engine", f"{args.engine!r} is not an ElastiCache engine (valkey, redis)"))
    if not _NODE_TYPE.match(args.node_type):
        errors.append(("node_type", f"{args.node_type!r} is not a cache node type (cache.<family>.<size>)"))
    elif args.node_type.split(".")[1].endswith("gd"):
        errors.append(("node_type", f"{args.node_type} needs data tiering, which a response cache does not use"))
    if not 1 <= args.nodes <= MAX_NODES:
        errors.append(("nodes", f"{args.nodes}: a replication group has 1 to {MAX_NODES} nodes"))
    elif args.environment == "prod" and args.nodes < 2:
        errors.append(("nodes", f"prod needs at least 2 nodes (multi-AZ automatic failover), got {args.nodes}"))
    if not args.allowed_security_group_ids:
        errors.append(("allowed_security_group_ids", "no security group is admitted: nothing could connect"))
    return errors


class RedisCache(pulumi.ComponentResource):
    """An encrypted, authenticated ElastiCache replication group reachable only from the given security groups."""

    replication_group: aws.elasticache.ReplicationGroup
    """The replication group."""
    security_group: aws.ec2.SecurityGroup
    """The cache's security group."""
    parameter_group: aws.elasticache.ParameterGroup
    """The engine parameters (the eviction policy)."""
    primary_endpoint: pulumi.Output[str]
    """Address for writes."""
    reader_endpoint: pulumi.Output[str]
    """Address for reads spread over replicas."""
    auth_token: pulumi.Output[str]
    """The AUTH token, always secret."""

    def __init__(self, name: str, args: RedisCacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # Refuse before registering anything: bad input leaves nothing half-declared.
        raise_input_errors(f"The input properties for cache {name!r} are invalid.", validate(name, args))

        super().__init__("inferplane:index:RedisCache", name, None, opts)

        prod = args.environment == "prod"
        tags = dict(args.tags)

        child = pulumi.ResourceOptions(parent=self)
        token = random.RandomPassword(f"{name}-auth-token", length=AUTH_TOKEN_LENGTH, special=False, opts=child)
        self.auth_token = pulumi.Output.secret(token.result)
        key = self._key(name, tags, prod)
        self.security_group, subnet_group = self._network(name, args, tags)
        self.parameter_group = self._parameter_group(name, args, tags)
        self.replication_group = self._replication_group(name, args, tags, prod, key=key, subnet_group=subnet_group)
        self.primary_endpoint = self.replication_group.primary_endpoint_address
        self.reader_endpoint = self.replication_group.reader_endpoint_address

        self.register_outputs(
            {
                "primaryEndpoint": self.primary_endpoint,
                "readerEndpoint": self.reader_endpoint,
                "port": REDIS_PORT,
                "securityGroupId": self.security_group.id,
                "authToken": self.auth_token,
            }
        )

    def _key(self, name: str, tags: Mapping[str, str], prod: bool) -> aws.kms.Key:
        """The yearly-rotating KMS key that encrypts the cache at rest, usable only through ElastiCache."""
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account = aws.get_caller_identity_output(opts=invoke).account_id
        region = aws.get_region_output(opts=invoke).region
        return aws.kms.Key(
            f"{name}-key",
            description=f"ElastiCache {name}: encryption at rest",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            policy=pulumi.Output.all(partition, account, region).apply(
                lambda values: cache_key_policy(values[0], values[1], values[2])
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=prod),
        )

    def _network(
        self, name: str, args: RedisCacheArgs, tags: Mapping[str, str]
    ) -> tuple[aws.ec2.SecurityGroup, aws.elasticache.SubnetGroup]:
        """The security group (no egress; the Redis port from each allowed group) and the private subnet group."""
        child = pulumi.ResourceOptions(parent=self)
        security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description=f"ElastiCache {name}: Redis port from the cluster's nodes only",
            tags=tags,
            opts=child,
        )
        for index, source in enumerate(args.allowed_security_group_ids):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-from-{index}",
                security_group_id=security_group.id,
                referenced_security_group_id=source,
                ip_protocol="tcp",
                from_port=REDIS_PORT,
                to_port=REDIS_PORT,
                description="Redis over TLS from the cluster's nodes",
                tags=tags,
                opts=child,
            )
        subnet_group = aws.elasticache.SubnetGroup(
            f"{name}-subnets",
            subnet_ids=args.subnet_ids,
            description=f"ElastiCache {name}: private subnets",
            tags=tags,
            opts=child,
        )
        return security_group, subnet_group

    def _parameter_group(
        self, name: str, args: RedisCacheArgs, tags: Mapping[str, str]
    ) -> aws.elasticache.ParameterGroup:
        """The engine family's parameters with the spec's eviction policy."""
        return aws.elasticache.ParameterGroup(
            f"{name}-params",
            family=PARAMETER_GROUP_FAMILIES[args.engine],
            description=f"ElastiCache {name}: eviction policy {args.eviction_policy}",
            parameters=[
                aws.elasticache.ParameterGroupParameterArgs(name="maxmemory-policy", value=args.eviction_policy)
            ],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _replication_group(
        self,
        name: str,
        args: RedisCacheArgs,
        tags: Mapping[str, str],
        prod: bool,
        *,
        key: aws.kms.Key,
        subnet_group: aws.elasticache.SubnetGroup,
    ) -> aws.elasticache.ReplicationGroup:
        """The TLS-only, AUTH-protected, encrypted replication group; multi-AZ with failover from two nodes on."""
        multi_az = args.nodes >= 2
        return aws.elasticache.ReplicationGroup(
            f"{name}-rg",
            description=f"inferplane response cache ({args.environment})",
            engine=args.engine,
            engine_version=ENGINE_VERSIONS[args.engine],
            node_type=args.node_type,
            num_cache_clusters=args.nodes,
            cluster_mode="disabled",
            port=REDIS_PORT,
            subnet_group_name=subnet_group.name,
            parameter_group_name=self.parameter_group.name,
            security_group_ids=[self.security_group.id],
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            auth_token=self.auth_token,
            at_rest_encryption_enabled=True,
            kms_key_id=key.arn,
            automatic_failover_enabled=multi_az,
            multi_az_enabled=multi_az,
            auto_minor_version_upgrade=True,
            snapshot_retention_limit=1 if prod else 0,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=prod),
        )


ELASTICACHE_KEY_ACTIONS: tuple[str, ...] = (
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:CreateGrant",
    "kms:ListGrants",
    "kms:DescribeKey",
)
"""What ElastiCache needs on a customer-managed key, as the policy of the AWS managed ``aws/elasticache`` key grants
it: ElastiCache creates a grant when the replication group is created and uses the key through it."""


def cache_key_policy(partition: str, account_id: str, region: str) -> str:
    """The cache key's policy: the account administers it; its principals use it only through ElastiCache."""
    return kms_policy.key_policy(
        [
            kms_policy.administration_statement(partition, account_id),
            kms_policy.via_service_statement(
                "ThroughElastiCache",
                partition=partition,
                account_id=account_id,
                service="elasticache",
                region=region,
                actions=ELASTICACHE_KEY_ACTIONS,
            ),
        ]
    )
