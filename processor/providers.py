"""Hosted providers: which one takes a request the platform's own models cannot, and what it cost.

A request goes to a provider only as the last resort before a refusal (no slot within the queue timeout, a cold
start that did not finish) or when neither the model nor any of its tier's fallbacks has a ready replica, and only
for a tenant the provider lists (``gateway.providers[].tenants``): prompts leave the VPC by consent. Envoy does the
rest on the provider's own route (TLS, the injected key, the rewritten path and host).

A provider that fails (an answer without usage: its 429 or 5xx, Envoy's 503 once it ejected it, a refused key)
:data:`ALLOWED_FAILS` times in a row is passed over for :data:`COOLDOWN_SECONDS`, as LiteLLM cools a deployment
down: the tier's next consenting provider takes its requests, or, with none, the platform answers as it would without
a provider (429 with Retry-After, 503). The count is the worker's own (LiteLLM keeps it in Redis, fleet-wide).
"""

from __future__ import annotations

import functools
import logging
import time

from prometheus_client import CollectorRegistry, Counter

from inferplane.processor import metrics as m
from inferplane.processor.config import ProcessorConfig, ProviderConfig, TenantConfig

log = logging.getLogger(__name__)

ALLOWED_FAILS = 3
"""Failed answers in a row that cool a provider down (LiteLLM's ``DEFAULT_ALLOWED_FAILS``, litellm 1.110.2)."""
COOLDOWN_SECONDS = 5.0
"""How long a cooled-down provider is passed over (LiteLLM's ``DEFAULT_COOLDOWN_TIME_SECONDS``)."""


class Providers:
    """The tiers' providers as the processor uses them: the choice, and the accounting of their usage."""

    def __init__(self, config: ProcessorConfig, registry: CollectorRegistry) -> None:
        providers = {p.name: p for p in config.providers}
        # ProcessorConfig checks that a tier names only known providers.
        self._by_tier = {tier.name: tuple(providers[n] for n in tier.providers) for tier in config.tiers}
        labels = [m.PROVIDER_LABEL, m.TIER_LABEL, m.TENANT_LABEL]
        self._requests = Counter(
            m.counter_name(m.PROVIDER_REQUESTS_TOTAL),
            "Requests handed to a hosted provider.",
            [*labels, m.REASON_LABEL],
            registry=registry,
        )
        self._tokens = Counter(
            m.counter_name(m.PROVIDER_TOKENS_TOTAL),
            "Tokens a hosted provider reported.",
            [*labels, m.KIND_LABEL],
            registry=registry,
        )
        self._cost = Counter(
            m.counter_name(m.PROVIDER_COST_USD_TOTAL),
            "Cost of a hosted provider's tokens, USD.",
            labels,
            registry=registry,
        )
        self._cooldowns = Counter(
            m.counter_name(m.PROVIDER_COOLDOWNS_TOTAL),
            "Times a hosted provider was passed over after failing in a row.",
            [m.PROVIDER_LABEL],
            registry=registry,
        )
        self._failed: dict[str, int] = {}
        self._cool_until: dict[str, float] = {}
        self.request = functools.cache(self._requests.labels)
        self.token = functools.cache(self._tokens.labels)
        self.cost = functools.cache(self._cost.labels)

    def choose(self, tier: str, tenant: TenantConfig) -> ProviderConfig | None:
        """The tier's first provider ``tenant`` consented to that is not cooling down, or None (the request is
        refused or left to Envoy)."""
        now = time.monotonic()
        return next(
            (
                p
                for p in self._by_tier.get(tier, ())
                if tenant.name in p.tenants and self._cool_until.get(p.name, 0.0) <= now
            ),
            None,
        )

    def answered(self, provider: ProviderConfig, ok: bool) -> None:
        """Note how ``provider`` answered: a success clears its failures, the :data:`ALLOWED_FAILS`-th failure in a
        row cools it down for :data:`COOLDOWN_SECONDS`."""
        if ok:
            self._failed.pop(provider.name, None)
            return
        failed = self._failed.get(provider.name, 0) + 1
        if failed < ALLOWED_FAILS:
            self._failed[provider.name] = failed
            return
        self._failed.pop(provider.name, None)
        self._cool_until[provider.name] = time.monotonic() + COOLDOWN_SECONDS
        self._cooldowns.labels(provider.name).inc()
        log.warning(
            "provider %s failed %d times in a row: passed over for %gs", provider.name, failed, COOLDOWN_SECONDS
        )

    def handed(self, provider: ProviderConfig, tier: str, tenant: str, reason: m.ProviderReason) -> None:
        """Count a request handed to ``provider``."""
        self.request(provider.name, tier, tenant, reason).inc()

    def account(self, provider: ProviderConfig, tier: str, tenant: str, prompt: int, completion: int) -> None:
        """Count a provider's reported usage and its cost."""
        self.token(provider.name, tier, tenant, "prompt").inc(prompt)
        self.token(provider.name, tier, tenant, "completion").inc(completion)
        self.cost(provider.name, tier, tenant).inc(provider.cost_usd(prompt, completion))
