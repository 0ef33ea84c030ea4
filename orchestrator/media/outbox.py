"""The outbox: files a group's agent sent (``send_file``), copied by the host out of the
group's ``files/`` at the moment it sent them, into ``state/outbox/<group>/`` (the
host's own folder, never mounted): the container may change or delete the original
afterwards, and what the chat gets is what the agent sent. Copied through the confined
file layer (a link, a FIFO or a path outside ``files/`` is refused), capped in size by
the app the chat is on, written to a temporary name, synced and renamed. Files are kept
OUTBOX_KEEP_SECONDS after they were sent; the HTTP API and ``orchestrator send`` show
where to fetch them.
"""

from __future__ import annotations

import contextlib
import logging
import mimetypes
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.confined import UnsafePath, open_group_dir, split
from orchestrator.fsatomic import fsync_dir
from orchestrator.media.inbox import kind_of

log = logging.getLogger("orchestrator.media")
OUTBOX = "outbox"
FILES = "files"
AGENT_ROOT = "/workspace/agent/"  # the agent folder as the container names it


@dataclass(frozen=True)
class ReplyFile:
    """A file a reply carries: the host's copy in its outbox (``path``), made when the
    agent sent it; ``name`` is the file's name for people."""

    seq: int
    name: str
    mime: str
    size: int
    kind: str
    path: str
    reply: int = -1  # its reply's place among the message's replies (when read with them)

    def to_dict(self) -> dict[str, object]:
        return {"reply": self.reply, "seq": self.seq, "name": self.name, "mime": self.mime,
                "size": self.size, "kind": self.kind}  # fmt: skip


class NotSendable(Exception):
    """A path send_file may not send; the text says why (for the model)."""


def outbox_dir(state_dir: Path, group: str) -> Path:
    return state_dir / OUTBOX / group


def files_path(path: str) -> str:
    """``path`` as a path under the agent folder's ``files/`` (``files/x.pdf``), from
    what the agent named (relative to its folder or under /workspace/agent); NotSendable
    for anything else."""
    if not isinstance(path, str) or not path.strip():
        raise NotSendable("path must be a non-empty string")
    given = path.strip()
    if given.startswith(AGENT_ROOT):
        given = given[len(AGENT_ROOT) :]
    try:
        parts = split(given)
    except UnsafePath as exc:
        raise NotSendable(f"{path}: {exc.reason}; name a file under files/") from None
    if len(parts) < 2 or parts[0] != FILES:
        raise NotSendable(f"{path}: only files under files/ can be sent")
    return "/".join(parts)


def copy_to_outbox(
    groups_root: Path,
    state_dir: Path,
    group: str,
    path: str,
    *,
    message_id: str,
    seq: int,
    limit: int,
) -> ReplyFile:
    """Copy ``files/...`` of ``group`` into its outbox as the file of reply ``seq`` of
    ``message_id``. NotSendable (with why) for a path outside files/, a link, a special
    file, a missing file or one over ``limit`` bytes; nothing is left behind then."""
    relative = files_path(path)
    name = relative.rsplit("/", 1)[-1]
    extension = re.search(r"\.([A-Za-z0-9]{1,8})$", name)
    folder = outbox_dir(state_dir, group)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = folder / f"{message_id}.{seq}{'.' + extension[1].lower() if extension else ''}"
    tmp = folder / f".{target.name}.{os.urandom(4).hex()}.tmp"
    try:
        with (
            open_group_dir(groups_root, group) as agent,
            open(tmp, "xb") as out,
        ):
            size = agent.copy_to(relative, out, limit)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
        fsync_dir(folder)
    except FileNotFoundError:
        raise NotSendable(f"{relative}: no such file") from None
    except UnsafePath as exc:
        # named inside the group's folder: the answer goes back to the container, which
        # has no business knowing where the host keeps it
        inside = f"{groups_root / group}/"
        shown = exc.shown[len(inside) :] if exc.shown.startswith(inside) else relative
        raise NotSendable(f"{shown}: {exc.reason}; not sent") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return ReplyFile(seq, name, mime, size, kind_of(mime, name), str(target))


def file_line(file: ReplyFile) -> str:
    """The reply's text when a file is sent without a caption: what it is."""
    from orchestrator.units import human_bytes

    return f"[file: {file.name} ({file.mime}, {human_bytes(file.size)})]"


def prune_outbox(state_dir: Path, sent: Iterable[str]) -> int:
    """Remove the outbox files named in ``sent`` (those sent more than
    OUTBOX_KEEP_SECONDS ago, as the queue says); how many were there."""
    root = state_dir / OUTBOX
    if not root.is_dir():
        return 0
    removed = 0
    for path in sent:
        candidate = Path(path)
        if candidate.parent.parent != root:
            continue  # only files of the outbox itself
        with contextlib.suppress(FileNotFoundError):
            candidate.unlink()
            removed += 1
    return removed
