"""One image inspect straight over the engine's Unix socket, for a command whose whole
work is that inspect (a build with nothing to do): neither the engine's SDK nor an HTTP
library is imported, nor anything but the standard library's light modules (HTTP/1.0:
the engine answers and closes)."""

from __future__ import annotations

import json
import os
import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
INSPECT_ANSWER_MAX_BYTES = 4 * 1024 * 1024  # an image's inspect is a few KiB
# what a path segment keeps as it is (RFC 3986's unreserved characters)
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class DirectFailed(Exception):
    """The engine could not be asked this way, or did not answer as it should (the
    reason is the message)."""


def engine_host() -> str:
    """Where the engine is: $DOCKER_HOST, or the default socket."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


def quote_segment(text: str) -> str:
    """``text`` as one URL path segment: every byte but the unreserved ones
    percent-encoded ("/" and ":" included)."""
    return "".join(
        chr(byte) if chr(byte) in _UNRESERVED else f"%{byte:02X}" for byte in text.encode()
    )


def inspect_image(ref: str, timeout: float = 10.0) -> dict[str, Any] | None:
    """``GET /images/<ref>/json``: the image's attributes, or None when the engine says
    it is missing. DirectFailed when the engine is not on a Unix socket or does not
    answer as it should."""
    host = engine_host()
    if not host.startswith("unix://"):
        raise DirectFailed("not a Unix socket")
    request = f"GET /images/{quote_segment(ref)}/json HTTP/1.0\r\nHost: docker\r\n\r\n"
    chunks = []
    received = 0
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(host.removeprefix("unix://"))
            sock.sendall(request.encode())
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                received += len(chunk)
                if received > INSPECT_ANSWER_MAX_BYTES:
                    raise DirectFailed("the answer is too large")
    except OSError as exc:
        raise DirectFailed(str(exc)) from None
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split(b" ")
    if len(status) < 2 or not status[0].startswith(b"HTTP/"):
        raise DirectFailed("not an HTTP answer")
    if status[1] == b"404":
        return None
    if status[1] != b"200":
        raise DirectFailed(f"HTTP {status[1].decode(errors='replace')}")
    try:
        found = json.loads(body)
    except ValueError as exc:
        raise DirectFailed(str(exc)) from None
    if not isinstance(found, dict):
        raise DirectFailed("not an image")
    return found
