"""The offline plan engine behind ``inferplane preview``.

A stack's config, set as the ``pulumi`` CLI sets it, drives the real program under Pulumi's mock engine
(:mod:`.engine`); what it registers becomes a :class:`~.model.Plan` with sizing, cost and
policy verdicts (:mod:`inferplane.tool.preview.policy`), written as canonical JSON, compared with an older plan
(:mod:`inferplane.tool.preview.diff`, :mod:`inferplane.tool.preview.replace_rules`) and rendered for a terminal
(:mod:`inferplane.tool.preview.render`) or a pull request (:mod:`inferplane.tool.preview.markdown`).
"""

from inferplane.tool.preview.diff import PlanDiff, PropertyChange, ResourceChange, creation_diff, diff_plans
from inferplane.tool.preview.engine import EvaluationConfig, PreviewResult, evaluation_config, run_preview
from inferplane.tool.preview.model import Cost, Plan, PlanResource, PolicyInfo, Violation, load_plan
from inferplane.tool.preview.policy import PolicyReport, PolicyRunner, no_policies, policy_runner_for

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
