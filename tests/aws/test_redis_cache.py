"""RedisCache under the mock engine: exact children and inputs, prod rules, every refusal, engine enums."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

import pulumi
import pytest

from inferplane.components.aws.kms_policy import KEY_ADMIN_ACTIONS
from inferplane.components.aws.redis_cache import (
    AUTH_TOKEN_LENGTH,
    ENGINE_VERSIONS,
    REDIS_PORT,
    RedisCache,
    RedisCacheArgs,
)
from inferplane.components.platform.cache import build_cache
from inferplane.tool.mockengine import SECRET_PLACEHOLDER, Evaluation, PlatformMocks, evaluate
from inferplane.tool.stackfile import load_stack

PROJECT_DIR = Path(__file__).resolve().parents[2]
TAGS = {"team": "ml-platform", "cost-center": "ml-staging"}
SUBNETS = ["subnet-0a1", "subnet-0b2"]


def cache_args(**changes: Any) -> RedisCacheArgs:
    base = RedisCacheArgs(
        vpc_id="vpc-0123",
        subnet_ids=SUBNETS,
        allowed_security_group_ids=["sg-0cluster"],
        environment="staging",
        tags=TAGS,
    )
    return dataclasses.replace(base, **changes)


def run(program: Callable[[], object]) -> Evaluation:
    def wrapped() -> None:
        program()

    return evaluate(wrapped, mocks=PlatformMocks(), stack="test")


def test_cache_children_and_inputs() -> None:
    result = run(lambda: RedisCache("cache", cache_args(allowed_security_group_ids=["sg-0cluster", "sg-0nodes"])))

    component = result.named("cache")
    assert sorted((r.type, r.name) for r in result.children_of(component.urn)) == sorted(
        [
            ("random:index/randomPassword:RandomPassword", "cache-auth-token"),
            ("aws:kms/key:Key", "cache-key"),
            ("aws:ec2/securityGroup:SecurityGroup", "cache-sg"),
            ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "cache-from-0"),
            ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "cache-from-1"),
            ("aws:elasticache/subnetGroup:SubnetGroup", "cache-subnets"),
            ("aws:elasticache/parameterGroup:ParameterGroup", "cache-params"),
            ("aws:elasticache/replicationGroup:ReplicationGroup", "cache-rg"),
        ]
    )
    group = result.named("cache-rg")
    assert group.protect is False
    assert dict(group.inputs) == {
        "description": "inferplane response cache (staging)",
        "engine": "valkey",
        "engineVersion": ENGINE_VERSIONS["valkey"],
        "nodeType": "cache.r7g.large",
        "numCacheClusters": 2,
        "clusterMode": "disabled",
        "port": REDIS_PORT,
        "subnetGroupName": result.named("cache-subnets").outputs["name"],
        "parameterGroupName": result.named("cache-params").outputs["name"],
        "securityGroupIds": ["cache-sg-id"],
        "transitEncryptionEnabled": True,
        "transitEncryptionMode": "required",
        "authToken": SECRET_PLACEHOLDER,
        "atRestEncryptionEnabled": True,
        "kmsKeyId": result.named("cache-key").outputs["arn"],
        "automaticFailoverEnabled": True,
        "multiAzEnabled": True,
        "autoMinorVersionUpgrade": True,
        "snapshotRetentionLimit": 0,
        "tags": TAGS,
    }
    assert dict(result.named("cache-params").inputs) == {
        "family": "valkey8",
        "description": "ElastiCache cache: eviction policy volatile-lru",
        "parameters": [{"name": "maxmemory-policy", "value": "volatile-lru"}],
        "tags": TAGS,
    }
    assert dict(result.named("cache-auth-token").inputs) == {"length": AUTH_TOKEN_LENGTH, "special": False}
    key = dict(result.named("cache-key").inputs)
    assert json.loads(key.pop("policy")) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "KeyAdministration",
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                "Action": list(KEY_ADMIN_ACTIONS),
                "Resource": "*",
            },
            {
                "Sid": "ThroughElastiCache",
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                "Action": [
                    "kms:Encrypt",
                    "kms:Decrypt",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:CreateGrant",
                    "kms:ListGrants",
                    "kms:DescribeKey",
                ],
                "Resource": "*",
                "Condition": {
                    "StringEquals": {
                        "kms:CallerAccount": "123456789012",
                        "kms:ViaService": "elasticache.us-east-1.amazonaws.com",
                    }
                },
            },
        ],
    }
    assert key == {
        "description": "ElastiCache cache: encryption at rest",
        "enableKeyRotation": True,
        "deletionWindowInDays": 30,
        "tags": TAGS,
    }
    # No inline rules: no egress at all, and ingress only through the rules below.
    assert dict(result.named("cache-sg").inputs) == {
        "vpcId": "vpc-0123",
        "description": "ElastiCache cache: Redis port from the cluster's nodes only",
        "tags": TAGS,
    }
    for index, source in enumerate(["sg-0cluster", "sg-0nodes"]):
        assert dict(result.named(f"cache-from-{index}").inputs) == {
            "securityGroupId": "cache-sg-id",
            "referencedSecurityGroupId": source,
            "ipProtocol": "tcp",
            "fromPort": 6379,
            "toPort": 6379,
            "description": "Redis over TLS from the cluster's nodes",
            "tags": TAGS,
        }
    assert dict(result.named("cache-subnets").inputs) == {
        "subnetIds": SUBNETS,
        "description": "ElastiCache cache: private subnets",
        "tags": TAGS,
    }


def test_the_auth_token_is_secret_in_the_replication_group_and_the_components_output() -> None:
    def program() -> None:
        cache = RedisCache("cache", cache_args())
        pulumi.export("authToken", cache.auth_token)
        pulumi.export("endpoint", cache.primary_endpoint)

    result = run(program)
    assert result.outputs["authToken"] == SECRET_PLACEHOLDER
    assert result.named("cache-rg").inputs["authToken"] == SECRET_PLACEHOLDER
    group_id = result.named("cache-rg").outputs["replicationGroupId"]
    assert result.outputs["endpoint"] == f"master.{group_id}.abc123.use1.cache.amazonaws.com"


def test_prod_cache_is_protected_multi_az_and_backed_up() -> None:
    result = run(lambda: RedisCache("cache", cache_args(environment="prod", nodes=3)))

    group = result.named("cache-rg")
    assert group.protect is True
    assert result.named("cache-key").protect is True
    assert group.inputs["numCacheClusters"] == 3
    assert group.inputs["automaticFailoverEnabled"] is True
    assert group.inputs["multiAzEnabled"] is True
    assert group.inputs["snapshotRetentionLimit"] == 1


def test_a_single_node_outside_prod_has_no_failover() -> None:
    result = run(lambda: RedisCache("cache", cache_args(environment="dev", nodes=1, engine="redis")))

    group = result.named("cache-rg")
    assert group.inputs["numCacheClusters"] == 1
    assert group.inputs["automaticFailoverEnabled"] is False
    assert group.inputs["multiAzEnabled"] is False
    assert group.inputs["engine"] == "redis"
    assert group.inputs["engineVersion"] == ENGINE_VERSIONS["redis"]


def test_the_eviction_policy_lands_on_the_engines_parameter_group() -> None:
    result = run(lambda: RedisCache("cache", cache_args(engine="redis", eviction_policy="allkeys-lfu")))

    params = result.named("cache-params")
    assert params.inputs["family"] == "redis7"
    assert params.inputs["parameters"] == [{"name": "maxmemory-policy", "value": "allkeys-lfu"}]
    assert result.named("cache-rg").inputs["parameterGroupName"] == params.outputs["name"]


@pytest.mark.parametrize(
    ("name", "changes", "path", "reason"),
    [
        (
            "cache",
            {"environment": "prod", "nodes": 1},
            "nodes",
            "prod needs at least 2 nodes (multi-AZ automatic failover), got 1",
        ),
        ("cache", {"nodes": 7}, "nodes", "7: a replication group has 1 to 6 nodes"),
        ("cache", {"nodes": 0}, "nodes", "0: a replication group has 1 to 6 nodes"),
        (
            "cache",
            {"allowed_security_group_ids": []},
            "allowed_security_group_ids",
            "no security group is admitted: nothing could connect",
        ),
        (
            "cache",
            {"node_type": "r7g.large"},
            "node_type",
            "'r7g.large' is not a cache node type (cache.<family>.<size>)",
        ),
        (
            "cache",
            {"node_type": "cache.r6gd.xlarge"},
            "node_type",
            "cache.r6gd.xlarge needs data tiering, which a response cache does not use",
        ),
        ("cache", {"engine": "memcached"}, "engine", "'memcached' is not an ElastiCache engine (valkey, redis)"),
        (
            "Cache",
            {},
            "name",
            "'Cache': lowercase letters, digits and single '-', 2-29 characters",
        ),
        (
            "inferplane-staging-response-cache",
            {},
            "name",
            "'inferplane-staging-response-cache': lowercase letters, digits and single '-', 2-29 characters",
        ),
    ],
)
def test_cache_refuses_bad_inputs(name: str, changes: dict[str, Any], path: str, reason: str) -> None:
    with pytest.raises(pulumi.InputPropertiesError) as caught:
        run(lambda: RedisCache(name, cache_args(**changes)))
    assert caught.value.errors == [{"property_path": path, "reason": reason}]


def elasticache_model() -> dict[str, Any]:
    path = files("botocore") / "data" / "elasticache" / "2015-02-02" / "service-2.json.gz"
    model: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return model


def test_emitted_values_match_the_elasticache_service_model() -> None:
    model = elasticache_model()
    shapes = model["shapes"]
    members = shapes["CreateReplicationGroupMessage"]["members"]
    # Engine is a plain string in the model; its documentation names the two values.
    assert "<code>valkey</code> or <code>redis</code>" in members["Engine"]["documentation"]
    assert set(ENGINE_VERSIONS) == {"valkey", "redis"}
    assert "required" in shapes[members["TransitEncryptionMode"]["shape"]]["enum"]
    assert "disabled" in shapes[members["ClusterMode"]["shape"]]["enum"]
    # AuthToken: "at least 16 characters and no more than 128"; no specials are used.
    assert "at least 16 characters and no more than 128" in members["AuthToken"]["documentation"]
    assert 16 <= AUTH_TOKEN_LENGTH <= 128


def test_moto_knows_the_same_engines() -> None:
    from moto.elasticache.utils import VALID_ENGINE_TYPES

    assert set(ENGINE_VERSIONS) == set(VALID_ENGINE_TYPES)


@pytest.mark.parametrize(
    ("stack", "nodes", "engine", "node_type", "protect"),
    [
        ("dev", 1, "valkey", "cache.t4g.small", False),
        ("staging", 2, "valkey", "cache.r7g.large", False),
        ("prod", 3, "valkey", "cache.r7g.large", True),
    ],
)
def test_build_cache_follows_each_stacks_spec(
    stack: str, nodes: int, engine: str, node_type: str, protect: bool
) -> None:
    spec = load_stack(PROJECT_DIR, stack).platform

    def program() -> None:
        build_cache(spec, spec.tags, vpc_id="vpc-0123", subnet_ids=SUBNETS, allowed_security_group_ids=["sg-0cluster"])

    result = evaluate(program, mocks=PlatformMocks(spec.region), stack=stack)
    group = result.named(f"inferplane-{stack}-cache-rg")
    assert group.inputs["numCacheClusters"] == nodes
    assert group.inputs["engine"] == engine
    assert group.inputs["nodeType"] == node_type
    assert group.inputs["tags"] == spec.tags
    assert group.protect is protect


def test_a_disabled_cache_builds_nothing() -> None:
    spec = load_stack(PROJECT_DIR, "staging").platform
    disabled = spec.model_copy(update={"cache": spec.cache.model_copy(update={"enabled": False})})
    built: list[object] = []

    def program() -> None:
        built.append(
            build_cache(disabled, {}, vpc_id="vpc-0123", subnet_ids=SUBNETS, allowed_security_group_ids=["sg-1"])
        )

    result = evaluate(program, mocks=PlatformMocks(spec.region), stack="staging")
    assert built == [None]
    assert result.registrations == ()


def test_build_cache_composes_with_the_aws_foundation() -> None:
    """The call the program's ``build`` will make once the cache is wired: the foundation's VPC, private subnets and
    EKS cluster security group."""
    from inferplane.components.capacity.sizing import size_platform
    from inferplane.components.platform.aws_foundation import build_aws_foundation, platform_tags

    spec = load_stack(PROJECT_DIR, "staging").platform

    def program() -> None:
        tags = platform_tags(spec)
        aws_foundation = build_aws_foundation(spec, size_platform(spec), tags)
        build_cache(
            spec,
            tags,
            vpc_id=aws_foundation.network.vpc.id,
            subnet_ids=aws_foundation.network.private_subnet_ids,
            allowed_security_group_ids=[aws_foundation.cluster.cluster_security_group_id],
        )

    result = evaluate(program, mocks=PlatformMocks(spec.region), stack="staging")
    eks = result.of_type("aws:eks/cluster:Cluster")[0]
    private_subnets = sorted(str(r.id) for r in result.of_type("aws:ec2/subnet:Subnet") if "private" in r.name)
    assert len(private_subnets) == len(spec.zones)
    assert sorted(result.named("inferplane-staging-cache-subnets").inputs["subnetIds"]) == private_subnets
    assert result.named("inferplane-staging-cache-sg").inputs["vpcId"] == result.of_type("aws:ec2/vpc:Vpc")[0].id
    rule = result.named("inferplane-staging-cache-from-0").inputs
    assert rule["referencedSecurityGroupId"] == eks.outputs["vpcConfig"]["clusterSecurityGroupId"]
    assert rule["fromPort"] == rule["toPort"] == REDIS_PORT
