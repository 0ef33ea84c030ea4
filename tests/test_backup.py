"""Backups and restores without an engine: what an archive holds and what it never holds
(a symlink, FIFO or device from a folder a container can write), the state database
copied whole while it is written, secrets only when asked, a manifest that every file
must match, and a restore that refuses a damaged, crafted or newer archive, or a home
that is not empty, with nothing changed."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import threading
import time
from pathlib import Path

import pytest

from orchestrator.backup import BackupInvalid, create_backup, restore_backup, verify_backup
from orchestrator.backup.archive import HEAD, MANIFEST
from orchestrator.errors import BadInput
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.memory.history import HOST, History, Provenance
from orchestrator.store.chats import ChatStore
from orchestrator.store.messages import QUEUE_FILE, open_queue
from orchestrator.store.tasks import TaskStore
from orchestrator.versions import RELEASE, FileTooNew

ALLOWLIST_TEXT = "allowed_roots:\n  - path: /srv/shared\n"


def _tree(root: Path) -> dict[str, tuple[str, int]]:
    """Every entry under ``root``: (kind, and a file's sha256 or a folder's mode)."""
    out: dict[str, tuple[str, int]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            st = os.lstat(path)
            rel = str(path.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = (digest, stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("dir" if stat.S_ISDIR(st.st_mode) else "other", 0)
    return out


@pytest.fixture
def source(tmp_path: Path) -> Home:
    """A home with two groups (memory, history, sessions, files), a removed group, an
    installed skill, the state database with messages, a task, a binding and a pairing,
    a mount allowlist outside the home, a secrets file and orchestrator.env; and what a
    hostile container may leave in the folders it writes: a symlink, a FIFO."""
    root = tmp_path / "home"
    root.mkdir()
    allowlist = tmp_path / "config" / "mount-allowlist.yaml"
    allowlist.parent.mkdir()
    allowlist.write_text(ALLOWLIST_TEXT)
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("openai: sk-test-123\n")
    secrets.chmod(0o600)
    (root / "orchestrator.yaml").write_text(
        f"version: 1\nmount_allowlist: {allowlist}\nsecrets_file: {secrets}\n"
    )
    (root / "orchestrator.env").write_text("OPENAI_KEY=sk-env-456\n")
    home = Home(root)
    store = GroupStore(home)
    for name in ("Family", "Work", "Old"):
        group = store.add(GroupConfig(name=name, creators=("alice",)))
        (group.memory_dir / "facts").mkdir()
        (group.memory_dir / "facts" / "cat.md").write_text(f"# Cat\n{name}'s cat is Tom.\n")
        (group.sessions_dir / "cli.chat-c").mkdir(parents=True)
        (group.sessions_dir / "cli.chat-c" / "transcript.jsonl").write_text('{"t": "note"}\n')
        group.files_dir.mkdir()
        (group.files_dir / "report.bin").write_bytes(os.urandom(3 * 1024 * 1024))  # spooled
        History(home.groups_dir, group.folder).record(Provenance(HOST, note="baseline"))
    store.remove(store.load("old"), purge=False)
    family = store.load("family")
    (family.memory_dir / "evil.md").symlink_to("/etc/passwd")
    (family.sessions_dir / "cli.chat-x").symlink_to("/root")
    os.mkfifo(family.files_dir / "pipe")
    if os.geteuid() == 0:  # a device like /dev/null's, as a container's root could not make
        os.mknod(family.files_dir / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    (root / "skills" / "greet").mkdir(parents=True)
    (root / "skills" / "greet" / "SKILL.md").write_text("---\nname: greet\n---\nHi.\n")
    queue = open_queue(home)
    try:
        for n in range(5):
            queue.enqueue(group="family", session="cli.chat-c", chat="c", thread=None,
                          sender="alice", trust="creator", text=f"m{n}", channel="cli")  # fmt: skip
        ChatStore(queue).bind("familybot", "4242", "family")
        ChatStore(queue).request_pairing("familybot", "999", title="x", requested_by="bob")
        TaskStore(queue).add(group="family", chat="c", thread=None, channel="cli", text="hi",
                             kind="every", spec="3600", tz=None, author="alice",
                             author_trust="creator", settings=family.config.tasks)  # fmt: skip
    finally:
        queue.close()
    (home.state_dir / "consolidated.json").write_text('{"family": "2026-11-30"}')
    return home


def _names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


def _db_rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return {
            table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("messages", "tasks", "bindings", "pairings", "home")
        }
    finally:
        db.close()


def test_a_backup_restores_into_a_new_home_whole_and_without_special_files(
    source: Home, tmp_path: Path
) -> None:
    lines: list[str] = []
    archive = tmp_path / "b.tar.gz"
    report = create_backup(source, archive, progress=lines.append)
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert report.groups == ["family", "work"] and report.head.release == RELEASE
    assert report.head.summary["messages"] == {"queued": 5} and report.head.summary["tasks"] == 1
    device = [("home/groups/family/files/null", "a device file")] if os.geteuid() == 0 else []
    assert sorted(report.skipped) == [
        *device,
        ("home/groups/family/files/pipe", "a FIFO"),
        ("home/groups/family/memory/evil.md", "a symlink"),
        ("home/groups/family/sessions/cli.chat-x", "a symlink"),
    ]
    assert sorted(report.secrets_left_out) == sorted(
        [str(source.root / "orchestrator.env"), str(tmp_path / "secrets.yaml")]
    )
    assert any("state database" in line for line in lines)
    assert any(line.startswith("groups/family:") for line in lines)

    verified = verify_backup(archive)
    assert len(verified.manifest.files) == report.files

    (tmp_path / "config" / "mount-allowlist.yaml").unlink()  # a new machine has none
    restored = restore_backup(archive, Home(tmp_path / "new"))
    new = tmp_path / "new"
    before, after = _tree(source.groups_dir), _tree(new / "groups")
    special = ["family/memory/evil.md", "family/files/pipe", "family/sessions/cli.chat-x"]
    for name in special + (["family/files/null"] if device else []):
        assert before.pop(name)[0] == "other" and name not in after  # never made
    assert after == before  # every file, its bytes and its mode; history and removed ones
    assert (new / "skills/greet/SKILL.md").read_text() == "---\nname: greet\n---\nHi.\n"
    assert (new / "state/consolidated.json").read_text() == '{"family": "2026-11-30"}'
    assert not (new / "orchestrator.env").exists() and restored.manifest.secrets_left_out
    assert _db_rows(new / "state" / QUEUE_FILE) == _db_rows(source.state_dir / QUEUE_FILE)
    assert not list(new.glob(".restore-*"))
    allowlist = tmp_path / "config" / "mount-allowlist.yaml"
    assert allowlist.read_text() == ALLOWLIST_TEXT
    assert restored.outside == [("mount allowlist", str(allowlist), "written")]
    # the restored home works: its groups load, its history answers
    store = GroupStore(Home(new))
    assert [g.folder for g in store.groups()] == ["family", "work"]
    assert History(new / "groups", "family").log()[0].provenance.note == "baseline"


def test_secrets_go_in_only_when_asked_and_come_back_as_they_were(
    source: Home, tmp_path: Path
) -> None:
    archive = tmp_path / "with-secrets.tar"
    report = create_backup(source, archive, include_secrets=True)
    assert report.head.secrets and report.secrets_left_out == []
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    names = _names(archive)
    assert "home/orchestrator.env" in names and "outside/secrets.yaml" in names
    plain = tmp_path / "without.tar"
    create_backup(source, plain)
    held = _names(plain)
    assert "home/orchestrator.env" not in held and "outside/secrets.yaml" not in held
    assert b"sk-test-123" not in plain.read_bytes() and b"sk-env-456" not in plain.read_bytes()
    # the secrets file is where the configuration names it: another file there stays
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("openai: changed\n")
    restored = restore_backup(archive, Home(tmp_path / "new"))
    assert secrets.read_text() == "openai: changed\n"
    (aside,) = tmp_path.glob("secrets.yaml.restored-*")
    assert (
        aside.read_text() == "openai: sk-test-123\n" and stat.S_IMODE(aside.stat().st_mode) == 0o600
    )
    assert (
        "secrets file",
        str(secrets),
        f"another file is there: the archived one is at {aside}",
    ) in restored.outside
    assert (tmp_path / "new/orchestrator.env").read_text() == "OPENAI_KEY=sk-env-456\n"


def test_the_state_database_is_copied_whole_while_it_is_written(
    source: Home, tmp_path: Path
) -> None:
    queue = open_queue(source)
    accepted: list[tuple[float, str]] = []
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.is_set():
            message = queue.enqueue(group="family", session="cli.chat-c", chat="c",
                                    thread=None, sender="alice", trust="creator",
                                    text=f"load {n}", channel="cli")  # fmt: skip
            accepted.append((time.monotonic(), message.id))
            n += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while len(accepted) < 50:
            time.sleep(0.01)
        started = time.monotonic()
        archive = tmp_path / "b.tar.gz"
        create_backup(source, archive)
        finished = time.monotonic()
    finally:
        stop.set()
        writer.join()
        queue.close()
    restore_backup(archive, Home(tmp_path / "new"))
    restored = {row[1] for row in _db_rows(tmp_path / "new/state" / QUEUE_FILE)["messages"]}
    before = {mid for at, mid in accepted if at < started}
    after = {mid for at, mid in accepted if at > finished}
    assert before <= restored  # every message accepted before the backup began
    assert not (after & restored)  # none accepted after it ended
    assert len(restored) >= len(before) + 5


def test_a_restore_needs_an_empty_home_and_changes_nothing_else(
    source: Home, tmp_path: Path
) -> None:
    archive = tmp_path / "b.tar.gz"
    create_backup(source, archive)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(BadInput) as refused:
        restore_backup(archive, Home(taken))
    assert refused.value.message == (
        f"{taken} is not empty; a restore goes into an empty home only"
    )
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]
    with pytest.raises(BadInput):  # a folder that the restored state_dir names, not empty
        os.environ["ORCHESTRATOR_STATE_DIR"] = str(taken)
        try:
            restore_backup(archive, Home(tmp_path / "new"))
        finally:
            del os.environ["ORCHESTRATOR_STATE_DIR"]
    assert not (tmp_path / "new").exists()  # made for the restore, and taken away again


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_a_damaged_archive_is_refused_by_verify_and_by_restore(
    source: Home, tmp_path: Path, suffix: str
) -> None:
    archive = tmp_path / f"b{suffix}"
    create_backup(source, archive)
    data = bytearray(archive.read_bytes())
    if suffix == ".tar":
        at = data.index(b"Family's cat is Tom.")
        data[at] ^= 0x20  # one letter's case, inside a memory file
        expected = "does not match its manifest: home/groups/family/memory/facts/cat.md is"
    else:
        at = len(data) // 2
        data[at : at + 16] = bytes(16)  # sixteen bytes of the compressed stream
        expected = ""
    damaged = tmp_path / f"damaged{suffix}"
    damaged.write_bytes(bytes(data))
    for check in (verify_backup, lambda a: restore_backup(a, Home(tmp_path / "new"))):
        with pytest.raises(BackupInvalid) as refused:
            check(damaged)
        assert refused.value.message.startswith(f"{damaged}: ")
        assert expected in refused.value.message
        assert not (tmp_path / "new").exists()
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size * 2 // 3])
    with pytest.raises(BackupInvalid):
        restore_backup(cut, Home(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def _crafted(path: Path, extra: tarfile.TarInfo, data: bytes = b"") -> None:
    """An archive with a valid head and manifest around ``extra``."""
    head = {"format": 1, "release": RELEASE, "created": 1.0, "versions": {"layout": 2},
            "source": {}, "secrets": False}  # fmt: skip
    head_bytes = json.dumps(head).encode()
    files = {}
    if extra.isreg():
        files[extra.name] = [len(data), hashlib.sha256(data).hexdigest()]
    manifest = {"head_sha256": hashlib.sha256(head_bytes).hexdigest(), "files": files,
                "dirs": ["home"]}  # fmt: skip
    with tarfile.open(path, "w") as tar:
        for name, content in ((HEAD, head_bytes),):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        home = tarfile.TarInfo("home")
        home.type = tarfile.DIRTYPE
        tar.addfile(home)
        tar.addfile(extra, io.BytesIO(data) if extra.isreg() else None)
        body = json.dumps(manifest).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))


@pytest.mark.parametrize(
    ("kind", "linkname", "shown"),
    [
        (tarfile.SYMTYPE, "/etc/passwd", "a symlink"),
        (tarfile.LNKTYPE, "home/x", "a hard link"),
        (tarfile.FIFOTYPE, "", "a FIFO"),
        (tarfile.CHRTYPE, "", "a device file"),
    ],
)
def test_an_archive_holding_anything_but_files_and_folders_is_refused_whole(
    tmp_path: Path, kind: bytes, linkname: str, shown: str
) -> None:
    archive = tmp_path / "crafted.tar"
    member = tarfile.TarInfo("home/groups/fam/memory/index.md")
    member.type, member.linkname = kind, linkname
    _crafted(archive, member)
    target = tmp_path / "new"
    with pytest.raises(BackupInvalid) as refused:
        restore_backup(archive, Home(target))
    assert refused.value.message == (
        f"{archive}: holds {shown} at 'home/groups/fam/memory/index.md'; a backup holds "
        "regular files and folders only (nothing was restored from it)"
    )
    assert not target.exists()
    with pytest.raises(BackupInvalid):
        verify_backup(archive)


@pytest.mark.parametrize("name", ["home/../../etc/cron.d/x", "/etc/x", "elsewhere/x", "home//x"])
def test_an_archive_naming_a_path_outside_what_a_backup_holds_is_refused(
    tmp_path: Path, name: str
) -> None:
    archive = tmp_path / "crafted.tar"
    member = tarfile.TarInfo(name)
    member.size = 2
    _crafted(archive, member, b"hi")
    with pytest.raises(BackupInvalid) as refused:
        restore_backup(archive, Home(tmp_path / "new"))
    assert "outside what a backup holds" in refused.value.message
    assert not (tmp_path / "new").exists()


def test_a_backup_of_a_newer_release_is_refused_before_anything_is_written(
    source: Home, tmp_path: Path
) -> None:
    from orchestrator.store.schema import LATEST

    archive = tmp_path / "b.tar"
    create_backup(source, archive)
    newer = tmp_path / "newer.tar"
    with tarfile.open(archive) as tar, tarfile.open(newer, "w") as out:
        for info in tar.getmembers():
            data = tar.extractfile(info).read() if info.isreg() else None  # type: ignore[union-attr]
            if info.name == HEAD:
                head = json.loads(data or b"")
                head["release"], head["versions"]["schema"] = "9.0.0", LATEST + 1
                data = json.dumps(head).encode()
                info.size = len(data)
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    with pytest.raises(FileTooNew) as refused:
        restore_backup(newer, Home(tmp_path / "new"))
    assert refused.value.message == (
        f"{newer} was written by release 9.0.0, newer than this orchestrator ({RELEASE}): "
        f"schema {LATEST + 1} (this release reads up to {LATEST}); nothing was restored"
    )
    assert not (tmp_path / "new").exists()


def test_where_a_backup_may_be_written(source: Home, tmp_path: Path) -> None:
    existing = tmp_path / "b.tar.gz"
    existing.write_text("keep me")
    with pytest.raises(BadInput, match="exists; a backup never replaces a file"):
        create_backup(source, existing)
    assert existing.read_text() == "keep me"
    with pytest.raises(BadInput, match=r"ends in \.tar, \.tar\.gz or \.tgz"):
        create_backup(source, tmp_path / "b.zip")
    with pytest.raises(BadInput, match="which the backup archives"):
        create_backup(source, source.groups_dir / "family" / "files" / "b.tar")
    assert not list(tmp_path.glob(".b.tar*"))  # no partial file left


def test_the_cli_backs_up_verifies_and_restores_with_its_exit_codes(
    source: Home, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from orchestrator.cli import cli

    def orchestrator(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    archive = tmp_path / "b.tar.gz"
    made = orchestrator("--home", str(source.root), "backup", "--to", str(archive), "--json")
    assert made.exit_code == 0, made.output
    described = json.loads(made.stdout)
    assert described["path"] == str(archive) and described["groups"] == ["family", "work"]
    checked = orchestrator("backup", "--verify", str(archive))
    assert checked.exit_code == 0 and f"{archive}: ok" in checked.stdout
    both = orchestrator("backup", "--verify", str(archive), "--to", str(tmp_path / "x.tar"))
    assert both.exit_code == 2
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(gzip.compress(b"not a tar at all"))
    assert orchestrator("backup", "--verify", str(damaged)).exit_code == 1
    restored = orchestrator("--home", str(tmp_path / "new"), "restore", str(archive))
    assert restored.exit_code == 0, restored.output
    assert f"into {tmp_path / 'new'}" in restored.stdout and "orchestrator.env" in restored.stdout
    again = orchestrator("--home", str(tmp_path / "new"), "restore", str(archive))
    assert again.exit_code == 2 and "is not empty" in again.stderr
