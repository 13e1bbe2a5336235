"""Fixtures the processor's tests share."""

from __future__ import annotations

import pytest

from tests.tiny_model import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real ``tokenizers`` tokenizer of the tiny model's words, built once per module."""
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    build_tokenizer().save(str(path))
    return str(path)
