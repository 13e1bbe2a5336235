"""``gateway-routing-require-load-bound``: prod refuses a gateway that routes a model without its load bound."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferplane.components.serving.annotations import (
    COMPONENT_LABEL,
    GATEWAY,
    GATEWAY_ROUTING,
    AnnotationError,
    gateway_routing_annotation,
    parse_gateway_annotations,
)
from inferplane.components.spec.platform_spec import RoutingSpec
from inferplane.policies.base import UNKNOWN, EnforcementLevel, Resource, Severity
from inferplane.policies.gateway import require_load_bound
from inferplane.policies.pack import policy_named
from inferplane.policies.resource_types import T
from inferplane.tool.analyzer import policy_config_path
from tests.policies.gateways import gateway_with

NAME = "gateway-routing-require-load-bound"
PROD = {"required": True}

BOUNDED = {"llama-70b": RoutingSpec(), "llama-8b": RoutingSpec(policy="least_request", overlap_weight=0.0)}
"""Both models keep the load bound (prod's happy path)."""


def gateway(routing: Any, *, labels: Any = None) -> Resource:
    """A gateway Deployment carrying ``routing`` as the routing annotation (omitted when None)."""
    return gateway_with(GATEWAY_ROUTING, routing, labels=labels)


def test_the_policy_is_registered_mandatory_and_on_only_where_prod_asks() -> None:
    assert policy_named(NAME) is require_load_bound
    assert (require_load_bound.meta.severity, require_load_bound.meta.enforcement) == (
        Severity.HIGH,
        EnforcementLevel.MANDATORY,
    )
    assert require_load_bound.meta.defaults() == {"required": False}
    configured = {env: json.loads(policy_config_path(env).read_text()).get(NAME) for env in ("dev", "staging", "prod")}
    assert configured == {"dev": None, "staging": None, "prod": {"required": True}}


def test_a_gateway_that_keeps_every_bound_passes() -> None:
    assert require_load_bound.check(gateway(gateway_routing_annotation(BOUNDED)), PROD) == []


def test_a_model_routed_without_the_bound_is_reported_by_name() -> None:
    routing = {**BOUNDED, "llama-8b": RoutingSpec(load_bound=False)}
    resource = gateway(gateway_routing_annotation(routing))
    assert require_load_bound.check(resource, PROD) == [
        f"gateway routes llama-8b without a load bound ({GATEWAY_ROUTING}: load_bound false)"
    ]
    # Outside prod (the schema's default) an experiment may turn it off.
    assert require_load_bound.check(resource) == []
    everyone = gateway(gateway_routing_annotation({name: RoutingSpec(load_bound=False) for name in BOUNDED}))
    assert require_load_bound.check(everyone, PROD) == [
        f"gateway routes llama-70b, llama-8b without a load bound ({GATEWAY_ROUTING}: load_bound false)"
    ]


def test_only_gateways_are_judged() -> None:
    unbounded = gateway_routing_annotation({"llama-8b": RoutingSpec(load_bound=False)})
    assert require_load_bound.check(gateway(unbounded, labels={COMPONENT_LABEL: "model-server"}), PROD) == []


@pytest.mark.parametrize(
    "resource",
    [
        gateway(UNKNOWN),
        # Unknown labels may or may not make it a gateway: not judged, even with a bound turned off.
        gateway(gateway_routing_annotation({"llama-8b": RoutingSpec(load_bound=False)}), labels=UNKNOWN),
        Resource(
            type=T.DEPLOYMENT,
            name="gateway",
            urn="urn:gateway",
            props={"metadata": {"name": "gateway", "labels": {COMPONENT_LABEL: GATEWAY}, "annotations": UNKNOWN}},
        ),
    ],
    ids=["annotation", "labels", "annotations"],
)
def test_an_unknown_value_is_not_a_violation(resource: Resource) -> None:
    assert require_load_bound.check(resource, PROD) == []


def test_a_gateway_without_the_annotation_turns_no_bound_off() -> None:
    assert require_load_bound.check(gateway(None), PROD) == []


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("{", "not JSON (Expecting property name enclosed in double quotes)"),
        ('{"llama-8b": {"load_bound": "maybe"}}', "Input should be a valid boolean, unable to interpret input"),
        ('{"llama-8b": {"bound": false}}', "Extra inputs are not permitted"),
    ],
    ids=["not-json", "not-a-boolean", "unknown-field"],
)
def test_a_malformed_routing_annotation_is_reported_naming_the_key(raw: str, problem: str) -> None:
    [message] = require_load_bound.check(gateway(raw), PROD)
    assert message.startswith(f"gateway has a routing annotation that does not parse: {GATEWAY_ROUTING}")
    assert message.endswith(problem)


def test_the_annotation_round_trips_with_sorted_keys() -> None:
    text = gateway_routing_annotation({"llama-8b": BOUNDED["llama-8b"], "llama-70b": BOUNDED["llama-70b"]})
    assert text == (
        '{"llama-70b": {"hold": false, "load_bound": true, "overlap_weight": 8.0, "policy": "prefix_aware"}, '
        '"llama-8b": {"hold": false, "load_bound": true, "overlap_weight": 0.0, "policy": "least_request"}}'
    )
    assert parse_gateway_annotations({GATEWAY_ROUTING: text}).routing == BOUNDED
    with pytest.raises(AnnotationError, match=rf"{GATEWAY_ROUTING}\[llama-8b.overlap_weight\]='.*less than or equal"):
        parse_gateway_annotations({GATEWAY_ROUTING: '{"llama-8b": {"overlap_weight": 17}}'})
