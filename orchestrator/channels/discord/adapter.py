"""The Discord adapter: a bot on the gateway with discord.py (which keeps the
connection: heartbeats, resuming, reconnecting, rate limits). The chat-app core does the
rest (``orchestrator.channels.chatapp.core``).

Inbound: each MESSAGE_CREATE from a person is handled in the order received. Direct
messages and server channels are chats; a thread is a thread of its parent channel (a
channel bound to a group brings its threads, and replies go into the thread). In a
server, a message addresses the bot when it mentions it or replies to one of its
messages. Without the Message Content intent (a privileged intent turned on in the
Developer Portal) Discord sends servers' other messages without their text: the daemon
asks for the intent only when the application has it (else Discord would refuse the
connection), records which in the health, and doctor explains it. Files up to
``attachments_max_bytes`` are stored under ``groups/<folder>/files/inbox/`` and
described to the core (a voice message, its ``flags`` and ``duration_secs``, as a voice
note). The message id is the key the queue keeps: a message delivered again (a
replayed gateway event) is queued once.

Outbound: replies reference the message they answer (without pinging its author, and
with every mention disabled: nothing the model writes pings anyone), in pieces of at
most 2,000 characters. Each piece carries a ``nonce`` derived from the reply's key with
``enforce_nonce``: Discord returns the message it already made for a nonce it saw in the
past few minutes instead of posting again. So a reply claimed but not confirmed at a
crash is sent again at the next start when its claim is younger than
``DISCORD_NONCE_WINDOW_SECONDS``; an older one is never sent again. A file the agent
sends is a message with the file attached, sent the same way.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
from typing import TYPE_CHECKING, cast

from orchestrator.channels.chatapp.adapter import (
    NO_FILES,
    RETRY,
    Attachment,
    OutgoingFile,
    Received,
    Refusal,
)
from orchestrator.channels.chatapp.core import AdapterBase, Backoff, describe
from orchestrator.channels.chatapp.files import store_received
from orchestrator.channels.discord.kind import DiscordOptions
from orchestrator.channels.textfmt import split_message
from orchestrator.config.accounts import account_token
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.limits import DISCORD_NONCE_WINDOW_SECONDS, DISCORD_TEXT_MAX
from orchestrator.media.inbox import VOICE
from orchestrator.store.chats import FAILED, UNKNOWN
from orchestrator.units import human_bytes

if TYPE_CHECKING:
    import discord

    from orchestrator.channels.chatapp.core import ChatAccount

log = logging.getLogger("orchestrator.channels.discord")
NONCE_CHARS = 25  # Discord's limit on a nonce


def nonce(key: str, piece: int) -> str:
    """The nonce of one piece of one reply: the same on every try, at most 25
    characters."""
    return hashlib.sha256(f"{key}/{piece}".encode()).hexdigest()[:NONCE_CHARS]


class DiscordAdapter(AdapterBase):
    """One bot: its gateway connection and its REST calls."""

    chat_word = "channel"
    resends_safely = True  # a nonce repeated posts once ...
    resend_window = DISCORD_NONCE_WINDOW_SECONDS  # ... within Discord's few minutes
    typing_every = 8.0  # Discord shows typing for 10 s

    def __init__(self, core: ChatAccount) -> None:
        super().__init__(core)
        self.options = cast(DiscordOptions, core.account.options)
        self.client: discord.Client | None = None
        self.inbox: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.gateway: asyncio.Task[None] | None = None
        # the wait before logging in again; back to its start once the gateway is up
        self.backoff = Backoff()

    @property
    def name(self) -> str:
        return self.core.name

    # life

    async def connect(self) -> str:
        """Log in over REST (the token checked, the application's flags read); the
        gateway connects in ``receive``."""
        import discord
        import discord.http

        if self.options.api_url:
            discord.http.Route.BASE = f"{self.options.api_url}/api/v10"
        token = account_token(self.core.account, self.core.daemon.config.secrets_file)
        await self.close()
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        client = discord.Client(intents=intents, max_messages=None, chunk_guilds_at_startup=False)
        try:
            await client.login(token)
        except BaseException:
            await client.close()
            raise
        if self.options.api_url:
            # the gateway of that server (discord.py's default is Discord's own)
            import yarl
            from discord.gateway import DiscordWebSocket

            _shards, url, _limit = await client.http.get_bot_gateway()
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
        flags = client.application_flags
        content = bool(flags.gateway_message_content or flags.gateway_message_content_limited)
        intents.message_content = content  # asked for only when granted (else 4014)
        client.event(self.on_message)
        client.event(self.on_ready)
        client.event(self.on_resumed)
        client.event(self.on_disconnect)
        self.client = client
        user = client.user
        assert user is not None
        self.core.health.bot = user.name
        self.core.health.can_read_all_group_messages = content
        if not content:
            log.warning(
                "Discord account %s: the application has no Message Content intent; in "
                "servers only messages that mention the bot carry text (orchestrator doctor)",
                self.name,
            )
        return f"@{user.name}"

    async def close(self) -> None:
        client, gateway = self.client, self.gateway
        self.client = self.gateway = None
        if gateway is not None:
            gateway.cancel()
        if client is not None:
            await client.close()

    # events (discord.py calls these by name)

    async def on_message(self, message: discord.Message) -> None:
        self.inbox.put_nowait(message)  # handled in order by ``receive``

    async def on_ready(self) -> None:
        self.core.polled()
        self.backoff.reset()

    async def on_resumed(self) -> None:
        self.core.polled()
        self.backoff.reset()

    async def on_disconnect(self) -> None:
        self.core.error("the gateway connection closed; reconnecting")

    # inbound

    async def receive(self) -> None:
        """The gateway (discord.py reconnects and resumes by itself); when it gives up
        (a token revoked, an intent refused) the error goes to the health and the bot
        logs in again after a backoff, which starts again from its first wait once the
        gateway is up (ready or resumed)."""
        backoff = self.backoff
        while True:
            if self.client is None:
                try:
                    await self.connect()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    await self.core.read_failed("logging in", describe(exc), backoff)
                    continue
            assert self.client is not None
            self.gateway = gateway = asyncio.create_task(self.client.connect(reconnect=True))
            if await self._consume(gateway):
                return  # the daemon stops
            error = gateway.exception() if not gateway.cancelled() else None
            await self.close()
            await self.core.read_failed(
                "the gateway", describe(error or "the connection ended"), backoff
            )

    async def _consume(self, gateway: asyncio.Task[None]) -> bool:
        """Hand messages to the core in order until the gateway ends (False) or the
        daemon stops (True)."""
        backoff = Backoff()
        while True:
            getting = asyncio.ensure_future(self.inbox.get())
            try:
                done, _ = await asyncio.wait(
                    {getting, gateway}, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                if not getting.done():
                    getting.cancel()
            if getting not in done:
                return False
            message = getting.result()
            while True:
                try:
                    await self.handle(message)
                    backoff.reset()
                    break
                except asyncio.CancelledError:
                    raise
                except DaemonStopping:
                    return True
                except OrchestratorError as exc:
                    await self.core.not_queued(f"message {message.id}", exc, backoff)
                except Exception:
                    log.exception(
                        "Discord account %s: message %s could not be handled; skipped",
                        self.name,
                        message.id,
                    )
                    break

    async def handle(self, message: discord.Message) -> None:
        """One message: a person's, for the core; anything else starts nothing."""
        import discord

        me = self.client.user if self.client else None
        if message.author.bot or (me is not None and message.author.id == me.id):
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            log.debug(
                "Discord account %s: a %s message starts no turn", self.name, message.type.name
            )
            return
        if await asyncio.to_thread(self.core.chats.was_queued, self.name, str(message.id)):
            log.debug("Discord account %s: message %s came again; dropped", self.name, message.id)
            return  # (before its files are fetched again)
        channel = message.channel
        chat, thread = str(channel.id), None
        if isinstance(channel, discord.Thread):
            chat, thread = str(channel.parent_id), str(channel.id)
        title = getattr(channel, "name", None)
        if message.guild is not None and title:
            title = f"{message.guild.name} #{title}"
        await self.core.route(
            Received(
                chat=chat,
                sender=str(message.author.id),
                text=message.content,
                message_id=str(message.id),
                event_id=str(message.id),
                thread=thread,
                group_chat=message.guild is not None,
                title=title or f"direct messages with {message.author.name}",
                raw=message,
            )
        )

    def addressed(self, received: Received) -> bool:
        """A message that mentions the bot or replies to one of its messages."""
        message: discord.Message = received.raw
        me = self.client.user if self.client else None
        if me is None:
            return False
        if any(user.id == me.id for user in message.mentions):
            return True
        replied = message.reference.resolved if message.reference else None
        author = getattr(replied, "author", None)
        return author is not None and author.id == me.id

    def mention_forms(self, received: Received) -> tuple[str, ...]:
        me = self.client.user if self.client else None
        return (f"<@{me.id}>", f"<@!{me.id}>") if me is not None else ()

    async def attachment(self, received: Received, group: str) -> Attachment:
        """Store a message's files (up to the limit each) in the group's files/inbox and
        describe them (a voice message as a voice note, with its length); a Refusal for
        one over the limit (nothing downloaded), or None."""
        import discord

        message: discord.Message = received.raw
        if not message.attachments:
            return None
        limit = self.options.attachments_max_bytes
        if not limit:
            return NO_FILES
        for item in message.attachments:
            if item.size > limit:
                return self._too_large(item.size)
        voice_message = message.flags.voice
        stored = []
        for item in message.attachments:
            try:
                data = await item.read()
            except discord.HTTPException as exc:
                log.warning("Discord account %s: a file was not fetched: %s", self.name, exc)
                return Refusal("Sorry, I could not fetch that file from Discord.")
            if len(data) > limit:
                return self._too_large(len(data))
            voice = voice_message or item.is_voice_message()
            stored.append(
                await asyncio.to_thread(
                    store_received,
                    self.core.daemon.runtime.store.root,
                    group,
                    data,
                    original=item.filename,
                    mime=item.content_type,
                    kind=VOICE if voice else None,
                    duration=item.duration if voice else None,
                    label="voice message" if voice else "file",
                    default_extension="ogg" if voice else "bin",
                )
            )
        return stored

    def _too_large(self, size: int) -> Refusal:
        limit = self.options.attachments_max_bytes
        return Refusal(
            f"Sorry, that file is {human_bytes(size)}; I take files up to {human_bytes(limit)}."
            if limit
            else "Sorry, I do not take files here."
        )

    # outbound

    def _target(self, chat: str, thread: str | None) -> discord.PartialMessageable:
        assert self.client is not None
        return self.client.get_partial_messageable(int(thread or chat))

    @staticmethod
    def _reference(
        target: discord.PartialMessageable, reply_to: str | None
    ) -> discord.MessageReference | None:
        """A reference to the message answered (a reply still goes when it is gone)."""
        import discord

        if not reply_to or not reply_to.isdigit():
            return None
        return discord.MessageReference(
            message_id=int(reply_to), channel_id=target.id, fail_if_not_exists=False
        )

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        """Send ``text`` in pieces of at most 2,000 characters into ``chat`` (its
        ``thread``), the first referencing ``reply_to``; each with a nonce from ``key``,
        enforced. The ids of the messages."""
        import discord

        target = self._target(chat, thread)
        reference = self._reference(target, reply_to)
        ids: list[str] = []
        for index, piece in enumerate(split_message(text, DISCORD_TEXT_MAX)):
            sent = await target.send(
                piece,
                nonce=nonce(key, index),  # discord.py sets enforce_nonce with it
                reference=reference if index == 0 else None,  # type: ignore[arg-type]
                allowed_mentions=discord.AllowedMentions.none(),
                mention_author=False,
            )
            ids.append(str(sent.id))
        return ids

    async def send_file(
        self, chat: str, thread: str | None, reply_to: str | None, file: OutgoingFile, key: str
    ) -> list[str]:
        """A message with the file attached and the caption as its content, referencing
        ``reply_to``, with a nonce from ``key`` enforced, as a text reply's first piece
        (a caption longer than one message follows in pieces of its own). Within
        Discord's nonce window a repeat returns the message made already. The ids of the
        messages."""
        import discord

        target = self._target(chat, thread)
        reference = self._reference(target, reply_to)
        data = await asyncio.to_thread(file.path.read_bytes)
        pieces = split_message(file.caption, DISCORD_TEXT_MAX) if file.caption.strip() else []
        sent = await target.send(
            pieces[0] if pieces else None,
            file=discord.File(io.BytesIO(data), filename=file.name),
            nonce=nonce(key, 0),
            reference=reference,  # type: ignore[arg-type]
            allowed_mentions=discord.AllowedMentions.none(),
            mention_author=False,
        )
        ids = [str(sent.id)]
        for index, piece in enumerate(pieces[1:], start=1):
            more = await target.send(
                piece, nonce=nonce(key, index), allowed_mentions=discord.AllowedMentions.none()
            )
            ids.append(str(more.id))
        return ids

    def classify(self, exc: BaseException) -> str:
        """By the exception's type: no connection made surely posted nothing; Discord's
        refusal (4xx) failed it; anything else may have posted (discord.py has retried
        5xx answers and dropped connections with the same nonce already)."""
        import aiohttp
        import discord

        if isinstance(exc, aiohttp.ClientConnectorError):
            return RETRY
        if isinstance(exc, discord.HTTPException) and not isinstance(
            exc, discord.DiscordServerError
        ):
            return FAILED
        return UNKNOWN

    async def typing(self, chat: str, thread: str | None, on: bool) -> None:
        if on and self.client is not None:
            await self._target(chat, thread).typing()
