"""The model directory a simulated engine loads, and the gateway's tokenizer: one file for both.

Dynamo's mocker reads ``config.json`` (layers, KV heads, head dim: a token's KV bytes), ``tokenizer.json`` and
``tokenizer_config.json`` from ``--model-path`` (``../shared/reference/simulation-facts.md``); it generates random
tokens, so no weights. The directory is laid out where the gateway's processor looks for a model's tokenizer
(``<root>/<org>/<name>/tokenizer.json``, :func:`inferplane.components.gateway.renderer.tokenizer_file`), so the
gateway hashes prompts into blocks with exactly the tokenizer the engines count them with.

The tokenizer is word-level (``tokenizers`` ``WordLevel``, whitespace pre-tokenizer): ``w{i}`` is one token, which
makes a workload's prompt lengths and shared prefixes exact in tokens. The real model's tokenizer cannot be fetched
here (no Hub), and any tokenizer serves the simulation as long as both sides use the same one.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

from inferplane.components.catalog import ModelArchitecture
from inferplane.tool.simulate.workload import VOCABULARY_WORDS

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}\n{% endfor %}"
"""Each message's text and a newline (which the whitespace pre-tokenizer drops): a chat prompt's tokens are its
words, no role markers, so a request's prompt tokens are what the workload says."""


def vocabulary() -> dict[str, int]:
    """The special tokens, then ``w0`` .. ``w{VOCABULARY_WORDS - 1}``."""
    words = [*SPECIAL_TOKENS, *(f"w{i}" for i in range(VOCABULARY_WORDS))]
    return {word: i for i, word in enumerate(words)}


def build_tokenizer() -> Tokenizer:
    """The word-level tokenizer both the engines and the gateway load."""
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary(), unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def model_config(architecture: ModelArchitecture, max_context: int) -> dict[str, object]:
    """A Llama-shaped ``config.json`` with the model's real attention shape (what the mocker reads KV bytes from)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": architecture.hidden_size,
        "num_attention_heads": architecture.attention_heads,
        "num_key_value_heads": architecture.kv_heads,
        "head_dim": architecture.head_dim,
        "num_hidden_layers": architecture.layers,
        "vocab_size": max(architecture.vocab_size, len(SPECIAL_TOKENS) + VOCABULARY_WORDS),
        "max_position_embeddings": max_context,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def write_model_dir(root: Path, repo: str, architecture: ModelArchitecture, max_context: int) -> Path:
    """``root/<repo>/`` with ``config.json``, ``tokenizer.json`` and ``tokenizer_config.json``; returns it."""
    directory = root / repo
    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(directory / "tokenizer.json"))
    (directory / "config.json").write_text(json.dumps(model_config(architecture, max_context), indent=1))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[1],
        "eos_token": SPECIAL_TOKENS[2],
        "unk_token": SPECIAL_TOKENS[0],
        "model_max_length": max_context,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))
    return directory
