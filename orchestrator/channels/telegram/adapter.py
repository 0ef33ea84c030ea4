"""The Telegram adapter: one bot polling the Bot API (python-telegram-bot's ``Bot``;
``api_url`` points it at a self-hosted Bot API server). The chat-app core does the rest
(``orchestrator.channels.chatapp.core``).

Inbound: a long poll of ``getUpdates``. Each update is handled, and the account's offset
is committed (in the queue's database) only after that: a message is queued with its
update id in the same transaction, so a crash re-reads the update and the queue drops it
as a duplicate. Private chats, group chats and forum topics (a topic is a thread) are
chats; in group chats a message addresses the bot when it mentions it (``@username``, a
command ``/cmd@username``, a text mention) or replies to it. Photos, documents, voice
notes and audio files up to ``attachments_max_bytes`` are stored under
``groups/<folder>/files/inbox/`` and described to the core (which transcribes, extracts
and names them); files the agent sends go out as photos, voice notes or documents. Edited
messages start nothing (the turn has seen the first text). A bot added to a group chat
that is not bound asks for pairing there.

Outbound: replies are threaded to the message they answer, split at Telegram's
4096-character limit on paragraph boundaries, and sent as HTML rendered from the
Markdown (plain text when Telegram refuses the HTML). A repeated send would post twice,
so a claimed reply is never sent again. 429 ``retry_after`` is honored; a group that
became a supergroup (``migrate_to_chat_id``) keeps its binding.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import re
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

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
from orchestrator.channels.telegram.kind import TelegramOptions
from orchestrator.channels.textfmt import markdown_to_html, split_message
from orchestrator.config.accounts import account_token
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.limits import (
    CHANNEL_POLL_TIMEOUT_SECONDS,
    CHANNEL_RETRY_AFTER_MAX_SECONDS,
    CHANNEL_TYPING_SECONDS,
    TELEGRAM_CAPTION_MAX,
    TELEGRAM_PHOTO_MAX_BYTES,
    TELEGRAM_TEXT_MAX,
)
from orchestrator.media.inbox import IMAGE, VOICE
from orchestrator.store.chats import FAILED, UNKNOWN
from orchestrator.units import human_bytes

if TYPE_CHECKING:
    import telegram

    from orchestrator.channels.chatapp.core import ChatAccount

log = logging.getLogger("orchestrator.channels.telegram")


@dataclass(frozen=True)
class Unreadable:
    """An update of a batch that python-telegram-bot cannot read, and why."""

    update_id: int
    problem: str


# python-telegram-bot gives time periods (429's retry_after) as timedelta with this set,
# instead of warning that ints are deprecated; read before it is imported.
os.environ.setdefault("PTB_TIMEDELTA", "1")
T = TypeVar("T")
ALLOWED_UPDATES = ("message", "edited_message", "my_chat_member")
_PHOTO_TYPES = ("image/jpeg", "image/png", "image/webp")  # what sendPhoto takes
GROUP_CHATS = ("group", "supergroup")


def retry_seconds(exc: Any) -> float:
    """A RetryAfter's wait in seconds (int or timedelta, whichever the library gives)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = exc.retry_after
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value)


def _seconds(value: Any) -> float | None:
    """A duration as python-telegram-bot gives it (int seconds or timedelta)."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value) if isinstance(value, int | float) else None


def _topic(thread: str | None) -> int | None:
    return int(thread) if thread and re.fullmatch(r"-?\d+", thread) else None


class TelegramAdapter(AdapterBase):
    """One bot: its poll loop and its sends."""

    typing_every = CHANNEL_TYPING_SECONDS

    def __init__(self, core: ChatAccount) -> None:
        super().__init__(core)
        self.options = cast(TelegramOptions, core.account.options)
        self.me: telegram.User | None = None
        self.bot: telegram.Bot | None = None

    @property
    def name(self) -> str:
        return self.core.name

    # life

    def _make_bot(self) -> telegram.Bot:
        from telegram import Bot
        from telegram.request import HTTPXRequest

        token = account_token(self.core.account, self.core.daemon.config.secrets_file)
        api = self.options.api_url or "https://api.telegram.org"
        return Bot(
            token,
            base_url=f"{api}/bot",
            base_file_url=f"{api}/file/bot",
            request=HTTPXRequest(
                connection_pool_size=8, read_timeout=30, write_timeout=30, connect_timeout=10
            ),
            get_updates_request=HTTPXRequest(
                connection_pool_size=1,
                read_timeout=CHANNEL_POLL_TIMEOUT_SECONDS + 15,
                connect_timeout=10,
            ),
        )

    async def connect(self) -> str:
        self.bot = self._make_bot()
        await self.bot.initialize()
        self.me = self.bot.bot
        health = self.core.health
        health.bot = self.me.username
        health.can_read_all_group_messages = getattr(self.me, "can_read_all_group_messages", None)
        return f"@{self.me.username}"

    async def close(self) -> None:
        if self.bot is not None:
            await self.bot.shutdown()

    # inbound

    async def receive(self) -> None:
        assert self.bot is not None
        from telegram.error import InvalidToken, RetryAfter, TelegramError

        core = self.core
        stored = await asyncio.to_thread(core.chats.get_state, self.name, "offset")
        offset = int(stored) if stored else None
        backoff = Backoff()
        while True:
            try:
                updates: Sequence[Any] = await self.bot.get_updates(
                    offset=offset,
                    timeout=CHANNEL_POLL_TIMEOUT_SECONDS,
                    allowed_updates=list(ALLOWED_UPDATES),
                )
            except asyncio.CancelledError:
                raise
            except RetryAfter as exc:
                wait = min(retry_seconds(exc), CHANNEL_RETRY_AFTER_MAX_SECONDS)
                log.info("Telegram account %s: getUpdates asked to wait %.0fs", self.name, wait)
                await asyncio.sleep(wait)
                continue
            except (TelegramError, InvalidToken, OSError) as exc:
                await core.read_failed("getUpdates", describe(exc), backoff)
                continue
            except Exception as exc:  # the library could not read an update it was given
                apart = await self._read_apart(offset)
                if apart is None:
                    await core.read_failed("getUpdates", describe(exc), backoff)
                    continue
                updates = apart
            backoff.reset()
            core.polled()
            for update in updates:
                if isinstance(update, Unreadable):
                    log.warning(
                        "Telegram account %s: update %d could not be read (%s); skipped",
                        self.name,
                        update.update_id,
                        update.problem,
                    )
                    offset = update.update_id + 1
                    await asyncio.to_thread(core.chats.set_state, self.name, "offset", str(offset))
                    continue
                try:
                    await self.handle(update)
                except asyncio.CancelledError:
                    raise
                except DaemonStopping:
                    return  # not committed: read again at the next start
                except OrchestratorError as exc:
                    await core.not_queued(f"update {update.update_id}", exc, backoff)
                    break
                except Exception:
                    log.exception(
                        "Telegram account %s: update %d could not be handled; skipped",
                        self.name,
                        update.update_id,
                    )
                offset = update.update_id + 1
                await asyncio.to_thread(core.chats.set_state, self.name, "offset", str(offset))
            await asyncio.to_thread(core.save_health)

    async def _read_apart(self, offset: int | None) -> list[Any] | None:
        """The batch at ``offset`` read again as it came, each update on its own: the
        ones the library can read, an Unreadable for each it cannot (one such update
        failed the whole batch, at every read: the account was stuck on it). None when
        that read fails too, or the batch does not say which updates it holds."""
        from telegram import Update

        assert self.bot is not None
        arguments: dict[str, Any] = {"timeout": 0, "allowed_updates": list(ALLOWED_UPDATES)}
        if offset is not None:
            arguments["offset"] = offset
        try:
            # Bot API method names are case-insensitive: spelled so, the library takes
            # it for a method it has no function for and returns the JSON as it is
            # (for "getUpdates" it would warn to use its get_updates(), which is what
            # could not read the batch)
            raw = await self.bot.do_api_request("getupdates", api_kwargs=arguments)
        except Exception:  # the read's own failure is the one reported
            return None
        if not isinstance(raw, list):
            return None
        out: list[Any] = []
        for item in raw:
            update_id = item.get("update_id") if isinstance(item, dict) else None
            if not isinstance(update_id, int) or isinstance(update_id, bool):
                return None  # what to skip cannot be told
            try:
                out.append(Update.de_json(item, self.bot))
            except Exception as exc:
                out.append(Unreadable(update_id, describe(exc)))
        return out

    async def handle(self, update: telegram.Update) -> None:
        """One update: a membership change, a move, or a message for the core."""
        if update.my_chat_member is not None:
            await self._membership(update)
            return
        if update.edited_message is not None:
            log.debug(
                "Telegram account %s: message %d in chat %d was edited; edits start no turn",
                self.name,
                update.edited_message.message_id,
                update.edited_message.chat.id,
            )
            return
        message = update.message
        if message is None:
            return
        chat = str(message.chat.id)
        if message.migrate_to_chat_id:
            new = str(message.migrate_to_chat_id)
            moved = await asyncio.to_thread(self.core.chats.move_chat, self.name, chat, new)
            log.info(
                "Telegram account %s: chat %s is now %s%s",
                self.name,
                chat,
                new,
                "; its binding follows" if moved else "",
            )
            return
        user = message.from_user
        if user is None or user.is_bot or message.migrate_from_chat_id:
            return
        thread = (
            str(message.message_thread_id)
            if message.is_topic_message and message.message_thread_id
            else None
        )
        await self.core.route(
            Received(
                chat=chat,
                sender=str(user.id),
                text=message.text or message.caption or "",
                message_id=str(message.message_id),
                event_id=str(update.update_id),
                thread=thread,
                group_chat=message.chat.type in GROUP_CHATS,
                title=message.chat.title or message.chat.full_name or message.chat.username,
                raw=message,
            )
        )

    def addressed(self, received: Received) -> bool:
        """Whether a group-chat message mentions the bot, names it in a command, or
        replies to one of its messages."""
        message: telegram.Message = received.raw
        me = self.me
        if me is None:
            return False
        replied = message.reply_to_message
        if (
            replied is not None
            and replied.from_user is not None
            and replied.from_user.id == me.id
            and not message.is_topic_message
        ) or (
            replied is not None
            and message.is_topic_message
            and replied.message_id != message.message_thread_id
            and replied.from_user is not None
            and replied.from_user.id == me.id
        ):
            return True
        handle = f"@{me.username}".lower() if me.username else None
        for found in (message.parse_entities(), message.parse_caption_entities()):
            for entity, text in found.items():
                if entity.type == "mention" and handle and text.lower() == handle:
                    return True
                if entity.type == "bot_command" and handle and text.lower().endswith(handle):
                    return True
                if entity.type == "text_mention" and entity.user and entity.user.id == me.id:
                    return True
        return False

    def mention_forms(self, received: Received) -> tuple[str, ...]:
        return (f"@{self.me.username}",) if self.me is not None and self.me.username else ()

    async def attachment(self, received: Received, group: str) -> Attachment:
        """Store a message's photo, document, voice note or audio file in the group's
        files/inbox and describe it; a Refusal for one over the limit (never
        downloaded), or None."""
        message: telegram.Message = received.raw
        limit = self.options.attachments_max_bytes
        duration: float | None = None
        original: str | None = None
        kind: str | None = None
        if message.photo:
            fitting = [p for p in message.photo if (p.file_size or 0) <= limit]
            if not fitting:
                return self._too_large(message.photo[-1].file_size or 0)
            item: Any = fitting[-1]
            mime, label, default = "image/jpeg", "photo", "jpg"
        elif message.voice is not None:
            item = message.voice
            mime, label, default, kind = item.mime_type or "audio/ogg", "voice note", "ogg", VOICE
            duration = _seconds(item.duration)
        elif message.audio is not None:
            item = message.audio
            original, mime, label, default = item.file_name, item.mime_type, "audio", "mp3"
            duration = _seconds(item.duration)
        elif message.document is not None:
            item = message.document
            original, mime, label, default = item.file_name, item.mime_type, "document", "bin"
        else:
            return None
        if not limit:
            return NO_FILES
        if (item.file_size or 0) > limit:
            return self._too_large(item.file_size or 0)
        bot = self.bot
        assert bot is not None
        file = await self.call(lambda: bot.get_file(item.file_id))
        if (file.file_size or 0) > limit:
            return self._too_large(file.file_size or 0)
        data = bytes(await file.download_as_bytearray())
        if len(data) > limit:
            return self._too_large(len(data))
        return await asyncio.to_thread(
            store_received,
            self.core.daemon.runtime.store.root,
            group,
            data,
            original=original,
            mime=mime,
            kind=kind,
            duration=duration,
            label=label,
            default_extension=default,
        )

    def _too_large(self, size: int) -> Refusal:
        limit = self.options.attachments_max_bytes
        return Refusal(
            f"Sorry, that file is {human_bytes(size)}; I take files up to {human_bytes(limit)}."
            if limit
            else "Sorry, I do not take files here."
        )

    async def _membership(self, update: telegram.Update) -> None:
        change = update.my_chat_member
        assert change is not None
        chat = change.chat
        joined = change.new_chat_member.status in ("member", "administrator") and (
            change.old_chat_member.status in ("left", "kicked")
        )
        if not joined:
            log.info(
                "Telegram account %s: the bot is now %s in chat %d",
                self.name,
                change.new_chat_member.status,
                chat.id,
            )
            return
        if chat.type == "private":
            return
        if await asyncio.to_thread(self.core.chats.binding, self.name, str(chat.id)) is None:
            await self.core.ask_pairing(
                str(chat.id),
                chat.title or chat.full_name or chat.username,
                f"{self.core.account.prefix}{change.from_user.id}",
                None,
            )

    # outbound

    async def call(self, make: Callable[[], Awaitable[T]]) -> T:
        """One Bot API call; a 429 is waited out (its retry_after, capped) and tried again."""
        from telegram.error import RetryAfter

        while True:
            try:
                return await make()
            except RetryAfter as exc:
                wait = min(retry_seconds(exc), CHANNEL_RETRY_AFTER_MAX_SECONDS)
                log.info("Telegram account %s: rate-limited; waiting %.0fs", self.name, wait)
                await asyncio.sleep(wait)

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        """Send ``text`` in pieces under Telegram's limit; the first replies to
        ``reply_to``. The ids of the messages sent. A chat that moved is followed."""
        from telegram.error import ChatMigrated

        target = int(reply_to) if reply_to and reply_to.isdigit() else None
        ids: list[str] = []
        for piece in split_message(text, TELEGRAM_TEXT_MAX):
            reply = target if not ids else None
            try:
                ids.append(await self._send_piece(chat, thread, reply, piece))
            except ChatMigrated as exc:
                new = str(exc.new_chat_id)
                await asyncio.to_thread(self.core.chats.move_chat, self.name, chat, new)
                log.info("Telegram account %s: chat %s moved to %s", self.name, chat, new)
                chat = new
                ids.append(await self._send_piece(chat, thread, None, piece))
        return ids

    async def _send_piece(
        self, chat: str, thread: str | None, reply_to: int | None, piece: str
    ) -> str:
        """One piece as HTML rendered from its Markdown; as plain text when Telegram
        refuses it as a bad request (the HTML is the likely cause: the plain text is
        refused too when it is not)."""
        from telegram import ReplyParameters
        from telegram.error import BadRequest

        assert self.bot is not None
        bot = self.bot
        reply = (
            ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
            if reply_to is not None
            else None
        )

        def send(parse: bool) -> Awaitable[Any]:
            return bot.send_message(
                chat_id=chat,
                text=markdown_to_html(piece) if parse else piece,
                parse_mode="HTML" if parse else None,
                message_thread_id=_topic(thread),
                reply_parameters=reply,
            )

        try:
            sent = await self.call(lambda: send(True))
        except BadRequest as exc:
            log.info(
                "Telegram account %s: the formatted reply was refused (%s); sent as plain text",
                self.name,
                exc,
            )
            sent = await self.call(lambda: send(False))
        return str(sent.message_id)

    async def send_file(
        self, chat: str, thread: str | None, reply_to: str | None, file: OutgoingFile, key: str
    ) -> list[str]:
        """The file as a photo (an image Telegram takes as one), a voice note (Ogg Opus)
        or a document, with its caption (a caption over Telegram's limit follows as a
        message of its own). Sent once: a claim is never sent again (the Bot API has no
        idempotency key), as for text."""
        from telegram import InputFile, ReplyParameters

        assert self.bot is not None
        bot = self.bot
        target = int(reply_to) if reply_to and reply_to.isdigit() else None
        reply = (
            ReplyParameters(message_id=target, allow_sending_without_reply=True)
            if target is not None
            else None
        )
        caption = file.caption if len(file.caption) <= TELEGRAM_CAPTION_MAX else ""
        data = await asyncio.to_thread(file.path.read_bytes)
        upload = InputFile(data, filename=file.name)
        common: dict[str, Any] = {
            "chat_id": chat,
            "caption": caption or None,
            "message_thread_id": _topic(thread),
            "reply_parameters": reply,
        }
        if (
            file.kind == IMAGE
            and file.mime in _PHOTO_TYPES
            and file.size <= TELEGRAM_PHOTO_MAX_BYTES
        ):
            sent = await self.call(lambda: bot.send_photo(photo=upload, **common))
        elif file.mime in ("audio/ogg", "audio/opus") or file.name.endswith((".ogg", ".opus")):
            sent = await self.call(lambda: bot.send_voice(voice=upload, **common))
        else:
            sent = await self.call(lambda: bot.send_document(document=upload, **common))
        ids = [str(sent.message_id)]
        if file.caption and not caption:
            ids += await self.send(chat, thread, None, file.caption, key)
        return ids

    def classify(self, exc: BaseException) -> str:
        """By the exception's type: a request never sent (the connection refused, not
        made in time, or none free) surely delivered nothing; a timeout after it was
        sent may have; any other error of the Bot API is a refusal."""
        import httpx
        from telegram.error import BadRequest, NetworkError, TelegramError

        cause = exc.__cause__
        if isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return RETRY
        # a BadRequest (a 400: Telegram's answer) is a NetworkError to the library
        if isinstance(exc, NetworkError) and not isinstance(exc, BadRequest):
            return UNKNOWN  # TimedOut included: it may have arrived
        if isinstance(exc, TelegramError):
            return FAILED
        return UNKNOWN

    async def typing(self, chat: str, thread: str | None, on: bool) -> None:
        from telegram.constants import ChatAction

        if on and self.bot is not None:
            await self.bot.send_chat_action(
                chat, ChatAction.TYPING, message_thread_id=_topic(thread)
            )
