"""`inferplane size`: the JSON contract, exit codes, and stack errors that name the file and the key."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplane.tool.cli import main
from inferplane.tool.exitcodes import EXIT_INVALID, EXIT_OK, EXIT_REFUSED
from tests.conftest import PROJECT_DIR
from tests.spec.test_spec import SEVENTY_B

CONTRACT = {
    "weights_bytes",
    "kv_cache_bytes_per_token",
    "kv_cache_bytes_required",
    "usable_bytes",
    "fits",
    "tensor_parallel_size",
    "max_concurrent_sequences",
    "reason",
    "vllm",
    "trtllm",
}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, Any]]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_size_json_honours_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["size", "--model", "llama-3.3-70b", "--accelerator", "h100-80gb", "--gpus", "4", "--json"]
    code, out = _json(capsys, [*argv, "--context", "8192", "--concurrency", "32"])
    assert code == EXIT_OK
    assert set(out) >= CONTRACT
    # Independent arithmetic.
    assert out["weights_bytes"] == 70_553_706_496 * 2
    assert out["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 2
    assert out["kv_cache_bytes_required"] == out["kv_cache_bytes_per_token"] * 8192 * 32
    assert out["usable_bytes"] == int(4 * 81920 * 1024 * 1024 * 0.90)
    assert out["fits"] is True and out["reason"] is None
    assert out["tensor_parallel_size"] == 4
    assert out["vllm"]["tensor_parallel_size"] == 4 and out["vllm"]["max_model_len"] == 8192
    assert out["trtllm"]["tensor_parallel"] == 4 and out["trtllm"]["max_batch_size"] == 32
    assert out["sglang"]["tp_size"] == 4 and out["sglang"]["max_running_requests"] == 32


def test_size_json_refusal_exits_1_with_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _json(capsys, ["size", "--model", "llama-3.3-70b", "--accelerator", "l4-24gb", "--gpus", "1", "--json"])
    assert code == EXIT_REFUSED
    assert out["fits"] is False
    assert out["reason"].startswith("llama-3.3-70b weights in bf16 take 131.4 GiB")
    assert out["alternatives"]


def test_fp8_kv_cache_halves_the_per_token_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["size", "--model", "llama-3.3-70b", "--accelerator", "h100-80gb", "--kv-cache-dtype", "fp8", "--json"]
    _, out = _json(capsys, argv)
    assert out["kv_cache_bytes_per_token"] == 163_840
    assert out["vllm"]["kv_cache_dtype"] == "fp8"


def test_size_readable_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["size", "--model", "llama-3.1-8b", "--accelerator", "l4-24gb", "--context", "4096", "--concurrency", "4"]
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    assert "llama-3.1-8b on l4-24gb" in out
    assert "--tensor-parallel-size 1 --max-model-len 4096 --max-num-seqs 4" in out
    # SGLang's fraction holds weights and KV only: 0.9 less the reserve's share of the L4 (sizing.py).
    assert "SGLang: --tp-size 1 --context-length 4096 --max-running-requests 4 --mem-fraction-static 0.824" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--context", "200000"], "inferplane size: --context 200000 exceeds the 131072 tokens llama-3.3-70b supports"),
        (["--gpu-memory-utilization", "0.97"], "inferplane size: --gpu-memory-utilization must be within 0.5 and 0.93"),
    ],
)
def test_size_invalid_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code = main(["size", "--model", "llama-3.3-70b", "--accelerator", "h100-80gb", *argv])
    assert code == EXIT_INVALID
    assert capsys.readouterr().err.strip() == message


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_size_every_shipped_stack(capsys: pytest.CaptureFixture[str], stack: str) -> None:
    code, out = _json(capsys, ["size", "--stack", stack, "--project-dir", str(PROJECT_DIR), "--json"])
    assert code == EXIT_OK
    assert out["environment"] == stack
    assert out["problems"] == []
    assert all(d["result"]["fits"] for d in out["deployments"])
    # Only prod serves the semantic cache's embedder (the others embed in the processor).
    assert (out["embedder"] or {}).get("model") == ("all-minilm-l6-v2" if stack == "prod" else None)


def test_the_table_names_the_served_embedder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "--stack", "prod", "--project-dir", str(PROJECT_DIR)]) == EXIT_OK
    assert (
        "semantic cache embedder: all-minilm-l6-v2 served on the system nodes' CPUs, 2-8 pods (autoscaled at 70% "
        "CPU) x (1 CPU, 2048 MiB), 384 dimensions, start ~53 s"
    ) in " ".join(capsys.readouterr().out.split())


def test_the_table_shows_each_clusters_system_nodes_at_floor_and_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "--stack", "staging", "--project-dir", str(PROJECT_DIR)]) == EXIT_OK
    out = capsys.readouterr().out
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in out.splitlines()
        if "│ eks " in line or "│ gke " in line
    ]
    assert rows == [
        ["eks", "m7i.2xlarge", "2", "4", "7.755 CPU, 28.5 GiB", "4.95 CPU, 4.3 GiB", "16.95 CPU, 11.8 GiB"],
        ["gke", "e2-standard-8", "1", "3", "7.91 CPU, 25.9 GiB", "4.65 CPU, 3.7 GiB", "16.65 CPU, 11.2 GiB"],
    ]


def test_the_table_gives_a_prefill_role_no_decode_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """prod's llama-70b is disaggregated: its decode role has a decode estimate, its prefill role (which runs no
    decodes) a dash."""
    assert main(["size", "--stack", "prod", "--project-dir", str(PROJECT_DIR)]) == EXIT_OK
    rows = {
        cells[0]: cells
        for line in capsys.readouterr().out.splitlines()
        if (cells := [cell.strip() for cell in line.split("│")[1:-1]]) and cells[0].startswith("llama-70b")
    }
    # The prefill role's name may wrap onto a second line at a narrow width: its first line starts it.
    decode = next(cells for name, cells in rows.items() if name.startswith("llama-70b (decode"))
    prefill = next(cells for name, cells in rows.items() if name.startswith("llama-70b-prefill"))
    assert decode[7][0].isdigit() and prefill[7] == "-"


def _project(tmp_path: Path, platform_edit: Any) -> Path:
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    document = yaml.safe_load((PROJECT_DIR / "stacks" / "Pulumi.prod.yaml").read_text())
    platform_edit(document["config"])
    (tmp_path / "stacks" / "Pulumi.prod.yaml").write_text(yaml.safe_dump(document))
    return tmp_path


def test_invalid_stack_exits_2_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(config: dict[str, Any]) -> None:
        config["inferplane:platform"]["models"][1] = SEVENTY_B

    project = _project(tmp_path, edit)
    assert main(["size", "--stack", "prod", "--project-dir", str(project)]) == EXIT_INVALID
    assert (
        "stacks/Pulumi.prod.yaml: inferplane:platform.models[1].max_context: "
        "262144 exceeds the 131072 tokens llama-3.3-70b supports"
    ) in capsys.readouterr().err.splitlines()


def test_stack_that_does_not_fit_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(config: dict[str, Any]) -> None:
        config["inferplane:platform"]["models"][0]["concurrency"] = 4000

    project = _project(tmp_path, edit)
    assert main(["size", "--stack", "prod", "--project-dir", str(project)]) == EXIT_REFUSED
    assert "refused: models[0] llama-70b: does not fit: the KV cache for 4000 sequences" in capsys.readouterr().out


def test_missing_region_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path, lambda config: config.pop("aws:region"))
    assert main(["size", "--stack", "prod", "--project-dir", str(project)]) == EXIT_INVALID
    assert capsys.readouterr().err.strip() == (
        "stacks/Pulumi.prod.yaml: aws:region: the AWS region is required (pulumi config set aws:region ...)"
    )


def test_missing_stack_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "--stack", "qa", "--project-dir", str(PROJECT_DIR)]) == EXIT_INVALID
    assert capsys.readouterr().err.strip() == "stacks/Pulumi.qa.yaml: no such file"


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "inferplane"
    done = subprocess.run(
        [str(script), "size", "--model", "qwen2.5-7b", "--accelerator", "tpu-v5e", "--gpus", "4", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert json.loads(done.stdout)["tensor_parallel_size"] == 4


def test_tpu_picks_the_smallest_host_that_fits(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["size", "--model", "llama-3.1-8b", "--accelerator", "tpu-v5e", "--context", "8192", "--json"]
    code, out = _json(capsys, [*argv, "--concurrency", "16"])
    assert code == EXIT_OK
    assert out["tensor_parallel_size"] == 4  # 16 GiB of weights cannot fit one 16 GiB chip
    assert main(["size", "--model", "llama-3.1-8b", "--accelerator", "tpu-v5e", "--gpus", "2"]) == EXIT_INVALID
    assert capsys.readouterr().err.strip() == "inferplane size: no tpu-v5e host has 2 chips (1, 4, 8)"
    assert main([*argv, "--weights-dtype", "fp8"]) == EXIT_INVALID
    assert capsys.readouterr().err.strip() == "inferplane size: tpu-v5e serves bf16 weights and KV cache"


def test_size_prints_each_clusters_prometheus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "--stack", "prod", "--project-dir", str(PROJECT_DIR)]) == EXIT_OK
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "prometheus (eks): 2 pods x (0.45 CPU, 1280 MiB) on the system nodes, for about 116,880 series (7,792 "
        "samples/s); 30 days need 37.6 GiB of the 170.0 GiB it may fill (200 GiB volume)"
    ) in out
