"""Request ops: one small module each, found by name. A module has ``cap(turn)`` (the
largest request it accepts, in bytes) and ``handle(turn, frame)`` (the answer, without
``req``). Adding an op adds a module and a line here, and touches nothing else."""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType

from orchestrator import protocol

OPS: dict[str, str] = {
    protocol.MODEL_COMPLETE: "orchestrator.relay.ops.model",
    protocol.REPLY: "orchestrator.relay.ops.reply",
    protocol.STANDING_GET: "orchestrator.relay.ops.standing",
    protocol.LEARNED_READ: "orchestrator.relay.ops.learned_read",
    protocol.LEARNED_WRITE: "orchestrator.relay.ops.learned_write",
    protocol.MEMORY_SEARCH: "orchestrator.relay.ops.memory_search",
    protocol.MEMORY_GET: "orchestrator.relay.ops.memory_get",
    protocol.TASK_SCHEDULE: "orchestrator.relay.ops.task_schedule",
    protocol.TASK_LIST: "orchestrator.relay.ops.task_list",
    protocol.TASK_CANCEL: "orchestrator.relay.ops.task_cancel",
}


@cache
def load_op(name: str) -> ModuleType:
    return importlib.import_module(OPS[name])
