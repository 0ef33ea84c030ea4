"""The agent image on the real engine."""

from __future__ import annotations

import pytest

from orchestrator import __version__
from tests.conftest import TEST_LABEL

pytestmark = pytest.mark.docker


def test_agent_image_runs_orchestrator_as_non_root(
    docker_client, agent_image, test_project
) -> None:  # type: ignore[no-untyped-def]
    container = docker_client.containers.create(
        agent_image,
        ["sh", "-c", "orchestrator --version && id -u && id -g"],
        user="10001:10001",
        labels={TEST_LABEL: test_project},
        network_mode="none",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
    )
    try:
        container.start()
        status = container.wait(timeout=60)
        output = container.logs().decode().split()
    finally:
        container.remove(force=True)
    assert status["StatusCode"] == 0, output
    assert output[:3] == ["orchestrator,", "version", __version__]
    assert output[-2:] == ["10001", "10001"]
    image = docker_client.images.get(agent_image)
    assert image.labels["org.opencontainers.image.version"] == __version__


def test_second_build_is_a_no_op(docker_client, agent_image) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY
    from orchestrator.image.agent import build_agent_image

    result = build_agent_image(docker_client, DEFAULT_IMAGE_REPOSITORY, offline=True)
    assert result.built is False
    assert result.tag == agent_image
    image = docker_client.images.get(agent_image)
    assert image.labels["org.orchestrator.inputs"] == result.inputs_hash
    assert f"{DEFAULT_IMAGE_REPOSITORY}:latest" in image.tags


def test_the_agent_image_stays_valid_when_another_build_reimports_the_base(
    docker_client, agent_image, test_project
) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY
    from orchestrator.image.agent import agent_image_ref, current_agent_image
    from orchestrator.image.recipe import base_tag

    base = base_tag()
    original = docker_client.images.get(base).id
    # What a second home's build does: import the same recipe again, as a new image id.
    container = docker_client.containers.create(base, ["true"], labels={TEST_LABEL: test_project})
    try:
        repository, _, tag = base.partition(":")
        container.commit(repository=repository, tag=tag, changes=["LABEL reimported=yes"])
        assert docker_client.images.get(base).id != original
        assert current_agent_image(docker_client, DEFAULT_IMAGE_REPOSITORY)[0] == agent_image
        assert agent_image_ref(docker_client, DEFAULT_IMAGE_REPOSITORY) == agent_image
    finally:
        container.remove(force=True)
        docker_client.api.tag(original, *base.split(":"))


def test_doctor_passes_with_engine_and_image(docker_client, agent_image, run) -> None:  # type: ignore[no-untyped-def]
    result = run("doctor", "--json")
    import json

    data = json.loads(result.stdout)
    status = {c["name"]: c["status"] for c in data["checks"]}
    assert status["engine"] == "ok"
    assert status["agent image"] == "ok", data
    assert result.exit_code == 0


def test_a_build_with_nothing_to_do_is_known_from_its_record_and_one_inspect(
    docker_client, agent_image
) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY
    from orchestrator.image.agent import build_agent_image, recorded_noop, source_root

    built = build_agent_image(docker_client, DEFAULT_IMAGE_REPOSITORY, offline=True)
    asked: list[str] = []

    def inspect(ref: str) -> dict[str, object] | None:
        asked.append(ref)
        return dict(docker_client.images.get(ref).attrs)

    known = recorded_noop(DEFAULT_IMAGE_REPOSITORY, inspect)
    assert known is not None and (known.tag, known.image_id, known.built) == (
        built.tag,
        built.image_id,
        False,
    )
    assert asked == [built.tag]  # one inspect, and no build
    # a file touched but unchanged is hashed again and still matches
    source = source_root() / "orchestrator" / "__init__.py"
    source.touch()
    assert recorded_noop(DEFAULT_IMAGE_REPOSITORY, inspect) is not None
    # an image that is not the recorded one (gone, or another id) needs the full check
    assert recorded_noop(DEFAULT_IMAGE_REPOSITORY, lambda ref: None) is None
    assert recorded_noop(DEFAULT_IMAGE_REPOSITORY, lambda ref: {"Id": "sha256:other"}) is None


def test_the_console_answers_a_build_with_nothing_to_do_without_loading_the_cli(
    agent_image, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """`image build --offline` with nothing to do prints the CLI's line without importing
    click, YAML or the engine's SDK; a home's orchestrator.yaml counts only as it was when
    the CLI last read it whole, so a change to it (even one the CLI refuses) is the CLI's."""
    import os
    import subprocess
    import sys

    from orchestrator.image import noop

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in noop._CONFIG_ENV}
    env["ORCHESTRATOR_HOME"] = str(home)

    def build() -> tuple[int, str, str, set[str]]:
        run = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "orchestrator",
                "image",
                "build",
                "--offline",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        imported = {
            line.rsplit("|", 1)[1].strip()
            for line in run.stderr.splitlines()
            if line.startswith("import time:") and "|" in line
        }
        errors = [line for line in run.stderr.splitlines() if not line.startswith("import time:")]
        return run.returncode, run.stdout, "\n".join(errors), imported

    line = f"{agent_image} is up to date"
    code, out, _, imported = build()
    assert (code, out.startswith(line)) == (0, True), out
    assert not {"click", "yaml", "docker"} & imported
    config = home / "orchestrator.yaml"
    config.write_text("image: orchestrator-agent\n")
    code, out, _, imported = build()  # never read whole: the CLI reads it
    assert (code, out.startswith(line), "click" in imported) == (0, True, True), out
    code, out, _, imported = build()  # read whole just now, unchanged since
    assert (code, out.startswith(line)) == (0, True), out
    assert not {"click", "yaml", "docker"} & imported
    config.write_text("image: orchestrator-agent\nbogus: 1\n")
    code, out, err, imported = build()
    assert code != 0 and "bogus" in err and "click" in imported, (code, out, err)


def test_a_build_prunes_its_own_checkouts_older_images_only(docker_client, test_project) -> None:  # type: ignore[no-untyped-def]
    """Another checkout's image (another home or release on the same engine, whose daemon
    may still start containers from it) is never removed by this checkout's build."""
    import io

    from orchestrator.image.agent import _prune_old, source_identity, source_root
    from orchestrator.image.base import ROLE_LABEL, SOURCE_LABEL

    repository = f"orchtest-prune-{test_project}"
    mine = source_identity(source_root())

    def image(tag: str, source: str) -> None:
        dockerfile = f'FROM scratch\nLABEL {ROLE_LABEL}="agent" {SOURCE_LABEL}="{source}"\n'
        docker_client.images.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=f"{repository}:{tag}", rm=True
        )

    try:
        image("old", mine)
        image("theirs", "0123456789abcdef")
        image("new", mine + "-")  # a distinct image (its labels differ) to keep
        _prune_old(docker_client, repository, keep=f"{repository}:new", progress=print)
        tags = {t for i in docker_client.images.list(name=repository) for t in i.tags}
        assert f"{repository}:theirs" in tags and f"{repository}:new" in tags
        assert f"{repository}:old" not in tags
    finally:
        for found in docker_client.images.list(name=repository):
            for tag in found.tags:
                docker_client.images.remove(tag, force=True)
