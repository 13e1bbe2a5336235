"""Versions pinned per Kubernetes minor: EKS managed add-ons and the cluster autoscaler.

Plain data (no Pulumi import), so the spec's whole validation (:mod:`inferplane.components.spec.buildable`) and
``inferplane size`` can tell a supported Kubernetes version from one the components would refuse without loading the
cloud SDKs. :mod:`inferplane.components.aws.eks_cluster` and :mod:`inferplane.components.aws.node_addons` deploy them.
"""

from __future__ import annotations

from typing import Literal

AddonName = Literal["vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "aws-ebs-csi-driver"]

ADDON_VERSIONS: dict[str, dict[AddonName, str]] = {
    "1.33": {
        "vpc-cni": "v1.21.1-eksbuild.3",
        "kube-proxy": "v1.33.10-eksbuild.2",
        "coredns": "v1.12.4-eksbuild.18",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.3",
        "aws-ebs-csi-driver": "v1.55.0-eksbuild.2",
    },
    "1.34": {
        "vpc-cni": "v1.21.1-eksbuild.3",
        "kube-proxy": "v1.34.6-eksbuild.2",
        "coredns": "v1.13.2-eksbuild.11",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.3",
        "aws-ebs-csi-driver": "v1.55.0-eksbuild.2",
    },
    "1.35": {
        "vpc-cni": "v1.21.1-eksbuild.3",
        "kube-proxy": "v1.35.3-eksbuild.2",
        "coredns": "v1.14.3-eksbuild.3",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.3",
        "aws-ebs-csi-driver": "v1.55.0-eksbuild.2",
    },
}
"""EKS managed add-on versions per Kubernetes minor, read 2026-11-29. Confidence per column:

* kube-proxy, coredns: the "latest version of the Amazon EKS add-on type for each Kubernetes version" tables of
  docs.aws.amazon.com/eks/latest/userguide/managing-kube-proxy.html and managing-coredns.html (stored copies of
  the current pages; the coredns table there already lists 1.36) -- verified against AWS documentation.
* vpc-cni, aws-ebs-csi-driver: one public Terraform stack pinning ``vpc-cni v1.21.1-eksbuild.3`` and
  ``aws-ebs-csi-driver v1.55.0-eksbuild.2`` on a 1.34 cluster -- third-party. Both add-ons publish one build for
  every supported minor (every AWS vpc-cni table read lists the same version for all minors), so the same build
  is used for 1.33 and 1.35; unverified for those two minors.
* eks-pod-identity-agent: ``v1.3.10-eksbuild.3``, what a public 1.36 cluster test record reports the add-on
  resolved to -- third-party; the agent is not tied to a Kubernetes minor.

Before an upgrade, check with ``aws eks describe-addon-versions --kubernetes-version <minor> --addon-name <name>``
(moto does not implement it, so no test can).
"""

CLUSTER_AUTOSCALER_IMAGE_TAGS: dict[str, str] = {
    "1.33": "v1.33.6",
    "1.34": "v1.34.5",
    "1.35": "v1.35.2",
    "1.36": "v1.36.1",
}
"""Newest cluster-autoscaler patch per Kubernetes minor: git tags ``cluster-autoscaler-1.3x.y`` of
kubernetes/autoscaler, read 2026-11-29 (repository snapshot of 2026-08-22). The chart's own default (v1.35.0) is
overridden because the autoscaler's minor must match the cluster's."""
