"""Container runtime: the backend interface (``base``), the backends, specs, lifecycle,
reconcile. ``open_backend`` is the one place a backend is made: a second backend is a
module and a line in BACKENDS."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.config import OrchestratorConfig
    from orchestrator.home import Home
    from orchestrator.runtime.base import ContainerBackend

# backend name (orchestrator.yaml runtime.backend) -> "module:class"; the class's open()
# makes it on the engine's client
BACKENDS: dict[str, str] = {
    "docker": "orchestrator.runtime.docker:DockerBackend",
    "swarm": "orchestrator.runtime.swarm:SwarmBackend",
}
DEFAULT_BACKEND = "docker"


def open_backend(
    config: OrchestratorConfig,
    *,
    client: Any = None,
    timeout: int | None = None,
    home: Home | None = None,
) -> ContainerBackend:
    """The backend orchestrator.yaml names (``runtime.backend``), on ``client`` (the
    engine's, when the caller holds one already) or on a new connection (within
    ``timeout`` seconds), for ``home`` (the Swarm backend keeps its credentials there);
    EngineUnreachable when the engine does not answer."""
    from orchestrator.runtime.engine import connect

    module, _, name = BACKENDS[config.runtime.backend].partition(":")
    backend_class = getattr(importlib.import_module(module), name)
    if client is None:
        client = connect() if timeout is None else connect(timeout=timeout)
    backend: ContainerBackend = backend_class.open(client, config, home)
    return backend
