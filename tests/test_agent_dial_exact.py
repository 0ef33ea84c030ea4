"""Exact behaviour of the runner's dialler (no engine, no network): the daemon's address
read, the TLS context built from the group's credential, one connection's options, the
spare connections kept, the growing pause after a failed dial, and the unused
connections closed at the end."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent import dial as dialmod
from orchestrator.agent.dial import Dialer, client_context, split_address
from orchestrator.limits import (
    RUNNER_DIAL_BACKOFF_FIRST_SECONDS,
    RUNNER_DIAL_BACKOFF_MAX_SECONDS,
    RUNNER_DIAL_TIMEOUT_SECONDS,
    RUNNER_SPARE_CONNECTIONS,
)
from orchestrator.runtime.swarm.credentials import Authority

HOME_ID = "0123456789abcdef"

# --- the daemon's address --------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "pair"),
    [
        ("localhost:7000", ("localhost", 7000)),
        ("10.0.0.1:1", ("10.0.0.1", 1)),
        ("h:65535", ("h", 65535)),
        ("[::1]:443", ("::1", 443)),
        ("[fe80::1]:8", ("fe80::1", 8)),
        ("XX:5", ("XX", 5)),
        ("a:b:9", ("a:b", 9)),
    ],
)
def test_an_address_is_split_at_its_last_colon(address: str, pair: tuple[str, int]) -> None:
    assert split_address(address) == pair


@pytest.mark.parametrize(
    "address",
    ["", "host", "host:", ":80", "h:0", "h:65536", "h:8a", "h:-1", "h: 80", ":", "[]:80"],
)
def test_anything_but_host_and_port_is_refused_by_name(address: str) -> None:
    with pytest.raises(ValueError) as caught:
        split_address(address)
    assert str(caught.value) == f"not HOST:PORT: {address!r}"


# --- the credential --------------------------------------------------------------------


def _issued(tmp: Path, group: str = "fam") -> bytes:
    return Authority(tmp / "swarm", HOME_ID).issue(group).bundle


def _subjects(context: ssl.SSLContext) -> list[Any]:
    return [cert["subject"] for cert in context.get_ca_certs()]


def test_the_context_is_tls_1_3_checking_the_daemons_name(tmp_path: Path) -> None:
    path = tmp_path / "fam.pem"
    path.write_bytes(_issued(tmp_path))
    context = client_context(path)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    assert len(context.get_ca_certs()) == 1


def test_only_the_last_certificate_of_the_credential_is_trusted(tmp_path: Path) -> None:
    bundle = _issued(tmp_path)
    other = Authority(tmp_path / "other", "fedcba9876543210").ca_pem()
    ca = Authority(tmp_path / "swarm", HOME_ID).ca_pem()
    assert bundle.endswith(ca)
    path = tmp_path / "fam.pem"
    path.write_bytes(bundle[: -len(ca)] + other + ca)  # the leaf, its key, another CA, the CA
    expected = client_context(_write(tmp_path / "plain.pem", bundle))
    assert _subjects(client_context(path)) == _subjects(expected)
    path.write_bytes(bundle[: -len(ca)] + ca + other)  # another CA last: it is the one
    assert _subjects(client_context(path)) != _subjects(expected)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_credential_without_its_ca_is_refused_by_name(tmp_path: Path) -> None:
    bundle = _issued(tmp_path)
    ca = Authority(tmp_path / "swarm", HOME_ID).ca_pem()
    path = _write(tmp_path / "leaf-only.pem", bundle[: -len(ca)])
    with pytest.raises(ValueError) as caught:
        client_context(path)
    assert str(caught.value) == f"{path} holds no certificate and CA"
    with pytest.raises(ValueError, match="holds no certificate and CA"):
        client_context(_write(tmp_path / "empty.pem", b""))


# --- fakes of the server, the sockets and the TLS context ------------------------------


class FakeConn:
    def __init__(self, number: int, fail_shutdown: bool = False) -> None:
        self.number = number
        self.fail_shutdown = fail_shutdown
        self.timeouts: list[float | None] = []
        self.shutdowns: list[int] = []

    def settimeout(self, value: float | None) -> None:
        self.timeouts.append(value)

    def shutdown(self, how: int) -> None:
        self.shutdowns.append(how)
        if self.fail_shutdown:
            raise OSError("not connected")


class FakeRaw:
    def __init__(self) -> None:
        self.options: list[tuple[int, int, int]] = []
        self.closed = 0

    def setsockopt(self, level: int, name: int, value: int) -> None:
        self.options.append((level, name, value))

    def close(self) -> None:
        self.closed += 1


class FakeContext:
    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.wrapped: list[tuple[Any, str]] = []

    def wrap_socket(self, raw: Any, server_hostname: str) -> FakeConn:
        self.wrapped.append((raw, server_hostname))
        if self.error is not None:
            raise self.error
        return FakeConn(len(self.wrapped))


class FakeServer:
    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.served: list[Any] = []

    def serve_connection(self, conn: Any, on_first_frame: Any = None) -> None:
        self.served.append(conn)


def _dialer(tmp_path: Path, server: Any, spare: int = RUNNER_SPARE_CONNECTIONS) -> Dialer:
    path = _write(tmp_path / "fam.pem", _issued(tmp_path))
    if spare == RUNNER_SPARE_CONNECTIONS:
        return Dialer(server, "[::1]:7443", path)
    return Dialer(server, "[::1]:7443", path, spare)


def test_a_new_dialer_keeps_the_spare_count_and_has_dialled_none(tmp_path: Path) -> None:
    dialer = _dialer(tmp_path, FakeServer())
    assert (dialer.host, dialer.port) == ("::1", 7443)
    assert dialer.spare == RUNNER_SPARE_CONNECTIONS
    assert dialer.dialled == 0
    assert dialer._unused == set()
    assert isinstance(dialer.context, ssl.SSLContext)
    assert dialer.context.minimum_version == ssl.TLSVersion.TLSv1_3


def test_a_connection_is_dialled_kept_alive_checked_by_name_and_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = FakeRaw()
    calls: list[tuple[Any, Any]] = []

    def create_connection(address: Any, timeout: Any = None) -> FakeRaw:
        calls.append((address, timeout))
        return raw

    monkeypatch.setattr(dialmod.socket, "create_connection", create_connection)
    dialer = _dialer(tmp_path, FakeServer())
    context = FakeContext()
    dialer.context = context  # type: ignore[assignment]
    conn: Any = dialer.dial()
    assert calls == [(("::1", 7443), RUNNER_DIAL_TIMEOUT_SECONDS)]
    assert raw.options == [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    assert context.wrapped == [(raw, "::1")]
    assert conn.timeouts == [None]
    assert raw.closed == 0


def test_a_failed_handshake_closes_the_socket_and_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = FakeRaw()
    monkeypatch.setattr(dialmod.socket, "create_connection", lambda *a, **k: raw)
    dialer = _dialer(tmp_path, FakeServer())
    dialer.context = FakeContext(ssl.SSLError("bad certificate"))  # type: ignore[assignment]
    with pytest.raises(ssl.SSLError, match="bad certificate"):
        dialer.dial()
    assert raw.closed == 1


class StoppingCondition:
    """A condition whose wait records its timeout and stops the server (the dialer
    would otherwise wait for a connection to be taken)."""

    def __init__(self, server: FakeServer) -> None:
        self.lock = threading.RLock()
        self.server = server
        self.waits: list[float | None] = []
        self.notified = 0

    def __enter__(self) -> bool:
        return self.lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.server.stopping.set()
        return False

    def notify_all(self) -> None:
        self.notified += 1


class Threads:
    """threading.Thread as the dialer's module sees it: records, never starts."""

    def __init__(self) -> None:
        self.made: list[tuple[Any, tuple[Any, ...], bool]] = []

    def __call__(self, target: Any, args: tuple[Any, ...], daemon: bool) -> Threads:
        self.made.append((target, args, daemon))
        return self

    def start(self) -> None:
        pass


@pytest.mark.parametrize("spare", [1, 2, 3])
def test_it_dials_until_spare_connections_are_unused_then_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spare: int
) -> None:
    server = FakeServer()
    dialer = _dialer(tmp_path, server, spare)
    cond = StoppingCondition(server)
    dialer._cond = cond  # type: ignore[assignment]
    threads = Threads()
    monkeypatch.setattr(dialmod.threading, "Thread", threads)
    made: list[FakeConn] = []

    def dial() -> FakeConn:
        made.append(FakeConn(len(made) + 1))
        return made[-1]

    dialer.dial = dial  # type: ignore[method-assign]
    dialer.run()
    assert len(made) == spare
    assert dialer.dialled == spare
    assert cond.waits == [0.5]
    assert [(t, a, d) for t, a, d in threads.made] == [
        (dialer._serve, (conn,), True) for conn in made
    ]
    # stopped: the unused connections were shut down both ways and forgotten
    assert [conn.shutdowns for conn in made] == [[socket.SHUT_RDWR]] * spare
    assert dialer._unused == set()


def test_a_stopped_server_dials_nothing(tmp_path: Path) -> None:
    server = FakeServer()
    server.stopping.set()
    dialer = _dialer(tmp_path, server)

    def dial() -> FakeConn:
        raise AssertionError("dialled after the stop")

    dialer.dial = dial  # type: ignore[method-assign]
    dialer.run()
    assert dialer.dialled == 0


class RecordingStop(threading.Event):
    """The server's stop event: waits return at once and are recorded; set after
    ``after`` waits."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after
        self.pauses: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.pauses.append(timeout)
        if len(self.pauses) >= self.after:
            self.set()
        return self.is_set()


def test_a_daemon_away_is_dialled_again_after_a_doubling_pause_up_to_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = FakeServer()
    stop = RecordingStop(after=9)
    server.stopping = stop
    dialer = _dialer(tmp_path, server)
    spreads: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        spreads.append((low, high))
        return 1.0

    monkeypatch.setattr(dialmod.random, "uniform", uniform)
    failures = [OSError("refused"), ssl.SSLError("handshake")] + [OSError("refused")] * 7

    def dial() -> FakeConn:
        raise failures.pop(0)

    dialer.dial = dial  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.dial"):
        dialer.run()
    first = RUNNER_DIAL_BACKOFF_FIRST_SECONDS
    expected = [min(first * 2**n, RUNNER_DIAL_BACKOFF_MAX_SECONDS) for n in range(9)]
    assert stop.pauses == pytest.approx(expected)
    assert expected[-1] == RUNNER_DIAL_BACKOFF_MAX_SECONDS
    assert spreads == [(0.8, 1.2)] * 9
    assert dialer.dialled == 0
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "cannot reach the daemon at ::1:7443 (refused); again in 0.1s"
    assert messages[1].startswith("cannot reach the daemon at ::1:7443 (")
    assert "handshake" in messages[1]
    assert messages[1].endswith("); again in 0.2s")
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_the_pause_is_spread_by_the_random_factor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = FakeServer()
    stop = RecordingStop(after=2)
    server.stopping = stop
    dialer = _dialer(tmp_path, server)
    monkeypatch.setattr(dialmod.random, "uniform", lambda low, high: 1.1)

    def dial() -> FakeConn:
        raise OSError("refused")

    dialer.dial = dial  # type: ignore[method-assign]
    dialer.run()
    first = RUNNER_DIAL_BACKOFF_FIRST_SECONDS
    assert stop.pauses == pytest.approx([first * 1.1, first * 2 * 1.1])


def test_a_connection_made_starts_the_pause_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = FakeServer()
    stop = RecordingStop(after=4)
    server.stopping = stop
    dialer = _dialer(tmp_path, server, spare=5)
    monkeypatch.setattr(dialmod.random, "uniform", lambda low, high: 1.0)
    monkeypatch.setattr(dialmod.threading, "Thread", Threads())
    outcomes: list[Any] = [OSError("a"), OSError("b"), FakeConn(1), OSError("c"), OSError("d")]

    def dial() -> FakeConn:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    dialer.dial = dial  # type: ignore[method-assign]
    dialer.run()
    first = RUNNER_DIAL_BACKOFF_FIRST_SECONDS
    assert stop.pauses == pytest.approx([first, first * 2, first, first * 2])
    assert dialer.dialled == 1


def test_a_connection_is_taken_at_its_first_frame_and_forgotten_when_it_closes(
    tmp_path: Path,
) -> None:
    seen: list[tuple[bool, int]] = []

    class Server(FakeServer):
        def serve_connection(self, conn: Any, on_first_frame: Any = None) -> None:
            seen.append((conn in dialer._unused, cond.notified))
            on_first_frame()
            seen.append((conn in dialer._unused, cond.notified))

    server = Server()
    dialer = _dialer(tmp_path, server)
    cond = StoppingCondition(server)
    dialer._cond = cond  # type: ignore[assignment]
    conn = FakeConn(1)
    other = FakeConn(2)
    dialer._unused.update({conn, other})  # type: ignore[arg-type]
    dialer._serve(conn)  # type: ignore[arg-type]
    assert seen == [(True, 0), (False, 1)]
    assert dialer._unused == {other}
    assert cond.notified == 2  # and once more when it closed


def test_a_connection_closed_before_any_frame_is_forgotten(tmp_path: Path) -> None:
    server = FakeServer()
    dialer = _dialer(tmp_path, server)
    cond = StoppingCondition(server)
    dialer._cond = cond  # type: ignore[assignment]
    conn = FakeConn(1)
    dialer._unused.add(conn)  # type: ignore[arg-type]
    dialer._serve(conn)  # type: ignore[arg-type]
    assert server.served == [conn]
    assert dialer._unused == set()
    assert cond.notified == 1


def test_closing_shuts_every_unused_connection_even_after_one_fails(tmp_path: Path) -> None:
    server = FakeServer()
    dialer = _dialer(tmp_path, server)
    cond = StoppingCondition(server)
    dialer._cond = cond  # type: ignore[assignment]
    conns = [FakeConn(1, fail_shutdown=True), FakeConn(2, fail_shutdown=True), FakeConn(3)]
    dialer._unused.update(conns)  # type: ignore[arg-type]
    dialer.close()
    assert [c.shutdowns for c in conns] == [[socket.SHUT_RDWR]] * 3
    assert dialer._unused == set()
    assert cond.notified == 1
