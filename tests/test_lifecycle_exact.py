"""Exact behaviour of the group container lifecycle (runtime/lifecycle.py) on the fake
backend: the refusals of mount sources, handing folders over, the status overview's
form, the activity log, which containers are this home's, the spec a group gets, the
probe container, ensure-running's steps and counts, waiting for the runner, stop,
restart and remove, the reconcile plan and the status rows."""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import orchestrator
from orchestrator.config import OrchestratorConfig
from orchestrator.confined import ConfinedDir
from orchestrator.errors import BadInput, EngineError, InvalidConfig, OrchestratorError
from orchestrator.groups import Group, GroupStore
from orchestrator.groups.config import GroupConfig, set_option
from orchestrator.groups.packages import PackageSettings
from orchestrator.groups.webconfig import WebSettings
from orchestrator.home import Home
from orchestrator.limits import CONTAINER_READY_TIMEOUT_SECONDS, RUNNER_DEAD_SOCKET_SECONDS
from orchestrator.runtime import lifecycle
from orchestrator.runtime.base import (
    LABEL_CONFIG_HASH,
    LABEL_GROUP,
    LABEL_HOME,
    LABEL_PROJECT,
    LABEL_SETTINGS_HASH,
    BindMount,
    ContainerInfo,
    ContainerSpec,
)
from orchestrator.runtime.channel import RunnerClient, UnixSocketEndpoint
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import (
    ActivityLog,
    GroupRuntime,
    GroupsOverview,
    GroupStatus,
    InvalidGroup,
    _require_real,
    default_skills_root,
    hand_over,
)
from orchestrator.runtime.spec import with_hashes

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="changing owners needs root")


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


# the skills shipped beside the package


def test_the_default_skills_are_the_folder_beside_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "src" / "orchestrator"
    package.mkdir(parents=True)
    monkeypatch.setattr(orchestrator, "__file__", str(package / "__init__.py"))
    assert default_skills_root() is None
    (tmp_path / "src" / "skills").mkdir()
    assert default_skills_root() == tmp_path / "src" / "skills"


# mount sources


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[ConfinedDir]:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "sub").mkdir()
    (tmp_path / "d" / "file").write_text("x")
    (tmp_path / "d" / "link").symlink_to(tmp_path / "d" / "sub")
    os.mkfifo(tmp_path / "d" / "pipe")
    with ConfinedDir.open(tmp_path, "d") as opened:
        yield opened


def test_a_real_folder_and_a_real_file_are_accepted(folder: ConfinedDir) -> None:
    _require_real(folder, "sub", "folder")
    _require_real(folder, "file", "file")


def test_a_missing_source_is_refused(folder: ConfinedDir) -> None:
    with pytest.raises(InvalidConfig) as caught:
        _require_real(folder, "none", "folder")
    assert caught.value.message == f"{folder.shown}/none is missing; refusing to start without it"


def test_a_symlinked_source_is_refused_with_a_hint(folder: ConfinedDir) -> None:
    with pytest.raises(InvalidConfig) as caught:
        _require_real(folder, "link", "folder")
    assert caught.value.message == (
        f"{folder.shown}/link is a symlink; refusing to mount it into a container"
    )
    assert caught.value.hint == "replace it with a real folder"


@pytest.mark.parametrize(
    ("name", "kind", "shown"),
    [
        ("file", "folder", "a regular file"),
        ("sub", "file", "a folder"),
        ("pipe", "folder", "a FIFO"),
    ],
)
def test_a_source_of_the_wrong_kind_is_refused(
    folder: ConfinedDir, name: str, kind: str, shown: str
) -> None:
    with pytest.raises(InvalidConfig) as caught:
        _require_real(folder, name, kind)
    assert caught.value.message == (
        f"{folder.shown}/{name} is {shown}, not a {kind}; refusing to mount it"
    )


# handing folders over


@needs_root
def test_a_folder_of_another_owner_is_handed_over_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "mem" / "deep").mkdir(parents=True)
    (tmp_path / "mem" / "deep" / "f").write_text("x")
    with ConfinedDir.open(tmp_path) as top, caplog.at_level(logging.INFO):
        assert hand_over(top, "mem", (1234, 2345)) == 3
        assert hand_over(top, "mem", (1234, 2345)) == 0  # its owner is right now
        assert hand_over(top, "missing", (1234, 2345)) == 0
    st = os.stat(tmp_path / "mem" / "deep" / "f")
    assert (st.st_uid, st.st_gid) == (1234, 2345)
    assert caplog.messages == [f"gave 3 entries of {tmp_path}/mem to 1234:2345"]


@needs_root
def test_a_folder_whose_group_alone_differs_is_handed_over(tmp_path: Path) -> None:
    (tmp_path / "mem").mkdir()
    os.chown(tmp_path / "mem", 1234, 1)
    with ConfinedDir.open(tmp_path) as top:
        assert hand_over(top, "mem", (1234, 2345)) == 1
    os.chown(tmp_path / "mem", 1, 2345)
    with ConfinedDir.open(tmp_path) as top:
        assert hand_over(top, "mem", (1234, 2345)) == 1


# the status overview's form


def row(folder: str, **changes: Any) -> GroupStatus:
    values: dict[str, Any] = {
        "folder": folder,
        "name": folder.title(),
        "container": "t." + folder,
        "state": "running",
        "uptime_seconds": 5.0,
        "memory_bytes": 7,
        "drift": False,
        "last_activity": 1.5,
    }
    values.update(changes)
    return GroupStatus(**values)


def test_a_status_row_is_its_fields() -> None:
    assert row("fam").to_dict() == {
        "folder": "fam",
        "name": "Fam",
        "container": "t.fam",
        "state": "running",
        "uptime_seconds": 5.0,
        "memory_bytes": 7,
        "drift": False,
        "last_activity": 1.5,
    }


def test_the_overview_is_sent_as_groups_and_invalid_folders() -> None:
    overview = GroupsOverview(
        rows=[row("fam")],
        invalid=[InvalidGroup("bad", "group.yaml: broken")],
        disk_bytes={"fam": 10},
        disk_limits={"fam": 20},
        timezones={"fam": "UTC"},
    )
    sent = overview.to_dict()
    assert sent == {
        "groups": [
            {
                **row("fam").to_dict(),
                "disk_bytes": 10,
                "disk_limit_bytes": 20,
                "timezone": "UTC",
            }
        ],
        "invalid": [{"folder": "bad", "problem": "group.yaml: broken"}],
    }
    assert GroupsOverview.from_dict(sent) == overview


def test_the_overview_read_back_takes_its_numbers_and_zone_as_such() -> None:
    data = {
        "groups": [
            {
                **row("fam").to_dict(),
                "disk_bytes": "10",
                "disk_limit_bytes": 20.0,
                "timezone": 5,
                "extra": "ignored",
            }
        ],
        "invalid": [{"folder": 3, "problem": None}],
    }
    overview = GroupsOverview.from_dict(data)
    assert overview.rows == [row("fam")]
    assert overview.disk_bytes == {"fam": 10} and overview.disk_limits == {"fam": 20}
    assert overview.timezones == {"fam": "5"}
    assert overview.invalid == [InvalidGroup("3", None)]


# the activity log


def test_activity_is_the_time_of_a_file_per_group(home: Path) -> None:
    log = ActivityLog(Home(home))
    assert log.root == Home(home).state_dir / "activity"
    assert log.last("fam") is None
    log.touch("fam")
    os.utime(log.root / "fam", (100.0, 100.0))
    assert log.last("fam") == 100.0
    log.touch("fam")
    assert log.last("fam") != 100.0
    assert (log.root / "fam").read_bytes() == b""


def test_activity_folder_is_made_with_its_parents(tmp_path: Path) -> None:
    log = ActivityLog(SimpleNamespace(state_dir=tmp_path / "a" / "b"))  # type: ignore[arg-type]
    log.touch("fam")
    assert (tmp_path / "a" / "b" / "activity" / "fam").is_file()
    log.touch("fam")  # the folder exists now


# the runtime's own state


def test_rootless_is_asked_of_the_engine_unless_given(home: Path) -> None:
    h = Home(home)
    config = OrchestratorConfig(project="t")
    assert GroupRuntime(h, config, FakeBackend({"rootless": 1}), lambda: "i").rootless is True
    assert GroupRuntime(h, config, FakeBackend(), lambda: "i").rootless is False
    given = GroupRuntime(h, config, FakeBackend({"rootless": True}), lambda: "i", rootless=False)
    assert given.rootless is False


def test_the_runner_answers_by_its_ping_unless_told_otherwise(home: Path) -> None:
    runtime = GroupRuntime(Home(home), OrchestratorConfig(project="t"), FakeBackend(), lambda: "i")
    answers = iter([True, False])
    client = SimpleNamespace(ping=lambda: next(answers))
    assert runtime.ping(client) is True  # type: ignore[arg-type]
    assert runtime.ping(client) is False  # type: ignore[arg-type]
    assert runtime.dead_sockets == {} and runtime.starts == {}


def test_this_homes_containers_are_selected_by_its_identity(runtime: GroupRuntime) -> None:
    identity = runtime.home.identity
    assert runtime.project_labels == {LABEL_HOME: identity}
    assert runtime.owned(ContainerInfo("x", "i", "running", {LABEL_HOME: identity}))
    assert not runtime.owned(ContainerInfo("x", "i", "running", {LABEL_HOME: "other"}))
    assert not runtime.owned(ContainerInfo("x", "i", "running"))


def test_a_legacy_container_mounts_this_homes_groups(runtime: GroupRuntime) -> None:
    inside = str(runtime.store.root / "fam" / "memory")
    beside = str(runtime.store.root) + "-other/fam"
    group = {LABEL_GROUP: "fam"}
    assert runtime.is_legacy(ContainerInfo("x", "i", "exited", group, mounts=("/a", inside)))
    assert not runtime.is_legacy(ContainerInfo("x", "i", "exited", group, mounts=(beside,)))
    assert not runtime.is_legacy(ContainerInfo("x", "i", "exited", group, mounts=()))
    assert not runtime.is_legacy(ContainerInfo("x", "i", "exited", {}, mounts=(inside,)))
    homed = {**group, LABEL_HOME: "h"}
    assert not runtime.is_legacy(ContainerInfo("x", "i", "exited", homed, mounts=(inside,)))


def test_a_legacy_mount_through_a_symlink_is_still_this_home(
    runtime: GroupRuntime, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(runtime.store.root)
    info = ContainerInfo("x", "i", "exited", {LABEL_GROUP: "fam"}, mounts=(str(link / "fam"),))
    assert runtime.is_legacy(info)


def test_legacy_containers_are_listed_among_those_with_a_group_label(
    runtime: GroupRuntime,
) -> None:
    backend = fake(runtime)
    inside = str(runtime.store.root / "fam")
    for name, labels, mounts in (
        ("old", {LABEL_GROUP: "fam"}, (inside,)),
        ("foreign", {LABEL_GROUP: "fam"}, ("/elsewhere",)),
        ("nolabel", {}, (inside,)),
    ):
        backend.containers[name] = ContainerInfo(name, name, "exited", labels, mounts=mounts)
    assert [c.name for c in runtime.legacy_containers()] == ["old"]


def test_a_container_of_another_home_is_refused_by_name(runtime: GroupRuntime) -> None:
    backend = fake(runtime)
    backend.containers["t.fam"] = ContainerInfo("t.fam", "i", "running", {LABEL_HOME: "h2"})
    with pytest.raises(OrchestratorError) as caught:
        runtime.ensure_running(runtime.store.load("fam"))
    assert caught.value.message == (
        "a container named t.fam belongs to another orchestrator home (home id h2); "
        "it is left alone"
    )
    assert caught.value.hint == (
        "give this home its own `project:` in orchestrator.yaml, or remove that "
        "container from the home it belongs to"
    )
    backend.containers["t.fam"] = ContainerInfo("t.fam", "i", "running", {LABEL_GROUP: "fam"})
    with pytest.raises(OrchestratorError, match=r"\(home id unknown\)"):
        runtime.stop(runtime.store.load("fam"))
    assert ("remove", "t.fam") not in backend.calls


def test_a_legacy_container_by_the_name_is_removed_and_made_again(
    runtime: GroupRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    backend = fake(runtime)
    inside = str(runtime.store.root / "fam")
    backend.containers["t.fam"] = ContainerInfo(
        "t.fam", "old", "running", {LABEL_GROUP: "fam"}, mounts=(inside,)
    )
    with caplog.at_level(logging.INFO, logger="orchestrator.runtime.lifecycle"):
        info = runtime.ensure_running(runtime.store.load("fam"))
    assert info.id != "old" and info.home == runtime.home.identity
    assert backend.calls == [("remove", "t.fam"), ("create", "t.fam"), ("start", "t.fam")]
    assert "replacing t.fam: a container of the old naming scheme" in caplog.messages


# the spec a group gets


def packaged(group: Group) -> Group:
    """``group`` with a Debian package to install: it has an image of its own."""
    packages = PackageSettings(debian=("jq",))
    return dataclasses.replace(group, config=dataclasses.replace(group.config, packages=packages))


@needs_root
def test_a_group_runs_as_its_folders_owner_or_the_fallback(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    os.chown(group.path, 0, 0)
    assert runtime.user_for(group) == (10001, 10001)
    os.chown(group.path, 1500, 1600)
    assert runtime.user_for(group) == (1500, 1600)
    runtime.rootless = True
    assert runtime.user_for(group) == (0, 0)


def test_a_group_runs_its_own_image_only_when_it_has_packages(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    assert runtime.image_of(group, "agent:1") == "agent:1"
    asked: list[tuple[str, str]] = []
    runtime.group_image = lambda g, agent: asked.append((g.folder, agent)) or "own:1"  # type: ignore[func-returns-value]
    assert runtime.image_of(group, "agent:1") == "agent:1"  # no packages
    with_packages = packaged(group)
    assert runtime.image_of(with_packages, "agent:1") == "own:1"
    assert asked == [("fam", "agent:1")]


def test_the_desired_spec_takes_the_image_given_or_asks_for_one(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    asked: list[int] = []
    runtime.image = lambda: asked.append(1) or "img:2"  # type: ignore[func-returns-value]
    assert runtime.desired_spec(group, "given:1").image == "given:1"
    assert asked == []
    spec = runtime.desired_spec(group)
    assert spec.image == "img:2" and asked == [1]
    assert spec.name == "t.fam" and spec.labels[LABEL_HOME] == runtime.home.identity
    assert str(runtime.home.runtime_dir("fam")) in {m.source for m in spec.mounts}


def test_a_new_agent_image_is_no_new_setting_but_a_groups_own_image_is(
    runtime: GroupRuntime,
) -> None:
    group = runtime.store.load("fam")
    one = runtime.desired_spec(group, "agent:1")
    two = runtime.desired_spec(group, "agent:2")
    assert one.labels[LABEL_SETTINGS_HASH] == two.labels[LABEL_SETTINGS_HASH]
    assert one.labels[LABEL_CONFIG_HASH] != two.labels[LABEL_CONFIG_HASH]
    runtime.group_image = lambda g, agent: "own:" + agent
    three = runtime.desired_spec(packaged(group), "agent:1")
    four = runtime.desired_spec(packaged(group), "agent:2")
    assert three.image == "own:agent:1"
    assert three.labels[LABEL_SETTINGS_HASH] != four.labels[LABEL_SETTINGS_HASH]
    assert three.labels == with_hashes(three, "own:agent:1").labels


class Adapting(FakeBackend):
    """A backend that changes the spec it runs (as one whose runners dial in)."""

    def adapt(self, spec: ContainerSpec) -> ContainerSpec:
        return dataclasses.replace(spec, environment={**spec.environment, "DIAL": "x"})


def test_a_spec_the_backend_changes_is_hashed_again(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    plain = runtime.desired_spec(group, "agent:1")
    assert runtime.adapted(plain) is plain  # the fake backend runs it as it is
    runtime.backend = Adapting()
    adapted = runtime.desired_spec(group, "agent:1")
    assert adapted.environment["DIAL"] == "x"
    assert adapted.labels[LABEL_CONFIG_HASH] != plain.labels[LABEL_CONFIG_HASH]
    assert adapted.labels == with_hashes(adapted, "").labels
    assert (
        runtime.adapted(plain, "own:1").labels
        == with_hashes(Adapting().adapt(plain), "own:1").labels
    )


def test_the_egress_folder_is_in_the_state_folder(runtime: GroupRuntime) -> None:
    assert runtime.egress_dir("fam") == runtime.home.state_dir / "egress" / "fam"


def test_mount_sources_in_the_home_are_given_as_the_engine_sees_them(
    runtime: GroupRuntime,
) -> None:
    group = runtime.store.load("fam")
    spec = runtime.desired_spec(group, "agent:1")
    assert runtime.on_host(spec) is spec
    spec = dataclasses.replace(
        spec,
        mounts=(
            BindMount(str(runtime.home.root), "/home", True),
            BindMount(str(runtime.home.root / "groups" / "fam"), "/g", False),
            BindMount("/elsewhere/x", "/x", True),
            BindMount(str(runtime.home.root) + "-beside/x", "/y", True),
        ),
    )
    runtime.config = dataclasses.replace(runtime.config, host_home=Path("/srv/home"))
    moved = runtime.on_host(spec, "own:1")
    assert [m.source for m in moved.mounts] == [
        "/srv/home",
        "/srv/home/groups/fam",
        "/elsewhere/x",
        str(runtime.home.root) + "-beside/x",
    ]
    assert [(m.target, m.read_only) for m in moved.mounts] == [
        ("/home", True),
        ("/g", False),
        ("/x", True),
        ("/y", True),
    ]
    assert moved.labels == with_hashes(moved, "own:1").labels
    assert moved.labels != with_hashes(moved, "").labels


def test_the_desired_spec_is_on_the_host_as_the_engine_sees_it(runtime: GroupRuntime) -> None:
    runtime.config = dataclasses.replace(runtime.config, host_home=Path("/srv/home"))
    spec = runtime.desired_spec(runtime.store.load("fam"), "agent:1")
    assert f"/srv/home/{runtime.store.root.relative_to(runtime.home.root)}/fam/memory" in {
        m.source for m in spec.mounts
    }


# the probe container


def test_a_probe_runs_like_the_group_but_with_nothing_of_it(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[tuple[ContainerSpec, float]] = []
    monkeypatch.setattr(
        fake(runtime), "run_once", lambda spec, timeout: ran.append((spec, timeout)) or (0, "out")
    )
    group = runtime.store.load("fam")
    assert runtime.probe(group, ["pip", "list"]) == (0, "out")
    runtime.probe(group, ["x"], timeout=5)
    (probe, timeout), (_, short) = ran
    spec = runtime.desired_spec(group)
    assert probe.name.startswith("t.fam-probe-") and len(probe.name) == len("t.fam-probe-") + 6
    assert probe.command == ("pip", "list") and probe.mounts == ()
    assert probe.labels == {LABEL_PROJECT: "t"} and probe.network_mode == "none"
    assert (probe.image, probe.user, probe.environment) == (spec.image, spec.user, spec.environment)
    assert (timeout, short) == (90, 5)


# preparing the host


@needs_root
def test_the_host_folders_are_made_and_given_to_the_groups_user(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    os.chown(group.path, 1500, 1600)
    spec = runtime.desired_spec(group)
    runtime.prepare_host(group, spec)
    for path in (group.memory_dir, group.sessions_dir, group.files_dir):
        st = os.stat(path)
        assert (st.st_uid, st.st_gid) == (1500, 1600)
    run = runtime.home.runtime_dir("fam")
    st = os.stat(run)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1500, 1600, 0o700)
    for path in (group.instructions_file, group.learned_file):
        assert os.stat(path).st_uid == 0  # host-owned
    assert not runtime.egress_dir("fam").exists()  # no web: no gate folder


@needs_root
def test_folders_of_a_wrong_owner_are_handed_over_again(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    os.chown(group.path, 1500, 1600)
    spec = runtime.desired_spec(group)
    runtime.prepare_host(group, spec)
    os.chown(group.sessions_dir, 0, 0)
    os.chown(runtime.home.runtime_dir("fam"), 0, 0)
    runtime.prepare_host(group, spec)
    assert os.stat(group.sessions_dir).st_uid == 1500
    assert os.stat(runtime.home.runtime_dir("fam")).st_uid == 1500


@needs_root
def test_a_spec_running_as_root_gives_nothing_away(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    os.chown(group.path, 1500, 1600)
    spec = dataclasses.replace(runtime.desired_spec(group), user="0:0")
    runtime.prepare_host(group, spec)
    assert os.stat(group.sessions_dir).st_uid == 0
    assert os.stat(runtime.home.runtime_dir("fam")).st_uid == 0
    spec = dataclasses.replace(spec, user="0:5")
    runtime.prepare_host(group, spec)
    runtime.prepare_host(group, dataclasses.replace(spec, user="5:0"))
    assert os.stat(group.files_dir).st_uid == 5


def test_a_group_folder_that_is_a_symlink_is_refused(runtime: GroupRuntime, tmp_path: Path) -> None:
    group = runtime.store.load("fam")
    spec = runtime.desired_spec(group)
    real = tmp_path / "real"
    group.path.rename(real)
    group.path.symlink_to(real)
    with pytest.raises(InvalidConfig) as caught:
        runtime.prepare_host(group, spec)
    assert caught.value.message.endswith("; a group folder must be a real folder")
    assert str(group.path) in caught.value.message or "fam" in caught.value.message


def test_broken_memory_stops_the_start(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    spec = runtime.desired_spec(group)
    group.memory_dir.mkdir(exist_ok=True)
    (group.memory_dir / "index.md").unlink(missing_ok=True)
    (group.memory_dir / "index.md").mkdir()
    with pytest.raises(InvalidConfig) as caught:
        runtime.prepare_host(group, spec)
    assert caught.value.message.startswith("memory of group 'fam': ")
    assert caught.value.hint == "fix or remove the entries named, then start again"


def test_a_web_group_gets_its_gate_folder_readable_by_all(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    web = WebSettings(enabled=True)
    group = dataclasses.replace(group, config=dataclasses.replace(group.config, web=web))
    old = os.umask(0o077)
    try:
        runtime.prepare_host(group, runtime.desired_spec(group))
    finally:
        os.umask(old)
    egress = runtime.egress_dir("fam")
    assert egress.is_dir() and stat.S_IMODE(os.stat(egress).st_mode) == 0o755
    runtime.prepare_host(group, runtime.desired_spec(group))  # it exists now


def test_an_unknown_skill_is_refused_when_any_are_known(
    runtime: GroupRuntime, tmp_path: Path
) -> None:
    group = runtime.store.load("fam")
    set_option(group.config_file, "skills", "[nosuch]")
    group = runtime.store.load("fam")
    spec = runtime.desired_spec(group)
    runtime.prepare_host(group, spec)  # no skills known at all: nothing to check against
    skills = tmp_path / "skills"
    (skills / "known").mkdir(parents=True)
    (skills / "known" / "SKILL.md").write_text("---\nname: known\ndescription: d\n---\nx\n")
    runtime.skills_root = skills
    with pytest.raises(BadInput) as caught:
        runtime.prepare_host(group, spec)
    assert caught.value.message == (
        "group 'fam' asks for skill 'nosuch', which is neither built in nor installed for it"
    )
    assert caught.value.hint == (
        "see: orchestrator skill list --group fam; add one with: orchestrator skill add PATH"
    )
    set_option(group.config_file, "skills", "[known]")
    group = runtime.store.load("fam")
    runtime.prepare_host(group, spec)


def test_an_unknown_skill_is_refused_with_an_empty_skills_folder(
    runtime: GroupRuntime, tmp_path: Path
) -> None:
    group = runtime.store.load("fam")
    set_option(group.config_file, "skills", "[nosuch]")
    group = runtime.store.load("fam")
    (tmp_path / "empty").mkdir()
    runtime.skills_root = tmp_path / "empty"
    with pytest.raises(BadInput):
        runtime.prepare_host(group, runtime.desired_spec(group))


# ensure-running


def test_starts_are_counted_by_why(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    assert runtime.starts == {("fam", "created"): 1}
    fake(runtime).kill("t.fam")
    runtime.ensure_running(group)
    assert runtime.starts == {("fam", "created"): 1, ("fam", "started"): 1}
    runtime.restart(group)
    runtime.restart(group)
    assert runtime.starts[("fam", "restarted")] == 2
    set_option(group.config_file, "container.pids", "128")
    runtime.ensure_running(runtime.store.load("fam"), made_for="other")
    assert runtime.starts[("fam", "drifted")] == 1
    assert ("fam", "other") not in runtime.starts


def test_ensure_running_prepares_storage_with_the_spec(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared: list[ContainerSpec] = []
    monkeypatch.setattr(fake(runtime), "prepare_storage", prepared.append)
    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    assert prepared == [runtime.desired_spec(group)]


class Racing(FakeBackend):
    """Another ensure-running makes the container between our inspect and create."""

    def __init__(self, theirs: str) -> None:
        super().__init__()
        self.theirs = theirs

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        if self.theirs != "none" and spec.name not in self.containers:
            super().create(spec)
            if self.theirs == "running":
                super().start(spec.name)
            self.calls.clear()
        elif self.theirs == "none":
            self.calls.append(("create", spec.name))
            raise EngineError("engine refused create: conflict")
        return super().create(spec)


@pytest.mark.parametrize(("theirs", "calls"), [("running", []), ("created", ["start"])])
def test_losing_the_race_to_create_uses_the_other_container(
    runtime: GroupRuntime, theirs: str, calls: list[str]
) -> None:
    runtime.backend = Racing(theirs)
    info = runtime.ensure_running(runtime.store.load("fam"))
    assert info.running
    assert [c for c, _ in fake(runtime).calls if c != "create"] == calls
    assert runtime.starts == {("fam", "created"): 1}


def test_a_refused_create_with_no_container_is_raised(runtime: GroupRuntime) -> None:
    runtime.backend = Racing("none")
    with pytest.raises(EngineError, match="conflict"):
        runtime.ensure_running(runtime.store.load("fam"))
    assert fake(runtime).calls == [("create", "t.fam")]
    assert runtime.starts == {}


def test_a_settled_runner_that_answers_is_used_as_it_is(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    first = runtime.ensure_running(group)
    fake(runtime).calls.clear()
    waited: list[float] = []
    real = runtime.wait_ready
    runtime.wait_ready = lambda g, timeout=CONTAINER_READY_TIMEOUT_SECONDS: (  # type: ignore[method-assign]
        waited.append(timeout) or real(g, timeout)
    )
    assert runtime.ensure_running(group).id == first.id
    assert waited == [RUNNER_DEAD_SOCKET_SECONDS]
    assert fake(runtime).calls == []


def test_a_dead_runner_is_made_again_each_time_and_counted(
    runtime: GroupRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    group = runtime.store.load("fam")
    runtime.ensure_running(group)
    backend = fake(runtime)

    def wait(g: Any, timeout: float = CONTAINER_READY_TIMEOUT_SECONDS) -> ContainerInfo:
        if timeout == RUNNER_DEAD_SOCKET_SECONDS:
            raise OrchestratorError("silent")
        return backend.containers["t.fam"]

    runtime.wait_ready = wait  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="orchestrator.runtime.lifecycle"):
        for _ in range(2):
            info = backend.containers["t.fam"]
            backend.containers["t.fam"] = dataclasses.replace(info, started_at=1.0)
            runtime.ensure_running(group)
    assert runtime.dead_sockets == {"fam": 2}
    assert runtime.starts[("fam", "dead-runner")] == 2
    assert caplog.messages[-1] == (
        "group fam: its container runs but its runner does not answer (silent); "
        "recreating it (2 times since the daemon started)"
    )


def test_a_running_container_is_settled_when_it_answered_or_ran_long_enough(
    runtime: GroupRuntime,
) -> None:
    now = time.time()
    labels = {LABEL_GROUP: "fam"}
    old = now - CONTAINER_READY_TIMEOUT_SECONDS - 5
    young = now - CONTAINER_READY_TIMEOUT_SECONDS + 5
    assert not runtime._settled(ContainerInfo("t.fam", "a", "exited", labels, started_at=old))
    assert runtime._settled(ContainerInfo("t.fam", "a", "running", labels, started_at=old))
    assert not runtime._settled(ContainerInfo("t.fam", "a", "running", labels, started_at=young))
    assert runtime._settled(ContainerInfo("t.fam", "a", "running", labels))  # no start time
    runtime._answered["fam"] = "a"
    assert runtime._settled(ContainerInfo("t.fam", "a", "running", labels, started_at=young))
    assert not runtime._settled(ContainerInfo("t.fam", "b", "running", labels, started_at=young))
    assert not runtime._settled(ContainerInfo("t.fam", "a", "running", {}, started_at=young))
    assert not runtime._settled(ContainerInfo("t.fam", "a", "exited", labels, started_at=young))


def test_the_runner_is_reached_where_the_backend_says(runtime: GroupRuntime) -> None:
    client = runtime.runner(runtime.store.load("fam"))
    assert isinstance(client, RunnerClient)
    assert client.endpoint == UnixSocketEndpoint(runtime.home.runtime_dir("fam") / "runner.sock")


# waiting for the runner


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The module's monotonic clock, moved by each sleep (and time.time as it is)."""
    state = SimpleNamespace(now=1000.0, slept=[])

    def sleep(seconds: float) -> None:
        state.slept.append(seconds)
        state.now += seconds

    monkeypatch.setattr(
        lifecycle,
        "time",
        SimpleNamespace(monotonic=lambda: state.now, sleep=sleep, time=time.time),
    )
    return state


def started(runtime: GroupRuntime, state: str = "running") -> str:
    group = runtime.store.load("fam")
    spec = runtime.desired_spec(group)
    fake(runtime).create(spec)
    fake(runtime).start(spec.name)
    info = fake(runtime).containers[spec.name]
    fake(runtime).containers[spec.name] = dataclasses.replace(info, state=state)
    fake(runtime).calls.clear()
    return spec.name


def test_ready_is_the_first_answer_of_a_running_container(
    runtime: GroupRuntime, clock: SimpleNamespace
) -> None:
    name = started(runtime)
    answers = iter([False, False, True])
    runtime._ready = lambda client: next(answers)
    info = runtime.wait_ready(runtime.store.load("fam"))
    assert info.name == name
    assert clock.slept == [0.01, 0.01]
    assert runtime._answered == {"fam": info.id}


def test_an_answer_from_a_container_not_running_is_not_ready(
    runtime: GroupRuntime, clock: SimpleNamespace
) -> None:
    started(runtime, "restarting")
    runtime._ready = lambda client: True
    with pytest.raises(OrchestratorError) as caught:
        runtime.wait_ready(runtime.store.load("fam"), timeout=1)
    assert caught.value.message == "the runner in t.fam did not answer within 1s"
    assert caught.value.hint == "see: orchestrator logs fam"
    assert runtime._answered == {}


def test_the_engine_is_asked_every_twentieth_poll(
    runtime: GroupRuntime, clock: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    started(runtime)
    asked: list[int] = []
    inspect = fake(runtime).inspect
    monkeypatch.setattr(
        fake(runtime), "inspect", lambda name: asked.append(len(clock.slept)) or inspect(name)
    )
    runtime._ready = lambda client: False
    with pytest.raises(OrchestratorError, match="did not answer within 1s"):
        runtime.wait_ready(runtime.store.load("fam"), timeout=1.0)
    assert asked == [19, 39, 59, 79, 99]  # polls until the deadline has passed


def test_the_default_wait_is_the_ready_timeout(
    runtime: GroupRuntime, clock: SimpleNamespace
) -> None:
    started(runtime)
    runtime._ready = lambda client: False
    with pytest.raises(OrchestratorError) as caught:
        runtime.wait_ready(runtime.store.load("fam"))
    assert caught.value.message == (
        f"the runner in t.fam did not answer within {CONTAINER_READY_TIMEOUT_SECONDS:.0f}s"
    )


class Logged(FakeBackend):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines
        self.tails: list[int | None] = []

    def logs(self, name: str, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        self.tails.append(tail)
        yield from self.lines


@pytest.mark.parametrize("state", ["exited", "dead"])
def test_a_container_that_ends_while_starting_shows_its_last_lines(
    runtime: GroupRuntime, clock: SimpleNamespace, state: str
) -> None:
    runtime.backend = Logged(["one", "two"])
    started(runtime, state)
    runtime._ready = lambda client: False
    with pytest.raises(OrchestratorError) as caught:
        runtime.wait_ready(runtime.store.load("fam"))
    assert caught.value.message == "container t.fam exited while starting: one\ntwo"
    assert caught.value.hint == "see: orchestrator logs fam"
    assert runtime.backend.tails == [5]  # type: ignore[attr-defined]
    assert len(clock.slept) == 19


def test_a_container_that_ends_silently_or_vanishes_says_so(
    runtime: GroupRuntime, clock: SimpleNamespace
) -> None:
    runtime.backend = Logged([])
    started(runtime, "exited")
    runtime._ready = lambda client: False
    with pytest.raises(OrchestratorError) as caught:
        runtime.wait_ready(runtime.store.load("fam"))
    assert caught.value.message == "container t.fam exited while starting"
    fake(runtime).containers.clear()
    with pytest.raises(OrchestratorError) as caught:
        runtime.wait_ready(runtime.store.load("fam"))
    assert caught.value.message == "container t.fam vanished while starting"
    assert runtime.backend.tails == [5]  # type: ignore[attr-defined]


def test_a_created_container_is_waited_for(runtime: GroupRuntime, clock: SimpleNamespace) -> None:
    started(runtime, "created")
    runtime._ready = lambda client: False
    with pytest.raises(OrchestratorError, match="did not answer"):
        runtime.wait_ready(runtime.store.load("fam"), timeout=0.5)


# stop, restart, recreate, remove


def test_stop_stops_a_running_or_starting_container(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    assert runtime.stop(group) is False
    for state, stopped in (("running", True), ("starting", True), ("exited", False)):
        started(runtime, state)
        assert runtime.stop(group) is stopped
        assert fake(runtime).calls == ([("stop", "t.fam")] if stopped else [])
        fake(runtime).remove("t.fam")


def test_restart_removes_this_homes_container_first(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    runtime.restart(group)
    assert fake(runtime).calls == [("create", "t.fam"), ("start", "t.fam")]
    fake(runtime).calls.clear()
    runtime.restart(group)
    assert fake(runtime).calls == [("remove", "t.fam"), ("create", "t.fam"), ("start", "t.fam")]


def test_recreate_removes_an_old_name_then_restarts(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    runtime.recreate(group, "old.fam")
    assert fake(runtime).calls == [("remove", "old.fam"), ("create", "t.fam"), ("start", "t.fam")]
    fake(runtime).calls.clear()
    runtime.recreate(group, "t.fam")
    assert fake(runtime).calls == [("remove", "t.fam"), ("create", "t.fam"), ("start", "t.fam")]
    fake(runtime).calls.clear()
    runtime.recreate(group)
    assert fake(runtime).calls == [("remove", "t.fam"), ("create", "t.fam"), ("start", "t.fam")]
    fake(runtime).calls.clear()
    info = runtime.recreate_container("fam", "older.fam")
    assert isinstance(info, ContainerInfo) and info.running
    assert fake(runtime).calls[0] == ("remove", "older.fam")


def test_reconcile_operations_reach_the_backend(runtime: GroupRuntime) -> None:
    runtime.stop_container("x")
    runtime.remove_container("y")
    assert fake(runtime).calls == [("stop", "x"), ("remove", "y")]


def test_remove_removes_only_this_homes_container(runtime: GroupRuntime) -> None:
    assert runtime.remove("fam") is False
    assert fake(runtime).calls == []
    runtime.ensure_running(runtime.store.load("fam"))
    fake(runtime).calls.clear()
    assert runtime.remove("fam") is True
    assert fake(runtime).calls == [("remove", "t.fam")]


# reconcile's plan


def test_desired_labels_are_none_where_they_cannot_be_made(runtime: GroupRuntime) -> None:
    GroupStore(runtime.home).add(GroupConfig(name="Work"))
    fam, work = runtime.store.load("fam"), runtime.store.load("work")
    assert runtime._desired_labels([]) == {}
    labels = runtime._desired_labels([fam, work])
    assert labels["fam"] == runtime.desired_spec(fam).labels
    assert runtime._desired_hashes([fam]) == {"fam": labels["fam"][LABEL_CONFIG_HASH]}  # type: ignore[index]
    set_option(work.config_file, "skills", "[x]")
    work = runtime.store.load("work")
    broken = runtime.desired_spec

    def refuse(group: Any, image: str | None = None) -> ContainerSpec:
        if group.folder == "work":
            raise OrchestratorError("no spec")
        return broken(group, image)

    runtime.desired_spec = refuse  # type: ignore[method-assign]
    labels = runtime._desired_labels([fam, work])
    assert labels["work"] is None and labels["fam"] is not None
    assert runtime._desired_hashes([work]) == {"work": None}

    def no_image() -> str:
        raise OrchestratorError("no image")

    runtime.image = no_image
    assert runtime._desired_labels([fam, work]) == {"fam": None, "work": None}


def test_the_plan_knows_every_folder_and_the_activity(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def plan(containers: Any, desired: Any, **kwargs: Any) -> list[Any]:
        seen.update(kwargs, containers=containers, desired=desired)
        return ["planned"]

    monkeypatch.setattr(lifecycle, "plan_reconcile", plan)
    broken = runtime.home.groups_dir / "broken"
    broken.mkdir()
    (broken / "group.yaml").write_text("name: [unclosed\n")
    fam = runtime.store.load("fam")
    runtime.ensure_running(fam)
    runtime.activity.touch("fam")
    os.utime(runtime.activity.root / "fam", (77.0, 77.0))
    assert runtime.plan(now=123.0) == ["planned"]
    labels = runtime.desired_spec(fam).labels
    assert seen["desired"] == {"fam": labels[LABEL_CONFIG_HASH], "broken": None}
    assert seen["settings"] == {"fam": labels[LABEL_SETTINGS_HASH]}
    assert [c.name for c in seen["containers"]] == ["t.fam"]
    assert seen["legacy"] == []
    assert seen["last_activity"] == {"fam": 77.0}
    assert seen["idle_timeouts"] == {"fam": fam.config.container.idle_timeout_seconds}
    assert seen["now"] == 123.0
    runtime.plan()
    assert abs(seen["now"] - time.time()) < 60


def test_reconcile_applies_its_plan(runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    applied: list[Any] = []
    monkeypatch.setattr(runtime, "plan", lambda: ["a", "b"])
    monkeypatch.setattr(
        lifecycle, "apply_plan", lambda actions, ops: applied.append((actions, ops))
    )
    assert runtime.reconcile() == ["a", "b"]
    assert applied == [(["a", "b"], runtime)]


# the status rows


def test_status_rows_say_state_uptime_memory_drift_and_activity(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GroupStore(runtime.home)
    store.add(GroupConfig(name="Work"))
    store.add(GroupConfig(name="Idle"))
    fam = runtime.store.load("fam")
    runtime.ensure_running(fam)
    runtime.ensure_running(runtime.store.load("work"))
    runtime.ensure_running(runtime.store.load("idle"))
    backend = fake(runtime)
    backend.stop("t.idle")
    backend.containers["t.fam"] = dataclasses.replace(
        backend.containers["t.fam"], started_at=time.time() - 100
    )
    set_option(runtime.store.root / "work" / "group.yaml", "container.pids", "128")
    os.utime(runtime.activity.root / "fam", (50.0, 50.0))
    deadlines: list[float] = []
    real = backend.memory_usages
    monkeypatch.setattr(
        backend,
        "memory_usages",
        lambda running, deadline: (
            deadlines.append(deadline - time.monotonic())
            or {**real(running, deadline), "t.work": None}
        ),
    )
    rows = {r.folder: r for r in runtime.status()}
    assert [r.folder for r in runtime.status([fam])] == ["fam"]
    assert (rows["fam"].state, rows["fam"].drift, rows["fam"].memory_bytes) == (
        "running",
        False,
        1024 * 1024,
    )
    assert rows["fam"].name == "Fam" and rows["fam"].container == "t.fam"
    assert 100 <= rows["fam"].uptime_seconds < 160  # type: ignore[operator]
    assert rows["fam"].last_activity == 50.0
    assert (rows["work"].state, rows["work"].drift, rows["work"].memory_bytes) == (
        "running",
        True,
        None,
    )
    assert (rows["idle"].state, rows["idle"].uptime_seconds, rows["idle"].memory_bytes) == (
        "exited",
        None,
        None,
    )
    assert all(2.0 < d <= 3.0 for d in deadlines)


def test_status_without_a_container_or_a_desired_hash_has_no_drift(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime.ensure_running(runtime.store.load("fam"))
    asked: list[list[str]] = []
    real = runtime._desired_hashes

    def hashes(groups: list[Any]) -> dict[str, str | None]:
        asked.append([g.folder for g in groups])
        return {folder: None for folder in real(groups)}

    monkeypatch.setattr(runtime, "_desired_hashes", hashes)
    GroupStore(runtime.home).add(GroupConfig(name="Work"))
    rows = {r.folder: r for r in runtime.status()}
    assert rows["fam"].drift is None and rows["work"].drift is None
    assert rows["work"].state == "absent" and rows["work"].memory_bytes is None
    assert asked == [["fam"]]  # only groups with a container are hashed


def test_the_overview_reads_each_groups_disk_limit_and_zone(runtime: GroupRuntime) -> None:
    GroupStore(runtime.home).add(GroupConfig(name="Work", timezone="Asia/Tokyo"))
    overview = runtime.overview()
    fam = runtime.store.load("fam")
    assert [r.folder for r in overview.rows] == ["fam", "work"]
    assert overview.invalid == []
    assert overview.timezones == {"fam": fam.config.timezone, "work": "Asia/Tokyo"}
    assert overview.disk_limits == {
        "fam": fam.config.container.disk_bytes,
        "work": runtime.store.load("work").config.container.disk_bytes,
    }
    assert set(overview.disk_bytes) == {"fam", "work"}


# more of the spec, the host folders and the waits


def test_the_image_and_skills_given_are_kept(home: Path, tmp_path: Path) -> None:
    def own(group: Group, agent: str) -> str:
        return "own:" + agent

    runtime = GroupRuntime(
        Home(home),
        OrchestratorConfig(project="t"),
        FakeBackend(),
        lambda: "i",
        group_image=own,
        skills_root=tmp_path,
    )
    assert runtime.group_image is own and runtime.skills_root == tmp_path


def test_the_built_in_skills_are_mounted(runtime: GroupRuntime, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    (skills / "known").mkdir(parents=True)
    (skills / "known" / "SKILL.md").write_text("---\nname: known\ndescription: d\n---\nx\n")
    runtime.skills_root = skills
    spec = runtime.desired_spec(runtime.store.load("fam"))
    assert str(skills) in {m.source for m in spec.mounts}


def test_installed_skills_are_mounted_one_by_one(runtime: GroupRuntime, tmp_path: Path) -> None:
    from orchestrator.skills.catalog import mounts_for

    skills = tmp_path / "skills"
    (skills / "known").mkdir(parents=True)
    (skills / "known" / "SKILL.md").write_text("---\nname: known\ndescription: d\n---\nx\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "SKILL.md").write_text("---\nname: mine\ndescription: d\n---\nx\n")
    from orchestrator.skills.catalog import install

    install(runtime.home, mine, "fam", skills)
    runtime.skills_root = skills
    group = runtime.store.load("fam")
    expected = mounts_for(runtime.home, "fam", group.config.skills, skills)
    assert expected  # installed skills: each is mounted
    sources = {m.source for m in runtime.desired_spec(group).mounts}
    assert {str(path) for _, path in expected} <= sources
    assert str(skills) not in sources


def test_a_web_group_mounts_its_gate_folder(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    web = WebSettings(enabled=True)
    group = dataclasses.replace(group, config=dataclasses.replace(group.config, web=web))
    sources = {m.source for m in runtime.desired_spec(group).mounts}
    assert str(runtime.egress_dir("fam")) in sources


def test_an_own_image_on_a_moved_home_and_an_adapting_backend_is_hashed_as_a_setting(
    runtime: GroupRuntime,
) -> None:
    runtime.config = dataclasses.replace(runtime.config, host_home=Path("/srv/home"))
    runtime.backend = Adapting()
    runtime.group_image = lambda g, agent: "own:1"
    spec = runtime.desired_spec(packaged(runtime.store.load("fam")), "agent:1")
    assert spec.labels == with_hashes(spec, "own:1").labels
    runtime.backend = FakeBackend()
    spec = runtime.desired_spec(packaged(runtime.store.load("fam")), "agent:1")
    assert spec.labels == with_hashes(spec, "own:1").labels


def test_on_host_and_adapted_hash_with_no_image_setting_by_default(runtime: GroupRuntime) -> None:
    plain = runtime.desired_spec(runtime.store.load("fam"), "agent:1")
    runtime.backend = Adapting()
    assert runtime.adapted(plain).labels == with_hashes(Adapting().adapt(plain)).labels
    runtime.config = dataclasses.replace(runtime.config, host_home=Path("/srv/home"))
    moved = runtime.on_host(plain)
    assert moved.labels == with_hashes(moved).labels


def test_a_probe_has_no_network_whatever_the_group_has(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[ContainerSpec] = []
    monkeypatch.setattr(
        fake(runtime), "run_once", lambda spec, timeout: ran.append(spec) or (0, "")
    )
    group = runtime.store.load("fam")
    set_option(group.config_file, "container.network", "bridge")
    group = runtime.store.load("fam")
    assert runtime.desired_spec(group).network_mode == "bridge"
    runtime.probe(group, ["x"])
    assert ran[0].network_mode == "none"


@needs_root
def test_a_host_not_running_as_root_gives_nothing_away(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = runtime.store.load("fam")
    spec = dataclasses.replace(runtime.desired_spec(group), user="1500:1600")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    runtime.prepare_host(group, spec)
    assert os.stat(group.sessions_dir).st_uid == 0
    assert os.stat(runtime.home.runtime_dir("fam")).st_uid == 0


@needs_root
def test_memory_made_without_an_owner_belongs_to_its_folders_owner(
    runtime: GroupRuntime,
) -> None:
    group = runtime.store.load("fam")
    # a rootless engine runs the group as 0:0: nothing is given to it, and what is made
    # belongs to the owner of the folder it is made in
    spec = dataclasses.replace(runtime.desired_spec(group), user="0:0")
    os.chown(group.memory_dir, 1500, 1600)
    (group.memory_dir / "index.md").unlink()
    runtime.prepare_host(group, spec)
    assert os.stat(group.memory_dir / "index.md").st_uid == 1500


@needs_root
@pytest.mark.parametrize(("user", "owner"), [("1:0", (1, 0)), ("0:1", (0, 1))])
def test_a_user_or_group_of_root_alone_still_gets_the_folders(
    runtime: GroupRuntime, user: str, owner: tuple[int, int]
) -> None:
    group = runtime.store.load("fam")
    spec = dataclasses.replace(runtime.desired_spec(group), user=user)
    runtime.prepare_host(group, spec)
    st = os.stat(group.sessions_dir)
    assert (st.st_uid, st.st_gid) == owner


@needs_root
def test_fresh_folders_are_made_with_their_owner_not_handed_over(
    runtime: GroupRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    group = runtime.store.load("fam")
    os.chown(group.path, 1500, 1600)
    import shutil

    shutil.rmtree(group.memory_dir)
    group.instructions_file.unlink()
    group.learned_file.unlink()
    spec = runtime.desired_spec(group)
    with caplog.at_level(logging.INFO, logger="orchestrator.runtime.lifecycle"):
        runtime.prepare_host(group, spec)
    assert caplog.messages == []  # nothing needed handing over
    assert os.stat(group.memory_dir / "index.md").st_uid == 1500
    assert os.stat(group.instructions_file).st_uid == 0
    assert os.stat(group.learned_file).st_uid == 0


def test_every_memory_problem_is_named(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    spec = runtime.desired_spec(group)
    for name in ("index.md", "system/index.md"):
        (group.memory_dir / name).unlink()
        (group.memory_dir / name).mkdir()
    with pytest.raises(InvalidConfig) as caught:
        runtime.prepare_host(group, spec)
    problem = "is a folder, not a regular file; left untouched"
    assert sorted(caught.value.message.split("; memory/")) == sorted(
        [f"memory of group 'fam': memory/index.md {problem}", f"system/index.md {problem}"]
    )


def test_a_group_seeing_all_skills_is_not_checked_name_by_name(
    runtime: GroupRuntime, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    (skills / "known").mkdir(parents=True)
    (skills / "known" / "SKILL.md").write_text("---\nname: known\ndescription: d\n---\nx\n")
    runtime.skills_root = skills
    group = runtime.store.load("fam")
    assert group.config.skills == "all"
    runtime.prepare_host(group, runtime.desired_spec(group))


def test_a_container_is_settled_only_past_the_ready_timeout(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        lifecycle, "time", SimpleNamespace(time=lambda: 1000.0 + CONTAINER_READY_TIMEOUT_SECONDS)
    )
    info = ContainerInfo("t.fam", "a", "running", {LABEL_GROUP: "fam"}, started_at=1000.0)
    assert runtime._settled(info) is False
    assert runtime._settled(dataclasses.replace(info, started_at=999.0)) is True
    # no start time counts as the epoch
    monkeypatch.setattr(
        lifecycle, "time", SimpleNamespace(time=lambda: CONTAINER_READY_TIMEOUT_SECONDS + 0.5)
    )
    assert runtime._settled(dataclasses.replace(info, started_at=None)) is True


def test_the_runner_pinged_is_the_groups(runtime: GroupRuntime, clock: SimpleNamespace) -> None:
    started(runtime)
    pinged: list[Any] = []
    runtime._ready = lambda client: pinged.append(client) or True
    runtime.wait_ready(runtime.store.load("fam"))
    assert isinstance(pinged[0], RunnerClient)
    assert pinged[0].endpoint == runtime.runner(runtime.store.load("fam")).endpoint


def test_the_last_lines_are_of_the_container_waited_for(
    runtime: GroupRuntime, clock: SimpleNamespace
) -> None:
    asked: list[str] = []

    class Named(Logged):
        def logs(
            self, name: str, *, follow: bool = False, tail: int | None = None
        ) -> Iterator[str]:
            asked.append(name)
            yield from super().logs(name, follow=follow, tail=tail)

    runtime.backend = Named(["x"])
    started(runtime, "exited")
    runtime._ready = lambda client: False
    with pytest.raises(OrchestratorError):
        runtime.wait_ready(runtime.store.load("fam"))
    assert asked == ["t.fam"]


def test_the_wait_ends_only_once_past_the_deadline(
    runtime: GroupRuntime, clock: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "READY_POLL_SECONDS", 0.5)
    started(runtime)
    runtime._ready = lambda client: False
    with pytest.raises(OrchestratorError):
        runtime.wait_ready(runtime.store.load("fam"), timeout=1.0)
    assert clock.slept == [0.5, 0.5, 0.5]  # at exactly the deadline it polls once more


def test_the_image_is_asked_once_for_all_groups(runtime: GroupRuntime) -> None:
    GroupStore(runtime.home).add(GroupConfig(name="Work"))
    asked: list[int] = []
    runtime.image = lambda: asked.append(1) or "img:1"  # type: ignore[func-returns-value]
    labels = runtime._desired_labels([runtime.store.load("fam"), runtime.store.load("work")])
    assert asked == [1] and all(labels.values())


def test_the_plan_takes_groups_whose_spec_cannot_be_made_as_unknown(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        lifecycle, "plan_reconcile", lambda containers, desired, **kw: seen.update(desired) or []
    )

    def no_image() -> str:
        raise OrchestratorError("no image")

    runtime.image = no_image
    assert runtime.plan(now=1.0) == []
    assert seen == {"fam": None}


def test_the_overview_reads_the_groups_once(
    runtime: GroupRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def again() -> Any:
        raise AssertionError("the groups were read again")

    monkeypatch.setattr(runtime.store, "groups", again)
    assert [r.folder for r in runtime.overview().rows] == ["fam"]


def test_an_allowed_extra_mount_is_in_the_spec(runtime: GroupRuntime, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    allowlist = tmp_path / "config" / "allow.yaml"
    allowlist.parent.mkdir()
    allowlist.write_text(f"roots:\n  - path: {shared}\n")
    runtime.config = dataclasses.replace(runtime.config, mount_allowlist=allowlist)
    group = runtime.store.load("fam")
    text = group.config_file.read_text().replace("mounts: []", f"mounts: [{{host: {shared}}}]")
    group.config_file.write_text(text)
    spec = runtime.desired_spec(runtime.store.load("fam"))
    assert str(shared) in {m.source for m in spec.mounts}


@needs_root
def test_memory_made_for_a_user_is_theirs_in_any_folder(runtime: GroupRuntime) -> None:
    group = runtime.store.load("fam")
    spec = dataclasses.replace(runtime.desired_spec(group), user="1500:1600")
    os.chown(group.memory_dir, 1500, 1600)  # its top is theirs: no walk hands it over
    (group.memory_dir / "system" / "index.md").unlink()
    runtime.prepare_host(group, spec)
    st = os.stat(group.memory_dir / "system" / "index.md")
    assert (st.st_uid, st.st_gid) == (1500, 1600)
