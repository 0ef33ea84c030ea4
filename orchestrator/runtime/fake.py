"""An in-memory container backend for unit tests of the logic above the backend.

Never a product default: nothing selects it outside tests.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace

from orchestrator.errors import EngineError
from orchestrator.runtime.base import ContainerBackend, ContainerEvent, ContainerInfo, ContainerSpec


class FakeBackend(ContainerBackend):
    def __init__(self, facts: dict[str, object] | None = None) -> None:
        self.containers: dict[str, ContainerInfo] = {}
        self.specs: dict[str, ContainerSpec] = {}
        self.calls: list[tuple[str, str]] = []
        self.event_log: list[ContainerEvent] = []
        self._ids = itertools.count(1)
        self._facts = facts or {}

    def _event(self, action: str, info: ContainerInfo) -> None:
        self.event_log.append(ContainerEvent(action, info.name, dict(info.labels), time.time()))

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        self.calls.append(("create", spec.name))
        if spec.name in self.containers:
            raise EngineError(f"engine refused create {spec.name}: name in use (HTTP 409)")
        info = ContainerInfo(
            spec.name,
            f"id{next(self._ids)}",
            "created",
            dict(spec.labels),
            image=spec.image,
            mounts=tuple(m.source for m in spec.mounts),
        )
        self.containers[spec.name] = info
        self.specs[spec.name] = spec
        self._event("create", info)
        return info

    def start(self, name: str) -> None:
        self.calls.append(("start", name))
        info = self.containers[name]
        self.containers[name] = replace(info, state="running", started_at=time.time())
        self._event("start", info)

    def stop(self, name: str, timeout: int = 10) -> None:
        self.calls.append(("stop", name))
        if name in self.containers:
            self.containers[name] = replace(self.containers[name], state="exited", started_at=None)
            self._event("die", self.containers[name])

    def kill(self, name: str) -> None:
        """Test helper: the container dies as with `docker kill`."""
        self.containers[name] = replace(self.containers[name], state="exited", started_at=None)

    def remove(self, name: str) -> None:
        self.calls.append(("remove", name))
        info = self.containers.pop(name, None)
        self.specs.pop(name, None)
        if info is not None:
            self._event("destroy", info)

    def inspect(self, name: str) -> ContainerInfo | None:
        return self.containers.get(name)

    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        return [
            c
            for c in self.containers.values()
            if all(
                (k in c.labels) if v is None else c.labels.get(k) == v for k, v in labels.items()
            )
        ]

    def logs(self, name: str, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        yield from ()

    def events(self, labels: Mapping[str, str]) -> Iterator[ContainerEvent]:
        yield from (
            e for e in self.event_log if all(e.labels.get(k) == v for k, v in labels.items())
        )

    def memory_usage(self, name: str) -> int | None:
        info = self.containers.get(name)
        return 1024 * 1024 if info is not None and info.running else None

    def engine_facts(self) -> dict[str, object]:
        return dict(self._facts)
