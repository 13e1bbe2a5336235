"""TritonTrtLlmService: engine build from sizing, a repository that parses as Triton's ModelConfig, ports, probes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pulumi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.serving.triton_config import (
    COMPOSING_MODELS,
    ModelConfig,
    model_repository,
    render,
    served_name_errors,
)
from inferplane.components.serving.triton_service import (
    TRITON_IMAGE,
    TritonTrtLlmService,
    TritonTrtLlmServiceArgs,
    engine_build_commands,
    engine_fingerprint,
    frontend_launcher,
)
from inferplane.components.spec.platform_spec import ModelDeploymentSpec
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
        "--tokens_per_block", "32",  # the gateway's prefix-index block (sizing's TrtLlmSettings.tokens_per_block)
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
        ("kubernetes:core/v1:Service", "llama-8b-endpoints"),
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
    # Triton's OpenAI frontend (its own main.py), with the drain and the TTFT histogram bound onto its server.
    assert triton["command"] == ["python3", "-c", frontend_launcher(278)]
    assert triton["args"] == [
        "--model-repository=/repository",
        "--tokenizer=/models/tokenizer",
        "--openai-port=9000",
        "--enable-kserve-frontends",
        "--kserve-http-port=8000",
        "--kserve-grpc-port=8001",
        "--uvicorn-log-level=warning",
    ]
    assert [(p["name"], p["containerPort"]) for p in triton["ports"]] == [
        ("openai", 9000),
        ("http", 8000),
        ("grpc", 8001),
    ]
    # The tokenizer is a local folder: the frontend never reaches for the hub (the build Job does, for calibration).
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in triton["env"]
    assert not [e for e in build["env"] if e["name"] == "HF_HUB_OFFLINE"]
    assert triton["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "openai"}
    assert triton["startupProbe"]["httpGet"] == {"path": "/health/ready", "port": "openai"}
    assert triton["livenessProbe"]["httpGet"] == {"path": "/health/ready", "port": "openai"}
    startup = triton["startupProbe"]
    assert startup["failureThreshold"] * startup["periodSeconds"] >= sizing.result.engine_start_seconds * 1.5 + 60
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == str(sizing.result.tensor_parallel_size)
    fetch = container(deployment, "fetch-engine")
    assert fetch["args"][-2:] == [
        f"s3://inferplane-models-123456789012/hf/engines/llama-8b/{fingerprint}/",
        "/models/engine",
    ]
    # The tokenizer (and chat template) the frontend and the pre/postprocessing models read, beside the engine.
    tokenizer = container(deployment, "fetch-tokenizer")
    assert tokenizer["args"] == [
        "s3", "sync", "--only-show-errors", "--exclude", "*",
        "--include", "tokenizer*", "--include", "special_tokens_map.json", "--include", "chat_template*",
        "--include", "config.json", "--include", "generation_config.json",
        "s3://inferplane-models-123456789012/hf/meta-llama/Llama-3.1-8B-Instruct/", "/models/tokenizer",
    ]  # fmt: skip
    service = evaluation.named("llama-8b-service").inputs["spec"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["ports"]] == [
        ("openai", 9000, "openai"),
        ("http", 8000, "http"),
        ("grpc", 8001, "grpc"),
    ]
    # The frontend serves the in-process server's Prometheus text on /metrics of the OpenAI port.
    monitor = evaluation.named("llama-8b-monitor").inputs
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "openai", "path": "/metrics", "interval": "15s"}]
    assert monitor["metadata"]["labels"]["inferplane.io/scrape"] == "true"


def test_tensorrt_llm_config_carries_the_runtime_settings() -> None:
    sizing = next(d for d in size_platform(stack_spec("prod")).deployments if d.engine == "triton")
    config = model_repository(
        sizing.result.trtllm, engine_dir="/models/engine", tokenizer_dir="/models/tokenizer", served_names=("llama-8b",)
    )
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
    assert [s.model_name for s in config["llama-8b"].ensemble_steps] == [
        "preprocessing",
        "tensorrt_llm",
        "postprocessing",
    ]


@pytest.mark.parametrize(
    ("stack", "ensembles"),
    [
        ("staging", ["llama-8b"]),  # a primary only (its fallback, qwen-7b, is vLLM)
        ("prod", ["llama-70b", "llama-8b"]),  # also premium's fallback: answers to llama-70b as well
    ],
)
def test_every_config_pbtxt_parses_as_triton_model_config(stack: str, ensembles: list[str]) -> None:
    evaluation = evaluate_servers(stack_spec(stack))
    repository = evaluation.named("llama-8b-model-repository").inputs["data"]
    assert sorted(repository) == sorted(
        [f"{name}.pbtxt" for name in ensembles] + ["postprocessing.pbtxt", "preprocessing.pbtxt", "tensorrt_llm.pbtxt"]
    )
    parsed = _parse_with_triton(dict(repository))
    assert sorted(parsed) == sorted(repository)
    assert 'backend: "tensorrtllm"' in parsed["tensorrt_llm.pbtxt"]
    assert "model_transaction_policy { decoupled: true }" in parsed["tensorrt_llm.pbtxt"]
    assert 'key: "gpt_model_type" value { string_value: "inflight_fused_batching" }' in parsed["tensorrt_llm.pbtxt"]
    for name in ensembles:
        assert parsed[f"{name}.pbtxt"].startswith(f'name: "{name}" platform: "ensemble"')
    # The init container lays out one directory per model, the Python models' code copied from the image.
    assemble = container(evaluation.named("llama-8b-deployment"), "assemble-repository")["command"][2]
    for name in ensembles:
        assert f"cp /config/{name}.pbtxt /repository/{name}/config.pbtxt" in assemble.splitlines()
    assert "cp /app/all_models/inflight_batcher_llm/preprocessing/1/model.py /repository/preprocessing/1/model.py" in (
        assemble.splitlines()
    )


def test_the_parse_check_refuses_a_field_model_config_lacks() -> None:
    sizing = next(d for d in size_platform(stack_spec("prod")).deployments if d.engine == "triton")
    repository = model_repository(sizing.result.trtllm, engine_dir="/e", tokenizer_dir="/t", served_names=("m",))
    text = render(repository["tensorrt_llm"])
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


def _input_errors(**changes: Any) -> list[Any]:
    """The input errors prod's Triton deployment raises with ``changes`` to its arguments (nothing is declared)."""
    spec = stack_spec("prod")
    sizing = next(d for d in size_platform(spec).deployments if d.engine == "triton")
    deployment = next(d for d in spec.models if d.engine == "triton")
    args: dict[str, Any] = {"model_cache_uri": "s3://bucket/models/", **changes}

    def program() -> None:
        TritonTrtLlmService(
            "llama-8b",
            TritonTrtLlmServiceArgs(
                deployment=deployment,
                sizing=sizing,
                environment="prod",
                namespace="inference",
                hf_token_secret_name="hf-token",
                **args,
            ),
        )

    with pytest.raises(pulumi.InputPropertiesError) as caught:
        evaluate(program, mocks=PlatformMocks())
    return list(caught.value.errors or [])


def test_triton_without_a_model_cache_is_refused() -> None:
    assert _input_errors(model_cache_uri=None) == [
        {
            "property_path": "model_cache_uri",
            "reason": "TensorRT-LLM engines are built once into the model cache: give an s3:// prefix",
        }
    ]


def test_tensor_parallel_engines_run_in_orchestrator_mode() -> None:
    sizing = next(d for d in size_platform(stack_spec("prod")).deployments if d.engine == "triton")
    tp2 = sizing.result.trtllm.model_copy(update={"tensor_parallel": 2})
    parameters = model_repository(tp2, engine_dir="/e", tokenizer_dir="/t", served_names=("m",))[
        "tensorrt_llm"
    ].parameters
    assert parameters["executor_worker_path"] == "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
    single = model_repository(sizing.result.trtllm, engine_dir="/e", tokenizer_dir="/t", served_names=("m",))
    assert "executor_worker_path" not in single["tensorrt_llm"].parameters


FRONTEND_REQUEST_INPUTS = {
    "text_input": "TYPE_STRING",
    "stream": "TYPE_BOOL",
    "max_tokens": "TYPE_INT32",
    "stop_words": "TYPE_STRING",
    "top_p": "TYPE_FP32",
    "frequency_penalty": "TYPE_FP32",
    "presence_penalty": "TYPE_FP32",
    "seed": "TYPE_UINT64",
    "temperature": "TYPE_FP32",
    "return_num_input_tokens": "TYPE_BOOL",
    "return_num_output_tokens": "TYPE_BOOL",
}
"""What Triton's OpenAI frontend puts in a TensorRT-LLM request (``_create_trtllm_generate_request`` in
``python/openai/openai_frontend/engine/utils/triton.py``, triton-inference-server/server r26.05; LoRA, guided
decoding and ``echo`` tensors only when the model declares or the request asks for them), with the types of NVIDIA's
``ensemble`` template. Triton refuses a request with an input its model does not declare."""

FRONTEND_RESPONSE_OUTPUTS = {
    "text_output": "TYPE_STRING",
    "num_input_tokens": "TYPE_INT32",
    "num_output_tokens": "TYPE_INT32",
}
"""What it reads back: the text (``_get_output``) and the token counts of ``usage`` (``_get_usage_from_response``
takes UINT32 or INT32)."""


def _repository(served_names: tuple[str, ...]) -> dict[str, ModelConfig]:
    sizing = next(d for d in size_platform(stack_spec("prod")).deployments if d.engine == "triton")
    return model_repository(sizing.result.trtllm, engine_dir="/e", tokenizer_dir="/t", served_names=served_names)


def test_each_served_name_is_an_ensemble_the_openai_frontend_can_call() -> None:
    repository = _repository(("llama-8b", "llama-70b"))
    assert list(repository) == ["llama-8b", "llama-70b", *COMPOSING_MODELS]
    for name in ("llama-8b", "llama-70b"):
        ensemble = repository[name]
        assert (ensemble.name, ensemble.platform, ensemble.backend) == (name, "ensemble", None)
        inputs = {t.name: t for t in ensemble.inputs}
        assert {n: t.data_type for n, t in inputs.items() if n in FRONTEND_REQUEST_INPUTS} == FRONTEND_REQUEST_INPUTS
        # Only what every request carries is required; sampling and usage flags are the client's choice.
        assert {n for n, t in inputs.items() if not t.optional} == {"text_input", "max_tokens"}
        outputs = {t.name: t.data_type for t in ensemble.outputs}
        assert outputs == FRONTEND_RESPONSE_OUTPUTS


def _assert_wired(repository: dict[str, ModelConfig], name: str) -> None:
    """Each step of ensemble ``name`` maps declared inputs of its model from the ensemble's inputs or earlier steps'
    outputs, maps only outputs its model declares, feeds every required input, and every ensemble output is
    produced by a step."""
    ensemble = repository[name]
    available = {t.name for t in ensemble.inputs}
    produced: set[str] = set()
    for step in ensemble.ensemble_steps:
        model = repository[step.model_name]
        declared_inputs = {t.name: t for t in model.inputs}
        assert set(step.input_map) <= set(declared_inputs), step.model_name
        assert set(step.input_map.values()) <= available, step.model_name
        required = {n for n, t in declared_inputs.items() if not t.optional}
        assert required <= set(step.input_map), step.model_name
        assert set(step.output_map) <= {t.name for t in model.outputs}, step.model_name
        available |= set(step.output_map.values())
        produced |= set(step.output_map.values())
    assert {t.name for t in ensemble.outputs} <= produced


def test_every_ensemble_step_is_wired_to_tensors_that_exist() -> None:
    repository = _repository(("llama-8b",))
    _assert_wired(repository, "llama-8b")
    engine_step = repository["llama-8b"].ensemble_steps[1].input_map
    # OpenAI's top_p is the engine's runtime_top_p (NVIDIA's template); the rest keep their names.
    assert engine_step["runtime_top_p"] == "top_p"
    assert engine_step["temperature"] == "temperature" and engine_step["seed"] == "seed"
    # A step reading a tensor nobody declares is caught.
    broken = (
        repository["llama-8b"]
        .ensemble_steps[1]
        .model_copy(update={"input_map": {**engine_step, "runtime_top_k": "top_k"}})
    )
    steps = (repository["llama-8b"].ensemble_steps[0], broken, repository["llama-8b"].ensemble_steps[2])
    with pytest.raises(AssertionError):
        _assert_wired({**repository, "x": repository["llama-8b"].model_copy(update={"ensemble_steps": steps})}, "x")


DEPLOYMENT_NAME = ModelDeploymentSpec.model_json_schema()["properties"]["name"]["pattern"]
"""What the spec accepts as a deployment name, hence as a served name."""


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(st.from_regex(DEPLOYMENT_NAME, fullmatch=True), st.sampled_from(COMPOSING_MODELS)),
        min_size=0,
        max_size=4,
    )
)
def test_any_served_names_give_wired_ensembles_or_a_reason(names: list[str]) -> None:
    served = tuple(names)
    reasons = served_name_errors(served)
    if reasons:
        with pytest.raises(ValueError) as caught:
            _repository(served)
        assert str(caught.value) == "; ".join(reasons)
        assert bool(set(served) & set(COMPOSING_MODELS)) or len(set(served)) != len(served) or not served
        return
    repository = _repository(served)
    assert list(repository) == [*served, *COMPOSING_MODELS]
    for name in served:
        _assert_wired(repository, name)


@pytest.mark.parametrize(
    ("aliases", "reasons"),
    [
        (("preprocessing",), ["'preprocessing' is the name of a composing model of the Triton repository"]),
        (("llama-8b",), ["served model names repeat"]),
    ],
)
def test_served_names_that_cannot_be_ensembles_are_refused(aliases: tuple[str, ...], reasons: list[str]) -> None:
    errors = _input_errors(served_model_aliases=aliases)
    assert errors == [{"property_path": "served_model_aliases", "reason": r} for r in reasons]
    with pytest.raises(ValueError, match="; ".join(reasons)):
        _repository(("llama-8b", *aliases))


FAKE_TRITONSERVER = """
import json, os


class Server:
    def __init__(self, **options):
        with open(os.environ["RECORD"], "w") as out:
            json.dump(options, out)
"""

FAKE_MAIN = """
import argparse, json, os, sys

import tritonserver
from engine.sibling import NAME  # main.py imports its packages from its own directory

parser = argparse.ArgumentParser()
parser.add_argument("--model-repository", required=True)
parser.add_argument("--openai-port", type=int, default=9000)
args = parser.parse_args()
if __name__ == "__main__":
    tritonserver.Server(model_repository=args.model_repository, log_info=True)
    print(json.dumps({"port": args.openai_port, "sibling": NAME}))
"""


def test_the_launcher_runs_main_py_with_its_flags_and_binds_the_server_options(tmp_path: Path) -> None:
    """The launcher is the project's glue around upstream's ``main.py``: run it against a stand-in ``tritonserver``
    module and ``main.py`` that record what they receive (the real ones exist only in the NGC image)."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "tritonserver.py").write_text(FAKE_TRITONSERVER)
    frontend = tmp_path / "openai_frontend"
    (frontend / "engine").mkdir(parents=True)
    (frontend / "engine" / "__init__.py").write_text("")
    (frontend / "engine" / "sibling.py").write_text("NAME = 'engine'\n")
    (frontend / "main.py").write_text(FAKE_MAIN)
    record = tmp_path / "options.json"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            frontend_launcher(278, str(frontend)),
            "--model-repository=/repository",
            "--openai-port=9000",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site"), "RECORD": str(record)},
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"port": 9000, "sibling": "engine"}
    assert json.loads(record.read_text()) == {
        "metrics_configuration": {"": {"histogram_latencies": "true"}},
        "exit_timeout": 278,
        "model_repository": "/repository",
        "log_info": True,
    }
    # A flag main.py does not know stops it, as it would without the launcher.
    refused = subprocess.run(
        [sys.executable, "-c", frontend_launcher(278, str(frontend)), "--model-repository=/r", "--metrics-port=8002"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site"), "RECORD": str(record)},
        check=False,
    )
    assert refused.returncode == 2
    assert "unrecognized arguments: --metrics-port=8002" in refused.stderr
