"""``NodeAddons``: what GPU nodes need in-cluster, as pinned Helm releases.

* **Cluster Autoscaler** (kubernetes/autoscaler chart): scales the GPU node groups, from zero, by ASG
  auto-discovery on the ``k8s.io/cluster-autoscaler/enabled`` + ``k8s.io/cluster-autoscaler/<cluster>`` tags that
  :class:`~components.aws.gpu_node_group.GpuNodeGroup` sets. Its AWS permissions come from an EKS Pod Identity
  association (no OIDC provider, no IRSA annotation); the actions that change capacity are limited to groups
  tagged as owned by this cluster. Its image minor matches the Kubernetes minor, as the project requires
  (cluster-autoscaler README, "Releases"). Runs on the system nodes.
* **NVIDIA device plugin** (NVIDIA/k8s-device-plugin chart), chosen over the GPU Operator: the EKS accelerated
  AMIs already carry the driver and container toolkit, so the operator would be there only to switch those parts
  off (``driver.enabled=false``, ``toolkit.enabled=false``) and would add node feature discovery and a dozen
  operands to patch. AL2023 NVIDIA AMIs need the plugin; Bottlerocket NVIDIA AMIs ship it
  (docs.aws.amazon.com/eks/latest/userguide/ml-eks-k8s-device-plugin.html), so it runs only on nodes labelled
  ``inferplane.io/ami-family=al2023`` and is not installed at all when every pool is Bottlerocket. The chart's
  default affinity waits for node-feature-discovery labels, which nothing here sets, so it is replaced.
* **DCGM exporter** (NVIDIA/dcgm-exporter chart): GPU utilisation, memory, power and XID errors on port 9400 for
  the monitoring stack, on every GPU node. Its ServiceMonitor is off: the monitoring component owns scrape
  configuration and the Prometheus Operator CRDs may not exist yet when this installs. Scrape the Service
  selected by :data:`DCGM_SERVICE_LABELS` in :data:`NAMESPACE` on port ``metrics``.
* **EFA device plugin** (aws/eks-charts chart), only when some pool uses EFA: neither accelerated AMI includes it
  (docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html).

Every release tolerates :data:`~components.spec.scheduling.GPU_TAINT` where it must run on GPU nodes, and every one
goes through the cluster's single Kubernetes provider.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from inferplane.components.aws.eks_cluster import SYSTEM_ROLE, SYSTEM_ROLE_LABEL, EksCluster
from inferplane.components.aws.gpu_node_group import AMI_FAMILY_LABEL, CA_TAG_PREFIX, GpuNodeGroup
from inferplane.components.aws.iam import service_trust_policy
from inferplane.components.catalog.eks import CLUSTER_AUTOSCALER_IMAGE_TAGS
from inferplane.components.spec.input_errors import raise_input_errors
from inferplane.components.spec.scheduling import ACCELERATOR_LABEL, GPU_TAINT

NAMESPACE = "kube-system"
"""Where the node add-ons run (system-critical, next to the EKS add-ons)."""


@dataclass(frozen=True)
class Chart:
    """A pinned Helm chart: repository, name, version and where the pin was read."""

    repo: str
    name: str
    version: str
    source: str


CLUSTER_AUTOSCALER_CHART = Chart(
    repo="https://kubernetes.github.io/autoscaler",
    name="cluster-autoscaler",
    version="9.59.0",
    source="kubernetes/autoscaler cluster-autoscaler/charts/cluster-autoscaler/Chart.yaml @2026-08-22",
)
NVIDIA_DEVICE_PLUGIN_CHART = Chart(
    repo="https://nvidia.github.io/k8s-device-plugin",
    name="nvidia-device-plugin",
    version="0.20.0",
    source="NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin/Chart.yaml @2026-08-19 (tag v0.20.0)",
)
DCGM_EXPORTER_CHART = Chart(
    repo="https://nvidia.github.io/dcgm-exporter/helm-charts",
    name="dcgm-exporter",
    version="4.8.2",
    source="NVIDIA/dcgm-exporter deployment/Chart.yaml @2026-05-12 (image 4.5.3-4.8.2-distroless)",
)
EFA_DEVICE_PLUGIN_CHART = Chart(
    repo="https://aws.github.io/eks-charts",
    name="aws-efa-k8s-device-plugin",
    version="v0.5.30",
    source="aws/eks-charts stable/aws-efa-k8s-device-plugin/Chart.yaml @2026-08-03 (app v0.5.20)",
)

CLUSTER_AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"
DCGM_SERVICE_LABELS: dict[str, str] = {"app.kubernetes.io/name": "dcgm-exporter"}
"""Labels of the DCGM exporter's Service (the chart's selector labels with ``nameOverride`` unset)."""
DCGM_METRICS_PORT = 9400

GPU_TOLERATION: dict[str, str] = {
    "key": GPU_TAINT.key,
    "operator": "Exists",
    "effect": GPU_TAINT.kubernetes_effect,
}
"""Tolerates the GPU taint whatever its value; add-ons must run on every GPU node."""


def cluster_autoscaler_policy(cluster_name: str, partition: str, region: str, account_id: str) -> str:
    """IAM policy from the cluster-autoscaler AWS README ("Full Cluster Autoscaler Features Policy"), with the
    capacity-changing actions limited to Auto Scaling groups tagged as owned by this cluster, and
    ``eks:DescribeNodegroup`` limited to this cluster's node groups (its ARN form
    ``arn:<partition>:eks:<region>:<account>:nodegroup/<cluster>/<nodegroup>/<uuid>``, IAM service authorization
    reference for Amazon EKS). The Describe* actions of Auto Scaling and EC2 support no resource-level scoping
    (same reference) and keep ``*``."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "Discover",
                    "Effect": "Allow",
                    "Action": [
                        "autoscaling:DescribeAutoScalingGroups",
                        "autoscaling:DescribeAutoScalingInstances",
                        "autoscaling:DescribeLaunchConfigurations",
                        "autoscaling:DescribeScalingActivities",
                        "autoscaling:DescribeTags",
                        "ec2:DescribeImages",
                        "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplateVersions",
                        "ec2:GetInstanceTypesFromInstanceRequirements",
                    ],
                    "Resource": "*",
                },
                {
                    "Sid": "DescribeOwnNodegroups",
                    "Effect": "Allow",
                    "Action": "eks:DescribeNodegroup",
                    "Resource": f"arn:{partition}:eks:{region}:{account_id}:nodegroup/{cluster_name}/*/*",
                },
                {
                    "Sid": "ScaleOwnGroups",
                    "Effect": "Allow",
                    "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                    "Resource": "*",
                    "Condition": {"StringEquals": {f"aws:ResourceTag/{CA_TAG_PREFIX}/{cluster_name}": "owned"}},
                },
            ],
        }
    )


@dataclass(frozen=True)
class NodeAddonsArgs:
    """Inputs of :class:`NodeAddons`."""

    cluster: EksCluster
    """The cluster; its Kubernetes provider installs every release."""
    region: str
    """AWS region the cluster autoscaler talks to."""
    node_groups: Sequence[GpuNodeGroup]
    """The GPU pools; decide whether the NVIDIA and EFA device plugins are needed."""


def _check(args: NodeAddonsArgs) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    version = args.cluster.kubernetes_version
    if version not in CLUSTER_AUTOSCALER_IMAGE_TAGS:
        errors.append(
            (
                "cluster.kubernetes_version",
                f"no cluster-autoscaler release pinned for {version} ({', '.join(CLUSTER_AUTOSCALER_IMAGE_TAGS)})",
            )
        )
    return errors


class NodeAddons(pulumi.ComponentResource):
    """Cluster Autoscaler, NVIDIA device plugin, DCGM exporter and (with EFA) the EFA device plugin.

    Children (``name`` = this component's name): ``{name}-cluster-autoscaler-role`` with its inline policy
    ``{name}-cluster-autoscaler-policy`` and Pod Identity association ``{name}-cluster-autoscaler-pod-identity``,
    and the Helm releases ``{name}-cluster-autoscaler``,
    ``{name}-nvidia-device-plugin`` (unless every pool is Bottlerocket), ``{name}-dcgm-exporter`` and
    ``{name}-efa-device-plugin`` (only with EFA).
    """

    releases: dict[str, k8s.helm.v3.Release]
    _k8s_provider: k8s.Provider
    _after: list[pulumi.Resource]

    def __init__(self, name: str, args: NodeAddonsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:NodeAddons", name, None, opts)
        raise_input_errors("The input properties for the node add-ons are invalid.", _check(args))

        cluster = args.cluster
        self._k8s_provider = cluster.k8s_provider
        # Releases wait for somewhere to run and for cluster DNS; an atomic install would otherwise time out.
        self._after = [cluster.system_node_group, cluster.addons["coredns"]]
        association = self._autoscaler_identity(name, args)
        self.releases = {"cluster-autoscaler": self._cluster_autoscaler(name, args, association)}
        self.releases.update(self._gpu_releases(name, args.node_groups))
        self.register_outputs({"releases": sorted(self.releases)})

    def _autoscaler_identity(self, name: str, args: NodeAddonsArgs) -> aws.eks.PodIdentityAssociation:
        """The cluster autoscaler's IAM role, its policy, and the Pod Identity association to its service account."""
        cluster = args.cluster
        tags = dict(cluster.tags)
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account = aws.get_caller_identity_output(opts=invoke).account_id
        role = aws.iam.Role(
            f"{name}-cluster-autoscaler-role",
            assume_role_policy=service_trust_policy("pods.eks.amazonaws.com", tag_session=True),
            tags=tags,
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-cluster-autoscaler-policy",
            role=role.name,
            policy=pulumi.Output.all(partition, account).apply(
                lambda values: cluster_autoscaler_policy(cluster.cluster_name, values[0], args.region, values[1])
            ),
            opts=child,
        )
        return aws.eks.PodIdentityAssociation(
            f"{name}-cluster-autoscaler-pod-identity",
            cluster_name=cluster.cluster.name,
            namespace=NAMESPACE,
            service_account=CLUSTER_AUTOSCALER_SERVICE_ACCOUNT,
            role_arn=role.arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster.addons["eks-pod-identity-agent"]]),
        )

    def _cluster_autoscaler(
        self, name: str, args: NodeAddonsArgs, association: aws.eks.PodIdentityAssociation
    ) -> k8s.helm.v3.Release:
        """The cluster autoscaler on the system nodes, discovering this cluster's groups; waits for its identity."""
        cluster = args.cluster
        return self._release(
            name,
            "cluster-autoscaler",
            CLUSTER_AUTOSCALER_CHART,
            {
                "cloudProvider": "aws",
                "awsRegion": args.region,
                "autoDiscovery": {"clusterName": cluster.cluster_name},
                "image": {"tag": CLUSTER_AUTOSCALER_IMAGE_TAGS[cluster.kubernetes_version]},
                "rbac": {"serviceAccount": {"create": True, "name": CLUSTER_AUTOSCALER_SERVICE_ACCOUNT}},
                "nodeSelector": {SYSTEM_ROLE_LABEL: SYSTEM_ROLE},
                "extraArgs": {
                    # GPU nodes are expensive: pick the group that wastes the least, and keep similar groups even.
                    "expander": "least-waste",
                    "balance-similar-node-groups": True,
                    "skip-nodes-with-local-storage": False,
                },
            },
            depends_on=[association],
        )

    def _gpu_releases(self, name: str, node_groups: Sequence[GpuNodeGroup]) -> dict[str, k8s.helm.v3.Release]:
        """The releases that run on GPU nodes, each only where some pool needs it."""
        releases: dict[str, k8s.helm.v3.Release] = {}
        if any(group.ami_family == "al2023" for group in node_groups):
            releases["nvidia-device-plugin"] = self._release(
                name,
                "nvidia-device-plugin",
                NVIDIA_DEVICE_PLUGIN_CHART,
                {
                    "tolerations": [GPU_TOLERATION],
                    "affinity": _require_labels({AMI_FAMILY_LABEL: ["al2023"]}, exists=[ACCELERATOR_LABEL]),
                },
            )
        if node_groups:
            releases["dcgm-exporter"] = self._release(
                name,
                "dcgm-exporter",
                DCGM_EXPORTER_CHART,
                {
                    "tolerations": [GPU_TOLERATION],
                    "affinity": _require_labels({}, exists=[ACCELERATOR_LABEL]),
                    "serviceMonitor": {"enabled": False},
                    "service": {"enable": True, "port": DCGM_METRICS_PORT},
                },
            )
        if any(group.efa for group in node_groups):
            releases["efa-device-plugin"] = self._release(
                name,
                "efa-device-plugin",
                EFA_DEVICE_PLUGIN_CHART,
                {"tolerations": [GPU_TOLERATION]},
            )
        return releases

    def _release(
        self,
        name: str,
        component: str,
        chart: Chart,
        values: dict[str, Any],
        depends_on: Sequence[pulumi.Resource] = (),
    ) -> k8s.helm.v3.Release:
        return k8s.helm.v3.Release(
            f"{name}-{component}",
            name=component,
            chart=chart.name,
            version=chart.version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
            namespace=NAMESPACE,
            values=values,
            # A failed install rolls back instead of leaving half a DaemonSet behind.
            atomic=True,
            cleanup_on_fail=True,
            max_history=10,
            opts=pulumi.ResourceOptions(
                parent=self, provider=self._k8s_provider, depends_on=[*self._after, *depends_on]
            ),
        )


def _require_labels(values: dict[str, list[str]], exists: Sequence[str] = ()) -> dict[str, Any]:
    """A required node affinity: each label in ``values`` has one of its values; each in ``exists`` is present."""
    expressions: list[dict[str, Any]] = [
        {"key": key, "operator": "In", "values": allowed} for key, allowed in values.items()
    ]
    expressions += [{"key": key, "operator": "Exists"} for key in exists]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        }
    }
