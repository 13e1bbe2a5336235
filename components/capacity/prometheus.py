"""Sizing of each cluster's Prometheus: the series it holds, the memory and CPU it requests, the disk it needs.

kube-prometheus-stack's Prometheus runs on the system nodes beside the gateway, and the chart requests nothing for it
(``prometheusSpec.resources: {}``): the scheduler counted it as zero, so it could land on a node the gateway's pods
had filled and be OOM-killed, or starve them. Its memory follows the series it holds, not the retention: the head
block keeps about the last two to three hours in memory, and older blocks are read from disk (through the page
cache, which no request reserves). So the requests come from the series the platform exposes at its ceiling, and
the retention sets the disk, checked against the volume.

**Series** (:func:`cluster_series`) = the sum over what is scraped of (targets x series per target), at the ceiling:
every model replica at ``max_replicas``, every GPU of the pools at their maximum nodes (dcgm-exporter), every node
(node-exporter, the kubelet and cAdvisor), every pod (cAdvisor, kube-state-metrics), every gateway pod at KEDA's
ceiling (Envoy and the processor), plus the control plane and the monitoring stack itself. The per-target figures
are estimates of this platform's exporters, named where each is defined; they are not measured on a running
cluster (no cluster is reachable from here), so ``prometheus_tsdb_head_series`` on a live one is what to compare.

**Memory per series**, after Brian Brazil, "How much RAM does Prometheus 2.x need for cardinality and ingestion?"
(Robust Perception, 2019; a profile of Prometheus 2.9 with 100k series): about 732 bytes per series, 32 per label pair
and the series' name twice, all doubled for Go's garbage collector (cardinality); plus, for ingestion, up to three
hours of samples (head compaction) at the scrape interval, 1-2 bytes a sample (Prometheus docs, "Storage"), chunks
carrying 50% overhead, doubled again for the collector. At a 15 s interval that is about 6.6 KiB a series, within the
7-9 KiB a series others give as a rule of thumb.

**CPU**: PromLabs' rule of thumb (training.promlabs.com, "Efficient implementation") is that a large Prometheus
server ingests up to a million samples a second; :data:`SAMPLES_PER_SECOND_PER_CORE` takes a twentieth of that per
core, plus :data:`BASE_CPU_MILLICORES` for rule evaluation, compaction and the dashboards' and KEDA's queries.

**Disk**: Prometheus's storage docs' formula, retention x samples a second x bytes a sample (2, the upper end). The
TSDB stops at ``retentionSize`` (``RETENTION_SIZE_SHARE`` of the volume), so a volume too small for the retention
keeps less history than ``retention_days`` says: reported as a problem.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.spec.platform_spec import ObservabilitySpec, ServingCluster

MIB = 1024**2
GIB = 1024**3

# --- series per target (estimates: what this platform's exporters expose) ---------------------------------------

SERIES_PER_MODEL_REPLICA = 1_000
"""One model server's ``/metrics``: vLLM 0.32 exposes about fifteen histograms of 20-odd buckets each (TTFT,
inter-token latency, end-to-end, queue, prefill, decode, prompt and output tokens, iteration tokens...), its
counters and gauges, the HTTP server's per-handler histograms and the Python process's series. Triton and SGLang
expose the same order. Estimate."""
SERIES_PER_GPU = 40
"""dcgm-exporter's default counters (utilisation, memory, clocks, power, temperature, PCIe and NVLink, XID errors),
one series each per GPU. Estimate."""
SERIES_PER_NODE = 900
"""node-exporter (filesystems, network devices, memory, load...) and the kubelet's own metrics per node, apart from
its CPUs. Estimate."""
SERIES_PER_NODE_VCPU = 10
"""node-exporter's per-CPU series (``node_cpu_seconds_total`` in 8 modes, frequency): a 192-vCPU GPU node adds
about 1,900. Estimate."""
SERIES_PER_POD = 100
"""cAdvisor's container series (about 40 per container after the chart's drops, for about two containers a pod) and
kube-state-metrics' per-pod series. Estimate."""
SERIES_PER_GATEWAY_POD = 1_500
"""One gateway pod's Envoy (listeners, the HTTP connection manager, ext_proc, the processor's cluster) and its
processor's model-independent series. Estimate."""
SERIES_PER_GATEWAY_POD_MODEL = 400
"""Per model a gateway pod serves: Envoy's stats of its cluster (and aggregate) and the processor's per-model and
per-replica series. Estimate."""
SERIES_PER_GATEWAY_POD_TENANT_MODEL = 30
"""Per tenant and model, the processor's request, token and rejection counters. Estimate."""
SERIES_FIXED = 30_000
"""The API server (its request-duration histograms alone run to tens of thousands), CoreDNS, KEDA, the Prometheus
operator, Prometheus, Alertmanager, Grafana and kube-state-metrics' cluster-wide objects. Estimate."""
DAEMONSET_PODS_PER_NODE = 4
"""The CNI, kube-proxy, the CSI node plugin and node-exporter on every node."""
FIXED_PODS = 20
"""The cluster's other pods: CoreDNS, the CSI controller, KEDA, the autoscaler and the monitoring stack."""

# --- bytes and cores (sourced: see the module docstring) ------------------------------------------------------------

BYTES_PER_SERIES = 732
"""Robust Perception's per-series head cost (Prometheus 2.9 profile), before labels, name and the GC's doubling."""
BYTES_PER_LABEL_PAIR = 32
LABEL_PAIRS = 12
"""Labels a series carries here: the metric's own and the target's (namespace, pod, container, instance, job,
endpoint, service...)."""
NAME_BYTES = 60
"""A series' name, held twice."""
GC_FACTOR = 2
"""Go's garbage collector lets the heap grow to twice the live data (GOGC=100)."""
HEAD_SECONDS = 3 * 3600
"""Samples the head holds before compaction: up to three hours."""
BYTES_PER_SAMPLE = 2
"""Prometheus docs ("Storage"): 1-2 bytes a sample; the upper end."""
CHUNK_OVERHEAD = 1.5
"""Head chunks: 192 bytes held for 128 of data."""
BASE_MEMORY_BYTES = 512 * MIB
"""The Go runtime, service discovery, the rules' and queries' working memory."""
MEMORY_STEP_BYTES = 64 * MIB

RETENTION_SIZE_SHARE = 0.85
"""Prometheus deletes old blocks once the TSDB reaches this share of the volume, before the volume fills (the WAL
and compaction need headroom; a full volume stops ingestion)."""

SAMPLES_PER_SECOND_PER_CORE = 50_000
BASE_CPU_MILLICORES = 250
CPU_STEP_MILLICORES = 50


class PrometheusSizing(BaseModel):
    """One cluster's Prometheus: what it holds, what each replica requests, and whether its volume holds the
    retention."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: ServingCluster = Field(description="The cluster whose monitoring stack runs this Prometheus.")
    replicas: int = Field(description="Prometheus replicas (each scrapes everything: 2 in prod, else 1).")
    series: int = Field(description="Active series at the platform's ceiling (estimated from the targets).")
    samples_per_second: float = Field(description="Samples ingested a second: series over the scrape interval.")
    cpu_millicores: int = Field(description="CPU request of one replica, millicores.")
    memory_mib: int = Field(description="Memory request of one replica, MiB.")
    retention_days: int = Field(description="``observability.retention_days``.")
    disk_gib: float = Field(description="Disk the retention needs at this ingestion (storage docs' formula), GiB.")
    volume_gib: int = Field(description="``observability.storage_gib``: each replica's volume.")
    retention_gib: float = Field(description="What the TSDB may fill before deleting old blocks (retentionSize).")


def cluster_series(
    *,
    model_replicas: int,
    gpus: int,
    nodes: Sequence[tuple[int, int]],
    gateway_pods: int,
    gateway_models: int,
    tenants: int,
    other_pods: int,
) -> int:
    """The series one cluster's Prometheus holds at the ceiling: ``nodes`` as (count, vCPUs each); ``other_pods``
    the pods beyond model replicas, gateway pods and each node's DaemonSets (the embedder...)."""
    node_count = sum(count for count, _ in nodes)
    pods = model_replicas + gateway_pods + other_pods + DAEMONSET_PODS_PER_NODE * node_count + FIXED_PODS
    gateway = gateway_pods * (
        SERIES_PER_GATEWAY_POD
        + SERIES_PER_GATEWAY_POD_MODEL * gateway_models
        + SERIES_PER_GATEWAY_POD_TENANT_MODEL * tenants * gateway_models
    )
    return (
        model_replicas * SERIES_PER_MODEL_REPLICA
        + gpus * SERIES_PER_GPU
        + sum(count * (SERIES_PER_NODE + SERIES_PER_NODE_VCPU * vcpus) for count, vcpus in nodes)
        + pods * SERIES_PER_POD
        + gateway
        + SERIES_FIXED
    )


def bytes_per_series(scrape_interval_seconds: int) -> float:
    """Head memory one series costs at this scrape interval: cardinality plus ingestion (module docstring)."""
    cardinality = (BYTES_PER_SERIES + BYTES_PER_LABEL_PAIR * LABEL_PAIRS + 2 * NAME_BYTES) * GC_FACTOR
    ingestion = HEAD_SECONDS / scrape_interval_seconds * BYTES_PER_SAMPLE * CHUNK_OVERHEAD * GC_FACTOR
    return cardinality + ingestion


def round_up(value: float, step: int) -> int:
    """``value`` rounded up to a multiple of ``step`` (a request's granularity)."""
    return math.ceil(value / step) * step


def prometheus_replicas(environment: str) -> int:
    """Prometheus replicas (and Alertmanager's): two in prod, so a node's loss leaves one scraping."""
    return 2 if environment == "prod" else 1


def size_prometheus(
    cluster: ServingCluster, observability: ObservabilitySpec, environment: str, series: int
) -> PrometheusSizing:
    """Requests and disk of ``cluster``'s Prometheus holding ``series``."""
    samples = series / observability.scrape_interval_seconds
    memory = BASE_MEMORY_BYTES + series * bytes_per_series(observability.scrape_interval_seconds)
    cpu = BASE_CPU_MILLICORES + 1000 * samples / SAMPLES_PER_SECOND_PER_CORE
    disk = observability.retention_days * 86_400 * samples * BYTES_PER_SAMPLE / GIB
    return PrometheusSizing(
        cluster=cluster,
        replicas=prometheus_replicas(environment),
        series=series,
        samples_per_second=round(samples, 1),
        cpu_millicores=round_up(cpu, CPU_STEP_MILLICORES),
        memory_mib=round_up(memory, MEMORY_STEP_BYTES) // MIB,
        retention_days=observability.retention_days,
        disk_gib=round(disk, 1),
        volume_gib=observability.storage_gib,
        retention_gib=round(observability.storage_gib * RETENTION_SIZE_SHARE, 1),
    )


def retention_problem(sizing: PrometheusSizing, platform_key: str) -> str | None:
    """Why the volume cannot hold the retention at this ingestion, with the volume that would; None when it can."""
    if sizing.disk_gib <= sizing.retention_gib:
        return None
    needed = math.ceil(sizing.disk_gib / (sizing.retention_gib / sizing.volume_gib))
    return (
        f"{platform_key}.observability.storage_gib: {sizing.cluster}'s Prometheus keeps {sizing.retention_days} days "
        f"of about {sizing.series:,} series ({sizing.samples_per_second:,.0f} samples/s at 2 bytes each), "
        f"{sizing.disk_gib:,.1f} GiB, more than the {sizing.retention_gib:,.1f} GiB its {sizing.volume_gib} GiB volume "
        f"lets it fill; old data would go before {sizing.retention_days} days; fix: storage_gib {needed} or fewer "
        "retention_days"
    )
