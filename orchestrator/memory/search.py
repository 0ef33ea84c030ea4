"""Search over a group's memory: a derived SQLite FTS5 index, kept on the host.

The index lives in ``state/index/<folder>.sqlite``, never in the memory folder: deleting
it loses nothing, the next search rebuilds it. It covers every Markdown file of the
memory tree (concept files, daily notes, imports), cut into chunks on line boundaries;
each chunk keeps its path, first and last line and a content hash. Files are read only
through the confined file layer (the container writes this tree), and a file counts as
changed when its size, ``mtime_ns`` or ``ctime_ns`` differ (a container can set a
file's mtime back, not its ctime); a changed file whose hash is the same only has its
status updated.

One update runs at a time per index (a lock file beside it) and in one transaction:
a process killed midway leaves the index as it was, and the next update resumes.
Readers never wait for it (WAL). A file that is not a usable index is moved aside and
rebuilt, one of an older shape is rebuilt; a busy database is retried.

Ranking is BM25 (FTS5's own), the path weighted above the text; English words are
stemmed (FTS5's porter tokenizer), Chinese, Japanese and Korean text is matched by
pairs of characters and compound words by their parts (``orchestrator.memory.terms``
says how). Files that every context gets anyway (``memory/index.md``,
``memory/system/definition.md``) and folder indexes that are mostly links rank below
the files they point to.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import sqlite3
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.confined import ConfinedDir, UnsafePath
from orchestrator.errors import OrchestratorError
from orchestrator.limits import (
    MEMORY_FILE_READ_MAX_BYTES,
    SEARCH_CHUNK_MAX_CHARS,
    SEARCH_CHUNK_MAX_LINES,
    SEARCH_MAX_FILES,
    SEARCH_MAX_RESULTS,
)
from orchestrator.memory import terms
from orchestrator.memory.reading import INJECTED_FILES
from orchestrator.validate import NOT_UTF8, shown_name

if TYPE_CHECKING:
    from orchestrator.memory.embeddings import Embedder

log = logging.getLogger(__name__)
T = TypeVar("T")
DEFAULT_VECTOR_WEIGHT = 0.5
# The index's shape (PRAGMA user_version), which includes how text is indexed
# (orchestrator.memory.terms): change either, bump it. It is derived data: a file of an
# older version is rebuilt, a damaged one set aside and rebuilt; a newer one (from a
# newer release) is refused, unchanged. Version 3: letters of scripts written without
# spaces stand alone, the vocabulary of compound parts, map files weighted down.
# Version 4: the words' trigram index reads the words table (external content).
SCHEMA_VERSION = 4
INDEX_DIR = "index"
PATH_WEIGHT, TEXT_WEIGHT = 4.0, 1.0
# A map's BM25 score is multiplied by this: it still answers when nothing else does.
MAP_WEIGHT = 0.25
SNIPPET_TOKENS = 24
RELATED_SCAN = 256  # vocabulary words looked at for each long word of a query
_LINK = re.compile(r"\]\([^)\s]+")
_HEADING = re.compile(r"^#{1,6}\s")
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC

# the full-text tables: dropped and made again when the index is rebuilt (emptying an
# FTS5 table deletes row by row; dropping it frees its pages at once)
_WORD_ADDED = (
    "CREATE TRIGGER IF NOT EXISTS word_added AFTER INSERT ON words BEGIN "
    "INSERT INTO word_grams (rowid, word) VALUES (new.id, new.word); END"
)
# the chunks' full-text table (benchmarks build it alone to measure FTS5's own share)
FTS_TABLE_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5("
    "path, text, tokenize = 'porter unicode61 remove_diacritics 2')"
)
_FTS_DDL = (
    FTS_TABLE_DDL,
    "CREATE TABLE IF NOT EXISTS words ("
    "id INTEGER PRIMARY KEY, word TEXT NOT NULL UNIQUE, chunks INTEGER NOT NULL)",
    # an index of the words table's own rows (external content): each word is stored
    # once, and indexing them takes a fifth of the time a copy of each would
    "CREATE VIRTUAL TABLE IF NOT EXISTS word_grams USING fts5(word, tokenize = 'trigram',"
    " content = 'words', content_rowid = 'id', columnsize = 0)",
    _WORD_ADDED,
    "CREATE TRIGGER IF NOT EXISTS word_gone AFTER DELETE ON words BEGIN "
    "INSERT INTO word_grams (word_grams, rowid, word) VALUES ('delete', old.id, old.word); END",
)
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    hash TEXT NOT NULL,
    chunks INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    hash TEXT NOT NULL,
    weight REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (path);
CREATE TABLE IF NOT EXISTS vectors (id INTEGER PRIMARY KEY, v BLOB NOT NULL);
""" + "".join(f"{statement};\n" for statement in _FTS_DDL)
# fts holds each chunk's path and text as terms.indexed() makes them; chunks.weight is
# map_weight() of its file; words is the vocabulary of compound parts (terms.vocabulary()
# of every chunk, with the number of chunks that hold each word), and word_grams the
# same words by trigram, to find those that contain a query word.
_COUNT_WORD = (
    "INSERT INTO words (word, chunks) VALUES (?, ?)"
    " ON CONFLICT (word) DO UPDATE SET chunks = chunks + excluded.chunks"
)
_DROP_UNUSED_WORD = "DELETE FROM words WHERE word = ? AND chunks <= 0"
_ANY_MATCH = "SELECT 1 FROM fts WHERE fts MATCH ? LIMIT 1"
_INSERT_BATCH = 500  # chunks inserted together


class _Outdated(sqlite3.DatabaseError):
    """An index of an older shape: rebuilt, never read."""


class IndexTooNew(OrchestratorError):
    """The search index was written by a newer release."""


@dataclass(frozen=True)
class Hit:
    path: str  # relative to the agent folder: memory/...
    start_line: int
    end_line: int
    snippet: str
    score: float

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "snippet": self.snippet,
            "score": self.score,
        }


@dataclass
class UpdateReport:
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)  # "path: why"
    seconds: float = 0.0
    rebuilt: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "skipped": list(self.skipped),
            "seconds": round(self.seconds, 4),
            "rebuilt": self.rebuilt,
        }


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int


@dataclass(frozen=True)
class Freshness:
    files: int
    chunks: int
    updated: float | None
    stale_files: int  # files added, changed or removed since the last update

    @property
    def stale(self) -> bool:
        return self.updated is None or self.stale_files > 0


def chunk_lines(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, text) of each chunk, lines numbered from 1.

    A chunk ends before a Markdown heading once it has a few lines of its own (a file's
    frontmatter stays with its first heading), or when it reaches SEARCH_CHUNK_MAX_LINES
    lines or SEARCH_CHUNK_MAX_CHARS characters; a single longer line is a chunk."""
    lines = text.splitlines()
    front_end = 0  # the last line of the frontmatter block, if the file starts with one
    if lines and lines[0].strip() == "---":
        front_end = next((i + 1 for i in range(1, len(lines)) if lines[i].strip() == "---"), 0)
    chunks: list[tuple[int, int, str]] = []
    start, size = 0, 0
    own = 0  # the chunk's non-blank lines past the frontmatter
    body: list[str] = []
    for number, line in enumerate(lines, 1):
        heading = bool(_HEADING.match(line)) and number > front_end
        full = len(body) >= SEARCH_CHUNK_MAX_LINES or size + len(line) > SEARCH_CHUNK_MAX_CHARS
        if body and (full or (heading and own >= 2)):
            chunks.append((start, number - 1, "\n".join(body)))
            body, size, own = [], 0, 0
        if not body:
            start = number
        body.append(line)
        size += len(line) + 1
        if number > front_end and line.strip():
            own += 1
    if body:
        chunks.append((start, len(lines), "\n".join(body)))
    return [c for c in chunks if c[2].strip()]


def fts_query(query: str) -> str | None:
    """A user's words as an FTS5 query: any of its terms (terms.query_terms: words, and
    pairs of characters of Chinese, Japanese or Korean text), each quoted (no operators
    pass through); None when there is nothing to look for. MemoryIndex.search adds the
    compound words the index holds."""
    return terms.expression(terms.query_terms(query))


def map_weight(path: str, text: str) -> float:
    """MAP_WEIGHT for a file that every context gets anyway (INJECTED_FILES) and for an
    ``index.md`` that is mostly links (at least as many lines with a link as without,
    headings and frontmatter aside); 1 for every other file."""
    if path in INJECTED_FILES:
        return MAP_WEIGHT
    if path != "index.md" and not path.endswith("/index.md"):
        return 1.0
    lines = text.splitlines()
    start = 0  # past the frontmatter block, if the file starts with one
    if lines and lines[0].strip() == "---":
        start = next((i + 1 for i in range(1, len(lines)) if lines[i].strip() == "---"), 0)
    body = [ln for ln in lines[start:] if ln.strip() and not _HEADING.match(ln)]
    links = sum(1 for ln in body if _LINK.search(ln))
    return MAP_WEIGHT if links and links * 2 >= len(body) else 1.0


def _busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


def _retry_busy(work: Callable[[], T], attempts: int = 8) -> T:
    """``work()``, again after a short wait while SQLite reports the database busy."""
    import tenacity

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(_busy),
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=0.02, max=1.0),
        reraise=True,
    )
    return retrying(work)


class MemoryIndex:
    """The search index of one group's memory tree."""

    def __init__(
        self,
        state_dir: Path,
        groups_dir: Path,
        folder: str,
        *,
        embedder: Embedder | None = None,
        vector_weight: float = DEFAULT_VECTOR_WEIGHT,
    ) -> None:
        self.folder = folder
        self.embedder = embedder  # None: BM25 alone
        self.vector_weight = vector_weight
        self._matrix: tuple[str, Any, Any, Any] | None = None  # generation, ids, vectors, weights
        self.groups_dir = Path(groups_dir)
        self.dir = Path(state_dir) / INDEX_DIR
        self.path = self.dir / f"{folder}.sqlite"
        self._db: sqlite3.Connection | None = None
        self._word_counts: Counter[str] = Counter()  # an update's changes to words.chunks
        # chunks made and not yet inserted (in batches), and the next chunk's id
        self._pending_chunks: list[tuple[object, ...]] = []
        self._pending_fts: list[tuple[object, ...]] = []
        self._pending_files: list[tuple[object, ...]] = []
        self._next_chunk: int | None = None
        self._checked = False  # quick_check ran on this file
        self.rebuilt = False  # an unusable file was set aside

    # the database

    def _connect(self) -> sqlite3.Connection:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = sqlite3.connect(self.path, isolation_level=None, timeout=5, check_same_thread=False)
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # derived data: a lost tail is rebuilt
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version == 0:
                version = self._first_version(db)
            if version > SCHEMA_VERSION:
                raise IndexTooNew(
                    f"search index {self.path} is at version {version}, newer than this "
                    f"orchestrator understands (version {SCHEMA_VERSION}); nothing was changed",
                    hint="run the release that wrote it, or delete the file (it is rebuilt)",
                )
            if 0 < version < SCHEMA_VERSION:
                raise _Outdated(f"built by an older release (schema version {version})")
            if version != SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"schema version {version}")
            if not self._checked:
                check = db.execute("PRAGMA quick_check").fetchone()
                if check is None or check[0] != "ok":
                    raise sqlite3.DatabaseError(f"quick_check: {check[0] if check else None}")
                self._checked = True
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def _first_version(db: sqlite3.Connection) -> int:
        """A file without a version: new (made now), or of the release that kept its
        version in ``meta`` (version 1 there: an older shape)."""
        try:
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            db.executescript(SCHEMA)  # a new file (readers never write otherwise)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return SCHEMA_VERSION
        if row is not None and row[0] == "1":
            return 1
        return -1  # not a shape this code knows: set aside

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self._db = _retry_busy(self._connect)
            except sqlite3.DatabaseError as exc:
                if _busy(exc):
                    raise
                self._set_aside(exc)
                self._db = _retry_busy(self._connect)
        return self._db

    def _set_aside(self, why: BaseException) -> None:
        """Move an unusable index aside, or delete one of an older shape (it is derived
        data: it will be rebuilt)."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        outdated = isinstance(why, _Outdated)
        if outdated:
            log.info("search index %s was %s; rebuilding it", self.path, why)
        else:
            log.warning("search index %s is unusable (%s); rebuilding it", self.path, why)
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                if outdated:
                    os.unlink(f"{self.path}{suffix}")
                else:
                    os.replace(f"{self.path}{suffix}", f"{self.path}.corrupt-{stamp}{suffix}")
        self._checked = False
        self.rebuilt = True

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> MemoryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _writer(self) -> Iterator[None]:
        """The index's update lock (one writer, across processes)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.dir / f"{self.folder}.lock", _LOCK_FLAGS, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # the memory tree

    def _memory(self) -> ConfinedDir:
        return ConfinedDir.open(self.groups_dir, f"{self.folder}/memory")

    def scan(self, report: UpdateReport | None = None) -> dict[str, FileStat]:
        """Every Markdown file of the memory tree and its status, without reading it.
        Symlinks, special files and hidden names are left out."""
        found: dict[str, FileStat] = {}
        with self._memory() as memory:
            for rel, folder, entries in memory.walk(hidden=False):
                for entry in entries:
                    if not entry.name.endswith(".md"):
                        continue
                    path = f"{rel}/{entry.name}" if rel else entry.name
                    if NOT_UTF8.search(path):
                        if report is not None:
                            report.skipped.append(
                                f"memory/{shown_name(path)}: its name is not valid UTF-8; "
                                "not indexed (rename it)"
                            )
                        continue
                    try:
                        st = os.stat(entry.name, dir_fd=folder.fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        if report is not None and not stat.S_ISDIR(st.st_mode):
                            report.skipped.append(f"memory/{path}: not a regular file")
                        continue
                    if len(found) >= SEARCH_MAX_FILES:
                        if report is not None:
                            report.skipped.append(
                                f"memory/{path}: over {SEARCH_MAX_FILES:,} files; not indexed"
                            )
                        continue
                    found[path] = FileStat(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        return found

    def _known(self) -> dict[str, FileStat]:
        rows = self.db.execute("SELECT path, size, mtime_ns, ctime_ns, ino FROM files")
        return {str(r[0]): FileStat(int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}

    # updating

    def update(self, *, force: bool = False) -> UpdateReport:
        """Bring the index up to date with the memory tree (all of it with ``force``)."""
        started = time.perf_counter()
        report = UpdateReport()
        with self._writer():
            try:
                self._update(report, force)
            except sqlite3.DatabaseError as exc:
                if _busy(exc):
                    raise
                self.close()
                self._set_aside(exc)
                report = UpdateReport()
                self._update(report, True)
        report.rebuilt = report.rebuilt or self.rebuilt
        report.seconds = time.perf_counter() - started
        return report

    def _update(self, report: UpdateReport, force: bool) -> None:
        current = self.scan(report)
        known = {} if force else self._known()
        db = self.db
        with self._memory() as memory:
            _retry_busy(lambda: db.execute("BEGIN IMMEDIATE"))
            self._word_counts.clear()
            self._pending_files, self._pending_chunks, self._pending_fts = [], [], []
            self._next_chunk = None
            try:
                if force:
                    for table in ("files", "chunks", "vectors"):
                        db.execute(f"DELETE FROM {table}")
                    for table in ("fts", "word_grams", "words"):
                        db.execute(f"DROP TABLE IF EXISTS {table}")
                    for statement in _FTS_DDL:
                        db.execute(statement)
                for path in sorted(set(known) - set(current)):
                    self._drop(path)
                    report.removed += 1
                folders = _FolderReader(memory)  # each folder opened once, not per file
                try:
                    for path, st in sorted(current.items()):
                        before = known.get(path)
                        if before == st:
                            report.unchanged += 1
                            continue
                        self._index(folders, path, st, before is not None, report)
                    self._insert_pending()
                finally:
                    folders.close()
                self._count_words()
                if self.embedder is not None:
                    self._embed_missing()
                db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('updated', ?)",
                    (repr(time.time()),),
                )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _drop(self, path: str) -> None:
        db = self.db
        ids = [r[0] for r in db.execute("SELECT id FROM chunks WHERE path=?", (path,))]
        for chunk in ids:
            row = db.execute("SELECT path, text FROM fts WHERE rowid=?", (chunk,)).fetchone()
            if row is not None:
                self._word_counts.subtract(terms.vocabulary(f"{row[0]}\n{row[1]}"))
        db.executemany("DELETE FROM fts WHERE rowid=?", [(i,) for i in ids])
        db.executemany("DELETE FROM vectors WHERE id=?", [(i,) for i in ids])
        db.execute("DELETE FROM chunks WHERE path=?", (path,))
        db.execute("DELETE FROM files WHERE path=?", (path,))

    def _index(
        self,
        folders: _FolderReader,
        path: str,
        st: FileStat,
        known: bool,
        report: UpdateReport,
    ) -> None:
        db = self.db
        try:
            data = folders.read_bytes(path, MEMORY_FILE_READ_MAX_BYTES)
        except (UnsafePath, OSError) as exc:
            # swapped, grown past the limit or gone since the scan: left out for now
            reason = exc.reason if isinstance(exc, UnsafePath) else (exc.strerror or str(exc))
            report.skipped.append(f"memory/{path}: {reason}")
            if known:
                self._drop(path)
                report.removed += 1
            return
        digest = hashlib.sha256(data).hexdigest()
        if known:
            row = db.execute("SELECT hash FROM files WHERE path=?", (path,)).fetchone()
            if row is not None and row[0] == digest:  # touched, not changed
                db.execute(
                    "UPDATE files SET size=?, mtime_ns=?, ctime_ns=?, ino=? WHERE path=?",
                    (st.size, st.mtime_ns, st.ctime_ns, st.ino, path),
                )
                report.unchanged += 1
                return
            self._drop(path)
        text = data.decode("utf-8", errors="replace")
        chunks = chunk_lines(text)
        weight = map_weight(path, text)
        indexed_path = terms.indexed(f"memory/{path}")
        if self._next_chunk is None:
            row = db.execute("SELECT COALESCE(MAX(id), 0) FROM chunks").fetchone()
            self._next_chunk = int(row[0]) + 1
        for first, last, body in chunks:
            chunk = self._next_chunk
            self._next_chunk += 1
            self._pending_chunks.append(
                (chunk, path, first, last, hashlib.sha256(body.encode()).hexdigest(), weight)
            )
            body = terms.indexed(body)
            self._pending_fts.append((chunk, indexed_path, body))
            self._word_counts.update(terms.vocabulary(f"{indexed_path}\n{body}"))
        self._pending_files.append(
            (path, st.size, st.mtime_ns, st.ctime_ns, st.ino, digest, len(chunks))
        )
        if len(self._pending_chunks) >= _INSERT_BATCH:
            self._insert_pending()
        if known:
            report.changed += 1
        else:
            report.added += 1

    def _insert_pending(self) -> None:
        """Insert the files and chunks made since the last call, in one statement per
        table."""
        if self._pending_files:
            self.db.executemany(
                "INSERT OR REPLACE INTO files (path, size, mtime_ns, ctime_ns, ino, hash, chunks)"
                " VALUES (?,?,?,?,?,?,?)",
                self._pending_files,
            )
        if self._pending_chunks:
            self.db.executemany(
                "INSERT INTO chunks (id, path, start_line, end_line, hash, weight)"
                " VALUES (?,?,?,?,?,?)",
                self._pending_chunks,
            )
            self.db.executemany(
                "INSERT INTO fts (rowid, path, text) VALUES (?,?,?)", self._pending_fts
            )
        self._pending_files, self._pending_chunks, self._pending_fts = [], [], []

    def _count_words(self) -> None:
        """Apply the update's changes to the vocabulary: words counted in the chunks
        added and not in those dropped; a word no chunk holds any more is removed. Into
        an empty vocabulary (a first build, a rebuild) the words' trigrams are made in
        one statement after the words, not one at a time by the trigger: half the time."""
        db = self.db
        changed = [(w, n) for w, n in self._word_counts.items() if n]
        if changed and db.execute("SELECT 1 FROM words LIMIT 1").fetchone() is None:
            db.execute("DROP TRIGGER IF EXISTS word_added")
            db.executemany(_COUNT_WORD, changed)
            # in rowid order: FTS5 writes its index out again at every rowid lower than
            # the last, and the table's own order here is its word index's, by word
            db.execute(
                "INSERT INTO word_grams (rowid, word) SELECT id, word FROM words ORDER BY id"
            )
            db.execute(_WORD_ADDED)  # the trigger, for the updates that follow
        else:
            db.executemany(_COUNT_WORD, changed)
        db.executemany(_DROP_UNUSED_WORD, [(w,) for w, n in changed if n < 0])
        self._word_counts.clear()

    def _embed_missing(self) -> None:
        """Vectors for every chunk without one (all of them after a change of embedder)."""
        import numpy

        assert self.embedder is not None
        db = self.db
        row = db.execute("SELECT value FROM meta WHERE key='embedder'").fetchone()
        if row is None or row[0] != self.embedder.name:
            db.execute("DELETE FROM vectors")
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('embedder', ?)",
                (self.embedder.name,),
            )
        missing = db.execute(
            "SELECT rowid, path, text FROM fts WHERE rowid NOT IN (SELECT id FROM vectors)"
        ).fetchall()
        for start in range(0, len(missing), 256):
            batch = missing[start : start + 256]
            vectors = self.embedder.embed([terms.shown(f"{r[1]}\n{r[2]}") for r in batch])
            db.executemany(
                "INSERT INTO vectors (id, v) VALUES (?, ?)",
                [
                    (r[0], numpy.asarray(v, dtype=numpy.float32).tobytes())
                    for r, v in zip(batch, vectors, strict=True)
                ],
            )

    def _vectors(self) -> tuple[Any, Any, Any] | None:
        """(chunk ids, their vectors as one matrix, their weights), cached until the
        next update."""
        import numpy

        db = self.db
        row = db.execute("SELECT value FROM meta WHERE key='updated'").fetchone()
        generation = str(row[0]) if row else ""
        if self._matrix is None or self._matrix[0] != generation:
            rows = db.execute(
                "SELECT v.id, v.v, c.weight FROM vectors v JOIN chunks c ON c.id = v.id"
                " ORDER BY v.id"
            ).fetchall()
            if not rows:
                return None
            ids = numpy.array([r[0] for r in rows], dtype=numpy.int64)
            matrix = numpy.frombuffer(b"".join(r[1] for r in rows), dtype=numpy.float32)
            weights = numpy.array([r[2] for r in rows], dtype=numpy.float32)
            self._matrix = (generation, ids, matrix.reshape(len(rows), -1), weights)
        return self._matrix[1], self._matrix[2], self._matrix[3]

    # reading

    def search(self, query: str, max_results: int = 6) -> list[Hit]:
        """The best chunk of each of the best files for ``query``, best first (an empty
        list when the query has no words). BM25 times the file's map_weight(), alone or
        blended with the cosine similarity of the configured embedder."""
        match = _retry_busy(lambda: self._match(query))
        if match is None:
            return []
        limit = max(1, min(int(max_results), SEARCH_MAX_RESULTS))
        if self.embedder is not None:
            vectors = self._vectors()
            if vectors is not None:
                return self._hybrid(query, match, limit, *vectors)
        # each file's best chunk (SQLite takes a bare column's value from the row that
        # MIN() chose), so a file with many strong chunks cannot crowd out the others
        # (MATERIALIZED: bm25() works only in the full-text query itself, which
        # flattening the subquery into the grouping would undo)
        sql = (
            "WITH scored AS MATERIALIZED ("
            " SELECT c.id, c.path, c.start_line, c.end_line,"
            f" bm25(fts, {PATH_WEIGHT}, {TEXT_WEIGHT}) * c.weight AS score"
            " FROM fts JOIN chunks c ON c.id = fts.rowid WHERE fts MATCH ?)"
            " SELECT id, path, start_line, end_line, MIN(score) AS best FROM scored"
            " GROUP BY path ORDER BY best, path LIMIT ?"
        )
        rows = _retry_busy(lambda: self.db.execute(sql, (match, limit)).fetchall())
        return [
            Hit(
                f"memory/{r[1]}",
                int(r[2]),
                int(r[3]),
                self._snippet(int(r[0]), match),
                round(-float(r[4]), 4),
            )
            for r in rows
        ]

    def _match(self, query: str) -> str | None:
        """The FTS5 query for ``query``: fts_query's terms and, for each long word of it,
        the words of the index that hold it as a compound part (terms.related), or, for
        a word that matches nothing, the parts of it that files hold (terms.parts)."""
        own = terms.query_terms(query)
        db = self.db
        extra: list[str] = []
        for word in terms.compound_candidates(own):
            alone = terms.expression([word])
            containing = db.execute(
                "SELECT word FROM word_grams WHERE word_grams MATCH ? LIMIT ?",
                (alone, RELATED_SCAN),
            ).fetchall()
            found = terms.related(word, [str(r[0]) for r in containing])
            if not found and not db.execute(_ANY_MATCH, (alone,)).fetchone():
                candidates = terms.substrings(word)
                known = db.execute(
                    f"SELECT word FROM words WHERE word IN ({','.join('?' * len(candidates))})",
                    candidates,
                ).fetchall()
                found = terms.parts(word, {str(r[0]) for r in known})
            extra += found
        return terms.expression(own + extra[: terms.MAX_QUERY_TERMS])

    def _hybrid(
        self, query: str, match: str, limit: int, ids: Any, matrix: Any, weights: Any
    ) -> list[Hit]:
        """Candidates from both rankings, scored ((1 - w) * BM25 / best BM25 + w * cosine)
        times the file's map_weight()."""
        import numpy

        assert self.embedder is not None
        pool = max(50, limit * 8)
        db = self.db
        rows = _retry_busy(
            lambda: db.execute(
                f"SELECT c.id, bm25(fts, {PATH_WEIGHT}, {TEXT_WEIGHT}) AS rank, c.weight"
                " FROM fts JOIN chunks c ON c.id = fts.rowid"
                " WHERE fts MATCH ? ORDER BY rank LIMIT ?",
                (match, pool),
            ).fetchall()
        )
        keyword = {int(r[0]): -float(r[1]) for r in rows}
        weight = {int(r[0]): float(r[2]) for r in rows}
        cosine = matrix @ self.embedder.embed([query])[0]
        nearest = numpy.argsort(-cosine)[:pool]
        position = {int(i): n for n, i in enumerate(ids)}
        weight.update((int(ids[n]), float(weights[n])) for n in nearest)
        candidates = set(keyword) | {int(ids[n]) for n in nearest}
        best = max(keyword.values(), default=0.0) or 1.0
        w = self.vector_weight

        def score(chunk: int) -> float:
            similarity = float(cosine[position[chunk]]) if chunk in position else 0.0
            blend = (1 - w) * keyword.get(chunk, 0.0) / best + w * max(similarity, 0.0)
            return blend * weight[chunk]

        ranked = sorted(candidates, key=score, reverse=True)
        hits: dict[str, Hit] = {}
        for chunk in ranked:
            found = db.execute(
                "SELECT path, start_line, end_line FROM chunks WHERE id=?", (chunk,)
            ).fetchone()
            if found is None or str(found[0]) in hits:
                continue
            hits[str(found[0])] = Hit(
                f"memory/{found[0]}",
                int(found[1]),
                int(found[2]),
                self._snippet(chunk, match if chunk in keyword else None),
                round(score(chunk), 4),
            )
            if len(hits) == limit:
                break
        return list(hits.values())

    def _snippet(self, chunk: int, match: str | None) -> str:
        """The chunk's passage with the words of ``match`` in bold, or its start."""
        if match is not None:
            row = self.db.execute(
                f"SELECT snippet(fts, 1, '**', '**', ' ... ', {SNIPPET_TOKENS}) FROM fts"
                " WHERE fts MATCH ? AND rowid=?",
                (match, chunk),
            ).fetchone()
            if row is not None:
                return terms.shown(str(row[0]))
        row = self.db.execute("SELECT text FROM fts WHERE rowid=?", (chunk,)).fetchone()
        text = " ".join(terms.shown(str(row[0])).split()) if row else ""
        return text[:200] + (" ..." if len(text) > 200 else "")

    def freshness(self) -> Freshness:
        known = self._known()
        current = self.scan()
        stale = sum(1 for p, st in current.items() if known.get(p) != st)
        stale += sum(1 for p in known if p not in current)
        chunks = self.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        row = self.db.execute("SELECT value FROM meta WHERE key='updated'").fetchone()
        return Freshness(len(known), int(chunks), float(row[0]) if row else None, stale)


def index_for(
    state_dir: Path,
    groups_dir: Path,
    folder: str,
    embedder_name: str | None = None,
    vector_weight: float = DEFAULT_VECTOR_WEIGHT,
) -> MemoryIndex:
    """A group's index, with the configured embedder (EmbedderUnavailable when it is
    named but cannot be loaded)."""
    embedder = None
    if embedder_name is not None:
        from orchestrator.memory.embeddings import load_embedder

        embedder = load_embedder(embedder_name, state_dir)
    return MemoryIndex(
        state_dir, groups_dir, folder, embedder=embedder, vector_weight=vector_weight
    )


def remove_index(state_dir: Path, folder: str) -> None:
    """Delete a group's index (it is derived: nothing is lost)."""
    base = Path(state_dir) / INDEX_DIR / f"{folder}.sqlite"
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{base}{suffix}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(Path(state_dir) / INDEX_DIR / f"{folder}.lock")


@dataclass(frozen=True)
class Injected:
    """One file of a fresh context: its size on disk and what the context gets."""

    name: str
    raw_chars: int
    injected_chars: int
    truncated: bool
    problem: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "file": self.name,
            "raw_chars": self.raw_chars,
            "injected_chars": self.injected_chars,
            "truncated": self.truncated,
            "problem": self.problem,
        }


# what the recent daily-note lines of a fresh context come to: (injected characters,
# truncated) of yesterday's and today's notes (orchestrator.agent.notes.recent_lines)
RecentLines = Callable[[list[str]], tuple[int, bool]]
RECENT_NOTES_ENTRY = "memory/daily (recent, creators' lines)"


def context_report(
    groups_dir: Path,
    folder: str,
    *,
    zone: str = "UTC",
    recent: RecentLines | None = None,
) -> list[Injected]:
    """What a fresh context of the group gets, file by file: the operator's instructions
    and the learned behaviors (which the runner asks the host for), then the memory
    files the hook injects, with the very numbers the hook's own code produces; with
    ``recent``, the recent daily-note lines every chat's fresh context is given (each
    chat also gets its own), today being the group's (``zone``)."""
    from orchestrator.limits import (
        LEARNED_READ_MAX_BYTES,
        MEMORY_FILE_BUDGET_CHARS,
        STANDING_TEXT_BUDGET_CHARS,
    )
    from orchestrator.memory.reading import INJECTED_FILES, read_injected
    from orchestrator.protocol import INSTRUCTIONS_FILE, LEARNED_FILE, cap_standing

    out: list[Injected] = []
    group_dir = Path(groups_dir) / folder
    for name in (INSTRUCTIONS_FILE, LEARNED_FILE):
        raw, problem = _raw(groups_dir, folder, name, LEARNED_READ_MAX_BYTES)
        injected = cap_standing(raw, name) if problem is None else ""
        out.append(
            Injected(
                name,
                len(raw),
                len(injected),
                len(raw.strip()) > STANDING_TEXT_BUDGET_CHARS,
                problem,
            )
        )
    for rel in INJECTED_FILES:
        raw, problem = _raw(groups_dir, f"{folder}/memory", rel, MEMORY_FILE_READ_MAX_BYTES)
        block = read_injected(str(group_dir), rel)
        out.append(
            Injected(
                f"memory/{rel}",
                len(raw),
                len(block),
                problem is None and len(raw.strip()) > MEMORY_FILE_BUDGET_CHARS,
                problem,
            )
        )
    if recent is not None:
        from datetime import datetime, timedelta
        from zoneinfo import ZoneInfo

        today = datetime.now(ZoneInfo(zone)).date()
        texts, problems = [], []
        for day in (today - timedelta(days=1), today):
            raw, problem = _raw(
                groups_dir, f"{folder}/memory", f"daily/{day:%Y-%m-%d}.md",
                MEMORY_FILE_READ_MAX_BYTES,
            )  # fmt: skip
            texts.append(raw)
            if problem not in (None, "missing"):
                problems.append(f"daily/{day:%Y-%m-%d}.md {problem}")
        chars, cut = recent(texts)
        out.append(
            Injected(
                RECENT_NOTES_ENTRY,
                sum(len(t) for t in texts),
                chars,
                cut,
                "; ".join(problems) or None,
            )
        )
    return out


def _raw(base: Path, folder: str, rel: str, limit: int) -> tuple[str, str | None]:
    try:
        with ConfinedDir.open(base, folder) as parent:
            data = parent.read_bytes(rel, limit, truncate=True)
    except FileNotFoundError:
        return "", "missing"
    except UnsafePath as exc:
        return "", f"refused: {exc.reason}"
    except OSError as exc:
        return "", f"unreadable: {exc.strerror or exc}"
    return data.decode("utf-8", errors="replace"), None


class _FolderReader:
    """Reads files of a memory tree in path order, keeping the last folder open: a tree
    of many files in few folders is walked once per folder, not once per file."""

    def __init__(self, memory: ConfinedDir) -> None:
        self.memory = memory
        self.folder: tuple[str, ConfinedDir] | None = None

    def read_bytes(self, path: str, limit: int) -> bytes:
        where, _, name = path.rpartition("/")
        if not where:
            return self.memory.read_bytes(name, limit)
        if self.folder is None or self.folder[0] != where:
            self.close()
            self.folder = (where, self.memory.open_dir(where))
        return self.folder[1].read_bytes(name, limit)

    def close(self) -> None:
        if self.folder is not None:
            self.folder[1].close()
            self.folder = None
