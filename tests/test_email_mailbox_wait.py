"""The email adapter's wait for new mail: an EXISTS announced in an earlier command's
answer counts as news, so a mail that came during the last search is not left until the
IDLE's timeout."""

from __future__ import annotations

import ssl
from typing import Any

from orchestrator.channels.email.mailbox import Mailbox


class _Imap:
    def __init__(self, stored: dict[str, list[bytes]]) -> None:
        self.untagged_responses = stored


class _Client:
    """What Mailbox.wait calls of an IMAPClient, recorded."""

    def __init__(self, stored: dict[str, list[bytes]], idle_says: list[Any]) -> None:
        self._imap = _Imap(stored)
        self.idle_says = idle_says
        self.calls: list[str] = []

    def noop(self) -> tuple[bytes, list[Any]]:
        self.calls.append("noop")
        return b"NOOP completed", []

    def idle(self) -> None:
        self.calls.append("idle")

    def idle_check(self, timeout: float) -> list[Any]:
        self.calls.append(f"idle_check {timeout:g}")
        return self.idle_says

    def idle_done(self) -> None:
        self.calls.append("idle_done")


def _mailbox(client: _Client) -> Mailbox:
    box = Mailbox(None, "bot", "pw", "INBOX", ssl.create_default_context())
    box.client = client  # type: ignore[assignment]
    return box


def test_an_exists_in_an_earlier_answer_is_news_without_an_idle() -> None:
    stored = {"EXISTS": [b"4"], "FLAGS": [b"(\\Seen)"]}
    client = _Client(stored, [])
    assert _mailbox(client).wait(300) is True
    assert client.calls == ["noop"]
    assert stored == {"FLAGS": [b"(\\Seen)"]}  # told once: the next wait idles


def test_with_nothing_told_before_the_wait_idles_until_the_server_speaks() -> None:
    client = _Client({}, [(5, b"EXISTS")])
    assert _mailbox(client).wait(300) is True
    assert client.calls == ["noop", "idle", "idle_check 300", "idle_done"]
    quiet = _Client({"EXISTS": []}, [])
    assert _mailbox(quiet).wait(7) is False
    assert quiet.calls == ["noop", "idle", "idle_check 7", "idle_done"]
