"""Exact behaviour of a group's own image (image/group.py) without an engine: its
repository and inputs, which image a group runs, and the build's steps against a fake
engine client, with the agent image's build steps and the wheel downloads recorded."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker.errors import APIError, ImageNotFound

from orchestrator.errors import OrchestratorError
from orchestrator.groups.packages import LockedWheel, PackageRefused, PackageSettings, PythonLock
from orchestrator.image import group as image_group
from orchestrator.image.recipe import recipe_hash

PROJECT = "proj"
LOCK = PythonLock(
    ("requests>=2",),
    (LockedWheel("requests", "2.31.0", "requests-2.31.0-py3-none-any.whl", "ab" * 32),),
)


def piece(project: str, folder: str) -> str:
    return hashlib.sha256(f"{project}\0{folder}".encode()).hexdigest()[:8]


def test_a_groups_repository_names_its_folder_and_a_piece_of_project_and_folder() -> None:
    assert (
        image_group.group_repository("p", "notes")
        == f"orchestrator-group-notes-{piece('p', 'notes')}"
    )
    assert image_group.group_repository("p", "notes") != image_group.group_repository("q", "notes")
    # the NUL keeps "a"+"bc" apart from "ab"+"c"
    assert piece("a", "bc") != piece("ab", "c")
    assert image_group.group_repository("a", "bc") == f"orchestrator-group-bc-{piece('a', 'bc')}"


# the group and the checkout


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "checkout"
    (root / "images/group").mkdir(parents=True)
    (root / "images/group/Dockerfile").write_text("FROM base\n")
    (root / "images/group/extra.txt").write_text("copied\n")
    monkeypatch.setattr(image_group, "source_root", lambda: root)
    return root


def make_group(
    tmp_path: Path, debian: tuple[str, ...] = (), python: tuple[str, ...] = (), lock: Any = None
) -> Any:
    path = tmp_path / "groups" / "notes"
    path.mkdir(parents=True, exist_ok=True)
    if lock is not None:
        (path / "packages.lock").write_text(json.dumps(lock.to_dict()))
    packages = PackageSettings(debian=debian, python=python)
    return SimpleNamespace(folder="notes", path=path, config=SimpleNamespace(packages=packages))


def expected_digest(
    root: Path, agent_base: str, debian: tuple[str, ...], lock: PythonLock | None
) -> str:
    digest = hashlib.sha256(b"group\n")
    digest.update(f"agent:{agent_base}\n".encode())
    digest.update(f"debian:{recipe_hash(debian) if debian else ''}\n".encode())
    digest.update(hashlib.sha256((root / "images/group/Dockerfile").read_bytes()).digest())
    digest.update((lock.digest() if lock else "").encode())
    return digest.hexdigest()


def test_the_inputs_of_debian_packages_only(root: Path, tmp_path: Path) -> None:
    group = make_group(tmp_path, debian=("zsh",))
    digest, lock = image_group.group_inputs(None, group, "agent:1")  # type: ignore[arg-type]
    assert lock is None
    assert digest == expected_digest(root, "agent:1", ("zsh",), None)


def test_the_inputs_of_python_packages_with_their_lock(root: Path, tmp_path: Path) -> None:
    group = make_group(tmp_path, python=("requests>=2",), lock=LOCK)
    digest, lock = image_group.group_inputs(None, group, "agent:1")  # type: ignore[arg-type]
    assert lock == LOCK
    assert digest == expected_digest(root, "agent:1", (), LOCK)


def test_a_lock_without_python_packages_asked_for_is_not_read(root: Path, tmp_path: Path) -> None:
    group = make_group(tmp_path, debian=("zsh",), lock=LOCK)
    digest, lock = image_group.group_inputs(None, group, "agent:1")  # type: ignore[arg-type]
    assert lock is None
    assert digest == expected_digest(root, "agent:1", ("zsh",), None)


def test_the_inputs_change_with_the_agent_base_and_the_dockerfile(
    root: Path, tmp_path: Path
) -> None:
    group = make_group(tmp_path, debian=("zsh",))
    first, _ = image_group.group_inputs(None, group, "agent:1")  # type: ignore[arg-type]
    assert image_group.group_inputs(None, group, "agent:2")[0] != first  # type: ignore[arg-type]
    (root / "images/group/Dockerfile").write_text("FROM other\n")
    assert image_group.group_inputs(None, group, "agent:1")[0] != first  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "lock", [None, PythonLock(("requests>=3",), LOCK.wheels)], ids=["no lock", "another list"]
)
def test_python_packages_not_resolved_are_refused(
    root: Path, tmp_path: Path, lock: PythonLock | None
) -> None:
    group = make_group(tmp_path, python=("requests>=2",), lock=lock)
    with pytest.raises(PackageRefused) as caught:
        image_group.group_inputs(None, group, "agent:1")  # type: ignore[arg-type]
    assert caught.value.message == (
        "group notes: the Python packages asked for are not resolved yet"
    )
    assert caught.value.hint == "run: orchestrator group packages notes --build"


# which image a group runs


class Engine:
    """A fake engine client: images present by tag, with the tags listed by repository;
    removals and tags recorded."""

    def __init__(self, present: dict[str, str] | None = None) -> None:
        self.present = dict(present or {})
        self.removed: list[tuple[str, dict[str, Any]]] = []
        self.tagged: list[tuple[str, str, str]] = []
        self.refuse: set[str] = set()
        self.listed: list[str] = []
        self.images = SimpleNamespace(get=self.get, list=self.list, remove=self.remove)
        self.api = SimpleNamespace(tag=self.tag)

    def get(self, ref: str) -> Any:
        if ref not in self.present:
            raise ImageNotFound(ref)
        return SimpleNamespace(id=self.present[ref])

    def list(self, name: str) -> list[Any]:
        self.listed.append(name)
        ids: dict[str, list[str]] = {}
        for tag, image_id in self.present.items():
            if tag.partition(":")[0] == name:
                ids.setdefault(image_id, []).append(tag)
        return [SimpleNamespace(tags=tags) for tags in ids.values()]

    def remove(self, ref: str, **kwargs: Any) -> None:
        if ref in self.refuse:
            raise APIError(f"{ref} is in use")
        if ref == "gone:x":
            raise ImageNotFound(ref)
        if ref == "boom:x":
            raise OrchestratorError("engine failed")
        self.removed.append((ref, kwargs))
        self.present.pop(ref, None)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.tagged.append((image_id, repository, tag))


def current_tag(root: Path, group: Any, agent_base: str = "agent:1") -> str:
    digest, _ = image_group.group_inputs(None, group, agent_base)
    return f"{image_group.group_repository(PROJECT, 'notes')}:{digest[:12]}"


def test_a_group_without_packages_has_no_image_tag(root: Path, tmp_path: Path) -> None:
    assert image_group.group_image_tag(Engine(), PROJECT, make_group(tmp_path), "agent:1") is None  # type: ignore[arg-type]


def test_a_built_group_image_is_its_tag(root: Path, tmp_path: Path) -> None:
    group = make_group(tmp_path, debian=("zsh",))
    tag = current_tag(root, group)
    engine = Engine({tag: "sha256:g"})
    assert image_group.group_image_tag(engine, PROJECT, group, "agent:1") == tag  # type: ignore[arg-type]
    assert image_group.group_image_tag(engine, "other", group, "agent:1") is None  # type: ignore[arg-type]


def test_an_unbuilt_or_unresolved_group_image_has_no_tag(root: Path, tmp_path: Path) -> None:
    group = make_group(tmp_path, debian=("zsh",))
    assert image_group.group_image_tag(Engine(), PROJECT, group, "agent:1") is None  # type: ignore[arg-type]
    unresolved = make_group(tmp_path, python=("requests",))
    assert image_group.group_image_tag(Engine(), PROJECT, unresolved, "agent:1") is None  # type: ignore[arg-type]


def test_a_group_runs_its_image_when_built_else_the_agent_image_with_one_warning(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    group = make_group(tmp_path, debian=("zsh",))
    engine = Engine()
    asked: list[str] = []

    def project() -> str:
        asked.append("project")
        return PROJECT

    images = image_group.GroupImages(engine, project)  # type: ignore[arg-type]
    assert images.client is engine
    caplog.set_level(logging.WARNING, logger="orchestrator.image.group")
    assert images(group, "agent:1") == "agent:1"
    assert images(group, "agent:1") == "agent:1"
    assert [r.getMessage() for r in caplog.records] == [
        "group notes asks for packages whose image is not built; it runs the agent image "
        "until it is (orchestrator group packages notes --build)"
    ]
    assert images.warned == {("notes", repr(group.config.packages))}
    other = make_group(tmp_path, debian=("fish",))
    images(other, "agent:1")
    assert len(caplog.records) == 2
    tag = current_tag(root, group)
    engine.present[tag] = "sha256:g"
    assert images(group, "agent:1") == tag
    assert asked == ["project"] * 4


def test_a_group_without_packages_runs_the_agent_image(root: Path, tmp_path: Path) -> None:
    images = image_group.GroupImages(Engine(), pytest.fail)  # type: ignore[arg-type]
    assert images(make_group(tmp_path), "agent:1") == "agent:1"


# building


class Build:
    """The agent image's build steps and the downloads, recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, engine: Engine) -> None:
        self.engine = engine
        self.steps: list[tuple[Any, ...]] = []
        self.calls: list[str] = []
        self.context_files: list[str] = []
        self.requirements: str | None = None
        monkeypatch.setattr(image_group, "ensure_offline_base", self.ensure_offline_base)
        monkeypatch.setattr(image_group, "_build_from", self.build_from)
        monkeypatch.setattr(image_group, "_docker_build", self.docker_build)
        monkeypatch.setattr(image_group, "download_locked", self.download_locked)
        monkeypatch.setattr(image_group, "_pip_download", self.pip_download)
        monkeypatch.setattr(image_group, "call_engine", self.call_engine)

    def call_engine(self, what: str, fn: Any) -> Any:
        self.calls.append(what)
        return fn()

    def ensure_offline_base(
        self, client: Any, progress: Any, mirror: Any, extra: tuple[str, ...]
    ) -> str:
        assert client is self.engine
        progress("base progress")
        self.steps.append(("base", mirror, extra))
        return "orchestrator-base:x"

    def build_from(
        self, client: Any, root: Path, role: str, tag: str, base: str, digest: str, progress: Any
    ) -> str:
        assert client is self.engine
        progress("agent progress")
        self.steps.append(("agent", root, role, tag, base, digest))
        self.engine.present[tag] = "sha256:mid"
        return "sha256:mid"

    def download_locked(self, lock: PythonLock, wheels: Path, progress: Any) -> None:
        progress("locked progress")
        self.steps.append(("locked", lock, wheels.name))
        (wheels / "requirements.txt").write_text(lock.requirements_txt())

    def pip_download(self, args: list[str], wheels: Path, progress: Any) -> None:
        progress("pip progress")
        self.steps.append(("pip", args, wheels.name))
        (wheels / "pip-24.0-py3-none-any.whl").write_bytes(b"")
        (wheels / "aaa-1-py3-none-any.whl").write_bytes(b"")

    def docker_build(
        self,
        client: Any,
        context: Path,
        tag: str,
        below: str,
        pip_wheel: str,
        digest: str,
        progress: Any,
        *,
        role: str,
    ) -> str:
        assert client is self.engine
        assert context.name.startswith("orchestrator-group-image-"), context.name
        self.context_files = sorted(
            str(p.relative_to(context)) for p in context.rglob("*") if p.is_file()
        )
        self.requirements = (context / "wheels/requirements.txt").read_text()
        progress("build progress")
        self.steps.append(("build", tag, below, pip_wheel, digest, role))
        self.engine.present[tag] = "sha256:new"
        return "sha256:new"


def test_a_group_without_packages_is_not_built(root: Path, tmp_path: Path) -> None:
    with pytest.raises(PackageRefused) as caught:
        image_group.build_group_image(Engine(), PROJECT, make_group(tmp_path), "agent:1")  # type: ignore[arg-type]
    assert caught.value.message == "group notes asks for no packages"


def test_a_current_image_is_not_built_again(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group(tmp_path, debian=("zsh",))
    tag = current_tag(root, group)
    engine = Engine({tag: "sha256:g"})
    build = Build(monkeypatch, engine)
    got = image_group.build_group_image(engine, PROJECT, group, "agent:1")  # type: ignore[arg-type]
    assert got == image_group.GroupImage(tag, built=False)
    assert build.steps == []


def test_python_packages_are_built_on_the_agent_image(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group(tmp_path, python=("requests>=2",), lock=LOCK)
    repository = image_group.group_repository(PROJECT, "notes")
    old = f"{repository}:0123456789ab"
    engine = Engine({old: "sha256:old", f"{repository}:latest": "sha256:old2"})
    build = Build(monkeypatch, engine)
    seen: list[str] = []
    got = image_group.build_group_image(engine, PROJECT, group, "agent:1", progress=seen.append)  # type: ignore[arg-type]
    digest, _ = image_group.group_inputs(None, group, "agent:1")  # type: ignore[arg-type]
    tag = f"{repository}:{digest[:12]}"
    assert got == image_group.GroupImage(tag, built=True)
    assert build.steps == [
        ("locked", LOCK, "wheels"),
        ("pip", ["--no-deps", "pip"], "wheels"),
        ("build", tag, "agent:1", "pip-24.0-py3-none-any.whl", digest, "group"),
    ]
    assert build.context_files == [
        "Dockerfile",
        "extra.txt",
        "wheels/aaa-1-py3-none-any.whl",
        "wheels/pip-24.0-py3-none-any.whl",
        "wheels/requirements.txt",
    ]
    assert build.requirements == LOCK.requirements_txt()
    assert build.calls == ["label"]
    assert engine.tagged == [("sha256:new", repository, "latest")]
    assert engine.removed == [(old, {})]
    assert seen == ["locked progress", "pip progress", "build progress", f"removed old image {old}"]


def test_debian_packages_get_a_base_and_an_agent_image_of_their_own(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group(tmp_path, debian=("zsh", "fish"))
    repository = image_group.group_repository(PROJECT, "notes")
    engine = Engine()
    build = Build(monkeypatch, engine)
    seen: list[str] = []
    got = image_group.build_group_image(
        engine,  # type: ignore[arg-type]
        PROJECT,
        group,  # type: ignore[arg-type]
        "agent:1",
        progress=seen.append,
        mirror="http://m/debian",
    )
    digest, _ = image_group.group_inputs(None, group, "agent:1")  # type: ignore[arg-type]
    tag = f"{repository}:{digest[:12]}"
    below = f"{repository}:agent-{digest[:12]}"
    assert got == image_group.GroupImage(tag, built=True)
    assert build.steps == [
        ("base", "http://m/debian", ("zsh", "fish")),
        ("agent", root, "agent", below, "orchestrator-base:x", digest),
        ("pip", ["--no-deps", "pip"], "wheels"),
        ("build", tag, below, "pip-24.0-py3-none-any.whl", digest, "group"),
    ]
    assert build.requirements == ""
    assert build.calls == ["untag", "label"]
    assert engine.removed == [(below, {"noprune": True})]
    assert engine.tagged == [("sha256:new", repository, "latest")]
    assert seen == [
        "a base with the Debian packages zsh, fish",
        "base progress",
        "agent progress",
        "pip progress",
        "build progress",
    ]


def test_a_build_without_progress_runs_quietly(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group(tmp_path, debian=("zsh",))
    engine = Engine()
    Build(monkeypatch, engine)
    got = image_group.build_group_image(engine, PROJECT, group, "agent:1")  # type: ignore[arg-type]
    assert got.built is True


def test_pruning_keeps_the_new_tag_and_latest_and_skips_what_cannot_go() -> None:
    engine = Engine(
        {
            "repo:new": "sha256:1",
            "repo:latest": "sha256:1",
            "repo:old1": "sha256:2",
            "repo:old2": "sha256:3",
            "repo:old3": "sha256:4",
            "other:old": "sha256:5",
        }
    )
    engine.refuse = {"repo:old1"}
    engine.present["boom:x"] = "sha256:6"
    seen: list[str] = []
    image_group._prune(engine, "repo", keep="repo:new", progress=seen.append)  # type: ignore[arg-type]
    assert engine.listed == ["repo"]
    assert engine.removed == [("repo:old2", {}), ("repo:old3", {})]
    assert seen == ["removed old image repo:old2", "removed old image repo:old3"]


def test_pruning_passes_over_an_engine_failure() -> None:
    engine = Engine({"boom:x": "sha256:1", "boom:y": "sha256:2"})
    seen: list[str] = []
    image_group._prune(engine, "boom", keep="boom:z", progress=seen.append)  # type: ignore[arg-type]
    assert engine.removed == [("boom:y", {})]
    assert seen == ["removed old image boom:y"]


def test_removing_a_groups_images_removes_every_tag_it_can() -> None:
    repository = image_group.group_repository(PROJECT, "notes")
    engine = Engine(
        {
            f"{repository}:a": "sha256:1",
            f"{repository}:latest": "sha256:1",
            f"{repository}:b": "sha256:2",
            "other:a": "sha256:3",
        }
    )
    engine.refuse = {f"{repository}:b"}
    removed = image_group.remove_group_images(engine, PROJECT, "notes")  # type: ignore[arg-type]
    assert removed == [f"{repository}:a", f"{repository}:latest"]
    assert engine.removed == [
        (f"{repository}:a", {"force": True}),
        (f"{repository}:latest", {"force": True}),
    ]
    assert engine.listed == [repository]


def test_removing_passes_over_a_tag_already_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine({"gone:x": "sha256:1", "gone:y": "sha256:2"})
    monkeypatch.setattr(image_group, "group_repository", lambda project, folder: "gone")
    assert image_group.remove_group_images(engine, PROJECT, "notes") == ["gone:y"]  # type: ignore[arg-type]
