"""A backup taken while the daemon is under load, restored into a fresh folder, on the
real engine: the restored home answers from the same memory, and holds every message
accepted before the backup's snapshot (none accepted after it ended), each of which it
answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.service import control_request
from orchestrator.store.messages import MessageQueue
from tests.engineclean import remove_containers

pytestmark = pytest.mark.docker
ROOT = Path(__file__).parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(home: Path, project: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "orchestrator"), "--home", str(home), *args],
        capture_output=True, text=True, timeout=600, cwd=home.parent,
        env={**os.environ, "ORCHESTRATOR_PROJECT": project},
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stdout, done.stderr, _log(home))
    return done


def _log(home: Path) -> str:
    path = home / "state" / "orchestrator.log"
    return path.read_text()[-4000:] if path.exists() else ""


def _wait_done(home: Path, ids: set[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    queue = MessageQueue(home / "state" / "queue.db", migrate=False)
    try:
        while time.monotonic() < deadline:
            states = {m.state for m in (queue.get(i) for i in ids) if m is not None}
            if states <= {"done"}:
                return
            time.sleep(0.2)
    finally:
        queue.close()
    raise AssertionError(f"messages not answered; log:\n{_log(home)}")


def test_a_backup_under_load_restores_a_home_that_answers_from_the_same_memory(
    tmp_path: Path, agent_image: str, test_project: str, docker_client: Any
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text("allowed_roots: []\n")
    (home / "orchestrator.yaml").write_text(
        f'mount_allowlist: {allowlist}\nhttp:\n  listen: "127.0.0.1:{_free_port()}"\n'
    )
    store = GroupStore(Home(home))
    for name in ("Family", "Work"):
        store.add(GroupConfig(name=name, creators=("operator",)))
    try:
        _cli(home, test_project, "up")
        _cli(home, test_project, "send", "family", "remember that the cat is called Tom")
        accepted: list[tuple[float, str]] = []
        stop = threading.Event()

        def load() -> None:
            n = 0
            while not stop.is_set():
                group = ("family", "work")[n % 2]
                answer = control_request(
                    Home(home),
                    {"op": "send", "group": group, "text": f"what do you know about item-{n}?",
                     "chat": f"load{n % 3}", "sender": "operator", "wait": False},
                )  # fmt: skip
                assert answer["ok"], answer
                accepted.append((time.monotonic(), answer["message"]["id"]))
                n += 1
                time.sleep(0.02)

        sender = threading.Thread(target=load)
        sender.start()
        try:
            while len(accepted) < 30:
                time.sleep(0.05)
            started = time.monotonic()
            archive = tmp_path / "backup.tar.gz"
            made = _cli(home, test_project, "backup", "--to", str(archive))
            finished = time.monotonic()
            while len([a for a in accepted if a[0] > finished]) < 10:
                time.sleep(0.05)
        finally:
            stop.set()
            sender.join()
        assert "backup written" in made.stdout
        _cli(home, test_project, "down", "--all")
        # the restored home's containers take the names
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")
        checked = _cli(tmp_path, test_project, "backup", "--verify", str(archive))
        assert f"{archive}: ok" in checked.stdout

        # a fresh folder, as on a new machine
        restored = tmp_path / "restored"
        _cli(restored, test_project, "restore", str(archive))
        queue = MessageQueue(restored / "state" / "queue.db")
        try:
            held = {m.id for m in queue.recent(100_000)}
        finally:
            queue.close()
        before = {mid for at, mid in accepted if at < started}
        after = {mid for at, mid in accepted if at > finished}
        assert before <= held, "a message accepted before the backup is missing"
        assert not (after & held), "the backup holds a message accepted after it ended"
        _cli(restored, test_project, "up")
        _wait_done(restored, held)
        answer = _cli(restored, test_project, "send", "family", "what do you know about the cat?")
        assert "Tom" in answer.stdout, answer.stdout
        found = _cli(restored, test_project, "memory", "search", "family", "cat").stdout
        assert "Tom" in found
        _cli(restored, test_project, "down", "--all")
    finally:
        for folder in (home, tmp_path / "restored"):
            if (folder / "state" / "orchestrator.pid").exists():
                subprocess.run(
                    [str(Path(sys.executable).parent / "orchestrator"), "--home", str(folder),
                     "down"], capture_output=True, timeout=120,
                    env={**os.environ, "ORCHESTRATOR_PROJECT": test_project},
                )  # fmt: skip
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")
