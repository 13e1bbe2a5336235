"""``gateway-providers-require-tenant-consent``: prod refuses a hosted provider without a list of consenting tenants."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferplane.components.serving.annotations import (
    GATEWAY_PROVIDERS,
    GatewayProvider,
    gateway_providers_annotation,
    parse_gateway_annotations,
)
from inferplane.policies.base import UNKNOWN, EnforcementLevel, Resource, Severity
from inferplane.policies.gateway import require_provider_consent
from inferplane.policies.pack import policy_named
from inferplane.tool.analyzer import policy_config_path
from tests.policies.gateways import gateway_with

NAME = "gateway-providers-require-tenant-consent"
PROD = {"required": True}
CONSENTED = {"fireworks": GatewayProvider(host="api.fireworks.ai", tiers=("premium",), tenants=("assistant",))}


def gateway(providers: Any, *, labels: Any = None) -> Resource:
    """A gateway Deployment carrying ``providers`` as the providers annotation (omitted when None)."""
    return gateway_with(GATEWAY_PROVIDERS, providers, labels=labels)


def test_the_policy_is_registered_mandatory_and_on_only_where_prod_asks() -> None:
    assert policy_named(NAME) is require_provider_consent
    meta = require_provider_consent.meta
    assert (meta.severity, meta.enforcement) == (Severity.HIGH, EnforcementLevel.MANDATORY)
    assert meta.defaults() == {"required": False}
    configured = {env: json.loads(policy_config_path(env).read_text()).get(NAME) for env in ("dev", "staging", "prod")}
    assert configured == {"dev": None, "staging": None, "prod": {"required": True}}


def test_a_provider_with_consenting_tenants_passes() -> None:
    assert require_provider_consent.check(gateway(gateway_providers_annotation(CONSENTED)), PROD) == []


def test_a_provider_without_a_tenant_list_is_reported_by_name_in_prod_only() -> None:
    providers = {**CONSENTED, "openai": GatewayProvider(host="api.openai.com", tiers=("premium",), tenants=())}
    resource = gateway(gateway_providers_annotation(providers))
    assert require_provider_consent.check(resource, PROD) == [
        f"gateway may send prompts to hosted provider openai with no tenant list ({GATEWAY_PROVIDERS})"
    ]
    assert require_provider_consent.check(resource) == []


@pytest.mark.parametrize(
    "resource",
    [gateway(None), gateway(UNKNOWN), gateway(gateway_providers_annotation({"x": CONSENTED["fireworks"]}), labels={})],
    ids=["no-provider", "unknown", "not-a-gateway"],
)
def test_nothing_to_judge_is_no_violation(resource: Resource) -> None:
    assert require_provider_consent.check(resource, PROD) == []


def test_a_malformed_annotation_is_reported_naming_the_key() -> None:
    [message] = require_provider_consent.check(gateway('{"x": {"host": "h"}}'), PROD)
    assert message.startswith(f"gateway has a providers annotation that does not parse: {GATEWAY_PROVIDERS}")


def test_the_annotation_round_trips() -> None:
    text = gateway_providers_annotation(CONSENTED)
    assert parse_gateway_annotations({GATEWAY_PROVIDERS: text}).providers == CONSENTED
