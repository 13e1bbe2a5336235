"""Autoscaling and observability for one stack: KEDA, kube-prometheus-stack, rules, dashboards, one autoscaler
per model deployment.

The model servers are built elsewhere; they hand over, per deployment of the spec, the Deployment's name and
namespace (:class:`ServingTarget`) and label their PodMonitor/ServiceMonitor with
:data:`components.serving.annotations.SCRAPE_LABELS`. Called from the program after the servers exist::

    observability = build_observability(spec, plan, {"eks": eks_provider, "gke": gke_provider}, targets)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from inferplane.components.capacity.prometheus import PrometheusSizing
from inferplane.components.capacity.sizing import DeploymentSizing, PlatformSizing
from inferplane.components.observability.alerts import ModelAlertInputs, ServingRules, ServingRulesArgs
from inferplane.components.observability.dashboards import (
    ModelDashboardInputs,
    ServingDashboards,
    ServingDashboardsArgs,
)
from inferplane.components.observability.keda import Keda, KedaArgs, QueueDepthAutoscaler, QueueDepthAutoscalerArgs
from inferplane.components.observability.metrics import Engine, ModelSeries
from inferplane.components.observability.monitoring import MonitoringStack, MonitoringStackArgs
from inferplane.components.serving.annotations import SCRAPE_LABELS
from inferplane.components.spec.platform_spec import ModelDeploymentSpec, PlatformSpec, SloSpec

PRIMARY_CLUSTER = "eks"
"""The cluster whose monitoring keeps the unprefixed names (``keda``, ``monitoring``...)."""


@dataclass(frozen=True)
class ServingTarget:
    """Where a model deployment's server runs, as its component exposes it."""

    deployment: pulumi.Input[str]
    """Name of the Deployment (KEDA's scale target)."""
    namespace: pulumi.Input[str]
    """Its namespace."""
    wake_query: str | None = None
    """PromQL above zero when requests wait outside the engine (scale-from-zero deployments; see
    :class:`components.observability.keda.QueueDepthAutoscalerArgs`)."""
    cluster: str = PRIMARY_CLUSTER
    """Which cluster serves it (a key of ``providers``): KEDA and Prometheus run beside the servers they scale."""


@dataclass(frozen=True)
class ClusterObservability:
    """What :func:`build_observability` made on one cluster."""

    keda: Keda
    monitoring: MonitoringStack
    rules: ServingRules
    dashboards: ServingDashboards | None


@dataclass(frozen=True)
class Observability:
    """What :func:`build_observability` made, per cluster, and the autoscaler of every deployment."""

    clusters: Mapping[str, ClusterObservability]
    autoscalers: Mapping[str, QueueDepthAutoscaler]

    @property
    def primary(self) -> ClusterObservability:
        """The primary (EKS) cluster's stack."""
        return self.clusters[PRIMARY_CLUSTER]


def build_observability(
    spec: PlatformSpec,
    plan: PlatformSizing,
    providers: Mapping[str, pulumi.ProviderResource | None],
    targets: Mapping[str, ServingTarget],
    *,
    parent: pulumi.Resource | None = None,
) -> Observability:
    """Per cluster that serves models: KEDA, the monitoring stack, rules and dashboards (when Grafana is on); and one
    autoscaler per deployment, on its own cluster.

    ``targets`` maps every deployment name of ``spec.models`` to its server, ``providers`` every cluster a target
    names to its Kubernetes provider; a missing or unknown name is refused before anything is declared.
    """
    _require_targets(spec, providers, targets)
    sizing = plan.servings
    clusters: dict[str, ClusterObservability] = {}
    autoscalers: dict[str, QueueDepthAutoscaler] = {}
    # The primary cluster first, so its stack keeps the unprefixed names whatever else serves.
    for cluster in sorted({t.cluster for t in targets.values()}, key=lambda c: (c != PRIMARY_CLUSTER, c)):
        prometheus = next((p for p in plan.prometheus if p.cluster == cluster), None)
        clusters[cluster], scaled = _observe_cluster(
            spec, sizing, cluster, providers[cluster], targets, prometheus=prometheus, parent=parent
        )
        autoscalers.update(scaled)
    return Observability(clusters=clusters, autoscalers=autoscalers)


def _require_targets(
    spec: PlatformSpec,
    providers: Mapping[str, pulumi.ProviderResource | None],
    targets: Mapping[str, ServingTarget],
) -> None:
    """Refuse targets that miss a deployment, name an unknown one or a cluster without a provider."""
    names = [d.name for d in spec.serving_deployments]
    problems = [f"models: no serving target for deployment {n!r}" for n in names if n not in targets]
    problems += [f"targets: {n!r} is not a model deployment of the spec" for n in targets if n not in names]
    problems += [
        f"targets: {n!r} is served on cluster {t.cluster!r}, which has no provider"
        for n, t in targets.items()
        if t.cluster not in providers
    ]
    if problems:
        raise pulumi.RunError("observability cannot be built:\n" + "\n".join(problems))


def _observe_cluster(
    spec: PlatformSpec,
    sizing: Mapping[str, DeploymentSizing],
    cluster: str,
    provider: pulumi.ProviderResource | None,
    targets: Mapping[str, ServingTarget],
    *,
    prometheus: PrometheusSizing | None = None,
    parent: pulumi.Resource | None,
) -> tuple[ClusterObservability, dict[str, QueueDepthAutoscaler]]:
    """One cluster's KEDA and monitoring, an autoscaler per model it serves, then its rules and dashboards."""
    prefix = "" if cluster == PRIMARY_CLUSTER else f"{cluster}-"
    opts = pulumi.ResourceOptions(parent=parent, providers=[provider] if provider is not None else None)
    keda = Keda(f"{prefix}keda", KedaArgs(), opts=opts)
    monitoring = MonitoringStack(
        f"{prefix}monitoring",
        MonitoringStackArgs(observability=spec.observability, environment=spec.environment, prometheus=prometheus),
        opts=opts,
    )
    # The autoscalers, rules and dashboards are custom resources: their CRDs come with KEDA and the monitoring stack.
    after_crds = pulumi.ResourceOptions(
        parent=parent, providers=[provider] if provider is not None else None, depends_on=[keda, monitoring]
    )
    autoscalers: dict[str, QueueDepthAutoscaler] = {}
    alert_inputs: list[tuple[str, pulumi.Input[ModelAlertInputs]]] = []
    dashboard_inputs: list[tuple[str, pulumi.Input[ModelDashboardInputs]]] = []
    for model in (m for m in spec.models if targets[m.name].cluster == cluster):
        target = targets[model.name]
        autoscaler = _autoscaler(spec, model, target, sizing[model.name], monitoring, opts=after_crds)
        autoscalers[model.name] = autoscaler
        alerts, panels = _model_inputs(model, target, sizing[model.name], autoscaler)
        alert_inputs.append((model.name, alerts))
        dashboard_inputs.append((model.name, panels))
        # A prefill role scales on its own queue (prompts waiting to be computed) and has its own alerts (its KV
        # pool preempts too); the dashboards are the client's view of the model and stay one per model.
        role = model.prefill_role
        if role is not None:
            role_target, role_sizing = targets[role.name], sizing[role.name]
            role_autoscaler = _autoscaler(spec, role, role_target, role_sizing, monitoring, opts=after_crds)
            autoscalers[role.name] = role_autoscaler
            alert_inputs.append((role.name, _model_inputs(role, role_target, role_sizing, role_autoscaler)[0]))
    rules = ServingRules(
        f"{prefix}serving-rules",
        ServingRulesArgs(namespace=monitoring.namespace, models=alert_inputs, labels=dict(SCRAPE_LABELS)),
        opts=after_crds,
    )
    dashboards = None
    if spec.observability.grafana:
        dashboards = ServingDashboards(
            f"{prefix}serving-dashboards",
            ServingDashboardsArgs(namespace=monitoring.namespace, models=dashboard_inputs),
            opts=after_crds,
        )
    stack = ClusterObservability(keda=keda, monitoring=monitoring, rules=rules, dashboards=dashboards)
    return stack, autoscalers


def _autoscaler(
    spec: PlatformSpec,
    model: ModelDeploymentSpec,
    target: ServingTarget,
    deployment: DeploymentSizing,
    monitoring: MonitoringStack,
    *,
    opts: pulumi.ResourceOptions,
) -> QueueDepthAutoscaler:
    """The deployment's KEDA autoscaler, on its queue depth as its cluster's Prometheus sees it (a decode role's
    also on its running sequences and KV-cache use)."""
    return QueueDepthAutoscaler(
        f"{model.name}-autoscaler",
        QueueDepthAutoscalerArgs(
            served_model_name=model.name,
            engine=model.engine,
            deployment_name=target.deployment,
            namespace=target.namespace,
            sizing=deployment.result,
            min_replicas=model.min_replicas,
            max_replicas=model.max_replicas,
            scale_to_zero=model.scale_to_zero,
            prometheus_url=monitoring.prometheus_url,
            scrape_interval_seconds=spec.observability.scrape_interval_seconds,
            role=deployment.role,
            wake_query=target.wake_query,
        ),
        opts=opts,
    )


def _model_inputs(
    model: ModelDeploymentSpec,
    target: ServingTarget,
    deployment: DeploymentSizing,
    autoscaler: QueueDepthAutoscaler,
) -> tuple[pulumi.Output[ModelAlertInputs], pulumi.Output[ModelDashboardInputs]]:
    """The deployment's alert and dashboard inputs, once its Deployment's name and namespace are known."""
    series = pulumi.Output.all(target.deployment, target.namespace).apply(
        functools.partial(_series, model.name, model.engine)
    )
    alerts = series.apply(
        functools.partial(
            _alert_inputs,
            slo=model.slo,
            target=autoscaler.policy.target_waiting_per_replica,
            max_replicas=model.max_replicas,
            cold_start=deployment.result.cold_start_seconds,
        )
    )
    panels = series.apply(
        functools.partial(
            _dashboard_inputs,
            ttft_slo_ms=model.slo.ttft_p95_ms,
            itl_slo_ms=model.slo.itl_p95_ms,
            price=deployment.replica_hourly_usd,
            host_kv_cache=deployment.result.host_kv_cache_bytes > 0,
        )
    )
    return alerts, panels


def _series(name: str, engine: Engine, values: list[str]) -> ModelSeries:
    deployment, namespace = values
    return ModelSeries(name, engine, namespace, deployment)


def _alert_inputs(
    series: ModelSeries, *, slo: SloSpec, target: int, max_replicas: int, cold_start: float
) -> ModelAlertInputs:
    return ModelAlertInputs(
        series=series,
        slo=slo,
        target_waiting_per_replica=target,
        max_replicas=max_replicas,
        cold_start_seconds=cold_start,
    )


def _dashboard_inputs(
    series: ModelSeries, *, ttft_slo_ms: int, itl_slo_ms: int, price: float | None, host_kv_cache: bool
) -> ModelDashboardInputs:
    return ModelDashboardInputs(
        series=series,
        ttft_slo_ms=ttft_slo_ms,
        itl_slo_ms=itl_slo_ms,
        replica_hourly_usd=price,
        host_kv_cache=host_kv_cache,
    )
