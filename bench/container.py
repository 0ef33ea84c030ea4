"""A group's real container for the benchmarks that measure inside one: a throwaway
home, the agent image (built offline when missing), the group made with any extra
``group.yaml`` text, its container started, and everything removed afterwards."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class GroupContainer:
    home: Any  # orchestrator.home.Home
    group: Any  # orchestrator.groups.Group
    container: Any  # docker's Container

    def run(self, script: str, *args: str) -> Any:
        """Run a Python ``script`` in the container; the JSON of its last line."""
        answer = self.container.exec_run(["python3", "-c", script, *args])
        assert answer.exit_code == 0, answer.output.decode(errors="replace")[-2000:]
        return json.loads(answer.output.decode().strip().splitlines()[-1])


@contextmanager
def group_container(
    name: str, extra_yaml: str = "", before_start: Callable[[Any, Any], None] | None = None
) -> Iterator[GroupContainer]:
    """``before_start(home, group)`` runs once the group exists, before its container."""
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY, load_config
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.image.agent import build_agent_image
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.base import LABEL_PROJECT
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root

    client = connect()
    image = build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True).tag
    project = f"bench-{uuid.uuid4().hex[:6]}"
    try:
        with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
            home = Home(Path(tmp) / "home")
            home.ensure_writable()
            home.config_file.write_text(f"project: {project}\nmount_allowlist: {tmp}/none.yaml\n")
            config = load_config(home)
            backend = open_backend(config, client=client, home=home)
            runtime = GroupRuntime(
                home, config, backend, lambda: image, skills_root=default_skills_root()
            )
            group = runtime.store.add(GroupConfig(name=name, creators=("b",)))
            if extra_yaml:
                group.config_file.write_text(group.config_file.read_text() + extra_yaml)
                group = runtime.store.load(group.folder)
            try:
                if before_start is not None:
                    before_start(home, group)
                runtime.ensure_running(group)
                yield GroupContainer(
                    home, group, client.containers.get(runtime.container_name(group))
                )
            finally:
                for found in backend.list({LABEL_PROJECT: project}):
                    backend.remove(found.name)
    finally:
        client.close()
