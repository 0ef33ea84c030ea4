"""No-op rebuild of the agent image: `orchestrator image build` with unchanged inputs,
against `docker image inspect` of the same tag (the least an up-to-date check can cost)."""

from __future__ import annotations

import subprocess
import sys

from bench.harness import Result, interleaved

NAME = "image-noop"


def run(quick: bool) -> Result:
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY
    from orchestrator.image.agent import build_agent_image
    from orchestrator.runtime.engine import connect

    client = connect()
    built = build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True)
    client.close()
    rounds = 5 if quick else 20

    def target() -> None:
        subprocess.run(
            [sys.executable, "-m", "orchestrator", "image", "build", "--offline"],
            check=True,
            capture_output=True,
        )

    def floor() -> None:
        subprocess.run(["docker", "image", "inspect", built.tag], check=True, capture_output=True)

    t, f = interleaved(
        target,
        floor,
        rounds,
        target_label="orchestrator image build (no-op)",
        floor_label="docker image inspect",
    )
    return Result(NAME, t, f, note=f"image {built.tag}; goal: ratio <= 3")
