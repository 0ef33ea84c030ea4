"""The container spec and the reconcile plan: pure functions, no engine."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import replace
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.config import PROJECT_PATTERN
from orchestrator.groups import Group
from orchestrator.groups.config import ContainerSettings, GroupConfig
from orchestrator.limits import FOLDER_NAME_PATTERN
from orchestrator.runtime.base import LABEL_CONFIG_HASH, BindMount, ContainerInfo
from orchestrator.runtime.reconcile import plan_reconcile, plan_start
from orchestrator.runtime.spec import config_hash, container_name, container_spec, run_as

GROUP = Group("fam", Path("/home/h/groups/fam"), GroupConfig(name="Fam"))


def spec(group: Group = GROUP, **kw):  # type: ignore[no-untyped-def]
    args = {
        "project": "orchestrator",
        "home_id": "0123456789abcdef",
        "group": group,
        "image": "orchestrator-agent:abc",
        "user": (1000, 1000),
        "runtime_dir": Path("/home/h/state/run/fam"),
        "skills_root": Path("/src/skills"),
    }
    args.update(kw)
    return container_spec(**args)


def test_mounts_are_exactly_the_table() -> None:
    mounts = {(m.source, m.target, m.read_only) for m in spec().mounts}
    assert mounts == {
        ("/home/h/groups/fam/memory", "/workspace/agent/memory", False),
        ("/home/h/groups/fam/sessions", "/workspace/agent/sessions", False),
        ("/home/h/groups/fam/files", "/workspace/agent/files", False),
        ("/home/h/state/run/fam", "/run/orchestrator", False),
        ("/src/skills", "/workspace/skills", True),
    }
    assert not any("docker.sock" in m.source for m in spec().mounts)
    # host-owned files are never mounted, not even read-only: the runner asks the host
    assert not any(m.source.endswith((".md", ".yaml")) for m in spec().mounts)


def test_listed_skills_are_mounted_one_by_one() -> None:
    group = replace(GROUP, config=replace(GROUP.config, skills=("search", "notes")))
    targets = {m.target: m.read_only for m in spec(group).mounts if "skills" in m.target}
    assert targets == {"/workspace/skills/search": True, "/workspace/skills/notes": True}


def test_hardening_and_limits() -> None:
    s = spec()
    assert s.name == "orchestrator.fam"
    assert s.user == "1000:1000"
    assert s.cap_drop == ("ALL",)
    assert s.security_opt == ("no-new-privileges",)
    assert s.read_only_rootfs and s.init
    assert s.network_mode == "none"
    assert s.memory_bytes == 512 * 1024**2 and s.pids_limit == 256 and s.nano_cpus == 10**9
    assert set(s.tmpfs) == {"/tmp", "/home/agent"}
    assert s.command == ("orchestrator", "agent", "serve")
    assert s.environment["ORCHESTRATOR_PROVIDER"] == "offline"
    assert s.environment["ORCHESTRATOR_SESSION_MODE"] == "per-chat"
    assert s.environment["ORCHESTRATOR_CONTEXT_SHARE"] == "0.8"
    assert "ORCHESTRATOR_CONTEXT_BUDGET" not in s.environment  # no character cap unless set
    assert not any("KEY" in k or "TOKEN" in k for k in s.environment)  # no secrets
    assert "uid=1000,gid=1000" in s.tmpfs["/home/agent"]
    bridge = replace(
        GROUP, config=replace(GROUP.config, container=ContainerSettings(network="bridge"))
    )
    assert spec(bridge).network_mode == "bridge"


def test_the_runners_environment_and_filesystem_are_exact() -> None:
    """What the runner reads at start (AgentSettings.from_env) and where it runs."""
    s = spec()
    assert s.environment == {
        "HOME": "/home/agent",
        "ORCHESTRATOR_GROUP": "fam",
        "ORCHESTRATOR_AGENT_DIR": "/workspace/agent",
        "ORCHESTRATOR_RUNTIME_DIR": "/run/orchestrator",
        "ORCHESTRATOR_PROVIDER": "offline",
        "ORCHESTRATOR_MODEL": "offline-rules",
        "ORCHESTRATOR_SESSION_MODE": "per-chat",
        "ORCHESTRATOR_CONTEXT_SHARE": "0.8",
        "ORCHESTRATOR_DISK_BYTES": str(1024**3),
        "ORCHESTRATOR_SANDBOX": "1",
    }
    assert s.tmpfs == {
        "/tmp": "rw,nosuid,nodev,size=67108864,mode=1777",
        "/home/agent": "rw,nosuid,nodev,size=67108864,mode=0700,uid=1000,gid=1000",
    }
    assert (s.working_dir, s.hostname) == ("/workspace/agent", "fam")
    group = replace(GROUP, config=replace(GROUP.config, skills=("search",)))
    skills = [(m.source, m.target) for m in spec(group).mounts if "skills" in m.target]
    assert skills == [("/src/skills/search", "/workspace/skills/search")]


def test_the_config_hash_is_stable_across_versions() -> None:
    """A changed encoding of the hash would recreate every group's container at the next
    start after an upgrade, running or not: the hash of a fixed spec is pinned. (It
    changed on purpose: when the runner's context budget became a share of the model's
    window, ORCHESTRATOR_CONTEXT_SHARE; and when the shell came, with the group's disk
    limit for its watcher, ORCHESTRATOR_DISK_BYTES, and ORCHESTRATOR_SANDBOX; and when
    the settings hash joined the labels, which costs nothing at once: containers of a
    release before it are made again at their group's next turn.)"""
    assert config_hash(spec()) == (
        "549398c33d2a03f370e6baec27acabee7fc00d13c59b42e1848cc9b6e2428e2c"
    )


def test_labels_and_config_hash() -> None:
    s = spec()
    assert s.labels["org.orchestrator.project"] == "orchestrator"
    assert s.labels["org.orchestrator.group"] == "fam"
    assert s.labels["org.orchestrator.home"] == "0123456789abcdef"
    assert s.labels[LABEL_CONFIG_HASH] == config_hash(s)
    assert spec().labels == s.labels  # deterministic
    assert spec(image="orchestrator-agent:def").labels[LABEL_CONFIG_HASH] != config_hash(s)
    more_memory = replace(
        GROUP, config=replace(GROUP.config, container=ContainerSettings(memory_bytes=1024**3))
    )
    assert spec(more_memory).labels[LABEL_CONFIG_HASH] != config_hash(s)
    extra = (BindMount("/srv/docs", "/workspace/extra/docs", True),)
    assert spec(extra_mounts=extra).labels[LABEL_CONFIG_HASH] != config_hash(s)


def test_two_projects_never_collide() -> None:
    prod_team = replace(GROUP, folder="a")
    prod = replace(GROUP, folder="team-a")
    assert spec(prod_team, project="prod-team").name == "prod-team.a"
    assert spec(prod, project="prod").name == "prod.team-a"


@given(
    st.from_regex(PROJECT_PATTERN, fullmatch=True),
    st.from_regex(FOLDER_NAME_PATTERN, fullmatch=True),
    st.from_regex(PROJECT_PATTERN, fullmatch=True),
    st.from_regex(FOLDER_NAME_PATTERN, fullmatch=True),
)
def test_container_names_are_unambiguous(p1: str, f1: str, p2: str, f2: str) -> None:
    if (p1, f1) != (p2, f2):
        assert container_name(p1, f1) != container_name(p2, f2)


def test_the_config_hash_covers_every_field_of_the_spec() -> None:
    base = spec()
    changes = {
        "name": "other.fam",
        "image": "img:2",
        "command": ("other",),
        "user": "1:1",
        "mounts": (),
        "environment": {"ORCHESTRATOR_PROVIDER": "other"},
        "tmpfs": {"/tmp": "rw"},
        "working_dir": "/elsewhere",
        "hostname": "other",
        "network_mode": "bridge",
        "memory_bytes": 1,
        "nano_cpus": 1,
        "pids_limit": 17,
        "read_only_rootfs": False,
        "init": False,
        "cap_drop": (),
        "security_opt": (),
        "labels": {**base.labels, "org.orchestrator.home": "another-home"},
        "placement": ("node.labels.disk == ssd",),
    }
    fields = {f.name for f in dataclasses.fields(base)}
    assert set(changes) == fields  # a new field of the spec must be added here
    for field, value in changes.items():
        assert config_hash(replace(base, **{field: value})) != config_hash(base), field


def test_the_hash_is_of_the_spec_as_asdict_gives_it_and_an_empty_placement_is_left_out() -> None:
    """The hash is of the whole spec as dataclasses.asdict gives it (read without asdict's
    deep copies, which cost most of `status` with many groups), with an empty placement
    left out: the spec as it was before placement was a field keeps its hash."""
    full = replace(
        spec(extra_mounts=(BindMount("/srv/docs", "/workspace/extra/docs", True),)),
        placement=("node.labels.zone==a",),
        read_only_rootfs=False,
        cap_drop=("ALL", "NET_RAW"),
    )
    for s in (spec(), full):
        data = dataclasses.asdict(s)
        if not s.placement:
            del data["placement"]
        data["environment"] = dict(s.environment)
        data["tmpfs"] = dict(s.tmpfs)
        data["labels"] = {k: v for k, v in s.labels.items() if k != LABEL_CONFIG_HASH}
        encoded = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        assert config_hash(s) == hashlib.sha256(encoded).hexdigest()


def test_run_as_never_root() -> None:
    assert run_as(1000, 1001, (10001, 10001), rootless=False) == (1000, 1001)
    assert run_as(0, 0, (10001, 10001), rootless=False) == (10001, 10001)
    assert run_as(0, 0, (10001, 10001), rootless=True) == (0, 0)


def info(
    name: str,
    folder: str | None,
    state: str = "running",
    digest: str = "h1",
    started: float = 1000.0,
) -> ContainerInfo:
    labels = {"org.orchestrator.project": "p", LABEL_CONFIG_HASH: digest}
    if folder:
        labels["org.orchestrator.group"] = folder
    return ContainerInfo(name, name, state, labels, started if state == "running" else None)


def test_reconcile_plan() -> None:
    containers = [
        info("p-a", "a"),  # current -> adopt
        info("p-b", "b", digest="old"),  # drifted -> recreate
        info("p-c", "c", state="exited"),  # exited -> remove
        info("p-gone", "gone"),  # group removed -> orphan
        info("p-nolabel", None),  # no group label -> orphan
        info("p-d", "d", digest="x"),  # desired unknown -> keep
        info("p-e", "e", started=0.0),  # idle past timeout -> stop
    ]
    desired = {"a": "h1", "b": "h1", "c": "h1", "d": None, "e": "h1", "f": "h1"}
    plan = plan_reconcile(
        containers,
        desired,
        last_activity={"a": 1990.0, "e": 100.0},
        idle_timeouts={"a": 60, "b": 60, "e": 600},
        now=2000.0,
    )
    assert [(a.kind, a.container) for a in plan] == [
        ("adopt", "p-a"),
        ("recreate", "p-b"),
        ("remove", "p-c"),
        ("adopt", "p-d"),
        ("stop-idle", "p-e"),
        ("remove-orphan", "p-gone"),
        ("remove-orphan", "p-nolabel"),
    ]
    assert plan_reconcile([], desired, last_activity={}, idle_timeouts={}, now=0) == []


def test_reconcile_reasons_folders_and_the_idle_boundary() -> None:
    from orchestrator.runtime.reconcile import Action

    containers = [
        info("p-a", "a"),
        info("p-b", "b", digest="old"),
        info("p-c", "c", state="exited"),
        info("p-d", "d"),
        info("p-gone", "gone"),
        info("p-e", "e", started=1000.0),
        info("p-f", "f", started=1400.0),
        info("p-g", "g", started=1000.0),
    ]
    legacy = [info("old-z", "z"), info("old-y", "y")]
    desired = {"a": "h1", "b": "h1", "c": "h1", "d": None, "e": "h1", "f": "h1", "g": "h1"}
    plan = plan_reconcile(
        containers,
        desired,
        # e: the last message at 1300 is later than its start; idle exactly the timeout
        # f: started after its last message: idle counts from the start, 1 s short
        # g: no activity recorded and no timeout: never stopped
        last_activity={"e": 1300.0, "f": 1000.0},
        idle_timeouts={"a": 60, "e": 700, "f": 601},
        now=2000.0,
        legacy=legacy,
    )
    assert plan == [
        Action("replace-legacy", "old-y", "y", "old naming scheme; made again when needed"),
        Action("replace-legacy", "old-z", "z", "old naming scheme; made again when needed"),
        Action("stop-idle", "p-a", "a", "idle for 1000s"),
        Action("recreate", "p-b", "b", "config changed"),
        Action("remove", "p-c", "c", "container is exited"),
        Action("adopt", "p-d", "d", "desired config unavailable; kept"),
        Action("stop-idle", "p-e", "e", "idle for 700s"),
        Action("adopt", "p-f", "f", "running and current"),
        Action("adopt", "p-g", "g", "running and current"),
        Action("remove-orphan", "p-gone", "gone", "its group no longer exists"),
    ]


def test_reconcile_keeps_a_service_scaled_to_zero_and_one_on_its_way_up() -> None:
    from orchestrator.runtime.reconcile import Action, apply_plan

    containers = [
        info("p-a", "a", state="idle"),  # scaled to zero, current -> kept, never removed
        info("p-b", "b", state="idle", digest="old"),  # scaled to zero, drifted -> remove
        info("p-c", "c", state="starting", started=0.0),  # on its way up -> adopted, even
        info("p-d", "d", state="starting", digest="old"),  # long past its idle timeout
        info("p-e", "e", state="idle", digest="x"),  # desired unknown -> kept
    ]
    desired = {"a": "h1", "b": "h1", "c": "h1", "d": "h1", "e": None}
    plan = plan_reconcile(
        containers,
        desired,
        last_activity={"c": 0.0},
        idle_timeouts={"c": 60},
        now=2000.0,
    )
    assert plan == [
        Action("keep-idle", "p-a", "a", "scaled to zero"),
        Action("remove", "p-b", "b", "idle, and its config changed"),
        Action("adopt", "p-c", "c", "starting"),
        Action("recreate", "p-d", "d", "config changed"),
        Action("keep-idle", "p-e", "e", "scaled to zero"),
    ]
    done: list[str] = []

    class Ops:
        def recreate_container(self, folder: str, old_name: str) -> None:
            done.append(f"recreate {old_name}")

        def remove_container(self, name: str) -> None:
            done.append(f"remove {name}")

        def stop_container(self, name: str) -> None:
            done.append(f"stop {name}")

    apply_plan(plan, Ops())
    assert done == ["remove p-b", "recreate p-d"]  # keep-idle and adopt change nothing
    # the first step of bringing each up: a service scaled to zero is scaled up again
    assert plan_start(containers[0], "h1", settled=False) == "start"
    assert plan_start(containers[2], "h1", settled=False) == "start"


def test_apply_plan_does_what_each_action_says() -> None:
    from orchestrator.runtime.reconcile import Action, apply_plan

    done: list[tuple[str, ...]] = []

    class Ops:
        def recreate_container(self, folder: str, old_name: str) -> None:
            done.append(("recreate", folder, old_name))

        def remove_container(self, name: str) -> None:
            done.append(("remove", name))

        def stop_container(self, name: str) -> None:
            done.append(("stop", name))

    apply_plan(
        [
            Action("adopt", "p-a", "a", ""),
            Action("recreate", "p-b", "b", ""),
            Action("recreate", "p-x", None, ""),  # no folder: nothing to make again
            Action("remove", "p-c", "c", ""),
            Action("remove-orphan", "p-o", None, ""),
            Action("replace-legacy", "old-l", "l", ""),
            Action("stop-idle", "p-e", "e", ""),
        ],
        Ops(),
    )
    assert done == [
        ("recreate", "b", "p-b"),
        ("remove", "p-c"),
        ("remove", "p-o"),
        ("remove", "old-l"),
        ("stop", "p-e"),
    ]


def test_an_upgrade_makes_containers_of_the_older_image_again_at_their_next_turn() -> None:
    """A new image alone (a new release) keeps the running container until its group's
    next turn; new settings make it again at once; a container of a release before the
    settings label counts as an older image."""
    from orchestrator.runtime.base import LABEL_SETTINGS_HASH
    from orchestrator.runtime.reconcile import OLDER_IMAGE

    def labelled(name: str, folder: str, digest: str, settings: str | None) -> ContainerInfo:
        found = info(name, folder, digest=digest)
        extra = {LABEL_SETTINGS_HASH: settings} if settings else {}
        return dataclasses.replace(found, labels={**found.labels, **extra})

    containers = [
        labelled("p-a", "a", "old-image", "s1"),  # same settings, older image
        labelled("p-b", "b", "old-image", "s0"),  # other settings: made again now
        labelled("p-c", "c", "old-release", None),  # made by a release before the label
        labelled("p-d", "d", "old-image", "s1"),  # an older image, and idle: stopped
        labelled("p-e", "e", "h1", "s1"),  # current
    ]
    plan = plan_reconcile(
        containers,
        {f: "h1" for f in "abcde"},
        settings={f: "s1" for f in "abcde"},
        last_activity={"a": 1990.0, "b": 1990.0, "c": 1990.0, "d": 100.0, "e": 1990.0},
        idle_timeouts={f: 600 for f in "abcde"},
        now=2000.0,
    )
    assert [(a.kind, a.container, a.folder, a.reason) for a in plan] == [
        ("adopt", "p-a", "a", OLDER_IMAGE),
        ("recreate", "p-b", "b", "config changed"),
        ("adopt", "p-c", "c", OLDER_IMAGE),
        ("stop-idle", "p-d", "d", "idle for 1000s"),
        ("adopt", "p-e", "e", "running and current"),
    ]
    # at the group's next turn the older container is made again before the turn runs
    assert plan_start(containers[0], "h1", settled=True) == "recreate"
    # without settings hashes (a caller that has none) a changed hash is made again
    plain = plan_reconcile(containers[:1], {"a": "h1"}, last_activity={"a": 1990.0},
                           idle_timeouts={}, now=2000.0)  # fmt: skip
    assert [a.kind for a in plain] == ["recreate"]


def test_the_settings_hash_leaves_the_image_out_and_the_config_hash_holds_it() -> None:
    from orchestrator.runtime.base import LABEL_SETTINGS_HASH
    from orchestrator.runtime.spec import with_hashes

    current = spec()
    newer = spec(image="orchestrator-agent:def")
    changed = spec(user=(2000, 2000))
    assert current.labels[LABEL_SETTINGS_HASH] == newer.labels[LABEL_SETTINGS_HASH]
    assert current.labels[LABEL_CONFIG_HASH] != newer.labels[LABEL_CONFIG_HASH]
    assert changed.labels[LABEL_SETTINGS_HASH] != current.labels[LABEL_SETTINGS_HASH]
    assert current.labels[LABEL_CONFIG_HASH] == config_hash(current)
    assert with_hashes(current) == current  # labelling again changes nothing
    # a group's own image (its packages) is one of its settings: a new one is a change
    tags = ("orchestrator-group-p-fam:a1", "orchestrator-group-p-fam:b2")
    own = [spec(image=tag, image_setting=tag) for tag in tags]
    assert own[0].labels[LABEL_SETTINGS_HASH] != own[1].labels[LABEL_SETTINGS_HASH]
    assert own[0].labels[LABEL_SETTINGS_HASH] != current.labels[LABEL_SETTINGS_HASH]


def test_a_container_never_active_is_idle_since_the_epoch() -> None:
    never = info("p-n", "n")
    never = dataclasses.replace(never, started_at=None)
    plan = plan_reconcile(
        [never], {"n": "h1"}, last_activity={}, idle_timeouts={"n": 2000}, now=2000.0
    )
    assert [(a.kind, a.reason) for a in plan] == [("stop-idle", "idle for 2000s")]


def test_plan_start_takes_the_first_step_from_what_was_found() -> None:
    def found(state: str, config_hash: str = "h1") -> ContainerInfo:
        return ContainerInfo("p.fam", "id", state, {LABEL_CONFIG_HASH: config_hash}, 1.0)

    assert plan_start(None, "h1", settled=False) == "create"
    assert plan_start(found("running", "h0"), "h1", settled=True) == "recreate"
    assert plan_start(found("exited", "h0"), "h1", settled=False) == "recreate"
    assert plan_start(found("exited"), "h1", settled=False) == "start"
    assert plan_start(found("created"), "h1", settled=False) == "start"
    assert plan_start(found("running"), "h1", settled=True) == "probe"
    assert plan_start(found("running"), "h1", settled=False) == "wait"


def test_a_group_with_web_mcp_a_character_cap_and_its_skills_given_is_exact() -> None:
    """The parts of the spec a plain group does not have: the skills the caller resolved,
    each mounted read-only; the egress gate's folder (read-only, only with the web on)
    and its socket; the MCP servers' setting; the character cap."""
    from orchestrator.groups.config import ContextBudget
    from orchestrator.groups.mcpconfig import McpServer, McpSettings
    from orchestrator.groups.webconfig import WebSettings

    servers = (
        McpServer("zeta", command="zeta-mcp", args=("--a", "b"), env=(("K", "v"),)),
        McpServer("alpha", remote="docs", tools=(("find", "h1"),)),
    )
    config = replace(
        GROUP.config,
        web=WebSettings(enabled=True),
        mcp=McpSettings(servers),
        context_budget=ContextBudget(max_chars=5000),
    )
    group = replace(GROUP, config=config)
    s = spec(group, skills=[("pdf", Path("/s/pdf"))], egress_dir=Path("/e/fam"))
    assert [(m.source, m.target, m.read_only) for m in s.mounts][-2:] == [
        ("/s/pdf", "/workspace/skills/pdf", True),
        ("/e/fam", "/run/orchestrator-egress", True),
    ]
    assert s.environment["ORCHESTRATOR_EGRESS_SOCKET"] == "/run/orchestrator-egress/proxy.sock"
    assert s.environment["ORCHESTRATOR_CONTEXT_BUDGET"] == "5000"
    assert s.environment["ORCHESTRATOR_MCP"] == (
        '{"servers":{"alpha":{"kind":"remote","tools":{"find":"h1"}},'
        '"zeta":{"args":["--a","b"],"command":"zeta-mcp","env":{"K":"v"},"kind":"stdio",'
        '"tools":{}}}}'
    )
    # the web off: neither the folder nor the socket, though the folder is given
    off = spec(replace(GROUP, config=replace(config, web=WebSettings())), egress_dir=Path("/e"))
    assert "/run/orchestrator-egress" not in [m.target for m in off.mounts]
    assert "ORCHESTRATOR_EGRESS_SOCKET" not in off.environment
    # the web on but no folder given: neither
    none = spec(group)
    assert "/run/orchestrator-egress" not in [m.target for m in none.mounts]
    assert "ORCHESTRATOR_EGRESS_SOCKET" not in none.environment
