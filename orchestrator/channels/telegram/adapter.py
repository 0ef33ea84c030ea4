"""The Telegram channel: every Telegram account in orchestrator.yaml ``channels``, each
polling the Bot API (python-telegram-bot's ``Bot``; ``api_url`` points it at a
self-hosted Bot API server) in one event loop on a thread of its own.

Inbound: a long poll of ``getUpdates``. Each update is handled, and the account's offset
is committed (in the queue's database) only after that: a message is queued with its
update id in the same transaction, so a crash re-reads the update and the queue drops it
as a duplicate. Private chats, group chats and forum topics (a topic is a thread) are
routed to the group their chat is bound to; a chat that is not bound gets a pairing code
once and reaches nothing. In group chats with activation ``mention`` only messages that
mention the bot, or reply to it, start a turn. Photos and documents up to
``attachments_max_bytes`` are stored under ``groups/<folder>/files/inbox/`` through the
confined file layer, with generated names. Edited messages start nothing (the turn has
seen the first text). Each sender has a rate per group; one over it is told once.

Outbound: a message's replies are sent when the daemon stores them (a listener wakes the
loop; a sweep every few seconds catches anything missed). Each reply is claimed in the
database *before* it is sent and never claimed twice: a crash between the claim and
Telegram's answer loses that one reply (it stays readable with ``orchestrator chat`` and
the HTTP API) rather than posting it twice. Replies are threaded to the message they
answer, split at Telegram's 4096-character limit on paragraph boundaries, and sent as
HTML rendered from the Markdown (plain text when Telegram rejects the entities). A typing
indicator is refreshed while the turn runs; 429 ``retry_after`` is honored; a group that
became a supergroup (``migrate_to_chat_id``) keeps its binding.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import re
import secrets
import time
import warnings
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.channels.chatapp import ChatAppChannel
from orchestrator.channels.textfmt import markdown_to_html, split_message
from orchestrator.config.accounts import ChannelAccount, account_token
from orchestrator.daemon.core import Inbound
from orchestrator.errors import (
    BadInput,
    DaemonStopping,
    GroupNotFound,
    GroupPaused,
    OrchestratorError,
    SenderRefused,
)
from orchestrator.limits import (
    CHANNEL_BACKOFF_MAX_SECONDS,
    CHANNEL_KEEP_SECONDS,
    CHANNEL_POLL_TIMEOUT_SECONDS,
    CHANNEL_RETRY_AFTER_MAX_SECONDS,
    CHANNEL_SWEEP_SECONDS,
    CHANNEL_TYPING_SECONDS,
    INBOUND_TEXT_MAX_CHARS,
    TELEGRAM_TEXT_MAX,
)
from orchestrator.redact import redact
from orchestrator.store.chats import DEAD_NOTICE_SEQ, FAILED, SENT, UNKNOWN, Binding
from orchestrator.store.messages import DEAD, INFLIGHT, Message

if TYPE_CHECKING:
    import telegram

    from orchestrator.daemon.core import Daemon

log = logging.getLogger("orchestrator.channels.telegram")
# python-telegram-bot gives time periods (429's retry_after) as timedelta with this set,
# instead of warning that ints are deprecated; read before it is imported.
os.environ.setdefault("PTB_TIMEDELTA", "1")
T = TypeVar("T")
KIND = "telegram"
ALLOWED_UPDATES = ("message", "edited_message", "my_chat_member")
GROUP_CHATS = ("group", "supergroup")
_EXTENSION = re.compile(r"\.([A-Za-z0-9]{1,8})$")
_MIME_EXTENSIONS = {
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/gif": "gif",
    "image/webp": "webp",
    "application/pdf": "pdf",
    "text/plain": "txt",
}


def retry_seconds(exc: Any) -> float:
    """A RetryAfter's wait in seconds (int or timedelta, whichever the library gives)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = exc.retry_after
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value)


def inbox_name(now: float, original: str | None, mime: str | None, default: str) -> str:
    """A generated name for a stored attachment: time, randomness, and an extension from
    the sender's file name only when it is 1-8 letters and digits. Nothing else of the
    sender's name reaches a path."""
    match = _EXTENSION.search(original or "")
    extension = match[1].lower() if match else _MIME_EXTENSIONS.get((mime or "").lower(), default)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{stamp}-{secrets.token_hex(4)}.{extension}"


def shown_name(name: str | None) -> str:
    """A sender's file name as text for the model: quoted, control characters dropped."""
    clean = "".join(c for c in (name or "") if c.isprintable())[:200]
    return json.dumps(clean, ensure_ascii=False)


def human_size(size: int) -> str:
    """A file's size as the chat is told it: '48.2 KB'."""
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} bytes"


class SenderRate:
    """At most ``messages`` per ``seconds`` per (group, sender); a sender over it is told
    once per stretch of being over it."""

    def __init__(self, messages: int, seconds: float) -> None:
        self.messages = messages
        self.seconds = seconds
        self.seen: dict[tuple[str, str], deque[float]] = {}
        self.told: set[tuple[str, str]] = set()

    def check(self, group: str, sender: str, now: float) -> tuple[bool, bool]:
        """(allowed, tell): whether the message may go on, and whether to tell the
        sender it may not (only the first time in a row)."""
        key = (group, sender)
        times = self.seen.setdefault(key, deque())
        while times and times[0] <= now - self.seconds:
            times.popleft()
        if len(times) < self.messages:
            times.append(now)
            self.told.discard(key)
            return True, False
        tell = key not in self.told
        self.told.add(key)
        return False, tell

    def wait(self, group: str, sender: str, now: float) -> float:
        times = self.seen.get((group, sender))
        return max(0.0, times[0] + self.seconds - now) if times else 0.0


@dataclass
class Health:
    state: str = "starting"  # starting | connected | error
    bot: str | None = None
    can_read_all_group_messages: bool | None = None
    since: float | None = None
    last_poll: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    messages_in: int = 0
    messages_out: int = 0


@dataclass(frozen=True)
class Refusal:
    text: str


class TelegramChannel(ChatAppChannel):
    """All Telegram accounts of the configuration, in one event loop thread."""

    name = KIND
    kind = KIND

    def make_account(self, definition: ChannelAccount) -> TelegramAccount:
        return TelegramAccount(self.daemon, definition, self.loop)


class TelegramAccount:
    """One bot: its poll loop, its sender of replies, its typing indicators."""

    def __init__(
        self, daemon: Daemon, account: ChannelAccount, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.daemon = daemon
        self.account = account
        self.loop = loop
        self.chats = daemon.chats
        self.health = Health()
        self.rate = SenderRate(account.rate_messages, account.rate_seconds)
        self.me: telegram.User | None = None
        self.bot: telegram.Bot | None = None
        self.wake: asyncio.Queue[str] = asyncio.Queue()
        self.tasks: list[asyncio.Task[None]] = []
        self.typing: dict[str, asyncio.Task[None]] = {}
        self.stopped = False

    @property
    def name(self) -> str:
        return self.account.name

    # life

    async def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self._run(), name=f"telegram-{self.name}"),
        ]

    async def stop(self) -> None:
        self.stopped = True
        for task in [*self.tasks, *self.typing.values()]:
            task.cancel()
        for task in [*self.tasks, *list(self.typing.values())]:
            with contextlib.suppress(BaseException):
                await task
        if self.bot is not None:
            with contextlib.suppress(Exception):
                await self.bot.shutdown()
        await asyncio.to_thread(self._save_health)

    def wake_soon(self, message_id: str) -> None:
        """From a worker thread: look at this message's replies."""
        if not self.stopped:
            self.loop.call_soon_threadsafe(self.wake.put_nowait, message_id)

    def _make_bot(self) -> telegram.Bot:
        from telegram import Bot
        from telegram.request import HTTPXRequest

        token = account_token(self.account, self.daemon.config.secrets_file)
        api = self.account.api_url or "https://api.telegram.org"
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

    async def _run(self) -> None:
        """Connect (again and again, with backoff, until it works), then poll, send and
        sweep until stopped."""
        backoff = 1.0
        while True:
            try:
                self.bot = self._make_bot()
                await self.bot.initialize()
                self.me = self.bot.bot
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._error(f"cannot connect: {self._describe(exc)}")
                log.warning(
                    "Telegram account %s: cannot connect (%s); trying again in %.0fs",
                    self.name,
                    self.health.last_error,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, CHANNEL_BACKOFF_MAX_SECONDS)
        self.health.bot = self.me.username
        self.health.can_read_all_group_messages = getattr(
            self.me, "can_read_all_group_messages", None
        )
        self.health.state, self.health.since = "connected", time.time()
        await asyncio.to_thread(self._save_health)
        log.info("Telegram account %s connected as @%s", self.name, self.me.username)
        for message_id, seq in await asyncio.to_thread(self.chats.unconfirmed, self.name):
            log.warning(
                "Telegram account %s: reply %d of message %s may not have been sent (the "
                "daemon stopped while sending it); it is not sent again",
                self.name,
                seq,
                message_id,
            )
        self.tasks += [
            asyncio.create_task(self._outbound(), name=f"telegram-{self.name}-out"),
            asyncio.create_task(self._sweep(), name=f"telegram-{self.name}-sweep"),
        ]
        await self._poll()

    # health

    def _describe(self, exc: BaseException) -> str:
        return redact(f"{type(exc).__name__}: {exc}")[:500]

    def _error(self, text: str) -> None:
        self.health.state = "error" if self.health.state != "connected" else "connected"
        self.health.last_error, self.health.last_error_at = redact(text), time.time()

    def _save_health(self) -> None:
        with contextlib.suppress(OrchestratorError):
            self.chats.set_state(self.name, "health", json.dumps(asdict(self.health)))

    # inbound

    async def _poll(self) -> None:
        assert self.bot is not None
        from telegram.error import InvalidToken, RetryAfter, TelegramError

        stored = await asyncio.to_thread(self.chats.get_state, self.name, "offset")
        offset = int(stored) if stored else None
        backoff = 1.0
        while True:
            try:
                updates = await self.bot.get_updates(
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
                self._error(f"getUpdates failed: {self._describe(exc)}")
                self.health.state = "error"
                await asyncio.to_thread(self._save_health)
                log.warning(
                    "Telegram account %s: getUpdates failed (%s); retrying in %.0fs",
                    self.name,
                    self.health.last_error,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, CHANNEL_BACKOFF_MAX_SECONDS)
                continue
            backoff = 1.0
            self.health.state, self.health.last_poll = "connected", time.time()
            for update in updates:
                try:
                    await self.handle(update)
                except asyncio.CancelledError:
                    raise
                except DaemonStopping:
                    return  # not committed: read again at the next start
                except OrchestratorError as exc:
                    # The queue cannot commit (a full disk): the update is read again.
                    self._error(f"update {update.update_id} not queued: {exc.message}")
                    log.error(
                        "Telegram account %s: update %d not queued (%s); reading it again in %.0fs",
                        self.name,
                        update.update_id,
                        exc.message,
                        backoff,
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, CHANNEL_BACKOFF_MAX_SECONDS)
                    break
                except Exception:
                    log.exception(
                        "Telegram account %s: update %d could not be handled; skipped",
                        self.name,
                        update.update_id,
                    )
                offset = update.update_id + 1
                await asyncio.to_thread(self.chats.set_state, self.name, "offset", str(offset))
            await asyncio.to_thread(self._save_health)

    async def handle(self, update: telegram.Update) -> None:
        """Route one update: to its bound group, to a pairing request, or nowhere (with a
        debug line saying why)."""
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
            moved = await asyncio.to_thread(self.chats.move_chat, self.name, chat, new)
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
        binding = await asyncio.to_thread(self.chats.binding, self.name, chat)
        if binding is None:
            await self._ask_pairing(message.chat, f"{KIND}:{user.id}", thread)
            return
        if (
            message.chat.type in GROUP_CHATS
            and binding.activation == "mention"
            and not self.addressed(message)
        ):
            log.debug(
                "Telegram account %s: message %d in chat %s ignored: activation is mention "
                "and it neither mentions the bot nor replies to it",
                self.name,
                message.message_id,
                chat,
            )
            return
        await self._route(update, message, binding, f"{KIND}:{user.id}", thread)

    def addressed(self, message: telegram.Message) -> bool:
        """Whether a group-chat message mentions the bot, names it in a command, or
        replies to one of its messages."""
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

    async def _route(
        self,
        update: telegram.Update,
        message: telegram.Message,
        binding: Binding,
        sender: str,
        thread: str | None,
    ) -> None:
        chat = str(message.chat.id)
        allowed, tell = self.rate.check(binding.group, sender, time.monotonic())
        if not allowed:
            log.info(
                "Telegram account %s: %s is over its rate in group %s (%d per %ds)",
                self.name,
                sender,
                binding.group,
                self.rate.messages,
                self.rate.seconds,
            )
            if tell:
                wait = self.rate.wait(binding.group, sender, time.monotonic())
                await self.notice(
                    chat,
                    thread,
                    message.message_id,
                    f"You are sending messages faster than I can take them "
                    f"({self.rate.messages} per {self.rate.seconds // 60 or 1} minutes). "
                    f"I will read your messages again in about {max(1, round(wait / 60))} "
                    "minutes.",
                )
            return
        text = message.text or message.caption or ""
        try:
            stored = await self._attachment(message, binding.group)
        except OSError as exc:
            # files/inbox is not a real folder (the container may have planted a link):
            # nothing is written through it.
            log.warning(
                "Telegram account %s: a file for group %s was not stored: %s",
                self.name,
                binding.group,
                exc,
            )
            stored = Refusal("Sorry, I could not store that file.")
        if isinstance(stored, Refusal):
            await self.notice(chat, thread, message.message_id, stored.text)
            return
        if stored:
            text = f"{text}\n\n{stored}".strip()
        if not text.strip():
            log.debug(
                "Telegram account %s: message %d in chat %s has no text or file we take",
                self.name,
                message.message_id,
                chat,
            )
            return
        if len(text) > INBOUND_TEXT_MAX_CHARS:
            await self.notice(
                chat,
                thread,
                message.message_id,
                f"That message is {len(text)} characters; I take at most {INBOUND_TEXT_MAX_CHARS}.",
            )
            return
        claim = self.chats.inbound_claim(
            self.name, str(update.update_id), chat, str(message.message_id)
        )
        try:
            await asyncio.to_thread(
                self.daemon.accept,
                Inbound(
                    binding.group, text, chat, sender, self.account.channel, thread, binding.trust
                ),
                claim,
            )
        except GroupNotFound:
            log.warning(
                "Telegram account %s: chat %s is bound to group %r, which does not exist; "
                "message dropped (orchestrator unbind %s:%s)",
                self.name,
                chat,
                binding.group,
                self.name,
                chat,
            )
            return
        except SenderRefused as exc:
            log.warning("Telegram account %s: %s", self.name, exc.message)
            return
        except GroupPaused as exc:
            await self.notice(chat, thread, message.message_id, f"I am paused: {exc.message}")
            return
        except DaemonStopping:
            raise
        except BadInput as exc:
            log.info("Telegram account %s: message refused: %s", self.name, exc.message)
            await self.notice(chat, thread, message.message_id, exc.message)
            return
        self.health.messages_in += 1

    async def _attachment(self, message: telegram.Message, group: str) -> str | Refusal | None:
        """Store a message's photo or document in the group's files/inbox; the line
        that tells the turn about it, a Refusal for one over the limit, or None."""
        limit = self.account.attachments_max_bytes
        if message.photo:
            fitting = [p for p in message.photo if (p.file_size or 0) <= limit]
            if not fitting:
                return self._too_large(message.photo[-1].file_size or 0)
            item: Any = fitting[-1]
            original, mime, kind, default = None, "image/jpeg", "photo", "jpg"
        elif message.document is not None:
            item = message.document
            original, mime, kind, default = item.file_name, item.mime_type, "document", "bin"
            if (item.file_size or 0) > limit:
                return self._too_large(item.file_size or 0)
        else:
            return None
        bot = self.bot
        assert bot is not None
        file = await self.call(lambda: bot.get_file(item.file_id))
        if (file.file_size or 0) > limit:
            return self._too_large(file.file_size or 0)
        data = bytes(await file.download_as_bytearray())
        if len(data) > limit:
            return self._too_large(len(data))
        name = inbox_name(time.time(), original, mime, default)
        await asyncio.to_thread(self._store_file, group, name, data)
        described = f"{kind}"
        if original:
            described += f" {shown_name(original)}"
        return (
            f"[attachment: files/inbox/{name} ({described}, {mime or 'unknown type'}, "
            f"{human_size(len(data))})]"
        )

    def _too_large(self, size: int) -> Refusal:
        limit = self.account.attachments_max_bytes
        return Refusal(
            f"Sorry, that file is {human_size(size)}; I take files up to {human_size(limit)}."
            if limit
            else "Sorry, I do not take files here."
        )

    def _store_file(self, group: str, name: str, data: bytes) -> None:
        """Create the file exclusively through directory descriptors: a link planted in
        files/ by the container cannot redirect the write."""
        from orchestrator.confined import open_group_dir

        with (
            open_group_dir(self.daemon.runtime.store.root, group) as folder,
            folder.open_dir("files/inbox", create=True) as inbox,
        ):
            if not inbox.create_exclusive(name, data):
                raise OrchestratorError(f"files/inbox/{name} exists already")

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
        if await asyncio.to_thread(self.chats.binding, self.name, str(chat.id)) is None:
            await self._ask_pairing(chat, f"{KIND}:{change.from_user.id}", None)

    async def _ask_pairing(self, chat: telegram.Chat, requester: str, thread: str | None) -> None:
        title = chat.title or chat.full_name or chat.username
        pairing, fresh = await asyncio.to_thread(
            self.chats.request_pairing,
            self.name,
            str(chat.id),
            title=title,
            requested_by=requester,
        )
        if pairing is None:
            log.warning(
                "Telegram account %s: chat %d is not bound, and as many pairing codes as "
                "allowed wait already; it gets none (orchestrator pair --list)",
                self.name,
                chat.id,
            )
            return
        if not fresh:
            log.debug(
                "Telegram account %s: chat %d is not bound; it has code %s already",
                self.name,
                chat.id,
                pairing.code,
            )
            return
        log.info(
            "Telegram account %s: chat %d (%s) is not bound; pairing code %s issued "
            "(approve: orchestrator pair %s GROUP)",
            self.name,
            chat.id,
            title,
            pairing.code,
            pairing.code,
        )
        await self.notice(
            str(chat.id),
            thread,
            None,
            f"This chat is not connected to an assistant yet. Pairing code: {pairing.code}\n"
            f"The operator connects it with: orchestrator pair {pairing.code} GROUP\n"
            "The code is good once, for one hour.",
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

    async def notice(self, chat: str, thread: str | None, reply_to: int | None, text: str) -> None:
        """A short message from the host itself (a pairing code, a refusal); failures are
        logged, not raised."""
        from telegram.error import TelegramError

        try:
            await self.send_text(chat, thread, reply_to, text)
        except TelegramError as exc:
            log.warning("Telegram account %s: notice not sent: %s", self.name, self._describe(exc))

    async def send_text(
        self, chat: str, thread: str | None, reply_to: int | None, text: str
    ) -> list[str]:
        """Send ``text`` in pieces under Telegram's limit; the first replies to
        ``reply_to``. The ids of the messages sent. A chat that moved is followed."""
        from telegram.error import ChatMigrated

        ids: list[str] = []
        for piece in split_message(text, TELEGRAM_TEXT_MAX):
            reply = reply_to if not ids else None
            try:
                ids.append(await self._send_piece(chat, thread, reply, piece))
            except ChatMigrated as exc:
                new = str(exc.new_chat_id)
                await asyncio.to_thread(self.chats.move_chat, self.name, chat, new)
                log.info("Telegram account %s: chat %s moved to %s", self.name, chat, new)
                chat = new
                ids.append(await self._send_piece(chat, thread, None, piece))
        return ids

    async def _send_piece(
        self, chat: str, thread: str | None, reply_to: int | None, piece: str
    ) -> str:
        """One piece as HTML rendered from its Markdown; as plain text when Telegram
        refuses the entities."""
        from telegram import ReplyParameters
        from telegram.error import BadRequest

        assert self.bot is not None
        bot = self.bot
        topic = int(thread) if thread and re.fullmatch(r"-?\d+", thread) else None
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
                message_thread_id=topic,
                reply_parameters=reply,
            )

        try:
            sent = await self.call(lambda: send(True))
        except BadRequest as exc:
            if "entit" not in str(exc).lower() and "parse" not in str(exc).lower():
                raise
            log.info(
                "Telegram account %s: the formatted reply was refused (%s); sent as plain text",
                self.name,
                exc,
            )
            sent = await self.call(lambda: send(False))
        return str(sent.message_id)

    async def _outbound(self) -> None:
        while True:
            message_id = await self.wake.get()
            try:
                await self.deliver(message_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "Telegram account %s: sending replies of %s failed", self.name, message_id
                )

    async def _sweep(self) -> None:
        """Replies stored while no event reached us (or whose send was put off)."""
        while True:
            await asyncio.sleep(CHANNEL_SWEEP_SECONDS)
            try:
                found = await asyncio.to_thread(
                    self.chats.unsent, self.account.channel, time.time() - CHANNEL_KEEP_SECONDS
                )
                for message_id in found:
                    self.wake.put_nowait(message_id)
                await asyncio.to_thread(self._save_health)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Telegram account %s: sweep failed", self.name)

    async def deliver(self, message_id: str) -> None:
        """Send the replies of a message of this account that are not sent yet."""
        message = await asyncio.to_thread(self.daemon.queue.get, message_id)
        if message is None or message.channel != self.account.channel:
            return
        if message.state == INFLIGHT:
            self._start_typing(message)
        origin = await asyncio.to_thread(self.chats.inbound_of, message_id)
        reply_to = int(origin[1]) if origin and origin[1] and origin[1].isdigit() else None
        chat = message.chat
        replies = await asyncio.to_thread(self.daemon.queue.replies_of, message_id)
        if message.state == DEAD and not replies:
            replies = [
                (
                    DEAD_NOTICE_SEQ,
                    "Sorry, I could not answer that message. The operator can see why "
                    "(orchestrator status).",
                )
            ]
        for seq, text in replies:
            if not await asyncio.to_thread(self.chats.claim_send, message_id, seq, self.name):
                continue
            await self._send_one(message, chat, reply_to, seq, text)

    async def _send_one(
        self, message: Message, chat: str, reply_to: int | None, seq: int, text: str
    ) -> None:
        from telegram.error import NetworkError, TelegramError, TimedOut

        try:
            ids = await self.send_text(chat, message.thread, reply_to, text)
        except TimedOut as exc:
            # It may have arrived: never sent again.
            error = f"no answer from Telegram ({self._describe(exc)}); not sent again"
            await asyncio.to_thread(self.chats.finish_send, message.id, seq, UNKNOWN, error=error)
            self._error(error)
            log.warning(
                "Telegram account %s: reply %d of %s: %s", self.name, seq, message.id, error
            )
            return
        except NetworkError as exc:
            if "ConnectError" in str(exc):
                # The connection was refused: it surely did not arrive; sent at a later sweep.
                await asyncio.to_thread(self.chats.release_send, message.id, seq)
                self._error(f"sendMessage failed: {self._describe(exc)}")
                log.warning(
                    "Telegram account %s: cannot reach Telegram to send a reply (%s); "
                    "trying again shortly",
                    self.name,
                    self.health.last_error,
                )
                return
            error = f"sendMessage failed: {self._describe(exc)}"
            await asyncio.to_thread(self.chats.finish_send, message.id, seq, UNKNOWN, error=error)
            self._error(error)
            return
        except TelegramError as exc:
            error = f"sendMessage refused: {self._describe(exc)}"
            await asyncio.to_thread(self.chats.finish_send, message.id, seq, FAILED, error=error)
            self._error(error)
            log.warning(
                "Telegram account %s: reply %d of %s: %s", self.name, seq, message.id, error
            )
            return
        await asyncio.to_thread(self.chats.finish_send, message.id, seq, SENT, platform_ids=ids)
        self.health.messages_out += 1

    def _start_typing(self, message: Message) -> None:
        if message.id in self.typing or len(self.typing) >= 64:
            return
        self.typing[message.id] = asyncio.create_task(self._keep_typing(message))

    async def _keep_typing(self, message: Message) -> None:
        from telegram.constants import ChatAction
        from telegram.error import TelegramError

        assert self.bot is not None
        topic = (
            int(message.thread) if message.thread and message.thread.lstrip("-").isdigit() else None
        )
        try:
            while True:
                try:
                    await self.bot.send_chat_action(
                        message.chat, ChatAction.TYPING, message_thread_id=topic
                    )
                except TelegramError as exc:
                    log.debug("Telegram account %s: typing: %s", self.name, self._describe(exc))
                await asyncio.sleep(CHANNEL_TYPING_SECONDS)
                current = await asyncio.to_thread(self.daemon.queue.get, message.id)
                if current is None or current.state != INFLIGHT:
                    return
        finally:
            self.typing.pop(message.id, None)
