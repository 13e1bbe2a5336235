"""VllmService: flags exactly as sizing derives them, accepted by the pinned vLLM; probes and GPUs from sizing."""

from __future__ import annotations

import json
import math
from typing import Any

import pulumi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity.sizing import VllmSettings, size_platform
from inferplane.components.serving import model_server as ms
from inferplane.components.serving.annotations import serving_annotations
from inferplane.components.serving.vllm_service import (
    VLLM_IMAGE,
    VLLM_TPU_IMAGE,
    VllmService,
    VllmServiceArgs,
    nixl_transfer_config,
    vllm_args,
)
from inferplane.components.spec.platform_spec import PlatformSpec, SpeculativeDecodingSpec
from inferplane.tool.mockengine import PlatformMocks, evaluate
from tests import vllm_cli
from tests.references import vllm_definitions
from tests.serving_support import (
    AWQ_8B_ON_L4,
    FP8_70B_ON_H100,
    container,
    evaluate_servers,
    l4_and_h100_platform,
    spec_from,
    stack_spec,
)

CUSTOM = l4_and_h100_platform(
    {
        **AWQ_8B_ON_L4,
        "speculative_decoding": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
    },
    {
        **FP8_70B_ON_H100,
        "max_replicas": 2,
        "speculative_decoding": {
            "method": "eagle3",
            "draft_model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
            "num_speculative_tokens": 3,
        },
    },
)
"""fp8 and AWQ weights, with and without prefix caching, n-gram and EAGLE-3 speculation."""


def _vllm_args(spec: PlatformSpec, name: str) -> list[str]:
    deployment = evaluate_servers(spec).named(f"{name}-deployment")
    return list(container(deployment, "vllm")["args"])


def _tail(drain: int) -> list[str]:
    return ["--host", "0.0.0.0", "--port", "8000", "--shutdown-timeout", str(drain)]


def _multi_connector(role: str) -> str:
    """The disaggregated prod 70B's ``--kv-transfer-config``: NIXL over EFA, then the 917 GiB host tier."""
    nixl = {
        "kv_connector": "NixlConnector",
        "kv_role": role,
        "kv_buffer_device": "cuda",
        "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
        "kv_load_failure_policy": "recompute",
    }
    offloading = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 917 * 2**30},
    }
    config = {
        "kv_connector": "MultiConnector",
        "kv_role": role,
        "kv_connector_extra_config": {"connectors": [nixl, offloading]},
    }
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def test_prod_llama_70b_on_p5_flags() -> None:
    assert _vllm_args(stack_spec("prod"), "llama-70b") == [
        "/models/meta-llama/Llama-3.3-70B-Instruct",
        "--served-model-name", "llama-70b",
        "--tensor-parallel-size", "4",
        "--max-model-len", "32768",
        "--max-num-seqs", "24",
        "--max-num-batched-tokens", "2048",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8",
        "--dtype", "bfloat16",
        "--block-size", "16",  # the gateway's prefix-index block (sizing's VllmSettings.block_size)
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--stream-interval", "4",  # floor(100 ms / the 20.66 ms decode step sizing plans at 24 sequences)
        # The decode role pulls prompts' KV from the prefill role (NIXL over EFA); its host KV tier (host_kv_cache:
        # the replica's 984,637 MiB share of the p5 less 16 GiB of /dev/shm and 4 + 4 x 6 GiB for the engine's
        # processes, in whole GiB) rides beside it in vLLM's MultiConnector, as --kv-offloading-size would replace
        # the transfer's connector.
        "--kv-transfer-config", _multi_connector("kv_consumer"),
        *_tail(300),
    ]  # fmt: skip


def test_prod_llama_70b_prefill_role_flags() -> None:
    assert _vllm_args(stack_spec("prod"), "llama-70b-prefill") == [
        "/models/meta-llama/Llama-3.3-70B-Instruct",
        # Its own name first (its metrics' model_name, which its autoscaler reads), then the model's: the gateway's
        # prefill step sends the client's body, whose model is the model's name.
        "--served-model-name", "llama-70b-prefill", "llama-70b",
        "--tensor-parallel-size", "4",
        "--max-model-len", "32768",
        "--max-num-seqs", "24",
        # No decodes share its steps: the largest budget, not the ITL objective's.
        "--max-num-batched-tokens", "16384",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8",
        "--dtype", "bfloat16",
        "--block-size", "16",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--stream-interval", "4",
        "--kv-transfer-config", _multi_connector("kv_producer"),
        *_tail(300),
    ]  # fmt: skip


def test_disaggregated_roles_advertise_their_pod_ip_and_take_their_efa_share() -> None:
    evaluation = evaluate_servers(stack_spec("prod"))
    for name in ("llama-70b", "llama-70b-prefill"):
        deployment = evaluation.named(f"{name}-deployment")
        server = container(deployment, "vllm")
        env = {e["name"]: e for e in server["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {
            "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        }
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": "5600"}
        # A TP-4 replica of a p5 (8 GPUs, 32 EFA interfaces) takes half of each.
        for bound in ("requests", "limits"):
            assert server["resources"][bound]["nvidia.com/gpu"] == "4"
            assert server["resources"][bound]["vpc.amazonaws.com/efa"] == "16"
    eight_b = container(evaluation.named("llama-8b-deployment"), "triton")
    assert "vpc.amazonaws.com/efa" not in eight_b["resources"]["limits"]


def test_dev_llama_8b_on_l4_flags() -> None:
    assert _vllm_args(stack_spec("dev"), "llama-8b") == [
        "/models/meta-llama/Llama-3.1-8B-Instruct",
        "--served-model-name", "llama-8b",
        "--tensor-parallel-size", "1",
        "--max-model-len", "8192",
        "--max-num-seqs", "4",
        "--max-num-batched-tokens", "2048",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8",
        "--dtype", "bfloat16",
        "--block-size", "16",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--stream-interval", "1",  # a 76 ms step: every token alone
        *_tail(300),
    ]  # fmt: skip


def test_staging_qwen_on_tpu_flags_image_and_placement() -> None:
    deployment = evaluate_servers(stack_spec("staging")).named("qwen-7b-deployment")
    vllm = container(deployment, "vllm")
    # TPU pools read the hub (no S3 on GKE): the model is the repository id and the token comes from the Secret.
    assert vllm["args"] == [
        "Qwen/Qwen2.5-7B-Instruct",
        "--served-model-name", "qwen-7b",
        "--tensor-parallel-size", "4",
        "--max-model-len", "8192",
        "--max-num-seqs", "16",
        "--max-num-batched-tokens", "2048",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "auto",
        "--dtype", "bfloat16",
        # no --block-size: vLLM's TPU backend pages its cache with a size of its own
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--stream-interval", "12",  # a 7.83 ms step
        *_tail(65),
    ]  # fmt: skip
    assert vllm["image"] == VLLM_TPU_IMAGE == "vllm/vllm-tpu:v0.32.0"
    assert vllm["command"] == ["vllm", "serve"]
    assert vllm["resources"]["limits"]["google.com/tpu"] == "4"
    assert "nvidia.com/gpu" not in vllm["resources"]["limits"]
    pod = deployment.inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }
    assert pod["tolerations"] == [
        {"key": "google.com/tpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert "initContainers" not in pod


def test_awq_and_fp8_flags_with_speculative_decoding() -> None:
    spec = spec_from(CUSTOM)
    evaluation = evaluate_servers(spec)
    awq = container(evaluation.named("llama-8b-awq-deployment"), "vllm")["args"]
    assert awq == [
        "/models/hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
        "--served-model-name", "llama-8b-awq",
        "--tensor-parallel-size", "4",
        "--max-model-len", "16384",
        "--max-num-seqs", "16",
        "--max-num-batched-tokens", "2048",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "auto",
        "--dtype", "float16",
        "--block-size", "16",
        "--quantization", "awq",
        "--no-enable-prefix-caching",
        "--enable-chunked-prefill",
        "--stream-interval", "3",  # a 25.85 ms step
        "--speculative-config", '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}',
        *_tail(300),
    ]  # fmt: skip
    fp8 = container(evaluation.named("llama-70b-fp8-deployment"), "vllm")["args"]
    assert fp8 == [
        "/models/meta-llama/Llama-3.3-70B-Instruct",
        "--served-model-name", "llama-70b-fp8",
        "--tensor-parallel-size", "8",
        "--max-model-len", "65536",
        "--max-num-seqs", "32",
        "--max-num-batched-tokens", "4096",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8",
        "--dtype", "bfloat16",
        "--block-size", "16",
        "--quantization", "fp8",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--stream-interval", "8",  # a 12.49 ms step
        "--speculative-config",
        '{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.3-Instruct-70B","num_speculative_tokens":3}',
        *_tail(300),
    ]  # fmt: skip


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "custom"])
def test_gpu_limit_is_tp_and_startup_budget_covers_engine_start(stack: str) -> None:
    spec = spec_from(CUSTOM) if stack == "custom" else stack_spec(stack)
    plan = size_platform(spec)
    evaluation = evaluate_servers(spec)
    for sizing in plan.deployments:
        deployment = evaluation.named(f"{sizing.name}-deployment")
        main = container(deployment, sizing.engine)  # each engine's container is named after it
        limits = main["resources"]["limits"]
        if "google.com/tpu" in limits:
            assert limits["google.com/tpu"] == str(sizing.result.tensor_parallel_size)
        else:
            assert limits["nvidia.com/gpu"] == str(sizing.result.tensor_parallel_size)
            assert main["resources"]["requests"]["nvidia.com/gpu"] == limits["nvidia.com/gpu"]
        startup = main["startupProbe"]
        budget = startup["failureThreshold"] * startup["periodSeconds"]
        assert budget >= sizing.result.engine_start_seconds * 1.5 + 60
        assert budget < sizing.result.engine_start_seconds * 1.5 + 60 + startup["periodSeconds"]
        liveness = main["livenessProbe"]
        assert (
            liveness["failureThreshold"] * liveness["periodSeconds"]
            > main["readinessProbe"]["failureThreshold"] * (main["readinessProbe"]["periodSeconds"])
        )
        # Memory is guaranteed and within the node; CPU is requested, not capped.
        assert main["resources"]["limits"]["memory"] == main["resources"]["requests"]["memory"]
        assert "cpu" not in limits


def test_resources_are_the_replicas_share_of_the_node() -> None:
    # p5.48xlarge: 192 vCPU, 2048 GiB; reserve 1 vCPU + 4 %, 2 GiB + 6 %; TP 4 of 8 GPUs takes half.
    deployment = evaluate_servers(stack_spec("prod")).named("llama-70b-deployment")
    resources = container(deployment, "vllm")["resources"]
    cpu = (192_000 - 1000 - 192_000 * 0.04) / 2 // 100 * 100
    memory = (2048 * 1024 - 2048 - 2048 * 1024 * 0.06) / 2
    assert resources["requests"]["cpu"] == f"{int(cpu)}m" == "91600m"
    assert resources["requests"]["memory"] == f"{math.floor(memory)}Mi" == "984637Mi"
    volumes = {v["name"]: v for v in deployment.inputs["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}


def test_weights_come_from_the_s3_cache_offline() -> None:
    deployment = evaluate_servers(stack_spec("prod")).named("llama-70b-deployment")
    fetch = container(deployment, "fetch-weights")
    assert fetch["image"] == ms.AWS_CLI_IMAGE
    assert fetch["command"] == ["aws"]
    assert fetch["args"] == [
        "s3",
        "sync",
        "--only-show-errors",
        "s3://inferplane-models-123456789012/hf/meta-llama/Llama-3.3-70B-Instruct/",
        "/models/meta-llama/Llama-3.3-70B-Instruct",
    ]
    env = {e["name"]: e for e in container(deployment, "vllm")["env"]}
    assert env["HF_HUB_OFFLINE"] == {"name": "HF_HUB_OFFLINE", "value": "1"}
    assert "HF_TOKEN" not in env
    evaluation = evaluate_servers(stack_spec("prod"))
    account = evaluation.named("llama-70b-sa")
    # No IRSA annotation: EKS Pod Identity binds (inference, llama-70b-sa) to the cache's role
    # (components.aws.model_cache).
    assert "annotations" not in account.inputs["metadata"]
    assert account.inputs["metadata"]["name"] == "llama-70b-sa"
    assert evaluation.outputs["llama-70b-service-account"] == "llama-70b-sa"


def test_without_a_cache_the_hub_token_comes_from_the_secret() -> None:
    deployment = evaluate_servers(stack_spec("dev"), model_cache=None).named("llama-8b-deployment")
    vllm = container(deployment, "vllm")
    assert vllm["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"
    env = {e["name"]: e for e in vllm["env"]}
    # The token is a read-only file, never an environment variable.
    assert env["HF_TOKEN_PATH"] == {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/huggingface/token"}
    assert not [e for e in vllm["env"] if "valueFrom" in e or e["name"] == "HF_TOKEN"]
    assert {"name": "hf-token", "mountPath": "/var/run/secrets/huggingface", "readOnly": True} in vllm["volumeMounts"]
    pod = deployment.inputs["spec"]["template"]["spec"]
    assert {
        "name": "hf-token",
        "secret": {"secretName": "hf-token", "items": [{"key": "token", "path": "token"}], "defaultMode": 0o440},
    } in pod["volumes"]
    assert "initContainers" not in pod


def test_pod_security_drain_and_rollout() -> None:
    evaluation = evaluate_servers(stack_spec("prod"))
    deployment = evaluation.named("llama-70b-deployment")
    spec = deployment.inputs["spec"]
    pod = spec["template"]["spec"]
    vllm = container(deployment, "vllm")
    assert vllm["image"] == VLLM_IMAGE == "vllm/vllm-openai:v0.32.0"
    assert vllm["command"] == ["vllm", "serve"]
    assert vllm["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
    }
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # Every path the engine writes is a volume: the read-only root filesystem holds.
    assert {m["mountPath"] for m in vllm["volumeMounts"]} == {"/models", "/dev/shm", "/home/inferplane", "/tmp"}
    env = {e["name"]: e.get("value") for e in vllm["env"]}
    assert env["HOME"] == "/home/inferplane" and env["USER"] == "inferplane"
    assert env["HF_HOME"] == "/models/.hf"
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "llama-70b-sa"
    assert pod["terminationGracePeriodSeconds"] == 15 + 300 + 15
    assert vllm["lifecycle"] == {"preStop": {"sleep": {"seconds": 15}}}
    assert pod["nodeSelector"] == {"inferplane.io/pool": "h100"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    assert pod["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {
                "matchLabels": {"app.kubernetes.io/name": "llama-70b", "app.kubernetes.io/component": "model-server"}
            },
        }
    ]
    assert spec["replicas"] == 2
    # Three cold starts (sizing: 141.1 s S3 sync + 130.6 s engine start) before Kubernetes calls it stuck.
    assert spec["progressDeadlineSeconds"] == 815
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    # Not prod: no zone spread.
    dev = evaluate_servers(stack_spec("dev")).named("llama-8b-deployment")
    assert "topologySpreadConstraints" not in dev.inputs["spec"]["template"]["spec"]
    assert dev.inputs["spec"]["replicas"] == 0


def test_children_service_pdb_monitor_and_outputs() -> None:
    evaluation = evaluate_servers(stack_spec("prod"))
    component = evaluation.named("llama-70b")
    assert component.type == "inferplane:index:VllmService"
    children = {(r.type, r.name) for r in evaluation.children_of(component.urn)}
    assert children == {
        ("kubernetes:core/v1:ServiceAccount", "llama-70b-sa"),
        ("kubernetes:apps/v1:Deployment", "llama-70b-deployment"),
        ("kubernetes:core/v1:Service", "llama-70b-service"),
        ("kubernetes:core/v1:Service", "llama-70b-endpoints"),
        ("kubernetes:policy/v1:PodDisruptionBudget", "llama-70b-pdb"),
        ("kubernetes:monitoring.coreos.com/v1:PodMonitor", "llama-70b-monitor"),
    }
    service = evaluation.named("llama-70b-service").inputs["spec"]
    assert service["type"] == "ClusterIP"
    assert service["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    pdb = evaluation.named("llama-70b-pdb").inputs["spec"]
    assert pdb["maxUnavailable"] == 1
    monitor = evaluation.named("llama-70b-monitor").inputs
    assert monitor["metadata"]["labels"]["inferplane.io/scrape"] == "true"
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert evaluation.outputs["llama-70b-deployment"] == "llama-70b"
    assert evaluation.outputs["llama-70b-namespace"] == "inference"
    assert evaluation.outputs["llama-70b-service"] == "llama-70b"
    # max_replicas 1: no PodDisruptionBudget.
    dev = evaluate_servers(stack_spec("dev"))
    assert not dev.of_type("kubernetes:policy/v1:PodDisruptionBudget")


def test_bad_arguments_are_refused_together_naming_fields() -> None:
    spec = stack_spec("prod")
    plan = size_platform(spec)
    triton_sizing = next(d for d in plan.deployments if d.engine == "triton")
    vllm_deployment = next(d for d in spec.models if d.engine == "vllm")

    def program() -> None:
        VllmService(
            "bad",
            VllmServiceArgs(
                deployment=vllm_deployment,
                sizing=triton_sizing,
                environment="prod",
                namespace="inference",
                hf_token_secret_name="hf-token",
                tpu_topology="2x2",
                scrape_interval_seconds=0,
            ),
        )

    with pytest.raises(pulumi.InputPropertiesError) as caught:
        evaluate(program, mocks=PlatformMocks())
    assert caught.value.errors == [
        {"property_path": "sizing.name", "reason": "sizing is for 'llama-8b', not deployment 'llama-70b'"},
        {"property_path": "sizing.engine", "reason": "sizing was made for engine 'triton'"},
        {"property_path": "tpu_topology", "reason": "pool 'l40s' is not a TPU pool"},
        {"property_path": "scrape_interval_seconds", "reason": "must be positive"},
    ]


# --- against the pinned vLLM release's own argument definitions ------------------------------------------


def _all_stack_arg_lists() -> list[tuple[str, list[str]]]:
    found = []
    # Triton needs the cache, so the hub fallback is exercised on dev (TPU pools always use the hub).
    runs = [("dev", "s3://bucket/models/"), ("dev", None), ("staging", "s3://bucket/models/"), ("prod", "s3://b/m/")]
    for name, cache in runs:
        evaluation = evaluate_servers(stack_spec(name), model_cache=cache)
        for registration in evaluation.of_type("kubernetes:apps/v1:Deployment"):
            pod = registration.inputs["spec"]["template"]["spec"]
            for c in pod["containers"]:
                if c["name"] == "vllm":
                    found.append((f"{name}/{registration.name}", list(c["args"])))
    return found


def test_every_shipped_argument_list_is_accepted_by_the_pinned_vllm() -> None:
    cli = vllm_cli.load(vllm_definitions())
    assert cli.version == "0.32.0"
    arg_lists = [
        *_all_stack_arg_lists(),
        ("custom", _vllm_args(spec_from(CUSTOM), "llama-8b-awq")),
        ("custom", _vllm_args(spec_from(CUSTOM), "llama-70b-fp8")),
    ]
    assert len(arg_lists) == 7  # dev 2 x 1, staging 1, prod 2 (both roles of llama-70b), custom 2
    for where, args in arg_lists:
        assert vllm_cli.check(cli, args) == [], where


def test_the_checker_refuses_what_vllm_would() -> None:
    cli = vllm_cli.load(vllm_definitions())
    good = ["m", "--kv-cache-dtype", "fp8"]
    assert vllm_cli.check(cli, good) == []
    assert vllm_cli.check(cli, ["serve", "m"]) == ["unexpected positional argument 'm'"]
    assert vllm_cli.check(cli, ["--model", "m"]) == [
        "the first argument must be the model (the image's entrypoint is `vllm serve`)"
    ]
    assert vllm_cli.check(cli, ["m", "--kv-cache-dtype", "fp4"])[0].startswith("--kv-cache-dtype: 'fp4' is not one of")
    assert vllm_cli.check(cli, ["m", "--enable-chunked-prefil"]) == [
        "--enable-chunked-prefil: not an argument of vLLM 0.32.0"
    ]
    assert vllm_cli.check(cli, ["m", "--tensor-parallel-size", "two"]) == [
        "--tensor-parallel-size: 'two' is not an integer"
    ]
    assert vllm_cli.check(cli, ["m", "--speculative-config", json.dumps({"method": "medusa2"})])[0].startswith(
        "--speculative-config: method='medusa2' is not one of"
    )
    assert vllm_cli.check(cli, ["m", "--speculative-config", '{"draft": "x"}']) == [
        "--speculative-config: 'draft' is not a field of SpeculativeConfig"
    ]
    # ``served_model_name: str | list[str] | None`` takes one or more names (argparse nargs "+"); a single-valued
    # flag takes one, and what follows it is a stray positional.
    assert vllm_cli.check(cli, ["m", "--served-model-name", "a", "b", "--max-num-seqs", "4"]) == []
    assert vllm_cli.check(cli, ["m", "--served-model-name", "--max-num-seqs", "4"]) == [
        "--served-model-name: missing value"
    ]
    assert vllm_cli.check(cli, ["m", "--max-num-seqs", "4", "8"]) == ["unexpected positional argument '8'"]


@pytest.mark.parametrize("role", ["kv_producer", "kv_consumer"])
@pytest.mark.parametrize(("efa", "backend"), [(True, "LIBFABRIC"), (False, "UCX")])
def test_the_kv_transfer_config_is_nixl_and_accepted_by_the_pinned_vllm(role: Any, efa: bool, backend: str) -> None:
    cli = vllm_cli.load(vllm_definitions())
    config = nixl_transfer_config(role, efa=efa)
    assert json.loads(config) == {
        "kv_connector": "NixlConnector",
        "kv_role": role,
        "kv_buffer_device": "cuda",
        "kv_connector_extra_config": {"backends": [backend]},
        "kv_load_failure_policy": "recompute",
    }
    assert vllm_cli.check(cli, ["m", "--kv-transfer-config", config]) == []
    leased = json.loads(nixl_transfer_config(role, efa=efa, lease_seconds=5))["kv_connector_extra_config"]
    assert leased == {"backends": [backend], "kv_lease_duration": 5}
    # vLLM 0.32 removed the V0 connectors' fields: the checker refuses them as vLLM's config does.
    removed = json.dumps({"kv_connector": "NixlConnector", "kv_role": role, "kv_rank": 0})
    assert vllm_cli.check(cli, ["m", "--kv-transfer-config", removed]) == [
        "--kv-transfer-config: 'kv_rank' is not a field of KVTransferConfig"
    ]


@settings(max_examples=60, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    context=st.integers(min_value=1024, max_value=131072),
    seqs=st.integers(min_value=1, max_value=1024),
    tokens=st.sampled_from([2048, 4096, 8192, 16384]),
    utilization=st.floats(min_value=0.5, max_value=0.93).map(lambda u: round(u, 2)),
    kv=st.sampled_from(["auto", "fp8"]),
    dtype=st.sampled_from(["bfloat16", "float16"]),
    quantization=st.sampled_from([None, "fp8", "awq"]),
    prefix=st.booleans(),
    chunked=st.booleans(),
    interval=st.integers(min_value=1, max_value=64),
    speculative=st.sampled_from(
        [
            None,
            SpeculativeDecodingSpec(method="ngram", prompt_lookup_max=3),
            SpeculativeDecodingSpec(method="draft_model", draft_model="org/draft"),
            SpeculativeDecodingSpec(method="eagle", draft_model="org/eagle"),
            SpeculativeDecodingSpec(method="eagle3", draft_model="org/eagle3"),
        ]
    ),
)
def test_every_settings_combination_renders_accepted_flags(  # noqa: PLR0917 - one parameter per strategy
    tp: int,
    context: int,
    seqs: int,
    tokens: int,
    utilization: float,
    kv: Any,
    dtype: Any,
    quantization: Any,
    prefix: bool,
    chunked: bool,
    interval: int,
    speculative: SpeculativeDecodingSpec | None,
) -> None:
    cli = vllm_cli.load(vllm_definitions())
    settings_ = VllmSettings(
        tensor_parallel_size=tp,
        max_model_len=context,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        gpu_memory_utilization=utilization,
        kv_cache_dtype=kv,
        dtype=dtype,
        quantization=quantization,
        enable_prefix_caching=prefix,
        enable_chunked_prefill=chunked,
        block_size=16,
        stream_interval=interval,
    )
    args = vllm_args(
        settings_, model="org/m", served_model_name="m", speculative=speculative, shutdown_timeout_seconds=30
    )
    assert vllm_cli.check(cli, args) == []


def test_a_tpu_pool_refuses_the_s3_cache() -> None:
    spec = stack_spec("staging")
    sizing = next(d for d in size_platform(spec).deployments if d.name == "qwen-7b")
    deployment = next(d for d in spec.models if d.name == "qwen-7b")

    def program() -> None:
        VllmService(
            "qwen-7b",
            VllmServiceArgs(
                deployment=deployment,
                sizing=sizing,
                environment="staging",
                namespace="inference",
                hf_token_secret_name="hf-token",
                model_cache_uri="s3://bucket/models/",
            ),
        )

    with pytest.raises(pulumi.InputPropertiesError) as caught:
        evaluate(program, mocks=PlatformMocks())
    assert caught.value.errors == [
        {"property_path": "tpu_topology", "reason": "pool 'tpu-v5e' is a TPU pool: give its slice topology"},
        {
            "property_path": "model_cache_uri",
            "reason": "the S3 cache is read through EKS Pod Identity; TPU pools on GKE read the Hugging Face hub",
        },
    ]


def test_the_deployment_carries_the_serving_contract() -> None:
    """Labels and annotations of components.serving.annotations, read back by the policy pack and dashboards."""
    spec = stack_spec("prod")
    sizing = next(d for d in size_platform(spec).deployments if d.name == "llama-70b")
    metadata = evaluate_servers(spec).named("llama-70b-deployment").inputs["metadata"]
    assert metadata["annotations"] == serving_annotations(sizing)
    assert metadata["annotations"]["inferplane.io/tensor-parallel-size"] == "4"
    assert metadata["labels"] == {
        "team": "ml-platform",
        "cost-center": "ml-prod",
        "app.kubernetes.io/name": "llama-70b",
        "app.kubernetes.io/component": "model-server",
        "inferplane.io/model": "llama-70b",
        "app.kubernetes.io/part-of": "inferplane",
    }
