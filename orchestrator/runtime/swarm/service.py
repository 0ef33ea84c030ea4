"""A group's Swarm service, as pure functions of data: its name, the spec as Swarm runs
it, the body the engine's service API takes, and the state its tasks add up to.

What Swarm cannot express of the Docker backend's hardening, and what replaces it, is
the README's table (One group's container, on Swarm); each difference is decided here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from orchestrator.config.runtime import SwarmSettings
from orchestrator.errors import InvalidConfig
from orchestrator.runtime.base import (
    IDLE,
    LABEL_GROUP,
    LABEL_HOME,
    LABEL_PROJECT,
    STARTING,
    ContainerSpec,
)
from orchestrator.runtime.spec import EGRESS_DIR, RUNTIME_DIR

LABEL_NAME = "org.orchestrator.container"  # the spec's name, on the service and its secrets
# The home of a service's task containers. They do not carry the group's labels (home,
# group, hash): the Docker backend, run on the same home, would take them for its own
# containers (or the old scheme's) and remove them, and Swarm would make them again.
LABEL_TASK_HOME = "org.orchestrator.swarm-home"
LABEL_CREDENTIAL = "org.orchestrator.credential"  # the sha256 of the runner's certificate
SECRET_FILE = "orchestrator-runner"  # /run/secrets/<this> in the group's container
CREDENTIAL_PATH = f"/run/secrets/{SECRET_FILE}"
SERVICE_NAME_MAX = 63
# The runner restarts on its own when it fails (a task killed, an error): at most this
# many times in RESTART_WINDOW; after that the service waits for the next message.
RESTART_ATTEMPTS = 3
RESTART_DELAY_NS = 1_000_000_000
RESTART_WINDOW_NS = 60_000_000_000
STOP_GRACE_NS = 10_000_000_000  # as `docker stop`'s default
# The engine API that takes ContainerSpec.Privileges.NoNewPrivileges (Docker 25).
NO_NEW_PRIVILEGES_API = (1, 44)
# Task states that are over: the task will not run again.
ENDED = frozenset({"complete", "failed", "shutdown", "rejected", "orphaned", "remove"})


def service_name(container: str) -> str:
    """The service of the container spec ``container`` (``<project>.<folder>``): a
    service name is a DNS label (no dot, at most 63 characters), so it is the two parts
    joined by '_', cut to fit, and a hash of the whole name, which keeps two
    (project, folder) pairs apart however they are cut."""
    digest = hashlib.sha256(container.encode()).hexdigest()[:10]
    readable = container.replace(".", "_")[: SERVICE_NAME_MAX - len(digest) - 1]
    return f"{readable}_{digest}"


def secret_name(service: str, fingerprint: str) -> str:
    """The Swarm secret holding a credential of ``service`` (secrets cannot change: a
    new credential is a new secret)."""
    return f"{service[:50]}_{fingerprint[:12]}"


def adapt_spec(
    spec: ContainerSpec, settings: SwarmSettings, daemon_node: str | None
) -> ContainerSpec:
    """``spec`` as a Swarm service runs it: no runner folder (the runner dials the
    daemon and listens nowhere), told where to dial and where its credential is,
    attached to the runner network only (no route out), placed by the configured
    constraints, and on the daemon's node (``daemon_node``) when it mounts the egress
    gate's folder (a Unix socket answers on its own machine only). A group that asks for
    a network of its own is refused: a service cannot have one apart from the runner
    network without also reaching the others on it."""
    if spec.network_mode != "none":
        folder = spec.labels.get(LABEL_GROUP, spec.name)
        raise InvalidConfig(
            f"group {folder!r} asks for container.network: {spec.network_mode}, which the "
            "swarm backend cannot give: its services are on the runner network only",
            hint="use the group's web policy (group.yaml web:) instead; the host fetches for it",
        )
    mounts = tuple(m for m in spec.mounts if m.target != RUNTIME_DIR)
    gate = any(m.target == EGRESS_DIR for m in mounts)
    pinned = [f"node.id=={daemon_node}"] if gate and daemon_node else []
    environment = {
        **{k: v for k, v in spec.environment.items() if k != "ORCHESTRATOR_RUNTIME_DIR"},
        "ORCHESTRATOR_DIAL": settings.address,
        "ORCHESTRATOR_CREDENTIAL": CREDENTIAL_PATH,
    }
    return dataclasses.replace(
        spec,
        mounts=mounts,
        environment=environment,
        network_mode=settings.network,
        placement=tuple(sorted({*spec.placement, *settings.constraints, *pinned})),
    )


def _tmpfs(target: str, options: str) -> dict[str, Any]:
    """A tmpfs mount of the service. Swarm takes a size and a mode, and mounts it
    noexec, nosuid, nodev; an owner (uid=) it cannot set, so a folder meant for the
    runner's user alone is made writable by all (sticky), which inside a container of
    one user is that user."""
    values = dict(part.partition("=")[::2] for part in options.split(",") if "=" in part)
    mode = int(values.get("mode", "1777"), 8)
    if values.get("uid", "0") != "0":
        mode = 0o1777
    tmpfs: dict[str, Any] = {"Mode": mode}
    if values.get("size", "").isdigit():
        tmpfs["SizeBytes"] = int(values["size"])
    return {"Type": "tmpfs", "Target": target, "TmpfsOptions": tmpfs}


def service_body(
    spec: ContainerSpec,
    *,
    secret_id: str,
    secret: str,
    credential: str,
    api_version: tuple[int, int],
) -> dict[str, Any]:
    """The arguments of the engine's service create for ``spec``, scaled to zero:
    ``secret_id``/``secret`` the Swarm secret of its credential, ``credential`` that
    credential's fingerprint (a label the daemon checks runners against)."""
    uid, _, gid = spec.user.partition(":")
    labels = {**spec.labels, LABEL_NAME: spec.name}
    task_labels = {LABEL_NAME: spec.name, LABEL_TASK_HOME: spec.labels.get(LABEL_HOME, "")}
    if LABEL_PROJECT in spec.labels:
        task_labels[LABEL_PROJECT] = spec.labels[LABEL_PROJECT]
    container: dict[str, Any] = {
        "Image": spec.image,
        "Args": list(spec.command),  # as `docker create`'s command: the image's entrypoint stays
        "Hostname": spec.hostname,
        "Env": [f"{k}={v}" for k, v in sorted(spec.environment.items())],
        "Dir": spec.working_dir,
        "User": spec.user,
        "Labels": task_labels,
        "Mounts": [
            {"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only}
            for m in spec.mounts
        ]
        + [_tmpfs(target, options) for target, options in sorted(spec.tmpfs.items())],
        "ReadOnly": spec.read_only_rootfs,
        "Init": spec.init,
        "CapabilityDrop": list(spec.cap_drop),
        "StopGracePeriod": STOP_GRACE_NS,
        "Secrets": [
            {
                "File": {"Name": SECRET_FILE, "UID": uid, "GID": gid or uid, "Mode": 0o400},
                "SecretID": secret_id,
                "SecretName": secret,
            }
        ],
    }
    if "no-new-privileges" in spec.security_opt and api_version >= NO_NEW_PRIVILEGES_API:
        container["Privileges"] = {"NoNewPrivileges": True}
    task: dict[str, Any] = {
        "ContainerSpec": container,
        "Resources": {
            "Limits": {
                "NanoCPUs": spec.nano_cpus,
                "MemoryBytes": spec.memory_bytes,
                "Pids": spec.pids_limit,
            }
        },
        "RestartPolicy": {
            "Condition": "on-failure",
            "Delay": RESTART_DELAY_NS,
            "MaxAttempts": RESTART_ATTEMPTS,
            "Window": RESTART_WINDOW_NS,
        },
        "Placement": {"Constraints": list(spec.placement)},
        "Networks": [{"Target": spec.network_mode}],
    }
    return {
        "name": service_name(spec.name),
        "labels": {**labels, LABEL_CREDENTIAL: credential},
        "task_template": task,
        "mode": {"Replicated": {"Replicas": 0}},
        # nothing listens in it: no virtual IP to balance, names resolve to tasks
        "endpoint_spec": {"Mode": "dnsrr"},
    }


def api_version(text: str | None) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2])) if match else (1, 24)


def parse_time(value: str | None) -> float | None:
    """An engine timestamp (RFC 3339 with nanoseconds) as unix time."""
    if not value or value.startswith("0001-"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    text = head + (f".{frac[:6]}" if frac else "") + "+00:00"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def replicas(service: Mapping[str, Any]) -> int:
    return int(service.get("Spec", {}).get("Mode", {}).get("Replicated", {}).get("Replicas", 0))


def service_state(
    service: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]]
) -> tuple[str, float | None, str | None]:
    """(state, when its runner's task started, that task's container id) of a service
    from its tasks: scaled to zero -> idle; a task running -> running; a task on its
    way (or the scheduler not yet acting on the latest change) -> starting; every task
    of the latest change over (Swarm gave up restarting it) -> exited."""
    if replicas(service) == 0:
        return IDLE, None, None
    live = [t for t in tasks if t.get("DesiredState") in ("running", "ready")]
    running = [t for t in live if t.get("Status", {}).get("State") == "running"]
    if running:
        task = max(running, key=lambda t: str(t.get("Status", {}).get("Timestamp", "")))
        status = task.get("Status", {})
        container = status.get("ContainerStatus", {}).get("ContainerID")
        return "running", parse_time(status.get("Timestamp")), container
    if live:
        return STARTING, None, None
    changed = parse_time(service.get("UpdatedAt")) or 0.0
    since = [t for t in tasks if (parse_time(t.get("CreatedAt")) or 0.0) >= changed]
    if not since:
        return STARTING, None, None  # the scheduler has not made its task yet
    return "exited", None, None


def task_problems(tasks: Sequence[Mapping[str, Any]], limit: int = 5) -> list[str]:
    """The newest tasks' states and errors, for people (why a service does not run)."""
    newest = sorted(tasks, key=lambda t: str(t.get("CreatedAt", "")), reverse=True)[:limit]
    out = []
    for task in newest:
        status = task.get("Status", {})
        line = f"task {task.get('Slot', '?')}: {status.get('State', '?')}"
        if status.get("Err"):
            line += f": {status['Err']}"
        elif status.get("Message"):
            line += f" ({status['Message']})"
        out.append(line)
    return out


def runner_addresses(tasks: Sequence[Mapping[str, Any]], network: str) -> frozenset[str]:
    """The addresses on ``network`` of the tasks that run or are starting: where a
    group's runner may connect from."""
    found = set()
    for task in tasks:
        if task.get("DesiredState") not in ("running", "ready"):
            continue
        for attachment in task.get("NetworksAttachments") or []:
            spec = attachment.get("Network", {}).get("Spec", {})
            if spec.get("Name") != network:
                continue
            for address in attachment.get("Addresses") or []:
                found.add(str(address).partition("/")[0])
    return frozenset(found)
