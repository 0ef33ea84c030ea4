"""The container's end of the shell's egress gate: a forwarder on 127.0.0.1 (the
shell's ``HTTP_PROXY`` and ``HTTPS_PROXY``) to the host's proxy socket, which the host
mounts read-only. The container has no network interface but ``lo``: this is its only
way out, and the host decides every connection."""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
import time
from pathlib import Path

from orchestrator.limits import EGRESS_PORT

log = logging.getLogger(__name__)

# accept() faults that are retried at once: a client gone before it was taken, a signal
_ACCEPT_RETRY = (errno.EINTR, errno.ECONNABORTED, errno.EAGAIN, errno.EPROTO)
ACCEPT_BACKOFF_FIRST_SECONDS = 0.05
ACCEPT_BACKOFF_MAX_SECONDS = 1.0


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


def _accept(listener: socket.socket, path: Path) -> None:
    """Accept until the listener is closed. Running out of descriptors (a command holding
    many connections open) backs off and goes on: the shell keeps its way out."""
    backoff = ACCEPT_BACKOFF_FIRST_SECONDS
    while True:
        try:
            client, _ = listener.accept()
        except OSError as exc:
            if listener.fileno() == -1:
                return
            if exc.errno not in _ACCEPT_RETRY:
                log.warning("egress forwarder: accept failed (%s); backing off", exc.strerror)
                time.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_MAX_SECONDS)
            continue
        backoff = ACCEPT_BACKOFF_FIRST_SECONDS
        try:
            threading.Thread(target=_serve, args=(client, path), daemon=True).start()
        except RuntimeError:  # no thread could be started
            client.close()


def start_forwarder(path: Path, port: int = EGRESS_PORT) -> socket.socket:
    """Listen on 127.0.0.1:``port`` and forward each connection to ``path``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    threading.Thread(
        target=_accept, args=(listener, path), name="egress-forwarder", daemon=True
    ).start()
    log.info("egress forwarder on 127.0.0.1:%d to %s", port, path)
    return listener
