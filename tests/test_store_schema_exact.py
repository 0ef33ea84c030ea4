"""The state database's schema and the reading of its rows, exactly: each column reader's
values and refusals; each migration from every older version keeps the rows and ends at
the shape of a new database; the boundaries of migration 2; the journal of what was
applied; a failed migration leaves its version and a usable connection."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from orchestrator.limits import HELD_REQUEST_TTL_SECONDS
from orchestrator.store import rows, schema
from orchestrator.store.schema import (
    LATEST,
    MIGRATIONS,
    Migration,
    SchemaBehind,
    SchemaTooNew,
    bring_up_to_date,
    schema_version,
)
from orchestrator.versions import LAYOUT_VERSION, RELEASE

# --- rows: typed reading of a column ---------------------------------------------------


def test_text_keeps_a_string_and_writes_anything_else_as_one() -> None:
    assert rows.text("abc") == "abc"
    assert rows.text("") == ""
    assert rows.text(12) == "12"
    assert rows.text(1.5) == "1.5"
    assert rows.text(None) == "None"


def test_opt_text_keeps_null_as_none() -> None:
    assert rows.opt_text(None) is None
    assert rows.opt_text("x") == "x"
    assert rows.opt_text("") == ""
    assert rows.opt_text(3) == "3"


def test_whole_reads_numbers_and_numeric_text() -> None:
    assert rows.whole(7) == 7
    assert rows.whole(0) == 0
    assert rows.whole(-3) == -3
    assert rows.whole(7.9) == 7
    assert rows.whole("42") == 42
    assert type(rows.whole(7.0)) is int


@pytest.mark.parametrize("value", [True, False, None, b"1", [1], object()])
def test_whole_refuses_what_is_not_a_number(value: object) -> None:
    with pytest.raises(TypeError) as refused:
        rows.whole(value)
    assert str(refused.value) == f"expected a whole number in the state database, got {value!r}"


def test_real_reads_numbers_and_numeric_text() -> None:
    assert rows.real(2.5) == 2.5
    assert rows.real(3) == 3.0 and type(rows.real(3)) is float
    assert rows.real("1.25") == 1.25
    assert rows.real(0) == 0.0


@pytest.mark.parametrize("value", [True, False, None, b"1", [1.0], object()])
def test_real_refuses_what_is_not_a_number(value: object) -> None:
    with pytest.raises(TypeError) as refused:
        rows.real(value)
    assert str(refused.value) == f"expected a number in the state database, got {value!r}"


def test_opt_real_keeps_null_as_none() -> None:
    assert rows.opt_real(None) is None
    assert rows.opt_real(0) == 0.0 and type(rows.opt_real(0)) is float
    assert rows.opt_real("2.5") == 2.5
    with pytest.raises(TypeError):
        rows.opt_real(True)


def test_flag_reads_an_integer_column_and_null_as_false() -> None:
    assert rows.flag(None) is False
    assert rows.flag(0) is False
    assert rows.flag(1) is True
    assert rows.flag(2) is True
    assert rows.flag("1") is True
    assert rows.flag("0") is False
    with pytest.raises(TypeError):
        rows.flag(True)


# --- schema: versions and migrations ---------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)  # transactions explicit, as the store's


def _shape(db: sqlite3.Connection) -> list[tuple[object, ...]]:
    """Every table and index with the SQL that made it, and every table's columns (name,
    type, NOT NULL, default, primary key position)."""
    master = db.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
    ).fetchall()
    columns = [
        (table, *column)
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        for column in db.execute(f"PRAGMA table_info({table})")
    ]
    return sorted(master, key=repr) + sorted(columns, key=repr)


def _fresh_shape(tmp_path: Path) -> list[tuple[object, ...]]:
    path = tmp_path / "fresh.db"
    db = _connect(path)
    try:
        assert bring_up_to_date(db, path, True) == (LATEST, list(MIGRATIONS))
        return _shape(db)
    finally:
        db.close()


def _message(db: sqlite3.Connection, message_id: str, chat: str | None = "c") -> None:
    db.execute(
        "INSERT INTO messages (id, group_folder, session, chat, thread, sender, trust, text,"
        " channel, state, created, updated) VALUES (?,'g','s',?,'t','alice','creator','hi',"
        "'telegram:fam','queued',1,2)",
        (message_id, chat if chat is not None else "x"),
    )


def _at(path: Path, version: int) -> sqlite3.Connection:
    """A file as the release at ``version`` left it (0: a release before versions, with
    the tables of version 1), holding a message, a task run and a usage row."""
    db = _connect(path)
    for migration in MIGRATIONS[: max(version, 1)]:
        migration.apply(db)
    db.execute(f"PRAGMA user_version = {version}")
    _message(db, "m1")
    db.execute("INSERT INTO task_runs VALUES (7, 100.0, 'm1', 'queued', 100.0)")
    db.execute(
        "INSERT INTO usage (message_id, group_folder, provider, model, purpose, started,"
        " latency_ms, input_tokens, output_tokens, outcome) VALUES"
        " ('m1','g','claude','sonnet','turn',10.0,5.0,100,20,'ok')"
    )
    return db


def _journal(db: sqlite3.Connection) -> list[tuple[object, ...]]:
    return db.execute("SELECT release, what, reported FROM upgrades ORDER BY id").fetchall()


def _expected_journal(after: int) -> list[tuple[object, ...]]:
    return [
        (RELEASE, f"state database schema {m.version - 1} -> {m.version}: {m.what}", 0)
        for m in MIGRATIONS[after:]
    ]


@pytest.mark.parametrize("version", range(LATEST))
def test_a_file_of_each_older_version_ends_at_the_shape_of_a_new_one_with_its_rows(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "state.db"
    _at(path, version).close()
    db = _connect(path)
    try:
        assert schema_version(db) == version
        found, applied = bring_up_to_date(db, path, True)
        assert found == LATEST and schema_version(db) == LATEST
        assert applied == list(MIGRATIONS[version:])
        assert _shape(db) == _fresh_shape(tmp_path)
        assert db.execute(
            "SELECT id, chat, thread, text, said, others_words, media, created, updated"
            " FROM messages"
        ).fetchall() == [("m1", "c", "t", "hi", None, 0, None, 1.0, 2.0)]
        assert db.execute("SELECT * FROM task_runs").fetchall() == [
            (7, 100.0, "m1", "queued", 100.0)
        ]
        assert db.execute(
            "SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost,"
            " currency FROM usage"
        ).fetchall() == [(100, 20, 0, 0, None, None)]
        assert _journal(db) == _expected_journal(version)
        # the home's record of a home migrated to it says nothing of its release
        assert db.execute("SELECT * FROM home").fetchall() == []
        assert not db.in_transaction
        # opening it again applies nothing and journals nothing
        assert bring_up_to_date(db, path, True) == (LATEST, [])
        assert _journal(db) == _expected_journal(version)
    finally:
        db.close()


def test_a_new_file_gets_every_migration_at_once_and_the_homes_record(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = _connect(path)
    try:
        assert schema_version(db) == 0
        assert bring_up_to_date(db, path, True) == (LATEST, list(MIGRATIONS))
        assert schema_version(db) == LATEST and not db.in_transaction
        assert sorted(db.execute("SELECT key, value FROM home").fetchall()) == [
            ("layout", str(LAYOUT_VERSION)),
            ("release", RELEASE),
        ]
        assert _journal(db) == []
    finally:
        db.close()


def test_a_new_file_keeps_the_defaults_and_constraints_of_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = _connect(path)
    try:
        bring_up_to_date(db, path, True)
        _message(db, "m1")
        assert db.execute(
            "SELECT seq, attempts, not_before, last_error, said, others_words, media FROM messages"
        ).fetchall() == [(1, 0, 0.0, None, None, 0, None)]
        with pytest.raises(sqlite3.IntegrityError):
            _message(db, "m1")  # ids are unique
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("INSERT INTO home (key, value) VALUES ('layout', '2')")
        db.execute("INSERT INTO upgrades (at, release, what) VALUES (1.0, 'r', 'w')")
        assert db.execute("SELECT id, reported FROM upgrades").fetchall() == [(1, 0)]
        db.execute("INSERT INTO budget_lifts VALUES ('g', 5.0, 1.0)")
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("INSERT INTO budget_lifts VALUES ('g', 6.0, 1.0)")
        db.execute("INSERT INTO reply_files VALUES ('m1', 0, 'a.txt', 'text/plain', 3, 'file',"
                   " '/o/a', 1.0)")  # fmt: skip
        with pytest.raises(sqlite3.IntegrityError):
            db.execute("INSERT INTO reply_files VALUES ('m1', 0, 'b', 'x', 1, 'file', '/b', 1)")
        # every column of a reply's file is required (a key column too: SQLite would let
        # a NULL into a PRIMARY KEY that is not an INTEGER one without NOT NULL)
        for column in range(8):
            values = ["'m2'", "1", "'b'", "'x'", "1", "'file'", "'/b'", "1.0"]
            values[column] = "NULL"
            with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
                db.execute(f"INSERT INTO reply_files VALUES ({', '.join(values)})")
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"task_runs_message", "held_requests_chat", "messages_pending"} <= indexes
        assert "learned_pending" not in {
            r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    finally:
        db.close()


def _held(db: sqlite3.Connection) -> list[tuple[object, ...]]:
    return db.execute(
        "SELECT group_folder, kind, content, sha256, channel, chat, thread, sender,"
        " message_id, chat_approvable, created, expires FROM held_requests ORDER BY id"
    ).fetchall()


def test_migration_2_makes_each_held_write_a_request_of_its_chat(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = _at(path, 1)
    _message(db, "m2")
    edge, over = "e" * 2000, "o" * 2001  # a notice showed at most 2,000 characters
    db.executemany(
        "INSERT INTO learned_pending VALUES (?,?,?,?,?)",
        [
            ("g1", edge, "alice", "m1", 5.0),
            ("g2", over, "bob", "m2", 6.5),
            ("g3", "- Be kind.", "carol", "gone", 7.0),
        ],
    )
    db.close()
    db = _connect(path)
    try:
        bring_up_to_date(db, path, True)

        def sha(text: str) -> str:
            return hashlib.sha256(text.encode()).hexdigest()

        assert _held(db) == [
            ("g1", "learned", edge, sha(edge), "telegram:fam", "c", "t", "alice", "m1", 1,
             5.0, 5.0 + HELD_REQUEST_TTL_SECONDS),
            ("g2", "learned", over, sha(over), "telegram:fam", "c", "t", "bob", "m2", 0,
             6.5, 6.5 + HELD_REQUEST_TTL_SECONDS),
            # its message is gone: a request of the operator's, in no chat
            ("g3", "learned", "- Be kind.", sha("- Be kind."), "cli", "", None, "carol",
             "gone", 0, 7.0, 7.0 + HELD_REQUEST_TTL_SECONDS),
        ]  # fmt: skip
    finally:
        db.close()


def test_migration_2_with_nothing_held_makes_no_request(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _at(path, 1).close()
    db = _connect(path)
    try:
        bring_up_to_date(db, path, True)
        assert _held(db) == []
    finally:
        db.close()


def test_a_file_newer_than_this_code_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = _at(path, LATEST)
    db.execute(f"PRAGMA user_version = {LATEST + 1}")
    try:
        before = _shape(db)
        with pytest.raises(SchemaTooNew) as refused:
            bring_up_to_date(db, path, True)
        assert refused.value.message == (
            f"{path} is at schema version {LATEST + 1}, newer than this orchestrator "
            f"understands (version {LATEST}); nothing was changed"
        )
        assert refused.value.hint == "run the release that wrote it, or a newer one"
        assert schema_version(db) == LATEST + 1 and _shape(db) == before
    finally:
        db.close()


def test_an_older_file_is_refused_unchanged_when_this_process_may_not_migrate(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    db = _at(path, 3)
    try:
        before = _shape(db)
        with pytest.raises(SchemaBehind) as refused:
            bring_up_to_date(db, path, False)
        assert refused.value.message == (
            f"{path} is at schema version 3; this orchestrator needs version {LATEST}, and "
            "only the daemon may upgrade it while it runs"
        )
        assert refused.value.hint == (
            "restart the daemon with this release (orchestrator down, then orchestrator up): "
            "it upgrades the file at its start"
        )
        with pytest.raises(SchemaBehind) as refused:
            bring_up_to_date(db, path, False, "stop the daemon (pid 12) first")
        assert refused.value.hint == "stop the daemon (pid 12) first"
        assert schema_version(db) == 3 and _shape(db) == before
    finally:
        db.close()


def test_an_empty_file_is_refused_too_when_this_process_may_not_migrate(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = _connect(path)
    try:
        with pytest.raises(SchemaBehind):
            bring_up_to_date(db, path, False)
        assert db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    finally:
        db.close()


def test_a_file_at_the_latest_version_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = _at(path, LATEST)
    try:
        before = _shape(db)
        assert bring_up_to_date(db, path, False) == (LATEST, [])
        assert bring_up_to_date(db, path, True) == (LATEST, [])
        assert _shape(db) == before and _journal(db) == []
    finally:
        db.close()


def _failing(version: int) -> tuple[Migration, ...]:
    """The migrations, with ``version``'s making a table and then failing."""

    def fails(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half (x INTEGER)")
        raise RuntimeError("migration failed")

    return tuple(Migration(m.version, m.what, fails if m.version == version else m.apply)
                 for m in MIGRATIONS)  # fmt: skip


def test_a_failed_migration_keeps_the_ones_before_it_and_rolls_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    _at(path, 4).close()
    db = _connect(path)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(schema, "MIGRATIONS", _failing(6))
            with pytest.raises(RuntimeError, match="migration failed"):
                bring_up_to_date(db, path, True)
        assert not db.in_transaction  # the connection is usable
        assert schema_version(db) == 5  # migration 5 stays done
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        assert "half" not in names and "budget_lifts" in names and "reply_files" not in names
        # the next open completes it, journaling what it applied then
        assert bring_up_to_date(db, path, True) == (LATEST, list(MIGRATIONS[5:]))
        assert _shape(db) == _fresh_shape(tmp_path)
        assert _journal(db) == _expected_journal(5)
    finally:
        db.close()


def test_a_new_file_whose_creation_fails_is_left_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    db = _connect(path)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(schema, "MIGRATIONS", _failing(LATEST))
            with pytest.raises(RuntimeError, match="migration failed"):
                bring_up_to_date(db, path, True)
        assert not db.in_transaction
        assert schema_version(db) == 0
        assert db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
        assert bring_up_to_date(db, path, True) == (LATEST, list(MIGRATIONS))
        assert _shape(db) == _fresh_shape(tmp_path)
    finally:
        db.close()


def test_statements_are_the_scripts_parts_between_semicolons() -> None:
    assert schema._statements(" a;\n b ;; \n") == ["a", "b"]
    assert schema._statements("") == []
    assert len(schema._statements(schema.V1)) == schema.V1.count(";")


def test_the_schema_the_migrations_leave_is_the_released_one(tmp_path: Path) -> None:
    """A released migration is never edited: what migrations 3 to 7 leave in the file, as
    SQLite keeps it (the text of each table and index, columns added at the end), is what
    the releases that wrote it left, from a new file and from one at version 2 alike."""
    path = tmp_path / "state.db"
    _at(path, 2).close()
    for db in (_connect(path), _connect(tmp_path / "new.db")):
        try:
            bring_up_to_date(db, path, True)

            def sql(name: str, db: sqlite3.Connection = db) -> str:
                row = db.execute("SELECT sql FROM sqlite_master WHERE name=?", (name,)).fetchone()
                assert row is not None, name
                return str(row[0])

            assert sql("messages").endswith(
                "\n, said TEXT, others_words INTEGER NOT NULL DEFAULT 0, media TEXT)"
            )
            assert sql("usage").endswith(
                "\n, cache_read_tokens INTEGER NOT NULL DEFAULT 0, cache_write_tokens INTEGER"
                " NOT NULL DEFAULT 0, cost REAL, currency TEXT)"
            )
            assert sql("task_runs_message") == (
                "CREATE INDEX task_runs_message ON task_runs (message_id)"
            )
            assert sql("budget_lifts") == (
                "CREATE TABLE budget_lifts (group_folder TEXT PRIMARY KEY, until REAL NOT NULL,"
                " created REAL NOT NULL)"
            )
            assert sql("reply_files") == (
                "CREATE TABLE reply_files (message_id TEXT NOT NULL, seq INTEGER NOT NULL, name"
                " TEXT NOT NULL, mime TEXT NOT NULL, size INTEGER NOT NULL, kind TEXT NOT NULL,"
                " path TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (message_id, seq))"
            )
            assert sql("home") == "CREATE TABLE home (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            assert sql("upgrades") == (
                "CREATE TABLE upgrades (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,"
                " release TEXT NOT NULL, what TEXT NOT NULL, reported INTEGER NOT NULL DEFAULT 0)"
            )
        finally:
            db.close()
