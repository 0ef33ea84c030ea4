"""An installed skill in a group's real container: the operator adds it (one group's)
before the daemon starts, the container mounts it read-only at /workspace/skills/NAME,
the model (a scripted fake on the host) sees its name and description at the fresh
context, loads it with ``skill``, runs its script with the shell and answers with the
output; the skill's folder cannot be written from the container."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, ToolSettings
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_PROJECT
from orchestrator.skills import catalog
from tests.engineclean import remove_containers
from tests.fakeproviders import FakeProvider, Text, ToolUse
from tests.test_daemon_docker import DaemonProcess, _free_port

pytestmark = pytest.mark.docker
KEY = "sk-docker-skills-0123456789abcdefghij"
SKILL_MD = (
    "---\nname: greet\ndescription: Greets a person by name with the greet script.\n---\n\n"
    "# Greet\n\nGREET-BODY: run `bash /workspace/skills/greet/scripts/greet.sh NAME`.\n"
)
SCRIPT = '#!/bin/sh\necho "hello, $1, from $(id -u) in $(pwd)"\n'


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider("openai", KEY)
    yield fake
    fake.close()


@pytest.fixture
def served(
    tmp_path: Path,
    provider: FakeProvider,
    agent_image: str,
    test_project: str,
    docker_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[DaemonProcess]:
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    home = tmp_path / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(
        f'http:\n  listen: "127.0.0.1:{_free_port()}"\n'
        f"providers:\n  fake:\n    kind: openai\n    base_url: {provider.base_url}\n"
        "    key_env: FAKE_OPENAI_KEY\n    models: [fake-model]\n"
    )
    GroupStore(Home(home)).add(
        GroupConfig(
            name="fam",
            provider="fake",
            model="fake-model",
            creators=("operator",),
            tools=ToolSettings(shell=("creator",)),
        )
    )
    source = tmp_path / "src" / "greet"
    (source / "scripts").mkdir(parents=True)
    (source / "SKILL.md").write_text(SKILL_MD)
    (source / "scripts" / "greet.sh").write_text(SCRIPT)
    catalog.install(Home(home), source, "fam", catalog.builtin_root())
    proc = DaemonProcess(home, test_project)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        remove_containers(docker_client, f"{LABEL_PROJECT}={test_project}")


def ask(proc: DaemonProcess, text: str) -> dict[str, Any]:
    answer = proc.send("fam", text, wait=True)
    message = answer.get("message", answer)
    assert message.get("state") == "done", message
    return message


def results(proc: DaemonProcess) -> list[str]:
    group = GroupStore(proc.home).load("fam")
    path = group.sessions_dir / "cli.chat-c" / "transcript.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [str(e["content"]) for e in events if e.get("role") == "tool"]


def test_an_installed_skill_is_listed_loaded_and_its_script_runs_in_the_container(
    served: DaemonProcess, provider: FakeProvider
) -> None:
    provider.script.extend(
        [
            ToolUse("skill", {"name": "greet"}),
            ToolUse("shell", {"command": "bash /workspace/skills/greet/scripts/greet.sh Ada"}),
            ToolUse("shell", {"command": "touch /workspace/skills/greet/x; echo rc=$?"}),
            Text("Greeted."),
        ]
    )
    message = ask(served, "greet Ada")
    assert message["replies"] == ["Greeted."]
    system = json.dumps(provider.seen[0].body["messages"][0])
    assert "greet" in system and "Greets a person by name with the greet script." in system
    assert "GREET-BODY" not in system  # the body only once the skill is loaded
    tools = [t["function"]["name"] for t in provider.seen[0].body["tools"]]
    assert "skill" in tools and "shell" in tools
    loaded, ran, wrote = results(served)
    assert "GREET-BODY" in loaded and "- scripts/greet.sh" in loaded, loaded
    assert ran.startswith("exit code 0\nhello, Ada, from ") and "/workspace/agent/files" in ran
    assert "rc=1" in wrote and "Read-only file system" in wrote, wrote
    installed = served.home.root / "skills-by-group" / "fam" / "greet"
    assert sorted(p.name for p in installed.iterdir()) == ["SKILL.md", "scripts"]
