"""Per-model Grafana dashboards: the panels the issue lists, valid on Grafana's grid, every query parsing, the cost
panel from the price catalog, and sidecar-labelled ConfigMaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from inferplane.components.catalog import get_instance_type, hourly_price
from inferplane.components.observability.dashboards import (
    DASHBOARD_SIDECAR_LABELS,
    GridPos,
    ModelDashboardInputs,
    ServingDashboards,
    ServingDashboardsArgs,
    Target,
    grafana_ref_id,
    model_dashboard,
)
from inferplane.components.observability.metrics import ModelSeries
from inferplane.tool.mockengine import PlatformMocks, evaluate
from tests.promtool import check_expressions

VLLM = ModelDashboardInputs(
    series=ModelSeries("llama-70b", "vllm", "models", "llama-70b-server"),
    ttft_slo_ms=1500,
    itl_slo_ms=60,
    replica_hourly_usd=27.4,
)
TRITON = ModelDashboardInputs(
    series=ModelSeries("llama-8b", "triton", "models", "llama-8b-server"),
    ttft_slo_ms=800,
    itl_slo_ms=40,
    replica_hourly_usd=None,
)
VLLM_HOST_TIER = ModelDashboardInputs(
    series=VLLM.series, ttft_slo_ms=1500, itl_slo_ms=60, replica_hourly_usd=27.4, host_kv_cache=True
)
SGLANG = ModelDashboardInputs(
    series=ModelSeries("qwen-7b", "sglang", "models", "qwen-7b"),
    ttft_slo_ms=1000,
    itl_slo_ms=50,
    replica_hourly_usd=None,
)


def test_vllm_dashboard_has_every_panel() -> None:
    board = model_dashboard(VLLM).render()
    assert [p["title"] for p in board["panels"]] == [
        "Time to first token",
        "Inter-token latency",
        "Tokens per second",
        "KV-cache usage (fullest replica)",
        "Preemptions",
        "Prefix-cache hit ratio",
        "Queue depth and replicas",
        "GPU utilisation",
        "GPU memory used",
        "$ per million generated tokens",
    ]
    ttft = board["panels"][0]
    assert [t["expr"] for t in ttft["targets"]] == [
        f'inferplane:ttft_seconds:{q}{{model="llama-70b",namespace="models"}}' for q in ("p50", "p95", "p99")
    ]
    assert ttft["fieldConfig"]["defaults"]["unit"] == "s"
    assert ttft["fieldConfig"]["defaults"]["thresholds"]["steps"][-1] == {"color": "red", "value": 1.5}
    assert board["uid"] == "inferplane-llama-70b" and board["schemaVersion"] == 39


def test_a_host_kv_tier_adds_its_hits_and_traffic_after_the_throughput_panels() -> None:
    board = model_dashboard(VLLM_HOST_TIER).render()
    panels = {p["title"]: p for p in board["panels"]}
    titles = list(panels)
    assert titles[titles.index("Prefix-cache hit ratio") + 1 : titles.index("Queue depth and replicas")] == [
        "Cached prompt tokens by tier",
        "Host KV tier traffic",
    ]
    engine = 'namespace="models",pod=~"llama-70b-server-[a-z0-9]+-[a-z0-9]+",model_name="llama-70b"'
    tiers = panels["Cached prompt tokens by tier"]["targets"]
    assert [(t["expr"], t["legendFormat"]) for t in tiers] == [
        (f"sum by (source) (rate(vllm:prompt_tokens_cached_by_source_total{{{engine}}}[5m]))", "{{source}}")
    ]
    traffic = panels["Host KV tier traffic"]
    assert [t["expr"] for t in traffic["targets"]] == [
        f"sum(rate(vllm:kv_offload_store_bytes_total{{{engine}}}[5m]))",
        f"sum(rate(vllm:kv_offload_load_bytes_total{{{engine}}}[5m]))",
    ]
    assert traffic["fieldConfig"]["defaults"]["unit"] == "Bps"


def test_engines_without_tiers_get_no_host_tier_panels() -> None:
    for inputs in (TRITON, SGLANG):
        board = model_dashboard(
            ModelDashboardInputs(
                series=inputs.series, ttft_slo_ms=800, itl_slo_ms=40, replica_hourly_usd=None, host_kv_cache=True
            )
        ).render()
        assert "Host KV tier traffic" not in [p["title"] for p in board["panels"]]


def test_sglang_dashboard_reads_sglangs_own_series() -> None:
    board = model_dashboard(SGLANG).render()
    panels = {p["title"]: [t["expr"] for t in p["targets"]] for p in board["panels"]}
    assert list(panels) == [
        "Time to first token",
        "Inter-token latency",
        "Tokens per second",
        "KV-cache usage (fullest replica)",
        "Preemptions",
        "Prefix-cache hit ratio",
        "Queue depth and replicas",
        "GPU utilisation",
        "GPU memory used",
    ]
    engine = 'namespace="models",pod=~"qwen-7b-[a-z0-9]+-[a-z0-9]+",model_name="qwen-7b"'
    assert panels["Preemptions"] == [f"sum(rate(sglang:num_retracted_requests_total{{{engine}}}[5m]))"]
    assert panels["Prefix-cache hit ratio"] == [
        f"sum(rate(sglang:cached_tokens_total{{{engine}}}[5m])) / sum(rate(sglang:prompt_tokens_total{{{engine}}}[5m]))"
    ]
    assert panels["Queue depth and replicas"][1] == f"sum(sglang:num_running_reqs{{{engine}}})"
    assert board["title"] == "inferplane / qwen-7b (sglang)"


def test_triton_dashboard_leaves_out_what_triton_does_not_export() -> None:
    titles = [p["title"] for p in model_dashboard(TRITON).render()["panels"]]
    assert "Inter-token latency" not in titles and "Preemptions" not in titles
    assert "Prefix-cache hit ratio" not in titles
    # No catalog price, no cost panel.
    assert "$ per million generated tokens" not in titles


def test_cost_panel_turns_the_catalog_price_into_dollars_per_million_tokens() -> None:
    instance = get_instance_type("p5.48xlarge")
    price = hourly_price(instance.cloud, instance.name)
    assert price is not None
    replica = round(price * 4 / instance.accelerators_per_node, 4)  # a TP-4 replica's share of the node
    board = model_dashboard(
        ModelDashboardInputs(series=VLLM.series, ttft_slo_ms=1500, itl_slo_ms=60, replica_hourly_usd=replica)
    )
    cost = board.render()["panels"][-1]
    assert cost["fieldConfig"]["defaults"]["unit"] == "currencyUSD"
    assert cost["targets"][0]["expr"] == (
        f"({replica:g} * "
        'sum(kube_deployment_status_replicas_available{namespace="models",deployment="llama-70b-server"}))'
        ' / (inferplane:generation_tokens:rate5m{model="llama-70b",namespace="models"} * 3600 / 1e6)'
    )


@pytest.mark.parametrize(
    "inputs", [VLLM, VLLM_HOST_TIER, TRITON, SGLANG], ids=["vllm", "vllm-host-tier", "triton", "sglang"]
)
def test_panels_tile_the_grid_without_overlap(inputs: ModelDashboardInputs) -> None:
    board = model_dashboard(inputs).render()
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & area
        cells |= area
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids)
    assert json.loads(model_dashboard(inputs).to_json()) == board


def test_grid_positions_outside_grafanas_grid_are_refused() -> None:
    with pytest.raises(ValidationError) as raised:
        GridPos(x=12, y=0, w=25, h=8)
    assert raised.value.errors()[0]["loc"] == ("w",)


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    expressions = [
        t["expr"]
        for inputs in (VLLM_HOST_TIER, TRITON, SGLANG)
        for p in model_dashboard(inputs).render()["panels"]
        for t in p["targets"]
    ]
    result = check_expressions(expressions, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout


def test_config_maps_carry_the_sidecar_label() -> None:
    def program() -> None:
        ServingDashboards("dashboards", ServingDashboardsArgs(namespace="monitoring", models=[("llama-70b", VLLM)]))

    result = evaluate(program, mocks=PlatformMocks(), stack="prod")
    assert [(r.type, r.name) for r in result.registrations] == [
        ("inferplane:index:ServingDashboards", "dashboards"),
        ("kubernetes:core/v1:ConfigMap", "dashboards-llama-70b"),
    ]
    config_map = result.named("dashboards-llama-70b")
    assert config_map.parent == result.named("dashboards").urn
    assert config_map.inputs["metadata"]["labels"] == DASHBOARD_SIDECAR_LABELS == {"grafana_dashboard": "1"}
    assert json.loads(config_map.inputs["data"]["inferplane-llama-70b.json"]) == model_dashboard(VLLM).render()


@pytest.mark.parametrize(
    ("index", "ref_id"),
    [(0, "A"), (25, "Z"), (26, "AA"), (27, "AB"), (51, "AZ"), (52, "BA"), (701, "ZZ"), (702, "AAA")],
)
def test_query_ids_follow_grafanas_numbering(index: int, ref_id: str) -> None:
    assert grafana_ref_id(index) == ref_id


def test_query_ids_are_unique_and_valid_over_the_first_thousand() -> None:
    ids = [grafana_ref_id(index) for index in range(1000)]
    assert len(set(ids)) == 1000
    assert all(Target(expr="up", legend="", ref_id=ref_id) for ref_id in ids)
