"""The channel of one kind of chat app: the accounts of that kind in orchestrator.yaml,
one event loop on a thread of its own serving all of them, and the daemon's change
events passed to each account (which sends the replies of its own messages)."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any, ClassVar

from orchestrator.channels.base import Channel
from orchestrator.config.accounts import ChannelAccount

if TYPE_CHECKING:
    from orchestrator.channels.chatapp.core import ChatAccount
    from orchestrator.config.kinds import AccountKind
    from orchestrator.daemon.core import Daemon

log = logging.getLogger("orchestrator.channels")
_CLASSES: dict[str, type[ChatAppChannel]] = {}


class ChatAppChannel(Channel):
    """All accounts of one kind (``kind``); ``of_kind`` makes the class of a kind."""

    kind: ClassVar[str] = ""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__(daemon)
        self.accounts: dict[str, ChatAccount] = {}
        self.loop = asyncio.new_event_loop()
        self.thread: threading.Thread | None = None

    @staticmethod
    def of_kind(kind: AccountKind) -> type[ChatAppChannel]:
        """The channel class of ``kind`` (one per kind, made once)."""
        made = _CLASSES.get(kind.name)
        if made is None or made.account_kind is not kind:
            made = type(
                f"{kind.title.replace(' ', '')}Channel",
                (ChatAppChannel,),
                {"name": kind.name, "kind": kind.name, "account_kind": kind},
            )
            _CLASSES[kind.name] = made
        return made

    account_kind: ClassVar[AccountKind | None] = None

    def make_account(self, definition: ChannelAccount) -> ChatAccount:
        from orchestrator.channels.chatapp.core import ChatAccount

        assert self.account_kind is not None
        return ChatAccount(self.daemon, definition, self.loop, self.account_kind)

    @classmethod
    def wanted(cls, config: Any) -> list[ChannelAccount]:
        return sorted(
            (a for a in config.channel_accounts.values() if a.kind == cls.kind),
            key=lambda a: a.name,
        )

    @classmethod
    def enabled(cls, daemon: Any) -> bool:
        return bool(cls.wanted(daemon.config))

    @classmethod
    def settings(cls, config: Any) -> tuple[object, ...]:
        return (tuple(cls.wanted(config)), config.secrets_file)

    def where(self) -> str:
        return ", ".join(self.accounts) or "no account"

    def start(self) -> None:
        for definition in self.wanted(self.daemon.config):
            self.accounts[definition.name] = self.make_account(definition)
        self.daemon.add_listener(self._changed)
        self.thread = threading.Thread(
            target=self.loop.run_forever, name=f"{self.kind}-channel", daemon=True
        )
        self.thread.start()
        for account in self.accounts.values():
            asyncio.run_coroutine_threadsafe(account.start(), self.loop).result(timeout=10)
        log.info("%s channel started: %s", self.kind, self.where())

    def _changed(self, message_id: str) -> None:
        for account in self.accounts.values():
            account.wake_soon(message_id)

    def stop(self) -> None:
        self.daemon.remove_listener(self._changed)
        if self.loop.is_closed() or self.thread is None:
            return  # stopped already (or never started)

        async def close() -> None:
            await asyncio.gather(*(a.stop() for a in self.accounts.values()))

        try:
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=15)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self.thread is not None:
                self.thread.join(timeout=5)
                if not self.thread.is_alive():
                    self.loop.close()
