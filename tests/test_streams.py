"""Event and log streams that end are re-established (stub client, no engine)."""

from __future__ import annotations

import itertools
from typing import Any

import requests

from orchestrator.runtime import docker as docker_backend
from orchestrator.runtime.docker import DockerBackend


class StubClient:
    """Stands in for docker.DockerClient.events: each call returns the next stream."""

    def __init__(self, streams: list[Any]) -> None:
        self.streams = streams
        self.since: list[int] = []

    def events(self, decode: bool, filters: dict[str, Any], since: int) -> Any:
        self.since.append(since)
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        return iter(stream)


def event(action: str, name: str, t: int) -> dict[str, Any]:
    return {
        "Action": action,
        "timeNano": t * 10**9,
        "Actor": {"Attributes": {"name": name, "org.orchestrator.group": name}},
    }


def test_event_stream_is_reestablished_with_a_resync(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(docker_backend, "RECONNECT_DELAY_SECONDS", 0)
    client = StubClient(
        [
            [event("start", "a", 2_000_000_000)],  # then the engine restarts
            requests.ConnectionError("engine away"),  # reconnect fails once
            [event("die", "a", 2_000_000_005)],
        ]
    )
    backend = DockerBackend(client)  # type: ignore[arg-type]
    got = list(itertools.islice(backend.events({"org.orchestrator.project": "p"}), 4))
    assert [(e.action, e.name) for e in got] == [
        ("start", "a"),
        ("resync", None),
        ("resync", None),
        ("die", "a"),
    ]
    assert got[0].labels == {"org.orchestrator.group": "a"}
    # after the first stream, it resumes from the last event seen: nothing is missed
    assert client.since[1:] == [2_000_000_000, 2_000_000_000]
