"""Memory history: every change recorded with who made it, the cheap check, blame,
revert (by change and by sender), conflicts, attribution outside turns, the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import load_config
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.memory.history import (
    BASELINE,
    HOST,
    POINTER,
    TURN,
    UNATTRIBUTED,
    History,
    HistoryError,
    Provenance,
)
from orchestrator.runtime.base import ContainerInfo
from tests.histories import turn, write
from tests.served import say


def test_a_turn_that_writes_is_one_change_and_one_that_does_not_is_none(served) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = served["daemon"]
    say(served, "hello", "bob", chat="k")  # the first turn: the baseline, then nothing
    history = daemon.history("fam")
    assert [c.provenance.kind for c in history.log()] == [BASELINE]
    say(served, "remember that Ada studies in Lisbon", "bob", chat="k")
    changes = history.log()
    assert [c.provenance.kind for c in changes] == [TURN, BASELINE]
    made = changes[0]
    message = daemon.queue.chat_messages("fam", "k")[-1]
    assert (made.provenance.sender, made.provenance.trust, made.provenance.message_id) == (
        "bob",
        "member",
        message.id,
    )
    assert (made.provenance.channel, made.provenance.chat, made.provenance.session) == (
        "cli",
        "k",
        "cli.chat-k",
    )
    assert (made.provenance.provider, made.provenance.model) == ("offline", "offline-rules")
    assert made.paths == (
        "memory/facts/ada-studies-in-lisbon.md",
        "memory/facts/index.md",
        "memory/index.md",
    )
    say(served, "what do you know about Ada?", "bob", chat="k")  # reads only
    assert len(history.log()) == 2


def test_the_check_reads_nothing_when_nothing_changed(history: History, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.confined import ConfinedDir

    def no_reads(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("a file was read")

    monkeypatch.setattr(ConfinedDir, "read_bytes", no_reads)
    assert history.changed() is False
    assert history.record(turn("bob")) is None


def test_a_hand_edit_is_the_hosts_when_the_container_was_stopped(history: History) -> None:
    history.record(turn("bob"), container_running=False)  # the snapshot saw it stopped
    write(history, "memory/notes.md", "---\ntype: note\n---\nby hand\n")
    [change] = [history.record_outside(None)]
    assert change is not None
    assert (change.provenance.kind, change.provenance.sender) == (HOST, "operator")
    # a container that ran since (or runs now) could have written it: unattributed
    write(history, "memory/notes.md", "---\ntype: note\n---\nby whom?\n")
    running = ContainerInfo("p.fam", "id", "running", {}, started_at=1.0)
    assert history.record_outside(running).provenance.kind == UNATTRIBUTED  # type: ignore[union-attr]
    write(history, "memory/notes.md", "---\ntype: note\n---\nagain\n")
    assert history.record_outside("unknown").provenance.kind == UNATTRIBUTED  # type: ignore[union-attr]


def test_a_change_the_record_missed_is_unattributed_at_the_next_check(history: History) -> None:
    write(history, "memory/facts/x.md", "---\ntype: fact\n---\nwritten by a turn\n")
    # the daemon died between the turn and its record: the next check finds it
    running = ContainerInfo("p.fam", "id", "running", {}, started_at=1.0)
    change = history.record_outside(running)
    assert change is not None and change.provenance.kind == UNATTRIBUTED
    assert change.paths == ("memory/facts/x.md",)


def test_blame_and_revert_by_sender(history: History) -> None:
    write(history, "memory/facts/a.md", "---\ntype: fact\n---\nAda studies in Lisbon.\n")
    history.record(turn("bob", message_id="m1"))
    write(
        history, "memory/facts/a.md", "---\ntype: fact\n---\nAda studies in Lisbon.\nAda is evil.\n"
    )
    write(history, "memory/facts/e.md", "---\ntype: fact\n---\nEve is always right.\n")
    history.record(turn("eve", "guest", message_id="m2"))
    write(history, "memory/facts/c.md", "---\ntype: fact\n---\nCy likes tea.\n")
    history.record(turn("cy", message_id="m3"))
    blamed = [
        (text, change.provenance.sender) for text, change in history.blame("memory/facts/a.md")
    ]
    assert blamed == [
        ("---", "bob"),
        ("type: fact", "bob"),
        ("---", "bob"),
        ("Ada studies in Lisbon.", "bob"),
        ("Ada is evil.", "eve"),
    ]
    revs = [c.rev for c in history.log(sender="eve")]
    content, conflicts = history.revert_plan(revs)
    assert conflicts == []
    change = history.apply(content, Provenance("revert", sender="operator", note="eve"))
    assert change is not None and change.paths == ("memory/facts/a.md", "memory/facts/e.md")
    root = history.groups_dir / history.folder / "memory/facts"
    assert (root / "a.md").read_text() == "---\ntype: fact\n---\nAda studies in Lisbon.\n"
    assert not (root / "e.md").exists()
    assert (root / "c.md").read_text() == "---\ntype: fact\n---\nCy likes tea.\n"  # kept
    assert [c.provenance.kind for c in history.log()][:2] == ["revert", TURN]


def test_a_conflicting_revert_changes_nothing(history: History) -> None:
    write(history, "memory/facts/a.md", "---\ntype: fact\n---\none\n")
    history.record(turn("eve", "guest"))
    eve = history.log()[0].rev
    write(history, "memory/facts/a.md", "---\ntype: fact\n---\none\ntwo\n")
    history.record(turn("bob"))
    _content, conflicts = history.revert_plan([eve])
    assert conflicts == ["memory/facts/a.md"]


def test_show_diff_and_a_large_file_by_hash(history: History) -> None:
    write(history, "memory/facts/a.md", "---\ntype: fact\n---\nfirst\n")
    first = history.record(turn("bob"))
    write(history, "memory/facts/a.md", "---\ntype: fact\n---\nsecond\n")
    second = history.record(turn("bob"))
    assert first is not None and second is not None
    assert history.show(first.rev[:8], "memory/facts/a.md") == b"---\ntype: fact\n---\nfirst\n"
    assert "memory/facts/a.md" in history.show(first.rev)  # type: ignore[operator]
    assert history.diff().splitlines()[-2:] == ["-first", "+second"]
    with pytest.raises(HistoryError) as unknown:
        history.resolve("ffff")
    assert unknown.value.message == "no change 'ffff' in the history of 'fam'"
    small = History(history.groups_dir, history.folder, max_file_bytes=10)
    write(history, "memory/big.md", "x" * 11)
    with open(history.groups_dir / "fam/memory/sparse.bin", "wb") as handle:
        handle.truncate(512 * 1024**2)  # holes: hashed in pieces, never held whole
    big = small.record(turn("bob"))
    assert big is not None and big.hashed_only == ("memory/big.md", "memory/sparse.bin")
    assert small.show("HEAD", "memory/big.md").startswith(POINTER)  # type: ignore[union-attr]
    assert small.show("HEAD", "memory/sparse.bin").endswith(  # type: ignore[union-attr]
        b"; 536870912 bytes\n"
    )
    assert small.log()[0].hashed_only == ("memory/big.md", "memory/sparse.bin")


def test_git_reads_the_history(history: History) -> None:
    write(history, "memory/facts/a.md", "---\ntype: fact\n---\nfirst\n")
    history.record(turn("bob"))
    out = subprocess.run(
        ["git", "--git-dir", str(history.path), "log", "--format=%an %s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out == [
        "bob turn m by bob (member) via cli:c",
        "baseline baseline: the memory as first recorded",
    ]


def test_memory_commands(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("group", "add", "Fam").exit_code == 0
    facts = home / "groups/fam/memory/facts"
    assert (
        json.loads(run("memory", "log", "fam", "--json").stdout)["changes"][0]["kind"] == BASELINE
    )
    facts.mkdir()
    (facts / "a.md").write_text("---\ntype: fact\n---\nby hand\n")
    logged = json.loads(run("memory", "log", "fam", "memory/facts", "--json").stdout)["changes"]
    assert [c["paths"] for c in logged] == [["memory/facts/a.md"]]
    rev = logged[0]["rev"]
    assert run("memory", "show", "fam", f"{rev[:8]}:memory/facts/a.md").stdout.endswith("by hand\n")
    blamed = run("memory", "blame", "fam", "memory/facts/a.md").stdout.splitlines()
    assert blamed[-1].startswith(rev[:10]) and blamed[-1].endswith("| by hand")
    reverted = run("memory", "revert", "fam", rev[:8])
    assert reverted.exit_code == 0, reverted.output
    assert not (facts / "a.md").exists()
    both = run("memory", "revert", "fam", rev[:8], "--sender", "x")
    assert both.exit_code == 2 and "give a change (REV) or --sender, one of them" in both.output
    nobody = run("memory", "revert", "fam", "--sender", "mallory")
    assert nobody.exit_code == 2 and "no recorded change by 'mallory'" in nobody.output
    assert "changed again since" in run("memory", "revert", "fam", rev[:8]).output
    assert run("memory", "diff", "fam").stdout.startswith("--- a/memory/facts/a.md")


def test_prune_folds_old_changes_only_on_request(history: History) -> None:
    import time as clock

    old = clock.time() - 40 * 86400
    for n in range(3):
        write(history, "memory/facts/a.md", f"---\ntype: fact\n---\nold {n}\n")
        history.record(Provenance(TURN, sender=f"s{n}", time=old + n))
    write(history, "memory/facts/a.md", "---\ntype: fact\n---\nnew\n")
    history.record(turn("bob"))
    assert len(history.log()) == 5  # baseline, three old, one new
    folded, _freed = history.prune(clock.time() - 30 * 86400)
    assert folded == 4  # the old ones and the baseline before them
    changes = history.log()
    assert [c.provenance.sender for c in changes] == ["bob", ""]
    assert (
        changes[1].provenance.kind == BASELINE and "4 changes before" in changes[1].provenance.note
    )
    assert history.show("HEAD", "memory/facts/a.md") == b"---\ntype: fact\n---\nnew\n"
    assert history.show(changes[1].rev, "memory/facts/a.md") == b"---\ntype: fact\n---\nold 2\n"
    assert history.record(turn("bob")) is None  # the snapshot still matches memory
    assert history.prune(clock.time() - 30 * 86400) == (0, 0)


def test_the_size_limit_is_a_setting(home: Path) -> None:
    from orchestrator.errors import InvalidConfig

    (home / "orchestrator.yaml").write_text("history:\n  max_file_bytes: 64k\n")
    assert load_config(Home(home)).history_max_file_bytes == 65536
    (home / "orchestrator.yaml").write_text("history:\n  max_file_bytes: lots\n")
    with pytest.raises(InvalidConfig) as bad:
        load_config(Home(home))
    assert bad.value.message.endswith(
        "history.max_file_bytes: got 'lots'; expected a size from 1k to 1g (such as 4m)"
    )


# names that are not UTF-8, and a history that cannot record (the second hostile round)

RAW = "raw\udcff\udcfe.md"  # the name b"raw\xff\xfe.md", as Python keeps it


def test_a_name_that_is_not_utf8_is_recorded_with_its_bytes(history: History) -> None:
    write(history, f"memory/{RAW}", "poison\n")
    change = history.record(turn("bob", message_id="m1"))
    assert change is not None and change.paths == (f"memory/{RAW}",)
    listed = subprocess.run(
        ["git", "--git-dir", str(history.path), "ls-tree", "-r", "--name-only", "-z", "HEAD"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    assert b"memory/raw\xff\xfe.md" in listed  # the bytes on disk, in the tree
    assert history.show("HEAD", f"memory/{RAW}") == b"poison\n"
    # bob's change, found by sender, is undone: the file goes
    content, conflicts = history.revert_plan([c.rev for c in history.log(sender="bob")])
    assert conflicts == [] and content == {f"memory/{RAW}": None}
    history.apply(content, Provenance("revert", sender="operator", note="bob"))
    assert not (history.groups_dir / history.folder / "memory" / RAW).exists()


def test_a_gap_in_the_history_is_noted_and_what_it_hid_is_unattributed(
    history: History, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    write(history, "memory/facts/a.md", "---\ntype: fact\n---\npoison by a member\n")

    def broken(*args: Any, **kwargs: Any) -> bytes:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(History, "_write_commit", broken)
        with pytest.raises(OSError):
            history.record(turn("mallory", message_id="m1"))
    gap = history.gap()
    assert gap is not None and gap.reason == "OSError: [Errno 28] No space left on device"
    assert gap.describe().startswith("not recording since ")
    # the next turn records again: what it finds is not pinned on its sender
    write(history, "memory/facts/b.md", "---\ntype: fact\n---\nby the creator\n")
    change = history.record(turn("alice", "creator", message_id="m2"))
    assert change is not None and change.provenance.kind == UNATTRIBUTED
    assert "it would have been recorded as turn m2 by alice (creator)" in change.provenance.note
    assert history.gap() is None
    assert history.log(sender="alice") == []  # a revert by sender cannot undo the wrong thing
    write(history, "memory/facts/c.md", "---\ntype: fact\n---\nlater\n")
    assert history.record(turn("alice", "creator", message_id="m3")).provenance.kind == TURN


def test_memory_commands_show_a_name_that_is_not_utf8_escaped(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    assert run("group", "add", "Fam").exit_code == 0
    memory = home / "groups/fam/memory"
    (memory / RAW).write_text("---\ntype: note\n---\nthe cat is called Tom\n")
    (memory / "cats.md").write_text("---\ntype: note\n---\nthe cat likes fish\n")
    for args in (
        ("memory", "log", "fam"),
        ("memory", "index", "fam"),
        ("memory", "search", "fam", "cat"),
        ("memory", "lint", "fam"),
        ("memory", "status", "fam"),
        ("memory", "log", "fam", "--json"),
        ("memory", "index", "fam", "--force", "--json"),
        ("memory", "lint", "fam", "--json"),
        ("memory", "status", "fam", "--json"),
        ("memory", "blame", "fam", "memory/cats.md"),
        ("memory", "diff", "fam"),
    ):
        result = run(*args)
        assert "unexpected" not in result.output, (args, result.output)
        assert "Traceback" not in result.output, (args, result.output)
        assert "\udcff" not in result.output, (args, result.output)
    [baseline] = json.loads(run("memory", "log", "fam", "--json").stdout)["changes"]
    assert f"memory/{RAW}" in baseline["paths"]  # JSON escapes it; the bytes come back
    index = run("memory", "index", "fam", "--force").output
    assert "skipped memory/raw\\xff\\xfe.md: its name is not valid UTF-8" in index
    assert "memory/cats.md" in run("memory", "search", "fam", "cat").output


def test_a_gap_is_shown_by_doctor(home: Path) -> None:
    from orchestrator.service.doctor import WARN, check_histories

    group = GroupStore(Home(home)).add(GroupConfig(name="fam"))
    assert check_histories(Home(home)) == []
    History(group.path.parent, "fam")._note_gap(OSError(5, "Input/output error"))
    [check] = check_histories(Home(home))
    assert (check.name, check.status) == ("history fam", WARN)
    assert check.detail.startswith("not recording since ")
    assert check.detail.endswith(": OSError: [Errno 5] Input/output error")


def test_a_revert_waits_for_the_groups_turns_in_flight(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    """A turn in flight cannot write memory during a revert: the revert pauses the group
    (no turn starts), waits for the turn to finish, and only then writes."""
    import threading
    import time

    from orchestrator.store.messages import open_queue

    assert run("group", "add", "Fam").exit_code == 0
    facts = home / "groups/fam/memory/facts"
    facts.mkdir()
    history = History(home / "groups", "fam")
    history.record_outside(None)
    (facts / "a.md").write_text("---\ntype: fact\n---\nby bob\n")
    history.record(turn("bob", message_id="m1"))
    queue = open_queue(Home(home))
    running = queue.enqueue(
        group="fam", session="s", chat="c", thread=None, sender="alice", trust="creator",
        text="a turn that writes", channel="cli",
    )  # fmt: skip
    assert queue.claim(running.id)  # in flight
    outcome: list[Any] = []
    revert = threading.Thread(
        target=lambda: outcome.append(run("memory", "revert", "fam", "--sender", "bob"))
    )
    revert.start()
    try:
        deadline = time.monotonic() + 10
        while not queue.pauses("fam"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # the group is paused: nothing new of it starts while the revert waits
        waiting = queue.enqueue(
            group="fam", session="s2", chat="c2", thread=None, sender="alice",
            trust="creator", text="later", channel="cli",
        )  # fmt: skip
        assert not queue.claim(waiting.id)
        (facts / "b.md").write_text("---\ntype: fact\n---\nby the turn in flight\n")
        time.sleep(0.5)
        assert revert.is_alive() and (facts / "a.md").exists()  # it waits, writing nothing
        history.record(turn("alice", "creator", message_id=running.id))  # the turn ends
        queue.complete(running.id, ["done"])
        revert.join(15)
        assert not revert.is_alive()
    finally:
        queue.close()
    [result] = outcome
    assert result.exit_code == 0, result.output
    assert "waiting for 1 turn(s) in flight" in result.output
    assert not (facts / "a.md").exists() and (facts / "b.md").exists()
    after = open_queue(Home(home))
    try:
        assert not after.pauses("fam")  # the lease ended with the revert
    finally:
        after.close()


def test_the_reply_goes_out_before_the_record_and_nothing_overtakes_the_record(
    served, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """A turn's memory change is recorded off the reply path, yet before any history
    command answers and before the group's next turn (in any session) starts."""
    import threading
    import time

    daemon: Daemon = served["daemon"]
    say(served, "hello", "bob", chat="k")  # the baseline
    deadline = time.monotonic() + 30
    while daemon.active and time.monotonic() < deadline:  # its record is made after the reply
        time.sleep(0.01)
    history = daemon.history("fam")
    events: list[str] = []
    real_record = history.record
    release = threading.Event()

    def slow_record(provenance, **kwargs):  # type: ignore[no-untyped-def]
        events.append("record begins")
        release.wait(30)  # held until the test has seen the reply
        change = real_record(provenance, **kwargs)
        events.append("record ends")
        return change

    monkeypatch.setattr(history, "record", slow_record)
    real_turn = daemon._turn

    def turn(message, group, cancel):  # type: ignore[no-untyped-def]
        events.append(f"turn of {message.chat} starts")
        return real_turn(message, group, cancel)

    monkeypatch.setattr(daemon, "_turn", turn)
    first = daemon.submit("fam", "remember that Ada studies in Lisbon", chat="k", sender="bob",
                          channel="cli")  # fmt: skip
    done = daemon.wait(first.id, 60)
    assert done is not None and done.state == "done" and done.replies  # the reply is out
    second = daemon.submit("fam", "hello again", chat="j", sender="bob", channel="cli")
    deadline = time.monotonic() + 10
    while "record begins" not in events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert events == ["turn of k starts", "record begins"]  # the second turn waits
    logged: list[Any] = []
    reader = threading.Thread(target=lambda: logged.extend(history.log()))
    reader.start()
    time.sleep(0.2)
    assert reader.is_alive() and logged == []  # it waits for the record in progress
    release.set()
    reader.join(30)
    assert [c.provenance.kind for c in logged] == [TURN, BASELINE]
    assert logged[0].provenance.message_id == first.id and logged[0].provenance.also == ()
    assert (again := daemon.wait(second.id, 60)) is not None and again.state == "done"
    assert events[:4] == ["turn of k starts", "record begins", "record ends", "turn of j starts"]
