"""What the docker tests that run a real daemon over a fake model provider share: a home
that leaves nothing behind (its containers and group images removed), the CLI run as a
process, the provider's lines of orchestrator.yaml, and the tool results a session's
transcript holds."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.image.group import remove_group_images
from orchestrator.runtime.base import LABEL_PROJECT
from tests.engineclean import remove_containers
from tests.fakeproviders import FakeProvider

ROOT = Path(__file__).parent.parent
PROVIDER_KEY_ENV = "FAKE_OPENAI_KEY"


@pytest.fixture(name="home")
def docker_home(
    tmp_path: Path, agent_image: str, test_project: str, docker_client: Any
) -> Iterator[Path]:
    """An empty home; afterwards the test project's containers and every group's own
    images are removed."""
    root = tmp_path / "home"
    root.mkdir()
    yield root
    groups = root / "groups"
    for folder in sorted(p.name for p in groups.iterdir()) if groups.is_dir() else []:
        remove_group_images(docker_client, test_project, folder)
    remove_containers(docker_client, f"{LABEL_PROJECT}={test_project}")


def cli(home: Path, project: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``orchestrator --home HOME ARGS`` as a process of its own."""
    return subprocess.run(
        [".venv/bin/orchestrator", "--home", str(home), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "ORCHESTRATOR_PROJECT": project},
        cwd=ROOT,
        timeout=1200,
    )


def provider_config(provider: FakeProvider, listen_port: int, context_tokens: int = 0) -> str:
    """orchestrator.yaml's HTTP address and a provider ``fake`` (model ``fake-model``)
    on ``provider``, its key from FAKE_OPENAI_KEY; ``context_tokens`` (when given) room
    enough that no compaction takes a scripted answer."""
    text = (
        f'http:\n  listen: "127.0.0.1:{listen_port}"\n'
        f"providers:\n  fake:\n    kind: openai\n    base_url: {provider.base_url}\n"
        f"    key_env: {PROVIDER_KEY_ENV}\n    models: [fake-model]\n"
    )
    if context_tokens:
        text += f"    model_info:\n      fake-model: {{context_tokens: {context_tokens}}}\n"
    return text


def tool_results(group_dir: Path, session: str = "cli.chat-c") -> list[str]:
    """The tool results of a session's transcript, in order."""
    transcript = group_dir / "sessions" / session / "transcript.jsonl"
    return [
        event["content"]
        for event in map(json.loads, transcript.read_text().splitlines())
        if event.get("role") == "tool"
    ]
