"""The ``runtime`` section of orchestrator.yaml: which container backend runs the groups.

    runtime:
      backend: swarm                  # docker (the default) or swarm
      swarm:
        network: orchestrator-runners # the internal overlay network runners dial in on
        daemon: orchestrator          # the daemon's name on it (its certificate names it)
        port: 7070                    # the daemon's runner port
        constraints: []               # placement constraints of every group's service

With ``swarm``, a group is a service of the engine's swarm (scaled to one replica while
active, zero when idle) whose runner opens its connections to the daemon over
``network``; the daemon runs in a container attached to that network (stack.yaml).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.validate import MappingReader

# The backends open_backend can make (orchestrator.runtime.BACKENDS holds their classes).
BACKEND_NAMES = ("docker", "swarm")
DEFAULT_RUNNER_NETWORK = "orchestrator-runners"
DEFAULT_DAEMON_NAME = "orchestrator"
DEFAULT_RUNNER_PORT = 7070
# A network or service name as the engine accepts it (a DNS label; '_' allowed).
NAME_PATTERN = r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}"
DAEMON_NAME_PATTERN = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
# `node.labels.zone == east`, `node.role!=manager`, `node.hostname == n1`: what Swarm takes.
CONSTRAINT_PATTERN = r"(node|engine)\.[A-Za-z0-9_.-]{1,200}\s*(==|!=)\s*[A-Za-z0-9_.:/-]{1,200}"
MAX_CONSTRAINTS = 16


@dataclass(frozen=True)
class SwarmSettings:
    network: str = DEFAULT_RUNNER_NETWORK
    daemon: str = DEFAULT_DAEMON_NAME
    port: int = DEFAULT_RUNNER_PORT
    constraints: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        """Where runners dial: ``daemon:port``."""
        return f"{self.daemon}:{self.port}"


@dataclass(frozen=True)
class RuntimeSettings:
    backend: str = "docker"
    swarm: SwarmSettings = field(default_factory=SwarmSettings)


def parse_runtime(reader: MappingReader) -> RuntimeSettings:
    """The ``runtime`` mapping; InvalidConfig naming the key when a value is wrong."""
    reader.reject_unknown(["backend", "swarm"])
    backend = reader.choice("backend", BACKEND_NAMES, "docker")
    swarm = SwarmSettings()
    if "swarm" in reader.data:
        swarm = _swarm(reader.child("swarm"))
    return RuntimeSettings(backend=backend, swarm=swarm)


def _swarm(reader: MappingReader) -> SwarmSettings:
    reader.reject_unknown(["network", "daemon", "port", "constraints"])
    network = reader.text("network", DEFAULT_RUNNER_NETWORK, max_chars=63, pattern=NAME_PATTERN)
    daemon = reader.text("daemon", DEFAULT_DAEMON_NAME, max_chars=253, pattern=DAEMON_NAME_PATTERN)
    port = reader.whole_number("port", DEFAULT_RUNNER_PORT, 1, 65535, "a port from 1 to 65535")
    raw = reader.raw("constraints", [])
    if not isinstance(raw, list) or len(raw) > MAX_CONSTRAINTS:
        raise reader.fail(
            "constraints",
            f"must be a list of at most {MAX_CONSTRAINTS} placement constraints, such as "
            "['node.labels.orchestrator == groups']",
        )
    constraints = []
    for index, item in enumerate(raw):
        if not isinstance(item, str) or not re.fullmatch(CONSTRAINT_PATTERN, item.strip()):
            raise reader.child_fail(
                "constraints",
                index,
                f"got {item!r}; expected a Swarm placement constraint such as "
                "'node.labels.orchestrator == groups' or 'node.hostname != edge-1'",
            )
        constraints.append(item.strip())
    return SwarmSettings(network=network, daemon=daemon, port=port, constraints=tuple(constraints))
