"""Fuzzing the readers of session transcripts (``sessions/<key>/transcript.jsonl``), which
the container writes. Two readers: the runner's Session (orchestrator/agent/session.py),
which replays the live context from the file, and the host's ``orchestrator transcript``
command (orchestrator/cli/inspect.py), which shows it to the operator.

Session: any bytes load (a line of the wrong shape is skipped: the module's docstring
and Session._apply), or FileTooNew when the header names a newer version; the session
then appends and rotates, and the file replays to the same state as the one in memory.
The command: any bytes are shown (exit 0), or refused with a clean message (exit 1 or 2),
never a traceback, and its readable output holds no terminal control sequence
(orchestrator/cli/output.py: text from a container is made harmless for a terminal).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.agent.session import TRANSCRIPT, Session
from orchestrator.cli import cli
from orchestrator.versions import FileTooNew
from tests.fuzzing import fuzz, mutated


def line(event: dict[str, object]) -> bytes:
    return json.dumps(event, ensure_ascii=False).encode() + b"\n"


# A transcript as the runner writes it (one turn with a tool call), and pieces of others.
TURN = b"".join(
    line(e)
    for e in [
        {"ts": 1.5, "t": "header", "version": 1, "release": "0.1.0"},
        {
            "ts": 1.6,
            "t": "context",
            "context_id": 1,
            "source": "startup",
            "provider": "offline",
            "model": "offline-rules",
            "system": "You are helpful.",
            "summary": "",
            "flushed": 0,
            "base_chars": 16,
        },
        {
            "ts": 1.7,
            "t": "msg",
            "turn_id": "t1",
            "role": "user",
            "content": "remember the oven",
            "sender": "alice",
            "trust": "member",
            "said": "@bot remember the oven",
        },
        {
            "ts": 1.8,
            "t": "msg",
            "turn_id": "t1",
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "write_file", "arguments": {"path": "memory/a.md"}},
                {"id": "c2", "name": "shell", "arguments": {"command": "ls -la"}},
            ],
        },
        {"ts": 1.9, "t": "msg", "turn_id": "t1", "role": "tool", "name": "shell", "content": "a"},
        {"ts": 2.0, "t": "msg", "turn_id": "t1", "role": "assistant", "content": "Noted."},
        {"ts": 2.1, "t": "flush", "upto": 2, "appended_chars": 40, "soft": True},
        {"ts": 2.2, "t": "done", "turn_id": "t1", "replies": ["Noted."]},
        {"ts": 2.3, "t": "supersede", "turn_id": "t2"},
        {"ts": 2.4, "t": "note", "text": "x"},
    ]
)
SEEDS = [
    TURN,
    TURN[: len(TURN) // 2],  # torn mid-line
    line({"t": "header", "version": 99}) + TURN,
    line({"t": "msg", "role": "user", "content": "before any context"}) + TURN,
    b"",
]
transcripts = st.one_of(
    mutated(SEEDS, max_edits=8),
    st.lists(mutated([line({"t": "x"}), line({"ts": 1, "t": "msg"})]), max_size=3).map(b"".join),
    st.binary(max_size=100),
)


@fuzz(200)
@given(raw=transcripts)
@example(raw=b'{"t":"context","context_id":1,"system":"\\ud800"}\n').via("lone surrogate")
@example(raw=b"[" * 50_000 + b"\n" + TURN).via("deep nesting")
@example(raw=b'{"t":"context","flushed":1e400}\n').via("float overflow")
@example(raw=TURN + b'{"t":"msg","role":"user","content":NaN}\n').via("NaN")
def test_a_session_loads_any_transcript_and_carries_on(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "k").mkdir()
        (root / "k" / TRANSCRIPT).write_bytes(raw)
        session = Session(root, "k", rotate_bytes=1)
        try:
            session.load()
        except FileTooNew as exc:
            assert "version" in exc.message
            return
        session.append({"t": "msg", "turn_id": "t9", "role": "user", "content": "hi"})
        # rotated (rotate_bytes=1): what is in memory is what a restart replays
        again = Session(root, "k")
        assert again.current_context() == session.context
        assert again.completed == session.completed


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        result = invoke(home, "group", "add", "Fam")
        assert result.exit_code == 0, result.output
        (home / "groups/fam/sessions/cli.chat-kitchen").mkdir(parents=True)
        yield home


def invoke(home: Path, *args: str):  # type: ignore[no-untyped-def]
    runner = CliRunner(env={"ORCHESTRATOR_PROJECT": "orchfuzz"})
    return runner.invoke(cli, ["--home", str(home), *args], catch_exceptions=False)


# Control characters, but newline (one event's lines) and tab, that a terminal acts on.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@fuzz(100)
@given(raw=transcripts)
@example(raw=TURN)
@example(raw=line({"t": "context", "source": "\x1b]0;owned\x07", "model": "\x1b[2J"}))
@example(raw=line({"ts": "soon", "role": "user", "content": "x"})).via("ts not a number")
@example(raw=line({"ts": 1e300, "role": "user", "content": "x"})).via("ts out of range")
@example(raw=line({"ts": 1, "role": "assistant", "tool_calls": "ls"}))
@example(raw=line({"ts": 1, "role": "assistant", "tool_calls": [1, {"name": 2}]}))
@example(raw=b"[" * 50_000 + b"\n" + TURN).via("deep nesting")
def test_the_transcript_command_shows_any_transcript_safely(home: Path, raw: bytes) -> None:
    (home / "groups/fam/sessions/cli.chat-kitchen" / TRANSCRIPT).write_bytes(raw)
    shown = invoke(home, "transcript", "fam", "--chat", "kitchen", "--channel", "cli")
    assert shown.exit_code in (0, 1, 2), shown.output
    if shown.exit_code:
        assert shown.stderr.startswith("error:") or "version" in shown.stderr, shown.stderr
    assert not UNSAFE.search(shown.stdout), shown.stdout
    as_json = invoke(home, "transcript", "fam", "--json")
    assert as_json.exit_code in (0, 1, 2), as_json.output
    if as_json.exit_code == 0:
        json.loads(as_json.stdout)
