"""Transcribers: speech in a voice note or audio file to text, on the host.

Two kinds (``config.transcription``): an OpenAI-compatible ``/audio/transcriptions``
endpoint, called with the official ``openai`` SDK (a multipart upload of the file with
``model``, ``language`` and ``response_format``), with its key from ``secrets``; and a
local Whisper model run by faster-whisper, loaded once from the folder the operator
names, never downloaded (``HF_HUB_OFFLINE`` is set and the folder must hold the
tokenizer, or faster-whisper would fetch one).

Length is bounded before any work is paid for: a file is measured (its container's
duration, and the app's word for it: the larger counts) and one longer than
``max_seconds`` is not transcribed. The local kind decodes at most ``max_seconds`` of
audio whatever the file claims, so a file that lies about its length costs no more.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.errors import OrchestratorError
from orchestrator.limits import TRANSCRIBE_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from pathlib import Path

    from orchestrator.config.transcription import TranscriberDef

log = logging.getLogger("orchestrator.media")
SAMPLE_RATE = 16_000  # what Whisper models take
LOCAL_MODEL_FILES = ("model.bin", "config.json", "tokenizer.json")


class TranscriptionFailed(OrchestratorError):
    """A file was not transcribed; the message says why (for the turn's line and the log)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class AudioTooLong(TranscriptionFailed):
    """Longer than the transcriber's ``max_seconds``."""


@dataclass(frozen=True)
class Transcript:
    text: str
    seconds: float | None  # the audio's length, as measured (what a price is paid for)


class Transcriber(Protocol):
    definition: TranscriberDef

    def transcribe(
        self, audio: bytes, *, name: str, mime: str | None, seconds: float | None
    ) -> Transcript:
        """The speech in ``audio`` (``seconds``: its length as the app says, if it
        does). TranscriptionFailed (AudioTooLong) when it is not transcribed."""


def measured_seconds(audio: bytes) -> float | None:
    """The audio's length by its container (Ogg, MP3, M4A, WAV, FLAC ...), or None."""
    try:
        import mutagen

        found = mutagen.File(io.BytesIO(audio))
    except Exception:  # a malformed file: its length is unknown, not an error here
        return None
    length = getattr(getattr(found, "info", None), "length", None)
    return float(length) if isinstance(length, int | float) and length >= 0 else None


def check_length(definition: TranscriberDef, audio: bytes, seconds: float | None) -> float | None:
    """The audio's length (the larger of the app's and the container's); AudioTooLong
    when it is over ``max_seconds``."""
    from orchestrator.media.inbox import clock

    found = [s for s in (seconds, measured_seconds(audio)) if s is not None]
    length = max(found) if found else None
    if length is not None and length > definition.max_seconds:
        raise AudioTooLong(
            f"it is {clock(length)} long; at most {clock(definition.max_seconds)} is transcribed"
        )
    return length


class OpenAITranscriber:
    """An OpenAI-compatible ``/audio/transcriptions`` endpoint, through the official SDK."""

    def __init__(self, definition: TranscriberDef, key: str | None) -> None:
        import openai

        self.definition = definition
        self.sdk = openai
        self.key = key
        self.client = openai.OpenAI(
            api_key=key or "none", base_url=definition.base_url, max_retries=0
        )

    def transcribe(
        self, audio: bytes, *, name: str, mime: str | None, seconds: float | None
    ) -> Transcript:
        definition = self.definition
        if len(audio) > definition.max_bytes:
            raise TranscriptionFailed(
                f"it is {len(audio):,} bytes; transcriber {definition.name!r} takes at most "
                f"{definition.max_bytes:,}"
            )
        length = check_length(definition, audio, seconds)
        extra: dict[str, Any] = {"language": definition.language} if definition.language else {}
        try:
            answer = self.client.with_options(
                timeout=TRANSCRIBE_TIMEOUT_SECONDS
            ).audio.transcriptions.create(
                file=(name, audio, mime or "application/octet-stream"),
                model=definition.model,
                response_format="json",
                **extra,
            )
        except self.sdk.APIStatusError as exc:
            raise TranscriptionFailed(
                self._scrub(
                    f"transcriber {definition.name!r} answered HTTP {exc.status_code}: "
                    f"{exc.message}"[:400]
                ),
                retryable=exc.status_code in (408, 409, 429) or exc.status_code >= 500,
            ) from None
        except self.sdk.APIError as exc:
            raise TranscriptionFailed(
                self._scrub(f"transcriber {definition.name!r} unreachable: {exc}"[:400]),
                retryable=True,
            ) from None
        text = getattr(answer, "text", None)
        if not isinstance(text, str):
            raise TranscriptionFailed(f"transcriber {definition.name!r} answered without text")
        return Transcript(text, length)

    def _scrub(self, text: str) -> str:
        from orchestrator.redact import mask

        return mask(text, (self.key,), "key") if self.key and len(self.key) >= 4 else text

    def close(self) -> None:
        self.client.close()


class LocalTranscriber:
    """faster-whisper with a CTranslate2 Whisper model from a local folder; loaded at
    the first file, once. One file at a time (the model's threads are its own)."""

    def __init__(self, definition: TranscriberDef) -> None:
        self.definition = definition
        self.model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        folder = self.definition.model_dir
        assert folder is not None
        missing = [f for f in LOCAL_MODEL_FILES if not (folder / f).is_file()]
        if missing:
            raise TranscriptionFailed(
                f"transcriber {self.definition.name!r}: {folder} is not a CTranslate2 "
                f"Whisper model folder (missing {', '.join(missing)})"
            )
        os.environ["HF_HUB_OFFLINE"] = "1"  # never a download, whatever a caller asks
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise TranscriptionFailed(
                f"transcriber {self.definition.name!r} needs faster-whisper: "
                "pip install 'orchestrator[transcribe-local]'"
            ) from None
        started = time.monotonic()
        model = WhisperModel(
            str(folder),
            device="cpu",
            compute_type=self.definition.compute_type,
            cpu_threads=self.definition.threads,
            local_files_only=True,
        )
        log.info(
            "transcriber %s: loaded %s in %.1fs",
            self.definition.name,
            folder,
            time.monotonic() - started,
        )
        return model

    def transcribe(
        self, audio: bytes, *, name: str, mime: str | None, seconds: float | None
    ) -> Transcript:
        definition = self.definition
        check_length(definition, audio, seconds)
        samples = decode(audio, definition.max_seconds)
        length = len(samples) / SAMPLE_RATE
        deadline = time.monotonic() + TRANSCRIBE_TIMEOUT_SECONDS
        with self._lock:
            if self.model is None:
                self.model = self._load()
            segments, _info = self.model.transcribe(
                samples, language=definition.language, beam_size=5, vad_filter=False
            )
            parts = []
            for segment in segments:  # decoded lazily, one window at a time
                parts.append(segment.text.strip())
                if time.monotonic() > deadline:
                    raise TranscriptionFailed(
                        f"it took longer than {TRANSCRIBE_TIMEOUT_SECONDS} s to transcribe"
                    )
        return Transcript(" ".join(p for p in parts if p), length)

    def close(self) -> None:
        self.model = None


def decode(audio: bytes, max_seconds: float) -> Any:
    """The audio as 16 kHz mono float32 samples (numpy), decoded with PyAV (which
    faster-whisper brings); AudioTooLong as soon as it passes ``max_seconds``, so a
    file that lies about its length is never decoded whole."""
    import av
    import numpy as np

    from orchestrator.media.inbox import clock

    limit = int(max_seconds * SAMPLE_RATE)
    chunks: list[Any] = []
    count = 0
    try:
        with av.open(io.BytesIO(audio), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise TranscriptionFailed("it has no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    array = out.to_ndarray().reshape(-1)
                    chunks.append(array)
                    count += len(array)
                if count > limit:
                    raise AudioTooLong(
                        f"it is longer than the {clock(max_seconds)} that is transcribed"
                    )
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
    except TranscriptionFailed:
        raise
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        raise TranscriptionFailed(f"it could not be decoded as audio: {exc}") from None
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(chunks).astype(np.float32, copy=False)


def make_transcriber(definition: TranscriberDef, secrets_file: Path | None) -> Transcriber:
    """The transcriber of ``definition`` (MissingSecret when its key is named but absent)."""
    if definition.kind == "openai":
        return OpenAITranscriber(definition, definition.resolve_key(secrets_file))
    return LocalTranscriber(definition)
