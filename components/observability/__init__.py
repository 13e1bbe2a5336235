"""Watching and scaling the model servers: metric names, alert rules, dashboards, the monitoring stack, KEDA.

Owns every metric name and PromQL selector (:mod:`.metrics`), recording and alerting rules from the SLOs
(:mod:`.alerts`), Grafana dashboards (:mod:`.dashboards`), kube-prometheus-stack and dcgm-exporter
(:mod:`.monitoring`), and KEDA with its queue-depth ScaledObjects (:mod:`.keda`, never CPU).

May import: :mod:`~inferplane.components.catalog`, :mod:`~inferplane.components.spec`,
:mod:`~inferplane.components.capacity`, :mod:`~inferplane.components.aws`, :mod:`~inferplane.components.gcp`,
:mod:`~inferplane.components.serving` (what it watches).
"""
