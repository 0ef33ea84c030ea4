"""The channel interface."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.config import OrchestratorConfig
    from orchestrator.daemon.core import Daemon


class Channel(abc.ABC):
    name: str = ""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    @classmethod
    def enabled(cls, daemon: Daemon) -> bool:
        """Whether the configuration asks for this channel."""
        return True

    @classmethod
    def settings(cls, config: OrchestratorConfig) -> tuple[object, ...]:
        """The parts of the configuration this channel runs with: a reload starts it
        again when they change."""
        return ()

    @abc.abstractmethod
    def start(self) -> None:
        """Begin accepting messages (in background threads)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop accepting messages."""

    def where(self) -> str:
        """Where it listens, for people (a socket path, an address)."""
        return ""
