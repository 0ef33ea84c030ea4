"""Kubernetes manifests of a home, as a pure function of its groups' container specs
(``orchestrator deploy kubernetes --print``).

What they describe: the daemon as a Deployment (one replica, recreated, never two) with
a ReadWriteMany claim for the home and each group's claim mounted where its folder is;
a Service ``orchestrator`` for its HTTP API and its runner port; per group, a claim for
its folder and one pod in the shape the Docker backend enforces (non-root, read-only
root, every capability dropped, no privilege escalation, seccomp RuntimeDefault, no
service-account token, its limits, tmpfs as memory-backed emptyDirs, the runner dialling
the daemon with its credential from a Secret), as a single-replica StatefulSet or, with
``sandbox``, the ``Sandbox`` of kubernetes-sigs/agent-sandbox (v1beta1); a NetworkPolicy
letting group pods reach nothing but the cluster's DNS and the daemon's runner port, and
nothing reach them; optionally a RuntimeClass (gVisor) for the group pods.

There is no Kubernetes backend: nothing here talks to a cluster, and the daemon these
manifests run does not issue the groups' credential Secrets nor scale their pods (see
the README). They are validated against the official schemas in the tests.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.config import OrchestratorConfig
from orchestrator.home import Home
from orchestrator.runtime.base import (
    LABEL_CONFIG_HASH,
    LABEL_GROUP,
    LABEL_HOME,
    LABEL_PROJECT,
    ContainerSpec,
)
from orchestrator.runtime.spec import AGENT_DIR, EGRESS_DIR, RUNTIME_DIR

DAEMON = "orchestrator"  # the Deployment, its Service (what runners dial) and labels
HOME_CLAIM = "orchestrator-home"
HTTP_TOKEN_SECRET = "orchestrator-http"  # key "token": the HTTP API's operator token
CREDENTIAL_KEY = "orchestrator-runner"  # the key of a group's credential Secret
HTTP_PORT = 8787
NAME_MAX = 63
SANDBOX_API = "agents.x-k8s.io/v1beta1"
PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"
GROUP_LABEL = "orchestrator.group"  # a label value: a folder name is one as it is


@dataclass(frozen=True)
class KubernetesOptions:
    namespace: str = "orchestrator"
    daemon_image: str = "orchestrator-daemon:latest"
    home_path: str = "/srv/orchestrator"  # where the daemon mounts the home
    home_size: str = "10Gi"
    storage_class: str | None = None  # one that offers ReadWriteMany
    runtime_class: str | None = None  # a RuntimeClass for the group pods, such as gvisor
    sandbox: bool = False  # agent-sandbox's Sandbox instead of a StatefulSet
    runner_port: int = 7070


@dataclass(frozen=True)
class GroupShape:
    """One group as the manifests need it: its spec as the Swarm backend would run it
    (the runner dialling the daemon), and the size of its folder's claim."""

    folder: str
    spec: ContainerSpec
    disk_bytes: int


def resource_name(folder: str, prefix: str = "g") -> str:
    """A DNS label for a group's objects: its folder ('_' is not allowed there), cut
    to fit, and a piece of the folder's hash, which keeps 'a_b' and 'a-b' apart."""
    digest = hashlib.sha256(folder.encode()).hexdigest()[:6]
    readable = folder.replace("_", "-")[: NAME_MAX - len(prefix) - len(digest) - 2]
    return f"{prefix}-{readable}-{digest}"


def quantity(n: int) -> str:
    """Bytes as a Kubernetes quantity (Gi, Mi, Ki when exact)."""
    for unit, factor in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def cpu(nano: int) -> str:
    return f"{max(1, round(nano / 1_000_000))}m"


def _tmpfs_size(options: str) -> str | None:
    match = re.search(r"(?:^|,)size=(\d+)", options)
    return quantity(int(match[1])) if match else None


def _labels(spec: ContainerSpec, component: str) -> dict[str, str]:
    labels = {PART_OF: "orchestrator", COMPONENT: component}
    for key in (LABEL_PROJECT, LABEL_HOME):
        if key in spec.labels:
            labels[key] = spec.labels[key]
    if LABEL_GROUP in spec.labels:
        labels[GROUP_LABEL] = spec.labels[LABEL_GROUP]
    return labels


POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,  # no-new-privileges
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
}


def group_pod(shape: GroupShape, options: KubernetesOptions) -> dict[str, Any]:
    """The pod template of a group: its container spec in Kubernetes' terms."""
    spec = shape.spec
    uid, _, gid = spec.user.partition(":")
    name = resource_name(shape.folder)
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = [
        {"name": "folder", "persistentVolumeClaim": {"claimName": f"{name}-folder"}},
        {
            "name": "credential",
            "secret": {
                "secretName": f"{name}-runner",
                "defaultMode": 0o400,
                "items": [{"key": CREDENTIAL_KEY, "path": CREDENTIAL_KEY}],
            },
        },
    ]
    claims: dict[str, str] = {}  # claim -> the extra mount's name
    for mount in spec.mounts:
        if mount.target in (RUNTIME_DIR, EGRESS_DIR):
            continue  # the runner dials the daemon; the egress gate is a host's socket
        if mount.target.startswith(f"{AGENT_DIR}/"):
            sub = mount.target.removeprefix(f"{AGENT_DIR}/")
            mounts.append(
                {"name": "folder", "mountPath": mount.target, "subPath": sub, "readOnly": False}
            )
        elif mount.target.startswith("/workspace/extra/"):
            extra = mount.target.rsplit("/", 1)[1]
            claim = _extra_claim(shape.folder, extra, claims)
            volume = claim.removeprefix("orchestrator-")
            volumes.append(
                {
                    "name": volume,
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": mount.read_only},
                }
            )
            mounts.append({"name": volume, "mountPath": mount.target, "readOnly": mount.read_only})
    mounts.append({"name": "credential", "mountPath": "/run/secrets", "readOnly": True})
    for index, (target, options_text) in enumerate(sorted(spec.tmpfs.items())):
        volume = f"tmpfs-{index}"
        empty: dict[str, Any] = {"medium": "Memory"}
        size = _tmpfs_size(options_text)
        if size:
            empty["sizeLimit"] = size
        volumes.append({"name": volume, "emptyDir": empty})
        mounts.append({"name": volume, "mountPath": target})
    environment = {
        k: v
        for k, v in spec.environment.items()
        if k not in ("ORCHESTRATOR_EGRESS_SOCKET", "ORCHESTRATOR_RUNTIME_DIR")
    }
    container = {
        "name": "runner",
        "image": spec.image,
        "args": list(spec.command),
        "workingDir": spec.working_dir,
        "env": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        "resources": {
            "limits": {"memory": quantity(spec.memory_bytes), "cpu": cpu(spec.nano_cpus)},
            "requests": {"memory": quantity(spec.memory_bytes), "cpu": cpu(spec.nano_cpus)},
        },
        "securityContext": {
            **CONTAINER_SECURITY,
            "runAsUser": int(uid),
            "runAsGroup": int(gid or uid),
        },
        "volumeMounts": mounts,
    }
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostname": name,
        "securityContext": {
            **POD_SECURITY,
            "runAsUser": int(uid),
            "runAsGroup": int(gid or uid),
            "fsGroup": int(gid or uid),
        },
        "containers": [container],
        "volumes": volumes,
    }
    if options.runtime_class:
        pod["runtimeClassName"] = options.runtime_class
    return {
        "metadata": {
            "labels": _labels(spec, "group"),
            "annotations": {LABEL_CONFIG_HASH: spec.labels.get(LABEL_CONFIG_HASH, "")},
        },
        "spec": pod,
    }


def _extra_claim(folder: str, extra: str, claims: dict[str, str]) -> str:
    """The claim ``orchestrator-extra-<name>`` of extra mount ``extra`` ('_' as '-'; the
    pod's volume is ``extra-<name>``), recorded in ``claims``; BadInput when the volume's
    name is no DNS label or another mount of the group makes the same claim (their files
    would be one)."""
    from orchestrator.errors import BadInput

    volume = f"extra-{extra.replace('_', '-')}"
    if len(volume) > NAME_MAX or not volume[-1].isalnum():
        raise BadInput(
            f"group {folder}: extra mount {extra!r} makes the volume name {volume!r}, which "
            f"Kubernetes refuses (at most {NAME_MAX} characters, ending in a letter or digit)",
            hint=f"rename the mount in groups/{folder}/group.yaml: at most "
            f"{NAME_MAX - len('extra-')} characters, ending in a letter or digit",
        )
    claim = f"orchestrator-{volume}"
    if claim in claims:
        raise BadInput(
            f"group {folder}: extra mounts {claims[claim]!r} and {extra!r} both make the claim "
            f"{claim!r} ('_' becomes '-'), so their files would be one",
            hint=f"rename one of them in groups/{folder}/group.yaml",
        )
    claims[claim] = extra
    return claim


def _claim(
    name: str, size: str, options: KubernetesOptions, labels: Mapping[str, str]
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],  # the daemon mounts it too, on another node
        "resources": {"requests": {"storage": size}},
    }
    if options.storage_class:
        spec["storageClassName"] = options.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": options.namespace, "labels": dict(labels)},
        "spec": spec,
    }


def group_objects(shape: GroupShape, options: KubernetesOptions) -> list[dict[str, Any]]:
    """The claim of a group's folder, and its pod's owner."""
    name = resource_name(shape.folder)
    labels = _labels(shape.spec, "group")
    selector = {PART_OF: "orchestrator", COMPONENT: "group", GROUP_LABEL: shape.folder}
    template = group_pod(shape, options)
    claim = _claim(f"{name}-folder", quantity(shape.disk_bytes), options, labels)
    metadata = {"name": name, "namespace": options.namespace, "labels": labels}
    if options.sandbox:
        owner = {
            "apiVersion": SANDBOX_API,
            "kind": "Sandbox",
            "metadata": metadata,
            "spec": {"operatingMode": "Running", "podTemplate": template},
        }
    else:
        owner = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": metadata,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "podManagementPolicy": "OrderedReady",
                "template": template,
            },
        }
    return [claim, owner]


def daemon_objects(
    project: str, shapes: Sequence[GroupShape], options: KubernetesOptions
) -> list[dict[str, Any]]:
    """The daemon's Deployment, Service and claim for the home."""
    labels = {PART_OF: "orchestrator", COMPONENT: "daemon", LABEL_PROJECT: project}
    selector = {PART_OF: "orchestrator", COMPONENT: "daemon"}
    home = options.home_path
    mounts = [
        {"name": "home", "mountPath": home},
        {"name": "tmp", "mountPath": "/tmp"},
    ] + [
        {"name": f"folder-{i}", "mountPath": f"{home}/groups/{s.folder}"}
        for i, s in enumerate(shapes)
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "home", "persistentVolumeClaim": {"claimName": HOME_CLAIM}},
        {"name": "tmp", "emptyDir": {"medium": "Memory"}},
    ] + [
        {
            "name": f"folder-{i}",
            "persistentVolumeClaim": {"claimName": f"{resource_name(s.folder)}-folder"},
        }
        for i, s in enumerate(shapes)
    ]
    container = {
        "name": "daemon",
        "image": options.daemon_image,
        "args": ["--home", home, "serve", "--log-format", "json"],
        "env": [
            {"name": "ORCHESTRATOR_HTTP_LISTEN", "value": f"0.0.0.0:{HTTP_PORT}"},
            {"name": "ORCHESTRATOR_PROJECT", "value": project},
            {
                "name": "ORCHESTRATOR_HTTP_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": HTTP_TOKEN_SECRET, "key": "token"}},
            },
        ],
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "runners", "containerPort": options.runner_port, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            # it hands group folders to the groups' users, as in compose.yaml
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]},
        },
        "volumeMounts": mounts,
    }
    return [
        _claim(HOME_CLAIM, options.home_size, options, labels),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": DAEMON, "namespace": options.namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},  # one daemon per home, never two
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "enableServiceLinks": False,
                        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                        "terminationGracePeriodSeconds": 45,
                        "containers": [container],
                        "volumes": volumes,
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": DAEMON, "namespace": options.namespace, "labels": labels},
            "spec": {
                "selector": selector,
                "ports": [
                    {"name": "http", "port": HTTP_PORT, "targetPort": "http"},
                    {"name": "runners", "port": options.runner_port, "targetPort": "runners"},
                ],
            },
        },
    ]


def network_policies(options: KubernetesOptions) -> list[dict[str, Any]]:
    """Group pods: nothing reaches them (runners listen nowhere), and they reach the
    cluster's DNS and the daemon's runner port only. The daemon's runner port: group
    pods only."""
    groups = {PART_OF: "orchestrator", COMPONENT: "group"}
    daemon = {PART_OF: "orchestrator", COMPONENT: "daemon"}
    dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "orchestrator-groups", "namespace": options.namespace},
            "spec": {
                "podSelector": {"matchLabels": groups},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [],
                "egress": [
                    {
                        "to": [dns],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    },
                    {
                        "to": [{"podSelector": {"matchLabels": daemon}}],
                        "ports": [{"protocol": "TCP", "port": options.runner_port}],
                    },
                ],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "orchestrator-runner-port", "namespace": options.namespace},
            "spec": {
                "podSelector": {"matchLabels": daemon},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": groups}}],
                        "ports": [{"protocol": "TCP", "port": options.runner_port}],
                    },
                    {"ports": [{"protocol": "TCP", "port": HTTP_PORT}]},
                ],
            },
        },
    ]


def manifests(
    project: str, shapes: Sequence[GroupShape], options: KubernetesOptions
) -> list[dict[str, Any]]:
    """Every object, in the order to apply them."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": options.namespace,
            # the group pods meet the restricted Pod Security Standard; the daemon, which
            # hands group folders to their users, needs baseline's CHOWN and FOWNER
            "labels": {
                "pod-security.kubernetes.io/enforce": "baseline",
                "pod-security.kubernetes.io/warn": "baseline",
            },
        },
    }
    docs: list[dict[str, Any]] = [namespace]
    for shape in sorted(shapes, key=lambda s: s.folder):
        docs.extend(group_objects(shape, options))
    docs.extend(daemon_objects(project, sorted(shapes, key=lambda s: s.folder), options))
    docs.extend(network_policies(options))
    return docs


def shapes_of(
    home: Home, config: OrchestratorConfig, *, registry: str, tag: str, runner_port: int
) -> list[GroupShape]:
    """Every valid group of ``home`` as the manifests need it (this reads the home:
    each folder's owner, the mount allowlist): the agent image, or the group's own when
    it asks for packages, under ``registry`` with ``tag``; its runner dialling the
    daemon's Service. InvalidConfig for a group Kubernetes cannot run as it asks (a
    network of its own), naming it."""
    import os

    from orchestrator.config.runtime import SwarmSettings
    from orchestrator.groups import GroupStore
    from orchestrator.image.group import group_repository
    from orchestrator.runtime.mounts import resolve_mounts
    from orchestrator.runtime.spec import config_hash, container_spec, run_as
    from orchestrator.runtime.swarm.service import adapt_spec

    dial = SwarmSettings(daemon=DAEMON, port=runner_port)
    shapes = []
    for group in GroupStore(home).groups():
        extra = resolve_mounts(
            group.config.mounts, allowlist_path=config.mount_allowlist, home_root=home.root
        )
        repository = (
            config.image
            if group.config.packages.empty
            else group_repository(config.project, group.folder)
        )
        owner = os.stat(group.path)
        spec = container_spec(
            project=config.project,
            home_id=home.identity,
            group=group,
            image=f"{registry}{repository}:{tag}",
            user=run_as(
                owner.st_uid,
                owner.st_gid,
                (config.unprivileged_uid, config.unprivileged_gid),
                rootless=False,
            ),
            runtime_dir=home.runtime_dir(group.folder),
            skills_root=None,
            extra_mounts=extra,
        )
        adapted = adapt_spec(spec, dial, None)
        labels = {**adapted.labels, LABEL_CONFIG_HASH: config_hash(adapted)}
        disk = group.config.container.disk_bytes
        shapes.append(GroupShape(group.folder, replace(adapted, labels=labels), disk))
    return shapes


def to_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    import yaml

    return yaml.safe_dump_all(list(docs), sort_keys=False, default_flow_style=False)
