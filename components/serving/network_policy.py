"""``ServingNetworkPolicy``: default-deny NetworkPolicies for a serving namespace, and the few flows it needs.

CIS EKS 4.3.2 / CIS GKE 5.6.7 and the EKS Best Practices Guide (network security) ask that every namespace holding
workloads have a default-deny policy and explicit allowances. Per serving namespace this creates (``name`` = the
component's name, every policy in ``namespace``):

* ``{name}-default-deny``: every pod, no ingress and no egress;
* ``{name}-dns``: every pod may query the cluster DNS (:func:`dns_egress_rule`: pods ``k8s-app: kube-dns`` in
  ``kube-system``, UDP and TCP 53: CoreDNS on EKS and kube-dns on GKE carry that label; the gateway's own policy
  uses the same rule);
* ``{name}-model-server-ingress``: model-server pods accept the gateway (:data:`annotations.GATEWAY_POD_LABELS` in a
  namespace with :data:`annotations.PLATFORM_NAMESPACE_LABELS`) on the API ports, and Prometheus (pods
  ``app.kubernetes.io/name: prometheus`` managed by ``prometheus-operator``, in the monitoring namespace) on the
  metrics ports; nothing else reaches them;
* ``{name}-model-loading-egress``: model servers and engine builds may open HTTPS (TCP 443) connections outside the
  cluster, which is how weights arrive (S3 through the VPC gateway endpoint, or the Hugging Face hub), and, on EKS,
  reach the Pod Identity agent on the node (``169.254.170.23``, TCP 80) for the model cache's credentials. The
  instance metadata service is not allowed (it is also unreachable by hop limit).

* ``{name}-kv-transfer-<model>``, per disaggregated model: its decode pods may reach its prefill pods on NIXL's
  side channel (:data:`KV_SIDE_CHANNEL_PORT`, where the decode's handshake goes); over UCX on TCP also on any TCP port
  both ways, as UCX opens its data connections on listener ports of its own choosing (no port range is documented
  for it); over EFA the data moves by SRD, which bypasses the kernel's IP stack and NetworkPolicy alike (the pools'
  EFA security group admits it).

Enforcement: on EKS the vpc-cni network policy agent (``enableNetworkPolicy`` in ``components.aws.eks_cluster``), on GKE
Dataplane V2 (``components.gcp.gke_cluster``). Kubelet probes come from the node itself and are not pod traffic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from inferplane.components.serving.annotations import (
    COMPONENT_LABEL,
    ENGINE_BUILD,
    GATEWAY_POD_LABELS,
    MODEL_SERVER,
    NAME_LABEL,
    PLATFORM_NAMESPACE_LABELS,
)
from inferplane.components.serving.naming import MONITORING_NAMESPACE

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by Kubernetes on every namespace (immutable, since 1.22): selects a namespace by name."""

DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS: dict[str, str] = {"k8s-app": "kube-dns"}
"""The cluster DNS pods' namespace and label. EKS: the CoreDNS add-on's pods keep the ``k8s-app: kube-dns`` label
in ``kube-system``. GKE (Dataplane V2 enforces NetworkPolicy on pod labels like any other): kube-dns is the Standard
cluster's default DNS provider, its pods in ``kube-system`` (cloud.google.com/kubernetes-engine/docs/concepts/kube-dns),
labelled ``k8s-app: kube-dns`` as in Google's own GKE kube-system policy blueprint
(GoogleCloudPlatform/anthos-security-blueprints, restricting-traffic/kube-system: ``allow-kubedns-from-all-egress``
selects ``k8s-app: kube-dns``)."""
DNS_PORT = 53
NODE_LOCAL_DNS_CIDR = "169.254.20.10/32"
"""NodeLocal DNSCache's link-local address (kubernetes/kubernetes cluster/addons/dns/nodelocaldns, "a link local ip
(169.254.20.10/32 by default) to listen for DNS queries"). The cache runs on the host network, so no pod selector
matches it; GKE Standard enables it by default from 1.33.1 (GKE docs, "Set up NodeLocal DNSCache"), and EKS clusters
often add it. Operators' DNS rules allow it for the same reason (restatedev/restate-operator#88)."""

PROMETHEUS_POD_LABELS: dict[str, str] = {
    "app.kubernetes.io/name": "prometheus",
    "app.kubernetes.io/managed-by": "prometheus-operator",
}
"""Labels prometheus-operator puts on every Prometheus pod (its StatefulSet pod selector labels)."""

POD_IDENTITY_AGENT_CIDR = "169.254.170.23/32"
POD_IDENTITY_AGENT_PORT = 80
"""Where the EKS Pod Identity agent serves credentials (``AWS_CONTAINER_CREDENTIALS_FULL_URI``, EKS user guide
pod-id-how-it-works.html)."""

HTTPS_PORT = 443

KV_SIDE_CHANNEL_PORT = 5600
"""NIXL's handshake port on a disaggregated replica (vLLM's ``VLLM_NIXL_SIDE_CHANNEL_PORT`` default, which the
servers set; :data:`components.serving.vllm_service.NIXL_SIDE_CHANNEL_PORT` renders it)."""


@dataclass(frozen=True)
class KvTransferFlow:
    """The pods of one disaggregated model that move KV blocks between them."""

    decode: str
    """The decode role's server name (its pods' ``app.kubernetes.io/name``): the side that pulls."""
    prefill: str
    """The prefill role's server name: the side that holds the blocks and answers the handshake."""
    any_port: bool
    """UCX on TCP: the data connections use ports of UCX's choosing, so every TCP port between the two roles."""


@dataclass(frozen=True)
class ServingNetworkPolicyArgs:
    """Inputs of :class:`ServingNetworkPolicy`."""

    namespace: pulumi.Input[str]
    """The serving namespace."""
    api_ports: Sequence[int]
    """Ports the gateway calls on model servers (the engines' HTTP and gRPC ports)."""
    metrics_ports: Sequence[int]
    """Ports Prometheus scrapes on model servers."""
    monitoring_namespace: str = MONITORING_NAMESPACE
    """Namespace of the Prometheus that scrapes the servers."""
    pod_identity: bool = True
    """Allow the EKS Pod Identity agent (EKS clusters; GKE has none)."""
    kv_transfers: Sequence[KvTransferFlow] = ()
    """Disaggregated models whose roles reach each other for the KV transfer."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels of every policy."""


def _ports(ports: Sequence[int], *protocols: str) -> list[k8s.networking.v1.NetworkPolicyPortArgs]:
    return [
        k8s.networking.v1.NetworkPolicyPortArgs(port=port, protocol=protocol)
        for port in sorted(set(ports))
        for protocol in protocols
    ]


def _namespace(name: str) -> k8s.meta.v1.LabelSelectorArgs:
    return k8s.meta.v1.LabelSelectorArgs(match_labels={NAMESPACE_NAME_LABEL: name})


def dns_egress_rule() -> k8s.networking.v1.NetworkPolicyEgressRuleArgs:
    """The one DNS allowance of every pod the platform restricts (serving namespaces and the gateway): UDP and TCP 53
    to the cluster DNS pods (:data:`DNS_POD_LABELS` in :data:`DNS_NAMESPACE`) and to the node's own DNS cache
    (:data:`NODE_LOCAL_DNS_CIDR`, where NodeLocal DNSCache runs), and nowhere else, so port 53 is no way out of the
    cluster."""
    return k8s.networking.v1.NetworkPolicyEgressRuleArgs(
        to=[
            k8s.networking.v1.NetworkPolicyPeerArgs(
                namespace_selector=_namespace(DNS_NAMESPACE),
                pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(DNS_POD_LABELS)),
            ),
            k8s.networking.v1.NetworkPolicyPeerArgs(ip_block=k8s.networking.v1.IPBlockArgs(cidr=NODE_LOCAL_DNS_CIDR)),
        ],
        ports=_ports([DNS_PORT], "UDP", "TCP"),
    )


def gateway_peer() -> k8s.networking.v1.NetworkPolicyPeerArgs:
    """The gateway's pods (:data:`annotations.GATEWAY_POD_LABELS`) in a platform namespace: who may call a server."""
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        namespace_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=PLATFORM_NAMESPACE_LABELS),
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=GATEWAY_POD_LABELS),
    )


def prometheus_peer(monitoring_namespace: str) -> k8s.networking.v1.NetworkPolicyPeerArgs:
    """The Prometheus pods of the monitoring namespace: who may scrape a server's metrics."""
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        namespace_selector=_namespace(monitoring_namespace),
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=PROMETHEUS_POD_LABELS),
    )


def https_egress_rule() -> k8s.networking.v1.NetworkPolicyEgressRuleArgs:
    """HTTPS to anywhere: how weights arrive (S3 through the VPC endpoint, or the Hugging Face hub)."""
    return k8s.networking.v1.NetworkPolicyEgressRuleArgs(
        to=[k8s.networking.v1.NetworkPolicyPeerArgs(ip_block=k8s.networking.v1.IPBlockArgs(cidr="0.0.0.0/0"))],
        ports=_ports([HTTPS_PORT], "TCP"),
    )


def _check(args: ServingNetworkPolicyArgs) -> list[pulumi.errors.InputPropertyErrorDetails]:
    errors: list[pulumi.errors.InputPropertyErrorDetails] = []
    for field_name, ports in (("api_ports", args.api_ports), ("metrics_ports", args.metrics_ports)):
        if not ports:
            errors.append({"property_path": field_name, "reason": "give at least one port"})
        for index, port in enumerate(ports):
            if not 1 <= port <= 65535:
                errors.append({"property_path": f"{field_name}[{index}]", "reason": f"{port} is not a TCP port"})
    return errors


class ServingNetworkPolicy(pulumi.ComponentResource):
    """Default-deny plus the DNS, gateway, Prometheus and model-loading allowances of one serving namespace."""

    default_deny: k8s.networking.v1.NetworkPolicy
    """``{name}-default-deny``: every pod of the namespace, no ingress and no egress."""

    def __init__(self, name: str, args: ServingNetworkPolicyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        errors = _check(args)
        if errors:
            raise pulumi.InputPropertiesError("invalid ServingNetworkPolicy arguments", errors=errors)
        super().__init__("inferplane:index:ServingNetworkPolicy", name, None, opts)
        self.default_deny = self._policy(name, "default-deny", args, _default_deny_spec())
        self._policy(name, "dns", args, _dns_spec())
        self._policy(name, "model-server-ingress", args, _model_server_ingress_spec(args))
        self._policy(name, "model-loading-egress", args, _model_loading_egress_spec(args))
        for flow in args.kv_transfers:
            self._policy(name, f"kv-transfer-{flow.decode}", args, _kv_transfer_spec(flow))
        self.register_outputs({"defaultDeny": self.default_deny.metadata.name})

    def _policy(
        self, name: str, suffix: str, args: ServingNetworkPolicyArgs, spec: k8s.networking.v1.NetworkPolicySpecArgs
    ) -> k8s.networking.v1.NetworkPolicy:
        """One policy of the namespace: Kubernetes name ``suffix`` (one set per namespace), Pulumi name
        ``{name}-{suffix}``."""
        return k8s.networking.v1.NetworkPolicy(
            f"{name}-{suffix}",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=suffix, namespace=args.namespace, labels=dict(args.labels)),
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self),
        )


def _default_deny_spec() -> k8s.networking.v1.NetworkPolicySpecArgs:
    """Every pod isolated both ways: whatever another policy does not allow is denied."""
    return k8s.networking.v1.NetworkPolicySpecArgs(
        pod_selector=k8s.meta.v1.LabelSelectorArgs(), policy_types=["Ingress", "Egress"]
    )


def _dns_spec() -> k8s.networking.v1.NetworkPolicySpecArgs:
    """Every pod may resolve names (:func:`dns_egress_rule`)."""
    return k8s.networking.v1.NetworkPolicySpecArgs(
        pod_selector=k8s.meta.v1.LabelSelectorArgs(), policy_types=["Egress"], egress=[dns_egress_rule()]
    )


def _model_server_ingress_spec(args: ServingNetworkPolicyArgs) -> k8s.networking.v1.NetworkPolicySpecArgs:
    """Model servers admit the gateway pods on the API ports and Prometheus on the metrics ports, nobody else."""
    return k8s.networking.v1.NetworkPolicySpecArgs(
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={COMPONENT_LABEL: MODEL_SERVER}),
        policy_types=["Ingress"],
        ingress=[
            k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=[gateway_peer()], ports=_ports(args.api_ports, "TCP")),
            k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                from_=[prometheus_peer(args.monitoring_namespace)], ports=_ports(args.metrics_ports, "TCP")
            ),
        ],
    )


def _model_loading_egress_spec(args: ServingNetworkPolicyArgs) -> k8s.networking.v1.NetworkPolicySpecArgs:
    """Model servers and engine builds may fetch weights over HTTPS and, on EKS, ask the Pod Identity agent for the
    model cache's credentials."""
    egress = [https_egress_rule()]
    if args.pod_identity:
        egress.append(
            k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                to=[
                    k8s.networking.v1.NetworkPolicyPeerArgs(
                        ip_block=k8s.networking.v1.IPBlockArgs(cidr=POD_IDENTITY_AGENT_CIDR)
                    )
                ],
                ports=_ports([POD_IDENTITY_AGENT_PORT], "TCP"),
            )
        )
    loaders = k8s.meta.v1.LabelSelectorArgs(
        match_expressions=[
            k8s.meta.v1.LabelSelectorRequirementArgs(
                key=COMPONENT_LABEL, operator="In", values=[MODEL_SERVER, ENGINE_BUILD]
            )
        ]
    )
    return k8s.networking.v1.NetworkPolicySpecArgs(pod_selector=loaders, policy_types=["Egress"], egress=egress)


def _kv_transfer_spec(flow: KvTransferFlow) -> k8s.networking.v1.NetworkPolicySpecArgs:
    """The pods of one disaggregated model's two roles reach each other, and no other pod: on the side channel (the
    decode opens the handshake; both ways, as vLLM's push mode reverses it), over UCX on any TCP port."""
    ports = (
        [k8s.networking.v1.NetworkPolicyPortArgs(protocol="TCP")]
        if flow.any_port
        else _ports([KV_SIDE_CHANNEL_PORT], "TCP")
    )
    roles = k8s.meta.v1.LabelSelectorArgs(
        match_expressions=[
            k8s.meta.v1.LabelSelectorRequirementArgs(key=NAME_LABEL, operator="In", values=[flow.decode, flow.prefill])
        ],
        match_labels={COMPONENT_LABEL: MODEL_SERVER},
    )
    peers = [k8s.networking.v1.NetworkPolicyPeerArgs(pod_selector=roles)]
    return k8s.networking.v1.NetworkPolicySpecArgs(
        pod_selector=roles,
        policy_types=["Ingress", "Egress"],
        ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=peers, ports=ports)],
        egress=[k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=peers, ports=ports)],
    )
