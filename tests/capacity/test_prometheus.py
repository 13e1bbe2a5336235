"""Each cluster's Prometheus is sized from the series the platform exposes at its ceiling, deployed with those
requests, counted on the system nodes it shares with the gateway, and its volume checked against the retention."""

from __future__ import annotations

from typing import Any

from inferplane.components.capacity import prometheus as p
from inferplane.components.capacity.sizing import size_platform
from inferplane.components.capacity.system_nodes import size_system_nodes
from inferplane.components.spec.platform_spec import PlatformSpec
from tests.serving_support import stack_spec
from tests.stacks import evaluate_shipped_stack


def _with_observability(spec: PlatformSpec, **changes: Any) -> PlatformSpec:
    return spec.model_copy(update={"observability": spec.observability.model_copy(update=changes)})


def test_a_series_costs_its_labels_and_three_hours_of_samples() -> None:
    """Robust Perception's head model: (732 B + 32 B a label pair + the name twice) x 2 for the collector, plus three
    hours of samples at 2 bytes, 50% chunk overhead, x 2: 2,472 + 4,320 bytes at 15 s, 2,472 + 2,160 at 30 s."""
    assert p.bytes_per_series(15) == 2_472 + 4_320
    assert p.bytes_per_series(30) == 2_472 + 2_160


def test_prods_prometheus_follows_what_it_scrapes_at_the_ceiling() -> None:
    plan = size_platform(stack_spec("prod"))
    (eks,) = plan.prometheus
    spec = stack_spec("prod")
    replicas = sum(role.max_replicas for d in plan.deployments for role in d.roles)
    gpus = sum(pool.max_nodes * pool.accelerators_per_node for pool in plan.pools)
    assert (replicas, gpus, spec.gateway.replicas * 4) == (16, 40, 12)
    assert (eks.cluster, eks.replicas, eks.series) == ("eks", 2, 116_880)
    assert eks.samples_per_second == 116_880 / 15
    assert eks.memory_mib == 1280  # 512 MiB + 116,880 x 6,792 B = 1,269 MiB, in 64 MiB steps
    assert eks.cpu_millicores == 450  # 250 m + 7,792 samples/s at 50,000 a core = 406 m, in 50 m steps
    assert (eks.retention_days, eks.disk_gib, eks.retention_gib) == (30, 37.6, 170.0)
    bigger = spec.model_copy(update={"models": tuple(m.model_copy(update={"max_replicas": 12}) for m in spec.models)})
    (more,) = size_platform(bigger).prometheus
    assert more.series > eks.series and more.memory_mib > eks.memory_mib


def test_the_system_nodes_count_prometheus() -> None:
    """Prometheus requested nothing, so the system-node check passed whatever it held; a Prometheus holding 4.2
    million series (27 GiB) no longer fits prod's system nodes beside the gateway and the embedder at their ceiling."""
    spec = stack_spec("prod")
    plan = size_platform(spec)
    big = p.size_prometheus("eks", spec.observability, spec.environment, 4_200_000)
    assert big.memory_mib > 27_000
    assert all(not v.problems for v in size_system_nodes(spec, plan.embedder))  # as before: nothing counted
    (verdict,) = size_system_nodes(spec, plan.embedder, (big,))
    assert "prometheus x2" in verdict.problems[0] and "left without a node" in verdict.problems[0]
    (shipped,) = plan.system_nodes
    assert [(x.name, x.memory_mib, x.max_replicas) for x in shipped.pods if x.name == "prometheus"] == [
        ("prometheus", 1280, 2)
    ]


def test_a_volume_too_small_for_the_retention_is_refused_with_one_that_holds_it() -> None:
    small = _with_observability(stack_spec("prod"), storage_gib=20)
    assert size_platform(small).problems == (
        "inferplane:platform.observability.storage_gib: eks's Prometheus keeps 30 days of about 116,880 series "
        "(7,792 samples/s at 2 bytes each), 37.6 GiB, more than the 17.0 GiB its 20 GiB volume lets it fill; old data "
        "would go before 30 days; fix: storage_gib 45 or fewer retention_days",
    )
    assert size_platform(_with_observability(stack_spec("prod"), storage_gib=45)).ok


def test_the_monitoring_stack_requests_what_sizing_counts() -> None:
    (eks,) = size_platform(stack_spec("prod")).prometheus
    release = evaluate_shipped_stack("prod").named("monitoring-chart")
    resources = release.inputs["values"]["prometheus"]["prometheusSpec"]["resources"]
    assert resources == {"requests": {"cpu": f"{eks.cpu_millicores}m", "memory": f"{eks.memory_mib}Mi"}}
