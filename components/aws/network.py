"""``Network``: the VPC an EKS inference cluster lives in.

One private and one public subnet per zone. Nodes run in the private subnets and reach the internet through NAT;
the public subnets hold only NAT gateways and internet-facing load balancers. The subnets carry the tags the AWS
Load Balancer Controller and EKS look for (``kubernetes.io/role/elb`` on public, ``kubernetes.io/role/internal-elb``
on private, ``kubernetes.io/cluster/<name>: shared`` on both; docs.aws.amazon.com/eks/latest/userguide/
network-load-balancing.html, "Subnet tagging"). An S3 gateway endpoint on every private route table keeps
model-weight downloads (tens to hundreds of GB per node start) off the NAT gateways, which bill per GB processed.

Every flow of the VPC is recorded (AWS FSBP EC2.6, CIS AWS Foundations 3.7, EKS Best Practices "network
security"): a VPC flow log of ALL traffic into a CloudWatch log group created here, encrypted with its own KMS key
that CloudWatch Logs may use for that log group only, and kept ``flow_log_retention_days``. The flow-log service
writes through a role it alone may assume, for this account's flow logs only (the confused-deputy conditions of the
VPC user guide, flow-logs-iam-role.html).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from inferplane.components.aws import kms_policy
from inferplane.components.spec.input_errors import raise_input_errors
from inferplane.components.spec.platform_spec import LOG_RETENTION_VALUES, Environment

ELB_ROLE_TAG = "kubernetes.io/role/elb"
INTERNAL_ELB_ROLE_TAG = "kubernetes.io/role/internal-elb"

FLOW_LOGS_PRINCIPAL = "vpc-flow-logs.amazonaws.com"
"""The service that delivers VPC flow logs to CloudWatch Logs (VPC user guide, flow-logs-iam-role.html)."""

FLOW_LOG_AGGREGATION_SECONDS = 60
"""Flow records are published per minute rather than per ten minutes (the VPC flow log ``MaxAggregationInterval``
choices are 60 and 600): an incident is visible in the log within a minute."""


def cluster_tag(cluster_name: str) -> str:
    """The tag that marks a subnet as usable by one EKS cluster's load balancers."""
    return f"kubernetes.io/cluster/{cluster_name}"


@dataclass(frozen=True)
class NetworkArgs:
    """Inputs of :class:`Network`."""

    cluster_name: str
    """EKS cluster that will use the subnets; named in the ``kubernetes.io/cluster/<name>`` subnet tag."""
    zones: Sequence[str]
    """Availability zones, at least two; one private and one public subnet each."""
    nat_per_zone: bool = True
    """One NAT gateway per zone (a zone outage cannot cut the others off); ``False`` shares one (dev, staging)."""
    cidr_block: str = "10.0.0.0/16"
    """VPC range. Private subnets get an eighth each, public subnets a sixty-fourth each."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Added to every taggable child."""
    environment: Environment = "dev"
    """``prod`` protects the flow-log key from ``pulumi destroy`` (deleting it makes the records unreadable)."""
    flow_log_retention_days: int = 365
    """How long CloudWatch keeps the VPC flow log; one of CloudWatch's retention values."""


MAX_ZONES = 7
"""The VPC is cut in eight: one eighth per zone for private subnets, the last eighth for the public ones."""


def plan_subnets(cidr_block: str, zone_count: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(private CIDRs, public CIDRs), one of each per zone: private /N+3 blocks, public /N+6 blocks in the last."""
    vpc = ipaddress.IPv4Network(cidr_block)
    eighths = list(vpc.subnets(prefixlen_diff=3))
    private = tuple(str(block) for block in eighths[:zone_count])
    public = tuple(str(block) for block in list(eighths[-1].subnets(prefixlen_diff=3))[:zone_count])
    return private, public


def _check(args: NetworkArgs) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    if len(args.zones) < 2:
        errors.append(("zones", f"a cluster VPC spans at least 2 zones, got {len(args.zones)}"))
    if len(args.zones) > MAX_ZONES:
        errors.append(("zones", f"at most {MAX_ZONES} zones, got {len(args.zones)}"))
    if len(set(args.zones)) != len(args.zones):
        errors.append(("zones", "zones repeat"))
    try:
        vpc = ipaddress.ip_network(args.cidr_block, strict=True)
    except ValueError as exc:
        errors.append(("cidr_block", f"{args.cidr_block!r} is not a CIDR block: {exc}"))
    else:
        if vpc.version != 4 or not 16 <= vpc.prefixlen <= 20:
            errors.append(("cidr_block", f"{args.cidr_block} must be an IPv4 block between /16 and /20"))
    if args.flow_log_retention_days not in LOG_RETENTION_VALUES:
        allowed = ", ".join(str(days) for days in sorted(LOG_RETENTION_VALUES))
        errors.append(
            ("flow_log_retention_days", f"{args.flow_log_retention_days} is not a CloudWatch retention ({allowed})")
        )
    return errors


def flow_log_trust_policy(partition: str, region: str, account_id: str) -> str:
    """The flow-log service may assume the role, for this account's flow logs in ``region`` only."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": FLOW_LOGS_PRINCIPAL},
                    "Action": "sts:AssumeRole",
                    "Condition": {
                        "StringEquals": {"aws:SourceAccount": account_id},
                        "ArnLike": {"aws:SourceArn": f"arn:{partition}:ec2:{region}:{account_id}:vpc-flow-log/*"},
                    },
                }
            ],
        }
    )


def flow_log_delivery_policy(log_group_arn: str) -> str:
    """What the flow-log service needs to write into one existing log group (it never creates one)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    "Resource": [log_group_arn, f"{log_group_arn}:*"],
                }
            ],
        }
    )


class Network(pulumi.ComponentResource):
    """A VPC over ``zones`` with private node subnets, public load-balancer subnets, NAT and an S3 endpoint.

    Children (``name`` = this component's name):

    * ``{name}-vpc``; ``{name}-default-sg``, the VPC's default security group with every rule removed;
    * ``{name}-igw``; ``{name}-public-rt`` with its default route ``{name}-public-default``;
    * per zone: subnets ``{name}-private-<zone>`` and ``{name}-public-<zone>``, their route table associations
      ``{name}-private-rta-<zone>`` / ``{name}-public-rta-<zone>``, a private route table
      ``{name}-private-rt-<zone>`` whose default route ``{name}-private-default-<zone>`` leads to its zone's NAT;
    * NAT gateways ``{name}-nat-<zone>`` with Elastic IPs ``{name}-nat-eip-<zone>``: per zone, or one in the
      first zone shared by all;
    * ``{name}-s3``, the S3 gateway endpoint on every private route table;
    * the flow log ``{name}-flow-log`` of all traffic, into ``{name}-flow-logs`` (log group
      ``/aws/vpc/<cluster name>/flow-logs``) encrypted with ``{name}-flow-logs-key``, written through the role
      ``{name}-flow-logs-role`` and its inline policy ``{name}-flow-logs-delivery``.
    """

    vpc: aws.ec2.Vpc
    private_subnet_ids: list[pulumi.Output[str]]
    """Private subnet ids, in zone order."""
    public_subnet_ids: list[pulumi.Output[str]]
    """Public subnet ids, in zone order."""
    private_subnet_ids_by_zone: dict[str, pulumi.Output[str]]
    """Private subnet id per zone, for node groups pinned to one zone."""
    nat_gateways: list[aws.ec2.NatGateway]
    s3_endpoint: aws.ec2.VpcEndpoint

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:Network", name, None, opts)
        raise_input_errors("The input properties for the Network are invalid.", _check(args))

        tags = dict(args.tags)
        self.vpc, igw = self._vpc(name, args, tags)
        public_rt = self._public_route_table(name, tags, igw)
        public_subnets, private_subnets = self._subnets(name, args, tags, public_rt)
        self.nat_gateways = self._nat_gateways(name, args, tags, igw, public_subnets)
        private_rts = self._private_route_tables(name, args, tags, private_subnets, self.nat_gateways)
        region = aws.get_region_output(opts=pulumi.InvokeOutputOptions(parent=self))
        self.s3_endpoint = self._s3_endpoint(name, tags, region.region, private_rts)
        self._flow_log(name, args, region.region, tags)

        self.private_subnet_ids = [s.id for s in private_subnets]
        self.public_subnet_ids = [s.id for s in public_subnets]
        self.private_subnet_ids_by_zone = {zone: s.id for zone, s in zip(args.zones, private_subnets, strict=True)}
        self.register_outputs(
            {
                "vpcId": self.vpc.id,
                "privateSubnetIds": self.private_subnet_ids,
                "publicSubnetIds": self.public_subnet_ids,
            }
        )

    def _vpc(
        self, name: str, args: NetworkArgs, tags: Mapping[str, str]
    ) -> tuple[aws.ec2.Vpc, aws.ec2.InternetGateway]:
        """The VPC, its emptied default security group, and its internet gateway."""
        child = pulumi.ResourceOptions(parent=self)
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr_block,
            enable_dns_hostnames=True,  # EKS private endpoints and VPC endpoints resolve through VPC DNS
            enable_dns_support=True,
            tags={**tags, "Name": f"{name}-vpc"},
            opts=child,
        )
        # The default security group admits all traffic between its members; nothing should use it, so it is
        # adopted and emptied (CIS AWS Foundations 5.4).
        aws.ec2.DefaultSecurityGroup(
            f"{name}-default-sg",
            vpc_id=vpc.id,
            ingress=[],
            egress=[],
            tags={**tags, "Name": f"{name}-default-sg"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-igw"}, opts=child)
        return vpc, igw

    def _public_route_table(
        self, name: str, tags: Mapping[str, str], igw: aws.ec2.InternetGateway
    ) -> aws.ec2.RouteTable:
        """The route table every public subnet shares, its default route through the internet gateway."""
        child = pulumi.ResourceOptions(parent=self)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt", vpc_id=self.vpc.id, tags={**tags, "Name": f"{name}-public-rt"}, opts=child
        )
        aws.ec2.Route(
            f"{name}-public-default",
            route_table_id=public_rt.id,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=igw.id,
            opts=child,
        )
        return public_rt

    def _subnets(
        self, name: str, args: NetworkArgs, tags: Mapping[str, str], public_rt: aws.ec2.RouteTable
    ) -> tuple[list[aws.ec2.Subnet], list[aws.ec2.Subnet]]:
        """(public, private) subnets in zone order, tagged for the load balancer controller; public ones routed."""
        child = pulumi.ResourceOptions(parent=self)
        private_cidrs, public_cidrs = plan_subnets(args.cidr_block, len(args.zones))
        shared = {cluster_tag(args.cluster_name): "shared"}
        public_subnets: list[aws.ec2.Subnet] = []
        private_subnets: list[aws.ec2.Subnet] = []
        for zone, private_cidr, public_cidr in zip(args.zones, private_cidrs, public_cidrs, strict=True):
            public = aws.ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=self.vpc.id,
                availability_zone=zone,
                cidr_block=public_cidr,
                # Load balancers get their addresses from the ELB service; nothing launched here needs one.
                map_public_ip_on_launch=False,
                tags={**tags, **shared, ELB_ROLE_TAG: "1", "Name": f"{name}-public-{zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-rta-{zone}", subnet_id=public.id, route_table_id=public_rt.id, opts=child
            )
            private = aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=self.vpc.id,
                availability_zone=zone,
                cidr_block=private_cidr,
                map_public_ip_on_launch=False,
                tags={**tags, **shared, INTERNAL_ELB_ROLE_TAG: "1", "Name": f"{name}-private-{zone}"},
                opts=child,
            )
            public_subnets.append(public)
            private_subnets.append(private)
        return public_subnets, private_subnets

    def _nat_gateways(
        self,
        name: str,
        args: NetworkArgs,
        tags: Mapping[str, str],
        igw: aws.ec2.InternetGateway,
        public_subnets: Sequence[aws.ec2.Subnet],
    ) -> list[aws.ec2.NatGateway]:
        """A NAT gateway with its Elastic IP in each zone's public subnet, or one in the first zone."""
        nat_zones = list(args.zones) if args.nat_per_zone else [args.zones[0]]
        gateways: list[aws.ec2.NatGateway] = []
        for zone in nat_zones:
            eip = aws.ec2.Eip(
                f"{name}-nat-eip-{zone}",
                domain="vpc",
                tags={**tags, "Name": f"{name}-nat-eip-{zone}"},
                opts=pulumi.ResourceOptions(parent=self),
            )
            gateways.append(
                aws.ec2.NatGateway(
                    f"{name}-nat-{zone}",
                    allocation_id=eip.allocation_id,
                    subnet_id=public_subnets[list(args.zones).index(zone)].id,
                    tags={**tags, "Name": f"{name}-nat-{zone}"},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                )
            )
        return gateways

    def _private_route_tables(
        self,
        name: str,
        args: NetworkArgs,
        tags: Mapping[str, str],
        private_subnets: Sequence[aws.ec2.Subnet],
        nat_gateways: Sequence[aws.ec2.NatGateway],
    ) -> list[aws.ec2.RouteTable]:
        """One route table per private subnet, its default route through its zone's (or the shared) NAT."""
        child = pulumi.ResourceOptions(parent=self)
        private_rts: list[aws.ec2.RouteTable] = []
        for index, (zone, subnet) in enumerate(zip(args.zones, private_subnets, strict=True)):
            nat = nat_gateways[index] if args.nat_per_zone else nat_gateways[0]
            rt = aws.ec2.RouteTable(
                f"{name}-private-rt-{zone}",
                vpc_id=self.vpc.id,
                tags={**tags, "Name": f"{name}-private-rt-{zone}"},
                opts=child,
            )
            aws.ec2.Route(
                f"{name}-private-default-{zone}",
                route_table_id=rt.id,
                destination_cidr_block="0.0.0.0/0",
                nat_gateway_id=nat.id,
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-rta-{zone}", subnet_id=subnet.id, route_table_id=rt.id, opts=child
            )
            private_rts.append(rt)
        return private_rts

    def _s3_endpoint(
        self,
        name: str,
        tags: Mapping[str, str],
        region: pulumi.Output[str],
        private_rts: Sequence[aws.ec2.RouteTable],
    ) -> aws.ec2.VpcEndpoint:
        """The S3 gateway endpoint on every private route table: model downloads bypass the NAT gateways."""
        return aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=self.vpc.id,
            service_name=region.apply(lambda r: f"com.amazonaws.{r}.s3"),
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_rts],
            tags={**tags, "Name": f"{name}-s3"},
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _flow_log(self, name: str, args: NetworkArgs, region: pulumi.Output[str], tags: Mapping[str, str]) -> None:
        """The VPC flow log of all traffic, delivered by a role scoped to this account's flow logs."""
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account = aws.get_caller_identity_output(opts=invoke).account_id
        child = pulumi.ResourceOptions(parent=self)
        group = self._flow_log_group(name, args, tags, partition=partition, region=region, account=account)
        role = aws.iam.Role(
            f"{name}-flow-logs-role",
            description=f"VPC flow log delivery of {args.cluster_name}",
            assume_role_policy=pulumi.Output.all(partition, region, account).apply(
                lambda values: flow_log_trust_policy(values[0], values[1], values[2])
            ),
            tags=dict(tags),
            opts=child,
        )
        delivery = aws.iam.RolePolicy(
            f"{name}-flow-logs-delivery",
            role=role.name,
            policy=group.arn.apply(flow_log_delivery_policy),
            opts=child,
        )
        aws.ec2.FlowLog(
            f"{name}-flow-log",
            vpc_id=self.vpc.id,
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_destination=group.arn,
            iam_role_arn=role.arn,
            max_aggregation_interval=FLOW_LOG_AGGREGATION_SECONDS,
            tags={**tags, "Name": f"{name}-flow-log"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[delivery]),
        )

    def _flow_log_group(
        self,
        name: str,
        args: NetworkArgs,
        tags: Mapping[str, str],
        *,
        partition: pulumi.Output[str],
        region: pulumi.Output[str],
        account: pulumi.Output[str],
    ) -> aws.cloudwatch.LogGroup:
        """The flow log's log group, encrypted with a key CloudWatch Logs may use for that group only."""
        group_name = f"/aws/vpc/{args.cluster_name}/flow-logs"
        key = aws.kms.Key(
            f"{name}-flow-logs-key",
            description=f"Encryption of the VPC flow log of {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            policy=pulumi.Output.all(partition, region, account).apply(
                lambda values: kms_policy.key_policy(
                    [
                        kms_policy.administration_statement(values[0], values[2]),
                        kms_policy.logs_usage_statement(values[0], values[1], values[2], group_name),
                    ]
                )
            ),
            tags=dict(tags),
            opts=pulumi.ResourceOptions(parent=self, protect=args.environment == "prod"),
        )
        return aws.cloudwatch.LogGroup(
            f"{name}-flow-logs",
            name=group_name,
            retention_in_days=args.flow_log_retention_days,
            kms_key_id=key.arn,
            tags=dict(tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
