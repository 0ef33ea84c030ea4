"""Channels: where messages come from. The daemon's own (the command line's socket) are
registered by name here (the HTTP API's routes are served by the service's web server);
each chat app is a kind of account (``orchestrator.config.kinds``), run by the chat-app
core with the app's adapter, so adding one adds a package and touches no core module."""

from __future__ import annotations

import importlib

from orchestrator.channels.base import Channel

# the daemon's own channels: name -> "module:class"
REGISTRY: dict[str, str] = {
    "cli": "orchestrator.channels.control:ControlChannel",
}


def load_channels() -> list[type[Channel]]:
    """The daemon's own channels, then one per kind of chat-app account."""
    from orchestrator.channels.chatapp import ChatAppChannel
    from orchestrator.config.kinds import account_kinds

    classes: list[type[Channel]] = []
    for target in REGISTRY.values():
        module, _, attr = target.partition(":")
        classes.append(getattr(importlib.import_module(module), attr))
    classes += [ChatAppChannel.of_kind(kind) for kind in account_kinds().values()]
    return classes


__all__ = ["REGISTRY", "Channel", "load_channels"]
