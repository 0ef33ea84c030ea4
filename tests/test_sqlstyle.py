"""The SQL style check of the suite (tests/sqlstyle.py): what it reads as out of style, and
that it watches the package's statements only."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from orchestrator.store.db import StateDB
from tests.sqlstyle import Watch, out_of_style


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT id, text FROM messages WHERE group_folder = ? AND state IN ('done', 'failed')",
        "INSERT OR IGNORE INTO chats (key, release) VALUES (:key, 'x')",
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL)",
        "SELECT COUNT(*), MAX(seq) FROM m JOIN c ON c.id = m.chat -- a Comment IN it",
        "UPDATE o SET state = 'unknown' WHERE at < Inf AND b = x'00FF' /* Mixed */",
        "SELECT rowid, bm25(docs) FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT 5",
        'SELECT "Quoted Name" FROM t WHERE n = 1.5e+30',
        "PRAGMA journal_mode=WAL",
    ],
)
def test_statements_in_the_house_style_pass(statement: str) -> None:
    assert out_of_style(statement) == []


def test_a_statement_in_upper_case_names_each_name() -> None:
    found = out_of_style("SELECT ID, TEXT FROM MESSAGES WHERE GROUP_FOLDER = ?")
    assert found == [
        "'ID': a name in upper case",
        "'MESSAGES': a name in upper case",
        "'GROUP_FOLDER': a name in upper case",
    ]


def test_a_statement_in_lower_case_names_each_keyword() -> None:
    found = out_of_style("select id from messages where seq > 1 order by seq limit 2")
    assert found == [
        f"{word!r}: a keyword not in upper case"
        for word in ("select", "from", "where", "order", "by", "limit")
    ]


def test_a_function_in_lower_case_is_named_and_a_name_of_its_word_is_not() -> None:
    found = out_of_style("SELECT sum (cost), max(at), bm25(docs), count FROM usage")
    assert found == ["'sum': a function not in upper case", "'max': a function not in upper case"]


def test_a_fragment_and_a_mixed_case_name_are_read() -> None:
    assert out_of_style(" and seq > ?") == ["'and': a keyword not in upper case"]
    assert out_of_style("SELECT groupFolder FROM m") == ["'groupFolder': a name in mixed case"]


def test_the_watch_records_the_packages_statements_not_the_tests(tmp_path: Path) -> None:
    watch = Watch()
    real = sqlite3.connect
    sqlite3.connect = watch.wrap(real)  # type: ignore[assignment]
    try:
        db = StateDB(tmp_path / "state.db")
        try:
            db.read("SELECT COUNT(*) FROM messages")
            assert watch.take() == []  # the store's own statements are in style
            db.read("select count(*) from messages")
            own = sqlite3.connect(tmp_path / "other.db")
            own.execute("select 1")  # run by this test, not by the package
            own.close()
        finally:
            db.close()
    finally:
        sqlite3.connect = real  # type: ignore[assignment]
    assert watch.take() == [
        "'select count(*) from messages': 'select': a keyword not in upper case; "
        "'count': a function not in upper case; 'from': a keyword not in upper case"
    ]
    assert watch.take() == []
