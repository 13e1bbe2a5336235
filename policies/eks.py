"""EKS control plane and node groups (and GKE node pools, where the same rule applies to TPUs)."""

from __future__ import annotations

import re
from typing import Any

from inferplane.components.catalog import ACCELERATORS, INSTANCE_TYPES
from inferplane.components.catalog.eks import ADDON_VERSIONS
from inferplane.components.spec.scheduling import GPU_TAINT, POOL_LABEL
from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    as_dict,
    as_list,
    known,
    resource_policy,
    truthy,
)
from inferplane.policies.resource_types import T

OPEN_CIDRS = ("0.0.0.0/0", "::/0")
ACCELERATED_FAMILY = re.compile(r"^(p\d|g\d|inf\d|trn\d|dl\d)")
"""EC2 families with accelerators (GPU, Inferentia, Trainium): types outside the catalog are refused by name."""


@resource_policy(
    name="eks-cluster-disallow-public-endpoint",
    description=(
        "The EKS API server must be private, or public only to an explicit allowlist: a public endpoint exposes "
        "the Kubernetes API (and any leaked credential) to the whole internet."
    ),
    severity=Severity.CRITICAL,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.EKS_CLUSTER},
    config={
        "allowPublicEndpoint": {
            "type": "boolean",
            "default": False,
            "description": "Whether a public endpoint (restricted by publicAccessCidrs) is acceptable here.",
        }
    },
    remediation="Set cluster.endpoint_access: private, or list the allowed CIDRs in cluster.public_access_cidrs.",
)
def cluster_endpoint(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_AWS_38/39; compliance-policies aws-eks-cluster-disallow-api-endpoint-public-access."""
    public = truthy(resource.get("vpcConfig", "endpointPublicAccess"))
    if resource.get("vpcConfig", "endpointPublicAccess") is UNKNOWN:
        return
    if truthy(resource.get("vpcConfig", "endpointPrivateAccess")) is False:
        report("vpcConfig.endpointPrivateAccess is false: nodes would reach the API server over the internet")
    if public is False:
        return
    # AWS defaults endpointPublicAccess to true, so an unset value is a public endpoint.
    if not config["allowPublicEndpoint"]:
        report(
            "vpcConfig.endpointPublicAccess is true or unset (AWS defaults it to true); this environment allows "
            "only a private endpoint"
        )
        return
    cidrs = resource.get("vpcConfig", "publicAccessCidrs")
    if not known(cidrs):
        return
    if not cidrs:
        report("vpcConfig.publicAccessCidrs is empty: AWS then opens the public endpoint to 0.0.0.0/0")
        return
    open_ones = [c for c in as_list(cidrs) if c in OPEN_CIDRS]
    if open_ones:
        report(f"vpcConfig.publicAccessCidrs includes {', '.join(open_ones)}: the endpoint is open to everyone")


@resource_policy(
    name="eks-cluster-enable-secrets-encryption",
    description=(
        "Kubernetes Secrets (Hugging Face tokens, cache auth tokens) must be envelope-encrypted with a customer KMS "
        "key, so a copy of etcd alone does not reveal them."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.EKS_CLUSTER},
    remediation="Give the cluster encryption_config with resources=['secrets'] and a KMS key ARN.",
)
def cluster_secrets_encryption(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_AWS_58; compliance-policies aws-eks-cluster-enable-cluster-encryption-config."""
    encryption = resource.get("encryptionConfig")
    if encryption is UNKNOWN:
        return
    if not encryption:
        report("encryptionConfig is not set: Secrets are stored without a customer KMS key")
        return
    resources = resource.get("encryptionConfig", "resources")
    if known(resources) and "secrets" not in as_list(resources):
        report('encryptionConfig.resources does not include "secrets"')
    if resource.get("encryptionConfig", "provider", "keyArn") is None:
        report("encryptionConfig.provider.keyArn is not set")


@resource_policy(
    name="eks-cluster-enable-control-plane-logs",
    description=(
        "The control plane must send all its logs (API, audit, authenticator, controller manager, scheduler) to "
        "CloudWatch: without them nobody can tell who changed a workload, read a Secret or why a pod was placed."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.EKS_CLUSTER},
    config={
        "requiredLogTypes": {
            "type": "array",
            "items": {"type": "string", "enum": ["api", "audit", "authenticator", "controllerManager", "scheduler"]},
            "default": ["api", "audit", "authenticator", "controllerManager", "scheduler"],
            "description": "Control-plane log types that must be enabled (all five, EKS Best Practices).",
        }
    },
    remediation="List the log types in cluster.log_types.",
)
def cluster_logs(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_AWS_37; terraform-aws-eks default; EKS Best Practices (detective controls)."""
    enabled = resource.get("enabledClusterLogTypes")
    if not known(enabled):
        return
    missing = [t for t in config["requiredLogTypes"] if t not in as_list(enabled)]
    if missing:
        report(f"enabledClusterLogTypes lacks {', '.join(missing)}")


@resource_policy(
    name="eks-cluster-configure-supported-version",
    description=(
        "The Kubernetes version must be pinned to one the platform is tested on; an unpinned version upgrades under "
        "the GPU device plugin and KEDA without anyone choosing to."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.ADVISORY,
    types={T.EKS_CLUSTER},
    config={
        "allowedVersions": {
            "type": "array",
            "items": {"type": "string"},
            # The versions the EKS component pins add-ons for are the ones the platform is tested on.
            "default": sorted(ADDON_VERSIONS),
            "description": "Kubernetes minor versions the platform supports.",
        }
    },
    remediation="Set cluster.kubernetes_version to a supported minor version.",
)
def cluster_version(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: CKV_AWS_339."""
    version = resource.get("version")
    if version is UNKNOWN:
        return
    if version is None:
        report("version is not set: AWS would pick the default version")
    elif version not in config["allowedVersions"]:
        report(f"version {version} is not one of {', '.join(config['allowedVersions'])}")


# --- node pools -----------------------------------------------------------------------------------------------


def pool_instance_types(resource: Resource) -> list[Any]:
    """Instance types of an EKS node group or the machine type of a GKE node pool (may hold UNKNOWN)."""
    if resource.type == T.GKE_NODE_POOL:
        machine = resource.get("nodeConfig", "machineType")
        return [] if machine is None else [machine]
    return as_list(resource.get("instanceTypes"))


def is_accelerated(instance_type: str) -> bool:
    """Whether an instance type carries accelerators (catalog row, or an accelerated EC2 family)."""
    return instance_type in INSTANCE_TYPES or bool(ACCELERATED_FAMILY.match(instance_type))


@resource_policy(
    name="eks-nodegroup-configure-allowed-instance-types",
    description=(
        "Accelerator pools may only use catalog instance types whose accelerator this environment allows: sizing, "
        "prices and quotas are known only for those, and dev must not run H100s."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.EKS_NODE_GROUP, T.GKE_NODE_POOL},
    config={
        "allowedAccelerators": {
            "type": "array",
            "items": {"type": "string", "enum": sorted(ACCELERATORS)},
            "default": sorted(ACCELERATORS),
            "description": "Catalog accelerator ids pools may carry.",
        }
    },
    remediation="Pick a catalog instance type whose accelerator is in limits.allowed_accelerators.",
)
def pool_instance_types_allowed(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: pulumi examples aws-ts-finops requireInstanceType; testing-components 'policies as guardrails'."""
    allowed = config["allowedAccelerators"]
    for instance_type in pool_instance_types(resource):
        if not isinstance(instance_type, str):
            continue
        row = INSTANCE_TYPES.get(instance_type)
        if row is None:
            if ACCELERATED_FAMILY.match(instance_type):
                report(
                    f"{instance_type} is an accelerated instance type outside the catalog; sizing cannot vouch for it"
                )
            continue
        if row.accelerator not in allowed:
            report(f"{instance_type} carries {row.accelerator}, which is not allowed here ({', '.join(allowed)})")


@resource_policy(
    name="eks-nodegroup-disallow-spot-capacity",
    description=(
        "Serving pools of environments that promise availability must not run on spot capacity: the cloud reclaims "
        "spot nodes with two minutes' notice (GKE: 30 seconds), far less than a model's cold start."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.EKS_NODE_GROUP, T.GKE_NODE_POOL},
    config={"allowSpot": {"type": "boolean", "default": True, "description": "Whether spot pools are acceptable."}},
    remediation="Use capacity_type: on_demand (or capacity_block) for this environment's pools.",
)
def pool_spot(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: limits.allow_spot in the platform spec; EKS Best Practices (reliability)."""
    if config["allowSpot"]:
        return
    if resource.type == T.GKE_NODE_POOL:
        if truthy(resource.get("nodeConfig", "spot")) or truthy(resource.get("nodeConfig", "preemptible")):
            report("nodeConfig requests spot/preemptible nodes; this environment allows only on-demand capacity")
        return
    if resource.get("capacityType") == "SPOT":
        report("capacityType is SPOT; this environment allows only on-demand capacity")


@resource_policy(
    name="eks-nodegroup-require-gpu-taint",
    description=(
        "GPU node groups must carry the nvidia.com/gpu NoSchedule taint and their pool label: without the taint any "
        "pod lands on a node that costs dollars per hour, without the label model servers cannot select the pool."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.EKS_NODE_GROUP},
    remediation="Create GPU node groups through the platform's node-group component, which sets both.",
)
def nodegroup_gpu_taint(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: EKS Best Practices AI/ML (taints and tolerations); pulumi-eks managed node group example."""
    types = pool_instance_types(resource)
    if not any(isinstance(t, str) and is_accelerated(t) for t in types):
        return
    taints = resource.get("taints")
    if known(taints) and not any(
        as_dict(t).get("key") == GPU_TAINT.key and as_dict(t).get("effect") == GPU_TAINT.eks_effect
        for t in as_list(taints)
    ):
        report(
            f"taints lack {GPU_TAINT.key}:{GPU_TAINT.eks_effect}: pods that do not ask for a GPU would land on "
            "GPU nodes"
        )
    labels = resource.get("labels")
    if known(labels) and POOL_LABEL not in as_dict(labels):
        report(f"labels lack {POOL_LABEL}: model servers select their pool by it")


@resource_policy(
    name="eks-nodegroup-configure-scaling-bounds",
    description=(
        "Node group scaling must be ordered (0 <= min <= desired <= max, max >= 1): AWS rejects anything else only "
        "at deploy time, after the plan looked fine."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.EKS_NODE_GROUP},
    remediation="Derive the bounds from sizing's pool min/max nodes.",
)
def nodegroup_scaling(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: Gatekeeper horizontalpodautoscaler ranges (derived)."""
    scaling = resource.get("scalingConfig")
    if not known(scaling):
        return
    if not scaling:
        report("scalingConfig is not set")
        return
    low, desired, high = (as_dict(scaling).get(k) for k in ("minSize", "desiredSize", "maxSize"))
    if not all(isinstance(v, int) for v in (low, desired, high)):
        report("scalingConfig needs minSize, desiredSize and maxSize")
        return
    assert isinstance(low, int) and isinstance(desired, int) and isinstance(high, int)
    if not 0 <= low <= desired <= high or high < 1:
        report(
            f"scalingConfig needs 0 <= minSize <= desiredSize <= maxSize and maxSize >= 1 (got {low}, {desired}, "
            f"{high})"
        )


@resource_policy(
    name="eks-nodegroup-disallow-open-ssh",
    description=(
        "Node groups must not open SSH to the world: remoteAccess without sourceSecurityGroupIds lets EKS allow "
        "port 22 from 0.0.0.0/0 on nodes that hold model weights and tokens."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.EKS_NODE_GROUP},
    remediation="Drop remoteAccess (use SSM Session Manager) or restrict it with sourceSecurityGroupIds.",
)
def nodegroup_ssh(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: CKV_AWS_100."""
    remote = resource.get("remoteAccess")
    if not remote or remote is UNKNOWN:
        return
    groups = resource.get("remoteAccess", "sourceSecurityGroupIds")
    if known(groups) and not groups:
        report("remoteAccess is set without sourceSecurityGroupIds: SSH is open to 0.0.0.0/0")


POLICIES: list[AnyPolicy] = [
    cluster_endpoint,
    cluster_secrets_encryption,
    cluster_logs,
    cluster_version,
    pool_instance_types_allowed,
    pool_spot,
    nodegroup_gpu_taint,
    nodegroup_scaling,
    nodegroup_ssh,
]
