"""A daemon with one real runner (the offline provider) on a real socket, for end-to-end
tests of the host relay without an engine."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.agent.serve import RunnerServer
from orchestrator.agent.settings import AgentSettings
from orchestrator.config import load_config
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import DONE, open_queue
from tests.fakerunner import bind_unix


def serve_fam(home: Path) -> Iterator[dict[str, Any]]:
    """A daemon and one real runner (offline provider) for group fam: alice creates,
    bob is a member, unknown senders are allowed as guests."""
    h = Home(home)
    store = GroupStore(h)
    store.add(
        GroupConfig(name="fam", creators=("alice",), members=("bob",), unknown_senders="allow")
    )
    config = load_config(h)
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    queue = open_queue(h)
    daemon = Daemon(h, config, runtime, queue, concurrency=2)
    group = store.load("fam")
    runtime.prepare_host(group, runtime.desired_spec(group))
    settings = AgentSettings(
        agent_dir=group.path,  # the host's own files are here too: a runner with a host
        runtime_dir=h.runtime_dir("fam"),  # must not read them (it asks the host)
        provider="offline",
        model="offline-rules",
        hooks_file=None,
    )
    server = RunnerServer(settings)
    server.sock = bind_unix(h.runtime_dir("fam") / "runner.sock")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    daemon.start()
    yield {"home": h, "daemon": daemon, "group": group}
    daemon.drain(2)
    server.stop()
    thread.join(5)
    assert server.sock is not None
    server.sock.close()
    daemon.relay.close()
    daemon.relay.usage.close()
    queue.close()


def say(served: dict[str, Any], text: str, sender: str, chat: str = "c") -> tuple[str, ...]:
    daemon: Daemon = served["daemon"]
    message = daemon.submit("fam", text, chat=chat, sender=sender, channel="cli")
    done = daemon.wait(message.id, 60)
    assert done is not None and done.state == DONE, done
    return done.replies


def contexts(served: dict[str, Any], chat: str) -> list[str]:
    """The system prompt of every context of ``chat``'s session, from its transcript."""
    path = served["group"].sessions_dir / f"cli.chat-{chat}" / "transcript.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e["system"] for e in events if e.get("t") == "context"]
