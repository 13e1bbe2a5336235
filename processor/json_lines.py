"""JSON-lines files of pydantic records (labelled examples, labelled pairs), read one way: lines split on ``\\n``
only (``str.splitlines`` would also split at a U+2028 that JSON allows unescaped inside a string), blank lines
skipped, a bad line refused with the file's name, the line's number and every field's problem."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

Record = TypeVar("Record", bound=BaseModel)


class JsonLinesError(ValueError):
    """A line that is no valid record; the message names the file and the line."""


def parse_json_lines(text: str, name: str, record: type[Record]) -> list[Record]:
    """Every non-blank line of ``text`` as a ``record``, or :class:`JsonLinesError` naming ``name`` and the line."""
    records: list[Record] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append(record.model_validate_json(line))
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in error.errors())
            raise JsonLinesError(f"{name}:{number}: {problems}") from None
    return records
