"""The gateway's rules and dashboard: every alert proven by ``promtool test rules`` to fire on series shaped like
Envoy's and the processor's exposition (as scraped through the PodMonitor) and to stay quiet otherwise; and the KEDA
wake query proven to activate a scaled-to-zero model's ScaledObject on the processor's pending gauge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.gateway.observability import (
    ENVOY_CPU_PER_REQUEST,
    GATEWAY_CPU_PER_REQUEST,
    PREFIX_HIT_RATIO_ENGINE,
    PREFIX_HIT_RATIO_ESTIMATED,
    PROCESSOR_CPU_PER_REQUEST,
    GatewaySeries,
    ModelCost,
    gateway_dashboard,
    gateway_rule_group,
    wake_query,
)
from inferplane.components.observability.alerts import AlertingRule, RecordingRule, RuleGroup
from inferplane.components.observability.keda import autoscaling_policy, scaled_object_spec
from inferplane.components.observability.metrics import (
    CONTAINER_CPU_USAGE_SECONDS_TOTAL,
    VLLM_PREFIX_CACHE_HITS,
    VLLM_PREFIX_CACHE_QUERIES,
    ModelSeries,
)
from inferplane.processor import metrics as gm
from inferplane.processor.config import (
    ModelConfig,
    ProcessorConfig,
    ProviderConfig,
    TenantConfig,
    TierConfig,
)
from tests.crds import errors as crd_errors
from tests.gateway_support import model_config, routing_config
from tests.observability.test_alerts import fired
from tests.promtool import check_expressions, check_rules, run_rule_tests
from tests.serving_support import stack_spec

SERIES = GatewaySeries("gateway", "inference")
POD_A = "gateway-6c9f8d7b5-abcde"
POD_B = "gateway-6c9f8d7b5-fghij"
TOTAL = "envoy_http_downstream_rq_total"
OTHER = "gateway-gke-7d8e9f6c4-klmno"  # another gateway's pod: never counted


def _model(
    name: str,
    tier: str,
    timeout: float = 2.0,
    *,
    engine: Literal["vllm", "triton"] = "vllm",
    scale_to_zero: bool = False,
) -> ModelConfig:
    """A model as the renderer would configure it (the routing settings matter only to the processor)."""
    port = 8000 if engine == "vllm" else 9000
    return model_config(
        name,
        (f"{name}.inference.svc.cluster.local:{port}",),
        tier=tier,
        engine=engine,
        max_model_len=32768,
        max_num_seqs=24,
        fallback_share=6,
        queue_max=32,
        queue_timeout_seconds=timeout,
        scale_to_zero=scale_to_zero,
        cold_start_hold_seconds=330.0,
        routing=routing_config(index_blocks=8192),
    )


# One model per case the routing alerts tell apart: vLLM, Triton, and a vLLM model that scales to zero.
CONFIG = ProcessorConfig(
    grpc_port=50051,
    metrics_port=9464,
    tenant_header="x-inferplane-tenant",
    auth_required=True,
    redis_url_env="INFERPLANE_REDIS_URL",
    models=(
        _model("llama-70b", "premium"),
        _model("llama-8b", "standard", engine="triton"),
        _model("mistral-7b", "standard", scale_to_zero=True),
    ),
    tiers=(
        TierConfig(name="premium", models=("llama-70b",), fallback=("llama-8b",)),
        TierConfig(name="standard", models=("llama-8b",)),
    ),
    tenants=(TenantConfig(name="acme", tiers=("premium",), requests_per_minute=600, tokens_per_minute=100000),),
)


def _scraped(container: str, endpoint: str, metric: str, pod: str, values: str, **extra: str) -> dict[str, str]:
    """A series as Prometheus stores it from the gateway's PodMonitor: the target labels plus the metric's own."""
    labels = {"namespace": "inference", "pod": pod, "container": container, "endpoint": endpoint, **extra}
    return {"series": metric + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def _envoy(metric: str, pod: str, values: str, **extra: str) -> dict[str, str]:
    return _scraped("envoy", "stats", metric, pod, values, envoy_http_conn_manager_prefix="gateway", **extra)


def _processor(metric: str, pod: str, values: str, **extra: str) -> dict[str, str]:
    return _scraped("processor", "processor-metrics", metric, pod, values, **extra)


def _alerts(name: str, at: str, *alerts: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(alerts)}


GROUP = gateway_rule_group(SERIES, CONFIG)


def _alert(name: str, labels: dict[str, str] | None = None, **rendered: str) -> dict[str, Any]:
    return fired(GROUP, name, labels or {}, **rendered)


PODS = 'namespace="inference",pod=~"gateway-[a-z0-9]+-[a-z0-9]+"'
RECORDED = 'gateway="gateway",namespace="inference"'
VLLM_POD = "llama-70b-5f7b9c6d8-q2w3e"  # a replica of the llama-70b Deployment in the serving namespace


def _engine(metric: str, pod: str, values: str, model: str = "llama-70b") -> dict[str, str]:
    """A vLLM series as the model servers' monitor stores it: labelled ``model_name`` and ``engine`` by vLLM."""
    return _scraped("vllm", "http", metric, pod, values, model_name=model, engine="0")


def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    result = check_rules([gateway_rule_group(SERIES, CONFIG)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_5xx_ratio_alert_fires_above_five_percent_and_not_below(tmp_path: Path) -> None:
    series = [
        # 200 requests a minute over two replicas; 20 a minute are 5xx on one: 10 %.
        _envoy(TOTAL, POD_A, "0+100x30"),
        _envoy(TOTAL, POD_B, "0+100x30"),
        _envoy("envoy_http_downstream_rq_xx", POD_A, "0+20x30", envoy_response_code_class="5"),
        _envoy("envoy_http_downstream_rq_xx", POD_A, "0+80x30", envoy_response_code_class="2"),
        # Another gateway's errors never count.
        _envoy("envoy_http_downstream_rq_xx", OTHER, "0+1000x30", envoy_response_code_class="5"),
    ]
    quiet = [
        _envoy(TOTAL, POD_A, "0+100x30"),
        _envoy("envoy_http_downstream_rq_xx", POD_A, "0+2x30", envoy_response_code_class="5"),
    ]
    error = _alert("InferplaneGatewayErrorRatioHigh")
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                _alerts("InferplaneGatewayErrorRatioHigh", "4m"),  # pending for 5m first
                _alerts("InferplaneGatewayErrorRatioHigh", "15m", error),
            ],
        },
        {
            "interval": "1m",
            "input_series": quiet,
            "alert_rule_test": [_alerts("InferplaneGatewayErrorRatioHigh", "20m")],
        },
    ]
    result = run_rule_tests([GROUP], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_429_ratio_alert_is_per_tier(tmp_path: Path) -> None:
    requests = gm.REQUESTS_TOTAL
    rejections = gm.REJECTIONS_TOTAL
    series = [
        _processor(requests, POD_A, "0+100x40", model="llama-70b", tier="premium", tenant="acme", outcome="admitted"),
        _processor(requests, POD_A, "0+100x40", model="llama-8b", tier="standard", tenant="acme", outcome="admitted"),
        # 25 of premium's 100 a minute run out of tokens; standard's single 401 a minute is no 429.
        _processor(rejections, POD_A, "0+25x40", reason="tokens_per_minute", model="llama-70b"),
        _processor(rejections, POD_A, "0+1x40", reason="unauthenticated", model="llama-8b"),
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                _alerts("InferplaneGatewayThrottlingHigh", "10m"),
                _alerts("InferplaneGatewayThrottlingHigh", "25m", _alert("InferplaneGatewayThrottlingHigh")),
            ],
        }
    ]
    result = run_rule_tests([GROUP], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_processor_errors_and_admission_queue_time_alert(tmp_path: Path) -> None:
    buckets = gm.QUEUE_SECONDS + "_bucket"
    # llama-70b's requests wait between 1 and 2.5 s: p95 above half its 2 s timeout; llama-8b's do not wait.
    slow = [
        _processor(buckets, POD_A, "0+0x30", model="llama-70b", le="0.5"),
        _processor(buckets, POD_A, "0+0x30", model="llama-70b", le="1.0"),
        _processor(buckets, POD_A, "0+10x30", model="llama-70b", le="2.5"),
        _processor(buckets, POD_A, "0+10x30", model="llama-70b", le="+Inf"),
        _processor(buckets, POD_A, "0+10x30", model="llama-8b", le="0.005"),
        _processor(buckets, POD_A, "0+10x30", model="llama-8b", le="+Inf"),
        _processor(gm.PROCESSOR_ERRORS_TOTAL, POD_B, "0+3x30", stage="redis"),
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": slow,
            "alert_rule_test": [
                _alerts("InferplaneGatewayQueueWaitHigh", "20m", _alert("InferplaneGatewayQueueWaitHigh")),
                _alerts("InferplaneGatewayProcessorErrors", "3m"),
                _alerts(
                    "InferplaneGatewayProcessorErrors",
                    "10m",
                    _alert(
                        "InferplaneGatewayProcessorErrors",
                        {"stage": "redis"},
                        summary="gateway: the processor fails at stage redis",
                    ),
                ),
            ],
        }
    ]
    result = run_rule_tests([GROUP], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_wake_query_activates_a_scaled_to_zero_models_scaled_object(tmp_path: Path) -> None:
    """KEDA activates a ScaledObject (0 -> 1 replica) when a trigger's value exceeds its activationThreshold."""
    spec = stack_spec("dev")
    model = next(m for m in spec.models if m.scale_to_zero)
    sizing = next(d for d in size_platform(spec).deployments if d.name == model.name)
    policy = autoscaling_policy(
        sizing.result,
        engine=model.engine,
        min_replicas=model.min_replicas,
        max_replicas=model.max_replicas,
        scale_to_zero=True,
        scrape_interval_seconds=15,
    )
    scaled = scaled_object_spec(
        policy,
        ModelSeries(model.name, model.engine, "inference", model.name),
        prometheus_url="http://prometheus:9090",
        wake_query=wake_query(model.name),
    )
    manifest = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"}, "spec": scaled}
    assert crd_errors(json.loads(json.dumps(manifest))) == []
    assert scaled["minReplicaCount"] == 0
    wake = next(t for t in scaled["triggers"] if t["name"] == "wake")["metadata"]
    activation = f"({wake['query']}) > {wake['activationThreshold']}"
    pending = gm.PENDING_REQUESTS
    series = [
        # No replica: the engine's queue series do not exist. One request waits on replica B from minute 5.
        _processor(pending, POD_A, "0x20", model=model.name),
        _processor(pending, POD_B, "0x4 1x15", model=model.name),
        _processor(pending, POD_B, "7x20", model="some-other-model"),
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {"expr": activation, "eval_time": "3m", "exp_samples": []},
                {"expr": activation, "eval_time": "6m", "exp_samples": [{"labels": "{}", "value": 1}]},
            ],
        }
    ]
    result = run_rule_tests([], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_panels_cover_requests_rejections_tokens_and_cost(tmp_path: Path) -> None:
    cost = ModelCost(series=ModelSeries("llama-70b", "vllm", "inference", "llama-70b"), replica_hourly_usd=49.2)
    dashboard = gateway_dashboard(SERIES, {"llama-70b": cost})
    titles = [p.title for p in dashboard.panels]
    assert titles == [
        "Requests",
        "Rejections by reason",
        "Tokens per tenant",
        "Requests in flight and pending",
        "Routing decisions by reason",
        "Prefix hit ratio: estimated vs engine",
        "In flight per replica",
        "Ready replicas and admission capacity",
        "$ per 1k tokens",
        "Gateway CPU per request",
    ]
    rendered = json.loads(dashboard.to_json())
    expressions = [t["expr"] for p in rendered["panels"] for t in p["targets"]]
    assert any(f"sum by (reason) (rate({gm.REJECTIONS_TOTAL}" in e for e in expressions)
    assert any(f"sum by (tenant) (rate({gm.TOKENS_TOTAL}" in e for e in expressions)
    routing = {p["title"]: [(t["expr"], t["legendFormat"]) for t in p["targets"]] for p in rendered["panels"][4:8]}
    assert routing == {
        "Routing decisions by reason": [
            (f"sum by (reason) (rate(inferplane_gateway_routing_decisions_total{{{PODS}}}[5m]))", "{{reason}}")
        ],
        "Prefix hit ratio: estimated vs engine": [
            (f"{PREFIX_HIT_RATIO_ESTIMATED}{{{RECORDED}}}", "estimated {{model}}"),
            (f"{PREFIX_HIT_RATIO_ENGINE}{{{RECORDED}}}", "engine {{model}}"),
        ],
        "In flight per replica": [
            (
                f"sum by (model, endpoint) (inferplane_gateway_endpoint_inflight_requests{{{PODS}}})",
                "{{model}} {{endpoint}}",
            )
        ],
        "Ready replicas and admission capacity": [
            (f"max by (model) (inferplane_gateway_ready_endpoints{{{PODS}}})", "ready {{model}}"),
            (f"max by (model) (inferplane_gateway_admission_capacity{{{PODS}}})", "capacity {{model}}"),
        ],
    }
    assert [p["fieldConfig"]["defaults"]["unit"] for p in rendered["panels"][4:8]] == [
        "reqps",
        "percentunit",
        "short",
        "short",
    ]
    assert expressions[-4].startswith("(49.2 * sum(kube_deployment_status_replicas_available")
    assert expressions[-3] == f"{PROCESSOR_CPU_PER_REQUEST}{{{RECORDED}}}"
    assert expressions[-2] == f"{ENVOY_CPU_PER_REQUEST}{{{RECORDED}}}"
    assert expressions[-1] == (
        f"sum by (stage) (rate({gm.PROCESSOR_STAGE_CPU_SECONDS_TOTAL}{{{PODS}}}[5m])) / on() group_left() "
        f"sum(rate({gm.REQUESTS_TOTAL}{{{PODS}}}[5m]))"
    )
    result = check_expressions(expressions, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [p.title for p in gateway_dashboard(SERIES, {}).panels] == [*titles[:-2], titles[-1]]
    # A tier routed by difficulty adds its strong share after the routing panels.
    routed = json.loads(gateway_dashboard(SERIES, {}, difficulty=True).to_json())["panels"]
    assert [p["title"] for p in routed][8] == "Difficulty routes: strong share per tier"
    # A tier with a hosted provider adds the share handed out and the providers' cost.
    provided = json.loads(gateway_dashboard(SERIES, {}, providers=True).to_json())["panels"]
    assert [p["title"] for p in provided][8] == "Hosted providers: share per tier, $ per hour"
    provider_exprs = [t["expr"] for t in provided[8]["targets"]]
    assert provider_exprs == [
        f"sum by (tier) (rate(inferplane_gateway_provider_requests_total{{{PODS}}}[5m])) / "
        f"sum by (tier) (rate(inferplane_gateway_requests_total{{{PODS}}}[5m]))",
        f"sum by (provider) (rate(inferplane_gateway_provider_cost_usd_total{{{PODS}}}[5m])) * 3600",
    ]
    assert check_expressions(provider_exprs, tmp_path).returncode == 0
    total = f"sum by (tier) (rate(inferplane_gateway_difficulty_routes_total{{{PODS}}}[5m]))"
    assert [(t["expr"], t["legendFormat"]) for t in routed[8]["targets"]] == [
        (
            f'sum by (tier) (rate(inferplane_gateway_difficulty_routes_total{{{PODS},decision!="cheap"}}[5m])) / '
            f"{total}",
            "strong {{tier}}",
        ),
        (
            f'sum by (tier) (rate(inferplane_gateway_difficulty_routes_total{{{PODS},decision="unscored"}}[5m])) / '
            f"{total}",
            "unscored {{tier}}",
        ),
    ]


def test_a_gateway_of_many_models_gets_a_cost_query_each() -> None:
    """One cost query per model: past 26 models the query ids go on as Grafana numbers them (AA, AB, ...)."""
    names = [f"model-{index:02d}" for index in range(30)]
    costs = {
        name: ModelCost(series=ModelSeries(name, "vllm", "inference", name), replica_hourly_usd=1.0) for name in names
    }
    (cost_panel,) = (p for p in gateway_dashboard(SERIES, costs).panels if p.title == "$ per 1k tokens")
    assert [t.legend for t in cost_panel.targets] == names
    assert [t.ref_id for t in cost_panel.targets] == [*"ABCDEFGHIJKLMNOPQRSTUVWXYZ", "AA", "AB", "AC", "AD"]


def _routing_rules() -> list[tuple[str, str | None, str]]:
    """(record or alert, model label, expression) of the gateway group's prefix-routing rules, in order."""
    names = {PREFIX_HIT_RATIO_ESTIMATED, PREFIX_HIT_RATIO_ENGINE}
    alerts = {"InferplanePrefixIndexDrift", "InferplaneNoReadyReplica", "InferplaneSlotStoreDown"}
    return [
        (r.record if isinstance(r, RecordingRule) else r.alert, r.labels.get("model"), r.expr)
        for r in GROUP.rules
        if (isinstance(r, RecordingRule) and r.record in names) or (isinstance(r, AlertingRule) and r.alert in alerts)
    ]


def test_the_routing_rules_follow_each_models_engine_and_scale_to_zero() -> None:
    """vLLM models get the engines' hit ratio and the drift alert, the Triton model neither (TensorRT-LLM exports no
    hit ratio); every model but the scale-to-zero one gets the no-ready-replica alert; one slot-store alert."""
    tokens = "inferplane_gateway_prefix_tokens_total"
    estimated = (
        f'sum by (model) (rate({tokens}{{{PODS},kind="matched"}}[5m])) / '
        f'sum by (model) (rate({tokens}{{{PODS},kind="queried"}}[5m]))'
    )

    def engine(model: str) -> str:
        selector = f'namespace="inference",pod=~"{model}-[a-z0-9]+-[a-z0-9]+",model_name="{model}"'
        return (
            f"sum(rate(vllm:prefix_cache_hits_total{{{selector}}}[5m])) / "
            f"sum(rate(vllm:prefix_cache_queries_total{{{selector}}}[5m]))"
        )

    def drift(model: str) -> str:
        selector = f'{RECORDED},model="{model}"'
        est = f"inferplane:gateway_prefix_hit_ratio_estimated:rate5m{{{selector}}}"
        return f"{est} > 0.5 and inferplane:gateway_prefix_hit_ratio_engine:rate5m{{{selector}}} < 0.5 * {est}"

    def ready(model: str) -> str:
        return f'sum(inferplane_gateway_ready_endpoints{{{PODS},model="{model}"}}) == 0'

    assert _routing_rules() == [
        ("inferplane:gateway_prefix_hit_ratio_estimated:rate5m", None, estimated),
        ("inferplane:gateway_prefix_hit_ratio_engine:rate5m", "llama-70b", engine("llama-70b")),
        ("InferplanePrefixIndexDrift", "llama-70b", drift("llama-70b")),
        ("inferplane:gateway_prefix_hit_ratio_engine:rate5m", "mistral-7b", engine("mistral-7b")),
        ("InferplanePrefixIndexDrift", "mistral-7b", drift("mistral-7b")),
        ("InferplaneNoReadyReplica", "llama-70b", ready("llama-70b")),
        ("InferplaneNoReadyReplica", "llama-8b", ready("llama-8b")),
        (
            "InferplaneSlotStoreDown",
            None,
            f"sum(rate(inferplane_gateway_slot_store_fallbacks_total{{{PODS}}}[5m])) > 0",
        ),
    ]
    assert (VLLM_PREFIX_CACHE_HITS, VLLM_PREFIX_CACHE_QUERIES) == (
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
    )
    severities = {r.alert: (r.labels["severity"], r.for_) for r in GROUP.rules if isinstance(r, AlertingRule)}
    assert severities["InferplanePrefixIndexDrift"] == ("warning", "15m")
    assert severities["InferplaneNoReadyReplica"] == ("critical", "5m")
    assert severities["InferplaneSlotStoreDown"] == ("warning", "5m")


def test_the_queue_wait_alert_explains_the_shared_cap() -> None:
    (rule, *_) = (r for r in GROUP.rules if isinstance(r, AlertingRule) and r.alert == "InferplaneGatewayQueueWaitHigh")
    assert rule.annotations["description"].startswith(
        "The in-flight cap (max_num_seqs 24 x the ready replicas, shared by every gateway replica through Redis)"
    )


def test_the_prefix_drift_alert_fires_when_the_engines_hit_far_less_than_estimated(tmp_path: Path) -> None:
    tokens = gm.PREFIX_TOKENS_TOTAL
    hits, queries = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"

    def case(matched: str, engine_hits: str) -> list[dict[str, str]]:
        # Two gateway replicas look up 1000 prompt tokens a minute each; the engines look up 2000 a minute.
        return [
            *(_processor(tokens, pod, "0+1000x40", model="llama-70b", kind="queried") for pod in (POD_A, POD_B)),
            *(_processor(tokens, pod, matched, model="llama-70b", kind="matched") for pod in (POD_A, POD_B)),
            _engine(queries, VLLM_POD, "0+2000x40"),
            _engine(hits, VLLM_POD, engine_hits),
            # Another model's engine hits nothing: it is not llama-70b's ratio.
            _engine(queries, "mistral-7b-6c8d9f7b5-r4t5y", "0+2000x40", model="mistral-7b"),
        ]

    def test(series: list[dict[str, str]], *expected: dict[str, Any]) -> dict[str, Any]:
        at_10m = _alerts("InferplanePrefixIndexDrift", "10m")  # pending for 15m first
        at_25m = _alerts("InferplanePrefixIndexDrift", "25m", *expected)
        return {"interval": "1m", "input_series": series, "alert_rule_test": [at_10m, at_25m]}

    tests = [
        # Estimated 80 %, real 20 %: under half of it.
        test(case("0+800x40", "0+400x40"), _alert("InferplanePrefixIndexDrift")),
        # Mutations: the real ratio healthy (60 % of 80 %), or the router expecting few hits (30 %, real 10 %).
        test(case("0+800x40", "0+1200x40")),
        test(case("0+300x40", "0+200x40")),
    ]
    result = run_rule_tests([GROUP], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_ready_replica_fires_when_no_gateway_replica_sees_one(tmp_path: Path) -> None:
    ready = gm.READY_ENDPOINTS
    both_lost = [
        _processor(ready, POD_A, "2x2 0x20", model="llama-70b"),
        _processor(ready, POD_B, "2x2 0x20", model="llama-70b"),
        _processor(ready, POD_A, "1x22", model="llama-8b"),
        # Scaled to zero while idle: never an alert.
        _processor(ready, POD_A, "0x22", model="mistral-7b"),
    ]
    # Mutation: one gateway replica still sees a replica.
    one_sees = [*both_lost[:1], _processor(ready, POD_B, "1x22", model="llama-70b")]
    tests = [
        {
            "interval": "1m",
            "input_series": both_lost,
            "alert_rule_test": [
                _alerts("InferplaneNoReadyReplica", "6m"),  # zero from minute 3, pending for 5m
                _alerts("InferplaneNoReadyReplica", "12m", _alert("InferplaneNoReadyReplica")),
            ],
        },
        {"interval": "1m", "input_series": one_sees, "alert_rule_test": [_alerts("InferplaneNoReadyReplica", "12m")]},
    ]
    result = run_rule_tests([GROUP], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_slot_store_alert_fires_while_fallbacks_rise(tmp_path: Path) -> None:
    fallbacks = gm.SLOT_STORE_FALLBACKS_TOTAL
    tests = [
        {
            "interval": "1m",
            "input_series": [_processor(fallbacks, POD_A, "0+30x20", model="llama-70b")],
            "alert_rule_test": [
                _alerts("InferplaneSlotStoreDown", "3m"),
                _alerts("InferplaneSlotStoreDown", "10m", _alert("InferplaneSlotStoreDown")),
            ],
        },
        {
            # Mutation: fallbacks from an earlier outage, none since.
            "interval": "1m",
            "input_series": [_processor(fallbacks, POD_A, "30x20", model="llama-70b")],
            "alert_rule_test": [_alerts("InferplaneSlotStoreDown", "15m")],
        },
    ]
    result = run_rule_tests([GROUP], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cpu_per_request_alert_fires_when_it_doubles_against_a_day_before(tmp_path: Path) -> None:
    """2 requests a second for a day at 10 ms of processor CPU each, then 30 ms: the alert fires once the tripled
    figure has held 30 minutes; the same traffic at a steady 10 ms, or the tripled one at 0.5 requests a second (below
    the alert's floor, where watching the replicas dominates), never fires."""
    step, day = 2, 720  # a sample every 2 minutes (promtool evaluates every rule at each); a day of them

    def cpu(per_request_s: float, requests_per_step: float) -> str:
        before, after = 0.010 * requests_per_step, per_request_s * requests_per_step
        return f"0+{before:g}x{day} {before * day + after:g}+{after:g}x60"

    def load(per_request_s: float, requests_per_second: float) -> list[dict[str, str]]:
        per_step = 60 * step * requests_per_second
        requests = f"0+{per_step:g}x{day + 60}"
        return [
            _processor(
                gm.REQUESTS_TOTAL, POD_A, requests, model="llama-70b", tier="premium", tenant="acme", outcome="admitted"
            ),
            _processor(gm.PROCESSOR_CPU_SECONDS_TOTAL, POD_A, cpu(per_request_s, per_step)),
        ]

    name, minutes = "InferplaneGatewayCpuPerRequestDoubled", day * step
    tests = [
        {
            "interval": f"{step}m",
            "input_series": load(0.030, 2.0),
            "alert_rule_test": [_alerts(name, f"{minutes + 20}m"), _alerts(name, f"{minutes + 60}m", _alert(name))],
        },
        {
            "interval": f"{step}m",
            "input_series": load(0.010, 2.0),
            "alert_rule_test": [_alerts(name, f"{minutes + 60}m")],
        },
        {
            "interval": f"{step}m",
            "input_series": load(0.030, 0.5),
            "alert_rule_test": [_alerts(name, f"{minutes + 60}m")],
        },
    ]
    result = run_rule_tests([_alone(GROUP, name)], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _cadvisor(pod: str, values: str, metrics_path: str = "/metrics/cadvisor") -> dict[str, str]:
    """Envoy's container CPU as kube-prometheus-stack's kubelet scrape stores it (cAdvisor's labels kept)."""
    labels = {
        "namespace": "inference",
        "pod": pod,
        "container": "envoy",
        "job": "kubelet",
        "metrics_path": metrics_path,
    }
    series = f"{CONTAINER_CPU_USAGE_SECONDS_TOTAL}{{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    return {"series": series, "values": values}


def test_envoys_cpu_counts_in_the_gateways_cpu_per_request(tmp_path: Path) -> None:
    """2 requests a second for a day at 1/128 s (7.8 ms) of processor and as much of Envoy CPU each, then Envoy alone
    at 4/128 s (a config whose every chunk costs it more; powers of two, so promtool's float comparison is exact): the
    alert fires though the processor's figure never moved. The recorded figures read Envoy's cAdvisor series once (the
    kubelet's ``/metrics/resource`` copy of the same counter is not added) and the gateway's is their sum."""
    step, day = 2, 720
    per_step = 60 * step * 2.0

    def cpu(before_s: float, after_s: float) -> str:
        before, after = before_s * per_step, after_s * per_step
        return f"0+{before:g}x{day} {before * day + after:g}+{after:g}x60"

    series = [
        _processor(
            gm.REQUESTS_TOTAL, POD_A, f"0+{per_step:g}x{day + 60}", model="llama-70b", tier="premium", tenant="acme",
            outcome="admitted",
        ),
        _processor(gm.PROCESSOR_CPU_SECONDS_TOTAL, POD_A, cpu(1 / 128, 1 / 128)),
        _cadvisor(POD_A, cpu(1 / 128, 4 / 128)),
        _cadvisor(POD_A, cpu(1 / 128, 4 / 128), metrics_path="/metrics/resource"),
    ]  # fmt: skip
    name, minutes = "InferplaneGatewayCpuPerRequestDoubled", day * step
    rules = gateway_rule_group(SERIES, CONFIG)
    recorded = [r for r in rules.rules if isinstance(r, RecordingRule) and "cpu_per_request" in r.record]
    group = rules.model_copy(update={"rules": (*recorded, *_alone(rules, name).rules[-1:])})
    at = f"{minutes + 60}m"
    tests = [
        {
            "interval": f"{step}m",
            "input_series": series,
            "alert_rule_test": [_alerts(name, f"{minutes + 20}m"), _alerts(name, at, _alert(name))],
            "promql_expr_test": [
                {
                    "expr": f"{record}{{{RECORDED}}}",
                    "eval_time": at,
                    "exp_samples": [{"labels": labels, "value": value}],
                }
                for record, value in (
                    (PROCESSOR_CPU_PER_REQUEST, 1 / 128),
                    (ENVOY_CPU_PER_REQUEST, 4 / 128),
                    (GATEWAY_CPU_PER_REQUEST, 5 / 128),
                )
                for labels in [f"{record}{{{RECORDED}}}"]
            ],
        },
    ]
    result = run_rule_tests([group], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _alone(group: RuleGroup, alert: str) -> RuleGroup:
    """The group with only ``alert`` and the recording rules its expression reads, in their order: promtool evaluates
    every rule of the file at every step, and over a day of steps the other 19 rules took most of this module's
    time (what the test asserts is this alert alone)."""
    (rule,) = [r for r in group.rules if isinstance(r, AlertingRule) and r.alert == alert]
    read = [r for r in group.rules if isinstance(r, RecordingRule) and r.record in rule.expr]
    assert read, f"{alert} reads no recorded series"
    return group.model_copy(update={"rules": (*read, rule)})


def test_the_stage_panel_divides_each_stages_cpu_by_the_requests(tmp_path: Path) -> None:
    """4 requests a second; the tokenizer spends 1/128 s of each (7.8 ms), the parse 1/1024 s (1 ms; powers of two, so
    promtool's float comparison is exact): the panel's query reads them by stage, two pods' worth summed."""
    requests = "0+240x20"  # a minute's worth a step: 4 a second
    series = [
        _processor(gm.REQUESTS_TOTAL, pod, requests, model="llama-70b", tier="premium", tenant="acme", outcome="x")
        for pod in (POD_A, POD_B)
    ] + [
        _processor(gm.PROCESSOR_STAGE_CPU_SECONDS_TOTAL, pod, f"0+{seconds:g}x20", stage=stage)
        for pod in (POD_A, POD_B)
        for stage, seconds in (("tokenize", 240 / 128), ("parse", 240 / 1024))
    ]
    expr = SERIES.stage_cpu_per_request()
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": expr,
                    "eval_time": "10m",
                    "exp_samples": [
                        {"labels": '{stage="parse"}', "value": 1 / 1024},
                        {"labels": '{stage="tokenize"}', "value": 1 / 128},
                    ],
                }
            ],
        }
    ]
    result = run_rule_tests([], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


PROVIDED = CONFIG.model_copy(
    update={
        "tiers": (CONFIG.tiers[0].model_copy(update={"providers": ("hosted",)}), *CONFIG.tiers[1:]),
        "providers": (
            ProviderConfig(
                name="hosted", model="m", input_usd_per_million=1, output_usd_per_million=2, tenants=("acme",)
            ),
        ),
    }
)
"""The test config with the premium tier falling back to hosted provider ``hosted``."""
PROVIDED_GROUP = gateway_rule_group(SERIES, PROVIDED)


def test_provider_alerts_exist_only_where_a_tier_has_a_provider(tmp_path: Path) -> None:
    names = [r.alert for r in PROVIDED_GROUP.rules if isinstance(r, AlertingRule) and "Provider" in r.alert]
    assert names == ["InferplaneProviderShareHigh", "InferplaneProviderErrors"]
    assert not [r for r in GROUP.rules if isinstance(r, AlertingRule) and "Provider" in r.alert]
    result = check_rules([PROVIDED_GROUP], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_provider_share_alert_fires_when_a_tier_leans_on_its_provider(tmp_path: Path) -> None:
    """Premium decides 10 requests a second; 2 a second (20%) go to the provider for 20 minutes: the alert fires
    after its 15; at 0.5 a second (5%) it stays quiet."""
    decided = _processor(
        gm.REQUESTS_TOTAL, POD_A, "0+600x30", tier="premium", model="llama-70b", tenant="acme", outcome="admitted"
    )

    def handed(per_minute: int) -> dict[str, str]:
        return _processor(
            gm.PROVIDER_REQUESTS_TOTAL,
            POD_A,
            f"0+{per_minute}x30",
            provider="hosted",
            tier="premium",
            tenant="acme",
            reason="saturated",
        )

    fired_alert = fired(PROVIDED_GROUP, "InferplaneProviderShareHigh", {"tier": "premium"})
    tests = [
        {
            "interval": "1m",
            "input_series": [decided, handed(120)],
            "alert_rule_test": [
                _alerts("InferplaneProviderShareHigh", "10m"),
                _alerts("InferplaneProviderShareHigh", "25m", fired_alert),
            ],
        },
        {
            "interval": "1m",
            "input_series": [decided, handed(30)],
            "alert_rule_test": [_alerts("InferplaneProviderShareHigh", "25m")],
        },
    ]
    result = run_rule_tests([PROVIDED_GROUP], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_provider_error_alert_fires_on_a_providers_5xx_only(tmp_path: Path) -> None:
    """10% of the provider cluster's attempts answer 5xx for 10 minutes: the alert fires naming the cluster; the
    same 5xx ratio on a model's own cluster does not fire it."""

    def cluster(name: str, total: int, errors: int) -> list[dict[str, str]]:
        return [
            _envoy("envoy_cluster_upstream_rq_total", POD_A, f"0+{total}x20", envoy_cluster_name=name),
            _envoy(
                "envoy_cluster_upstream_rq_xx",
                POD_A,
                f"0+{errors}x20",
                envoy_cluster_name=name,
                envoy_response_code_class="5",
            ),
        ]

    fired_alert = fired(
        PROVIDED_GROUP,
        "InferplaneProviderErrors",
        {"envoy_cluster_name": "provider-hosted"},
        summary="gateway: hosted provider provider-hosted answers more than 5% 5xx",
    )
    tests = [
        {
            "interval": "1m",
            "input_series": cluster("provider-hosted", 600, 60),
            "alert_rule_test": [_alerts("InferplaneProviderErrors", "12m", fired_alert)],
        },
        {
            "interval": "1m",
            "input_series": cluster("model-llama-70b", 600, 60),
            "alert_rule_test": [_alerts("InferplaneProviderErrors", "12m")],
        },
    ]
    result = run_rule_tests([PROVIDED_GROUP], tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
