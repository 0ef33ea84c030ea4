"""Turns against a model server that fails, overflows, cuts and streams as real ones do
(recorded answers replayed by the fake server), end to end: the daemon, the real runner
on a real socket, the relay."""

from __future__ import annotations

import json
import time
from typing import Any

from orchestrator.daemon.core import Daemon
from orchestrator.groups.config import set_option
from orchestrator.store.messages import DEAD, DONE
from tests.fakeproviders import Error, FakeProvider, Recorded, Text, ToolUse
from tests.relayrig import provider, served, setup  # noqa: F401  (fixtures)


def settle(daemon: Daemon, message_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while (current := daemon.queue.get(message_id)).state not in (DONE, DEAD):  # type: ignore[union-attr]
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    return current


def transcript(served: dict[str, Any], folder: str, chat: str = "c") -> list[dict[str, Any]]:
    group = served["runtime"].store.load(folder)
    path = group.sessions_dir / f"cli.chat-{chat}" / "transcript.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_redelivered_turn_holds_its_message_once_and_keeps_its_first_replies(
    served: dict[str, Any], provider: FakeProvider, monkeypatch: Any
) -> None:
    monkeypatch.setattr("orchestrator.store.messages.delivery_backoff", lambda attempts: 0.01)
    # the first attempt shows a reply, then its second model call fails with a wait
    # longer than the turn has: it ends, and the message is delivered again
    provider.script.extend(
        [
            ToolUse("send_message", {"text": "Looking it up."}),
            Error(503, "overloaded", retry_after="3600"),
        ]
    )
    daemon: Daemon = served["daemon"]
    set_option(served["runtime"].store.load("fam").config_file, "turn_timeout", "8s")
    message = daemon.submit("fam", "what is up?", chat="c", sender="bob", channel="cli")
    provider.default = Text("Nothing much.")
    done = settle(daemon, message.id)
    assert done.state == DONE and done.attempts >= 2
    assert done.replies == ("Looking it up.", "Nothing much.")  # the first kept, none lost
    events = transcript(served, "fam")
    assert [e["t"] for e in events].count("supersede") == 1
    users = [e for e in events if e.get("role") == "user"]
    assert len(users) == 2  # in the file: each attempt's own
    # the context the next turn sees holds it once
    provider.default = Text("ok")
    second = daemon.submit("fam", "and now?", chat="c", sender="bob", channel="cli")
    settle(daemon, second.id)
    sent = provider.seen[-1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["what is up?", "and now?"]


def test_a_refusal_dead_letters_at_once_with_its_reason(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    provider.default = Error(400, "tools[0]: unsupported schema")
    daemon: Daemon = served["daemon"]
    message = daemon.submit("fam", "hello", chat="c", sender="bob", channel="cli")
    dead = settle(daemon, message.id)
    assert dead.state == DEAD and dead.attempts == 1
    assert "HTTP 400: tools[0]: unsupported schema" in str(dead.last_error)
    assert len(provider.seen) == 1  # neither retried nor redelivered


def test_an_overflow_compacts_and_asks_once_more(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    daemon: Daemon = served["daemon"]
    provider.default = Text("short answer")
    for n in range(3):
        settle(
            daemon,
            daemon.submit(
                "fam", f"turn {n} " + "w" * 200, chat="c", sender="bob", channel="cli"
            ).id,
        )
    provider.script.extend(
        [
            Recorded("llamacpp", "chat-overflow"),  # the real server's answer
            Text("nothing to keep", input_tokens=5),  # the flush (no tool call)
            Text("Bob sent three long messages about w; nothing is open."),  # the summary
            Text("Answered after compacting."),
        ]
    )
    message = daemon.submit("fam", "the fourth", chat="c", sender="bob", channel="cli")
    done = settle(daemon, message.id)
    assert done.state == DONE and done.replies == ("Answered after compacting.",)
    purposes = [m["content"] for m in provider.seen[-2].body["messages"] if m["role"] == "user"]
    assert purposes[-1].startswith("[compaction]")  # the summary was asked for in words
    retried = provider.seen[-1].body["messages"]
    # the summary goes in the system text, after the memory; never a user message
    assert retried[0]["role"] == "system"
    assert retried[0]["content"].endswith(
        "## Summary of the earlier conversation\n\n"
        "Bob sent three long messages about w; nothing is open.\n"
    )
    assert not any("Summary of the earlier" in str(m["content"]) for m in retried[1:])
    assert [m["content"] for m in retried if m["role"] == "user"].count("the fourth") == 1


def test_a_flush_and_summary_over_the_window_are_skipped_and_the_turn_answers(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    daemon: Daemon = served["daemon"]
    provider.default = Text("short answer")
    for n in range(3):
        settle(daemon, daemon.submit("fam", f"turn {n}", chat="c", sender="bob", channel="cli").id)
    provider.script.extend(
        [
            Recorded("llamacpp", "chat-overflow"),  # the turn's request
            Recorded("llamacpp", "chat-overflow"),  # the memory flush's
            Recorded("llamacpp", "chat-overflow"),  # the summary's
            Text("Answered anyway."),
        ]
    )
    message = daemon.submit("fam", "the fourth", chat="c", sender="bob", channel="cli")
    done = settle(daemon, message.id)
    # only the turn's own overflows count: the flush and summary are skipped, not final
    assert done.state == DONE and done.replies == ("Answered anyway.",), done
    notes = [e["text"] for e in transcript(served, "fam") if e.get("t") == "note"]
    assert any(n.startswith("no summary") for n in notes), notes
    retried = provider.seen[-1].body["messages"]
    assert [m["content"] for m in retried if m["role"] == "user"][-1] == "the fourth"


def test_an_overflow_after_compacting_is_final(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    daemon: Daemon = served["daemon"]
    provider.default = Recorded("llamacpp", "chat-overflow")
    message = daemon.submit("fam", "hello", chat="c", sender="bob", channel="cli")
    dead = settle(daemon, message.id)
    assert dead.state == DEAD and dead.attempts == 1
    assert "exceeds the available context size" in str(dead.last_error)


def test_a_stream_cut_at_the_turns_deadline_ends_the_turn_for_good(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    daemon: Daemon = served["daemon"]
    group = served["runtime"].store.load("fam")
    set_option(group.config_file, "turn_timeout", "4s")
    provider.script.append(Recorded("llamacpp", "chat-plain", stream=True, delay=0.6))
    message = daemon.submit("fam", "what is the capital?", chat="c", sender="bob", channel="cli")
    done = settle(daemon, message.id)
    assert done.state == DONE and done.attempts == 1  # not delivered again
    *partial, notice = done.replies
    assert partial and "The capital of France is Paris."[: len(partial[0])] == partial[0]
    assert notice.startswith("[This answer was cut off")
    assert len(provider.seen) == 1


def test_a_long_answer_shows_in_pieces_while_it_streams_and_only_once(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    daemon: Daemon = served["daemon"]
    text = "\n\n".join(f"Paragraph {n}: " + "word " * 60 for n in range(4))
    provider.script.append(Text(text))
    message = daemon.submit("fam", "tell me a lot", chat="c", sender="bob", channel="cli")
    done = settle(daemon, message.id)
    assert len(done.replies) >= 2  # pieces, each a reply of its own
    assert "\n\n".join(done.replies).split() == text.split()  # each word once, in order


def test_the_groups_max_tokens_caps_each_answer(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    daemon: Daemon = served["daemon"]
    group = served["runtime"].store.load("fam")
    path = group.config_file
    path.write_text(path.read_text().replace("  max_tokens: 1024", "  max_tokens: 77"))
    provider.default = Text("ok")
    settle(daemon, daemon.submit("fam", "hi", chat="c", sender="bob", channel="cli").id)
    assert provider.seen[-1].body["max_tokens"] == 77
