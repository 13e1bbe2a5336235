"""The policy pack, exercised as ``pulumi preview --policy-pack policies`` exercises it: over the Analyzer protocol.

One pack process serves the whole module (it takes seconds to start); each test configures it with an
environment's config file, as the engine does before a preview. The happy-path prod plan passes every policy; each
case changes one thing and asserts the exact violations (policy, enforcement, message) that follow.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from pulumi.runtime import rpc

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.serving.annotations import (
    COMPONENT_LABEL,
    ENGINE,
    ENGINE_START_SECONDS,
    GATEWAY,
    GATEWAY_AUTH,
    GATEWAY_PROVIDERS,
    GATEWAY_REQUESTS_PER_MINUTE,
    GATEWAY_ROUTES,
    GATEWAY_ROUTING,
    GATEWAY_TOKENS_PER_MINUTE,
    INSTANCE_TYPE,
    MODEL,
    MODEL_SERVER,
    NAME_LABEL,
    TENSOR_PARALLEL_SIZE,
    serving_annotations,
)
from inferplane.components.spec.scheduling import GPU_TAINT, NVIDIA_GPU_RESOURCE, POOL_LABEL
from inferplane.policies.pack import POLICIES
from inferplane.policies.resource_types import T
from inferplane.policies.serving import serving_settings, sizing_for
from inferplane.tool.analyzer import (
    SHUTDOWN_GRACE_SECONDS,
    PolicyConfig,
    PolicyPackError,
    PolicyPackProcess,
    PolicyReport,
    load_policy_pack_config,
    parse_policy_pack_config,
    policy_config_path,
)
from inferplane.tool.mockengine import Registration
from inferplane.tool.stackfile import find_project_dir, load_stack
from tests.policy_plan import (
    DELETE,
    DIGEST,
    PROD_CACHE,
    at,
    changed,
    container,
    happy_plan,
    model_server,
    pod,
    registration,
)

Edit = Callable[[dict[str, Any]], None]


class _RememberingStub:
    """The pack's stub, remembering each ``Remediate`` and ``Analyze`` answer by the request's bytes and the
    configuration last sent: most tests here change one input of one resource of the same plan (the unknown-value
    tests evaluate it once per input, over 600 times), and the SDK converts a resource's properties again for each of
    its 51 resource policies (3 ms a resource), so the unchanged resources' answers are reused. ``AnalyzeStack`` and
    any resource that differs in a byte, or under another configuration, reach the pack. Sound because the pack's
    answer to a request depends on the request and the configuration alone (it keeps no state between requests)."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self._configuration = b""
        self._answers: dict[tuple[str, bytes, bytes], Any] = {}

    def __getattr__(self, method: str) -> Any:
        return getattr(self._stub, method)

    def Configure(self, request: Any) -> Any:  # noqa: N802 (the gRPC method's name)
        self._configuration = request.SerializeToString(deterministic=True)
        return self._stub.Configure(request)

    def Remediate(self, request: Any) -> Any:  # noqa: N802
        return self._remembered("Remediate", request)

    def Analyze(self, request: Any) -> Any:  # noqa: N802
        return self._remembered("Analyze", request)

    def _remembered(self, method: str, request: Any) -> Any:
        key = (method, self._configuration, request.SerializeToString(deterministic=True))
        if key not in self._answers:
            self._answers[key] = getattr(self._stub, method)(request)
        return self._answers[key]


@pytest.fixture(scope="module")
def pack() -> Iterator[PolicyPackProcess]:
    """The pack, started as the engine starts it, for the whole module (its per-resource answers remembered:
    :class:`_RememberingStub`)."""
    with PolicyPackProcess.start(stack="prod") as running:
        running.stub = cast(Any, _RememberingStub(running.stub))  # duck-typed: the methods the client calls
        yield running


def evaluate(pack: PolicyPackProcess, plan: list[Registration], environment: str = "prod") -> PolicyReport:
    pack.configure(load_policy_pack_config(policy_config_path(environment)))
    return pack.evaluate(plan)


def found(report: PolicyReport) -> list[tuple[str, str, str]]:
    return [(v.policy, v.enforcement, v.detail) for v in report.violations]


# --- the pack as a whole --------------------------------------------------------------------------------------


def test_the_pack_stops_on_the_engines_sigint_even_when_started_with_it_ignored() -> None:
    """A pack launched from a background job inherits SIGINT ignored; the engine's SIGINT must still stop it (exit 0),
    not leave it to the SIGKILL 5 s later (-9)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with PolicyPackProcess.start(stack="prod") as running:
            process = running.process
    finally:
        signal.signal(signal.SIGINT, previous)
    assert process.returncode == 0, running.output


SYS_TGKILL = {"x86_64": 234, "aarch64": 131}[os.uname().machine]
"""tgkill(2)'s number (Python has no call to signal another process's thread)."""


def test_the_pack_stops_on_a_sigint_one_of_its_other_threads_takes() -> None:
    """The kernel hands a process's SIGINT to any thread not blocking it; handed to one of gRPC's (tgkill here, as the
    kernel may when the main thread already has a signal pending), a Python handler alone never ran: the main thread
    sleeps in PolicyPack's time.sleep(one day), uninterrupted, and the engine's SIGKILL came 5 s later."""
    libc = ctypes.CDLL(None, use_errno=True)
    with PolicyPackProcess.start(stack="prod") as running:
        process = running.process
        others = sorted(int(task) for task in os.listdir(f"/proc/{process.pid}/task") if int(task) != process.pid)
        assert others, "the pack runs gRPC's threads beside its main one"
        assert libc.syscall(SYS_TGKILL, process.pid, others[-1], signal.SIGINT) == 0, ctypes.get_errno()
        process.wait(timeout=SHUTDOWN_GRACE_SECONDS)
    assert process.returncode == 0, running.output


def test_pack_answers_get_analyzer_info_with_every_policy(pack: PolicyPackProcess) -> None:
    names = [p.name for p in pack.info.policies]
    assert pack.info.name == "inferplane"
    assert pack.version == "0.1.0"
    assert len(names) >= 25
    assert sorted(names) == sorted(p.meta.name for p in POLICIES)
    for policy in pack.info.policies:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+){3,}", policy.name), policy.name
        assert policy.description.endswith("."), policy.name
        assert policy.severity != 0, policy.name


def test_happy_plan_passes_every_policy_in_prod(pack: PolicyPackProcess) -> None:
    report = evaluate(pack, happy_plan())
    assert found(report) == []
    assert len(report.evaluated) == len(POLICIES)
    assert report.ok


def test_dev_config_refuses_prod_accelerators(pack: PolicyPackProcess) -> None:
    report = evaluate(pack, happy_plan(), "dev")
    assert found(report) == [
        (
            "eks-nodegroup-configure-allowed-instance-types",
            "mandatory",
            "p5.48xlarge carries h100-80gb, which is not allowed here (l4-24gb, a10g-24gb)",
        ),
        (
            "keda-scaledobject-configure-bounds",
            "mandatory",
            "maxReplicaCount 8 exceeds this environment's ceiling of 4",
        ),
        (
            "keda-scaledobject-limit-max-gpus",
            "mandatory",
            "32 accelerators at max replicas (llama-70b 8 x 4) exceed the limit of 2",
        ),
        (
            "compute-stack-limit-total-accelerators",
            "mandatory",
            "32 accelerators at max scale (h100 4 x p5.48xlarge) exceed the limit of 2",
        ),
        ("cost-stack-limit-hourly-cost", "mandatory", "$220.16/h at max scale exceeds the limit of $5.00/h"),
    ]


def test_violation_message_is_description_then_detail(pack: PolicyPackProcess) -> None:
    plan = changed(happy_plan(), "cluster-key", at("enableKeyRotation", value=False))
    (violation,) = evaluate(pack, plan).violations
    policy = next(p for p in pack.info.policies if p.name == "kms-key-enable-rotation")
    assert violation.message == f"{policy.description}\nenableKeyRotation is not true"
    assert violation.urn == "urn:pulumi:prod::inferplane::aws:kms/key:Key::cluster-key"
    assert violation.severity == "medium"


def test_enforcement_level_comes_from_the_config_file(pack: PolicyPackProcess) -> None:
    plan = changed(happy_plan(), "cluster-key", at("tags", value={}))
    prod = evaluate(pack, plan, "prod")
    dev = evaluate(pack, plan, "dev")
    tags = ("aws-resource-require-tags", "tags lack team, cost-center")
    assert found(prod) == [(tags[0], "mandatory", tags[1])]
    assert [(v.enforcement, v.detail) for v in dev.violations if v.policy == tags[0]] == [("advisory", tags[1])]


def test_disabled_policies_are_not_evaluated(pack: PolicyPackProcess) -> None:
    config = load_policy_pack_config(policy_config_path("prod"))
    pack.configure({**config, "kms-key-enable-rotation": PolicyConfig(enforcement="disabled")})
    report = pack.evaluate(changed(happy_plan(), "cluster-key", at("enableKeyRotation", value=False)))
    assert report.violations == ()
    assert "kms-key-enable-rotation" not in [p.name for p in report.evaluated]


def test_config_is_validated_against_the_policy_schemas(pack: PolicyPackProcess) -> None:
    bad = parse_policy_pack_config(
        {"cost-stack-limit-hourly-cost": {"maxHourlyCostUsd": "a lot"}, "kms-key-enable-rotation": "mandatory"}
    )
    with pytest.raises(PolicyPackError) as raised:
        pack.configure(bad)
    assert str(raised.value) == (
        "invalid policy pack configuration:\ncost-stack-limit-hourly-cost: maxHourlyCostUsd: 'a lot' is not of type "
        "'number'"
    )
    with pytest.raises(PolicyPackError, match="'sometimes' is not a valid level"):
        parse_policy_pack_config({"kms-key-enable-rotation": "sometimes"})


# --- one mutation per violation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """Change resource ``name`` with ``edit``; expect exactly ``expected`` (policy, message) in ``environment``."""

    id: str
    name: str
    edit: Edit | None
    expected: list[tuple[str, str]]
    protect: bool | None = None
    environment: str = "prod"
    drop_dependencies: bool = False


def _without_redis_url(inputs: dict[str, Any]) -> None:
    """No container of the workload gets the Redis URL (neither its mounted Secret nor the variable)."""
    for each in inputs["spec"]["template"]["spec"]["containers"]:
        each.pop("env", None)
        each["volumeMounts"] = [
            m for m in each.get("volumeMounts", []) if m["mountPath"] != "/etc/inferplane/redis-url"
        ]


def _case(id: str, name: str, edit: Edit | None, *expected: tuple[str, str], **kw: Any) -> Any:
    return pytest.param(Case(id, name, edit, list(expected), **kw), id=id)


EP = "eks-cluster-disallow-public-endpoint"
SE = "eks-cluster-enable-secrets-encryption"
LOGS = "eks-cluster-enable-control-plane-logs"
VER = "eks-cluster-configure-supported-version"
ITYPES = "eks-nodegroup-configure-allowed-instance-types"
SPOT = "eks-nodegroup-disallow-spot-capacity"
TAINT = "eks-nodegroup-require-gpu-taint"
SCALE = "eks-nodegroup-configure-scaling-bounds"
SSH = "eks-nodegroup-disallow-open-ssh"
IMDS = "ec2-launchtemplate-require-imdsv2"
HOPS = "ec2-launchtemplate-limit-metadata-hop-count"
EBS = "ec2-launchtemplate-disallow-unencrypted-volume"
PIP = "ec2-launchtemplate-disallow-public-ip"
SG = "ec2-securitygroup-disallow-public-ingress"
KMS = "kms-key-enable-rotation"
TLS = "elasticache-replicationgroup-enable-transit-encryption"
REST = "elasticache-replicationgroup-enable-at-rest-encryption"
AUTH = "elasticache-replicationgroup-require-auth"
HA = "elasticache-replicationgroup-configure-high-availability"
TAGS = "aws-resource-require-tags"
PROTECT = "pulumi-resource-require-protect"
RES = "kubernetes-workload-require-resources"
PRIV = "kubernetes-workload-disallow-privileged"
HOST = "kubernetes-workload-disallow-host-access"
IMG = "kubernetes-workload-require-pinned-image"
DIGEST_POLICY = "kubernetes-workload-require-image-digest"
SECRET = "kubernetes-workload-require-secret-refs"
INTGPU = "kubernetes-workload-require-integer-accelerators"
PLACE = "kubernetes-workload-require-accelerator-placement"
FIT = "inference-server-require-memory-fit"
GMU = "inference-server-configure-gpu-memory-utilization"
HOSTKV = "inference-server-require-host-kv-fit"
TP = "inference-server-configure-tensor-parallel"
LEN = "inference-server-limit-max-model-len"
PROBE = "inference-server-require-startup-probe"
MINREP = "kubernetes-deployment-configure-min-replicas"
PDB = "kubernetes-deployment-require-pdb"
SO = "inference-server-require-scaledobject"
QUEUE = "keda-scaledobject-require-queue-trigger"
BOUNDS = "keda-scaledobject-configure-bounds"
KEDAGPU = "keda-scaledobject-limit-max-gpus"
TOTAL = "compute-stack-limit-total-accelerators"
COST = "cost-stack-limit-hourly-cost"
ALERT = "monitoring-prometheusrule-require-preemption-alert"
GWAUTH = "gateway-deployment-require-authentication"
GWRATE = "gateway-deployment-require-rate-limits"
GWROUTE = "gateway-models-require-tier-route"
GWCTX = "gateway-context-limit-max-model-len"
ENGINES = "inference-server-configure-allowed-engines"
METRICS = "inference-server-require-engine-metrics"
SGLANG_IMAGE = f"lmsysorg/sglang:v0.5.23{DIGEST}"
NO_QUEUE = (
    "no prometheus trigger queries a queue metric (vllm:num_requests_waiting, nv_inference_pending_request_count, "
    "nv_trt_llm_request_metrics, sglang:num_queue_reqs)"
)
NO_ALERT = (
    "no preemption alert covers model llama-70b (an alert named like *Preempt* or labelled "
    "inferplane.io/alert=preemption, with labels.model=llama-70b)"
)

LLAMA = "llama-70b"
KEYPOL = "kms-key-require-explicit-policy"
LOGGROUP = "cloudwatch-loggroup-require-encryption-and-retention"
ROOTTRUST = "iam-role-disallow-account-root-trust"
FLOW = "ec2-vpc-require-flow-logs"
S3LOG = "s3-bucket-require-access-logging"
DENY = "kubernetes-namespace-require-default-deny"
GKEHARD = "gke-cluster-require-baseline-hardening"
SUBNETLOG = "gcp-subnetwork-require-flow-logs"
RESTRICTED = "kubernetes-workload-require-restricted-container"
SECRETFILE = "kubernetes-workload-require-secret-files"


def _args(*replacements: tuple[str, str]) -> Edit:
    """Replace vLLM flags of the model server's container (``--flag=value`` form)."""

    def edit(inputs: dict[str, Any]) -> None:
        args = inputs["spec"]["template"]["spec"]["containers"][0]["args"]
        for flag, value in replacements:
            if flag in args:  # "--flag value" as the serving component writes it
                args[args.index(flag) + 1] = value
            else:
                args[:] = [a for a in args if not a.startswith(f"{flag}=")] + [f"{flag}={value}"]

    return edit


def _annotation(key: str, value: str) -> Edit:
    return at("metadata", "annotations", key, value=value)


def _gpus(count: Any) -> Edit:
    def edit(inputs: dict[str, Any]) -> None:
        resources = inputs["spec"]["template"]["spec"]["containers"][0]["resources"]
        resources["requests"][NVIDIA_GPU_RESOURCE] = count
        resources["limits"][NVIDIA_GPU_RESOURCE] = count

    return edit


def _both(*edits: Edit) -> Edit:
    def edit(inputs: dict[str, Any]) -> None:
        for each in edits:
            each(inputs)

    return edit


def _cache(**changes: Any) -> Edit:
    """Edit the cache section of the gateway's processor config."""
    return at("data", "processor.json", value=json.dumps({"cache": {**PROD_CACHE, **changes}}))


CASES = [
    _case(
        "cache-shared-across-tenants",
        "gateway-config",
        _cache(tenant_isolation=False),
        (
            "gateway-cache-require-tenant-isolation",
            "processor.json: cache.tenant_isolation is false: every tier shares cached answers across its tenants",
        ),
    ),
    _case(
        "cache-threshold-too-low",
        "gateway-config",
        _cache(threshold=0.9),
        ("gateway-cache-configure-semantic-threshold", "processor.json: semantic threshold 0.9 is below 0.95"),
    ),
    _case(
        "cache-guards-off",
        "gateway-config",
        _cache(guards=False),
        ("gateway-cache-configure-semantic-threshold", "processor.json: semantic guards are off"),
    ),
    # EKS control plane
    _case(
        "public-endpoint",
        "cluster",
        at("vpcConfig", "endpointPublicAccess", value=True),
        (
            EP,
            "vpcConfig.endpointPublicAccess is true or unset (AWS defaults it to true); this environment allows "
            "only a private endpoint",
        ),
    ),
    _case(
        "public-endpoint-unset",
        "cluster",
        at("vpcConfig", "endpointPublicAccess", value=DELETE),
        (
            EP,
            "vpcConfig.endpointPublicAccess is true or unset (AWS defaults it to true); this environment allows "
            "only a private endpoint",
        ),
    ),
    _case(
        "no-private-endpoint",
        "cluster",
        at("vpcConfig", "endpointPrivateAccess", value=False),
        (EP, "vpcConfig.endpointPrivateAccess is false: nodes would reach the API server over the internet"),
    ),
    _case(
        "dev-public-without-cidrs",
        "cluster",
        at("vpcConfig", "endpointPublicAccess", value=True),
        (EP, "vpcConfig.publicAccessCidrs is empty: AWS then opens the public endpoint to 0.0.0.0/0"),
        (ITYPES, "p5.48xlarge carries h100-80gb, which is not allowed here (l4-24gb, a10g-24gb)"),
        (BOUNDS, "maxReplicaCount 8 exceeds this environment's ceiling of 4"),
        (KEDAGPU, "32 accelerators at max replicas (llama-70b 8 x 4) exceed the limit of 2"),
        (TOTAL, "32 accelerators at max scale (h100 4 x p5.48xlarge) exceed the limit of 2"),
        (COST, "$220.16/h at max scale exceeds the limit of $5.00/h"),
        environment="dev",
    ),
    _case(
        "dev-triton-not-allowed",
        "llama-70b",
        _both(
            container("image", value=f"nvcr.io/nvidia/tritonserver:26.05-trtllm-python-py3{DIGEST}"),
            _annotation(ENGINE, "triton"),
        ),
        # dev serves what loads straight from a checkpoint; the prod-sized plan also breaks dev's ceilings.
        (ENGINES, "engine triton is not allowed here (vllm, sglang)"),
        (ITYPES, "p5.48xlarge carries h100-80gb, which is not allowed here (l4-24gb, a10g-24gb)"),
        (BOUNDS, "maxReplicaCount 8 exceeds this environment's ceiling of 4"),
        (KEDAGPU, "32 accelerators at max replicas (llama-70b 8 x 4) exceed the limit of 2"),
        (TOTAL, "32 accelerators at max scale (h100 4 x p5.48xlarge) exceed the limit of 2"),
        (COST, "$220.16/h at max scale exceeds the limit of $5.00/h"),
        environment="dev",
    ),
    _case(
        "sglang-without-metrics",
        "llama-70b",
        _both(container("image", value=SGLANG_IMAGE), _annotation(ENGINE, "sglang")),
        (METRICS, "SGLang runs without --enable-metrics: no /metrics for KEDA, alerts or dashboards"),
    ),
    _case(
        "staging-public-open-cidr",
        "cluster",
        _both(
            at("vpcConfig", "endpointPublicAccess", value=True),
            at("vpcConfig", "publicAccessCidrs", value=["198.51.100.0/24", "0.0.0.0/0"]),
        ),
        (EP, "vpcConfig.publicAccessCidrs includes 0.0.0.0/0: the endpoint is open to everyone"),
        (ITYPES, "p5.48xlarge carries h100-80gb, which is not allowed here (l40s-48gb, l4-24gb, tpu-v5e)"),
        (TOTAL, "32 accelerators at max scale (h100 4 x p5.48xlarge) exceed the limit of 16"),
        (COST, "$220.16/h at max scale exceeds the limit of $40.00/h"),
        (KEDAGPU, "32 accelerators at max replicas (llama-70b 8 x 4) exceed the limit of 16"),
        environment="staging",
    ),
    _case(
        "no-encryption",
        "cluster",
        at("encryptionConfig", value=DELETE),
        (SE, "encryptionConfig is not set: Secrets are stored without a customer KMS key"),
    ),
    _case(
        "encryption-without-secrets",
        "cluster",
        at("encryptionConfig", "resources", value=[]),
        (SE, 'encryptionConfig.resources does not include "secrets"'),
    ),
    _case(
        "encryption-without-key",
        "cluster",
        at("encryptionConfig", "provider", value={}),
        (SE, "encryptionConfig.provider.keyArn is not set"),
    ),
    _case(
        "missing-logs",
        "cluster",
        at("enabledClusterLogTypes", value=["api"]),
        (LOGS, "enabledClusterLogTypes lacks audit, authenticator, controllerManager, scheduler"),
    ),
    _case(
        "unpinned-version",
        "cluster",
        at("version", value=DELETE),
        (VER, "version is not set: AWS would pick the default version"),
    ),
    _case("old-version", "cluster", at("version", value="1.29"), (VER, "version 1.29 is not one of 1.33, 1.34, 1.35")),
    # node groups
    _case(
        "unknown-gpu-type",
        "h100",
        at("instanceTypes", value=["p6-b200.48xlarge"]),
        (ITYPES, "p6-b200.48xlarge is an accelerated instance type outside the catalog; sizing cannot vouch for it"),
    ),
    _case(
        "disallowed-accelerator",
        "h100",
        at("instanceTypes", value=["g6.48xlarge"]),
        (ITYPES, "g6.48xlarge carries l4-24gb, which is not allowed here (h100-80gb, h200-141gb, l40s-48gb)"),
        (
            FIT,
            "llama-3.3-70b (bf16) on 4 x l4-24gb does not fit: llama-3.3-70b weights in bf16 take 131.4 GiB, plus a "
            "6.4 GiB runtime reserve, more than 4 x l4-24gb (TP 4, 80.5 GiB usable at 0.9)",
        ),
    ),
    _case(
        "spot",
        "h100",
        at("capacityType", value="SPOT"),
        (SPOT, "capacityType is SPOT; this environment allows only on-demand capacity"),
    ),
    _case(
        "no-taint",
        "h100",
        at("taints", value=[]),
        (TAINT, f"taints lack {GPU_TAINT.key}:NO_SCHEDULE: pods that do not ask for a GPU would land on GPU nodes"),
    ),
    _case(
        "no-pool-label",
        "h100",
        at("labels", POOL_LABEL, value=DELETE),
        (TAINT, f"labels lack {POOL_LABEL}: model servers select their pool by it"),
    ),
    _case(
        "unordered-scaling",
        "h100",
        at("scalingConfig", "desiredSize", value=5),
        (SCALE, "scalingConfig needs 0 <= minSize <= desiredSize <= maxSize and maxSize >= 1 (got 1, 5, 4)"),
    ),
    _case(
        "open-ssh",
        "h100",
        at("remoteAccess", value={"ec2SshKey": "ops"}),
        (SSH, "remoteAccess is set without sourceSecurityGroupIds: SSH is open to 0.0.0.0/0"),
    ),
    # launch template, security group, KMS
    _case(
        "imdsv1",
        "h100-lt",
        at("metadataOptions", "httpTokens", value="optional"),
        (IMDS, "metadataOptions.httpTokens is optional, not required: IMDSv1 stays reachable"),
    ),
    _case(
        "two-hops",
        "h100-lt",
        at("metadataOptions", "httpPutResponseHopLimit", value=2),
        (HOPS, "metadataOptions.httpPutResponseHopLimit is 2, above 1"),
    ),
    _case(
        "unencrypted-volume",
        "h100-lt",
        at("blockDeviceMappings", 0, "ebs", "encrypted", value="false"),
        (EBS, "blockDeviceMappings[0] (/dev/xvda) is not encrypted"),
    ),
    _case(
        "no-volumes",
        "h100-lt",
        at("blockDeviceMappings", value=[]),
        (EBS, "blockDeviceMappings is empty: the root volume takes the AMI's default, which is not encrypted"),
    ),
    _case(
        "public-ip",
        "h100-lt",
        at("networkInterfaces", value=[{"associatePublicIpAddress": "true"}]),
        (PIP, "networkInterfaces[0].associatePublicIpAddress is true"),
    ),
    _case(
        "open-ssh-port",
        "gateway-lb",
        at("ingress", value=[{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]),
        (SG, "ingress[0] opens ports 22-22 to the internet"),
    ),
    _case("no-rotation", "cluster-key", at("enableKeyRotation", value=DELETE), (KMS, "enableKeyRotation is not true")),
    # cache
    _case(
        "no-tls", "cache", at("transitEncryptionEnabled", value=False), (TLS, "transitEncryptionEnabled is not true")
    ),
    _case(
        "no-at-rest",
        "cache",
        at("atRestEncryptionEnabled", value=DELETE),
        (REST, "atRestEncryptionEnabled is not true"),
    ),
    _case(
        "no-auth",
        "cache",
        at("authToken", value=DELETE),
        (AUTH, "neither authToken nor userGroupIds is set: the cache accepts unauthenticated clients"),
    ),
    _case(
        "single-node",
        "cache",
        _both(
            at("numCacheClusters", value=1),
            at("automaticFailoverEnabled", value=False),
            at("multiAzEnabled", value=DELETE),
        ),
        (HA, "automaticFailoverEnabled is not true"),
        (HA, "multiAzEnabled is not true"),
        (HA, "1 cache node(s): failover needs at least 2"),
    ),
    # governance
    _case("untagged", "h100", at("tags", value={"team": "ml-platform"}), (TAGS, "tags lack cost-center")),
    _case("unprotected", "cache", None, (PROTECT, "the protect resource option is not set"), protect=False),
    # workloads
    _case(
        "no-requests",
        LLAMA,
        container("resources", "requests", value={NVIDIA_GPU_RESOURCE: 4}),
        (RES, "containers[0] (vllm) lacks resources requests.cpu, requests.memory"),
    ),
    _case(
        "no-memory-limit",
        "gateway",
        container("resources", "limits", value={}),
        (RES, "containers[0] (gateway) lacks resources limits.memory"),
    ),
    _case(
        "privileged",
        LLAMA,
        container("securityContext", "privileged", value=True),
        (PRIV, "containers[0] (vllm) is privileged"),
    ),
    _case(
        "escalation",
        LLAMA,
        container("securityContext", "allowPrivilegeEscalation", value=True),
        (PRIV, "containers[0] (vllm) allows privilege escalation"),
    ),
    _case(
        "capabilities",
        "gateway",
        container("securityContext", value={"capabilities": {"add": ["SYS_ADMIN"]}}),
        (PRIV, "containers[0] (gateway) adds capabilities SYS_ADMIN"),
    ),
    _case("host-network", "gateway", pod("hostNetwork", value=True), (HOST, "spec.template.spec.hostNetwork is true")),
    _case(
        "host-path",
        LLAMA,
        pod("volumes", value=[{"name": "models", "hostPath": {"path": "/models"}}]),
        (HOST, "volume models mounts a hostPath"),
    ),
    _case(
        "host-port",
        "gateway",
        container("ports", value=[{"containerPort": 8080, "hostPort": 8080}]),
        (HOST, "containers[0] (gateway) binds hostPort 8080"),
    ),
    _case(
        "latest",
        "gateway",
        container("image", value="ghcr.io/inferplane/gateway:latest"),
        (IMG, "containers[0] (gateway) image ghcr.io/inferplane/gateway:latest has no version tag"),
        (DIGEST_POLICY, "containers[0] (gateway) image ghcr.io/inferplane/gateway:latest is not pinned by digest"),
    ),
    _case(
        "untagged-image",
        "gateway",
        container("image", value="ghcr.io/inferplane/gateway"),
        (IMG, "containers[0] (gateway) image ghcr.io/inferplane/gateway has no version tag"),
        (DIGEST_POLICY, "containers[0] (gateway) image ghcr.io/inferplane/gateway is not pinned by digest"),
    ),
    _case(
        "tag-without-digest",
        "gateway",
        container("image", value="ghcr.io/inferplane/gateway:0.1.0"),
        (DIGEST_POLICY, "containers[0] (gateway) image ghcr.io/inferplane/gateway:0.1.0 is not pinned by digest"),
    ),
    _case(
        "literal-secret",
        LLAMA,
        container("env", value=[{"name": "OPENAI_API_KEY", "value": "sk-abc"}]),
        (SECRET, "containers[0] (vllm) sets OPENAI_API_KEY as a literal value"),
    ),
    _case(
        "configmap-secret",
        "gateway",
        container("env", 0, "valueFrom", value={"configMapKeyRef": {"name": "c", "key": "k"}}),
        (SECRET, "containers[0] (gateway) reads CACHE_AUTH_TOKEN from configMapKeyRef, not a Secret"),
    ),
    _case(
        "fractional-gpu",
        LLAMA,
        _gpus("0.5"),
        (INTGPU, "containers[0] (vllm) nvidia.com/gpu limit '0.5' is not a positive integer"),
    ),
    _case(
        "request-differs",
        LLAMA,
        container("resources", "requests", NVIDIA_GPU_RESOURCE, value=2),
        (INTGPU, "containers[0] (vllm) nvidia.com/gpu request 2 differs from its limit 4"),
    ),
    _case(
        "gpu-request-without-limit",
        LLAMA,
        container("resources", "limits", value={"memory": "256Gi"}),
        (INTGPU, "containers[0] (vllm) requests nvidia.com/gpu without a limit"),
    ),
    _case(
        "no-toleration",
        LLAMA,
        pod("tolerations", value=[]),
        (PLACE, f"requests {NVIDIA_GPU_RESOURCE} but does not tolerate the {GPU_TAINT.key} taint"),
    ),
    _case(
        "no-pool-selector",
        LLAMA,
        pod("nodeSelector", value={}),
        (PLACE, f"requests {NVIDIA_GPU_RESOURCE} but selects no pool ({POOL_LABEL} or inferplane.io/accelerator)"),
    ),
    _case(
        "cpu-pod-tolerates-gpu",
        "gateway",
        pod("tolerations", value=[{"key": GPU_TAINT.key, "operator": "Exists"}]),
        (PLACE, f"tolerates the {GPU_TAINT.key} taint without requesting a GPU"),
    ),
    # serving
    _case(
        "gmu-too-high",
        LLAMA,
        _args(("--gpu-memory-utilization", "0.97")),
        (GMU, "gpu-memory-utilization 0.97 is outside 0.8-0.93"),
    ),
    _case(
        "host-kv-tier-beyond-the-pods-memory",
        LLAMA,
        # The plan's server has a 256 GiB limit and no memory-backed volume: 228 GiB is the most after 28 GiB for
        # 4 ranks.
        _args(("--kv-offloading-size", "229")),
        (
            HOSTKV,
            "containers[0] (vllm): --kv-offloading-size 229 GiB plus 0 GiB of memory-backed volumes and 28 GiB for "
            "the engine's 4-rank processes need 257.0 GiB, more than the memory limit of 256.0 GiB",
        ),
    ),
    _case(
        "gmu-too-low",
        LLAMA,
        _args(("--gpu-memory-utilization", "0.6")),
        (GMU, "gpu-memory-utilization 0.6 is outside 0.8-0.93"),
        (
            FIT,
            "llama-3.3-70b (bf16) on 4 x h100-80gb does not fit: the KV cache for 24 sequences x 32768 tokens "
            "needs 120.0 GiB, but 4 x h100-80gb (TP 4, 192.0 GiB usable at 0.6) leaves 54.2 GiB after 131.4 GiB "
            "of weights; it holds 10 of them",
        ),
    ),
    _case(
        "tp-not-dividing-heads",
        LLAMA,
        _both(_args(("--tensor-parallel-size", "3")), _gpus(3)),
        (TP, "tensor parallel 3 is not a power of two"),
        (TP, "tensor parallel 3 does not divide the 8 accelerators of a p5.48xlarge node"),
        (TP, "tensor parallel 3 does not divide llama-3.3-70b's 64 attention heads"),
        (FIT, "llama-3.3-70b (bf16) on 3 x h100-80gb does not fit: tensor parallel 3 is not a power of two"),
    ),
    _case(
        "tp-differs-from-gpus",
        LLAMA,
        _args(("--tensor-parallel-size", "8")),
        (TP, "tensor parallel 8 differs from the 4 accelerators the pod requests"),
    ),
    _case(
        "tp-across-nodes",
        LLAMA,
        _both(_args(("--tensor-parallel-size", "16")), _gpus(16), _annotation(TENSOR_PARALLEL_SIZE, "16")),
        (INTGPU, "containers[0] (vllm) asks for 16 nvidia.com/gpu, more than 8 per pod"),
        (TP, "tensor parallel 16 exceeds the 8 accelerators of a p5.48xlarge node"),
        (
            FIT,
            "llama-3.3-70b (bf16) on 16 x h100-80gb does not fit: tensor parallel 16 exceeds the 8 accelerators "
            "of one node; tensor parallelism never crosses a node",
        ),
        (KEDAGPU, "128 accelerators at max replicas (llama-70b 8 x 16) exceed the limit of 48"),
    ),
    _case(
        "context-beyond-model",
        LLAMA,
        _args(("--max-model-len", "262144")),
        (LEN, "max-model-len 262144 exceeds the 131072 tokens llama-3.3-70b supports"),
        (LEN, "max-model-len 262144 exceeds this environment's cap of 131072 tokens"),
        (
            FIT,
            "llama-3.3-70b (bf16) on 4 x h100-80gb does not fit: the KV cache for 24 sequences x 262144 tokens "
            "needs 960.0 GiB, but 4 x h100-80gb (TP 4, 288.0 GiB usable at 0.9) leaves 150.2 GiB after 131.4 GiB "
            "of weights; it holds 3 of them",
        ),
    ),
    _case(
        "dev-context-cap",
        LLAMA,
        _args(("--max-model-len", "65536")),
        (LEN, "max-model-len 65536 exceeds this environment's cap of 32768 tokens"),
        (
            FIT,
            "llama-3.3-70b (bf16) on 4 x h100-80gb does not fit: the KV cache for 24 sequences x 65536 tokens "
            "needs 240.0 GiB, but 4 x h100-80gb (TP 4, 288.0 GiB usable at 0.9) leaves 150.2 GiB after 131.4 GiB "
            "of weights; it holds 15 of them",
        ),
        (ITYPES, "p5.48xlarge carries h100-80gb, which is not allowed here (l4-24gb, a10g-24gb)"),
        (BOUNDS, "maxReplicaCount 8 exceeds this environment's ceiling of 4"),
        (KEDAGPU, "32 accelerators at max replicas (llama-70b 8 x 4) exceed the limit of 2"),
        (TOTAL, "32 accelerators at max scale (h100 4 x p5.48xlarge) exceed the limit of 2"),
        (COST, "$220.16/h at max scale exceeds the limit of $5.00/h"),
        environment="dev",
    ),
    _case(
        "no-startup-probe",
        LLAMA,
        container("startupProbe", value=DELETE),
        (PROBE, "containers[0] (vllm) has no startupProbe: the liveness probe would kill the engine while it loads"),
    ),
    _case(
        "short-startup-probe",
        LLAMA,
        container("startupProbe", "failureThreshold", value=6),
        (PROBE, "containers[0] (vllm) startupProbe allows 60s but the engine needs 130.6s to start"),
    ),
    _case(
        "default-startup-probe",
        LLAMA,
        container("startupProbe", value={"httpGet": {"path": "/health"}}),
        (PROBE, "containers[0] (vllm) startupProbe allows 30s but the engine needs 130.6s to start"),
    ),
    _case(
        "slow-engine",
        LLAMA,
        _annotation(ENGINE_START_SECONDS, "900"),
        (PROBE, "containers[0] (vllm) startupProbe allows 300s but the engine needs 900s to start"),
    ),
    _case(
        "no-probes",
        LLAMA,
        _both(container("readinessProbe", value=DELETE), container("livenessProbe", value=DELETE)),
        (PROBE, "containers[0] (vllm) has no readinessProbe"),
        (PROBE, "containers[0] (vllm) has no livenessProbe"),
    ),
    _case(
        "bad-annotation",
        LLAMA,
        _annotation(TENSOR_PARALLEL_SIZE, "four"),
        *[
            (
                p,
                "serving annotations do not parse: inferplane.io/tensor-parallel-size='four': Input should be a valid "
                "integer, unable to parse string as an integer",
            )
            for p in (GMU, TP, LEN, PROBE)
        ],
    ),
    _case(
        "unannotated-misfit-on-its-pool",
        LLAMA,
        _both(at("metadata", "annotations", value={}), _args(("--max-num-seqs", "64"))),
        (
            FIT,
            "llama-3.3-70b (bf16) on 4 x h100-80gb does not fit: the KV cache for 64 sequences x 32768 tokens needs "
            "320.0 GiB, but 4 x h100-80gb (TP 4, 288.0 GiB usable at 0.9) leaves 150.2 GiB after 131.4 GiB of weights; "
            "it holds 30 of them",
        ),
    ),
    # stack-wide
    _case(
        "one-gateway",
        "gateway",
        at("spec", "replicas", value=1),
        (MINREP, "gateway runs at least 1 replica(s); this environment requires 2"),
    ),
    _case(
        "server-min-one",
        "llama-70b-scaler",
        at("spec", "minReplicaCount", value=1),
        (MINREP, "llama-70b runs at least 1 replica(s); this environment requires 2"),
    ),
    _case(
        "no-pdb",
        "llama-70b-pdb",
        at("spec", "selector", "matchLabels", value={"app": "other"}),
        (PDB, "llama-70b runs up to 8 replicas without a PodDisruptionBudget"),
    ),
    _case(
        "pdb-zero",
        "gateway-pdb",
        at("spec", "maxUnavailable", value=0),
        (PDB, "gateway: PodDisruptionBudget maxUnavailable 0 blocks every voluntary disruption"),
    ),
    _case(
        "pdb-min-available",
        "llama-70b-pdb",
        _both(at("spec", "maxUnavailable", value=DELETE), at("spec", "minAvailable", value=2)),
        (PDB, "llama-70b: PodDisruptionBudget minAvailable 2 blocks every voluntary disruption at 2 replica(s)"),
    ),
    _case(
        "no-scaledobject",
        "llama-70b-scaler",
        _both(at("spec", "scaleTargetRef", "name", value="other"), at("metadata", "labels", value={})),
        (SO, "llama-70b has no ScaledObject"),
        (MINREP, "llama-70b runs at least 1 replica(s); this environment requires 2"),
    ),
    _case(
        "cpu-trigger",
        "llama-70b-scaler",
        at("spec", "triggers", value=[{"type": "cpu", "metadata": {"value": "70"}}]),
        (QUEUE, "spec.triggers[0] scales on cpu"),
        (QUEUE, NO_QUEUE),
    ),
    _case(
        "wrong-metric",
        "llama-70b-scaler",
        at("spec", "triggers", 0, "metadata", "query", value="avg(vllm:gpu_cache_usage_perc)"),
        (QUEUE, NO_QUEUE),
    ),
    _case(
        "memory-beside-queue",
        "llama-70b-scaler",
        at("spec", "triggers", 1, value={"type": "memory", "metadata": {"value": "80"}}),
        (QUEUE, "spec.triggers[1] scales on memory"),
    ),
    _case("no-triggers", "llama-70b-scaler", at("spec", "triggers", value=[]), (QUEUE, "spec.triggers is empty")),
    _case(
        "min-above-max",
        "llama-70b-scaler",
        at("spec", "minReplicaCount", value=9),
        (BOUNDS, "minReplicaCount 9 exceeds maxReplicaCount 8"),
    ),
    _case(
        "scale-to-zero",
        "llama-70b-scaler",
        at("spec", "minReplicaCount", value=0),
        (BOUNDS, "minReplicaCount is 0: this environment does not scale model servers to zero"),
        (MINREP, "llama-70b runs at least 0 replica(s); this environment requires 2"),
    ),
    _case(
        "idle-count",
        "llama-70b-scaler",
        at("spec", "idleReplicaCount", value=2),
        (BOUNDS, "idleReplicaCount 2 must be below minReplicaCount 2"),
    ),
    _case(
        "no-cooldown",
        "llama-70b-scaler",
        at("spec", "cooldownPeriod", value=DELETE),
        (BOUNDS, "cooldownPeriod is not set"),
    ),
    _case(
        "implicit-bounds",
        "llama-70b-scaler",
        at("spec", "maxReplicaCount", value=DELETE),
        (BOUNDS, "minReplicaCount and maxReplicaCount must both be set (KEDA defaults are 0 and 100)"),
        (KEDAGPU, "400 accelerators at max replicas (llama-70b 100 x 4) exceed the limit of 48"),
    ),
    _case(
        "too-many-nodes",
        "h100",
        at("scalingConfig", "maxSize", value=7),
        (TOTAL, "56 accelerators at max scale (h100 7 x p5.48xlarge) exceed the limit of 48"),
        (COST, "$385.28/h at max scale exceeds the limit of $250.00/h"),
    ),
    _case(
        "unpriced",
        "h100",
        at("instanceTypes", value=["p5e.48xlarge"]),
        (COST, "no on-demand price for p5e.48xlarge; the cost ceiling cannot be checked"),
    ),
    _case(
        "no-preemption-alert",
        "alerts",
        at("spec", "groups", 0, "rules", 0, value={"alert": "HighLatency"}),
        (ALERT, NO_ALERT),
    ),
    _case(
        "preemption-alert-for-another-model",
        "alerts",
        at("spec", "groups", 0, "rules", 0, value={"alert": "InferplanePreemptions", "labels": {"model": "x"}}),
        (ALERT, NO_ALERT),
    ),
    _case(
        "labelled-preemption-alert",
        "alerts",
        at(
            "spec",
            "groups",
            0,
            "rules",
            0,
            value={"alert": "KvCacheExhausted", "labels": {"model": "llama-70b", "inferplane.io/alert": "preemption"}},
        ),
    ),
    # gateway
    _case(
        "gateway-open",
        "gateway",
        _annotation(GATEWAY_AUTH, "none"),
        (GWAUTH, f"gateway admits unauthenticated callers ({GATEWAY_AUTH}=none)"),
    ),
    _case(
        "gateway-auth-unsaid",
        "gateway",
        at("metadata", "annotations", GATEWAY_AUTH, value=DELETE),
        (GWAUTH, f"gateway does not say how callers authenticate ({GATEWAY_AUTH} is absent)"),
    ),
    _case(
        "gateway-no-token-budget",
        "gateway",
        at("metadata", "annotations", GATEWAY_TOKENS_PER_MINUTE, value=DELETE),
        (GWRATE, f"gateway does not limit tokens per minute ({GATEWAY_TOKENS_PER_MINUTE} is absent)"),
    ),
    _case(
        "gateway-no-request-limit",
        "gateway",
        at("metadata", "annotations", GATEWAY_REQUESTS_PER_MINUTE, value=DELETE),
        (GWRATE, f"gateway does not limit requests per minute ({GATEWAY_REQUESTS_PER_MINUTE} is absent)"),
    ),
    _case(
        "gateway-budgets-per-replica",
        "gateway",
        _without_redis_url,
        (
            GWRATE,
            "gateway keeps its token budgets per replica: no container of it gets the Redis URL at "
            "/etc/inferplane/redis-url (the shared Redis/Valkey)",
        ),
    ),
    _case(
        "gateway-model-unrouted",
        "gateway",
        _annotation(GATEWAY_ROUTES, "{}"),
        (GWROUTE, "llama-70b (model llama-70b) is reachable through no gateway tier"),
    ),
    _case(
        "gateway-model-without-tier",
        "gateway",
        _annotation(GATEWAY_ROUTES, '{"llama-70b": {"tiers": [], "max_context": 32768}}'),
        (GWROUTE, "llama-70b (model llama-70b) is reachable through no gateway tier"),
    ),
    _case(
        "gateway-context-beyond-engine",
        "gateway",
        _annotation(GATEWAY_ROUTES, '{"llama-70b": {"tiers": ["premium"], "max_context": 65536}}'),
        (GWCTX, "gateway admits 65536 tokens for llama-70b, but llama-70b runs with max-model-len 32768"),
    ),
    _case(
        "gateway-routing-unbounded",
        "gateway",
        _annotation(
            GATEWAY_ROUTING, '{"llama-70b": {"load_bound": false, "overlap_weight": 1.0, "policy": "prefix_aware"}}'
        ),
        (
            "gateway-routing-require-load-bound",
            f"gateway routes llama-70b without a load bound ({GATEWAY_ROUTING}: load_bound false)",
        ),
    ),
    _case(
        "gateway-provider-without-consent",
        "gateway",
        _annotation(
            GATEWAY_PROVIDERS,
            '{"fireworks-llama-70b": {"host": "api.fireworks.ai", "tenants": [], "tiers": ["premium"]}}',
        ),
        (
            "gateway-providers-require-tenant-consent",
            "gateway may send prompts to hosted provider fireworks-llama-70b with no tenant list "
            f"({GATEWAY_PROVIDERS})",
        ),
    ),
    _case(
        "gateway-one-replica",
        "gateway",
        at("spec", "replicas", value=1),
        (MINREP, "gateway runs at least 1 replica(s); this environment requires 2"),
    ),
]


CASES += [
    # the security baseline (issue 12)
    _case("key-without-policy", "cluster-key", at("policy", value=DELETE),
          (KEYPOL, "policy is not set: the account's default key policy applies")),
    _case("key-policy-kms-star", "cluster-key",
          at("policy", value='{"Statement": [{"Effect": "Allow", "Principal": {"AWS": "x"}, "Action": "kms:*"}]}'),
          (KEYPOL, "Statement[0] allows kms:*")),
    _case("log-group-unencrypted", "cluster-logs", at("kmsKeyId", value=DELETE),
          (LOGGROUP, "kmsKeyId is not set: the log group is encrypted with a CloudWatch-owned key only")),
    _case("log-group-short", "cluster-logs", at("retentionInDays", value=30),
          (LOGGROUP, "retentionInDays 30 is below 365")),
    _case("role-trusts-account", "admin-role",
          at("assumeRolePolicy", value='{"Statement": [{"Effect": "Allow", "Principal": {"AWS": '
             '"arn:aws:iam::123456789012:root"}, "Action": "sts:AssumeRole"}]}'),
          (ROOTTRUST, "Statement[0] trusts arn:aws:iam::123456789012:root")),
    _case("vpc-without-flow-log", "vpc-flow-log", lambda inputs: None,
          (FLOW, "VPC vpc has no flow log"), drop_dependencies=True),
    _case("bucket-without-logging", "model-cache-logging", lambda inputs: None,
          (S3LOG, "bucket model-cache has no access logging"),
          (S3LOG, "bucket model-cache-logs has no access logging"), drop_dependencies=True),
    _case("policy-that-allows", "default-deny", at("spec", "ingress", value=[{"from": [{"podSelector": {}}]}]),
          (DENY, "namespace inference of llama-70b has no default-deny NetworkPolicy")),
    _case("gke-legacy-datapath", "gke", at("datapathProvider", value="LEGACY_DATAPATH"),
          (GKEHARD, "datapathProvider is LEGACY_DATAPATH: NetworkPolicy is not enforced (use ADVANCED_DATAPATH)")),
    _case("gke-client-certificates", "gke", at("masterAuth", value=DELETE),
          (GKEHARD, "masterAuth.clientCertificateConfig.issueClientCertificate is not explicitly false")),
    _case("gke-no-binauthz", "gke", at("binaryAuthorization", "evaluationMode", value="DISABLED"),
          (GKEHARD, "binaryAuthorization.evaluationMode is DISABLED")),
    _case("gke-no-intranode", "gke", at("enableIntranodeVisibility", value=False),
          (GKEHARD, "enableIntranodeVisibility is not true")),
    _case("subnet-without-flow-logs", "gke-subnet", at("logConfig", value=DELETE),
          (SUBNETLOG, "logConfig is not set: the subnet has no flow logs")),
    _case("writable-root", LLAMA, container("securityContext", "readOnlyRootFilesystem", value=False),
          (RESTRICTED, "containers[0] (vllm) does not set readOnlyRootFilesystem")),
    _case("low-uid", LLAMA, container("securityContext", "runAsUser", value=1000),
          (RESTRICTED, "containers[0] (vllm) runs as uid 1000, below 10000")),
    _case("capabilities-kept", LLAMA, container("securityContext", "capabilities", value={"drop": ["NET_RAW"]}),
          (RESTRICTED, "containers[0] (vllm) does not drop ALL capabilities")),
    _case("no-seccomp", LLAMA, pod("securityContext", value={}),
          (RESTRICTED, "containers[0] (vllm) has no RuntimeDefault seccomp profile")),
    _case("root-tpu-pod-is-the-documented-exception", LLAMA,
          _both(container("securityContext", "runAsNonRoot", value=DELETE),
                container("securityContext", "runAsUser", value=DELETE),
                container("resources", "limits", value={"memory": "256Gi", "google.com/tpu": 4}),
                container("resources", "requests", value={"cpu": "16", "memory": "256Gi", "google.com/tpu": 4})),
          (PLACE, "requests google.com/tpu but does not tolerate the google.com/tpu taint")),
    _case("root-gpu-pod", LLAMA, _both(container("securityContext", "runAsNonRoot", value=False),
                                       container("securityContext", "runAsUser", value=DELETE)),
          (RESTRICTED, "containers[0] (vllm) does not set runAsNonRoot"),
          (RESTRICTED, "containers[0] (vllm) sets no numeric runAsUser")),
    _case("no-security-context", LLAMA, container("securityContext", value=DELETE),
          (RESTRICTED, "containers[0] (vllm) does not set readOnlyRootFilesystem"),
          (RESTRICTED, "containers[0] (vllm) does not drop ALL capabilities"),
          (RESTRICTED, "containers[0] (vllm) does not set runAsNonRoot"),
          (RESTRICTED, "containers[0] (vllm) sets no numeric runAsUser")),
    _case("hf-token-in-env", LLAMA,
          container("env", value=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "h", "key": "t"}}}]),
          (SECRETFILE, "containers[0] (vllm) puts HF_TOKEN in its environment")),
]  # fmt: skip


def test_dev_keeps_control_plane_logs_90_days_prod_a_year(pack: PolicyPackProcess) -> None:
    plan = changed(happy_plan(), "cluster-logs", at("retentionInDays", value=90))
    assert LOGGROUP not in {v.policy for v in evaluate(pack, plan, "dev").violations}
    assert (LOGGROUP, "mandatory", "retentionInDays 90 is below 365") in found(evaluate(pack, plan, "prod"))
    assert (LOGGROUP, "mandatory", "retentionInDays 90 is below 365") in found(evaluate(pack, plan, "staging"))


@pytest.mark.parametrize("case", CASES)
def test_one_change_one_violation(pack: PolicyPackProcess, case: Case) -> None:
    plan = changed(happy_plan(), case.name, case.edit, protect=case.protect)
    if case.drop_dependencies:
        plan = [dataclasses.replace(r, dependencies=()) if r.name == case.name else r for r in plan]
    report = evaluate(pack, plan, case.environment)
    levels = {p.name: p.enforcement for p in report.policies}
    assert sorted(found(report)) == sorted((policy, levels[policy], detail) for policy, detail in case.expected)


def test_every_policy_has_a_violating_case() -> None:
    covered = {policy for param in CASES for policy, _ in param.values[0].expected}
    assert covered == {p.meta.name for p in POLICIES}


def test_the_gateways_scaled_object_needs_no_engine_queue_but_stays_in_bounds(pack: PolicyPackProcess) -> None:
    """The gateway scales on requests in flight through Envoy; model servers' queue rule is not its rule."""
    gateway_scaler = registration(
        T.SCALED_OBJECT,
        "gateway-scaledobject",
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "gateway", "labels": {COMPONENT_LABEL: GATEWAY}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gateway"},
                "minReplicaCount": 3,
                "maxReplicaCount": 12,
                "cooldownPeriod": 300,
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {
                            "serverAddress": "http://prometheus.monitoring:9090",
                            "query": 'sum(envoy_http_downstream_rq_active{envoy_http_conn_manager_prefix="gateway"})',
                            "threshold": "200",
                        },
                    }
                ],
            },
        },
    )
    assert found(evaluate(pack, [*happy_plan(), gateway_scaler])) == []
    # Its floor is the gateway's replica floor: one replica is refused in prod, as on the Deployment.
    low = changed([gateway_scaler], "gateway-scaledobject", at("spec", "minReplicaCount", value=1))
    assert found(evaluate(pack, [*happy_plan(), *low])) == [
        (MINREP, "mandatory", "gateway runs at least 1 replica(s); this environment requires 2")
    ]
    # Labelled as a model server's, the same object must watch an engine queue.
    unlabelled = changed([gateway_scaler], "gateway-scaledobject", at("metadata", "labels", value={}))
    assert found(evaluate(pack, [*happy_plan(), *unlabelled])) == [(QUEUE, "mandatory", NO_QUEUE)]


def test_sglang_with_metrics_passes_and_needs_its_preemption_alert(pack: PolicyPackProcess) -> None:
    def with_metrics(inputs: dict[str, Any]) -> None:
        inputs["spec"]["template"]["spec"]["containers"][0]["args"].append("--enable-metrics")

    sglang = _both(container("image", value=SGLANG_IMAGE), _annotation(ENGINE, "sglang"), with_metrics)
    plan = changed(happy_plan(), "llama-70b", sglang)
    assert found(evaluate(pack, plan)) == []
    # Retractions are SGLang's preemptions: the alert is required, as for vLLM.
    no_alerts = changed(plan, "alerts", at("spec", "groups", 0, "rules", value=[]))
    assert [(v.policy, v.detail) for v in evaluate(pack, no_alerts).violations] == [(ALERT, NO_ALERT)]
    # Dev and staging do not require the flag.
    bare = changed(
        happy_plan(), "llama-70b", _both(container("image", value=SGLANG_IMAGE), _annotation(ENGINE, "sglang"))
    )
    assert METRICS not in {v.policy for v in evaluate(pack, bare, "staging").violations}


def test_triton_servers_need_no_preemption_alert(pack: PolicyPackProcess) -> None:
    """TensorRT-LLM exports no preemption counter, so there is nothing to alert on."""
    plan = changed(happy_plan(), "alerts", at("spec", "groups", 0, "rules", value=[]))
    assert [(v.policy, v.detail) for v in evaluate(pack, plan).violations] == [(ALERT, NO_ALERT)]
    triton = f"nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3{DIGEST}"
    plan = changed(plan, "llama-70b", _both(container("image", value=triton), _annotation(ENGINE, "triton")))
    assert [v.policy for v in evaluate(pack, plan).violations] == []


# --- a crafted misfit -----------------------------------------------------------------------------------------


def test_seventy_billion_in_bf16_on_one_l4_fails_the_fit_policy(pack: PolicyPackProcess) -> None:
    server = model_server("llama-on-l4")
    inputs = dict(server.inputs)
    annotations = inputs["metadata"]["annotations"]
    annotations.update({"inferplane.io/accelerator": "l4-24gb", INSTANCE_TYPE: "g6.2xlarge", TENSOR_PARALLEL_SIZE: "1"})
    spec = inputs["spec"]["template"]["spec"]
    spec["nodeSelector"] = {POOL_LABEL: "l4", "inferplane.io/accelerator": "l4-24gb"}
    engine = spec["containers"][0]
    engine["args"] = [
        "--model",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--tensor-parallel-size=1",
        "--max-model-len=8192",
        "--max-num-seqs=16",
        "--gpu-memory-utilization=0.9",
    ]
    engine["resources"]["requests"][NVIDIA_GPU_RESOURCE] = 1
    engine["resources"]["limits"][NVIDIA_GPU_RESOURCE] = 1
    plan = [p for p in happy_plan() if p.name != "llama-70b"] + [registration(server.type, server.name, inputs)]
    report = evaluate(pack, plan, "prod")
    fit = [v for v in report.violations if v.policy == FIT]
    assert [(v.enforcement, v.detail) for v in fit] == [
        (
            "mandatory",
            "llama-3.3-70b (bf16) on 1 x l4-24gb does not fit: llama-3.3-70b weights in bf16 take 131.4 GiB, plus a "
            "1.9 GiB runtime reserve, more than 1 x l4-24gb (TP 1, 20.1 GiB usable at 0.9)",
        )
    ]
    assert not report.ok


# --- unknown values during preview ---------------------------------------------------------------------------


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))] + ([path] if path else [])
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))] + ([path] if path else [])
    return [path]


Subtrees = tuple[tuple[str, tuple[str | int, ...]], ...]
"""(resource name, path prefix) pairs: the inputs under each prefix are made unknown in turn."""


def _unknown_at(plan: list[Registration], subtrees: Subtrees) -> list[Any]:
    """One case per input under the subtrees (each leaf, and each object or list holding one), made unknown."""
    return [
        pytest.param(r.name, path, id=f"{r.name}:{'.'.join(map(str, path))}")
        for r in plan
        for path in _leaves(dict(r.inputs))
        if any(r.name == name and path[: len(prefix)] == prefix for name, prefix in subtrees)
    ]


_PATHS = _unknown_at(happy_plan(), tuple((r.name, ()) for r in happy_plan()))


def test_everything_unknown_trips_nothing(pack: PolicyPackProcess) -> None:
    plan = [
        changed([r], r.name, lambda inputs: inputs.update(dict.fromkeys(inputs, rpc.UNKNOWN)))[0] for r in happy_plan()
    ]
    report = evaluate(pack, plan, "prod")
    assert found(report) == []


@pytest.mark.parametrize(("name", "path"), _PATHS)
def test_an_unknown_value_never_counts_as_a_violation(
    pack: PolicyPackProcess, name: str, path: tuple[Any, ...]
) -> None:
    """Every input of the happy plan, unknown in turn: enumerated, not sampled, so no path passes CI by not being
    drawn (a sample of 60 of these paths once missed the gateway's first container)."""
    report = evaluate(pack, changed(happy_plan(), name, at(*path, value=rpc.UNKNOWN)), "prod")
    assert found(report) == []


def _tpu_pod(plan: list[Registration]) -> list[Registration]:
    """The model server on TPUs as root: the documented uid exception (its placement is reported)."""
    return changed(
        plan,
        LLAMA,
        _both(
            container("securityContext", "runAsNonRoot", value=DELETE),
            container("securityContext", "runAsUser", value=DELETE),
            container("resources", "limits", value={"memory": "256Gi", "google.com/tpu": 4}),
            container("resources", "requests", value={"cpu": "16", "memory": "256Gi", "google.com/tpu": 4}),
        ),
    )


def _served_as_chat(plan: list[Registration]) -> list[Registration]:
    """The server's metrics name it by --served-model-name ``chat``, unlike its labels; its alert names ``chat``."""
    plan = changed(plan, LLAMA, _args(("--served-model-name", "chat")))
    rule = {"alert": "InferplanePreemptions", "expr": 'rate(vllm:num_preemptions_total{model_name="chat"}[5m]) > 0'}
    return changed(plan, "alerts", at("spec", "groups", 0, "rules", value=[{**rule, "labels": {"model": "chat"}}]))


def _gateway_role_on_the_object(plan: list[Registration]) -> list[Registration]:
    """The gateway's role label on the Deployment only, not on its pods."""
    return changed(plan, "gateway", at("spec", "template", "metadata", "labels", value={NAME_LABEL: "gateway"}))


def _scaled_by_label(plan: list[Registration]) -> list[Registration]:
    """The ScaledObject finds its server by the served-model label on the server's pods, not by name."""
    plan = changed(plan, "llama-70b-scaler", at("spec", "scaleTargetRef", "name", value="llama-70b-v2"))
    labels = {NAME_LABEL: LLAMA, COMPONENT_LABEL: MODEL_SERVER}
    return changed(plan, LLAMA, at("metadata", "labels", value=labels))


def _node_agent(plan: list[Registration]) -> list[Registration]:
    """An allowlisted node agent (the DCGM exporter) on the host network, reading a host path."""
    spec = {
        "hostNetwork": True,
        "volumes": [{"name": "sys", "hostPath": {"path": "/sys"}}],
        "containers": [
            {
                "name": "dcgm",
                "image": f"nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3{DIGEST}",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "128Mi"}},
            }
        ],
    }
    inputs = {"metadata": {"name": "dcgm-exporter"}, "spec": {"template": {"spec": spec}}}
    return [*plan, registration(T.DAEMON_SET, "dcgm-exporter", inputs)]


_CONTAINERS = ("spec", "template", "spec", "containers")
_LABELS: Subtrees = ((LLAMA, ("metadata",)), (LLAMA, ("spec", "template", "metadata")))
_VARIANTS: dict[str, tuple[Callable[[list[Registration]], list[Registration]], Subtrees]] = {
    "tpu-pod": (
        _tpu_pod,
        (
            (LLAMA, (*_CONTAINERS, 0, "resources")),
            (LLAMA, (*_CONTAINERS, 0, "securityContext")),
            (LLAMA, (*_CONTAINERS[:-1], "securityContext")),
        ),
    ),
    "served-as-chat": (_served_as_chat, ((LLAMA, (*_CONTAINERS, 0, "args")), *_LABELS, ("alerts", ()))),
    "gateway-role-on-the-object": (
        _gateway_role_on_the_object,
        (("gateway", ("metadata",)), ("gateway", ("spec", "template", "metadata"))),
    ),
    "scaled-by-label": (_scaled_by_label, (*_LABELS, ("llama-70b-scaler", ()))),
    "node-agent": (_node_agent, (("dcgm-exporter", ()),)),
}
"""Shapes the happy plan lacks, each with the inputs that decide its verdicts (made unknown in turn)."""


@pytest.mark.parametrize(
    ("variant", "name", "path"),
    [
        pytest.param(variant, *case.values, id=f"{variant}/{case.id}")
        for variant, (make, names) in _VARIANTS.items()
        for case in _unknown_at(make(happy_plan()), names)
    ],
)
def test_an_unknown_value_adds_no_violation_to_other_shapes(
    pack: PolicyPackProcess, variant: str, name: str, path: tuple[Any, ...]
) -> None:
    """An unknown container, token, label map or name must not stand for "absent" (each shape once did)."""
    plan = _VARIANTS[variant][0](happy_plan())
    if variant not in _KNOWN_FINDINGS:
        _KNOWN_FINDINGS[variant] = _policies_and_urns(evaluate(pack, plan, "prod"))
    after = _policies_and_urns(evaluate(pack, changed(plan, name, at(*path, value=rpc.UNKNOWN)), "prod"))
    assert after - _KNOWN_FINDINGS[variant] == set()


def _policies_and_urns(report: PolicyReport) -> set[tuple[str, str]]:
    """Which policies fire on which resources (an unknown container name may only reword a finding)."""
    return {(v.policy, v.urn) for v in report.violations}


_KNOWN_FINDINGS: dict[str, set[tuple[str, str]]] = {}
"""Each shape's findings with every value known, evaluated once (the pack's answer is deterministic)."""


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("tpu-pod", [(PLACE, "requests google.com/tpu but does not tolerate the google.com/tpu taint")]),
        ("served-as-chat", []),
        ("gateway-role-on-the-object", []),
        ("scaled-by-label", []),
        ("node-agent", []),
    ],
)
def test_the_other_shapes_are_judged_when_known(
    pack: PolicyPackProcess, variant: str, expected: list[tuple[str, str]]
) -> None:
    """What each shape reports with every value known: its own finding only, so the test above compares like with
    like."""
    assert [(p, d) for p, _, d in found(evaluate(pack, _VARIANTS[variant][0](happy_plan()), "prod"))] == expected


def test_unknowns_in_a_violating_plan_hide_only_what_they_hide(pack: PolicyPackProcess) -> None:
    plan = changed(happy_plan(), "cluster", at("enabledClusterLogTypes", value=["api"]))
    plan = changed(plan, "cluster", at("encryptionConfig", value=rpc.UNKNOWN))
    assert found(evaluate(pack, plan, "prod")) == [
        (LOGS, "mandatory", "enabledClusterLogTypes lacks audit, authenticator, controllerManager, scheduler")
    ]


# --- the policies agree with sizing ---------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_re_derived_settings_reproduce_the_stack_sizing(stack: str) -> None:
    """The fit policy re-asks sizing from annotations and vLLM args; it must reach sizing's own verdict."""
    spec = load_stack(find_project_dir(), stack).platform
    for deployment in size_platform(spec).deployments:
        server = model_server(deployment.name)
        inputs = dict(server.inputs)
        inputs["metadata"]["annotations"] = serving_annotations(deployment)
        v = deployment.result.vllm
        inputs["spec"]["template"]["spec"]["containers"][0]["args"] = [
            f"--tensor-parallel-size={v.tensor_parallel_size}",
            f"--max-model-len={v.max_model_len}",
            f"--max-num-seqs={v.max_num_seqs}",
            f"--max-num-batched-tokens={v.max_num_batched_tokens}",
            f"--gpu-memory-utilization={v.gpu_memory_utilization}",
            f"--kv-cache-dtype={v.kv_cache_dtype}",
            *(["--quantization", v.quantization] if v.quantization else []),
        ]
        from inferplane.policies.base import Resource

        resource = Resource(server.type, server.name, server.urn, inputs)
        result = sizing_for(serving_settings(resource))
        assert result is not None
        assert result.fits == deployment.result.fits
        assert result.max_concurrent_sequences == deployment.result.max_concurrent_sequences
        assert result.reserve_bytes == deployment.result.reserve_bytes
        assert inputs["metadata"]["annotations"][MODEL] == deployment.result.model


# --- the engine's launch ---------------------------------------------------------------------------------------


def test_pack_is_launched_like_the_python_analyzer_shim() -> None:
    from inferplane.tool.analyzer import POLICY_PACK_DIR, policy_pack_command

    command = policy_pack_command(POLICY_PACK_DIR, "127.0.0.1:1234")
    assert command[1:] == ["-u", "-m", "pulumi.policy", "127.0.0.1:1234", "."]
    assert command[0] == str((POLICY_PACK_DIR.parent / ".venv").resolve() / "bin" / "python")


def test_pack_process_is_gone_after_the_context() -> None:
    with PolicyPackProcess.start(stack="dev") as running:
        process = running.process
        assert process.poll() is None
    assert process.poll() is not None


# --- shipped stacks, tokens, the annotation contract, a broken pack -------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_shipped_stack_passes_its_environments_mandatory_policies(pack: PolicyPackProcess, stack: str) -> None:
    from inferplane.tool.analyzer import check_stack

    report = check_stack(stack, pack=pack)
    assert len(report.evaluated) >= 25
    assert [(v.policy, v.urn.rsplit("::", 1)[-1]) for v in report.mandatory] == []


def test_type_tokens_are_the_sdks_tokens() -> None:
    import pulumi_aws as aws
    import pulumi_kubernetes as k8s

    from inferplane.policies.resource_types import TAGGABLE, T

    classes = {
        T.EKS_CLUSTER: aws.eks.Cluster,
        T.EKS_NODE_GROUP: aws.eks.NodeGroup,
        T.LAUNCH_TEMPLATE: aws.ec2.LaunchTemplate,
        T.SECURITY_GROUP: aws.ec2.SecurityGroup,
        T.ELASTICACHE_REPLICATION_GROUP: aws.elasticache.ReplicationGroup,
        T.KMS_KEY: aws.kms.Key,
        T.S3_BUCKET: aws.s3.Bucket,
        T.S3_BUCKET_V2: aws.s3.BucketV2,
        T.CLOUDWATCH_LOG_GROUP: aws.cloudwatch.LogGroup,
        T.EBS_VOLUME: aws.ebs.Volume,
        T.DEPLOYMENT: k8s.apps.v1.Deployment,
        T.STATEFUL_SET: k8s.apps.v1.StatefulSet,
        T.DAEMON_SET: k8s.apps.v1.DaemonSet,
        T.JOB: k8s.batch.v1.Job,
        T.POD_DISRUPTION_BUDGET: k8s.policy.v1.PodDisruptionBudget,
        T.SERVICE: k8s.core.v1.Service,
        T.PERSISTENT_VOLUME_CLAIM: k8s.core.v1.PersistentVolumeClaim,
        T.CONFIG_MAP: k8s.core.v1.ConfigMap,
    }
    for token, cls in classes.items():
        assert cls.pulumi_type == token  # type: ignore[attr-defined]
    assert aws.vpc.SecurityGroupIngressRule.pulumi_type == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"  # type: ignore[attr-defined]
    # CustomResources are typed kubernetes:<apiVersion>:<kind>: register them and read the type the engine sees.
    from inferplane.tool.mockengine import PlatformMocks, evaluate

    def program() -> None:
        k8s.apiextensions.CustomResource("so", api_version="keda.sh/v1alpha1", kind="ScaledObject", spec={})
        k8s.apiextensions.CustomResource("rule", api_version="monitoring.coreos.com/v1", kind="PrometheusRule")

    registered = evaluate(program, mocks=PlatformMocks())
    assert sorted(r.type for r in registered.registrations) == sorted([T.SCALED_OBJECT, T.PROMETHEUS_RULE])
    for taggable in TAGGABLE:  # aws:<module>/<camel>:<Class> names pulumi_aws.<module>.<Class>
        module, cls_name = taggable.split(":")[1].split("/")[0], taggable.split(":")[2]
        assert getattr(getattr(aws, module), cls_name).pulumi_type == taggable


def test_serving_annotations_round_trip_and_name_the_bad_key() -> None:
    from inferplane.components.serving.annotations import AnnotationError, parse_serving_annotations
    from tests.policy_plan import prod_llama

    sizing = prod_llama()
    parsed = parse_serving_annotations(serving_annotations(sizing))
    assert parsed.model == "llama-3.3-70b"
    assert parsed.tensor_parallel_size == sizing.gpus_per_replica
    assert parsed.max_num_batched_tokens == sizing.result.max_num_batched_tokens
    assert parsed.engine_start_seconds == sizing.result.engine_start_seconds
    with pytest.raises(AnnotationError) as raised:
        parse_serving_annotations({**serving_annotations(sizing), "inferplane.io/gpu-memory-utilization": "1.5"})
    assert str(raised.value) == "inferplane.io/gpu-memory-utilization='1.5': Input should be less than or equal to 1"


def test_a_pack_that_fails_to_start_is_reported_with_its_output(tmp_path: Any) -> None:
    from inferplane.tool.analyzer import PROJECT_DIR

    (tmp_path / "PulumiPolicy.yaml").write_text(
        f"runtime:\n  name: python\n  options:\n    virtualenv: {PROJECT_DIR / '.venv'}\n", encoding="utf-8"
    )
    (tmp_path / "__main__.py").write_text("raise RuntimeError('no policies today')\n", encoding="utf-8")
    with pytest.raises(PolicyPackError) as raised, PolicyPackProcess.start(tmp_path):
        pass
    assert "could not read the policy pack's port (exit status 1)" in str(raised.value)
    assert "no policies today" in str(raised.value)


def test_policy_runner_answers_with_the_previews_report() -> None:
    """The offline preview's seam (``policy_runner_for``) gets the preview's own types back."""
    model = pytest.importorskip(
        "inferplane.tool.preview.model", reason="tool/preview (the offline preview) is not merged here"
    )
    from inferplane.tool.analyzer import PROJECT_DIR, policy_runner

    stack = load_stack(PROJECT_DIR, "prod")
    plan = changed(happy_plan(), "cluster-key", at("enableKeyRotation", value=False))
    resources = [
        model.PlanResource(
            urn=r.urn,
            type=r.type,
            name=r.name,
            parent=r.parent,
            provider=r.provider,
            inputs=dict(r.inputs),
            dependencies=r.dependencies,
            protect=r.protect,
        )
        for r in plan
    ]
    report = policy_runner(PROJECT_DIR)(resources, stack)
    assert [(v.policy, v.enforcement, v.urn) for v in report.violations] == [
        ("kms-key-enable-rotation", "mandatory", plan[0].urn)
    ]
    assert sorted(p.name for p in report.policies) == sorted(p.meta.name for p in POLICIES)


def test_both_of_stagings_gateways_share_their_budgets_under_prods_rule(pack: PolicyPackProcess) -> None:
    """Staging runs an EKS and a GKE gateway (2 replicas each): under prod's rate-limit rule both pass, and the GKE
    one fails as it was before it had a store (no Redis URL reaches its processor)."""
    from inferplane.tool.analyzer import plan_stack

    plan = list(plan_stack("staging").registrations)
    assert [v for v in evaluate(pack, plan).violations if v.policy == GWRATE] == []

    report = evaluate(pack, changed(plan, "gateway-gke-deployment", _without_redis_url))
    assert [(v.policy, v.urn.rsplit("::", 1)[-1]) for v in report.violations if v.policy == GWRATE] == [
        (GWRATE, "gateway-gke-deployment")
    ]
