"""The runner's own parts word for word: its requests to the host during a turn (the
frame sent, each failure's sentence, when the link says the host has gone), the egress
forwarder to the host's proxy socket (bytes both ways, the 502 when the socket is not
there), and the settings read from the container's environment, each at its default and
when set."""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.agent import egress, hostlink
from orchestrator.agent.hostlink import HostLink, HostRequestFailed
from orchestrator.agent.settings import AgentSettings

# -- requests to the host -------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    runner, host = socket.socketpair()
    runner.settimeout(5)
    host.settimeout(5)
    yield runner, host
    runner.close()
    host.close()


def _answer_with(host: socket.socket, make: Any) -> threading.Thread:
    """The host's side: read one request, answer with make(request)."""
    got: list[dict[str, Any]] = []

    def serve() -> None:
        request = wire.recv_frame(host)
        assert request is not None
        got.append(request)
        answer = make(request)
        if answer is None:
            host.shutdown(socket.SHUT_WR)
        else:
            wire.send_frame(host, answer)

    thread = threading.Thread(target=serve)
    thread.got = got  # type: ignore[attr-defined]
    thread.start()
    return thread


def test_a_request_is_one_numbered_frame_and_returns_the_answer(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    runner, host = pair
    link = HostLink(runner)
    assert link.frame_limit == wire.MAX_FRAME_BYTES
    for number in (1, 2):
        server = _answer_with(host, lambda r: {"req": r["req"], "ok": True, "value": r["a"]})
        answer = link.request("op.x", a=number, req=99)
        server.join()
        assert server.got == [{"a": number, "req": number, "op": "op.x"}]  # type: ignore[attr-defined]
        assert answer == {"req": number, "ok": True, "value": number}


def test_an_answer_that_is_not_ok_fails_with_the_hosts_error(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    runner, host = pair
    link = HostLink(runner)
    server = _answer_with(host, lambda r: {"req": r["req"], "ok": False, "error": "no such group"})
    with pytest.raises(HostRequestFailed) as caught:
        link.request("learned.write")
    server.join()
    assert str(caught.value) == "learned.write: no such group"
    assert caught.value.answer == {"req": 1, "ok": False, "error": "no such group"}
    server = _answer_with(host, lambda r: {"req": r["req"], "error": ""})
    with pytest.raises(HostRequestFailed) as caught:
        link.request("memory.get")
    server.join()
    assert str(caught.value) == "memory.get: refused"
    assert caught.value.answer == {"req": 2, "error": ""}


def test_an_answer_to_another_request_fails(pair: tuple[socket.socket, socket.socket]) -> None:
    runner, host = pair
    server = _answer_with(host, lambda r: {"req": "7", "ok": True})
    with pytest.raises(HostRequestFailed) as caught:
        HostLink(runner).request("task.list")
    server.join()
    assert str(caught.value) == "task.list: the host answered request '7'"
    assert caught.value.answer == {}
    server = _answer_with(host, lambda r: {"ok": True})
    with pytest.raises(HostRequestFailed) as caught:
        HostLink(runner).request("task.list")
    server.join()
    assert str(caught.value) == "task.list: the host answered request None"


def test_a_host_that_closes_the_turn_fails_the_request(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    runner, host = pair
    server = _answer_with(host, lambda r: None)
    with pytest.raises(HostRequestFailed) as caught:
        HostLink(runner).request("reply")
    server.join()
    assert str(caught.value) == "reply: the host closed the turn"
    assert caught.value.answer == {}


def test_a_request_over_the_frame_limit_fails_before_anything_is_sent(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    runner, host = pair
    link = HostLink(runner, frame_limit=40)
    frame = wire.encode({"text": "x" * 20, "req": 1, "op": "reply"})
    with pytest.raises(HostRequestFailed) as caught:
        link.request("reply", text="x" * 20)
    assert str(caught.value) == (
        f"reply: the link to the host failed: frame of {len(frame)} bytes exceeds 40"
    )
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    host.setblocking(False)
    with pytest.raises(BlockingIOError):
        host.recv(1)


def test_a_broken_link_fails_the_request(pair: tuple[socket.socket, socket.socket]) -> None:
    runner, host = pair
    host.close()
    with pytest.raises(HostRequestFailed) as caught:
        HostLink(runner).request("reply")
    assert str(caught.value).startswith("reply: the link to the host failed: [Errno 32]")
    assert caught.value.answer == {}


def test_a_failed_request_carries_no_answer_by_default() -> None:
    failed = HostRequestFailed("x")
    assert (str(failed), failed.answer) == ("x", {})
    assert HostRequestFailed("y", {"ok": False}).answer == {"ok": False}


def test_the_link_is_open_while_the_host_is_silent_and_closed_when_it_hangs_up(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    runner, host = pair
    link = HostLink(runner)
    assert link.closed() is False
    host.sendall(b"ab")
    assert link.closed() is False
    assert runner.recv(2) == b"ab"  # only peeked at: the bytes are still there
    host.close()
    assert link.closed() is True
    assert link.closed() is True


def test_the_link_is_open_while_a_request_holds_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    runner, host = pair
    link = HostLink(runner)
    host.close()
    with link._lock:
        assert link.closed() is False
    assert link.closed() is True
    assert link._lock.acquire(blocking=False)  # closed() let it go
    link._lock.release()


class _Peeking:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.flags: list[int] = []

    def recv(self, size: int, flags: int) -> bytes:
        self.flags.append(flags)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (b"", True),
        (b"x", False),
        (BlockingIOError(), False),
        (ConnectionResetError(), True),
        (OSError("gone"), True),
    ],
    ids=["eof", "data", "would-block", "reset", "oserror"],
)
def test_what_a_peek_at_a_readable_link_means(
    monkeypatch: pytest.MonkeyPatch, outcome: Any, expected: bool
) -> None:
    sock = _Peeking(outcome)
    polled: list[Any] = []

    def ready(r: Any, w: Any, x: Any, timeout: float) -> Any:
        polled.append((r, w, x, timeout))
        return r, [], []

    monkeypatch.setattr(hostlink.select, "select", ready)
    link = HostLink(sock)  # type: ignore[arg-type]
    assert link.closed() is expected
    assert polled == [([sock], [], [], 0)]
    assert sock.flags == [socket.MSG_PEEK | socket.MSG_DONTWAIT]
    assert link._lock.acquire(blocking=False)


# -- the egress forwarder -------------------------------------------------------------------


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[Path, list[bytes]]]:
    """A unix socket standing for the host's proxy: it reads to EOF, then answers."""
    path = tmp_path / "egress.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    received: list[bytes] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                data = b""
                while chunk := conn.recv(4096):
                    data += chunk
                received.append(data)
                conn.sendall(b"answer:" + data[:10])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, received
    server.close()
    thread.join(5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def test_the_forwarder_carries_bytes_both_ways_with_half_closes(
    upstream: tuple[Path, list[bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    path, received = upstream
    port = _free_port()
    with caplog.at_level(logging.INFO, logger="orchestrator.agent.egress"):
        listener = egress.start_forwarder(path, port)
    try:
        assert caplog.messages == [f"egress forwarder on 127.0.0.1:{port} to {path}"]
        assert listener.getsockname() == ("127.0.0.1", port)
        assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        body = b"CONNECT example.org:443 HTTP/1.1\r\n\r\n" + bytes(range(256)) * 600
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            client.sendall(body)
            client.shutdown(socket.SHUT_WR)
            assert _read_all(client) == b"answer:" + body[:10]
        assert received == [body]
    finally:
        listener.close()


def test_the_forwarder_answers_502_when_the_hosts_socket_is_not_there(tmp_path: Path) -> None:
    path = tmp_path / "absent.sock"
    port = _free_port()
    listener = egress.start_forwarder(path, port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            answer = _read_all(client)
    finally:
        listener.close()
    body = b"orchestrator egress gate unavailable: [Errno 2] No such file or directory\n"
    assert answer == (
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )


class _ScriptedListener:
    """A listener whose accept() answers from a script: an OSError is raised, a socket is
    handed out; when the script ends the listener reads as closed."""

    def __init__(self, script: list[object]) -> None:
        self.script = script
        self.closed = False

    def accept(self) -> tuple[socket.socket, object]:
        if not self.script:
            self.closed = True
            raise OSError(errno.EBADF, "Bad file descriptor")
        step = self.script.pop(0)
        if isinstance(step, OSError):
            raise step
        assert isinstance(step, socket.socket)
        return step, None

    def fileno(self) -> int:
        return -1 if self.closed else 3


def test_the_forwarder_backs_off_when_out_of_descriptors_and_goes_on(
    upstream: tuple[Path, list[bytes]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path, received = upstream
    sleeps: list[float] = []
    monkeypatch.setattr(egress.time, "sleep", sleeps.append)
    ours, theirs = socket.socketpair()
    emfile = OSError(errno.EMFILE, "Too many open files")
    script: list[object] = [emfile] * 6 + [OSError(errno.ECONNABORTED, "gone"), ours]
    script += [OSError(errno.ENFILE, "Too many open files in system")]
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.egress"):
        egress._accept(_ScriptedListener(script), path)  # type: ignore[arg-type]
    # doubling from 0.05 s up to 1 s; a client gone is retried at once; a taken
    # connection starts the backoff over
    assert sleeps == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 0.05]
    assert caplog.messages[0] == (
        "egress forwarder: accept failed (Too many open files); backing off"
    )
    assert len(caplog.messages) == 7
    with theirs:
        theirs.settimeout(5)
        theirs.sendall(b"after")
        theirs.shutdown(socket.SHUT_WR)
        assert _read_all(theirs) == b"answer:after"
    assert received == [b"after"]


def test_the_forwarder_closes_a_connection_it_has_no_thread_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoThread:
        def __init__(self, **kwargs: object) -> None:
            pass

        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(egress.threading, "Thread", NoThread)
    ours, theirs = socket.socketpair()
    egress._accept(_ScriptedListener([ours]), tmp_path / "e.sock")  # type: ignore[arg-type]
    assert ours.fileno() == -1
    theirs.settimeout(5)
    assert theirs.recv(10) == b""
    theirs.close()


def test_the_forwarder_listens_on_the_egress_port_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bound: list[Any] = []

    class Listener:
        def __init__(self, family: int, kind: int) -> None:
            bound.append(("socket", family, kind))

        def setsockopt(self, *args: Any) -> None:
            bound.append(("setsockopt", *args))

        def bind(self, address: Any) -> None:
            bound.append(("bind", address))

        def listen(self, backlog: int) -> None:
            bound.append(("listen", backlog))

        def accept(self) -> Any:
            raise OSError("closed")

        def fileno(self) -> int:
            return -1  # closed: the accept loop ends

    monkeypatch.setattr(egress.socket, "socket", Listener)
    egress.start_forwarder(tmp_path / "s")
    assert bound == [
        ("socket", socket.AF_INET, socket.SOCK_STREAM),
        ("setsockopt", socket.SOL_SOCKET, socket.SO_REUSEADDR, 1),
        ("bind", ("127.0.0.1", 3128)),
        ("listen", 64),
    ]


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The threads the forwarder makes, in order (real ones, started by it)."""
    threads: list[threading.Thread] = []
    real = threading.Thread

    def thread(*args: Any, **kwargs: Any) -> threading.Thread:
        threads.append(real(*args, **kwargs))
        return threads[-1]

    monkeypatch.setattr(egress.threading, "Thread", thread)
    return threads


def test_the_forwarders_threads_never_keep_the_runner_alive_and_stop_when_it_closes(
    made: list[threading.Thread], tmp_path: Path
) -> None:
    port = _free_port()
    listener = egress.start_forwarder(tmp_path / "absent.sock", port)
    [accepting] = made
    assert (accepting.name, accepting.daemon) == ("egress-forwarder", True)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        assert _read_all(client).startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert [t.daemon for t in made] == [True, True]
    made[1].join(5)
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    accepting.join(5)
    assert not accepting.is_alive()


def test_a_connection_pipes_both_ways_on_daemon_threads(
    upstream: tuple[Path, list[bytes]], made: list[threading.Thread]
) -> None:  # the host's end starts its thread first, unrecorded
    path, received = upstream
    client, ours = socket.socketpair()
    with client:
        client.sendall(b"hello")
        client.shutdown(socket.SHUT_WR)
        egress._serve(ours, path)  # here; the way back on a thread of its own
        assert _read_all(client) == b"answer:hello"
    assert [t.daemon for t in made] == [True]
    assert received == [b"hello"]
    assert ours.fileno() == -1


def test_a_client_gone_before_the_502_is_closed_without_an_error(tmp_path: Path) -> None:
    class Gone:
        closed = False

        def sendall(self, data: bytes) -> None:
            raise BrokenPipeError("gone")

        def close(self) -> None:
            self.closed = True

    client = Gone()
    egress._serve(client, tmp_path / "absent.sock")  # type: ignore[arg-type]
    assert client.closed


def test_a_pipe_stops_at_an_error_and_half_closes_its_sink() -> None:
    class Source:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def recv(self, size: int) -> bytes:
            self.sizes.append(size)
            if len(self.sizes) == 1:
                return b"one"
            raise ConnectionResetError

    class Sink:
        def __init__(self, fail: bool = False) -> None:
            self.sent: list[bytes] = []
            self.shut: list[int] = []
            self.fail = fail

        def sendall(self, data: bytes) -> None:
            self.sent.append(data)

        def shutdown(self, how: int) -> None:
            self.shut.append(how)
            if self.fail:
                raise OSError("not connected")

    source, sink = Source(), Sink()
    egress._pipe(source, sink)  # type: ignore[arg-type]
    assert source.sizes == [65536, 65536]
    assert (sink.sent, sink.shut) == ([b"one"], [socket.SHUT_WR])
    failing = Sink(fail=True)
    egress._pipe(Source(), failing)  # type: ignore[arg-type]
    assert failing.shut == [socket.SHUT_WR]


# -- the runner's settings --------------------------------------------------------------------


def test_settings_without_anything_in_the_environment_take_their_defaults() -> None:
    s = AgentSettings.from_env({})
    assert s == AgentSettings(
        agent_dir=Path("/workspace/agent"),
        runtime_dir=Path("/run/orchestrator"),
        provider="offline",
        model="offline-rules",
        session_mode="per-chat",
        context_share=0.8,
        context_budget_chars=None,
        hooks_file=None,
        disk_bytes=None,
        shell_dir=Path("/tmp/orchestrator-shell"),
        home_dir=None,
        sandbox=False,
        skills_dir=Path("/workspace/skills"),
        mcp=None,
        egress_socket=None,
        dial=None,
        credential=None,
    )
    assert s.memory_dir == Path("/workspace/agent/memory")
    assert s.sessions_dir == Path("/workspace/agent/sessions")
    assert s.socket_path == Path("/run/orchestrator/runner.sock")


def test_the_dataclass_defaults_are_the_environments() -> None:
    bare = AgentSettings(agent_dir=Path("/a"), runtime_dir=Path("/r"))
    assert bare == AgentSettings.from_env(
        {"ORCHESTRATOR_AGENT_DIR": "/a", "ORCHESTRATOR_RUNTIME_DIR": "/r"}
    )


def test_settings_read_each_variable() -> None:
    s = AgentSettings.from_env(
        {
            "ORCHESTRATOR_AGENT_DIR": "/g/agent",
            "ORCHESTRATOR_RUNTIME_DIR": "/g/run",
            "ORCHESTRATOR_PROVIDER": "openai",
            "ORCHESTRATOR_MODEL": "gpt-x",
            "ORCHESTRATOR_SESSION_MODE": "shared",
            "ORCHESTRATOR_CONTEXT_SHARE": "0.5",
            "ORCHESTRATOR_CONTEXT_BUDGET": "12000",
            "ORCHESTRATOR_HOOKS_FILE": "/etc/hooks.json",
            "ORCHESTRATOR_DISK_BYTES": "1048576",
            "ORCHESTRATOR_SHELL_DIR": "/sh",
            "HOME": "/home/agent",
            "ORCHESTRATOR_SANDBOX": "1",
            "ORCHESTRATOR_SKILLS_DIR": "/sk",
            "ORCHESTRATOR_MCP": '{"servers": []}',
            "ORCHESTRATOR_EGRESS_SOCKET": "/run/egress.sock",
            "ORCHESTRATOR_DIAL": "hub:7000",
            "ORCHESTRATOR_CREDENTIAL": "/run/secrets/cred",
        }
    )
    assert s == AgentSettings(
        agent_dir=Path("/g/agent"),
        runtime_dir=Path("/g/run"),
        provider="openai",
        model="gpt-x",
        session_mode="shared",
        context_share=0.5,
        context_budget_chars=12000,
        hooks_file=Path("/etc/hooks.json"),
        disk_bytes=1048576,
        shell_dir=Path("/sh"),
        home_dir=Path("/home/agent"),
        sandbox=True,
        skills_dir=Path("/sk"),
        mcp='{"servers": []}',
        egress_socket=Path("/run/egress.sock"),
        dial="hub:7000",
        credential=Path("/run/secrets/cred"),
    )
    assert s.socket_path == Path("/g/run/runner.sock")
    assert s.memory_dir == Path("/g/agent/memory")


def test_empty_or_odd_values_leave_the_optional_settings_unset() -> None:
    s = AgentSettings.from_env(
        {
            "ORCHESTRATOR_CONTEXT_BUDGET": "",
            "ORCHESTRATOR_HOOKS_FILE": "",
            "ORCHESTRATOR_DISK_BYTES": "-5",
            "HOME": "",
            "ORCHESTRATOR_SANDBOX": "true",
            "ORCHESTRATOR_MCP": "",
            "ORCHESTRATOR_EGRESS_SOCKET": "",
            "ORCHESTRATOR_DIAL": "",
            "ORCHESTRATOR_CREDENTIAL": "",
        }
    )
    assert (s.context_budget_chars, s.hooks_file, s.disk_bytes, s.home_dir) == (
        None,
        None,
        None,
        None,
    )
    assert (s.sandbox, s.mcp, s.egress_socket, s.dial, s.credential) == (
        False,
        None,
        None,
        None,
        None,
    )
    assert AgentSettings.from_env({"ORCHESTRATOR_DISK_BYTES": "1e9"}).disk_bytes is None
    assert AgentSettings.from_env({"ORCHESTRATOR_SANDBOX": "0"}).sandbox is False


def test_settings_are_read_from_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_MODEL", "from-process")
    monkeypatch.setenv("HOME", "/home/p")
    s = AgentSettings.from_env()
    assert (s.model, s.home_dir) == ("from-process", Path("/home/p"))
    given = {"ORCHESTRATOR_MODEL": "given"}
    assert AgentSettings.from_env(given).model == "given"
    assert AgentSettings.from_env(given).home_dir is None
