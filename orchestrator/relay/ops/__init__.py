"""Request ops: one small module each, found by name. A module has ``cap(turn)`` (the
largest request it accepts, in bytes) and ``handle(turn, frame)`` (the answer, without
``req``). Adding an op adds a module and a line here, and touches nothing else."""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType

OPS: dict[str, str] = {
    "model.complete": "orchestrator.relay.ops.model",
    "reply": "orchestrator.relay.ops.reply",
    "standing.get": "orchestrator.relay.ops.standing",
    "learned.read": "orchestrator.relay.ops.learned_read",
    "learned.write": "orchestrator.relay.ops.learned_write",
    "memory.search": "orchestrator.relay.ops.memory_search",
    "memory.get": "orchestrator.relay.ops.memory_get",
    "task.schedule": "orchestrator.relay.ops.task_schedule",
    "task.list": "orchestrator.relay.ops.task_list",
    "task.cancel": "orchestrator.relay.ops.task_cancel",
}


@cache
def load_op(name: str) -> ModuleType:
    return importlib.import_module(OPS[name])
