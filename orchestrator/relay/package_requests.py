"""Applying an approved package request (a held request of kind ``packages``): the
packages go into group.yaml (its comments kept, under the lock the CLI takes) and the
wheels shown into packages.lock; then the group's image is built, in the background in
the daemon (other groups are not held), and the chat is told when it is ready or why
it failed. The daemon's reconcile moves the container to the new image."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.groups.packages import LockedWheel, PythonLock, read_lock, write_lock

if TYPE_CHECKING:
    from orchestrator.store.held import HeldRequest
    from orchestrator.store.messages import MessageQueue

log = logging.getLogger("orchestrator.packages")


def apply_held(
    groups_dir: Path, folder: str, request: HeldRequest, approved_by: str
) -> tuple[bool, str]:
    """Merge the request's packages into the group's group.yaml and lock: (done, what)."""
    from orchestrator.groups.config import config_lock, load_group_config, set_packages

    asked = json.loads(request.content)
    config_file = groups_dir / folder / "group.yaml"
    with config_lock(config_file):
        current = load_group_config(config_file).packages
        new_python = {_name(r): r for r in asked["python"]}
        python = tuple(
            dict.fromkeys(
                [r for r in current.python if _name(r) not in new_python] + list(asked["python"])
            )
        )
        debian = tuple(dict.fromkeys([*current.debian, *asked["debian"]]))
        old = read_lock(groups_dir / folder)
        wheels = {_canonical(w.name): w for w in (old.wheels if old else ())}
        for spec, shown in zip(asked["python"], asked["wheels"], strict=True):
            name, _, version = spec.partition("==")
            wheels[_canonical(name)] = LockedWheel(name, version, shown["file"], shown["sha256"])
        set_packages(config_file, debian, python)
        write_lock(groups_dir / folder, PythonLock(python, tuple(wheels.values())))
    log.info(
        "group %s: package request %d (%s) approved by %r",
        folder,
        request.id,
        ", ".join([*asked["debian"], *asked["python"]]),
        approved_by,
    )
    return True, "its packages are in group.yaml; the group's image is being built"


def _name(requirement: str) -> str:
    """A requirement's project, as PyPI compares them (typing_extensions and
    Typing.Extensions are typing-extensions)."""
    from packaging.requirements import Requirement

    return _canonical(Requirement(requirement).name)


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def build_after_approval(
    queue: MessageQueue, groups_dir: Path, request: HeldRequest, *, background: bool = True
) -> threading.Thread | None:
    """Build the group's image for an approved request and tell the request's chat how
    it went (a host notice on the message that asked)."""
    from orchestrator.relay.approvals import tell_after

    return tell_after(
        queue,
        request,
        lambda: _build(groups_dir, request.group),
        background=background,
        name="packages",
    )


def _build(groups_dir: Path, folder: str) -> str:
    from orchestrator.config import load_config
    from orchestrator.errors import OrchestratorError
    from orchestrator.groups import GroupStore
    from orchestrator.home import Home
    from orchestrator.image.agent import agent_image_ref
    from orchestrator.image.group import build_group_image
    from orchestrator.runtime.engine import connect

    home = Home(groups_dir.parent)
    try:
        config = load_config(home)
        group = GroupStore(home).load(folder)
        client = connect()
        try:
            agent = agent_image_ref(client, config.image)
            result = build_group_image(
                client, config.project, group, agent, mirror=config.debian_mirror
            )
        finally:
            client.close()
    except OrchestratorError as exc:
        log.warning("group %s: the image for its packages failed: %s", folder, exc.message)
        return f"the group's image could not be built: {exc.message}; it keeps its image"
    except Exception as exc:  # a build thread must say why, not vanish
        log.exception("group %s: the image for its packages failed", folder)
        return f"the group's image could not be built: {exc}; it keeps its image"
    log.info("group %s: image %s ready for its packages", folder, result.tag)
    return (
        f"the packages are installed in the group's image ({result.tag}); the group "
        "moves to it between turns, within a minute"
    )
