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


def serve_runner(
    home: Home, runtime: GroupRuntime, folder: str, **settings: Any
) -> Callable[[], None]:
    """A real runner for group ``folder`` on its real socket, its model ``fake``/m-1
    through the host relay (``settings``: more of its AgentSettings), served on a
    thread; what stops it (each tool source closed: a shell, an MCP server)."""
    group = runtime.store.load(folder)
    runtime.prepare_host(group, runtime.desired_spec(group))
    server = RunnerServer(
        AgentSettings(
            agent_dir=group.path,
            runtime_dir=home.runtime_dir(folder),
            provider="fake",
            model="m-1",
            hooks_file=None,
            **settings,
        )
    )
    server.sock = bind_unix(home.runtime_dir(folder) / "runner.sock")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop() -> None:
        server.stop()
        thread.join(5)
        for source in server.runner.tool_sources:
            if (close := getattr(source, "close", None)) is not None:
                close()
        assert server.sock is not None
        server.sock.close()

    return stop


@contextmanager
def runners(
    setup: dict[str, Any], settings: Callable[[Any], dict[str, Any]] = lambda group: {}
) -> Iterator[dict[str, Any]]:
    """A real runner on a real socket for each group of ``setup`` (``settings(group)``:
    more of its AgentSettings), the daemon started; all stopped afterwards."""
    runtime: GroupRuntime = setup["runtime"]
    stops = [
        serve_runner(setup["home"], runtime, folder, **settings(runtime.store.load(folder)))
        for folder in ("fam", "work")
    ]
    daemon: Daemon = setup["daemon"]
    daemon.start()
    try:
        yield setup
    finally:
        daemon.drain(2)
        for stop in stops:
            stop()


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
