"""What an operator meets on the command line: errors, --json, message show, transcript,
logs --daemon, group restore, chat, and the offline provider's answers. A real daemon
serves the CLI socket; runners are fakes on real sockets (no engine)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.runner import Runner
from orchestrator.agent.settings import AgentSettings
from orchestrator.channels.control import ControlChannel
from orchestrator.config import OrchestratorConfig
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.protocol import TurnRequest
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import open_queue
from tests.fakerunner import FakeRunner


@pytest.fixture
def daemon(home: Path) -> Iterator[dict[str, Any]]:
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="Fam", creators=("operator",)))
    config = OrchestratorConfig(project="t", mount_allowlist=home / "none.yaml")
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock")
    queue = open_queue(h)
    d = Daemon(h, config, runtime, queue, concurrency=1)
    d.start()
    channel = ControlChannel(d)
    channel.start()
    yield {"daemon": d, "runner": runner}
    channel.stop()
    d.drain(1)
    runner.close()
    d.relay.usage.close()
    queue.close()


def test_usage_errors_are_one_line_and_a_hint(run) -> None:  # type: ignore[no-untyped-def]
    result = run("group", "add")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: Missing argument 'NAME'.",
        "hint: see: cli group add --help",
    ]
    assert run("group", "list", "--nope").stderr.startswith("error: No such option '--nope'")


def test_json_errors_are_json_on_stdout_with_the_same_exit_code(run) -> None:  # type: ignore[no-untyped-def]
    result = run("group", "show", "nope", "--json")
    assert result.exit_code == 2 and result.stderr == ""
    assert json.loads(result.stdout)["error"].startswith("no group named 'nope'")


def test_send_to_an_unknown_group_exits_2_like_everywhere(run, daemon) -> None:  # type: ignore[no-untyped-def]
    result = run("send", "nope", "hello")
    assert result.exit_code == 2 and "no group named 'nope'" in result.stderr
    assert run("send", "fam", "hello").stdout.strip() == "echo: hello"


def test_message_show(run, daemon) -> None:  # type: ignore[no-untyped-def]
    sent = json.loads(run("send", "fam", "hello", "--json").stdout)
    shown = run("message", "show", sent["id"]).stdout
    assert f"message {sent['id']}" in shown and "operator (creator) via cli" in shown
    assert "state:    done, 1 delivery attempts" in shown and "reply 0:  echo: hello" in shown
    data = json.loads(run("message", "show", sent["id"], "--json").stdout)
    assert data["replies"] == ["echo: hello"]
    assert run("message", "show", "nope").exit_code == 2


def test_chat_reads_lines_and_reports_status(run, daemon) -> None:  # type: ignore[no-untyped-def]
    result = run("chat", "fam", input="hello\n\n   \n/status\nagain\n")
    lines = result.stdout.splitlines()
    assert lines[0].startswith("chatting with fam as 'operator'")
    assert "echo: hello" in lines and "echo: again" in lines
    assert any(line.startswith("queue: 0 queued, 0 in flight, 1 done") for line in lines)
    assert [t["text"] for t in daemon["runner"].turns] == ["hello", "again"]  # no blank turns


def test_chat_with_an_unknown_group_fails_before_anything(run) -> None:  # type: ignore[no-untyped-def]
    result = run("chat", "nope", input="hello\n")
    assert result.exit_code == 2 and "no group named 'nope'" in result.stderr


def test_transcript_is_readable_and_read_through_the_confined_layer(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Fam")
    group = GroupStore(Home(home)).load("fam")
    (group.path / "sessions").mkdir()
    runner = Runner(AgentSettings(agent_dir=group.path, runtime_dir=home / "run"), hooks=[])
    runner.handle(TurnRequest("t1", "kitchen", "remember that the oven is hot", sender="alice"))
    shown = run("transcript", "fam", "--chat", "kitchen").stdout
    assert "--- fresh context (startup, offline-rules) ---" in shown
    assert "alice (member): remember that the oven is hot" in shown
    assert "write_file(" in shown and "Noted: the oven is hot" in shown
    assert len(run("transcript", "fam", "--last", "2").stdout.splitlines()) == 2
    events = json.loads(run("transcript", "fam", "--json").stdout)
    assert {e["session"] for e in events} == {"cli.chat-kitchen"}
    # a container that swaps its sessions folder for a link gets nothing read through it
    os.rename(group.path / "sessions", group.path / "real-sessions")
    (group.path / "sessions").symlink_to(home / "groups")
    result = run("transcript", "fam")
    assert result.exit_code == 1 and "not a folder" in result.stderr


def test_logs_of_the_daemon(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("logs", "--daemon").exit_code == 2
    (home / "state").mkdir()
    (home / "state/orchestrator.log").write_text("one\ntwo\nthree \x1b[31mred\n")
    assert run("logs", "--daemon", "--tail", "2").stdout == "two\nthree \\e[31mred\n"
    assert run("logs").exit_code == 2


def test_group_restore_brings_a_removed_group_back(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Fam Two", "--folder", "fam-two")
    (home / "groups/fam-two/memory/keep.md").write_text("kept\n")
    run("group", "remove", "fam-two")
    assert not (home / "groups/fam-two").exists()
    assert "no removed group 'nope'" in run("group", "restore", "nope").stderr
    assert run("group", "restore", "fam-two").exit_code == 0
    assert (home / "groups/fam-two/memory/keep.md").read_text() == "kept\n"
    run("group", "remove", "fam-two")
    run("group", "add", "Fam Two", "--folder", "fam-two")
    refused = run("group", "restore", "fam-two")
    assert refused.exit_code == 2 and "exists" in refused.stderr


def test_lint_counts_and_group_show_layout(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Fam")
    (home / "groups/fam/memory/orphan.md").write_text("---\ntype: note\n---\nx\n")
    assert run("memory", "lint", "fam").stdout.splitlines()[-1] == "4 files checked, 1 finding"
    lines = run("group", "show", "fam").stdout.splitlines()
    labels = [line.split(":")[0].strip() for line in lines[1:]]
    assert len(labels) == len(set(labels))  # no label twice
    assert all(": " in line for line in lines[1:])  # a space after every label


def test_offline_recall_answers_from_what_the_file_says_now(tmp_path: Path) -> None:
    from orchestrator.memory.scaffold import scaffold_memory

    agent = tmp_path / "agent"
    agent.mkdir()
    scaffold_memory(agent)
    (agent / "sessions").mkdir()
    runner = Runner(AgentSettings(agent_dir=agent, runtime_dir=tmp_path / "run"), hooks=[])
    runner.handle(TurnRequest("t1", "c", "remember that my timezone is Europe/Berlin"))
    fact = agent / "memory/facts/my-timezone.md"
    fact.write_text(fact.read_text().replace("Europe/Berlin.", "Asia/Tokyo."))  # a hand edit
    answer = runner.handle(TurnRequest("t2", "c", "what do you know about my timezone?")).replies[0]
    assert "Asia/Tokyo" in answer and "Europe/Berlin" not in answer
    intro = runner.handle(TurnRequest("t3", "c", "hello there")).replies[0]
    assert "orchestrator provider add" in intro


def test_memory_search_is_answered_by_the_running_daemon(
    run, daemon, home: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """With a daemon running, the command asks it (its index open, its embedder loaded)
    instead of opening the index itself; without one it searches by itself."""
    import orchestrator.cli.memory as cli_memory

    (home / "groups/fam/memory/lessons.md").write_text(
        "---\ntype: note\n---\n# Lessons\n\nThe piano lesson is on Friday at four.\n"
    )

    def no_local_index(*args: object) -> None:
        raise AssertionError("the command opened an index of its own")

    monkeypatch.setattr(cli_memory, "_index", no_local_index)
    found = json.loads(run("memory", "search", "fam", "piano lesson", "--json").stdout)
    assert found["group"] == "fam" and found["results"][0]["path"] == "memory/lessons.md"
    shown = run("memory", "search", "fam", "piano").stdout
    assert "memory/lessons.md:" in shown and "**piano** lesson is on Friday" in shown
    refused = run("memory", "search", "nope", "piano")
    assert refused.exit_code == 2 and "no group named 'nope'" in refused.stderr


def test_memory_search_without_a_daemon_searches_by_itself(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Fam")
    (home / "groups/fam/memory/lessons.md").write_text(
        "---\ntype: note\n---\n# Lessons\n\nThe piano lesson is on Friday at four.\n"
    )
    found = json.loads(run("memory", "search", "fam", "piano", "--json").stdout)
    assert found["results"][0]["path"] == "memory/lessons.md"
