"""Fuzzing Slack's Socket Mode envelopes (orchestrator/channels/slack/adapter.py): slack_sdk
reads an envelope (SocketModeRequest.from_dict), _envelope() takes its Events API
payload, handle() turns the payload's event into the core's Received (or nothing), and
addressed(), mention_forms() and attachment() judge it and store its files. The text,
the file names and types are the workspace's people's; the envelope's shape is
Slack's, which the adapter reads with .get() and checks as it goes.

Slack's JSON is typed, so the seeds' strings and numbers change and fields come and
go (mutated_json with same_types); examples give values of other types where the
adapter checks them (files, text, ts). For any envelope slack_sdk reads, _envelope()
and handle() raise nothing (a payload that raised was skipped, its message lost): what
reaches the core is well formed (text ids, the sender as team:user, text), a message
seen twice is routed once, and attachment() gives stored files named by the host in
the group's files/inbox, a refusal, or None.
"""

from __future__ import annotations

import asyncio
import copy
import tempfile
from pathlib import Path
from typing import Any, cast

from hypothesis import example, given
from slack_sdk.socket_mode.request import SocketModeRequest

from orchestrator.channels.chatapp.adapter import Refusal, StoredFile
from orchestrator.channels.slack.adapter import SlackAdapter
from orchestrator.channels.slack.kind import SlackOptions
from tests.fuzzing import RecordingCore, fuzz, mutated_json

TEAM, BOT = "T0FAM", "U0BOT"
FILE = {
    "id": "F1",
    "name": "../../report.pdf",
    "title": "report",
    "mimetype": "application/pdf",
    "filetype": "pdf",
    "size": 12,
    "mode": "hosted",
    "url_private": "https://files.slack.com/files-pri/T0FAM-F1/download/report.pdf",
    "url_private_download": "https://files.slack.com/files-pri/T0FAM-F1/download/report.pdf",
}
CLIP = {
    **FILE,
    "id": "F2",
    "name": "audio_message.mp4",
    "mimetype": "video/mp4",
    "subtype": "slack_audio",
    "duration_ms": 3400,
}


def event(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "channel": "D0ALICE",
        "user": "U0ALICE",
        "text": text,
        "ts": "1764669600.000100",
        "event_ts": "1764669600.000100",
        "channel_type": "im",
        "team": TEAM,
        **fields,
    }


def envelope(item: dict[str, Any], retry: int = 0) -> dict[str, Any]:
    return {
        "envelope_id": "57d6a792-4d35-4d0b-b6aa-3361493e1caf",
        "payload": {
            "token": "legacy-verification-token",
            "team_id": TEAM,
            "api_app_id": "A0APP",
            "event": item,
            "type": "event_callback",
            "event_id": "Ev00000001",
            "event_time": 1764669600,
            "authorizations": [
                {"team_id": TEAM, "user_id": BOT, "is_bot": True, "enterprise_id": None}
            ],
            "is_ext_shared_channel": False,
        },
        "type": "events_api",
        "accepts_response_payload": False,
        "retry_attempt": retry,
        "retry_reason": "timeout" if retry else "",
    }


SEEDS = [
    envelope(event("remember that my cat is called *Tom* 👋🏽 &lt;b&gt;")),
    envelope(
        event(
            f"<@{BOT}> what is on the list? <https://x.org|the list> <#C1|general> <!here>",
            type="app_mention",
            channel="C0FAM",
            channel_type="channel",
            thread_ts="1764669500.000050",
        ),
        retry=1,
    ),
    envelope(
        event(
            "in the thread",
            channel="C0FAM",
            channel_type="channel",
            thread_ts="1764669500.000050",
            parent_user_id=BOT,
            user_team="T0OTHER",
        )
    ),
    envelope(event("see attached", subtype="file_share", files=[FILE, CLIP])),
    envelope(
        event(
            "",
            subtype="file_share",
            files=[{**FILE, "url_private_download": "https://files.slack.com/large.bin"}],
        )
    ),
    envelope(event("edited", subtype="message_changed")),
    envelope(event("from an app", bot_id="B0APP")),
    {"type": "hello", "num_connections": 1, "debug_info": {"host": "applink-1"}},
    {"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "x"}},
]


class Client:
    def __init__(self) -> None:
        self.acknowledged: list[str] = []

    async def send_socket_mode_response(self, response: Any) -> None:
        self.acknowledged.append(response.envelope_id)


def adapter(root: Path) -> tuple[SlackAdapter, RecordingCore]:
    core = RecordingCore(SlackOptions(attachments_max_bytes=1000), "slack:", root)
    made = SlackAdapter(cast(Any, core))
    made.me, made.team = BOT, TEAM

    async def download(url: str, limit: int) -> bytes | None:
        return None if "large" in url else b"%PDF-1.4 fuzz"  # None: over the limit

    made._download = download  # type: ignore[method-assign]
    return made, core


async def read(made: SlackAdapter, raw: Any, inbox: Path) -> None:
    try:
        request = SocketModeRequest.from_dict(copy.deepcopy(raw))
    except ValueError:
        return  # slack_sdk's refusal of the envelope
    if request is None:
        return
    client = Client()
    await made._envelope(client, request)
    assert client.acknowledged == [request.envelope_id]  # every envelope, at once
    if made.events.empty():
        return
    payload = made.events.get_nowait()
    if not isinstance(payload, dict):
        return  # slack_sdk gives the Events API's payload as an object
    await made.handle(payload)
    await made.handle(payload)  # delivered again: dropped
    core = cast(RecordingCore, made.core)
    assert len(core.routed) <= 1
    for received in core.routed:
        for text in (received.chat, received.message_id, received.event_id):
            assert isinstance(text, str) and text
        team, _, user = received.sender.partition(":")
        assert team and user
        assert isinstance(received.text, str)
        assert received.thread is None or isinstance(received.thread, str)
        assert isinstance(made.addressed(received), bool)
        assert made.mention_forms(received) == (f"@{BOT}",)
        stored = await made.attachment(received, "fam")
        assert stored is None or isinstance(stored, Refusal | list)
        if isinstance(stored, list):
            assert stored and all(isinstance(item, StoredFile) for item in stored)
            assert sorted(p.name for p in inbox.iterdir()) == sorted(s.name for s in stored)


@fuzz(300)
@given(raw=mutated_json(SEEDS, max_edits=8, same_types=True))
@example(raw=SEEDS[1])
@example(raw=SEEDS[3])
@example(raw=envelope(event("x", files=[{**FILE, "size": "12"}, "F9", None])))
@example(raw=envelope(event("x", subtype="file_share", files=[{**CLIP, "duration_ms": True}])))
@example(raw=envelope(event(None, ts=1764669600.0001, user=7)))  # type: ignore[arg-type]
def test_any_envelope_is_handled_to_a_well_formed_message(raw: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "fam").mkdir()
        made, _ = adapter(root)
        asyncio.run(read(made, raw, root / "fam/files/inbox"))
