"""Exact behaviour of one turn's relay on the host (orchestrator/relay/turn.py), with
fakes for the stores, the provider clients and the memory indexes: which op answers each
request name, the shared context's defaults, a provider client made again only when its
definition or key changes, the memory search (its index made once a folder, its skipped
files warned of once), closing, and a turn's request checks word for word (the count,
the req, the op, a flush's one op, each op's byte cap) and its numbered replies."""

from __future__ import annotations

import hashlib
import importlib
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator import protocol
from orchestrator.limits import OFFLINE_CONTEXT_TOKENS, RELAY_OPS_PER_TURN
from orchestrator.media.images import ImageCache
from orchestrator.memory.embeddings import EmbedderUnavailable
from orchestrator.relay import turn as turn_module
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.mcp_remote import RemoteLinks
from orchestrator.relay.ops.model import model_request_cap
from orchestrator.relay.turn import OPS, RelayContext, TurnRelay, WebAccess, load_op
from orchestrator.relay.windows import Windows
from orchestrator.web.fetch import tcp_connector
from orchestrator.web.guard import system_resolver

KNOWN = (
    "file.send, learned.read, learned.write, mcp.call, mcp.list, mcp.request, "
    "memory.get, memory.search, model.complete, others.words, packages.request, reply, "
    "standing.get, task.cancel, task.list, task.schedule, web.fetch, web.search"
)

# --- fakes -----------------------------------------------------------------------------


class FakeQueue:
    """The queue's reply numbering: next_reply_seq answers ``start``; replies are kept."""

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self.asked: list[str] = []
        self.replies: list[tuple[str, int, str]] = []

    def next_reply_seq(self, message_id: str) -> int:
        self.asked.append(message_id)
        return self.start

    def add_reply(self, message_id: str, seq: int, text: str) -> bool:
        self.replies.append((message_id, seq, text))
        return True


class FakeAdapter:
    def __init__(self, definition: Any, key: str | None) -> None:
        self.definition, self.key = definition, key
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class FakeIndex:
    """A memory index: what update() skips is ``skips`` (one list per update)."""

    def __init__(self, *made: Any, skips: list[list[str]] | None = None) -> None:
        self.made = made
        self.skips = list(skips or [])
        self.updates = 0
        self.searches: list[tuple[str, int]] = []
        self.closed = 0
        self.hits = [SimpleNamespace(path="memory/a.md")]

    def update(self) -> Any:
        self.updates += 1
        return SimpleNamespace(skipped=self.skips.pop(0) if self.skips else [])

    def search(self, query: str, max_results: int) -> list[Any]:
        self.searches.append((query, max_results))
        return self.hits

    def close(self) -> None:
        self.closed += 1


class FakeLinks:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def _config(tmp_path: Path, **providers: Any) -> Any:
    return SimpleNamespace(
        providers=providers or {"fake": ("openai", "http://a")},
        secrets_file=tmp_path / "secrets.yaml",
        search_embedder="emb-1",
        search_vector_weight=0.25,
    )


def _context(tmp_path: Path, queue: FakeQueue | None = None, **kw: Any) -> RelayContext:
    return RelayContext(
        config=kw.pop("config", None) or _config(tmp_path),
        queue=queue or FakeQueue(),  # type: ignore[arg-type]
        usage=SimpleNamespace(),  # type: ignore[arg-type]
        **kw,
    )


def _group(folder: str = "fam") -> Any:
    return SimpleNamespace(folder=folder, path=Path("/h/groups") / folder)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """resolve_key and adapter_for faked: ``keys["key"]`` is the key found; every call
    of each is kept, and every client made."""
    state: dict[str, Any] = {"key": "sk-1", "resolved": [], "made": []}

    def resolve(definition: Any, secrets_file: Path | None) -> str | None:
        state["resolved"].append((definition, secrets_file))
        return state["key"]  # type: ignore[no-any-return]

    def adapter_for(definition: Any, key: str | None) -> FakeAdapter:
        adapter = FakeAdapter(definition, key)
        state["made"].append(adapter)
        return adapter

    monkeypatch.setattr(turn_module, "resolve_key", resolve)
    monkeypatch.setattr(turn_module, "adapter_for", adapter_for)
    return state


@pytest.fixture
def indexes(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """index_for and MemoryIndex faked: ``indexes["skips"]`` is what the next index made
    skips; ``indexes["unavailable"]`` makes index_for raise EmbedderUnavailable."""
    state: dict[str, Any] = {"made": [], "plain": [], "skips": [], "unavailable": None}

    def index_for(*args: Any) -> FakeIndex:
        if state["unavailable"] is not None:
            raise EmbedderUnavailable(state["unavailable"])
        index = FakeIndex(*args, skips=state["skips"])
        state["made"].append(index)
        return index

    def memory_index(*args: Any) -> FakeIndex:
        index = FakeIndex(*args, skips=state["skips"])
        state["plain"].append(index)
        return index

    monkeypatch.setattr(turn_module, "index_for", index_for)
    monkeypatch.setattr(turn_module, "MemoryIndex", memory_index)
    return state


# --- the ops ---------------------------------------------------------------------------


def test_each_request_name_is_answered_by_its_own_op() -> None:
    assert ", ".join(sorted(OPS)) == KNOWN
    for name, where in OPS.items():
        module, _, attr = where.partition(":")
        op = load_op(name)
        assert type(op) is getattr(importlib.import_module(module), attr)
        assert op.name == name
        assert load_op(name) is op  # made once
    assert OPS[protocol.MODEL_COMPLETE] == "orchestrator.relay.ops.model:ModelComplete"
    assert OPS[protocol.FILE_SEND] == "orchestrator.relay.ops.send_file:SendFile"


def test_a_name_not_an_op_has_no_op() -> None:
    with pytest.raises(KeyError):
        load_op("nosuch.op")


# --- the shared context ----------------------------------------------------------------


def test_the_web_is_reached_by_the_system_resolver_and_tcp_in_20_seconds() -> None:
    web = WebAccess()
    assert web.resolver is system_resolver
    assert web.connector is tcp_connector
    assert web.timeout == 20.0 and type(web.timeout) is float


def test_a_context_starts_with_no_search_and_empty_parts(tmp_path: Path) -> None:
    context = _context(tmp_path)
    assert context.notify("m1") is None
    assert context.clock is time.time
    assert context.state_dir is None
    assert type(context.windows) is Windows
    assert type(context.mcp) is RemoteLinks
    assert type(context.web) is WebAccess and context.web.timeout == 20.0
    assert type(context.images) is ImageCache
    assert (context._adapters, context._indexes, context._warned) == ({}, {}, set())
    other = _context(tmp_path)
    assert other.windows is not context.windows
    assert other._adapters is not context._adapters


def test_a_providers_client_is_made_once_with_its_key(tmp_path: Path, keys: dict[str, Any]) -> None:
    definition = ("openai", "http://a")
    context = _context(tmp_path, config=_config(tmp_path, fake=definition, other=("x",)))
    first = context.adapter("fake")
    assert type(first) is FakeAdapter
    assert (first.definition, first.key) == (definition, "sk-1")
    assert keys["resolved"] == [(definition, tmp_path / "secrets.yaml")]
    assert context.adapter("fake") is first
    assert keys["made"] == [first] and first.closed == 0
    stamp = hashlib.sha256(repr((definition, "sk-1")).encode()).hexdigest()
    assert context._adapters == {"fake": (stamp, first)}


def test_a_providers_client_is_made_again_when_its_key_changes(
    tmp_path: Path, keys: dict[str, Any]
) -> None:
    context = _context(tmp_path)
    first = context.adapter("fake")
    keys["key"] = "sk-2"
    second = context.adapter("fake")
    assert second is not first and second.key == "sk-2"
    assert (first.closed, second.closed) == (1, 0)
    assert context.adapter("fake") is second
    keys["key"] = None
    third = context.adapter("fake")
    assert third.key is None and second.closed == 1
    assert context._adapters["fake"][1] is third


def test_a_providers_client_is_made_again_when_its_definition_changes(
    tmp_path: Path, keys: dict[str, Any]
) -> None:
    config = _config(tmp_path, fake=("openai", "http://a"))
    context = _context(tmp_path, config=config)
    first = context.adapter("fake")
    config.providers["fake"] = ("openai", "http://b")
    second = context.adapter("fake")
    assert second.definition == ("openai", "http://b")
    assert (first.closed, second.closed) == (1, 0)


def test_each_provider_has_its_own_client(tmp_path: Path, keys: dict[str, Any]) -> None:
    context = _context(tmp_path, config=_config(tmp_path, a=("a",), b=("b",)))
    a, b = context.adapter("a"), context.adapter("b")
    assert (a.definition, b.definition) == (("a",), ("b",))
    assert context.adapter("a") is a and context.adapter("b") is b
    assert (a.closed, b.closed) == (0, 0)


def test_an_unknown_provider_has_no_client(tmp_path: Path, keys: dict[str, Any]) -> None:
    with pytest.raises(KeyError):
        _context(tmp_path).adapter("nosuch")


def test_no_state_dir_means_no_search(tmp_path: Path, indexes: dict[str, Any]) -> None:
    assert _context(tmp_path).search(_group(), "q", 6, True) == []
    assert indexes["made"] == [] and indexes["plain"] == []


def test_a_search_opens_the_groups_index_once_and_asks_it(
    tmp_path: Path, indexes: dict[str, Any]
) -> None:
    context = _context(tmp_path, state_dir=tmp_path / "state")
    hits = context.search(_group(), "lunch", 4, False)
    [index] = indexes["made"]
    assert index.made == (tmp_path / "state", Path("/h/groups"), "fam", "emb-1", 0.25)
    assert hits is index.hits
    assert index.searches == [("lunch", 4)]
    assert index.updates == 0  # not fresh: not brought up to date
    context.search(_group(), "dinner", 7, True)
    assert indexes["made"] == [index]
    assert index.searches == [("lunch", 4), ("dinner", 7)]
    assert index.updates == 1
    context.search(_group("work"), "x", 1, False)
    assert [i.made[2] for i in indexes["made"]] == ["fam", "work"]
    assert sorted(context._indexes) == ["fam", "work"]


def test_without_the_embedder_the_search_is_bm25_alone(
    tmp_path: Path, indexes: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    indexes["unavailable"] = "no model here"
    context = _context(tmp_path, state_dir=tmp_path / "state")
    with caplog.at_level(logging.DEBUG, logger="orchestrator.relay"):
        hits = context.search(_group(), "q", 3, False)
    [index] = indexes["plain"]
    assert index.made == (tmp_path / "state", Path("/h/groups"), "fam")
    assert hits is index.hits and index.searches == [("q", 3)]
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "orchestrator.relay",
            "WARNING",
            "memory search falls back to BM25 alone: no model here",
        )
    ]


def test_a_skipped_file_is_warned_of_once(
    tmp_path: Path, indexes: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    indexes["skips"] = [["memory/a.md: too large", "memory/b: not a regular file"],
                        ["memory/a.md: too large", "memory/c.md: bad"]]  # fmt: skip
    context = _context(tmp_path, state_dir=tmp_path / "state")
    with caplog.at_level(logging.DEBUG, logger="orchestrator.relay"):
        context.search(_group(), "q", 3, True)
        context.search(_group(), "q", 3, True)
        context.search(_group(), "q", 3, False)
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("orchestrator.relay", "WARNING", "memory search of fam: skipped memory/a.md: too large"),
        (
            "orchestrator.relay",
            "WARNING",
            "memory search of fam: skipped memory/b: not a regular file",
        ),
        ("orchestrator.relay", "WARNING", "memory search of fam: skipped memory/c.md: bad"),
    ]
    assert context._warned == {
        "memory/a.md: too large",
        "memory/b: not a regular file",
        "memory/c.md: bad",
    }


def test_at_most_1000_skipped_files_are_remembered(
    tmp_path: Path, indexes: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    indexes["skips"] = [["one", "two", "one"]]
    context = _context(tmp_path, state_dir=tmp_path / "state")
    context._warned.update(f"old {n}" for n in range(998))
    with caplog.at_level(logging.DEBUG, logger="orchestrator.relay"):
        context.search(_group(), "q", 3, True)
    assert [r.getMessage() for r in caplog.records] == [
        "memory search of fam: skipped one",
        "memory search of fam: skipped two",
    ]
    assert len(context._warned) == 1000
    caplog.clear()
    context._indexes["fam"][1].skips = [["three", "one"]]
    with caplog.at_level(logging.DEBUG, logger="orchestrator.relay"):
        context.search(_group(), "q", 3, True)
    assert caplog.records == []  # full: no more warnings, none remembered
    assert len(context._warned) == 1000 and "three" not in context._warned


def test_forgetting_the_indexes_closes_each_and_opens_them_again(
    tmp_path: Path, indexes: dict[str, Any]
) -> None:
    context = _context(tmp_path, state_dir=tmp_path / "state")
    context.search(_group("fam"), "q", 3, False)
    context.search(_group("work"), "q", 3, False)
    fam, work = indexes["made"]
    context.forget_indexes()
    assert (fam.closed, work.closed) == (1, 1)
    assert context._indexes == {}
    context.search(_group("fam"), "q", 3, False)
    assert len(indexes["made"]) == 3 and indexes["made"][2] is not fam
    assert fam.closed == 1


def test_closing_closes_clients_links_and_indexes(
    tmp_path: Path, keys: dict[str, Any], indexes: dict[str, Any]
) -> None:
    links = FakeLinks()
    context = _context(
        tmp_path,
        config=_config(tmp_path, a=("a",), b=("b",)),
        state_dir=tmp_path / "state",
        mcp=links,
    )
    a, b = context.adapter("a"), context.adapter("b")
    context.search(_group(), "q", 3, False)
    context.close()
    assert (a.closed, b.closed, links.closed) == (1, 1, 1)
    assert indexes["made"][0].closed == 1
    assert context._adapters == {} and context._indexes == {}
    assert context.adapter("a") is not a  # made again after closing


# --- a turn ----------------------------------------------------------------------------


def _turn(tmp_path: Path, start: int = 0, **kw: Any) -> tuple[TurnRelay, FakeQueue, list[str]]:
    queue = FakeQueue(start)
    notified: list[str] = []
    context = _context(tmp_path, queue, notify=notified.append)
    message = SimpleNamespace(id="m-7")
    turn = TurnRelay(context, message, _group(), 123.5, **kw)  # type: ignore[arg-type]
    return turn, queue, notified


def test_a_turn_starts_with_nothing_done(tmp_path: Path) -> None:
    turn, queue, _ = _turn(tmp_path, start=3)
    assert queue.asked == ["m-7"]
    assert (turn.message.id, turn.group.folder, turn.deadline) == ("m-7", "fam", 123.5)
    assert turn.context.queue is queue
    assert turn.window_tokens is None
    assert (turn.ops, turn.searched, turn.next_seq, turn.replied) == (0, False, 3, set())
    assert (turn.files_sent, turn.overflows, turn.server_ms) == (0, 0, 0.0)
    assert type(turn.server_ms) is float
    assert (turn.final_error, turn.wait_reason) == (None, None)
    assert (turn.task_run, turn.housekeeping) == (False, False)


def test_a_turn_keeps_its_window_and_kind(tmp_path: Path) -> None:
    turn, _, _ = _turn(tmp_path, window_tokens=8000, task_run=True, housekeeping=True)
    assert (turn.window_tokens, turn.task_run, turn.housekeeping) == (8000, True, True)


def test_each_reply_shown_follows_the_last_and_is_told(tmp_path: Path) -> None:
    turn, queue, notified = _turn(tmp_path, start=2)
    assert turn.show("first") == 2
    assert turn.show("second") == 3
    assert queue.replies == [("m-7", 2, "first"), ("m-7", 3, "second")]
    assert notified == ["m-7", "m-7"]
    assert turn.next_seq == 4


def test_the_frame_limit_is_the_models_cap_for_its_window(tmp_path: Path) -> None:
    turn, _, _ = _turn(tmp_path)
    assert turn.frame_limit() == model_request_cap(OFFLINE_CONTEXT_TOKENS) == 6262144
    turn.window_tokens = 1_000_000
    assert turn.frame_limit() == model_request_cap(1_000_000) == 17062144


def test_the_frame_limit_is_the_largest_cap_a_whole_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    caps = {name: 10.0 for name in OPS} | {protocol.REPLY: 30.7, protocol.MCP_CALL: 2.5}
    monkeypatch.setattr(turn_module, "load_op", lambda name: SimpleOp(name, caps[name]))
    turn, _, _ = _turn(tmp_path)
    limit = turn.frame_limit()
    assert limit == 30 and type(limit) is int


class SimpleOp:
    """An op with cap ``cap`` answering {"ok": True, "op": its name} (and more)."""

    def __init__(self, name: str, cap: float, answer: dict[str, Any] | None = None) -> None:
        self.name, self.max, self.answer = name, cap, answer
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    def cap(self, turn: Any) -> float:
        return self.max

    def handle(self, turn: Any, frame: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((turn, frame))
        return self.answer if self.answer is not None else {"ok": True, "op": self.name}


@pytest.fixture
def fake_ops(monkeypatch: pytest.MonkeyPatch) -> dict[str, SimpleOp]:
    """Every op faked with a cap of 100 bytes."""
    ops = {name: SimpleOp(name, 100) for name in OPS}
    monkeypatch.setattr(turn_module, "load_op", ops.__getitem__)
    return ops


def test_a_request_is_answered_by_its_op_with_its_req(
    tmp_path: Path, fake_ops: dict[str, SimpleOp]
) -> None:
    turn, _, _ = _turn(tmp_path)
    frame = {"op": "reply", "req": 5, "text": "hi"}
    assert turn.handle(frame, 100) == {"ok": True, "op": "reply", "req": 5}
    assert fake_ops["reply"].calls == [(turn, frame)]
    assert turn.ops == 1
    assert turn.handle({"op": "task.list", "req": 0}, 0) == {
        "ok": True,
        "op": "task.list",
        "req": 0,
    }
    assert turn.ops == 2


def test_the_answers_req_is_the_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    op = SimpleOp("reply", 100, {"ok": False, "req": 99, "error": "no"})
    monkeypatch.setattr(turn_module, "load_op", lambda name: op)
    turn, _, _ = _turn(tmp_path)
    assert turn.handle({"op": "reply", "req": -4}, 1) == {"ok": False, "req": -4, "error": "no"}


def test_a_request_over_its_ops_cap_fails_the_turn(
    tmp_path: Path, fake_ops: dict[str, SimpleOp]
) -> None:
    turn, _, _ = _turn(tmp_path)
    with pytest.raises(RelayViolation) as raised:
        turn.handle({"op": "web.fetch", "req": 1}, 101)
    assert str(raised.value) == "web.fetch request of 101 bytes exceeds its 100-byte limit"
    assert fake_ops["web.fetch"].calls == []


def test_a_request_over_the_real_cap_names_it(tmp_path: Path) -> None:
    turn, _, _ = _turn(tmp_path)
    with pytest.raises(RelayViolation) as raised:
        turn.handle({"op": "task.list", "req": 1}, 16385)
    assert str(raised.value) == "task.list request of 16385 bytes exceeds its 16384-byte limit"


@pytest.mark.parametrize("number", [None, "1", 1.0, True, False])
def test_a_request_needs_a_whole_number_req(
    tmp_path: Path, fake_ops: dict[str, SimpleOp], number: Any
) -> None:
    turn, _, _ = _turn(tmp_path)
    frame: dict[str, Any] = {"op": "reply"} if number is None else {"op": "reply", "req": number}
    with pytest.raises(RelayViolation) as raised:
        turn.handle(frame, 1)
    assert str(raised.value) == "a request needs a whole-number req"
    assert turn.ops == 1  # counted all the same
    assert fake_ops["reply"].calls == []


def test_the_req_is_checked_before_the_op(tmp_path: Path) -> None:
    turn, _, _ = _turn(tmp_path)
    with pytest.raises(RelayViolation) as raised:
        turn.handle({"op": "nosuch"}, 1)
    assert str(raised.value) == "a request needs a whole-number req"


@pytest.mark.parametrize(
    ("name", "shown"), [("nosuch", "'nosuch'"), (None, "None"), (5, "5"), (["reply"], "['reply']")]
)
def test_an_unknown_op_fails_the_turn_naming_the_known(
    tmp_path: Path, fake_ops: dict[str, SimpleOp], name: Any, shown: str
) -> None:
    turn, _, _ = _turn(tmp_path)
    frame = {"req": 1} if name is None else {"op": name, "req": 1}
    with pytest.raises(RelayViolation) as raised:
        turn.handle(frame, 1)
    assert str(raised.value) == f"unknown request op {shown}; known: {KNOWN}"


def test_a_flush_outside_a_turn_asks_only_for_model_calls(
    tmp_path: Path, fake_ops: dict[str, SimpleOp]
) -> None:
    turn, _, _ = _turn(tmp_path, housekeeping=True)
    with pytest.raises(RelayViolation) as raised:
        turn.handle({"op": "reply", "req": 1}, 1)
    assert str(raised.value) == "reply is not asked for in a memory flush outside a turn"
    assert fake_ops["reply"].calls == []
    answer = turn.handle({"op": "model.complete", "req": 2}, 100)
    assert answer == {"ok": True, "op": "model.complete", "req": 2}
    with pytest.raises(RelayViolation) as raised:
        turn.handle({"op": "model.complete", "req": 3}, 101)
    assert str(raised.value) == "model.complete request of 101 bytes exceeds its 100-byte limit"


def test_a_turn_answers_at_most_200_requests(tmp_path: Path, fake_ops: dict[str, SimpleOp]) -> None:
    assert RELAY_OPS_PER_TURN == 200
    turn, _, _ = _turn(tmp_path)
    turn.ops = 199
    assert turn.handle({"op": "reply", "req": 200}, 1)["req"] == 200
    assert turn.ops == 200
    with pytest.raises(RelayViolation) as raised:
        turn.handle({"op": "reply", "req": 201}, 1)
    assert str(raised.value) == "more than 200 requests in one turn"
    assert turn.ops == 201
    assert len(fake_ops["reply"].calls) == 1


def test_the_model_calls_cap_is_the_turns_windows(tmp_path: Path) -> None:
    turn, _, _ = _turn(tmp_path, window_tokens=1000)
    assert model_request_cap(1000) == 5074144
    with pytest.raises(RelayViolation) as raised:
        turn.handle({"op": "model.complete", "req": 1}, 5074145)
    assert (
        str(raised.value)
        == "model.complete request of 5074145 bytes exceeds its 5074144-byte limit"
    )
