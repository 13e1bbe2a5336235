"""IAM pieces the AWS components share: service trust policies and AWS managed policy ARNs."""

from __future__ import annotations

import json

import pulumi


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
