"""Do the platform's pods fit its clusters' system nodes? Node allocatable, the pods placed there, and the verdict.

Everything that is not a model server runs on the system nodes (EKS: the system managed node group, GKE: the system
node pool): the gateway (Envoy and the processor), the served cache embedder, KEDA and the clusters' own add-ons,
plus a DaemonSet pod per node. A pod whose requests exceed what a node can allocate stays Pending forever, and pods
that together exceed the nodes wait for nodes the group may not add; neither shows until ``pulumi up``. This module
finds both at preview time, from the same request figures the components deploy.

**Allocatable** (what the scheduler may hand out on one node) = capacity - kube-reserved - the eviction threshold:

* EKS (awslabs/amazon-eks-ami ``nodeadm/internal/kubelet/config.go`` at 81fec2e, read 2026-12-02):
  ``getCPUMillicoresToReserve`` reserves 6% of the first core, 1% of the second, 0.5% of the next two and 0.25% of
  the rest (integer millicores per range); ``getMemoryMebibytesToReserve`` reserves ``11 x maxPods + 255`` MiB with
  nodeadm's ENI max pods; ``evictionHard`` keeps ``memory.available: 100Mi``.
* GKE (cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes, "Node allocatable resources", formerly in
  "Standard cluster architecture"; read 2026-12-02 through stored copies and projects that restate it): the same CPU
  ranges; memory 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112 and 2% above
  128 GiB (255 MiB below 1 GiB); eviction at 100 MiB.
* Capacity: the kubelet reports the memory the kernel leaves, a few percent under the instance's nominal memory;
  :data:`VM_MEMORY_OVERHEAD_SHARE` takes Karpenter's default estimate of that gap off first.

**What must fit**, per cluster, after every node's DaemonSet pods (:data:`catalog.system_nodes.CLUSTER_ADDON_PODS`):

1. every pod on one node (CPU, memory);
2. the pods at their floor (``gateway.replicas``) on the group's minimum nodes: the floor must run without the
   cluster autoscaler adding anything (it is itself one of these pods);
3. the pods at their ceiling (KEDA's ``SCALE_OUT_FACTOR x gateway.replicas`` gateway pods) on the group's maximum
   nodes: EKS's system group is ``system_nodes .. 2 x system_nodes`` (the cluster autoscaler grows it: the EKS user
   guide has managed node groups' Auto Scaling groups tagged for its auto-discovery, a statement not re-read for this
   check), GKE's system pool 1..3 nodes (3..6 in prod).

Not modelled: topology spread. The gateway's hostname spread is soft (``ScheduleAnyway``); prod's zone spread is hard
(``DoNotSchedule``, max skew 1) and is satisfiable when the group keeps its nodes balanced over the zones, as Auto
Scaling does, and a zone's nodes hold its share (true of the shipped prod stack: 3 nodes, 6 at most, 2 gateway pods a
node).

Pods are placed first-fit decreasing (largest share of a node first), a packing the scheduler can reach; a plan that
fits only by summing requests across nodes is refused, since no pod is split between nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplane.components.capacity.embedder import MIB, EmbedderSizing
from inferplane.components.capacity.prometheus import PrometheusSizing, round_up
from inferplane.components.catalog.system_nodes import (
    SystemCloud,
    SystemNodeType,
    cluster_addon_pods,
    get_system_node_type,
    system_node_types,
)
from inferplane.components.spec.platform_spec import (
    MAX_SYSTEM_NODES,
    PLATFORM_KEY,
    RESPONSE_CACHE_CLUSTERS,
    Environment,
    PlatformSpec,
    ServingCluster,
    serving_cluster,
)

# --- what the gateway's pods request (the gateway component deploys exactly these) -----------------------------

SCALE_OUT_FACTOR = 4
"""The gateway autoscaler's ceiling is this many times ``gateway.replicas`` (within the environment's replica ceiling);
the processor's fallback share of each replica assumes that many gateway pods at most, and the system nodes must hold
that many."""

PROCESSOR_CPU_MILLICORES_PER_WORKER = 1000
"""One asyncio loop per worker, so one core at most; CPU not capped. Its CPU per request, measured with a stub engine
at 32 concurrent requests (``benchmarks/gateway_cpu.py``, docs/gateway.md "Usage read in Envoy"): a request is one
ext_proc message however long its answer (Envoy reads the usage and its access log brings it, batched), so a stream
paced as a GPU decodes (a token every 20 ms) costs 3.2-4.6 ms at 6,000 x 64 on shared system prompts, 1.9-2.6 ms at
200 x 64, 4.9 ms at 6,000 x 128 a token a chunk (2026-12-07, fifth and sixth sessions; 8.8-9.9, 7.3-7.5 and 15.6
when each chunk was a message), and a non-streamed short answer 0.58-0.70 ms; a worker then carries about 200 new
requests/s of the long shapes. The same machine has measured up to 2x less on other days, so these are bounds, not a
constant."""

ENVOY_CPU_PERCENT_OF_PROCESSOR = 65
"""Envoy's CPU a request as a share of the processor's (percent) where the processor is what runs out first: answers
of a chunk or two, a worker's loop flat out. Measured 2026-12-07 on this 2-core machine (stub engines): 0.44 against
0.67 ms for non-streamed 8-token answers at 16 concurrent requests (``benchmarks/gateway_overhead.py``), 1.10 against
1.77 and 1.17 against 2.12 ms for 200- and 6,000-token prompts answered in one 8-token chunk at 32
(``benchmarks/gateway_cpu.py --token-interval-ms 0 --shapes 200x8,6000x8 --stream-intervals 8``). A streamed answer
costs Envoy more a request (each chunk about 0.05 ms of its CPU: 3.1 against the processor's 3.2 ms at 6,000 x 64 four
tokens a chunk, 2.9 against 1.9 at 200 x 64, 9.8 against 4.9 at 6,000 x 128 a token a chunk), but streams stay in
flight and KEDA adds gateway pods at :data:`~inferplane.components.gateway.component.TARGET_INFLIGHT_PER_REPLICA`
(200) long before they drive a worker flat out: 200 streams of 64 tokens at a 20 ms decode step are about 150 new
requests/s, half a core of Envoy and half of the processor; of 1,000 tokens, about 10/s, a sixth of a core of
Envoy. That regime is what :data:`ENVOY_MIN_CPU_MILLICORES` covers."""
ENVOY_MIN_CPU_MILLICORES = 1000
"""Envoy's CPU request at least: its two worker threads (:data:`ENVOY_MIN_CONCURRENCY`) and the streams KEDA's
in-flight target lets one pod carry (about half a core, :data:`ENVOY_CPU_PERCENT_OF_PROCESSOR`), with room for the
bursts KEDA's polling lags behind."""
ENVOY_CPU_STEP_MILLICORES = 100
"""Envoy's CPU request is rounded up to this step."""
ENVOY_MIN_CONCURRENCY = 2
"""Envoy's worker threads at least: two sustained ~7,400 requests/s with auth, limits and model routing on 2 cores
(``../shared/reference/gateway-facts.md``), and connections spread over both."""
ENVOY_MEMORY_MIB = 512
"""Envoy's memory: the buffered request bodies the processor inspects (``gateway.max_request_bytes`` each, 4 MiB by
default) for about a hundred concurrent uploads on top of Envoy's ~50 MiB baseline. Request and limit."""


def envoy_cpu_millicores(workers: int) -> int:
    """Envoy's CPU request beside ``workers`` processor workers: enough to keep up with them run flat out
    (:data:`ENVOY_CPU_PERCENT_OF_PROCESSOR` of their cores), never less than :data:`ENVOY_MIN_CPU_MILLICORES`. CPU
    not capped: no CFS throttling of a latency-critical proxy."""
    needed = workers * PROCESSOR_CPU_MILLICORES_PER_WORKER * ENVOY_CPU_PERCENT_OF_PROCESSOR // 100
    return max(ENVOY_MIN_CPU_MILLICORES, round_up(needed, ENVOY_CPU_STEP_MILLICORES))


def envoy_concurrency(workers: int) -> int:
    """Envoy's worker threads beside ``workers`` processor workers: a thread per requested core
    (:func:`envoy_cpu_millicores`), at least :data:`ENVOY_MIN_CONCURRENCY`. Envoy defaults to the node's hardware
    threads, not the container's CPU, so it is always set: on a 16-core node it would start 16 threads against a
    request of one or two cores."""
    return max(ENVOY_MIN_CONCURRENCY, round_up(envoy_cpu_millicores(workers), 1000) // 1000)


PROCESSOR_MEMORY_MIB_PER_WORKER = 768
"""One processor worker's memory: the Python runtime, gRPC, one Hugging Face tokenizer per model (tens of MiB
each), the prefix index (at most :data:`PREFIX_INDEX_MIB_PER_WORKER`) and the tokenized texts (at most
:data:`TOKENIZED_TEXT_CACHE_MIB_PER_WORKER`). Request and limit."""

PREFIX_INDEX_BYTES_PER_BLOCK = 150
"""What the processor's prefix index keeps per block it remembers for a replica: an ``OrderedDict`` slot and its int
key, 145.5 bytes measured with ``tracemalloc`` (2026-12-04: 800,000 random 64-bit hashes recorded in 375-block
prompts over two replicas)."""
PREFIX_INDEX_MIB_PER_WORKER = 192
"""The prefix index's ceiling within a worker's memory, over every model and replica it routes: about 1.34 million
blocks. Without it a host KV tier (hundreds of GiB a replica, hundreds of thousands of blocks) times the replicas
would outgrow the worker; past it the index forgets a replica's oldest blocks first, which costs affinity on those
prefixes, never correctness."""
PREFIX_INDEX_BLOCKS_PER_WORKER = PREFIX_INDEX_MIB_PER_WORKER * 2**20 // PREFIX_INDEX_BYTES_PER_BLOCK
TOKENIZED_TEXT_CACHE_MIB_PER_WORKER = 64
"""The token ids of long prompt texts a worker keeps within its memory (``ProcessorConfig.tokenized_text_cache_bytes``):
about 1,200 texts of 6,000 tokens (a 30 KB text and 24 KB of ids each), so a shared preamble or a conversation's
earlier turns are tokenized once, not with every request."""

TOKENIZER_FETCH_CPU_MILLICORES = 250
TOKENIZER_FETCH_MEMORY_MIB = 256
TOKENIZER_FETCH_MEMORY_LIMIT_MIB = 512
"""The init container that copies the models' tokenizer files from the S3 model cache or the Hugging Face Hub."""

# --- the system nodes' counts (the cluster components size their groups from these) -----------------------------

EKS_SYSTEM_SCALE_OUT = 2
"""The EKS system node group keeps ``cluster.system_nodes`` nodes and may grow to this many times that."""


def gke_system_pool_nodes(environment: Environment) -> tuple[int, int]:
    """The GKE system pool's autoscaling range (total nodes across its zones): three nodes at least in prod, one of
    each zone of the regional cluster, up to six; one to three elsewhere."""
    return (3, 6) if environment == "prod" else (1, 3)


# --- node allocatable ------------------------------------------------------------------------------------------

VM_MEMORY_OVERHEAD_SHARE = 0.075
"""Share of an instance's nominal memory the kubelet never sees (kernel, firmware reservations): Karpenter's default
``vmMemoryOverheadPercent`` (0.075, aws/karpenter-provider-aws chart values), the same estimate a node provisioner
makes before a node exists. Taken off EKS and GKE nodes alike."""

EVICTION_HARD_MEMORY_MIB = 100
"""``evictionHard: memory.available: 100Mi`` on EKS (nodeadm ``defaultKubeletSubConfig``) and GKE (plan-node-sizes)."""

EKS_RESERVED_MEMORY_BASE_MIB = 255
EKS_RESERVED_MEMORY_PER_POD_MIB = 11
"""nodeadm ``getMemoryMebibytesToReserve``: ``11 x maxPods + 255`` MiB of kube-reserved memory."""

_CPU_RESERVE_RANGES: tuple[tuple[int, int, int], ...] = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50))
"""(start, end, basis points) of nodeadm's ``getCPUMillicoresToReserve``; above 4 cores, 25 basis points."""
_CPU_RESERVE_ABOVE_4_CORES_BP = 25

_GKE_MEMORY_RESERVE_GIB: tuple[tuple[int, int, float], ...] = (
    (0, 4, 0.25),
    (4, 8, 0.20),
    (8, 16, 0.10),
    (16, 128, 0.06),
)
"""(start GiB, end GiB, share) of GKE's kube-reserved memory; above 128 GiB, 2%."""
_GKE_MEMORY_RESERVE_ABOVE_128_GIB = 0.02
_GKE_MEMORY_RESERVE_SMALL_MIB = 255
"""GKE reserves 255 MiB on machines with less than 1 GiB."""


class NodeResources(BaseModel):
    """CPU, memory and pod slots: a node's allocatable, or what is left of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_millicores: int = Field(description="CPU, millicores.")
    memory_mib: int = Field(description="Memory, MiB.")
    pods: int = Field(description="Pod slots (the kubelet's maxPods).")


def kube_reserved_cpu_millicores(vcpus: int) -> int:
    """CPU kube-reserved on a node of ``vcpus`` (EKS and GKE use the same ranges), as nodeadm computes it."""
    total = vcpus * 1000
    reserved = sum(max(0, min(total, end) - start) * bp // 10000 for start, end, bp in _CPU_RESERVE_RANGES)
    return reserved + max(0, total - 4000) * _CPU_RESERVE_ABOVE_4_CORES_BP // 10000


def gke_reserved_memory_mib(memory_mib: int) -> int:
    """Memory GKE reserves on a machine of ``memory_mib`` (its plan-node-sizes table), rounded up to a MiB."""
    if memory_mib < 1024:
        return _GKE_MEMORY_RESERVE_SMALL_MIB
    reserved = sum(
        max(0, min(memory_mib, end * 1024) - start * 1024) * share for start, end, share in _GKE_MEMORY_RESERVE_GIB
    )
    reserved += max(0, memory_mib - 128 * 1024) * _GKE_MEMORY_RESERVE_ABOVE_128_GIB
    return -int(-reserved // 1)


def node_allocatable(node: SystemNodeType) -> NodeResources:
    """What the scheduler may place on one node of ``node``: capacity less kube-reserved and the eviction threshold."""
    capacity_mib = int(node.memory_mib * (1 - VM_MEMORY_OVERHEAD_SHARE))
    if node.eni_max_pods is not None:
        reserved_mib = EKS_RESERVED_MEMORY_BASE_MIB + EKS_RESERVED_MEMORY_PER_POD_MIB * node.eni_max_pods
    else:
        reserved_mib = gke_reserved_memory_mib(node.memory_mib)
    return NodeResources(
        cpu_millicores=node.vcpus * 1000 - kube_reserved_cpu_millicores(node.vcpus),
        memory_mib=capacity_mib - reserved_mib - EVICTION_HARD_MEMORY_MIB,
        pods=node.max_pods,
    )


# --- the pods ----------------------------------------------------------------------------------------------------


class SystemPod(BaseModel):
    """A workload on the system nodes: what each of its pods requests, and how many pods it runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Workload name.")
    cpu_millicores: int = Field(description="CPU request of one pod, millicores.")
    memory_mib: int = Field(description="Memory request of one pod, MiB.")
    min_replicas: int = Field(description="Pods at the floor.")
    max_replicas: int = Field(description="Pods at the ceiling.")


def gateway_pod_requests(workers: int) -> tuple[int, int]:
    """(CPU millicores, memory MiB) one gateway pod requests with ``workers`` processor workers: Envoy plus the
    processor, or the tokenizer-fetching init container when that were larger (Kubernetes' effective request)."""
    cpu = envoy_cpu_millicores(workers) + PROCESSOR_CPU_MILLICORES_PER_WORKER * workers
    memory = ENVOY_MEMORY_MIB + PROCESSOR_MEMORY_MIB_PER_WORKER * workers
    return max(cpu, TOKENIZER_FETCH_CPU_MILLICORES), max(memory, TOKENIZER_FETCH_MEMORY_MIB)


def system_pods(
    spec: PlatformSpec,
    cluster: ServingCluster,
    embedder: EmbedderSizing | None,
    prometheus: PrometheusSizing | None = None,
) -> tuple[SystemPod, ...]:
    """The pods that request resources on ``cluster``'s system nodes, the platform's own first (``prometheus``: the
    cluster's, as :mod:`.prometheus` sizes it; the monitoring stack deploys it with those requests)."""
    serving = any(serving_cluster(spec, m) == cluster for m in spec.models)
    pods: list[SystemPod] = []
    if serving:
        cpu, memory = gateway_pod_requests(spec.gateway.processor_workers)
        replicas = spec.gateway.replicas
        pods.append(
            SystemPod(
                name="gateway",
                cpu_millicores=cpu,
                memory_mib=memory,
                min_replicas=replicas,
                max_replicas=replicas * SCALE_OUT_FACTOR,
            )
        )
        if embedder is not None and cluster in RESPONSE_CACHE_CLUSTERS:
            pods.append(
                SystemPod(
                    name="cache-embedder",
                    cpu_millicores=embedder.cpus * 1000,
                    memory_mib=embedder.memory_bytes // MIB,
                    min_replicas=embedder.replicas,
                    max_replicas=embedder.max_replicas,
                )
            )
    if prometheus is not None:
        pods.append(
            SystemPod(
                name="prometheus",
                cpu_millicores=prometheus.cpu_millicores,
                memory_mib=prometheus.memory_mib,
                min_replicas=prometheus.replicas,
                max_replicas=prometheus.replicas,
            )
        )
    cloud: SystemCloud = "aws" if cluster == "eks" else "gcp"
    for addon in cluster_addon_pods(cloud):
        if addon.per_node or (addon.serving_only and not serving):
            continue
        pods.append(
            SystemPod(
                name=addon.name,
                cpu_millicores=addon.cpu_millicores,
                memory_mib=addon.memory_mib,
                min_replicas=addon.replicas,
                max_replicas=addon.replicas,
            )
        )
    return tuple(pods)


# --- the verdict ---------------------------------------------------------------------------------------------------


class SystemNodesSizing(BaseModel):
    """One cluster's system nodes against the pods placed on them; ``problems`` empty when everything fits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: ServingCluster = Field(description="``eks`` (the system managed node group) or ``gke`` (the system pool).")
    type_key: str = Field(description="The stack key naming the node type (``cluster.system_instance_type``, ...).")
    instance_type: str = Field(description="EC2 instance type or GKE machine type of the system nodes.")
    min_nodes: int = Field(description="Nodes the group keeps.")
    max_nodes: int = Field(description="Nodes the group may grow to.")
    allocatable: NodeResources = Field(description="One node's allocatable.")
    free: NodeResources = Field(description="One node's allocatable after its DaemonSet pods.")
    daemonsets: tuple[str, ...] = Field(description="The DaemonSet pods every node carries (those that request).")
    pods: tuple[SystemPod, ...] = Field(description="Everything else that requests resources on these nodes.")
    problems: tuple[str, ...] = Field(description="Pods that fit no node, or no packing, with a concrete fix.")


def _cpu(millicores: int) -> str:
    return f"{millicores / 1000:g} CPU"


def _mem(mib: int) -> str:
    return f"{mib} MiB" if mib < 4096 else f"{mib / 1024:.1f} GiB"


def _free(node: SystemNodeType) -> tuple[NodeResources, NodeResources, tuple[str, ...]]:
    """A node's allocatable, what its DaemonSet pods leave of it, and their names."""
    allocatable = node_allocatable(node)
    daemonsets = [p for p in cluster_addon_pods(node.cloud) if p.per_node]
    free = NodeResources(
        cpu_millicores=allocatable.cpu_millicores - sum(p.cpu_millicores for p in daemonsets),
        memory_mib=allocatable.memory_mib - sum(p.memory_mib for p in daemonsets),
        pods=allocatable.pods - len(daemonsets),
    )
    return allocatable, free, tuple(p.name for p in daemonsets)


Replicas = Literal["min", "max"]
"""A workload at its floor or its ceiling."""


def _replicas(pod: SystemPod, replicas: Replicas) -> int:
    return pod.min_replicas if replicas == "min" else pod.max_replicas


def unplaced(pods: Sequence[SystemPod], replicas: Replicas, nodes: int, free: NodeResources) -> list[str]:
    """The pods (one name per pod) that find no node when ``nodes`` nodes of ``free`` each take them first-fit,
    largest share of a node first; empty when all are placed."""
    wanted = [pod for pod in pods for _ in range(_replicas(pod, replicas))]

    def share(pod: SystemPod) -> float:
        return max(pod.cpu_millicores / max(free.cpu_millicores, 1), pod.memory_mib / max(free.memory_mib, 1))

    left = [[free.cpu_millicores, free.memory_mib, free.pods] for _ in range(nodes)]
    missing: list[str] = []
    for pod in sorted(wanted, key=share, reverse=True):
        slot = next((s for s in left if s[0] >= pod.cpu_millicores and s[1] >= pod.memory_mib and s[2] >= 1), None)
        if slot is None:
            missing.append(pod.name)
            continue
        slot[0] -= pod.cpu_millicores
        slot[1] -= pod.memory_mib
        slot[2] -= 1
    return missing


def _oversized(pods: Sequence[SystemPod], free: NodeResources) -> list[SystemPod]:
    return [p for p in pods if p.cpu_millicores > free.cpu_millicores or p.memory_mib > free.memory_mib]


def _fits(pods: Sequence[SystemPod], node: SystemNodeType, nodes: tuple[int, int]) -> bool:
    """Whether every pod fits one node, the floor the minimum nodes and the ceiling the maximum."""
    _, free, _ = _free(node)
    return (
        not _oversized(pods, free)
        and not unplaced(pods, "min", nodes[0], free)
        and not unplaced(pods, "max", nodes[1], free)
    )


def _counted(names: Sequence[str]) -> str:
    order = list(dict.fromkeys(names))
    return ", ".join(f"{name} x{names.count(name)}" for name in order)


def _larger_type(pods: Sequence[SystemPod], node: SystemNodeType, nodes: tuple[int, int]) -> str | None:
    """The smallest node type of the same cloud on which everything fits at these node counts, the same family
    (``m7i``, ``e2``) first."""
    family = node.name.split(".")[0] if node.cloud == "aws" else node.name.split("-")[0]
    candidates = sorted(
        (t for t in system_node_types(node.cloud) if t.vcpus > node.vcpus),
        key=lambda t: (t.vcpus, not t.name.startswith(family), t.name),
    )
    return next((t.name for t in candidates if _fits(pods, t, nodes)), None)


def _node_capacity(
    node: SystemNodeType, allocatable: NodeResources, free: NodeResources, daemonsets: tuple[str, ...]
) -> str:
    after = f"after its DaemonSets ({', '.join(daemonsets)})" if daemonsets else "(no DaemonSet counted)"
    return (
        f"one {node.name} node allocates {_cpu(allocatable.cpu_millicores)} and {_mem(allocatable.memory_mib)}, "
        f"{_cpu(free.cpu_millicores)} and {_mem(free.memory_mib)} {after}"
    )


def _packing_problem(
    pods: Sequence[SystemPod],
    node: SystemNodeType,
    nodes: tuple[int, int],
    *,
    capacity: str,
    keys: tuple[str, str | None],
) -> str | None:
    """Why the pods at their floor (on the minimum nodes) or ceiling (on the maximum) find no packing, or None."""
    type_key, nodes_key = keys
    _, free, _ = _free(node)
    floor_and_ceiling: tuple[tuple[Replicas, int], ...] = (("min", nodes[0]), ("max", nodes[1]))
    for replicas, count in floor_and_ceiling:
        missing = unplaced(pods, replicas, count, free)
        if not missing:
            continue
        wanted = [(_replicas(p, replicas), p) for p in pods]
        cpu = sum(n * p.cpu_millicores for n, p in wanted)
        memory = sum(n * p.memory_mib for n, p in wanted)
        group = "minimum" if replicas == "min" else "maximum"
        fixes = _fixes(pods, node, nodes, type_key, nodes_key)
        return (
            f"{PLATFORM_KEY}.{nodes_key or type_key}: at the {'floor' if replicas == 'min' else 'ceiling'} "
            f"({', '.join(f'{p.name} x{n}' for n, p in wanted)}) the system pods request {_cpu(cpu)} and "
            f"{_mem(memory)}, more than {count} {node.name} nodes (the group's {group}) hold: {capacity}; "
            f"left without a node: {_counted(missing)}; fix: {' or '.join(fixes) or 'fewer gateway pods or workers'}"
        )
    return None


def check_system_nodes(
    cluster: ServingCluster,
    type_key: str,
    node: SystemNodeType,
    nodes: tuple[int, int],
    pods: Sequence[SystemPod],
    *,
    nodes_key: str | None,
) -> SystemNodesSizing:
    """The verdict on ``pods`` over ``nodes`` (min, max) nodes of ``node``: each pod on one node, then every pod at
    its floor on the minimum nodes and at its ceiling on the maximum. ``type_key`` is the stack key of the node type;
    ``nodes_key`` that of the node count (``cluster.system_nodes``), or None where the count is the platform's."""
    allocatable, free, daemonsets = _free(node)
    capacity = _node_capacity(node, allocatable, free, daemonsets)
    problems: list[str] = []
    too_big = _oversized(pods, free)
    if too_big:
        larger = _larger_type(pods, node, nodes)
        asks = " or ".join(f"{p.name} pods ({_cpu(p.cpu_millicores)} and {_mem(p.memory_mib)} each)" for p in too_big)
        fix = f"{type_key.rpartition('.')[2]} {larger}" if larger else _smaller_pods(too_big)
        problems.append(
            f"{PLATFORM_KEY}.{type_key}: {node.name} system nodes cannot run {asks}: {capacity}; fix: {fix}"
        )
    else:
        packing = _packing_problem(pods, node, nodes, capacity=capacity, keys=(type_key, nodes_key))
        problems += [packing] if packing else []
    return SystemNodesSizing(
        cluster=cluster,
        type_key=type_key,
        instance_type=node.name,
        min_nodes=nodes[0],
        max_nodes=nodes[1],
        allocatable=allocatable,
        free=free,
        daemonsets=daemonsets,
        pods=tuple(pods),
        problems=tuple(problems),
    )


POD_SIZE_KEYS: dict[str, str] = {"gateway": "gateway.processor_workers", "cache-embedder": "cache.embedder.cpus"}
"""The stack key that sets the size of each of the platform's own system pods."""


def _smaller_pods(too_big: Sequence[SystemPod]) -> str:
    """The fix when no catalog node type holds a pod: smaller pods, named by the key that sizes them."""
    keys = list(dict.fromkeys(POD_SIZE_KEYS[p.name] for p in too_big if p.name in POD_SIZE_KEYS))
    return f"fewer {' and '.join(keys)} (no catalog type fits)" if keys else "no catalog type fits"


def _fixes(
    pods: Sequence[SystemPod], node: SystemNodeType, nodes: tuple[int, int], type_key: str, nodes_key: str | None
) -> list[str]:
    """Concrete changes that fit, each checked: more nodes of this type (where the stack sets the count), a larger
    type at this count, and the next larger type of the family with the fewest nodes it needs."""
    type_field = type_key.rpartition(".")[2]
    fixes: list[str] = []
    if nodes_key is not None:
        nodes_field = nodes_key.rpartition(".")[2]
        count = _fewest_nodes(pods, node)
        fixes += [f"{nodes_field} {count}"] if count is not None else []
        family = node.name.split(".")[0]
        bigger = [t for t in system_node_types(node.cloud) if t.vcpus > node.vcpus and t.name.startswith(family)]
        count = _fewest_nodes(pods, bigger[0]) if bigger else None
        if count is not None and count != nodes[0]:
            fixes.append(f"{type_field} {bigger[0].name} with {nodes_field} {count}")
    larger = _larger_type(pods, node, nodes)
    fixes += [f"{type_field} {larger}"] if larger else []
    return fixes


def _fewest_nodes(pods: Sequence[SystemPod], node: SystemNodeType) -> int | None:
    """The fewest ``system_nodes`` of ``node`` (group maximum :data:`EKS_SYSTEM_SCALE_OUT` x it) that hold the pods."""
    return next((n for n in range(1, MAX_SYSTEM_NODES + 1) if _fits(pods, node, (n, EKS_SYSTEM_SCALE_OUT * n))), None)


def system_node_counts(spec: PlatformSpec, cluster: ServingCluster) -> tuple[SystemNodeType, tuple[int, int]]:
    """``cluster``'s system node type and its (minimum, maximum) nodes."""
    if cluster == "eks":
        eks_nodes = (spec.cluster.system_nodes, EKS_SYSTEM_SCALE_OUT * spec.cluster.system_nodes)
        return get_system_node_type(spec.cluster.system_instance_type), eks_nodes
    assert spec.gcp is not None  # a GKE cluster exists only with a gcp section
    return get_system_node_type(spec.gcp.system_machine_type), gke_system_pool_nodes(spec.environment)


def size_system_nodes(
    spec: PlatformSpec, embedder: EmbedderSizing | None, prometheus: Sequence[PrometheusSizing] = ()
) -> tuple[SystemNodesSizing, ...]:
    """The verdict for each cluster's system nodes: EKS always, GKE when a pool runs there (``prometheus``: each
    cluster's Prometheus that runs there)."""
    monitors = {p.cluster: p for p in prometheus}
    eks_nodes = (spec.cluster.system_nodes, EKS_SYSTEM_SCALE_OUT * spec.cluster.system_nodes)
    verdicts = [
        check_system_nodes(
            "eks",
            "cluster.system_instance_type",
            get_system_node_type(spec.cluster.system_instance_type),
            eks_nodes,
            system_pods(spec, "eks", embedder, monitors.get("eks")),
            nodes_key="cluster.system_nodes",
        )
    ]
    if spec.gcp is not None and any(serving_cluster(spec, m) == "gke" for m in spec.models):
        verdicts.append(
            check_system_nodes(
                "gke",
                "gcp.system_machine_type",
                get_system_node_type(spec.gcp.system_machine_type),
                gke_system_pool_nodes(spec.environment),
                system_pods(spec, "gke", embedder, monitors.get("gke")),
                nodes_key=None,
            )
        )
    return tuple(verdicts)
