"""Prometheus, Alertmanager and Grafana: kube-prometheus-stack, sized per environment, and the DCGM scrape.

**The selector gotcha.** With ``*SelectorNilUsesHelmValues: true`` (the chart's default) Prometheus selects only
ServiceMonitors, PodMonitors and PrometheusRules labelled ``release: <helm release name>``, so a monitor made by
anything else is silently ignored (facts.md 7.2; chart ``values.yaml``). Here the selectors are instead exactly
:data:`components.serving.annotations.SCRAPE_LABELS`, in every namespace, and the chart's own monitors and rules carry
those labels too (``commonLabels`` for the main chart, ``prometheus.monitor.additionalLabels`` for the
kube-state-metrics and node-exporter subcharts, ``serviceMonitor.labels`` for Grafana). One label decides what is
scraped, whoever made the monitor.

**DCGM.** dcgm-exporter is installed by the cluster's GPU components (a Helm release in a namespace of their
choosing). It is scraped by a PodMonitor made here that selects its pods by ``app.kubernetes.io/name: dcgm-exporter``
in any namespace, on the ``metrics`` port, with ``honorLabels`` so the ``namespace``/``pod`` labels dcgm-exporter
puts on each GPU's series (the pod using the GPU) win over the exporter's own target labels. Leave the
dcgm-exporter chart's own ServiceMonitor without the scrape label (its default), or it is scraped twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.capacity.prometheus import RETENTION_SIZE_SHARE, PrometheusSizing, prometheus_replicas
from inferplane.components.observability.metrics import DCGM_METRICS_PORT, DCGM_SELECTOR_LABELS
from inferplane.components.serving.annotations import SCRAPE_LABELS
from inferplane.components.serving.naming import MONITORING_NAMESPACE
from inferplane.components.spec.platform_spec import ObservabilitySpec

KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_VERSION = "88.5.3"
"""prometheus-community/helm-charts @2026-08-22 (cf408a2): chart 88.5.3, prometheus-operator v0.93.1, kube >= 1.25."""
KUBE_PROMETHEUS_STACK_REPOSITORY = "https://prometheus-community.github.io/helm-charts"
RELEASE_NAME = "kube-prometheus-stack"
FULLNAME = "kube-prometheus"
"""``fullnameOverride``: fixes the Services' names (``<fullname>-prometheus``); the chart truncates it at 26."""
PROMETHEUS_PORT = 9090

Environment = Literal["dev", "staging", "prod"]


def prometheus_url(namespace: str) -> str:
    """In-cluster URL of the chart's Prometheus Service (``<fullname>-prometheus``, port ``http-web`` 9090)."""
    return f"http://{FULLNAME}-prometheus.{namespace}.svc.cluster.local:{PROMETHEUS_PORT}"


def chart_values(
    observability: ObservabilitySpec, environment: Environment, prometheus: PrometheusSizing | None = None
) -> dict[str, Any]:
    """kube-prometheus-stack values for one environment; ``prometheus``: the cluster's sizing, whose requests each
    Prometheus replica gets (the chart's default requests nothing, so the scheduler counted it as zero on the system
    nodes it shares with the gateway). No limit: the requests are estimates, and an OOM-killed Prometheus loses its
    head block's last hours; the system-node check counts the requests."""
    selector = {"matchLabels": dict(SCRAPE_LABELS)}
    replicas = prometheus_replicas(environment)
    resources: dict[str, Any] = {}
    if prometheus is not None:
        resources = {"requests": {"cpu": f"{prometheus.cpu_millicores}m", "memory": f"{prometheus.memory_mib}Mi"}}
    return {
        "fullnameOverride": FULLNAME,
        "commonLabels": dict(SCRAPE_LABELS),
        "prometheus": {
            "prometheusSpec": {
                "replicas": replicas,
                "scrapeInterval": f"{observability.scrape_interval_seconds}s",
                "evaluationInterval": f"{observability.scrape_interval_seconds}s",
                "retention": f"{observability.retention_days}d",
                "retentionSize": f"{int(observability.storage_gib * RETENTION_SIZE_SHARE)}GiB",
                "resources": resources,
                "storageSpec": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": f"{observability.storage_gib}Gi"}},
                        }
                    }
                },
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
                "serviceMonitorSelector": selector,
                "podMonitorSelector": selector,
                "ruleSelector": selector,
                # {} = every namespace: model servers and dcgm-exporter live outside the monitoring namespace.
                "serviceMonitorNamespaceSelector": {},
                "podMonitorNamespaceSelector": {},
                "ruleNamespaceSelector": {},
            }
        },
        "alertmanager": {"alertmanagerSpec": {"replicas": replicas}},
        "kube-state-metrics": {"prometheus": {"monitor": {"additionalLabels": dict(SCRAPE_LABELS)}}},
        "prometheus-node-exporter": {"prometheus": {"monitor": {"additionalLabels": dict(SCRAPE_LABELS)}}},
        "grafana": {
            "enabled": observability.grafana,
            "serviceMonitor": {"labels": dict(SCRAPE_LABELS)},
            # The sidecar loads every ConfigMap labelled grafana_dashboard="1" in any namespace (chart default,
            # stated so the dashboards' contract is visible here).
            "sidecar": {"dashboards": {"enabled": True, "label": "grafana_dashboard", "labelValue": "1"}},
        },
    }


@dataclass(frozen=True)
class MonitoringStackArgs:
    """Inputs of :class:`MonitoringStack`."""

    observability: ObservabilitySpec
    """Retention, storage, scrape interval, Grafana on/off."""
    environment: Environment
    namespace: str = MONITORING_NAMESPACE
    labels: dict[str, str] = field(default_factory=dict)
    """Extra labels for the objects made here (the chart's own objects get ``commonLabels``)."""
    prometheus: PrometheusSizing | None = None
    """The cluster's Prometheus sizing (``PlatformSizing.prometheus``): its requests; None requests nothing."""


class MonitoringStack(pulumi.ComponentResource):
    """kube-prometheus-stack (Prometheus, Alertmanager, Grafana, kube-state-metrics, node-exporter) and the DCGM
    PodMonitor. Monitors and rules carrying :data:`SCRAPE_LABELS`, in any namespace, are selected."""

    namespace: pulumi.Output[str]
    prometheus_url: pulumi.Output[str]
    release: k8s.helm.v3.Release
    dcgm_monitor: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: MonitoringStackArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:MonitoringStack", name, None, opts)
        self.release = k8s.helm.v3.Release(
            f"{name}-chart",
            k8s.helm.v3.ReleaseArgs(
                name=RELEASE_NAME,
                chart=KUBE_PROMETHEUS_STACK_CHART,
                version=KUBE_PROMETHEUS_STACK_VERSION,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KUBE_PROMETHEUS_STACK_REPOSITORY),
                namespace=args.namespace,
                create_namespace=True,
                atomic=True,
                values=chart_values(args.observability, args.environment, args.prometheus),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.dcgm_monitor = k8s.apiextensions.CustomResource(
            f"{name}-dcgm",
            api_version="monitoring.coreos.com/v1",
            kind="PodMonitor",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name="dcgm-exporter", namespace=args.namespace, labels={**args.labels, **SCRAPE_LABELS}
            ),
            spec=dcgm_pod_monitor_spec(args.observability.scrape_interval_seconds),
            # The PodMonitor CRD comes with the chart.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.release]),
        )
        self.namespace = pulumi.Output.from_input(args.namespace)
        self.prometheus_url = pulumi.Output.from_input(prometheus_url(args.namespace))
        self.register_outputs({"namespace": self.namespace, "prometheusUrl": self.prometheus_url})


def dcgm_pod_monitor_spec(scrape_interval_seconds: int) -> dict[str, Any]:
    """PodMonitor spec for dcgm-exporter pods in any namespace."""
    return {
        "namespaceSelector": {"any": True},
        "selector": {"matchLabels": dict(DCGM_SELECTOR_LABELS)},
        "podMetricsEndpoints": [
            {
                "port": DCGM_METRICS_PORT,
                "path": "/metrics",
                "interval": f"{scrape_interval_seconds}s",
                # dcgm-exporter labels each GPU's series with the pod using it; keep those labels.
                "honorLabels": True,
            }
        ],
    }
