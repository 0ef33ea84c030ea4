"""The daemon as a container (compose.yaml, with the Compose tool this machine has): a
message through the HTTP API is answered and remembered in the home on the host, across
`down` and `up`; a wrong host path for the home stops the daemon before anything is
made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from tests.engineclean import remove_containers
from tests.test_daemon_docker import _free_port

pytestmark = pytest.mark.docker
ROOT = Path(__file__).parent.parent
TOKEN = "compose-test-token-0123456789"


def _compose() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if probe.returncode == 0:
        return ["docker", "compose"]
    pytest.skip("no Compose tool on this machine (docker compose or docker-compose)")


@pytest.fixture(scope="module")
def daemon_image(agent_image) -> str:  # type: ignore[no-untyped-def]
    built = subprocess.run(
        [str(ROOT / ".venv/bin/orchestrator"), "image", "build", "--daemon", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    return str(json.loads(built.stdout)["daemon"]["tag"])


@pytest.fixture
def deployment(
    tmp_path: Path, test_project, daemon_image, docker_client
) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    home = (tmp_path / "home").resolve()
    home.mkdir()
    GroupStore(Home(home)).add(GroupConfig(name="fam", creators=("alice",)))
    port = _free_port()
    env = {
        **os.environ,
        "ORCHESTRATOR_HOME": str(home),
        "ORCHESTRATOR_HTTP_TOKEN": TOKEN,
        "ORCHESTRATOR_HTTP_PORT": str(port),
        "ORCHESTRATOR_PROJECT": test_project,
    }
    compose = [*_compose(), "-f", str(ROOT / "compose.yaml"), "-p", f"{test_project}-compose"]
    deployment = {"home": home, "port": port, "env": env, "compose": compose}
    try:
        yield deployment
    finally:
        subprocess.run([*compose, "down"], env=env, capture_output=True, timeout=120)
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")


def _up(d: dict[str, Any]) -> None:
    done = subprocess.run(
        [*d["compose"], "up", "-d"], env=d["env"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{d['port']}/healthz", timeout=2) as r:
                if json.loads(r.read())["ok"]:
                    return
        except (OSError, urllib.error.URLError, ValueError):
            time.sleep(0.5)
    logs = subprocess.run([*d["compose"], "logs"], env=d["env"], capture_output=True, text=True)
    raise AssertionError("the daemon never answered /healthz: " + logs.stdout[-3000:])


def _ask(d: dict[str, Any], text: str) -> list[str]:
    def call(method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{d['port']}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=90) as response:
            return json.loads(response.read())

    posted = call("POST", "/v1/groups/fam/messages", {"text": text, "sender": "alice"})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        message = call("GET", f"/v1/messages/{posted['id']}?wait=30")
        if message["state"] in ("done", "dead"):
            assert message["state"] == "done", message
            return list(message["replies"])
    raise AssertionError(f"no answer to {text!r}")


def test_compose_answers_and_remembers_across_down_and_up(deployment) -> None:  # type: ignore[no-untyped-def]
    _up(deployment)
    [told] = _ask(deployment, "remember that the boiler is in the cellar")
    assert told.startswith("Noted: the boiler is in the cellar.")
    fact = deployment["home"] / "groups/fam/memory/facts/the-boiler.md"
    assert fact.is_file() and "in the cellar" in fact.read_text()  # on the host, in the home
    down = subprocess.run(
        [*deployment["compose"], "down"], env=deployment["env"], capture_output=True, timeout=120
    )
    assert down.returncode == 0
    assert fact.is_file()  # down leaves the data
    _up(deployment)
    [answer] = _ask(deployment, "what do you know about the boiler?")
    assert "cellar" in answer


def test_the_daemons_container_has_no_shell(daemon_image, docker_client, test_project) -> None:  # type: ignore[no-untyped-def]
    from docker.errors import APIError

    for shell in ("/bin/sh", "/bin/bash", "/usr/bin/dash"):
        container = docker_client.containers.create(
            daemon_image,
            entrypoint=[shell],
            command=["-c", "true"],
            labels={"org.orchestrator.project": test_project},
        )
        try:
            with pytest.raises(APIError, match="no such file or directory"):
                container.start()
        finally:
            container.remove(force=True)


def test_a_wrong_host_home_stops_the_daemon_before_anything_is_made(
    deployment,
    daemon_image,
    docker_client,
    test_project,  # type: ignore[no-untyped-def]
) -> None:
    home = str(deployment["home"])
    output = docker_client.containers.run(
        daemon_image,
        ["--home", home, "serve"],
        environment={
            "ORCHESTRATOR_HOST_HOME": "/nonexistent/elsewhere",
            "ORCHESTRATOR_PROJECT": test_project,
        },
        volumes={
            home: {"bind": home, "mode": "rw"},
            "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
        },
        labels={"org.orchestrator.project": test_project},
        remove=False,
        detach=True,
    )
    try:
        result = output.wait(timeout=120)
        logs = output.logs().decode()
    finally:
        output.remove(force=True)
    assert result["StatusCode"] != 0, logs
    assert "ORCHESTRATOR_HOST_HOME=/nonexistent/elsewhere is not this home" in logs
    made = [
        c
        for c in docker_client.containers.list(
            all=True, filters={"label": f"org.orchestrator.project={test_project}"}
        )
        if "org.orchestrator.group" in c.labels
    ]
    assert made == []
    assert not (deployment["home"] / "state/run").exists()
