"""The media queue on its own, exactly: the preparer with recording transcribers, a
recording usage store and a PDF reader of its choosing (each line a file gets, the
usage row of each transcription, the transcriber made once and again when its
definition changes, the PDF text saved beside the file), which message is prepared
next, and the queue's workers with a recording daemon: a preparation queued, tried
again, and given up with lines that say so."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.config.transcription import TranscriberDef
from orchestrator.daemon import media
from orchestrator.daemon.media import (
    IDLE_WAIT_SECONDS,
    READ_MAX_BYTES,
    TRANSCRIPTION,
    MediaQueue,
    Preparer,
    next_to_prepare,
)
from orchestrator.limits import MEDIA_ATTEMPTS, TRANSCRIPT_MAX_CHARS
from orchestrator.media import pdf
from orchestrator.media import transcribe as transcribe_module
from orchestrator.media.inbox import (
    StoredFile,
    attachment_line,
    document_line,
    voice_line,
)
from orchestrator.media.prepare import compose
from orchestrator.media.transcribe import Transcript, TranscriptionFailed
from orchestrator.secrets import MissingSecret
from orchestrator.store.messages import Message
from orchestrator.store.usage import FAILED, OK

LOGGER = "orchestrator.media"
VOICE = StoredFile("20260101-120000-0000000a.ogg", "audio/ogg", 5, "voice", duration=4.0)
SONG = StoredFile("20260101-120000-0000000b.mp3", "audio/mpeg", 5, "audio")
PDF = StoredFile("20260101-120000-0000000c.pdf", "application/pdf", 5, "document")
PDF_BY_NAME = StoredFile("20260101-120000-0000000d.pdf", None, 5, "document")
PHOTO = StoredFile("20260101-120000-0000000e.jpg", "image/jpeg", 5, "image")


def message(*files: StoredFile, mid: str = "m1", group: str = "fam", **kw: Any) -> Message:
    fields: dict[str, Any] = {"media": files, "said": None}
    fields.update(kw)
    return Message(
        mid, group, "s1", "kitchen", None, "alice", "member", "hello", "cli", "preparing",
        **fields,
    )  # fmt: skip


class Usage:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def record(self, call: Any) -> None:
        self.calls.append(call)


class Speaker:
    """A transcriber that answers from a script and records what it was given."""

    def __init__(self, definition: TranscriberDef, answer: Any = None) -> None:
        self.definition = definition
        self.answer = answer if answer is not None else Transcript("  the words  ", 3.5)
        self.asked: list[tuple[Any, ...]] = []
        self.closed = 0

    def transcribe(self, audio: bytes, *, name: str, mime: str | None, seconds: Any) -> Any:
        self.asked.append((audio, name, mime, seconds))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The transcribers made, each as (definition, secrets file, transcriber)."""
    out: list[Any] = []

    def make(definition: TranscriberDef, secrets_file: Any) -> Speaker:
        speaker = Speaker(definition)
        out.append((definition, secrets_file, speaker))
        return speaker

    monkeypatch.setattr(transcribe_module, "make_transcriber", make)
    return out


def config(**transcribers: TranscriberDef) -> Any:
    return SimpleNamespace(transcription=transcribers, secrets_file=Path("/s.yaml"), currency="EUR")


def group_config(transcribe: str = "cloud") -> Any:
    return SimpleNamespace(media=SimpleNamespace(transcribe=transcribe))


CLOUD = TranscriberDef("cloud", "openai", model="whisper-9", price_per_minute=0.6)


def preparer(tmp_path: Path, *files: StoredFile, **transcribers: TranscriberDef) -> Preparer:
    inbox = tmp_path / "fam" / "files" / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    for stored in files:
        (inbox / stored.name).write_bytes(b"bytes")
    return Preparer(config(**transcribers), tmp_path, Usage())  # type: ignore[arg-type]


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_a_voice_note_is_transcribed_and_its_usage_recorded(
    tmp_path: Path, made: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    prep = preparer(tmp_path, VOICE, cloud=CLOUD)
    prep.transcriber("cloud")  # made before the clocks below are read
    ticks = iter([10.0, 10.25])
    monkeypatch.setattr(media.time, "monotonic", lambda: next(ticks, 11.0))
    monkeypatch.setattr(media.time, "time", lambda: 1234.5)
    [line] = prep.lines(message(VOICE), group_config())
    assert line == voice_line(replace(VOICE, duration=3.5), "the words")
    [(definition, secrets, speaker)] = made
    assert definition is CLOUD and secrets == Path("/s.yaml")
    assert speaker.asked == [(b"bytes", VOICE.name, "audio/ogg", 4.0)]
    [call] = prep.usage.calls  # type: ignore[attr-defined]
    assert (call.message_id, call.group, call.provider, call.model, call.purpose) == (
        "m1",
        "fam",
        "cloud",
        "whisper-9",
        TRANSCRIPTION,
    )
    assert TRANSCRIPTION == "transcription"
    assert (call.input_tokens, call.output_tokens, call.outcome, call.error) == (0, 0, OK, None)
    assert call.cost == pytest.approx(0.035)
    assert call.currency == "EUR"
    assert call.started == 1234.5
    assert call.latency_ms == 250.0


def test_an_unpriced_transcription_has_no_cost_or_currency(tmp_path: Path, made: list[Any]) -> None:
    prep = preparer(tmp_path, SONG, cloud=replace(CLOUD, price_per_minute=None))
    [line] = prep.lines(message(SONG), group_config())
    [call] = prep.usage.calls  # type: ignore[attr-defined]
    assert (call.cost, call.currency) == (None, None)
    assert line == voice_line(replace(SONG, duration=3.5), "the words")


def test_a_transcript_without_a_measured_length_keeps_the_apps(
    tmp_path: Path, made: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    prep = preparer(tmp_path, VOICE, cloud=CLOUD)
    prep.transcriber("cloud").answer = Transcript("x" * (TRANSCRIPT_MAX_CHARS + 1), None)  # type: ignore[attr-defined]
    [line] = prep.lines(message(VOICE), group_config())
    assert line == voice_line(VOICE, "x" * TRANSCRIPT_MAX_CHARS + " [cut: the transcript goes on]")
    assert prep.usage.calls[0].cost is None  # type: ignore[attr-defined]
    prep.transcriber("cloud").answer = Transcript("y" * TRANSCRIPT_MAX_CHARS, None)  # type: ignore[attr-defined]
    assert prep.lines(message(VOICE), group_config()) == [
        voice_line(VOICE, "y" * TRANSCRIPT_MAX_CHARS)
    ]


def test_transcription_off_asks_nothing(tmp_path: Path, made: list[Any]) -> None:
    prep = preparer(tmp_path, VOICE, cloud=CLOUD)
    assert prep.lines(message(VOICE), group_config("off")) == [
        voice_line(VOICE, None, "transcription is off for this group")
    ]
    assert made == [] and prep.usage.calls == []  # type: ignore[attr-defined]


def test_an_undefined_transcriber_is_named_and_nothing_recorded(
    tmp_path: Path, made: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    prep = preparer(tmp_path, VOICE, cloud=CLOUD, alpha=replace(CLOUD, name="alpha"))
    reason = (
        "transcriber 'gone' (group.yaml media.transcribe) is not defined in "
        "orchestrator.yaml; defined: alpha, cloud"
    )
    assert prep.lines(message(VOICE), group_config("gone")) == [voice_line(VOICE, None, reason)]
    assert prep.usage.calls == []  # type: ignore[attr-defined]
    assert logged(caplog) == [
        (
            logging.WARNING,
            f"group fam, message m1: {VOICE.path} not transcribed: {reason}",
        )
    ]
    none = preparer(tmp_path, VOICE)
    with pytest.raises(TranscriptionFailed, match=r"; defined: none$"):
        none.transcriber("gone")


@pytest.mark.parametrize("error", [TranscriptionFailed("too long"), MissingSecret("too long")])
def test_a_failed_transcription_is_recorded_and_said(
    tmp_path: Path, made: list[Any], error: Exception
) -> None:
    prep = preparer(tmp_path, VOICE, cloud=CLOUD)
    prep.transcriber("cloud").answer = error  # type: ignore[attr-defined]
    assert prep.lines(message(VOICE), group_config()) == [voice_line(VOICE, None, "too long")]
    [call] = prep.usage.calls  # type: ignore[attr-defined]
    assert (call.outcome, call.error, call.cost, call.currency) == (FAILED, "too long", None, None)


def test_an_unreadable_file_is_said_and_not_recorded(tmp_path: Path, made: list[Any]) -> None:
    prep = preparer(tmp_path, cloud=CLOUD)
    (tmp_path / "fam" / "files" / "inbox").mkdir(parents=True, exist_ok=True)
    [line] = prep.lines(message(VOICE), group_config())
    assert line.startswith(voice_line(VOICE, None, "[Errno 2]")[:40])
    assert "[Errno 2]" in line
    assert prep.usage.calls == []  # type: ignore[attr-defined]


def test_the_transcriber_is_made_once_and_again_when_its_definition_changes(
    tmp_path: Path, made: list[Any]
) -> None:
    prep = preparer(tmp_path, cloud=CLOUD)
    first = prep.transcriber("cloud")
    assert prep.transcriber("cloud") is first
    prep.config = config(cloud=replace(CLOUD, model="whisper-10"))
    second = prep.transcriber("cloud")
    assert second is not first
    assert first.closed == 1  # type: ignore[attr-defined]
    assert len(made) == 2
    prep.close()
    assert second.closed == 1  # type: ignore[attr-defined]
    assert prep._transcribers == {}
    prep.close()
    assert second.closed == 1  # type: ignore[attr-defined]


def test_a_transcriber_without_close_is_dropped_quietly() -> None:
    media._close(object())
    closed: list[int] = []
    media._close(SimpleNamespace(close=lambda: closed.append(1)))
    assert closed == [1]


class Found:
    def __init__(self, text: str, pages: int = 3, pages_read: int = 3, cut: bool = False):
        self.text, self.pages, self.pages_read, self.cut = text, pages, pages_read, cut


@pytest.fixture
def pdf_text(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What extract_text answers next (a Found or an exception)."""
    script: list[Any] = []

    def extract(data: bytes) -> Any:
        assert data == b"bytes"
        answer = script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(pdf, "extract_text", extract)
    return script


def test_a_pdfs_text_is_saved_beside_it(tmp_path: Path, pdf_text: list[Any]) -> None:
    prep = preparer(tmp_path, PDF, PDF_BY_NAME)
    pdf_text.append(Found("page text"))
    [line] = prep.lines(message(PDF), group_config())
    text_name = f"{PDF.name}.txt"
    assert line == document_line(PDF, text_name, "3 pages, 9 characters")
    assert (tmp_path / "fam" / "files" / "inbox" / text_name).read_text() == "page text"
    pdf_text.append(Found("again " * 1000, pages=500, pages_read=100, cut=True))
    [again] = prep.lines(message(PDF_BY_NAME), group_config())
    assert again == document_line(
        PDF_BY_NAME,
        f"{PDF_BY_NAME.name}.txt",
        "500 pages; the text of the first 100 only; cut at its length limit, 6,000 characters",
    )
    pdf_text.append(Found("new text"))
    prep.lines(message(PDF), group_config())  # a second preparation of the same message
    assert (tmp_path / "fam" / "files" / "inbox" / text_name).read_text() == "new text"


def test_a_pdf_without_text_or_not_a_pdf_or_unreadable(
    tmp_path: Path, pdf_text: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    prep = preparer(tmp_path, PDF)
    pdf_text.append(Found(" \n ", pages=2, pages_read=2))
    assert prep.lines(message(PDF), group_config()) == [
        document_line(PDF, None, "2 pages, 3 characters: no text in it (scanned pages?)")
    ]
    assert not (tmp_path / "fam" / "files" / "inbox" / f"{PDF.name}.txt").exists()
    pdf_text.append(pdf.NotAPdf("it is not a PDF"))
    assert prep.lines(message(PDF), group_config()) == [
        document_line(PDF, None, "it is not a PDF; no text was extracted")
    ]
    assert logged(caplog) == [(logging.INFO, f"group fam: {PDF.path}: it is not a PDF")]
    missing = StoredFile("20260101-120000-000000ff.pdf", "application/pdf", 5, "document")
    [line] = prep.lines(message(missing), group_config())
    assert line.startswith(document_line(missing, None, "it could not be read ([Errno 2]")[:-1])


def test_a_pdfs_text_that_cannot_be_saved_is_said(
    tmp_path: Path, pdf_text: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    prep = preparer(tmp_path, PDF)
    pdf_text.append(Found("text"))

    def refuse(group: str, name: str, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prep, "_write_text", refuse)
    assert prep.lines(message(PDF), group_config()) == [
        document_line(PDF, None, "its text could not be saved ([Errno 28] No space left on device)")
    ]


def test_other_files_are_named(tmp_path: Path) -> None:
    prep = preparer(tmp_path, PHOTO)
    assert prep.lines(message(PHOTO), group_config()) == [attachment_line(PHOTO)]


def test_a_file_is_read_up_to_its_size_or_the_attachment_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert READ_MAX_BYTES == 2 * 1024**3
    prep = preparer(tmp_path, PHOTO)
    inbox = tmp_path / "fam" / "files" / "inbox"
    (inbox / PHOTO.name).write_bytes(b"x" * 8)
    monkeypatch.setattr(media, "DEFAULT_ATTACHMENT_MAX_BYTES", 8)
    assert prep._read("fam", replace(PHOTO, size=1)) == b"x" * 8
    (inbox / PHOTO.name).write_bytes(b"x" * 9)
    assert prep._read("fam", replace(PHOTO, size=9)) == b"x" * 9
    with pytest.raises(OSError, match="over the 8-byte read limit"):
        prep._read("fam", replace(PHOTO, size=1))
    monkeypatch.setattr(media, "READ_MAX_BYTES", 7)
    with pytest.raises(OSError, match="over the 7-byte read limit"):
        prep._read("fam", replace(PHOTO, size=9))


def waiting(mid: str, group: str, session: str, created: float) -> Message:
    return replace(message(mid=mid, group=group), session=session, created=created)


def test_the_next_to_prepare() -> None:
    a1, a2 = waiting("a1", "a", "s", 1.0), waiting("a2", "a", "s", 2.0)
    a3 = waiting("a3", "a", "t", 3.0)
    b1 = waiting("b1", "b", "s", 4.0)
    everything = [a1, a2, a3, b1]
    assert next_to_prepare([], set(), set(), {}) is None
    assert next_to_prepare(everything, set(), set(), {}) is a1
    assert next_to_prepare(everything, {"a1"}, set(), {}) is a3  # a2 waits behind a1
    assert next_to_prepare(everything, set(), set(), {"a": 5.0}) is b1
    assert next_to_prepare(everything, set(), set(), {"a": 5.0, "b": 6.0}) is a1
    assert next_to_prepare(everything, set(), {"a"}, {}) is b1
    assert next_to_prepare(everything, {"a1", "a3", "b1"}, set(), {}) is None
    assert next_to_prepare([a1, b1], set(), set(), {"b": -1.0}) is b1
    assert next_to_prepare([a1, b1], set(), set(), {"b": 0.5}) is a1  # a: never served


class Queue:
    def __init__(self, *messages: Message) -> None:
        self.waiting = list(messages)
        self.paused: list[str] = []
        self.done: list[tuple[str, str, Any]] = []
        self.accept = True

    def preparing(self) -> list[Message]:
        return list(self.waiting)

    def paused_groups(self) -> list[str]:
        return self.paused

    def prepared(self, mid: str, text: str, said: Any) -> bool:
        self.done.append((mid, text, said))
        self.waiting = [m for m in self.waiting if m.id != mid]
        return self.accept


class Daemon:
    def __init__(self, tmp_path: Path, *messages: Message) -> None:
        self.config = config()
        self.queue = Queue(*messages)
        self.woken = 0
        self.loaded: list[str] = []
        self.fail: Exception | None = None
        store = SimpleNamespace(root=tmp_path, load=self._load)
        self.runtime = SimpleNamespace(store=store)
        self.relay = SimpleNamespace(usage=Usage())

    def _load(self, folder: str) -> Any:
        self.loaded.append(folder)
        if self.fail is not None:
            raise self.fail
        return SimpleNamespace(config=group_config())

    def wake(self) -> None:
        self.woken += 1


def test_the_queue_is_made_from_the_daemon(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    queue = MediaQueue(daemon)  # type: ignore[arg-type]
    assert queue.workers == 1
    assert queue.preparer.config is daemon.config
    assert queue.preparer.groups_root == tmp_path
    assert queue.preparer.usage is daemon.relay.usage
    assert (queue.working, queue.failures, queue.last, queue.threads) == (set(), {}, {}, [])
    assert not queue.stopping.is_set()
    daemon.config = config(cloud=CLOUD)
    queue.apply_config()
    assert queue.preparer.config is daemon.config


def test_a_prepared_message_is_queued_with_its_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    daemon = Daemon(tmp_path)
    queue = MediaQueue(daemon)  # type: ignore[arg-type]
    queue.failures["m1"] = 1
    one = message(PHOTO, said="hi there")
    queue.prepare(one)
    text, said = compose("hello", "hi there", [attachment_line(PHOTO)])
    assert daemon.queue.done == [("m1", text, said)]
    assert daemon.loaded == ["fam"]
    assert daemon.woken == 1
    assert queue.failures == {}
    [(level, line)] = logged(caplog)
    assert level == logging.INFO
    assert line.startswith("message m1 of fam: 1 file(s) prepared in ")
    daemon.queue.accept = False  # prepared already (by another start): not said again
    queue.prepare(one)
    assert len(logged(caplog)) == 1
    assert daemon.woken == 2


def test_a_failing_preparation_is_tried_again_then_given_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = Daemon(tmp_path)
    daemon.fail = RuntimeError("disk gone")
    queue = MediaQueue(daemon)  # type: ignore[arg-type]
    waits: list[float] = []
    monkeypatch.setattr(queue.stopping, "wait", waits.append)
    one = message(PHOTO, VOICE)
    for _ in range(MEDIA_ATTEMPTS - 1):
        queue.prepare(one)
    assert waits == [2.0, 4.0]
    assert daemon.queue.done == [] and daemon.woken == 0
    assert queue.failures == {"m1": 2}
    queue.prepare(one)
    lines = [
        f"{attachment_line(PHOTO)} [it could not be prepared: disk gone]",
        f"{attachment_line(VOICE)} [it could not be prepared: disk gone]",
    ]
    assert daemon.queue.done == [("m1", *compose("hello", None, lines))]
    assert queue.failures == {}
    assert daemon.woken == 1
    assert logged(caplog) == [
        (logging.WARNING, "message m1: its files could not be prepared (disk gone); trying again")
    ] * 2 + [(logging.ERROR, "message m1: its files could not be prepared: disk gone")]


def test_the_wait_between_tries_doubles_to_half_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(media, "MEDIA_ATTEMPTS", 10)
    daemon = Daemon(tmp_path)
    daemon.fail = RuntimeError("x")
    queue = MediaQueue(daemon)  # type: ignore[arg-type]
    waits: list[float] = []
    monkeypatch.setattr(queue.stopping, "wait", waits.append)
    for _ in range(6):
        queue.prepare(message(PHOTO))
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_take_chooses_marks_and_waits_when_there_is_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = waiting("a1", "a", "s", 1.0)
    b = waiting("b1", "b", "s", 2.0)
    daemon = Daemon(tmp_path, a, b)
    daemon.queue.paused = ["a"]
    queue = MediaQueue(daemon)  # type: ignore[arg-type]
    monkeypatch.setattr(media.time, "monotonic", lambda: 42.0)
    assert queue._take() is b
    assert queue.working == {"b1"}
    assert queue.last == {"b": 42.0}
    waited: list[float] = []
    monkeypatch.setattr(queue.cond, "wait", waited.append)
    assert queue._take() is None
    assert waited == [IDLE_WAIT_SECONDS]
    assert IDLE_WAIT_SECONDS == 1.0


def test_the_workers_prepare_until_stopped(tmp_path: Path) -> None:
    done = threading.Event()
    daemon = Daemon(tmp_path, message(PHOTO))
    daemon.wake = done.set  # type: ignore[method-assign]
    queue = MediaQueue(daemon, workers=2)  # type: ignore[arg-type]
    closed: list[int] = []
    queue.preparer.close = lambda: closed.append(1)  # type: ignore[method-assign]
    queue.start()
    try:
        assert [t.name for t in queue.threads] == ["media-0", "media-1"]
        assert all(t.daemon for t in queue.threads)
        assert done.wait(30)
    finally:
        queue.stop()
    for thread in queue.threads:
        thread.join(30)
        assert not thread.is_alive()
    assert queue.stopping.is_set()
    assert closed == [1]
    assert [d[0] for d in daemon.queue.done] == ["m1"]
    assert queue.working == set()


def test_a_failed_round_is_logged_and_the_loop_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = MediaQueue(Daemon(tmp_path))  # type: ignore[arg-type]
    rounds: list[int] = []

    def take() -> Any:
        rounds.append(1)
        if len(rounds) == 1:
            raise RuntimeError("database locked")
        queue.stopping.set()
        return None

    waits: list[float] = []
    monkeypatch.setattr(queue, "_take", take)
    monkeypatch.setattr(queue.stopping, "wait", waits.append)
    queue._loop()
    assert len(rounds) == 2
    assert waits == [IDLE_WAIT_SECONDS]
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == "media queue: a round failed; trying again"
    assert record.exc_info is not None


def test_a_message_is_released_after_its_preparation_even_when_it_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = MediaQueue(Daemon(tmp_path))  # type: ignore[arg-type]
    one = message(PHOTO)

    def take() -> Any:
        if queue.stopping.is_set():
            return None
        queue.working.add(one.id)
        return one

    def prepare(message: Message) -> None:
        queue.stopping.set()
        raise RuntimeError("x")

    monkeypatch.setattr(queue, "_take", take)
    monkeypatch.setattr(queue, "prepare", prepare)
    monkeypatch.setattr(queue.stopping, "wait", lambda t: None)
    notified: list[int] = []
    real = queue.cond.notify_all
    monkeypatch.setattr(queue.cond, "notify_all", lambda: (notified.append(1), real())[1])
    queue._loop()
    assert queue.working == set()
    assert notified == [1]


def test_the_groups_own_settings_prepare_its_files(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    daemon._load = lambda folder: SimpleNamespace(config=group_config("off"))  # type: ignore[method-assign]
    daemon.runtime.store.load = daemon._load
    queue = MediaQueue(daemon)  # type: ignore[arg-type]
    queue.prepare(message(VOICE))
    off = voice_line(VOICE, None, "transcription is off for this group")
    assert daemon.queue.done == [("m1", *compose("hello", None, [off]))]


def test_the_preparation_time_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    queue = MediaQueue(Daemon(tmp_path))  # type: ignore[arg-type]
    ticks = iter([100.0, 102.5])
    monkeypatch.setattr(media.time, "monotonic", lambda: next(ticks, 103.0))
    queue.prepare(message(PHOTO, PHOTO))
    assert logged(caplog) == [(logging.INFO, "message m1 of fam: 2 file(s) prepared in 2.5s")]


def test_a_worker_with_nothing_to_do_looks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = MediaQueue(Daemon(tmp_path))  # type: ignore[arg-type]
    one = message(PHOTO)
    script: list[Any] = [None, one]
    prepared: list[Message] = []

    def take() -> Any:
        if not script:
            queue.stopping.set()
            return None
        return script.pop(0)

    monkeypatch.setattr(queue, "_take", take)
    monkeypatch.setattr(queue, "prepare", prepared.append)
    queue._loop()
    assert prepared == [one]
