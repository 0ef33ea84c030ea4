"""The durable message queue, in the state database (``store.db``).

An inbound message is acknowledged to its sender only after its row is committed.
Messages of one session are delivered in order, one at a time; a failed delivery is
retried with backoff, then dead-lettered with its reason. Replies are keyed by
(message id, sequence number), so a reply stored twice is kept once.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.errors import BadInput
from orchestrator.home import Home, lock_holder
from orchestrator.limits import (
    DELIVERY_BACKOFF_FIRST_SECONDS,
    DELIVERY_BACKOFF_MAX_SECONDS,
    HOST_NOTICE_SEQ,
    MAX_DELIVERY_ATTEMPTS,
)
from orchestrator.media.inbox import StoredFile
from orchestrator.media.outbox import ReplyFile
from orchestrator.protocol import CLEAR_COMMAND
from orchestrator.store.db import QueueCorrupt, QueueFull, Reserve, Row, StateDB
from orchestrator.store.rows import flag, opt_real, opt_text, real, text, whole

log = logging.getLogger("orchestrator.queue")
QUEUE_FILE = "queue.db"
PAUSE_POLL_SECONDS = 0.2  # how often a pause looks whether the group's turns are done
# Recorded with a message in its transaction (a chat app's update id); returns the id of
# a message stored for the same update already, or None.
Claim = Callable[[sqlite3.Connection, "Message"], str | None]


class GroupBusy(BadInput):
    """A group's turns did not finish in time for what needs it paused."""


__all__ = ["QueueCorrupt", "QueueFull", "Reserve"]  # raised by the queue, kept with it

QUEUED, INFLIGHT, DONE, DEAD = "queued", "inflight", "done", "dead"
# waiting for its files to be prepared (transcribed, a PDF's text) before its turn: it
# holds its session's place, as a queued message does
PREPARING = "preparing"
PENDING = (QUEUED, INFLIGHT, PREPARING)


@dataclass(frozen=True)
class Pause:
    """A pause lease: while it holds, the group's messages wait (nothing is lost).

    ``refuse_new``: new messages are refused with ``reason`` instead of waiting."""

    group: str
    holder: str
    reason: str
    refuse_new: bool
    created: float
    expires: float | None

    def to_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "holder": self.holder,
            "reason": self.reason,
            "refuse_new": self.refuse_new,
            "created": self.created,
            "expires": self.expires,
        }


@dataclass(frozen=True)
class Message:
    id: str
    group: str
    session: str
    chat: str
    thread: str | None
    sender: str
    trust: str
    text: str
    channel: str
    state: str
    attempts: int = 0
    last_error: str | None = None
    created: float = 0.0
    replies: tuple[str, ...] = field(default=())
    # what the person said, when the turn's text differs (a chat app took the bot's
    # mention off the front); None when they are the same
    said: str | None = None
    media: tuple[StoredFile, ...] = ()  # the files it came with, in files/inbox
    files: tuple[ReplyFile, ...] = ()  # the files its replies carry (by reply seq)

    @property
    def images(self) -> tuple[str, ...]:
        """The paths (under the agent folder) of the images it came with."""
        return tuple(m.path for m in self.media if m.kind == "image")

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "group": self.group,
            "session": self.session,
            "chat": self.chat,
            "thread": self.thread,
            "sender": self.sender,
            "trust": self.trust,
            "state": self.state,
            "attempts": self.attempts,
            "error": self.last_error,
            "created": self.created,
            "replies": list(self.replies),
            **({"said": self.said} if self.said is not None else {}),
            **({"media": [m.to_dict() for m in self.media]} if self.media else {}),
            **({"files": [f.to_dict() for f in self.files]} if self.files else {}),
        }


_COLUMNS = (
    "id, group_folder, session, chat, thread, sender, trust, text, channel, state, "
    "attempts, last_error, created, said, media"
)


def _media(raw: object) -> tuple[StoredFile, ...]:
    if not isinstance(raw, str) or not raw:
        return ()
    try:
        return tuple(StoredFile.from_dict(item) for item in json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("a message's files could not be read (%s); taken as none", exc)
        return ()


def _media_json(media: tuple[StoredFile, ...]) -> str | None:
    return json.dumps([m.to_dict() for m in media], ensure_ascii=False) if media else None


def _row_values(m: Message) -> tuple[object, ...]:
    """The message's values in the order of _COLUMNS, less attempts and last_error."""
    return (
        m.id,
        m.group,
        m.session,
        m.chat,
        m.thread,
        m.sender,
        m.trust,
        m.text,
        m.channel,
        m.state,
        m.created,
    )


def _files(db: sqlite3.Connection, message_id: str) -> dict[int, ReplyFile]:
    """The files of a message's replies, by reply seq."""
    return {
        int(r[0]): ReplyFile(whole(r[0]), text(r[1]), text(r[2]), whole(r[3]), text(r[4]),
                             text(r[5]))
        for r in db.execute(
            "SELECT seq, name, mime, size, kind, path FROM reply_files WHERE message_id=?"
            " ORDER BY seq",
            (message_id,),
        )
    }  # fmt: skip


def _row(row: Row, replies: tuple[str, ...] = (), files: tuple[ReplyFile, ...] = ()) -> Message:
    return Message(
        text(row[0]),
        text(row[1]),
        text(row[2]),
        text(row[3]),
        opt_text(row[4]),
        text(row[5]),
        text(row[6]),
        text(row[7]),
        text(row[8]),
        text(row[9]),
        whole(row[10]),
        opt_text(row[11]),
        real(row[12]),
        replies,
        opt_text(row[13]),
        _media(row[14]),
        files,
    )


class MessageQueue(StateDB):
    """Messages, their replies and the pause leases, in the state database."""

    def enqueue(
        self,
        *,
        group: str,
        session: str,
        chat: str,
        thread: str | None,
        sender: str,
        trust: str,
        text: str,
        channel: str,
        claim: Claim | None = None,
    ) -> Message:
        """Store a message; returns once it is committed to disk.

        ``claim(db, message)`` runs in the same transaction first: it records where the
        message came from (a chat app's update id) and returns the id of a message
        stored for it already, which is then returned instead (nothing new is stored):
        an update read twice is queued once."""
        message = new_message(
            group=group, session=session, chat=chat, thread=thread, sender=sender,
            trust=trust, text=text, channel=channel,
        )  # fmt: skip
        return self.put(message, claim)

    def put(self, message: Message, claim: Claim | None = None) -> Message:
        """Store ``message`` (made by ``new_message``); returns once it is committed.
        ``claim`` as for ``enqueue``: the message stored for it already may come back."""

        def work(db: sqlite3.Connection) -> str | None:
            earlier = claim(db, message) if claim is not None else None
            if earlier is None:
                insert_message(db, message)
            return earlier

        earlier = self.transaction(work)
        if earlier is not None:
            found = self.get(earlier)
            if found is not None:
                return found
        return message

    def record_done(
        self,
        *,
        group: str,
        session: str,
        chat: str,
        thread: str | None,
        sender: str,
        trust: str,
        text: str,
        channel: str,
        reply: str,
    ) -> Message:
        """Store a message the host answered itself (never delivered to the runner),
        done, with its one reply; in one transaction."""
        return self.put_answered(
            new_message(
                group=group, session=session, chat=chat, thread=thread, sender=sender,
                trust=trust, text=text, channel=channel,
            ),
            reply,
        )  # fmt: skip

    def put_answered(self, message: Message, reply: str) -> Message:
        """Store ``message`` as one the host answered itself: done, with its one reply."""
        message = replace(message, state=DONE, replies=(reply,))

        def work(db: sqlite3.Connection) -> None:
            insert_message(db, message)
            db.execute(
                "INSERT INTO replies (message_id, seq, text, created) VALUES (?,?,?,?)",
                (message.id, 0, reply, message.created),
            )

        self.transaction(work)
        return message

    def recover(self) -> int:
        """After a crash: messages that were in flight are queued again."""
        return self.transaction(
            lambda db: (
                db.execute(
                    "UPDATE messages SET state=?, updated=? WHERE state=?",
                    (QUEUED, time.time(), INFLIGHT),
                ).rowcount
            )
        )

    def release_stale(self, held: set[str]) -> int:
        """Messages marked in flight that no worker holds (a commit that failed, such as
        on a full disk) are queued again; how many."""
        with self._lock:
            rows = self._db.execute("SELECT id FROM messages WHERE state=?", (INFLIGHT,))
            stale = [str(r[0]) for r in rows if str(r[0]) not in held]
        if not stale:
            return 0
        now = time.time()
        return self.transaction(
            lambda db: sum(
                db.execute(
                    "UPDATE messages SET state=?, updated=? WHERE id=? AND state=?",
                    (QUEUED, now, message_id, INFLIGHT),
                ).rowcount
                for message_id in stale
            )
        )

    def runnable(self, now: float | None = None) -> list[Message]:
        """The oldest pending message of each session, when it may be delivered now: its
        group has no pause in force (read in the same query: one read of the database
        per call)."""
        now = time.time() if now is None else now
        with self.reading() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS}, not_before FROM messages WHERE state IN (?, ?, ?)"
                " AND group_folder NOT IN (SELECT group_folder FROM pauses"
                " WHERE expires IS NULL OR expires>?) ORDER BY seq",
                (*PENDING, now),
            ).fetchall()
        heads: dict[tuple[str, str], tuple[object, ...]] = {}
        for row in rows:
            heads.setdefault((str(row[1]), str(row[2])), row)
        return [_row(r[:-1]) for r in heads.values() if r[9] == QUEUED and real(r[-1]) <= now]

    def next_wakeup(self) -> float | None:
        """When the earliest message in backoff becomes deliverable."""
        with self.reading() as db:
            row = db.execute(
                "SELECT MIN(not_before) FROM messages WHERE state=? AND not_before > ?",
                (QUEUED, time.time()),
            ).fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def claim(self, message_id: str) -> bool:
        """Mark a queued message in flight; False when it is not queued any more, or its
        group is paused now (checked in the same transaction: once a pause is committed,
        no turn of the group starts). Not synced by itself: a claim lost at a power cut
        leaves the message queued, and it is delivered again (at least once, as ever);
        the turn's completion, which is synced, syncs it too."""
        now = time.time()
        return self.transaction(
            lambda db: (
                db.execute(
                    "UPDATE messages SET state=?, attempts=attempts+1, updated=? "
                    "WHERE id=? AND state=? AND group_folder NOT IN (SELECT group_folder"
                    " FROM pauses WHERE expires IS NULL OR expires>?)",
                    (INFLIGHT, now, message_id, QUEUED, now),
                ).rowcount
                == 1
            ),
            durable=False,
        )

    @contextmanager
    def paused(
        self,
        group: str,
        holder: str,
        reason: str,
        *,
        wait: float,
        progress: Callable[[int], None] | None = None,
    ) -> Iterator[None]:
        """Pause ``group`` under ``holder``'s lease and wait (at most ``wait`` seconds)
        until none of its turns is in flight; the body runs with nothing of the group
        running and none starting, and the lease ends with it, however it ends.
        GroupBusy when turns are still running at the deadline (nothing else done).
        ``progress(n)`` hears how many still run, each time that changes."""
        self.pause(group, holder, reason)
        try:
            deadline = time.monotonic() + wait
            told = 0
            while busy := self.in_flight(group):
                if time.monotonic() > deadline:
                    raise GroupBusy(
                        f"{busy} turn(s) of {group} are still running; nothing was changed",
                        hint="try again when they are done (see: orchestrator status)",
                    )
                if progress is not None and busy != told:
                    progress(busy)
                told = busy
                time.sleep(PAUSE_POLL_SECONDS)
            yield
        finally:
            self.resume(group, holder)

    def complete(self, message_id: str, replies: list[str], first_seq: int = 0) -> None:
        """Store the replies, numbered from ``first_seq`` (a duplicate (id, seq) is
        dropped), and mark the message done."""
        now = time.time()

        def work(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT OR IGNORE INTO replies (message_id, seq, text, created) VALUES (?,?,?,?)",
                [(message_id, seq, text, now) for seq, text in enumerate(replies, first_seq)],
            )
            db.execute(
                "UPDATE messages SET state=?, last_error=NULL, updated=? WHERE id=?",
                (DONE, now, message_id),
            )

        self.transaction(work)

    def fail(self, message_id: str, error: str, *, final: bool = False) -> str:
        """Back off and queue again, or dead-letter after the last attempt (at once when
        ``final``: trying again cannot help); the new state."""

        def work(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT attempts FROM messages WHERE id=?", (message_id,)).fetchone()
            attempts = int(row[0]) if row else MAX_DELIVERY_ATTEMPTS
            if final or attempts >= MAX_DELIVERY_ATTEMPTS:
                state, not_before = DEAD, 0.0
            else:
                state = QUEUED
                not_before = time.time() + delivery_backoff(attempts)
            db.execute(
                "UPDATE messages SET state=?, last_error=?, not_before=?, updated=? WHERE id=?",
                (state, error[:2000], not_before, time.time(), message_id),
            )
            return state

        return self.transaction(work)

    def defer(self, message_id: str, seconds: float, reason: str) -> bool:
        """Queue an in-flight message again after ``seconds`` without counting the
        attempt: the fault was not the message's (the engine was away)."""
        return self.transaction(
            lambda db: (
                db.execute(
                    "UPDATE messages SET state=?, attempts=MAX(attempts-1, 0), last_error=?,"
                    " not_before=?, updated=? WHERE id=? AND state=?",
                    (QUEUED, reason[:2000], time.time() + seconds, time.time(), message_id,
                     INFLIGHT),
                ).rowcount
                == 1
            )
        )  # fmt: skip

    def retry(self, message_id: str) -> bool:
        """Queue a dead-lettered message again with fresh attempts."""
        return self.transaction(
            lambda db: (
                db.execute(
                    "UPDATE messages SET state=?, attempts=0, not_before=0, updated=? "
                    "WHERE id=? AND state=?",
                    (QUEUED, time.time(), message_id, DEAD),
                ).rowcount
                == 1
            )
        )

    def add_reply(self, message_id: str, seq: int, text: str) -> bool:
        """Store one reply as it is made (before its turn ends); False when that
        (message, seq) was stored already."""
        return self.transaction(
            lambda db: (
                db.execute(
                    "INSERT OR IGNORE INTO replies (message_id, seq, text, created)"
                    " VALUES (?,?,?,?)",
                    (message_id, seq, text, time.time()),
                ).rowcount
                == 1
            )
        )

    def get(self, message_id: str) -> Message | None:
        """The message with its replies and their files, as one snapshot (read on the
        reader's connection: a watcher's read does not wait behind a synced commit)."""
        with self.reading() as db:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE id=?", (message_id,)
            ).fetchone()
            if row is None:
                return None
            rows = db.execute(
                "SELECT seq, text FROM replies WHERE message_id=? ORDER BY seq", (message_id,)
            ).fetchall()
            replies = tuple(text(r[1]) for r in rows)
            places = {whole(r[0]): n for n, r in enumerate(rows)}
            files = tuple(
                replace(f, reply=places.get(f.seq, -1)) for f in _files(db, message_id).values()
            )
        return _row(row, replies, files)

    def files_of(self, message_id: str) -> dict[int, ReplyFile]:
        """The files of a message's replies, by reply seq (read on the reader's
        connection, as ``get``: a chat's delivery does not wait behind a synced commit)."""
        with self.reading() as db:
            return _files(db, message_id)

    def add_file_reply(self, message_id: str, text_: str, file: ReplyFile) -> bool:
        """Store a reply that carries a file (its text: the caption, or a line naming the
        file) with the file's record, in one transaction; False when that (message,
        seq) was stored already."""
        now = time.time()

        def work(db: sqlite3.Connection) -> bool:
            added = db.execute(
                "INSERT OR IGNORE INTO replies (message_id, seq, text, created) VALUES (?,?,?,?)",
                (message_id, file.seq, text_, now),
            ).rowcount
            if added != 1:
                return False
            db.execute(
                "INSERT INTO reply_files (message_id, seq, name, mime, size, kind, path,"
                " created) VALUES (?,?,?,?,?,?,?,?)",
                (message_id, file.seq, file.name, file.mime, file.size, file.kind, file.path,
                 now),
            )  # fmt: skip
            return True

        return self.transaction(work)

    def outbox_files_before(self, cutoff: float) -> list[str]:
        """The outbox paths of files sent before ``cutoff`` (housekeeping removes them)."""
        with self._lock:
            return [
                str(r[0])
                for r in self._db.execute("SELECT path FROM reply_files WHERE created<?", (cutoff,))
            ]

    def preparing(self) -> list[Message]:
        """Messages whose files wait to be prepared, oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE state=? ORDER BY seq", (PREPARING,)
            ).fetchall()
        return [_row(r) for r in rows]

    def prepared(self, message_id: str, text_: str, said: str | None) -> bool:
        """A message's files are prepared: its text (and what was said) become these, and
        it is queued for its turn; False when it was not waiting."""
        return self.transaction(
            lambda db: (
                db.execute(
                    "UPDATE messages SET text=?, said=?, state=?, updated=? WHERE id=? AND"
                    " state=?",
                    (text_, said if said != text_ else None, QUEUED, time.time(), message_id,
                     PREPARING),
                ).rowcount
                == 1
            )
        )  # fmt: skip

    def chat_messages(
        self,
        group: str,
        chat: str,
        since: float = 0.0,
        limit: int = 100,
        channel: str | None = None,
    ) -> list[Message]:
        """The messages of one chat of a group (of one channel's, when given) created at
        or after ``since``, the oldest first, at most ``limit`` (the newest of them):
        what a channel polls to show what arrived on its own, such as a task's run."""
        sql = "SELECT id FROM messages WHERE group_folder=? AND chat=? AND created>=?"
        args: list[object] = [group, chat, since]
        if channel is not None:
            sql += " AND channel=?"
            args.append(channel)
        with self._lock:
            ids = [
                r[0]
                for r in self._db.execute(sql + " ORDER BY created DESC LIMIT ?", (*args, limit))
            ]
        found = (self.get(message_id) for message_id in reversed(ids))
        return [m for m in found if m is not None]

    def mark_others_words(self, message_id: str) -> None:
        """Record that the turn answering ``message_id`` received others' words from a
        tool (an MCP server's result): from now on its session counts as having had
        words from someone who is not a creator, until its next ``/clear``."""

        def work(db: sqlite3.Connection) -> None:
            db.execute("UPDATE messages SET others_words=1 WHERE id=?", (message_id,))

        self.transaction(work)

    def others_in_session(self, message_id: str, trusted: str) -> int:
        """How many messages from senders not of trust ``trusted`` came before
        ``message_id`` in its session since the session's last completed ``/clear``,
        and how many turns there (``message_id``'s own included) received others' words
        from a tool: text the session's context may still carry (a compaction summary
        carries it too, so only ``/clear`` resets the count)."""
        with self._lock:
            row = self._db.execute(
                "SELECT seq, group_folder, session FROM messages WHERE id=?", (message_id,)
            ).fetchone()
            if row is None:
                return 0
            seq, group, session = row
            clear = self._db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE group_folder=? AND session=?"
                " AND seq<? AND state=? AND TRIM(text)=?",
                (group, session, seq, DONE, CLEAR_COMMAND),
            ).fetchone()[0]
            return int(
                self._db.execute(
                    "SELECT COUNT(*) FROM messages WHERE group_folder=? AND session=?"
                    " AND seq>? AND ((seq<? AND trust<>?) OR (seq<=? AND others_words=1))",
                    (group, session, clear, seq, trusted, seq),
                ).fetchone()[0]
            )

    def trusts_in_sessions(self, group: str, sessions: Sequence[str]) -> set[str]:
        """The trust of every sender who spoke in ``group``'s ``sessions`` since each
        one's last completed ``/clear``: whom a session's context may still hold."""
        found: set[str] = set()
        with self._lock:
            for session in sessions:
                clear = self._db.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE group_folder=? AND "
                    "session=? AND state=? AND TRIM(text)=?",
                    (group, session, DONE, CLEAR_COMMAND),
                ).fetchone()[0]
                found.update(
                    row[0]
                    for row in self._db.execute(
                        "SELECT DISTINCT trust FROM messages WHERE group_folder=? AND "
                        "session=? AND seq>?",
                        (group, session, clear),
                    )
                )
        return found

    def add_host_notices(self, message_id: str, texts: list[str]) -> list[int]:
        """Store replies the host itself adds to ``message_id`` (after any reply a turn
        can make, from HOST_NOTICE_SEQ), each under a sequence number never used before
        for that message, so no notice is dropped as a duplicate of another; the numbers."""

        def work(db: sqlite3.Connection) -> list[int]:
            top = db.execute(
                "SELECT MAX(seq) FROM replies WHERE message_id=? AND seq>=?",
                (message_id, HOST_NOTICE_SEQ),
            ).fetchone()[0]
            first = HOST_NOTICE_SEQ if top is None else int(top) + 1
            now = time.time()
            seqs = list(range(first, first + len(texts)))
            db.executemany(
                "INSERT INTO replies (message_id, seq, text, created) VALUES (?,?,?,?)",
                [(message_id, seq, text, now) for seq, text in zip(seqs, texts, strict=True)],
            )
            return seqs

        return self.transaction(work)

    def next_reply_seq(self, message_id: str) -> int:
        """The sequence number the next reply of a turn of ``message_id`` takes: after
        every reply stored so far (an earlier attempt's included), before the host's
        own notices."""
        rows = self.read(
            "SELECT MAX(seq) FROM replies WHERE message_id=? AND seq>=0 AND seq<?",
            (message_id, HOST_NOTICE_SEQ),
        )
        top = rows[0][0] if rows else None
        return 0 if top is None else whole(top) + 1

    def replies_of(self, message_id: str) -> list[tuple[int, str]]:
        """(sequence, text) of every reply of ``message_id``, in order."""
        return [
            (whole(r[0]), text(r[1]))
            for r in self.read(
                "SELECT seq, text FROM replies WHERE message_id=? ORDER BY seq", (message_id,)
            )
        ]

    def in_flight(self, group: str) -> int:
        """How many of ``group``'s messages are in flight (a turn runs for each)."""
        row = self.read_one(
            "SELECT COUNT(*) FROM messages WHERE group_folder=? AND state=?", (group, INFLIGHT)
        )
        return whole(row[0]) if row else 0

    def counts_by_group(
        self, states: tuple[str, ...] = (QUEUED, INFLIGHT, DEAD)
    ) -> dict[str, dict[str, int]]:
        """group -> state -> how many of its messages are in that state."""
        marks = ",".join("?" * len(states))
        out: dict[str, dict[str, int]] = {}
        for group, state, count in self.read(
            "SELECT group_folder, state, COUNT(*) FROM messages"
            f" WHERE state IN ({marks}) GROUP BY group_folder, state",
            states,
        ):
            out.setdefault(text(group), {})[text(state)] = whole(count)
        return out

    def recent(self, limit: int = 100) -> list[Message]:
        """The newest ``limit`` messages, newest first (without their replies)."""
        rows = self.read(f"SELECT {_COLUMNS} FROM messages ORDER BY seq DESC LIMIT ?", (limit,))
        return [_row(r) for r in rows]

    def channels_of_chat(self, group: str, chat: str) -> list[str]:
        """The channels ``group`` has seen ``chat`` on, sorted."""
        return [
            text(r[0])
            for r in self.read(
                "SELECT DISTINCT channel FROM messages WHERE group_folder=? AND chat=?"
                " ORDER BY channel",
                (group, chat),
            )
        ]

    def channel_of_chat(self, group: str, chat: str, channel: str | None = None) -> str | None:
        """The channel of the latest message of ``chat`` in ``group`` (``channel`` when
        the group has seen the chat there); None when it has never seen that chat."""
        sql, args = "SELECT channel FROM messages WHERE group_folder=? AND chat=?", [group, chat]
        if channel is not None:
            sql += " AND channel=?"
            args.append(channel)
        row = self.read_one(sql + " ORDER BY created DESC LIMIT 1", tuple(args))
        return text(row[0]) if row else None

    def with_session_prefix(self, prefix: str) -> list[Message]:
        """Messages whose session key starts with ``prefix``, oldest first (an upgrade
        looks for keys of an older scheme)."""
        rows = self.read(
            f"SELECT {_COLUMNS} FROM messages WHERE SUBSTR(session, 1, ?)=? ORDER BY seq",
            (len(prefix), prefix),
        )
        return [_row(r) for r in rows]

    def set_sessions(self, sessions: dict[str, str]) -> int:
        """Give messages new session keys (message id -> key) in one transaction; how
        many rows changed."""
        return self.transaction(
            lambda db: sum(
                db.execute("UPDATE messages SET session=? WHERE id=?", (key, mid)).rowcount
                for mid, key in sessions.items()
            )
        )

    def dead_letters(self) -> list[Message]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE state=? ORDER BY seq", (DEAD,)
            ).fetchall()
        return [_row(r) for r in rows]

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM messages GROUP BY state")
            return {str(state): int(n) for state, n in rows}

    # pause leases

    def pause(
        self,
        group: str,
        holder: str,
        reason: str,
        *,
        refuse_new: bool = False,
        expires: float | None = None,
    ) -> Pause:
        """Take (or renew) ``holder``'s pause lease on ``group``."""
        lease = Pause(group, holder, reason, refuse_new, time.time(), expires)
        self.transaction(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO pauses (group_folder, holder, reason, refuse_new,"
                " created, expires) VALUES (?,?,?,?,?,?)",
                (group, holder, reason, int(refuse_new), lease.created, expires),
            )
        )
        return lease

    def pause_once(
        self, group: str, holder: str, reason: str, *, expires: float | None = None
    ) -> bool:
        """Take ``holder``'s lease on ``group`` unless one in force is held already;
        whether it was taken now (so a notice of it is given once)."""

        def work(db: sqlite3.Connection) -> bool:
            now = time.time()
            row = db.execute(
                "SELECT expires FROM pauses WHERE group_folder=? AND holder=?", (group, holder)
            ).fetchone()
            if row is not None and (row[0] is None or float(row[0]) > now):
                return False
            db.execute(
                "INSERT OR REPLACE INTO pauses (group_folder, holder, reason, refuse_new,"
                " created, expires) VALUES (?,?,?,0,?,?)",
                (group, holder, reason, now, expires),
            )
            return True

        return self.transaction(work)

    def lift_budget(self, group: str, until: float) -> None:
        """Let ``group``'s calls pass its money caps until ``until`` (the operator's
        ``group resume --budget``: the end of the period whose cap was reached)."""
        self.transaction(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO budget_lifts (group_folder, until, created) VALUES (?,?,?)",
                (group, until, time.time()),
            )
        )

    def budget_lifted(self, group: str, now: float | None = None) -> float | None:
        """Until when ``group``'s money caps are lifted, or None when they hold."""
        now = time.time() if now is None else now
        row = self.read_one(
            "SELECT until FROM budget_lifts WHERE group_folder=? AND until>?", (group, now)
        )
        return real(row[0]) if row else None

    def resume(self, group: str, holder: str | None = None) -> int:
        """Drop ``holder``'s lease on ``group`` (every lease when None); how many."""
        if holder is None:
            return self.transaction(
                lambda db: db.execute("DELETE FROM pauses WHERE group_folder=?", (group,)).rowcount
            )
        return self.transaction(
            lambda db: (
                db.execute(
                    "DELETE FROM pauses WHERE group_folder=? AND holder=?", (group, holder)
                ).rowcount
            )
        )

    def pauses(self, group: str | None = None, now: float | None = None) -> list[Pause]:
        """Leases in force (expired ones are ignored), oldest first."""
        now = time.time() if now is None else now
        query = "SELECT group_folder, holder, reason, refuse_new, created, expires FROM pauses"
        args: tuple[object, ...] = ()
        if group is not None:
            query += " WHERE group_folder=?"
            args = (group,)
        with self.reading() as db:  # an inbound message's check: not behind a sync
            rows = db.execute(query + " ORDER BY created", args).fetchall()
        return [
            Pause(text(r[0]), text(r[1]), text(r[2]), flag(r[3]), real(r[4]), opt_real(r[5]))
            for r in rows
            if r[5] is None or real(r[5]) > now
        ]

    def paused_groups(self, now: float | None = None) -> dict[str, Pause]:
        out: dict[str, Pause] = {}
        for lease in self.pauses(now=now):
            out.setdefault(lease.group, lease)
        return out


def new_message(
    *,
    group: str,
    session: str,
    chat: str,
    thread: str | None,
    sender: str,
    trust: str,
    text: str,
    channel: str,
    said: str | None = None,
    media: tuple[StoredFile, ...] = (),
    preparing: bool = False,
) -> Message:
    """A new message; ``preparing``: its files are prepared before it is queued."""
    return Message(
        uuid.uuid4().hex,
        group,
        session,
        chat,
        thread,
        sender,
        trust,
        text,
        channel,
        PREPARING if preparing else QUEUED,
        created=time.time(),
        said=said if said != text else None,
        media=media,
    )


def insert_message(db: sqlite3.Connection, message: Message) -> None:
    """Insert ``message`` inside a transaction the caller holds."""
    db.execute(
        "INSERT INTO messages (id, group_folder, session, chat, thread, sender, trust,"
        " text, channel, state, created, updated, said, media)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (*_row_values(message), message.created, message.said, _media_json(message.media)),
    )


def delivery_backoff(attempts: int) -> float:
    """Seconds before the next delivery after ``attempts`` failed ones: 0.5 s, doubling,
    at most DELIVERY_BACKOFF_MAX_SECONDS."""
    first = DELIVERY_BACKOFF_FIRST_SECONDS
    return float(min(first * 2.0 ** max(attempts - 1, 0), DELIVERY_BACKOFF_MAX_SECONDS))


def open_queue(home: Home) -> MessageQueue:
    """The home's queue, with its reserve file made when there is room. Its schema is
    brought up to date when this process may (it holds the home's lock, or no daemon
    does); SchemaBehind when a daemon of an older release holds the home."""
    home.state_dir.mkdir(parents=True, exist_ok=True)  # the reserve needs its folder
    reserve = Reserve(home.state_dir)
    reserve.ensure()
    holder = lock_holder(home)
    return MessageQueue(
        home.state_dir / QUEUE_FILE,
        reserve,
        migrate=holder is None or holder == os.getpid(),
        behind_hint=f"the daemon (pid {holder}) runs an older release: restart it with "
        "this one (orchestrator down, then orchestrator up); it upgrades the file at its "
        "start",
    )


def open_queue_if_any(home: Home) -> MessageQueue | None:
    """The home's queue when it exists (a command never creates one to read it)."""
    return open_queue(home) if (home.state_dir / QUEUE_FILE).exists() else None


def set_aside(home: Home) -> tuple[Path, int, str | None]:
    """Move a corrupt queue aside and start a new one, copying the pending messages that
    can still be read. Returns (where the old file went, messages copied, why the rest
    could not be read or None)."""
    path = home.state_dir / QUEUE_FILE
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{QUEUE_FILE}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.rename(source, Path(f"{aside}{suffix}"))
    rows: list[Row] = []
    problem: str | None = None
    try:
        old = sqlite3.connect(f"file:{aside}?mode=ro", uri=True)
        try:
            rows = old.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE state IN (?, ?, ?) ORDER BY seq",
                PENDING,
            ).fetchall()
        finally:
            old.close()
    except sqlite3.DatabaseError as exc:
        problem = str(exc)
    queue = open_queue(home)
    copies = [
        replace(m, state=PREPARING if m.state == PREPARING else QUEUED)
        for m in (_row(row) for row in rows)
    ]

    def work(db: sqlite3.Connection) -> None:
        for message in copies:
            db.execute(
                "INSERT OR IGNORE INTO messages (id, group_folder, session, chat, thread,"
                " sender, trust, text, channel, state, created, updated, media)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (*_row_values(message), time.time(), _media_json(message.media)),
            )

    try:
        queue.transaction(work)
    finally:
        queue.close()
    return aside, len(rows), problem


def check_queue(home: Home) -> str | None:
    """Why the home's queue cannot be used, or None (also when there is none yet)."""
    path = home.state_dir / QUEUE_FILE
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = db.execute("PRAGMA quick_check").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return None if row and row[0] == "ok" else str(row[0] if row else "no answer")
