"""Lifecycle and reconcile logic above the backend, on the fake backend."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config import OrchestratorConfig
from orchestrator.errors import InvalidConfig, MountRefused, OrchestratorError
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, set_option
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_HOME
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime, GroupsOverview


@pytest.fixture
def runtime(home: Path) -> GroupRuntime:
    h = Home(home)
    config = OrchestratorConfig(project="t", mount_allowlist=home.parent / "allow.yaml")
    GroupStore(h).add(GroupConfig(name="Fam"))
    return GroupRuntime(
        h, config, FakeBackend(), lambda: "img:1", skills_root=None, ready=lambda _: True
    )


def fake(runtime: GroupRuntime) -> FakeBackend:
    assert isinstance(runtime.backend, FakeBackend)
    return runtime.backend


def test_ensure_running_prepares_host_then_creates_and_starts(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    info = runtime.ensure_running(group)
    assert info.running and info.name == "t.fam"
    assert fake(runtime).calls == [("create", "t.fam"), ("start", "t.fam")]
    for path in (group.sessions_dir, group.files_dir, runtime.home.runtime_dir("fam")):
        assert path.is_dir()
    assert group.instructions_file.read_bytes() == b""
    assert group.learned_file.read_bytes() == b""
    if os.geteuid() == 0:  # a root-owned group runs as the unprivileged default
        assert os.stat(group.memory_dir / "index.md").st_uid == 10001
        assert fake(runtime).specs["t.fam"].user == "10001:10001"
    assert runtime.activity.last("fam") is not None


def test_a_cold_start_asks_the_engine_about_the_container_twice(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once before (is there one?) and once when its runner answered (the info returned):
    a container made here is started without asking whether it runs, and a runner that
    answers within its first polls is not checked for having died."""
    group = runtime.store.load("fam")
    asked: list[str] = []
    inspect = fake(runtime).inspect
    monkeypatch.setattr(fake(runtime), "inspect", lambda name: asked.append(name) or inspect(name))
    info = runtime.ensure_running(group)
    assert info.running and asked == ["t.fam", "t.fam"]
    assert fake(runtime).calls == [("create", "t.fam"), ("start", "t.fam")]


def test_ensure_running_is_a_no_op_when_current(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    runtime.ensure_running(group)
    assert fake(runtime).calls == [("create", "t.fam"), ("start", "t.fam")]


def test_killed_container_is_started_again(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    fake(runtime).kill("t.fam")
    assert runtime.ensure_running(group).running
    assert fake(runtime).calls[-1] == ("start", "t.fam")


def test_changed_config_recreates(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    config_file = group.config_file
    config_file.write_text(config_file.read_text().replace("pids: 256", "pids: 128"))
    plan = runtime.plan()
    assert [(a.kind, a.reason) for a in plan] == [("recreate", "config changed")]
    runtime.reconcile()
    assert fake(runtime).specs["t.fam"].pids_limit == 128
    assert [a.kind for a in runtime.plan()] == ["adopt"]


def test_orphan_and_exited_are_removed(runtime: GroupRuntime) -> None:
    store = runtime.store
    store.add(GroupConfig(name="Other"))
    runtime.ensure_running(store.load("fam"))
    runtime.ensure_running(store.load("other"))
    fake(runtime).kill("t.fam")
    store.remove(store.load("other"), purge=True)
    actions = runtime.reconcile()
    assert sorted((a.kind, a.container) for a in actions) == [
        ("remove", "t.fam"),
        ("remove-orphan", "t.other"),
    ]
    assert fake(runtime).containers == {}


def test_symlinked_mount_source_is_refused(runtime: GroupRuntime, tmp_path: Path) -> None:
    group = runtime.store.load("fam")
    secret = tmp_path / "secret"
    secret.mkdir()
    group.files_dir.symlink_to(secret)  # made by the container's first start
    with pytest.raises(InvalidConfig, match="is a symlink; refusing to mount"):
        runtime.ensure_running(group)
    assert fake(runtime).calls == []


def test_refused_extra_mount_stops_the_start(runtime: GroupRuntime, tmp_path: Path) -> None:
    group = runtime.store.load("fam")
    with open(group.config_file, "a") as handle:
        handle.write(f"\nmounts: [{{host: {tmp_path}, name: t}}]\n".replace("mounts: []", ""))
    text = group.config_file.read_text().replace("mounts: []\n", "")
    group.config_file.write_text(text)
    with pytest.raises(MountRefused, match="no mount allowlist"):
        runtime.ensure_running(runtime.store.load("fam"))
    assert fake(runtime).calls == []


def test_status(runtime: GroupRuntime) -> None:
    assert [(s.folder, s.state, s.drift) for s in runtime.status()] == [("fam", "absent", None)]
    runtime.ensure_running(runtime.store.load("fam"))
    (row,) = runtime.status()
    assert (row.state, row.drift, row.memory_bytes) == ("running", False, 1024 * 1024)
    assert row.uptime_seconds is not None and row.last_activity is not None


def test_the_overview_holds_each_group_once_and_survives_the_wire(runtime: GroupRuntime) -> None:
    """What the daemon sends ``orchestrator status`` is what the command would compute."""
    GroupStore(runtime.home).add(GroupConfig(name="Work", timezone="Europe/Paris"))
    broken = runtime.home.groups_dir / "broken"
    broken.mkdir()
    (broken / "group.yaml").write_text("name: [unclosed\n")
    runtime.ensure_running(runtime.store.load("work"))
    (runtime.home.groups_dir / "work" / "files" / "big").write_bytes(b"x" * 65536)
    overview = runtime.overview()
    assert [(r.folder, r.state) for r in overview.rows] == [("fam", "absent"), ("work", "running")]
    assert [i.folder for i in overview.invalid] == ["broken"]
    assert overview.invalid[0].problem  # says what is wrong
    assert overview.timezones["work"] == "Europe/Paris"
    assert overview.disk_bytes["work"] >= 65536 > overview.disk_bytes["fam"]
    work = runtime.store.load("work")
    assert overview.disk_limits["work"] == work.config.container.disk_bytes
    sent = json.loads(json.dumps(overview.to_dict()))
    assert GroupsOverview.from_dict(sent) == overview
    del sent["groups"][1]["timezone"]
    with pytest.raises(KeyError):  # a daemon of another release: the command computes it
        GroupsOverview.from_dict(sent)


def test_rootless_engine_runs_as_root_inside(home: Path) -> None:
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="Fam"))
    runtime = GroupRuntime(
        h, OrchestratorConfig(project="t"), FakeBackend({"rootless": True}), lambda: "img:1"
    )
    assert runtime.desired_spec(runtime.store.load("fam")).user == "0:0"


def test_idle_container_is_stopped_then_removed(runtime: GroupRuntime) -> None:
    from dataclasses import replace

    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    long_ago = 1_000_000.0
    os.utime(runtime.activity.root / "fam", (long_ago, long_ago))
    backend = fake(runtime)
    backend.containers["t.fam"] = replace(backend.containers["t.fam"], started_at=long_ago)
    assert [(a.kind, a.container) for a in runtime.reconcile()] == [("stop-idle", "t.fam")]
    assert backend.containers["t.fam"].state == "exited"
    assert [a.kind for a in runtime.reconcile()] == ["remove"]
    assert backend.containers == {}


def _other_home(runtime: GroupRuntime, tmp_path: Path) -> GroupRuntime:
    """A second home on the same (fake) engine, with the same project name and a group
    in the same folder."""
    other_root = tmp_path / "other-home"
    other_root.mkdir()
    h = Home(other_root)
    GroupStore(h).add(GroupConfig(name="Fam"))
    return GroupRuntime(
        h, runtime.config, runtime.backend, lambda: "img:1", skills_root=None, ready=lambda _: True
    )


def test_another_homes_container_is_never_adopted_recreated_or_removed(
    runtime: GroupRuntime, tmp_path: Path
) -> None:
    other = _other_home(runtime, tmp_path)
    other.ensure_running(other.store.load("fam"))  # same project, same folder: same name
    theirs = fake(runtime).containers["t.fam"]
    with pytest.raises(OrchestratorError, match="belongs to another orchestrator home"):
        runtime.ensure_running(runtime.store.load("fam"))
    with pytest.raises(OrchestratorError, match="belongs to another orchestrator home"):
        runtime.stop(runtime.store.load("fam"))
    assert runtime.plan() == []  # reconcile does not see it: not an orphan of ours
    runtime.reconcile()
    assert fake(runtime).containers["t.fam"] == theirs


def test_a_container_of_the_old_scheme_that_mounts_this_home_is_replaced_once(
    runtime: GroupRuntime,
) -> None:
    group = runtime.store.load("fam")
    old = replace(runtime.desired_spec(group), name="t-fam")
    old = replace(old, labels={k: v for k, v in old.labels.items() if k != LABEL_HOME})
    fake(runtime).create(old)
    foreign = replace(old, name="x-fam", mounts=())  # old scheme, someone else's
    fake(runtime).create(foreign)
    plan = runtime.plan()
    assert [(a.kind, a.container) for a in plan] == [("replace-legacy", "t-fam")]
    runtime.reconcile()
    assert "t-fam" not in fake(runtime).containers and "x-fam" in fake(runtime).containers
    assert runtime.plan() == []  # once


def test_a_changed_project_name_recreates_under_the_new_name(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    renamed = GroupRuntime(
        runtime.home,
        replace(runtime.config, project="newname"),
        runtime.backend,
        lambda: "img:1",
        skills_root=None,
        ready=lambda _: True,
    )
    assert [(a.kind, a.container) for a in renamed.plan()] == [("recreate", "t.fam")]
    renamed.reconcile()
    assert set(fake(runtime).containers) == {"newname.fam"}


def test_start_recreates_a_container_whose_configuration_changed(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    first = runtime.ensure_running(group)
    set_option(group.config_file, "container.pids", "128")
    second = runtime.ensure_running(runtime.store.load("fam"))
    assert second.id != first.id  # a new container, not the old one started again
    assert fake(runtime).specs["t.fam"].pids_limit == 128
    assert ("remove", "t.fam") in fake(runtime).calls


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("session_mode", "shared"),
        ("model", "offline-other"),
        ("context_budget", "9000"),
        ("container.memory", "1g"),
        ("container.cpus", "0.5"),
        ("container.network", "bridge"),
    ],
)
def test_every_setting_the_container_runs_with_changes_its_hash(
    runtime: GroupRuntime, key: str, value: str
) -> None:
    group = runtime.store.load("fam")
    before = runtime.desired_spec(group).labels["org.orchestrator.config-hash"]
    set_option(group.config_file, key, value)
    after = runtime.desired_spec(runtime.store.load("fam")).labels["org.orchestrator.config-hash"]
    assert after != before


def test_a_running_container_whose_runner_never_answers_is_recreated(
    runtime: GroupRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead runner socket (code in the container took it over and left): the host
    waits a short bound, then makes the container again instead of waiting on it turn
    after turn."""
    import dataclasses

    from orchestrator.limits import CONTAINER_READY_TIMEOUT_SECONDS

    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    backend = fake(runtime)
    name = runtime.container_name(group)
    old = backend.containers[name]
    # it has run long enough to answer, and from now on it answers nothing
    backend.containers[name] = dataclasses.replace(
        old, started_at=time.time() - CONTAINER_READY_TIMEOUT_SECONDS - 1
    )
    answers = iter([False] * 10_000)
    runtime._ready = lambda client: next(answers) if backend.containers[name].id == old.id else True
    backend.calls.clear()
    with caplog.at_level("WARNING"):
        info = runtime.ensure_running(group)
    assert info.running and info.id != old.id
    assert backend.calls == [("remove", name), ("create", name), ("start", name)]
    assert runtime.dead_sockets == {"fam": 1}
    assert "its runner does not answer" in caplog.text and "recreating it (1 times" in caplog.text
    # a container just started by someone else is waited for, not recreated
    backend.calls.clear()
    assert runtime.ensure_running(group).id == info.id and backend.calls == []
