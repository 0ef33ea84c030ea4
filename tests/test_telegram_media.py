"""Telegram's files through the fake Bot API (tests/faketelegram.py) with the real daemon
and queue: a voice note transcribed before its turn (an OpenAI-compatible endpoint, a
fake that checks the multipart request), a photo named and shown by reference, a PDF's
text saved beside it, a zip bomb named .pdf named as such; files the agent sends go out
once as a document, a photo or a voice note, and a claim not confirmed at a crash is
never sent again (Telegram has no idempotency key: the documented choice)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.channels.telegram.kind import TelegramOptions
from orchestrator.config import OrchestratorConfig
from orchestrator.config.accounts import ChannelAccount
from orchestrator.config.transcription import TranscriberDef
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.media.outbox import ReplyFile
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import open_queue
from tests.fakeproviders import FakeProvider, Text
from tests.fakerunner import FakeRunner
from tests.faketelegram import FakeTelegram, Upload
from tests.mediafiles import jpeg_with_exif, pdf_with_text, zip_bomb
from tests.test_telegram import ALICE, PRIVATE, TOKEN, Rig, TelegramChannel, wait_for

KEY = "sk-transcribe-telegram-abcdefgh"


def answer(conn: socket.socket, request: dict[str, Any]) -> None:
    """The group's runner: ``send PATH`` sends that file (as a runner's send_file does,
    through the host); anything else is echoed."""
    turn = request["turn"]
    text = turn["text"]
    if text.startswith("send "):
        wire.send_frame(conn, {"req": 1, "op": "file.send", "seq": 0, "path": text[5:].strip(),
                               "caption": "here it is"})  # fmt: skip
        got = wire.recv_frame(conn) or {}
        replies = [str(got.get("text"))] if got.get("ok") else [f"not sent: {got.get('error')}"]
        shown = 1 if got.get("ok") else 0
    else:
        replies, shown = [f"echo: {text}"], 0
    wire.send_frame(conn, {"ok": True, "turn_id": turn["turn_id"], "replies": replies,
                           "shown": shown})  # fmt: skip


@pytest.fixture
def server() -> Iterator[FakeTelegram]:
    fake = FakeTelegram(TOKEN)
    yield fake
    fake.close()


@pytest.fixture
def endpoint() -> Iterator[FakeProvider]:
    fake = FakeProvider("openai", KEY)
    yield fake
    fake.close()


def media_rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram,
              endpoint: FakeProvider) -> Rig:  # fmt: skip
    monkeypatch.setenv("TG_TOKEN", TOKEN)
    monkeypatch.setenv("TRANSCRIBE_KEY", KEY)
    h = Home(home)
    store = GroupStore(h)
    if not (store.root / "fam").exists():
        store.add(GroupConfig(name="fam", creators=(f"telegram:{ALICE}",)))
        with open(store.root / "fam" / "group.yaml", "a") as yaml:
            yaml.write("media:\n  transcribe: cloud\n")
    from orchestrator.secrets import SecretRef

    definition = ChannelAccount(
        "fambot", "telegram", token_env="TG_TOKEN", options=TelegramOptions(api_url=server.url)
    )
    config = OrchestratorConfig(
        project="t",
        mount_allowlist=home / "none.yaml",
        channel_accounts={definition.name: definition},
        transcription={
            "cloud": TranscriberDef(
                "cloud", "openai", base_url=endpoint.base_url,
                key=SecretRef("TRANSCRIBE_KEY", None), price_per_minute=0.006,
            )
        },
    )  # fmt: skip
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("fam") / "runner.sock", answer)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    channel = TelegramChannel(daemon)
    channel.start()
    daemon.chats.bind("fambot", str(ALICE), "fam")
    return Rig(daemon, channel, server, runner, h)


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram,
        endpoint: FakeProvider) -> Iterator[Rig]:  # fmt: skip
    made = media_rig(home, monkeypatch, server, endpoint)
    yield made
    made.channel.stop()
    made.daemon.drain(1)
    made.runner.close()
    made.daemon.relay.usage.close()
    made.daemon.queue.close()


def inbox(rig: Rig) -> Path:
    return rig.home.groups_dir / "fam" / "files" / "inbox"


def test_a_voice_note_is_transcribed_before_its_turn(rig: Rig, endpoint: FakeProvider) -> None:
    endpoint.script.append(Text("Remember the dentist on Tuesday."))
    rig.server.add_file("v1", b"OggS a voice note")
    voice = {"file_id": "v1", "file_unique_id": "uv1", "duration": 12, "mime_type": "audio/ogg",
             "file_size": 17}  # fmt: skip
    rig.server.say(PRIVATE, ALICE, None, extra={"voice": voice})
    wait_for(lambda: rig.runner.turns)
    text = rig.runner.turns[0]["text"]
    (stored,) = inbox(rig).iterdir()
    assert text == (
        "[voice note, 0:12, transcribed] Remember the dentist on Tuesday.\n"
        f"[audio: files/inbox/{stored.name} (voice note, audio/ogg, 17 B)]"
    )
    assert stored.read_bytes() == b"OggS a voice note" and stored.suffix == ".ogg"
    upload = endpoint.seen[-1].body["file"]
    assert upload == {"filename": stored.name, "type": "audio/ogg", "size": 17}
    (row,) = rig.daemon.relay.usage.read(
        "SELECT provider, model, purpose, outcome, cost FROM usage"
    )
    assert tuple(row) == ("cloud", "whisper-1", "transcription", "ok", pytest.approx(0.0012))


def test_a_photo_is_named_and_shown_by_reference(rig: Rig) -> None:
    rig.server.add_file("p1", jpeg_with_exif(320, 200))
    photo = [{"file_id": "p1", "file_unique_id": "up1", "width": 320, "height": 200,
              "file_size": len(jpeg_with_exif(320, 200))}]  # fmt: skip
    rig.server.say(PRIVATE, ALICE, None, extra={"photo": photo, "caption": "what is this?"})
    wait_for(lambda: rig.runner.turns)
    turn = rig.runner.turns[0]
    (stored,) = inbox(rig).iterdir()
    assert turn["text"].startswith(
        f"what is this?\n\n[attachment: files/inbox/{stored.name} (photo"
    )
    assert turn["images"] == [f"files/inbox/{stored.name}"]


def test_a_pdfs_text_is_saved_beside_it_and_a_zip_bomb_named_pdf_is_named(rig: Rig) -> None:
    pdf = pdf_with_text(["Invoice 2026-117", "Total due: 420 EUR"])
    rig.server.add_file("d1", pdf)
    document = {"file_id": "d1", "file_unique_id": "ud1", "file_name": "invoice.pdf",
                "mime_type": "application/pdf", "file_size": len(pdf)}  # fmt: skip
    rig.server.say(PRIVATE, ALICE, None, extra={"document": document})
    wait_for(lambda: rig.runner.turns)
    text = rig.runner.turns[0]["text"]
    (stored,) = [p for p in inbox(rig).iterdir() if p.suffix == ".pdf"]
    saved = stored.with_name(stored.name + ".txt")
    assert "Total due: 420 EUR" in saved.read_text()
    assert f'[document: files/inbox/{stored.name} (document "invoice.pdf"' in text
    assert f"its text: files/inbox/{saved.name} (2 pages, " in text
    bomb = zip_bomb(64 * 1024**2)
    rig.server.add_file("z1", bomb)
    rig.server.say(PRIVATE, ALICE, None, extra={"document": {
        **document, "file_id": "z1", "file_unique_id": "uz1", "file_name": "report.pdf",
        "file_size": len(bomb)}})  # fmt: skip
    wait_for(lambda: len(rig.runner.turns) == 2)
    assert (
        "not a PDF (it does not start as one; it looks like a zip archive); no text"
        in (rig.runner.turns[1]["text"])
    )


def test_files_the_agent_sends_arrive_once_as_document_photo_or_voice(rig: Rig) -> None:
    files = rig.home.groups_dir / "fam" / "files"
    files.mkdir(exist_ok=True)
    (files / "report.pdf").write_bytes(pdf_with_text(["the report"]))
    (files / "chart.png").write_bytes(_png())
    (files / "hello.ogg").write_bytes(b"OggS voice")
    for name in ("report.pdf", "chart.png", "hello.ogg"):
        rig.server.say(PRIVATE, ALICE, f"send files/{name}")
    wait_for(lambda: len(rig.server.calls_of("sendDocument")) == 1
             and len(rig.server.calls_of("sendPhoto")) == 1
             and len(rig.server.calls_of("sendVoice")) == 1)  # fmt: skip
    document = rig.server.calls_of("sendDocument")[0].params
    assert isinstance(document["document"], Upload)
    assert document["document"].filename == "report.pdf"
    assert document["document"].data == (files / "report.pdf").read_bytes()
    assert document["caption"] == "here it is" and int(document["chat_id"]) == ALICE
    assert rig.server.calls_of("sendPhoto")[0].params["photo"].filename == "chart.png"
    time.sleep(0.5)  # a sweep would resend a file not marked sent
    assert len(rig.server.calls_of("sendDocument")) == 1
    assert not [c for c in rig.server.sent(ALICE) if "cannot send files" in c.params["text"]]


def test_a_symlink_or_a_path_outside_files_is_refused(rig: Rig, home: Path) -> None:
    files = rig.home.groups_dir / "fam" / "files"
    files.mkdir(exist_ok=True)
    (home / "outside.txt").write_text("not the group's")
    (files / "secret.txt").symlink_to(home / "outside.txt")
    rig.server.say(PRIVATE, ALICE, "send files/secret.txt")
    rig.server.say(PRIVATE, ALICE, "send memory/index.md")
    wait_for(lambda: len(rig.server.sent(ALICE)) == 2)
    texts = [c.params["text"] for c in rig.server.sent(ALICE)]
    assert "symlink" in texts[0] and "only files under files/ can be sent" in texts[1]
    assert not rig.server.calls_of("sendDocument")


def test_a_file_claimed_but_unconfirmed_at_a_crash_is_never_sent_again(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeTelegram, endpoint: FakeProvider
) -> None:
    h = Home(home)
    queue = open_queue(h)
    GroupStore(h).add(GroupConfig(name="fam", creators=(f"telegram:{ALICE}",)))
    from orchestrator.store.chats import ChatStore

    chats = ChatStore(queue)
    chats.bind("fambot", str(ALICE), "fam")
    message = queue.enqueue(group="fam", session="s", chat=str(ALICE), thread=None,
                            sender=f"telegram:{ALICE}", trust="creator", text="x",
                            channel="telegram:fambot")  # fmt: skip
    outbox = h.state_dir / "outbox" / "fam"
    outbox.mkdir(parents=True)
    (outbox / f"{message.id}.0.pdf").write_bytes(b"%PDF-1.4")
    queue.add_file_reply(
        message.id,
        "[file: a.pdf (application/pdf, 8 B)]",
        ReplyFile(
            0, "a.pdf", "application/pdf", 8, "document", str(outbox / f"{message.id}.0.pdf")
        ),
    )
    queue.complete(message.id, ["after the file"], first_seq=1)
    assert chats.claim_send(message.id, 0, "fambot")  # the crash came after this claim
    queue.close()
    rig = media_rig(home, monkeypatch, server, endpoint)
    try:
        wait_for(lambda: server.sent(ALICE))
        time.sleep(0.5)
        assert not server.calls_of("sendDocument")
        assert [c.params["text"] for c in server.sent(ALICE)] == ["after the file"]
    finally:
        rig.channel.stop()
        rig.daemon.drain(1)
        rig.runner.close()
        rig.daemon.queue.close()


def _png() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (32, 32), (1, 2, 3)).save(out, "PNG")
    return out.getvalue()
