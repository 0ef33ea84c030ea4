"""The orchestrator home: its paths, its identity and its daemon lock, and nothing above
them.

The home (``--home``, env ``ORCHESTRATOR_HOME``, default: the current directory) holds
``orchestrator.yaml``, ``groups/`` and ``state/``. ``orchestrator.config.load_config``
reads its settings.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import IO

from orchestrator.errors import HomeNotWritable, OrchestratorError
from orchestrator.limits import CONFIG_FILE_MAX_BYTES

CONFIG_FILE = "orchestrator.yaml"
STATE_DIR_ENV = "ORCHESTRATOR_STATE_DIR"
HOME_ID_FILE = "home-id"
PID_FILE = "orchestrator.pid"
LOCK_FILE = "orchestrator.lock"  # held by the daemon for as long as it runs
FACTS_FILE = "daemon.json"  # what the running daemon says of itself
CONTROL_SOCKET = "orchestrator.sock"  # the daemon's command-line channel


def _state_dir_setting(config_file: Path, root: Path) -> Path | None:
    """``state_dir`` from orchestrator.yaml when it is a usable string; the key is
    validated with the rest by ``load_config``."""
    try:
        if config_file.stat().st_size > CONFIG_FILE_MAX_BYTES:
            return None
        import yaml

        data = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, ImportError):
        return None
    except Exception:  # malformed YAML: load_config reports it
        return None
    value = data.get("state_dir") if isinstance(data, dict) else None
    if not isinstance(value, str) or not value.strip():
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else root / path


def state_dir_of(root: Path, config_file: Path) -> Path:
    """Where the state folder of the home at ``root`` is when ``config_file`` is its
    orchestrator.yaml (a restore reads the file before it is in place)."""
    env = os.environ.get(STATE_DIR_ENV)
    if env:
        return Path(env).expanduser().absolute()
    return _state_dir_setting(config_file, root) or root / "state"


@dataclass(frozen=True)
class Home:
    """Paths of one orchestrator home."""

    root: Path

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def groups_dir(self) -> Path:
        return self.root / "groups"

    @cached_property
    def identity(self) -> str:
        """This home's identity, labelled on its containers so that two homes on one
        engine never act on each other's: a hash of the home's real path when it was
        first used, kept in state/home-id (so a home that moves keeps it)."""
        path = self.state_dir / HOME_ID_FILE
        try:
            stored = path.read_text().strip()
            if re.fullmatch(r"[0-9a-f]{16}", stored):
                return stored
        except OSError:
            pass
        identity = hashlib.sha256(os.path.realpath(self.root).encode()).hexdigest()[:16]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "w") as handle:
                handle.write(identity + "\n")
        except FileExistsError:
            return self.identity_from_file(path) or identity
        except OSError:
            pass  # a read-only home: the hash of its path is its identity
        return identity

    @staticmethod
    def identity_from_file(path: Path) -> str | None:
        try:
            stored = path.read_text().strip()
        except OSError:
            return None
        return stored if re.fullmatch(r"[0-9a-f]{16}", stored) else None

    def default_project(self) -> str:
        """The project name when none is configured: the home folder's name and a short
        piece of its identity (as compose derives one from the directory), so two homes
        never share container names by default."""
        slug = re.sub(r"[^a-z0-9_-]+", "-", self.root.name.lower()).strip("-_")[:24]
        return f"{slug or 'home'}-{self.identity[:6]}"

    @cached_property
    def state_dir(self) -> Path:
        """``state/`` of the home, unless env ORCHESTRATOR_STATE_DIR or ``state_dir`` in
        orchestrator.yaml puts it elsewhere (another disk, so a group filling the disk of
        the groups cannot stop the queue)."""
        return state_dir_of(self.root, self.config_file)

    def runtime_dir(self, folder: str) -> Path:
        """Per-group folder for the host-container channel (mounted at /run/orchestrator)."""
        return self.state_dir / "run" / folder

    def ensure_writable(self) -> None:
        """Create groups/ and state/ when missing; fail with one clear line when we cannot."""
        for path in (self.root, self.groups_dir, self.state_dir):
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HomeNotWritable(
                    f"cannot create {path}: {exc.strerror}",
                    hint="pass --home DIR (or set ORCHESTRATOR_HOME) to a writable folder",
                ) from None
            if not os.access(path, os.W_OK | os.X_OK):
                raise HomeNotWritable(
                    f"{path} is not writable by uid {os.getuid()}",
                    hint="pass --home DIR (or set ORCHESTRATOR_HOME) to a writable folder",
                )


def lock_holder(home: Home) -> int | None:
    """The pid holding the home's daemon lock, from the kernel's lock table; None when
    no process holds it."""
    path = home.state_dir / LOCK_FILE
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF" ("->" marks a waiter)
        if len(fields) >= 6 and fields[1] == "FLOCK" and "->" not in fields and fields[5] == device:
            return int(fields[4])
    if not lines:  # no /proc/locks: probe the lock itself
        with open(path, "a+") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return read_pid(home) or -1
            fcntl.flock(probe, fcntl.LOCK_UN)
    return None


def take_lock(home: Home) -> IO[str]:
    """Take the home's daemon lock (held as long as the file object is open);
    OrchestratorError naming the holder when another process has it."""
    lock = open(home.state_dir / LOCK_FILE, "a+")  # noqa: SIM115 (held for the process)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        holder = lock_holder(home)
        raise OrchestratorError(
            f"a daemon already runs for {home.root} (pid {holder or '?'})",
            hint="stop it with: orchestrator down",
        ) from None
    return lock


def read_pid(home: Home) -> int | None:
    try:
        return int((home.state_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
