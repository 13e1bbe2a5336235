"""GkeCluster and TpuNodePool under the mock engine: exact children and inputs, every refusal, the slice math."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import sys
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferplane.components.catalog import INSTANCE_TYPES
from inferplane.components.catalog.instances import slice_shape
from inferplane.components.gcp.gke_cluster import (
    CLOUD_PLATFORM_SCOPE,
    GKE_AUTH_PLUGIN,
    KEY_ROTATION_PERIOD,
    GkeCluster,
    GkeClusterArgs,
)
from inferplane.components.gcp.tpu_node_pool import COMPACT_PLACEMENT, TpuNodePool, TpuNodePoolArgs, validate
from inferplane.components.spec.scheduling import TPU_TAINT
from inferplane.tool.mockengine import MOCK_GCP_PROJECT_NUMBER, Evaluation, PlatformMocks, Registration, evaluate

PROJECT = "inferplane-test"
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMtbW9jay0tLS0tCg=="
LABELS = {"team": "ml-platform", "cost-center": "ml-staging"}


def cluster_args(**changes: Any) -> GkeClusterArgs:
    base = GkeClusterArgs(
        project=PROJECT,
        region="us-west4",
        zone="us-west4-a",
        environment="staging",
        private_endpoint=False,
        master_authorized_cidrs=("198.51.100.0/24",),
        labels=LABELS,
    )
    return dataclasses.replace(base, **changes)


def run(program: Callable[[], object]) -> Evaluation:
    def wrapped() -> None:
        program()

    return evaluate(wrapped, mocks=PlatformMocks(), stack="test")


def children(result: Evaluation, component: str) -> list[tuple[str, str]]:
    """Direct children as (type, name), sorted: the engine sees registrations in completion order."""
    return sorted((r.type, r.name) for r in result.children_of(result.named(component).urn))


def refusal(program: Callable[[], object]) -> list[pulumi.InputPropertyErrorDetails]:
    with pytest.raises(pulumi.InputPropertiesError) as caught:
        run(program)
    return caught.value.errors or []


# --- GkeCluster -------------------------------------------------------------------------------------------------


def test_cluster_children_and_inputs_outside_prod() -> None:
    result = run(lambda: GkeCluster("gke", cluster_args()))

    assert children(result, "gke") == sorted(
        [
            ("gcp:compute/network:Network", "gke-network"),
            ("gcp:compute/subnetwork:Subnetwork", "gke-subnet"),
            ("gcp:compute/router:Router", "gke-router"),
            ("gcp:compute/routerNat:RouterNat", "gke-nat"),
            ("gcp:compute/firewall:Firewall", "gke-deny-all-ingress"),
            ("gcp:compute/firewall:Firewall", "gke-allow-control-plane"),
            ("gcp:compute/firewall:Firewall", "gke-allow-nodes"),
            ("gcp:compute/firewall:Firewall", "gke-allow-pods"),
            ("gcp:compute/firewall:Firewall", "gke-allow-health-checks"),
            ("gcp:kms/keyRing:KeyRing", "gke-keyring"),
            ("gcp:kms/cryptoKey:CryptoKey", "gke-secrets"),
            ("gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember", "gke-secrets-gke"),
            ("gcp:serviceaccount/account:Account", "gke-node-sa"),
            ("gcp:projects/iAMMember:IAMMember", "gke-node-sa-container-defaultnodeserviceaccount"),
            ("gcp:projects/iAMMember:IAMMember", "gke-node-sa-artifactregistry-reader"),
            ("gcp:container/cluster:Cluster", "gke-cluster"),
            ("gcp:container/nodePool:NodePool", "gke-system"),
            ("pulumi:providers:kubernetes", "gke-k8s"),
        ]
    )
    cluster = result.named("gke-cluster")
    assert cluster.protect is False
    assert result.named("gke-secrets").protect is False
    assert dict(cluster.inputs) == {
        "project": PROJECT,
        "location": "us-west4-a",
        "network": "gke-network-id",
        "subnetwork": "gke-subnet-id",
        "networkingMode": "VPC_NATIVE",
        "ipAllocationPolicy": {"clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services"},
        "removeDefaultNodePool": True,
        "initialNodeCount": 1,
        "privateClusterConfig": {"enablePrivateNodes": True, "enablePrivateEndpoint": False},
        "masterAuthorizedNetworksConfig": {
            "cidrBlocks": [{"cidrBlock": "198.51.100.0/24", "displayName": "allowlist-0"}],
            "gcpPublicCidrsAccessEnabled": False,
        },
        "workloadIdentityConfig": {"workloadPool": f"{PROJECT}.svc.id.goog"},
        "releaseChannel": {"channel": "REGULAR"},
        "enableShieldedNodes": True,
        "datapathProvider": "ADVANCED_DATAPATH",
        "enableIntranodeVisibility": True,
        "binaryAuthorization": {"evaluationMode": "PROJECT_SINGLETON_POLICY_ENFORCE"},
        "masterAuth": {"clientCertificateConfig": {"issueClientCertificate": False}},
        "databaseEncryption": {"state": "ENCRYPTED", "keyName": "gke-secrets-id"},
        "deletionProtection": False,
        "resourceLabels": LABELS,
    }
    grant = result.named("gke-secrets-gke")
    assert set(cluster.dependencies) >= {
        grant.urn,
        result.named("gke-node-sa-container-defaultnodeserviceaccount").urn,
        result.named("gke-node-sa-artifactregistry-reader").urn,
    }
    assert dict(grant.inputs) == {
        "cryptoKeyId": "gke-secrets-id",
        "role": "roles/cloudkms.cryptoKeyEncrypterDecrypter",
        "member": f"serviceAccount:service-{MOCK_GCP_PROJECT_NUMBER}@container-engine-robot.iam.gserviceaccount.com",
    }
    assert dict(result.named("gke-secrets").inputs) == {
        "keyRing": "gke-keyring-id",
        "purpose": "ENCRYPT_DECRYPT",
        "rotationPeriod": KEY_ROTATION_PERIOD,
        "labels": LABELS,
    }
    assert result.named("gke-keyring").inputs["location"] == "us-west4"
    assert dict(result.named("gke-subnet").inputs) == {
        "project": PROJECT,
        "region": "us-west4",
        "network": "gke-network-id",
        "ipCidrRange": "10.10.0.0/20",
        "privateIpGoogleAccess": True,
        "logConfig": {"aggregationInterval": "INTERVAL_5_SEC", "flowSampling": 1.0, "metadata": "INCLUDE_ALL_METADATA"},
        "secondaryIpRanges": [
            {"rangeName": "pods", "ipCidrRange": "10.16.0.0/14"},
            {"rangeName": "services", "ipCidrRange": "10.20.0.0/20"},
        ],
    }
    assert result.named("gke-network").inputs["autoCreateSubnetworks"] is False
    nat = result.named("gke-nat").inputs
    assert nat["natIpAllocateOption"] == "AUTO_ONLY"
    assert nat["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert result.named("gke-node-sa").inputs["accountId"] == "gke-nodes"
    node_member = "serviceAccount:gke-nodes@inferplane-test.iam.gserviceaccount.com"
    assert result.named("gke-node-sa-artifactregistry-reader").inputs == {
        "project": PROJECT,
        "role": "roles/artifactregistry.reader",
        "member": node_member,
    }

    system = result.named("gke-system").inputs
    assert system["autoscaling"] == {"totalMinNodeCount": 1, "totalMaxNodeCount": 3}
    assert system["cluster"] == result.named("gke-cluster").outputs["name"]
    assert system["nodeConfig"] == {
        "machineType": "e2-standard-8",
        "serviceAccount": "gke-nodes@inferplane-test.iam.gserviceaccount.com",
        "oauthScopes": [CLOUD_PLATFORM_SCOPE],
        "workloadMetadataConfig": {"mode": "GKE_METADATA"},
        "shieldedInstanceConfig": {"enableSecureBoot": True, "enableIntegrityMonitoring": True},
        "metadata": {"disable-legacy-endpoints": "true"},
        "resourceLabels": LABELS,
        "labels": {},
        "taints": [],
        "spot": False,
    }


FIREWALL = "gcp:compute/firewall:Firewall"
LOGGED = {"metadata": "INCLUDE_ALL_METADATA"}


def _allow_rule(what: str, sources: list[str], allows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "project": PROJECT,
        "network": "gke-network-id",
        "description": f"Allow {what} (GKE's own rule, restated and logged)",
        "direction": "INGRESS",
        "priority": 1000,
        "sourceRanges": sources,
        "allows": allows,
        "logConfig": LOGGED,
    }


def test_the_network_denies_all_ingress_last_and_allows_what_gke_needs_logged() -> None:
    """GKE's own rules (cloud.google.com/kubernetes-engine/docs/concepts/firewall-rules), restated at their priority
    1000 over a deny-all at the lowest priority, 65535; every rule logs."""
    result = run(lambda: GkeCluster("gke", cluster_args(node_cidr="10.30.0.0/20", pod_cidr="10.40.0.0/14")))
    rules = {r.name: dict(r.inputs) for r in result.of_type(FIREWALL)}
    every_port = ["1-65535"]
    assert rules == {
        "gke-deny-all-ingress": {
            "project": PROJECT,
            "network": "gke-network-id",
            "description": "Deny all ingress nothing else allows (lowest priority), logged",
            "direction": "INGRESS",
            "priority": 65535,
            "sourceRanges": ["0.0.0.0/0"],
            "denies": [{"protocol": "all"}],
            "logConfig": LOGGED,
        },
        "gke-allow-control-plane": _allow_rule(
            "the control plane to metrics-server and the kubelet",
            ["10.30.0.0/20"],
            [{"protocol": "tcp", "ports": ["443", "10250"]}],
        ),
        "gke-allow-nodes": _allow_rule(
            "node to node and pod",
            ["10.30.0.0/20"],
            [{"protocol": "tcp", "ports": every_port}, {"protocol": "udp", "ports": every_port}, {"protocol": "icmp"}],
        ),
        "gke-allow-pods": _allow_rule(
            "pod to pod",
            ["10.40.0.0/14"],
            [{"protocol": p} for p in ("tcp", "udp", "sctp", "icmp", "esp", "ah")],
        ),
        "gke-allow-health-checks": _allow_rule(
            "load-balancer health checks to the node ports",
            ["35.191.0.0/16", "130.211.0.0/22"],
            [{"protocol": "tcp", "ports": ["30000-32767"]}],
        ),
    }
    network = result.named("gke-network")
    assert all(network.urn in r.dependencies and r.parent == result.named("gke").urn for r in result.of_type(FIREWALL))


def test_without_a_load_balancer_no_health_check_range_is_let_in() -> None:
    result = run(lambda: GkeCluster("gke", cluster_args(load_balancer_health_checks=False)))
    assert sorted(r.name for r in result.of_type(FIREWALL)) == [
        "gke-allow-control-plane",
        "gke-allow-nodes",
        "gke-allow-pods",
        "gke-deny-all-ingress",
    ]
    assert not [r.name for r in result.of_type(FIREWALL) if "35.191.0.0/16" in r.inputs["sourceRanges"]]


def kubeconfig_of(result: Evaluation, provider: str) -> dict[str, Any]:
    raw = result.named(provider).inputs["kubeconfig"]
    assert isinstance(raw, str)
    config: dict[str, Any] = json.loads(raw)
    return config


def test_kubernetes_provider_uses_the_clusters_endpoint_and_the_gke_auth_plugin() -> None:
    result = run(lambda: GkeCluster("gke", cluster_args()))

    config = kubeconfig_of(result, "gke-k8s")
    physical = result.named("gke-cluster").outputs["name"]
    context = f"gke_{PROJECT}_us-west4-a_{physical}"
    assert config["current-context"] == context
    assert config["clusters"] == [
        {"name": context, "cluster": {"server": "https://34.118.227.10", "certificate-authority-data": CA}}
    ]
    user = config["users"][0]["user"]
    assert "token" not in user and "client-key-data" not in user
    assert user["exec"]["command"] == GKE_AUTH_PLUGIN
    assert user["exec"]["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert user["exec"]["provideClusterInfo"] is True
    assert result.named("gke-system").urn in result.named("gke-k8s").dependencies


def test_prod_cluster_is_regional_private_stable_and_protected() -> None:
    result = run(
        lambda: GkeCluster("gke", cluster_args(environment="prod", private_endpoint=True, master_authorized_cidrs=()))
    )

    cluster = result.named("gke-cluster")
    assert cluster.protect is True
    assert result.named("gke-secrets").protect is True
    assert cluster.inputs["location"] == "us-west4"
    assert cluster.inputs["privateClusterConfig"] == {"enablePrivateNodes": True, "enablePrivateEndpoint": True}
    assert cluster.inputs["masterAuthorizedNetworksConfig"] == {"cidrBlocks": [], "gcpPublicCidrsAccessEnabled": False}
    assert cluster.inputs["releaseChannel"] == {"channel": "STABLE"}
    assert cluster.inputs["deletionProtection"] is True
    assert result.named("gke-system").inputs["autoscaling"] == {"totalMinNodeCount": 3, "totalMaxNodeCount": 6}
    assert kubeconfig_of(result, "gke-k8s")["clusters"][0]["cluster"]["server"] == "https://10.10.0.2"


@pytest.mark.parametrize(
    ("changes", "path", "reason"),
    [
        (
            {"environment": "prod"},
            "private_endpoint",
            "prod clusters serve the control plane on a private endpoint only",
        ),
        (
            {"master_authorized_cidrs": ()},
            "master_authorized_cidrs",
            "a public endpoint needs an explicit CIDR allowlist",
        ),
        (
            {"master_authorized_cidrs": ("0.0.0.0/0",)},
            "master_authorized_cidrs[0]",
            "0.0.0.0/0 opens the control plane to everyone",
        ),
        (
            {"master_authorized_cidrs": ("198.51.100.7/24",)},
            "master_authorized_cidrs[0]",
            "'198.51.100.7/24' is not a CIDR block: 198.51.100.7/24 has host bits set",
        ),
        ({"zone": "us-east1-b"}, "zone", "'us-east1-b' is not a zone of region us-west4"),
        ({"pod_cidr": "10.10.8.0/21"}, "pod_cidr", "10.10.8.0/21 overlaps node_cidr 10.10.0.0/20"),
        (
            {"labels": {"Team": "ml"}},
            "labels",
            "label key 'Team' must start with a lowercase letter and use only a-z, 0-9, _ and - (at most 63)",
        ),
        (
            {"labels": {"team": "ML Platform"}},
            "labels",
            "label value 'ML Platform' (key 'team') may use only a-z, 0-9, _ and - (at most 63)",
        ),
    ],
)
def test_cluster_refuses_bad_inputs(changes: dict[str, Any], path: str, reason: str) -> None:
    errors = refusal(lambda: GkeCluster("gke", cluster_args(**changes)))
    assert errors == [{"property_path": path, "reason": reason}]


def test_cluster_refuses_a_name_too_long_for_its_node_account() -> None:
    errors = refusal(lambda: GkeCluster("inferplane-staging-cluster", cluster_args()))
    assert errors == [
        {
            "property_path": "name",
            "reason": "'inferplane-staging-cluster': lowercase letters, digits and '-', 2-24 characters "
            "(node account id)",
        }
    ]


def test_cluster_collects_every_problem_at_once_and_names_them_in_the_message() -> None:
    with pytest.raises(pulumi.InputPropertiesError) as caught:
        run(lambda: GkeCluster("gke", cluster_args(environment="prod", zone="europe-west4-a")))
    assert [e["property_path"] for e in caught.value.errors or []] == ["zone", "private_endpoint"]
    assert caught.value.message == (
        "The input properties for GKE cluster 'gke' are invalid. zone: 'europe-west4-a' is not a zone of region "
        "us-west4; private_endpoint: prod clusters serve the control plane on a private endpoint only"
    )


# --- TpuNodePool ------------------------------------------------------------------------------------------------


def tpu_program(**changes: Any) -> Callable[[], object]:
    def program() -> None:
        cluster = GkeCluster("gke", cluster_args())
        base = {
            "cluster": cluster,
            "pool_name": "tpu-v5e",
            "machine_type": "ct5lp-hightpu-4t",
            "tpu_topology": "2x2",
            "min_nodes": 1,
            "max_nodes": 3,
            "labels": LABELS,
        }
        TpuNodePool("tpu", TpuNodePoolArgs(**{**base, **changes}))

    return program


def node_pools(result: Evaluation) -> list[Registration]:
    return list(result.children_of(result.named("tpu").urn))


def test_single_host_pool_inputs() -> None:
    result = run(tpu_program())

    pools = node_pools(result)
    assert [(p.type, p.name) for p in pools] == [("gcp:container/nodePool:NodePool", "tpu-nodes")]
    inputs = dict(pools[0].inputs)
    assert "placementPolicy" not in inputs
    assert inputs == {
        "project": PROJECT,
        "location": "us-west4-a",
        "cluster": result.named("gke-cluster").outputs["name"],
        "nodeLocations": ["us-west4-a"],
        "initialNodeCount": 1,
        "autoscaling": {"totalMinNodeCount": 1, "totalMaxNodeCount": 3},
        "management": {"autoRepair": True, "autoUpgrade": True},
        "nodeConfig": {
            "machineType": "ct5lp-hightpu-4t",
            "serviceAccount": "gke-nodes@inferplane-test.iam.gserviceaccount.com",
            "oauthScopes": [CLOUD_PLATFORM_SCOPE],
            "workloadMetadataConfig": {"mode": "GKE_METADATA"},
            "shieldedInstanceConfig": {"enableSecureBoot": True, "enableIntegrityMonitoring": True},
            "metadata": {"disable-legacy-endpoints": "true"},
            "resourceLabels": LABELS,
            "labels": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2",
                "inferplane.io/pool": "tpu-v5e",
                "inferplane.io/accelerator": "tpu-v5e",
            },
            "taints": [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}],
            "spot": False,
            "diskSizeGb": 200,
        },
    }
    assert pools[0].parent == result.named("tpu").urn


@pytest.mark.parametrize(("machine_type", "topology"), [("ct5lp-hightpu-1t", "1x1"), ("ct5lp-hightpu-8t", "2x4")])
def test_other_single_host_shapes_take_no_placement_policy(machine_type: str, topology: str) -> None:
    result = run(tpu_program(machine_type=machine_type, tpu_topology=topology, capacity="spot"))

    (pool,) = node_pools(result)
    assert pool.name == "tpu-nodes"
    assert "placementPolicy" not in pool.inputs
    assert pool.inputs["nodeConfig"]["machineType"] == machine_type
    assert pool.inputs["nodeConfig"]["labels"]["cloud.google.com/gke-tpu-topology"] == topology
    assert pool.inputs["nodeConfig"]["spot"] is True


def test_multi_host_pool_is_one_compact_pool_per_slice() -> None:
    # 4x4 = 16 chips on 4-chip hosts: 4 hosts per slice. min 4 keeps one slice; max 12 allows three.
    result = run(tpu_program(tpu_topology="4x4", min_nodes=4, max_nodes=12))

    pools = sorted(node_pools(result), key=lambda p: p.name)
    assert [p.name for p in pools] == ["tpu-slice-0", "tpu-slice-1", "tpu-slice-2"]
    assert [p.inputs["initialNodeCount"] for p in pools] == [4, 0, 0]
    assert [p.inputs["autoscaling"] for p in pools] == [
        {"totalMinNodeCount": 4, "totalMaxNodeCount": 4},
        {"totalMinNodeCount": 0, "totalMaxNodeCount": 4},
        {"totalMinNodeCount": 0, "totalMaxNodeCount": 4},
    ]
    for pool in pools:
        assert pool.inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
        assert pool.inputs["nodeLocations"] == ["us-west4-a"]
        assert pool.inputs["nodeConfig"]["labels"]["cloud.google.com/gke-tpu-topology"] == "4x4"
        assert pool.inputs["nodeConfig"]["taints"] == [
            {"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}
        ]


@pytest.mark.parametrize(
    ("changes", "path", "reason"),
    [
        (
            {"tpu_topology": "2x4"},
            "tpu_topology",
            "2x4 is not a ct5lp-hightpu-4t topology (2x2, 4x4, 4x8, 8x8, 8x16, 16x16)",
        ),
        (
            {"machine_type": "ct5lp-hightpu-8t", "tpu_topology": "2x2"},
            "tpu_topology",
            "2x2 is not a ct5lp-hightpu-8t topology (2x4)",
        ),
        (
            {"machine_type": "ct5lp-hightpu-1t", "tpu_topology": "4x4"},
            "tpu_topology",
            "4x4 is not a ct5lp-hightpu-1t topology (1x1)",
        ),
        (
            {"machine_type": "g6e.xlarge"},
            "machine_type",
            "'g6e.xlarge' is not a GKE TPU machine type (ct5lp-hightpu-1t, ct5lp-hightpu-4t, ct5lp-hightpu-8t)",
        ),
        (
            {"tpu_topology": "4x4", "min_nodes": 2, "max_nodes": 8},
            "min_nodes",
            "2 nodes is not a whole number of 4x4 slices (4 ct5lp-hightpu-4t hosts each)",
        ),
        (
            {"tpu_topology": "8x8", "min_nodes": 0, "max_nodes": 24},
            "max_nodes",
            "24 nodes is not a whole number of 8x8 slices (16 ct5lp-hightpu-4t hosts each)",
        ),
        ({"min_nodes": 4, "max_nodes": 3}, "min_nodes", "4 exceeds max_nodes 3"),
        ({"min_nodes": 0, "max_nodes": 0}, "max_nodes", "0: a pool that can never have a node serves nothing"),
        ({"disk_size_gb": 20}, "disk_size_gb", "20 GB cannot hold a serving image and a model"),
        (
            {"labels": {"cost-center": "ML"}},
            "labels",
            "label value 'ML' (key 'cost-center') may use only a-z, 0-9, _ and - (at most 63)",
        ),
    ],
)
def test_tpu_pool_refuses_bad_inputs(changes: dict[str, Any], path: str, reason: str) -> None:
    errors = refusal(tpu_program(**changes))
    assert errors == [{"property_path": path, "reason": reason}]


@pytest.mark.parametrize(
    ("machine_type", "topology", "hosts"),
    [
        ("ct5lp-hightpu-1t", "1x1", 1),
        ("ct5lp-hightpu-4t", "2x2", 1),
        ("ct5lp-hightpu-8t", "2x4", 1),
        ("ct5lp-hightpu-4t", "4x4", 4),
        ("ct5lp-hightpu-4t", "4x8", 8),
        ("ct5lp-hightpu-4t", "8x8", 16),
        ("ct5lp-hightpu-4t", "8x16", 32),
        ("ct5lp-hightpu-4t", "16x16", 64),
    ],
)
def test_hosts_per_slice_match_googles_table(machine_type: str, topology: str, hosts: int) -> None:
    # GKE's mapping (facts.md section 4): v5litepod-16 = 4x4 on 4 ct5lp-hightpu-4t VMs ... -256 = 16x16 on 64 VMs.
    # (The TPU docs' "hosts" column counts 8-chip physical hosts; GKE nodes are 4-chip VMs.)
    shape = slice_shape(machine_type, topology)
    assert shape.hosts == hosts
    assert shape.multi_host is (hosts > 1)
    assert shape.hosts * shape.chips_per_host == shape.chips


TPU_SHAPES = [(m, t) for m, i in INSTANCE_TYPES.items() if i.cloud == "gcp" for t in i.tpu_topologies]


@given(
    shape=st.sampled_from(TPU_SHAPES),
    min_nodes=st.integers(min_value=0, max_value=200),
    extra=st.integers(min_value=0, max_value=200),
)
def test_node_counts_are_accepted_exactly_when_they_are_whole_slices(
    shape: tuple[str, str], min_nodes: int, extra: int
) -> None:
    machine_type, topology = shape
    max_nodes = min_nodes + extra
    args = TpuNodePoolArgs(
        cluster=None,  # type: ignore[arg-type]  # validate() never touches the cluster
        pool_name="p",
        machine_type=machine_type,
        tpu_topology=topology,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
    )
    hosts = slice_shape(machine_type, topology).hosts
    whole = min_nodes % hosts == 0 and max_nodes % hosts == 0
    assert (validate(args) == []) is (whole and max_nodes >= 1)


# --- enum values checked against the installed SDK ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args_class", "value"),
    [
        (gcp.container.NodePoolPlacementPolicyArgs, COMPACT_PLACEMENT),
        # NodePool's node_config is "the same schema as container.Cluster's"; the values are documented there.
        (gcp.container.ClusterNodeConfigTaintArgs, TPU_TAINT.eks_effect),
        (gcp.container.ClusterNodeConfigWorkloadMetadataConfigArgs, "GKE_METADATA"),
        (gcp.container.ClusterReleaseChannelArgs, "REGULAR"),
        (gcp.container.ClusterReleaseChannelArgs, "STABLE"),
        (gcp.container.ClusterDatabaseEncryptionArgs, "ENCRYPTED"),
        (gcp.compute.FirewallArgs, "INGRESS"),
        (gcp.compute.FirewallLogConfigArgs, "INCLUDE_ALL_METADATA"),
        (gcp.compute.FirewallAllowArgs, "sctp"),
        (gcp.compute.FirewallDenyArgs, "all"),
    ],
)
def test_emitted_enum_values_are_documented_by_the_sdk(args_class: type, value: str) -> None:
    # pulumi_gcp has no enum types for these fields; its docstrings list the accepted values.
    assert value in _class_source(args_class)


def _class_source(cls: type) -> str:
    """What ``inspect.getsource(cls)`` returns (decorators through the class body), with the module parsed once:
    inspect parses the whole module per call, and pulumi_gcp's ``_inputs`` modules run to tens of thousands of lines."""
    return _top_level_class_sources(cls.__module__)[cls.__qualname__]


@functools.cache
def _top_level_class_sources(module: str) -> dict[str, str]:
    source = inspect.getsource(sys.modules[module])
    lines = source.splitlines(keepends=True)
    return {
        node.name: "".join(lines[min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1 : node.end_lineno])
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef)
    }
