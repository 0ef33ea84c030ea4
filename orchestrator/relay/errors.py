"""The relay's errors: a request that breaks its rules fails its turn (and only that)."""

from __future__ import annotations

from orchestrator import wire


class RelayViolation(wire.ProtocolError):
    """A request that breaks the relay's rules; it fails the turn."""
