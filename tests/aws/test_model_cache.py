"""ModelCache: a private TLS-only SSE-KMS bucket, one Pod Identity role, an association per model server account."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import botocore.session  # botocore ships no type hints
import pulumi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplane.components.aws.kms_policy import KEY_ADMIN_ACTIONS
from inferplane.components.aws.model_cache import ModelCache, ModelCacheArgs, ServiceAccountRef
from inferplane.components.capacity.sizing import size_platform
from inferplane.components.platform.aws_foundation import build_aws_foundation, platform_tags
from inferplane.components.platform.model_cache import build_model_cache, model_cache_accounts
from inferplane.components.platform.serving import build_model_servers
from inferplane.components.spec.platform_spec import Environment
from inferplane.tool.analyzer import PolicyPackProcess, load_policy_pack_config, policy_config_path
from inferplane.tool.mockengine import MOCK_ACCOUNT_ID, Evaluation, PlatformMocks, evaluate
from tests.serving_support import HF_TOKEN, container, stack_spec

TAGS = {"team": "ml-platform", "cost-center": "ml-123", "environment": "dev"}
READER = ServiceAccountRef(namespace="inference", name="llama-70b-sa")
WRITER = ServiceAccountRef(namespace="inference", name="llama-8b-sa", write=True)
BUCKET = "cache-bucket-f8153c7"
BUCKET_ARN = f"arn:aws:s3:::{BUCKET}"
KEY_ARN = f"arn:aws:kms:us-east-1:{MOCK_ACCOUNT_ID}:key/cache-key-0000-0000"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
TAGGABLE = {"aws:kms/key:Key", "aws:s3/bucket:Bucket", "aws:iam/role:Role", ASSOCIATION}


def _evaluate(
    accounts: Sequence[ServiceAccountRef] = (READER, WRITER), environment: Environment = "dev", name: str = "cache"
) -> Evaluation:
    def program() -> None:
        cache = ModelCache(
            name,
            ModelCacheArgs(
                cluster_name="inferplane-test", environment=environment, service_accounts=accounts, tags=TAGS
            ),
        )
        pulumi.export("uri", cache.uri)
        pulumi.export("bucket", cache.bucket_name)
        pulumi.export("role", cache.role_arn)
        pulumi.export("key", cache.key_arn)

    return evaluate(program, mocks=PlatformMocks("us-east-1"), stack="test")


def _refused(accounts: Sequence[ServiceAccountRef], name: str = "cache") -> list[Any]:
    with pytest.raises(pulumi.InputPropertiesError) as caught:
        _evaluate(accounts, name=name)
    assert caught.value.message.startswith("The input properties for the model cache are invalid. ")
    assert caught.value.errors is not None
    return list(caught.value.errors)


def _policy(evaluation: Evaluation, name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(evaluation.named(name).inputs["policy"])
    return document


READ_STATEMENTS = [
    {
        "Sid": "ListCache",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": BUCKET_ARN,
        "Condition": {"StringLike": {"s3:prefix": ["models/*"]}},
    },
    {"Sid": "ReadCache", "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"{BUCKET_ARN}/models/*"},
    {"Sid": "DecryptCache", "Effect": "Allow", "Action": "kms:Decrypt", "Resource": KEY_ARN},
]


def test_children_are_exact() -> None:
    evaluation = _evaluate()
    component = evaluation.named("cache")
    assert component.type == "inferplane:index:ModelCache"
    assert sorted((r.type, r.name) for r in evaluation.children_of(component.urn)) == sorted(
        [
            ("aws:kms/key:Key", "cache-key"),
            ("aws:s3/bucket:Bucket", "cache-bucket"),
            ("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "cache-public-access-block"),
            ("aws:s3/bucketOwnershipControls:BucketOwnershipControls", "cache-ownership"),
            (
                "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
                "cache-encryption",
            ),
            ("aws:s3/bucketVersioning:BucketVersioning", "cache-versioning"),
            ("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "cache-lifecycle"),
            ("aws:s3/bucketPolicy:BucketPolicy", "cache-policy"),
            ("aws:s3/bucket:Bucket", "cache-logs"),
            ("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "cache-logs-public-access-block"),
            ("aws:s3/bucketOwnershipControls:BucketOwnershipControls", "cache-logs-ownership"),
            (
                "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
                "cache-logs-encryption",
            ),
            ("aws:s3/bucketVersioning:BucketVersioning", "cache-logs-versioning"),
            ("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "cache-logs-lifecycle"),
            ("aws:s3/bucketPolicy:BucketPolicy", "cache-logs-policy"),
            ("aws:s3/bucketLogging:BucketLogging", "cache-access-logging"),
            ("aws:iam/role:Role", "cache-role"),
            ("aws:iam/rolePolicy:RolePolicy", "cache-access"),
            ("aws:eks/podIdentityAssociation:PodIdentityAssociation", "cache-inference-llama-70b-sa"),
            ("aws:eks/podIdentityAssociation:PodIdentityAssociation", "cache-inference-llama-8b-sa"),
        ]
    )
    assert evaluation.outputs == {
        "uri": f"s3://{BUCKET}/models/",
        "bucket": BUCKET,
        "role": f"arn:aws:iam::{MOCK_ACCOUNT_ID}:role/cache-role",
        "key": KEY_ARN,
    }


def test_bucket_is_private_owner_enforced_kms_encrypted_and_versioned() -> None:
    evaluation = _evaluate()
    bucket = evaluation.named("cache-bucket")
    assert bucket.inputs == {"forceDestroy": False, "tags": TAGS}
    key = evaluation.named("cache-key")
    assert {k: v for k, v in key.inputs.items() if k not in {"description", "policy"}} == {
        "enableKeyRotation": True,
        "deletionWindowInDays": 30,
        "tags": TAGS,
    }
    assert json.loads(key.inputs["policy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "KeyAdministration",
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{MOCK_ACCOUNT_ID}:root"},
                "Action": list(KEY_ADMIN_ACTIONS),
                "Resource": "*",
            },
            {
                "Sid": "CacheRoleThroughS3",
                "Effect": "Allow",
                "Principal": {"AWS": [f"arn:aws:iam::{MOCK_ACCOUNT_ID}:role/cache-role"]},
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": "*",
                "Condition": {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}},
            },
        ],
    }
    bucket_id = f"{bucket.name}-id"
    assert evaluation.named("cache-public-access-block").inputs == {
        "bucket": bucket_id,
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
    }
    assert evaluation.named("cache-ownership").inputs == {
        "bucket": bucket_id,
        "rule": {"objectOwnership": "BucketOwnerEnforced"},
    }
    assert evaluation.named("cache-encryption").inputs == {
        "bucket": bucket_id,
        "rules": [
            {
                "applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": KEY_ARN},
                "bucketKeyEnabled": True,
            }
        ],
    }
    assert evaluation.named("cache-versioning").inputs == {
        "bucket": bucket_id,
        "versioningConfiguration": {"status": "Enabled"},
    }
    lifecycle = evaluation.named("cache-lifecycle")
    assert lifecycle.inputs == {
        "bucket": bucket_id,
        "rules": [
            {
                "id": "expire-noncurrent-versions",
                "status": "Enabled",
                "filter": {"prefix": ""},
                "abortIncompleteMultipartUpload": {"daysAfterInitiation": 7},
                "noncurrentVersionExpiration": {"noncurrentDays": 30},
            }
        ],
    }
    assert evaluation.named("cache-versioning").urn in lifecycle.dependencies


def test_bucket_policy_refuses_every_request_without_tls() -> None:
    evaluation = _evaluate()
    policy = evaluation.named("cache-policy")
    assert _policy(evaluation, "cache-policy") == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [BUCKET_ARN, f"{BUCKET_ARN}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }
    assert evaluation.named("cache-public-access-block").urn in policy.dependencies


def test_access_is_logged_to_a_private_versioned_sse_s3_bucket_that_expires_its_logs() -> None:
    evaluation = _evaluate()
    logs_id = "cache-logs-id"
    assert evaluation.named("cache-logs").inputs == {"forceDestroy": False, "tags": TAGS}
    logging = evaluation.named("cache-access-logging")
    assert logging.inputs == {"bucket": "cache-bucket-id", "targetBucket": logs_id, "targetPrefix": "model-cache/"}
    assert evaluation.named("cache-logs-policy").urn in logging.dependencies
    assert evaluation.named("cache-logs-public-access-block").inputs == {
        "bucket": logs_id,
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
    }
    assert evaluation.named("cache-logs-ownership").inputs == {
        "bucket": logs_id,
        "rule": {"objectOwnership": "BucketOwnerEnforced"},
    }
    assert evaluation.named("cache-logs-encryption").inputs == {
        "bucket": logs_id,
        "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}],
    }
    assert evaluation.named("cache-logs-versioning").inputs == {
        "bucket": logs_id,
        "versioningConfiguration": {"status": "Enabled"},
    }
    lifecycle = evaluation.named("cache-logs-lifecycle")
    assert lifecycle.inputs == {
        "bucket": logs_id,
        "rules": [
            {
                "id": "expire-access-logs",
                "status": "Enabled",
                "filter": {"prefix": ""},
                "abortIncompleteMultipartUpload": {"daysAfterInitiation": 7},
                "noncurrentVersionExpiration": {"noncurrentDays": 30},
                "expiration": {"days": 365},
            }
        ],
    }
    assert evaluation.named("cache-logs-versioning").urn in lifecycle.dependencies
    logs_arn = "arn:aws:s3:::cache-logs-33f7ce7"
    assert _policy(evaluation, "cache-logs-policy")["Statement"] == [
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [logs_arn, f"{logs_arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
        {
            "Sid": "S3ServerAccessLogs",
            "Effect": "Allow",
            "Principal": {"Service": "logging.s3.amazonaws.com"},
            "Action": "s3:PutObject",
            "Resource": f"{logs_arn}/model-cache/*",
            "Condition": {
                "ArnLike": {"aws:SourceArn": BUCKET_ARN},
                "StringEquals": {"aws:SourceAccount": MOCK_ACCOUNT_ID},
            },
        },
    ]
    assert evaluation.named("cache-logs-public-access-block").urn in evaluation.named("cache-logs-policy").dependencies


LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"


def test_every_lifecycle_rule_aborts_incomplete_multipart_uploads() -> None:
    """Checkov CKV_AWS_300: an interrupted upload's parts are billed and invisible until a rule aborts them."""
    rules = [rule for r in _evaluate().of_type(LIFECYCLE) for rule in r.inputs["rules"]]
    # The two buckets' configurations register in no fixed order: compare them sorted.
    assert sorted((rule["id"], rule["abortIncompleteMultipartUpload"]) for rule in rules) == [
        ("expire-access-logs", {"daysAfterInitiation": 7}),
        ("expire-noncurrent-versions", {"daysAfterInitiation": 7}),
    ]


def _s3_shape_problems(value: Any, shape: Any, path: str) -> list[str]:
    """Where ``value`` (Pulumi's camelCase inputs) does not fit the S3 API shape: unknown members, enum values."""
    if shape.type_name == "structure":
        members = {member.lower(): member for member in shape.members}
        problems: list[str] = []
        for key, item in value.items():
            member = members.get(key.lower())
            if member is None:
                problems.append(f"{path}.{key}: not a member of {shape.name}")
            else:
                problems += _s3_shape_problems(item, shape.members[member], f"{path}.{key}")
        return problems
    if shape.type_name == "list":
        return [p for i, item in enumerate(value) for p in _s3_shape_problems(item, shape.member, f"{path}[{i}]")]
    if getattr(shape, "enum", None) and value not in shape.enum:
        return [f"{path}: {value!r} is not one of {shape.name} {shape.enum}"]
    # The engine hands numbers over as doubles (2 arrives as 2.0): a whole positive number is an integer here.
    if shape.type_name == "integer" and not (isinstance(value, int | float) and value > 0 and value % 1 == 0):
        return [f"{path}: {value!r} is not a positive integer"]
    return []


@pytest.mark.parametrize(
    ("name", "field", "shape"),
    [
        ("cache-lifecycle", "rules", "LifecycleRules"),
        ("cache-logs-lifecycle", "rules", "LifecycleRules"),
        ("cache-versioning", "versioningConfiguration", "VersioningConfiguration"),
        ("cache-logs-versioning", "versioningConfiguration", "VersioningConfiguration"),
        ("cache-encryption", "rules", "ServerSideEncryptionRules"),
        ("cache-logs-encryption", "rules", "ServerSideEncryptionRules"),
    ],
)
def test_bucket_configurations_fit_the_s3_service_model(name: str, field: str, shape: str) -> None:
    """Each configuration the cache declares is one S3's API (botocore's service model) accepts, member by member."""
    s3 = botocore.session.get_session().get_service_model("s3")
    value = _evaluate().named(name).inputs[field]
    assert _s3_shape_problems(value, s3.shape_for(shape), field) == []


def test_the_s3_model_check_names_what_does_not_fit() -> None:
    s3 = botocore.session.get_session().get_service_model("s3")
    rules = [{"id": "x", "status": "On", "abortIncompleteMultipartUpload": {"daysAfterInitiation": 0}, "ttl": 1}]
    assert _s3_shape_problems(rules, s3.shape_for("LifecycleRules"), "rules") == [
        "rules[0].status: 'On' is not one of ExpirationStatus ['Enabled', 'Disabled']",
        "rules[0].abortIncompleteMultipartUpload.daysAfterInitiation: 0 is not a positive integer",
        "rules[0].ttl: not a member of LifecycleRule",
    ]


def test_role_is_trusted_by_pod_identity_only() -> None:
    evaluation = _evaluate()
    role = evaluation.named("cache-role")
    assert json.loads(role.inputs["assumeRolePolicy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }
    assert role.inputs["tags"] == TAGS


def test_readers_list_and_get_the_cache_prefix_and_writers_put_engines_only() -> None:
    evaluation = _evaluate()
    access = evaluation.named("cache-access")
    assert access.inputs["role"] == "cache-role"
    assert _policy(evaluation, "cache-access") == {
        "Version": "2012-10-17",
        "Statement": [
            *READ_STATEMENTS,
            {
                "Sid": "WriteEngines0",
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "kms:GenerateDataKey"],
                "Resource": [f"{BUCKET_ARN}/models/engines/*", KEY_ARN],
                "Condition": {
                    "StringEquals": {
                        "aws:PrincipalTag/kubernetes-namespace": "inference",
                        "aws:PrincipalTag/kubernetes-service-account": "llama-8b-sa",
                    }
                },
            },
        ],
    }


def test_without_writers_nothing_may_be_put() -> None:
    assert _policy(_evaluate([READER]), "cache-access") == {"Version": "2012-10-17", "Statement": READ_STATEMENTS}


def test_one_association_per_service_account_on_the_cluster() -> None:
    evaluation = _evaluate()
    role_arn = f"arn:aws:iam::{MOCK_ACCOUNT_ID}:role/cache-role"
    registrations = evaluation.of_type(ASSOCIATION)
    assert sorted(r.name for r in registrations) == ["cache-inference-llama-70b-sa", "cache-inference-llama-8b-sa"]
    assert sorted((r.inputs for r in registrations), key=lambda inputs: str(inputs["serviceAccount"])) == [
        {
            "clusterName": "inferplane-test",
            "namespace": "inference",
            "serviceAccount": account,
            "roleArn": role_arn,
            "tags": TAGS,
        }
        for account in ("llama-70b-sa", "llama-8b-sa")
    ]


def test_every_taggable_child_is_tagged() -> None:
    evaluation = _evaluate()
    children = evaluation.children_of(evaluation.named("cache").urn)
    taggable = [r for r in children if r.type in TAGGABLE]
    assert len(taggable) == 6
    assert all(r.inputs["tags"] == TAGS for r in taggable)
    assert not [r.name for r in children if r.type not in TAGGABLE and "tags" in r.inputs]


@pytest.mark.parametrize(("environment", "protected"), [("dev", False), ("staging", False), ("prod", True)])
def test_bucket_and_key_are_protected_in_prod(environment: Environment, protected: bool) -> None:
    evaluation = _evaluate(environment=environment)
    children = evaluation.children_of(evaluation.named("cache").urn)
    assert {r.name for r in children if r.protect} == (
        {"cache-bucket", "cache-key", "cache-logs"} if protected else set()
    )


def test_uri_waits_for_the_associations_and_permissions() -> None:
    """Pods created before their association get no credentials: whatever reads ``uri`` depends on all of it."""
    spec = stack_spec("prod")
    plan = size_platform(spec)

    def program() -> None:
        foundation = build_aws_foundation(spec, plan, platform_tags(spec))
        cache = build_model_cache(spec, foundation.cluster.cluster.name, platform_tags(spec))
        assert cache is not None
        build_model_servers(
            spec,
            plan,
            {pool.name: foundation.k8s_provider for pool in spec.pools},
            hf_token=pulumi.Config("inferplane").require_secret("hfToken"),
            model_cache_uri=cache.uri,
        )

    evaluation = _prod_platform(program)
    bucket = evaluation.named("model-cache-bucket").outputs["bucket"]
    deployment = evaluation.named("llama-70b-deployment")
    assert (
        container(deployment, "fetch-weights")["args"][-2] == f"s3://{bucket}/models/meta-llama/Llama-3.3-70B-Instruct/"
    )
    upload = container(evaluation.named("llama-8b-engine-build"), "upload-engine")["args"][-1]
    assert upload.startswith(f"s3://{bucket}/models/engines/llama-8b/")
    waited = {"model-cache-access", "model-cache-policy", "model-cache-encryption"} | {
        f"model-cache-inference-{account}" for account in ("llama-70b-sa", "llama-8b-sa")
    }
    for served in (deployment, evaluation.named("llama-8b-deployment"), evaluation.named("llama-8b-engine-build")):
        assert {evaluation.named(name).urn for name in waited} <= set(served.dependencies)
    [cluster] = evaluation.of_type("aws:eks/cluster:Cluster")
    associations = evaluation.of_type(ASSOCIATION)
    cache_associations = [r for r in associations if r.name.startswith("model-cache-")]
    assert {r.inputs["clusterName"] for r in cache_associations} == {cluster.inputs["name"]}


def _prod_platform(program: Any) -> Evaluation:
    return evaluate(
        program,
        mocks=PlatformMocks("us-east-1"),
        stack="prod",
        config={"inferplane:hfToken": HF_TOKEN},
        secret_keys=("inferplane:hfToken",),
    )


def test_composition_binds_every_aws_server_and_lets_triton_write() -> None:
    assert model_cache_accounts(stack_spec("prod")) == [
        ServiceAccountRef(namespace="inference", name="llama-70b-sa", write=False),
        ServiceAccountRef(namespace="inference", name="llama-70b-prefill-sa", write=False),  # its prefill role
        ServiceAccountRef(namespace="inference", name="llama-8b-sa", write=True),
        ServiceAccountRef(namespace="inference", name="gateway-sa", write=False),  # the gateway reads tokenizers
    ]
    assert model_cache_accounts(stack_spec("dev")) == [
        ServiceAccountRef(namespace="inference", name="llama-8b-sa"),
        ServiceAccountRef(namespace="inference", name="gateway-sa"),
    ]


def test_composition_leaves_tpu_pools_out_and_builds_nothing_without_aws_servers() -> None:
    staging = stack_spec("staging")
    assert model_cache_accounts(staging) == [
        ServiceAccountRef(namespace="inference", name="llama-8b-sa", write=True),
        # SGLang reads its checkpoint from the cache; only Triton writes (its built engines).
        ServiceAccountRef(namespace="inference", name="qwen-agent-sa"),
        ServiceAccountRef(namespace="inference", name="gateway-sa"),
    ]
    tpu_only = staging.model_copy(update={"models": [m for m in staging.models if m.name == "qwen-7b"]})
    assert model_cache_accounts(tpu_only) == []
    created: list[ModelCache | None] = []
    evaluation = evaluate(
        lambda: created.append(build_model_cache(tpu_only, "inferplane-staging", {})), mocks=PlatformMocks()
    )
    assert created == [None]
    assert evaluation.registrations == ()


def test_the_policy_pack_passes_the_cache_in_prod() -> None:
    """Prod's pack config requires protect on buckets and keys, rotation on keys and the cost tags everywhere."""
    spec = stack_spec("prod")

    def program() -> None:
        build_model_cache(spec, "inferplane-prod", platform_tags(spec))

    evaluation = _prod_platform(program)
    with PolicyPackProcess.start(stack="prod") as pack:
        pack.configure(load_policy_pack_config(policy_config_path("prod")))
        report = pack.evaluate(list(evaluation.registrations))
    assert report.violations == ()


# --- refusals ---------------------------------------------------------------------------------------------------


def test_an_empty_account_list_is_refused() -> None:
    assert _refused([]) == [
        {"property_path": "service_accounts", "reason": "give at least one ServiceAccount that reads the cache"}
    ]


def test_a_duplicate_account_is_refused_even_with_another_write_flag() -> None:
    assert _refused([READER, WRITER, ServiceAccountRef("inference", "llama-70b-sa", write=True)]) == [
        {"property_path": "service_accounts[2]", "reason": "inference/llama-70b-sa is already service_accounts[0]"}
    ]


def test_accounts_whose_association_names_clash_are_refused() -> None:
    assert _refused([ServiceAccountRef("a-b", "c"), ServiceAccountRef("a", "b-c")]) == [
        {
            "property_path": "service_accounts[1]",
            "reason": "its association name cache-a-b-c clashes with service_accounts[0]",
        }
    ]


def test_invalid_kubernetes_names_are_refused_together() -> None:
    assert _refused([ServiceAccountRef("Inference", "llama_sa"), ServiceAccountRef("", "ok")]) == [
        {"property_path": "service_accounts[0].namespace", "reason": "'Inference' is not a Kubernetes namespace name"},
        {"property_path": "service_accounts[0].name", "reason": "'llama_sa' is not a Kubernetes ServiceAccount name"},
        {"property_path": "service_accounts[1].namespace", "reason": "'' is not a Kubernetes namespace name"},
    ]


@pytest.mark.parametrize("name", ["Model-Cache", "model_cache", "m" * 49])
def test_a_name_s3_cannot_auto_name_a_bucket_from_is_refused(name: str) -> None:
    assert _refused([READER], name=name) == [
        {
            "property_path": "name",
            "reason": f"{name!r} must be lowercase letters, digits and hyphens, at most 48 long (S3 bucket name)",
        }
    ]


def test_the_longest_name_is_accepted() -> None:
    assert _evaluate([READER], name="m" * 48).named("m" * 48 + "-bucket").type == "aws:s3/bucket:Bucket"


_label = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.tuples(_label, _label), st.booleans(), min_size=1, max_size=5))
def test_associations_and_write_grants_follow_the_accounts(accounts: dict[tuple[str, str], bool]) -> None:
    refs = [ServiceAccountRef(namespace, name, write) for (namespace, name), write in accounts.items()]
    evaluation = _evaluate(refs)
    associations = evaluation.of_type(ASSOCIATION)
    assert sorted((r.inputs["namespace"], r.inputs["serviceAccount"]) for r in associations) == sorted(accounts)
    statements = _policy(evaluation, "cache-access")["Statement"]
    assert statements[:3] == READ_STATEMENTS
    assert [
        (
            s["Condition"]["StringEquals"]["aws:PrincipalTag/kubernetes-namespace"],
            s["Condition"]["StringEquals"]["aws:PrincipalTag/kubernetes-service-account"],
        )
        for s in statements[3:]
    ] == [key for key, write in accounts.items() if write]
