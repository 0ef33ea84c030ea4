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
    """(the turn's text, what was said) with the files' lines after the words, each at
    most the turn's size (lines too long for it are cut, and say so; words that leave no
    room for that notice are cut to make it)."""
    block = "\n\n".join(lines)
    return _with_lines(text, block), None if said is None else _with_lines(said, block)


def _with_lines(words: str, block: str) -> str:
    if not block:
        return words
    room = MESSAGE_MAX_CHARS - len(words) - 2
    if len(block) > room:
        notice = "\n[cut: the rest is too long for one message]"
        if room < len(notice):
            words = words[: MESSAGE_MAX_CHARS - 2 - len(notice)]
            room = len(notice)
        block = block[: room - len(notice)] + notice
    return f"{words}\n\n{block}".strip()
