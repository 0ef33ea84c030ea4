"""The agent's shell, memory, sessions search and skill tools word for word: their exact
refusals and answers, the bounds at their edges, and what each asks of the host."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import signal
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.session import TRANSCRIPT_VERSION, header_event
from orchestrator.agent.tools import Toolbox, ToolError
from orchestrator.agent.tools import memory as mem
from orchestrator.agent.tools import sessions as ses
from orchestrator.agent.tools import shell as sh
from orchestrator.agent.tools import skills as sk
from orchestrator.limits import (
    EGRESS_PORT,
    MAX_LEARNED_MAX_CHARS,
    SHELL_FILE_MAX_BYTES,
    SHELL_OUTPUT_HEAD_BYTES,
    SHELL_OUTPUT_TAIL_BYTES,
    TOOL_READ_MAX_CHARS,
)
from tests.clocks import local_zone
from tests.fakehost import FakeHost


def _box(agent: Path, host: FakeHost | None = None, **extra: Any) -> Toolbox:
    return Toolbox(agent, sources=(), host=host, **extra)  # type: ignore[arg-type]


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    root = tmp_path / "agent"
    for name in ("memory", "files", "sessions"):
        (root / name).mkdir(parents=True)
    return root


# memory: the learned store


def test_the_memory_tools_are_the_memory_source_in_turns_only(agent: Path) -> None:
    assert mem.MEMORY.name == "memory"
    names = [t.spec.name for t in mem.MEMORY.tools(_box(agent))]
    assert names == ["memory_list", "memory_read", "memory_write", "memory_search", "memory_get"]
    assert all(t.modes == frozenset({"turn"}) for t in mem.MEMORY.members)
    box = Toolbox(agent, sources=(mem.MEMORY,))
    assert box.call("memory_list", {}).startswith("learned: the group's learned behaviors")


def test_memory_list_names_the_learned_store(agent: Path) -> None:
    assert mem.memory_list(_box(agent)) == (
        "learned: the group's learned behaviors, standing rules its creators approved (in "
        "every fresh context). memory_read reads them; memory_write replaces them whole, "
        "granted only to a turn from a creator."
    )


@pytest.mark.parametrize("label", ["Learned", "notes", "", None])
def test_an_unknown_label_is_refused_by_read_and_write(agent: Path, label: object) -> None:
    host = FakeHost()
    want = f"unknown memory label {label!r}; memory_list shows the labels"
    with pytest.raises(ToolError) as read:
        mem.memory_read(_box(agent, host), label)  # type: ignore[arg-type]
    assert str(read.value) == want
    with pytest.raises(ToolError) as write:
        mem.memory_write(_box(agent, host), label, "x")  # type: ignore[arg-type]
    assert str(write.value) == want
    assert host.requests == []


def test_memory_read_asks_the_host_and_shows_an_empty_store(agent: Path) -> None:
    with pytest.raises(ToolError) as no_host:
        mem.memory_read(_box(agent), "learned")
    assert str(no_host.value) == "learned behaviors are kept by the orchestrator; no host here"
    host = FakeHost({"content": "- be brief"}, {"content": ""}, {"content": 7}, {})
    for want in ["- be brief"] + ["(empty: no learned behaviors yet)"] * 3:
        assert mem.memory_read(_box(agent, host), "learned") == want
    assert host.requests == [("learned.read", {})] * 4
    failing = FakeHost(HostRequestFailed("the host is busy", {"error": "x"}))
    with pytest.raises(ToolError) as failed:
        mem.memory_read(_box(agent, failing), "learned")
    assert str(failed.value) == "the host is busy"
    assert failed.value.__cause__ is None and failed.value.__suppress_context__


def test_memory_write_checks_its_content_before_the_host(agent: Path) -> None:
    host = FakeHost()
    with pytest.raises(ToolError) as not_text:
        mem.memory_write(_box(agent, host), "learned", 5)  # type: ignore[arg-type]
    assert str(not_text.value) == "content must be text"
    over = "x" * (MAX_LEARNED_MAX_CHARS + 1)
    assert mem.memory_write(_box(agent, host), "learned", over) == (
        "NOT_PERSISTED: the content is over 100,000 characters"
    )
    assert host.requests == []
    assert mem.memory_write(_box(agent), "learned", "x") == (
        "NOT_PERSISTED: learned behaviors are written only by the orchestrator host, and "
        "this turn has no link to it"
    )
    # exactly at the limit it goes to the host
    full = "y" * MAX_LEARNED_MAX_CHARS
    host = FakeHost({"result": "PERSISTED: saved"})
    assert mem.memory_write(_box(agent, host), "learned", full) == "PERSISTED: saved"
    assert host.requests == [("learned.write", {"content": full})]


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        ({"result": "PERSISTED: 2 rules"}, "PERSISTED: 2 rules"),
        ({"result": "NOT_PERSISTED: not a creator"}, "NOT_PERSISTED: not a creator"),
        ({"result": "PERSISTENCE_UNKNOWN: timed out"}, "PERSISTENCE_UNKNOWN: timed out"),
        ({"result": "PERSISTED"}, "PERSISTENCE_UNKNOWN: the host's answer was not understood"),
        (
            {"result": "saved: PERSISTED:"},
            "PERSISTENCE_UNKNOWN: the host's answer was not understood",
        ),
        ({"result": ["PERSISTED:"]}, "PERSISTENCE_UNKNOWN: the host's answer was not understood"),
        ({}, "PERSISTENCE_UNKNOWN: the host's answer was not understood"),
    ],
)
def test_memory_write_passes_on_only_an_answer_it_understands(
    agent: Path, answer: dict[str, Any], want: str
) -> None:
    assert mem.memory_write(_box(agent, FakeHost(answer)), "learned", "rules") == want


def test_memory_write_tells_a_refusal_from_a_lost_answer(agent: Path) -> None:
    refused = FakeHost(HostRequestFailed("only a creator may", {"error": "refused"}))
    assert mem.memory_write(_box(agent, refused), "learned", "r") == (
        "NOT_PERSISTED: only a creator may"
    )
    lost = FakeHost(HostRequestFailed("the connection broke"))
    assert mem.memory_write(_box(agent, lost), "learned", "r") == (
        "PERSISTENCE_UNKNOWN: the request reached the host, but its answer did not: "
        "the connection broke"
    )


# memory: search and get


@pytest.mark.parametrize("query", ["", "  \n", None, 3])
def test_memory_search_needs_a_query(agent: Path, query: object) -> None:
    with pytest.raises(ToolError) as refused:
        mem.memory_search(_box(agent, FakeHost()), query)  # type: ignore[arg-type]
    assert str(refused.value) == "query must be a non-empty string"


@pytest.mark.parametrize("count", [0, -1, True, False, 2.0, "3", None])
def test_memory_search_needs_a_whole_count_from_one(agent: Path, count: object) -> None:
    with pytest.raises(ToolError) as refused:
        mem.memory_search(_box(agent, FakeHost()), "tea", count)  # type: ignore[arg-type]
    assert str(refused.value) == "max_results must be a whole number from 1"


def test_memory_search_asks_the_host_and_clears_the_changed_mark(agent: Path) -> None:
    with pytest.raises(ToolError) as no_host:
        mem.memory_search(_box(agent), "tea")
    assert str(no_host.value) == "memory search is answered by the orchestrator; use grep here"
    hits = [
        {"path": "memory/a.md", "start_line": 3, "end_line": 5, "score": 1.5, "snippet": "**tea**"},
        "not a hit",
        {"path": "memory/b.md"},
    ]
    host = FakeHost({"results": hits}, {"results": []})
    box = _box(agent, host, memory_changed=True)
    assert mem.memory_search(box, "tea") == (
        "memory/a.md:3-5 (score 1.5)\n**tea**\n\nmemory/b.md:None-None (score None)\nNone"
    )
    assert box.memory_changed is False
    assert mem.memory_search(box, "tea", 1) == "(no results)"
    assert host.requests == [
        ("memory.search", {"query": "tea", "max_results": 6, "changed": True}),
        ("memory.search", {"query": "tea", "max_results": 1, "changed": False}),
    ]


@pytest.mark.parametrize("results", [None, "memory/a.md", {"path": "memory/a.md"}])
def test_memory_search_without_a_list_has_no_results(agent: Path, results: object) -> None:
    assert mem.memory_search(_box(agent, FakeHost({"results": results})), "x") == "(no results)"


def test_a_failed_memory_search_keeps_the_changed_mark(agent: Path) -> None:
    box = _box(agent, FakeHost(HostRequestFailed("index busy")), memory_changed=True)
    with pytest.raises(ToolError) as failed:
        mem.memory_search(box, "tea")
    assert str(failed.value) == "index busy"
    assert failed.value.__suppress_context__
    assert box.memory_changed is True


@pytest.mark.parametrize("name", ["from_line", "lines"])
@pytest.mark.parametrize("value", [0, -2, True, 1.0, "1", None])
def test_memory_get_needs_whole_numbers_from_one(agent: Path, name: str, value: object) -> None:
    host = FakeHost()
    with pytest.raises(ToolError) as refused:
        mem.memory_get(_box(agent, host), "memory/a.md", **{name: value})  # type: ignore[arg-type]
    assert str(refused.value) == f"{name} must be a whole number from 1"
    assert host.requests == []


def test_memory_get_needs_a_path_string(agent: Path) -> None:
    with pytest.raises(ToolError) as refused:
        mem.memory_get(_box(agent, FakeHost()), 5)  # type: ignore[arg-type]
    assert str(refused.value) == "path must be a string"


def test_memory_get_asks_the_host_with_its_defaults(agent: Path) -> None:
    host = FakeHost({"text": "line 1\nline 2"}, {"text": None}, HostRequestFailed("gone"))
    assert mem.memory_get(_box(agent, host), "memory/a.md") == "line 1\nline 2"
    assert mem.memory_get(_box(agent, host), "memory/a.md", 1, 1) == ""
    with pytest.raises(ToolError) as failed:
        mem.memory_get(_box(agent, host), "memory/a.md", 4, 2)
    assert str(failed.value) == "gone"
    assert failed.value.__suppress_context__
    assert host.requests == [
        ("memory.get", {"path": "memory/a.md", "from_line": 1, "lines": 60}),
        ("memory.get", {"path": "memory/a.md", "from_line": 1, "lines": 1}),
        ("memory.get", {"path": "memory/a.md", "from_line": 4, "lines": 2}),
    ]


def test_memory_get_without_a_host_reads_the_tree_itself(agent: Path) -> None:
    (agent / "memory" / "facts.md").write_text("".join(f"line {n}\n" for n in range(1, 80)))
    box = _box(agent)
    assert mem.memory_get(box, "memory/facts.md", 2, 3) == "line 2\nline 3\nline 4"
    assert mem.memory_get(box, "memory/facts.md").splitlines()[-1] == "line 60"
    assert mem.memory_get(box, "memory/missing.md") == ""
    with pytest.raises(ToolError) as outside:
        mem.memory_get(box, "../files/x.md")
    assert str(outside.value) == "../files/x.md: not a file inside the memory tree"
    assert outside.value.__suppress_context__


# sessions_search


def _said(agent: Path, key: str, *events: dict[str, Any], header: bool = True) -> Path:
    """A transcript of session ``key`` holding ``events`` (after a header)."""
    path = agent / "sessions" / key / "transcript.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [header_event()] if header else []
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in lines + list(events)))
    return path


def _msg(text: str, sender: str | None = "alice", role: str = "user", ts: Any = 1e9) -> dict:
    event: dict[str, Any] = {"t": "msg", "role": role, "content": text, "ts": ts}
    if sender is not None:
        event["sender"] = sender
    return event


def _search(agent: Path, query: str, key: str | None = "k", sender: str | None = "alice",
            host: FakeHost | None = None, **kw: Any) -> str:  # fmt: skip
    box = _box(agent, host, session_key=key, sender=sender)
    return ses.sessions_search(box, query, **kw)


@pytest.mark.parametrize("query", ["", "   ", None, 5, "q" * 201])
def test_sessions_search_needs_a_query_of_1_to_200_characters(agent: Path, query: object) -> None:
    with pytest.raises(ToolError) as refused:
        _search(agent, query)  # type: ignore[arg-type]
    assert str(refused.value) == "give a query of 1 to 200 characters"


def test_a_query_of_200_characters_is_searched(agent: Path) -> None:
    assert (
        _search(agent, "q" * 200) == f"(nothing said in these conversations matches {'q' * 200!r})"
    )


@pytest.mark.parametrize("count", [0, -3, True, 1.5, "2", None])
def test_sessions_search_needs_a_whole_count_from_one(agent: Path, count: object) -> None:
    with pytest.raises(ToolError) as refused:
        _search(agent, "tea", max_results=count)
    assert str(refused.value) == "max_results must be a whole number from 1"


def test_a_query_without_words_finds_nothing(agent: Path) -> None:
    assert _search(agent, "?! -- ...") == "(no results: the query holds no words)"


def test_results_name_session_time_and_speaker_and_the_host_is_told(agent: Path) -> None:
    _said(agent, "k",
          _msg("the tea is green", ts=1_700_000_000),
          _msg("tea without a name", sender=None, ts=1_700_000_060.5),
          _msg("you asked for tea", role="assistant", sender="ignored", ts="later"),
          {"t": "note", "role": "user", "content": "tea note"},
          _msg("tea from the system", role="system"),
          _msg("", ts=1),
          {"t": "msg", "role": "user", "content": ["tea"]},
          "tea as a bare string")  # fmt: skip
    host = FakeHost({})
    found = _search(agent, "tea", host=host, max_results=8)
    assert found.splitlines()[0] == (
        "[earlier conversations: others' words; what was said, not what is true]"
    )
    assert sorted(found.splitlines()[1:]) == [
        "[k, 2023-11-14 22:13 UTC, alice] the tea is green",
        "[k, 2023-11-14 22:14 UTC, ?] tea without a name",
        "[k, ?, you] you asked for tea",
    ]
    assert host.requests == [("others.words", {"source": "sessions"})]


def test_nothing_found_asks_nothing_of_the_host(agent: Path) -> None:
    _said(agent, "k", _msg("coffee"))
    host = FakeHost()
    assert _search(agent, "tea", host=host) == "(nothing said in these conversations matches 'tea')"
    assert host.requests == []


def test_a_search_the_host_cannot_record_is_refused(agent: Path) -> None:
    _said(agent, "k", _msg("tea"))
    with pytest.raises(ToolError) as refused:
        _search(agent, "tea", host=FakeHost(HostRequestFailed("link down")))
    assert str(refused.value) == "the search could not be recorded: link down"
    assert refused.value.__suppress_context__


def test_results_are_five_by_default_and_eight_at_most(agent: Path) -> None:
    _said(agent, "k", *[_msg(f"tea number {n}") for n in range(12)])
    assert len(_search(agent, "tea").splitlines()) == 1 + 5
    assert len(_search(agent, "tea", max_results=7).splitlines()) == 1 + 7
    assert len(_search(agent, "tea", max_results=8).splitlines()) == 1 + 8
    assert len(_search(agent, "tea", max_results=9).splitlines()) == 1 + 8
    assert len(_search(agent, "tea", max_results=1).splitlines()) == 1 + 1


def test_only_the_current_session_and_the_senders_own_are_searched(agent: Path) -> None:
    _said(agent, "a-alice", _msg("tea in a", sender="alice"))
    _said(agent, "b-bob", _msg("tea in b", sender="bob"), _msg("alice likes tea", role="assistant"))
    _said(agent, "c-now", _msg("tea here", sender="bob"))
    _said(agent, "d-quoted", _msg('bob said "alice" likes tea', sender="bob"))
    (agent / "sessions" / "e-file").write_text("not a folder")
    found = _search(agent, "tea", key="c-now", max_results=8)
    assert sorted(line.split(",")[0] for line in found.splitlines()[1:]) == ["[a-alice", "[c-now"]
    # with no sender, only the session the turn is in
    assert [line.split(",")[0] for line in _search(agent, "tea", key="c-now", sender=None)
            .splitlines()[1:]] == ["[c-now"]  # fmt: skip
    assert [line.split(",")[0] for line in _search(agent, "tea", key="c-now", sender="")
            .splitlines()[1:]] == ["[c-now"]  # fmt: skip
    # with no session, only the sender's
    assert [line.split(",")[0] for line in _search(agent, "tea", key=None)
            .splitlines()[1:]] == ["[a-alice"]  # fmt: skip
    assert _search(agent, "tea", key=None, sender=None) == (
        "(nothing said in these conversations matches 'tea')"
    )


def test_the_sessions_are_listed_current_first_then_by_name(agent: Path) -> None:
    for key in ("b", "c", "a"):
        _said(agent, key, _msg("tea", sender="zoë"))
    (agent / "sessions" / "d").symlink_to(agent / "sessions" / "a")
    root = agent / "sessions"
    assert ses._sessions(root, "c", "zoë") == ["c", "a", "b"]
    assert ses._sessions(root, None, "zoë") == ["a", "b", "c"]
    assert ses._sessions(root, "c", None) == ["c"]
    assert ses._sessions(root, None, None) == []
    assert ses._sessions(agent / "nowhere", "c", "zoë") == ["c"]
    assert ses._sessions(root, "c", "zoe") == ["c"]


def test_a_session_whose_line_is_written_escaped_is_the_senders_too(agent: Path) -> None:
    from orchestrator.agent.session import _line

    # a message holding a lone surrogate is written with its non-ASCII escaped, the
    # sender's name too
    line = _line(_msg("tea \udce9", sender="zoë"))
    assert b"zo\\u00eb" in line
    path = agent / "sessions" / "escaped" / "transcript.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(line)
    _said(agent, "plain", _msg("tea", sender="zoë"))
    _said(agent, "other", _msg("tea", sender="zoe"))
    assert ses._sessions(agent / "sessions", None, "zoë") == ["escaped", "plain"]
    assert ses._sessions(agent / "sessions", None, "zoe") == ["other"]
    # a sender's name with a lone surrogate, in the session the turn is in, too
    odd = agent / "sessions" / "odd" / "transcript.jsonl"
    odd.parent.mkdir()
    odd.write_bytes(_line(_msg("tea", sender="a\udce9b")))
    assert _search(agent, "tea", key="odd", sender="x").splitlines()[1:] == [
        "[odd, 2001-09-09 01:46 UTC, a\ufffdb] tea"
    ]
    # the lone surrogate is shown as U+FFFD: the answer has a UTF-8 form
    assert _search(agent, "tea", key="escaped", sender="zoë").splitlines()[1:] == [
        "[escaped, 2001-09-09 01:46 UTC, zoë] tea \ufffd",
        "[plain, 2001-09-09 01:46 UTC, zoë] tea",
    ]


def test_sessions_share_a_total_budget_of_bytes(
    agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _said(agent, "a", _msg("tea one"), header=False)
    size = first.stat().st_size
    _said(agent, "b", _msg("tea two"), header=False)
    _said(agent, "c", _msg("tea"), header=False)  # shorter: read whole when reached
    monkeypatch.setattr(ses, "SESSIONS_SEARCH_TOTAL_BYTES", 2 * size)
    found = _search(agent, "tea", key=None, max_results=8)
    assert sorted(line.split(",")[0] for line in found.splitlines()[1:]) == ["[a", "[b"]
    monkeypatch.setattr(ses, "SESSIONS_SEARCH_TOTAL_BYTES", 2 * size + 1)
    found = _search(agent, "tea", key=None, max_results=8)
    # the third gets one byte: a cut line, nothing of it
    assert sorted(line.split(",")[0] for line in found.splitlines()[1:]) == ["[a", "[b"]


def test_a_transcript_is_read_from_its_end(agent: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = json.dumps(_msg("old tea")) + "\n", json.dumps(_msg("new tea")) + "\n"
    path = _said(agent, "k", header=False)
    path.write_text(old + new)
    events, used = ses._tail_events(path, len(new))
    assert (events, used) == ([("new tea", 1e9, "alice")], len(new))
    events, used = ses._tail_events(path, len(new) + 1)
    assert (events, used) == ([("new tea", 1e9, "alice")], len(new) + 1)
    events, used = ses._tail_events(path, 1 << 20)
    assert ([e[0] for e in events], used) == (["old tea", "new tea"], len(old + new))
    monkeypatch.setattr(ses, "SESSIONS_SEARCH_READ_BYTES", len(new))
    assert ses._tail_events(path, 1 << 20) == ([("new tea", 1e9, "alice")], len(new))
    assert ses._tail_events(path, 1 << 20, raw_filter=('"bob"',)) == ([], len(new))


def test_what_is_not_a_regular_transcript_is_not_read(agent: Path) -> None:
    real = _said(agent, "k", _msg("tea"))
    link = agent / "sessions" / "link.jsonl"
    link.symlink_to(real)
    assert ses._tail_events(link, 1 << 20) == ([], 0)
    assert ses._tail_events(agent / "sessions", 1 << 20) == ([], 0)
    assert ses._tail_events(agent / "sessions" / "none.jsonl", 1 << 20) == ([], 0)
    fifo = agent / "sessions" / "fifo"
    os.mkfifo(fifo)
    assert ses._tail_events(fifo, 1 << 20) == ([], 0)


def test_a_newer_transcript_is_left_out_with_a_warning(
    agent: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _said(agent, "k", {**header_event(), "version": TRANSCRIPT_VERSION + 1},
                 _msg("tea"), header=False)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.tools.sessions"):
        assert ses._tail_events(path, 1 << 20) == ([], 0)
    assert [r.getMessage().startswith("sessions_search leaves a transcript out: ")
            for r in caplog.records] == [True]  # fmt: skip
    assert f"{path} is at version {TRANSCRIPT_VERSION + 1}" in caplog.records[0].getMessage()
    # a first line that is no header, or not JSON, or JSON but not an object, is read
    for first in ("torn {", "[1, 2]", json.dumps(_msg("tea first"))):
        path.write_text(first + "\n" + json.dumps(_msg("tea")) + "\n")
        assert ses._tail_events(path, 1 << 20)[0][-1] == ("tea", 1e9, "alice")


def test_times_are_shown_in_utc_to_the_minute() -> None:
    assert ses._when(0) == "?"
    assert ses._when(0.0) == "?"
    assert ses._when(59.9) == "1970-01-01 00:00 UTC"
    assert ses._when(1_700_000_000) == "2023-11-14 22:13 UTC"


def test_an_excerpt_is_bounded_around_the_first_word_found() -> None:
    assert ses._excerpt("  a\n  b\tc  ", "x") == "a b c"
    exact = "w" * 300
    assert ses._excerpt(exact, "w") == exact
    # the word near the start: no cut before it
    text = "tea " + "x" * 400
    assert ses._excerpt(text, "tea") == text[:300] + "…"
    # the word far in: cut 100 characters before it
    text = "a" * 500 + " Tea " + "b" * 500
    assert ses._excerpt(text, "zzz TEA") == "…" + text[401:701] + "…"
    # the word near the end: no mark after
    text = "a" * 500 + " tea"
    assert ses._excerpt(text, "tea") == "…" + text[401:]
    # no word found: from the start
    text = "c" * 301
    assert ses._excerpt(text, "tea") == "c" * 300 + "…"
    # the first of the query's words found in the text wins
    text = "a" * 200 + " tea " + "b" * 200 + " cake " + "d" * 200
    assert ses._excerpt(text, "cake tea") == "…" + text[101:401] + "…"


def test_the_sessions_source_offers_its_tool_in_turns() -> None:
    assert ses.SESSIONS.name == "sessions"
    assert [(t.spec.name, t.modes) for t in ses.SESSIONS.members] == [
        ("sessions_search", frozenset({"turn"}))
    ]


# the skill tool


def _skill(root: Path, name: str = "greet", body: str = "Say hello.\n", **files: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Greets a person.\n---\n{body}"
    )
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


def _skill_box(root: Path) -> Toolbox:
    return Toolbox(root, sources=(sk.SkillSource(root),))


def test_skill_names_are_the_valid_folders_sorted(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    for name in ("pdf", "greet", "Bad", "-x", "a--b"):
        (root / name).mkdir(parents=True)
    (root / "notes").write_text("a file, not a skill")
    (root / "linked").symlink_to(root / "pdf")
    assert sk.SkillSource(root).names() == ["greet", "linked", "pdf"]
    assert sk.SkillSource(tmp_path / "none").names() == []


def test_an_unknown_skill_is_refused_naming_the_skills_there(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    source = sk.SkillSource(root)
    with pytest.raises(ToolError) as none:
        source.folder("greet")
    assert str(none.value) == "no skill named 'greet'; the skills here: none"
    _skill(root, "greet")
    _skill(root, "abc")
    (root / "Upper").mkdir()
    assert source.folder("greet") == root / "greet"
    for name, shown in (("nope", "nope"), ("Upper", "Upper"), (7, "7"), ("a\nb", "a\\u{000a}b")):
        with pytest.raises(ToolError) as refused:
            source.folder(name)  # type: ignore[arg-type]
        assert str(refused.value) == f"no skill named {shown!r}; the skills here: abc, greet"


def test_loading_a_skill_gives_its_files_and_manifest(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root, body="Run it.\n", **{"run.sh": "echo", "b.md": "b"})
    want = (
        f"Skill greet (folder {folder}, read-only)\n\nFiles:\n"
        "- SKILL.md\n- b.md\n- run.sh\n\n"
        "SKILL.md:\n---\nname: greet\ndescription: Greets a person.\n---\nRun it.\n"
    )
    box = _skill_box(root)
    assert box.call("skill", {"name": "greet"}) == want
    assert box.call("skill", {"name": "greet", "file": ""}) == want
    assert box.call("skill", {"name": "greet", "file": "SKILL.md"}) == want
    assert box.call("skill", {"name": "greet", "file": "b.md"}) == "b"


def test_a_long_manifest_is_cut_at_40000_characters(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    head = (folder / "SKILL.md").read_text()
    (folder / "SKILL.md").write_text(head + "x" * (40_000 - len(head)))
    box = _skill_box(root)
    assert box.call("skill", {"name": "greet"}).endswith(
        "\n\nSKILL.md:\n" + head + "x" * (40_000 - len(head))
    )
    (folder / "SKILL.md").write_text(head + "x" * (40_000 - len(head)) + "é")
    assert box.call("skill", {"name": "greet"}).endswith(
        "\n\nSKILL.md:\n"
        + head
        + "x" * (40_000 - len(head))
        + "\n[SKILL.md cut at 40000 of 40001 characters]"
    )


def test_a_skill_without_a_readable_manifest_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    (root / "greet").mkdir(parents=True)
    with pytest.raises(ToolError) as missing:
        _skill_box(root).call("skill", {"name": "greet"})
    assert (
        str(missing.value) == "skill greet: SKILL.md missing: a skill is a folder with a SKILL.md"
    )
    assert missing.value.__suppress_context__


def test_a_skill_file_is_read_inside_its_folder_only(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root, **{"docs/ref.md": "REF"})
    _skill(root, "other", **{"secret.md": "SECRET"})
    (folder / "up").symlink_to(root / "other")
    (folder / "self").symlink_to(folder / "docs" / "ref.md")
    os.mkfifo(folder / "pipe")
    box = _skill_box(root)
    assert box.call("skill", {"name": "greet", "file": "docs/ref.md"}) == "REF"
    assert box.call("skill", {"name": "greet", "file": "docs/../docs/./ref.md"}) == "REF"
    assert box.call("skill", {"name": "greet", "file": f"{folder}/docs/ref.md"}) == "REF"
    assert box.call("skill", {"name": "greet", "file": "self"}) == "REF"
    refusals = {
        "../other/secret.md": f"../other/secret.md: outside the skill's folder {folder}",
        "up/secret.md": f"up/secret.md: outside the skill's folder {folder}",
        ".": f".: outside the skill's folder {folder}",
        f"{root}/other/secret.md": f"{root}/other/secret.md: not in the skill's folder {folder}",
        "nothing.md": "nothing.md: no such file in the skill; see its files",
        "pipe": "pipe: not a regular file",
        "a\rb": "file 'a\\\\u{000d}b': refused: the path contains the control character U+000D",
        "a\nb": "file 'a\\\\u{000a}b': refused: the path contains a line break",
        "a\udcffb": "file 'a\\\\xffb': refused: the path is not valid Unicode (a lone "
        "surrogate at character 2)",
    }
    for file, want in refusals.items():
        with pytest.raises(ToolError) as refused:
            box.call("skill", {"name": "greet", "file": file})
        assert str(refused.value) == want, file
        assert refused.value.__cause__ is None


def test_a_skill_file_is_cut_at_the_read_limit(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root)
    box = _skill_box(root)
    (folder / "big.txt").write_text("b" * TOOL_READ_MAX_CHARS)
    assert box.call("skill", {"name": "greet", "file": "big.txt"}) == "b" * TOOL_READ_MAX_CHARS
    (folder / "big.txt").write_text("b" * (TOOL_READ_MAX_CHARS + 1))
    assert box.call("skill", {"name": "greet", "file": "big.txt"}) == (
        "b" * TOOL_READ_MAX_CHARS + f"\n[cut at {TOOL_READ_MAX_CHARS} characters]"
    )
    # invalid UTF-8 is replaced; a file of four-byte characters is read whole to the limit
    (folder / "bin").write_bytes(b"a\xffb")
    assert box.call("skill", {"name": "greet", "file": "bin"}) == "a\ufffdb"
    (folder / "wide").write_text("😀" * TOOL_READ_MAX_CHARS)
    assert box.call("skill", {"name": "greet", "file": "wide"}) == "😀" * TOOL_READ_MAX_CHARS
    (folder / "wide").write_text("😀" * TOOL_READ_MAX_CHARS + "b")
    assert box.call("skill", {"name": "greet", "file": "wide"}) == (
        "😀" * TOOL_READ_MAX_CHARS + f"\n[cut at {TOOL_READ_MAX_CHARS} characters]"
    )


def test_a_skills_files_are_listed_up_to_200(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _skill(tmp_path, **{f"f{n:03d}": "" for n in range(199)})
    listed = sk._files(folder).splitlines()
    assert len(listed) == 200 and listed[0] == "- SKILL.md" and listed[-1] == "- f198"
    (folder / "f199").write_text("")
    (folder / "f200").write_text("")
    listed = sk._files(folder).splitlines()
    assert len(listed) == 201 and listed[-1] == "- [2 more not listed]"
    assert listed[-2] == "- f198"
    monkeypatch.setattr(sk, "FILES_LISTED_MAX", 2)
    (folder / "sub").mkdir()
    (folder / "sub" / "x").write_text("")
    assert sk._files(folder).splitlines() == ["- SKILL.md", "- f000", "- [202 more not listed]"]


def test_listed_file_names_are_shown_safely(tmp_path: Path) -> None:
    folder = _skill(tmp_path)
    (folder / "a\tb").write_text("")
    assert sk._files(folder) == "- SKILL.md\n- a\\u{0009}b"


def test_the_skills_prompt_names_each_skill_and_where_it_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "skills"
    _skill(root, "greet")
    host = _skill(root, "migrate")
    (host / "SKILL.md").write_text("---\nname: migrate\ndescription: Moves.\nhost: true\n---\n")
    long = _skill(root, "long")
    (long / "SKILL.md").write_text(f"---\nname: long\ndescription: {'d' * 1024}\n---\n")
    (root / "broken").mkdir()
    with caplog.at_level(logging.WARNING, logger="orchestrator.agent.tools.skills"):
        text = sk.skills_prompt(root)
    assert text == (
        "## Skills\n\n"
        f"Skills are folders of instructions and scripts, read-only under {root}. When a "
        "request matches a skill's description, first call `skill` with its name: it "
        "returns the skill's instructions (SKILL.md) and its files; then follow them. "
        f"Run a skill's scripts with the shell (e.g. `bash {root}/NAME/script.sh`) when "
        "you have it, and read its other files with `skill` (name and file).\n\n"
        "- `greet`: Greets a person.\n"
        f"- `long`: {'d' * 1024}\n"
        "- `migrate` (runs on the host: only the operator runs it): Moves."
    )
    assert [r.getMessage() for r in caplog.records] == [
        "skill broken left out of the list: SKILL.md missing: a skill is a folder with a SKILL.md"
    ]
    (root / "greet" / "SKILL.md").unlink()
    (root / "long" / "SKILL.md").unlink()
    (host / "SKILL.md").unlink()
    assert sk.skills_prompt(root) == ""


def _prompt_room(root: Path, *names: str) -> tuple[int, list[str]]:
    """The head's length and each entry of skills ``names`` made under ``root``."""
    for name in names:
        _skill(root, name)
    head = (
        len(sk.skills_prompt(root)) - sum(len(f"- `{n}`: Greets a person.") + 1 for n in names) + 1
    )
    return head, [f"- `{n}`: Greets a person." for n in names]


def test_the_last_skill_may_use_the_notices_room(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    head, (only,) = _prompt_room(root, "aa")
    fits = head + len(only) + 1
    assert sk.skills_prompt(root, fits) == sk.skills_prompt(root)
    assert sk.skills_prompt(root, fits).endswith(only)
    assert sk.skills_prompt(root, fits - 1).endswith(
        f"\n[1 more skill(s) not listed here: the list is capped at {fits - 1} characters. "
        f"Their folders are in {root}; `skill` loads any of them by name.]"
    )
    assert only not in sk.skills_prompt(root, fits - 1)


def test_an_entry_before_the_last_leaves_room_for_the_notice(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    head, (first, last) = _prompt_room(root, "aa", "bb")
    room = head + len(first) + 1 + 200
    whole = sk.skills_prompt(root)
    assert whole.endswith(f"{first}\n{last}")
    assert sk.skills_prompt(root, room) == whole
    cut = sk.skills_prompt(root, room - 1)
    assert "- `" not in cut and "\n[2 more skill(s) not listed here" in cut


def test_rooted_points_only_the_skills_source_elsewhere(tmp_path: Path) -> None:
    other = ses.SESSIONS
    rooted = sk.rooted((sk.SKILL_TOOLS, other), tmp_path)
    assert rooted[1] is other
    assert isinstance(rooted[0], sk.SkillSource) and rooted[0].root == tmp_path
    assert sk.SKILL_TOOLS.root == Path("/workspace/skills")
    assert sk.SKILL_TOOLS.name == "skills"
    (tool,) = sk.SKILL_TOOLS.tools(_box(tmp_path))
    assert (tool.spec.name, tool.modes) == ("skill", frozenset({"turn"}))


# the shell


@pytest.mark.parametrize(
    ("result", "want"),
    [
        (sh.ShellResult(0, "hi\n"), "exit code 0\nhi\n"),
        (sh.ShellResult(2, ""), "exit code 2"),
        (sh.ShellResult(None, "x", ended="timeout"),
         "TIMED OUT: the command was killed; the next call gets a fresh shell\nx"),
        (sh.ShellResult(None, "", ended="cancelled"),
         "CANCELLED: the turn was cancelled; the command was killed"),
        (sh.ShellResult(None, "", ended="disk"),
         "KILLED: the group's disk use passed its limit (container.disk); remove files under "
         "/workspace/agent/files to make room"),
        (sh.ShellResult(4, "", ended="exited"),
         "THE SHELL EXITED (code 4); the next call gets a fresh shell"),
        (sh.ShellResult(1, "head\x00tail", cut_bytes=12),
         "exit code 1\nhead\n[... 12 bytes of output cut ...]\ntail"),
        (sh.ShellResult(1, "a\x00b"), "exit code 1\na\x00b"),
    ],
)  # fmt: skip
def test_a_shell_result_reads_exactly(result: sh.ShellResult, want: str) -> None:
    assert result.text() == want


def test_output_shows_control_characters_as_escapes() -> None:
    assert sh._shown(b"a\tb\nc\x00\x1f \x7f~\xc2\x80\xff") == "a\tb\nc\\x00\\x1f \\x7f~\x80\ufffd"


def test_output_is_kept_whole_up_to_head_and_tail(tmp_path: Path) -> None:
    keep = SHELL_OUTPUT_HEAD_BYTES + SHELL_OUTPUT_TAIL_BYTES
    out = tmp_path / "out"
    out.write_bytes(b"h" * SHELL_OUTPUT_HEAD_BYTES + b"t" * SHELL_OUTPUT_TAIL_BYTES)
    assert sh._read_capped(out) == (
        "h" * SHELL_OUTPUT_HEAD_BYTES + "t" * SHELL_OUTPUT_TAIL_BYTES,
        0,
    )
    out.write_bytes(b"h" * SHELL_OUTPUT_HEAD_BYTES + b"m" + b"t" * SHELL_OUTPUT_TAIL_BYTES)
    assert sh._read_capped(out) == (
        "h" * SHELL_OUTPUT_HEAD_BYTES + "\x00" + "t" * SHELL_OUTPUT_TAIL_BYTES,
        1,
    )
    out.write_bytes(b"\x01" * (keep + 5))
    text, cut = sh._read_capped(out)
    assert (text, cut) == (
        "\\x01" * SHELL_OUTPUT_HEAD_BYTES + "\x00" + "\\x01" * SHELL_OUTPUT_TAIL_BYTES,
        5,
    )
    out.write_bytes(b"")
    assert sh._read_capped(out) == ("", 0)


def test_an_output_that_is_no_regular_file_reads_as_nothing(tmp_path: Path) -> None:
    assert sh._read_capped(tmp_path / "none") == ("", 0)
    (tmp_path / "real").write_text("secret")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert sh._read_capped(tmp_path / "link") == ("", 0)
    os.mkfifo(tmp_path / "fifo")
    assert sh._read_capped(tmp_path / "fifo") == ("", 0)


def test_paths_are_quoted_for_bash() -> None:
    assert sh._quote(Path("/tmp/it's here")) == "'/tmp/it'\\''s here'"


def test_disk_use_counts_the_measured_folders_without_following_links(agent: Path) -> None:
    (agent / "files" / "deep" / "er").mkdir(parents=True)
    (agent / "files" / "deep" / "er" / "big").write_bytes(b"x" * 20000)
    (agent / "memory" / "a.md").write_bytes(b"y" * 5000)
    (agent / "sessions" / "s").write_bytes(b"z" * 100)
    (agent / "other").mkdir()
    (agent / "other" / "skipped").write_bytes(b"w" * 50000)
    (agent / "files" / "link").symlink_to(agent / "other")
    want = 0
    for name in ("memory", "files", "sessions"):
        for parent, dirs, files in os.walk(agent / name):
            for entry in dirs + files:
                want += os.lstat(Path(parent) / entry).st_blocks * 512
    assert sh.disk_use(agent) == want
    assert want >= 20000 + 5000 + 100
    assert sh.disk_use(agent / "nowhere") == 0


def _spied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float, bool, bool]]:
    """Shell.run replaced by a spy keeping (command, timeout, cancelled(), over_disk())."""
    calls: list[tuple[str, float, bool, bool]] = []

    def run(self: sh.Shell, command: str, timeout: float, *, cancelled: Any, over_disk: Any) -> Any:
        calls.append((command, timeout, cancelled(), over_disk()))
        return sh.ShellResult(0, "ran")

    monkeypatch.setattr(sh.Shell, "run", run)
    return calls


@pytest.mark.parametrize(
    ("given", "want"), [(None, 120.0), (1, 1.0), (1200, 1200.0), (1201, 1200.0), (10**9, 1200.0)]
)
def test_the_call_timeout_defaults_and_is_capped(
    agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: int | None, want: float
) -> None:
    calls = _spied(monkeypatch)
    source = sh.ShellSource(agent, tmp_path / "shells")
    assert source._call(_box(agent), "true", given) == "exit code 0\nran"
    assert calls == [("true", want, False, False)]
    assert type(calls[0][1]) is float


def test_the_call_timeout_is_what_is_left_of_the_turn(
    agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spied(monkeypatch)
    source = sh.ShellSource(agent, tmp_path / "shells")
    clock = iter([1000.0])
    monkeypatch.setattr(sh.time, "monotonic", lambda: next(clock))
    source._call(_box(agent, deadline=1030.0), "true", 60)
    assert calls == [("true", 30.0, False, False)]
    clock = iter([1000.0])
    source._call(_box(agent, deadline=2000.0), "true", 60)
    assert calls[-1] == ("true", 60.0, False, False)
    for left in (0.999, 0.0, -5.0):
        clock = iter([1000.0])
        with pytest.raises(ToolError) as late:
            source._call(_box(agent, deadline=1000.0 + left), "true")
        assert str(late.value) == "the turn's time is up: no command can start now"
    clock = iter([1000.0])
    source._call(_box(agent, deadline=1001.0), "true")
    assert calls[-1] == ("true", 1.0, False, False)


def test_a_call_watches_the_host_and_the_disk_limit(
    agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spied(monkeypatch)
    (agent / "memory" / "a.md").write_text("a")
    used = sh.disk_use(agent)
    limited = sh.ShellSource(agent, tmp_path / "shells", disk_limit=used)
    limited._call(_box(agent, FakeHost(closed=True)), "true")
    assert calls[-1][2:] == (True, False)  # at the limit is not over it
    (agent / "files" / "more").write_bytes(b"x" * 8192)
    limited._call(_box(agent, FakeHost(closed=False)), "true")
    assert calls[-1][2:] == (False, True)
    unlimited = sh.ShellSource(agent, tmp_path / "shells2", disk_limit=None)
    unlimited._call(_box(agent), "true")
    assert calls[-1][2:] == (False, False)
    nothing = sh.ShellSource(agent, tmp_path / "shells3", disk_limit=0)
    nothing._call(_box(agent), "true")
    assert calls[-1][2:] == (False, True)  # a limit of 0 is a limit, as for file sizes
    assert nothing.file_limit == 0


@pytest.mark.parametrize(
    ("command", "timeout", "want"),
    [
        ("", None, "command must be a non-empty string"),
        (" \t\n", None, "command must be a non-empty string"),
        (None, None, "command must be a non-empty string"),
        ("x" * 100_001, None, "command must be at most 100000 characters"),
        ("echo \x00", None, "command must not hold a NUL character"),
        ("true", 0, "timeout_seconds must be a whole number of seconds, at least 1"),
        ("true", -1, "timeout_seconds must be a whole number of seconds, at least 1"),
        ("true", True, "timeout_seconds must be a whole number of seconds, at least 1"),
        ("true", 1.5, "timeout_seconds must be a whole number of seconds, at least 1"),
        ("true", "5", "timeout_seconds must be a whole number of seconds, at least 1"),
    ],
)
def test_bad_shell_arguments_are_refused_exactly(
    agent: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: Any,
    timeout: Any,
    want: str,
) -> None:
    calls = _spied(monkeypatch)
    with pytest.raises(ToolError) as refused:
        sh.ShellSource(agent, tmp_path / "s")._call(_box(agent), command, timeout)
    assert str(refused.value) == want
    assert calls == []


def test_a_command_of_the_longest_length_runs(
    agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spied(monkeypatch)
    longest = "#" * 100_000
    sh.ShellSource(agent, tmp_path / "s")._call(_box(agent), longest)
    assert calls == [(longest, 120.0, False, False)]


def test_each_conversation_has_its_shell_in_a_folder_of_its_own(
    agent: Path, tmp_path: Path
) -> None:
    source = sh.ShellSource(agent, tmp_path / "shells", home=tmp_path / "home",
                            disk_limit=5000, file_limit=9000, sweep_orphans=True,
                            proxy="http://127.0.0.1:1")  # fmt: skip
    shell = source.shell_of("chat-a")
    assert source.shell_of("chat-a") is shell and source.shell_of("chat-b") is not shell
    digest = hashlib.sha256(b"chat-a").hexdigest()[:16]
    assert (shell.workdir, shell.state_dir, shell.home) == (
        agent / "files",
        tmp_path / "shells" / digest,
        tmp_path / "home",
    )
    assert (shell.file_limit, shell.sweep_orphans, shell.proxy) == (
        5000,
        True,
        "http://127.0.0.1:1",
    )
    assert sh.ShellSource(agent, tmp_path).file_limit == SHELL_FILE_MAX_BYTES
    assert sh.ShellSource(agent, tmp_path, disk_limit=10**12).file_limit == SHELL_FILE_MAX_BYTES
    assert sh.ShellSource(agent, tmp_path, file_limit=10, disk_limit=11).file_limit == 10
    plain = sh.Shell(agent / "files", tmp_path / "state")
    assert (plain.home, plain.file_limit, plain.sweep_orphans, plain.proxy) == (
        tmp_path / "state",
        SHELL_FILE_MAX_BYTES,
        False,
        None,
    )
    source.close()
    assert source.shells == {}


def test_a_call_without_a_session_uses_the_default_shell(
    agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _spied(monkeypatch)
    source = sh.ShellSource(agent, tmp_path / "shells")
    source._call(_box(agent), "true")
    assert list(source.shells) == ["default"]
    source._call(_box(agent, session_key="k"), "true")
    assert list(source.shells) == ["default", "k"]


def test_the_runners_shell_source_follows_its_settings(tmp_path: Path) -> None:
    settings = SimpleNamespace(agent_dir=tmp_path / "a", shell_dir=tmp_path / "s",
                               home_dir=tmp_path / "h", disk_bytes=7000, sandbox=True,
                               egress_socket=tmp_path / "egress")  # fmt: skip
    source = sh.shell_source(settings)  # type: ignore[arg-type]
    assert (source.agent_dir, source.state_root, source.home, source.disk_limit) == (
        tmp_path / "a",
        tmp_path / "s",
        tmp_path / "h",
        7000,
    )
    assert (source.file_limit, source.sweep_orphans) == (7000, True)
    assert source.proxy == f"http://127.0.0.1:{EGRESS_PORT}"
    settings.egress_socket = None
    assert sh.shell_source(settings).proxy is None  # type: ignore[arg-type]


def test_the_shell_source_offers_its_tool_in_turns(agent: Path, tmp_path: Path) -> None:
    source = sh.ShellSource(agent, tmp_path)
    assert source.name == "shell"
    (tool,) = source.tools(_box(agent))
    assert (tool.spec.name, tool.modes) == ("shell", frozenset({"turn"}))


def test_the_shell_starts_clean_limited_and_private(agent: Path, tmp_path: Path) -> None:
    source = sh.ShellSource(agent, tmp_path / "shells", home=tmp_path / "home", file_limit=4096,
                            proxy="http://127.0.0.1:9")  # fmt: skip
    try:
        env = source._call(_box(agent, session_key="k"), "env | sort").splitlines()
        state = source.shells["k"].state_dir
        assert env[0] == "exit code 0"
        assert [line for line in env[1:] if not line.startswith(("PWD=", "SHLVL=", "_="))] == [
            "GIT_PAGER=cat",
            f"HOME={tmp_path / 'home'}",
            "HTTPS_PROXY=http://127.0.0.1:9",
            "HTTP_PROXY=http://127.0.0.1:9",
            "LANG=C.UTF-8",
            "PAGER=cat",
            f"PATH={sh.SAFE_PATH}",
            "SHELL=/bin/bash",
            "TERM=dumb",
            f"TMPDIR={state / 'tmp'}",
            "http_proxy=http://127.0.0.1:9",
            "https_proxy=http://127.0.0.1:9",
        ]
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(state / "tmp").st_mode) == 0o700
        limits = source._call(
            _box(agent, session_key="k"), "grep -E '^Max (file size|core)' /proc/$$/limits"
        )
        assert limits.split() == [
            "exit",
            "code",
            "0",
            "Max",
            "file",
            "size",
            "4096",
            "4096",
            "bytes",
            "Max",
            "core",
            "file",
            "size",
            "0",
            "0",
            "bytes",
        ]
        # the command's files are gone once it ends
        assert sorted(p.name for p in state.iterdir()) == ["tmp"]
    finally:
        source.close()


def test_a_turns_end_kills_what_the_shell_left_and_says_so(
    agent: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = sh.ShellSource(agent, tmp_path / "shells")
    try:
        with caplog.at_level(logging.INFO, logger="orchestrator.agent.tools.shell"):
            source.end_turn(_box(agent, session_key="k"))  # no shell yet
            source._call(_box(agent, session_key="k"), "true")
            source.end_turn(_box(agent, session_key="k"))  # nothing left running
            assert caplog.records == []
            source._call(_box(agent, session_key="k"), "sleep 60 & sleep 60 &")
            source.end_turn(_box(agent, session_key="k"))
        assert [r.getMessage() for r in caplog.records] == [
            "turn ended: killed 2 processes its shell left running"
        ]
        assert source._call(_box(agent, session_key="k"), "echo $$").startswith("exit code 0\n")
    finally:
        source.close()
    assert sh.Shell(agent, tmp_path / "x").end_turn() == []


class FakeProcess:
    def __init__(self, code: int | None = None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


@pytest.fixture
def piped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A Shell whose status pipe is the test's, and the pipe's write end."""
    monkeypatch.setattr(sh, "WATCH_SECONDS", 0.01)
    shell = sh.Shell(tmp_path / "work", tmp_path / "state")
    read, write = os.pipe()
    shell.status_read = read
    shell.process = FakeProcess()  # type: ignore[assignment]
    yield shell, write
    os.close(read)
    with contextlib.suppress(OSError):
        os.close(write)


def _never() -> bool:
    return False


def test_a_call_ends_on_its_own_token_and_a_number_only(piped: Any) -> None:
    shell, write = piped
    os.write(write, b"feed 0\nbeef x\nbeef 1 2\n\nbeef -1\nbeef 7\nbeef 8\n")
    assert shell._wait("beef", 5, _never, _never) == (None, 7)


def test_a_status_line_split_between_reads_is_joined(piped: Any) -> None:
    shell, write = piped
    os.write(write, b"x" * 4094 + b"\nbeef 42\n")  # the first read ends inside the line
    assert shell._wait("beef", 5, _never, _never) == (None, 42)


def test_a_status_line_in_bad_utf8_is_not_a_status(piped: Any) -> None:
    shell, write = piped
    os.write(write, b"beef \xff3\nbeef 3\n")
    assert shell._wait("beef", 5, _never, _never) == (None, 3)


def test_a_call_ends_when_its_shell_ends(piped: Any) -> None:
    shell, write = piped
    os.close(write)
    assert shell._wait("beef", 5, _never, _never) == ("exited", None)


def test_a_call_ends_when_its_shell_process_is_gone(piped: Any) -> None:
    shell, _ = piped
    shell.process = FakeProcess(0)
    assert shell._wait("beef", 5, _never, _never) == ("exited", None)
    shell.process = None
    assert shell._wait("beef", 5, _never, _never) == ("exited", None)


def test_a_call_ends_at_its_timeout_or_when_cancelled(
    piped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell, _ = piped
    assert shell._wait("beef", 0, _never, _never) == ("timeout", None)
    assert shell._wait("beef", -1, _never, _never) == ("timeout", None)
    assert shell._wait("beef", 5, lambda: True, _never) == ("cancelled", None)
    clock = itertools.count(100.25, 0.25)  # deadline 101.25: the 5th reading meets it
    monkeypatch.setattr(sh.time, "monotonic", lambda: next(clock))
    assert shell._wait("beef", 1, _never, _never) == ("timeout", None)
    assert next(clock) == 101.5


def test_the_disk_is_measured_each_second_of_a_call(
    piped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell, _ = piped
    now = [100.0]
    checks: list[float] = []

    def tick() -> float:
        now[0] += 0.25
        return now[0]

    def over() -> bool:
        checks.append(now[0])
        return len(checks) == 3

    monkeypatch.setattr(sh.time, "monotonic", tick)
    assert shell._wait("beef", 60, _never, over) == ("disk", None)
    # the deadline and the first check are set at 100.25 and 100.5: checks at 101.5 and on
    assert checks == [101.75, 103.0, 104.25]


def _table(
    monkeypatch: pytest.MonkeyPatch, me: int, table: dict[int, tuple[int, int, int, int]]
) -> None:
    monkeypatch.setattr(sh, "_processes", lambda: table)
    monkeypatch.setattr(sh.os, "getpid", lambda: me)


def test_strays_are_the_shells_group_session_and_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    _table(monkeypatch, 100, {
        1: (0, 1, 1, 0),
        50: (1, 50, 50, 900),  # this runner's parent, adopted by PID 1 late
        100: (50, 50, 50, 950),  # this runner
        200: (100, 200, 200, 1000),  # the shell
        201: (200, 200, 200, 1001),  # its child
        202: (201, 300, 300, 1002),  # a grandchild in a session of its own
        203: (1, 203, 200, 1003),  # adopted, still in the shell's session
        204: (1, 204, 204, 1004),  # adopted, of its own session, started after the shell
        205: (1, 205, 205, 999),  # adopted, started before the shell
        206: (50, 206, 206, 1005),  # another child of the runner's parent
        207: (100, 200, 50, 1006),  # in the shell's group
    })  # fmt: skip
    assert sh.strays(200) == [201, 202, 203, 207]
    assert sh.strays(200, orphans_since=1004) == [201, 202, 203, 204, 207]
    assert sh.strays(200, orphans_since=1005) == [201, 202, 203, 207]
    assert sh.strays(200, orphans_since=0) == [201, 202, 203, 204, 205, 207]


def test_the_runners_own_line_is_never_a_stray(monkeypatch: pytest.MonkeyPatch) -> None:
    # the runner is itself in the shell's session (a shell started without setsid)
    _table(monkeypatch, 100, {
        1: (0, 1, 1, 0),
        10: (1, 200, 200, 5),
        100: (10, 200, 200, 6),
        200: (100, 200, 200, 7),
        201: (200, 200, 200, 8),
        300: (999, 200, 200, 9),  # its parent is not in the table
    })  # fmt: skip
    assert sh.strays(200, orphans_since=0) == [201, 300]


def test_a_cycle_in_the_table_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    _table(monkeypatch, 100, {
        100: (1, 100, 100, 1),
        200: (202, 200, 200, 2),
        201: (200, 201, 201, 3),
        202: (201, 202, 202, 4),
    })  # fmt: skip
    assert sh.strays(200) == [201, 202]


def test_a_processes_stat_is_read_past_its_name(tmp_path: Path) -> None:
    me = sh._proc_stat(os.getpid())
    assert me is not None and me[:3] == (os.getppid(), os.getpgrp(), os.getsid(0))
    assert sh._proc_stat(2**22 + 1) is None
    odd = tmp_path / "a) 1 2 3 4"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([odd, "-c", "import time; time.sleep(30)"])
    try:
        found = sh._proc_stat(child.pid)
        assert found is not None and found[:3] == (os.getpid(), os.getpgrp(), os.getsid(0))
        assert found[3] >= me[3]
        assert sh._processes()[child.pid] == found
    finally:
        child.kill()
        child.wait()


def test_the_clock_is_in_ticks_since_boot() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    assert sh._clock_ticks() == ticks

    def read() -> float:
        with open("/proc/uptime") as f:
            return float(f.read().split()[0])

    before = int(read() * ticks)
    measured = sh._uptime_ticks()
    assert before <= measured <= int(read() * ticks)


def test_turn_ends_and_closes_sweep_orphans_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int | None]] = []
    killed: list[list[int]] = []

    def fake_strays(pid: int, *, orphans_since: int | None = None) -> list[int]:
        seen.append((pid, orphans_since))
        return [pid + 1, pid + 2]

    monkeypatch.setattr(sh, "strays", fake_strays)
    monkeypatch.setattr(sh, "_kill", lambda pids: killed.append(list(pids)))
    for sweep, since in ((False, None), (True, 12345)):
        shell = sh.Shell(tmp_path / "w", tmp_path / "s", sweep_orphans=sweep)
        shell.process = SimpleNamespace(pid=77)  # type: ignore[assignment]
        shell.started_ticks = 12345
        seen.clear()
        killed.clear()
        assert shell.end_turn() == [78, 79]
        assert (seen, killed) == ([(77, since)], [[78, 79]])
    shell = sh.Shell(tmp_path / "w", tmp_path / "s", sweep_orphans=True)
    shell._start()
    pid = shell.process.pid  # type: ignore[union-attr]
    shell.started_ticks = 555
    seen.clear()
    killed.clear()
    shell.close()
    assert seen == [(pid, 555), (pid, 555)] and killed == [[pid + 1, pid + 2]] * 2
    assert (shell.process, shell.status_read) == (None, None)
    assert sh._proc_stat(pid) is None  # killed and reaped
    shell.close()  # closing again does nothing


def test_a_shell_records_when_it_started(tmp_path: Path) -> None:
    shell = sh.Shell(tmp_path / "w", tmp_path / "s")
    try:
        before = sh._uptime_ticks()
        shell._start()
        assert before <= shell.started_ticks <= sh._uptime_ticks()
        assert shell.alive and shell.status_fd >= 3 and shell.status_read is not None
    finally:
        shell.close()
    assert not shell.alive


def test_kill_skips_what_is_gone() -> None:
    child = subprocess.Popen(["sleep", "30"])
    sh._kill([2**22 + 1, child.pid])  # the first is no process: the second is killed still
    assert child.wait(10) == -9


def test_a_skill_file_name_holding_nul_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _skill(root)
    with pytest.raises(ToolError) as refused:
        _skill_box(root).call("skill", {"name": "greet", "file": "a\x00b"})
    assert str(refused.value) == (
        "file 'a\\\\u{0000}b': refused: the path contains the control character U+0000"
    )


def test_a_skill_folder_named_as_a_file_is_refused_and_nothing_is_left_open(
    tmp_path: Path,
) -> None:
    root = tmp_path / "skills"
    folder = _skill(root, **{"docs/ref.md": "REF"})
    os.mkfifo(folder / "pipe")
    box = _skill_box(root)
    opened = len(os.listdir("/proc/self/fd"))
    for file, want in (
        ("docs", "docs: is a folder; see the skill's files"),
        ("docs/", "docs/: is a folder; see the skill's files"),
        ("pipe", "pipe: not a regular file"),
    ):
        with pytest.raises(ToolError) as refused:
            box.call("skill", {"name": "greet", "file": file})
        assert str(refused.value) == want
    assert len(os.listdir("/proc/self/fd")) == opened


def test_a_skills_folders_are_listed_with_a_slash(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root, **{"scripts/run.sh": "echo", "b.md": "b", "a/z.md": "z"})
    assert sk._files(folder) == ("- SKILL.md\n- a/\n- a/z.md\n- b.md\n- scripts/\n- scripts/run.sh")
    assert "\n\nFiles:\n- SKILL.md\n- a/\n- a/z.md\n" in _skill_box(root).call(
        "skill", {"name": "greet"}
    )


def test_an_output_replaced_by_a_folder_reads_as_nothing(tmp_path: Path, agent: Path) -> None:
    (tmp_path / "dir").mkdir()
    opened = len(os.listdir("/proc/self/fd"))
    assert sh._read_capped(tmp_path / "dir") == ("", 0)
    assert len(os.listdir("/proc/self/fd")) == opened
    source = sh.ShellSource(agent, tmp_path / "shells")
    try:
        state = source.shell_of("k").state_dir
        command = f"rm {state}/out-1; mkdir {state}/out-1"
        assert source._call(_box(agent, session_key="k"), command) == "exit code 0"
        assert source._call(_box(agent, session_key="k"), "echo fine") == "exit code 0\nfine\n"
    finally:
        source.close()


def test_an_excerpt_starts_at_a_word_found_at_the_very_start() -> None:
    text = "tea " + "a" * 400 + " cake " + "b" * 400
    assert ses._excerpt(text, "tea cake") == text[:300] + "…"


def test_a_failed_search_says_what_the_index_said(
    agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.memory import terms

    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
    with pytest.raises(sqlite3.Error) as said:
        db.execute("SELECT text FROM t WHERE t MATCH ?", ("AND",)).fetchall()
    db.close()
    monkeypatch.setattr(terms, "expression", lambda found: "AND")
    with pytest.raises(ToolError) as failed:
        _search(agent, "tea")
    assert str(failed.value) == f"the search failed: {said.value}"
    assert failed.value.__suppress_context__


def test_a_shell_makes_its_folders_and_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    shell = sh.Shell(tmp_path / "a" / "b" / "files", tmp_path / "c" / "d" / "state")
    try:
        result = shell.run("pwd; ls -a " + str(shell.state_dir), 10)
        assert result == sh.ShellResult(
            0, f"{tmp_path / 'a' / 'b' / 'files'}\n.\n..\ncmd-1\nout-1\ntmp\n", 0, None
        )
        pid = shell.process.pid  # type: ignore[union-attr]
        assert os.getsid(pid) == pid == os.getpgid(pid)
        assert shell.run("ls " + str(shell.state_dir), 10).output == "cmd-2\nout-2\ntmp\n"
        again = sh.Shell(tmp_path / "a" / "b" / "files", tmp_path / "c" / "d" / "state")
        assert again.run("true", 10) == sh.ShellResult(0, "", 0, None)
        again.close()
    finally:
        shell.close()


def test_a_command_keeps_bytes_that_were_not_utf8(tmp_path: Path) -> None:
    shell = sh.Shell(tmp_path / "w", tmp_path / "s")
    try:
        result = shell.run("printf '%s' 'a\udcffb' | od -An -tx1", 10)
        assert result.output.split() == ["61", "ff", "62"]
    finally:
        shell.close()


def test_a_shell_that_cannot_take_a_command_is_closed(tmp_path: Path) -> None:
    class Broken:
        def write(self, data: bytes) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    shell = sh.Shell(tmp_path / "w", tmp_path / "s")
    shell._start()
    real = shell.process.stdin  # type: ignore[union-attr]
    shell.process.stdin = Broken()  # type: ignore[union-attr,assignment]
    try:
        result = shell.run("true", 10)
    finally:
        real.close()  # type: ignore[union-attr]
        shell.close()
    assert result == sh.ShellResult(None, "the shell could not start the command", 0, "exited")
    assert result.text() == (
        "THE SHELL EXITED (code None); the next call gets a fresh shell\n"
        "the shell could not start the command"
    )
    assert shell.process is None and shell.status_read is None


def test_a_call_past_its_timeout_gets_a_fresh_shell_next(agent: Path, tmp_path: Path) -> None:
    source = sh.ShellSource(agent, tmp_path / "shells")
    try:
        run = source._call
        box = _box(agent, session_key="k")
        first = run(box, "echo $$").split("\n")[1]
        assert run(box, "export A=1; echo started; sleep 30", 1) == (
            "TIMED OUT: the command was killed; the next call gets a fresh shell\nstarted\n"
        )
        assert source.shells["k"].process is None
        assert run(box, 'echo "$$ [${A-}]"').split("\n")[1] not in (f"{first} [1]", f"{first} []")
        assert run(box, 'echo "[${A-}]"') == "exit code 0\n[]\n"
    finally:
        source.close()


def test_the_shell_exiting_gives_its_code_and_a_fresh_shell(tmp_path: Path) -> None:
    shell = sh.Shell(tmp_path / "w", tmp_path / "s")
    try:
        assert shell.run("echo bye; exit 5", 10) == sh.ShellResult(5, "bye\n", 0, "exited")
        assert shell.process is None
        assert shell.run("echo back", 10) == sh.ShellResult(0, "back\n", 0, None)
    finally:
        shell.close()


def test_a_path_climbing_out_and_back_into_the_skill_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = _skill(root, **{"docs/ref.md": "REF"})
    with pytest.raises(ToolError) as refused:
        _skill_box(root).call("skill", {"name": "greet", "file": "../greet/docs/ref.md"})
    assert str(refused.value) == f"../greet/docs/ref.md: outside the skill's folder {folder}"


def test_disk_use_goes_on_past_a_missing_folder(agent: Path) -> None:
    (agent / "memory" / "a.md").write_bytes(b"y" * 5000)
    with_all = sh.disk_use(agent)
    (agent / "sessions").rmdir()  # the first measured
    assert sh.disk_use(agent) == with_all > 0


def test_disk_use_goes_on_past_an_entry_gone_while_counting(
    agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (agent / "files" / "a").write_bytes(b"a" * 5000)
    (agent / "files" / "b").write_bytes(b"b" * 5000)
    whole = sh.disk_use(agent)
    real_scandir = os.scandir

    class Gone:
        path = str(agent / "files" / "gone")

        def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
            raise FileNotFoundError(2, "No such file or directory")

    @contextlib.contextmanager
    def scandir(folder: Path) -> Any:
        with real_scandir(folder) as entries:
            listed = list(entries)
        yield ([Gone()] if Path(folder).name == "files" else []) + listed

    monkeypatch.setattr(sh.os, "scandir", scandir)
    assert sh.disk_use(agent) == whole


def test_times_are_in_utc_whatever_the_local_zone() -> None:
    with local_zone("Asia/Tokyo"):
        assert ses._when(1_700_000_000) == "2023-11-14 22:13 UTC"


def test_an_excerpt_of_300_characters_is_whole_and_starts_at_a_words_first_place() -> None:
    text = "a" * 296 + " tea"
    assert ses._excerpt(text, "tea") == text
    text = "tea " + "a" * 400 + " tea " + "b" * 400
    assert ses._excerpt(text, "tea") == text[:300] + "…"


def test_a_transcripts_lines_that_are_no_message_are_passed_over(agent: Path) -> None:
    path = _said(agent, "k", header=False)
    lines = [
        json.dumps({"t": "note", "role": "user", "content": "tea", "sender": "alice"}),
        json.dumps(_msg("tea", role="system")),
        json.dumps(_msg("")),
        json.dumps({"t": "msg", "role": "user", "content": ["tea"], "sender": "alice"}),
        json.dumps("alice"),
        "not json alice",
        json.dumps(_msg("tea from bob", sender="bob")),
        json.dumps(_msg("tea from alice")),
    ]
    path.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe broken\n")
    assert ses._tail_events(path, 1 << 20, raw_filter=('"alice"',))[0] == [
        ("tea from alice", 1e9, "alice")
    ]
    assert ses._tail_events(path, 1 << 20)[0] == [
        ("tea from bob", 1e9, "bob"),
        ("tea from alice", 1e9, "alice"),
    ]


def test_a_shell_persists_between_calls_and_a_dead_one_is_replaced(tmp_path: Path) -> None:
    shell = sh.Shell(tmp_path / "w", tmp_path / "s")
    try:
        shell.run("export A=1; mkdir -p sub; cd sub", 10)
        first = shell.process
        assert shell.run('echo "$A $PWD"', 10).output == f"1 {tmp_path / 'w' / 'sub'}\n"
        assert shell.process is first
        os.kill(first.pid, signal.SIGKILL)  # type: ignore[union-attr]
        first.wait()  # type: ignore[union-attr]
        assert shell.run('echo "[${A-}]"', 10) == sh.ShellResult(0, "[]\n", 0, None)
        assert shell.process is not first
    finally:
        shell.close()


def test_a_long_message_found_is_shown_around_the_query(agent: Path) -> None:
    said = "a" * 500 + " tea " + "b" * 500
    _said(agent, "k", _msg(said, ts=1_700_000_000))
    assert _search(agent, "tea").splitlines()[1] == (
        f"[k, 2023-11-14 22:13 UTC, alice] …{said[401:701]}…"
    )


def test_a_status_line_split_after_its_token_or_a_read_without_a_line_end(piped: Any) -> None:
    shell, write = piped
    os.write(write, b"x" * 4090 + b"\nbeef 42\n")  # the first read ends after "beef "
    assert shell._wait("beef", 5, _never, _never) == (None, 42)
    os.write(write, b"y" * 5000 + b"\nbeef 43\n")  # the first read holds no line end
    assert shell._wait("beef", 5, _never, _never) == (None, 43)
