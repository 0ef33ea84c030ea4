"""The container's end of the shell's egress gate: a forwarder on 127.0.0.1 (the
shell's ``HTTP_PROXY`` and ``HTTPS_PROXY``) to the host's proxy socket, which the host
mounts read-only. The container has no network interface but ``lo``: this is its only
way out, and the host decides every connection."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from pathlib import Path

from orchestrator.limits import EGRESS_PORT

log = logging.getLogger(__name__)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(64 * 1024):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _serve(client: socket.socket, path: Path) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(str(path))
    except OSError as exc:
        body = f"orchestrator egress gate unavailable: {exc}\n".encode()
        with contextlib.suppress(OSError):
            client.sendall(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
            )  # fmt: skip
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def start_forwarder(path: Path, port: int = EGRESS_PORT) -> socket.socket:
    """Listen on 127.0.0.1:``port`` and forward each connection to ``path``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_serve, args=(client, path), daemon=True).start()

    threading.Thread(target=accept, name="egress-forwarder", daemon=True).start()
    log.info("egress forwarder on 127.0.0.1:%d to %s", port, path)
    return listener
