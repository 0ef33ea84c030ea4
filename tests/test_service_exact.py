"""Exact behaviour of the parts of the daemon's service that other processes use without
an engine: the client of a running daemon (service/client.py) against a fake of the
wire layer, and doctor's Swarm checks (service/swarmcheck.py) against a fake backend."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.errors import DaemonNotRunning, OrchestratorError
from orchestrator.home import Home
from orchestrator.service import client, swarmcheck
from orchestrator.service.doctor import Check

# client: the facts the daemon wrote


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    monkeypatch.delenv("ORCHESTRATOR_STATE_DIR", raising=False)
    home = Home(tmp_path)
    home.state_dir.mkdir(parents=True)
    return home


def hold_lock(monkeypatch: pytest.MonkeyPatch, pid: int | None) -> None:
    """The lock of the home at tmp_path held by ``pid`` (None: by no process)."""

    def lock_holder(home: Home) -> int | None:
        assert isinstance(home, Home), "the home is asked about"
        return pid

    monkeypatch.setattr(client, "lock_holder", lock_holder)


def test_no_facts_when_no_daemon_holds_the_lock(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home.state_dir / "daemon.json").write_text(json.dumps({"pid": 42, "port": 1}))
    hold_lock(monkeypatch, None)
    assert client.daemon_facts(home) is None


def test_the_facts_of_the_daemon_that_holds_the_lock(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home.state_dir / "daemon.json").write_text(json.dumps({"pid": 42, "port": 1}))
    hold_lock(monkeypatch, 42)
    assert client.daemon_facts(home) == {"pid": 42, "port": 1}


def test_facts_of_another_process_give_only_the_holders_pid(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home.state_dir / "daemon.json").write_text(json.dumps({"pid": 41, "port": 1}))
    hold_lock(monkeypatch, 42)
    assert client.daemon_facts(home) == {"pid": 42}


@pytest.mark.parametrize("text", ["{not json", "\xff"])
def test_unreadable_facts_give_only_the_holders_pid(
    home: Home, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    (home.state_dir / "daemon.json").write_text(text, encoding="latin-1")
    hold_lock(monkeypatch, 42)
    assert client.daemon_facts(home) == {"pid": 42}


def test_missing_facts_give_only_the_holders_pid(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold_lock(monkeypatch, 42)
    assert client.daemon_facts(home) == {"pid": 42}


# client: one request


class FakeRequest:
    """wire.request's stand-in: records each call, answers or raises as told."""

    def __init__(self, answer: dict[str, Any] | BaseException) -> None:
        self.answer = answer
        self.calls: list[tuple[Path, dict[str, Any], float]] = []

    def __call__(self, path: Path, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.calls.append((path, message, timeout))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def fake_request(
    monkeypatch: pytest.MonkeyPatch, answer: dict[str, Any] | BaseException
) -> FakeRequest:
    fake = FakeRequest(answer)
    monkeypatch.setattr(wire, "request", fake)
    return fake


def test_a_request_goes_to_the_control_socket_with_the_default_timeout(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_request(monkeypatch, {"ok": True, "n": 3})
    assert client.control_request(home, {"op": "status"}) == {"ok": True, "n": 3}
    assert fake.calls == [(home.state_dir / "orchestrator.sock", {"op": "status"}, 330.0)]


def test_a_request_passes_its_timeout(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_request(monkeypatch, {"ok": True})
    client.control_request(home, {"op": "x"}, timeout=7.5)
    assert fake.calls[0][2] == 7.5


def test_no_peer_is_a_daemon_not_running(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_request(monkeypatch, wire.NoPeer(2, "nothing listens"))
    with pytest.raises(DaemonNotRunning) as caught:
        client.control_request(home, {"op": "x"})
    path = home.state_dir / "orchestrator.sock"
    assert caught.value.message == f"no orchestrator daemon answers at {path}"
    assert caught.value.hint == "start it with: orchestrator up"
    assert caught.value.__suppress_context__


@pytest.mark.parametrize(
    "fault", [OSError("broken pipe"), TimeoutError("timed out"), wire.ProtocolError("bad frame")]
)
def test_a_failed_answer_is_an_error_naming_the_socket_and_the_fault(
    home: Home, monkeypatch: pytest.MonkeyPatch, fault: Exception
) -> None:
    fake_request(monkeypatch, fault)
    with pytest.raises(OrchestratorError) as caught:
        client.control_request(home, {"op": "x"})
    path = home.state_dir / "orchestrator.sock"
    assert type(caught.value) is OrchestratorError
    assert caught.value.message == f"the daemon at {path} failed to answer: {fault}"
    assert caught.value.hint is None


def test_the_daemon_runs_when_a_ping_answers_ok(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_request(monkeypatch, {"ok": True})
    assert client.daemon_running(home) is True
    assert fake.calls == [(home.state_dir / "orchestrator.sock", {"op": "ping"}, 2)]


@pytest.mark.parametrize("answer", [{"ok": False}, {}, {"ok": 0}])
def test_the_daemon_does_not_run_when_a_ping_answers_otherwise(
    home: Home, monkeypatch: pytest.MonkeyPatch, answer: dict[str, Any]
) -> None:
    fake_request(monkeypatch, answer)
    assert client.daemon_running(home) is False


@pytest.mark.parametrize("fault", [wire.NoPeer(2, "none"), OSError("x"), wire.ProtocolError("y")])
def test_the_daemon_does_not_run_when_a_ping_fails(
    home: Home, monkeypatch: pytest.MonkeyPatch, fault: Exception
) -> None:
    fake_request(monkeypatch, fault)
    assert client.daemon_running(home) is False


# client: a streamed request


class FakeWire:
    """connect_no_follow, send_frame and recv_frame of the wire layer, faked: records
    what a stream does with its socket and answers ``frames`` in turn."""

    def __init__(self, frames: list[dict[str, Any] | BaseException | None]) -> None:
        self.frames = list(frames)
        self.events: list[tuple[Any, ...]] = []
        self.sock: socket.socket | None = None
        self.connect_fault: BaseException | None = None
        self.send_fault: BaseException | None = None

    def connect_no_follow(self, sock: socket.socket, path: Path) -> None:
        self.sock = sock
        self.events.append(("connect", path, sock.gettimeout(), sock.family, sock.type))
        if self.connect_fault is not None:
            raise self.connect_fault

    def send_frame(self, sock: socket.socket, message: dict[str, Any], deadline: float) -> None:
        assert sock is self.sock
        self.events.append(("send", message, deadline))
        if self.send_fault is not None:
            raise self.send_fault

    def recv_frame(self, sock: socket.socket, deadline: float) -> dict[str, Any] | None:
        assert sock is self.sock
        self.events.append(("recv", deadline))
        frame = self.frames.pop(0)
        if isinstance(frame, BaseException):
            raise frame
        return frame


@pytest.fixture()
def stream_wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeWire]:
    fake = FakeWire([])
    monkeypatch.setattr(wire, "connect_no_follow", fake.connect_no_follow)
    monkeypatch.setattr(wire, "send_frame", fake.send_frame)
    monkeypatch.setattr(wire, "recv_frame", fake.recv_frame)
    monkeypatch.setattr(client.time, "monotonic", lambda: 1000.0)
    yield fake
    if fake.sock is not None:
        assert fake.sock.fileno() == -1, "the stream's socket is closed"


def test_a_stream_yields_the_replies_then_the_final_answer_and_stops(
    home: Home, stream_wire: FakeWire
) -> None:
    stream_wire.frames = [{"reply": "a"}, {"reply": "b"}, {"ok": True}, {"reply": "never"}]
    frames = list(client.control_stream(home, {"op": "send", "stream": True}))
    assert frames == [{"reply": "a"}, {"reply": "b"}, {"ok": True}]
    path = home.state_dir / "orchestrator.sock"
    assert stream_wire.events == [
        ("connect", path, 330.0, socket.AF_UNIX, socket.SOCK_STREAM),
        ("send", {"op": "send", "stream": True}, 1330.0),
        ("recv", 1330.0),
        ("recv", 1330.0),
        ("recv", 1330.0),
    ]
    assert stream_wire.frames == [{"reply": "never"}]


def test_a_stream_passes_its_timeout(home: Home, stream_wire: FakeWire) -> None:
    stream_wire.frames = [{"ok": True}]
    assert list(client.control_stream(home, {"op": "x"}, timeout=5)) == [{"ok": True}]
    assert stream_wire.events[0][2] == 5
    assert stream_wire.events[1] == ("send", {"op": "x"}, 1005.0)


def test_a_stream_closed_without_an_answer_is_an_error(home: Home, stream_wire: FakeWire) -> None:
    stream_wire.frames = [{"reply": "a"}, None]
    got: list[dict[str, Any]] = []
    with pytest.raises(OrchestratorError) as caught:
        for frame in client.control_stream(home, {"op": "x"}):
            got.append(frame)
    path = home.state_dir / "orchestrator.sock"
    assert got == [{"reply": "a"}]
    assert type(caught.value) is OrchestratorError
    assert caught.value.message == (f"the daemon at {path} closed the connection without answering")


def test_a_stream_with_no_daemon_is_a_daemon_not_running(home: Home, stream_wire: FakeWire) -> None:
    stream_wire.connect_fault = wire.NoPeer(2, "nothing listens")
    with pytest.raises(DaemonNotRunning) as caught:
        list(client.control_stream(home, {"op": "x"}))
    path = home.state_dir / "orchestrator.sock"
    assert caught.value.message == f"no orchestrator daemon answers at {path}"
    assert caught.value.hint == "start it with: orchestrator up"
    assert [e[0] for e in stream_wire.events] == ["connect"]


@pytest.mark.parametrize("fault", [OSError("reset"), wire.ProtocolError("too big")])
def test_a_stream_failing_midway_is_an_error_naming_the_fault(
    home: Home, stream_wire: FakeWire, fault: Exception
) -> None:
    stream_wire.frames = [{"reply": "a"}, fault]
    got: list[dict[str, Any]] = []
    with pytest.raises(OrchestratorError) as caught:
        for frame in client.control_stream(home, {"op": "x"}):
            got.append(frame)
    path = home.state_dir / "orchestrator.sock"
    assert got == [{"reply": "a"}]
    assert type(caught.value) is OrchestratorError
    assert caught.value.message == f"the daemon at {path} failed to answer: {fault}"


def test_a_stream_whose_request_cannot_be_sent_is_an_error(
    home: Home, stream_wire: FakeWire
) -> None:
    stream_wire.send_fault = BrokenPipeError("broken pipe")
    with pytest.raises(OrchestratorError) as caught:
        list(client.control_stream(home, {"op": "x"}))
    path = home.state_dir / "orchestrator.sock"
    assert caught.value.message == f"the daemon at {path} failed to answer: broken pipe"


def test_a_stream_left_early_closes_its_socket(home: Home, stream_wire: FakeWire) -> None:
    stream_wire.frames = [{"reply": "a"}, {"reply": "b"}]
    stream = client.control_stream(home, {"op": "x"})
    assert next(stream) == {"reply": "a"}
    stream.close()
    assert stream_wire.sock is not None and stream_wire.sock.fileno() == -1


# swarmcheck: doctor's checks of a home on Swarm


class FakeBackend:
    """The Swarm backend's answers doctor reads: its node, its network, its facts."""

    def __init__(self, nodes: object = 3, fault: OrchestratorError | None = None) -> None:
        self.nodes = nodes
        self.fault = fault
        self.asked: list[str] = []

    def node(self) -> dict[str, Any]:
        self.asked.append("node")
        if self.fault is not None:
            raise self.fault
        return {"ID": "n1"}

    def network_subnets(self) -> list[str]:
        self.asked.append("subnets")
        return ["10.20.0.0/24", "10.21.0.0/24"]

    def engine_facts(self) -> dict[str, Any]:
        self.asked.append("facts")
        return {"nodes": self.nodes} if self.nodes is not None else {}


class SwarmRig:
    """check_swarm's boundary faked: the backend it opens, the agent image it finds, the
    storage check it runs; records what each was asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, home: Home) -> None:
        import orchestrator.image.agent as agent
        import orchestrator.runtime as runtime
        import orchestrator.runtime.swarm as swarm
        from orchestrator.runtime.swarm import storage

        self.home = home
        self.backend = FakeBackend()
        self.problems: list[str] | OrchestratorError = []
        self.image_fault: OrchestratorError | None = None
        self.opened: list[tuple[Any, Any, Any]] = []
        self.checked: list[tuple[Any, str]] = []
        self.client = object()
        self.config: Any = SimpleNamespace(
            image=SimpleNamespace(repository="orchestrator-agent"),
            runtime=SimpleNamespace(
                swarm=SimpleNamespace(
                    network="orch-runners", address="10.0.0.5:7000", constraints=[]
                )
            ),
        )

        def open_backend(config: Any, *, client: Any = None, home: Any = None) -> Any:
            self.opened.append((config, client, home))
            return self.backend

        def agent_image_ref(client: Any, image: Any) -> str:
            assert client is self.client and image is self.config.image
            if self.image_fault is not None:
                raise self.image_fault
            return "orchestrator-agent:abc"

        def check_storage(backend: Any, image: str) -> list[str]:
            self.checked.append((backend, image))
            if isinstance(self.problems, OrchestratorError):
                raise self.problems
            return self.problems

        def host_groups_dir(backend: Any) -> str:
            assert backend is self.backend
            return "/srv/home/groups"

        monkeypatch.setattr(runtime, "open_backend", open_backend)
        monkeypatch.setattr(swarm, "SwarmBackend", FakeBackend)
        monkeypatch.setattr(agent, "agent_image_ref", agent_image_ref)
        monkeypatch.setattr(storage, "check_storage", check_storage)
        monkeypatch.setattr(storage, "host_groups_dir", host_groups_dir)

    def serve_runners(self) -> None:
        (self.home.state_dir / "swarm").mkdir()
        (self.home.state_dir / "swarm" / "runners.sock").write_text("")

    def run(self) -> list[Check]:
        return swarmcheck.check_swarm(self.home, self.config, self.client)  # type: ignore[arg-type]


SWARM_OK = Check(
    "swarm",
    "ok",
    "manager of a swarm of 3 nodes; runner network orch-runners "
    "(10.20.0.0/24, 10.21.0.0/24), internal; runners dial 10.0.0.5:7000",
)
NO_RUNNER_PORT = Check(
    "runner port",
    "warn",
    "no daemon serves the runner port for this home: groups cannot be reached",
    "deploy the daemon on the swarm (stack.yaml)",
)


@pytest.fixture()
def rig(monkeypatch: pytest.MonkeyPatch, home: Home) -> SwarmRig:
    return SwarmRig(monkeypatch, home)


def test_a_sound_swarm_passes_every_check(rig: SwarmRig) -> None:
    rig.serve_runners()
    assert rig.run() == [
        SWARM_OK,
        Check(
            "swarm storage",
            "ok",
            "/srv/home/groups is the same on the 3 nodes that may run the groups",
        ),
    ]
    assert rig.opened == [(rig.config, rig.client, rig.home)]
    assert rig.checked == [(rig.backend, "orchestrator-agent:abc")]
    assert rig.backend.asked == ["node", "subnets", "facts"]


def test_one_node_and_the_constraints_are_named(rig: SwarmRig) -> None:
    rig.serve_runners()
    rig.backend.nodes = 1
    rig.config.runtime.swarm.constraints = ["node.role==manager", "node.labels.disk==nfs"]
    checks = rig.run()
    assert checks[1] == Check(
        "swarm storage",
        "ok",
        "/srv/home/groups is the same on the 1 node that may run the groups "
        "(constraints: node.role==manager, node.labels.disk==nfs)",
    )


@pytest.mark.parametrize("nodes", [None, 0, ""])
def test_unknown_node_count_is_taken_as_one(rig: SwarmRig, nodes: object) -> None:
    rig.serve_runners()
    rig.backend.nodes = nodes
    checks = rig.run()
    assert checks[0].detail.startswith(f"manager of a swarm of {nodes} nodes;")
    assert checks[1].detail == (
        "/srv/home/groups is the same on the 1 node that may run the groups"
    )


def test_a_node_count_given_as_text_is_read(rig: SwarmRig) -> None:
    rig.serve_runners()
    rig.backend.nodes = "2"
    assert rig.run()[1].detail == (
        "/srv/home/groups is the same on the 2 nodes that may run the groups"
    )


def test_no_swarm_is_one_failed_check_with_its_hint(rig: SwarmRig) -> None:
    rig.backend.fault = OrchestratorError(
        "this engine is not a swarm manager", hint="docker swarm init"
    )
    assert rig.run() == [
        Check("swarm", "fail", "this engine is not a swarm manager", "docker swarm init")
    ]
    assert rig.checked == []


def test_no_swarm_without_a_hint_has_an_empty_hint(rig: SwarmRig) -> None:
    rig.backend.fault = OrchestratorError("no swarm")
    assert rig.run() == [Check("swarm", "fail", "no swarm", "")]


def test_storage_problems_fail_with_the_way_to_share_it(rig: SwarmRig) -> None:
    rig.serve_runners()
    rig.problems = ["node b sees another folder", "node c cannot read it"]
    assert rig.run() == [
        SWARM_OK,
        Check(
            "swarm storage",
            "fail",
            "node b sees another folder; node c cannot read it",
            "mount the home at the same path on every node (NFS, CephFS), or pin the "
            "groups to the nodes that have it (runtime.swarm.constraints)",
        ),
    ]


@pytest.mark.parametrize("where", ["image", "storage"])
def test_storage_that_cannot_be_checked_fails_with_the_reason(rig: SwarmRig, where: str) -> None:
    rig.serve_runners()
    fault = OrchestratorError("no agent image", hint="orchestrator image build")
    if where == "image":
        rig.image_fault = fault
    else:
        rig.problems = fault
    assert rig.run() == [
        SWARM_OK,
        Check("swarm storage", "fail", "cannot check: no agent image", "orchestrator image build"),
    ]


def test_storage_check_failing_without_a_hint_has_an_empty_hint(rig: SwarmRig) -> None:
    rig.serve_runners()
    rig.problems = OrchestratorError("probe timed out")
    assert rig.run()[1] == Check("swarm storage", "fail", "cannot check: probe timed out", "")


def test_no_runner_port_is_a_warning(rig: SwarmRig) -> None:
    checks = rig.run()
    assert checks == [
        SWARM_OK,
        Check(
            "swarm storage",
            "ok",
            "/srv/home/groups is the same on the 3 nodes that may run the groups",
        ),
        NO_RUNNER_PORT,
    ]


def test_no_runner_port_is_warned_after_a_storage_failure(rig: SwarmRig) -> None:
    rig.problems = OrchestratorError("probe timed out")
    assert rig.run()[2] == NO_RUNNER_PORT
