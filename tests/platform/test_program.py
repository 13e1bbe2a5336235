"""The whole program per shipped stack: every model server on its pool's cluster, autoscaled on its queue, reading
the model cache, with the response cache beside it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from inferplane.components.catalog import get_instance_type
from inferplane.components.serving.annotations import GATEWAY_ROUTING
from inferplane.components.spec.platform_spec import routing_of
from inferplane.tool.mockengine import SECRET_PLACEHOLDER, Evaluation, Registration
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR
from tests.stacks import evaluate_shipped_stack

STACKS = ("dev", "staging", "prod")
SERVER_TYPES = {
    "inferplane:index:VllmService",
    "inferplane:index:TritonTrtLlmService",
    "inferplane:index:SglangService",
}


@pytest.fixture(scope="module")
def evaluations() -> Iterator[dict[str, Evaluation]]:
    yield {name: evaluate_shipped_stack(name) for name in STACKS}


def _provider_name(registration: Registration) -> str:
    return registration.provider.rsplit("::", 1)[0].rsplit("::", 1)[-1]


def _server_deployments(result: Evaluation) -> dict[str, Registration]:
    servers = {r.urn: r.name for r in result.registrations if r.type in SERVER_TYPES}
    return {servers[r.parent]: r for r in result.of_type("kubernetes:apps/v1:Deployment") if r.parent in servers}


@pytest.mark.parametrize("stack", STACKS)
def test_every_model_server_deployment_scales_on_its_queue(evaluations: dict[str, Evaluation], stack: str) -> None:
    result = evaluations[stack]
    spec = load_stack(PROJECT_DIR, stack).platform
    deployments = _server_deployments(result)
    # Every server scales: each model's and a disaggregated model's prefill role's, on its own queue.
    assert sorted(deployments) == sorted(m.name for m in spec.serving_deployments)
    scaled = {
        r.inputs["spec"]["scaleTargetRef"]["name"]: r
        for r in result.of_type("kubernetes:keda.sh/v1alpha1:ScaledObject")
    }
    for model in spec.serving_deployments:
        deployment = deployments[model.name]
        scaled_object = scaled[deployment.inputs["metadata"]["name"]]
        triggers = scaled_object.inputs["spec"]["triggers"]
        # Never cpu or memory; a decode role also on its running sequences and KV use; a model that may sleep at
        # zero also wakes on the gateway's pending requests.
        expected = ["queue-depth"] + (["running", "kv-usage"] if model.disaggregation is not None else [])
        expected += ["wake"] if model.scale_to_zero else []
        assert [t["name"] for t in triggers] == expected
        assert {t["type"] for t in triggers} == {"prometheus"}
        queue = {
            "vllm": "vllm:num_requests_waiting",
            "triton": 'request_type="waiting"',
            "sglang": "sglang:num_queue_reqs",
        }[model.engine]
        assert queue in triggers[0]["metadata"]["query"]
        # KEDA runs on the same cluster as the Deployment it scales.
        assert _provider_name(scaled_object) == _provider_name(deployment)


def test_each_server_runs_on_the_cluster_of_its_pool(evaluations: dict[str, Evaluation]) -> None:
    result = evaluations["staging"]
    spec = load_stack(PROJECT_DIR, "staging").platform
    deployments = _server_deployments(result)
    for model in spec.models:
        cloud = get_instance_type(spec.pool(model.pool).instance_type).cloud
        expected = "inferplane-staging-k8s" if cloud == "gcp" else "eks-k8s"
        assert _provider_name(deployments[model.name]) == expected, model.name


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_gpu_servers_read_the_model_cache(evaluations: dict[str, Evaluation], stack: str) -> None:
    result = evaluations[stack]
    uri = result.outputs["modelCacheUri"]
    assert uri.startswith("s3://") and uri.endswith("/models/")
    bound = {
        r.inputs["serviceAccount"] for r in result.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    for name, deployment in _server_deployments(result).items():
        pod = deployment.inputs["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in bound, name
        fetch = [c for c in pod.get("initContainers", []) if c["name"].startswith("fetch-")]
        assert fetch, name
        assert any(uri in " ".join(c.get("command", []) + c.get("args", [])) for c in fetch), name


@pytest.mark.parametrize("stack", STACKS)
def test_outputs_and_the_response_cache(evaluations: dict[str, Evaluation], stack: str) -> None:
    result = evaluations[stack]
    spec = load_stack(PROJECT_DIR, stack).platform
    assert set(result.outputs["modelServers"]) == {m.name for m in spec.serving_deployments}
    (group,) = result.of_type("aws:elasticache/replicationGroup:ReplicationGroup")
    assert group.inputs["transitEncryptionEnabled"] is True
    assert group.inputs["authToken"] == SECRET_PLACEHOLDER
    assert result.outputs["cacheEndpoint"]


@pytest.mark.parametrize("stack", STACKS)
def test_the_hugging_face_token_is_only_ever_a_secret(evaluations: dict[str, Evaluation], stack: str) -> None:
    result = evaluations[stack]
    secrets = [r for r in result.of_type("kubernetes:core/v1:Secret") if r.name.endswith("hf-token")]
    assert secrets
    for secret in secrets:
        # The whole payload travels as a secret; the recorded plan only ever shows the placeholder.
        assert (secret.inputs.get("stringData") or secret.inputs.get("data")) == SECRET_PLACEHOLDER


@pytest.mark.parametrize("stack", STACKS)
def test_every_model_server_has_the_headless_service_its_gateway_resolves(
    evaluations: dict[str, Evaluation], stack: str
) -> None:
    """One ``<model>-endpoints`` Service per model server (clusterIP None, ready pods only, the Deployment's pods),
    and the gateway of its cluster routes to exactly that name with the routing the spec sets."""
    result = evaluations[stack]
    spec = load_stack(PROJECT_DIR, stack).platform
    deployments = _server_deployments(result)
    services = {r.inputs["metadata"]["name"]: r for r in result.of_type("kubernetes:core/v1:Service")}
    assert len(deployments) == len(spec.serving_deployments)
    for deployment in deployments.values():
        name = deployment.inputs["metadata"]["name"]
        headless = services[f"{name}-endpoints"]
        assert headless.inputs["spec"]["clusterIP"] == "None"
        assert headless.inputs["spec"]["publishNotReadyAddresses"] is False
        assert headless.inputs["spec"]["selector"] == deployment.inputs["spec"]["selector"]["matchLabels"]
    gateways = [r for r in result.of_type("kubernetes:apps/v1:Deployment") if r.name.endswith("-deployment")]
    routed = {
        model: policy
        for gateway in gateways
        if GATEWAY_ROUTING in gateway.inputs["metadata"].get("annotations", {})
        for model, policy in json.loads(gateway.inputs["metadata"]["annotations"][GATEWAY_ROUTING]).items()
    }
    assert routed == {m.name: routing_of(spec, m).model_dump(mode="json") for m in spec.serving_deployments}


AUTOSCALERS = ("kubernetes:keda.sh/v1alpha1:ScaledObject", "kubernetes:autoscaling/v2:HorizontalPodAutoscaler")


@pytest.mark.parametrize("stack", STACKS)
def test_every_autoscaled_deployment_leaves_its_replica_count_to_the_autoscaler(
    evaluations: dict[str, Evaluation], stack: str
) -> None:
    """KEDA and the HPA set ``spec.replicas`` once they exist; a Deployment that still sets it on every update (a
    config change's rollout among them) would be reset to its floor by each ``pulumi up``."""
    evaluation = evaluations[stack]
    deployments = {
        (r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r
        for r in evaluation.of_type("kubernetes:apps/v1:Deployment")
    }
    scaled = [
        (a.inputs["metadata"]["namespace"], a.inputs["spec"]["scaleTargetRef"]["name"])
        for kind in AUTOSCALERS
        for a in evaluation.of_type(kind)
    ]
    assert scaled and all(target in deployments for target in scaled), (scaled, sorted(deployments))
    assert {target: deployments[target].ignore_changes for target in scaled} == dict.fromkeys(
        scaled, ("spec.replicas",)
    )
    # Nothing else ignores a change: every other input is Pulumi's to set.
    assert all(not r.ignore_changes for key, r in deployments.items() if key not in scaled)
    if stack == "prod":  # the served embedder scales on its CPU, the gateway and the model servers on their queues
        assert ("inference", "cache-embedder") in scaled and ("inference", "gateway") in scaled
