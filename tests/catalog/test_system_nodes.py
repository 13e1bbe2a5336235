"""System node types against upstream truth: EC2's DescribeInstanceTypes (moto's bundled AWS data) and the
amazon-eks-ami max-pods formula; the managed node group's cap; the add-on pods' sources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from inferplane.components.catalog.system_nodes import (
    CLUSTER_ADDON_PODS,
    DEFAULT_EKS_SYSTEM_INSTANCE_TYPE,
    DEFAULT_GKE_SYSTEM_MACHINE_TYPE,
    SYSTEM_NODE_TYPES,
    cluster_addon_pods,
    get_system_node_type,
    system_node_types,
)
from tests.aws_fixtures import described_instance_types

EC2_TYPES = sorted(name for name, row in SYSTEM_NODE_TYPES.items() if row.cloud == "aws")


@pytest.fixture(scope="module")
def described() -> Iterator[dict[str, Any]]:
    yield from described_instance_types(EC2_TYPES)


@pytest.mark.parametrize("name", EC2_TYPES)
def test_ec2_row_matches_describe_instance_types_and_the_eni_formula(name: str, described: dict[str, Any]) -> None:
    row = SYSTEM_NODE_TYPES[name]
    api = described[name]
    network = api["NetworkInfo"]
    assert row.vcpus == api["VCpuInfo"]["DefaultVCpus"]
    assert row.memory_mib == api["MemoryInfo"]["SizeInMiB"]
    # nodeadm's calculateStandardMaxPods: # of ENIs x (IPv4 addresses per ENI - 1) + 2.
    assert row.eni_max_pods == network["MaximumNetworkInterfaces"] * (network["Ipv4AddressesPerInterface"] - 1) + 2


def test_the_families_and_sizes_the_task_names_are_all_there() -> None:
    sizes = ("large", "xlarge", "2xlarge", "4xlarge")
    expected = sorted(f"{family}.{size}" for family in ("m5", "m6i", "m7i") for size in sizes)
    assert expected == EC2_TYPES
    gke = sorted(name for name, row in SYSTEM_NODE_TYPES.items() if row.cloud == "gcp")
    assert gke == sorted(f"{family}-standard-{n}" for family in ("e2", "n2") for n in (2, 4, 8, 16))
    assert (SYSTEM_NODE_TYPES["e2-standard-8"].vcpus, SYSTEM_NODE_TYPES["e2-standard-8"].memory_mib) == (8, 32768)


def test_managed_node_groups_cap_max_pods_below_30_vcpus_and_gke_admits_110() -> None:
    assert SYSTEM_NODE_TYPES["m7i.large"].max_pods == 29
    assert SYSTEM_NODE_TYPES["m7i.2xlarge"].max_pods == 58
    large = SYSTEM_NODE_TYPES["m7i.4xlarge"]
    assert (large.eni_max_pods, large.max_pods) == (234, 110)
    assert SYSTEM_NODE_TYPES["e2-standard-4"].max_pods == 110


def test_an_unknown_type_is_refused_with_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown system node type 'm7i\.8xlarge'; known: e2-standard-16, "):
        get_system_node_type("m7i.8xlarge")


def test_defaults_are_catalog_rows_of_their_cloud_and_lists_run_smallest_first() -> None:
    assert SYSTEM_NODE_TYPES[DEFAULT_EKS_SYSTEM_INSTANCE_TYPE].cloud == "aws"
    assert SYSTEM_NODE_TYPES[DEFAULT_GKE_SYSTEM_MACHINE_TYPE].cloud == "gcp"
    assert [t.name for t in system_node_types("gcp")] == [
        "e2-standard-2",
        "n2-standard-2",
        "e2-standard-4",
        "n2-standard-4",
        "e2-standard-8",
        "n2-standard-8",
        "e2-standard-16",
        "n2-standard-16",
    ]


def test_addon_pods_cite_their_source_and_the_eks_daemonsets_are_counted_per_node() -> None:
    assert all(pod.source for pod in CLUSTER_ADDON_PODS)
    daemonsets = {p.name: (p.cpu_millicores, p.memory_mib) for p in cluster_addon_pods("aws") if p.per_node}
    assert daemonsets == {"aws-node": (25, 0), "kube-proxy": (100, 0), "ebs-csi-node": (30, 104)}
    assert [p.name for p in cluster_addon_pods("gcp")] == [
        "keda-operator",
        "keda-metrics-apiserver",
        "keda-admission-webhooks",
    ]
