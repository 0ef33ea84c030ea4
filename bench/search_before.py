"""Memory search as the release before multilingual search had it (index schema 2), for
the benchmarks to measure against in the same run: each chunk indexed as written (a run
of Chinese characters is one word to unicode61), no vocabulary of compound parts, no
map weights, and a query's words alone, ranked by FTS5's own ORDER BY rank. The scan,
the update transaction and the tokenizer are MemoryIndex's own, as they were."""

from __future__ import annotations

import hashlib
import re

from orchestrator.confined import ConfinedDir
from orchestrator.limits import MEMORY_FILE_READ_MAX_BYTES, SEARCH_MAX_RESULTS
from orchestrator.memory.search import (
    PATH_WEIGHT,
    SNIPPET_TOKENS,
    TEXT_WEIGHT,
    FileStat,
    Hit,
    MemoryIndex,
    UpdateReport,
    _retry_busy,
    chunk_lines,
)

_WORD = re.compile(r"\w+", re.UNICODE)


def before_query(query: str) -> str | None:
    """The previous fts_query: the query's \\w+ words, each quoted, any of them."""
    words = [w.lower() for w in _WORD.findall(query)]
    if not words:
        return None
    unique = list(dict.fromkeys(words))[:32]
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in unique)


class BeforeIndex(MemoryIndex):
    """A MemoryIndex that indexes and searches as schema version 2 did."""

    def _match(self, query: str) -> str | None:
        return before_query(query)

    def _drop(self, path: str) -> None:
        db = self.db
        ids = [r[0] for r in db.execute("SELECT id FROM chunks WHERE path=?", (path,))]
        db.executemany("DELETE FROM fts WHERE rowid=?", [(i,) for i in ids])
        db.executemany("DELETE FROM vectors WHERE id=?", [(i,) for i in ids])
        db.execute("DELETE FROM chunks WHERE path=?", (path,))
        db.execute("DELETE FROM files WHERE path=?", (path,))

    def _index(
        self, memory: ConfinedDir, path: str, st: FileStat, known: bool, report: UpdateReport
    ) -> None:
        # the benchmarks index new trees: no skipped, touched or changed files
        db = self.db
        data = memory.read_bytes(path, MEMORY_FILE_READ_MAX_BYTES)
        digest = hashlib.sha256(data).hexdigest()
        text = data.decode("utf-8", errors="replace")
        chunks = chunk_lines(text)
        shown = f"memory/{path}"
        for first, last, body in chunks:
            cursor = db.execute(
                "INSERT INTO chunks (path, start_line, end_line, hash, weight) VALUES (?,?,?,?,1)",
                (path, first, last, hashlib.sha256(body.encode()).hexdigest()),
            )
            db.execute(
                "INSERT INTO fts (rowid, path, text) VALUES (?,?,?)",
                (cursor.lastrowid, shown, body),
            )
        db.execute(
            "INSERT OR REPLACE INTO files (path, size, mtime_ns, ctime_ns, ino, hash, chunks)"
            " VALUES (?,?,?,?,?,?,?)",
            (path, st.size, st.mtime_ns, st.ctime_ns, st.ino, digest, len(chunks)),
        )
        report.added += 1

    def search(self, query: str, max_results: int = 6) -> list[Hit]:
        match = before_query(query)
        if match is None:
            return []
        limit = max(1, min(int(max_results), SEARCH_MAX_RESULTS))
        sql = (
            "SELECT c.path, c.start_line, c.end_line,"
            f" snippet(fts, 1, '**', '**', ' ... ', {SNIPPET_TOKENS}),"
            f" bm25(fts, {PATH_WEIGHT}, {TEXT_WEIGHT}) AS rank"
            " FROM fts JOIN chunks c ON c.id = fts.rowid"
            " WHERE fts MATCH ? ORDER BY rank LIMIT ?"
        )
        rows = _retry_busy(lambda: self.db.execute(sql, (match, limit * 4)).fetchall())
        hits: dict[str, Hit] = {}
        for r in rows:
            if str(r[0]) not in hits:
                hits[str(r[0])] = Hit(
                    f"memory/{r[0]}", int(r[1]), int(r[2]), str(r[3]), round(-float(r[4]), 4)
                )
        return list(hits.values())[:limit]
