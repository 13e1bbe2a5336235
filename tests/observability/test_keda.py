"""KEDA: the pinned release, and ScaledObjects on queue depth derived from the sizing, valid against KEDA's CRD."""

from __future__ import annotations

from functools import cache
from typing import Any

import pulumi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity.sizing import PlatformSizing, ServingRole, SizingResult, size_platform
from inferplane.components.observability.keda import (
    KEDA_CHART_VERSION,
    AutoscalingPolicy,
    Keda,
    KedaArgs,
    QueueDepthAutoscaler,
    QueueDepthAutoscalerArgs,
    autoscaling_policy,
    scaled_object_spec,
)
from inferplane.components.observability.metrics import ModelSeries
from inferplane.tool.mockengine import PlatformMocks, evaluate
from inferplane.tool.stackfile import find_project_dir, load_stack
from tests.crds import errors, integral

URL = "http://kube-prometheus-prometheus.monitoring.svc.cluster.local:9090"


@cache
def plan(stack: str) -> PlatformSizing:
    return size_platform(load_stack(find_project_dir(), stack).platform)


def sizing(stack: str, name: str) -> SizingResult:
    return next(d.result for d in plan(stack).deployments if d.name == name)


def scaled_object(spec: dict[str, Any], name: str = "llama-8b-server") -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": "models"},
        "spec": spec,
    }


def test_prod_70b_policy_follows_the_sizing() -> None:
    result = sizing("prod", "llama-70b")
    policy = autoscaling_policy(
        result, engine="vllm", min_replicas=2, max_replicas=8, scale_to_zero=False, scrape_interval_seconds=15
    )
    assert result.vllm.max_num_seqs == 24
    assert policy.target_waiting_per_replica == 6  # a quarter of the 24-sequence batch
    assert policy.scale_down_window_seconds == max(300, 2 * int(-(-result.cold_start_seconds // 1)))
    assert policy.scale_down_window_seconds > result.cold_start_seconds
    assert policy.idle_replicas is None
    assert policy.fallback_replicas == 2


def test_dev_scale_to_zero_uses_min_zero_and_no_idle_count() -> None:
    policy = autoscaling_policy(
        sizing("dev", "llama-8b"),
        engine="vllm",
        min_replicas=0,
        max_replicas=1,
        scale_to_zero=True,
        scrape_interval_seconds=15,
    )
    # idleReplicaCount must be below minReplicaCount: with a minimum of 0, KEDA itself scales to zero.
    assert (policy.min_replicas, policy.idle_replicas, policy.fallback_replicas) == (0, None, 1)
    assert policy.target_waiting_per_replica == 1  # a batch of 4: floor(1.0), never 0


def test_sglang_scales_on_its_queue_against_its_running_request_slots() -> None:
    result = sizing("prod", "llama-70b")
    policy = autoscaling_policy(
        result, engine="sglang", min_replicas=1, max_replicas=4, scale_to_zero=False, scrape_interval_seconds=15
    )
    assert result.sglang.max_running_requests == 24
    assert policy.target_waiting_per_replica == 6  # a quarter of --max-running-requests
    spec = scaled_object_spec(policy, ModelSeries("qwen-7b", "sglang", "models", "qwen-7b"), prometheus_url=URL)
    query = spec["triggers"][0]["metadata"]["query"]
    assert (
        query
        == 'sum(sglang:num_queue_reqs{namespace="models",pod=~"qwen-7b-[a-z0-9]+-[a-z0-9]+",model_name="qwen-7b"})'
    )
    assert spec["triggers"][0]["metadata"]["threshold"] == "6"
    assert errors(scaled_object(spec, "qwen-7b")) == []


def test_scale_to_zero_above_a_minimum_sets_idle_replica_count_zero() -> None:
    policy = autoscaling_policy(
        sizing("prod", "llama-8b"),
        engine="triton",
        min_replicas=2,
        max_replicas=8,
        scale_to_zero=True,
        scrape_interval_seconds=15,
    )
    spec = scaled_object_spec(
        policy, ModelSeries("llama-8b", "triton", "models", "llama-8b-server"), prometheus_url=URL
    )
    assert spec["idleReplicaCount"] == 0 and spec["minReplicaCount"] == 2
    assert errors(scaled_object(spec)) == []


def test_scaled_object_spec_is_exact_and_valid() -> None:
    result = sizing("prod", "llama-8b")
    policy = autoscaling_policy(
        result, engine="triton", min_replicas=2, max_replicas=8, scale_to_zero=False, scrape_interval_seconds=15
    )
    series = ModelSeries("llama-8b", "triton", "models", "llama-8b-server")
    spec = scaled_object_spec(policy, series, prometheus_url=URL)
    window = policy.scale_down_window_seconds
    assert spec == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-8b-server"},
        "pollingInterval": 15,
        "cooldownPeriod": window,
        "minReplicaCount": 2,
        "maxReplicaCount": 8,
        "fallback": {"failureThreshold": 3, "replicas": 2, "behavior": "currentReplicasIfHigher"},
        "advanced": {
            "restoreToOriginalReplicaCount": False,
            "horizontalPodAutoscalerConfig": {
                "behavior": {
                    "scaleUp": {
                        "stabilizationWindowSeconds": 0,
                        "selectPolicy": "Max",
                        "policies": [
                            {"type": "Percent", "value": 100, "periodSeconds": 15},
                            {"type": "Pods", "value": 4, "periodSeconds": 15},
                        ],
                    },
                    "scaleDown": {
                        "stabilizationWindowSeconds": window,
                        "selectPolicy": "Min",
                        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                    },
                }
            },
        },
        "triggers": [
            {
                "type": "prometheus",
                "name": "queue-depth",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": URL,
                    "query": series.queue_depth(),
                    "threshold": str(result.trtllm.max_batch_size // 4),
                    "activationThreshold": "0",
                    "ignoreNullValues": "true",
                },
            }
        ],
    }
    assert errors(scaled_object(spec)) == []


def test_the_crd_check_catches_a_broken_scaled_object() -> None:
    policy = autoscaling_policy(
        sizing("prod", "llama-8b"),
        engine="triton",
        min_replicas=2,
        max_replicas=8,
        scale_to_zero=False,
        scrape_interval_seconds=15,
    )
    spec = scaled_object_spec(policy, ModelSeries("m", "vllm", "ns", "d"), prometheus_url=URL)
    spec["fallback"]["behavior"] = "sometimes"
    spec["triggers"][0]["metadata"]["threshold"] = 6
    del spec["scaleTargetRef"]
    assert errors(scaled_object(spec)) == [
        "spec.fallback.behavior: 'sometimes' is not one of "
        "['static', 'currentReplicas', 'currentReplicasIfHigher', 'currentReplicasIfLower', 'scalingModifiers']",
        "spec.triggers.0.metadata.threshold: 6 is not of type 'string'",
        "spec: 'scaleTargetRef' is a required property",
    ]


def _prod_70b_policy(role: ServingRole) -> AutoscalingPolicy:
    """prod's llama-70b (disaggregated: the model's own server is its decode role) as ``role``, at its decode range."""
    return autoscaling_policy(
        sizing("prod", "llama-70b"),
        engine="vllm",
        min_replicas=2,
        max_replicas=5,
        scale_to_zero=False,
        scrape_interval_seconds=15,
        role=role,
    )


def test_a_decode_role_also_scales_on_its_running_sequences_and_kv_use() -> None:
    result = sizing("prod", "llama-70b")
    policy = _prod_70b_policy("decode")
    series = ModelSeries("llama-70b", "vllm", "models", "llama-70b-server")
    spec = scaled_object_spec(policy, series, prometheus_url=URL)
    selector = 'namespace="models",pod=~"llama-70b-server-[a-z0-9]+-[a-z0-9]+",model_name="llama-70b"'
    assert result.vllm.max_num_seqs == 24
    assert [(t["name"], t["metadata"]["query"], t["metadata"]["threshold"]) for t in spec["triggers"]] == [
        ("queue-depth", f"sum(vllm:num_requests_waiting{{{selector}}})", "6"),
        ("running", f"sum(vllm:num_requests_running{{{selector}}})", "19"),  # floor(0.8 x 24)
        ("kv-usage", f"sum(vllm:kv_cache_usage_perc{{{selector}}})", "0.8"),  # an average of 0.8 a replica
    ]
    assert {t["metricType"] for t in spec["triggers"]} == {"AverageValue"}
    assert errors(scaled_object(spec, "llama-70b-server")) == []


@pytest.mark.parametrize("role", ["aggregated", "prefill"])
def test_aggregated_and_prefill_replicas_scale_on_their_queue_alone(role: ServingRole) -> None:
    policy = _prod_70b_policy(role)
    spec = scaled_object_spec(policy, ModelSeries("m", "vllm", "ns", "d"), prometheus_url=URL)
    assert (policy.target_running_per_replica, policy.target_kv_usage) == (None, None)
    assert [t["name"] for t in spec["triggers"]] == ["queue-depth"]


@settings(max_examples=60, deadline=None)
@given(
    cold_start=st.floats(min_value=1, max_value=3599),
    batch=st.integers(min_value=1, max_value=4096),
    min_replicas=st.integers(min_value=0, max_value=16),
    extra=st.integers(min_value=0, max_value=64),
    scale_to_zero=st.booleans(),
    scrape=st.integers(min_value=5, max_value=120),
    role=st.sampled_from(["aggregated", "prefill", "decode"]),
)
def test_every_policy_scales_on_queue_and_waits_out_the_cold_start(
    *, cold_start: float, batch: int, min_replicas: int, extra: int, scale_to_zero: bool, scrape: int, role: ServingRole
) -> None:
    if min_replicas == 0:
        scale_to_zero = True
    base = sizing("prod", "llama-8b")
    result = base.model_copy(
        update={"cold_start_seconds": cold_start, "vllm": base.vllm.model_copy(update={"max_num_seqs": batch})}
    )
    max_replicas = max(1, min_replicas) + extra
    policy = autoscaling_policy(
        result,
        engine="vllm",
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        scale_to_zero=scale_to_zero,
        scrape_interval_seconds=scrape,
        role=role,
    )
    spec = scaled_object_spec(policy, ModelSeries("m", "vllm", "ns", "d"), prometheus_url=URL)
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] > cold_start
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] <= 3600
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert 1 <= policy.target_waiting_per_replica <= max(1, batch)
    triggers = [t["name"] for t in spec["triggers"]]
    assert triggers == (["queue-depth", "running", "kv-usage"] if role == "decode" else ["queue-depth"])
    assert {t["type"] for t in spec["triggers"]} == {"prometheus"}  # never cpu or memory
    if role == "decode":
        assert 1 <= (policy.target_running_per_replica or 0) <= max(1, batch)
    assert ("idleReplicaCount" in spec) == (scale_to_zero and min_replicas > 0)
    assert spec["fallback"]["replicas"] >= 1
    assert errors(scaled_object(spec)) == []


def test_a_cold_start_beyond_an_hour_cannot_be_autoscaled_down() -> None:
    base = sizing("prod", "llama-70b")
    with pytest.raises(ValueError) as raised:
        autoscaling_policy(
            base.model_copy(update={"cold_start_seconds": 3600.0}),
            engine="vllm",
            min_replicas=1,
            max_replicas=2,
            scale_to_zero=False,
            scrape_interval_seconds=15,
        )
    assert str(raised.value) == (
        "a cold start of 3600s is longer than the longest HPA stabilisation window (3600s); "
        "set min_replicas equal to max_replicas"
    )


def _args(**changes: Any) -> QueueDepthAutoscalerArgs:
    values: dict[str, Any] = {
        "served_model_name": "llama-70b",
        "engine": "vllm",
        "deployment_name": "llama-70b-server",
        "namespace": "models",
        "sizing": sizing("prod", "llama-70b"),
        "min_replicas": 2,
        "max_replicas": 8,
        "scale_to_zero": False,
        "prometheus_url": URL,
    }
    values.update(changes)
    return QueueDepthAutoscalerArgs(**values)


def test_component_registers_one_scaled_object_named_after_the_deployment() -> None:
    def program() -> None:
        QueueDepthAutoscaler("llama-70b-autoscaler", _args())

    result = evaluate(program, mocks=PlatformMocks(), stack="prod")
    assert [(r.type, r.name) for r in result.registrations] == [
        ("inferplane:index:QueueDepthAutoscaler", "llama-70b-autoscaler"),
        ("kubernetes:keda.sh/v1alpha1:ScaledObject", "llama-70b-autoscaler-scaledobject"),
    ]
    component = result.named("llama-70b-autoscaler")
    so = result.named("llama-70b-autoscaler-scaledobject")
    assert so.parent == component.urn
    assert so.inputs["apiVersion"] == "keda.sh/v1alpha1"
    assert so.inputs["metadata"] == {
        "name": "llama-70b-server",
        "namespace": "models",
        "labels": {"app.kubernetes.io/managed-by": "inferplane", "inferplane.io/model": "llama-70b"},
    }
    obj = integral({k: so.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")})
    assert errors(obj) == []
    assert (
        obj["spec"]["triggers"][0]["metadata"]["query"]
        == ModelSeries("llama-70b", "vllm", "models", "llama-70b-server").queue_depth()
    )


def test_wake_query_adds_a_second_prometheus_trigger() -> None:
    wake = 'sum(gateway_pending_requests{model="llama-8b"})'

    def program() -> None:
        QueueDepthAutoscaler(
            "dev",
            _args(
                sizing=sizing("dev", "llama-8b"), min_replicas=0, max_replicas=1, scale_to_zero=True, wake_query=wake
            ),
        )

    so = evaluate(program, mocks=PlatformMocks(), stack="dev").named("dev-scaledobject")
    triggers = so.inputs["spec"]["triggers"]
    assert [(t["name"], t["type"], t["metadata"]["query"]) for t in triggers][1] == ("wake", "prometheus", wake)
    assert so.inputs["spec"]["minReplicaCount"] == 0


def test_bad_inputs_are_refused_together_before_anything_registers() -> None:
    registered: list[str] = []

    def program() -> None:
        try:
            QueueDepthAutoscaler("bad", _args(engine="tgi", min_replicas=0, max_replicas=0, scrape_interval_seconds=1))
        except pulumi.InputPropertiesError as exc:
            registered.append(exc.message)
            assert exc.errors == [
                {"property_path": "engine", "reason": "unknown engine 'tgi' (vllm, triton or sglang)"},
                {"property_path": "max_replicas", "reason": "0 is below 1 or below min_replicas (0)"},
                {"property_path": "min_replicas", "reason": "0 needs scale_to_zero"},
                {"property_path": "scrape_interval_seconds", "reason": "1 is outside 5..120"},
            ]

    result = evaluate(program, mocks=PlatformMocks(), stack="dev")
    assert result.registrations == ()
    assert registered == [
        "QueueDepthAutoscaler bad: engine: unknown engine 'tgi' (vllm, triton or sglang); max_replicas: 0 is below "
        "1 or below min_replicas (0); min_replicas: 0 needs scale_to_zero; scrape_interval_seconds: 1 is outside 5..120"
    ]


def test_keda_is_the_pinned_chart() -> None:
    def program() -> None:
        Keda("keda", KedaArgs())

    result = evaluate(program, mocks=PlatformMocks(), stack="dev")
    release = result.named("keda-chart")
    assert release.type == "kubernetes:helm.sh/v3:Release"
    assert release.parent == result.named("keda").urn
    assert {k: release.inputs[k] for k in ("name", "chart", "version", "namespace", "createNamespace")} == {
        "name": "keda",
        "chart": "keda",
        "version": KEDA_CHART_VERSION,
        "namespace": "keda",
        "createNamespace": True,
    }
    assert release.inputs["repositoryOpts"] == {"repo": "https://kedacore.github.io/charts"}
