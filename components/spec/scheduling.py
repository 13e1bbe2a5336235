"""How accelerator pods find their nodes: the labels and taints that node pools set and workloads match.

Defined once so a node group and the model servers placed on it can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

POOL_LABEL = "inferplane.io/pool"
"""Every accelerator node carries its pool's name; model servers select on it."""

ACCELERATOR_LABEL = "inferplane.io/accelerator"
"""Every accelerator node carries its catalog accelerator id (``h100-80gb``)."""

NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
"""The extended resource the EFA device plugin advertises: node groups tag it for the cluster autoscaler, and a
disaggregated replica on EFA requests its share of the node's interfaces."""

GKE_TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
GKE_TPU_V5E_ACCELERATOR = "tpu-v5-lite-podslice"
"""GKE's accelerator label value for ct5lp (TPU v5e) machine types."""

EksTaintEffect = Literal["NO_SCHEDULE", "NO_EXECUTE", "PREFER_NO_SCHEDULE"]
KubernetesTaintEffect = Literal["NoSchedule", "NoExecute", "PreferNoSchedule"]

EKS_TO_KUBERNETES_EFFECT: dict[EksTaintEffect, KubernetesTaintEffect] = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}
"""The EKS API spells taint effects in SCREAMING_CASE; Kubernetes tolerations use CamelCase."""


@dataclass(frozen=True)
class Taint:
    """A node taint, with both spellings of its effect."""

    key: str
    value: str
    eks_effect: EksTaintEffect

    @property
    def kubernetes_effect(self) -> KubernetesTaintEffect:
        """The effect as a Kubernetes toleration spells it."""
        return EKS_TO_KUBERNETES_EFFECT[self.eks_effect]


GPU_TAINT = Taint(key=NVIDIA_GPU_RESOURCE, value="true", eks_effect="NO_SCHEDULE")
"""Keeps everything but GPU workloads off GPU nodes."""

TPU_TAINT = Taint(key=TPU_RESOURCE, value="present", eks_effect="NO_SCHEDULE")
"""The taint GKE itself puts on TPU nodes (``google.com/tpu=present:NoSchedule``)."""
