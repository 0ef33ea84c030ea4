"""Files for the media tests, made in the test: PDFs with text (built with pypdf's own
objects), photos with EXIF, a PNG that declares a bomb's size, a zip bomb named .pdf,
and speech from a known sentence (Debian's espeak-ng, then ffmpeg to Ogg Opus, as
Telegram sends voice notes)."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path


def pdf_with_text(pages: list[str]) -> bytes:
    """A PDF whose pages each show one line of text (Helvetica)."""
    from pypdf import PdfWriter
    from pypdf.generic import (
        DecodedStreamObject,
        DictionaryObject,
        NameObject,
    )

    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    font_ref = writer._add_object(font)
    for text in pages:
        page = writer.add_blank_page(612, 792)
        stream = DecodedStreamObject()
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream.set_data(f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})}
        )
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def jpeg_with_exif(width: int = 2400, height: int = 1600) -> bytes:
    """A photo whose EXIF names a camera, a GPS position and an orientation."""
    from PIL import Image

    image = Image.new("RGB", (width, height), (200, 40, 40))
    for x in range(0, width, 50):  # something to encode
        image.paste((20, 20, 200), (x, 0, x + 10, height))
    exif = Image.Exif()
    exif[0x010F] = "SecretCam"  # Make
    exif[0x0131] = "secret-software"  # Software
    exif[0x8825] = {1: "N", 2: (52.0, 31.0, 12.0)}  # GPSInfo
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif.tobytes(), quality=90)
    return out.getvalue()


def png_declaring(width: int, height: int) -> bytes:
    """A small PNG whose header declares ``width`` x ``height`` pixels (a decompression
    bomb's shape: its data would inflate to gigabytes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    body = zlib.compress(b"\x00" * 4096, 9)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )


def zip_bomb(inflated: int = 512 * 1024**2) -> bytes:
    """A zip archive of one member that inflates to ``inflated`` bytes of zeros."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive,
        archive.open("report.txt", "w", force_zip64=True) as member,
    ):
        block = b"\x00" * (1 << 20)
        for _ in range(inflated // len(block)):
            member.write(block)
    return out.getvalue()


def speech(sentence: str, folder: Path, *, opus: bool = True) -> Path:
    """``sentence`` spoken by espeak-ng, as Ogg Opus (a voice note) or WAV."""
    assert shutil.which("espeak-ng") and shutil.which("ffmpeg")
    wav = folder / "speech.wav"
    subprocess.run(["espeak-ng", "-s", "120", "-w", str(wav), sentence], check=True)
    if not opus:
        return wav
    ogg = folder / "speech.ogg"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y", "-i", str(wav), "-c:a", "libopus", "-b:a", "24k",
         str(ogg)],
        check=True,
    )  # fmt: skip
    return ogg


def stretched_ogg(ogg: bytes, seconds: float) -> bytes:
    """``ogg`` (Opus) with its last page's granule position set to ``seconds``: a short
    file whose container claims a long one (how a ten-hour voice note looks to a reader
    of its headers, without ten hours to make)."""
    data = bytearray(ogg)
    last = data.rfind(b"OggS")
    granule = int(seconds * 48_000) + 312  # Opus counts at 48 kHz, after its pre-skip
    data[last + 6 : last + 14] = struct.pack("<q", granule)
    data[last + 22 : last + 26] = b"\x00\x00\x00\x00"
    checksum = _ogg_crc(bytes(data[last:]))
    data[last + 22 : last + 26] = struct.pack("<I", checksum)
    return bytes(data)


def _ogg_crc(page: bytes) -> int:
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else (crc << 1)
            crc &= 0xFFFFFFFF
    return crc
