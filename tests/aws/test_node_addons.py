"""NodeAddons: pinned Helm releases through the cluster's provider, installed only where the pools need them."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from inferplane.components.aws.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from inferplane.components.aws.node_addons import (
    CLUSTER_AUTOSCALER_CHART,
    DCGM_EXPORTER_CHART,
    EFA_DEVICE_PLUGIN_CHART,
    NVIDIA_DEVICE_PLUGIN_CHART,
    NodeAddons,
    NodeAddonsArgs,
)
from inferplane.components.catalog.eks import CLUSTER_AUTOSCALER_IMAGE_TAGS
from inferplane.tool.mockengine import Evaluation, PlatformMocks, evaluate
from tests.aws_fixtures import SUBNETS, TAGS, make_cluster, pool_sizing

RELEASE = "kubernetes:helm.sh/v3:Release"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _pool(name: str, **changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "pool_name": name,
        "accelerator": "l40s-48gb",
        "instance_type": "g6e.xlarge",
        "sizing": pool_sizing(name, "g6e.xlarge"),
        "subnet_ids_by_zone": SUBNETS,
    }
    values.update(changes)
    return values


def _evaluate(*pools: dict[str, Any], kubernetes_version: str = "1.34") -> Evaluation:
    def program() -> None:
        cluster = make_cluster(kubernetes_version=kubernetes_version)
        groups = [GpuNodeGroup(f"gpu-{p['pool_name']}", GpuNodeGroupArgs(cluster=cluster, **p)) for p in pools]
        NodeAddons("addons", NodeAddonsArgs(cluster=cluster, region="us-east-1", node_groups=groups))

    return evaluate(program, mocks=PlatformMocks("us-east-1"), stack="test")


def _releases(result: Evaluation) -> dict[str, dict[str, Any]]:
    return {r.name: dict(r.inputs) for r in result.of_type(RELEASE)}


def test_al2023_pool_gets_autoscaler_device_plugin_and_dcgm() -> None:
    result = _evaluate(_pool("l40s"))
    component = result.named("addons")
    assert component.type == "inferplane:index:NodeAddons"
    assert sorted((r.type, r.name) for r in result.children_of(component.urn)) == sorted(
        [
            ("aws:iam/role:Role", "addons-cluster-autoscaler-role"),
            ("aws:iam/rolePolicy:RolePolicy", "addons-cluster-autoscaler-policy"),
            ("aws:eks/podIdentityAssociation:PodIdentityAssociation", "addons-cluster-autoscaler-pod-identity"),
            (RELEASE, "addons-cluster-autoscaler"),
            (RELEASE, "addons-nvidia-device-plugin"),
            (RELEASE, "addons-dcgm-exporter"),
        ]
    )
    provider = result.named("eks-k8s")
    for release in result.of_type(RELEASE):
        # The one provider built from the cluster's kubeconfig, never an ambient one.
        assert release.provider == f"{provider.urn}::{provider.id}"
        assert {"eks-system", "eks-coredns"} <= {urn.rsplit("::", 1)[-1] for urn in release.dependencies}
        assert release.inputs["namespace"] == "kube-system"
        assert release.inputs["atomic"] is True and release.inputs["cleanupOnFail"] is True

    releases = _releases(result)
    autoscaler = releases["addons-cluster-autoscaler"]
    assert (autoscaler["chart"], autoscaler["version"], autoscaler["repositoryOpts"]) == (
        "cluster-autoscaler",
        CLUSTER_AUTOSCALER_CHART.version,
        {"repo": "https://kubernetes.github.io/autoscaler"},
    )
    assert autoscaler["values"] == {
        "cloudProvider": "aws",
        "awsRegion": "us-east-1",
        "autoDiscovery": {"clusterName": "inferplane-test"},
        "image": {"tag": "v1.34.5"},
        "rbac": {"serviceAccount": {"create": True, "name": "cluster-autoscaler"}},
        "nodeSelector": {"inferplane.io/role": "system"},
        "extraArgs": {
            "expander": "least-waste",
            "balance-similar-node-groups": True,
            "skip-nodes-with-local-storage": False,
        },
    }
    association = result.named("addons-cluster-autoscaler-pod-identity").inputs
    assert association == {
        "clusterName": "inferplane-test",
        "namespace": "kube-system",
        "serviceAccount": "cluster-autoscaler",
        "roleArn": "arn:aws:iam::123456789012:role/addons-cluster-autoscaler-role",
        "tags": TAGS,
    }
    trust = json.loads(result.named("addons-cluster-autoscaler-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    policy = json.loads(result.named("addons-cluster-autoscaler-policy").inputs["policy"])
    write = next(s for s in policy["Statement"] if s["Sid"] == "ScaleOwnGroups")
    assert write["Action"] == ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]
    assert write["Condition"] == {
        "StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/inferplane-test": "owned"}
    }
    assert "eks:DescribeNodegroup" not in next(s for s in policy["Statement"] if s["Sid"] == "Discover")["Action"]
    assert next(s for s in policy["Statement"] if s["Sid"] == "DescribeOwnNodegroups") == {
        "Sid": "DescribeOwnNodegroups",
        "Effect": "Allow",
        "Action": "eks:DescribeNodegroup",
        "Resource": "arn:aws:eks:us-east-1:123456789012:nodegroup/inferplane-test/*/*",
    }

    plugin = releases["addons-nvidia-device-plugin"]
    assert (plugin["chart"], plugin["version"], plugin["repositoryOpts"]["repo"]) == (
        "nvidia-device-plugin",
        NVIDIA_DEVICE_PLUGIN_CHART.version,
        "https://nvidia.github.io/k8s-device-plugin",
    )
    assert plugin["values"]["tolerations"] == [GPU_TOLERATION]
    terms = plugin["values"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "inferplane.io/ami-family", "operator": "In", "values": ["al2023"]},
                    {"key": "inferplane.io/accelerator", "operator": "Exists"},
                ]
            }
        ]
    }

    dcgm = releases["addons-dcgm-exporter"]
    assert (dcgm["chart"], dcgm["version"], dcgm["repositoryOpts"]["repo"]) == (
        "dcgm-exporter",
        DCGM_EXPORTER_CHART.version,
        "https://nvidia.github.io/dcgm-exporter/helm-charts",
    )
    assert dcgm["values"]["tolerations"] == [GPU_TOLERATION]
    assert dcgm["values"]["serviceMonitor"] == {"enabled": False}
    assert dcgm["values"]["service"] == {"enable": True, "port": 9400}


def test_bottlerocket_only_pools_skip_the_device_plugin() -> None:
    releases = _releases(_evaluate(_pool("a", ami_family="bottlerocket"), _pool("b", ami_family="bottlerocket")))
    assert sorted(releases) == ["addons-cluster-autoscaler", "addons-dcgm-exporter"]


def test_mixed_pools_keep_the_device_plugin() -> None:
    releases = _releases(_evaluate(_pool("a", ami_family="bottlerocket"), _pool("b")))
    assert "addons-nvidia-device-plugin" in releases


def test_efa_pool_adds_the_efa_device_plugin() -> None:
    efa_pool = _pool(
        "h100",
        accelerator="h100-80gb",
        instance_type="p5.48xlarge",
        sizing=pool_sizing("h100", "p5.48xlarge"),
        efa=True,
        zone="us-east-1a",
    )
    releases = _releases(_evaluate(efa_pool))
    efa = releases["addons-efa-device-plugin"]
    assert (efa["chart"], efa["version"], efa["repositoryOpts"]["repo"]) == (
        "aws-efa-k8s-device-plugin",
        EFA_DEVICE_PLUGIN_CHART.version,
        "https://aws.github.io/eks-charts",
    )
    assert efa["values"] == {"tolerations": [GPU_TOLERATION]}
    assert "addons-efa-device-plugin" not in _releases(_evaluate(_pool("l40s")))


@pytest.mark.parametrize("version", sorted(set(CLUSTER_AUTOSCALER_IMAGE_TAGS) & {"1.33", "1.34", "1.35"}))
def test_autoscaler_minor_matches_the_cluster(version: str) -> None:
    autoscaler = _releases(_evaluate(_pool("l40s"), kubernetes_version=version))["addons-cluster-autoscaler"]
    assert autoscaler["values"]["image"]["tag"].startswith(f"v{version}.")


def test_refuses_a_cluster_version_without_an_autoscaler_pin() -> None:
    def program() -> None:
        cluster = make_cluster()
        cluster.kubernetes_version = "1.32"  # a cluster built elsewhere, at a minor with no pinned autoscaler
        NodeAddons("addons", NodeAddonsArgs(cluster=cluster, region="us-east-1", node_groups=[]))

    with pytest.raises(pulumi.InputPropertiesError) as raised:
        evaluate(program, mocks=PlatformMocks(), stack="test")
    assert raised.value.errors == [
        {
            "property_path": "cluster.kubernetes_version",
            "reason": "no cluster-autoscaler release pinned for 1.32 (1.33, 1.34, 1.35, 1.36)",
        }
    ]
