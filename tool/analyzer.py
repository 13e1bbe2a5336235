"""Run a CrossGuard policy pack over a plan exactly as the Pulumi engine does, over the Analyzer gRPC protocol.

What the engine does (pulumi/pulumi ``sdk/go/common/resource/plugin/analyzer_plugin.go`` ``NewPolicyAnalyzer`` and
``plugin.go`` ``newPlugin``, ``pkg/resource/deploy/step_generator.go``, ``pkg/resource/analyzer/config.go``), and
this module repeats step for step:

1. Launch. For a ``python`` runtime in ``PulumiPolicy.yaml`` the engine runs the ``pulumi-analyzer-policy-python``
   shim with the pack directory as working directory and arguments ``<engine address> . -virtualenv=<venv>``; the shim
   runs ``<venv>/bin/python -u -m pulumi.policy <engine address> .``, which executes the pack's ``__main__.py``, where
   ``PolicyPack(...)`` starts the Analyzer server on ``127.0.0.1:0``. The environment carries ``PULUMI_CONFIG``,
   ``PULUMI_PROJECT``, ``PULUMI_STACK``, ``PULUMI_DRY_RUN`` and ``PULUMI_ORGANIZATION``.
2. Port. The engine reads stdout up to the first newline: the port. Everything after it, and stderr, is logged.
3. Handshake, tolerating ``UNIMPLEMENTED`` (the Python SDK has none) and retrying while ``UNAVAILABLE``; then
   ``ConfigureStack`` (stack, project, organization, dry run).
4. ``GetAnalyzerInfo``; reconcile the ``--policy-pack-config`` file with it (schema defaults, then the pack's initial
   config, then the file; ``all`` sets every enforcement level) and validate the result against each policy's JSON
   schema; ``Configure`` with every policy's enforcement level and properties.
5. For each registered resource, ``Remediate`` then ``Analyze`` with its inputs, options and provider.
6. At the end, ``AnalyzeStack`` with every resource (outputs, parent, dependencies).
7. Close: close the channel, SIGINT the process group, wait 5 s, then kill.

The engine's own gRPC service (``Engine``: ``Log``, root resource) is served here too, at the address passed to the
pack, so a pack that logs is heard.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import grpc
import jsonschema
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.output import Unknown
from pulumi.runtime import rpc
from pulumi.runtime.proto import (
    analyzer_pb2,
    analyzer_pb2_grpc,
    engine_pb2,
    engine_pb2_grpc,
)

from inferplane.tool.mockengine import SECRET_PLACEHOLDER, UNKNOWN_PLACEHOLDER

PROJECT_DIR = Path(__file__).resolve().parent.parent
POLICY_PACK_DIR = PROJECT_DIR / "policies"


PORT_TIMEOUT_SECONDS = 120.0
"""How long the pack may take to print its port (importing the SDKs and the catalog takes seconds)."""
SHUTDOWN_GRACE_SECONDS = 5.0
"""The engine's grace period between SIGINT and SIGKILL (plugin.go)."""

EnforcementName = Literal["advisory", "mandatory", "remediate", "disabled"]
_LEVEL_TO_PROTO: dict[str, int] = {
    "advisory": analyzer_pb2.ADVISORY,
    "mandatory": analyzer_pb2.MANDATORY,
    "remediate": analyzer_pb2.REMEDIATE,
    "disabled": analyzer_pb2.DISABLED,
}
_PROTO_TO_LEVEL: dict[int, EnforcementName] = {
    analyzer_pb2.ADVISORY: "advisory",
    analyzer_pb2.MANDATORY: "mandatory",
    analyzer_pb2.REMEDIATE: "remediate",
    analyzer_pb2.DISABLED: "disabled",
}
_SEVERITY: dict[int, str] = {
    analyzer_pb2.POLICY_SEVERITY_UNSPECIFIED: "",
    analyzer_pb2.POLICY_SEVERITY_LOW: "low",
    analyzer_pb2.POLICY_SEVERITY_MEDIUM: "medium",
    analyzer_pb2.POLICY_SEVERITY_HIGH: "high",
    analyzer_pb2.POLICY_SEVERITY_CRITICAL: "critical",
}


class PlanResource(Protocol):
    """What the pack needs of a planned resource (``inferplane.tool.mockengine.Registration`` has all of it)."""

    @property
    def urn(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def parent(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def protect(self) -> bool: ...
    @property
    def dependencies(self) -> tuple[str, ...]: ...
    @property
    def inputs(self) -> Mapping[str, Any]: ...


class PolicyPackError(RuntimeError):
    """The pack did not start, answered with an error, or its configuration is invalid."""


@dataclass(frozen=True)
class PolicyInfo:
    """One policy as the pack describes it, with the enforcement level it runs at after configuration."""

    name: str
    description: str
    enforcement: EnforcementName
    severity: str
    kind: Literal["resource", "stack"]


@dataclass(frozen=True)
class Violation:
    """One diagnostic: which policy, how enforced, on which resource, and the message (description + detail)."""

    policy: str
    enforcement: EnforcementName
    urn: str
    message: str
    severity: str = ""

    @property
    def detail(self) -> str:
        """The message without the policy description the SDK prefixes it with."""
        return self.message.split("\n", maxsplit=1)[1] if "\n" in self.message else self.message


@dataclass(frozen=True)
class PolicyReport:
    """The pack's verdict on a plan."""

    pack: str
    version: str
    policies: tuple[PolicyInfo, ...]
    violations: tuple[Violation, ...]
    not_applicable: tuple[tuple[str, str], ...] = ()
    logs: tuple[str, ...] = ()

    @property
    def evaluated(self) -> tuple[PolicyInfo, ...]:
        """Policies that ran (every one not disabled)."""
        return tuple(p for p in self.policies if p.enforcement != "disabled")

    @property
    def mandatory(self) -> tuple[Violation, ...]:
        """Violations that fail a preview."""
        return tuple(v for v in self.violations if v.enforcement == "mandatory")

    @property
    def ok(self) -> bool:
        """True when no mandatory policy is violated."""
        return not self.mandatory


# --- wire format ----------------------------------------------------------------------------------------------


def to_wire(value: Any) -> Any:
    """A plan value as the engine marshals it: ``[unknown]`` as the unknown sentinel, ``[secret]`` as a secret
    (the placeholders :mod:`inferplane.tool.mockengine` records them as)."""
    if isinstance(value, Unknown) or value == UNKNOWN_PLACEHOLDER:
        return rpc.UNKNOWN
    if value == SECRET_PLACEHOLDER:
        return rpc.wrap_rpc_secret(SECRET_PLACEHOLDER)
    if isinstance(value, Mapping):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_wire(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def to_struct(props: Mapping[str, Any]) -> struct_pb2.Struct:
    """A property map as a protobuf ``Struct``."""
    struct = struct_pb2.Struct()
    struct.update(to_wire(props))
    return struct


# --- configuration, as the engine reconciles it ----------------------------------------------------------------


@dataclass(frozen=True)
class PolicyConfig:
    """One policy's configuration: an enforcement level (or None to keep the default) and properties."""

    enforcement: EnforcementName | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)


def parse_policy_pack_config(raw: Mapping[str, Any]) -> dict[str, PolicyConfig]:
    """Parse a ``--policy-pack-config`` document: ``{"policy": "mandatory"}`` or ``{"policy": {...}}``."""
    result: dict[str, PolicyConfig] = {}
    for name, value in raw.items():
        if isinstance(value, str):
            if value not in _LEVEL_TO_PROTO:
                raise PolicyPackError(f"parsing enforcement level for {name!r}: {value!r} is not a valid level")
            result[name] = PolicyConfig(enforcement=value)  # type: ignore[arg-type]
        elif isinstance(value, Mapping):
            props = dict(value)
            level = props.pop("enforcementLevel", None)
            if level is not None and level not in _LEVEL_TO_PROTO:
                raise PolicyPackError(f"parsing enforcement level for {name!r}: {level!r} is not a valid level")
            if level is None and not props:
                continue
            result[name] = PolicyConfig(enforcement=level, properties=props)
        else:
            raise PolicyPackError(f"parsing {name!r}: {value!r} is not a valid value; must be a string or object")
    return result


def load_policy_pack_config(path: Path) -> dict[str, PolicyConfig]:
    """Read a ``--policy-pack-config`` JSON file."""
    text = path.read_text(encoding="utf-8")
    return parse_policy_pack_config(json.loads(text) if text.strip() else {})


def reconcile_config(info: analyzer_pb2.AnalyzerInfo, given: Mapping[str, PolicyConfig]) -> dict[str, PolicyConfig]:
    """Defaults from each policy's schema and level, then the pack's initial config, then ``given``; validated.

    Raises :class:`PolicyPackError` listing every schema violation as ``<policy>: <error>``, as the CLI does.
    """
    result: dict[str, PolicyConfig] = {}
    schemas: dict[str, dict[str, Any]] = {}
    for policy in info.policies:
        properties = json_format.MessageToDict(policy.configSchema.properties)
        schemas[policy.name] = {
            "type": "object",
            "properties": properties,
            **({"required": list(policy.configSchema.required)} if policy.configSchema.required else {}),
        }
        defaults = {k: v["default"] for k, v in properties.items() if isinstance(v, dict) and "default" in v}
        result[policy.name] = PolicyConfig(_PROTO_TO_LEVEL[policy.enforcementLevel], defaults)

    initial = {
        name: PolicyConfig(
            _PROTO_TO_LEVEL[value.enforcementLevel] if value.HasField("properties") or value.enforcementLevel else None,
            json_format.MessageToDict(value.properties),
        )
        for name, value in info.initialConfig.items()
    }
    for layer in (initial, given):
        everything = layer.get("all")
        if everything is not None and everything.enforcement is not None:
            result = {k: PolicyConfig(everything.enforcement, v.properties) for k, v in result.items()}
        for name, config in layer.items():
            if name == "all":
                continue
            current = result.get(name, PolicyConfig())
            result[name] = PolicyConfig(
                config.enforcement or current.enforcement, {**current.properties, **config.properties}
            )

    errors: list[str] = []
    for name, schema in schemas.items():
        validator = jsonschema.Draft7Validator(schema)
        for error in sorted(validator.iter_errors(dict(result[name].properties)), key=str):
            where = ".".join(str(p) for p in error.absolute_path) or "(root)"
            errors.append(f"{name}: {where}: {error.message}")
    if errors:
        raise PolicyPackError("invalid policy pack configuration:\n" + "\n".join(errors))
    return result


# --- the engine's side ------------------------------------------------------------------------------------------


class _EngineService(engine_pb2_grpc.EngineServicer):
    """The engine's own service, at the address the pack is given: records what the pack logs."""

    def __init__(self) -> None:
        self.logs: list[str] = []
        self.root = ""

    def Log(self, request: engine_pb2.LogRequest, context: grpc.ServicerContext) -> empty_pb2.Empty:  # noqa: N802
        self.logs.append(request.message)
        return empty_pb2.Empty()

    def GetRootResource(  # noqa: N802
        self, request: engine_pb2.GetRootResourceRequest, context: grpc.ServicerContext
    ) -> engine_pb2.GetRootResourceResponse:
        return engine_pb2.GetRootResourceResponse(urn=self.root)

    def SetRootResource(  # noqa: N802
        self, request: engine_pb2.SetRootResourceRequest, context: grpc.ServicerContext
    ) -> engine_pb2.SetRootResourceResponse:
        self.root = request.urn
        return engine_pb2.SetRootResourceResponse()


def _runtime_options(pack_dir: Path) -> tuple[str, dict[str, Any]]:
    document = yaml.safe_load((pack_dir / "PulumiPolicy.yaml").read_text(encoding="utf-8")) or {}
    runtime = document.get("runtime")
    if isinstance(runtime, str):
        return runtime, {}
    if not isinstance(runtime, Mapping) or "name" not in runtime:
        raise PolicyPackError(f"{pack_dir / 'PulumiPolicy.yaml'}: runtime is missing")
    return str(runtime["name"]), dict(runtime.get("options") or {})


def policy_pack_command(pack_dir: Path, engine_address: str) -> list[str]:
    """The command ``pulumi-analyzer-policy-python`` ends up running for this pack (see the module docstring)."""
    runtime, options = _runtime_options(pack_dir)
    if runtime != "python":
        raise PolicyPackError(f"only python policy packs are supported, not {runtime!r}")
    python = sys.executable
    virtualenv = options.get("virtualenv")
    if virtualenv:
        candidate = (pack_dir / str(virtualenv)).resolve() / "bin" / "python"
        if not candidate.exists():
            raise PolicyPackError(f'"{candidate.parent.parent}" doesn\'t appear to be a virtual environment')
        python = str(candidate)
    return [python, "-u", "-m", "pulumi.policy", engine_address, "."]


class PolicyPackProcess:
    """A running policy pack and the gRPC channel to it. Use :meth:`start` as a context manager."""

    def __init__(
        self,
        *,
        process: subprocess.Popen[bytes],
        channel: grpc.Channel,
        engine: _EngineService,
        engine_server: grpc.Server,
        output: list[str],
        version: str,
    ) -> None:
        self.process = process
        self.channel = channel
        self.stub = analyzer_pb2_grpc.AnalyzerStub(channel)
        self._engine = engine
        self._engine_server = engine_server
        self._output = output
        self.info: analyzer_pb2.AnalyzerInfo = self.stub.GetAnalyzerInfo(empty_pb2.Empty())
        self.config: dict[str, PolicyConfig] = {}
        self.version = version

    @classmethod
    @contextmanager
    def start(
        cls,
        pack_dir: Path = POLICY_PACK_DIR,
        *,
        project: str = "inferplane",
        stack: str = "dev",
        organization: str = "organization",
        dry_run: bool = True,
    ) -> Iterator[PolicyPackProcess]:
        """Launch the pack as the engine does, handshake, ``ConfigureStack``; shut it down on exit."""
        engine = _EngineService()
        engine_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        engine_pb2_grpc.add_EngineServicer_to_server(engine, engine_server)
        engine_port = engine_server.add_insecure_port("127.0.0.1:0")
        engine_server.start()
        env = {
            **os.environ,
            "PULUMI_PROJECT": project,
            "PULUMI_STACK": stack,
            "PULUMI_DRY_RUN": "true" if dry_run else "false",
            "PULUMI_ORGANIZATION": organization,
        }
        env.pop("PULUMI_CONFIG", None)
        process = subprocess.Popen(
            policy_pack_command(pack_dir, f"127.0.0.1:{engine_port}"),
            cwd=pack_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, as cmdutil.RegisterProcessGroup does
        )
        output: list[str] = []
        channel: grpc.Channel | None = None
        try:
            port = _read_port(process, output)
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            _handshake(channel, pack_dir, f"127.0.0.1:{engine_port}")
            stub = analyzer_pb2_grpc.AnalyzerStub(channel)
            stub.ConfigureStack(
                analyzer_pb2.AnalyzerStackConfigureRequest(
                    stack=stack, project=project, organization=organization, dry_run=dry_run
                )
            )
            pack = cls(
                process=process,
                channel=channel,
                engine=engine,
                engine_server=engine_server,
                output=output,
                version=_pack_version(pack_dir),
            )
            yield pack
        except grpc.RpcError as exc:
            raise PolicyPackError(f"policy pack {pack_dir} failed: {exc}\n{''.join(output)}") from exc
        finally:
            if channel is not None:
                channel.close()
            _stop(process)
            engine_server.stop(0)

    @property
    def output(self) -> str:
        """What the pack wrote to stdout (after the port) and stderr."""
        return "".join(self._output)

    def configure(self, config: Mapping[str, PolicyConfig]) -> dict[str, PolicyConfig]:
        """Reconcile ``config`` with the pack's policies and send it (``Configure``); return what was sent."""
        reconciled = reconcile_config(self.info, config)
        request = analyzer_pb2.ConfigureAnalyzerRequest()
        for name, value in reconciled.items():
            entry = request.policyConfig[name]
            entry.enforcementLevel = _LEVEL_TO_PROTO[value.enforcement or "advisory"]  # type: ignore[assignment]
            entry.properties.update(to_wire(value.properties))
        self.stub.Configure(request)
        self.config = reconciled
        return reconciled

    def policies(self) -> tuple[PolicyInfo, ...]:
        """The pack's policies at their configured enforcement levels."""
        found = []
        for policy in self.info.policies:
            level = self.config.get(policy.name, PolicyConfig()).enforcement
            found.append(
                PolicyInfo(
                    name=policy.name,
                    description=policy.description,
                    enforcement=level or _PROTO_TO_LEVEL[policy.enforcementLevel],
                    severity=_SEVERITY.get(policy.severity, ""),
                    kind="stack" if policy.policy_type == analyzer_pb2.POLICY_TYPE_STACK else "resource",
                )
            )
        return tuple(found)

    def evaluate(
        self, resources: Sequence[PlanResource], outputs: Mapping[str, Mapping[str, Any]] | None = None
    ) -> PolicyReport:
        """``Remediate`` + ``Analyze`` every resource in order, then ``AnalyzeStack`` over all of them.

        ``outputs`` maps URNs to output properties for the stack analysis (the engine sends outputs there); a
        resource without outputs is analysed with its inputs, which is what a preview knows of it.
        """
        by_urn = {r.urn: r for r in resources}
        violations: list[Violation] = []
        not_applicable: list[tuple[str, str]] = []
        for resource in resources:
            request = analyzer_pb2.AnalyzeRequest(
                urn=resource.urn,
                type=resource.type,
                name=resource.name,
                properties=to_struct(resource.inputs),
                options=_options(resource),
            )
            provider = _provider(resource, by_urn)
            if provider is not None:
                request.provider.CopyFrom(provider)
            for remediation in self.stub.Remediate(request).remediations:
                if remediation.properties.fields:
                    request.properties.CopyFrom(remediation.properties)
            response = self.stub.Analyze(request)
            violations.extend(_violations(response, resource.urn))
            not_applicable.extend((n.policy_name, n.reason) for n in response.not_applicable)
        stack_request = analyzer_pb2.AnalyzeStackRequest()
        for resource in resources:
            props = (outputs or {}).get(resource.urn, resource.inputs)
            entry = stack_request.resources.add(
                urn=resource.urn,
                type=resource.type,
                name=resource.name,
                parent=resource.parent,
                dependencies=list(resource.dependencies),
                options=_options(resource),
            )
            entry.properties.CopyFrom(to_struct(props))
            provider = _provider(resource, by_urn)
            if provider is not None:
                entry.provider.CopyFrom(provider)
        response = self.stub.AnalyzeStack(stack_request)
        violations.extend(_violations(response, ""))
        not_applicable.extend((n.policy_name, n.reason) for n in response.not_applicable)
        return PolicyReport(
            pack=self.info.name,
            version=self.version or self.info.version,
            policies=self.policies(),
            violations=tuple(violations),
            not_applicable=tuple(not_applicable),
            logs=tuple(self._engine.logs),
        )


def _pack_version(pack_dir: Path) -> str:
    """The version in PulumiPolicy.yaml, which the engine prefers over the pack's own answer."""
    document = yaml.safe_load((pack_dir / "PulumiPolicy.yaml").read_text(encoding="utf-8")) or {}
    return str(document.get("version", ""))


def _read_port(process: subprocess.Popen[bytes], output: list[str]) -> int:
    """Read stdout byte by byte up to the first newline, as the engine does; then drain both streams to ``output``."""
    assert process.stdout is not None and process.stderr is not None
    errors: list[str] = []
    stderr_reader = threading.Thread(target=_drain, args=(process.stderr, errors), daemon=True)
    stderr_reader.start()
    line = b""
    deadline = time.monotonic() + PORT_TIMEOUT_SECONDS
    while not line.endswith(b"\n"):
        byte = process.stdout.read(1)
        if not byte or time.monotonic() > deadline:
            _stop(process)
            stderr_reader.join(timeout=1)
            raise PolicyPackError(
                f"could not read the policy pack's port (exit status {process.poll()}): {''.join(errors)}"
            )
        line += byte
    threading.Thread(target=_drain, args=(process.stdout, output), daemon=True).start()
    output.extend(errors)  # stderr so far; the reader keeps appending to ``errors``
    text = line.decode().strip()
    if not text.isdigit() or not 0 < int(text) <= 65535:
        _stop(process)
        raise PolicyPackError(f"the policy pack wrote an invalid port to stdout: {text!r}")
    return int(text)


def _drain(stream: Any, sink: list[str]) -> None:
    """Copy a pipe into ``sink`` line by line until EOF (or until :func:`_stop` closes it)."""
    try:
        for raw in iter(stream.readline, b""):
            sink.append(raw.decode(errors="replace"))
    except (ValueError, OSError):
        return


def _handshake(channel: grpc.Channel, pack_dir: Path, engine_address: str) -> None:
    """``Handshake`` until the server answers; UNIMPLEMENTED (the Python SDK's answer) is fine."""
    stub = analyzer_pb2_grpc.AnalyzerStub(channel)
    request = analyzer_pb2.AnalyzerHandshakeRequest(
        engine_address=engine_address, root_directory=str(pack_dir), program_directory=str(pack_dir)
    )
    deadline = time.monotonic() + 10  # pluginRPCConnectionTimeout
    while True:
        try:
            stub.Handshake(request, timeout=5)
            return
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return
            if code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT the pack's process group (PolicyPack stops its server on KeyboardInterrupt), then kill after 5 s."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=SHUTDOWN_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _options(resource: PlanResource) -> analyzer_pb2.AnalyzerResourceOptions:
    return analyzer_pb2.AnalyzerResourceOptions(protect=resource.protect, parent=resource.parent)


def _provider(
    resource: PlanResource, by_urn: Mapping[str, PlanResource]
) -> analyzer_pb2.AnalyzerProviderResource | None:
    """The resource's explicit provider (a ``<urn>::<id>`` reference) with its inputs, as the engine sends it."""
    if not resource.provider:
        return None
    urn = resource.provider.rsplit("::", maxsplit=1)[0]
    provider = by_urn.get(urn)
    if provider is None:
        return None
    return analyzer_pb2.AnalyzerProviderResource(
        urn=provider.urn, type=provider.type, name=provider.name, properties=to_struct(provider.inputs)
    )


def _violations(response: analyzer_pb2.AnalyzeResponse, urn: str) -> list[Violation]:
    return [
        Violation(
            policy=d.policyName,
            enforcement=_PROTO_TO_LEVEL[d.enforcementLevel],
            urn=d.urn or urn,
            message=d.message,
            severity=_SEVERITY.get(d.severity, ""),
        )
        for d in response.diagnostics
    ]


# --- the seam the offline preview plugs in ----------------------------------------------------------------------


def policy_config_path(environment: str, pack_dir: Path = POLICY_PACK_DIR) -> Path:
    """``policies/config/<environment>.json``: the file ``--policy-pack-config`` takes for that environment."""
    return pack_dir / "config" / f"{environment}.json"


def run_policy_pack(
    resources: Sequence[PlanResource],
    *,
    stack: str,
    environment: str,
    project: str = "inferplane",
    pack_dir: Path = POLICY_PACK_DIR,
    config_file: Path | None = None,
    outputs: Mapping[str, Mapping[str, Any]] | None = None,
) -> PolicyReport:
    """Start the pack, configure it with the environment's config file, evaluate the plan, stop the pack.

    ``resources`` are the plan's resources in registration order (:class:`~inferplane.tool.mockengine.Registration` or
    anything with urn, type, name, parent, provider, protect, dependencies and camelCase inputs).
    """
    config = load_policy_pack_config(config_file or policy_config_path(environment, pack_dir))
    with PolicyPackProcess.start(pack_dir, project=project, stack=stack) as pack:
        pack.configure(config)
        return pack.evaluate(resources, outputs)


__all__ = [
    "POLICY_PACK_DIR",
    "PlanResource",
    "PolicyConfig",
    "PolicyInfo",
    "PolicyPackError",
    "PolicyPackProcess",
    "PolicyReport",
    "Violation",
    "check_stack",
    "load_policy_pack_config",
    "parse_policy_pack_config",
    "policy_config_path",
    "policy_pack_command",
    "reconcile_config",
    "run_policy_pack",
]


@dataclass(frozen=True)
class StackPlan:
    """A shipped stack's program evaluated under the mock engine: what ``pulumi preview`` would register."""

    stack: str
    project: str
    environment: str
    registrations: tuple[Any, ...]
    outputs: Mapping[str, Mapping[str, Any]]


def plan_stack(stack: str, project_dir: Path | None = None) -> StackPlan:
    """Evaluate ``stacks/Pulumi.<stack>.yaml`` with the program under the mock engine (``PlatformMocks``)."""
    from inferplane.tool.preview.engine import evaluate_stack  # noqa: PLC0415 - keep importing this module light
    from inferplane.tool.stackfile import find_project_dir, load_stack  # noqa: PLC0415

    loaded = load_stack(project_dir or find_project_dir(), stack)
    evaluation, _ = evaluate_stack(loaded)
    return StackPlan(
        stack=stack,
        project=loaded.project,
        environment=loaded.platform.environment,
        registrations=evaluation.registrations,
        outputs={r.urn: r.outputs for r in evaluation.registrations},
    )


def check_stack(stack: str, project_dir: Path | None = None, pack: PolicyPackProcess | None = None) -> PolicyReport:
    """``pulumi preview --policy-pack policies --policy-pack-config policies/config/<env>.json``, without the CLI.

    The stack's program runs under the mock engine (:func:`plan_stack`); its registrations (inputs, options,
    dependencies) go to ``Analyze``, their outputs to ``AnalyzeStack``. Pass a running ``pack`` to reuse it
    (it is reconfigured for the stack's environment); otherwise one is started and stopped.
    """
    plan = plan_stack(stack, project_dir)
    if pack is None:
        return run_policy_pack(
            plan.registrations,
            stack=stack,
            environment=plan.environment,
            project=plan.project,
            outputs=plan.outputs,
        )
    pack.configure(load_policy_pack_config(policy_config_path(plan.environment)))
    return pack.evaluate(plan.registrations, plan.outputs)


def _preview_report(report: PolicyReport) -> Any:
    """``report`` as the preview's own ``PolicyReport(policies, violations)``: every policy evaluated (not disabled)
    and every diagnostic."""
    # The preview's models live in inferplane.tool.preview (a sibling package); import them where they are needed.
    model = importlib.import_module("inferplane.tool.preview.model")
    seam = importlib.import_module("inferplane.tool.preview.policy")
    return seam.PolicyReport(
        policies=tuple(model.PolicyInfo(name=p.name, enforcement=p.enforcement) for p in report.evaluated),
        violations=tuple(
            model.Violation(policy=v.policy, enforcement=v.enforcement, urn=v.urn, message=v.message)
            for v in report.violations
        ),
    )


def _outputs(resources: Sequence[Any]) -> dict[str, Mapping[str, Any]]:
    return {r.urn: r.outputs for r in resources if getattr(r, "outputs", None)}


class PackSession:
    """The pack for one stack, started on a thread so it comes up while the caller evaluates the program.

    The thread launches the pack as the engine does, handshakes and configures it with
    ``policies/config/<environment>.json``; :meth:`evaluate` waits for it, then analyzes the plan; :meth:`close`
    stops the pack on another (non-daemon) thread, so the caller renders the plan while the pack shuts down and the
    interpreter still waits for it before exiting.
    """

    def __init__(self, pack_dir: Path, stack: Any) -> None:
        self._pack_dir = pack_dir
        self._stack = stack
        self._exit = ExitStack()
        self._pack: PolicyPackProcess | None = None
        self._error: BaseException | None = None
        self._started = threading.Thread(target=self._start, name="policy-pack-start", daemon=True)
        self._started.start()

    def _start(self) -> None:
        try:
            config = load_policy_pack_config(policy_config_path(self._stack.platform.environment, self._pack_dir))
            pack = self._exit.enter_context(
                PolicyPackProcess.start(self._pack_dir, project=self._stack.project, stack=self._stack.name)
            )
            pack.configure(config)
            self._pack = pack
        except BaseException as exc:  # handed to the caller by evaluate()
            self._error = exc

    def evaluate(self, resources: Sequence[Any]) -> Any:
        """The preview's ``PolicyReport`` for ``resources`` (inputs to ``Analyze``, outputs to ``AnalyzeStack``)."""
        self._started.join()
        if self._error is not None:
            raise self._error
        assert self._pack is not None
        return _preview_report(self._pack.evaluate(resources, _outputs(resources)))

    def close(self) -> None:
        """Stop the pack once it has started; returns at once."""

        def stop() -> None:
            self._started.join()
            self._exit.close()

        threading.Thread(target=stop, name="policy-pack-stop").start()


@dataclass(frozen=True)
class PackRunner:
    """The offline preview's policy runner (``inferplane.tool.preview.policy.PolicyRunner``) for one pack."""

    pack_dir: Path

    def __call__(self, resources: Sequence[Any], stack: Any) -> Any:
        """Start the pack, configure it for the stack's environment, evaluate ``resources``, stop the pack."""
        report = run_policy_pack(
            resources,
            stack=stack.name,
            environment=stack.platform.environment,
            project=stack.project,
            pack_dir=self.pack_dir,
            outputs=_outputs(resources),
        )
        return _preview_report(report)

    def start(self, stack: Any) -> PackSession:
        """The pack for ``stack``, starting now (``inferplane.tool.preview.policy.start_policies``)."""
        return PackSession(self.pack_dir, stack)


def policy_runner(project_dir: Path) -> Any:
    """The offline preview's policy runner for ``project_dir``'s pack (``<project_dir>/policies``): a
    :class:`PackRunner`, which runs the pack as the engine does and answers with the preview's own
    ``PolicyReport(policies, violations)``: every policy evaluated (not disabled) and every diagnostic."""
    return PackRunner(project_dir / "policies")
