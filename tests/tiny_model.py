"""A tiny Llama-architecture model directory for vLLM on CPU (``--load-format dummy``: random weights).

Shapes vLLM's CPU attention backend accepts (head_dim 64; 16 is refused), a word-level ``tokenizer.json`` built with
``tokenizers`` (the same file the gateway's processor counts with) and a chat template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers

from inferplane.components.spec.platform_spec import PlatformSpec, parse_platform

VOCAB_SIZE = 512
SPECIAL = ("<unk>", "<s>", "</s>")
WORDS = ("system", "user", "assistant", ":", ".", ",", "?", "!")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }} : {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)
"""Per message: role, ':' and the content's words; the generation prompt adds two tokens."""


ARCHITECTURE: dict[str, Any] = {
    "hf_repo": "inferplane-test/tiny-llama",
    "parameters": 1_600_000,
    "layers": 2,
    "attention_heads": 4,
    "kv_heads": 4,
    "head_dim": 64,
    "hidden_size": 256,
    "vocab_size": VOCAB_SIZE,
    "max_context": 4096,
}
"""The same model as a spec's custom ``architecture`` block (sizing sees a tiny Llama)."""


def vocabulary() -> dict[str, int]:
    """Special tokens, chat words, then ``w0``.. up to :data:`VOCAB_SIZE`."""
    words = [*SPECIAL, *WORDS]
    words += [f"w{i}" for i in range(VOCAB_SIZE - len(words))]
    return {word: i for i, word in enumerate(words)}


def build_tokenizer() -> Tokenizer:
    """Word-level: every whitespace- or punctuation-separated word is one token."""
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary(), unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def words(count: int) -> str:
    """A prompt of exactly ``count`` tokens."""
    return " ".join(f"w{i % 400}" for i in range(count))


def write_model(directory: Path, max_position_embeddings: int = ARCHITECTURE["max_context"]) -> Path:
    """Write the model directory; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "num_hidden_layers": 2,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    build_tokenizer().save(str(directory / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return directory


def tiny_platform(
    models: list[dict[str, Any]], gateway: dict[str, Any], cache: dict[str, Any] | None = None
) -> PlatformSpec:
    """A dev platform of tiny models (each ``{"name": ..., **overrides}``) on one L4 pool, with ``gateway`` (and
    the ``cache`` section when given)."""
    base = {"architecture": ARCHITECTURE, "pool": "l4", "max_context": 2048, "concurrency": 4}
    raw = {
        "environment": "dev",
        "zones": ["us-east-1a", "us-east-1b"],
        "cluster": {"endpoint_access": "public_and_private", "public_access_cidrs": ["198.51.100.0/24"]},
        "pools": [{"name": "l4", "accelerator": "l4-24gb", "instance_type": "g6.2xlarge"}],
        "models": [{**base, **model} for model in models],
        "gateway": gateway,
        **({"cache": cache} if cache is not None else {}),
        "limits": {"max_total_gpus": 4, "max_hourly_cost_usd": 50, "allowed_accelerators": ["l4-24gb"]},
    }
    return parse_platform(raw, "us-east-1")
