"""Google Cloud resource labels: the rules they follow and the conversion from the platform's tags.

AWS tags take almost any string; GCP labels do not. Rules (cloud.google.com/resource-manager/docs/labels-overview,
"Requirements for labels", read 2026-11-29): keys are 1-63 characters and start with a lowercase letter; keys and
values use only lowercase letters, digits, ``_`` and ``-``; values are at most 63 characters; a resource has at most
64 labels. (International lowercase letters are also allowed; this module keeps to ASCII.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_LABELS = 64
_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_INVALID = re.compile(r"[^a-z0-9_-]")


def label_problems(labels: Mapping[str, str]) -> list[str]:
    """Every way ``labels`` breaks GCP's label rules; empty when they are valid."""
    problems = [
        f"label key {key!r} must start with a lowercase letter and use only a-z, 0-9, _ and - (at most 63)"
        for key in labels
        if not _KEY.match(key)
    ]
    problems += [
        f"label value {value!r} (key {key!r}) may use only a-z, 0-9, _ and - (at most 63)"
        for key, value in labels.items()
        if not _VALUE.match(value)
    ]
    if len(labels) > MAX_LABELS:
        problems.append(f"{len(labels)} labels; GCP allows at most {MAX_LABELS} per resource")
    return problems


def _convert(text: str) -> str:
    return _INVALID.sub("_", text.lower())[:63]


def to_gcp_labels(tags: Mapping[str, str]) -> dict[str, str]:
    """The platform's tags as GCP labels: lower-cased, other characters replaced by ``_``, cut to 63.

    Raises ``ValueError`` when two tags become the same label key, or a key cannot start with a letter: silently
    merging or renaming cost-allocation keys would mislead whoever reads the bill.
    """
    labels: dict[str, str] = {}
    origin: dict[str, str] = {}
    problems: list[str] = []
    for key, value in tags.items():
        label = _convert(key)
        if not label[:1].isalpha():
            problems.append(f"tag {key!r} cannot become a GCP label key: it must start with a letter")
            continue
        if label in labels:
            problems.append(f"tags {origin[label]!r} and {key!r} both become the GCP label key {label!r}")
            continue
        labels[label] = _convert(value)
        origin[label] = key
    if problems:
        raise ValueError("; ".join(problems))
    return labels
