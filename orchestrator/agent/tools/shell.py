"""The ``shell`` tool: a command run by ``bash`` as the container's user, in one
persistent shell per conversation, so that the working folder and exported variables
carry over between calls as in a terminal.

Each call's command is written to a file in the shell's private folder and sourced by
the shell with stdin from ``/dev/null`` and stdout and stderr into an output file; the
shell then writes a per-call token and the exit code to a pipe of its own, which
the runner waits on. At the call's timeout, when the host cancels the turn, or when the
group's disk use passes its limit, the shell's processes are killed and the next call
gets a fresh shell. When the turn ends, every process the shell started is killed: the
shell and its state are all that survive a turn.

Limits: the call's timeout (default SHELL_TIMEOUT_SECONDS, at most what is left of the
turn), the output kept (its head and tail, the cut said), a file-size limit on the
shell's processes (RLIMIT_FSIZE), and the container's own (no network, pids, memory,
a size-limited ``/tmp``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import select
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.agent.settings import AgentSettings
from orchestrator.agent.tools.base import TURN, ToolError, ToolSpec, open_regular
from orchestrator.agent.tools.box import FunctionTool, Toolbox
from orchestrator.limits import (
    EGRESS_PORT,
    SHELL_COMMAND_MAX_CHARS,
    SHELL_DISK_CHECK_SECONDS,
    SHELL_FILE_MAX_BYTES,
    SHELL_OUTPUT_HEAD_BYTES,
    SHELL_OUTPUT_TAIL_BYTES,
    SHELL_TIMEOUT_MAX_SECONDS,
    SHELL_TIMEOUT_SECONDS,
)

log = logging.getLogger(__name__)

SHELL = "shell"
SPEC = ToolSpec(
    SHELL,
    "Run a command with bash in this group's sandbox (no network). The shell persists "
    "for this conversation: the working folder (it starts in /workspace/agent/files) "
    "and exported variables carry over between calls; processes left running end with "
    "the turn. Returns the exit code and the output (stdout and stderr together; long "
    "output keeps its start and end). Write lasting files under /workspace/agent/files "
    "or memory.",
    {
        "type": "object",
        "required": ["command"],
        "additionalProperties": False,
        "properties": {
            "command": {"type": "string"},
            "timeout_seconds": {
                "type": "integer",
                "description": f"at most this long (default {SHELL_TIMEOUT_SECONDS})",
            },
        },
    },
)
WATCH_SECONDS = 0.25  # how often a running call checks the host, the disk and the clock
MEASURED_FOLDERS = ("memory", "files", "sessions")  # what the group's disk limit counts
# the group's own Python packages first (images/group/Dockerfile), then the system's
SAFE_PATH = "/opt/agent-python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None  # None: killed before it finished
    output: str
    cut_bytes: int = 0  # output bytes not shown
    ended: str | None = None  # why it was stopped: timeout, cancelled, disk, exited

    def text(self) -> str:
        lines = []
        if self.ended == "timeout":
            lines.append("TIMED OUT: the command was killed; the next call gets a fresh shell")
        elif self.ended == "cancelled":
            lines.append("CANCELLED: the turn was cancelled; the command was killed")
        elif self.ended == "disk":
            lines.append(
                "KILLED: the group's disk use passed its limit (container.disk); "
                "remove files under /workspace/agent/files to make room"
            )
        elif self.ended == "exited":
            lines.append(
                f"THE SHELL EXITED (code {self.exit_code}); the next call gets a fresh shell"
            )
        else:
            lines.append(f"exit code {self.exit_code}")
        body = self.output
        if self.cut_bytes:
            head, _, tail = body.partition("\x00")
            body = f"{head}\n[... {self.cut_bytes} bytes of output cut ...]\n{tail}"
        return "\n".join(lines) + ("\n" + body if body else "")


def disk_use(root: Path) -> int:
    """Bytes allocated under the measured folders of ``root`` (symlinks not followed)."""
    total = 0
    stack = [root / name for name in MEASURED_FOLDERS]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(Path(entry.path))
        except OSError:
            continue
    return total


def _proc_stat(pid: int) -> tuple[int, int, int, int] | None:
    """(ppid, pgrp, session, start time) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _processes() -> dict[int, tuple[int, int, int, int]]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (info := _proc_stat(int(name))) is not None:
            found[int(name)] = info
    return found


def strays(shell_pid: int, *, orphans_since: int | None = None) -> list[int]:
    """Processes the shell ``shell_pid`` started, the shell itself left out: those of its
    process group or session, its descendants, and (``orphans_since``: a start time in
    clock ticks) processes adopted by PID 1 that started since then, not of this
    process's own line (a double fork or a ``setsid`` leaves the group and the tree)."""
    table = _processes()
    me = os.getpid()
    mine = {me}
    pid = me
    while pid > 1 and (info := table.get(pid)) is not None:  # this runner's ancestors
        pid = info[0]
        mine.add(pid)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = list(children.get(shell_pid, []))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    for pid, (ppid, pgrp, session, started) in table.items():
        adopted = orphans_since is not None and ppid == 1 and started >= orphans_since
        if shell_pid in (pgrp, session) or adopted:
            found.add(pid)
    return sorted(found - mine - {shell_pid})


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _uptime_ticks() -> int:
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * _clock_ticks())


class Shell:
    """One persistent bash, started on first use, in its own process group and session."""

    def __init__(
        self,
        workdir: Path,
        state_dir: Path,
        *,
        home: Path | None = None,
        file_limit: int = SHELL_FILE_MAX_BYTES,
        sweep_orphans: bool = False,
        proxy: str | None = None,
    ) -> None:
        self.proxy = proxy  # the egress gate's forwarder, when the group has the web
        self.workdir = workdir
        self.state_dir = state_dir
        self.home = home or state_dir
        self.file_limit = file_limit
        self.sweep_orphans = sweep_orphans
        self.process: subprocess.Popen[bytes] | None = None
        self.status_read: int | None = None
        self.status_fd = -1
        self.started_ticks = 0
        self.calls = 0
        self.lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _start(self) -> subprocess.Popen[bytes]:
        self.close()
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_dir / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        env = {
            "PATH": SAFE_PATH,
            "HOME": str(self.home),
            "TMPDIR": str(tmp),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "SHELL": "/bin/bash",
        }
        if self.proxy is not None:
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                env[name] = self.proxy
        status_read, status_write = os.pipe()
        try:
            process = subprocess.Popen(
                ["/bin/bash", "--noprofile", "--norc"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=self.workdir,
                env=env,
                start_new_session=True,  # its own session and process group
                pass_fds=(status_write,),
            )
        finally:
            os.close(status_write)
        # set before the first command: what the shell starts inherits them
        resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (self.file_limit,) * 2)
        resource.prlimit(process.pid, resource.RLIMIT_CORE, (0, 0))
        self.status_fd = status_write  # its number in the shell
        self.process, self.status_read = process, status_read
        self.started_ticks = _uptime_ticks()
        return process

    def run(
        self,
        command: str,
        timeout: float,
        *,
        cancelled: Callable[[], bool] = lambda: False,
        over_disk: Callable[[], bool] = lambda: False,
    ) -> ShellResult:
        with self.lock:
            process = self.process if self.process is not None and self.alive else self._start()
            assert process.stdin is not None and self.status_read is not None
            self.calls += 1
            token = os.urandom(8).hex()
            script = self.state_dir / f"cmd-{self.calls}"
            output = self.state_dir / f"out-{self.calls}"
            script.write_text(command + "\n", encoding="utf-8", errors="surrogateescape")
            line = (
                # the command runs without the status pipe: only the shell reports
                f". {_quote(script)} {self.status_fd}>&- </dev/null >{_quote(output)} 2>&1; "
                # background jobs are forgotten: their end is not the next call's output
                f"set -- $?; disown -a 2>/dev/null; "
                f"printf '%s %s\\n' {token} \"$1\" >&{self.status_fd}; set --\n"
            )
            try:
                process.stdin.write(line.encode())
                process.stdin.flush()
            except OSError:
                self.close()
                return ShellResult(None, "the shell could not start the command", ended="exited")
            ended, code = self._wait(token, timeout, cancelled, over_disk)
            if ended not in (None, "exited"):
                self.close()
            text, cut = _read_capped(output)
            for path in (script, output):
                with contextlib.suppress(OSError):
                    path.unlink()
            if ended == "exited":
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = process.wait(5)
                self.close()
            return ShellResult(code, text, cut, ended)

    def _wait(
        self,
        token: str,
        timeout: float,
        cancelled: Callable[[], bool],
        over_disk: Callable[[], bool],
    ) -> tuple[str | None, int | None]:
        assert self.status_read is not None
        deadline = time.monotonic() + timeout
        next_disk = time.monotonic() + SHELL_DISK_CHECK_SECONDS
        pending = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", None
            ready, _, _ = select.select([self.status_read], [], [], min(left, WATCH_SECONDS))
            if ready:
                chunk = os.read(self.status_read, 4096)
                if not chunk:
                    return "exited", None
                pending += chunk
                for raw in pending.split(b"\n")[:-1]:
                    parts = raw.decode(errors="replace").split()
                    if len(parts) == 2 and parts[0] == token and parts[1].isdigit():
                        return None, int(parts[1])
                pending = pending.rsplit(b"\n", 1)[-1]
                continue
            if self.process is None or self.process.poll() is not None:
                return "exited", None
            if cancelled():
                return "cancelled", None
            if time.monotonic() >= next_disk:
                next_disk = time.monotonic() + SHELL_DISK_CHECK_SECONDS
                if over_disk():
                    return "disk", None

    def end_turn(self) -> list[int]:
        """Kill what the shell started and left running; the pids killed."""
        process = self.process  # once: a reset may close the shell meanwhile
        if process is None:
            return []
        since = self.started_ticks if self.sweep_orphans else None
        pids = strays(process.pid, orphans_since=since)
        _kill(pids)
        return pids

    def close(self) -> None:
        """Kill the shell and everything it started."""
        process = self.process
        if process is not None:
            since = self.started_ticks if self.sweep_orphans else None
            # found before the shell dies: its orphans leave its tree once it is gone
            left = strays(process.pid, orphans_since=since)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            _kill(left)
            _kill(strays(process.pid, orphans_since=since))
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
            self.process = None
        if self.status_read is not None:
            os.close(self.status_read)
            self.status_read = None


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def _read_capped(path: Path) -> tuple[str, int]:
    """The output file's head and tail (joined by NUL when cut) and the bytes cut; a
    file the command replaced by something else (a FIFO, a link) reads as nothing."""
    try:
        f, size = open_regular(path)
    except OSError:
        return "", 0
    with f:
        keep = SHELL_OUTPUT_HEAD_BYTES + SHELL_OUTPUT_TAIL_BYTES
        if size <= keep:
            return _shown(f.read(keep)), 0
        head = f.read(SHELL_OUTPUT_HEAD_BYTES)
        f.seek(size - SHELL_OUTPUT_TAIL_BYTES)
        tail = f.read(SHELL_OUTPUT_TAIL_BYTES)
        return _shown(head) + "\x00" + _shown(tail), size - keep


def _shown(data: bytes) -> str:
    """Output as text: invalid UTF-8 replaced, control characters but tab and newline
    shown as escapes (binary output stays readable and harmless)."""
    text = data.decode("utf-8", errors="replace")
    return "".join(
        c if c in "\t\n" or not (ord(c) < 32 or ord(c) == 127) else f"\\x{ord(c):02x}" for c in text
    )


class ShellSource:
    """The ``shell`` tool source: one Shell per conversation (the turn's session key),
    fresh after ``/clear``, a timeout or a crash."""

    name = SHELL

    def __init__(
        self,
        agent_dir: Path,
        state_root: Path,
        *,
        home: Path | None = None,
        disk_limit: int | None = None,
        file_limit: int = SHELL_FILE_MAX_BYTES,
        sweep_orphans: bool = False,
        proxy: str | None = None,
    ) -> None:
        self.proxy = proxy
        self.home = home
        self.agent_dir = agent_dir
        self.state_root = state_root
        self.disk_limit = disk_limit
        self.file_limit = file_limit if disk_limit is None else min(file_limit, disk_limit)
        self.sweep_orphans = sweep_orphans
        self.shells: dict[str, Shell] = {}
        self.guard = threading.Lock()

    def shell_of(self, key: str) -> Shell:
        with self.guard:
            shell = self.shells.get(key)
            if shell is None:
                import hashlib  # at a shell's first start, not the runner's

                state = self.state_root / hashlib.sha256(key.encode()).hexdigest()[:16]
                shell = self.shells[key] = Shell(
                    self.agent_dir / "files",
                    state,
                    home=self.home,
                    file_limit=self.file_limit,
                    sweep_orphans=self.sweep_orphans,
                    proxy=self.proxy,
                )
            return shell

    def tools(self, box: Toolbox) -> Iterable[FunctionTool]:
        return (FunctionTool(SPEC, self._call, frozenset({TURN})),)

    def _call(self, box: Toolbox, command: str, timeout_seconds: int | None = None) -> str:
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        if len(command) > SHELL_COMMAND_MAX_CHARS:
            raise ToolError(f"command must be at most {SHELL_COMMAND_MAX_CHARS} characters")
        if "\x00" in command:
            raise ToolError("command must not hold a NUL character")
        if timeout_seconds is not None and (
            isinstance(timeout_seconds, bool)
            or not isinstance(timeout_seconds, int)
            or timeout_seconds < 1
        ):
            raise ToolError("timeout_seconds must be a whole number of seconds, at least 1")
        timeout = float(min(timeout_seconds or SHELL_TIMEOUT_SECONDS, SHELL_TIMEOUT_MAX_SECONDS))
        if box.deadline is not None:
            left = box.deadline - time.monotonic()
            if left < 1:
                raise ToolError("the turn's time is up: no command can start now")
            timeout = min(timeout, left)
        host = box.host
        limit = self.disk_limit
        result = self.shell_of(box.session_key or "default").run(
            command,
            timeout,
            cancelled=(lambda: host.closed()) if host is not None else (lambda: False),
            over_disk=(
                (lambda: disk_use(self.agent_dir) > limit) if limit is not None else (lambda: False)
            ),
        )
        return result.text()

    def end_turn(self, box: Toolbox) -> None:
        with self.guard:
            shell = self.shells.get(box.session_key or "default")
        if shell is not None and (killed := shell.end_turn()):
            log.info("turn ended: killed %d processes its shell left running", len(killed))

    def reset(self, key: str) -> None:
        with self.guard:
            shell = self.shells.pop(key, None)
        if shell is not None:
            shell.close()

    def close(self) -> None:
        for key in list(self.shells):
            self.reset(key)


def shell_source(settings: AgentSettings) -> ShellSource:
    """The runner's shell source, from its settings."""
    return ShellSource(
        settings.agent_dir,
        settings.shell_dir,
        home=settings.home_dir,
        disk_limit=settings.disk_bytes,
        sweep_orphans=settings.sandbox,
        proxy=f"http://127.0.0.1:{EGRESS_PORT}" if settings.egress_socket is not None else None,
    )
