"""The state database's schema versions: a home of an older release opens with nothing
lost, a file from a newer release is refused unchanged, a migration stopped midway
leaves the old version and the next open completes it, and only the holder of the home's
lock migrates."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.home import Home, take_lock
from orchestrator.limits import HELD_REQUEST_TTL_SECONDS
from orchestrator.store.db import SchemaBehind, SchemaTooNew
from orchestrator.store.held import HeldRequests
from orchestrator.store.messages import QUEUE_FILE, MessageQueue, open_queue
from orchestrator.store.schema import LATEST, V1, _statements


def _release_before_versions(path: Path) -> str:
    """A file as releases before schema versions left it (user_version 0), with a
    message and a learned-behaviors write held the old way; the message's id."""
    db = sqlite3.connect(path)
    for statement in _statements(V1):
        db.execute(statement)
    db.execute(
        "INSERT INTO messages (id, group_folder, session, chat, thread, sender, trust, text,"
        " channel, state, created, updated) VALUES"
        " ('m1','g','chat-c9','c9','t','alice','creator','hi','telegram:fam','queued',1,1)"
    )
    db.execute("INSERT INTO learned_pending VALUES ('g','- Be kind.','alice','m1',5.0)")
    db.execute("INSERT INTO learned_pending VALUES ('h','" + "x" * 2001 + "','bob','gone',5.0)")
    db.commit()
    db.close()
    return "m1"


def _version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_a_home_of_a_release_before_versions_opens_with_nothing_lost(tmp_path: Path) -> None:
    path = tmp_path / QUEUE_FILE
    message_id = _release_before_versions(path)
    assert _version(path) == 0
    queue = MessageQueue(path)
    try:
        assert queue.version == LATEST and _version(path) == LATEST
        kept = queue.get(message_id)
        assert kept is not None and (kept.chat, kept.text, kept.state) == ("c9", "hi", "queued")
        # the write held the old way waits as a request in the chat it was made in
        short, long = HeldRequests(queue).waiting(now=6.0)
        assert (short.group, short.content, short.channel, short.chat, short.thread) == (
            "g", "- Be kind.", "telegram:fam", "c9", "t",
        )  # fmt: skip
        assert short.chat_approvable and short.expires == 5.0 + HELD_REQUEST_TTL_SECONDS
        assert long.group == "h" and not long.chat_approvable  # its notice showed 2,000 only
        tables = {r[0] for r in queue.read("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "learned_pending" not in tables
    finally:
        queue.close()
    MessageQueue(path).close()  # opening again changes nothing
    assert _version(path) == LATEST


def test_a_file_from_a_newer_release_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / QUEUE_FILE
    MessageQueue(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {LATEST + 1}")
    db.commit()
    db.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(SchemaTooNew) as refused:
        MessageQueue(path)
    assert refused.value.message == (
        f"{path} is at schema version {LATEST + 1}, newer than this orchestrator understands "
        f"(version {LATEST}); nothing was changed"
    )
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_migration_killed_midway_leaves_the_old_version_and_the_next_open_completes(
    tmp_path: Path,
) -> None:
    path = tmp_path / QUEUE_FILE
    _release_before_versions(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 1")  # version 1 in place: version 2 is what is killed
    db.commit()
    db.close()
    child = textwrap.dedent(
        f"""
        import os, signal
        from orchestrator.store import schema
        original = schema._v2
        def killed(db):
            for statement in schema._statements(schema.V2_HELD_REQUESTS):
                db.execute(statement)  # the new table is made, in the transaction ...
            os.kill(os.getpid(), signal.SIGKILL)  # ... then the process dies
        schema.MIGRATIONS = tuple(
            schema.Migration(m.version, m.what, killed if m.version == 2 else m.apply)
            for m in schema.MIGRATIONS
        )
        from orchestrator.store.messages import MessageQueue
        MessageQueue(__import__("pathlib").Path({str(path)!r}))
        """
    )
    result = subprocess.run([sys.executable, "-c", child], cwd=Path(__file__).parent.parent)
    assert result.returncode == -9
    assert _version(path) == 1
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert "held_requests" not in tables and "learned_pending" in tables  # rolled back whole
    queue = MessageQueue(path)
    try:
        assert queue.version == LATEST and len(HeldRequests(queue).waiting(now=6.0)) == 2
    finally:
        queue.close()


def test_only_the_holder_of_the_homes_lock_migrates(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.ensure_writable()
    path = home.state_dir / QUEUE_FILE
    _release_before_versions(path)
    # a daemon of the older release holds the home: a command may not migrate under it
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from orchestrator.home import Home, take_lock; "
            "lock = take_lock(Home(__import__('pathlib').Path(sys.argv[1]))); "
            "print('held', flush=True); time.sleep(60)",
            str(home.root),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(SchemaBehind) as refused:
            open_queue(home)
        assert refused.value.message == (
            f"{path} is at schema version 0; this orchestrator needs version {LATEST}, and "
            "only the daemon may upgrade it while it runs"
        )
        assert refused.value.hint is not None and f"pid {holder.pid}" in refused.value.hint
        assert _version(path) == 0
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    # this process holding the lock (as the daemon does) migrates
    lock = take_lock(home)
    try:
        queue = open_queue(home)
        assert queue.version == LATEST
        queue.close()
    finally:
        lock.close()
    assert os.path.exists(path)


# Each migration from the schema before it: a file at version N-1 (the migrations before
# N applied, as the release that stopped there left it) holding rows of that shape, then
# opened by this code; what migration N changed is checked, and nothing held is lost.


def _at_version(path: Path, version: int) -> sqlite3.Connection:
    """A database as the release whose schema was ``version`` left it."""
    from orchestrator.store.schema import MIGRATIONS

    db = sqlite3.connect(path, isolation_level=None)
    for migration in MIGRATIONS[:version]:
        migration.apply(db)
    db.execute(f"PRAGMA user_version = {version}")
    db.execute(
        "INSERT INTO messages (id, group_folder, session, chat, thread, sender, trust, text,"
        " channel, state, created, updated) VALUES"
        " ('m1','g','cli.chat-c','c',NULL,'alice','creator','hi','cli','queued',1,1)"
    )
    return db


def _opened(path: Path) -> MessageQueue:
    queue = MessageQueue(path)
    assert queue.version == LATEST
    kept = queue.get("m1")
    assert kept is not None and (kept.text, kept.state, kept.sender) == ("hi", "queued", "alice")
    return queue


def test_migration_2_from_1_turns_held_writes_into_requests(tmp_path: Path) -> None:
    path = tmp_path / QUEUE_FILE
    db = _at_version(path, 1)
    db.execute("INSERT INTO learned_pending VALUES ('g','- Be brief.','alice','m1',5.0)")
    db.close()
    queue = _opened(path)
    try:
        (held,) = HeldRequests(queue).waiting(now=6.0)
        assert (held.group, held.content, held.channel, held.chat) == (
            "g",
            "- Be brief.",
            "cli",
            "c",
        )
        assert queue.migrated[0].what == "held requests with ids of their own"
    finally:
        queue.close()


def test_migration_3_from_2_keeps_what_was_said_apart(tmp_path: Path) -> None:
    path = tmp_path / QUEUE_FILE
    db = _at_version(path, 2)
    db.execute("INSERT INTO task_runs VALUES (7, 100.0, 'm1', 'queued', 100.0)")
    db.close()
    queue = _opened(path)
    try:
        assert queue.get("m1").said is None  # type: ignore[union-attr]  # an old row said its text
        indexes = {r[0] for r in queue.read("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "task_runs_message" in indexes
        assert queue.read("SELECT task_id FROM task_runs WHERE message_id='m1'") == [(7,)]
    finally:
        queue.close()


def test_migration_4_from_3_counts_no_old_turn_as_having_others_words(tmp_path: Path) -> None:
    path = tmp_path / QUEUE_FILE
    _at_version(path, 3).close()
    queue = _opened(path)
    try:
        assert queue.read("SELECT others_words FROM messages WHERE id='m1'") == [(0,)]
        queue.mark_others_words("m1")
        assert queue.read("SELECT others_words FROM messages WHERE id='m1'") == [(1,)]
    finally:
        queue.close()


def test_migration_5_from_4_gives_old_model_calls_no_cost(tmp_path: Path) -> None:
    from orchestrator.store.usage import UsageStore

    path = tmp_path / QUEUE_FILE
    db = _at_version(path, 4)
    db.execute(
        "INSERT INTO usage (message_id, group_folder, provider, model, purpose, started,"
        " latency_ms, input_tokens, output_tokens, outcome) VALUES"
        " ('m1','g','claude','sonnet','turn',10.0,5.0,100,20,'ok')"
    )
    db.close()
    _opened(path).close()
    usage = UsageStore(path)
    try:
        assert usage.tokens_since("g", 0.0) == 120
        assert usage.cost_since("g", 0.0) == 0.0  # unpriced: no cost, not an error
        assert usage.read("SELECT cost, currency, cache_read_tokens FROM usage") == [
            (None, None, 0)
        ]
    finally:
        usage.close()


def test_migration_6_from_5_gives_old_messages_no_files(tmp_path: Path) -> None:
    path = tmp_path / QUEUE_FILE
    _at_version(path, 5).close()
    queue = _opened(path)
    try:
        kept = queue.get("m1")
        assert kept is not None and kept.media == () and queue.files_of("m1") == {}
    finally:
        queue.close()


def test_migration_7_from_6_records_the_home_and_journals_the_upgrade(tmp_path: Path) -> None:
    from orchestrator.store.homerecord import HomeRecord
    from orchestrator.versions import RELEASE

    path = tmp_path / QUEUE_FILE
    _at_version(path, 6).close()
    queue = _opened(path)
    try:
        record = HomeRecord(queue)
        assert record.layout() == 1 and record.release() is None  # a home before 0.2.0
        (line,) = record.unreported()
        assert line.release == RELEASE
        assert line.what == (
            "state database schema 6 -> 7: the home's record: its layout version, releases "
            "and upgrades"
        )
    finally:
        queue.close()


def test_a_new_database_records_this_release_and_layout_and_journals_nothing(
    tmp_path: Path,
) -> None:
    from orchestrator.store.homerecord import HomeRecord
    from orchestrator.versions import LAYOUT_VERSION, RELEASE

    queue = MessageQueue(tmp_path / QUEUE_FILE)
    try:
        record = HomeRecord(queue)
        assert (record.layout(), record.release(), record.journal()) == (
            LAYOUT_VERSION, RELEASE, [],
        )  # fmt: skip
    finally:
        queue.close()


def test_each_migration_has_a_test_from_the_version_before_it() -> None:
    from orchestrator.store.schema import MIGRATIONS

    tested = {int(name.split("_")[2]) for name in globals() if name.startswith("test_migration_")}
    assert tested == {m.version for m in MIGRATIONS[1:]}  # 1 is the pre-versions test above


def test_the_upgrade_of_a_home_of_the_previous_release_killed_midway_completes_next_time(
    tmp_path: Path,
) -> None:
    """A 0.1.0 home (schema 5) killed by SIGKILL in migration 7, after its first table:
    migration 6 stays done, the file stays at version 6, and the next open applies 7
    whole, journaled once."""
    from orchestrator.store.homerecord import HomeRecord

    path = tmp_path / QUEUE_FILE
    _at_version(path, 5).close()
    child = textwrap.dedent(
        f"""
        import os, signal
        from orchestrator.store import schema
        def killed(db):
            db.execute("CREATE TABLE home (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            os.kill(os.getpid(), signal.SIGKILL)
        schema.MIGRATIONS = tuple(
            schema.Migration(m.version, m.what, killed if m.version == 7 else m.apply)
            for m in schema.MIGRATIONS
        )
        from orchestrator.store.messages import MessageQueue
        MessageQueue(__import__("pathlib").Path({str(path)!r}))
        """
    )
    result = subprocess.run([sys.executable, "-c", child], cwd=Path(__file__).parent.parent)
    assert result.returncode == -9
    assert _version(path) == 6
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert "home" not in tables and "upgrades" not in tables  # rolled back whole
    queue = _opened(path)
    try:
        (line,) = HomeRecord(queue).journal()
        assert line.what.startswith("state database schema 6 -> 7: ")
    finally:
        queue.close()
