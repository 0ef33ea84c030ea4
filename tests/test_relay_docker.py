"""The relay end to end on the real engine: a group in its container (no network) talks
to a model through the host, and the key never reaches the container."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_PROJECT
from tests.engineclean import remove_containers
from tests.fakeproviders import FakeProvider, Text, ToolUse
from tests.test_daemon_docker import DaemonProcess, _free_port

pytestmark = pytest.mark.docker
KEY = "sk-docker-relay-0123456789abcdefghij"
ROOT = Path(__file__).parent.parent


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider("openai", KEY)
    yield fake
    fake.close()


@pytest.fixture
def served(
    tmp_path: Path, provider, agent_image, test_project, docker_client, monkeypatch
) -> Iterator[DaemonProcess]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)  # the daemon inherits it; nothing else does
    home = tmp_path / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(
        f'http:\n  listen: "127.0.0.1:{_free_port()}"\n'
        f"providers:\n  fake:\n    kind: openai\n    base_url: {provider.base_url}\n"
        "    key_env: FAKE_OPENAI_KEY\n    models: [fake-model]\n"
    )
    GroupStore(Home(home)).add(
        GroupConfig(name="Fam", provider="fake", model="fake-model", creators=("operator",))
    )
    proc = DaemonProcess(home, test_project)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        remove_containers(docker_client, f"{LABEL_PROJECT}={test_project}")


def test_a_tool_call_and_two_replies_through_the_relay(served, provider, docker_client) -> None:  # type: ignore[no-untyped-def]
    concept = "---\ntype: person\n---\n\n# Ada\n\nThe user is Ada Lovelace.\n"
    provider.script.extend(
        [
            ToolUse("write_file", {"path": "memory/people/ada.md", "content": concept}),
            ToolUse("send_message", {"text": "One moment, saving that."}, call_id="call_2"),
            Text("Saved: you are Ada."),
        ]
    )
    result = subprocess.run(
        [".venv/bin/orchestrator", "--home", str(served.home.root), "send", "fam", "I am Ada"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "FAKE_OPENAI_KEY"}
        | {"ORCHESTRATOR_PROJECT": served.project},
        cwd=ROOT,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["One moment, saving that.", "Saved: you are Ada."]
    group = GroupStore(served.home).load("fam")
    assert (group.memory_dir / "people/ada.md").read_text() == concept
    assert all(s.headers["Authorization"] == f"Bearer {KEY}" for s in provider.seen)
    assert all(s.body["model"] == "fake-model" for s in provider.seen)

    # The key is nowhere the container can see: its environment, its files, its frames.
    container = docker_client.containers.get(f"{served.project}.fam")
    assert KEY not in json.dumps(container.attrs["Config"]["Env"])
    seen = container.exec_run(
        ["sh", "-c", "cat /proc/1/environ; env; grep -rs . /workspace /run/orchestrator || true"]
    ).output.decode(errors="replace")
    assert KEY not in seen and "FAKE_OPENAI_KEY" not in seen
    for path in group.path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    # ... and the host-only libraries are not in the image at all
    probe = container.exec_run(
        [
            "python3",
            "-c",
            "import importlib.util as u; print([m for m in ('anthropic', 'openai', "
            "'docker', 'aiohttp', 'tenacity', 'ruamel') if u.find_spec(m)])",
        ]
    )
    assert probe.output.decode().strip() == "[]"
    # usage was recorded per call
    usage = subprocess.run(
        [".venv/bin/orchestrator", "--home", str(served.home.root), "usage", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    [row] = json.loads(usage.stdout)
    assert row["group"] == "fam" and row["requests"] == 3
