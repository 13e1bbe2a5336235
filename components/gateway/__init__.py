"""The gateway in front of the model servers: Envoy and the processor, rendered and deployed.

Owns the pure renderer (:mod:`.renderer`: Envoy's bootstrap and the processor's configuration from the spec and
the sizing; :mod:`.cache_renderer` for the response cache's part, :mod:`.provider_renderer` for the hosted providers'
clusters, routes and SDS files, :mod:`.settle_renderer` for the Lua filter and access log that bring a response's
usage to the processor, :mod:`.envoy_fields` for the Envoy fields they all write), the Pulumi component that
deploys them (:mod:`.component`: ``Gateway``), and the gateway's rules and dashboard (:mod:`.observability`,
:mod:`.cache_observability`). A new gateway feature is rendered here and enforced in the processor
(:mod:`inferplane.processor`), whose configuration models are the one thing from outside ``components`` it reads.

May import: every component subpackage but :mod:`~inferplane.components.platform`, and the processor's pure
configuration and metric-name modules.
"""
