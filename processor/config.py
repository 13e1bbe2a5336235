"""The processor's configuration: the contract between the renderer and the processor.

:func:`inferplane.components.gateway.renderer.render_gateway` writes it as JSON (``processor_json``) into a ConfigMap;
the processor reads it at start (:meth:`ProcessorConfig.load`). Only pydantic here: the processor image installs
nothing of inferplane's infrastructure code. Secrets never appear in it: the Redis URL (which may carry a password)
comes from the environment variable named by :attr:`ProcessorConfig.redis_url_env`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inferplane.processor.cache.config import CacheConfig, EmbedderConfig
from inferplane.processor.cache.request import CACHE_HEADER

ATTRIBUTES_NAMESPACE = "envoy.filters.http.ext_proc"
"""Key of ``ProcessingRequest.attributes`` under which Envoy's ext_proc filter sends the request attributes."""
PATH_ATTRIBUTE = "request.path"
METHOD_ATTRIBUTE = "request.method"
STATUS_ATTRIBUTE = "response.code"
"""The response attribute the observing filter sends with a response's first chunk: an error's body is not scanned
for usage."""
METADATA_NAMESPACE = "inferplane"
"""Dynamic metadata namespace the gateway's filters share: ``model`` (json_to_metadata, routing) and what the
processor reports back (``cache_result``); Envoy accepts the processor's metadata in this namespace only."""
ROUTE_METADATA_KEY = "route"
"""A difficulty-routed tier's decision on a forwarded request (``strong``, ``cheap`` or ``unscored``); the model
routes echo it as the response's ``x-inferplane-route``."""
ROUTE_HEADER = "x-inferplane-route"
"""Response header: which of a difficulty-routed tier's models the prompt was sent to, and why (see
:data:`ROUTE_METADATA_KEY`)."""
PROVIDER_METADATA_KEY = "provider"
"""The hosted provider the processor hands a request to (its name): the provider's route matches on it, so only the
processor (never a client, who cannot set dynamic metadata) sends a request out of the VPC."""
CACHE_RESULT_METADATA_KEY = "cache_result"
"""The response cache's verdict on a forwarded request (``miss`` or ``bypass``); the model routes echo it as the
response's ``x-inferplane-cache`` (response headers do not pass through the processor)."""

SETTLE_METADATA_NAMESPACE = "inferplane.settle"
"""Dynamic metadata namespace in which the placing ext_proc filter hands a forwarded request's settlement (tenant,
tier, model, reserved tokens, provider, held cache lookup) on (:mod:`inferplane.processor.settlement`): to Envoy's
access log entry for the processor, which settles it, and to the observing filter that stores a cacheable answer."""
SETTLE_TENANT_KEY = "tenant"
"""The settlement's tenant: every settlement has one, so Envoy's access log sends the entries that carry it."""
SETTLE_CACHE_KEY = "cache"
"""The settlement's held cache lookup token: non-empty for a cacheable miss, whose route turns the observing filter
on."""
USAGE_METADATA_NAMESPACE = "inferplane.usage"
"""Dynamic metadata namespace in which the gateway's Lua filter (the renderer's ``USAGE_FILTER``) records what it
read of a settled response as it streamed through: :data:`USAGE_PROMPT_KEY` and :data:`USAGE_COMPLETION_KEY` (the
response's ``usage``), :data:`USAGE_STREAM_KEY` (an event stream) and :data:`USAGE_ENDED_KEY` (its last byte
passed)."""
USAGE_PROMPT_KEY = "prompt"
USAGE_COMPLETION_KEY = "completion"
USAGE_STREAM_KEY = "stream"
USAGE_ENDED_KEY = "ended"
EVENT_STREAM_STARTS = ("data:", "event", ": ", "id: ")
"""How an event stream's body starts (a JSON body starts with "{"): response headers reach neither the processor nor
the usage filter's reading of the body, so the body says which it is."""
SETTLE_LOG_NAME = "inferplane.settle"
"""The ``log_name`` of Envoy's gRPC access log that carries each settled request's entry to the processor."""


LB_METADATA_NAMESPACE = "envoy.lb"
DESTINATION_ENDPOINT_KEY = "x-gateway-destination-endpoint"
"""Where the processor puts its pick (``ip:port``, then the replicas a retry may take, comma-separated) as dynamic
metadata, and Envoy's ``override_host`` load-balancing policy reads it: the names of the Gateway API Inference
Extension's endpoint-picker protocol (GIE ``docs/proposals/004-endpoint-picker-protocol``). Envoy takes it from
metadata only, never from a client's header of that name (the gateway removes one), skips a host it does not know,
and falls back to least-request when none is left."""


def header_attribute(name: str) -> str:
    """The Envoy attribute (a CEL expression) that carries one request header to the processor."""
    return f"request.headers['{name}']"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricSelector(_Config):
    """One series of an engine's Prometheus text: its name and the label values a sample must carry."""

    name: str = Field(description="Series name as exposed (e.g. ``vllm:num_requests_running``).")
    labels: tuple[tuple[str, str], ...] = Field(
        default=(), description="``(label, value)`` pairs a sample must carry (e.g. TensorRT-LLM's ``request_type``)."
    )


class LoadSeries(_Config):
    """The engine series the router reads from each replica's ``/metrics`` (the engine's own view of its load)."""

    running: MetricSelector = Field(description="Sequences in the running batch.")
    waiting: MetricSelector = Field(description="Requests queued in the engine's scheduler.")
    kv_usage: MetricSelector | None = Field(
        default=None, description="Share (0-1) of the KV cache in use, when the engine reports one."
    )


class RoutingConfig(_Config):
    """How the processor picks a replica for each request of one model (``gateway.routing``, sized)."""

    policy: Literal["prefix_aware", "least_request"] = Field(
        description="``prefix_aware``: the replica likely to hold the prompt's prefix, bounded by load; "
        "``least_request``: the least loaded replica."
    )
    overlap_weight: float = Field(
        ge=0,
        description="Cost of one prompt block to prefill against one block of decode load (NVIDIA Dynamo's "
        "``overlap_score_weight``): cost = overlap_weight x prefill blocks + decode blocks.",
    )
    load_bound: bool = Field(description="Never pick a replica running its ``max_num_seqs`` (off: affinity wins).")
    prefill_seconds_per_block: float = Field(
        ge=0,
        description="What one replica takes to prefill one block of a prompt, from sizing. A request whose best "
        "replica is full waits for it at most as long as the prefill another replica would repeat (the blocks it "
        "lacks x this), then spills; 0 spills at once.",
    )
    block_tokens: int = Field(gt=0, description="Tokens per prefix block: the engine's KV-cache block size.")
    index_blocks: int = Field(
        gt=0, description="Blocks the prefix index remembers per replica (the replica's KV pool, in blocks)."
    )
    max_prefix_blocks: int = Field(
        gt=0,
        description="Leading blocks of a prompt hashed at most: the model's context in blocks, so every full block "
        "of an admitted prompt (a bound on the estimate from bytes when the model has no tokenizer).",
    )
    scrape_interval_seconds: float = Field(
        default=0.5, gt=0, le=10, description="How often each replica's ``/metrics`` is read (load and readiness)."
    )
    dns_refresh_seconds: float = Field(
        default=5.0, gt=0, le=60, description="How often the endpoints' names are resolved (Envoy's DNS refresh)."
    )
    load: LoadSeries = Field(description="Where the engine reports its load.")


class PrefillConfig(_Config):
    """Where a disaggregated model's prompts are computed before its decode replica generates (vLLM's KV transfer)."""

    model: str = Field(
        description="The ``role: prefill`` model whose replicas compute this model's prompts and keep their KV cache "
        "for the decode replica to pull."
    )
    min_uncached_tokens: int = Field(
        default=256,
        ge=0,
        description="Prompt tokens the chosen decode replica must lack for the prefill step to be taken (llm-d's "
        "prefix-based decider's ``nonCachedTokens``): a shorter remainder is computed where it lands, as moving its "
        "KV cache costs more than computing it.",
    )
    timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest wait for a prefill replica's answer; past it the decode replica computes the prompt.",
    )


class ModelConfig(_Config):
    """One served model as the processor sees it: its replicas, how long its context is, how much each may take."""

    name: str = Field(description="Deployment name: the served model name clients ask for and Envoy routes on.")
    tier: str = Field(description="The gateway tier the model belongs to (its ``routing_tier``).")
    engine: Literal["vllm", "triton", "sglang"] = Field(
        description="The serving engine (which series report its load)."
    )
    endpoints: tuple[str, ...] = Field(
        min_length=1,
        description="``host:port`` names of the model's replicas, each resolved as Envoy resolves it: in a "
        "cluster the headless Service (one address per ready pod); locally a list of addresses.",
    )
    metrics_path: str = Field(default="/metrics", description="Path of each replica's Prometheus text.")
    max_model_len: int = Field(gt=0, description="The engine's context length (prompt + output), from sizing.")
    max_num_seqs: int = Field(gt=0, description="Sequences one replica runs at once, from sizing.")
    fallback_share: int = Field(
        gt=0,
        description="Requests one processor worker may put on one replica while the shared slot store (Redis) is "
        "down: max_num_seqs split over the most gateway workers that may run, so together they stay within it (at "
        "least 1, so a model stays reachable: with fewer sequences than workers an outage may exceed it).",
    )
    queue_max: int = Field(ge=0, description="Requests waiting for an in-flight slot beyond which 429 answers.")
    queue_timeout_seconds: float = Field(gt=0, description="Longest wait for a slot before 429 answers.")
    scale_to_zero: bool = Field(description="The model may have no replica; requests then wait for a cold start.")
    cold_start_hold_seconds: float = Field(
        gt=0, description="How long a request waits for a replica to become ready before 503 answers."
    )
    tokenizer_path: str | None = Field(
        default=None, description="``tokenizer.json`` of the served model; without it prompt tokens are estimated."
    )
    longer_context: tuple[str, ...] = Field(
        default=(), description="Models of the same tier with a longer context, shortest first (context reroute)."
    )
    routing: RoutingConfig = Field(description="How a replica is picked per request.")
    role: Literal["serve", "prefill"] = Field(
        default="serve",
        description="``serve``: a model clients ask for; ``prefill``: the prefill role of a disaggregated model, "
        "which only the processor calls (never in a tier, never listed, 404 to a client).",
    )
    prefill: PrefillConfig | None = Field(
        default=None, description="This model's prefill role when it is served disaggregated; None: aggregated."
    )


class DifficultyRouteConfig(_Config):
    """A tier's routing by prompt difficulty (:mod:`inferplane.processor.difficulty`)."""

    cheap: str = Field(description="Model answering prompts scored below ``threshold``.")
    strong: str = Field(description="Model answering prompts scored at or above ``threshold`` (and unscored ones).")
    threshold: float = Field(ge=-1.0, le=1.0, description="Least score sent to ``strong``.")
    neighbours: int = Field(ge=1, le=1000, description="Nearest examples a score averages.")
    examples_file: str = Field(description="The labelled examples (JSON lines), mounted beside this config.")
    embedder: EmbedderConfig = Field(description="What embeds prompts and examples: the response cache's embedder.")


class ProviderConfig(_Config):
    """A hosted provider: where Envoy sends a request the processor hands it (its own route and cluster: TLS, the
    injected credential), the model id it answers to, its prices and who consented."""

    name: str = Field(description="Provider name: the route's metadata key and the metrics' ``provider`` label.")
    model: str = Field(description="The provider's model id the body's ``model`` is rewritten to.")
    input_usd_per_million: float = Field(ge=0, description="Price per million prompt tokens, USD.")
    output_usd_per_million: float = Field(ge=0, description="Price per million completion tokens, USD.")
    tenants: tuple[str, ...] = Field(default=(), description="Tenants whose requests may go to this provider.")

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """What a request's usage costs at this provider's prices."""
        return (prompt_tokens * self.input_usd_per_million + completion_tokens * self.output_usd_per_million) / 1e6


class TierConfig(_Config):
    """A routing tier: a name clients may ask for instead of a model, and the models behind it."""

    name: str = Field(description="Tier name; a request's ``model`` may name it.")
    models: tuple[str, ...] = Field(min_length=1, description="Models serving the tier, preferred first.")
    fallback: tuple[str, ...] = Field(default=(), description="Models Envoy retries when the primary fails.")
    route: DifficultyRouteConfig | None = Field(
        default=None, description="Pick between two of ``models`` by the prompt's difficulty; None: the first answers."
    )
    providers: tuple[str, ...] = Field(
        default=(),
        description="Hosted providers answering, in order, what ``models`` cannot take (no ready replica, no slot "
        "within the queue timeout), for consenting tenants.",
    )

    @model_validator(mode="after")
    def _route_models(self) -> TierConfig:
        if self.route is not None:
            outside = [m for m in (self.route.cheap, self.route.strong) if m not in self.models]
            if outside:
                raise ValueError(f"tier {self.name!r} routes to {', '.join(outside)}, not among its models")
        return self


class TenantConfig(_Config):
    """A caller: its name (Envoy's api_key_auth forwards it), the tiers it may use and its budgets."""

    name: str = Field(description="Tenant name, the ``client`` of its API key.")
    tiers: tuple[str, ...] = Field(min_length=1, description="Tiers (and so models) the tenant may use.")
    requests_per_minute: int = Field(gt=0, description="Requests per minute, shared by every gateway replica.")
    tokens_per_minute: int = Field(gt=0, description="Prompt + completion tokens per minute, shared by replicas.")


class ProcessorConfig(_Config):
    """Everything the processor needs; rendered from the platform spec and the sizing plan."""

    grpc_port: int = Field(
        gt=0, lt=65536, description="Port of the first worker's ext_proc gRPC server; worker ``i`` serves ``+ i``."
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Worker processes, one Python event loop each, behind one metrics endpoint: Envoy balances "
        "requests across them, and each holds its share of every model's admission queue (the per-replica slots "
        "are shared through Redis).",
    )
    metrics_port: int = Field(gt=0, lt=65536, description="Port of the Prometheus ``/metrics`` endpoint.")
    listen_host: str = Field(default="127.0.0.1", description="Address of the gRPC server (the pod's loopback).")
    metrics_host: str = Field(default="0.0.0.0", description="Address of the metrics server (Prometheus scrapes).")
    tenant_header: str = Field(description="Request header carrying the authenticated tenant (set by Envoy).")
    auth_required: bool = Field(description="Refuse requests without a tenant header (Envoy authenticates).")
    anonymous_tenant: TenantConfig | None = Field(
        default=None, description="Budgets applied when authentication is off (``auth: none``)."
    )
    redis_url_file: str | None = Field(
        default=None,
        description="File holding the Redis/Valkey URL (a mounted Secret: it may carry a password, and a file is "
        "not inherited by child processes nor shown in the pod's spec as an environment is); read first.",
    )
    redis_url_env: str = Field(
        description="Environment variable holding the Redis/Valkey URL when ``redis_url_file`` is absent (local runs)."
    )
    redis_ca_file: str | None = Field(
        default=None,
        description="PEM file of the certificate authorities the Redis server's TLS certificate must chain to, trusted "
        "instead of the system's (Memorystore's per-instance CA); None: the system's trust store and hostname check.",
    )
    redis_key_prefix: str = Field(default="inferplane:gw:", description="Prefix of every key the processor writes.")
    redis_timeout_seconds: float = Field(default=0.05, gt=0, description="Per-command Redis timeout.")
    slot_store_timeout_seconds: float = Field(
        default=0.5,
        gt=0,
        le=5,
        description="Longest wait for the shared per-replica slots (Redis) before this processor falls back to its "
        "own share of each replica: longer than the budgets' timeout, as a fallback share costs capacity.",
    )
    chat_message_overhead_tokens: int = Field(
        default=8, ge=0, description="Tokens a chat template adds per message (role markers), counted on top."
    )
    tokenized_text_cache_bytes: int = Field(
        default=0,
        ge=0,
        description="Memory a worker keeps the token ids of long prompt texts in (system prompts, earlier turns: "
        "clients resend them with every request), least recently used out; 0: every prompt is tokenized whole.",
    )
    inject_stream_usage: bool = Field(
        default=True,
        description="Add ``stream_options.include_usage`` to streamed requests so the final chunk carries usage.",
    )
    retry_after_seconds_503: int = Field(default=30, gt=0, description="Retry-After on 503 after a cold-start hold.")
    models: tuple[ModelConfig, ...] = Field(min_length=1, description="Models this gateway routes to.")
    tiers: tuple[TierConfig, ...] = Field(default=(), description="Routing tiers.")
    tenants: tuple[TenantConfig, ...] = Field(default=(), description="Callers and their budgets.")
    providers: tuple[ProviderConfig, ...] = Field(default=(), description="Hosted providers the tiers fall back to.")
    cache: CacheConfig | None = Field(
        default=None, description="Exact and semantic response caching in the same Redis/Valkey (none: off)."
    )

    @model_validator(mode="after")
    def _references(self) -> ProcessorConfig:
        names = {m.name for m in self.models}
        problems = [
            f"tier {t.name!r} names unknown model {m!r}"
            for t in self.tiers
            for m in (*t.models, *t.fallback)
            if m not in names
        ]
        problems += [
            f"model {m.name!r} reroutes to unknown model {other!r}"
            for m in self.models
            for other in m.longer_context
            if other not in names
        ]
        problems += self._prefill_problems()
        providers = {p.name for p in self.providers}
        problems += [
            f"tier {t.name!r} names unknown provider {p!r}"
            for t in self.tiers
            for p in t.providers
            if p not in providers
        ]
        tier_names = {t.name for t in self.tiers}
        problems += [
            f"tenant {t.name!r} names unknown tier {tier!r}"
            for t in self.tenants
            for tier in t.tiers
            if tier not in tier_names
        ]
        if self.grpc_port + self.workers > 65536:
            problems.append(f"workers' gRPC ports {self.grpc_port}..{self.grpc_port + self.workers - 1} exceed 65535")
        if self.auth_required and self.anonymous_tenant is not None:
            problems.append("anonymous_tenant applies only when auth_required is false")
        if not self.auth_required and self.anonymous_tenant is None:
            problems.append("without authentication an anonymous_tenant carries the budgets")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _prefill_problems(self) -> list[str]:
        """A prefill role is a ``role: prefill`` model in the same blocks as its decode model, reached only through
        it: in no tier, no reroute and no prefill of its own."""
        problems: list[str] = []
        for m in self.models:
            role = self.model(m.prefill.model) if m.prefill is not None else None
            if m.prefill is not None and (role is None or role.role != "prefill"):
                problems.append(f"model {m.name!r} names {m.prefill.model!r} as its prefill, not a role: prefill model")
            elif role is not None and role.routing.block_tokens != m.routing.block_tokens:
                problems.append(f"model {m.name!r} and its prefill {role.name!r} hash different blocks")
            if m.role == "prefill" and (m.prefill is not None or m.longer_context):
                problems.append(f"prefill model {m.name!r} can have no prefill or longer_context of its own")
        prefills = {m.name for m in self.models if m.role == "prefill"}
        problems += [
            f"tier {t.name!r} names prefill model {m!r}"
            for t in self.tiers
            for m in (*t.models, *t.fallback)
            if m in prefills
        ]
        problems += [
            f"model {m.name!r} reroutes to prefill model {o!r}"
            for m in self.models
            for o in m.longer_context
            if o in prefills
        ]
        return problems

    @classmethod
    def load(cls, path: str | Path) -> ProcessorConfig:
        """Read the rendered JSON file."""
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def worker_share(self, total: int, worker: int) -> int:
        """Worker ``worker``'s part of a per-pod quantity split between the workers (the parts add up to ``total``:
        together the workers never admit more than the pod may)."""
        return total // self.workers + (1 if worker < total % self.workers else 0)

    def header_attributes(self) -> tuple[tuple[str, str], ...]:
        """The only request headers the processor reads (the tenant, the cache directive), each with the Envoy
        attribute that carries it."""
        return tuple((name, header_attribute(name)) for name in (self.tenant_header, CACHE_HEADER))

    def request_attributes(self) -> tuple[str, ...]:
        """What Envoy sends the processor with the request body, in place of a request-headers message (one gRPC
        round trip less per request): the path, the method and :meth:`header_attributes`."""
        return (PATH_ATTRIBUTE, METHOD_ATTRIBUTE, *(attribute for _, attribute in self.header_attributes()))

    def model(self, name: str) -> ModelConfig | None:
        """The model called ``name``, if this gateway serves it."""
        return next((m for m in self.models if m.name == name), None)

    def tier(self, name: str) -> TierConfig | None:
        """The tier called ``name``, if any."""
        return next((t for t in self.tiers if t.name == name), None)

    def provider(self, name: str) -> ProviderConfig | None:
        """The provider called ``name``, if any."""
        return next((p for p in self.providers if p.name == name), None)
