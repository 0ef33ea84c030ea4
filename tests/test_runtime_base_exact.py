"""Exact behaviour of the container backend interface (runtime/base.py): what a
container's labels and state say, the defaults a backend inherits, and the parallel
memory reading with its deadline; and of open_backend (runtime/__init__.py)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import orchestrator.runtime as runtime_package
from orchestrator.config import OrchestratorConfig
from orchestrator.errors import EngineError
from orchestrator.runtime import base
from orchestrator.runtime.base import (
    LABEL_CONFIG_HASH,
    LABEL_GROUP,
    LABEL_HOME,
    LABEL_SETTINGS_HASH,
    ContainerBackend,
    ContainerEvent,
    ContainerInfo,
    ContainerSpec,
)
from orchestrator.runtime.channel import UnixSocketEndpoint


class Minimal(ContainerBackend):
    """Only the abstract methods; memory_usage answers from a table, or raises."""

    def __init__(self, client: Any = None) -> None:
        self.client = client
        self.usage: dict[str, int | Exception | None] = {}
        self.asked: list[str] = []

    def create(self, spec: ContainerSpec) -> ContainerInfo:
        raise NotImplementedError

    def start(self, name: str) -> None:
        raise NotImplementedError

    def stop(self, name: str, timeout: int = 10) -> None:
        raise NotImplementedError

    def remove(self, name: str) -> None:
        raise NotImplementedError

    def inspect(self, name: str) -> ContainerInfo | None:
        raise NotImplementedError

    def list(self, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        raise NotImplementedError

    def logs(self, name: str, *, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        raise NotImplementedError

    def events(self, labels: Mapping[str, str]) -> Iterator[ContainerEvent]:
        raise NotImplementedError

    def memory_usage(self, name: str) -> int | None:
        self.asked.append(name)
        value = self.usage[name]
        if isinstance(value, Exception):
            raise value
        return value


def spec(name: str = "p.fam") -> ContainerSpec:
    return ContainerSpec(
        name=name,
        image="img:1",
        command=("run",),
        user="1:1",
        labels={},
        mounts=(),
        environment={},
        tmpfs={},
        working_dir="/w",
        hostname="h",
        network_mode="none",
        memory_bytes=1,
        nano_cpus=1,
        pids_limit=1,
    )


def info(name: str, state: str = "running", **labels: str) -> ContainerInfo:
    return ContainerInfo(name, "id-" + name, state, labels)


# what a container's labels and state say


def test_a_container_reads_its_home_group_and_hashes_from_their_labels() -> None:
    c = ContainerInfo(
        "p.fam",
        "i",
        "exited",
        {LABEL_HOME: "h1", LABEL_GROUP: "fam", LABEL_CONFIG_HASH: "c1", LABEL_SETTINGS_HASH: "s1"},
    )
    assert (c.home, c.group, c.config_hash, c.settings_hash) == ("h1", "fam", "c1", "s1")
    bare = ContainerInfo("x", "i", "running")
    assert (bare.home, bare.group, bare.config_hash, bare.settings_hash) == (None,) * 4


def test_only_the_running_state_is_running() -> None:
    assert ContainerInfo("x", "i", "running").running is True
    for state in ("created", "exited", "idle", "starting", "Running"):
        assert ContainerInfo("x", "i", state).running is False


# the defaults a backend inherits


def test_open_makes_the_backend_on_the_engine_client() -> None:
    client = object()
    backend = Minimal.open(client, OrchestratorConfig(project="p"), None)  # type: ignore[arg-type]
    assert isinstance(backend, Minimal) and backend.client is client


def test_run_once_is_refused_with_the_container_named() -> None:
    with pytest.raises(EngineError) as caught:
        Minimal().run_once(spec("p.fam-probe"), 5)
    assert caught.value.message == "this container backend cannot run p.fam-probe to its end"


def test_the_inherited_defaults_change_nothing() -> None:
    backend = Minimal()
    s = spec()
    assert backend.engine_facts() == {}
    assert backend.adapt(s) is s
    assert backend.serve(lambda: "img") is None
    assert backend.close() is None
    assert backend.listen_hosts("127.0.0.1") == ("127.0.0.1",)
    assert backend.prepare_storage(s) is None


def test_the_runner_is_reached_on_the_socket_in_the_runtime_folder(tmp_path: Path) -> None:
    endpoint = Minimal().runner_endpoint(tmp_path / "run" / "fam")
    assert endpoint == UnixSocketEndpoint(tmp_path / "run" / "fam" / "runner.sock")


# memory of many containers


def test_memory_of_no_containers_is_empty_without_a_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pool(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("no pool for no containers")

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", no_pool)
    assert Minimal().memory_usages([], 0.0) == {}


def test_memory_is_read_per_container_and_a_failure_is_unknown() -> None:
    backend = Minimal()
    backend.usage = {"a": 100, "b": ValueError("gone"), "c": None, "d": 0}
    got = backend.memory_usages([info("a"), info("b"), info("c"), info("d")], time.monotonic() + 30)
    assert got == {"a": 100, "b": None, "c": None, "d": 0}
    assert sorted(backend.asked) == ["a", "b", "c", "d"]


class Recorded(concurrent.futures.ThreadPoolExecutor):
    made: list[dict[str, Any]] = []
    shut: list[dict[str, Any]] = []

    def __init__(self, max_workers: int | None = None, **kwargs: Any) -> None:
        Recorded.made.append({"max_workers": max_workers, **kwargs})
        super().__init__(max_workers=max_workers, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        Recorded.shut.append({"wait": wait, "cancel_futures": cancel_futures})
        super().shutdown(wait=False, cancel_futures=cancel_futures)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> type[Recorded]:
    Recorded.made, Recorded.shut = [], []
    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Recorded)
    return Recorded


def test_the_pool_has_a_worker_per_container_up_to_sixteen(recorded: type[Recorded]) -> None:
    backend = Minimal()
    backend.usage = {f"c{i}": i for i in range(20)}
    backend.memory_usages([info("c0"), info("c1")], time.monotonic() + 30)
    backend.memory_usages([info(f"c{i}") for i in range(16)], time.monotonic() + 30)
    backend.memory_usages([info(f"c{i}") for i in range(20)], time.monotonic() + 30)
    assert [m["max_workers"] for m in recorded.made] == [2, 16, 16]
    # a reading still under way when the deadline comes is not waited for
    assert recorded.shut == [{"wait": False, "cancel_futures": True}] * 3


def test_the_wait_lasts_until_the_deadline_and_never_less_than_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waited: list[float] = []
    real_wait = concurrent.futures.wait

    def wait(futures: Any, timeout: float) -> Any:
        waited.append(timeout)
        return real_wait(futures, timeout=None)

    monkeypatch.setattr(concurrent.futures, "wait", wait)
    monkeypatch.setattr(base, "time", SimpleNamespace(monotonic=lambda: 100.0))
    backend = Minimal()
    backend.usage = {"a": 5}
    assert backend.memory_usages([info("a")], 103.5) == {"a": 5}
    assert backend.memory_usages([info("a")], 90.0) == {"a": 5}
    assert waited == [3.5, 0.0]


def test_a_reading_not_done_by_the_deadline_is_unknown() -> None:
    release = threading.Event()

    class Slow(Minimal):
        def memory_usage(self, name: str) -> int | None:
            if name == "slow":
                release.wait(30)
            return 7

    try:
        got = Slow().memory_usages([info("fast"), info("slow")], 0.0)
    finally:
        release.set()
    assert got["slow"] is None and got["fast"] in (7, None)


# open_backend


def test_every_backend_name_opens_its_class(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.runtime.docker import DockerBackend
    from orchestrator.runtime.swarm import SwarmBackend

    opened: list[tuple[type, Any, Any, Any]] = []

    def record(cls: type, client: Any, config: Any, home: Any) -> str:
        opened.append((cls, client, config, home))
        return "made"

    monkeypatch.setattr(DockerBackend, "open", classmethod(record))
    monkeypatch.setattr(SwarmBackend, "open", classmethod(record))
    client, home = object(), object()
    for name, cls in (("docker", DockerBackend), ("swarm", SwarmBackend)):
        config = SimpleNamespace(runtime=SimpleNamespace(backend=name))
        made = runtime_package.open_backend(config, client=client, home=home)  # type: ignore[arg-type]
        assert made == "made"
        assert opened[-1] == (cls, client, config, home)
    assert runtime_package.DEFAULT_BACKEND == "docker"


def test_without_a_client_a_connection_is_made_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestrator.runtime import engine
    from orchestrator.runtime.docker import DockerBackend

    connected: list[dict[str, Any]] = []

    def connect(**kwargs: Any) -> str:
        connected.append(kwargs)
        return "client"

    monkeypatch.setattr(engine, "connect", connect)
    monkeypatch.setattr(DockerBackend, "open", classmethod(lambda cls, c, conf, h: (c, h)))
    config = SimpleNamespace(runtime=SimpleNamespace(backend="docker"))
    assert runtime_package.open_backend(config) == ("client", None)  # type: ignore[arg-type]
    assert runtime_package.open_backend(config, timeout=4) == ("client", None)  # type: ignore[arg-type]
    assert connected == [{}, {"timeout": 4}]
