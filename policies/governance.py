"""Tags and protection: who pays for a resource, and what a careless ``pulumi destroy`` must not delete."""

from __future__ import annotations

from inferplane.policies.base import (
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    as_dict,
    known,
    resource_policy,
)
from inferplane.policies.resource_types import STATEFUL, TAGGABLE


@resource_policy(
    name="aws-resource-require-tags",
    description=(
        "Every taggable AWS resource must carry the cost-allocation tags: GPU spend has to be attributable to a "
        "team and cost center, and untagged resources are invisible to the cost reports."
    ),
    severity=Severity.LOW,
    enforcement=EnforcementLevel.ADVISORY,
    types=TAGGABLE,
    config={
        "requiredTags": {
            "type": "array",
            "items": {"type": "string"},
            "default": ["team", "cost-center"],
            "description": "Tag keys every taggable resource must carry (resource tags or provider defaultTags).",
        }
    },
    remediation="Set the stack's tags block; components pass it to every taggable child.",
)
def required_tags(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: Pulumi Best Practices resource-tagging; awsguard."""
    tags = resource.get("tags")
    default_tags = resource.provider_props.get("defaultTags")
    if not (known(tags) and known(default_tags)):
        return
    defaults = as_dict(as_dict(default_tags).get("tags"))
    present = set(as_dict(tags)) | set(defaults)
    missing = [key for key in config["requiredTags"] if key not in present]
    if missing:
        report(f"tags lack {', '.join(missing)}")


@resource_policy(
    name="pulumi-resource-require-protect",
    description=(
        "Stateful resources (the cache, KMS keys, buckets, volumes) must be protected where the environment says "
        "so: deleting a KMS key makes everything it encrypted unreadable, and a deleted cache stampedes the GPUs."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=STATEFUL,
    config={
        "requireProtect": {
            "type": "boolean",
            "default": False,
            "description": "Require the protect resource option on stateful resources.",
        }
    },
    remediation="Pass ResourceOptions(protect=True) for stateful resources in this environment.",
)
def require_protect(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: Pulumi resource option `protect`."""
    if config["requireProtect"] and not resource.protect:
        report("the protect resource option is not set")


POLICIES: list[AnyPolicy] = [required_tags, require_protect]
