"""Removing what a test left on the engine, when the engine may be removing some of it
at the same time (a swarm's task containers, a container the daemon is replacing): the
containers are listed without an inspect each, and one gone meanwhile is not an error."""

from __future__ import annotations

import contextlib
from typing import Any


def labelled_containers(client: Any, label: str, *, all: bool = True) -> list[str]:
    """The ids of the containers carrying ``label`` (``key=value``), running or not."""
    return [c["Id"] for c in client.api.containers(all=all, filters={"label": label})]


def remove_containers(client: Any, label: str) -> None:
    """Force-remove every container carrying ``label``; one already gone is skipped."""
    from docker.errors import NotFound

    for container_id in labelled_containers(client, label):
        with contextlib.suppress(NotFound):
            client.api.remove_container(container_id, force=True)
