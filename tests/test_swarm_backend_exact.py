"""Exact behaviour of the Swarm backend (runtime/swarm/backend.py) against a recorded
fake of the engine's API (no engine): the swarm and runner-network checks, services
inspected, listed, made, scaled and removed, who the runner port admits, the listeners'
hosts, the logs and events of services, and the engine's facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError, NotFound

from orchestrator.config import load_config
from orchestrator.errors import EngineError, InvalidConfig
from orchestrator.home import Home
from orchestrator.runtime.base import BindMount, ContainerEvent, ContainerInfo, ContainerSpec
from orchestrator.runtime.swarm import addresses, backend
from orchestrator.runtime.swarm.backend import SwarmBackend
from orchestrator.runtime.swarm.credentials import Peer
from orchestrator.runtime.swarm.hub import HubEndpoint, RelayEndpoint
from orchestrator.runtime.swarm.service import service_name

HOME_ID = "0123456789abcdef"
NETWORK_OK = {
    "Driver": "overlay",
    "Internal": True,
    "IPAM": {"Config": [{"Subnet": "10.9.0.0/24"}, {"Gateway": "x"}]},
}


class Api:
    """The engine's low-level API as the backend calls it: answers set per test, every
    call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.api_version = "1.44"
        self.network: dict[str, Any] | Exception = NETWORK_OK
        self.services_by_name: dict[str, dict[str, Any]] = {}
        self.task_list: list[dict[str, Any]] = []
        self.secret_list: list[dict[str, Any]] = []
        self.remove_secret_errors: list[Exception] = []
        self.create_service_error: Exception | None = None
        self.remove_service_error: Exception | None = None
        self.log_lines: list[Any] = []

    def inspect_network(self, name: str) -> dict[str, Any]:
        self.calls.append(("inspect_network", name))
        if isinstance(self.network, Exception):
            raise self.network
        return self.network

    def inspect_service(self, name: str) -> dict[str, Any]:
        self.calls.append(("inspect_service", name))
        if name not in self.services_by_name:
            raise NotFound("no such service")
        return self.services_by_name[name]

    def tasks(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls.append(("tasks", filters))
        return self.task_list

    def services(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls.append(("services", filters))
        return list(self.services_by_name.values())

    def create_secret(self, name: str, data: bytes, labels: dict[str, str]) -> dict[str, Any]:
        self.calls.append(("create_secret", (name, labels)))
        self.secret_data = data
        return {"ID": "secret-id"}

    def create_service(self, **body: Any) -> None:
        self.calls.append(("create_service", body))
        if self.create_service_error is not None:
            raise self.create_service_error
        labels = body["labels"]
        self.services_by_name[body["name"]] = {
            "ID": "svc-id",
            "Version": {"Index": 1},
            "Spec": {
                "Name": body["name"],
                "Labels": labels,
                "TaskTemplate": body["task_template"],
                "Mode": body["mode"],
            },
        }

    def update_service(self, ident: str, version: int, **kw: Any) -> None:
        self.calls.append(("update_service", (ident, version, kw)))

    def remove_service(self, ident: str) -> None:
        self.calls.append(("remove_service", ident))
        if self.remove_service_error is not None:
            raise self.remove_service_error

    def secrets(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls.append(("secrets", filters))
        return self.secret_list

    def remove_secret(self, ident: str) -> None:
        self.calls.append(("remove_secret", ident))
        if self.remove_secret_errors:
            raise self.remove_secret_errors.pop(0)

    def service_logs(self, ident: str, **kw: Any) -> list[Any]:
        self.calls.append(("service_logs", (ident, kw)))
        return self.log_lines

    def named(self, call: str) -> list[Any]:
        return [args for name, args in self.calls if name == call]


class Client:
    def __init__(self) -> None:
        self.api = Api()
        self.swarm: dict[str, Any] | None = {
            "LocalNodeState": "active",
            "ControlAvailable": True,
            "NodeID": "node-1",
            "Managers": 1,
            "Nodes": 3,
        }
        self.info_calls = 0
        self.streams: list[list[dict[str, Any]] | Exception] = []
        self.event_calls: list[dict[str, Any]] = []

    def info(self) -> dict[str, Any]:
        self.info_calls += 1
        return {"Swarm": self.swarm} if self.swarm is not None else {}

    def events(self, **kw: Any) -> Any:
        self.event_calls.append(kw)
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        return iter(stream)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path)
    (home.state_dir).mkdir(parents=True, exist_ok=True)
    (home.state_dir / "home-id").write_text(HOME_ID + "\n")
    return home


def make(home: Home, text: str = "") -> tuple[SwarmBackend, Client]:
    (home.root / "orchestrator.yaml").write_text(
        "project: proj\nruntime:\n  backend: swarm\n  swarm:\n    network: runners\n"
        "    daemon: orch\n    port: 7070\n" + text
    )
    client = Client()
    return SwarmBackend(client, home, load_config(home)), client  # type: ignore[arg-type]


def spec(**kw: Any) -> ContainerSpec:
    args: dict[str, Any] = {
        "name": "proj.fam",
        "image": "agent:1",
        "command": ("serve",),
        "user": "1000:1000",
        "labels": {
            "org.orchestrator.group": "fam",
            "org.orchestrator.home": HOME_ID,
            "org.orchestrator.project": "proj",
            "org.orchestrator.config-hash": "h1",
        },
        "mounts": (BindMount("/srv/mem", "/mem", False),),
        "environment": {},
        "tmpfs": {},
        "working_dir": "/w",
        "hostname": "fam",
        "network_mode": "runners",
        "memory_bytes": 1,
        "nano_cpus": 1,
        "pids_limit": 1,
    }
    args.update(kw)
    return ContainerSpec(**args)


def a_service(
    replicas: int = 1, labels: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "ID": "svc-id",
        "Version": {"Index": 42},
        "UpdatedAt": "2026-01-01T00:00:10Z",
        "Spec": {
            "Name": service_name("proj.fam"),
            "Labels": {
                "org.orchestrator.container": "proj.fam",
                "org.orchestrator.group": "fam",
                "org.orchestrator.home": HOME_ID,
                "org.orchestrator.credential": "fp1",
            }
            if labels is None
            else labels,
            "TaskTemplate": {
                "ContainerSpec": {
                    "Image": "agent:1",
                    "Mounts": [
                        {"Type": "bind", "Source": "/srv/mem"},
                        {"Type": "tmpfs", "Target": "/tmp"},
                        {"Type": "bind"},
                    ],
                },
                "ForceUpdate": 2,
            },
            "Mode": {"Replicated": {"Replicas": replicas}},
            "EndpointSpec": {"Mode": "dnsrr"},
            "UpdateConfig": {"u": 1},
            "RollbackConfig": {"r": 1},
            **extra,
        },
    }


def running_task(address: str = "10.9.0.5/24", state: str = "running") -> dict[str, Any]:
    return {
        "ServiceID": "svc-id",
        "DesiredState": "running",
        "CreatedAt": "2026-01-01T00:00:11Z",
        "Status": {
            "State": state,
            "Timestamp": "2026-01-01T00:00:11Z",
            "ContainerStatus": {"ContainerID": "ctr-1"},
        },
        "NetworksAttachments": [
            {"Network": {"Spec": {"Name": "runners"}}, "Addresses": [address]},
        ],
    }


# opening and the swarm itself


def test_the_backend_is_opened_for_a_home_only(home: Home) -> None:
    config = load_config(home)
    with pytest.raises(EngineError) as raised:
        SwarmBackend.open(Client(), config, None)  # type: ignore[arg-type]
    assert raised.value.message == "the swarm backend is opened for a home (its runner CA is there)"
    opened = SwarmBackend.open(Client(), config, home)  # type: ignore[arg-type]
    assert opened.home is home and opened.config is config
    assert opened.authority.folder == home.state_dir / "swarm"
    assert opened.hub is None


def test_the_node_is_this_managers_id_asked_once(home: Home) -> None:
    swarm, client = make(home)
    assert swarm.node() == "node-1"
    assert swarm.node() == "node-1"
    assert client.info_calls == 1


@pytest.mark.parametrize(
    ("state", "shown"),
    [
        ({"LocalNodeState": "inactive", "ControlAvailable": True}, "inactive"),
        ({"LocalNodeState": "active", "ControlAvailable": False}, "active"),
        ({"LocalNodeState": "active"}, "active"),
        ({"LocalNodeState": ""}, "unknown"),
        (None, "unknown"),
    ],
)
def test_an_engine_not_managing_an_active_swarm_is_refused(
    home: Home, state: dict[str, Any] | None, shown: str
) -> None:
    swarm, client = make(home)
    client.swarm = state
    with pytest.raises(EngineError) as raised:
        swarm.node()
    assert raised.value.message == (
        "runtime.backend is swarm, but this engine is not a manager of an active swarm "
        f"(its state: {shown})"
    )
    assert raised.value.hint == (
        "run `docker swarm init` (or join this node as a manager), or set "
        "runtime.backend: docker in orchestrator.yaml"
    )


def test_the_runner_networks_subnets(home: Home) -> None:
    swarm, client = make(home)
    assert swarm.network_subnets() == addresses.networks(["10.9.0.0/24"])
    assert client.api.calls == [("inspect_network", "runners")]
    client.api.network = {"Driver": "overlay", "Internal": True, "IPAM": None}
    assert swarm.network_subnets() == []
    client.api.network = {"Driver": "overlay", "Internal": True, "IPAM": {"Config": None}}
    assert swarm.network_subnets() == []


def test_a_missing_runner_network_is_named_with_how_to_make_it(home: Home) -> None:
    swarm, client = make(home)
    client.api.network = NotFound("gone")
    with pytest.raises(InvalidConfig) as raised:
        swarm.network_subnets()
    assert raised.value.message == "runtime.swarm.network: no network 'runners' on this engine"
    assert raised.value.hint == (
        "create it: docker network create -d overlay --internal --attachable runners "
        "(stack.yaml makes it)"
    )


@pytest.mark.parametrize(
    ("network", "said"),
    [
        ({"Driver": "bridge", "Internal": True}, "driver bridge, internal True"),
        ({"Driver": "overlay", "Internal": False}, "driver overlay, internal False"),
        ({"Driver": "overlay"}, "driver overlay, internal None"),
    ],
)
def test_a_runner_network_with_a_route_out_is_refused(
    home: Home, network: dict[str, Any], said: str
) -> None:
    swarm, client = make(home)
    client.api.network = network
    with pytest.raises(InvalidConfig) as raised:
        swarm.network_subnets()
    assert raised.value.message == (
        f"runtime.swarm.network: 'runners' is not an internal overlay network ({said}): "
        "groups on it would have a route out"
    )
    assert raised.value.hint == (
        "use a network made with: docker network create -d overlay --internal --attachable runners"
    )


def test_adapt_places_a_gated_group_on_the_daemons_node(home: Home) -> None:
    swarm, _ = make(home)
    gated = spec(
        network_mode="none",
        mounts=(BindMount("/e", "/run/orchestrator-egress", True),),
    )
    assert swarm.adapt(gated).placement == ("node.id==node-1",)


# services inspected and listed


def test_inspect_reads_the_service_and_its_tasks(home: Home) -> None:
    swarm, client = make(home)
    assert swarm.inspect("proj.fam") is None
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    client.api.task_list = [running_task()]
    info = swarm.inspect("proj.fam")
    assert info == ContainerInfo(
        name="proj.fam",
        id="ctr-1",
        state="running",
        labels=a_service()["Spec"]["Labels"],
        started_at=info.started_at if info else None,
        image="agent:1",
        mounts=("/srv/mem", ""),
    )
    assert info is not None and info.started_at is not None
    assert client.api.named("tasks") == [{"service": ["svc-id"]}]


def test_a_service_with_no_task_is_known_by_its_id_and_name(home: Home) -> None:
    swarm, client = make(home)
    bare = {"ID": "svc-9", "Spec": {"Name": "n", "Mode": {"Replicated": {"Replicas": 0}}}}
    client.api.services_by_name[service_name("x")] = bare
    assert swarm.inspect("x") == ContainerInfo(
        name="n", id="svc-9", state="idle", labels={}, started_at=None, image="", mounts=()
    )
    client.api.services_by_name[service_name("x")] = {"ID": "svc-9", "Spec": {"Labels": None}}
    info = swarm.inspect("x")
    assert info is not None and (info.name, info.image, info.labels) == ("", "", {})


def test_list_filters_by_label_and_gives_each_service_its_tasks(home: Home) -> None:
    swarm, client = make(home)
    one = a_service()
    two = a_service(replicas=1, labels={"org.orchestrator.container": "proj.two"})
    two["ID"] = "svc-2"
    client.api.services_by_name = {"a": one, "b": two}
    other = running_task()
    other["ServiceID"] = "svc-2"
    other["Status"]["ContainerStatus"]["ContainerID"] = "ctr-2"
    client.api.task_list = [running_task(), other]
    found = swarm.list({"org.orchestrator.home": HOME_ID, "org.orchestrator.group": None})
    assert [(i.name, i.id, i.state) for i in found] == [
        ("proj.fam", "ctr-1", "running"),
        ("proj.two", "ctr-2", "running"),
    ]
    assert client.api.named("services") == [
        {"label": [f"org.orchestrator.home={HOME_ID}", "org.orchestrator.group"]}
    ]
    assert client.api.named("tasks") == [{"service": ["svc-id", "svc-2"]}]


def test_list_of_no_service_asks_for_no_tasks(home: Home) -> None:
    swarm, client = make(home)
    assert swarm.list({}) == []
    assert client.api.named("tasks") == []
    # a task of no known service is nobody's
    client.api.services_by_name = {"a": a_service()}
    orphan = running_task()
    orphan["ServiceID"] = "elsewhere"
    client.api.task_list = [orphan]
    assert [(i.state, i.id) for i in swarm.list({})] == [("starting", "svc-id")]


# making a service


def test_create_makes_a_secret_and_the_service_scaled_to_zero(home: Home) -> None:
    swarm, client = make(home)
    swarm._facts["fam"] = (("old", frozenset()), 0.0)
    info = swarm.create(spec())
    ((secret, labels),) = client.api.named("create_secret")
    fingerprint = client.api.named("create_service")[0]["labels"]["org.orchestrator.credential"]
    assert secret == f"{service_name('proj.fam')}_{fingerprint[:12]}"
    assert labels == {
        "org.orchestrator.container": "proj.fam",
        "org.orchestrator.group": "fam",
        "org.orchestrator.home": HOME_ID,
        "org.orchestrator.project": "proj",
    }
    assert b"PRIVATE KEY" in client.api.secret_data
    (body,) = client.api.named("create_service")
    container = body["task_template"]["ContainerSpec"]
    assert container["Secrets"][0]["SecretID"] == "secret-id"
    assert container["Secrets"][0]["SecretName"] == secret
    assert container["Privileges"] == {"NoNewPrivileges": True}  # the engine's API is 1.44
    assert body["mode"] == {"Replicated": {"Replicas": 0}}
    assert "fam" not in swarm._facts  # the new credential is asked for at the next connection
    assert info.name == "proj.fam" and info.state == "idle"


def test_create_on_an_older_engine_leaves_out_what_it_cannot_take(home: Home) -> None:
    swarm, client = make(home)
    client.api.api_version = "1.41"
    swarm.create(spec(labels={"org.orchestrator.home": HOME_ID}))
    (body,) = client.api.named("create_service")
    assert "Privileges" not in body["task_template"]["ContainerSpec"]
    ((_, labels),) = client.api.named("create_secret")
    assert labels == {"org.orchestrator.container": "proj.fam", "org.orchestrator.home": HOME_ID}


def test_a_failed_create_removes_the_secrets_it_left(home: Home) -> None:
    swarm, client = make(home)
    client.api.create_service_error = APIError("refused")
    client.api.secret_list = [{"ID": "s1"}]
    with pytest.raises(EngineError, match="engine refused create service"):
        swarm.create(spec())
    assert client.api.named("secrets") == [
        {"label": ["org.orchestrator.container=proj.fam", f"org.orchestrator.home={HOME_ID}"]}
    ]
    assert client.api.named("remove_secret") == ["s1"]


def test_a_service_vanished_once_made_is_an_engine_error(home: Home) -> None:
    swarm, client = make(home)

    def vanish(**body: Any) -> None:
        client.api.calls.append(("create_service", body))

    client.api.create_service = vanish  # type: ignore[method-assign]
    with pytest.raises(EngineError) as raised:
        swarm.create(spec())
    assert raised.value.message == f"service {service_name('proj.fam')} vanished once made"


# scaling


def test_start_scales_an_idle_service_to_one_keeping_its_spec(home: Home) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service(replicas=0)
    swarm.start("proj.fam")
    ((ident, version, kw),) = client.api.named("update_service")
    spec = a_service()["Spec"]
    assert (ident, version) == ("svc-id", 42)
    assert kw == {
        "task_template": spec["TaskTemplate"],
        "name": spec["Name"],
        "labels": spec["Labels"],
        "mode": {"Replicated": {"Replicas": 1}},
        "endpoint_spec": {"Mode": "dnsrr"},
        "update_config": {"u": 1},
        "rollback_config": {"r": 1},
    }


def test_start_leaves_a_running_or_starting_service_alone(home: Home) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    client.api.task_list = [running_task()]
    swarm.start("proj.fam")
    client.api.task_list = [running_task(state="preparing")]
    swarm.start("proj.fam")
    assert client.api.named("update_service") == []


def test_start_makes_the_task_of_an_exited_service_again(home: Home) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    ended = running_task(state="failed")
    ended["DesiredState"] = "shutdown"
    client.api.task_list = [ended]
    swarm.start("proj.fam")
    ((_, _, kw),) = client.api.named("update_service")
    assert kw["task_template"]["ForceUpdate"] == 3
    assert kw["mode"] == {"Replicated": {"Replicas": 1}}
    # the service's own record is not changed
    assert (
        client.api.services_by_name[service_name("proj.fam")]["Spec"]["TaskTemplate"]["ForceUpdate"]
        == 2
    )


def test_a_first_forced_update_counts_from_zero(home: Home) -> None:
    swarm, client = make(home)
    service = a_service()
    del service["Spec"]["TaskTemplate"]["ForceUpdate"]
    client.api.services_by_name[service_name("proj.fam")] = service
    swarm._scale("proj.fam", 1, force=True)
    ((_, _, kw),) = client.api.named("update_service")
    assert kw["task_template"]["ForceUpdate"] == 1


def test_starting_a_missing_service_says_it_is_made_at_the_next_start(home: Home) -> None:
    swarm, _ = make(home)
    with pytest.raises(EngineError) as raised:
        swarm.start("proj.fam")
    assert raised.value.message == "no service for proj.fam"
    assert raised.value.hint == "it is made at the next start"


def test_stop_scales_to_zero_and_waits_for_no_running_task(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    answers = [[running_task()], [running_task()], [running_task(state="shutdown"), {}]]
    sleeps: list[float] = []
    monkeypatch.setattr(backend.time, "sleep", sleeps.append)
    client.api.tasks = lambda filters: answers.pop(0)  # type: ignore[method-assign]
    swarm.stop("proj.fam")
    ((_, _, kw),) = client.api.named("update_service")
    assert kw["mode"] == {"Replicated": {"Replicas": 0}}
    assert kw["task_template"] == a_service()["Spec"]["TaskTemplate"]  # not made again
    assert sleeps == [0.1, 0.1]
    assert answers == []


def test_stop_of_an_idle_service_does_not_scale_it(home: Home) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service(replicas=0)
    swarm.stop("proj.fam")
    assert client.api.named("update_service") == []
    assert client.api.named("tasks") == [{"service": ["svc-id"]}]
    swarm.stop("proj.other")  # none: nothing to do
    assert len(client.api.named("tasks")) == 1


def test_stop_gives_up_after_its_timeout_and_five_seconds(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service(replicas=0)
    client.api.task_list = [running_task()]
    now = [1000.0]
    monkeypatch.setattr(backend.time, "monotonic", lambda: now[0])

    def sleep(seconds: float) -> None:
        now[0] += 1.0

    monkeypatch.setattr(backend.time, "sleep", sleep)
    swarm.stop("proj.fam", timeout=3)
    assert len(client.api.named("tasks")) == 8  # at 1000 .. 1007, not at 1008
    now[0] = 1000.0
    swarm.stop("proj.fam")
    assert len(client.api.named("tasks")) == 8 + 15


# removing


def test_remove_takes_the_service_its_secrets_and_what_was_known_of_it(home: Home) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    client.api.secret_list = [{"ID": "s1"}, {"ID": "s2"}]
    swarm._facts["fam"] = (None, 0.0)
    swarm._facts["other"] = (None, 0.0)
    swarm.remove("proj.fam")
    assert client.api.named("remove_service") == ["svc-id"]
    assert client.api.named("secrets") == [
        {"label": ["org.orchestrator.container=proj.fam", f"org.orchestrator.home={HOME_ID}"]}
    ]
    assert client.api.named("remove_secret") == ["s1", "s2"]
    assert set(swarm._facts) == {"other"}


def test_remove_of_a_missing_service_still_removes_its_secrets(home: Home) -> None:
    swarm, client = make(home)
    client.api.secret_list = [{"ID": "s1"}]
    swarm.remove("proj.fam")
    assert client.api.named("remove_service") == []
    assert client.api.named("remove_secret") == ["s1"]
    # gone meanwhile, or with no group label: no error
    client.api.services_by_name[service_name("proj.fam")] = a_service(labels={})
    client.api.remove_service_error = NotFound("gone")
    swarm._facts["fam"] = (None, 0.0)
    swarm.remove("proj.fam")
    assert "fam" in swarm._facts


def test_a_secret_in_use_is_tried_again_until_it_can_be_removed(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    sleeps: list[float] = []
    monkeypatch.setattr(backend.time, "sleep", sleeps.append)
    client.api.secret_list = [{"ID": "s1"}, {"ID": "s2"}]
    client.api.remove_secret_errors = [APIError("in use"), APIError("in use"), NotFound("gone")]
    swarm._remove_secrets("proj.fam")
    # s1: refused twice, then gone; s2: removed at once
    assert client.api.named("remove_secret") == ["s1", "s1", "s1", "s2"]
    assert sleeps == [0.1, 0.1]


def test_a_secret_always_in_use_is_tried_fifty_times(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    monkeypatch.setattr(backend.time, "sleep", lambda seconds: None)
    client.api.secret_list = [{"ID": "s1"}]
    client.api.remove_secret_errors = [APIError("in use") for _ in range(60)]
    swarm._remove_secrets("proj.fam")
    assert client.api.named("remove_secret") == ["s1"] * 50


# who the runner port admits


def peer(fingerprint: str = "fp1", group: str = "fam") -> Peer:
    return Peer(group=group, home=HOME_ID, fingerprint=fingerprint)


def test_the_groups_runner_from_its_own_task_is_admitted(home: Home) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    client.api.task_list = [running_task("10.9.0.5/24")]
    assert swarm.admit(peer(), "10.9.0.5") is None
    assert client.api.named("inspect_service") == [service_name("proj.fam")]
    assert client.api.named("tasks") == [{"service": ["svc-id"]}]


def test_a_group_with_no_service_of_this_home_is_refused(home: Home) -> None:
    swarm, client = make(home)
    assert swarm.admit(peer(), "10.9.0.5") == "group 'fam' has no service here"
    labels = dict(a_service()["Spec"]["Labels"], **{"org.orchestrator.home": "f" * 16})
    client.api.services_by_name[service_name("proj.fam")] = a_service(labels=labels)
    swarm._facts.clear()
    assert swarm.admit(peer(), "10.9.0.5") == "group 'fam' has no service here"
    labels = dict(a_service()["Spec"]["Labels"])
    del labels["org.orchestrator.credential"]
    client.api.services_by_name[service_name("proj.fam")] = a_service(labels=labels)
    swarm._facts.clear()
    assert swarm.admit(peer(), "10.9.0.5") == "group 'fam' has no service here"
    client.api.services_by_name[service_name("proj.fam")] = a_service(labels=None)
    client.api.services_by_name[service_name("proj.fam")]["Spec"]["Labels"] = None
    swarm._facts.clear()
    assert swarm.admit(peer(), "10.9.0.5") == "group 'fam' has no service here"
    assert client.api.named("tasks") == []


def test_another_credential_or_another_address_is_refused(home: Home) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    client.api.task_list = [running_task("10.9.0.5/24"), running_task("10.9.0.4/24")]
    assert swarm.admit(peer("fp0"), "10.9.0.5") == (
        "not the credential group 'fam' was given (forged or stale)"
    )
    assert swarm.admit(peer(), "10.9.0.7") == (
        "group 'fam''s credential from 10.9.0.7, not from its own task (10.9.0.4, 10.9.0.5)"
    )
    client.api.task_list = []
    swarm._facts.clear()
    assert swarm.admit(peer(), "10.9.0.7") == (
        "group 'fam''s credential from 10.9.0.7, not from its own task (none running)"
    )


def test_what_the_engine_said_is_believed_for_a_while_and_asked_again_on_a_mismatch(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    now = [100.0]
    monkeypatch.setattr(backend.time, "monotonic", lambda: now[0])
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    client.api.task_list = [running_task("10.9.0.5/24")]
    assert swarm.admit(peer(), "10.9.0.5") is None
    asked = len(client.api.named("inspect_service"))
    now[0] += 29.9  # believed RUNNER_FACTS_SECONDS
    assert swarm.admit(peer(), "10.9.0.5") is None
    assert len(client.api.named("inspect_service")) == asked
    now[0] += 0.2
    assert swarm.admit(peer(), "10.9.0.5") is None
    assert len(client.api.named("inspect_service")) == asked + 1
    # a task made again: its new address is asked for, at most every RUNNER_RECHECK_SECONDS
    client.api.task_list = [running_task("10.9.0.6/24")]
    now[0] += 0.4
    assert swarm.admit(peer(), "10.9.0.6") is not None
    assert len(client.api.named("inspect_service")) == asked + 1
    now[0] += 0.1
    assert swarm.admit(peer(), "10.9.0.6") is None
    assert len(client.api.named("inspect_service")) == asked + 2
    # a stale fingerprint is asked again too
    now[0] += 1.0
    assert swarm.admit(peer("fp0"), "10.9.0.6") is not None
    assert len(client.api.named("inspect_service")) == asked + 3


def test_no_service_is_remembered_as_none(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    swarm, client = make(home)
    monkeypatch.setattr(backend.time, "monotonic", lambda: 5.0)
    assert swarm._runner_facts("fam", fresh=False) is None
    assert swarm._facts == {"fam": (None, 5.0)}
    assert swarm._runner_facts("fam", fresh=False) is None
    assert len(client.api.named("inspect_service")) == 1


def test_runner_endpoints_are_the_hub_or_the_relay(home: Home) -> None:
    swarm, _ = make(home)
    relayed = swarm.runner_endpoint(Path("/x/run/fam"))
    assert relayed == RelayEndpoint(home.state_dir / "swarm" / "runners.sock", "fam")
    hub: Any = object()
    swarm.hub = hub
    assert swarm.runner_endpoint(Path("/x/run/fam")) == HubEndpoint(hub, "fam")


# serving and listening


def test_serve_refuses_a_daemon_off_the_runner_network(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, _ = make(home)
    monkeypatch.setattr(addresses, "local_addresses", lambda: ["127.0.0.1", "10.8.0.2"])
    with pytest.raises(InvalidConfig) as raised:
        swarm.serve(lambda: "img")
    assert raised.value.message == (
        "the daemon is not attached to the runner network 'runners': its groups' runners "
        "could not reach it"
    )
    assert raised.value.hint == (
        "run the daemon as a service of the swarm on that network (stack.yaml), or attach "
        "its container: docker network connect NETWORK CONTAINER"
    )


def test_serve_refuses_storage_not_seen_alike(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.runtime.swarm import storage

    swarm, _ = make(home)
    monkeypatch.setattr(addresses, "local_addresses", lambda: ["10.9.0.2"])
    checked: list[tuple[Any, str]] = []

    def check(backend: Any, image: str) -> list[str]:
        checked.append((backend, image))
        return ["node a sees x", "node b sees y"]

    monkeypatch.setattr(storage, "check_storage", check)
    with pytest.raises(InvalidConfig) as raised:
        swarm.serve(lambda: "img:1")
    assert checked == [(swarm, "img:1")]
    assert raised.value.message == (
        "the groups' storage is not the same on every node that may run them: "
        "node a sees x; node b sees y"
    )
    assert raised.value.hint == (
        "mount the home at the same path on every node (NFS, CephFS), or pin the groups "
        "to the nodes that have it (runtime.swarm.constraints)"
    )
    assert swarm.hub is None


def test_serve_opens_the_runner_port_on_its_runner_network_addresses(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runtime.swarm import storage

    swarm, _ = make(home)
    monkeypatch.setattr(addresses, "local_addresses", lambda: ["127.0.0.1", "10.9.0.2"])
    monkeypatch.setattr(storage, "check_storage", lambda backend, image: [])
    made: list[Any] = []

    class Hub:
        def __init__(self, authority: Any, admit: Any, **kw: Any) -> None:
            made.append((authority, admit, kw))
            self.started = False
            self.closed = 0

        def start(self) -> None:
            self.started = True

        def close(self) -> None:
            self.closed += 1

    monkeypatch.setattr(backend, "RunnerHub", Hub)
    swarm.serve(lambda: "img")
    ((authority, admit, kw),) = made
    assert authority is swarm.authority and admit == swarm.admit
    assert kw == {
        "server_name": "orch",
        "hosts": ["10.9.0.2"],
        "port": 7070,
        "relay_dir": home.state_dir / "swarm",
    }
    hub = swarm.hub
    assert isinstance(hub, Hub) and hub.started
    swarm.close()
    assert hub.closed == 1 and swarm.hub is None
    swarm.close()
    assert hub.closed == 1


@pytest.mark.parametrize(
    ("host", "hosts"),
    [
        ("0.0.0.0", ("127.0.0.1", "10.8.0.2")),
        ("", ("127.0.0.1", "10.8.0.2")),
        ("::", ("127.0.0.1", "10.8.0.2", "::1")),
        ("10.8.0.2", ("10.8.0.2",)),
        ("localhost", ("localhost",)),
    ],
)
def test_the_listeners_keep_off_the_runner_network(
    home: Home, monkeypatch: pytest.MonkeyPatch, host: str, hosts: tuple[str, ...]
) -> None:
    swarm, _ = make(home)
    monkeypatch.setattr(
        addresses, "local_addresses", lambda: ["127.0.0.1", "10.9.0.2", "10.8.0.2", "::1"]
    )
    assert swarm.listen_hosts(host) == hosts


def test_a_listener_on_the_runner_network_is_refused(home: Home) -> None:
    swarm, _ = make(home)
    with pytest.raises(InvalidConfig) as raised:
        swarm.listen_hosts("10.9.0.3")
    assert raised.value.message == (
        "10.9.0.3 is on the runner network 'runners': the groups' containers would reach "
        "that listener"
    )
    assert raised.value.hint == "listen on another address, or on 0.0.0.0 (every address but those)"


# logs and events


def test_logs_are_the_services_lines_after_why_no_task_runs(home: Home) -> None:
    swarm, client = make(home)
    assert list(swarm.logs("proj.fam")) == []
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    failed = running_task(state="failed")
    failed["Status"]["Err"] = "exit 1"
    failed["Slot"] = 1
    client.api.task_list = [failed, {"Slot": 2, "CreatedAt": "0"}]
    client.api.log_lines = [b"one\ntwo\n", "three", b"\xff"]
    assert list(swarm.logs("proj.fam", tail=5)) == [
        "task 1: failed: exit 1",
        "task 2: ?",
        "one",
        "two",
        "three",
        "\ufffd",
    ]
    assert client.api.named("tasks") == [{"service": ["svc-id"]}]
    ((ident, kw),) = client.api.named("service_logs")
    assert ident == "svc-id"
    assert kw == {"stdout": True, "stderr": True, "follow": False, "tail": "5"}
    client.api.task_list = [running_task()]
    assert list(swarm.logs("proj.fam", follow=True)) == ["one", "two", "three", "\ufffd"]
    assert client.api.named("service_logs")[1][1] == {
        "stdout": True,
        "stderr": True,
        "follow": True,
        "tail": "all",
    }


def test_events_are_the_task_containers_with_the_homes_label_given_back(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    monkeypatch.setattr(backend.time, "time", lambda: 1000.5)
    client.streams = [
        [
            {
                "Action": "die",
                "timeNano": 1_001_000_000_000,
                "Actor": {
                    "Attributes": {
                        "org.orchestrator.container": "proj.fam",
                        "org.orchestrator.swarm-home": HOME_ID,
                        "org.orchestrator.project": "proj",
                        "image": "agent:1",
                    }
                },
            },
            {"status": "start", "time": 1002},
            {"time": 999},
            {},
        ],
        [],
    ]
    events = swarm.events({"org.orchestrator.home": HOME_ID, "org.orchestrator.project": "proj"})
    got = [next(events) for _ in range(6)]
    assert got == [
        ContainerEvent(
            "die",
            "proj.fam",
            {
                "org.orchestrator.container": "proj.fam",
                "org.orchestrator.home": HOME_ID,
                "org.orchestrator.project": "proj",
            },
            1001.0,
        ),
        ContainerEvent("start", None, {}, 1002.0),
        ContainerEvent("", None, {}, 999.0),
        ContainerEvent("", None, {}, 0.0),
        ContainerEvent("resync", None, {}, 1000.5),
        ContainerEvent("resync", None, {}, 1000.5),
    ]
    filters = {
        "type": "container",
        "label": [f"org.orchestrator.swarm-home={HOME_ID}", "org.orchestrator.project=proj"],
    }
    assert client.event_calls == [
        {"decode": True, "filters": filters, "since": 1000},
        {"decode": True, "filters": filters, "since": 1002},
    ]


def test_events_wait_out_an_engine_away_and_raise_anything_else(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    sleeps: list[float] = []
    monkeypatch.setattr(backend.time, "sleep", sleeps.append)
    monkeypatch.setattr(backend.time, "time", lambda: 7.0)
    client.streams = [ConnectionError("away"), ValueError("bad")]
    events = swarm.events({})
    assert next(events) == ContainerEvent("resync", None, {}, 7.0)
    assert sleeps == [1.0]
    with pytest.raises(ValueError, match="bad"):
        next(events)


# memory and the engine's facts


def test_memory_is_read_for_a_running_task_only(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    assert swarm.memory_usage("proj.fam") is None
    client.api.services_by_name[service_name("proj.fam")] = a_service(replicas=0)
    assert swarm.memory_usage("proj.fam") is None
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    client.api.task_list = [running_task()]
    read: list[str] = []

    def cgroup(ident: str) -> int | None:
        read.append(ident)
        return 123 if ident == "ctr-1" else None

    monkeypatch.setattr(backend, "cgroup_memory", cgroup)
    assert swarm.memory_usage("proj.fam") == 123
    monkeypatch.setattr(backend, "cgroup_memory", lambda ident: None)
    monkeypatch.setattr(swarm.local, "memory_usage", lambda ident: 7 if ident == "ctr-1" else 0)
    assert swarm.memory_usage("proj.fam") == 7
    running = ContainerInfo("a", "ctr-1", "running")
    idle = ContainerInfo("b", "svc-2", "idle")
    monkeypatch.setattr(backend, "cgroup_memory", lambda ident: 5)
    assert swarm.memory_usages([running, idle], 0.0) == {"a": 5, "b": None}


def test_a_one_off_container_runs_here_unplaced(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, _ = make(home)
    ran: list[Any] = []
    monkeypatch.setattr(swarm.local, "run_once", lambda s, t: ran.append((s, t)) or (0, "ok"))
    assert swarm.run_once(spec(placement=("a==b",)), 9.0) == (0, "ok")
    assert ran == [(spec(), 9.0)]


def test_the_engine_facts_add_the_swarms(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    swarm, client = make(home)
    monkeypatch.setattr(swarm.local, "engine_facts", lambda: {"version": "27"})
    assert swarm.engine_facts() == {
        "version": "27",
        "swarm": "active",
        "node": "node-1",
        "managers": 1,
        "nodes": 3,
    }
    client.swarm = None
    assert swarm.engine_facts() == {
        "version": "27",
        "swarm": None,
        "node": None,
        "managers": None,
        "nodes": None,
    }


def test_the_local_backend_is_on_the_same_engine(home: Home) -> None:
    swarm, client = make(home)
    assert swarm.local.client is client
    assert swarm.api is client.api


def test_a_service_with_no_spec_or_id_is_read_as_empty(home: Home) -> None:
    swarm, _ = make(home)
    assert swarm._info({}, []) == ContainerInfo(
        name="", id="", state="idle", labels={}, started_at=None, image="", mounts=()
    )


def refusing(*args: Any, **kw: Any) -> Any:
    raise APIError("no")


@pytest.mark.parametrize(
    ("method", "what", "call"),
    [
        ("info", "engine info", lambda swarm: swarm.node()),
        ("inspect_network", "inspect network runners", lambda swarm: swarm.network_subnets()),
        (
            "inspect_service",
            f"inspect service {service_name('proj.fam')}",
            lambda swarm: swarm.inspect("proj.fam"),
        ),
        ("tasks", "list tasks", lambda swarm: swarm.inspect("proj.fam")),
        ("services", "list services", lambda swarm: swarm.list({})),
        ("create_secret", "create secret ", lambda swarm: swarm.create(spec())),
        (
            "update_service",
            f"scale {service_name('proj.fam')} to 0",
            lambda swarm: swarm.stop("proj.fam"),
        ),
        (
            "remove_service",
            f"remove service {service_name('proj.fam')}",
            lambda swarm: swarm.remove("proj.fam"),
        ),
        ("secrets", "list secrets", lambda swarm: swarm._remove_secrets("proj.fam")),
        ("service_logs", "logs proj.fam", lambda swarm: list(swarm.logs("proj.fam"))),
    ],
)
def test_an_engine_call_refused_is_named(
    home: Home, monkeypatch: pytest.MonkeyPatch, method: str, what: str, call: Any
) -> None:
    swarm, client = make(home)
    client.api.services_by_name[service_name("proj.fam")] = a_service()
    monkeypatch.setattr(client if method == "info" else client.api, method, refusing)
    with pytest.raises(EngineError) as raised:
        call(swarm)
    assert raised.value.message.startswith(f"engine refused {what}")


def test_a_secret_removal_retried_by_the_engine_call_is_named(
    home: Home, caplog: pytest.LogCaptureFixture
) -> None:
    swarm, client = make(home)
    client.api.secret_list = [{"ID": "s1"}]
    client.api.remove_secret_errors = [ConnectionError("away")]
    with caplog.at_level("WARNING", logger="orchestrator.runtime.engine"):
        swarm._remove_secrets("proj.fam")
    assert client.api.named("remove_secret") == ["s1", "s1"]
    assert caplog.messages[0].startswith("engine call remove secret s1 failed (away)")


def test_the_swarms_engine_info_refused_is_named(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    swarm, client = make(home)
    monkeypatch.setattr(swarm.local, "engine_facts", lambda: {})
    monkeypatch.setattr(client, "info", refusing)
    with pytest.raises(EngineError) as raised:
        swarm.engine_facts()
    assert raised.value.message.startswith("engine refused engine info")
