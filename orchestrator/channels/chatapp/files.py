"""Files people send a bot: stored under ``groups/<folder>/files/inbox/`` through the
confined file layer, with names made here (nothing of the sender's name reaches a path
but a clean extension)."""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path

from orchestrator.errors import OrchestratorError

_EXTENSION = re.compile(r"\.([A-Za-z0-9]{1,8})$")
_MIME_EXTENSIONS = {
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/gif": "gif",
    "image/webp": "webp",
    "application/pdf": "pdf",
    "text/plain": "txt",
}


def inbox_name(now: float, original: str | None, mime: str | None, default: str) -> str:
    """A generated name for a stored attachment: time, randomness, and an extension from
    the sender's file name only when it is 1-8 letters and digits. Nothing else of the
    sender's name reaches a path."""
    match = _EXTENSION.search(original or "")
    extension = match[1].lower() if match else _MIME_EXTENSIONS.get((mime or "").lower(), default)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{stamp}-{secrets.token_hex(4)}.{extension}"


def shown_name(name: str | None) -> str:
    """A sender's file name as text for the model: quoted, control characters dropped."""
    clean = "".join(c for c in (name or "") if c.isprintable())[:200]
    return json.dumps(clean, ensure_ascii=False)


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
