"""Exact behaviour of what an offline image build remembers (image/inputs.py) and of the
answer given before the CLI loads (image/noop.py): the checkout found, the request
named, the home remembered, and the console's answer, with the engine asked through a
stand-in of the direct inspect."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import orchestrator
from orchestrator.image import inputs, noop
from orchestrator.image.inputs import InputsCache, Recorded
from orchestrator.image.recipe import recipe_hash
from orchestrator.runtime import direct
from tests.imagebuild import ARGS, IMAGE_ID, TAG, image_home  # noqa: F401  (fixture: home)


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "images/agent").mkdir(parents=True)
    (root / "orchestrator").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "images/agent/Dockerfile").write_text("FROM scratch\n")
    (root / "orchestrator/__init__.py").write_text("")
    return root


# noop: the checkout, the request, the home


def test_the_checkout_root_is_this_packages_checkout() -> None:
    root = os.path.dirname(os.path.dirname(os.path.realpath(orchestrator.__file__)))
    assert noop.checkout_root() == root


def test_the_checkout_root_is_found_through_links(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "link").symlink_to(checkout / "orchestrator")
    monkeypatch.setattr(orchestrator, "__file__", str(tmp_path / "link/__init__.py"))
    assert noop.checkout_root() == str(checkout)


@pytest.mark.parametrize("missing", ["pyproject.toml", "images/agent/Dockerfile"])
def test_no_checkout_without_its_two_files(
    checkout: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    monkeypatch.setattr(orchestrator, "__file__", str(checkout / "orchestrator/__init__.py"))
    assert noop.checkout_root() == str(checkout)
    (checkout / missing).unlink()
    (checkout / missing).mkdir()  # a folder is not the file
    assert noop.checkout_root() is None


def test_the_offline_request_names_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert noop.offline_request("repo") == "repo offline default"
    monkeypatch.setenv("DOCKER_HOST", "")
    assert noop.offline_request("repo") == "repo offline default"
    monkeypatch.setenv("DOCKER_HOST", "tcp://h:2375")
    assert noop.offline_request("repo") == "repo offline tcp://h:2375"


def test_a_home_is_remembered_in_this_packages_checkout(
    checkout: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "orchestrator.yaml").write_text("image: mine\n")
    monkeypatch.setattr(noop, "checkout_root", lambda: str(checkout))
    noop.remember_home(str(home), "mine")
    assert noop.home_repository(str(checkout), str(home)) == "mine"


def test_outside_a_checkout_no_home_is_remembered(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "orchestrator.yaml").write_text("image: mine\n")
    monkeypatch.setattr(noop, "checkout_root", lambda: None)
    monkeypatch.setattr(noop, "remember_home_in", pytest.fail)
    noop.remember_home(str(home), "mine")


# noop: the console's answer


class Inspect:
    """The direct inspect's stand-in: the attributes of each tag, or a failure."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.images: dict[str, dict[str, Any]] = {}
        self.fault: Exception | None = None
        self.asked: list[str] = []
        monkeypatch.setattr(direct, "inspect_image", self)

    def __call__(self, ref: str) -> dict[str, Any] | None:
        self.asked.append(ref)
        if self.fault is not None:
            raise self.fault
        return self.images.get(ref)


def record_build(checkout: Path, repository: str = "orchestrator-agent") -> None:
    digest = inputs.inputs_hash(checkout, f"offline:{recipe_hash()}")
    cache = InputsCache(checkout)
    cache.record(noop.offline_request(repository), Recorded(digest, TAG, IMAGE_ID, "base:1"))
    cache.save()


@pytest.fixture()
def engine(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> Inspect:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    record_build(checkout)
    found = Inspect(monkeypatch)
    found.images[TAG] = {"Id": IMAGE_ID, "RepoTags": [TAG, "orchestrator-agent:latest"]}
    return found


def test_the_answer_is_in_this_packages_checkout_by_default(
    checkout: Path,
    home: Path,
    engine: Inspect,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(noop, "checkout_root", lambda: str(checkout))
    assert noop.answer_from_console(ARGS) is True
    assert capsys.readouterr().out == f"{TAG} is up to date (base base:1); nothing to build\n"


def test_outside_a_checkout_the_cli_answers(
    home: Path, engine: Inspect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(noop, "checkout_root", lambda: None)
    assert noop.answer_from_console(ARGS) is False
    assert engine.asked == []


def test_a_relative_home_is_taken_from_the_current_folder(
    checkout: Path,
    home: Path,
    engine: Inspect,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (home / "orchestrator.yaml").write_text("image: mine\n")
    noop.remember_home_in(str(checkout), str(home), "orchestrator-agent")
    monkeypatch.chdir(home.parent)
    monkeypatch.setenv("ORCHESTRATOR_HOME", home.name)
    assert noop.answer_from_console(ARGS, str(checkout)) is True
    # the same name from another folder is another home, not known
    (checkout / "home").mkdir()
    (checkout / "home/orchestrator.yaml").write_text("image: mine\n")
    monkeypatch.chdir(checkout)
    assert noop.answer_from_console(ARGS, str(checkout)) is False


def test_without_a_home_setting_the_current_folder_is_the_home(
    checkout: Path, home: Path, engine: Inspect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCHESTRATOR_HOME")
    (home / "orchestrator.yaml").write_text("image: mine\n")
    noop.remember_home_in(str(checkout), str(home), "orchestrator-agent")
    monkeypatch.chdir(home)
    assert noop.answer_from_console(ARGS, str(checkout)) is True
    monkeypatch.chdir(checkout)
    assert noop.answer_from_console(ARGS, str(checkout)) is True  # no orchestrator.yaml here
    (checkout / "orchestrator.yaml").write_text("image: other\n")
    assert noop.answer_from_console(ARGS, str(checkout)) is False


@pytest.mark.parametrize("fault", [direct.DirectFailed("engine refused"), OSError("reset")])
def test_an_engine_failing_leaves_the_answer_to_the_cli(
    checkout: Path,
    home: Path,
    engine: Inspect,
    fault: Exception,
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine.fault = fault
    assert noop.answer_from_console(ARGS, str(checkout)) is False
    assert engine.asked == [TAG]
    assert capsys.readouterr().out == ""


# inputs: the record of a build


def test_a_recorded_build_is_equal_by_its_four_parts() -> None:
    one = Recorded("h", "t", "i", "b")
    assert one == Recorded("h", "t", "i", "b")
    assert hash(one) == hash(Recorded("h", "t", "i", "b")) == hash(("h", "t", "i", "b"))
    for other in (Recorded("x", "t", "i", "b"), Recorded("h", "t", "i", "x")):
        assert one != other
    assert one != ("h", "t", "i", "b")
    assert repr(one) == "Recorded('h', 't', 'i', 'b')"


# inputs: the files and their hash


def test_caches_and_compiled_python_are_no_inputs(checkout: Path) -> None:
    (checkout / "orchestrator/__pycache__").mkdir()
    (checkout / "orchestrator/__pycache__/notes.txt").write_text("x")
    (checkout / "images/agent/__pycache__").write_text("a file of that name")
    (checkout / "orchestrator/old.pyo").write_text("")
    (checkout / "orchestrator/old.pyc").write_text("")
    (checkout / "orchestrator/keep.PYO").write_text("")
    (checkout / "orchestrator/__PYCACHE__").mkdir()
    (checkout / "orchestrator/__PYCACHE__/kept.py").write_text("")
    assert inputs.input_files(checkout) == [
        "images/agent/Dockerfile",
        "orchestrator/__PYCACHE__/kept.py",
        "orchestrator/__init__.py",
        "orchestrator/keep.PYO",
        "pyproject.toml",
    ]


def test_the_inputs_hash_is_of_the_base_python_and_each_files_name_and_bytes(
    checkout: Path,
) -> None:
    import hashlib

    want = hashlib.sha256(b"base=offline:x\npython=3.11\n")
    for rel in inputs.input_files(checkout):
        want.update(rel.encode() + b"\0")
        want.update(hashlib.sha256((checkout / rel).read_bytes()).digest())
    assert inputs.inputs_hash(checkout, "offline:x") == want.hexdigest()


# inputs: the cache


def cache_file(root: Path) -> Path:
    return root / ".cache/image-inputs.json"


def stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def test_the_cache_is_in_the_checkout_whatever_the_current_folder(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cache = InputsCache(str(checkout))
    assert cache.path == str(checkout / ".cache/image-inputs.json")
    cache.record("r", Recorded("h", "t", "i", "b"))
    cache.save()
    assert cache_file(checkout).is_file()
    assert not (tmp_path / ".cache").exists()


def test_the_cache_is_written_sorted_with_its_three_parts_and_mode_644(checkout: Path) -> None:
    cache = InputsCache(checkout)
    cache.record("r", Recorded("h", "t", "i", "b"))
    cache.save()
    data = {
        "builds": {"r": {"base": "b", "image_id": "i", "inputs_hash": "h", "tag": "t"}},
        "configs": {},
        "files": {},
        "version": 1,
    }
    assert cache_file(checkout).read_text() == json.dumps(data)
    assert cache_file(checkout).stat().st_mode & 0o7777 == 0o644


@pytest.mark.parametrize(
    "stored",
    [
        {"version": 1, "files": [], "builds": "x", "configs": None},
        {"version": 1},
        {"version": 2, "files": {"a": 1}},
        ["not", "a", "mapping"],
    ],
)
def test_a_cache_of_another_shape_starts_empty(checkout: Path, stored: Any) -> None:
    cache_file(checkout).parent.mkdir()
    cache_file(checkout).write_text(json.dumps(stored))
    cache = InputsCache(checkout)
    assert cache.recorded("r") is None
    cache.record("r", Recorded("h", "t", "i", "b"))
    cache.save()
    assert set(json.loads(cache_file(checkout).read_text())) == {
        "version",
        "files",
        "builds",
        "configs",
    }
    assert InputsCache(checkout).recorded("r") == Recorded("h", "t", "i", "b")


def test_a_cache_that_is_no_json_starts_empty(checkout: Path) -> None:
    cache_file(checkout).parent.mkdir()
    cache_file(checkout).write_text("{not json")
    assert InputsCache(checkout).recorded("r") is None


def test_an_unchanged_file_is_not_read_again(checkout: Path) -> None:
    rel = "orchestrator/__init__.py"
    cache_file(checkout).parent.mkdir()
    fake = "ab" * 32
    cache_file(checkout).write_text(
        json.dumps({"version": 1, "files": {rel: [*stamp(checkout / rel), fake]}, "builds": {}})
    )
    assert InputsCache(checkout).digest(rel) == bytes.fromhex(fake)


@pytest.mark.parametrize(
    "entry",
    [
        lambda st: [*st, "ab" * 32, "extra"],
        lambda st: [*st[:2], "ab" * 32],
        lambda st: [st[0] + 1, *st[1:], "ab" * 32],
        lambda st: [*st, "not hex"],
        lambda st: {"size": st[0]},
    ],
)
def test_a_changed_or_odd_entry_reads_the_file_again(checkout: Path, entry: Any) -> None:
    import hashlib

    rel = "orchestrator/__init__.py"
    (checkout / rel).write_text("X = 1\n")
    cache_file(checkout).parent.mkdir()
    cache_file(checkout).write_text(
        json.dumps({"version": 1, "files": {rel: entry(stamp(checkout / rel))}})
    )
    cache = InputsCache(checkout)
    real = hashlib.sha256(b"X = 1\n").digest()
    assert cache.digest(rel) == real
    cache.save()
    files = json.loads(cache_file(checkout).read_text())["files"]
    assert files == {rel: [*stamp(checkout / rel), real.hex()]}


def test_a_digest_read_is_remembered(checkout: Path) -> None:
    rel = "pyproject.toml"
    cache = InputsCache(checkout)
    first = cache.digest(rel)
    cache.save()
    files = json.loads(cache_file(checkout).read_text())["files"]
    assert files == {rel: [*stamp(checkout / rel), first.hex()]}


def test_files_no_longer_inputs_are_forgotten(checkout: Path) -> None:
    cache = InputsCache(checkout)
    for rel in ("pyproject.toml", "orchestrator/__init__.py"):
        cache.digest(rel)
    cache.save()
    cache = InputsCache(checkout)
    cache.forget_missing(["pyproject.toml", "other"])
    cache.save()
    assert list(json.loads(cache_file(checkout).read_text())["files"]) == ["pyproject.toml"]
    cache = InputsCache(checkout)
    cache.forget_missing(["pyproject.toml"])
    cache.save()  # nothing to forget: not written
    assert list(json.loads(cache_file(checkout).read_text())["files"]) == ["pyproject.toml"]


def test_an_unchanged_cache_is_not_written(checkout: Path, home: Path) -> None:
    config = home / "orchestrator.yaml"
    config.write_text("image: mine\n")
    cache = InputsCache(checkout)
    cache.record_config(str(config), "mine")
    cache.digest("pyproject.toml")
    cache.save()
    written = cache_file(checkout).read_text()
    # the same again, then the file changed by someone else: no save overwrites it
    again = InputsCache(checkout)
    again.record_config(str(config), "mine")
    again.digest("pyproject.toml")
    assert again.recorded("r") is None
    cache_file(checkout).write_text("changed elsewhere")
    again.save()
    cache.save()  # saved once already
    assert cache_file(checkout).read_text() == "changed elsewhere"
    fresh = InputsCache(checkout)
    fresh.save()
    assert cache_file(checkout).read_text() == "changed elsewhere"
    assert written != "changed elsewhere"


def test_a_cache_that_cannot_be_written_is_not_used(checkout: Path) -> None:
    (checkout / ".cache").write_text("a file where the folder goes")
    cache = InputsCache(checkout)
    cache.record("r", Recorded("h", "t", "i", "b"))
    cache.save()
    assert (checkout / ".cache").read_text() == "a file where the folder goes"
