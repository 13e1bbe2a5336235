"""Small builders of Envoy config fields every gateway renderer module writes the same way."""

from __future__ import annotations

from typing import Any


def duration(seconds: float) -> str:
    """A protobuf Duration in its JSON form (``"2s"``, ``"0.500s"``)."""
    return f"{seconds:.3f}s".replace(".000s", "s")


def typed(type_name: str, **fields: Any) -> dict[str, Any]:
    """A ``google.protobuf.Any`` of ``type_name`` with ``fields``."""
    return {"@type": f"type.googleapis.com/{type_name}", **fields}


def socket(host: str, port: int) -> dict[str, Any]:
    """An Envoy ``Address`` of ``host:port``."""
    return {"socket_address": {"address": host, "port_value": port}}
