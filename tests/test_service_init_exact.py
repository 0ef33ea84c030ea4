"""Exact behaviour of the daemon's process (service/__init__.py) without an engine or a
daemon: the log line format, the log lines of a failed start, stopping a daemon by its
lock (fakes of the lock table, os.kill and the clock), the open-file limit, the facts
file, the channels, reloading, and the check of the host path of the home."""

from __future__ import annotations

import json
import logging
import resource
import signal
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator import service
from orchestrator.errors import InvalidConfig, OrchestratorError
from orchestrator.home import FACTS_FILE, Home
from orchestrator.versions import RELEASE


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    monkeypatch.delenv("ORCHESTRATOR_STATE_DIR", raising=False)
    home = Home(tmp_path)
    home.state_dir.mkdir(parents=True)
    return home


# the log line format


def record(message: str, *args: object, exc_info: Any = None) -> logging.LogRecord:
    rec = logging.LogRecord("orchestrator.x", logging.WARNING, __file__, 1, message, args, exc_info)
    rec.created = 1700000000.123456
    return rec


def test_a_json_line_has_time_level_logger_and_message() -> None:
    line = json.loads(service.JsonFormatter().format(record("n=%d", 5)))
    assert line == {
        "time": 1700000000.123,
        "level": "warning",
        "logger": "orchestrator.x",
        "message": "n=5",
    }


def test_a_json_line_of_an_exception_has_its_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    line = json.loads(service.JsonFormatter().format(record("failed", exc_info=exc_info)))
    assert line["message"] == "failed"
    assert line["error"].startswith("Traceback")
    assert "ValueError: boom" in line["error"]


# the log lines of a failed start


def test_the_log_since_shows_only_lines_after_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"old line\n")
    offset = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(b"first\n\n  \nsecond\n")
    assert service._log_since(path, offset) == ["first", "second"]


def test_the_log_since_keeps_the_last_five_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"".join(b"line %d\n" % n for n in range(8)))
    assert service._log_since(path, 0) == [f"line {n}" for n in range(3, 8)]
    assert service._log_since(path, 0, lines=2) == ["line 6", "line 7"]


def test_the_log_since_of_nothing_written_says_so(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"old\n")
    assert service._log_since(path, 4) == ["(no log lines)"]


def test_the_log_since_reads_bad_bytes_as_replacement_characters(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"bad \xff byte\n")
    assert service._log_since(path, 0) == ["bad \ufffd byte"]


# stopping a daemon


class Clock:
    """The clock of service.down: sleeping moves it on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Stopper:
    """A daemon ``pid`` holding the lock of the home until the kill numbered
    ``gone_after`` (1-based; None: never), and the signals it was sent with the time."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        pid: int | None = 4242,
        gone_after: int | None = 1,
        missing_at: int | None = None,
    ) -> None:
        self.pid = pid
        self.gone_after = gone_after
        self.missing_at = missing_at
        self.kills: list[tuple[int, int, float]] = []
        self.clock = Clock()
        monkeypatch.setattr(service, "lock_holder", self.lock_holder)
        monkeypatch.setattr(service.os, "kill", self.kill)
        monkeypatch.setattr(
            service, "time", SimpleNamespace(monotonic=self.clock.monotonic, sleep=self.clock.sleep)
        )

    def lock_holder(self, home: Home) -> int | None:
        assert isinstance(home, Home)
        if self.gone_after is not None and len(self.kills) >= self.gone_after:
            return None
        return self.pid

    def kill(self, pid: int, sig: int) -> None:
        if self.missing_at is not None and len(self.kills) + 1 >= self.missing_at:
            raise ProcessLookupError(pid)
        self.kills.append((pid, sig, self.clock.now - 100.0))


def test_down_with_no_holder_sends_nothing(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    stopper = Stopper(monkeypatch, pid=None)
    result = service.down(home)
    assert (result.pid, result.steps, result.forced) == (None, [], False)
    assert stopper.kills == []


@pytest.mark.parametrize("pid", [0, -1])
def test_down_with_a_holder_whose_pid_is_not_visible_says_so_and_sends_nothing(
    home: Home, monkeypatch: pytest.MonkeyPatch, pid: int
) -> None:
    # 0: /proc/locks shows a holder outside this pid namespace so (os.kill(0, ...) would
    # signal this very process group, not the daemon); -1: the lock is held, but with no
    # /proc/locks and no pid file, by nobody known
    stopper = Stopper(monkeypatch, pid=pid)
    with pytest.raises(OrchestratorError) as refused:
        service.down(home)
    assert refused.value.message == (
        f"a daemon holds the lock of {home.root}, but its pid is not visible here "
        "(it runs in another pid namespace, such as a container)"
    )
    assert refused.value.hint == (
        "stop it where it runs (docker stop, systemctl stop), or run orchestrator down there"
    )
    assert stopper.kills == []


def test_down_of_a_daemon_that_drains_sends_one_sigterm(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopper = Stopper(monkeypatch, gone_after=1)
    result = service.down(home)
    assert (result.pid, result.steps, result.forced) == (4242, ["SIGTERM: drain"], False)
    assert stopper.kills == [(4242, signal.SIGTERM, 0.0)]
    assert stopper.clock.sleeps == []


def test_down_waits_the_drain_then_sends_sigterm_again(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopper = Stopper(monkeypatch, gone_after=2)
    result = service.down(home, drain_wait=1.0, term_wait=0.5, kill_wait=0.25)
    assert result.steps == ["SIGTERM: drain", "SIGTERM again: stop now"]
    assert result.forced is False
    assert [(pid, sig) for pid, sig, _ in stopper.kills] == [
        (4242, signal.SIGTERM),
        (4242, signal.SIGTERM),
    ]
    assert stopper.kills[1][2] == pytest.approx(1.0, abs=0.051)
    assert set(stopper.clock.sleeps) == {0.05}


def test_down_escalates_to_sigkill_and_says_it_was_forced(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopper = Stopper(monkeypatch, gone_after=3)
    result = service.down(home, drain_wait=1.0, term_wait=0.5, kill_wait=0.25)
    assert result.steps == ["SIGTERM: drain", "SIGTERM again: stop now", "SIGKILL"]
    assert result.forced is True
    assert [sig for _, sig, _ in stopper.kills] == [signal.SIGTERM, signal.SIGTERM, signal.SIGKILL]
    assert stopper.kills[2][2] == pytest.approx(1.5, abs=0.11)


def test_down_waits_by_default_the_drain_and_the_term_and_kill_waits(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopper = Stopper(monkeypatch, gone_after=None)
    with pytest.raises(OrchestratorError) as caught:
        service.down(home)
    drain = service.DRAIN_TIMEOUT_SECONDS + service.DOWN_TERM_WAIT_SECONDS
    times = [at for _, _, at in stopper.kills]
    assert times[0] == 0.0
    assert times[1] == pytest.approx(drain, abs=0.06)
    assert times[2] == pytest.approx(drain + service.DOWN_TERM_WAIT_SECONDS, abs=0.12)
    total = drain + service.DOWN_TERM_WAIT_SECONDS + service.DOWN_KILL_WAIT_SECONDS
    assert stopper.clock.now - 100.0 == pytest.approx(total, abs=0.2)
    assert caught.value.message == "daemon 4242 still holds the lock after SIGKILL"
    assert caught.value.hint == (
        "it may be stuck in the kernel (a hung file system); see: ps -o stat,wchan -p 4242"
    )


def test_down_of_a_process_already_gone_has_no_steps(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopper = Stopper(monkeypatch, gone_after=None, missing_at=1)
    result = service.down(home)
    assert (result.pid, result.steps, result.forced) == (4242, [], False)
    assert stopper.kills == []


def test_down_of_a_process_gone_before_the_second_signal_stops_there(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopper = Stopper(monkeypatch, gone_after=None, missing_at=2)
    result = service.down(home, drain_wait=0.1)
    assert result.steps == ["SIGTERM: drain"]
    assert len(stopper.kills) == 1


# the open-file limit


class Limits:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, soft: int, hard: int) -> None:
        self.limits = (soft, hard)
        self.set: list[tuple[int, tuple[int, int]]] = []
        self.fault: BaseException | None = None
        monkeypatch.setattr(resource, "getrlimit", self.getrlimit)
        monkeypatch.setattr(resource, "setrlimit", self.setrlimit)

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.limits

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        if self.fault is not None:
            raise self.fault
        self.set.append((which, limits))


def test_the_file_limit_is_raised_to_the_hard_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = Limits(monkeypatch, 1024, 4096)
    service.raise_file_limit()
    assert limits.set == [(resource.RLIMIT_NOFILE, (4096, 4096))]


def test_the_file_limit_at_the_hard_limit_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = Limits(monkeypatch, 4096, 4096)
    service.raise_file_limit()
    assert limits.set == []


def test_an_unlimited_hard_file_limit_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = Limits(monkeypatch, 1024, resource.RLIM_INFINITY)
    service.raise_file_limit()
    assert limits.set == [
        (resource.RLIMIT_NOFILE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    ]


@pytest.mark.parametrize("fault", [ValueError("too big"), OSError("not allowed")])
def test_a_file_limit_that_cannot_be_raised_is_left(
    monkeypatch: pytest.MonkeyPatch, fault: BaseException
) -> None:
    limits = Limits(monkeypatch, 1024, 4096)
    limits.fault = fault
    service.raise_file_limit()
    assert limits.set == []


# the service: channels, facts, reloading


class FakeChannel:
    name = "fake"
    wanted = True
    fail_stop = False
    log: list[str] = []

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon

    @classmethod
    def enabled(cls, daemon: Any) -> bool:
        return cls.wanted

    @classmethod
    def settings(cls, config: Any) -> tuple[object, ...]:
        return (config.port,)

    def where(self) -> str:
        return f"at {self.daemon.config.port}"

    def start(self) -> None:
        self.log.append(f"start {self.name} {self.daemon.config.port}")

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")
        if self.fail_stop:
            raise RuntimeError("stuck")


class OtherChannel(FakeChannel):
    name = "other"

    @classmethod
    def settings(cls, config: Any) -> tuple[object, ...]:
        return ()


class FakeDaemon:
    def __init__(self, port: int = 1, concurrency: int = 3) -> None:
        self.config = SimpleNamespace(port=port, concurrency=concurrency)
        self.concurrency = concurrency
        self.upgrade: Any = None
        self.on_reload: Any = None
        self.applied: list[Any] = []

    def apply_config(self, config: Any) -> None:
        self.applied.append(config)
        self.config = config


@pytest.fixture()
def channels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    log: list[str] = []
    monkeypatch.setattr(FakeChannel, "log", log)
    monkeypatch.setattr(FakeChannel, "wanted", True)
    monkeypatch.setattr(FakeChannel, "fail_stop", False)
    monkeypatch.setattr(OtherChannel, "wanted", True)
    monkeypatch.setattr(
        service.Service, "channel_classes", staticmethod(lambda: [FakeChannel, OtherChannel])
    )
    return log


def test_the_service_answers_the_daemons_reloads(home: Home) -> None:
    daemon = FakeDaemon()
    svc = service.Service(home, daemon)  # type: ignore[arg-type]
    assert daemon.on_reload == svc.reload
    assert svc.channels == {}


def test_the_channels_are_the_command_lines_the_web_servers_and_the_chat_apps() -> None:
    from orchestrator.channels import load_channels
    from orchestrator.service.web import WebServer

    assert service.Service.channel_classes() == [*load_channels(), WebServer]


def test_only_enabled_channels_start(home: Home, channels: list[str]) -> None:
    OtherChannel.wanted = False
    svc = service.Service(home, FakeDaemon())  # type: ignore[arg-type]
    svc.start_channels()
    assert channels == ["start fake 1"]
    assert list(svc.channels) == ["fake"]
    assert isinstance(svc.channels["fake"], FakeChannel)


def test_stopping_the_channels_stops_each_even_after_a_failure(
    home: Home, channels: list[str]
) -> None:
    svc = service.Service(home, FakeDaemon())  # type: ignore[arg-type]
    svc.start_channels()
    FakeChannel.fail_stop = True
    svc.stop_channels()
    assert channels[2:] == ["stop fake", "stop other"]
    assert svc.channels == {}


def test_the_facts_file_names_the_process_and_its_channels(home: Home, channels: list[str]) -> None:
    daemon = FakeDaemon(port=7, concurrency=5)
    daemon.upgrade = SimpleNamespace(to_dict=lambda: {"from": "1.0"})
    svc = service.Service(home, daemon)  # type: ignore[arg-type]
    svc.start_channels()
    svc.write_facts()
    text = (home.state_dir / FACTS_FILE).read_text()
    assert text.endswith("}\n")
    facts = json.loads(text)
    assert facts == {
        "pid": service.os.getpid(),
        "started": svc.started,
        "home": str(home.root),
        "channels": {"fake": "at 7", "other": "at 7"},
        "concurrency": 5,
        "release": RELEASE,
        "upgrade": {"from": "1.0"},
    }


def test_the_facts_file_without_an_upgrade_says_null(home: Home, channels: list[str]) -> None:
    svc = service.Service(home, FakeDaemon())  # type: ignore[arg-type]
    svc.write_facts()
    assert json.loads((home.state_dir / FACTS_FILE).read_text())["upgrade"] is None


def reloading(
    home: Home, monkeypatch: pytest.MonkeyPatch, config: Any
) -> tuple[service.Service, FakeDaemon]:
    daemon = FakeDaemon(port=1, concurrency=3)
    svc = service.Service(home, daemon)  # type: ignore[arg-type]
    svc.start_channels()

    def load_config(given: Home) -> Any:
        assert given is home
        if isinstance(config, BaseException):
            raise config
        return config

    monkeypatch.setattr(service, "load_config", load_config)
    return svc, daemon


def test_a_reload_restarts_only_the_channels_whose_settings_changed(
    home: Home, monkeypatch: pytest.MonkeyPatch, channels: list[str]
) -> None:
    new = SimpleNamespace(port=2, concurrency=3)
    svc, daemon = reloading(home, monkeypatch, new)
    answer = svc.reload()
    assert answer == {"ok": True, "channels_restarted": ["fake"], "notes": []}
    assert daemon.applied == [new]
    assert channels[2:] == ["stop fake", "start fake 2"]
    assert json.loads((home.state_dir / FACTS_FILE).read_text())["channels"] == {
        "fake": "at 2",
        "other": "at 2",
    }


def test_a_reload_stops_a_channel_no_longer_wanted_and_starts_a_new_one(
    home: Home, monkeypatch: pytest.MonkeyPatch, channels: list[str]
) -> None:
    OtherChannel.wanted = False
    svc, _ = reloading(home, monkeypatch, SimpleNamespace(port=1, concurrency=3))
    FakeChannel.wanted = False
    OtherChannel.wanted = True
    answer = svc.reload()
    assert answer["channels_restarted"] == ["other"]
    assert channels[1:] == ["stop fake", "start other 1"]
    assert list(svc.channels) == ["other"]


def test_a_reload_with_nothing_changed_restarts_nothing(
    home: Home, monkeypatch: pytest.MonkeyPatch, channels: list[str], caplog: Any
) -> None:
    svc, _ = reloading(home, monkeypatch, SimpleNamespace(port=1, concurrency=3))
    with caplog.at_level(logging.INFO, logger="orchestrator.service"):
        assert svc.reload() == {"ok": True, "channels_restarted": [], "notes": []}
    assert channels[2:] == []
    assert f"reloaded {home.config_file} (channels started again: none)" in caplog.messages


def test_a_reload_changing_concurrency_says_it_applies_at_the_next_start(
    home: Home, monkeypatch: pytest.MonkeyPatch, channels: list[str], caplog: Any
) -> None:
    svc, _ = reloading(home, monkeypatch, SimpleNamespace(port=2, concurrency=9))
    with caplog.at_level(logging.INFO, logger="orchestrator.service"):
        answer = svc.reload()
    assert answer["notes"] == ["concurrency applies at the next start"]
    assert (
        f"reloaded {home.config_file} (channels started again: fake); "
        "concurrency applies at the next start"
    ) in caplog.messages


def test_a_reload_of_a_broken_file_keeps_the_running_configuration(
    home: Home, monkeypatch: pytest.MonkeyPatch, channels: list[str], caplog: Any
) -> None:
    svc, daemon = reloading(home, monkeypatch, InvalidConfig("bad key x", hint="fix x"))
    with caplog.at_level(logging.ERROR, logger="orchestrator.service"):
        answer = svc.reload()
    assert answer == {"ok": False, "error": "reload refused: bad key x", "hint": "fix x"}
    assert daemon.applied == []
    assert channels[2:] == []
    assert "reload refused: bad key x; the running configuration is kept" in caplog.messages


# the host path of the home


class FakeContainers:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[str, list[str], dict[str, Any]]] = []
        self.seen_token: str | None = None
        self.check: Path | None = None

    def run(self, image: str, command: list[str], **kwargs: Any) -> bytes:
        self.calls.append((image, command, kwargs))
        if self.check is not None:
            self.seen_token = self.check.read_text().strip()
        if isinstance(self.answer, BaseException):
            raise self.answer
        if callable(self.answer):
            return bytes(self.answer(self.seen_token))
        return bytes(self.answer)


def test_the_host_home_is_checked_by_a_container_reading_a_token(home: Home) -> None:
    containers = FakeContainers(lambda token: f"{token}\n".encode())
    containers.check = home.state_dir / "host-home-check"
    client = SimpleNamespace(containers=containers)
    service.check_host_home(home, Path("/srv/orch"), client, "agent:1")
    assert containers.seen_token is not None and len(containers.seen_token) == 32
    ((image, command, kwargs),) = containers.calls
    assert image == "agent:1"
    assert command == [
        "python3",
        "-c",
        "print(open('/check/host-home-check').read().strip())",
    ]
    assert kwargs == {
        "volumes": {"/srv/orch/state": {"bind": "/check", "mode": "ro"}},
        "network_mode": "none",
        "read_only": True,
        "remove": True,
        "stderr": True,
        "labels": {"org.orchestrator.role": "host-home-check"},
    }
    assert not (home.state_dir / "host-home-check").exists()


def test_a_host_home_that_reads_another_token_is_refused(home: Home) -> None:
    client = SimpleNamespace(containers=FakeContainers(b"something else\n"))
    with pytest.raises(InvalidConfig) as caught:
        service.check_host_home(home, Path("/srv/orch"), client, "agent:1")
    root = home.root.resolve()
    assert caught.value.message == (
        f"ORCHESTRATOR_HOST_HOME=/srv/orch is not this home ({root}) as the engine sees it: "
        "a container mounting /srv/orch/state read 'something else', not the token "
        "written here; refusing to start"
    )
    assert caught.value.hint == (
        "mount the home into the daemon's container and set ORCHESTRATOR_HOST_HOME "
        "to its path on the host (compose.yaml does both)"
    )
    assert not (home.state_dir / "host-home-check").exists()


def test_a_host_home_the_engine_cannot_mount_is_refused_with_the_reason(home: Home) -> None:
    fault = OrchestratorError("no such path /srv/orch/state")
    client = SimpleNamespace(containers=FakeContainers(fault))
    with pytest.raises(InvalidConfig) as caught:
        service.check_host_home(home, Path("/srv/orch"), client, "agent:1")
    assert "read '(nothing: no such path /srv/orch/state)'" in caught.value.message
    assert not (home.state_dir / "host-home-check").exists()


def test_a_long_answer_is_cut_in_the_refusal(home: Home) -> None:
    client = SimpleNamespace(containers=FakeContainers(b"x" * 300))
    with pytest.raises(InvalidConfig) as caught:
        service.check_host_home(home, Path("/srv/orch"), client, "agent:1")
    assert f"read {'x' * 200!r}, not" in caught.value.message


def test_a_state_folder_outside_the_home_is_refused_before_any_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path / "elsewhere"))
    home = Home(tmp_path / "home")
    home.root.mkdir()
    containers = FakeContainers(b"")
    with pytest.raises(InvalidConfig) as caught:
        service.check_host_home(
            home, Path("/srv/orch"), SimpleNamespace(containers=containers), "a"
        )
    state = (tmp_path / "elsewhere").resolve()
    assert caught.value.message == (
        f"state/ ({state}) is outside the home {home.root.resolve()}; with "
        "ORCHESTRATOR_HOST_HOME it must be inside it"
    )
    assert caught.value.hint == "unset ORCHESTRATOR_STATE_DIR when the daemon runs in a container"
    assert containers.calls == []


# starting a daemon in the background


class FakeProcess:
    def __init__(self, pid: int, exits_at: int | None) -> None:
        self.pid = pid
        self.exits_at = exits_at
        self.polls = 0

    def poll(self) -> int | None:
        self.polls += 1
        if self.exits_at is not None and self.polls >= self.exits_at:
            return 1
        return None


class Starter:
    """``up`` with a fake process, a fake clock and the daemon's facts as a list of
    answers, one per look (the last one repeats)."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        facts: list[dict[str, Any] | None],
        running: list[bool],
        exits_at: int | None = None,
        log_lines: bytes = b"",
    ) -> None:
        self.facts = facts
        self.running = running
        self.process = FakeProcess(777, exits_at)
        self.log_lines = log_lines
        self.popen: list[tuple[list[str], dict[str, Any]]] = []
        self.clock = Clock()
        monkeypatch.setattr(service, "daemon_facts", self.daemon_facts)
        monkeypatch.setattr(service, "daemon_running", self.daemon_running)
        monkeypatch.setattr(
            service,
            "subprocess",
            SimpleNamespace(Popen=self.Popen, DEVNULL=service.subprocess.DEVNULL),
        )
        monkeypatch.setattr(
            service, "time", SimpleNamespace(monotonic=self.clock.monotonic, sleep=self.clock.sleep)
        )

    def daemon_facts(self, home: Home) -> dict[str, Any] | None:
        assert isinstance(home, Home)
        return self.facts.pop(0) if len(self.facts) > 1 else self.facts[0]

    def daemon_running(self, home: Home) -> bool:
        assert isinstance(home, Home)
        return self.running.pop(0) if len(self.running) > 1 else self.running[0]

    def Popen(self, argv: list[str], **kwargs: Any) -> FakeProcess:
        self.popen.append((argv, kwargs))
        kwargs["stdout"].write(self.log_lines)
        return self.process


def test_up_with_a_daemon_running_starts_nothing(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    starter = Starter(monkeypatch, [{"pid": "55", "channels": {}}], [True])
    result = service.up(home)
    assert (result.pid, result.started, result.facts) == (55, False, {"pid": "55", "channels": {}})
    assert starter.popen == []


def test_up_refuses_while_a_holder_does_not_answer(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    starter = Starter(monkeypatch, [{"pid": 55}], [False])
    with pytest.raises(OrchestratorError) as caught:
        service.up(home)
    assert caught.value.message == (
        f"daemon 55 holds {home.state_dir / 'orchestrator.lock'} but does not answer "
        "(it may be stopping)"
    )
    assert caught.value.hint == "wait for it, or stop it with: orchestrator down"
    assert starter.popen == []


@pytest.mark.parametrize(("debug", "flags"), [(False, []), (True, ["--debug"])])
def test_up_starts_serve_in_a_new_session_logging_to_the_log_file(
    home: Home, monkeypatch: pytest.MonkeyPatch, debug: bool, flags: list[str]
) -> None:
    facts = {"pid": 777, "channels": {"http": "x"}}
    starter = Starter(monkeypatch, [None, facts], [True])
    result = service.up(home, debug=debug)
    assert (result.pid, result.started, result.facts) == (777, True, facts)
    ((argv, kwargs),) = starter.popen
    assert argv == [
        sys.executable,
        "-m",
        "orchestrator",
        "--home",
        str(home.root),
        *flags,
        "serve",
    ]
    assert kwargs["stdin"] == service.subprocess.DEVNULL
    assert kwargs["stdout"] is kwargs["stderr"]
    assert kwargs["stdout"].name == str(home.state_dir / service.LOG_FILE)
    assert kwargs["stdout"].mode == "ab"
    assert kwargs["start_new_session"] is True
    assert starter.clock.sleeps == []


def test_up_waits_for_the_facts_of_its_own_process_written_whole(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = {"pid": 777, "channels": {}}
    starter = Starter(
        monkeypatch, [None, {"pid": 1, "channels": {}}, {"pid": 777}, None, facts], [False, True]
    )
    result = service.up(home)
    assert (result.pid, result.started, result.facts) == (777, True, facts)
    assert starter.clock.sleeps == [0.1, 0.1, 0.1, 0.1]


def test_up_of_a_daemon_that_exits_says_what_it_logged(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home.state_dir / service.LOG_FILE).write_bytes(b"an older start\n")
    Starter(monkeypatch, [None], [False], exits_at=2, log_lines=b"bad config\nexiting\n")
    with pytest.raises(OrchestratorError) as caught:
        service.up(home)
    assert caught.value.message == "the daemon exited while starting: bad config | exiting"
    assert caught.value.hint == f"see {home.state_dir / service.LOG_FILE}"


def test_up_that_lost_the_race_to_another_up_reports_the_winner(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    winner = {"pid": "88", "channels": {}}
    Starter(monkeypatch, [None, winner], [True], exits_at=1)
    result = service.up(home)
    assert (result.pid, result.started, result.facts) == (88, False, winner)


def test_up_of_an_exited_daemon_with_facts_but_not_answering_is_an_error(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    Starter(monkeypatch, [None, {"pid": 88}], [False], exits_at=1)
    with pytest.raises(OrchestratorError) as caught:
        service.up(home)
    assert caught.value.message == "the daemon exited while starting: (no log lines)"


def test_up_gives_up_after_its_timeout(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    starter = Starter(monkeypatch, [None], [False])
    with pytest.raises(OrchestratorError) as caught:
        service.up(home, timeout=2.5)
    assert caught.value.message == "the daemon did not answer within 2s"
    assert caught.value.hint == f"see {home.state_dir / service.LOG_FILE}"
    assert starter.clock.now - 100.0 == pytest.approx(2.5, abs=0.11)


def test_up_waits_a_minute_by_default(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    starter = Starter(monkeypatch, [None], [False])
    with pytest.raises(OrchestratorError, match="within 60s"):
        service.up(home)
    assert starter.clock.now - 100.0 == pytest.approx(60.0, abs=0.11)


# the edges of the waits and the host home check


def test_down_with_no_time_to_wait_does_not_poll(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopper = Stopper(monkeypatch, gone_after=None)
    with pytest.raises(OrchestratorError):
        service.down(home, drain_wait=0.0, term_wait=0.0, kill_wait=0.0)
    assert len(stopper.kills) == 3
    assert stopper.clock.sleeps == []


def test_up_with_no_time_to_wait_does_not_poll(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    starter = Starter(monkeypatch, [None], [False])
    with pytest.raises(OrchestratorError, match="within 0s"):
        service.up(home, timeout=0.0)
    assert starter.process.polls == 0


def test_a_reload_names_every_channel_started_again(
    home: Home, monkeypatch: pytest.MonkeyPatch, channels: list[str], caplog: Any
) -> None:
    monkeypatch.setattr(OtherChannel, "settings", classmethod(lambda cls, config: (config.port,)))
    svc, _ = reloading(home, monkeypatch, SimpleNamespace(port=2, concurrency=3))
    with caplog.at_level(logging.INFO, logger="orchestrator.service"):
        assert svc.reload()["channels_restarted"] == ["fake", "other"]
    assert f"reloaded {home.config_file} (channels started again: fake, other)" in caplog.messages


def test_the_channels_are_asked_about_the_daemon(
    home: Home, monkeypatch: pytest.MonkeyPatch, channels: list[str]
) -> None:
    asked: list[object] = []
    monkeypatch.setattr(
        FakeChannel, "enabled", classmethod(lambda cls, daemon: asked.append(daemon) or True)
    )
    svc, daemon = reloading(home, monkeypatch, SimpleNamespace(port=1, concurrency=3))
    svc.reload()
    assert asked == [daemon] * 4  # started, then reloaded: each of the two channels


def test_the_service_notes_when_it_started(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "time", SimpleNamespace(time=lambda: 1234.5))
    assert service.Service(home, FakeDaemon()).started == 1234.5  # type: ignore[arg-type]


class Refused(Exception):
    message = "the engine words"

    def __str__(self) -> str:
        return "the exception's text"


@pytest.mark.parametrize(
    ("fault", "said"),
    [(Refused(), "the engine words"), (RuntimeError("boom"), "boom")],
)
def test_a_failed_check_run_says_the_faults_message(
    home: Home, fault: Exception, said: str
) -> None:
    client = SimpleNamespace(containers=FakeContainers(fault))
    with pytest.raises(InvalidConfig) as caught:
        service.check_host_home(home, Path("/srv/orch"), client, "agent:1")
    assert f"read '(nothing: {said})'" in caught.value.message


def test_an_answer_that_is_not_utf8_is_read_with_replacements(home: Home) -> None:
    client = SimpleNamespace(containers=FakeContainers(b"\xff\n"))
    with pytest.raises(InvalidConfig) as caught:
        service.check_host_home(home, Path("/srv/orch"), client, "agent:1")
    assert "read '\ufffd', not" in caught.value.message


def test_a_check_file_already_gone_is_no_error_and_the_match_is_logged(
    home: Home, caplog: Any
) -> None:
    check = home.state_dir / "host-home-check"

    def answer(token: str | None) -> bytes:
        check.unlink()
        return f"{token}\n".encode()

    containers = FakeContainers(answer)
    containers.check = check
    with caplog.at_level(logging.INFO, logger="orchestrator.service"):
        service.check_host_home(
            home, Path("/srv/orch"), SimpleNamespace(containers=containers), "a"
        )
    assert caplog.messages == ["the home is /srv/orch on the host (checked)"]


def test_up_runs_serve_without_debug_by_default(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    starter = Starter(monkeypatch, [None, {"pid": 777, "channels": {}}], [True])
    service.up(home)
    ((argv, _),) = starter.popen
    assert argv[-2:] == [str(home.root), "serve"]


def test_an_engine_refusing_the_check_run_is_named_in_the_refusal(home: Home) -> None:
    from docker.errors import APIError

    client = SimpleNamespace(containers=FakeContainers(APIError("no such path")))
    with pytest.raises(InvalidConfig) as caught:
        service.check_host_home(home, Path("/srv/orch"), client, "agent:1")
    assert "(nothing: engine refused check the host path of the home: " in caught.value.message


def test_down_of_a_daemon_running_as_pid_1_signals_it(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopper = Stopper(monkeypatch, pid=1, gone_after=1)
    result = service.down(home)
    assert (result.pid, result.steps, result.forced) == (1, ["SIGTERM: drain"], False)
    assert stopper.kills == [(1, signal.SIGTERM, 0.0)]
