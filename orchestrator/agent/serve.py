"""The runner's long-lived server: a Unix socket in the group's runtime folder, or, when
the backend has runners dial the daemon (ORCHESTRATOR_DIAL), connections it opens to the
daemon's runner port (``dial.py``); no other container can reach it then.

Each connection carries frames (see ``orchestrator.wire``): ``{"op": "ping"}`` answers
``{"ok": true, ...}``; ``{"op": "turn", "turn": {...}}`` runs one turn and answers with
its replies; ``{"op": "flush", "turn": {...}}`` flushes the sessions served since the
runner started (before an idle container stops). A bad frame closes that connection
only; the server goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from orchestrator import __version__
from orchestrator.agent.hostlink import HostLink
from orchestrator.agent.providers.base import TurnWaits
from orchestrator.agent.runner import Runner
from orchestrator.agent.settings import AgentSettings
from orchestrator.limits import OFFLINE_CONTEXT_TOKENS, model_request_cap
from orchestrator.protocol import FLUSH_OP, BadFrame, TurnRequest
from orchestrator.wire import ProtocolError, recv_frame, send_frame

log = logging.getLogger(__name__)


class RunnerServer:
    def __init__(self, settings: AgentSettings, runner: Runner | None = None) -> None:
        self.settings = settings
        self.runner = runner or Runner(settings)
        self.stopping = threading.Event()
        self.sock: socket.socket | None = None

    def bind(self) -> None:
        path = self.settings.socket_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left over from a previous container
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # only our uid (and root) may connect
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        sock.listen(16)
        self.sock = sock

    def serve_forever(self) -> None:
        assert self.sock is not None
        self.sock.settimeout(0.5)
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.stopping.is_set():
                    break
                raise
            threading.Thread(target=self.serve_connection, args=(conn,), daemon=True).start()

    def serve_connection(
        self, conn: socket.socket, on_first_frame: Callable[[], None] | None = None
    ) -> None:
        """Answer the frames of one connection until it closes; ``on_first_frame`` is
        called when the first one arrives (a dialled connection is then in use)."""
        with conn:
            while True:
                try:
                    request = recv_frame(conn)
                except (ProtocolError, OSError) as exc:
                    log.warning("closing a connection after a bad frame: %s", exc)
                    return
                if on_first_frame is not None:
                    on_first_frame()
                    on_first_frame = None
                if request is None:
                    return
                link = HostLink(conn, model_request_cap(OFFLINE_CONTEXT_TOKENS))
                try:
                    send_frame(conn, self.answer(request, link))
                except (ProtocolError, OSError) as exc:
                    log.warning("could not answer: %s", exc)
                    return

    def answer(self, request: dict[str, Any], host: HostLink | None = None) -> dict[str, Any]:
        """The answer to one frame; ``host`` is the connection's link to the host, which
        a turn uses for its requests."""
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "runner": __version__, "provider": self.settings.provider}
        if op == "turn":
            try:
                turn = TurnRequest.from_wire(request.get("turn"))
            except BadFrame as exc:
                return {"ok": False, "error": str(exc)}
            if host is not None and turn.window_tokens:
                # a model request may carry as much as the model's window holds
                host.frame_limit = model_request_cap(turn.window_tokens)
            try:
                result = self.runner.handle(turn, host)
            except TurnWaits as exc:  # the host delivers it again later: not a failure
                log.info("turn %s waits: %s", turn.turn_id, exc)
                return {"ok": False, "error": str(exc), "wait": True}
            except Exception as exc:  # a failed turn must not take the runner down
                log.exception("turn %s failed", turn.turn_id)
                return {"ok": False, "error": f"turn failed: {type(exc).__name__}: {exc}"}
            return result.to_wire(turn.turn_id)
        if op == FLUSH_OP:  # outside any turn: the host is about to stop the container
            try:
                turn = TurnRequest.from_wire(request.get("turn"))
            except BadFrame as exc:
                return {"ok": False, "error": str(exc)}
            try:
                done = self.runner.flush_idle(turn, host)
            except Exception as exc:
                log.exception("idle flush %s failed", turn.turn_id)
                return {"ok": False, "error": f"flush failed: {type(exc).__name__}: {exc}"}
            flushed = [{"session": d.session, "appended_chars": d.appended_chars} for d in done]
            return {"ok": True, "flushed": flushed}
        return {"ok": False, "error": f"unknown op {op!r}; expected ping, turn or {FLUSH_OP}"}

    def stop(self, *_: object) -> None:
        self.stopping.set()


def serve(settings: AgentSettings) -> None:
    """Run until SIGTERM or SIGINT: on the runner's socket, or dialling the daemon."""
    server = RunnerServer(settings)
    if settings.dial is not None:
        dial(server, settings)
        return
    server.bind()
    if settings.egress_socket is not None:
        from orchestrator.agent.egress import start_forwarder

        start_forwarder(settings.egress_socket)
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGINT, server.stop)
    log.info("runner listening on %s (provider %s)", settings.socket_path, settings.provider)
    try:
        server.serve_forever()
    finally:
        if server.sock is not None:
            server.sock.close()
        with contextlib.suppress(FileNotFoundError):
            settings.socket_path.unlink()


def dial(server: RunnerServer, settings: AgentSettings) -> None:
    """Keep connections open to the daemon's runner port until SIGTERM or SIGINT."""
    from orchestrator.agent.dial import Dialer

    assert settings.dial is not None
    if settings.credential is None:
        raise SystemExit("ORCHESTRATOR_DIAL is set without ORCHESTRATOR_CREDENTIAL")
    dialer = Dialer(server, settings.dial, settings.credential)
    if settings.egress_socket is not None:
        from orchestrator.agent.egress import start_forwarder

        start_forwarder(settings.egress_socket)
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGINT, server.stop)
    log.info("runner dialling the daemon at %s (provider %s)", settings.dial, settings.provider)
    dialer.run()


def main() -> int:
    """``orchestrator agent serve`` with settings from the environment."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    serve(AgentSettings.from_env())
    return 0
