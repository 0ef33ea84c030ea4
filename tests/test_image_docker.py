"""The agent image on the real engine."""

from __future__ import annotations

import time

import pytest

from orchestrator import __version__
from tests.conftest import TEST_LABEL

pytestmark = pytest.mark.docker


def test_agent_image_runs_orchestrator_as_non_root(docker_client, agent_image) -> None:  # type: ignore[no-untyped-def]
    container = docker_client.containers.create(
        agent_image,
        ["sh", "-c", "orchestrator --version && id -u && id -g"],
        user="10001:10001",
        labels={TEST_LABEL: "1"},
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
    assert output[3:] == ["10001", "10001"]


def test_second_build_is_a_no_op(docker_client, agent_image) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY
    from orchestrator.image.agent import build_agent_image

    started = time.monotonic()
    result = build_agent_image(docker_client, DEFAULT_IMAGE_REPOSITORY, offline=True)
    assert result.built is False
    assert result.tag == agent_image
    image = docker_client.images.get(agent_image)
    assert image.labels["org.orchestrator.inputs"] == result.inputs_hash
    assert f"{DEFAULT_IMAGE_REPOSITORY}:latest" in image.tags
    assert time.monotonic() - started >= 0  # timing is measured in bench/, never asserted


def test_doctor_passes_with_engine_and_image(docker_client, agent_image, run) -> None:  # type: ignore[no-untyped-def]
    result = run("doctor", "--json")
    import json

    data = json.loads(result.stdout)
    status = {c["name"]: c["status"] for c in data["checks"]}
    assert status["engine"] == "ok"
    assert status["agent image"] == "ok", data
    assert result.exit_code == 0
