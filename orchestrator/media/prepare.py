"""Which of a message's files need work before its turn, and the text the turn gets.

``needs_work`` says whether a message waits (in state ``preparing``) for work: a voice
note or audio file with a transcriber chosen (group.yaml ``media.transcribe``), or a
PDF; ``daemon.media`` does that work. ``quick_lines`` names files that need none, and
``compose`` puts the lines after what the person wrote, within the turn's size.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.config.transcription import OFF
from orchestrator.limits import MESSAGE_MAX_CHARS
from orchestrator.media.inbox import (
    AUDIO,
    VOICE,
    StoredFile,
    attachment_line,
    is_pdf,
    voice_line,
)


def is_audio(stored: StoredFile) -> bool:
    return stored.kind in (VOICE, AUDIO)


def needs_work(media: Sequence[StoredFile], transcribe: str) -> bool:
    """Whether a message with these files waits for work before its turn (``transcribe``:
    the group's transcriber, or ``off``)."""
    return any((is_audio(m) and transcribe != OFF) or is_pdf(m) for m in media)


def quick_lines(media: Sequence[StoredFile]) -> list[str]:
    """The lines of files that need no work (``needs_work`` is false)."""
    lines = []
    for stored in media:
        if is_audio(stored):
            lines.append(voice_line(stored, None, "transcription is off for this group"))
        else:
            lines.append(attachment_line(stored))
    return lines


def compose(text: str, said: str | None, lines: Sequence[str]) -> tuple[str, str | None]:
    """(the turn's text, what was said) with the files' lines after the words, cut to
    the turn's size (a transcript too long for it is cut, and says so)."""
    block = "\n\n".join(lines)
    room = MESSAGE_MAX_CHARS - len(text) - 2
    if len(block) > room:
        notice = "\n[cut: the rest is too long for one message]"
        block = block[: max(room - len(notice), 0)] + notice
    return (
        f"{text}\n\n{block}".strip() if block else text,
        (f"{said}\n\n{block}".strip() if block else said) if said is not None else None,
    )
