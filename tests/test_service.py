"""One daemon per home: the lock, `down` escalating, `up` refusing to double."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.config import load_config
from orchestrator.errors import OrchestratorError
from orchestrator.home import LOCK_FILE, Home, lock_holder
from orchestrator.service import down, up

# A stand-in daemon: takes the home's lock like `serve`, then behaves as told.
HOLDER = """
import fcntl, signal, sys, time
lock = open(sys.argv[1], "a+")
fcntl.flock(lock, fcntl.LOCK_EX)
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif sys.argv[2] == "second-term":
    count = []
    signal.signal(signal.SIGTERM, lambda *_: count.append(1) or (len(count) > 1 and sys.exit(0)))
print("locked", flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.ensure_writable()
    return h


@pytest.fixture
def holder(home: Home) -> Iterator[callable]:  # type: ignore[valid-type]
    started: list[subprocess.Popen[str]] = []

    def start(mode: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(home.state_dir / LOCK_FILE), mode],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_lock_holder_names_the_process_from_the_kernel(home: Home, holder) -> None:  # type: ignore[no-untyped-def]
    assert lock_holder(home) is None
    process = holder("plain")
    (home.state_dir / "orchestrator.pid").write_text("999999\n")  # a stale pid file
    assert lock_holder(home) == process.pid
    process.kill()
    process.wait()
    assert lock_holder(home) is None


def test_down_stops_a_daemon_that_drains(home: Home, holder) -> None:  # type: ignore[no-untyped-def]
    process = holder("plain")  # the default SIGTERM handler ends it at once
    result = down(home, drain_wait=30, term_wait=30, kill_wait=30)
    assert result.pid == process.pid and result.steps == ["SIGTERM: drain"]
    assert not result.forced and lock_holder(home) is None


def test_down_escalates_to_a_second_sigterm(home: Home, holder) -> None:  # type: ignore[no-untyped-def]
    process = holder("second-term")
    result = down(home, drain_wait=0.5, term_wait=30, kill_wait=30)
    assert result.pid == process.pid
    assert result.steps == ["SIGTERM: drain", "SIGTERM again: stop now"]
    assert not result.forced and lock_holder(home) is None


def test_down_escalates_to_sigkill_and_says_so(home: Home, holder) -> None:  # type: ignore[no-untyped-def]
    process = holder("stubborn")
    result = down(home, drain_wait=0.3, term_wait=0.3, kill_wait=30)
    assert result.steps == ["SIGTERM: drain", "SIGTERM again: stop now", "SIGKILL"]
    assert result.forced and lock_holder(home) is None
    assert process.wait(10) == -9


def test_down_with_nothing_running(home: Home) -> None:
    assert down(home).pid is None


def test_up_refuses_while_a_process_holds_the_lock_without_answering(home: Home, holder) -> None:  # type: ignore[no-untyped-def]
    process = holder("stubborn")
    with pytest.raises(OrchestratorError, match=f"daemon {process.pid} holds .* does not answer"):
        up(home, timeout=5)
    time.sleep(0.2)
    assert lock_holder(home) == process.pid  # nothing else took it


def test_reload_applies_a_new_token_and_refuses_a_broken_file(tmp_path: Path) -> None:
    import json as jsonlib
    import socket as socketlib
    import urllib.error
    import urllib.request

    from orchestrator import wire
    from orchestrator.daemon.core import Daemon
    from orchestrator.runtime.fake import FakeBackend
    from orchestrator.runtime.lifecycle import GroupRuntime
    from orchestrator.service import Service
    from orchestrator.store.messages import open_queue

    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = Home(tmp_path / "home")
    home.ensure_writable()
    first, second = "a" * 20, "b" * 20
    home.config_file.write_text(f"http:\n  listen: '127.0.0.1:{port}'\n  token: {first}\n")
    config = load_config(home)
    runtime = GroupRuntime(home, config, FakeBackend(), lambda: "i", ready=lambda _: True)
    queue = open_queue(home)
    daemon = Daemon(home, config, runtime, queue, concurrency=1)
    service = Service(home, daemon)
    service.start_channels()

    def status_with(token: str) -> int:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/groups", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    try:
        assert status_with(first) == 200
        home.config_file.write_text(f"http:\n  listen: '127.0.0.1:{port}'\n  token: {second}\n")
        answer = wire.request(home.state_dir / "orchestrator.sock", {"op": "reload"}, 30)
        assert answer["ok"] and answer["channels_restarted"] == ["http"]
        assert (status_with(first), status_with(second)) == (401, 200)
        home.config_file.write_text("http:\n  token: short\n")
        answer = wire.request(home.state_dir / "orchestrator.sock", {"op": "reload"}, 30)
        assert answer["ok"] is False and "shorter than 16" in answer["error"]
        assert status_with(second) == 200  # the running configuration was kept
        facts = jsonlib.loads((home.state_dir / "daemon.json").read_text())
        assert facts["channels"]["http"] == f"http://127.0.0.1:{port}"
    finally:
        service.stop_channels()
        daemon.relay.usage.close()
        queue.close()


def test_a_failed_up_shows_only_the_lines_of_this_start(home: Home) -> None:
    (home.state_dir / "orchestrator.log").write_text("OLD LINE from a run last week\n" * 50)
    home.config_file.write_text("concurrency: lots\n")
    with pytest.raises(OrchestratorError) as caught:
        up(home, timeout=60)
    assert "the daemon exited while starting" in caught.value.message
    assert "concurrency" in caught.value.message and "OLD LINE" not in caught.value.message
