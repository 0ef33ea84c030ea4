"""What the tests of an offline image build with nothing to do share: the request, the
tag and image it names, and the home it is asked about."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.image import noop

ARGS = ["image", "build", "--offline"]
TAG = "orchestrator-agent:0123456789ab"
IMAGE_ID = "sha256:" + "a" * 64


@pytest.fixture(name="home")
def image_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's home (tests/conftest.py) named by ORCHESTRATOR_HOME, with none of the
    variables that leave the answer to the CLI set."""
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(home))
    for name in noop._CONFIG_ENV:
        monkeypatch.delenv(name, raising=False)
    return home
