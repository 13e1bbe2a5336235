"""Sizing as tables for a terminal: one model on one accelerator, or a whole platform (``size`` and ``preview``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from inferplane.components.capacity.sizing import GIB, PlatformSizing, SizingResult


def _gib(value: float) -> str:
    return f"{value / GIB:,.1f} GiB"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def _kv_pool(result: SizingResult) -> str:
    """The device's KV pool, and the host tier beside it when there is one."""
    device = _gib(max(result.kv_pool_bytes, 0))
    return f"{device} + {_gib(result.host_kv_cache_bytes)} host" if result.host_kv_cache_bytes else device


def render_result(console: Console, result: SizingResult) -> None:
    """A readable table for one sizing result."""
    table = Table(title=f"{result.model} on {result.accelerator}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    rows = [
        ("fits", "[green]yes[/green]" if result.fits else "[red]no[/red]"),
        ("tensor parallel", str(result.tensor_parallel_size)),
        ("weights", f"{_gib(result.weights_bytes)} ({result.weights_dtype})"),
        ("KV cache per token", f"{result.kv_cache_bytes_per_token:,} bytes ({result.kv_cache_dtype})"),
        ("KV cache required", f"{_gib(result.kv_cache_bytes_required)} ({result.context} x {result.concurrency})"),
        ("usable memory", f"{_gib(result.usable_bytes)} at {result.gpu_memory_utilization}"),
        ("runtime reserve", _gib(result.reserve_bytes)),
        ("KV pool", _gib(result.kv_pool_bytes)),
        ("host KV tier", _gib(result.host_kv_cache_bytes) if result.host_kv_cache_bytes else "none"),
        ("max sequences at context", str(result.max_concurrent_sequences)),
        ("decode estimate", f"{result.decode_tokens_per_second:,.0f} tokens/s, {result.decode_step_ms} ms/step"),
        ("cold start", f"{result.cold_start_seconds:,.0f} s (fetch {result.weights_fetch_seconds:,.0f} s)"),
    ]
    for what, value in rows:
        table.add_row(what, value)
    console.print(table)
    if not result.fits:
        console.print(f"[red]refused:[/red] {result.reason}")
        for alternative in result.alternatives:
            console.print(f"  - {alternative}")
        return
    flags = result.vllm
    console.print(
        "vLLM: "
        f"--tensor-parallel-size {flags.tensor_parallel_size} --max-model-len {flags.max_model_len} "
        f"--max-num-seqs {flags.max_num_seqs} --max-num-batched-tokens {flags.max_num_batched_tokens} "
        f"--gpu-memory-utilization {flags.gpu_memory_utilization} --kv-cache-dtype {flags.kv_cache_dtype} "
        f"--dtype {flags.dtype}"
        + (f" --quantization {flags.quantization}" if flags.quantization else "")
        + (f" --kv-offloading-size {flags.kv_offloading_size_gib}" if flags.kv_offloading_size_gib else "")
        + (f" (KV transfer: {flags.kv_transfer.role}, {flags.kv_transfer.backend})" if flags.kv_transfer else "")
    )
    trt = result.trtllm
    console.print(
        f"TensorRT-LLM: tp {trt.tensor_parallel}, max_batch_size {trt.max_batch_size}, max_input_len "
        f"{trt.max_input_len}, max_seq_len {trt.max_seq_len}, kv_cache_free_gpu_mem_fraction "
        f"{trt.kv_cache_free_gpu_mem_fraction}"
    )
    sglang = result.sglang
    console.print(
        f"SGLang: --tp-size {sglang.tp_size} --context-length {sglang.context_length} --max-running-requests "
        f"{sglang.max_running_requests} --mem-fraction-static {sglang.mem_fraction_static} --chunked-prefill-size "
        f"{sglang.chunked_prefill_size} --kv-cache-dtype {sglang.kv_cache_dtype} --schedule-policy "
        f"{sglang.schedule_policy}" + (f" --quantization {sglang.quantization}" if sglang.quantization else ""),
        markup=False,
        highlight=False,
    )


def sizing_table(plan: PlatformSizing) -> Table:
    """The per-model sizing table the preview and ``size --stack`` print."""
    table = Table(title="Sizing", title_justify="left")
    for column in (
        "model",
        "pool",
        "accelerator",
        "TP",
        "fits",
        "max seqs",
        "KV pool",
        "decode tok/s",
        "cold start",
        "$/h min",
        "$/h max",
    ):
        table.add_column(column)
    for d in (role for deployment in plan.deployments for role in deployment.roles):
        r = d.result
        table.add_row(
            d.name if d.role == "aggregated" else f"{d.name} ({d.role})",
            d.pool,
            f"{r.accelerator} ({d.instance_type})",
            str(r.tensor_parallel_size),
            "[green]yes[/green]" if r.fits else "[red]no[/red]",
            str(r.max_concurrent_sequences),
            _kv_pool(r),
            # A prefill replica runs no decodes.
            "-" if d.role == "prefill" else f"{r.decode_tokens_per_second:,.0f}",
            f"{r.cold_start_seconds:,.0f} s",
            _usd(d.hourly_usd_min),
            _usd(d.hourly_usd_max),
        )
    return table


def system_nodes_table(plan: PlatformSizing) -> Table:
    """Each cluster's system nodes: per node after its DaemonSets, and what the pods request at floor and ceiling."""
    table = Table(title="System nodes", title_justify="left")
    for column in ("cluster", "instance", "nodes min", "nodes max", "per node (after DaemonSets)", "floor", "ceiling"):
        table.add_column(column)
    for verdict in plan.system_nodes:
        free = verdict.free
        requested = [
            (
                sum(count * p.cpu_millicores for count, p in pods),
                sum(count * p.memory_mib for count, p in pods),
            )
            for pods in (
                [(p.min_replicas, p) for p in verdict.pods],
                [(p.max_replicas, p) for p in verdict.pods],
            )
        ]
        table.add_row(
            verdict.cluster,
            verdict.instance_type,
            str(verdict.min_nodes),
            str(verdict.max_nodes),
            f"{free.cpu_millicores / 1000:g} CPU, {free.memory_mib / 1024:.1f} GiB",
            *(f"{cpu / 1000:g} CPU, {mib / 1024:.1f} GiB" for cpu, mib in requested),
        )
    return table


def render_platform(console: Console, plan: PlatformSizing) -> None:
    """Sizing table, pool table, totals and problems."""
    console.print(sizing_table(plan))
    pools = Table(title="Pools", title_justify="left")
    for column in ("pool", "instance", "nodes min", "nodes max", "$/node-h", "$/h min", "$/h max"):
        pools.add_column(column)
    for p in plan.pools:
        pools.add_row(
            p.name,
            p.instance_type,
            str(p.min_nodes),
            str(p.max_nodes),
            _usd(p.node_hourly_usd),
            _usd(p.hourly_usd_min),
            _usd(p.hourly_usd_max),
        )
    console.print(pools)
    if plan.system_nodes:
        console.print(system_nodes_table(plan))
    for m in plan.prometheus:
        console.print(
            f"prometheus ({m.cluster}): {m.replicas} pods x ({m.cpu_millicores / 1000:g} CPU, {m.memory_mib} MiB) on "
            f"the system nodes, for about {m.series:,} series ({m.samples_per_second:,.0f} samples/s); "
            f"{m.retention_days} days need {m.disk_gib:,.1f} GiB of the {m.retention_gib:,.1f} GiB it may fill "
            f"({m.volume_gib} GiB volume)"
        )
    if plan.embedder is not None:
        e = plan.embedder
        console.print(
            f"semantic cache embedder: {e.model} served on the system nodes' CPUs, {e.replicas}-{e.max_replicas} pods "
            f"(autoscaled at {e.target_cpu_utilization}% CPU) x ({e.cpus} CPU, {e.memory_bytes // 2**20} MiB), "
            f"{e.dimensions} dimensions, start ~{e.start_seconds:.0f} s"
        )
    for d in plan.deployments:
        if d.transfer is not None:
            t = d.transfer
            time = "no EFA device" if t.seconds_at_context is None else f"{t.seconds_at_context * 1000:,.0f} ms"
            fabric = f"EFA, {t.efa_interfaces} interfaces" if t.backend == "LIBFABRIC" else "TCP"
            console.print(
                f"KV transfer ({d.name}): NIXL {t.backend} over {fabric}, {t.bytes_per_second / 1e9:,.1f} GB/s; a "
                f"{t.context:,}-token prompt moves {t.bytes_at_context / 1e9:,.2f} GB in {time} (TTFT objective "
                f"{t.ttft_slo_ms} ms)"
            )
    console.print(
        f"{plan.environment}: {plan.total_gpus_max} accelerators at max scale, "
        f"{_usd(plan.hourly_usd_min)}/h at min, {_usd(plan.hourly_usd_max)}/h at max (on-demand)"
    )
    for problem in plan.problems:
        console.print(f"[red]refused:[/red] {problem}")
