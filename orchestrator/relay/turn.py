"""Answering one turn's requests on the host.

The daemon makes a TurnRelay for each delivery. Every request is attributed to the
message being delivered: sender, trust, group and the group's provider and model come
from the host's records, never from the frame. Each request is counted (at most
RELAY_OPS_PER_TURN a turn) and size-capped by its op; an unknown op, a malformed frame, a
flood or an oversized request raises RelayViolation, which fails that turn only.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from orchestrator import protocol
from orchestrator.config import OrchestratorConfig
from orchestrator.config.providers import resolve_key
from orchestrator.groups import Group
from orchestrator.limits import RELAY_OPS_PER_TURN, WEB_FETCH_TIMEOUT_SECONDS
from orchestrator.media.images import ImageCache
from orchestrator.memory.embeddings import EmbedderUnavailable
from orchestrator.memory.search import Hit, MemoryIndex, index_for
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.mcp_remote import RemoteLinks
from orchestrator.relay.providers import adapter_for
from orchestrator.relay.providers.base import HostProvider
from orchestrator.relay.windows import Windows
from orchestrator.store.messages import Message, MessageQueue
from orchestrator.store.usage import UsageStore
from orchestrator.web.fetch import Connector, tcp_connector
from orchestrator.web.guard import Resolver, system_resolver

log = logging.getLogger("orchestrator.relay")


class Op(Protocol):
    """One request op (``relay.ops``)."""

    name: str

    def cap(self, turn: TurnRelay) -> int: ...

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]: ...


# request op name -> "module:class" of its op
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
    protocol.PACKAGES_REQUEST: "orchestrator.relay.ops.packages_request:PackagesRequest",
    protocol.MCP_LIST: "orchestrator.relay.ops.mcp:McpList",
    protocol.MCP_CALL: "orchestrator.relay.ops.mcp:McpCall",
    protocol.OTHERS_WORDS: "orchestrator.relay.ops.mcp:OthersWords",
    protocol.MCP_REQUEST: "orchestrator.relay.ops.mcp:McpRequest",
    protocol.WEB_FETCH: "orchestrator.relay.ops.web:WebFetch",
    protocol.WEB_SEARCH: "orchestrator.relay.ops.web:WebSearch",
    protocol.FILE_SEND: "orchestrator.relay.ops.send_file:SendFile",
}


@cache
def load_op(name: str) -> Op:
    """The op answering requests named ``name`` (one of OPS)."""
    module, _, attr = OPS[name].partition(":")
    op: Op = getattr(importlib.import_module(module), attr)()
    return op


@dataclass
class WebAccess:
    """How the host reaches the web for groups: its resolver and connector (tests give
    ones that reach only loopback) and the longest fetch."""

    resolver: Resolver = system_resolver
    connector: Connector = tcp_connector
    timeout: float = float(WEB_FETCH_TIMEOUT_SECONDS)


@dataclass
class RelayContext:
    """What every turn's relay shares: configuration, stores, and provider clients."""

    config: OrchestratorConfig
    queue: MessageQueue
    usage: UsageStore
    notify: Callable[[str], None] = lambda message_id: None  # a message's replies changed
    clock: Callable[[], float] = time.time
    state_dir: Path | None = None  # where memory indexes live (None: no search)
    windows: Windows = field(default_factory=Windows)  # the models' context windows
    mcp: RemoteLinks = field(default_factory=RemoteLinks)  # sessions with remote MCP servers
    web: WebAccess = field(default_factory=WebAccess)  # how pages are reached
    images: ImageCache = field(default_factory=ImageCache)  # re-encoded images, by content
    _adapters: dict[str, tuple[str, HostProvider]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _indexes: dict[str, tuple[threading.Lock, MemoryIndex]] = field(default_factory=dict)
    _warned: set[str] = field(default_factory=set)

    def adapter(self, name: str) -> HostProvider:
        """The client of provider ``name``, made again when its definition or key
        changes; MissingSecret when its key cannot be found."""
        definition = self.config.providers[name]
        key = resolve_key(definition, self.config.secrets_file)
        stamp = hashlib.sha256(repr((definition, key)).encode()).hexdigest()
        with self._lock:
            known = self._adapters.get(name)
            if known is None or known[0] != stamp:
                if known is not None:
                    known[1].close()
                known = (stamp, adapter_for(definition, key))
                self._adapters[name] = known
            return known[1]

    def search(self, group: Group, query: str, max_results: int, fresh: bool) -> list[Hit]:
        """Search ``group``'s memory, updating its index first when ``fresh``."""
        if self.state_dir is None:
            return []
        with self._lock:
            known = self._indexes.get(group.folder)
            if known is None:
                try:
                    index = index_for(
                        self.state_dir,
                        group.path.parent,
                        group.folder,
                        self.config.search_embedder,
                        self.config.search_vector_weight,
                    )
                except EmbedderUnavailable as exc:
                    log.warning("memory search falls back to BM25 alone: %s", exc)
                    index = MemoryIndex(self.state_dir, group.path.parent, group.folder)
                known = self._indexes[group.folder] = (threading.Lock(), index)
        lock, index = known
        with lock:
            if fresh:
                for skipped in index.update().skipped:
                    if skipped not in self._warned and len(self._warned) < 1000:  # once
                        self._warned.add(skipped)
                        log.warning("memory search of %s: skipped %s", group.folder, skipped)
            return index.search(query, max_results)

    def forget_indexes(self) -> None:
        """Close every index (the search settings changed: they are opened again)."""
        with self._lock:
            indexes, self._indexes = list(self._indexes.values()), {}
        for lock, index in indexes:
            with lock:
                index.close()

    def close(self) -> None:
        with self._lock:
            for _, adapter in self._adapters.values():
                adapter.close()
            self._adapters.clear()
        self.mcp.close()
        self.forget_indexes()


class TurnRelay:
    """Answers the requests of one turn (one delivery of ``message``).

    It numbers the replies the turn shows while it runs (send_message, an answer
    streamed in pieces): after every reply stored for the message so far, so a new
    attempt's replies follow an earlier one's and none is dropped as a duplicate.
    """

    def __init__(
        self,
        context: RelayContext,
        message: Message,
        group: Group,
        deadline: float,
        window_tokens: int | None = None,
        *,
        task_run: bool = False,
        housekeeping: bool = False,
    ) -> None:
        self.context = context
        self.message = message
        self.group = group
        self.deadline = deadline  # time.monotonic() by which the whole turn ends
        self.window_tokens = window_tokens  # the model's context window, when known
        self.ops = 0
        self.searched = False  # the memory index was brought up to date in this turn
        self.next_seq = context.queue.next_reply_seq(message.id)
        self.replied: set[int] = set()  # the runner's reply numbers seen in this turn
        self.files_sent = 0  # send_file calls stored in this turn
        self.overflows = 0  # model answers that the request is over the window
        # why this message cannot be answered by trying again (set when a provider's
        # answer says so): the daemon dead-letters it at once with this reason
        self.final_error: str | None = None
        self.server_ms = 0.0  # the model server's own time in this turn, when it says
        self.task_run = task_run  # the message is a scheduled task's run (its purpose: tasks)
        # a flush the host opened outside any turn (``message`` is its own record, not a
        # queued message): model calls for a flush or summary are all it may ask for
        self.housekeeping = housekeeping
        # why the message waits instead (a money cap was reached: the group is paused):
        # the daemon queues it again, its attempt not counted
        self.wait_reason: str | None = None

    def show(self, text: str) -> int:
        """Store ``text`` as the turn's next reply, and tell the channels; its number."""
        seq = self.next_seq
        self.next_seq += 1
        self.context.queue.add_reply(self.message.id, seq, text)
        self.context.notify(self.message.id)
        return seq

    def frame_limit(self) -> int:
        """The largest request any op accepts (each is checked against its own cap)."""
        return max(int(load_op(name).cap(self)) for name in OPS)

    def handle(self, frame: dict[str, Any], size: int) -> dict[str, Any]:
        self.ops += 1
        if self.ops > RELAY_OPS_PER_TURN:
            raise RelayViolation(f"more than {RELAY_OPS_PER_TURN} requests in one turn")
        name = frame.get("op")
        number = frame.get("req")
        if not isinstance(number, int) or isinstance(number, bool):
            raise RelayViolation("a request needs a whole-number req")
        if not isinstance(name, str) or name not in OPS:
            raise RelayViolation(f"unknown request op {name!r}; known: {', '.join(sorted(OPS))}")
        if self.housekeeping and name != protocol.MODEL_COMPLETE:
            raise RelayViolation(f"{name} is not asked for in a memory flush outside a turn")
        op = load_op(name)
        cap = op.cap(self)
        if size > cap:
            raise RelayViolation(f"{name} request of {size} bytes exceeds its {cap}-byte limit")
        answer = op.handle(self, frame)
        return {**answer, "req": number}
