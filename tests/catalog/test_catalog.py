"""Catalog facts against upstream truth: EC2's DescribeInstanceTypes (moto's bundled AWS data), the KV formula."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from inferplane.components.capacity.sizing import kv_cache_bytes_per_token
from inferplane.components.catalog import ACCELERATORS, INSTANCE_TYPES, MODELS, PRICES, hourly_price, instances_for
from inferplane.components.catalog.instances import tpu_topology_chips
from tests.aws_fixtures import described_instance_types

AWS_TYPES = sorted(name for name, row in INSTANCE_TYPES.items() if row.cloud == "aws")


@pytest.fixture(scope="module")
def described() -> Iterator[dict[str, Any]]:
    yield from described_instance_types(AWS_TYPES)


@pytest.mark.parametrize("name", AWS_TYPES)
def test_instance_row_matches_describe_instance_types(name: str, described: dict[str, Any]) -> None:
    row = INSTANCE_TYPES[name]
    api = described[name]
    gpu = api["GpuInfo"]["Gpus"][0]
    assert row.accelerators_per_node == gpu["Count"]
    assert ACCELERATORS[row.accelerator].memory_mib == gpu["MemoryInfo"]["SizeInMiB"]
    assert ACCELERATORS[row.accelerator].display_name == f"{gpu['Manufacturer']} {gpu['Name']}"
    assert row.vcpus == api["VCpuInfo"]["DefaultVCpus"]
    assert row.memory_mib == api["MemoryInfo"]["SizeInMiB"]
    assert row.efa_max_interfaces == api["NetworkInfo"].get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    assert row.network_gbps == _sustained_gbps(api["NetworkInfo"])
    assert row.local_nvme_gb == api.get("InstanceStorageInfo", {}).get("TotalSizeInGB", 0)
    assert row.capacity_block == ("capacity-block" in api["SupportedUsageClasses"])
    assert row.spot == ("spot" in api["SupportedUsageClasses"])


def _sustained_gbps(network: dict[str, Any]) -> float:
    """A node's sustained bandwidth from ``NetworkPerformance`` ("3200 Gigabit", "4x 100 Gigabit"); an "Up to N
    Gigabit" type sustains only its first card's ``BaselineBandwidthInGbps`` (N is a burst)."""
    performance = network["NetworkPerformance"]
    if performance.startswith("Up to"):
        return float(network["NetworkCards"][0]["BaselineBandwidthInGbps"])
    count, _, rate = performance.removesuffix(" Gigabit").rpartition("x ")
    return float(rate) * (int(count) if count else 1)


def test_efa_interface_line_rate_is_the_nodes_bandwidth_over_its_interfaces() -> None:
    assert INSTANCE_TYPES["p5.48xlarge"].efa_interface_gbps == 100
    assert INSTANCE_TYPES["p5en.48xlarge"].efa_interface_gbps == 200
    assert INSTANCE_TYPES["g6e.12xlarge"].efa_interface_gbps == 100
    assert INSTANCE_TYPES["g6e.xlarge"].efa_interface_gbps is None
    assert INSTANCE_TYPES["ct5lp-hightpu-4t"].efa_interface_gbps is None


@pytest.mark.parametrize(
    ("model", "bf16_bytes"),
    [
        ("llama-3.1-8b", 131_072),
        ("llama-3.3-70b", 327_680),
        ("llama-3.1-405b", 516_096),
        ("qwen2.5-7b", 57_344),
        ("qwen2.5-32b", 262_144),
        ("qwen2.5-72b", 327_680),
        ("mistral-7b", 131_072),
        ("mixtral-8x7b", 131_072),
        ("deepseek-r1-distill-llama-70b", 327_680),
        ("gemma-2-9b", 344_064),
    ],
)
def test_kv_cache_per_token_of_every_catalog_model(model: str, bf16_bytes: int) -> None:
    assert kv_cache_bytes_per_token(MODELS[model], 2) == bf16_bytes
    assert kv_cache_bytes_per_token(MODELS[model], 1) == bf16_bytes // 2


def test_every_model_cites_a_source_and_a_repository() -> None:
    for model_id, model in MODELS.items():
        assert "/" in model.hf_repo, model_id
        assert "2026" in model.source or "DeepSeek" in model.source, model_id


def test_every_accelerator_has_a_node_type_and_a_dated_source() -> None:
    for accelerator in ACCELERATORS.values():
        assert instances_for(accelerator.id), accelerator.id
        assert "2026-11-29" in accelerator.source


def test_prices_cover_every_node_type_but_p5e() -> None:
    unpriced = sorted(name for name, row in INSTANCE_TYPES.items() if hourly_price(row.cloud, name) is None)
    assert unpriced == ["p5e.48xlarge"]
    assert PRICES.as_of == "2026-08-17"
    assert set(PRICES.aws.prices) | set(PRICES.gcp.prices) <= set(INSTANCE_TYPES)


def test_tpu_topologies_fit_their_machine_types() -> None:
    for row in INSTANCE_TYPES.values():
        for topology in row.tpu_topologies:
            chips = tpu_topology_chips(topology)
            # Single-host slices use exactly the VM's chips; multi-host slices are whole multiples of it.
            assert chips % row.accelerators_per_node == 0, (row.name, topology)


def test_image_references_pin_a_digest_over_the_tag() -> None:
    from inferplane.components.catalog.images import IMAGES, ContainerImage, engine_image, image_reference

    digest = "sha256:" + "d" * 64
    assert image_reference("vllm") == "vllm/vllm-openai:v0.32.0"
    assert image_reference("vllm", {"vllm": digest}) == f"vllm/vllm-openai:v0.32.0@{digest}"
    assert image_reference("aws-cli", {"vllm": digest}) == "amazon/aws-cli:2.37.5"
    catalog_pinned = ContainerImage(repository="r/x", tag="1", digest=digest, source="test")
    assert catalog_pinned.reference() == f"r/x:1@{digest}"
    assert catalog_pinned.reference("sha256:" + "e" * 64) == f"r/x:1@sha256:{'e' * 64}"
    # No digest ships unverified: every catalog image is unpinned until a stack pins it.
    assert all(image.digest is None for image in IMAGES.values())
    assert [engine_image("vllm", tpu=False), engine_image("vllm", tpu=True), engine_image("triton", tpu=False)] == [
        "vllm",
        "vllm-tpu",
        "triton-trtllm",
    ]
