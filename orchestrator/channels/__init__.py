"""Channels: where messages come from. Each is a small class registered by name here;
adding a chat app adds a module and a line, and touches no core module."""

from __future__ import annotations

import importlib

from orchestrator.channels.base import Channel

# channel name -> "module:class"
REGISTRY: dict[str, str] = {
    "cli": "orchestrator.channels.control:ControlChannel",
    "http": "orchestrator.channels.http:HttpChannel",
    "telegram": "orchestrator.channels.telegram:TelegramChannel",
    "matrix": "orchestrator.channels.matrix:MatrixChannel",
}


def load_channels() -> list[type[Channel]]:
    classes = []
    for target in REGISTRY.values():
        module, _, attr = target.partition(":")
        classes.append(getattr(importlib.import_module(module), attr))
    return classes


__all__ = ["REGISTRY", "Channel", "load_channels"]
