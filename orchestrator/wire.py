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
from pathlib import Path
from typing import Any

MAX_FRAME_BYTES = 1024 * 1024
_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame."""


class NoPeer(OSError):
    """Nothing accepts connections on the socket."""


def send_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds {MAX_FRAME_BYTES}")
    sock.sendall(_HEADER.pack(len(data)) + data)


def _read_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = sock.recv(min(remaining, 65536))
        if not chunk:
            if not chunks and remaining == size:
                return None
            raise ProtocolError("connection closed in the middle of a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> dict[str, Any] | None:
    """The next frame, or None when the peer closed the connection cleanly."""
    header = _read_exact(sock, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    body = _read_exact(sock, size) or b""
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


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
        except OSError as exc:
            raise NoPeer(exc.errno, f"nothing listens at {path} ({exc.strerror})") from None
    finally:
        os.close(fd)


def request(path: Path, message: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one frame on a new connection to ``path`` and return the answer frame.

    NoPeer when nothing listens; ProtocolError for a bad or missing answer; OSError for
    a connection that fails midway.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        connect_no_follow(sock, path)
        send_frame(sock, message)
        answer = recv_frame(sock)
    finally:
        sock.close()
    if answer is None:
        raise ProtocolError("the peer closed the connection without answering")
    return answer
