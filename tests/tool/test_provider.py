"""The multi-language package: the schema the SDK infers for ``inferplane:index:Platform``, and the provider the
engine starts from ``PulumiPlugin.yaml`` answering ``GetSchema`` and ``Construct``."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Iterator
from typing import Any

import grpc
import jsonschema
import pulumi
import pytest
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.provider.experimental.util import camel_case
from pulumi.runtime.proto import errors_pb2, provider_pb2, status_pb2
from pydantic import BaseModel

from inferplane import __version__
from inferplane.components.capacity.sizing import size_platform
from inferplane.components.platform import Platform
from inferplane.components.platform.component import PLATFORM_TYPE, platform_spec, schema_path
from inferplane.components.spec.platform_spec import PlatformSpec
from inferplane.tool.cli import main as cli_main
from inferplane.tool.mockengine import PlatformMocks, Registration, evaluate
from inferplane.tool.schema import SCHEMA_FILE, generate_args_module, package_schema, schema_inputs, stale
from inferplane.tool.stackfile import load_stack
from tests.conftest import PROJECT_DIR, SHARED_DIR
from tests.provider_host import ProviderProcess, provider_process, secret
from tests.stacks import evaluate_shipped_stack

METASCHEMA = SHARED_DIR / "schemas" / "pulumi" / "package-metaschema.json"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return package_schema(__version__)


def test_committed_args_and_schema_are_what_the_spec_generates() -> None:
    assert stale() == [], "the spec changed: run `inferplane schema --write` and commit args.py and schema.json"


def test_cli_check_and_print(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["schema", "--check"]) == 0
    assert cli_main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["version"] == __version__
    assert {k: v for k, v in printed.items() if k != "version"} == json.loads(SCHEMA_FILE.read_text())


def test_schema_validates_against_pulumis_package_metaschema(schema: dict[str, Any]) -> None:
    if not METASCHEMA.is_file():
        pytest.skip(f"Pulumi's package metaschema not at {METASCHEMA} (../shared exists in the workplace and CI only)")
    # The metaschema's patterns are ECMA-262 regexes; Python spells their named groups (?P<name>...).
    metaschema = json.loads(re.sub(r"\(\?<([A-Za-z]\w*)>", r"(?P<\1>", METASCHEMA.read_text()))
    jsonschema.Draft202012Validator(metaschema).validate(schema)
    assert metaschema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["name"] == "inferplane"
    assert list(schema["resources"]) == [PLATFORM_TYPE]
    assert schema["resources"][PLATFORM_TYPE]["isComponent"] is True


def _models(model: type[BaseModel], seen: dict[str, type[BaseModel]]) -> dict[str, type[BaseModel]]:
    from inferplane.tool.schema import _model_of, _type_name

    seen[_type_name(model)] = model
    for info in model.model_fields.values():
        nested = _model_of(info.annotation)
        if nested is not None and _type_name(nested) not in seen:
            _models(nested, seen)
    return seen


def test_every_spec_field_is_an_input_property_with_its_required_ness(schema: dict[str, Any]) -> None:
    """The schema's inputs are the pydantic spec's fields (camelCase), required exactly where the spec requires."""
    platform = schema["resources"][PLATFORM_TYPE]
    spec_fields = {camel_case(f) for f in PlatformSpec.model_fields}
    assert set(platform["inputProperties"]) == spec_fields | {"hfToken"}
    required = {camel_case(f) for f, info in PlatformSpec.model_fields.items() if info.is_required()}
    assert set(platform["requiredInputs"]) == required | {"hfToken"}
    assert platform["inputProperties"]["hfToken"].get("plain") is None  # an Input: a secret output may be passed
    models = _models(PlatformSpec, {})
    objects = {token for token, t in schema["types"].items() if t["type"] == "object"}
    assert objects == {f"inferplane:index:{name}" for name in models if name != "PlatformArgs"}
    for name, model in models.items():
        if model is PlatformSpec:
            continue
        type_ = schema["types"][f"inferplane:index:{name}"]
        assert set(type_["properties"]) == {camel_case(f) for f in model.model_fields}, name
        required = {camel_case(f) for f, info in model.model_fields.items() if info.is_required()}
        assert set(type_.get("required", [])) == required, name
        for field, info in model.model_fields.items():
            description = type_["properties"][camel_case(field)].get("description")
            assert info.description is not None and description.startswith(info.description), (name, field)


def test_literal_fields_become_enums_with_the_spec_values(schema: dict[str, Any]) -> None:
    pool = schema["types"]["inferplane:index:PoolArgs"]["properties"]
    assert pool["capacityType"]["$ref"] == "#/types/inferplane:index:CapacityType"
    values = [e["value"] for e in schema["types"]["inferplane:index:CapacityType"]["enum"]]
    assert values == ["on_demand", "spot", "capacity_block"]


def test_a_generated_module_that_drifts_from_the_spec_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferplane.components.spec import platform_spec as spec_module

    current = generate_args_module()
    fields = dict(spec_module.SloSpec.model_fields)
    monkeypatch.setattr(spec_module.SloSpec, "model_fields", {k: v for k, v in fields.items() if k != "itl_p95_ms"})
    assert generate_args_module() != current


def test_an_invalid_spec_is_refused_with_schema_paths_before_anything_registers() -> None:
    stack = load_stack(PROJECT_DIR, "dev")
    raw = dict(stack.config["inferplane:platform"])
    raw["models"] = [{**raw["models"][0], "max_context": 10**7}, *raw["models"][1:]]
    raw["pools"] = [{**raw["pools"][0], "instance_type": "g9.huge"}]
    args = {**raw, "region": "us-east-1", "hf_token": "t"}
    with pytest.raises(pulumi.InputPropertiesError) as caught:
        Platform("platform", args)  # type: ignore[arg-type]
    paths = {e["property_path"] for e in caught.value.errors or []}
    assert paths == {"models[0].maxContext", "pools[0].instanceType"}


def test_an_unknown_spec_value_is_refused() -> None:
    stack = load_stack(PROJECT_DIR, "dev")
    args = {**stack.config["inferplane:platform"], "region": "us-east-1", "hf_token": "t"}
    loop = asyncio.new_event_loop()  # an Output needs a loop; a fresh one, closed after
    asyncio.set_event_loop(loop)
    try:
        args["zones"] = [pulumi.Output.from_input("us-east-1a"), "us-east-1b"]
        with pytest.raises(pulumi.InputPropertiesError) as caught:
            platform_spec(args)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert [e["property_path"] for e in caught.value.errors or []] == ["zones[0]"]


def test_platform_from_python_parents_the_programs_resources() -> None:
    """Used directly from Python (no provider), Platform declares the program's resources as its descendants."""
    stack = load_stack(PROJECT_DIR, "dev")
    args = {**stack.config["inferplane:platform"], "region": stack.platform.region, "hf_token": "hf_test_token"}
    evaluation = evaluate(
        lambda: Platform("platform", args),  # type: ignore[arg-type]
        mocks=PlatformMocks(stack.platform.region),
        project="inferplane",
        stack="dev",
        config={"aws:region": stack.platform.region},
    )
    component, *children = evaluation.registrations
    assert (component.type, component.name, component.parent.split("::")[2]) == (
        PLATFORM_TYPE,
        "platform",
        "pulumi:pulumi:Stack",
    )
    program = evaluate_shipped_stack("dev")
    assert sorted(map(_key, children)) == sorted(map(_key, program.registrations))
    parents = {r.urn: r.parent for r in evaluation.registrations}

    def root(urn: str) -> str:
        return urn if parents[urn] not in parents else root(parents[urn])

    assert {root(child.urn) for child in children} == {component.urn}
    # Every Secret's data stays secret through the component: the Hugging Face token, the gateway's API keys and
    # its Redis URL.
    secrets = {c.name: c.inputs["stringData"] for c in children if c.type == "kubernetes:core/v1:Secret"}
    assert set(secrets) == {"eks-hf-token", "gateway-api-keys", "gateway-redis"}
    assert set(secrets.values()) == {"[secret]"}


def test_schema_path_renames_every_segment() -> None:
    assert schema_path("models[1].slo.ttft_p95_ms") == "models[1].slo.ttftP95Ms"
    assert schema_path("gateway.tiers[0].fallback[2]") == "gateway.tiers[0].fallback[2]"


@pytest.fixture(scope="module")
def provider() -> Iterator[ProviderProcess]:
    with provider_process(PROJECT_DIR, project="inferplane", stack="dev", region="us-east-1") as process:
        yield process


def test_the_provider_stops_on_the_engines_sigint_even_when_started_with_it_ignored() -> None:
    """A plugin launched from a background job inherits SIGINT ignored; the engine's SIGINT must still stop it (exit
    0), not leave it to the SIGKILL 5 s later (-9)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with provider_process(PROJECT_DIR, project="inferplane", stack="dev", region="us-east-1") as running:
            process = running.process
    finally:
        signal.signal(signal.SIGINT, previous)
    assert process.returncode == 0, "".join(running.output)


def test_the_provider_answers_get_schema_with_the_inferred_schema(
    provider: ProviderProcess, schema: dict[str, Any]
) -> None:
    info = provider.stub.GetPluginInfo(empty_pb2.Empty())
    assert info.version == __version__
    answer = provider.stub.GetSchema(provider_pb2.GetSchemaRequest(version=0))
    assert json.loads(answer.schema) == schema


def _key(registration: Registration) -> tuple[str, str]:
    return registration.type, registration.name


def _wire(value: Any) -> Any:
    """A value as both sides compare it: one number type (as on the wire), map entries that are null left out
    (the program's stack outputs drop them, the component's state keeps them)."""
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _stack_inputs(stack_name: str) -> dict[str, Any]:
    stack = load_stack(PROJECT_DIR, stack_name)
    return {**schema_inputs(stack.config["inferplane:platform"]), "region": stack.platform.region}


@pytest.mark.parametrize("stack_name", ["dev", "staging", "prod"])
def test_construct_registers_what_the_python_program_registers(stack_name: str) -> None:
    """Same resources (type, name, custom-ness, every input) as the program under the mock engine; the program's
    top-level resources become the component's direct children, and its stack outputs the component's outputs."""
    region = load_stack(PROJECT_DIR, stack_name).platform.region
    inputs = struct_pb2.Struct()
    inputs.update({**_stack_inputs(stack_name), "hfToken": secret("hf_test_token")})
    with provider_process(PROJECT_DIR, project="inferplane", stack=stack_name, region=region) as provider:
        response = provider.stub.Construct(
            provider_pb2.ConstructRequest(
                project="inferplane",
                stack=stack_name,
                config={"aws:region": region},
                dryRun=True,
                parallel=1,
                monitorEndpoint=provider.monitor_address,
                type=PLATFORM_TYPE,
                name="platform",
                inputs=inputs,
            ),
            timeout=240,
        )
        constructed = provider.registrations
    assert response.urn == f"urn:pulumi:{stack_name}::inferplane::{PLATFORM_TYPE}::platform"
    assert constructed[0].type == PLATFORM_TYPE
    children = {_key(r): r for r in constructed[1:]}
    assert len(children) == len(constructed) - 1  # no two children share a type and a name
    evaluation = evaluate_shipped_stack(stack_name)
    program = {_key(r): r for r in evaluation.registrations}
    assert sorted(children) == sorted(program)
    for key, registration in program.items():
        assert children[key].custom == registration.custom, key
        assert children[key].inputs == registration.inputs, key
    top = {_key(r) for r in evaluation.registrations if r.parent.split("::")[2] == "pulumi:pulumi:Stack"}
    assert len(top) > 10
    assert {_key(r) for r in constructed if r.parent == response.urn} == top
    outputs = json.loads(json_format.MessageToJson(response.state))
    assert outputs["environment"] == stack_name
    assert outputs["clusterName"] == f"inferplane-{stack_name}"
    assert set(outputs["modelServers"]) == set(evaluation.outputs["modelServers"])
    assert _wire(outputs["sizing"]) == _wire(evaluation.outputs["sizing"])
    assert set(outputs) == set(evaluation.outputs)


def test_construct_of_an_invalid_spec_answers_with_every_bad_property(provider: ProviderProcess) -> None:
    """The engine gets INVALID_ARGUMENT with structured property errors (schema paths) and nothing is registered."""
    raw = load_stack(PROJECT_DIR, "dev").config["inferplane:platform"]
    raw = {**raw, "models": [{**raw["models"][0], "max_context": 10**7}], "zones": ["us-east-1a", "eu-west-1b"]}
    inputs = struct_pb2.Struct()
    inputs.update({**schema_inputs(raw), "region": "us-east-1", "hfToken": secret("t")})
    before = len(provider.registrations)
    with pytest.raises(grpc.RpcError) as caught:
        provider.stub.Construct(
            provider_pb2.ConstructRequest(
                project="inferplane",
                stack="dev",
                dryRun=True,
                monitorEndpoint=provider.monitor_address,
                type=PLATFORM_TYPE,
                name="bad",
                inputs=inputs,
            ),
            timeout=60,
        )
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = dict(error.trailing_metadata())["grpc-status-details-bin"]
    problems = errors_pb2.InputPropertiesError()
    assert status_pb2.Status.FromString(details).details[0].Unpack(problems)
    assert {e.property_path for e in problems.errors} == {"zones[1]", "models[0].maxContext"}
    assert len(provider.registrations) == before


def test_the_documented_yaml_example_is_a_valid_platform_that_fits() -> None:
    """docs/other-languages.md's Pulumi YAML, mapped to Python names as the provider maps a Construct's inputs."""
    from pulumi.provider.experimental.component import ComponentProvider

    page = (PROJECT_DIR / "docs" / "other-languages.md").read_text()
    block = next(b for b in page.split("```yaml\n")[1:] if "type: inferplane:index:Platform" in b)
    properties = yaml.safe_load(block.split("```")[0])["resources"]["platform"]["properties"]
    provider = ComponentProvider([Platform], "inferplane")
    args = provider.map_inputs(properties, provider._component_defs["Platform"])
    spec = platform_spec(args)
    assert size_platform(spec).ok
    assert args["hf_token"] == "${hfToken}"  # a YAML interpolation here; the secret at deployment


def test_plugin_manifest_names_the_python_runtime() -> None:
    """The plugin installer makes ``venv`` and ``pip install .`` there when the root has no ``__main__.py``; the
    language host then runs the plugin from the virtualenv the manifest names, so the two must agree."""
    manifest = yaml.safe_load((PROJECT_DIR / "PulumiPlugin.yaml").read_text())
    assert manifest["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": "venv"}}
    assert not (PROJECT_DIR / "__main__.py").exists()
    pyproject = (PROJECT_DIR / "pyproject.toml").read_text()
    assert 'name = "inferplane"' in pyproject and 'build-backend = "setuptools.build_meta"' in pyproject
