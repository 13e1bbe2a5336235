"""EC2 launch templates of the GPU nodes, security groups and KMS keys."""

from __future__ import annotations

from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    as_dict,
    as_list,
    known,
    resource_policy,
    truthy,
)
from inferplane.policies.resource_types import T

SECURITY_GROUP_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


@resource_policy(
    name="ec2-launchtemplate-require-imdsv2",
    description=(
        "Nodes must require IMDSv2 session tokens: with IMDSv1 any SSRF in a pod (model servers fetch URLs) can read "
        "the node role's credentials."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.LAUNCH_TEMPLATE},
    remediation="Set metadata_options.http_tokens='required' on the launch template.",
)
def launch_template_imdsv2(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_AWS_79; terraform-aws-eks managed node group default."""
    options = resource.get("metadataOptions")
    if options is UNKNOWN or as_dict(options).get("httpEndpoint") == "disabled":
        return
    tokens = as_dict(options).get("httpTokens")
    if tokens is UNKNOWN:
        return
    if tokens != "required":
        report(f"metadataOptions.httpTokens is {tokens or 'unset'}, not required: IMDSv1 stays reachable")


@resource_policy(
    name="ec2-launchtemplate-limit-metadata-hop-count",
    description=(
        "The IMDS response hop limit should stop at the node: with 2 or more hops every pod can reach the node "
        "role's credentials; pods get their own through EKS Pod Identity or IRSA."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.ADVISORY,
    types={T.LAUNCH_TEMPLATE},
    config={
        "maxHopLimit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 64,
            "default": 1,
            "description": "Largest acceptable metadataOptions.httpPutResponseHopLimit.",
        }
    },
    remediation="Set metadata_options.http_put_response_hop_limit=1.",
)
def launch_template_hops(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_AWS_341; EKS Best Practices (IAM: restrict access to the instance profile)."""
    hops = resource.get("metadataOptions", "httpPutResponseHopLimit")
    if isinstance(hops, int) and hops > config["maxHopLimit"]:
        report(f"metadataOptions.httpPutResponseHopLimit is {hops}, above {config['maxHopLimit']}")


@resource_policy(
    name="ec2-launchtemplate-disallow-unencrypted-volume",
    description=(
        "Every EBS volume of a node must be encrypted: node disks cache model weights and container images and "
        "outlive the instance as snapshots."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.LAUNCH_TEMPLATE},
    remediation="Give every block_device_mappings[].ebs encrypted='true' (and a KMS key).",
)
def launch_template_volumes(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: compliance-policies aws-ec2-launchtemplate-disallow-unencrypted-block-device; awsguard."""
    mappings = resource.get("blockDeviceMappings")
    if mappings is UNKNOWN:
        return
    if not mappings:
        report("blockDeviceMappings is empty: the root volume takes the AMI's default, which is not encrypted")
        return
    for index, mapping in enumerate(as_list(mappings)):
        ebs = as_dict(mapping).get("ebs")
        if ebs is None or ebs is UNKNOWN or mapping is UNKNOWN:
            continue  # instance-store (NVMe) mappings have no EBS volume
        encrypted = as_dict(ebs).get("encrypted")
        if encrypted is UNKNOWN:
            continue
        if truthy(encrypted) is not True:
            device = as_dict(mapping).get("deviceName") or "?"
            report(f"blockDeviceMappings[{index}] ({device}) is not encrypted")


@resource_policy(
    name="ec2-launchtemplate-disallow-public-ip",
    description="GPU nodes must not get public IP addresses: they live in private subnets behind NAT.",
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.LAUNCH_TEMPLATE},
    remediation="Remove associate_public_ip_address from the launch template's network interfaces.",
)
def launch_template_public_ip(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: compliance-policies aws-ec2-launchtemplate-disallow-public-ip; CKV_AWS_88."""
    for index, interface in enumerate(as_list(resource.get("networkInterfaces"))):
        if truthy(as_dict(interface).get("associatePublicIpAddress")):
            report(f"networkInterfaces[{index}].associatePublicIpAddress is true")


@resource_policy(
    name="ec2-securitygroup-disallow-public-ingress",
    description=(
        "No security group may accept traffic from the whole internet except on the allowed ports (the gateway's "
        "HTTPS listener): model servers and the cache have no authentication of their own at the network edge."
    ),
    severity=Severity.CRITICAL,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.SECURITY_GROUP, SECURITY_GROUP_RULE},
    config={
        "allowedPublicPorts": {
            "type": "array",
            "items": {"type": "integer"},
            "default": [443],
            "description": "Ports that may be open to 0.0.0.0/0 (the gateway load balancer).",
        }
    },
    remediation="Restrict the rule's CIDR to the VPC or a known range, or route the traffic through the gateway.",
)
def security_group_ingress(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: compliance-policies aws-ec2-securitygroup-disallow-public-internet-ingress."""
    allowed = set(config["allowedPublicPorts"])
    if resource.type == SECURITY_GROUP_RULE:
        rules = [
            {
                "cidrBlocks": [resource.get("cidrIpv4")],
                "ipv6CidrBlocks": [resource.get("cidrIpv6")],
                "fromPort": resource.get("fromPort"),
                "toPort": resource.get("toPort"),
            }
        ]
    else:
        rules = [as_dict(r) for r in as_list(resource.get("ingress"))]
    for index, rule in enumerate(rules):
        cidrs = as_list(rule.get("cidrBlocks")) + as_list(rule.get("ipv6CidrBlocks"))
        if not any(c in ("0.0.0.0/0", "::/0") for c in cidrs):
            continue
        low, high = rule.get("fromPort"), rule.get("toPort")
        if not (known(low) and known(high)):
            continue
        if low == high and low in allowed:
            continue
        report(f"ingress[{index}] opens ports {low}-{high} to the internet")


@resource_policy(
    name="kms-key-enable-rotation",
    description="Customer KMS keys (Secrets, EBS, cache) must rotate yearly, so one leaked key version ages out.",
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types={T.KMS_KEY},
    remediation="Set enable_key_rotation=True on the key.",
)
def kms_rotation(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_AWS_7; awsguard cmk-backing-key-rotation-enabled."""
    rotation = resource.get("enableKeyRotation")
    if rotation is UNKNOWN:
        return
    if truthy(rotation) is not True:
        report("enableKeyRotation is not true")


POLICIES: list[AnyPolicy] = [
    launch_template_imdsv2,
    launch_template_hops,
    launch_template_volumes,
    launch_template_public_ip,
    security_group_ingress,
    kms_rotation,
]
