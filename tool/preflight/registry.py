"""The one registry of what preflight asks AWS: check -> API calls -> IAM actions.

Every AWS call preflight makes goes through :class:`~.aws.AwsCaller`, which refuses a call that its
check did not declare here. The IAM policy (:func:`iam_policy`) and the "permission missing" messages are both
derived from this table, so the policy can never drift from the calls.

IAM action names: the Service Authorization Reference spells them ``<prefix>:<Operation>``; the prefix equals the
botocore service name except for Service Quotas (``servicequotas``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore import xform_name

# botocore service name -> IAM service prefix, where they differ.
_IAM_PREFIX = {"service-quotas": "servicequotas"}


@dataclass(frozen=True)
class ApiCall:
    """One AWS API operation preflight calls, and the IAM permission it needs."""

    service: str
    """botocore service name (``boto3.client(service)``)."""
    operation: str
    """API operation name as the service model spells it (``DescribeInstanceTypes``)."""
    resources: tuple[str, ...] = ("*",)
    """IAM resources the permission is granted on; ``{partition}`` is filled in by :func:`iam_policy`."""
    needs_permission: bool = True
    """False for calls IAM never denies (``sts:GetCallerIdentity``)."""

    @property
    def iam_action(self) -> str:
        """The IAM action, e.g. ``servicequotas:GetServiceQuota``."""
        return f"{_IAM_PREFIX.get(self.service, self.service)}:{self.operation}"

    @property
    def method(self) -> str:
        """The boto3 client method, e.g. ``get_service_quota``."""
        return str(xform_name(self.operation))


# "No permissions are required to perform this operation" (STS API reference, GetCallerIdentity).
GET_CALLER_IDENTITY = ApiCall("sts", "GetCallerIdentity", needs_permission=False)
DESCRIBE_INSTANCE_TYPE_OFFERINGS = ApiCall("ec2", "DescribeInstanceTypeOfferings")
DESCRIBE_INSTANCE_TYPES = ApiCall("ec2", "DescribeInstanceTypes")
GET_SERVICE_QUOTA = ApiCall("service-quotas", "GetServiceQuota")
GET_AWS_DEFAULT_SERVICE_QUOTA = ApiCall("service-quotas", "GetAWSDefaultServiceQuota")
DESCRIBE_CAPACITY_RESERVATIONS = ApiCall("ec2", "DescribeCapacityReservations")
# Public parameters have no account in their ARN (the form Karpenter's controller policy grants:
# arn:<partition>:ssm:<region>::parameter/aws/service/*); only the two accelerated-AMI trees are granted.
GET_AMI_PARAMETER = ApiCall(
    "ssm",
    "GetParameter",
    resources=(
        "arn:{partition}:ssm:*::parameter/aws/service/eks/optimized-ami/*",
        "arn:{partition}:ssm:*::parameter/aws/service/bottlerocket/*",
    ),
)
DESCRIBE_CLUSTER_VERSIONS = ApiCall("eks", "DescribeClusterVersions")


@dataclass(frozen=True)
class CheckSpec:
    """One preflight check: its id (as reports show it), what it verifies, and the calls it may make."""

    id: str
    title: str
    calls: tuple[ApiCall, ...]

    @property
    def sid(self) -> str:
        """IAM statement id: ``instance-zones`` -> ``PreflightInstanceZones``."""
        return "Preflight" + "".join(part.capitalize() for part in self.id.split("-"))


IDENTITY = CheckSpec("caller-identity", "Which account and principal the checks run as", (GET_CALLER_IDENTITY,))
ZONES = CheckSpec(
    "instance-zones", "Each pool's instance type is offered in every zone it uses", (DESCRIBE_INSTANCE_TYPE_OFFERINGS,)
)
ACCELERATOR_FACTS = CheckSpec(
    "accelerator-facts", "The catalog's GPU count, GPU memory and vCPUs match EC2", (DESCRIBE_INSTANCE_TYPES,)
)
VCPU_QUOTA = CheckSpec(
    "vcpu-quota",
    "The family's vCPU quota covers every pool at max scale",
    (GET_SERVICE_QUOTA, GET_AWS_DEFAULT_SERVICE_QUOTA),
)
CAPACITY_BLOCK = CheckSpec(
    "capacity-block",
    "A capacity-block pool's reservation exists, is usable, is in its zone and outlasts the horizon",
    (DESCRIBE_CAPACITY_RESERVATIONS,),
)
ACCELERATED_AMI = CheckSpec(
    "accelerated-ami", "The EKS-optimized accelerated AMI exists for the cluster version", (GET_AMI_PARAMETER,)
)
CLUSTER_VERSION = CheckSpec(
    "cluster-version", "The cluster's Kubernetes version is in EKS standard support", (DESCRIBE_CLUSTER_VERSIONS,)
)

CHECKS: tuple[CheckSpec, ...] = (ZONES, ACCELERATOR_FACTS, VCPU_QUOTA, CAPACITY_BLOCK, ACCELERATED_AMI, CLUSTER_VERSION)
"""The checks, in report order."""

ALL_SPECS: tuple[CheckSpec, ...] = (IDENTITY, *CHECKS)


def partition_for(region: str) -> str:
    """The ARN partition of a region (``aws``, ``aws-us-gov`` or ``aws-cn``)."""
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws"


def iam_policy(partition: str = "aws") -> dict[str, Any]:
    """A read-only identity policy granting exactly what the checks call: one statement per check and resource set."""
    statements: list[dict[str, Any]] = []
    for spec in ALL_SPECS:
        groups: dict[tuple[str, ...], list[str]] = {}
        for call in spec.calls:
            if call.needs_permission:
                groups.setdefault(call.resources, []).append(call.iam_action)
        for index, (resources, actions) in enumerate(groups.items()):
            filled = [r.format(partition=partition) for r in resources]
            statements.append(
                {
                    "Sid": spec.sid if index == 0 else f"{spec.sid}{index + 1}",
                    "Effect": "Allow",
                    "Action": sorted(set(actions)),
                    "Resource": filled[0] if len(filled) == 1 else filled,
                }
            )
    return {"Version": "2012-10-17", "Statement": statements}
