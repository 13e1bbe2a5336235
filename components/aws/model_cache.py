"""The S3 model cache: a private, KMS-encrypted bucket the model servers sync weights and engines from.

Layout (what :mod:`components.serving.vllm_service` and :mod:`components.serving.triton_service` read, from ``uri``):
``<uri><hf org>/<hf name>/`` holds a Hugging Face snapshot, ``<uri>engines/<deployment>/<fingerprint>/`` the
TensorRT-LLM engines Triton's engine-build Job uploads. ``uri`` is ``s3://<bucket>/models/``.

Access is EKS Pod Identity, like the cluster's other pod roles (the cluster has no IAM OIDC provider, so no IRSA):
one IAM role trusted by ``pods.eks.amazonaws.com`` and one ``aws.eks.PodIdentityAssociation`` per model server
ServiceAccount. Every account may list and read the cache prefix; only accounts marked ``write`` may put objects,
and only under ``engines/``. The write grant is narrowed to those accounts with the session tags Pod Identity adds
to every session (``kubernetes-namespace``, ``kubernetes-service-account``;
docs.aws.amazon.com/eks/latest/userguide/pod-id-abac.html), so one role serves readers and writers.

Pods must start after their association exists: the EKS Pod Identity webhook injects the credential environment
when a pod is created, so a pod created earlier has no credentials until it is re-created. ``uri`` therefore
resolves only once every association and both policies exist, and whatever reads it (the model servers' init
containers) depends on them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from inferplane.components.aws import kms_policy
from inferplane.components.aws.iam import service_trust_policy
from inferplane.components.spec.input_errors import InputErrors, raise_input_errors
from inferplane.components.spec.platform_spec import Environment

CACHE_PREFIX = "models"
"""Key prefix of everything the cache holds; ``uri`` ends with it (``s3://<bucket>/models/``)."""

ENGINES_PREFIX = "engines/"
"""Where built TensorRT-LLM engines live inside the model cache (``<cache uri>engines/<deployment>/<fingerprint>/``);
checkpoints live beside them under ``<cache uri><hf org>/<hf name>/``. The only prefix any pod writes."""

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
"""The principal EKS Pod Identity assumes roles as (docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html)."""

NAMESPACE_TAG = "aws:PrincipalTag/kubernetes-namespace"
SERVICE_ACCOUNT_TAG = "aws:PrincipalTag/kubernetes-service-account"
"""Session tags EKS Pod Identity sets on every session it opens (pod-id-abac.html, "session tags")."""

INCOMPLETE_UPLOAD_DAYS = 7
"""An engine upload interrupted mid-way leaves multipart parts that are billed but invisible; they go after a week."""

ACCESS_LOG_DAYS = 365
"""Server access logs of the cache are kept a year (the retention AWS FSBP asks of CloudWatch log groups), then
expire."""

ACCESS_LOG_PREFIX = "model-cache/"
"""Key prefix of the cache's access logs inside the log bucket."""

LOGGING_PRINCIPAL = "logging.s3.amazonaws.com"
"""The S3 server access logging service; with ACLs disabled the target bucket's policy grants it ``s3:PutObject``
(S3 user guide, enable-server-access-logging.html)."""

NONCURRENT_VERSION_DAYS = 30
"""Versioning keeps an overwritten or deleted checkpoint recoverable for a month, then stops paying for it."""

MAX_BUCKET_NAME = 63
AUTONAME_SUFFIX = 8
"""S3 bucket names are at most 63 lowercase letters, digits and hyphens; Pulumi's auto-name appends ``-`` and 7
random characters to the resource name."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_BUCKET_SAFE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class ServiceAccountRef:
    """A Kubernetes ServiceAccount the cache's role is bound to."""

    namespace: str
    """Namespace of the ServiceAccount (a DNS label)."""
    name: str
    """Name of the ServiceAccount (a DNS subdomain)."""
    write: bool = False
    """May put objects under ``engines/`` (Triton's engine-build Job); readers only list and get."""


@dataclass(frozen=True)
class ModelCacheArgs:
    """Inputs of :class:`ModelCache`."""

    cluster_name: pulumi.Input[str]
    """The EKS cluster whose ServiceAccounts are bound to the cache's role."""
    environment: Environment
    """``prod`` protects the bucket and its KMS key from ``pulumi destroy``."""
    service_accounts: Sequence[ServiceAccountRef]
    """Every ServiceAccount whose pods read the cache (one Pod Identity association each); at least one."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Tags on every taggable child."""


@dataclass(frozen=True)
class _CacheBucket:
    """The cache bucket and the children a reader of ``uri`` must wait for besides the pods' identity."""

    bucket: aws.s3.Bucket
    """The cache bucket itself."""
    encryption: aws.s3.BucketServerSideEncryptionConfiguration
    """SSE-KMS with the cache key; an object written before it exists would get S3's default encryption."""
    policy: aws.s3.BucketPolicy
    """The TLS-only bucket policy."""


class ModelCache(pulumi.ComponentResource):
    """An S3 model cache read (and, for engine builders, written) by pods through EKS Pod Identity.

    Children: KMS key ``{name}-key`` (yearly rotation), bucket ``{name}-bucket`` (auto-named) with
    ``{name}-public-access-block`` (all four blocks), ``{name}-ownership`` (``BucketOwnerEnforced``: ACLs off),
    ``{name}-encryption`` (SSE-KMS with the key, S3 Bucket Keys on), ``{name}-versioning``, ``{name}-lifecycle``
    and ``{name}-policy`` (TLS only); its access logs go to ``{name}-logs`` (``{name}-access-logging``), a bucket
    with the same children but SSE-S3 (see :meth:`_access_logs`); IAM role ``{name}-role`` with inline policy
    ``{name}-access``; one ``{name}-{namespace}-{service account}`` Pod Identity association per ServiceAccount. The
    bucket and the key are protected in prod.

    Outputs: ``uri`` (``s3://<bucket>/models/``, known once every association exists), ``bucket_name``,
    ``role_arn``, ``key_arn``.
    """

    uri: pulumi.Output[str]
    bucket_name: pulumi.Output[str]
    role_arn: pulumi.Output[str]
    key_arn: pulumi.Output[str]

    def __init__(self, name: str, args: ModelCacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferplane:index:ModelCache", name, None, opts)
        _validate(name, args)
        tags = dict(args.tags)
        # Deleting either loses every cached checkpoint and engine (the key: makes them unreadable); prod protects.
        stateful = pulumi.ResourceOptions(parent=self, protect=args.environment == "prod")

        role = self._role(name, tags)
        key, account = self._key(name, role, tags, stateful)
        cache = self._bucket(name, key, tags, stateful)
        self._access_logs(name, cache.bucket, account, tags, stateful)
        access, associations = self._pod_access(name, args, role=role, bucket=cache.bucket, key=key, tags=tags)

        self.bucket_name = cache.bucket.bucket
        self.role_arn = role.arn
        self.key_arn = key.arn
        # The ids only carry dependencies: a reader of ``uri`` is created after the pods' identity and permissions.
        ready: list[pulumi.Input[Any]] = [
            access.id,
            cache.policy.id,
            cache.encryption.id,
            *(a.id for a in associations),
        ]
        self.uri = pulumi.Output.all(cache.bucket.bucket, *ready).apply(lambda values: cache_uri(values[0]))
        self.register_outputs(
            {"uri": self.uri, "bucketName": self.bucket_name, "roleArn": self.role_arn, "keyArn": self.key_arn}
        )

    def _role(self, name: str, tags: Mapping[str, str]) -> aws.iam.Role:
        """The one IAM role every bound ServiceAccount's pods assume through EKS Pod Identity."""
        return aws.iam.Role(
            f"{name}-role",
            description="Model servers read the model cache (engine builders also write engines) via EKS Pod Identity",
            assume_role_policy=service_trust_policy(POD_IDENTITY_PRINCIPAL, tag_session=True),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _key(
        self, name: str, role: aws.iam.Role, tags: Mapping[str, str], stateful: pulumi.ResourceOptions
    ) -> tuple[aws.kms.Key, pulumi.Output[str]]:
        """The cache's KMS key, usable only by ``role`` through S3; also returns the account id (the access logs'
        bucket policy names it)."""
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account = aws.get_caller_identity_output(opts=invoke).account_id
        region = aws.get_region_output(opts=invoke).region
        key = aws.kms.Key(
            f"{name}-key",
            description="Encryption of the inferplane model cache (weights and TensorRT-LLM engines)",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            policy=pulumi.Output.all(partition, account, region, role.arn).apply(
                lambda values: cache_key_policy(values[0], values[1], values[2], values[3])
            ),
            tags=tags,
            opts=stateful,
        )
        return key, account

    def _bucket(
        self, name: str, key: aws.kms.Key, tags: Mapping[str, str], stateful: pulumi.ResourceOptions
    ) -> _CacheBucket:
        """The private, versioned bucket, encrypted with ``key`` and reachable over TLS only."""
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(f"{name}-bucket", force_destroy=False, tags=tags, opts=stateful)
        public_access = _private(name, bucket, child)
        encryption = aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=(
                        aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                            sse_algorithm="aws:kms", kms_master_key_id=key.arn
                        )
                    ),
                    # One data key per bucket instead of a KMS call per object: the sync of a 140 GB checkpoint
                    # reads thousands of parts, which would otherwise each cost a Decrypt request.
                    bucket_key_enabled=True,
                )
            ],
            opts=child,
        )
        versioning = _versioned(name, bucket, child)
        _lifecycle(name, bucket, versioning, lifecycle_rule("expire-noncurrent-versions"), child)
        policy = aws.s3.BucketPolicy(
            f"{name}-policy",
            bucket=bucket.id,
            policy=bucket.arn.apply(tls_only_policy),
            # With the public access block in place first, no window exists where a policy could make it public.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[public_access]),
        )
        return _CacheBucket(bucket=bucket, encryption=encryption, policy=policy)

    def _pod_access(
        self,
        name: str,
        args: ModelCacheArgs,
        *,
        role: aws.iam.Role,
        bucket: aws.s3.Bucket,
        key: aws.kms.Key,
        tags: Mapping[str, str],
    ) -> tuple[aws.iam.RolePolicy, list[aws.eks.PodIdentityAssociation]]:
        """The role's permissions on the bucket and key (writes only for ``write`` accounts), and one Pod Identity
        association per ServiceAccount."""
        child = pulumi.ResourceOptions(parent=self)
        writers = [account for account in args.service_accounts if account.write]
        access = aws.iam.RolePolicy(
            f"{name}-access",
            role=role.name,
            policy=pulumi.Output.all(bucket.arn, key.arn).apply(lambda arns: access_policy(arns[0], arns[1], writers)),
            opts=child,
        )
        associations = [
            aws.eks.PodIdentityAssociation(
                f"{name}-{account.namespace}-{account.name}",
                cluster_name=args.cluster_name,
                namespace=account.namespace,
                service_account=account.name,
                role_arn=role.arn,
                tags=tags,
                opts=child,
            )
            for account in args.service_accounts
        ]
        return access, associations

    def _access_logs(
        self,
        name: str,
        bucket: aws.s3.Bucket,
        account: pulumi.Output[str],
        tags: Mapping[str, str],
        stateful: pulumi.ResourceOptions,
    ) -> None:
        """S3 server access logging of the cache (AWS FSBP S3.9) into a private, versioned bucket ``{name}-logs``.

        The log bucket is encrypted with SSE-S3, not the customer managed key Checkov's CKV_AWS_145 asks for: the S3
        user guide ("Enabling Amazon S3 server access logging") says granting the logging service ``s3:PutObject`` is
        not sufficient for an SSE-KMS destination, which must use SSE-S3, or S3 may deliver log objects encrypted with
        a key the account cannot use. It does not log itself (that would log its own log writes forever). Versioning
        keeps a deleted or overwritten log for :data:`NONCURRENT_VERSION_DAYS`; logs expire after
        :data:`ACCESS_LOG_DAYS`.
        """
        child = pulumi.ResourceOptions(parent=self)
        logs = aws.s3.Bucket(f"{name}-logs", force_destroy=False, tags=dict(tags), opts=stateful)
        block = _private(f"{name}-logs", logs, child)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-logs-encryption",
            bucket=logs.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=(
                        aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                            sse_algorithm="AES256"
                        )
                    ),
                )
            ],
            opts=child,
        )
        expire = aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(days=ACCESS_LOG_DAYS)
        versioning = _versioned(f"{name}-logs", logs, child)
        _lifecycle(f"{name}-logs", logs, versioning, lifecycle_rule("expire-access-logs", expiration=expire), child)
        policy = aws.s3.BucketPolicy(
            f"{name}-logs-policy",
            bucket=logs.id,
            policy=pulumi.Output.all(logs.arn, bucket.arn, account).apply(
                lambda values: access_log_bucket_policy(values[0], values[1], values[2])
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[block]),
        )
        aws.s3.BucketLogging(
            f"{name}-access-logging",
            bucket=bucket.id,
            target_bucket=logs.id,
            target_prefix=ACCESS_LOG_PREFIX,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )


def _private(prefix: str, bucket: aws.s3.Bucket, opts: pulumi.ResourceOptions) -> aws.s3.BucketPublicAccessBlock:
    """All four public-access blocks (``{prefix}-public-access-block``) and ACLs off (``{prefix}-ownership``,
    ``BucketOwnerEnforced``) for ``bucket``; returns the block, which bucket policies wait for."""
    block = aws.s3.BucketPublicAccessBlock(
        f"{prefix}-public-access-block",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=opts,
    )
    aws.s3.BucketOwnershipControls(
        f"{prefix}-ownership",
        bucket=bucket.id,
        rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
        opts=opts,
    )
    return block


def _versioned(prefix: str, bucket: aws.s3.Bucket, opts: pulumi.ResourceOptions) -> aws.s3.BucketVersioning:
    """Versioning on ``bucket`` (``{prefix}-versioning``): an overwritten or deleted object stays recoverable."""
    return aws.s3.BucketVersioning(
        f"{prefix}-versioning",
        bucket=bucket.id,
        versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
        opts=opts,
    )


def lifecycle_rule(
    rule_id: str, *, expiration: aws.s3.BucketLifecycleConfigurationRuleExpirationArgs | None = None
) -> aws.s3.BucketLifecycleConfigurationRuleArgs:
    """A rule over the whole bucket that, whatever else it does, aborts multipart uploads still incomplete after
    :data:`INCOMPLETE_UPLOAD_DAYS` (every rule does: Checkov CKV_AWS_300) and deletes noncurrent versions after
    :data:`NONCURRENT_VERSION_DAYS` (both buckets are versioned); ``expiration`` ends current objects too."""
    return aws.s3.BucketLifecycleConfigurationRuleArgs(
        id=rule_id,
        status="Enabled",
        filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
        abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
            days_after_initiation=INCOMPLETE_UPLOAD_DAYS
        ),
        noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
            noncurrent_days=NONCURRENT_VERSION_DAYS
        ),
        expiration=expiration,
    )


def _lifecycle(
    prefix: str,
    bucket: aws.s3.Bucket,
    versioning: aws.s3.BucketVersioning,
    rule: aws.s3.BucketLifecycleConfigurationRuleArgs,
    opts: pulumi.ResourceOptions,
) -> aws.s3.BucketLifecycleConfiguration:
    """``{prefix}-lifecycle`` with ``rule``, created after versioning: S3 refuses rules about versions before it."""
    return aws.s3.BucketLifecycleConfiguration(
        f"{prefix}-lifecycle",
        bucket=bucket.id,
        rules=[rule],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[versioning])),
    )


def cache_key_policy(partition: str, account_id: str, region: str, role_arn: str) -> str:
    """The cache key's policy: the account administers it; only the cache role uses it, and only through S3."""
    return kms_policy.key_policy(
        [
            kms_policy.administration_statement(partition, account_id),
            kms_policy.role_usage_statement(
                "CacheRoleThroughS3",
                [role_arn],
                ["kms:Decrypt", "kms:GenerateDataKey"],
                via_service=f"s3.{region}.amazonaws.com",
            ),
        ]
    )


def access_log_bucket_policy(log_bucket_arn: str, source_bucket_arn: str, account_id: str) -> str:
    """TLS only, and S3 server access logging may write the source bucket's logs under :data:`ACCESS_LOG_PREFIX`
    (conditions ``aws:SourceArn`` and ``aws:SourceAccount`` keep other buckets from logging here)."""
    tls: dict[str, Any] = json.loads(tls_only_policy(log_bucket_arn))["Statement"][0]
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                tls,
                {
                    "Sid": "S3ServerAccessLogs",
                    "Effect": "Allow",
                    "Principal": {"Service": LOGGING_PRINCIPAL},
                    "Action": "s3:PutObject",
                    "Resource": f"{log_bucket_arn}/{ACCESS_LOG_PREFIX}*",
                    "Condition": {
                        "ArnLike": {"aws:SourceArn": source_bucket_arn},
                        "StringEquals": {"aws:SourceAccount": account_id},
                    },
                },
            ],
        }
    )


def cache_uri(bucket: str) -> str:
    """``s3://<bucket>/models/``: the servers append ``<hf org>/<hf name>/`` or ``engines/...`` to it."""
    return f"s3://{bucket}/{CACHE_PREFIX}/"


def tls_only_policy(bucket_arn: str) -> str:
    """Bucket policy refusing every request not made over TLS (AWS Security Hub S3.5)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [bucket_arn, f"{bucket_arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )


def access_policy(bucket_arn: str, key_arn: str, writers: Sequence[ServiceAccountRef]) -> str:
    """What ``aws s3 sync`` needs and no more.

    Download (every account): ``s3:ListBucket`` within the cache prefix (sync lists the source to compare),
    ``s3:GetObject`` on it, ``kms:Decrypt`` on the key (SSE-KMS objects). Upload (writers only, one statement each,
    matched on Pod Identity's session tags): ``s3:PutObject`` (which also covers the multipart upload calls) and
    ``s3:AbortMultipartUpload`` under ``engines/``, ``kms:GenerateDataKey`` for new objects.
    """
    engines = f"{bucket_arn}/{CACHE_PREFIX}/{ENGINES_PREFIX}*"
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ListCache",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": bucket_arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{CACHE_PREFIX}/*"]}},
        },
        {"Sid": "ReadCache", "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"{bucket_arn}/{CACHE_PREFIX}/*"},
        {"Sid": "DecryptCache", "Effect": "Allow", "Action": "kms:Decrypt", "Resource": key_arn},
    ]
    for index, writer in enumerate(writers):
        statements.append(
            {
                "Sid": f"WriteEngines{index}",
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "kms:GenerateDataKey"],
                "Resource": [engines, key_arn],
                "Condition": {"StringEquals": {NAMESPACE_TAG: writer.namespace, SERVICE_ACCOUNT_TAG: writer.name}},
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def _validate(name: str, args: ModelCacheArgs) -> None:
    """Refuse inputs that cannot work, naming the field; nothing is created when any check fails."""
    errors: InputErrors = []
    if not _BUCKET_SAFE.match(name) or len(f"{name}-bucket") + AUTONAME_SUFFIX > MAX_BUCKET_NAME:
        longest = MAX_BUCKET_NAME - AUTONAME_SUFFIX - len("-bucket")
        errors.append(
            ("name", f"{name!r} must be lowercase letters, digits and hyphens, at most {longest} long (S3 bucket name)")
        )
    if not args.service_accounts:
        errors.append(("service_accounts", "give at least one ServiceAccount that reads the cache"))
    seen: dict[tuple[str, str], int] = {}
    children: dict[str, int] = {}
    for index, account in enumerate(args.service_accounts):
        at = f"service_accounts[{index}]"
        if not _DNS_LABEL.match(account.namespace) or len(account.namespace) > 63:
            errors.append((f"{at}.namespace", f"{account.namespace!r} is not a Kubernetes namespace name"))
        if not _DNS_SUBDOMAIN.match(account.name) or len(account.name) > 253:
            errors.append((f"{at}.name", f"{account.name!r} is not a Kubernetes ServiceAccount name"))
        key = (account.namespace, account.name)
        child = f"{account.namespace}-{account.name}"
        if key in seen:
            errors.append((at, f"{account.namespace}/{account.name} is already service_accounts[{seen[key]}]"))
        elif child in children:
            errors.append((at, f"its association name {name}-{child} clashes with service_accounts[{children[child]}]"))
        seen.setdefault(key, index)
        children.setdefault(child, index)
    raise_input_errors("The input properties for the model cache are invalid.", errors)
