"""Exact behaviour of sessions and their transcripts (no runner): the header and its
version, the live context's size, each event's checks and its effect on the state, a
transcript read back line by line, appends (stamped, headed, synced once a batch, never
glued onto a torn line) and the rotation that archives the old file."""

from __future__ import annotations

import gzip
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent import session as sessionmod
from orchestrator.agent.session import (
    TRANSCRIPT,
    Context,
    Session,
    _line,
    check_header,
    event_problem,
    header_event,
)
from orchestrator.limits import TRANSCRIPT_ARCHIVES_KEPT, TRANSCRIPT_TURNS_KEPT
from orchestrator.versions import RELEASE, TRANSCRIPT_VERSION, FileTooNew

LOGGER = "orchestrator.agent.session"


class Clock:
    def __init__(self, now: float = 1700000000.123456) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def strftime(self, fmt: str, when: Any) -> str:
        import time

        return time.strftime(fmt, when)

    def gmtime(self) -> Any:
        import time

        return time.gmtime(self.now)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(sessionmod, "time", made)
    return made


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _context(**kwargs: Any) -> Context:
    fields: dict[str, Any] = {
        "context_id": 1,
        "source": "s",
        "provider": "p",
        "model": "m",
        "system": "sys",
    }
    return Context(**{**fields, **kwargs})


# --- the header ------------------------------------------------------------------------


def test_the_header_names_the_transcript_version_and_release() -> None:
    assert header_event() == {"t": "header", "version": TRANSCRIPT_VERSION, "release": RELEASE}


@pytest.mark.parametrize(
    "first", [None, {}, {"t": "msg", "version": 99}, {"t": "HEADER", "version": 99}]
)
def test_a_transcript_without_a_header_is_version_1(first: Any) -> None:
    assert check_header(first, "t.jsonl") == 1


def test_a_header_of_this_version_is_read() -> None:
    assert check_header({"t": "header", "version": TRANSCRIPT_VERSION}, "t.jsonl") == 1


@pytest.mark.parametrize("version", [None, "2", 0, -1, True, 1.5])
def test_a_header_whose_version_is_not_a_whole_number_is_read_as_1(
    version: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert check_header({"t": "header", "version": version}, "a/t.jsonl") == 1
    assert [r.getMessage() for r in caplog.records] == [
        "a/t.jsonl: its header's version is not a whole number; read as version 1"
    ]


def test_a_newer_transcript_is_refused_by_name() -> None:
    newer = TRANSCRIPT_VERSION + 1
    with pytest.raises(FileTooNew) as caught:
        check_header({"t": "header", "version": newer}, "a/t.jsonl")
    assert str(caught.value).startswith(f"a/t.jsonl is at version {newer}, written by a newer")
    assert f"reads up to version {TRANSCRIPT_VERSION})" in str(caught.value)


# --- the live context ------------------------------------------------------------------


def test_a_context_counts_its_messages_characters_as_written() -> None:
    context = _context()
    context.add({"role": "user", "content": "héllo"}, "t1")
    context.add({"role": "assistant", "content": "ok"})
    first = len(json.dumps({"role": "user", "content": "héllo"}, ensure_ascii=False))
    second = len(json.dumps({"role": "assistant", "content": "ok"}))
    assert context.message_chars == first + second
    assert context.turn_ids == ["t1", None]
    assert context.has_turn("t1") and not context.has_turn("t2")
    assert context.size_chars() == len("sys") + first + second


def test_dropping_a_turn_takes_its_messages_and_the_measure_out() -> None:
    context = _context(measured=(10, 10))
    context.add({"role": "user", "content": "é1"}, "t1")
    context.add({"role": "user", "content": "b"}, "t2")
    context.add({"role": "assistant", "content": "é3"}, "t1")
    assert context.drop_turn("t1") == 2
    assert context.messages == [{"role": "user", "content": "b"}]
    assert context.turn_ids == ["t2"]
    assert context.message_chars == len(json.dumps({"role": "user", "content": "b"}))
    assert context.measured is None
    assert context.drop_turn("t9") == 0
    context.add({"role": "user", "content": "ü"}, "t3")
    context.drop_turn("t2")
    assert context.message_chars == len('{"role": "user", "content": "ü"}')


def test_a_contexts_tokens_are_estimated_rounding_up() -> None:
    context = _context(system="x" * 10)
    assert context.tokens(4) == 3  # 10 / 4, rounded up
    assert context.tokens(5) == 2
    assert context.tokens(4, tools_chars=3) == 4  # 13 / 4
    assert context.tokens(4, tools_chars=2) == 3


def test_a_measured_context_adds_an_estimate_of_what_came_since() -> None:
    context = _context(system="x" * 30, measured=(100, 10))
    assert context.tokens(4) == 105  # 20 more characters: 5 tokens
    assert context.tokens(4, tools_chars=1000) == 105  # the measure has the tools
    context.measured = (100, 27)
    assert context.tokens(4) == 100  # 3 more characters: no whole token
    context.measured = (100, 50)
    assert context.tokens(4) == 100  # smaller than measured: never less


# --- event checks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"t": "done", "turn_id": "t"}, None),
        ({"t": "done", "turn_id": "t", "replies": []}, None),
        ({"t": "done", "turn_id": "t", "replies": ["a", "b"]}, None),
        ({"t": "done"}, "a done event needs a text turn_id"),
        ({"t": "done", "turn_id": 3}, "a done event needs a text turn_id"),
        ({"t": "done", "turn_id": "t", "replies": "a"}, "replies must be a list of texts"),
        ({"t": "done", "turn_id": "t", "replies": ["a", 1]}, "replies must be a list of texts"),
        ({"t": "done", "turn_id": "t", "replies": [1, "a"]}, "replies must be a list of texts"),
        ({"t": "context"}, None),
        ({"t": "context", "context_id": 3, "flushed": 0, "kept": 0, "base_chars": 0}, None),
        ({"t": "context", "context_id": "3"}, "context_id must be a whole number"),
        ({"t": "context", "context_id": True}, "context_id must be a whole number"),
        ({"t": "context", "context_id": False}, "context_id must be a whole number"),
        ({"t": "context", "source": 1}, "source must be text"),
        ({"t": "context", "provider": None}, "provider must be text"),
        ({"t": "context", "model": 1}, "model must be text"),
        ({"t": "context", "system": []}, "system must be text"),
        ({"t": "context", "summary": 1}, "summary must be text"),
        ({"t": "context", "flushed": -1}, "flushed must be a whole number from 0"),
        ({"t": "context", "kept": "1"}, "kept must be a whole number from 0"),
        ({"t": "context", "base_chars": True}, "base_chars must be a whole number from 0"),
        ({"t": "context", "flushed": 1.0}, "flushed must be a whole number from 0"),
        ({"t": "msg", "role": "user"}, None),
        ({"t": "msg", "role": "assistant"}, None),
        ({"t": "msg", "role": "tool"}, None),
        ({"t": "msg", "role": "system"}, "role must be user, assistant or tool"),
        ({"t": "msg"}, "role must be user, assistant or tool"),
        ({"t": "supersede", "turn_id": "t"}, None),
        ({"t": "supersede"}, "a supersede event needs a text turn_id"),
        ({"t": "supersede", "turn_id": 1}, "a supersede event needs a text turn_id"),
        ({"t": "flush"}, None),
        ({"t": "flush", "upto": 0}, None),
        ({"t": "flush", "upto": 5}, None),
        ({"t": "flush", "upto": -1}, "upto must be a whole number from 0"),
        ({"t": "flush", "upto": False}, "upto must be a whole number from 0"),
        ({"t": "flush", "upto": None}, "upto must be a whole number from 0"),
        ({"t": "note"}, None),
        ({"t": "header"}, None),
        ({"t": "Note"}, "unknown event kind 'Note'"),
        ({}, "unknown event kind None"),
    ],
)
def test_each_event_kind_is_checked(event: dict[str, Any], problem: str | None) -> None:
    assert event_problem(event) == problem


# --- lines -----------------------------------------------------------------------------


def test_an_event_is_a_line_of_utf8_json_and_a_lone_surrogate_is_escaped() -> None:
    assert _line({"t": "msg", "content": "é"}) == '{"t": "msg", "content": "é"}\n'.encode()
    assert _line({"content": "\ud800x"}) == b'{"content": "\\ud800x"}\n'
    assert json.loads(_line({"content": "\ud800é"})) == {"content": "\ud800é"}


# --- reading a transcript --------------------------------------------------------------


def _write(session: Session, *events: Any, raw: bytes = b"") -> None:
    session.dir.mkdir(parents=True, exist_ok=True)
    data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    session.path.write_bytes(data + raw)


def test_a_missing_transcript_has_no_events_and_no_context(tmp_path: Path) -> None:
    session = Session(tmp_path, "k")
    assert session.path == tmp_path / "k" / TRANSCRIPT
    assert session.events() == []
    assert session.current_context() is None
    assert session.completed == {}


def test_unreadable_and_non_object_lines_are_skipped_with_their_line_numbers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = Session(tmp_path, "k")
    session.dir.mkdir()
    session.path.write_bytes(
        b'{"t": "note", "n": 1}\n\n   \n{torn\n[1, 2]\n' + b"[" * 100000 + b'\n{"t": "note"}'
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert session.events() == [{"t": "note", "n": 1}, {"t": "note"}]
    assert [r.getMessage() for r in caplog.records] == [
        f"{session.path}:4: unreadable transcript line skipped",
        f"{session.path}:5: transcript line is not an object; skipped",
        f"{session.path}:6: unreadable transcript line skipped",
    ]


def test_only_the_first_object_is_taken_for_the_header(tmp_path: Path) -> None:
    session = Session(tmp_path, "k")
    newer = {"t": "header", "version": TRANSCRIPT_VERSION + 1}
    _write(session, {"t": "note"}, newer)
    assert len(session.events()) == 2
    _write(session, newer, {"t": "note"})
    with pytest.raises(FileTooNew, match="is at version"):
        session.events()
    _write(session, raw=b'[1]\n{"t": "header", "version": 99}\n')
    with pytest.raises(FileTooNew, match=str(session.path)):
        session.load()


def test_a_transcript_replays_to_its_context_and_finished_turns(tmp_path: Path) -> None:
    session = Session(tmp_path, "k")
    _write(
        session,
        header_event(),
        {"t": "done", "turn_id": "t0", "replies": None},
        {"t": "msg", "role": "user", "content": "before any context"},
        {"t": "flush", "upto": 3},
        {"t": "supersede", "turn_id": "t0"},
        {"t": "context", "context_id": 7, "source": "src", "provider": "p", "model": "m",
         "system": "systém", "summary": "sum", "flushed": 1, "kept": 2,
         "soft_flushed": True, "base_chars": 4},
        {"t": "msg", "ts": 1.5, "turn_id": "t1", "role": "user", "content": "hi"},
        {"t": "msg", "turn_id": 5, "role": "assistant", "content": "yo"},
        {"t": "done", "turn_id": "t1", "replies": ["yo"]},
    )  # fmt: skip
    context = session.current_context()
    assert context is not None
    assert (context.context_id, context.source, context.provider, context.model) == (
        7, "src", "p", "m"
    )  # fmt: skip
    assert (context.system, context.summary, context.flushed, context.kept) == (
        "systém", "sum", 1, 2
    )  # fmt: skip
    assert context.soft_flushed is True and context.base_chars == 4
    assert context.messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]
    assert context.turn_ids == ["t1", None]
    assert session.completed == {"t0": [], "t1": ["yo"]}


def test_a_context_events_defaults(tmp_path: Path) -> None:
    session = Session(tmp_path, "k")
    _write(session, {"t": "context", "system": "abcdé", "flushed": 3, "soft_flushed": 1})
    context = session.current_context()
    assert context is not None
    assert (context.context_id, context.source, context.provider, context.model) == (
        0, "", "", ""
    )  # fmt: skip
    assert (context.summary, context.flushed, context.kept) == ("", 3, 3)
    assert context.soft_flushed is False  # only true itself
    assert context.base_chars == 5
    _write(session, {"t": "context"})
    context = session.current_context()
    assert context is not None
    assert (context.system, context.flushed, context.kept, context.base_chars) == ("", 0, 0, 0)


def test_flushes_move_forward_only_and_an_early_one_is_remembered(tmp_path: Path) -> None:
    session = Session(tmp_path, "k")
    _write(
        session,
        {"t": "context", "flushed": 2},
        {"t": "flush", "upto": 5},
        {"t": "flush", "upto": 3, "soft": True},
        {"t": "flush", "soft": True},
    )
    context = session.current_context()
    assert context is not None
    assert (context.flushed, context.soft_flushed) == (5, True)
    _write(session, {"t": "context"}, {"t": "flush", "upto": 1, "soft": 1})
    context = session.current_context()
    assert context is not None
    assert (context.flushed, context.soft_flushed) == (1, False)


def test_a_superseded_turn_leaves_the_context_and_the_flushed_count(tmp_path: Path) -> None:
    session = Session(tmp_path, "k")
    msg = {"t": "msg", "role": "user", "content": "x"}
    _write(
        session,
        {"t": "context", "flushed": 3},
        {**msg, "turn_id": "a"},
        {**msg, "turn_id": "b"},
        {**msg, "turn_id": "b"},
        {"t": "supersede", "turn_id": "b"},
    )
    context = session.current_context()
    assert context is not None
    assert (context.turn_ids, context.flushed) == (["a"], 1)
    _write(session, {"t": "context", "flushed": 1}, {**msg, "turn_id": "b"},
           {**msg, "turn_id": "b"}, {"t": "supersede", "turn_id": "b"})  # fmt: skip
    context = session.current_context()
    assert context is not None
    assert (context.turn_ids, context.flushed) == ([], 0)


def test_a_bad_event_is_skipped_with_its_line_and_problem(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = Session(tmp_path, "k")
    _write(session, {"t": "context"}, {"t": "msg", "role": "system"}, {"t": "msg", "role": "user"})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        context = session.current_context()
    assert context is not None and len(context.messages) == 1
    assert [r.getMessage() for r in caplog.records] == [
        f"{session.path}:2: transcript event skipped: role must be user, assistant or tool"
    ]


def test_the_file_is_read_again_only_when_its_size_changed(tmp_path: Path) -> None:
    session = Session(tmp_path, "k")
    _write(session, {"t": "done", "turn_id": "aa"})
    session.load()
    assert session.completed == {"aa": []}
    _write(session, {"t": "done", "turn_id": "bb"})  # the same size
    session.load()
    assert session.completed == {"aa": []}
    _write(session, {"t": "done", "turn_id": "ccc"})
    session.load()
    assert session.completed == {"ccc": []}
    session.path.unlink()
    session.load()
    assert session.completed == {} and session.context is None


# --- appending -------------------------------------------------------------------------


def test_a_new_transcript_starts_with_its_header_and_events_are_stamped(
    tmp_path: Path, clock: Clock
) -> None:
    session = Session(tmp_path / "sessions", "k")
    session.append({"t": "context", "system": "s"}, {"t": "msg", "role": "user", "content": "é"})
    assert _lines(session.path) == [
        {"ts": 1700000000.123, **header_event()},
        {"ts": 1700000000.123, "t": "context", "system": "s"},
        {"ts": 1700000000.123, "t": "msg", "role": "user", "content": "é"},
    ]
    assert "é".encode() in session.path.read_bytes()
    clock.now = 1700000001.0005
    session.append({"t": "done", "turn_id": "t1", "ts": 5})
    assert _lines(session.path)[3:] == [{"ts": 5, "t": "done", "turn_id": "t1"}]
    session.append({"t": "note"})
    assert _lines(session.path)[4] == {"ts": 1700000001.0, "t": "note"}
    context = session.current_context()
    assert context is not None and context.messages == [{"role": "user", "content": "é"}]
    assert session.completed == {"t1": []}


def test_an_appended_transcript_is_readable_by_all_and_written_by_us(
    tmp_path: Path, clock: Clock
) -> None:
    before = os.umask(0)
    try:
        Session(tmp_path, "k").append({"t": "note"})
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "k" / TRANSCRIPT).stat().st_mode) == 0o644


def test_an_append_after_a_torn_line_starts_a_new_line(tmp_path: Path, clock: Clock) -> None:
    session = Session(tmp_path, "k")
    _write(session, header_event(), raw=b'{"t": "done", "tur')
    session.append({"t": "done", "turn_id": "t2"})
    lines = session.path.read_bytes().split(b"\n")
    assert lines[1] == b'{"t": "done", "tur'
    assert json.loads(lines[2]) == {"ts": 1700000000.123, "t": "done", "turn_id": "t2"}
    session.append({"t": "note"})  # no longer torn: no empty line
    assert session.path.read_bytes().endswith(
        b'"turn_id": "t2"}\n{"ts": 1700000000.123, "t": "note"}\n'
    )
    assert Session(tmp_path, "k").events()[-2:] == [
        {"ts": 1700000000.123, "t": "done", "turn_id": "t2"},
        {"ts": 1700000000.123, "t": "note"},
    ]


def test_an_existing_transcript_gets_no_second_header(tmp_path: Path, clock: Clock) -> None:
    session = Session(tmp_path, "k")
    _write(session, {"t": "note"})
    session.append({"t": "done", "turn_id": "t"})
    assert [e["t"] for e in _lines(session.path)] == ["note", "done"]
    again = Session(tmp_path, "k2")
    _write(again, raw=b"")
    again.append({"t": "note"})
    assert [e["t"] for e in _lines(again.path)] == ["header", "note"]


def test_a_transcript_that_is_a_link_is_never_written_through(tmp_path: Path, clock: Clock) -> None:
    session = Session(tmp_path, "k")
    session.dir.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("")
    session.path.symlink_to(target)
    with pytest.raises(OSError):
        session.append({"t": "note"})
    assert target.read_text() == ""


def test_each_append_is_synced_and_a_batch_once_at_its_end(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(sessionmod.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    session = Session(tmp_path, "k")
    session.append({"t": "note"})
    assert len(synced) == 1
    with session.batch():
        session.append({"t": "note"})
        with session.batch():
            session.append({"t": "note"})
        assert len(synced) == 1  # the inner batch's end is not the end
        session.append({"t": "note"})
        assert len(synced) == 1
    assert len(synced) == 2
    with session.batch():
        pass
    assert len(synced) == 2  # nothing appended: nothing to sync
    assert session._batch == 0


def test_a_batch_ends_even_when_its_body_fails_and_syncs_what_it_wrote(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    monkeypatch.setattr(sessionmod.os, "fsync", synced.append)
    session = Session(tmp_path, "k")
    with pytest.raises(RuntimeError), session.batch():
        session.append({"t": "note"})
        raise RuntimeError("turn failed")
    assert len(synced) == 1 and session._batch == 0
    session.append({"t": "note"})
    assert len(synced) == 2


def test_a_batch_never_syncs_through_a_link(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session(tmp_path, "k")
    with pytest.raises(OSError), session.batch():
        session.append({"t": "note"})
        session.path.rename(tmp_path / "moved")
        session.path.symlink_to(tmp_path / "moved")


# --- rotation --------------------------------------------------------------------------


def test_a_transcript_rotates_once_past_the_bound_then_once_doubled(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rotations: list[int] = []
    real = Session.rotate

    def rotate(self: Session) -> Path:
        rotations.append(self.path.stat().st_size)
        return real(self)

    monkeypatch.setattr(Session, "rotate", rotate)
    header = len(_line({"ts": 1700000000.123, **header_event()}))
    note = len(_line({"ts": 1700000000.123, "t": "note"}))
    session = Session(tmp_path, "k", rotate_bytes=header + 2 * note)
    session.append({"t": "note"})
    session.append({"t": "note"})
    assert rotations == []  # at the bound: not past it
    session.append({"t": "note"})
    assert rotations == [header + 3 * note]
    rotated = session._rotated_size
    assert rotated == header == session.path.stat().st_size  # notes are not kept
    big = Session(tmp_path, "big", rotate_bytes=1)
    big.append({"t": "done", "turn_id": "t", "replies": ["x" * 50]})
    assert len(rotations) == 2
    size = big._rotated_size
    while big.path.stat().st_size + note <= 2 * size:
        big.append({"t": "note"})
    assert len(rotations) == 2  # not yet doubled
    big.append({"t": "note"})
    assert len(rotations) == 3


def test_rotation_archives_the_old_file_and_keeps_the_state(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    session = Session(tmp_path, "k")
    session.append(
        {"t": "done", "turn_id": "t0", "replies": ["old"]},
        {"t": "context", "context_id": 2, "source": "src", "provider": "p", "model": "m",
         "system": "sys", "summary": "sum", "flushed": 1, "kept": 1, "soft_flushed": True,
         "base_chars": 2},
        {"t": "msg", "turn_id": "t1", "role": "user", "content": "é"},
        {"t": "msg", "role": "assistant", "content": "b"},
        {"t": "done", "turn_id": "t1", "replies": ["b"]},
    )  # fmt: skip
    old = session.path.read_bytes()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        archive = session.rotate()
    assert archive.parent == session.dir / "archive"
    assert archive.name.startswith("transcript-20231114T221320Z-")
    assert archive.name.endswith(".jsonl.gz")
    assert len(archive.name) == len("transcript-20231114T221320Z-") + 6 + len(".jsonl.gz")
    assert gzip.decompress(archive.read_bytes()) == old
    ts = {"ts": 1700000000.123}
    assert _lines(session.path) == [
        {**ts, **header_event()},
        {**ts, "t": "done", "turn_id": "t0", "replies": ["old"]},
        {**ts, "t": "done", "turn_id": "t1", "replies": ["b"]},
        {**ts, "t": "context", "context_id": 2, "source": "src", "provider": "p",
         "model": "m", "system": "sys", "summary": "sum", "flushed": 1, "kept": 1,
         "soft_flushed": True, "base_chars": 2, "rotated": True},
        {**ts, "t": "msg", "turn_id": "t1", "role": "user", "content": "é"},
        {**ts, "t": "msg", "turn_id": None, "role": "assistant", "content": "b"},
    ]  # fmt: skip
    assert "é".encode() in session.path.read_bytes()
    assert session._size == session._rotated_size == session.path.stat().st_size
    assert session._torn is False
    assert [r.getMessage() for r in caplog.records] == [
        f"{session.path}: rotated at {session.rotate_bytes} bytes into {archive.name}"
    ]
    again = Session(tmp_path, "k")
    context, mine = again.current_context(), session.current_context()
    assert context is not None and mine is not None
    assert (context.messages, context.turn_ids) == (mine.messages, mine.turn_ids)
    assert again.completed == session.completed == {"t0": ["old"], "t1": ["b"]}


def test_rotation_without_a_context_keeps_the_latest_turns(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessionmod, "TRANSCRIPT_TURNS_KEPT", 2)
    session = Session(tmp_path, "k")
    session.append(*({"t": "done", "turn_id": f"t{n}"} for n in range(4)))
    session.rotate()
    assert session.completed == {"t2": [], "t3": []}
    assert [e.get("turn_id") for e in _lines(session.path)] == [None, "t2", "t3"]
    assert [e["t"] for e in _lines(session.path)] == ["header", "done", "done"]
    assert TRANSCRIPT_TURNS_KEPT == 1000


def test_only_the_newest_archives_are_kept(tmp_path: Path, clock: Clock) -> None:
    session = Session(tmp_path, "k")
    archives = session.dir / "archive"
    archives.mkdir(parents=True)
    for n in range(TRANSCRIPT_ARCHIVES_KEPT + 1):
        (archives / f"transcript-2020010{n}T000000Z-aaaaaa.jsonl.gz").write_bytes(b"")
    (archives / "other.gz").write_bytes(b"")
    session.append({"t": "note"})
    made = session.rotate()
    left = sorted(p.name for p in archives.iterdir())
    assert left == sorted(
        ["other.gz", made.name]
        + [f"transcript-2020010{n}T000000Z-aaaaaa.jsonl.gz" for n in range(2, 5)]
    )
    assert len(left) == TRANSCRIPT_ARCHIVES_KEPT + 1


# --- details a run depends on ----------------------------------------------------------


def test_a_new_session_holds_its_key_and_nothing_yet(tmp_path: Path) -> None:
    session = Session(tmp_path, "cli.chat-c")
    assert session.key == "cli.chat-c"
    assert session.context is None
    assert session.completed == {}


def test_a_measured_context_at_one_character_a_token_adds_nothing_when_smaller() -> None:
    context = _context(system="x" * 10, measured=(100, 10))
    assert context.tokens(1) == 100
    context.measured = (100, 50)
    assert context.tokens(1) == 100


def test_a_one_byte_torn_transcript_is_not_glued_onto(tmp_path: Path, clock: Clock) -> None:
    session = Session(tmp_path, "k")
    _write(session, raw=b"x")
    session.append({"t": "note"})
    assert session.path.read_bytes() == b'x\n{"ts": 1700000000.123, "t": "note"}\n'


def test_a_one_byte_transcript_is_not_new(tmp_path: Path, clock: Clock) -> None:
    session = Session(tmp_path, "k")
    _write(session, raw=b"\n")
    session.append({"t": "note"})
    assert session.path.read_bytes() == b'\n{"ts": 1700000000.123, "t": "note"}\n'


def test_an_empty_batch_of_a_new_session_syncs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    monkeypatch.setattr(sessionmod.os, "fsync", synced.append)
    session = Session(tmp_path, "k")
    with session.batch():
        pass
    assert synced == []
    assert not session.path.exists()


def test_a_bad_event_appended_is_logged_without_a_line_number(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    session = Session(tmp_path, "k")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        session.append({"t": "msg", "role": "system"})
    assert [r.getMessage() for r in caplog.records] == [
        f"{session.path}: transcript event skipped: role must be user, assistant or tool"
    ]


def test_an_archive_is_compressed_at_level_6(tmp_path: Path, clock: Clock) -> None:
    import random
    import zlib

    pick = random.Random(1)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota"]
    session = Session(tmp_path, "k")
    session.append(
        *(
            {"t": "note", "text": " ".join(pick.choice(words) for _ in range(40))}
            for _ in range(300)
        )
    )
    old = session.path.read_bytes()
    archive = session.rotate().read_bytes()
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    assert archive[8] == 0  # the gzip header's flag for levels 2 to 8
    assert archive[10:-8] == deflate.compress(old) + deflate.flush()
