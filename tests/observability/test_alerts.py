"""Rules from the spec's SLOs: valid PrometheusRules, and every alert proven by ``promtool test rules`` to fire on
series shaped like the engine's exposition and to stay quiet otherwise. The KEDA query is evaluated the same way."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from inferplane.components.observability.alerts import (
    GPU_TEMPERATURE_ALERT_CELSIUS,
    AlertingRule,
    ModelAlertInputs,
    RuleGroup,
    gpu_rule_group,
    model_rule_group,
)
from inferplane.components.observability.metrics import ModelSeries
from inferplane.components.spec.platform_spec import SloSpec
from tests.crds import errors
from tests.promtool import check_rules, run_rule_tests

VLLM = ModelAlertInputs(
    series=ModelSeries("llama-70b", "vllm", "models", "llama-70b-server"),
    slo=SloSpec(ttft_p95_ms=1500, itl_p95_ms=60),
    target_waiting_per_replica=6,
    max_replicas=8,
    cold_start_seconds=290.4,
)
TRITON = ModelAlertInputs(
    series=ModelSeries("llama-8b", "triton", "models", "llama-8b-server"),
    slo=SloSpec(ttft_p95_ms=800, itl_p95_ms=40),
    target_waiting_per_replica=12,
    max_replicas=8,
    cold_start_seconds=120.0,
)
SGLANG = ModelAlertInputs(
    series=ModelSeries("qwen-7b", "sglang", "models", "qwen-7b"),
    slo=SloSpec(ttft_p95_ms=1000, itl_p95_ms=50),
    target_waiting_per_replica=16,
    max_replicas=4,
    cold_start_seconds=60.0,
)
POD_A = "llama-70b-server-5d8f7c9b4-x2x9z"
POD_B = "llama-70b-server-5d8f7c9b4-q7m4k"
TRT_POD = "llama-8b-server-7c9d5b6f8-lk2pq"


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def vllm_series(metric: str, pod: str, values: str, **extra: str) -> dict[str, str]:
    """A vLLM series as scraped through a PodMonitor: engine labels plus the operator's target labels."""
    labels = {
        "namespace": "models",
        "pod": pod,
        "container": "vllm",
        "endpoint": "http",
        "job": "models/llama-70b-server",
        "instance": f"10.0.1.{len(pod)}:8000",
        "model_name": "llama-70b",
        "engine": "0",
        **extra,
    }
    return {"series": metric + _labels(**labels), "values": values}


def trt_series(metric: str, values: str, model: str = "tensorrt_llm", **extra: str) -> dict[str, str]:
    labels = {"namespace": "models", "pod": TRT_POD, "job": "models/llama-8b-server", "model": model, "version": "1"}
    return {"series": metric + _labels(**labels, **extra), "values": values}


def histogram(
    make: Any, metric: str, buckets: tuple[str, ...], land_in: str, *, per_minute: int, minutes: int
) -> list[dict[str, str]]:
    """Cumulative buckets where every observation lands in bucket ``land_in`` (and every bucket above it)."""
    series = []
    reached = False
    for le in buckets:
        reached = reached or le == land_in
        step = per_minute if reached else 0
        series.append(make(f"{metric}_bucket", f"0+{step}x{minutes}", le=le))
    return series


def ksm(metric: str, values: str, **labels: str) -> dict[str, str]:
    base = {"job": "kube-state-metrics", "namespace": "models", "instance": "10.0.0.9:8080"}
    return {"series": metric + _labels(**base, **labels), "values": values}


def alert_case(name: str, series: list[dict[str, str]], at: str, alerts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": alerts}],
    }


def fired(group: RuleGroup, alert: str, labels: dict[str, str], **rendered: str) -> dict[str, Any]:
    """The alert as promtool expects it: labels, and the rule's annotations (rendered where they use $labels)."""
    rule = next(r for r in group.rules if isinstance(r, AlertingRule) and r.alert == alert)
    annotations = {k: rendered.get(k, v) for k, v in rule.annotations.items()}
    return {"exp_labels": {**rule.labels, **labels}, "exp_annotations": annotations}


VLLM_GROUP = model_rule_group(VLLM)
TRITON_GROUP = model_rule_group(TRITON)
SGLANG_GROUP = model_rule_group(SGLANG)
GPU_GROUP = gpu_rule_group()
MODEL_70B = {"severity": "warning", "model": "llama-70b", "namespace": "models"}
TTFT_BUCKETS = ("0.25", "0.5", "1", "2.5", "5", "+Inf")
ITL_BUCKETS = ("0.01", "0.025", "0.05", "0.1", "0.25", "+Inf")


def test_no_ready_replicas_waits_out_the_cold_start() -> None:
    rule = next(r for r in VLLM_GROUP.rules if isinstance(r, AlertingRule) and r.alert == "InferplaneNoReadyReplicas")
    assert rule.for_ == f"{math.ceil((290.4 + 300) / 60)}m" == "10m"


def test_rule_groups_are_the_expected_rules() -> None:
    names = [getattr(r, "record", None) or getattr(r, "alert", None) for r in VLLM_GROUP.rules]
    assert names == [
        "inferplane:ttft_seconds:p50",
        "inferplane:itl_seconds:p50",
        "inferplane:ttft_seconds:p95",
        "inferplane:itl_seconds:p95",
        "inferplane:ttft_seconds:p99",
        "inferplane:itl_seconds:p99",
        "inferplane:generation_tokens:rate5m",
        "inferplane:prompt_tokens:rate5m",
        "inferplane:queue_depth:sum",
        "inferplane:kv_cache_usage:max",
        "InferplaneTtftP95AboveSlo",
        "InferplaneItlP95AboveSlo",
        "InferplaneKvCacheNearlyFull",
        "InferplanePreemptions",
        "InferplaneQueueAtMaxReplicas",
        "InferplaneNoReadyReplicas",
    ]
    triton = [getattr(r, "alert", None) for r in TRITON_GROUP.rules if isinstance(r, AlertingRule)]
    # TensorRT-LLM exports no inter-token latency and no preemption counter.
    assert triton == [
        "InferplaneTtftP95AboveSlo",
        "InferplaneKvCacheNearlyFull",
        "InferplaneQueueAtMaxReplicas",
        "InferplaneNoReadyReplicas",
    ]
    ttft = next(r for r in VLLM_GROUP.rules if isinstance(r, AlertingRule) and r.alert == "InferplaneTtftP95AboveSlo")
    assert ttft.expr == 'inferplane:ttft_seconds:p95{model="llama-70b",namespace="models"} > 1.5'


def test_promtool_checks_the_rule_files(tmp_path: Path) -> None:
    result = check_rules([VLLM_GROUP, TRITON_GROUP, SGLANG_GROUP, GPU_GROUP], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sum(len(g.rules) for g in (VLLM_GROUP, TRITON_GROUP, SGLANG_GROUP, GPU_GROUP)) == 16 + 11 + 16 + 2
    assert "SUCCESS: 45 rules found" in result.stdout


@pytest.mark.parametrize("group", [VLLM_GROUP, TRITON_GROUP, SGLANG_GROUP, GPU_GROUP], ids=lambda g: g.name)
def test_prometheus_rules_validate_against_the_crd(group: RuleGroup) -> None:
    rule: dict[str, Any] = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "serving-rules", "namespace": "monitoring", "labels": {"inferplane.io/scrape": "true"}},
        "spec": {"groups": [group.render()]},
    }
    assert errors(rule) == []
    rule["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    assert len(errors(rule)) == 1


def _assert_passes(result: Any) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_vllm_latency_alerts_fire_above_the_slo_and_stay_quiet_below(tmp_path: Path) -> None:
    ttft = "vllm:time_to_first_token_seconds"
    itl = "vllm:inter_token_latency_seconds"

    def on_a(metric: str, values: str, **extra: str) -> dict[str, str]:
        return vllm_series(metric, POD_A, values, **extra)

    slow = histogram(on_a, ttft, TTFT_BUCKETS, "5", per_minute=60, minutes=30) + histogram(
        on_a, itl, ITL_BUCKETS, "0.25", per_minute=600, minutes=30
    )
    fast = histogram(on_a, ttft, TTFT_BUCKETS, "0.5", per_minute=60, minutes=30) + histogram(
        on_a, itl, ITL_BUCKETS, "0.05", per_minute=600, minutes=30
    )
    tests = [
        alert_case("InferplaneTtftP95AboveSlo", slow, "20m", [fired(VLLM_GROUP, "InferplaneTtftP95AboveSlo", {})]),
        alert_case("InferplaneItlP95AboveSlo", slow, "20m", [fired(VLLM_GROUP, "InferplaneItlP95AboveSlo", {})]),
        alert_case("InferplaneTtftP95AboveSlo", fast, "20m", []),
        alert_case("InferplaneItlP95AboveSlo", fast, "20m", []),
        # Still pending at 8 minutes: the percentile must stay above the objective for 10.
        alert_case("InferplaneTtftP95AboveSlo", slow, "8m", []),
        {
            "name": "recorded percentiles",
            "interval": "1m",
            "input_series": slow,
            "promql_expr_test": [
                # All observations in (2.5, 5]: linear interpolation puts p95 at 2.5 + 0.95 x 2.5.
                {
                    "expr": 'inferplane:ttft_seconds:p95{model="llama-70b"}',
                    "eval_time": "20m",
                    "exp_samples": [{"labels": _recorded("inferplane:ttft_seconds:p95"), "value": 4.875}],
                }
            ],
        },
    ]
    _assert_passes(run_rule_tests([VLLM_GROUP], tests, tmp_path))


def _recorded(name: str, model: str = "llama-70b") -> str:
    return name + _labels(model=model, namespace="models")


def test_kv_cache_alert_needs_five_minutes_above_95_percent(tmp_path: Path) -> None:
    kv = "vllm:kv_cache_usage_perc"
    full = [vllm_series(kv, POD_A, "0.5x5 0.97x20"), vllm_series(kv, POD_B, "0.4x25")]
    spike = [vllm_series(kv, POD_A, "0.5x5 0.97x3 0.5x20"), vllm_series(kv, POD_B, "0.4x25")]
    tests = [
        alert_case("InferplaneKvCacheNearlyFull", full, "15m", [fired(VLLM_GROUP, "InferplaneKvCacheNearlyFull", {})]),
        alert_case("InferplaneKvCacheNearlyFull", spike, "15m", []),
        alert_case("InferplaneKvCacheNearlyFull", full, "9m", []),
    ]
    _assert_passes(run_rule_tests([VLLM_GROUP], tests, tmp_path))


def test_any_preemption_fires(tmp_path: Path) -> None:
    counter = "vllm:num_preemptions_total"
    preempting = [vllm_series(counter, POD_A, "0x10 1+1x10"), vllm_series(counter, POD_B, "3x20")]
    steady = [vllm_series(counter, POD_A, "5x20"), vllm_series(counter, POD_B, "3x20")]
    tests = [
        alert_case("InferplanePreemptions", preempting, "15m", [fired(VLLM_GROUP, "InferplanePreemptions", {})]),
        alert_case("InferplanePreemptions", steady, "15m", []),
    ]
    _assert_passes(run_rule_tests([VLLM_GROUP], tests, tmp_path))


def _hpa(current: int, maximum: int) -> list[dict[str, str]]:
    hpa = "keda-hpa-llama-70b-server"
    return [
        ksm("kube_horizontalpodautoscaler_status_current_replicas", f"{current}x30", horizontalpodautoscaler=hpa),
        ksm("kube_horizontalpodautoscaler_spec_max_replicas", f"{maximum}x30", horizontalpodautoscaler=hpa),
    ]


def test_queue_alert_fires_only_at_the_replica_ceiling(tmp_path: Path) -> None:
    waiting = "vllm:num_requests_waiting"
    # Target 6 per replica x 8 replicas = 48 waiting is what the ceiling absorbs.
    deep = [vllm_series(waiting, POD_A, "30x30"), vllm_series(waiting, POD_B, "25x30")]
    shallow = [vllm_series(waiting, POD_A, "20x30"), vllm_series(waiting, POD_B, "20x30")]
    at_ceiling = {**MODEL_70B, "severity": "critical"}
    tests = [
        alert_case(
            "InferplaneQueueAtMaxReplicas",
            deep + _hpa(8, 8),
            "15m",
            [fired(VLLM_GROUP, "InferplaneQueueAtMaxReplicas", at_ceiling)],
        ),
        # Still room to scale: KEDA handles it.
        alert_case("InferplaneQueueAtMaxReplicas", deep + _hpa(7, 8), "15m", []),
        # At the ceiling but the queue is within target.
        alert_case("InferplaneQueueAtMaxReplicas", shallow + _hpa(8, 8), "15m", []),
    ]
    _assert_passes(run_rule_tests([VLLM_GROUP], tests, tmp_path))


def test_no_ready_replicas_fires_only_when_replicas_are_wanted(tmp_path: Path) -> None:
    def deployment(available: int, desired: int) -> list[dict[str, str]]:
        return [
            ksm("kube_deployment_status_replicas_available", f"{available}x30", deployment="llama-70b-server"),
            ksm("kube_deployment_spec_replicas", f"{desired}x30", deployment="llama-70b-server"),
            # Another Deployment in the namespace, healthy, must not mask or trigger anything.
            ksm("kube_deployment_status_replicas_available", "1x30", deployment="llama-70b-server-canary"),
        ]

    down = {**MODEL_70B, "severity": "critical"}
    tests = [
        alert_case(
            "InferplaneNoReadyReplicas",
            deployment(0, 2),
            "15m",
            [fired(VLLM_GROUP, "InferplaneNoReadyReplicas", down)],
        ),
        # Within cold start + 5 minutes: a replica may still be loading weights.
        alert_case("InferplaneNoReadyReplicas", deployment(0, 2), "9m", []),
        # Scaled to zero on purpose.
        alert_case("InferplaneNoReadyReplicas", deployment(0, 0), "15m", []),
        alert_case("InferplaneNoReadyReplicas", deployment(2, 2), "15m", []),
    ]
    _assert_passes(run_rule_tests([VLLM_GROUP], tests, tmp_path))


def test_keda_query_counts_this_deployments_waiting_requests_only(tmp_path: Path) -> None:
    waiting = "vllm:num_requests_waiting"
    series = [
        vllm_series(waiting, POD_A, "0x5 7x10"),
        vllm_series(waiting, POD_B, "0x5 5x10"),
        # Same served name in another Deployment (a canary) and another model in this one: never counted.
        vllm_series(waiting, "llama-70b-server-canary-6b7f9d8c5-z8x7w", "100x15"),
        vllm_series(waiting, POD_A, "50x15", model_name="other-model"),
    ]
    query = VLLM.series.queue_depth()
    tests = [
        {
            "name": "keda query",
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {"expr": query, "eval_time": "3m", "exp_samples": [{"labels": "{}", "value": 0}]},
                {"expr": query, "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 12}]},
                {
                    "expr": "inferplane:queue_depth:sum",
                    "eval_time": "10m",
                    "exp_samples": [{"labels": _recorded("inferplane:queue_depth:sum"), "value": 12}],
                },
            ],
        }
    ]
    _assert_passes(run_rule_tests([VLLM_GROUP], tests, tmp_path))


def test_triton_rules_fire_on_tensorrt_llm_series(tmp_path: Path) -> None:
    def make(metric: str, values: str, **extra: str) -> dict[str, str]:
        # The ensemble clients call is named after the served model (the OpenAI frontend's model name).
        return trt_series(metric, values, model="llama-8b", **extra)

    first = "nv_inference_first_response_histogram_ms"
    buckets = ("100", "250", "500", "1000", "2500", "+Inf")
    slow = histogram(make, first, buckets, "2500", per_minute=120, minutes=30)
    fast = histogram(make, first, buckets, "250", per_minute=120, minutes=30)
    # The engine model's own first responses (no tokenization, no queue in the ensemble) are not the client's TTFT.
    engine_fast = histogram(trt_series, first, buckets, "100", per_minute=120, minutes=30)
    kv = "nv_trt_llm_kv_cache_block_metrics"
    full = [
        trt_series(kv, "0.99x30", kv_cache_block_type="fraction"),
        trt_series(kv, "9000x30", kv_cache_block_type="used"),
    ]
    roomy = [
        trt_series(kv, "0.6x30", kv_cache_block_type="fraction"),
        trt_series(kv, "9000x30", kv_cache_block_type="used"),
    ]
    waiting = [
        trt_series("nv_trt_llm_request_metrics", "40x30", request_type="waiting"),
        trt_series("nv_trt_llm_request_metrics", "48x30", request_type="active"),
    ]
    model = {"severity": "warning", "model": "llama-8b", "namespace": "models"}
    tests = [
        alert_case("InferplaneTtftP95AboveSlo", slow, "20m", [fired(TRITON_GROUP, "InferplaneTtftP95AboveSlo", {})]),
        alert_case("InferplaneTtftP95AboveSlo", fast, "20m", []),
        alert_case(
            "InferplaneKvCacheNearlyFull", full, "10m", [fired(TRITON_GROUP, "InferplaneKvCacheNearlyFull", model)]
        ),
        alert_case("InferplaneKvCacheNearlyFull", roomy, "10m", []),
        {
            "name": "triton queue and ttft",
            "interval": "1m",
            "input_series": slow + engine_fast + waiting,
            "promql_expr_test": [
                {
                    "expr": TRITON.series.queue_depth(),
                    "eval_time": "10m",
                    "exp_samples": [{"labels": "{}", "value": 40}],
                },
                # (1000, 2500] ms, p95 interpolated: 1000 + 0.95 x 1500 = 2425 ms.
                {
                    "expr": "inferplane:ttft_seconds:p95",
                    "eval_time": "20m",
                    "exp_samples": [{"labels": _recorded("inferplane:ttft_seconds:p95", "llama-8b"), "value": 2.425}],
                },
            ],
        },
    ]
    _assert_passes(run_rule_tests([TRITON_GROUP], tests, tmp_path))


SGLANG_POD = "qwen-7b-6b9c8d7f5-p4r8t"


def sglang_series(metric: str, values: str, **extra: str) -> dict[str, str]:
    """An SGLang series as scraped through a PodMonitor: the collector's labels plus the operator's target labels."""
    labels = {
        "namespace": "models",
        "pod": SGLANG_POD,
        "job": "models/qwen-7b",
        "model_name": "qwen-7b",
        "engine_type": "unified",
        "tp_rank": "0",
        **extra,
    }
    return {"series": metric + _labels(**labels), "values": values}


def test_sglang_rules_fire_on_sglang_series(tmp_path: Path) -> None:
    slow = histogram(
        sglang_series, "sglang:time_to_first_token_seconds", TTFT_BUCKETS, "2.5", per_minute=60, minutes=30
    )
    slow_itl = histogram(
        sglang_series, "sglang:inter_token_latency_seconds", ITL_BUCKETS, "0.1", per_minute=600, minutes=30
    )
    fast_itl = histogram(
        sglang_series, "sglang:inter_token_latency_seconds", ITL_BUCKETS, "0.025", per_minute=600, minutes=30
    )
    full = [sglang_series("sglang:token_usage", "0.98x30")]
    roomy = [sglang_series("sglang:token_usage", "0.7x30")]
    retracting = [sglang_series("sglang:num_retracted_requests_total", "0x10 1+1x10")]
    steady = [sglang_series("sglang:num_retracted_requests_total", "4x20")]
    model = {"severity": "warning", "model": "qwen-7b", "namespace": "models"}
    tests = [
        alert_case("InferplaneTtftP95AboveSlo", slow, "20m", [fired(SGLANG_GROUP, "InferplaneTtftP95AboveSlo", {})]),
        alert_case("InferplaneItlP95AboveSlo", slow_itl, "20m", [fired(SGLANG_GROUP, "InferplaneItlP95AboveSlo", {})]),
        alert_case("InferplaneItlP95AboveSlo", fast_itl, "20m", []),
        alert_case(
            "InferplaneKvCacheNearlyFull", full, "10m", [fired(SGLANG_GROUP, "InferplaneKvCacheNearlyFull", model)]
        ),
        alert_case("InferplaneKvCacheNearlyFull", roomy, "10m", []),
        alert_case("InferplanePreemptions", retracting, "15m", [fired(SGLANG_GROUP, "InferplanePreemptions", {})]),
        alert_case("InferplanePreemptions", steady, "15m", []),
        {
            "name": "sglang queue",
            "interval": "1m",
            "input_series": [sglang_series("sglang:num_queue_reqs", "40x30")],
            "promql_expr_test": [
                {
                    "expr": SGLANG.series.queue_depth(),
                    "eval_time": "10m",
                    "exp_samples": [{"labels": "{}", "value": 40}],
                }
            ],
        },
    ]
    _assert_passes(run_rule_tests([SGLANG_GROUP], tests, tmp_path))


def test_gpu_alerts_fire_on_dcgm_series(tmp_path: Path) -> None:
    gpu = {
        "gpu": "3",
        "UUID": "GPU-1b2c3d4e-0000-1111-2222-333344445555",
        "device": "nvidia3",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "ip-10-0-12-34",
        "DCGM_FI_DRIVER_VERSION": "580.95.05",
        "namespace": "models",
        "pod": POD_A,
        "container": "vllm",
    }
    target = {"job": "monitoring/dcgm-exporter", "instance": "10.0.12.34:9400"}

    def dcgm(metric: str, values: str) -> dict[str, str]:
        return {"series": metric + _labels(**gpu, **target), "values": values}

    labels = {**gpu, **target}
    tests = [
        alert_case(
            "InferplaneGpuXidError",
            [dcgm("DCGM_FI_DEV_XID_ERRORS", "0x5 79x10")],
            "10m",
            [fired(GPU_GROUP, "InferplaneGpuXidError", labels, summary="GPU 3 on ip-10-0-12-34 reported XID 79")],
        ),
        alert_case("InferplaneGpuXidError", [dcgm("DCGM_FI_DEV_XID_ERRORS", "0x15")], "10m", []),
        alert_case(
            "InferplaneGpuTemperatureHigh",
            [dcgm("DCGM_FI_DEV_GPU_TEMP", "70x5 90x20")],
            "20m",
            [
                fired(
                    GPU_GROUP,
                    "InferplaneGpuTemperatureHigh",
                    labels,
                    summary="GPU 3 on ip-10-0-12-34 at 90 C",
                )
            ],
        ),
        alert_case(
            "InferplaneGpuTemperatureHigh",
            [dcgm("DCGM_FI_DEV_GPU_TEMP", f"{GPU_TEMPERATURE_ALERT_CELSIUS}x25")],
            "20m",
            [],
        ),
    ]
    _assert_passes(run_rule_tests([GPU_GROUP], tests, tmp_path))
