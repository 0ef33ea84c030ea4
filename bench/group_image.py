"""A group's own image when nothing changed: ``build_group_image`` finding it current
(its inputs hashed, the tag looked up) against ``docker image inspect`` of that tag, in
one run, interleaved. The image is built once first, for one locked wheel."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from bench.harness import Result, interleaved

NAME = "group-image-noop"


def run(quick: bool) -> Result:
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY, load_config
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.groups.packages import PackageSettings, resolve_python, write_lock
    from orchestrator.home import Home
    from orchestrator.image.agent import build_agent_image
    from orchestrator.image.group import build_group_image, remove_group_images
    from orchestrator.runtime.engine import connect

    client = connect()
    agent = build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True).tag
    project = f"bench-{uuid.uuid4().hex[:6]}"
    try:
        with tempfile.TemporaryDirectory(prefix="bench-group-image-") as tmp:
            home = Home(Path(tmp) / "home")
            home.ensure_writable()
            home.config_file.write_text(f"project: {project}\n")
            config = load_config(home)
            packages = PackageSettings(python=("tabulate==0.9.0",))
            group = GroupStore(home).add(GroupConfig(name="fam", packages=packages))
            write_lock(group.path, resolve_python(packages.python))
            first = build_group_image(client, config.project, group, agent)
            assert first.built
            try:
                t, f = interleaved(
                    lambda: build_group_image(client, config.project, group, agent),
                    lambda: client.images.get(first.tag),
                    20 if quick else 200,
                    target_label="build_group_image, current (its inputs hashed, tag looked up)",
                    floor_label="docker image inspect of the tag",
                )
            finally:
                remove_group_images(client, config.project, group.folder)
    finally:
        client.close()
    return Result(NAME, t, f, note="one group with one locked wheel")
