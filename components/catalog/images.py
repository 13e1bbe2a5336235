"""Container images the platform runs: repository and tag (with its source) and, when known, the pinned digest.

A tag can be re-pushed; only a digest names the exact bytes. :meth:`ContainerImage.reference` renders
``repository:tag@sha256:...`` when a digest is pinned (the kubelet then pulls by digest and the tag only documents what
it was), and ``repository:tag`` otherwise. Digests come from two places, the later winning: this catalog's ``digest``
and the stack's ``image_digests`` / ``models[].image_digest`` (``components.spec.platform_spec``). The catalog ships no
digests: none of these registries can be read from where the catalog was written, and a digest copied from a third party
is exactly the unverified pin this mechanism exists to avoid. Resolve them with ``crane digest <image>`` or ``docker
buildx imagetools inspect <image>`` and set them in the stack; prod's policy config asks for them
(``kubernetes-workload-require-image-digest``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ImageName = Literal["vllm", "vllm-tpu", "vllm-cpu", "triton-trtllm", "sglang", "aws-cli"]
"""Catalog names of the images (the keys of ``image_digests`` in a stack)."""

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
"""An OCI content digest (SHA-256, the only algorithm these registries serve)."""

VLLM_VERSION = "0.32.0"
"""vLLM release both images are pinned to: the newest with a ``vllm-tpu`` build (PyPI ``vllm`` 0.33.0 and
``vllm-tpu`` 0.32.0 on 2026-11-29). Flags are verified against the ``vllm==0.32.0`` wheel's ``engine/arg_utils.py``,
``config/*.py`` and ``entrypoints/launchers/cli_args.py``."""

TRITON_RELEASE = "26.05"
TRTLLM_VERSION = "1.2.1"
"""NGC Triton 26.05 bundles TensorRT-LLM 1.2.1 (triton-inference-server/server issue #8805, 2026-05-29)."""

SGLANG_VERSION = "0.5.23"
"""SGLang release the ``sglang`` image is pinned to: the newest on PyPI (``sglang`` 0.5.23 on 2026-12-01). Flags are
verified against that release's own parser (``ServerArgs.add_cli_args``, ``sglang/srt/arg_groups/fields/*.py``) and its
metric names against ``sglang/srt/observability/metrics_collector.py``; ``tests/references.py`` installs it."""

AWS_CLI_VERSION = "2.37.5"


class ContainerImage(BaseModel):
    """One image: where it lives, which tag, and the digest when pinned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repository: str = Field(description="Registry path, e.g. ``vllm/vllm-openai`` (Docker Hub) or ``nvcr.io/...``.")
    tag: str = Field(description="The release tag.")
    digest: str | None = Field(default=None, pattern=DIGEST_PATTERN, description="Pinned ``sha256:`` digest.")
    source: str = Field(description="Where the tag was read.")

    def reference(self, digest: str | None = None) -> str:
        """``repository:tag@digest`` with ``digest`` (the stack's) or the catalog's, else ``repository:tag``."""
        pinned = digest or self.digest
        base = f"{self.repository}:{self.tag}"
        return f"{base}@{pinned}" if pinned else base


IMAGES: dict[ImageName, ContainerImage] = {
    "vllm": ContainerImage(
        repository="vllm/vllm-openai",
        tag=f"v{VLLM_VERSION}",
        source='Docker Hub vllm/vllm-openai; ENTRYPOINT ["vllm", "serve"] takes the model first',
    ),
    "vllm-tpu": ContainerImage(
        repository="vllm/vllm-tpu",
        tag=f"v{VLLM_VERSION}",
        source="Docker Hub vllm/vllm-tpu (tags v<vllm version>, e.g. v0.27.0 in Google's TPU recipes)",
    ),
    "vllm-cpu": ContainerImage(
        repository="vllm/vllm-openai-cpu",
        tag=f"v{VLLM_VERSION}",
        source="Docker Hub vllm/vllm-openai-cpu: vLLM's release notes list the CPU build beside the CUDA one "
        "(v0.29.0: ``docker pull vllm/vllm-openai-cpu:v0.29.0``), built from docker/Dockerfile.cpu (target "
        "vllm-openai, x86_64 and arm64); llm-d's and KServe's configs pin ``vllm/vllm-openai-cpu:v0.23.0``. Its "
        "entrypoint has changed between releases, so the embedder sets ``vllm serve`` as the command",
    ),
    "triton-trtllm": ContainerImage(
        repository="nvcr.io/nvidia/tritonserver",
        tag=f"{TRITON_RELEASE}-trtllm-python-py3",
        source="NGC Triton with the TensorRT-LLM backend (triton-inference-server/server issue #8805)",
    ),
    "sglang": ContainerImage(
        repository="lmsysorg/sglang",
        tag=f"v{SGLANG_VERSION}",
        source="Docker Hub lmsysorg/sglang; sgl-project/sglang .github/workflows/release-docker.yml publishes each "
        'release as ``v<version>`` (tag_config ``{"tags": ["v{version}", "latest", ...]}``, the CUDA build the '
        "release defaults to; ``-cu129``/``-cu130`` name the variants), multi-arch; the server runs as "
        "``python3 -m sglang.launch_server``",
    ),
    "aws-cli": ContainerImage(
        repository="amazon/aws-cli",
        tag=AWS_CLI_VERSION,
        source="Docker Hub amazon/aws-cli; tags follow the AWS CLI v2 release (2.37.5 seen pinned with its digest "
        "in public deployment code, 2026-11-29); entrypoint aws",
    ),
}


def image_reference(name: ImageName, digests: Mapping[str, str] | None = None) -> str:
    """The reference to run for catalog image ``name``, pinned by ``digests[name]`` when the stack gives one."""
    return IMAGES[name].reference((digests or {}).get(name))


def engine_image(engine: Literal["vllm", "triton", "sglang"], *, tpu: bool) -> ImageName:
    """The catalog image an engine serves from: vLLM's CUDA or TPU image, Triton with TensorRT-LLM, or SGLang."""
    if engine == "triton":
        return "triton-trtllm"
    if engine == "sglang":
        return "sglang"
    return "vllm-tpu" if tpu else "vllm"
