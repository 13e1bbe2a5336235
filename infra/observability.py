"""Autoscaling and observability for one stack: KEDA, kube-prometheus-stack, rules, dashboards, one autoscaler
per model deployment.

The model servers are built elsewhere; they hand over, per deployment of the spec, the Deployment's name and
namespace (:class:`ServingTarget`) and label their PodMonitor/ServiceMonitor with
:data:`components.metrics.SCRAPE_LABELS`. Called from the program after the servers exist::

    observability = build_observability(spec, plan, k8s_provider, targets)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.alerts import ModelAlertInputs, ServingRules, ServingRulesArgs
from components.dashboards import ModelDashboardInputs, ServingDashboards, ServingDashboardsArgs
from components.keda import Keda, KedaArgs, QueueDepthAutoscaler, QueueDepthAutoscalerArgs
from components.metrics import SCRAPE_LABELS, Engine, ModelSeries
from components.monitoring import MonitoringStack, MonitoringStackArgs
from components.sizing import PlatformSizing
from components.spec import PlatformSpec, SloSpec


@dataclass(frozen=True)
class ServingTarget:
    """Where a model deployment's server runs, as its component exposes it."""

    deployment: pulumi.Input[str]
    """Name of the Deployment (KEDA's scale target)."""
    namespace: pulumi.Input[str]
    """Its namespace."""
    wake_query: str | None = None
    """PromQL above zero when requests wait outside the engine (scale-from-zero deployments; see
    :class:`components.keda.QueueDepthAutoscalerArgs`)."""


@dataclass(frozen=True)
class Observability:
    """What :func:`build_observability` made."""

    keda: Keda
    monitoring: MonitoringStack
    rules: ServingRules
    dashboards: ServingDashboards | None
    autoscalers: Mapping[str, QueueDepthAutoscaler]


def build_observability(
    spec: PlatformSpec,
    plan: PlatformSizing,
    provider: k8s.Provider | None,
    targets: Mapping[str, ServingTarget],
) -> Observability:
    """KEDA, the monitoring stack, rules, dashboards (when Grafana is on) and one autoscaler per deployment.

    ``targets`` maps every deployment name of ``spec.models`` to its server; a missing or unknown name is refused
    before anything is declared.
    """
    names = [m.name for m in spec.models]
    problems = [f"models: no serving target for deployment {n!r}" for n in names if n not in targets]
    problems += [f"targets: {n!r} is not a model deployment of the spec" for n in targets if n not in names]
    if problems:
        raise pulumi.RunError("observability cannot be built:\n" + "\n".join(problems))

    opts = pulumi.ResourceOptions(providers=[provider] if provider is not None else None)
    keda = Keda("keda", KedaArgs(), opts=opts)
    monitoring = MonitoringStack(
        "monitoring",
        MonitoringStackArgs(observability=spec.observability, environment=spec.environment),
        opts=opts,
    )
    sizing = {d.name: d for d in plan.deployments}
    after_crds = pulumi.ResourceOptions(
        providers=[provider] if provider is not None else None, depends_on=[keda, monitoring]
    )

    autoscalers: dict[str, QueueDepthAutoscaler] = {}
    alert_inputs: list[tuple[str, pulumi.Input[ModelAlertInputs]]] = []
    dashboard_inputs: list[tuple[str, pulumi.Input[ModelDashboardInputs]]] = []
    for model in spec.models:
        target = targets[model.name]
        deployment = sizing[model.name]
        autoscaler = QueueDepthAutoscaler(
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
                wake_query=target.wake_query,
            ),
            opts=after_crds,
        )
        autoscalers[model.name] = autoscaler
        series = pulumi.Output.all(target.deployment, target.namespace).apply(
            functools.partial(_series, model.name, model.engine)
        )
        alert_inputs.append(
            (
                model.name,
                series.apply(
                    functools.partial(
                        _alert_inputs,
                        slo=model.slo,
                        target=autoscaler.policy.target_waiting_per_replica,
                        max_replicas=model.max_replicas,
                        cold_start=deployment.result.cold_start_seconds,
                    )
                ),
            )
        )
        dashboard_inputs.append(
            (
                model.name,
                series.apply(
                    functools.partial(
                        _dashboard_inputs,
                        ttft_slo_ms=model.slo.ttft_p95_ms,
                        itl_slo_ms=model.slo.itl_p95_ms,
                        price=deployment.replica_hourly_usd,
                    )
                ),
            )
        )

    rules = ServingRules(
        "serving-rules",
        ServingRulesArgs(namespace=monitoring.namespace, models=alert_inputs, labels=dict(SCRAPE_LABELS)),
        opts=after_crds,
    )
    dashboards = None
    if spec.observability.grafana:
        dashboards = ServingDashboards(
            "serving-dashboards",
            ServingDashboardsArgs(namespace=monitoring.namespace, models=dashboard_inputs),
            opts=after_crds,
        )
    return Observability(keda=keda, monitoring=monitoring, rules=rules, dashboards=dashboards, autoscalers=autoscalers)


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
    series: ModelSeries, *, ttft_slo_ms: int, itl_slo_ms: int, price: float | None
) -> ModelDashboardInputs:
    return ModelDashboardInputs(series=series, ttft_slo_ms=ttft_slo_ms, itl_slo_ms=itl_slo_ms, replica_hourly_usd=price)
