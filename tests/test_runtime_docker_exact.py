"""Exact behaviour of the Docker backend (runtime/docker.py) on a fake engine client:
what each call asks of the engine, how containers are read back, the log and event
streams with their re-establishing, running a container to its end, memory from the
cgroups or the engine, and the engine's facts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from docker.errors import APIError, NotFound
from docker.types import Mount

from orchestrator.errors import EngineError
from orchestrator.runtime import docker as docker_backend
from orchestrator.runtime.base import BindMount, ContainerInfo, ContainerSpec
from orchestrator.runtime.docker import DockerBackend, _info, _parse_time, cgroup_memory

T1 = "2024-01-02T03:04:05.123456789Z"
T1_SECONDS = 1704164645.123456


# times


def test_a_time_of_the_engine_is_read_to_the_microsecond() -> None:
    assert _parse_time(T1) == T1_SECONDS
    assert _parse_time("2024-01-02T03:04:05Z") == 1704164645.0
    assert _parse_time("2024-01-02T03:04:05.5Z") == 1704164645.5


@pytest.mark.parametrize("value", [None, "", "0001-01-01T00:00:00Z", "not a time", "2024-13-01"])
def test_no_time_or_the_zero_time_or_garbage_is_none(value: str | None) -> None:
    assert _parse_time(value) is None


# a container as the engine reports it


class Container:
    def __init__(self, attrs: dict[str, Any], name: str | None = "c", id: str | None = "i"):
        self.attrs = attrs
        self.name = name
        self.id = id
        self.log_calls: list[dict[str, Any]] = []
        self.log_streams: list[Any] = []
        self.wait_calls: list[dict[str, Any]] = []
        self.status: Any = {"StatusCode": 0}
        self.output: Any = b""

    def logs(self, **kwargs: Any) -> Any:
        self.log_calls.append(kwargs)
        if "stdout" in kwargs:
            return self.output
        stream = self.log_streams.pop(0)
        return iter_or_raise(stream)

    def wait(self, **kwargs: Any) -> Any:
        self.wait_calls.append(kwargs)
        if isinstance(self.status, Exception):
            raise self.status
        return self.status


def iter_or_raise(items: list[Any]) -> Iterator[bytes]:
    for item in items:
        if isinstance(item, Exception):
            raise item
        yield item


def running(name: str = "p.fam", started: str = T1, **extra: Any) -> Container:
    attrs = {
        "Name": "/" + name,
        "State": {"Status": "running", "Running": True, "StartedAt": started},
        "Config": {"Labels": {"a": "1"}, "Image": "img:1"},
        "Mounts": [{"Source": "/h/x"}, {"Destination": "/y"}],
        **extra,
    }
    return Container(attrs, name=name, id="id-" + name)


def test_a_container_is_read_from_its_attributes() -> None:
    assert _info(running()) == ContainerInfo(
        name="p.fam",
        id="id-p.fam",
        state="running",
        labels={"a": "1"},
        started_at=T1_SECONDS,
        image="img:1",
        mounts=("/h/x", ""),
    )


def test_a_container_with_no_attributes_reads_as_unknown() -> None:
    assert _info(Container({}, name="named", id=None)) == ContainerInfo(
        name="named", id="", state="unknown", labels={}, started_at=None, image="", mounts=()
    )
    assert _info(Container({"Config": {"Labels": None}, "Mounts": None}, name=None)).name == ""


def test_a_stopped_container_has_no_start_time() -> None:
    c = running()
    c.attrs["State"] = {"Status": "exited", "Running": False, "StartedAt": T1}
    info = _info(c)
    assert (info.state, info.started_at) == ("exited", None)


# the fake engine client


class Api:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def start(self, name: str) -> None:
        self.engine.record("start", name)

    def stop(self, name: str, timeout: int) -> None:
        self.engine.record("stop", name, timeout=timeout)
        if name not in self.engine.known:
            raise NotFound("no such container")

    def remove_container(self, name: str, force: bool, v: bool) -> None:
        self.engine.record("remove", name, force=force, v=v)
        if name not in self.engine.known:
            raise NotFound("no such container")

    def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.engine.record("containers", all=all, filters=filters)
        return [{"Id": i} for i in self.engine.listed]

    def stats(self, name: str, stream: bool, one_shot: bool) -> Any:
        self.engine.record("stats", name, stream=stream, one_shot=one_shot)
        if name not in self.engine.stats:
            raise NotFound("no such container")
        return self.engine.stats[name]


class Containers:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get(self, name: str) -> Container:
        self.engine.record("get", name)
        found = self.engine.known.get(name)
        if isinstance(found, list):  # a sequence of answers, one per get
            found = found.pop(0) if len(found) > 1 else found[0]
        if found is None:
            raise NotFound("no such container")
        return found

    def create(self, image: str, **kwargs: Any) -> Container:
        self.engine.record("create", image, **kwargs)
        container = running(kwargs["name"])
        self.engine.known[kwargs["name"]] = self.engine.made or container
        return container


class Engine:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()
        self.known: dict[str, Any] = {}
        self.listed: list[str] = []
        self.stats: dict[str, Any] = {}
        self.streams: list[Any] = []
        self.made: Container | None = None
        self.api = Api(self)
        self.containers = Containers(self)
        self.info_answer: dict[str, Any] = {}
        self.version_answer: dict[str, Any] = {}

    def record(self, *call: Any, **kwargs: Any) -> None:
        with self.lock:
            self.calls.append((*call, kwargs) if kwargs else call)

    def events(self, decode: bool, filters: dict[str, Any], since: int) -> Iterator[Any]:
        self.record("events", decode=decode, filters=filters, since=since)
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        return iter_or_raise(stream)

    def info(self) -> dict[str, Any]:
        return self.info_answer

    def version(self) -> dict[str, Any]:
        return self.version_answer


@pytest.fixture
def engine() -> Engine:
    return Engine()


@pytest.fixture
def backend(engine: Engine) -> DockerBackend:
    return DockerBackend(engine)  # type: ignore[arg-type]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The module's clock: a fixed now, and sleeps recorded instead of slept."""
    fake = SimpleNamespace(now=5000.7, slept=[])
    monkeypatch.setattr(
        docker_backend,
        "time",
        SimpleNamespace(time=lambda: fake.now, sleep=fake.slept.append),
    )
    return fake


def spec(**changes: Any) -> ContainerSpec:
    values: dict[str, Any] = {
        "name": "p.fam",
        "image": "img:1",
        "command": ("python", "-m", "runner"),
        "user": "1000:1000",
        "labels": {"l": "v"},
        "mounts": (BindMount("/h/mem", "/memory", False), BindMount("/h/ro", "/ro", True)),
        "environment": {"E": "1"},
        "tmpfs": {"/tmp": "size=1m"},
        "working_dir": "/work",
        "hostname": "fam",
        "network_mode": "none",
        "memory_bytes": 512,
        "nano_cpus": 2000,
        "pids_limit": 64,
        "read_only_rootfs": False,
        "init": False,
        "cap_drop": ("ALL", "NET_RAW"),
        "security_opt": ("no-new-privileges", "x"),
    }
    values.update(changes)
    return ContainerSpec(**values)


# create, start, stop, remove, inspect


def test_create_asks_the_engine_for_exactly_the_spec(
    engine: Engine, backend: DockerBackend
) -> None:
    info = backend.create(spec())
    assert engine.calls == [
        (
            "create",
            "img:1",
            {
                "name": "p.fam",
                "command": ["python", "-m", "runner"],
                "user": "1000:1000",
                "labels": {"l": "v"},
                "mounts": [
                    Mount(target="/memory", source="/h/mem", type="bind", read_only=False),
                    Mount(target="/ro", source="/h/ro", type="bind", read_only=True),
                ],
                "environment": {"E": "1"},
                "tmpfs": {"/tmp": "size=1m"},
                "working_dir": "/work",
                "hostname": "fam",
                "network_mode": "none",
                "mem_limit": 512,
                "memswap_limit": 512,
                "nano_cpus": 2000,
                "pids_limit": 64,
                "read_only": False,
                "init": False,
                "cap_drop": ["ALL", "NET_RAW"],
                "security_opt": ["no-new-privileges", "x"],
                "ipc_mode": "private",
                "detach": True,
            },
        )
    ]
    assert info.name == "p.fam" and info.running


def test_a_refused_create_is_an_engine_error_naming_it(
    engine: Engine, backend: DockerBackend
) -> None:
    def refuse(image: str, **kwargs: Any) -> Any:
        raise APIError("x", response=SimpleNamespace(status_code=409), explanation="in use")  # type: ignore[arg-type]

    engine.containers.create = refuse  # type: ignore[method-assign]
    with pytest.raises(EngineError) as caught:
        backend.create(spec())
    assert caught.value.message == "engine refused create p.fam: in use (HTTP 409)"


def test_start_stop_and_remove_name_the_container(engine: Engine, backend: DockerBackend) -> None:
    engine.known["p.fam"] = running()
    backend.start("p.fam")
    backend.stop("p.fam")
    backend.stop("p.fam", timeout=3)
    backend.remove("p.fam")
    assert engine.calls == [
        ("start", "p.fam"),
        ("stop", "p.fam", {"timeout": 10}),
        ("stop", "p.fam", {"timeout": 3}),
        ("remove", "p.fam", {"force": True, "v": True}),
    ]


def test_stopping_or_removing_a_missing_container_is_no_error(
    engine: Engine, backend: DockerBackend
) -> None:
    backend.stop("gone")
    backend.remove("gone")
    assert [c[0] for c in engine.calls] == ["stop", "remove"]


def test_a_refused_call_names_what_was_asked(engine: Engine, backend: DockerBackend) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise APIError("x", response=SimpleNamespace(status_code=409), explanation="no")  # type: ignore[arg-type]

    for method, call, what in (
        ("start", lambda: backend.start("p.fam"), "start p.fam"),
        ("stop", lambda: backend.stop("p.fam"), "stop p.fam"),
        ("remove_container", lambda: backend.remove("p.fam"), "remove p.fam"),
        ("containers", lambda: backend.list({}), "list containers"),
        ("stats", lambda: backend.memory_usage("p.fam"), "stats p.fam"),
    ):
        setattr(engine.api, method, refuse)
        with pytest.raises(EngineError) as caught:
            call()
        assert caught.value.message == f"engine refused {what}: no (HTTP 409)"
    engine.containers.get = refuse  # type: ignore[method-assign]
    with pytest.raises(EngineError) as caught:
        backend.inspect("p.fam")
    assert caught.value.message == "engine refused inspect p.fam: no (HTTP 409)"


def test_inspect_reads_the_container_or_none(engine: Engine, backend: DockerBackend) -> None:
    engine.known["p.fam"] = running()
    info = backend.inspect("p.fam")
    assert info is not None and info.name == "p.fam" and info.started_at == T1_SECONDS
    assert backend.inspect("gone") is None


# list


def test_list_filters_by_labels_and_inspects_each(engine: Engine, backend: DockerBackend) -> None:
    engine.known = {"a": running("a"), "b": running("b")}
    engine.listed = ["a", "b"]
    got = backend.list({"k": "v", "any": None})
    assert [c.name for c in got] == ["a", "b"]
    assert engine.calls[0] == ("containers", {"all": True, "filters": {"label": ["k=v", "any"]}})
    assert sorted(engine.calls[1:]) == [("get", "a"), ("get", "b")]


def test_a_container_gone_before_its_inspect_is_left_out(
    engine: Engine, backend: DockerBackend
) -> None:
    engine.known = {"a": running("a"), "c": running("c")}
    engine.listed = ["a", "gone", "c"]
    assert [c.name for c in backend.list({})] == ["a", "c"]
    engine.listed = ["gone"]
    assert backend.list({}) == []


class Pools:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def __call__(self, size: int) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        self.sizes.append(size)
        return ThreadPoolExecutor(size)


def test_inspects_run_in_a_pool_of_at_most_eight(
    engine: Engine, backend: DockerBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools = Pools()
    monkeypatch.setattr(docker_backend, "ThreadPoolExecutor", pools)
    names = [f"c{i}" for i in range(12)]
    engine.known = {n: running(n) for n in names}
    for count in (1, 2, 8, 9, 12):
        engine.listed = names[:count]
        assert [c.name for c in backend.list({})] == names[:count]
    assert pools.sizes == [2, 8, 8, 8]  # one container is inspected without a pool


# logs


def stamped(*lines: tuple[str, str]) -> bytes:
    return "".join(f"{stamp} {text}\n" for stamp, text in lines).encode()


S = [f"2024-01-02T03:04:0{i}.000000000Z" for i in range(10)]


def test_logs_are_read_whole_with_their_stamps_cut(engine: Engine, backend: DockerBackend) -> None:
    c = running()
    c.log_streams = [[stamped((S[1], "one"), (S[2], "two words")), b"no-stamp-here three\n"]]
    engine.known["p.fam"] = c
    assert list(backend.logs("p.fam")) == ["one", "two words", "three"]
    assert c.log_calls == [{"stream": True, "follow": False, "timestamps": True, "tail": "all"}]


def test_logs_take_the_tail_asked_and_mend_bad_bytes(
    engine: Engine, backend: DockerBackend
) -> None:
    c = running()
    c.log_streams = [[S[1].encode() + b" caf\xe9\n"]]
    engine.known["p.fam"] = c
    assert list(backend.logs("p.fam", tail=5)) == ["caf\ufffd"]
    assert c.log_calls[0]["tail"] == 5


def test_logs_of_no_container_are_empty(engine: Engine, backend: DockerBackend) -> None:
    assert list(backend.logs("gone", follow=True)) == []


def test_followed_logs_are_re_established_from_the_last_line_seen(
    engine: Engine,
    backend: DockerBackend,
    clock: SimpleNamespace,
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = running()
    c.log_streams = [
        [stamped((S[1], "a"), (S[2], "b")), requests.ConnectionError("reset")],
        [stamped((S[2], "b"), (S[3], "c"))],  # the engine sends the last second again
        [stamped((S[3], "c"), (S[4], "d"))],
    ]
    stopped = Container({"State": {"Status": "exited"}}, name="p.fam")
    engine.known["p.fam"] = [c, c, c, c, c, stopped]
    with caplog.at_level(logging.WARNING, logger="orchestrator.runtime.docker"):
        got = list(backend.logs("p.fam", follow=True, tail=2))
    assert got == ["a", "b", "c", "d"]
    since = [call.get("since") for call in c.log_calls]
    assert since == [None, _parse_time(S[2]), _parse_time(S[3])]
    assert c.log_calls[0] == {"stream": True, "follow": True, "timestamps": True, "tail": 2}
    assert "tail" not in c.log_calls[1] and "tail" not in c.log_calls[2]
    assert clock.slept == [1.0, 1.0]
    assert caplog.messages == ["log stream of p.fam broke (reset); re-establishing"]


def test_followed_logs_without_stamps_are_taken_again_without_since(
    engine: Engine, backend: DockerBackend, clock: SimpleNamespace
) -> None:
    c = running()
    c.log_streams = [[b"x one\n"], [b"x two\n"]]
    engine.known["p.fam"] = [c, c, c, None]
    assert list(backend.logs("p.fam", follow=True)) == ["one", "two"]
    assert c.log_calls[1] == {"stream": True, "follow": True, "timestamps": True}


def test_followed_logs_end_when_the_container_is_gone(
    engine: Engine, backend: DockerBackend, clock: SimpleNamespace
) -> None:
    c = running()
    c.log_streams = [[stamped((S[1], "a"))]]
    engine.known["p.fam"] = [c, None]
    assert list(backend.logs("p.fam", follow=True)) == ["a"]
    assert clock.slept == []


def test_a_log_stream_refused_is_raised(engine: Engine, backend: DockerBackend) -> None:
    c = running()
    c.log_streams = [[ValueError("bad")]]
    engine.known["p.fam"] = c
    with pytest.raises(ValueError, match="bad"):
        list(backend.logs("p.fam", follow=True))


# events


def event(action: str, name: str, nano: int = 0, time: int = 0, **attrs: str) -> dict[str, Any]:
    out: dict[str, Any] = {"Action": action, "Actor": {"Attributes": {"name": name, **attrs}}}
    if nano:
        out["timeNano"] = nano
    if time:
        out["time"] = time
    return out


def test_events_are_read_with_their_filters_since_now(
    engine: Engine, backend: DockerBackend, clock: SimpleNamespace
) -> None:
    engine.streams = [
        [
            event("start", "a", nano=6000_500_000_000, **{"org.x": "1", "other": "2"}),
            {"status": "die", "time": 6001},
            {},
        ]
    ]
    stream = backend.events({"org.p": "p", "k": "v"})
    got = [next(stream) for _ in range(4)]
    assert engine.calls == [
        (
            "events",
            {
                "decode": True,
                "filters": {"type": "container", "label": ["org.p=p", "k=v"]},
                "since": 5000,
            },
        )
    ]
    assert got[0].action == "start" and got[0].name == "a"
    assert got[0].labels == {"org.x": "1"} and got[0].time == 6000.5
    assert (got[1].action, got[1].name, got[1].labels, got[1].time) == ("die", None, {}, 6001.0)
    assert (got[2].action, got[2].name, got[2].time) == ("", None, 0.0)
    assert (got[3].action, got[3].name, got[3].labels, got[3].time) == (
        "resync",
        None,
        {},
        5000.7,
    )


def test_events_resume_from_the_latest_seen_after_a_break(
    engine: Engine,
    backend: DockerBackend,
    clock: SimpleNamespace,
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine.streams = [
        [event("start", "a", time=6000), event("x", "a", time=5500), ConnectionResetError("gone")],
        requests.ConnectionError("engine away"),
        [],
    ]
    stream = backend.events({})
    with caplog.at_level(logging.WARNING, logger="orchestrator.runtime.docker"):
        got = [next(stream).action for _ in range(5)]
    assert got == ["start", "x", "resync", "resync", "resync"]
    assert [c[1]["since"] for c in engine.calls] == [5000, 6000, 6000]
    assert clock.slept == [1.0, 1.0]
    assert caplog.messages == [
        "event stream broke (gone); re-establishing",
        "event stream broke (engine away); re-establishing",
    ]


def test_an_event_stream_refused_is_raised(
    engine: Engine, backend: DockerBackend, clock: SimpleNamespace
) -> None:
    engine.streams = [ValueError("bad filter")]
    with pytest.raises(ValueError, match="bad filter"):
        next(backend.events({}))


# run to its end


def test_run_once_runs_waits_reads_stdout_and_removes(
    engine: Engine, backend: DockerBackend
) -> None:
    made = running()
    made.status = {"StatusCode": 3}
    made.output = "caf\xe9 ok".encode("latin-1")
    engine.made = made
    assert backend.run_once(spec(), 42) == (3, "caf\ufffd ok")
    assert made.wait_calls == [{"timeout": 42}]
    assert made.log_calls == [{"stdout": True, "stderr": False}]
    assert [c[0] for c in engine.calls] == ["create", "start", "get", "remove"]
    assert engine.calls[-1] == ("remove", "p.fam", {"force": True, "v": True})


def test_run_once_without_a_status_or_text_output(engine: Engine, backend: DockerBackend) -> None:
    made = running()
    made.status = {}
    made.output = "not bytes"
    engine.made = made
    assert backend.run_once(spec(), 1) == (-1, "")


def test_run_once_of_a_container_that_vanished(engine: Engine, backend: DockerBackend) -> None:
    engine.known["p.fam"] = None
    engine.containers.create = lambda image, **kw: engine.record("create") or running()  # type: ignore[method-assign]
    with pytest.raises(EngineError) as caught:
        backend.run_once(spec(), 1)
    assert caught.value.message == "p.fam vanished before it ended"
    assert engine.calls[-1] == ("remove", "p.fam", {"force": True, "v": True})


def test_run_once_that_does_not_end_in_time(engine: Engine, backend: DockerBackend) -> None:
    made = running()
    made.status = requests.ReadTimeout("read timed out")
    engine.made = made
    with pytest.raises(EngineError) as caught:
        backend.run_once(spec(), 89.6)
    assert caught.value.message == "p.fam did not end within 90 s"
    assert caught.value.__suppress_context__
    assert engine.calls[-1][0] == "remove"


# memory


def test_memory_usage_asks_the_engine_once(engine: Engine, backend: DockerBackend) -> None:
    engine.stats = {"a": {"memory_stats": {"usage": 2048.0}}, "b": {"memory_stats": {}}, "c": {}}
    assert backend.memory_usage("a") == 2048
    assert backend.memory_usage("b") is None
    assert backend.memory_usage("c") is None
    assert backend.memory_usage("gone") is None
    assert engine.calls[0] == ("stats", "a", {"stream": False, "one_shot": True})


@pytest.fixture
def cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(
        docker_backend,
        "_CGROUP_DIRS",
        (
            (str(tmp_path / "v1" / "{id}"), "memory.usage_in_bytes", "total_inactive_file"),
            (str(tmp_path / "v2" / "{id}"), "memory.current", "inactive_file"),
        ),
    )
    return tmp_path


def cgroup(root: Path, kind: str, cid: str, usage: str, stat: str) -> None:
    folder = root / kind / cid
    folder.mkdir(parents=True)
    name = "memory.usage_in_bytes" if kind == "v1" else "memory.current"
    (folder / name).write_text(usage)
    (folder / "memory.stat").write_text(stat)


def test_memory_from_a_cgroup_is_usage_less_inactive_cache(cgroups: Path) -> None:
    cgroup(cgroups, "v1", "a", "1000\n", "cache 5\ntotal_inactive_file 300\ninactive_file 1\n")
    cgroup(cgroups, "v2", "b", "1000", "inactive_file 200\ninactive_file 1\nx 9\n")
    cgroup(cgroups, "v2", "c", "1000", "anon 5\n")
    cgroup(cgroups, "v2", "d", "100", "inactive_file 500\n")
    assert cgroup_memory("a") == 700
    assert cgroup_memory("b") == 800
    assert cgroup_memory("c") == 1000
    assert cgroup_memory("d") == 0


def test_an_unreadable_cgroup_is_passed_over(cgroups: Path) -> None:
    cgroup(cgroups, "v1", "a", "garbage", "")
    cgroup(cgroups, "v2", "a", "50", "inactive_file 10\n")
    assert cgroup_memory("a") == 40
    cgroup(cgroups, "v1", "b", "100", "total_inactive_file x\n")
    assert cgroup_memory("b") is None
    (cgroups / "v1" / "e").mkdir()
    (cgroups / "v1" / "e" / "memory.usage_in_bytes").write_text("100")
    assert cgroup_memory("e") is None  # no memory.stat
    assert cgroup_memory("missing") is None
    assert cgroup_memory("") is None


def test_memory_of_many_comes_from_the_cgroups_then_the_engine(
    cgroups: Path, engine: Engine, backend: DockerBackend
) -> None:
    cgroup(cgroups, "v2", "id-a", "100", "inactive_file 10\n")
    engine.stats = {"b": {"memory_stats": {"usage": 7}}}
    infos = [ContainerInfo("a", "id-a", "running"), ContainerInfo("b", "id-b", "running")]
    assert backend.memory_usages(infos, time.monotonic() + 30) == {"a": 90, "b": 7}
    assert [c[:2] for c in engine.calls] == [("stats", "b")]
    engine.calls.clear()
    assert backend.memory_usages(infos[:1], time.monotonic() + 30) == {"a": 90}
    assert engine.calls == []


# the engine's facts


def test_the_engine_facts_say_rootless_podman_and_versions(
    engine: Engine, backend: DockerBackend
) -> None:
    engine.info_answer = {"SecurityOptions": ["name=seccomp", "name=rootless"]}
    engine.version_answer = {
        "Components": [{"Name": "Engine"}, {"Name": "Podman Engine"}],
        "Version": "5.0",
        "ApiVersion": "1.41",
    }
    assert backend.engine_facts() == {
        "rootless": True,
        "podman": True,
        "version": "5.0",
        "api_version": "1.41",
    }
    engine.info_answer = {"SecurityOptions": None, "OperatingSystem": "Podman on Fedora"}
    engine.version_answer = {"Components": None}
    assert backend.engine_facts() == {
        "rootless": False,
        "podman": True,
        "version": None,
        "api_version": None,
    }
    engine.info_answer = {"SecurityOptions": ["name=seccomp"], "OperatingSystem": "Ubuntu"}
    engine.version_answer = {"Components": [{"Name": "Engine"}, {}]}
    facts = backend.engine_facts()
    assert (facts["rootless"], facts["podman"]) == (False, False)
    engine.info_answer = {}
    engine.version_answer = {}
    facts = backend.engine_facts()
    assert (facts["rootless"], facts["podman"]) == (False, False)


def test_only_six_digits_of_the_fraction_are_read_and_the_time_is_utc() -> None:
    # what follows the microseconds is cut, an offset with it: the engine's times are UTC
    assert _parse_time("2024-01-02T03:04:05.123456+01:00") == T1_SECONDS
    assert _parse_time("2024-01-02T03:04:05.12X") is None  # only a trailing Z is taken off


def test_the_name_is_the_engines_without_its_slash() -> None:
    assert _info(Container({"Name": "/Xfam"}, name="other")).name == "Xfam"
    assert _info(Container({}, name="/fallback")).name == "fallback"


def test_run_once_starts_the_container_it_made(engine: Engine, backend: DockerBackend) -> None:
    engine.made = running()
    backend.run_once(spec(), 1)
    assert engine.calls[1] == ("start", "p.fam")
    assert engine.calls[2] == ("get", "p.fam")


def test_run_once_whose_output_is_refused_names_it_and_removes(
    engine: Engine, backend: DockerBackend
) -> None:
    made = running()

    def refuse(**kwargs: Any) -> Any:
        raise APIError("x", response=SimpleNamespace(status_code=409), explanation="gone")  # type: ignore[arg-type]

    made.logs = refuse  # type: ignore[method-assign]
    engine.made = made
    with pytest.raises(EngineError) as caught:
        backend.run_once(spec(), 1)
    assert caught.value.message == "engine refused logs p.fam: gone (HTTP 409)"
    assert engine.calls[-1][0] == "remove"


def test_refused_engine_facts_name_what_was_asked(engine: Engine, backend: DockerBackend) -> None:
    def refuse() -> Any:
        raise APIError("x", response=SimpleNamespace(status_code=403), explanation="no")  # type: ignore[arg-type]

    engine.version = refuse  # type: ignore[method-assign]
    with pytest.raises(EngineError) as caught:
        backend.engine_facts()
    assert caught.value.message == "engine refused engine version: no (HTTP 403)"
    engine.info = refuse  # type: ignore[method-assign]
    with pytest.raises(EngineError) as caught:
        backend.engine_facts()
    assert caught.value.message == "engine refused engine info: no (HTTP 403)"


def test_a_memory_stat_line_that_is_not_a_key_and_a_number_is_unreadable(cgroups: Path) -> None:
    cgroup(cgroups, "v2", "a", "1000", "inactive_file 5 6\n")
    assert cgroup_memory("a") is None
