"""The offline plan engine behind ``inferplane preview``.

A stack's config, set as the ``pulumi`` CLI sets it, drives the real program under Pulumi's mock engine
(:mod:`infra.preview.engine`); what it registers becomes a :class:`~infra.preview.model.Plan` with sizing, cost and
policy verdicts (:mod:`infra.preview.policy`), written as canonical JSON, compared with an older plan
(:mod:`infra.preview.diff`, :mod:`infra.preview.replace_rules`) and rendered for a terminal
(:mod:`infra.preview.render`) or a pull request (:mod:`infra.preview.markdown`).
"""

from infra.preview.diff import PlanDiff, PropertyChange, ResourceChange, creation_diff, diff_plans
from infra.preview.engine import EvaluationConfig, PreviewResult, evaluation_config, run_preview
from infra.preview.model import Cost, Plan, PlanResource, PolicyInfo, Violation, load_plan
from infra.preview.policy import PolicyReport, PolicyRunner, no_policies, policy_runner_for

__all__ = [
    "Cost",
    "EvaluationConfig",
    "Plan",
    "PlanDiff",
    "PlanResource",
    "PolicyInfo",
    "PolicyReport",
    "PolicyRunner",
    "PreviewResult",
    "PropertyChange",
    "ResourceChange",
    "Violation",
    "creation_diff",
    "diff_plans",
    "evaluation_config",
    "load_plan",
    "no_policies",
    "policy_runner_for",
    "run_preview",
]
