"""Exact behaviour of the host's side of a turn (runtime/channel.py): the refusals of a
turn with no relay, the cancel handle, the Unix socket endpoint, and the ping and the
turn against a scripted runner on the other end of a socket pair."""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.runtime import channel
from orchestrator.runtime.channel import (
    Cancel,
    RunnerClient,
    RunnerUnavailable,
    TurnFailed,
    UnixSocketEndpoint,
    no_relay,
)

REFUSED = "no host relay on this turn (it was not delivered by the daemon)"


# a turn without a relay


def test_a_turn_without_a_relay_refuses_sixteen_requests_then_fails() -> None:
    refuse = no_relay()
    for n in range(1, 17):
        assert refuse({"req": n, "op": "x"}, 10) == {"req": n, "ok": False, "error": REFUSED}
    with pytest.raises(wire.ProtocolError) as caught:
        refuse({"req": 17}, 10)
    assert str(caught.value) == "more than 16 requests on a turn without a relay"
    with pytest.raises(wire.ProtocolError):
        refuse({"req": 18}, 10)


def test_each_turn_without_a_relay_counts_its_own_requests() -> None:
    first, second = no_relay(), no_relay()
    for n in range(16):
        first({"req": n}, 1)
    assert second({}, 1) == {"req": None, "ok": False, "error": REFUSED}


# the cancel handle


def test_a_new_handle_is_not_cancelled() -> None:
    assert Cancel().cancelled is False


def test_cancel_shuts_the_attached_socket_both_ways() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        cancel = Cancel()
        cancel.attach(ours)
        cancel.cancel()
        assert cancel.cancelled is True
        assert theirs.recv(10) == b""  # our side sends no more
        assert ours.recv(10) == b""  # and reads no more


def test_attaching_to_a_cancelled_handle_shuts_the_socket_at_once() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        cancel = Cancel()
        cancel.cancel()
        cancel.attach(ours)
        assert theirs.recv(10) == b""


def test_a_detached_socket_is_not_shut_by_a_cancel() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        cancel = Cancel()
        cancel.attach(ours)
        cancel.detach()
        cancel.cancel()
        ours.sendall(b"x")
        assert theirs.recv(10) == b"x"


def test_cancelling_a_closed_socket_is_quiet() -> None:
    ours, theirs = socket.socketpair()
    theirs.close()
    cancel = Cancel()
    cancel.attach(ours)
    ours.close()
    cancel.cancel()  # shutting a closed socket fails, and that is no error here
    assert cancel.cancelled is True


# the Unix socket endpoint


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ch") as name:
        yield Path(name)


def test_the_endpoint_connects_with_the_timeout_set(short_dir: Path) -> None:
    path = short_dir / "runner.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        endpoint = UnixSocketEndpoint(path)
        sock = endpoint.connect(2.5)
        assert sock.gettimeout() == 2.5
        assert endpoint.describe() == str(path)
        endpoint.release(sock)
        assert sock.fileno() == -1


def test_nothing_at_the_path_is_a_runner_unavailable(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[socket.socket] = []
    real = wire.connect_no_follow

    def connect(sock: socket.socket, path: Path) -> None:
        made.append(sock)
        real(sock, path)

    monkeypatch.setattr(wire, "connect_no_follow", connect)
    path = short_dir / "runner.sock"
    with pytest.raises(RunnerUnavailable) as caught:
        UnixSocketEndpoint(path).connect(1)
    assert caught.value.message.startswith(f"runner at {path}: ")
    assert caught.value.message.endswith(f"nothing listens at {path} (No such file or directory)")
    assert caught.value.__suppress_context__
    assert made[0].fileno() == -1


def test_another_failure_to_connect_is_raised_with_the_socket_closed(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[socket.socket] = []

    def connect(sock: socket.socket, path: Path) -> None:
        made.append(sock)
        raise PermissionError("denied")

    monkeypatch.setattr(wire, "connect_no_follow", connect)
    with pytest.raises(PermissionError, match="denied"):
        UnixSocketEndpoint(short_dir / "runner.sock").connect(1)
    assert made[0].fileno() == -1


def test_a_path_given_to_the_client_is_a_unix_socket_endpoint(short_dir: Path) -> None:
    assert RunnerClient(short_dir / "r.sock").endpoint == UnixSocketEndpoint(short_dir / "r.sock")


# a scripted runner


Script = Callable[[socket.socket], None]


class Scripted:
    """An endpoint whose runner is ``script`` on the other end of a socket pair."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.timeouts: list[float] = []
        self.released: list[socket.socket] = []
        self.host: list[socket.socket] = []
        self.threads: list[threading.Thread] = []

    def connect(self, timeout: float) -> socket.socket:
        self.timeouts.append(timeout)
        host, runner = socket.socketpair()
        host.settimeout(timeout)
        self.host.append(host)
        thread = threading.Thread(target=self._run, args=(runner,), daemon=True)
        thread.start()
        self.threads.append(thread)
        return host

    def _run(self, runner: socket.socket) -> None:
        with runner:
            self.script(runner)

    def describe(self) -> str:
        return "the scripted runner"

    def release(self, sock: socket.socket) -> None:
        self.released.append(sock)
        sock.close()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(10)


def answering(*frames: dict[str, Any], seen: list[Any] | None = None) -> Script:
    """A runner that reads one frame, then sends ``frames``, reading an answer after each
    that carries "req"."""

    def script(runner: socket.socket) -> None:
        got = wire.recv_frame(runner)
        if seen is not None:
            seen.append(got)
        for frame in frames:
            wire.send_frame(runner, frame)
            if "req" in frame:
                answer = wire.recv_frame(runner)
                if seen is not None:
                    seen.append(answer)

    return script


def test_a_ping_answered_ok_is_true_and_its_connection_released() -> None:
    seen: list[Any] = []
    endpoint = Scripted(answering({"ok": 1}, seen=seen))
    assert RunnerClient(endpoint).ping(timeout=3) is True
    endpoint.join()
    assert seen == [{"op": "ping"}]
    assert endpoint.timeouts == [3]
    assert endpoint.released == endpoint.host


def test_a_ping_waits_two_seconds_by_default() -> None:
    endpoint = Scripted(answering({"ok": True}))
    assert RunnerClient(endpoint).ping() is True
    assert endpoint.timeouts == [channel.PING_TIMEOUT_SECONDS] == [2.0]


@pytest.mark.parametrize("answer", [{"ok": False}, {}, {"ok": 0}])
def test_a_ping_answered_not_ok_is_false(answer: dict[str, Any]) -> None:
    endpoint = Scripted(answering(answer))
    assert RunnerClient(endpoint).ping() is False
    assert endpoint.released == endpoint.host


def test_a_ping_closed_without_an_answer_is_false_and_not_released() -> None:
    endpoint = Scripted(answering())
    assert RunnerClient(endpoint).ping() is False
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_a_ping_answered_with_garbage_is_false_and_not_released() -> None:
    def garbage(runner: socket.socket) -> None:
        wire.recv_frame(runner)
        runner.sendall(b"\x00\x00\x00\x02[]")

    endpoint = Scripted(garbage)
    assert RunnerClient(endpoint).ping() is False
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_a_ping_with_no_runner_is_false() -> None:
    class Nobody:
        def connect(self, timeout: float) -> socket.socket:
            raise RunnerUnavailable("nobody")

    class Refused:
        def connect(self, timeout: float) -> socket.socket:
            raise ConnectionRefusedError("refused")

    assert RunnerClient(Nobody()).ping() is False  # type: ignore[arg-type]
    assert RunnerClient(Refused()).ping() is False  # type: ignore[arg-type]


def test_a_turn_sends_its_op_and_returns_the_result_released() -> None:
    seen: list[Any] = []
    endpoint = Scripted(answering({"ok": True, "replies": ["hi"]}, seen=seen))
    result = RunnerClient(endpoint).turn({"turn_id": "t"}, timeout=4)
    endpoint.join()
    assert result == {"ok": True, "replies": ["hi"]}
    assert seen == [{"op": "turn", "turn": {"turn_id": "t"}}]
    assert endpoint.timeouts == [4]
    assert endpoint.released == endpoint.host


def test_a_flush_is_sent_as_its_op() -> None:
    seen: list[Any] = []
    endpoint = Scripted(answering({"ok": True}, seen=seen))
    RunnerClient(endpoint).turn({}, timeout=4, op="flush")
    endpoint.join()
    assert seen == [{"op": "flush", "turn": {}}]


def test_requests_are_answered_by_the_handler_with_their_size() -> None:
    seen: list[Any] = []
    handled: list[tuple[dict[str, Any], int]] = []
    request = {"req": 1, "op": "standing.get"}
    endpoint = Scripted(answering(request, {"req": 2}, {"done": 1}, seen=seen))

    def handle(frame: dict[str, Any], size: int) -> dict[str, Any]:
        handled.append((frame, size))
        return {"req": frame["req"], "ok": True}

    assert RunnerClient(endpoint).turn({}, timeout=5, handle=handle) == {"done": 1}
    endpoint.join()
    assert handled == [(request, len(wire.encode(request))), ({"req": 2}, len(b'{"req":2}'))]
    assert seen[1:] == [{"req": 1, "ok": True}, {"req": 2, "ok": True}]


def test_without_a_handler_requests_are_refused_and_the_turn_goes_on() -> None:
    seen: list[Any] = []
    endpoint = Scripted(answering({"req": 9}, {"done": 1}, seen=seen))
    assert RunnerClient(endpoint).turn({}, timeout=5) == {"done": 1}
    endpoint.join()
    assert seen[1] == {"req": 9, "ok": False, "error": REFUSED}


def test_each_frame_is_held_to_the_request_limit_of_its_time() -> None:
    big = {"req": 1, "pad": "x" * 100}
    limits = iter([1000, 50])
    endpoint = Scripted(answering(big, {"done": 1, "pad": "y" * 60}))
    with pytest.raises(TurnFailed) as caught:
        RunnerClient(endpoint).turn(
            {},
            timeout=5,
            handle=lambda frame, size: {"req": 1},
            request_limit=lambda: next(limits),
        )
    size = len(wire.encode({"done": 1, "pad": "y" * 60}))
    assert caught.value.message == (
        f"runner at the scripted runner: frame of {size} bytes exceeds 50"
    )
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_the_default_request_limit_is_the_frame_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MAX_FRAME_BYTES", 20)
    endpoint = Scripted(answering({"done": 1, "pad": "y" * 30}))
    with pytest.raises(TurnFailed, match=r"exceeds 20$"):
        RunnerClient(endpoint).turn({}, timeout=5)


def test_a_runner_closing_without_answering_fails_the_turn() -> None:
    endpoint = Scripted(answering())
    with pytest.raises(TurnFailed) as caught:
        RunnerClient(endpoint).turn({}, timeout=5)
    assert caught.value.message == (
        "runner at the scripted runner: the runner closed the turn without answering"
    )
    assert caught.value.__suppress_context__
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_a_handler_refusing_a_request_fails_the_turn() -> None:
    def refuse(frame: dict[str, Any], size: int) -> dict[str, Any]:
        raise wire.ProtocolError("too big for this turn")

    endpoint = Scripted(answering({"req": 1}))
    with pytest.raises(TurnFailed) as caught:
        RunnerClient(endpoint).turn({}, timeout=5, handle=refuse)
    assert caught.value.message == "runner at the scripted runner: too big for this turn"


def test_a_turn_past_its_deadline_fails_with_the_timeout_named() -> None:
    hold = threading.Event()

    def silent(runner: socket.socket) -> None:
        wire.recv_frame(runner)
        hold.wait(10)

    endpoint = Scripted(silent)
    try:
        with pytest.raises(TurnFailed) as caught:
            RunnerClient(endpoint).turn({}, timeout=0.25)
    finally:
        hold.set()
    assert caught.value.message == "the turn did not finish within 0.25s"
    assert caught.value.__suppress_context__
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_a_cancelled_turn_fails_as_cancelled_and_is_not_released() -> None:
    hold = threading.Event()
    cancel = Cancel()

    def cancelled(runner: socket.socket) -> None:
        wire.recv_frame(runner)
        cancel.cancel()  # while the host waits for the result
        hold.wait(10)

    endpoint = Scripted(cancelled)
    try:
        with pytest.raises(TurnFailed) as caught:
            RunnerClient(endpoint).turn({}, timeout=10, cancel=cancel)
    finally:
        hold.set()
    assert caught.value.message == "the turn was cancelled"
    assert caught.value.__suppress_context__
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_a_turn_cancelled_before_it_starts_fails_as_cancelled() -> None:
    cancel = Cancel()
    cancel.cancel()  # the socket is shut as soon as the turn attaches it
    endpoint = Scripted(lambda runner: None)
    with pytest.raises(TurnFailed) as caught:
        RunnerClient(endpoint).turn({}, timeout=5, cancel=cancel)
    assert caught.value.message == "the turn was cancelled"
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_the_handle_is_detached_when_the_turn_ends() -> None:
    cancel = Cancel()
    endpoint = Scripted(answering({"ok": True}))
    RunnerClient(endpoint).turn({}, timeout=5, cancel=cancel)
    assert cancel._sock is None
    assert endpoint.released == endpoint.host


def test_a_result_read_whole_after_a_cancel_is_closed_not_released() -> None:
    class LateCancel(Cancel):
        def detach(self) -> None:
            super().detach()
            self.cancelled = True  # the cancel came as the result arrived

    endpoint = Scripted(answering({"ok": True}))
    assert RunnerClient(endpoint).turn({}, timeout=5, cancel=LateCancel()) == {"ok": True}
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_a_turn_to_no_runner_is_runner_unavailable() -> None:
    class Nobody:
        def connect(self, timeout: float) -> socket.socket:
            raise RunnerUnavailable("nobody")

    with pytest.raises(RunnerUnavailable):
        RunnerClient(Nobody()).turn({}, timeout=1)  # type: ignore[arg-type]


def test_a_ping_answered_slower_than_its_timeout_is_false() -> None:
    """Each byte of the answer comes well within the timeout, the whole answer after it:
    the ping's one deadline covers the whole exchange, not each read."""
    stop = threading.Event()

    def drip(runner: socket.socket) -> None:
        wire.recv_frame(runner)
        body = wire.encode({"ok": True})
        for byte in len(body).to_bytes(4, "big") + body:
            if stop.wait(0.1):
                return
            try:
                runner.sendall(bytes([byte]))
            except OSError:
                return

    endpoint = Scripted(drip)
    try:
        assert RunnerClient(endpoint).ping(timeout=0.5) is False
    finally:
        stop.set()
    assert endpoint.released == [] and endpoint.host[0].fileno() == -1


def test_an_answer_is_sent_within_the_turns_deadline_whatever_the_socket_had() -> None:
    """The answer's send takes its time from the turn's deadline, not from the timeout
    the socket was left with: here the handler leaves it non-blocking, and an answer
    larger than the socket's buffer still goes whole to a runner that reads it."""
    seen: list[Any] = []
    endpoint = Scripted(answering({"req": 1}, {"done": 1}, seen=seen))
    big = "x" * (wire.MAX_FRAME_BYTES - 100)

    def handle(frame: dict[str, Any], size: int) -> dict[str, Any]:
        endpoint.host[0].setblocking(False)
        return {"req": 1, "pad": big}

    assert RunnerClient(endpoint).turn({}, timeout=30, handle=handle) == {"done": 1}
    endpoint.join()
    assert seen[1] == {"req": 1, "pad": big}
