"""The security baseline's builders against the policies that guard them, over their input space (hypothesis):
every key policy and trust policy the components can build passes, and the one thing each policy forbids fails."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from inferplane.components.aws import kms_policy
from inferplane.components.aws.eks_cluster import admin_trust_policy, logs_key_policy, secrets_key_key_policy
from inferplane.components.aws.model_cache import cache_key_policy
from inferplane.components.aws.redis_cache import cache_key_policy as elasticache_key_policy
from inferplane.policies.base import Resource
from inferplane.policies.baseline import kms_explicit_policy, role_trust
from inferplane.policies.resource_types import T

accounts = st.from_regex(r"\A[0-9]{12}\Z")
partitions = st.sampled_from(["aws", "aws-cn", "aws-us-gov"])
regions = st.sampled_from(["us-east-1", "eu-west-1", "ap-southeast-2", "us-gov-west-1"])
names = st.from_regex(r"\A[A-Za-z0-9+=,.@_-]{1,64}\Z")
principals = st.builds(
    lambda partition, account, kind, name: f"arn:{partition}:iam::{account}:{kind}/{name}",
    partitions,
    accounts,
    st.sampled_from(["role", "user"]),
    names,
)


def _key(policy: str) -> Resource:
    return Resource(type=T.KMS_KEY, name="key", urn="urn:key", props={"policy": policy})


def _role(policy: str) -> Resource:
    return Resource(type=T.IAM_ROLE, name="role", urn="urn:role", props={"assumeRolePolicy": policy})


@given(partitions, accounts, regions, principals, names)
def test_every_key_policy_the_components_build_is_explicit_and_least_privilege(
    partition: str, account: str, region: str, role: str, log_group: str
) -> None:
    documents = [
        secrets_key_key_policy(partition, account, role),
        logs_key_policy(partition, region, account, f"/aws/eks/{log_group}/cluster"),
        cache_key_policy(partition, account, region, role),
        elasticache_key_policy(partition, account, region),
    ]
    for document in documents:
        assert kms_explicit_policy.check(_key(document)) == []
        statements = json.loads(document)["Statement"]
        # The account administers; nobody but the named principal or service (through it) encrypts or decrypts.
        assert statements[0]["Sid"] == "KeyAdministration"
        assert not {"kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"} & set(statements[0]["Action"])
        assert all(s["Principal"] != "*" for s in statements)


@given(partitions, accounts, st.sampled_from(["*", "kms:*"]))
def test_a_key_policy_granting_everything_is_refused(partition: str, account: str, action: str) -> None:
    statement = {**kms_policy.administration_statement(partition, account), "Action": action}
    assert kms_explicit_policy.check(_key(kms_policy.key_policy([statement]))) == [f"Statement[0] allows {action}"]


@given(st.lists(principals, min_size=1, max_size=5, unique=True), st.none() | st.integers(0, 5), accounts)
def test_the_admin_role_trusts_exactly_the_named_principals(
    named: list[str], root_at: int | None, account: str
) -> None:
    assert role_trust.check(_role(admin_trust_policy(named))) == []
    assert json.loads(admin_trust_policy(named))["Statement"][0]["Principal"] == {"AWS": named}
    if root_at is not None:
        root = f"arn:aws:iam::{account}:root"
        with_root = [*named[:root_at], root, *named[root_at:]]
        assert role_trust.check(_role(admin_trust_policy(with_root))) == [f"Statement[0] trusts {root}"]
