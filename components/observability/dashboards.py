"""Grafana dashboards, one per served model, built from typed Python and shipped as sidecar ConfigMaps.

kube-prometheus-stack's Grafana runs the ``k8s-sidecar`` that loads every ConfigMap labelled ``grafana_dashboard: "1"``
(chart values ``grafana.sidecar.dashboards.label``/``labelValue``). Panels read the recorded series of
:mod:`components.observability.alerts` (so dashboards and alerts show the same numbers and survive engine metric renames
through :mod:`components.observability.metrics`), kube-state-metrics for replicas and dcgm-exporter for GPUs.

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
    ref_id: str = Field(pattern=r"^[A-Z]+$")
    """Grafana's query id within the panel: ``A`` to ``Z``, then ``AA``, ``AB``, ... (:func:`grafana_ref_id`)."""

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
class PanelDraft:
    """A panel before layout: what it shows, not where it sits or which id it gets."""

    title: str
    unit: str
    targets: Sequence[tuple[str, str]]
    """(PromQL, legend) per query, lettered A, B, ... in this order."""
    threshold: float | None = None
    description: str = ""


PANEL_WIDTH = GRID_COLUMNS // 2
PANEL_HEIGHT = 8
_REF_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def grafana_ref_id(index: int) -> str:
    """The ``refId`` Grafana gives a panel's query number ``index`` (from 0): ``A`` to ``Z``, then ``AA``, ``AB``,
    ..., ``ZZ``, ``AAA`` (Grafana's ``getRefId`` in ``packages/grafana-data/src/query/refId.ts``), so a panel with
    one query per model holds any number of models."""
    letters = len(_REF_LETTERS)
    if index < letters:
        return _REF_LETTERS[index]
    return grafana_ref_id(index // letters - 1) + _REF_LETTERS[index % letters]


def two_column_panels(drafts: Sequence[PanelDraft], *, first_id: int = 1, y: int = 0) -> tuple[Panel, ...]:
    """Lay ``drafts`` out left to right, two per row from row ``y``, numbered from ``first_id``."""
    return tuple(
        Panel(
            id=first_id + index,
            title=draft.title,
            unit=draft.unit,
            grid=GridPos(x=(index % 2) * PANEL_WIDTH, y=y + (index // 2) * PANEL_HEIGHT, w=PANEL_WIDTH, h=PANEL_HEIGHT),
            targets=tuple(
                Target(expr=expr, legend=legend, ref_id=grafana_ref_id(i))
                for i, (expr, legend) in enumerate(draft.targets)
            ),
            threshold=None if draft.threshold is None else Threshold(value=draft.threshold),
            description=draft.description,
        )
        for index, draft in enumerate(drafts)
    )


@dataclass(frozen=True)
class ModelDashboardInputs:
    """What one model's dashboard needs."""

    series: ModelSeries
    ttft_slo_ms: int
    itl_slo_ms: int
    replica_hourly_usd: float | None
    """From sizing; without a catalog price there is no cost panel."""
    host_kv_cache: bool = False
    """The model keeps KV blocks in host memory (sizing's host KV tier): panels of its hits and traffic."""


def model_dashboard(inputs: ModelDashboardInputs) -> Dashboard:
    """The per-model dashboard: latency percentiles, throughput, saturation, replicas, GPUs and cost."""
    s = inputs.series
    drafts = [
        *_latency_panels(inputs),
        *_throughput_panels(s),
        *_host_kv_panels(inputs),
        *_replica_and_gpu_panels(s),
        *_cost_panels(inputs),
    ]
    return Dashboard(
        uid=f"inferplane-{s.name}"[:40],
        title=f"inferplane / {s.name} ({s.engine})",
        tags=("inferplane", s.engine),
        panels=two_column_panels(drafts),
    )


def _recorded(s: ModelSeries, metric: str, operation: str) -> str:
    """One model's recorded series (:func:`components.observability.alerts.record_name`), selected by its labels."""
    return f'{record_name(metric, operation)}{{model="{s.name}",namespace="{s.namespace}"}}'


def _percentile_targets(s: ModelSeries, metric: str) -> list[tuple[str, str]]:
    return [(_recorded(s, metric, f"p{round(q * 100)}"), f"p{round(q * 100)}") for q in QUANTILES]


def _latency_panels(inputs: ModelDashboardInputs) -> list[PanelDraft]:
    """TTFT percentiles, and ITL percentiles where the engine reports ITL (vLLM, SGLang), each with its objective."""
    s = inputs.series
    drafts = [
        PanelDraft(
            "Time to first token",
            "s",
            _percentile_targets(s, "ttft_seconds"),
            inputs.ttft_slo_ms / 1000,
            f"p95 objective {inputs.ttft_slo_ms} ms (red line).",
        )
    ]
    if s.itl_quantile(0.95) is not None:
        drafts.append(
            PanelDraft(
                "Inter-token latency",
                "s",
                _percentile_targets(s, "itl_seconds"),
                inputs.itl_slo_ms / 1000,
                f"p95 objective {inputs.itl_slo_ms} ms (red line).",
            )
        )
    return drafts


def _throughput_panels(s: ModelSeries) -> list[PanelDraft]:
    """Token rates, the fullest replica's KV cache (red at the alert's 95%), and preemptions and the prefix-cache hit
    ratio where reported."""
    drafts = [
        PanelDraft(
            "Tokens per second",
            "short",
            [
                (_recorded(s, "generation_tokens", "rate5m"), "generated"),
                (_recorded(s, "prompt_tokens", "rate5m"), "prompt"),
            ],
        ),
        PanelDraft(
            "KV-cache usage (fullest replica)", "percentunit", [(_recorded(s, "kv_cache_usage", "max"), "max")], 0.95
        ),
    ]
    preemptions = s.preemptions_rate()
    if preemptions is not None:
        drafts.append(
            PanelDraft(
                "Preemptions",
                "short",
                [(preemptions, "per second")],
                description="Any preemption means the KV cache ran out.",
            )
        )
    hit_ratio = s.prefix_cache_hit_ratio()
    if hit_ratio is not None:
        drafts.append(
            PanelDraft(
                "Prefix-cache hit ratio",
                "percentunit",
                [(hit_ratio, "prompt tokens from the cache")],
                description="Prompt tokens the engines found in their prefix caches, over all prompt tokens.",
            )
        )
    return drafts


def _host_kv_panels(inputs: ModelDashboardInputs) -> list[PanelDraft]:
    """Where cached prompt tokens came from (device or host tier) and the host tier's traffic, for a model with a
    host KV tier whose engine reports them (vLLM)."""
    s = inputs.series
    by_tier, rates = s.cached_prompt_tokens_by_tier(), s.host_kv_bytes_rates()
    if not inputs.host_kv_cache or by_tier is None or rates is None:
        return []
    stored, loaded = rates
    return [
        PanelDraft(
            "Cached prompt tokens by tier",
            "short",
            [(by_tier, "{{source}}")],
            description="Prompt tokens per second not computed, by where their KV came from: the device's prefix "
            "cache or the host tier (blocks loaded back from host memory).",
        ),
        PanelDraft(
            "Host KV tier traffic",
            "Bps",
            [(stored, "stored to host"), (loaded, "loaded from host")],
            description="Bytes per second the engines offloaded to host memory and loaded back on prefix hits.",
        ),
    ]


def _replica_and_gpu_panels(s: ModelSeries) -> list[PanelDraft]:
    """Waiting and running requests against replicas, then the GPUs' utilisation and memory."""
    return [
        PanelDraft(
            "Queue depth and replicas",
            "short",
            [
                (_recorded(s, "queue_depth", "sum"), "waiting requests"),
                (s.running(), "running requests"),
                (s.available_replicas(), "available replicas"),
                (s.desired_replicas(), "desired replicas"),
            ],
        ),
        PanelDraft("GPU utilisation", "percent", [(s.gpu_utilization(), "mean over the model's GPUs")]),
        PanelDraft("GPU memory used", "bytes", [(s.gpu_memory_used_bytes(), "frame buffer")]),
    ]


def _cost_panels(inputs: ModelDashboardInputs) -> list[PanelDraft]:
    """Dollars per million generated tokens, only when the catalog has a price for the replica."""
    if inputs.replica_hourly_usd is None:
        return []
    s = inputs.series
    replicas = s.available_replicas()
    tokens = _recorded(s, "generation_tokens", "rate5m")
    return [
        PanelDraft(
            "$ per million generated tokens",
            "currencyUSD",
            [(f"({inputs.replica_hourly_usd:g} * {replicas}) / ({tokens} * 3600 / 1e6)", "on-demand")],
            description=f"On-demand price {inputs.replica_hourly_usd:g} USD per replica-hour (catalog) x available "
            "replicas, over generated tokens.",
        )
    ]


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
