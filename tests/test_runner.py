"""The runner: fresh contexts inject memory, resumes never do; compaction with a flush;
tools confined to the agent folder; transcripts survive a restart."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.agent.hooks import CommandHook, load_hooks, run_session_start
from orchestrator.agent.runner import Runner
from orchestrator.agent.session import Session
from orchestrator.agent.settings import AgentSettings
from orchestrator.agent.tools import FLUSH, Toolbox, ToolError
from orchestrator.memory.lint import lint_memory
from orchestrator.memory.okf import split_frontmatter
from orchestrator.memory.scaffold import scaffold_memory
from orchestrator.protocol import TurnRequest, session_key
from orchestrator.versions import TRANSCRIPT_VERSION

MEMORY_HOOK = CommandHook(
    "startup|clear|compact", (sys.executable, "-m", "orchestrator", "hook", "session-start")
)


@pytest.fixture
def settings(tmp_path: Path) -> AgentSettings:
    agent = tmp_path / "agent"
    agent.mkdir()
    scaffold_memory(agent)
    (agent / "sessions").mkdir()
    (agent / "files").mkdir()
    return AgentSettings(agent_dir=agent, runtime_dir=tmp_path / "run")


def runner(settings: AgentSettings) -> Runner:
    return Runner(settings, hooks=[MEMORY_HOOK])


def say(r: Runner, text: str, chat: str = "c1", n: list[int] = [0]) -> object:  # noqa: B006
    n[0] += 1
    return r.handle(TurnRequest(turn_id=f"t{n[0]}", chat=chat, text=text, sender="alice"))


def contexts(settings: AgentSettings, key: str = "cli.chat-c1") -> list[dict[str, object]]:
    return [e for e in Session(settings.sessions_dir, key).events() if e["t"] == "context"]


def test_memory_injected_on_new_session_not_on_the_next_message(settings: AgentSettings) -> None:
    r = runner(settings)
    first = say(r, "hello")
    assert first.fresh_context == "startup"  # type: ignore[attr-defined]
    second = say(r, "hello again")
    assert second.fresh_context is None  # type: ignore[attr-defined]
    (ctx,) = contexts(settings)
    assert ctx["source"] == "startup"
    system = str(ctx["system"])
    assert "## Memory" in system and "### memory/index.md" in system
    assert system.count("## Core Memory") == 1


def test_operator_edit_visible_after_clear_not_on_resume(settings: AgentSettings) -> None:
    r = runner(settings)
    say(r, "hello")
    index = settings.memory_dir / "index.md"
    index.write_text(
        index.read_text().replace("## Core Memory", "## Core Memory\n\n- OPERATOR-EDIT")
    )
    say(r, "still here")
    assert all("OPERATOR-EDIT" not in str(c["system"]) for c in contexts(settings))
    cleared = say(r, "/clear")
    assert cleared.fresh_context == "clear"  # type: ignore[attr-defined]
    last = contexts(settings)[-1]
    assert last["source"] == "clear" and "OPERATOR-EDIT" in str(last["system"])


def test_transcript_survives_a_restart_and_resumes(settings: AgentSettings) -> None:
    say(runner(settings), "remember that the dog is called Rex")
    restarted = runner(settings)  # a new process: nothing in memory but the files
    result = say(restarted, "what do you know about the dog?")
    assert result.fresh_context is None  # type: ignore[attr-defined]
    assert len(contexts(settings)) == 1
    assert "Rex" in result.replies[0]  # type: ignore[attr-defined]
    context = Session(settings.sessions_dir, "cli.chat-c1").current_context()
    assert context is not None
    assert [m["role"] for m in context.messages].count("user") == 2


def test_torn_last_transcript_line_is_skipped(settings: AgentSettings) -> None:
    say(runner(settings), "hello")
    path = settings.sessions_dir / "cli.chat-c1" / "transcript.jsonl"
    with open(path, "ab") as handle:
        handle.write(b'{"t": "msg", "role": "us')
    result = say(runner(settings), "again")
    assert result.fresh_context is None  # type: ignore[attr-defined]
    # the event after the torn line was not glued onto it: a new process still sees it
    context = Session(settings.sessions_dir, "cli.chat-c1").current_context()
    assert context is not None
    assert [m["content"] for m in context.messages if m["role"] == "user"] == ["hello", "again"]


def test_session_state_follows_appends_from_elsewhere(settings: AgentSettings) -> None:
    first, second = runner(settings), runner(settings)  # e.g. an old and a new process
    say(first, "one")
    say(second, "two")
    say(first, "three")  # first must see "two" before appending
    context = Session(settings.sessions_dir, "cli.chat-c1").current_context()
    assert context is not None
    users = [m["content"] for m in context.messages if m["role"] == "user"]
    assert users == ["one", "two", "three"]
    assert context.size_chars() == len(context.system) + sum(
        len(json.dumps(m, ensure_ascii=False)) for m in context.messages
    )


def test_sessions_follow_the_session_mode(settings: AgentSettings) -> None:
    assert session_key("per-chat", "cli", "c1", "th") == "cli.chat-c1"
    assert session_key("per-thread", "cli", "c1", "th") == "cli.chat-c1-thread-th"
    assert session_key("shared", "cli", "c1", "th") == "shared"
    weird = session_key("per-chat", "cli", "../../etc", None)
    assert "/" not in weird and weird != session_key("per-chat", "cli", "__etc", None)
    # the channel is part of the key: one chat id on two channels is two conversations
    assert session_key("per-chat", "telegram:fam", "-100123", None) == "telegram.fam.chat--100123"
    keys = {
        session_key("per-chat", channel, "dashboard", None)
        for channel in ("dashboard", "http", "http:slack-bridge", "cli", "telegram:dashboard")
    }
    assert len(keys) == 5
    r = runner(settings)
    say(r, "hi", chat="a")
    say(r, "hi", chat="b")
    assert sorted(p.name for p in settings.sessions_dir.iterdir()) == ["cli.chat-a", "cli.chat-b"]


def test_provider_switch_starts_a_fresh_context(settings: AgentSettings) -> None:
    say(runner(settings), "hello")
    from dataclasses import replace

    switched = Runner(replace(settings, model="offline-rules-2"), hooks=[MEMORY_HOOK])
    result = say(switched, "hello")
    assert result.fresh_context == "startup"  # type: ignore[attr-defined]
    assert [c["model"] for c in contexts(settings)] == ["offline-rules", "offline-rules-2"]
    assert [c["context_id"] for c in contexts(settings)] == [1, 2]  # numbered on


def test_compaction_flushes_then_reinjects(settings: AgentSettings) -> None:
    from dataclasses import replace

    r = Runner(replace(settings, context_budget_chars=14_000), hooks=[MEMORY_HOOK])
    first = say(r, "hello")
    assert first.fresh_context == "startup"  # type: ignore[attr-defined]
    # the next message would pass the budget: the turn compacts first
    result = say(r, "remember that the meeting is on Friday. " + "z" * 9_000)
    assert result.compacted and result.fresh_context == "compact"  # type: ignore[attr-defined]
    assert "Noted" in result.replies[0]  # type: ignore[attr-defined]
    ctxs = contexts(settings)
    assert [c["source"] for c in ctxs] == ["startup", "compact"]
    assert "### memory/index.md" in str(ctxs[-1]["system"])
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    daily = settings.memory_dir / "daily" / f"{today}.md"
    note = daily.read_text()
    assert split_frontmatter(note).data == {"type": "daily-note", "date": today}
    assert "- hello — " in note and "; chat c1; " in note  # who said it, where, when
    assert lint_memory(settings.memory_dir).findings == []  # daily notes need no links
    events = Session(settings.sessions_dir, "cli.chat-c1").events()
    assert any(e["t"] == "flush" and e["appended_chars"] > 0 for e in events)
    # the flush's own messages never joined the session
    assert not any("[memory flush]" in str(e.get("content")) for e in events)
    context = Session(settings.sessions_dir, "cli.chat-c1").current_context()
    assert context is not None
    # the conversation so far fits what a compaction keeps verbatim: nothing is older,
    # so there is no summary (never an empty one)
    assert context.messages[0]["content"] == "hello" and context.summary == ""
    assert not any("[Summary" in str(m.get("content")) for m in context.messages)


def test_flush_is_pinned_append_only_and_rejects_replays(settings: AgentSettings) -> None:
    now = datetime(2026, 11, 29, 23, 59, tzinfo=UTC)
    tools = Toolbox(settings.agent_dir, FLUSH, now=now)
    first = tools.call("append_daily", {"content": "- decided: ship on Monday"})
    assert first.startswith("PERSISTED: appended") and "memory/daily/2026-11-29.md" in first
    note = settings.memory_dir / "daily/2026-11-29.md"
    before = note.read_text()
    # a replay of the whole note appends only what follows it
    replay = tools.call("append_daily", {"content": before + "- new: call Bob\n"})
    assert replay.startswith("PERSISTED")
    assert note.read_text() == before + "- new: call Bob\n"
    # a pure replay, and a copied paragraph, append nothing
    after = note.read_text()
    assert tools.call("append_daily", {"content": after}).startswith("NOTHING APPENDED")
    assert tools.call("append_daily", {"content": "- new: call Bob"}).startswith("NOTHING")
    assert note.read_text() == after
    # every other write is refused during a flush, and the path cannot be chosen
    for name, args in (
        ("write_file", {"path": "memory/x.md", "content": "x"}),
        ("edit_file", {"path": "memory/index.md", "old_text": "M", "new_text": "N"}),
        ("send_message", {"text": "hi"}),
    ):
        with pytest.raises(ToolError, match="refused during a memory flush"):
            tools.call(name, args)
    with pytest.raises(ToolError, match="bad arguments"):
        tools.call("append_daily", {"content": "x", "path": "memory/index.md"})
    # a block over the flush's cap is kept up to it in whole lines; the rest is left
    block = "\n".join(f"- fact {n}: " + "y" * 90 for n in range(100))
    kept = tools.call("append_daily", {"content": block})
    assert kept.startswith("PERSISTED: appended ") and "left for the next one" in kept
    lines = [x for x in note.read_text().splitlines() if x.startswith("- fact ")]
    assert 70 <= len(lines) < 100 and all(x.endswith("y" * 90) for x in lines)
    assert lines == [f"- fact {n}: " + "y" * 90 for n in range(len(lines))]


def test_tools_are_confined(settings: AgentSettings, tmp_path: Path) -> None:
    tools = Toolbox(settings.agent_dir)
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    (settings.memory_dir / "escape").symlink_to(tmp_path)
    (settings.memory_dir / "inner").symlink_to(settings.memory_dir / "system")
    for path in (
        "../outside.txt",
        "/etc/passwd",
        "memory/escape/outside.txt",
        "memory/../../outside.txt",
    ):
        with pytest.raises(ToolError, match="outside /workspace/agent"):
            tools.call("read_file", {"path": path})
    with pytest.raises(ToolError):
        tools.call("write_file", {"path": "memory/escape/new.txt", "content": "x"})
    assert not (tmp_path / "new.txt").exists()
    for path in ("instructions.prepend.md", "learned-behaviors.md"):
        with pytest.raises(ToolError, match="only under memory/ and files/"):
            tools.call("write_file", {"path": path, "content": "x"})
    # the conversations (every chat's) are the runner's own: no file tool reads them,
    # also through a symlink from memory/
    (settings.agent_dir / "sessions" / "cli.chat-b").mkdir(parents=True)
    (settings.agent_dir / "sessions" / "cli.chat-b" / "transcript.jsonl").write_text("{}\n")
    (settings.memory_dir / "talk").symlink_to(settings.agent_dir / "sessions")
    for name, args in (
        ("read_file", {"path": "sessions/cli.chat-b/transcript.jsonl"}),
        ("read_file", {"path": "memory/talk/cli.chat-b/transcript.jsonl"}),
        ("list_dir", {"path": "sessions"}),
        ("grep", {"pattern": "x", "path": "sessions"}),
        ("write_file", {"path": "sessions/x.jsonl", "content": "x"}),
    ):
        with pytest.raises(ToolError, match="sessions/ holds the conversations"):
            tools.call(name, args)
    assert tools.call("grep", {"pattern": "{}", "path": "."}) == "(no matches)"
    assert "How this memory works" in tools.call(
        "read_file", {"path": "memory/inner/definition.md"}
    )
    written = tools.call("write_file", {"path": "files/out/report.txt", "content": "ok"})
    assert written == "PERSISTED: files/out/report.txt (2 bytes)"
    assert (settings.agent_dir / "files/out/report.txt").read_text() == "ok"
    edited = tools.call(
        "edit_file", {"path": "files/out/report.txt", "old_text": "ok", "new_text": "fine"}
    )
    assert (
        edited.startswith("PERSISTED")
        and (settings.agent_dir / "files/out/report.txt").read_text() == "fine"
    )
    assert "memory/index.md:" in tools.call("grep", {"pattern": "core memory"})
    tools.call("send_message", {"text": "one"})
    tools.call("send_message", {"text": "two"})
    assert tools.outbox == ["one", "two"]


def test_offline_remember_writes_a_linked_concept(settings: AgentSettings) -> None:
    r = runner(settings)
    result = say(r, "remember that my timezone is Europe/Berlin")
    assert result.replies == [  # type: ignore[attr-defined]
        "Noted: my timezone is Europe/Berlin. Saved to memory/facts/my-timezone.md."
    ]
    concept = (settings.memory_dir / "facts/my-timezone.md").read_text()
    front = split_frontmatter(concept)
    assert front.status == "ok" and next(iter(front.data or {})) == "type"
    assert (front.data or {})["type"] == "fact"
    report = lint_memory(settings.memory_dir)
    assert report.findings == [], report.findings
    answer = say(r, "what do you know about my timezone?", chat="other")
    assert "Europe/Berlin" in answer.replies[0]  # type: ignore[attr-defined]
    nothing = say(r, "what do you know about volcanoes?")
    assert nothing.replies == ["I have nothing in memory about volcanoes."]  # type: ignore[attr-defined]
    intro = say(r, "how are you?")
    assert "offline provider" in intro.replies[0]  # type: ignore[attr-defined]


def test_hooks_failures_are_skipped(tmp_path: Path) -> None:
    hooks = [
        CommandHook("startup", (sys.executable, "-c", "import sys; sys.exit(3)")),
        CommandHook("startup", (sys.executable, "-c", "import time; time.sleep(5)"), 0.5),
        CommandHook("startup", ("/no/such/binary",)),
        CommandHook("startup", (sys.executable, "-c", "import sys; print(sys.stdin.read())")),
        CommandHook("compact", (sys.executable, "-c", "print('only on compact')")),
    ]
    out = run_session_start(hooks, source="startup", session_id="s", agent_dir=tmp_path)
    assert len(out) == 1
    assert json.loads(out[0]) == {
        "source": "startup",
        "session_id": "s",
        "agent_dir": str(tmp_path),
    }


def test_the_shipped_memory_hook_runs_in_process_with_the_commands_output(
    settings: AgentSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = settings.agent_dir
    (agent / "memory/index.md").write_text("# Index\n\n- [[pets]]: the cat is grey\n")
    by_process = run_session_start([MEMORY_HOOK], source="startup", session_id="s", agent_dir=agent)
    import subprocess

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "run", no_process)
    (shipped,) = load_hooks()
    for source in ("startup", "clear", "compact"):
        assert (
            run_session_start([shipped], source=source, session_id="s", agent_dir=agent)
            == by_process
        )
    assert "the cat is grey" in by_process[0] and by_process[0].startswith("## Memory")
    # a matcher that takes resume (the shipped one does not): the hook itself prints nothing
    everything = CommandHook(".*", shipped.command)
    assert run_session_start([everything], source="resume", session_id="s", agent_dir=agent) == []


def test_a_failing_in_process_memory_hook_is_logged_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import orchestrator.memory.reading as reading

    def broken(agent_dir: str) -> str:
        raise ValueError("bad memory")

    monkeypatch.setattr(reading, "render_memory", broken)
    after = CommandHook("startup", (sys.executable, "-c", "print('next hook')"))
    with caplog.at_level("WARNING"):
        out = run_session_start(
            [*load_hooks(), after], source="startup", session_id="s", agent_dir=tmp_path
        )
    assert out == ["next hook"]
    assert caplog.messages == ["SessionStart hook orchestrator failed (bad memory); skipped"]


def test_the_in_process_memory_hook_output_is_cut_at_64000_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.memory.reading as reading

    monkeypatch.setattr(reading, "render_memory", lambda agent_dir: " " + "y" * 70000)
    [output] = run_session_start(load_hooks(), source="startup", session_id="s", agent_dir=tmp_path)
    assert output == "y" * 63_999


def test_shipped_hooks_config() -> None:
    (hook,) = load_hooks()
    assert hook.command == ("orchestrator", "hook", "session-start")
    assert hook.matches("startup") and hook.matches("compact") and not hook.matches("resume")
    assert hook.timeout == 10


def test_a_completed_turn_id_is_not_run_twice(settings: AgentSettings) -> None:
    r = runner(settings)
    turn = TurnRequest(turn_id="same", chat="c1", text="remember that the cat is grey")
    first = r.handle(turn)
    again = runner(settings).handle(turn)  # a retry after a crash, in a new process
    assert again.duplicate and again.replies == first.replies
    users = [
        m
        for m in Session(settings.sessions_dir, "cli.chat-c1").current_context().messages  # type: ignore[union-attr]
        if m["role"] == "user"
    ]
    assert len(users) == 1


def test_concurrent_remembers_in_one_group_lose_no_link(settings: AgentSettings) -> None:
    from concurrent.futures import ThreadPoolExecutor

    runner = Runner(settings)
    facts = [f"the code of room {n} is {n * 7}" for n in range(40)]

    def remember(n: int) -> list[str]:
        turn = TurnRequest(f"t{n}", f"chat-{n}", f"remember that {facts[n]}", sender="a")
        return runner.handle(turn).replies

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(remember, range(40)))
    assert all(r[0].startswith("Noted:") for r in replies), replies[:3]
    index = (settings.memory_dir / "facts/index.md").read_text()
    for n in range(40):
        assert index.count(f"](the-code-of-room-{n}.md)") == 1, n
    top = (settings.memory_dir / "index.md").read_text()
    assert top.count("(facts/index.md)") == 1
    assert lint_memory(settings.memory_dir).findings == []


def test_a_fact_is_never_written_to_a_reserved_name(settings: AgentSettings) -> None:
    runner = Runner(settings)
    runner.handle(TurnRequest("t1", "c", "remember that index is the main map"))
    runner.handle(TurnRequest("t2", "c", "remember that log is a record of changes"))
    index = (settings.memory_dir / "facts/index.md").read_text()
    assert index.startswith("# Facts") and "(index-fact.md)" in index and "(log-fact.md)" in index
    assert (settings.memory_dir / "facts/index-fact.md").is_file()
    assert not (settings.memory_dir / "facts/log.md").exists()


def test_a_transcript_line_of_the_wrong_shape_is_skipped(settings: AgentSettings) -> None:
    runner = Runner(settings)
    runner.handle(TurnRequest("t1", "c", "hello"))
    transcript = settings.sessions_dir / "cli.chat-c/transcript.jsonl"
    with open(transcript, "a") as handle:
        handle.write('{"t": "context", "context_id": "not a number", "system": 5}\n')
        handle.write('{"t": "done", "turn_id": "t9", "replies": 5}\n')
        handle.write('["not", "an", "object"]\n')
        handle.write('{"t": "msg", "role": {"evil": true}, "content": "x"}\n')
    fresh = Runner(settings)  # as after a restart: the whole file is read again
    result = fresh.handle(TurnRequest("t2", "c", "hello again"))
    assert result.replies and result.fresh_context is None  # the same context resumed


def test_a_large_transcript_rotates_and_the_session_carries_on(settings: AgentSettings) -> None:
    import gzip

    from orchestrator.agent.session import Session

    runner = Runner(settings)
    runner.handle(TurnRequest("t0", "c", "remember that the boat is blue"))
    session = runner._sessions["cli.chat-c"]
    session.rotate_bytes = 4000
    rotations: list[Path] = []
    real_rotate = session.rotate
    session.rotate = lambda: rotations.append(real_rotate()) or rotations[-1]  # type: ignore[method-assign]
    for n in range(1, 30):
        runner.handle(TurnRequest(f"t{n}", "c", f"message number {n} " + "x" * 200))
    archives = sorted((settings.sessions_dir / "cli.chat-c/archive").glob("*.jsonl.gz"))
    assert 1 <= len(archives) <= 4 and 2 <= len(rotations) <= 6  # not one per turn
    header, first = map(
        json.loads,
        (settings.sessions_dir / "cli.chat-c/transcript.jsonl").read_text().split("\n")[:2],
    )
    assert (header["t"], header["version"]) == ("header", TRANSCRIPT_VERSION)
    assert first["t"] in ("done", "context")
    assert b"message number" in gzip.decompress(archives[-1].read_bytes())
    # after a restart the same context resumes, and a repeated turn id is still known
    again = Runner(settings)
    repeat = again.handle(TurnRequest("t29", "c", "message number 29 " + "x" * 200))
    assert repeat.duplicate
    reloaded = Session(settings.sessions_dir, "cli.chat-c")
    assert reloaded.current_context() is not None
    assert reloaded.current_context().context_id == session.context.context_id  # type: ignore[union-attr]


def test_a_turn_stops_after_12_tool_steps(settings: AgentSettings) -> None:
    from orchestrator.agent.providers.base import Completion, Provider, ToolCall

    class Looping(Provider):
        calls = 0

        def complete(self, request, host=None):  # type: ignore[no-untyped-def]
            Looping.calls += 1
            return Completion(None, (ToolCall(f"c{Looping.calls}", "list_dir", {}),))

    runner = Runner(settings, provider=Looping("x"), hooks=[])
    result = runner.handle(TurnRequest("t", "c", "go"))
    assert Looping.calls == 12
    assert result.replies == ["(stopped after 12 tool steps in one turn)"]


def test_hook_output_is_cut_at_64000_characters(tmp_path: Path) -> None:
    hook = CommandHook("startup", (sys.executable, "-c", "print('x' * 70000)"))
    [output] = run_session_start([hook], source="startup", session_id="s", agent_dir=tmp_path)
    assert len(output) == 64_000


def test_compaction_keeps_the_newest_messages_that_fit_a_quarter_of_the_budget(
    settings: AgentSettings,
) -> None:
    import json
    from dataclasses import replace

    r = Runner(replace(settings, context_budget_chars=50_000), hooks=[])
    for n in range(6):
        say(r, f"message number {n} " + "y" * 6_000, chat="k")
    session = r._sessions["cli.chat-k"]
    before = list(session.current_context().messages)  # type: ignore[union-attr]
    fresh = r.compact(session, session.current_context())  # type: ignore[arg-type]
    kept = fresh.messages
    # the summary is in the system text after the memory, never a message of the talk
    assert "## Summary of the earlier conversation" in fresh.system and fresh.summary
    assert fresh.system.endswith(fresh.summary + "\n")
    assert not any("Summary of the earlier" in str(m["content"]) for m in kept)
    assert 1 <= len(kept) <= 4 and kept == before[-len(kept) :] and kept[0]["role"] == "user"
    assert fresh.flushed == fresh.kept == len(kept)  # what was kept was flushed already
    assert sum(len(json.dumps(m, ensure_ascii=False)) for m in kept) <= 50_000 // 4
    assert len(before) - len(kept) > 4  # the rest went into the summary


def test_one_huge_message_is_kept_cut_so_the_next_turn_does_not_compact_again(
    settings: AgentSettings,
) -> None:
    from dataclasses import replace

    from orchestrator.agent.runner import ContextBudget

    r = Runner(replace(settings, context_budget_chars=20_000), hooks=[])
    say(r, "hello", chat="h")
    say(r, "z" * 30_000, chat="h")
    session = r._sessions["cli.chat-h"]
    fresh = r.compact(
        session, session.current_context(), budget=r.budget(TurnRequest("t", "h", "x"))
    )  # type: ignore[arg-type]
    assert not ContextBudget(100_000, 20_000).exceeded(fresh)
    kept_user = [m for m in fresh.messages if m["role"] == "user" and "zzzz" in m["content"]]
    assert len(kept_user) == 1 and "[cut: " in kept_user[0]["content"]


class Scripted:
    """A provider that answers from a script and keeps every request it was sent."""

    def __init__(self, *answers: object) -> None:
        from dataclasses import replace

        from orchestrator.agent.providers.base import Provider

        self.answers = list(answers)
        self.requests: list[object] = []
        outer = self

        class _P(Provider):
            name = "scripted"

            def complete(self, request, host=None):  # type: ignore[no-untyped-def]
                # a snapshot: the runner goes on appending to the live context's list
                outer.requests.append(replace(request, messages=list(request.messages)))
                answer = outer.answers.pop(0)
                if isinstance(answer, Exception):
                    raise answer
                return answer

        self.provider = _P("m")


def _events(settings: AgentSettings, key: str) -> list[dict[str, object]]:
    """The session's events after its header, without their time stamps."""
    events = Session(settings.sessions_dir, key).events()
    assert events[0]["t"] == "header"  # every transcript starts with its version
    return [{k: v for k, v in e.items() if k != "ts"} for e in events[1:]]


def test_one_turn_is_recorded_exactly(settings: AgentSettings) -> None:
    from orchestrator.agent.providers.base import Completion, ToolCall

    (settings.agent_dir / "files" / "a.txt").write_text("alpha")
    script = Scripted(
        Completion(
            "looking",
            (
                ToolCall("c1", "read_file", {"path": "files/a.txt"}),
                ToolCall("c2", "read_file", {"path": "../outside"}),
                ToolCall("c3", "send_message", {"text": "working on it"}),
            ),
        ),
        Completion("  " + "z" * 32_010 + "  "),
    )
    r = Runner(settings, provider=script.provider, hooks=[])
    result = r.handle(TurnRequest("t1", "k", "read it", sender="bob", trust="member"))
    assert (result.session, result.fresh_context, result.compacted, result.duplicate) == (
        "cli.chat-k",
        "startup",
        False,
        False,
    )
    assert result.replies == ["working on it", "z" * 32_000]  # the final one cut at 32,000
    events = _events(settings, "cli.chat-k")
    assert [e["t"] for e in events] == ["context", "msg", "msg", "msg", "msg", "msg", "msg", "done"]
    assert {k: events[0][k] for k in ("context_id", "source", "provider", "model")} == {
        "context_id": 1,
        "source": "startup",
        "provider": settings.provider,
        "model": settings.model,
    }
    user, assistant, read, refused, sent, final = (
        {k: v for k, v in e.items() if k != "t"} for e in events[1:7]
    )
    assert user == {
        "turn_id": "t1",
        "role": "user",
        "content": "read it",
        "sender": "bob",
        "trust": "member",
    }
    assert assistant == {
        "turn_id": "t1",
        "role": "assistant",
        "content": "looking",
        "tool_calls": [
            {"id": "c1", "name": "read_file", "arguments": {"path": "files/a.txt"}},
            {"id": "c2", "name": "read_file", "arguments": {"path": "../outside"}},
            {"id": "c3", "name": "send_message", "arguments": {"text": "working on it"}},
        ],
    }
    assert read == {
        "turn_id": "t1",
        "role": "tool",
        "tool_call_id": "c1",
        "name": "read_file",
        "content": "alpha",
    }
    assert refused["tool_call_id"] == "c2" and str(refused["content"]).startswith("ERROR: ")
    assert sent["content"] == "SENT"
    assert final == {"turn_id": "t1", "role": "assistant", "content": "  " + "z" * 32_010 + "  "}
    assert events[7] == {"t": "done", "turn_id": "t1", "replies": result.replies}
    first, second = script.requests
    assert first.purpose == second.purpose == "turn"  # type: ignore[attr-defined]
    assert first.system == events[0]["system"]  # type: ignore[attr-defined]
    assert [m["role"] for m in second.messages] == [  # type: ignore[attr-defined]
        "user", "assistant", "tool", "tool", "tool"
    ]  # fmt: skip
    assert {t.name for t in first.tools} >= {"read_file", "send_message"}  # type: ignore[attr-defined]


def test_no_reply_blank_replies_and_a_tool_that_fails_on_the_disk(
    settings: AgentSettings, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.agent.providers.base import Completion, ToolCall
    from orchestrator.agent.tools import BUILT_IN, FunctionTool, StaticSource, ToolSpec, schema

    def broken(box: Toolbox, path: str) -> str:
        raise OSError(5, "Input/output error")

    disk = StaticSource(
        "disk", (FunctionTool(ToolSpec("read_disk", "", schema(["path"], path="string")), broken),)
    )
    script = Scripted(
        Completion(None, (ToolCall("c1", "read_disk", {"path": "files/x"}),)),
        Completion(" NO_REPLY "),
        Completion("   "),
    )
    r = Runner(settings, provider=script.provider, hooks=[], tool_sources=(*BUILT_IN, disk))
    assert r.handle(TurnRequest("t1", "k", "x")).replies == []
    tool = next(e for e in _events(settings, "cli.chat-k") if e.get("role") == "tool")
    assert tool["content"] == "ERROR: read_disk failed: Input/output error"
    assert r.handle(TurnRequest("t2", "k", "y")).replies == []


def test_clear_a_budget_and_a_repeated_turn_id(settings: AgentSettings) -> None:
    from orchestrator.agent.providers.base import BudgetExhausted, Completion

    script = Scripted(
        Completion("one"),
        Completion(None),  # the flush before the clear
        BudgetExhausted("This group has used its model budget for today."),
        Completion("three"),
    )
    r = Runner(settings, provider=script.provider, hooks=[])
    assert r.handle(TurnRequest("t1", "k", "a")).replies == ["one"]
    cleared = r.handle(TurnRequest("t2", "k", " /clear "))
    assert (cleared.replies, cleared.fresh_context) == (
        ["Started a fresh context; memory was loaded again."],
        "clear",
    )
    spent = r.handle(TurnRequest("t3", "k", "b"))
    assert spent.replies == ["This group has used its model budget for today."]
    assert r.handle(TurnRequest("t4", "k", "c")).replies == ["three"]
    again = r.handle(TurnRequest("t3", "k", "b"))
    assert (again.replies, again.duplicate) == (spent.replies, True)
    contexts_ = [e for e in _events(settings, "cli.chat-k") if e["t"] == "context"]
    assert [(c["context_id"], c["source"]) for c in contexts_] == [(1, "startup"), (2, "clear")]
    done = [e["turn_id"] for e in _events(settings, "cli.chat-k") if e["t"] == "done"]
    assert done == ["t1", "t2", "t3", "t4"]


class FakeHost:
    """A host link that answers standing.get and reply, and is recognisable."""

    def request(self, op: str, **fields: object) -> dict[str, object]:
        return {"ok": True, "instructions": "", "learned": ""}


def test_compaction_sends_the_flush_exactly_and_no_summary_of_nothing(
    settings: AgentSettings,
) -> None:
    from dataclasses import replace as copy

    from orchestrator.agent.providers.base import FLUSH, SUMMARY, Completion, ToolCall
    from orchestrator.agent.runner import FLUSH_PROMPT

    host = FakeHost()
    seen: list[tuple[object, object]] = []
    script = Scripted(
        Completion("one"),  # the first turn
        Completion("flushing", (ToolCall("f1", "append_daily", {"content": "a note"}),)),
        Completion(None),  # the flush ends
        Completion("two"),  # the second turn
    )
    real = script.provider.complete

    def complete(request, host_link=None):  # type: ignore[no-untyped-def]
        seen.append((request, host_link))
        return real(request, host_link)

    script.provider.complete = complete  # type: ignore[method-assign]
    r = Runner(copy(settings, context_budget_chars=6_000), provider=script.provider, hooks=[])
    r.handle(TurnRequest("t1", "k", "x" * 5_000), host)  # type: ignore[arg-type]
    result = r.handle(TurnRequest("t2", "k", "again"), host)  # type: ignore[arg-type]
    assert (result.fresh_context, result.compacted, result.replies) == ("compact", True, ["two"])
    assert all(h is host for _, h in seen)  # every model call goes through the turn's host
    first_flush, second_flush = script.requests[1:3]  # as they were when sent
    first_context = _events(settings, "cli.chat-k")[0]
    assert first_flush.purpose == FLUSH and first_flush.system == first_context["system"]  # type: ignore[attr-defined]
    assert first_flush.messages[-1] == {"role": "user", "content": FLUSH_PROMPT}  # type: ignore[attr-defined]
    assert [t.name for t in first_flush.tools] == ["read_file", "list_dir", "grep", "append_daily"]  # type: ignore[attr-defined]
    assert second_flush.messages[-2] == {  # type: ignore[attr-defined]
        "role": "assistant",
        "content": "flushing",
        "tool_calls": [{"id": "f1", "name": "append_daily", "arguments": {"content": "a note"}}],
    }
    # the last exchange is kept (cut to fit): nothing is older, so nothing is summarized
    assert not any(r.purpose == SUMMARY for r in script.requests)  # type: ignore[attr-defined]
    events = _events(settings, "cli.chat-k")
    contexts_ = [e for e in events if e["t"] == "context"]
    assert [(c["context_id"], c["source"]) for c in contexts_] == [(1, "startup"), (2, "compact")]
    assert not any(str(e.get("content", "")).startswith("[Summary") for e in events)


def _long_session(r: Runner, turns: int = 6) -> tuple[object, object]:
    for n in range(turns):
        r.handle(TurnRequest(f"t{n}", "s", f"message {n} " + "y" * 6_000))
    session = r._sessions["cli.chat-s"]
    return session, session.current_context()


def test_the_summary_request_asks_in_words_with_its_own_cap(settings: AgentSettings) -> None:
    from dataclasses import replace as copy

    from orchestrator.agent.providers.base import SUMMARY, Completion
    from orchestrator.agent.runner import SUMMARY_PROMPT
    from orchestrator.limits import SUMMARY_MAX_TOKENS

    script = Scripted(
        *[Completion(f"answer {n}") for n in range(5)],
        Completion(None),  # the early flush, past 60% of the budget (before the sixth turn)
        Completion("answer 5"),
        Completion(None),  # the flush of what came since
        Completion("Ann asked six times about the y file; nothing is open."),
    )
    r = Runner(copy(settings, context_budget_chars=50_000), provider=script.provider, hooks=[])
    session, context = _long_session(r)
    fresh = r.compact(session, context)  # type: ignore[arg-type]
    summary = script.requests[-1]
    assert summary.purpose == SUMMARY and summary.max_tokens == SUMMARY_MAX_TOKENS  # type: ignore[attr-defined]
    # it ends on an explicit request, never on an assistant message to be continued
    assert summary.messages[-1] == {"role": "user", "content": SUMMARY_PROMPT}  # type: ignore[attr-defined]
    assert summary.messages[0]["content"].startswith("message 0 ")  # type: ignore[attr-defined]
    assert fresh.summary == "Ann asked six times about the y file; nothing is open."  # type: ignore[attr-defined]
    assert fresh.system.endswith(fresh.summary + "\n")  # type: ignore[attr-defined]
    assert fresh.messages[0]["role"] == "user" and "Summary" not in fresh.messages[0]["content"]  # type: ignore[attr-defined]


def test_an_empty_then_runaway_summary_keeps_the_older_messages_cut_and_says_so(
    settings: AgentSettings,
) -> None:
    from dataclasses import replace as copy

    from orchestrator.agent.providers.base import STOP_LENGTH, Completion
    from orchestrator.limits import SUMMARY_FALLBACK_CHARS

    script = Scripted(
        *[Completion(f"answer {n}") for n in range(5)],
        Completion(None),  # the early flush
        Completion("answer 5"),
        Completion(None),  # the flush
        Completion("", stop_reason="end"),  # an empty summary: asked again
        Completion("azzal " * 400, stop_reason=STOP_LENGTH),  # runaway: given up
    )
    r = Runner(copy(settings, context_budget_chars=50_000), provider=script.provider, hooks=[])
    session, context = _long_session(r)
    fresh = r.compact(session, context)  # type: ignore[arg-type]
    first = fresh.summary
    assert first.startswith("user: message 0 ") or "yyy" in first
    assert len(first) <= SUMMARY_FALLBACK_CHARS + 100 and "azzal" not in first
    notes = [e for e in _events(settings, "cli.chat-s") if e["t"] == "note"]
    assert len(notes) == 1 and "empty or runaway twice" in str(notes[0]["text"])


def test_compaction_never_splits_a_tool_call_from_its_result(settings: AgentSettings) -> None:
    from dataclasses import replace as copy

    from orchestrator.agent.providers.base import Completion, ToolCall

    script = Scripted(
        Completion(None, (ToolCall("c1", "list_dir", {}),)),
        Completion(None, (ToolCall("c2", "list_dir", {}),)),
        Completion("done"),
        Completion(None),  # flush
        Completion("summary"),
    )
    r = Runner(copy(settings, context_budget_chars=50_000), provider=script.provider, hooks=[])
    r.handle(TurnRequest("t1", "k", "look"))
    session = r._sessions["cli.chat-k"]
    context = session.current_context()
    assert context is not None
    roles = [m["role"] for m in context.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    fresh = r.compact(session, context)
    # the last 4 would start at a tool result: the kept part starts at a user message
    # instead, here the turn's own, which fits: it is kept whole, with nothing to summarize
    assert [m["role"] for m in fresh.messages] == roles


def test_sessions_per_thread_and_one_lock_per_session(settings: AgentSettings) -> None:
    from dataclasses import replace as copy

    r = Runner(copy(settings, session_mode="per-thread"), hooks=[])
    a = r.handle(TurnRequest("t1", "c", "hello", thread="a"))
    b = r.handle(TurnRequest("t2", "c", "hello", thread="b"))
    assert (a.session, b.session) == ("cli.chat-c-thread-a", "cli.chat-c-thread-b")
    assert r.lock_for("x") is r.lock_for("x") and r.lock_for("x") is not r.lock_for("y")


def test_local_standing_files_are_read_safely(tmp_path: Path) -> None:
    import os as system

    from orchestrator.agent.runner import _local_text, _text
    from orchestrator.limits import LEARNED_READ_MAX_BYTES

    assert (_text("x"), _text(5), _text(None)) == ("x", "", "")
    plain = tmp_path / "plain.md"
    plain.write_bytes(b"caf\xe9 rules")
    assert _local_text(plain) == "caf\ufffd rules"
    assert _local_text(tmp_path / "missing.md") == ""
    (tmp_path / "link.md").symlink_to(plain)
    assert _local_text(tmp_path / "link.md") == ""  # never followed
    system.mkfifo(tmp_path / "fifo.md")
    assert _local_text(tmp_path / "fifo.md") == ""  # and never waited on
    (tmp_path / "folder.md").mkdir()
    assert _local_text(tmp_path / "folder.md") == ""
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * (LEARNED_READ_MAX_BYTES + 10))
    assert len(_local_text(big)) == LEARNED_READ_MAX_BYTES


class StandingHost:
    """A host link whose standing.get answers the given texts, or fails."""

    def __init__(self, instructions: str = "", learned: str = "", fail: str = "") -> None:
        self.answer = {"ok": True, "instructions": instructions, "learned": learned}
        self.fail = fail
        self.ops: list[str] = []

    def request(self, op: str, **fields: object) -> dict[str, object]:
        from orchestrator.agent.hostlink import HostRequestFailed

        self.ops.append(op)
        if self.fail:
            raise HostRequestFailed(self.fail)
        return self.answer


def test_the_default_provider_and_hooks_come_from_the_settings(
    settings: AgentSettings, tmp_path: Path
) -> None:
    from dataclasses import replace as copy

    hooks_file = tmp_path / "hooks.json"
    command = [sys.executable, "-c", "print('FROM-THE-HOOKS-FILE')"]
    hooks_file.write_text(json.dumps({"SessionStart": [{"command": command}]}))
    configured = copy(settings, hooks_file=hooks_file)
    assert Runner(configured).provider.model == settings.model
    assert len(Runner(configured).hooks) == 1
    assert Runner(configured, hooks=[]).hooks == []  # given hooks win over the file
    r = Runner(configured)
    r.handle(TurnRequest("t1", "k", "hi"))
    assert "FROM-THE-HOOKS-FILE" in str(contexts(settings, "cli.chat-k")[0]["system"])


@pytest.fixture
def far_zone() -> Iterator[None]:
    """A local zone 14 hours ahead of UTC (POSIX writes it XST-14): a local time shows."""
    import os
    import time

    before = os.environ.get("TZ")
    os.environ["TZ"] = "XST-14"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.mark.usefixtures("far_zone")
def test_the_system_prompt_names_its_folder_provider_model_source_and_time(
    settings: AgentSettings,
) -> None:
    r = Runner(settings, hooks=[])
    before = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    system = r.compose_system("clear", ["HOOK BLOCK"])
    after = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert f"files under {settings.agent_dir}:" in system
    line = next(ln for ln in system.splitlines() if ln.startswith("Provider: "))
    assert line in (
        f"Provider: {settings.provider} ({settings.model}). Context created: clear, {before}.",
        f"Provider: {settings.provider} ({settings.model}). Context created: clear, {after}.",
    )
    # what changes from one context to the next comes last: the rest is a prefix a
    # server's prompt cache can keep
    assert system.endswith(f"{line}\n") and "HOOK BLOCK\n\n## This context\n\n" in system


def test_every_fresh_context_takes_its_standing_text_from_the_host(
    settings: AgentSettings,
) -> None:
    from dataclasses import replace as copy

    from orchestrator.agent.providers.base import Completion

    host = StandingHost(instructions="Speak French.", learned="Say please.")
    script = Scripted(*[Completion("ok")] * 12)  # turns, flushes and summaries
    r = Runner(copy(settings, context_budget_chars=6_000), provider=script.provider, hooks=[])
    r.handle(TurnRequest("t1", "k", "x"), host)  # type: ignore[arg-type]  # startup
    r.handle(TurnRequest("t2", "k", "/clear"), host)  # type: ignore[arg-type]
    r.handle(TurnRequest("t3", "k", "y" * 5_000), host)  # type: ignore[arg-type]  # over: compaction
    made = contexts(settings, "cli.chat-k")
    assert [c["source"] for c in made] == ["startup", "clear", "compact"]
    assert host.ops == ["standing.get"] * 3
    for context in made:
        system = str(context["system"])
        assert "## Standing instructions from the operator\n\nSpeak French." in system
        assert "## Learned behaviors\n\nSay please." in system


def test_standing_text_over_its_budget_is_cut_with_a_notice_naming_it(
    settings: AgentSettings,
) -> None:
    from orchestrator.limits import STANDING_TEXT_BUDGET_CHARS
    from orchestrator.protocol import INSTRUCTIONS_FILE, LEARNED_FILE

    long = "w" * (STANDING_TEXT_BUDGET_CHARS + 5)
    r = Runner(settings, hooks=[])
    prepend, learned = r.standing(StandingHost(instructions=long, learned=long))  # type: ignore[arg-type]
    assert f"[truncated: {INSTRUCTIONS_FILE} is longer" in prepend
    assert f"[truncated: {LEARNED_FILE} is longer" in learned
    (settings.agent_dir / INSTRUCTIONS_FILE).write_text(long)
    (settings.agent_dir / LEARNED_FILE).write_text(long)
    prepend, learned = r.standing(None)
    assert f"[truncated: {INSTRUCTIONS_FILE} is longer" in prepend
    assert f"[truncated: {LEARNED_FILE} is longer" in learned


def test_a_host_that_cannot_give_the_standing_text_leaves_it_out(
    settings: AgentSettings, caplog: pytest.LogCaptureFixture
) -> None:
    r = Runner(settings, hooks=[])
    assert r.standing(StandingHost(fail="the host is stopping")) == ("", "")  # type: ignore[arg-type]
    assert caplog.messages == [
        "standing text unavailable; the context starts without it: the host is stopping"
    ]


def test_hooks_are_told_the_session_and_the_source(settings: AgentSettings) -> None:
    hook = CommandHook(
        "startup|clear",
        (
            sys.executable,
            "-c",
            "import json, sys; e = json.load(sys.stdin); "
            "print('SESSION=' + e['session_id'] + ' SOURCE=' + e['source'])",
        ),
    )
    r = Runner(settings, hooks=[hook])
    r.handle(TurnRequest("t1", "k", "hi"))
    r.handle(TurnRequest("t2", "k", "/clear"))
    systems = [str(c["system"]) for c in contexts(settings, "cli.chat-k")]
    assert "SESSION=cli.chat-k SOURCE=startup" in systems[0]
    assert "SESSION=cli.chat-k SOURCE=clear" in systems[1]
    assert "Context created: clear," in systems[1]


def test_the_session_mode_picks_the_session_of_a_turn(settings: AgentSettings) -> None:
    from dataclasses import replace as copy

    r = Runner(copy(settings, session_mode="per-chat"), hooks=[])
    assert r.handle(TurnRequest("t1", "c", "hi", thread="th")).session == "cli.chat-c"
    shared = Runner(copy(settings, session_mode="shared"), hooks=[])
    assert shared.handle(TurnRequest("t2", "a", "hi")).session == "shared"
    again = shared.handle(TurnRequest("t2", "b", "hi"))  # the same turn id, from anywhere
    assert (again.session, again.duplicate) == ("shared", True)


def test_a_spent_budget_is_logged_and_kept_in_the_session(
    settings: AgentSettings, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.agent.providers.base import BudgetExhausted

    script = Scripted(BudgetExhausted("No budget left today."))
    r = Runner(settings, provider=script.provider, hooks=[])
    result = r.handle(TurnRequest("t9", "k", "hi"))
    assert (result.session, result.replies) == ("cli.chat-k", ["No budget left today."])
    assert "turn t9: No budget left today." in caplog.messages


def test_sessions_do_not_wait_for_each_other(settings: AgentSettings) -> None:
    import threading

    from orchestrator.agent.providers.base import Completion, Provider

    entered, release = threading.Event(), threading.Event()

    class Slow(Provider):
        name = "slow"

        def complete(self, request, host=None):  # type: ignore[no-untyped-def]
            text = request.messages[-1]["content"]
            if text == "slow":
                entered.set()
                assert release.wait(30)
            return Completion("done " + text)

    r = Runner(settings, provider=Slow("m"), hooks=[])
    slow = threading.Thread(target=lambda: r.handle(TurnRequest("t1", "a", "slow")))
    slow.start()
    try:
        assert entered.wait(30)
        # another chat's turn runs while the first is still in its model call
        assert r.handle(TurnRequest("t2", "b", "fast")).replies == ["done fast"]
    finally:
        release.set()
        slow.join(30)


def test_a_context_exactly_at_its_budget_is_not_compacted(settings: AgentSettings) -> None:
    from dataclasses import replace as copy

    from orchestrator.agent.providers.base import Completion

    script = Scripted(Completion("one"), Completion(None), Completion("two"))  # None: flush
    probe = Runner(settings, provider=script.provider, hooks=[])
    probe.handle(TurnRequest("t1", "k", "hello " + "h" * 5_000))
    context = probe._sessions["cli.chat-k"].current_context()
    assert context is not None
    size = context.size_chars()
    # the incoming message counts: a budget that holds it too does not compact
    budget = size + len("again")
    r = Runner(copy(settings, context_budget_chars=budget), provider=script.provider, hooks=[])
    result = r.handle(TurnRequest("t2", "k", "again"))
    assert (result.compacted, result.replies) == (False, ["two"])


def test_compaction_keeps_from_the_first_user_message_after_a_tool_result(
    settings: AgentSettings,
) -> None:
    from dataclasses import replace as copy

    from orchestrator.agent.providers.base import BudgetExhausted, Completion, ToolCall

    script = Scripted(
        Completion(None, (ToolCall("c1", "list_dir", {}),)),
        Completion("listed"),
        BudgetExhausted("spent"),  # a turn that records only its user message
        Completion("third answer"),
        Completion(None),  # flush
        Completion("the summary of the turns before"),
    )
    r = Runner(copy(settings, context_budget_chars=50_000), provider=script.provider, hooks=[])
    for n, text in enumerate(("look", "second", "third")):
        r.handle(TurnRequest(f"t{n}", "k", text))
    session = r._sessions["cli.chat-k"]
    context = session.current_context()
    assert context is not None
    roles = [m["role"] for m in context.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "user", "assistant"]
    # the last 4 start at an assistant message; the kept part starts at the next message,
    # the first user message after it
    fresh = r.compact(session, context)
    assert [(m["role"], m["content"]) for m in fresh.messages] == [
        ("user", "second"),
        ("user", "third"),
        ("assistant", "third answer"),
    ]


def test_the_flush_and_the_turns_share_the_runners_file_locks(
    settings: AgentSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace as copy

    from orchestrator.agent import runner as runner_module
    from orchestrator.agent.providers.base import Completion

    made: list[object] = []

    class Recorded(Toolbox):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            made.append(kwargs.get("locks"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(runner_module, "Toolbox", Recorded)
    script = Scripted(Completion("one"), Completion(None), Completion("two"))
    r = Runner(copy(settings, context_budget_chars=6_000), provider=script.provider, hooks=[])
    r.handle(TurnRequest("t1", "k", "x" * 5_000))
    assert r.handle(TurnRequest("t2", "k", "y")).compacted  # a turn, a flush, then a turn
    assert len(made) == 3 and all(locks is r.file_locks for locks in made)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("memory/raw\udcff\udcfe.md", "the path is not valid Unicode"),
        ("files/a\nb.txt", "the path contains a line break"),
        ("files/\x1b[2Jx", "the path contains the control character U+001B"),
    ],
)
def test_file_tools_refuse_names_that_are_not_utf8_or_hold_controls(
    settings: AgentSettings, path: str, why: str
) -> None:
    tools = Toolbox(settings.agent_dir)
    for name, args in (
        ("write_file", {"path": path, "content": "x"}),
        ("append_file", {"path": path, "content": "x"}),
        ("read_file", {"path": path}),
    ):
        with pytest.raises(ToolError, match=re.escape(why)):
            tools.call(name, args)
    assert sorted(p.name for p in settings.memory_dir.iterdir()) == ["index.md", "system"]


def test_names_the_container_made_are_listed_escaped(settings: AgentSettings) -> None:
    tools = Toolbox(settings.agent_dir)
    (settings.memory_dir / "raw\udcff.md").write_text("tom the cat\n")
    listed = tools.call("list_dir", {"path": "memory"})
    assert "raw\\xff.md" in listed.splitlines()
    assert "memory/raw\\xff.md:1: tom the cat" in tools.call("grep", {"pattern": "tom"})
    listed.encode("utf-8")  # valid UTF-8: it can go into a frame


class Discovered:
    """A tool source whose tools are known only when a turn starts (as an MCP server's
    are): each turn asks it again."""

    name = "discovered"

    def __init__(self) -> None:
        self.names: list[str] = []
        self.calls: list[tuple[str, dict[str, object]]] = []

    def tools(self, box: Toolbox) -> list[object]:
        from orchestrator.agent.tools import FunctionTool, ToolSpec, schema

        def make(name: str) -> object:
            def call(box: Toolbox, **args: object) -> str:
                self.calls.append((name, args))
                return f"{name} says {args.get('word')}"

            spec = ToolSpec(name, f"the {name} tool", schema(["word"], word="string"))
            return FunctionTool(spec, call)

        return [make(name) for name in self.names]


def test_a_tool_source_found_at_run_time_reaches_the_models_tools_and_its_calls(
    settings: AgentSettings,
) -> None:
    from orchestrator.agent.providers.base import Completion, ToolCall
    from orchestrator.agent.tools import BUILT_IN

    source = Discovered()
    script = Scripted(
        Completion("nothing yet"),
        Completion(None, (ToolCall("c1", "weather", {"word": "rain"}),)),
        Completion("it rains"),
    )
    r = Runner(settings, provider=script.provider, hooks=[], tool_sources=(*BUILT_IN, source))
    r.handle(TurnRequest("t1", "k", "hello"))
    source.names = ["weather"]  # the server now offers a tool
    assert r.handle(TurnRequest("t2", "k", "weather?")).replies == ["it rains"]
    first, second = (
        [t.name for t in request.tools]  # type: ignore[attr-defined]
        for request in script.requests[:2]
    )
    assert "weather" not in first and "weather" in second
    assert first[:3] == ["read_file", "write_file", "edit_file"]  # built-in ones first
    assert source.calls == [("weather", {"word": "rain"})]
    tool = next(e for e in _events(settings, "cli.chat-k") if e.get("role") == "tool")
    assert tool["content"] == "weather says rain"


def test_a_turn_is_offered_only_the_tools_the_host_granted_it(settings: AgentSettings) -> None:
    from orchestrator.agent.providers.base import Completion, ToolCall
    from orchestrator.agent.tools import BUILT_IN

    source = Discovered()
    source.names = ["weather"]
    script = Scripted(
        Completion(None, (ToolCall("c1", "weather", {"word": "x"}),)),
        Completion(None, (ToolCall("c2", "schedule_task", {"text": "x", "at": "1h"}),)),
        Completion("done"),
    )
    r = Runner(settings, provider=script.provider, hooks=[], tool_sources=(*BUILT_IN, source))
    granted = ("files", "messages", "memory", "list_tasks", "cancel_task")
    r.handle(TurnRequest("t1", "k", "go", tools=granted))
    offered = [t.name for t in script.requests[0].tools]  # type: ignore[attr-defined]
    assert "weather" not in offered and "schedule_task" not in offered
    assert {"read_file", "send_message", "memory_search", "list_tasks"} <= set(offered)
    results = [e["content"] for e in _events(settings, "cli.chat-k") if e.get("role") == "tool"]
    assert results == [
        "ERROR: weather is not granted on this turn",
        "ERROR: schedule_task is not granted on this turn",
    ]
    assert source.calls == []


def test_a_turns_tools_and_said_are_checked_on_the_wire() -> None:
    from orchestrator.protocol import BadFrame

    turn = {"turn_id": "t", "chat": "c", "text": "hi"}
    assert TurnRequest.from_wire({**turn, "tools": ["files", "mcp.weather"]}).tools == (
        "files",
        "mcp.weather",
    )
    assert TurnRequest.from_wire(turn).tools is None
    for bad in ("files", ["a b"], [5], ["x"] * 257):
        with pytest.raises(BadFrame, match=r"turn\.tools must be a list"):
            TurnRequest.from_wire({**turn, "tools": bad})
    said = TurnRequest.from_wire({**turn, "said": "@bot hi"})
    assert (said.text, said.said) == ("hi", "@bot hi")


def test_a_turns_transcript_events_are_synced_once(settings: AgentSettings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each event of a turn is written as it happens, and the file is synced once, at the
    turn's end, before the runner answers (one fsync a turn, not one an event)."""
    import os

    r = Runner(settings)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    r.handle(TurnRequest("t1", "c", "hello"))  # a fresh context, the message, the answer
    events = r._sessions["cli.chat-c"].events()
    assert [e["t"] for e in events][-1] == "done" and len(events) >= 3
    assert len(synced) == 1
    synced.clear()
    r.handle(TurnRequest("t2", "c", "again"))
    assert len(synced) == 1
