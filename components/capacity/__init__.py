"""Sizing and planning: what fits, how fast it runs, and the cheapest plan that meets a workload.

Owns the physics (:mod:`.sizing`: weights, KV cache, tensor parallelism within a node, every engine setting), the
performance model (:mod:`.perf_model`: prefill, decode and latency from bandwidth and FLOPs) and the planner
(:mod:`.planner`: the cheapest accelerator, parallelism and replica count within the objectives), and a replica's
share of its node's CPU and host memory with the host KV tier carved from it (:mod:`.host_memory`), and a
disaggregated model's KV transfer between its roles (:mod:`.kv_transfer`: bytes, fabric, rate, the TTFT check) and
its roles' queues (:mod:`.disaggregated`: prefill replicas, decode replicas, TTFT across both, which the planner weighs
against aggregated replicas). Pure: no Pulumi.

May import: :mod:`~inferplane.components.catalog`, :mod:`~inferplane.components.spec`.
"""
