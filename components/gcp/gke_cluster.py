"""``GkeCluster``: a minimal private GKE Standard cluster that TPU node pools join.

What it builds, and why:

* its own VPC and subnet (VPC-native, with secondary ranges for pods and services) instead of the project's
  ``default`` network, so the cluster's address plan and firewall surface are owned by this stack; Private Google
  Access for Google APIs and a Cloud NAT so private nodes can still pull public images (vLLM's TPU image is on
  Docker Hub);
* private nodes always; a private control-plane endpoint when ``private_endpoint`` (always in prod), otherwise
  a public endpoint restricted to an explicit master-authorized-networks allowlist (never ``0.0.0.0/0``);
* Workload Identity (``<project>.svc.id.goog``) so pods get Google credentials per Kubernetes service account,
  with the GKE metadata server on every node pool;
* a release channel (STABLE in prod, REGULAR elsewhere), shielded nodes, and application-layer secrets
  encryption with a Cloud KMS key that rotates every 90 days;
* CIS GKE Benchmark hardening: VPC flow logs on the subnet (every flow, 5-second aggregation, all metadata) and
  intranode visibility so pod-to-pod traffic on one node reaches the flow logs too; GKE Dataplane V2
  (``ADVANCED_DATAPATH``), which enforces Kubernetes NetworkPolicy with its built-in eBPF datapath (no Calico
  add-on to enable); Binary Authorization enforcing the project's singleton policy
  (``PROJECT_SINGLETON_POLICY_ENFORCE``); and client-certificate authentication explicitly off
  (``issue_client_certificate: false``), so only IAM-backed credentials reach the API server. The Binary
  Authorization *policy* itself is project-wide and, like the project's APIs, owned by project bootstrap: this
  stack turns enforcement on but does not rewrite another team's singleton policy (a documented exception);
* explicit, logged VPC firewall rules instead of the network's implied behaviour: a deny-all ingress rule at the
  lowest priority, and the allowances GKE and the TPU pools need (the control plane to the kubelet and
  metrics-server, node to node, pod to pod, and Google's load-balancer health checks); GKE keeps creating its own
  allow rules at priority 1000, which win over the deny-all as these do (:func:`firewall_rules`);
* no default node pool (``remove_default_node_pool`` with ``initial_node_count=1``, as the provider requires),
  a small system node pool for cluster add-ons (TPU nodes are tainted, so kube-dns and friends need somewhere to
  run), and a least-privilege node service account instead of the Compute Engine default (which has Editor);
* one ``pulumi_kubernetes.Provider`` built from the cluster's endpoint and CA, authenticating through
  ``gke-gcloud-auth-plugin`` (the exec plugin ``gcloud container clusters get-credentials`` writes).

Location: prod clusters are regional (replicated control plane); others are zonal in ``zone`` (one control-plane
replica, cheaper). TPU node pools always pin their nodes to ``zone``, where the TPU capacity is.

The component does not build its GCP provider: pass one with ``opts=ResourceOptions(providers=[gcp_provider])``
and every child inherits it. The project must already have the Compute, Kubernetes Engine and Cloud KMS APIs
enabled (project bootstrap is usually owned centrally).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from inferplane.components.capacity.system_nodes import gke_system_pool_nodes
from inferplane.components.catalog.system_nodes import DEFAULT_GKE_SYSTEM_MACHINE_TYPE
from inferplane.components.spec.gcp_labels import label_problems
from inferplane.components.spec.input_errors import InputErrors, raise_input_errors
from inferplane.components.spec.platform_spec import Environment

ReleaseChannel = Literal["RAPID", "REGULAR", "STABLE"]

KEY_ROTATION_PERIOD = "7776000s"
"""90 days, Cloud KMS's recommended maximum for symmetric keys (cloud.google.com/kms/docs/key-rotation)."""

GKE_SERVICE_AGENT = "serviceAccount:service-{number}@container-engine-robot.iam.gserviceaccount.com"
"""The GKE service agent, which encrypts and decrypts the Secrets' data keys with the cluster's key."""

NODE_SERVICE_ACCOUNT_ROLES: tuple[str, ...] = (
    "roles/container.defaultNodeServiceAccount",
    "roles/artifactregistry.reader",
)
"""The node service account's only roles: what GKE nodes need for logging, monitoring and image pulls
(cloud.google.com/kubernetes-engine/docs/how-to/hardening-your-cluster#use_least_privilege_sa), plus reading
Artifact Registry for mirrored images."""

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
"""With a dedicated service account, IAM (not access scopes) limits what nodes can do; Google's recommendation."""


# The two log settings are built when a cluster is, not at import: ``gcp.compute`` is pulumi_gcp's largest module
# (0.9 s of CPU to import), and every program that imports the platform (an EKS-only preview, the policy pack, the
# provider) would pay it for nothing.
def flow_log_config() -> gcp.compute.SubnetworkLogConfigArgs:
    """Subnet flow logs: every flow sampled (1.0; the provider's default is 0.5), aggregated per 5 seconds, with all
    metadata (enum values from pulumi_gcp's ``SubnetworkLogConfigArgs``)."""
    return gcp.compute.SubnetworkLogConfigArgs(
        aggregation_interval="INTERVAL_5_SEC", flow_sampling=1.0, metadata="INCLUDE_ALL_METADATA"
    )


def firewall_log_config() -> gcp.compute.FirewallLogConfigArgs:
    """Firewall Rules Logging on every rule the component declares, with all metadata (pulumi_gcp
    ``FirewallLogConfigArgs``: ``EXCLUDE_ALL_METADATA`` or ``INCLUDE_ALL_METADATA``)."""
    return gcp.compute.FirewallLogConfigArgs(metadata="INCLUDE_ALL_METADATA")


DENY_ALL_PRIORITY = 65535
"""The lowest priority a VPC firewall rule can have (pulumi_gcp ``FirewallArgs.priority``: 0-65535, lower wins): every
allow rule, GKE's own included, takes precedence over the deny-all."""

ALLOW_PRIORITY = 1000
"""The priority GKE gives the rules it creates itself (cloud.google.com/kubernetes-engine/docs/concepts/firewall-rules);
the component's allow rules restate those rules at the same priority, logged."""

CONTROL_PLANE_PORTS = ("443", "10250")
"""The control plane reaches metrics-server on TCP 443 and the kubelet on TCP 10250 (GKE's ``gke-...-master`` rule,
cloud.google.com/kubernetes-engine/docs/concepts/firewall-rules)."""

POD_PROTOCOLS = ("tcp", "udp", "sctp", "icmp", "esp", "ah")
"""What GKE's ``gke-...-all`` rule lets pods send to one another, every port (same page)."""

HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
"""Source ranges of Google Cloud load-balancer health checks (cloud.google.com/load-balancing/docs/firewall-rules)."""

NODE_PORT_RANGE = "30000-32767"
"""Kubernetes' default NodePort range (kube-apiserver ``--service-node-port-range``), from which a LoadBalancer Service
with ``externalTrafficPolicy: Local`` (the gateway's) gets the ``healthCheckNodePort`` its load balancer probes
(GKE "LoadBalancer Service parameters")."""

DATAPATH_PROVIDER = "ADVANCED_DATAPATH"
"""GKE Dataplane V2: NetworkPolicy is enforced by the datapath itself (pulumi_gcp: "Set to ``ADVANCED_DATAPATH``
to enable Dataplane v2")."""

BINARY_AUTHORIZATION_MODE = "PROJECT_SINGLETON_POLICY_ENFORCE"
"""Binary Authorization evaluates the project's singleton policy for every pod (the other value is ``DISABLED``)."""

GKE_METADATA = "GKE_METADATA"
"""Workload metadata mode that serves Workload Identity credentials and hides the node's own."""

KUBECONFIG_EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"
GKE_AUTH_PLUGIN = "gke-gcloud-auth-plugin"
"""The exec credential plugin GKE requires since 1.26 (cloud.google.com/kubernetes-engine/docs/how-to/
cluster-access-for-kubectl#install_plugin)."""

_NAME = re.compile(r"^[a-z][-a-z0-9]{0,22}[a-z0-9]$")


def service_agent_key(
    name: str,
    *,
    grant_name: str,
    key_ring: pulumi.Input[str],
    project: str,
    agent: str,
    labels: Mapping[str, str],
    protect: bool,
    parent: pulumi.Resource,
) -> tuple[gcp.kms.CryptoKey, gcp.kms.CryptoKeyIAMMember]:
    """A rotating customer-managed key in ``key_ring`` and one Google service agent's grant to encrypt and decrypt
    with it (``agent`` names the agent with ``{number}`` for the project number, which is looked up)."""
    key = gcp.kms.CryptoKey(
        name,
        key_ring=key_ring,
        purpose="ENCRYPT_DECRYPT",
        rotation_period=KEY_ROTATION_PERIOD,
        labels=labels,
        opts=pulumi.ResourceOptions(parent=parent, protect=protect),
    )
    number = gcp.organizations.get_project_output(
        project_id=project, opts=pulumi.InvokeOutputOptions(parent=parent)
    ).number
    grant = gcp.kms.CryptoKeyIAMMember(
        grant_name,
        crypto_key_id=key.id,
        role="roles/cloudkms.cryptoKeyEncrypterDecrypter",
        member=number.apply(lambda n: agent.format(number=n)),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return key, grant


@dataclass(frozen=True)
class GkeClusterArgs:
    """Inputs of :class:`GkeCluster`. Defaults are the secure choice."""

    project: str
    """GCP project id."""
    region: str
    """Region of the network, the KMS key and (in prod) the control plane."""
    zone: str
    """Zone of the control plane outside prod and of every TPU node pool."""
    environment: Environment
    """dev, staging or prod: decides location, release channel, deletion protection and ``protect``."""
    private_endpoint: bool = True
    """Serve the control plane on a private IP only. Required in prod."""
    master_authorized_cidrs: tuple[str, ...] = ()
    """CIDRs allowed to reach the control plane; required when the endpoint is public."""
    release_channel: ReleaseChannel | None = None
    """GKE release channel; STABLE in prod and REGULAR elsewhere when not given."""
    node_cidr: str = "10.10.0.0/20"
    """Primary range of the subnet: node IPs (4096 addresses)."""
    pod_cidr: str = "10.16.0.0/14"
    """Secondary range for pod IPs."""
    service_cidr: str = "10.20.0.0/20"
    """Secondary range for ClusterIP services."""
    system_machine_type: str = DEFAULT_GKE_SYSTEM_MACHINE_TYPE
    """Machine type of the system node pool (cluster add-ons and the GKE gateway; ``gcp.system_machine_type``)."""
    load_balancer_health_checks: bool = True
    """Let Google's load-balancer health checks reach the nodes' NodePort range (a LoadBalancer Service, such as the
    gateway's internal load balancer in staging and prod, needs it)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """GCP resource labels for every labelled child (lowercase; see :mod:`components.spec.gcp_labels`)."""


def _networks(args: GkeClusterArgs, errors: InputErrors) -> None:
    ranges: dict[str, ipaddress.IPv4Network] = {}
    for field_name in ("node_cidr", "pod_cidr", "service_cidr"):
        value = getattr(args, field_name)
        try:
            ranges[field_name] = ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            errors.append((field_name, f"{value!r} is not an IPv4 CIDR block: {exc}"))
    names = list(ranges)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            if ranges[first].overlaps(ranges[second]):
                errors.append((second, f"{ranges[second]} overlaps {first} {ranges[first]}"))
    for i, cidr in enumerate(args.master_authorized_cidrs):
        try:
            network = ipaddress.ip_network(cidr, strict=True)
        except ValueError as exc:
            errors.append((f"master_authorized_cidrs[{i}]", f"{cidr!r} is not a CIDR block: {exc}"))
            continue
        if network.prefixlen == 0:
            errors.append((f"master_authorized_cidrs[{i}]", f"{cidr} opens the control plane to everyone"))


def validate(name: str, args: GkeClusterArgs) -> InputErrors:
    """Every problem with ``args``, each naming its field; empty when the cluster can be built."""
    errors: InputErrors = []
    if not _NAME.match(name):
        errors.append(("name", f"{name!r}: lowercase letters, digits and '-', 2-24 characters (node account id)"))
    if not args.zone.startswith(f"{args.region}-"):
        errors.append(("zone", f"{args.zone!r} is not a zone of region {args.region}"))
    if args.environment == "prod" and not args.private_endpoint:
        errors.append(("private_endpoint", "prod clusters serve the control plane on a private endpoint only"))
    if not args.private_endpoint and not args.master_authorized_cidrs:
        errors.append(("master_authorized_cidrs", "a public endpoint needs an explicit CIDR allowlist"))
    _networks(args, errors)
    errors += [("labels", problem) for problem in label_problems(args.labels)]
    return errors


def gke_kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig for one GKE cluster that authenticates through ``gke-gcloud-auth-plugin``.

    The same shape ``gcloud container clusters get-credentials`` writes; JSON is valid YAML.
    """
    context = f"gke_{cluster_name}"
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {"server": f"https://{endpoint}", "certificate-authority-data": ca_certificate},
                }
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
            "users": [
                {
                    "name": context,
                    "user": {
                        "exec": {
                            "apiVersion": KUBECONFIG_EXEC_API_VERSION,
                            "command": GKE_AUTH_PLUGIN,
                            "installHint": "Install gke-gcloud-auth-plugin: "
                            "gcloud components install gke-gcloud-auth-plugin",
                            "provideClusterInfo": True,
                            "interactiveMode": "IfAvailable",
                        }
                    },
                }
            ],
        },
        indent=2,
    )


class GkeCluster(pulumi.ComponentResource):
    """A private GKE Standard cluster with Workload Identity, encrypted secrets and no default node pool."""

    cluster: gcp.container.Cluster
    """The GKE cluster."""
    provider: k8s.Provider
    """The Kubernetes provider every workload on this cluster uses."""
    kubeconfig: pulumi.Output[str]
    """Kubeconfig (exec plugin, no credentials in it)."""
    node_service_account_email: pulumi.Output[str]
    """The service account node pools run as."""
    key_ring: gcp.kms.KeyRing
    """The cluster's Cloud KMS key ring (in ``region``): other regional services' CMEK keys go beside the secrets
    key."""

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # Refuse before registering anything: bad input leaves nothing half-declared.
        raise_input_errors(f"The input properties for GKE cluster {name!r} are invalid.", validate(name, args))

        super().__init__("inferplane:index:GkeCluster", name, None, opts)

        prod = args.environment == "prod"
        self.project = args.project
        self.region = args.region
        self.zone = args.zone
        self.location = args.region if prod else args.zone
        """Where the control plane runs: the region in prod, the zone elsewhere."""
        self.workload_pool = f"{args.project}.svc.id.goog"
        """Workload Identity pool: Kubernetes service accounts map to ``serviceAccount:<pool>[ns/ksa]``."""
        labels = dict(args.labels)

        self.network, self.subnetwork = self._network(name, args)
        self.firewall = firewall_rules(name, args, self.network, pulumi.ResourceOptions(parent=self))
        self.key_ring, self.secrets_key, key_grant = self._secrets_encryption(name, args, labels, prod)
        self.node_service_account_email, node_grants = self._node_identity(name, args)
        self.cluster = self._cluster(name, args, labels, prod, depends_on=[key_grant, *node_grants])
        self.system_pool = self._system_pool(name, args, labels)
        self.kubeconfig, self.provider = self._kubernetes(name)

        self.register_outputs(
            {
                "clusterName": self.cluster.name,
                "endpoint": self.cluster.endpoint,
                "location": self.location,
                "workloadPool": self.workload_pool,
                "nodeServiceAccount": self.node_service_account_email,
                "kubeconfig": self.kubeconfig,
            }
        )

    def _network(self, name: str, args: GkeClusterArgs) -> tuple[gcp.compute.Network, gcp.compute.Subnetwork]:
        """The cluster's own VPC and flow-logged subnet (pods and services as secondary ranges), and the Cloud NAT
        that lets private nodes pull public images."""
        child = pulumi.ResourceOptions(parent=self)
        network = gcp.compute.Network(
            f"{name}-network",
            project=args.project,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            description=f"inferplane GKE network for {name}",
            opts=child,
        )
        subnetwork = gcp.compute.Subnetwork(
            f"{name}-subnet",
            project=args.project,
            region=args.region,
            network=network.id,
            ip_cidr_range=args.node_cidr,
            private_ip_google_access=True,
            log_config=flow_log_config(),
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="pods", ip_cidr_range=args.pod_cidr),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="services", ip_cidr_range=args.service_cidr),
            ],
            opts=child,
        )
        router = gcp.compute.Router(
            f"{name}-router", project=args.project, region=args.region, network=network.id, opts=child
        )
        gcp.compute.RouterNat(
            f"{name}-nat",
            project=args.project,
            region=args.region,
            router=router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=child,
        )
        return network, subnetwork

    def _secrets_encryption(
        self, name: str, args: GkeClusterArgs, labels: Mapping[str, str], prod: bool
    ) -> tuple[gcp.kms.KeyRing, gcp.kms.CryptoKey, gcp.kms.CryptoKeyIAMMember]:
        """The key ring, the rotating key that encrypts Secrets in etcd, and GKE's grant to use it (which the
        cluster waits for)."""
        # Cloud KMS never deletes key rings; a destroyed stack leaves an empty ring behind (no cost) and its key
        # versions are destroyed after the scheduled-destruction period.
        key_ring = gcp.kms.KeyRing(
            f"{name}-keyring", project=args.project, location=args.region, opts=pulumi.ResourceOptions(parent=self)
        )
        # Losing the key loses every Secret in etcd: guarded like the cluster itself.
        secrets_key, key_grant = service_agent_key(
            f"{name}-secrets",
            grant_name=f"{name}-secrets-gke",
            key_ring=key_ring.id,
            project=args.project,
            agent=GKE_SERVICE_AGENT,
            labels=labels,
            protect=prod,
            parent=self,
        )
        return key_ring, secrets_key, key_grant

    def _node_identity(
        self, name: str, args: GkeClusterArgs
    ) -> tuple[pulumi.Output[str], list[gcp.projects.IAMMember]]:
        """The least-privilege node service account (its email) and its project role grants."""
        child = pulumi.ResourceOptions(parent=self)
        node_account = gcp.serviceaccount.Account(
            f"{name}-node-sa",
            project=args.project,
            account_id=f"{name}-nodes",
            display_name=f"GKE nodes of {name}",
            opts=child,
        )
        grants = [
            gcp.projects.IAMMember(
                f"{name}-node-sa-{role.removeprefix('roles/').replace('.', '-').lower()}",
                project=args.project,
                role=role,
                member=node_account.member,
                opts=child,
            )
            for role in NODE_SERVICE_ACCOUNT_ROLES
        ]
        return node_account.email, grants

    def _cluster(
        self,
        name: str,
        args: GkeClusterArgs,
        labels: Mapping[str, str],
        prod: bool,
        *,
        depends_on: list[pulumi.Resource],
    ) -> gcp.container.Cluster:
        """The hardened private cluster itself, created once its secrets key and node roles are usable."""
        return gcp.container.Cluster(
            f"{name}-cluster",
            project=args.project,
            location=self.location,
            network=self.network.id,
            subnetwork=self.subnetwork.id,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name="pods", services_secondary_range_name="services"
            ),
            remove_default_node_pool=True,
            initial_node_count=1,
            private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True, enable_private_endpoint=args.private_endpoint
            ),
            master_authorized_networks_config=_master_authorized_networks(args.master_authorized_cidrs),
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(workload_pool=self.workload_pool),
            release_channel=gcp.container.ClusterReleaseChannelArgs(
                channel=args.release_channel or ("STABLE" if prod else "REGULAR")
            ),
            enable_shielded_nodes=True,
            datapath_provider=DATAPATH_PROVIDER,
            enable_intranode_visibility=True,
            binary_authorization=gcp.container.ClusterBinaryAuthorizationArgs(
                evaluation_mode=BINARY_AUTHORIZATION_MODE
            ),
            master_auth=gcp.container.ClusterMasterAuthArgs(
                client_certificate_config=gcp.container.ClusterMasterAuthClientCertificateConfigArgs(
                    issue_client_certificate=False
                )
            ),
            database_encryption=gcp.container.ClusterDatabaseEncryptionArgs(
                state="ENCRYPTED", key_name=self.secrets_key.id
            ),
            deletion_protection=prod,
            resource_labels=labels,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on, protect=prod),
        )

    def _system_pool(self, name: str, args: GkeClusterArgs, labels: Mapping[str, str]) -> gcp.container.NodePool:
        """The autoscaled node pool where cluster add-ons and the gateway run (TPU nodes are tainted against them),
        between :func:`~components.capacity.system_nodes.gke_system_pool_nodes` nodes, as sizing checks."""
        min_nodes, max_nodes = gke_system_pool_nodes(args.environment)
        return gcp.container.NodePool(
            f"{name}-system",
            project=args.project,
            location=self.location,
            cluster=self.cluster.name,
            initial_node_count=1,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=min_nodes, total_max_node_count=max_nodes
            ),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=node_config(
                machine_type=args.system_machine_type,
                service_account=self.node_service_account_email,
                labels=labels,
            ),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initial_node_count"]),
        )

    def _kubernetes(self, name: str) -> tuple[pulumi.Output[str], k8s.Provider]:
        """The cluster's kubeconfig and the Kubernetes provider built from it, usable once add-ons have nodes."""
        ca_certificate = self.cluster.master_auth.apply(lambda auth: auth.cluster_ca_certificate or "")
        kubeconfig = pulumi.Output.all(self.cluster.name, self.cluster.endpoint, ca_certificate).apply(
            lambda parts: gke_kubeconfig(f"{self.project}_{self.location}_{parts[0]}", parts[1], parts[2])
        )
        provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=kubeconfig,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_pool]),
        )
        return kubeconfig, provider


def firewall_rules(
    name: str, args: GkeClusterArgs, network: gcp.compute.Network, opts: pulumi.ResourceOptions
) -> list[gcp.compute.Firewall]:
    """The network's ingress rules, each logged: deny everything at the lowest priority, then allow what GKE's own
    rules allow (cloud.google.com/kubernetes-engine/docs/concepts/firewall-rules) and the health checks.

    * ``{name}-allow-control-plane``: TCP 443 and 10250 from the subnet. GKE's rule takes the control plane's /28;
      a cluster with Private Service Connect (this one: it sets no ``master_ipv4_cidr_block``) has none, and takes
      its control plane's internal endpoint address from the subnet's primary range (GKE IP address planning).
    * ``{name}-allow-nodes``: TCP and UDP 1-65535 and ICMP from the subnet (GKE's ``gke-...-vms``), which also
      carries the traffic between the hosts of a multi-host TPU slice.
    * ``{name}-allow-pods``: :data:`POD_PROTOCOLS` from the pod range (GKE's ``gke-...-all``).
    * ``{name}-allow-health-checks`` (with ``load_balancer_health_checks``): TCP :data:`NODE_PORT_RANGE` from
      :data:`HEALTH_CHECK_RANGES`.
    """
    allow = gcp.compute.FirewallAllowArgs
    every_port = ["1-65535"]
    rules: dict[str, tuple[str, list[str], list[gcp.compute.FirewallAllowArgs]]] = {
        "control-plane": (
            "the control plane to metrics-server and the kubelet",
            [args.node_cidr],
            [allow(protocol="tcp", ports=list(CONTROL_PLANE_PORTS))],
        ),
        "nodes": (
            "node to node and pod",
            [args.node_cidr],
            [allow(protocol="tcp", ports=every_port), allow(protocol="udp", ports=every_port), allow(protocol="icmp")],
        ),
        "pods": ("pod to pod", [args.pod_cidr], [allow(protocol=protocol) for protocol in POD_PROTOCOLS]),
    }
    if args.load_balancer_health_checks:
        rules["health-checks"] = (
            "load-balancer health checks to the node ports",
            list(HEALTH_CHECK_RANGES),
            [allow(protocol="tcp", ports=[NODE_PORT_RANGE])],
        )
    deny = gcp.compute.Firewall(
        f"{name}-deny-all-ingress",
        project=args.project,
        network=network.id,
        description="Deny all ingress nothing else allows (lowest priority), logged",
        direction="INGRESS",
        priority=DENY_ALL_PRIORITY,
        source_ranges=["0.0.0.0/0"],
        denies=[gcp.compute.FirewallDenyArgs(protocol="all")],
        log_config=firewall_log_config(),
        opts=opts,
    )
    allowed = [
        gcp.compute.Firewall(
            f"{name}-allow-{suffix}",
            project=args.project,
            network=network.id,
            description=f"Allow {what} (GKE's own rule, restated and logged)",
            direction="INGRESS",
            priority=ALLOW_PRIORITY,
            source_ranges=sources,
            allows=allows,
            log_config=firewall_log_config(),
            opts=opts,
        )
        for suffix, (what, sources, allows) in rules.items()
    ]
    return [deny, *allowed]


def _master_authorized_networks(cidrs: tuple[str, ...]) -> gcp.container.ClusterMasterAuthorizedNetworksConfigArgs:
    """The control plane's allowlist, one named block per CIDR; Google's public ranges are never let in."""
    return gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
        cidr_blocks=[
            gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                cidr_block=cidr, display_name=f"allowlist-{i}"
            )
            for i, cidr in enumerate(cidrs)
        ],
        gcp_public_cidrs_access_enabled=False,
    )


def node_config(
    *,
    machine_type: str,
    service_account: pulumi.Input[str],
    labels: Mapping[str, str],
    kubernetes_labels: Mapping[str, str] | None = None,
    taints: list[gcp.container.NodePoolNodeConfigTaintArgs] | None = None,
    spot: bool = False,
    disk_size_gb: int | None = None,
) -> gcp.container.NodePoolNodeConfigArgs:
    """The hardened node configuration every node pool on a :class:`GkeCluster` shares.

    Dedicated service account with the cloud-platform scope (IAM decides), the GKE metadata server (Workload
    Identity), secure boot and integrity monitoring, GCP labels on the VMs and Kubernetes labels/taints on nodes.
    """
    return gcp.container.NodePoolNodeConfigArgs(
        machine_type=machine_type,
        service_account=service_account,
        oauth_scopes=[CLOUD_PLATFORM_SCOPE],
        workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode=GKE_METADATA),
        shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
            enable_secure_boot=True, enable_integrity_monitoring=True
        ),
        metadata={"disable-legacy-endpoints": "true"},
        resource_labels=dict(labels),
        labels=dict(kubernetes_labels or {}),
        taints=taints or [],
        spot=spot,
        disk_size_gb=disk_size_gb,
    )
