"""The lifecycle of group containers: ensure-running, stop, restart, remove, status.

Ensure-running scaffolds the memory tree, prepares the host folders, then creates or
starts the container and waits until it is up. All runtime state lives in the engine,
found again by labels; the only host state is the last-activity time of each group.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orchestrator
from orchestrator.config import OrchestratorConfig
from orchestrator.confined import INHERIT, ConfinedDir, Owner, UnsafePath, kind_of
from orchestrator.errors import BadInput, EngineError, InvalidConfig, OrchestratorError
from orchestrator.groups import Group, GroupStore
from orchestrator.groups.disk import group_disk_usage
from orchestrator.home import Home
from orchestrator.limits import CONTAINER_READY_TIMEOUT_SECONDS, RUNNER_DEAD_SOCKET_SECONDS
from orchestrator.memory.scaffold import scaffold_memory
from orchestrator.runtime.base import (
    LABEL_CONFIG_HASH,
    LABEL_GROUP,
    LABEL_HOME,
    LABEL_PROJECT,
    LABEL_SETTINGS_HASH,
    STARTING,
    ContainerBackend,
    ContainerInfo,
    ContainerSpec,
)
from orchestrator.runtime.channel import RunnerClient
from orchestrator.runtime.mounts import resolve_mounts
from orchestrator.runtime.reconcile import (
    START_CREATE,
    START_PROBE,
    START_RECREATE,
    START_START,
    Action,
    apply_plan,
    plan_reconcile,
    plan_start,
)
from orchestrator.runtime.spec import (
    FILES,
    INSTRUCTIONS,
    LEARNED,
    MEMORY,
    SESSIONS,
    container_name,
    container_spec,
    run_as,
    with_hashes,
)
from orchestrator.skills.catalog import mounts_for as skill_mounts
from orchestrator.skills.catalog import visible as visible_skills

log = logging.getLogger(__name__)
ImageResolver = Callable[[], str]
STATUS_MEMORY_DEADLINE_SECONDS = 3.0  # memory not known by then is shown as unknown
READY_POLL_SECONDS = 0.01
READY_INSPECT_EVERY = 20  # polls between engine checks that the container still runs


def default_skills_root() -> Path | None:
    root = Path(orchestrator.__file__).resolve().parent.parent / "skills"
    return root if root.is_dir() else None


def _require_real(folder: ConfinedDir, name: str, kind: str) -> None:
    """Refuse a mount source that is a symlink or of the wrong kind: the engine would
    follow a symlink and expose whatever it points to."""
    st = folder.lstat(name)
    shown = f"{folder.shown}/{name}"
    if st is None:
        raise InvalidConfig(f"{shown} is missing; refusing to start without it")
    if stat.S_ISLNK(st.st_mode):
        raise InvalidConfig(
            f"{shown} is a symlink; refusing to mount it into a container",
            hint="replace it with a real " + kind,
        )
    ok = stat.S_ISDIR(st.st_mode) if kind == "folder" else stat.S_ISREG(st.st_mode)
    if not ok:
        raise InvalidConfig(f"{shown} is {kind_of(st.st_mode)}, not a {kind}; refusing to mount it")


def hand_over(folder: ConfinedDir, name: str, owner: Owner) -> int:
    """Make ``name`` (a folder the container writes) belong to ``owner``.

    Folders get their owner when they are made, so this walks only when the top folder's
    owner is wrong (a group made before, or a changed owner): a container cannot make it
    wrong, since it cannot give its files away. The walk goes through the confined layer
    and never follows a link. Returns the number of entries changed.
    """
    st = folder.lstat(name)
    if st is None or (st.st_uid, st.st_gid) == owner:
        return 0
    with folder.open_dir(name) as target:
        changed = target.chown_tree(*owner)
    log.info("gave %d entries of %s/%s to %d:%d", changed, folder.shown, name, *owner)
    return changed


@dataclass(frozen=True)
class GroupStatus:
    folder: str
    name: str
    container: str
    state: str  # running | exited | ... | absent
    uptime_seconds: float | None
    memory_bytes: int | None
    drift: bool | None  # None when unknown (no container, or image not built)
    last_activity: float | None

    def to_dict(self) -> dict[str, object]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class InvalidGroup:
    folder: str
    problem: str | None


@dataclass(frozen=True)
class GroupsOverview:
    """What ``orchestrator status`` shows of the groups: every valid group's status row
    with its disk use, disk limit and time zone, and the folders whose group.yaml is
    invalid. The running daemon computes it and sends it as ``to_dict()``; the command
    computes it itself when no daemon answers."""

    rows: list[GroupStatus]
    invalid: list[InvalidGroup]
    disk_bytes: dict[str, int]  # per folder
    disk_limits: dict[str, int]
    timezones: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": [
                {
                    **row.to_dict(),
                    "disk_bytes": self.disk_bytes[row.folder],
                    "disk_limit_bytes": self.disk_limits[row.folder],
                    "timezone": self.timezones[row.folder],
                }
                for row in self.rows
            ],
            "invalid": [{"folder": i.folder, "problem": i.problem} for i in self.invalid],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupsOverview:
        """The overview ``to_dict()`` gave; KeyError, TypeError or ValueError when
        ``data`` is not that form."""
        fields = [f.name for f in dataclasses.fields(GroupStatus)]
        rows: list[GroupStatus] = []
        disk: dict[str, int] = {}
        limits: dict[str, int] = {}
        zones: dict[str, str] = {}
        for item in data["groups"]:
            row = GroupStatus(**{name: item[name] for name in fields})
            rows.append(row)
            disk[row.folder] = int(item["disk_bytes"])
            limits[row.folder] = int(item["disk_limit_bytes"])
            zones[row.folder] = str(item["timezone"])
        invalid = [InvalidGroup(str(i["folder"]), i["problem"]) for i in data["invalid"]]
        return cls(rows, invalid, disk, limits, zones)


class ActivityLog:
    """Last activity per group: the mtime of state/activity/<folder>."""

    def __init__(self, home: Home) -> None:
        self.root = home.state_dir / "activity"

    def touch(self, folder: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / folder
        path.touch()  # sets the mtime to now, existing or not

    def last(self, folder: str) -> float | None:
        try:
            return os.stat(self.root / folder).st_mtime
        except FileNotFoundError:
            return None


class GroupRuntime:
    def __init__(
        self,
        home: Home,
        config: OrchestratorConfig,
        backend: ContainerBackend,
        image: ImageResolver,
        *,
        skills_root: Path | None = None,
        rootless: bool | None = None,
        ready: Callable[[RunnerClient], bool] | None = None,
        group_image: Callable[[Group, str], str] | None = None,
    ) -> None:
        self.home = home
        # the image a group runs, given the agent image: its own, for its packages
        self.group_image = group_image
        self.config = config
        self.backend = backend
        self.image = image
        self.store = GroupStore(home)
        self.activity = ActivityLog(home)
        self.skills_root = skills_root
        if rootless is None:
            rootless = bool(backend.engine_facts().get("rootless"))
        self.rootless = rootless
        # How to tell the runner answers; unit tests on the fake backend replace it.
        self._ready = ready or (lambda client: client.ping())
        # containers made again because their runner stopped answering, per group
        self.dead_sockets: dict[str, int] = {}
        # (group, why) -> containers this runtime made or started since it began: created
        # (none was there), drifted (its configuration changed), started (it had stopped),
        # restarted (asked for), dead-runner (running, but its runner did not answer)
        self.starts: dict[tuple[str, str], int] = {}
        self._answered: dict[str, str] = {}  # group -> the container whose runner answered

    @property
    def project_labels(self) -> dict[str, str | None]:
        """The labels that select this home's containers (whatever project they ran
        under): the home's identity."""
        return {LABEL_HOME: self.home.identity}

    def container_name(self, group: Group) -> str:
        return container_name(self.config.project, group.folder)

    def owned(self, info: ContainerInfo) -> bool:
        return info.home == self.home.identity

    def is_legacy(self, info: ContainerInfo) -> bool:
        """A container of the old naming scheme (no home label) that mounts this home."""
        if info.home is not None or info.group is None:
            return False
        root = os.path.realpath(self.store.root) + os.sep
        return any(os.path.realpath(source).startswith(root) for source in info.mounts)

    def legacy_containers(self) -> list[ContainerInfo]:
        return [c for c in self.backend.list({LABEL_GROUP: None}) if self.is_legacy(c)]

    def _claim(self, name: str) -> ContainerInfo | None:
        """The container called ``name`` when it is this home's; None when there is none.
        One of the old scheme that mounts this home is removed (it is made again); one
        of another home is refused, never touched."""
        info = self.backend.inspect(name)
        if info is None or self.owned(info):
            return info
        if self.is_legacy(info):
            log.info("replacing %s: a container of the old naming scheme", name)
            self.backend.remove(name)
            return None
        raise OrchestratorError(
            f"a container named {name} belongs to another orchestrator home "
            f"(home id {info.home or 'unknown'}); it is left alone",
            hint="give this home its own `project:` in orchestrator.yaml, or remove that "
            "container from the home it belongs to",
        )

    def user_for(self, group: Group) -> tuple[int, int]:
        st = os.stat(group.path)
        fallback = (self.config.unprivileged_uid, self.config.unprivileged_gid)
        return run_as(st.st_uid, st.st_gid, fallback, self.rootless)

    def image_of(self, group: Group, agent_image: str) -> str:
        """The image ``group`` runs: its own when it has one built, else ``agent_image``."""
        if self.group_image is None or group.config.packages.empty:
            return agent_image
        return self.group_image(group, agent_image)

    def desired_spec(self, group: Group, image: str | None = None) -> ContainerSpec:
        """The spec ``group``'s container should have now (reads owner, allowlist)."""
        extra = resolve_mounts(
            group.config.mounts,
            allowlist_path=self.config.mount_allowlist,
            home_root=self.home.root,
        )
        agent = image or self.image()
        chosen = self.image_of(group, agent)
        # a new release's agent image waits for the group's next turn; a group's own
        # image (new packages) is a change of its settings
        setting = "" if chosen == agent else chosen
        spec = container_spec(
            project=self.config.project,
            home_id=self.home.identity,
            group=group,
            image=chosen,
            image_setting=setting,
            user=self.user_for(group),
            runtime_dir=self.home.runtime_dir(group.folder),
            skills_root=self.skills_root,
            extra_mounts=extra,
            skills=skill_mounts(self.home, group.folder, group.config.skills, self.skills_root),
            egress_dir=self.egress_dir(group.folder),
        )
        return self.adapted(self.on_host(spec, setting), setting)

    def adapted(self, spec: ContainerSpec, image_setting: str = "") -> ContainerSpec:
        """``spec`` as the backend runs it (``ContainerBackend.adapt``), hashed again when
        the backend changed it (``image_setting`` as for ``with_hashes``)."""
        shaped = self.backend.adapt(spec)
        if shaped == spec:
            return spec
        return with_hashes(shaped, image_setting)

    def egress_dir(self, folder: str) -> Path:
        """The host-owned folder of ``folder``'s egress gate socket (state/egress/)."""
        return self.home.state_dir / "egress" / folder

    def probe(self, group: Group, argv: list[str], timeout: float = 90) -> tuple[int, str]:
        """Run ``argv`` to its end in a throwaway container made like ``group``'s (its
        image, user, environment and limits, no network) but with none of its mounts,
        so that nothing it does touches the group's files or its running container;
        (exit code, stdout)."""
        import secrets
        from dataclasses import replace

        spec = self.desired_spec(group)
        probe = replace(
            spec,
            name=f"{spec.name}-probe-{secrets.token_hex(3)}",
            command=tuple(argv),
            mounts=(),
            labels={LABEL_PROJECT: self.config.project},  # not the group's: never adopted
            network_mode="none",
        )
        return self.backend.run_once(probe, timeout)

    def on_host(self, spec: ContainerSpec, image_setting: str = "") -> ContainerSpec:
        """The spec with mount sources in this home given as the engine sees them
        (ORCHESTRATOR_HOST_HOME, when the daemon runs in a container); unchanged
        otherwise. Mounts from elsewhere are the engine's paths already."""
        host = self.config.host_home
        if host is None:
            return spec
        root = self.home.root.resolve()
        mounts = []
        for mount in spec.mounts:
            source = Path(mount.source)
            if source == root or root in source.parents:
                source = host / source.relative_to(root)
            mounts.append(dataclasses.replace(mount, source=str(source)))
        return with_hashes(dataclasses.replace(spec, mounts=tuple(mounts)), image_setting)

    def prepare_host(self, group: Group, spec: ContainerSpec) -> None:
        """Scaffold memory, create every mount source, give writable ones to the user.

        Everything in the group folder goes through the confined file layer."""
        uid, gid = (int(x) for x in spec.user.split(":"))
        owner: Owner | None = (uid, gid) if os.geteuid() == 0 and (uid, gid) != (0, 0) else None
        try:
            group_dir = ConfinedDir.open(self.store.root, group.folder)
        except UnsafePath as exc:
            raise InvalidConfig(f"{exc}; a group folder must be a real folder") from None
        with group_dir:
            writable = [MEMORY, SESSIONS, FILES]
            for name in writable:
                group_dir.make_dir(name, owner=owner)
            report = scaffold_memory(group.path, owner=owner or INHERIT)
            if report.problems:
                raise InvalidConfig(
                    f"memory of group {group.folder!r}: " + "; ".join(report.problems),
                    hint="fix or remove the entries named, then start again",
                )
            for name in (INSTRUCTIONS, LEARNED):
                group_dir.make_file(name, owner=None)  # host-owned, read by the host only
            for name in writable:
                _require_real(group_dir, name, "folder")
            if owner is not None:
                for name in writable:
                    hand_over(group_dir, name, owner)
        if group.config.web.enabled:  # the gate's folder: host-owned, mounted read-only
            egress = self.egress_dir(group.folder)
            egress.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(egress, 0o755)
        with ConfinedDir.open(self.home.state_dir, "run", create=True) as runs:
            runs.make_dir(group.folder, mode=0o700, owner=owner)
            _require_real(runs, group.folder, "folder")
            if owner is not None:
                hand_over(runs, group.folder, owner)
        if group.config.skills != "all":
            known = visible_skills(self.home, group.folder, self.skills_root)
            for skill in group.config.skills:
                if skill not in known and (known or self.skills_root is not None):
                    raise BadInput(
                        f"group {group.folder!r} asks for skill {skill!r}, which is "
                        "neither built in nor installed for it",
                        hint=f"see: orchestrator skill list --group {group.folder}; "
                        "add one with: orchestrator skill add PATH",
                    )

    def _count_start(self, folder: str, why: str) -> None:
        self.starts[(folder, why)] = self.starts.get((folder, why), 0) + 1

    def ensure_running(self, group: Group, *, made_for: str = "created") -> ContainerInfo:
        """Bring ``group``'s container up with the current spec; return it running.
        ``made_for``: what a container made here is counted as (``starts``)."""
        spec = self.desired_spec(group)
        self.prepare_host(group, spec)
        self.backend.prepare_storage(spec)
        self.activity.touch(group.folder)
        current = self._claim(spec.name)
        step = plan_start(
            current,
            spec.labels.get(LABEL_CONFIG_HASH),
            settled=current is not None and self._settled(current),
        )
        if step == START_RECREATE:
            self.backend.remove(spec.name)
        if step in (START_CREATE, START_RECREATE):
            try:
                self.backend.create(spec)
            except EngineError:
                # Lost a race with another ensure-running of the same group: use theirs,
                # started unless it runs already.
                info = self.backend.inspect(spec.name)
                if info is None:
                    raise
                if not info.running:
                    self.backend.start(spec.name)
            else:  # made here, so not running yet
                self.backend.start(spec.name)
            self._count_start(group.folder, made_for if step == START_CREATE else "drifted")
        elif step == START_START:
            self.backend.start(spec.name)
            self._count_start(group.folder, "started")
        elif step == START_PROBE:
            # It has run long enough to answer: when nothing does within a short bound
            # (code in it took the socket over and left), it is made again rather than
            # waited on turn after turn.
            try:
                return self.wait_ready(group, RUNNER_DEAD_SOCKET_SECONDS)
            except OrchestratorError as exc:
                self.dead_sockets[group.folder] = self.dead_sockets.get(group.folder, 0) + 1
                log.warning(
                    "group %s: its container runs but its runner does not answer (%s); "
                    "recreating it (%d times since the daemon started)",
                    group.folder,
                    exc.message,
                    self.dead_sockets[group.folder],
                )
                self.backend.remove(spec.name)
                self.backend.create(spec)
                self.backend.start(spec.name)
                self._count_start(group.folder, "dead-runner")
        return self.wait_ready(group)

    def _settled(self, info: ContainerInfo) -> bool:
        """Whether a running container's runner should answer at once: it has answered
        before, or the container started long enough ago (one just started by someone
        else is waited for)."""
        if not info.running:
            return False
        if info.group is not None and self._answered.get(info.group) == info.id:
            return True
        return time.time() - (info.started_at or 0.0) > CONTAINER_READY_TIMEOUT_SECONDS

    def runner(self, group: Group) -> RunnerClient:
        """A client of the runner in ``group``'s container, reached as its backend says."""
        return RunnerClient(self.backend.runner_endpoint(self.home.runtime_dir(group.folder)))

    def wait_ready(
        self, group: Group, timeout: float = CONTAINER_READY_TIMEOUT_SECONDS
    ) -> ContainerInfo:
        """Ready means the container runs and its runner answers a ping on its socket."""
        name = self.container_name(group)
        client = self.runner(group)
        deadline = time.monotonic() + timeout
        polls = 0
        while True:
            # A ping with no runner yet fails in microseconds: poll it often, and ask the
            # engine (a slower call) only now and then whether the container died.
            if self.ping(client):
                info = self.backend.inspect(name)
                if info is not None and info.running:
                    self._answered[group.folder] = info.id
                    return info
            # (not at once: a container started a moment ago is running)
            if polls % READY_INSPECT_EVERY == READY_INSPECT_EVERY - 1:
                info = self.backend.inspect(name)
                if info is None or info.state in ("exited", "dead"):
                    tail = "\n".join(list(self.backend.logs(name, tail=5))) if info else ""
                    raise OrchestratorError(
                        f"container {name} "
                        + ("vanished" if info is None else "exited")
                        + " while starting"
                        + (f": {tail}" if tail else ""),
                        hint=f"see: orchestrator logs {group.folder}",
                    )
            if time.monotonic() > deadline:
                raise OrchestratorError(
                    f"the runner in {name} did not answer within {timeout:.0f}s",
                    hint=f"see: orchestrator logs {group.folder}",
                )
            polls += 1
            time.sleep(READY_POLL_SECONDS)

    def ping(self, client: RunnerClient) -> bool:
        return bool(self._ready(client))

    def stop(self, group: Group) -> bool:
        """Stop the container; False when there was none running."""
        info = self._claim(self.container_name(group))
        if info is None or not (info.running or info.state == STARTING):
            return False
        self.backend.stop(info.name)
        return True

    def restart(self, group: Group) -> ContainerInfo:
        if self._claim(self.container_name(group)) is not None:
            self.backend.remove(self.container_name(group))
        return self.ensure_running(group, made_for="restarted")

    def recreate(self, group: Group, old_name: str | None = None) -> ContainerInfo:
        """Remove ``old_name`` (this home's container of the group, perhaps under an old
        project name) and start the group afresh."""
        if old_name is not None and old_name != self.container_name(group):
            self.backend.remove(old_name)
        return self.restart(group)

    # what reconcile's plan needs (reconcile.Operations)

    def recreate_container(self, folder: str, old_name: str) -> object:
        return self.recreate(self.store.load(folder), old_name)

    def remove_container(self, name: str) -> None:
        self.backend.remove(name)

    def stop_container(self, name: str) -> None:
        self.backend.stop(name)

    def remove(self, group_folder: str) -> bool:
        """Remove the group's container when it is this home's; False when there was
        none (another home's is refused)."""
        name = container_name(self.config.project, group_folder)
        if self._claim(name) is None:
            return False
        self.backend.remove(name)
        return True

    def _desired_labels(self, groups: list[Group]) -> dict[str, Mapping[str, str] | None]:
        """Each group's desired container labels (its hashes among them); None where
        they cannot be computed now."""
        if not groups:
            return {}
        try:
            image = self.image()
        except OrchestratorError:
            return {g.folder: None for g in groups}
        desired: dict[str, Mapping[str, str] | None] = {}
        for group in groups:
            try:
                desired[group.folder] = self.desired_spec(group, image).labels
            except OrchestratorError:
                desired[group.folder] = None
        return desired

    def _desired_hashes(self, groups: list[Group]) -> dict[str, str | None]:
        return {
            folder: labels[LABEL_CONFIG_HASH] if labels else None
            for folder, labels in self._desired_labels(groups).items()
        }

    def plan(self, now: float | None = None) -> list[Action]:
        groups = self.store.groups()
        known = {item.folder for item in self.store.listing()}
        labels = self._desired_labels(groups)
        desired: dict[str, str | None] = {f: None for f in known}
        desired.update({f: v[LABEL_CONFIG_HASH] if v else None for f, v in labels.items()})
        return plan_reconcile(
            self.backend.list(self.project_labels),
            desired,
            settings={f: v[LABEL_SETTINGS_HASH] for f, v in labels.items() if v},
            legacy=self.legacy_containers(),
            last_activity={g.folder: self.activity.last(g.folder) for g in groups},
            idle_timeouts={g.folder: g.config.container.idle_timeout_seconds for g in groups},
            now=time.time() if now is None else now,
        )

    def reconcile(self) -> list[Action]:
        actions = self.plan()
        apply_plan(actions, self)
        return actions

    def overview(self) -> GroupsOverview:
        """Every group's status row, disk use, disk limit and time zone, and the invalid
        folders (each group.yaml read once)."""
        listing = self.store.listing()
        groups = [item.group for item in listing if item.group is not None]
        return GroupsOverview(
            rows=self.status(groups),
            invalid=[InvalidGroup(i.folder, i.problem) for i in listing if i.group is None],
            disk_bytes={g.folder: group_disk_usage(self.store.root, g.folder) for g in groups},
            disk_limits={g.folder: g.config.container.disk_bytes for g in groups},
            timezones={g.folder: g.config.timezone for g in groups},
        )

    def status(self, groups: list[Group] | None = None) -> list[GroupStatus]:
        """Each group's row (``groups``, or every valid group of the home). Drift is
        computed only where a container exists: a group without one has none to drift."""
        containers = {c.group: c for c in self.backend.list(self.project_labels)}
        groups = self.store.groups() if groups is None else groups
        desired = self._desired_hashes([g for g in groups if g.folder in containers])
        running = [c for c in containers.values() if c.running]
        memory = self.backend.memory_usages(
            running, time.monotonic() + STATUS_MEMORY_DEADLINE_SECONDS
        )
        out: list[GroupStatus] = []
        now = time.time()
        for group in groups:
            c = containers.get(group.folder)
            want = desired.get(group.folder)
            out.append(
                GroupStatus(
                    folder=group.folder,
                    name=group.config.name,
                    container=self.container_name(group),
                    state=c.state if c else "absent",
                    uptime_seconds=now - c.started_at if c and c.started_at else None,
                    memory_bytes=memory.get(c.name) if c else None,
                    drift=(c.config_hash != want) if c and want else None,
                    last_activity=self.activity.last(group.folder),
                )
            )
        return out
