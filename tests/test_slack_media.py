"""Slack's files through the fake Slack (tests/fakeslack.py), with the real daemon and
queue, a real runner and OpenAI-compatible fakes for the model and the transcriber
(tests/chatmedia.py): an audio clip recorded in Slack is transcribed before its turn,
an image reaches the vision model, a file the agent sends is uploaded with Slack's
upload flow and shared once into the thread answered (also when the upload fails once),
a claim not confirmed at a crash is never sent again (the documented choice), and a link
or a path outside files/ is refused by the host. The fake's upload routes are checked
first with slack_sdk's own files_upload_v2."""

from __future__ import annotations

import asyncio
import base64
import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.channels.slack.kind import KIND
from orchestrator.limits import SLACK_FILE_MAX_BYTES
from orchestrator.relay.ops.send_file import send_limit
from tests.chatmedia import (
    MediaRig,
    claimed_at_a_crash,
    media_rig,
    send_file_then,
    sends_what_it_is_told,
)
from tests.fakeproviders import Text
from tests.fakeslack import TEAM, FakeSlack
from tests.mediafiles import jpeg_with_exif, pdf_with_text
from tests.test_slack import ALICE, APP_TOKEN, BOT_TOKEN, DM, wait_for

CREATOR = f"slack:{TEAM}:{ALICE}"


@pytest.fixture
def server() -> Iterator[FakeSlack]:
    fake = FakeSlack(BOT_TOKEN, APP_TOKEN)
    yield fake
    fake.close()


def account(server: FakeSlack) -> str:
    return f"""
    team:
      kind: slack
      bot_token_env: SLACK_BOT
      app_token_env: SLACK_APP
      api_url: {server.api_url}
    """


def connected(server: FakeSlack, rig: MediaRig) -> MediaRig:
    wait_for(lambda: server.connections and not server.sockets[-1].closed)
    rig.daemon.chats.bind("team", DM, "fam")
    return rig


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeSlack) -> Iterator[MediaRig]:
    monkeypatch.setenv("SLACK_BOT", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP", APP_TOKEN)
    with media_rig(home, monkeypatch, KIND, account(server), creator=CREATOR) as made:
        yield connected(server, made)


# the fake, as the SDK sees it


def test_the_fake_takes_uploads_as_slack_sdks_files_upload_v2_sends_them(
    server: FakeSlack,
) -> None:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    async def drive() -> None:
        web = AsyncWebClient(token=BOT_TOKEN, base_url=server.api_url, retry_handlers=[])
        done = await web.files_upload_v2(
            file=b"%PDF-1.4 a report",
            filename="report.pdf",
            title="The report",
            channel=DM,
            thread_ts="1700000000.000100",
            initial_comment="here it is",
        )
        assert done["file"]["id"].startswith("F") and done["file"]["title"] == "The report"
        for call, error in (
            (lambda: web.files_getUploadURLExternal(filename="a.txt", length=0),
             "missing_argument"),
            (lambda: web.files_completeUploadExternal(files=[{"id": "F0NOPE"}], channel_id=DM),
             "file_not_found"),
            (lambda: web.files_completeUploadExternal(files=[{"id": done["file"]["id"]}],
                                                      channel_id=DM), "file_not_found"),
        ):  # fmt: skip
            with pytest.raises(SlackApiError) as refused:
                await call()
            assert refused.value.response["error"] == error
        # a file whose upload URL was issued but whose bytes never came is not shared
        issued = await web.files_getUploadURLExternal(filename="b.txt", length=3)
        with pytest.raises(SlackApiError, match="file_not_found"):
            await web.files_completeUploadExternal(files=[{"id": issued["file_id"]}])

    asyncio.run(drive())
    [share] = server.shared(DM)
    assert share["thread_ts"] == "1700000000.000100" and share["initial_comment"] == "here it is"
    assert share["file"]["name"] == "report.pdf" and share["file"]["data"] == b"%PDF-1.4 a report"
    [upload] = server.calls_of("upload")
    assert upload.token is None  # the bytes go to the upload URL without a token


def test_slacks_limit_caps_what_the_agent_may_send() -> None:
    assert KIND.files_out_max_bytes == SLACK_FILE_MAX_BYTES == 1024**3
    assert send_limit("slack:team") == 50 * 1024**2  # send_file's own cap is smaller


# the channel


def test_an_audio_clip_is_transcribed_before_its_turn(rig: MediaRig, server: FakeSlack) -> None:
    rig.transcriber.script.append(Text("Remember the dentist on Tuesday."))
    audio = b"\x00\x00\x00 ftyp clip"
    clip = server.add_file("F0CLIP", "audio_message.mp4", "video/mp4", audio)
    clip.update(subtype="slack_audio", media_display_type="audio", duration_ms=7300)
    server.say(DM, ALICE, "", files=[clip])
    [reply] = wait_for(lambda: server.posted(DM))
    assert reply.params["text"] == "ok"  # the model's answer
    [stored] = rig.inbox()
    said = rig.user_messages()[-1]["content"]
    assert said == (
        "[voice note, 0:07, transcribed] Remember the dentist on Tuesday.\n"
        f'[audio: files/inbox/{stored.name} (audio clip "audio_message.mp4", audio/mp4, '
        f"{len(audio)} B)]"
    )
    upload = rig.transcriber.seen[-1].body["file"]
    assert upload == {"filename": stored.name, "type": "audio/mp4", "size": len(audio)}


def test_an_image_reaches_the_vision_model(rig: MediaRig, server: FakeSlack) -> None:
    from PIL import Image

    rig.model.script.append(Text("a red picture"))
    photo = server.add_file("F0IMG", "cat.jpg", "image/jpeg", jpeg_with_exif(320, 200))
    server.say(DM, ALICE, "what is this?", files=[photo])
    [reply] = wait_for(lambda: server.posted(DM))
    assert reply.params["text"] == "a red picture"
    [stored] = rig.inbox()
    text, image = rig.user_messages()[-1]["content"]
    assert text["text"].startswith(
        f'what is this?\n\n[attachment: files/inbox/{stored.name} (file "cat.jpg", image/jpeg, '
    )
    url = image["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    shown = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert shown.size == (320, 200) and not shown.getexif()  # re-encoded, no EXIF


def test_a_file_the_agent_sends_is_shared_once_into_the_thread(
    rig: MediaRig, server: FakeSlack
) -> None:
    report = pdf_with_text(["the report"])
    (rig.files / "report.pdf").write_bytes(report)
    send_file_then(rig.model, "files/report.pdf", "here is **the** report", "sent")
    server.fail("upload", 503, {"error": "try later"})  # the first upload fails
    root = "1700000000.000042"
    server.say(DM, ALICE, "the report, please", thread_ts=root)
    [share] = wait_for(lambda: server.shared(DM), timeout=30)
    assert share["thread_ts"] == root and share["initial_comment"] == "here is *the* report"
    assert share["file"]["name"] == "report.pdf" and share["file"]["data"] == report
    wait_for(lambda: server.posted(DM))
    time.sleep(0.5)  # a sweep would send again a file not marked sent
    assert len(server.shared()) == 1 and len(server.calls_of("upload")) == 2
    assert [c.params["text"] for c in server.posted(DM)] == ["sent"]
    assert server.posted(DM)[0].params["thread_ts"] == root


def test_a_file_claimed_but_unconfirmed_at_a_crash_is_never_sent_again(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeSlack
) -> None:
    monkeypatch.setenv("SLACK_BOT", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP", APP_TOKEN)
    made: list[str] = []
    with media_rig(
        home, monkeypatch, KIND, account(server), creator=CREATOR,
        prepare=lambda h: made.append(claimed_at_a_crash(h, DM, CREATOR, "slack:team", "team")),
    ) as rig:  # fmt: skip
        connected(server, rig)
        wait_for(lambda: server.posted(DM))
        time.sleep(0.5)
        assert server.shared() == [] and server.calls_of("files.getUploadURLExternal") == []
        assert [c.params["text"] for c in server.posted(DM)] == ["after the file"]
        assert rig.daemon.chats.sent(made[0])[0][0] == "unknown"


def test_a_link_or_a_path_outside_files_is_refused_by_the_host(
    home: Path, monkeypatch: pytest.MonkeyPatch, server: FakeSlack
) -> None:
    monkeypatch.setenv("SLACK_BOT", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP", APP_TOKEN)
    with media_rig(
        home, monkeypatch, KIND, account(server), creator=CREATOR, hostile=sends_what_it_is_told
    ) as rig:
        connected(server, rig)
        (home / "outside.txt").write_text("not the group's")
        (rig.files / "secret.txt").symlink_to(home / "outside.txt")
        server.say(DM, ALICE, "send files/secret.txt")
        server.say(DM, ALICE, "send memory/index.md")
        wait_for(lambda: len(server.posted(DM)) == 2)
        texts = [c.params["text"] for c in server.posted(DM)]
        assert "symlink" in texts[0] and "only files under files/ can be sent" in texts[1]
        assert server.calls_of("files.getUploadURLExternal") == [] and server.shared() == []
