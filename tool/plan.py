"""``inferplane plan``: the cheapest configuration for a workload, printed, and optionally written into a stack.

The search is :func:`components.capacity.planner.plan`; this module turns arguments into a workload, prints the
candidates, and with ``--write-stack S`` adds the first candidate the stack's limits accept to ``stacks/Pulumi.S.yaml``
as one model deployment, on a pool of the stack that matches the candidate's hardware or on a new pool with a name no
other pool has (ruamel.yaml round trip: comments and key order stay). Before writing, the edited platform is validated
and sized as ``preview`` would, from the very values ``size`` and ``preview`` validate (so a file gets one verdict
in every command); a candidate that breaks a limit is skipped with the reason, and when none is accepted nothing is
written (exit 1). The file is replaced by rename, never rewritten in place: any failure leaves it as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import itertools
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, cast, get_args

import annotated_types
import yaml
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table
from ruamel.yaml import YAML
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import YAMLError
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.planner import REFUSED_SHARE, Candidate, Filters, Plan, ServingMode, Workload, plan
from inferplane.components.capacity.sizing import SizingResult, size_platform
from inferplane.components.catalog import (
    PRICES,
    Accelerator,
    ModelArchitecture,
    get_accelerator,
    get_instance_type,
    get_model,
)
from inferplane.components.catalog.accelerators import AcceleratorId
from inferplane.components.catalog.models import MAX_CONTEXT_TOKENS
from inferplane.components.spec.buildable import validate_platform
from inferplane.components.spec.platform_spec import (
    MAX_GPUS_PER_REPLICA,
    PLATFORM_KEY,
    AdmissionSpec,
    CapacityType,
    Engine,
    Name,
    PoolSpec,
    SloSpec,
    SpecError,
    WeightsDtype,
)
from inferplane.tool.exitcodes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from inferplane.tool.files import os_reason
from inferplane.tool.stackfile import Stack, StackFileError, find_project_dir, load_stack, parse_yaml, printable

MAX_REQUESTS_PER_SECOND = 100_000.0
"""``--requests-per-second`` and ``--peak-requests-per-second`` at most. Generous: at this rate an 8B model at 500
tokens in and 200 out needs thousands of replicas, far past the 256 one deployment may have (the spec's
``max_replicas``); the bound keeps the search's arithmetic finite (``1e20`` used to plan 5e18 replicas)."""
MIN_REQUESTS_PER_SECOND = 0.001
"""At least one request in about 17 minutes: a lower rate plans the same single replica, and one near zero made the
headroom (capacity over the rate) overflow to infinity, which JSON cannot hold."""


def _ceiling(spec: type[SloSpec] | type[AdmissionSpec], field: str) -> float:
    """The spec's upper bound on ``field``: the flag's value is the stack's setting, so it holds the same."""
    bound = next(m.le for m in spec.model_fields[field].metadata if isinstance(m, annotated_types.Le))
    return float(cast(float, bound))


MAX_TTFT_P95_MS = _ceiling(SloSpec, "ttft_p95_ms")
"""``--ttft-p95-ms`` at most (600,000 ms)."""
MAX_ITL_P95_MS = _ceiling(SloSpec, "itl_p95_ms")
"""``--itl-p95-ms`` at most (60,000 ms)."""
MAX_QUEUE_TIMEOUT_SECONDS = _ceiling(AdmissionSpec, "queue_timeout_seconds")
"""``--queue-timeout-seconds`` at most (60 s): ``gateway.admission.queue_timeout_seconds``'s bound."""
MAX_TOP = 1000
"""``--top`` at most: more rows than any search returns."""
GPU_ONLY_ENGINES: dict[Engine, str] = {"triton": "TensorRT-LLM", "sglang": "SGLang"}
"""The engines whose images serve NVIDIA GPUs only (the spec refuses them on TPU pools), by their product names:
``--engine`` with one of them and only TPU accelerators is refused as a flag, not searched to an empty plan."""
MAX_NAME_LENGTH = 40
"""A pool or deployment name is an RFC 1123 label of at most 40 characters (the spec's ``Name``)."""
_NAME = TypeAdapter(Name)


class _BadArgumentError(Exception):
    """An argument refused before any planning; ``str()`` is the message, naming the flag."""


def _invalid(err: Console, message: str) -> int:
    err.print(printable(f"inferplane plan: {message}"), markup=False, highlight=False)
    return EXIT_INVALID


def _cloud_for_region(region: str | None) -> str | None:
    if region is None:
        return None
    for cloud, book in (("aws", PRICES.aws), ("gcp", PRICES.gcp)):
        if book.region == region:
            return cloud
    raise ValueError(f"--region {region}: prices are known for {PRICES.aws.region} (aws) and {PRICES.gcp.region} (gcp)")


def keda_threshold(candidate: Candidate) -> int:
    """The autoscaler's queue threshold for the candidate's batch, from the function the ScaledObject uses."""
    from inferplane.components.observability.keda import target_waiting_per_replica  # noqa: PLC0415 - loads Pulumi only here

    return target_waiting_per_replica(candidate.max_num_seqs)


def _row(candidate: Candidate) -> dict[str, Any]:
    data = candidate.model_dump(mode="json")
    data["keda_target_waiting_per_replica"] = keda_threshold(candidate)
    return data


@dataclass(frozen=True)
class _Destination:
    """Where ``--write-stack`` writes: the stack (read and validated once) and the checked deployment name."""

    stack: Stack
    name: str


def plan_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Run ``inferplane plan``: every argument is checked (and the stack to write read) before the search."""
    try:
        workload, filters = _workload_and_filters(args)
        destination = _destination(args, err)
        if destination is not None:
            # The plan is written into this stack, so its gateway's admission is the one in front of the replicas.
            if args.queue_timeout_seconds is not None:
                raise _BadArgumentError(
                    f"--queue-timeout-seconds: with --write-stack the stack's gateway.admission applies "
                    f"({destination.stack.display_file}); set it there"
                )
            workload = replace(workload, admission=destination.stack.platform.gateway.admission)
    except _BadArgumentError as exc:
        return _invalid(err, str(exc))
    result = plan(workload, filters)
    written: str | None = None
    if destination is not None:
        code, written = _write_stack(args, workload, result, destination, err)
        if code != EXIT_OK:
            return code
    shown = result.candidates[: args.top]
    if args.json:
        if not result.candidates:  # stdout holds only the JSON document; the reason goes where people read it
            err.print(f"inferplane plan: {why_none(result)}", markup=False, highlight=False)
        document: dict[str, Any] = {"candidates": [_row(c) for c in shown]}
        if written is not None:
            document["written"] = written
        out.print_json(json.dumps(document))
    else:
        _render(out, workload, result, shown)
        if written is not None:
            out.print(written, markup=False, highlight=False)
    return EXIT_OK if result.candidates else EXIT_REFUSED


def _workload_and_filters(args: argparse.Namespace) -> tuple[Workload, Filters]:
    """The workload and the search filters the flags describe; raises :class:`_BadArgumentError`."""
    try:
        model = get_model(args.model)
    except KeyError as exc:
        raise _BadArgumentError(str(exc.args[0])) from None
    if args.input_tokens + args.output_tokens > model.max_context:
        raise _BadArgumentError(
            f"--input-tokens + --output-tokens exceed the {model.max_context} tokens {args.model} supports"
        )
    peak = args.peak_requests_per_second or args.requests_per_second
    if peak < args.requests_per_second:
        raise _BadArgumentError("--peak-requests-per-second is below --requests-per-second")
    try:
        cloud = _cloud_for_region(args.region)
    except ValueError as exc:
        raise _BadArgumentError(str(exc)) from None
    _check_engine_accelerators(args.engine, args.accelerator or [])
    workload = Workload(
        model=model,
        model_label=args.model,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        requests_per_second=args.requests_per_second,
        peak_requests_per_second=peak,
        ttft_p95_ms=args.ttft_p95_ms,
        itl_p95_ms=args.itl_p95_ms,
        admission=AdmissionSpec()
        if args.queue_timeout_seconds is None
        else AdmissionSpec(queue_timeout_seconds=args.queue_timeout_seconds),
    )
    filters = Filters(
        serving=tuple(dict.fromkeys(cast(list[ServingMode], args.serving))) if args.serving else Filters().serving,
        accelerators=tuple(cast(list[AcceleratorId], args.accelerator or [])),
        engines=(cast(Engine, args.engine),) if args.engine else Filters().engines,
        weights_dtypes=tuple(cast(list[WeightsDtype], args.weights_dtype or ["bf16"])),
        capacity_type=cast(CapacityType, args.capacity_type),
        max_gpus=args.max_gpus,
        cloud=cloud,
    )
    return workload, filters


def _check_engine_accelerators(engine: str | None, accelerators: list[str]) -> None:
    """``--engine`` triton or sglang with ``--accelerator`` naming only TPUs: refused, naming both flags."""
    if engine not in GPU_ONLY_ENGINES or not accelerators:
        return
    if all(get_accelerator(a).vendor == "google" for a in accelerators):
        raise _BadArgumentError(
            f"--engine {engine} ({GPU_ONLY_ENGINES[engine]}) serves NVIDIA GPUs; "
            f"--accelerator {', '.join(accelerators)} names only TPUs"
        )


def _destination(args: argparse.Namespace, err: Console) -> _Destination | None:
    """``--write-stack`` and ``--name`` checked: the stack read and writable, the name valid and not taken.

    Raises :class:`_BadArgumentError`; a stack file that cannot be read or is invalid raises the stack file's own error
    (exit 2 naming it). A name given with ``--name`` that is written differently is said on stderr.
    """
    if args.write_stack is None:
        if args.name is not None:
            raise _BadArgumentError("--name names the deployment --write-stack adds; give --write-stack S too")
        return None
    name = _name(args.name if args.name is not None else args.model)
    try:
        _NAME.validate_python(name)
    except ValidationError:
        given = "--name" if args.name is not None else "the model id"
        raise _BadArgumentError(
            f"{given} {(args.name if args.name is not None else args.model)!r}: a deployment name is a lower-case "
            f"RFC 1123 label (a letter first, then letters, digits and '-'), at most {MAX_NAME_LENGTH} characters"
        ) from None
    if args.name is not None and name != args.name:
        err.print(printable(f"inferplane plan: --name {args.name!r} is written as {name!r}"), markup=False)
    project_dir = find_project_dir(Path(args.project_dir) if args.project_dir is not None else None)
    stack = load_stack(project_dir, args.write_stack)
    if name in {m.name for m in stack.platform.models}:
        flag = "--name" if args.name is not None else "the default name (the model id; give --name)"
        raise _BadArgumentError(f"{flag} {name}: {stack.display_file} already deploys a model named {name}")
    problem = _unwritable(stack.config_file)
    if problem is not None:
        raise _BadArgumentError(f"--write-stack {args.write_stack}: {stack.display_file}: {problem}")
    return _Destination(stack=stack, name=name)


def why_none(result: Plan) -> str:
    """Why the search returned no candidate, in one line: the reasons it dropped configurations for."""
    reasons = sorted({r.reason.split(":")[0] for r in result.rejections})
    return (
        "no configuration fits and meets the objectives; dropped for: "
        f"{', '.join(reasons) or 'no catalog configuration matches the filters'}"
    )


def _serving(c: Candidate) -> str:
    """``aggregated``, or ``xPyD`` (prefill and decode replicas at the steady rate) with the prefill role's TP."""
    if c.serving == "aggregated":
        return "aggregated"
    return f"{c.prefill_replicas}P{c.replicas}D, P TP {c.prefill_tensor_parallel_size}"


def _written_replicas(c: Candidate) -> str:
    if c.serving == "aggregated":
        return f"{c.replicas}-{c.max_replicas} replicas"
    return (
        f"decode {c.replicas}-{c.max_replicas} replicas, prefill {c.prefill_replicas}-{c.prefill_max_replicas} "
        f"of TP {c.prefill_tensor_parallel_size}"
    )


def _replicas(c: Candidate) -> str:
    if c.serving == "aggregated":
        return f"{c.replicas}-{c.max_replicas}"
    return f"P {c.prefill_replicas}-{c.prefill_max_replicas}, D {c.replicas}-{c.max_replicas}"


def _render(out: Console, workload: Workload, result: Plan, shown: tuple[Candidate, ...]) -> None:
    out.print(
        f"{workload.model_label}: {workload.requests_per_second:g} req/s (peak {workload.peak_requests_per_second:g}), "
        f"{workload.input_tokens} in / {workload.output_tokens} out tokens, TTFT p95 <= {workload.ttft_p95_ms:g} ms, "
        f"ITL p95 <= {workload.itl_p95_ms:g} ms, behind a gateway that holds a request at most "
        f"{workload.admission.queue_timeout_seconds:g} s for a slot (refusing at most {REFUSED_SHARE:.1%})"
    )
    out.print(
        f"weight precisions considered: {', '.join(result.weights_dtypes)} (quantization changes outputs; allow "
        "others with --weights-dtype; an fp8 KV cache only when fp8 is allowed)"
    )
    table = Table(title="Candidates, cheapest first", title_justify="left")
    for column in (
        "#", "accelerator", "instance", "TP", "engine", "weights/KV", "serving", "replicas", "$/h", "$/M out",
        "TTFT p95", "KV move", "ITL p95", "tok/s/replica", "headroom", "limit",
    ):  # fmt: skip
        table.add_column(column)
    for index, c in enumerate(shown, start=1):
        table.add_row(
            str(index), c.accelerator, c.instance_type, str(c.tensor_parallel_size), c.engine,
            f"{c.weights_dtype}/{c.kv_cache_dtype}", _serving(c), _replicas(c), f"{c.hourly_cost_usd:,.2f}",
            f"{c.cost_per_million_output_tokens_usd:,.2f}", f"{c.ttft_p95_ms:,.0f} ms",
            "-" if c.serving == "aggregated" else f"{c.kv_transfer_ms:,.0f} ms", f"{c.itl_p95_ms:,.1f} ms",
            f"{c.max_output_tokens_per_second:,.0f}", f"{c.headroom:.0%}", c.limit,
        )  # fmt: skip
    out.print(table)
    if not result.candidates:
        out.print("[red]no configuration fits and meets the objectives[/red]")
        reasons = sorted({r.reason.split(":")[0] for r in result.rejections})
        out.print(f"dropped for: {', '.join(reasons) or 'no catalog configuration matches the filters'}")


# --- the performance lines of ``inferplane size`` ---------------------------------------------------------------


def size_performance(
    args: argparse.Namespace, model: ModelArchitecture, accelerator: Accelerator, result: SizingResult
) -> dict[str, float]:
    """``max_output_tokens_per_second`` (one replica at saturation for the mix) and ``single_stream_itl_ms``."""
    replica = perf_model.replica_from_sizing(result, model, accelerator, cast(Engine, args.engine))
    mix = perf_model.Workload(input_tokens=args.input_tokens, output_tokens=args.output_tokens)
    return {
        "max_output_tokens_per_second": round(perf_model.saturation(replica, mix).output_tokens_per_second, 1),
        "single_stream_itl_ms": round(perf_model.single_stream_itl_ms(replica, mix), 2),
    }


def render_performance(out: Console, args: argparse.Namespace, performance: dict[str, float]) -> None:
    """One line under the sizing table."""
    out.print(
        f"{args.engine}, {args.input_tokens} in / {args.output_tokens} out: "
        f"{performance['max_output_tokens_per_second']:,.0f} output tokens/s at saturation (one replica, at most "
        f"{args.concurrency} sequences), {performance['single_stream_itl_ms']} ms per token for a single stream"
    )


# --- writing the stack ---------------------------------------------------------------------------------------


def _name(text: str) -> str:
    return text.replace(".", "-").replace("_", "-").lower()[:MAX_NAME_LENGTH].strip("-")


def _numbered(base: str, number: int) -> str:
    """``base-N``, ``base`` shortened so that the name stays within :data:`MAX_NAME_LENGTH` characters."""
    suffix = f"-{number}"
    return base[: MAX_NAME_LENGTH - len(suffix)].rstrip("-") + suffix


def _unique(base: str, taken: set[str]) -> str:
    """``base``, or ``base-2``, ``base-3``...: the first name no pool has yet."""
    if base not in taken:
        return base
    return next(name for name in map(partial(_numbered, base), itertools.count(2)) if name not in taken)


def _named_by_plan(name: str, base: str) -> bool:
    """Whether ``name`` is one :func:`_unique` makes from ``base``: a pool an earlier ``--write-stack`` wrote."""
    numbered = re.fullmatch(r".*-([1-9][0-9]*)", name)
    return name == base or (numbered is not None and _numbered(base, int(numbered[1])) == name)


def _pool_fields(args: argparse.Namespace, c: Candidate, stack: Stack) -> dict[str, Any]:
    """The pool a candidate needs, without its name. A disaggregated candidate on a node type with EFA gets an EFA pool
    (its KV transfer was planned over EFA), pinned to the platform's first zone: a cluster placement group, and EFA,
    stay in one zone."""
    instance = get_instance_type(c.instance_type)
    if instance.cloud == "gcp":
        return {
            "accelerator": c.accelerator,
            "instance_type": c.instance_type,
            "tpu_topology": instance.tpu_topologies[0],
        }
    fields = {"accelerator": c.accelerator, "instance_type": c.instance_type, "capacity_type": args.capacity_type}
    if c.serving == "disaggregated" and instance.efa_max_interfaces > 0:
        fields.update(efa=True, zone=stack.platform.zones[0])
    return fields


def _matches(pool: PoolSpec, fields: dict[str, Any]) -> bool:
    """Whether the stack's ``pool`` is the hardware ``fields`` ask for (a field left out: the spec's default)."""
    wanted = {"capacity_type": PoolSpec.model_fields["capacity_type"].default, "tpu_topology": None, **fields}
    return all(getattr(pool, key) == value for key, value in wanted.items())


def _placements(args: argparse.Namespace, c: Candidate, stack: Stack) -> list[dict[str, Any]]:
    """The pools a candidate may run on, in order: a pool an earlier ``--write-stack`` wrote for the same hardware
    (reused: a second write never collides with the first), then a new pool named ``plan-<instance type>`` or, should
    a pool have that name already, the first free ``plan-<instance type>-N``. A reused pool is ``{"name": ...}``
    alone. The team's own pools are left to them, even when the hardware matches."""
    fields = _pool_fields(args, c, stack)
    base = _name(f"plan-{c.instance_type}")
    pools = stack.platform.pools
    reused = [{"name": p.name} for p in pools if _named_by_plan(p.name, base) and _matches(p, fields)][:1]
    return [*reused, {"name": _unique(base, {p.name for p in pools}), **fields}]


def _deployment(args: argparse.Namespace, workload: Workload, c: Candidate, name: str, pool: str) -> dict[str, Any]:
    deployment = {
        "name": name,
        "model": args.model,
        "engine": c.engine,
        "pool": pool,
        "weights_dtype": c.weights_dtype,
        "kv_cache_dtype": c.kv_cache_dtype,
        "max_context": c.max_context,
        "concurrency": c.max_num_seqs,
        "gpus_per_replica": c.tensor_parallel_size,
        "min_replicas": c.replicas,
        "max_replicas": c.max_replicas,
        "slo": {"ttft_p95_ms": math.ceil(workload.ttft_p95_ms), "itl_p95_ms": math.ceil(workload.itl_p95_ms)},
    }
    if c.serving == "disaggregated":
        # The model's own size and replicas are its decode role; the prefill role shares its pool.
        deployment["disaggregation"] = {
            "prefill": {
                "gpus_per_replica": c.prefill_tensor_parallel_size,
                "concurrency": c.prefill_max_num_seqs,
                "min_replicas": c.prefill_replicas,
                "max_replicas": c.prefill_max_replicas,
            }
        }
    return deployment


def _with(stack: Stack, pool: dict[str, Any], deployment: dict[str, Any]) -> dict[str, Any]:
    """The stack's platform as ``size`` and ``preview`` validated it (a copy of the same values, not a JSON round
    trip, which a ``!!set`` or ``!!binary`` value would not survive), with the deployment and a new pool added."""
    platform: dict[str, Any] = copy.deepcopy(dict(stack.config[PLATFORM_KEY]))
    if len(pool) > 1:  # a new pool; a reused one is only named
        platform.setdefault("pools", []).append(pool)
    platform.setdefault("models", []).append(deployment)
    return platform


def _problems(stack: Stack, platform: dict[str, Any]) -> list[str]:
    """What ``preview`` would refuse in ``platform``: the whole-stack validation, then the sizing and limits."""
    try:
        spec = validate_platform(platform, stack.platform.region)
    except SpecError as exc:
        return [str(exc)]
    return list(size_platform(spec).problems)


@dataclass(frozen=True)
class _Edit:
    """One candidate as the stack would take it: the pool (a new one, or ``{"name": ...}`` of a reused one), the
    deployment, and the whole platform they make, validated."""

    pool: dict[str, Any]
    deployment: dict[str, Any]
    platform: dict[str, Any]

    @property
    def new_pool(self) -> bool:
        return len(self.pool) > 1


def _accepted(args: argparse.Namespace, workload: Workload, c: Candidate, destination: _Destination) -> _Edit | str:
    """The first placement of ``c`` the stack accepts, or the first problem of the last one tried."""
    problems: list[str] = []
    for pool in _placements(args, c, destination.stack):
        deployment = _deployment(args, workload, c, destination.name, pool["name"])
        platform = _with(destination.stack, pool, deployment)
        problems = _problems(destination.stack, platform)
        if not problems:
            return _Edit(pool=pool, deployment=deployment, platform=platform)
    return problems[0]


def _write_stack(
    args: argparse.Namespace, workload: Workload, result: Plan, destination: _Destination, err: Console
) -> tuple[int, str | None]:
    stack = destination.stack
    skipped: list[str] = []
    for c in result.candidates:
        edit = _accepted(args, workload, c, destination)
        if isinstance(edit, str):
            skipped.append(f"{c.accelerator} {c.instance_type} TP {c.tensor_parallel_size}: {edit}")
            continue
        code = _save(stack, edit, err)
        if code != EXIT_OK:
            return code, None
        pool, name = edit.pool["name"], edit.deployment["name"]
        where = f"wrote pool {pool} and model {name}" if edit.new_pool else f"wrote model {name} on the pool {pool}"
        return EXIT_OK, (
            f"{where} to {stack.display_file} ({c.accelerator} {c.instance_type}, TP {c.tensor_parallel_size}, "
            f"{c.engine}, {_written_replicas(c)})"
            + (
                f"; skipped {len(skipped)} cheaper candidate(s) the stack refuses, first: {skipped[0]}"
                if skipped
                else ""
            )
        )
    if not result.candidates:
        message = f"nothing written to {stack.display_file}: {why_none(result)}"
    else:
        message = f"{stack.display_file} refuses every candidate; the cheapest would break: {skipped[0]}"
    err.print(printable(f"inferplane plan: {message}"), markup=False, highlight=False)
    return EXIT_REFUSED, None


def _save(stack: Stack, edit: _Edit, err: Console) -> int:
    """Write the stack file with the edit, only if the new text reads back as the platform that was validated."""
    source = stack.source
    assert source is not None  # load_stack keeps the text it read: the edit starts from it, not from a second read
    display = stack.display_file
    try:
        text = _edited(source, edit.pool if edit.new_pool else None, edit.deployment)
    except YAMLError as exc:
        return _failed(err, f"{display}: cannot edit it in place ({type(exc).__name__}); nothing was written")
    if _reread(text) != edit.platform:
        return _failed(err, f"{display}: the edit would not read back as validated; nothing was written")
    try:
        replace_file(stack.config_file, text)
    except _WriteError as exc:
        err.print(printable(f"inferplane plan: {display}: {exc}"), markup=False, highlight=False)
        return exc.code
    return EXIT_OK


def _reread(text: str) -> Any:
    """The platform block of ``text`` as the stack reader sees it; None when it has none.

    PyYAML reads the stack and ruamel.yaml edits it: two YAML implementations (1.1 and 1.2), so what the editor
    wrote is read back the reader's way before it replaces the file: with the stack reader's own loader, not
    ``yaml.safe_load``, which reads a date (``created: 2026-01-31``) as a ``date`` where the reader keeps its text.
    """
    try:
        return parse_yaml(text, "the edited stack file")["config"][PLATFORM_KEY]
    except (StackFileError, LookupError, TypeError):
        return None


def _failed(err: Console, message: str) -> int:
    err.print(printable(f"inferplane plan: {message}"), markup=False, highlight=False)
    return EXIT_FAILED


def _yaml_scalar(value: Any) -> Any:
    """``value`` as ruamel.yaml should write it: a string PyYAML would read as something else (``on``, ``yes``,
    ``null``: YAML 1.1 booleans ruamel.yaml's YAML 1.2 leaves plain) double-quoted; mappings recursively."""
    if isinstance(value, dict):
        return {key: _yaml_scalar(item) for key, item in value.items()}
    if isinstance(value, str) and yaml.safe_load(value) != value:
        return DoubleQuotedScalarString(value)
    return value


class _AsWritten(str):
    """A plain scalar YAML resolves as a timestamp (``created: 2026-01-31``), kept as the text the user wrote: the
    stack reader keeps that text too (Pulumi config has no dates), where ruamel.yaml's own timestamp would write
    ``2001-12-14t21:59:43.10-05:00`` back as ``2001-12-14T21:59:43.100000-05:00``."""

    __slots__ = ()


class _EditConstructor(RoundTripConstructor):
    def construct_yaml_timestamp(self, node: Any, values: Any = None) -> Any:
        return _AsWritten(node.value)


class _EditRepresenter(RoundTripRepresenter):
    def represent_as_written(self, data: _AsWritten) -> Any:
        # Tagged timestamp, so the serializer finds the tag implicit and writes the text plain, unquoted.
        return self.represent_scalar("tag:yaml.org,2002:timestamp", str(data))


_EditConstructor.add_constructor("tag:yaml.org,2002:timestamp", _EditConstructor.construct_yaml_timestamp)
_EditRepresenter.add_representer(_AsWritten, _EditRepresenter.represent_as_written)


def _edited(source: str, pool: dict[str, Any] | None, deployment: dict[str, Any]) -> str:
    """``source`` (the stack file's text, as read) with ``pool`` (unless None) and ``deployment`` added, comments,
    tags (``!!set``, ``!!binary``) and dates as written kept."""
    editor = YAML()
    editor.Constructor = _EditConstructor
    editor.Representer = _EditRepresenter
    editor.preserve_quotes = True
    editor.width = 4096
    editor.indent(mapping=2, sequence=4, offset=2)
    document = editor.load(source.replace("\r\n", "\n").replace("\r", "\n"))  # newlines as a text-mode read has them
    platform = document["config"][PLATFORM_KEY]
    if pool is not None:
        platform.setdefault("pools", []).append(_yaml_scalar(pool))
    platform.setdefault("models", []).append(_yaml_scalar(deployment))
    buffer = io.StringIO()
    editor.dump(document, buffer)
    return buffer.getvalue()


class _WriteError(Exception):
    """The stack file could not be replaced (it is unchanged); ``code`` is the exit code, ``str()`` the reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


def _unwritable(path: Path) -> str | None:
    """Why ``path`` may not be replaced (read-only, or in a folder that cannot take a new file), or None.

    The mode bits are read too: root may write any file, but a stack file its owner made read-only is not to be
    replaced behind their back (a rename would not even notice).
    """
    try:
        target = path.resolve()
        info = target.stat()
    except (OSError, RuntimeError) as exc:
        return f"cannot write it: {os_reason(exc) if isinstance(exc, OSError) else exc}"
    if not info.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(target, os.W_OK):
        return "is read-only; nothing was written (make it writable, or plan without --write-stack)"
    if not os.access(target.parent, os.W_OK | os.X_OK):
        return f"its folder {target.parent} is read-only; nothing was written"
    return None


def replace_file(path: Path, text: str) -> None:
    """Replace ``path`` (a symlink's target) with ``text``: written to a new file beside it, then renamed over it.

    The file keeps its mode (and its owner and group where this process may set them). Any failure, an interrupt
    included, removes the new file and leaves ``path`` as it was; an :class:`OSError` becomes a :class:`_WriteError`:
    exit 2 when no new file can be made beside it (the place is not writable), 3 when writing it fails (a full disk,
    a quota).
    """
    problem = _unwritable(path)
    if problem is not None:
        raise _WriteError(EXIT_INVALID, problem)
    target = path.resolve()
    info = target.stat()
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _WriteError(EXIT_INVALID, f"cannot write beside it: {os_reason(exc)}; nothing was written") from None
    temporary = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())  # the data is on disk before the rename makes it the stack file
        _keep_owner(temporary, info)
        os.chmod(temporary, stat.S_IMODE(info.st_mode))
        os.replace(temporary, target)
    except OSError as exc:
        raise _WriteError(EXIT_FAILED, f"writing it failed: {os_reason(exc)}; the file is unchanged") from None
    finally:
        temporary.unlink(missing_ok=True)  # gone already after the rename


def _keep_owner(path: Path, info: os.stat_result) -> None:
    if (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid()):
        return
    # Only root may give a file away; otherwise the new file stays this user's, as any new file would be.
    with contextlib.suppress(PermissionError):
        os.chown(path, info.st_uid, info.st_gid)


def finite(lower: float, upper: float, unit: str, *, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number from ``lower`` (or, with ``above``, more than it) to ``upper``.

    ``inf``, ``nan`` and ``1e308`` are refused by the flag that was given (exit 2, the range named) rather than
    overflowing the search with an unbounded number of replicas.
    """
    wanted = f"above {lower:g} and at most {upper:g}" if above else f"within {lower:g} and {upper:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (lower < value if above else lower <= value) or not value <= upper:  # also false for nan
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted} {unit}")
        return value

    return parse


def whole(upper: int) -> Callable[[str], int]:
    """An argparse type: an integer from 1 to ``upper``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not 1 <= value <= upper:
            raise argparse.ArgumentTypeError(f"{text!r} is not within 1 and {upper}")
        return value

    return parse


def add_parser(sub: Any) -> None:
    """Register ``plan`` on the CLI's subparsers."""
    from inferplane.components.catalog import ACCELERATORS, MODELS  # noqa: PLC0415

    rate = finite(MIN_REQUESTS_PER_SECOND, MAX_REQUESTS_PER_SECOND, "requests per second")
    cmd = sub.add_parser("plan", help="the cheapest configuration that serves a workload within its objectives")
    cmd.add_argument("--model", required=True, choices=sorted(MODELS), help="catalog model")
    tokens = whole(MAX_CONTEXT_TOKENS)
    cmd.add_argument("--input-tokens", type=tokens, required=True, help="prompt tokens per request")
    cmd.add_argument("--output-tokens", type=tokens, required=True, help="output tokens per request")
    cmd.add_argument(
        "--requests-per-second",
        type=rate,
        required=True,
        help=f"steady request rate ({MIN_REQUESTS_PER_SECOND:g} to {MAX_REQUESTS_PER_SECOND:g})",
    )
    cmd.add_argument("--peak-requests-per-second", type=rate, help="peak rate (max replicas); default R")
    cmd.add_argument(
        "--ttft-p95-ms",
        type=finite(0, MAX_TTFT_P95_MS, "ms", above=True),
        required=True,
        help=f"time to first token objective (at most {MAX_TTFT_P95_MS:g} ms)",
    )
    cmd.add_argument(
        "--itl-p95-ms",
        type=finite(0, MAX_ITL_P95_MS, "ms", above=True),
        required=True,
        help=f"inter-token latency objective (at most {MAX_ITL_P95_MS:g} ms)",
    )
    cmd.add_argument(
        "--queue-timeout-seconds",
        type=finite(0, MAX_QUEUE_TIMEOUT_SECONDS, "s", above=True),
        help=f"how long the gateway holds a request for a slot before a 429 (default "
        f"{AdmissionSpec().queue_timeout_seconds:g}, gateway.admission's; with --write-stack, the stack's)",
    )
    cmd.add_argument("--accelerator", action="append", choices=sorted(ACCELERATORS), help="allow only these")
    cmd.add_argument(
        "--engine", choices=get_args(Engine), help="only this engine (triton = TensorRT-LLM; sglang = SGLang)"
    )
    cmd.add_argument(
        "--weights-dtype",
        action="append",
        choices=["bf16", "fp16", "fp8", "int4"],
        help="allowed weight precisions (repeatable; default bf16 only: quantization changes outputs)",
    )
    cmd.add_argument(
        "--serving",
        action="append",
        choices=["aggregated", "disaggregated"],
        help="weigh only these ways of serving (default both; disaggregated: vLLM on NVIDIA GPUs)",
    )
    cmd.add_argument("--capacity-type", choices=["on_demand", "spot", "capacity_block"], default="on_demand")
    cmd.add_argument("--max-gpus", type=whole(MAX_GPUS_PER_REPLICA), help="most accelerators per replica")
    cmd.add_argument("--region", help="price region (the price book's aws or gcp region)")
    cmd.add_argument("--top", type=whole(MAX_TOP), default=10, help="candidates to print (default 10)")
    cmd.add_argument("--json", action="store_true", help='print {"candidates": [...]}')
    cmd.add_argument("--write-stack", metavar="S", help="add the chosen pool and model to stacks/Pulumi.S.yaml")
    cmd.add_argument("--name", help="deployment name for --write-stack (default: the model id)")
    cmd.add_argument("--project-dir", help="project directory (default: the nearest with Pulumi.yaml)")
    cmd.set_defaults(handler=plan_command)
