"""The state database's schema: its versions and the ordered migrations between them.

Version 1 is the shape every release before versioning left (its tables were made with
IF NOT EXISTS as they were added, so a home that lacks some gets them here). Each later
version is one migration, applied in one transaction with ``PRAGMA user_version``. A
migration is added at the end, never edited once released, and tested from the version
before it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.limits import HELD_REQUEST_TTL_SECONDS
from orchestrator.versions import LAYOUT_VERSION, RELEASE

V1 = """
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

CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    group_folder TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    purpose TEXT NOT NULL,
    started REAL NOT NULL,
    latency_ms REAL NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS usage_group_time ON usage (group_folder, started);
CREATE INDEX IF NOT EXISTS usage_message ON usage (message_id);
"""

V2_HELD_REQUESTS = """CREATE TABLE IF NOT EXISTS held_requests (
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


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _v1(db: sqlite3.Connection) -> None:
    for statement in _statements(V1):
        db.execute(statement)


def _v2(db: sqlite3.Connection) -> None:
    """Held requests, each with an id of its own (writes held by the release before,
    one per group in ``learned_pending``, become requests of the chat they were made in;
    their notice showed at most 2,000 characters, so a longer one may be approved by the
    operator only)."""
    for statement in _statements(V2_HELD_REQUESTS):
        db.execute(statement)
    rows = db.execute(
        "SELECT p.group_folder, p.content, p.sender, p.message_id, p.created,"
        " m.channel, m.chat, m.thread FROM learned_pending p"
        " LEFT JOIN messages m ON m.id=p.message_id"
    ).fetchall()
    import hashlib

    for group, content, sender, message_id, created, channel, chat, thread in rows:
        db.execute(
            "INSERT INTO held_requests (group_folder, kind, content, sha256, channel, chat,"
            " thread, sender, message_id, chat_approvable, created, expires)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (group, "learned", content, hashlib.sha256(str(content).encode()).hexdigest(),
             channel or "cli", chat or "", thread, sender, message_id,
             int(len(str(content)) <= 2000 and chat is not None), created,
             float(created) + HELD_REQUEST_TTL_SECONDS),
        )  # fmt: skip
    db.execute("DROP TABLE learned_pending")


def _v3(db: sqlite3.Connection) -> None:
    """What a person said, beside the text a turn is given (a chat app takes the bot's
    mention off the front); task runs found by their message without a scan."""
    db.execute("ALTER TABLE messages ADD COLUMN said TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS task_runs_message ON task_runs (message_id)")


def _v4(db: sqlite3.Connection) -> None:
    """Turns whose context received others' words from a tool (an MCP server's result),
    counted like a message from someone who is not a creator."""
    db.execute("ALTER TABLE messages ADD COLUMN others_words INTEGER NOT NULL DEFAULT 0")


def _v5(db: sqlite3.Connection) -> None:
    """Money: each model call's cache tokens and cost (in the currency of the prices it
    was priced with; NULL when its model has no prices), and the budget pauses an
    operator lifted until the end of their period."""
    db.execute("ALTER TABLE usage ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE usage ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE usage ADD COLUMN cost REAL")
    db.execute("ALTER TABLE usage ADD COLUMN currency TEXT")
    db.execute(
        "CREATE TABLE IF NOT EXISTS budget_lifts (group_folder TEXT PRIMARY KEY,"
        " until REAL NOT NULL, created REAL NOT NULL)"
    )


def _v6(db: sqlite3.Connection) -> None:
    """Media: the files a message came with (JSON; a message whose files are being
    prepared waits in state ``preparing``), and the files a reply carries (copied into
    the host's outbox)."""
    db.execute("ALTER TABLE messages ADD COLUMN media TEXT")
    db.execute(
        "CREATE TABLE IF NOT EXISTS reply_files (message_id TEXT NOT NULL, seq INTEGER NOT"
        " NULL, name TEXT NOT NULL, mime TEXT NOT NULL, size INTEGER NOT NULL, kind TEXT"
        " NOT NULL, path TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (message_id, seq))"
    )


def _v7(db: sqlite3.Connection) -> None:
    """The home's own record: the version of its folders' layout and the release that
    last started its daemon (``home``), and a journal of the upgrades applied to it
    (``upgrades``), which the daemon reports at its next start."""
    db.execute("CREATE TABLE IF NOT EXISTS home (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute(
        "CREATE TABLE IF NOT EXISTS upgrades (id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " at REAL NOT NULL, release TEXT NOT NULL, what TEXT NOT NULL,"
        " reported INTEGER NOT NULL DEFAULT 0)"
    )


JOURNAL_FROM = 7  # the first version with the upgrades journal
HOME_LAYOUT, HOME_RELEASE = "layout", "release"  # keys of the home's record


class SchemaTooNew(OrchestratorError):
    """The file was written by a newer release than this code."""


class SchemaBehind(OrchestratorError):
    """The file is older than this code and may not be migrated now (a daemon of an older
    release holds the home)."""


@dataclass(frozen=True)
class Migration:
    version: int
    what: str
    apply: Callable[[sqlite3.Connection], None]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the tables of the releases before schema versions", _v1),
    Migration(2, "held requests with ids of their own", _v2),
    Migration(3, "what a person said beside the turn's text; task runs by message", _v3),
    Migration(4, "turns that received others' words from a tool", _v4),
    Migration(5, "the cost and cache tokens of model calls; lifted budget pauses", _v5),
    Migration(6, "the files of messages and of replies", _v6),
    Migration(7, "the home's record: its layout version, releases and upgrades", _v7),
)
LATEST = MIGRATIONS[-1].version


def _create(db: sqlite3.Connection) -> int:
    """A new database: every migration, and the home's record (the current layout, made
    by this release), in one transaction; nothing goes to the upgrades journal."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for migration in MIGRATIONS:
            migration.apply(db)
        db.executemany(
            "INSERT INTO home (key, value) VALUES (?,?)",
            [(HOME_LAYOUT, str(LAYOUT_VERSION)), (HOME_RELEASE, RELEASE)],
        )
        db.execute(f"PRAGMA user_version = {LATEST}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return LATEST


def schema_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def bring_up_to_date(
    db: sqlite3.Connection, path: Path, migrate: bool, behind_hint: str | None = None
) -> tuple[int, list[Migration]]:
    """Apply the migrations ``db`` lacks (each in its own transaction); its version and
    the migrations applied, which are written to the upgrades journal. SchemaTooNew when
    it is newer than this code, SchemaBehind when it is older and ``migrate`` is false;
    in both cases nothing is changed."""
    found = schema_version(db)
    if found > LATEST:
        raise SchemaTooNew(
            f"{path} is at schema version {found}, newer than this orchestrator "
            f"understands (version {LATEST}); nothing was changed",
            hint="run the release that wrote it, or a newer one",
        )
    if found == LATEST:
        return found, []
    if not migrate:
        raise SchemaBehind(
            f"{path} is at schema version {found}; this orchestrator needs version "
            f"{LATEST}, and only the daemon may upgrade it while it runs",
            hint=behind_hint
            or "restart the daemon with this release (orchestrator down, "
            "then orchestrator up): it upgrades the file at its start",
        )
    if found == 0 and not db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
        return _create(db), list(MIGRATIONS)
    applied: list[Migration] = []
    for migration in MIGRATIONS:
        if migration.version <= found:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            migration.apply(db)
            db.execute(f"PRAGMA user_version = {migration.version}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        applied.append(migration)
        found = migration.version
    if applied and found >= JOURNAL_FROM:  # a journal line each, once the journal exists
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            "INSERT INTO upgrades (at, release, what) VALUES (?,?,?)",
            [
                (now, RELEASE, f"state database schema {m.version - 1} -> {m.version}: {m.what}")
                for m in applied
            ],
        )
        db.execute("COMMIT")
    return found, applied
