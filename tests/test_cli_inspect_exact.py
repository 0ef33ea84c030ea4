"""Exact lines of ``orchestrator transcript`` (cli/inspect.py): each kind of transcript
event described, the event's time read only when a clock can show it, and the channels
of a chat looked up in the queue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.cli import CliContext
from orchestrator.cli.inspect import (
    LATEST_SHOWN_TS,
    SHOWN_COMMAND_CHARS,
    SHOWN_OUTPUT_LINES,
    _channels_of,
    _describe,
    _when,
)
from orchestrator.home import Home

TS = 86400 * 3 + 3600 * 4 + 60 * 5 + 6  # 01-04 04:05:06 UTC
STAMP = "01-04 04:05:06"


def test_when_is_the_events_ts_only_when_a_clock_can_show_it() -> None:
    assert _when({"ts": 12.5}) == 12.5
    assert isinstance(_when({"ts": 7}), float)
    assert _when({"ts": 0}) == 0.0
    assert _when({"ts": 0.5}) == 0.5
    assert _when({"ts": LATEST_SHOWN_TS - 1}) == float(LATEST_SHOWN_TS - 1)
    assert _when({"ts": LATEST_SHOWN_TS}) == 0.0
    assert _when({"ts": -1}) == 0.0
    assert _when({"ts": True}) == 0.0
    assert _when({"ts": "12"}) == 0.0
    assert _when({}) == 0.0
    assert LATEST_SHOWN_TS == 2**35


def test_the_stamp_is_the_events_time_and_the_key_only_when_several() -> None:
    event = {"ts": TS, "role": "user", "sender": "bob", "trust": "member", "content": "hi"}
    assert _describe("k", event, several=False) == f"{STAMP} bob (member): hi"
    assert _describe("a\nb", event, several=True) == f"{STAMP} [a\\nb] bob (member): hi"


def test_context_flush_and_done_events() -> None:
    context = {"ts": TS, "t": "context", "source": "new\nchat", "model": "m1"}
    assert _describe("k", context, False) == f"{STAMP} --- fresh context (new\\nchat, m1) ---"
    flush = {"ts": TS, "t": "flush", "appended_chars": 42}
    assert (
        _describe("k", flush, False) == f"{STAMP} (memory flush: 42 characters to the daily note)"
    )
    done = {"ts": TS, "t": "done", "turn_id": "0123456789abcdef"}
    assert _describe("k", done, False) == f"{STAMP} (turn 01234567 done)"


def test_a_user_line_shows_what_was_said_and_defaults() -> None:
    said = {"ts": TS, "role": "user", "sender": "bob", "trust": "guest",
            "said": "@bot hi", "content": "hi"}  # fmt: skip
    assert _describe("k", said, False) == f"{STAMP} bob (guest): @bot hi"
    not_text = {"ts": TS, "role": "user", "said": 5, "content": "x\ny"}
    assert _describe("k", not_text, False) == f"{STAMP} ? (?): x\\ny"
    empty_sender = {"ts": TS, "role": "user", "sender": "", "trust": "member", "content": "c"}
    assert _describe("k", empty_sender, False) == f"{STAMP} ? (member): c"


def test_an_assistant_line_lists_tools_and_shell_commands_in_full() -> None:
    long = "x" * (SHOWN_COMMAND_CHARS + 5)
    event = {
        "ts": TS,
        "role": "assistant",
        "content": "on it",
        "tool_calls": [
            {"name": "search", "arguments": {"q": "a" * 100}},
            "not a call",
            {"name": "shell", "arguments": {"command": "ls\n-l"}},
            {"name": "shell", "arguments": {"command": long}},
            {"name": "shell", "arguments": "not a dict"},
            {"name": "shell", "arguments": {}},
        ],
    }
    args = json.dumps({"q": "a" * 100})[:60]
    assert _describe("k", event, False) == (
        f"{STAMP} assistant: on it  -> search({args})"
        f"\n{STAMP}   $ ls\\n-l"
        f"\n{STAMP}   $ {'x' * SHOWN_COMMAND_CHARS}"
        f"\n{STAMP}   $ "
        f"\n{STAMP}   $ "
    )
    assert SHOWN_COMMAND_CHARS == 2_000


def test_an_assistant_line_with_no_calls_and_no_text() -> None:
    assert _describe("k", {"ts": TS, "role": "assistant", "content": None}, False) == (
        f"{STAMP} assistant: "
    )
    listed_not_a_list = {"ts": TS, "role": "assistant", "content": "t", "tool_calls": "x"}
    assert _describe("k", listed_not_a_list, False) == f"{STAMP} assistant: t"
    calls = [{"name": "a", "arguments": 1}, {"name": "b", "arguments": None}]
    two = {"ts": TS, "role": "assistant", "content": "t", "tool_calls": calls}
    assert _describe("k", two, False) == f"{STAMP} assistant: t  -> a(1), b(null)"


def test_a_shells_output_is_cut_at_the_shown_lines() -> None:
    lines = [f"l{i}" for i in range(SHOWN_OUTPUT_LINES + 3)]
    event = {"ts": TS, "role": "tool", "name": "shell", "content": "\n".join(lines)}
    shown = _describe("k", event, False).split("\n")
    assert shown[0] == f"{STAMP}     l0"
    assert shown[SHOWN_OUTPUT_LINES - 1] == f"{STAMP}     l{SHOWN_OUTPUT_LINES - 1}"
    assert shown[-1] == f"{STAMP}     [... 3 more lines]"
    assert len(shown) == SHOWN_OUTPUT_LINES + 1
    exact = {
        "ts": TS,
        "role": "tool",
        "name": "shell",
        "content": "\n".join(lines[:SHOWN_OUTPUT_LINES]),
    }
    assert len(_describe("k", exact, False).split("\n")) == SHOWN_OUTPUT_LINES
    assert SHOWN_OUTPUT_LINES == 40


def test_another_tools_result_and_an_unknown_event() -> None:
    tool = {"ts": TS, "role": "tool", "name": "se\narch", "content": "r" * 200}
    assert _describe("k", tool, False) == f"{STAMP}   se\\narch: {'r' * 120}"
    other: dict[str, Any] = {"ts": TS, "role": "system", "content": "z" * 200}
    assert _describe("k", other, False) == f"{STAMP} {json.dumps(other)[:120]}"


def test_the_channels_of_a_chat_are_cli_when_the_queue_has_none(tmp_path: Path) -> None:
    from orchestrator.store.messages import new_message, open_queue

    obj = CliContext(home=Home(tmp_path), debug=False)
    assert _channels_of(obj, "fam", "c1") == ["cli"]
    queue = open_queue(Home(tmp_path))
    try:
        queue.put(
            new_message(
                group="fam", session="s", chat="c1", thread=None, sender="bob",
                trust="member", text="hi", channel="telegram",
            )
        )  # fmt: skip
    finally:
        queue.close()
    assert _channels_of(obj, "fam", "c1") == ["telegram"]
    assert _channels_of(obj, "fam", "other") == ["cli"]
