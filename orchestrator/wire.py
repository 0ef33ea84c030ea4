"""Frames between host and container: a 4-byte big-endian length, then UTF-8 JSON.

Used on both sides of the Unix socket in the group's runtime folder. A frame over
``MAX_FRAME_BYTES`` or one that is not a JSON object is a protocol violation.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import struct
import time
from pathlib import Path
from typing import Any

MAX_FRAME_BYTES = 1024 * 1024
_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame."""


class NoPeer(OSError):
    """Nothing accepts connections on the socket."""


def _budget(sock: socket.socket, deadline: float | None) -> None:
    """Give the next socket call what is left of ``deadline`` (time.monotonic())."""
    if deadline is None:
        return
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the deadline passed")
    sock.settimeout(remaining)


def encode(message: dict[str, Any]) -> bytes:
    """A frame's body: ``message`` as UTF-8 JSON. Text holding a lone surrogate (JSON
    escapes one as \\ud800, and Python reads it so: a model's answer may hold one) has no
    UTF-8 form; such a message is written with its non-ASCII characters escaped, which
    reads back the same."""
    try:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":")).encode("ascii")


def send_frame(
    sock: socket.socket,
    message: dict[str, Any],
    deadline: float | None = None,
    limit: int = MAX_FRAME_BYTES,
) -> None:
    data = encode(message)
    if len(data) > limit:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds {limit}")
    _budget(sock, deadline)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _read_exact(sock: socket.socket, size: int, deadline: float | None) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        _budget(sock, deadline)  # a peer sending a byte at a time still meets the deadline
        chunk = sock.recv(min(remaining, 65536))
        if not chunk:
            if not chunks and remaining == size:
                return None
            raise ProtocolError("connection closed in the middle of a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def decode(body: bytes) -> dict[str, Any]:
    """A frame's body as a JSON object; ProtocolError for anything else."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("frame is JSON nested too deeply") from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


def recv_frame(
    sock: socket.socket, deadline: float | None = None, limit: int = MAX_FRAME_BYTES
) -> dict[str, Any] | None:
    """The next frame, or None when the peer closed the connection cleanly; see
    recv_sized."""
    received = recv_sized(sock, deadline, limit)
    return None if received is None else received[0]


def recv_sized(
    sock: socket.socket, deadline: float | None = None, limit: int = MAX_FRAME_BYTES
) -> tuple[dict[str, Any], int] | None:
    """The next frame and its size in bytes, or None when the peer closed cleanly.

    With ``deadline`` (a time.monotonic() value) the whole frame must arrive before it
    (TimeoutError), however the peer spaces its bytes; without, the socket's timeout
    applies to each read. ``limit`` caps the frame's size (a model request during a
    turn may be larger than MAX_FRAME_BYTES; everything else is not).
    """
    header = _read_exact(sock, _HEADER.size, deadline)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise ProtocolError(f"frame of {size} bytes exceeds {limit}")
    body = _read_exact(sock, size, deadline) or b""
    return decode(body), size


def connect_no_follow(sock: socket.socket, path: Path) -> None:
    """Connect to the socket file at ``path`` itself, never through a symlink.

    The folder may be writable by an untrusted container, which could put a symlink to
    another group's socket there. The file is opened with O_PATH|O_NOFOLLOW and the
    connection made through /proc/self/fd, so what was checked is what is connected to.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise NoPeer(exc.errno, f"nothing listens at {path} ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISSOCK(mode):
            kind = "a symlink" if stat.S_ISLNK(mode) else "not a socket"
            raise NoPeer(errno.ENOTSOCK, f"{path} is {kind}; refusing to connect")
        try:
            sock.connect(f"/proc/self/fd/{fd}")
        except BlockingIOError as exc:  # a timeout is set: a full queue does not block
            raise NoPeer(exc.errno, f"{path} is busy: its queue of connections is full") from None
        except OSError as exc:
            raise NoPeer(exc.errno, f"nothing listens at {path} ({exc.strerror})") from None
    finally:
        os.close(fd)


def request(path: Path, message: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one frame on a new connection to ``path`` and return the answer frame, all
    within ``timeout`` seconds.

    NoPeer when nothing listens; ProtocolError for a bad or missing answer; OSError
    (TimeoutError included) for a connection that fails or stalls midway.
    """
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        connect_no_follow(sock, path)
        send_frame(sock, message, deadline)
        answer = recv_frame(sock, deadline)
    finally:
        sock.close()
    if answer is None:
        raise ProtocolError("the peer closed the connection without answering")
    return answer
