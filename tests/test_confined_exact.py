"""The confined file layer's exact behaviour: each operation's result, refusal words and
error numbers, the modes and owners of what it makes, its limits at their value and one
over, and the descriptors it leaves open (none).

tests/test_confined.py has the attacks; these pin what each function does, one by one.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.confined import (
    INHERIT,
    ConfinedDir,
    UnsafePath,
    Usage,
    open_group_dir,
    split,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="owners can be given by root only")
MIB = 1 << 20


def _open_fds(under: Path) -> set[tuple[str, str]]:
    """This process's descriptors open on something under ``under`` (other threads of
    the suite may open and close descriptors of their own meanwhile)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed since it was listed
        if target == str(under) or target.startswith(f"{under}/"):
            found.add((fd, target))
    return found


@pytest.fixture
def no_leak(tmp_path: Path) -> Iterator[None]:
    """The test leaves no descriptor open on its own files that was not open before it."""
    before = _open_fds(tmp_path)
    yield
    assert _open_fds(tmp_path) - before == set()


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _owner(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid


def _refused(caught: pytest.ExceptionInfo[UnsafePath]) -> tuple[str, int, str | None]:
    return str(caught.value), caught.value.errno, caught.value.kind


@pytest.fixture
def socket_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    yield path
    server.close()


# split and UnsafePath


def test_split_gives_the_components_and_words_its_refusals() -> None:
    assert split("") == []
    assert split(".") == []
    assert split("./a/") == ["a"]
    assert split("a b/c.d/.e") == ["a b", "c.d", ".e"]
    assert split("a/./b//c") == ["a", "b", "c"]
    for bad, shown in (("/etc", "'/etc'"), ("a\x00b", "'a\\x00b'"), ("/", "'/'")):
        with pytest.raises(UnsafePath) as caught:
            split(bad)
        assert (str(caught.value), caught.value.errno, caught.value.kind) == (
            f"{shown}: not a relative path",
            errno.EINVAL,
            None,
        )
        assert (caught.value.shown, caught.value.reason) == (shown, "not a relative path")
    for not_text in (None, b"a", 5):
        with pytest.raises(UnsafePath) as caught:
            split(not_text)  # type: ignore[arg-type]
        assert str(caught.value) == f"{not_text!r}: not a relative path"
        assert caught.value.errno == errno.EINVAL
    for bad in ("..", "a/..", "a/../b", "../a"):
        with pytest.raises(UnsafePath) as caught:
            split(bad)
        assert (str(caught.value), caught.value.errno) == (
            f"{bad}: '..' is not allowed",
            errno.EINVAL,
        )
        assert (caught.value.shown, caught.value.reason) == (bad, "'..' is not allowed")
    assert split("..a/b..") == ["..a", "b.."]


def test_unsafe_path_defaults_to_eperm_and_no_kind() -> None:
    refused = UnsafePath("g/x", "too large")
    assert (refused.errno, refused.strerror, refused.kind) == (errno.EPERM, "g/x: too large", None)
    assert (refused.shown, refused.reason, str(refused)) == ("g/x", "too large", "g/x: too large")
    assert isinstance(refused, OSError)
    coded = UnsafePath("g/y", "big", errno.EFBIG, "a folder")
    assert (coded.errno, coded.kind, str(coded)) == (errno.EFBIG, "a folder", "g/y: big")


# opening


def test_open_shows_the_base_and_the_path_walked(tmp_path: Path, no_leak: None) -> None:
    (tmp_path / "a/b").mkdir(parents=True)
    with ConfinedDir.open(tmp_path) as root:
        assert root.shown == str(tmp_path)
        assert root.fd >= 0
    with ConfinedDir.open(str(tmp_path), "./") as root:
        assert root.shown == str(tmp_path)
    with ConfinedDir.open(tmp_path, "a/b") as b:
        assert b.shown == f"{tmp_path}/a/b"
        assert os.path.samestat(os.fstat(b.fd), os.stat(tmp_path / "a/b"))
    with pytest.raises(FileNotFoundError) as missing:
        ConfinedDir.open(tmp_path, "a/c")
    assert missing.value.filename == f"{tmp_path}/a/c"
    assert not (tmp_path / "a/c").exists()


def test_open_wants_a_folder_and_open_dir_creates_nothing_unless_told(
    tmp_path: Path, no_leak: None
) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        ConfinedDir.open(tmp_path / "file")
    with ConfinedDir.open(tmp_path) as d:
        with pytest.raises(FileNotFoundError) as missing:
            d.open_dir("missing")
        assert missing.value.filename == f"{tmp_path}/missing"
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_open_with_create_makes_the_missing_folders(tmp_path: Path, no_leak: None) -> None:
    with ConfinedDir.open(tmp_path, "x/y", create=True) as y:
        assert y.shown == f"{tmp_path}/x/y"
    assert (tmp_path / "x/y").is_dir()
    assert _mode(tmp_path / "x") == _mode(tmp_path / "x/y") == 0o755


def test_open_group_dir_opens_the_group_folder_and_refuses_a_link(
    tmp_path: Path, no_leak: None
) -> None:
    (tmp_path / "fam").mkdir()
    (tmp_path / "fam/f").write_text("x")
    (tmp_path / "evil").symlink_to(tmp_path / "fam")
    with open_group_dir(tmp_path, "fam") as fam:
        assert fam.shown == f"{tmp_path}/fam"
        assert fam.read_bytes("f", 10) == b"x"
    with pytest.raises(UnsafePath) as caught:
        open_group_dir(tmp_path, "evil")
    assert _refused(caught) == (
        f"{tmp_path}/evil: is a symlink, not a folder",
        errno.ENOTDIR,  # what O_DIRECTORY | O_NOFOLLOW gives for a link
        "a symlink",
    )
    with pytest.raises(FileNotFoundError):
        open_group_dir(tmp_path, "gone")


def test_open_dir_refuses_each_kind_that_is_not_a_folder(
    tmp_path: Path, socket_file: Path, no_leak: None
) -> None:
    (tmp_path / "d/e").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    os.mkfifo(tmp_path / "fifo")
    with ConfinedDir.open(tmp_path) as d:
        for name, kind in (
            ("link", "a symlink"),
            ("file", "a regular file"),
            ("fifo", "a FIFO"),
            ("sock", "a socket"),
        ):
            for create in (False, True):
                with pytest.raises(UnsafePath) as caught:
                    d.open_dir(f"{name}/more", create=create)
                assert str(caught.value) == f"{tmp_path}/{name}: is {kind}, not a folder"
                assert caught.value.kind == kind
                assert caught.value.errno == errno.ENOTDIR
        with pytest.raises(UnsafePath) as caught:
            d.open_dir("d/e/../e")
        assert str(caught.value) == "d/e/../e: '..' is not allowed"
        with d.open_dir("d/e") as e, e.open_dir("") as same:
            assert same.shown == e.shown == f"{tmp_path}/d/e"
            assert same.fd != e.fd
    assert not (tmp_path / "d/more").exists()


@needs_root
def test_open_dir_gives_made_folders_the_mode_and_owner_asked(
    tmp_path: Path, no_leak: None
) -> None:
    os.chown(tmp_path, 4242, 4243)
    old = os.umask(0o077)
    try:
        with ConfinedDir.open(tmp_path) as d:
            with d.open_dir("plain/deep", create=True) as deep:
                assert deep.shown == f"{tmp_path}/plain/deep"
            with d.open_dir("given/deep", create=True, mode=0o750, owner=(7, 8)):
                pass
            with d.open_dir("inherit/deep", create=True, owner=INHERIT):
                pass
            # an existing folder keeps its mode and owner
            with d.open_dir("given", create=True, mode=0o700, owner=(9, 9)):
                pass
    finally:
        os.umask(old)
    for made in ("plain", "plain/deep"):  # no owner: root's, mode 0o755 whatever the umask
        assert (_owner(tmp_path / made), _mode(tmp_path / made)) == ((0, 0), 0o755)
    for made in ("given", "given/deep"):
        assert (_owner(tmp_path / made), _mode(tmp_path / made)) == ((7, 8), 0o750)
    assert _owner(tmp_path / "inherit") == (4242, 4243)


# making folders and files


@needs_root
def test_make_dir_makes_one_folder_once_with_its_mode_and_owner(
    tmp_path: Path, no_leak: None
) -> None:
    os.chown(tmp_path, 4242, 4243)
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    target_mode = _mode(tmp_path / "target")
    with ConfinedDir.open(tmp_path) as d:
        assert d.make_dir("inherits") is True
        assert d.make_dir("private", mode=0o700, owner=None) is True
        assert d.make_dir("given", mode=0o711, owner=(5, 6)) is True
        assert d.make_dir("given", mode=0o777, owner=(1, 1)) is False
        # exists (a link): not followed, not changed
        assert d.make_dir("link", mode=0o700, owner=(1, 1)) is False
        for bad in ("a/b", "", "."):
            with pytest.raises(UnsafePath) as caught:
                d.make_dir(bad)
            assert (str(caught.value), caught.value.errno) == (
                f"{bad}: must be a single name",
                errno.EINVAL,
            )
    assert (_owner(tmp_path / "inherits"), _mode(tmp_path / "inherits")) == ((4242, 4243), 0o755)
    assert (_owner(tmp_path / "private"), _mode(tmp_path / "private")) == ((0, 0), 0o700)
    assert (_owner(tmp_path / "given"), _mode(tmp_path / "given")) == ((5, 6), 0o711)
    assert (tmp_path / "link").is_symlink()
    assert (_owner(tmp_path / "target"), _mode(tmp_path / "target")) == ((0, 0), target_mode)
    assert not (tmp_path / "a").exists()


@needs_root
def test_a_made_folder_is_private_until_it_has_its_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int, int]] = []
    real_fchown = os.fchown

    def fchown(fd: int, uid: int, gid: int) -> None:
        seen.append((stat.S_IMODE(os.fstat(fd).st_mode), uid, gid))
        real_fchown(fd, uid, gid)

    monkeypatch.setattr(os, "fchown", fchown)
    old = os.umask(0)
    try:
        with ConfinedDir.open(tmp_path) as d:
            d.make_dir("m", mode=0o777, owner=(3, 4))
            d.write_atomic("f", "x", mode=0o666, owner=(5, 6))
    finally:
        os.umask(old)
    assert seen == [(0o700, 3, 4), (0o600, 5, 6)]
    assert _mode(tmp_path / "m") == 0o777 and _mode(tmp_path / "f") == 0o666


def test_a_folder_swapped_right_after_it_was_made_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    real_mkdir = os.mkdir
    (tmp_path / "elsewhere").mkdir()
    elsewhere_mode = _mode(tmp_path / "elsewhere")

    def mkdir_then_swap(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode, dir_fd=dir_fd)
        os.rmdir(name, dir_fd=dir_fd)
        os.symlink(tmp_path / "elsewhere", name, dir_fd=dir_fd)

    with ConfinedDir.open(tmp_path) as d:
        monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
        with pytest.raises(UnsafePath) as caught:
            d.make_dir("m", mode=0o777)
        assert _refused(caught) == (
            f"{tmp_path}/m: is a symlink, not a folder",
            errno.ENOTDIR,
            "a symlink",
        )
        with pytest.raises(UnsafePath) as caught:
            d.open_dir("n/deeper", create=True)
        assert str(caught.value) == f"{tmp_path}/n: is a symlink, not a folder"
    assert _mode(tmp_path / "elsewhere") == elsewhere_mode
    assert os.listdir(tmp_path / "elsewhere") == []


@needs_root
def test_make_file_makes_an_empty_file_once(tmp_path: Path, no_leak: None) -> None:
    os.chown(tmp_path, 4242, 4243)
    (tmp_path / "target").write_text("untouched")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "sub").mkdir()
    with ConfinedDir.open(tmp_path) as d:
        assert d.make_file("empty") is True
        assert d.make_file("empty") is False
        assert d.make_file("sub/private", mode=0o600, owner=(5, 6)) is True
        assert d.make_file("root", owner=None) is True
        assert d.make_file("link") is False
        assert d.make_file("sub") is False
    assert (tmp_path / "empty").read_bytes() == b""
    assert (_owner(tmp_path / "empty"), _mode(tmp_path / "empty")) == ((4242, 4243), 0o644)
    assert (_owner(tmp_path / "sub/private"), _mode(tmp_path / "sub/private")) == ((5, 6), 0o600)
    assert _owner(tmp_path / "root") == (0, 0)
    assert (tmp_path / "target").read_text() == "untouched"
    assert (tmp_path / "link").is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["empty", "link", "root", "sub", "target"]
    assert os.listdir(tmp_path / "sub") == ["private"]


# looking


def test_lstat_never_follows_and_says_none_for_what_is_not_there(
    tmp_path: Path, no_leak: None
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d/f").write_text("12345")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    (tmp_path / "file").write_text("x")
    with ConfinedDir.open(tmp_path) as d:
        got = d.lstat("d/f")
        assert got is not None and got.st_size == 5 and stat.S_ISREG(got.st_mode)
        assert os.path.samestat(got, os.stat(tmp_path / "d/f"))
        link = d.lstat("link")
        assert link is not None and stat.S_ISLNK(link.st_mode)
        top = d.lstat("d")
        assert top is not None and stat.S_ISDIR(top.st_mode)
        assert d.lstat("missing") is None
        assert d.lstat("d/missing") is None
        assert d.lstat("link/f") is None  # a link on the way
        assert d.lstat("file/f") is None  # a file on the way
        assert d.lstat("") is None
        assert d.lstat("../x") is None
    assert d.fd == -1


def test_lstat_says_none_for_a_path_through_a_file_whose_look_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("x")
    real_open = os.open

    def not_a_dir(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path == "file":
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    real_stat = os.stat

    def stat_fails(path: str, *, dir_fd: int | None = None, follow_symlinks: bool = True):  # type: ignore[no-untyped-def]
        if path == "file" and dir_fd is not None and not follow_symlinks:
            raise PermissionError(errno.EACCES, "denied")
        return real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    with ConfinedDir.open(tmp_path) as d:
        monkeypatch.setattr(os, "open", not_a_dir)
        monkeypatch.setattr(os, "stat", stat_fails)
        assert d.lstat("file/f") is None
        with pytest.raises(NotADirectoryError) as caught:
            d.read_bytes("file/f", 10)  # the kind cannot be looked at: the open's error
        assert caught.value.filename is None


def test_entries_are_sorted_by_name_and_do_not_follow_links(tmp_path: Path) -> None:
    for name in ("b", "a", "C", ".h"):
        (tmp_path / name).write_text(name)
    (tmp_path / "z").symlink_to(tmp_path / "a")
    with ConfinedDir.open(tmp_path) as d:
        entries = d.entries()
    assert [e.name for e in entries] == [".h", "C", "a", "b", "z"]
    assert entries[-1].is_symlink() and not entries[-1].is_file(follow_symlinks=False)


# reading


def test_reads_refuse_every_kind_but_a_regular_file_word_for_word(
    tmp_path: Path, socket_file: Path, no_leak: None
) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "dirlink").symlink_to(tmp_path / "dir")
    os.mkfifo(tmp_path / "fifo")
    cases = (
        ("link", f"{tmp_path}/link: is a symlink, not a regular file", errno.ELOOP, "a symlink"),
        ("sock", f"{tmp_path}/sock: is a socket, not a regular file", errno.ENXIO, "a socket"),
        ("dir", f"{tmp_path}/dir: is a folder, not a regular file", errno.EPERM, "a folder"),
        ("dirlink/f", f"{tmp_path}/dirlink: is a symlink, not a folder", errno.ENOTDIR,
         "a symlink"),
        ("file/f", f"{tmp_path}/file: is a regular file, not a folder", errno.ENOTDIR,
         "a regular file"),
    )  # fmt: skip
    with ConfinedDir.open(tmp_path) as d:
        readers = (
            lambda name: d.read_bytes(name, 10),
            lambda name: d.read_text(name, 10),
            lambda name: d.copy_to(name, io.BytesIO(), 10),
            d.sha256,
            d.reading,
        )
        for read in readers:
            for name, words, code, kind in cases:
                with pytest.raises(UnsafePath) as caught:
                    read(name)
                assert _refused(caught) == (words, code, kind)
            with pytest.raises(UnsafePath) as caught:
                read("fifo")  # nobody writes it: refused at once, never blocks
            assert str(caught.value) == f"{tmp_path}/fifo: is a FIFO, not a regular file"
            assert caught.value.kind == "a FIFO"
            for nothing in ("", "."):
                with pytest.raises(UnsafePath) as caught:
                    read(nothing)
                assert (str(caught.value), caught.value.errno) == (
                    f"{tmp_path}: names a folder, not a file",
                    errno.EISDIR,
                )
            with pytest.raises(FileNotFoundError) as missing:
                read("dir/missing")
            assert missing.value.filename == f"{tmp_path}/dir/missing"


def test_reads_refuse_a_fifo_with_a_writer_on_its_descriptor(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    before = _open_fds(tmp_path)
    held = os.open(tmp_path / "fifo", os.O_RDWR | os.O_NONBLOCK)  # a writer is there
    try:
        with ConfinedDir.open(tmp_path) as d:
            for read in (
                lambda: d.read_bytes("fifo", 10),
                lambda: d.copy_to("fifo", io.BytesIO(), 10),
                lambda: d.sha256("fifo"),
                lambda: d.reading("fifo"),
            ):
                with pytest.raises(UnsafePath) as caught:
                    read()
                assert _refused(caught) == (
                    f"{tmp_path}/fifo: is a FIFO, not a regular file",
                    errno.EPERM,
                    "a FIFO",
                )
    finally:
        os.close(held)
    assert _open_fds(tmp_path) == before


def test_read_bytes_limit_at_its_value_and_one_over(tmp_path: Path, no_leak: None) -> None:
    (tmp_path / "f").write_bytes(b"x" * 1000)
    (tmp_path / "big").write_bytes(bytes(range(256)) * (3 * MIB // 256) + b"end")
    (tmp_path / "empty").write_bytes(b"")
    with ConfinedDir.open(tmp_path) as d:
        assert d.read_bytes("f", 1000) == b"x" * 1000
        assert d.read_bytes("f", 1001) == b"x" * 1000
        with pytest.raises(UnsafePath) as caught:
            d.read_bytes("f", 999)
        assert _refused(caught) == (
            f"{tmp_path}/f: is 1,000 bytes, over the 999-byte read limit",
            errno.EPERM,
            None,
        )
        assert d.read_bytes("f", 999, truncate=True) == b"x" * 999
        assert d.read_bytes("f", 1000, truncate=True) == b"x" * 1000
        assert d.read_bytes("f", 0, truncate=True) == b""
        assert d.read_bytes("empty", 0) == b""
        with pytest.raises(UnsafePath, match="is 1,000 bytes, over the 0-byte read limit"):
            d.read_bytes("f", 0)
        big = (tmp_path / "big").read_bytes()
        assert d.read_bytes("big", len(big)) == big  # read in pieces, to the end
        assert d.read_bytes("big", 2 * MIB + 5, truncate=True) == big[: 2 * MIB + 5]
        with pytest.raises(UnsafePath) as caught:
            d.read_bytes("big", 1_234_567)
        assert str(caught.value) == (
            f"{tmp_path}/big: is {len(big):,} bytes, over the 1,234,567-byte read limit"
        )


def test_reads_refuse_a_file_that_grows_past_the_limit(no_leak: None) -> None:
    # a /proc file says it holds nothing and gives more than that, as a file that grows
    # while it is read does
    with ConfinedDir.open("/proc/self") as proc:
        assert proc.lstat("maps").st_size == 0  # type: ignore[union-attr]
        with pytest.raises(UnsafePath) as caught:
            proc.read_bytes("maps", 1000)
        assert _refused(caught) == (
            "/proc/self/maps: grew past the 1,000-byte read limit",
            errno.EPERM,
            None,
        )
        assert len(proc.read_bytes("maps", 1000, truncate=True)) == 1000
        assert len(proc.read_bytes("maps", 1, truncate=True)) == 1
        out = io.BytesIO()
        with pytest.raises(UnsafePath) as caught:
            proc.copy_to("maps", out, 1000)
        assert _refused(caught) == (
            "/proc/self/maps: grew past the 1,000-byte limit",
            errno.EFBIG,
            None,
        )
        assert out.getvalue() == b""  # the piece that went over is not written
        assert len(proc.read_bytes("maps", 10 * MIB)) > 1000


def test_read_text_decodes_utf8(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes("é".encode() * 3)
    (tmp_path / "bad").write_bytes(b"\xff")
    with ConfinedDir.open(tmp_path) as d:
        assert d.read_text("f", 6) == "ééé"
        with pytest.raises(UnsafePath, match="over the 5-byte read limit"):
            d.read_text("f", 5)
        assert d.read_text("f", 4, truncate=True) == "éé"
        with pytest.raises(UnicodeDecodeError):
            d.read_text("bad", 10)


def test_copy_to_copies_up_to_its_limit_and_returns_the_size(tmp_path: Path, no_leak: None) -> None:
    data = os.urandom(3 * MIB + 7)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/big").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    with ConfinedDir.open(tmp_path) as d:
        out = io.BytesIO()
        assert d.copy_to("sub/big", out, len(data)) == len(data)
        assert out.getvalue() == data
        out = io.BytesIO()
        assert d.copy_to("empty", out, 0) == 0
        assert out.getvalue() == b""
        out = io.BytesIO()
        with pytest.raises(UnsafePath) as caught:
            d.copy_to("sub/big", out, len(data) - 1)
        assert _refused(caught) == (
            f"{tmp_path}/sub/big: is {len(data):,} bytes, over the {len(data) - 1:,}-byte limit",
            errno.EFBIG,
            None,
        )
        assert out.getvalue() == b""


def test_copy_to_refuses_a_file_that_grows_while_it_is_copied(
    tmp_path: Path, no_leak: None
) -> None:
    source = tmp_path / "grows"
    source.write_bytes(b"a" * (MIB + 10))

    class Growing(io.BytesIO):
        """Where the copy goes; the file grows by a MiB after its first piece is written."""

        def write(self, data: bytes) -> int:  # type: ignore[override]
            if not self.getvalue():
                with open(source, "ab") as more:
                    more.write(b"b" * MIB)
            return super().write(data)

    out = Growing()
    with ConfinedDir.open(tmp_path) as d, pytest.raises(UnsafePath) as caught:
        d.copy_to("grows", out, MIB + 10)
    assert _refused(caught) == (
        f"{tmp_path}/grows: grew past the {MIB + 10:,}-byte limit",
        errno.EFBIG,
        None,
    )
    assert out.getvalue() == b"a" * MIB  # its first piece (a MiB), not the piece over


def test_sha256_hashes_in_pieces_and_gives_the_size(tmp_path: Path, no_leak: None) -> None:
    data = os.urandom(2 * MIB + 3)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/big").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    with ConfinedDir.open(tmp_path) as d:
        assert d.sha256("sub/big") == (hashlib.sha256(data).hexdigest(), len(data))
        assert d.sha256("empty") == (hashlib.sha256(b"").hexdigest(), 0)


def test_reading_hands_over_a_blocking_binary_file_and_its_status(
    tmp_path: Path, no_leak: None
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/f").write_bytes(b"hello")
    with ConfinedDir.open(tmp_path) as d:
        f, st = d.reading("sub/f")
    with f:
        assert os.get_blocking(f.fileno()) is True
        assert f.read() == b"hello"
        assert st.st_size == 5 and stat.S_ISREG(st.st_mode)
        assert os.path.samestat(st, os.stat(tmp_path / "sub/f"))
        assert f.mode == "rb"


# writing


@needs_root
def test_write_atomic_replaces_with_the_mode_and_owner_asked(tmp_path: Path, no_leak: None) -> None:
    os.chown(tmp_path, 4242, 4243)
    (tmp_path / "sub").mkdir()
    (tmp_path / "old").write_text("old")
    os.chmod(tmp_path / "old", 0o600)
    old = os.umask(0o077)
    try:
        with ConfinedDir.open(tmp_path) as d:
            assert d.write_atomic("old", "é") is None
            d.write_atomic("sub/given", b"\x00\x01", mode=0o640, owner=(5, 6))
            d.write_atomic("root", b"r", owner=None)
            d.write_atomic("big", b"b" * (3 * MIB))
    finally:
        os.umask(old)
    assert (tmp_path / "old").read_bytes() == "é".encode()
    assert (_owner(tmp_path / "old"), _mode(tmp_path / "old")) == ((4242, 4243), 0o644)
    assert (tmp_path / "sub/given").read_bytes() == b"\x00\x01"
    assert (_owner(tmp_path / "sub/given"), _mode(tmp_path / "sub/given")) == ((5, 6), 0o640)
    assert _owner(tmp_path / "root") == (0, 0)
    assert (tmp_path / "big").read_bytes() == b"b" * (3 * MIB)
    assert sorted(os.listdir(tmp_path)) == ["big", "old", "root", "sub"]
    assert os.listdir(tmp_path / "sub") == ["given"]


def test_write_atomic_refuses_a_folder_and_leaves_no_temporary_file(
    tmp_path: Path, no_leak: None
) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "full/x").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    with ConfinedDir.open(tmp_path) as d:
        for name in ("dir", "full"):
            with pytest.raises(UnsafePath) as caught:
                d.write_atomic(name, "x")
            assert (str(caught.value), caught.value.errno, caught.value.kind) == (
                f"{tmp_path}/{name}: is a folder; not replaced",
                errno.EISDIR,
                None,
            )
        with pytest.raises(UnsafePath, match="is a symlink, not a folder"):
            d.write_atomic("link/f", "x")
        with pytest.raises(UnsafePath) as caught:
            d.write_atomic("", "x")
        assert str(caught.value) == f"{tmp_path}: names a folder, not a file"
    assert sorted(os.listdir(tmp_path)) == ["dir", "full", "link"]
    assert os.listdir(tmp_path / "dir") == []


def test_write_atomic_raises_other_rename_errors_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "no")

    with ConfinedDir.open(tmp_path) as d:
        monkeypatch.setattr(os, "rename", refused)
        with pytest.raises(PermissionError) as caught:
            d.write_atomic("f", "x")
        assert not isinstance(caught.value, UnsafePath)
    assert os.listdir(tmp_path) == []


def test_write_atomic_refuses_a_folder_even_when_its_temporary_file_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    (tmp_path / "dir").mkdir()

    def removed_then_refused(src: str, dst: str, **kwargs: int) -> None:
        os.unlink(src, dir_fd=kwargs["src_dir_fd"])  # the container removed it
        raise IsADirectoryError(errno.EISDIR, "Is a directory")

    with ConfinedDir.open(tmp_path) as d:
        monkeypatch.setattr(os, "rename", removed_then_refused)
        with pytest.raises(UnsafePath) as caught:
            d.write_atomic("dir", "x")
    assert str(caught.value) == f"{tmp_path}/dir: is a folder; not replaced"
    assert os.listdir(tmp_path) == ["dir"]


@pytest.mark.parametrize("code", [errno.ENOTEMPTY, errno.EEXIST])
def test_write_atomic_calls_a_full_folder_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # renaming a folder onto a full one (the temporary file swapped for a folder)
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    with ConfinedDir.open(tmp_path) as d:
        monkeypatch.setattr(os, "rename", full)
        with pytest.raises(UnsafePath) as caught:
            d.write_atomic("dir", "x")
    assert (str(caught.value), caught.value.errno) == (
        f"{tmp_path}/dir: is a folder; not replaced",
        code,
    )
    assert os.listdir(tmp_path) == []


def test_create_exclusive_syncs_the_folder_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[bool] = []  # for each fsync: was it of the folder?
    real_fsync = os.fsync
    folder = os.stat(tmp_path)

    def fsync(fd: int) -> None:
        synced.append(os.path.samestat(os.fstat(fd), folder))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with ConfinedDir.open(tmp_path) as d:
        assert d.create_exclusive("a", "x") is True
        assert synced == [False, True]  # the file, then the folder
        synced.clear()
        assert d.create_exclusive("b", "x", sync_folder=False) is True
        assert synced == [False]
        synced.clear()
        assert d.create_exclusive("a", "x") is False
        assert synced == [False]
        synced.clear()
        d.sync()
        assert synced == [True]


def test_create_exclusive_when_its_temporary_file_is_gone_after_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    real_link = os.link

    def link_then_removed(src: str, dst: str, **kwargs: int) -> None:
        real_link(src, dst, **kwargs)
        os.unlink(src, dir_fd=kwargs["src_dir_fd"])  # the container removed it

    with ConfinedDir.open(tmp_path) as d:
        monkeypatch.setattr(os, "link", link_then_removed)
        assert d.create_exclusive("new", "x") is True
    assert os.listdir(tmp_path) == ["new"]
    assert (tmp_path / "new").read_text() == "x"


def test_a_failed_temporary_write_raises_its_own_error_when_the_file_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    def removed_then_fails(fd: int, mode: int) -> None:
        for name in os.listdir(tmp_path):
            os.unlink(tmp_path / name)  # the container removed it
        raise OSError(errno.EIO, "disk gone")

    with ConfinedDir.open(tmp_path) as d:
        monkeypatch.setattr(os, "fchmod", removed_then_fails)
        with pytest.raises(OSError) as caught:
            d.write_atomic("f", "x")
    assert (caught.value.errno, caught.value.strerror) == (errno.EIO, "disk gone")
    assert os.listdir(tmp_path) == []


def test_the_temporary_name_is_hidden_short_and_random(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temps: list[str] = []
    real_rename, real_link = os.rename, os.link

    def rename(src: str, dst: str, **kwargs: int) -> None:
        temps.append(src)
        real_rename(src, dst, **kwargs)

    def link(src: str, dst: str, **kwargs: int) -> None:
        temps.append(src)
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "link", link)
    long = "n" * 255  # the longest name: its temporary name must fit too
    with ConfinedDir.open(tmp_path) as d:
        d.write_atomic(long, "x")
        d.write_atomic("short", "x")
        assert d.create_exclusive("new", "x") is True
    assert re.fullmatch(r"\.n{100}\.[0-9a-f]{12}\.tmp", temps[0])
    assert re.fullmatch(r"\.short\.[0-9a-f]{12}\.tmp", temps[1])
    assert re.fullmatch(r"\.new\.[0-9a-f]{12}\.tmp", temps[2])
    assert temps[1][7:19] != temps[2][5:17]
    assert sorted(os.listdir(tmp_path)) == sorted([long, "new", "short"])


def test_a_failed_temporary_write_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    def fails(fd: int, mode: int) -> None:
        raise OSError(errno.EIO, "disk gone")

    with ConfinedDir.open(tmp_path) as d:
        monkeypatch.setattr(os, "fchmod", fails)
        with pytest.raises(OSError, match="disk gone"):
            d.write_atomic("f", "x")
        with pytest.raises(OSError, match="disk gone"):
            d.create_exclusive("g", "x")
    assert os.listdir(tmp_path) == []


@needs_root
def test_create_exclusive_makes_new_files_only(tmp_path: Path, no_leak: None) -> None:
    os.chown(tmp_path, 4242, 4243)
    (tmp_path / "target").write_text("untouched")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    with ConfinedDir.open(tmp_path) as d:
        assert d.create_exclusive("dir/new", "é") is True
        assert d.create_exclusive("given", b"g", mode=0o600, owner=(5, 6)) is True
        assert d.create_exclusive("root", b"r", owner=None) is True
        assert d.create_exclusive("unsynced", b"u", sync_folder=False) is True
        for taken in ("target", "dangling", "dir", "fifo", "given"):
            assert d.create_exclusive(taken, b"new") is False
        with pytest.raises(UnsafePath):
            d.create_exclusive("", b"x")
    assert (tmp_path / "dir/new").read_bytes() == "é".encode()
    assert (_owner(tmp_path / "dir/new"), _mode(tmp_path / "dir/new")) == ((0, 0), 0o644)
    assert (_owner(tmp_path / "given"), _mode(tmp_path / "given")) == ((5, 6), 0o600)
    assert (tmp_path / "given").read_bytes() == b"g"
    assert _owner(tmp_path / "root") == (0, 0)
    assert (tmp_path / "unsynced").read_bytes() == b"u"
    assert _owner(tmp_path / "unsynced") == (4242, 4243)
    assert (tmp_path / "target").read_text() == "untouched"
    assert not (tmp_path / "nowhere").exists()
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["target", "dangling", "dir", "fifo", "given", "root", "unsynced"]
    )
    assert os.listdir(tmp_path / "dir") == ["new"]


def test_unlink_removes_a_file_or_a_link_never_a_folder(tmp_path: Path, no_leak: None) -> None:
    (tmp_path / "sub/dir").mkdir(parents=True)
    (tmp_path / "sub/f").write_text("x")
    (tmp_path / "target").write_text("kept")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dirlink").symlink_to(tmp_path / "sub")
    with ConfinedDir.open(tmp_path) as d:
        assert d.unlink("sub/f") is None
        d.unlink("link")
        with pytest.raises(IsADirectoryError):
            d.unlink("sub/dir")
        with pytest.raises(UnsafePath, match="dirlink: is a symlink, not a folder"):
            d.unlink("dirlink/dir")
        with pytest.raises(FileNotFoundError):
            d.unlink("sub/f")
    assert sorted(os.listdir(tmp_path)) == ["dirlink", "sub", "target"]
    assert os.listdir(tmp_path / "sub") == ["dir"]


# closing


def test_close_closes_once_and_marks_the_folder_closed(tmp_path: Path) -> None:
    d = ConfinedDir.open(tmp_path)
    fd = d.fd
    d.close()
    assert d.fd == -1
    with pytest.raises(OSError) as caught:
        os.fstat(fd)
    assert caught.value.errno == errno.EBADF
    d.close()  # again: nothing to close
    assert d.fd == -1
    with ConfinedDir.open(tmp_path) as d:
        fd = d.fd
    assert d.fd == -1


def test_close_closes_descriptor_zero_too(tmp_path: Path) -> None:
    saved = os.dup(0)
    try:
        folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        os.dup2(folder, 0)
        os.close(folder)
        d = ConfinedDir(0, "zero")
        d.close()
        assert d.fd == -1
        with pytest.raises(OSError) as caught:
            os.fstat(0)
        assert caught.value.errno == errno.EBADF
    finally:
        os.dup2(saved, 0)
        os.close(saved)


# trees


def _tree(root: Path) -> None:
    (root / "b/c").mkdir(parents=True)
    (root / "a").mkdir()
    (root / ".hidden").mkdir()
    (root / ".hidden/h").write_text("hh")
    (root / ".dot").write_text("d")
    (root / "a/f").write_text("12345")
    (root / "b/g").write_text("123")
    (root / "b/c/deep").write_bytes(b"x" * 10_000)
    (root / "b/link").symlink_to(root / "a")
    (root / "b/filelink").symlink_to("../a/f")  # a short target: the link takes no block
    os.mkfifo(root / "a/fifo")


def test_walk_goes_top_down_in_name_order_and_never_through_a_link(
    tmp_path: Path, no_leak: None
) -> None:
    _tree(tmp_path)
    with ConfinedDir.open(tmp_path) as d:
        seen = []
        folders = []
        for rel, folder, entries in d.walk():
            seen.append((rel, folder.shown, [e.name for e in entries]))
            folders.append(folder)
            assert folder.fd >= 0 and folder.fd != d.fd
        assert seen == [
            ("", str(tmp_path), [".dot", ".hidden", "a", "b"]),
            (".hidden", f"{tmp_path}/.hidden", ["h"]),
            ("a", f"{tmp_path}/a", ["f", "fifo"]),
            ("b", f"{tmp_path}/b", ["c", "filelink", "g", "link"]),
            ("b/c", f"{tmp_path}/b/c", ["deep"]),
        ]
        assert all(folder.fd == -1 for folder in folders)  # each closed after its step
        assert [(rel, [e.name for e in entries]) for rel, _, entries in d.walk(hidden=False)] == [
            ("", ["a", "b"]),
            ("a", ["f", "fifo"]),
            ("b", ["c", "filelink", "g", "link"]),
            ("b/c", ["deep"]),
        ]
        assert d.read_bytes("a/f", 10) == b"12345"  # the walked folder stays open
        with d.open_dir("b") as b:
            assert [rel for rel, _, _ in b.walk()] == ["", "c"]


def test_walk_leaves_out_a_folder_swapped_or_gone_since_it_was_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leak: None
) -> None:
    for name in ("a", "b", "c", "d"):
        (tmp_path / name).mkdir()
    (tmp_path / "b/inside").write_text("x")
    real_open_dir = ConfinedDir.open_dir

    def swapped(self: ConfinedDir, relative: str, **kwargs: object) -> ConfinedDir:
        if relative == "b":
            raise UnsafePath(relative, "is a symlink, not a folder")
        return real_open_dir(self, relative, **kwargs)  # type: ignore[arg-type]

    real_scandir = os.scandir

    def unreadable(fd: int):  # type: ignore[no-untyped-def]
        if os.path.samestat(os.fstat(fd), os.stat(tmp_path / "c")):
            raise PermissionError(errno.EACCES, "denied")
        return real_scandir(fd)

    monkeypatch.setattr(ConfinedDir, "open_dir", swapped)
    monkeypatch.setattr(os, "scandir", unreadable)
    with ConfinedDir.open(tmp_path) as d:
        # b (swapped) and c (unreadable) are left out, and the walk goes on past each
        assert [rel for rel, _, _ in d.walk()] == ["", "a", "d"]


def test_usage_counts_regular_files_and_every_entry_s_blocks(tmp_path: Path, no_leak: None) -> None:
    _tree(tmp_path)
    disk = 0
    for dirpath, dirnames, filenames in os.walk(tmp_path):
        for name in dirnames + filenames:
            disk += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    with ConfinedDir.open(tmp_path) as d:
        # the links count their own blocks, never their targets' (a file, a folder)
        assert d.usage() == Usage(5, 2 + 1 + 5 + 3 + 10_000, disk)
        with d.open_dir("b") as b:
            assert b.usage().files == 2 and b.usage().bytes == 10_003
        with d.open_dir("a") as a:
            assert a.usage().files == 1
    assert disk > 0


def _remove_once_listed(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Make ``ConfinedDir.walk`` remove ``path`` after it lists a folder, before the
    caller looks at the entries it listed."""
    real_walk = ConfinedDir.walk

    def walk_then_remove(self: ConfinedDir, **kwargs: bool):  # type: ignore[no-untyped-def]
        for step in real_walk(self, **kwargs):
            path.unlink()
            yield step

    monkeypatch.setattr(ConfinedDir, "walk", walk_then_remove)


def test_usage_skips_an_entry_gone_since_it_was_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").write_text("1")
    (tmp_path / "b").write_text("22")
    (tmp_path / "c").write_text("333")
    _remove_once_listed(monkeypatch, tmp_path / "b")
    with ConfinedDir.open(tmp_path) as d:
        usage = d.usage()
    assert (usage.files, usage.bytes) == (2, 4)
    expected = sum(os.lstat(tmp_path / n).st_blocks * 512 for n in ("a", "c"))
    assert usage.disk_bytes == expected


@needs_root
def test_chown_tree_counts_what_it_changed_and_never_follows_a_link(
    tmp_path: Path, no_leak: None
) -> None:
    outside = tmp_path / "outside"
    outside.write_text("root's")
    top = tmp_path / "top"
    (top / "sub").mkdir(parents=True)
    (top / "sub/f").write_text("x")
    (top / ".h").write_text("x")
    (top / "link").symlink_to(outside)
    (top / "dirlink").symlink_to(tmp_path)
    with ConfinedDir.open(top) as d:
        assert d.chown_tree(4242, 4243) == 6  # the folder, sub, sub/f, .h, link, dirlink
        assert d.chown_tree(4242, 4243) == 0
        os.chown(top / "sub/f", 4242, 1)  # the group alone differs
        os.chown(top / ".h", 1, 4243)  # the user alone differs
        assert d.chown_tree(4242, 4243) == 2
        os.chown(top, 4242, 1)
        assert d.chown_tree(4242, 4243) == 1
    for path in (top, top / "sub", top / "sub/f", top / ".h", top / "link", top / "dirlink"):
        assert _owner(path) == (4242, 4243)
    assert _owner(outside) == (0, 0) and _owner(tmp_path) == (0, 0)


@needs_root
def test_chown_tree_skips_an_entry_gone_since_it_was_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text(name)
    _remove_once_listed(monkeypatch, tmp_path / "b")
    with ConfinedDir.open(tmp_path) as d:
        assert d.chown_tree(7, 7) == 3  # the folder, a and c
    assert _owner(tmp_path / "a") == _owner(tmp_path / "c") == (7, 7)
