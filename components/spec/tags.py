"""The platform's tags: the rules AWS holds them to, and the Kubernetes labels derived from them.

AWS tag rules (the "Tag restrictions" every tagging service documents, e.g. docs.aws.amazon.com ECS API ``Tag`` and
AWS Batch "Tag restrictions", read 2026-12-01): at most 50 user tags per resource; keys 1-128 and values 0-256
Unicode characters; letters, numbers, spaces and ``_ . : / = + - @``; keys and values must not start with ``aws:``
in any case (reserved for AWS). Some services accept more characters, but IAM (``API_Tag``: pattern
``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]``) does not, and the platform tags its IAM roles: so ``ML Platform (EU)`` is
refused (the parentheses), while ``ML Platform EU`` passes and becomes the label value ``ML_Platform_EU``.

Kubernetes label rules (kubernetes.io "Labels and Selectors", "Syntax and character set"): a key is an optional
DNS-subdomain prefix and ``/``, then a name of at most 63 characters, alphanumerics at both ends with ``-``, ``_``
and ``.`` between; a value is empty or follows the name rule. ``kubernetes.io/`` and ``k8s.io/`` prefixes are
reserved for Kubernetes core components.

GCP label rules live in :mod:`inferplane.components.spec.gcp_labels`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

MAX_USER_TAGS = 50
"""AWS: user tags per resource."""
PLATFORM_TAG_KEYS = ("environment", "managed-by", "app")
"""Tags the composed platform adds to the stack's own: they count against the AWS limit, and a platform stack may
not set them (the program's value would silently win; ``buildable.check_buildable``). A program composing the
components itself tags as it likes."""
PLATFORM_TAG_COUNT = len(PLATFORM_TAG_KEYS)
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 256
_AWS_TAG_SYMBOLS = frozenset("_.:/=+-@")


def _aws_tag_text(text: str) -> bool:
    """IAM's tag pattern ``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]``, the strictest among the services the platform tags:
    letters, separators (spaces) and numbers of any script, and ``_ . : / = + - @``."""
    return all(c in _AWS_TAG_SYMBOLS or unicodedata.category(c)[0] in "LZN" for c in text)


_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NOT_LABEL_CHAR = re.compile(r"[^-A-Za-z0-9_.]")
_RESERVED_LABEL_PREFIXES = ("kubernetes.io", "k8s.io")
MAX_LABEL_NAME = 63


def aws_tag_problems(tags: Mapping[str, str]) -> list[tuple[str | None, str]]:
    """(tag key, problem) for every way ``tags`` break AWS's tag rules; None as the key for the count."""
    problems: list[tuple[str | None, str]] = []
    allowed = MAX_USER_TAGS - PLATFORM_TAG_COUNT
    if len(tags) > allowed:
        problems.append(
            (None, f"{len(tags)} tags; AWS allows {MAX_USER_TAGS} per resource, {allowed} after the platform's")
        )
    for key, value in tags.items():
        if not 1 <= len(key) <= MAX_TAG_KEY:
            problems.append((key, f"a tag key is 1 to {MAX_TAG_KEY} characters, got {len(key)}"))
        if len(value) > MAX_TAG_VALUE:
            problems.append((key, f"a tag value is at most {MAX_TAG_VALUE} characters, got {len(value)}"))
        for part, text in (("key", key), ("value", value)):
            if not _aws_tag_text(text):
                problems.append((key, f"the tag {part} may use letters, digits, spaces and _ . : / = + - @ only"))
            if text.lower().startswith("aws:"):
                problems.append((key, f"the tag {part} starts with 'aws:', which AWS reserves for itself"))
    return problems


def _label_name(text: str) -> str:
    """``text`` as a label name or value: other characters become ``_``, ends trimmed to alphanumerics, 63 at most."""
    converted = _NOT_LABEL_CHAR.sub("_", text)[:MAX_LABEL_NAME]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", converted)


def _label_key(tag_key: str) -> str:
    prefix, slash, name = tag_key.rpartition("/")
    if slash and len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix):
        return f"{prefix}/{_label_name(name)}" if _label_name(name) else ""
    return _label_name(tag_key)


def label_problems(tags: Mapping[str, str]) -> list[tuple[str | None, str]]:
    """(tag key, problem) for tags that cannot become Kubernetes labels: an empty or reserved key, or a collision."""
    problems: list[tuple[str | None, str]] = []
    origin: dict[str, str] = {}
    for key in tags:
        label = _label_key(key)
        if not label:
            problems.append((key, "cannot become a Kubernetes label key: it has no letter or digit"))
            continue
        prefix = label.rpartition("/")[0]
        if prefix and any(prefix == p or prefix.endswith(f".{p}") for p in _RESERVED_LABEL_PREFIXES):
            problems.append((key, f"the label prefix {prefix!r} is reserved for Kubernetes core components"))
        if label in origin:
            problems.append((key, f"tags {origin[label]!r} and {key!r} both become the Kubernetes label {label!r}"))
        origin.setdefault(label, key)
    return problems


def kubernetes_labels(tags: Mapping[str, str]) -> dict[str, str]:
    """The stack's tags as Kubernetes labels, always valid: characters outside ``[-A-Za-z0-9_.]`` become ``_``,
    ends are trimmed to alphanumerics and names cut to 63 (``ML Platform (EU)`` becomes ``ML_Platform__EU``).

    Raises ``ValueError`` where :func:`label_problems` finds any (the spec refuses such tags first).
    """
    problems = label_problems(tags)
    if problems:
        raise ValueError("; ".join(problem for _, problem in problems))
    return {_label_key(key): _label_name(value) for key, value in tags.items()}


def is_label_value(text: str) -> bool:
    """Whether ``text`` is a valid Kubernetes label value."""
    return text == "" or (len(text) <= MAX_LABEL_NAME and bool(_LABEL_NAME.match(text)))
