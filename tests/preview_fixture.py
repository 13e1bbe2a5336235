"""A tiny Pulumi program for the preview's tests: the real config path, a few components, a secret.

It reads the platform and the Hugging Face token exactly as ``inferplane.infra.program`` does and registers, per pool, a
``GpuNodeGroup`` (IAM role, launch template, EKS node group), per model a ``VllmService`` (a Secret holding the
token and a Deployment), and a ``Gateway`` that depends on the services. Small enough to assert on completely.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from inferplane.components.capacity.sizing import size_platform
from inferplane.infra.program import platform_from_config

NODE_ROLE_POLICY = '{"Version":"2012-10-17","Statement":[]}'


class GpuNodeGroup(pulumi.ComponentResource):
    """Role, launch template and managed node group for one pool."""

    def __init__(self, name: str, *, cluster: aws.eks.Cluster, instance_type: str, spot: bool, max_nodes: int) -> None:
        super().__init__("inferplane:index:GpuNodeGroup", name)
        child = pulumi.ResourceOptions(parent=self)
        self.role = aws.iam.Role(f"{name}-role", assume_role_policy=NODE_ROLE_POLICY, opts=child)
        self.template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(http_tokens="required"),
            opts=child,
        )
        self.node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=cluster.name,
            node_role_arn=self.role.arn,
            subnet_ids=["subnet-a", "subnet-b"],
            ami_type="AL2023_x86_64_NVIDIA",
            capacity_type="SPOT" if spot else "ON_DEMAND",
            instance_types=[instance_type],
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=self.template.id, version=self.template.latest_version.apply(str)
            ),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(desired_size=0, min_size=0, max_size=max_nodes),
            tags={"cost-center": "ml", "inferplane.io/pool": name},
            opts=child,
        )
        self.register_outputs({})


class VllmService(pulumi.ComponentResource):
    """A Secret with the model-hub token and a Deployment, scheduled on its pool's node group."""

    def __init__(self, name: str, *, pool: GpuNodeGroup, token: pulumi.Output[str], replicas: int) -> None:
        super().__init__("inferplane:index:VllmService", name)
        self.service_name = name
        self.secret = k8s.core.v1.Secret(
            f"{name}-token",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{name}-token", namespace="models"),
            string_data={"HF_TOKEN": token},
            opts=pulumi.ResourceOptions(parent=self),
        )
        labels = {"app": name}
        self.deployment = k8s.apps.v1.Deployment(
            name,
            metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace="models"),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=replicas,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        containers=[k8s.core.v1.ContainerArgs(name="vllm", image="vllm/vllm-openai:v0.11.0")]
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[pool.node_group, self.secret]),
        )
        self.register_outputs({})


class Gateway(pulumi.ComponentResource):
    """A ConfigMap routing to every service."""

    def __init__(self, name: str, *, services: list[VllmService]) -> None:
        super().__init__("inferplane:index:Gateway", name)
        self.routes = k8s.core.v1.ConfigMap(
            f"{name}-routes",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{name}-routes", namespace="gateway"),
            data={s.service_name: "8000" for s in services},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[s.deployment for s in services]),
        )
        self.register_outputs({})


def program() -> None:
    """The fixture's entry point, shaped like ``inferplane.infra.program.main``."""
    spec = platform_from_config()
    sizing = size_platform(spec)
    token = pulumi.Config("inferplane").require_secret("hfToken")
    cluster = aws.eks.Cluster(
        f"{spec.environment}-cluster",
        role_arn="arn:aws:iam::123456789012:role/cluster",
        vpc_config=aws.eks.ClusterVpcConfigArgs(subnet_ids=["subnet-a", "subnet-b"]),
        opts=pulumi.ResourceOptions(protect=spec.environment == "prod"),
    )
    pools = {
        pool.name: GpuNodeGroup(
            pool.name,
            cluster=cluster,
            instance_type=pool.instance_type,
            spot=pool.capacity_type == "spot",
            max_nodes=max(1, next(p.max_nodes for p in sizing.pools if p.name == pool.name)),
        )
        for pool in spec.pools
    }
    services = [VllmService(m.name, pool=pools[m.pool], token=token, replicas=m.min_replicas) for m in spec.models]
    Gateway("gateway", services=services)
    pulumi.export("endpoint", cluster.endpoint)
    pulumi.export("token", token)
