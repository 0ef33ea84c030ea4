"""What a stored inbox file is, in the terms every chat app shares, and the lines a
turn's text carries about it.

An adapter stores a file under ``files/inbox/`` (``chatapp.files``) and describes it as a
``StoredFile``: its name there, MIME type, size, kind and, when the app says, its
duration. The core does the rest: a voice note or audio file is transcribed before the
turn, a PDF's text is saved beside it, an image is shown to a model that takes images,
and the turn's text names each (``line``).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.units import human_bytes

VOICE, AUDIO, IMAGE, DOCUMENT, OTHER = "voice", "audio", "image", "document", "other"
KINDS = (VOICE, AUDIO, IMAGE, DOCUMENT, OTHER)
INBOX = "files/inbox"  # under the agent folder (/workspace/agent in the container)
PDF_MIME = "application/pdf"
_NAME = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{8}\.[a-z0-9]{1,8}")  # chatapp.files.inbox_name
_AUDIO_EXTENSIONS = {"ogg", "oga", "opus", "mp3", "m4a", "wav", "flac", "aac", "webm", "amr"}
_IMAGE_EXTENSIONS = {"jpg", "jpeg", "png", "gif", "webp", "bmp", "tif", "tiff", "heic"}


def kind_of(mime: str | None, name: str | None) -> str:
    """A file's kind from its MIME type, else its extension: audio, image, document (a
    PDF or text) or other. (A voice note is ``voice`` only when its app says so.)"""
    mime = (mime or "").lower().split(";")[0].strip()
    extension = (name or "").rsplit(".", 1)[-1].lower() if "." in (name or "") else ""
    if mime.startswith("audio/") or (not mime and extension in _AUDIO_EXTENSIONS):
        return AUDIO
    if mime.startswith("image/") or (not mime and extension in _IMAGE_EXTENSIONS):
        return IMAGE
    if mime in (PDF_MIME, "text/plain") or extension in ("pdf", "txt"):
        return DOCUMENT
    return OTHER


def is_pdf(stored: StoredFile) -> bool:
    """Named a PDF by its type or name (whether it is one is for its bytes to say)."""
    return stored.mime == PDF_MIME or stored.name.endswith(".pdf")


def clock(seconds: float | None) -> str:
    """A duration as people read it: 0:12, 3:05, 1:02:03."""
    total = max(0, round(seconds or 0))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def shown_name(name: str | None) -> str:
    """A sender's file name as text for the model: quoted, control characters dropped."""
    clean = "".join(c for c in (name or "") if c.isprintable())[:200]
    return json.dumps(clean, ensure_ascii=False)


@dataclass(frozen=True)
class StoredFile:
    """One file an adapter stored in ``files/inbox/`` for a message.

    ``name`` is the file's name there (made by ``chatapp.files.inbox_name``: nothing of
    the sender's name but a clean extension); ``kind`` one of KINDS (``voice`` for a
    voice note the app marks as one); ``duration`` in seconds when the app says;
    ``original`` the sender's file name, only ever shown quoted."""

    name: str
    mime: str | None
    size: int
    kind: str
    duration: float | None = None
    original: str | None = None
    label: str | None = None  # the app's word for it ("photo"), when it has one

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"{self.name!r} is not a name chatapp.files.inbox_name makes")
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def path(self) -> str:
        """Where the agent finds it, relative to its folder."""
        return f"{INBOX}/{self.name}"

    def describe(self) -> str:
        """What it is, for a line: the app's word, the sender's name, type and size."""
        parts = [self.label or self.kind]
        if self.original:
            parts[0] += f" {shown_name(self.original)}"
        parts.append(self.mime or "unknown type")
        parts.append(human_bytes(self.size))
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> StoredFile:
        return cls(
            name=str(raw["name"]),
            mime=raw.get("mime"),
            size=int(raw["size"]),
            kind=str(raw["kind"]),
            duration=raw.get("duration"),
            original=raw.get("original"),
            label=raw.get("label"),
        )


def attachment_line(stored: StoredFile) -> str:
    """The line of a file stored and named only (and of an image: the host shows it to a
    model that takes images)."""
    return f"[attachment: {stored.path} ({stored.describe()})]"


def voice_line(stored: StoredFile, transcript: str | None, problem: str | None = None) -> str:
    """The lines of a voice note or audio file: its transcript marked as one (or why
    there is none), and where the audio is kept."""
    word = "voice note" if stored.kind == VOICE else "audio"
    when = f", {clock(stored.duration)}" if stored.duration else ""
    if transcript is not None and transcript.strip():
        head = f"[{word}{when}, transcribed] {transcript.strip()}"
    elif transcript is not None:
        head = f"[{word}{when}, transcribed: no speech heard]"
    else:
        head = f"[{word}{when}: not transcribed ({problem or 'no transcriber'})]"
    return f"{head}\n[audio: {stored.path} ({stored.describe()})]"


def document_line(stored: StoredFile, text_name: str | None, note: str) -> str:
    """The line of a document: the file, and its text file beside it when one was made
    (``note`` says how much, or why there is none)."""
    if text_name is not None:
        return (
            f"[document: {stored.path} ({stored.describe()}); its text: "
            f"{INBOX}/{text_name} ({note})]"
        )
    return f"[document: {stored.path} ({stored.describe()}): {note}]"
