"""An offline image build with nothing to do, answered before the CLI loads: what it may
answer, and everything it must leave to the CLI."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.image import inputs, noop
from orchestrator.image.inputs import InputsCache, Recorded
from orchestrator.image.recipe import recipe_hash
from tests.imagebuild import ARGS, IMAGE_ID, TAG, image_home  # noqa: F401  (fixture: home)


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "images/agent").mkdir(parents=True)
    (root / "orchestrator/sub/__pycache__").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "images/agent/Dockerfile").write_text("FROM scratch\n")
    (root / "orchestrator/__init__.py").write_text("")
    (root / "orchestrator/sub/mod.py").write_text("X = 1\n")
    (root / "orchestrator/sub/__pycache__/mod.cpython-311.pyc").write_bytes(b"\0")
    (root / "orchestrator/sub/old.pyc").write_bytes(b"\0")
    return root


class Engine:
    """A Unix socket answering image inspects from ``images`` (tag -> attributes)."""

    def __init__(self, path: Path) -> None:
        self.images: dict[str, dict[str, object]] = {}
        self.asked: list[str] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                line = conn.recv(4096).split(b"\r\n", 1)[0].decode()
                ref = line.split(" ")[1].removeprefix("/images/").removesuffix("/json")
                ref = ref.replace("%3A", ":").replace("%2F", "/")
                self.asked.append(ref)
                if ref in self.images:
                    body = json.dumps(self.images[ref]).encode()
                    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + body)
                else:
                    conn.sendall(b"HTTP/1.0 404 Not Found\r\n\r\n{}")


@pytest.fixture()
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    path = tmp_path / "engine.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    served = Engine(path)
    yield served
    served.server.close()


def record_build(checkout: Path, repository: str = "orchestrator-agent") -> None:
    """What a finished offline build records for ``repository``."""
    digest = inputs.inputs_hash(checkout, f"offline:{recipe_hash()}")
    cache = InputsCache(checkout)
    cache.record(noop.offline_request(repository), Recorded(digest, TAG, IMAGE_ID, "base:1"))
    cache.save()


def test_input_files_are_the_sources_in_order_of_their_parts_without_compiled_python(
    checkout: Path,
) -> None:
    (checkout / "orchestrator/sub-b.py").write_text("")  # "-" sorts before "/" as text
    (checkout / "orchestrator/linked").symlink_to(checkout / "orchestrator/sub")
    (checkout / "orchestrator/gone.py").symlink_to(checkout / "nothing")
    assert inputs.input_files(checkout) == [
        "images/agent/Dockerfile",
        "orchestrator/__init__.py",
        "orchestrator/sub/mod.py",
        "orchestrator/sub-b.py",
        "pyproject.toml",
    ]


def test_the_inputs_hash_changes_with_a_files_bytes_or_name_and_not_with_a_touch(
    checkout: Path,
) -> None:
    first = inputs.inputs_hash(checkout, "offline:x")
    assert inputs.inputs_hash(checkout, "offline:y") != first
    os.utime(checkout / "orchestrator/sub/mod.py", ns=(1, 1))
    assert inputs.inputs_hash(checkout, "offline:x") == first
    (checkout / "orchestrator/sub/mod.py").write_text("X = 2\n")
    second = inputs.inputs_hash(checkout, "offline:x")
    assert second != first
    (checkout / "orchestrator/sub/mod.py").rename(checkout / "orchestrator/sub/other.py")
    assert inputs.inputs_hash(checkout, "offline:x") not in (first, second)


def test_a_home_without_a_configuration_is_answered_with_the_clis_line(
    checkout: Path, home: Path, engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    record_build(checkout)
    engine.images[TAG] = {"Id": IMAGE_ID, "RepoTags": [TAG, "orchestrator-agent:latest"]}
    assert noop.answer_from_console(ARGS, str(checkout)) is True
    assert capsys.readouterr().out == f"{TAG} is up to date (base base:1); nothing to build\n"
    assert engine.asked == [TAG]


@pytest.mark.parametrize(
    "attrs",
    [
        None,  # the tag is gone
        {"Id": "sha256:" + "b" * 64, "RepoTags": [TAG, "orchestrator-agent:latest"]},
        {"Id": IMAGE_ID, "RepoTags": [TAG]},  # :latest is another image
    ],
)
def test_an_image_that_is_not_the_recorded_build_leaves_the_answer_to_the_cli(
    checkout: Path,
    home: Path,
    engine: Engine,
    capsys: pytest.CaptureFixture[str],
    attrs: dict[str, object] | None,
) -> None:
    record_build(checkout)
    if attrs is not None:
        engine.images[TAG] = attrs
    assert noop.answer_from_console(ARGS, str(checkout)) is False
    assert capsys.readouterr().out == ""


def test_a_changed_input_leaves_the_answer_to_the_cli_without_asking_the_engine(
    checkout: Path, home: Path, engine: Engine
) -> None:
    record_build(checkout)
    engine.images[TAG] = {"Id": IMAGE_ID, "RepoTags": [TAG, "orchestrator-agent:latest"]}
    (checkout / "images/agent/Dockerfile").write_text("FROM scratch\nRUN true\n")
    assert noop.answer_from_console(ARGS, str(checkout)) is False
    assert engine.asked == []


def test_a_homes_configuration_is_used_only_as_it_was_when_read_whole(
    checkout: Path, home: Path, engine: Engine
) -> None:
    config = home / "orchestrator.yaml"
    config.write_text("image: mine\n")
    record_build(checkout, "mine")
    engine.images[TAG] = {"Id": IMAGE_ID, "RepoTags": [TAG, "mine:latest"]}
    # never read whole by the CLI: not known here
    assert noop.answer_from_console(ARGS, str(checkout)) is False
    noop.remember_home_in(str(checkout), str(home), "mine")
    assert noop.answer_from_console(ARGS, str(checkout)) is True
    # the file changed since (even to something the CLI would refuse): the CLI reads it
    config.write_text("image: mine\nbogus: [\n")
    assert noop.answer_from_console(ARGS, str(checkout)) is False
    # a folder in its place is not the file that was read
    config.unlink()
    config.mkdir()
    assert noop.answer_from_console(ARGS, str(checkout)) is False


@pytest.mark.parametrize("name", noop._CONFIG_ENV)
def test_a_setting_from_the_environment_leaves_the_answer_to_the_cli(
    checkout: Path, home: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    record_build(checkout)
    engine.images[TAG] = {"Id": IMAGE_ID, "RepoTags": [TAG, "orchestrator-agent:latest"]}
    monkeypatch.setenv(name, "x")
    assert noop.answer_from_console(ARGS, str(checkout)) is False
    assert engine.asked == []


@pytest.mark.parametrize(
    "args",
    [
        ["image", "build"],
        ["image", "build", "--offline", "--force"],
        ["image", "build", "--offline", "--json"],
        ["--home", "/x", "image", "build", "--offline"],
        ["image", "build", "--offline", "--daemon"],
    ],
)
def test_other_arguments_are_the_clis(checkout: Path, home: Path, args: list[str]) -> None:
    record_build(checkout)
    assert noop.answer_from_console(args, str(checkout)) is False


def test_an_engine_that_cannot_be_asked_leaves_the_answer_to_the_cli(
    checkout: Path, home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    record_build(checkout)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    assert noop.answer_from_console(ARGS, str(checkout)) is False
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert noop.answer_from_console(ARGS, str(checkout)) is False


def test_the_names_it_shares_with_the_configuration_are_the_configurations() -> None:
    from orchestrator import config, home

    assert noop.CONFIG_FILE == home.CONFIG_FILE
    assert set(noop._CONFIG_ENV) == {
        config.HTTP_TOKEN_ENV,
        config.HTTP_LISTEN_ENV,
        config.HOST_HOME_ENV,
        config.PROJECT_ENV,
    }
    assert config.OrchestratorConfig(project="p").image == noop.DEFAULT_IMAGE_REPOSITORY
