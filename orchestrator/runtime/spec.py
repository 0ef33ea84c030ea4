"""The container of one group, as a pure function of its inputs.

What is mounted, as whom it runs, which limits and which network: decided here from
data alone, and unit-tested without an engine. Nothing of the host is visible but the
mounts listed in ``group_mounts``: no Docker socket, no other group, no project tree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from orchestrator.groups import Group
from orchestrator.groups.mcpconfig import McpSettings
from orchestrator.limits import CONTAINER_TMPFS_BYTES
from orchestrator.protocol import INSTRUCTIONS_FILE, LEARNED_FILE
from orchestrator.runtime.base import (
    LABEL_CONFIG_HASH,
    LABEL_GROUP,
    LABEL_HOME,
    LABEL_PROJECT,
    LABEL_SETTINGS_HASH,
    BindMount,
    ContainerSpec,
)

AGENT_DIR = "/workspace/agent"
SKILLS_DIR = "/workspace/skills"
EXTRA_DIR = "/workspace/extra"
RUNTIME_DIR = "/run/orchestrator"
EGRESS_DIR = "/run/orchestrator-egress"  # the shell's egress gate (read-only; web.enabled)
CONTAINER_HOME = "/home/agent"
# Entries of the group folder that are mounted.
MEMORY, SESSIONS, FILES = "memory", "sessions", "files"
# Host-owned files of the group folder, never mounted: the runner asks the host for
# them at each fresh context, so a host write shows there (a single-file bind mount
# would pin the inode the host's atomic rename replaces).
INSTRUCTIONS, LEARNED = INSTRUCTIONS_FILE, LEARNED_FILE
# The container's main process: the runner, serving turns on /run/orchestrator/runner.sock.
RUNNER_COMMAND = ("orchestrator", "agent", "serve")


def container_name(project: str, folder: str) -> str:
    """``<project>.<folder>``: neither part may hold a dot, so no two (project, folder)
    pairs share a name (with '-' both 'prod-team'+'a' and 'prod'+'team-a' gave
    'prod-team-a')."""
    return f"{project}.{folder}"


def run_as(
    owner_uid: int, owner_gid: int, fallback: tuple[int, int], rootless: bool
) -> tuple[int, int]:
    """The uid:gid a group's container runs as.

    The owner of the group folder, so files the agent writes belong to that owner; never
    root: a root-owned folder gets the unprivileged fallback. A rootless engine maps its
    container root to the unprivileged user who runs it, so there 0:0 is that user.
    """
    if rootless:
        return 0, 0
    if owner_uid == 0:
        return fallback
    return owner_uid, owner_gid


def group_mounts(
    group: Group,
    runtime_dir: Path,
    skills_root: Path | None,
    extra: tuple[BindMount, ...] = (),
    skills: Sequence[tuple[str, Path]] | None = None,
) -> tuple[BindMount, ...]:
    """Exactly the mounts of the ARCHITECTURE table, in a fixed order. ``skills``: the
    (name, folder) of each skill selected, when the group sees installed skills (each
    is mounted read-only at /workspace/skills/<name>); None: the built-in ones of
    ``skills_root``, as group.yaml ``skills:`` selects them."""
    mounts = [
        BindMount(str(group.memory_dir), f"{AGENT_DIR}/memory", read_only=False),
        BindMount(str(group.sessions_dir), f"{AGENT_DIR}/sessions", read_only=False),
        BindMount(str(group.files_dir), f"{AGENT_DIR}/files", read_only=False),
        BindMount(str(runtime_dir), RUNTIME_DIR, read_only=False),
    ]
    if skills is not None:
        mounts.extend(
            BindMount(str(source), f"{SKILLS_DIR}/{name}", read_only=True)
            for name, source in skills
        )
    elif skills_root is not None:
        if group.config.skills == "all":
            mounts.append(BindMount(str(skills_root), SKILLS_DIR, read_only=True))
        else:
            mounts.extend(
                BindMount(str(skills_root / name), f"{SKILLS_DIR}/{name}", read_only=True)
                for name in group.config.skills
            )
    mounts.extend(extra)
    return tuple(mounts)


def container_spec(
    *,
    project: str,
    home_id: str,
    group: Group,
    image: str,
    user: tuple[int, int],
    runtime_dir: Path,
    skills_root: Path | None,
    extra_mounts: tuple[BindMount, ...] = (),
    skills: Sequence[tuple[str, Path]] | None = None,
    egress_dir: Path | None = None,
    image_setting: str = "",
) -> ContainerSpec:
    """The full, hardened spec of ``group``'s container, labelled with its hashes.
    ``egress_dir``: the host-owned folder of the group's egress gate socket, mounted
    read-only when the group's web policy is enabled. ``image_setting``: see
    ``with_hashes``."""
    uid, gid = user
    settings = group.config.container
    tmpfs_size = CONTAINER_TMPFS_BYTES
    spec = ContainerSpec(
        name=container_name(project, group.folder),
        image=image,
        command=RUNNER_COMMAND,
        user=f"{uid}:{gid}",
        labels={LABEL_PROJECT: project, LABEL_GROUP: group.folder, LABEL_HOME: home_id},
        mounts=group_mounts(group, runtime_dir, skills_root, extra_mounts, skills)
        + (
            (BindMount(str(egress_dir), EGRESS_DIR, read_only=True),)
            if egress_dir is not None and group.config.web.enabled
            else ()
        ),
        environment={
            "HOME": CONTAINER_HOME,
            "ORCHESTRATOR_GROUP": group.folder,
            "ORCHESTRATOR_AGENT_DIR": AGENT_DIR,
            "ORCHESTRATOR_RUNTIME_DIR": RUNTIME_DIR,
            "ORCHESTRATOR_PROVIDER": group.config.provider,
            "ORCHESTRATOR_MODEL": group.config.model,
            "ORCHESTRATOR_SESSION_MODE": group.config.session_mode,
            "ORCHESTRATOR_CONTEXT_SHARE": str(group.config.context_budget.share),
            "ORCHESTRATOR_DISK_BYTES": str(settings.disk_bytes),
            "ORCHESTRATOR_SANDBOX": "1",
            **(
                {"ORCHESTRATOR_EGRESS_SOCKET": f"{EGRESS_DIR}/proxy.sock"}
                if egress_dir is not None and group.config.web.enabled
                else {}
            ),
            **(
                {"ORCHESTRATOR_MCP": mcp_setting(group.config.mcp)}
                if group.config.mcp.servers
                else {}
            ),
            **(
                {"ORCHESTRATOR_CONTEXT_BUDGET": str(group.config.context_budget.max_chars)}
                if group.config.context_budget.max_chars is not None
                else {}
            ),
        },
        tmpfs={
            "/tmp": f"rw,nosuid,nodev,size={tmpfs_size},mode=1777",
            CONTAINER_HOME: f"rw,nosuid,nodev,size={tmpfs_size},mode=0700,uid={uid},gid={gid}",
        },
        working_dir=AGENT_DIR,
        hostname=group.folder,
        network_mode="bridge" if settings.network == "bridge" else "none",
        memory_bytes=settings.memory_bytes,
        nano_cpus=round(settings.cpus * 1e9),
        pids_limit=settings.pids,
    )
    return with_hashes(spec, image_setting)


def with_hashes(spec: ContainerSpec, image_setting: str = "") -> ContainerSpec:
    """``spec`` labelled with its settings hash and its config hash (all of it):
    reconcile tells a new release's image from new settings by the two. The settings
    hash holds everything but the image, in whose place ``image_setting`` counts: empty
    for the release's agent image (a new release is not a new setting), the image
    itself for a group's own (its packages are the group's settings)."""
    hashes = (LABEL_CONFIG_HASH, LABEL_SETTINGS_HASH)
    plain = {k: v for k, v in spec.labels.items() if k not in hashes}
    settings = config_hash(replace(spec, image=image_setting, labels=plain))
    labelled = replace(spec, labels={**plain, LABEL_SETTINGS_HASH: settings})
    return replace(labelled, labels={**labelled.labels, LABEL_CONFIG_HASH: config_hash(labelled)})


def mcp_setting(mcp: McpSettings) -> str:
    """The runner's view of the group's MCP servers (ORCHESTRATOR_MCP): each stdio
    server's command and the tools approved of every server; who may use which is the
    host's decision, made per turn."""
    servers: dict[str, dict[str, Any]] = {}
    for server in mcp.servers:
        entry: dict[str, Any] = {"kind": server.kind, "tools": dict(server.tools)}
        if server.remote is None:
            entry.update(command=server.command, args=list(server.args), env=dict(server.env))
        servers[server.name] = entry
    return json.dumps({"servers": servers}, sort_keys=True, separators=(",", ":"))


def _spec_data(spec: ContainerSpec) -> dict[str, Any]:
    """The spec as ``dataclasses.asdict`` gives it, as far as JSON can tell (tuples and
    lists encode alike), without asdict's deep copy of every value: a spec holds only
    text, numbers, tuples of text and its bind mounts (status computes one per group)."""
    data = {f.name: getattr(spec, f.name) for f in fields(spec)}
    data["mounts"] = [
        {"source": m.source, "target": m.target, "read_only": m.read_only} for m in spec.mounts
    ]
    return data


def config_hash(spec: ContainerSpec) -> str:
    """sha256 of the spec as sorted JSON, leaving out the hash label itself."""
    data = _spec_data(spec)
    data["labels"] = {k: v for k, v in spec.labels.items() if k != LABEL_CONFIG_HASH}
    data["environment"] = dict(spec.environment)
    data["tmpfs"] = dict(spec.tmpfs)
    if not spec.placement:
        # added with the Swarm backend: left out when empty, so the hash of a container
        # made before it is unchanged and nothing is made again for it
        del data["placement"]
    encoded = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()
