"""Kubernetes manifests (``orchestrator deploy kubernetes --print``): validated against
the official schemas of every Kubernetes version the README names (kubernetes-validate,
strict: an unknown field fails) for every group shape (extra mounts, limits, a packages
image, the web gate, a folder name Kubernetes would refuse as it is), the Sandbox of
kubernetes-sigs/agent-sandbox against its CRD's schema (vendored in tests/data, with its
licence), and a golden test of the hardening fields."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.config import load_config
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, set_option
from orchestrator.home import Home
from orchestrator.service.kubernetes import (
    KubernetesOptions,
    manifests,
    resource_name,
    shapes_of,
)
from tests.kubehome import home_with_a_shared_folder

# the Kubernetes versions the README names
VERSIONS = ("1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0")
CRD = Path(__file__).parent / "data" / "agent-sandbox" / "agents.x-k8s.io_sandboxes.yaml"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    """A home with a group of every shape."""
    home, shared = home_with_a_shared_folder(tmp_path, "k8s")
    store = GroupStore(home)
    shapes: dict[str, dict[str, str]] = {
        "Plain": {},
        "Mounts": {"mounts": f"[{{host: {shared}, name: docs, writable: true}}]"},
        "Limits": {
            "container.memory": "2g",
            "container.cpus": "1.5",
            "container.pids": "512",
            "container.disk": "5g",
        },
        "Packages": {"packages.debian": "[jq]"},
        "Web": {},
    }
    for name, options in shapes.items():
        group = store.add(GroupConfig(name=name, creators=("alice",)))
        for key, value in options.items():
            set_option(group.config_file, key, value)
        if name == "Web":  # the template has no web: section
            group.config_file.write_text(group.config_file.read_text() + "web:\n  enabled: true\n")
    under = store.add(GroupConfig(name="Under score", creators=("alice",)), folder="under_score")
    assert under.folder == "under_score"
    assert [i.problem for i in store.listing() if i.problem] == []  # every shape is valid
    return home


def docs_of(home: Home, **options: Any) -> list[dict[str, Any]]:
    config = load_config(home)
    chosen = KubernetesOptions(**options)
    shapes = shapes_of(
        home, config, registry="registry.example.org/team/", tag="v1", runner_port=7070
    )
    return manifests(config.project, shapes, chosen)


def _strict(schema: Any) -> Any:
    """The CRD's OpenAPI schema made strict as kubernetes-validate's are: an object
    with listed properties takes no other (unless it keeps unknown fields)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def sandbox_validator() -> jsonschema.protocols.Validator:
    """The schema of the Sandbox CRD's v1beta1 (its served, stored version)."""
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    assert version["served"] and version["storage"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate(doc: dict[str, Any], version: str) -> None:
    if doc["kind"] == "Sandbox":
        sandbox_validator().validate(doc)
        # the pod it runs is a Pod as the cluster will check it
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": doc["metadata"]["name"]},
            "spec": doc["spec"]["podTemplate"]["spec"],
        }
        kubernetes_validate.validate(pod, version, strict=True)
        return
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("sandbox", [False, True], ids=["statefulset", "sandbox"])
def test_every_manifest_is_valid_for_every_named_version(home: Home, sandbox: bool) -> None:
    docs = docs_of(home, sandbox=sandbox, runtime_class="gvisor", storage_class="nfs")
    kinds = [d["kind"] for d in docs]
    owner = "Sandbox" if sandbox else "StatefulSet"
    assert kinds.count(owner) == 6 and kinds.count("PersistentVolumeClaim") == 7
    assert {"Namespace", "Deployment", "Service", "NetworkPolicy"} <= set(kinds)
    for version in VERSIONS:
        for doc in docs:
            validate(doc, version)


def test_an_invalid_manifest_fails_the_checks(home: Home) -> None:
    """The checks can fail: an unknown field, a wrong type, a Sandbox field misspelt."""
    docs = docs_of(home)
    deployment = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    deployment["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment, VERSIONS[0])
    claim = copy.deepcopy(next(d for d in docs if d["kind"] == "PersistentVolumeClaim"))
    claim["spec"]["accessModes"] = "ReadWriteMany"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(claim, VERSIONS[-1])
    sandbox = copy.deepcopy(next(d for d in docs_of(home, sandbox=True) if d["kind"] == "Sandbox"))
    sandbox["spec"]["operatingMode"] = "Paused"
    with pytest.raises(jsonschema.ValidationError):
        validate(sandbox, VERSIONS[0])
    sandbox["spec"]["operatingMode"] = "Running"
    sandbox["spec"]["podTemplates"] = sandbox["spec"].pop("podTemplate")
    with pytest.raises(jsonschema.ValidationError):
        validate(sandbox, VERSIONS[0])


def _pod(docs: list[dict[str, Any]], folder: str) -> dict[str, Any]:
    owner = next(
        d
        for d in docs
        if d["kind"] in ("StatefulSet", "Sandbox")
        and d["metadata"]["name"] == resource_name(folder)
    )
    template = owner["spec"]["template" if owner["kind"] == "StatefulSet" else "podTemplate"]
    pod: dict[str, Any] = template["spec"]
    return pod


def test_the_group_pods_hardening_golden(home: Home) -> None:
    for sandbox in (False, True):
        docs = docs_of(home, sandbox=sandbox, runtime_class="gvisor")
        pod = _pod(docs, "plain")
        assert pod["automountServiceAccountToken"] is False
        assert pod["enableServiceLinks"] is False
        assert pod["runtimeClassName"] == "gvisor"
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "fsGroup": 10001,
        }
        (container,) = pod["containers"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
        }
        assert container["resources"]["limits"] == {"memory": "512Mi", "cpu": "1000m"}
        assert container["image"] == "registry.example.org/team/orchestrator-agent:v1"
        assert container["args"] == ["orchestrator", "agent", "serve"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["ORCHESTRATOR_DIAL"] == "orchestrator:7070"
        assert env["ORCHESTRATOR_CREDENTIAL"] == "/run/secrets/orchestrator-runner"
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert set(mounts) == {
            "/workspace/agent/memory",
            "/workspace/agent/sessions",
            "/workspace/agent/files",
            "/run/secrets",
            "/tmp",
            "/home/agent",
        }
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["credential"]["secret"]["defaultMode"] == 0o400
        tmp = volumes[mounts["/tmp"]["name"]]["emptyDir"]
        assert tmp == {"medium": "Memory", "sizeLimit": "64Mi"}
        for doc in docs:  # nothing of a node is mounted, nothing runs privileged
            assert "hostPath" not in yaml.safe_dump(doc)
            assert "privileged: true" not in yaml.safe_dump(doc)
            assert "hostNetwork" not in yaml.safe_dump(doc)
    policy = next(d for d in docs if d["metadata"]["name"] == "orchestrator-groups")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == []  # runners listen nowhere
    (dns, daemon) = policy["spec"]["egress"]
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert daemon["ports"] == [{"protocol": "TCP", "port": 7070}]
    assert daemon["to"] == [
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/part-of": "orchestrator",
                    "app.kubernetes.io/component": "daemon",
                }
            }
        }
    ]


def test_each_group_shape_in_its_pod(home: Home) -> None:
    docs = docs_of(home)
    limits = _pod(docs, "limits")["containers"][0]["resources"]["limits"]
    assert limits == {"memory": "2Gi", "cpu": "1500m"}
    claim = next(d for d in docs if d["metadata"]["name"] == f"{resource_name('limits')}-folder")
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    packages = _pod(docs, "packages")["containers"][0]["image"]
    assert packages.startswith("registry.example.org/team/orchestrator-group-packages-")
    mounts = {m["mountPath"]: m for m in _pod(docs, "mounts")["containers"][0]["volumeMounts"]}
    assert mounts["/workspace/extra/docs"]["readOnly"] is False
    web = _pod(docs, "web")["containers"][0]
    assert "/run/orchestrator-egress" not in {m["mountPath"] for m in web["volumeMounts"]}
    assert "ORCHESTRATOR_EGRESS_SOCKET" not in {e["name"] for e in web["env"]}
    assert resource_name("under_score") != resource_name("under-score")
    # the daemon mounts each group's claim where its folder is in the home
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    (daemon,) = deployment["spec"]["template"]["spec"]["containers"]
    paths = {m["mountPath"] for m in daemon["volumeMounts"]}
    assert "/srv/orchestrator/groups/under_score" in paths


def test_the_command_prints_them_and_applies_nothing(home: Home) -> None:
    runner = CliRunner()
    done = runner.invoke(cli, ["--home", str(home.root), "deploy", "kubernetes"])
    assert done.exit_code != 0 and "only --print is supported" in done.output
    done = runner.invoke(
        cli,
        ["--home", str(home.root), "deploy", "kubernetes", "--print", "--sandbox"],
        catch_exceptions=False,
    )
    assert done.exit_code == 0, done.output
    docs = list(yaml.safe_load_all(done.output))
    assert sum(d["kind"] == "Sandbox" for d in docs) == 6
    assert all(d["apiVersion"] == "agents.x-k8s.io/v1beta1" for d in docs if d["kind"] == "Sandbox")
