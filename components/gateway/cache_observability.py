"""The response cache's alerts and dashboard panels, from the processor's cache metrics.

The series are the processor's (:mod:`inferplane.processor.cache.metrics`, one source of the names), scraped by the
gateway's PodMonitor, so every selector takes the gateway pods' matchers (``namespace="...",pod=~"..."``).

Alerts (one group per gateway):

* ``InferplaneGatewayCacheUnreachable``: a gateway replica has not reached the cache for 5 minutes
  (``inferplane_gateway_cache_up`` 0; the processor pings it periodically, so an idle gateway reports too). Requests
  still succeed, uncached: this is a warning about cost and latency, not an outage.
* ``InferplaneGatewayCacheErrors``: more than 5% of lookups failing over 10 minutes (a slow cache whose round trips
  time out, while the health pings pass).

Panels: hit ratio, hits by kind, misses and bypasses by reason, lookup latency p50/p99, tokens and dollars saved.
"""

from __future__ import annotations

from inferplane.components.observability.alerts import AlertingRule, RecordingRule, RuleGroup
from inferplane.components.observability.dashboards import Panel, PanelDraft, two_column_panels
from inferplane.processor.cache import metrics as cm

UNREACHABLE_FOR = "5m"
"""Long enough to ride out a failover of the replication group (ElastiCache promotes a replica in about a minute)."""
ERROR_RATIO_ALERT = 0.05
ERROR_RATIO_FOR = "10m"


def _lookups(pods: str) -> str:
    """Cacheable requests per second: hits, misses and failed lookups (each term 0 when its series is absent)."""
    terms = (
        f"rate({cm.HITS}{{{pods}}}[5m])",
        f"rate({cm.MISSES}{{{pods}}}[5m])",
        f'rate({cm.LOOKUP_SECONDS}_count{{{pods},result="error"}}[5m])',
    )
    return " + ".join(f"(sum({t}) or vector(0))" for t in terms)


def hit_ratio(pods: str) -> str:
    """Share of cacheable requests answered from the cache, over 5 minutes."""
    return f"sum(rate({cm.HITS}{{{pods}}}[5m])) / ({_lookups(pods)})"


def cache_rule_group(name: str, pods: str) -> RuleGroup:
    """Recording rule for the hit ratio and the three alerts, for the gateway whose pods ``pods`` selects."""
    errors = f'sum(rate({cm.LOOKUP_SECONDS}_count{{{pods},result="error"}}[5m]))'
    embed_errors = f'sum(rate({cm.ERRORS}{{{pods},operation="embed"}}[5m]))'
    return RuleGroup(
        name=f"inferplane:gateway-cache:{name}",
        rules=(
            RecordingRule(record="inferplane:gateway_cache_hit_ratio:rate5m", expr=hit_ratio(pods)),
            AlertingRule(
                alert="InferplaneGatewayCacheUnreachable",
                expr=f"min by (namespace, pod) ({cm.UP}{{{pods}}}) == 0",
                for_=UNREACHABLE_FOR,
                labels={"severity": "warning"},
                annotations={
                    "summary": "Gateway {{ $labels.pod }} cannot reach its response cache",
                    "description": "Requests are served without the cache (no error to clients), so every repeat "
                    "reaches the model servers. Check the ElastiCache replication group, its security group and "
                    "the AUTH token Secret.",
                },
            ),
            _share_of_lookups_alert(
                "InferplaneGatewayCacheErrors",
                errors,
                pods,
                summary="{{ $value | humanizePercentage }} of cache lookups fail",
                description="Lookups time out or fail while the cache answers health checks: the cache is "
                "overloaded or far away. Each failure skips the cache for a back-off period.",
            ),
            _share_of_lookups_alert(
                "InferplaneGatewayCacheEmbedderFailing",
                embed_errors,
                pods,
                summary="{{ $value | humanizePercentage }} of cacheable requests get no embedding",
                description="The semantic cache's embedder times out or fails, so those requests skip the semantic "
                "lookup (exact hits still answer, clients see no error) and near-duplicates reach the models. Check "
                "the embedder's pods (cache-embedder) or raise cache.embedder.timeout_ms.",
            ),
        ),
    )


def _share_of_lookups_alert(alert: str, failures: str, pods: str, *, summary: str, description: str) -> AlertingRule:
    """Fires when ``failures`` per second exceed :data:`ERROR_RATIO_ALERT` of the cacheable requests for
    :data:`ERROR_RATIO_FOR`."""
    return AlertingRule(
        alert=alert,
        expr=f"({failures}) / ({_lookups(pods)}) > {ERROR_RATIO_ALERT}",
        for_=ERROR_RATIO_FOR,
        labels={"severity": "warning"},
        annotations={"summary": summary, "description": description},
    )


def cache_panels(pods: str, first_id: int, y: int) -> tuple[Panel, ...]:
    """Dashboard panels for the gateway whose pods ``pods`` selects, from panel id ``first_id`` at row ``y``."""
    latency = [
        (f"histogram_quantile({q}, sum by (le) (rate({cm.LOOKUP_SECONDS}_bucket{{{pods}}}[5m])))", f"p{round(q * 100)}")
        for q in (0.5, 0.99)
    ]
    drafts = (
        PanelDraft("Cache hit ratio", "percentunit", [(hit_ratio(pods), "hits / cacheable requests")]),
        PanelDraft(
            "Cache hits, misses and bypasses",
            "reqps",
            [
                (f"sum by (kind) (rate({cm.HITS}{{{pods}}}[5m]))", "hit {{kind}}"),
                (f"sum(rate({cm.MISSES}{{{pods}}}[5m]))", "miss"),
                (f"sum by (reason) (rate({cm.BYPASSES}{{{pods}}}[5m]))", "bypass {{reason}}"),
            ],
            description="Bypasses: not cacheable (sampling, tools, non-text, header) or the cache unavailable.",
        ),
        PanelDraft(
            "Cache lookup latency",
            "s",
            latency,
            description="Added to every cacheable request; bounded by the lookup timeout.",
        ),
        PanelDraft(
            "Saved by the cache",
            "short",
            [
                (f"sum by (model) (rate({cm.TOKENS_SAVED}{{{pods}}}[5m]))", "tokens/s {{model}}"),
                (f"sum by (model) (rate({cm.USD_SAVED}{{{pods}}}[5m])) * 3600", "USD/h {{model}}"),
            ],
            description="Tokens of answers served from the cache, and their generated tokens at the model's cost "
            "per token.",
        ),
    )
    return two_column_panels(drafts, first_id=first_id, y=y)
