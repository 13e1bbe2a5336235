"""The shipped stacks evaluate through the real program with the AWS foundation, and every EKS enum value the
components emit is one the EKS API accepts (botocore's service model)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import get_args

import botocore.session  # botocore ships no type hints
import pytest

from inferplane.components.aws.gpu_node_group import AMI_TYPES, CAPACITY_TYPES
from inferplane.components.catalog import INSTANCE_TYPES
from inferplane.components.spec.platform_spec import LOG_RETENTION_VALUES, ControlPlaneLog
from inferplane.components.spec.scheduling import GPU_TAINT
from inferplane.tool.mockengine import Evaluation
from inferplane.tool.stackfile import load_stack, stack_names
from tests.stacks import evaluate_shipped_stack

PROJECT_DIR = Path(__file__).resolve().parents[2]
EKS = botocore.session.get_session().get_service_model("eks")


def _enum(shape: str) -> set[str]:
    return set(EKS.shape_for(shape).enum)


def _stack(name: str) -> Evaluation:
    return evaluate_shipped_stack(name)


@pytest.fixture(scope="module")
def stacks() -> dict[str, Evaluation]:
    return {name: _stack(name) for name in stack_names(PROJECT_DIR)}


def test_the_shipped_stacks_are_dev_staging_prod() -> None:
    assert stack_names(PROJECT_DIR) == ["dev", "prod", "staging"]


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_stack_builds_its_aws_pools(stacks: dict[str, Evaluation], name: str) -> None:
    result = stacks[name]
    spec = load_stack(PROJECT_DIR, name).platform
    aws_pools = [p for p in spec.pools if INSTANCE_TYPES[p.instance_type].cloud == "aws"]
    assert result.outputs["clusterName"] == f"inferplane-{name}"
    assert sorted(result.outputs["gpuNodeGroups"]) == sorted(p.name for p in aws_pools)
    for component in ("network", "eks", "node-addons"):
        assert result.named(component).parent.endswith(f"pulumi:pulumi:Stack::inferplane-{name}")
    sizing = {p["name"]: p for p in result.outputs["sizing"]["pools"]}
    for pool in aws_pools:
        group = result.named(f"gpu-{pool.name}")
        assert group.type == "inferplane:index:GpuNodeGroup"
        nodes = result.named(f"gpu-{pool.name}-nodes").inputs
        assert nodes["labels"]["inferplane.io/pool"] == pool.name
        assert nodes["scalingConfig"] == {
            "minSize": sizing[pool.name]["min_nodes"],
            "desiredSize": sizing[pool.name]["min_nodes"],
            "maxSize": sizing[pool.name]["max_nodes"],
        }
        assert nodes["capacityType"] == CAPACITY_TYPES[pool.capacity_type]
    # GKE pools belong to the GKE composition.
    gke_pools = [p.name for p in spec.pools if INSTANCE_TYPES[p.instance_type].cloud == "gcp"]
    assert all(f"gpu-{p}" not in {r.name for r in result.registrations} for p in gke_pools)

    tags = {**spec.tags, "environment": spec.environment, "managed-by": "pulumi", "app": "inferplane"}
    tagged = [r for r in result.registrations if isinstance(r.inputs.get("tags"), dict)]
    assert len(tagged) > 20
    assert all(tags.items() <= r.inputs["tags"].items() for r in tagged)


def test_environment_shapes(stacks: dict[str, Evaluation]) -> None:
    dev, staging, prod = stacks["dev"], stacks["staging"], stacks["prod"]
    assert len(prod.of_type("aws:ec2/natGateway:NatGateway")) == 3
    assert len(dev.of_type("aws:ec2/natGateway:NatGateway")) == 1
    assert len(staging.of_type("aws:ec2/natGateway:NatGateway")) == 1
    assert len(prod.of_type("aws:ec2/subnet:Subnet")) == 6
    assert prod.named("eks-cluster").inputs["vpcConfig"]["endpointPublicAccess"] is False
    assert dev.named("eks-cluster").inputs["vpcConfig"]["publicAccessCidrs"] == ["198.51.100.0/24"]
    assert prod.named("eks-logs").inputs["retentionInDays"] == 365
    assert staging.named("eks-logs").inputs["retentionInDays"] == 365
    assert dev.named("eks-logs").inputs["retentionInDays"] == 90
    assert dev.named("network-flow-logs").inputs["retentionInDays"] == 90
    assert prod.named("network-flow-logs-key").protect is True and dev.named("network-flow-logs-key").protect is False
    assert dev.named("gpu-l4-spot-nodes").inputs["capacityType"] == "SPOT"


def test_enum_values_are_the_eks_apis(stacks: dict[str, Evaluation]) -> None:
    assert set(AMI_TYPES.values()) <= _enum("AMITypes")
    assert set(CAPACITY_TYPES.values()) <= _enum("CapacityTypes")
    assert GPU_TAINT.eks_effect in _enum("TaintEffect")
    assert set(get_args(ControlPlaneLog)) <= _enum("LogType")
    emitted = [r for result in stacks.values() for r in result.of_type("aws:eks/nodeGroup:NodeGroup")]
    assert {r.inputs["amiType"] for r in emitted} <= _enum("AMITypes")
    assert {r.inputs["capacityType"] for r in emitted} <= _enum("CapacityTypes")
    assert {t["effect"] for r in emitted for t in r.inputs.get("taints", [])} <= _enum("TaintEffect")
    clusters = [r for result in stacks.values() for r in result.of_type("aws:eks/cluster:Cluster")]
    assert {log for r in clusters for log in r.inputs["enabledClusterLogTypes"]} <= _enum("LogType")
    assert {r.inputs["accessConfig"]["authenticationMode"] for r in clusters} <= _enum("AuthenticationMode")
    assert {r.inputs["upgradePolicy"]["supportType"] for r in clusters} <= _enum("SupportType")
    policies = [
        r
        for result in stacks.values()
        for r in result.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    ]
    assert {r.inputs["accessScope"]["type"] for r in policies} <= _enum("AccessScopeType")
    # VPC flow logs: the EC2 API's own enums, and one of the two aggregation intervals CreateFlowLogs documents.
    ec2 = botocore.session.get_session().get_service_model("ec2")
    flows = [r for result in stacks.values() for r in result.of_type("aws:ec2/flowLog:FlowLog")]
    assert len(flows) == 3
    assert {r.inputs["trafficType"] for r in flows} <= set(ec2.shape_for("TrafficType").enum)
    assert {r.inputs["logDestinationType"] for r in flows} <= set(ec2.shape_for("LogDestinationType").enum)
    interval_doc = ec2.operation_model("CreateFlowLogs").input_shape.members["MaxAggregationInterval"].documentation
    assert "60 seconds (1 minute) or 600 seconds" in interval_doc
    assert {r.inputs["maxAggregationInterval"] for r in flows} <= {60, 600}
    # Log retention: only values CloudWatch Logs accepts (spec.LOG_RETENTION_VALUES, checked in test_spec).
    groups = [r for result in stacks.values() for r in result.of_type("aws:cloudwatch/logGroup:LogGroup")]
    assert {r.inputs["retentionInDays"] for r in groups} <= LOG_RETENTION_VALUES
    assert all(r.inputs["kmsKeyId"] for r in groups)


def _taggable(type_token: str) -> bool:
    """Whether the pulumi_aws resource class of a type token takes ``tags``."""
    module, kind = type_token.split(":")[1].split("/", maxsplit=1)[0], type_token.rsplit(":", 1)[1]
    cls = getattr(importlib.import_module(f"pulumi_aws.{module}"), kind)
    return "tags" in inspect.signature(cls._internal_init).parameters


def test_every_taggable_aws_child_carries_the_platform_tags(stacks: dict[str, Evaluation]) -> None:
    for name, result in stacks.items():
        spec = load_stack(PROJECT_DIR, name).platform
        tags = {**spec.tags, "environment": spec.environment, "managed-by": "pulumi", "app": "inferplane"}
        aws_types = {r.type for r in result.registrations if r.type.startswith("aws:")}
        taggable = {t for t in aws_types if _taggable(t)}
        assert {"aws:ec2/vpc:Vpc", "aws:eks/nodeGroup:NodeGroup", "aws:eks/addon:Addon"} <= taggable
        assert "aws:ec2/route:Route" not in taggable
        for registration in result.registrations:
            if registration.type in taggable:
                assert tags.items() <= registration.inputs["tags"].items(), registration.name
