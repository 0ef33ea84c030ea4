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
