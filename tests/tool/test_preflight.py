"""``inferplane preflight`` against moto: in-process (``mock_aws``) and over HTTP (moto's server on loopback).

Offerings and instance data are moto's bundled AWS data. Where moto has no data or no API, its backend is seeded
(Service Quotas for EC2, the EKS AMI parameters in SSM) or the one call is routed to a botocore ``Stubber`` on a
client built from the real service model, so request parameters are still validated by botocore and responses by
the Stubber (capacity reservations, ``DescribeClusterVersions``, a few error answers).
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.client import BaseClient
from botocore.loaders import Loader, create_loader
from botocore.stub import Stubber
from moto import mock_aws
from moto.core import set_initial_no_auth_action_count
from moto.moto_api._internal.models import moto_api_backend
from moto.server import ThreadedMotoServer
from moto.servicequotas.exceptions import NoSuchResource
from moto.servicequotas.models import servicequotas_backends
from moto.ssm.models import Parameter, ssm_backends

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.catalog import ACCELERATORS, INSTANCE_TYPES
from inferplane.components.spec.platform_spec import PLATFORM_KEY, CapacityType, PlatformSpec, parse_platform
from inferplane.tool.cli import main
from inferplane.tool.preflight import AwsCaller, PreflightError, Report, boto3_client_for, iam_policy, run_preflight
from inferplane.tool.preflight.aws import ClientFor
from inferplane.tool.preflight.checks import ami_parameter, vcpu_quota_for
from inferplane.tool.preflight.registry import (
    ALL_SPECS,
    DESCRIBE_CAPACITY_RESERVATIONS,
    DESCRIBE_CLUSTER_VERSIONS,
    DESCRIBE_INSTANCE_TYPE_OFFERINGS,
    GET_AMI_PARAMETER,
    GET_SERVICE_QUOTA,
    VCPU_QUOTA,
    ZONES,
    ApiCall,
)
from inferplane.tool.stackfile import read_stack_config
from tests.conftest import PROJECT_DIR

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account for any access key it does not know
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
AL2023_134 = "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
BOTTLEROCKET_134 = "/aws/service/bottlerocket/aws-k8s-1.35-nvidia/x86_64/latest/image_id"
RESERVATION = "cr-0123456789abcdef0"
# Enough vCPUs for prod at max scale (4 x p5.48xlarge = 768, 8 x g6e.xlarge = 32) and dev (1 x g6.2xlarge = 8).
AMPLE = {"L-417A185B": 1536.0, "L-DB2E81BA": 256.0, "L-3819A6DF": 64.0}


# --- fixtures and helpers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_botocore_loader() -> Iterator[None]:
    """Every session of the module reads botocore's service models through one loader: each new session would parse
    the same JSON again (about 1.3 s of CPU a test, most of this module's time). The loader caches what it read and
    botocore never changes it."""
    loaders: dict[str | None, Loader] = {}

    def shared(search_path: str | None = None) -> Loader:
        if search_path not in loaders:
            loaders[search_path] = create_loader(search_path)
        return loaders[search_path]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.session, "create_loader", shared)
        yield


@pytest.fixture
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials moto accepts; conftest has removed every real one."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # moto would make its hundreds of stock AMIs in every region a test touches (half this module's CPU); preflight
    # reads AMIs only through SSM's public parameters, which the tests seed themselves.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


@pytest.fixture
def moto(fake_credentials: None) -> Iterator[None]:
    with mock_aws():
        yield


def raw_platform(stack: str = "prod") -> dict[str, Any]:
    """A stack's ``inferplane:platform`` mapping, for tests to mutate."""
    config = read_stack_config(PROJECT_DIR, stack).config
    return copy.deepcopy(config[PLATFORM_KEY])


def platform(stack: str = "prod", mutate: Callable[[dict[str, Any]], None] | None = None) -> PlatformSpec:
    raw = raw_platform(stack)
    if mutate is not None:
        mutate(raw)
    return parse_platform(raw, REGION)


def with_capacity_block(raw: dict[str, Any]) -> None:
    """prod's H100 pool bought as a capacity block pinned to us-east-1a."""
    raw["pools"][0].update(capacity_type="capacity_block", capacity_reservation_id=RESERVATION, zone="us-east-1a")


def seed_quotas(values: dict[str, float]) -> None:
    """Teach moto's Service Quotas backend (VPC-only in moto 5.2.5) the EC2 vCPU quotas, in the real shape.

    The method is replaced on the backend instance, which moto discards when it resets (``mock_aws`` exit).
    """
    backend = servicequotas_backends[ACCOUNT][REGION]
    original = backend.get_service_quota

    def get_service_quota(service_code: str, quota_code: str) -> dict[str, Any]:
        if service_code != "ec2":
            return original(service_code, quota_code)
        if quota_code not in values:
            raise NoSuchResource()
        return {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{REGION}:{ACCOUNT}:ec2/{quota_code}",
            "QuotaCode": quota_code,
            "QuotaName": quota_code,
            "Value": values[quota_code],
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }

    setattr(backend, "get_service_quota", get_service_quota)  # noqa: B010 - an instance attribute, on purpose


def seed_parameter(name: str, value: str) -> None:
    """Publish an AWS public parameter in moto's SSM backend (``put_parameter`` refuses the reserved /aws path)."""
    ssm_backends[ACCOUNT][REGION]._parameters[name].append(
        # moto builds its own preloaded public parameters this way; its CloudFormation mixin leaves two
        # members abstract that parameters read back through the API never touch.
        Parameter(  # type: ignore[abstract]
            account_id=ACCOUNT,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=NOW,
            version=1,
            data_type="aws:ec2:image",
        )
    )


def stubbed(service: str) -> tuple[BaseClient, Stubber]:
    client = boto3.client(service, region_name=REGION)
    stubber = Stubber(client)
    stubber.activate()
    return client, stubber


def routed(overrides: dict[ApiCall, BaseClient]) -> ClientFor:
    """moto-backed clients, except the calls routed to stubbed ones."""
    real = boto3_client_for(REGION)
    return lambda api: overrides.get(api) or real(api)


def cluster_versions(stubber: Stubber, status: str = "STANDARD_SUPPORT", version: str = "1.35") -> None:
    stubber.add_response(
        "describe_cluster_versions",
        {
            "clusterVersions": [
                {
                    "clusterVersion": version,
                    "clusterType": "eks",
                    "versionStatus": status,
                    "status": status.lower().replace("_", "-"),
                    "releaseDate": datetime(2025, 10, 2, tzinfo=UTC),
                    "endOfStandardSupportDate": datetime(2026, 12, 2, tzinfo=UTC),
                    "endOfExtendedSupportDate": datetime(2027, 12, 2, tzinfo=UTC),
                }
            ]
        },
        {"clusterVersions": [version], "includeAll": True},
    )


def run(spec: PlatformSpec, overrides: dict[ApiCall, BaseClient] | None = None, horizon_hours: float = 24) -> Report:
    return run_preflight(
        spec,
        size_platform(spec),
        AwsCaller(routed(overrides or {})),
        horizon=timedelta(hours=horizon_hours),
        now=NOW,
    )


def verdicts(report: Report) -> list[tuple[str, str, str]]:
    return [(f.check, f.subject, f.status) for f in report.findings]


def finding(report: Report, check: str, subject: str) -> Any:
    (found,) = [f for f in report.findings if f.check == check and f.subject == subject]
    return found


@dataclass
class Account:
    """A moto account plus the calls routed to stubbed clients."""

    overrides: dict[ApiCall, BaseClient] = field(default_factory=dict)
    stubbers: list[Stubber] = field(default_factory=list)

    def stub(self, service: str, *calls: ApiCall) -> Stubber:
        client, stubber = stubbed(service)
        for call in calls:
            self.overrides[call] = client
        self.stubbers.append(stubber)
        return stubber

    def run(self, spec: PlatformSpec, horizon_hours: float = 24) -> Report:
        report = run(spec, self.overrides, horizon_hours)
        for stubber in self.stubbers:
            stubber.assert_no_pending_responses()  # every stubbed answer was asked for, with the expected request
        return report


@pytest.fixture
def healthy(moto: None, monkeypatch: pytest.MonkeyPatch) -> Account:
    """An account that can run prod: quotas, the AL2023 NVIDIA AMI, and 1.35 in standard support."""
    seed_quotas(AMPLE)
    seed_parameter(AL2023_134, "ami-0a1b2c3d4e5f60718")
    account = Account()
    cluster_versions(account.stub("eks", DESCRIBE_CLUSTER_VERSIONS))
    return account


# --- the whole run ----------------------------------------------------------------------------------------------


def test_a_healthy_account_passes_every_check_for_prod(healthy: Account) -> None:
    report = healthy.run(platform("prod"))

    assert report.account == ACCOUNT
    assert verdicts(report) == [
        ("instance-zones", "pool h100", "pass"),
        ("instance-zones", "pool l40s", "pass"),
        ("accelerator-facts", "p5.48xlarge", "pass"),
        ("accelerator-facts", "g6e.xlarge", "pass"),
        ("vcpu-quota", "L-417A185B", "pass"),
        ("vcpu-quota", "L-DB2E81BA", "pass"),
        ("accelerated-ami", "AL2023 NVIDIA 1.35", "pass"),
        ("cluster-version", "Kubernetes 1.35", "pass"),
    ]
    assert report.ok
    assert report.skipped == ()
    # The EFA pool is pinned to one zone (prod's disaggregated llama-70b).
    assert finding(report, "instance-zones", "pool h100").message == (
        "p5.48xlarge is offered in all 1 zone(s): us-east-1a"
    )
    assert finding(report, "accelerator-facts", "p5.48xlarge").message == (
        "8 x H100 81920 MiB, 192 vCPUs, as the catalog says"
    )
    quota = finding(report, "vcpu-quota", "L-417A185B")
    assert (
        quota.message == "Running On-Demand P instances: needs 768 vCPUs at max scale (4 x 192 (h100)), quota is 1536"
    )
    assert quota.figures["required_vcpus"] == 768
    assert quota.figures["shortfall_vcpus"] == 0
    assert quota.figures["source"] == "applied"
    assert finding(report, "accelerated-ami", "AL2023 NVIDIA 1.35").figures["image_id"] == "ami-0a1b2c3d4e5f60718"
    assert finding(report, "cluster-version", "Kubernetes 1.35").message == (
        "standard support until 2026-12-02 (2 days)"
    )


def test_gke_pools_are_skipped_with_the_reason(healthy: Account) -> None:
    report = healthy.run(platform("staging"))

    assert [p.model_dump() for p in report.skipped] == [
        {
            "pool": "tpu-v5e",
            "instance_type": "ct5lp-hightpu-4t",
            "reason": "a GKE pool (instance cloud gcp): outside this AWS preflight",
        }
    ]
    assert all("tpu" not in f.subject and "ct5lp" not in f.subject for f in report.findings)
    assert report.ok


# --- instance type offered in the zones -------------------------------------------------------------------------


def test_a_zone_without_the_instance_type_fails_and_names_the_zones_that_work(healthy: Account) -> None:
    def zones_with_1e(raw: dict[str, Any]) -> None:
        raw["zones"] = ["us-east-1a", "us-east-1b", "us-east-1e"]

    report = healthy.run(platform("prod", zones_with_1e))

    l40s = finding(report, "instance-zones", "pool l40s")
    assert l40s.status == "fail"
    # moto's bundled offerings: g6e.xlarge is in us-east-1a..d, not e or f.
    assert l40s.message == (
        "g6e.xlarge is not offered in us-east-1e (2 of 3 zones usable); "
        "zones that would work: us-east-1a, us-east-1b, us-east-1c, us-east-1d"
    )
    assert l40s.figures["missing"] == ["us-east-1e"]
    assert finding(report, "instance-zones", "pool h100").status == "pass"  # p5.48xlarge is offered in 1e
    assert not report.ok


def test_a_pinned_pool_is_checked_in_its_zone_only(healthy: Account) -> None:
    def pin_h100(raw: dict[str, Any]) -> None:
        raw["pools"][0]["zone"] = "us-east-1b"

    report = healthy.run(platform("prod", pin_h100))

    assert finding(report, "instance-zones", "pool h100").figures["zones"] == ["us-east-1b"]


def test_offerings_are_asked_per_type_at_availability_zone_level(healthy: Account) -> None:
    """The request shape, checked by botocore's Stubber against the EC2 model."""
    stubber = healthy.stub("ec2", DESCRIBE_INSTANCE_TYPE_OFFERINGS)
    for instance_type in ("p5.48xlarge", "g6e.xlarge"):
        stubber.add_response(
            "describe_instance_type_offerings",
            {
                "InstanceTypeOfferings": [
                    {"InstanceType": instance_type, "LocationType": "availability-zone", "Location": zone}
                    for zone in ("us-east-1a", "us-east-1b", "us-east-1c")
                ]
            },
            {
                "LocationType": "availability-zone",
                "Filters": [{"Name": "instance-type", "Values": [instance_type]}],
            },
        )

    report = healthy.run(platform("prod"))

    assert finding(report, "instance-zones", "pool l40s").status == "pass"


# --- catalog facts against DescribeInstanceTypes ----------------------------------------------------------------


def test_catalog_gpu_memory_that_ec2_contradicts_fails(healthy: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    # The marketing "48 GB" written as MiB: the mistake the catalog's docstring warns about.
    monkeypatch.setitem(ACCELERATORS, "l40s-48gb", ACCELERATORS["l40s-48gb"].model_copy(update={"memory_mib": 49152}))

    report = healthy.run(platform("prod"))

    facts = finding(report, "accelerator-facts", "g6e.xlarge")
    assert facts.status == "fail"
    assert facts.message == "GPU memory MiB: catalog 49152, EC2 45776: sizing of pool l40s rests on the catalog"
    assert finding(report, "accelerator-facts", "p5.48xlarge").status == "pass"


def test_catalog_gpu_count_and_vcpus_that_ec2_contradicts_fail(
    healthy: Account, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = INSTANCE_TYPES["p5.48xlarge"].model_copy(update={"accelerators_per_node": 4, "vcpus": 96})
    monkeypatch.setitem(INSTANCE_TYPES, "p5.48xlarge", wrong)

    report = healthy.run(platform("prod"))

    facts = finding(report, "accelerator-facts", "p5.48xlarge")
    assert facts.status == "fail"
    assert (
        facts.message == "GPUs: catalog 4, EC2 8; vCPUs: catalog 96, EC2 192: sizing of pool h100 rests on the catalog"
    )


# --- vCPU quota -----------------------------------------------------------------------------------------------


def test_a_quota_shortfall_fails_with_the_missing_vcpus(healthy: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_quotas({**AMPLE, "L-417A185B": 192.0})

    report = healthy.run(platform("prod"))

    quota = finding(report, "vcpu-quota", "L-417A185B")
    assert quota.status == "fail"
    assert quota.message == (
        "Running On-Demand P instances: needs 768 vCPUs at max scale (4 x 192 (h100)), quota is 192: short by 576 vCPUs"
    )
    assert quota.figures["shortfall_vcpus"] == 576
    assert finding(report, "vcpu-quota", "L-DB2E81BA").status == "pass"


def test_pools_on_one_quota_add_up(healthy: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    def second_g_pool(raw: dict[str, Any]) -> None:
        raw["pools"].append(
            {"name": "l40s-b", "accelerator": "l40s-48gb", "instance_type": "g6e.xlarge", "min_nodes": 3}
        )

    seed_quotas({**AMPLE, "L-DB2E81BA": 40.0})

    report = healthy.run(platform("prod", second_g_pool))

    quota = finding(report, "vcpu-quota", "L-DB2E81BA")
    assert quota.message == (
        "Running On-Demand G and VT instances: needs 44 vCPUs at max scale (8 x 4 (l40s) + 3 x 4 (l40s-b)), "
        "quota is 40: short by 4 vCPUs"
    )


def test_a_spot_pool_is_held_to_the_spot_quota(healthy: Account) -> None:
    report = healthy.run(platform("dev"))

    quota = finding(report, "vcpu-quota", "L-3819A6DF")
    assert quota.status == "pass"
    assert (
        quota.message
        == "All G and VT Spot Instance Requests: needs 8 vCPUs at max scale (1 x 8 (l4-spot)), quota is 64"
    )


@pytest.mark.parametrize(
    ("instance_type", "capacity_type", "code"),
    [
        ("p5.48xlarge", "on_demand", "L-417A185B"),
        ("p4de.24xlarge", "on_demand", "L-417A185B"),
        ("g6e.48xlarge", "on_demand", "L-DB2E81BA"),
        ("g5.xlarge", "on_demand", "L-DB2E81BA"),
        ("g6.2xlarge", "spot", "L-3819A6DF"),
        ("p5.48xlarge", "spot", "L-C4BD4855"),
        ("p5en.48xlarge", "spot", "L-C4BD4855"),
        ("p4de.24xlarge", "spot", "L-7212CCBC"),
        ("p5.48xlarge", "capacity_block", None),
        ("ct5lp-hightpu-4t", "on_demand", None),
    ],
)
def test_quota_codes_by_family_and_capacity(instance_type: str, capacity_type: CapacityType, code: str | None) -> None:
    quota = vcpu_quota_for(INSTANCE_TYPES[instance_type], capacity_type)
    assert (quota.code if quota else None) == code


def test_an_unadjusted_quota_falls_back_to_the_aws_default(healthy: Account) -> None:
    stubber = healthy.stub("service-quotas", *VCPU_QUOTA.calls)
    for code, default in (("L-417A185B", 0.0), ("L-DB2E81BA", 64.0)):
        stubber.add_client_error(
            "get_service_quota",
            service_error_code="NoSuchResourceException",
            service_message="The request failed because the specified service does not exist.",
            http_status_code=400,
            expected_params={"ServiceCode": "ec2", "QuotaCode": code},
        )
        stubber.add_response(
            "get_aws_default_service_quota",
            {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": default}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )

    report = healthy.run(platform("prod"))

    on_demand_p = finding(report, "vcpu-quota", "L-417A185B")
    assert on_demand_p.status == "fail"
    assert on_demand_p.figures["source"] == "default"
    assert on_demand_p.figures["shortfall_vcpus"] == 768
    assert finding(report, "vcpu-quota", "L-DB2E81BA").status == "pass"


# --- capacity blocks ------------------------------------------------------------------------------------------


def reservation(**changes: Any) -> dict[str, Any]:
    base = {
        "CapacityReservationId": RESERVATION,
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-east-1a",
        "Tenancy": "default",
        "TotalInstanceCount": 4,
        "AvailableInstanceCount": 4,
        "State": "active",
        "StartDate": NOW - timedelta(days=2),
        "EndDate": NOW + timedelta(days=5, hours=-0.5),
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "ReservationType": "capacity-block",
    }
    return {**base, **changes}


def answer_reservation(account: Account, **changes: Any) -> None:
    account.stub("ec2", DESCRIBE_CAPACITY_RESERVATIONS).add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [reservation(**changes)]},
        {"CapacityReservationIds": [RESERVATION]},
    )


def test_an_active_capacity_block_in_the_pool_zone_passes(healthy: Account) -> None:
    answer_reservation(healthy)

    report = healthy.run(platform("prod", with_capacity_block))

    block = finding(report, "capacity-block", "pool h100")
    assert block.status == "pass"
    assert block.message == (
        f"{RESERVATION}: active in us-east-1a, 4 x p5.48xlarge, ends 2026-12-04 11:30 UTC (119.5 h)"
    )
    # A capacity-block pool draws on its reservation, not on the on-demand P vCPU quota.
    assert [f.subject for f in report.findings if f.check == "vcpu-quota"] == ["L-DB2E81BA"]
    assert report.ok


def test_a_scheduled_block_passes(healthy: Account) -> None:
    answer_reservation(healthy, State="scheduled", StartDate=NOW + timedelta(days=1))

    report = healthy.run(platform("prod", with_capacity_block))

    assert finding(report, "capacity-block", "pool h100").status == "pass"


def test_an_expired_capacity_block_fails(healthy: Account) -> None:
    answer_reservation(healthy, State="expired", EndDate=NOW - timedelta(hours=12, minutes=30))

    report = healthy.run(platform("prod", with_capacity_block))

    block = finding(report, "capacity-block", "pool h100")
    assert block.status == "fail"
    assert block.message == (
        f"{RESERVATION}: state expired (usable: active, scheduled); "
        "ended (2026-11-28 23:30 UTC), within the 24 h horizon"
    )
    assert block.figures["hours_left"] == -12.5


def test_a_block_ending_within_the_horizon_fails_and_the_horizon_is_configurable(healthy: Account) -> None:
    answer_reservation(healthy)
    report = healthy.run(platform("prod", with_capacity_block), horizon_hours=7 * 24)

    block = finding(report, "capacity-block", "pool h100")
    assert block.status == "fail"
    assert block.message == f"{RESERVATION}: ends in 119.5 h (2026-12-04 11:30 UTC), within the 168 h horizon"


def test_a_block_in_another_zone_or_for_another_type_fails(healthy: Account) -> None:
    answer_reservation(healthy, AvailabilityZone="us-east-1c", InstanceType="p5e.48xlarge")

    report = healthy.run(platform("prod", with_capacity_block))

    assert finding(report, "capacity-block", "pool h100").message == (
        f"{RESERVATION}: in us-east-1c, the pool is pinned to us-east-1a; "
        "reserves p5e.48xlarge, the pool runs p5.48xlarge"
    )


def test_a_block_smaller_than_max_scale_warns(healthy: Account) -> None:
    answer_reservation(healthy, TotalInstanceCount=2)

    report = healthy.run(platform("prod", with_capacity_block))

    block = finding(report, "capacity-block", "pool h100")
    assert block.status == "warn"
    assert block.message.endswith("reserves 2 instance(s), the pool scales to 4: 2 node(s) would never launch")
    assert report.ok


def test_an_unknown_reservation_fails(healthy: Account) -> None:
    healthy.stub("ec2", DESCRIBE_CAPACITY_RESERVATIONS).add_client_error(
        "describe_capacity_reservations",
        service_error_code="InvalidCapacityReservationId.NotFound",
        service_message=f"The capacity reservation ID '{RESERVATION}' does not exist",
        http_status_code=400,
        expected_params={"CapacityReservationIds": [RESERVATION]},
    )

    report = healthy.run(platform("prod", with_capacity_block))

    assert finding(report, "capacity-block", "pool h100").message == (
        f"no capacity reservation {RESERVATION} in us-east-1 (InvalidCapacityReservationId.NotFound)"
    )


# --- accelerated AMI ------------------------------------------------------------------------------------------


def test_a_missing_ami_parameter_fails(moto: None, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_quotas(AMPLE)
    account = Account()
    cluster_versions(account.stub("eks", DESCRIBE_CLUSTER_VERSIONS))

    report = account.run(platform("prod"))  # moto's SSM has no /aws/service/eks tree: ParameterNotFound

    ami = finding(report, "accelerated-ami", "AL2023 NVIDIA 1.35")
    assert ami.status == "fail"
    assert ami.message == (
        f"no AL2023 NVIDIA 1.35 AMI in us-east-1 (SSM parameter {AL2023_134} not found): "
        "pools h100, l40s could not boot; use a Kubernetes version the AMI is published for"
    )


def test_bottlerocket_pools_need_the_bottlerocket_parameter(healthy: Account) -> None:
    def bottlerocket_l40s(raw: dict[str, Any]) -> None:
        raw["pools"][1]["ami_family"] = "bottlerocket"

    seed_parameter(BOTTLEROCKET_134, "ami-0b0b0b0b0b0b0b0b0")

    report = healthy.run(platform("prod", bottlerocket_l40s))

    assert ami_parameter("bottlerocket", "1.35") == BOTTLEROCKET_134
    bottlerocket = finding(report, "accelerated-ami", "Bottlerocket NVIDIA 1.35")
    assert bottlerocket.status == "pass"
    assert bottlerocket.message == f"ami-0b0b0b0b0b0b0b0b0 for pool l40s ({BOTTLEROCKET_134})"
    assert finding(report, "accelerated-ami", "AL2023 NVIDIA 1.35").message.endswith(
        "for pool h100 (" + AL2023_134 + ")"
    )


# --- cluster version ------------------------------------------------------------------------------------------


@pytest.fixture
def account_without_version(moto: None, monkeypatch: pytest.MonkeyPatch) -> Account:
    seed_quotas(AMPLE)
    seed_parameter(AL2023_134, "ami-0a1b2c3d4e5f60718")
    return Account()


@pytest.mark.parametrize(
    ("version_status", "status", "message"),
    [
        (
            "EXTENDED_SUPPORT",
            "warn",
            "extended support until 2027-12-02: billed at the extended-support rate; upgrade the cluster",
        ),
        ("UNSUPPORTED", "fail", "EKS reports UNSUPPORTED for Kubernetes 1.35: no new cluster can run it"),
    ],
)
def test_a_version_out_of_standard_support(
    account_without_version: Account, version_status: str, status: str, message: str
) -> None:
    cluster_versions(account_without_version.stub("eks", DESCRIBE_CLUSTER_VERSIONS), version_status)

    report = account_without_version.run(platform("prod"))

    version = finding(report, "cluster-version", "Kubernetes 1.35")
    assert (version.status, version.message) == (status, message)


def test_standard_support_ending_within_the_horizon_warns(healthy: Account) -> None:
    report = healthy.run(platform("prod"), horizon_hours=7 * 24)

    version = finding(report, "cluster-version", "Kubernetes 1.35")
    assert version.status == "warn"
    assert version.message == "standard support until 2026-12-02 (2 days); it ends within the horizon: plan the upgrade"


def test_a_version_eks_does_not_list_fails(account_without_version: Account) -> None:
    account_without_version.stub("eks", DESCRIBE_CLUSTER_VERSIONS).add_response(
        "describe_cluster_versions", {"clusterVersions": []}, {"clusterVersions": ["1.35"], "includeAll": True}
    )

    report = account_without_version.run(platform("prod"))

    assert finding(report, "cluster-version", "Kubernetes 1.35").message == (
        "EKS in us-east-1 does not offer Kubernetes 1.35"
    )


def test_an_endpoint_without_describe_cluster_versions_warns(account_without_version: Account) -> None:
    report = account_without_version.run(platform("prod"))  # moto answers HTTP 404 "Not yet implemented"

    version = finding(report, "cluster-version", "Kubernetes 1.35")
    assert version.status == "warn"
    assert version.message == (
        "support status unknown: eks:DescribeClusterVersions is not available here (404: Not yet implemented)"
    )
    assert report.ok


# --- denied calls, no credentials ------------------------------------------------------------------------------


def test_a_denied_call_fails_its_check_naming_the_permission(healthy: Account) -> None:
    stubber = healthy.stub("service-quotas", GET_SERVICE_QUOTA)
    for code in ("L-417A185B", "L-DB2E81BA"):
        stubber.add_client_error(
            "get_service_quota",
            service_error_code="AccessDeniedException",
            service_message="User: arn:aws:iam::123456789012:user/ci is not authorized to perform: "
            "servicequotas:GetServiceQuota",
            http_status_code=400,
            expected_params={"ServiceCode": "ec2", "QuotaCode": code},
        )

    report = healthy.run(platform("prod"))

    for code in ("L-417A185B", "L-DB2E81BA"):
        quota = finding(report, "vcpu-quota", code)
        assert quota.status == "fail"
        assert quota.message == (
            "permission missing: servicequotas:GetServiceQuota was denied (AccessDeniedException); "
            "grant it (inferplane preflight --print-iam-policy)"
        )
    assert finding(report, "instance-zones", "pool h100").status == "pass"  # the other checks still ran


def test_an_unregistered_call_is_refused() -> None:
    caller = AwsCaller(lambda api: pytest.fail(f"no client should be built for {api}"))
    with pytest.raises(AssertionError, match=r"instance-zones makes ssm:GetParameter without registering it"):
        caller.call(ZONES, GET_AMI_PARAMETER, Name=AL2023_134)


def test_no_credentials_abort_with_one_line() -> None:
    # conftest removed every credential source; nothing is sent anywhere.
    spec = platform("prod")
    with pytest.raises(PreflightError, match=r"^no usable AWS credentials \(Unable to locate credentials\); "):
        run_preflight(spec, size_platform(spec), AwsCaller(boto3_client_for(REGION)), now=NOW)


def test_a_missing_profile_aborts_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "nope")
    spec = platform("prod")
    with pytest.raises(PreflightError, match=r"^AWS profile problem: The config profile \(nope\) could not be found$"):
        run_preflight(spec, size_platform(spec), AwsCaller(boto3_client_for(REGION)), now=NOW)


def test_an_unreachable_endpoint_aborts_with_one_line(fake_credentials: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    spec = platform("prod")
    with pytest.raises(PreflightError, match=rf"^cannot reach AWS for sts:GetCallerIdentity: .*127\.0\.0\.1:{port}"):
        run_preflight(spec, size_platform(spec), AwsCaller(boto3_client_for(REGION)), now=NOW)


def test_cli_without_credentials_exits_3_with_one_line_and_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--stack", "prod", "--project-dir", str(PROJECT_DIR)]) == 3

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("inferplane preflight: no usable AWS credentials (Unable to locate credentials); ")
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


# --- the policy -----------------------------------------------------------------------------------------------


def test_the_policy_is_derived_from_the_registry_and_read_only() -> None:
    policy = iam_policy()

    granted = {action for statement in policy["Statement"] for action in statement["Action"]}
    registered = {call.iam_action for spec in ALL_SPECS for call in spec.calls if call.needs_permission}
    assert (
        granted
        == registered
        == {
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeCapacityReservations",
            "servicequotas:GetServiceQuota",
            "servicequotas:GetAWSDefaultServiceQuota",
            "ssm:GetParameter",
            "eks:DescribeClusterVersions",
        }
    )
    assert all(action.split(":")[1].startswith(("Describe", "Get")) for action in granted)
    assert {statement["Effect"] for statement in policy["Statement"]} == {"Allow"}
    assert policy["Statement"][4] == {
        "Sid": "PreflightAcceleratedAmi",
        "Effect": "Allow",
        "Action": ["ssm:GetParameter"],
        "Resource": [
            "arn:aws:ssm:*::parameter/aws/service/eks/optimized-ami/*",
            "arn:aws:ssm:*::parameter/aws/service/bottlerocket/*",
        ],
    }
    assert iam_policy("aws-us-gov")["Statement"][4]["Resource"][0].startswith("arn:aws-us-gov:ssm:")


def test_cli_prints_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--print-iam-policy"]) == 0
    assert json.loads(capsys.readouterr().out) == iam_policy()


def _run_as_user_with(
    user: str, policy: dict[str, Any], spec: PlatformSpec, overrides: dict[ApiCall, BaseClient]
) -> Report:
    """Run preflight with the keys of an IAM user holding ``policy``, moto enforcing IAM on every later request."""

    @set_initial_no_auth_action_count(3)  # create the user, attach the policy, make the key; then IAM applies
    def as_user() -> Report:
        iam = boto3.client("iam", region_name=REGION)
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName="preflight", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        session = boto3.Session(aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
        clients = boto3_client_for(REGION, session)
        caller = AwsCaller(lambda api: overrides.get(api) or clients(api))
        return run_preflight(spec, size_platform(spec), caller, now=NOW)

    report: Report = as_user()
    return report


def test_moto_iam_grants_the_generated_policy_and_denies_what_it_lacks(healthy: Account) -> None:
    """moto evaluates the printed policy for EC2, Service Quotas and STS. It matches SSM calls against resource
    "*", never the parameter ARN, so the ARN-scoped SSM call is routed to a stub here (the only call so routed
    besides DescribeClusterVersions, which moto lacks)."""
    ssm = healthy.stub("ssm", GET_AMI_PARAMETER)
    eks = healthy.stubbers[0]
    for _ in range(2):
        ssm.add_response(
            "get_parameter",
            {"Parameter": {"Name": AL2023_134, "Value": "ami-0a1b2c3d4e5f60718"}},
            {"Name": AL2023_134},
        )
    cluster_versions(eks)  # the fixture queued the first answer

    granted = _run_as_user_with("granted", iam_policy(), platform("prod"), healthy.overrides)
    assert {f.status for f in granted.findings} == {"pass"}

    lacking = iam_policy()
    lacking["Statement"] = [s for s in lacking["Statement"] if s["Sid"] != "PreflightInstanceZones"]
    denied = _run_as_user_with("lacking", lacking, platform("prod"), healthy.overrides)
    for pool in ("h100", "l40s"):
        assert finding(denied, "instance-zones", f"pool {pool}").message == (
            "permission missing: ec2:DescribeInstanceTypeOfferings was denied (AccessDenied); "
            "grant it (inferplane preflight --print-iam-policy)"
        )
    assert [f.check for f in denied.findings if f.status == "fail"] == ["instance-zones", "instance-zones"]


# --- over HTTP: moto's server on loopback, reached as a real endpoint --------------------------------------------


def table_rows(out: str) -> list[tuple[str, ...]]:
    """(check, subject, status, detail) per report row, with cells rich wrapped onto several lines joined again."""
    rows: list[list[str]] = []
    for line in out.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        if cells[0]:
            rows.append(cells)
        else:
            rows[-1] = [f"{a} {b}".strip() if b else a for a, b in zip(rows[-1], cells, strict=True)]
    return [tuple(row) for row in rows]


@pytest.fixture
def moto_server(fake_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's server on 127.0.0.1 and a free port; boto3 reaches it through the standard ``AWS_ENDPOINT_URL``."""
    moto_api_backend.reset()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    try:
        yield endpoint
    finally:
        server.stop()
        moto_api_backend.reset()  # the server shares this process's backends: leave none seeded behind


def test_cli_preflight_of_prod_against_moto_server(moto_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    seed_quotas(AMPLE)  # the server runs in this process, on the same backends
    seed_parameter(AL2023_134, "ami-0a1b2c3d4e5f60718")

    code = main(["preflight", "--stack", "prod", "--project-dir", str(PROJECT_DIR)])

    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == f"Preflight of stack prod (prod) in us-east-1, account {ACCOUNT}, horizon 24 h"
    assert table_rows(out) == [
        (
            "instance-zones",
            "pool h100",
            "pass",
            "p5.48xlarge is offered in all 1 zone(s): us-east-1a",
        ),
        (
            "instance-zones",
            "pool l40s",
            "pass",
            "g6e.xlarge is offered in all 3 zone(s): us-east-1a, us-east-1b, us-east-1c",
        ),
        ("accelerator-facts", "p5.48xlarge", "pass", "8 x H100 81920 MiB, 192 vCPUs, as the catalog says"),
        ("accelerator-facts", "g6e.xlarge", "pass", "1 x L40S 45776 MiB, 4 vCPUs, as the catalog says"),
        (
            "vcpu-quota",
            "L-417A185B",
            "pass",
            "Running On-Demand P instances: needs 768 vCPUs at max scale (4 x 192 (h100)), quota is 1536",
        ),
        (
            "vcpu-quota",
            "L-DB2E81BA",
            "pass",
            "Running On-Demand G and VT instances: needs 32 vCPUs at max scale (8 x 4 (l40s)), quota is 256",
        ),
        ("accelerated-ami", "AL2023 NVIDIA 1.35", "pass", f"ami-0a1b2c3d4e5f60718 for pools h100, l40s ({AL2023_134})"),
        # moto's server has no DescribeClusterVersions (an HTML 404): EKS cannot say, a warning, not a failure.
        (
            "cluster-version",
            "Kubernetes 1.35",
            "warn",
            "support status unknown: eks:DescribeClusterVersions is not available here "
            "(404: HTTP 404, no AWS error body)",
        ),
    ]
    assert lines[-2:] == ["nothing to check in this stack: capacity-block", "ready: 7 pass, 1 warn, 0 fail"]


def test_cli_preflight_json_and_exit_1_on_a_shortfall(moto_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    seed_quotas({**AMPLE, "L-417A185B": 384.0})
    seed_parameter(AL2023_134, "ami-0a1b2c3d4e5f60718")

    code = main(["preflight", "--stack", "prod", "--project-dir", str(PROJECT_DIR), "--json"])

    document = json.loads(capsys.readouterr().out)
    assert code == 1
    assert document["ok"] is False
    assert document["stack"] == "prod"
    failed = [f for f in document["findings"] if f["status"] == "fail"]
    assert [(f["check"], f["subject"], f["figures"]["shortfall_vcpus"]) for f in failed] == [
        ("vcpu-quota", "L-417A185B", 384)
    ]


def test_cli_region_override_revalidates_the_zones(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["preflight", "--stack", "prod", "--project-dir", str(PROJECT_DIR), "--region", "us-west-2"])

    assert code == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "stacks/Pulumi.prod.yaml: inferplane:platform.zones[0]: 'us-east-1a' is not a zone of region us-west-2"
    )
