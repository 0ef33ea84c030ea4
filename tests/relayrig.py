"""A daemon with a provider ``fake`` (a fake server on loopback) and two groups using it,
``fam`` and ``work``; with ``served``, each with a real runner (the relay provider) on a
real socket. Fixtures for the relay's and the model servers' tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.serve import RunnerServer
from orchestrator.agent.settings import AgentSettings
from orchestrator.config import load_config
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, ModelLimits
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import open_queue
from tests.fakeproviders import FakeProvider
from tests.fakerunner import bind_unix

KEY = "sk-relay-test-abcdefghijklmnop"


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider("openai", KEY)
    yield fake
    fake.close()


@pytest.fixture
def setup(home: Path, provider: FakeProvider, monkeypatch) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """A home with a provider `fake` (the fake server) and two groups using it."""
    monkeypatch.setenv("FAKE_KEY", KEY)
    (home / "orchestrator.yaml").write_text(
        "providers:\n  fake:\n    kind: openai\n"
        f"    base_url: {provider.base_url}\n    key_env: FAKE_KEY\n    models: [m-1, m-2]\n"
    )
    h = Home(home)
    store = GroupStore(h)
    for name in ("fam", "work"):
        store.add(
            GroupConfig(
                name=name,
                provider="fake",
                model="m-1",
                creators=("alice",),
                members=("bob",),
                limits=ModelLimits(tokens_per_day=10_000),
            )
        )
    config = load_config(h)
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    queue = open_queue(h)
    daemon = Daemon(h, config, runtime, queue, concurrency=2)
    yield {"home": h, "daemon": daemon, "config": config, "runtime": runtime}
    daemon.relay.close()
    daemon.relay.usage.close()
    queue.close()


@contextmanager
def runners(
    setup: dict[str, Any], settings: Callable[[Any], dict[str, Any]] = lambda group: {}
) -> Iterator[dict[str, Any]]:
    """A real runner on a real socket for each group of ``setup`` (``settings(group)``:
    more of its AgentSettings), the daemon started; all stopped afterwards, each tool
    source closed (a shell, an MCP server)."""
    home: Home = setup["home"]
    servers = []
    for folder in ("fam", "work"):
        group = setup["runtime"].store.load(folder)
        setup["runtime"].prepare_host(group, setup["runtime"].desired_spec(group))
        server = RunnerServer(
            AgentSettings(
                agent_dir=group.path,
                runtime_dir=home.runtime_dir(folder),
                provider="fake",
                model="m-1",
                hooks_file=None,
                **settings(group),
            )
        )
        server.sock = bind_unix(home.runtime_dir(folder) / "runner.sock")
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
    daemon: Daemon = setup["daemon"]
    daemon.start()
    try:
        yield setup
    finally:
        daemon.drain(2)
        for server, thread in servers:
            server.stop()
            thread.join(5)
            for source in server.runner.tool_sources:
                if (close := getattr(source, "close", None)) is not None:
                    close()
            assert server.sock is not None
            server.sock.close()


@pytest.fixture
def served(setup: dict[str, Any]) -> Iterator[dict[str, Any]]:
    with runners(setup) as ready:
        yield ready


def say(served: dict[str, Any], text: str, sender: str, group: str = "fam", chat: str = "c") -> Any:
    """Send ``text`` to ``group`` through the daemon and wait for it to be done."""
    from orchestrator.store.messages import DONE

    daemon: Daemon = served["daemon"]
    message = daemon.submit(group, text, chat=chat, sender=sender, channel="cli")
    done = daemon.wait(message.id, 90)
    assert done is not None and done.state == DONE, done
    return done


def tool_results(provider: FakeProvider) -> list[str]:
    """The tool results the provider's last request carried."""
    return [m["content"] for m in provider.seen[-1].body["messages"] if m.get("role") == "tool"]


def offered(provider: FakeProvider) -> list[str]:
    """The tools the provider's last request offered."""
    return [t["function"]["name"] for t in provider.seen[-1].body.get("tools", [])]
