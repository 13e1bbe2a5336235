"""The simulated model's directory: the model's attention shape, a word-level tokenizer in which a workload's words
are one token each, laid out where the gateway looks for the model's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from inferplane.components.gateway import renderer as gc
from inferplane.tool import gateway_run as gr
from inferplane.tool.simulate.model_dir import SPECIAL_TOKENS, write_model_dir
from inferplane.tool.simulate.workload import VOCABULARY_WORDS, words
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR


def test_config_carries_the_models_attention_shape(tmp_path: Path) -> None:
    deployment = load_stack(PROJECT_DIR, "prod").platform.models[0]
    arch = deployment.architecture_resolved
    directory = write_model_dir(tmp_path, arch.hf_repo, arch, deployment.max_context)
    config = json.loads((directory / "config.json").read_text())
    assert config["num_hidden_layers"] == arch.layers
    assert config["num_key_value_heads"] == arch.kv_heads
    assert config["head_dim"] == arch.head_dim
    assert config["num_attention_heads"] == arch.attention_heads
    assert config["max_position_embeddings"] == deployment.max_context
    assert config["vocab_size"] >= len(SPECIAL_TOKENS) + VOCABULARY_WORDS
    tokenizer_config = json.loads((directory / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == deployment.max_context


def test_every_word_is_one_token(tmp_path: Path) -> None:
    deployment = load_stack(PROJECT_DIR, "dev").platform.models[0]
    arch = deployment.architecture_resolved
    directory = write_model_dir(tmp_path, arch.hf_repo, arch, deployment.max_context)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    ids = [0, 1, 17, VOCABULARY_WORDS - 1]
    encoded = tokenizer.encode(words(ids), add_special_tokens=False).ids
    assert encoded == [len(SPECIAL_TOKENS) + i for i in ids]
    assert tokenizer.encode("w0\nw1", add_special_tokens=False).ids == [3, 4], "the chat template's newline is free"


def test_the_gateway_finds_the_same_file(tmp_path: Path) -> None:
    deployment = load_stack(PROJECT_DIR, "prod").platform.models[0]
    relative = gc.tokenizer_file(deployment)
    directory = write_model_dir(
        tmp_path, relative.removesuffix("/tokenizer.json"), deployment.architecture_resolved, deployment.max_context
    )
    assert gr.find_tokenizer(relative, (tmp_path,)) == directory / "tokenizer.json"
