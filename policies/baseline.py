"""The public security baselines the plan must keep (issue 12, part B), as policies.

Anchors per policy: CIS Amazon EKS / GKE Benchmarks, the EKS Best Practices Guide (security), the Kubernetes Pod
Security Standards ("restricted") and AWS Foundational Security Best Practices (S3, KMS, CloudWatch, VPC). Each
policy reads only what the components declare, and an unknown value never counts as a violation.
"""

from __future__ import annotations

import json
import re
from typing import Any

from inferplane.components.serving.annotations import CACHE_EMBEDDER, COMPONENT_LABEL, ENGINE_BUILD, MODEL_SERVER
from inferplane.components.spec.scheduling import TPU_RESOURCE
from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    StackReport,
    as_dict,
    as_list,
    known,
    of_type,
    resource_policy,
    stack_policy,
    truthy,
)
from inferplane.policies.resource_types import WORKLOADS, T
from inferplane.policies.workloads import (
    accelerator_maps_known,
    accelerators_requested,
    container_label,
    containers,
    containers_known,
    object_labels,
)

_ACCOUNT_ROOT = re.compile(r"^(arn:aws[a-z-]*:iam::\d{12}:root|\d{12})$")


def _document(value: Any) -> dict[str, Any] | None:
    """A JSON policy document property, parsed; None when absent, unknown or not JSON."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    statements = document.get("Statement")
    if isinstance(statements, dict):
        return [statements]
    return [s for s in as_list(statements) if isinstance(s, dict)]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in as_list(value) if isinstance(v, str)]


@resource_policy(
    name="kms-key-require-explicit-policy",
    description=(
        "Every customer-managed KMS key declares its own least-privilege key policy: without one AWS applies the "
        "default policy, and any IAM principal whose own policy says kms:* may use or delete the key."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.KMS_KEY},
    remediation="Give the key a policy (components.aws.kms_policy): administration for the account, use for the one "
    "principal or service that needs it.",
)
def kms_explicit_policy(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: AWS FSBP KMS.1/KMS.2; CKV_AWS_33 (no kms:* for everyone); EKS Best Practices (encryption)."""
    policy = resource.get("policy")
    if policy is UNKNOWN:
        return
    if policy is None:
        report("policy is not set: the account's default key policy applies")
        return
    document = _document(policy)
    if document is None:
        if known(policy):
            report("policy is not a JSON policy document")
        return
    for index, statement in enumerate(_statements(document)):
        if statement.get("Effect") != "Allow":
            continue
        actions = _strings(statement.get("Action"))
        wildcard = [a for a in actions if a in ("*", "kms:*")]
        if wildcard:
            report(f"Statement[{index}] allows {wildcard[0]}")
        principal = statement.get("Principal")
        if (principal == "*" or as_dict(principal).get("AWS") == "*") and not statement.get("Condition"):
            report(f"Statement[{index}] allows every principal without a condition")


@resource_policy(
    name="cloudwatch-loggroup-require-encryption-and-retention",
    description=(
        "Log groups (control-plane audit logs, VPC flow logs) are encrypted with a customer-managed KMS key and kept "
        "at least the environment's minimum: an unencrypted or short-lived audit trail fails the investigation it "
        "exists for."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.CLOUDWATCH_LOG_GROUP},
    config={
        "minRetentionDays": {
            "type": "integer",
            "minimum": 1,
            "default": 365,
            "description": "Shortest retention allowed (days); 365 is AWS FSBP CloudWatch.16's.",
        }
    },
    remediation="Set kms_key_id and retention_in_days (cluster.log_retention_days in the spec).",
)
def log_group_baseline(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: AWS FSBP CloudWatch.16 (retention), CKV_AWS_158 (KMS), CKV_AWS_338 (one year)."""
    key = resource.get("kmsKeyId")
    if key is None:
        report("kmsKeyId is not set: the log group is encrypted with a CloudWatch-owned key only")
    retention = resource.get("retentionInDays")
    if retention is UNKNOWN:
        return
    if retention is None or retention == 0:
        report("retentionInDays is not set: the logs never expire, but nobody chose how long they are kept")
    elif isinstance(retention, int | float) and retention < config["minRetentionDays"]:
        report(f"retentionInDays {int(retention)} is below {config['minRetentionDays']}")


@resource_policy(
    name="iam-role-disallow-account-root-trust",
    description=(
        "No role trusts a whole AWS account (its :root principal): every principal of the account whose own "
        "policy allows sts:AssumeRole could then assume it. Trust named roles or users."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.IAM_ROLE},
    remediation="Name the principals (cluster.admin_principals); leave it empty to trust the deploying principal.",
)
def role_trust(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: EKS Best Practices (IAM: least privilege for cluster access); CIS AWS Foundations 1.16."""
    document = _document(resource.get("assumeRolePolicy"))
    if document is None:
        return
    for index, statement in enumerate(_statements(document)):
        if statement.get("Effect") != "Allow":
            continue
        principal = statement.get("Principal")
        trusted = _strings(principal) if isinstance(principal, str) else _strings(as_dict(principal).get("AWS"))
        for arn in trusted:
            if _ACCOUNT_ROOT.match(arn) or arn == "*":
                report(f"Statement[{index}] trusts {arn}")


@stack_policy(
    name="ec2-vpc-require-flow-logs",
    description="Every VPC records its traffic in a flow log: without it no connection can be traced after the fact.",
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    remediation="Network declares a flow log of ALL traffic; keep it.",
)
def vpc_flow_logs(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchors: AWS FSBP EC2.6; CIS AWS Foundations 3.7; CKV2_AWS_11."""
    logged = {urn for flow in of_type(resources, T.FLOW_LOG) for urn in flow.dependencies}
    for vpc in of_type(resources, T.VPC):
        if vpc.urn not in logged:
            report(f"VPC {vpc.name} has no flow log", vpc.urn)


@stack_policy(
    name="s3-bucket-require-access-logging",
    description=(
        "Every bucket logs its requests (server access logging), or is itself a log bucket receiving them: who read "
        "which model checkpoint must be answerable."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    remediation="Add an aws.s3.BucketLogging for the bucket (components.aws.model_cache does).",
)
def bucket_logging(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchors: AWS FSBP S3.9; CKV_AWS_18. A bucket counts as covered when a logging configuration names it, as
    its source or as the log bucket it delivers to (a log bucket does not log itself)."""
    covered = {urn for logging in of_type(resources, T.S3_BUCKET_LOGGING) for urn in logging.dependencies}
    for bucket in of_type(resources, T.S3_BUCKET, T.S3_BUCKET_V2):
        if bucket.urn not in covered:
            report(f"bucket {bucket.name} has no access logging", bucket.urn)


def _is_default_deny(policy: Resource) -> bool:
    spec = as_dict(policy.get("spec"))
    types = set(_strings(spec.get("policyTypes")))
    return (
        spec.get("podSelector") == {}
        and {"Ingress", "Egress"} <= types
        and not spec.get("ingress")
        and not spec.get("egress")
    )


@stack_policy(
    name="kubernetes-namespace-require-default-deny",
    description=(
        "Every namespace that runs model servers has a default-deny NetworkPolicy (every pod, ingress and egress), "
        "so only flows allowed on purpose reach the servers or leave them."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    remediation="components.serving.network_policy.ServingNetworkPolicy declares it with the allowances the "
    "servers need.",
)
def namespace_default_deny(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchors: CIS EKS 4.3.2; CIS GKE 5.6.7; EKS Best Practices (network security: default deny)."""
    denied: set[Any] = set()
    for policy in of_type(resources, T.NETWORK_POLICY):
        namespace = policy.get("metadata", "namespace")
        if namespace is UNKNOWN:
            return  # it may be the policy a namespace lacks
        if _is_default_deny(policy) or not known(policy.get("spec")):
            denied.add(namespace or "default")
    for server in of_type(resources, *WORKLOADS):
        if object_labels(server).get(COMPONENT_LABEL) not in (MODEL_SERVER, CACHE_EMBEDDER):
            continue
        namespace = server.get("metadata", "namespace")
        if namespace is UNKNOWN:
            continue
        if (namespace or "default") not in denied:
            report(f"namespace {namespace or 'default'} of {server.name} has no default-deny NetworkPolicy", server.urn)


@resource_policy(
    name="gke-cluster-require-baseline-hardening",
    description=(
        "GKE clusters enforce NetworkPolicy (Dataplane V2), enforce Binary Authorization, log intranode traffic "
        "and issue no client certificates."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.GKE_CLUSTER},
    remediation="components.gcp.gke_cluster sets all four; keep them.",
)
def gke_hardening(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CIS GKE 5.6.7 (network policy), 5.10.5 (Binary Authorization), 5.6.1 (intranode visibility),
    5.8.2 (client certificates off)."""
    datapath = resource.get("datapathProvider")
    if datapath is not UNKNOWN and datapath != "ADVANCED_DATAPATH":
        report(f"datapathProvider is {datapath or 'unset'}: NetworkPolicy is not enforced (use ADVANCED_DATAPATH)")
    mode = resource.get("binaryAuthorization", "evaluationMode")
    if mode is not UNKNOWN and mode != "PROJECT_SINGLETON_POLICY_ENFORCE":
        report(f"binaryAuthorization.evaluationMode is {mode or 'unset'}")
    intranode = resource.get("enableIntranodeVisibility")
    if intranode is not UNKNOWN and truthy(intranode) is not True:
        report("enableIntranodeVisibility is not true")
    issue = resource.get("masterAuth", "clientCertificateConfig", "issueClientCertificate")
    if issue is not UNKNOWN and truthy(issue) is not False:
        report("masterAuth.clientCertificateConfig.issueClientCertificate is not explicitly false")


@resource_policy(
    name="gcp-subnetwork-require-flow-logs",
    description="GKE subnets record their flows (VPC flow logs), as the EKS VPC does.",
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.GCP_SUBNETWORK},
    remediation="Set log_config on the subnetwork (components.gcp.gke_cluster.flow_log_config).",
)
def subnetwork_flow_logs(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CIS GKE 5.6.1 / CIS GCP 3.8 (VPC flow logs on every subnet)."""
    log_config = resource.get("logConfig")
    if log_config is UNKNOWN:
        return
    if not log_config:
        report("logConfig is not set: the subnet has no flow logs")


_HARDENED_COMPONENTS = [MODEL_SERVER, ENGINE_BUILD, CACHE_EMBEDDER]


@resource_policy(
    name="kubernetes-workload-require-restricted-container",
    description=(
        "Model-server, engine-build and cache-embedder containers run with a read-only root filesystem, every "
        "capability dropped, the RuntimeDefault seccomp profile and a high non-root uid. TPU pods are the documented "
        "exception to the uid (the TPU image runs as root)."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    config={
        "components": {
            "type": "array",
            "items": {"type": "string"},
            "default": _HARDENED_COMPONENTS,
            "description": f"Values of {COMPONENT_LABEL} whose pods are held to this (add gateway when it complies).",
        },
        "minUid": {"type": "integer", "minimum": 1, "default": 10000, "description": "Lowest uid allowed."},
    },
    remediation="Use components.serving.model_server.container_security/pod_security and mount emptyDirs where it "
    "writes.",
)
def restricted_container(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: Pod Security Standards "restricted"; CKV_K8S_22 (read-only root), CKV_K8S_28/37 (drop ALL),
    CKV_K8S_40 (uid >= 10000); EKS Best Practices (pod security)."""
    if object_labels(resource).get(COMPONENT_LABEL) not in config["components"]:
        return
    pod_context = resource.get("spec", "template", "spec", "securityContext")
    tpu = any(TPU_RESOURCE in accelerators_requested(c) for _, c in containers(resource))
    # Whether the pod is a TPU pod (exempt from the uid rules) is open while a container or its resources are unknown.
    tpu_known = containers_known(resource) and all(accelerator_maps_known(c) for _, c in containers(resource))
    for path, container in containers(resource):
        context = container.get("securityContext", {})
        if not isinstance(context, dict):
            continue  # unknown: judged once known
        label = container_label(path, container)
        read_only = context.get("readOnlyRootFilesystem")
        if read_only is not UNKNOWN and truthy(read_only) is not True:
            report(f"{label} does not set readOnlyRootFilesystem")
        capabilities = context.get("capabilities")
        if known(capabilities) and "ALL" not in _strings(as_dict(capabilities).get("drop")):
            report(f"{label} does not drop ALL capabilities")
        seccomp = _inherited(context, pod_context, "seccompProfile")
        if known(seccomp) and as_dict(seccomp).get("type") not in ("RuntimeDefault", "Localhost"):
            report(f"{label} has no RuntimeDefault seccomp profile")
        if tpu or not tpu_known:
            continue  # documented exception: the TPU image runs as root (README "Security baseline")
        non_root = _inherited(context, pod_context, "runAsNonRoot")
        if non_root is not UNKNOWN and truthy(non_root) is not True:
            report(f"{label} does not set runAsNonRoot")
        uid = _inherited(context, pod_context, "runAsUser")
        if isinstance(uid, int | float) and uid < config["minUid"]:
            report(f"{label} runs as uid {int(uid)}, below {config['minUid']}")
        elif uid is None:
            report(f"{label} sets no numeric runAsUser")


def _inherited(context: dict[str, Any], pod_context: Any, key: str) -> Any:
    """A container's security setting, else the pod's; UNKNOWN when the value that decides is unknown."""
    if key in context:
        return context[key]
    if pod_context is UNKNOWN:
        return UNKNOWN
    return as_dict(pod_context).get(key)


@resource_policy(
    name="kubernetes-workload-require-secret-files",
    description=(
        "Credentials that the software can read from a file (the Hugging Face token, via HF_TOKEN_PATH) are mounted "
        "as read-only files, never put in the environment, where /proc, crash reports and child processes see them."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    config={
        "fileOnlySecrets": {
            "type": "array",
            "items": {"type": "string"},
            "default": ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"],
            "description": "Environment variable names that must not be set at all (use the file instead).",
        }
    },
    remediation="Mount the Secret as a volume and point HF_TOKEN_PATH at the file (components.serving.model_server).",
)
def secret_files(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: Kubernetes "Good practices for Kubernetes Secrets" (prefer volumes over env); CIS EKS 4.4.1."""
    forbidden = set(config["fileOnlySecrets"])
    for path, container in containers(resource):
        for env in as_list(container.get("env")):
            name = as_dict(env).get("name")
            if name in forbidden:
                report(f"{container_label(path, container)} puts {name} in its environment")


POLICIES: list[AnyPolicy] = [
    kms_explicit_policy,
    log_group_baseline,
    role_trust,
    vpc_flow_logs,
    bucket_logging,
    namespace_default_deny,
    gke_hardening,
    subnetwork_flow_logs,
    restricted_container,
    secret_files,
]
