"""The channel interface, the channel registry and the chat-app channel of one kind,
exactly: the defaults a channel inherits, the classes ``load_channels`` finds, and a
kind's channel with recording accounts and a recording daemon: which accounts it makes,
what it listens to, its thread, how it starts and stops its accounts, and what it logs."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.channels import REGISTRY, Channel, load_channels
from orchestrator.channels.chatapp import channel as chatapp_channel
from orchestrator.channels.chatapp import core
from orchestrator.channels.chatapp.channel import ChatAppChannel
from orchestrator.channels.control import ControlChannel
from orchestrator.config.accounts import ChannelAccount
from orchestrator.config.kinds import account_kinds


class Plain(Channel):
    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def test_a_channels_defaults() -> None:
    daemon = object()
    plain = Plain(daemon)  # type: ignore[arg-type]
    assert plain.daemon is daemon
    assert Plain.enabled(daemon) is True  # type: ignore[arg-type]
    assert Plain.settings(SimpleNamespace()) == ()  # type: ignore[arg-type]
    assert plain.where() == ""
    assert Plain.name == ""


def test_the_daemons_own_channels_come_first_then_one_per_kind() -> None:
    assert REGISTRY == {"cli": "orchestrator.channels.control:ControlChannel"}
    classes = load_channels()
    assert classes[0] is ControlChannel
    kinds = list(account_kinds().values())
    assert len(classes) == 1 + len(kinds)
    assert kinds  # the built-in kinds
    for kind, made in zip(kinds, classes[1:], strict=True):
        assert made is ChatAppChannel.of_kind(kind)
        assert made.kind == kind.name


def kind_like(name: str = "fakeapp", title: str = "Fake App") -> Any:
    kind = next(iter(account_kinds().values()))
    return dataclasses.replace(kind, name=name, title=title)


def test_a_kinds_class_is_made_once_and_again_for_another_kind_object() -> None:
    kind = kind_like()
    made = ChatAppChannel.of_kind(kind)
    assert made.__name__ == "FakeAppChannel"
    assert made.name == "fakeapp"
    assert made.kind == "fakeapp"
    assert made.account_kind is kind
    assert issubclass(made, ChatAppChannel)
    assert ChatAppChannel.of_kind(kind) is made
    assert chatapp_channel._CLASSES["fakeapp"] is made
    other = kind_like()
    remade = ChatAppChannel.of_kind(other)
    assert remade is not made
    assert remade.account_kind is other
    assert ChatAppChannel.of_kind(other) is remade
    assert ChatAppChannel.account_kind is None
    assert ChatAppChannel.kind == ""


def account(name: str, kind: str = "fakeapp") -> ChannelAccount:
    return ChannelAccount(name=name, kind=kind)


def config_of(*accounts: ChannelAccount, secrets: Any = "secrets.yaml") -> Any:
    return SimpleNamespace(
        channel_accounts={f"{a.kind}:{a.name}": a for a in accounts}, secrets_file=secrets
    )


def test_the_wanted_accounts_are_those_of_the_kind_by_name() -> None:
    made = ChatAppChannel.of_kind(kind_like())
    b, a, other = account("b"), account("a"), account("c", kind="otherapp")
    config = config_of(b, other, a)
    assert made.wanted(config) == [a, b]
    assert made.enabled(SimpleNamespace(config=config)) is True
    assert made.enabled(SimpleNamespace(config=config_of(other))) is False
    assert made.settings(config) == ((a, b), "secrets.yaml")
    assert made.settings(config_of(secrets=None)) == ((), None)


class Recorded:
    """An account that records its calls (as the core's ChatAccount is driven)."""

    def __init__(self, daemon: Any, definition: ChannelAccount, loop: Any, kind: Any) -> None:
        self.daemon, self.definition, self.loop, self.kind = daemon, definition, loop, kind
        self.calls: list[Any] = []

    async def start(self) -> None:
        self.calls.append(("start", threading.current_thread().name))

    async def stop(self) -> None:
        self.calls.append(("stop", threading.current_thread().name))

    def wake_soon(self, message_id: str) -> None:
        self.calls.append(("wake", message_id))


class Daemon:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.listeners: list[Any] = []
        self.removed: list[Any] = []

    def add_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Any) -> None:
        self.removed.append(listener)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core, "ChatAccount", Recorded)


def test_an_account_is_made_with_the_daemon_its_definition_the_loop_and_the_kind(
    recorded: None,
) -> None:
    kind = kind_like()
    daemon = Daemon(config_of())
    channel = ChatAppChannel.of_kind(kind)(daemon)  # type: ignore[arg-type]
    try:
        assert channel.accounts == {}
        assert channel.thread is None
        assert channel.where() == "no account"
        made: Any = channel.make_account(account("a"))
        assert isinstance(made, Recorded)
        assert made.daemon is daemon
        assert made.definition == account("a")
        assert made.loop is channel.loop
        assert made.kind is kind
    finally:
        channel.loop.close()


def test_start_wake_and_stop(recorded: None, caplog: pytest.LogCaptureFixture) -> None:
    kind = kind_like()
    daemon = Daemon(config_of(account("b"), account("a"), account("x", kind="otherapp")))
    channel = ChatAppChannel.of_kind(kind)(daemon)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="orchestrator.channels"):
        channel.start()
    thread = channel.thread
    assert thread is not None
    assert thread.name == "fakeapp-channel"
    assert thread.daemon is True
    assert thread.is_alive()
    assert list(channel.accounts) == ["a", "b"]
    accounts: list[Any] = list(channel.accounts.values())
    for one in accounts:
        assert one.calls == [("start", "fakeapp-channel")]
    assert channel.where() == "a, b"
    assert daemon.listeners == [channel._changed]
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.channels"] == [
        "fakeapp channel started: a, b"
    ]
    daemon.listeners[0]("m-1")
    for one in accounts:
        assert one.calls[-1] == ("wake", "m-1")
    channel.stop()
    assert daemon.removed == [channel._changed]
    for one in accounts:
        assert one.calls[-1] == ("stop", "fakeapp-channel")
    assert not thread.is_alive()
    assert channel.loop.is_closed()
    channel.stop()  # stopped already: nothing more
    assert daemon.removed == [channel._changed, channel._changed]
    for one in accounts:
        assert [c for c in one.calls if c[0] == "stop"] == [("stop", "fakeapp-channel")]


def test_stop_before_start_only_stops_listening(recorded: None) -> None:
    daemon = Daemon(config_of())
    channel = ChatAppChannel.of_kind(kind_like())(daemon)  # type: ignore[arg-type]
    channel.stop()
    assert daemon.removed == [channel._changed]
    assert not channel.loop.is_closed()
    assert not channel.loop.is_running()
    channel.loop.close()


def test_a_loop_whose_thread_stays_is_not_closed(recorded: None) -> None:
    daemon = Daemon(config_of(account("a")))
    channel = ChatAppChannel.of_kind(kind_like())(daemon)  # type: ignore[arg-type]
    channel.start()
    real = channel.thread
    assert real is not None

    class Stays:
        joined: list[Any] = []

        def join(self, timeout: float | None = None) -> None:
            self.joined.append(timeout)
            real.join()

        def is_alive(self) -> bool:
            return True

    stays = Stays()
    channel.thread = stays  # type: ignore[assignment]
    channel.stop()
    assert stays.joined == [5]
    assert not channel.loop.is_closed()
    channel.loop.close()


def test_a_failed_stop_of_an_account_still_stops_the_loop(recorded: None) -> None:
    daemon = Daemon(config_of(account("a")))
    channel = ChatAppChannel.of_kind(kind_like())(daemon)  # type: ignore[arg-type]
    channel.start()

    async def broken() -> None:
        raise RuntimeError("stop failed")

    channel.accounts["a"].stop = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="stop failed"):
        channel.stop()
    assert channel.thread is not None
    assert not channel.thread.is_alive()
    assert channel.loop.is_closed()


def test_the_loop_is_a_new_one_per_channel(recorded: None) -> None:
    made = ChatAppChannel.of_kind(kind_like())
    one, two = made(Daemon(config_of())), made(Daemon(config_of()))  # type: ignore[arg-type]
    try:
        assert isinstance(one.loop, asyncio.AbstractEventLoop)
        assert one.loop is not two.loop
    finally:
        one.loop.close()
        two.loop.close()


def test_an_accounts_start_and_the_channels_stop_are_bounded_in_time(
    recorded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float | None] = []
    real = asyncio.run_coroutine_threadsafe

    class Bounded:
        def __init__(self, future: Any) -> None:
            self.future = future

        def result(self, timeout: float | None = None) -> Any:
            waits.append(timeout)
            return self.future.result(timeout)

    monkeypatch.setattr(
        asyncio, "run_coroutine_threadsafe", lambda coro, loop: Bounded(real(coro, loop))
    )
    daemon = Daemon(config_of(account("a"), account("b")))
    channel = ChatAppChannel.of_kind(kind_like())(daemon)  # type: ignore[arg-type]
    channel.start()
    assert waits == [10, 10]  # each account's start: at most 10 s
    channel.stop()
    assert waits == [10, 10, 15]  # the accounts' stop together: at most 15 s
    assert channel.loop.is_closed()
