"""Memory search, exactly: chunks at their line and character limits, the weight of maps,
the words of every skip and refusal, scores and snippets as a search returns them, the
result limits at their bounds, the hybrid blend's numbers, the update's counts, the
retries on a busy database, and the context report's problems."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import orchestrator.memory.search as search
from orchestrator.memory.search import (
    MAP_WEIGHT,
    SCHEMA_VERSION,
    FileStat,
    Freshness,
    Hit,
    IndexTooNew,
    MemoryIndex,
    UpdateReport,
    chunk_lines,
    context_report,
    fts_query,
    index_for,
    map_weight,
    remove_index,
)
from tests.clocks import local_zone
from tests.test_search import WordBag


def write(memory: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = memory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    made = tmp_path / "groups/fam/memory"
    made.mkdir(parents=True)
    return made


@pytest.fixture
def index(tmp_path: Path, memory: Path) -> Iterator[MemoryIndex]:
    made = MemoryIndex(tmp_path / "state", tmp_path / "groups", "fam")
    yield made
    made.close()


# files no query here matches: BM25 gives a word that half the files hold no weight
FILLER = {f"filler/{i}.md": f"# Filler {i}\n\nunrelated text number {i}\n" for i in range(8)}


def paths(index: MemoryIndex, query: str, count: int = 6) -> list[str]:
    return [h.path for h in index.search(query, count)]


# chunks


def test_a_chunk_holds_40_lines_and_the_41st_starts_the_next() -> None:
    forty = "\n".join(f"w{i}" for i in range(40))
    assert [(a, b) for a, b, _ in chunk_lines(forty)] == [(1, 40)]
    assert [(a, b) for a, b, _ in chunk_lines(forty + "\nlast")] == [(1, 40), (41, 41)]
    assert chunk_lines(forty + "\nlast")[1][2] == "last"


def test_a_chunk_holds_2000_characters_with_its_newlines() -> None:
    # 999 characters and a newline, then 1000: 2000 in all, one chunk
    first, second = "a" * 999, "b" * 1000
    assert chunk_lines(f"{first}\n{second}") == [(1, 2, f"{first}\n{second}")]
    # one more character: the second line starts a chunk of its own
    assert chunk_lines(f"{first}\n{second}b") == [(1, 1, first), (2, 2, second + "b")]
    # every line counts with its newline, in every chunk
    third = "c" * 1000
    assert chunk_lines(f"{'a' * 500}\n{'b' * 500}\n{third}") == [
        (1, 2, f"{'a' * 500}\n{'b' * 500}"),
        (3, 3, third),
    ]
    after_a_heading = f"# A\none\n# B\n{'a' * 995}\n{'b' * 1000}"
    assert [(a, b) for a, b, _ in chunk_lines(after_a_heading)] == [(1, 2), (3, 5)]
    # a single line longer than the limit is a chunk by itself, whole
    long = "c" * 5000
    assert chunk_lines(f"x\n{long}\ny") == [(1, 1, "x"), (2, 2, long), (3, 3, "y")]


def test_a_heading_starts_a_chunk_once_the_chunk_has_two_lines_of_its_own() -> None:
    assert chunk_lines("# A\none\n# B\ntwo") == [(1, 2, "# A\none"), (3, 4, "# B\ntwo")]
    # one line of its own (a heading alone, blank lines not counted): no cut
    assert chunk_lines("# A\n\n\n# B\ntwo") == [(1, 5, "# A\n\n\n# B\ntwo")]
    assert chunk_lines("# A\n# B\n# C") == [(1, 2, "# A\n# B"), (3, 3, "# C")]
    # a chunk cut at a heading counts its own lines from that heading
    assert chunk_lines("# A\none\n# B\n# C") == [(1, 2, "# A\none"), (3, 4, "# B\n# C")]
    # what is not a heading: seven marks, no space after them, an indented mark
    assert chunk_lines("# A\none\n####### B\n#C\n  # D") == [
        (1, 5, "# A\none\n####### B\n#C\n  # D")
    ]
    assert chunk_lines("# A\none\n###### F") == [(1, 2, "# A\none"), (3, 3, "###### F")]


def test_the_frontmatter_stays_with_the_first_heading() -> None:
    text = "---\ntitle: x\n# not a heading\n---\n# Title\nbody"
    assert chunk_lines(text) == [(1, 6, text)]
    # a frontmatter block closed on its second line
    assert chunk_lines("---\n---\n# T\nbody") == [(1, 4, "---\n---\n# T\nbody")]
    # the closing line is not a line of the chunk's own
    assert chunk_lines("---\n---\nx\n# T") == [(1, 4, "---\n---\nx\n# T")]
    # the closing line may have spaces around it
    assert chunk_lines("---\na: 1\n  ---  \n# T\nbody") == [(1, 5, "---\na: 1\n  ---  \n# T\nbody")]
    # without a closing line there is no frontmatter: its lines are the chunk's own
    assert chunk_lines("---\na: 1\n# T\nbody") == [(1, 2, "---\na: 1"), (3, 4, "# T\nbody")]
    # past the block, headings cut as anywhere
    assert chunk_lines("---\n---\n# T\nbody\n# U\nmore") == [
        (1, 4, "---\n---\n# T\nbody"),
        (5, 6, "# U\nmore"),
    ]


def test_blank_chunks_are_left_out_and_the_last_ends_at_the_last_line() -> None:
    text = "x\n" + "\n" * 45
    assert chunk_lines(text) == [(1, 40, "x" + "\n" * 39)]
    assert chunk_lines("a\nb\n") == [(1, 2, "a\nb")]
    assert chunk_lines("   \n\t") == []


# the weight of maps


def test_maps_and_the_files_every_context_gets_weigh_a_quarter() -> None:
    assert MAP_WEIGHT == 0.25
    assert map_weight("index.md", "plain text, no links") == MAP_WEIGHT
    assert map_weight("system/definition.md", "plain text") == MAP_WEIGHT
    links = "- [a](a.md)\n- [b](b.md)\n"
    assert map_weight("notes.md", links) == 1.0
    assert map_weight("people/myindex.md", links) == 1.0
    assert map_weight("people/index.md", links) == MAP_WEIGHT
    assert map_weight("a/b/index.md", links) == MAP_WEIGHT


def test_an_index_is_a_map_with_at_least_as_many_link_lines_as_others() -> None:
    assert map_weight("p/index.md", "- [a](a.md)\ntext") == MAP_WEIGHT
    assert map_weight("p/index.md", "- [a](a.md)\ntext\nmore") == 1.0
    assert map_weight("p/index.md", "- [a](a.md)\n- [b](b.md)\ntext\nmore") == MAP_WEIGHT
    # no lines, or no links at all: a plain file
    assert map_weight("p/index.md", "") == 1.0
    assert map_weight("p/index.md", "# Title\n\ntext") == 1.0
    # headings and blank lines do not count
    assert map_weight("p/index.md", "# A\n## B\n\n\n- [a](a.md)\ntext") == MAP_WEIGHT
    # what is not a link: a space after the parenthesis, nothing in it
    assert map_weight("p/index.md", "[a]( a.md)\n[b]()") == 1.0


def test_the_frontmatter_of_an_index_does_not_count() -> None:
    links = "- [a](a.md)\n- [b](b.md)\ntext"
    assert map_weight("p/index.md", f"---\n---\n{links}") == MAP_WEIGHT
    assert map_weight("p/index.md", f"---\nx: 1\ny: 2\n---\n{links}") == MAP_WEIGHT
    # no closing line: the lines are counted as text
    assert map_weight("p/index.md", f"---\nx: 1\ny: 2\n{links}") == 1.0
    assert map_weight("p/index.md", "---\n- [a](a.md)\ntext") == 1.0
    # the first line after the closing one counts
    assert map_weight("p/index.md", "---\nx: 1\n---\n- [a](a.md)\ntext") == MAP_WEIGHT


# queries


def test_a_query_is_its_words_quoted_and_joined_by_or() -> None:
    assert fts_query("Kitchen  budget kitchen") == '"kitchen" OR "budget"'
    assert fts_query('say "hi"') == '"say" OR "hi"'
    assert fts_query("小提琴") == '"小 提" OR "提 琴"'
    assert fts_query(" ... ") is None


# the reports


def test_hits_reports_and_freshness_as_dicts() -> None:
    hit = Hit("memory/a.md", 3, 9, "**a**", 1.5)
    assert hit.to_dict() == {
        "path": "memory/a.md",
        "start_line": 3,
        "end_line": 9,
        "snippet": "**a**",
        "score": 1.5,
    }
    report = UpdateReport(1, 2, 3, 4, ["memory/x.md: why"], 1.234567, True)
    assert report.to_dict() == {
        "added": 1,
        "changed": 2,
        "removed": 3,
        "unchanged": 4,
        "skipped": ["memory/x.md: why"],
        "seconds": 1.2346,
        "rebuilt": True,
    }
    assert report.to_dict()["skipped"] is not report.skipped
    assert UpdateReport().to_dict() == {
        "added": 0,
        "changed": 0,
        "removed": 0,
        "unchanged": 0,
        "skipped": [],
        "seconds": 0.0,
        "rebuilt": False,
    }
    assert Freshness(1, 1, None, 0).stale
    assert Freshness(1, 1, 10.0, 1).stale
    assert not Freshness(1, 1, 10.0, 0).stale


# the busy database


def test_a_busy_database_is_tried_eight_times_with_growing_waits(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    waits: list[float] = []
    monkeypatch.setattr("time.sleep", waits.append)
    calls: list[int] = []

    def locked() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        search._retry_busy(locked)
    assert len(calls) == 8
    assert waits == pytest.approx([0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0])

    answers = iter([sqlite3.OperationalError("database table is busy"), None])

    def busy_once() -> str:
        error = next(answers)
        if error is not None:
            raise error
        return "done"

    assert search._retry_busy(busy_once) == "done"
    calls.clear()

    def broken() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("no such table: fts")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        search._retry_busy(broken)
    assert len(calls) == 1
    # only SQLite's operational errors are waited for
    assert search._busy(sqlite3.OperationalError("database is locked"))
    assert search._busy(sqlite3.OperationalError("database is busy"))
    assert not search._busy(sqlite3.DatabaseError("database is locked"))
    assert not search._busy(OSError("busy"))


# the index file


def test_a_new_index_is_private_in_wal_mode_at_the_current_version(
    index: MemoryIndex, memory: Path
) -> None:
    write(memory, {"a.md": "# A\n\nalpha\n"})
    index.update()
    assert stat.S_IMODE(os.stat(index.dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(index.dir / "fam.lock").st_mode) == 0o600
    assert index.path == index.dir / "fam.sqlite"
    assert index.dir.name == "index"
    db = index.db
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert not index.rebuilt


def test_an_index_of_a_newer_release_is_refused_in_so_many_words(
    index: MemoryIndex, memory: Path
) -> None:
    index.update()
    index.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    index.close()
    with pytest.raises(IndexTooNew) as refused:
        index.search("anything")
    assert refused.value.message == (
        f"search index {index.path} is at version 7, newer than this orchestrator "
        "understands (version 4); nothing was changed"
    )
    assert refused.value.hint == "run the release that wrote it, or delete the file (it is rebuilt)"
    assert not index.rebuilt


def test_an_older_index_is_deleted_and_a_damaged_one_set_aside_with_a_stamp(
    index: MemoryIndex, memory: Path, caplog
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {"a.md": "# A\n\nalpha\n"})
    index.update()
    index.db.execute("PRAGMA user_version = 3")
    index.close()
    with caplog.at_level(logging.INFO, logger="orchestrator.memory.search"):
        assert paths(index, "alpha") == []  # emptied, until the next update
    assert index.rebuilt
    assert caplog.messages == [
        f"search index {index.path} was built by an older release (schema version 3); rebuilding it"
    ]
    assert [p.name for p in index.dir.iterdir() if ".sqlite." in p.name] == []
    assert index.update().added == 1 and paths(index, "alpha") == ["memory/a.md"]
    index.close()
    caplog.clear()
    # a file of a shape no release wrote (a meta table, and no version): set aside
    index.path.unlink()
    other = sqlite3.connect(index.path)
    other.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    other.execute("INSERT INTO meta VALUES ('schema', '2')")
    other.commit()
    other.close()
    fresh = MemoryIndex(index.dir.parent, memory.parent.parent, "fam")
    # the stamp is in UTC, whatever the local zone (here five and a half hours ahead)
    with local_zone("IST-05:30"):
        before = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        with caplog.at_level(logging.INFO, logger="orchestrator.memory.search"):
            report = fresh.update()
        after = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    assert report.rebuilt and report.added == 1
    assert caplog.messages == [
        f"search index {index.path} is unusable (schema version -1); rebuilding it"
    ]
    [aside] = [p.name for p in index.dir.iterdir() if ".corrupt-" in p.name]
    assert re.fullmatch(r"fam\.sqlite\.corrupt-\d{8}T\d{6}Z", aside)
    assert before <= aside.removeprefix("fam.sqlite.corrupt-") <= after
    fresh.close()


def test_a_file_without_a_version_that_kept_version_1_in_meta_is_rebuilt(
    index: MemoryIndex, memory: Path
) -> None:
    index.dir.mkdir(parents=True)
    old = sqlite3.connect(index.path)
    old.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    old.execute("INSERT INTO meta VALUES ('schema', '1')")
    old.commit()
    old.close()
    assert index.search("x") == [] and index.rebuilt
    assert not [p for p in index.dir.iterdir() if ".corrupt-" in p.name]
    assert index.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_meta_table_without_a_version_is_set_aside_and_version_1_is_logged(
    index: MemoryIndex, memory: Path, caplog
) -> None:  # type: ignore[no-untyped-def]
    index.dir.mkdir(parents=True)
    old = sqlite3.connect(index.path)
    old.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    old.commit()
    old.close()
    assert index.search("x") == [] and index.rebuilt
    assert len([p for p in index.dir.iterdir() if ".corrupt-" in p.name]) == 1
    index.close()
    index.path.unlink()
    old = sqlite3.connect(index.path)
    old.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    old.execute("INSERT INTO meta VALUES ('schema', '1')")
    old.commit()
    old.close()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="orchestrator.memory.search"):
        index.search("x")
    assert caplog.messages == [
        f"search index {index.path} was built by an older release (schema version 1); rebuilding it"
    ]


def test_a_search_makes_the_private_folder_of_a_new_index(tmp_path: Path, memory: Path) -> None:
    made = MemoryIndex(tmp_path / "state/deeper", tmp_path / "groups", "fam")
    assert made.search("anything") == []
    assert stat.S_IMODE(os.stat(made.dir).st_mode) == 0o700
    assert made.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    made.close()
    again = MemoryIndex(tmp_path / "state/deeper", tmp_path / "groups", "fam")
    assert again.search("anything") == [] and not again.rebuilt
    again.close()


def _damage_an_index_page(index: MemoryIndex) -> None:
    """Garbage over the page of the chunks' path index: the file opens at the current
    version, and only PRAGMA quick_check finds the damage."""
    db = sqlite3.connect(index.path)
    size = db.execute("PRAGMA page_size").fetchone()[0]
    [page] = db.execute("SELECT rootpage FROM sqlite_master WHERE name='chunks_by_path'")
    db.close()
    with open(index.path, "r+b") as f:
        f.seek((page[0] - 1) * size)
        f.write(b"\xff" * size)


def test_a_damaged_index_found_by_quick_check_is_set_aside(
    index: MemoryIndex, memory: Path, caplog
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {f"f{i}.md": f"# F{i}\n\nword{i}\n" for i in range(5)})
    index.update()
    index.close()
    _damage_an_index_page(index)
    fresh = MemoryIndex(index.dir.parent, memory.parent.parent, "fam")
    with caplog.at_level(logging.INFO, logger="orchestrator.memory.search"):
        assert fresh.search("word1") == []
    assert fresh.rebuilt
    [message] = caplog.messages
    assert message.startswith(
        f"search index {index.path} is unusable (quick_check: *** in database main ***\n"
    )
    assert message.endswith("); rebuilding it")
    assert fresh.update().added == 5
    assert paths(fresh, "word1") == ["memory/f1.md"]
    fresh.close()


def test_quick_check_runs_once_for_an_index_object(index: MemoryIndex, memory: Path) -> None:
    write(memory, {f"f{i}.md": f"# F{i}\n\nword{i}\n" for i in range(5)})
    index.update()
    index.close()
    _damage_an_index_page(index)
    # the same object connects again without the check (it ran when the file was sound)
    assert paths(index, "word1") == ["memory/f1.md"] and not index.rebuilt


def test_the_write_ahead_log_of_a_set_aside_index_goes_with_it(
    index: MemoryIndex, memory: Path
) -> None:
    index.dir.mkdir(parents=True)
    other = sqlite3.connect(index.path, isolation_level=None)
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    other.execute("INSERT INTO meta VALUES ('schema', '9')")
    assert (index.dir / "fam.sqlite-wal").exists() and (index.dir / "fam.sqlite-shm").exists()
    assert index.search("x") == [] and index.rebuilt
    aside = sorted(p.name for p in index.dir.iterdir() if ".corrupt-" in p.name)
    stamp = aside[0].removeprefix("fam.sqlite.corrupt-")
    assert aside == [
        f"fam.sqlite.corrupt-{stamp}",
        f"fam.sqlite.corrupt-{stamp}-shm",
        f"fam.sqlite.corrupt-{stamp}-wal",
    ]
    other.close()
    index.close()


def test_the_write_ahead_log_of_an_older_index_is_deleted_with_it(
    index: MemoryIndex, memory: Path
) -> None:
    write(memory, {"a.md": "# A\n\nalpha\n"})
    index.update()
    index.close()
    other = sqlite3.connect(index.path, isolation_level=None)
    other.execute("PRAGMA wal_autocheckpoint=0")
    other.execute("PRAGMA user_version = 2")  # in the log, not yet in the file
    assert (index.dir / "fam.sqlite-wal").stat().st_size > 0
    assert index.search("alpha") == [] and index.rebuilt
    other.close()
    assert index.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert index.update().added == 1
    assert paths(index, "alpha") == ["memory/a.md"]


def test_an_index_is_rebuilt_after_an_error_in_the_middle_of_an_update(
    index: MemoryIndex, memory: Path, monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING, logger="orchestrator.memory.search")
    write(memory, {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n"})
    index.update()
    real = MemoryIndex._count_words
    failed: list[int] = []

    def failing_once(self: MemoryIndex) -> None:
        if not failed:
            failed.append(1)
            raise sqlite3.DatabaseError("database disk image is malformed")
        real(self)

    monkeypatch.setattr(MemoryIndex, "_count_words", failing_once)
    write(memory, {"c.md": "# C\n\ngamma\n"})
    report = index.update()
    assert (report.added, report.unchanged, report.rebuilt) == (3, 0, True)
    assert sorted(paths(index, "alpha beta gamma")) == ["memory/a.md", "memory/b.md", "memory/c.md"]
    assert [r.getMessage() for r in caplog.records] == [
        f"search index {index.path} is unusable (database disk image is malformed); rebuilding it"
    ]

    def locked(self: MemoryIndex) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(MemoryIndex, "_count_words", locked)
    write(memory, {"d.md": "# D\n\ndelta\n"})
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        index.update()
    assert paths(index, "delta") == []  # rolled back, nothing set aside
    assert len([p for p in index.dir.iterdir() if ".corrupt-" in p.name]) == 1
    assert sorted(paths(index, "alpha beta gamma")) == ["memory/a.md", "memory/b.md", "memory/c.md"]
    assert len(caplog.records) == 1


# the memory tree


def test_a_scan_lists_markdown_files_with_their_status(index: MemoryIndex, memory: Path) -> None:
    write(
        memory,
        {"a.md": "a", "sub/deeper/b.md": "bb", "notes.txt": "x", ".hidden.md": "h"},
    )
    (memory / ".secret").mkdir()
    (memory / ".secret/c.md").write_text("c")
    (memory / "folder.md").mkdir()
    found = index.scan()
    assert sorted(found) == ["a.md", "sub/deeper/b.md"]
    st = os.stat(memory / "sub/deeper/b.md")
    assert found["sub/deeper/b.md"] == FileStat(
        st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino
    )


def test_what_a_scan_leaves_out_is_reported_in_so_many_words(
    index: MemoryIndex, memory: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {"a.md": "a", "b.md": "b", "c.md": "c", "d/e.md": "e"})
    os.mkfifo(memory / "pipe.md")
    (memory / "link.md").symlink_to(memory / "a.md")
    (memory / "dir.md").mkdir()
    bad = os.fsencode(memory) + b"/caf\xe9.md"
    with open(bad, "w") as f:
        f.write("x")
    monkeypatch.setattr(search, "SEARCH_MAX_FILES", 3)
    report = UpdateReport()
    found = index.scan(report)
    assert sorted(found) == ["a.md", "b.md", "c.md"]
    assert sorted(report.skipped) == [
        "memory/caf\\xe9.md: its name is not valid UTF-8; not indexed (rename it)",
        "memory/d/e.md: over 3 files; not indexed",
        "memory/link.md: not a regular file",
        "memory/pipe.md: not a regular file",
    ]
    # without a report, the same files
    assert index.scan() == found


def test_a_scan_goes_on_past_a_file_it_cannot_look_at(
    index: MemoryIndex, memory: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {"a.md": "a", "b.md": "b", "c.md": "c"})
    real_stat = os.stat

    def stat_fails_for_a(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == "a.md" and kwargs.get("dir_fd") is not None:
            raise PermissionError(13, "Permission denied")
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_fails_for_a)
    report = UpdateReport()
    assert sorted(index.scan(report)) == ["b.md", "c.md"]
    assert report.skipped == []


def test_every_file_past_the_limit_is_reported(
    index: MemoryIndex, memory: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {"a.md": "a", "b.md": "b", "c.md": "c"})
    monkeypatch.setattr(search, "SEARCH_MAX_FILES", 1)
    report = UpdateReport()
    assert sorted(index.scan(report)) == ["a.md"]
    assert report.skipped == [
        "memory/b.md: over 1 files; not indexed",
        "memory/c.md: over 1 files; not indexed",
    ]


def test_the_file_limit_is_written_with_thousands_separators(
    index: MemoryIndex, memory: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(search, "SEARCH_MAX_FILES", 1000)
    for i in range(1001):
        (memory / f"n{i:04}.md").write_text("")
    report = UpdateReport()
    assert len(index.scan(report)) == 1000
    assert report.skipped == ["memory/n1000.md: over 1,000 files; not indexed"]
    (memory / "n1000.md").unlink()
    report = UpdateReport()
    assert len(index.scan(report)) == 1000 and report.skipped == []


# updates


def test_an_update_counts_each_file_once(index: MemoryIndex, memory: Path) -> None:
    write(memory, {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n", "c/d.md": "# D\n\ndelta\n"})
    first = index.update()
    assert (first.added, first.changed, first.removed, first.unchanged) == (3, 0, 0, 0)
    assert (first.skipped, first.rebuilt) == ([], False)
    write(memory, {"a.md": "# A\n\nalpha again\n", "e.md": "# E\n\nepsilon\n"})
    (memory / "b.md").unlink()
    second = index.update()
    assert (second.added, second.changed, second.removed, second.unchanged) == (1, 1, 1, 1)
    fresh = index.freshness()
    assert (fresh.files, fresh.chunks, fresh.stale_files, fresh.stale) == (3, 3, 0, False)
    assert sorted(paths(index, "alpha beta delta epsilon")) == [
        "memory/a.md",
        "memory/c/d.md",
        "memory/e.md",
    ]


def test_each_file_added_changed_or_removed_counts(index: MemoryIndex, memory: Path) -> None:
    write(memory, {f"{name}.md": f"# {name}\n\n{name} one\n" for name in "abcdef"})
    assert index.update().added == 6
    write(memory, {"a.md": "# a\n\na two\n", "b.md": "# b\n\nb two\n"})
    for name in "cd":
        (memory / f"{name}.md").unlink()
    report = index.update()
    assert (report.added, report.changed, report.removed, report.unchanged) == (0, 2, 2, 2)


def test_each_known_file_past_the_read_limit_counts_as_removed(
    index: MemoryIndex, memory: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {"a.md": "# A\n", "b.md": "# B\n", "c.md": "# C\n"})
    index.update()
    monkeypatch.setattr(search, "MEMORY_FILE_READ_MAX_BYTES", 12)
    write(memory, {"a.md": "# A\n\nnow too long\n", "b.md": "# B\n\nnow too long\n"})
    report = index.update()
    assert (report.added, report.changed, report.removed, report.unchanged) == (0, 0, 2, 1)
    assert len(report.skipped) == 2


def test_a_forced_update_of_a_sound_index_builds_it_anew_in_place(
    index: MemoryIndex, memory: Path
) -> None:
    write(memory, {"a.md": "# Alpha\n\nKrankenversicherung\n", "b.md": "# Beta\n\nbeta\n"})
    index.update()
    report = index.update(force=True)
    assert (report.added, report.removed, report.rebuilt) == (2, 0, False)
    assert not index.rebuilt and not [p for p in index.dir.iterdir() if ".corrupt-" in p.name]
    assert sorted(paths(index, "alpha beta")) == ["memory/a.md", "memory/b.md"]
    assert paths(index, "versicherung") == ["memory/a.md"]
    assert index.db.execute("SELECT COUNT(*) FROM fts").fetchone()[0] == 2


def test_the_words_trigram_index_matches_the_words_after_each_kind_of_update(
    index: MemoryIndex, memory: Path
) -> None:
    def sound() -> None:
        # FTS5 checks its index against the words table it indexes (external content)
        index.db.execute("INSERT INTO word_grams (word_grams, rank) VALUES ('integrity-check', 1)")

    write(memory, {"a.md": "# Zahnarzttermin\n"})
    index.update()  # into an empty vocabulary: the trigrams made in bulk
    sound()
    write(memory, {"b.md": "# Haftpflichtversicherung\n\nZahnarzttermin\n"})
    index.update()  # into a vocabulary with words: one word at a time
    sound()
    (memory / "a.md").unlink()
    index.update()
    sound()
    assert paths(index, "versicherung") == ["memory/b.md"]


def test_an_update_reports_the_time_it_took(index: MemoryIndex, memory: Path) -> None:
    write(memory, {"a.md": "# A\n\nalpha\n"})
    before = time.perf_counter()
    report = index.update()
    took = time.perf_counter() - before
    assert 0 < report.seconds <= took


def test_freshness_counts_the_files_added_changed_and_removed_since(
    index: MemoryIndex, memory: Path
) -> None:
    write(memory, {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n", "c.md": "# C\n"})
    never = index.freshness()
    assert (never.files, never.chunks, never.updated, never.stale_files) == (0, 0, None, 3)
    index.update()
    assert index.freshness().updated is not None
    write(memory, {"a.md": "# A\n\nalpha, longer\n", "new.md": "# N\n"})
    (memory / "b.md").unlink()
    later = index.freshness()
    assert (later.files, later.chunks, later.stale_files) == (3, 3, 3)


def test_a_touched_file_has_only_its_status_updated(index: MemoryIndex, memory: Path) -> None:
    write(memory, {"a.md": "# A\n\nalpha\n"})
    index.update()
    before = index.db.execute("SELECT id FROM chunks").fetchall()
    st = os.stat(memory / "a.md")
    os.utime(memory / "a.md", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert index.freshness().stale_files == 1
    report = index.update()
    assert (report.changed, report.unchanged) == (0, 1)
    assert index.freshness().stale_files == 0  # its new status is kept
    assert index.db.execute("SELECT id FROM chunks").fetchall() == before
    again = index.update()
    assert (again.changed, again.unchanged) == (0, 1)


def test_chunks_are_numbered_on_from_the_highest(index: MemoryIndex, memory: Path) -> None:
    write(memory, {"a.md": "# A\none\n# B\ntwo", "b.md": "# C\nthree"})
    index.update()
    rows = index.db.execute("SELECT id, path, start_line, end_line, weight FROM chunks").fetchall()
    assert sorted(rows) == [(1, "a.md", 1, 2, 1.0), (2, "a.md", 3, 4, 1.0), (3, "b.md", 1, 2, 1.0)]
    files = index.db.execute("SELECT path, chunks FROM files ORDER BY path").fetchall()
    assert files == [("a.md", 2), ("b.md", 1)]
    write(memory, {"a.md": "# A\nonly one"})
    index.update()
    rows = index.db.execute("SELECT id, path FROM chunks ORDER BY id").fetchall()
    assert rows == [(3, "b.md"), (4, "a.md")]


def test_a_file_that_cannot_be_read_any_more_is_dropped_and_reported(
    index: MemoryIndex, memory: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n"})
    index.update()
    monkeypatch.setattr(search, "MEMORY_FILE_READ_MAX_BYTES", 12)
    write(memory, {"a.md": "# A\n\nalpha, now longer\n"})
    report = index.update()
    assert report.skipped == ["memory/a.md: is 23 bytes, over the 12-byte read limit"]
    assert (report.added, report.changed, report.removed, report.unchanged) == (0, 0, 1, 1)
    assert paths(index, "alpha beta") == ["memory/b.md"]
    assert index.freshness().files == 1
    # a new file over the limit: reported, and nothing to remove
    write(memory, {"c.md": "# C\n\ngamma, also too long\n"})
    report = index.update()
    assert report.skipped == [
        "memory/a.md: is 23 bytes, over the 12-byte read limit",
        "memory/c.md: is 26 bytes, over the 12-byte read limit",
    ]
    assert (report.added, report.removed, report.unchanged) == (0, 0, 1)


def test_a_file_gone_between_the_scan_and_its_reading_is_reported(
    index: MemoryIndex, memory: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {"a.md": "# A\n\nalpha\n", "sub/b.md": "# B\n\nbeta\n"})
    real = MemoryIndex.scan

    def scan_then_delete(self: MemoryIndex, report: UpdateReport | None = None) -> Any:
        found = real(self, report)
        (memory / "sub/b.md").unlink(missing_ok=True)
        return found

    monkeypatch.setattr(MemoryIndex, "scan", scan_then_delete)
    report = index.update()
    assert report.skipped == ["memory/sub/b.md: No such file or directory"]
    assert (report.added, report.removed) == (1, 0)


def test_a_read_error_without_a_reason_is_reported_by_its_text(
    index: MemoryIndex, memory: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write(memory, {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n"})
    real = search._FolderReader.read_bytes

    def failing(self: Any, path: str, limit: int) -> bytes:
        if path == "b.md":
            raise OSError("the disk said no")
        return real(self, path, limit)

    monkeypatch.setattr(search._FolderReader, "read_bytes", failing)
    report = index.update()
    assert report.skipped == ["memory/b.md: the disk said no"]


def test_files_in_several_folders_are_each_read_from_their_own(
    index: MemoryIndex, memory: Path
) -> None:
    write(
        memory,
        {
            "top.md": "# Top\n\nanchovy\n",
            "p/x.md": "# X\n\nbarracuda\n",
            "p/deeper/z.md": "# Z\n\ncuttlefish\n",
            "q/y.md": "# Y\n\ndogfish\n",
        },
    )
    report = index.update()
    assert (report.added, report.skipped) == (4, [])
    assert sorted(paths(index, "anchovy barracuda cuttlefish dogfish")) == [
        "memory/p/deeper/z.md",
        "memory/p/x.md",
        "memory/q/y.md",
        "memory/top.md",
    ]


def test_text_that_is_not_utf8_is_indexed_with_replacement_characters(
    index: MemoryIndex, memory: Path
) -> None:
    (memory / "a.md").write_bytes(b"# Caf\xe9\n\nespresso\n")
    assert index.update().added == 1
    [hit] = index.search("espresso")
    assert hit.snippet == "# Caf\ufffd\n\n**espresso**"


def test_an_update_of_more_than_500_chunks_goes_in_batches(
    index: MemoryIndex, memory: Path
) -> None:
    big = "\n".join(f"# Part {i}\nline {i}" for i in range(500))
    write(memory, {"big.md": big, "small.md": "# Small\n\nwalrus\n"})
    report = index.update()
    assert report.added == 2
    assert index.freshness().chunks == 501
    assert paths(index, "walrus") == ["memory/small.md"]
    [hit] = index.search("part 499")
    assert (hit.path, hit.start_line, hit.end_line) == ("memory/big.md", 999, 1000)


def test_words_leave_the_vocabulary_with_the_last_chunk_that_held_them(
    index: MemoryIndex, memory: Path
) -> None:
    write(memory, {"a.md": "# Krankenversicherung\n", "b.md": "# Krankenversicherung\n\nTermin"})

    def words() -> dict[str, int]:
        return dict(index.db.execute("SELECT word, chunks FROM words").fetchall())

    index.update()
    assert words() == {"krankenversicherung": 2, "memory": 2, "termin": 1}
    (memory / "b.md").unlink()
    index.update()
    assert words() == {"krankenversicherung": 1, "memory": 1}
    # the trigram index follows: the part finds the compound, then nothing
    assert paths(index, "Versicherung") == ["memory/a.md"]
    (memory / "a.md").unlink()
    index.update()
    assert words() == {}
    assert paths(index, "Versicherung") == []
    # words added one update at a time are found by their parts too
    write(memory, {"c.md": "# Zahnarzttermin\n"})
    index.update()
    assert paths(index, "zahnarzt") == ["memory/c.md"]
    write(memory, {"d.md": "# Haftpflichtversicherung\n"})
    index.update()
    assert paths(index, "versicherung") == ["memory/d.md"]
    assert index.update(force=True).added == 2
    assert paths(index, "versicherung") == ["memory/d.md"]


def test_a_compound_nobody_wrote_is_found_by_its_parts(index: MemoryIndex, memory: Path) -> None:
    write(memory, {"a.md": "# Zahnarzt\n\nDr. Silva", "b.md": "# Termin\n\nMontag"})
    index.update()
    assert sorted(paths(index, "Zahnarzttermin")) == ["memory/a.md", "memory/b.md"]
    assert paths(index, "Xylophontermin") == []  # one part alone is no cut


def test_each_long_word_of_a_query_brings_its_compounds(index: MemoryIndex, memory: Path) -> None:
    write(memory, {"a.md": "# Krankenversicherung\n", "b.md": "# Zahnarzttermin\n", **FILLER})
    index.update()
    assert sorted(paths(index, "Versicherung Zahnarzt")) == ["memory/a.md", "memory/b.md"]


# searching


def test_scores_are_bm25_with_the_path_weighted_four_times(
    index: MemoryIndex, memory: Path
) -> None:
    write(
        memory,
        {
            "walrus.md": "# Notes\n\nnothing here\n",
            "notes.md": "# Notes\n\nwalrus here\n",
            **FILLER,
        },
    )
    index.update()
    hits = index.search("walrus")
    assert [h.path for h in hits] == ["memory/walrus.md", "memory/notes.md"]
    assert [h.score for h in hits] == [2.2037, 1.4268]
    assert all(h.score == round(h.score, 4) for h in hits)


def test_a_map_scores_a_quarter_of_the_same_text_elsewhere(
    index: MemoryIndex, memory: Path
) -> None:
    text = "# Heading\n\nThe narwhal is here.\n"
    write(memory, {"system/definition.md": text, "system/elsewhere.md": text, **FILLER})
    index.update()
    [plain, mapped] = index.search("narwhal")
    assert (plain.path, mapped.path) == (
        "memory/system/elsewhere.md",
        "memory/system/definition.md",
    )
    assert mapped.score == pytest.approx(plain.score * MAP_WEIGHT, abs=1e-4)
    weights = dict(
        index.db.execute("SELECT path, weight FROM chunks WHERE path LIKE 'system/%'").fetchall()
    )
    assert weights == {"system/definition.md": 0.25, "system/elsewhere.md": 1.0}


def test_a_hit_is_the_best_chunk_of_its_file_with_its_lines(
    index: MemoryIndex, memory: Path
) -> None:
    text = "# One\nfirst otter\nline\n# Two\notter otter otter\nmore\n# Three\nnone"
    write(memory, {"a.md": text})
    index.update()
    [hit] = index.search("otter")
    assert (hit.path, hit.start_line, hit.end_line) == ("memory/a.md", 4, 6)
    assert hit.snippet == "# Two\n**otter** **otter** **otter**\nmore"


def test_a_snippet_is_24_words_around_the_match(index: MemoryIndex, memory: Path) -> None:
    words = " ".join(f"w{i}" for i in range(60))
    write(memory, {"a.md": f"{words} beaver {words}"})
    index.update()
    [hit] = index.search("beaver")
    shown = hit.snippet
    assert shown.startswith(" ... ") and shown.endswith(" ... ")
    assert shown.count("**beaver**") == 1
    assert len(re.findall(r"w\d+", shown)) == 23  # and the match: 24 tokens
    assert index.search("w0")[0].snippet.startswith("**w0** w1 w2")


def test_a_snippet_of_chinese_text_has_no_separators(index: MemoryIndex, memory: Path) -> None:
    write(memory, {"a.md": "# 時間表\n\n星期二下午4點小提琴課。\n"})
    index.update()
    [hit] = index.search("小提琴")
    assert hit.snippet == "# 時間表\n\n星期二下午4點**小提琴**課。"
    assert "\u200b" not in hit.snippet


def test_the_number_of_results_is_from_one_to_fifty(index: MemoryIndex, memory: Path) -> None:
    write(memory, {f"f{i:02}.md": f"# F{i}\n\nthe common word\n" for i in range(55)})
    index.update()
    assert len(index.search("common", 0)) == 1
    assert len(index.search("common", -5)) == 1
    assert len(index.search("common", 2)) == 2
    assert len(index.search("common", "3")) == 3  # type: ignore[arg-type]
    assert len(index.search("common", 50)) == 50
    assert len(index.search("common", 51)) == 50
    assert len(index.search("common")) == 6


def test_results_come_from_other_files_past_a_file_of_many_chunks(
    index: MemoryIndex, memory: Path
) -> None:
    chunks = "\n".join(f"# Part {i}\nbison bison bison\nmore" for i in range(7))
    write(memory, {"many.md": chunks, "one.md": "# One\n\nbison, and much else besides here\n"})
    index.update()
    assert paths(index, "bison", 2) == ["memory/many.md", "memory/one.md"]


def test_a_file_of_more_strong_chunks_than_four_per_result_leaves_room_for_the_others(
    index: MemoryIndex, memory: Path
) -> None:
    # 12 chunks of bison.md outrank every chunk of the other files; a search for 2 files
    # must still find 2 (the best chunk of each file, not the best 8 chunks)
    chunks = "\n".join(f"# Part {i}\nbison bison bison\nmore" for i in range(12))
    write(memory, {"bison.md": chunks, "z.md": "# Zed\n\nbison, and much else besides here\n"})
    write(memory, {f"filler/{i}.md": f"# Filler {i}\n\nunrelated text {i}\n" for i in range(40)})
    index.update()
    found = index.search("bison", 2)
    assert [h.path for h in found] == ["memory/bison.md", "memory/z.md"]
    assert found[0].score > found[1].score > 0


# hybrid


class Recorder(WordBag):
    """WordBag, keeping the texts it was given."""

    def __init__(self, synonyms: dict[str, str] | None = None) -> None:
        super().__init__(synonyms)
        self.texts: list[list[str]] = []

    def embed(self, texts: list[str]):  # type: ignore[no-untyped-def]
        self.texts.append(list(texts))
        return super().embed(texts)


def hybrid(tmp_path: Path, embedder: Any, weight: float) -> MemoryIndex:
    return MemoryIndex(
        tmp_path / "state", tmp_path / "groups", "fam", embedder=embedder, vector_weight=weight
    )


def test_chunks_are_embedded_with_their_path_in_batches_of_256(
    tmp_path: Path, memory: Path
) -> None:
    pytest.importorskip("numpy")
    write(memory, {f"f{i:03}.md": f"# F{i}\n\nword{i}\n" for i in range(257)})
    bag = Recorder()
    made = hybrid(tmp_path, bag, 0.5)
    made.update()
    assert [len(batch) for batch in bag.texts] == [256, 1]
    assert bag.texts[0][0] == "memory/f000.md\n# F0\n\nword0"
    stored = made.db.execute("SELECT id, length(v) FROM vectors ORDER BY id").fetchall()
    assert stored == [(i, 1024 * 4) for i in range(1, 258)]
    (memory / "f000.md").unlink()
    made.update()
    assert made.db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == 256
    assert len(bag.texts) == 2  # nothing new to embed
    write(memory, {"new.md": "# New\n\nnarwhal\n"})
    made.update()
    assert bag.texts[2:] == [["memory/new.md\n# New\n\nnarwhal"]]
    made.close()


def test_chinese_text_is_embedded_as_written(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    write(memory, {"a.md": "小提琴課"})
    bag = Recorder()
    made = hybrid(tmp_path, bag, 0.5)
    made.update()
    assert bag.texts == [["memory/a.md\n小提琴課"]]
    made.close()


def test_the_hybrid_score_blends_the_best_bm25_and_the_cosine(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    write(
        memory,
        {
            "a.md": "lynx lynx",
            "b.md": "lynx and more words here",
            "c.md": "tapir",
            "index.md": "tapir",
            **FILLER,
        },
    )
    # weight 0: the best keyword hit scores 1, the others their share of it
    zero = hybrid(tmp_path, WordBag(), 0.0)
    zero.update()
    plain = MemoryIndex(tmp_path / "state", tmp_path / "groups", "fam")
    bm25 = {h.path: h.score for h in plain.search("lynx")}
    scored = {h.path: h.score for h in zero.search("lynx")}
    assert scored["memory/a.md"] == 1.0
    assert scored["memory/b.md"] == pytest.approx(
        bm25["memory/b.md"] / bm25["memory/a.md"], abs=1e-4
    )
    # weight 1: the cosine alone (of the query and the chunk's path and text), times a
    # quarter for the map index.md
    one = hybrid(tmp_path, WordBag(), 1.0)
    hits = one.search("tapir", 2)
    assert [(h.path, h.score) for h in hits] == [
        ("memory/c.md", 0.7037),
        ("memory/index.md", 0.177),
    ]
    assert hits[0].snippet == "**tapir**"
    # every chunk is a candidate by its vector; those pointing away score 0, not less
    scores = [h.score for h in one.search("tapir", 50)]
    assert len(scores) == 12 and min(scores) == 0.0
    # half and half
    half = hybrid(tmp_path, WordBag(), 0.5)
    [best, *_] = half.search("lynx lynx")
    assert (best.path, best.score) == ("memory/a.md", 0.9444)
    # a chunk found by its vector alone: half its cosine
    query, text = WordBag().embed(["lynx lynx", "memory/c.md\ntapir"])
    cosine = float(query @ text)
    by_path = {h.path: h.score for h in half.search("lynx lynx", 50)}
    assert by_path["memory/c.md"] == round(0.5 * max(cosine, 0.0), 4)
    for made in (zero, plain, one, half):
        made.close()


def test_a_hybrid_hit_is_the_best_chunk_of_its_file(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    write(
        memory,
        {"two.md": "# One\nlynx lynx lynx\n# Two\nlynx and other words here", **FILLER},
    )
    made = hybrid(tmp_path, WordBag(), 0.0)
    made.update()
    [hit] = made.search("lynx", 1)
    assert (hit.path, hit.start_line, hit.end_line, hit.score) == ("memory/two.md", 1, 2, 1.0)
    hits = made.search("lynx", 50)
    assert [h.path for h in hits].count("memory/two.md") == 1
    assert (hits[0].path, hits[0].start_line, hits[0].score) == ("memory/two.md", 1, 1.0)
    made.close()


def test_a_match_past_the_keyword_candidates_shows_the_start_of_its_chunk(
    tmp_path: Path, memory: Path
) -> None:
    """The 50 best keyword hits have their words in bold; a chunk that holds the words
    too but is found by its vector alone shows its start, as any hit by meaning."""
    pytest.importorskip("numpy")
    far = "lynx " + " ".join(["feline"] * 40)
    write(memory, {f"k{i:02}.md": f"# K{i}\n\nlynx\n" for i in range(50)})
    write(memory, {"far.md": far})
    made = hybrid(tmp_path, WordBag({"feline": "lynx"}), 1.0)
    made.update()
    [hit] = made.search("lynx", 1)
    assert hit.path == "memory/far.md"
    assert hit.snippet == far[:200] + " ..."
    made.close()


def test_a_hit_by_meaning_alone_shows_the_start_of_its_chunk(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    long = " ".join(["dentist"] + [f"w{i:03}" for i in range(60)])
    write(
        memory, {"long.md": f"#   Dentist\n\n{long}\n", "short.md": "dentist\n\n  of   the family"}
    )
    made = hybrid(tmp_path, WordBag({"molars": "dentist"}), 0.9)
    made.update()
    by_path = {h.path: h for h in made.search("molars", 5)}
    text = "# Dentist " + long
    assert by_path["memory/long.md"].snippet == text[:200] + " ..."
    assert by_path["memory/short.md"].snippet == "dentist of the family"
    assert all(h.score >= 0 for h in by_path.values())
    assert (by_path["memory/long.md"].start_line, by_path["memory/long.md"].end_line) == (1, 3)
    assert len(made.search("molars", 1)) == 1
    made.close()


def test_a_snippet_of_exactly_200_characters_has_no_ellipsis(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    text = "dentist " + "x" * 192
    assert len(text) == 200
    write(memory, {"a.md": text})
    made = hybrid(tmp_path, WordBag({"molars": "dentist"}), 0.9)
    made.update()
    [hit] = made.search("molars", 1)
    assert hit.snippet == text
    made.close()


def test_vectors_are_read_again_after_an_update(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    write(memory, {"a.md": "# A\n\nokapi\n"})
    made = hybrid(tmp_path, WordBag(), 1.0)
    made.update()
    assert paths(made, "okapi") == ["memory/a.md"]
    write(memory, {"b.md": "# B\n\nokapi\n"})
    made.update()
    scores = {h.path: h.score for h in made.search("okapi")}
    # b.md is scored by its own vector (half its words are the query's), not as missing
    query, b = WordBag().embed(["okapi", "memory/b.md\n# B\n\nokapi"])
    assert scores["memory/b.md"] == round(float(query @ b), 4) > 0.3
    made.close()


def test_an_empty_tree_with_an_embedder_finds_nothing(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    made = hybrid(tmp_path, WordBag(), 0.5)
    assert made.search("anything") == []  # never updated
    made.update()
    assert made.search("anything") == []
    made.close()


def test_a_snippet_of_201_characters_is_cut_at_200(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    text = "dentist " + "x" * 193
    write(memory, {"a.md": text})
    made = hybrid(tmp_path, WordBag({"molars": "dentist"}), 0.9)
    made.update()
    [hit] = made.search("molars", 1)
    assert hit.snippet == text[:200] + " ..."
    made.close()


def test_the_candidates_by_meaning_are_the_50_nearest_chunks_or_8_per_result(
    tmp_path: Path, memory: Path
) -> None:
    """One file of 50 chunks nearer the query than any other file fills the pool of
    candidates by meaning: the next file is found only when more results are asked for."""
    pytest.importorskip("numpy")
    crowd = "\n".join(f"# Part {i}\ndentist dentist dentist" for i in range(50))
    clinic = "dentist " + " ".join(f"other{i}" for i in range(20))
    write(memory, {"crowd.md": crowd, "clinic.md": clinic, **FILLER})
    made = hybrid(tmp_path, WordBag({"molars": "dentist"}), 1.0)
    made.update()
    assert made.db.execute("SELECT COUNT(*) FROM chunks WHERE path='crowd.md'").fetchone() == (50,)
    assert paths(made, "molars", 6) == ["memory/crowd.md"]
    # 7 results asked for: the 56 nearest chunks
    found = paths(made, "molars", 7)
    assert found[:2] == ["memory/crowd.md", "memory/clinic.md"] and len(found) == 7
    made.close()


def test_a_chunk_without_a_vector_counts_as_dissimilar(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    write(memory, {"a.md": "lynx lynx", **FILLER})
    made = hybrid(tmp_path, WordBag(), 0.5)
    made.update()
    write(memory, {"b.md": "lynx and more words here"})
    plain = MemoryIndex(tmp_path / "state", tmp_path / "groups", "fam")
    plain.update()  # b.md indexed, not embedded
    bm25 = {h.path: h.score for h in plain.search("lynx")}
    scores = {h.path: h.score for h in made.search("lynx", 3)}
    assert scores["memory/b.md"] == round(0.5 * bm25["memory/b.md"] / bm25["memory/a.md"], 4)
    made.close()
    plain.close()


class Float64(WordBag):
    """WordBag, its vectors as lists of Python floats."""

    def embed(self, texts: list[str]):  # type: ignore[no-untyped-def]
        return [[float(x) for x in row] for row in super().embed(texts)]


class OneShort(WordBag):
    """WordBag, one vector short."""

    def embed(self, texts: list[str]):  # type: ignore[no-untyped-def]
        return super().embed(texts)[:-1]


def test_vectors_are_stored_as_float32_and_one_per_chunk(tmp_path: Path, memory: Path) -> None:
    pytest.importorskip("numpy")
    write(memory, {"a.md": "# A\n\nalpha\n", "b.md": "# B\n\nbeta\n"})
    made = hybrid(tmp_path, Float64(), 0.5)
    made.update()
    assert made.db.execute("SELECT length(v) FROM vectors").fetchall() == [(4096,), (4096,)]
    assert paths(made, "alpha")[0] == "memory/a.md"
    made.close()
    short = hybrid(tmp_path, OneShort(), 0.5)
    short.name = "one-short"  # type: ignore[attr-defined]
    short.embedder.name = "one-short"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="shorter"):
        short.update(force=True)
    short.close()


# around the index


def test_index_for_passes_the_settings_on(tmp_path: Path) -> None:
    made = index_for(tmp_path / "state", tmp_path / "groups", "fam", vector_weight=0.3)
    assert (made.folder, made.embedder, made.vector_weight) == ("fam", None, 0.3)
    assert made.path == tmp_path / "state/index/fam.sqlite"
    assert index_for(tmp_path / "state", tmp_path / "groups", "fam").vector_weight == 0.5


def test_index_for_loads_the_named_embedder(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import orchestrator.memory.embeddings as embeddings

    bag = WordBag()
    asked: list[tuple[str, Path]] = []

    def load(name: str, state_dir: Path) -> WordBag:
        asked.append((name, state_dir))
        return bag

    monkeypatch.setattr(embeddings, "load_embedder", load)
    made = index_for(tmp_path / "state", tmp_path / "groups", "fam", "bag", 0.2)
    assert asked == [("bag", tmp_path / "state")]
    assert (made.embedder, made.vector_weight, made.folder) == (bag, 0.2, "fam")
    assert made.groups_dir == tmp_path / "groups"


def test_removing_an_index_deletes_its_files_and_lock_only(tmp_path: Path) -> None:
    where = tmp_path / "index"
    where.mkdir()
    names = ["fam.sqlite", "fam.sqlite-wal", "fam.sqlite-shm", "fam.lock", "family.sqlite"]
    for name in names:
        (where / name).write_text("")
    remove_index(tmp_path, "fam")
    assert sorted(p.name for p in where.iterdir()) == ["family.sqlite"]
    remove_index(tmp_path, "fam")  # nothing left: no error
    (where / "fam.lock").write_text("")
    remove_index(tmp_path, "fam")
    assert not (where / "fam.lock").exists()


# the context report


def test_the_context_report_says_what_is_missing_refused_or_cut(tmp_path: Path) -> None:
    from orchestrator.limits import MEMORY_FILE_BUDGET_CHARS, STANDING_TEXT_BUDGET_CHARS

    groups = tmp_path / "groups"
    memory = groups / "fam/memory"
    (memory / "system").mkdir(parents=True)
    (groups / "fam/learned-behaviors.md").write_text("x" * STANDING_TEXT_BUDGET_CHARS + "\n")
    (groups / "fam/instructions.prepend.md").write_text("y" * (STANDING_TEXT_BUDGET_CHARS + 1))
    (memory / "index.md").write_text("z" * MEMORY_FILE_BUDGET_CHARS + "\n\n")
    (tmp_path / "elsewhere.md").write_text("secret")
    (memory / "system/definition.md").symlink_to(tmp_path / "elsewhere.md")
    report = {i.name: i for i in context_report(groups, "fam")}
    assert list(report) == [
        "instructions.prepend.md",
        "learned-behaviors.md",
        "memory/index.md",
        "memory/system/definition.md",
    ]
    learned = report["learned-behaviors.md"]
    assert (learned.raw_chars, learned.truncated, learned.problem) == (
        STANDING_TEXT_BUDGET_CHARS + 1,
        False,
        None,
    )
    assert report["instructions.prepend.md"].truncated
    notice = (
        "\n[truncated: instructions.prepend.md is longer than 16,000 characters and only"
        " its beginning was loaded]"
    )
    assert report["instructions.prepend.md"].injected_chars == STANDING_TEXT_BUDGET_CHARS + len(
        notice
    )
    index_md = report["memory/index.md"]
    assert (index_md.raw_chars, index_md.truncated) == (MEMORY_FILE_BUDGET_CHARS + 2, False)
    definition = report["memory/system/definition.md"]
    assert definition.problem is not None and definition.problem.startswith("refused: ")
    assert (definition.raw_chars, definition.truncated) == (0, False)
    assert definition.to_dict() == {
        "file": "memory/system/definition.md",
        "raw_chars": 0,
        "injected_chars": definition.injected_chars,
        "truncated": False,
        "problem": definition.problem,
    }
    (memory / "index.md").write_text("z" * (MEMORY_FILE_BUDGET_CHARS + 1))
    assert {i.name: i for i in context_report(groups, "fam")}["memory/index.md"].truncated


def test_the_context_report_adds_the_recent_notes(tmp_path: Path) -> None:
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    groups = tmp_path / "groups"
    daily = groups / "fam/memory/daily"
    daily.mkdir(parents=True)
    today = datetime.now(ZoneInfo("UTC")).date()
    yesterday = today - timedelta(days=1)
    (daily / f"{yesterday:%Y-%m-%d}.md").write_text("- one\n")
    (daily / f"{today:%Y-%m-%d}.md").mkdir()  # not a file
    given: list[list[str]] = []

    def recent(texts: list[str]) -> tuple[int, bool]:
        given.append(texts)
        return 4, True

    entry = context_report(groups, "fam", recent=recent)[-1]
    assert given == [["- one\n", ""]]
    assert (entry.name, entry.raw_chars, entry.injected_chars, entry.truncated) == (
        "memory/daily (recent, creators' lines)",
        6,
        4,
        True,
    )
    assert entry.problem is not None
    assert entry.problem.startswith(f"daily/{today:%Y-%m-%d}.md refused: ")
    (daily / f"{today:%Y-%m-%d}.md").rmdir()
    quiet = context_report(groups, "fam", recent=recent)[-1]
    assert quiet.problem is None  # a missing note is no problem


def test_the_recent_notes_are_those_of_the_groups_own_day(tmp_path: Path) -> None:
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    groups = tmp_path / "groups"
    daily = groups / "fam/memory/daily"
    daily.mkdir(parents=True)
    # the group 14 hours ahead of UTC, the host 12 hours behind: never the same date
    given: list[list[str]] = []

    def recent(texts: list[str]) -> tuple[int, bool]:
        given.append(texts)
        return 0, False

    with local_zone("Etc/GMT+12"):
        today = datetime.now(ZoneInfo("Etc/GMT-14")).date()
        for day in (today - timedelta(days=1), today):
            (daily / f"{day:%Y-%m-%d}.md").write_text(f"- {day}\n")
        context_report(groups, "fam", zone="Etc/GMT-14", recent=recent)
    assert given == [[f"- {today - timedelta(days=1)}\n", f"- {today}\n"]]


def test_the_context_report_reads_standing_files_up_to_their_limit(tmp_path: Path) -> None:
    from orchestrator.limits import LEARNED_READ_MAX_BYTES

    groups = tmp_path / "groups"
    (groups / "fam/memory").mkdir(parents=True)
    (groups / "fam/learned-behaviors.md").write_text("l" * (LEARNED_READ_MAX_BYTES + 10))
    (groups / "fam/instructions.prepend.md").write_bytes(b"ok \xff\n")
    report = {i.name: i for i in context_report(groups, "fam")}
    learned = report["learned-behaviors.md"]
    assert (learned.raw_chars, learned.truncated, learned.problem) == (
        LEARNED_READ_MAX_BYTES,
        True,
        None,
    )
    instructions = report["instructions.prepend.md"]
    # a byte that is not UTF-8 is one replacement character
    assert (instructions.raw_chars, instructions.injected_chars) == (5, 4)
    assert (instructions.truncated, instructions.problem) == (False, None)
    missing = report["memory/index.md"]
    assert (missing.raw_chars, missing.truncated, missing.problem) == (0, False, "missing")


def test_the_context_report_says_why_a_file_could_not_be_read(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import errno

    from orchestrator.confined import ConfinedDir

    groups = tmp_path / "groups"
    (groups / "fam/memory").mkdir(parents=True)
    (groups / "fam/learned-behaviors.md").write_text("- Be brief.\n")
    (groups / "fam/instructions.prepend.md").write_text("Hello.\n")
    (tmp_path / "elsewhere.md").write_text("secret")
    (groups / "fam/memory/index.md").symlink_to(tmp_path / "elsewhere.md")
    real = ConfinedDir.read_bytes

    def failing(self: ConfinedDir, relative: str, limit: int, **kwargs: Any) -> bytes:
        if relative == "learned-behaviors.md":
            raise OSError(errno.EIO, "Input/output error")
        if relative == "instructions.prepend.md":
            raise OSError("no reason given")
        return real(self, relative, limit, **kwargs)

    monkeypatch.setattr(ConfinedDir, "read_bytes", failing)
    report = {i.name: i for i in context_report(groups, "fam")}
    learned = report["learned-behaviors.md"]
    assert (learned.raw_chars, learned.injected_chars, learned.truncated) == (0, 0, False)
    assert learned.problem == "unreadable: Input/output error"
    assert report["instructions.prepend.md"].problem == "unreadable: no reason given"
    assert report["instructions.prepend.md"].injected_chars == 0
    index_md = report["memory/index.md"]
    assert index_md.problem is not None and index_md.problem.startswith("refused: ")
    assert index_md.raw_chars == 0


def test_the_problems_of_both_recent_notes_are_joined(tmp_path: Path) -> None:
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    groups = tmp_path / "groups"
    daily = groups / "fam/memory/daily"
    daily.mkdir(parents=True)
    today = datetime.now(ZoneInfo("UTC")).date()
    days = [f"{today - timedelta(days=1):%Y-%m-%d}", f"{today:%Y-%m-%d}"]
    for day in days:
        (daily / f"{day}.md").mkdir()
    entry = context_report(groups, "fam", recent=lambda texts: (0, False))[-1]
    assert entry.problem is not None
    first, second = entry.problem.split("; ")
    assert first.startswith(f"daily/{days[0]}.md refused: ")
    assert second.startswith(f"daily/{days[1]}.md refused: ")
    assert (entry.raw_chars, entry.injected_chars, entry.truncated) == (0, 0, False)


def test_a_connection_waits_five_seconds_at_most_for_anothers_lock(
    index: MemoryIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[object] = []
    connect = sqlite3.connect

    def recorded(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        asked.append(kwargs.get("timeout", 5.0))  # sqlite3's own default is 5.0
        return connect(*args, **kwargs)

    monkeypatch.setattr(search.sqlite3, "connect", recorded)
    index.update()
    assert asked == [5]
