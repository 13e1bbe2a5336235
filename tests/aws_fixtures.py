"""Builders shared by the AWS component tests: a cluster and a pool sizing, with one field changed per test."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import pytest
from moto import mock_aws

from inferplane.components.aws.eks_cluster import EksCluster, EksClusterArgs
from inferplane.components.capacity.sizing import PoolSizing

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SUBNETS = {zone: f"subnet-{zone[-1]}" for zone in ZONES}
TAGS = {"team": "ml-platform", "environment": "dev"}


def cluster_args(**changes: Any) -> EksClusterArgs:
    """Valid dev cluster inputs with ``changes`` applied."""
    base = EksClusterArgs(
        cluster_name="inferplane-test",
        environment="dev",
        region=REGION,
        subnet_ids=list(SUBNETS.values()),
        kubernetes_version="1.34",
        endpoint_access="public_and_private",
        public_access_cidrs=("198.51.100.0/24",),
        tags=TAGS,
    )
    return dataclasses.replace(base, **changes)


def make_cluster(**changes: Any) -> EksCluster:
    """An ``EksCluster`` named ``eks`` (call inside a program)."""
    return EksCluster("eks", cluster_args(**changes))


def pool_sizing(name: str = "gpu", instance_type: str = "g6e.xlarge", **changes: Any) -> PoolSizing:
    """A pool sizing for ``instance_type`` with 0..2 nodes unless changed."""
    from inferplane.components.catalog import get_instance_type

    instance = get_instance_type(instance_type)
    values: dict[str, Any] = {
        "name": name,
        "instance_type": instance_type,
        "accelerator": instance.accelerator,
        "accelerators_per_node": instance.accelerators_per_node,
        "min_nodes": 0,
        "max_nodes": 2,
        "node_hourly_usd": None,
        "hourly_usd_min": None,
        "hourly_usd_max": None,
    }
    values.update(changes)
    return PoolSizing(**values)


def described_instance_types(names: Sequence[str]) -> Iterator[dict[str, Any]]:
    """What EC2's ``DescribeInstanceTypes`` answers for ``names`` (moto's copy of the API's data, no credentials),
    by instance type: the upstream truth the catalog rows are checked against. A generator, for module fixtures."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        with mock_aws():
            ec2 = boto3.client("ec2", region_name=REGION)
            pages = ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=list(names))
            yield {it["InstanceType"]: it for page in pages for it in page["InstanceTypes"]}
