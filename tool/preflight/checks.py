"""The checks: what the stack needs from the account, asked of AWS before ``pulumi up`` half-fails.

Each check reads the validated spec and its sizing (the same ``size_platform`` the preview prints), asks AWS only
through :class:`~inferplane.tool.preflight.aws.AwsCaller` with the calls its registry entry declares, and returns
:class:`Finding` rows: ``pass``, ``warn`` or ``fail``, each with the figures behind the verdict. A denied or failed
call becomes a ``fail`` row naming the permission or the error; it never stops the other checks. Only a problem no
check can get past (no credentials, no endpoint) raises :class:`~inferplane.tool.preflight.aws.PreflightError`.

GKE pools (instance types of cloud ``gcp``) are outside this AWS preflight and reported as skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity.sizing import PlatformSizing, PoolSizing
from inferplane.components.catalog import INSTANCE_TYPES, InstanceType, get_accelerator
from inferplane.components.spec.platform_spec import AmiFamily, CapacityType, PlatformSpec, PoolSpec
from inferplane.tool.preflight.aws import ApiCallError, AwsCaller, CallUnavailableError
from inferplane.tool.preflight.registry import (
    ACCELERATED_AMI,
    ACCELERATOR_FACTS,
    CAPACITY_BLOCK,
    CLUSTER_VERSION,
    DESCRIBE_CAPACITY_RESERVATIONS,
    DESCRIBE_CLUSTER_VERSIONS,
    DESCRIBE_INSTANCE_TYPE_OFFERINGS,
    DESCRIBE_INSTANCE_TYPES,
    GET_AMI_PARAMETER,
    GET_AWS_DEFAULT_SERVICE_QUOTA,
    GET_CALLER_IDENTITY,
    GET_SERVICE_QUOTA,
    IDENTITY,
    VCPU_QUOTA,
    ZONES,
    CheckSpec,
)

Status = Literal["pass", "warn", "fail"]
Figure = int | float | str | bool | list[str] | None

_RANK: dict[Status, int] = {"pass": 0, "warn": 1, "fail": 2}


class Finding(BaseModel):
    """One verdict of one check about one subject (a pool, an instance type, a quota, the cluster)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str = Field(description="Check id from the registry, e.g. ``vcpu-quota``.")
    subject: str = Field(description="What was checked, e.g. ``pool h100`` or ``L-417A185B``.")
    status: Status = Field(description="pass, warn or fail.")
    message: str = Field(description="One line a person reads.")
    figures: dict[str, Figure] = Field(default_factory=dict, description="The numbers behind the verdict.")


class SkippedPool(BaseModel):
    """A pool this AWS preflight does not check, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool: str
    instance_type: str
    reason: str


class Report(BaseModel):
    """Everything one preflight run found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str
    region: str
    account: str | None = Field(description="Account the checks ran in (sts GetCallerIdentity).")
    principal: str | None = Field(description="ARN of the caller.")
    checked_at: datetime
    horizon_hours: float = Field(description="How long capacity blocks and standard support must still last.")
    findings: tuple[Finding, ...]
    skipped: tuple[SkippedPool, ...]

    def count(self, status: Status) -> int:
        """How many findings have ``status``."""
        return sum(1 for f in self.findings if f.status == status)

    @property
    def ok(self) -> bool:
        """True when nothing failed (warnings do not block ``pulumi up``)."""
        return self.count("fail") == 0


# --- EC2 vCPU quotas -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VcpuQuota:
    """A Service Quotas code for an EC2 vCPU bucket (service code ``ec2``, unit vCPUs)."""

    code: str
    name: str


# Service Quotas, service code "ec2" (AWS doc "Amazon EC2 instance type quotas", via ../shared/reference/facts.md
# §3.1; the codes and names agree across independent quota tools' source, read 2026-11-29). GPU buckets start at 0.
ON_DEMAND_P = VcpuQuota("L-417A185B", "Running On-Demand P instances")
ON_DEMAND_G = VcpuQuota("L-DB2E81BA", "Running On-Demand G and VT instances")
SPOT_G = VcpuQuota("L-3819A6DF", "All G and VT Spot Instance Requests")
SPOT_P5 = VcpuQuota("L-C4BD4855", "All P5 Spot Instance Requests")
SPOT_P4_P3_P2 = VcpuQuota("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests")


def vcpu_quota_for(instance: InstanceType, capacity_type: CapacityType) -> VcpuQuota | None:
    """The vCPU quota a pool draws on.

    None for capacity blocks: EC2 sells them as reservations with their own per-family "concurrent blocks" quotas
    (facts.md §1.4), and :func:`check_capacity_blocks` checks the reservation itself.
    """
    if capacity_type == "capacity_block" or instance.cloud != "aws":
        return None
    if capacity_type == "on_demand":
        return ON_DEMAND_P if instance.quota_family == "P" else ON_DEMAND_G
    if instance.quota_family == "G":
        return SPOT_G
    family = instance.name.split(".", 1)[0]  # p5, p5e, p5en, p4de
    return SPOT_P5 if family.startswith("p5") else SPOT_P4_P3_P2


# --- context ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreflightContext:
    """What every check reads: the validated spec, its sizing, the clock and the horizon."""

    spec: PlatformSpec
    sizing: PlatformSizing
    now: datetime
    horizon: timedelta

    @property
    def aws_pools(self) -> list[tuple[PoolSpec, InstanceType, PoolSizing]]:
        """EC2 pools with their catalog row and sizing, in spec order."""
        sized = {p.name: p for p in self.sizing.pools}
        rows = []
        for pool in self.spec.pools:
            instance = INSTANCE_TYPES[pool.instance_type]
            if instance.cloud == "aws":
                rows.append((pool, instance, sized[pool.name]))
        return rows

    def pool_zones(self, pool: PoolSpec) -> tuple[str, ...]:
        """The zones a pool's node group spans: its pinned zone, or the platform's zones."""
        return (pool.zone,) if pool.zone else self.spec.zones


def _guarded(check: CheckSpec, subject: str, judge: Callable[..., Finding], *args: Any) -> Finding:
    """``judge(*args)``, or a ``fail`` finding carrying the call's one-line error (a denied permission, say)."""
    try:
        return judge(*args)
    except ApiCallError as problem:
        return Finding(check=check.id, subject=subject, status="fail", message=str(problem))


def _pools_label(pools: Iterable[str]) -> str:
    names = list(pools)
    return ("pool " if len(names) == 1 else "pools ") + ", ".join(names)


# --- instance type offered in the pool's zones --------------------------------------------------------------------


def check_zones(ctx: PreflightContext, aws: AwsCaller) -> list[Finding]:
    """Each pool's instance type is offered (availability-zone level) in every zone its node group spans."""
    offered: dict[str, set[str]] = {}
    return [
        _guarded(ZONES, f"pool {pool.name}", _zones_finding, ctx, aws, offered, pool, instance)
        for pool, instance, _ in ctx.aws_pools
    ]


def _offered_zones(aws: AwsCaller, instance_type: str) -> set[str]:
    zones: set[str] = set()
    for page in aws.pages(
        ZONES,
        DESCRIBE_INSTANCE_TYPE_OFFERINGS,
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    ):
        zones.update(o["Location"] for o in page.get("InstanceTypeOfferings", []))
    return zones


def _zones_finding(
    ctx: PreflightContext,
    aws: AwsCaller,
    offered: dict[str, set[str]],
    pool: PoolSpec,
    instance: InstanceType,
) -> Finding:
    if instance.name not in offered:  # one call per instance type, however many pools share it
        offered[instance.name] = _offered_zones(aws, instance.name)
    where = offered[instance.name]
    wanted = ctx.pool_zones(pool)
    missing = [z for z in wanted if z not in where]
    working = sorted(where)
    figures: dict[str, Figure] = {
        "instance_type": instance.name,
        "zones": list(wanted),
        "missing": missing,
        "offered_in": working,
    }
    if not missing:
        return Finding(
            check=ZONES.id,
            subject=f"pool {pool.name}",
            status="pass",
            message=f"{instance.name} is offered in all {len(wanted)} zone(s): {', '.join(wanted)}",
            figures=figures,
        )
    usable = len(wanted) - len(missing)
    would_work = ", ".join(working) if working else f"none in {ctx.spec.region}"
    return Finding(
        check=ZONES.id,
        subject=f"pool {pool.name}",
        status="fail",
        message=(
            f"{instance.name} is not offered in {', '.join(missing)} ({usable} of {len(wanted)} zones usable); "
            f"zones that would work: {would_work}"
        ),
        figures=figures,
    )


# --- catalog facts against DescribeInstanceTypes ----------------------------------------------------------------


def check_accelerator_facts(ctx: PreflightContext, aws: AwsCaller) -> list[Finding]:
    """The catalog's GPU count, per-GPU memory (MiB) and vCPUs agree with ``DescribeInstanceTypes``."""
    by_type: dict[str, list[str]] = {}
    for pool, instance, _ in ctx.aws_pools:
        by_type.setdefault(instance.name, []).append(pool.name)
    return [
        _guarded(ACCELERATOR_FACTS, name, _facts_finding, ctx, aws, INSTANCE_TYPES[name], pools)
        for name, pools in by_type.items()
    ]


def _facts_finding(ctx: PreflightContext, aws: AwsCaller, instance: InstanceType, pools: list[str]) -> Finding:
    name = instance.name
    try:
        response = aws.call(ACCELERATOR_FACTS, DESCRIBE_INSTANCE_TYPES, InstanceTypes=[name])
    except ApiCallError as problem:
        if problem.code != "InvalidInstanceType":
            raise
        return Finding(
            check=ACCELERATOR_FACTS.id,
            subject=name,
            status="fail",
            message=f"EC2 in {ctx.spec.region} does not know {name} ({problem.detail})",
            figures={"instance_type": name},
        )
    described = response.get("InstanceTypes", [])
    if not described:
        return Finding(
            check=ACCELERATOR_FACTS.id,
            subject=name,
            status="fail",
            message=f"EC2 in {ctx.spec.region} returned no description of {name}",
            figures={"instance_type": name},
        )
    info = described[0]
    gpus = info.get("GpuInfo", {}).get("Gpus", [])
    ec2_count = sum(int(g.get("Count", 0)) for g in gpus)
    ec2_memory = int(gpus[0].get("MemoryInfo", {}).get("SizeInMiB", 0)) if gpus else 0
    ec2_vcpus = int(info.get("VCpuInfo", {}).get("DefaultVCpus", 0))
    memory_mib = get_accelerator(instance.accelerator).memory_mib
    figures: dict[str, Figure] = {
        "gpus": ec2_count,
        "gpu_memory_mib": ec2_memory,
        "vcpus": ec2_vcpus,
        "catalog_gpus": instance.accelerators_per_node,
        "catalog_gpu_memory_mib": memory_mib,
        "catalog_vcpus": instance.vcpus,
    }
    differences = [
        f"{what}: catalog {ours}, EC2 {theirs}"
        for what, ours, theirs in (
            ("GPUs", instance.accelerators_per_node, ec2_count),
            ("GPU memory MiB", memory_mib, ec2_memory),
            ("vCPUs", instance.vcpus, ec2_vcpus),
        )
        if ours != theirs
    ]
    if differences:
        return Finding(
            check=ACCELERATOR_FACTS.id,
            subject=name,
            status="fail",
            message=f"{'; '.join(differences)}: sizing of {_pools_label(pools)} rests on the catalog",
            figures=figures,
        )
    gpu_name = str(gpus[0].get("Name", "GPU")) if gpus else "GPU"
    return Finding(
        check=ACCELERATOR_FACTS.id,
        subject=name,
        status="pass",
        message=f"{ec2_count} x {gpu_name} {ec2_memory} MiB, {ec2_vcpus} vCPUs, as the catalog says",
        figures=figures,
    )


# --- vCPU quota at max scale ------------------------------------------------------------------------------------

_Placed = tuple[PoolSpec, InstanceType, PoolSizing]


def check_vcpu_quota(ctx: PreflightContext, aws: AwsCaller) -> list[Finding]:
    """Each vCPU quota covers the pools drawing on it at max scale (``size_platform`` max nodes x vCPUs)."""
    demand: dict[VcpuQuota, list[_Placed]] = {}
    for pool, instance, sizing in ctx.aws_pools:
        quota = vcpu_quota_for(instance, pool.capacity_type)
        if quota is not None:
            demand.setdefault(quota, []).append((pool, instance, sizing))
    return [
        _guarded(VCPU_QUOTA, quota.code, _quota_finding, ctx, aws, quota, placed) for quota, placed in demand.items()
    ]


def _quota_finding(ctx: PreflightContext, aws: AwsCaller, quota: VcpuQuota, placed: list[_Placed]) -> Finding:
    required = sum(sizing.max_nodes * instance.vcpus for _, instance, sizing in placed)
    breakdown = " + ".join(f"{s.max_nodes} x {i.vcpus} ({p.name})" for p, i, s in placed)
    value, source = _quota_value(aws, quota)
    figures: dict[str, Figure] = {
        "quota_code": quota.code,
        "quota_name": quota.name,
        "required_vcpus": required,
        "quota_vcpus": value,
        "source": source,
        "pools": [pool.name for pool, _, _ in placed],
    }
    if value is None:
        return Finding(
            check=VCPU_QUOTA.id,
            subject=quota.code,
            status="warn",
            message=f"{quota.name}: Service Quotas has no value in {ctx.spec.region}; needs {required} vCPUs",
            figures=figures,
        )
    shortfall = max(0, required - int(value))
    figures["shortfall_vcpus"] = shortfall
    needs = f"{quota.name}: needs {required} vCPUs at max scale ({breakdown}), quota is {value:g}"
    if shortfall:
        return Finding(
            check=VCPU_QUOTA.id,
            subject=quota.code,
            status="fail",
            message=f"{needs}: short by {shortfall} vCPUs",
            figures=figures,
        )
    return Finding(check=VCPU_QUOTA.id, subject=quota.code, status="pass", message=needs, figures=figures)


def _quota_value(aws: AwsCaller, quota: VcpuQuota) -> tuple[float | None, str]:
    """The applied quota; the AWS default where none was ever applied (GetServiceQuota's NoSuchResourceException)."""
    params = {"ServiceCode": "ec2", "QuotaCode": quota.code}
    try:
        return float(aws.call(VCPU_QUOTA, GET_SERVICE_QUOTA, **params)["Quota"]["Value"]), "applied"
    except ApiCallError as problem:
        if problem.code != "NoSuchResourceException":
            raise
    try:
        return float(aws.call(VCPU_QUOTA, GET_AWS_DEFAULT_SERVICE_QUOTA, **params)["Quota"]["Value"]), "default"
    except ApiCallError as problem:
        if problem.code != "NoSuchResourceException":
            raise
    return None, "none"


# --- capacity blocks --------------------------------------------------------------------------------------------

# Capacity Blocks usable for launches: "Capacity Blocks must be in a scheduled or active state" (AWS PCS user guide,
# capacity-blocks.html; EC2 capacity-blocks-view.html lists the states).
_USABLE_STATES = frozenset({"active", "scheduled"})


def check_capacity_blocks(ctx: PreflightContext, aws: AwsCaller) -> list[Finding]:
    """A capacity-block pool's reservation exists, is active or scheduled, sits in the pool's zone, is for the
    pool's instance type and ends after now + horizon; fewer reserved instances than max scale is a warning."""
    return [
        _guarded(CAPACITY_BLOCK, f"pool {pool.name}", _reservation_finding, ctx, aws, pool, instance, sizing)
        for pool, instance, sizing in ctx.aws_pools
        if pool.capacity_type == "capacity_block"
    ]


def _reservation_finding(
    ctx: PreflightContext, aws: AwsCaller, pool: PoolSpec, instance: InstanceType, sizing: PoolSizing
) -> Finding:
    reservation_id = str(pool.capacity_reservation_id)  # required for capacity_block by check_platform
    missing = Finding(
        check=CAPACITY_BLOCK.id,
        subject=f"pool {pool.name}",
        status="fail",
        message=f"no capacity reservation {reservation_id} in {ctx.spec.region}",
        figures={"reservation": reservation_id},
    )
    try:
        response = aws.call(CAPACITY_BLOCK, DESCRIBE_CAPACITY_RESERVATIONS, CapacityReservationIds=[reservation_id])
    except ApiCallError as problem:
        if not problem.code.startswith("InvalidCapacityReservationId"):
            raise
        return missing.model_copy(update={"message": f"{missing.message} ({problem.code})"})
    found = [r for r in response.get("CapacityReservations", []) if r.get("CapacityReservationId") == reservation_id]
    return _judge_reservation(ctx, pool, instance, sizing, found[0]) if found else missing


def _judge_reservation(
    ctx: PreflightContext, pool: PoolSpec, instance: InstanceType, sizing: PoolSizing, reservation: dict[str, Any]
) -> Finding:
    state = str(reservation.get("State", "unknown"))
    zone = str(reservation.get("AvailabilityZone", ""))
    kind = str(reservation.get("InstanceType", ""))
    total = int(reservation.get("TotalInstanceCount", 0))
    end: datetime | None = reservation.get("EndDate")
    hours_left = None if end is None else round((end - ctx.now).total_seconds() / 3600, 1)
    horizon_hours = ctx.horizon.total_seconds() / 3600
    figures: dict[str, Figure] = {
        "reservation": pool.capacity_reservation_id,
        "state": state,
        "zone": zone,
        "instance_type": kind,
        "instances": total,
        "max_nodes": sizing.max_nodes,
        "end": None if end is None else end.astimezone(UTC).isoformat(),
        "hours_left": hours_left,
        "horizon_hours": horizon_hours,
    }
    failures = []
    if state not in _USABLE_STATES:
        failures.append(f"state {state} (usable: active, scheduled)")
    if zone != pool.zone:
        failures.append(f"in {zone}, the pool is pinned to {pool.zone}")
    if kind != instance.name:
        failures.append(f"reserves {kind}, the pool runs {instance.name}")
    if end is not None and hours_left is not None and end <= ctx.now + ctx.horizon:
        when = "ended" if hours_left <= 0 else f"ends in {hours_left:g} h"
        failures.append(f"{when} ({end.astimezone(UTC):%Y-%m-%d %H:%M} UTC), within the {horizon_hours:g} h horizon")
    ends = "no end date" if end is None else f"ends {end.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({hours_left:g} h)"
    head = f"{pool.capacity_reservation_id}: "
    if failures:
        return Finding(
            check=CAPACITY_BLOCK.id,
            subject=f"pool {pool.name}",
            status="fail",
            message=head + "; ".join(failures),
            figures=figures,
        )
    if total < sizing.max_nodes:
        return Finding(
            check=CAPACITY_BLOCK.id,
            subject=f"pool {pool.name}",
            status="warn",
            message=head + f"{state} in {zone}, {ends}; reserves {total} instance(s), the pool scales to "
            f"{sizing.max_nodes}: {sizing.max_nodes - total} node(s) would never launch",
            figures=figures,
        )
    return Finding(
        check=CAPACITY_BLOCK.id,
        subject=f"pool {pool.name}",
        status="pass",
        message=head + f"{state} in {zone}, {total} x {kind}, {ends}",
        figures=figures,
    )


def ami_parameter(ami_family: AmiFamily, kubernetes_version: str) -> str:
    """The SSM public parameter holding the recommended accelerated (NVIDIA, x86_64) AMI id.

    docs.aws.amazon.com/eks/latest/userguide/retrieve-ami-id.html and retrieve-ami-id-bottlerocket.html
    (../shared/reference/facts.md §2.3).
    """
    if ami_family == "bottlerocket":
        return f"/aws/service/bottlerocket/aws-k8s-{kubernetes_version}-nvidia/x86_64/latest/image_id"
    return f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/x86_64/nvidia/recommended/image_id"


_AMI_LABEL: dict[AmiFamily, str] = {"al2023": "AL2023 NVIDIA", "bottlerocket": "Bottlerocket NVIDIA"}


def check_accelerated_ami(ctx: PreflightContext, aws: AwsCaller) -> list[Finding]:
    """The accelerated AMI each AMI family in use publishes for the cluster version exists in the region."""
    families: dict[AmiFamily, list[str]] = {}
    for pool, _, _ in ctx.aws_pools:
        families.setdefault(pool.ami_family, []).append(pool.name)
    version = ctx.spec.cluster.kubernetes_version
    return [
        _guarded(ACCELERATED_AMI, f"{_AMI_LABEL[family]} {version}", _ami_finding, ctx, aws, family, pools)
        for family, pools in families.items()
    ]


def _ami_finding(ctx: PreflightContext, aws: AwsCaller, family: AmiFamily, pools: list[str]) -> Finding:
    version = ctx.spec.cluster.kubernetes_version
    name = ami_parameter(family, version)
    subject = f"{_AMI_LABEL[family]} {version}"
    try:
        parameter = aws.call(ACCELERATED_AMI, GET_AMI_PARAMETER, Name=name)["Parameter"]
    except ApiCallError as problem:
        if problem.code != "ParameterNotFound":
            raise
        return Finding(
            check=ACCELERATED_AMI.id,
            subject=subject,
            status="fail",
            message=(
                f"no {subject} AMI in {ctx.spec.region} (SSM parameter {name} not found): "
                f"{_pools_label(pools)} could not boot; use a Kubernetes version the AMI is published for"
            ),
            figures={"parameter": name, "image_id": None},
        )
    image = str(parameter.get("Value", ""))
    return Finding(
        check=ACCELERATED_AMI.id,
        subject=subject,
        status="pass",
        message=f"{image} for {_pools_label(pools)} ({name})",
        figures={"parameter": name, "image_id": image},
    )


# --- cluster version support --------------------------------------------------------------------------------------


def check_cluster_version(ctx: PreflightContext, aws: AwsCaller) -> list[Finding]:
    """The cluster version is in standard support (``DescribeClusterVersions``); a warning when EKS cannot say,
    when the version is in (paid) extended support, or when standard support ends within the horizon."""
    version = ctx.spec.cluster.kubernetes_version
    return [_guarded(CLUSTER_VERSION, f"Kubernetes {version}", _version_finding, ctx, aws, version)]


def _version_finding(ctx: PreflightContext, aws: AwsCaller, version: str) -> Finding:
    subject = f"Kubernetes {version}"
    try:
        response = aws.call(CLUSTER_VERSION, DESCRIBE_CLUSTER_VERSIONS, clusterVersions=[version], includeAll=True)
    except CallUnavailableError as problem:
        return Finding(
            check=CLUSTER_VERSION.id,
            subject=subject,
            status="warn",
            message=f"support status unknown: {problem}",
            figures={"version_status": None},
        )
    listed = [v for v in response.get("clusterVersions", []) if v.get("clusterVersion") == version]
    if not listed:
        return Finding(
            check=CLUSTER_VERSION.id,
            subject=subject,
            status="fail",
            message=f"EKS in {ctx.spec.region} does not offer Kubernetes {version}",
            figures={"version_status": None},
        )
    info = listed[0]
    status = str(info.get("versionStatus", "UNKNOWN"))
    end_standard: datetime | None = info.get("endOfStandardSupportDate")
    end_extended: datetime | None = info.get("endOfExtendedSupportDate")
    days_left = None if end_standard is None else (end_standard - ctx.now).days
    figures: dict[str, Figure] = {
        "version_status": status,
        "end_of_standard_support": None if end_standard is None else end_standard.date().isoformat(),
        "end_of_extended_support": None if end_extended is None else end_extended.date().isoformat(),
        "standard_support_days_left": days_left,
    }
    if status == "STANDARD_SUPPORT":
        until = "" if end_standard is None else f" until {end_standard.date()} ({days_left} days)"
        soon = end_standard is not None and end_standard <= ctx.now + ctx.horizon
        return Finding(
            check=CLUSTER_VERSION.id,
            subject=subject,
            status="warn" if soon else "pass",
            message=f"standard support{until}" + ("; it ends within the horizon: plan the upgrade" if soon else ""),
            figures=figures,
        )
    if status == "EXTENDED_SUPPORT":
        until = "" if end_extended is None else f" until {end_extended.date()}"
        return Finding(
            check=CLUSTER_VERSION.id,
            subject=subject,
            status="warn",
            message=f"extended support{until}: billed at the extended-support rate; upgrade the cluster",
            figures=figures,
        )
    return Finding(
        check=CLUSTER_VERSION.id,
        subject=subject,
        status="fail",
        message=f"EKS reports {status} for Kubernetes {version}: no new cluster can run it",
        figures=figures,
    )


CHECK_FUNCTIONS: tuple[Callable[[PreflightContext, AwsCaller], list[Finding]], ...] = (
    check_zones,
    check_accelerator_facts,
    check_vcpu_quota,
    check_capacity_blocks,
    check_accelerated_ami,
    check_cluster_version,
)


def skipped_pools(spec: PlatformSpec) -> tuple[SkippedPool, ...]:
    """GKE pools: this preflight checks the AWS account only."""
    return tuple(
        SkippedPool(
            pool=pool.name,
            instance_type=pool.instance_type,
            reason="a GKE pool (instance cloud gcp): outside this AWS preflight",
        )
        for pool in spec.pools
        if INSTANCE_TYPES[pool.instance_type].cloud != "aws"
    )


def run_preflight(
    spec: PlatformSpec,
    sizing: PlatformSizing,
    aws: AwsCaller,
    *,
    horizon: timedelta = timedelta(hours=24),
    now: datetime | None = None,
) -> Report:
    """Run every check against the account ``aws`` reaches; raises ``PreflightError`` when none can run."""
    ctx = PreflightContext(spec=spec, sizing=sizing, now=now or datetime.now(UTC), horizon=horizon)
    identity: dict[str, Any] = {}
    try:
        identity = aws.call(IDENTITY, GET_CALLER_IDENTITY)
    except ApiCallError:
        identity = {}  # the account is a courtesy in the report; the checks say what matters
    findings = [finding for check in CHECK_FUNCTIONS for finding in check(ctx, aws)]
    return Report(
        environment=spec.environment,
        region=spec.region,
        account=identity.get("Account"),
        principal=identity.get("Arn"),
        checked_at=ctx.now,
        horizon_hours=horizon.total_seconds() / 3600,
        findings=tuple(findings),
        skipped=skipped_pools(spec),
    )
