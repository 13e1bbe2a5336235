"""Explicit, least-privilege KMS key policies for every customer-managed key of the platform.

A key created without a ``policy`` gets AWS's default key policy, which hands the account root ``kms:*``: every IAM
principal whose own policy says ``kms:*`` may then use, re-point or schedule the deletion of the key. AWS
Foundational Security Best Practices (KMS.1/KMS.2) and the EKS Best Practices Guide (data encryption) ask for key
policies that name who may do what. Every key here therefore declares two kinds of statement:

* ``KeyAdministration`` (:func:`administration_statement`): the account may *manage* the key (describe, tag, change
  the policy, schedule deletion) but not use it. The account stays named so the key can never become unmanageable
  (AWS KMS developer guide, "Default key policy": removing the account leaves only AWS Support able to recover it);
  which IAM principals of the account may manage it is then up to their IAM policies, as for any resource.
* usage statements naming exactly the principal that encrypts or decrypts with the key: a role
  (:func:`role_usage_statement`), CloudWatch Logs for one log group (:func:`logs_usage_statement`), or an AWS service
  acting for the account's principals (:func:`via_service_statement`, the pattern of AWS managed keys).

Action names are KMS's (docs.aws.amazon.com/kms/latest/developerguide/kms-api-permissions-reference.html).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

KEY_ADMIN_ACTIONS: tuple[str, ...] = (
    "kms:CancelKeyDeletion",
    "kms:Create*",
    "kms:Delete*",
    "kms:Describe*",
    "kms:Disable*",
    "kms:Enable*",
    "kms:Get*",
    "kms:List*",
    "kms:Put*",
    "kms:Revoke*",
    "kms:ScheduleKeyDeletion",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:Update*",
)
"""Key management without cryptographic use: the "key administrators" actions of AWS's default console policy.
``kms:Create*`` covers ``CreateAlias`` and ``CreateGrant``; no ``Encrypt``, ``Decrypt``, ``ReEncrypt*`` or
``GenerateDataKey*``."""

LOGS_USAGE_ACTIONS: tuple[str, ...] = (
    "kms:Encrypt*",
    "kms:Decrypt*",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:Describe*",
)
"""What CloudWatch Logs needs on a log group's key (CloudWatch Logs user guide, encrypt-log-data-kms.html)."""


def key_policy(statements: Sequence[dict[str, Any]]) -> str:
    """A key policy document of ``statements``."""
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def administration_statement(partition: str, account_id: str) -> dict[str, Any]:
    """The account manages the key (no cryptographic use)."""
    return {
        "Sid": "KeyAdministration",
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:{partition}:iam::{account_id}:root"},
        "Action": list(KEY_ADMIN_ACTIONS),
        "Resource": "*",
    }


def role_usage_statement(
    sid: str, role_arns: Sequence[str], actions: Sequence[str], *, via_service: str | None = None
) -> dict[str, Any]:
    """Named roles may perform ``actions`` with the key; with ``via_service`` (``s3.us-east-1.amazonaws.com``) only
    through that service (``kms:ViaService``)."""
    statement: dict[str, Any] = {
        "Sid": sid,
        "Effect": "Allow",
        "Principal": {"AWS": list(role_arns)},
        "Action": list(actions),
        "Resource": "*",
    }
    if via_service is not None:
        statement["Condition"] = {"StringEquals": {"kms:ViaService": via_service}}
    return statement


def logs_usage_statement(partition: str, region: str, account_id: str, log_group: str) -> dict[str, Any]:
    """CloudWatch Logs may use the key for the log group ``log_group`` only (its encryption context)."""
    return {
        "Sid": "CloudWatchLogs",
        "Effect": "Allow",
        "Principal": {"Service": f"logs.{region}.amazonaws.com"},
        "Action": list(LOGS_USAGE_ACTIONS),
        "Resource": "*",
        "Condition": {
            "ArnEquals": {
                "kms:EncryptionContext:aws:logs:arn": (
                    f"arn:{partition}:logs:{region}:{account_id}:log-group:{log_group}"
                )
            }
        },
    }


def via_service_statement(
    sid: str, *, partition: str, account_id: str, service: str, region: str, actions: Sequence[str]
) -> dict[str, Any]:
    """Principals of the account may use the key only through ``service`` in ``region`` (``kms:ViaService``)."""
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:{partition}:iam::{account_id}:root"},
        "Action": list(actions),
        "Resource": "*",
        "Condition": {
            "StringEquals": {"kms:CallerAccount": account_id, "kms:ViaService": f"{service}.{region}.amazonaws.com"}
        },
    }
