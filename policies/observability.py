"""Alerting the platform cannot do without."""

from __future__ import annotations

import re

from components.annotations import ALERT_KIND_LABEL, PREEMPTION_ALERT
from policies.base import (
    AnyPolicy,
    Config,
    EnforcementLevel,
    Resource,
    Severity,
    StackReport,
    as_dict,
    as_list,
    known,
    of_type,
    stack_policy,
)
from policies.resource_types import T
from policies.serving import is_model_server
from policies.workloads import workload_name

_PREEMPTION_NAME = re.compile(r"(?i)preempt|interrupt|reclaim")


def preemption_alerts(resources: list[Resource]) -> list[str] | None:
    """Names of alert rules labelled as preemption alerts (or named like one); None when rules are unknown."""
    found: list[str] = []
    for rule_set in of_type(resources, T.PROMETHEUS_RULE):
        if not known(rule_set.get("spec", "groups")):
            return None
        for group in as_list(rule_set.get("spec", "groups")):
            for rule in as_list(as_dict(group).get("rules")):
                alert = as_dict(rule).get("alert")
                if not isinstance(alert, str):
                    continue
                kind = as_dict(as_dict(rule).get("labels")).get(ALERT_KIND_LABEL)
                if kind == PREEMPTION_ALERT or _PREEMPTION_NAME.search(alert):
                    found.append(alert)
    return found


@stack_policy(
    name="monitoring-prometheusrule-require-preemption-alert",
    description=(
        "A stack that serves models has an alert on accelerator nodes being preempted or reclaimed: losing a GPU "
        "node costs minutes of cold start, and the on-call must know before the latency alerts fire."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    remediation=f"Label the alert rule {ALERT_KIND_LABEL}: {PREEMPTION_ALERT} (the monitoring component does).",
)
def preemption_alert(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchor: EKS Best Practices AI/ML (observability of accelerated nodes)."""
    servers = [workload_name(w) for w in of_type(resources, T.DEPLOYMENT, T.STATEFUL_SET) if is_model_server(w)]
    if servers and preemption_alerts(resources) == []:
        report(
            f"no PrometheusRule alert is labelled {ALERT_KIND_LABEL}={PREEMPTION_ALERT}; model servers "
            f"{', '.join(servers)} run unwatched",
            None,
        )


POLICIES: list[AnyPolicy] = [preemption_alert]
