"""``inferplane preflight``: check the AWS account before ``pulumi up`` (quota, zones, capacity blocks, AMIs).

* :mod:`inferplane.tool.preflight.registry`: check -> API calls -> IAM actions, and the IAM policy derived from it;
* :mod:`inferplane.tool.preflight.aws`: the one door to AWS, turning botocore failures into one-line messages;
* :mod:`inferplane.tool.preflight.checks`: the checks and :func:`run_preflight`;
* :mod:`inferplane.tool.preflight.report`: the table and the JSON.
"""

from inferplane.tool.preflight.aws import AwsCaller, PreflightError, boto3_client_for
from inferplane.tool.preflight.checks import Finding, Report, SkippedPool, run_preflight
from inferplane.tool.preflight.registry import CHECKS, iam_policy, partition_for
from inferplane.tool.preflight.report import render_report, report_json

__all__ = [
    "CHECKS",
    "AwsCaller",
    "Finding",
    "PreflightError",
    "Report",
    "SkippedPool",
    "boto3_client_for",
    "iam_policy",
    "partition_for",
    "render_report",
    "report_json",
    "run_preflight",
]
