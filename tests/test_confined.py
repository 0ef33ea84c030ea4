"""The confined file layer, and host code that uses it, under a hostile group's attacks.

A separate process exchanges a folder and a symlink in a loop (renameat2 with
RENAME_EXCHANGE), as a container can inside its own mounts, while host code runs over the
same tree. Canary files outside the group (root-owned, and another group's) must keep
their owner and bytes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

import pytest

from orchestrator.confined import ConfinedDir, UnsafePath, split
from orchestrator.groups import Group, memory_usage
from orchestrator.memory.lint import lint_memory
from orchestrator.memory.reading import render_memory
from orchestrator.memory.scaffold import scaffold_memory
from tests.hostile import fingerprint, swapping

ROUNDS = 150
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="ownership attacks need root")


# the layer itself


def test_split_refuses_escapes() -> None:
    assert split("a/./b//c") == ["a", "b", "c"]
    for bad in ("/etc/passwd", "a/../b", "..", "a\x00b"):
        with pytest.raises(UnsafePath):
            split(bad)


def test_reads_refuse_links_and_special_files_and_cap_size(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d/f.md").write_text("hello")
    (tmp_path / "outside.md").write_text("secret")
    (tmp_path / "d/link.md").symlink_to(tmp_path / "outside.md")
    (tmp_path / "d/sub").symlink_to(tmp_path)
    os.mkfifo(tmp_path / "d/fifo.md")
    with ConfinedDir.open(tmp_path, "d") as d:
        assert d.read_text("f.md", 100) == "hello"
        with pytest.raises(UnsafePath, match="is a symlink, not a regular file"):
            d.read_bytes("link.md", 100)
        with pytest.raises(UnsafePath, match="is a symlink, not a folder"):
            d.read_bytes("sub/outside.md", 100)
        with pytest.raises(UnsafePath, match="is a FIFO, not a regular file"):
            d.read_bytes("fifo.md", 100)  # returns at once: the open does not block
        with pytest.raises(UnsafePath, match="over the 3-byte read limit"):
            d.read_bytes("f.md", 3)
        assert d.read_bytes("f.md", 3, truncate=True) == b"hel"
        with pytest.raises(FileNotFoundError):
            d.read_bytes("missing.md", 10)


def test_atomic_write_replaces_a_link_and_refuses_a_folder(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("untouched")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dir").mkdir()
    with ConfinedDir.open(tmp_path) as d:
        d.write_atomic("link", "new")
        with pytest.raises(UnsafePath, match="is a folder"):
            d.write_atomic("dir", "x")
        assert d.create_exclusive("fresh", "1") is True
        assert d.create_exclusive("fresh", "2") is False
    assert (tmp_path / "target").read_text() == "untouched"
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "link").read_text() == "new"
    assert (tmp_path / "fresh").read_text() == "1"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@needs_root
def test_made_folders_and_files_get_their_owner_once(tmp_path: Path) -> None:
    with ConfinedDir.open(tmp_path) as d:
        assert d.make_dir("m", owner=(4242, 4243)) is True
        assert d.make_dir("m", owner=(1, 1)) is False
        with d.open_dir("m") as m:
            m.write_atomic("f", "x")  # inherits the folder's owner
            m.write_atomic("g", "x", owner=None)
    assert os.stat(tmp_path / "m")[4:6] == (4242, 4243)
    assert stat.S_IMODE(os.stat(tmp_path / "m").st_mode) == 0o755
    assert os.stat(tmp_path / "m/f")[4:6] == (4242, 4243)
    assert os.stat(tmp_path / "m/g")[4:6] == (0, 0)


# attacks


@pytest.fixture
def two_groups(tmp_path: Path) -> tuple[Path, Path, Path]:
    """groups/a (the attacker), groups/b (the victim), and a root-owned canary folder."""
    groups = tmp_path / "groups"
    for name in ("a", "b"):
        (groups / name).mkdir(parents=True)
        scaffold_memory(groups / name)
    (groups / "b/memory/system/definition.md").write_text("B's own doctrine\n")
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "secret.md").write_text("root's secret\n")
    return groups / "a", groups / "b", canary


def _bait(folder: Path, target: Path) -> tuple[Path, Path]:
    """folder/real (a folder) and folder/link (a symlink to ``target``) to exchange."""
    real = folder / "real"
    real.mkdir(exist_ok=True)
    link = folder / "link"
    link.symlink_to(target)
    return real, link


@needs_root
def test_ownership_hand_over_never_follows_a_swapped_folder(two_groups) -> None:  # type: ignore[no-untyped-def]
    a, b, canary = two_groups
    before = fingerprint(canary), fingerprint(b)
    real, link = _bait(a / "memory", canary)
    (real / "note.md").write_text("a's note")
    with swapping(real, link):
        for _ in range(ROUNDS):
            with ConfinedDir.open(a, "memory") as memory:
                memory.chown_tree(54321, 54321)
                memory.chown_tree(0, 0)
    assert (fingerprint(canary), fingerprint(b)) == before


def test_lint_fix_never_writes_through_a_swapped_folder(two_groups) -> None:  # type: ignore[no-untyped-def]
    a, b, canary = two_groups
    before = fingerprint(canary), fingerprint(b)
    real, link = _bait(a / "memory", b / "memory/system")
    fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY)  # the attacker's own handle on it
    try:
        with swapping(real, link):
            for _ in range(ROUNDS):
                broken = os.open("definition.md", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, dir_fd=fd)
                os.write(broken, b"no frontmatter here\n")
                os.close(broken)
                lint_memory(a / "memory", fix=True)
    finally:
        os.close(fd)
    assert (fingerprint(canary), fingerprint(b)) == before


def test_scaffold_never_creates_through_a_swapped_folder(two_groups) -> None:  # type: ignore[no-untyped-def]
    a, b, _canary = two_groups
    (b / "memory/system/index.md").unlink()  # a scaffold following a link would make it
    before = fingerprint(b)
    system = a / "memory/system"
    link = a / "memory/link"
    link.symlink_to(b / "memory/system")
    fd = os.open(system, os.O_RDONLY | os.O_DIRECTORY)  # the attacker's own handle on it
    try:
        with swapping(system, link):
            for _ in range(ROUNDS):
                for name in ("index.md", "definition.md"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)
                scaffold_memory(a)
    finally:
        os.close(fd)
    assert fingerprint(b) == before


def test_the_hook_never_reads_through_a_swapped_folder(two_groups) -> None:  # type: ignore[no-untyped-def]
    a, b, _canary = two_groups
    (b / "memory/system/definition.md").write_text("B-ONLY DOCTRINE\n")
    link = a / "memory/link"
    link.symlink_to(b / "memory/system")
    seen_own = 0
    with swapping(a / "memory/system", link):
        for _ in range(ROUNDS):
            text = render_memory(str(a))
            assert "B-ONLY DOCTRINE" not in text
            seen_own += "Memory doctrine" in text or "memory doctrine" in text
    assert seen_own > 0


def test_purge_and_usage_never_follow_a_swapped_folder(two_groups, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b, canary = two_groups
    (b / "memory/big.md").write_bytes(b"x" * 1_000_000)
    before = fingerprint(canary), fingerprint(b)
    for round_ in range(20):
        victim = a.parent / f"a{round_}"
        victim.mkdir()
        scaffold_memory(victim)
        real, link = _bait(victim / "memory", b / "memory")
        (real / "f.md").write_text("x")
        with swapping(real, link):
            group = Group(victim.name, victim, None)  # type: ignore[arg-type]
            assert memory_usage(group).bytes < 1_000_000
            with ConfinedDir.open(victim.parent) as groups:
                groups.remove_tree(victim.name)
        assert not victim.exists()
    assert (fingerprint(canary), fingerprint(b)) == before


# the layer's operations, one by one


def test_append_creates_then_appends_and_returns_the_size(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with ConfinedDir.open(tmp_path) as d:
            assert d.append("log", "é\n") == 3  # text is written as UTF-8
            assert d.append("log", b"ab") == 5
            assert d.append("private", b"x", mode=0o600) == 1
    finally:
        os.umask(old)
    assert (tmp_path / "log").read_bytes() == "é\nab".encode()
    assert stat.S_IMODE(os.stat(tmp_path / "log").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "private").st_mode) == 0o600


def test_append_refuses_links_fifos_and_folders(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("untouched")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dir").mkdir()
    (tmp_path / "sub").symlink_to(tmp_path / "dir")
    os.mkfifo(tmp_path / "fifo")
    with ConfinedDir.open(tmp_path) as d:
        with pytest.raises(UnsafePath, match="/link: is a symlink, not a regular file") as caught:
            d.append("link", "x")
        assert caught.value.kind == "a symlink"
        with pytest.raises(UnsafePath, match="/fifo: is a FIFO, not a regular file") as caught:
            d.append("fifo", "x")  # nobody reads it: refused at the open, never blocks
        assert caught.value.kind == "a FIFO"
        # a FIFO someone reads opens, and is refused on its descriptor
        reader = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
        try:
            with pytest.raises(UnsafePath, match="/fifo: is a FIFO, not a regular file") as caught:
                d.append("fifo", "x")
            assert caught.value.kind == "a FIFO"
            assert os.read(reader, 10) == b""  # nothing was written into it
        finally:
            os.close(reader)
        with pytest.raises(UnsafePath, match="/sub: is a symlink, not a folder"):
            d.append("sub/f", "x")
        with pytest.raises(IsADirectoryError) as error:
            d.append("dir", "x")
        assert error.value.filename == f"{tmp_path}/dir"
    assert (tmp_path / "target").read_text() == "untouched"
    assert list((tmp_path / "dir").iterdir()) == []


def test_usage_compares_and_hashes_by_its_three_numbers() -> None:
    from orchestrator.confined import Usage

    assert Usage(1, 2, 3) == Usage(1, 2, 3)
    assert Usage(1, 2, 3) != Usage(1, 2, 4)
    assert Usage(1, 2, 3) != (1, 2, 3)
    assert hash(Usage(1, 2, 3)) == hash(Usage(1, 2, 3)) == hash((1, 2, 3))
    assert len({Usage(1, 2, 3), Usage(1, 2, 3), Usage(3, 2, 1)}) == 2
    assert repr(Usage(1, 2, 3)) == "Usage(files=1, bytes=2, disk_bytes=3)"


def test_read_text_refuses_a_larger_file_unless_told_to_truncate(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("héllo")
    with ConfinedDir.open(tmp_path) as d:
        with pytest.raises(UnsafePath, match="over the 4-byte read limit"):
            d.read_text("f", 4)
        assert d.read_text("f", 3, truncate=True) == "hé"
        assert d.read_text("f", 6) == "héllo"


def test_create_file_is_new_and_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with ConfinedDir.open(tmp_path) as d:
            with d.create_file("new") as out:
                out.write(b"data")
            with d.create_file("shared", mode=0o640) as out:
                pass
            with pytest.raises(FileExistsError):
                d.create_file("new")
    finally:
        os.umask(old)
    assert (tmp_path / "new").read_bytes() == b"data"
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "shared").st_mode) == 0o640


def test_move_never_replaces_anything_not_even_a_dangling_link(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/dangling").symlink_to(tmp_path / "nowhere")
    with ConfinedDir.open(tmp_path) as d:
        with pytest.raises(FileExistsError) as caught:
            d.move("a", "b")
        assert caught.value.errno == errno.EEXIST
        assert caught.value.strerror == f"{tmp_path}/b exists; nothing was moved"
        with pytest.raises(FileExistsError):
            d.move("a", "sub/dangling")
        d.move("a", "sub/c")
    assert (tmp_path / "b").read_text() == "b"
    assert (tmp_path / "sub/dangling").is_symlink()
    assert not (tmp_path / "a").exists() and (tmp_path / "sub/c").read_text() == "a"


def test_remove_empty_dir_says_whether_it_removed_one(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full/f").write_text("x")
    with ConfinedDir.open(tmp_path) as d:
        assert d.remove_empty_dir("missing") is False
        assert d.remove_empty_dir("full") is False
        assert d.remove_empty_dir("empty") is True
    assert (tmp_path / "full/f").exists() and not (tmp_path / "empty").exists()


def test_remove_tree_takes_one_name_and_says_whether_something_was_there(tmp_path: Path) -> None:
    (tmp_path / "d/e").mkdir(parents=True)
    (tmp_path / "d/e/f").write_text("x")
    (tmp_path / "f").write_text("x")
    with ConfinedDir.open(tmp_path) as d:
        with pytest.raises(UnsafePath) as caught:
            d.remove_tree("d/e")
        assert (str(caught.value), caught.value.errno) == (
            "d/e: must be a single name",
            errno.EINVAL,
        )
        assert d.remove_tree("missing") is False
        assert d.remove_tree("d") is True
        assert d.remove_tree("f") is True
    assert list(tmp_path.iterdir()) == []


def test_remove_tree_looks_again_at_a_swapped_entry_and_gives_up_on_other_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_unlink = os.unlink
    (tmp_path / "f").write_text("x")
    with ConfinedDir.open(tmp_path) as d:
        # removed by someone else between the look and the unlink: done, and True
        def vanished(name: str, *, dir_fd: int) -> None:
            real_unlink(name, dir_fd=dir_fd)
            raise FileNotFoundError(errno.ENOENT, name)

        monkeypatch.setattr(os, "unlink", vanished)
        assert d.remove_tree("f") is True
        # swapped for a folder once: looked at again, then removed
        (tmp_path / "g").write_text("x")
        calls: list[str] = []

        def swapped_once(name: str, *, dir_fd: int) -> None:
            calls.append(name)
            if len(calls) == 1:
                raise IsADirectoryError(errno.EISDIR, name)
            real_unlink(name, dir_fd=dir_fd)

        monkeypatch.setattr(os, "unlink", swapped_once)
        assert d.remove_tree("g") is True and calls == ["g", "g"]
        # always changing: it gives up after its passes
        (tmp_path / "h").write_text("x")

        def always(name: str, *, dir_fd: int) -> None:
            raise IsADirectoryError(errno.EISDIR, name)

        monkeypatch.setattr(os, "unlink", always)
        with pytest.raises(OSError) as caught:
            d.remove_tree("h")
        assert caught.value.errno == errno.ENOTEMPTY
        assert caught.value.strerror == f"{tmp_path}/h: still changing after 20 passes"

        def refused(name: str, *, dir_fd: int) -> None:
            raise PermissionError(errno.EACCES, name)

        monkeypatch.setattr(os, "unlink", refused)
        with pytest.raises(PermissionError):
            d.remove_tree("h")


def test_unsafe_path_carries_its_words_and_kind_of_names_each_type() -> None:
    from orchestrator.confined import kind_of

    refused = UnsafePath("g/x", "is a FIFO", kind="a FIFO")
    assert (refused.errno, refused.strerror, str(refused)) == (
        errno.EPERM,
        "g/x: is a FIFO",
        "g/x: is a FIFO",
    )
    assert [kind_of(m) for m in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK, stat.S_IFIFO,
                                 stat.S_IFSOCK, stat.S_IFCHR)] == [
        "a regular file", "a folder", "a symlink", "a FIFO", "a socket", "a device file",
    ]  # fmt: skip
