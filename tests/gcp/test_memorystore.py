"""MemorystoreRedis under the mock engine: exact children and inputs, prod rules, every refusal; the platform's store
on GKE; the URL and CA bundle the gateway gets."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi
import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis import Redis

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gcp.gke_cluster import KEY_ROTATION_PERIOD
from inferplane.components.gcp.memorystore import (
    DEFAULT_RESERVED_RANGE,
    REDIS_VERSION,
    TLS_PORT,
    MemorystoreRedis,
    MemorystoreRedisArgs,
    pem_bundle,
    redis_url,
)
from inferplane.components.platform.budget_store import build_budget_store
from inferplane.components.platform.gke_foundation import build_gke_foundation
from inferplane.tool.mockengine import MOCK_GCP_PROJECT_NUMBER, SECRET_PLACEHOLDER
from tests.gcp.test_gke import run
from tests.serving_support import stack_spec
from tests.stacks import evaluate_shipped_stack

LABELS = {"team": "ml-platform", "environment": "staging"}
MOCK_CA = "-----BEGIN CERTIFICATE-----\nMIIC-mock-redis-ca\n-----END CERTIFICATE-----\n"


def store_args(**changes: Any) -> MemorystoreRedisArgs:
    base = MemorystoreRedisArgs(
        project="inferplane-staging",
        region="us-west4",
        zone="us-west4-a",
        network="projects/inferplane-staging/global/networks/vpc",
        environment="staging",
        high_availability=True,
        key_ring="projects/inferplane-staging/locations/us-west4/keyRings/ring",
        labels=LABELS,
    )
    return dataclasses.replace(base, **changes)


def test_children_and_inputs() -> None:
    result = run(lambda: MemorystoreRedis("budgets", store_args()))

    component = result.named("budgets")
    assert component.type == "inferplane:index:MemorystoreRedis"
    assert sorted((r.type, r.name) for r in result.children_of(component.urn)) == sorted(
        [
            ("gcp:kms/cryptoKey:CryptoKey", "budgets-key"),
            ("gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember", "budgets-key-redis"),
            ("gcp:redis/instance:Instance", "budgets-redis"),
        ]
    )
    instance = result.named("budgets-redis")
    assert instance.protect is False
    assert dict(instance.inputs) == {
        "project": "inferplane-staging",
        "region": "us-west4",
        "locationId": "us-west4-a",
        "tier": "STANDARD_HA",
        "memorySizeGb": 1,
        "redisVersion": REDIS_VERSION,
        "authorizedNetwork": "projects/inferplane-staging/global/networks/vpc",
        "connectMode": "DIRECT_PEERING",
        "reservedIpRange": DEFAULT_RESERVED_RANGE,
        "authEnabled": True,
        "transitEncryptionMode": "SERVER_AUTHENTICATION",
        "readReplicasMode": "READ_REPLICAS_DISABLED",
        "customerManagedKey": "budgets-key-id",
        "displayName": "inferplane gateway budgets (staging)",
        "labels": LABELS,
        "deletionProtection": False,
    }
    # The key grant exists before the instance asks for the key.
    assert result.named("budgets-key-redis").urn in instance.dependencies
    assert dict(result.named("budgets-key").inputs) == {
        "keyRing": "projects/inferplane-staging/locations/us-west4/keyRings/ring",
        "purpose": "ENCRYPT_DECRYPT",
        "rotationPeriod": KEY_ROTATION_PERIOD,
        "labels": LABELS,
    }
    assert dict(result.named("budgets-key-redis").inputs) == {
        "cryptoKeyId": "budgets-key-id",
        "role": "roles/cloudkms.cryptoKeyEncrypterDecrypter",
        "member": f"serviceAccount:service-{MOCK_GCP_PROJECT_NUMBER}@cloud-redis.iam.gserviceaccount.com",
    }


def test_outputs_url_is_secret_and_carries_tls_auth_host_and_port() -> None:
    def program() -> None:
        store = MemorystoreRedis("budgets", store_args())
        pulumi.export("url", store.url)
        pulumi.export("plainUrl", pulumi.Output.unsecret(store.url))
        pulumi.export("auth", store.auth_string)
        pulumi.export("ca", store.ca_certificates)

    result = run(program)
    instance = result.named("budgets-redis").outputs
    assert result.outputs["url"] == SECRET_PLACEHOLDER
    assert result.outputs["auth"] == SECRET_PLACEHOLDER
    assert instance["port"] == TLS_PORT
    assert result.outputs["plainUrl"] == f"rediss://:{instance['authString']}@10.24.0.3:{TLS_PORT}"
    assert result.outputs["ca"] == MOCK_CA


def test_without_a_key_ring_google_manages_the_key() -> None:
    result = run(lambda: MemorystoreRedis("budgets", store_args(key_ring=None)))
    assert [r.type for r in result.children_of(result.named("budgets").urn)] == ["gcp:redis/instance:Instance"]
    assert "customerManagedKey" not in result.named("budgets-redis").inputs


def test_prod_is_protected_and_basic_tier_only_outside_it() -> None:
    prod = run(lambda: MemorystoreRedis("budgets", store_args(environment="prod")))
    assert prod.named("budgets-redis").protect is True
    assert prod.named("budgets-key").protect is True
    assert prod.named("budgets-redis").inputs["deletionProtection"] is True
    dev = run(lambda: MemorystoreRedis("budgets", store_args(environment="dev", high_availability=False)))
    assert dev.named("budgets-redis").inputs["tier"] == "BASIC"


@pytest.mark.parametrize(
    ("name", "changes", "path", "reason"),
    [
        ("budgets", {"environment": "prod", "high_availability": False}, "high_availability", "prod needs"),
        ("budgets", {"zone": "us-east1-b"}, "zone", "'us-east1-b' is not a zone of region us-west4"),
        ("budgets", {"reserved_ip_range": "10.24.0.0/28"}, "reserved_ip_range", "direct peering takes a private /29"),
        ("budgets", {"reserved_ip_range": "8.8.8.0/29"}, "reserved_ip_range", "direct peering takes a private /29"),
        ("budgets", {"reserved_ip_range": "10.24.0.1/29"}, "reserved_ip_range", "is not an IPv4 CIDR block"),
        ("budgets", {"memory_size_gb": 0}, "memory_size_gb", "0: Memorystore for Redis offers 1 to 300 GiB"),
        ("budgets", {"labels": {"Team": "x"}}, "labels", "label key 'Team' must start with a lowercase letter"),
        ("Budgets", {}, "name", "'Budgets': lowercase letters, digits and single '-', 2-31 characters"),
        ("inferplane-staging-gateway-budgets", {}, "name", "2-31 characters"),
    ],
)
def test_refuses_bad_inputs(name: str, changes: dict[str, Any], path: str, reason: str) -> None:
    with pytest.raises(pulumi.InputPropertiesError) as caught:
        run(lambda: MemorystoreRedis(name, store_args(**changes)))
    [error] = caught.value.errors or []
    assert error["property_path"] == path
    assert reason in error["reason"]


def test_every_problem_is_reported_at_once_and_nothing_is_declared() -> None:
    registered: list[str] = []

    def program() -> None:
        try:
            MemorystoreRedis("Budgets", store_args(environment="prod", high_availability=False, zone="x"))
        except pulumi.InputPropertiesError as exc:
            registered.extend(e["property_path"] for e in exc.errors or [])

    result = run(program)
    assert registered == ["name", "zone", "high_availability"]
    assert not [r for r in result.registrations if r.type.startswith("gcp:")]


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=40))
def test_the_url_survives_any_auth_string(auth: str) -> None:
    client = Redis.from_url(redis_url("10.24.0.3", TLS_PORT, auth))
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["password"], kwargs["host"], kwargs["port"]) == (auth, "10.24.0.3", TLS_PORT)
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"


def test_the_ca_bundle_holds_every_certificate_in_order() -> None:
    assert pem_bundle(["A\n", "B"]) == "A\nB\n"
    assert pem_bundle([]) == ""


def test_staging_declares_the_store_in_the_gke_network_with_the_clusters_key_ring() -> None:
    result = evaluate_shipped_stack("staging")
    store = result.named("inferplane-staging-budgets")
    instance = result.named("inferplane-staging-budgets-redis")
    assert instance.parent == store.urn
    assert instance.inputs["authorizedNetwork"] == result.named("inferplane-staging-network").id
    assert result.named("inferplane-staging-budgets-key").inputs["keyRing"] == (
        result.named("inferplane-staging-keyring").id
    )
    # cache.replicas defaults to 2 in staging: a failover replica, like the EKS cache's multi-AZ group.
    assert instance.inputs["tier"] == "STANDARD_HA"
    assert instance.inputs["labels"] == {
        "team": "ml-platform",
        "cost-center": "ml-staging",
        "environment": "staging",
        "managed-by": "pulumi",
        "app": "inferplane",
    }
    provider = result.named("gcp")
    assert instance.provider == f"{provider.urn}::{provider.id}"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stacks_without_gke_declare_no_store(stack: str) -> None:
    result = evaluate_shipped_stack(stack)
    assert not result.of_type("inferplane:index:MemorystoreRedis")


@pytest.mark.parametrize(
    ("environment", "cache_replicas", "tier"),
    [("prod", 1, "STANDARD_HA"), ("staging", 1, "BASIC"), ("dev", 3, "STANDARD_HA")],
)
def test_the_platforms_store_follows_the_cache_size_and_is_always_ha_in_prod(
    environment: str, cache_replicas: int, tier: str
) -> None:
    staging = stack_spec("staging")
    spec = staging.model_copy(
        update={
            "environment": environment,
            "cluster": staging.cluster.model_copy(update={"endpoint_access": "private"}),
            # The cache off: the store holds budgets, so it exists (and prod's is HA) regardless.
            "cache": staging.cache.model_copy(update={"enabled": False, "replicas": cache_replicas}),
        }
    )

    def program() -> None:
        gke = build_gke_foundation(spec, size_platform(spec), spec.tags)
        assert build_budget_store(spec, gke, spec.tags) is not None

    result = run(program)
    instance = result.named(f"inferplane-{environment}-budgets-redis")
    assert instance.inputs["tier"] == tier
    assert instance.protect is (environment == "prod")


def test_no_store_without_a_gke_cluster() -> None:
    assert build_budget_store(stack_spec("dev"), None, {}) is None
