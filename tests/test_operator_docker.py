"""`down` says what it leaves running, and `down --all` stops it (the real engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_PROJECT
from tests.engineclean import remove_containers
from tests.test_daemon_docker import DaemonProcess, _free_port

pytestmark = pytest.mark.docker


def test_down_reports_containers_left_running_and_all_stops_them(  # type: ignore[no-untyped-def]
    run, home: Path, agent_image, test_project, docker_client
) -> None:
    (home / "orchestrator.yaml").write_text(f'http:\n  listen: "127.0.0.1:{_free_port()}"\n')
    GroupStore(Home(home)).add(GroupConfig(name="Fam", creators=("operator",)))
    daemon = DaemonProcess(home, test_project)
    try:
        daemon.start()
        assert daemon.send("fam", "hello", wait=True)["state"] == "done"
        name = f"{test_project}.fam"
        result = run("down")
        assert result.exit_code == 0, result.stderr
        assert f"left running: {name}" in result.stdout
        assert docker_client.containers.get(name).status == "running"
        assert daemon.process is not None and daemon.process.wait(10) == 0  # reaped
        daemon.start()
        outcome = json.loads(run("down", "--all", "--json").stdout)
        assert outcome["stopped_containers"] == [name] and outcome["left_running"] == []
        assert docker_client.containers.get(name).status == "exited"
        assert daemon.process is not None and daemon.process.wait(10) == 0
    finally:
        daemon.stop()
        remove_containers(docker_client, f"{LABEL_PROJECT}={test_project}")
