"""The media of chats, exactly: an image's pixel cap at its edge, its re-encoding and the
cache's bounds; a PDF's header window, the child's limits and every refusal's words; the
kinds and lines of inbox files; the outbox's names, modes and refusals; and the turn's
text cut at its size."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.limits import MESSAGE_MAX_CHARS
from orchestrator.media import images, pdf
from orchestrator.media.images import ImageCache, ImageRefused, reencode
from orchestrator.media.inbox import (
    AUDIO,
    DOCUMENT,
    IMAGE,
    OTHER,
    VOICE,
    StoredFile,
    attachment_line,
    clock,
    document_line,
    is_pdf,
    kind_of,
    shown_name,
    voice_line,
)
from orchestrator.media.outbox import (
    NotSendable,
    ReplyFile,
    copy_to_outbox,
    file_line,
    files_path,
    outbox_dir,
    prune_outbox,
)
from orchestrator.media.pdf import NotAPdf, PdfText, extract_text, looks_like_pdf
from orchestrator.media.prepare import compose, is_audio, needs_work, quick_lines

NAME = "20261130-101500-3fa2c1d9"


def _png(mode: str, size: tuple[int, int], color: Any, **save: Any) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, size, color).save(out, "PNG", **save)
    return out.getvalue()


def _pixel(encoded: images.EncodedImage) -> tuple[int, ...]:
    from PIL import Image

    shown = Image.open(io.BytesIO(encoded.data))
    assert shown.format == "JPEG" and shown.mode == "RGB"
    return shown.getpixel((0, 0))


def _near(found: tuple[int, ...], wanted: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 3 for a, b in zip(found, wanted, strict=True))


# images


def test_an_image_of_exactly_the_pixel_cap_is_shown_and_one_more_pixel_is_refused() -> None:
    data = _png("RGB", (10, 10), (0, 128, 0))
    assert reencode(data, max_pixels=100).source_width == 10
    with pytest.raises(ImageRefused) as refused:
        reencode(data, max_pixels=99)
    assert str(refused.value) == (
        "it declares 10 x 10 pixels, more than the 99 an image may have "
        "(a decompression bomb is refused too)"
    )


def test_an_image_one_pixel_wide_or_high_is_shown() -> None:
    for size in ((1, 10), (10, 1), (1, 1)):
        encoded = reencode(_png("RGB", size, (0, 0, 200)))
        assert (encoded.width, encoded.height) == size


@pytest.mark.parametrize("size", [(0, 10), (10, 0), (0, 0)])
def test_an_image_declaring_no_pixels_is_refused(
    size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import Image

    class Declared:  # what Image.open gives for a header naming an empty side
        def __init__(self) -> None:
            self.size = size

    monkeypatch.setattr(Image, "open", lambda _data: Declared())
    with pytest.raises(ImageRefused) as refused:
        reencode(b"a header")
    assert str(refused.value) == (
        f"it declares {size[0]} x {size[1]} pixels, more than the 50,000,000 an image may "
        "have (a decompression bomb is refused too)"
    )


def test_the_default_cap_is_fifty_megapixels_named_with_thousands_separators() -> None:
    from tests.mediafiles import png_declaring

    with pytest.raises(ImageRefused) as refused:
        reencode(png_declaring(10_000, 5_001))
    assert str(refused.value) == (
        "it declares 10,000 x 5,001 pixels, more than the 50,000,000 an image may have "
        "(a decompression bomb is refused too)"
    )
    # exactly 50,000,000 declared: past our cap check, it fails only at decoding
    with pytest.raises(ImageRefused, match=r"^it could not be decoded: "):
        reencode(png_declaring(10_000, 5_000))


def test_pillows_own_bomb_warning_refuses_past_a_higher_cap() -> None:
    from tests.mediafiles import png_declaring

    with pytest.raises(ImageRefused) as refused:
        reencode(png_declaring(10_000, 10_000), max_pixels=10**9)
    assert str(refused.value) == (
        "a decompression bomb: Image size (100000000 pixels) exceeds limit of 89478485 "
        "pixels, could be decompression bomb DOS attack."
    )


def test_refusals_say_why_in_their_own_words() -> None:
    from tests.mediafiles import png_declaring

    with pytest.raises(ImageRefused) as refused:
        reencode(b"GIF89a but nothing after")
    assert str(refused.value) == "it is not an image this host can read"
    with pytest.raises(ImageRefused) as refused:
        reencode(b"plain text, no picture at all")
    assert str(refused.value) == "it is not an image this host can read"
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
    with pytest.raises(ImageRefused) as refused:
        reencode(png_declaring(100_000, 100_000))
    assert str(refused.value).startswith("a decompression bomb: Image size (10000000000 pixels)")
    assert refused.value.__suppress_context__
    truncated = _png("RGB", (64, 64), (1, 2, 3))[:-40]
    with pytest.raises(ImageRefused) as refused:
        reencode(truncated)
    assert str(refused.value).startswith("it could not be decoded: ")
    assert refused.value.__suppress_context__


def test_a_large_jpeg_is_bounded_to_the_longest_side() -> None:
    from tests.mediafiles import jpeg_with_exif

    encoded = reencode(jpeg_with_exif(4000, 3000))
    assert (encoded.width, encoded.height) == (1568, 1176)
    assert (encoded.source_width, encoded.source_height) == (4000, 3000)
    small = reencode(jpeg_with_exif(4000, 3000), max_side=100)
    assert (small.width, small.height) == (100, 75)
    tall = reencode(jpeg_with_exif(300, 1000), max_side=500)
    assert (tall.width, tall.height) == (150, 500)


@pytest.fixture
def drafts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The drafts asked of JPEGs (each still made)."""
    from PIL import JpegImagePlugin

    asked: list[tuple[Any, ...]] = []
    draft = JpegImagePlugin.JpegImageFile.draft

    def spy(self: Any, mode: Any, size: Any) -> Any:
        asked.append((mode, size))
        return draft(self, mode, size)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    return asked


def test_a_large_jpeg_is_decoded_at_a_scale_still_as_large_as_shown(
    drafts: list[tuple[Any, ...]],
) -> None:
    from tests.mediafiles import jpeg_with_exif

    reencode(jpeg_with_exif(4000, 3000))
    assert drafts[0] == ("RGB", (1568, 1176))
    drafts.clear()
    reencode(jpeg_with_exif(1000, 3001), max_side=1000)
    assert drafts[0] == ("RGB", (334, 1000))  # 333.2 up: never smaller than shown


def test_a_jpeg_no_larger_than_shown_is_decoded_whole(drafts: list[tuple[Any, ...]]) -> None:
    from tests.mediafiles import jpeg_with_exif

    reencode(jpeg_with_exif(1568, 1000))
    reencode(jpeg_with_exif(900, 1000))
    assert ("RGB", (1568, 1000)) not in drafts and all(d[0] != "RGB" for d in drafts)


def test_a_large_image_is_made_smaller_with_lanczos_after_a_reduction_by_3() -> None:
    from PIL import Image

    source = Image.new("RGB", (1600, 1200))
    for x in range(0, 1600, 7):  # fine stripes: each way of shrinking shows
        source.paste((250, 250, 250), (x, 0, x + 3, 1200))
    out = io.BytesIO()
    source.save(out, "PNG")
    encoded = reencode(out.getvalue(), max_side=100)
    expected = source.copy()
    expected.thumbnail((100, 100), Image.Resampling.LANCZOS, reducing_gap=3.0)
    wanted = io.BytesIO()
    expected.save(wanted, "JPEG", quality=85)
    assert (encoded.width, encoded.height) == (100, 75)
    assert encoded.data == wanted.getvalue()


def test_an_image_of_exactly_the_longest_side_keeps_its_size() -> None:
    from tests.mediafiles import jpeg_with_exif

    encoded = reencode(jpeg_with_exif(1568, 1000))
    assert (encoded.width, encoded.height) == (1568, 1000)
    over = reencode(jpeg_with_exif(1569, 1000))
    assert (over.width, over.height) == (1568, 999)


def test_the_jpeg_is_the_pixels_alone_at_quality_85() -> None:
    from PIL import Image

    data = _png("RGB", (48, 32), (10, 200, 30))
    encoded = reencode(data)
    out = io.BytesIO()
    Image.new("RGB", (48, 32), (10, 200, 30)).save(out, "JPEG", quality=85, optimize=False)
    assert encoded.data == out.getvalue()
    assert encoded.media_type == "image/jpeg"
    other = reencode(data, quality=40)
    out = io.BytesIO()
    Image.new("RGB", (48, 32), (10, 200, 30)).save(out, "JPEG", quality=40)
    assert other.data == out.getvalue()


def test_transparent_pixels_become_white_and_others_keep_their_colour() -> None:
    clear = reencode(_png("RGBA", (8, 8), (0, 0, 0, 0)))
    assert _near(_pixel(clear), (255, 255, 255))
    solid = reencode(_png("RGBA", (8, 8), (200, 0, 0, 255)))
    assert _near(_pixel(solid), (200, 0, 0))
    grey_clear = reencode(_png("LA", (8, 8), (0, 0)))
    assert _near(_pixel(grey_clear), (255, 255, 255))
    grey = reencode(_png("L", (8, 8), 90))
    assert _near(_pixel(grey), (90, 90, 90))
    grey_keyed = reencode(_png("L", (8, 8), 90, transparency=90))
    assert _near(_pixel(grey_keyed), (255, 255, 255))
    # a palette image whose colour 0 is marked transparent
    palette = reencode(_png("P", (8, 8), 0, transparency=0))
    assert _near(_pixel(palette), (255, 255, 255))


def test_a_palette_image_with_alpha_is_put_on_white(monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    source = Image.new("PA", (8, 8), (0, 0))
    source.putpalette([200, 0, 0] * 256)
    monkeypatch.setattr(Image, "open", lambda _data: source)
    encoded = reencode(b"a PA image")
    monkeypatch.undo()
    assert _near(_pixel(encoded), (255, 255, 255))


def test_an_animation_shows_its_first_frame() -> None:
    from PIL import Image

    frames = [Image.new("RGB", (8, 8), c) for c in ((250, 0, 0), (0, 0, 250))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100)
    encoded = reencode(out.getvalue())
    assert _near(_pixel(encoded), (250, 0, 0)) or _pixel(encoded)[0] > 200


def test_the_cache_keeps_its_last_items_and_forgets_the_oldest_used() -> None:
    assert ImageCache().items == 64
    cache = ImageCache(items=2)
    a, b, c = (_png("RGB", (4, 4), (n, 0, 0)) for n in (10, 20, 30))
    first = cache.encoded(a)
    second = cache.encoded(b)
    assert cache.encoded(a) is first  # used again: now the newest
    cache.encoded(c)  # b, the oldest used, goes
    assert cache.encoded(a) is first
    assert cache.encoded(b) is not second
    assert cache.encoded(b).data == second.data


def test_the_cache_holds_exactly_its_items() -> None:
    cache = ImageCache(items=1)
    a, b = (_png("RGB", (4, 4), (n, 0, 0)) for n in (10, 20))
    first = cache.encoded(a)
    assert cache.encoded(a) is first
    cache.encoded(b)
    assert cache.encoded(a) is not first


def test_the_cache_raises_the_same_refusal_again() -> None:
    cache = ImageCache(items=4)
    with pytest.raises(ImageRefused) as first:
        cache.encoded(b"not an image")
    with pytest.raises(ImageRefused) as again:
        cache.encoded(b"not an image")
    assert again.value is first.value
    assert str(again.value) == "it is not an image this host can read"


# PDFs


def test_the_pdf_header_may_start_anywhere_in_the_first_1024_bytes() -> None:
    assert looks_like_pdf(b" " * 1019 + b"%PDF-1.7")
    assert not looks_like_pdf(b" " * 1020 + b"%PDF-1.7")
    assert not looks_like_pdf(b"")


def test_what_is_not_a_pdf_is_named_for_what_it_looks_like() -> None:
    with pytest.raises(NotAPdf) as refused:
        extract_text(b"PK\x03\x04")
    assert str(refused.value) == "not a PDF (it does not start as one; it looks like a zip archive)"
    with pytest.raises(NotAPdf) as refused:
        extract_text(b"P, K and more")
    assert str(refused.value) == (
        "not a PDF (it does not start as one; it looks like something else)"
    )


class FakeRun:
    """subprocess.run for extract_text: records the call, answers as told."""

    def __init__(self, **answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def __call__(self, args: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        self.calls.append((args, kw))
        if "error" in self.answer:
            raise self.answer["error"]
        return subprocess.CompletedProcess(
            args, self.answer.get("returncode", 0), self.answer.get("stdout", b""),
            self.answer.get("stderr", b""),
        )  # fmt: skip


DATA = b"%PDF-1.4 a document"


def test_the_child_is_an_isolated_interpreter_given_the_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = FakeRun(stdout=b'{"text": "hello", "pages": 3, "read": 2, "cut": false}')
    monkeypatch.setattr(subprocess, "run", run)
    assert extract_text(DATA) == PdfText("hello", 3, 2, False)
    [(args, kw)] = run.calls
    assert args == [sys.executable, "-I", "-m", "orchestrator.media.pdf",
                    "[200, 400000, 30, 1073741824]"]  # fmt: skip
    assert kw == {"input": DATA, "capture_output": True, "timeout": 70, "check": False}
    extract_text(DATA, max_pages=5, max_chars=9, cpu_seconds=2, memory_bytes=7)
    assert run.calls[1][0][-1] == "[5, 9, 2, 7]" and run.calls[1][1]["timeout"] == 14


def test_a_parse_past_its_time_is_named_with_the_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", FakeRun(error=subprocess.TimeoutExpired("x", 1)))
    with pytest.raises(NotAPdf) as refused:
        extract_text(DATA, cpu_seconds=3)
    assert str(refused.value) == "its parse took longer than 16 s; stopped"
    assert refused.value.__suppress_context__


def test_a_failed_child_is_named_by_its_last_line_cut_to_300(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(subprocess, "run", FakeRun(returncode=1, stderr=b"first\nlast \xff\n"))
    with pytest.raises(NotAPdf) as refused:
        extract_text(DATA)
    assert str(refused.value) == "it could not be read as a PDF: last \ufffd"
    monkeypatch.setattr(subprocess, "run", FakeRun(returncode=1, stderr=b"x" * 400))
    with pytest.raises(NotAPdf) as refused:
        extract_text(DATA)
    assert str(refused.value) == "it could not be read as a PDF: " + "x" * 300
    monkeypatch.setattr(subprocess, "run", FakeRun(returncode=1, stderr=b" \n"))
    with pytest.raises(NotAPdf) as refused:
        extract_text(DATA)
    assert str(refused.value) == "it could not be read as a PDF: killed"


def test_a_child_killed_or_out_of_memory_passed_the_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(subprocess, "run", FakeRun(returncode=-9))
    with pytest.raises(NotAPdf) as refused:
        extract_text(DATA)
    assert str(refused.value) == (
        "it could not be read as a PDF: its parse passed the limits "
        "(30 s of CPU, 1,073,741,824 bytes)"
    )
    monkeypatch.setattr(subprocess, "run", FakeRun(returncode=1, stderr=b"Tb\nMemoryError\n"))
    with pytest.raises(NotAPdf) as refused:
        extract_text(DATA, cpu_seconds=5, memory_bytes=2048)
    assert str(refused.value) == (
        "it could not be read as a PDF: its parse passed the limits (5 s of CPU, 2,048 bytes)"
    )


def test_a_child_that_answers_nothing_usable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", FakeRun(stdout=b""))
    with pytest.raises(NotAPdf) as refused:
        extract_text(DATA)
    assert str(refused.value).startswith("its parse gave no answer (Expecting value")
    assert refused.value.__suppress_context__
    monkeypatch.setattr(subprocess, "run", FakeRun(stdout=b'{"text": "t", "pages": 1}'))
    with pytest.raises(NotAPdf) as refused:
        extract_text(DATA)
    assert str(refused.value) == "its parse gave no answer ('read')"
    monkeypatch.setattr(subprocess, "run", FakeRun(stdout=b"[]"))
    with pytest.raises(NotAPdf, match=r"^its parse gave no answer \(list indices"):
        extract_text(DATA)


class Child:
    """_child run in this process: its limits recorded, not set; stdin and stdout
    replaced."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import resource

        self.limits: list[tuple[int, tuple[int, int]]] = []
        monkeypatch.setattr(resource, "setrlimit", lambda k, v: self.limits.append((k, v)))
        self.monkeypatch = monkeypatch

    def run(self, data: bytes, limits: list[int]) -> dict[str, Any]:
        out = io.StringIO()
        self.monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        self.monkeypatch.setattr(sys, "stdout", out)
        try:
            assert pdf._child([json.dumps(limits)]) == 0
        finally:
            logging.disable(logging.NOTSET)
        return json.loads(out.getvalue())


def test_the_child_limits_itself_before_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    from tests.mediafiles import pdf_with_text

    child = Child(monkeypatch)
    found = child.run(pdf_with_text(["one", "two"]), [200, 1000, 7, 123456789])
    assert child.limits == [
        (resource.RLIMIT_CPU, (7, 7)),
        (resource.RLIMIT_AS, (123456789, 123456789)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    assert found == {"text": "one\n\ntwo", "pages": 2, "read": 2, "cut": False}


def test_the_child_reads_to_the_page_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.mediafiles import pdf_with_text

    data = pdf_with_text(["a", "b", "c", "d"])
    found = Child(monkeypatch).run(data, [3, 1000, 30, 10**9])
    assert found == {"text": "a\n\nb\n\nc", "pages": 4, "read": 3, "cut": False}


def test_the_child_stops_reading_once_past_the_characters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.mediafiles import pdf_with_text

    data = pdf_with_text(["aaaa", "bbbb", "cccc"])
    # each page counts its text and the two characters that join it: 6, 12, 18; the
    # reading stops once past max_chars, and the text joined is cut to max_chars
    found = Child(monkeypatch).run(data, [200, 12, 30, 10**9])
    assert found == {"text": "aaaa\n\nbbbb\n\n", "pages": 3, "read": 3, "cut": True}
    found = Child(monkeypatch).run(data, [200, 11, 30, 10**9])
    assert found == {"text": "aaaa\n\nbbbb", "pages": 3, "read": 2, "cut": False}
    found = Child(monkeypatch).run(data, [200, 16, 30, 10**9])
    assert found == {"text": "aaaa\n\nbbbb\n\ncccc", "pages": 3, "read": 3, "cut": False}
    found = Child(monkeypatch).run(data, [200, 15, 30, 10**9])
    assert found == {"text": "aaaa\n\nbbbb\n\nccc", "pages": 3, "read": 3, "cut": True}


def test_the_child_reads_a_blank_page_as_no_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.mediafiles import pdf_with_text

    found = Child(monkeypatch).run(pdf_with_text(["x", "", "y"]), [200, 1000, 30, 10**9])
    assert found == {"text": "x\n\n\n\ny", "pages": 3, "read": 3, "cut": False}


def test_the_child_tolerates_a_broken_cross_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    from tests.mediafiles import pdf_with_text

    data = pdf_with_text(["kept"])
    pointer = re.search(rb"startxref\s+(\d+)", data)
    assert pointer is not None
    wrong = str(int(pointer[1]) + 7).encode()  # as a careless writer leaves it
    broken = data[: pointer.start(1)] + wrong + data[pointer.end(1) :]
    found = Child(monkeypatch).run(broken, [200, 1000, 30, 10**9])
    assert found == {"text": "kept", "pages": 1, "read": 1, "cut": False}


def test_the_child_turns_logging_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.mediafiles import pdf_with_text

    seen: list[int] = []
    monkeypatch.setattr(logging, "disable", seen.append)
    Child(monkeypatch).run(pdf_with_text(["x"]), [1, 10, 1, 10**9])
    assert seen[0] == logging.CRITICAL


def test_a_pdf_with_a_user_password_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from pypdf import PdfReader, PdfWriter

    from tests.mediafiles import pdf_with_text

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_with_text(["secret"]))))
    writer.encrypt(user_password="letmein", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(SystemExit) as stopped:
        Child(monkeypatch).run(out.getvalue(), [200, 1000, 30, 10**9])
    assert stopped.value.code == "the PDF is encrypted with a password"


def test_a_pdf_that_cannot_be_decrypted_here_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pypdf import PdfReader, PdfWriter

    from tests.mediafiles import pdf_with_text

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_with_text(["locked"]))))
    writer.encrypt(user_password="", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)

    def cannot(self: PdfReader, password: str) -> None:
        raise NotImplementedError("an algorithm this host does not have")

    monkeypatch.setattr(PdfReader, "decrypt", cannot)
    with pytest.raises(SystemExit) as stopped:
        Child(monkeypatch).run(out.getvalue(), [200, 1000, 30, 10**9])
    assert stopped.value.code == "the PDF is encrypted with a password"


def test_a_pdf_with_only_an_owner_password_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from pypdf import PdfReader, PdfWriter

    from tests.mediafiles import pdf_with_text

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_with_text(["open text"]))))
    writer.encrypt(user_password="", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    found = Child(monkeypatch).run(out.getvalue(), [200, 1000, 30, 10**9])
    assert found == {"text": "open text", "pages": 1, "read": 1, "cut": False}


# inbox files


@pytest.mark.parametrize(
    ("mime", "name", "kind"),
    [
        ("Audio/OGG; codecs=opus", None, AUDIO),
        (None, "note.OGG", AUDIO),
        ("", "clip.m4a", AUDIO),
        ("application/octet-stream", "clip.ogg", OTHER),
        (" image/PNG ;x=1", "a.txt", IMAGE),
        (None, "photo.HEIC", IMAGE),
        ("application/octet-stream", "photo.jpg", OTHER),
        ("application/pdf", None, DOCUMENT),
        ("TEXT/PLAIN", None, DOCUMENT),
        ("text/plain; charset=utf-8", None, DOCUMENT),
        ("application/pdf ; name=x.bin", "x.bin", DOCUMENT),
        ("application/octet-stream", "report.PDF", DOCUMENT),
        ("application/octet-stream", "notes.txt", DOCUMENT),
        (None, "archive.tar.gz", OTHER),
        ("application/octet-stream", "v1.2.pdf", DOCUMENT),
        (None, "v1.ogg.png", IMAGE),
        (None, "ogg", OTHER),
        (None, None, OTHER),
        ("text/html", "page.html", OTHER),
    ],
)
def test_a_kind_comes_from_the_type_else_the_extension(
    mime: str | None, name: str | None, kind: str
) -> None:
    assert kind_of(mime, name) == kind


def _stored(kind: str = VOICE, ext: str = "ogg", **kw: Any) -> StoredFile:
    return StoredFile(
        name=f"{NAME}.{ext}", mime=kw.pop("mime", "audio/ogg"), size=kw.pop("size", 4096),
        kind=kind, **kw,
    )  # fmt: skip


def test_a_pdf_is_one_by_its_type_or_its_name() -> None:
    assert is_pdf(_stored(DOCUMENT, "pdf", mime=None))
    assert is_pdf(_stored(DOCUMENT, "bin", mime="application/pdf"))
    assert not is_pdf(_stored(DOCUMENT, "txt", mime="text/plain"))


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "0:00"), (-5, "0:00"), (0, "0:00"), (12, "0:12"), (59.4, "0:59"), (59.6, "1:00"),
     (185, "3:05"), (3599, "59:59"), (3600, "1:00:00"), (3723, "1:02:03"),
     (36_000, "10:00:00")],
)  # fmt: skip
def test_a_duration_as_people_read_it(seconds: float | None, shown: str) -> None:
    assert clock(seconds) == shown


def test_a_senders_name_is_quoted_without_control_characters_and_cut() -> None:
    assert shown_name('Ré\x00su\nmé "1".pdf') == '"Résumé \\"1\\".pdf"'
    assert shown_name(None) == '""'
    assert shown_name("é" * 250) == '"' + "é" * 200 + '"'


def test_a_stored_file_is_only_a_name_inbox_name_makes() -> None:
    assert _stored(ext="a1b2c3d4").path == f"files/inbox/{NAME}.a1b2c3d4"
    for bad in (f"{NAME}.a1b2c3d4e", f"{NAME}.OGG", f"{NAME}.", f"x{NAME}.ogg", f"{NAME}.ogg/"):
        with pytest.raises(ValueError) as refused:
            StoredFile(name=bad, mime=None, size=1, kind=OTHER)
        assert str(refused.value) == f"{bad!r} is not a name chatapp.files.inbox_name makes"
    with pytest.raises(ValueError) as refused:
        _stored("sticker")
    assert str(refused.value) == (
        "kind 'sticker' is not one of voice, audio, image, document, other"
    )


def test_a_stored_file_describes_itself() -> None:
    assert _stored(IMAGE, "jpg", mime="image/jpeg", size=1536).describe() == (
        "image, image/jpeg, 1.5 KiB"
    )
    labelled = _stored(IMAGE, "jpg", mime=None, size=10, label="photo", original="Me.JPG")
    assert labelled.describe() == 'photo "Me.JPG", unknown type, 10 B'
    assert attachment_line(labelled) == (
        f'[attachment: files/inbox/{NAME}.jpg (photo "Me.JPG", unknown type, 10 B)]'
    )


def test_a_stored_file_round_trips_without_its_empty_fields() -> None:
    bare = _stored(OTHER, "bin", mime=None, size=3)
    assert bare.to_dict() == {"name": f"{NAME}.bin", "size": 3, "kind": OTHER}
    full = _stored(VOICE, duration=2.5, original="a.ogg", label="voice note")
    assert full.to_dict() == {
        "name": f"{NAME}.ogg", "mime": "audio/ogg", "size": 4096, "kind": VOICE,
        "duration": 2.5, "original": "a.ogg", "label": "voice note",
    }  # fmt: skip
    assert StoredFile.from_dict(full.to_dict()) == full
    assert StoredFile.from_dict(bare.to_dict()) == bare
    loose = StoredFile.from_dict({"name": f"{NAME}.bin", "size": "7", "kind": OTHER})
    assert loose.size == 7 and loose.mime is None


def test_the_lines_of_a_voice_note_and_an_audio_file() -> None:
    where = f"[audio: files/inbox/{NAME}.ogg (voice, audio/ogg, 4.0 KiB)]"
    voice = _stored(VOICE, duration=65)
    assert voice_line(voice, "  hello there \n") == (
        f"[voice note, 1:05, transcribed] hello there\n{where}"
    )
    assert voice_line(voice, " \n") == f"[voice note, 1:05, transcribed: no speech heard]\n{where}"
    assert (
        voice_line(voice, None) == f"[voice note, 1:05: not transcribed (no transcriber)]\n{where}"
    )
    assert voice_line(voice, None, "it was too long") == (
        f"[voice note, 1:05: not transcribed (it was too long)]\n{where}"
    )
    audio = _stored(AUDIO, duration=0)
    assert voice_line(audio, "x") == (
        f"[audio, transcribed] x\n[audio: files/inbox/{NAME}.ogg (audio, audio/ogg, 4.0 KiB)]"
    )


def test_the_lines_of_a_document() -> None:
    doc = _stored(DOCUMENT, "pdf", mime="application/pdf", size=2048)
    assert document_line(doc, f"{NAME}.txt", "3 pages") == (
        f"[document: files/inbox/{NAME}.pdf (document, application/pdf, 2.0 KiB); its text: "
        f"files/inbox/{NAME}.txt (3 pages)]"
    )
    assert document_line(doc, None, "not a PDF") == (
        f"[document: files/inbox/{NAME}.pdf (document, application/pdf, 2.0 KiB): not a PDF]"
    )


# the turn's text


def test_what_waits_for_work() -> None:
    voice, audio = _stored(VOICE), _stored(AUDIO)
    photo = _stored(IMAGE, "jpg", mime="image/jpeg")
    named_pdf = _stored(DOCUMENT, "pdf", mime=None)
    assert is_audio(voice) and is_audio(audio) and not is_audio(photo)
    assert needs_work([photo, audio], "cloud") and not needs_work([photo, audio], "off")
    assert needs_work([photo, named_pdf], "off")
    assert not needs_work([photo], "cloud") and not needs_work([], "cloud")


def test_files_that_need_no_work_are_named() -> None:
    photo = _stored(IMAGE, "jpg", mime="image/jpeg", size=10)
    assert quick_lines([_stored(AUDIO), photo]) == [
        f"[audio: not transcribed (transcription is off for this group)]\n"
        f"[audio: files/inbox/{NAME}.ogg (audio, audio/ogg, 4.0 KiB)]",
        f"[attachment: files/inbox/{NAME}.jpg (image, image/jpeg, 10 B)]",
    ]
    assert quick_lines([]) == []


def test_the_lines_follow_the_words_and_what_was_said() -> None:
    assert compose("look", None, ["[a]", "[b]"]) == ("look\n\n[a]\n\n[b]", None)
    assert compose("look", "said", ["[a]"]) == ("look\n\n[a]", "said\n\n[a]")
    assert compose("", "", ["[a]"]) == ("[a]", "[a]")
    assert compose(" hi ", " so ", []) == (" hi ", " so ")
    assert compose("hi", None, []) == ("hi", None)


def test_the_lines_fill_the_turn_to_its_exact_size() -> None:
    text = "t" * 1000
    room = MESSAGE_MAX_CHARS - 1000 - 2
    full = compose(text, None, ["x" * room])[0]
    assert full == text + "\n\n" + "x" * room and len(full) == MESSAGE_MAX_CHARS
    notice = "\n[cut: the rest is too long for one message]"
    cut = compose(text, "said", ["x" * (room + 1)])
    assert cut[0] == text + "\n\n" + "x" * (room - len(notice)) + notice
    assert len(cut[0]) == MESSAGE_MAX_CHARS
    assert cut[1] == "said\n\n" + "x" * (room + 1)  # shorter words: room for it all


def test_words_that_fill_the_turn_leave_only_the_notice() -> None:
    notice = "\n[cut: the rest is too long for one message]"
    # words that leave exactly the notice's room keep it all
    text = "t" * (MESSAGE_MAX_CHARS - 2 - len(notice))
    assert compose(text, None, ["[file]" * 10])[0] == text + "\n\n" + notice
    assert compose(text, None, ["f" * 44])[0] == text + "\n\n" + "f" * 44
    # one more character of words, and the words are cut by one to make that room
    composed = compose(text + "u", None, ["f" * 44])[0]
    assert composed == text + "\n\n" + notice and len(composed) == MESSAGE_MAX_CHARS
    # what was said is measured on its own
    text, said = compose("short", "s" * MESSAGE_MAX_CHARS, ["[file]"])
    assert text == "short\n\n[file]"
    assert said == "s" * (MESSAGE_MAX_CHARS - 2 - len(notice)) + "\n\n" + notice


# the outbox


def test_a_path_to_send_is_one_under_files() -> None:
    assert files_path(" files/report.pdf ") == "files/report.pdf"
    assert files_path("/workspace/agent/files/a/./b.txt") == "files/a/b.txt"
    assert files_path("files//x") == "files/x"
    for given, words in [
        ("files", "files: only files under files/ can be sent"),
        ("notes/a.txt", "notes/a.txt: only files under files/ can be sent"),
        ("/workspace/agent/", "/workspace/agent/: only files under files/ can be sent"),
        ("/etc/passwd", "/etc/passwd: not a relative path; name a file under files/"),
        ("files/../x", "files/../x: '..' is not allowed; name a file under files/"),
        ("/workspace/agentfiles/x", "/workspace/agentfiles/x: not a relative path; "
                                    "name a file under files/"),
    ]:  # fmt: skip
        with pytest.raises(NotSendable) as refused:
            files_path(given)
        assert str(refused.value) == words
        assert refused.value.__suppress_context__ or refused.value.__context__ is None
    for empty in ("", "  ", None, 3):
        with pytest.raises(NotSendable) as refused:
            files_path(empty)  # type: ignore[arg-type]
        assert str(refused.value) == "path must be a non-empty string"


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "groups/fam/files/sub").mkdir(parents=True)
    return tmp_path / "groups", tmp_path / "state"


def test_a_sent_file_is_copied_under_its_message_and_place(roots: tuple[Path, Path]) -> None:
    groups, state = roots
    (groups / "fam/files/sub/Report.PDF").write_bytes(b"%PDF-1.4 twelve")
    os.umask(0o022)
    sent = copy_to_outbox(groups, state, "fam", "files/sub/Report.PDF", message_id="m-1",
                          seq=2, limit=15)  # fmt: skip
    target = state / "outbox/fam/m-1.2.pdf"
    assert sent == ReplyFile(2, "Report.PDF", "application/pdf", 15, DOCUMENT, str(target))
    assert target.read_bytes() == b"%PDF-1.4 twelve"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "outbox/fam").stat().st_mode) == 0o700
    assert sorted(p.name for p in (state / "outbox/fam").iterdir()) == ["m-1.2.pdf"]
    assert outbox_dir(state, "fam") == state / "outbox/fam"
    assert sent.to_dict() == {"reply": -1, "seq": 2, "name": "Report.PDF",
                              "mime": "application/pdf", "size": 15, "kind": DOCUMENT}  # fmt: skip


def test_a_name_without_a_short_extension_gets_none(roots: tuple[Path, Path]) -> None:
    groups, state = roots
    for name in ("README", "data.abcdefghi", "x.tar-gz"):
        (groups / "fam/files" / name).write_bytes(b"abc")
        sent = copy_to_outbox(groups, state, "fam", f"files/{name}", message_id="m",
                              seq=0, limit=3)  # fmt: skip
        assert sent.path == str(state / "outbox/fam/m.0")
        assert (sent.mime, sent.kind) == ("application/octet-stream", OTHER)
    (groups / "fam/files/x.abcdefgh").write_bytes(b"abc")
    sent = copy_to_outbox(groups, state, "fam", "files/x.abcdefgh", message_id="m", seq=1,
                          limit=3)  # fmt: skip
    assert sent.path == str(state / "outbox/fam/m.1.abcdefgh")


def test_a_sent_files_kind_is_from_its_type(roots: tuple[Path, Path]) -> None:
    groups, state = roots
    (groups / "fam/files/song.mp2").write_bytes(b"abc")
    sent = copy_to_outbox(groups, state, "fam", "files/song.mp2", message_id="m", seq=0,
                          limit=3)  # fmt: skip
    assert (sent.mime, sent.kind) == ("audio/mpeg", AUDIO)  # mp2: known by its type only


def test_a_file_over_the_limit_or_missing_leaves_nothing(roots: tuple[Path, Path]) -> None:
    groups, state = roots
    (groups / "fam/files/big.bin").write_bytes(b"x" * 1025)
    with pytest.raises(NotSendable) as refused:
        copy_to_outbox(groups, state, "fam", "files/big.bin", message_id="m", seq=0, limit=1024)
    assert str(refused.value) == (
        "files/big.bin: is 1,025 bytes, over the 1,024-byte limit; not sent"
    )
    assert refused.value.__suppress_context__
    with pytest.raises(NotSendable) as refused:
        copy_to_outbox(groups, state, "fam", "files/gone.pdf", message_id="m", seq=0, limit=9)
    assert str(refused.value) == "files/gone.pdf: no such file"
    assert refused.value.__suppress_context__
    (groups / "fam/files/link.txt").symlink_to("/etc/hostname")
    with pytest.raises(NotSendable) as refused:
        copy_to_outbox(groups, state, "fam", "files/link.txt", message_id="m", seq=0, limit=9)
    assert str(refused.value) == "files/link.txt: is a symlink, not a regular file; not sent"
    # the part refused is named, inside the group's folder
    (groups / "fam/files/dir").symlink_to(groups / "fam/files/sub")
    (groups / "fam/files/sub/a.txt").write_bytes(b"a")
    with pytest.raises(NotSendable) as refused:
        copy_to_outbox(groups, state, "fam", "files/dir/a.txt", message_id="m", seq=0, limit=9)
    assert str(refused.value) == "files/dir: is a symlink, not a folder; not sent"
    assert list((state / "outbox/fam").iterdir()) == []


def test_a_refusal_outside_the_group_folder_names_only_the_path(
    roots: tuple[Path, Path],
) -> None:
    groups, state = roots
    (groups / "linked").symlink_to(groups / "fam")
    with pytest.raises(NotSendable) as refused:
        copy_to_outbox(groups, state, "linked", "files/a.txt", message_id="m", seq=0, limit=9)
    assert str(refused.value) == "files/a.txt: is a symlink, not a folder; not sent"
    with pytest.raises(NotSendable) as refused:
        copy_to_outbox(groups, state, "absent", "files/a.txt", message_id="m", seq=0, limit=9)
    assert str(refused.value) == "files/a.txt: no such file"


def test_the_line_of_a_file_sent_without_a_caption() -> None:
    file = ReplyFile(0, "plan.pdf", "application/pdf", 2048, DOCUMENT, "/x", reply=1)
    assert file_line(file) == "[file: plan.pdf (application/pdf, 2.0 KiB)]"
    assert file.to_dict()["reply"] == 1


def test_pruning_removes_only_outbox_files_that_are_there(tmp_path: Path) -> None:
    assert prune_outbox(tmp_path, [str(tmp_path / "outbox/fam/m.0")]) == 0
    folder = tmp_path / "outbox/fam"
    folder.mkdir(parents=True)
    for name in ("m.0", "m.1"):
        (folder / name).write_bytes(b"x")
    outside = tmp_path / "outbox/m.2"
    outside.write_bytes(b"x")
    deeper = folder / "deep"
    deeper.mkdir()
    (deeper / "m.3").write_bytes(b"x")
    removed = prune_outbox(
        tmp_path,
        [str(folder / "m.0"), str(folder / "gone"), str(outside), str(deeper / "m.3"),
         str(folder / "m.1")],
    )  # fmt: skip
    assert removed == 2
    assert sorted(p.name for p in folder.iterdir()) == ["deep"]
    assert outside.exists() and (deeper / "m.3").exists()
