"""Network: subnets per zone with the EKS tags, NAT per zone or shared, an S3 gateway endpoint, refusals."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pulumi
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferplane.components.aws.network import Network, NetworkArgs, plan_subnets
from inferplane.tool.mockengine import Evaluation, PlatformMocks, evaluate

TAGS = {"team": "ml-platform", "environment": "dev"}


def _network(zones: tuple[str, ...], nat_per_zone: bool, **changes: Any) -> Evaluation:
    def program() -> None:
        Network(
            "net",
            NetworkArgs(cluster_name="inferplane-test", zones=zones, nat_per_zone=nat_per_zone, tags=TAGS, **changes),
        )

    return evaluate(program, mocks=PlatformMocks("us-east-1"), stack="test")


def test_two_zone_network_with_one_shared_nat() -> None:
    result = _network(("us-east-1a", "us-east-1b"), nat_per_zone=False)
    component = result.named("net")
    children = result.children_of(component.urn)
    assert component.type == "inferplane:index:Network"
    assert len(children) == len(result.registrations) - 1  # everything is parented to the component
    assert sorted((r.type, r.name) for r in children) == sorted(
        [
            ("aws:ec2/vpc:Vpc", "net-vpc"),
            ("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup", "net-default-sg"),
            ("aws:ec2/internetGateway:InternetGateway", "net-igw"),
            ("aws:ec2/routeTable:RouteTable", "net-public-rt"),
            ("aws:ec2/route:Route", "net-public-default"),
            ("aws:ec2/subnet:Subnet", "net-public-us-east-1a"),
            ("aws:ec2/subnet:Subnet", "net-public-us-east-1b"),
            ("aws:ec2/subnet:Subnet", "net-private-us-east-1a"),
            ("aws:ec2/subnet:Subnet", "net-private-us-east-1b"),
            ("aws:ec2/routeTableAssociation:RouteTableAssociation", "net-public-rta-us-east-1a"),
            ("aws:ec2/routeTableAssociation:RouteTableAssociation", "net-public-rta-us-east-1b"),
            ("aws:ec2/routeTableAssociation:RouteTableAssociation", "net-private-rta-us-east-1a"),
            ("aws:ec2/routeTableAssociation:RouteTableAssociation", "net-private-rta-us-east-1b"),
            ("aws:ec2/eip:Eip", "net-nat-eip-us-east-1a"),
            ("aws:ec2/natGateway:NatGateway", "net-nat-us-east-1a"),
            ("aws:ec2/routeTable:RouteTable", "net-private-rt-us-east-1a"),
            ("aws:ec2/routeTable:RouteTable", "net-private-rt-us-east-1b"),
            ("aws:ec2/route:Route", "net-private-default-us-east-1a"),
            ("aws:ec2/route:Route", "net-private-default-us-east-1b"),
            ("aws:ec2/vpcEndpoint:VpcEndpoint", "net-s3"),
            ("aws:kms/key:Key", "net-flow-logs-key"),
            ("aws:cloudwatch/logGroup:LogGroup", "net-flow-logs"),
            ("aws:iam/role:Role", "net-flow-logs-role"),
            ("aws:iam/rolePolicy:RolePolicy", "net-flow-logs-delivery"),
            ("aws:ec2/flowLog:FlowLog", "net-flow-log"),
        ]
    )
    vpc = result.named("net-vpc").inputs
    assert vpc["cidrBlock"] == "10.0.0.0/16"
    assert vpc["enableDnsHostnames"] is True and vpc["enableDnsSupport"] is True
    assert result.named("net-default-sg").inputs["ingress"] == []
    assert result.named("net-default-sg").inputs["egress"] == []

    for zone, private_cidr, public_cidr in (
        ("us-east-1a", "10.0.0.0/19", "10.0.224.0/22"),
        ("us-east-1b", "10.0.32.0/19", "10.0.228.0/22"),
    ):
        private = result.named(f"net-private-{zone}").inputs
        public = result.named(f"net-public-{zone}").inputs
        assert private["availabilityZone"] == zone and public["availabilityZone"] == zone
        assert private["cidrBlock"] == private_cidr and public["cidrBlock"] == public_cidr
        assert private["mapPublicIpOnLaunch"] is False and public["mapPublicIpOnLaunch"] is False
        assert private["tags"] == {
            **TAGS,
            "kubernetes.io/cluster/inferplane-test": "shared",
            "kubernetes.io/role/internal-elb": "1",
            "Name": f"net-private-{zone}",
        }
        assert public["tags"] == {
            **TAGS,
            "kubernetes.io/cluster/inferplane-test": "shared",
            "kubernetes.io/role/elb": "1",
            "Name": f"net-public-{zone}",
        }
        # Both zones leave through the one NAT gateway, which sits in the first zone's public subnet.
        assert result.named(f"net-private-default-{zone}").inputs == {
            "destinationCidrBlock": "0.0.0.0/0",
            "routeTableId": f"net-private-rt-{zone}-id",
            "natGatewayId": "net-nat-us-east-1a-id",
        }
    assert result.named("net-nat-us-east-1a").inputs["subnetId"] == "net-public-us-east-1a-id"
    assert result.named("net-nat-us-east-1a").inputs["allocationId"] == "eipalloc-net-nat-eip-us-east-1a"
    assert result.named("net-public-default").inputs["gatewayId"] == "net-igw-id"
    assert result.named("net-private-rta-us-east-1b").inputs == {
        "subnetId": "net-private-us-east-1b-id",
        "routeTableId": "net-private-rt-us-east-1b-id",
    }
    assert result.named("net-public-rta-us-east-1b").inputs == {
        "subnetId": "net-public-us-east-1b-id",
        "routeTableId": "net-public-rt-id",
    }

    s3 = result.named("net-s3").inputs
    assert s3["serviceName"] == "com.amazonaws.us-east-1.s3"
    assert s3["vpcEndpointType"] == "Gateway"
    assert s3["routeTableIds"] == ["net-private-rt-us-east-1a-id", "net-private-rt-us-east-1b-id"]

    taggable = [
        r
        for r in children
        if r.type
        not in {
            "aws:ec2/route:Route",
            "aws:ec2/routeTableAssociation:RouteTableAssociation",
            "aws:iam/rolePolicy:RolePolicy",
        }
    ]
    assert all(TAGS.items() <= r.inputs["tags"].items() for r in taggable)


def test_every_flow_of_the_vpc_is_logged_encrypted_for_a_year() -> None:
    result = _network(("us-east-1a", "us-east-1b"), nat_per_zone=False)
    group_arn = "arn:aws:cloudwatch:us-east-1:123456789012:loggroup//aws/vpc/inferplane-test/flow-logs"
    role_arn = "arn:aws:iam::123456789012:role/net-flow-logs-role"
    flow = result.named("net-flow-log")
    assert flow.inputs == {
        "vpcId": "net-vpc-id",
        "trafficType": "ALL",
        "logDestinationType": "cloud-watch-logs",
        "logDestination": group_arn,
        "iamRoleArn": role_arn,
        "maxAggregationInterval": 60,
        "tags": {**TAGS, "Name": "net-flow-log"},
    }
    assert result.named("net-flow-logs-delivery").urn in flow.dependencies
    assert result.named("net-flow-logs").inputs == {
        "name": "/aws/vpc/inferplane-test/flow-logs",
        "retentionInDays": 365,
        "kmsKeyId": "arn:aws:kms:us-east-1:123456789012:key/net-flow-logs-key-0000-0000",
        "tags": TAGS,
    }
    key = result.named("net-flow-logs-key")
    assert key.inputs["enableKeyRotation"] is True and key.protect is False
    statements = json.loads(key.inputs["policy"])["Statement"]
    assert [s["Sid"] for s in statements] == ["KeyAdministration", "CloudWatchLogs"]
    assert statements[1]["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
    assert statements[1]["Condition"] == {
        "ArnEquals": {
            "kms:EncryptionContext:aws:logs:arn": (
                "arn:aws:logs:us-east-1:123456789012:log-group:/aws/vpc/inferplane-test/flow-logs"
            )
        }
    }
    assert json.loads(result.named("net-flow-logs-role").inputs["assumeRolePolicy"])["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "vpc-flow-logs.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {
                "StringEquals": {"aws:SourceAccount": "123456789012"},
                "ArnLike": {"aws:SourceArn": "arn:aws:ec2:us-east-1:123456789012:vpc-flow-log/*"},
            },
        }
    ]
    assert json.loads(result.named("net-flow-logs-delivery").inputs["policy"])["Statement"] == [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            "Resource": [group_arn, f"{group_arn}:*"],
        }
    ]
    prod = _network(("us-east-1a", "us-east-1b"), nat_per_zone=False, environment="prod", flow_log_retention_days=731)
    assert prod.named("net-flow-logs-key").protect is True
    assert prod.named("net-flow-logs").inputs["retentionInDays"] == 731


def test_prod_network_has_a_nat_per_zone() -> None:
    zones = ("us-east-1a", "us-east-1b", "us-east-1c")
    result = _network(zones, nat_per_zone=True)
    assert sorted(r.name for r in result.of_type("aws:ec2/natGateway:NatGateway")) == [f"net-nat-{z}" for z in zones]
    for zone in zones:
        assert result.named(f"net-nat-{zone}").inputs["subnetId"] == f"net-public-{zone}-id"
        assert result.named(f"net-private-default-{zone}").inputs["natGatewayId"] == f"net-nat-{zone}-id"
    assert len(result.named("net-s3").inputs["routeTableIds"]) == 3


@pytest.mark.parametrize(
    ("zones", "changes", "message"),
    [
        (("us-east-1a",), {}, "zones: a cluster VPC spans at least 2 zones, got 1"),
        (("us-east-1a", "us-east-1a"), {}, "zones: zones repeat"),
        (tuple(f"us-east-1{c}" for c in "abcdefgh"), {}, "zones: at most 7 zones, got 8"),
        (("us-east-1a", "us-east-1b"), {"cidr_block": "10.0.0.1/16"}, "cidr_block: '10.0.0.1/16' is not a CIDR block"),
        (
            ("us-east-1a", "us-east-1b"),
            {"cidr_block": "10.0.0.0/24"},
            "cidr_block: 10.0.0.0/24 must be an IPv4 block between /16 and /20",
        ),
        (
            ("us-east-1a", "us-east-1b"),
            {"flow_log_retention_days": 0},
            "flow_log_retention_days: 0 is not a CloudWatch retention (1, 3, 5",
        ),
    ],
)
def test_refuses_bad_inputs(zones: tuple[str, ...], changes: dict[str, Any], message: str) -> None:
    with pytest.raises(pulumi.InputPropertiesError) as raised:
        _network(zones, nat_per_zone=False, **changes)
    assert str(raised.value).startswith("The input properties for the Network are invalid.")
    assert message in str(raised.value)
    assert raised.value.errors is not None
    assert message.split(": ", 1)[0] in [e["property_path"] for e in raised.value.errors]


@given(prefix=st.integers(min_value=16, max_value=20), zones=st.integers(min_value=2, max_value=7))
def test_subnet_plan_is_disjoint_and_inside_the_vpc(prefix: int, zones: int) -> None:
    vpc = ipaddress.IPv4Network(f"10.0.0.0/{prefix}")
    private, public = plan_subnets(str(vpc), zones)
    blocks = [ipaddress.IPv4Network(c) for c in (*private, *public)]
    assert len(private) == len(public) == zones
    assert all(block.subnet_of(vpc) for block in blocks)
    assert all(not a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1 :])
    assert all(ipaddress.ip_network(c).prefixlen == prefix + 3 for c in private)
