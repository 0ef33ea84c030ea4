"""The runner's parts, exactly at their edges: the context budget's checks, the turn's
own deadline, the system text without its summary, a message cut to its room, images
turned into lines at compaction, messages as plain text; and, with a scripted provider,
the compaction summary and what a compaction keeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent import runner
from orchestrator.agent.runner import (
    SUMMARY_HEADER,
    ContextBudget,
    ContextTooSmall,
    TurnClock,
    _base_system,
    _cut,
    _plain,
    image_lines,
)
from orchestrator.agent.session import Context


def context(size: int = 0, *, base: int = 0, messages: list[Any] | None = None) -> Context:
    """A context of ``size`` characters (all of them its system text)."""
    made = Context(1, "startup", "p", "m", "s" * size, base_chars=base)
    for message in messages or []:
        made.add(message)
    return made


def test_the_budget_in_characters() -> None:
    assert ContextBudget(1000).chars() == 3000  # three characters a token
    assert ContextBudget(1000, tools_chars=500).chars() == 2500  # the tools' specs aside
    assert ContextBudget(100).chars() == 1000  # never under a thousand
    assert ContextBudget(1000, max_chars=2000).chars() == 2000  # the group's cap


def test_a_budget_that_holds_its_fresh_context_and_the_margin_exactly_is_enough() -> None:
    budget = ContextBudget(1100, tools_chars=300)  # 3,000 characters beside the tools
    budget.check_room(context(base=2000))  # 2,000 of memory and 1,000 to work in
    with pytest.raises(ContextTooSmall) as small:
        budget.check_room(context(base=2001))
    assert str(small.value) == (
        "this group's context budget (3,000 characters beside the tools) cannot hold a "
        "fresh context (2,001 characters of memory and instructions) and 1,000 to work "
        "in; set group.yaml context_budget to a larger share (or a model with a larger "
        "window), so that at least 3,301 characters fit"
    )


def test_the_early_flush_comes_past_three_fifths_of_the_budget() -> None:
    capped = ContextBudget(10_000, max_chars=1000)
    assert capped.soft_exceeded(context(600)) is False  # at 60% of the cap: not past it
    assert capped.soft_exceeded(context(601)) is True
    # in tokens, the tools' specs counted: 60 of 100 tokens is not past it, 61 is
    budget = ContextBudget(100, tools_chars=30)
    assert budget.soft_exceeded(context(150)) is False  # (150 + 30) / 3 = 60
    assert budget.soft_exceeded(context(151)) is True  # 61


def test_compacting_is_worth_it_from_a_quarter_of_the_budget_of_new_messages() -> None:
    budget = ContextBudget(1000)  # 3,000 characters: a quarter is 750
    old = {"role": "user", "content": "o" * 5000}  # carried over: not new
    new = {"role": "user", "content": "n" * 100}
    size = len(json.dumps(new, ensure_ascii=False))
    carried = context(messages=[old, new])
    carried.kept = 1
    assert budget.worth_compacting(carried, 750 - size) is True
    assert budget.worth_compacting(carried, 749 - size) is False
    exact = {"role": "user", "content": "n" * (100 + 749 - size)}  # 749 with no extra
    assert budget.worth_compacting(context(messages=[exact])) is False
    assert budget.worth_compacting(context(messages=[exact]), 1) is True


def test_the_budget_is_exceeded_past_its_cap_or_its_tokens() -> None:
    capped = ContextBudget(10_000, max_chars=1000)
    assert capped.exceeded(context(1000)) is False  # at the cap
    assert capped.exceeded(context(990), 10) is False
    assert capped.exceeded(context(990), 11) is True
    budget = ContextBudget(100, tools_chars=30)
    assert budget.exceeded(context(270)) is False  # (270 + 30) / 3 = 100 tokens: at it
    assert budget.exceeded(context(271)) is True  # 101
    assert budget.exceeded(context(270), 2) is False  # under a token more
    assert budget.exceeded(context(270), 3) is True  # a token more


def test_the_turns_own_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner.time, "monotonic", lambda: 100.0)
    assert TurnClock.of(None) == TurnClock(None) and not TurnClock(None).passed()
    assert TurnClock.of(10).at == 109.0  # a tenth of a short turn kept for the answer
    assert TurnClock.of(50).at == 148.0  # at most two seconds
    assert TurnClock(100.0).passed() is True  # at it
    assert TurnClock(100.5).passed() is False


def test_the_system_text_without_its_summary() -> None:
    made = context()
    made.system = "MEMORY AND INSTRUCTIONS" + SUMMARY_HEADER + "what was said" + "\n"
    made.summary = "what was said"
    assert _base_system(made) == "MEMORY AND INSTRUCTIONS"
    made.summary = "something else"  # not the one at its end: left whole
    assert _base_system(made) == made.system
    made.summary = ""
    assert _base_system(made) == made.system


def test_a_message_is_cut_to_its_room_and_never_under_two_hundred() -> None:
    message = {"role": "tool", "content": "x" * 200, "id": "t1"}
    assert _cut(message, 100) is message  # 200 fits the least room
    long = {**message, "content": "x" * 201}
    assert _cut(long, 100) == {**message, "content": "x" * 200 + "\n[cut: 1 more characters]"}
    assert _cut({**message, "content": "y" * 400}, 300) == {
        **message,
        "content": "y" * 300 + "\n[cut: 100 more characters]",
    }
    listed = {"role": "user", "content": [{"type": "text", "text": "z" * 500}]}
    assert _cut(listed, 10) is listed


def test_images_become_lines_naming_each_at_compaction(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.png").write_bytes(b"12345")
    shown = "[image files/a.png, 5 B: shown earlier, not kept in this context]"
    gone = "[image files/b.png, no longer there: shown earlier, not kept in this context]"
    said = {"role": "user", "content": "look", "images": ["files/a.png", "files/b.png"]}
    assert image_lines(said, tmp_path) == {"role": "user", "content": f"look\n{shown}\n{gone}"}
    for content in (None, "", [{"type": "text", "text": "look"}]):
        bare = {"role": "user", "content": content, "images": ["files/a.png"]}
        assert image_lines(bare, tmp_path) == {"role": "user", "content": shown}
    plain = {"role": "user", "content": "hi"}
    assert image_lines(plain, tmp_path) is plain


def test_messages_as_plain_text() -> None:
    messages = [
        {"role": "user", "content": "  hi there "},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "content": "   "},
        {"role": "assistant", "content": "yes"},
    ]
    assert _plain(messages) == "user: hi there\nassistant: yes"
    assert _plain([]) == ""


def _scripted(tmp_path: Path, *answers: object) -> tuple[Any, Any, Any]:
    """A runner whose provider answers ``answers`` in turn, its script, and a session."""
    from orchestrator.agent.runner import Runner
    from orchestrator.agent.session import Session
    from orchestrator.agent.settings import AgentSettings
    from tests.test_runner import Scripted

    agent = tmp_path / "agent"
    (agent / "sessions").mkdir(parents=True)
    settings = AgentSettings(agent_dir=agent, runtime_dir=tmp_path / "run")
    script = Scripted(*answers)
    made = Runner(settings, provider=script.provider, hooks=[], tool_sources=())
    return made, script, Session(settings.sessions_dir, "cli.chat-c1")


OLDER = [
    {"role": "user", "content": "Tea or coffee?"},
    {"role": "assistant", "content": "Tea, please."},
]


def test_a_summary_builds_on_the_last_and_is_kept_from_twenty_characters(
    tmp_path: Path,
) -> None:
    from orchestrator.agent.providers.base import SUMMARY, Completion
    from orchestrator.agent.runner import SUMMARY_PREVIOUS, SUMMARY_PROMPT
    from orchestrator.limits import SUMMARY_MAX_TOKENS

    made, script, session = _scripted(tmp_path, Completion(" " + "s" * 20 + " "))
    before = context()
    before.system = "MEMORY" + SUMMARY_HEADER + "they met on Monday" + "\n"
    before.summary = "they met on Monday"
    assert made._summary(session, before, OLDER, None) == "s" * 20  # twenty: kept
    [request] = script.requests
    assert request.system == "MEMORY"  # the memory, not the summary it replaces
    assert request.messages == [
        *OLDER,
        {
            "role": "user",
            "content": SUMMARY_PROMPT + SUMMARY_PREVIOUS.format(summary="they met on Monday"),
        },
    ]
    assert (request.purpose, request.max_tokens) == (SUMMARY, SUMMARY_MAX_TOKENS)


def test_a_summary_empty_or_runaway_twice_keeps_the_older_messages_cut_short(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.agent.providers.base import STOP_LENGTH, Completion

    made, script, session = _scripted(
        tmp_path, Completion("s" * 19), Completion("x" * 50, stop_reason=STOP_LENGTH)
    )
    before = context()
    before.summary = "they met on Monday"
    with caplog.at_level("WARNING", logger="orchestrator.agent.runner"):
        kept = made._summary(session, before, OLDER, None)
    assert kept == "they met on Monday\n\nuser: Tea or coffee?\nassistant: Tea, please."
    assert len(script.requests) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "compaction summary 1 was 19 characters; asking again",
        "compaction summary 2 was cut at its length cap; keeping the older messages cut short",
    ]
    assert [e for e in session.events() if e["t"] == "note"][-1]["text"] == (
        "no summary (it came back empty or runaway twice, or the older messages are over "
        "the model's window): they are kept cut to their last 4000 characters instead"
    )
    # with no summary before it, what is kept is the older messages' last characters
    # alone, as cut (a space the cut begins with stays)
    caplog.clear()
    made, script, session = _scripted(tmp_path / "2", Completion(None), Completion(""))
    long = [{"role": "user", "content": "a" * 10 + " " + "b" * 3999}]
    with caplog.at_level("WARNING", logger="orchestrator.agent.runner"):
        assert made._summary(session, context(), long, None) == " " + "b" * 3999
    assert script.requests[0].messages[-1]["content"] == runner.SUMMARY_PROMPT
    assert [r.getMessage() for r in caplog.records] == [
        "compaction summary 1 was 0 characters; asking again",
        "compaction summary 2 was 0 characters; keeping the older messages cut short",
    ]


def test_older_messages_over_the_window_are_not_asked_about_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.agent.providers.base import ContextOverflow

    made, script, session = _scripted(tmp_path, ContextOverflow("too long"))
    with caplog.at_level("WARNING", logger="orchestrator.agent.runner"):
        kept = made._summary(session, context(), OLDER, None)
    assert kept == "user: Tea or coffee?\nassistant: Tea, please."
    assert len(script.requests) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "compaction summary: the older messages are over the model's window"
    ]


def _compacted(
    tmp_path: Path, turns: list[tuple[str, dict[str, Any]]], summary: str
) -> tuple[Context, Any]:
    """A context of ``turns`` (turn id, message) compacted at a 3,000-character budget
    (750 to keep), the provider flushing nothing and answering ``summary``; the fresh
    context and the provider's script."""
    from orchestrator.agent.providers.base import Completion

    made, script, session = _scripted(tmp_path, Completion(None), Completion(summary))
    live = made.new_context(session, "startup", None)
    for turn_id, message in turns:
        made._record(session, live, turn_id, message)
    return made.compact(session, live, None, ContextBudget(1000)), script


def test_a_compaction_keeps_the_newest_messages_with_their_turns_and_cuts_the_summary(
    tmp_path: Path,
) -> None:
    turns = [
        (f"t{n}", {"role": role, "content": f"{word} {n}"})
        for n in (1, 2, 3)
        for role, word in (("user", "question"), ("assistant", "answer"))
    ]
    fresh, script = _compacted(tmp_path, turns, "S" * 1000)
    assert [m["content"] for m in fresh.messages] == [
        "question 2", "answer 2", "question 3", "answer 3",
    ]  # fmt: skip
    assert fresh.turn_ids == ["t2", "t2", "t3", "t3"]
    assert fresh.summary == "S" * 450  # FRESH_EXTRA_SHARE of the budget
    assert (fresh.source, fresh.flushed, fresh.kept) == ("compact", 4, 4)
    summarized = script.requests[-1].messages[:-1]
    assert [m["content"] for m in summarized] == ["question 1", "answer 1"]


def _kept(tmp_path: Path, messages: list[dict[str, Any]]) -> tuple[list[Any], int]:
    """What a compaction keeps of ``messages`` verbatim, and how many summaries it
    asked for."""
    from orchestrator.agent.providers.base import SUMMARY

    turns = [(f"t{n}", message) for n, message in enumerate(messages)]
    fresh, script = _compacted(tmp_path, turns, "a summary of the older ones")
    summaries = sum(1 for r in script.requests if r.purpose == SUMMARY)
    return [m["content"] for m in fresh.messages], summaries


def test_a_compaction_keeps_at_most_four_messages_within_a_quarter_of_the_budget(
    tmp_path: Path,
) -> None:
    said = [{"role": "user", "content": f"m{n}"} for n in range(6)]
    assert _kept(tmp_path / "a", said) == (["m2", "m3", "m4", "m5"], 1)  # four at most
    assert _kept(tmp_path / "b", said[:3]) == (["m0", "m1", "m2"], 0)  # all: no summary
    # the last two fill the 750 characters exactly: both kept, not the one before them
    size = len(json.dumps({"role": "user", "content": ""}, ensure_ascii=False))
    exact = [
        {"role": "user", "content": "older"},
        {"role": "user", "content": "b" * (400 - size)},
        {"role": "user", "content": "c" * (350 - size)},
    ]
    kept, _ = _kept(tmp_path / "c", exact)
    assert kept == [exact[1]["content"], exact[2]["content"]]
    # nothing said by a person: nothing can start what is kept
    replies = [{"role": "assistant", "content": f"r{n}"} for n in range(3)]
    assert _kept(tmp_path / "d", replies) == ([], 1)
