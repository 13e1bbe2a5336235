"""GpuNodeGroup: launch template, AMI, taint, labels, capacity types, EFA, scaling and autoscaler tags; every
refused combination with the field it names."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import pulumi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pulumi.errors import InputPropertyErrorDetails

from inferplane.components.aws.gpu_node_group import (
    AL2023_LOCAL_NVME_USER_DATA,
    BOTTLEROCKET_LOCAL_NVME_USER_DATA,
    GpuNodeGroup,
    GpuNodeGroupArgs,
)
from inferplane.components.capacity.sizing import PoolSizing
from inferplane.components.catalog import INSTANCE_TYPES
from inferplane.tool.mockengine import Evaluation, PlatformMocks, evaluate
from tests.aws_fixtures import SUBNETS, TAGS, make_cluster, pool_sizing

CA = "k8s.io/cluster-autoscaler"
EXTRA_TAGS = {"cost-center": "ml-dev"}


def _args(**changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "pool_name": "gpu",
        "accelerator": "l40s-48gb",
        "instance_type": "g6e.xlarge",
        "subnet_ids_by_zone": SUBNETS,
        "gpus_per_replica": [1],
        "tags": EXTRA_TAGS,
    }
    values.update(changes)
    if "sizing" not in values:
        instance_type = values["instance_type"]
        known = INSTANCE_TYPES.get(instance_type)
        values["sizing"] = pool_sizing(values["pool_name"], instance_type if known else "g6e.xlarge")
    return values


def _evaluate(**changes: Any) -> Evaluation:
    def program() -> None:
        cluster = make_cluster()
        GpuNodeGroup("gpu", GpuNodeGroupArgs(cluster=cluster, **_args(**changes)))

    return evaluate(program, mocks=PlatformMocks("us-east-1"), stack="test")


def _user_data(result: Evaluation) -> str:
    return base64.b64decode(result.named("gpu-lt").inputs["userData"]).decode()


def test_default_al2023_on_demand_pool() -> None:
    result = _evaluate(sizing=pool_sizing("gpu", "g6e.xlarge", min_nodes=1, max_nodes=3))
    component = result.named("gpu")
    assert component.type == "inferplane:index:GpuNodeGroup"
    children = result.children_of(component.urn)
    ca_tags = {
        f"{CA}/enabled": "true",
        f"{CA}/inferplane-test": "owned",
        f"{CA}/node-template/resources/nvidia.com/gpu": "1",
        f"{CA}/node-template/label/inferplane.io/pool": "gpu",
        f"{CA}/node-template/label/inferplane.io/accelerator": "l40s-48gb",
        f"{CA}/node-template/label/inferplane.io/ami-family": "al2023",
        f"{CA}/node-template/taint/nvidia.com/gpu": "true:NoSchedule",
    }
    assert sorted((r.type, r.name) for r in children) == sorted(
        [
            ("aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt"),
            ("aws:eks/nodeGroup:NodeGroup", "gpu-nodes"),
            *[("aws:autoscaling/tag:Tag", f"gpu-asg-tag:{key}") for key in ca_tags],
        ]
    )
    template = result.named("gpu-lt").inputs
    assert template["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpTokens": "required",
        "httpPutResponseHopLimit": 1,
        "instanceMetadataTags": "disabled",
    }
    assert template["blockDeviceMappings"] == [
        {
            "deviceName": "/dev/xvda",
            "ebs": {
                "volumeSize": 200,
                "volumeType": "gp3",
                "iops": 6000,
                "throughput": 500,
                "encrypted": "true",
                "deleteOnTermination": "true",
            },
        }
    ]
    assert _user_data(result) == AL2023_LOCAL_NVME_USER_DATA
    assert "strategy: RAID0" in AL2023_LOCAL_NVME_USER_DATA
    for absent in ("networkInterfaces", "placement", "instanceType", "instanceMarketOptions"):
        assert absent not in template
    assert "capacityReservationSpecification" not in template
    assert template["tags"] == {**TAGS, **EXTRA_TAGS}
    assert [spec["resourceType"] for spec in template["tagSpecifications"]] == [
        "instance",
        "volume",
        "network-interface",
    ]

    nodes = result.named("gpu-nodes")
    assert nodes.inputs == {
        "clusterName": "inferplane-test",
        "nodeGroupNamePrefix": "inferplane-test-gpu-",
        "nodeRoleArn": "arn:aws:iam::123456789012:role/eks-node-role",
        "subnetIds": list(SUBNETS.values()),
        "version": "1.34",
        "amiType": "AL2023_x86_64_NVIDIA",
        "capacityType": "ON_DEMAND",
        "instanceTypes": ["g6e.xlarge"],
        "scalingConfig": {"minSize": 1, "desiredSize": 1, "maxSize": 3},
        "launchTemplate": {"id": "gpu-lt-id", "version": "1"},
        "labels": {
            "inferplane.io/pool": "gpu",
            "inferplane.io/accelerator": "l40s-48gb",
            "inferplane.io/ami-family": "al2023",
        },
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
        "updateConfig": {"maxUnavailable": 1},
        "nodeRepairConfig": {"enabled": True},
        "tags": {**TAGS, **EXTRA_TAGS, **ca_tags},
    }
    assert {"eks-vpc-cni", "eks-kube-proxy"} <= {urn.rsplit("::", 1)[-1] for urn in nodes.dependencies}
    for key, value in ca_tags.items():
        assert result.named(f"gpu-asg-tag:{key}").inputs == {
            "autoscalingGroupName": "eks-inferplane-test-gpu-gpu-nodes-mock",
            "tag": {"key": key, "value": value, "propagateAtLaunch": False},
        }


def test_spot_pool() -> None:
    result = _evaluate(capacity_type="spot", disk_gib=150)
    assert result.named("gpu-nodes").inputs["capacityType"] == "SPOT"
    assert result.named("gpu-lt").inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 150


def test_capacity_block_with_efa_on_bottlerocket() -> None:
    result = _evaluate(
        accelerator="h100-80gb",
        instance_type="p5.48xlarge",
        gpus_per_replica=[8, 4],
        capacity_type="capacity_block",
        capacity_reservation_id="cr-0123456789abcdef0",
        zone="us-east-1b",
        efa=True,
        disk_gib=500,
        ami_family="bottlerocket",
    )
    placement = result.named("gpu-placement")
    assert placement.type == "aws:ec2/placementGroup:PlacementGroup"
    assert placement.inputs == {"strategy": "cluster", "tags": {**TAGS, **EXTRA_TAGS}}
    template = result.named("gpu-lt").inputs
    assert template["instanceType"] == "p5.48xlarge"
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert template["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}
    }
    assert template["placement"] == {"groupName": "gpu-placement"}
    interfaces = template["networkInterfaces"]
    assert len(interfaces) == INSTANCE_TYPES["p5.48xlarge"].efa_max_interfaces == 32
    assert interfaces[0] == {
        "deviceIndex": 0,
        "networkCardIndex": 0,
        "interfaceType": "efa",
        "deleteOnTermination": "true",
        "securityGroups": ["sg-eks-clus0cluster"],
    }
    assert all(i["interfaceType"] == "efa-only" and i["deviceIndex"] == 1 for i in interfaces[1:])
    assert [i["networkCardIndex"] for i in interfaces] == list(range(32))
    assert [m["deviceName"] for m in template["blockDeviceMappings"]] == ["/dev/xvda", "/dev/xvdb"]
    assert template["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 4
    assert template["blockDeviceMappings"][1]["ebs"]["volumeSize"] == 500
    assert all(m["ebs"]["encrypted"] == "true" for m in template["blockDeviceMappings"])
    assert _user_data(result) == BOTTLEROCKET_LOCAL_NVME_USER_DATA

    nodes = result.named("gpu-nodes").inputs
    assert nodes["amiType"] == "BOTTLEROCKET_x86_64_NVIDIA"
    assert nodes["capacityType"] == "CAPACITY_BLOCK"
    assert "instanceTypes" not in nodes  # the capacity block's type lives in the launch template
    assert nodes["subnetIds"] == ["subnet-b"]  # the reservation's zone only
    assert nodes["scalingConfig"] == {"minSize": 0, "desiredSize": 0, "maxSize": 2}
    assert nodes["tags"][f"{CA}/node-template/resources/nvidia.com/gpu"] == "8"
    assert nodes["tags"][f"{CA}/node-template/resources/vpc.amazonaws.com/efa"] == "32"
    assert nodes["labels"]["inferplane.io/ami-family"] == "bottlerocket"


@pytest.mark.parametrize(
    "instance_type", ["p5.48xlarge", "p5en.48xlarge", "p4de.24xlarge", "g6e.48xlarge", "g5.8xlarge"]
)
def test_efa_interfaces_follow_the_catalog(instance_type: str) -> None:
    instance = INSTANCE_TYPES[instance_type]
    result = _evaluate(
        accelerator=instance.accelerator, instance_type=instance_type, zone="us-east-1a", efa=True, gpus_per_replica=[]
    )
    interfaces = result.named("gpu-lt").inputs["networkInterfaces"]
    assert len(interfaces) == instance.efa_max_interfaces
    assert result.named("gpu-nodes").inputs["subnetIds"] == ["subnet-a"]


def _refusal(**changes: Any) -> list[InputPropertyErrorDetails]:
    with pytest.raises(pulumi.InputPropertiesError) as raised:
        _evaluate(**changes)
    assert str(raised.value).startswith("The input properties for GPU node group 'gpu' are invalid. ")
    return list(raised.value.errors or [])


@pytest.mark.parametrize(
    ("changes", "path", "reason"),
    [
        ({"accelerator": "h100-80gb"}, "accelerator", "g6e.xlarge carries l40s-48gb, not h100-80gb"),
        ({"efa": True, "zone": "us-east-1a"}, "efa", "g6e.xlarge does not support EFA"),
        (
            {
                "capacity_type": "capacity_block",
                "capacity_reservation_id": "cr-0123456789abcdef0",
                "zone": "us-east-1a",
            },
            "capacity_type",
            "g6e.xlarge is not sold as a capacity block",
        ),
        ({"gpus_per_replica": [1, 2]}, "gpus_per_replica[1]", "2 GPUs per replica exceeds the 1 per g6e.xlarge node"),
        ({"gpus_per_replica": [0]}, "gpus_per_replica[0]", "must be at least 1, got 0"),
        (
            {
                "accelerator": "h100-80gb",
                "instance_type": "p5.48xlarge",
                "capacity_type": "capacity_block",
                "zone": "us-east-1a",
            },
            "capacity_reservation_id",
            "a capacity block needs its reservation id (cr-...)",
        ),
        (
            {
                "accelerator": "h100-80gb",
                "instance_type": "p5.48xlarge",
                "capacity_type": "capacity_block",
                "capacity_reservation_id": "cr-0123456789abcdef0",
            },
            "zone",
            "a capacity block needs the reservation's zone",
        ),
        (
            {"capacity_reservation_id": "cr-0123456789abcdef0"},
            "capacity_reservation_id",
            "only capacity_block groups take a reservation id",
        ),
        (
            {"accelerator": "h100-80gb", "instance_type": "p5.48xlarge", "efa": True},
            "zone",
            "EFA groups need one zone: a cluster placement group lives in a single zone",
        ),
        ({"zone": "us-east-1z"}, "zone", "'us-east-1z' has no subnet (us-east-1a, us-east-1b, us-east-1c)"),
        (
            {"accelerator": "tpu-v5e", "instance_type": "ct5lp-hightpu-4t", "gpus_per_replica": []},
            "instance_type",
            "ct5lp-hightpu-4t is a GKE machine type, not an EC2 instance type",
        ),
        ({"disk_gib": 20}, "disk_gib", "between 50 and 16384 GiB, got 20"),
        ({"sizing": pool_sizing("other", "g6e.xlarge")}, "sizing", "sizing is for pool 'other', not 'gpu'"),
        ({"sizing": pool_sizing("gpu", "g6.xlarge")}, "sizing", "sizing is for g6.xlarge, not g6e.xlarge"),
        (
            {"sizing": pool_sizing("gpu", "g6e.xlarge", max_nodes=0)},
            "sizing.max_nodes",
            "a node group holds at least one node at max scale",
        ),
        (
            {"sizing": pool_sizing("gpu", "g6e.xlarge", min_nodes=3, max_nodes=2)},
            "sizing.min_nodes",
            "3 exceeds max_nodes 2",
        ),
        ({"subnet_ids_by_zone": {}}, "subnet_ids_by_zone", "at least one subnet is needed"),
    ],
)
def test_refuses(changes: dict[str, Any], path: str, reason: str) -> None:
    assert _refusal(**changes) == [{"property_path": path, "reason": reason}]


def test_unknown_instance_type_is_named() -> None:
    errors = _refusal(instance_type="p9.huge")
    assert {"property_path": "instance_type", "reason": "unknown instance type 'p9.huge'"} in errors


def test_every_problem_is_reported_together() -> None:
    errors = _refusal(accelerator="h100-80gb", efa=True, capacity_type="capacity_block", gpus_per_replica=[4])
    assert [e["property_path"] for e in errors] == [
        "accelerator",
        "efa",
        "capacity_type",
        "gpus_per_replica[0]",
        "capacity_reservation_id",
        "zone",
        "zone",
    ]


EC2_TYPES = sorted(name for name, row in INSTANCE_TYPES.items() if row.cloud == "aws")


def _expected_paths(instance_type: str, capacity: str, efa: bool, gpus: Sequence[int]) -> set[str]:
    instance = INSTANCE_TYPES[instance_type]
    paths = set()
    if efa and not instance.supports_efa:
        paths.add("efa")
    if capacity == "capacity_block" and not instance.capacity_block:
        paths.add("capacity_type")
    paths |= {f"gpus_per_replica[{i}]" for i, g in enumerate(gpus) if g > instance.accelerators_per_node}
    return paths


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    instance_type=st.sampled_from(EC2_TYPES),
    capacity=st.sampled_from(["on_demand", "spot", "capacity_block"]),
    efa=st.booleans(),
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), max_size=3),
)
def test_builds_exactly_the_combinations_that_can_work(
    instance_type: str, capacity: str, efa: bool, gpus: list[int]
) -> None:
    instance = INSTANCE_TYPES[instance_type]
    changes: dict[str, Any] = {
        "accelerator": instance.accelerator,
        "instance_type": instance_type,
        "capacity_type": capacity,
        "efa": efa,
        "gpus_per_replica": gpus,
        "zone": "us-east-1c",
    }
    if capacity == "capacity_block":
        changes["capacity_reservation_id"] = "cr-0123456789abcdef0"
    expected = _expected_paths(instance_type, capacity, efa, gpus)
    if expected:
        assert {e["property_path"] for e in _refusal(**changes)} == expected
        return
    nodes = _evaluate(**changes).named("gpu-nodes").inputs
    assert nodes["tags"][f"{CA}/node-template/resources/nvidia.com/gpu"] == str(instance.accelerators_per_node)
    assert nodes["subnetIds"] == ["subnet-c"]
    assert nodes["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]


def test_pool_sizing_fixture_matches_the_model() -> None:
    assert isinstance(pool_sizing(), PoolSizing)


def test_no_user_data_without_instance_storage() -> None:
    without_nvme = INSTANCE_TYPES["g6e.xlarge"].model_copy(update={"local_nvme_gb": 0})
    args = GpuNodeGroupArgs(cluster=None, **_args())  # type: ignore[arg-type]  # only the instance matters here
    assert GpuNodeGroup._user_data(args, without_nvme) is None
    assert GpuNodeGroup._user_data(args, INSTANCE_TYPES["g6e.xlarge"]) is not None


def test_a_node_group_without_an_autoscaling_group_is_an_error() -> None:
    from inferplane.components.aws.gpu_node_group import _autoscaling_group_name

    with pytest.raises(ValueError, match="EKS reported no Auto Scaling group for the node group"):
        _autoscaling_group_name([])
