"""Exact findings of ``orchestrator doctor``'s first checks (service/doctor.py): the home's
writability, the engine, the agent image, the containers (engine mode, foreign names,
drift, orphans, counts), the daemon's status, whether a listen address is remote, the
queue, and the disks (free space per device, the reserve file, the limits). Each check is
called on a temporary Home with the engine, the daemon and the filesystem facts faked:
every Check's name, status, detail and hint is pinned whole, and the arguments the checks
pass to what they call."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.config import load_config
from orchestrator.errors import OrchestratorError
from orchestrator.groups import disk
from orchestrator.home import Home
from orchestrator.image import agent
from orchestrator.limits import STATE_RESERVE_BYTES
from orchestrator.runtime import engine, lifecycle
from orchestrator.runtime.reconcile import (
    ADOPT,
    KEEP_IDLE,
    RECREATE,
    REMOVE,
    REMOVE_ORPHAN,
    REPLACE_LEGACY,
    STOP_IDLE,
    Action,
)
from orchestrator.service import client as service_client
from orchestrator.service import doctor
from orchestrator.service.doctor import (
    FAIL,
    OK,
    WARN,
    Check,
    check_containers,
    check_daemon,
    check_disk,
    check_engine,
    check_home,
    check_image,
    check_queue,
    listen_is_remote,
)
from orchestrator.store import messages

UNREACHABLE = "cannot check: the engine is unreachable"


@pytest.fixture
def h(tmp_path: Path) -> Home:
    root = tmp_path / "home"
    root.mkdir()
    return Home(root)


# Check


def test_the_statuses_and_a_checks_dict() -> None:
    assert (OK, WARN, FAIL) == ("ok", "warn", "fail")
    assert Check("a", OK, "b").to_dict() == {"name": "a", "status": "ok", "detail": "b", "hint": ""}
    assert Check("a", FAIL, "b", "c").to_dict() == {
        "name": "a",
        "status": "fail",
        "detail": "b",
        "hint": "c",
    }


# check_home


def test_a_writable_home_passes_and_tries_a_temporary_file_in_state(
    h: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[dict[str, Any]] = []
    real = tempfile.NamedTemporaryFile

    def recording(**kwargs: Any) -> Any:
        made.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", recording)
    assert check_home(h) == Check("home", OK, f"{h.root} is writable")
    assert made == [{"dir": h.state_dir, "prefix": ".doctor-"}]
    assert h.groups_dir.is_dir() and h.state_dir.is_dir()
    assert list(h.state_dir.iterdir()) == []


def test_a_home_that_cannot_be_made_fails_with_the_homes_message_and_hint(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("")
    home = Home(tmp_path / "file" / "home")
    assert check_home(home) == Check(
        "home",
        FAIL,
        f"cannot create {home.root}: Not a directory",
        "pass --home DIR (or set ORCHESTRATOR_HOME) to a writable folder",
    )


def test_an_error_without_hint_gives_an_empty_hint(
    h: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Home) -> None:
        raise OrchestratorError("no way")

    monkeypatch.setattr(Home, "ensure_writable", refuse)
    assert check_home(h) == Check("home", FAIL, "no way", "")


def test_a_state_folder_that_refuses_files_fails_with_its_error(
    h: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(**kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    assert check_home(h) == Check(
        "home",
        FAIL,
        f"cannot write in {h.state_dir}: Permission denied",
        "pass --home DIR to a writable folder",
    )


# check_engine


class FakeClient:
    def __init__(self, version: dict[str, str]) -> None:
        self._version = version

    def version(self) -> dict[str, str]:
        return self._version


def test_an_engine_that_answers_is_named_with_its_versions_and_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[dict[str, Any]] = []
    client = FakeClient({"Version": "27.1.0", "ApiVersion": "1.46"})

    def connect(**kwargs: Any) -> FakeClient:
        asked.append(kwargs)
        return client

    monkeypatch.setattr(engine, "connect", connect)
    monkeypatch.setenv("DOCKER_HOST", "tcp://engine:2375")
    assert check_engine() == (
        Check("engine", OK, "Docker 27.1.0, API 1.46 (tcp://engine:2375)"),
        client,
    )
    assert asked == [{"timeout": 10}]
    monkeypatch.delenv("DOCKER_HOST")
    assert check_engine() == (
        Check("engine", OK, "Docker 27.1.0, API 1.46 (default socket)"),
        client,
    )


def test_an_engine_without_versions_shows_question_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient({})
    monkeypatch.setattr(engine, "connect", lambda **kwargs: client)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert check_engine() == (Check("engine", OK, "Docker ?, API ? (default socket)"), client)


def test_an_unreachable_engine_fails_with_its_message_and_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def connect(**kwargs: Any) -> Any:
        raise OrchestratorError("the engine does not answer", hint="start docker")

    monkeypatch.setattr(engine, "connect", connect)
    assert check_engine() == (
        Check("engine", FAIL, "the engine does not answer", "start docker"),
        None,
    )

    def connect_no_hint(**kwargs: Any) -> Any:
        raise OrchestratorError("gone")

    monkeypatch.setattr(engine, "connect", connect_no_hint)
    assert check_engine() == (Check("engine", FAIL, "gone", ""), None)


# check_image


def test_the_image_cannot_be_checked_without_an_engine() -> None:
    assert check_image(None, "repo") == Check(
        "agent image", FAIL, UNREACHABLE, "fix the engine first"
    )


def _images(
    monkeypatch: pytest.MonkeyPatch, answer: Any, asked: list[tuple[Any, str]] | None = None
) -> None:
    def current(client: Any, repository: str) -> Any:
        if asked is not None:
            asked.append((client, repository))
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(agent, "current_agent_image", current)


def test_a_current_image_passes_with_its_tag_and_base(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Any, str]] = []
    client = object()
    _images(monkeypatch, ("repo:abc", "python:3.11"), asked)
    assert check_image(client, "repo") == Check(  # type: ignore[arg-type]
        "agent image", OK, "repo:abc is current (base python:3.11)"
    )
    assert asked == [(client, "repo")]


def test_no_base_and_no_image_fails_with_the_build_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    _images(monkeypatch, (None, None))
    assert check_image(object(), "repo") == Check(  # type: ignore[arg-type]
        "agent image", FAIL, "no base image and no agent image", "run: orchestrator image build"
    )


def test_an_image_of_older_sources_fails_with_its_base(monkeypatch: pytest.MonkeyPatch) -> None:
    _images(monkeypatch, ("", "python:3.11"))
    assert check_image(object(), "repo") == Check(  # type: ignore[arg-type]
        "agent image",
        FAIL,
        "no image matches the current sources (base python:3.11)",
        "run: orchestrator image build",
    )


def test_an_image_error_fails_with_its_message_and_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    _images(monkeypatch, OrchestratorError("bad sources", hint="look"))
    assert check_image(object(), "repo") == Check(  # type: ignore[arg-type]
        "agent image", FAIL, "bad sources", "look"
    )
    _images(monkeypatch, OrchestratorError("bad sources"))
    assert check_image(object(), "repo") == Check(  # type: ignore[arg-type]
        "agent image", FAIL, "bad sources", ""
    )


# check_containers


def test_containers_cannot_be_checked_without_an_engine(h: Home) -> None:
    assert check_containers(h, None) == [
        Check("containers", FAIL, UNREACHABLE, "fix the engine first")
    ]


class FakeBackend:
    def __init__(self, facts: dict[str, Any], containers: dict[str, Any]) -> None:
        self.facts = facts
        self.containers = containers
        self.inspected: list[str] = []

    def engine_facts(self) -> dict[str, Any]:
        return self.facts

    def inspect(self, name: str) -> Any:
        self.inspected.append(name)
        return self.containers.get(name)


class FakeRuntime:
    made: list[FakeRuntime] = []

    def __init__(self, home: Home, config: Any, backend: Any, image: Any, **kwargs: Any) -> None:
        self.args = (home, config, backend, image)
        self.kwargs = kwargs
        self.store = SimpleNamespace(groups=lambda: self.groups)
        self.groups: list[str] = []
        self.actions: list[Action] = []
        FakeRuntime.made.append(self)

    def container_name(self, group: str) -> str:
        return f"orch-{group}"

    def owned(self, info: Any) -> bool:
        return bool(info.owned)

    def is_legacy(self, info: Any) -> bool:
        return bool(info.legacy)

    def plan(self) -> list[Action]:
        return self.actions


@pytest.fixture
def containers(h: Home, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Runs check_containers on a fake backend and runtime: (facts, inspected containers,
    groups, plan) -> (checks, backend, runtime, open_backend's call)."""
    import orchestrator.runtime as runtime_package

    def run(
        facts: dict[str, Any],
        found: dict[str, Any] | None = None,
        groups: list[str] | None = None,
        plan: list[tuple[str, str]] | None = None,
    ) -> tuple[list[Check], FakeBackend, FakeRuntime, list[Any]]:
        backend = FakeBackend(facts, found or {})
        opened: list[Any] = []

        def open_backend(config: Any, **kwargs: Any) -> FakeBackend:
            opened.append((config, kwargs))
            return backend

        def runtime(*args: Any, **kwargs: Any) -> FakeRuntime:
            made = FakeRuntime(*args, **kwargs)
            made.groups = groups or []
            made.actions = [Action(kind, name, None, "") for kind, name in plan or []]
            return made

        FakeRuntime.made = []
        REFS.clear()
        monkeypatch.setattr(
            agent, "agent_image_ref", lambda client, repo: REFS.append((client, repo)) or "ref"
        )
        monkeypatch.setattr(runtime_package, "open_backend", open_backend)
        monkeypatch.setattr(lifecycle, "GroupRuntime", runtime)
        monkeypatch.setattr(lifecycle, "default_skills_root", lambda: Path("/skills"))
        checks = check_containers(h, CLIENT)  # type: ignore[arg-type]
        (made,) = FakeRuntime.made
        return checks, backend, made, opened

    return run


CLIENT = object()
REFS: list[tuple[Any, str]] = []


def _info(name: str, owned: bool = False, legacy: bool = False, home: str = "") -> Any:
    return SimpleNamespace(name=name, owned=owned, legacy=legacy, home=home)


def test_a_rootful_engine_with_no_containers(
    h: Home, containers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks, backend, runtime, opened = containers({})
    config = load_config(h)
    assert checks == [
        Check(
            "engine mode",
            OK,
            "rootful Docker: containers run as the group folder's owner, or "
            f"{config.unprivileged_uid}:{config.unprivileged_gid} for root-owned folders",
        ),
        Check("containers", OK, "0 running, none drifted"),
    ]
    assert config.unprivileged_uid == 10001 and config.unprivileged_gid == 10001
    assert opened == [(config, {"client": CLIENT, "home": h})]
    home, passed_config, passed_backend, image = runtime.args
    assert (home, passed_config, passed_backend) == (h, config, backend)
    assert runtime.kwargs == {"skills_root": Path("/skills"), "rootless": False}
    assert image() == "ref"
    assert [(CLIENT, config.image)] == REFS


def test_a_rootless_engine_warns_and_runs_the_groups_rootless(containers: Any) -> None:
    checks, _, runtime, _ = containers({"rootless": True, "podman": True})
    assert checks[0] == Check(
        "engine mode",
        WARN,
        "rootless engine: containers run as 0:0 inside, which the engine maps to the "
        "unprivileged user running it",
    )
    assert runtime.kwargs["rootless"] is True


def test_podman_warns_of_best_effort_support(containers: Any) -> None:
    checks, _, runtime, _ = containers({"rootless": False, "podman": 1})
    assert checks[0] == Check(
        "engine mode", WARN, "Podman's Docker API: supported on a best-effort basis"
    )
    assert runtime.kwargs["rootless"] is False


def test_containers_of_another_home_fail_with_their_home_ids(containers: Any) -> None:
    found = {
        "orch-mine": _info("orch-mine", owned=True, home="abc"),
        "orch-old": _info("orch-old", legacy=True, home="abc"),
        "orch-theirs": _info("orch-theirs", home="0123456789abcdef"),
        "orch-anon": _info("orch-anon"),
    }
    checks, backend, _, _ = containers(
        {}, found, ["mine", "old", "absent", "theirs", "anon"], [(ADOPT, "orch-mine")]
    )
    assert backend.inspected == ["orch-mine", "orch-old", "orch-absent", "orch-theirs", "orch-anon"]
    assert checks[1:] == [
        Check(
            "container names",
            FAIL,
            "containers with this home's names belong to another home: "
            "orch-theirs (home id 0123456789abcdef), orch-anon (home id unknown)",
            "give this home its own `project:` in orchestrator.yaml",
        ),
        Check("containers", OK, "1 running, none drifted"),
    ]


def test_only_owned_or_legacy_or_absent_containers_raise_no_name_finding(
    containers: Any,
) -> None:
    found = {
        "orch-mine": _info("orch-mine", owned=True),
        "orch-old": _info("orch-old", legacy=True),
        "orch-both": _info("orch-both", owned=True, legacy=True),
    }
    checks, _, _, _ = containers({}, found, ["mine", "old", "both", "absent"])
    assert [c.name for c in checks] == ["engine mode", "containers"]


def test_drift_and_orphans_warn_with_the_reconcile_hint(containers: Any) -> None:
    plan = [
        (RECREATE, "orch-a"),
        (ADOPT, "orch-b"),
        (REMOVE_ORPHAN, "orch-gone"),
        (RECREATE, "orch-c"),
        (REMOVE_ORPHAN, "orch-gone2"),
        (REMOVE, "orch-exited"),
    ]
    checks, _, _, _ = containers({}, plan=plan)
    assert checks[1:] == [
        Check(
            "containers",
            WARN,
            "config drift: orch-a, orch-c; orphans: orch-gone, orch-gone2",
            "run: orchestrator reconcile",
        )
    ]


def test_drift_alone_and_orphans_alone(containers: Any) -> None:
    checks, _, _, _ = containers({}, plan=[(RECREATE, "orch-a")])
    assert checks[1:] == [
        Check("containers", WARN, "config drift: orch-a", "run: orchestrator reconcile")
    ]
    checks, _, _, _ = containers({}, plan=[(REMOVE_ORPHAN, "orch-x"), (ADOPT, "orch-b")])
    assert checks[1:] == [
        Check("containers", WARN, "orphans: orch-x", "run: orchestrator reconcile")
    ]


def test_running_exited_and_idle_containers_are_counted(containers: Any) -> None:
    plan = [
        (ADOPT, "orch-a"),
        (STOP_IDLE, "orch-b"),
        (REPLACE_LEGACY, "orch-c"),
        (KEEP_IDLE, "orch-d"),
        (REMOVE, "orch-e"),
        (REMOVE, "orch-f"),
        (KEEP_IDLE, "orch-g"),
        (KEEP_IDLE, "orch-h"),
    ]
    checks, _, _, _ = containers({}, plan=plan)
    assert checks[1:] == [
        Check(
            "containers",
            OK,
            "3 running, none drifted, 2 exited (removed at reconcile), 3 scaled to zero",
        )
    ]
    checks, _, _, _ = containers({}, plan=[(REMOVE, "orch-e"), (ADOPT, "orch-a")])
    assert checks[1:] == [
        Check("containers", OK, "1 running, none drifted, 1 exited (removed at reconcile)")
    ]
    checks, _, _, _ = containers({}, plan=[(KEEP_IDLE, "orch-d")])
    assert checks[1:] == [Check("containers", OK, "0 running, none drifted, 1 scaled to zero")]


# check_daemon


def _daemon(monkeypatch: pytest.MonkeyPatch, answer: Any, asked: list[Any] | None = None) -> None:
    def request(home: Home, message: dict[str, Any], **kwargs: Any) -> Any:
        if asked is not None:
            asked.append((home, message, kwargs))
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(service_client, "control_request", request)


def test_a_running_daemon_reports_its_counts(h: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    _daemon(monkeypatch, {"counts": {"queued": 4, "dead": 0}, "inflight": 2}, asked)
    assert check_daemon(h) == Check("daemon", OK, "running; 4 queued, 2 in flight, 0 dead-lettered")
    assert asked == [(h, {"op": "status"}, {"timeout": 3})]


def test_a_daemon_without_counts_reports_zeros(h: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    _daemon(monkeypatch, {"counts": None})
    assert check_daemon(h) == Check("daemon", OK, "running; 0 queued, 0 in flight, 0 dead-lettered")
    _daemon(monkeypatch, {})
    assert check_daemon(h) == Check("daemon", OK, "running; 0 queued, 0 in flight, 0 dead-lettered")


def test_dead_letters_warn(h: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    _daemon(monkeypatch, {"counts": {"queued": 1, "dead": 3}, "inflight": 0})
    assert check_daemon(h) == Check(
        "daemon",
        WARN,
        "running; 1 queued, 0 in flight, 3 dead-lettered",
        "see: orchestrator status",
    )


def test_no_daemon_warns_that_messages_wait(h: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    _daemon(monkeypatch, OrchestratorError("no daemon"))
    assert check_daemon(h) == Check(
        "daemon",
        WARN,
        "not running: messages are not delivered",
        "start it with: orchestrator up",
    )


# listen_is_remote


@pytest.mark.parametrize(
    ("host", "remote"),
    [
        ("localhost", False),
        ("127.0.0.1", False),
        ("127.1.2.3", False),
        ("::1", False),
        ("0.0.0.0", True),
        ("192.168.1.5", True),
        ("::", True),
        ("example.com", True),
        ("LOCALHOST", True),
    ],
)
def test_listen_is_remote(host: str, remote: bool) -> None:
    assert listen_is_remote(host) is remote


# check_queue


def test_no_queue_yet(h: Home) -> None:
    assert check_queue(h) == Check("queue", OK, "no queue yet")


def test_a_sound_queue_is_named(h: Home) -> None:
    h.state_dir.mkdir(parents=True)
    (h.state_dir / "queue.db").write_bytes(b"")
    assert check_queue(h) == Check("queue", OK, f"{h.state_dir / 'queue.db'}")


def test_a_corrupt_queue_fails_with_the_repair_hint(
    h: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Home] = []
    monkeypatch.setattr(messages, "check_queue", lambda home: asked.append(home) or "bad page")
    assert check_queue(h) == Check(
        "queue",
        FAIL,
        f"{h.state_dir / 'queue.db'} is corrupt (bad page); the daemon cannot start with it",
        "stop the daemon, then: orchestrator doctor --repair-queue (moves it aside, "
        "keeps the pending messages that can be read)",
    )
    assert asked == [h]


def test_a_queue_that_is_not_a_database_fails(h: Home) -> None:
    h.state_dir.mkdir(parents=True)
    (h.state_dir / "queue.db").write_bytes(b"not a database at all, " * 100)
    assert check_queue(h) == Check(
        "queue",
        FAIL,
        f"{h.state_dir / 'queue.db'} is corrupt (file is not a database); the daemon cannot "
        "start with it",
        "stop the daemon, then: orchestrator doctor --repair-queue (moves it aside, "
        "keeps the pending messages that can be read)",
    )


# check_disk

MiB = 1024**2


@pytest.fixture
def disks(h: Home, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Fakes the devices of paths, their free space and the limit mode: (devices,
    spaces) -> (checks, paths asked for free space, paths asked for the limit mode)."""

    def run(
        devices: dict[Path, int], spaces: dict[Path, tuple[int, int] | None]
    ) -> tuple[list[Check], list[Path], list[Path]]:
        asked: list[Path] = []
        limits: list[Path] = []

        def stat(path: Any) -> Any:
            if Path(path) not in devices:
                raise FileNotFoundError(2, "No such file or directory")
            return SimpleNamespace(st_dev=devices[Path(path)])

        def free_space(path: Path) -> Any:
            asked.append(path)
            found = spaces[path]
            return None if found is None else disk.FreeSpace(str(path), *found)

        monkeypatch.setattr(doctor, "os", SimpleNamespace(stat=stat, environ=os.environ))
        monkeypatch.setattr(disk, "free_space", free_space)
        monkeypatch.setattr(disk, "limit_mode", lambda path: limits.append(path) or "no limits")
        return check_disk(h), asked, limits

    return run


def test_groups_and_state_on_one_device_are_one_finding(h: Home, disks: Any) -> None:
    checks, asked, limits = disks(
        {h.groups_dir: 7, h.state_dir: 7}, {h.groups_dir: (5 * 1024 * MiB, 10 * 1024 * MiB)}
    )
    assert checks == [
        Check("disk (groups and state)", OK, f"{h.groups_dir}: 5.0 GiB free of 10.0 GiB", ""),
        Check("disk limits", OK, "no limits"),
    ]
    assert asked == [h.groups_dir]
    assert limits == [h.groups_dir]


def test_groups_and_state_on_two_devices_and_little_room(h: Home, disks: Any) -> None:
    four_reserves = 4 * STATE_RESERVE_BYTES
    assert four_reserves == 64 * MiB
    checks, asked, _ = disks(
        {h.groups_dir: 1, h.state_dir: 2},
        {h.groups_dir: (four_reserves, 100 * MiB), h.state_dir: (four_reserves - 1, 100 * MiB)},
    )
    assert checks == [
        Check("disk (groups)", OK, f"{h.groups_dir}: 64.0 MiB free of 100.0 MiB", ""),
        Check(
            "disk (state)",
            WARN,
            f"{h.state_dir}: 64.0 MiB free of 100.0 MiB",
            "free some space: a full disk refuses new messages",
        ),
        Check("disk limits", OK, "no limits"),
    ]
    assert asked == [h.groups_dir, h.state_dir]


def test_a_missing_folder_or_unknown_space_is_left_out(h: Home, disks: Any) -> None:
    checks, asked, _ = disks({h.state_dir: 2}, {h.state_dir: (1000, 2000)})
    assert checks == [
        Check(
            "disk (state)",
            WARN,
            f"{h.state_dir}: 1000 B free of 2.0 KiB",
            "free some space: a full disk refuses new messages",
        ),
        Check("disk limits", OK, "no limits"),
    ]
    assert asked == [h.state_dir]
    checks, asked, _ = disks(
        {h.groups_dir: 1, h.state_dir: 2}, {h.groups_dir: None, h.state_dir: (0, 0)}
    )
    assert checks == [
        Check(
            "disk (state)",
            WARN,
            f"{h.state_dir}: 0 B free of 0 B",
            "free some space: a full disk refuses new messages",
        ),
        Check("disk limits", OK, "no limits"),
    ]
    assert asked == [h.groups_dir, h.state_dir]


def test_a_queue_without_its_reserve_warns(h: Home, disks: Any) -> None:
    h.state_dir.mkdir(parents=True)
    (h.state_dir / "queue.db").write_bytes(b"")
    checks, _, _ = disks({}, {})
    reserve = h.state_dir / "reserve"
    assert checks == [
        Check(
            "disk reserve",
            WARN,
            f"{reserve} is missing (released on a full disk, or not enough room to make it); "
            "the daemon makes it again when there is room",
        ),
        Check("disk limits", OK, "no limits"),
    ]
    reserve.write_bytes(b"")
    assert disks({}, {})[0] == [Check("disk limits", OK, "no limits")]


def test_a_reserve_without_a_queue_is_no_finding(h: Home, disks: Any) -> None:
    h.state_dir.mkdir(parents=True)
    assert disks({}, {})[0] == [Check("disk limits", OK, "no limits")]


def test_check_disk_on_the_real_filesystem(h: Home) -> None:
    h.ensure_writable()
    checks = check_disk(h)
    assert [c.name for c in checks] == ["disk (groups and state)", "disk limits"]
    assert checks[0].detail.startswith(f"{h.groups_dir}: ")
