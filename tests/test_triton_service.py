"""TritonTrtLlmService: engine build from sizing, a repository that parses as Triton's ModelConfig, ports, probes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pulumi
import pytest

from inferplane.components.sizing import size_platform
from inferplane.components.triton_config import model_repository, render
from inferplane.components.triton_service import (
    TRITON_IMAGE,
    TritonTrtLlmService,
    TritonTrtLlmServiceArgs,
    engine_build_commands,
    engine_fingerprint,
)
from inferplane.tool.mockengine import PlatformMocks, evaluate
from tests.references import tritonclient_dir
from tests.serving_support import container, evaluate_servers, stack_spec

PARSE = textwrap.dedent(
    """
    import importlib.util, json, os, sys
    from google.protobuf import text_format
    # The module file alone: the tritonclient.grpc package would also import grpcio, which this check does not need.
    path = os.path.join(os.environ["PYTHONPATH"], "tritonclient", "grpc", "model_config_pb2.py")
    spec = importlib.util.spec_from_file_location("model_config_pb2", path)
    model_config_pb2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_config_pb2)
    results = {}
    for name, text in json.load(sys.stdin).items():
        config = text_format.Parse(text, model_config_pb2.ModelConfig())
        results[name] = text_format.MessageToString(config, as_one_line=True)
    json.dump(results, sys.stdout)
    """
)


def _parse_with_triton(files: dict[str, str]) -> dict[str, str]:
    """Parse config.pbtxt texts with tritonclient's model_config_pb2, in a process that sees only its protobuf."""
    target = tritonclient_dir()
    # -S: no site-packages, so the project's protobuf cannot shadow the one tritonclient was generated for.
    result = subprocess.run(
        [sys.executable, "-S", "-c", PARSE],
        input=json.dumps(files),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, str] = json.loads(result.stdout)
    return parsed


def test_engine_build_takes_every_limit_from_sizing() -> None:
    spec = stack_spec("prod")
    sizing = next(d for d in size_platform(spec).deployments if d.engine == "triton")
    convert, build = engine_build_commands(
        sizing.result.trtllm, dtype="bfloat16", checkpoint_dir="/models/checkpoint", engine_dir="/models/engine"
    )
    assert convert == [
        "python3", "/app/tensorrt_llm/examples/quantization/quantize.py",
        "--model_dir", "/models/hf", "--output_dir", "/models/checkpoint", "--dtype", "bfloat16",
        "--qformat", "fp8", "--tp_size", "1", "--calib_size", "512", "--kv_cache_dtype", "fp8",
    ]  # fmt: skip
    assert build == [
        "trtllm-build", "--checkpoint_dir", "/models/checkpoint", "--output_dir", "/models/engine",
        "--max_batch_size", "48", "--max_input_len", "8191", "--max_seq_len", "8192", "--max_num_tokens", "2048",
        "--gemm_plugin", "auto", "--use_paged_context_fmha", "enable", "--use_fp8_context_fmha", "enable",
    ]  # fmt: skip


def test_job_and_deployment_of_prod_triton() -> None:
    evaluation = evaluate_servers(stack_spec("prod"))
    component = evaluation.named("llama-8b")
    assert component.type == "inferplane:index:TritonTrtLlmService"
    children = {(r.type, r.name) for r in evaluation.children_of(component.urn)}
    assert children == {
        ("kubernetes:core/v1:ServiceAccount", "llama-8b-sa"),
        ("kubernetes:core/v1:ConfigMap", "llama-8b-model-repository"),
        ("kubernetes:batch/v1:Job", "llama-8b-engine-build"),
        ("kubernetes:apps/v1:Deployment", "llama-8b-deployment"),
        ("kubernetes:core/v1:Service", "llama-8b-service"),
        ("kubernetes:policy/v1:PodDisruptionBudget", "llama-8b-pdb"),
        ("kubernetes:monitoring.coreos.com/v1:PodMonitor", "llama-8b-monitor"),
    }
    sizing = next(d for d in size_platform(stack_spec("prod")).deployments if d.engine == "triton")
    fingerprint = engine_fingerprint(sizing.result.trtllm, "meta-llama/Llama-3.1-8B-Instruct")
    job = evaluation.named("llama-8b-engine-build")
    assert job.inputs["metadata"]["name"] == f"llama-8b-engine-{fingerprint}"
    build = container(job, "build-engine")
    assert build["image"] == TRITON_IMAGE == "nvcr.io/nvidia/tritonserver:26.05-trtllm-python-py3"
    assert build["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "trtllm-build --checkpoint_dir /models/checkpoint" in build["command"][2]
    # The build reads the Hugging Face token from a read-only file, never from its environment.
    assert {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/huggingface/token"} in build["env"]
    assert not [e for e in build["env"] if e["name"] == "HF_TOKEN" or "valueFrom" in e]
    assert {"name": "hf-token", "mountPath": "/var/run/secrets/huggingface", "readOnly": True} in build["volumeMounts"]
    job_pod = job.inputs["spec"]["template"]["spec"]
    assert {
        "name": "hf-token",
        "secret": {"secretName": "hf-token", "items": [{"key": "token", "path": "token"}], "defaultMode": 0o440},
    } in job_pod["volumes"]
    every_container = [
        *job_pod["initContainers"],
        *job_pod["containers"],
        *evaluation.named("llama-8b-deployment").inputs["spec"]["template"]["spec"]["initContainers"],
        *evaluation.named("llama-8b-deployment").inputs["spec"]["template"]["spec"]["containers"],
    ]
    assert len(every_container) == 7
    for each in every_container:
        assert each["securityContext"]["readOnlyRootFilesystem"] is True
        assert each["securityContext"]["runAsNonRoot"] is True and each["securityContext"]["runAsUser"] == 65532
        assert each["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        # /tmp is writable wherever a container runs (the AWS CLI's HOME, Python's and torch's temporaries).
        assert "/tmp" in {m["mountPath"] for m in each["volumeMounts"]} or each["name"] == "assemble-repository"
    upload = container(job, "upload-engine")
    assert upload["args"][-2:] == [
        "/models/engine",
        f"s3://inferplane-models-123456789012/hf/engines/llama-8b/{fingerprint}/",
    ]
    deployment = evaluation.named("llama-8b-deployment")
    assert job.urn in deployment.dependencies
    triton = container(deployment, "triton")
    assert triton["command"] == ["tritonserver"]
    assert triton["args"] == [
        "--model-repository=/repository",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
        "--allow-metrics=true",
        "--allow-gpu-metrics=true",
        "--metrics-config=histogram_latencies=true",
        "--exit-timeout-secs=278",
    ]
    assert [p["containerPort"] for p in triton["ports"]] == [8000, 8001, 8002]
    assert triton["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert triton["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert triton["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    startup = triton["startupProbe"]
    assert startup["failureThreshold"] * startup["periodSeconds"] >= sizing.result.engine_start_seconds * 1.5 + 60
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == str(sizing.result.tensor_parallel_size)
    fetch = container(deployment, "fetch-engine")
    assert fetch["args"][-2:] == [
        f"s3://inferplane-models-123456789012/hf/engines/llama-8b/{fingerprint}/",
        "/models/engine",
    ]
    service = evaluation.named("llama-8b-service").inputs["spec"]
    assert [(p["name"], p["port"]) for p in service["ports"]] == [("http", 8000), ("grpc", 8001), ("metrics", 8002)]
    monitor = evaluation.named("llama-8b-monitor").inputs
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert monitor["metadata"]["labels"]["inferplane.io/scrape"] == "true"


def test_tensorrt_llm_config_carries_the_runtime_settings() -> None:
    sizing = next(d for d in size_platform(stack_spec("prod")).deployments if d.engine == "triton")
    config = model_repository(sizing.result.trtllm, engine_dir="/models/engine", tokenizer_dir="/models/tokenizer")
    llm = config["tensorrt_llm"]
    assert llm.max_batch_size == 48
    assert llm.decoupled is True
    assert dict(llm.parameters) == {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": "/models/engine",
        "max_beam_width": "1",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": "0.87",
        "enable_kv_cache_reuse": "true",
        "enable_chunked_context": "true",
        "exclude_input_in_output": "true",
    }
    # What the image's preprocessing model.py reads while loading (TensorRT-LLM inflight_batcher_llm, 2026-11-29).
    preprocessing = config["preprocessing"]
    assert {"tokenizer_dir", "multimodal_model_path"} <= set(preprocessing.parameters)
    assert preprocessing.parameters["tokenizer_dir"] == "/models/tokenizer"
    assert {"EMBEDDING_BIAS_WORDS", "EMBEDDING_BIAS_WEIGHTS"} <= {t.name for t in preprocessing.inputs}
    assert {
        "INPUT_ID", "DECODER_INPUT_ID", "REQUEST_INPUT_LEN", "REQUEST_DECODER_INPUT_LEN", "BAD_WORDS_IDS",
        "STOP_WORDS_IDS", "OUT_END_ID", "OUT_PAD_ID", "OUT_PROMPT_TABLE_EXTRA_IDS", "PIXEL_VALUES", "IMAGE_SIZES",
    } <= {t.name for t in preprocessing.outputs}  # fmt: skip
    assert config["postprocessing"].parameters["tokenizer_dir"] == "/models/tokenizer"
    assert [s.model_name for s in config["ensemble"].ensemble_steps] == [
        "preprocessing",
        "tensorrt_llm",
        "postprocessing",
    ]


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_every_config_pbtxt_parses_as_triton_model_config(stack: str) -> None:
    evaluation = evaluate_servers(stack_spec(stack))
    repository = evaluation.named("llama-8b-model-repository").inputs["data"]
    assert sorted(repository) == ["ensemble.pbtxt", "postprocessing.pbtxt", "preprocessing.pbtxt", "tensorrt_llm.pbtxt"]
    parsed = _parse_with_triton(dict(repository))
    assert sorted(parsed) == sorted(repository)
    assert 'backend: "tensorrtllm"' in parsed["tensorrt_llm.pbtxt"]
    assert "model_transaction_policy { decoupled: true }" in parsed["tensorrt_llm.pbtxt"]
    assert 'key: "gpt_model_type" value { string_value: "inflight_fused_batching" }' in parsed["tensorrt_llm.pbtxt"]
    assert 'platform: "ensemble"' in parsed["ensemble.pbtxt"]


def test_the_parse_check_refuses_a_field_model_config_lacks() -> None:
    sizing = next(d for d in size_platform(stack_spec("prod")).deployments if d.engine == "triton")
    text = render(model_repository(sizing.result.trtllm, engine_dir="/e", tokenizer_dir="/t")["tensorrt_llm"])
    target = tritonclient_dir()
    result = subprocess.run(
        [sys.executable, "-S", "-c", PARSE],
        input=json.dumps({"bad": text.replace("max_batch_size", "max_batch")}),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
        check=False,
    )
    assert result.returncode != 0
    assert 'has no field named "max_batch"' in result.stderr


def test_triton_without_a_model_cache_is_refused() -> None:
    spec = stack_spec("prod")
    plan = size_platform(spec)
    sizing = next(d for d in plan.deployments if d.engine == "triton")
    deployment = next(d for d in spec.models if d.engine == "triton")

    def program() -> None:
        TritonTrtLlmService(
            "llama-8b",
            TritonTrtLlmServiceArgs(
                deployment=deployment,
                sizing=sizing,
                environment="prod",
                namespace="inference",
                hf_token_secret_name="hf-token",
                model_cache_uri=None,
            ),
        )

    with pytest.raises(pulumi.InputPropertiesError) as caught:
        evaluate(program, mocks=PlatformMocks())
    assert caught.value.errors == [
        {
            "property_path": "model_cache_uri",
            "reason": "TensorRT-LLM engines are built once into the model cache: give an s3:// prefix",
        }
    ]


def test_tensor_parallel_engines_run_in_orchestrator_mode() -> None:
    sizing = next(d for d in size_platform(stack_spec("prod")).deployments if d.engine == "triton")
    tp2 = sizing.result.trtllm.model_copy(update={"tensor_parallel": 2})
    parameters = model_repository(tp2, engine_dir="/e", tokenizer_dir="/t")["tensorrt_llm"].parameters
    assert parameters["executor_worker_path"] == "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
    single = model_repository(sizing.result.trtllm, engine_dir="/e", tokenizer_dir="/t")["tensorrt_llm"].parameters
    assert "executor_worker_path" not in single
