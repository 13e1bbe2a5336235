"""Evaluating a Pulumi program in-process under Pulumi's mock engine, recording every registration.

This is how inferplane previews a stack without the ``pulumi`` CLI, a backend or cloud credentials, and how the
tests prove what components register. The program runs exactly as under ``pulumi preview``: the same
``ComponentResource`` code, the same ``...Args`` classes, the same serialisation of inputs over the resource
monitor protocol. Only the engine's answers (ids and output properties) are invented, by :class:`PlatformMocks`,
so that dependent resources see plausible values.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.output import Unknown
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.settings import reset_options, set_root_resource
from pulumi.runtime.stack import run_in_stack

SECRET_PLACEHOLDER = "[secret]"
UNKNOWN_PLACEHOLDER = "[unknown]"
"""A value the engine will only know after ``pulumi up`` (a computed output the mocks did not supply). Kept distinct
from ``null`` (an input that is not set) so policies can skip what they cannot judge, as the engine lets them."""


@dataclass(frozen=True)
class Registration:
    """One resource the program registered, as the engine saw it."""

    urn: str
    type: str
    name: str
    parent: str
    provider: str
    custom: bool
    protect: bool
    dependencies: tuple[str, ...]
    inputs: Mapping[str, Any]
    id: str | None = None
    outputs: Mapping[str, Any] = field(default_factory=dict)
    ignore_changes: tuple[str, ...] = ()
    """Input paths the engine leaves as they are live (``ResourceOptions.ignore_changes``): what another controller
    owns, such as an autoscaled Deployment's ``spec.replicas``."""


def _plain(value: Any) -> Any:
    """Inputs as JSON-able data: secrets become ``[secret]``, unknowns ``[unknown]``, resource refs their type."""
    if rpc.is_rpc_secret(value):
        return SECRET_PLACEHOLDER
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, pulumi.Resource):
        return f"<ref:{type(value).__name__}>"
    if isinstance(value, Unknown) or value == rpc.UNKNOWN:
        # Unknown during preview (a computed output the mocks did not supply): not the same as an unset input.
        return UNKNOWN_PLACEHOLDER
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, also keeping what the engine would: parent, provider, dependencies, protect."""

    def __init__(self, mocks: pulumi_mocks.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.stack_outputs: dict[str, Any] = {}
        self.stack_urn: str | None = None

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type == "pulumi:pulumi:Stack":
            self.stack_urn = response.urn
            return response
        inputs = rpc.deserialize_properties(request.object)
        state = self.resources[response.urn].state if response.urn in self.resources else {}
        self.registrations.append(
            Registration(
                urn=response.urn,
                type=request.type,
                name=request.name,
                parent=request.parent,
                provider=request.provider,
                custom=bool(request.custom),
                protect=bool(request.protect),
                dependencies=tuple(request.dependencies),
                inputs=_plain(inputs),
                id=response.id or None,
                outputs=_plain(state),
                ignore_changes=tuple(request.ignoreChanges),
            )
        )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        if request.urn == self.stack_urn:
            self.stack_outputs = _plain(rpc.deserialize_properties(request.outputs))
        return super().RegisterResourceOutputs(request)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation registered, in registration order, and the stack's outputs."""

    registrations: tuple[Registration, ...]
    outputs: Mapping[str, Any]

    def of_type(self, type_token: str) -> list[Registration]:
        """Registrations of one type token, in order."""
        return [r for r in self.registrations if r.type == type_token]

    def named(self, name: str) -> Registration:
        """The one registration with this logical name."""
        matches = [r for r in self.registrations if r.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} registrations named {name!r}")
        return matches[0]

    def children_of(self, urn: str) -> list[Registration]:
        """Direct children of a resource."""
        return [r for r in self.registrations if r.parent == urn]


def _config_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def evaluate(
    program: Callable[[], None],
    *,
    mocks: pulumi_mocks.Mocks,
    project: str = "inferplane",
    stack: str = "test",
    config: Mapping[str, Any] | None = None,
    secret_keys: tuple[str, ...] = (),
    preview: bool = True,
    root_directory: str | None = None,
) -> Evaluation:
    """Run ``program`` under ``mocks`` on a fresh event loop and a reset runtime; return what it registered.

    ``root_directory``: the project's directory, which ``pulumi.get_root_directory()`` returns to the program as
    under the CLI (the program reads files the stack names relative to it). The runtime is reset before and after,
    so nothing leaks from one evaluation into the next.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    monitor = RecordingMonitor(mocks)
    try:
        reset_options()
        set_all_config({k: _config_value(v) for k, v in (config or {}).items()}, list(secret_keys))
        pulumi_mocks.set_mocks(mocks, project=project, stack=stack, preview=preview, monitor=monitor)
        # set_mocks takes no root directory; the CLI hands it to the program through the same settings.
        pulumi_settings.SETTINGS.root_directory = root_directory
        # set_mocks makes a root stack for tests that build resources directly; the program gets its own, as
        # under the CLI, so its exports land on the stack that run_in_stack finishes.
        set_root_resource(None)  # type: ignore[arg-type]
        loop.run_until_complete(run_in_stack(program))
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
        asyncio.set_event_loop(None)
        set_all_config({}, [])
        reset_options()
    return Evaluation(registrations=tuple(monitor.registrations), outputs=monitor.stack_outputs)


MOCK_ACCOUNT_ID = "123456789012"
"""AWS's documentation account id: plausible in ARNs, never a real account."""

MOCK_GCP_PROJECT = "inferplane-mock"
MOCK_GCP_PROJECT_NUMBER = "123456789012"
"""A GCP project number has 12 digits; this one is made up."""


def _random_password(name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A random password's result."""
    # Deterministic, but of the requested length and alphabet, as the provider's result would be, and
    # different per resource name (two passwords of a program never coincide, as real ones would not).
    length = int(inputs.get("length") or 32)
    alphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789" + str(inputs.get("overrideSpecial") or "")
    seed = hashlib.sha256(name.encode()).digest()
    return {"result": "".join(alphabet[(seed[i % 32] + i * 7) % len(alphabet)] for i in range(length))}


class PlatformMocks(pulumi_mocks.Mocks):
    """Engine answers that look like a cloud's: ids, ARNs, endpoints, a kubeconfig.

    Every resource echoes its inputs (as a provider's state does) plus the computed properties of its type. Types
    without an entry get an id and an ARN-less echo. Add an entry when a component reads a computed output.
    """

    def __init__(self, region: str = "us-east-1") -> None:
        self.region = region

    def _arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{self.region}:{MOCK_ACCOUNT_ID}:{resource}"

    def computed(self, type_token: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Computed output properties for one resource (camelCase, as providers return them)."""
        if type_token.startswith("aws:"):
            return self._aws_computed(type_token, name, inputs)
        if type_token.startswith("gcp:"):
            return self._gcp_computed(type_token, name, inputs)
        if type_token == "random:index/randomPassword:RandomPassword":
            return _random_password(name, inputs)
        return {}

    def _aws_computed(self, type_token: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """AWS resources: what their family's components read, else an ARN of their service."""
        # The families claim disjoint type tokens (only EC2 claims a whole prefix), so their order does not matter.
        for family in (self._eks_computed, self._ec2_computed, self._account_computed, self._elasticache_computed):
            outputs = family(type_token, name, inputs)
            if outputs is not None:
                return outputs
        physical = inputs.get("name") or name
        service = type_token.split(":")[1].split("/", maxsplit=1)[0]
        return {"arn": self._arn(service, f"{type_token.rsplit(':', maxsplit=1)[-1].lower()}/{physical}")}

    def _eks_computed(self, type_token: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """EKS clusters, node groups and pod identity associations; None for other types."""
        if type_token == "aws:eks/cluster:Cluster":
            physical = inputs.get("name") or name
            # hashlib, not hash(): str hashes change per process, and plans must be byte-identical across runs.
            digest = hashlib.sha256(name.encode()).hexdigest()[:32].upper()
            endpoint = f"https://{digest}.gr7.{self.region}.eks.amazonaws.com"
            return {
                "arn": self._arn("eks", f"cluster/{physical}"),
                "endpoint": endpoint,
                "certificateAuthority": {"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMtbW9jay0tLS0tCg=="},
                "identities": [{"oidcs": [{"issuer": f"https://oidc.eks.{self.region}.amazonaws.com/id/MOCK"}]}],
                "vpcConfig": {
                    **dict(inputs.get("vpcConfig") or {}),
                    "clusterSecurityGroupId": f"sg-{name[:8]}0cluster",
                },
                "status": "ACTIVE",
            }
        if type_token == "aws:eks/nodeGroup:NodeGroup":
            group = inputs.get("nodeGroupName") or f"{inputs.get('nodeGroupNamePrefix') or ''}{name}"
            return {
                "arn": self._arn("eks", f"nodegroup/{inputs.get('clusterName')}/{group}/mock"),
                "nodeGroupName": group,
                "status": "ACTIVE",
                "resources": [
                    {"autoscalingGroups": [{"name": f"eks-{group}-mock"}], "remoteAccessSecurityGroupId": ""}
                ],
            }
        if type_token == "aws:eks/podIdentityAssociation:PodIdentityAssociation":
            association = f"a-{hashlib.sha256(name.encode()).hexdigest()[:17]}"
            return {
                "associationArn": self._arn("eks", f"podidentityassociation/{inputs.get('clusterName')}/{association}"),
                "associationId": association,
            }
        return None

    def _ec2_computed(self, type_token: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """EC2 resources (every ``aws:ec2/`` type gets at least an ARN); None for other types."""
        if type_token == "aws:ec2/placementGroup:PlacementGroup":
            physical = inputs.get("name") or name
            return {
                "arn": self._arn("ec2", f"placement-group/{physical}"),
                "name": physical,
                "placementGroupId": f"pg-{name}",
            }
        if type_token == "aws:ec2/eip:Eip":
            return {"allocationId": f"eipalloc-{name}", "publicIp": "198.51.100.10"}
        if type_token == "aws:ec2/launchTemplate:LaunchTemplate":
            return {"arn": self._arn("ec2", f"launch-template/lt-{name}"), "latestVersion": 1}
        if type_token.startswith("aws:ec2/"):
            kind = type_token.rsplit(":", maxsplit=1)[-1].lower()
            return {"arn": self._arn("ec2", f"{kind}/{name}")}
        return None

    def _account_computed(self, type_token: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """Account-wide resources (IAM roles, KMS keys, S3 buckets); None for other types."""
        if type_token == "aws:iam/role:Role":
            physical = inputs.get("name") or name
            return {
                "arn": f"arn:aws:iam::{MOCK_ACCOUNT_ID}:role/{physical}",
                "uniqueId": f"AROA{name.upper()[:16]}",
                "name": physical,
            }
        if type_token == "aws:kms/key:Key":
            return {"arn": self._arn("kms", f"key/{name}-0000-0000"), "keyId": f"{name}-0000-0000"}
        if type_token == "aws:s3/bucket:Bucket":
            # Pulumi auto-names buckets "<resource name>-<7 random characters>"; S3 ARNs have no region or account.
            bucket = inputs.get("bucket") or f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:7]}"
            return {"arn": f"arn:aws:s3:::{bucket}", "bucket": bucket}
        return None

    def _elasticache_computed(self, type_token: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """ElastiCache subnet groups, parameter groups and replication groups; None for other types."""
        if type_token == "aws:elasticache/subnetGroup:SubnetGroup":
            # Autonamed like Pulumi does, lower-cased as ElastiCache stores subnet group names.
            group_name = inputs.get("name") or f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:7]}"
            return {"arn": self._arn("elasticache", f"subnetgroup:{group_name}"), "name": group_name}
        if type_token == "aws:elasticache/parameterGroup:ParameterGroup":
            group_name = inputs.get("name") or f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:7]}"
            return {"arn": self._arn("elasticache", f"parametergroup:{group_name}"), "name": group_name}
        if type_token == "aws:elasticache/replicationGroup:ReplicationGroup":
            group = inputs.get("replicationGroupId") or f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:7]}"
            area, direction, number = [*self.region.split("-"), "", "", ""][:3]
            suffix = f"abc123.{area}{direction[:1]}{number}.cache.amazonaws.com"  # us-east-1 -> use1
            return {
                "arn": self._arn("elasticache", f"replicationgroup:{group}"),
                "replicationGroupId": group,
                "primaryEndpointAddress": f"master.{group}.{suffix}",
                "readerEndpointAddress": f"replica.{group}.{suffix}",
                "memberClusters": [f"{group}-{i:03d}" for i in range(1, int(inputs.get("numCacheClusters") or 1) + 1)],
            }
        return None

    def _gcp_computed(self, type_token: str, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """GCP resources: autonamed like Pulumi (``<name>-<7 hex>``), plus what components read."""
        physical = inputs.get("name") or f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:7]}"
        project = inputs.get("project") or MOCK_GCP_PROJECT
        outputs: dict[str, Any] = {"name": physical, "project": project}
        if type_token == "gcp:container/cluster:Cluster":
            private = bool((inputs.get("privateClusterConfig") or {}).get("enablePrivateEndpoint"))
            location = inputs.get("location")
            outputs |= {
                # A private endpoint is an address in the cluster's subnet; a public one a Google address.
                "endpoint": "10.10.0.2" if private else "34.118.227.10",
                "masterAuth": {
                    "clusterCaCertificate": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMtbW9jay0tLS0tCg==",
                    "clientCertificateConfig": {"issueClientCertificate": False},
                },
                "masterVersion": "1.33.5-gke.1201000",
                "selfLink": f"https://container.googleapis.com/v1/projects/{project}/locations/{location}/clusters/{physical}",
            }
        elif type_token == "gcp:serviceaccount/account:Account":
            email = f"{inputs.get('accountId')}@{project}.iam.gserviceaccount.com"
            outputs |= {"email": email, "member": f"serviceAccount:{email}", "uniqueId": "104" + "0" * 18}
        elif type_token == "gcp:container/nodePool:NodePool":
            outputs |= {"instanceGroupUrls": [], "version": "1.33.5-gke.1201000"}
        elif type_token == "gcp:redis/instance:Instance":
            # The first address of the reserved range; TLS moves Memorystore to 6378; AUTH strings are UUIDs.
            tls = inputs.get("transitEncryptionMode") == "SERVER_AUTHENTICATION"
            seed = hashlib.sha256(name.encode()).hexdigest()
            outputs |= {
                "host": str(ipaddress.IPv4Network(str(inputs.get("reservedIpRange") or "10.0.0.0/29"))[3]),
                "port": 6378 if tls else 6379,
                "authString": f"{seed[:8]}-{seed[8:12]}-{seed[12:16]}-{seed[16:20]}-{seed[20:32]}"
                if inputs.get("authEnabled")
                else "",
                "serverCaCerts": [
                    {"cert": "-----BEGIN CERTIFICATE-----\nMIIC-mock-redis-ca\n-----END CERTIFICATE-----\n"}
                ]
                if tls
                else [],
            }
        return outputs

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        outputs = {**args.inputs, **self.computed(args.typ, args.name, args.inputs)}
        return f"{args.name}-id", outputs

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "accountId": MOCK_ACCOUNT_ID,
                "arn": f"arn:aws:iam::{MOCK_ACCOUNT_ID}:user/preview",
                "userId": "AIDAPREVIEW",
            }, []
        if args.token == "aws:iam/getSessionContext:getSessionContext":
            # An assumed-role session was issued by its role; any other ARN is its own issuer.
            arn = str(args.args.get("arn", ""))
            issuer = re.sub(r"^arn:([^:]+):sts::(\d+):assumed-role/([^/]+)/.*$", r"arn:\1:iam::\2:role/\3", arn)
            return {"arn": arn, "issuerArn": issuer}, []
        if args.token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com"}, []
        if args.token == "aws:index/getRegion:getRegion":
            return {"name": self.region, "region": self.region}, []
        if args.token == "gcp:organizations/getProject:getProject":
            project = args.args.get("projectId") or MOCK_GCP_PROJECT
            return {"projectId": project, "number": MOCK_GCP_PROJECT_NUMBER, "name": project}, []
        return {}, []
