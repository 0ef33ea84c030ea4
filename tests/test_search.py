"""Search over a group's memory: ranking, incremental updates, faults (a corrupt index,
a kill mid-update, a busy database), path confinement of memory_get, the context
report, the relay ops and the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import load_config
from orchestrator.confined import UnsafePath
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.memory.reading import memory_relative, read_lines
from orchestrator.memory.search import (
    SCHEMA_VERSION,
    MemoryIndex,
    chunk_lines,
    context_report,
    fts_query,
)
from tests.searchcorpus import FILES, QUERIES, write_corpus
from tests.served import say

ALL = len(FILES) + 2  # and the scaffold's system/index.md and system/definition.md


@pytest.fixture
def tree(home: Path) -> Iterator[dict[str, Any]]:
    h = Home(home)
    group = GroupStore(h).add(GroupConfig(name="fam", creators=("alice",)))
    write_corpus(group.memory_dir)
    index = MemoryIndex(h.state_dir, h.groups_dir, "fam")
    yield {"home": h, "group": group, "index": index, "memory": group.memory_dir}
    index.close()


def top(index: MemoryIndex, query: str) -> str | None:
    hits = index.search(query, 3)
    return hits[0].path if hits else None


# ranking


def test_the_right_file_ranks_first(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    report = index.update()
    assert report.added == ALL and report.skipped == []
    misses = [(q, top(index, q), want) for q, want in QUERIES if top(index, q) != want]
    assert misses == []


def test_results_are_one_passage_per_file_with_lines_and_a_snippet(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    index.update()
    hits = index.search("kitchen renovation", 10)
    assert len({h.path for h in hits}) == len(hits)
    best = hits[0]
    assert best.path == "memory/projects/kitchen-renovation.md"
    assert (best.start_line, best.end_line) == (1, 8)
    assert "**Kitchen**" in best.snippet and best.score > 0
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert index.search("kitchen renovation", 1) == hits[:1]
    assert index.search("   ", 5) == [] and index.search("zzzqqq", 5) == []


def test_words_match_their_other_forms_and_quotes_are_inert(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    index.update()
    assert top(index, "deadline") == "memory/preferences/deadlines.md"
    assert top(index, "lessons piano") == "memory/imports/old-assistant/MEMORY.md"
    # FTS5 syntax in a query is just words
    assert top(index, 'piano" OR NEAR(x') == "memory/imports/old-assistant/MEMORY.md"
    assert fts_query('a "b" c') == '"a" OR "b" OR "c"'
    assert fts_query("!!") is None


def test_chunks_follow_headings_and_keep_frontmatter_with_the_first(tmp_path: Path) -> None:
    text = "---\ntype: x\n---\n\n# A\n\none\ntwo\n\n## B\n\nthree\n"
    assert chunk_lines(text) == [
        (1, 9, "---\ntype: x\n---\n\n# A\n\none\ntwo\n"),
        (10, 12, "## B\n\nthree"),
    ]
    long = "\n".join(f"line {i}" for i in range(100))
    assert [(a, b) for a, b, _ in chunk_lines(long)] == [(1, 40), (41, 80), (81, 100)]
    assert chunk_lines("") == [] and chunk_lines("\n\n") == []


# updates


def test_incremental_updates_after_an_edit_a_rename_and_a_delete(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    memory: Path = tree["memory"]
    index.update()
    again = index.update()
    assert (again.added, again.changed, again.removed) == (0, 0, 0)
    assert again.unchanged == ALL
    (memory / "projects/garden.md").write_text("# Garden\n\nPlant the olive tree in spring.\n")
    edited = index.update()
    assert (edited.added, edited.changed, edited.removed) == (0, 1, 0)
    assert top(index, "olive") == "memory/projects/garden.md"
    assert top(index, "courgettes") is None
    os.rename(memory / "projects/garden.md", memory / "projects/orchard.md")
    renamed = index.update()
    assert (renamed.added, renamed.removed) == (1, 1)
    assert top(index, "olive") == "memory/projects/orchard.md"
    (memory / "projects/orchard.md").unlink()
    deleted = index.update()
    assert deleted.removed == 1 and top(index, "olive") is None
    assert index.freshness().stale_files == 0


def test_a_file_touched_but_unchanged_is_not_indexed_again(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    index.update()
    path = tree["memory"] / "places/school.md"
    os.utime(path, ns=(time.time_ns(), time.time_ns()))
    report = index.update()
    assert (report.changed, report.unchanged) == (0, ALL)


def test_a_change_hidden_behind_an_old_mtime_is_still_seen(tree) -> None:  # type: ignore[no-untyped-def]
    """A container can set a file's mtime back; the change time it cannot."""
    index: MemoryIndex = tree["index"]
    index.update()
    path: Path = tree["memory"] / "places/school.md"
    before = os.stat(path)
    text = path.read_text()
    path.write_text(text.replace("15:30", "16:45"))  # the same size
    time.sleep(0.01)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert index.freshness().stale_files == 1
    assert index.update().changed == 1
    assert "16:45" in index.search("pick-up", 1)[0].snippet


def test_force_rebuilds_everything(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    index.update()
    report = index.update(force=True)
    assert report.added == ALL and report.unchanged == 0
    assert top(index, "peanut allergy") == "memory/preferences/food.md"


def test_symlinks_and_special_files_are_never_followed(tree, home: Path) -> None:  # type: ignore[no-untyped-def]
    other = GroupStore(tree["home"]).add(GroupConfig(name="work"))
    (other.memory_dir / "secret.md").write_text("# Secret\n\nThe launch code is swordfish.\n")
    memory: Path = tree["memory"]
    (memory / "peek").symlink_to(other.memory_dir)  # a folder swapped for a link
    (memory / "peek.md").symlink_to(other.memory_dir / "secret.md")
    os.mkfifo(memory / "pipe.md")
    index: MemoryIndex = tree["index"]
    report = index.update()
    assert top(index, "swordfish launch code") is None
    assert "memory/pipe.md: not a regular file" in report.skipped


def test_a_file_over_the_read_limit_is_skipped_and_reported(tree, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import orchestrator.memory.search as search

    monkeypatch.setattr(search, "MEMORY_FILE_READ_MAX_BYTES", 200)
    index: MemoryIndex = tree["index"]
    report = index.update()
    [skipped] = [s for s in report.skipped if "ada-lovelace" in s]
    assert skipped.startswith("memory/people/ada-lovelace.md: is ") and "read limit" in skipped
    assert top(index, "Analytical Engine") is None


# faults


def test_a_corrupt_index_is_set_aside_and_rebuilt(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    index.update()
    index.close()
    index.path.write_bytes(b"not a database at all" * 200)
    fresh = MemoryIndex(tree["home"].state_dir, tree["home"].groups_dir, "fam")
    report = fresh.update()
    assert report.rebuilt and report.added == ALL
    assert top(fresh, "boiler service") == "memory/daily/2026-11-15.md"
    assert list(index.dir.glob("fam.sqlite.corrupt-*"))
    fresh.close()


# The shape the release before multilingual search wrote (schema version 2): a run of
# Chinese characters was one token, and there was no vocabulary or weight.
SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files (path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL, ino INTEGER NOT NULL, hash TEXT NOT NULL, chunks INTEGER NOT NULL);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, path TEXT NOT NULL, start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL, hash TEXT NOT NULL);
CREATE INDEX chunks_by_path ON chunks (path);
CREATE TABLE vectors (id INTEGER PRIMARY KEY, v BLOB NOT NULL);
CREATE VIRTUAL TABLE fts USING fts5(path, text, tokenize = 'porter unicode61 remove_diacritics 2');
"""


def _index_of_the_previous_release(index: MemoryIndex, memory: Path, version: int) -> None:
    """An index file as the release before wrote it, of every file of the tree, with
    its status current (so only its version tells it apart)."""
    index.dir.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(index.path, isolation_level=None)
    old.execute("PRAGMA journal_mode=WAL")
    old.executescript(SCHEMA_2)
    for number, path in enumerate(sorted(memory.rglob("*.md")), 1):
        rel, st = str(path.relative_to(memory)), path.stat()
        old.execute(
            "INSERT INTO files VALUES (?,?,?,?,?,?,1)",
            (rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, "x"),
        )
        old.execute("INSERT INTO chunks VALUES (?,?,1,1,'x')", (number, rel))
        old.execute(
            "INSERT INTO fts (rowid, path, text) VALUES (?,?,?)",
            (number, f"memory/{rel}", path.read_text()),
        )
    if version:
        old.execute(f"PRAGMA user_version = {version}")
    else:  # the release before versions kept it in meta
        old.execute("INSERT INTO meta VALUES ('schema', '1')")
    old.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_an_index_of_an_older_release_is_rebuilt_never_read(tree, version: int) -> None:  # type: ignore[no-untyped-def]
    memory: Path = tree["memory"]
    (memory / "schedule.md").write_text("# 時間表\n\n星期二下午4點小提琴課。\n")
    index: MemoryIndex = tree["index"]
    _index_of_the_previous_release(index, memory, version)
    # a search never reads it: the file is replaced by an empty index, until an update
    assert index.search("小提琴課", 3) == [] and index.rebuilt
    index.close()
    fresh = MemoryIndex(tree["home"].state_dir, tree["home"].groups_dir, "fam")
    report = fresh.update()
    assert report.added == ALL + 1 and report.unchanged == 0
    assert fresh.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert top(fresh, "小提琴課") == "memory/schedule.md"
    assert not list(index.dir.glob("fam.sqlite.*"))  # derived data of a known shape: gone
    fresh.close()


def test_an_update_that_finds_an_older_index_says_it_rebuilt(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    _index_of_the_previous_release(index, tree["memory"], 2)
    report = index.update()
    assert report.rebuilt and report.added == ALL


def test_an_index_of_a_newer_release_is_refused_unchanged(tree) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.memory.search import IndexTooNew

    index: MemoryIndex = tree["index"]
    index.update()
    index.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    index.close()
    before = index.path.read_bytes()
    fresh = MemoryIndex(tree["home"].state_dir, tree["home"].groups_dir, "fam")
    with pytest.raises(IndexTooNew, match="newer than this orchestrator understands"):
        fresh.update()
    assert index.path.read_bytes() == before and not list(index.dir.glob("*.corrupt-*"))


def test_a_kill_during_an_update_leaves_the_index_as_it_was(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    index.update()
    index.close()
    memory: Path = tree["memory"]
    for i in range(30):
        (memory / f"extra-{i}.md").write_text(f"# Extra {i}\n\nzebra number {i}\n")
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from orchestrator.memory.search import MemoryIndex\n"
        "real = MemoryIndex._index\n"
        "seen = []\n"
        "def dying(self, *args):\n"
        "    seen.append(1)\n"
        "    if len(seen) == 10:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(self, *args)\n"
        "MemoryIndex._index = dying\n"
        "MemoryIndex(Path(sys.argv[1]), Path(sys.argv[2]), 'fam').update()\n"
    )
    home: Home = tree["home"]
    child = subprocess.run(
        [sys.executable, "-c", code, str(home.state_dir), str(home.groups_dir)], timeout=60
    )
    assert child.returncode == -9
    after = MemoryIndex(home.state_dir, home.groups_dir, "fam")
    assert top(after, "zebra") is None  # nothing of the killed update
    assert after.freshness().files == ALL
    report = after.update()  # resumes
    assert report.added == 30 and not report.rebuilt
    assert top(after, "zebra number 7") is not None
    after.close()


def test_a_busy_database_is_waited_for(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    index.update()
    (tree["memory"] / "new.md").write_text("# New\n\nnarwhal\n")
    other = sqlite3.connect(index.path, isolation_level=None, timeout=1)
    other.execute("BEGIN IMMEDIATE")
    done = threading.Event()
    result: list[Any] = []
    threading.Thread(target=lambda: (result.append(index.update()), done.set())).start()
    assert not done.wait(0.5)  # it waits for the other writer ...
    other.execute("COMMIT")
    other.close()
    assert done.wait(30) and result[0].added == 1  # ... and then goes through
    assert top(index, "narwhal") == "memory/new.md"


def test_readers_are_not_blocked_by_an_update(tree) -> None:  # type: ignore[no-untyped-def]
    index: MemoryIndex = tree["index"]
    index.update()
    writer = sqlite3.connect(index.path, isolation_level=None, timeout=1)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM chunks")
    reader = MemoryIndex(tree["home"].state_dir, tree["home"].groups_dir, "fam")
    assert top(reader, "piano lessons") == "memory/imports/old-assistant/MEMORY.md"
    writer.execute("ROLLBACK")
    writer.close()
    reader.close()


# memory_get


def test_memory_get_reads_lines_of_a_memory_file(tree) -> None:  # type: ignore[no-untyped-def]
    groups = tree["home"].groups_dir
    got = read_lines(groups, "fam", "memory/places/school.md", 6, 3)
    assert got == {
        "path": "memory/places/school.md",
        "missing": False,
        "from_line": 6,
        "to_line": 8,
        "total_lines": 8,
        "text": "# School\n\nEscola Primaria do Bairro. Pick-up at 15:30 on weekdays, 13:00 on "
        "Wednesdays. The parents' meeting is on the first Monday of each term.",
    }
    assert read_lines(groups, "fam", "places/school.md")["total_lines"] == 8
    assert read_lines(groups, "fam", "/workspace/agent/memory/places/school.md")["to_line"] == 8
    past = read_lines(groups, "fam", "places/school.md", 50, 5)
    assert past["text"] == "" and past["to_line"] == 49 and not past["missing"]
    missing = read_lines(groups, "fam", "memory/nothing/here.md")
    assert missing["missing"] is True and missing["text"] == ""


@pytest.mark.parametrize(
    "path",
    [
        "../learned-behaviors.md",
        "memory/../group.yaml",
        "/etc/passwd",
        "/workspace/agent/memory/../../x",
        "memory/a/../../b",
        "",
        "a\x00b",
    ],
)
def test_memory_get_stays_in_the_memory_tree(tree, path: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        read_lines(tree["home"].groups_dir, "fam", path)
    with pytest.raises(ValueError):
        memory_relative(path)


def test_memory_get_refuses_links_and_special_files(tree) -> None:  # type: ignore[no-untyped-def]
    memory: Path = tree["memory"]
    (memory / "out.md").symlink_to(tree["group"].path / "group.yaml")
    (memory / "dir").symlink_to(tree["group"].path)
    os.mkfifo(memory / "fifo.md")
    groups = tree["home"].groups_dir
    for path in ("out.md", "dir/group.yaml", "fifo.md"):
        with pytest.raises(UnsafePath):
            read_lines(groups, "fam", path)


# the context report


def test_the_context_report_has_the_hooks_numbers(tree) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.memory.reading import render_memory

    memory: Path = tree["memory"]
    (memory / "index.md").write_text("# Memory\n\n" + "a long line of the map\n" * 1000)
    group = tree["group"]
    group.learned_file.write_text("- Be brief.\n")
    report = {item.name: item for item in context_report(group.path.parent, "fam")}
    hook = render_memory(str(group.path))
    index_block = hook.split("### memory/index.md\n\n", 1)[1].split("\n\n### memory/system", 1)[0]
    definition_block = hook.split("### memory/system/definition.md\n\n", 1)[1].rstrip("\n")
    assert report["memory/index.md"].injected_chars == len(index_block)
    assert report["memory/index.md"].raw_chars == len((memory / "index.md").read_text())
    assert report["memory/index.md"].truncated
    definition = report["memory/system/definition.md"]
    assert definition.injected_chars == len(definition_block) and not definition.truncated
    assert definition.raw_chars == len((memory / "system/definition.md").read_text())
    learned = report["learned-behaviors.md"]
    assert (learned.raw_chars, learned.injected_chars, learned.truncated) == (12, 11, False)
    assert report["instructions.prepend.md"].injected_chars == 0
    (memory / "index.md").unlink()
    gone = {i.name: i for i in context_report(group.path.parent, "fam")}["memory/index.md"]
    assert gone.problem == "missing" and gone.raw_chars == 0


# the relay ops, the runner and the CLI


def test_search_and_get_through_the_relay(tree) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.daemon.core import Daemon
    from orchestrator.relay.errors import RelayViolation
    from orchestrator.relay.turn import TurnRelay
    from orchestrator.runtime.fake import FakeBackend
    from orchestrator.runtime.lifecycle import GroupRuntime
    from orchestrator.store.messages import open_queue

    home: Home = tree["home"]
    other = GroupStore(home).add(GroupConfig(name="work"))
    (other.memory_dir / "secret.md").write_text("# Secret\n\nswordfish\n")
    config = load_config(home)
    runtime = GroupRuntime(home, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    queue = open_queue(home)
    daemon = Daemon(home, config, runtime, queue, concurrency=1)
    try:
        message = daemon.submit("fam", "hi", chat="c", sender="alice", channel="cli")
        relay = TurnRelay(daemon.relay, message, tree["group"], time.monotonic() + 60)
        forged = {"group": "work", "folder": "work"}
        answer = relay.handle(
            {"req": 1, "op": "memory.search", "query": "swordfish", **forged}, 100
        )
        assert answer == {"ok": True, "req": 1, "results": []}  # its own group only
        answer = relay.handle({"req": 2, "op": "memory.search", "query": "piano"}, 100)
        assert answer["results"][0]["path"] == "memory/imports/old-assistant/MEMORY.md"
        got = relay.handle(
            {"req": 3, "op": "memory.get", "path": "memory/places/school.md", "lines": 1}, 100
        )
        assert got["ok"] and got["text"] == "---"
        escaped = relay.handle({"req": 4, "op": "memory.get", "path": "../group.yaml"}, 100)
        assert escaped == {
            "ok": False,
            "error": "../group.yaml: not a file inside the memory tree",
            "req": 4,
        }
        with pytest.raises(RelayViolation, match="max_results"):
            relay.handle({"req": 5, "op": "memory.search", "query": "x", "max_results": 0}, 100)
        # a new file: seen at the next turn's first search, or when the runner says so
        (tree["memory"] / "late.md").write_text("# Late\n\nokapi\n")
        assert (
            relay.handle({"req": 6, "op": "memory.search", "query": "okapi"}, 100)["results"] == []
        )
        said = relay.handle(
            {"req": 7, "op": "memory.search", "query": "okapi", "changed": True}, 100
        )
        assert said["results"][0]["path"] == "memory/late.md"
    finally:
        daemon.relay.close()
        daemon.relay.usage.close()
        queue.close()


def test_the_cli_searches_indexes_and_reports(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("group", "add", "Fam").exit_code == 0
    write_corpus(home / "groups/fam/memory")
    status = run("memory", "status", "fam")
    assert "never built" in status.output and "memory/index.md" in status.output
    result = run("memory", "search", "fam", "tax return due")
    assert result.exit_code == 0
    assert result.output.startswith("memory/projects/taxes-2026.md:1-8  score ")
    data = json.loads(run("memory", "search", "fam", "piano", "--json").output)
    assert data["results"][0]["path"] == "memory/imports/old-assistant/MEMORY.md"
    assert "no results for 'xyzzy'" in run("memory", "search", "fam", "xyzzy").output
    indexed = json.loads(run("memory", "index", "fam", "--force", "--json").output)
    assert indexed["added"] == ALL
    state = json.loads(run("memory", "status", "fam", "--json").output)
    assert state["index"]["stale"] is False and state["index"]["files"] == indexed["added"]
    assert [c["file"] for c in state["context"]] == [
        "instructions.prepend.md",
        "learned-behaviors.md",
        "memory/index.md",
        "memory/system/definition.md",
        "memory/daily (recent, creators' lines)",
    ]
    (home / "groups/fam/memory/new.md").write_text("# New\n")
    assert "stale: 1 file changed since" in run("memory", "status", "fam").output


def test_the_model_searches_through_its_tool(served) -> None:  # type: ignore[no-untyped-def]
    """The runner's memory_search tool, the relay and the host's index, end to end (the
    offline provider's `search memory for`)."""
    write_corpus(served["group"].memory_dir)
    [reply] = say(served, "search memory for the boiler service", "alice")
    assert reply.startswith("Found in memory:\n\nmemory/daily/2026-11-15.md:1-9 (score ")
    assert "**Boiler** **service** booked" in reply
    # a file the turn itself did not write shows at the next turn's first search
    (served["group"].memory_dir / "late.md").write_text("# Late\n\nThe okapi arrives.\n")
    [found] = say(served, "search memory for okapi", "alice")
    assert "memory/late.md:1-3" in found
    assert say(served, "search memory for xylophone", "alice") == (
        "Nothing in memory matches 'xylophone'.",
    )


# hybrid ranking


class WordBag:
    """A deterministic stand-in embedder: each word a fixed random direction."""

    name = "word-bag-1"

    def __init__(self, synonyms: dict[str, str] | None = None) -> None:
        self.synonyms = synonyms or {}
        self.calls = 0

    def embed(self, texts: list[str]):  # type: ignore[no-untyped-def]
        import hashlib

        import numpy

        self.calls += 1
        rows = []
        for text in texts:
            vector = numpy.zeros(1024, dtype=numpy.float32)
            for word in text.lower().split():
                word = self.synonyms.get(word, word)
                seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big")
                vector += numpy.random.default_rng(seed).standard_normal(1024).astype("float32")
            norm = numpy.linalg.norm(vector)
            rows.append(vector / norm if norm else vector)
        return numpy.array(rows)


def test_hybrid_blends_vectors_with_bm25(tree) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("numpy")
    home: Home = tree["home"]
    # "molars" shares no word with the dentist's file; the stand-in knows it means dentist
    bag = WordBag({"molars": "dentist."})
    index = MemoryIndex(home.state_dir, home.groups_dir, "fam", embedder=bag, vector_weight=0.5)
    index.update()
    stored = index.db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
    assert stored == index.db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] > 0
    plain = MemoryIndex(home.state_dir, home.groups_dir, "fam")
    assert plain.search("molars", 3) == []  # no keyword matches
    [hit, *_] = index.search("molars", 3)
    assert hit.path == "memory/people/dentist.md" and 0 < hit.score <= 1
    assert "**" not in hit.snippet and hit.snippet.startswith("--- type: person")
    # keyword hits keep their snippets and their place
    assert index.search("peanut allergy", 1)[0].path == "memory/preferences/food.md"
    assert "**peanuts**" in index.search("peanut allergy", 1)[0].snippet
    # only new chunks are embedded on update; another embedder embeds everything again
    calls = bag.calls
    (tree["memory"] / "new.md").write_text("# New\n\nnarwhal\n")
    index.update()
    assert bag.calls == calls + 1
    assert index.db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == stored + 1
    other = WordBag()
    other.name = "word-bag-2"
    again = MemoryIndex(home.state_dir, home.groups_dir, "fam", embedder=other)
    again.update()
    assert other.calls >= 1
    assert again.db.execute("SELECT value FROM meta WHERE key='embedder'").fetchone()[0] == (
        "word-bag-2"
    )
    for opened in (index, plain, again):
        opened.close()


def test_weight_zero_is_bm25_order(tree) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("numpy")
    home: Home = tree["home"]
    index = MemoryIndex(home.state_dir, home.groups_dir, "fam", embedder=WordBag(), vector_weight=0)
    index.update()
    plain = MemoryIndex(home.state_dir, home.groups_dir, "fam")
    for query, _ in QUERIES:
        assert [h.path for h in index.search(query, 3)][:1] == [
            h.path for h in plain.search(query, 3)
        ][:1]
    index.close()
    plain.close()


def test_the_offline_embedder_ranks_paraphrases_better(tree) -> None:  # type: ignore[no-untyped-def]
    """The measured claim (bench/search_quality.py): with wordllama blended in, the
    files asked for in other words rank higher, and keyword queries lose nothing."""
    pytest.importorskip("wordllama")
    from orchestrator.memory.embeddings import load_embedder
    from tests.searchcorpus import PARAPHRASES

    home: Home = tree["home"]
    embedder = load_embedder("wordllama", home.state_dir)
    assert (home.state_dir / "embedders/wordllama/tokenizers").is_dir()  # nothing downloaded

    def mrr(index: MemoryIndex, queries: list[tuple[str, str]]) -> float:
        total = 0.0
        for query, want in queries:
            paths = [h.path for h in index.search(query, 5)]
            total += 1 / (paths.index(want) + 1) if want in paths else 0.0
        return total / len(queries)

    plain = MemoryIndex(home.state_dir, home.groups_dir, "fam")
    plain.update()
    hybrid = MemoryIndex(home.state_dir, home.groups_dir, "fam", embedder=embedder)
    hybrid.update()
    assert hybrid.db.execute("SELECT length(v) FROM vectors LIMIT 1").fetchone()[0] == 256 * 4
    assert mrr(hybrid, PARAPHRASES) > mrr(plain, PARAPHRASES) + 0.1
    assert mrr(hybrid, QUERIES) == mrr(plain, QUERIES) == 1.0
    plain.close()
    hybrid.close()


def test_search_settings_in_orchestrator_yaml(home: Path) -> None:
    from orchestrator.errors import InvalidConfig

    h = Home(home)
    assert load_config(h).search_embedder is None
    (home / "orchestrator.yaml").write_text(
        "memory_search:\n  embedder: wordllama\n  vector_weight: 0.3\n"
    )
    config = load_config(h)
    assert (config.search_embedder, config.search_vector_weight) == ("wordllama", 0.3)
    (home / "orchestrator.yaml").write_text("memory_search:\n  vector_weight: 2\n")
    with pytest.raises(InvalidConfig) as raised:
        load_config(h)
    assert "memory_search.vector_weight" in raised.value.message
    assert "got 2; expected a number from 0 to 1" in raised.value.message
    (home / "orchestrator.yaml").write_text("memory_search:\n  embedder: openai\n")
    with pytest.raises(InvalidConfig, match="embedder"):
        load_config(h)
