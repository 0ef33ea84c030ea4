"""Exact output of the Kubernetes manifests' functions (service/kubernetes.py) for
hand-built container specs: names, quantities, the pod of a group field by field, its
owner (StatefulSet or Sandbox) and claim, the daemon's objects, the network policies,
the order of every object and the YAML text. No schema validation here (see
tests/test_kubernetes.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import load_config
from orchestrator.errors import BadInput
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, set_option
from orchestrator.image.group import group_repository
from orchestrator.runtime.base import (
    LABEL_CONFIG_HASH,
    LABEL_GROUP,
    LABEL_HOME,
    LABEL_PROJECT,
    BindMount,
    ContainerSpec,
)
from orchestrator.runtime.spec import RUNTIME_DIR, config_hash, run_as
from orchestrator.service.kubernetes import (
    GroupShape,
    KubernetesOptions,
    _labels,
    _tmpfs_size,
    cpu,
    daemon_objects,
    group_objects,
    group_pod,
    manifests,
    network_policies,
    quantity,
    resource_name,
    shapes_of,
    to_yaml,
)
from tests.kubehome import home_with_a_shared_folder

PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"


def digest(folder: str) -> str:
    return hashlib.sha256(folder.encode()).hexdigest()[:6]


def spec_of(**changes: Any) -> ContainerSpec:
    values: dict[str, Any] = {
        "name": "orchestrator-k8s-main",
        "image": "reg/agent:v1",
        "command": ("orchestrator", "agent", "serve"),
        "user": "1000:1001",
        "labels": {
            "org.orchestrator.project": "k8s",
            "org.orchestrator.home": "h1",
            "org.orchestrator.group": "my_group",
            "org.orchestrator.config-hash": "abc",
            "other": "dropped",
        },
        "mounts": (
            BindMount("/host/run", "/run/orchestrator", False),
            BindMount("/host/egress", "/run/orchestrator-egress", True),
            BindMount("/host/memory", "/workspace/agent/memory", False),
            BindMount("/host/agent", "/workspace/agent", False),
            BindMount("/host/docs", "/workspace/extra/my_docs", True),
            BindMount("/host/data", "/workspace/extra/data", False),
            BindMount("/host/skills", "/workspace/skills", True),
        ),
        "environment": {
            "ZED": "last",
            "ORCHESTRATOR_EGRESS_SOCKET": "/run/orchestrator-egress/s",
            "ORCHESTRATOR_RUNTIME_DIR": "/run/orchestrator",
            "ALPHA": "first",
        },
        "tmpfs": {"/tmp": "rw,size=67108864", "/home/agent": "rw,mode=1777"},
        "working_dir": "/workspace/agent",
        "hostname": "ignored",
        "network_mode": "none",
        "memory_bytes": 512 * 1024**2,
        "nano_cpus": 1_500_000_000,
        "pids_limit": 256,
    }
    values.update(changes)
    return ContainerSpec(**values)


FOLDER = "my_group"
NAME = f"g-my-group-{digest(FOLDER)}"


def test_resource_name_is_a_dns_label_that_keeps_underscores_apart() -> None:
    assert resource_name("a_b") == f"g-a-b-{digest('a_b')}"
    assert resource_name("a-b") == f"g-a-b-{digest('a-b')}"
    assert resource_name("x", prefix="pre") == f"pre-x-{digest('x')}"
    long = "a" * 80
    assert resource_name(long) == f"g-{'a' * 54}-{digest(long)}"
    assert len(resource_name(long)) == 63
    assert resource_name(long, prefix="abc") == f"abc-{'a' * 52}-{digest(long)}"


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (2 * 1024**3, "2Gi"),
        (1024**3, "1Gi"),
        (1536 * 1024**2, "1536Mi"),
        (3 * 1024**2, "3Mi"),
        (1024, "1Ki"),
        (1536, "1536"),
        (1023, "1023"),
        (0, "0Gi"),
    ],
)
def test_quantity_takes_the_largest_exact_unit(n: int, text: str) -> None:
    assert quantity(n) == text


@pytest.mark.parametrize(
    ("nano", "text"),
    [
        (1_500_000_000, "1500m"),
        (2_600_000, "3m"),
        (1_500_000, "2m"),
        (2_400_000, "2m"),
        (1_000_000, "1m"),
        (400_000, "1m"),
        (0, "1m"),
    ],
)
def test_cpu_in_millicores_at_least_one(nano: int, text: str) -> None:
    assert cpu(nano) == text


@pytest.mark.parametrize(
    ("options", "size"),
    [
        ("size=65536", "64Ki"),
        ("rw,size=1048576,mode=1777", "1Mi"),
        ("rw,size=1000", "1000"),
        ("rw,mode=1777", None),
        ("rw,nosize=1024", None),
        ("", None),
    ],
)
def test_tmpfs_size(options: str, size: str | None) -> None:
    assert _tmpfs_size(options) == size


def test_labels_keep_the_project_home_and_group() -> None:
    assert _labels(spec_of(), "group") == {
        PART_OF: "orchestrator",
        COMPONENT: "group",
        "org.orchestrator.project": "k8s",
        "org.orchestrator.home": "h1",
        "orchestrator.group": "my_group",
    }
    assert _labels(spec_of(labels={"other": "x"}), "daemon") == {
        PART_OF: "orchestrator",
        COMPONENT: "daemon",
    }


def expected_pod(uid: int = 1000, gid: int = 1001) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {
                PART_OF: "orchestrator",
                COMPONENT: "group",
                "org.orchestrator.project": "k8s",
                "org.orchestrator.home": "h1",
                "orchestrator.group": "my_group",
            },
            "annotations": {"org.orchestrator.config-hash": "abc"},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostname": NAME,
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
                "runAsUser": uid,
                "runAsGroup": gid,
                "fsGroup": gid,
            },
            "containers": [
                {
                    "name": "runner",
                    "image": "reg/agent:v1",
                    "args": ["orchestrator", "agent", "serve"],
                    "workingDir": "/workspace/agent",
                    "env": [
                        {"name": "ALPHA", "value": "first"},
                        {"name": "ZED", "value": "last"},
                    ],
                    "resources": {
                        "limits": {"memory": "512Mi", "cpu": "1500m"},
                        "requests": {"memory": "512Mi", "cpu": "1500m"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "privileged": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True,
                        "runAsUser": uid,
                        "runAsGroup": gid,
                    },
                    "volumeMounts": [
                        {
                            "name": "folder",
                            "mountPath": "/workspace/agent/memory",
                            "subPath": "memory",
                            "readOnly": False,
                        },
                        {
                            "name": "extra-my-docs",
                            "mountPath": "/workspace/extra/my_docs",
                            "readOnly": True,
                        },
                        {
                            "name": "extra-data",
                            "mountPath": "/workspace/extra/data",
                            "readOnly": False,
                        },
                        {"name": "credential", "mountPath": "/run/secrets", "readOnly": True},
                        {"name": "tmpfs-0", "mountPath": "/home/agent"},
                        {"name": "tmpfs-1", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {"name": "folder", "persistentVolumeClaim": {"claimName": f"{NAME}-folder"}},
                {
                    "name": "credential",
                    "secret": {
                        "secretName": f"{NAME}-runner",
                        "defaultMode": 256,
                        "items": [{"key": "orchestrator-runner", "path": "orchestrator-runner"}],
                    },
                },
                {
                    "name": "extra-my-docs",
                    "persistentVolumeClaim": {
                        "claimName": "orchestrator-extra-my-docs",
                        "readOnly": True,
                    },
                },
                {
                    "name": "extra-data",
                    "persistentVolumeClaim": {
                        "claimName": "orchestrator-extra-data",
                        "readOnly": False,
                    },
                },
                {"name": "tmpfs-0", "emptyDir": {"medium": "Memory"}},
                {"name": "tmpfs-1", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
            ],
        },
    }


def test_group_pod_exact() -> None:
    shape = GroupShape(FOLDER, spec_of(), 5 * 1024**3)
    assert group_pod(shape, KubernetesOptions()) == expected_pod()


def test_group_pod_with_a_runtime_class_and_a_user_without_group() -> None:
    shape = GroupShape(FOLDER, spec_of(user="2000"), 1024**3)
    pod = group_pod(shape, KubernetesOptions(runtime_class="gvisor"))
    expected = expected_pod(2000, 2000)
    expected["spec"]["runtimeClassName"] = "gvisor"
    assert pod == expected


def test_group_pod_without_a_config_hash_and_with_the_longest_extra_name() -> None:
    extra = "x_" * 28 + "y"  # 57 characters: the volume's name has 63
    spec = spec_of(
        labels={},
        mounts=(BindMount("/h", f"/workspace/extra/{extra}", False),),
        tmpfs={},
        environment={},
    )
    pod = group_pod(GroupShape(FOLDER, spec, 1024), KubernetesOptions())
    assert pod["metadata"] == {
        "labels": {PART_OF: "orchestrator", COMPONENT: "group"},
        "annotations": {"org.orchestrator.config-hash": ""},
    }
    volume = "extra-" + "x-" * 28 + "y"
    claim = "orchestrator-" + volume
    assert len(volume) == 63
    assert pod["spec"]["volumes"][2:] == [
        {"name": volume, "persistentVolumeClaim": {"claimName": claim, "readOnly": False}}
    ]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": volume, "mountPath": f"/workspace/extra/{extra}", "readOnly": False},
        {"name": "credential", "mountPath": "/run/secrets", "readOnly": True},
    ]
    assert pod["spec"]["containers"][0]["env"] == []


@pytest.mark.parametrize("extra", ["x" * 57 + "y", "docs-", "docs_"])
def test_an_extra_mount_whose_volume_name_kubernetes_refuses_is_refused(extra: str) -> None:
    spec = spec_of(mounts=(BindMount("/h", f"/workspace/extra/{extra}", False),))
    with pytest.raises(BadInput) as caught:
        group_pod(GroupShape(FOLDER, spec, 1024), KubernetesOptions())
    volume = "extra-" + extra.replace("_", "-")
    assert caught.value.message == (
        f"group {FOLDER}: extra mount {extra!r} makes the volume name {volume!r}, which "
        "Kubernetes refuses (at most 63 characters, ending in a letter or digit)"
    )
    assert caught.value.hint == (
        f"rename the mount in groups/{FOLDER}/group.yaml: at most 57 characters, ending in "
        "a letter or digit"
    )


def test_two_extra_mounts_that_make_one_claim_are_refused() -> None:
    spec = spec_of(
        mounts=(
            BindMount("/h/a", "/workspace/extra/my_docs", False),
            BindMount("/h/b", "/workspace/extra/my-docs", True),
        )
    )
    with pytest.raises(BadInput) as caught:
        group_pod(GroupShape(FOLDER, spec, 1024), KubernetesOptions())
    assert caught.value.message == (
        f"group {FOLDER}: extra mounts 'my_docs' and 'my-docs' both make the claim "
        "'orchestrator-extra-my-docs' ('_' becomes '-'), so their files would be one"
    )
    assert caught.value.hint == f"rename one of them in groups/{FOLDER}/group.yaml"


def group_labels() -> dict[str, str]:
    return {
        PART_OF: "orchestrator",
        COMPONENT: "group",
        "org.orchestrator.project": "k8s",
        "org.orchestrator.home": "h1",
        "orchestrator.group": "my_group",
    }


def test_group_objects_statefulset_exact() -> None:
    shape = GroupShape(FOLDER, spec_of(), 5 * 1024**3)
    options = KubernetesOptions(namespace="ns")
    claim, owner = group_objects(shape, options)
    assert claim == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{NAME}-folder", "namespace": "ns", "labels": group_labels()},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "5Gi"}},
        },
    }
    assert owner == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": NAME, "namespace": "ns", "labels": group_labels()},
        "spec": {
            "replicas": 1,
            "selector": {
                "matchLabels": {
                    PART_OF: "orchestrator",
                    COMPONENT: "group",
                    "orchestrator.group": "my_group",
                }
            },
            "podManagementPolicy": "OrderedReady",
            "template": expected_pod(),
        },
    }


def test_group_objects_sandbox_and_storage_class_exact() -> None:
    shape = GroupShape(FOLDER, spec_of(), 3 * 1024**2)
    options = KubernetesOptions(sandbox=True, storage_class="nfs")
    claim, owner = group_objects(shape, options)
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "3Mi"}},
        "storageClassName": "nfs",
    }
    assert claim["metadata"]["namespace"] == "orchestrator"
    assert owner == {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": NAME, "namespace": "orchestrator", "labels": group_labels()},
        "spec": {"operatingMode": "Running", "podTemplate": expected_pod()},
    }


def test_daemon_objects_exact() -> None:
    shapes = [
        GroupShape("one", spec_of(), 1024),
        GroupShape("two_x", spec_of(), 1024),
    ]
    options = KubernetesOptions(
        namespace="ns",
        daemon_image="d:1",
        home_path="/h",
        home_size="7Gi",
        storage_class="fast",
        runner_port=9000,
    )
    labels = {PART_OF: "orchestrator", COMPONENT: "daemon", "org.orchestrator.project": "p"}
    selector = {PART_OF: "orchestrator", COMPONENT: "daemon"}
    claim, deployment, service = daemon_objects("p", shapes, options)
    assert claim == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "orchestrator-home", "namespace": "ns", "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "7Gi"}},
            "storageClassName": "fast",
        },
    }
    container = {
        "name": "daemon",
        "image": "d:1",
        "args": ["--home", "/h", "serve", "--log-format", "json"],
        "env": [
            {"name": "ORCHESTRATOR_HTTP_LISTEN", "value": "0.0.0.0:8787"},
            {"name": "ORCHESTRATOR_PROJECT", "value": "p"},
            {
                "name": "ORCHESTRATOR_HTTP_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "orchestrator-http", "key": "token"}},
            },
        ],
        "ports": [
            {"name": "http", "containerPort": 8787, "protocol": "TCP"},
            {"name": "runners", "containerPort": 9000, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]},
        },
        "volumeMounts": [
            {"name": "home", "mountPath": "/h"},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "folder-0", "mountPath": "/h/groups/one"},
            {"name": "folder-1", "mountPath": "/h/groups/two_x"},
        ],
    }
    assert deployment == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "orchestrator", "namespace": "ns", "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "terminationGracePeriodSeconds": 45,
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "home",
                            "persistentVolumeClaim": {"claimName": "orchestrator-home"},
                        },
                        {"name": "tmp", "emptyDir": {"medium": "Memory"}},
                        {
                            "name": "folder-0",
                            "persistentVolumeClaim": {"claimName": f"g-one-{digest('one')}-folder"},
                        },
                        {
                            "name": "folder-1",
                            "persistentVolumeClaim": {
                                "claimName": f"g-two-x-{digest('two_x')}-folder"
                            },
                        },
                    ],
                },
            },
        },
    }
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "orchestrator", "namespace": "ns", "labels": labels},
        "spec": {
            "selector": selector,
            "ports": [
                {"name": "http", "port": 8787, "targetPort": "http"},
                {"name": "runners", "port": 9000, "targetPort": "runners"},
            ],
        },
    }


def test_network_policies_exact() -> None:
    groups = {PART_OF: "orchestrator", COMPONENT: "group"}
    daemon = {PART_OF: "orchestrator", COMPONENT: "daemon"}
    assert network_policies(KubernetesOptions(namespace="ns", runner_port=9000)) == [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "orchestrator-groups", "namespace": "ns"},
            "spec": {
                "podSelector": {"matchLabels": groups},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                                },
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    },
                    {
                        "to": [{"podSelector": {"matchLabels": daemon}}],
                        "ports": [{"protocol": "TCP", "port": 9000}],
                    },
                ],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "orchestrator-runner-port", "namespace": "ns"},
            "spec": {
                "podSelector": {"matchLabels": daemon},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": groups}}],
                        "ports": [{"protocol": "TCP", "port": 9000}],
                    },
                    {"ports": [{"protocol": "TCP", "port": 8787}]},
                ],
            },
        },
    ]


def test_manifests_order_and_namespace() -> None:
    options = KubernetesOptions(namespace="ns")
    shapes = [GroupShape("zeta", spec_of(), 1024), GroupShape("alpha", spec_of(), 2048)]
    docs = manifests("p", shapes, options)
    assert docs[0] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "ns",
            "labels": {
                "pod-security.kubernetes.io/enforce": "baseline",
                "pod-security.kubernetes.io/warn": "baseline",
            },
        },
    }
    alpha, zeta = GroupShape("alpha", spec_of(), 2048), GroupShape("zeta", spec_of(), 1024)
    assert docs[1:] == [
        *group_objects(alpha, options),
        *group_objects(zeta, options),
        *daemon_objects("p", [alpha, zeta], options),
        *network_policies(options),
    ]


def test_to_yaml_keeps_the_order_in_block_style() -> None:
    text = to_yaml([{"b": 1, "a": [1, 2]}, {"c": {"d": "e"}}])
    assert text == "b: 1\na:\n- 1\n- 2\n---\nc:\n  d: e\n"


def test_shapes_of_each_group_as_the_manifests_need_it(tmp_path: Path) -> None:
    home, shared = home_with_a_shared_folder(tmp_path, "kp")
    store = GroupStore(home)
    plain = store.add(GroupConfig(name="Plain", creators=("alice",)))
    set_option(plain.config_file, "container.disk", "3g")
    packed = store.add(GroupConfig(name="Packed", creators=("alice",)))
    set_option(packed.config_file, "packages.debian", "[jq]")
    set_option(packed.config_file, "mounts", f"[{{host: {shared}, name: docs}}]")
    if os.geteuid() == 0:  # the folder's owner, not root, is whom the pod runs as
        for group in (plain, packed):
            os.chown(group.path, 4321, 8765)
    config = load_config(home)

    shapes = shapes_of(home, config, registry="reg.example/", tag="t9", runner_port=7071)

    by_folder = {s.folder: s for s in shapes}
    assert sorted(by_folder) == ["packed", "plain"]
    owner = os.stat(plain.path)
    uid, gid = run_as(
        owner.st_uid, owner.st_gid, (config.unprivileged_uid, config.unprivileged_gid), False
    )
    for folder, shape in by_folder.items():
        spec = shape.spec
        assert spec.user == f"{uid}:{gid}"
        assert spec.environment["ORCHESTRATOR_DIAL"] == "orchestrator:7071"
        assert spec.labels[LABEL_GROUP] == folder
        assert spec.labels[LABEL_HOME] == home.identity
        assert spec.labels[LABEL_PROJECT] == "kp"
        assert spec.labels[LABEL_CONFIG_HASH] == config_hash(spec)
        assert RUNTIME_DIR not in {m.target for m in spec.mounts}
    assert uid != 0 and (uid, gid) == (owner.st_uid, owner.st_gid)
    assert by_folder["plain"].spec.image == "reg.example/orchestrator-agent:t9"
    assert by_folder["plain"].disk_bytes == 3 * 1024**3
    assert by_folder["packed"].disk_bytes == GroupConfig(name="x").container.disk_bytes
    assert by_folder["packed"].spec.image == f"reg.example/{group_repository('kp', 'packed')}:t9"
    assert [
        (m.source, m.read_only)
        for m in by_folder["packed"].spec.mounts
        if m.target == "/workspace/extra/docs"
    ] == [(str(shared), True)]
    assert not [
        m for m in by_folder["plain"].spec.mounts if m.target.startswith("/workspace/extra")
    ]
