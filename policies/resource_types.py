"""The Pulumi type tokens the pack polices, in one place.

Python policies match on token strings (the Python policy SDK has no typed ``validate_resource_of_type``), so a typo
here would silently switch a policy off: ``tests/policies/test_policy_pack.py`` checks every token against the installed
SDKs.
"""

from __future__ import annotations

from enum import StrEnum


class T(StrEnum):
    """Type tokens as the engine reports them (``<package>:<module>/<name>:<Name>``)."""

    # pulumi_aws
    EKS_CLUSTER = "aws:eks/cluster:Cluster"
    EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
    LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
    SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
    ELASTICACHE_REPLICATION_GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
    KMS_KEY = "aws:kms/key:Key"
    S3_BUCKET = "aws:s3/bucket:Bucket"
    S3_BUCKET_V2 = "aws:s3/bucketV2:BucketV2"
    CLOUDWATCH_LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
    EBS_VOLUME = "aws:ebs/volume:Volume"
    IAM_ROLE = "aws:iam/role:Role"
    VPC = "aws:ec2/vpc:Vpc"
    FLOW_LOG = "aws:ec2/flowLog:FlowLog"
    S3_BUCKET_LOGGING = "aws:s3/bucketLogging:BucketLogging"
    # pulumi_gcp
    GKE_CLUSTER = "gcp:container/cluster:Cluster"
    GCP_SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
    GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
    # pulumi_kubernetes
    DEPLOYMENT = "kubernetes:apps/v1:Deployment"
    CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
    STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
    DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
    JOB = "kubernetes:batch/v1:Job"
    POD_DISRUPTION_BUDGET = "kubernetes:policy/v1:PodDisruptionBudget"
    SERVICE = "kubernetes:core/v1:Service"
    PERSISTENT_VOLUME_CLAIM = "kubernetes:core/v1:PersistentVolumeClaim"
    NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
    # CustomResources: ``kubernetes:<group>/<version>:<Kind>``
    SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
    PROMETHEUS_RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"


WORKLOADS: frozenset[str] = frozenset({T.DEPLOYMENT, T.STATEFUL_SET, T.DAEMON_SET, T.JOB})
"""Kubernetes objects with a pod template at ``spec.template``."""

ACCELERATOR_POOLS: frozenset[str] = frozenset({T.EKS_NODE_GROUP, T.GKE_NODE_POOL})
"""Node pools that may carry accelerators."""

STATEFUL: frozenset[str] = frozenset(
    {
        T.ELASTICACHE_REPLICATION_GROUP,
        T.KMS_KEY,
        T.S3_BUCKET,
        T.S3_BUCKET_V2,
        T.EBS_VOLUME,
        T.PERSISTENT_VOLUME_CLAIM,
    }
)
"""Resources whose deletion loses data or locks data away (a deleted KMS key makes its ciphertext unreadable).
The EKS cluster is left out: everything in it is declared here and re-created by ``pulumi up``."""

TAGGABLE: frozenset[str] = frozenset(
    {
        T.EKS_CLUSTER,
        T.EKS_NODE_GROUP,
        T.LAUNCH_TEMPLATE,
        T.SECURITY_GROUP,
        T.ELASTICACHE_REPLICATION_GROUP,
        T.KMS_KEY,
        T.S3_BUCKET,
        T.S3_BUCKET_V2,
        T.CLOUDWATCH_LOG_GROUP,
        T.EBS_VOLUME,
        "aws:ec2/vpc:Vpc",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/internetGateway:InternetGateway",
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/eip:Eip",
        "aws:ec2/routeTable:RouteTable",
        "aws:iam/role:Role",
        "aws:iam/policy:Policy",
        "aws:iam/openIdConnectProvider:OpenIdConnectProvider",
        "aws:elasticache/subnetGroup:SubnetGroup",
        "aws:ecr/repository:Repository",
    }
)
"""AWS resources that take ``tags`` (the ``tags`` argument of their pulumi_aws ``...Args``)."""
