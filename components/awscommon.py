"""Small pieces the AWS components share: input-error reporting and IAM trust policies."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pulumi

InputErrors = list[tuple[str, str]]
"""(property path, reason) pairs collected by a component's checks."""


def raise_input_errors(message: str, errors: Sequence[tuple[str, str]]) -> None:
    """Raise every problem at once as ``pulumi.InputPropertiesError`` (nothing is half-applied), or do nothing.

    The exception's text lists each ``path: reason`` too, so the CLI shows them without the structured details.
    """
    if not errors:
        return
    details = "; ".join(f"{path}: {reason}" for path, reason in errors)
    raise pulumi.InputPropertiesError(
        f"{message} {details}",
        errors=[{"property_path": path, "reason": reason} for path, reason in errors],
    )


def service_trust_policy(service: str, *, tag_session: bool = False) -> str:
    """A role trust policy letting one AWS service principal assume the role.

    ``tag_session`` adds ``sts:TagSession``, which EKS Pod Identity (``pods.eks.amazonaws.com``) and the EKS
    cluster role require (docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html).
    """
    actions = ["sts:AssumeRole", "sts:TagSession"] if tag_session else ["sts:AssumeRole"]
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}],
        }
    )


def managed_policy_arn(partition: pulumi.Input[str], policy: str) -> pulumi.Output[str]:
    """The ARN of an AWS managed policy in the current partition."""
    return pulumi.Output.concat("arn:", partition, ":iam::aws:policy/", policy)
