"""The relay under fuzzing: random and mutated request frames (ops, field types, sizes,
unknown keys, nested structures, lone surrogates) go through the host's op dispatcher
as a hostile runner would send them. Each must either be answered (an answer for the
model, ok or not) or fail its turn with RelayViolation, and nothing may change outside
the group whose turn it is: another group's folder, its queue rows, tasks, held
requests, learned behaviors.

The ops come from the relay's own registry, so an op added later is fuzzed here too;
later issues extend these strategies rather than writing another harness.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.turn import OPS, TurnRelay
from tests.hostile import fingerprint

# Field names the ops read, and names they do not: a frame mixes both.
KNOWN_FIELDS = (
    "op", "req", "seq", "text", "content", "label", "query", "max_results", "path",
    "from_line", "lines", "kind", "spec", "timezone", "id", "system", "messages", "tools",
    "purpose", "group", "sender", "trust", "chat", "message_id", "creators", "channel",
    "server", "tool", "arguments", "source", "command", "args", "env", "reason", "url",
)  # fmt: skip

texts = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=4),
    st.sampled_from(["../x", "/etc/passwd", "memory/../../y", "%2e%2e/z", "a\\b", "\x00", ""]),
    st.sampled_from(["every", "at", "cron", "learned", "1s", "* * * * *", "1m", "UTC"]),
    st.builds(lambda n: "x" * n, st.integers(min_value=0, max_value=70_000)),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# A well-formed request of each op, the start of a mutation.
VALID: dict[str, dict[str, Any]] = {
    "model.complete": {"system": "s", "messages": [{"role": "user", "content": "hi"}]},
    "reply": {"seq": 0, "text": "hello"},
    "standing.get": {},
    "learned.read": {},
    "learned.write": {"content": "- Be kind."},
    "memory.search": {"query": "cat", "max_results": 3},
    "memory.get": {"path": "memory/index.md", "from_line": 1, "lines": 5},
    "task.schedule": {"text": "stretch", "kind": "at", "spec": "10m"},
    "task.list": {},
    "task.cancel": {"id": 1},
    "packages.request": {"debian": ["tree"], "reason": "to draw folders"},
    "mcp.list": {"server": "tracker"},
    "mcp.call": {"server": "tracker", "tool": "find", "arguments": {"q": "x"}},
    "others.words": {"source": "mcp__time"},
    "mcp.request": {"server": "time", "command": "mcp-server-time", "reason": "clocks"},
    "web.fetch": {"url": "http://127.0.0.1:9/"},
    "web.search": {"query": "cats"},
    "file.send": {"seq": 0, "path": "files/report.txt", "caption": "here"},
}
requests = st.one_of(st.integers(min_value=0, max_value=2**40), values)
random_frames = st.fixed_dictionaries(
    {"op": st.one_of(st.sampled_from(sorted(OPS)), texts, values), "req": requests},
    optional={
        **{name: values for name in KNOWN_FIELDS if name not in ("op", "req")},
        "unknown": values,
    },
)


@st.composite
def mutated_frames(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed request of a random op, some of its fields replaced by anything,
    some added."""
    op = draw(st.sampled_from(sorted(OPS)))
    frame: dict[str, Any] = {"op": op, "req": draw(st.integers(0, 1000)), **VALID.get(op, {})}
    for name in draw(st.lists(st.sampled_from(sorted(frame)), max_size=3, unique=True)):
        if name != "op":
            frame[name] = draw(values)
    frame.update(draw(st.dictionaries(st.sampled_from(KNOWN_FIELDS[2:]), values, max_size=3)))
    return frame


frames = st.one_of(random_frames, mutated_frames(), mutated_frames())


def test_every_op_has_a_well_formed_frame_to_mutate() -> None:
    assert sorted(VALID) == sorted(OPS)


@pytest.fixture
def relays(served: dict[str, Any]) -> Iterator[dict[str, Any]]:  # type: ignore[misc]
    """A turn of group fam for each trust, and a neighbour group whose state must stay."""
    daemon: Daemon = served["daemon"]
    store = GroupStore(served["home"])
    other = store.add(GroupConfig(name="other", creators=("carol",)))
    (other.memory_dir / "secret.md").write_text("---\ntype: note\n---\nthe neighbour's own\n")
    other.learned_file.write_text("- The neighbour's rule.\n")
    # messages stored as answered, so the running daemon delivers none of them
    daemon.queue.record_done(
        group="other", session="cli.chat-c", chat="c", thread=None, sender="carol",
        trust="creator", text="hello", channel="cli", reply="hi",
    )  # fmt: skip
    turns = {}
    for sender in ("alice", "bob", "mallory"):
        turns[sender] = daemon.queue.record_done(
            group="fam", session=f"cli.chat-{sender}", chat=sender, thread=None,
            sender=sender, trust={"alice": "creator", "bob": "member"}.get(sender, "guest"),
            text="hi", channel="cli", reply="ok",
        )  # fmt: skip
    yield {"daemon": daemon, "group": served["group"], "other": other, "turns": turns}


def _outside(daemon: Daemon, other_path: Path) -> tuple[Any, ...]:
    """What the neighbour group has: its files and every row about it."""
    rows = tuple(
        tuple(daemon.queue.read(sql, ("other",)))
        for sql in (
            "SELECT id, state, session, text FROM messages WHERE group_folder=? ORDER BY seq",
            "SELECT id, state, text FROM tasks WHERE group_folder=? ORDER BY id",
            "SELECT id, content FROM held_requests WHERE group_folder=? ORDER BY id",
            "SELECT holder FROM pauses WHERE group_folder=?",
        )
    )
    replies = tuple(
        daemon.queue.read(
            "SELECT r.message_id, r.seq, r.text FROM replies r JOIN messages m ON"
            " m.id=r.message_id WHERE m.group_folder=? ORDER BY r.message_id, r.seq",
            ("other",),
        )
    )
    return fingerprint(other_path), rows, replies


def _size(frame: dict[str, Any]) -> int:
    """The frame's bytes on the wire (lone surrogates travel as JSON escapes)."""
    return len(json.dumps(frame, separators=(",", ":")).encode("utf-8"))


def test_random_frames_fail_only_their_turn_and_change_nothing_outside_it(relays) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = relays["daemon"]
    before = _outside(daemon, relays["other"].path)
    seen_ops: set[str] = set()

    @settings(
        max_examples=400,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(frame=frames, who=st.sampled_from(["alice", "bob", "mallory"]))
    def one(frame: dict[str, Any], who: str) -> None:
        relay = TurnRelay(daemon.relay, relays["turns"][who], relays["group"], time.monotonic() + 5)
        try:
            answer = relay.handle(frame, _size(frame))
        except RelayViolation as exc:
            assert str(exc), "a violation says what was wrong"
            return
        if isinstance(frame.get("op"), str):
            seen_ops.add(frame["op"])
        assert isinstance(answer, dict) and "ok" in answer
        assert answer["req"] == frame["req"]
        if not answer["ok"]:
            assert answer.get("error"), answer  # an answer that fails says why
        json.dumps(answer)  # the answer can go back on the wire

    one()
    assert _outside(daemon, relays["other"].path) == before
    assert len(seen_ops) >= len(OPS) // 2, f"too few ops were answered: {sorted(seen_ops)}"


@pytest.mark.parametrize("op", sorted(OPS))
def test_each_op_with_every_field_of_the_wrong_type_is_a_clear_failure(relays, op: str) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = relays["daemon"]
    before = _outside(daemon, relays["other"].path)
    for wrong in (None, True, -1, 2**70, 1.5, "", "\udcff", [], {}, [{}], {"a": [1]}):
        frame: dict[str, Any] = {"op": op, "req": 7}
        frame.update({name: wrong for name in KNOWN_FIELDS if name not in ("op", "req")})
        relay = TurnRelay(
            daemon.relay, relays["turns"]["alice"], relays["group"], time.monotonic() + 5
        )
        try:
            answer = relay.handle(frame, _size(frame))
        except RelayViolation:
            continue
        assert answer["req"] == 7 and "ok" in answer
        if not answer["ok"]:
            assert answer.get("error")
    assert _outside(daemon, relays["other"].path) == before
