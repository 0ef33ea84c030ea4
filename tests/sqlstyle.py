"""The package's SQL is written in one style: keywords and SQL functions in upper case,
names (tables, columns, indexes, aliases) in lower case. conftest.py watches every
statement the package runs during a test (SQLite's trace callback on each connection the
package opens) and fails the test at its end on any statement out of style, naming it.

SQLite itself reads keywords and names in any case, so a statement out of style runs the
same; the check keeps the text readable and one style, as ruff does for Python."""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Callable
from typing import Any


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# the functions the package writes in upper case: one in lower case before its "(" is
# out of style (a name of the same word is never followed by one)
FUNCTIONS = _words(
    """
    ABS AVG CAST COALESCE COUNT GROUP_CONCAT IFNULL IIF INSTR LENGTH LOWER MAX MIN NULLIF
    ROUND SUBSTR SUM TOTAL TRIM TYPEOF UPPER
    """
)
# SQLite's keywords (https://sqlite.org/lang_keywords.html), and the types, functions and
# pragma values the package writes in upper case
KEYWORDS = (
    _words(
        """
    ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE
    BEGIN BETWEEN BY CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT
    CREATE CROSS CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT
    DEFERRABLE DEFERRED DELETE DESC DETACH DISTINCT DO DROP EACH ELSE END ESCAPE EXCEPT
    EXCLUDE EXCLUSIVE EXISTS EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM FULL
    GENERATED GLOB GROUP GROUPS HAVING IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER
    INSERT INSTEAD INTERSECT INTO IS ISNULL JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED
    NATURAL NO NOT NOTHING NOTNULL NULL NULLS OF OFFSET ON OR ORDER OTHERS OUTER OVER
    PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY RAISE RANGE RECURSIVE REFERENCES REGEXP
    REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING RIGHT ROLLBACK ROW ROWS SAVEPOINT
    SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER UNBOUNDED UNION UNIQUE
    UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT
    INTEGER TEXT BLOB REAL NUMERIC UNINDEXED
    WAL NORMAL OFF TRUE FALSE
    """
    )
    | FUNCTIONS
)
# the keywords that are never a name in the package's SQL: one of them in lower case is a
# keyword out of style (a name may be a keyword's word, as the columns "key", "text" and
# "release")
STRUCTURE = _words(
    """
    SELECT INSERT UPDATE DELETE REPLACE CREATE DROP ALTER PRAGMA BEGIN COMMIT ROLLBACK
    SAVEPOINT FROM WHERE AND OR NOT NULL INTO VALUES SET ORDER BY GROUP HAVING
    LIMIT OFFSET JOIN ON AS IN IS LIKE GLOB MATCH BETWEEN EXISTS DISTINCT UNION CASE WHEN
    THEN ELSE TABLE INDEX TRIGGER VIRTUAL USING IF PRIMARY UNIQUE DEFAULT CONFLICT DO
    NOTHING IGNORE RETURNING WITH DESC ASC AUTOINCREMENT COALESCE
    """
)
_LITERAL = re.compile(r"[xX]?'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.S)
_WORD = re.compile(r"(?<![\w:@$?])[A-Za-z_][A-Za-z0-9_]*")


def out_of_style(statement: str) -> list[str]:
    """Each word of ``statement`` out of style, with why; none for one in style. Text in
    quotes (literals, quoted names), comments, numbers and parameters are not read."""
    found = []
    text = _LITERAL.sub(" ", statement)
    for match in _WORD.finditer(text):
        word = match[0]
        if word in ("Inf", "NaN"):  # a bound float as SQLite writes it out
            continue
        called = text[match.end() :].lstrip().startswith("(")
        if word.isupper() and word not in KEYWORDS:
            found.append(f"{word!r}: a name in upper case")
        elif not word.isupper() and word.upper() in STRUCTURE:
            found.append(f"{word!r}: a keyword not in upper case")
        elif not word.isupper() and called and word.upper() in FUNCTIONS:
            found.append(f"{word!r}: a function not in upper case")
        elif not word.isupper() and not word.islower():
            found.append(f"{word!r}: a name in mixed case")
    return found


def _package_caller() -> bool:
    """Whether the statement being traced was run by the package's code: the trace
    callback runs inside the ``execute`` call, so the first frame up that is not this
    module's is the caller's."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # type: ignore[assignment]
    return frame is not None and frame.f_globals.get("__name__", "").startswith("orchestrator.")


class Watch:
    """The statements out of style seen since the last ``take``."""

    problem = "SQL out of style (tests/sqlstyle.py)"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def trace(self, statement: str) -> None:
        if _package_caller():
            words = out_of_style(statement)
            if words:
                self.seen.append(f"{statement.strip()!r}: {'; '.join(words)}")

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen

    def wrap(self, real: Callable[..., sqlite3.Connection]) -> Callable[..., Any]:
        """``sqlite3.connect`` with every connection's statements watched."""

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            db = real(*args, **kwargs)
            db.set_trace_callback(self.trace)
            return db

        return connect
