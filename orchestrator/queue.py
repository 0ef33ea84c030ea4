"""The durable message queue: SQLite in WAL mode, ``synchronous=FULL``.

An inbound message is acknowledged to its sender only after its row is committed.
Messages of one session are delivered in order, one at a time; a failed delivery is
retried with backoff, then dead-lettered with its reason. Replies are keyed by
(message id, sequence number), so a reply stored twice is kept once.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from orchestrator.errors import OrchestratorError
from orchestrator.home import Home
from orchestrator.limits import (
    DELIVERY_BACKOFF_FIRST_SECONDS,
    DELIVERY_BACKOFF_MAX_SECONDS,
    HOST_NOTICE_SEQ,
    MAX_DELIVERY_ATTEMPTS,
    STATE_RESERVE_BYTES,
)
from orchestrator.protocol import CLEAR_COMMAND

log = logging.getLogger(__name__)
T = TypeVar("T")
RESERVE_FILE = "reserve"

QUEUED, INFLIGHT, DONE, DEAD = "queued", "inflight", "done", "dead"
PENDING = (QUEUED, INFLIGHT)

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    group_folder TEXT NOT NULL,
    session TEXT NOT NULL,
    chat TEXT NOT NULL,
    thread TEXT,
    sender TEXT NOT NULL,
    trust TEXT NOT NULL,
    text TEXT NOT NULL,
    channel TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    not_before REAL NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_pending ON messages (state, seq);
CREATE TABLE IF NOT EXISTS replies (
    message_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (message_id, seq)
);
CREATE TABLE IF NOT EXISTS pauses (
    group_folder TEXT NOT NULL,
    holder TEXT NOT NULL,
    reason TEXT NOT NULL,
    refuse_new INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    expires REAL,
    PRIMARY KEY (group_folder, holder)
);
CREATE TABLE IF NOT EXISTS tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    group_folder TEXT NOT NULL,
    chat TEXT NOT NULL,
    thread TEXT,
    channel TEXT NOT NULL,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    tz TEXT NOT NULL,
    author TEXT NOT NULL,
    author_trust TEXT NOT NULL,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    next_run REAL,
    last_run REAL,
    last_outcome TEXT,
    runs INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tasks_due ON tasks (state, next_run);
CREATE TABLE IF NOT EXISTS task_runs (
    task_id INTEGER NOT NULL,
    due REAL NOT NULL,
    message_id TEXT,
    outcome TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (task_id, due)
);
CREATE INDEX IF NOT EXISTS messages_channel ON messages (channel, updated);
CREATE TABLE IF NOT EXISTS bindings (
    account TEXT NOT NULL,
    chat TEXT NOT NULL,
    group_folder TEXT NOT NULL,
    activation TEXT NOT NULL,
    trust TEXT NOT NULL,
    title TEXT,
    created REAL NOT NULL,
    PRIMARY KEY (account, chat)
);
CREATE TABLE IF NOT EXISTS pairings (
    code TEXT PRIMARY KEY,
    account TEXT NOT NULL,
    chat TEXT NOT NULL,
    title TEXT,
    requested_by TEXT,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    group_folder TEXT,
    decided REAL
);
CREATE INDEX IF NOT EXISTS pairings_chat ON pairings (account, chat, state);
CREATE TABLE IF NOT EXISTS channel_inbound (
    account TEXT NOT NULL,
    update_id TEXT NOT NULL,
    message_id TEXT,
    platform_chat TEXT,
    platform_message TEXT,
    at REAL NOT NULL,
    PRIMARY KEY (account, update_id)
);
CREATE INDEX IF NOT EXISTS channel_inbound_message ON channel_inbound (message_id);
CREATE TABLE IF NOT EXISTS channel_outbound (
    message_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    account TEXT NOT NULL,
    state TEXT NOT NULL,
    platform_ids TEXT,
    error TEXT,
    at REAL NOT NULL,
    PRIMARY KEY (message_id, seq)
);
CREATE TABLE IF NOT EXISTS channel_state (
    account TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (account, key)
);
CREATE TABLE IF NOT EXISTS learned_pending (
    group_folder TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    sender TEXT NOT NULL,
    message_id TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS held_requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    group_folder TEXT NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    channel TEXT NOT NULL,
    chat TEXT NOT NULL,
    thread TEXT,
    sender TEXT NOT NULL,
    message_id TEXT NOT NULL,
    chat_approvable INTEGER NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS held_requests_chat ON held_requests (group_folder, channel, chat);
"""
SQLITE_FULL = 13
QUEUE_FILE = "queue.db"


class QueueCorrupt(OrchestratorError):
    """The queue database cannot be read."""


class QueueFull(OrchestratorError):
    """The queue cannot commit: the disk holding it is full."""


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
class HeldRequest:
    """Something a creator must approve (a learned-behaviors write, later packages and
    MCP servers): its exact content and hash, the chat it was made in, its expiry.

    ``chat_approvable``: the chat was shown the whole content, so a creator may approve
    it there; otherwise only the operator may (from the CLI)."""

    id: int
    group: str
    kind: str
    content: str
    sha256: str
    channel: str
    chat: str
    thread: str | None
    sender: str
    message_id: str
    chat_approvable: bool
    created: float
    expires: float

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "group": self.group,
            "kind": self.kind,
            "chars": len(self.content),
            "sha256": self.sha256,
            "channel": self.channel,
            "chat": self.chat,
            "thread": self.thread,
            "sender": self.sender,
            "message_id": self.message_id,
            "chat_approvable": self.chat_approvable,
            "created": self.created,
            "expires": self.expires,
        }


_HELD_COLUMNS = (
    "id, group_folder, kind, content, sha256, channel, chat, thread, sender, message_id, "
    "chat_approvable, created, expires"
)


def _held(row: tuple[object, ...]) -> HeldRequest:
    return HeldRequest(
        int(row[0]),  # type: ignore[call-overload]
        str(row[1]),
        str(row[2]),
        str(row[3]),
        str(row[4]),
        str(row[5]),
        str(row[6]),
        None if row[7] is None else str(row[7]),
        str(row[8]),
        str(row[9]),
        bool(row[10]),
        float(row[11]),  # type: ignore[arg-type]
        float(row[12]),  # type: ignore[arg-type]
    )


def content_sha256(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


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
        }


_COLUMNS = (
    "id, group_folder, session, chat, thread, sender, trust, text, channel, state, "
    "attempts, last_error, created"
)


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


def _row(row: tuple[object, ...], replies: tuple[str, ...] = ()) -> Message:
    return Message(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        row[4] if row[4] is None else str(row[4]),
        str(row[5]),
        str(row[6]),
        str(row[7]),
        str(row[8]),
        str(row[9]),
        int(row[10]),  # type: ignore[call-overload]
        row[11] if row[11] is None else str(row[11]),
        float(row[12]),  # type: ignore[arg-type]
        replies,
    )


class MessageQueue:
    def __init__(self, path: Path, reserve: Reserve | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.reserve = reserve
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(
                path, check_same_thread=False, isolation_level=None, timeout=30
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            self._carry_learned_pending()
        except sqlite3.DatabaseError as exc:
            if _is_full(exc):
                raise QueueFull(
                    f"cannot open {path}: the disk is full", hint="free some space, then retry"
                ) from None
            raise QueueCorrupt(
                f"{path} is not a usable SQLite database ({exc})",
                hint="`orchestrator doctor` explains; `orchestrator doctor --repair-queue` "
                "moves it aside and starts a new queue with the messages it can still read",
            ) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled back already (a full disk does that).
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in a write transaction. When the disk is full, the reserve file
        is released once and the transaction tried again: the queue must still commit."""
        for attempt in range(2):
            try:
                with self._tx() as db:
                    return work(db)
            except sqlite3.OperationalError as exc:
                if not _is_full(exc):
                    raise
                if attempt == 0 and self.reserve is not None and self.reserve.release():
                    log.error("the disk holding %s is full: released the reserve", self.path)
                    continue
                raise QueueFull(
                    f"cannot commit to {self.path}: the disk is full",
                    hint="free some space; nothing committed is lost",
                ) from None
        raise AssertionError("unreachable")

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
        claim: Callable[[sqlite3.Connection, Message], str | None] | None = None,
    ) -> Message:
        """Store a message; returns once it is committed to disk.

        ``claim(db, message)`` runs in the same transaction first: it records where the
        message came from (a chat app's update id) and returns the id of a message
        stored for it already, which is then returned instead (nothing new is stored):
        an update read twice is queued once."""
        message = new_message(
            group=group,
            session=session,
            chat=chat,
            thread=thread,
            sender=sender,
            trust=trust,
            text=text,
            channel=channel,
        )

        def work(db: sqlite3.Connection) -> str | None:
            earlier = claim(db, message) if claim is not None else None
            if earlier is None:
                insert_message(db, message)
            return earlier

        earlier = self._write(work)
        if earlier is not None:
            found = self.get(earlier)
            if found is not None:
                return found
        return message

    def transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(db)`` in one write transaction (as the queue's own writes are:
        a full disk releases the reserve once)."""
        return self._write(work)

    def read(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

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
        message = replace(
            new_message(
                group=group, session=session, chat=chat, thread=thread, sender=sender,
                trust=trust, text=text, channel=channel,
            ),
            state=DONE,
            replies=(reply,),
        )  # fmt: skip

        def work(db: sqlite3.Connection) -> None:
            insert_message(db, message)
            db.execute(
                "INSERT INTO replies (message_id, seq, text, created) VALUES (?,?,?,?)",
                (message.id, 0, reply, message.created),
            )

        self._write(work)
        return message

    def recover(self) -> int:
        """After a crash: messages that were in flight are queued again."""
        return self._write(
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
        return self._write(
            lambda db: sum(
                db.execute(
                    "UPDATE messages SET state=?, updated=? WHERE id=? AND state=?",
                    (QUEUED, now, message_id, INFLIGHT),
                ).rowcount
                for message_id in stale
            )
        )

    def runnable(self, now: float | None = None) -> list[Message]:
        """The oldest pending message of each session, when it may be delivered now."""
        now = time.time() if now is None else now
        paused = set(self.paused_groups(now))
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS}, not_before FROM messages WHERE state IN (?, ?) ORDER BY seq",
                PENDING,
            ).fetchall()
        heads: dict[tuple[str, str], tuple[object, ...]] = {}
        for row in rows:
            heads.setdefault((str(row[1]), str(row[2])), row)
        return [
            _row(r[:-1])
            for r in heads.values()
            if r[9] == QUEUED and float(r[-1]) <= now and r[1] not in paused  # type: ignore[arg-type]
        ]

    def next_wakeup(self) -> float | None:
        """When the earliest message in backoff becomes deliverable."""
        with self._lock:
            row = self._db.execute(
                "SELECT MIN(not_before) FROM messages WHERE state=? AND not_before > ?",
                (QUEUED, time.time()),
            ).fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def claim(self, message_id: str) -> bool:
        return self._write(
            lambda db: (
                db.execute(
                    "UPDATE messages SET state=?, attempts=attempts+1, updated=? "
                    "WHERE id=? AND state=?",
                    (INFLIGHT, time.time(), message_id, QUEUED),
                ).rowcount
                == 1
            )
        )

    def complete(self, message_id: str, replies: list[str]) -> None:
        """Store the replies (a duplicate (id, seq) is dropped) and mark the message done."""
        now = time.time()

        def work(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT OR IGNORE INTO replies (message_id, seq, text, created) VALUES (?,?,?,?)",
                [(message_id, seq, text, now) for seq, text in enumerate(replies)],
            )
            db.execute(
                "UPDATE messages SET state=?, last_error=NULL, updated=? WHERE id=?",
                (DONE, now, message_id),
            )

        self._write(work)

    def fail(self, message_id: str, error: str) -> str:
        """Back off and queue again, or dead-letter after the last attempt; the new state."""

        def work(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT attempts FROM messages WHERE id=?", (message_id,)).fetchone()
            attempts = int(row[0]) if row else MAX_DELIVERY_ATTEMPTS
            if attempts >= MAX_DELIVERY_ATTEMPTS:
                state, not_before = DEAD, 0.0
            else:
                state = QUEUED
                not_before = time.time() + delivery_backoff(attempts)
            db.execute(
                "UPDATE messages SET state=?, last_error=?, not_before=?, updated=? WHERE id=?",
                (state, error[:2000], not_before, time.time(), message_id),
            )
            return state

        return self._write(work)

    def defer(self, message_id: str, seconds: float, reason: str) -> bool:
        """Queue an in-flight message again after ``seconds`` without counting the
        attempt: the fault was not the message's (the engine was away)."""
        return self._write(
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
        return self._write(
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
        return self._write(
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
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE id=?", (message_id,)
            ).fetchone()
            if row is None:
                return None
            replies = tuple(
                r[0]
                for r in self._db.execute(
                    "SELECT text FROM replies WHERE message_id=? ORDER BY seq", (message_id,)
                )
            )
        return _row(row, replies)

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

    def others_in_session(self, message_id: str, trusted: str) -> int:
        """How many messages from senders not of trust ``trusted`` came before
        ``message_id`` in its session since the session's last completed ``/clear``:
        text the session's context may still carry (a compaction summary carries it
        too, so only ``/clear`` resets the count)."""
        with self._lock:
            row = self._db.execute(
                "SELECT seq, group_folder, session FROM messages WHERE id=?", (message_id,)
            ).fetchone()
            if row is None:
                return 0
            seq, group, session = row
            clear = self._db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE group_folder=? AND session=?"
                " AND seq<? AND state=? AND trim(text)=?",
                (group, session, seq, DONE, CLEAR_COMMAND),
            ).fetchone()[0]
            return int(
                self._db.execute(
                    "SELECT COUNT(*) FROM messages WHERE group_folder=? AND session=?"
                    " AND seq>? AND seq<? AND trust<>?",
                    (group, session, clear, seq, trusted),
                ).fetchone()[0]
            )

    # held requests (approvals)

    def hold_request(
        self,
        *,
        group: str,
        kind: str,
        content: str,
        channel: str,
        chat: str,
        thread: str | None,
        sender: str,
        message_id: str,
        chat_approvable: bool,
        ttl: float,
        now: float | None = None,
    ) -> HeldRequest:
        """Hold ``content`` for a creator's approval, under a new id (a request held
        before is never replaced)."""
        now = time.time() if now is None else now
        digest = content_sha256(content)

        def work(db: sqlite3.Connection) -> int:
            cursor = db.execute(
                f"INSERT INTO held_requests ({_HELD_COLUMNS.partition(', ')[2]})"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (group, kind, content, digest, channel, chat, thread, sender, message_id,
                 int(chat_approvable), now, now + ttl),
            )  # fmt: skip
            return int(cursor.lastrowid or 0)

        request_id = self._write(work)
        return HeldRequest(
            request_id, group, kind, content, digest, channel, chat, thread, sender,
            message_id, chat_approvable, now, now + ttl,
        )  # fmt: skip

    def held_request(self, request_id: int) -> HeldRequest | None:
        """The held request ``request_id``, expired or not (None when there is none)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {_HELD_COLUMNS} FROM held_requests WHERE id=?", (request_id,)
            ).fetchone()
        return None if row is None else _held(row)

    def held_requests(
        self,
        group: str | None = None,
        *,
        kind: str | None = None,
        channel: str | None = None,
        chat: str | None = None,
        now: float | None = None,
    ) -> list[HeldRequest]:
        """Requests that wait (not expired), oldest first; those of one group, kind or
        (channel, chat) when given."""
        now = time.time() if now is None else now
        sql = f"SELECT {_HELD_COLUMNS} FROM held_requests WHERE expires>?"
        args: list[object] = [now]
        for column, value in (
            ("group_folder", group), ("kind", kind), ("channel", channel), ("chat", chat),
        ):  # fmt: skip
            if value is not None:
                sql += f" AND {column}=?"
                args.append(value)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        return [_held(r) for r in rows]

    def drop_held(self, request_id: int) -> bool:
        """Forget a held request; True when there was one."""
        return self._write(
            lambda db: (
                db.execute("DELETE FROM held_requests WHERE id=?", (request_id,)).rowcount == 1
            )
        )

    def prune_held(self, now: float | None = None) -> int:
        """Forget the held requests that expired; how many."""
        now = time.time() if now is None else now
        return self._write(
            lambda db: db.execute("DELETE FROM held_requests WHERE expires<=?", (now,)).rowcount
        )

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

        return self._write(work)

    def _carry_learned_pending(self) -> None:
        """Writes held by an older release (one per group, in ``learned_pending``) become
        held requests in the chat they were made in. Their notice showed at most 2,000
        characters, so a longer one can be approved by the operator only."""
        with self._lock:
            rows = self._db.execute(
                "SELECT p.group_folder, p.content, p.sender, p.message_id, p.created,"
                " m.channel, m.chat, m.thread FROM learned_pending p"
                " LEFT JOIN messages m ON m.id=p.message_id"
            ).fetchall()
        if not rows:
            return
        from orchestrator.limits import HELD_REQUEST_TTL_SECONDS

        def work(db: sqlite3.Connection) -> None:
            for group, content, sender, message_id, created, channel, chat, thread in rows:
                db.execute(
                    f"INSERT INTO held_requests ({_HELD_COLUMNS.partition(', ')[2]})"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (group, "learned", content, content_sha256(str(content)),
                     channel or "cli", chat or "", thread, sender, message_id,
                     int(len(str(content)) <= 2000 and chat is not None), created,
                     float(created) + HELD_REQUEST_TTL_SECONDS),
                )  # fmt: skip
            db.execute("DELETE FROM learned_pending")

        self._write(work)

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
        self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO pauses (group_folder, holder, reason, refuse_new,"
                " created, expires) VALUES (?,?,?,?,?,?)",
                (group, holder, reason, int(refuse_new), lease.created, expires),
            )
        )
        return lease

    def resume(self, group: str, holder: str | None = None) -> int:
        """Drop ``holder``'s lease on ``group`` (every lease when None); how many."""
        if holder is None:
            return self._write(
                lambda db: db.execute("DELETE FROM pauses WHERE group_folder=?", (group,)).rowcount
            )
        return self._write(
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
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created", args).fetchall()
        return [
            Pause(str(r[0]), str(r[1]), str(r[2]), bool(r[3]), float(r[4]), r[5])
            for r in rows
            if r[5] is None or float(r[5]) > now
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
) -> Message:
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
        QUEUED,
        created=time.time(),
    )


def insert_message(db: sqlite3.Connection, message: Message) -> None:
    """Insert ``message`` inside a transaction the caller holds."""
    db.execute(
        "INSERT INTO messages (id, group_folder, session, chat, thread, sender, trust,"
        " text, channel, state, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (*_row_values(message), message.created),
    )


def delivery_backoff(attempts: int) -> float:
    """Seconds before the next delivery after ``attempts`` failed ones: 0.5 s, doubling,
    at most DELIVERY_BACKOFF_MAX_SECONDS."""
    first = DELIVERY_BACKOFF_FIRST_SECONDS
    return float(min(first * 2.0 ** max(attempts - 1, 0), DELIVERY_BACKOFF_MAX_SECONDS))


def _is_full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code == SQLITE_FULL or "database or disk is full" in str(exc)


class Reserve:
    """A file of RESERVE bytes kept in state/, released when the disk fills so the queue
    can still commit; made again once there is room."""

    def __init__(self, state_dir: Path, size: int = STATE_RESERVE_BYTES) -> None:
        self.path = state_dir / RESERVE_FILE
        self.size = size

    def ensure(self) -> bool:
        """Make the reserve when missing and there is room for twice its size; True when
        it is in place."""
        try:
            if os.stat(self.path).st_size >= self.size:
                return True
        except FileNotFoundError:
            pass
        try:
            free = os.statvfs(self.path.parent)
        except OSError:
            return False
        if free.f_bavail * free.f_frsize < 2 * self.size:
            return False
        tmp = self.path.with_name(RESERVE_FILE + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)  # real blocks, not a sparse file
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return False
        return True

    def release(self) -> bool:
        """Delete the reserve; True when there was one to free."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True


def open_queue(home: Home) -> MessageQueue:
    """The home's queue, with its reserve file made when there is room."""
    home.state_dir.mkdir(parents=True, exist_ok=True)  # the reserve needs its folder
    reserve = Reserve(home.state_dir)
    reserve.ensure()
    return MessageQueue(home.state_dir / QUEUE_FILE, reserve)


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
    rows: list[tuple[object, ...]] = []
    problem: str | None = None
    try:
        old = sqlite3.connect(f"file:{aside}?mode=ro", uri=True)
        try:
            rows = old.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE state IN (?, ?) ORDER BY seq", PENDING
            ).fetchall()
        finally:
            old.close()
    except sqlite3.DatabaseError as exc:
        problem = str(exc)
    queue = open_queue(home)
    try:
        for row in rows:
            m = _row(row)
            queue._write(
                lambda db, m=m: db.execute(  # type: ignore[misc]
                    "INSERT OR IGNORE INTO messages (id, group_folder, session, chat, thread,"
                    " sender, trust, text, channel, state, created, updated)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (*_row_values(replace(m, state=QUEUED)), time.time()),
                )
            )
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
