"""Kubernetes workloads (Deployments, StatefulSets, DaemonSets, Jobs): the pod spec every one of them carries."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from inferplane.components.spec.scheduling import (
    ACCELERATOR_LABEL,
    GKE_TPU_ACCELERATOR_LABEL,
    GPU_TAINT,
    NVIDIA_GPU_RESOURCE,
    POOL_LABEL,
    TPU_RESOURCE,
    TPU_TAINT,
)
from inferplane.policies.base import (
    UNKNOWN,
    AnyPolicy,
    Config,
    EnforcementLevel,
    Report,
    Resource,
    Severity,
    as_dict,
    as_list,
    known,
    resource_policy,
    truthy,
)
from inferplane.policies.resource_types import WORKLOADS, T

ACCELERATOR_RESOURCES = (NVIDIA_GPU_RESOURCE, TPU_RESOURCE)


def pod_spec(resource: Resource) -> dict[str, Any]:
    """``spec.template.spec`` of a workload ({} when absent or unknown)."""
    return as_dict(resource.get("spec", "template", "spec"))


def workload_name(resource: Resource) -> str:
    """``metadata.name``, or the Pulumi resource name when the name is auto-assigned."""
    name = resource.get("metadata", "name")
    return name if isinstance(name, str) else resource.name


def object_labels(resource: Resource) -> dict[str, Any]:
    """The object's labels merged with its pod template's."""
    return {
        **as_dict(resource.get("spec", "template", "metadata", "labels")),
        **as_dict(resource.get("metadata", "labels")),
    }


def object_label(resource: Resource, key: str) -> Any:
    """One label as :func:`object_labels` merges it (the object's wins), or UNKNOWN while a map that may hold it is
    unknown: :func:`object_labels` drops an unknown map, which hides a role from a verdict about who is absent."""
    for path in (("metadata", "labels"), ("spec", "template", "metadata", "labels")):
        labels = resource.get(*path)
        if labels is UNKNOWN:
            return UNKNOWN
        value = as_dict(labels).get(key)
        if value is not None:
            return value
    return None


def object_annotations(resource: Resource) -> dict[str, Any]:
    """The object's annotations merged with its pod template's (the object's win)."""
    return {
        **as_dict(resource.get("spec", "template", "metadata", "annotations")),
        **as_dict(resource.get("metadata", "annotations")),
    }


def containers(resource: Resource, *, init: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
    """(``containers[i]``-style path, container) for the pod's containers, then its init containers."""
    spec = pod_spec(resource)
    kinds = ("containers", "initContainers") if init else ("containers",)
    for kind in kinds:
        for index, container in enumerate(as_list(spec.get(kind))):
            if isinstance(container, dict):  # an unknown container is skipped, never judged
                yield f"{kind}[{index}]", container


def containers_known(resource: Resource, *, init: bool = True) -> bool:
    """Whether the pod spec, its container lists and every container in them are known (their fields may not be).

    :func:`containers` skips an unknown container, which suits a finding about one container, but a verdict about
    all of them ("no container gets X", "the pod requests no TPU") needs this first: the unknown one may be the one.
    """
    spec = resource.get("spec", "template", "spec")
    if spec is UNKNOWN:
        return False
    kinds = ("containers", "initContainers") if init else ("containers",)
    lists = [as_dict(spec).get(kind) for kind in kinds]
    return all(each is not UNKNOWN and all(isinstance(c, dict) for c in as_list(each)) for each in lists)


_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_QUANTITY_FACTOR: dict[str | None, int] = {
    None: 1,
    **{suffix: 1024 ** (i + 1) for i, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{suffix: 1000 ** (i + 1) for i, suffix in enumerate(("k", "M", "G", "T", "P", "E"))},
}


def quantity_bytes(value: Any) -> float | None:
    """A Kubernetes memory quantity (``984637Mi``, ``16Gi``, ``1G``, ``1048576``) in bytes; None when it is not one
    (an unknown value, or a form this pack does not read, such as ``1e9``: never judged)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    number: str = match.group(1)
    suffix: str | None = match.group(2)
    return float(number) * _QUANTITY_FACTOR[suffix]


def memory_volumes_bytes(resource: Resource) -> float | None:
    """What the pod's memory-backed ``emptyDir`` volumes may hold (their ``sizeLimit``s), which counts against its
    containers' memory; None when one of them is unbounded or unknown."""
    total = 0.0
    for volume in as_list(pod_spec(resource).get("volumes")):
        empty_dir = as_dict(as_dict(volume).get("emptyDir"))
        if empty_dir.get("medium") != "Memory":
            continue
        size = quantity_bytes(empty_dir.get("sizeLimit"))
        if size is None:
            return None
        total += size
    return total


def container_label(path: str, container: dict[str, Any]) -> str:
    """How messages name a container: ``containers[0] (vllm)``."""
    name = container.get("name")
    return f"{path} ({name})" if isinstance(name, str) else path


def accelerators_requested(container: dict[str, Any]) -> dict[str, Any]:
    """{resource name: limit (or request)} for accelerator resources the container asks for."""
    limits = as_dict(as_dict(container.get("resources")).get("limits"))
    requests = as_dict(as_dict(container.get("resources")).get("requests"))
    found: dict[str, Any] = {}
    for resource_name in ACCELERATOR_RESOURCES:
        value = limits.get(resource_name, requests.get(resource_name))
        if value is not None:
            found[resource_name] = value
    return found


def accelerator_maps_known(container: dict[str, Any]) -> bool:
    """Whether which accelerators ``container`` asks for is known: its resources and their limits and requests maps
    (an unknown count still names its resource)."""
    resources = container.get("resources")
    return resources is not UNKNOWN and all(as_dict(resources).get(k) is not UNKNOWN for k in ("limits", "requests"))


def as_int(value: Any) -> int | None:
    """An integer quantity (``2`` or ``"2"``); None for anything else (``"0.5"``, ``"500m"``, unknown)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def accelerators_known(resource: Resource) -> bool:
    """Whether every main container's resources are known (so the accelerator count is known)."""
    spec = pod_spec(resource)
    return known(spec.get("containers")) and all(known(c.get("resources")) for _, c in containers(resource))


def pod_accelerators(resource: Resource) -> dict[str, int]:
    """Accelerators the pod's main containers request, by resource name (integer requests only)."""
    total: dict[str, int] = {}
    for _, container in containers(resource, init=False):
        for resource_name, value in accelerators_requested(container).items():
            count = as_int(value)
            if count:
                total[resource_name] = total.get(resource_name, 0) + count
    return total


def _exempt(resource: Resource, config: Config) -> bool:
    """Host access exemptions apply to node agents only: DaemonSets whose name matches the allowlist."""
    if resource.type != T.DAEMON_SET:
        return False
    if resource.get("metadata", "name") is UNKNOWN:
        return True  # an unknown name may be an allowlisted agent's: judged once known
    name = workload_name(resource)
    return any(re.fullmatch(pattern, name) for pattern in config["exemptDaemonSets"])


_EXEMPT_SCHEMA = {
    "exemptDaemonSets": {
        "type": "array",
        "items": {"type": "string"},
        "default": [
            "nvidia-device-plugin.*",
            "nvidia-dcgm-exporter.*",
            "dcgm-exporter.*",
            "gpu-feature-discovery.*",
            ".*node-exporter.*",
        ],
        "description": "Full-match regexes of DaemonSet names (node agents) that may use host access.",
    }
}


@resource_policy(
    name="kubernetes-workload-require-resources",
    description=(
        "Every container must request CPU and memory and cap its memory: the scheduler packs GPU nodes by requests, "
        "and an uncapped container can OOM-kill the model server next to it."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    remediation="Set resources.requests.cpu, resources.requests.memory and resources.limits.memory.",
)
def require_resources(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_K8S_10-13; Kyverno require-requests-limits; EKS Best Practices (data plane)."""
    for path, container in containers(resource):
        res = container.get("resources")
        if res is UNKNOWN:
            continue
        requests, limits = as_dict(res).get("requests"), as_dict(res).get("limits")
        missing = []
        if requests is not UNKNOWN:
            missing += [f"requests.{k}" for k in ("cpu", "memory") if k not in as_dict(requests)]
        if limits is not UNKNOWN and "memory" not in as_dict(limits):
            missing.append("limits.memory")
        if missing:
            report(f"{container_label(path, container)} lacks resources {', '.join(missing)}")


@resource_policy(
    name="kubernetes-workload-disallow-privileged",
    description=(
        "Containers must not run privileged, escalate privileges or add capabilities: a model server that can "
        "take over its node can read every other tenant's prompts and the node's credentials."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    config=_EXEMPT_SCHEMA,
    remediation="Drop privileged/allowPrivilegeEscalation/capabilities.add; GPUs come from the device plugin.",
)
def disallow_privileged(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_K8S_16/20/25; Kyverno Pod Security Standards; EKS Best Practices (pod security)."""
    if _exempt(resource, config):
        return
    for path, container in containers(resource):
        context = as_dict(container.get("securityContext"))
        label = container_label(path, container)
        if truthy(context.get("privileged")):
            report(f"{label} is privileged")
        if truthy(context.get("allowPrivilegeEscalation")):
            report(f"{label} allows privilege escalation")
        added = as_list(as_dict(context.get("capabilities")).get("add"))
        if added:
            report(f"{label} adds capabilities {', '.join(str(c) for c in added)}")


@resource_policy(
    name="kubernetes-workload-disallow-host-access",
    description=(
        "Pods must not share the node's network, PID or IPC namespace, mount host paths or bind host ports; only "
        "the node agents (GPU device plugin, DCGM exporter) need that, as DaemonSets on the allowlist."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    config=_EXEMPT_SCHEMA,
    remediation="Use emptyDir or a PVC instead of hostPath; Services instead of hostNetwork/hostPort.",
)
def disallow_host_access(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_K8S_17/18/19/26; Kyverno disallow-host-path; EKS Best Practices 'Restrict hostPath'."""
    if _exempt(resource, config):
        return
    spec = pod_spec(resource)
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if truthy(spec.get(key)):
            report(f"spec.template.spec.{key} is true")
    for volume in as_list(spec.get("volumes")):
        if as_dict(volume).get("hostPath") is not None:
            report(f"volume {as_dict(volume).get('name')} mounts a hostPath")
    for path, container in containers(resource):
        for port in as_list(container.get("ports")):
            host_port = as_dict(port).get("hostPort")
            if host_port not in (None, UNKNOWN, 0):
                report(f"{container_label(path, container)} binds hostPort {host_port}")


_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _images(resource: Resource) -> Iterator[tuple[str, str]]:
    for path, container in containers(resource):
        image = container.get("image")
        if isinstance(image, str):
            yield container_label(path, container), image


@resource_policy(
    name="kubernetes-workload-require-pinned-image",
    description=(
        "Images carry a version tag: no tag means latest, and latest (or any moving tag) changes the engine under a "
        "running deployment at the next node replacement."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    remediation="Pin images by version tag (the components pin them next to their release notes).",
)
def pinned_images(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_K8S_14; Kyverno disallow-latest-tag; Gatekeeper disallowedtags."""
    for label, image in _images(resource):
        if _DIGEST.search(image):
            continue
        last = image.rsplit("/", maxsplit=1)[-1]
        tag = last.split(":", maxsplit=1)[1] if ":" in last else None
        if tag is None or tag == "latest":
            report(f"{label} image {image} has no version tag")


@resource_policy(
    name="kubernetes-workload-require-image-digest",
    description=(
        "Where required, images are pinned by digest: a tag can be re-pushed, only an @sha256 digest proves which "
        "bytes run in production."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    config={
        "required": {
            "type": "boolean",
            "default": False,
            "description": "Require an @sha256 digest on every image.",
        }
    },
    remediation="Append the image's @sha256 digest to its tag (image:tag@sha256:...).",
)
def image_digests(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_K8S_43; Gatekeeper imagedigests."""
    if not config["required"]:
        return
    for label, image in _images(resource):
        if not _DIGEST.search(image):
            report(f"{label} image {image} is not pinned by digest")


@resource_policy(
    name="kubernetes-workload-require-secret-refs",
    description=(
        "Secrets (Hugging Face tokens, API keys, cache passwords) reach containers only through secretKeyRef: a "
        "literal value lands in the pod spec, the Pulumi state and every kubectl get."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    config={
        "secretNamePattern": {
            "type": "string",
            "default": r"(?i)(?!.*_(path|file|dir)$).*(token|secret|password|passwd|api_?key|credential).*",
            "description": "Full-match regex of environment variable names that hold secrets; names ending in "
            "_PATH, _FILE or _DIR hold where a mounted secret file is (HF_TOKEN_PATH), not the secret.",
        }
    },
    remediation="Put the value in a Kubernetes Secret and use env[].valueFrom.secretKeyRef.",
)
def secret_refs(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: CKV_K8S_35; EKS Best Practices (data: use Secrets); Pulumi secrets guideline."""
    pattern = re.compile(config["secretNamePattern"])
    for path, container in containers(resource):
        for env in as_list(container.get("env")):
            entry = as_dict(env)
            name = entry.get("name")
            if not isinstance(name, str) or not pattern.fullmatch(name):
                continue
            source = as_dict(entry.get("valueFrom"))
            if entry.get("value") is not None and entry.get("value") is not UNKNOWN:
                report(f"{container_label(path, container)} sets {name} as a literal value")
            elif source and "secretKeyRef" not in source:
                report(f"{container_label(path, container)} reads {name} from {next(iter(source))}, not a Secret")


@resource_policy(
    name="kubernetes-workload-require-integer-accelerators",
    description=(
        "Accelerators are requested as whole devices in limits (and requests, if given, equal them) and at most a "
        "node's worth per pod: the device plugin cannot split a GPU, and a pod asking for more than a node has "
        "stays Pending forever."
    ),
    severity=Severity.HIGH,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    config={
        "maxAcceleratorsPerPod": {
            "type": "integer",
            "minimum": 1,
            "default": 8,
            "description": "Most accelerators one pod may request (the largest node in the catalog has 8).",
        }
    },
    remediation="Request nvidia.com/gpu (or google.com/tpu) as an integer in resources.limits.",
)
def integer_accelerators(resource: Resource, config: Config, report: Report) -> None:
    """Anchor: kubernetes.io 'Schedule GPUs' (extended resources are integers; limits required)."""
    for path, container in containers(resource):
        res = container.get("resources")
        if not known(res):
            continue
        limits, requests = as_dict(as_dict(res).get("limits")), as_dict(as_dict(res).get("requests"))
        label = container_label(path, container)
        for name in ACCELERATOR_RESOURCES:
            limit, request = limits.get(name), requests.get(name)
            if not (known(limit) and known(request)) or (limit is None and request is None):
                continue
            if limit is None:
                report(f"{label} requests {name} without a limit")
                continue
            count = as_int(limit)
            if count is None or count < 1:
                report(f"{label} {name} limit {limit!r} is not a positive integer")
            elif request is not None and as_int(request) != count:
                report(f"{label} {name} request {request!r} differs from its limit {limit!r}")
            elif count > config["maxAcceleratorsPerPod"]:
                report(f"{label} asks for {count} {name}, more than {config['maxAcceleratorsPerPod']} per pod")


def _tolerates(spec: dict[str, Any], key: str) -> bool:
    for toleration in as_list(spec.get("tolerations")):
        entry = as_dict(toleration)
        if entry.get("operator") == "Exists" and entry.get("key") in (None, ""):
            return True
        if entry.get("key") == key and entry.get("effect") in (None, "", "NoSchedule"):
            return True
    return False


def _selects(spec: dict[str, Any], keys: tuple[str, ...]) -> bool:
    if any(k in as_dict(spec.get("nodeSelector")) for k in keys):
        return True
    required = as_dict(
        as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    for term in as_list(required.get("nodeSelectorTerms")):
        for expression in as_list(as_dict(term).get("matchExpressions")):
            if as_dict(expression).get("key") in keys:
                return True
    return False


@resource_policy(
    name="kubernetes-workload-require-accelerator-placement",
    description=(
        "Pods that request accelerators must tolerate the accelerator taint and select their pool by node label; "
        "pods that request none must not tolerate the GPU taint, or they squat on nodes costing dollars an hour."
    ),
    severity=Severity.MEDIUM,
    enforcement=EnforcementLevel.MANDATORY,
    types=WORKLOADS,
    config=_EXEMPT_SCHEMA,
    remediation="Use the tolerations and nodeSelector from components.spec.scheduling for the pool.",
)
def accelerator_placement(resource: Resource, config: Config, report: Report) -> None:
    """Anchors: EKS Best Practices AI/ML (taints and tolerations, node selection)."""
    spec = pod_spec(resource)
    if not (known(spec.get("tolerations")) and known(spec.get("nodeSelector")) and known(spec.get("affinity"))):
        return
    if not accelerators_known(resource):
        return
    # Any container's request counts here (an init container that builds an engine needs the GPU node too), even a
    # malformed one (integer-accelerators reports that): the pod wants the device.
    requested = {name for _, c in containers(resource) for name in accelerators_requested(c)}
    if NVIDIA_GPU_RESOURCE in requested:
        if not _tolerates(spec, GPU_TAINT.key):
            report(f"requests {NVIDIA_GPU_RESOURCE} but does not tolerate the {GPU_TAINT.key} taint")
        if not _selects(spec, (POOL_LABEL, ACCELERATOR_LABEL)):
            report(f"requests {NVIDIA_GPU_RESOURCE} but selects no pool ({POOL_LABEL} or {ACCELERATOR_LABEL})")
    elif TPU_RESOURCE in requested:
        if not _tolerates(spec, TPU_TAINT.key):
            report(f"requests {TPU_RESOURCE} but does not tolerate the {TPU_TAINT.key} taint")
        if not _selects(spec, (GKE_TPU_ACCELERATOR_LABEL, POOL_LABEL)):
            report(f"requests {TPU_RESOURCE} but selects no TPU node ({GKE_TPU_ACCELERATOR_LABEL})")
    elif not _exempt(resource, config) and any(
        as_dict(t).get("key") == GPU_TAINT.key for t in as_list(spec.get("tolerations"))
    ):
        report(f"tolerates the {GPU_TAINT.key} taint without requesting a GPU")


POLICIES: list[AnyPolicy] = [
    require_resources,
    disallow_privileged,
    disallow_host_access,
    pinned_images,
    image_digests,
    secret_refs,
    integer_accelerators,
    accelerator_placement,
]
