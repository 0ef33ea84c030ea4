"""The learned-behaviors store, exactly: what a write answers word for word (persisted,
refused, unknown), who may write and the refusals at the edges of the limit, the lock
file and what stands in its place, the read cache, the read limit, the stale temporary
files a crash leaves, the operator's instructions, a held write applied, the report."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.confined import ConfinedDir, UnsafePath
from orchestrator.limits import LEARNED_READ_MAX_BYTES
from orchestrator.memory import history
from orchestrator.memory.history import LEARNED_WRITE, Provenance
from orchestrator.memory.learned import (
    LOCK_FILE,
    LearnedStore,
    Outcome,
    StoreInfo,
    _why,
    apply_held,
    read_instructions,
    report,
    write_refusal,
)
from orchestrator.protocol import INSTRUCTIONS_FILE, LEARNED_FILE, NOT_PERSISTED, PERSISTED, UNKNOWN


@pytest.fixture
def groups(tmp_path: Path) -> Path:
    (tmp_path / "groups" / "fam").mkdir(parents=True)
    return tmp_path / "groups"


def store_of(groups: Path) -> LearnedStore:
    return LearnedStore(groups, "fam")


def refusal(**kw: Any) -> str | None:
    fields: dict[str, Any] = {
        "trust": "creator",
        "sender": "alice",
        "creators": ("alice", "carol"),
        "content": "rule",
        "max_chars": 10,
    }
    fields.update(kw)
    return write_refusal(**fields)


# outcomes


def test_an_outcome_reads_as_its_status_and_why() -> None:
    assert str(Outcome(PERSISTED, "done")) == "PERSISTED: done"
    assert Outcome(PERSISTED, "x").persisted is True
    assert Outcome(NOT_PERSISTED, "x").persisted is False
    assert Outcome(UNKNOWN, "x").persisted is False


def test_why_a_failure_is_told_by_its_system_error_or_its_text() -> None:
    assert _why(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    assert _why(UnsafePath("groups/fam/x", "is a symlink")) == "groups/fam/x: is a symlink"
    assert _why(OSError("plain")) == "plain"
    assert _why(ValueError("not an OSError")) == "not an OSError"


# writing


def test_a_replace_answers_how_many_characters_and_when_they_apply(groups: Path) -> None:
    store = store_of(groups)
    outcome = store.replace("é" * 1234)
    assert outcome == Outcome(
        PERSISTED,
        "learned behaviors replaced (1,234 characters); they apply from the next fresh context",
    )
    learned = groups / "fam" / LEARNED_FILE
    assert learned.read_bytes() == ("é" * 1234).encode("utf-8")
    assert stat.S_IMODE(learned.stat().st_mode) == 0o644
    assert store.read() == "é" * 1234
    assert store.replace("") == Outcome(
        PERSISTED,
        "learned behaviors replaced (0 characters); they apply from the next fresh context",
    )
    assert learned.read_bytes() == b"" and store.read() == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives files to another owner")
def test_the_store_stays_the_hosts_whatever_the_folders_owner(groups: Path) -> None:
    os.chown(groups / "fam", 4321, 4321)
    assert store_of(groups).replace("x").persisted
    learned = (groups / "fam" / LEARNED_FILE).stat()
    assert (learned.st_uid, learned.st_gid) == (os.geteuid(), os.getegid())


def test_the_lock_file_is_private_and_stays(groups: Path) -> None:
    store_of(groups).replace("x")
    lock = groups / "fam" / LOCK_FILE
    assert LOCK_FILE == ".learned.lock"
    assert stat.S_ISREG(lock.lstat().st_mode) and stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_a_symlink_in_place_of_the_lock_is_refused(groups: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    (groups / "fam" / LOCK_FILE).symlink_to(target)
    outcome = store_of(groups).replace("x")
    assert outcome == Outcome(
        NOT_PERSISTED, f"the store could not be locked: {groups}/fam/{LOCK_FILE}: is a symlink"
    )
    assert not target.exists() and not (groups / "fam" / LEARNED_FILE).exists()
    with pytest.raises(UnsafePath) as caught, store_of(groups).locked():
        pass
    assert (caught.value.shown, caught.value.reason) == (
        f"{groups}/fam/{LOCK_FILE}",
        "is a symlink",
    )


def test_a_fifo_in_place_of_the_lock_is_refused(groups: Path) -> None:
    os.mkfifo(groups / "fam" / LOCK_FILE)
    outcome = store_of(groups).replace("x")
    assert outcome == Outcome(
        NOT_PERSISTED,
        f"the store could not be locked: {groups}/fam/{LOCK_FILE}: is not a regular file",
    )
    assert not (groups / "fam" / LEARNED_FILE).exists()


def test_a_folder_in_place_of_the_lock_is_refused_by_the_system(groups: Path) -> None:
    (groups / "fam" / LOCK_FILE).mkdir()
    assert store_of(groups).replace("x") == Outcome(
        NOT_PERSISTED, "the store could not be locked: Is a directory"
    )


def test_a_missing_group_folder_cannot_be_locked(groups: Path) -> None:
    outcome = LearnedStore(groups, "gone").replace("x")
    assert outcome == Outcome(
        NOT_PERSISTED, "the store could not be locked: No such file or directory"
    )


def test_a_failed_write_that_changed_nothing(groups: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    learned = groups / "fam" / LEARNED_FILE
    learned.write_text("old")

    def no_space(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ConfinedDir, "write_atomic", no_space)
    assert store_of(groups).replace("new") == Outcome(
        NOT_PERSISTED, "the write failed (No space left on device); nothing changed"
    )
    learned.unlink()  # with no store before or after, nothing changed either
    assert store_of(groups).replace("new") == Outcome(
        NOT_PERSISTED, "the write failed (No space left on device); nothing changed"
    )


def test_a_failed_write_of_the_same_text_is_not_known_to_have_changed_nothing(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (groups / "fam" / LEARNED_FILE).write_text("same")

    def failed(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ConfinedDir, "write_atomic", failed)
    assert store_of(groups).replace("same") == Outcome(
        UNKNOWN, "the write failed after it began (Input/output error)"
    )


def test_a_failed_write_after_the_rename_is_unknown(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    learned = groups / "fam" / LEARNED_FILE
    learned.write_text("old")

    def renamed_then_failed(self: ConfinedDir, relative: str, data: bytes, **kw: Any) -> None:
        assert (relative, kw) == (LEARNED_FILE, {"mode": 0o644, "owner": None})
        learned.write_bytes(data)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ConfinedDir, "write_atomic", renamed_then_failed)
    assert store_of(groups).replace("néw") == Outcome(
        UNKNOWN, "the write failed after it began (Input/output error)"
    )
    assert learned.read_bytes() == "néw".encode()


def test_a_failed_write_over_a_store_past_the_read_limit_compares_what_it_reads(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.limits import LEARNED_READ_MAX_BYTES

    learned = groups / "fam" / LEARNED_FILE
    big = "a" * (LEARNED_READ_MAX_BYTES + 10)
    learned.write_text(big)

    def swapped_then_failed(self: ConfinedDir, relative: str, data: bytes, **kw: Any) -> None:
        learned.write_text("b" * (LEARNED_READ_MAX_BYTES + 10))  # another big store
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ConfinedDir, "write_atomic", swapped_then_failed)
    # the first LEARNED_READ_MAX_BYTES of each are compared: they differ, so it is not
    # known that nothing changed
    assert store_of(groups).replace("new") == Outcome(
        UNKNOWN, "the write failed after it began (Input/output error)"
    )
    learned.write_text(big)

    def failed(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ConfinedDir, "write_atomic", failed)
    assert store_of(groups).replace("new") == Outcome(
        NOT_PERSISTED, "the write failed (No space left on device); nothing changed"
    )


def test_a_write_removes_the_temporary_files_of_a_crashed_one_only(groups: Path) -> None:
    folder = groups / "fam"
    stale = [f".{LEARNED_FILE}.abc.tmp", f".{LEARNED_FILE}..tmp"]
    kept = [
        f".{LEARNED_FILE}.abc",  # not a temporary file's end
        f"{LEARNED_FILE}.abc.tmp",  # not its start
        f"x.{LEARNED_FILE}.abc.tmp",
        ".other.md.abc.tmp",  # another file's
        "notes.tmp",
    ]
    for name in stale + kept:
        (folder / name).write_text("left")
    assert store_of(groups).replace("new").persisted
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted([*kept, LEARNED_FILE, LOCK_FILE])


def test_a_stale_temporary_folder_does_not_stop_a_write(groups: Path) -> None:
    (groups / "fam" / f".{LEARNED_FILE}.dir.tmp").mkdir()
    assert store_of(groups).replace("new").persisted
    assert (groups / "fam" / f".{LEARNED_FILE}.dir.tmp").is_dir()


# reading


def test_a_missing_store_reads_empty(groups: Path) -> None:
    assert store_of(groups).read() == ""


def test_a_store_vanishing_while_read_reads_empty(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (groups / "fam" / LEARNED_FILE).write_text("rules")

    def vanished(*args: Any, **kwargs: Any) -> bytes:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    monkeypatch.setattr(ConfinedDir, "read_bytes", vanished)
    assert store_of(groups).read() == ""


def test_a_store_that_is_not_utf8_is_an_error(groups: Path) -> None:
    (groups / "fam" / LEARNED_FILE).write_bytes(b"\xff\xfe rules")
    with pytest.raises(UnicodeDecodeError):
        store_of(groups).read()


def test_a_store_over_the_read_limit_reads_its_first_bytes(groups: Path) -> None:
    assert LEARNED_READ_MAX_BYTES == 1024 * 1024
    (groups / "fam" / LEARNED_FILE).write_bytes(b"a" * LEARNED_READ_MAX_BYTES + b"b")
    assert store_of(groups).read() == "a" * LEARNED_READ_MAX_BYTES


def test_the_cache_is_per_group_and_per_folder_of_groups(tmp_path: Path) -> None:
    for base in ("one", "two"):
        for folder in ("fam", "work"):
            (tmp_path / base / folder).mkdir(parents=True)
            LearnedStore(tmp_path / base, folder).replace(f"{base} {folder}")
    for base in ("one", "two"):
        for folder in ("fam", "work"):
            assert LearnedStore(tmp_path / base, folder).read() == f"{base} {folder}"


def test_a_read_fills_the_cache(groups: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (groups / "fam" / LEARNED_FILE).write_text("by hand")
    store = store_of(groups)
    assert store.read() == "by hand"
    reads: list[str] = []
    real = ConfinedDir.read_bytes
    monkeypatch.setattr(
        ConfinedDir, "read_bytes", lambda self, *a, **k: reads.append(a[0]) or real(self, *a, **k)
    )
    assert store.read() == "by hand" and reads == []


def test_a_store_replaced_by_a_fifo_with_the_cached_identity_is_not_read_from_the_cache(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_of(groups)
    store.replace("cached")
    real_lstat = ConfinedDir.lstat

    def as_fifo(self: ConfinedDir, relative: str) -> Any:
        found = real_lstat(self, relative)
        assert found is not None
        names = ("st_dev", "st_ino", "st_size", "st_mtime_ns")
        return SimpleNamespace(**{n: getattr(found, n) for n in names}, st_mode=stat.S_IFIFO)

    monkeypatch.setattr(ConfinedDir, "lstat", as_fifo)
    reads: list[str] = []
    monkeypatch.setattr(
        ConfinedDir, "read_bytes", lambda self, *a, **k: reads.append(a[0]) or b"read again"
    )
    assert store.read() == "read again" and reads == [LEARNED_FILE]


# what the store is


def test_the_info_of_a_missing_present_and_odd_store(groups: Path, tmp_path: Path) -> None:
    store = store_of(groups)
    learned = groups / "fam" / LEARNED_FILE
    assert store.path == learned
    assert store.info() == StoreInfo(learned, False, 0, None, None)
    learned.write_text("12345")
    st = learned.stat()
    assert store.info() == StoreInfo(learned, True, 5, st.st_mtime, None)
    learned.unlink()
    learned.symlink_to(tmp_path / "nowhere-at-all")
    link = learned.lstat()
    assert store.info() == StoreInfo(
        learned, True, link.st_size, link.st_mtime, "not a regular file"
    )
    gone = LearnedStore(groups, "gone")
    info = gone.info()
    assert (info.path, info.exists, info.size, info.modified) == (
        groups / "gone" / LEARNED_FILE, False, 0, None,
    )  # fmt: skip
    assert info.problem is not None and "No such file or directory" in info.problem


def test_the_info_as_a_dict(groups: Path) -> None:
    info = StoreInfo(groups / "f.md", True, 3, 12.5, "odd")
    assert info.to_dict() == {
        "path": str(groups / "f.md"),
        "exists": True,
        "size": 3,
        "modified": 12.5,
        "problem": "odd",
    }
    assert StoreInfo(groups, False, 0, None).problem is None


class Held:
    id = 7
    content = "- be brief"
    sender = "alice"
    message_id = "m1"
    channel = "cli"
    chat = "kitchen"

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "content": self.content}


def test_the_report_of_a_store_with_its_writers_and_pending_changes(groups: Path) -> None:
    (groups / "fam" / LEARNED_FILE).write_text("abc")
    st = (groups / "fam" / LEARNED_FILE).stat()
    assert report(groups, "fam", ("alice", "carol"), [Held()]) == {
        "path": str(groups / "fam" / LEARNED_FILE),
        "exists": True,
        "size": 3,
        "modified": st.st_mtime,
        "problem": None,
        "writers": ["alice", "carol"],
        "pending": [{"id": 7, "content": "- be brief"}],
    }


# a held write


def test_a_held_write_applied_is_recorded_as_the_requesters(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded: list[tuple[Path, str, Provenance]] = []
    monkeypatch.setattr(history, "record_quietly", lambda g, f, p: recorded.append((g, f, p)))
    applied = apply_held(groups, "fam", Held(), "carol")
    assert applied == (
        True,
        "learned behaviors replaced (10 characters); they apply from the next fresh context",
    )
    assert (groups / "fam" / LEARNED_FILE).read_text() == "- be brief"
    [(where, folder, provenance)] = recorded
    assert (where, folder) == (groups, "fam")
    assert provenance == Provenance(
        LEARNED_WRITE, sender="alice", trust="creator", message_id="m1", channel="cli",
        chat="kitchen", note="held request 7 approved by carol", time=provenance.time,
    )  # fmt: skip


def test_a_held_write_that_fails_is_not_recorded(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded: list[object] = []
    monkeypatch.setattr(history, "record_quietly", lambda *a: recorded.append(a))
    assert apply_held(groups, "gone", Held(), "carol") == (
        False,
        "NOT_PERSISTED: the store could not be locked: No such file or directory",
    )
    assert recorded == []


# the operator's instructions


def test_the_operators_instructions(groups: Path) -> None:
    assert read_instructions(groups, "fam") == ""
    assert read_instructions(groups, "gone") == ""
    path = groups / "fam" / INSTRUCTIONS_FILE
    path.write_bytes(b"be kind \xff")
    assert read_instructions(groups, "fam") == "be kind \ufffd"
    path.write_bytes(b"a" * LEARNED_READ_MAX_BYTES + b"b")
    assert read_instructions(groups, "fam") == "a" * LEARNED_READ_MAX_BYTES
    path.unlink()
    path.mkdir()
    assert read_instructions(groups, "fam") == ""


# who may write


def test_only_a_listed_creator_may_write() -> None:
    assert refusal() is None
    assert refusal(sender="carol") is None
    assert refusal(trust="member", sender="bob") == (
        "only the group's creators may change learned behaviors; this turn answers "
        "'bob' (member), who is not one"
    )
    # a member who is listed as a creator is still a member in this turn
    assert refusal(trust="member", sender="alice") == (
        "only the group's creators may change learned behaviors; this turn answers "
        "'alice' (member), who is not one"
    )
    assert refusal(sender="dave") == (
        "only the group's creators may change learned behaviors; this turn answers "
        "'dave', who is not one"
    )
    assert refusal(sender="dave", creators=()) is not None


def test_the_content_must_be_text_that_shows_as_it_is() -> None:
    assert refusal(content=None) == "content must be text"
    assert refusal(content=b"rule") == "content must be text"
    assert refusal(content="a\x07b") == (
        "the content is refused: contains the control character U+0007"
    )
    assert refusal(content="a\nb\r\n") is None  # line breaks are fine
    assert refusal(content="ab\u202ecd") == (
        "the content is refused: contains U+202E (a direction control) at character 3, "
        "which would show other text than the one approved"
    )
    # the refusal of who writes comes before the content's
    assert refusal(trust="guest", sender="eve", content=None) == (
        "only the group's creators may change learned behaviors; this turn answers "
        "'eve' (guest), who is not one"
    )


def test_the_content_is_at_most_the_groups_limit() -> None:
    assert refusal(content="x" * 10) is None
    assert refusal(content="x" * 11) == (
        "the content is 11 characters; the limit is 10 (group.yaml learned_max_chars)"
    )
    assert refusal(content="é" * 1000, max_chars=1000) is None  # characters, not bytes
    assert refusal(content="x" * 1001, max_chars=1000) == (
        "the content is 1,001 characters; the limit is 1,000 (group.yaml learned_max_chars)"
    )
    assert refusal(content="", max_chars=0) is None
