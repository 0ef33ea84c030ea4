"""The Swarm backend (``runtime.backend: swarm``): groups as services of a Docker swarm,
their runners dialling the daemon over an internal overlay network."""

from orchestrator.runtime.swarm.backend import SwarmBackend

__all__ = ["SwarmBackend"]
