"""Exact behaviour of a group's Swarm service as pure functions of data
(runtime/swarm/service.py): its name and its secrets' names, the spec as Swarm runs it,
the whole body of the engine's service create, the engine's API version and timestamps,
and the state, problems and addresses its tasks add up to."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.config.runtime import SwarmSettings
from orchestrator.errors import InvalidConfig
from orchestrator.runtime.base import BindMount, ContainerSpec
from orchestrator.runtime.swarm.service import (
    adapt_spec,
    api_version,
    parse_time,
    replicas,
    runner_addresses,
    secret_name,
    service_body,
    service_name,
    service_state,
    task_problems,
)

SETTINGS = SwarmSettings(network="runners", daemon="orch", port=7070)


def make_spec(**kw: Any) -> ContainerSpec:
    args: dict[str, Any] = {
        "name": "proj.fam",
        "image": "agent:1",
        "command": ("orchestrator", "agent", "serve"),
        "user": "1000:1001",
        "labels": {
            "org.orchestrator.group": "fam",
            "org.orchestrator.home": "home1",
            "org.orchestrator.project": "proj",
        },
        "mounts": (
            BindMount("/srv/run/fam", "/run/orchestrator", False),
            BindMount("/srv/mem", "/workspace/agent/memory", False),
            BindMount("/srv/skills", "/skills", True),
        ),
        "environment": {"A": "1", "ORCHESTRATOR_RUNTIME_DIR": "/run/orchestrator"},
        "tmpfs": {"/tmp": "size=100,mode=1777"},
        "working_dir": "/workspace",
        "hostname": "fam",
        "network_mode": "none",
        "memory_bytes": 5,
        "nano_cpus": 6,
        "pids_limit": 7,
    }
    args.update(kw)
    return ContainerSpec(**args)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# names


def test_a_service_name_is_the_name_with_underscores_and_a_hash_of_it() -> None:
    assert service_name("proj.fam") == f"proj_fam_{digest('proj.fam')}"


def test_a_long_service_name_is_cut_to_63_characters_keeping_the_hash() -> None:
    name = "p" * 30 + "." + "f" * 40
    cut = service_name(name)
    assert cut == ("p" * 30 + "_" + "f" * 21) + "_" + digest(name)
    assert len(cut) == 63
    fits = "a" * 52
    assert service_name(fits) == fits + "_" + digest(fits)


def test_a_secret_name_is_the_service_cut_to_50_and_12_of_the_fingerprint() -> None:
    assert secret_name("s" * 60, "0123456789abcdef") == "s" * 50 + "_0123456789ab"
    assert secret_name("svc", "ab") == "svc_ab"


# the spec as Swarm runs it


def test_the_adapted_spec_drops_the_runner_folder_and_dials_the_daemon() -> None:
    adapted = adapt_spec(make_spec(placement=("z==1",)), SETTINGS, "node9")
    assert adapted.mounts == (
        BindMount("/srv/mem", "/workspace/agent/memory", False),
        BindMount("/srv/skills", "/skills", True),
    )
    assert adapted.environment == {
        "A": "1",
        "ORCHESTRATOR_DIAL": "orch:7070",
        "ORCHESTRATOR_CREDENTIAL": "/run/secrets/orchestrator-runner",
    }
    assert adapted.network_mode == "runners"
    assert adapted.placement == ("z==1",)  # no gate: not pinned to the daemon's node
    assert adapted.name == "proj.fam" and adapted.image == "agent:1"


def test_the_gate_pins_the_service_to_the_daemons_node_among_sorted_constraints() -> None:
    gated = make_spec(
        mounts=(BindMount("/srv/egress", "/run/orchestrator-egress", True),),
        placement=("b==2", "a==1"),
    )
    settings = SwarmSettings(network="runners", constraints=("c==3", "a==1"))
    adapted = adapt_spec(gated, settings, "node9")
    assert adapted.placement == ("a==1", "b==2", "c==3", "node.id==node9")
    # the daemon's node unknown: no pin
    assert adapt_spec(gated, settings, None).placement == ("a==1", "b==2", "c==3")


def test_a_network_of_its_own_is_refused_naming_the_group_or_else_the_spec() -> None:
    with pytest.raises(InvalidConfig) as raised:
        adapt_spec(make_spec(network_mode="bridge"), SETTINGS, None)
    assert raised.value.message == (
        "group 'fam' asks for container.network: bridge, which the swarm backend cannot "
        "give: its services are on the runner network only"
    )
    assert raised.value.hint == (
        "use the group's web policy (group.yaml web:) instead; the host fetches for it"
    )
    with pytest.raises(InvalidConfig, match=r"^group 'proj\.fam' asks for container\.network: x"):
        adapt_spec(make_spec(network_mode="x", labels={}), SETTINGS, None)


# the body of the service create


def test_the_service_body_is_exact() -> None:
    spec = make_spec(
        tmpfs={"/tmp": "size=100,mode=1777", "/home/agent": "size=64,mode=700,uid=1000"},
        placement=("node.labels.a==b",),
        network_mode="runners",
    )
    body = service_body(spec, secret_id="sid", secret="sname", credential="fp", api_version=(1, 44))
    assert body == {
        "name": service_name("proj.fam"),
        "labels": {
            "org.orchestrator.group": "fam",
            "org.orchestrator.home": "home1",
            "org.orchestrator.project": "proj",
            "org.orchestrator.container": "proj.fam",
            "org.orchestrator.credential": "fp",
        },
        "task_template": {
            "ContainerSpec": {
                "Image": "agent:1",
                "Args": ["orchestrator", "agent", "serve"],
                "Hostname": "fam",
                "Env": ["A=1", "ORCHESTRATOR_RUNTIME_DIR=/run/orchestrator"],
                "Dir": "/workspace",
                "User": "1000:1001",
                "Labels": {
                    "org.orchestrator.container": "proj.fam",
                    "org.orchestrator.swarm-home": "home1",
                    "org.orchestrator.project": "proj",
                },
                "Mounts": [
                    {
                        "Type": "bind",
                        "Source": "/srv/run/fam",
                        "Target": "/run/orchestrator",
                        "ReadOnly": False,
                    },
                    {
                        "Type": "bind",
                        "Source": "/srv/mem",
                        "Target": "/workspace/agent/memory",
                        "ReadOnly": False,
                    },
                    {
                        "Type": "bind",
                        "Source": "/srv/skills",
                        "Target": "/skills",
                        "ReadOnly": True,
                    },
                    {
                        "Type": "tmpfs",
                        "Target": "/home/agent",
                        "TmpfsOptions": {"Mode": 0o1777, "SizeBytes": 64},
                    },
                    {
                        "Type": "tmpfs",
                        "Target": "/tmp",
                        "TmpfsOptions": {"Mode": 0o1777, "SizeBytes": 100},
                    },
                ],
                "ReadOnly": True,
                "Init": True,
                "CapabilityDrop": ["ALL"],
                "StopGracePeriod": 10_000_000_000,
                "Secrets": [
                    {
                        "File": {
                            "Name": "orchestrator-runner",
                            "UID": "1000",
                            "GID": "1001",
                            "Mode": 0o400,
                        },
                        "SecretID": "sid",
                        "SecretName": "sname",
                    }
                ],
                "Privileges": {"NoNewPrivileges": True},
            },
            "Resources": {"Limits": {"NanoCPUs": 6, "MemoryBytes": 5, "Pids": 7}},
            "RestartPolicy": {
                "Condition": "on-failure",
                "Delay": 1_000_000_000,
                "MaxAttempts": 3,
                "Window": 60_000_000_000,
            },
            "Placement": {"Constraints": ["node.labels.a==b"]},
            "Networks": [{"Target": "runners"}],
        },
        "mode": {"Replicated": {"Replicas": 0}},
        "endpoint_spec": {"Mode": "dnsrr"},
    }


def test_the_body_of_a_spec_with_other_settings() -> None:
    spec = make_spec(
        user="1000",
        labels={"org.orchestrator.group": "fam"},
        read_only_rootfs=False,
        init=False,
        cap_drop=("NET_RAW",),
    )
    container = service_body(spec, secret_id="i", secret="s", credential="c", api_version=(1, 44))[
        "task_template"
    ]["ContainerSpec"]
    # no group id given: the secret's file takes the user's id for its group
    assert container["Secrets"][0]["File"] == {
        "Name": "orchestrator-runner",
        "UID": "1000",
        "GID": "1000",
        "Mode": 0o400,
    }
    # no home, no project label: the task's labels say so
    assert container["Labels"] == {
        "org.orchestrator.container": "proj.fam",
        "org.orchestrator.swarm-home": "",
    }
    assert container["ReadOnly"] is False and container["Init"] is False
    assert container["CapabilityDrop"] == ["NET_RAW"]


@pytest.mark.parametrize(
    ("security_opt", "api", "privileged"),
    [
        (("no-new-privileges",), (1, 44), True),
        (("no-new-privileges",), (1, 45), True),
        (("no-new-privileges",), (2, 0), True),
        (("no-new-privileges",), (1, 43), False),
        ((), (1, 44), False),
    ],
)
def test_no_new_privileges_is_set_when_asked_and_the_engine_takes_it(
    security_opt: tuple[str, ...], api: tuple[int, int], privileged: bool
) -> None:
    container = service_body(
        make_spec(security_opt=security_opt),
        secret_id="i",
        secret="s",
        credential="c",
        api_version=api,
    )["task_template"]["ContainerSpec"]
    assert ("Privileges" in container) is privileged


@pytest.mark.parametrize(
    ("options", "tmpfs"),
    [
        ("size=100,mode=1777", {"Mode": 0o1777, "SizeBytes": 100}),
        ("mode=700", {"Mode": 0o700}),
        ("mode=700,uid=0", {"Mode": 0o700}),
        ("mode=700,uid=1000", {"Mode": 0o1777}),
        ("size=64m,mode=755", {"Mode": 0o755}),  # a size Swarm cannot take is left out
        ("", {"Mode": 0o1777}),
        ("noexec,size=8", {"Mode": 0o1777, "SizeBytes": 8}),
        # an option's value runs to the end of its part, "=" and all
        ("mode=700,uid=1=0", {"Mode": 0o1777}),
    ],
)
def test_a_tmpfs_takes_its_mode_and_a_size_in_bytes(options: str, tmpfs: dict[str, int]) -> None:
    mounts = service_body(
        make_spec(mounts=(), tmpfs={"/t": options}),
        secret_id="i",
        secret="s",
        credential="c",
        api_version=(1, 24),
    )["task_template"]["ContainerSpec"]["Mounts"]
    assert mounts == [{"Type": "tmpfs", "Target": "/t", "TmpfsOptions": tmpfs}]


# the engine's API version and timestamps


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("1.44", (1, 44)),
        ("2.3", (2, 3)),
        ("1.44.1", (1, 24)),
        ("v1.44", (1, 24)),
        ("", (1, 24)),
        (None, (1, 24)),
    ],
)
def test_the_api_version_is_two_numbers_or_the_oldest(
    text: str | None, version: tuple[int, int]
) -> None:
    assert api_version(text) == version


def unix(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-02T03:04:05Z", unix(2026, 1, 2, 3, 4, 5)),
        ("2026-01-02T03:04:05.123456789Z", unix(2026, 1, 2, 3, 4, 5, 123456)),
        ("2026-01-02T03:04:05.5Z", unix(2026, 1, 2, 3, 4, 5, 500000)),
        ("2026-01-02T03:04:05", unix(2026, 1, 2, 3, 4, 5)),
        ("0001-01-01T00:00:00Z", None),
        ("", None),
        (None, None),
        ("yesterday", None),
        ("2026-01-02T03:04:05.5X", None),
        ("2026-01-02T03:04:05XX.XX", None),
        # past the microseconds nothing is read (the engine's times are in UTC)
        ("2026-01-02T03:04:05.123456-07:00", unix(2026, 1, 2, 3, 4, 5, 123456)),
    ],
)
def test_engine_timestamps_are_unix_time_in_utc(value: str | None, expected: float | None) -> None:
    assert parse_time(value) == expected


def test_replicas_are_the_replicated_modes_count_or_none() -> None:
    assert replicas({"Spec": {"Mode": {"Replicated": {"Replicas": 2}}}}) == 2
    assert replicas({"Spec": {"Mode": {"Replicated": {"Replicas": "1"}}}}) == 1
    assert replicas({"Spec": {"Mode": {"Replicated": {}}}}) == 0
    assert replicas({"Spec": {"Mode": {}}}) == 0
    assert replicas({"Spec": {}}) == 0
    assert replicas({}) == 0


# the state of a service from its tasks

UP = {"Spec": {"Mode": {"Replicated": {"Replicas": 1}}}, "UpdatedAt": "2026-01-01T00:00:10Z"}


def task(desired: str, state: str, at: str, container: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"State": state, "Timestamp": at}
    if container is not None:
        status["ContainerStatus"] = {"ContainerID": container}
    return {"DesiredState": desired, "CreatedAt": at, "Status": status}


def test_an_idle_service_is_idle_whatever_its_tasks() -> None:
    down = {"Spec": {"Mode": {"Replicated": {"Replicas": 0}}}}
    running = task("running", "running", "2026-01-01T00:00:11Z", "c1")
    assert service_state(down, [running]) == ("idle", None, None)


def test_the_newest_running_task_gives_the_start_and_container() -> None:
    one = task("running", "running", "2026-01-01T00:00:11Z", "c1")
    two = task("ready", "running", "2026-01-01T00:00:12Z", "c2")
    stopping = task("shutdown", "running", "2026-01-01T00:00:13Z", "c3")
    assert service_state(UP, [one, two, stopping]) == (
        "running",
        unix(2026, 1, 1, 0, 0, 12),
        "c2",
    )
    assert service_state(UP, [two, one]) == ("running", unix(2026, 1, 1, 0, 0, 12), "c2")
    # a running task with no time is older than one with a time
    untimed = {"DesiredState": "running", "Status": {"State": "running"}}
    assert service_state(UP, [one, untimed])[2] == "c1"
    assert service_state(UP, [untimed, one])[2] == "c1"
    # no container yet reported: none
    bare = {"DesiredState": "running", "Status": {"State": "running"}}
    assert service_state(UP, [bare]) == ("running", None, None)


def test_a_task_on_its_way_is_starting() -> None:
    assert service_state(UP, [task("running", "preparing", "2026-01-01T00:00:11Z")]) == (
        "starting",
        None,
        None,
    )
    assert service_state(UP, [{"DesiredState": "ready"}]) == ("starting", None, None)


def test_a_service_whose_tasks_since_its_change_all_ended_has_exited() -> None:
    ended = task("shutdown", "failed", "2026-01-01T00:00:10Z")
    before = task("shutdown", "failed", "2026-01-01T00:00:09Z")
    assert service_state(UP, [ended]) == ("exited", None, None)  # made at the change
    assert service_state(UP, [before]) == ("starting", None, None)  # the scheduler not yet on it
    assert service_state(UP, []) == ("starting", None, None)
    # no time of change: every task counts as since
    assert service_state({"Spec": UP["Spec"]}, [before]) == ("exited", None, None)
    # a task with no time of its own counts as before a change
    at_one_second = {
        "Spec": UP["Spec"],
        "UpdatedAt": "1970-01-01T00:00:01Z",
    }
    assert service_state(at_one_second, [{"DesiredState": "shutdown"}]) == (
        "starting",
        None,
        None,
    )
    assert service_state(UP, [{"DesiredState": "shutdown"}]) == ("starting", None, None)
    assert service_state({"Spec": UP["Spec"]}, [{"DesiredState": "shutdown"}]) == (
        "exited",
        None,
        None,
    )


def test_task_problems_are_the_newest_five_with_their_errors_or_messages() -> None:
    tasks = [
        {"Slot": n, "CreatedAt": f"2026-01-01T00:00:0{n}Z", "Status": {"State": "failed"}}
        for n in range(1, 8)
    ]
    assert task_problems(tasks) == [f"task {n}: failed" for n in (7, 6, 5, 4, 3)]
    assert task_problems(tasks, limit=2) == ["task 7: failed", "task 6: failed"]
    assert task_problems(
        [
            {"Slot": 1, "Status": {"State": "failed", "Err": "exit 1", "Message": "m"}},
            {"CreatedAt": "2", "Status": {"State": "rejected", "Message": "no node"}},
            {"CreatedAt": "1"},
        ]
    ) == ["task ?: rejected (no node)", "task ?: ?", "task 1: failed: exit 1"]


def test_runner_addresses_are_those_of_running_and_ready_tasks_on_the_network() -> None:
    def attached(network: str, *found: str) -> dict[str, Any]:
        return {"Network": {"Spec": {"Name": network}}, "Addresses": list(found)}

    tasks: list[dict[str, Any]] = [
        {
            "DesiredState": "running",
            "NetworksAttachments": [
                attached("runners", "10.0.0.2/24", "10.0.0.3"),
                attached("other", "10.1.0.2/24"),
            ],
        },
        {"DesiredState": "shutdown", "NetworksAttachments": [attached("runners", "10.0.0.9")]},
        {
            "DesiredState": "running",
            "NetworksAttachments": [
                attached("other", "10.1.0.3/24"),
                attached("runners", "10.0.0.8/24"),
            ],
        },
        {"DesiredState": "ready", "NetworksAttachments": [attached("runners", "10.0.0.4/24")]},
        {"DesiredState": "shutdown", "NetworksAttachments": [attached("runners", "10.0.0.5/24")]},
        {"DesiredState": "running", "NetworksAttachments": None},
        {"DesiredState": "running"},
        {"DesiredState": "running", "NetworksAttachments": [{"Addresses": None}]},
        {"DesiredState": "running", "NetworksAttachments": [{"Network": {}, "Addresses": ["x"]}]},
        {
            "DesiredState": "running",
            "NetworksAttachments": [{"Network": {"Spec": {"Name": "runners"}}, "Addresses": None}],
        },
    ]
    assert runner_addresses(tasks, "runners") == frozenset(
        {"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.8"}
    )
