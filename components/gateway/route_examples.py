"""The labelled examples of the difficulty-routed tiers, read from the project at preview time.

A tier's ``route.examples`` names a JSON-lines file relative to the project directory (the one with ``Pulumi.yaml``):
:func:`read_route_examples` reads every routed tier's file, checks it as the processor will parse it
(:func:`inferplane.processor.difficulty.parse_examples`) and within what one ConfigMap can carry, and raises one
:class:`~inferplane.components.spec.platform_spec.SpecError` naming every bad field and file, so a plan with a missing
or malformed examples file is refused at preview, never found by a processor that cannot start. The texts go into the
gateway's ConfigMap beside the processor's config (:mod:`.renderer`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from inferplane.components.spec.platform_spec import PlatformSpec, SpecError, SpecIssue
from inferplane.processor.difficulty import ExamplesError, parse_examples

CONFIG_MAP_BYTES = 1024 * 1024
"""Kubernetes caps a ConfigMap's data at 1 MiB (``MaxSecretSize``/etcd's request limit; the API server refuses more)."""
MAX_ROUTE_EXAMPLES_BYTES = 768 * 1024
"""All routed tiers' examples together: what the gateway's ConfigMap holds beside Envoy's bootstrap and the
processor's config (tens of KiB). At MMLU's 470 characters a prompt, about 1,500 examples: RouteLLM's MMLU routers
were trained with about 1,500 labels."""


def route_examples_file(tier: str) -> str:
    """The ConfigMap key (and file name beside the processor's config) of ``tier``'s examples."""
    return f"route-{tier}.jsonl"


def _read(path: Path) -> str:
    """The UTF-8 text of a regular file; OSError or UnicodeDecodeError otherwise."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise IsADirectoryError("not a regular file")
    if info.st_size > MAX_ROUTE_EXAMPLES_BYTES:
        raise ValueError(f"{info.st_size} bytes; the examples of all tiers may take {MAX_ROUTE_EXAMPLES_BYTES}")
    return path.read_bytes().decode("utf-8")


def read_route_examples(spec: PlatformSpec, project_dir: Path) -> dict[str, str]:
    """Every difficulty-routed tier's examples text by tier name; raises :class:`SpecError` with every problem."""
    texts: dict[str, str] = {}
    issues: list[SpecIssue] = []
    for index, tier in enumerate(spec.gateway.tiers):
        if tier.route is None:
            continue
        where = f"gateway.tiers[{index}].route.examples"
        path = project_dir / tier.route.examples
        try:
            text = _read(path)
            parse_examples(text, str(path))
        except ExamplesError as error:  # names the file and the line
            issues.append(SpecIssue(where, str(error)))
            continue
        except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            issues.append(SpecIssue(where, f"{path}: {reason}"))
            continue
        texts[tier.name] = text
    total = sum(len(t.encode()) for t in texts.values())
    if total > MAX_ROUTE_EXAMPLES_BYTES:
        issues.append(
            SpecIssue(
                "gateway.tiers",
                f"the routed tiers' examples take {total} bytes together; the gateway's ConfigMap carries at most "
                f"{MAX_ROUTE_EXAMPLES_BYTES} of them (Kubernetes caps a ConfigMap at 1 MiB)",
            )
        )
    if issues:
        raise SpecError(issues)
    return texts
