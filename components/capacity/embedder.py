"""Sizing of the semantic cache's served embedder: what each pod of a catalog sentence-embedding model asks of a node.

The embedder is a small encoder served by vLLM's pooling runner on CPU (``components.serving.embedder_service``). Its
memory is the catalog's measured resident size plus headroom, not a derivation from parameters: for a 23M-parameter
model the weights are 5% of it and the rest is the Python server, torch and the engine's worker. Encoder-only models
keep no KV cache, so nothing is added for one. The start is the catalog's measured start plus fetching the weights
(from the Hugging Face hub, counted at sizing's S3 rate: for 91 MB the difference is a second or two against a start
of about a minute, within the startup probe's margin).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.catalog.embedders import EmbeddingModel
from inferplane.components.spec.platform_spec import CacheSpec

MIB = 1024**2

EMBEDDER_MEMORY_HEADROOM = 1.25
"""Requested memory over the measured resident size: batches of long inputs and allocator growth. The request is
also the limit (a pod over it is killed, never the node's other pods)."""

EMBEDDER_MEMORY_STEP_BYTES = 256 * MIB
"""Requests are whole multiples of this, so they read as ``2048Mi``, not as an odd byte count."""

TARGET_CPU_UTILIZATION = 70
"""The embedder's autoscaler adds pods above this average CPU use (percent of the request). CPU is the encoder's own
load signal (it computes on CPU and holds no queue the gateway cannot see), unlike a GPU server's, which is why the
model servers scale on queue depth and this one on CPU. 70% leaves room for the minute a new pod takes to start
(the catalog's measured start) while the others absorb the rise; Kubernetes' HPA then needs 10% off target before it
acts (its default tolerance)."""

FP32_BYTES = 4
"""Sentence-transformers checkpoints are float32 (the catalog's safetensors header counts)."""


class EmbedderSizing(BaseModel):
    """What each served embedder pod asks for, and how long it may take to start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="Catalog name of the embedding model (also its served model name).")
    hf_repo: str = Field(description="Hugging Face repository the pods fetch the weights from.")
    dimensions: int = Field(description="Length of the vectors it returns.")
    replicas: int = Field(description="Pods at the floor (the autoscaler's minimum).")
    max_replicas: int = Field(
        description="The autoscaler's ceiling: the floor times the gateway's own scale-out (the gateway's pods are "
        "what call it, so it may grow as they do)."
    )
    target_cpu_utilization: int = Field(
        description="Average CPU use, in percent of each pod's request, the autoscaler holds the pods at."
    )
    cpus: int = Field(description="CPU cores per pod (request), also its OpenMP threads.")
    memory_bytes: int = Field(description="Memory per pod, request and limit.")
    max_model_len: int = Field(description="Longest input (``--max-model-len``): the model's trained length.")
    weights_bytes: int = Field(description="Checkpoint size (float32).")
    start_seconds: float = Field(description="Fetching the weights and starting the server, estimated.")
    timeout_ms: int = Field(description="The gateway's bound on one embedding request.")


def size_embedder(cache: CacheSpec, *, fetch_bytes_per_second: float, gateway_scale_out: int) -> EmbedderSizing | None:
    """The served embedder ``cache`` asks for, or None when it asks for none (cache or semantic lookups off, or an
    embedder the platform does not run). ``fetch_bytes_per_second``: how fast a new pod fetches weights (sizing's
    ``WEIGHTS_FETCH_BYTES_PER_SECOND``); ``gateway_scale_out``: the gateway autoscaler's ceiling over its floor
    (``system_nodes.SCALE_OUT_FACTOR``). This module sits below sizing, which passes both."""
    served = cache.embedder.served_model
    if not (cache.enabled and cache.semantic) or served is None:
        return None
    weights = served.parameters * FP32_BYTES
    return EmbedderSizing(
        model=served.name,
        hf_repo=served.hf_repo,
        dimensions=served.dimensions,
        replicas=cache.embedder.replicas,
        max_replicas=cache.embedder.replicas * gateway_scale_out,
        target_cpu_utilization=TARGET_CPU_UTILIZATION,
        cpus=cache.embedder.cpus,
        memory_bytes=pod_memory_bytes(served),
        max_model_len=served.max_tokens,
        weights_bytes=weights,
        start_seconds=round(served.start_seconds + weights / fetch_bytes_per_second, 1),
        timeout_ms=cache.embedder.timeout_ms,
    )


def pod_memory_bytes(model: EmbeddingModel) -> int:
    """The measured resident size with headroom, rounded up to :data:`EMBEDDER_MEMORY_STEP_BYTES`."""
    wanted = model.served_memory_bytes * EMBEDDER_MEMORY_HEADROOM
    return math.ceil(wanted / EMBEDDER_MEMORY_STEP_BYTES) * EMBEDDER_MEMORY_STEP_BYTES
