"""Memory search benchmarks: building the index of 10,000 concept files, and searches
over 1,000 and 10,000 files against a bare FTS5 query on the same database. One file in
three is written in Chinese (words of two or three characters, no spaces between them,
as Chinese is written), the others in words of Latin letters, some of them compounds of
others. Each benchmark also measures, in the same run and on the same tree, the index
of the release before multilingual search (bench/search_before.py), and prints both as
ratios against the same floor."""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench.harness import Result, Series

BUILD = "search-build"
SEARCH_1K = "search-1k"
SEARCH_10K = "search-10k"

_SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "pi", "an", "or", "el", "is"]
# 400 common characters of Traditional Chinese, for the words of the Chinese files
_HAN = (
    "的一是不了人我在有他這中大來上國個到說們為子和你地出道也時年得就那要下以生會自著去之"
    "過家學對可她裡後小麼心多天而能好都然沒日於起還發成事只作當想看文無開手十用主行方又如前"
    "所本見經頭面公同三已老從動兩長知民樣現分將外但身些與高意進把法此實回二理美點月明其種聲"
    "全工己話兒者向情部正名定女問力機給等幾很業最間新什打便位因重被走電四第門相次東政海口使"
    "教西再平真聽世氣信北少關並內加化由卻代軍產入先山五太水萬市眼體別處總才場師書比住員九笑"
    "性通目華報立馬命張活難神數件安表原車白應路期叫死常提感金何更反合放做系計或司利受光王果"
    "親界及今京務製解各任至清物台象記邊共風戰幹接它許八特覺望直服毛林題建南度統色字請交愛讓"
    "認算論百吃義科怎元社術結六功指思非流每青管夫連遠資隊跟帶花快條院變聯言權往展該領傳近留"
    "紅治決周保達辦運武半候七必城父強步完革深區即求品士轉量空甚眾技輕程告江語英基派滿式李息"
    "寫呢識極令黃德收臉錢黨倒未持取設始版雙歷越史商千片容研像找友孩站廣改議形委早房音火際則"
)


def _vocabulary(size: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _han_vocabulary(size: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_HAN) for _ in range(rng.randint(2, 3))))
    return sorted(words)


def make_tree(memory: Path, files: int, seed: int = 7) -> list[tuple[str, list[str]]]:
    """``files`` concept files in folders of 100, each a few paragraphs of 60 words from
    a shared vocabulary, every third one in Chinese; returns each file's separator
    between words ("" for Chinese) and its words (for queries)."""
    rng = random.Random(seed)
    latin = _vocabulary(5000, rng)
    han = _han_vocabulary(5000, rng)
    words_of: list[tuple[str, list[str]]] = []
    for i in range(files):
        folder = memory / f"topic-{i // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        space, vocabulary, stop = ("", han, "。") if i % 3 == 2 else (" ", latin, ".")
        words = rng.sample(vocabulary, 60)
        words_of.append((space, words))
        body = "\n\n".join(space.join(words[j : j + 20]) + stop for j in range(0, 60, 20))
        (folder / f"note-{i:05d}.md").write_text(
            f"---\ntype: note\n---\n\n# Note {i} about {words[0]}\n\n{body}\n"
        )
    return words_of


def _queries(words_of: list[tuple[str, list[str]]], count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    picked = (rng.choice(words_of) for _ in range(count))
    return [space.join(rng.sample(words, 2)) for space, words in picked]


def _indexes(root: Path, files: int):  # type: ignore[no-untyped-def]
    """The tree, its index as this release makes it, and as the one before did."""
    from bench.search_before import BeforeIndex
    from orchestrator.memory.search import MemoryIndex

    words_of = make_tree(root / "groups" / "g" / "memory", files)
    new = MemoryIndex(root / "state", root / "groups", "g")
    before = BeforeIndex(root / "state-before", root / "groups", "g")
    return new, before, words_of


def _size(index) -> int:  # type: ignore[no-untyped-def]
    """The index's bytes on disk, its write-ahead log checkpointed first."""
    index.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(
        os.path.getsize(f"{index.path}{suffix}")
        for suffix in ("", "-wal")
        if os.path.exists(f"{index.path}{suffix}")
    )


def build(quick: bool) -> Result:
    """Building the index of 10,000 files (1,000 with --quick) from nothing, against
    reading the same files (open, read, close: what any index must do at least), with
    the previous release's index built in the same rounds, and SQLite's FTS5 indexing
    the same chunks alone (the part of a build that is SQLite's own)."""
    from orchestrator.memory import terms
    from orchestrator.memory.search import FTS_TABLE_DDL, chunk_lines

    files = 1000 if quick else 10_000
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        root = Path(tmp)
        index, before, _ = _indexes(root, files)
        paths = sorted((root / "groups/g/memory").rglob("*.md"))

        def floor() -> None:
            for path in paths:
                with open(path, "rb") as handle:
                    handle.read()

        # what SQLite's FTS5 alone takes to index the same chunks' text (as the index
        # holds it, with the same tokenizer, in one transaction on the same disk): a
        # part of the build no code of ours can cut
        texts = [
            (f"memory/{path.relative_to(root / 'groups/g/memory')}", terms.indexed(body))
            for path in paths
            for _, _, body in chunk_lines(path.read_text())
        ]
        fts_rounds = iter(range(10))

        def fts_alone() -> None:
            path = root / f"fts-alone-{next(fts_rounds)}.sqlite"
            db = sqlite3.connect(path, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("BEGIN IMMEDIATE")
            db.execute(FTS_TABLE_DDL)
            db.executemany("INSERT INTO fts (path, text) VALUES (?, ?)", texts)
            db.execute("COMMIT")
            db.close()

        runs = {
            "floor": (floor, Series(f"read the {files:,} files")),
            "fts": (fts_alone, Series("FTS5 alone, the same chunks")),
            "before": (lambda: before.update(force=True), Series("previous release's index")),
            "target": (lambda: index.update(force=True), Series(f"index {files:,} files")),
        }
        for round_ in range(1 + (2 if quick else 3)):  # the first round warms up
            for work, series in runs.values():
                started = time.perf_counter()
                work()
                if round_:
                    series.samples.append(time.perf_counter() - started)
        started = time.perf_counter()
        report = index.update()
        check = time.perf_counter() - started
        sizes = _size(index), _size(before)
        index.close()
        before.close()
    t, f, b, x = (runs[k][1] for k in ("target", "floor", "before", "fts"))
    return Result(
        BUILD,
        t,
        f,
        note=f"the previous release's index: {b.median:.2f} s, {b.median / f.median:.2f}x the "
        f"floor (this one {t.median / b.median:.2f}x as long); index files "
        f"{sizes[0] / 1024**2:.1f} MiB, before {sizes[1] / 1024**2:.1f} MiB; an update with "
        f"nothing changed (a walk of {files:,} files) took {check * 1000:.1f} ms "
        f"({report.unchanged:,} unchanged); FTS5 alone indexing the same chunks: "
        f"{x.median * 1000:.0f} ms, {x.median / f.median:.2f}x the floor "
        f"({x.median / t.median:.0%} of the build)",
        extra={
            "files": files,
            "fts5_alone_s": x.median,
            "fts5_alone_ratio": x.median / f.median,
            "unchanged_update_s": check,
            "before_median_s": b.median,
            "before_ratio": b.median / f.median,
            "index_bytes": sizes[0],
            "before_index_bytes": sizes[1],
        },
    )


def _searches(name: str, files: int, quick: bool) -> Result:
    from bench.search_before import before_query
    from orchestrator.memory.search import fts_query

    count = 200 if quick else 1000
    bare = "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 6"
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        root = Path(tmp)
        index, before, words_of = _indexes(root, files)
        index.update()
        before.update()
        queries = _queries(words_of, count)
        t, f = (
            Series(f"memory_search over {files:,} files"),
            Series("bare FTS5 MATCH, ORDER BY rank LIMIT 6"),
        )
        was, was_floor = Series("previous release"), Series("its bare FTS5 query")
        runs = [
            (lambda q: index.db.execute(bare, (fts_query(q),)).fetchall(), f),
            (lambda q: index.search(q, 6), t),
            (lambda q: before.db.execute(bare, (before_query(q),)).fetchall(), was_floor),
            (lambda q: before.search(q, 6), was),
        ]
        for query in queries[:20]:  # warm-up
            index.search(query, 6)
            before.search(query, 6)
        for query in queries:
            for work, series in runs:
                started = time.perf_counter()
                work(query)
                series.samples.append(time.perf_counter() - started)
        answered = sum(1 for q in queries if index.search(q, 6))
        answered_before = sum(1 for q in queries if before.search(q, 6))
        assert answered == count  # each query is two words of one file
        timed = list(zip(t.samples, queries, strict=True))
        chinese = statistics.median(s for s, q in timed if " " not in q) * 1000
        latin = statistics.median(s for s, q in timed if " " in q) * 1000
        sizes = _size(index), _size(before)
        index.close()
        before.close()
    return Result(
        name,
        t,
        f,
        note=f"{count:,} queries of two words (a third of them Chinese, written without a "
        f"space); answered {answered:,}, the previous release {answered_before:,}; p50 "
        f"Chinese {chinese:.2f} ms, Latin {latin:.2f} ms. The "
        f"previous release: p50 {was.median * 1000:.2f} ms, {was.median / was_floor.median:.2f}x "
        f"its floor (this one {t.median / was.median:.2f}x as long); index file "
        f"{sizes[0] / 1024**2:.1f} MiB, before {sizes[1] / 1024**2:.1f} MiB; goal at 10,000 "
        "files: p50 at most 10 ms",
        extra={
            "files": files,
            "queries": count,
            "index_bytes": sizes[0],
            "before_answered": answered_before,
            "before_median_s": was.median,
            "before_p99_s": was.p99,
            "before_ratio": was.median / was_floor.median,
            "before_index_bytes": sizes[1],
            "chinese_median_ms": chinese,
            "latin_median_ms": latin,
        },
    )


def search_1k(quick: bool) -> Result:
    return _searches(SEARCH_1K, 1000, quick)


def search_10k(quick: bool) -> Result:
    return _searches(SEARCH_10K, 2000 if quick else 10_000, quick)
