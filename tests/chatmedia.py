"""What the chat apps' media tests share: a home whose group ``fam`` answers with a model
that takes images (provider ``fake``, model m-1 with ``vision: true``) and transcribes
voice notes (transcriber ``cloud``, group.yaml ``media.transcribe: cloud``), each an
OpenAI-compatible fake on loopback that checks the requests the real APIs expect
(tests/fakeproviders.py); a real runner for the group (tests/relayrig.py: its model
calls go through the host relay), or a FakeRunner acting as a hostile container; and the
channel of one app, its account read from orchestrator.yaml like an operator's.

A file the agent sends comes from the model: ``send_file_then`` scripts the model to call
``send_file`` and then say a last word."""

from __future__ import annotations

import socket
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.channels.chatapp import ChatAppChannel
from orchestrator.config import load_config
from orchestrator.config.kinds import AccountKind
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.media.outbox import copy_to_outbox, file_line
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.chats import ChatStore
from orchestrator.store.messages import open_queue
from tests.fakeproviders import FakeProvider, Text, ToolUse
from tests.fakerunner import FakeRunner
from tests.relayrig import serve_runner

MODEL_KEY = "sk-media-model-abcdefghijkl"
TRANSCRIBE_KEY = "sk-media-transcribe-abcdefgh"


@dataclass
class MediaRig:
    home: Home
    daemon: Daemon
    channel: ChatAppChannel
    model: FakeProvider  # the group's model (vision)
    transcriber: FakeProvider  # the transcription endpoint

    @property
    def files(self) -> Path:
        """The group's files/ (the agent's; created)."""
        folder = self.home.groups_dir / "fam" / "files"
        folder.mkdir(exist_ok=True)
        return folder

    def inbox(self) -> list[Path]:
        """The files stored in files/inbox (a PDF's text beside it included)."""
        folder = self.files / "inbox"
        return sorted(folder.iterdir()) if folder.is_dir() else []

    def user_messages(self) -> list[dict[str, Any]]:
        """The user messages of the model's requests, in order (OpenAI's shape)."""
        return [
            m
            for seen in self.model.seen
            if seen.path.endswith("/chat/completions")
            for m in seen.body["messages"]
            if m["role"] == "user"
        ]


def sends_what_it_is_told(conn: socket.socket, request: dict[str, Any]) -> None:
    """A hostile container's runner: ``send PATH`` asks the host to send that file,
    whatever it is (the host decides), and says what came of it; else it echoes."""
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


def send_file_then(model: FakeProvider, path: str, caption: str, last: str = "done") -> None:
    """Script ``model`` to call send_file(path, caption), then answer ``last``."""
    model.script.append(ToolUse("send_file", {"path": path, "caption": caption}))
    model.script.append(Text(last))


@contextmanager
def media_rig(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: AccountKind,
    account: str,
    *,
    creator: str | None,
    hostile: Callable[..., None] | None = None,
    prepare: Callable[[Home], None] | None = None,
) -> Iterator[MediaRig]:
    """The home, the daemon, the group's runner (a real one; with ``hostile``, a
    FakeRunner answering with it) and the channel of ``kind`` with the account whose
    orchestrator.yaml entry is ``account`` (YAML at the indentation of a key under
    ``channels:``); ``prepare`` is called with the home before the daemon starts.
    Everything is stopped afterwards."""
    model = FakeProvider("openai", MODEL_KEY)
    transcriber = FakeProvider("openai", TRANSCRIBE_KEY)
    monkeypatch.setenv("MEDIA_MODEL_KEY", MODEL_KEY)
    monkeypatch.setenv("MEDIA_TRANSCRIBE_KEY", TRANSCRIBE_KEY)
    (home / "orchestrator.yaml").write_text(
        "providers:\n  fake:\n    kind: openai\n"
        f"    base_url: {model.base_url}\n    key_env: MEDIA_MODEL_KEY\n    models: [m-1]\n"
        "    model_info:\n      m-1:\n        vision: true\n"
        "transcription:\n  cloud:\n    kind: openai\n"
        f"    base_url: {transcriber.base_url}\n    key_env: MEDIA_TRANSCRIBE_KEY\n"
        "    price_per_minute: 0.006\n"
        "channels:\n" + textwrap.indent(textwrap.dedent(account).strip() + "\n", "  ")
    )
    h = Home(home)
    store = GroupStore(h)
    store.add(
        GroupConfig(
            name="fam", provider="fake", model="m-1", creators=(creator,) if creator else ()
        )
    )
    with open(store.root / "fam" / "group.yaml", "a") as yaml:
        yaml.write("media:\n  transcribe: cloud\n")
    if prepare is not None:
        prepare(h)
    config = load_config(h)
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    if hostile is not None:
        fake = FakeRunner(h.runtime_dir("fam") / "runner.sock", hostile)
        stop_runner: Callable[[], None] = fake.close
    else:
        stop_runner = serve_runner(h, runtime, "fam")
    daemon.start()
    channel = ChatAppChannel.of_kind(kind)(daemon)
    channel.start()
    made = MediaRig(h, daemon, channel, model, transcriber)
    try:
        yield made
    finally:
        made.channel.stop()
        daemon.drain(2)
        stop_runner()
        daemon.relay.close()
        daemon.relay.usage.close()
        daemon.queue.close()
        model.close()
        transcriber.close()


def claimed_at_a_crash(home: Home, chat: str, sender: str, channel: str, account: str) -> str:
    """A message whose file reply (files/a.pdf, copied into the outbox) was claimed when
    the daemon stopped, and a text reply after it not sent yet; its id."""
    queue = open_queue(home)
    try:
        message = queue.enqueue(group="fam", session="s", chat=chat, thread=None, sender=sender,
                                trust="creator", text="x", channel=channel)  # fmt: skip
        files = home.groups_dir / "fam" / "files"
        files.mkdir(exist_ok=True)
        (files / "a.pdf").write_bytes(b"%PDF-1.4 a")
        copied = copy_to_outbox(home.groups_dir, home.state_dir, "fam", "files/a.pdf",
                                message_id=message.id, seq=0, limit=1024)  # fmt: skip
        queue.add_file_reply(message.id, file_line(copied), copied)
        queue.complete(message.id, ["after the file"], first_seq=1)
        assert ChatStore(queue).claim_send(message.id, 0, account)
        return message.id
    finally:
        queue.close()
