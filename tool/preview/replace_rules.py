"""Which property changes make the provider replace a resource, or roll the machines or pods behind it.

The one table the diff consults. Pulumi's AWS and GCP providers are bridged from the Terraform providers, so a
property is replaced exactly when the Terraform schema marks it ``ForceNew``; the Kubernetes provider replaces a
resource when its name or namespace changes, or when an immutable field of the Kubernetes API changes. A ``roll``
is an in-place update that nonetheless recycles what runs underneath: new nodes for a node group, new pods for a
workload. Paths use the plan's notation (camelCase inputs, ``a.b[0].c``); a rule matches a change at its path or
anywhere beneath it. Types not listed here are updated in place.

Sources (read for this table):
- terraform-provider-aws ``internal/service/eks/node_group.go``: ``ami_type``, ``capacity_type``, ``cluster_name``,
  ``disk_size``, ``instance_types``, ``launch_template.{id,name}``, ``node_group_name(_prefix)``,
  ``node_role_arn``, ``remote_access``, ``subnet_ids`` are ``ForceNew``; a change to ``launch_template`` (its
  version), ``release_version`` or ``version`` calls ``UpdateNodegroupVersion``, which replaces the nodes.
- terraform-provider-aws ``internal/service/eks/cluster.go`` (current): ``name``, ``role_arn``,
  ``bootstrap_self_managed_addons``, ``access_config.bootstrap_cluster_creator_admin_permissions``,
  ``kubernetes_network_config.{ip_family,service_ipv4_cidr}`` and ``outpost_config`` are ``ForceNew``;
  removing ``encryption_config`` forces a new cluster (``customdiff.ForceNewIfChange``: envelope encryption cannot
  be disabled). ``vpc_config.subnet_ids``/``security_group_ids`` were ``ForceNew`` in older releases and are
  updatable now; they are not listed.
- facts.md section 2.2: ``launchTemplate`` id or name cannot change after creation; pass the template's
  ``latestVersion`` so a template change becomes a node-group version update (a roll).
- terraform-provider-aws ``internal/service/elasticache/replication_group.go``: ``replication_group_id``,
  ``at_rest_encryption_enabled``, ``data_tiering_enabled``, ``kms_key_id``, ``network_type``, ``port``,
  ``subnet_group_name`` are ``ForceNew``.
- terraform-provider-google ``container`` node pool schema: ``name``, ``name_prefix``, ``placement_policy``
  (TPU topology), ``queued_provisioning``, ``max_pods_per_node``, ``initial_node_count`` are ``ForceNew``;
  ``cluster`` and ``location`` identify the pool. Node-config changes applied in place recreate the nodes.
- Kubernetes API: ``Deployment``/``StatefulSet``/``DaemonSet`` ``spec.selector`` is immutable, as are a
  StatefulSet's ``serviceName``, ``volumeClaimTemplates`` and ``podManagementPolicy`` and a Service's
  ``clusterIP``; a change to ``spec.template`` rolls the pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

Effect = Literal["update", "roll", "replace"]
"""What a property change does: update in place, update in place but recycle nodes/pods, or replace."""

Trigger = Literal["changed", "removed"]


@dataclass(frozen=True)
class ReplaceRule:
    """One row: a change at ``path`` (or beneath it) of a resource whose type matches ``type_pattern``."""

    type_pattern: str
    path: str
    effect: Literal["roll", "replace"]
    why: str
    trigger: Trigger = "changed"


_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
_CLUSTER = "aws:eks/cluster:Cluster"
_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
_REPLICATION_GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
_GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
_GKE_CLUSTER = "gcp:container/cluster:Cluster"
_FORCE_NEW = "ForceNew in the Terraform schema the provider is bridged from"
_LT_ROLL = "a new launch template version; node groups using it roll their nodes"

REPLACE_RULES: tuple[ReplaceRule, ...] = (
    # EKS managed node groups.
    *(
        ReplaceRule(_NODE_GROUP, path, "replace", _FORCE_NEW)
        for path in (
            "amiType",
            "capacityType",
            "clusterName",
            "diskSize",
            "instanceTypes",
            "launchTemplate.id",
            "launchTemplate.name",
            "nodeGroupName",
            "nodeGroupNamePrefix",
            "nodeRoleArn",
            "remoteAccess",
            "subnetIds",
        )
    ),
    *(
        ReplaceRule(_NODE_GROUP, path, "roll", "UpdateNodegroupVersion replaces the nodes")
        for path in ("launchTemplate.version", "releaseVersion", "version")
    ),
    # EKS clusters.
    *(
        ReplaceRule(_CLUSTER, path, "replace", _FORCE_NEW)
        for path in (
            "name",
            "roleArn",
            "bootstrapSelfManagedAddons",
            "accessConfig.bootstrapClusterCreatorAdminPermissions",
            "kubernetesNetworkConfig.ipFamily",
            "kubernetesNetworkConfig.serviceIpv4Cidr",
            "outpostConfig",
        )
    ),
    ReplaceRule(_CLUSTER, "encryptionConfig", "replace", "envelope encryption cannot be disabled", trigger="removed"),
    # Launch templates: the name is the identity; any change to the template's data makes a new version.
    ReplaceRule(_LAUNCH_TEMPLATE, "name", "replace", _FORCE_NEW),
    ReplaceRule(_LAUNCH_TEMPLATE, "namePrefix", "replace", _FORCE_NEW),
    *(
        ReplaceRule(_LAUNCH_TEMPLATE, path, "roll", _LT_ROLL)
        for path in (
            "blockDeviceMappings",
            "capacityReservationSpecification",
            "ebsOptimized",
            "iamInstanceProfile",
            "imageId",
            "instanceMarketOptions",
            "instanceType",
            "keyName",
            "metadataOptions",
            "monitoring",
            "networkInterfaces",
            "placement",
            "tagSpecifications",
            "userData",
            "vpcSecurityGroupIds",
        )
    ),
    # IAM.
    *(ReplaceRule("aws:iam/role:Role", path, "replace", _FORCE_NEW) for path in ("name", "namePrefix", "path")),
    *(
        ReplaceRule("aws:iam/rolePolicyAttachment:RolePolicyAttachment", path, "replace", _FORCE_NEW)
        for path in ("role", "policyArn")
    ),
    *(
        ReplaceRule("aws:iam/openIdConnectProvider:OpenIdConnectProvider", path, "replace", _FORCE_NEW)
        for path in ("url",)
    ),
    # KMS.
    *(
        ReplaceRule("aws:kms/key:Key", path, "replace", _FORCE_NEW)
        for path in ("customerMasterKeySpec", "keyUsage", "multiRegion")
    ),
    # ElastiCache.
    *(
        ReplaceRule(_REPLICATION_GROUP, path, "replace", _FORCE_NEW)
        for path in (
            "replicationGroupId",
            "atRestEncryptionEnabled",
            "dataTieringEnabled",
            "kmsKeyId",
            "networkType",
            "port",
            "subnetGroupName",
        )
    ),
    # Networking.
    *(
        ReplaceRule("aws:ec2/securityGroup:SecurityGroup", path, "replace", _FORCE_NEW)
        for path in ("name", "namePrefix", "description", "vpcId")
    ),
    *(
        ReplaceRule("aws:ec2/subnet:Subnet", path, "replace", _FORCE_NEW)
        for path in ("vpcId", "cidrBlock", "availabilityZone", "availabilityZoneId")
    ),
    ReplaceRule("aws:ec2/vpc:Vpc", "cidrBlock", "replace", _FORCE_NEW),
    # GKE.
    *(
        ReplaceRule(_GKE_NODE_POOL, path, "replace", _FORCE_NEW)
        for path in (
            "name",
            "namePrefix",
            "cluster",
            "location",
            "placementPolicy",
            "queuedProvisioning",
            "maxPodsPerNode",
            "initialNodeCount",
        )
    ),
    ReplaceRule(_GKE_NODE_POOL, "nodeConfig", "roll", "node-config changes recreate the pool's nodes"),
    ReplaceRule(_GKE_NODE_POOL, "version", "roll", "a node version upgrade recreates the pool's nodes"),
    *(ReplaceRule(_GKE_CLUSTER, path, "replace", _FORCE_NEW) for path in ("name", "location", "project")),
    # Kubernetes: identity and immutable fields replace; a pod template change rolls the pods.
    ReplaceRule("kubernetes:*", "metadata.name", "replace", "the object's identity"),
    ReplaceRule("kubernetes:*", "metadata.namespace", "replace", "the object's identity"),
    *(
        ReplaceRule(f"kubernetes:apps/v1:{kind}", "spec.selector", "replace", "immutable in the Kubernetes API")
        for kind in ("Deployment", "StatefulSet", "DaemonSet")
    ),
    *(
        ReplaceRule("kubernetes:apps/v1:StatefulSet", path, "replace", "immutable in the Kubernetes API")
        for path in ("spec.serviceName", "spec.volumeClaimTemplates", "spec.podManagementPolicy")
    ),
    ReplaceRule("kubernetes:core/v1:Service", "spec.clusterIP", "replace", "immutable in the Kubernetes API"),
    *(
        ReplaceRule(f"kubernetes:apps/v1:{kind}", "spec.template", "roll", "a new pod template rolls the pods")
        for kind in ("Deployment", "StatefulSet", "DaemonSet")
    ),
    ReplaceRule("kubernetes:helm.sh/v3:Release", "name", "replace", "the release's identity"),
    ReplaceRule("kubernetes:helm.sh/v3:Release", "namespace", "replace", "the release's identity"),
)

_RANK: dict[Effect, int] = {"update": 0, "roll": 1, "replace": 2}


def _under(path: str, rule_path: str) -> bool:
    return path == rule_path or path.startswith((rule_path + ".", rule_path + "["))


def _above(path: str, rule_path: str) -> bool:
    """A change recorded at a parent of the rule's path (the whole object added or removed) also reaches it."""
    return rule_path.startswith((path + ".", path + "["))


def effect_of(type_token: str, path: str, kind: Literal["add", "delete", "update"]) -> tuple[Effect, str]:
    """The strongest effect any rule gives a change of ``kind`` at ``path``, with the rule's reason."""
    best: tuple[Effect, str] = ("update", "")
    for rule in REPLACE_RULES:
        if not fnmatchcase(type_token, rule.type_pattern):
            continue
        if not (_under(path, rule.path) or _above(path, rule.path)):
            continue
        if rule.trigger == "removed" and not (kind == "delete" and _under(path, rule.path)):
            continue
        if _RANK[rule.effect] > _RANK[best[0]]:
            best = (rule.effect, f"{rule.path}: {rule.why}")
    return best
