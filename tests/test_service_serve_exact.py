"""Exact behaviour of the daemon's process in the foreground (service.serve) and of its
log set-up (service.setup_logging), in process and without an engine.

serve: every collaborator is a recording fake (engine client, backend, queue, runtime,
daemon, channels, signal handlers, os._exit); the lock is the real one. Pinned: the
order of its steps, what each collaborator is given, the pid and facts files written
while it serves and removed at the end, the serving line, a reload on SIGHUP, the drain
on SIGTERM or SIGINT, a second signal stopping the drain at once, the host path check,
and the exit code.

setup_logging: one handler on stderr with the text or JSON format, the redacting and
rate-limiting filters in that order, INFO or DEBUG, and the HTTP clients' loggers kept
at WARNING."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import orchestrator.daemon.core
import orchestrator.image.agent
import orchestrator.image.group
import orchestrator.runtime
import orchestrator.runtime.engine
import orchestrator.runtime.lifecycle
import orchestrator.store.messages
from orchestrator import service
from orchestrator.errors import OrchestratorError
from orchestrator.home import FACTS_FILE, LOCK_FILE, PID_FILE, Home, lock_holder, take_lock
from orchestrator.limits import DRAIN_TIMEOUT_SECONDS
from orchestrator.versions import RELEASE


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    monkeypatch.delenv("ORCHESTRATOR_STATE_DIR", raising=False)
    return Home(tmp_path / "home")


# serve


class Exited(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Channel:
    name = "cli"

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon

    @classmethod
    def enabled(cls, daemon: Any) -> bool:
        return True

    @classmethod
    def settings(cls, config: Any) -> tuple[object, ...]:
        return (config.port,)

    def where(self) -> str:
        return f"at {self.daemon.config.port}"

    def start(self) -> None:
        self.daemon.world.steps.append(f"start {self.name} {self.daemon.config.port}")

    def stop(self) -> None:
        self.daemon.world.steps.append(f"stop {self.name}")


class WebChannel(Channel):
    name = "web"

    @classmethod
    def settings(cls, config: Any) -> tuple[object, ...]:
        return ()


class Semaphore(threading.Semaphore):
    """A real semaphore that records its value and each acquire's timeout, and runs the
    world's next step before each acquire of serve's own thread."""

    def __init__(self, world: World, value: int) -> None:
        super().__init__(value)
        self.world = world
        self.value = value
        self.acquires: list[tuple[str, float | None]] = []

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        mine = threading.current_thread() is self.world.thread
        self.acquires.append(("serve" if mine else "other", timeout))
        if mine and self.world.script:
            self.world.script.pop(0)()
        return super().acquire(blocking, timeout)


class Threads:
    """The threading module as serve sees it: records semaphores and threads made."""

    Event = threading.Event
    Lock = threading.Lock

    def __init__(self, world: World) -> None:
        self.world = world
        self.semaphores: list[Semaphore] = []
        self.threads: list[dict[str, Any]] = []

    def Semaphore(self, value: int) -> Semaphore:
        made = Semaphore(self.world, value)
        self.semaphores.append(made)
        return made

    def Thread(self, **kwargs: Any) -> threading.Thread:
        self.threads.append(kwargs)
        return threading.Thread(**kwargs)


class Backend:
    def __init__(self, world: World) -> None:
        self.world = world
        self.served: list[str] = []

    def serve(self, image: Callable[[], str]) -> None:
        self.served.append(image())
        self.world.steps.append("backend serve")

    def close(self) -> None:
        self.world.steps.append("backend close")


class Runtime:
    def __init__(
        self,
        home: Home,
        config: Any,
        backend: Any,
        image: Callable[[], str],
        *,
        skills_root: Any,
        group_image: Any,
    ) -> None:
        self.args = (home, config, backend)
        self.config = config
        self.image = image
        self.skills_root = skills_root
        self.group_image = group_image


class GroupImages:
    def __init__(self, client: Any, project: Callable[[], str]) -> None:
        self.client = client
        self.project = project


class Closer:
    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name

    def close(self) -> None:
        self.world.steps.append(f"{self.name} close")


class Daemon:
    def __init__(self, home: Home, config: Any, runtime: Any, queue: Any, concurrency: int) -> None:
        self.world: World = World.current
        self.world.daemons.append(self)
        self.args = (home, config, runtime, queue)
        self.config = config
        self.concurrency = concurrency
        self.upgrade: Any = None
        self.on_reload: Any = None
        self.applied: list[Any] = []
        self.relay = SimpleNamespace(
            close=Closer(self.world, "relay").close,
            usage=Closer(self.world, "usage"),
        )
        self.drains: list[tuple[float, bool]] = []

    def start(self) -> None:
        self.world.steps.append("daemon start")
        self.world.holder = lock_holder(self.world.home)

    def apply_config(self, config: Any) -> None:
        self.applied.append(config)
        self.config = config

    def drain(self, timeout: float, stop_now: threading.Event) -> None:
        self.world.steps.append(f"drain {timeout}")
        self.world.on_drain()
        self.drains.append((timeout, stop_now.wait(0.1)))


def config(**changes: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "host_home": None,
        "image": "agent:1",
        "concurrency": 4,
        "project": "proj",
        "port": 8080,
    }
    values.update(changes)
    return SimpleNamespace(**values)


class World:
    """serve's collaborators, and what happened to them, in order."""

    current: World

    def __init__(
        self, home: Home, monkeypatch: pytest.MonkeyPatch, configs: list[SimpleNamespace]
    ) -> None:
        World.current = self
        self.home = home
        self.configs = configs
        self.loaded: list[Home] = []
        self.steps: list[str] = []
        self.daemons: list[Daemon] = []
        self.holder: int | None = None
        self.handlers: dict[int, Any] = {}
        self.thread: threading.Thread | None = None
        self.script: list[Callable[[], None]] = []
        self.on_drain: Callable[[], None] = lambda: None
        self.seen: dict[str, str] = {}
        self.client = SimpleNamespace(name="engine client")
        self.backend = Backend(self)
        self.backend_args: list[tuple[Any, ...]] = []
        self.refs: list[tuple[Any, str]] = []
        self.checks: list[tuple[Any, ...]] = []
        self.queues: list[Home] = []
        self.queue = Closer(self, "queue")
        self.skills = Path("/skills/root")
        self.threads = Threads(self)
        self.lock: list[Any] = []
        self.error: BaseException | None = None
        monkeypatch.setattr(service, "_LOCK", self.lock)
        monkeypatch.setattr(service, "load_config", self.load_config)
        monkeypatch.setattr(service, "raise_file_limit", lambda: self.steps.append("file limit"))
        monkeypatch.setattr(service, "check_host_home", self.check_host_home)
        monkeypatch.setattr(service, "threading", self.threads)
        monkeypatch.setattr(
            service.Service, "channel_classes", staticmethod(lambda: [Channel, WebChannel])
        )
        monkeypatch.setattr(signal, "signal", self.signal)
        monkeypatch.setattr(os, "_exit", self.exit)
        monkeypatch.setattr(logging, "shutdown", lambda: self.steps.append("logging shutdown"))
        monkeypatch.setattr(orchestrator.runtime.engine, "connect", self.connect)
        monkeypatch.setattr(orchestrator.runtime, "open_backend", self.open_backend)
        monkeypatch.setattr(orchestrator.image.agent, "agent_image_ref", self.agent_image_ref)
        monkeypatch.setattr(orchestrator.image.group, "GroupImages", GroupImages)
        monkeypatch.setattr(orchestrator.runtime.lifecycle, "GroupRuntime", Runtime)
        monkeypatch.setattr(
            orchestrator.runtime.lifecycle, "default_skills_root", lambda: self.skills
        )
        monkeypatch.setattr(orchestrator.store.messages, "open_queue", self.open_queue)
        monkeypatch.setattr(orchestrator.daemon.core, "Daemon", Daemon)

    def close(self) -> None:
        for lock in self.lock:
            lock.close()

    def load_config(self, home: Home) -> SimpleNamespace:
        self.loaded.append(home)
        return self.configs[min(len(self.loaded), len(self.configs)) - 1]

    def check_host_home(self, *args: Any) -> None:
        self.checks.append(args)
        self.steps.append("check host home")

    def signal(self, signum: int, handler: Any) -> None:
        self.handlers[signum] = handler

    def exit(self, code: int) -> None:
        self.steps.append(f"exit {code}")
        raise Exited(code)

    def connect(self) -> Any:
        self.steps.append("connect")
        return self.client

    def open_backend(self, config: Any, **kwargs: Any) -> Backend:
        self.backend_args.append((config, kwargs))
        self.steps.append("open backend")
        return self.backend

    def agent_image_ref(self, client: Any, image: str) -> str:
        self.refs.append((client, image))
        return f"ref of {image}"

    def open_queue(self, home: Home) -> Closer:
        self.queues.append(home)
        return self.queue

    def look(self) -> None:
        """What the state folder holds while serving."""
        for name in (PID_FILE, FACTS_FILE):
            path = self.home.state_dir / name
            self.seen[name] = path.read_text() if path.exists() else "(missing)"

    def send(self, signum: int) -> Callable[[], None]:
        return lambda: self.handlers[signum](signum, None)

    def serve(self, concurrency: int | None = None) -> None:
        """Run serve in a thread of its own (to be stopped by its script); the fake
        os._exit ends it."""

        def run() -> None:
            try:
                service.serve(self.home, concurrency)
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, name="serve")
        self.thread.start()
        self.thread.join(20)
        assert not self.thread.is_alive(), "serve did not stop"


@pytest.fixture()
def world(home: Home, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = World(home, monkeypatch, [config()])
    yield made
    made.close()


def serving_line(home: Home, port: int = 8080, concurrency: int = 4) -> str:
    return (
        f"orchestrator {RELEASE} daemon {os.getpid()} serving {home.root} "
        f"(channels: cli at {port}, web at {port}; concurrency {concurrency})"
    )


DRAINING = "draining: no new messages; waiting for turns in flight (again to stop now)"


def test_serve_runs_until_sigterm_then_drains_closes_and_exits(
    world: World, home: Home, caplog: Any
) -> None:
    world.script = [world.look, world.send(signal.SIGTERM)]
    with caplog.at_level(logging.INFO, logger="orchestrator.service"):
        world.serve()
    assert isinstance(world.error, Exited)
    assert world.error.code == 0
    assert world.steps == [
        "file limit",
        "connect",
        "open backend",
        "backend serve",
        "daemon start",
        "start cli 8080",
        "start web 8080",
        "stop cli",
        "stop web",
        f"drain {DRAIN_TIMEOUT_SECONDS}",
        "backend close",
        "relay close",
        "usage close",
        "queue close",
        "logging shutdown",
        "exit 0",
    ]
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.service"] == [
        serving_line(home),
        DRAINING,
        "stopped",
    ]
    # the lock: taken before anything and kept (open) when serve ends
    assert world.holder == os.getpid()
    assert len(world.lock) == 1
    assert world.lock[0].name == str(home.state_dir / LOCK_FILE)
    assert not world.lock[0].closed
    assert world.loaded == [home]
    # while serving: the pid file and the facts file
    assert world.seen[PID_FILE] == f"{os.getpid()}\n"
    facts = json.loads(world.seen[FACTS_FILE])
    assert facts["pid"] == os.getpid()
    assert facts["channels"] == {"cli": "at 8080", "web": "at 8080"}
    assert facts["concurrency"] == 4
    # both removed at the end
    assert sorted(p.name for p in home.state_dir.iterdir()) == [LOCK_FILE]
    # the drain was not asked to stop at once
    assert world.daemons[0].drains == [(DRAIN_TIMEOUT_SECONDS, False)]


def test_serve_wires_the_engine_the_backend_the_runtime_and_the_daemon(
    world: World, home: Home
) -> None:
    world.script = [world.send(signal.SIGTERM)]
    world.serve()
    cfg = world.configs[0]
    assert world.backend_args == [(cfg, {"client": world.client, "home": home})]
    assert world.backend.served == ["ref of agent:1"]
    assert world.queues == [home]
    [daemon] = world.daemons
    runtime = daemon.args[2]
    assert daemon.args == (home, cfg, runtime, world.queue)
    assert daemon.concurrency == 4
    assert isinstance(runtime, Runtime)
    assert runtime.args == (home, cfg, world.backend)
    assert runtime.skills_root == world.skills
    # the runtime's image and project are those of its configuration at the time
    runtime.config = config(image="agent:2", project="other")
    assert runtime.image() == "ref of agent:2"
    assert isinstance(runtime.group_image, GroupImages)
    assert runtime.group_image.client is world.client
    assert runtime.group_image.project() == "other"
    assert world.refs == [(world.client, "agent:1"), (world.client, "agent:2")]
    assert world.checks == []
    # the daemon answers reloads through the service
    assert daemon.on_reload is not None
    assert daemon.on_reload.__self__.daemon is daemon


def test_serve_takes_the_concurrency_it_is_given(world: World, home: Home, caplog: Any) -> None:
    world.script = [world.send(signal.SIGTERM)]
    with caplog.at_level(logging.INFO, logger="orchestrator.service"):
        world.serve(concurrency=9)
    assert world.daemons[0].concurrency == 9
    assert serving_line(home, concurrency=9) in caplog.messages


def test_serve_handles_sigterm_sigint_and_sighup_and_polls_each_half_second(
    world: World,
) -> None:
    world.script = [world.send(signal.SIGTERM)]
    world.serve()
    assert sorted(world.handlers) == sorted([signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
    [signals] = world.threads.semaphores
    assert signals.value == 0
    assert signals.acquires[0] == ("serve", 0.5)
    # after the drain began: one thread waits for a second signal
    assert world.threads.threads == [
        {"target": world.threads.threads[0]["target"], "daemon": True, "name": "signals"}
    ]
    assert ("other", None) in signals.acquires


def test_serve_stops_on_sigint(world: World, caplog: Any) -> None:
    world.script = [world.send(signal.SIGINT)]
    with caplog.at_level(logging.INFO, logger="orchestrator.service"):
        world.serve()
    assert isinstance(world.error, Exited)
    assert world.steps[-7:] == [
        f"drain {DRAIN_TIMEOUT_SECONDS}",
        "backend close",
        "relay close",
        "usage close",
        "queue close",
        "logging shutdown",
        "exit 0",
    ]
    assert DRAINING in caplog.messages


def test_serve_reloads_on_sighup_and_goes_on_serving(
    home: Home, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    world = World(home, monkeypatch, [config(), config(port=9090, concurrency=4)])
    try:
        world.script = [world.send(signal.SIGHUP), world.look, world.send(signal.SIGTERM)]
        with caplog.at_level(logging.INFO, logger="orchestrator.service"):
            world.serve()
    finally:
        world.close()
    assert world.loaded == [home, home]
    [daemon] = world.daemons
    assert daemon.applied == [world.configs[1]]
    assert world.steps[5:11] == [
        "start cli 8080",
        "start web 8080",
        "stop cli",
        "start cli 9090",
        "stop web",
        "stop cli",
    ]
    assert json.loads(world.seen[FACTS_FILE])["channels"] == {"cli": "at 9090", "web": "at 9090"}
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.service"] == [
        serving_line(home),
        f"reloaded {home.config_file} (channels started again: cli)",
        DRAINING,
        "stopped",
    ]
    [signals] = world.threads.semaphores
    assert [t for who, t in signals.acquires if who == "serve"] == [0.5, 0.5, 0.5]


def test_serve_reloads_once_per_sighup(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(home, monkeypatch, [config(), config(port=9090)])
    try:
        world.script = [
            world.send(signal.SIGHUP),
            lambda: None,
            lambda: None,
            world.send(signal.SIGTERM),
        ]
        world.serve()
    finally:
        world.close()
    assert world.loaded == [home, home]
    assert world.daemons[0].applied == [world.configs[1]]


def test_a_second_signal_during_the_drain_stops_it_at_once(world: World) -> None:
    world.script = [world.send(signal.SIGTERM)]
    world.on_drain = world.send(signal.SIGINT)
    world.serve()
    assert world.daemons[0].drains == [(DRAIN_TIMEOUT_SECONDS, True)]
    assert isinstance(world.error, Exited)
    assert world.steps[-1] == "exit 0"


def test_files_already_gone_at_the_end_are_no_error(world: World, home: Home) -> None:
    world.script = [world.send(signal.SIGTERM)]

    def remove() -> None:
        (home.state_dir / PID_FILE).unlink()
        (home.state_dir / FACTS_FILE).unlink()

    world.on_drain = remove
    world.serve()
    assert isinstance(world.error, Exited)
    assert world.steps[-2:] == ["logging shutdown", "exit 0"]


def test_serve_checks_the_host_home_before_opening_the_backend(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(home, monkeypatch, [config(host_home=Path("/host/home"), image="agent:7")])
    try:
        world.script = [world.send(signal.SIGTERM)]
        world.serve()
    finally:
        world.close()
    assert world.checks == [(home, Path("/host/home"), world.client, "ref of agent:7")]
    assert world.steps[:4] == ["file limit", "connect", "check host home", "open backend"]
    assert world.refs[0] == (world.client, "agent:7")


def test_serve_refuses_a_second_daemon_of_the_same_home(world: World, home: Home) -> None:
    home.ensure_writable()
    held = take_lock(home)
    try:
        with pytest.raises(OrchestratorError) as caught:
            service.serve(home)
    finally:
        held.close()
    assert caught.value.message == f"a daemon already runs for {home.root} (pid {os.getpid()})"
    assert world.steps == []
    assert world.loaded == []


# setup_logging


@pytest.fixture()
def root() -> Iterator[logging.Logger]:
    """The root logger, given back as it was (pytest's own handlers included)."""
    from orchestrator.config.kinds import kind_loggers
    from orchestrator.redact import CLIENT_LOGGERS

    logger = logging.getLogger()
    handlers, level = logger.handlers[:], logger.level
    names = {*CLIENT_LOGGERS, *kind_loggers()}
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.NOTSET)
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)
    for name, was in levels.items():
        logging.getLogger(name).setLevel(was)


def capture(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """sys.stderr as a string (set in the test itself: pytest sets its own at the call)."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def test_text_logging_writes_one_line_per_record_on_stderr(
    root: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = capture(monkeypatch)
    service.setup_logging("text")
    [handler] = root.handlers
    assert isinstance(handler, logging.StreamHandler)
    assert handler.stream is stderr
    assert type(handler.formatter) is logging.Formatter
    assert handler.formatter._fmt == TEXT_FORMAT
    logging.getLogger("orchestrator.t").info("hello %s", "there")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO orchestrator\.t: hello there\n",
        stderr.getvalue(),
    )


def test_json_logging_writes_one_json_object_per_record(
    root: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = capture(monkeypatch)
    service.setup_logging("json")
    [handler] = root.handlers
    assert type(handler.formatter) is service.JsonFormatter
    logging.getLogger("orchestrator.t").warning("n=%d", 3)
    line = json.loads(stderr.getvalue())
    assert {k: v for k, v in line.items() if k != "time"} == {
        "level": "warning",
        "logger": "orchestrator.t",
        "message": "n=3",
    }
    assert stderr.getvalue().count("\n") == 1


def test_an_unknown_log_format_is_the_text_format(
    root: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(monkeypatch)
    service.setup_logging("JSON")
    assert root.handlers[0].formatter._fmt == TEXT_FORMAT  # type: ignore[union-attr]


def test_logging_redacts_then_rate_limits(root: logging.Logger) -> None:
    from orchestrator.lograte import RateLimitFilter
    from orchestrator.redact import RedactingFilter

    service.setup_logging("text")
    assert [type(f) for f in root.handlers[0].filters] == [RedactingFilter, RateLimitFilter]


def test_logging_is_at_info_without_debug_and_debug_with_it(
    root: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = capture(monkeypatch)
    service.setup_logging("text")
    assert root.level == logging.INFO
    logging.getLogger("orchestrator.t").debug("hidden")
    assert stderr.getvalue() == ""
    service.setup_logging("text", debug=True)
    assert root.level == logging.DEBUG
    service.setup_logging("json", False)
    assert root.level == logging.INFO


def test_logging_replaces_the_handlers_already_there(
    root: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(monkeypatch)
    root.handlers[:] = [logging.NullHandler(), logging.NullHandler()]
    service.setup_logging("text")
    assert len(root.handlers) == 1
    assert isinstance(root.handlers[0], logging.StreamHandler)


def test_logging_keeps_the_http_clients_and_the_chat_apps_loggers_at_warning(
    root: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(monkeypatch)
    from orchestrator.config.kinds import kind_loggers
    from orchestrator.redact import CLIENT_LOGGERS

    service.setup_logging("text", debug=True)
    names = sorted({*CLIENT_LOGGERS, *kind_loggers()})
    assert "discord" in names
    assert {name: logging.getLogger(name).level for name in names} == dict.fromkeys(
        names, logging.WARNING
    )
