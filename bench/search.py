"""Memory search benchmarks: building the index of 10,000 concept files, and searches
over 1,000 and 10,000 files against a bare FTS5 query on the same database."""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

from bench.harness import Result, Series, interleaved

BUILD = "search-build"
SEARCH_1K = "search-1k"
SEARCH_10K = "search-10k"

_SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "pi", "an", "or", "el", "is"]


def _vocabulary(size: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def make_tree(memory: Path, files: int, seed: int = 7) -> list[list[str]]:
    """``files`` concept files in folders of 100, each a few paragraphs of words from a
    shared vocabulary; returns the words of each file (for queries)."""
    rng = random.Random(seed)
    vocabulary = _vocabulary(5000, rng)
    words_of: list[list[str]] = []
    for i in range(files):
        folder = memory / f"topic-{i // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        words = rng.sample(vocabulary, 60)
        words_of.append(words)
        body = "\n\n".join(" ".join(words[j : j + 20]) + "." for j in range(0, 60, 20))
        (folder / f"note-{i:05d}.md").write_text(
            f"---\ntype: note\n---\n\n# Note {i} about {words[0]}\n\n{body}\n"
        )
    return words_of


def _queries(words_of: list[list[str]], count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(rng.choice(words_of), 2)) for _ in range(count)]


def _index(root: Path, files: int):  # type: ignore[no-untyped-def]
    from orchestrator.memory.search import MemoryIndex

    words_of = make_tree(root / "groups" / "g" / "memory", files)
    index = MemoryIndex(root / "state", root / "groups", "g")
    return index, words_of


def build(quick: bool) -> Result:
    """Building the index of 10,000 files (1,000 with --quick) from nothing, against
    reading the same files (open, read, close: what any index must do at least)."""
    files = 1000 if quick else 10_000
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        root = Path(tmp)
        index, _ = _index(root, files)
        paths = sorted((root / "groups/g/memory").rglob("*.md"))

        def target() -> None:
            index.update(force=True)

        def floor() -> None:
            for path in paths:
                with open(path, "rb") as handle:
                    handle.read()

        t, f = interleaved(
            target,
            floor,
            2 if quick else 3,
            target_label=f"index {files:,} files from nothing",
            floor_label=f"read the {files:,} files",
        )
        started = time.perf_counter()
        report = index.update()
        check = time.perf_counter() - started
        index.close()
    return Result(
        BUILD,
        t,
        f,
        note=f"an update with nothing changed (a walk of {files:,} files) took "
        f"{check * 1000:.1f} ms ({report.unchanged:,} unchanged)",
        extra={"files": files, "unchanged_update_s": check},
    )


def _searches(name: str, files: int, quick: bool) -> Result:
    count = 200 if quick else 1000
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        root = Path(tmp)
        index, words_of = _index(root, files)
        index.update()
        queries = _queries(words_of, count)
        from orchestrator.memory.search import fts_query

        db = index.db
        matches = [fts_query(q) for q in queries]
        t, f = (
            Series(f"memory_search over {files:,} files"),
            Series("bare FTS5 MATCH, ORDER BY rank LIMIT 6"),
        )
        for query in queries[:20]:  # warm-up
            index.search(query, 6)
        for query, match in zip(queries, matches, strict=True):
            started = time.perf_counter()
            db.execute(
                "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 6", (match,)
            ).fetchall()
            f.samples.append(time.perf_counter() - started)
            started = time.perf_counter()
            hits = index.search(query, 6)
            t.samples.append(time.perf_counter() - started)
            assert hits, query
        size = sum(
            os.path.getsize(f"{index.path}{suffix}")
            for suffix in ("", "-wal")
            if os.path.exists(f"{index.path}{suffix}")
        )
        index.close()
    return Result(
        name,
        t,
        f,
        note=f"{count:,} queries of two words; index file {size / 1024**2:.1f} MiB; "
        f"goal at 10,000 files: p50 at most 10 ms",
        extra={"files": files, "queries": count, "index_bytes": size},
    )


def search_1k(quick: bool) -> Result:
    return _searches(SEARCH_1K, 1000, quick)


def search_10k(quick: bool) -> Result:
    return _searches(SEARCH_10K, 2000 if quick else 10_000, quick)
