"""The backup archive's format word for word: the head and manifest as JSON, the members
the writer makes (their type, mode, time and owner, the tar and gzip formats), what a
reader hands its consumer, and each refusal's sentence at the edges of what it checks."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from orchestrator.backup.archive import (
    CHUNK,
    HEAD,
    MANIFEST,
    ArchiveWriter,
    BackupInvalid,
    Head,
    Manifest,
    Member,
    check_name,
    check_versions,
    compressed,
    fsync_path,
    read_archive,
    supported_versions,
)
from orchestrator.errors import BadInput
from orchestrator.limits import BACKUP_HEAD_MAX_BYTES, BACKUP_SPOOL_BYTES
from orchestrator.versions import RELEASE, FileTooNew

HEAD_1 = Head(1, "1.2.3", 5.75, {"layout": 2, "schema": 7}, {"path": "/h/é"}, True,
              {"groups": 2})  # fmt: skip


def _write(path: Path, fill: Any = None, *, head: Head = HEAD_1) -> ArchiveWriter:
    """An archive written at ``path`` by the writer: its head, what ``fill`` adds, and
    its manifest."""
    with path.open("wb") as out:
        writer = ArchiveWriter(out, gzipped=compressed(path), spool_dir=path.parent)
        writer.add_head(head)
        if fill is not None:
            fill(writer)
        writer.finish(head)
    return writer


def _some(writer: ArchiveWriter) -> None:
    writer.add_dir("home", 0o40755, 7.9)
    writer.add_file("home/a.md", io.BytesIO(b"hello"), 5, 0o100644, 3.2)


def _members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return tar.getmembers()


def _read(path: Path) -> tuple[Head, Manifest, list[tuple[Member, bytes | None]]]:
    """What a reader hands its consumer: each member and its bytes."""
    seen: list[tuple[Member, bytes | None]] = []

    def member(found: Member, stream: BinaryIO | None) -> None:
        seen.append((found, None if stream is None else stream.read()))

    head, manifest = read_archive(path, lambda head: None, member)
    return head, manifest, seen


def _tar(path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _dir(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info, None


HEAD_BYTES = json.dumps(HEAD_1.to_json()).encode()


def _manifest(files: dict[str, bytes] | None = None, dirs: tuple[str, ...] = (),
              head: bytes = HEAD_BYTES) -> tuple[tarfile.TarInfo, bytes]:  # fmt: skip
    listed = {
        name: [len(data), hashlib.sha256(data).hexdigest()] for name, data in (files or {}).items()
    }
    body = {"head_sha256": hashlib.sha256(head).hexdigest(), "files": listed, "dirs": list(dirs)}
    return _file(MANIFEST, json.dumps(body).encode())


def _refusal(path: Path) -> str:
    with pytest.raises(BackupInvalid) as refused:
        read_archive(path, lambda head: None)
    return refused.value.message


# names


@pytest.mark.parametrize(
    ("name", "gzipped"),
    [("b.tar", False), ("b.tar.gz", True), ("b.tgz", True), ("x.tar.tar", False)],
)
def test_an_archives_name_says_whether_it_is_compressed(name: str, gzipped: bool) -> None:
    assert compressed(Path("/some") / name) is gzipped


@pytest.mark.parametrize("name", ["b.zip", "b.tar.bz2", "b.gz", "b"])
def test_another_suffix_is_refused_with_an_example(name: str) -> None:
    with pytest.raises(BadInput) as refused:
        compressed(Path("/some") / name)
    assert refused.value.message == f"/some/{name}: a backup's name ends in .tar, .tar.gz or .tgz"
    assert refused.value.hint == "for example: --to orchestrator-backup.tar.gz"


@pytest.mark.parametrize(
    "name",
    ["home", "state/x", "outside/allowlist.yaml", "home/" + "a" * 4091, "home/..x/.y"],
)
def test_a_name_under_a_root_is_one_a_backup_holds(name: str) -> None:
    check_name(name, "b.tar")


@pytest.mark.parametrize(
    "name",
    ["", "home/" + "a" * 4092, "home/a\x00", "/home/a", "homes/a", "home/", "home//a",
     "home/./a", "home/../a", "home/a/..", "HOME/a", "."],
)  # fmt: skip
def test_a_name_outside_the_roots_is_refused_naming_it(name: str) -> None:
    with pytest.raises(BackupInvalid) as refused:
        check_name(name, "b.tar")
    assert (
        refused.value.message
        == f"b.tar: holds a member named {name!r}, outside what a backup holds"
    )


# the head and the manifest


def test_a_head_is_its_json_and_back() -> None:
    assert HEAD_1.to_json() == {
        "format": 1, "release": "1.2.3", "created": 5.75, "versions": {"layout": 2, "schema": 7},
        "source": {"path": "/h/é"}, "secrets": True, "summary": {"groups": 2},
    }  # fmt: skip
    assert Head.from_json(HEAD_1.to_json(), "b.tar") == HEAD_1


def test_a_head_without_its_optional_keys_has_their_defaults() -> None:
    data = {"format": "2", "release": 3, "created": 4, "versions": {5: "6"}, "summary": None}
    assert Head.from_json(data, "b.tar") == Head(2, "3", 4.0, {"5": 6}, {}, False, {})


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({}, "'versions'"),
        ({"versions": {}, "release": "r", "created": 1}, "'format'"),
        ({"versions": {}, "format": 1, "created": 1}, "'release'"),
        ({"versions": {}, "format": 1, "release": "r"}, "'created'"),
        ({"versions": [], "format": 1, "release": "r", "created": 1},
         "'list' object has no attribute 'items'"),
        ({"versions": {}, "format": "x", "release": "r", "created": 1},
         "invalid literal for int() with base 10: 'x'"),
        ([], "list indices must be integers or slices, not str"),
    ],
)  # fmt: skip
def test_a_head_that_is_not_one_is_refused_saying_why(data: Any, why: str) -> None:
    with pytest.raises(BackupInvalid) as refused:
        Head.from_json(data, "b.tar")
    assert refused.value.message == f"b.tar: its head (orchestrator-backup.json) is not one: {why}"


MANIFEST_1 = Manifest(
    files={"home/a": (5, "ab"), "state/b": (7, "cd")},
    dirs=["home"],
    skipped=[("home/l", "a symlink")],
    outside={"outside/x": "/etc/x"},
    secrets_left_out=["/h/orchestrator.env"],
    head_sha256="ef",
)


def test_a_manifest_is_its_json_and_back() -> None:
    data = MANIFEST_1.to_json(HEAD_1)
    assert data == {
        "format": 1, "release": "1.2.3", "versions": {"layout": 2, "schema": 7},
        "head_sha256": "ef", "files": {"home/a": [5, "ab"], "state/b": [7, "cd"]},
        "dirs": ["home"], "skipped": [["home/l", "a symlink"]], "outside": {"outside/x": "/etc/x"},
        "secrets_left_out": ["/h/orchestrator.env"],
    }  # fmt: skip
    assert Manifest.from_json(data, "b.tar") == MANIFEST_1
    assert MANIFEST_1.bytes == 12


def test_a_manifest_without_its_optional_keys_has_their_defaults() -> None:
    data = {"files": {"home/a": ["5", 6]}, "dirs": [1], "head_sha256": 2}
    assert Manifest.from_json(data, "b.tar") == Manifest(
        {"home/a": (5, "6")}, ["1"], [], {}, [], "2"
    )
    assert Manifest().bytes == 0


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"dirs": [], "head_sha256": ""}, "'files'"),
        ({"files": {}, "head_sha256": ""}, "'dirs'"),
        ({"files": {}, "dirs": []}, "'head_sha256'"),
        ({"files": {"a": [1]}, "dirs": [], "head_sha256": ""}, "list index out of range"),
        ({"files": {}, "dirs": [], "head_sha256": "", "skipped": [["a"]]},
         "not enough values to unpack (expected 2, got 1)"),
        ({"files": [], "dirs": [], "head_sha256": ""}, "'list' object has no attribute 'items'"),
        ({"files": {"a": ["x", ""]}, "dirs": [], "head_sha256": ""},
         "invalid literal for int() with base 10: 'x'"),
        ({"files": {}, "dirs": 1, "head_sha256": ""}, "'int' object is not iterable"),
    ],
)  # fmt: skip
def test_a_manifest_that_is_not_one_is_refused_saying_why(data: Any, why: str) -> None:
    with pytest.raises(BackupInvalid) as refused:
        Manifest.from_json(data, "b.tar")
    assert refused.value.message == (
        f"b.tar: its manifest (orchestrator-backup.manifest.json) is not one: {why}"
    )


# writing


def test_the_writer_makes_a_head_the_members_and_a_manifest_as_pax(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    long_name = "home/" + "x" * 120

    def fill(writer: ArchiveWriter) -> None:
        _some(writer)
        writer.add_file(long_name, io.BytesIO(b""), 0, 0o104755, 1e9 + 0.9)

    writer = _write(path, fill)
    head, a, b, c, manifest = _members(path)
    assert [(m.name, m.type, m.mode, m.mtime, m.size, m.uname, m.gname, m.uid, m.gid)
            for m in (head, a, b, c)] == [
        (HEAD, tarfile.REGTYPE, 0o600, 5, len(_head_bytes()), "", "", 0, 0),
        ("home", tarfile.DIRTYPE, 0o755, 7, 0, "", "", 0, 0),
        ("home/a.md", tarfile.REGTYPE, 0o644, 3, 5, "", "", 0, 0),
        (long_name, tarfile.REGTYPE, 0o755, 1_000_000_000, 0, "", "", 0, 0),
    ]  # fmt: skip
    assert c.pax_headers == {"path": long_name}  # a long name goes in a pax header
    assert (manifest.name, manifest.type, manifest.mode) == (MANIFEST, tarfile.REGTYPE, 0o600)
    with tarfile.open(path) as tar:
        data = tar.extractfile(manifest).read()  # type: ignore[union-attr]
        assert tar.extractfile(head).read() == _head_bytes()  # type: ignore[union-attr]
    digest = hashlib.sha256(_head_bytes()).hexdigest()
    assert writer.manifest == Manifest(
        {"home/a.md": (5, hashlib.sha256(b"hello").hexdigest()),
         long_name: (0, hashlib.sha256(b"").hexdigest())},
        ["home"], head_sha256=digest,
    )  # fmt: skip
    assert data == json.dumps(writer.manifest.to_json(HEAD_1), sort_keys=True).encode()


def _head_bytes() -> bytes:
    # sorted keys, and every character past ASCII escaped
    return json.dumps(HEAD_1.to_json(), sort_keys=True, ensure_ascii=True).encode()


def test_the_head_is_written_with_sorted_keys_in_ascii(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _write(path)
    with tarfile.open(path) as tar:
        data = tar.extractfile(HEAD).read()  # type: ignore[union-attr]
    assert data.startswith(b'{"created": 5.75, "format": 1, "release": "1.2.3", "secrets": true')
    assert b'"source": {"path": "/h/\\u00e9"}' in data


def test_a_compressed_archive_is_gzip_at_level_3_dated_zero(tmp_path: Path) -> None:
    out = io.BytesIO()  # no name: none in the gzip header
    writer = ArchiveWriter(out, gzipped=True, spool_dir=tmp_path)
    writer.add_head(HEAD_1)
    _some(writer)
    writer.finish(HEAD_1)
    raw = out.getvalue()
    plain = gzip.decompress(raw)
    again = io.BytesIO()
    with gzip.GzipFile(fileobj=again, mode="wb", compresslevel=3, mtime=0) as out:
        out.write(plain)
    assert raw == again.getvalue()
    assert raw[4:8] == bytes(4)  # no time in the header: the same files, the same bytes
    assert plain.startswith(HEAD.encode())


def test_a_plain_archive_is_not_compressed(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _write(path, _some)
    assert path.read_bytes().startswith(HEAD.encode())


def test_a_file_is_archived_up_to_its_limit(tmp_path: Path) -> None:
    data = bytes(range(256)) * (CHUNK // 256) + b"tail-of-it"
    sizes: list[int] = []

    def fill(writer: ArchiveWriter) -> None:
        sizes.append(writer.add_file("home/big", io.BytesIO(data), CHUNK + 4, 0o644, 1.0))
        sizes.append(writer.add_file("home/short", io.BytesIO(b"abc"), 10, 0o644, 1.0))
        sizes.append(writer.add_file("home/none", io.BytesIO(b"abc"), 0, 0o644, 1.0))

    writer = _write(tmp_path / "b.tar", fill)
    assert sizes == [CHUNK + 4, 3, 0]
    assert writer.manifest.files == {
        "home/big": (CHUNK + 4, hashlib.sha256(data[: CHUNK + 4]).hexdigest()),
        "home/short": (3, hashlib.sha256(b"abc").hexdigest()),
        "home/none": (0, hashlib.sha256(b"").hexdigest()),
    }
    _, _, seen = _read(tmp_path / "b.tar")
    assert [(m.name, data) for m, data in seen] == [
        ("home/big", data[: CHUNK + 4]), ("home/short", b"abc"), ("home/none", b""),
    ]  # fmt: skip


def test_a_file_past_what_is_held_in_memory_is_spooled_in_the_spool_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    spooled: list[Any] = []
    real = tempfile.TemporaryFile

    def spool(*args: Any, **kwargs: Any) -> Any:
        spooled.append(kwargs["dir"])
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", spool)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spool").mkdir()
    with (tmp_path / "b.tar").open("wb") as out:
        writer = ArchiveWriter(out, gzipped=False, spool_dir=tmp_path / "spool")
        size = BACKUP_SPOOL_BYTES
        writer.add_file("home/held", io.BytesIO(bytes(size)), size, 0o644, 1.0)
        assert spooled == []
        writer.add_file("home/spooled", io.BytesIO(bytes(size + 1)), size + 1, 0o644, 1.0)
        assert spooled == [str(tmp_path / "spool")]
        writer.finish(HEAD_1)


def test_a_name_is_archived_once(tmp_path: Path) -> None:
    def fill(writer: ArchiveWriter) -> None:
        writer.add_dir("home", 0o755, 1.0)
        with pytest.raises(Exception) as refused:
            writer.add_file("home", io.BytesIO(b""), 0, 0o644, 1.0)
        assert type(refused.value).__name__ == "OrchestratorError"
        assert str(refused.value) == "home would be archived twice"

    _write(tmp_path / "b.tar", fill)


# reading


@pytest.mark.parametrize("name", ["b.tar", "b.tar.gz"])
def test_a_reader_hands_each_member_on_and_gives_the_head_and_manifest(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    writer = _write(path, _some)
    heads: list[Head] = []
    seen: list[tuple[Member, bytes | None]] = []

    def member(found: Member, stream: BinaryIO | None) -> None:
        # a part of a file read, the rest drained and hashed by the reader
        seen.append((found, None if stream is None else stream.read(2)))

    assert read_archive(path, heads.append, member) == (HEAD_1, writer.manifest)
    assert heads == [HEAD_1]
    assert seen == [
        (Member("home", True, 0o755, 7.0), None),
        (Member("home/a.md", False, 0o644, 3.0), b"he"),
    ]
    assert read_archive(path, heads.append) == (HEAD_1, writer.manifest)


def test_a_member_is_hashed_in_chunks_never_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "b.tar"
    data = bytes(2 * CHUNK + 1)
    _tar(path, _file(HEAD, HEAD_BYTES), _file("home/a", data), _manifest({"home/a": data}))
    asked: list[int | None] = []
    extract = tarfile.TarFile.extractfile

    def extractfile(self: tarfile.TarFile, member: Any) -> Any:
        stream = extract(self, member)
        read = stream.read  # type: ignore[union-attr]

        def counted(size: int | None = -1) -> bytes:
            if member.name == "home/a":
                asked.append(size)
            return read(size)

        stream.read = counted  # type: ignore[union-attr, method-assign]
        return stream

    monkeypatch.setattr(tarfile.TarFile, "extractfile", extractfile)
    read_archive(path, lambda head: None)
    assert asked == [CHUNK, CHUNK, CHUNK, CHUNK]  # the last two: 1 byte, then none


def test_a_member_keeps_only_its_permission_bits(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    info, data = _file("home/a", b"x")
    info.mode, info.mtime = 0o4755, 12
    _tar(path, _file(HEAD, HEAD_BYTES), (info, data), _manifest({"home/a": b"x"}))
    _, _, seen = _read(path)
    assert seen == [(Member("home/a", False, 0o755, 12.0), b"x")]


def test_a_head_refused_stops_the_reading_before_any_member(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _write(path, _some)
    seen: list[Member] = []

    def refuse(head: Head) -> None:
        raise FileTooNew("too new")

    with pytest.raises(FileTooNew):
        read_archive(path, refuse, lambda member, stream: seen.append(member))
    assert seen == []


def test_a_file_that_cannot_be_read_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as refused:
        read_archive(tmp_path / "none.tar", lambda head: None)
    assert (
        refused.value.message == f"cannot read {tmp_path / 'none.tar'}: No such file or directory"
    )
    assert not isinstance(refused.value, BackupInvalid)


def test_a_file_that_is_no_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    path.write_bytes(b"hello" * 200)
    assert _refusal(path) == f"{path}: not a whole archive (invalid header)"
    path.write_bytes(b"\x1f\x8b\x08")
    assert _refusal(path) == f"{path}: not a whole archive (its gzip header is cut short)"


@pytest.mark.parametrize(
    "first",
    [[], [_dir("home")], [_file("home/" + HEAD, b"{}")]],
)
def test_an_archive_that_does_not_start_with_its_head_is_refused(
    tmp_path: Path, first: list[tuple[tarfile.TarInfo, bytes | None]]
) -> None:
    path = tmp_path / "b.tar"
    _tar(path, *first)
    assert _refusal(path) == f"{path}: not an orchestrator backup (no {HEAD} first)"


def test_a_head_of_at_most_its_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    padded = HEAD_BYTES[:-1] + b" " * (BACKUP_HEAD_MAX_BYTES - len(HEAD_BYTES)) + b"}"
    _tar(path, _file(HEAD, padded), _manifest(head=padded))
    assert read_archive(path, lambda head: None)[0] == HEAD_1
    _tar(path, _file(HEAD, padded + b" "), _manifest(head=padded + b" "))
    assert _refusal(path) == f"{path}: its {HEAD} is not a file of at most 1,048,576 bytes"


def test_a_head_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _tar(path, _dir(HEAD), _manifest())
    assert _refusal(path) == f"{path}: its {HEAD} is not a file of at most 1,048,576 bytes"


def test_a_head_or_manifest_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _tar(path, _file(HEAD, b"{nope"), _manifest())
    assert _refusal(path) == (
        f"{path}: its head ({HEAD}) is not JSON: Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)"
    )
    _tar(path, _file(HEAD, HEAD_BYTES), _file(MANIFEST, b"[1,"))
    assert _refusal(path) == (
        f"{path}: its manifest is not JSON: Expecting value: line 1 column 4 (char 3)"
    )
    _tar(path, _file(HEAD, HEAD_BYTES), _file(MANIFEST, b"[]"))
    assert _refusal(path) == (
        f"{path}: its manifest ({MANIFEST}) is not one: "
        "list indices must be integers or slices, not str"
    )


def test_what_a_reader_refuses_names_the_archive(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _tar(path, _file(HEAD, b"[]"), _manifest(head=b"[]"))
    assert _refusal(path) == (
        f"{path}: its head ({HEAD}) is not one: list indices must be integers or slices, not str"
    )
    _tar(path, _file(HEAD, HEAD_BYTES), _dir(MANIFEST))
    assert _refusal(path) == f"{path}: its {MANIFEST} is not a file of at most 536,870,912 bytes"
    _tar(path, _file(HEAD, HEAD_BYTES), _dir("elsewhere"), _manifest())
    assert _refusal(path) == (
        f"{path}: holds a member named 'elsewhere', outside what a backup holds"
    )


def test_a_member_after_the_manifest_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _tar(path, _file(HEAD, HEAD_BYTES), _manifest(), _dir("home"))
    assert _refusal(path) == f"{path}: holds 'home' after its manifest"


def test_an_archive_without_its_manifest_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    _tar(path, _file(HEAD, HEAD_BYTES), _dir("home"))
    assert _refusal(path) == f"{path}: ends without its manifest ({MANIFEST}): cut short?"


@pytest.mark.parametrize(
    "twice",
    [[_dir("home"), _dir("home")], [_file("home", b""), _dir("home")],
     [_dir("home"), _file("home", b"")], [_file("home", b""), _file("home", b"")]],
)  # fmt: skip
def test_a_name_seen_twice_is_refused(
    tmp_path: Path, twice: list[tuple[tarfile.TarInfo, bytes | None]]
) -> None:
    path = tmp_path / "b.tar"
    _tar(path, _file(HEAD, HEAD_BYTES), *twice, _manifest())
    assert _refusal(path) == f"{path}: holds 'home' twice"


def test_a_member_of_another_type_is_refused_naming_its_type(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    odd = tarfile.TarInfo("home/x")
    odd.type = b"Z"
    _tar(path, _file(HEAD, HEAD_BYTES), (odd, None), _manifest())
    assert _refusal(path) == (
        f"{path}: holds a member of type b'Z' at 'home/x'; a backup holds regular files and "
        "folders only (nothing was restored from it)"
    )
    block = tarfile.TarInfo("home/x")
    block.type = tarfile.BLKTYPE
    _tar(path, _file(HEAD, HEAD_BYTES), (block, None), _manifest())
    assert "holds a device file at 'home/x'" in _refusal(path)


# the manifest against the members


def test_an_archive_matching_its_manifest_is_read(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    files = {"home/a": b"1", "state/b": b"22"}
    _tar(path, _file(HEAD, HEAD_BYTES), _dir("home"), *(_file(n, d) for n, d in files.items()),
         _manifest(files, ("home",)))  # fmt: skip
    assert read_archive(path, lambda head: None)[1].bytes == 3


def test_every_difference_from_the_manifest_is_named(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    one, two = hashlib.sha256(b"1").hexdigest(), hashlib.sha256(b"22").hexdigest()
    _tar(path, _file(HEAD, HEAD_BYTES), _file("home/a", b"1"),
         _manifest({"home/a": b"22"}))  # fmt: skip
    message = _refusal(path)
    assert message == (
        f"{path}: does not match its manifest: home/a is 1 bytes with sha256 {one[:12]}..., "
        f"the manifest says 2 bytes and {two[:12]}..."
    )
    _tar(path, _file(HEAD, HEAD_BYTES), _file("home/a", b"1"),
         _manifest({"home/a": b"2"}))  # fmt: skip
    assert "home/a is 1 bytes with sha256" in _refusal(path)  # the same size, another digest
    with pytest.raises(BackupInvalid) as refused:
        read_archive(path, lambda head: None)
    assert refused.value.hint == (
        "the archive was damaged or changed after it was written; use another backup"
    )


@pytest.mark.parametrize(
    ("members", "manifest", "problems"),
    [
        ([], _manifest(head=b"other"), "orchestrator-backup.json differs from what was written"),
        ([_file("home/a", b"")], _manifest(), "home/a is not in the manifest"),
        ([], _manifest({"home/a": b""}), "home/a is missing"),
        ([], _manifest(dirs=("home",)), "folder home is missing"),
        ([_dir("home")], _manifest(), "folder home is not in the manifest"),
        ([_file("home/b", b""), _file("home/a", b""), _dir("state")],
         _manifest({"home/d": b"", "home/c": b""}, ("outside",)),
         "home/a is not in the manifest; home/b is not in the manifest; home/c is missing "
         "(and 3 more)"),
        ([_file("home/b", b""), _file("home/a", b"")], _manifest({"home/c": b""}),
         "home/a is not in the manifest; home/b is not in the manifest; home/c is missing"),
        ([_file("home/a", b"")], _manifest({"home/c": b"", "home/b": b""}, ("state",)),
         "home/a is not in the manifest; home/b is missing; home/c is missing (and 1 more)"),
    ],
)  # fmt: skip
def test_each_kind_of_difference_is_named_in_order_and_at_most_three(
    tmp_path: Path,
    members: list[tuple[tarfile.TarInfo, bytes | None]],
    manifest: tuple[tarfile.TarInfo, bytes],
    problems: str,
) -> None:
    path = tmp_path / "b.tar"
    _tar(path, _file(HEAD, HEAD_BYTES), *members, manifest)
    assert _refusal(path) == f"{path}: does not match its manifest: {problems}"


# versions


def test_what_this_release_reads() -> None:
    from orchestrator.store.schema import LATEST
    from orchestrator.versions import (
        BACKUP_FORMAT_VERSION,
        CONFIG_FILE_VERSION,
        GROUP_FILE_VERSION,
        LAYOUT_VERSION,
        TRANSCRIPT_VERSION,
    )

    assert supported_versions() == {
        "format": BACKUP_FORMAT_VERSION, "schema": LATEST, "layout": LAYOUT_VERSION,
        "group_file": GROUP_FILE_VERSION, "config_file": CONFIG_FILE_VERSION,
        "transcript": TRANSCRIPT_VERSION,
    }  # fmt: skip


def test_a_head_of_the_versions_read_or_older_is_taken() -> None:
    check_versions(Head(2, "r", 0.0, {"schema": 3, "layout": 0, "new": 99}, {}, False),
                   "b.tar", {"format": 2, "schema": 3, "layout": 1})  # fmt: skip


def test_a_newer_head_is_refused_naming_every_newer_version_in_order() -> None:
    head = Head(3, "9.9.9", 0.0, {"schema": 4, "layout": 1, "new": 99}, {}, False)
    with pytest.raises(FileTooNew) as refused:
        check_versions(head, "b.tar", {"format": 2, "schema": 3, "layout": 1})
    assert refused.value.message == (
        f"b.tar was written by release 9.9.9, newer than this orchestrator ({RELEASE}): "
        "format 3 (this release reads up to 2), schema 4 (this release reads up to 3); "
        "nothing was restored"
    )
    assert refused.value.hint == "restore it with that release or a newer one"


# the folder synced


def test_a_folder_is_synced_and_a_file_is_not_one(tmp_path: Path) -> None:
    fsync_path(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        fsync_path(tmp_path / "f")


# -- an archive given up on ------------------------------------------------------------------


class _Full(io.BytesIO):
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, data: Any) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(28, "No space left on device")
        return super().write(data)


@pytest.mark.parametrize("gzipped", [True, False])
def test_discard_closes_the_streams_into_the_still_open_file(tmp_path: Path, gzipped: bool) -> None:
    out = io.BytesIO()
    writer = ArchiveWriter(out, gzipped=gzipped, spool_dir=tmp_path)
    writer.add_dir("state", 0o700, 1e9)
    writer.discard()
    assert writer._tar.closed
    assert writer._gzip is None or writer._gzip.closed
    assert not out.closed
    data = gzip.decompress(out.getvalue()) if gzipped else out.getvalue()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getnames() == ["state"]  # what was added, and no manifest


@pytest.mark.parametrize("gzipped", [True, False])
def test_discard_says_nothing_of_a_file_full_or_closed(tmp_path: Path, gzipped: bool) -> None:
    full = _Full(room=10)
    writer = ArchiveWriter(full, gzipped=gzipped, spool_dir=tmp_path)
    writer.discard()  # the closing writes fail with OSError
    assert writer._tar.closed
    assert writer._gzip is None or writer._gzip.closed
    gone = io.BytesIO()
    writer = ArchiveWriter(gone, gzipped=gzipped, spool_dir=tmp_path)
    writer.add_dir("state", 0o700, 1e9)
    gone.close()
    writer.discard()  # the closing writes fail with ValueError
    assert writer._tar.closed
    assert writer._gzip is None or writer._gzip.closed
