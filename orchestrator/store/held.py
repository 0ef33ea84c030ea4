"""Held requests, in the state database: what waits for a creator's approval (the
mechanism is ``relay.approvals``)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from dataclasses import dataclass

from orchestrator.store.db import Row, StateDB
from orchestrator.store.rows import flag, opt_text, real, text, whole


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


def _held(row: Row) -> HeldRequest:
    return HeldRequest(
        whole(row[0]),
        text(row[1]),
        text(row[2]),
        text(row[3]),
        text(row[4]),
        text(row[5]),
        text(row[6]),
        opt_text(row[7]),
        text(row[8]),
        text(row[9]),
        flag(row[10]),
        real(row[11]),
        real(row[12]),
    )


def content_sha256(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class HeldRequests:
    """The held requests of one state database."""

    def __init__(self, db: StateDB) -> None:
        self.db = db

    def hold(
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

        request_id = self.db.transaction(work)
        return HeldRequest(
            request_id, group, kind, content, digest, channel, chat, thread, sender,
            message_id, chat_approvable, now, now + ttl,
        )  # fmt: skip

    def get(self, request_id: int) -> HeldRequest | None:
        """The held request ``request_id``, expired or not (None when there is none)."""
        row = self.db.read_one(
            f"SELECT {_HELD_COLUMNS} FROM held_requests WHERE id=?", (request_id,)
        )
        return None if row is None else _held(row)

    def waiting(
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
        rows = self.db.read(sql + " ORDER BY id", tuple(args))
        return [_held(r) for r in rows]

    def drop(self, request_id: int) -> bool:
        """Forget a held request; True when there was one."""
        return self.db.transaction(
            lambda db: (
                db.execute("DELETE FROM held_requests WHERE id=?", (request_id,)).rowcount == 1
            )
        )

    def prune(self, now: float | None = None) -> int:
        """Forget the held requests that expired; how many."""
        now = time.time() if now is None else now
        return self.db.transaction(
            lambda db: db.execute("DELETE FROM held_requests WHERE expires<=?", (now,)).rowcount
        )
