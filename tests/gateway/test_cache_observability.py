"""The response cache's alerts (proven with promtool) and dashboard panels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferplane.components.gateway.cache_observability import cache_panels, cache_rule_group
from inferplane.components.observability.alerts import AlertingRule
from inferplane.components.observability.dashboards import Dashboard
from inferplane.processor.cache import metrics as cm
from tests.promtool import check_expressions, check_rules, run_rule_tests

PODS = 'namespace="gateway",pod=~"gw-[a-z0-9]+-[a-z0-9]+"'
GROUP = cache_rule_group("gw", PODS)
POD_A = "gw-5d8f7c9b4-x2x9z"
POD_B = "gw-5d8f7c9b4-q7m4k"
OTHER = "other-5d8f7c9b4-q7m4k"


def series(metric: str, pod: str, values: str, **labels: str) -> dict[str, str]:
    all_labels = {"namespace": "gateway", "pod": pod, "container": "processor", **labels}
    return {"series": metric + "{" + ",".join(f'{k}="{v}"' for k, v in all_labels.items()) + "}", "values": values}


def case(
    alert: str, input_series: list[dict[str, str]], at: str, firing: list[dict[str, str]], summary: str = ""
) -> dict[str, Any]:
    rule = next(r for r in GROUP.rules if isinstance(r, AlertingRule) and r.alert == alert)
    expected = [{"exp_labels": {**rule.labels, **labels}, "exp_annotations": rule.annotations} for labels in firing]
    for item in expected:
        item["exp_annotations"] = {
            k: v.replace("{{ $labels.pod }}", item["exp_labels"].get("pod", "")) for k, v in rule.annotations.items()
        }
        if summary:
            item["exp_annotations"]["summary"] = summary
    return {
        "interval": "1m",
        "input_series": input_series,
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}],
    }


def passes(result: Any) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rules_are_valid(tmp_path: Path) -> None:
    result = check_rules([GROUP], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_unreachable_fires_after_five_minutes_for_the_replica_that_cannot_reach_it(tmp_path: Path) -> None:
    down = [series(cm.UP, POD_A, "1x3 0x20"), series(cm.UP, POD_B, "1x23"), series(cm.UP, OTHER, "0x23")]
    blip = [series(cm.UP, POD_A, "1x3 0x3 1x20"), series(cm.UP, POD_B, "1x26")]
    tests = [
        case("InferplaneGatewayCacheUnreachable", down, "10m", [{"namespace": "gateway", "pod": POD_A}]),
        case("InferplaneGatewayCacheUnreachable", down, "7m", []),
        case("InferplaneGatewayCacheUnreachable", blip, "15m", []),
    ]
    passes(run_rule_tests([GROUP], tests, tmp_path))


def test_error_ratio_fires_above_five_percent_of_lookups(tmp_path: Path) -> None:
    def lookups(errors_per_minute: int) -> list[dict[str, str]]:
        return [
            series(cm.HITS, POD_A, "0+60x30", model="m", kind="exact"),
            series(cm.MISSES, POD_A, "0+40x30", model="m"),
            series(f"{cm.LOOKUP_SECONDS}_count", POD_A, f"0+{errors_per_minute}x30", result="error"),
        ]

    tests = [
        case("InferplaneGatewayCacheErrors", lookups(20), "25m", [{}], "16.67% of cache lookups fail"),
        case("InferplaneGatewayCacheErrors", lookups(2), "25m", []),
    ]
    passes(run_rule_tests([GROUP], tests, tmp_path))


def test_embedder_failures_fire_above_five_percent_of_cacheable_requests(tmp_path: Path) -> None:
    def lookups(failures_per_minute: int) -> list[dict[str, str]]:
        return [
            series(cm.HITS, POD_A, "0+60x30", model="m", kind="exact"),
            series(cm.MISSES, POD_A, "0+40x30", model="m"),
            series(cm.ERRORS, POD_A, f"0+{failures_per_minute}x30", operation="embed", error="timeout"),
            # Redis failures are the other alert's, not this one's.
            series(cm.ERRORS, POD_A, "0+30x30", operation="lookup", error="timeout"),
        ]

    tests = [
        case(
            "InferplaneGatewayCacheEmbedderFailing",
            lookups(10),
            "25m",
            [{}],
            "10% of cacheable requests get no embedding",
        ),
        case("InferplaneGatewayCacheEmbedderFailing", lookups(10), "8m", []),  # not yet for 10 minutes
        case("InferplaneGatewayCacheEmbedderFailing", lookups(2), "25m", []),
    ]
    passes(run_rule_tests([GROUP], tests, tmp_path))


def test_hit_ratio_is_recorded(tmp_path: Path) -> None:
    test = {
        "interval": "1m",
        "input_series": [
            series(cm.HITS, POD_A, "0+30x10", model="m", kind="exact"),
            series(cm.HITS, POD_B, "0+30x10", model="m", kind="semantic"),
            series(cm.MISSES, POD_A, "0+40x10", model="m"),
        ],
        "promql_expr_test": [
            {
                "expr": "inferplane:gateway_cache_hit_ratio:rate5m",
                "eval_time": "8m",
                "exp_samples": [{"labels": "inferplane:gateway_cache_hit_ratio:rate5m", "value": 0.6}],
            }
        ],
    }
    passes(run_rule_tests([GROUP], [test], tmp_path))


def test_panels_query_the_processors_cache_metrics(tmp_path: Path) -> None:
    panels = cache_panels(PODS, first_id=20, y=40)
    assert [p.title for p in panels] == [
        "Cache hit ratio",
        "Cache hits, misses and bypasses",
        "Cache lookup latency",
        "Saved by the cache",
    ]
    assert [p.id for p in panels] == [20, 21, 22, 23]
    assert [(p.grid.x, p.grid.y) for p in panels] == [(0, 40), (12, 40), (0, 48), (12, 48)]
    exprs = [t.expr for p in panels for t in p.targets]
    for metric in (cm.HITS, cm.MISSES, cm.BYPASSES, cm.LOOKUP_SECONDS, cm.TOKENS_SAVED, cm.USD_SAVED):
        assert any(metric in e for e in exprs), metric
    assert check_expressions(exprs, tmp_path).returncode == 0
    Dashboard(uid="cache", title="cache", panels=panels).render()


def test_a_gateway_with_a_cache_gets_the_cache_rules_and_panels(tmp_path: Path) -> None:
    from inferplane.components.gateway.observability import GatewaySeries, gateway_dashboard, render_rules
    from inferplane.processor.cache.config import CacheConfig
    from tests.gateway.test_observability import CONFIG

    series = GatewaySeries("gateway", "inference")
    plain = render_rules(series, CONFIG)
    cached = render_rules(series, CONFIG.model_copy(update={"cache": CacheConfig()}))
    assert cached["groups"][:-1] == plain["groups"]
    assert cached["groups"][-1] == cache_rule_group("inference:gateway", series.pods).render()
    off = render_rules(series, CONFIG.model_copy(update={"cache": CacheConfig(enabled=False)}))
    assert off == plain
    without = gateway_dashboard(series, {})
    with_cache = gateway_dashboard(series, {}, cache=True)
    assert with_cache.panels[: len(without.panels)] == without.panels
    added = with_cache.panels[len(without.panels) :]
    assert [p.title for p in added] == [p.title for p in cache_panels(series.pods, 1, 0)]
    assert len({p.id for p in with_cache.panels}) == len(with_cache.panels)
    assert min(p.grid.y for p in added) >= max(p.grid.y + p.grid.h for p in without.panels)


def test_the_prod_plan_deploys_the_cache_rules_and_panels_beside_the_gateways() -> None:
    import json

    from tests.stacks import evaluate_shipped_stack

    evaluation = evaluate_shipped_stack("prod")
    groups = evaluation.named("gateway-rules").inputs["spec"]["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    assert {
        "InferplaneGatewayCacheUnreachable",
        "InferplaneGatewayCacheErrors",
        "InferplaneGatewayCacheEmbedderFailing",
    } <= alerts
    [document] = evaluation.named("gateway-dashboard").inputs["data"].values()
    titles = [p["title"] for p in json.loads(document)["panels"]]
    assert [t for t in titles if t.startswith("Cache") or t == "Saved by the cache"] == [
        p.title for p in cache_panels(PODS, 1, 0)
    ]
    [config_map] = [
        r for r in evaluation.registrations if r.type == "kubernetes:core/v1:ConfigMap" and r.name == "gateway-config"
    ]
    [processor_json] = [v for k, v in config_map.inputs["data"].items() if k.endswith(".json")]
    cache = json.loads(processor_json)["cache"]
    # prod embeds with the served sentence model, at its catalog threshold
    assert (cache["threshold"], cache["tenant_isolation"], cache["guards"]) == (0.89, True, True)
    assert cache["embedder"]["url"] == "http://cache-embedder.inference.svc.cluster.local:8000/v1"
