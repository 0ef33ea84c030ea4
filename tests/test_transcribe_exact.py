"""Transcribers on their own, exactly: the length measured and bounded, the endpoint's
request through a recording client (its options, its file, each way it fails and which
failures may be tried again, the key scrubbed), the local model loaded once from a
checked folder through a recording faster-whisper, its segments joined and its
deadline, and decoding through a recording PyAV: resampling, the cap, the errors."""

from __future__ import annotations

import io
import logging
import struct
import sys
import types
import wave
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from orchestrator.config.transcription import TranscriberDef
from orchestrator.limits import TRANSCRIBE_TIMEOUT_SECONDS
from orchestrator.media import transcribe
from orchestrator.media.transcribe import (
    LOCAL_MODEL_FILES,
    SAMPLE_RATE,
    AudioTooLong,
    LocalTranscriber,
    OpenAITranscriber,
    Transcript,
    TranscriptionFailed,
    check_length,
    decode,
    make_transcriber,
    measured_seconds,
)

KEY = "sk-transcribe-exact-0123456789"


def wav(seconds: float, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(struct.pack("<h", 0) * int(seconds * rate))
    return out.getvalue()


def test_a_failure_is_not_retryable_unless_said() -> None:
    assert TranscriptionFailed("x").retryable is False
    assert TranscriptionFailed("x", retryable=True).retryable is True
    assert TranscriptionFailed("why").message == "why"
    assert issubclass(AudioTooLong, TranscriptionFailed)
    assert SAMPLE_RATE == 16_000
    assert LOCAL_MODEL_FILES == ("model.bin", "config.json", "tokenizer.json")


def test_measured_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    found = measured_seconds(wav(2.5))
    assert found == 2.5
    assert type(found) is float
    assert measured_seconds(b"not audio") is None
    import mutagen

    for length, expected in ((0, 0.0), (3, 3.0), (-1, None), ("3", None), (None, None)):
        info = types.SimpleNamespace(length=length)
        monkeypatch.setattr(mutagen, "File", lambda f, info=info: types.SimpleNamespace(info=info))
        got = measured_seconds(b"x")
        assert got == expected
        assert got is None or type(got) is float
    monkeypatch.setattr(mutagen, "File", lambda f: None)
    assert measured_seconds(b"x") is None

    def broken(f: Any) -> Any:
        raise RuntimeError("malformed")

    monkeypatch.setattr(mutagen, "File", broken)
    assert measured_seconds(b"x") is None


def test_check_length_takes_the_larger_and_bounds_it() -> None:
    definition = TranscriberDef("t", "openai", max_seconds=60)
    audio = wav(2)
    assert check_length(definition, audio, None) == 2.0
    assert check_length(definition, audio, 1.0) == 2.0
    assert check_length(definition, audio, 3.0) == 3.0
    assert check_length(definition, b"x", 60.0) == 60.0
    assert check_length(definition, b"x", None) is None
    assert check_length(definition, b"x", 0.0) == 0.0
    with pytest.raises(AudioTooLong) as long:
        check_length(definition, b"x", 61.0)
    assert long.value.message == "it is 1:01 long; at most 1:00 is transcribed"
    with pytest.raises(AudioTooLong):
        check_length(TranscriberDef("t", "openai", max_seconds=1), wav(2), 0.5)


class Create:
    """The SDK's client, recording ``with_options(...).audio.transcriptions.create``."""

    def __init__(self, answer: Any = None, error: Exception | None = None) -> None:
        self.answer = answer if answer is not None else types.SimpleNamespace(text="hello")
        self.error = error
        self.options: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.closed = False

    def with_options(self, **options: Any) -> Any:
        self.options.append(options)
        return types.SimpleNamespace(
            audio=types.SimpleNamespace(transcriptions=types.SimpleNamespace(create=self.create))
        )

    def create(self, **kw: Any) -> Any:
        self.calls.append(kw)
        if self.error is not None:
            raise self.error
        return self.answer

    def close(self) -> None:
        self.closed = True


def endpoint(create: Create, key: str | None = KEY, **kw: Any) -> OpenAITranscriber:
    made = OpenAITranscriber(TranscriberDef("cloud", "openai", **kw), key)
    made.client.close()
    made.client = create  # type: ignore[assignment]
    return made


def test_the_endpoints_client_is_made_with_the_key_the_url_and_no_retries() -> None:
    made = OpenAITranscriber(TranscriberDef("cloud", "openai", base_url="http://h/v1"), KEY)
    try:
        assert made.client.api_key == KEY
        assert str(made.client.base_url) == "http://h/v1/"
        assert made.client.max_retries == 0
        assert made.key == KEY
        assert made.sdk is openai
    finally:
        made.close()
    keyless = OpenAITranscriber(TranscriberDef("cloud", "openai"), None)
    assert keyless.client.api_key == "none"
    keyless.close()


def test_the_endpoint_is_asked_with_the_file_the_model_and_json() -> None:
    create = Create()
    made = endpoint(create, model="whisper-9")
    found = made.transcribe(wav(1), name="a.wav", mime=None, seconds=None)
    assert found == Transcript("hello", 1.0)
    assert create.options == [{"timeout": TRANSCRIBE_TIMEOUT_SECONDS}]
    assert create.calls == [
        {
            "file": ("a.wav", wav(1), "application/octet-stream"),
            "model": "whisper-9",
            "response_format": "json",
        }
    ]
    made.close()
    assert create.closed


def test_the_language_and_the_type_are_passed_when_known() -> None:
    create = Create()
    endpoint(create, language="pt").transcribe(b"x", name="a.ogg", mime="audio/ogg", seconds=2)
    assert create.calls[0]["language"] == "pt"
    assert create.calls[0]["file"] == ("a.ogg", b"x", "audio/ogg")


def test_a_file_over_the_size_is_refused_before_anything_is_sent() -> None:
    create = Create()
    made = endpoint(create, max_bytes=3)
    assert made.transcribe(b"abc", name="a", mime=None, seconds=None).text == "hello"
    with pytest.raises(TranscriptionFailed) as refused:
        made.transcribe(b"a" * 1234, name="a", mime=None, seconds=None)
    assert refused.value.message == "it is 1,234 bytes; transcriber 'cloud' takes at most 3"
    big = endpoint(create, max_bytes=12345)
    with pytest.raises(TranscriptionFailed, match=r"takes at most 12,345$"):
        big.transcribe(b"a" * 12346, name="a", mime=None, seconds=None)
    with pytest.raises(AudioTooLong):
        made.transcribe(b"ab", name="a", mime=None, seconds=10**9)
    assert len(create.calls) == 1


def status_error(code: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://h/v1/audio/transcriptions")
    return openai.APIStatusError(message, response=httpx.Response(code, request=request), body=None)


@pytest.mark.parametrize(
    ("code", "retryable"),
    [(400, False), (407, False), (408, True), (409, True), (410, False), (429, True),
     (499, False), (500, True), (503, True)],
)  # fmt: skip
def test_an_http_refusal_says_its_code_and_whether_to_try_again(code: int, retryable: bool) -> None:
    made = endpoint(Create(error=status_error(code, f"no: {KEY}")))
    with pytest.raises(TranscriptionFailed) as failed:
        made.transcribe(b"x", name="a", mime=None, seconds=None)
    assert failed.value.message == f"transcriber 'cloud' answered HTTP {code}: no: [key]"
    assert failed.value.retryable is retryable
    assert failed.value.__cause__ is None
    assert failed.value.__suppress_context__


def test_a_long_refusal_is_cut() -> None:
    made = endpoint(Create(error=status_error(400, "x" * 1000)))
    with pytest.raises(TranscriptionFailed) as failed:
        made.transcribe(b"x", name="a", mime=None, seconds=None)
    assert len(failed.value.message) == 400


def test_an_unreachable_endpoint_may_be_tried_again() -> None:
    request = httpx.Request("POST", f"http://h/{KEY}")
    made = endpoint(Create(error=openai.APIConnectionError(message=f"down {KEY}", request=request)))
    with pytest.raises(TranscriptionFailed) as failed:
        made.transcribe(b"x", name="a", mime=None, seconds=None)
    assert failed.value.message == "transcriber 'cloud' unreachable: down [key]"
    assert failed.value.retryable is True
    assert failed.value.__suppress_context__
    made = endpoint(Create(error=openai.APIConnectionError(message="y" * 1000, request=request)))
    with pytest.raises(TranscriptionFailed) as cut:
        made.transcribe(b"x", name="a", mime=None, seconds=None)
    assert len(cut.value.message) == 400


def test_an_answer_without_text_is_a_failure() -> None:
    for answer in (types.SimpleNamespace(), types.SimpleNamespace(text=5)):
        made = endpoint(Create(answer=answer))
        with pytest.raises(TranscriptionFailed) as failed:
            made.transcribe(b"x", name="a", mime=None, seconds=None)
        assert failed.value.message == "transcriber 'cloud' answered without text"
        assert failed.value.retryable is False


def test_the_key_is_scrubbed_only_when_long_enough() -> None:
    assert endpoint(Create(), key="abcd")._scrub("xabcdx") == "x[key]x"
    assert endpoint(Create(), key="abc")._scrub("xabcx") == "xabcx"
    assert endpoint(Create(), key=None)._scrub("x") == "x"
    # a key its marker could join again gets another marker
    assert endpoint(Create(), key="ey]abcd")._scrub("[key]abcd") == "[k<key>"


class Segment:
    def __init__(self, text: str) -> None:
        self.text = text


class Whisper:
    """faster-whisper's WhisperModel, recording how it is made and asked."""

    made: list[tuple[Any, ...]] = []

    def __init__(self, folder: str, **kw: Any) -> None:
        self.made.append((folder, kw))
        self.asked: list[tuple[Any, ...]] = []
        self.segments = [Segment(" one "), Segment("  "), Segment("two")]

    def transcribe(self, samples: Any, **kw: Any) -> Any:
        self.asked.append((samples, kw))
        return iter(self.segments), None


@pytest.fixture
def whisper(monkeypatch: pytest.MonkeyPatch) -> type[Whisper]:
    module = types.ModuleType("faster_whisper")
    module.WhisperModel = Whisper  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "faster_whisper", module)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    Whisper.made = []
    return Whisper


def model_dir(tmp_path: Path, files: tuple[str, ...] = LOCAL_MODEL_FILES) -> Path:
    folder = tmp_path / "whisper-small"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("x")
    return folder


def local(tmp_path: Path, **kw: Any) -> LocalTranscriber:
    return LocalTranscriber(TranscriberDef("here", "local", model_dir=model_dir(tmp_path), **kw))


def test_the_local_model_is_loaded_once_offline_with_its_settings(
    whisper: type[Whisper],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import os

    samples = np.zeros(SAMPLE_RATE * 3, dtype=np.float32)
    decoded: list[tuple[bytes, float]] = []
    monkeypatch.setattr(
        transcribe, "decode", lambda audio, cap: (decoded.append((audio, cap)), samples)[1]
    )
    made = local(tmp_path, language="en", compute_type="float32", threads=3, max_seconds=90)
    assert made.model is None
    caplog.set_level(logging.INFO, logger="orchestrator.media")
    found = made.transcribe(b"audio", name="v.ogg", mime=None, seconds=2)
    assert found == Transcript("one two", 3.0)
    assert decoded == [(b"audio", 90)]
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    folder = tmp_path / "whisper-small"
    assert whisper.made == [
        (
            str(folder),
            {
                "device": "cpu",
                "compute_type": "float32",
                "cpu_threads": 3,
                "local_files_only": True,
            },
        )
    ]
    assert made.model.asked == [(samples, {"language": "en", "beam_size": 5, "vad_filter": False})]
    [line] = [r.getMessage() for r in caplog.records if r.name == "orchestrator.media"]
    assert line.startswith(f"transcriber here: loaded {folder} in ")
    made.transcribe(b"audio", name="v.ogg", mime=None, seconds=None)
    assert len(whisper.made) == 1
    with pytest.raises(AudioTooLong):
        made.transcribe(b"audio", name="v.ogg", mime=None, seconds=91)
    assert len(decoded) == 2
    made.close()
    assert made.model is None


def test_a_transcription_past_its_deadline_fails(
    whisper: type[Whisper], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcribe, "decode", lambda audio, cap: np.zeros(16, dtype=np.float32))
    made = local(tmp_path)
    ticks = iter([0.0, 0.0, 0.0, 0.0, TRANSCRIBE_TIMEOUT_SECONDS, TRANSCRIBE_TIMEOUT_SECONDS + 1])
    monkeypatch.setattr(transcribe.time, "monotonic", lambda: next(ticks))
    with pytest.raises(TranscriptionFailed) as late:
        made.transcribe(b"audio", name="v.ogg", mime=None, seconds=None)
    assert late.value.message == (
        f"it took longer than {TRANSCRIBE_TIMEOUT_SECONDS} s to transcribe"
    )


def test_a_folder_without_the_models_files_is_named(whisper: type[Whisper], tmp_path: Path) -> None:
    folder = model_dir(tmp_path, ("config.json",))
    made = LocalTranscriber(TranscriberDef("here", "local", model_dir=folder))
    with pytest.raises(TranscriptionFailed) as missing:
        made._load()
    assert missing.value.message == (
        f"transcriber 'here': {folder} is not a CTranslate2 Whisper model folder "
        "(missing model.bin, tokenizer.json)"
    )
    (folder / "model.bin").mkdir()
    (folder / "tokenizer.json").write_text("x")
    with pytest.raises(TranscriptionFailed, match=r"\(missing model.bin\)$"):
        made._load()
    assert whisper.made == []


def test_without_faster_whisper_the_package_to_install_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "faster_whisper", None)
    made = local(tmp_path)
    with pytest.raises(TranscriptionFailed) as missing:
        made._load()
    assert missing.value.message == (
        "transcriber 'here' needs faster-whisper: pip install 'orchestrator[transcribe-local]'"
    )
    assert missing.value.__suppress_context__


class FFmpegError(Exception):
    pass


class Frame:
    def __init__(self, samples: int) -> None:
        self.samples = samples


class Out:
    def __init__(self, samples: int, value: float) -> None:
        self.array = np.full((1, samples), value, dtype=np.float64)

    def to_ndarray(self) -> Any:
        return self.array


class Resampler:
    made: list[dict[str, Any]] = []

    def __init__(self, **kw: Any) -> None:
        self.made.append(kw)
        self.flushed = False

    def resample(self, frame: Frame | None) -> list[Out]:
        if frame is None:
            return [Out(2, 9.0)]
        return [Out(frame.samples, 1.0)]


class Container:
    def __init__(self, frames: list[Frame], audio: bool = True) -> None:
        self.frames = frames
        self.streams = types.SimpleNamespace(audio=["stream0", "stream1"] if audio else [])
        self.decoded: list[Any] = []
        self.closed = False

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True

    def decode(self, stream: Any) -> Any:
        self.decoded.append(stream)
        yield from self.frames


@pytest.fixture
def av(monkeypatch: pytest.MonkeyPatch) -> Any:
    module: Any = types.ModuleType("av")
    module.error = types.SimpleNamespace(FFmpegError=FFmpegError)
    module.AudioResampler = Resampler
    module.opened = []
    module.container = Container([Frame(3), Frame(4)])

    def open_(source: Any, **kw: Any) -> Container:
        module.opened.append((source.read(), kw))
        if isinstance(module.container, Exception):
            raise module.container
        return module.container

    module.open = open_
    monkeypatch.setitem(sys.modules, "av", module)
    Resampler.made = []
    return module


def test_decode_resamples_to_mono_16k_float32(av: Any) -> None:
    samples = decode(b"audio", 1)
    assert samples.dtype == np.float32
    assert samples.tolist() == [1.0] * 7 + [9.0, 9.0]
    assert av.opened == [(b"audio", {"mode": "r", "metadata_errors": "ignore"})]
    assert Resampler.made == [{"format": "flt", "layout": "mono", "rate": SAMPLE_RATE}]
    assert av.container.decoded == ["stream0"]
    assert av.container.closed


def test_decode_stops_past_the_cap(av: Any) -> None:
    av.container = Container([Frame(8000), Frame(8001), Frame(10**9)])
    with pytest.raises(AudioTooLong) as long:
        decode(b"audio", 1)
    assert long.value.message == "it is longer than the 0:01 that is transcribed"
    av.container = Container([Frame(8000), Frame(8000)])
    assert len(decode(b"audio", 1)) == 16_002
    av.container = Container([Frame(SAMPLE_RATE * 2 + 1)])
    with pytest.raises(AudioTooLong):
        decode(b"audio", 2)
    av.container = Container([Frame(SAMPLE_RATE // 2 + 1)])
    with pytest.raises(AudioTooLong):
        decode(b"audio", 0.5)


def test_decode_errors(av: Any) -> None:
    av.container = Container([], audio=False)
    with pytest.raises(TranscriptionFailed) as none:
        decode(b"audio", 1)
    assert none.value.message == "it has no audio stream"
    assert type(none.value) is TranscriptionFailed
    for error in (FFmpegError("bad data"), ValueError("bad data"), OSError("bad data")):
        av.container = error
        with pytest.raises(TranscriptionFailed) as failed:
            decode(b"audio", 1)
        assert failed.value.message == "it could not be decoded as audio: bad data"
        assert failed.value.__suppress_context__
    av.container = RuntimeError("other")
    with pytest.raises(RuntimeError):
        decode(b"audio", 1)


def test_decode_of_nothing_is_no_samples(av: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    av.container = Container([])
    monkeypatch.setattr(Resampler, "resample", lambda self, frame: [])
    samples = decode(b"audio", 1)
    assert samples.dtype == np.float32
    assert samples.shape == (0,)


def test_make_transcriber(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXACT_TRANSCRIBE_KEY", KEY)
    from orchestrator.secrets import SecretRef

    cloud = TranscriberDef("cloud", "openai", key=SecretRef(env="EXACT_TRANSCRIBE_KEY"))
    made = make_transcriber(cloud, None)
    assert isinstance(made, OpenAITranscriber)
    assert made.key == KEY
    assert made.definition is cloud
    made.close()
    here = TranscriberDef("here", "local", model_dir=tmp_path)
    local_one = make_transcriber(here, None)
    assert isinstance(local_one, LocalTranscriber)
    assert local_one.definition is here


def test_the_load_time_is_logged(
    whisper: type[Whisper],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    made = local(tmp_path)
    ticks = iter([100.0, 102.5])
    monkeypatch.setattr(transcribe.time, "monotonic", lambda: next(ticks))
    caplog.set_level(logging.INFO, logger="orchestrator.media")
    made._load()
    folder = tmp_path / "whisper-small"
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.media"] == [
        f"transcriber here: loaded {folder} in 2.5s"
    ]


def test_the_local_kind_measures_the_file_before_decoding(
    whisper: type[Whisper], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[bytes] = []
    monkeypatch.setattr(
        transcribe,
        "decode",
        lambda audio, cap: (decoded.append(audio), np.zeros(16, dtype=np.float32))[1],
    )
    made = local(tmp_path, max_seconds=1)
    with pytest.raises(AudioTooLong, match="it is 0:02 long"):
        made.transcribe(wav(2), name="v.wav", mime=None, seconds=None)
    assert decoded == []


def test_a_segment_at_the_deadline_is_still_in_time(
    whisper: type[Whisper], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcribe, "decode", lambda audio, cap: np.zeros(16, dtype=np.float32))
    made = local(tmp_path)
    made.model = Whisper("folder")
    ticks = iter([0.0, TRANSCRIBE_TIMEOUT_SECONDS, TRANSCRIBE_TIMEOUT_SECONDS])
    monkeypatch.setattr(transcribe.time, "monotonic", lambda: next(ticks, 0.0))
    found = made.transcribe(b"audio", name="v.ogg", mime=None, seconds=None)
    assert found.text == "one two"


def test_the_endpoints_key_may_come_from_the_secrets_file(tmp_path: Path) -> None:
    from orchestrator.secrets import SecretRef

    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(f"transcribe: {KEY}\n")
    secrets.chmod(0o600)
    cloud = TranscriberDef("cloud", "openai", key=SecretRef(secret="transcribe"))
    made = make_transcriber(cloud, secrets)
    assert isinstance(made, OpenAITranscriber)
    assert made.key == KEY
    made.close()
