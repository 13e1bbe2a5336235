"""Model architectures, as far as sizing needs them.

KV cache per token = 2 (K and V) x layers x KV heads x head dim x bytes per element, so these are the numbers
that decide whether a deployment fits. Each row's figures come from the model's ``config.json`` on Hugging Face
(read through verbatim copies in public repositories, 2026-11-29; at least two independent copies agree per row)
and the model card for parameter counts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NativeDtype = Literal["bf16", "fp16"]

MAX_CONTEXT_TOKENS = 100_000_000
"""Longest context any model (and so any deployment or ``inferplane size --context``) is taken to support."""
HF_REPO_PATTERN = r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$"
"""A Hugging Face repository id, ``org/name`` (huggingface_hub's ``validate_repo_id``: word characters, ``-`` and
``.``, at most 96 per part). Bounds on the figures below keep arithmetic on a custom architecture finite."""


class ModelArchitecture(BaseModel):
    """The shape of a decoder-only transformer, as its ``config.json`` gives it.

    Also the ``architecture`` block a stack file may give for a model that is not in the catalog.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    hf_repo: str = Field(
        pattern=HF_REPO_PATTERN, description="Hugging Face repository id of the weights (``org/name``)."
    )
    parameters: int = Field(gt=0, le=10**14, description="Total parameters (all experts for a mixture of experts).")
    active_parameters: int | None = Field(
        default=None,
        gt=0,
        le=10**14,
        description="Parameters read per token for a mixture of experts; None for dense models.",
    )
    layers: int = Field(gt=0, le=10_000, description="``num_hidden_layers``.")
    attention_heads: int = Field(
        gt=0, le=10_000, description="``num_attention_heads``; tensor parallelism must divide it."
    )
    kv_heads: int = Field(gt=0, le=10_000, description="``num_key_value_heads`` (grouped-query attention).")
    head_dim: int = Field(gt=0, le=65_536, description="``head_dim``, or hidden size / attention heads when absent.")
    hidden_size: int = Field(gt=0, le=1_000_000, description="``hidden_size``.")
    vocab_size: int = Field(
        gt=0, le=100_000_000, description="``vocab_size``; embeddings and LM head stay 16-bit when quantized."
    )
    experts: int | None = Field(
        default=None,
        gt=1,
        le=10_000,
        description="``num_local_experts`` of a mixture of experts; None for dense models.",
    )
    experts_per_token: int | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description="``num_experts_per_tok``: experts each token is routed to; None when dense.",
    )
    tie_word_embeddings: bool = Field(default=False, description="Whether the LM head shares the embedding matrix.")
    max_context: int = Field(
        gt=0, le=MAX_CONTEXT_TOKENS, description="``max_position_embeddings`` the served checkpoint supports, tokens."
    )
    sliding_window: int | None = Field(
        default=None, gt=0, le=MAX_CONTEXT_TOKENS, description="Sliding-window size, tokens, where used."
    )
    sliding_window_layers: int = Field(
        default=0, ge=0, le=10_000, description="How many layers use the sliding window."
    )
    native_dtype: NativeDtype = Field(default="bf16", description="``torch_dtype`` of the published weights.")
    source: str = Field(
        default="stack file", pattern=r"^[^\x00-\x1f\x7f-\x9f]*$", description="Where the figures come from."
    )

    @model_validator(mode="after")
    def _consistent(self) -> ModelArchitecture:
        if self.attention_heads % self.kv_heads:
            raise ValueError(f"attention_heads {self.attention_heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.sliding_window_layers > self.layers:
            raise ValueError(f"sliding_window_layers {self.sliding_window_layers} exceeds layers {self.layers}")
        if self.sliding_window_layers and self.sliding_window is None:
            raise ValueError("sliding_window_layers is set but sliding_window is not")
        if self.active_parameters is not None and self.active_parameters > self.parameters:
            raise ValueError("active_parameters exceeds parameters")
        if (self.experts is None) != (self.experts_per_token is None):
            raise ValueError("experts and experts_per_token go together")
        if self.experts is not None and self.active_parameters is None:
            raise ValueError("a mixture of experts (experts set) needs active_parameters")
        if self.experts is not None and self.experts_per_token is not None and self.experts_per_token > self.experts:
            raise ValueError("experts_per_token exceeds experts")
        return self

    @property
    def embedding_parameters(self) -> int:
        """Parameters in the input embedding and the LM head (one matrix when tied)."""
        matrices = 1 if self.tie_word_embeddings else 2
        return matrices * self.vocab_size * self.hidden_size

    @property
    def expert_parameters(self) -> int:
        """Parameters in one expert of every layer together (0 for a dense model).

        total = shared + E x e and active = shared + k x e, so e = (total - active) / (E - k).
        """
        if self.experts is None or self.experts_per_token is None or self.active_parameters is None:
            return 0
        return (self.parameters - self.active_parameters) // (self.experts - self.experts_per_token)

    @property
    def decode_parameters(self) -> int:
        """Parameters read from memory for each decode step (active experts only for a MoE)."""
        return self.active_parameters or self.parameters


_CONFIG = "config.json (verbatim copies in public repos, read 2026-11-29)"

MODELS: dict[str, ModelArchitecture] = {
    "llama-3.1-8b": ModelArchitecture(
        hf_repo="meta-llama/Llama-3.1-8B-Instruct",
        parameters=8_030_261_248,
        layers=32,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        hidden_size=4096,
        vocab_size=128256,
        max_context=131072,
        source=f"meta-llama/Llama-3.1-8B-Instruct {_CONFIG}; 8.03B parameters per the safetensors index",
    ),
    "llama-3.3-70b": ModelArchitecture(
        hf_repo="meta-llama/Llama-3.3-70B-Instruct",
        parameters=70_553_706_496,
        layers=80,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        hidden_size=8192,
        vocab_size=128256,
        max_context=131072,
        source=f"meta-llama/Llama-3.3-70B-Instruct {_CONFIG}; 70.55B parameters per the safetensors index",
    ),
    "llama-3.1-405b": ModelArchitecture(
        hf_repo="meta-llama/Llama-3.1-405B-Instruct",
        parameters=405_853_388_800,
        layers=126,
        attention_heads=128,
        kv_heads=8,
        head_dim=128,
        hidden_size=16384,
        vocab_size=128256,
        max_context=131072,
        source=f"meta-llama/Llama-3.1-405B-Instruct {_CONFIG}; 405.85B parameters per the safetensors index",
    ),
    "qwen2.5-7b": ModelArchitecture(
        hf_repo="Qwen/Qwen2.5-7B-Instruct",
        parameters=7_615_616_512,
        layers=28,
        attention_heads=28,
        kv_heads=4,
        head_dim=128,
        hidden_size=3584,
        vocab_size=152064,
        max_context=32768,
        source=f"Qwen/Qwen2.5-7B-Instruct {_CONFIG} (32768 without YaRN); 7.61B parameters per the model card",
    ),
    "qwen2.5-32b": ModelArchitecture(
        hf_repo="Qwen/Qwen2.5-32B-Instruct",
        parameters=32_763_876_352,
        layers=64,
        attention_heads=40,
        kv_heads=8,
        head_dim=128,
        hidden_size=5120,
        vocab_size=152064,
        max_context=32768,
        source=f"Qwen/Qwen2.5-32B-Instruct {_CONFIG} (32768 without YaRN); 32.5B parameters per the model card",
    ),
    "qwen2.5-72b": ModelArchitecture(
        hf_repo="Qwen/Qwen2.5-72B-Instruct",
        parameters=72_706_203_648,
        layers=80,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        hidden_size=8192,
        vocab_size=152064,
        max_context=32768,
        source=f"Qwen/Qwen2.5-72B-Instruct {_CONFIG} (32768 without YaRN); 72.7B parameters per the model card",
    ),
    "mistral-7b": ModelArchitecture(
        hf_repo="mistralai/Mistral-7B-Instruct-v0.3",
        parameters=7_248_023_552,
        layers=32,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        hidden_size=4096,
        vocab_size=32768,
        max_context=32768,
        source=f"mistralai/Mistral-7B-Instruct-v0.3 {_CONFIG} (no sliding window since v0.2); 7.25B parameters",
    ),
    "mixtral-8x7b": ModelArchitecture(
        hf_repo="mistralai/Mixtral-8x7B-Instruct-v0.1",
        parameters=46_702_792_704,
        active_parameters=12_879_921_152,
        experts=8,
        experts_per_token=2,
        layers=32,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        hidden_size=4096,
        vocab_size=32000,
        max_context=32768,
        source=f"mistralai/Mixtral-8x7B-Instruct-v0.1 {_CONFIG}; 46.7B total / 12.9B active (Mistral announcement); "
        "num_local_experts 8, num_experts_per_tok 2",
    ),
    "deepseek-r1-distill-llama-70b": ModelArchitecture(
        hf_repo="deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
        parameters=70_553_706_496,
        layers=80,
        attention_heads=64,
        kv_heads=8,
        head_dim=128,
        hidden_size=8192,
        vocab_size=128256,
        max_context=131072,
        source="DeepSeek-R1 README: distilled from Llama-3.3-70B-Instruct, same architecture; config.json copies",
    ),
    "gemma-2-9b": ModelArchitecture(
        hf_repo="google/gemma-2-9b-it",
        parameters=9_241_705_984,
        layers=42,
        attention_heads=16,
        kv_heads=8,
        head_dim=256,
        hidden_size=3584,
        vocab_size=256000,
        tie_word_embeddings=True,
        max_context=8192,
        sliding_window=4096,
        sliding_window_layers=21,
        source=f"google/gemma-2-9b-it {_CONFIG}: head_dim 256, sliding window 4096 on alternate layers; 9.24B",
    ),
}


def get_model(model_id: str) -> ModelArchitecture:
    """Look a catalog model up; the error lists the known ids."""
    try:
        return MODELS[model_id]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise KeyError(f"unknown model {model_id!r}; known: {known}") from None
