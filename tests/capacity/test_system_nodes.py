"""The system nodes hold what the platform puts on them: node allocatable as nodeadm and GKE compute it, the pods
counted from what the components deploy, and a refusal (with a fix that fits) per way a plan can fail."""

from __future__ import annotations

from typing import Any

import pytest

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.capacity.system_nodes import (
    SystemPod,
    envoy_concurrency,
    envoy_cpu_millicores,
    gateway_pod_requests,
    gke_reserved_memory_mib,
    kube_reserved_cpu_millicores,
    node_allocatable,
    system_pods,
    unplaced,
)
from inferplane.components.catalog.system_nodes import SYSTEM_NODE_TYPES
from inferplane.components.spec.platform_spec import PlatformSpec, SpecError, parse_platform
from tests.serving_support import stack_spec
from tests.stacks import evaluate_shipped_stack


def _with_cluster(spec: PlatformSpec, **changes: Any) -> PlatformSpec:
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update=changes)})


@pytest.mark.parametrize(
    ("vcpus", "reserved"),
    # 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% above four (integer millicores).
    [(1, 60), (2, 70), (4, 80), (8, 90), (16, 110), (96, 310)],
)
def test_kube_reserved_cpu_follows_nodeadm(vcpus: int, reserved: int) -> None:
    assert kube_reserved_cpu_millicores(vcpus) == reserved


def test_gke_reserved_memory_follows_its_table() -> None:
    assert gke_reserved_memory_mib(512) == 255
    # 25% of 4 GiB + 20% of 4 GiB + 10% of 8 GiB = 2662.4 MiB.
    assert gke_reserved_memory_mib(16 * 1024) == 2663
    # 150 GiB: 9.76 GiB, which with the 100 MiB eviction threshold is the 9.8577 GiB that
    # hatemosphere/gke-node-allocatable-memory-calculator prints for the same machine.
    assert gke_reserved_memory_mib(150 * 1024) == 9995


@pytest.mark.parametrize(
    ("name", "cpu", "memory", "pods"),
    [
        # 8192 MiB less 7.5% = 7577; less 255 + 11 x 29 reserved and 100 evicted.
        ("m7i.large", 1930, 6903, 29),
        ("m7i.2xlarge", 7910, 29317, 58),
        # Reserved from nodeadm's ENI figure (234 pods: 2829 MiB) while the managed node group admits 110 pods.
        ("m7i.4xlarge", 15890, 57691, 110),
        # 32768 MiB less 7.5% = 30310; less GKE's 3646 MiB and 100 evicted.
        ("e2-standard-8", 7910, 26564, 110),
    ],
)
def test_node_allocatable(name: str, cpu: int, memory: int, pods: int) -> None:
    allocatable = node_allocatable(SYSTEM_NODE_TYPES[name])
    assert (allocatable.cpu_millicores, allocatable.memory_mib, allocatable.pods) == (cpu, memory, pods)


@pytest.mark.parametrize("workers", range(1, 17))
def test_envoy_keeps_up_with_the_processor_workers_it_runs_beside(workers: int) -> None:
    """Envoy's request is 65% of the workers' cores rounded up to 100m, a core at least; a thread per requested
    core, two at least (every ``gateway.processor_workers`` value, 1-16)."""
    cpu = envoy_cpu_millicores(workers)
    assert cpu == max(1000, -(-workers * 650 // 100) * 100)
    assert cpu % 100 == 0 and cpu >= workers * 650
    assert envoy_concurrency(workers) == max(2, -(-cpu // 1000))
    assert gateway_pod_requests(workers)[0] == cpu + 1000 * workers


def test_envoy_sizing_at_the_shipped_worker_counts() -> None:
    assert [(w, envoy_cpu_millicores(w), envoy_concurrency(w)) for w in (1, 2, 4, 16)] == [
        (1, 1000, 2),
        (2, 1300, 2),
        (4, 2600, 3),
        (16, 10400, 11),
    ]


def test_prod_fits_its_system_nodes_and_counts_exactly_these_pods() -> None:
    plan = size_platform(stack_spec("prod"))
    assert plan.ok
    (eks,) = plan.system_nodes
    assert (eks.cluster, eks.instance_type, eks.min_nodes, eks.max_nodes) == ("eks", "m7i.2xlarge", 4, 8)
    assert (eks.free.cpu_millicores, eks.free.memory_mib, eks.free.pods) == (7755, 29213, 55)
    assert [(p.name, p.cpu_millicores, p.memory_mib, p.min_replicas, p.max_replicas) for p in eks.pods] == [
        ("gateway", 3300, 2048, 3, 12),  # Envoy 1.3 CPU beside two 1-CPU processor workers
        ("cache-embedder", 1000, 2048, 2, 8),  # its autoscaler's ceiling: 4 x, as the gateway's
        ("prometheus", 450, 1280, 2, 2),
        ("coredns", 100, 70, 2, 2),
        ("ebs-csi-controller", 50, 192, 2, 2),
        ("keda-operator", 100, 100, 1, 1),
        ("keda-metrics-apiserver", 100, 100, 1, 1),
        ("keda-admission-webhooks", 100, 100, 1, 1),
    ]


def test_staging_checks_both_clusters_system_nodes() -> None:
    plan = size_platform(stack_spec("staging"))
    assert plan.ok
    assert [(v.cluster, v.type_key, v.instance_type, v.min_nodes, v.max_nodes) for v in plan.system_nodes] == [
        ("eks", "cluster.system_instance_type", "m7i.2xlarge", 2, 4),
        ("gke", "gcp.system_machine_type", "e2-standard-8", 1, 3),
    ]
    gke_pods = [p.name for p in plan.system_nodes[1].pods]
    # The embedder runs beside the EKS gateway only (the response cache lives there); the GKE gateway is alone.
    assert gke_pods == ["gateway", "prometheus", "keda-operator", "keda-metrics-apiserver", "keda-admission-webhooks"]


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_the_gateway_pods_count_what_the_deployment_requests(stack: str) -> None:
    """The requests sizing counts are the Deployment's: Envoy plus the processor (init containers run first)."""
    spec = stack_spec(stack)
    deployment = evaluate_shipped_stack(stack).named("gateway-deployment")
    containers = deployment.inputs["spec"]["template"]["spec"]["containers"]
    cpu = sum(_millicores(c["resources"]["requests"]["cpu"]) for c in containers)
    memory = sum(int(c["resources"]["requests"]["memory"].removesuffix("Mi")) for c in containers)
    assert (cpu, memory) == gateway_pod_requests(spec.gateway.processor_workers)
    (envoy,) = [c for c in containers if c["name"] == "envoy"]
    workers = spec.gateway.processor_workers
    assert _millicores(envoy["resources"]["requests"]["cpu"]) == envoy_cpu_millicores(workers)
    assert envoy["args"][envoy["args"].index("--concurrency") + 1] == str(envoy_concurrency(workers))
    (gateway,) = [p for p in system_pods(spec, "eks", size_platform(spec).embedder) if p.name == "gateway"]
    assert (gateway.cpu_millicores, gateway.memory_mib) == (cpu, memory)


def _millicores(quantity: str) -> int:
    return int(quantity.removesuffix("m")) if quantity.endswith("m") else int(quantity) * 1000


def test_a_pod_larger_than_a_node_is_refused_with_a_type_that_fits() -> None:
    plan = size_platform(_with_cluster(stack_spec("prod"), system_instance_type="m7i.large"))
    assert plan.problems == (
        "inferplane:platform.cluster.system_instance_type: m7i.large system nodes cannot run gateway pods (3.3 CPU and "
        "2048 MiB each): one m7i.large node allocates 1.93 CPU and 6.7 GiB, 1.775 CPU and 6.6 GiB after its "
        "DaemonSets (aws-node, kube-proxy, ebs-csi-node); fix: system_instance_type m7i.2xlarge",
    )


def test_pods_that_fit_one_node_but_not_the_groups_maximum_are_refused_with_counts_that_fit() -> None:
    plan = size_platform(_with_cluster(stack_spec("prod"), system_nodes=2))
    assert plan.problems == (
        "inferplane:platform.cluster.system_nodes: at the ceiling (gateway x12, cache-embedder x8, prometheus x2, "
        "coredns x2, ebs-csi-controller x2, keda-operator x1, keda-metrics-apiserver x1, keda-admission-webhooks x1) "
        "the system pods request 49 CPU and 43.3 GiB, more than 4 m7i.2xlarge nodes (the group's maximum) hold: one "
        "m7i.2xlarge node allocates 7.91 CPU and 28.6 GiB, 7.755 CPU and 28.5 GiB after its DaemonSets (aws-node, "
        "kube-proxy, ebs-csi-node); left without a node: gateway x4, cache-embedder x4, prometheus x2, "
        "keda-admission-webhooks x1; fix: system_nodes 4 or system_instance_type m7i.4xlarge",
    )
    # Each fix it names fits.
    assert size_platform(_with_cluster(stack_spec("prod"), system_nodes=4)).ok
    assert size_platform(_with_cluster(stack_spec("prod"), system_nodes=2, system_instance_type="m7i.4xlarge")).ok


def test_the_floor_must_fit_the_groups_minimum_without_the_autoscaler() -> None:
    spec = _with_cluster(stack_spec("prod"), system_instance_type="m7i.xlarge", system_nodes=8)
    assert size_platform(spec).ok  # 8 nodes, 16 at most
    floor = size_platform(_with_cluster(spec, system_nodes=2)).problems
    assert len(floor) == 1
    assert floor[0].startswith("inferplane:platform.cluster.system_nodes: at the floor (gateway x3, cache-embedder x2")
    assert floor[0].endswith(
        "left without a node: gateway x1, cache-embedder x2, coredns x2, keda-operator x1, keda-metrics-apiserver x1, "
        "keda-admission-webhooks x1; fix: system_nodes 8 or system_instance_type m7i.2xlarge with system_nodes 4 or "
        "system_instance_type m7i.4xlarge"
    )


def test_the_gke_pool_is_checked_against_its_fixed_node_counts() -> None:
    staging = stack_spec("staging")
    more = staging.model_copy(update={"gateway": staging.gateway.model_copy(update={"replicas": 3})})
    assert size_platform(more).problems == (
        "inferplane:platform.gcp.system_machine_type: at the ceiling (gateway x12, prometheus x1, keda-operator x1, "
        "keda-metrics-apiserver x1, keda-admission-webhooks x1) the system pods request 24.65 CPU and 16.2 GiB, more "
        "than 3 e2-standard-8 nodes (the group's maximum) hold: one e2-standard-8 node allocates 7.91 CPU and "
        "25.9 GiB, 7.91 CPU and 25.9 GiB (no DaemonSet counted); left without a node: gateway x3; fix: "
        "system_machine_type e2-standard-16",
    )


def test_requests_that_sum_below_the_nodes_still_need_a_packing() -> None:
    """No pod is split between nodes: three 2-CPU pods on two nodes of 3 CPUs leave one without a node."""
    free = node_allocatable(SYSTEM_NODE_TYPES["m7i.large"]).model_copy(update={"cpu_millicores": 3000})
    pods = [SystemPod(name="gateway", cpu_millicores=2000, memory_mib=1024, min_replicas=3, max_replicas=3)]
    assert unplaced(pods, "max", 2, free) == ["gateway"]
    assert unplaced(pods, "max", 3, free) == []


def test_an_unknown_system_instance_type_is_refused_naming_the_field_and_the_known_ones() -> None:
    raw = stack_spec("dev").model_dump(mode="json", exclude={"region"})
    raw["cluster"]["system_instance_type"] = "m7i.8xlarge"
    raw["gcp"] = {
        "project": "inferplane-dev",
        "region": "us-west4",
        "zone": "us-west4-a",
        "system_machine_type": "e2-micro-2",
    }
    with pytest.raises(SpecError) as caught:
        parse_platform(raw, "us-east-1")
    assert [(i.path, i.message) for i in caught.value.issues] == [
        (
            "cluster.system_instance_type",
            "'m7i.8xlarge' is not an EKS system node type of the catalog; known: m5.2xlarge, m5.4xlarge, m5.large, "
            "m5.xlarge, m6i.2xlarge, m6i.4xlarge, m6i.large, m6i.xlarge, m7i.2xlarge, m7i.4xlarge, m7i.large, "
            "m7i.xlarge",
        ),
        (
            "gcp.system_machine_type",
            "'e2-micro-2' is not a GKE system pool type of the catalog; known: e2-standard-16, e2-standard-2, "
            "e2-standard-4, e2-standard-8, n2-standard-16, n2-standard-2, n2-standard-4, n2-standard-8",
        ),
    ]
