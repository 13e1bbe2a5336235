"""Triton model repository for TensorRT-LLM's in-flight batcher, generated from typed models.

A small typed mirror of the fields of Triton's ``inference.ModelConfig`` protobuf (``model_config.proto``) that
inferplane emits, rendered to protobuf text format (``config.pbtxt``). ``tests/serving/test_triton_service.py`` parses
every rendered file with Triton's own ``model_config_pb2`` (shipped by ``tritonclient``).

The repository is NVIDIA's ``inflight_batcher_llm`` layout (TensorRT-LLM ``triton_backend/all_models/
inflight_batcher_llm``, read 2026-11-29): an ensemble chains ``preprocessing`` (tokenizer, Python backend),
``tensorrt_llm`` (the ``tensorrtllm`` backend) and ``postprocessing`` (detokenizer). The tensor and parameter
names below are that template's interface: the Python models' ``model.py`` (taken from the image's
``/app/all_models``) look up ``tokenizer_dir``, ``multimodal_model_path`` and the configs of every tensor they
produce when they load.

Clients reach it through Triton's OpenAI-compatible frontend (:mod:`components.serving.triton_service`), which names
models by their Triton model names (``/v1/models`` lists ``server.models()``; a request's ``model`` selects the Triton
model, ``engine/triton_engine.py`` of triton-inference-server/server r26.05). So the ensemble is not called
``ensemble``: there is one per served name (the deployment's, then each primary it is the gateway's fallback for),
all chaining the same three composing models, so one engine answers every name. The frontend builds a TensorRT-LLM
request for any model whose backend is not ``vllm`` (``_determine_request_converter``): ``text_input``,
``max_tokens``, ``stream``, ``stop_words`` and, when the OpenAI request sets them, ``temperature``, ``top_p``,
``presence_penalty``, ``frequency_penalty`` and ``seed``; it always asks for ``return_num_input_tokens`` and
``return_num_output_tokens`` and reads ``num_input_tokens`` / ``num_output_tokens`` for the response's ``usage``
(``_create_trtllm_generate_request`` and ``_get_usage_from_response`` in ``engine/utils/triton.py``). Triton refuses
a request carrying an input its model does not declare, so the ensemble declares exactly those, mapped onto the
``tensorrt_llm`` inputs of the same names in NVIDIA's template (``top_p`` -> ``runtime_top_p``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity.sizing import TrtLlmSettings

DataType = Literal[
    "TYPE_BOOL", "TYPE_UINT8", "TYPE_INT32", "TYPE_INT64", "TYPE_UINT64", "TYPE_FP16", "TYPE_FP32", "TYPE_STRING"
]
"""``inference.DataType`` values used here."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tensor(_Model):
    """``ModelInput`` / ``ModelOutput``."""

    name: str
    data_type: DataType
    dims: tuple[int, ...] = Field(description="Shape without the batch dimension; -1 is variable.")
    optional: bool = Field(default=False, description="Inputs only: the request may omit it.")
    reshape: tuple[int, ...] | None = Field(default=None, description="``reshape { shape: [...] }``.")
    allow_ragged_batch: bool = Field(default=False, description="Inputs only: batch without padding.")


class InstanceGroup(_Model):
    """``ModelInstanceGroup``."""

    count: int = Field(ge=1)
    kind: Literal["KIND_CPU", "KIND_GPU", "KIND_MODEL"]


class EnsembleStep(_Model):
    """``ModelEnsembling.Step``: which tensors feed a composing model and where its outputs go."""

    model_name: str
    model_version: int = -1
    input_map: Mapping[str, str] = Field(description="Composing model input -> ensemble tensor.")
    output_map: Mapping[str, str] = Field(description="Composing model output -> ensemble tensor.")


class DynamicBatching(_Model):
    """``ModelDynamicBatching`` (the fields used)."""

    max_queue_delay_microseconds: int = Field(default=0, ge=0)


class ModelConfig(_Model):
    """``inference.ModelConfig``: the fields inferplane sets."""

    name: str
    backend: str | None = None
    platform: str | None = None
    max_batch_size: int = Field(ge=0)
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    dynamic_batching: DynamicBatching | None = None
    ensemble_steps: tuple[EnsembleStep, ...] = ()
    instance_group: tuple[InstanceGroup, ...] = ()
    decoupled: bool | None = Field(default=None, description="``model_transaction_policy { decoupled }``.")
    parameters: Mapping[str, str] = Field(default_factory=dict, description="``parameters`` string values.")


def _string(value: str) -> str:
    """A protobuf text-format string literal (JSON escapes are valid text-format escapes for these values)."""
    return json.dumps(value, ensure_ascii=True)


def _tensor(tensor: Tensor, indent: str) -> list[str]:
    inner = indent + "  "
    lines = [
        f"{indent}{{",
        f"{inner}name: {_string(tensor.name)}",
        f"{inner}data_type: {tensor.data_type}",
        f"{inner}dims: [ {', '.join(str(d) for d in tensor.dims)} ]",
    ]
    if tensor.optional:
        lines.append(f"{inner}optional: true")
    if tensor.allow_ragged_batch:
        lines.append(f"{inner}allow_ragged_batch: true")
    if tensor.reshape is not None:
        lines.append(f"{inner}reshape: {{ shape: [ {', '.join(str(d) for d in tensor.reshape)} ] }}")
    lines.append(f"{indent}}}")
    return lines


def _tensor_list(field: str, tensors: tuple[Tensor, ...]) -> list[str]:
    lines = [f"{field} ["]
    for i, tensor in enumerate(tensors):
        block = _tensor(tensor, "  ")
        if i < len(tensors) - 1:
            block[-1] += ","
        lines += block
    lines.append("]")
    return lines


def render(config: ModelConfig) -> str:
    """``config.pbtxt`` for one model, in protobuf text format."""
    lines = [f"name: {_string(config.name)}"]
    if config.backend is not None:
        lines.append(f"backend: {_string(config.backend)}")
    if config.platform is not None:
        lines.append(f"platform: {_string(config.platform)}")
    lines.append(f"max_batch_size: {config.max_batch_size}")
    if config.decoupled is not None:
        lines.append(f"model_transaction_policy {{ decoupled: {str(config.decoupled).lower()} }}")
    if config.dynamic_batching is not None:
        delay = config.dynamic_batching.max_queue_delay_microseconds
        lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {delay} }}")
    lines += _tensor_list("input", config.inputs)
    lines += _tensor_list("output", config.outputs)
    if config.ensemble_steps:
        lines.append("ensemble_scheduling {")
        for step in config.ensemble_steps:
            lines += [
                "  step {",
                f"    model_name: {_string(step.model_name)}",
                f"    model_version: {step.model_version}",
            ]
            for key, value in step.input_map.items():
                lines.append(f"    input_map {{ key: {_string(key)} value: {_string(value)} }}")
            for key, value in step.output_map.items():
                lines.append(f"    output_map {{ key: {_string(key)} value: {_string(value)} }}")
            lines.append("  }")
        lines.append("}")
    for group in config.instance_group:
        lines.append(f"instance_group {{ count: {group.count} kind: {group.kind} }}")
    for key, value in config.parameters.items():
        lines.append(f"parameters {{ key: {_string(key)} value: {{ string_value: {_string(value)} }} }}")
    return "\n".join(lines) + "\n"


PREPROCESSING = "preprocessing"
TENSORRT_LLM = "tensorrt_llm"
POSTPROCESSING = "postprocessing"
COMPOSING_MODELS = (PREPROCESSING, TENSORRT_LLM, POSTPROCESSING)
"""The models every ensemble chains; clients call the ensembles, named after the served model names."""

PROCESSING_INSTANCES = 5
"""Tokenizer / detokenizer instances: NVIDIA's guide finds about 5 keeps them off the critical path."""

BATCH_SCHEDULER_POLICY = "guaranteed_no_evict"
"""Admit a request only when its whole KV cache is guaranteed: no mid-generation eviction. Sizing already fits
``max_batch_size`` sequences of full length, so this costs no throughput at the planned concurrency."""

TRTLLM_WORKER_PATH = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
"""Orchestrator mode (TP > 1): the backend spawns one executor worker per rank from this binary, named by the
``executor_worker_path`` parameter (the older ``worker_path`` is refused by current backends)."""


def _scalar(name: str, data_type: DataType, *, optional: bool = False) -> Tensor:
    """A per-request scalar the ``tensorrtllm`` backend reads without the trailing dimension."""
    return Tensor(name=name, data_type=data_type, dims=(1,), optional=optional, reshape=())


SAMPLING_INPUTS: tuple[tuple[str, str, DataType], ...] = (
    ("temperature", "temperature", "TYPE_FP32"),
    ("top_p", "runtime_top_p", "TYPE_FP32"),
    ("presence_penalty", "presence_penalty", "TYPE_FP32"),
    ("frequency_penalty", "frequency_penalty", "TYPE_FP32"),
    ("seed", "seed", "TYPE_UINT64"),
    ("return_num_input_tokens", "return_num_input_tokens", "TYPE_BOOL"),
    ("return_num_output_tokens", "return_num_output_tokens", "TYPE_BOOL"),
)
"""(ensemble input, ``tensorrt_llm`` input, type) that the OpenAI frontend sends besides the prompt; the types are
those of NVIDIA's ``ensemble`` and ``tensorrt_llm`` templates."""

TOKEN_COUNT_OUTPUTS = ("num_input_tokens", "num_output_tokens")
"""``tensorrt_llm`` outputs (``TYPE_INT32``, one per response when asked for) the frontend turns into ``usage``."""


def served_name_errors(served_names: tuple[str, ...]) -> list[str]:
    """Why ``served_names`` cannot name the repository's ensembles (empty when they can)."""
    errors = []
    if not served_names:
        errors.append("at least one served model name is needed")
    for name in sorted(set(served_names) & set(COMPOSING_MODELS)):
        errors.append(f"{name!r} is the name of a composing model of the Triton repository")
    if len(set(served_names)) != len(served_names):
        errors.append("served model names repeat")
    return errors


def model_repository(
    trtllm: TrtLlmSettings,
    *,
    engine_dir: str,
    tokenizer_dir: str,
    served_names: tuple[str, ...],
    max_queue_delay_microseconds: int = 0,
) -> dict[str, ModelConfig]:
    """The composing models' configs from sizing's TensorRT-LLM settings (nothing recomputed), and one ensemble per
    name in ``served_names`` (the deployment's first)."""
    errors = served_name_errors(served_names)
    if errors:
        raise ValueError("; ".join(errors))
    batch = trtllm.max_batch_size
    composing = (
        _preprocessing(batch, tokenizer_dir=tokenizer_dir, max_queue_delay_microseconds=max_queue_delay_microseconds),
        _tensorrt_llm(trtllm, engine_dir=engine_dir, max_queue_delay_microseconds=max_queue_delay_microseconds),
        _postprocessing(batch, tokenizer_dir=tokenizer_dir),
    )
    ensembles = tuple(_ensemble(name, batch) for name in served_names)
    # Ensembles first: the served names lead the repository, the composing models follow.
    return {config.name: config for config in (*ensembles, *composing)}


def _preprocessing(batch: int, *, tokenizer_dir: str, max_queue_delay_microseconds: int) -> ModelConfig:
    """The tokenizer (Python backend): prompt and stop/bad words in, token ids out."""
    return ModelConfig(
        name=PREPROCESSING,
        backend="python",
        max_batch_size=batch,
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=max_queue_delay_microseconds),
        inputs=(
            Tensor(name="QUERY", data_type="TYPE_STRING", dims=(1,)),
            Tensor(name="REQUEST_OUTPUT_LEN", data_type="TYPE_INT32", dims=(1,)),
            Tensor(name="BAD_WORDS_DICT", data_type="TYPE_STRING", dims=(-1,), optional=True),
            Tensor(name="STOP_WORDS_DICT", data_type="TYPE_STRING", dims=(-1,), optional=True),
            # model.py reads the configs of these two at start-up, so they must be declared.
            Tensor(name="EMBEDDING_BIAS_WORDS", data_type="TYPE_STRING", dims=(-1,), optional=True),
            Tensor(name="EMBEDDING_BIAS_WEIGHTS", data_type="TYPE_FP32", dims=(-1,), optional=True),
            Tensor(name="END_ID", data_type="TYPE_INT32", dims=(1,), optional=True),
            Tensor(name="PAD_ID", data_type="TYPE_INT32", dims=(1,), optional=True),
        ),
        outputs=(
            Tensor(name="INPUT_ID", data_type="TYPE_INT32", dims=(-1,)),
            Tensor(name="REQUEST_INPUT_LEN", data_type="TYPE_INT32", dims=(1,)),
            Tensor(name="DECODER_INPUT_ID", data_type="TYPE_INT32", dims=(-1,)),
            Tensor(name="REQUEST_DECODER_INPUT_LEN", data_type="TYPE_INT32", dims=(1,)),
            Tensor(name="BAD_WORDS_IDS", data_type="TYPE_INT32", dims=(2, -1)),
            Tensor(name="STOP_WORDS_IDS", data_type="TYPE_INT32", dims=(2, -1)),
            Tensor(name="EMBEDDING_BIAS", data_type="TYPE_FP32", dims=(-1,)),
            Tensor(name="REQUEST_OUTPUT_LEN", data_type="TYPE_INT32", dims=(-1,)),
            Tensor(name="OUT_END_ID", data_type="TYPE_INT32", dims=(1,)),
            Tensor(name="OUT_PAD_ID", data_type="TYPE_INT32", dims=(1,)),
            Tensor(name="OUT_PROMPT_TABLE_EXTRA_IDS", data_type="TYPE_UINT64", dims=(-1,)),
            # Multimodal outputs: unused by text models, but model.py resolves their dtypes at start-up.
            Tensor(name="PIXEL_VALUES", data_type="TYPE_FP16", dims=(-1, -1, -1, -1)),
            Tensor(name="IMAGE_SIZES", data_type="TYPE_INT64", dims=(-1, 2)),
        ),
        instance_group=(InstanceGroup(count=PROCESSING_INSTANCES, kind="KIND_CPU"),),
        # model.py indexes multimodal_model_path unconditionally; empty means a text-only model.
        parameters={"tokenizer_dir": tokenizer_dir, "add_special_tokens": "true", "multimodal_model_path": ""},
    )


def _tensorrt_llm_parameters(trtllm: TrtLlmSettings, *, engine_dir: str) -> dict[str, str]:
    """The ``tensorrtllm`` backend's parameters, straight from sizing's settings."""
    parameters = {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": engine_dir,
        "max_beam_width": "1",
        "batch_scheduler_policy": BATCH_SCHEDULER_POLICY,
        "kv_cache_free_gpu_mem_fraction": f"{trtllm.kv_cache_free_gpu_mem_fraction:g}",
        "enable_kv_cache_reuse": str(trtllm.enable_kv_cache_reuse).lower(),
        "enable_chunked_context": str(trtllm.enable_chunked_context).lower(),
        "exclude_input_in_output": "true",
    }
    if trtllm.tensor_parallel > 1:
        parameters["executor_worker_path"] = TRTLLM_WORKER_PATH
    return parameters


def _tensorrt_llm(trtllm: TrtLlmSettings, *, engine_dir: str, max_queue_delay_microseconds: int) -> ModelConfig:
    """The engine (``tensorrtllm`` backend, decoupled for streaming): token ids and sampling in, token ids out."""
    return ModelConfig(
        name=TENSORRT_LLM,
        backend="tensorrtllm",
        max_batch_size=trtllm.max_batch_size,
        decoupled=True,
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=max_queue_delay_microseconds),
        inputs=(
            # Requests of different lengths batch without padding.
            Tensor(name="input_ids", data_type="TYPE_INT32", dims=(-1,), allow_ragged_batch=True),
            _scalar("input_lengths", "TYPE_INT32"),
            _scalar("request_output_len", "TYPE_INT32"),
            _scalar("end_id", "TYPE_INT32", optional=True),
            _scalar("pad_id", "TYPE_INT32", optional=True),
            Tensor(name="stop_words_list", data_type="TYPE_INT32", dims=(2, -1), optional=True),
            Tensor(name="bad_words_list", data_type="TYPE_INT32", dims=(2, -1), optional=True),
            _scalar("streaming", "TYPE_BOOL", optional=True),
            *(_scalar(engine_input, data_type, optional=True) for _, engine_input, data_type in SAMPLING_INPUTS),
        ),
        outputs=(
            Tensor(name="output_ids", data_type="TYPE_INT32", dims=(-1, -1)),
            Tensor(name="sequence_length", data_type="TYPE_INT32", dims=(-1,)),
            *(Tensor(name=output, data_type="TYPE_INT32", dims=(1,)) for output in TOKEN_COUNT_OUTPUTS),
        ),
        # The backend places its own executor on the GPUs; Triton's instance is a CPU-side handle.
        instance_group=(InstanceGroup(count=1, kind="KIND_CPU"),),
        parameters=_tensorrt_llm_parameters(trtllm, engine_dir=engine_dir),
    )


def _postprocessing(batch: int, *, tokenizer_dir: str) -> ModelConfig:
    """The detokenizer (Python backend): token ids in, text out."""
    return ModelConfig(
        name=POSTPROCESSING,
        backend="python",
        max_batch_size=batch,
        dynamic_batching=DynamicBatching(),
        inputs=(
            Tensor(name="TOKENS_BATCH", data_type="TYPE_INT32", dims=(-1, -1)),
            Tensor(name="SEQUENCE_LENGTH", data_type="TYPE_INT32", dims=(-1,)),
        ),
        outputs=(Tensor(name="OUTPUT", data_type="TYPE_STRING", dims=(-1,)),),
        instance_group=(InstanceGroup(count=PROCESSING_INSTANCES, kind="KIND_CPU"),),
        parameters={"tokenizer_dir": tokenizer_dir, "skip_special_tokens": "true"},
    )


def _ensemble(name: str, batch: int) -> ModelConfig:
    """An ensemble named ``name``: tokenize, generate, detokenize, with the frontend's sampling and usage tensors."""
    return ModelConfig(
        name=name,
        platform="ensemble",
        max_batch_size=batch,
        inputs=_ensemble_inputs(),
        outputs=_ensemble_outputs(),
        ensemble_steps=(_preprocessing_step(), _tensorrt_llm_step(), _postprocessing_step()),
    )


def _ensemble_inputs() -> tuple[Tensor, ...]:
    """What the OpenAI frontend sends: the prompt, the token budget, stop words, streaming and sampling."""
    return (
        Tensor(name="text_input", data_type="TYPE_STRING", dims=(1,)),
        Tensor(name="max_tokens", data_type="TYPE_INT32", dims=(1,)),
        Tensor(name="bad_words", data_type="TYPE_STRING", dims=(-1,), optional=True),
        Tensor(name="stop_words", data_type="TYPE_STRING", dims=(-1,), optional=True),
        Tensor(name="end_id", data_type="TYPE_INT32", dims=(1,), optional=True),
        Tensor(name="pad_id", data_type="TYPE_INT32", dims=(1,), optional=True),
        Tensor(name="stream", data_type="TYPE_BOOL", dims=(1,), optional=True),
        *(
            Tensor(name=tensor, data_type=data_type, dims=(1,), optional=True)
            for tensor, _, data_type in SAMPLING_INPUTS
        ),
    )


def _ensemble_outputs() -> tuple[Tensor, ...]:
    """What the OpenAI frontend reads: the text and the token counts for ``usage``."""
    return (
        Tensor(name="text_output", data_type="TYPE_STRING", dims=(-1,)),
        *(Tensor(name=output, data_type="TYPE_INT32", dims=(1,)) for output in TOKEN_COUNT_OUTPUTS),
    )


def _preprocessing_step() -> EnsembleStep:
    """Tokenize: the ensemble's prompt and words into the engine's token ids."""
    return EnsembleStep(
        model_name=PREPROCESSING,
        input_map={
            "QUERY": "text_input",
            "REQUEST_OUTPUT_LEN": "max_tokens",
            "BAD_WORDS_DICT": "bad_words",
            "STOP_WORDS_DICT": "stop_words",
            "END_ID": "end_id",
            "PAD_ID": "pad_id",
        },
        output_map={
            "INPUT_ID": "_INPUT_ID",
            "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
            "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN",
            "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
            "BAD_WORDS_IDS": "_BAD_WORDS_IDS",
            "OUT_END_ID": "_PREPROCESSOR_END_ID",
            "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID",
        },
    )


def _tensorrt_llm_step() -> EnsembleStep:
    """Generate: token ids, streaming and sampling into output ids and token counts."""
    return EnsembleStep(
        model_name=TENSORRT_LLM,
        input_map={
            "input_ids": "_INPUT_ID",
            "input_lengths": "_REQUEST_INPUT_LEN",
            "request_output_len": "_REQUEST_OUTPUT_LEN",
            "end_id": "_PREPROCESSOR_END_ID",
            "pad_id": "_PREPROCESSOR_PAD_ID",
            "stop_words_list": "_STOP_WORDS_IDS",
            "bad_words_list": "_BAD_WORDS_IDS",
            "streaming": "stream",
            **{engine_input: tensor for tensor, engine_input, _ in SAMPLING_INPUTS},
        },
        output_map={
            "output_ids": "_TOKENS_BATCH",
            "sequence_length": "_SEQUENCE_LENGTH",
            **{output: output for output in TOKEN_COUNT_OUTPUTS},
        },
    )


def _postprocessing_step() -> EnsembleStep:
    """Detokenize: output ids into the ensemble's text."""
    return EnsembleStep(
        model_name=POSTPROCESSING,
        input_map={"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"},
        output_map={"OUTPUT": "text_output"},
    )
