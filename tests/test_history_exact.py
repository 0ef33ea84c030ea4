"""The memory history, exactly: the provenance of a turn and its summaries word for word,
the commit as git keeps it, the snapshot and its modes, the gap and its record, the
filters of the log, what resolve, show, diff and blame refuse, revert plans over several
changes, prune's baseline, the attribution outside turns and a quiet record's failure."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.memory import history as history_module
from orchestrator.memory.history import (
    BASELINE,
    FLUSH,
    GAP,
    HOST,
    LOCK,
    POINTER,
    SNAPSHOT,
    TURN,
    UNATTRIBUTED,
    Change,
    Gap,
    History,
    HistoryError,
    Provenance,
    open_history,
    outside_turn,
    record_quietly,
)
from orchestrator.runtime.base import ContainerInfo
from tests.histories import turn, write

FACT = "---\ntype: fact\n---\n"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def snapshot(history: History) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((history.path / SNAPSHOT).read_text())
    return data


def resnap(history: History, **changes: Any) -> None:
    """The snapshot on disk with ``changes`` (a value of None: the key removed)."""
    data = {**snapshot(history), **changes}
    (history.path / SNAPSHOT).write_text(
        json.dumps({k: v for k, v in data.items() if v is not None})
    )


def clock(monkeypatch: pytest.MonkeyPatch, now: float) -> None:
    """The history's clock (the gap's and the snapshot's times) stopped at ``now``."""
    monkeypatch.setattr(
        history_module,
        "time",
        SimpleNamespace(time=lambda: now, strftime=time.strftime, gmtime=time.gmtime),
    )


@pytest.fixture
def bare(home: Path) -> History:
    """Group fam's history, nothing recorded yet."""
    group = GroupStore(Home(home)).add(GroupConfig(name="fam"))
    return History(group.path.parent, group.folder)


# provenance, gaps and changes as data


def test_a_turns_provenance_is_taken_from_its_message_and_the_groups_config() -> None:
    message = SimpleNamespace(
        sender="bob", trust="member", id="m1", channel="cli", chat="k", session="s"
    )
    config = SimpleNamespace(provider="anthropic", model="claude")
    made = Provenance.of_turn(TURN, message, config, also=("m0",))
    assert (made.kind, made.sender, made.trust, made.message_id) == (TURN, "bob", "member", "m1")
    assert (made.channel, made.chat, made.session) == ("cli", "k", "s")
    assert (made.provider, made.model, made.also, made.note) == ("anthropic", "claude", ("m0",), "")
    assert Provenance.of_turn(TURN, message, config).also == ()


def test_the_summaries_word_for_word() -> None:
    assert turn("bob").summary() == "turn m by bob (member) via cli:c"
    assert turn("bob", trust="").summary() == "turn m by bob via cli:c"
    assert Provenance(FLUSH, session="s1", trust="guest", note="n").summary() == (
        "flush of session s1 (guest): n"
    )
    assert Provenance(FLUSH, session="s1", note="n").summary() == (
        "flush of session s1 (no trust): n"
    )
    assert Provenance(HOST, sender="operator", note="by hand").summary() == "host: by hand"
    assert Provenance(HOST, sender="operator").summary() == "host change by operator"
    assert Provenance(HOST).summary() == "host change"


def test_a_gap_and_a_change_as_data() -> None:
    gap = Gap(86400.0 + 3661.5, "OSError: full", 90000.0)
    assert gap.to_dict() == {"since": 90061.5, "reason": "OSError: full", "last": 90000.0}
    assert gap.describe() == "not recording since 1970-01-02 01:01:01 UTC: OSError: full"
    change = Change("abc", Provenance(HOST, time=5.0), ("a", "b"), ("b",))
    assert change.to_dict() == {
        "rev": "abc",
        "kind": HOST,
        "sender": "",
        "trust": "",
        "message_id": "",
        "channel": "",
        "chat": "",
        "session": "",
        "provider": "",
        "model": "",
        "note": "",
        "time": 5.0,
        "also": (),
        "paths": ["a", "b"],
        "hashed_only": ["b"],
    }
    assert Change("abc", Provenance(HOST), ()).hashed_only == ()


# the commit, the tree and the snapshot


def test_the_commit_as_git_keeps_it(history: History) -> None:
    write(history, "memory/facts/a.md", FACT + "one\n")
    made = Provenance(TURN, sender="<eve>", trust="guest", message_id="m9", time=1234.75)
    change = history.record(made)
    assert change is not None and change.rev == history.log()[0].rev
    repo = history._repo()
    commit = repo[change.rev.encode()]
    assert commit.author == b"eve <turn@orchestrator>"
    assert commit.committer == b"orchestrator <orchestrator@localhost>"
    assert (commit.author_time, commit.commit_time) == (1234, 1234)
    assert (commit.author_timezone, commit.commit_timezone) == (0, 0)
    assert len(commit.parents) == 1
    summary, blank, trailer, end = commit.message.decode().split("\n")
    assert (summary, blank, end) == ("turn m9 by <eve> (guest) via :", "", "")
    assert trailer == "Orchestrator-Provenance: " + json.dumps(
        {
            "also": [],
            "channel": "",
            "chat": "",
            "hashed_only": [],
            "kind": "turn",
            "message_id": "m9",
            "model": "",
            "note": "",
            "provider": "",
            "sender": "<eve>",
            "session": "",
            "time": 1234.75,
            "trust": "guest",
        }
    )
    history._open_repo = None
    # no sender: the kind names the author
    write(history, "memory/facts/b.md", FACT + "two\n")
    history.record(Provenance(HOST, time=1.0))
    repo = history._repo()
    assert repo[repo.refs[b"refs/heads/main"]].author == b"host <host@orchestrator>"
    history._open_repo = None
    listed = subprocess.run(
        ["git", "--git-dir", str(history.path), "ls-tree", "-r", "-t", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    modes = {line.split("\t")[1]: line.split(" ")[0] for line in listed.splitlines()}
    assert modes["memory"] == modes["memory/facts"] == "040000"
    assert modes["memory/facts/a.md"] == modes["learned-behaviors.md"] == "100644"
    head = subprocess.run(
        ["git", "--git-dir", str(history.path), "symbolic-ref", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert head == "refs/heads/main\n"


def test_the_first_record_makes_a_private_repository_and_snapshot(bare: History) -> None:
    assert not bare.path.exists()
    change = bare.record_outside(None)
    assert change is not None and change.provenance.kind == BASELINE
    assert change.provenance.note == "the memory as first recorded"
    assert change.paths == (
        "learned-behaviors.md",
        "memory/index.md",
        "memory/system/definition.md",
        "memory/system/index.md",
    )
    assert (mode(bare.path), mode(bare.path / SNAPSHOT), mode(bare.path / LOCK)) == (
        0o700,
        0o600,
        0o600,
    )
    saved = snapshot(bare)
    assert sorted(saved) == ["container_running", "files", "head", "time"]
    assert (saved["head"], saved["container_running"]) == (change.rev, False)
    root = bare.groups_dir / "fam"
    for path, (size, mtime_ns, ctime_ns, blob) in saved["files"].items():
        st = os.stat(root / path)
        assert (size, mtime_ns, ctime_ns) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        data = (root / path).read_bytes()
        assert blob == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert bare._open_repo is None  # closed when the call ended


def test_a_file_touched_but_not_changed_is_no_change_and_the_snapshot_follows(
    history: History,
) -> None:
    path = history.groups_dir / "fam/memory/index.md"
    before = snapshot(history)
    os.utime(path, ns=(1, 1))
    assert history.changed() is True
    assert history.record(turn("bob")) is None
    after = snapshot(history)
    assert after["head"] == before["head"]
    assert after["files"]["memory/index.md"][1] == 1
    assert after["files"]["memory/index.md"][3] == before["files"]["memory/index.md"][3]
    assert history.changed() is False
    assert len(history.log()) == 1


def test_the_scan_sees_regular_files_only(history: History) -> None:
    root = history.groups_dir / "fam"
    (root / "memory/link.md").symlink_to(root / "memory/index.md")
    os.mkfifo(root / "memory/pipe")
    (root / "memory/empty").mkdir()
    assert sorted(history.scan()) == [
        "learned-behaviors.md",
        "memory/index.md",
        "memory/system/definition.md",
        "memory/system/index.md",
    ]
    st = os.stat(root / "memory/system/index.md")
    assert history.scan()["memory/system/index.md"] == (
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )
    (root / "learned-behaviors.md").unlink()
    (root / "learned-behaviors.md").mkdir()
    assert "learned-behaviors.md" not in history.scan()


def test_a_group_without_memory_scans_its_learned_behaviors_only(bare: History) -> None:
    root = bare.groups_dir / "fam"
    subprocess.run(["rm", "-rf", str(root / "memory")], check=True)
    assert list(bare.scan()) == ["learned-behaviors.md"]


def test_a_file_of_the_limit_is_kept_and_one_over_it_by_hash(history: History) -> None:
    limit = 1 + max(size for size, *_ in snapshot(history)["files"].values())
    small = History(history.groups_dir, history.folder, max_file_bytes=limit)
    write(history, "memory/at.md", "x" * limit)
    write(history, "memory/over.md", "y" * (limit + 5))
    change = small.record(turn("bob"))
    assert change is not None and change.hashed_only == ("memory/over.md",)
    assert change.paths == ("memory/at.md", "memory/over.md")
    assert small.show("HEAD", "memory/at.md") == b"x" * limit
    digest = hashlib.sha256(b"y" * (limit + 5)).hexdigest()
    assert small.show("HEAD", "memory/over.md") == (
        POINTER + f"sha256 {digest}; {limit + 5} bytes\n".encode()
    )
    # memory now, as diff reads it, holds the same: no difference
    assert small.diff("HEAD", "now") == ""
    write(history, "memory/over.md", "z" * (limit + 5))
    write(history, "memory/at.md", "w" * limit)
    changed = hashlib.sha256(b"z" * (limit + 5)).hexdigest()
    assert small.diff("HEAD", "now") == (
        "--- a/memory/at.md\n+++ b/memory/at.md\n@@ -1 +1 @@\n"
        f"-{'x' * limit}\n+{'w' * limit}\n"
        "--- a/memory/over.md\n+++ b/memory/over.md\n@@ -1,2 +1,2 @@\n"
        " orchestrator-history: not recorded, over the size limit\n"
        f"-sha256 {digest}; {limit + 5} bytes\n+sha256 {changed}; {limit + 5} bytes\n"
    )


def test_an_unchanged_file_keeps_its_blob_and_a_vanished_one_is_left_out(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(history, "memory/a.md", "a\n")
    write(history, "memory/b.md", "b\n")
    history.record(turn("bob"))
    blobs = {p: f[3] for p, f in snapshot(history)["files"].items()}
    write(history, "memory/a.md", "a2\n")
    write(history, "memory/b.md", "b2\n")
    scanned = history.scan()
    scanned = {"memory/a.md": scanned.pop("memory/a.md"), **scanned}  # read first
    (history.groups_dir / "fam/memory/a.md").unlink()  # after the scan, before the read
    monkeypatch.setattr(History, "scan", lambda self: scanned)
    change = history.record(turn("bob"))
    monkeypatch.undo()
    assert change is not None and change.paths == ("memory/a.md", "memory/b.md")
    files = snapshot(history)["files"]
    assert "memory/a.md" not in files
    assert files["memory/index.md"][3] == blobs["memory/index.md"]
    assert files["memory/b.md"][3] != blobs["memory/b.md"]
    assert history.show("HEAD") == [
        "learned-behaviors.md",
        "memory/b.md",
        "memory/index.md",
        "memory/system/definition.md",
        "memory/system/index.md",
    ]


# the container's state in the snapshot, and changes found outside a turn


def test_a_record_notes_whether_the_container_runs(history: History) -> None:
    assert snapshot(history)["container_running"] is False  # the baseline's: none
    assert history.record(turn("bob"), container_running=True) is None
    assert snapshot(history)["container_running"] is True
    write(history, "memory/a.md", "a\n")
    history.record(turn("bob"), container_running=False)
    assert snapshot(history)["container_running"] is False
    write(history, "memory/a.md", "b\n")
    history.record(turn("bob"))
    assert snapshot(history)["container_running"] is True


def test_the_snapshot_stays_private_when_only_the_container_s_state_is_noted(
    history: History,
) -> None:
    (history.path / SNAPSHOT).chmod(0o644)
    assert history.record(turn("bob"), container_running=True) is None  # only noted
    assert snapshot(history)["container_running"] is True
    assert mode(history.path / SNAPSHOT) == 0o600


def test_deep_folders_and_an_empty_memory_are_trees_git_finds_sound(history: History) -> None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(history.path), *args],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    history._open_repo = None
    write(history, "memory/a/b/c/d.md", FACT + "deep\n")
    assert history.record(turn("bob")) is not None
    listed = git("ls-tree", "-r", "--name-only", "HEAD").split()
    assert "memory/a/b/c/d.md" in listed and "memory/index.md" in listed
    # modes exactly as git writes them: fsck --strict flags any other
    checked = subprocess.run(
        ["git", "--git-dir", str(history.path), "fsck", "--strict", "--no-dangling"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")
    root = history.groups_dir / history.folder
    for path in sorted(root.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_file() and path.suffix == ".md":
            path.unlink()
    change = history.record(turn("bob"))
    assert change is not None and "memory/a/b/c/d.md" in change.paths
    assert git("ls-tree", "-r", "HEAD") == ""


def test_a_record_outside_notes_the_container_it_was_given(history: History) -> None:
    running = ContainerInfo("p.fam", "id", "running", {}, started_at=1.0)
    stopped = ContainerInfo("p.fam", "id", "exited", {}, started_at=1.0)
    assert history.record_outside(running) is None  # nothing changed: nothing noted
    write(history, "memory/a.md", "a\n")
    history.record_outside(running)
    assert snapshot(history)["container_running"] is True
    write(history, "memory/a.md", "b\n")
    history.record_outside(stopped)
    assert snapshot(history)["container_running"] is False
    write(history, "memory/a.md", "c\n")
    history.record_outside("unknown")
    assert snapshot(history)["container_running"] is False


def test_who_made_a_change_found_outside_a_turn(history: History) -> None:
    def container(state: str, started_at: float | None) -> ContainerInfo:
        return ContainerInfo("p.fam", "id", state, {}, started_at=started_at)

    resnap(history, time=100.0, container_running=False)

    def host(found: Provenance) -> bool:
        return (found.kind, found.sender, found.note) == (
            HOST,
            "operator",
            "made on the host while the container was stopped",
        )

    assert host(outside_turn(history, None))
    assert host(outside_turn(history, container("exited", 99.0)))
    assert host(outside_turn(history, container("exited", None)))
    for now in (
        container("exited", 100.0),  # started since the snapshot
        container("running", 50.0),  # runs now
    ):
        found = outside_turn(history, now)
        assert (found.kind, found.sender, found.note) == (
            UNATTRIBUTED,
            "",
            "made outside a turn while the container could run",
        )
    unknown = outside_turn(history, "unknown")
    assert (unknown.kind, unknown.note) == (
        UNATTRIBUTED,
        "found outside a turn; the engine was not reachable",
    )
    resnap(history, container_running=True)
    assert outside_turn(history, None).kind == UNATTRIBUTED
    resnap(history, container_running=None)
    assert outside_turn(history, None).kind == UNATTRIBUTED  # not known: it may have run
    resnap(history, container_running=False, time=None)
    assert outside_turn(history, container("exited", 0.0)).kind == UNATTRIBUTED
    assert host(outside_turn(history, None))
    resnap(history, time=0.5)  # a start time not known is no start since
    assert host(outside_turn(history, container("exited", None)))


def test_outside_a_turn_with_no_snapshot_is_the_baseline(bare: History) -> None:
    found = outside_turn(bare, None)
    assert (found.kind, found.note) == (BASELINE, "the memory as first recorded")
    assert not bare.path.exists()


# gaps


def test_a_gap_keeps_its_start_and_its_last_failure(
    bare: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock(monkeypatch, 1000.0)
    bare._note_gap(OSError(5, "x" * 600))
    assert mode(bare.path) == 0o700 and mode(bare.path / GAP) == 0o600
    first = bare.gap()
    assert first is not None
    assert first.reason == ("OSError: [Errno 5] " + "x" * 600)[:500]
    assert (first.since, first.last, len(first.reason)) == (1000.0, 1000.0, 500)
    clock(monkeypatch, 2000.0)
    bare._note_gap(ValueError("again"))
    assert bare.gap() == Gap(1000.0, "ValueError: again", 2000.0)


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"since": 1, "reason": "r"}', '{"since": null, "reason": "r", "last": 1}'],
)
def test_a_gap_file_that_cannot_be_read_is_no_gap(bare: History, text: str) -> None:
    bare.path.mkdir()
    (bare.path / GAP).write_text(text)
    assert bare.gap() is None


def test_a_gap_file_is_read_with_its_types(bare: History) -> None:
    bare.path.mkdir()
    (bare.path / GAP).write_text('{"since": "5", "reason": 7, "last": 6}')
    assert bare.gap() == Gap(5.0, "7", 6.0)


def test_a_history_folder_that_cannot_be_made_notes_no_gap(bare: History) -> None:
    bare.path.write_text("a file where the folder goes")
    bare._note_gap(OSError(5, "broken"))  # no raise: the log says so
    assert bare.gap() is None


def test_a_record_that_finds_nothing_ends_the_gap(history: History) -> None:
    history._note_gap(OSError(28, "full"))
    assert history.record(turn("bob")) is None
    assert history.gap() is None
    history._note_gap(OSError(28, "full"))
    os.utime(history.groups_dir / "fam/memory/index.md", ns=(1, 1))  # same content
    assert history.record(turn("bob")) is None
    assert history.gap() is None


def test_after_a_gap_a_change_is_unattributed_but_a_baseline_stays_one(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock(monkeypatch, 0.0)
    history._note_gap(OSError(28, "full"))
    write(history, "memory/a.md", "a\n")
    change = history.record(
        Provenance(TURN, sender="bob", message_id="m1", channel="cli", chat="c", time=7.0)
    )
    assert change is not None
    assert (change.provenance.kind, change.provenance.sender, change.provenance.time) == (
        UNATTRIBUTED,
        "",
        7.0,
    )
    assert change.provenance.note == (
        "found after a gap in the history (not recording since 1970-01-01 00:00:00 UTC: "
        "OSError: [Errno 28] full); it would have been recorded as turn m1 by bob via cli:c"
    )
    history._note_gap(OSError(28, "full"))
    write(history, "memory/a.md", "b\n")
    kept = history.record(Provenance(BASELINE, note="kept"))
    assert kept is not None and kept.provenance == history.log()[0].provenance
    assert (kept.provenance.kind, kept.provenance.note) == (BASELINE, "kept")
    history._note_gap(OSError(28, "full"))
    write(history, "memory/a.md", "c\n")
    same = Provenance(UNATTRIBUTED, note="as it was")
    assert history.record(same).provenance.note == "as it was"  # type: ignore[union-attr]


# reading


def test_the_log_filters_by_path_sender_and_time(history: History) -> None:
    for n, (sender, path) in enumerate(
        [("ann", "memory/facts/a.md"), ("bob", "memory/factsheet.md"), ("ann", "memory/b.md")]
    ):
        write(history, path, f"{n}\n")
        history.record(Provenance(TURN, sender=sender, time=10.0 + n))
    senders = [(c.provenance.sender, c.paths) for c in history.log()][:3]
    assert senders == [
        ("ann", ("memory/b.md",)),
        ("bob", ("memory/factsheet.md",)),
        ("ann", ("memory/facts/a.md",)),
    ]
    assert [c.paths for c in history.log("memory/facts")] == [("memory/facts/a.md",)]
    assert [c.paths for c in history.log("memory/facts/")] == [("memory/facts/a.md",)]
    assert [c.paths for c in history.log("memory/facts/a.md")] == [("memory/facts/a.md",)]
    assert [c.provenance.time for c in history.log(sender="ann")] == [12.0, 10.0]
    assert [c.provenance.time for c in history.log(since=11.0)] == [12.0, 11.0]
    assert history.log(sender="ann", since=11.0)[0].provenance.time == 12.0
    assert len(history.log(sender="ann", since=11.0)) == 1
    assert history.log(since=13.0) == []
    assert [c.provenance.kind for c in history.log(path="learned-behaviors.md")] == [BASELINE]
    assert history._open_repo is None


def test_the_log_stops_at_the_first_change_before_since(history: History) -> None:
    write(history, "memory/a.md", "old\n")
    history.record(Provenance(TURN, sender="x", time=5.0))
    write(history, "memory/a.md", "new\n")
    history.record(Provenance(TURN, sender="y", time=50.0))
    write(history, "memory/a.md", "newer\n")
    history.record(Provenance(TURN, sender="z", time=20.0))  # a clock that went back
    assert [c.provenance.sender for c in history.log(since=10.0)] == ["z", "y"]
    assert [c.provenance.sender for c in history.log(since=30.0)] == []


def test_reading_a_group_without_history_makes_none(bare: History) -> None:
    assert bare.log() == []
    with pytest.raises(HistoryError) as none:
        bare.resolve("HEAD")
    assert none.value.message == "group 'fam' has no history yet"
    with bare.held():
        pass
    assert not bare.path.exists()


def test_resolve_names_what_it_cannot(history: History, monkeypatch: pytest.MonkeyPatch) -> None:
    head = history.log()[0].rev
    assert history.resolve("HEAD") == head.encode() == history.resolve("head")
    assert history.resolve(head[:4].upper()) == head.encode()
    with pytest.raises(HistoryError) as short:
        history.resolve(head[:3])
    assert short.value.message == f"no change {head[:3]!r} in the history of 'fam'"
    assert short.value.hint == "see the changes with: orchestrator memory log fam"
    twins = [b"abcd" + b"1" * 36, b"abcd" + b"2" * 36, b"abce" + b"3" * 36]
    monkeypatch.setattr(History, "_revs", lambda self, repo: iter(twins))
    with pytest.raises(HistoryError) as many:
        history.resolve("ABCD")
    assert many.value.message == "'ABCD' names 2 changes; give more of it"
    assert history.resolve("abcd1") == twins[0]
    assert history.resolve("abce") == twins[2]


def test_show_and_its_refusal(history: History) -> None:
    with pytest.raises(HistoryError) as missing:
        history.show("HEAD", "memory/none.md")
    assert missing.value.message == "memory/none.md is not in change HEAD"


def test_diff_between_changes_and_with_now(history: History) -> None:
    write(history, "memory/a.md", "one\n")
    first = history.record(turn("bob"))
    write(history, "memory/a.md", "two\n")
    index = (history.groups_dir / "fam/memory/index.md").read_text().splitlines()
    (history.groups_dir / "fam/memory/index.md").unlink()
    second = history.record(turn("bob"))
    assert first is not None and second is not None
    assert history.diff() == history.diff(first.rev, second.rev) == history.diff(new="HEAD")
    assert history.diff(first.rev).startswith("--- a/memory/a.md\n+++ b/memory/a.md\n")
    assert history.diff(first.rev) == (
        "--- a/memory/a.md\n+++ b/memory/a.md\n@@ -1 +1 @@\n-one\n+two\n"
        f"--- a/memory/index.md\n+++ /dev/null\n@@ -1,{len(index)} +0,0 @@\n"
        + "".join(f"-{line}\n" for line in index)
    )
    baseline = history.log()[-1].rev
    assert history.diff(new=first.rev).startswith("--- /dev/null\n+++ b/memory/a.md\n")
    # the empty learned behaviors have no lines to show
    assert history.diff(new=baseline).startswith("--- /dev/null\n+++ b/memory/index.md\n")
    assert history.diff("HEAD", "now") == ""
    write(history, "memory/c.md", "three\n")
    assert history.diff("HEAD", "now") == (
        "--- /dev/null\n+++ b/memory/c.md\n@@ -0,0 +1 @@\n+three\n"
    )


def test_blame_and_its_refusals(history: History) -> None:
    with pytest.raises(HistoryError) as none:
        (history.groups_dir / "other").mkdir()
        History(history.groups_dir, "other").blame("memory/a.md")
    assert none.value.message == "group 'other' has no history yet"
    write(history, "memory/a.md", "one\ntwo\n")
    history.record(turn("ann"))
    write(history, "memory/a.md", "zero\none\ntwo\nthree\n")
    history.record(turn("bob"))
    assert [(t, c.provenance.sender) for t, c in history.blame("memory/a.md")] == [
        ("zero", "bob"),
        ("one", "ann"),
        ("two", "ann"),
        ("three", "bob"),
    ]
    write(history, "memory/empty.md", "")
    history.record(turn("cy"))
    assert history.blame("memory/empty.md") == []
    with pytest.raises(HistoryError) as gone:
        history.blame("memory/none.md")
    assert gone.value.message == "memory/none.md is not in the last recorded change of 'fam'"


# reverting


def test_a_revert_plan_over_several_changes_and_a_path(history: History) -> None:
    write(history, "memory/a.md", "a1\n")
    write(history, "memory/d/b.md", "b1\n")
    first = history.record(turn("ann"))
    write(history, "memory/a.md", "a2\n")
    write(history, "memory/d/b.md", "b2\n")
    second = history.record(turn("ann"))
    assert first is not None and second is not None
    content, conflicts = history.revert_plan([second.rev, first.rev])
    assert (content, conflicts) == ({"memory/a.md": None, "memory/d/b.md": None}, [])
    content, conflicts = history.revert_plan([second.rev])
    assert (content, conflicts) == ({"memory/a.md": b"a1\n", "memory/d/b.md": b"b1\n"}, [])
    assert history.revert_plan([second.rev], "memory/d") == ({"memory/d/b.md": b"b1\n"}, [])
    assert history.revert_plan([second.rev], "memory/d/") == ({"memory/d/b.md": b"b1\n"}, [])
    assert history.revert_plan([second.rev], "memory/a.md") == ({"memory/a.md": b"a1\n"}, [])
    assert history.revert_plan([second.rev], "memory/a") == ({}, [])
    # the older change alone conflicts with the newer one
    assert history.revert_plan([first.rev]) == (
        {"memory/a.md": None, "memory/d/b.md": None},
        ["memory/a.md", "memory/d/b.md"],
    )
    baseline = history.log()[-1].rev
    assert history.revert_plan([baseline]) == (
        {
            "learned-behaviors.md": None,
            "memory/index.md": None,
            "memory/system/definition.md": None,
            "memory/system/index.md": None,
        },
        [],
    )


def test_apply_records_what_was_pending_then_writes(history: History) -> None:
    write(history, "memory/a.md", "by hand\n")  # not recorded yet
    change = history.apply(
        {
            "memory/new/deep/b.md": b"b\n",
            "memory/gone.md": None,
            "memory/big.md": POINTER + b"sha256 00; 9 bytes\n",
        },
        Provenance("revert", sender="operator", note="n"),
    )
    root = history.groups_dir / "fam"
    assert (root / "memory/new/deep/b.md").read_bytes() == b"b\n"
    assert not (root / "memory/big.md").exists()
    assert change is not None and change.paths == ("memory/new/deep/b.md",)
    pending = history.log()[1]
    assert (pending.provenance.kind, pending.provenance.note, pending.paths) == (
        UNATTRIBUTED,
        "found before a revert",
        ("memory/a.md",),
    )
    assert history.apply({"memory/a.md": None}, Provenance("revert")).paths == ("memory/a.md",)  # type: ignore[union-attr]
    assert not (root / "memory/a.md").exists()
    assert history.apply({}, Provenance("revert")) is None


# pruning


def test_prune_names_what_it_folded(history: History) -> None:
    for n in range(3):
        write(history, "memory/a.md", f"{n}\n")
        history.record(Provenance(TURN, sender=f"s{n}", time=1000.0 * (n + 1)))
    write(history, "memory/a.md", "new\n")
    history.record(Provenance(TURN, sender="new", time=86400.0 * 3))
    folded, freed = history.prune(86400.0 * 2 + 60)
    assert folded == 4 and freed > 0  # the three old changes and the baseline
    changes = history.log()
    assert [c.provenance.sender for c in changes] == ["new", ""]
    root = changes[1].provenance
    assert (root.kind, root.time) == (BASELINE, 3000.0)
    assert root.note == "4 changes before 1970-01-03 00:01 UTC pruned"
    assert history.log()[1].paths == (
        "learned-behaviors.md",
        "memory/a.md",
        "memory/index.md",
        "memory/system/definition.md",
        "memory/system/index.md",
    )
    assert snapshot(history)["head"] == changes[0].rev
    assert history.prune(2000.0) == (0, 0)  # nothing before
    assert history.prune(4000.0) == (0, 0)  # one change before: nothing to fold


def test_prune_without_history_does_nothing(bare: History) -> None:
    assert bare.prune(time.time()) == (0, 0)


# a quiet record, and opening


def test_a_quiet_record_logs_its_failure(
    history: History, caplog: pytest.LogCaptureFixture
) -> None:
    write(history, "memory/a.md", "a\n")
    made = record_quietly(history.groups_dir, "fam", turn("bob"), max_file_bytes=1)
    assert made is not None and made.hashed_only == ("memory/a.md",)
    assert record_quietly(history.groups_dir, "fam", turn("bob")) is None  # nothing new
    (history.path / SNAPSHOT).write_text("{broken")
    with caplog.at_level(logging.WARNING, logger="orchestrator.history"):
        assert record_quietly(history.groups_dir, "fam", Provenance(HOST)) is None
    [logged] = caplog.records
    assert logged.name == "orchestrator.history"
    try:
        json.loads("{broken")
    except ValueError as exc:
        why = str(exc)
    assert logged.getMessage() == f"memory history of fam not recorded (host): {why}"


def test_open_history_is_the_groups(home: Path) -> None:
    opened = open_history(home / "groups", "fam")
    assert (opened.groups_dir, opened.folder, opened.max_file_bytes) == (
        home / "groups",
        "fam",
        4 * 1024 * 1024,
    )
    assert opened.path == home / "groups/fam/.history"


# what another tool wrote, and text that is not UTF-8


def test_a_commit_without_provenance_is_unattributed(history: History) -> None:
    write(history, "memory/a.md", "a\n")
    history.record(turn("bob"))

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(history.path), *args],
            input="",
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x",
                 "GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x"},
        ).stdout.strip()  # fmt: skip

    tree = git("rev-parse", "HEAD^{tree}")
    plain = git("commit-tree", tree, "-p", "HEAD", "-m", "made by git\n\nwith a body")
    empty = git("commit-tree", tree, "-p", plain)  # the message read from no input
    git("update-ref", "refs/heads/main", empty)
    changes = history.log()
    assert [(c.provenance.kind, c.provenance.note) for c in changes[:3]] == [
        (UNATTRIBUTED, ""),
        (UNATTRIBUTED, "made by git"),
        (TURN, ""),
    ]
    assert changes[0].paths == changes[1].paths == () and changes[0].hashed_only == ()


def test_text_that_is_not_utf8_is_shown_with_replacements(history: History) -> None:
    target = history.groups_dir / "fam/memory/raw.md"
    target.write_bytes(b"caf\xe9\n")
    history.record(turn("bob"))
    target.write_bytes(b"caf\xc3\xa9\n")
    history.record(turn("ann"))
    assert history.diff().endswith("-caf\ufffd\n+caf\u00e9\n")
    assert [(t, c.provenance.sender) for t, c in history.blame("memory/raw.md")] == [
        ("caf\u00e9", "ann")
    ]


def test_records_inside_a_hold_do_not_wait_for_it(history: History) -> None:
    with history.hold(), history.hold():
        write(history, "memory/a.md", "a\n")
        assert history.record(turn("bob")) is not None
        assert [c.provenance.sender for c in history.log()][:1] == ["bob"]
        assert history._flock_depth == 2
    assert history._flock_depth == 0
    with history.held():
        assert history._flock_depth == 1
    assert history._open_repo is None


# the edges: a file gone between the listing and the read, the snapshot's cache, what
# older or foreign commits hold


def test_a_file_gone_between_the_listing_and_its_status_is_left_out(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.confined import ConfinedDir

    write(history, "memory/a.md", "a\n")
    write(history, "memory/b.md", "b\n")
    listed = ConfinedDir.walk
    gone: list[str] = []

    def walk(self: ConfinedDir, **options: Any) -> Any:
        for rel, folder, entries in listed(self, **options):
            if rel == "" and not gone:
                first = next(e for e in entries if e.is_file(follow_symlinks=False))
                os.unlink(history.groups_dir / "fam/memory" / first.name)
                gone.append(f"memory/{first.name}")
            yield rel, folder, entries

    monkeypatch.setattr(ConfinedDir, "walk", walk)
    scanned = history.scan()
    monkeypatch.undo()
    expected = {"memory/a.md", "memory/b.md", "memory/index.md"} - set(gone)
    assert {p for p in scanned if p.count("/") == 1} == expected


def test_a_file_gone_before_it_is_read_is_left_out_of_memory_now(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(history, "memory/a.md", "a\n")
    history.record(turn("bob"))
    scanned = {"memory/vanished.md": (1, 1, 1), **history.scan()}
    monkeypatch.setattr(History, "scan", lambda self: scanned)
    assert history.diff("HEAD", "now") == ""


def test_the_check_compares_what_it_is_given(history: History) -> None:
    assert history.changed({}) is True
    assert history.changed(history.scan()) is False
    assert history.changed({**history.scan(), "memory/new.md": (1, 1, 1)}) is True
    resnap(history, files=None)  # a snapshot that names no files
    assert history.changed() is True


def test_a_gap_already_gone_ends_quietly(bare: History) -> None:
    bare.path.mkdir()
    bare._end_gap(Gap(1.0, "r", 1.0))
    assert bare.gap() is None


def test_a_revert_or_prune_by_a_fresh_history_notes_the_container_may_run(
    history: History,
) -> None:
    assert snapshot(history)["container_running"] is False
    fresh = History(history.groups_dir, "fam")
    write(history, "memory/a.md", "a\n")
    fresh.apply({"memory/a.md": b"b\n"}, Provenance("revert"))
    assert snapshot(history)["container_running"] is True
    resnap(history, container_running=False)
    History(history.groups_dir, "fam").prune(time.time() + 60)
    assert snapshot(history)["container_running"] is True


def test_the_snapshot_is_read_again_after_each_write(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even when the written file has the size and the time of the one read before."""
    written = history_module.write_atomic

    def same_time(path: Path, data: Any, mode: int = 0o644) -> None:
        written(path, data, mode=mode)
        os.utime(path, ns=(1, 1))

    monkeypatch.setattr(history_module, "write_atomic", same_time)
    clock(monkeypatch, 5.0)
    head = history.log()[0].rev.encode()
    history._save_snapshot(head, {"memory/x.md": [1, 2, 3, "a"]})
    assert history._files() == {"memory/x.md": [1, 2, 3, "a"]}
    history._save_snapshot(head, {"memory/y.md": [1, 2, 3, "a"]})
    assert history._files() == {"memory/y.md": [1, 2, 3, "a"]}


def test_prune_frees_what_the_folded_changes_held(history: History) -> None:
    def disk() -> int:
        return sum(
            os.lstat(os.path.join(folder, name)).st_blocks * 512
            for folder, _dirs, names in os.walk(history.path)
            for name in names
        )

    for n in range(3):
        # content that does not compress: its objects take more blocks than a folder
        noise = b"".join(hashlib.sha256(bytes([n, i % 256, i // 256])).digest() for i in range(700))
        (history.groups_dir / "fam/memory/a.bin").write_bytes(noise)
        history.record(Provenance(TURN, sender=f"s{n}", time=100.0 + n))
    before = disk()
    folded, freed = history.prune(1000.0)
    assert (folded, freed) == (4, before - disk())


def test_a_read_that_finds_no_history_leaves_nothing_open_to_others(bare: History) -> None:
    with pytest.raises(HistoryError):
        bare.show("HEAD")
    assert mode(bare.path) == 0o700


def test_what_older_and_foreign_commits_hold_is_read(history: History) -> None:
    made = Provenance(TURN, sender="bob", also=("m0", "m1"), time=3.5)
    write(history, "memory/a.md", "a\n")
    history.record(made)
    assert history.log()[0].provenance == made

    def commit(message: bytes) -> None:
        from dulwich.repo import Repo

        repo = Repo(str(history.path))
        try:
            head = repo[repo.refs[b"refs/heads/main"]]
            made = head.copy()
            made.parents, made.message = [head.id], message
            repo.object_store.add_object(made)
            repo.refs[b"refs/heads/main"] = made.id
        finally:
            repo.close()

    commit(b'older\n\nOrchestrator-Provenance: {"kind": "host", "time": 2.0}\n')
    older = history.log()[0]
    assert (older.provenance, older.hashed_only) == (Provenance(HOST, time=2.0), ())
    commit(b"caf\xe9 by hand\n")
    assert history.log()[0].provenance.note == "caf\ufffd by hand"
