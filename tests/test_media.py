"""Media on the host: images re-encoded for vision models, PDF text, transcription (an
OpenAI-compatible endpoint against a fake that checks the multipart request, and a real
local Whisper model), the turn's lines, and the relay showing images by reference."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.transcription import TranscriberDef
from orchestrator.errors import InvalidConfig
from orchestrator.media.images import ImageCache, ImageRefused, reencode
from orchestrator.media.inbox import IMAGE, VOICE, StoredFile, voice_line
from orchestrator.media.pdf import NotAPdf, extract_text
from orchestrator.media.prepare import compose, needs_work, quick_lines
from orchestrator.media.transcribe import (
    AudioTooLong,
    LocalTranscriber,
    OpenAITranscriber,
    TranscriptionFailed,
    decode,
)
from tests.fakeproviders import Error, FakeProvider, Text
from tests.mediafiles import (
    jpeg_with_exif,
    pdf_with_text,
    png_declaring,
    speech,
    stretched_ogg,
    zip_bomb,
)

KEY = "sk-transcribe-test-abcdefghijkl"


# images


def test_an_image_is_reencoded_as_a_bounded_jpeg_without_its_metadata() -> None:
    from PIL import Image

    source = jpeg_with_exif(4000, 3000)
    assert b"SecretCam" in source
    encoded = reencode(source)
    assert encoded.media_type == "image/jpeg"
    assert max(encoded.width, encoded.height) == 1568 and (
        encoded.source_width,
        encoded.source_height,
    ) == (4000, 3000)
    assert b"SecretCam" not in encoded.data and b"secret-software" not in encoded.data
    shown = Image.open(io.BytesIO(encoded.data))
    assert shown.format == "JPEG" and not shown.getexif() and "exif" not in shown.info
    assert "icc_profile" not in shown.info


def test_a_png_with_transparency_becomes_an_opaque_jpeg() -> None:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGBA", (40, 30), (0, 0, 0, 0)).save(out, "PNG")
    encoded = reencode(out.getvalue())
    assert Image.open(io.BytesIO(encoded.data)).mode == "RGB" and encoded.width == 40


def test_a_png_whose_transparency_is_a_colour_key_is_shown_on_white() -> None:
    from PIL import Image

    # an RGB PNG with a transparent colour (tRNS), as optipng makes of a logo's RGBA
    logo = Image.new("RGB", (8, 8), (0, 0, 0))
    logo.paste((200, 0, 0), (0, 0, 4, 8))
    out = io.BytesIO()
    logo.save(out, "PNG", transparency=(0, 0, 0))
    shown = Image.open(io.BytesIO(reencode(out.getvalue()).data))
    assert all(v >= 250 for v in shown.getpixel((6, 6)))  # the transparent black: white
    assert shown.getpixel((1, 1))[0] >= 190  # the red kept


def test_a_huge_image_and_a_decompression_bomb_are_refused_clearly() -> None:
    with pytest.raises(ImageRefused, match="pixels"):
        reencode(png_declaring(10_000, 6_000))  # 60 MP: over the cap, not a bomb to Pillow
    with pytest.raises(ImageRefused, match="decompression bomb"):
        reencode(png_declaring(100_000, 100_000))
    with pytest.raises(ImageRefused, match="not an image"):
        reencode(b"PK\x03\x04 a zip, not a picture")


def test_the_cache_encodes_the_same_bytes_once_and_remembers_a_refusal() -> None:
    cache = ImageCache(items=2)
    photo = jpeg_with_exif(800, 600)
    first = cache.encoded(photo)
    assert cache.encoded(photo) is first
    bomb = png_declaring(100_000, 100_000)
    for _ in range(2):
        with pytest.raises(ImageRefused):
            cache.encoded(bomb)


# PDFs


def test_a_pdf_of_500_pages_is_read_to_the_page_cap() -> None:
    data = pdf_with_text([f"Page {n} of the annual report" for n in range(500)])
    found = extract_text(data)
    assert found.pages == 500 and found.pages_read == 200
    assert "Page 0 of the annual report" in found.text
    assert "Page 199 of" in found.text and "Page 200 of" not in found.text


def test_a_file_named_pdf_that_is_not_one_is_named_as_such() -> None:
    with pytest.raises(NotAPdf, match=r"not a PDF.*zip archive"):
        extract_text(zip_bomb(64 * 1024**2))
    with pytest.raises(NotAPdf, match="not a PDF"):
        extract_text(b"hello, this is text")
    with pytest.raises(NotAPdf, match="could not be read as a PDF"):
        extract_text(b"%PDF-1.4 then nothing a parser can use")


def test_a_pdf_parse_past_its_limits_is_stopped() -> None:
    data = pdf_with_text(["a page"] * 50)
    with pytest.raises(NotAPdf, match=r"passed the limits"):
        extract_text(data, memory_bytes=16 * 1024**2)  # too little to even start pypdf


def test_a_pdf_locked_with_a_password_is_named_as_such() -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_with_text(["the secret plan"]))))
    writer.encrypt(user_password="letmein", owner_password="owner", algorithm="RC4-128")
    locked = io.BytesIO()
    writer.write(locked)
    with pytest.raises(NotAPdf) as refused:
        extract_text(locked.getvalue())
    assert str(refused.value) == (
        "it could not be read as a PDF: the PDF is encrypted with a password"
    )


# lines


def _stored(kind: str, name: str = "20261130-101500-3fa2c1d9.ogg", **kw: Any) -> StoredFile:
    return StoredFile(name=name, mime=kw.pop("mime", "audio/ogg"), size=4096, kind=kind, **kw)


def test_the_lines_a_turn_carries() -> None:
    voice = _stored(VOICE, duration=12, label="voice note")
    line = voice_line(voice, "remember the dentist on Tuesday")
    assert line.startswith("[voice note, 0:12, transcribed] remember the dentist on Tuesday")
    assert (
        "[audio: files/inbox/20261130-101500-3fa2c1d9.ogg (voice note, audio/ogg, 4.0 KiB)]" in line
    )
    off = quick_lines([voice])
    assert "not transcribed (transcription is off for this group)" in off[0]
    assert needs_work([voice], "cloud") and not needs_work([voice], "off")
    pdf = _stored("document", "20261130-101500-3fa2c1d9.pdf", mime="application/pdf")
    assert needs_work([pdf], "off")
    text, said = compose("hello", None, ["x" * 40_000])
    assert len(text) <= 32_000 and text.endswith("too long for one message]") and said is None
    with pytest.raises(ValueError, match="inbox_name"):
        StoredFile(name="../../etc/passwd", mime=None, size=1, kind=IMAGE)


def test_a_message_of_the_longest_text_with_a_file_still_fits_a_turn() -> None:
    from orchestrator.limits import INBOUND_TEXT_MAX_CHARS, MESSAGE_MAX_CHARS

    photo = _stored(IMAGE, "20261130-101500-3fa2c1d9.jpg", mime="image/jpeg")
    words = "w" * INBOUND_TEXT_MAX_CHARS
    text, said = compose(words, "@bot " + words, quick_lines([photo]))
    for composed in (text, said):
        assert composed is not None and len(composed) <= MESSAGE_MAX_CHARS
        assert composed.endswith("w\n\n\n[cut: the rest is too long for one message]")


# transcription config


def _config(text: str) -> Any:
    from orchestrator.config import load_config
    from orchestrator.home import Home

    return load_config(Home(Path("/nonexistent-home")), text)


def test_transcribers_are_read_from_orchestrator_yaml_and_bad_ones_named() -> None:
    config = _config(
        "transcription:\n  cloud:\n    kind: openai\n    key_env: OPENAI_API_KEY\n"
        "    price_per_minute: 0.006\n  here:\n    kind: local\n    model_dir: /srv/whisper\n"
        "    max_seconds: 10m\n"
    )
    cloud, here = config.transcription["cloud"], config.transcription["here"]
    assert cloud.model == "whisper-1" and cloud.base_url == "https://api.openai.com/v1"
    assert here.max_seconds == 600 and here.model_name == "whisper"
    assert (
        "OPENAI" not in str(cloud.to_dict()["key"])
        or cloud.to_dict()["key"] == "env OPENAI_API_KEY"
    )
    for bad, named in (
        ("  x:\n    kind: local\n    model_dir: relative/path\n", "model_dir"),
        ("  x:\n    kind: openai\n    model_dir: /a\n", "model_dir"),
        ("  x:\n    kind: sphinx\n", "kind"),
        ("  off:\n    kind: openai\n", "off"),
        ("  x:\n    kind: local\n    model_dir: /a\n    max_seconds: 9h\n", "max_seconds"),
    ):
        with pytest.raises(InvalidConfig, match=named):
            _config("transcription:\n" + bad)


# transcription through an OpenAI-compatible endpoint


@pytest.fixture
def endpoint() -> Any:
    fake = FakeProvider("openai", KEY)
    yield fake
    fake.close()


def test_the_endpoint_gets_the_multipart_request_the_api_expects(endpoint: FakeProvider) -> None:
    endpoint.script.append(Text("Remember the dentist on Tuesday."))
    definition = TranscriberDef("cloud", "openai", base_url=endpoint.base_url, language="en")
    transcriber = OpenAITranscriber(definition, KEY)
    try:
        found = transcriber.transcribe(
            b"OggS fake audio", name="a.ogg", mime="audio/ogg", seconds=3
        )
    finally:
        transcriber.close()
    assert found.text == "Remember the dentist on Tuesday." and found.seconds == 3
    seen = endpoint.seen[-1]
    assert seen.path == "/v1/audio/transcriptions"
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert seen.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert seen.body == {
        "file": {"filename": "a.ogg", "type": "audio/ogg", "size": 15},
        "model": "whisper-1",
        "response_format": "json",
        "language": "en",
    }


def test_the_fake_endpoint_is_the_one_the_official_sdk_talks_to(endpoint: FakeProvider) -> None:
    """The fake is checked by the platform's own SDK, called as its documentation shows."""
    import openai

    endpoint.script.append(Text("hello"))
    client = openai.OpenAI(api_key=KEY, base_url=endpoint.base_url, max_retries=0)
    answer = client.audio.transcriptions.create(
        model="whisper-1", file=("x.wav", b"RIFF", "audio/wav")
    )
    assert answer.text == "hello"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            api_key="wrong", base_url=endpoint.base_url, max_retries=0
        ).audio.transcriptions.create(model="whisper-1", file=("x.wav", b"RIFF", "audio/wav"))
    client.close()


def test_a_refusal_or_an_overlong_file_is_a_clear_failure(
    endpoint: FakeProvider, tmp_path: Path, whisper_model: Path
) -> None:
    endpoint.script.append(Error(500, "the server is down"))
    definition = TranscriberDef("cloud", "openai", base_url=endpoint.base_url, max_seconds=60)
    transcriber = OpenAITranscriber(definition, KEY)
    try:
        with pytest.raises(TranscriptionFailed, match="HTTP 500") as failed:
            transcriber.transcribe(b"x", name="a.ogg", mime="audio/ogg", seconds=2)
        assert failed.value.retryable
        # ten hours, as the container says: refused before anything is sent
        voice = speech("hello", tmp_path).read_bytes()
        asked = len(endpoint.seen)
        with pytest.raises(AudioTooLong, match="10:00:00 long; at most 1:00"):
            transcriber.transcribe(
                stretched_ogg(voice, 36_000), name="a.ogg", mime=None, seconds=None
            )
        with pytest.raises(AudioTooLong):
            transcriber.transcribe(voice, name="a.ogg", mime=None, seconds=36_000)  # the app's word
        assert len(endpoint.seen) == asked
    finally:
        transcriber.close()


# transcription with a local model, for real


def test_a_voice_note_is_transcribed_by_a_local_whisper_model(
    whisper_model: Path, tmp_path: Path
) -> None:
    sentence = "Please remember that the dentist appointment is on Tuesday at three o'clock."
    voice = speech(sentence, tmp_path).read_bytes()
    transcriber = LocalTranscriber(
        TranscriberDef("here", "local", model_dir=whisper_model, language="en")
    )
    found = transcriber.transcribe(voice, name="v.ogg", mime="audio/ogg", seconds=None)
    words = found.text.lower()
    assert "dentist" in words and "tuesday" in words, found.text
    assert found.seconds is not None and 2 < found.seconds < 10
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # nothing is fetched at run time


def test_local_decoding_stops_at_the_cap_whatever_the_file_claims(
    whisper_model: Path, tmp_path: Path
) -> None:
    voice = speech("one two three four five six seven eight nine ten", tmp_path).read_bytes()
    assert len(decode(voice, 60)) > 16_000
    with pytest.raises(AudioTooLong):
        decode(voice, 1)
    with pytest.raises(TranscriptionFailed, match="decoded"):
        decode(b"not audio at all", 60)
    missing = LocalTranscriber(TranscriberDef("x", "local", model_dir=tmp_path))
    with pytest.raises(TranscriptionFailed, match="not a CTranslate2 Whisper model folder"):
        missing.transcribe(voice, name="v.ogg", mime=None, seconds=None)


def test_doctor_checks_the_transcribers_and_what_groups_name(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.service.doctor import FAIL, OK, check_transcription

    monkeypatch.delenv("MISSING_KEY", raising=False)
    (home / "orchestrator.yaml").write_text(
        "transcription:\n  cloud:\n    kind: openai\n    key_env: MISSING_KEY\n"
        f"  here:\n    kind: local\n    model_dir: {tmp_path}\n"
    )
    store = GroupStore(Home(home))
    store.add(GroupConfig(name="fam"))
    with open(store.root / "fam" / "group.yaml", "a") as yaml:
        yaml.write("media:\n  transcribe: elsewhere\n")
    found = {c.name: c for c in check_transcription(Home(home))}
    assert found["transcription cloud"].status == FAIL
    assert "MISSING_KEY" in found["transcription cloud"].detail
    assert found["transcription here"].status == FAIL
    assert "lacks model.bin, config.json, tokenizer.json" in found["transcription here"].detail
    assert found["group fam"].status == FAIL and "'elsewhere'" in found["group fam"].detail
    monkeypatch.setenv("MISSING_KEY", "k" * 20)
    assert {c.name: c for c in check_transcription(Home(home))}["transcription cloud"].status == OK
