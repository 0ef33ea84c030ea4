"""The queue's smaller reads and writes, exactly: a message's dictionary with what was
said and its files, the files column read back (and a damaged one taken as none), a
message's files prepared, the counts per group and state, and a chat's channel."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from orchestrator.media.inbox import StoredFile
from orchestrator.media.outbox import ReplyFile
from orchestrator.store.messages import (
    DEAD,
    DONE,
    INFLIGHT,
    PREPARING,
    QUEUED,
    Message,
    MessageQueue,
    _media,
    new_message,
)


@pytest.fixture
def queue(tmp_path: Path) -> MessageQueue:
    return MessageQueue(tmp_path / "queue.db")


def message(**changes: object) -> Message:
    made = new_message(
        group="g", session="s", chat="c", thread=None, sender="a", trust="member", text="hi",
        channel="cli",
    )  # fmt: skip
    return dataclasses.replace(made, **changes)  # type: ignore[arg-type]


PHOTO = StoredFile(
    "20261201-101010-0a1b2c3d.jpg", "image/jpeg", 2048, "image", original="Café.jpg", label="photo"
)
VOICE = StoredFile("20261201-101011-0c3d4e5f.ogg", None, 10, "voice", duration=3.5)


def test_a_message_dictionary_names_what_was_said_and_its_files_only_when_it_has_them() -> None:
    reply_file = ReplyFile(7, "report.pdf", "application/pdf", 99, "document", "/x/y", reply=1)
    full = message(
        id="m1", thread="t", said="@bot hi", media=(PHOTO, VOICE), files=(reply_file,),
        replies=("one", "two"), attempts=2, last_error="boom", created=12.5, state=INFLIGHT,
    )  # fmt: skip
    assert full.to_dict() == {
        "id": "m1", "group": "g", "session": "s", "chat": "c", "thread": "t", "sender": "a",
        "trust": "member", "state": INFLIGHT, "attempts": 2, "error": "boom", "created": 12.5,
        "replies": ["one", "two"], "said": "@bot hi",
        "media": [
            {"name": "20261201-101010-0a1b2c3d.jpg", "mime": "image/jpeg", "size": 2048,
             "kind": "image", "original": "Café.jpg", "label": "photo"},
            {"name": "20261201-101011-0c3d4e5f.ogg", "size": 10, "kind": "voice", "duration": 3.5},
        ],
        "files": [
            {"reply": 1, "seq": 7, "name": "report.pdf", "mime": "application/pdf",
             "size": 99, "kind": "document"},
        ],
    }  # fmt: skip
    assert list(full.to_dict()) == [
        "id", "group", "session", "chat", "thread", "sender", "trust", "state", "attempts",
        "error", "created", "replies", "said", "media", "files",
    ]  # fmt: skip
    assert full.images == ("files/inbox/20261201-101010-0a1b2c3d.jpg",)
    # an empty said is still what was said; no files, no keys for them
    assert message(id="m2", said="", created=1.0).to_dict() == {
        "id": "m2", "group": "g", "session": "s", "chat": "c", "thread": None, "sender": "a",
        "trust": "member", "state": QUEUED, "attempts": 0, "error": None, "created": 1.0,
        "replies": [], "said": "",
    }  # fmt: skip
    assert "said" not in message(said=None).to_dict()


def test_a_messages_files_are_stored_and_read_back(queue: MessageQueue) -> None:
    stored = queue.put(message(media=(PHOTO, VOICE)))
    assert queue.get(stored.id).media == (PHOTO, VOICE)  # type: ignore[union-attr]
    # kept as JSON with the sender's names as written, not escaped
    raw = queue._db.execute("SELECT media FROM messages WHERE id=?", (stored.id,)).fetchone()[0]
    assert json.loads(raw) == [PHOTO.to_dict(), VOICE.to_dict()]
    assert "Café.jpg" in raw
    plain = queue.put(message())
    row = queue._db.execute("SELECT media FROM messages WHERE id=?", (plain.id,)).fetchone()
    assert row == (None,)
    assert queue.get(plain.id).media == ()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("not json", "Expecting value"),  # ValueError
        ('[{"mime": "image/png"}]', "'name'"),  # KeyError
        ("[3]", "not subscriptable"),  # TypeError
        ('[{"name": "../x", "size": 1, "kind": "image"}]', "is not a name"),  # ValueError
    ],
)
def test_a_damaged_files_column_is_taken_as_none_and_said_so(
    raw: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="orchestrator.queue"):
        assert _media(raw) == ()
    [record] = caplog.records
    assert record.name == "orchestrator.queue" and record.levelno == logging.WARNING
    assert record.getMessage().startswith("a message's files could not be read (")
    assert why in record.getMessage()
    assert record.getMessage().endswith("); taken as none")


def test_an_empty_or_missing_files_column_is_no_files(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        assert _media(None) == () and _media("") == () and _media(b"[]") == ()
        assert _media("[]") == ()
    assert caplog.records == []  # nothing to warn of
    assert _media(json.dumps([PHOTO.to_dict()])) == (PHOTO,)


def test_prepared_queues_a_waiting_message_with_its_new_text(queue: MessageQueue) -> None:
    waiting = queue.put(message(state=PREPARING, text="[voice note]"))
    other = queue.put(message(state=PREPARING, text="[audio]"))
    before = queue._db.execute("SELECT updated FROM messages WHERE id=?", (waiting.id,))
    (updated_before,) = before.fetchone()
    assert queue.prepared(waiting.id, "the transcript", "what they said") is True
    got = queue.get(waiting.id)
    assert got is not None
    assert (got.state, got.text, got.said) == (QUEUED, "the transcript", "what they said")
    (updated,) = queue._db.execute(
        "SELECT updated FROM messages WHERE id=?", (waiting.id,)
    ).fetchone()
    assert updated >= updated_before and updated > 0
    # once queued it is not waiting: nothing changes
    assert queue.prepared(waiting.id, "again", None) is False
    assert queue.get(waiting.id) == got
    assert queue.prepared("no-such-id", "x", None) is False
    # what was said, when it is the text, is not kept twice
    assert queue.prepared(other.id, "same", "same") is True
    again = queue.get(other.id)
    assert again is not None and (again.state, again.text, again.said) == (QUEUED, "same", None)
    assert [m.id for m in queue.preparing()] == []


def test_counts_by_group_counts_the_states_asked_for(queue: MessageQueue) -> None:
    for group, state in [
        ("a", QUEUED), ("a", QUEUED), ("a", INFLIGHT), ("a", DONE), ("a", PREPARING),
        ("b", DEAD), ("b", DONE), ("c", DONE),
    ]:  # fmt: skip
        queue.put(message(group=group, state=state))
    # by default what is waiting, running and dead: not what is done or being prepared
    assert queue.counts_by_group() == {"a": {QUEUED: 2, INFLIGHT: 1}, "b": {DEAD: 1}}
    assert queue.counts_by_group((DONE,)) == {"a": {DONE: 1}, "b": {DONE: 1}, "c": {DONE: 1}}
    assert queue.counts_by_group((DONE, PREPARING)) == {
        "a": {DONE: 1, PREPARING: 1}, "b": {DONE: 1}, "c": {DONE: 1},
    }  # fmt: skip
    assert queue.counts_by_group(("nothing",)) == {}


def test_a_chats_channel_is_its_latest_messages_or_the_one_asked_for(
    queue: MessageQueue,
) -> None:
    queue.put(message(chat="c", channel="telegram", created=10.0))
    queue.put(message(chat="c", channel="matrix", created=30.0))
    queue.put(message(chat="c", channel="slack", created=20.0))
    queue.put(message(chat="c", group="other", channel="discord", created=40.0))
    queue.put(message(chat="d", channel="email", created=50.0))
    assert queue.channel_of_chat("g", "c") == "matrix"  # the latest, by creation
    assert queue.channel_of_chat("g", "c", "telegram") == "telegram"
    assert queue.channel_of_chat("g", "c", "discord") is None  # another group's
    assert queue.channel_of_chat("g", "nobody") is None
    assert queue.channel_of_chat("other", "c") == "discord"
    assert queue.channels_of_chat("g", "c") == ["matrix", "slack", "telegram"]
    assert queue.channels_of_chat("g", "nobody") == []


def test_a_file_reply_is_stored_once(queue: MessageQueue) -> None:
    stored = queue.put(message())
    report = ReplyFile(3, "report.txt", "text/plain", 5, "document", "/outbox/report.txt")
    assert queue.add_file_reply(stored.id, "the report", report) is True
    again = ReplyFile(3, "other.txt", "text/plain", 9, "document", "/outbox/other.txt")
    assert queue.add_file_reply(stored.id, "another", again) is False
    assert queue.files_of(stored.id) == {3: report}
    assert queue.replies_of(stored.id) == [(3, "the report")]


def test_setting_a_queue_aside_keeps_what_waits_to_be_prepared_and_its_files(
    tmp_path: Path,
) -> None:
    from orchestrator.home import Home
    from orchestrator.store.messages import open_queue, set_aside

    home = Home(tmp_path)
    old = open_queue(home)
    waiting = old.put(message(state=PREPARING, media=(VOICE,)))
    queued = old.put(message(media=(PHOTO,)))
    old.close()
    _aside, copied, problem = set_aside(home)
    assert (copied, problem) == (2, None)
    fresh = open_queue(home)
    try:
        got = [fresh.get(waiting.id), fresh.get(queued.id)]
        assert [(m.state, m.media) for m in got if m is not None] == [
            (PREPARING, (VOICE,)),
            (QUEUED, (PHOTO,)),
        ]
    finally:
        fresh.close()


def test_recent_is_the_newest_first(queue: MessageQueue) -> None:
    ids = [queue.put(message(text=f"m{n}")).id for n in range(5)]
    assert [m.id for m in queue.recent(3)] == ids[:-4:-1]
    assert [m.id for m in queue.recent()] == ids[::-1]
    assert [m.text for m in queue.recent(1)] == ["m4"]
    more = ids + [queue.put(message()).id for _ in range(96)]
    assert [m.id for m in queue.recent()] == more[:-101:-1]  # 100 by default


def test_the_outbox_files_sent_before_a_time(queue: MessageQueue) -> None:
    stored = queue.put(message())
    for seq, created in [(1, 100.0), (2, 200.0), (3, 300.0)]:
        file = ReplyFile(seq, f"f{seq}.txt", "text/plain", 1, "document", f"/outbox/f{seq}.txt")
        assert queue.add_file_reply(stored.id, f"file {seq}", file)
        queue._db.execute("UPDATE reply_files SET created=? WHERE seq=?", (created, seq))
    assert queue.outbox_files_before(200.0) == ["/outbox/f1.txt"]  # sent before, not at
    assert sorted(queue.outbox_files_before(301.0)) == [f"/outbox/f{n}.txt" for n in (1, 2, 3)]
    assert queue.outbox_files_before(100.0) == []


def test_the_messages_waiting_to_be_prepared_oldest_first(queue: MessageQueue) -> None:
    first = queue.put(message(state=PREPARING, text="one"))
    queue.put(message(text="queued"))
    second = queue.put(message(state=PREPARING, text="two"))
    assert [(m.id, m.text, m.state) for m in queue.preparing()] == [
        (first.id, "one", PREPARING),
        (second.id, "two", PREPARING),
    ]


def test_the_next_reply_seq_follows_the_turns_replies_not_the_hosts_notices(
    queue: MessageQueue,
) -> None:
    stored = queue.put(message())
    assert queue.next_reply_seq(stored.id) == 0
    queue.add_host_notices(stored.id, ["a notice"])
    assert queue.next_reply_seq(stored.id) == 0  # the host's notices are not counted
    assert queue.add_reply(stored.id, 0, "first")
    assert queue.add_reply(stored.id, 4, "after a gap")
    assert queue.next_reply_seq(stored.id) == 5


def test_a_pause_is_taken_once_while_it_holds(
    queue: MessageQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.store import messages

    monkeypatch.setattr(messages.time, "time", lambda: 100.0)
    assert queue.pause_once("g", "disk", "full") is True
    assert queue.pause_once("g", "disk", "full") is False  # held, with no end
    assert queue.pause_once("g", "budget", "cap", expires=100.0) is True  # another holder
    assert queue.pause_once("g", "budget", "cap", expires=200.0) is True  # expired at 100
    assert queue.pause_once("g", "budget", "cap") is False  # in force until 200
    assert sorted((p.holder, p.expires or 0) for p in queue.pauses("g", now=100.0)) == [
        ("budget", 200.0),
        ("disk", 0),
    ]


def test_a_budget_lift_holds_until_its_end(queue: MessageQueue) -> None:
    import time

    until = time.time() + 3600
    queue.lift_budget("g", until)
    assert queue.budget_lifted("g") == until  # now, by the clock
    assert queue.budget_lifted("g", now=until - 1) == until
    assert queue.budget_lifted("g", now=until) is None
    assert queue.budget_lifted("other") is None


def test_a_new_message_keeps_what_was_said_only_when_it_differs() -> None:
    def made(**extra: object) -> Message:
        return new_message(
            group="g", session="s", chat="c", thread="t", sender="a", trust="member",
            text="hi", channel="cli", **extra,  # type: ignore[arg-type]
        )  # fmt: skip

    plain = made()
    assert (plain.state, plain.said, plain.media, plain.thread) == (QUEUED, None, (), "t")
    assert made(said="@bot hi").said == "@bot hi"
    assert made(said="hi").said is None  # the same as the text: not kept twice
    waiting = made(media=(VOICE,), preparing=True)
    assert (waiting.state, waiting.media) == (PREPARING, (VOICE,))
    assert made(media=(PHOTO,)).state == QUEUED
    assert made().id != plain.id and len(plain.id) == 32


def test_a_queue_behind_this_release_held_by_an_older_daemon_is_refused_with_the_way_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from orchestrator.home import Home
    from orchestrator.store import messages
    from orchestrator.store.schema import SchemaBehind

    home = Home(tmp_path)
    messages.open_queue(home).close()
    path = home.state_dir / messages.QUEUE_FILE
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 3")
    db.close()
    monkeypatch.setattr(messages, "lock_holder", lambda _home: 4242)
    with pytest.raises(SchemaBehind) as refused:
        messages.open_queue(home)
    assert refused.value.hint == (
        "the daemon (pid 4242) runs an older release: restart it with this one (orchestrator "
        "down, then orchestrator up); it upgrades the file at its start"
    )
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (3,)  # nothing was changed
    db.close()
