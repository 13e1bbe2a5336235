"""``EksCluster``: a hardened EKS control plane, its managed add-ons, a system node group and one Kubernetes provider.

Secure defaults, each one a choice terraform-aws-eks also makes by default (see ../shared style anchors, A7):

* secrets are envelope-encrypted with a customer-managed KMS key that rotates yearly; its key policy names the
  cluster role as the only user (:mod:`components.aws.kms_policy`), not the account default;
* all five control-plane logs (api, audit, authenticator, controllerManager, scheduler) go to CloudWatch, into a log
  group created here so its retention is set rather than "never expire", encrypted with its own KMS key that only
  CloudWatch Logs may use, and only for this log group (CIS EKS 2.1.1, AWS FSBP CloudWatch);
* the API endpoint is private in prod; elsewhere a public endpoint needs an explicit CIDR allowlist and never
  ``0.0.0.0/0``;
* access is managed with the EKS access-entry API (``authenticationMode: API``), not the ``aws-auth`` ConfigMap;
  the cluster creator gets no implicit admin rights: an admin role gets ``AmazonEKSClusterAdminPolicy`` through an
  access entry, and the Kubernetes provider authenticates as that role. The role trusts named principals only:
  ``admin_principal_arns`` from the stack, or, when the stack names none, the one principal deploying the stack
  (its IAM role or user, resolved by ``sts:GetCallerIdentity`` and ``iam.getSessionContext``), never the whole
  account (``:root``);
* add-ons are EKS managed add-ons with pinned versions (:data:`ADDON_VERSIONS`), so an upgrade is a reviewed diff.

Every Kubernetes resource of the platform goes through :attr:`EksCluster.k8s_provider`, built from this cluster's
endpoint and CA with ``aws eks get-token`` exec authentication; no kubeconfig file is read from the deployer's disk.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from inferplane.components.aws import kms_policy
from inferplane.components.aws.iam import managed_policy_arn, service_trust_policy
from inferplane.components.capacity.system_nodes import EKS_SYSTEM_SCALE_OUT
from inferplane.components.catalog.eks import ADDON_VERSIONS, AddonName
from inferplane.components.catalog.system_nodes import DEFAULT_EKS_SYSTEM_INSTANCE_TYPE
from inferplane.components.spec.input_errors import raise_input_errors
from inferplane.components.spec.platform_spec import (
    ALL_CONTROL_PLANE_LOGS,
    LOG_RETENTION_VALUES,
    MAX_SYSTEM_NODES,
    ControlPlaneLog,
    EndpointAccess,
    Environment,
)

ADDON_CONFIGURATION: dict[AddonName, dict[str, str]] = {"vpc-cni": {"enableNetworkPolicy": "true"}}
"""Add-on configuration values. vpc-cni's network policy agent enforces Kubernetes NetworkPolicy objects; without it
they are accepted and ignored (EKS user guide, cni-network-policy-configure.html: ``{"enableNetworkPolicy":
"true"}``, a string)."""

REQUIRED_LOG_TYPES: tuple[ControlPlaneLog, ...] = ALL_CONTROL_PLANE_LOGS
"""Control-plane logs every cluster ships: who called the API (audit), how they authenticated, the API log, and the
controller manager's and scheduler's decisions (EKS Best Practices, detective controls: enable all of them)."""

SECRETS_KEY_ACTIONS: tuple[str, ...] = ("kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey")
"""What the cluster role needs on the secrets key: envelope encryption and grant inspection."""

CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
"""EKS access policy granting cluster-admin; the ARN is ``arn:<partition>:eks::aws:cluster-access-policy/<name>``."""

SYSTEM_ROLE_LABEL = "inferplane.io/role"
"""Label on the system node group's nodes (value ``system``); controllers select it."""

SYSTEM_ROLE = "system"

EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
"""The service account the aws-ebs-csi-driver add-on's controller runs as (AWS docs, ebs-csi.html)."""


@dataclass(frozen=True)
class EksClusterArgs:
    """Inputs of :class:`EksCluster`."""

    cluster_name: str
    """The EKS cluster's name; also used in cluster-autoscaler discovery tags, so it must be known at preview."""
    environment: Environment
    """dev, staging or prod: prod refuses a public endpoint."""
    region: str
    """AWS region, for the kubeconfig's ``aws eks get-token --region``."""
    subnet_ids: Sequence[pulumi.Input[str]]
    """Private subnets (at least two zones) for the control-plane ENIs and the system node group."""
    kubernetes_version: str = "1.35"
    """Kubernetes minor; must have a row in :data:`ADDON_VERSIONS`."""
    endpoint_access: EndpointAccess = "private"
    """``private``, or ``public_and_private`` with ``public_access_cidrs``."""
    public_access_cidrs: Sequence[str] = ()
    """Who may reach a public endpoint; required with ``public_and_private``, never ``0.0.0.0/0``."""
    admin_principal_arns: Sequence[str] = ()
    """IAM principals (role or user ARNs) that may assume the cluster-admin role. Empty trusts the principal that
    deploys the stack (its IAM role or user), never the whole account."""
    log_types: Sequence[ControlPlaneLog] = REQUIRED_LOG_TYPES
    """Control-plane log types; must include all of :data:`REQUIRED_LOG_TYPES`."""
    log_retention_days: int = 365
    """Retention of ``/aws/eks/<cluster>/cluster``; one of :data:`LOG_RETENTION_VALUES`."""
    system_instance_type: str = DEFAULT_EKS_SYSTEM_INSTANCE_TYPE
    """Instance type of the system node group (controllers, gateway, monitoring)."""
    system_nodes: int = 2
    """Nodes the system group keeps (its maximum is :data:`~components.capacity.system_nodes.EKS_SYSTEM_SCALE_OUT`
    times that, which sizing checks the gateway's ceiling against)."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Added to every taggable child."""


def _check(args: EksClusterArgs) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    if args.kubernetes_version not in ADDON_VERSIONS:
        known = ", ".join(sorted(ADDON_VERSIONS))
        errors.append(("kubernetes_version", f"{args.kubernetes_version} has no pinned add-on versions ({known})"))
    if args.environment == "prod" and args.endpoint_access != "private":
        errors.append(("endpoint_access", "prod clusters keep the API endpoint private"))
    if args.endpoint_access == "public_and_private" and not args.public_access_cidrs:
        errors.append(("public_access_cidrs", "a public endpoint needs an explicit CIDR allowlist"))
    if args.endpoint_access == "private" and args.public_access_cidrs:
        errors.append(("public_access_cidrs", "set only with endpoint_access public_and_private"))
    for index, cidr in enumerate(args.public_access_cidrs):
        try:
            network = ipaddress.ip_network(cidr, strict=True)
        except ValueError as exc:
            errors.append((f"public_access_cidrs[{index}]", f"{cidr!r} is not a CIDR block: {exc}"))
            continue
        if network.prefixlen == 0:
            errors.append((f"public_access_cidrs[{index}]", f"{cidr} opens the API endpoint to the whole internet"))
    for index, arn in enumerate(args.admin_principal_arns):
        if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/.+", arn):
            errors.append((f"admin_principal_arns[{index}]", f"{arn!r} is not an IAM role or user ARN"))
    missing = [log for log in REQUIRED_LOG_TYPES if log not in args.log_types]
    if missing:
        errors.append(("log_types", f"control-plane logs must include {', '.join(missing)}"))
    if len(args.subnet_ids) < 2:
        errors.append(("subnet_ids", f"EKS needs subnets in at least 2 zones, got {len(args.subnet_ids)}"))
    if not 1 <= args.system_nodes <= MAX_SYSTEM_NODES:
        errors.append(("system_nodes", f"between 1 and {MAX_SYSTEM_NODES}, got {args.system_nodes}"))
    if args.log_retention_days not in LOG_RETENTION_VALUES:
        allowed = ", ".join(str(days) for days in sorted(LOG_RETENTION_VALUES))
        errors.append(("log_retention_days", f"{args.log_retention_days} is not a CloudWatch retention ({allowed})"))
    return errors


def secrets_key_policy(key_arn: str) -> str:
    """The cluster role's IAM policy on the secrets key: :data:`SECRETS_KEY_ACTIONS`."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": list(SECRETS_KEY_ACTIONS), "Resource": key_arn}],
        }
    )


def secrets_key_key_policy(partition: str, account_id: str, cluster_role_arn: str) -> str:
    """The secrets key's own policy: the account administers it, only the cluster role uses it."""
    return kms_policy.key_policy(
        [
            kms_policy.administration_statement(partition, account_id),
            kms_policy.role_usage_statement("ClusterRoleEnvelopeEncryption", [cluster_role_arn], SECRETS_KEY_ACTIONS),
        ]
    )


def logs_key_policy(partition: str, region: str, account_id: str, log_group: str) -> str:
    """The log group's key policy: the account administers it, CloudWatch Logs uses it for ``log_group`` only."""
    return kms_policy.key_policy(
        [
            kms_policy.administration_statement(partition, account_id),
            kms_policy.logs_usage_statement(partition, region, account_id, log_group),
        ]
    )


def admin_trust_policy(principals: Sequence[str]) -> str:
    """Who may assume the admin role: exactly ``principals`` (role or user ARNs), never an account root."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"AWS": list(principals)}, "Action": "sts:AssumeRole"}],
        }
    )


def kubeconfig(
    cluster_name: str, region: str, endpoint: pulumi.Input[str], ca_data: pulumi.Input[str], role_arn: pulumi.Input[str]
) -> pulumi.Output[str]:
    """A kubeconfig for one EKS cluster authenticating with ``aws eks get-token`` as ``role_arn``."""

    def render(values: list[str]) -> str:
        server, ca, role = values
        user = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": "aws",
                "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region, "--role-arn", role],
                "interactiveMode": "Never",
            }
        }
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": cluster_name, "cluster": {"server": server, "certificate-authority-data": ca}}],
                "users": [{"name": cluster_name, "user": user}],
                "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
                "current-context": cluster_name,
            }
        )

    return pulumi.Output.all(endpoint, ca_data, role_arn).apply(render)


class EksCluster(pulumi.ComponentResource):
    """An EKS cluster with encrypted secrets, audit logs, access entries, pinned add-ons and a system node group.

    Children (``name`` = this component's name): ``{name}-cluster-role`` (+ ``-cluster-policy``,
    ``-cluster-encryption``),
    ``{name}-secrets-key`` (+ ``-alias``), ``{name}-logs``, ``{name}-cluster``, ``{name}-admin-role`` with its
    access entry ``{name}-admin-entry`` and ``{name}-admin-policy``, ``{name}-node-role`` (shared by every node
    group of the cluster, + ``{name}-node-<policy>``), the add-ons ``{name}-<addon>``, ``{name}-ebs-csi-role``
    (Pod Identity, + ``-ebs-csi-policy``), the system node group ``{name}-system`` with its launch template
    ``{name}-system-lt``, and ``{name}-k8s``, the Kubernetes provider.

    Attributes for dependants: :attr:`cluster_name` (plain), :attr:`kubernetes_version`, :attr:`cluster`,
    :attr:`node_role`, :attr:`k8s_provider`, :attr:`cluster_security_group_id`, :attr:`kubeconfig` (secret).
    """

    cluster_name: str
    kubernetes_version: str
    cluster: aws.eks.Cluster
    node_role: aws.iam.Role
    admin_role: aws.iam.Role
    cluster_security_group_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    k8s_provider: k8s.Provider
    addons: dict[AddonName, aws.eks.Addon]
    system_node_group: aws.eks.NodeGroup
    tags: dict[str, str]

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:EksCluster", name, None, opts)
        raise_input_errors("The input properties for the EKS cluster are invalid.", _check(args))

        self.cluster_name = args.cluster_name
        self.kubernetes_version = args.kubernetes_version
        self.tags = dict(args.tags)
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        caller = aws.get_caller_identity_output(opts=invoke)
        account = caller.account_id

        # The control plane, as pulumi-eks builds it: its role, the secrets key, the log group, then the cluster.
        cluster_role, cluster_policy = self._cluster_role(name, partition)
        secrets_key, key_policy = self._secrets_key(name, args, partition, account, cluster_role)
        log_group = self._control_plane_logs(name, args, partition, account)
        self.cluster = self._control_plane(
            name, args, cluster_role, secrets_key, [cluster_policy, key_policy, log_group]
        )
        self.cluster_security_group_id = self.cluster.vpc_config.cluster_security_group_id

        self.admin_role, admin_policy = self._admin_access(name, args, partition, caller)
        self.node_role, node_policies = self._node_role(name, partition)
        versions = ADDON_VERSIONS[args.kubernetes_version]
        self.addons = self._networking_addons(name, versions)
        self.system_node_group = self._system_nodes(name, args, self.tags, node_policies)
        self._workload_addons(name, versions, partition)

        self.kubeconfig, self.k8s_provider = self._kubernetes_provider(name, args, admin_policy)
        self.register_outputs(
            {
                "clusterName": self.cluster.name,
                "endpoint": self.cluster.endpoint,
                "kubeconfig": self.kubeconfig,
                "nodeRoleArn": self.node_role.arn,
                "adminRoleArn": self.admin_role.arn,
            }
        )

    def _cluster_role(
        self, name: str, partition: pulumi.Output[str]
    ) -> tuple[aws.iam.Role, aws.iam.RolePolicyAttachment]:
        """The role the control plane acts as, with ``AmazonEKSClusterPolicy`` attached."""
        role = aws.iam.Role(
            f"{name}-cluster-role",
            assume_role_policy=service_trust_policy("eks.amazonaws.com", tag_session=True),
            tags=self.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        attachment = aws.iam.RolePolicyAttachment(
            f"{name}-cluster-policy",
            role=role.name,
            policy_arn=managed_policy_arn(partition, "AmazonEKSClusterPolicy"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return role, attachment

    def _secrets_key(
        self,
        name: str,
        args: EksClusterArgs,
        partition: pulumi.Output[str],
        account: pulumi.Output[str],
        cluster_role: aws.iam.Role,
    ) -> tuple[aws.kms.Key, aws.iam.RolePolicy]:
        """The KMS key that envelope-encrypts Kubernetes secrets, its alias, and the cluster role's grant on it."""
        child = pulumi.ResourceOptions(parent=self)
        key = aws.kms.Key(
            f"{name}-secrets-key",
            description=f"Envelope encryption of Kubernetes secrets in EKS cluster {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            policy=pulumi.Output.all(partition, account, cluster_role.arn).apply(
                lambda values: secrets_key_key_policy(values[0], values[1], values[2])
            ),
            tags=self.tags,
            # Deleting this key makes every secret in the cluster unreadable: prod protects it from `pulumi destroy`.
            opts=pulumi.ResourceOptions(parent=self, protect=args.environment == "prod"),
        )
        aws.kms.Alias(
            f"{name}-secrets-key-alias",
            name=f"alias/eks/{args.cluster_name}-secrets",
            target_key_id=key.key_id,
            opts=child,
        )
        # The control plane uses the key through the cluster role (what terraform-aws-eks grants by default).
        key_policy = aws.iam.RolePolicy(
            f"{name}-cluster-encryption",
            role=cluster_role.name,
            policy=key.arn.apply(secrets_key_policy),
            opts=child,
        )
        return key, key_policy

    def _control_plane_logs(
        self, name: str, args: EksClusterArgs, partition: pulumi.Output[str], account: pulumi.Output[str]
    ) -> aws.cloudwatch.LogGroup:
        """The control-plane log group with its own KMS key, created before EKS would create it unencrypted."""
        # EKS writes to exactly this group; creating it first sets retention, encryption and tags instead of
        # "never expire" in plain text.
        log_group_name = f"/aws/eks/{args.cluster_name}/cluster"
        logs_key = aws.kms.Key(
            f"{name}-logs-key",
            description=f"Encryption of the control-plane logs of EKS cluster {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            policy=pulumi.Output.all(partition, account).apply(
                lambda values: logs_key_policy(values[0], args.region, values[1], log_group_name)
            ),
            tags=self.tags,
            # Deleting it makes the audit trail unreadable: prod protects it like the secrets key.
            opts=pulumi.ResourceOptions(parent=self, protect=args.environment == "prod"),
        )
        return aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=log_group_name,
            retention_in_days=args.log_retention_days,
            kms_key_id=logs_key.arn,
            tags=self.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _control_plane(
        self,
        name: str,
        args: EksClusterArgs,
        cluster_role: aws.iam.Role,
        secrets_key: aws.kms.Key,
        depends_on: Sequence[pulumi.Resource],
    ) -> aws.eks.Cluster:
        """The EKS cluster itself: endpoint access, secrets encryption, logs, access entries, upgrade policy."""
        public = args.endpoint_access == "public_and_private"
        return aws.eks.Cluster(
            f"{name}-cluster",
            name=args.cluster_name,
            version=args.kubernetes_version,
            role_arn=cluster_role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=list(args.subnet_ids),
                endpoint_private_access=True,
                endpoint_public_access=public,
                public_access_cidrs=list(args.public_access_cidrs) if public else None,
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=secrets_key.arn), resources=["secrets"]
            ),
            enabled_cluster_log_types=list(args.log_types),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API", bootstrap_cluster_creator_admin_permissions=False
            ),
            # The managed add-ons replace the self-managed ones EKS would otherwise install unpinned.
            bootstrap_self_managed_addons=False,
            # STANDARD: at the end of standard support EKS upgrades the control plane instead of moving it to
            # extended support, billed at six times the hourly rate ($0.60 vs $0.10, EKS pricing page).
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type="STANDARD"),
            tags=self.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
        )

    def _admin_access(
        self,
        name: str,
        args: EksClusterArgs,
        partition: pulumi.Output[str],
        caller: pulumi.Output[aws.GetCallerIdentityResult],
    ) -> tuple[aws.iam.Role, aws.eks.AccessPolicyAssociation]:
        """The cluster-admin role, its access entry and its ``AmazonEKSClusterAdminPolicy`` association."""
        admins: pulumi.Output[list[str]]
        if args.admin_principal_arns:
            admins = pulumi.Output.from_input(list(args.admin_principal_arns))
        else:
            # The deployer's own role (not its session) or user: what an assumed-role ARN was issued by.
            invoke = pulumi.InvokeOutputOptions(parent=self)
            deployer = aws.iam.get_session_context_output(arn=caller.arn, opts=invoke).issuer_arn
            admins = deployer.apply(lambda arn: [arn])
        role = aws.iam.Role(
            f"{name}-admin-role",
            description=f"Cluster administrators of {args.cluster_name}",
            assume_role_policy=admins.apply(admin_trust_policy),
            tags=self.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        entry = aws.eks.AccessEntry(
            f"{name}-admin-entry",
            cluster_name=self.cluster.name,
            principal_arn=role.arn,
            type="STANDARD",
            tags=self.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        association = aws.eks.AccessPolicyAssociation(
            f"{name}-admin-policy",
            cluster_name=self.cluster.name,
            principal_arn=role.arn,
            policy_arn=pulumi.Output.concat(
                "arn:", partition, ":eks::aws:cluster-access-policy/", CLUSTER_ADMIN_POLICY
            ),
            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]),
        )
        return role, association

    def _node_role(
        self, name: str, partition: pulumi.Output[str]
    ) -> tuple[aws.iam.Role, list[aws.iam.RolePolicyAttachment]]:
        """The role every node group of the cluster shares, with the worker, registry and CNI policies."""
        # Managed node groups create their own EC2_LINUX access entry for this role (API authentication mode).
        role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=service_trust_policy("ec2.amazonaws.com"),
            tags=self.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        policies = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=role.name,
                policy_arn=managed_policy_arn(partition, policy),
                opts=pulumi.ResourceOptions(parent=self),
            )
            # The CNI policy stays on the node role (as terraform-aws-eks does by default): vpc-cni must work
            # before any pod, the Pod Identity agent included, can run.
            for policy in ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly", "AmazonEKS_CNI_Policy")
        ]
        return role, policies

    def _networking_addons(self, name: str, versions: Mapping[AddonName, str]) -> dict[AddonName, aws.eks.Addon]:
        """The add-ons that come first: nodes cannot become Ready without the CNI, nor pods get credentials without
        the Pod Identity agent."""
        child = pulumi.ResourceOptions(parent=self)
        return {
            addon: self._addon(
                name, addon, versions[addon], self.tags, child, configuration=ADDON_CONFIGURATION.get(addon)
            )
            for addon in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
        }

    def _workload_addons(self, name: str, versions: Mapping[AddonName, str], partition: pulumi.Output[str]) -> None:
        """The add-ons that run as Deployments (CoreDNS, the EBS CSI driver with its Pod Identity role).

        They need schedulable nodes to become ACTIVE, so they wait for the system node group.
        """
        ebs_role = aws.iam.Role(
            f"{name}-ebs-csi-role",
            assume_role_policy=service_trust_policy("pods.eks.amazonaws.com", tag_session=True),
            tags=self.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        aws.iam.RolePolicyAttachment(
            f"{name}-ebs-csi-policy",
            role=ebs_role.name,
            policy_arn=managed_policy_arn(partition, "service-role/AmazonEBSCSIDriverPolicy"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        after_nodes = pulumi.ResourceOptions(parent=self, depends_on=[self.system_node_group])
        self.addons["coredns"] = self._addon(name, "coredns", versions["coredns"], self.tags, after_nodes)
        self.addons["aws-ebs-csi-driver"] = self._addon(
            name,
            "aws-ebs-csi-driver",
            versions["aws-ebs-csi-driver"],
            self.tags,
            pulumi.ResourceOptions(
                parent=self, depends_on=[self.system_node_group, self.addons["eks-pod-identity-agent"]]
            ),
            pod_identity=[
                aws.eks.AddonPodIdentityAssociationArgs(role_arn=ebs_role.arn, service_account=EBS_CSI_SERVICE_ACCOUNT)
            ],
        )

    def _kubernetes_provider(
        self, name: str, args: EksClusterArgs, admin_policy: aws.eks.AccessPolicyAssociation
    ) -> tuple[pulumi.Output[str], k8s.Provider]:
        """The admin kubeconfig (secret) and the one Kubernetes provider built from it, usable once the admin role
        holds its access policy."""
        config: pulumi.Output[str] = pulumi.Output.secret(
            kubeconfig(
                args.cluster_name,
                args.region,
                self.cluster.endpoint,
                self.cluster.certificate_authority.data,
                self.admin_role.arn,
            )
        )
        provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=config,
            # Nothing may fall back to the deployer's current kubectl context.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[admin_policy]),
        )
        return config, provider

    def _addon(
        self,
        name: str,
        addon: AddonName,
        version: str,
        tags: Mapping[str, str],
        opts: pulumi.ResourceOptions,
        *,
        pod_identity: Sequence[aws.eks.AddonPodIdentityAssociationArgs] | None = None,
        configuration: Mapping[str, str] | None = None,
    ) -> aws.eks.Addon:
        """One EKS managed add-on at a pinned version; EKS's values overwrite any drift on create and update."""
        return aws.eks.Addon(
            f"{name}-{addon}",
            cluster_name=self.cluster.name,
            addon_name=addon,
            addon_version=version,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            pod_identity_associations=list(pod_identity) if pod_identity else None,
            configuration_values=json.dumps(dict(configuration), sort_keys=True) if configuration else None,
            tags=dict(tags),
            opts=opts,
        )

    def _system_nodes(
        self,
        name: str,
        args: EksClusterArgs,
        tags: Mapping[str, str],
        node_policies: Sequence[aws.iam.RolePolicyAttachment],
    ) -> aws.eks.NodeGroup:
        """The system node group (controllers, gateway, monitoring) and its launch template; joins once the CNI
        and kube-proxy exist."""
        launch_template = aws.ec2.LaunchTemplate(
            f"{name}-system-lt",
            description=f"System nodes of EKS cluster {args.cluster_name}",
            metadata_options=IMDS_V2_ONLY,
            block_device_mappings=[root_volume("/dev/xvda", 50)],
            tag_specifications=instance_tag_specifications(tags),
            update_default_version=True,
            tags=dict(tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=self.cluster.name,
            node_group_name_prefix=f"{args.cluster_name}-system-",
            node_role_arn=self.node_role.arn,
            subnet_ids=list(args.subnet_ids),
            version=args.kubernetes_version,
            ami_type="AL2023_x86_64_STANDARD",
            capacity_type="ON_DEMAND",
            instance_types=[args.system_instance_type],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=args.system_nodes,
                desired_size=args.system_nodes,
                max_size=EKS_SYSTEM_SCALE_OUT * args.system_nodes,
            ),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=launch_template.id, version=launch_template.latest_version.apply(str)
            ),
            labels={SYSTEM_ROLE_LABEL: SYSTEM_ROLE},
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=True),
            tags=dict(tags),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*node_policies, self.addons["vpc-cni"], self.addons["kube-proxy"]],
                # The cluster autoscaler owns the desired size once the group exists.
                ignore_changes=["scalingConfig.desiredSize"],
            ),
        )


IMDS_V2_ONLY = aws.ec2.LaunchTemplateMetadataOptionsArgs(
    http_endpoint="enabled",
    http_tokens="required",
    # Hop limit 1: the instance's own processes reach IMDS, containers behind a network hop do not, so pods
    # cannot borrow the node role; they get credentials from EKS Pod Identity instead.
    http_put_response_hop_limit=1,
    instance_metadata_tags="disabled",
)
"""IMDSv2 only (session tokens required), reachable from the host network namespace only."""


def root_volume(
    device: str, size_gib: int, *, iops: int = 3000, throughput: int = 125
) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    """An encrypted gp3 volume, deleted with the instance (encrypted with the account's default EBS key)."""
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name=device,
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_size=size_gib,
            volume_type="gp3",
            iops=iops,
            throughput=throughput,
            encrypted="true",
            delete_on_termination="true",
        ),
    )


def instance_tag_specifications(tags: Mapping[str, str]) -> list[aws.ec2.LaunchTemplateTagSpecificationArgs]:
    """Tag the instances and volumes a launch template starts (the template's own tags stay on the template)."""
    return [
        aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=dict(tags))
        for kind in ("instance", "volume", "network-interface")
    ]
