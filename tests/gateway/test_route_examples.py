"""The routed tiers' examples read from the project at preview (:mod:`inferplane.components.gateway.route_examples`):
a good file by tier, every bad one refused together, naming the key and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplane.components.gateway.route_examples import MAX_ROUTE_EXAMPLES_BYTES, read_route_examples
from inferplane.components.spec.platform_spec import SpecError
from tests.gateway.test_renderer import EXAMPLES, _routed_prod

KEY = "gateway.tiers[2].route.examples"


def _write(project: Path, content: str | bytes) -> Path:
    path = project / "routes" / "auto.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_a_good_file_is_read_by_tier(tmp_path: Path) -> None:
    _write(tmp_path, EXAMPLES)
    assert read_route_examples(_routed_prod(), tmp_path) == {"auto": EXAMPLES}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file or directory"),
        (EXAMPLES + '{"prompt": "p", "cheap_correct": 1, "strong_correct": true}\n', "auto.jsonl:3: cheap_correct"),
        (b'{"prompt": "\xff"}', "'utf-8' codec can't decode"),
        ("x" * (MAX_ROUTE_EXAMPLES_BYTES + 1), f"bytes; the examples of all tiers may take {MAX_ROUTE_EXAMPLES_BYTES}"),
        ("", "auto.jsonl: no examples"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key_and_the_file(
    tmp_path: Path, content: str | bytes | None, message: str
) -> None:
    if content is not None:
        _write(tmp_path, content)
    with pytest.raises(SpecError) as raised:
        read_route_examples(_routed_prod(), tmp_path)
    [issue] = raised.value.issues
    assert issue.path == KEY
    assert str(tmp_path / "routes" / "auto.jsonl") in issue.message and message in issue.message


def test_a_directory_is_not_an_examples_file(tmp_path: Path) -> None:
    (tmp_path / "routes" / "auto.jsonl").mkdir(parents=True)
    with pytest.raises(SpecError, match=r"auto\.jsonl: not a regular file"):
        read_route_examples(_routed_prod(), tmp_path)
