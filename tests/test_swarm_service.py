"""A group's Swarm service as pure functions of data (no engine): its name, the spec as
Swarm runs it, the hardening fields of the body the engine is sent, the state its tasks
add up to; the runtime section of orchestrator.yaml; the address filters of the
daemon's listeners."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.config import PROJECT_PATTERN, load_config
from orchestrator.config.runtime import BACKEND_NAMES, SwarmSettings
from orchestrator.errors import InvalidConfig
from orchestrator.groups import Group
from orchestrator.groups.config import ContainerSettings, GroupConfig
from orchestrator.groups.webconfig import WebSettings
from orchestrator.home import Home
from orchestrator.limits import FOLDER_NAME_PATTERN
from orchestrator.runtime import BACKENDS
from orchestrator.runtime.base import LABEL_CONFIG_HASH
from orchestrator.runtime.spec import config_hash, container_name, container_spec
from orchestrator.runtime.swarm import addresses
from orchestrator.runtime.swarm.service import (
    CREDENTIAL_PATH,
    LABEL_CREDENTIAL,
    LABEL_NAME,
    adapt_spec,
    runner_addresses,
    service_body,
    service_name,
    service_state,
    task_problems,
)

GROUP = Group("fam", Path("/srv/h/groups/fam"), GroupConfig(name="Fam"))
SETTINGS = SwarmSettings(network="orch-runners", daemon="orchestrator", port=7070)


def spec(group: Group = GROUP, **kw):  # type: ignore[no-untyped-def]
    args = {
        "project": "orchestrator",
        "home_id": "0123456789abcdef",
        "group": group,
        "image": "orchestrator-agent:abc",
        "user": (1000, 1000),
        "runtime_dir": Path("/srv/h/state/run/fam"),
        "skills_root": None,
        "egress_dir": Path("/srv/h/state/egress/fam"),
    }
    args.update(kw)
    return container_spec(**args)


DNS_LABEL = re.compile(r"[a-zA-Z0-9](?:[-_]*[A-Za-z0-9]+)*")


@given(
    st.from_regex(PROJECT_PATTERN, fullmatch=True),
    st.from_regex(FOLDER_NAME_PATTERN, fullmatch=True),
    st.from_regex(PROJECT_PATTERN, fullmatch=True),
    st.from_regex(FOLDER_NAME_PATTERN, fullmatch=True),
)
def test_service_names_are_what_swarm_takes_and_never_shared(
    p1: str, f1: str, p2: str, f2: str
) -> None:
    one, two = service_name(container_name(p1, f1)), service_name(container_name(p2, f2))
    for name in (one, two):
        assert len(name) <= 63 and DNS_LABEL.fullmatch(name), name
    if (p1, f1) != (p2, f2):
        assert one != two


def test_the_spec_on_swarm_dials_the_daemon_and_has_no_runner_folder() -> None:
    adapted = adapt_spec(spec(), SETTINGS, "node1")
    targets = {m.target for m in adapted.mounts}
    assert "/run/orchestrator" not in targets  # the runner listens nowhere
    assert "/srv/h/state/run/fam" not in {m.source for m in adapted.mounts}
    assert adapted.environment["ORCHESTRATOR_DIAL"] == "orchestrator:7070"
    assert adapted.environment["ORCHESTRATOR_CREDENTIAL"] == CREDENTIAL_PATH
    assert "ORCHESTRATOR_RUNTIME_DIR" not in adapted.environment
    # the credential is a file the engine mounts, never an environment variable
    assert not any("PRIVATE KEY" in v or "CERTIFICATE" in v for v in adapted.environment.values())
    assert adapted.network_mode == "orch-runners"
    assert adapted.placement == ()  # no web gate, no constraint
    # another network, port or constraint is another spec: the hash sees it
    moved = adapt_spec(spec(), replace(SETTINGS, port=7071), "node1")
    assert config_hash(moved) != config_hash(adapted)
    pinned = adapt_spec(spec(), replace(SETTINGS, constraints=("node.labels.a==b",)), "n")
    assert pinned.placement == ("node.labels.a==b",)


def test_a_group_with_the_web_gate_runs_on_the_daemons_node() -> None:
    group = replace(GROUP, config=replace(GROUP.config, web=WebSettings(enabled=True)))
    adapted = adapt_spec(spec(group), SETTINGS, "node1")
    assert "/run/orchestrator-egress" in {m.target for m in adapted.mounts}
    assert adapted.placement == ("node.id==node1",)


def test_a_group_asking_for_a_network_of_its_own_is_refused() -> None:
    group = replace(
        GROUP, config=replace(GROUP.config, container=ContainerSettings(network="bridge"))
    )
    with pytest.raises(InvalidConfig, match=r"container\.network: bridge.*swarm backend"):
        adapt_spec(spec(group), SETTINGS, "node1")


def _body(api: tuple[int, int] = (1, 41)) -> dict:  # type: ignore[type-arg]
    adapted = adapt_spec(spec(), SETTINGS, "node1")
    return service_body(
        adapted, secret_id="sid", secret="fam_secret", credential="ab" * 32, api_version=api
    )


def test_the_service_carries_the_hardening_swarm_can_express() -> None:
    body = _body()
    task = body["task_template"]
    container = task["ContainerSpec"]
    assert container["User"] == "1000:1000"
    assert container["ReadOnly"] is True
    assert container["CapabilityDrop"] == ["ALL"]
    assert container["Init"] is True
    assert container["Args"] == ["orchestrator", "agent", "serve"]
    assert task["Resources"]["Limits"] == {
        "NanoCPUs": 1_000_000_000,
        "MemoryBytes": 512 * 1024**2,
        "Pids": 256,
    }
    tmpfs = {m["Target"]: m["TmpfsOptions"] for m in container["Mounts"] if m["Type"] == "tmpfs"}
    # Swarm sets no owner on a tmpfs: $HOME is writable by all (one user runs there)
    assert tmpfs == {
        "/tmp": {"Mode": 0o1777, "SizeBytes": 64 * 1024**2},
        "/home/agent": {"Mode": 0o1777, "SizeBytes": 64 * 1024**2},
    }
    binds = {
        (m["Source"], m["Target"], m["ReadOnly"])
        for m in container["Mounts"]
        if m["Type"] == "bind"
    }
    assert ("/srv/h/groups/fam/memory", "/workspace/agent/memory", False) in binds
    assert not any("docker.sock" in m["Source"] for m in container["Mounts"] if "Source" in m)
    # the credential: a secret, readable by the runner's user alone
    (secret,) = container["Secrets"]
    assert secret == {
        "File": {"Name": "orchestrator-runner", "UID": "1000", "GID": "1000", "Mode": 0o400},
        "SecretID": "sid",
        "SecretName": "fam_secret",
    }
    assert task["Networks"] == [{"Target": "orch-runners"}]
    assert body["endpoint_spec"] == {"Mode": "dnsrr"}  # nothing listens: no virtual IP
    assert body["mode"] == {"Replicated": {"Replicas": 0}}  # made idle, started by scaling
    assert task["RestartPolicy"]["Condition"] == "on-failure"
    # labelled and hashed as the Docker backend's containers; the credential by its hash
    labels = body["labels"]
    assert labels[LABEL_NAME] == "orchestrator.fam"
    assert labels[LABEL_CONFIG_HASH] and labels[LABEL_CREDENTIAL] == "ab" * 32
    # the task's containers carry no group labels: a Docker backend on the same home
    # (moving between backends) must not take them for its own, or for the old scheme's
    assert container["Labels"] == {
        LABEL_NAME: "orchestrator.fam",
        "org.orchestrator.project": "orchestrator",
        "org.orchestrator.swarm-home": "0123456789abcdef",
    }
    # no-new-privileges only where the engine takes it (Docker 25, API 1.44)
    assert "Privileges" not in container
    assert _body((1, 44))["task_template"]["ContainerSpec"]["Privileges"] == {
        "NoNewPrivileges": True
    }


def _task(desired: str, state: str, created: str, **extra):  # type: ignore[no-untyped-def]
    return {
        "DesiredState": desired,
        "CreatedAt": created,
        "Status": {"State": state, "Timestamp": created, **extra},
        "Slot": 1,
    }


def test_the_state_of_a_service_from_its_tasks() -> None:
    up = {"Spec": {"Mode": {"Replicated": {"Replicas": 1}}}, "UpdatedAt": "2026-01-01T00:00:10Z"}
    down = {"Spec": {"Mode": {"Replicated": {"Replicas": 0}}}}
    running = _task(
        "running",
        "running",
        "2026-01-01T00:00:11.5Z",
        ContainerStatus={"ContainerID": "c1"},
    )
    old = _task("shutdown", "shutdown", "2026-01-01T00:00:01Z")
    assert service_state(down, [running]) == ("idle", None, None)
    state, started, container = service_state(up, [old, running])
    assert (state, container) == ("running", "c1") and started is not None
    assert service_state(up, [old, _task("running", "preparing", "2026-01-01T00:00:11Z")])[0] == (
        "starting"
    )
    # a killed task waits out its restart delay: its successor is "ready"
    failed = _task("shutdown", "failed", "2026-01-01T00:00:11Z", Err="exit 137")
    assert service_state(up, [failed, _task("ready", "ready", "2026-01-01T00:00:12Z")])[0] == (
        "starting"
    )
    # scaled up a moment ago: only the tasks from before, the scheduler not yet on it
    assert service_state(up, [old])[0] == "starting"
    # every task since the change ended, none on its way: Swarm gave up
    assert service_state(up, [old, failed])[0] == "exited"
    assert task_problems([failed]) == ["task 1: failed: exit 137"]


def test_a_runner_may_connect_only_from_its_own_tasks_address() -> None:
    def attached(name: str, address: str) -> dict:  # type: ignore[type-arg]
        return {"Network": {"Spec": {"Name": name}}, "Addresses": [address]}

    tasks = [
        {
            "DesiredState": "running",
            "NetworksAttachments": [
                attached("orch-runners", "10.0.2.7/24"),
                attached("other", "10.0.9.7/24"),
            ],
        },
        {
            "DesiredState": "shutdown",
            "NetworksAttachments": [attached("orch-runners", "10.0.2.3/24")],
        },
    ]
    assert runner_addresses(tasks, "orch-runners") == {"10.0.2.7"}


def test_the_runtime_section_of_orchestrator_yaml(tmp_path: Path) -> None:
    home = Home(tmp_path)
    assert load_config(home).runtime.backend == "docker"
    (tmp_path / "orchestrator.yaml").write_text(
        "runtime:\n  backend: swarm\n  swarm:\n    network: runners-a\n    port: 7443\n"
        "    daemon: orchestrator.internal\n    constraints: ['node.labels.disk == ssd']\n"
    )
    config = load_config(home)
    assert config.runtime.backend == "swarm"
    assert config.runtime.swarm == SwarmSettings(
        network="runners-a",
        daemon="orchestrator.internal",
        port=7443,
        constraints=("node.labels.disk == ssd",),
    )
    for text, message in (
        (
            "runtime:\n  backend: kubernetes\n",
            "runtime.backend: got 'kubernetes'; valid values: docker, swarm",
        ),
        ("runtime:\n  swarm:\n    port: 0\n", "runtime.swarm.port: got 0; expected a port"),
        ("runtime:\n  swarm:\n    constraints: [rm -rf]\n", r"runtime.swarm.constraints\[0\]"),
        ("runtime:\n  swarm:\n    network: 'a b'\n", "runtime.swarm.network"),
        ("runtime:\n  swarm:\n    zone: x\n", "unknown key; valid keys here: constraints, daemon"),
    ):
        (tmp_path / "orchestrator.yaml").write_text(text)
        with pytest.raises(InvalidConfig, match=message):
            load_config(home)


def test_every_backend_name_has_a_class() -> None:
    assert set(BACKENDS) == set(BACKEND_NAMES)


def test_the_daemons_listeners_keep_off_the_runner_network() -> None:
    subnets = addresses.networks(["10.0.2.0/24"])
    found = ["127.0.0.1", "10.0.2.2", "10.0.3.5", "172.18.0.3", "::1", "fe80::1"]
    assert addresses.inside(found, subnets) == ["10.0.2.2"]
    assert addresses.outside(found, subnets, v6=False) == ["127.0.0.1", "10.0.3.5", "172.18.0.3"]
    assert addresses.outside(found, subnets, v6=True) == [
        "127.0.0.1",
        "10.0.3.5",
        "172.18.0.3",
        "::1",
    ]
    assert "127.0.0.1" in addresses.local_addresses()  # read from this machine's interfaces


def test_open_backend_makes_the_one_orchestrator_yaml_names(tmp_path: Path) -> None:
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.docker import DockerBackend
    from orchestrator.runtime.swarm import SwarmBackend

    home = Home(tmp_path)

    class Engine:  # neither backend calls the engine when it is made
        api = None

    engine = Engine()
    assert isinstance(open_backend(load_config(home), client=engine, home=home), DockerBackend)
    (tmp_path / "orchestrator.yaml").write_text("runtime:\n  backend: swarm\n")
    swarm = open_backend(load_config(home), client=engine, home=home)
    assert isinstance(swarm, SwarmBackend)
    assert swarm.authority.folder == home.state_dir / "swarm"
