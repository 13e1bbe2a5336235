"""Hosted providers: which one takes a request the platform's own models cannot, and what it cost.

A request goes to a provider only as the last resort before a refusal (no slot within the queue timeout, a cold
start that did not finish) or when neither the model nor any of its tier's fallbacks has a ready replica, and only
for a tenant the provider lists (``gateway.providers[].tenants``): prompts leave the VPC by consent. Envoy does the
rest on the provider's own route (TLS, the injected key, the rewritten path and host).
"""

from __future__ import annotations

import functools

from prometheus_client import CollectorRegistry, Counter

from inferplane.processor import metrics as m
from inferplane.processor.config import ProcessorConfig, ProviderConfig, TenantConfig


class Providers:
    """The tiers' providers as the processor uses them: the choice, and the accounting of their usage."""

    def __init__(self, config: ProcessorConfig, registry: CollectorRegistry) -> None:
        providers = {p.name: p for p in config.providers}
        # ProcessorConfig checks that a tier names only known providers.
        self._by_tier = {tier.name: tuple(providers[n] for n in tier.providers) for tier in config.tiers}
        self._tier_fallbacks = {tier.name: tier.fallback for tier in config.tiers}
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
        self.request = functools.cache(self._requests.labels)
        self.token = functools.cache(self._tokens.labels)
        self.cost = functools.cache(self._cost.labels)

    def fallbacks(self, tier: str) -> tuple[str, ...]:
        """The tier's own fallback models (Envoy retries them before a provider is needed)."""
        return self._tier_fallbacks.get(tier, ())

    def choose(self, tier: str, tenant: TenantConfig) -> ProviderConfig | None:
        """The tier's first provider ``tenant`` consented to, or None (the request is refused or left to Envoy)."""
        return next((p for p in self._by_tier.get(tier, ()) if tenant.name in p.tenants), None)

    def handed(self, provider: ProviderConfig, tier: str, tenant: str, reason: m.ProviderReason) -> None:
        """Count a request handed to ``provider``."""
        self.request(provider.name, tier, tenant, reason).inc()

    def account(self, provider: ProviderConfig, tier: str, tenant: str, prompt: int, completion: int) -> None:
        """Count a provider's reported usage and its cost."""
        self.token(provider.name, tier, tenant, "prompt").inc(prompt)
        self.token(provider.name, tier, tenant, "completion").inc(completion)
        self.cost(provider.name, tier, tenant).inc(provider.cost_usd(prompt, completion))
