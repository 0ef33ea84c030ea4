"""Files people send a bot: stored under ``groups/<folder>/files/inbox/`` through the
confined file layer, with names made here (nothing of the sender's name reaches a path
but a clean extension), and described to the core as a ``StoredFile``
(``orchestrator.media.inbox``), which does the rest."""

from __future__ import annotations

import logging
import re
import secrets
import time
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.media.inbox import INBOX, StoredFile, kind_of, shown_name

log = logging.getLogger("orchestrator.channels")

__all__ = [
    "discard_inbox_files",
    "inbox_name",
    "shown_name",
    "store_inbox_file",
    "store_received",
]

_EXTENSION = re.compile(r"\.([A-Za-z0-9]{1,8})$")
_MIME_EXTENSIONS = {
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/gif": "gif",
    "image/webp": "webp",
    "application/pdf": "pdf",
    "text/plain": "txt",
    "audio/ogg": "ogg",
    "audio/opus": "opus",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
}


def inbox_name(now: float, original: str | None, mime: str | None, default: str) -> str:
    """A generated name for a stored attachment: time, randomness, and an extension from
    the sender's file name only when it is 1-8 letters and digits. Nothing else of the
    sender's name reaches a path."""
    match = _EXTENSION.search(original or "")
    mime_key = (mime or "").lower().split(";")[0].strip()
    extension = match[1].lower() if match else _MIME_EXTENSIONS.get(mime_key, default)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{stamp}-{secrets.token_hex(4)}.{extension}"


def store_inbox_file(groups_root: Path, group: str, name: str, data: bytes) -> None:
    """Create ``files/inbox/<name>`` of ``group`` exclusively, through directory
    descriptors: a link planted in files/ by the container cannot redirect the write."""
    from orchestrator.confined import open_group_dir

    with (
        open_group_dir(groups_root, group) as folder,
        folder.open_dir("files/inbox", create=True) as inbox,
    ):
        if not inbox.create_exclusive(name, data):
            raise OrchestratorError(f"files/inbox/{name} exists already")


def store_received(
    groups_root: Path,
    group: str,
    data: bytes,
    *,
    original: str | None,
    mime: str | None,
    kind: str | None = None,
    duration: float | None = None,
    label: str | None = None,
    default_extension: str = "bin",
) -> StoredFile:
    """Store a received file in ``group``'s inbox (``store_inbox_file``) and describe it:
    its kind from the app (``voice``) or from its type and name. OSError when the inbox
    is not a real folder (nothing is written through a link)."""
    name = inbox_name(time.time(), original, mime, default_extension)
    store_inbox_file(groups_root, group, name, data)
    return StoredFile(
        name=name,
        mime=mime,
        size=len(data),
        kind=kind or kind_of(mime, original or name),
        duration=duration,
        original=original,
        label=label,
    )


def discard_inbox_files(groups_root: Path, group: str, names: list[str]) -> list[str]:
    """Remove files ``store_received`` stored for a message that was then not queued
    (refused, or to be read again later), through directory descriptors as they were
    written; returns the names removed. One already gone is skipped; an inbox that is
    not a real folder any more is left alone (nothing is removed through a link), with
    a warning."""
    from orchestrator.confined import open_group_dir

    removed: list[str] = []
    try:
        with (
            open_group_dir(groups_root, group) as folder,
            folder.open_dir(INBOX) as inbox,
        ):
            for name in names:
                try:
                    inbox.unlink(name)
                except FileNotFoundError:
                    continue
                except OSError as exc:  # a folder planted in its place: left alone
                    log.warning("group %s: %s/%s was not removed: %s", group, INBOX, name, exc)
                    continue
                removed.append(name)
    except FileNotFoundError:
        pass  # no inbox (or no group folder) any more: nothing of it is left
    except OSError as exc:
        log.warning(
            "group %s: files of a message not queued were not removed from %s: %s",
            group,
            INBOX,
            exc,
        )
    return removed
