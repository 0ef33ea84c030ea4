"""Frames and the socket connection: size caps, bad frames, no symlinks followed."""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import wire


def serve_once(path: Path, reply: bytes | None = None) -> list[dict[str, object]]:
    """A listener that records one frame and answers it (or sends ``reply`` raw)."""
    got: list[dict[str, object]] = []
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            frame = wire.recv_frame(conn)
            if frame is not None:
                got.append(frame)
            if reply is None:
                wire.send_frame(conn, {"ok": True, "echo": frame})
            else:
                conn.sendall(reply)
        server.close()

    threading.Thread(target=run, daemon=True).start()
    return got


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # AF_UNIX paths are limited to about 100 bytes; pytest's tmp paths can be longer.
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="w", dir="/tmp"))
    yield path
    shutil.rmtree(path)


def test_request_round_trip(short_tmp: Path) -> None:
    path = short_tmp / "s.sock"
    serve_once(path)
    assert wire.request(path, {"op": "ping", "text": "héllo"}, 5) == {
        "ok": True,
        "echo": {"op": "ping", "text": "héllo"},
    }


def test_a_symlinked_socket_is_never_followed(short_tmp: Path) -> None:
    other = short_tmp / "other-group.sock"
    got = serve_once(other)  # another group's runner
    planted = short_tmp / "runner.sock"
    planted.symlink_to(other)  # what a hostile container could do in its runtime folder
    with pytest.raises(wire.NoPeer, match=r"a symlink; refusing to connect"):
        wire.request(planted, {"op": "turn", "text": "private"}, 2)
    assert got == []  # nothing reached the other socket
    os.unlink(planted)
    planted.write_text("not a socket")
    with pytest.raises(wire.NoPeer, match="not a socket"):
        wire.request(planted, {"op": "ping"}, 2)


def test_nothing_listening(short_tmp: Path) -> None:
    with pytest.raises(wire.NoPeer):
        wire.request(short_tmp / "none.sock", {"op": "ping"}, 2)


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (struct.pack(">I", wire.MAX_FRAME_BYTES + 1), "exceeds"),
        (struct.pack(">I", 9) + b"not json!", "not UTF-8 JSON"),
        (struct.pack(">I", 2) + b"[]", "not a JSON object"),
        (struct.pack(">I", 10) + b"{}", "closed in the middle of a frame"),
        (b"", "closed the connection without answering"),
    ],
)
def test_bad_answers_are_protocol_errors(short_tmp: Path, reply: bytes, needle: str) -> None:
    path = short_tmp / "s.sock"
    serve_once(path, reply)
    with pytest.raises(wire.ProtocolError, match=needle):
        wire.request(path, {"op": "ping"}, 5)


def test_oversized_frame_is_not_sent(short_tmp: Path) -> None:
    a, b = socket.socketpair()
    with a, b, pytest.raises(wire.ProtocolError, match="exceeds"):
        wire.send_frame(a, {"text": "x" * (wire.MAX_FRAME_BYTES + 1)})


def test_the_wire_format_is_a_length_and_compact_utf8_json() -> None:
    a, b = socket.socketpair()
    with a, b:
        wire.send_frame(a, {"text": "記憶 ✓", "n": [1, 2]})
        body = '{"text":"記憶 ✓","n":[1,2]}'.encode()
        assert b.recv(1000) == struct.pack(">I", len(body)) + body


def test_a_message_with_a_lone_surrogate_is_sent_with_its_non_ascii_escaped() -> None:
    # it has no UTF-8 form; escaped, it reads back the same
    message = {"text": "\ud800 é ✓", "n": [1, 2]}
    body = b'{"text":"\\ud800 \\u00e9 \\u2713","n":[1,2]}'
    assert wire.encode(message) == body
    assert wire.encode({"text": "é ✓"}) == '{"text":"é ✓"}'.encode()
    a, b = socket.socketpair()
    with a, b:
        wire.send_frame(a, message)
        assert wire.recv_frame(b) == message


def test_a_frame_larger_than_one_read_arrives_whole() -> None:
    a, b = socket.socketpair()
    with a, b:
        big = {"text": "x" * 300_000}
        threading.Thread(target=wire.send_frame, args=(a, big), daemon=True).start()
        assert wire.recv_sized(b) == (big, 300_000 + len('{"text":""}'))


def test_a_frame_exactly_at_the_limit_passes_and_one_byte_more_does_not() -> None:
    a, b = socket.socketpair()
    with a, b:
        message = {"t": "y" * 100}
        size = len(b'{"t":""}') + 100
        wire.send_frame(a, message, limit=size)
        assert wire.recv_frame(b, limit=size) == message
        with pytest.raises(wire.ProtocolError, match=f"frame of {size + 1} bytes exceeds {size}"):
            wire.send_frame(a, {"t": "y" * 101}, limit=size)
        wire.send_frame(a, {"t": "y" * 101})
        with pytest.raises(wire.ProtocolError, match=f"frame of {size + 1} bytes exceeds {size}"):
            wire.recv_frame(b, limit=size)


def test_a_request_is_bounded_by_one_deadline_however_the_peer_paces_bytes(
    short_tmp: Path,
) -> None:
    path = short_tmp / "drip.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)

    def drip() -> None:
        conn, _ = server.accept()
        with conn:
            wire.recv_frame(conn)
            conn.sendall(struct.pack(">I", 100))
            try:
                for _ in range(100):  # a byte every 0.1 s: no single read ever times out
                    threading.Event().wait(0.1)
                    conn.sendall(b" ")
            except OSError:
                pass
        server.close()

    threading.Thread(target=drip, daemon=True).start()
    with pytest.raises(TimeoutError, match=r"the deadline passed|timed out"):
        wire.request(path, {"op": "ping"}, 1.0)


def test_a_deadline_not_yet_passed_leaves_the_rest_of_it() -> None:
    import time

    a, b = socket.socketpair()
    with a, b:
        wire.send_frame(a, {"ok": True}, time.monotonic() + 0.5)
        assert wire.recv_frame(b, time.monotonic() + 0.5) == {"ok": True}
        assert 0 < (b.gettimeout() or 0) <= 0.5
        with pytest.raises(TimeoutError, match="the deadline passed"):
            wire.recv_frame(b, time.monotonic() - 0.001)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"[" * 50_000 + b"]" * 50_000, "frame is JSON nested too deeply"),
        (b"[1, 2]", "frame is not a JSON object"),
        (b"\xff\xfe", "frame is not UTF-8 JSON"),
    ],
)
def test_bad_bodies_are_named(body: bytes, error: str) -> None:
    with pytest.raises(wire.ProtocolError, match=error):
        wire.decode(body)


def test_a_peer_that_closes_mid_frame_or_without_answering(short_tmp: Path) -> None:
    a, b = socket.socketpair()
    with b:
        a.sendall(struct.pack(">I", 10) + b"{")
        a.close()
        with pytest.raises(wire.ProtocolError, match="connection closed in the middle of a frame"):
            wire.recv_frame(b)
    serve_once(short_tmp / "quiet.sock", reply=b"")
    with pytest.raises(
        wire.ProtocolError, match="the peer closed the connection without answering"
    ):
        wire.request(short_tmp / "quiet.sock", {"op": "ping"}, 5)


def test_refusals_carry_their_error_numbers(short_tmp: Path) -> None:
    import errno

    with pytest.raises(wire.NoPeer) as missing:
        wire.request(short_tmp / "none.sock", {"op": "ping"}, 2)
    assert missing.value.errno == errno.ENOENT and "nothing listens at" in str(missing.value)
    (short_tmp / "file").write_text("x")
    with pytest.raises(wire.NoPeer) as wrong:
        wire.request(short_tmp / "file", {"op": "ping"}, 2)
    assert wrong.value.errno == errno.ENOTSOCK and "is not a socket; refusing" in str(wrong.value)
    stale = short_tmp / "stale.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(stale))
    sock.close()  # a socket file nobody listens on
    with pytest.raises(wire.NoPeer) as refused:
        wire.request(stale, {"op": "ping"}, 2)
    assert refused.value.errno == errno.ECONNREFUSED


# exact words: a test that only searches for a phrase lets a garbled message through


def _message(raised: pytest.ExceptionInfo[BaseException]) -> str:
    return str(raised.value)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"[" * 50_000 + b"]" * 50_000, "frame is JSON nested too deeply"),
        (b"[1, 2]", "frame is not a JSON object"),
    ],
)
def test_bad_bodies_are_named_exactly(body: bytes, error: str) -> None:
    with pytest.raises(wire.ProtocolError) as raised:
        wire.decode(body)
    assert _message(raised) == error


def test_the_end_of_a_connection_is_named_exactly(short_tmp: Path) -> None:
    a, b = socket.socketpair()
    with b:
        a.sendall(struct.pack(">I", 10) + b"{")
        a.close()
        with pytest.raises(wire.ProtocolError) as raised:
            wire.recv_frame(b)
    assert _message(raised) == "connection closed in the middle of a frame"
    serve_once(short_tmp / "quiet.sock", reply=b"")
    with pytest.raises(wire.ProtocolError) as raised:
        wire.request(short_tmp / "quiet.sock", {"op": "ping"}, 5)
    assert _message(raised) == "the peer closed the connection without answering"
    with pytest.raises(wire.NoPeer) as raised:
        wire.request(short_tmp / "none.sock", {"op": "ping"}, 2)
    assert raised.value.strerror == (
        f"nothing listens at {short_tmp / 'none.sock'} (No such file or directory)"
    )


def test_a_deadline_reached_exactly_has_passed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import time

    a, b = socket.socketpair()
    with a, b:
        monkeypatch.setattr(time, "monotonic", lambda: 100.0)
        with pytest.raises(TimeoutError) as raised:
            wire.send_frame(a, {"ok": True}, 100.0)
        assert _message(raised) == "the deadline passed"


def test_sending_to_a_peer_that_never_reads_meets_the_deadline() -> None:
    import time

    a, b = socket.socketpair()
    with a, b:
        a.settimeout(None)  # blocking: only the deadline can end the send
        with pytest.raises(TimeoutError):
            wire.send_frame(a, {"text": "x" * (wire.MAX_FRAME_BYTES - 100)}, time.monotonic() + 0.3)


def test_a_request_to_a_peer_that_never_reads_meets_its_timeout(short_tmp: Path) -> None:
    path = short_tmp / "deaf.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True).start()
    try:
        with pytest.raises(TimeoutError):
            wire.request(path, {"text": "x" * (wire.MAX_FRAME_BYTES - 100)}, 0.5)
    finally:
        for conn in held:
            conn.close()
        server.close()


def test_a_full_connection_queue_fails_at_once_instead_of_waiting(short_tmp: Path) -> None:
    import errno

    path = short_tmp / "full.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(0)  # nobody accepts: one pending connection fills the queue
    held = []
    try:
        while True:
            client = socket.socket(socket.AF_UNIX)
            client.setblocking(False)
            try:
                client.connect(str(path))
            except BlockingIOError:
                client.close()
                break
            held.append(client)
        with pytest.raises(wire.NoPeer) as raised:
            wire.request(path, {"op": "ping"}, 30)
        assert raised.value.errno == errno.EAGAIN
        assert raised.value.strerror == f"{path} is busy: its queue of connections is full"
        stale = short_tmp / "stale.sock"
        gone = socket.socket(socket.AF_UNIX)
        gone.bind(str(stale))
        gone.close()
        with pytest.raises(wire.NoPeer) as refused:
            wire.request(stale, {"op": "ping"}, 2)
        assert refused.value.strerror == f"nothing listens at {stale} (Connection refused)"
    finally:
        for client in held:
            client.close()
        server.close()
