"""Fuzzing the readers of images and PDFs people send (orchestrator/media/): an image a
chat user sends (or the agent names under files/) is decoded with Pillow and
re-encoded before a model sees it (images.reencode, through ImageCache); a PDF's text is
extracted by pypdf in a child process (pdf.extract_text).

reencode() gives a JPEG without metadata, no larger than its side limit, from a source
within the pixel cap, or raises ImageRefused saying why ("when it ... is not an image
Pillow knows, or declares more pixels than ..."); never another exception. The cache
gives the same answer for the same bytes. extract_text() gives the text within its
limits, or raises NotAPdf; never another exception.
"""

from __future__ import annotations

import io
import warnings
from functools import cache

from hypothesis import example, given
from hypothesis import strategies as st
from PIL import Image

from orchestrator.media.images import JPEG, EncodedImage, ImageCache, ImageRefused, reencode
from orchestrator.media.pdf import NotAPdf, PdfText, extract_text
from tests.fuzzing import fuzz, mutated

MAX_SIDE, MAX_PIXELS = 16, 64 * 64  # small, so that images are cut down and refused


def saved(image: Image.Image, kind: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, kind, **options)
    return out.getvalue()


@cache
def image_seeds() -> list[bytes]:
    rgb = Image.new("RGB", (24, 10), (200, 30, 30))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated: shown upright
    exif[0x010E] = "a description, and GPS beside it"
    palette = Image.new("P", (5, 7))
    palette.putpalette([0, 0, 0, 255, 255, 255] * 128)
    frames = [Image.new("P", (6, 6), n) for n in range(3)]
    return [
        saved(rgb, "PNG"),
        saved(Image.new("RGBA", (9, 9), (0, 0, 255, 128)), "PNG"),
        saved(palette, "PNG", transparency=0),
        saved(rgb, "JPEG", exif=exif.tobytes(), comment=b"a comment"),
        saved(Image.new("CMYK", (8, 8), (0, 50, 100, 0)), "JPEG"),
        saved(frames[0], "GIF", save_all=True, append_images=frames[1:], loop=0),
        saved(rgb, "WEBP"),
        saved(rgb, "BMP"),
        saved(Image.new("I;16", (7, 5), 4000), "PNG"),
        saved(Image.new("F", (4, 4), 0.5), "TIFF"),
        saved(Image.new("1", (9, 3), 1), "TIFF", compression="group4"),
        saved(Image.new("LA", (3, 3), (90, 40)), "PNG"),
        saved(rgb, "ICO"),
        saved(rgb, "PPM"),
        saved(Image.new("RGB", (80, 80)), "PNG"),  # over the pixel cap here
    ]


def check_image(data: bytes) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # as the daemon runs (not errors)
            encoded = reencode(data, max_pixels=MAX_PIXELS, max_side=MAX_SIDE)
    except ImageRefused as exc:
        assert str(exc)
        return
    assert isinstance(encoded, EncodedImage) and encoded.media_type == JPEG
    assert 0 < encoded.source_width * encoded.source_height <= MAX_PIXELS
    assert 0 < encoded.width <= MAX_SIDE and 0 < encoded.height <= MAX_SIDE
    shown = Image.open(io.BytesIO(encoded.data))
    assert shown.format == "JPEG" and shown.size == (encoded.width, encoded.height)
    assert not {"exif", "icc_profile", "comment", "xmp"} & set(shown.info), shown.info


@fuzz(300)
@given(data=st.one_of(st.builds(lambda: None).flatmap(lambda _: mutated(image_seeds(), 6)),
                      st.binary(max_size=64)))  # fmt: skip
@example(data=b"\x89PNG\r\n\x1a\n")
@example(data=b"GIF89a\xff\xff\xff\xff\x00\x00\x00;")
@example(data=b"P6\n99999 99999\n255\n")
@example(data=b"BM" + b"\x00" * 60)
def test_any_image_is_reencoded_or_refused(data: bytes) -> None:
    check_image(data)


def test_the_image_seeds_are_shown_cut_down_and_the_large_one_refused() -> None:
    *small, large = image_seeds()
    for data in small:
        encoded = reencode(data, max_pixels=MAX_PIXELS, max_side=MAX_SIDE)
        assert max(encoded.width, encoded.height) <= MAX_SIDE
    try:
        reencode(large, max_pixels=MAX_PIXELS, max_side=MAX_SIDE)
    except ImageRefused as exc:
        assert "more than the 4,096 an image may have" in str(exc)
    else:
        raise AssertionError("an image over the pixel cap was shown")


@fuzz(50)
@given(data=st.builds(lambda: None).flatmap(lambda _: mutated(image_seeds(), 3)))
def test_the_cache_answers_the_same_bytes_alike(data: bytes) -> None:
    images = ImageCache(items=2)
    answers = []
    for _ in range(2):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                answers.append(images.encoded(data).data)
        except ImageRefused as exc:
            answers.append(str(exc))
    assert answers[0] == answers[1]


def pdf(*pages: str) -> bytes:
    """A small PDF with a page of text per item (written by hand: pypdf reads it)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * n} 0 R" for n in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>")
    for n, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 20 100 Td ({text}) Tj ET"
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents {4 + 2 * n} 0 R "
            "/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica "
            ">> >> >> >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out


PDF_SEEDS = [
    pdf("The cat is called Tom."),
    pdf("Page one", "Page two \\(escaped\\)", "Three"),
    b"junk before the header\n" + pdf("late header"),
    b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 1 0 R >> endobj\ntrailer << /Root 1 0 R >>",
]


@fuzz(8)  # each parse is a child process
@given(data=mutated(PDF_SEEDS, max_edits=6))
@example(data=PDF_SEEDS[0])
@example(data=b"PK\x03\x04 a zip named report.pdf")
def test_any_pdf_is_read_within_its_limits_or_refused(data: bytes) -> None:
    try:
        found = extract_text(data, max_pages=2, max_chars=40, cpu_seconds=5)
    except NotAPdf as exc:
        assert str(exc)
        return
    assert isinstance(found, PdfText) and isinstance(found.text, str)
    assert len(found.text) <= 40 and 0 <= found.pages_read <= min(found.pages, 2)
    assert found.cut in (True, False)


def test_the_pdf_seeds_read_as_written() -> None:
    found = extract_text(PDF_SEEDS[1], max_pages=2)
    assert (found.pages, found.pages_read) == (3, 2)
    assert "Page one" in found.text and "Page two (escaped)" in found.text
    assert "Tom" in extract_text(PDF_SEEDS[0]).text
