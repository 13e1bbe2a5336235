"""Metric names and selectors, matched to the pinned engine versions.

Every metric name used by the autoscaler, the alert
rules and the dashboards is defined here once, beside its source, and every PromQL selector for a served model is
built here, so a rename upstream is one edit.

Versions the names are valid for:

* **vLLM >= 0.12** (V1 engine, ``vllm/v1/metrics/loggers.py`` ``PrometheusStatLogger``). 0.12 removed
  ``vllm:gpu_cache_usage_perc`` (now ``vllm:kv_cache_usage_perc``) and hid ``vllm:time_per_output_token_seconds``
  (now ``vllm:inter_token_latency_seconds``) behind ``--show-hidden-metrics-for-version=0.11``. prometheus_client
  appends ``_total`` to counters in the exposition, so counters are queried with it. Every series carries
  ``model_name`` (the ``--served-model-name``) and ``engine``.
* **Triton Inference Server 26.05 with the TensorRT-LLM backend** (``tensorrtllm_backend``
  ``inflight_batcher_llm/src`` ``CustomMetricsReporter``): gauges labelled ``model``, ``version`` and a category label
  (``request_type``, ``kv_cache_block_type``). The token-length histograms ``nv_llm_{input,output}_token_len`` are in
  the same reporter in recent backends; the release that added them was not pinned down. The time-to-first-response
  histogram is Triton core's ``nv_inference_first_response_histogram_ms`` (Triton ``docs/user_guide/metrics.md``,
  opt-in with ``--metrics-config histogram_latencies=true``). Triton exposes no inter-token latency and no preemption
  counter.
* **SGLang 0.5.23** (``sglang/srt/observability/metrics_collector.py``, exported with ``--enable-metrics``): the
  scheduler's gauges and the tokenizer's counters and histograms, each labelled ``model_name`` (the
  ``--served-model-name``) and ``engine_type``; only the first tensor-parallel rank of a replica reports the
  scheduler's. Counters are declared with their ``_total`` name, which prometheus_client exposes unchanged.
* **dcgm-exporter 4.x** (``etc/default-counters.csv``; chart ``gpu-helm-charts/dcgm-exporter`` 4.8.2), with its
  Kubernetes mapping on (the chart's default ``DCGM_EXPORTER_KUBERNETES=true``), which labels each GPU's series with
  the ``namespace`` and ``pod`` using it.
* **kube-state-metrics 2.x** as shipped by kube-prometheus-stack (``docs/metrics/workload/deployment-metrics.md``,
  ``horizontalpodautoscaler-metrics.md``).
* **cAdvisor through the kubelet** as kube-prometheus-stack scrapes it (its kubelet ServiceMonitor, ``job="kubelet"``,
  cAdvisor's own ``namespace``, ``pod`` and ``container`` labels kept with ``honorLabels``, and ``metrics_path`` added
  by the chart's default ``kubelet.serviceMonitor.cAdvisorRelabelings``), selected as kubernetes-mixin's CPU rules
  select it, so the kubelet's ``/metrics/resource`` copy of the same counter is not counted twice.

Series of a served model are selected by ``namespace`` and ``pod``, labels the Prometheus Operator attaches to every
target of a PodMonitor or ServiceMonitor. A Deployment's pods are named ``<deployment>-<pod-template-hash>-<suffix>``
(the ReplicaSet controller), so an anchored regex matches exactly one Deployment's pods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from inferplane.components.serving.triton_config import COMPOSING_MODELS, TENSORRT_LLM
from inferplane.components.spec.platform_spec import Engine as SpecEngine

Engine = SpecEngine
"""The serving engines (the spec's ``Engine``)."""

# --- vLLM >= 0.12 (vllm/v1/metrics/loggers.py) ---------------------------------------------------------------
VLLM_REQUESTS_WAITING = "vllm:num_requests_waiting"
"""Gauge: requests queued in the scheduler, not yet running. The autoscaler's signal."""
VLLM_REQUESTS_RUNNING = "vllm:num_requests_running"
"""Gauge: requests in the running batch."""
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
"""Gauge 0-1: share of KV-cache blocks in use (``vllm:gpu_cache_usage_perc`` before 0.12, removed since)."""
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
"""Counter: sequences preempted (KV cache exhausted, their blocks freed and recomputed later)."""
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"
"""Counter: prefill tokens processed."""
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
"""Counter: tokens generated."""
VLLM_TTFT = "vllm:time_to_first_token_seconds"
"""Histogram: time to first token (``_bucket``/``_sum``/``_count``)."""
VLLM_ITL = "vllm:inter_token_latency_seconds"
"""Histogram: inter-token latency (``vllm:time_per_output_token_seconds`` before 0.12)."""
VLLM_E2E_LATENCY = "vllm:e2e_request_latency_seconds"
"""Histogram: end-to-end request latency."""
VLLM_PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
"""Counter: prompt tokens a vLLM replica found in its prefix cache. vLLM 0.32 ``vllm/v1/metrics/loggers.py``
registers the counter ``vllm:prefix_cache_hits`` ("Prefix cache hits, in terms of number of cached tokens"), labelled
``model_name`` and ``engine``; prometheus_client exposes a counter with ``_total``
(the prefix-cache hit rate is hits / queries)."""
VLLM_PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
"""Counter: prompt tokens a vLLM replica looked up in its prefix cache (``vllm:prefix_cache_queries``, "in terms of
number of queried tokens", same source)."""
VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"
"""Counter: prompt tokens a vLLM replica did not compute, by where their KV came from (label
:data:`VLLM_CACHE_SOURCE_LABEL`: ``device``, ``host``, ``p2p``, ``disk``, ``external_unspecified``); vLLM 0.32
``vllm/v1/metrics/loggers.py`` registers ``vllm:prompt_tokens_cached_by_source``, exposed with ``_total``. The host
KV tier's hits are ``source="host"``."""
VLLM_CACHE_SOURCE_LABEL = "source"
"""The label naming the tier on :data:`VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE`."""
VLLM_KV_OFFLOAD_STORE_BYTES = "vllm:kv_offload_store_bytes_total"
"""Counter: bytes of KV blocks the OffloadingConnector stored to the host tier (vLLM 0.32
``vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py``: ``vllm:kv_offload_store_bytes``)."""
VLLM_KV_OFFLOAD_LOAD_BYTES = "vllm:kv_offload_load_bytes_total"
"""Counter: bytes of KV blocks loaded back from the host tier on prefix hits (same source:
``vllm:kv_offload_load_bytes``)."""
VLLM_HOST_TIER_ONLY = (VLLM_KV_OFFLOAD_STORE_BYTES, VLLM_KV_OFFLOAD_LOAD_BYTES)
"""Series only a server with a host KV tier exposes (the OffloadingConnector registers them), which vLLM's CPU build
cannot run: the tests check them against vLLM's source, not a CPU server's exposition."""
VLLM_MODEL_LABEL = "model_name"
"""The label carrying ``--served-model-name`` on every vLLM series."""

# --- SGLang 0.5.23 (sglang/srt/observability/metrics_collector.py) -----------------------------------------------
SGLANG_QUEUE_REQUESTS = "sglang:num_queue_reqs"
"""Gauge: requests in the scheduler's waiting queue ("The number of requests in the waiting queue"). The autoscaler's
signal."""
SGLANG_RUNNING_REQUESTS = "sglang:num_running_reqs"
"""Gauge: requests in the running batch."""
SGLANG_TOKEN_USAGE = "sglang:token_usage"
"""Gauge 0-1: used KV-pool tokens over the pool's ``max_total_num_tokens`` (``PoolStatsObserver``)."""
SGLANG_CACHED_TOKENS = "sglang:cached_tokens_total"
"""Counter: prompt tokens served from the prefix cache, labelled by ``cache_source`` (device, host, storage); over
``sglang:prompt_tokens_total`` it is the token hit ratio (the gauge ``sglang:cache_hit_rate`` covers recent prefill
batches only)."""
SGLANG_RETRACTIONS = "sglang:num_retracted_requests_total"
"""Counter: requests retracted from the running batch when the KV pool ran out (SGLang's preemption; "Total number
of retracted requests")."""
SGLANG_PROMPT_TOKENS = "sglang:prompt_tokens_total"
"""Counter: prefill tokens processed."""
SGLANG_GENERATION_TOKENS = "sglang:generation_tokens_total"
"""Counter: tokens generated."""
SGLANG_TTFT = "sglang:time_to_first_token_seconds"
"""Histogram: time to first token."""
SGLANG_ITL = "sglang:inter_token_latency_seconds"
"""Histogram: inter-token latency."""
SGLANG_E2E_LATENCY = "sglang:e2e_request_latency_seconds"
"""Histogram: end-to-end request latency."""
SGLANG_MODEL_LABEL = "model_name"
"""The label carrying ``--served-model-name`` on every SGLang series."""

# --- Triton 26.05 + TensorRT-LLM backend ------------------------------------------------------------------------
TRTLLM_REQUESTS = "nv_trt_llm_request_metrics"
"""Gauge family, ``request_type`` in active|max|scheduled|context|waiting."""
TRTLLM_KV_CACHE_BLOCKS = "nv_trt_llm_kv_cache_block_metrics"
"""Gauge family, ``kv_cache_block_type`` in max|free|used|tokens_per|reused|fraction."""
TRTLLM_OUTPUT_TOKENS = "nv_llm_output_token_len"
"""Histogram of output tokens per response (``response_metric_type="total_output_tokens"``); ``_sum`` counts tokens."""
TRTLLM_INPUT_TOKENS = "nv_llm_input_token_len"
"""Histogram of input tokens per request; ``_sum`` counts prompt tokens."""
TRITON_PENDING_REQUESTS = "nv_inference_pending_request_count"
"""Gauge: requests Triton holds for a model before its backend takes them."""
TRITON_FIRST_RESPONSE = "nv_inference_first_response_histogram_ms"
"""Histogram (milliseconds): time to the first streamed response of a decoupled model, i.e. time to first token
for the streaming ensemble. Opt-in: Triton must run with the ``histogram_latencies`` metrics setting
(:func:`components.serving.triton_service.frontend_launcher` sets it)."""
TRITON_ENGINE_MODEL = TENSORRT_LLM
"""The Triton model that runs the engine (its ``model`` label carries the TRT-LLM backend metrics)."""
TRITON_COMPOSING_MODELS = "|".join(COMPOSING_MODELS)
"""RE2 alternation of the models the ensembles chain: every other Triton model of a pod is an ensemble clients
call (one per served name, :func:`components.serving.triton_config.model_repository`), whose first response is the first
token."""

# --- dcgm-exporter 4.x default counters -------------------------------------------------------------------------
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
"""Gauge, percent: time the GPU was busy."""
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
"""Gauge, MiB: frame-buffer memory used."""
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
"""Gauge, MiB: frame-buffer memory free."""
DCGM_GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
"""Gauge, degrees Celsius."""
DCGM_XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
"""Gauge: the last XID error the driver reported for the GPU (0 when none)."""
DCGM_POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
"""Gauge, watts."""
DCGM_SELECTOR_LABELS: dict[str, str] = {"app.kubernetes.io/name": "dcgm-exporter"}
"""Pod labels of the dcgm-exporter chart's DaemonSet (``dcgm-exporter.selectorLabels``), whichever its namespace."""
DCGM_METRICS_PORT = "metrics"
"""Container port name of dcgm-exporter (9400, ``/metrics``)."""

# --- kube-state-metrics 2.x -------------------------------------------------------------------------------------
KSM_DEPLOYMENT_AVAILABLE = "kube_deployment_status_replicas_available"
"""Gauge: available (ready for minReadySeconds) replicas of a Deployment; labels ``namespace``, ``deployment``."""
KSM_DEPLOYMENT_DESIRED = "kube_deployment_spec_replicas"
"""Gauge: replicas the Deployment asks for (what the autoscaler set)."""
KSM_HPA_CURRENT = "kube_horizontalpodautoscaler_status_current_replicas"
"""Gauge: an HPA's current replicas; labels ``namespace``, ``horizontalpodautoscaler``."""
KSM_HPA_MAX = "kube_horizontalpodautoscaler_spec_max_replicas"
"""Gauge: an HPA's ceiling."""
# --- cAdvisor, through the kubelet ---------------------------------------------------------------------------------
CONTAINER_CPU_USAGE_SECONDS_TOTAL = "container_cpu_usage_seconds_total"
"""Counter: CPU seconds a container used (user and system), labelled ``namespace``, ``pod``, ``container``."""
CADVISOR_SELECTOR = 'job="kubelet",metrics_path="/metrics/cadvisor"'
"""kube-prometheus-stack's cAdvisor scrape (kubernetes-mixin's selector for container CPU)."""

KEDA_HPA_PREFIX = "keda-hpa-"
"""KEDA names the HPA it manages ``keda-hpa-<ScaledObject name>`` unless ``advanced.horizontalPodAutoscalerConfig.name``
is set (keda-docs ``reference/scaledobject-spec.md``, "Default: keda-hpa-{scaled-object-name}")."""

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _check_name(field: str, value: str) -> None:
    if not value or len(value) > 253 or not _NAME.match(value):
        raise ValueError(f"{field} {value!r} is not a Kubernetes object name (RFC 1123)")


@dataclass(frozen=True)
class ModelSeries:
    """Where one served model's series live: its engine, namespace, Deployment and served model name.

    The PromQL every consumer needs (KEDA trigger, recording and alerting rules, dashboards) is built from this, so
    the three can never select different series.
    """

    name: str
    """Served model name (``--served-model-name`` for vLLM); also the ``model`` label on recorded series."""
    engine: Engine
    namespace: str
    """Namespace of the Deployment."""
    deployment: str
    """Name of the model server's Deployment (the KEDA scale target)."""

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        _check_name("namespace", self.namespace)
        _check_name("deployment", self.deployment)

    @property
    def hpa(self) -> str:
        """The HPA KEDA manages for this model: the ScaledObject is named after the Deployment."""
        return f"{KEDA_HPA_PREFIX}{self.deployment}"

    @property
    def pods(self) -> str:
        """Label matchers for the Deployment's pods (RE2 regex, anchored by PromQL)."""
        deployment = self.deployment.replace(".", r"\\.")
        return f'namespace="{self.namespace}",pod=~"{deployment}-[a-z0-9]+-[a-z0-9]+"'

    @property
    def engine_selector(self) -> str:
        """Matchers for the engine's own series (vLLM, SGLang: plus ``model_name``; Triton: plus the engine model)."""
        if self.engine == "vllm":
            return f'{self.pods},{VLLM_MODEL_LABEL}="{self.name}"'
        if self.engine == "sglang":
            return f'{self.pods},{SGLANG_MODEL_LABEL}="{self.name}"'
        return f'{self.pods},model="{TRITON_ENGINE_MODEL}"'

    # --- the autoscaler's signal ---------------------------------------------------------------------------
    def queue_depth(self) -> str:
        """Requests waiting for a batch slot across all replicas: one element, as KEDA's Prometheus scaler needs.

        vLLM: ``vllm:num_requests_waiting``. SGLang: ``sglang:num_queue_reqs``. Triton: the TensorRT-LLM batch
        manager's waiting requests (requests reach the backend at once under decoupled in-flight batching, so Triton's
        own pending count stays near 0).
        """
        if self.engine == "vllm":
            return f"sum({VLLM_REQUESTS_WAITING}{{{self.engine_selector}}})"
        if self.engine == "sglang":
            return f"sum({SGLANG_QUEUE_REQUESTS}{{{self.engine_selector}}})"
        return f'sum({TRTLLM_REQUESTS}{{{self.engine_selector},request_type="waiting"}})'

    def running(self) -> str:
        """Requests in the running batch across replicas."""
        if self.engine == "vllm":
            return f"sum({VLLM_REQUESTS_RUNNING}{{{self.engine_selector}}})"
        if self.engine == "sglang":
            return f"sum({SGLANG_RUNNING_REQUESTS}{{{self.engine_selector}}})"
        return f'sum({TRTLLM_REQUESTS}{{{self.engine_selector},request_type="active"}})'

    # --- saturation ------------------------------------------------------------------------------------------
    def kv_cache_usage(self) -> str:
        """The fullest replica's KV-cache usage, 0-1."""
        return self._kv_cache_usage("max")

    def kv_cache_usage_total(self) -> str:
        """KV-cache usage summed over the replicas (0-1 each): one element, which KEDA's ``AverageValue`` target
        reads as the average usage per replica."""
        return self._kv_cache_usage("sum")

    def _kv_cache_usage(self, aggregation: str) -> str:
        if self.engine == "vllm":
            return f"{aggregation}({VLLM_KV_CACHE_USAGE}{{{self.engine_selector}}})"
        if self.engine == "sglang":
            return f"{aggregation}({SGLANG_TOKEN_USAGE}{{{self.engine_selector}}})"
        return f'{aggregation}({TRTLLM_KV_CACHE_BLOCKS}{{{self.engine_selector},kv_cache_block_type="fraction"}})'

    def preemptions_rate(self) -> str | None:
        """Preemptions per second over 5m (SGLang: retractions); None for Triton (TensorRT-LLM exports no preemption
        counter)."""
        if self.engine == "vllm":
            return f"sum(rate({VLLM_PREEMPTIONS}{{{self.engine_selector}}}[5m]))"
        if self.engine == "sglang":
            return f"sum(rate({SGLANG_RETRACTIONS}{{{self.engine_selector}}}[5m]))"
        return None

    def prefix_cache_hit_ratio(self) -> str | None:
        """Prompt tokens found in the engines' prefix caches over prompt tokens looked up, 5m, across replicas; None
        for Triton (TensorRT-LLM exports reused blocks but no lookups, so no ratio can be formed).

        vLLM: ``prefix_cache_hits / prefix_cache_queries``; SGLang: ``cached_tokens / prompt_tokens``."""
        if self.engine == "vllm":
            hits = f"sum(rate({VLLM_PREFIX_CACHE_HITS}{{{self.engine_selector}}}[5m]))"
            queries = f"sum(rate({VLLM_PREFIX_CACHE_QUERIES}{{{self.engine_selector}}}[5m]))"
            return f"{hits} / {queries}"
        if self.engine == "sglang":
            hits = f"sum(rate({SGLANG_CACHED_TOKENS}{{{self.engine_selector}}}[5m]))"
            return f"{hits} / {self.prompt_tokens_rate()}"
        return None

    def cached_prompt_tokens_by_tier(self) -> str | None:
        """Prompt tokens per second served from a cache over 5m, one series per tier (device, host, ...); vLLM only
        (the other engines report no tier)."""
        if self.engine != "vllm":
            return None
        counter = f"{VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE}{{{self.engine_selector}}}"
        return f"sum by ({VLLM_CACHE_SOURCE_LABEL}) (rate({counter}[5m]))"

    def host_kv_bytes_rates(self) -> tuple[str, str] | None:
        """(stored, loaded) bytes per second of the host KV tier over 5m, across replicas; vLLM only."""
        if self.engine != "vllm":
            return None
        return (
            f"sum(rate({VLLM_KV_OFFLOAD_STORE_BYTES}{{{self.engine_selector}}}[5m]))",
            f"sum(rate({VLLM_KV_OFFLOAD_LOAD_BYTES}{{{self.engine_selector}}}[5m]))",
        )

    # --- latency -----------------------------------------------------------------------------------------------
    def ttft_quantile(self, quantile: float) -> str:
        """Time to first token in seconds at ``quantile`` over 5m, across replicas."""
        if self.engine in ("vllm", "sglang"):
            name = VLLM_TTFT if self.engine == "vllm" else SGLANG_TTFT
            buckets = f"{name}_bucket{{{self.engine_selector}}}"
            return f"histogram_quantile({quantile}, sum by (le) (rate({buckets}[5m])))"
        buckets = f'{TRITON_FIRST_RESPONSE}_bucket{{{self.pods},model!~"{TRITON_COMPOSING_MODELS}"}}'
        return f"histogram_quantile({quantile}, sum by (le) (rate({buckets}[5m]))) / 1000"

    def itl_quantile(self, quantile: float) -> str | None:
        """Inter-token latency in seconds at ``quantile`` over 5m; None for Triton (not exported)."""
        if self.engine in ("vllm", "sglang"):
            name = VLLM_ITL if self.engine == "vllm" else SGLANG_ITL
            buckets = f"{name}_bucket{{{self.engine_selector}}}"
            return f"histogram_quantile({quantile}, sum by (le) (rate({buckets}[5m])))"
        return None

    # --- throughput --------------------------------------------------------------------------------------------
    def generation_tokens_rate(self) -> str:
        """Generated tokens per second over 5m, across replicas."""
        if self.engine == "vllm":
            return f"sum(rate({VLLM_GENERATION_TOKENS}{{{self.engine_selector}}}[5m]))"
        if self.engine == "sglang":
            return f"sum(rate({SGLANG_GENERATION_TOKENS}{{{self.engine_selector}}}[5m]))"
        return f"sum(rate({TRTLLM_OUTPUT_TOKENS}_sum{{{self.engine_selector}}}[5m]))"

    def prompt_tokens_rate(self) -> str:
        """Prompt tokens per second over 5m, across replicas."""
        if self.engine == "vllm":
            return f"sum(rate({VLLM_PROMPT_TOKENS}{{{self.engine_selector}}}[5m]))"
        if self.engine == "sglang":
            return f"sum(rate({SGLANG_PROMPT_TOKENS}{{{self.engine_selector}}}[5m]))"
        return f"sum(rate({TRTLLM_INPUT_TOKENS}_sum{{{self.engine_selector}}}[5m]))"

    # --- replicas (kube-state-metrics) -------------------------------------------------------------------------
    def available_replicas(self) -> str:
        """Available replicas of the Deployment."""
        return f'sum({KSM_DEPLOYMENT_AVAILABLE}{{namespace="{self.namespace}",deployment="{self.deployment}"}})'

    def desired_replicas(self) -> str:
        """Replicas the Deployment asks for."""
        return f'sum({KSM_DEPLOYMENT_DESIRED}{{namespace="{self.namespace}",deployment="{self.deployment}"}})'

    def hpa_selector(self) -> str:
        """Matchers for KEDA's HPA in kube-state-metrics."""
        return f'namespace="{self.namespace}",horizontalpodautoscaler="{self.hpa}"'

    # --- GPUs (dcgm-exporter, Kubernetes mapping) -------------------------------------------------------------
    def gpu_utilization(self) -> str:
        """Mean GPU busy percentage over the model's GPUs."""
        return f"avg({DCGM_GPU_UTIL}{{{self.pods}}})"

    def gpu_memory_used_bytes(self) -> str:
        """Frame-buffer memory used over the model's GPUs, bytes (DCGM reports MiB)."""
        return f"sum({DCGM_FB_USED}{{{self.pods}}}) * 1048576"
