"""EksCluster: encrypted secrets, audit logs, endpoint by environment, access entries, pinned add-ons, system
nodes and one Kubernetes provider; every refused combination with its message."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from inferplane.components.aws.eks_cluster import EksCluster
from inferplane.components.aws.kms_policy import KEY_ADMIN_ACTIONS
from inferplane.components.catalog.eks import ADDON_VERSIONS
from inferplane.tool.mockengine import SECRET_PLACEHOLDER, Evaluation, PlatformMocks, evaluate
from tests.aws_fixtures import SUBNETS, TAGS, cluster_args, make_cluster

ACCOUNT_ROLE = "arn:aws:iam::123456789012:role"
KEY_ADMINISTRATION = {
    "Sid": "KeyAdministration",
    "Effect": "Allow",
    "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
    "Action": list(KEY_ADMIN_ACTIONS),
    "Resource": "*",
}


def _evaluate(**changes: Any) -> tuple[Evaluation, list[str]]:
    kubeconfigs: list[str] = []

    def program() -> None:
        cluster = make_cluster(**changes)
        cluster.kubeconfig.apply(kubeconfigs.append)

    return evaluate(program, mocks=PlatformMocks("us-east-1"), stack="test"), kubeconfigs


def _deps(result: Evaluation, name: str) -> set[str]:
    return {urn.rsplit("::", 1)[-1] for urn in result.named(name).dependencies}


def test_cluster_children_and_their_inputs() -> None:
    result, kubeconfigs = _evaluate()
    component = result.named("eks")
    assert component.type == "inferplane:index:EksCluster"
    children = result.children_of(component.urn)
    assert len(children) == len(result.registrations) - 1
    assert sorted((r.type, r.name) for r in children) == sorted(
        [
            ("aws:iam/role:Role", "eks-cluster-role"),
            ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "eks-cluster-policy"),
            ("aws:iam/rolePolicy:RolePolicy", "eks-cluster-encryption"),
            ("aws:kms/key:Key", "eks-secrets-key"),
            ("aws:kms/alias:Alias", "eks-secrets-key-alias"),
            ("aws:kms/key:Key", "eks-logs-key"),
            ("aws:cloudwatch/logGroup:LogGroup", "eks-logs"),
            ("aws:eks/cluster:Cluster", "eks-cluster"),
            ("aws:iam/role:Role", "eks-admin-role"),
            ("aws:eks/accessEntry:AccessEntry", "eks-admin-entry"),
            ("aws:eks/accessPolicyAssociation:AccessPolicyAssociation", "eks-admin-policy"),
            ("aws:iam/role:Role", "eks-node-role"),
            ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "eks-node-AmazonEKSWorkerNodePolicy"),
            ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "eks-node-AmazonEC2ContainerRegistryPullOnly"),
            ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "eks-node-AmazonEKS_CNI_Policy"),
            ("aws:eks/addon:Addon", "eks-vpc-cni"),
            ("aws:eks/addon:Addon", "eks-kube-proxy"),
            ("aws:eks/addon:Addon", "eks-eks-pod-identity-agent"),
            ("aws:eks/addon:Addon", "eks-coredns"),
            ("aws:eks/addon:Addon", "eks-aws-ebs-csi-driver"),
            ("aws:iam/role:Role", "eks-ebs-csi-role"),
            ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "eks-ebs-csi-policy"),
            ("aws:ec2/launchTemplate:LaunchTemplate", "eks-system-lt"),
            ("aws:eks/nodeGroup:NodeGroup", "eks-system"),
            ("pulumi:providers:kubernetes", "eks-k8s"),
        ]
    )
    taggable = [r for r in children if "tags" in r.inputs]
    assert len(taggable) == 16
    assert all(r.inputs["tags"] == TAGS for r in taggable)

    cluster = next(r for r in children if r.type == "aws:eks/cluster:Cluster").inputs
    assert cluster["name"] == "inferplane-test"
    assert cluster["version"] == "1.34"
    assert cluster["roleArn"] == f"{ACCOUNT_ROLE}/eks-cluster-role"
    assert cluster["vpcConfig"] == {
        "subnetIds": list(SUBNETS.values()),
        "endpointPrivateAccess": True,
        "endpointPublicAccess": True,
        "publicAccessCidrs": ["198.51.100.0/24"],
    }
    assert cluster["encryptionConfig"] == {
        "resources": ["secrets"],
        "provider": {"keyArn": "arn:aws:kms:us-east-1:123456789012:key/eks-secrets-key-0000-0000"},
    }
    assert cluster["enabledClusterLogTypes"] == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    assert cluster["accessConfig"] == {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False}
    assert cluster["bootstrapSelfManagedAddons"] is False
    assert cluster["upgradePolicy"] == {"supportType": "STANDARD"}
    assert {"eks-cluster-policy", "eks-cluster-encryption", "eks-logs"} <= _deps(result, "eks-cluster")
    encryption = result.named("eks-cluster-encryption").inputs
    assert encryption["role"] == "eks-cluster-role"
    assert json.loads(encryption["policy"])["Statement"] == [
        {
            "Effect": "Allow",
            "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"],
            "Resource": "arn:aws:kms:us-east-1:123456789012:key/eks-secrets-key-0000-0000",
        }
    ]

    key = result.named("eks-secrets-key").inputs
    assert key["enableKeyRotation"] is True and key["deletionWindowInDays"] == 30
    assert json.loads(key["policy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            KEY_ADMINISTRATION,
            {
                "Sid": "ClusterRoleEnvelopeEncryption",
                "Effect": "Allow",
                "Principal": {"AWS": [f"{ACCOUNT_ROLE}/eks-cluster-role"]},
                "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"],
                "Resource": "*",
            },
        ],
    }
    logs_key = result.named("eks-logs-key").inputs
    assert logs_key["enableKeyRotation"] is True and logs_key["deletionWindowInDays"] == 30
    assert json.loads(logs_key["policy"])["Statement"] == [
        KEY_ADMINISTRATION,
        {
            "Sid": "CloudWatchLogs",
            "Effect": "Allow",
            "Principal": {"Service": "logs.us-east-1.amazonaws.com"},
            "Action": ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            "Resource": "*",
            "Condition": {
                "ArnEquals": {
                    "kms:EncryptionContext:aws:logs:arn": (
                        "arn:aws:logs:us-east-1:123456789012:log-group:/aws/eks/inferplane-test/cluster"
                    )
                }
            },
        },
    ]
    logs = result.named("eks-logs").inputs
    assert logs == {
        "name": "/aws/eks/inferplane-test/cluster",
        "retentionInDays": 365,
        "kmsKeyId": "arn:aws:kms:us-east-1:123456789012:key/eks-logs-key-0000-0000",
        "tags": TAGS,
    }

    # No admin principals named: the deployer (the mock caller, an IAM user) is trusted, never the account root.
    admin_trust = json.loads(result.named("eks-admin-role").inputs["assumeRolePolicy"])
    assert admin_trust["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"AWS": ["arn:aws:iam::123456789012:user/preview"]},
            "Action": "sts:AssumeRole",
        }
    ]
    assert result.named("eks-vpc-cni").inputs["configurationValues"] == '{"enableNetworkPolicy": "true"}'
    assert all(
        "configurationValues" not in result.named(f"eks-{addon}").inputs
        for addon in ADDON_VERSIONS["1.34"]
        if addon != "vpc-cni"
    )
    entry = next(r for r in children if r.type == "aws:eks/accessEntry:AccessEntry").inputs
    assert entry["type"] == "STANDARD" and entry["principalArn"] == f"{ACCOUNT_ROLE}/eks-admin-role"
    association = next(r for r in children if r.type == "aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert association.inputs == {
        "clusterName": "inferplane-test",
        "principalArn": f"{ACCOUNT_ROLE}/eks-admin-role",
        "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
        "accessScope": {"type": "cluster"},
    }

    for addon, version in ADDON_VERSIONS["1.34"].items():
        inputs = result.named(f"eks-{addon}").inputs
        assert inputs["addonName"] == addon and inputs["addonVersion"] == version
        assert inputs["clusterName"] == "inferplane-test"
    assert result.named("eks-aws-ebs-csi-driver").inputs["podIdentityAssociations"] == [
        {"roleArn": f"{ACCOUNT_ROLE}/eks-ebs-csi-role", "serviceAccount": "ebs-csi-controller-sa"}
    ]
    ebs_trust = json.loads(result.named("eks-ebs-csi-role").inputs["assumeRolePolicy"])
    assert ebs_trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert ebs_trust["Statement"][0]["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert result.named("eks-ebs-csi-policy").inputs["policyArn"] == (
        "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
    )
    # The CNI is up before nodes join; DNS and storage wait for nodes to run on.
    assert {"eks-vpc-cni", "eks-kube-proxy"} <= _deps(result, "eks-system")
    assert "eks-system" in _deps(result, "eks-coredns")
    assert {"eks-system", "eks-eks-pod-identity-agent"} <= _deps(result, "eks-aws-ebs-csi-driver")

    system = next(r for r in children if r.type == "aws:eks/nodeGroup:NodeGroup").inputs
    assert system["amiType"] == "AL2023_x86_64_STANDARD"
    assert system["instanceTypes"] == ["m7i.2xlarge"]
    assert system["scalingConfig"] == {"minSize": 2, "desiredSize": 2, "maxSize": 4}
    assert system["labels"] == {"inferplane.io/role": "system"}
    assert system["nodeRoleArn"] == f"{ACCOUNT_ROLE}/eks-node-role"
    assert system["launchTemplate"] == {"id": "eks-system-lt-id", "version": "1"}
    template = next(r for r in children if r.type == "aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert template["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpTokens": "required",
        "httpPutResponseHopLimit": 1,
        "instanceMetadataTags": "disabled",
    }
    assert template["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"

    provider = result.named("eks-k8s")
    assert provider.inputs == {"kubeconfig": SECRET_PLACEHOLDER}
    assert "eks-admin-policy" in _deps(result, "eks-k8s")
    (kubeconfig,) = kubeconfigs
    config = json.loads(kubeconfig)
    assert config["clusters"][0]["cluster"]["server"].startswith("https://")
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert config["users"][0]["user"]["exec"] == {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "aws",
        "args": [
            "eks",
            "get-token",
            "--cluster-name",
            "inferplane-test",
            "--region",
            "us-east-1",
            "--role-arn",
            f"{ACCOUNT_ROLE}/eks-admin-role",
        ],
        "interactiveMode": "Never",
    }


def test_prod_endpoint_is_private_only() -> None:
    result, _ = _evaluate(environment="prod", endpoint_access="private", public_access_cidrs=())
    vpc = result.named("eks-cluster").inputs["vpcConfig"]
    assert vpc["endpointPrivateAccess"] is True
    assert vpc["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in vpc
    # Deleting the secrets key makes every secret unreadable: prod protects it, dev does not.
    assert result.named("eks-secrets-key").protect is True
    dev, _ = _evaluate()
    assert dev.named("eks-secrets-key").protect is False


def test_admin_role_can_trust_named_principals_only() -> None:
    admins = ("arn:aws:iam::123456789012:role/platform-admins",)
    result, _ = _evaluate(admin_principal_arns=admins)
    trust = json.loads(result.named("eks-admin-role").inputs["assumeRolePolicy"])
    assert trust["Statement"] == [{"Effect": "Allow", "Principal": {"AWS": list(admins)}, "Action": "sts:AssumeRole"}]


def test_deployer_on_an_assumed_role_is_trusted_as_its_role() -> None:
    class AssumedRole(PlatformMocks):
        def call(self, args: Any) -> Any:
            if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
                arn = "arn:aws:sts::123456789012:assumed-role/deployer/ci-run-42"
                return {"accountId": "123456789012", "arn": arn, "userId": "AROAX:ci-run-42"}, []
            return super().call(args)

    def program() -> None:
        make_cluster()

    result = evaluate(program, mocks=AssumedRole("us-east-1"), stack="test")
    trust = json.loads(result.named("eks-admin-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"AWS": ["arn:aws:iam::123456789012:role/deployer"]}


def test_another_version_and_retention() -> None:
    result, _ = _evaluate(kubernetes_version="1.35", system_nodes=3, log_retention_days=731)
    assert result.named("eks-logs").inputs["retentionInDays"] == 731
    assert result.named("eks-kube-proxy").inputs["addonVersion"] == ADDON_VERSIONS["1.35"]["kube-proxy"]
    assert result.named("eks-system").inputs["scalingConfig"] == {"minSize": 3, "desiredSize": 3, "maxSize": 6}


@pytest.mark.parametrize(
    ("changes", "path", "reason"),
    [
        ({"kubernetes_version": "1.30"}, "kubernetes_version", "1.30 has no pinned add-on versions (1.33, 1.34, 1.35)"),
        (
            {"environment": "prod"},
            "endpoint_access",
            "prod clusters keep the API endpoint private",
        ),
        ({"public_access_cidrs": ()}, "public_access_cidrs", "a public endpoint needs an explicit CIDR allowlist"),
        (
            {"endpoint_access": "private"},
            "public_access_cidrs",
            "set only with endpoint_access public_and_private",
        ),
        (
            {"public_access_cidrs": ("0.0.0.0/0",)},
            "public_access_cidrs[0]",
            "0.0.0.0/0 opens the API endpoint to the whole internet",
        ),
        (
            {"public_access_cidrs": ("198.51.100.1/24",)},
            "public_access_cidrs[0]",
            "'198.51.100.1/24' is not a CIDR block: 198.51.100.1/24 has host bits set",
        ),
        (
            {"log_types": ("api", "authenticator")},
            "log_types",
            "control-plane logs must include audit, controllerManager, scheduler",
        ),
        ({"subnet_ids": ["subnet-a"]}, "subnet_ids", "EKS needs subnets in at least 2 zones, got 1"),
        ({"system_nodes": 0}, "system_nodes", "between 1 and 10, got 0"),
        (
            {"log_retention_days": 100},
            "log_retention_days",
            "100 is not a CloudWatch retention (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, "
            "1827, 2192, 2557, 2922, 3288, 3653)",
        ),
        (
            {"admin_principal_arns": ("arn:aws:iam::123456789012:group/admins",)},
            "admin_principal_arns[0]",
            "'arn:aws:iam::123456789012:group/admins' is not an IAM role or user ARN",
        ),
    ],
)
def test_refuses(changes: dict[str, Any], path: str, reason: str) -> None:
    with pytest.raises(pulumi.InputPropertiesError) as raised:
        _evaluate(**changes)
    assert raised.value.errors == [{"property_path": path, "reason": reason}]
    assert str(raised.value) == f"The input properties for the EKS cluster are invalid. {path}: {reason}"


def test_collects_every_problem_before_creating_anything() -> None:
    registered: list[str] = []

    def program() -> None:
        EksCluster("eks", cluster_args(kubernetes_version="1.20", log_types=("api",), system_nodes=11))
        registered.append("unreachable")

    with pytest.raises(pulumi.InputPropertiesError) as raised:
        evaluate(program, mocks=PlatformMocks(), stack="test")
    assert [e["property_path"] for e in raised.value.errors or []] == [
        "kubernetes_version",
        "log_types",
        "system_nodes",
    ]
    assert registered == []
