"""Reconcile: compare the containers found by label with the groups, decide, then act.

``plan_reconcile`` is a pure function of data; ``apply_plan`` is the thin layer that acts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from orchestrator.runtime.base import IDLE, STARTING, ContainerInfo

ADOPT, RECREATE, REMOVE, REMOVE_ORPHAN, STOP_IDLE, REPLACE_LEGACY, KEEP_IDLE = (
    "adopt",
    "recreate",
    "remove",
    "remove-orphan",
    "stop-idle",
    "replace-legacy",
    "keep-idle",
)


@dataclass(frozen=True)
class Action:
    kind: str
    container: str
    folder: str | None
    reason: str


def plan_reconcile(
    containers: list[ContainerInfo],
    desired: Mapping[str, str | None],
    *,
    last_activity: Mapping[str, float | None],
    idle_timeouts: Mapping[str, int],
    now: float,
    legacy: list[ContainerInfo] | None = None,
    settings: Mapping[str, str] | None = None,
) -> list[Action]:
    """One action per container found.

    ``containers`` are this home's (found by its identity label); ``legacy`` are
    containers of the old naming scheme that mount this home: each is removed once
    (replace-legacy) and made again under the new scheme when its group next runs.

    ``desired`` maps each existing group's folder to the config hash its container
    should carry (None when it cannot be computed now: the container is left alone).
    Running with the matching hash -> adopt (or stop-idle past the idle timeout); hash
    differs -> recreate; not running -> remove (recreated at the next message); a
    container whose group no longer exists -> remove-orphan. A backend that keeps an
    idle group's container (Swarm scales its service to zero) reports it ``idle``:
    kept (keep-idle) while its hash matches, removed otherwise; one the engine is still
    bringing up (``starting``) is treated as running, never timed out as idle.

    ``settings`` maps folders to the settings hash (the spec but its image) their
    containers should carry. A container whose hash differs only by its image (the
    same settings hash), or that carries none (made by a release before it), runs an
    older image after an upgrade: it is kept (or stopped when idle) and made again at
    its group's next turn, so an upgrade does not make every container again at once.
    """
    actions: list[Action] = [
        Action(REPLACE_LEGACY, c.name, c.group, "old naming scheme; made again when needed")
        for c in sorted(legacy or [], key=lambda c: c.name)
    ]
    for c in sorted(containers, key=lambda c: c.name):
        folder = c.group
        if folder is None or folder not in desired:
            actions.append(Action(REMOVE_ORPHAN, c.name, folder, "its group no longer exists"))
            continue
        want = desired[folder]
        if c.state == IDLE:
            if want is not None and c.config_hash != want:
                actions.append(Action(REMOVE, c.name, folder, "idle, and its config changed"))
            else:
                actions.append(Action(KEEP_IDLE, c.name, folder, "scaled to zero"))
        elif c.state == STARTING:
            if want is not None and c.config_hash != want:
                actions.append(Action(RECREATE, c.name, folder, "config changed"))
            else:
                actions.append(Action(ADOPT, c.name, folder, "starting"))
        elif not c.running:
            actions.append(Action(REMOVE, c.name, folder, f"container is {c.state}"))
        elif want is None:
            actions.append(Action(ADOPT, c.name, folder, "desired config unavailable; kept"))
        elif c.config_hash != want and not _image_only(c, (settings or {}).get(folder)):
            actions.append(Action(RECREATE, c.name, folder, "config changed"))
        else:
            active = max(t for t in (last_activity.get(folder), c.started_at, 0.0) if t is not None)
            timeout = idle_timeouts.get(folder)
            if timeout is not None and now - active >= timeout:
                actions.append(Action(STOP_IDLE, c.name, folder, f"idle for {int(now - active)}s"))
            elif c.config_hash != want:
                actions.append(Action(ADOPT, c.name, folder, OLDER_IMAGE))
            else:
                actions.append(Action(ADOPT, c.name, folder, "running and current"))
    return actions


OLDER_IMAGE = "an older image: made again at its group's next turn"


def _image_only(container: ContainerInfo, settings: str | None) -> bool:
    """Whether ``container`` differs from the desired spec by its image alone: its
    settings hash is the desired one, or it has none (a release before the label)."""
    return settings is not None and container.settings_hash in (None, settings)


class Operations(Protocol):
    """What carrying out a plan needs (the group runtime provides it)."""

    def recreate_container(self, folder: str, old_name: str) -> object: ...

    def remove_container(self, name: str) -> None: ...

    def stop_container(self, name: str) -> None: ...


def apply_plan(actions: list[Action], ops: Operations) -> None:
    """Carry out a plan: the only place reconcile acts."""
    for action in actions:
        if action.kind == RECREATE and action.folder is not None:
            ops.recreate_container(action.folder, action.container)
        elif action.kind in (REMOVE, REMOVE_ORPHAN, REPLACE_LEGACY):
            ops.remove_container(action.container)
        elif action.kind == STOP_IDLE:
            ops.stop_container(action.container)


# What bringing one group's container up takes, given the container found by name.
START_CREATE, START_RECREATE, START_START, START_PROBE, START_WAIT = (
    "create",
    "recreate",
    "start",
    "probe",
    "wait",
)


def plan_start(current: ContainerInfo | None, wanted_hash: str | None, *, settled: bool) -> str:
    """The first step of bringing a container up, as a pure function of what was found:
    none -> create; another spec -> recreate; stopped -> start; running and ``settled``
    (its runner answered before, or it has run long enough to) -> probe its runner
    briefly, recreating it when nothing answers; running but just started -> wait."""
    if current is None:
        return START_CREATE
    if current.config_hash != wanted_hash:
        return START_RECREATE
    if not current.running:
        return START_START
    return START_PROBE if settled else START_WAIT
