"""Metric names and scrape conventions, matched to the pinned engine versions.

The monitoring issue owns this module; model servers import the scrape labels from here so the monitoring stack's
selectors and the monitors they select can never drift apart.
"""

from __future__ import annotations

SCRAPE_LABELS: dict[str, str] = {"inferplane.io/scrape": "true"}
"""Labels every PodMonitor/ServiceMonitor carries; kube-prometheus-stack's monitor selectors match exactly these."""
