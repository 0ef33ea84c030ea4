"""Fuzzing backup archives as `orchestrator backup --verify` and `orchestrator restore` read
them (orchestrator/backup/restore.py, archive.py): an archive may be damaged, cut
short or made by someone else. Two sources: the bytes of real backups (plain and
gzipped), mutated; and archives built member by member, with names, types and modes
a backup never holds, around a head and a manifest that match them (so that only the
members' own checks stand between them and the restore).

verify_backup gives a VerifyReport or refuses with OrchestratorError (BackupInvalid,
FileTooNew; its docstring), never another exception. restore_backup into a new folder
gives a RestoreReport or refuses with OrchestratorError (BadInput, BackupInvalid,
FileTooNew, RestoreFailed) and then leaves no folder behind ("a refused archive leaves
the folder as it was"); either way it writes nothing outside that folder, and what it
restores holds regular files and folders only, without setuid, setgid or sticky bits.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from functools import cache
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.backup import create_backup, restore_backup, verify_backup
from orchestrator.backup.archive import HEAD, MANIFEST
from orchestrator.errors import OrchestratorError
from orchestrator.home import STATE_DIR_ENV, Home
from orchestrator.versions import RELEASE
from tests.fuzzing import fuzz, mutated


@cache
def real_backups() -> tuple[bytes, bytes]:
    """A backup of a small home with one group, plain and gzipped."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "home"
        root.mkdir()
        (root / "orchestrator.yaml").write_text("version: 1\n")
        memory = root / "groups" / "fam" / "memory"
        memory.mkdir(parents=True)
        (memory / "index.md").write_text("---\ntype: index\n---\n# Fam\nThe cat is Tom.\n")
        (root / "groups" / "fam" / "group.yaml").write_text('version: 1\nname: "Fam"\n')
        plain, gzipped = Path(tmp) / "b.tar", Path(tmp) / "b.tar.gz"
        create_backup(Home(root), plain)
        create_backup(Home(root), gzipped)
        return plain.read_bytes(), gzipped.read_bytes()


HEAD_JSON = {"format": 1, "release": RELEASE, "created": 1.0, "versions": {"layout": 2},
             "source": {}, "secrets": False}  # fmt: skip
KINDS = {
    "file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE, "char": tarfile.CHRTYPE,
    "contiguous": tarfile.CONTTYPE, "other": b"Z",
}  # fmt: skip
names = st.one_of(
    st.sampled_from([
        "home", "home/groups", "home/groups/fam", "home/groups/fam/memory/index.md",
        "home/orchestrator.yaml", "state", "state/messages.db", "outside",
        "outside/mount-allowlist.yaml", "home/../../escape", "/etc/cron.d/x", "home//x",
        "home/./x", "./home/x", "elsewhere/x", "home/x/", "home/\x00x", "home/" + "a" * 300,
        "home/" + "/".join(["d"] * 200), HEAD, MANIFEST, "home/..", "home/groups/..\\..",
    ]),
    st.text(alphabet="homestate/.\\x\x00é", max_size=20),
)  # fmt: skip
members = st.tuples(
    names,
    st.sampled_from(sorted(KINDS)),
    st.binary(max_size=40),
    st.sampled_from([0o644, 0o755, 0o4755, 0o2755, 0o1777, 0o000, 0o7777]),
    st.sampled_from(["", "/etc/passwd", "../../x", "home/groups", "home/orchestrator.yaml"]),
)


def built(items: list[tuple[str, str, bytes, int, str]], manifest_matches: bool) -> bytes:
    """A tar of a head, ``items`` and a manifest that lists them (or lists none)."""
    head = json.dumps(HEAD_JSON).encode()
    files, dirs = {}, []
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(HEAD)
        info.size = len(head)
        tar.addfile(info, io.BytesIO(head))
        for name, kind, data, mode, link in items:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.linkname, info.mtime = KINDS[kind], mode, link, 1.0
            if kind == "file":
                info.size = len(data)
                files[name] = [len(data), hashlib.sha256(data).hexdigest()]
            elif kind == "dir":
                dirs.append(name)
            tar.addfile(info, io.BytesIO(data) if kind == "file" else None)
        manifest = {"head_sha256": hashlib.sha256(head).hexdigest(),
                    "files": files if manifest_matches else {},
                    "dirs": dirs if manifest_matches else []}  # fmt: skip
        body = json.dumps(manifest).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def archives() -> st.SearchStrategy[tuple[bytes, bool]]:
    """(the archive's bytes, gzipped)."""
    plain, gzipped = real_backups()
    crafted = st.builds(built, st.lists(members, max_size=6), st.booleans())
    return st.one_of(
        st.tuples(mutated([plain], max_edits=4), st.just(False)),
        st.tuples(mutated([gzipped], max_edits=4), st.just(True)),
        st.tuples(crafted, st.just(False)),
        st.tuples(crafted.map(gzip.compress), st.just(True)),
    )


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its mode and size (links not followed)."""
    found = {}
    for folder, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(folder) / name
            info = path.lstat()
            found[str(path.relative_to(root))] = (info.st_mode, info.st_size)
    return found


def check(raw: bytes, gzipped: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = Path(tmp)
        archive = sandbox / ("backup.tar.gz" if gzipped else "backup.tar")
        archive.write_bytes(raw)
        before = tree(sandbox)
        try:
            verify_backup(archive)
        except OrchestratorError as exc:
            assert exc.message
        target = sandbox / "restored"
        try:
            restore_backup(archive, Home(target))
        except OrchestratorError as exc:
            assert exc.message
            assert not target.exists(), "a refused archive left its folder behind"
        else:
            for path, (mode, _) in tree(target).items():
                assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), path
                assert not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), path
        after = {p: m for p, m in tree(sandbox).items() if not p.startswith("restored")}
        assert after == before, "written outside the restored folder"


@fuzz(60)
@given(archive=archives())
@example(archive=(real_backups()[0], False))
@example(archive=(real_backups()[1], True))
@example(archive=(built([("home", "dir", b"", 0o755, ""),
                         ("home/x", "file", b"hi", 0o4755, "")], True), False))  # fmt: skip
@example(archive=(built([("home", "dir", b"", 0o755, ""), ("home/x", "file", b"a", 0o644, ""),
                         ("home/x", "dir", b"", 0o755, "")], True), False))  # fmt: skip
@example(archive=(built([("home/x", "file", b"a", 0o644, ""), ("home/x/y", "file", b"b", 0o644,
                                                                 "")], True), False))  # fmt: skip
def test_any_archive_is_verified_and_restored_or_refused_whole(archive: tuple[bytes, bool]) -> None:
    saved = os.environ.pop(STATE_DIR_ENV, None)  # the state folder goes inside the home
    try:
        check(*archive)
    finally:
        if saved is not None:
            os.environ[STATE_DIR_ENV] = saved
