"""Matrix files against a real homeserver (Synapse, tests/homeserver.py): an image a
member sends is downloaded from the authenticated media API into files/inbox and shown
by reference, one over the cap is refused politely, and a file the agent sends is
uploaded and posted once as m.file, also when a crash left it claimed but unconfirmed
(sent again with the same transaction id and the upload it made already)."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from tests.homeserver import User
from tests.mediafiles import jpeg_with_exif, pdf_with_text
from tests.test_matrix import Rig, make_rig, shared_room, wait_for


def answer(conn: socket.socket, request: dict[str, Any]) -> None:
    turn = request["turn"]
    text = turn["text"]
    if text.startswith("send "):
        wire.send_frame(conn, {"req": 1, "op": "file.send", "seq": 0, "path": text[5:].strip()})
        got = wire.recv_frame(conn) or {}
        replies = [str(got.get("text"))] if got.get("ok") else [f"not sent: {got.get('error')}"]
        shown = 1 if got.get("ok") else 0
    else:
        replies, shown = [f"echo: {text}"], 0
    wire.send_frame(conn, {"ok": True, "turn_id": turn["turn_id"], "replies": replies,
                           "shown": shown})  # fmt: skip


@pytest.fixture
def rig(home: Path, monkeypatch: pytest.MonkeyPatch, homeserver: Any) -> Any:
    made = make_rig(home, monkeypatch, homeserver)
    made.runner.behaviour = answer
    yield made
    made.channel.stop()
    made.daemon.drain(1)
    made.runner.close()
    made.daemon.queue.close()


def upload(user: User, data: bytes, mime: str, name: str) -> str:
    request = urllib.request.Request(
        f"{user.server.url}/_matrix/media/v3/upload?filename={name}",
        data=data,
        method="POST",
        headers={"Content-Type": mime, "Authorization": f"Bearer {user.token}"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return str(json.loads(response.read())["content_uri"])


def download(user: User, uri: str) -> bytes:
    server, media = uri[len("mxc://") :].split("/", 1)
    request = urllib.request.Request(
        f"{user.server.url}/_matrix/client/v1/media/download/{server}/{media}",
        headers={"Authorization": f"Bearer {user.token}"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return bytes(response.read())


def test_an_image_is_downloaded_into_the_inbox_and_shown_by_reference(rig: Rig) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    photo = jpeg_with_exif(640, 480)
    uri = upload(rig.member, photo, "image/jpeg", "cat.jpg")
    rig.member.say(room, "cat.jpg", msgtype="m.image", url=uri,
                   info={"mimetype": "image/jpeg", "size": len(photo)})  # fmt: skip
    wait_for(lambda: rig.runner.turns)
    turn = rig.runner.turns[0]
    inbox = rig.home / "groups" / "fam" / "files" / "inbox"
    (stored,) = inbox.iterdir()
    assert stored.read_bytes() == photo and stored.suffix == ".jpg"
    assert turn["text"] == (
        f'[attachment: files/inbox/{stored.name} (image "cat.jpg", image/jpeg, '
        f"{len(photo) / 1024:.1f} KiB)]"
    )
    assert turn["images"] == [f"files/inbox/{stored.name}"]


def test_a_file_over_the_cap_is_refused_without_a_download(rig: Rig) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    uri = upload(rig.member, b"x" * 100, "application/octet-stream", "big.bin")
    rig.member.say(room, "big.bin", msgtype="m.file", url=uri,
                   info={"mimetype": "application/octet-stream", "size": 50 * 1024**2})  # fmt: skip
    notice = wait_for(lambda: rig.replies(room))[0]
    assert "I take files up to 10.0 MiB" in notice["content"]["body"]
    assert rig.runner.turns == []


def test_a_file_the_agent_sends_arrives_once_even_after_a_crash(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    room = shared_room(rig)
    rig.daemon.chats.bind("mx", room, "fam", activation="always")
    files = rig.home / "groups" / "fam" / "files"
    files.mkdir(exist_ok=True)
    report = pdf_with_text(["the report"])
    (files / "report.pdf").write_bytes(report)
    rig.member.say(room, "send files/report.pdf")
    sent = wait_for(
        lambda: [r for r in rig.replies(room) if r["content"].get("msgtype") == "m.file"]
    )
    content = sent[0]["content"]
    assert content["body"] == "report.pdf" and content["info"]["mimetype"] == "application/pdf"
    assert download(rig.member, content["url"]) == report
    message_id = str(rig.daemon.queue.read("SELECT id FROM messages")[0][0])
    uploads = rig.daemon.queue.read(
        "SELECT key, value FROM channel_state WHERE key LIKE 'upload:%'"
    )
    rig.channel.stop()
    # Back to "claimed, not confirmed", as a crash right after the send would leave it.
    rig.daemon.queue.transaction(
        lambda db: db.execute(
            "UPDATE channel_outbound SET state='sending', platform_ids=NULL WHERE message_id=?",
            (message_id,),
        )
    )
    rig.restart(monkeypatch)
    wait_for(lambda: rig.daemon.chats.sent(message_id)[0][0] == "sent")
    time.sleep(1)
    files_sent = [r for r in rig.replies(room) if r["content"].get("msgtype") == "m.file"]
    assert len(files_sent) == 1
    assert (
        rig.daemon.queue.read("SELECT key, value FROM channel_state WHERE key LIKE 'upload:%'")
        == uploads
    )  # the upload it made was used again, not made twice
