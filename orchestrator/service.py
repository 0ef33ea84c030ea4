"""Running the daemon as a process: ``serve`` in the foreground, ``up``/``down`` in the
background. One daemon per home (a lock in ``state/``); pid in ``state/orchestrator.pid``,
log of background runs in ``state/orchestrator.log``."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from orchestrator import wire
from orchestrator.channels.control import SOCKET_NAME
from orchestrator.config import Home
from orchestrator.errors import DaemonNotRunning, OrchestratorError
from orchestrator.limits import DRAIN_TIMEOUT_SECONDS

log = logging.getLogger("orchestrator.service")
PID_FILE = "orchestrator.pid"
LOCK_FILE = "orchestrator.lock"
LOG_FILE = "orchestrator.log"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["error"] = self.formatException(record.exc_info)
        return json.dumps(data)


def setup_logging(log_format: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def serve(home: Home, concurrency: int | None = None) -> None:
    """Run the daemon in the foreground until SIGTERM or SIGINT, then drain."""
    from orchestrator.channels import load_channels
    from orchestrator.daemon import Daemon
    from orchestrator.image.agent import agent_image_ref
    from orchestrator.queue import MessageQueue
    from orchestrator.runtime.docker import DockerBackend
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root

    home.ensure_writable()
    lock = open(home.state_dir / LOCK_FILE, "a+")  # noqa: SIM115 (held for the process)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise OrchestratorError(
            f"a daemon already runs for {home.root} (pid {read_pid(home) or '?'})",
            hint="stop it with: orchestrator down",
        ) from None
    config = home.load_config()
    client = connect()
    runtime = GroupRuntime(
        home,
        config,
        DockerBackend(client),
        lambda: agent_image_ref(client, config.image),
        skills_root=default_skills_root(),
    )
    queue = MessageQueue(home.state_dir / "queue.db")
    daemon = Daemon(home, config, runtime, queue, concurrency or config.concurrency)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    daemon.start()
    channels = [cls(daemon) for cls in load_channels() if cls.enabled(daemon)]
    for channel in channels:
        channel.start()
    pid_file = home.state_dir / PID_FILE
    pid_file.write_text(f"{os.getpid()}\n")
    log.info(
        "orchestrator daemon %d serving %s (channels: %s; concurrency %d)",
        os.getpid(),
        home.root,
        ", ".join(c.name for c in channels),
        daemon.concurrency,
    )
    try:
        stop.wait()
    finally:
        log.info("draining: no new messages; waiting for turns in flight")
        for channel in channels:
            with contextlib.suppress(Exception):
                channel.stop()
        daemon.drain()
        queue.close()
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
        log.info("stopped")
        lock.close()


def read_pid(home: Home) -> int | None:
    try:
        return int((home.state_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def control_request(home: Home, message: dict[str, Any], timeout: float = 330.0) -> dict[str, Any]:
    """One request to the daemon's CLI channel; DaemonNotRunning when none answers."""
    path = home.state_dir / SOCKET_NAME
    try:
        return wire.request(path, message, timeout)
    except wire.NoPeer:
        raise DaemonNotRunning(
            f"no orchestrator daemon answers at {path}", hint="start it with: orchestrator up"
        ) from None
    except (OSError, wire.ProtocolError) as exc:
        raise OrchestratorError(f"the daemon at {path} failed to answer: {exc}") from None


def daemon_running(home: Home) -> bool:
    try:
        return bool(control_request(home, {"op": "ping"}, timeout=2).get("ok"))
    except OrchestratorError:
        return False


def up(home: Home, timeout: float = 60.0) -> int:
    """Start the daemon in the background; its pid once it answers."""
    if daemon_running(home):
        return read_pid(home) or 0
    home.ensure_writable()
    log_path = home.state_dir / LOG_FILE
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "--home", str(home.root), "serve"],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise OrchestratorError(
                "the daemon exited while starting: " + " | ".join(tail), hint=f"see {log_path}"
            )
        if daemon_running(home):
            return process.pid
        time.sleep(0.1)
    raise OrchestratorError(
        f"the daemon did not answer within {timeout:.0f}s", hint=f"see {log_path}"
    )


def down(home: Home, timeout: float = DRAIN_TIMEOUT_SECONDS + 10) -> int | None:
    """Stop the background daemon (SIGTERM, it drains); its pid, or None if none ran."""
    pid = read_pid(home)
    if pid is None or not _alive(pid):
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return pid
        time.sleep(0.1)
    raise OrchestratorError(
        f"daemon {pid} did not stop within {timeout:.0f}s", hint=f"kill it with: kill {pid}"
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        if state == "Z":
            return False
    return True
