"""The GKE part of the program: the shipped stacks build what their spec asks for, labels come from the tags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.platform.gke_foundation import build_gke_foundation, gke_pool_names
from inferplane.components.spec.gcp_labels import to_gcp_labels
from inferplane.components.spec.platform_spec import PlatformSpec, parse_platform
from inferplane.tool.mockengine import Evaluation, PlatformMocks, evaluate
from inferplane.tool.stackfile import load_stack
from tests.stacks import evaluate_shipped_stack

PROJECT_DIR = Path(__file__).resolve().parents[2]


def evaluate_stack(name: str) -> tuple[PlatformSpec, Evaluation]:
    return load_stack(PROJECT_DIR, name).platform, evaluate_shipped_stack(name)


def test_staging_builds_the_gke_cluster_and_its_tpu_pool() -> None:
    spec, result = evaluate_stack("staging")
    plan = size_platform(spec)

    gcp_types = sorted(r.type for r in result.registrations if r.type.startswith(("gcp:", "pulumi:providers:gcp")))
    assert gcp_types == sorted(
        [
            "pulumi:providers:gcp",
            "gcp:compute/network:Network",
            *["gcp:compute/firewall:Firewall"] * 5,  # deny by default; control plane, nodes, pods, health checks
            "gcp:compute/subnetwork:Subnetwork",
            "gcp:compute/router:Router",
            "gcp:compute/routerNat:RouterNat",
            "gcp:kms/keyRing:KeyRing",
            "gcp:kms/cryptoKey:CryptoKey",
            "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember",
            "gcp:serviceaccount/account:Account",
            "gcp:projects/iAMMember:IAMMember",
            "gcp:projects/iAMMember:IAMMember",
            "gcp:container/cluster:Cluster",
            "gcp:container/nodePool:NodePool",
            "gcp:container/nodePool:NodePool",
            # The GKE gateway's budget store (components.gcp.memorystore) and its CMEK key.
            "gcp:kms/cryptoKey:CryptoKey",
            "gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember",
            "gcp:redis/instance:Instance",
        ]
    )
    provider = result.named("gcp")
    assert dict(provider.inputs) == {"project": "inferplane-staging", "region": "us-west4", "zone": "us-west4-a"}
    # Every GCP resource goes through the explicit provider, none through ambient config.
    provider_ref = f"{provider.urn}::{provider.id}"
    for registration in result.registrations:
        if registration.type.startswith("gcp:"):
            assert registration.provider == provider_ref, registration.name

    cluster = result.named("inferplane-staging-cluster")
    assert cluster.inputs["project"] == "inferplane-staging"
    assert cluster.inputs["location"] == "us-west4-a"
    assert cluster.inputs["privateClusterConfig"] == {"enablePrivateNodes": True, "enablePrivateEndpoint": False}
    assert cluster.inputs["masterAuthorizedNetworksConfig"]["cidrBlocks"] == [
        {"cidrBlock": "198.51.100.0/24", "displayName": "allowlist-0"}
    ]
    assert cluster.inputs["workloadIdentityConfig"] == {"workloadPool": "inferplane-staging.svc.id.goog"}
    # platform_tags(spec): the spec's tags plus environment, managed-by and app, as on the AWS side.
    platform_labels = {
        "team": "ml-platform",
        "cost-center": "ml-staging",
        "environment": "staging",
        "managed-by": "pulumi",
        "app": "inferplane",
    }
    assert cluster.inputs["resourceLabels"] == platform_labels

    (sizing,) = [p for p in plan.pools if p.name == "tpu-v5e"]
    pool = result.named("tpu-v5e-nodes")
    assert pool.parent == result.named("tpu-v5e").urn
    assert pool.inputs["autoscaling"] == {
        "totalMinNodeCount": sizing.min_nodes,
        "totalMaxNodeCount": sizing.max_nodes,
    }
    assert (sizing.min_nodes, sizing.max_nodes) == (1, 2)  # qwen-7b: 1..2 replicas of one 2x2 host each
    assert pool.inputs["nodeConfig"]["machineType"] == "ct5lp-hightpu-4t"
    assert pool.inputs["nodeConfig"]["labels"]["cloud.google.com/gke-tpu-topology"] == "2x2"
    assert pool.inputs["nodeConfig"]["labels"]["inferplane.io/pool"] == "tpu-v5e"
    assert pool.inputs["nodeConfig"]["resourceLabels"] == {**platform_labels, "inferplane-pool": "tpu-v5e"}
    assert pool.inputs["nodeConfig"]["spot"] is False
    assert "placementPolicy" not in pool.inputs


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stacks_without_tpu_pools_build_nothing_on_gcp(stack: str) -> None:
    spec, result = evaluate_stack(stack)

    assert gke_pool_names(spec) == []
    assert [r.type for r in result.registrations if "gcp" in r.type] == []


def staging_raw(**pool_changes: Any) -> dict[str, Any]:
    raw = yaml.safe_load((PROJECT_DIR / "stacks" / "Pulumi.staging.yaml").read_text())["config"]
    platform: dict[str, Any] = raw["inferplane:platform"]
    tpu = next(p for p in platform["pools"] if p["name"] == "tpu-v5e")
    tpu.update(pool_changes)
    return platform


def test_spot_tpu_pools_use_spot_vms() -> None:
    spec = parse_platform(staging_raw(capacity_type="spot"), "us-east-1")

    def program() -> None:
        build_gke_foundation(spec, size_platform(spec), spec.tags)

    result = evaluate(program, mocks=PlatformMocks(spec.region), stack="staging")
    assert result.named("tpu-v5e-nodes").inputs["nodeConfig"]["spot"] is True


def test_a_multi_host_pool_from_the_spec_becomes_whole_slices() -> None:
    # A standby 4x4 slice: no model on it (serving needs one host), one slice kept warm.
    platform = staging_raw()
    platform["pools"].append(
        {
            "name": "tpu-slice",
            "accelerator": "tpu-v5e",
            "instance_type": "ct5lp-hightpu-4t",
            "tpu_topology": "4x4",
            "min_nodes": 4,
        }
    )
    spec = parse_platform(platform, "us-east-1")

    def program() -> None:
        build_gke_foundation(spec, size_platform(spec), spec.tags)

    result = evaluate(program, mocks=PlatformMocks(spec.region), stack="staging")
    (slice_pool,) = result.children_of(result.named("tpu-slice").urn)
    assert slice_pool.name == "tpu-slice-slice-0"
    assert slice_pool.inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
    assert slice_pool.inputs["autoscaling"] == {"totalMinNodeCount": 4, "totalMaxNodeCount": 4}


def test_a_multi_host_pool_of_partial_slices_is_refused() -> None:
    platform = staging_raw()
    platform["pools"].append(
        {
            "name": "tpu-slice",
            "accelerator": "tpu-v5e",
            "instance_type": "ct5lp-hightpu-4t",
            "tpu_topology": "4x4",
            "min_nodes": 6,
        }
    )
    spec = parse_platform(platform, "us-east-1")

    def program() -> None:
        build_gke_foundation(spec, size_platform(spec), spec.tags)

    with pytest.raises(pulumi.InputPropertiesError) as caught:
        evaluate(program, mocks=PlatformMocks(spec.region), stack="staging")
    assert caught.value.errors == [
        {
            "property_path": "min_nodes",
            "reason": "6 nodes is not a whole number of 4x4 slices (4 ct5lp-hightpu-4t hosts each)",
        },
        {
            "property_path": "max_nodes",
            "reason": "6 nodes is not a whole number of 4x4 slices (4 ct5lp-hightpu-4t hosts each)",
        },
    ]


def test_tags_that_cannot_be_gcp_labels_stop_the_program() -> None:
    spec = parse_platform(staging_raw(), "us-east-1")

    def program() -> None:
        build_gke_foundation(spec, size_platform(spec), {"Team": "a", "team": "b"})

    with pytest.raises(pulumi.RunError, match="tags cannot label GCP resources: tags 'Team' and 'team' both become"):
        evaluate(program, mocks=PlatformMocks(spec.region), stack="staging")


def test_tags_become_lowercase_gcp_labels() -> None:
    assert to_gcp_labels({"Cost Center": "ML/Prod", "team": "ml-platform"}) == {
        "cost_center": "ml_prod",
        "team": "ml-platform",
    }
    assert to_gcp_labels({"owner": "x" * 80}) == {"owner": "x" * 63}


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ({"Team": "a", "team": "b"}, "tags 'Team' and 'team' both become the GCP label key 'team'"),
        ({"1st": "a"}, "tag '1st' cannot become a GCP label key: it must start with a letter"),
    ],
)
def test_tags_that_would_merge_or_break_are_refused(tags: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(") + "$"):
        to_gcp_labels(tags)
