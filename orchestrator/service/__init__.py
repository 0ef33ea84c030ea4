"""Running the daemon as a process: ``serve`` in the foreground, ``up``/``down`` in the
background.

One daemon per home: ``serve`` takes an exclusive lock on ``state/orchestrator.lock`` and
holds it until the process ends (the kernel releases it then, never earlier), so a daemon
that is slow to stop still blocks a second one. The holder's pid comes from the kernel's
lock table, so a stale pid file cannot mislead ``down``. The daemon's facts (pid, start
time, channels) are in ``state/daemon.json``; the log of background runs in
``state/orchestrator.log``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from orchestrator.config import load_config
from orchestrator.errors import OrchestratorError
from orchestrator.fsatomic import write_atomic
from orchestrator.home import FACTS_FILE, LOCK_FILE, PID_FILE, Home, lock_holder, take_lock
from orchestrator.limits import (
    DOWN_KILL_WAIT_SECONDS,
    DOWN_TERM_WAIT_SECONDS,
    DRAIN_TIMEOUT_SECONDS,
)
from orchestrator.service.client import (  # noqa: F401 (the service's own API)
    control_request,
    control_stream,
    daemon_facts,
    daemon_running,
)
from orchestrator.versions import RELEASE

if TYPE_CHECKING:
    from orchestrator.channels.base import Channel
    from orchestrator.daemon.core import Daemon

log = logging.getLogger("orchestrator.service")
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


def setup_logging(log_format: str, debug: bool = False) -> None:
    """Log lines on stderr (INFO, or DEBUG with ``debug``), rate-limited per kind, with
    every secret the daemon knows redacted and HTTP clients' URL lines kept out."""
    from orchestrator.config.kinds import kind_loggers
    from orchestrator.lograte import RateLimitFilter
    from orchestrator.redact import RedactingFilter, quiet_clients

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(RedactingFilter())
    handler.addFilter(RateLimitFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    quiet_clients(kind_loggers())


# The lock's file object lives as long as the process: closing it would release the lock
# while the process (and its turns) may still be running.
_LOCK: list[IO[str]] = []


class Service:
    """The running daemon's process: its channels, its facts file, and reloading."""

    def __init__(self, home: Home, daemon: Daemon) -> None:
        self.home = home
        self.daemon = daemon
        self.channels: dict[str, Channel] = {}
        self.lock = threading.Lock()
        self.started = time.time()
        daemon.on_reload = self.reload

    def start_channels(self) -> None:
        for cls in self.channel_classes():
            if cls.enabled(self.daemon):
                channel = cls(self.daemon)
                channel.start()
                self.channels[channel.name] = channel

    @staticmethod
    def channel_classes() -> list[type[Channel]]:
        """The channels: the command line's, the web server's, one per chat-app kind."""
        from orchestrator.channels import load_channels
        from orchestrator.service.web import WebServer

        return [*load_channels(), WebServer]

    def stop_channels(self) -> None:
        for channel in list(self.channels.values()):
            with contextlib.suppress(Exception):
                channel.stop()
        self.channels.clear()

    def write_facts(self) -> None:
        facts = {
            "pid": os.getpid(),
            "started": self.started,
            "home": str(self.home.root),
            "channels": {c.name: c.where() for c in self.channels.values()},
            "concurrency": self.daemon.concurrency,
            "release": RELEASE,
            # what this start did to a home an older release left (``up`` says it)
            "upgrade": self.daemon.upgrade.to_dict() if self.daemon.upgrade else None,
        }
        write_atomic(self.home.state_dir / FACTS_FILE, json.dumps(facts) + "\n")

    def reload(self) -> dict[str, Any]:
        """Read orchestrator.yaml again and apply it: providers, tokens, channels, the
        runtime's settings (groups are read at each message anyway). A file that does
        not load is refused and the running configuration kept."""
        with self.lock:
            try:
                config = load_config(self.home)
            except OrchestratorError as exc:
                log.error("reload refused: %s; the running configuration is kept", exc.message)
                return {"ok": False, "error": f"reload refused: {exc.message}", "hint": exc.hint}
            old = self.daemon.config
            self.daemon.apply_config(config)
            restarted = []
            for cls in self.channel_classes():
                running = self.channels.get(cls.name)
                wanted = cls.enabled(self.daemon)
                if running is not None and (
                    not wanted or cls.settings(old) != cls.settings(config)
                ):
                    running.stop()
                    del self.channels[cls.name]
                if wanted and cls.name not in self.channels:
                    channel = cls(self.daemon)
                    channel.start()
                    self.channels[cls.name] = channel
                    restarted.append(cls.name)
            self.write_facts()
            notes = []
            if config.concurrency != old.concurrency:
                notes.append("concurrency applies at the next start")
            log.info(
                "reloaded %s (channels started again: %s)%s",
                self.home.config_file,
                ", ".join(restarted) or "none",
                "; " + "; ".join(notes) if notes else "",
            )
            return {"ok": True, "channels_restarted": restarted, "notes": notes}


def serve(home: Home, concurrency: int | None = None) -> None:
    """Run the daemon in the foreground until SIGTERM or SIGINT, then drain and exit.

    SIGHUP reloads orchestrator.yaml. A second SIGTERM or SIGINT during the drain stops
    at once: turns in flight are cancelled and delivered again at the next start.
    """
    from orchestrator.daemon.core import Daemon
    from orchestrator.image.agent import agent_image_ref
    from orchestrator.image.group import GroupImages
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root
    from orchestrator.store.messages import open_queue

    home.ensure_writable()
    _LOCK.append(take_lock(home))
    config = load_config(home)
    raise_file_limit()
    client = connect()
    if config.host_home is not None:
        check_host_home(home, config.host_home, client, agent_image_ref(client, config.image))
    backend = open_backend(config, client=client, home=home)
    # a dial-in backend checks its deployment and opens its runner port, before anything
    backend.serve(lambda: agent_image_ref(client, config.image))
    queue = open_queue(home)
    runtime = GroupRuntime(
        home,
        config,
        backend,
        lambda: agent_image_ref(client, runtime.config.image),
        skills_root=default_skills_root(),
        group_image=GroupImages(client, lambda: runtime.config.project),
    )
    daemon = Daemon(home, config, runtime, queue, concurrency or config.concurrency)
    service = Service(home, daemon)
    signals = threading.Semaphore(0)
    reload_asked = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: signals.release())
    signal.signal(signal.SIGINT, lambda *_: signals.release())
    signal.signal(signal.SIGHUP, lambda *_: reload_asked.set())
    daemon.start()
    service.start_channels()
    service.write_facts()
    write_atomic(home.state_dir / PID_FILE, f"{os.getpid()}\n")
    log.info(
        "orchestrator %s daemon %d serving %s (channels: %s; concurrency %d)",
        RELEASE,
        os.getpid(),
        home.root,
        ", ".join(f"{c.name} {c.where()}" for c in service.channels.values()),
        daemon.concurrency,
    )
    while not signals.acquire(timeout=0.5):
        if reload_asked.is_set():
            reload_asked.clear()
            service.reload()
    log.info("draining: no new messages; waiting for turns in flight (again to stop now)")
    service.stop_channels()
    stop_now = threading.Event()

    def second_signal() -> None:
        signals.acquire()
        stop_now.set()

    threading.Thread(target=second_signal, daemon=True, name="signals").start()
    daemon.drain(DRAIN_TIMEOUT_SECONDS, stop_now)
    backend.close()
    daemon.relay.close()
    daemon.relay.usage.close()
    queue.close()
    for name in (PID_FILE, FACTS_FILE):
        with contextlib.suppress(FileNotFoundError):
            (home.state_dir / name).unlink()
    log.info("stopped")
    logging.shutdown()
    # Worker threads still blocked in a system call would hold the exit; the queue is
    # closed and every turn left over is delivered again at the next start.
    os._exit(0)


def raise_file_limit() -> None:
    """Use the hard limit of open files: every connection and socket costs one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@dataclass
class UpResult:
    pid: int
    started: bool  # False: a daemon was already running
    facts: dict[str, Any] = field(default_factory=dict)


def up(home: Home, timeout: float = 60.0, debug: bool = False) -> UpResult:
    """Start the daemon in the background, unless one runs; refuses while a process
    holds the lock without answering (it may still be stopping)."""
    facts = daemon_facts(home)
    if facts is not None:
        if daemon_running(home):
            return UpResult(int(facts["pid"]), False, facts)
        raise OrchestratorError(
            f"daemon {facts['pid']} holds {home.state_dir / LOCK_FILE} but does not answer "
            "(it may be stopping)",
            hint="wait for it, or stop it with: orchestrator down",
        )
    home.ensure_writable()
    log_path = home.state_dir / LOG_FILE
    with open(log_path, "ab") as log_file:
        offset = log_file.tell()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "--home",
                str(home.root),
                *(["--debug"] if debug else []),
                "serve",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            facts = daemon_facts(home)
            if facts is not None and daemon_running(home):  # another `up` won the race
                return UpResult(int(facts["pid"]), False, facts)
            raise OrchestratorError(
                "the daemon exited while starting: " + " | ".join(_log_since(log_path, offset)),
                hint=f"see {log_path}",
            )
        if daemon_running(home):
            facts = daemon_facts(home) or {}
            if facts.get("pid") == process.pid and "channels" in facts:  # written whole
                return UpResult(process.pid, True, facts)
        time.sleep(0.1)
    raise OrchestratorError(
        f"the daemon did not answer within {timeout:.0f}s", hint=f"see {log_path}"
    )


def _log_since(path: Path, offset: int, lines: int = 5) -> list[str]:
    """The last lines this start wrote to the log."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode("utf-8", "replace")
    return [line for line in text.strip().splitlines() if line.strip()][-lines:] or [
        "(no log lines)"
    ]


@dataclass
class DownResult:
    pid: int | None  # None: no daemon was running
    steps: list[str] = field(default_factory=list)
    forced: bool = False  # SIGKILL was needed


def down(
    home: Home,
    *,
    drain_wait: float = DRAIN_TIMEOUT_SECONDS + DOWN_TERM_WAIT_SECONDS,
    term_wait: float = DOWN_TERM_WAIT_SECONDS,
    kill_wait: float = DOWN_KILL_WAIT_SECONDS,
) -> DownResult:
    """Stop the daemon, escalating: SIGTERM (it drains), SIGTERM again (it stops at
    once), SIGKILL. Every step waits for the lock to be released, which happens only
    when the process is gone. Nothing queued is lost either way."""
    pid = lock_holder(home)
    if pid is None:
        return DownResult(None)
    if pid <= 0:
        # 0: /proc/locks shows a holder outside this pid namespace so; -1: the lock is
        # held by a pid nobody recorded. Neither can be signalled from here (os.kill(0,
        # ...) would signal this process's own group).
        raise OrchestratorError(
            f"a daemon holds the lock of {home.root}, but its pid is not visible here "
            "(it runs in another pid namespace, such as a container)",
            hint="stop it where it runs (docker stop, systemctl stop), or run "
            "orchestrator down there",
        )
    result = DownResult(pid)
    for sig, wait, step in (
        (signal.SIGTERM, drain_wait, "SIGTERM: drain"),
        (signal.SIGTERM, term_wait, "SIGTERM again: stop now"),
        (signal.SIGKILL, kill_wait, "SIGKILL"),
    ):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return result
        result.steps.append(step)
        result.forced = sig == signal.SIGKILL
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if lock_holder(home) != pid:
                return result
            time.sleep(0.05)
    raise OrchestratorError(
        f"daemon {pid} still holds the lock after SIGKILL",
        hint=f"it may be stuck in the kernel (a hung file system); see: ps -o stat,wchan -p {pid}",
    )


def check_host_home(home: Home, host_home: Path, client: Any, image: str) -> None:
    """Refuse to start when ORCHESTRATOR_HOST_HOME is not this home as the engine sees
    it: a token written here must be what a container mounting that host path reads.
    Nothing else is made first, so a wrong mapping creates nothing in the wrong place."""
    import secrets

    from orchestrator.errors import InvalidConfig
    from orchestrator.runtime.engine import call_engine

    state = home.state_dir.resolve()
    root = home.root.resolve()
    if root not in state.parents:
        raise InvalidConfig(
            f"state/ ({state}) is outside the home {root}; with ORCHESTRATOR_HOST_HOME "
            "it must be inside it",
            hint="unset ORCHESTRATOR_STATE_DIR when the daemon runs in a container",
        )
    token = secrets.token_hex(16)
    check = home.state_dir / "host-home-check"
    write_atomic(check, token + "\n")
    source = host_home / state.relative_to(root)
    try:
        out = call_engine(
            "check the host path of the home",
            lambda: client.containers.run(
                image,
                ["python3", "-c", "print(open('/check/host-home-check').read().strip())"],
                volumes={str(source): {"bind": "/check", "mode": "ro"}},
                network_mode="none",
                read_only=True,
                remove=True,
                stderr=True,
                labels={"org.orchestrator.role": "host-home-check"},
            ),
        )
        seen = out.decode(errors="replace").strip()
    except Exception as exc:  # the engine could not even mount it
        seen = f"(nothing: {getattr(exc, 'message', exc)})"
    finally:
        check.unlink(missing_ok=True)
    if seen != token:
        raise InvalidConfig(
            f"ORCHESTRATOR_HOST_HOME={host_home} is not this home ({root}) as the engine "
            f"sees it: a container mounting {source} read {seen[:200]!r}, not the token "
            "written here; refusing to start",
            hint="mount the home into the daemon's container and set ORCHESTRATOR_HOST_HOME "
            "to its path on the host (compose.yaml does both)",
        )
    log.info("the home is %s on the host (checked)", host_home)
