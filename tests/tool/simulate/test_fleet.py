"""A simulated replica's engine settings are sizing's, its processes' arguments parse with Dynamo's own parsers to
those settings, and a fleet the machine's inotify limit cannot hold is refused before anything starts."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import threading
from pathlib import Path

import pytest

from inferplane.components.capacity import perf_model
from inferplane.components.capacity.sizing import size_platform
from inferplane.components.catalog import get_accelerator
from inferplane.components.gateway.renderer import kv_block_tokens
from inferplane.tool import gateway_run as gr
from inferplane.tool.simulate import fleet as fl
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR
from tests.tool.simulate.simulator import simulator_python

SHIPPED = [
    (stack, deployment.name)
    for stack in ("dev", "staging", "prod")
    for deployment in load_stack(PROJECT_DIR, stack).platform.models
]


def settings_of(stack: str, model: str) -> tuple[fl.EngineSettings, perf_model.Replica]:
    spec = load_stack(PROJECT_DIR, stack).platform
    sizing = next(d for d in size_platform(spec).deployments if d.name == model)
    deployment = next(d for d in spec.models if d.name == model)
    accelerator = get_accelerator(sizing.result.accelerator)
    replica = perf_model.replica_from_sizing(
        sizing.result, deployment.architecture_resolved, accelerator, sizing.engine
    )
    settings = fl.engine_settings(deployment, sizing, replica)
    assert settings.block_size == kv_block_tokens(sizing)
    assert settings.engine_type == fl.ENGINE_TYPES[sizing.engine]
    assert settings.max_model_len == deployment.max_context
    return settings, replica


@pytest.mark.parametrize(("stack", "model"), SHIPPED)
def test_settings_are_sizings(stack: str, model: str) -> None:
    settings, replica = settings_of(stack, model)
    assert settings.served_model == model
    assert settings.max_num_seqs == replica.max_num_seqs
    assert settings.max_num_batched_tokens == replica.max_num_batched_tokens
    assert settings.num_gpu_blocks == replica.kv_capacity_tokens // settings.block_size


PARSE_MOCKER = """
import json, sys
from dynamo.mocker.args import parse_args
ns = vars(parse_args(json.loads(sys.argv[1])))
keys = ("model_name", "endpoint", "engine_type", "block_size", "num_gpu_blocks", "max_num_seqs",
        "max_num_batched_tokens", "max_model_len", "planner_profile_data", "discovery_backend")
print(json.dumps({k: str(ns[k]) for k in keys}))
"""
PARSE_FRONTEND = """
import json, sys
sys.argv = ["frontend", *json.loads(sys.argv[1])]
from dynamo.frontend.main import parse_args
config = parse_args()[0]
print(json.dumps({k: str(getattr(config, k)) for k in ("http_host", "http_port", "namespace", "router_mode",
                                                         "discovery_backend")}))
"""


@pytest.mark.parametrize(("stack", "model"), [("dev", "llama-8b"), ("staging", "llama-8b"), ("staging", "qwen-agent")])
def test_dynamos_own_parsers_read_the_settings(stack: str, model: str, tmp_path: Path) -> None:
    python = simulator_python()
    settings, _ = settings_of(stack, model)
    args = fl.mocker_args(settings, tmp_path / "model", tmp_path / "p.npz", "ns3")[2:]  # less "-m dynamo.mocker"
    result = subprocess.run(
        [str(python), "-c", PARSE_MOCKER, json.dumps(args)], capture_output=True, text=True, timeout=120, check=True
    )
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed == {
        "model_name": model,
        "endpoint": "dyn://ns3.backend.generate",
        "engine_type": settings.engine_type,
        "block_size": str(settings.block_size),
        "num_gpu_blocks": str(settings.num_gpu_blocks),
        "max_num_seqs": str(settings.max_num_seqs),
        "max_num_batched_tokens": str(settings.max_num_batched_tokens),
        "max_model_len": str(settings.max_model_len),
        "planner_profile_data": str(tmp_path / "p.npz"),
        "discovery_backend": "file",
    }
    front = fl.frontend_args("127.0.1.7", 23456, "ns3")[2:]
    result = subprocess.run(
        [str(python), "-c", PARSE_FRONTEND, json.dumps(front)], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "http_host": "127.0.1.7",
        "http_port": "23456",
        "namespace": "ns3",
        "router_mode": "round-robin",
        "discovery_backend": "file",
    }


PARSE_ROLE = """
import json, sys
from dynamo.mocker.args import parse_args
ns = vars(parse_args(json.loads(sys.argv[1])))
print(json.dumps({k: ns[k] for k in ("disaggregation_mode", "is_prefill_worker", "is_decode_worker",
                                      "kv_transfer_bandwidth", "bootstrap_ports_list")}))
"""


@pytest.mark.parametrize(
    ("mode", "bootstrap", "parsed"),
    [
        ("prefill", 23457, {"is_prefill_worker": True, "is_decode_worker": False, "bootstrap_ports_list": [23457]}),
        ("decode", None, {"is_prefill_worker": False, "is_decode_worker": True, "bootstrap_ports_list": []}),
    ],
)
def test_dynamos_parser_reads_a_disaggregated_workers_role(
    mode: fl.DisaggregationMode, bootstrap: int | None, parsed: dict[str, object], tmp_path: Path
) -> None:
    settings, _ = settings_of("prod", "llama-70b")
    args = fl.mocker_args(settings, tmp_path / "model", tmp_path / "p.npz", "ns3")[2:]
    args += fl.disaggregation_args(mode, 38.4, bootstrap)
    result = subprocess.run(
        [str(simulator_python()), "-c", PARSE_ROLE, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "disaggregation_mode": mode,
        "kv_transfer_bandwidth": 38.4,
        **parsed,
    }


def test_a_prefill_worker_without_its_bootstrap_port_is_refused() -> None:
    with pytest.raises(ValueError, match="a prefill worker needs its bootstrap port"):
        fl.disaggregation_args("prefill", 38.4)


def test_dynamo_stays_on_the_replicas_loopback_address(tmp_path: Path) -> None:
    env = fl.dynamo_env("127.0.1.9", tmp_path)
    for variable in ("DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_EVENT_PLANE_HOST", "DYN_SYSTEM_HOST"):
        assert env[variable] == "127.0.1.9"
    assert env["DYN_FILE_KV"] == str(tmp_path)
    assert [fl.replica_host(i) for i in (0, 1, 31)] == ["127.0.1.1", "127.0.1.2", "127.0.1.32"]


def test_a_fleet_beyond_the_inotify_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fl, "inotify_room", lambda: 128)
    stop = threading.Event()
    settings, _ = settings_of("dev", "llama-8b")
    fleet = fl.SimulatedFleet(
        python=Path("/nonexistent/python"),
        settings=settings,
        model_dir=tmp_path,
        profile=tmp_path / "p.npz",
        replicas=32,
        directory=tmp_path / "fleet",
        procs=gr.Processes(tmp_path, stop),
        stop=stop,
    )
    with pytest.raises(fl.SimulatorError, match=r"32 replicas need 128 inotify instances .* is 128: raise it"):
        fleet.start()
    assert not (tmp_path / "fleet").exists(), "nothing is written before the check"


def test_a_missing_simulator_names_the_make_target(tmp_path: Path) -> None:
    with pytest.raises(
        fl.SimulatorError, match=r"\$INFERPLANE_SIMULATOR_PYTHON /no/py: no executable there; .*make simulator"
    ):
        fl.find_simulator({fl.SIMULATOR_ENV: "/no/py"}, tmp_path)
    assert importlib.util.find_spec("dynamo") is None, "the project's venv keeps the simulator apart"
    with pytest.raises(fl.SimulatorError, match=r"^NVIDIA Dynamo's mocker is not installed: run `make simulator`"):
        fl.find_simulator({}, tmp_path)


def test_the_prometheus_reader_sums_every_series() -> None:
    body = b'# HELP x\nvllm:a{engine="0"} 2\nvllm:a{engine="1"} 3.5\nvllm:ab 7\nvllm:a 1\n'
    assert fl.parse_metric(body, "vllm:a") == 6.5
    assert fl.parse_metric(body, "vllm:missing") == 0.0
