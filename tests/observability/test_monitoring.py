"""kube-prometheus-stack per environment: pinned, sized, selecting exactly the monitors that carry the scrape
labels (wherever they live), and scraping dcgm-exporter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from inferplane.components.observability.monitoring import (
    KUBE_PROMETHEUS_STACK_VERSION,
    MonitoringStack,
    MonitoringStackArgs,
    chart_values,
    dcgm_pod_monitor_spec,
    prometheus_url,
)
from inferplane.components.serving.annotations import SCRAPE_LABELS
from inferplane.components.spec.platform_spec import ObservabilitySpec
from inferplane.tool.mockengine import PlatformMocks, evaluate
from inferplane.tool.stackfile import find_project_dir, load_stack
from tests.crds import errors, integral


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector with matchLabels only (what the chart values use)."""
    assert set(selector) == {"matchLabels"}
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize(
    ("stack", "retention", "size", "storage", "replicas"),
    [("dev", "3d", "17GiB", "20Gi", 1), ("staging", "7d", "42GiB", "50Gi", 1), ("prod", "30d", "170GiB", "200Gi", 2)],
)
def test_retention_and_storage_follow_each_stack(
    stack: str, retention: str, size: str, storage: str, replicas: int
) -> None:
    spec = load_stack(find_project_dir(), stack).platform
    prom = chart_values(spec.observability, spec.environment)["prometheus"]["prometheusSpec"]
    assert (prom["retention"], prom["retentionSize"], prom["replicas"]) == (retention, size, replicas)
    claim = prom["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
    assert prom["scrapeInterval"] == prom["evaluationInterval"] == "15s"


def test_selectors_take_monitors_with_the_scrape_labels_from_any_namespace() -> None:
    values = chart_values(ObservabilitySpec(), "prod")
    prom = values["prometheus"]["prometheusSpec"]
    # The release-label gotcha: with NilUsesHelmValues the chart would select only `release: <name>` objects.
    for kind in ("serviceMonitor", "podMonitor", "rule"):
        assert prom[f"{kind}SelectorNilUsesHelmValues"] is False
        assert prom[f"{kind}Selector"] == {"matchLabels": {"inferplane.io/scrape": "true"}}
        assert prom[f"{kind}NamespaceSelector"] == {}
    model_server_monitor = {"app.kubernetes.io/name": "vllm", **SCRAPE_LABELS}
    chart_default_label_only = {"release": "kube-prometheus-stack"}
    assert selects(prom["podMonitorSelector"], model_server_monitor)
    assert not selects(prom["serviceMonitorSelector"], chart_default_label_only)
    # ...so the chart's own monitors and rules carry the scrape labels too.
    assert values["commonLabels"] == SCRAPE_LABELS
    assert values["kube-state-metrics"]["prometheus"]["monitor"]["additionalLabels"] == SCRAPE_LABELS
    assert values["prometheus-node-exporter"]["prometheus"]["monitor"]["additionalLabels"] == SCRAPE_LABELS
    assert values["grafana"]["serviceMonitor"]["labels"] == SCRAPE_LABELS


@pytest.mark.parametrize("grafana", [True, False])
def test_grafana_follows_the_spec_with_the_dashboard_sidecar(grafana: bool) -> None:
    values = chart_values(ObservabilitySpec(grafana=grafana), "dev")["grafana"]
    assert values["enabled"] is grafana
    assert values["sidecar"]["dashboards"] == {"enabled": True, "label": "grafana_dashboard", "labelValue": "1"}


def test_dcgm_pod_monitor_is_exact_and_valid() -> None:
    spec = dcgm_pod_monitor_spec(15)
    assert spec == {
        "namespaceSelector": {"any": True},
        "selector": {"matchLabels": {"app.kubernetes.io/name": "dcgm-exporter"}},
        "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s", "honorLabels": True}],
    }
    monitor: dict[str, Any] = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "dcgm-exporter", "namespace": "monitoring", "labels": SCRAPE_LABELS},
        "spec": spec,
    }
    assert errors(monitor) == []
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "15 seconds"
    assert len(errors(monitor)) == 1


def test_component_registers_the_pinned_chart_and_the_dcgm_monitor() -> None:
    spec = load_stack(find_project_dir(), "prod").platform

    def program() -> None:
        MonitoringStack("monitoring", MonitoringStackArgs(observability=spec.observability, environment="prod"))

    result = evaluate(program, mocks=PlatformMocks(), stack="prod")
    assert [(r.type, r.name) for r in result.registrations] == [
        ("inferplane:index:MonitoringStack", "monitoring"),
        ("kubernetes:helm.sh/v3:Release", "monitoring-chart"),
        ("kubernetes:monitoring.coreos.com/v1:PodMonitor", "monitoring-dcgm"),
    ]
    component, release, monitor = result.registrations
    assert release.parent == component.urn and monitor.parent == component.urn
    assert monitor.dependencies == (release.urn,)
    assert {k: release.inputs[k] for k in ("name", "chart", "version", "namespace", "createNamespace")} == {
        "name": "kube-prometheus-stack",
        "chart": "kube-prometheus-stack",
        "version": KUBE_PROMETHEUS_STACK_VERSION,
        "namespace": "monitoring",
        "createNamespace": True,
    }
    assert release.inputs["repositoryOpts"] == {"repo": "https://prometheus-community.github.io/helm-charts"}
    assert integral(release.inputs["values"]) == chart_values(spec.observability, "prod")
    obj = integral({k: monitor.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")})
    assert obj["metadata"]["labels"] == SCRAPE_LABELS
    assert errors(obj) == []


def test_prometheus_url_is_the_charts_service() -> None:
    assert prometheus_url("monitoring") == "http://kube-prometheus-prometheus.monitoring.svc.cluster.local:9090"
