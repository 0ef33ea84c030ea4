"""The deadline each frame of a request, a ping and a turn is sent and read with: the one
the call was given, taken from the clock once (the lengths asked for, not their seconds)."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.runtime import channel as channel_module
from orchestrator.runtime.channel import RunnerClient

NOW = 1000.0


class Frames:
    """wire's frame calls, recorded with the deadline each was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> None:
        self.calls: list[tuple[str, object]] = []
        self.answers = answers
        monkeypatch.setattr(wire, "send_frame", self.send_frame)
        monkeypatch.setattr(wire, "recv_frame", self.recv_frame)
        monkeypatch.setattr(wire, "recv_sized", self.recv_sized)

    def send_frame(self, sock: object, message: dict[str, Any], *rest: object) -> None:
        self.calls.append(("send", rest[0] if rest else "no deadline"))

    def recv_frame(self, sock: object, *rest: object) -> Any:
        self.calls.append(("recv", rest[0] if rest else "no deadline"))
        return self.answers.pop(0)

    def recv_sized(self, sock: object, deadline: object, limit: int) -> Any:
        self.calls.append(("recv", deadline))
        return self.answers.pop(0)


def test_a_request_sends_and_reads_within_the_timeout_it_was_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    frames = Frames(monkeypatch, [{"ok": True}])
    monkeypatch.setattr(wire, "time", SimpleNamespace(monotonic=lambda: NOW))
    timeouts: list[object] = []
    monkeypatch.setattr(
        wire, "connect_no_follow", lambda sock, path: timeouts.append(sock.gettimeout())
    )
    assert wire.request(tmp_path / "s", {"op": "x"}, 7.5) == {"ok": True}
    assert timeouts == [7.5]
    assert frames.calls == [("send", NOW + 7.5), ("recv", NOW + 7.5)]


class Endpoint:
    def __init__(self) -> None:
        self.sock, self.far = socket.socketpair()
        self.asked: list[float] = []
        self.released: list[object] = []

    def connect(self, timeout: float) -> socket.socket:
        self.asked.append(timeout)
        return self.sock

    def describe(self) -> str:
        return "the endpoint"

    def release(self, sock: object) -> None:
        self.released.append(sock)

    def close(self) -> None:
        self.sock.close()
        self.far.close()


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(channel_module, "time", SimpleNamespace(monotonic=lambda: NOW))
    made = Endpoint()
    yield made
    made.close()


def test_a_ping_sends_and_reads_within_its_timeout(
    monkeypatch: pytest.MonkeyPatch, endpoint: Endpoint
) -> None:
    frames = Frames(monkeypatch, [{"ok": True}])
    assert RunnerClient(endpoint).ping(timeout=2.5) is True
    assert endpoint.asked == [2.5]
    assert frames.calls == [("send", NOW + 2.5), ("recv", NOW + 2.5)]
    assert endpoint.released == [endpoint.sock]


def test_every_frame_of_a_turn_is_sent_and_read_within_the_turns_timeout(
    monkeypatch: pytest.MonkeyPatch, endpoint: Endpoint
) -> None:
    frames = Frames(monkeypatch, [({"req": 1, "op": "x"}, 20), ({"ok": True}, 11)])
    answer = RunnerClient(endpoint).turn(
        {"text": "hi"}, timeout=30.0, handle=lambda frame, size: {"req": 1, "ok": True}
    )
    assert answer == {"ok": True}
    assert endpoint.asked == [30.0]
    assert frames.calls == [
        ("send", NOW + 30.0),
        ("recv", NOW + 30.0),
        ("send", NOW + 30.0),
        ("recv", NOW + 30.0),
    ]
