"""A group's own image, for the packages its group.yaml asks for (``packages``).

Debian packages come the way the offline base gets them: a base made by ``mmdebstrap``
with the group's packages beside the usual ones (cached by the list, so groups asking
for the same packages share it), and the agent image built on it. Python packages are
the wheels of the group's lock (``packages.lock``: exact versions and sha256 hashes,
resolved when they were asked for), downloaded on the host and installed in the build
with ``--require-hashes``; ``docker build`` runs with no network. The image is tagged
``orchestrator-group-<folder>-<hash8 of project and folder>:<hash12 of its inputs>``
(the agent image's inputs, the Debian list, the lock), so an unchanged list is a no-op.

A group without packages runs the agent image. Image disk use is not part of the
group's ``container.disk``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import ImageBuildFailed, OrchestratorError
from orchestrator.groups.packages import (
    PackageRefused,
    PythonLock,
    _pip_download,
    download_locked,
    read_lock,
)
from orchestrator.image.agent import (
    _build_from,
    _docker_build,
    _image_id,
    source_root,
)
from orchestrator.image.base import INPUTS_LABEL, ROLE_LABEL, ensure_offline_base
from orchestrator.runtime.engine import call_engine

if TYPE_CHECKING:
    import docker

    from orchestrator.groups import Group

log = logging.getLogger(__name__)
Progress = Callable[[str], None]
GROUP_REPOSITORY_PREFIX = "orchestrator-group-"
GROUP_ROLE = "group"
GROUP_LABEL = "org.orchestrator.group"


@dataclass(frozen=True)
class GroupImage:
    tag: str
    built: bool


def group_repository(project: str, folder: str) -> str:
    """The repository of a group's images: its folder and a piece of the hash of its
    project too, so that two homes' groups of one name never share (or prune) one."""
    piece = hashlib.sha256(f"{project}\0{folder}".encode()).hexdigest()[:8]
    return f"{GROUP_REPOSITORY_PREFIX}{folder}-{piece}"


def group_inputs(
    client: docker.DockerClient, group: Group, agent_base: str
) -> tuple[str, PythonLock | None]:
    """The hash of what the group's image is made of, and its Python lock."""
    packages = group.config.packages
    lock = read_lock(group.path) if packages.python else None
    if packages.python and (lock is None or lock.requirements != packages.python):
        raise PackageRefused(
            f"group {group.folder}: the Python packages asked for are not resolved yet",
            hint=f"run: orchestrator group packages {group.folder} --build",
        )
    # The agent image's tag is the hash of its own inputs (the sources and its base), so
    # it stands for them here: nothing is walked again on this path, which reconcile and
    # status take for every group with packages.
    from orchestrator.image.recipe import recipe_hash

    digest = hashlib.sha256(b"group\n")
    digest.update(f"agent:{agent_base}\n".encode())
    digest.update(f"debian:{recipe_hash(packages.debian) if packages.debian else ''}\n".encode())
    dockerfile = source_root() / "images/group/Dockerfile"
    digest.update(hashlib.sha256(dockerfile.read_bytes()).digest())
    digest.update((lock.digest() if lock else "").encode())
    return digest.hexdigest(), lock


def group_image_tag(
    client: docker.DockerClient, project: str, group: Group, agent_base: str
) -> str | None:
    """The tag of the group's current image when it is built, else None; never builds."""
    if group.config.packages.empty:
        return None
    try:
        digest, _ = group_inputs(client, group, agent_base)
    except OrchestratorError:
        return None
    tag = f"{group_repository(project, group.folder)}:{digest[:12]}"
    return tag if _image_id(client, tag) else None


class GroupImages:
    """Which image a group runs: its own when it asks for packages and the image is
    built, else the agent image (logged once per list, with how to build it)."""

    def __init__(self, client: docker.DockerClient, project: Callable[[], str]) -> None:
        self.client = client
        self.project = project
        self.warned: set[tuple[str, str]] = set()

    def __call__(self, group: Group, agent_image: str) -> str:
        if group.config.packages.empty:
            return agent_image
        tag = group_image_tag(self.client, self.project(), group, agent_image)
        if tag is not None:
            return tag
        key = (group.folder, repr(group.config.packages))
        if key not in self.warned:
            self.warned.add(key)
            log.warning(
                "group %s asks for packages whose image is not built; it runs the agent "
                "image until it is (orchestrator group packages %s --build)",
                group.folder,
                group.folder,
            )
        return agent_image


def build_group_image(
    client: docker.DockerClient,
    project: str,
    group: Group,
    agent_base: str,
    *,
    progress: Progress = lambda _: None,
    mirror: str | None = None,
) -> GroupImage:
    """Build the group's image (a no-op when current); ImageBuildFailed or
    PackageRefused naming what failed, the group's current image left as it is."""
    packages = group.config.packages
    if packages.empty:
        raise PackageRefused(f"group {group.folder} asks for no packages")
    digest, lock = group_inputs(client, group, agent_base)
    repository = group_repository(project, group.folder)
    tag = f"{repository}:{digest[:12]}"
    if _image_id(client, tag):
        return GroupImage(tag, built=False)
    root = source_root()
    below = agent_base
    if packages.debian:
        progress(f"a base with the Debian packages {', '.join(packages.debian)}")
        base = ensure_offline_base(client, progress, mirror, extra=packages.debian)
        below = f"{repository}:agent-{digest[:12]}"
        _build_from(client, root, "agent", below, base, digest, progress)
    with tempfile.TemporaryDirectory(prefix="orchestrator-group-image-") as tmp:
        context = Path(tmp)
        shutil.copytree(root / "images" / "group", context, dirs_exist_ok=True)
        wheels = context / "wheels"
        wheels.mkdir()
        if lock is not None:
            download_locked(lock, wheels, progress)
        else:
            (wheels / "requirements.txt").write_text("")
        _pip_download(["--no-deps", "pip"], wheels, progress)
        pip_wheel = next(wheels.glob("pip-*.whl")).name
        image_id = _docker_build(
            client, context, tag, below, pip_wheel, digest, progress, role=GROUP_ROLE
        )
    if below != agent_base:  # the intermediate tag; its layers stay under the final one
        call_engine("untag", lambda: client.images.remove(below, noprune=True))
    call_engine("label", lambda: client.api.tag(image_id, repository, "latest"))
    _prune(client, repository, keep=tag, progress=progress)
    return GroupImage(tag, built=True)


def _prune(client: docker.DockerClient, repository: str, keep: str, progress: Progress) -> None:
    from docker.errors import APIError

    for image in client.images.list(name=repository):
        for old in image.tags:
            if old not in (keep, f"{repository}:latest"):
                try:
                    client.images.remove(old)
                    progress(f"removed old image {old}")
                except (APIError, OrchestratorError):
                    pass


def remove_group_images(client: docker.DockerClient, project: str, folder: str) -> list[str]:
    """Remove every image of the group (``group remove --purge``); the tags removed."""
    from docker.errors import APIError, ImageNotFound

    removed = []
    for image in client.images.list(name=group_repository(project, folder)):
        for tag in image.tags:
            try:
                client.images.remove(tag, force=True)
                removed.append(tag)
            except (APIError, ImageNotFound):
                pass
    return removed


__all__ = [
    "GROUP_LABEL",
    "INPUTS_LABEL",
    "ROLE_LABEL",
    "GroupImage",
    "ImageBuildFailed",
    "build_group_image",
    "group_image_tag",
    "remove_group_images",
]
