"""The CLI socket under faults, rate-limited logs, and text from containers on a terminal."""

from __future__ import annotations

import errno
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator import wire
from orchestrator.channels import control as control_module
from orchestrator.channels.control import ControlChannel
from orchestrator.cli.output import safe_line, safe_text
from orchestrator.home import Home
from orchestrator.lograte import RateLimitFilter


class FlakyListener:
    """A listening socket whose accept() first fails as if out of file descriptors."""

    def __init__(self, conn: socket.socket, failures: int) -> None:
        self.conn = conn
        self.failures = failures
        self.calls = 0

    def accept(self) -> tuple[socket.socket, None]:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(errno.EMFILE, "Too many open files")
        if self.calls == self.failures + 1:
            return self.conn, None
        while True:  # nothing more to accept until the channel closes
            time.sleep(0.05)
            if self.channel.closed:  # type: ignore[attr-defined]
                raise OSError(errno.EBADF, "closed")


def channel_for(home: Path) -> ControlChannel:
    daemon = SimpleNamespace(home=Home(home))
    channel = ControlChannel(daemon)  # type: ignore[arg-type]
    channel.closed = False
    channel.open_connections = 0
    import threading

    channel.lock = threading.Lock()
    return channel


def test_the_accept_loop_survives_running_out_of_descriptors(home: Path) -> None:
    ours, theirs = socket.socketpair()
    channel = channel_for(home)
    listener = FlakyListener(theirs, failures=5)
    listener.channel = channel  # type: ignore[attr-defined]
    channel.sock = listener  # type: ignore[assignment]
    import threading

    thread = threading.Thread(target=channel._accept, daemon=True)
    thread.start()
    ours.settimeout(30)
    wire.send_frame(ours, {"op": "ping"})
    answer = wire.recv_frame(ours)
    assert answer is not None and answer["ok"] is True
    assert listener.calls >= 6 and thread.is_alive()
    channel.closed = True
    thread.join(10)
    assert not thread.is_alive()
    ours.close()


def test_idle_and_excess_cli_connections_are_closed(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(control_module, "CONTROL_MAX_CONNECTIONS", 2)
    monkeypatch.setattr(control_module, "CONTROL_IDLE_TIMEOUT_SECONDS", 0.5)
    h = Home(home)
    h.ensure_writable()
    daemon = SimpleNamespace(home=h)
    channel = ControlChannel(daemon)  # type: ignore[arg-type]
    channel.start()
    idle: list[socket.socket] = []
    try:
        path = h.state_dir / "orchestrator.sock"
        for _ in range(2):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(path))
            s.settimeout(30)
            idle.append(s)
        while channel.open_connections < 2:
            time.sleep(0.01)
        extra = socket.socket(socket.AF_UNIX)
        extra.connect(str(path))
        extra.settimeout(30)
        assert extra.recv(10) == b""  # over the cap
        for s in idle:
            assert s.recv(10) == b""  # idle past the timeout
        # The server counts a connection until its own side is closed, a moment after
        # the peer sees the end: wait for that, not for a time.
        deadline = time.monotonic() + 10
        while channel.open_connections > 0:
            assert time.monotonic() < deadline, "closed connections were never released"
            time.sleep(0.01)
        assert wire.request(path, {"op": "ping"}, 10)["ok"] is True
    finally:
        for s in [*idle, *([extra] if "extra" in locals() else [])]:
            s.close()
        channel.stop()


def test_log_lines_of_one_kind_are_rate_limited() -> None:
    limiter = RateLimitFilter(burst=3, window=0.3)

    def record(msg: str, arg: object) -> logging.LogRecord:
        return logging.LogRecord("x", logging.WARNING, __file__, 1, msg, (arg,), None)

    passed = [limiter.filter(record("accept failed (%s)", i)) for i in range(100)]
    assert passed.count(True) == 3
    assert limiter.filter(record("another kind %s", 1))  # other kinds are not held back
    time.sleep(0.35)
    later = record("accept failed (%s)", 101)
    assert limiter.filter(later) and "[97 similar lines suppressed]" in later.getMessage()


def test_container_text_is_escaped_for_the_terminal() -> None:
    hostile = "ok\x1b]0;owned\x07 \x1b]52;c;ZXZpbA==\x07\x1b[2J\u202egnp.exe\r\nsecond line\tend"
    shown = safe_text(hostile)
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\r" not in shown and "\nsecond line\tend" in shown
    line = safe_line("failed\nFAKE: dead 123 -> orchestrator retry 123")
    assert "\n" not in line and line.startswith("failed\\nFAKE")


def test_non_utf8_arguments_are_refused_with_exit_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--home", str(tmp_path), "group", "add", b"a\xffb"],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert b"argument 5 ('a\\\\xffb') is not valid UTF-8" in result.stderr
    assert not (tmp_path / "groups").exists() or not list((tmp_path / "groups").iterdir())


@pytest.mark.parametrize("bad", ["Fam\x07ily", "Fam\nily"])
def test_group_names_with_control_characters_leave_nothing_behind(run, home: Path, bad) -> None:  # type: ignore[no-untyped-def]
    result = run("group", "add", bad, "--folder", "fam")
    assert result.exit_code == 2 and "name: contains" in result.stderr
    assert not (home / "groups/fam").exists()
    assert run("group", "add", "Family", "--folder", "fam").exit_code == 0
