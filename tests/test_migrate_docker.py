"""migrate-memory with the daemon and a real container: the group waits during the run,
and a message sent meanwhile is answered after it, from the migrated memory."""

from __future__ import annotations

import threading
import time

import pytest
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.memory import migrate
from orchestrator.store.messages import open_queue
from tests.test_daemon_docker import daemon  # noqa: F401 - the daemon process fixture

pytestmark = pytest.mark.docker


def test_a_message_sent_during_the_run_is_answered_after_it(daemon, monkeypatch) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    group = GroupStore(daemon.home).add(GroupConfig(name="fam", creators=("operator",)))
    daemon.start()
    first = daemon.send("fam", "hello", wait=True)
    assert first["state"] == "done", first
    (group.path / "CLAUDE.md").write_text("# Family\n\n- Grandma's birthday is on 3 March.\n")

    holding, release = threading.Event(), threading.Event()
    real = migrate._distill

    def held(*args, **kwargs):  # type: ignore[no-untyped-def]
        holding.set()
        assert release.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(migrate, "_distill", held)
    runner = CliRunner(env={"ORCHESTRATOR_PROJECT": daemon.project})
    results = []
    migration = threading.Thread(
        target=lambda: results.append(
            runner.invoke(
                cli, ["--home", str(daemon.home.root), "skill", "run", "migrate-memory", "fam"]
            )
        )
    )
    migration.start()
    try:
        assert holding.wait(120), "the migration never reached its distill step"
        queue = open_queue(daemon.home)
        assert [p.holder for p in queue.pauses("fam")] == ["migrate-memory"]
        queue.close()
        sent = daemon.send("fam", "what do you know about birthday?")
        assert daemon.get(sent["id"])["state"] == "queued"  # held by the pause
    finally:
        release.set()
        migration.join(120)
    assert results and results[0].exit_code == 0, results and results[0].output
    deadline = time.monotonic() + 120
    answered = daemon.get(sent["id"])
    while answered["state"] not in ("done", "dead") and time.monotonic() < deadline:
        time.sleep(0.2)
        answered = daemon.get(sent["id"])
    assert answered["state"] == "done", answered
    assert "3 March" in answered["replies"][0]  # answered from the migrated memory
