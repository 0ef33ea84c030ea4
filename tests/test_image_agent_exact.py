"""Exact behaviour of the agent and daemon images' build (image/agent.py) without an
engine: a fake engine client stands for the engine (inspects, pulls, builds, tags,
removals), the wheel downloads are recorded or run as small real commands, and the
checkout is a temp folder."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from docker.errors import APIError, DockerException, ImageNotFound

from orchestrator.image import agent

SHA = "sha256:" + "1" * 64


class Engine:
    """A fake engine client: images by reference (id and attributes), pulls and builds
    as told, tags and removals recorded."""

    def __init__(self, present: dict[str, str] | None = None) -> None:
        self.present: dict[str, str] = dict(present or {})
        self.attrs: dict[str, dict[str, Any]] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.pull_fault: BaseException | None = None
        self.pulled: list[tuple[str, str, Any]] = []
        self.tagged: list[tuple[str, str, str]] = []
        self.removed: list[str] = []
        self.refuse: dict[str, BaseException] = {}
        self.listed: list[tuple[str, Any]] = []
        self.built: list[dict[str, Any]] = []
        self.chunks: list[dict[str, Any]] | BaseException = []
        self.architecture: str | None = "x86_64"
        self.images = SimpleNamespace(get=self.get, list=self.list, remove=self.remove)
        self.api = SimpleNamespace(timeout=60, pull=self.pull, tag=self.tag, build=self.build)

    def info(self) -> dict[str, Any]:
        return {} if self.architecture is None else {"Architecture": self.architecture}

    def get(self, ref: str) -> Any:
        if ref not in self.present:
            raise ImageNotFound(ref)
        return SimpleNamespace(id=self.present[ref], attrs=self.attrs.get(ref, {"Id": ref}))

    def pull(self, repository: str, tag: str) -> None:
        self.pulled.append((repository, tag, self.api.timeout))
        if self.pull_fault is not None:
            raise self.pull_fault
        self.present[f"{repository}:{tag}"] = "sha256:pulled"

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.tagged.append((image_id, repository, tag))

    def list(self, name: str, filters: Any = None) -> list[Any]:
        self.listed.append((name, filters))
        ids: dict[str, list[str]] = {}
        for tag, image_id in self.present.items():
            if tag.partition(":")[0] == name:
                ids.setdefault(image_id, []).append(tag)
        return [SimpleNamespace(tags=tags) for tags in ids.values()]

    def remove(self, ref: str) -> None:
        if ref in self.refuse:
            raise self.refuse[ref]
        self.removed.append(ref)

    def build(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.built.append(kwargs)
        if isinstance(self.chunks, BaseException):
            raise self.chunks
        return iter(self.chunks)


# pulls and the base


def test_a_pull_asks_for_the_tag_with_a_short_timeout() -> None:
    engine = Engine()
    assert agent._try_pull(engine, "python:3.11-slim") is None  # type: ignore[arg-type]
    assert agent._try_pull(engine, "busybox") is None  # type: ignore[arg-type]
    assert engine.pulled == [("python", "3.11-slim", 20), ("busybox", "latest", 20)]
    assert engine.api.timeout == 60


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (APIError("500", explanation="registry down\nmore"), "registry down"),
        (DockerException("no engine"), "no engine"),
        (requests.ConnectionError("refused"), "refused"),
        (OSError(""), "OSError"),
        (TimeoutError(), "TimeoutError"),
        (APIError("500", explanation="\nsecond"), "APIError"),
        (APIError("x" * 300), "x" * 160),
    ],
)
def test_a_failed_pull_gives_its_first_line(fault: BaseException, reason: str) -> None:
    engine = Engine()
    engine.pull_fault = fault
    assert agent._try_pull(engine, "python:3") == reason  # type: ignore[arg-type]
    assert engine.api.timeout == 60
