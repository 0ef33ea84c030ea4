"""Exact behaviour of the agent and daemon images' build (image/agent.py) without an
engine: a fake engine client stands for the engine (inspects, pulls, builds, tags,
removals), the wheel downloads are recorded or run as small real commands, and the
checkout is a temp folder."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from docker.errors import APIError, DockerException, ImageNotFound

import orchestrator
from orchestrator.errors import ImageBuildFailed, ImageMissing, OrchestratorError
from orchestrator.image import agent, inputs, noop
from orchestrator.image.agent import BuildResult
from orchestrator.image.inputs import InputsCache, Recorded
from orchestrator.image.recipe import base_tag, recipe_hash


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


@pytest.fixture(autouse=True)
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """call_engine's stand-in: the name of each engine call, in turn."""
    names: list[str] = []

    def call_engine(what: str, fn: Any) -> Any:
        names.append(what)
        return fn()

    monkeypatch.setattr(agent, "call_engine", call_engine)
    return names


# the checkout


@pytest.fixture()
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "checkout"
    (root / "images/agent").mkdir(parents=True)
    (root / "images/daemon").mkdir(parents=True)
    (root / "orchestrator").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "images/agent/Dockerfile").write_text("FROM base\n")
    (root / "images/daemon/Dockerfile").write_text("FROM daemon\n")
    (root / "orchestrator/__init__.py").write_text("")
    monkeypatch.setattr(agent, "source_root", lambda: root)
    return root


def test_the_source_root_is_the_checkout_of_this_package() -> None:
    root = Path(orchestrator.__file__).resolve().parent.parent
    assert agent.source_root() == root


@pytest.mark.parametrize("missing", ["pyproject.toml", "images/agent/Dockerfile"])
def test_no_checkout_is_an_error_naming_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    (tmp_path / "pkg/orchestrator").mkdir(parents=True)
    (tmp_path / "pkg/images/agent").mkdir(parents=True)
    (tmp_path / "pkg/pyproject.toml").write_text("")
    (tmp_path / "pkg/images/agent/Dockerfile").write_text("")
    (tmp_path / "pkg" / missing).unlink()
    monkeypatch.setattr(orchestrator, "__file__", str(tmp_path / "pkg/orchestrator/__init__.py"))
    with pytest.raises(ImageBuildFailed) as caught:
        agent.source_root()
    assert caught.value.message == (
        f"no source checkout at {tmp_path / 'pkg'} (pyproject.toml and images/agent/Dockerfile)"
    )
    assert caught.value.hint == "build the image from a clone of the project (pip install -e .)"


def test_a_folder_is_no_checkout_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg/orchestrator").mkdir(parents=True)
    (tmp_path / "pkg/images/agent/Dockerfile").mkdir(parents=True)
    (tmp_path / "pkg/pyproject.toml").write_text("")
    monkeypatch.setattr(orchestrator, "__file__", str(tmp_path / "pkg/orchestrator/__init__.py"))
    with pytest.raises(ImageBuildFailed):
        agent.source_root()
    (tmp_path / "pkg/images/agent/Dockerfile").rmdir()
    (tmp_path / "pkg/images/agent/Dockerfile").write_text("")
    (tmp_path / "pkg/pyproject.toml").unlink()
    (tmp_path / "pkg/pyproject.toml").mkdir()
    with pytest.raises(ImageBuildFailed):
        agent.source_root()


# small parts


def test_an_agent_tag_is_the_first_twelve_of_the_digest() -> None:
    assert agent.agent_tag("repo", "0123456789abcdef") == "repo:0123456789ab"


def test_the_source_identity_is_a_hash_of_the_real_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    want = hashlib.sha256(str((tmp_path / "real").resolve()).encode()).hexdigest()[:16]
    assert agent.source_identity(tmp_path / "link") == want
    assert agent.source_identity(tmp_path / "real") == want


def test_an_image_id_or_none(calls: list[str]) -> None:
    engine = Engine({"a:1": "sha256:a"})
    assert agent._image_id(engine, "a:1") == "sha256:a"  # type: ignore[arg-type]
    assert agent._image_id(engine, "a:2") is None  # type: ignore[arg-type]
    assert calls == ["inspect a:1", "inspect a:2"]


def test_the_recorded_noop_is_the_noop_records_answer(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, str, Any]] = []

    def recorded(root: str, repository: str, inspect: Any) -> Recorded | None:
        calls.append((root, repository, inspect))
        return Recorded("h", "repo:h", "sha256:i", "base:b") if repository == "repo" else None

    monkeypatch.setattr(noop, "recorded", recorded)
    look = lambda ref: None  # noqa: E731
    assert agent.recorded_noop("repo", look) == BuildResult(
        "repo:h", "sha256:i", "h", "base:b", built=False
    )
    assert agent.recorded_noop("other", look) is None
    assert calls == [(str(checkout), "repo", look), (str(checkout), "other", look)]


def test_an_offline_build_is_recorded_and_others_are_not(tmp_path: Path) -> None:
    result = BuildResult("repo:h", "sha256:i", "h", "base:b", built=True)
    agent._record(tmp_path, "repo", False, result)
    assert not (tmp_path / ".cache").exists()
    agent._record(tmp_path, "repo", True, result)
    assert InputsCache(tmp_path).recorded(noop.offline_request("repo")) == Recorded(
        "h", "repo:h", "sha256:i", "base:b"
    )


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


def test_an_offline_build_makes_the_offline_base(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[Any, Any, Any]] = []
    monkeypatch.setattr(
        agent,
        "ensure_offline_base",
        lambda client, progress, mirror: made.append((client, progress, mirror)) or "base:off",
    )
    engine = Engine({agent.REGISTRY_BASE: "sha256:r"})
    seen: list[str] = []
    got = agent.resolve_base(engine, base=None, offline=True, progress=seen.append, mirror="m")  # type: ignore[arg-type]
    assert got == "base:off"
    assert made == [(engine, seen.append, "m")]
    assert engine.pulled == []


def test_a_present_base_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "ensure_offline_base", pytest.fail)
    engine = Engine({agent.REGISTRY_BASE: "sha256:r", "mine:1": "sha256:m"})
    assert agent.resolve_base(engine, base=None, offline=False, progress=pytest.fail) == (  # type: ignore[arg-type]
        "python:3.11-slim-bookworm"
    )
    assert (
        agent.resolve_base(engine, base="mine:1", offline=False, progress=pytest.fail) == "mine:1"
    )  # type: ignore[arg-type]
    assert engine.pulled == []


def test_a_missing_base_is_pulled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "ensure_offline_base", pytest.fail)
    engine = Engine()
    seen: list[str] = []
    assert agent.resolve_base(engine, base=None, offline=False, progress=seen.append) == (  # type: ignore[arg-type]
        agent.REGISTRY_BASE
    )
    assert seen == ["pulled python:3.11-slim-bookworm"]


def test_a_named_base_that_cannot_be_pulled_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent, "ensure_offline_base", pytest.fail)
    engine = Engine()
    engine.pull_fault = DockerException("no registry")
    with pytest.raises(ImageBuildFailed) as caught:
        agent.resolve_base(engine, base="mine:1", offline=False, progress=lambda _: None)  # type: ignore[arg-type]
    assert caught.value.message == (
        "base image mine:1 is not present and cannot be pulled: no registry"
    )
    assert caught.value.hint == "use --offline to build the base from Debian packages"


def test_the_registry_base_unavailable_falls_back_to_the_offline_base(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[tuple[Any, Any, Any]] = []
    monkeypatch.setattr(
        agent,
        "ensure_offline_base",
        lambda client, progress, mirror: made.append((client, progress, mirror)) or "base:off",
    )
    engine = Engine()
    engine.pull_fault = DockerException("no registry")
    seen: list[str] = []
    got = agent.resolve_base(engine, base=None, offline=False, progress=seen.append, mirror="m")  # type: ignore[arg-type]
    assert got == "base:off"
    assert made == [(engine, seen.append, "m")]
    assert seen == [
        "registry base python:3.11-slim-bookworm unavailable (no registry); using the offline base"
    ]


# the base's identity


def test_the_offline_base_is_known_by_its_recipe() -> None:
    engine = Engine()
    assert agent.base_identity(engine, base_tag()) == f"offline:{recipe_hash()}"  # type: ignore[arg-type]
    assert agent.base_identity(engine, "orchestrator-base") == "registry:orchestrator-base"  # type: ignore[arg-type]


def test_a_registry_base_is_known_by_its_first_digest(calls: list[str]) -> None:
    engine = Engine({"python:3": "sha256:p", "local:1": "sha256:l", "odd:1": "sha256:o"})
    engine.attrs["python:3"] = {"RepoDigests": ["python@sha256:bbb", "python@sha256:aaa"]}
    engine.attrs["odd:1"] = {"RepoDigests": ["odd@sha256:a@b"]}
    assert agent.base_identity(engine, "odd:1") == "registry:odd:1@sha256:a@b"  # type: ignore[arg-type]
    assert calls == ["inspect odd:1"]
    engine.attrs["local:1"] = {"RepoDigests": None}
    assert agent.base_identity(engine, "python:3") == "registry:python:3@sha256:aaa"  # type: ignore[arg-type]
    assert agent.base_identity(engine, "local:1") == "registry:local:1"  # type: ignore[arg-type]
    assert agent.base_identity(engine, "gone:1") == "registry:gone:1"  # type: ignore[arg-type]


# the current image


def tag_for(root: Path, engine: Engine, repository: str, base: str) -> str:
    return agent.agent_tag(repository, inputs.inputs_hash(root, agent.base_identity(engine, base)))  # type: ignore[arg-type]


def test_the_current_image_on_the_registry_base(checkout: Path) -> None:
    engine = Engine({agent.REGISTRY_BASE: "sha256:r"})
    tag = tag_for(checkout, engine, "repo", agent.REGISTRY_BASE)
    engine.present[tag] = "sha256:t"
    assert agent.current_agent_image(engine, "repo") == (tag, agent.REGISTRY_BASE)  # type: ignore[arg-type]


def test_the_current_image_on_the_offline_base(checkout: Path) -> None:
    engine = Engine({agent.REGISTRY_BASE: "sha256:r"})
    tag = tag_for(checkout, engine, "repo", base_tag())
    engine.present[tag] = "sha256:t"
    assert agent.current_agent_image(engine, "repo") == (tag, base_tag())  # type: ignore[arg-type]


def test_no_current_image_names_the_first_base_present(checkout: Path) -> None:
    assert agent.current_agent_image(Engine(), "repo") == (None, None)  # type: ignore[arg-type]
    engine = Engine({base_tag(): "sha256:b"})
    assert agent.current_agent_image(engine, "repo") == (None, base_tag())  # type: ignore[arg-type]
    engine.present[agent.REGISTRY_BASE] = "sha256:r"
    assert agent.current_agent_image(engine, "repo") == (None, agent.REGISTRY_BASE)  # type: ignore[arg-type]


def test_an_image_on_a_registry_base_no_longer_present_is_not_looked_for(
    checkout: Path,
) -> None:
    engine = Engine()
    engine.present[tag_for(checkout, engine, "repo", agent.REGISTRY_BASE)] = "sha256:t"
    assert agent.current_agent_image(engine, "repo") == (None, None)  # type: ignore[arg-type]


def test_an_image_on_the_offline_base_is_found_without_the_registry_base(checkout: Path) -> None:
    engine = Engine()
    tag = tag_for(checkout, engine, "repo", base_tag())
    engine.present[tag] = "sha256:t"
    assert agent.current_agent_image(engine, "repo") == (tag, base_tag())  # type: ignore[arg-type]


def test_the_image_ref_is_the_current_image(checkout: Path) -> None:
    engine = Engine()
    tag = tag_for(checkout, engine, "repo", base_tag())
    engine.present[tag] = "sha256:t"
    engine.present["repo:latest"] = "sha256:other"
    assert agent.agent_image_ref(engine, "repo") == tag  # type: ignore[arg-type]


def test_no_current_image_is_missing(checkout: Path) -> None:
    engine = Engine({"repo:latest": "sha256:l"})
    with pytest.raises(ImageMissing) as caught:
        agent.agent_image_ref(engine, "repo")  # type: ignore[arg-type]
    assert caught.value.message == (
        "no agent image matches the current sources; build it with: orchestrator image build"
    )
    assert caught.value.hint == "run: orchestrator image build"


def test_outside_a_checkout_the_image_ref_is_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_checkout() -> Path:
        raise ImageBuildFailed("no checkout")

    monkeypatch.setattr(agent, "source_root", no_checkout)
    assert agent.agent_image_ref(Engine({"repo:latest": "sha256:l"}), "repo") == "repo:latest"  # type: ignore[arg-type]
    with pytest.raises(ImageMissing):
        agent.agent_image_ref(Engine(), "repo")  # type: ignore[arg-type]


# the docker build


def test_a_docker_build_runs_without_network_and_labels_the_image(
    tmp_path: Path, checkout: Path
) -> None:
    engine = Engine()
    engine.chunks = [
        {"stream": "Step 1/3 : FROM base\n"},
        {"stream": " ---> abc\n"},
        {"stream": "Step 2/3 : RUN x  \n"},
        {"aux": {"ID": "sha256:built"}},
        {"aux": "not a mapping"},
        {"aux": {"Other": 1}},
    ]
    seen: list[str] = []
    got = agent._docker_build(
        engine,
        tmp_path,
        "repo:abc",
        "base:1",
        "pip-24.whl",
        "d" * 64,
        seen.append,
        "daemon",  # type: ignore[arg-type]
    )
    assert got == "sha256:built"
    assert engine.built == [
        {
            "path": str(tmp_path),
            "tag": "repo:abc",
            "rm": True,
            "forcerm": True,
            "pull": False,
            "decode": True,
            "network_mode": "none",
            "buildargs": {"BASE_IMAGE": "base:1", "PIP_WHEEL": "pip-24.whl"},
            "labels": {
                "org.orchestrator.role": "daemon",
                "org.orchestrator.inputs": "d" * 64,
                "org.orchestrator.source": agent.source_identity(checkout),
                "org.opencontainers.image.version": orchestrator.__version__,
            },
        }
    ]
    assert seen == ["  Step 1/3 : FROM base", "  Step 2/3 : RUN x"]


def test_a_docker_build_is_of_the_agent_by_default(tmp_path: Path, checkout: Path) -> None:
    engine = Engine()
    engine.chunks = [{"aux": {"ID": "sha256:built"}}]
    agent._docker_build(engine, tmp_path, "r:1", "b", "p.whl", "d", lambda _: None)  # type: ignore[arg-type]
    assert engine.built[0]["labels"]["org.orchestrator.role"] == "agent"


def test_a_docker_build_without_an_id_in_its_stream_finds_its_tag(
    tmp_path: Path, checkout: Path
) -> None:
    engine = Engine({"r:1": "sha256:found"})
    engine.chunks = [{"stream": "done\n"}]
    assert agent._docker_build(engine, tmp_path, "r:1", "b", "p", "d", lambda _: None) == (  # type: ignore[arg-type]
        "sha256:found"
    )
    engine = Engine()
    with pytest.raises(ImageBuildFailed) as caught:
        agent._docker_build(engine, tmp_path, "r:1", "b", "p", "d", lambda _: None)  # type: ignore[arg-type]
    assert caught.value.message == "docker build of r:1 produced no image"


@pytest.mark.parametrize(
    ("chunk", "detail"),
    [
        ({"error": "plain\n", "errorDetail": {"message": " the detail \n"}}, "the detail"),
        ({"error": " plain \n", "errorDetail": {}}, "plain"),
        ({"error": " plain \n"}, "plain"),
        ({"error": "plain", "errorDetail": {"message": ""}}, "plain"),
    ],
)
def test_a_docker_build_error_names_its_detail(
    tmp_path: Path, checkout: Path, chunk: dict[str, Any], detail: str
) -> None:
    engine = Engine()
    engine.chunks = [{"stream": "Step 1/1 : RUN x\n"}, chunk, {"aux": {"ID": "sha256:x"}}]
    with pytest.raises(ImageBuildFailed) as caught:
        agent._docker_build(engine, tmp_path, "r:1", "b", "p", "d", lambda _: None)  # type: ignore[arg-type]
    assert caught.value.message == f"docker build of r:1 failed: {detail}"


def test_a_docker_build_refused_by_the_engine_names_why(tmp_path: Path, checkout: Path) -> None:
    engine = Engine()
    engine.chunks = APIError("500", explanation="no space left")
    with pytest.raises(ImageBuildFailed) as caught:
        agent._docker_build(engine, tmp_path, "r:1", "b", "p", "d", lambda _: None)  # type: ignore[arg-type]
    assert caught.value.message == "docker build of r:1 failed: no space left"
    assert caught.value.__suppress_context__


def test_build_from_copies_the_role_and_downloads_wheels_for_the_engines_arch(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, calls: list[str]
) -> None:
    (checkout / "images/daemon/entry.sh").write_text("#!/bin/sh\n")
    engine = Engine()
    downloads: list[tuple[Any, ...]] = []
    builds: list[tuple[Any, ...]] = []
    contexts: list[tuple[Any, ...]] = []
    wheels_at: list[Path] = []

    def download(root: Path, wheels: Path, arch: str, progress: Any, extra: str = "") -> str:
        assert wheels.is_dir() and wheels.name == "wheels"
        wheels_at.append(wheels)
        names = sorted(p.name for p in wheels.parent.iterdir())
        downloads.append((root, names, arch, progress, extra))
        return "pip.whl"

    def docker_build(*args: Any) -> str:
        contexts.append(args[:2])
        builds.append(args[2:])
        return "sha256:new"

    monkeypatch.setattr(agent, "_download_wheels", download)
    monkeypatch.setattr(agent, "_docker_build", docker_build)
    seen: list[str] = []
    engine.architecture = "aarch64"
    got = agent._build_from(engine, checkout, "daemon", "d:1", "b:1", "dd", seen.append, "[host]")  # type: ignore[arg-type]
    assert got == "sha256:new"
    assert downloads == [
        (checkout, ["Dockerfile", "entry.sh", "wheels"], "aarch64", seen.append, "[host]")
    ]
    assert builds == [("d:1", "b:1", "pip.whl", "dd", seen.append, "daemon")]
    assert contexts[0][0] is engine and contexts[0][1] == wheels_at[0].parent
    assert contexts[0][1].name.startswith("orchestrator-image-")
    assert calls == ["engine info"]
    assert seen == ["building d:1 on b:1"]
    engine.architecture = None
    agent._build_from(engine, checkout, "agent", "a:1", "b:1", "dd", seen.append)  # type: ignore[arg-type]
    assert downloads[1][2] == "x86_64" and downloads[1][4] == ""


# wheels


def test_pip_exiting_zero_leaves_no_wheel_missing() -> None:
    assert agent._missing_wheel([sys.executable, "-c", "print('ok')"]) is None


@contextmanager
def typed_stdin() -> Iterator[None]:
    """This process's stdin holding text, which a command run must not get."""
    read, write = os.pipe()
    os.write(write, b"typed\n")
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)


def test_pip_reads_no_input() -> None:
    script = "import sys\nsys.exit(0 if sys.stdin.read() == '' else 1)\n"
    with typed_stdin():
        assert agent._missing_wheel([sys.executable, "-c", script]) is None
        agent._run([sys.executable, "-c", script], "reading")


def test_the_requirement_pip_found_no_wheel_for() -> None:
    script = (
        "import sys\nprint('ERROR: No matching distribution found for dkimpy>=1.1', "
        "file=sys.stderr)\nsys.exit(1)\n"
    )
    assert agent._missing_wheel([sys.executable, "-c", script]) == "dkimpy>=1.1"


@pytest.mark.parametrize(
    ("stream", "tail"), [("stderr", "l2 | l3 | l4"), ("stdout", "l2 | l3 | l4")]
)
def test_another_pip_failure_names_its_last_lines(stream: str, tail: str) -> None:
    script = f"import sys\nfor i in range(5): print(f'l{{i}}', file=sys.{stream})\nsys.exit(2)\n"
    with pytest.raises(ImageBuildFailed) as caught:
        agent._missing_wheel([sys.executable, "-c", script])
    assert caught.value.message == f"downloading wheels failed: {tail}"
    assert caught.value.hint == "check that PyPI is reachable from this host"


def test_a_failed_command_names_what_and_its_last_lines() -> None:
    script = (
        "import sys\nfor i in range(5): print(f'l{i}')\nprint('e', file=sys.stderr)\nsys.exit(1)\n"
    )
    with pytest.raises(ImageBuildFailed) as caught:
        agent._run([sys.executable, "-c", script], "building x")
    assert caught.value.message == "building x failed: e"
    assert caught.value.hint == "check that PyPI is reachable from this host"
    script = "import sys\nfor i in range(5): print(f'l{i}')\nsys.exit(1)\n"
    with pytest.raises(ImageBuildFailed) as caught:
        agent._run([sys.executable, "-c", script], "building x")
    assert caught.value.message == "building x failed: l2 | l3 | l4"


class Pip:
    """_run and _missing_wheel faked: the commands recorded, wheels made as pip would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, wheels: Path) -> None:
        self.wheels = wheels
        self.runs: list[tuple[list[str], str]] = []
        self.downloads: list[list[str]] = []
        self.missing: list[str | None] = [None]
        self.made: dict[str, str] = {}
        self.pip_wheel = True
        monkeypatch.setattr(agent, "_run", self.run)
        monkeypatch.setattr(agent, "_missing_wheel", self.missing_wheel)

    def run(self, cmd: list[str], what: str) -> None:
        self.runs.append((cmd, what))
        if cmd[4] == "wheel" and cmd[-1] in self.made:
            (self.wheels / self.made[cmd[-1]]).write_bytes(b"")
        elif cmd[4] == "wheel":
            (self.wheels / "orchestrator-1.0-py3-none-any.whl").write_bytes(b"")

    def missing_wheel(self, download: list[str]) -> str | None:
        self.downloads.append(download)
        missing = self.missing.pop(0)
        if missing is None and self.pip_wheel:
            (self.wheels / "pip-24.0-py3-none-any.whl").write_bytes(b"")
        return missing


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def download_cmd(wheels: Path, extra: str = "", arch: str = "x86_64") -> list[str]:
    platforms = [a for p in agent._PLATFORMS[arch] for a in ("--platform", p)]
    return [
        *PIP,
        "download",
        "-q",
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        *platforms,
        "--find-links",
        str(wheels),
        "-d",
        str(wheels),
        f"{wheels / 'orchestrator-1.0-py3-none-any.whl'}{extra}",
        "pip",
    ]


@pytest.mark.parametrize("hatchling", [True, False])
def test_the_wheels_of_the_project_its_dependencies_and_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hatchling: bool
) -> None:
    import importlib.util

    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: object() if hatchling and name == "hatchling" else None,
    )
    pip = Pip(monkeypatch, tmp_path)
    seen: list[str] = []
    got = agent._download_wheels(Path("/src"), tmp_path, "aarch64", seen.append, extra="[host]")
    assert got == "pip-24.0-py3-none-any.whl"
    isolation = ["--no-build-isolation"] if hatchling else []
    assert pip.runs == [
        (
            [*PIP, "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp_path), "/src"],
            "building the orchestrator wheel",
        )
    ]
    assert pip.downloads == [download_cmd(tmp_path, "[host]", "aarch64")]
    assert seen == [
        "building the orchestrator wheel",
        "downloading dependency wheels for Python 3.11 (aarch64)",
        "2 wheels ready",
    ]


def test_an_unknown_architecture_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildFailed) as caught:
        agent._download_wheels(tmp_path, tmp_path, "riscv64", pytest.fail)
    assert caught.value.message == "unsupported engine architecture 'riscv64'"
    assert caught.value.hint == "supported: x86_64, aarch64"


def test_a_source_only_dependency_is_built_once_when_pure_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = Pip(monkeypatch, tmp_path)
    pip.missing = ["dkimpy>=1.1", "Other.Pkg", None]
    pip.made = {
        "dkimpy>=1.1": "dkimpy-1.1-py3-none-any.whl",
        "Other.Pkg": "other_pkg-2-py3-none-any.whl",
    }
    (tmp_path / "numpy-1-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    seen: list[str] = []
    assert agent._download_wheels(tmp_path, tmp_path, "x86_64", seen.append) == (
        "pip-24.0-py3-none-any.whl"
    )
    assert pip.runs[1:] == [
        (
            [*PIP, "wheel", "-q", "--no-deps", "-w", str(tmp_path), "dkimpy>=1.1"],
            "building dkimpy>=1.1",
        ),
        (
            [*PIP, "wheel", "-q", "--no-deps", "-w", str(tmp_path), "Other.Pkg"],
            "building Other.Pkg",
        ),
    ]
    assert pip.downloads == [download_cmd(tmp_path)] * 3
    assert seen[2:] == [
        "building a wheel of dkimpy>=1.1 from its source (it publishes none)",
        "building a wheel of Other.Pkg from its source (it publishes none)",
        "5 wheels ready",
    ]


def test_a_source_only_dependency_missing_again_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = Pip(monkeypatch, tmp_path)
    pip.missing = ["dkimpy", "dkimpy"]
    pip.made = {"dkimpy": "dkimpy-1-py3-none-any.whl"}
    with pytest.raises(ImageBuildFailed) as caught:
        agent._download_wheels(tmp_path, tmp_path, "x86_64", lambda _: None)
    assert caught.value.message == (
        "downloading wheels failed: no wheel of dkimpy for Python 3.11 (x86_64), "
        "and none could be built from its source"
    )
    assert caught.value.hint == "check that PyPI is reachable from this host"


def test_at_most_eight_source_only_dependencies_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = Pip(monkeypatch, tmp_path)
    pip.missing = [f"p{i}" for i in range(9)]
    with pytest.raises(ImageBuildFailed) as caught:
        agent._download_wheels(tmp_path, tmp_path, "x86_64", lambda _: None)
    assert "no wheel of p8 " in caught.value.message
    assert len(pip.runs) == 1 + 8
    pip = Pip(monkeypatch, tmp_path)
    pip.missing = [*(f"q{i}" for i in range(8)), None]
    assert agent._download_wheels(tmp_path, tmp_path, "x86_64", lambda _: None)


def test_a_source_only_dependency_built_for_one_platform_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = Pip(monkeypatch, tmp_path)
    pip.missing = ["Fast-Lib>=1", None]
    pip.made = {"Fast-Lib>=1": "fast_lib-1-cp311-cp311-linux_x86_64.whl"}
    (tmp_path / "numpy-1-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    with pytest.raises(ImageBuildFailed) as caught:
        agent._download_wheels(tmp_path, tmp_path, "x86_64", lambda _: None)
    assert caught.value.message == (
        "Fast-Lib>=1 publishes no wheel for Python 3.11 (x86_64), and the one built here "
        "is not pure Python (fast_lib-1-cp311-cp311-linux_x86_64.whl)"
    )
    assert caught.value.hint is None


def test_no_pip_wheel_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pip = Pip(monkeypatch, tmp_path)
    pip.pip_wheel = False
    with pytest.raises(ImageBuildFailed) as caught:
        agent._download_wheels(tmp_path, tmp_path, "x86_64", lambda _: None)
    assert caught.value.message == "pip's wheel was not downloaded"


# pruning


def test_pruning_removes_this_checkouts_older_agent_tags_only(
    checkout: Path,
) -> None:
    engine = Engine(
        {
            "repo:new": "sha256:1",
            "repo:latest": "sha256:1",
            "repo:old1": "sha256:2",
            "repo:old2": "sha256:3",
            "repo:old3": "sha256:4",
        }
    )
    engine.refuse = {"repo:old1": APIError("in use"), "repo:old2": OrchestratorError("x")}
    engine.list = lambda name, filters=None: (  # type: ignore[method-assign]
        engine.listed.append((name, filters))
        or [
            SimpleNamespace(tags=["repo:new", "repo:latest"]),
            SimpleNamespace(tags=["repo:old1", "repo:old2", "repo:old3", "other:x", "repox:y"]),
        ]
    )
    seen: list[str] = []
    agent._prune_old(engine, "repo", keep="repo:new", progress=seen.append)  # type: ignore[arg-type]
    mine = f"org.orchestrator.source={agent.source_identity(checkout)}"
    assert engine.listed == [("repo", {"label": ["org.orchestrator.role=agent", mine]})]
    assert engine.removed == ["repo:old3"]
    assert seen == ["removed old image repo:old3"]


# whole builds


class Builds:
    """resolve_base, _build_from and _prune_old of a whole build recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, engine: Engine, base: str) -> None:
        self.engine = engine
        self.base = base
        self.resolved: list[dict[str, Any]] = []
        self.built: list[tuple[Any, ...]] = []
        self.pruned: list[tuple[str, str]] = []
        monkeypatch.setattr(agent, "resolve_base", self.resolve_base)
        monkeypatch.setattr(agent, "_build_from", self.build_from)
        monkeypatch.setattr(agent, "_prune_old", self.prune_old)

    def resolve_base(self, client: Any, **kwargs: Any) -> str:
        assert client is self.engine
        self.resolved.append(kwargs)
        return self.base

    def build_from(self, client: Any, *args: Any) -> str:
        assert client is self.engine
        self.built.append(args)
        return "sha256:new"

    def prune_old(self, client: Any, repository: str, keep: str, progress: Any) -> None:
        assert client is self.engine
        progress("pruned")
        self.pruned.append((repository, keep))


def test_a_build_with_current_inputs_only_tags_latest(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, calls: list[str]
) -> None:
    engine = Engine({"base:1": "sha256:b"})
    builds = Builds(monkeypatch, engine, "base:1")
    tag = tag_for(checkout, engine, "repo", "base:1")
    engine.present[tag] = "sha256:cur"
    seen: list[str] = []
    got = agent.build_agent_image(engine, "repo", base="base:1", progress=seen.append, mirror="m")  # type: ignore[arg-type]
    digest = inputs.inputs_hash(checkout, "registry:base:1")
    assert got == BuildResult(tag, "sha256:cur", digest, "base:1", built=False)
    assert builds.resolved == [
        {"base": "base:1", "offline": False, "progress": seen.append, "mirror": "m"}
    ]
    assert engine.tagged == [("sha256:cur", "repo", "latest")]
    assert calls[-1] == "tag image"
    assert builds.built == [] and builds.pruned == []
    assert InputsCache(checkout).recorded(noop.offline_request("repo")) is None


def test_a_forced_build_builds_tags_and_prunes(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, calls: list[str]
) -> None:
    engine = Engine({"base:1": "sha256:b"})
    builds = Builds(monkeypatch, engine, "base:1")
    tag = tag_for(checkout, engine, "repo", "base:1")
    engine.present[tag] = "sha256:cur"
    seen: list[str] = []
    got = agent.build_agent_image(engine, "repo", force=True, progress=seen.append)  # type: ignore[arg-type]
    digest = inputs.inputs_hash(checkout, "registry:base:1")
    assert got == BuildResult(tag, "sha256:new", digest, "base:1", built=True)
    assert builds.resolved[0]["base"] is None
    assert builds.resolved[0]["offline"] is False
    assert builds.resolved[0]["mirror"] is None
    assert builds.built == [(checkout, "agent", tag, "base:1", digest, seen.append)]
    assert engine.tagged == [("sha256:new", "repo", "latest")]
    assert calls[-1] == "tag image"
    assert builds.pruned == [("repo", tag)]
    assert seen == ["pruned"]
    # neither offline nor asked with no base: not recorded
    assert InputsCache(checkout).recorded(noop.offline_request("repo")) is None


def test_a_base_gone_during_the_build_is_an_error(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine()
    Builds(monkeypatch, engine, "base:1")
    with pytest.raises(ImageBuildFailed) as caught:
        agent.build_agent_image(engine, "repo")  # type: ignore[arg-type]
    assert caught.value.message == "base image base:1 vanished during the build"


def test_an_offline_build_is_recorded_and_then_answered_from_the_record(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, calls: list[str]
) -> None:
    base = base_tag()
    engine = Engine({base: "sha256:b"})
    builds = Builds(monkeypatch, engine, base)
    first = agent.build_agent_image(engine, "repo", offline=True)  # type: ignore[arg-type]
    assert first.built is True
    assert builds.resolved[0]["offline"] is True
    assert InputsCache(checkout).recorded(noop.offline_request("repo")) == Recorded(
        first.inputs_hash, first.tag, "sha256:new", base
    )
    engine.present[first.tag] = "sha256:new"
    engine.attrs[first.tag] = {"Id": "sha256:new", "RepoTags": [first.tag, "repo:latest"]}
    del calls[:]
    again = agent.build_agent_image(engine, "repo", offline=True)  # type: ignore[arg-type]
    assert calls == [f"inspect {first.tag}"]
    assert again == BuildResult(first.tag, "sha256:new", first.inputs_hash, base, built=False)
    assert len(builds.resolved) == 1
    # forced, or on a base named, the record is not asked
    agent.build_agent_image(engine, "repo", offline=True, force=True)  # type: ignore[arg-type]
    assert len(builds.resolved) == 2
    agent.build_agent_image(engine, "repo", offline=True, base=base)  # type: ignore[arg-type]
    assert len(builds.resolved) == 3


def test_an_offline_build_whose_recorded_tag_is_gone_is_checked_in_full(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = base_tag()
    engine = Engine({base: "sha256:b"})
    builds = Builds(monkeypatch, engine, base)
    first = agent.build_agent_image(engine, "repo", offline=True)  # type: ignore[arg-type]
    again = agent.build_agent_image(engine, "repo", offline=True)  # type: ignore[arg-type]
    assert again.tag == first.tag and again.built is True
    assert len(builds.resolved) == 2


def test_the_daemon_image_is_built_with_the_host_extra(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, calls: list[str]
) -> None:
    engine = Engine({"base:1": "sha256:b"})
    builds = Builds(monkeypatch, engine, "base:1")
    seen: list[str] = []
    got = agent.build_daemon_image(
        engine, base="base:1", offline=True, progress=seen.append, mirror="m"
    )  # type: ignore[arg-type]
    digest = hashlib.sha256(b"daemon\n")
    digest.update(inputs.inputs_hash(checkout, "registry:base:1").encode())
    digest.update(hashlib.sha256(b"FROM daemon\n").digest())
    tag = f"orchestrator-daemon:{digest.hexdigest()[:12]}"
    assert got == BuildResult(tag, "sha256:new", digest.hexdigest(), "base:1", built=True)
    assert builds.resolved == [
        {"base": "base:1", "offline": True, "progress": seen.append, "mirror": "m"}
    ]
    assert builds.built == [
        (checkout, "daemon", tag, "base:1", digest.hexdigest(), seen.append, "[host]")
    ]
    assert engine.tagged == [("sha256:new", "orchestrator-daemon", "latest")]
    assert calls[-1] == "tag image"
    assert agent.daemon_inputs_hash(checkout, "registry:base:1") == digest.hexdigest()


def test_a_current_daemon_image_is_only_tagged(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, calls: list[str]
) -> None:
    engine = Engine({"base:1": "sha256:b"})
    builds = Builds(monkeypatch, engine, "base:1")
    digest = agent.daemon_inputs_hash(checkout, "registry:base:1")
    tag = f"orchestrator-daemon:{digest[:12]}"
    engine.present[tag] = "sha256:cur"
    got = agent.build_daemon_image(engine)  # type: ignore[arg-type]
    assert got == BuildResult(tag, "sha256:cur", digest, "base:1", built=False)
    assert builds.resolved == [
        {"base": None, "offline": False, "progress": builds.resolved[0]["progress"], "mirror": None}
    ]
    assert engine.tagged == [("sha256:cur", "orchestrator-daemon", "latest")]
    assert calls[-1] == "tag image"
    assert builds.built == []
    forced = agent.build_daemon_image(engine, force=True)  # type: ignore[arg-type]
    assert forced.built is True and forced.image_id == "sha256:new"
