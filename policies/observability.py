"""Alerting the platform cannot do without."""

from __future__ import annotations

import re
from typing import Any

from inferplane.components.serving.annotations import ALERT_KIND_LABEL, NAME_LABEL, PREEMPTION_ALERT, SERVED_MODEL_LABEL
from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Resource,
    Severity,
    StackReport,
    as_dict,
    as_list,
    dig,
    known,
    of_type,
    stack_policy,
)
from inferplane.policies.resource_types import T
from inferplane.policies.serving import engine_flags, engine_flags_known, engine_of, is_model_server
from inferplane.policies.workloads import object_label, workload_name

_PREEMPTION_NAME = re.compile(r"(?i)preempt")


def served_name(server: Resource) -> str | None:
    """The name the server's metrics carry as ``model``: --served-model-name, else its labels, else its name; None
    while an unknown value may be the one that names it (a fallback name would report an alert as missing)."""
    if not engine_flags_known(server):
        return None
    for candidate in (
        engine_flags(server).get("served-model-name"),
        object_label(server, SERVED_MODEL_LABEL),
        object_label(server, NAME_LABEL),
    ):
        if candidate is UNKNOWN:
            return None
        if isinstance(candidate, str) and candidate:
            return candidate
    return None if server.get("metadata", "name") is UNKNOWN else workload_name(server)


def preemption_alerts(resources: list[Resource]) -> list[dict[str, Any]] | None:
    """Alert rules about sequence preemption (labelled so, or named like ``InferplanePreemptions``); None when a
    rule set is unknown."""
    found: list[dict[str, Any]] = []
    for rule_set in of_type(resources, T.PROMETHEUS_RULE):
        groups = rule_set.get("spec", "groups")
        if not known(groups):
            return None
        for group in as_list(groups):
            for rule in as_list(as_dict(group).get("rules")):
                alert = as_dict(rule).get("alert")
                if not isinstance(alert, str):
                    continue
                if dig(rule, "labels", ALERT_KIND_LABEL) == PREEMPTION_ALERT or _PREEMPTION_NAME.search(alert):
                    found.append(as_dict(rule))
    return found


def _covers(rule: dict[str, Any], model: str) -> bool:
    expr = rule.get("expr")
    return dig(rule, "labels", "model") == model or (isinstance(expr, str) and f'"{model}"' in expr)


@stack_policy(
    name="monitoring-prometheusrule-require-preemption-alert",
    description=(
        "Every vLLM and SGLang model server has an alert on its engine preempting sequences "
        "(vllm:num_preemptions_total, sglang:num_retracted_requests_total): preemption means the KV cache ran out "
        "and running requests are recomputed, multiplying their latency long before the latency alerts fire. "
        "Triton's TensorRT-LLM exports no preemption counter and is exempt."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    remediation="Create the model's rules with components.observability.alerts.ServingRules (it alerts on "
    "preemptions).",
)
def preemption_alert(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchor: vLLM and SGLang metrics (components.observability.metrics); components.observability.alerts."""
    alerts = preemption_alerts(resources)
    if alerts is None:
        return
    for server in of_type(resources, T.DEPLOYMENT, T.STATEFUL_SET):
        if not is_model_server(server) or engine_of(server) not in ("vllm", "sglang"):
            continue
        model = served_name(server)
        if model is not None and not any(_covers(rule, model) for rule in alerts):
            report(
                f"no preemption alert covers model {model} (an alert named like *Preempt* or labelled "
                f"{ALERT_KIND_LABEL}={PREEMPTION_ALERT}, with labels.model={model})",
                server.urn,
            )


POLICIES: list[AnyPolicy] = [preemption_alert]
