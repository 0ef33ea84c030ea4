"""Exact behaviour of the daemon's runner port (runtime/swarm/hub.py) with fakes of the
TLS layer and the CA, and socket pairs for the relay (no engine, no certificate): the
keepalive options, who is admitted, filed and refused, which connection a turn takes,
the relay socket and its splice, and the endpoints."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.errors import OrchestratorError
from orchestrator.limits import (
    RUNNER_HANDSHAKE_TIMEOUT_SECONDS,
    RUNNER_HANDSHAKES_AT_ONCE,
    RUNNER_IDLE_PER_GROUP,
    RUNNER_RELAY_REQUEST_SECONDS,
    RUNNER_RELAYS_AT_ONCE,
)
from orchestrator.runtime.channel import RunnerUnavailable
from orchestrator.runtime.swarm import hub as hubmod
from orchestrator.runtime.swarm.credentials import Peer
from orchestrator.runtime.swarm.hub import (
    HubEndpoint,
    RelayEndpoint,
    RunnerHub,
    keep_alive,
    splice,
)


class Recorder:
    def __init__(self) -> None:
        self.options: list[tuple[int, int, int]] = []

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.options.append((level, option, value))


def test_keep_alive_finds_a_vanished_runner_within_a_minute() -> None:
    sock = Recorder()
    keep_alive(sock)  # type: ignore[arg-type]
    assert sock.options == [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 15),
        (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5),
        (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
    ]


class Conn:
    """A connection as the hub holds one: records what is done to it."""

    def __init__(self, name: str = "c", *, pending: int = 0, readable: bool = False) -> None:
        self.name = name
        self._pending = pending
        self.readable = readable
        self.timeouts: list[float | None] = []
        self.closed = 0
        self.options: list[tuple[int, int, int]] = []
        self.settimeout_error: OSError | None = None
        self.close_error: OSError | None = None

    def pending(self) -> int:
        return self._pending

    def settimeout(self, value: float | None) -> None:
        if self.settimeout_error is not None:
            raise self.settimeout_error
        self.timeouts.append(value)

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.options.append((level, option, value))

    def close(self) -> None:
        self.closed += 1
        if self.close_error is not None:
            raise self.close_error


class Authority:
    def __init__(self, peer: Peer | Exception | None = None) -> None:
        self.peer = peer
        self.contexts: list[str] = []
        self.identified: list[Any] = []

    def server_context(self, name: str) -> Any:
        self.contexts.append(name)
        return ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)

    def identify(self, conn: Any) -> Peer:
        self.identified.append(conn)
        if isinstance(self.peer, Exception):
            raise self.peer
        assert self.peer is not None
        return self.peer


PEER = Peer(group="fam", home="h", fingerprint="fp")


def make_hub(
    tmp_path: Path | None = None,
    admit: Any = None,
    authority: Authority | None = None,
    hosts: tuple[str, ...] = ("127.0.0.1",),
) -> RunnerHub:
    return RunnerHub(
        authority or Authority(PEER),  # type: ignore[arg-type]
        admit or (lambda peer, address: None),
        server_name="orch",
        hosts=hosts,
        port=0,
        relay_dir=tmp_path,
    )


@pytest.fixture
def readable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hubmod, "_readable", lambda conn: conn.readable)


# filing and taking


def test_a_new_hub_holds_nothing_and_has_refused_none() -> None:
    hub = make_hub(hosts=["127.0.0.1", "::1"])  # type: ignore[arg-type]
    assert hub.hosts == ("127.0.0.1", "::1")
    assert hub.refused == 0 and hub.idle("fam") == 0
    assert hub.bound == [] and hub.context is None


@pytest.mark.usefixtures("readable")
def test_take_hands_out_the_newest_live_connection_with_its_timeout() -> None:
    hub = make_hub()
    old, dead, talking, new = Conn("old"), Conn("dead", pending=1), Conn("t", readable=True), Conn()
    talking.close_error = OSError("already reset")  # a close that fails is no matter
    for conn in (old, talking, dead, new):
        hub._file("fam", conn)  # type: ignore[arg-type]
    assert hub.idle("fam") == 4
    assert hub.take("fam", 7.5) is new
    assert new.timeouts == [7.5] and new.closed == 0
    # the ones that said something while unused are closed and skipped
    assert hub.take("fam", 3.0) is old
    assert (dead.closed, talking.closed) == (1, 1)
    assert hub.idle("fam") == 0


@pytest.mark.usefixtures("readable")
def test_take_waits_at_most_half_a_second_then_names_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = make_hub()
    now = [100.0]
    waits: list[float] = []
    monkeypatch.setattr(hubmod.time, "monotonic", lambda: now[0])

    def wait(left: float) -> None:
        waits.append(left)
        now[0] += left

    monkeypatch.setattr(hub._cond, "wait", wait)
    with pytest.raises(RunnerUnavailable) as raised:
        hub.take("fam", 30.0)
    assert raised.value.message == (
        "no runner of group 'fam' is connected to the daemon's runner port"
    )
    assert waits == [0.5]
    waits.clear()
    with pytest.raises(RunnerUnavailable):
        hub.take("fam", 0.2)
    assert waits == [pytest.approx(0.2)]


@pytest.mark.usefixtures("readable")
def test_a_connection_filed_meanwhile_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = make_hub()
    conn = Conn()

    def wait(left: float) -> None:
        hub._idle.setdefault("fam", hubmod.deque()).append(conn)  # type: ignore[arg-type]

    monkeypatch.setattr(hub._cond, "wait", wait)
    assert hub.take("fam", 5.0) is conn


def test_a_stopping_hub_hands_out_nothing_and_files_nothing(tmp_path: Path) -> None:
    hub = make_hub(tmp_path)
    hub.start()
    kept = Conn()
    kept.close_error = OSError("already reset")  # a close that fails is no matter
    hub._file("fam", kept)  # type: ignore[arg-type]
    hub.close()
    assert kept.closed == 1 and hub.idle("fam") == 0
    started = time.monotonic()
    with pytest.raises(RunnerUnavailable):
        hub.take("fam", 30.0)
    assert time.monotonic() - started < 0.4  # it did not wait for one to come
    late = Conn()
    hub._file("fam", late)  # type: ignore[arg-type]
    assert late.closed == 1 and hub.idle("fam") == 0
    assert not (tmp_path / "runners.sock").exists()


def test_a_groups_unused_connections_are_bounded_closing_the_oldest() -> None:
    hub = make_hub()
    conns = [Conn(str(n)) for n in range(RUNNER_IDLE_PER_GROUP + 2)]
    conns[0].close_error = OSError("already reset")
    for conn in conns:
        hub._file("fam", conn)  # type: ignore[arg-type]
    assert hub.idle("fam") == RUNNER_IDLE_PER_GROUP
    assert [c.closed for c in conns] == [1, 1] + [0] * RUNNER_IDLE_PER_GROUP
    assert hub.idle("other") == 0


def test_give_back_files_it_untimed_unless_it_is_gone() -> None:
    hub = make_hub()
    conn = Conn()
    hub.give_back("fam", conn)  # type: ignore[arg-type]
    assert conn.timeouts == [None] and list(hub._idle["fam"]) == [conn]
    gone = Conn()
    gone.settimeout_error = OSError("closed")
    hub.give_back("fam", gone)  # type: ignore[arg-type]
    assert hub.idle("fam") == 1


# the handshake


class Context:
    def __init__(self, conn: Conn | Exception) -> None:
        self.conn = conn
        self.wrapped: list[tuple[Any, bool]] = []

    def wrap_socket(self, raw: Any, server_side: bool) -> Conn:
        self.wrapped.append((raw, server_side))
        if isinstance(self.conn, Exception):
            raise self.conn
        return self.conn


def admit_one(hub: RunnerHub, context: Context, raw: Conn) -> None:
    hub.context = context  # type: ignore[assignment]
    hub._handshakes.acquire()
    hub._admit(raw, "10.0.0.9")  # type: ignore[arg-type]
    # the handshake's slot is given back: every one can be taken again
    for _ in range(RUNNER_HANDSHAKES_AT_ONCE):
        assert hub._handshakes.acquire(blocking=False)
    assert not hub._handshakes.acquire(blocking=False)
    for _ in range(RUNNER_HANDSHAKES_AT_ONCE):
        hub._handshakes.release()


def test_an_admitted_connection_is_filed_under_its_group_untimed_and_kept_alive() -> None:
    asked: list[tuple[Peer, str]] = []
    authority = Authority(PEER)
    hub = make_hub(admit=lambda peer, address: asked.append((peer, address)), authority=authority)
    raw, conn = Conn("raw"), Conn("tls")
    context = Context(conn)
    admit_one(hub, context, raw)
    assert authority.identified == [conn]
    assert list(hub._idle["fam"]) == [conn]
    assert raw.timeouts == [RUNNER_HANDSHAKE_TIMEOUT_SECONDS]
    assert context.wrapped == [(raw, True)]
    assert asked == [(PEER, "10.0.0.9")]
    assert conn.timeouts == [None]
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in conn.options
    assert hub.idle("fam") == 1 and hub.refused == 0


def test_a_failed_handshake_is_refused_closed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    hub = make_hub()
    raw = Conn("raw")
    with caplog.at_level(logging.WARNING, logger=hubmod.__name__):
        admit_one(hub, Context(OSError("reset")), raw)
    assert raw.closed == 1 and hub.refused == 1 and hub.idle("fam") == 0
    assert caplog.messages == ["runner port: refused a connection from 10.0.0.9: reset"]
    tls = Conn("tls")
    admit_one(hub, Context(ssl.SSLError("bad record")), tls)
    assert tls.closed == 1 and hub.refused == 2


@pytest.mark.parametrize(
    ("peer", "admitted", "why"),
    [
        (ValueError("no certificate"), None, "no certificate"),
        (OrchestratorError("engine away"), None, "engine away"),
        (
            PEER,
            "not the credential group 'fam' was given",
            "not the credential group 'fam' was given",
        ),
    ],
)
def test_a_connection_not_admitted_is_refused_closed_and_logged(
    caplog: pytest.LogCaptureFixture, peer: Any, admitted: str | None, why: str
) -> None:
    hub = make_hub(authority=Authority(peer), admit=lambda p, a: admitted)
    raw, conn = Conn("raw"), Conn("tls")
    with caplog.at_level(logging.WARNING, logger=hubmod.__name__):
        admit_one(hub, Context(conn), raw)
    assert conn.closed == 1 and raw.closed == 0
    assert hub.refused == 1 and hub.idle("fam") == 0
    assert caplog.messages == [f"runner port: refused a connection from 10.0.0.9: {why}"]
    gone = Conn("gone")
    gone.close_error = OSError("already reset")  # a close that fails is no matter
    admit_one(hub, Context(gone), Conn("raw"))
    assert gone.closed == 1 and hub.refused == 2


class Listener:
    def __init__(self, hub: RunnerHub, accepted: list[Any]) -> None:
        self.hub = hub
        self.accepted = accepted

    def accept(self) -> tuple[Any, tuple[str, int]]:
        if not self.accepted:
            self.hub._stopping.set()
            raise OSError("shut down")
        item = self.accepted.pop(0)
        if isinstance(item, Exception):
            raise item
        return item, ("10.0.0.8", 4000)


def test_accept_refuses_past_the_handshakes_at_once_and_waits_out_errors(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = make_hub()
    sleeps: list[float] = []
    monkeypatch.setattr(hubmod.time, "sleep", sleeps.append)
    for _ in range(RUNNER_HANDSHAKES_AT_ONCE):
        hub._handshakes.acquire()
    over, more = Conn("over"), Conn("more")
    with caplog.at_level(logging.WARNING, logger=hubmod.__name__):
        hub._accept(Listener(hub, [OSError("no descriptors"), over, more]))  # type: ignore[arg-type]
    assert sleeps == [0.05]
    assert (over.closed, more.closed) == (1, 1) and hub.refused == 2
    assert caplog.messages == ["runner port: too many handshakes at once; closed 10.0.0.8"] * 2


def test_accept_hands_each_connection_to_a_handshake(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = make_hub()
    admitted: list[tuple[Any, str, str, bool]] = []
    done = threading.Event()

    def admit(raw: Any, where: str) -> None:
        thread = threading.current_thread()
        admitted.append((raw, where, thread.name, thread.daemon))
        done.set()

    monkeypatch.setattr(hub, "_admit", admit)
    raw = Conn()
    hub._accept(Listener(hub, [raw]))  # type: ignore[arg-type]
    assert done.wait(5)
    assert admitted == [(raw, "10.0.0.8", "runner-admit", True)] and hub.refused == 0


# starting, the relay socket


def test_start_binds_every_host_and_the_relay_socket_private(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    authority = Authority(PEER)
    relay_dir = tmp_path / "state" / "swarm"
    hub = make_hub(relay_dir, authority=authority)
    (relay_dir).mkdir(parents=True)
    (relay_dir / "runners.sock").write_text("stale")
    with caplog.at_level(logging.INFO, logger=hubmod.__name__):
        hub.start()
    try:
        assert authority.contexts == ["orch"] and hub.context is not None
        threads = {t.name: t.daemon for t in threading.enumerate()}
        assert threads.get("runner-port") is True and threads.get("runner-relay") is True
        ((host, port),) = hub.bound
        assert host == "127.0.0.1" and port > 0
        (listener,) = hub._listeners
        assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        assert caplog.messages == [
            "runner port open on 127.0.0.1 (port 0) for runners dialling orch"  # as configured
        ]
        path = relay_dir / "runners.sock"
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        # a connection reaches the handshake
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"not tls")
            sock.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(10) == b""
        deadline = time.monotonic() + 5
        while hub.refused == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hub.refused == 1
    finally:
        hub.close()
    assert not (relay_dir / "runners.sock").exists()


def test_the_runner_port_queues_128_connections_and_the_relay_socket_16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backlogs: list[tuple[int, int]] = []

    class Listening(socket.socket):
        def listen(self, backlog: int = 0) -> None:
            backlogs.append((self.family, backlog))
            super().listen(backlog)

    monkeypatch.setattr(hubmod.socket, "socket", Listening)
    hub = make_hub(tmp_path)
    hub.start()
    hub.close()
    assert backlogs == [(socket.AF_INET, 128), (socket.AF_UNIX, 16)]


def test_a_new_relay_folder_is_private(tmp_path: Path) -> None:
    hub = make_hub(tmp_path / "a" / "swarm")
    sock = hub._bind_relay(tmp_path / "a" / "swarm")
    try:
        assert stat.S_IMODE((tmp_path / "a" / "swarm").stat().st_mode) == 0o700
    finally:
        sock.close()


def test_an_ipv6_host_gets_an_ipv6_listener() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    hub = make_hub(hosts=("::1",))
    try:
        hub.start()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        assert hub._listeners[0].family == socket.AF_INET6
        assert hub.bound[0][0] == "::1"
    finally:
        hub.close()


def ask_relay(path: Path, request: Any) -> tuple[socket.socket, dict[str, Any] | None]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    wire.send_frame(sock, request)
    return sock, wire.recv_frame(sock, time.monotonic() + 10)


def test_the_relay_names_a_group_with_no_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = make_hub(tmp_path)
    taken: list[tuple[str, float]] = []

    def take(group: str, timeout: float) -> Any:
        taken.append((group, timeout))
        raise RunnerUnavailable(f"none of {group}")

    monkeypatch.setattr(hub, "take", take)
    hub.start()
    try:
        sock, answer = ask_relay(tmp_path / "runners.sock", {"op": "runner", "group": "fam"})
        sock.close()
        assert answer == {"ok": False, "error": "none of fam"}
        sock, answer = ask_relay(tmp_path / "runners.sock", {"op": "runner"})
        sock.close()
        assert answer == {"ok": False, "error": "none of "}
        assert taken == [("fam", 5.0), ("", 5.0)]
    finally:
        hub.close()


def test_the_relay_splices_a_runner_connection_and_frees_its_slot(tmp_path: Path) -> None:
    hub = make_hub(tmp_path)
    daemon_end, runner_end = socket.socketpair()

    class Runner(socket.socket):
        def pending(self) -> int:
            return 0

    runner = Runner(fileno=daemon_end.detach())
    hub._idle["fam"] = hubmod.deque([runner])  # type: ignore[list-item]
    hub.start()
    try:
        sock, answer = ask_relay(tmp_path / "runners.sock", {"op": "runner", "group": "fam"})
        assert answer == {"ok": True}
        sock.sendall(b"ping")
        runner_end.settimeout(10)
        assert runner_end.recv(10) == b"ping"
        runner_end.sendall(b"pong")
        assert sock.recv(10) == b"pong"
        sock.close()
        assert runner_end.recv(10) == b""  # the runner's connection closed with the relay
        # every relay slot is free again
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            free = [hub._relays.acquire(blocking=False) for _ in range(RUNNER_RELAYS_AT_ONCE)]
            for _ in range(sum(free)):
                hub._relays.release()
            if all(free):
                break
            time.sleep(0.01)
        else:
            pytest.fail("a relay slot was never given back")
    finally:
        runner_end.close()
        hub.close()


def test_the_relay_drops_a_request_that_is_no_frame(tmp_path: Path) -> None:
    hub = make_hub(tmp_path)
    hub.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(tmp_path / "runners.sock"))
            sock.sendall((wire.MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
            assert sock.recv(10) == b""
    finally:
        hub.close()


def test_the_relay_refuses_past_its_relays_at_once(tmp_path: Path) -> None:
    hub = make_hub(tmp_path)
    for _ in range(RUNNER_RELAYS_AT_ONCE):
        hub._relays.acquire()
    hub.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(tmp_path / "runners.sock"))
            assert sock.recv(10) == b""  # closed at once, nothing read
    finally:
        hub.close()


# the splice


def test_splice_copies_both_ways_until_either_side_closes() -> None:
    local, local_peer = socket.socketpair()
    runner, runner_peer = socket.socketpair()

    class Runner(socket.socket):
        def pending(self) -> int:
            return 0

    wrapped = Runner(fileno=runner.detach())
    local.settimeout(3)
    wrapped.settimeout(3)
    thread = threading.Thread(target=splice, args=(local, wrapped))
    thread.start()
    try:
        for peer in (local_peer, runner_peer):
            peer.settimeout(10)
        local_peer.sendall(b"a" * 100_000)
        got = b""
        while len(got) < 100_000:
            got += runner_peer.recv(65536)
        assert got == b"a" * 100_000
        runner_peer.sendall(b"back")
        assert local_peer.recv(10) == b"back"
        assert local.gettimeout() is None and wrapped.gettimeout() is None
        runner_peer.close()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        local_peer.close()
        local.close()
        wrapped.close()


def test_splice_reads_what_tls_already_holds_first() -> None:
    local, local_peer = socket.socketpair()
    runner, runner_peer = socket.socketpair()
    runner_peer.sendall(b"held")

    class Runner(socket.socket):
        def __init__(self, fileno: int) -> None:
            super().__init__(fileno=fileno)
            self.left = 1

        def pending(self) -> int:
            left, self.left = self.left, 0
            return left

    wrapped = Runner(runner.detach())
    thread = threading.Thread(target=splice, args=(local, wrapped))
    thread.start()
    try:
        local_peer.settimeout(10)
        assert local_peer.recv(10) == b"held"
        local_peer.close()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        runner_peer.close()
        local.close()
        wrapped.close()


def test_splice_ends_when_it_cannot_write() -> None:
    local, local_peer = socket.socketpair()
    runner, runner_peer = socket.socketpair()

    class Runner(socket.socket):
        def pending(self) -> int:
            return 0

        def sendall(self, data: Any, flags: int = 0) -> None:
            raise BrokenPipeError("gone")

    wrapped = Runner(fileno=runner.detach())
    thread = threading.Thread(target=splice, args=(local, wrapped))
    thread.start()
    try:
        local_peer.sendall(b"x")
        thread.join(10)
        assert not thread.is_alive()
    finally:
        for sock in (local, local_peer, wrapped, runner_peer):
            sock.close()


def test_splice_goes_on_after_a_tls_read_that_wants_more() -> None:
    local, local_peer = socket.socketpair()
    runner, runner_peer = socket.socketpair()

    class Runner(socket.socket):
        def __init__(self, fileno: int) -> None:
            super().__init__(fileno=fileno)
            self.first = True

        def pending(self) -> int:
            return 0

        def recv(self, size: int, flags: int = 0) -> bytes:
            if self.first:
                self.first = False
                raise ssl.SSLWantReadError()
            return super().recv(size)

    wrapped = Runner(runner.detach())
    runner_peer.sendall(b"one")
    thread = threading.Thread(target=splice, args=(local, wrapped))
    thread.start()
    try:
        local_peer.settimeout(10)
        assert local_peer.recv(10) == b"one"
        runner_peer.shutdown(socket.SHUT_WR)
        thread.join(10)
        assert not thread.is_alive()
    finally:
        for sock in (local, local_peer, wrapped, runner_peer):
            sock.close()


# the endpoints


def test_the_hub_endpoint_takes_and_gives_back_its_groups_connections() -> None:
    class Hub:
        def __init__(self) -> None:
            self.calls: list[Any] = []

        def take(self, group: str, timeout: float) -> str:
            self.calls.append(("take", group, timeout))
            return "conn"

        def give_back(self, group: str, sock: Any) -> None:
            self.calls.append(("give_back", group, sock))

    hub = Hub()
    endpoint = HubEndpoint(hub, "fam")  # type: ignore[arg-type]
    assert endpoint.connect(4.0) == "conn"
    assert endpoint.describe() == "the runner port (fam)"
    sock = ssl.create_default_context().wrap_socket(
        socket.socket(), server_hostname="x", do_handshake_on_connect=False
    )
    try:
        endpoint.release(sock)
    finally:
        sock.close()
    assert hub.calls == [("take", "fam", 4.0), ("give_back", "fam", sock)]


def test_the_relay_endpoint_says_there_is_no_daemon(tmp_path: Path) -> None:
    endpoint = RelayEndpoint(tmp_path / "runners.sock", "fam")
    assert endpoint.describe() == f"{tmp_path / 'runners.sock'} (fam)"
    with pytest.raises(RunnerUnavailable) as raised:
        endpoint.connect(2.0)
    assert raised.value.message == (
        f"no daemon relays runner connections at {tmp_path / 'runners.sock'}: with the "
        "swarm backend, runners connect to the daemon, and other processes reach them "
        "through it (start it)"
    )


def serve_once(path: Path, answer: bytes | dict[str, Any] | None) -> list[Any]:
    """A daemon that answers one relay request on ``path`` with ``answer``."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    asked: list[Any] = []

    def run() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                asked.append(wire.recv_frame(conn, time.monotonic() + 10))
                if isinstance(answer, dict):
                    wire.send_frame(conn, answer)
                elif isinstance(answer, bytes):
                    conn.sendall(answer)
                else:
                    return  # closed unanswered
                asked.append(conn.recv(10))

    threading.Thread(target=run, daemon=True).start()
    return asked


def test_the_relay_endpoint_asks_for_its_group_and_keeps_the_connection(tmp_path: Path) -> None:
    path = tmp_path / "runners.sock"
    asked = serve_once(path, {"ok": True})
    endpoint = RelayEndpoint(path, "fam")
    sock = endpoint.connect(5.0)
    timeout = sock.gettimeout()
    assert timeout is not None and 0 < timeout <= 5.0
    sock.sendall(b"hi")
    endpoint.release(sock)
    assert sock.fileno() == -1
    deadline = time.monotonic() + 5
    while len(asked) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert asked == [{"op": "runner", "group": "fam"}, b"hi"]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"ok": False, "error": "no runner of group 'fam'"}, "no runner of group 'fam'"),
        ({"ok": False}, "refused"),
        ({}, "refused"),
        (None, "refused"),
    ],
)
def test_the_relay_endpoint_says_why_the_daemon_refused(
    tmp_path: Path, answer: dict[str, Any] | None, message: str
) -> None:
    path = tmp_path / "runners.sock"
    serve_once(path, answer)
    with pytest.raises(RunnerUnavailable) as raised:
        RelayEndpoint(path, "fam").connect(5.0)
    assert raised.value.message == message


def test_the_relay_endpoint_says_when_the_daemon_did_not_relay(tmp_path: Path) -> None:
    path = tmp_path / "runners.sock"
    serve_once(path, (wire.MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
    with pytest.raises(RunnerUnavailable) as raised:
        RelayEndpoint(path, "fam").connect(5.0)
    assert raised.value.message.startswith(f"the daemon at {path} did not relay: ")


def test_each_relay_is_served_in_a_daemon_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = make_hub(tmp_path)
    served: list[bool] = []
    done = threading.Event()

    def relay_one(local: socket.socket) -> None:
        served.append(threading.current_thread().daemon)
        local.close()
        hub._relays.release()
        done.set()

    monkeypatch.setattr(hub, "_relay_one", relay_one)
    hub.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(tmp_path / "runners.sock"))
            assert done.wait(10)
        assert served == [True]
    finally:
        hub.close()


def test_accepting_relays_waits_out_errors_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = make_hub()
    sleeps: list[float] = []
    monkeypatch.setattr(hubmod.time, "sleep", sleeps.append)
    for _ in range(RUNNER_RELAYS_AT_ONCE):
        hub._relays.acquire()
    over, more = Conn("over"), Conn("more")
    hub._relay = Listener(hub, [OSError("no descriptors"), over, more])  # type: ignore[assignment]
    hub._accept_relays()
    assert sleeps == [0.05]
    assert (over.closed, more.closed) == (1, 1)  # past the relays at once: closed unserved


def test_readable_says_whether_a_connection_has_something_to_read() -> None:
    one, two = socket.socketpair()
    with one, two:
        assert hubmod._readable(one) is False
        two.sendall(b"x")
        deadline = time.monotonic() + 10
        while not hubmod._readable(one):
            assert time.monotonic() < deadline, "the byte never arrived"
        assert hubmod._readable(one) is True


def test_readable_looks_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Any, ...]] = []

    def select(read: list[Any], write: list[Any], error: list[Any], timeout: float) -> Any:
        asked.append((read, write, error, timeout))
        return read, [], []

    monkeypatch.setattr(hubmod, "select", SimpleNamespace(select=select))
    conn = Conn()
    assert hubmod._readable(conn) is True  # type: ignore[arg-type]
    assert asked == [([conn], [], [], 0)]


def relay_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("(_relay_one)")]


def test_the_relay_gives_up_on_a_silent_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hubmod, "RUNNER_RELAY_REQUEST_SECONDS", 0.2)
    hub = make_hub(tmp_path)
    hub.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(tmp_path / "runners.sock"))
            assert sock.recv(10) == b""  # closed by the relay, nothing asked
    finally:
        hub.close()


def test_a_process_gone_before_its_answer_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = make_hub(tmp_path)
    asked = threading.Event()
    go_on = threading.Event()

    def take(group: str, timeout: float) -> Any:
        asked.set()
        assert go_on.wait(10)
        raise RunnerUnavailable("none")

    monkeypatch.setattr(hub, "take", take)
    hub.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(tmp_path / "runners.sock"))
            wire.send_frame(sock, {"op": "runner", "group": "fam"})
            assert asked.wait(10)
        go_on.set()  # the answer goes to a process that hung up
        for thread in relay_threads():
            thread.join(10)
            assert not thread.is_alive()
    finally:
        hub.close()


def test_the_log_names_every_host(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hub = make_hub(hosts=("127.0.0.1", "127.0.0.2"))
    with caplog.at_level(logging.INFO, logger=hubmod.__name__):
        hub.start()
    try:
        assert [host for host, _ in hub.bound] == ["127.0.0.1", "127.0.0.2"]
        assert caplog.messages == [
            "runner port open on 127.0.0.1, 127.0.0.2 (port 0) for runners dialling orch"
        ]
    finally:
        hub.close()


class Closing:
    """A listener whose shutdown and close fail."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def shutdown(self, how: int) -> None:
        self.calls.append("shutdown")
        raise OSError("not connected")

    def close(self) -> None:
        self.calls.append("close")
        raise OSError("bad descriptor")


def test_close_goes_on_past_listeners_that_fail_to_close() -> None:
    hub = make_hub()
    one, two = Closing(), Closing()
    hub._listeners = [one, two]  # type: ignore[list-item]
    hub.close()
    assert one.calls == two.calls == ["shutdown", "close"]


def test_close_removes_the_relay_socket_only_when_it_made_one(tmp_path: Path) -> None:
    (tmp_path / "runners.sock").write_text("another process's")
    make_hub(tmp_path).close()  # never started: no socket of its own
    assert (tmp_path / "runners.sock").read_text() == "another process's"
    (tmp_path / "runners.sock").unlink()
    hub = make_hub(tmp_path)
    hub.start()
    relay = hub._relay
    assert relay is not None
    (tmp_path / "runners.sock").unlink()  # removed meanwhile: no error
    hub.close()
    assert not (tmp_path / "runners.sock").exists()
    assert relay.fileno() == -1  # the relay socket itself is closed


def no_runner(group: str, timeout: float) -> Any:
    raise RunnerUnavailable(f"no runner of group {group!r}")


def test_an_answer_past_the_frame_limit_is_dropped_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = make_hub(tmp_path)
    monkeypatch.setattr(hub, "take", no_runner)
    hub.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(tmp_path / "runners.sock"))
            # a group name that fills a frame: the answer naming it would not fit one
            wire.send_frame(sock, {"group": "g" * (wire.MAX_FRAME_BYTES - 20)})
            assert sock.recv(10) == b""
        for thread in relay_threads():
            thread.join(10)
            assert not thread.is_alive()
    finally:
        hub.close()


def test_an_answer_a_process_does_not_read_is_given_up_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hubmod, "RUNNER_RELAY_REQUEST_SECONDS", 0.5)
    hub = make_hub(tmp_path)
    monkeypatch.setattr(hub, "take", no_runner)
    hub.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(tmp_path / "runners.sock"))
            # an answer larger than the socket's buffers, never read
            wire.send_frame(sock, {"group": "g" * (wire.MAX_FRAME_BYTES // 2)})
            deadline = time.monotonic() + 10
            while not relay_threads() and time.monotonic() < deadline:
                time.sleep(0.01)
            for thread in relay_threads():
                thread.join(10)
                assert not thread.is_alive()  # while this process still holds it open
    finally:
        hub.close()


class Frames:
    """wire's frames as the hub's relay or a relay endpoint uses them, recorded with the
    deadline each is given; ``answers``: what each frame read returns, in turn."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> None:
        self.answers = answers
        self.done: list[tuple[Any, ...]] = []
        monkeypatch.setattr(hubmod, "time", SimpleNamespace(monotonic=lambda: 1000.0))
        monkeypatch.setattr(hubmod.wire, "connect_no_follow", self.connect)
        monkeypatch.setattr(hubmod.wire, "send_frame", self.send)
        monkeypatch.setattr(hubmod.wire, "recv_frame", self.recv)

    def connect(self, sock: socket.socket, path: Path) -> None:
        self.done.append(("connect", path, sock.gettimeout()))

    def send(self, sock: Any, message: dict[str, Any], deadline: float | None = None) -> None:
        self.done.append(("send", message, deadline))

    def recv(self, sock: Any, deadline: float | None = None) -> Any:
        self.done.append(("recv", deadline))
        return self.answers.pop(0)


def test_the_relay_gives_each_frame_and_the_take_the_request_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = make_hub()
    frames = Frames(monkeypatch, [{"group": "fam"}, {"group": "fam"}])
    runner, runner_peer = socket.socketpair()
    taken: list[tuple[str, float]] = []
    outcomes: list[Any] = [RunnerUnavailable("none of fam"), runner]

    def take(group: str, timeout: float) -> Any:
        taken.append((group, timeout))
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(hub, "take", take)
    monkeypatch.setattr(hubmod, "splice", lambda local, conn: frames.done.append(("splice",)))
    deadline = 1000.0 + RUNNER_RELAY_REQUEST_SECONDS
    try:
        for _ in range(2):
            local, local_peer = socket.socketpair()
            hub._relays.acquire()
            hub._relay_one(local)
            local_peer.close()
            assert local.fileno() == -1
        assert RUNNER_RELAY_REQUEST_SECONDS == 5.0
        assert taken == [("fam", 5.0), ("fam", 5.0)]
        assert frames.done == [
            ("recv", deadline),
            ("send", {"ok": False, "error": "none of fam"}, deadline),
            ("recv", deadline),
            ("send", {"ok": True}, deadline),
            ("splice",),
        ]
        assert runner.fileno() == -1  # closed once spliced
    finally:
        runner.close()
        runner_peer.close()


def test_the_relay_endpoint_connects_within_its_timeout_and_bounds_each_frame_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = Frames(monkeypatch, [{"ok": True}])
    path = tmp_path / "runners.sock"
    sock = RelayEndpoint(path, "fam").connect(4.0)
    sock.close()
    assert frames.done == [
        ("connect", path, 4.0),
        ("send", {"op": "runner", "group": "fam"}, 1004.0),
        ("recv", 1004.0),
    ]
