"""``python -m inferplane.processor.tokenizer_fetch --dest DIR org/name/tokenizer.json ...``: the gateway's init step
where no model cache exists (GKE): each served model's ``tokenizer.json`` from the Hugging Face Hub, as the model
servers there load their weights.

Each file is read from ``<endpoint>/<org>/<name>/resolve/<revision>/tokenizer.json`` (the Hub's download URL, which
redirects large files to its CDN; httpx drops the ``Authorization`` header on a redirect to another host), with the
token read from the file ``HF_TOKEN_PATH`` names (the mounted Secret, never the environment), checked to be a
tokenizer, and written atomically to ``<dest>/<org>/<name>/tokenizer.json``, the layout the processor reads.

A file that cannot be fetched is logged and skipped, and the step still succeeds: the processor then estimates that
model's prompt tokens (and counts a ``tokenizer`` error), rather than the gateway not starting at all.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx
from tokenizers import Tokenizer

log = logging.getLogger("inferplane.processor.tokenizer_fetch")

DEFAULT_ENDPOINT = "https://huggingface.co"
"""The Hub; ``HF_ENDPOINT`` (huggingface_hub's variable for a mirror) replaces it."""
DEFAULT_REVISION = "main"
"""What vLLM loads when no ``--revision`` is given (the model servers pass none)."""
MAX_BYTES = 64 * 1024 * 1024
"""Largest tokenizer file accepted (Llama 3's is about 9 MB, Qwen 2.5's about 7 MB)."""
TIMEOUT_SECONDS = 30.0


def hub_url(endpoint: str, file: str, revision: str = DEFAULT_REVISION) -> str:
    """The download URL of ``file`` (``<org>/<name>/<path in repo>``)."""
    org, name, path = _split(file)
    return f"{endpoint.rstrip('/')}/{org}/{name}/resolve/{revision}/{path}"


def _split(file: str) -> tuple[str, str, str]:
    parts = file.split("/")
    if len(parts) < 3 or not all(parts) or ".." in parts:
        raise ValueError(f"{file!r} is not <org>/<name>/<file>")
    return parts[0], parts[1], "/".join(parts[2:])


def read_token(path: str | None) -> str | None:
    """The Hub token from ``path`` (stripped), or None when there is no such file or it is empty."""
    if not path:
        return None
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return token or None


def fetch(client: httpx.Client, endpoint: str, file: str, dest: Path, token: str | None) -> bool:
    """Download one file into ``dest``; False (logged) when it could not be fetched or is not a tokenizer."""
    try:
        url = hub_url(endpoint, file)
    except ValueError as exc:
        log.error("skipping %s: %s", file, exc)
        return False
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with client.stream("GET", url, headers=headers) as response:
            response.raise_for_status()
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BYTES:
                    raise ValueError(f"larger than {MAX_BYTES} bytes")
        Tokenizer.from_str(body.decode("utf-8"))
    except Exception as exc:  # the network, the Hub, a size cap or a file tokenizers refuses: all mean "estimate"
        log.error("cannot fetch %s from %s: %s; its prompt tokens will be estimated", file, endpoint, exc)
        return False
    target = dest / file
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_bytes(bytes(body))
    partial.replace(target)
    log.info("fetched %s (%d bytes)", file, len(body))
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Fetch every named file; always 0 once the arguments parse (a missing tokenizer is not fatal)."""
    parser = argparse.ArgumentParser(prog="python -m inferplane.processor.tokenizer_fetch", description=__doc__)
    parser.add_argument("--dest", required=True, type=Path, help="the tokenizers volume (the processor's root)")
    parser.add_argument("files", nargs="+", help="<org>/<name>/tokenizer.json, as the processor config names them")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    token = read_token(os.environ.get("HF_TOKEN_PATH"))
    with httpx.Client(follow_redirects=True, timeout=TIMEOUT_SECONDS) as client:
        fetched = sum(fetch(client, endpoint, file, args.dest, token) for file in args.files)
    log.info("%d of %d tokenizer files fetched", fetched, len(args.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
