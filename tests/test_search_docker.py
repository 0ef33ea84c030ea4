"""Memory search on the real engine: the model's memory_search in a container with no
network reaches the host's index, and a file the agent wrote is found in the same turn
it searches."""

from __future__ import annotations

import pytest

from tests.searchcorpus import write_corpus
from tests.test_learned_docker import replies, served  # noqa: F401 (a fixture)

pytestmark = pytest.mark.docker


def test_the_agent_searches_its_memory_through_the_host(served) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    memory = served.home.groups_dir / "fam" / "memory"
    replies(served, "hello")  # the container is up and owns its memory folder
    write_corpus(memory)
    [found] = replies(served, "search memory for the piano lessons")
    assert found.startswith("Found in memory:\n\nmemory/imports/old-assistant/MEMORY.md:")
    assert "**Piano** **lessons** on Thursdays" in found
    # the agent remembers a fact (written inside the container), then finds it
    replies(served, "remember that the okapi lives in the Congo")
    [again] = replies(served, "search memory for okapi")
    assert "memory/facts/" in again and "**okapi**" in again.lower()
    assert (served.home.state_dir / "index" / "fam.sqlite").exists()
