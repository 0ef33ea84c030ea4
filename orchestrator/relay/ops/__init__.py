"""Request ops: one small class each, behind one protocol (``Op``), found by name. An op
has ``cap(turn)`` (the largest request it accepts, in bytes) and ``handle(turn, frame)``
(the answer, without ``req``); a request that breaks its rules raises RelayViolation
(``relay.errors``), which fails that turn only. Adding an op adds a module and a line
here, and touches nothing else."""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator import protocol

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay


class Op(Protocol):
    name: str

    def cap(self, turn: TurnRelay) -> int: ...

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]: ...


OPS: dict[str, str] = {
    protocol.MODEL_COMPLETE: "orchestrator.relay.ops.model:ModelComplete",
    protocol.REPLY: "orchestrator.relay.ops.reply:Reply",
    protocol.STANDING_GET: "orchestrator.relay.ops.standing:StandingGet",
    protocol.LEARNED_READ: "orchestrator.relay.ops.learned_read:LearnedRead",
    protocol.LEARNED_WRITE: "orchestrator.relay.ops.learned_write:LearnedWrite",
    protocol.MEMORY_SEARCH: "orchestrator.relay.ops.memory_search:MemorySearch",
    protocol.MEMORY_GET: "orchestrator.relay.ops.memory_get:MemoryGet",
    protocol.TASK_SCHEDULE: "orchestrator.relay.ops.task_schedule:TaskSchedule",
    protocol.TASK_LIST: "orchestrator.relay.ops.task_list:TaskList",
    protocol.TASK_CANCEL: "orchestrator.relay.ops.task_cancel:TaskCancel",
}


@cache
def load_op(name: str) -> Op:
    """The op answering requests named ``name`` (one of OPS)."""
    module, _, attr = OPS[name].partition(":")
    op: Op = getattr(importlib.import_module(module), attr)()
    return op
