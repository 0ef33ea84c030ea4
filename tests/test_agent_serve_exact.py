"""Exact behaviour of the runner's server (no engine): the answer to each frame, one
connection served frame by frame, the Unix socket bound for our uid only, the accept
loop stopped, and the choice between listening and dialling the daemon."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import __version__, wire
from orchestrator.agent import dial as dialmod
from orchestrator.agent import egress
from orchestrator.agent import serve as servemod
from orchestrator.agent.providers.base import TurnWaits
from orchestrator.agent.runner import FlushDone
from orchestrator.agent.serve import RunnerServer
from orchestrator.agent.settings import AgentSettings
from orchestrator.limits import OFFLINE_CONTEXT_TOKENS, model_request_cap
from orchestrator.protocol import TurnRequest

TURN = {"turn_id": "t1", "chat": "c", "text": "hi"}


@pytest.fixture
def short() -> Iterator[Path]:
    """A folder with a short path (a Unix socket's path is short)."""
    folder = Path(tempfile.mkdtemp(prefix="srv", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class Result:
    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    def to_wire(self, turn_id: str) -> dict[str, Any]:
        return {"ok": True, "turn_id": turn_id, "replies": self.replies}


class FakeRunner:
    """The runner: records each turn with the host link's limit when it ran."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.turns: list[tuple[TurnRequest, Any, int | None]] = []
        self.flushes: list[tuple[TurnRequest, Any]] = []
        self.flushed: list[FlushDone] = []

    def handle(self, turn: TurnRequest, host: Any = None) -> Result:
        self.turns.append((turn, host, None if host is None else host.frame_limit))
        if self.error is not None:
            raise self.error
        return Result([f"echo {turn.text}"])

    def flush_idle(self, turn: TurnRequest, host: Any = None) -> list[FlushDone]:
        self.flushes.append((turn, host))
        if self.error is not None:
            raise self.error
        return self.flushed


def _settings(root: Path, **kwargs: Any) -> AgentSettings:
    return AgentSettings(agent_dir=root / "agent", runtime_dir=root / "run", **kwargs)


def _server(root: Path, runner: FakeRunner | None = None, **kwargs: Any) -> RunnerServer:
    return RunnerServer(_settings(root, **kwargs), runner or FakeRunner())  # type: ignore[arg-type]


class Link:
    def __init__(self) -> None:
        self.frame_limit = 1


# --- the answer to one frame -----------------------------------------------------------


def test_a_ping_names_the_runners_version_and_provider(tmp_path: Path) -> None:
    server = _server(tmp_path, provider="relayed")
    assert server.answer({"op": "ping"}) == {
        "ok": True,
        "runner": __version__,
        "provider": "relayed",
    }


def test_a_turn_runs_with_the_hosts_link_and_answers_its_result(tmp_path: Path) -> None:
    runner = FakeRunner()
    link = Link()
    answer = _server(tmp_path, runner).answer({"op": "turn", "turn": TURN}, link)  # type: ignore[arg-type]
    assert answer == {"ok": True, "turn_id": "t1", "replies": ["echo hi"]}
    [(turn, host, limit)] = runner.turns
    assert turn == TurnRequest.from_wire(TURN)
    assert host is link
    assert limit == 1  # no window named: the link's limit stays


def test_a_turn_with_a_window_lets_model_requests_fill_it(tmp_path: Path) -> None:
    runner = FakeRunner()
    link = Link()
    server = _server(tmp_path, runner)
    server.answer({"op": "turn", "turn": {**TURN, "window_tokens": 5000}}, link)  # type: ignore[arg-type]
    assert runner.turns[0][2] == model_request_cap(5000)
    server.answer({"op": "turn", "turn": {**TURN, "window_tokens": 5000}})
    assert runner.turns[1][1] is None


@pytest.mark.parametrize("op", ["turn", "flush"])
def test_a_bad_turn_is_answered_with_its_fault(tmp_path: Path, op: str) -> None:
    runner = FakeRunner()
    server = _server(tmp_path, runner)
    assert server.answer({"op": op}) == {"ok": False, "error": "turn must be an object"}
    assert server.answer({"op": op, "turn": {**TURN, "chat": ""}}) == {
        "ok": False,
        "error": "turn.chat must be a string of 1..200 characters",
    }
    assert runner.turns == [] and runner.flushes == []


def test_a_turn_the_host_holds_back_waits(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = _server(tmp_path, FakeRunner(TurnWaits("the group is paused")))
    with caplog.at_level(logging.INFO, logger="orchestrator.agent.serve"):
        answer = server.answer({"op": "turn", "turn": TURN})
    assert answer == {"ok": False, "error": "the group is paused", "wait": True}
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "turn t1 waits: the group is paused")
    ]


def test_a_failed_turn_is_answered_and_logged_and_the_runner_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = _server(tmp_path, FakeRunner(RuntimeError("boom")))
    with caplog.at_level(logging.INFO, logger="orchestrator.agent.serve"):
        answer = server.answer({"op": "turn", "turn": TURN})
    assert answer == {"ok": False, "error": "turn failed: RuntimeError: boom"}
    [record] = caplog.records
    assert (record.levelno, record.getMessage()) == (logging.ERROR, "turn t1 failed")
    assert record.exc_info is not None


def test_a_flush_answers_the_sessions_it_flushed(tmp_path: Path) -> None:
    runner = FakeRunner()
    runner.flushed = [FlushDone("chat-a", 120), FlushDone("chat-b", 0)]
    link = Link()
    answer = _server(tmp_path, runner).answer({"op": "flush", "turn": TURN}, link)  # type: ignore[arg-type]
    assert answer == {
        "ok": True,
        "flushed": [
            {"session": "chat-a", "appended_chars": 120},
            {"session": "chat-b", "appended_chars": 0},
        ],
    }
    assert runner.flushes == [(TurnRequest.from_wire(TURN), link)]
    assert runner.turns == []


def test_a_failed_flush_is_answered_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = _server(tmp_path, FakeRunner(OSError("disk full")))
    with caplog.at_level(logging.INFO, logger="orchestrator.agent.serve"):
        answer = server.answer({"op": "flush", "turn": TURN})
    assert answer == {"ok": False, "error": "flush failed: OSError: disk full"}
    [record] = caplog.records
    assert (record.levelno, record.getMessage()) == (logging.ERROR, "idle flush t1 failed")
    assert record.exc_info is not None


@pytest.mark.parametrize("op", ["PING", "Turn", None, "", "stop"])
def test_an_unknown_op_is_answered_with_the_known_ones(tmp_path: Path, op: Any) -> None:
    runner = FakeRunner()
    assert _server(tmp_path, runner).answer({"op": op, "turn": TURN}) == {
        "ok": False,
        "error": f"unknown op {op!r}; expected ping, turn or flush",
    }
    assert runner.turns == [] and runner.flushes == []


# --- one connection --------------------------------------------------------------------


def _served(
    server: RunnerServer, on_first_frame: Any = None
) -> tuple[socket.socket, threading.Thread]:
    ours, theirs = socket.socketpair()
    thread = threading.Thread(
        target=server.serve_connection, args=(theirs, on_first_frame), daemon=True
    )
    thread.start()
    return ours, thread


def test_a_connection_answers_frame_after_frame_until_it_closes(tmp_path: Path) -> None:
    runner = FakeRunner()
    server = _server(tmp_path, runner)
    firsts: list[int] = []
    ours, thread = _served(server, lambda: firsts.append(len(runner.turns)))
    with ours:
        wire.send_frame(ours, {"op": "turn", "turn": TURN})
        assert wire.recv_frame(ours) == {"ok": True, "turn_id": "t1", "replies": ["echo hi"]}
        wire.send_frame(ours, {"op": "ping"})
        assert wire.recv_frame(ours)["ok"] is True  # type: ignore[index]
        wire.send_frame(ours, {"op": "turn", "turn": {**TURN, "turn_id": "t2"}})
        assert wire.recv_frame(ours)["turn_id"] == "t2"  # type: ignore[index]
    thread.join(10)
    assert not thread.is_alive()
    assert firsts == [0]  # once, before the first turn ran
    # each frame had its own link to the host, sized for the offline model's window
    (_, first, cap), (_, second, _) = runner.turns
    assert cap == model_request_cap(OFFLINE_CONTEXT_TOKENS)
    assert first is not second


def test_a_connection_closed_before_any_frame_counts_as_its_first(tmp_path: Path) -> None:
    firsts: list[str] = []
    ours, thread = _served(_server(tmp_path), lambda: firsts.append("first"))
    ours.close()
    thread.join(10)
    assert not thread.is_alive()
    assert firsts == ["first"]


def test_without_a_callback_a_connection_is_served_all_the_same(tmp_path: Path) -> None:
    ours, thread = _served(_server(tmp_path))
    with ours:
        wire.send_frame(ours, {"op": "ping"})
        assert wire.recv_frame(ours)["ok"] is True  # type: ignore[index]
    thread.join(10)
    assert not thread.is_alive()


def test_a_bad_frame_closes_only_that_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    firsts: list[str] = []
    ours, thread = _served(_server(tmp_path), lambda: firsts.append("first"))
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.serve"), ours:
        ours.sendall(b"\x00\x00\x00\x02[]")
        assert ours.recv(1) == b""  # closed by the runner
        thread.join(10)
    assert not thread.is_alive()
    assert firsts == []
    [record] = caplog.records
    assert record.getMessage().startswith("closing a connection after a bad frame: ")


def test_an_answer_that_cannot_be_sent_closes_the_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Huge(FakeRunner):
        def handle(self, turn: TurnRequest, host: Any = None) -> Result:
            return Result(["x" * (wire.MAX_FRAME_BYTES + 1)])

    ours, thread = _served(_server(tmp_path, Huge()))
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.serve"), ours:
        wire.send_frame(ours, {"op": "turn", "turn": TURN})
        assert ours.recv(1) == b""
        thread.join(10)
    assert not thread.is_alive()
    [record] = caplog.records
    assert record.getMessage().startswith("could not answer: ")


# --- the Unix socket -------------------------------------------------------------------


def test_the_socket_is_bound_for_our_uid_only_over_a_stale_one(short: Path) -> None:
    server = _server(short)
    path = server.settings.socket_path
    path.parent.mkdir(parents=True)
    path.write_text("left over")
    before = os.umask(0o022)
    try:
        server.bind()
        assert os.umask(0o022) == 0o022  # the process's umask is back
    finally:
        os.umask(before)
    assert server.sock is not None
    try:
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))  # listening
    finally:
        server.sock.close()


def test_the_socket_folder_is_made_when_missing(short: Path) -> None:
    server = _server(short / "deep" / "er")
    server.bind()
    assert server.sock is not None
    server.sock.close()
    assert stat.S_ISSOCK(server.settings.socket_path.stat().st_mode)


def test_the_server_accepts_connections_until_stopped(short: Path) -> None:
    server = _server(short)
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for _ in range(2):
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(server.settings.socket_path))
            wire.send_frame(client, {"op": "ping"})
            assert wire.recv_frame(client)["ok"] is True  # type: ignore[index]
    server.stop("signal", "frame")
    assert server.stopping.is_set()
    thread.join(10)
    assert not thread.is_alive()
    assert server.sock is not None
    assert server.sock.gettimeout() == 0.5
    server.sock.close()


def test_an_accept_that_fails_while_not_stopping_is_raised(tmp_path: Path) -> None:
    class Failing:
        def settimeout(self, value: float) -> None:
            pass

        def accept(self) -> Any:
            raise OSError("accept failed")

    server = _server(tmp_path)
    server.sock = Failing()  # type: ignore[assignment]
    with pytest.raises(OSError, match="accept failed"):
        server.serve_forever()


class StopAfterAccept:
    """A listening socket whose accept times out once, then fails after a stop."""

    def __init__(self, server: RunnerServer) -> None:
        self.server = server
        self.accepts = 0
        self.timeouts: list[float] = []

    def settimeout(self, value: float) -> None:
        self.timeouts.append(value)

    def accept(self) -> Any:
        self.accepts += 1
        if self.accepts == 1:
            raise TimeoutError
        self.server.stopping.set()
        raise OSError("closed")


def test_an_accept_that_times_out_is_tried_again(tmp_path: Path) -> None:
    server = _server(tmp_path)
    sock = StopAfterAccept(server)
    server.sock = sock  # type: ignore[assignment]
    server.serve_forever()
    assert sock.accepts == 2
    assert sock.timeouts == [0.5]


# --- serve and dial --------------------------------------------------------------------


class Signals:
    def __init__(self) -> None:
        self.set: dict[int, Any] = {}

    def __call__(self, signum: int, handler: Any) -> None:
        self.set[signum] = handler


def test_serving_listens_on_the_socket_and_cleans_up(
    short: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    signals = Signals()
    monkeypatch.setattr(servemod.signal, "signal", signals)
    forwarders: list[Path] = []
    monkeypatch.setattr(egress, "start_forwarder", forwarders.append)
    made: list[RunnerServer] = []

    def serve_forever(self: RunnerServer) -> None:
        made.append(self)
        assert self.settings.socket_path.exists()

    monkeypatch.setattr(RunnerServer, "serve_forever", serve_forever)
    settings = _settings(short, egress_socket=short / "egress.sock", provider="p1")
    with caplog.at_level(logging.INFO, logger="orchestrator.agent.serve"):
        servemod.serve(settings)
    [server] = made
    assert forwarders == [short / "egress.sock"]
    assert signals.set == {signal.SIGTERM: server.stop, signal.SIGINT: server.stop}
    assert not settings.socket_path.exists()
    assert server.sock is not None and server.sock.fileno() == -1  # closed
    assert [r.getMessage() for r in caplog.records] == [
        f"runner listening on {settings.socket_path} (provider p1)"
    ]


def test_serving_without_egress_starts_no_forwarder_and_cleans_up_after_a_failure(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servemod.signal, "signal", Signals())
    monkeypatch.setattr(egress, "start_forwarder", lambda path: pytest.fail("forwarder"))

    def serve_forever(self: RunnerServer) -> None:
        self.settings.socket_path.unlink()  # gone already: no error for that
        raise RuntimeError("accept failed")

    monkeypatch.setattr(RunnerServer, "serve_forever", serve_forever)
    settings = _settings(short)
    with pytest.raises(RuntimeError, match="accept failed"):
        servemod.serve(settings)


def test_with_a_daemon_address_the_runner_dials_instead_of_listening(
    short: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    signals = Signals()
    monkeypatch.setattr(servemod.signal, "signal", signals)
    forwarders: list[Path] = []
    monkeypatch.setattr(egress, "start_forwarder", forwarders.append)
    dialers: list[Any] = []

    class FakeDialer:
        def __init__(self, server: RunnerServer, address: str, credential: Path) -> None:
            self.args = (server, address, credential)
            self.ran = 0
            dialers.append(self)

        def run(self) -> None:
            self.ran += 1

    monkeypatch.setattr(dialmod, "Dialer", FakeDialer)
    monkeypatch.setattr(RunnerServer, "bind", lambda self: pytest.fail("bound"))
    settings = _settings(
        short,
        dial="hub:7443",
        credential=short / "cred.pem",
        egress_socket=short / "egress.sock",
        provider="p2",
    )
    with caplog.at_level(logging.INFO, logger="orchestrator.agent.serve"):
        servemod.serve(settings)
    [dialer] = dialers
    server, address, credential = dialer.args
    assert isinstance(server, RunnerServer) and server.settings is settings
    assert (address, credential, dialer.ran) == ("hub:7443", short / "cred.pem", 1)
    assert forwarders == [short / "egress.sock"]
    assert signals.set == {signal.SIGTERM: server.stop, signal.SIGINT: server.stop}
    assert [r.getMessage() for r in caplog.records] == [
        "runner dialling the daemon at hub:7443 (provider p2)"
    ]


def test_dialling_without_egress_starts_no_forwarder(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servemod.signal, "signal", Signals())
    monkeypatch.setattr(egress, "start_forwarder", lambda path: pytest.fail("forwarder"))
    ran: list[str] = []

    class FakeDialer:
        def __init__(self, *args: Any) -> None:
            pass

        def run(self) -> None:
            ran.append("run")

    monkeypatch.setattr(dialmod, "Dialer", FakeDialer)
    servemod.serve(_settings(short, dial="hub:7443", credential=short / "cred.pem"))
    assert ran == ["run"]


def test_dialling_without_a_credential_stops_with_the_reason(short: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        servemod.serve(_settings(short, dial="hub:7443"))
    assert str(caught.value) == "ORCHESTRATOR_DIAL is set without ORCHESTRATOR_CREDENTIAL"


def test_main_serves_with_the_settings_of_the_environment(
    short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(short)
    served: list[AgentSettings] = []
    configs: list[dict[str, Any]] = []
    monkeypatch.setattr(servemod, "serve", served.append)
    monkeypatch.setattr(AgentSettings, "from_env", classmethod(lambda cls: settings))
    monkeypatch.setattr(servemod.logging, "basicConfig", lambda **kw: configs.append(kw))
    assert servemod.main() == 0
    assert served == [settings]
    assert configs == [
        {
            "level": logging.INFO,
            "stream": servemod.sys.stderr,
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        }
    ]


# --- details a run depends on ----------------------------------------------------------


def test_a_new_server_has_no_socket_and_is_not_stopping(tmp_path: Path) -> None:
    server = _server(tmp_path)
    assert server.sock is None
    assert not server.stopping.is_set()


def test_the_socket_queues_sixteen_connections_before_they_are_accepted(short: Path) -> None:
    server = _server(short)
    server.bind()
    assert server.sock is not None
    clients: list[socket.socket] = []
    try:
        while True:
            client = socket.socket(socket.AF_UNIX)
            client.setblocking(False)
            try:
                client.connect(str(server.settings.socket_path))
            except BlockingIOError:
                client.close()
                break
            clients.append(client)
        # Linux queues one more than the backlog on a Unix socket
        assert len(clients) == 16 + 1
    finally:
        for client in clients:
            client.close()
        server.sock.close()


def test_each_accepted_connection_is_served_on_a_daemon_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[Any, tuple[Any, ...], Any]] = []

    class Thread:
        def __init__(self, target: Any, args: tuple[Any, ...], daemon: Any = None) -> None:
            made.append((target, args, daemon))

        def start(self) -> None:
            pass

    monkeypatch.setattr(servemod.threading, "Thread", Thread)
    server = _server(tmp_path)
    conn = object()

    class Once:
        accepted = False

        def settimeout(self, value: float) -> None:
            pass

        def accept(self) -> Any:
            if self.accepted:
                server.stopping.set()
                raise OSError("closed")
            self.accepted = True
            return conn, "peer"

    server.sock = Once()  # type: ignore[assignment]
    server.serve_forever()
    assert made == [(server.serve_connection, (conn,), True)]


def test_a_turns_host_link_is_its_connection(tmp_path: Path) -> None:
    runner = FakeRunner()
    ours, thread = _served(_server(tmp_path, runner))
    with ours:
        wire.send_frame(ours, {"op": "turn", "turn": TURN})
        wire.recv_frame(ours)
    thread.join(10)
    [(_, host, _)] = runner.turns
    assert isinstance(host.sock, socket.socket) and host.sock is not ours
    assert host.sock.fileno() == -1  # the served end, closed with the connection


def test_the_logged_faults_name_the_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Huge(FakeRunner):
        def handle(self, turn: TurnRequest, host: Any = None) -> Result:
            return Result(["x" * (wire.MAX_FRAME_BYTES + 1)])

    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.serve"):
        ours, thread = _served(_server(tmp_path))
        with ours:
            ours.sendall(b"\x00\x00\x00\x02[]")
            ours.recv(1)
        thread.join(10)
        ours, thread = _served(_server(tmp_path, Huge()))
        with ours:
            wire.send_frame(ours, {"op": "turn", "turn": TURN})
            ours.recv(1)
        thread.join(10)
    assert [r.getMessage() for r in caplog.records] == [
        "closing a connection after a bad frame: frame is not a JSON object",
        f"could not answer: frame of {len(wire.encode(Huge().handle(None).to_wire('t1')))} "  # type: ignore[arg-type]
        f"bytes exceeds {wire.MAX_FRAME_BYTES}",
    ]
