"""Grafana dashboards, one per served model, built from typed Python and shipped as sidecar ConfigMaps.

kube-prometheus-stack's Grafana runs the ``k8s-sidecar`` that loads every ConfigMap labelled
``grafana_dashboard: "1"`` (chart values ``grafana.sidecar.dashboards.label``/``labelValue``). Panels read the
recorded series of :mod:`components.observability.alerts` (so dashboards and alerts show the same numbers and survive
engine
metric renames through :mod:`components.observability.metrics`), kube-state-metrics for replicas and dcgm-exporter for
GPUs.

The cost panel turns the catalog's on-demand price into dollars per million generated tokens:
``replica_hourly_usd x replicas / (tokens per second x 3600 / 1e6)``, with ``replica_hourly_usd`` from the sizing
(``components.catalog.hourly_price`` x the replica's share of the node).

Dashboard JSON follows Grafana's dashboard model (schemaVersion 39: ``panels[]`` with ``gridPos`` on a 24-column
grid, ``targets[].expr``/``refId``, ``fieldConfig.defaults.unit``) as documented in Grafana's "JSON model" page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.observability.alerts import QUANTILES, record_name
from inferplane.components.observability.metrics import ModelSeries

DASHBOARD_SIDECAR_LABELS: dict[str, str] = {"grafana_dashboard": "1"}
"""The label kube-prometheus-stack's Grafana sidecar loads dashboards from."""
SCHEMA_VERSION = 39
GRID_COLUMNS = 24
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "prometheus"}
"""The chart's provisioned Prometheus datasource (``grafana.sidecar.datasources.uid: prometheus``)."""

PanelType = Literal["timeseries", "stat"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GridPos(_Model):
    """Position on Grafana's 24-column grid."""

    x: int = Field(ge=0, lt=GRID_COLUMNS)
    y: int = Field(ge=0)
    w: int = Field(ge=1, le=GRID_COLUMNS)
    h: int = Field(ge=1)


class Target(_Model):
    """One PromQL query of a panel."""

    expr: str
    legend: str
    ref_id: str = Field(pattern=r"^[A-Z]$")

    def render(self) -> dict[str, Any]:
        return {"datasource": DATASOURCE, "expr": self.expr, "legendFormat": self.legend, "refId": self.ref_id}


class Threshold(_Model):
    """A coloured line or step: above ``value`` the panel shows ``color``."""

    value: float
    color: str = "red"


class Panel(_Model):
    """A time series or single-stat panel."""

    id: int = Field(ge=1)
    title: str
    type: PanelType = "timeseries"
    unit: str = Field(description="Grafana unit id: s, percentunit, percent, bytes, reqps, currencyUSD, short.")
    grid: GridPos
    targets: tuple[Target, ...] = Field(min_length=1)
    threshold: Threshold | None = None
    description: str = ""

    def render(self) -> dict[str, Any]:
        steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
        custom: dict[str, Any] = {}
        if self.threshold is not None:
            steps.append({"color": self.threshold.color, "value": self.threshold.value})
            if self.type == "timeseries":
                custom["thresholdsStyle"] = {"mode": "line"}
        return {
            "id": self.id,
            "title": self.title,
            "description": self.description,
            "type": self.type,
            "datasource": DATASOURCE,
            "gridPos": self.grid.model_dump(),
            "targets": [t.render() for t in self.targets],
            "fieldConfig": {
                "defaults": {
                    "unit": self.unit,
                    "custom": custom,
                    "thresholds": {"mode": "absolute", "steps": steps},
                },
                "overrides": [],
            },
            "options": {},
        }


class Dashboard(_Model):
    """A Grafana dashboard."""

    uid: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,40}$")
    title: str
    tags: tuple[str, ...] = ()
    panels: tuple[Panel, ...]
    refresh: str = "30s"

    def render(self) -> dict[str, Any]:
        """Grafana's dashboard JSON model."""
        return {
            "uid": self.uid,
            "title": self.title,
            "tags": list(self.tags),
            "timezone": "utc",
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "editable": False,
            "refresh": self.refresh,
            "time": {"from": "now-6h", "to": "now"},
            "templating": {"list": []},
            "annotations": {"list": []},
            "panels": [p.render() for p in self.panels],
        }

    def to_json(self) -> str:
        return json.dumps(self.render(), indent=2, sort_keys=True)


@dataclass(frozen=True)
class ModelDashboardInputs:
    """What one model's dashboard needs."""

    series: ModelSeries
    ttft_slo_ms: int
    itl_slo_ms: int
    replica_hourly_usd: float | None
    """From sizing; without a catalog price there is no cost panel."""


def model_dashboard(inputs: ModelDashboardInputs) -> Dashboard:
    """The per-model dashboard: latency percentiles, throughput, saturation, replicas, GPUs and cost."""
    s = inputs.series
    sel = f'{{model="{s.name}",namespace="{s.namespace}"}}'
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    width, height = 12, 8
    specs: list[dict[str, Any]] = []

    def add(
        title: str, unit: str, targets: list[tuple[str, str]], threshold: float | None = None, desc: str = ""
    ) -> None:
        specs.append({"title": title, "unit": unit, "targets": targets, "threshold": threshold, "desc": desc})

    add(
        "Time to first token",
        "s",
        [(f"{record_name('ttft_seconds', f'p{round(q * 100)}')}{sel}", f"p{round(q * 100)}") for q in QUANTILES],
        inputs.ttft_slo_ms / 1000,
        f"p95 objective {inputs.ttft_slo_ms} ms (red line).",
    )
    if s.itl_quantile(0.95) is not None:
        add(
            "Inter-token latency",
            "s",
            [(f"{record_name('itl_seconds', f'p{round(q * 100)}')}{sel}", f"p{round(q * 100)}") for q in QUANTILES],
            inputs.itl_slo_ms / 1000,
            f"p95 objective {inputs.itl_slo_ms} ms (red line).",
        )
    add(
        "Tokens per second",
        "short",
        [
            (f"{record_name('generation_tokens', 'rate5m')}{sel}", "generated"),
            (f"{record_name('prompt_tokens', 'rate5m')}{sel}", "prompt"),
        ],
    )
    add(
        "KV-cache usage (fullest replica)",
        "percentunit",
        [(f"{record_name('kv_cache_usage', 'max')}{sel}", "max")],
        0.95,
    )
    preemptions = s.preemptions_rate()
    if preemptions is not None:
        add("Preemptions", "short", [(preemptions, "per second")], desc="Any preemption means the KV cache ran out.")
    add(
        "Queue depth and replicas",
        "short",
        [
            (f"{record_name('queue_depth', 'sum')}{sel}", "waiting requests"),
            (s.running(), "running requests"),
            (s.available_replicas(), "available replicas"),
            (s.desired_replicas(), "desired replicas"),
        ],
    )
    add("GPU utilisation", "percent", [(s.gpu_utilization(), "mean over the model's GPUs")])
    add("GPU memory used", "bytes", [(s.gpu_memory_used_bytes(), "frame buffer")])
    if inputs.replica_hourly_usd is not None:
        replicas = s.available_replicas()
        tokens = f"{record_name('generation_tokens', 'rate5m')}{sel}"
        add(
            "$ per million generated tokens",
            "currencyUSD",
            [(f"({inputs.replica_hourly_usd:g} * {replicas}) / ({tokens} * 3600 / 1e6)", "on-demand")],
            desc=f"On-demand price {inputs.replica_hourly_usd:g} USD per replica-hour (catalog) x available "
            "replicas, over generated tokens.",
        )

    panels = []
    for index, item in enumerate(specs):
        targets = tuple(
            Target(expr=expr, legend=legend, ref_id=letters[i]) for i, (expr, legend) in enumerate(item["targets"])
        )
        panels.append(
            Panel(
                id=index + 1,
                title=item["title"],
                unit=item["unit"],
                grid=GridPos(x=(index % 2) * width, y=(index // 2) * height, w=width, h=height),
                targets=targets,
                threshold=None if item["threshold"] is None else Threshold(value=item["threshold"]),
                description=item["desc"],
            )
        )
    return Dashboard(
        uid=f"inferplane-{s.name}"[:40],
        title=f"inferplane / {s.name} ({s.engine})",
        tags=("inferplane", s.engine),
        panels=tuple(panels),
    )


@dataclass(frozen=True)
class ServingDashboardsArgs:
    """Inputs of :class:`ServingDashboards`."""

    namespace: pulumi.Input[str]
    """Where the ConfigMaps live (the sidecar searches every namespace; the monitoring namespace keeps them
    together)."""
    models: Sequence[tuple[str, pulumi.Input[ModelDashboardInputs]]]
    """(logical name, inputs) per model."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels; the sidecar label is always added."""


class ServingDashboards(pulumi.ComponentResource):
    """One dashboard ConfigMap per served model, labelled for the Grafana sidecar."""

    config_maps: list[k8s.core.v1.ConfigMap]

    def __init__(self, name: str, args: ServingDashboardsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:ServingDashboards", name, None, opts)
        self.config_maps = [
            k8s.core.v1.ConfigMap(
                f"{name}-{model_name}",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=f"{name}-{model_name}",
                    namespace=args.namespace,
                    labels={**args.labels, **DASHBOARD_SIDECAR_LABELS},
                ),
                data=pulumi.Output.from_input(inputs).apply(
                    lambda i: {f"inferplane-{i.series.name}.json": model_dashboard(i).to_json()}
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for model_name, inputs in args.models
        ]
        self.register_outputs({})
