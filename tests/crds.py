"""Validating custom resources against the upstream CRDs in ``../shared/schemas/crds`` with ``jsonschema``."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import jsonschema
import yaml

from tests.conftest import crd_dir

CRD_FILES = {
    ("keda.sh", "ScaledObject"): "keda.sh_scaledobjects.yaml",
    ("monitoring.coreos.com", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
    ("monitoring.coreos.com", "PodMonitor"): "monitoring.coreos.com_podmonitors.yaml",
    ("monitoring.coreos.com", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
}


@cache
def _schema(group: str, kind: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((crd_dir() / CRD_FILES[(group, kind)]).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
    schema: dict[str, Any] = served[version]["schema"]["openAPIV3Schema"]
    return schema


def integral(value: Any) -> Any:
    """Undo the wire format: Pulumi's protobuf Struct carries every number as a double (``8`` arrives as ``8.0``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


def validate(obj: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``obj`` (apiVersion, kind, metadata, spec) fits its CRD."""
    group, version = str(obj["apiVersion"]).split("/")
    jsonschema.Draft7Validator(_schema(group, str(obj["kind"]), version)).validate(dict(obj))


def errors(obj: Mapping[str, Any]) -> list[str]:
    """Every schema violation of ``obj``, as ``path: message``."""
    group, version = str(obj["apiVersion"]).split("/")
    validator = jsonschema.Draft7Validator(_schema(group, str(obj["kind"]), version))
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(dict(obj)))
