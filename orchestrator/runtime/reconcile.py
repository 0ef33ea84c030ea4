"""Reconcile: compare the containers found by label with the groups, decide, then act.

``plan_reconcile`` is a pure function of data; ``apply_plan`` is the thin layer that acts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.runtime.base import ContainerInfo

if TYPE_CHECKING:
    from orchestrator.runtime.lifecycle import GroupRuntime

ADOPT, RECREATE, REMOVE, REMOVE_ORPHAN, STOP_IDLE = (
    "adopt",
    "recreate",
    "remove",
    "remove-orphan",
    "stop-idle",
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
) -> list[Action]:
    """One action per container found.

    ``desired`` maps each existing group's folder to the config hash its container
    should carry (None when it cannot be computed now: the container is left alone).
    Running with the matching hash -> adopt (or stop-idle past the idle timeout); hash
    differs -> recreate; not running -> remove (recreated at the next message); a
    container whose group no longer exists -> remove-orphan.
    """
    actions: list[Action] = []
    for c in sorted(containers, key=lambda c: c.name):
        folder = c.group
        if folder is None or folder not in desired:
            actions.append(Action(REMOVE_ORPHAN, c.name, folder, "its group no longer exists"))
            continue
        want = desired[folder]
        if not c.running:
            actions.append(Action(REMOVE, c.name, folder, f"container is {c.state}"))
        elif want is None:
            actions.append(Action(ADOPT, c.name, folder, "desired config unavailable; kept"))
        elif c.config_hash != want:
            actions.append(Action(RECREATE, c.name, folder, "config changed"))
        else:
            active = max(t for t in (last_activity.get(folder), c.started_at, 0.0) if t is not None)
            timeout = idle_timeouts.get(folder)
            if timeout is not None and now - active >= timeout:
                actions.append(Action(STOP_IDLE, c.name, folder, f"idle for {int(now - active)}s"))
            else:
                actions.append(Action(ADOPT, c.name, folder, "running and current"))
    return actions


def apply_plan(actions: list[Action], runtime: GroupRuntime) -> None:
    """Carry out a plan: the only place reconcile touches the backend."""
    for action in actions:
        if action.kind == RECREATE and action.folder is not None:
            runtime.recreate(runtime.store.load(action.folder))
        elif action.kind in (REMOVE, REMOVE_ORPHAN):
            runtime.backend.remove(action.container)
        elif action.kind == STOP_IDLE:
            runtime.backend.stop(action.container)
