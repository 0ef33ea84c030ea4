"""A PDF's text, extracted on the host with pypdf, in a child process of its own.

A PDF from a chat is hostile input: a parser can be made to loop, or to inflate a small
stream into gigabytes. So the file's first bytes are checked first (a PDF starts with
``%PDF-`` within its first 1,024 bytes: anything else, a zip bomb named ``report.pdf``
among them, is named as not a PDF and never parsed), and the parse runs in a fresh
interpreter that limits itself before it reads a byte: PDF_PARSE_SECONDS of CPU,
PARSER_MEMORY_BYTES of address space, and a wall-clock timeout from here. At most
PDF_MAX_PAGES pages are read and PDF_TEXT_MAX_CHARS characters kept; the result says how
many there were.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from orchestrator.limits import (
    PARSER_MEMORY_BYTES,
    PDF_MAX_PAGES,
    PDF_PARSE_SECONDS,
    PDF_TEXT_MAX_CHARS,
)

HEADER_WINDOW = 1024  # where a PDF's header may start (readers accept it anywhere here)


class NotAPdf(Exception):
    """The bytes are not a PDF (or not one that can be read); the text says which."""


@dataclass(frozen=True)
class PdfText:
    text: str
    pages: int  # in the file
    pages_read: int
    cut: bool  # the text was longer than PDF_TEXT_MAX_CHARS


def looks_like_pdf(data: bytes) -> bool:
    return b"%PDF-" in data[:HEADER_WINDOW]


def extract_text(
    data: bytes,
    *,
    max_pages: int = PDF_MAX_PAGES,
    max_chars: int = PDF_TEXT_MAX_CHARS,
    cpu_seconds: int = PDF_PARSE_SECONDS,
    memory_bytes: int = PARSER_MEMORY_BYTES,
) -> PdfText:
    """The text of the PDF ``data`` (its first ``max_pages`` pages, at most ``max_chars``
    characters). NotAPdf when it is not a PDF, cannot be parsed, or its parse passes
    the child's limits."""
    if not looks_like_pdf(data):
        kind = "a zip archive" if data[:2] == b"PK" else "something else"
        raise NotAPdf(f"not a PDF (it does not start as one; it looks like {kind})")
    limits = json.dumps([max_pages, max_chars, cpu_seconds, memory_bytes])
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-m", "orchestrator.media.pdf", limits],
            input=data,
            capture_output=True,
            timeout=cpu_seconds * 2 + 10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise NotAPdf(f"its parse took longer than {cpu_seconds * 2 + 10} s; stopped") from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["killed"]
        if done.returncode < 0 or "MemoryError" in why[0]:
            why = [f"its parse passed the limits ({cpu_seconds} s of CPU, {memory_bytes:,} bytes)"]
        raise NotAPdf(f"it could not be read as a PDF: {why[0][:300]}")
    try:
        found = json.loads(done.stdout)
        return PdfText(str(found["text"]), int(found["pages"]), int(found["read"]), found["cut"])
    except (ValueError, KeyError, TypeError) as exc:
        raise NotAPdf(f"its parse gave no answer ({exc})") from None


def _child(argv: list[str]) -> int:
    """In the child: limit itself, read the PDF from stdin, print the result as JSON."""
    import resource

    max_pages, max_chars, cpu_seconds, memory_bytes = json.loads(argv[0])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    import io
    import logging
    import warnings

    logging.disable(logging.CRITICAL)  # pypdf logs what it tolerates; the parent decides
    warnings.simplefilter("ignore")
    from pypdf import PdfReader

    data = sys.stdin.buffer.read()
    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        try:  # an owner password only: readable without one
            readable = bool(reader.decrypt(""))  # PasswordType.NOT_DECRYPTED is 0
        except Exception:
            readable = False
        if not readable:
            raise SystemExit("the PDF is encrypted with a password")
    total = len(reader.pages)
    parts: list[str] = []
    size = 0
    read = 0
    for page in reader.pages[:max_pages]:
        text = page.extract_text() or ""
        read += 1
        parts.append(text)
        size += len(text) + 2
        if size > max_chars:
            break
    text = "\n\n".join(parts)
    json.dump(
        {"text": text[:max_chars], "pages": total, "read": read, "cut": len(text) > max_chars},
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(sys.argv[1:]))
