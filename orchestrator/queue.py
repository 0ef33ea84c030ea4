"""The durable message queue: SQLite in WAL mode, ``synchronous=FULL``.

An inbound message is acknowledged to its sender only after its row is committed.
Messages of one session are delivered in order, one at a time; a failed delivery is
retried with backoff, then dead-lettered with its reason. Replies are keyed by
(message id, sequence number), so a reply stored twice is kept once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.limits import DELIVERY_BACKOFF_MAX_SECONDS, MAX_DELIVERY_ATTEMPTS

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
"""


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
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

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
    ) -> Message:
        """Store a message; returns once it is committed to disk."""
        message = Message(
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
        with self._tx() as db:
            db.execute(
                "INSERT INTO messages (id, group_folder, session, chat, thread, sender, trust,"
                " text, channel, state, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (*_row_values(message), message.created),
            )
        return message

    def recover(self) -> int:
        """After a crash: messages that were in flight are queued again."""
        with self._tx() as db:
            return db.execute(
                "UPDATE messages SET state=?, updated=? WHERE state=?",
                (QUEUED, time.time(), INFLIGHT),
            ).rowcount

    def runnable(self, now: float | None = None) -> list[Message]:
        """The oldest pending message of each session, when it may be delivered now."""
        now = time.time() if now is None else now
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS}, not_before FROM messages WHERE state IN (?, ?) ORDER BY seq",
                PENDING,
            ).fetchall()
        heads: dict[tuple[str, str], tuple[object, ...]] = {}
        for row in rows:
            heads.setdefault((str(row[1]), str(row[2])), row)
        return [_row(r[:-1]) for r in heads.values() if r[9] == QUEUED and float(r[-1]) <= now]  # type: ignore[arg-type]

    def next_wakeup(self) -> float | None:
        """When the earliest message in backoff becomes deliverable."""
        with self._lock:
            row = self._db.execute(
                "SELECT MIN(not_before) FROM messages WHERE state=? AND not_before > ?",
                (QUEUED, time.time()),
            ).fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def claim(self, message_id: str) -> bool:
        with self._tx() as db:
            return (
                db.execute(
                    "UPDATE messages SET state=?, attempts=attempts+1, updated=? "
                    "WHERE id=? AND state=?",
                    (INFLIGHT, time.time(), message_id, QUEUED),
                ).rowcount
                == 1
            )

    def complete(self, message_id: str, replies: list[str]) -> None:
        """Store the replies (a duplicate (id, seq) is dropped) and mark the message done."""
        now = time.time()
        with self._tx() as db:
            db.executemany(
                "INSERT OR IGNORE INTO replies (message_id, seq, text, created) VALUES (?,?,?,?)",
                [(message_id, seq, text, now) for seq, text in enumerate(replies)],
            )
            db.execute(
                "UPDATE messages SET state=?, last_error=NULL, updated=? WHERE id=?",
                (DONE, now, message_id),
            )

    def fail(self, message_id: str, error: str) -> str:
        """Back off and queue again, or dead-letter after the last attempt; the new state."""
        with self._tx() as db:
            row = db.execute("SELECT attempts FROM messages WHERE id=?", (message_id,)).fetchone()
            attempts = int(row[0]) if row else MAX_DELIVERY_ATTEMPTS
            if attempts >= MAX_DELIVERY_ATTEMPTS:
                state, not_before = DEAD, 0.0
            else:
                state = QUEUED
                not_before = time.time() + min(0.25 * 2**attempts, DELIVERY_BACKOFF_MAX_SECONDS)
            db.execute(
                "UPDATE messages SET state=?, last_error=?, not_before=?, updated=? WHERE id=?",
                (state, error[:2000], not_before, time.time(), message_id),
            )
        return state

    def retry(self, message_id: str) -> bool:
        """Queue a dead-lettered message again with fresh attempts."""
        with self._tx() as db:
            return (
                db.execute(
                    "UPDATE messages SET state=?, attempts=0, not_before=0, updated=? "
                    "WHERE id=? AND state=?",
                    (QUEUED, time.time(), message_id, DEAD),
                ).rowcount
                == 1
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
