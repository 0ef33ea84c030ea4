"""Images and files through the relay, with a real runner and a fake provider: an image
a message came with is shown to a vision model by reference (re-encoded, no EXIF, no
base64 in the frames or the transcript), named by a line for a model without vision;
send_file copies the file into the host's outbox once, and a hostile request (a link, a
path outside files/, a FIFO, a file over the cap) is refused."""

from __future__ import annotations

import base64
import io
import os
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import load_config
from orchestrator.daemon.core import Inbound
from orchestrator.media.inbox import IMAGE, StoredFile
from orchestrator.relay.images import with_images
from orchestrator.relay.providers.anthropic import to_anthropic
from orchestrator.relay.providers.base import ModelCall
from orchestrator.relay.providers.openai import to_openai
from orchestrator.relay.turn import TurnRelay
from orchestrator.store.messages import DONE, new_message
from tests.fakeproviders import FakeProvider, Text, ToolUse, _anthropic_blocks, _openai_content
from tests.mediafiles import jpeg_with_exif, png_declaring
from tests.relayrig import provider, served, setup  # noqa: F401  (fixtures)

PHOTO = "20261130-101500-3fa2c1d9.jpg"


def _vision(setup: dict[str, Any], on: bool) -> None:
    home = setup["home"]
    path = home.config_file
    text = path.read_text().replace("    models: [m-1, m-2]\n", "    models: [m-1, m-2]\n")
    text += f"    model_info:\n      m-1:\n        vision: {'true' if on else 'false'}\n"
    path.write_text(text)
    setup["daemon"].apply_config(load_config(home))


def _store_photo(setup: dict[str, Any], data: bytes, name: str = PHOTO) -> StoredFile:
    inbox = setup["home"].groups_dir / "fam" / "files" / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / name).write_bytes(data)
    return StoredFile(name=name, mime="image/jpeg", size=len(data), kind=IMAGE, label="photo")


def _ask(setup: dict[str, Any], text: str, media: tuple[StoredFile, ...]) -> Any:
    daemon = setup["daemon"]
    message = daemon.accept(Inbound("fam", text, "c", "alice", "cli", media=media))
    done = daemon.wait(message.id, 60)
    assert done is not None and done.state == DONE, done
    return done


def test_an_image_goes_to_a_vision_model_by_reference(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    from PIL import Image

    _vision(served, True)
    stored = _store_photo(served, jpeg_with_exif(3000, 2000))
    provider.script.append(Text("a red picture with blue stripes"))
    done = _ask(served, "what is in this photo?", (stored,))
    assert done.replies == ("a red picture with blue stripes",)
    user = [m for m in provider.seen[-1].body["messages"] if m["role"] == "user"][-1]
    assert _openai_content(user) is None  # the API's shape
    text, image = user["content"]
    assert text["type"] == "text" and f"files/inbox/{PHOTO}" in text["text"]
    url = image["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    shown = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert shown.format == "JPEG" and max(shown.size) == 1568 and not shown.getexif()
    # the runner's transcript names the file; no image bytes are in it
    sessions = served["home"].groups_dir / "fam" / "sessions"
    transcript = "".join(p.read_text() for p in sessions.rglob("*.jsonl"))
    assert f'"images": ["files/inbox/{PHOTO}"]' in transcript and "base64" not in transcript


def test_a_model_without_vision_gets_a_line_naming_the_image(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    _vision(served, False)
    stored = _store_photo(served, jpeg_with_exif(800, 600))
    provider.script.append(Text("I cannot see it"))
    _ask(served, "look", (stored,))
    user = [m for m in provider.seen[-1].body["messages"] if m["role"] == "user"][-1]
    assert isinstance(user["content"], str)
    assert f"[image files/inbox/{PHOTO}, " in user["content"]
    assert "m-1 does not take images]" in user["content"]


def test_a_bomb_a_link_and_too_many_images_become_lines(setup: dict[str, Any], home: Path) -> None:
    from orchestrator.media.images import ImageCache

    inbox = home / "groups" / "fam" / "files" / "inbox"
    inbox.mkdir(parents=True)
    (inbox / "bomb.png").write_bytes(png_declaring(100_000, 100_000))
    (inbox / "link.jpg").symlink_to(home / "orchestrator.yaml")
    for n in range(10):
        (inbox / f"p{n}.jpg").write_bytes(jpeg_with_exif(64, 48))
    photos = [f"files/inbox/p{n}.jpg" for n in range(10)]
    call = ModelCall(
        "system",
        [
            {"role": "user", "content": "old ones", "images": photos[:5]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "and", "images": [*photos[5:], "files/inbox/bomb.png",
                                                          "files/inbox/link.jpg"]},
        ],
    )  # fmt: skip
    shown = with_images(call, home / "groups", "fam", ImageCache(), vision=True, model="m", limit=8)
    first, _, last = shown.messages
    assert len(first["image_data"]) + len(last["image_data"]) == 8  # the newest eight
    assert (
        "p0.jpg, " in first["content"] and "not shown again (at most 8 images" in first["content"]
    )
    assert "bomb.png" in last["content"] and "decompression bomb" in last["content"]
    link_size = (inbox / "link.jpg").lstat().st_size  # its target's path: the tmp folder's
    assert f"link.jpg, {link_size} B: not shown: is a symlink" in last["content"]
    assert all("images" not in m for m in shown.messages)
    # each provider's shape, as its API takes it
    for message in to_anthropic(shown)["messages"]:
        assert _anthropic_blocks(message["content"]) is None
    anthropic_user = to_anthropic(shown)["messages"][0]["content"]
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
            "data": first["image_data"][0]["base64"]}} in anthropic_user  # fmt: skip
    for message in to_openai(shown)["messages"]:
        assert _openai_content(message) is None


def test_a_frame_carrying_image_bytes_is_refused(setup: dict[str, Any]) -> None:
    from orchestrator.relay.errors import RelayViolation
    from orchestrator.relay.ops.model import parse_call

    with pytest.raises(RelayViolation, match="by reference"):
        parse_call({"system": "", "messages": [{"role": "user", "content": "x",
                    "image_data": [{"media_type": "image/jpeg", "base64": "AAAA"}]}]})  # fmt: skip
    with pytest.raises(RelayViolation, match="paths under files/"):
        parse_call({"system": "", "messages": [{"role": "user", "content": "x",
                    "images": ["memory/index.md"]}]})  # fmt: skip


# send_file


def test_send_file_copies_the_file_once_into_the_outbox(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    files = served["home"].groups_dir / "fam" / "files"
    files.mkdir(exist_ok=True)
    (files / "report.txt").write_text("the quarterly numbers\n")
    provider.script.extend(
        [
            ToolUse("send_file", {"path": "files/report.txt", "caption": "here it is"}),
            Text("sent you the report"),
        ]
    )
    message = served["daemon"].submit("fam", "send me the report", chat="c", sender="alice",
                                      channel="cli")  # fmt: skip
    done = served["daemon"].wait(message.id, 60)
    assert done is not None and done.state == DONE
    assert done.replies == ("here it is", "sent you the report")
    (sent,) = done.files
    assert (sent.seq, sent.name, sent.mime, sent.size) == (0, "report.txt", "text/plain", 22)
    copy = Path(sent.path)
    assert copy.parent == served["home"].state_dir / "outbox" / "fam"
    assert copy.read_text() == "the quarterly numbers\n" and copy.stat().st_mode & 0o777 == 0o600
    (files / "report.txt").write_text("changed afterwards")
    assert copy.read_text() == "the quarterly numbers\n"  # what was sent stays as it was
    assert done.to_dict()["files"] == [sent.to_dict()]


def _turn(setup: dict[str, Any]) -> TurnRelay:
    daemon = setup["daemon"]
    message = daemon.queue.put(
        new_message(
            group="fam",
            session="s",
            chat="c",
            thread=None,
            sender="alice",
            trust="creator",
            text="hi",
            channel="telegram:fambot",
        )
    )
    group = setup["runtime"].store.load("fam")
    return TurnRelay(daemon.relay, message, group, time.monotonic() + 60)


def test_a_hostile_send_is_refused_and_leaves_nothing(setup: dict[str, Any], home: Path) -> None:
    files = home / "groups" / "fam" / "files"
    (files / "inbox").mkdir(parents=True)
    (files / "link.txt").symlink_to(home / "orchestrator.yaml")
    (files / "inbox").rename(files / "real")
    (files / "inbox").symlink_to(home)  # a folder on the way swapped for a link
    os.mkfifo(files / "pipe")
    with open(files / "big.bin", "wb") as big:
        big.truncate(60 * 1024**2)
    turn = _turn(setup)
    for seq, (path, why) in enumerate(
        [
            ("files/link.txt", "symlink"),
            ("files/inbox/orchestrator.yaml", "symlink"),
            ("memory/index.md", "only files under files/"),
            ("files/../orchestrator.yaml", "'..' is not allowed"),
            ("/etc/passwd", "not a relative path"),
            ("files/pipe", "FIFO"),
            ("files/big.bin", "over the 52,428,800-byte limit"),
            ("files/missing.txt", "no such file"),
        ]
    ):
        answer = turn.handle({"op": "file.send", "req": seq, "seq": seq, "path": path}, 100)
        assert answer["ok"] is False and why in answer["error"], (path, answer)
    outbox = home / "state" / "outbox" / "fam"
    assert not outbox.exists() or list(outbox.iterdir()) == []
    assert setup["daemon"].queue.replies_of(turn.message.id) == []
