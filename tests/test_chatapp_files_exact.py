"""Files people send a bot, exactly: the names made for them, where and how they are
stored, how they are described, and how the files of a message not queued are removed."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

from orchestrator.channels.chatapp.files import (
    discard_inbox_files,
    inbox_name,
    store_inbox_file,
    store_received,
)
from orchestrator.errors import OrchestratorError
from orchestrator.media.inbox import StoredFile

NOW = 1_767_268_922.0  # 2026-01-01 12:02:02 UTC
NAME = re.compile(r"20260101-120202-[0-9a-f]{8}\.([a-z0-9]+)")


@pytest.fixture
def groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(time, "time", lambda: NOW)  # the clock a received file is named by
    (tmp_path / "groups/fam").mkdir(parents=True)
    return tmp_path / "groups"


def extension(name: str) -> str:
    match = NAME.fullmatch(name)
    assert match is not None, name
    return match[1]


def test_a_name_is_the_time_randomness_and_an_extension() -> None:
    assert extension(inbox_name(NOW, "Holiday Photo.JPEG", "image/png", "bin")) == "jpeg"
    # from the type when the name has none (parameters and case aside)
    assert extension(inbox_name(NOW, "photo", "Image/JPEG; name=photo", "bin")) == "jpg"
    assert extension(inbox_name(NOW, None, "audio/ogg;codecs=opus", "bin")) == "ogg"
    # neither: the app's default
    assert extension(inbox_name(NOW, None, None, "ogg")) == "ogg"
    assert extension(inbox_name(NOW, "a.tar.verylongext", "x/unknown", "bin")) == "bin"
    assert inbox_name(NOW, None, None, "bin") != inbox_name(NOW, None, None, "bin")


def test_a_file_is_stored_in_the_groups_inbox_and_never_twice(groups: Path) -> None:
    store_inbox_file(groups, "fam", "20260101-120202-0a1b2c3d.jpg", b"jpeg bytes")
    stored = groups / "fam/files/inbox/20260101-120202-0a1b2c3d.jpg"
    assert stored.read_bytes() == b"jpeg bytes"
    assert [p.name for p in (groups / "fam").iterdir()] == ["files"]
    with pytest.raises(OrchestratorError) as refused:
        store_inbox_file(groups, "fam", "20260101-120202-0a1b2c3d.jpg", b"other")
    assert refused.value.message == "files/inbox/20260101-120202-0a1b2c3d.jpg exists already"
    assert stored.read_bytes() == b"jpeg bytes"


def test_a_received_file_is_stored_and_described(groups: Path) -> None:
    stored = store_received(
        groups,
        "fam",
        b"OggS",
        original="note.OGG",
        mime="audio/ogg",
        kind="voice",
        duration=3.5,
        label="voice message",
    )
    assert extension(stored.name) == "ogg"
    assert stored == StoredFile(
        name=stored.name,
        mime="audio/ogg",
        size=4,
        kind="voice",
        duration=3.5,
        original="note.OGG",
        label="voice message",
    )
    assert (groups / "fam/files/inbox" / stored.name).read_bytes() == b"OggS"


@pytest.mark.parametrize(
    ("original", "mime", "default", "made", "kind"),
    [
        (None, None, None, "bin", "other"),  # the default extension is bin
        ("notes.md", None, None, "md", "other"),  # the extension from the sender's name
        (None, "image/png", None, "png", "image"),  # from the type
        ("scan.pdf", "image/png", None, "pdf", "image"),  # the type before the name
        ("song.mp3", None, None, "mp3", "audio"),  # the name when there is no type
        ("report", None, "pdf", "pdf", "other"),  # the made name's extension is no kind
        (None, None, "pdf", "pdf", "document"),  # without the sender's name, the made one
    ],
)
def test_a_received_files_name_and_kind(
    groups: Path,
    original: str | None,
    mime: str | None,
    default: str | None,
    made: str,
    kind: str,
) -> None:
    extra = {} if default is None else {"default_extension": default}
    stored = store_received(groups, "fam", b"x", original=original, mime=mime, **extra)
    assert (extension(stored.name), stored.kind, stored.mime) == (made, kind, mime)
    assert (stored.duration, stored.label, stored.original) == (None, None, original)


def test_discarding_removes_the_names_given_and_skips_those_gone(groups: Path) -> None:
    inbox = groups / "fam/files/inbox"
    inbox.mkdir(parents=True)
    for name in ("a.jpg", "b.pdf", "c.txt"):
        (inbox / name).write_bytes(b"x")
    assert discard_inbox_files(groups, "fam", ["gone.jpg", "a.jpg", "c.txt"]) == ["a.jpg", "c.txt"]
    assert [p.name for p in inbox.iterdir()] == ["b.pdf"]
    assert discard_inbox_files(groups, "fam", ["a.jpg"]) == []
    # no inbox, no group folder: nothing to remove, nothing said
    assert discard_inbox_files(groups, "pets", ["a.jpg"]) == []


def test_a_folder_in_a_files_place_is_left_and_said_exactly(
    groups: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = groups / "fam/files/inbox"
    (inbox / "a.jpg").mkdir(parents=True)
    (inbox / "b.jpg").write_bytes(b"x")
    assert discard_inbox_files(groups, "fam", ["a.jpg", "b.jpg"]) == ["b.jpg"]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "group fam: files/inbox/a.jpg was not removed: [Errno 21] Is a directory: 'a.jpg'",
        )
    ]
