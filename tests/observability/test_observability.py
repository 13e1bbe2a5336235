"""The composition over every stack: a queue-depth ScaledObject per model deployment (never CPU or memory), every
custom resource valid against its CRD, every rule file passing ``promtool check rules``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.platform.observability import ServingTarget, build_observability
from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.tool.mockengine import Evaluation, PlatformMocks, evaluate
from inferplane.tool.stackfile import find_project_dir, load_stack
from tests.crds import errors, integral
from tests.promtool import run

STACKS = ("dev", "staging", "prod")


def platform(stack: str) -> PlatformSpec:
    return load_stack(find_project_dir(), stack).platform


def targets(spec: PlatformSpec) -> dict[str, ServingTarget]:
    return {m.name: ServingTarget(deployment=f"{m.name}-server", namespace="models") for m in spec.serving_deployments}


def build(spec: PlatformSpec, serving: dict[str, ServingTarget] | None = None) -> Evaluation:
    plan = size_platform(spec)

    def program() -> None:
        build_observability(spec, plan, {"eks": None}, targets(spec) if serving is None else serving)

    return evaluate(program, mocks=PlatformMocks(spec.region), stack=spec.environment)


def custom_resources(result: Evaluation) -> list[dict[str, Any]]:
    return [
        integral({k: r.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")})
        for r in result.registrations
        if r.type.startswith(("kubernetes:keda.sh/", "kubernetes:monitoring.coreos.com/"))
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_every_model_deployment_scales_on_a_prometheus_queue_metric(stack: str) -> None:
    spec = platform(stack)
    result = build(spec)
    scaled = result.of_type("kubernetes:keda.sh/v1alpha1:ScaledObject")
    # A disaggregated model's prefill role scales too, on its own queue.
    assert sorted(r.name for r in scaled) == sorted(
        f"{m.name}-autoscaler-scaledobject" for m in spec.serving_deployments
    )
    for model in spec.serving_deployments:
        so = result.named(f"{model.name}-autoscaler-scaledobject")
        assert so.inputs["spec"]["scaleTargetRef"]["name"] == f"{model.name}-server"
        triggers = so.inputs["spec"]["triggers"]
        assert {t["type"] for t in triggers} == {"prometheus"}
        waiting = {
            "vllm": "vllm:num_requests_waiting",
            "triton": 'request_type="waiting"',
            "sglang": "sglang:num_queue_reqs",
        }[model.engine]
        assert waiting in triggers[0]["metadata"]["query"]
        # A decode role (a disaggregated model's own server) also scales on its running sequences and KV use.
        decode = model.disaggregation is not None
        expected = ["queue-depth", "running", "kv-usage"] if decode else ["queue-depth"]
        assert [t["name"] for t in triggers if t["name"] != "wake"] == expected
        assert so.inputs["spec"]["minReplicaCount"] == model.min_replicas
        assert so.inputs["spec"]["maxReplicaCount"] == model.max_replicas
        # Created after KEDA and the monitoring stack (their charts bring the CRDs): depending on a component
        # means depending on its children.
        component = result.named(f"{model.name}-autoscaler")
        charts = {result.named(n).urn for n in ("keda-chart", "monitoring-chart", "monitoring-dcgm")}
        assert set(component.dependencies) == charts


@pytest.mark.parametrize("stack", STACKS)
def test_every_custom_resource_validates_against_its_crd(stack: str) -> None:
    resources = custom_resources(build(platform(stack)))
    kinds = sorted({r["kind"] for r in resources})
    assert kinds == ["PodMonitor", "PrometheusRule", "ScaledObject"]
    assert {r["metadata"]["name"]: errors(r) for r in resources} == {r["metadata"]["name"]: [] for r in resources}


@pytest.mark.parametrize("stack", STACKS)
def test_every_stacks_rule_file_passes_promtool(stack: str, tmp_path: Path) -> None:
    spec = platform(stack)
    rules = [r for r in custom_resources(build(spec)) if r["kind"] == "PrometheusRule"]
    assert len(rules) == len(spec.serving_deployments) + 1  # one per server (a prefill role's too), one for the GPUs
    groups = [g for r in rules for g in r["spec"]["groups"]]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    result = run(["check", "rules", str(path)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prod_registers_the_whole_set() -> None:
    result = build(platform("prod"))
    assert sorted((r.type, r.name) for r in result.registrations) == sorted(
        [
            ("inferplane:index:Keda", "keda"),
            ("kubernetes:helm.sh/v3:Release", "keda-chart"),
            ("inferplane:index:MonitoringStack", "monitoring"),
            ("kubernetes:helm.sh/v3:Release", "monitoring-chart"),
            ("kubernetes:monitoring.coreos.com/v1:PodMonitor", "monitoring-dcgm"),
            ("inferplane:index:QueueDepthAutoscaler", "llama-70b-autoscaler"),
            ("kubernetes:keda.sh/v1alpha1:ScaledObject", "llama-70b-autoscaler-scaledobject"),
            ("inferplane:index:QueueDepthAutoscaler", "llama-70b-prefill-autoscaler"),
            ("kubernetes:keda.sh/v1alpha1:ScaledObject", "llama-70b-prefill-autoscaler-scaledobject"),
            ("inferplane:index:QueueDepthAutoscaler", "llama-8b-autoscaler"),
            ("kubernetes:keda.sh/v1alpha1:ScaledObject", "llama-8b-autoscaler-scaledobject"),
            ("inferplane:index:ServingRules", "serving-rules"),
            ("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "serving-rules-gpus"),
            ("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "serving-rules-llama-70b"),
            ("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "serving-rules-llama-70b-prefill"),
            ("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "serving-rules-llama-8b"),
            ("inferplane:index:ServingDashboards", "serving-dashboards"),
            ("kubernetes:core/v1:ConfigMap", "serving-dashboards-llama-70b"),
            ("kubernetes:core/v1:ConfigMap", "serving-dashboards-llama-8b"),
        ]
    )
    board = json.loads(result.named("serving-dashboards-llama-70b").inputs["data"]["inferplane-llama-70b.json"])
    cost = board["panels"][-1]
    plan = size_platform(platform("prod"))
    price = next(d.replica_hourly_usd for d in plan.deployments if d.name == "llama-70b")
    assert cost["title"] == "$ per million generated tokens"
    assert cost["targets"][0]["expr"].startswith(f"({price:g} * ")


def test_no_dashboards_without_grafana() -> None:
    spec = platform("dev")
    spec = spec.model_copy(update={"observability": spec.observability.model_copy(update={"grafana": False})})
    result = build(spec)
    assert result.of_type("inferplane:index:ServingDashboards") == []
    assert result.of_type("kubernetes:core/v1:ConfigMap") == []


def test_missing_and_unknown_targets_are_refused_before_anything_is_declared() -> None:
    spec = platform("prod")
    with pytest.raises(pulumi.RunError) as raised:
        build(
            spec,
            {
                "llama-70b": ServingTarget("a", "b", cluster="gke"),
                "mistral": ServingTarget("c", "d"),
            },
        )
    assert str(raised.value) == (
        "observability cannot be built:\n"
        "models: no serving target for deployment 'llama-70b-prefill'\n"
        "models: no serving target for deployment 'llama-8b'\n"
        "targets: 'mistral' is not a model deployment of the spec\n"
        "targets: 'llama-70b' is served on cluster 'gke', which has no provider"
    )


def test_each_cluster_gets_its_own_keda_and_monitoring_beside_its_servers() -> None:
    spec = platform("staging")  # llama-8b (Triton) and qwen-agent (SGLang) on EKS, qwen-7b on a GKE TPU pool
    plan = size_platform(spec)
    serving = {
        "llama-8b": ServingTarget("llama-8b", "inference"),
        "qwen-7b": ServingTarget("qwen-7b", "inference", cluster="gke"),
        "qwen-agent": ServingTarget("qwen-agent", "inference"),
    }

    def program() -> None:
        eks = k8s.Provider("eks-k8s", kubeconfig="{}")
        gke = k8s.Provider("gke-k8s", kubeconfig="{}")
        build_observability(spec, plan, {"eks": eks, "gke": gke}, serving)

    result = evaluate(program, mocks=PlatformMocks(spec.region), stack="staging")
    eks_provider = result.named("eks-k8s")
    gke_provider = result.named("gke-k8s")

    def provider_of(name: str) -> str:
        return result.named(name).provider.rsplit("::", 1)[0]

    for name in (
        "keda-chart",
        "monitoring-chart",
        "llama-8b-autoscaler-scaledobject",
        "qwen-agent-autoscaler-scaledobject",
    ):
        assert provider_of(name) == eks_provider.urn
    for name in ("gke-keda-chart", "gke-monitoring-chart", "qwen-7b-autoscaler-scaledobject"):
        assert provider_of(name) == gke_provider.urn
    rules = {r.name: r for r in result.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")}
    eks_rules = json.dumps([r.inputs for n, r in rules.items() if not n.startswith("gke-")])
    gke_rules = json.dumps([r.inputs for n, r in rules.items() if n.startswith("gke-")])
    assert "llama-8b" in eks_rules and "qwen-7b" not in eks_rules
    assert "sglang:num_retracted_requests_total" in eks_rules and "sglang:" not in gke_rules
    assert "qwen-7b" in gke_rules and "llama-8b" not in gke_rules
