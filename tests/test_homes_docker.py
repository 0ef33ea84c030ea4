"""Two homes on one engine never touch each other's containers (the real engine)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config import load_config
from orchestrator.errors import OrchestratorError
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_HOME
from orchestrator.runtime.docker import DockerBackend
from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root
from tests.engineclean import remove_containers

pytestmark = pytest.mark.docker


@pytest.fixture
def homes(tmp_path: Path, agent_image, docker_client, monkeypatch) -> Iterator[list[GroupRuntime]]:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)  # each home's default project
    runtimes = []
    for place in ("a", "b"):
        root = tmp_path / place / "home"  # the same folder name: compose would collide
        root.mkdir(parents=True)
        home = Home(root)
        config = replace(load_config(home), mount_allowlist=tmp_path / "none.yaml")
        runtime = GroupRuntime(
            home,
            config,
            DockerBackend(docker_client),
            lambda: agent_image,
            skills_root=default_skills_root(),
        )
        runtime.store.add(GroupConfig(name="Fam"))
        runtimes.append(runtime)
    try:
        yield runtimes
    finally:
        for runtime in runtimes:
            remove_containers(docker_client, f"{LABEL_HOME}={runtime.home.identity}")


def test_two_homes_run_the_same_folder_side_by_side(homes) -> None:  # type: ignore[no-untyped-def]
    a, b = homes
    assert a.config.project != b.config.project
    info_a = a.ensure_running(a.store.load("fam"))
    info_b = b.ensure_running(b.store.load("fam"))
    assert info_a.name != info_b.name and info_a.running and info_b.running
    assert [s.container for s in b.status()] == [info_b.name]
    b.reconcile()
    after = a.backend.inspect(info_a.name)
    assert after is not None and after.id == info_a.id and after.running  # untouched
    assert [(x.kind, x.container) for x in b.plan()] == [("adopt", info_b.name)]


def test_a_shared_project_name_is_refused_not_taken_over(homes) -> None:  # type: ignore[no-untyped-def]
    a, b = homes
    info_a = a.ensure_running(a.store.load("fam"))
    b_same = GroupRuntime(
        b.home,
        replace(b.config, project=a.config.project),
        b.backend,
        b.image,
        skills_root=b.skills_root,
    )
    with pytest.raises(OrchestratorError, match="belongs to another orchestrator home"):
        b_same.ensure_running(b_same.store.load("fam"))
    b_same.reconcile()
    with pytest.raises(OrchestratorError, match="belongs to another orchestrator home"):
        b_same.remove("fam")
    after = a.backend.inspect(info_a.name)
    assert after is not None and after.id == info_a.id and after.running
