"""The CLI channel: a Unix socket at ``state/orchestrator.sock`` (mode 0600), used by
``orchestrator send``, ``chat``, ``retry`` and ``status``. Frames as in ``wire``."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import threading
import time
from typing import Any

from orchestrator import __version__
from orchestrator.channels.base import Channel
from orchestrator.daemon.core import Inbound
from orchestrator.errors import GroupPaused, OrchestratorError, SenderRefused
from orchestrator.home import CONTROL_SOCKET as SOCKET_NAME
from orchestrator.limits import (
    CONTROL_IDLE_TIMEOUT_SECONDS,
    CONTROL_MAX_CONNECTIONS,
    TURN_TIMEOUT_SECONDS,
)
from orchestrator.store.messages import Message
from orchestrator.wire import ProtocolError, recv_frame, send_frame

log = logging.getLogger("orchestrator.channels.cli")


# accept() faults that pass: out of descriptors or memory (back off), or a client gone
_ACCEPT_TRANSIENT = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_ACCEPT_RETRY = (errno.EINTR, errno.ECONNABORTED, errno.EAGAIN, errno.EPROTO)


def local(message: Message) -> dict[str, Any]:
    """A message for the operator's command line: each file its replies carry with the
    path of the host's copy in its outbox (this socket is the host's own)."""
    data = message.to_dict()
    if message.files:
        data["files"] = [{**f.to_dict(), "path": f.path} for f in message.files]
    return data


class ControlChannel(Channel):
    name = "cli"

    def start(self) -> None:
        path = self.daemon.home.state_dir / SOCKET_NAME
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.sock.bind(str(path))
        finally:
            os.umask(old)
        self.sock.listen(64)
        self.path = path
        self.closed = False
        self.open_connections = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, name="cli-channel", daemon=True)
        self.thread.start()

    def where(self) -> str:
        return str(self.daemon.home.state_dir / SOCKET_NAME)

    def stop(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _accept(self) -> None:
        """Accept until stopped. Running out of descriptors backs off and goes on; the
        loop never ends while the channel is open."""
        backoff = 0.05
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError as exc:
                if self.closed:
                    return
                if exc.errno in _ACCEPT_RETRY:
                    continue
                level = logging.WARNING if exc.errno in _ACCEPT_TRANSIENT else logging.ERROR
                log.log(level, "CLI socket accept failed (%s); backing off", exc.strerror)
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.05
            with self.lock:
                if self.open_connections >= CONTROL_MAX_CONNECTIONS:
                    conn.close()
                    log.warning("CLI connection refused: %d already open", CONTROL_MAX_CONNECTIONS)
                    continue
                self.open_connections += 1
            try:
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
            except RuntimeError:  # no thread could be started
                conn.close()
                with self.lock:
                    self.open_connections -= 1

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(CONTROL_IDLE_TIMEOUT_SECONDS)  # an idle client does not hold a thread
        try:
            with conn:
                while (request := recv_frame(conn)) is not None:
                    if request.get("op") == "send" and request.get("stream"):
                        self._send_streaming(conn, request)
                    else:
                        send_frame(conn, self.answer(request))
        except (ProtocolError, OSError) as exc:
            log.warning("closing a CLI connection: %s", exc)
        finally:
            with self.lock:
                self.open_connections -= 1

    def _send_streaming(self, conn: socket.socket, request: dict[str, Any]) -> None:
        """``send`` with ``stream``: each reply is sent as {"reply": {seq, text}} the moment
        it is stored (a long turn shows progress), then the final answer."""
        answer = self.answer({**request, "wait": False})
        if not answer.get("ok"):
            send_frame(conn, answer)
            return
        message_id = answer["message"]["id"]
        timeout = float(request.get("timeout") or TURN_TIMEOUT_SECONDS)
        shown = 0
        last = None
        for last in self.daemon.watch(message_id, timeout):
            files = {f.reply: f for f in last.files}
            for seq in range(shown, len(last.replies)):
                reply: dict[str, Any] = {"seq": seq, "text": last.replies[seq]}
                if seq in files:  # the host's copy, in its outbox: the operator's to open
                    reply["file"] = {**files[seq].to_dict(), "path": files[seq].path}
                send_frame(conn, {"reply": reply})
            shown = len(last.replies)
        final = last or self.daemon.queue.get(message_id)
        if final is None:
            send_frame(conn, {"ok": False, "error": f"message {message_id} vanished"})
            return
        send_frame(conn, {"ok": True, "message": local(final)})

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        daemon = self.daemon
        try:
            if op == "ping":
                return {"ok": True, "pid": os.getpid(), "version": __version__}
            if op == "send":
                message = daemon.accept(
                    Inbound(
                        str(request.get("group", "")),
                        request.get("text", ""),
                        chat=str(request.get("chat") or "cli"),
                        sender=str(request.get("sender") or "operator"),
                        channel=self.name,
                        thread=request.get("thread"),
                    )
                )
                if request.get("wait", True):
                    timeout = float(request.get("timeout") or TURN_TIMEOUT_SECONDS)
                    message = daemon.wait(message.id, timeout) or message
                return {"ok": True, "message": local(message)}
            if op == "get":
                found = daemon.queue.get(str(request.get("id", "")))
                if found is None:
                    return {"ok": False, "error": f"no message {request.get('id')!r}"}
                return {"ok": True, "message": local(found)}
            if op == "reload":
                if daemon.on_reload is None:
                    return {"ok": False, "error": "this daemon cannot reload"}
                return daemon.on_reload()
            if op == "retry":
                ok = daemon.retry(str(request.get("id", "")))
                return {
                    "ok": ok,
                    "error": None
                    if ok
                    else f"no dead-lettered message with id {request.get('id')!r}",
                }
            if op == "follow":
                # the task runs of a chat since a time: `orchestrator chat` shows their
                # replies as they arrive (a reminder firing while the chat is open)
                group = daemon.runtime.store.find(str(request.get("group", "")))
                since = request.get("since")
                if isinstance(since, bool) or not isinstance(since, int | float):
                    return {"ok": False, "error": "follow needs since, a time in seconds"}
                runs = daemon.tasks.runs_in_chat(
                    group.folder, str(request.get("chat")), since, channel=self.name
                )
                shown = []
                for task_id, message_id in runs:
                    run = daemon.queue.get(message_id)
                    if run is not None:
                        shown.append({"task": task_id, **run.to_dict()})
                return {"ok": True, "runs": shown}
            if op == "search":
                # memory search for the command line: the daemon's index is open and its
                # embedder loaded, where a command would load both each time
                group = daemon.runtime.store.find(str(request.get("group", "")))
                query, limit = request.get("query"), request.get("max_results", 6)
                if not isinstance(query, str) or not query.strip():
                    return {"ok": False, "error": "search needs a query", "exit": 2}
                if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50:
                    return {"ok": False, "error": "max_results must be 1 to 50", "exit": 2}
                hits = daemon.relay.search(group, query, limit, fresh=True)
                return {"ok": True, "group": group.folder, "results": [h.to_dict() for h in hits]}
            if op == "listing":  # `orchestrator group list`'s rows
                return {
                    "ok": True,
                    "groups": [item.to_dict() for item in daemon.runtime.store.listing()],
                }
            if op == "groups":
                # `orchestrator status`'s rows: the daemon's engine connection is open and
                # its groups' configurations parsed, where a command would do both again
                return {
                    "ok": True,
                    **daemon.runtime.overview().to_dict(),
                    "runner_recreations": dict(daemon.runtime.dead_sockets),
                }
            if op == "status":
                return {
                    "ok": True,
                    "counts": daemon.queue.counts(),
                    "dead": [m.to_dict() for m in daemon.queue.dead_letters()],
                    "inflight": daemon.inflight,
                    "delivered_since_start": daemon.stats.delivered,
                    "failed_deliveries_since_start": daemon.stats.failed,
                    "concurrency": daemon.concurrency,
                    "per_group_concurrency": daemon.per_group,
                    "pauses": [p.to_dict() for p in daemon.queue.pauses()],
                    # containers made again because their runner stopped answering
                    "runner_recreations": dict(daemon.runtime.dead_sockets),
                }
        except SenderRefused as exc:
            return {"ok": False, "refused": True, "error": exc.message, "hint": exc.hint}
        except GroupPaused as exc:
            return {"ok": False, "paused": True, "error": exc.message, "hint": exc.hint}
        except OrchestratorError as exc:
            # the CLI exits with the code the error would have had locally (2: bad input)
            return {"ok": False, "error": exc.message, "hint": exc.hint, "exit": exc.exit_code}
        return {"ok": False, "error": f"unknown op {op!r}"}
