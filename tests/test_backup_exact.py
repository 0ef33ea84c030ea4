"""Backups and restores word for word: what a restore writes (each file's mode and time,
each folder's), the reports and progress lines, where the state folder goes, the files
outside the home, a move that fails or crosses file systems, and each refusal's sentence
with nothing left behind; and what a backup of a small home holds."""

from __future__ import annotations

import errno
import io
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import orchestrator.backup.restore as restore
from orchestrator.backup import BackupInvalid, restore_backup, verify_backup
from orchestrator.backup.archive import ArchiveWriter, Head, supported_versions
from orchestrator.backup.restore import RestoreFailed
from orchestrator.errors import BadInput
from orchestrator.home import Home
from orchestrator.versions import BACKUP_FORMAT_VERSION, RELEASE

LAYOUT = {"layout": supported_versions()["layout"]}
HEAD = Head(BACKUP_FORMAT_VERSION, RELEASE, 1700000000.5, LAYOUT, {"home": "/old", "project": "p"},
            False, {"messages": 3})  # fmt: skip

Fill = Callable[[ArchiveWriter], None]


@pytest.fixture(autouse=True)
def _umask(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.delenv("ORCHESTRATOR_STATE_DIR", raising=False)
    old = os.umask(0o022)
    yield
    os.umask(old)


def _archive(path: Path, fill: Fill) -> Path:
    with path.open("wb") as out:
        writer = ArchiveWriter(out, gzipped=False, spool_dir=path.parent)
        writer.add_head(HEAD)
        fill(writer)
        writer.finish(HEAD)
    return path


def _file(
    writer: ArchiveWriter, name: str, data: bytes, mode: int = 0o644, mtime: float = 5e8
) -> None:
    writer.add_file(name, io.BytesIO(data), len(data), mode, mtime)


def _home_tree(config: str = "version: 1\n") -> Fill:
    def fill(w: ArchiveWriter) -> None:
        w.add_dir("state", 0o700, 1e9)
        _file(w, "state/consolidated.json", b"{}", 0o600, 1_000_000_001)
        w.add_dir("home", 0o755, 1e9)
        _file(w, "home/orchestrator.yaml", config.encode(), 0o640, 1_000_000_002)
        w.add_dir("home/groups", 0o750, 1_000_000_003)
        w.add_dir("home/groups/fam", 0o500, 1_000_000_004)
        w.add_dir("home/groups/fam/memory", 0o755, 1_000_000_005)
        _file(w, "home/groups/fam/memory/a.md", b"# A\n", 0o4755, 1_000_000_006)
        w.add_dir("home/groups/.removed", 0o755, 1e9)
        w.add_dir("home/groups/.removed/old", 0o755, 1e9)
        w.add_dir("home/groups/work", 0o755, 1e9)
        w.add_dir("outside", 0o700, 1e9)

    return fill


def _file_then_folder(w: ArchiveWriter) -> None:
    w.add_dir("home", 0o755, 1e9)
    _file(w, "home/a", b"file")
    w.add_dir("home/a/b", 0o755, 1e9)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_restore_writes_every_member_with_its_mode_and_time_and_reports_it(
    tmp_path: Path,
) -> None:
    archive = _archive(tmp_path / "b.tar", _home_tree())
    root = tmp_path / "new"
    said: list[str] = []
    report = restore_backup(archive, Home(root), said.append)
    assert sorted(os.listdir(root)) == ["groups", "orchestrator.yaml", "state"]
    assert _mode(root) == 0o755
    assert (root / "orchestrator.yaml").read_text() == "version: 1\n"
    assert _mode(root / "orchestrator.yaml") == 0o640
    assert os.stat(root / "orchestrator.yaml").st_mtime == 1_000_000_002
    assert _mode(root / "groups") == 0o750
    assert os.stat(root / "groups").st_mtime == 1_000_000_003
    assert _mode(root / "groups" / "fam") == 0o700  # the owner keeps its way in
    assert os.stat(root / "groups" / "fam").st_mtime == 1_000_000_004
    assert os.stat(root / "groups" / "fam" / "memory").st_mtime == 1_000_000_005
    a_md = root / "groups" / "fam" / "memory" / "a.md"
    assert a_md.read_bytes() == b"# A\n"
    assert _mode(a_md) == 0o755  # never setuid
    assert os.stat(a_md).st_mtime == 1_000_000_006
    assert (root / "state" / "consolidated.json").read_bytes() == b"{}"
    assert _mode(root / "state" / "consolidated.json") == 0o600
    assert _mode(root / "state") == 0o700
    assert said == [f"reading {archive}", f"restored 3 files into {root}"]
    assert report.to_dict() == {
        "archive": str(archive),
        "home": str(root),
        "state_dir": str(root / "state"),
        "release": RELEASE,
        "created": 1700000000.5,
        "versions": HEAD.versions,
        "secrets": False,
        "summary": {"messages": 3},
        "files": 3,
        "bytes": 2 + 11 + 4,
        "groups": ["fam", "work"],
        "skipped_at_backup": [],
        "secrets_left_out": [],
        "outside": [],
    }


def test_verify_reports_what_an_archive_holds_and_tells_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fill(w: ArchiveWriter) -> None:
        _home_tree()(w)
        w.manifest.skipped.append(("home/groups/fam/pipe", "a FIFO"))
        w.manifest.secrets_left_out.append("/old/orchestrator.env")

    archive = _archive(tmp_path / "b.tar", fill)
    said: list[str] = []
    assert verify_backup(archive, said.append).to_dict() == {
        "archive": str(archive),
        "ok": True,
        "release": RELEASE,
        "created": 1700000000.5,
        "versions": HEAD.versions,
        "secrets": False,
        "summary": {"messages": 3},
        "files": 3,
        "bytes": 17,
        "groups": ["fam", "work"],
        "skipped_at_backup": [{"name": "home/groups/fam/pipe", "why": "a FIFO"}],
        "secrets_left_out": ["/old/orchestrator.env"],
    }
    assert said == []  # less than BACKUP_PROGRESS_SECONDS went by
    monkeypatch.setattr(restore, "BACKUP_PROGRESS_SECONDS", 0)
    verify_backup(archive, said.append)
    assert said == [
        "  1 files read (state/consolidated.json)",
        "  2 files read (home/orchestrator.yaml)",
        "  3 files read (home/groups/fam/memory/a.md)",
    ]
    said.clear()
    root = tmp_path / "new"
    report = restore_backup(archive, Home(root), said.append)
    assert said == [
        f"reading {archive}",
        "  1 files written (state/consolidated.json)",
        "  2 files written (home/orchestrator.yaml)",
        "  3 files written (home/groups/fam/memory/a.md)",
        f"restored 3 files into {root}",
    ]
    assert report.to_dict()["skipped_at_backup"] == [
        {"name": "home/groups/fam/pipe", "why": "a FIFO"}
    ]
    assert report.to_dict()["secrets_left_out"] == ["/old/orchestrator.env"]


def test_progress_is_told_once_the_seconds_have_gone_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _archive(tmp_path / "b.tar", _home_tree())
    clock = iter([100.0, 101.9, 102.0, 103.0, 200.0, 200.0, 201.0, 202.0])
    monkeypatch.setattr(restore.time, "monotonic", lambda: next(clock))
    said: list[str] = []
    verify_backup(archive, said.append)  # starts at 100: 1.9 s, 2 s, then 1 s after
    assert said == ["  2 files read (home/orchestrator.yaml)"]


def test_a_group_list_leaves_out_dot_folders_and_what_is_deeper() -> None:
    from orchestrator.backup.archive import Manifest

    dirs = ["home", "home/groups", "home/groups/b", "home/groups/a", "home/groups/.removed",
            "home/groups/a/memory", "home/groupsx", "state/groups/c", "home/skills/x"]  # fmt: skip
    assert restore._groups(Manifest(dirs=dirs)) == ["a", "b"]


# -- where a restore may go -------------------------------------------------------------


def test_a_restore_into_a_folder_whose_parent_is_missing_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "b.tar", _home_tree())
    with pytest.raises(BadInput) as refused:
        restore_backup(archive, Home(tmp_path / "no" / "new"))
    assert refused.value.message == f"{tmp_path / 'no'} does not exist; make it first"
    assert not (tmp_path / "no").exists()


def test_a_restore_onto_a_file_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "b.tar", _home_tree())
    (tmp_path / "f").write_text("x")
    with pytest.raises(BadInput) as refused:
        restore_backup(archive, Home(tmp_path / "f"))
    assert (
        refused.value.message == f"{tmp_path / 'f'} is not a folder; a restore needs an empty one"
    )


def test_a_restore_into_a_home_that_holds_anything_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "b.tar", _home_tree())
    root = tmp_path / "taken"
    root.mkdir()
    (root / ".hidden").mkdir()
    with pytest.raises(BadInput) as refused:
        restore_backup(archive, Home(root))
    assert refused.value.message == f"{root} is not empty; a restore goes into an empty home only"
    assert refused.value.hint == "pass --home with a new folder (it is made), then start it there"
    assert os.listdir(root) == [".hidden"]


def test_an_empty_folder_that_exists_is_restored_into_and_kept_when_refused(
    tmp_path: Path,
) -> None:
    root = tmp_path / "empty"
    root.mkdir(mode=0o711)
    broken = _archive(tmp_path / "bad.tar", _file_then_folder)
    with pytest.raises(BackupInvalid):
        restore_backup(broken, Home(root))
    assert root.is_dir()
    assert os.listdir(root) == []
    restore_backup(_archive(tmp_path / "b.tar", _home_tree()), Home(root))
    assert _mode(root) == 0o711
    assert (root / "groups" / "fam").is_dir()


def _state_elsewhere(tmp_path: Path, state: Path) -> Path:
    return _archive(tmp_path / "b.tar", _home_tree(f"version: 1\nstate_dir: {state}\n"))


def test_the_state_folder_goes_where_the_restored_config_puts_it(tmp_path: Path) -> None:
    state = tmp_path / "disk" / "deep" / "state"
    archive = _state_elsewhere(tmp_path, state)
    report = restore_backup(archive, Home(tmp_path / "new"))
    assert report.state_dir == state
    assert report.to_dict()["state_dir"] == str(state)
    assert (state / "consolidated.json").read_bytes() == b"{}"
    assert sorted(os.listdir(tmp_path / "new")) == ["groups", "orchestrator.yaml"]


def test_an_empty_state_folder_named_by_the_config_is_taken(tmp_path: Path) -> None:
    state = tmp_path / "st"
    state.mkdir()
    restore_backup(_state_elsewhere(tmp_path, state), Home(tmp_path / "new"))
    assert os.listdir(state) == ["consolidated.json"]


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_state_folder_named_by_the_config_that_holds_something_is_refused(
    tmp_path: Path, kind: str
) -> None:
    state = tmp_path / "st"
    if kind == "file":
        state.write_text("x")
    else:
        state.mkdir()
        (state / "q.db").write_text("x")
    with pytest.raises(BadInput) as refused:
        restore_backup(_state_elsewhere(tmp_path, state), Home(tmp_path / "new"))
    assert refused.value.message == (
        f"the restored orchestrator.yaml puts state_dir at {state}, which is not empty; "
        "nothing was restored"
    )
    assert refused.value.hint == (
        "set ORCHESTRATOR_STATE_DIR to an empty folder for the restore and after"
    )
    assert not (tmp_path / "new").exists()


def test_a_member_under_a_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "b.tar", _file_then_folder)
    with pytest.raises(BackupInvalid) as refused:
        restore_backup(archive, Home(tmp_path / "new"))
    assert refused.value.message == (
        f"{archive}: holds 'home/a' twice (two files, or a file and the folder of other members)"
    )
    assert not (tmp_path / "new").exists()


# -- moving into place -------------------------------------------------------------------


def test_a_name_that_appears_during_the_restore_is_never_replaced_and_all_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "new"
    real = restore.sync_filesystem

    def meanwhile(path: Path) -> None:
        real(path)
        (root / "orchestrator.yaml").write_text("someone else's")

    monkeypatch.setattr(restore, "sync_filesystem", meanwhile)
    archive = _archive(tmp_path / "b.tar", _home_tree())
    with pytest.raises(RestoreFailed) as refused:
        restore_backup(archive, Home(root))
    assert refused.value.message == (
        f"{root / 'orchestrator.yaml'} appeared during the restore; nothing was replaced"
    )
    assert os.listdir(root) == ["orchestrator.yaml"]  # groups/ was moved back out
    assert (root / "orchestrator.yaml").read_text() == "someone else's"


def test_a_state_folder_that_appears_is_not_replaced_and_the_home_is_moved_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "new"
    state = tmp_path / "st"
    real = restore._move

    def meanwhile(source: Path, target: Path, moved: list[tuple[Path, Path]]) -> None:
        if target == state:
            state.mkdir(exist_ok=True)
            (state / "x").write_text("theirs")
        real(source, target, moved)

    monkeypatch.setattr(restore, "_move", meanwhile)
    with pytest.raises(RestoreFailed) as refused:
        restore_backup(_state_elsewhere(tmp_path, state), Home(root))
    assert refused.value.message == f"{state} appeared during the restore; nothing was replaced"
    assert not root.exists()  # made by the restore: taken away again
    assert os.listdir(state) == ["x"]


def test_a_move_that_fails_names_both_places(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "new"
    real = os.rename
    renamed: list[tuple[str, str]] = []

    def rename(source: object, target: object) -> None:
        if str(target) == str(root / "orchestrator.yaml"):
            raise PermissionError(errno.EACCES, "Permission denied")
        renamed.append((str(source), str(target)))
        real(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(RestoreFailed) as refused:
        restore_backup(_archive(tmp_path / "b.tar", _home_tree()), Home(root))
    message = refused.value.message
    assert message.startswith("cannot move ")
    source = message.removeprefix("cannot move ").split(" to ")[0]
    assert source.startswith(str(root / ".restore-"))
    assert source.endswith("/home/orchestrator.yaml")
    assert message == f"cannot move {source} to {root / 'orchestrator.yaml'}: Permission denied"
    # groups/ was moved first and moved back
    assert renamed[-1] == (str(root / "groups"), source.replace("orchestrator.yaml", "groups"))
    assert not root.exists()


def test_a_state_folder_on_another_file_system_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "st"
    real = os.rename

    def rename(source: object, target: object) -> None:
        if str(target) == str(state):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", rename)
    root = tmp_path / "new"
    restore_backup(_state_elsewhere(tmp_path, state), Home(root))
    assert (state / "consolidated.json").read_bytes() == b"{}"
    assert _mode(state / "consolidated.json") == 0o600
    assert os.stat(state / "consolidated.json").st_mtime == 1_000_000_001
    assert sorted(os.listdir(root)) == ["groups", "orchestrator.yaml"]  # no staging left


def test_a_copy_to_another_file_system_is_not_undone_by_renaming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "st"
    real = os.rename
    calls: list[str] = []

    def rename(source: object, target: object) -> None:
        calls.append(str(target))
        if str(target) == str(state):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real(source, target)  # type: ignore[arg-type]

    def fail(*args: object) -> None:
        raise RuntimeError("after the moves")

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(restore, "_outside", fail)
    root = tmp_path / "new"
    with pytest.raises(RuntimeError):
        restore_backup(_state_elsewhere(tmp_path, state), Home(root))
    # the home's entries go back; the copied state folder is no rename to undo
    assert str(state) not in calls[calls.index(str(state)) + 1 :]
    assert not root.exists()


# -- outside the home ---------------------------------------------------------------------


def _with_outside(
    config: str, outside: dict[str, tuple[bytes, int]], was: dict[str, str] | None = None
) -> Fill:
    def fill(w: ArchiveWriter) -> None:
        _home_tree(config)(w)
        for name, (data, mode) in outside.items():
            _file(w, f"outside/{name}", data, mode)
            w.manifest.outside[f"outside/{name}"] = (was or {}).get(name, f"/old/{name}")

    return fill


def test_files_outside_the_home_are_put_where_the_restored_config_names_them(
    tmp_path: Path,
) -> None:
    allow = tmp_path / "etc" / "deep" / "allow.yaml"
    secrets = tmp_path / "sec.yaml"
    config = f"version: 1\nmount_allowlist: {allow}\nsecrets_file: {secrets}\n"
    fill = _with_outside(config, {"mount-allowlist.yaml": (b"allowed_roots: []\n", 0o644),
                                  "secrets.yaml": (b"k: v\n", 0o600)})  # fmt: skip
    report = restore_backup(_archive(tmp_path / "b.tar", fill), Home(tmp_path / "new"))
    assert report.outside == [
        ("mount allowlist", str(allow), "written"),
        ("secrets file", str(secrets), "written"),
    ]
    assert report.to_dict()["outside"] == [
        {"what": "mount allowlist", "path": str(allow), "how": "written"},
        {"what": "secrets file", "path": str(secrets), "how": "written"},
    ]
    assert allow.read_bytes() == b"allowed_roots: []\n"
    assert _mode(allow) == 0o644
    assert _mode(allow.parent) == 0o700
    assert _mode(allow.parent.parent) == 0o755  # a parent's parent: as mkdir makes it
    assert secrets.read_bytes() == b"k: v\n"
    assert _mode(secrets) == 0o600


def test_an_outside_file_already_there_is_kept_and_the_archived_one_goes_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow = tmp_path / "allow.yaml"
    secrets = tmp_path / "sec.yaml"
    allow.write_text("allowed_roots: []\n")
    secrets.write_text("mine: 1\n")
    monkeypatch.setenv("TZ", "XXX-14")  # far from UTC: the name's time is UTC
    time.tzset()
    config = f"version: 1\nmount_allowlist: {allow}\nsecrets_file: {secrets}\n"
    fill = _with_outside(config, {"mount-allowlist.yaml": (b"allowed_roots: []\n", 0o644),
                                  "secrets.yaml": (b"k: v\n", 0o640)})  # fmt: skip
    before = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        report = restore_backup(_archive(tmp_path / "b.tar", fill), Home(tmp_path / "new"))
    finally:
        after = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        monkeypatch.delenv("TZ")
        time.tzset()
    assert report.outside[0] == ("mount allowlist", str(allow), "already there, the same")
    (aside,) = tmp_path.glob("sec.yaml.restored-*")
    assert report.outside[1] == (
        "secrets file",
        str(secrets),
        f"another file is there: the archived one is at {aside}",
    )
    stamp = aside.name.removeprefix("sec.yaml.restored-")
    assert before <= stamp <= after
    assert aside.read_bytes() == b"k: v\n"
    assert _mode(aside) == 0o640
    assert secrets.read_text() == "mine: 1\n"
    assert allow.read_text() == "allowed_roots: []\n"


def test_an_outside_folder_in_the_way_gets_the_file_beside_it(tmp_path: Path) -> None:
    allow = tmp_path / "allow.yaml"
    allow.mkdir()
    config = f"version: 1\nmount_allowlist: {allow}\n"
    fill = _with_outside(config, {"mount-allowlist.yaml": (b"a: 1\n", 0o644)})
    report = restore_backup(_archive(tmp_path / "b.tar", fill), Home(tmp_path / "new"))
    (aside,) = tmp_path.glob("allow.yaml.restored-*")
    assert report.outside == [
        ("mount allowlist", str(allow), f"another file is there: the archived one is at {aside}")
    ]


def test_outside_files_the_config_does_not_name_are_not_placed(tmp_path: Path) -> None:
    allow = tmp_path / "allow.yaml"
    config = f"version: 1\nmount_allowlist: {allow}\n"
    fill = _with_outside(config, {"secrets.yaml": (b"k: v\n", 0o600), "other": (b"x", 0o600)},
                         {"secrets.yaml": "/was/sec.yaml", "other": "/was/other"})  # fmt: skip
    report = restore_backup(_archive(tmp_path / "b.tar", fill), Home(tmp_path / "new"))
    assert report.outside == [
        ("outside/other", "/was/other", "not placed: not configured"),
        ("secrets file", "/was/sec.yaml", "not placed: not configured"),
    ]
    assert not allow.exists()


def test_outside_files_are_not_placed_when_the_restored_config_is_refused(
    tmp_path: Path,
) -> None:
    fill = _with_outside("version: 1\nnonsense_key: 3\n", {"mount-allowlist.yaml": (b"a", 0o644)},
                         {"mount-allowlist.yaml": "/was/allow.yaml"})  # fmt: skip
    root = tmp_path / "new"
    report = restore_backup(_archive(tmp_path / "b.tar", fill), Home(root))
    from orchestrator.config import load_config
    from orchestrator.errors import OrchestratorError

    with pytest.raises(OrchestratorError) as why:
        load_config(Home(root))
    assert report.outside == [
        ("outside/mount-allowlist.yaml", "/was/allow.yaml", f"not placed: {why.value.message}")
    ]
