"""Backups and restores word for word: what a restore writes (each file's mode and time,
each folder's), the reports and progress lines, where the state folder goes, the files
outside the home, a move that fails or crosses file systems, and each refusal's sentence
with nothing left behind; and what a backup of a small home holds."""

from __future__ import annotations

import errno
import gc
import gzip
import io
import os
import stat
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import orchestrator.backup.create as create
import orchestrator.backup.restore as restore
from orchestrator.backup import BackupInvalid, create_backup, restore_backup, verify_backup
from orchestrator.backup.archive import HEAD as HEAD_NAME
from orchestrator.backup.archive import MANIFEST as MANIFEST_NAME
from orchestrator.backup.archive import ArchiveWriter, Head, supported_versions
from orchestrator.backup.restore import RestoreFailed
from orchestrator.errors import BadInput
from orchestrator.home import Home
from orchestrator.versions import BACKUP_FORMAT_VERSION, RELEASE
from tests.clocks import local_zone

LAYOUT = {"layout": supported_versions()["layout"]}
HEAD = Head(BACKUP_FORMAT_VERSION, RELEASE, 1700000000.5, LAYOUT, {"home": "/old", "project": "p"},
            False, {"messages": 3})  # fmt: skip

Fill = Callable[[ArchiveWriter], None]


@pytest.fixture(autouse=True)
def _umask(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> object:
    monkeypatch.delenv("ORCHESTRATOR_STATE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # no default allowlist of the machine's
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
    config = f"version: 1\nmount_allowlist: {allow}\nsecrets_file: {secrets}\n"
    fill = _with_outside(config, {"mount-allowlist.yaml": (b"allowed_roots: []\n", 0o644),
                                  "secrets.yaml": (b"k: v\n", 0o640)})  # fmt: skip
    with local_zone("XXX-14"):  # far from UTC: the name's time is UTC
        before = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        report = restore_backup(_archive(tmp_path / "b.tar", fill), Home(tmp_path / "new"))
        after = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
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


# -- what a backup holds ------------------------------------------------------------------


def _small_home(tmp_path: Path, config: str = "") -> Home:
    root = tmp_path / "home"
    (root / "groups" / "fam" / "memory").mkdir(parents=True)
    (root / "groups" / "fam" / "memory" / "a.md").write_text("# A\n")
    os.chmod(root / "groups" / "fam" / "memory" / "a.md", 0o640)
    os.utime(root / "groups" / "fam" / "memory" / "a.md", (1_000_000_000, 1_000_000_000))
    os.chmod(root / "groups" / "fam", 0o750)
    (root / "orchestrator.yaml").write_text(f"version: 1\nproject: proj\n{config}")
    return Home(root)


def _members(archive: Path) -> dict[str, tuple[bytes, int, int, bytes | None]]:
    """Each member: (type, mode, mtime, bytes of a file) but the head and manifest."""
    out: dict[str, tuple[bytes, int, int, bytes | None]] = {}
    with tarfile.open(archive) as tar:
        for info in tar.getmembers():
            data = tar.extractfile(info).read() if info.isreg() else None  # type: ignore[union-attr]
            out[info.name] = (info.type, info.mode, int(info.mtime), data)
    return out


def test_a_backup_of_a_small_home_holds_its_members_with_modes_and_times(tmp_path: Path) -> None:
    home = _small_home(tmp_path)
    (home.root / "groups" / ".removed" / "old").mkdir(parents=True)
    (home.root / "groups" / "loose.txt").write_text("loose")
    os.mkfifo(home.root / "groups" / "pipe")
    (home.root / "skills" / "greet").mkdir(parents=True)
    (home.root / "skills" / "greet" / "SKILL.md").write_text("hi")
    (home.root / "skills" / "greet" / "link").symlink_to("/etc/passwd")
    (home.root / "skills-by-group").write_text("a file, not a folder")
    state = home.root / "state"
    state.mkdir()
    (state / "chat-history").write_text("line")
    (state / "consolidated.json").write_text("{}")
    (state / "other.json").write_text("{}")  # not worth keeping
    target = tmp_path / "b.tar"
    said: list[str] = []
    report = create_backup(home, target, progress=said.append)
    members = _members(target)
    assert list(members) == [
        HEAD_NAME, "state", "state/consolidated.json", "state/chat-history", "home",
        "home/orchestrator.yaml", "home/skills",
        "home/skills/greet", "home/skills/greet/SKILL.md", "home/groups",
        *sorted(["home/groups/fam", "home/groups/fam/memory", "home/groups/fam/memory/a.md",
                 "home/groups/.removed", "home/groups/.removed/old", "home/groups/loose.txt"],
                key=list(members).index),
        "outside", MANIFEST_NAME,
    ]  # fmt: skip
    assert members["state"][:2] == (tarfile.DIRTYPE, 0o700)
    assert members["home"][:2] == (tarfile.DIRTYPE, 0o755)
    assert members["outside"][:2] == (tarfile.DIRTYPE, 0o700)
    assert members["home/groups/fam"][:2] == (tarfile.DIRTYPE, 0o750)
    assert members["home/groups/fam/memory/a.md"] == (
        tarfile.REGTYPE, 0o640, 1_000_000_000, b"# A\n")  # fmt: skip
    assert members["home/groups/loose.txt"][3] == b"loose"
    assert members["state/chat-history"][3] == b"line"
    assert report.groups == ["fam"]
    assert sorted(report.skipped) == [
        ("home/groups/pipe", "a FIFO"),
        ("home/skills/greet/link", "a symlink"),
    ]
    assert report.files == 6
    assert report.bytes == 2 + 4 + 2 + len("version: 1\nproject: proj\n") + 4 + 5
    assert report.path == target
    assert report.size == target.stat().st_size
    assert _mode(target) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["b.tar", "home"]  # no partial file left
    assert sorted(said[:-1]) == ["groups/.removed: 0 files", "groups/fam: 1 files"]
    assert said[-1].startswith(f"wrote {target} ({report.size:,} bytes, 6 files) in ")
    assert report.to_dict() == {
        "path": str(target),
        "size": report.size,
        "release": RELEASE,
        "versions": report.head.versions,
        "secrets": False,
        "summary": {},
        "files": 6,
        "bytes": report.bytes,
        "groups": ["fam"],
        "skipped": [{"name": n, "why": w} for n, w in report.skipped],
        "secrets_left_out": [],
        "outside": {},
    }
    from orchestrator.versions import (
        CONFIG_FILE_VERSION,
        GROUP_FILE_VERSION,
        LAYOUT_VERSION,
        TRANSCRIPT_VERSION,
    )

    assert report.head.versions == {
        "layout": LAYOUT_VERSION,
        "group_file": GROUP_FILE_VERSION,
        "config_file": CONFIG_FILE_VERSION,
        "transcript": TRANSCRIPT_VERSION,
    }
    assert report.head.source == {"home": str(home.root), "project": "proj"}
    assert report.head.format == BACKUP_FORMAT_VERSION


def test_a_backup_copies_the_state_database_and_counts_it(tmp_path: Path) -> None:
    from orchestrator.store.messages import open_queue
    from orchestrator.store.schema import LATEST

    home = _small_home(tmp_path)
    queue = open_queue(home)
    try:
        queue.enqueue(group="fam", session="s", chat="c", thread=None, sender="a",
                      trust="creator", text="hi", channel="cli")  # fmt: skip
    finally:
        queue.close()
    said: list[str] = []
    report = create_backup(home, tmp_path / "b.tar.gz", progress=said.append)
    assert said[0] == "copying the state database (SQLite's online backup)"
    assert report.head.versions["schema"] == LATEST
    assert report.head.summary == {"messages": {"queued": 1}, "tasks": 0, "bindings": 0}
    members = _members(tmp_path / "b.tar.gz")
    assert members["state/queue.db"][:2] == (tarfile.REGTYPE, 0o600)
    assert list(members).index("state/queue.db") == 2


def test_secrets_go_in_only_when_asked_and_are_listed_otherwise(tmp_path: Path) -> None:
    secrets = tmp_path / "sec.yaml"
    secrets.write_text("k: v\n")
    allow = tmp_path / "allow.yaml"
    allow.write_text("allowed_roots: []\n")
    home = _small_home(tmp_path, f"secrets_file: {secrets}\nmount_allowlist: {allow}\n")
    (home.root / "orchestrator.env").write_text("A=1\n")
    left = create_backup(home, tmp_path / "a.tar")
    assert left.secrets_left_out == [str(home.root / "orchestrator.env"), str(secrets)]
    assert left.outside == {"outside/mount-allowlist.yaml": str(allow)}
    assert left.head.secrets is False
    members = _members(tmp_path / "a.tar")
    assert members["outside/mount-allowlist.yaml"][3] == b"allowed_roots: []\n"
    assert "home/orchestrator.env" not in members
    taken = create_backup(home, tmp_path / "b.tar", include_secrets=True)
    assert taken.secrets_left_out == []
    assert taken.head.secrets is True
    assert taken.outside == {
        "outside/mount-allowlist.yaml": str(allow),
        "outside/secrets.yaml": str(secrets),
    }
    members = _members(tmp_path / "b.tar")
    assert members["home/orchestrator.env"][3] == b"A=1\n"
    assert members["outside/secrets.yaml"][3] == b"k: v\n"
    secrets.unlink()
    allow.unlink()
    gone = create_backup(home, tmp_path / "c.tar")
    assert gone.secrets_left_out == [str(home.root / "orchestrator.env")]
    assert gone.outside == {}


def test_an_outside_file_that_is_not_a_regular_file_is_left_out(tmp_path: Path) -> None:
    allow = tmp_path / "allow.yaml"
    allow.symlink_to("/etc/passwd")
    home = _small_home(tmp_path, f"mount_allowlist: {allow}\n")
    report = create_backup(home, tmp_path / "a.tar")
    assert report.skipped == [(str(allow), "a symlink")]
    assert report.outside == {}


# the archive given up on is closed then, not left for the collector to close into the
# file closed by then (which Python reports as an exception it ignored)
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("name", ["a.tar", "a.tar.gz"])
def test_an_outside_file_that_cannot_be_read_is_named(tmp_path: Path, name: str) -> None:
    (tmp_path / "f").write_text("a file")
    allow = tmp_path / "f" / "allow.yaml"
    home = _small_home(tmp_path, f"mount_allowlist: {allow}\n")
    from orchestrator.errors import OrchestratorError

    with pytest.raises(OrchestratorError) as refused:
        create_backup(home, tmp_path / name)
    assert refused.value.message == f"cannot read {allow}: Not a directory"
    assert sorted(os.listdir(tmp_path)) == ["f", "home"]
    del refused
    gc.collect()


def test_a_file_swapped_or_removed_after_it_was_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.confined import ConfinedDir, UnsafePath

    home = _small_home(tmp_path)
    (home.root / "groups" / "fam" / "memory" / "b.md").write_text("b")
    (home.root / "groups" / "fam" / "memory" / "c.md").write_text("c")
    real = ConfinedDir.reading

    def reading(self: ConfinedDir, relative: str) -> object:
        if relative == "b.md":
            raise FileNotFoundError(2, "gone")
        if relative == "c.md":
            raise UnsafePath("c.md", "not a regular file", kind="a FIFO")
        if relative == "a.md":
            raise UnsafePath("a.md", "too large")
        return real(self, relative)

    monkeypatch.setattr(ConfinedDir, "reading", reading)
    report = create_backup(home, tmp_path / "a.tar")
    assert sorted(report.skipped) == [
        ("home/groups/fam/memory/a.md", "too large"),
        ("home/groups/fam/memory/c.md", "a FIFO"),
    ]
    assert report.files == 1  # orchestrator.yaml


def test_a_backup_tells_progress_per_file_once_the_seconds_have_gone_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _small_home(tmp_path)
    monkeypatch.setattr(create, "BACKUP_PROGRESS_SECONDS", 0)
    said: list[str] = []
    create_backup(home, tmp_path / "a.tar", progress=said.append)
    yaml_size = len("version: 1\nproject: proj\n")
    assert said[:3] == [
        f"  1 files, {yaml_size} bytes so far (home/orchestrator.yaml)",
        f"  2 files, {yaml_size + 4} bytes so far (home/groups/fam/memory/a.md)",
        "groups/fam: 1 files",
    ]


def test_where_a_backup_may_be_written_word_for_word(tmp_path: Path) -> None:
    home = _small_home(tmp_path)
    (home.root / "state").mkdir()
    (tmp_path / "link.tar").symlink_to(tmp_path / "nowhere")
    with pytest.raises(BadInput) as refused:
        create_backup(home, tmp_path / "link.tar")
    assert (
        refused.value.message == f"{tmp_path / 'link.tar'} exists; a backup never replaces a file"
    )
    assert refused.value.hint == "name another"
    with pytest.raises(BadInput) as refused:
        create_backup(home, tmp_path / "none" / "b.tar")
    assert refused.value.message == f"{tmp_path / 'none'} is not a folder"
    for inside in ("groups", "groups/fam", "state", "skills"):
        (home.root / inside).mkdir(exist_ok=True)
        target = home.root / inside / "b.tar"
        with pytest.raises(BadInput) as refused:
            create_backup(home, target)
        where = inside.split("/")[0]
        assert refused.value.message == (
            f"{target} is inside {home.root / where}, which the backup archives"
        )
        assert refused.value.hint == (
            "write it outside the home's groups/, state/ and skills folders"
        )
    (tmp_path / "via").symlink_to(home.root / "groups")
    with pytest.raises(BadInput):
        create_backup(home, tmp_path / "via" / "b.tar")
    create_backup(home, home.root / "b.tar")  # the home itself is no archived folder
    create_backup(home, home.root / "skillsx.tar")


def test_a_backup_whose_name_appears_meanwhile_replaces_nothing(tmp_path: Path) -> None:
    home = _small_home(tmp_path)
    target = tmp_path / "b.tar"

    def meanwhile(line: str) -> None:
        if line.startswith("groups/"):
            target.write_text("theirs")

    with pytest.raises(BadInput) as refused:
        create_backup(home, target, progress=meanwhile)
    assert refused.value.message == f"{target} exists; nothing was replaced"
    assert target.read_text() == "theirs"
    assert sorted(os.listdir(tmp_path)) == ["b.tar", "home"]


def test_the_default_name_is_dated_in_utc_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _small_home(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    with local_zone("XXX-14"):
        before = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        report = create_backup(home)
        after = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = report.path.name
    assert report.path.parent == out
    assert name.startswith("orchestrator-backup-proj-")
    assert name.endswith(".tar.gz")
    stamp = name.removeprefix("orchestrator-backup-proj-").removesuffix(".tar.gz")
    assert before <= stamp <= after
    with gzip.open(report.path) as unpacked:
        assert unpacked.read(1)  # gzip, as the name says


# -- the restore's edges --------------------------------------------------------------------


def test_a_newer_archive_is_refused_naming_it_by_verify_and_restore(tmp_path: Path) -> None:
    from orchestrator.versions import FileTooNew

    newer = Head(BACKUP_FORMAT_VERSION, "9.9.9", 1.0, {"layout": LAYOUT["layout"] + 1}, {}, False)
    path = tmp_path / "n.tar"
    with path.open("wb") as out:
        writer = ArchiveWriter(out, gzipped=False, spool_dir=tmp_path)
        writer.add_head(newer)
        writer.finish(newer)
    expected = (
        f"{path} was written by release 9.9.9, newer than this orchestrator ({RELEASE}): "
        f"layout {LAYOUT['layout'] + 1} (this release reads up to {LAYOUT['layout']}); "
        "nothing was restored"
    )
    with pytest.raises(FileTooNew) as refused:
        verify_backup(path)
    assert refused.value.message == expected
    with pytest.raises(FileTooNew) as refused:
        restore_backup(path, Home(tmp_path / "new"))
    assert refused.value.message == expected
    assert not (tmp_path / "new").exists()


def test_with_no_umask_the_home_staging_and_unlisted_folders_get_their_own_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.umask(0)
    root = tmp_path / "new"
    seen: dict[str, int] = {}
    real = restore.sync_filesystem

    def look(path: Path) -> None:
        seen["staging"] = _mode(path)
        seen["name"] = len(path.name)
        real(path)

    monkeypatch.setattr(restore, "sync_filesystem", look)

    def fill(w: ArchiveWriter) -> None:
        w.add_dir("home", 0o755, 1e9)
        _file(w, "home/a/b.txt", b"b")  # home/a is no member: made for the file

    restore_backup(_archive(tmp_path / "b.tar", fill), Home(root))
    assert _mode(root) == 0o755
    assert seen == {"staging": 0o700, "name": len(".restore-") + 8}
    assert _mode(root / "a") == 0o700
    assert os.stat(root / "a").st_uid == os.getuid()


def test_an_archive_without_a_home_folder_restores_its_state(tmp_path: Path) -> None:
    def fill(w: ArchiveWriter) -> None:
        w.add_dir("state", 0o700, 1e9)
        _file(w, "state/consolidated.json", b"{}")

    root = tmp_path / "new"
    restore_backup(_archive(tmp_path / "b.tar", fill), Home(root))
    assert os.listdir(root) == ["state"]


def test_an_undo_that_cannot_put_something_back_goes_on_and_raises_the_first_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    root = tmp_path / "new"

    def fail(staging: Path, *args: object) -> None:
        shutil.rmtree(root / "groups")  # cannot be moved back
        shutil.rmtree(staging)  # cannot be removed
        raise RuntimeError("after the moves")

    monkeypatch.setattr(restore, "_outside", fail)
    with pytest.raises(RuntimeError, match="after the moves"):
        restore_backup(_archive(tmp_path / "b.tar", _home_tree()), Home(root))
    assert sorted(os.listdir(root)) == ["orchestrator.yaml", "state"]  # nowhere to go back to


def test_a_file_then_a_member_under_it_at_the_top_is_refused(tmp_path: Path) -> None:
    def fill(w: ArchiveWriter) -> None:
        _file(w, "home", b"a file")
        _file(w, "home/x", b"x")

    archive = _archive(tmp_path / "b.tar", fill)
    with pytest.raises(BackupInvalid) as refused:
        restore_backup(archive, Home(tmp_path / "new"))
    assert refused.value.message == (
        f"{archive}: holds 'home' twice (two files, or a file and the folder of other members)"
    )


def test_a_file_that_cannot_be_written_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def utime(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "utime", utime)
    with pytest.raises(RestoreFailed) as refused:
        restore_backup(_archive(tmp_path / "b.tar", _home_tree()), Home(tmp_path / "new"))
    assert refused.value.message == (
        "cannot write state/consolidated.json: [Errno 5] Input/output error"
    )
    assert not (tmp_path / "new").exists()


def test_a_restore_tells_progress_once_the_seconds_have_gone_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _archive(tmp_path / "b.tar", _home_tree())
    clock = iter([100.0, 101.9, 102.0, 103.0])
    monkeypatch.setattr(restore.time, "monotonic", lambda: next(clock))
    said: list[str] = []
    restore_backup(archive, Home(tmp_path / "new"), said.append)
    assert said[1:-1] == ["  2 files written (home/orchestrator.yaml)"]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_restore_of_many_files_leaves_no_folder_open(tmp_path: Path) -> None:
    def fill(w: ArchiveWriter) -> None:
        w.add_dir("home", 0o755, 1e9)
        w.add_dir("home/a", 0o755, 1e9)
        w.add_dir("home/b", 0o755, 1e9)
        for n in range(40):
            _file(w, f"home/a/{n}", b"x")
        _file(w, "home/b/last", b"y")

    archive = _archive(tmp_path / "b.tar", fill)
    import gc

    gc.disable()  # a folder left open stays open
    try:
        before = _open_fds()
        restore_backup(archive, Home(tmp_path / "new"))
        assert _open_fds() == before
    finally:
        gc.enable()
    assert len(os.listdir(tmp_path / "new" / "a")) == 40


def test_a_file_placed_outside_is_never_readable_by_others_while_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.umask(0)
    secrets = tmp_path / "sec.yaml"
    config = f"version: 1\nsecrets_file: {secrets}\n"
    fill = _with_outside(config, {"secrets.yaml": (b"k: v\n", 0o600)})
    modes: list[int] = []
    real = os.fchmod

    def fchmod(fd: int, mode: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == str(secrets):
            modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        real(fd, mode)

    monkeypatch.setattr(os, "fchmod", fchmod)
    restore_backup(_archive(tmp_path / "b.tar", fill), Home(tmp_path / "new"))
    assert modes == [0o600]
    assert _mode(secrets) == 0o600


class _Libc:
    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.synced: list[str] = []

    def syncfs(self, fd: int) -> int:
        self.synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return self.answer


def test_sync_filesystem_syncs_the_file_system_of_the_path_or_every_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctypes
    import ctypes.util

    looked: list[str] = []
    loaded: list[str | None] = []
    synced_all: list[bool] = []
    libc = _Libc(0)
    monkeypatch.setattr(ctypes.util, "find_library", lambda n: looked.append(n) or "libc.so.6")
    monkeypatch.setattr(ctypes, "CDLL", lambda n, **kw: loaded.append(n) or libc)
    monkeypatch.setattr(os, "sync", lambda: synced_all.append(True))
    before = _open_fds()
    restore.sync_filesystem(tmp_path)
    assert (looked, loaded, libc.synced, synced_all) == (["c"], ["libc.so.6"], [str(tmp_path)], [])
    libc.answer = -1  # syncfs failed: every file system then
    restore.sync_filesystem(tmp_path)
    assert synced_all == [True]
    libc.answer = 1
    restore.sync_filesystem(tmp_path)
    assert synced_all == [True, True]
    assert _open_fds() == before
    monkeypatch.setattr(ctypes, "CDLL", lambda n, **kw: object())  # a libc without syncfs
    restore.sync_filesystem(tmp_path)
    assert synced_all == [True, True, True]
    monkeypatch.setattr(ctypes, "CDLL", lambda n, **kw: loaded.append(n) or libc)
    monkeypatch.setattr(ctypes.util, "find_library", lambda n: None)  # no libc found
    libc.synced.clear()
    restore.sync_filesystem(tmp_path)
    assert synced_all == [True, True, True, True]
    assert (loaded, libc.synced) == (["libc.so.6"] * 3, [])  # none loaded, syncfs not called
    monkeypatch.setattr(ctypes.util, "find_library", lambda n: "libc.so.6")
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        restore.sync_filesystem(tmp_path / "f")


def test_a_dangling_symlink_where_an_outside_file_goes_gets_the_file_beside_it(
    tmp_path: Path,
) -> None:
    allow = tmp_path / "allow.yaml"
    allow.symlink_to(tmp_path / "nowhere")
    config = f"version: 1\nmount_allowlist: {allow}\n"
    fill = _with_outside(config, {"mount-allowlist.yaml": (b"a: 1\n", 0o644)})
    report = restore_backup(_archive(tmp_path / "b.tar", fill), Home(tmp_path / "new"))
    (aside,) = tmp_path.glob("allow.yaml.restored-*")
    assert report.outside == [
        ("mount allowlist", str(allow), f"another file is there: the archived one is at {aside}")
    ]
    assert aside.read_bytes() == b"a: 1\n"
    assert allow.is_symlink()
    assert not (tmp_path / "nowhere").exists()


def test_a_symlink_made_where_an_outside_file_goes_just_before_it_is_written_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow = tmp_path / "etc" / "allow.yaml"
    target = tmp_path / "target"
    config = f"version: 1\nmount_allowlist: {allow}\n"
    fill = _with_outside(config, {"mount-allowlist.yaml": (b"a: 1\n", 0o644)})
    real = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        if self == allow.parent:
            allow.symlink_to(target)  # someone else, between the check and the write

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(FileExistsError):
        restore_backup(_archive(tmp_path / "b.tar", fill), Home(tmp_path / "new"))
    assert not target.exists()
    assert not (tmp_path / "new").exists()


def test_a_backup_tells_progress_once_the_seconds_have_gone_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    home = _small_home(tmp_path)
    ticks = [100.0, 100.0, 101.9, 102.0, 102.5]  # started, the tree's start, one per file

    def monotonic() -> float:
        return ticks.pop(0) if len(ticks) > 1 else ticks[0] + 1

    clock = types.SimpleNamespace(**{n: getattr(time, n) for n in ("time", "strftime", "gmtime")})
    clock.monotonic = monotonic
    monkeypatch.setattr(create, "time", clock)
    said: list[str] = []
    create_backup(home, tmp_path / "a.tar", progress=said.append)
    yaml_size = len("version: 1\nproject: proj\n")
    assert said[0] == f"  2 files, {yaml_size + 4} bytes so far (home/groups/fam/memory/a.md)"
    assert said[-1].endswith(" bytes, 2 files) in 3.5s")


def test_a_backup_works_beside_its_target_and_leaves_nothing_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    import orchestrator.backup.archive as archive

    home = _small_home(tmp_path)
    monkeypatch.setattr(archive, "BACKUP_SPOOL_BYTES", 1)  # every file spooled to disk
    monkeypatch.chdir(tmp_path / "home")
    out = tmp_path / "out"
    out.mkdir()
    seen: list[list[str]] = []

    def look(line: str) -> None:
        if line.startswith("groups/"):
            seen.append(sorted(os.listdir(out)))

    create_backup(home, out / "b.tar", progress=look)
    ((partial, work),) = seen
    assert re.fullmatch(r"\.b\.tar\.partial-[0-9a-f]{8}", partial), partial
    assert work.startswith(".orchestrator-backup-")
    assert os.listdir(out) == ["b.tar"]


def test_a_partial_name_that_is_taken_is_never_written_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _small_home(tmp_path)
    taken = tmp_path / ".b.tar.partial-00000000"
    taken.write_text("someone else's")
    monkeypatch.setattr(os, "urandom", lambda n: bytes(n))
    with pytest.raises(FileExistsError):
        create_backup(home, tmp_path / "b.tar")
    assert taken.read_text() == "someone else's"
    assert not (tmp_path / "b.tar").exists()


def test_the_layout_a_state_database_records_is_the_backups(tmp_path: Path) -> None:
    import sqlite3

    from orchestrator.store.messages import open_queue
    from orchestrator.store.schema import HOME_LAYOUT

    home = _small_home(tmp_path)
    open_queue(home).close()
    db = sqlite3.connect(home.state_dir / "queue.db")
    with db:
        db.execute("DELETE FROM home WHERE key=?", (HOME_LAYOUT,))
    db.close()
    assert create_backup(home, tmp_path / "b.tar").head.versions["layout"] == 1


def test_a_symlink_to_a_folder_is_left_out_and_listed_not_followed(tmp_path: Path) -> None:
    home = _small_home(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret").write_text("s")
    (home.root / "groups" / "aaa").symlink_to(elsewhere)
    (home.root / "groups" / "fam" / "memory" / "dir-link").symlink_to(elsewhere)
    (home.root / "groups" / "fam" / "memory" / "gone").symlink_to(tmp_path / "nowhere")
    os.mkfifo(home.root / "groups" / "0pipe")
    report = create_backup(home, tmp_path / "b.tar")
    assert sorted(report.skipped) == [
        ("home/groups/0pipe", "a FIFO"),
        ("home/groups/aaa", "a symlink"),
        ("home/groups/fam/memory/dir-link", "a symlink"),
        ("home/groups/fam/memory/gone", "a symlink"),
    ]
    assert report.groups == ["fam"]
    assert "home/groups/fam/memory/a.md" in _members(tmp_path / "b.tar")


def test_an_entry_gone_or_swapped_after_it_was_listed_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.confined import ConfinedDir, UnsafePath

    home = _small_home(tmp_path)
    (home.root / "groups" / "aaa").mkdir()
    (home.root / "groups" / "fam" / "memory" / "0gone").write_text("x")
    real_open, real_walk = ConfinedDir.open_dir, ConfinedDir.walk

    def open_dir(self: ConfinedDir, relative: str, **kwargs: object) -> ConfinedDir:
        if relative == "aaa":
            raise UnsafePath("aaa", "swapped for a symlink")
        return real_open(self, relative, **kwargs)  # type: ignore[arg-type]

    class Gone:
        name = "0gone"

        def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
            raise FileNotFoundError(2, "gone")

    def walk(self: ConfinedDir, **kwargs: object) -> object:
        for rel, folder, entries in real_walk(self, **kwargs):  # type: ignore[arg-type]
            yield rel, folder, [Gone() if e.name == "0gone" else e for e in entries]

    monkeypatch.setattr(ConfinedDir, "open_dir", open_dir)
    monkeypatch.setattr(ConfinedDir, "walk", walk)
    report = create_backup(home, tmp_path / "b.tar")
    members = _members(tmp_path / "b.tar")
    assert "home/groups/fam/memory/a.md" in members
    assert "home/groups/fam/memory/0gone" not in members
    assert "home/groups/aaa" not in members
    assert report.groups == ["fam"]
    assert report.skipped == []
