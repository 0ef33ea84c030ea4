"""The home's own record, in the state database: the version of its folders' layout,
the release that last started its daemon, and the journal of upgrades applied to it
(schema migrations, layout steps, a new release), each reported once by the daemon."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from orchestrator.store.db import StateDB
from orchestrator.store.rows import real, text, whole
from orchestrator.store.schema import HOME_LAYOUT as LAYOUT_KEY
from orchestrator.store.schema import HOME_RELEASE as RELEASE_KEY


@dataclass(frozen=True)
class Upgrade:
    """One line of the upgrades journal: what was done to the home, by which release."""

    id: int
    at: float
    release: str
    what: str

    def to_dict(self) -> dict[str, object]:
        return {"at": self.at, "release": self.release, "what": self.what}


class HomeRecord:
    """The home's record in one state database."""

    def __init__(self, db: StateDB) -> None:
        self.db = db

    def _get(self, key: str) -> str | None:
        row = self.db.read_one("SELECT value FROM home WHERE key=?", (key,))
        return None if row is None else text(row[0])

    def _set(self, db: sqlite3.Connection, key: str, value: str) -> None:
        db.execute(
            "INSERT INTO home (key, value) VALUES (?,?)"
            " ON CONFLICT (key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def layout(self) -> int:
        """The layout version of the home's folders (1: never recorded, a home of a
        release before versions)."""
        value = self._get(LAYOUT_KEY)
        return int(value) if value is not None and value.isdigit() else 1

    def release(self) -> str | None:
        """The release that last started the home's daemon (None: one before 0.2.0)."""
        return self._get(RELEASE_KEY)

    def set_layout(self, version: int, what: str, release: str) -> None:
        """Record the layout at ``version``, with the step that brought it there."""

        def work(db: sqlite3.Connection) -> None:
            self._set(db, LAYOUT_KEY, str(version))
            self._journal(db, release, what)

        self.db.transaction(work)

    def set_release(self, release: str, what: str | None) -> None:
        """Record the release that now runs the daemon; ``what`` (a change of release)
        goes to the journal."""

        def work(db: sqlite3.Connection) -> None:
            self._set(db, RELEASE_KEY, release)
            if what is not None:
                self._journal(db, release, what)

        self.db.transaction(work)

    @staticmethod
    def _journal(db: sqlite3.Connection, release: str, what: str) -> None:
        db.execute(
            "INSERT INTO upgrades (at, release, what) VALUES (?,?,?)", (time.time(), release, what)
        )

    def unreported(self) -> list[Upgrade]:
        """The journal's lines no daemon start has reported yet, oldest first."""
        rows = self.db.read(
            "SELECT id, at, release, what FROM upgrades WHERE reported=0 ORDER BY id"
        )
        return [Upgrade(whole(r[0]), real(r[1]), text(r[2]), text(r[3])) for r in rows]

    def mark_reported(self, upgrades: list[Upgrade]) -> None:
        ids = [(u.id,) for u in upgrades]
        self.db.transaction(
            lambda db: db.executemany("UPDATE upgrades SET reported=1 WHERE id=?", ids)
        )

    def journal(self) -> list[Upgrade]:
        """Every line of the journal, oldest first."""
        rows = self.db.read("SELECT id, at, release, what FROM upgrades ORDER BY id")
        return [Upgrade(whole(r[0]), real(r[1]), text(r[2]), text(r[3])) for r in rows]
