"""The gateway: callers authenticate, limits answer 429, every model is reachable, no context cap beyond the engine.

The gateway Deployment (``app.kubernetes.io/component: gateway``) carries the gateway annotations of
:mod:`components.serving.annotations` (``inferplane.io/gateway-auth``, ``-requests-per-minute``, ``-tokens-per-minute``,
``-routes``, ``-routing``), written by :class:`components.gateway.component.Gateway` from the same rendered
configuration its pods load. Model servers are recognised as in :mod:`policies.serving`; their served name is the
``inferplane.io/model`` label and their context the ``--max-model-len`` they run with (else the
``inferplane.io/max-model-len`` annotation).

The gateway's replica floor is the stack-wide ``kubernetes-deployment-configure-min-replicas`` (its ``roles`` include
``gateway``; prod's config asks for 2).
"""

from __future__ import annotations

from typing import Any

from inferplane.components.gateway.renderer import REDIS_URL_DIR, REDIS_URL_ENV
from inferplane.components.serving.annotations import (
    COMPONENT_LABEL,
    GATEWAY,
    GATEWAY_AUTH,
    GATEWAY_PROVIDERS,
    GATEWAY_REQUESTS_PER_MINUTE,
    GATEWAY_ROUTES,
    GATEWAY_ROUTING,
    GATEWAY_TOKENS_PER_MINUTE,
    SERVED_MODEL_LABEL,
    AnnotationError,
    GatewayAnnotations,
    GatewayRoute,
    parse_gateway_annotations,
)
from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    StackReport,
    _Unknown,
    of_type,
    resource_policy,
    stack_policy,
)
from inferplane.policies.resource_types import T
from inferplane.policies.serving import engine_flags_known, is_model_server, serving_settings
from inferplane.policies.workloads import (
    containers,
    containers_known,
    object_annotations,
    object_label,
    object_labels,
    workload_name,
)

_TYPES = {T.DEPLOYMENT}


def is_gateway(resource: Resource) -> bool:
    """A Deployment labelled ``app.kubernetes.io/component: gateway``."""
    return resource.type in _TYPES and object_labels(resource).get(COMPONENT_LABEL) == GATEWAY


def _annotations(resource: Resource) -> dict[str, Any] | _Unknown:
    """The object's (and its pod template's) annotations; UNKNOWN while either map is unknown."""
    for path in (("metadata", "annotations"), ("spec", "template", "metadata", "annotations")):
        if resource.get(*path) is UNKNOWN:
            unknown: _Unknown = UNKNOWN
            return unknown
    annotations: dict[str, Any] = object_annotations(resource)
    return annotations


def _parsed(resource: Resource, key: str, what: str, report: Report) -> GatewayAnnotations | None:
    """The gateway's ``key`` annotation read back; None where it is unknown (preview), absent, or malformed (then
    reported, naming ``what`` it holds)."""
    annotations = _annotations(resource)
    raw = UNKNOWN if isinstance(annotations, _Unknown) else annotations.get(key)
    if raw is UNKNOWN or raw is None:
        return None
    try:
        return parse_gateway_annotations({key: raw})
    except AnnotationError as exc:
        report(f"{workload_name(resource)} has a {what} annotation that does not parse: {exc}")
        return None


def _routes(resource: Resource) -> dict[str, GatewayRoute] | _Unknown | None:
    """The gateway's route table: UNKNOWN while unknown (preview), None when absent or malformed."""
    annotations = _annotations(resource)
    raw = UNKNOWN if isinstance(annotations, _Unknown) else annotations.get(GATEWAY_ROUTES)
    if raw is UNKNOWN:
        return UNKNOWN
    try:
        return parse_gateway_annotations({GATEWAY_ROUTES: raw}).routes
    except AnnotationError:
        return None


@resource_policy(
    name="gateway-deployment-require-authentication",
    description=(
        "The gateway authenticates every caller (API keys or OIDC): an open endpoint in front of GPUs is free "
        "compute for anyone who finds it, and no rate or token limit can be attributed to a tenant."
    ),
    severity=Severity.CRITICAL,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={
        "required": {
            "type": "boolean",
            "default": True,
            "description": "Whether the gateway must authenticate callers.",
        }
    },
    remediation="Set gateway.auth to api_key (keys generated at deploy, one per tenant) or oidc.",
)
def require_authentication(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: OWASP API Security Top 10 (API2 broken authentication); Envoy api_key_auth."""
    if not is_gateway(resource) or not config["required"]:
        return
    annotations = _annotations(resource)
    if isinstance(annotations, _Unknown):
        return
    auth = annotations.get(GATEWAY_AUTH)
    if auth is UNKNOWN:
        return
    if auth is None:
        report(f"{workload_name(resource)} does not say how callers authenticate ({GATEWAY_AUTH} is absent)")
    elif auth == "none":
        report(f"{workload_name(resource)} admits unauthenticated callers ({GATEWAY_AUTH}=none)")


@resource_policy(
    name="gateway-deployment-require-rate-limits",
    description=(
        "Every tenant has a requests-per-minute limit and a tokens-per-minute budget, held in a Redis/Valkey all "
        "gateway replicas share: without them one client's loop fills every GPU's batch and the others get timeouts "
        "instead of a 429 they can back off from, and a budget each replica keeps alone lets a client spend it once "
        "per replica."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={
        "required": {
            "type": "boolean",
            "default": False,
            "description": "Whether request and token limits are required.",
        }
    },
    remediation=(
        "Give every gateway tenant requests_per_minute and tokens_per_minute, and its cluster a Redis-protocol store "
        "(EKS: cache.enabled; GKE: the Memorystore the platform declares) whose URL reaches the processor."
    ),
)
def require_rate_limits(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: OWASP API Security Top 10 (API4 unrestricted resource consumption); Envoy local_ratelimit.

    Shared budgets: the processor container gets the Redis URL (:func:`_shares_budgets`); without it the processor
    fails open on budgets.
    """
    if not is_gateway(resource) or not config["required"]:
        return
    annotations = _annotations(resource)
    if isinstance(annotations, _Unknown):
        return
    for key, what in ((GATEWAY_REQUESTS_PER_MINUTE, "requests"), (GATEWAY_TOKENS_PER_MINUTE, "tokens")):
        value = annotations.get(key)
        if value is UNKNOWN:
            continue
        if value is None:
            report(f"{workload_name(resource)} does not limit {what} per minute ({key} is absent)")
    shared = _shares_budgets(resource)
    if shared is False:
        report(
            f"{workload_name(resource)} keeps its token budgets per replica: no container of it gets "
            f"the Redis URL at {REDIS_URL_DIR} (the shared Redis/Valkey)"
        )


def _shares_budgets(resource: Resource) -> bool | None:
    """Whether a container gets the Redis URL: the Secret mounted at
    :data:`~inferplane.components.gateway.renderer.REDIS_URL_DIR` (or, from a program of its own, the variable
    :data:`~inferplane.components.gateway.renderer.REDIS_URL_ENV`); None while a container, its mounts or its
    environment are unknown (any container may be the processor that gets it)."""
    if not containers_known(resource, init=False):
        return None
    unknown = False
    for _, container in containers(resource, init=False):
        env, mounts = container.get("env"), container.get("volumeMounts")
        if env is UNKNOWN or mounts is UNKNOWN:
            return None
        names = [v.get("name") if isinstance(v, dict) else v for v in (env if isinstance(env, list) else [])]
        paths = [m.get("mountPath") if isinstance(m, dict) else m for m in (mounts if isinstance(mounts, list) else [])]
        if REDIS_URL_ENV in names or REDIS_URL_DIR in paths:
            return True
        unknown = unknown or UNKNOWN in names or UNKNOWN in paths  # an entry not known yet may be the one
    return None if unknown else False


def _served_name(server: Resource) -> str | None:
    name = object_labels(server).get(SERVED_MODEL_LABEL)
    return name if isinstance(name, str) else None


@stack_policy(
    name="gateway-models-require-tier-route",
    description=(
        "Every model server is reachable through at least one gateway tier: a model no tier routes to burns its "
        "GPUs for nobody, and a model reached around the gateway escapes authentication and limits."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    remediation=(
        "Give the model a routing_tier, or name it in gateway.tiers (a primary, or a fallback on its primaries' "
        "cluster); render the gateway from the same spec as the model servers."
    ),
)
def require_model_routes(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchor: the issue's design (every client request enters through the gateway).

    A route's tiers are the tiers the gateway's processor admits requests for the model through
    (:func:`components.gateway.component.policy_annotations`). Each cluster's gateway routes only to the models on its
    own cluster, so a route found on any gateway is a real way in."""
    reachable: set[str] = set()
    for gateway in of_type(resources, T.DEPLOYMENT):
        if object_label(gateway, COMPONENT_LABEL) is UNKNOWN:
            return  # an unknown role (or labels map) may be a gateway's
        if not is_gateway(gateway):
            continue
        routes = _routes(gateway)
        if isinstance(routes, _Unknown):
            return  # an unknown route table may route to anything
        if routes is not None:
            reachable |= {name for name, route in routes.items() if route.tiers}
    for server in of_type(resources, T.DEPLOYMENT, T.STATEFUL_SET):
        if not is_model_server(server):
            continue
        name = _served_name(server)
        if name is not None and name not in reachable:
            report(f"{workload_name(server)} (model {name}) is reachable through no gateway tier", server.urn)


@stack_policy(
    name="gateway-context-limit-max-model-len",
    description=(
        "The gateway's context cap for a model (prompt + max_tokens) never exceeds the max-model-len its engine "
        "runs with: a request the gateway admits must not be one the engine rejects or truncates after it has "
        "been counted, queued and billed."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    remediation="Render the gateway from the same sizing as the model servers (components.gateway.renderer).",
)
def limit_context(resources: list[Resource], config: Config, report: StackReport) -> None:
    """Anchor: vLLM ``--max-model-len`` (requests beyond it are refused with 400 by the engine)."""
    engines: dict[str, tuple[Resource, int]] = {}
    for server in of_type(resources, T.DEPLOYMENT, T.STATEFUL_SET):
        if not is_model_server(server) or not engine_flags_known(server):
            continue  # an unknown token may be the --max-model-len the annotation's fallback would misstate
        name = _served_name(server)
        try:
            length = serving_settings(server).max_model_len
        except AnnotationError:
            continue  # malformed serving annotations are reported by the serving policies
        if name is not None and length is not None:
            engines[name] = (server, length)
    for gateway in of_type(resources, T.DEPLOYMENT):
        if not is_gateway(gateway):
            continue
        routes = _routes(gateway)
        if not isinstance(routes, dict):
            continue
        for model, route in sorted(routes.items()):
            if model not in engines:
                continue
            server, length = engines[model]
            if route.max_context > length:
                report(
                    f"{workload_name(gateway)} admits {route.max_context} tokens for {model}, but "
                    f"{workload_name(server)} runs with max-model-len {length}",
                    gateway.urn,
                )


@resource_policy(
    name="gateway-routing-require-load-bound",
    description=(
        "The gateway never sends a model's request to a replica already running its max_num_seqs: prefix affinity "
        "without that bound piles requests onto the replicas holding the hot prefixes, which preempt and queue while "
        "the others idle (llm-d measured about 55% of requests succeeding with prefix-only scoring, 100% with prefix "
        "+ load)."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={
        "required": {
            "type": "boolean",
            "default": False,
            "description": "Whether every model's gateway routing must keep its load bound.",
        }
    },
    remediation="Drop load_bound: false from gateway.routing and from the tiers' and models' routing.",
)
def require_load_bound(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: llm-d "Intelligent Inference Scheduling" (llm-d/llm-d.github.io
    blog/2025-09-03_intelligent-inference-scheduling-with-llm-d.md: prefix-only "succeeding in only ~55% of
    requests", prefix + load 100%).

    Judged by the :data:`~inferplane.components.serving.annotations.GATEWAY_ROUTING` annotation; a gateway without it
    turns no model's bound off (the spec's default keeps it on)."""
    if not is_gateway(resource) or not config["required"]:
        return
    parsed = _parsed(resource, GATEWAY_ROUTING, "routing", report)
    routing = (parsed.routing if parsed is not None else None) or {}
    unbounded = sorted(name for name, spec in routing.items() if not spec.load_bound)
    if unbounded:
        report(
            f"{workload_name(resource)} routes {', '.join(unbounded)} without a load bound "
            f"({GATEWAY_ROUTING}: load_bound false)"
        )


@resource_policy(
    name="gateway-providers-require-tenant-consent",
    description=(
        "A hosted provider receives prompts only from tenants it lists: prompts leave the VPC by each tenant's "
        "consent, and a provider with no tenant list is refused rather than read as 'nobody' or 'everybody'."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=_TYPES,
    config={
        "required": {
            "type": "boolean",
            "default": False,
            "description": "Whether every hosted provider must name the tenants whose prompts may reach it.",
        }
    },
    remediation="List the consenting tenants under gateway.providers[].tenants, or remove the provider.",
)
def require_provider_consent(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: vLLM Semantic Router's goals ("authorization, privacy, data residency ... eliminates invalid paths
    first", ``overview/goals.md``); LiteLLM's per-key eligibility (tag routing with
    ``reject_clientside_metadata_tags``). Judged by the
    :data:`~inferplane.components.serving.annotations.GATEWAY_PROVIDERS` annotation; a gateway without one sends
    nothing out."""
    if not is_gateway(resource) or not config["required"]:
        return
    parsed = _parsed(resource, GATEWAY_PROVIDERS, "providers", report)
    providers = (parsed.providers if parsed is not None else None) or {}
    unlisted = sorted(name for name, provider in providers.items() if not provider.tenants)
    if unlisted:
        report(
            f"{workload_name(resource)} may send prompts to hosted provider {', '.join(unlisted)} with no tenant "
            f"list ({GATEWAY_PROVIDERS})"
        )


POLICIES: list[AnyPolicy] = [
    require_authentication,
    require_rate_limits,
    require_model_routes,
    limit_context,
    require_load_bound,
    require_provider_consent,
]
