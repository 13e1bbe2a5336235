"""``MemorystoreRedis``: the GKE gateway's shared budget store, a Memorystore for Redis instance in the cluster's VPC.

Why Memorystore for Redis (``gcp.redis.Instance``) and not Memorystore for Valkey (``gcp.memorystore.Instance``):
Redis reaches our VPC by direct peering with nothing but ``authorized_network`` (Google creates the peering), while
Valkey is reached only through Private Service Connect, which needs a service connection policy per network and
region (``gcp.networkconnectivity.ServiceConnectionPolicy``) and a subnet for its endpoints first. The processor's
budgets need only ``INCRBY``/``EXPIRE``-class commands, which every Redis-protocol store has.

Secure by default, and refused when it would not be:

* private only: ``connect_mode = "DIRECT_PEERING"`` into the GKE cluster's own network (Memorystore has no public
  IP at all), on an explicit ``/29`` outside the cluster's node, pod and service ranges; VPC-native pods reach it
  because peering exchanges every subnet route, secondary ranges included;
* TLS (``transit_encryption_mode = "SERVER_AUTHENTICATION"``; Memorystore then serves on port 6378, read from the
  ``port`` output) with the instance's own certificate authority (``server_ca_certs``, handed out as a PEM bundle
  the processor trusts alone), and Redis AUTH (``auth_enabled``; Memorystore generates the string, a secret output);
* ``STANDARD_HA`` (a replica in another zone with automatic failover) when ``high_availability``; prod is refused
  without it;
* encryption at rest with a dedicated Cloud KMS key in the cluster's key ring, rotating every 90 days, that only the
  Memorystore service agent may use (CMEK), when a key ring is given;
* the platform's GCP labels, and ``protect`` plus deletion protection in prod.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

import pulumi
import pulumi_gcp as gcp

from inferplane.components.gcp.gke_cluster import service_agent_key
from inferplane.components.spec.gcp_labels import label_problems
from inferplane.components.spec.input_errors import InputErrors, raise_input_errors
from inferplane.components.spec.platform_spec import Environment

REDIS_VERSION = "REDIS_7_2"
"""The newest Memorystore for Redis version (pulumi_gcp 10.2 ``redis.Instance`` examples; Memorystore for Redis has
no 8.x)."""

TLS_PORT = 6378
"""Memorystore for Redis serves only this port once in-transit encryption is on (6379 without it); the ``port``
output says the same after deploy, but the gateway's NetworkPolicy needs the number at plan time."""

TLS_MODE = "SERVER_AUTHENTICATION"
"""``transit_encryption_mode``: TLS 1.2+ with a per-instance CA (the other value is ``DISABLED``)."""

CONNECT_MODE = "DIRECT_PEERING"
"""``connect_mode``: Google peers the instance's network with ``authorized_network`` itself; the alternative,
``PRIVATE_SERVICE_ACCESS``, needs a reserved global address and a Service Networking connection first."""

MEMORY_SIZE_GB = 1
"""The smallest instance: budgets are two counters per tenant per minute (a few hundred bytes each, expiring after
two minutes), so even thousands of tenants use well under a megabyte."""

DEFAULT_RESERVED_RANGE = "10.24.0.0/29"
"""Where the instance's addresses come from: outside :class:`~inferplane.components.gcp.gke_cluster.GkeClusterArgs`'
default node (10.10.0.0/20), pod (10.16.0.0/14) and service (10.20.0.0/20) ranges. A /29 is what direct peering
takes without read replicas."""

SERVICE_AGENT = "serviceAccount:service-{number}@cloud-redis.iam.gserviceaccount.com"
"""The Memorystore for Redis service agent, which uses the CMEK key (Memorystore docs, "Use customer-managed
encryption keys": grant it ``roles/cloudkms.cryptoKeyEncrypterDecrypter``)."""

_NAME = re.compile(r"^[a-z](?!.*--)[-a-z0-9]{0,29}[a-z0-9]$")
"""Instance ids are at most 40 characters; the name plus Pulumi's 8-character suffix must fit."""


@dataclass(frozen=True)
class MemorystoreRedisArgs:
    """Inputs of :class:`MemorystoreRedis`; the network and key ring come from the GKE cluster."""

    project: str
    """GCP project id."""
    region: str
    """Region of the instance (the cluster's)."""
    zone: str
    """Zone of the primary (the TPU pools' zone); with high availability the replica goes to another zone."""
    network: pulumi.Input[str]
    """The VPC network's id (``GkeCluster.network.id``): the only network peered with the instance."""
    environment: Environment
    """dev, staging or prod: prod needs high availability and gets ``protect`` and deletion protection."""
    high_availability: bool
    """``STANDARD_HA``: a replica in a second zone with automatic failover; otherwise ``BASIC`` (one node)."""
    key_ring: pulumi.Input[str] | None = None
    """Cloud KMS key ring id (the cluster's): a dedicated CMEK key is created in it. None: Google-managed keys."""
    reserved_ip_range: str = DEFAULT_RESERVED_RANGE
    """The /29 the instance's addresses come from; must not overlap the network's subnets or secondary ranges."""
    memory_size_gb: int = MEMORY_SIZE_GB
    """Instance memory in GiB."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """GCP labels for the instance and its key."""


def validate(name: str, args: MemorystoreRedisArgs) -> InputErrors:
    """Every problem with ``args``, each naming its field; empty when the instance can be built."""
    errors: InputErrors = []
    if not _NAME.match(name):
        errors.append(("name", f"{name!r}: lowercase letters, digits and single '-', 2-31 characters"))
    if not args.zone.startswith(f"{args.region}-"):
        errors.append(("zone", f"{args.zone!r} is not a zone of region {args.region}"))
    if args.environment == "prod" and not args.high_availability:
        errors.append(("high_availability", "prod needs STANDARD_HA (a failover replica in another zone)"))
    try:
        network = ipaddress.IPv4Network(args.reserved_ip_range, strict=True)
    except ValueError as exc:
        errors.append(("reserved_ip_range", f"{args.reserved_ip_range!r} is not an IPv4 CIDR block: {exc}"))
    else:
        if network.prefixlen != 29 or not network.is_private:
            errors.append(("reserved_ip_range", f"{network}: direct peering takes a private /29"))
    if not 1 <= args.memory_size_gb <= 300:
        errors.append(("memory_size_gb", f"{args.memory_size_gb}: Memorystore for Redis offers 1 to 300 GiB"))
    errors += [("labels", problem) for problem in label_problems(args.labels)]
    return errors


def pem_bundle(certificates: list[str]) -> str:
    """The instance's CA certificates as one PEM file (during a CA rotation there are two; trusting both keeps
    connections working across it)."""
    return "".join(cert if cert.endswith("\n") else f"{cert}\n" for cert in certificates)


def redis_url(host: str, port: int, auth: str) -> str:
    """``rediss://:<auth>@host:port``: TLS, the AUTH string as password (quoted: it must survive URL parsing)."""
    return f"rediss://:{quote(auth, safe='')}@{host}:{port}"


class MemorystoreRedis(pulumi.ComponentResource):
    """A private, TLS-only, authenticated Memorystore for Redis instance peered with one VPC network."""

    instance: gcp.redis.Instance
    """The Memorystore instance."""
    key: gcp.kms.CryptoKey | None
    """Its CMEK key (None without a key ring)."""
    host: pulumi.Output[str]
    """The instance's private IP."""
    port: pulumi.Output[int]
    """Its TLS port (6378 with in-transit encryption)."""
    auth_string: pulumi.Output[str]
    """The AUTH string, always secret."""
    ca_certificates: pulumi.Output[str]
    """The instance's server CA certificates, one PEM bundle."""
    url: pulumi.Output[str]
    """``rediss://:<auth>@host:port``, always secret."""

    def __init__(self, name: str, args: MemorystoreRedisArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # Refuse before registering anything: bad input leaves nothing half-declared.
        raise_input_errors(f"The input properties for Memorystore {name!r} are invalid.", validate(name, args))
        super().__init__("inferplane:index:MemorystoreRedis", name, None, opts)

        prod = args.environment == "prod"
        labels = dict(args.labels)
        self.key, key_grants = self._encryption_key(name, args, labels, prod)
        self.instance = self._instance(name, args, labels, prod, key=self.key, depends_on=key_grants)
        self.host = self.instance.host
        self.port = self.instance.port
        self.auth_string = pulumi.Output.secret(self.instance.auth_string)
        self.ca_certificates = self.instance.server_ca_certs.apply(
            lambda certs: pem_bundle([c.cert for c in certs or [] if c.cert])
        )
        self.url = pulumi.Output.secret(
            pulumi.Output.all(self.host, self.port, self.auth_string).apply(
                lambda values: redis_url(str(values[0]), int(values[1]), str(values[2]))
            )
        )
        self.register_outputs(
            {
                "host": self.host,
                "port": self.port,
                "authString": self.auth_string,
                "caCertificates": self.ca_certificates,
                "url": self.url,
            }
        )

    def _encryption_key(
        self, name: str, args: MemorystoreRedisArgs, labels: Mapping[str, str], prod: bool
    ) -> tuple[gcp.kms.CryptoKey | None, list[pulumi.Resource]]:
        """The instance's CMEK key and the Memorystore service agent's grant to use it, which the instance waits
        for; no key and nothing to wait for without a key ring (Google-managed keys)."""
        if args.key_ring is None:
            return None, []
        # Losing the key loses the instance's data: guarded like the instance.
        key, grant = service_agent_key(
            f"{name}-key",
            grant_name=f"{name}-key-redis",
            key_ring=args.key_ring,
            project=args.project,
            agent=SERVICE_AGENT,
            labels=labels,
            protect=prod,
            parent=self,
        )
        return key, [grant]

    def _instance(
        self,
        name: str,
        args: MemorystoreRedisArgs,
        labels: Mapping[str, str],
        prod: bool,
        *,
        key: gcp.kms.CryptoKey | None,
        depends_on: list[pulumi.Resource],
    ) -> gcp.redis.Instance:
        """The private, TLS-only, AUTH-protected instance, peered with ``args.network`` alone and encrypted with
        ``key`` when there is one."""
        return gcp.redis.Instance(
            f"{name}-redis",
            project=args.project,
            region=args.region,
            location_id=args.zone,
            tier="STANDARD_HA" if args.high_availability else "BASIC",
            memory_size_gb=args.memory_size_gb,
            redis_version=REDIS_VERSION,
            authorized_network=args.network,
            connect_mode=CONNECT_MODE,
            reserved_ip_range=args.reserved_ip_range,
            auth_enabled=True,
            transit_encryption_mode=TLS_MODE,
            read_replicas_mode="READ_REPLICAS_DISABLED",
            customer_managed_key=key.id if key is not None else None,
            display_name=f"inferplane gateway budgets ({args.environment})",
            labels=labels,
            deletion_protection=prod,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on, protect=prod),
        )
