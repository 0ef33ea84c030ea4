"""Storage across the swarm's nodes: a group's folders must be the same files on every
node that may run it, and on the daemon's (one filesystem mounted at the same path on
each: NFS, CephFS; or one node's disk, with the groups pinned there by a placement
constraint). The check writes a token in ``groups/`` and runs a global service (a task
on each node the groups may run on, by the same constraints) that reads it from the
same host path: a node that sees another token, or none, is named.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.fsatomic import write_atomic
from orchestrator.limits import STORAGE_PROBE_TIMEOUT_SECONDS
from orchestrator.runtime.base import LABEL_HOME
from orchestrator.runtime.engine import call_engine
from orchestrator.runtime.swarm.service import ENDED, parse_time

if TYPE_CHECKING:
    from orchestrator.runtime.swarm.backend import SwarmBackend

PROBE_FILE = ".orchestrator-storage-probe"
POLL_SECONDS = 0.2
READER = (
    "import os\n"
    "try:\n"
    "    seen = open('/probe/" + PROBE_FILE + "').read().strip()\n"
    "except OSError as exc:\n"
    "    seen = 'unreadable: ' + exc.strerror\n"
    "print('probe', os.environ['NODE'], seen, flush=True)\n"
)


def host_groups_dir(backend: SwarmBackend) -> Path:
    """The groups' folder as the engines see it (ORCHESTRATOR_HOST_HOME when the daemon
    runs in a container)."""
    root = backend.config.host_home or backend.home.root
    return Path(root) / backend.home.groups_dir.relative_to(backend.home.root)


def check_storage(backend: SwarmBackend, image: str) -> list[str]:
    """What is wrong with the groups' storage on the nodes that may run them (by
    ``runtime.swarm.constraints``), one line per node; [] when every one sees the token
    written here. ``image`` runs the reader (the agent image: every node needs it)."""
    token = secrets.token_hex(16)
    probe = backend.home.groups_dir / PROBE_FILE
    backend.home.groups_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(probe, token + "\n", mode=0o644)
    name = f"orchestrator-probe-{backend.home.identity}-{token[:8]}"
    task: dict[str, Any] = {
        "ContainerSpec": {
            "Image": image,
            "Args": ["python3", "-c", READER],
            "Env": ["NODE={{.Node.ID}}"],
            "User": "0:0",
            "ReadOnly": True,
            "CapabilityDrop": ["ALL"],
            "Mounts": [
                {
                    "Type": "bind",
                    "Source": str(host_groups_dir(backend)),
                    "Target": "/probe",
                    "ReadOnly": True,
                }
            ],
        },
        "RestartPolicy": {"Condition": "none"},
        "Placement": {"Constraints": list(backend.settings.constraints)},
    }
    try:
        created = call_engine(
            f"create service {name}",
            lambda: backend.api.create_service(
                task, name=name, labels={LABEL_HOME: backend.home.identity}, mode={"Global": {}}
            ),
        )
        try:
            tasks = _wait(backend, str(created["ID"]))
            seen = _seen(backend, str(created["ID"]))
        finally:
            with contextlib.suppress(Exception):
                call_engine(
                    f"remove service {name}", lambda: backend.api.remove_service(created["ID"])
                )
    finally:
        probe.unlink(missing_ok=True)
    nodes = call_engine("list nodes", backend.api.nodes)
    names = {n["ID"]: n.get("Description", {}).get("Hostname", n["ID"]) for n in nodes}
    if not tasks:
        return [
            "no node may run the groups"
            + (
                f" (constraints: {', '.join(backend.settings.constraints)})"
                if backend.settings.constraints
                else ""
            )
        ]
    problems = []
    for node, state, error in tasks:
        shown = names.get(node, node)
        if node not in seen:
            problems.append(
                f"node {shown}: the probe did not run ({state}: {error or 'no output'})"
            )
        elif seen[node] != token:
            what = "another folder" if not seen[node].startswith("unreadable") else seen[node]
            problems.append(f"node {shown}: {host_groups_dir(backend)} is {what} there")
    return problems


def _wait(backend: SwarmBackend, service: str) -> list[tuple[str, str, str]]:
    """(node, state, error) of each task once all have ended."""
    deadline = time.monotonic() + STORAGE_PROBE_TIMEOUT_SECONDS
    while True:
        tasks = call_engine(
            f"list the tasks of service {service}",
            lambda: backend.api.tasks(filters={"service": service}),
        )
        ended = [t for t in tasks if t.get("Status", {}).get("State") in ENDED]
        if tasks and len(ended) == len(tasks):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(POLL_SECONDS)
    newest: dict[str, dict[str, Any]] = {}
    for t in tasks:
        node = str(t.get("NodeID", ""))
        if node and (
            node not in newest
            or (parse_time(t.get("CreatedAt")) or 0)
            > (parse_time(newest[node].get("CreatedAt")) or 0)
        ):
            newest[node] = t
    return [
        (node, str(t.get("Status", {}).get("State")), str(t.get("Status", {}).get("Err", "")))
        for node, t in sorted(newest.items())
    ]


def _seen(backend: SwarmBackend, service: str) -> dict[str, str]:
    """node -> what its task read, from the service's log."""
    out: dict[str, str] = {}
    raw = call_engine(
        f"read the log of service {service}",
        lambda: list(backend.api.service_logs(service, stdout=True, stderr=True, follow=False)),
    )
    for chunk in raw:
        text = chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else str(chunk)
        for line in text.splitlines():
            _, _, rest = line.partition("probe ")
            node, _, seen = rest.partition(" ")
            if node:
                out[node] = seen.strip()
    return out
