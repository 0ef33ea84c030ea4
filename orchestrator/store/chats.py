"""Chats of chat-app accounts, in the queue's database: which group each chat is bound
to, the pairing requests of chats that are not, and each account's own durable state
(the update ids it has queued, the replies it has sent, its poll offset, its health).

A chat of an account is bound to exactly one group. Its people are members (or guests)
of that group through the binding; creators are still named one by one in group.yaml.
A chat that is not bound is never routed anywhere: it gets a pairing code, once, and the
operator approves the code with ``orchestrator pair CODE GROUP``.
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
import time
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.errors import BadInput
from orchestrator.groups.config import GUEST, MEMBER
from orchestrator.limits import (
    CHANNEL_KEEP_SECONDS,
    PAIRING_CODE_TTL_SECONDS,
    PAIRINGS_PENDING_MAX,
)
from orchestrator.store.messages import Message, MessageQueue
from orchestrator.store.rows import text, whole

ACTIVATIONS = ("mention", "always")  # in group chats: mentioned or replied to, or every message
BOUND_TRUSTS = (MEMBER, GUEST)
PENDING, APPROVED, REJECTED = "pending", "approved", "rejected"
# No 0/O, 1/I/L: a code is read off a phone and typed into a terminal.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
SENDING, SENT, UNKNOWN, FAILED = "sending", "sent", "unknown", "failed"
# the reply seq under which the "could not answer" notice of a dead-lettered message is
# claimed (a model's replies count from 0)
DEAD_NOTICE_SEQ = -1


def new_code() -> str:
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
    return f"{raw[:4]}-{raw[4:]}"


def normalize_code(code: str) -> str:
    """A code as people type it (any case, with or without the dash) in its stored form;
    BadInput names what a code looks like."""
    raw = re.sub(r"[\s-]", "", code).upper()
    if len(raw) != 8 or any(c not in CODE_ALPHABET for c in raw):
        raise BadInput(
            f"{code!r} is not a pairing code; a code is 8 letters and digits such as ABCD-2345",
            hint="orchestrator pair --list shows the codes waiting",
        )
    return f"{raw[:4]}-{raw[4:]}"


def parse_chat_ref(ref: str) -> tuple[str, str]:
    """``ACCOUNT:CHAT_ID`` as (account, chat); BadInput says what is expected."""
    account, sep, chat = ref.partition(":")
    if not sep or not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,39}", account) or not chat:
        raise BadInput(
            f"{ref!r} is not ACCOUNT:CHAT_ID",
            hint="such as mybot:123456789 (the channel account's name, then the chat's id; "
            "orchestrator pair --list shows chats waiting to be paired)",
        )
    if not re.fullmatch(r"[A-Za-z0-9_.@:!+=-]{1,200}", chat):
        raise BadInput(f"chat id {chat!r} has characters no chat id has, or is too long")
    return account, chat


@dataclass(frozen=True)
class Binding:
    account: str
    chat: str
    group: str
    activation: str
    trust: str
    title: str | None
    created: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Pairing:
    code: str
    account: str
    chat: str
    title: str | None
    requested_by: str | None
    state: str
    created: float
    expires: float
    group: str | None
    decided: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pairing(row: tuple[Any, ...]) -> Pairing:
    return Pairing(*row)


def _binding(row: tuple[Any, ...]) -> Binding:
    return Binding(str(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), row[5], row[6])


_BINDING_COLUMNS = "account, chat, group_folder, activation, trust, title, created"
_PAIRING_COLUMNS = (
    "code, account, chat, title, requested_by, state, created, expires, group_folder, decided"
)


class ChatStore:
    """Bindings, pairings and chat-app accounts' state in the queue's database."""

    def __init__(self, queue: MessageQueue) -> None:
        self.queue = queue

    # bindings

    def bind(
        self,
        account: str,
        chat: str,
        group: str,
        *,
        activation: str = "mention",
        trust: str = MEMBER,
        title: str | None = None,
        now: float | None = None,
    ) -> Binding:
        """Bind a chat to a group; BadInput when it is bound to another group (unbind
        it first) or the activation or trust is not one of those allowed."""
        if activation not in ACTIVATIONS:
            raise BadInput(f"activation {activation!r}: expected one of {', '.join(ACTIVATIONS)}")
        if trust not in BOUND_TRUSTS:
            raise BadInput(
                f"trust {trust!r}: expected one of {', '.join(BOUND_TRUSTS)} (creators are "
                "named one by one in group.yaml)"
            )
        binding = Binding(account, chat, group, activation, trust, title, now or time.time())

        def work(db: sqlite3.Connection) -> None:
            row = db.execute(
                "SELECT group_folder FROM bindings WHERE account=? AND chat=?", (account, chat)
            ).fetchone()
            if row is not None and row[0] != group:
                raise BadInput(
                    f"chat {account}:{chat} is bound to group {row[0]!r}; a chat is bound to "
                    "one group",
                    hint=f"orchestrator unbind {account}:{chat} first",
                )
            db.execute(
                f"INSERT OR REPLACE INTO bindings ({_BINDING_COLUMNS}) VALUES (?,?,?,?,?,?,?)",
                (account, chat, group, activation, trust, title, binding.created),
            )

        self.queue.transaction(work)
        return binding

    def unbind(self, account: str, chat: str) -> Binding | None:
        found = self.binding(account, chat)
        if found is not None:
            self.queue.transaction(
                lambda db: db.execute(
                    "DELETE FROM bindings WHERE account=? AND chat=?", (account, chat)
                )
            )
        return found

    def binding(self, account: str, chat: str) -> Binding | None:
        rows = self.queue.read(
            f"SELECT {_BINDING_COLUMNS} FROM bindings WHERE account=? AND chat=?", (account, chat)
        )
        return _binding(rows[0]) if rows else None

    def bindings(self, *, group: str | None = None, account: str | None = None) -> list[Binding]:
        where, args = [], []
        if group is not None:
            where.append("group_folder=?")
            args.append(group)
        if account is not None:
            where.append("account=?")
            args.append(account)
        sql = f"SELECT {_BINDING_COLUMNS} FROM bindings"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_binding(r) for r in self.queue.read(sql + " ORDER BY account, chat", tuple(args))]

    def bound_trust(self, group: str, account: str | None, chat: str) -> str | None:
        """The trust a binding gives the people of ``chat`` in ``group`` (any account of
        the chat when ``account`` is None), or None when the chat is not bound to it."""
        if account is None:
            rows = self.queue.read(
                "SELECT trust FROM bindings WHERE group_folder=? AND chat=? ORDER BY trust DESC",
                (group, chat),
            )
        else:
            rows = self.queue.read(
                "SELECT trust FROM bindings WHERE group_folder=? AND account=? AND chat=?",
                (group, account, chat),
            )
        return str(rows[0][0]) if rows else None

    def move_chat(self, account: str, old: str, new: str) -> bool:
        """A chat's id changed (a Telegram group became a supergroup): its binding and its
        pending pairings follow. True when a binding moved."""

        def work(db: sqlite3.Connection) -> bool:
            if db.execute(
                "SELECT 1 FROM bindings WHERE account=? AND chat=?", (account, new)
            ).fetchone():
                return False
            moved = db.execute(
                "UPDATE bindings SET chat=? WHERE account=? AND chat=?", (new, account, old)
            ).rowcount
            db.execute(
                "UPDATE pairings SET chat=? WHERE account=? AND chat=? AND state=?",
                (new, account, old, PENDING),
            )
            return bool(moved)

        return self.queue.transaction(work)

    # pairing

    def request_pairing(
        self,
        account: str,
        chat: str,
        *,
        title: str | None,
        requested_by: str | None,
        now: float | None = None,
        cap: int = PAIRINGS_PENDING_MAX,
        ttl: float = PAIRING_CODE_TTL_SECONDS,
    ) -> tuple[Pairing | None, bool]:
        """A pairing code for a chat that is not bound: (pairing, True) when one is made
        now (the chat is told it), (pairing, False) when the chat has a live one already
        (it was told once), (None, False) when the account has ``cap`` codes waiting."""
        now = time.time() if now is None else now

        def work(db: sqlite3.Connection) -> tuple[Pairing | None, bool]:
            row = db.execute(
                f"SELECT {_PAIRING_COLUMNS} FROM pairings WHERE account=? AND chat=? AND "
                "state=? AND expires>? ORDER BY created DESC LIMIT 1",
                (account, chat, PENDING, now),
            ).fetchone()
            if row is not None:
                return _pairing(row), False
            waiting = db.execute(
                "SELECT COUNT(*) FROM pairings WHERE account=? AND state=? AND expires>?",
                (account, PENDING, now),
            ).fetchone()[0]
            if waiting >= cap:
                return None, False
            while True:
                code = new_code()
                if not db.execute("SELECT 1 FROM pairings WHERE code=?", (code,)).fetchone():
                    break
            pairing = Pairing(
                code, account, chat, title, requested_by, PENDING, now, now + ttl, None, None
            )
            db.execute(
                f"INSERT INTO pairings ({_PAIRING_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                tuple(asdict(pairing).values()),
            )
            return pairing, True

        return self.queue.transaction(work)

    def pairings(self, *, now: float | None = None, everything: bool = False) -> list[Pairing]:
        """Codes waiting for the operator (with ``everything``, decided and expired ones
        too), newest first."""
        now = time.time() if now is None else now
        if everything:
            rows = self.queue.read(f"SELECT {_PAIRING_COLUMNS} FROM pairings ORDER BY created DESC")
        else:
            rows = self.queue.read(
                f"SELECT {_PAIRING_COLUMNS} FROM pairings WHERE state=? AND expires>? "
                "ORDER BY created DESC",
                (PENDING, now),
            )
        return [_pairing(r) for r in rows]

    def _decide(self, code: str, now: float) -> Pairing:
        """The pending, live pairing of ``code``; BadInput for an unknown, used, rejected
        or expired one (codes are single-use)."""
        code = normalize_code(code)
        rows = self.queue.read(f"SELECT {_PAIRING_COLUMNS} FROM pairings WHERE code=?", (code,))
        if not rows:
            raise BadInput(
                f"no pairing code {code}", hint="orchestrator pair --list shows the codes waiting"
            )
        pairing = _pairing(rows[0])
        if pairing.state != PENDING:
            raise BadInput(
                f"pairing code {code} was {pairing.state} already; a code is good once",
                hint="ask in the chat again for a new code",
            )
        if pairing.expires <= now:
            raise BadInput(
                f"pairing code {code} expired "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(pairing.expires))}",
                hint="a message from the chat gets a new code",
            )
        return pairing

    def approve(
        self,
        code: str,
        group: str,
        *,
        activation: str = "mention",
        trust: str = MEMBER,
        now: float | None = None,
    ) -> Binding:
        """Bind the chat of a pending code to ``group`` and use the code up."""
        now = time.time() if now is None else now
        pairing = self._decide(code, now)
        binding = self.bind(
            pairing.account,
            pairing.chat,
            group,
            activation=activation,
            trust=trust,
            title=pairing.title,
            now=now,
        )
        self.queue.transaction(
            lambda db: db.execute(
                "UPDATE pairings SET state=?, group_folder=?, decided=? WHERE code=?",
                (APPROVED, group, now, pairing.code),
            )
        )
        return binding

    def reject(self, code: str, *, now: float | None = None) -> Pairing:
        now = time.time() if now is None else now
        pairing = self._decide(code, now)
        self.queue.transaction(
            lambda db: db.execute(
                "UPDATE pairings SET state=?, decided=? WHERE code=?",
                (REJECTED, now, pairing.code),
            )
        )
        return pairing

    # inbound: an update id is queued once

    def inbound_claim(
        self, account: str, update_id: str, platform_chat: str, platform_message: str | None
    ) -> Any:
        """A ``claim`` for MessageQueue.enqueue: records the update with the message in
        one transaction, or names the message stored for it already."""

        def claim(db: sqlite3.Connection, message: Message) -> str | None:
            row = db.execute(
                "SELECT message_id FROM channel_inbound WHERE account=? AND update_id=?",
                (account, update_id),
            ).fetchone()
            if row is not None:
                return str(row[0]) if row[0] is not None else message.id
            db.execute(
                "INSERT INTO channel_inbound (account, update_id, message_id, platform_chat,"
                " platform_message, at) VALUES (?,?,?,?,?,?)",
                (account, update_id, message.id, platform_chat, platform_message, time.time()),
            )
            return None

        return claim

    def was_queued(self, account: str, update_id: str) -> bool:
        return bool(
            self.queue.read(
                "SELECT 1 FROM channel_inbound WHERE account=? AND update_id=?",
                (account, update_id),
            )
        )

    def inbound_of(self, message_id: str) -> tuple[str, str | None] | None:
        """(platform chat, platform message id) of the update a message came from."""
        rows = self.queue.read(
            "SELECT platform_chat, platform_message FROM channel_inbound WHERE message_id=?",
            (message_id,),
        )
        if not rows:
            return None
        return str(rows[0][0]), None if rows[0][1] is None else str(rows[0][1])

    # outbound: each reply is sent once

    def claim_send(self, message_id: str, seq: int, account: str) -> bool:
        """Record that reply (message, seq) is being sent, before it is: False when it was
        claimed already (sent, or lost in a crash: never sent twice)."""
        return self.queue.transaction(
            lambda db: (
                db.execute(
                    "INSERT OR IGNORE INTO channel_outbound (message_id, seq, account, state, at)"
                    " VALUES (?,?,?,?,?)",
                    (message_id, seq, account, SENDING, time.time()),
                ).rowcount
                == 1
            )
        )

    def finish_send(
        self,
        message_id: str,
        seq: int,
        state: str,
        *,
        platform_ids: list[str] | None = None,
        error: str | None = None,
    ) -> None:
        self.queue.transaction(
            lambda db: db.execute(
                "UPDATE channel_outbound SET state=?, platform_ids=?, error=?, at=?"
                " WHERE message_id=? AND seq=?",
                (
                    state,
                    None if platform_ids is None else json.dumps(platform_ids),
                    error,
                    time.time(),
                    message_id,
                    seq,
                ),
            )
        )

    def release_send(self, message_id: str, seq: int) -> None:
        """Forget a claim whose send surely did not reach the platform (the connection was
        refused): it is sent at the next try."""
        self.queue.transaction(
            lambda db: db.execute(
                "DELETE FROM channel_outbound WHERE message_id=? AND seq=? AND state=?",
                (message_id, seq, SENDING),
            )
        )

    def sent(self, message_id: str) -> dict[int, tuple[str, list[str]]]:
        """seq -> (state, platform message ids) of a message's replies sent or claimed."""
        return {
            whole(r[0]): (text(r[1]), json.loads(text(r[2])) if r[2] else [])
            for r in self.queue.read(
                "SELECT seq, state, platform_ids FROM channel_outbound WHERE message_id=?",
                (message_id,),
            )
        }

    def unsent(self, channel: str, since: float) -> list[str]:
        """Ids of messages of ``channel`` changed since ``since`` with a reply not sent
        nor claimed, oldest first."""
        rows = self.queue.read(
            "SELECT DISTINCT m.id, m.seq FROM messages m JOIN replies r ON r.message_id=m.id"
            " WHERE m.channel=? AND m.updated>=? AND NOT EXISTS (SELECT 1 FROM"
            " channel_outbound o WHERE o.message_id=r.message_id AND o.seq=r.seq)"
            " ORDER BY m.seq",
            (channel, since),
        )
        return [str(r[0]) for r in rows]

    def in_flight_sends(self, account: str) -> list[tuple[str, int]]:
        """Replies claimed and not confirmed: for a platform whose sends are idempotent
        (Matrix transaction ids), they are simply sent again."""
        return [
            (text(r[0]), whole(r[1]))
            for r in self.queue.read(
                "SELECT message_id, seq FROM channel_outbound WHERE account=? AND state=?",
                (account, SENDING),
            )
        ]

    def unconfirmed(self, account: str, before: float | None = None) -> list[tuple[str, int]]:
        """Replies claimed but not confirmed sent (claimed before ``before``, when given):
        a crash came between the claim and the platform's answer. They are marked unknown
        and never sent again."""
        cutoff = float("inf") if before is None else before

        def work(db: sqlite3.Connection) -> list[tuple[str, int]]:
            rows = db.execute(
                "SELECT message_id, seq FROM channel_outbound WHERE account=? AND state=? AND at<?",
                (account, SENDING, cutoff),
            ).fetchall()
            db.execute(
                "UPDATE channel_outbound SET state=?, error=? WHERE account=? AND state=? AND at<?",
                (UNKNOWN, "the daemon stopped while it was being sent", account, SENDING, cutoff),
            )
            return [(str(r[0]), int(r[1])) for r in rows]

        return self.queue.transaction(work)

    # account state

    def get_state(self, account: str, key: str) -> str | None:
        rows = self.queue.read(
            "SELECT value FROM channel_state WHERE account=? AND key=?", (account, key)
        )
        return str(rows[0][0]) if rows else None

    def set_state(self, account: str, key: str, value: str) -> None:
        self.queue.transaction(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO channel_state (account, key, value) VALUES (?,?,?)",
                (account, key, value),
            )
        )

    def health(self, account: str) -> dict[str, Any] | None:
        raw = self.get_state(account, "health")
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def prune(self, now: float | None = None, keep: float = CHANNEL_KEEP_SECONDS) -> int:
        """Forget update ids and sent-reply records older than ``keep``, and decided or
        expired pairings."""
        cutoff = (time.time() if now is None else now) - keep

        def work(db: sqlite3.Connection) -> int:
            n = db.execute("DELETE FROM channel_inbound WHERE at<?", (cutoff,)).rowcount
            n += db.execute(
                "DELETE FROM channel_outbound WHERE at<? AND state<>?", (cutoff, SENDING)
            ).rowcount
            n += db.execute(
                "DELETE FROM pairings WHERE (state<>? AND decided<?) OR expires<?",
                (PENDING, cutoff, cutoff),
            ).rowcount
            return n

        return self.queue.transaction(work)
