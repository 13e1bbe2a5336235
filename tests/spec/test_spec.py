"""The platform spec: the shipped stacks validate; each bad input is refused naming its key path."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import botocore.session  # botocore ships no type hints
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplane.components.capacity.sizing import size_platform
from inferplane.components.spec.platform_spec import (
    LOG_RETENTION_VALUES,
    PLATFORM_KEY,
    PROVIDER_BASE_URL_PATTERN,
    ROUTE_EXAMPLES_PATTERN,
    PlatformSpec,
    RoutingSpec,
    SpecError,
    parse_platform,
    routing_of,
)
from inferplane.tool.stackfile import read_stack_config
from tests.conftest import PROJECT_DIR


def _raw(stack: str) -> dict[str, Any]:
    config = read_stack_config(PROJECT_DIR, stack).config
    return copy.deepcopy(config[PLATFORM_KEY])


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_shipped_stacks_validate(stack: str) -> None:
    spec = parse_platform(_raw(stack), "us-east-1")
    assert spec.environment == stack
    assert spec.region == "us-east-1"


def test_spec_is_frozen() -> None:
    spec = parse_platform(_raw("dev"), "us-east-1")
    with pytest.raises(Exception, match="frozen"):
        spec.environment = "prod"  # type: ignore[misc]


Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def apply(raw: dict[str, Any]) -> None:
        node: Any = raw
        parts = path.replace("]", "").replace("[", ".").split(".")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        last = parts[-1]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return apply


def _both(*mutations: Mutation) -> Mutation:
    def apply(raw: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(raw)

    return apply


def _delete(path: str) -> Mutation:
    def apply(raw: dict[str, Any]) -> None:
        node: Any = raw
        parts = path.replace("]", "").replace("[", ".").split(".")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[parts[-1]]

    return apply


SEVENTY_B = {
    "name": "llama-70b-long",
    "model": "llama-3.3-70b",
    "pool": "h100",
    "max_context": 262144,
    "concurrency": 8,
    "min_replicas": 2,
    "max_replicas": 2,
}

ROUTE = {"by": "difficulty", "cheap": "llama-8b", "strong": "llama-70b", "examples": "routes/a.jsonl", "threshold": 0.1}
"""A difficulty route between prod's two models."""

CASES: list[tuple[str, str, Mutation, str, str]] = [
    # (id, stack, mutation, key path, message)
    ("context-beyond-model", "prod", _set("models[1]", SEVENTY_B), "models[1].max_context",
     "262144 exceeds the 131072 tokens llama-3.3-70b supports"),
    ("unknown-key", "dev", _set("models[0].max_ctx", 4096), "models[0].max_ctx", "unknown key"),
    ("unknown-model", "dev", _set("models[0].model", "llama-9"), "models[0].model",
     "unknown model 'llama-9'; known: deepseek-r1-distill-llama-70b, gemma-2-9b, llama-3.1-405b, llama-3.1-8b, "
     "llama-3.3-70b, mistral-7b, mixtral-8x7b, qwen2.5-32b, qwen2.5-72b, qwen2.5-7b"),
    ("accelerator-mismatch", "dev", _set("pools[0].instance_type", "g6e.xlarge"), "pools[0].accelerator",
     "g6e.xlarge carries l40s-48gb, not l4-24gb"),
    ("unknown-instance", "dev", _set("pools[0].instance_type", "g9.huge"), "pools[0].instance_type",
     "unknown instance type 'g9.huge'"),
    ("efa-unsupported", "dev", _set("pools[0].efa", True), "pools[0].efa", "g6.2xlarge does not support EFA"),
    ("capacity-block-unsupported", "dev", _set("pools[0].capacity_type", "capacity_block"), "pools[0].capacity_type",
     "g6.2xlarge is not sold as a capacity block"),
    ("capacity-block-needs-reservation", "prod", _set("pools[0].capacity_type", "capacity_block"),
     "pools[0].capacity_reservation_id", "a capacity block needs its reservation id (cr-...)"),
    ("reservation-without-block", "prod", _set("pools[0].capacity_reservation_id", "cr-0123456789abcdef0"),
     "pools[0].capacity_reservation_id", "only capacity_block pools take a reservation id"),
    ("bad-reservation-id", "prod", _set("pools[0].capacity_reservation_id", "reservation-1"),
     "pools[0].capacity_reservation_id", "String should match pattern '^cr-[0-9a-f]{8,17}$'"),
    ("gpus-per-replica-above-node", "dev", _set("models[0].gpus_per_replica", 2), "models[0].gpus_per_replica",
     "2 GPUs per replica exceeds the 1 per g6.2xlarge node: tensor parallelism never crosses a node"),
    ("missing-pool", "dev", _set("models[0].pool", "h100"), "models[0].pool", "no pool named 'h100' (l4-spot)"),
    ("zero-min-without-scale-to-zero", "dev", _set("models[0].scale_to_zero", False), "models[0]",
     "min_replicas 0 needs scale_to_zero: true"),
    ("min-above-max", "prod", _set("models[0].min_replicas", 9), "models[0]",
     "min_replicas 9 exceeds max_replicas 5"),
    ("model-and-architecture", "dev", _set("models[0].architecture", {"hf_repo": "x/y"}),
     "models[0].architecture.parameters", "Field required"),
    ("utilization-above-cap", "dev", _set("models[0].gpu_memory_utilization", 0.95), "models[0].gpu_memory_utilization",
     "Input should be less than or equal to 0.93"),
    ("prod-two-zones", "prod", _set("zones", ["us-east-1a", "us-east-1b"]), "zones",
     "prod spreads over at least 3 zones, got 2"),
    ("zone-of-other-region", "dev", _set("zones[1]", "us-west-2a"), "zones[1]",
     "'us-west-2a' is not a zone of region us-east-1"),
    ("public-endpoint-without-allowlist", "dev", _set("cluster.public_access_cidrs", []), "cluster",
     "a public endpoint needs an explicit public_access_cidrs allowlist"),
    ("bad-cidr", "dev", _set("cluster.public_access_cidrs", ["10.0.0.1/8"]), "cluster.public_access_cidrs",
     "'10.0.0.1/8' is not a valid CIDR block: 10.0.0.1/8 has host bits set"),
    ("region-in-platform", "dev", _set("region", "us-east-1"), "region",
     "set the region once, as aws:region, not inside the platform block"),
    ("int4-without-repo", "dev", _set("models[0].weights_dtype", "int4"), "models[0].weights_repo",
     "int4 weights need an AWQ checkpoint: set weights_repo"),
    ("kv-16bit-mismatch", "dev", _set("models[0].kv_cache_dtype", "fp16"), "models[0].kv_cache_dtype",
     "a fp16 KV cache with bf16 activations is not supported; use auto or fp8"),
    ("triton-on-tpu", "staging", _set("models[1].engine", "triton"), "models[1].engine",
     "TPU pools serve with vLLM's TPU image; Triton TensorRT-LLM and SGLang's image need NVIDIA"),
    ("sglang-on-tpu", "staging", _set("models[1].engine", "sglang"), "models[1].engine",
     "TPU pools serve with vLLM's TPU image; Triton TensorRT-LLM and SGLang's image need NVIDIA"),
    ("sglang-prompt-lookup", "dev",
     _set("models[0]", {"name": "q", "model": "qwen2.5-7b", "engine": "sglang", "pool": "l4-spot", "max_context": 4096,
                        "concurrency": 4, "min_replicas": 0, "scale_to_zero": True,
                        "speculative_decoding": {"method": "ngram", "prompt_lookup_max": 4}}),
     "models[0].speculative_decoding.prompt_lookup_max",
     "SGLang's NGRAM speculation matches against its own token trie and takes no prompt-lookup window"),
    ("prefix-heavy-without-cache", "dev",
     _set("models[0]", {"name": "q", "model": "qwen2.5-7b", "engine": "sglang", "pool": "l4-spot", "max_context": 4096,
                        "concurrency": 4, "min_replicas": 0, "scale_to_zero": True, "prefix_heavy": True,
                        "prefix_caching": False}),
     "models[0].prefix_heavy", "prefix-heavy traffic is served from the prefix cache: set prefix_caching"),
    ("host-kv-triton", "prod", _set("models[1].host_kv_cache", True), "models[1].host_kv_cache",
     "the host KV tier is rendered for vLLM (its OffloadingConnector); triton's host cache is not sized by the "
     "platform yet: serve with vllm or turn it off"),
    ("host-kv-tpu", "staging", _set("models[1].host_kv_cache", True), "models[1].host_kv_cache",
     "vLLM offloads KV blocks from CUDA devices only; TPU pools cannot have a host KV tier"),
    ("host-kv-without-prefix-cache", "prod", _set("models[0].prefix_caching", False), "models[0].host_kv_cache",
     "the host KV tier extends the prefix cache: set prefix_caching"),
    ("disaggregated-triton", "prod", _set("models[1].disaggregation", {}), "models[1].disaggregation",
     "disaggregated serving is rendered for vLLM (NixlConnector); triton's disaggregated mode (SGLang's "
     "--disaggregation-mode, TensorRT-LLM's disaggregated executor) is not sized or rendered yet: serve with vllm or "
     "leave disaggregation unset"),
    ("disaggregated-tpu", "staging", _set("models[1].disaggregation", {}), "models[1].disaggregation",
     "the KV transfer is rendered for NVIDIA pools (NIXL over EFA or UCX); TPU pools serve aggregated"),
    ("disaggregated-unknown-pool", "prod", _set("models[0].disaggregation.prefill.pool", "h200"),
     "models[0].disaggregation.prefill.pool", "no pool named 'h200' (h100, l40s)"),
    ("disaggregated-efa-and-not", "prod", _set("models[0].disaggregation.prefill.pool", "l40s"),
     "models[0].disaggregation.prefill.pool",
     "pool 'h100' has EFA and pool 'l40s' lacks it: the KV transfer runs over one fabric, so both roles' pools set "
     "efa alike"),
    ("disaggregated-two-zones", "prod",
     _both(_set("pools[0].name", "h100-a"), _set("pools[1]", {"name": "h100", "accelerator": "h100-80gb",
                                                             "instance_type": "p5.48xlarge", "efa": True,
                                                             "zone": "us-east-1b"}),
           _set("models[1].pool", "h100"), _set("models[0].disaggregation.prefill.pool", "h100-a")),
     "models[0].disaggregation.prefill.pool",
     "pools 'h100' (us-east-1b) and 'h100-a' (us-east-1a) are in different zones: EFA does not cross availability "
     "zones, so both roles' pools need the same zone"),
    ("disaggregated-name-too-long", "prod", _set("models[0].name", "a" * 33), "models[0].name",
     f"the prefill role is named '{'a' * 33}-prefill', longer than 40 characters: shorten the name to at most 32"),
    ("disaggregated-name-taken", "prod", _set("models[1].name", "llama-70b-prefill"), "models[0].name",
     "the prefill role's name 'llama-70b-prefill' is another model's name"),
    ("disaggregated-prefill-tp", "prod", _set("models[0].disaggregation.prefill.gpus_per_replica", 3),
     "models[0].disaggregation.prefill.gpus_per_replica", "3 does not divide the 8 accelerators of a p5.48xlarge node"),
    ("disaggregated-prefill-range", "prod",
     _set("models[0].disaggregation.prefill", {"min_replicas": 3, "max_replicas": 2}),
     "models[0].disaggregation.prefill", "min_replicas 3 exceeds max_replicas 2"),
    ("tpu-fp8", "staging", _set("models[1].weights_dtype", "fp8"), "models[1].weights_dtype",
     "TPU v5e serves bf16 weights and KV cache"),
    ("tpu-without-gcp", "staging", _delete("gcp"), "pools[1].instance_type",
     "ct5lp-hightpu-4t is a GKE machine type: add a gcp block"),
    ("tpu-bad-topology", "staging", _set("pools[1].tpu_topology", "2x4"), "pools[1].tpu_topology",
     "2x4 is not a ct5lp-hightpu-4t topology (2x2, 4x4, 4x8, 8x8, 8x16, 16x16)"),
    ("tier-unknown-model", "prod", _set("gateway.tiers[1].models", ["llama-9b"]), "gateway.tiers[1].models[0]",
     "no model deployment named 'llama-9b'"),
    ("tier-fallback-other-cluster", "staging",
     _set("gateway.tiers[0]", {"name": "standard", "models": ["llama-8b"], "fallback": ["qwen-7b"]}),
     "gateway.tiers[0].fallback",
     "qwen-7b runs on gke but primary llama-8b, qwen-agent on eks: a gateway falls back only to models on its own "
     "cluster (nothing joins the EKS and GKE networks); list the model under models instead"),
    ("model-tier-missing", "prod", _set("models[1].routing_tier", "batch"), "models[1].routing_tier",
     "no gateway tier named 'batch'"),
    ("duplicate-pool", "prod", _set("pools[1].name", "h100"), "pools[1].name", "pool name 'h100' is used twice"),
    ("spec-decoding-needs-draft", "dev", _set("models[0].speculative_decoding", {"method": "eagle3"}),
     "models[0].speculative_decoding", "method 'eagle3' needs draft_model"),
    ("triton-spec-decoding", "prod", _set("models[1].speculative_decoding", {"method": "ngram"}),
     "models[1].speculative_decoding",
     "speculative decoding with Triton needs the BLS model and a draft engine; not supported"),
    ("prod-short-log-retention", "prod", _set("cluster.log_retention_days", 90), "cluster.log_retention_days",
     "prod keeps control-plane logs at least 365 days, got 90"),
    ("log-retention-not-cloudwatch", "dev", _set("cluster.log_retention_days", 100), "cluster.log_retention_days",
     "100 is not a CloudWatch Logs retention period (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, "
     "731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)"),
    ("fewer-log-types", "dev", _set("cluster.log_types", ["api", "audit"]), "cluster.log_types",
     "every control-plane log is kept; missing authenticator, controllerManager, scheduler"),
    ("admin-principal-not-iam", "prod", _set("cluster.admin_principals", ["arn:aws:iam::123456789012:root"]),
     "cluster.admin_principals",
     "'arn:aws:iam::123456789012:root' is not an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)"),
    ("admin-principal-repeats", "prod",
     _set("cluster.admin_principals", ["arn:aws:iam::123456789012:role/a", "arn:aws:iam::123456789012:role/a"]),
     "cluster.admin_principals", "admin_principals repeat"),
    ("short-digest", "prod", _set("image_digests", {"vllm": "sha256:abc"}), "image_digests.vllm",
     "String should match pattern '^sha256:[0-9a-f]{64}$'"),
    ("digest-of-unknown-image", "prod", _set("image_digests", {"nginx": "sha256:" + "0" * 64}),
     "image_digests.nginx (key)",
     "Input should be 'vllm', 'vllm-tpu', 'vllm-cpu', 'triton-trtllm', 'sglang' or 'aws-cli'"),
    ("model-digest-tag", "prod", _set("models[0].image_digest", "v0.32.0"), "models[0].image_digest",
     "String should match pattern '^sha256:[0-9a-f]{64}$'"),
    ("cache-endpoint-incomplete", "dev", _set("cache.embedder", {"kind": "endpoint", "url": "http://e:8000/v1"}),
     "cache.embedder", "an endpoint embedder needs model, dimensions"),
    ("cache-wordllama-url", "dev", _set("cache.embedder", {"url": "http://e:8000/v1"}), "cache.embedder",
     "url and model apply to kinds 'endpoint' and 'served' only"),
    ("cache-served-no-model", "prod", _set("cache.embedder", {"kind": "served"}), "cache.embedder",
     "a served embedder needs model, one of: all-minilm-l6-v2"),
    ("cache-served-unknown-model", "prod", _set("cache.embedder", {"kind": "served", "model": "bge-m3"}),
     "cache.embedder", "model 'bge-m3' is not a catalog embedding model; known: all-minilm-l6-v2"),
    ("cache-served-url", "prod",
     _set("cache.embedder", {"kind": "served", "model": "all-minilm-l6-v2", "url": "http://e:8000/v1"}),
     "cache.embedder", "a served embedder's url is its in-cluster Service; set kind 'endpoint' for your own"),
    ("cache-served-dims", "prod",
     _set("cache.embedder", {"kind": "served", "model": "all-minilm-l6-v2", "dimensions": 768}),
     "cache.embedder", "all-minilm-l6-v2 embeds in 384 dimensions, not 768"),
    ("cache-served-replicas", "prod",
     _set("cache.embedder", {"kind": "served", "model": "all-minilm-l6-v2", "replicas": 0}),
     "cache.embedder.replicas", "Input should be greater than or equal to 1"),
    ("cache-wordllama-dims", "dev", _set("cache.embedder", {"dimensions": 512}), "cache.embedder",
     "wordllama's bundled model has 64, 128 or 256 dimensions, not 512"),
    ("cache-noeviction", "dev", _set("cache.eviction_policy", "noeviction"), "cache.eviction_policy",
     "Input should be 'volatile-lru', 'allkeys-lru', 'volatile-lfu', 'allkeys-lfu', 'volatile-ttl', "
     "'volatile-random' or 'allkeys-random'"),
    ("routing-unknown-key", "prod", _set("gateway.routing.weight", 2), "gateway.routing.weight", "unknown key"),
    ("routing-overlap-above-16", "prod", _set("gateway.routing.overlap_weight", 16.5),
     "gateway.routing.overlap_weight", "Input should be less than or equal to 16"),
    ("routing-overlap-negative", "prod", _set("models[0].routing", {"overlap_weight": -0.5}),
     "models[0].routing.overlap_weight", "Input should be greater than or equal to 0"),
    ("routing-unknown-policy", "prod", _set("gateway.tiers[0].routing", {"policy": "round_robin"}),
     "gateway.tiers[0].routing.policy", "Input should be 'prefix_aware' or 'least_request'"),
    ("route-cheap-outside-tier", "prod", _set("gateway.tiers[0].route", ROUTE), "gateway.tiers[0].route.cheap",
     "'llama-8b' is not one of the tier's models"),
    ("route-one-model", "prod",
     _set("gateway.tiers[1]", {"name": "standard", "models": ["llama-8b", "llama-70b"],
                               "route": {**ROUTE, "strong": "llama-8b"}}),
     "gateway.tiers[1].route.strong", "the strong model is the cheap one ('llama-8b')"),
    ("route-examples-outside-project", "prod", _set("gateway.tiers[0].route", {**ROUTE, "examples": "../l.jsonl"}),
     "gateway.tiers[0].route.examples", f"String should match pattern '{ROUTE_EXAMPLES_PATTERN}'"),
    ("route-threshold-above-1", "prod", _set("gateway.tiers[0].route", {**ROUTE, "threshold": 1.5}),
     "gateway.tiers[0].route.threshold", "Input should be less than or equal to 1"),
    ("route-across-clusters", "staging",
     _set("gateway.tiers[0].route", {**ROUTE, "cheap": "llama-8b", "strong": "qwen-7b"}), "gateway.tiers[0].route",
     "the cheap and the strong model run on different clusters; one gateway decides between them"),
    ("provider-plain-http", "prod", _set("gateway.providers[0].base_url", "http://api.fireworks.ai/inference/v1"),
     "gateway.providers[0].base_url", f"String should match pattern '{PROVIDER_BASE_URL_PATTERN}'"),
    ("provider-url-with-credentials", "prod",
     _set("gateway.providers[0].base_url", "https://user:key@api.fireworks.ai/v1"),
     "gateway.providers[0].base_url", f"String should match pattern '{PROVIDER_BASE_URL_PATTERN}'"),
    ("provider-url-with-query", "prod", _set("gateway.providers[0].base_url", "https://api.fireworks.ai/v1?key=x"),
     "gateway.providers[0].base_url", f"String should match pattern '{PROVIDER_BASE_URL_PATTERN}'"),
    ("provider-named-as-a-model", "prod", _set("gateway.providers[0].name", "llama-8b"), "gateway.providers[0].name",
     "'llama-8b' already names a model or a tier"),
    ("provider-unknown-tenant", "prod", _set("gateway.providers[0].tenants", ["assistant", "nobody"]),
     "gateway.providers[0].tenants[1]", "no tenant named 'nobody'"),
    ("provider-named-by-no-tier", "prod", _set("gateway.tiers[0].providers", []), "gateway.providers[0].name",
     "no tier names provider 'fireworks-llama-70b' in its providers"),
    ("tier-unknown-provider", "prod", _set("gateway.tiers[1].providers", ["openai"]),
     "gateway.tiers[1].providers[0]", "no provider named 'openai'"),
    ("provider-credential-value", "prod", _set("gateway.providers[0].credential.value", "sk-live-1"),
     "gateway.providers[0].credential.value", "unknown key"),
    ("provider-negative-price", "prod", _set("gateway.providers[0].input_usd_per_million", -1),
     "gateway.providers[0].input_usd_per_million", "Input should be greater than or equal to 0"),
]  # fmt: skip


@pytest.mark.parametrize(("stack", "mutation", "path", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_key(stack: str, mutation: Mutation, path: str, message: str) -> None:
    raw = _raw(stack)
    mutation(raw)
    with pytest.raises(SpecError) as caught:
        parse_platform(raw, "us-east-1")
    found = [(issue.path, issue.message) for issue in caught.value.issues]
    assert (path, message) in found


def test_every_issue_is_reported_at_once() -> None:
    raw = _raw("dev")
    raw["models"][0]["max_context"] = 200_000
    raw["pools"][0]["efa"] = True
    with pytest.raises(SpecError) as caught:
        parse_platform(raw, "us-east-1")
    assert [i.path for i in caught.value.issues] == ["pools[0].efa", "models[0].max_context"]


def test_render_names_the_file_and_full_key() -> None:
    raw = _raw("prod")
    raw["models"][1] = SEVENTY_B
    with pytest.raises(SpecError) as caught:
        parse_platform(raw, "us-east-1")
    assert (
        "stacks/Pulumi.prod.yaml: inferplane:platform.models[1].max_context: "
        "262144 exceeds the 131072 tokens llama-3.3-70b supports"
    ) in caught.value.render("stacks/Pulumi.prod.yaml").splitlines()


def test_custom_architecture_is_accepted_and_checked() -> None:
    raw = _raw("dev")
    raw["models"][0].pop("model")
    raw["models"][0]["architecture"] = {
        "hf_repo": "acme/tiny-8b",
        "parameters": 8_000_000_000,
        "layers": 32,
        "attention_heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "hidden_size": 4096,
        "vocab_size": 128256,
        "max_context": 4096,
    }
    with pytest.raises(SpecError) as caught:
        parse_platform(raw, "us-east-1")
    assert ("models[0].max_context", "8192 exceeds the 4096 tokens acme/tiny-8b supports") in [
        (i.path, i.message) for i in caught.value.issues
    ]
    raw["models"][0]["max_context"] = 4096
    spec = parse_platform(raw, "us-east-1")
    assert spec.models[0].architecture_resolved.hf_repo == "acme/tiny-8b"
    assert spec.models[0].model_label == "acme/tiny-8b"


@settings(max_examples=60, deadline=None)
@given(
    context=st.integers(min_value=1, max_value=300_000),
    concurrency=st.integers(min_value=1, max_value=4096),
    replicas=st.tuples(st.integers(0, 10), st.integers(1, 10)),
)
def test_valid_or_refused_never_half_applied(context: int, concurrency: int, replicas: tuple[int, int]) -> None:
    raw = _raw("dev")
    model = raw["models"][0]
    model.update(max_context=context, concurrency=concurrency, min_replicas=replicas[0], max_replicas=replicas[1])
    try:
        spec = parse_platform(raw, "us-east-1")
    except SpecError as exc:
        assert exc.issues
        assert all(issue.path and issue.message for issue in exc.issues)
        return
    assert isinstance(spec, PlatformSpec)
    assert spec.models[0].max_context == context <= spec.models[0].architecture_resolved.max_context
    # Beyond the environment's limit the spec is valid and the plan refused (exit 1), naming limit and policy.
    refused = [p for p in size_platform(spec).problems if ".limits.max_context " in p]
    assert bool(refused) == (context > spec.limits.max_context)
    assert spec.models[0].min_replicas <= spec.models[0].max_replicas


def test_log_retention_values_are_cloudwatch_logs_own() -> None:
    documentation = botocore.session.get_session().get_service_model("logs").shape_for("Days").documentation
    listed = documentation.split("Possible values are:", 1)[1].split(".", 1)[0]
    assert {int(v) for v in re.findall(r"\d+", listed)} == LOG_RETENTION_VALUES


@pytest.mark.parametrize(("environment", "days"), [("dev", 90), ("staging", 365), ("prod", 365)])
def test_log_retention_defaults_per_environment(environment: str, days: int) -> None:
    raw = _raw(environment)
    raw["cluster"].pop("log_retention_days", None)
    spec = parse_platform(raw, "us-east-1")
    assert spec.cluster.log_retention_days is None and spec.log_retention_days == days


def test_routing_defaults_to_load_bounded_prefix_affinity() -> None:
    assert RoutingSpec().model_dump() == {
        "policy": "prefix_aware",
        "overlap_weight": 8.0,
        "load_bound": True,
        "hold": False,
    }
    assert RoutingSpec(overlap_weight=0.0).overlap_weight == 0.0
    assert RoutingSpec(overlap_weight=16.0).overlap_weight == 16.0
    spec = parse_platform(_raw("prod"), "us-east-1")
    assert spec.gateway.routing == RoutingSpec()
    assert [routing_of(spec, m) for m in spec.models] == [RoutingSpec(), RoutingSpec()]


def test_routing_model_wins_over_tier_wins_over_gateway() -> None:
    """prod: tier premium = [llama-70b] with fallback llama-8b, tier standard = [llama-8b]."""
    raw = _raw("prod")
    raw["gateway"]["routing"] = {"policy": "least_request"}
    raw["gateway"]["tiers"][0]["routing"] = {"overlap_weight": 2.0}
    spec = parse_platform(raw, "us-east-1")
    seventy, eight = spec.models
    assert (seventy.name, eight.name) == ("llama-70b", "llama-8b")
    # The tier speaks for its primaries only: llama-8b, premium's fallback, keeps the gateway's routing.
    assert routing_of(spec, seventy) == RoutingSpec(overlap_weight=2.0)
    assert routing_of(spec, eight) == RoutingSpec(policy="least_request")
    raw["gateway"]["tiers"][1]["routing"] = {"overlap_weight": 4.0}
    spec = parse_platform(raw, "us-east-1")
    assert routing_of(spec, spec.models[1]) == RoutingSpec(overlap_weight=4.0)
    raw["models"][1]["routing"] = {"load_bound": False}
    spec = parse_platform(raw, "us-east-1")
    assert routing_of(spec, spec.models[1]) == RoutingSpec(load_bound=False)
    assert routing_of(spec, spec.models[0]) == RoutingSpec(overlap_weight=2.0)


PROD_PROVIDERS = ["fireworks-llama-70b"]
"""Prod's hosted provider, which a tier must keep naming (a provider no tier names is refused)."""


def test_routing_of_takes_the_first_tier_listing_the_model_that_sets_one() -> None:
    raw = _raw("prod")
    raw["gateway"]["tiers"] = [
        {"name": "premium", "models": ["llama-70b", "llama-8b"], "providers": PROD_PROVIDERS},
        {"name": "standard", "models": ["llama-8b"], "routing": {"overlap_weight": 3.0}},
        {"name": "batch", "models": ["llama-8b"], "routing": {"overlap_weight": 5.0}},
    ]
    spec = parse_platform(raw, "us-east-1")
    assert routing_of(spec, spec.models[1]) == RoutingSpec(overlap_weight=3.0)
    assert routing_of(spec, spec.models[0]) == RoutingSpec()


def test_routing_of_a_model_joining_its_tier_by_routing_tier() -> None:
    """A model no tier names joins the tier of its ``routing_tier`` (``gateway_tiers``) and takes that tier's
    routing."""
    raw = _raw("prod")
    raw["gateway"]["tiers"] = [
        {"name": "premium", "models": ["llama-70b"], "providers": PROD_PROVIDERS},
        {"name": "standard", "models": ["llama-70b"], "routing": {"policy": "least_request"}},
    ]
    spec = parse_platform(raw, "us-east-1")
    assert spec.models[1].routing_tier == "standard"
    assert routing_of(spec, spec.models[1]) == RoutingSpec(policy="least_request")
