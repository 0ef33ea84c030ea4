"""One chat-app account: what every app shares, around the adapter that speaks its app.

Inbound: the adapter hands each message to ``route``, which goes binding (an unbound
chat gets a pairing code once and reaches nothing), activation (in a group chat with
activation ``mention`` only a message that addresses the bot starts a turn), the
sender's rate per group (told once when over it), the bot's mention off the front of the
text, the adapter's file, the size, then the daemon; a refusal gets a notice in the chat,
and the files of a message not queued are removed from the inbox.

Outbound: a message's replies are sent when the daemon stores them (a listener wakes the
loop; a sweep every few seconds catches anything missed). Each reply is claimed in the
database before it is sent. When the app drops a repeated send (``resends_safely``), a
claim not confirmed at a crash is sent again at the next start; otherwise it is never
sent again (it stays readable with ``orchestrator chat`` and the HTTP API) rather than
posted twice; an app that drops a repeat only for a while (``resend_window``: Discord's
nonces) gets again only the claims younger than that. A send that raised is classified
by the adapter: refused (failed), maybe arrived (unknown, never sent again), or surely
not arrived (released and sent later). A message that could not be answered gets one
apology. A typing indicator is kept up while the turn runs; health is recorded for
``channel list`` and doctor.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.channels.chatapp.adapter import (
    RETRY,
    Attachment,
    ChatAdapter,
    OutgoingFile,
    Received,
    Refusal,
    StoredFile,
)
from orchestrator.channels.chatapp.files import discard_inbox_files
from orchestrator.channels.chatapp.mention import strip_mention
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
    CHANNEL_SWEEP_SECONDS,
    INBOUND_TEXT_MAX_CHARS,
)
from orchestrator.media.outbox import ReplyFile, file_line
from orchestrator.redact import redact
from orchestrator.store.chats import DEAD_NOTICE_SEQ, SENT, UNKNOWN
from orchestrator.store.messages import DEAD, INFLIGHT, Message
from orchestrator.units import human_bytes

if TYPE_CHECKING:
    from orchestrator.config.accounts import ChannelAccount
    from orchestrator.config.kinds import AccountKind
    from orchestrator.daemon.core import Daemon
    from orchestrator.store.chats import Binding

log = logging.getLogger("orchestrator.channels")
TYPING_MAX = 64  # typing indicators kept up at once per account
DEAD_NOTICE = (
    "Sorry, I could not answer that message. The operator can see why (orchestrator status)."
)


def send_key(message_id: str, seq: int, piece: int = 0) -> str:
    """The key of one piece of one reply: the same on every try (a host notice has a
    negative sequence)."""
    return f"orch.{message_id}.{'m' if seq < 0 else ''}{abs(seq)}.{piece}"


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


class Backoff:
    """Waits between failed tries: 1 s, doubling, at most CHANNEL_BACKOFF_MAX_SECONDS."""

    def __init__(self) -> None:
        self.seconds = 1.0

    def reset(self) -> None:
        self.seconds = 1.0

    async def wait(self) -> None:
        await asyncio.sleep(self.seconds)
        self.seconds = min(self.seconds * 2, CHANNEL_BACKOFF_MAX_SECONDS)


def describe(error: BaseException | str) -> str:
    """An error for a log line or a stored error: its type and text, secrets redacted."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return redact(text)[:500]


def files_of(stored: Attachment) -> tuple[StoredFile, ...]:
    """The StoredFiles of what ``attachment`` answered (none for a line or None)."""
    if isinstance(stored, StoredFile):
        return (stored,)
    if isinstance(stored, str | Refusal) or stored is None:
        return ()
    return tuple(stored)


def cannot_send_file(app: str, file: OutgoingFile) -> str:
    """What a chat is told in place of a file its app cannot take from the bot."""
    said = f"{file.caption}\n\n" if file.caption else ""
    return (
        f"{said}[a file was meant for you here, {file.name} ({human_bytes(file.size)}), "
        f"but I cannot send files in {app}]"
    )


class AdapterBase:
    """Defaults an adapter may keep: no files in, a line instead of a file out, every
    chat may be sent to, no typing."""

    chat_word = "chat"
    resends_safely = False
    resend_window: float | None = None
    typing_every = 5.0

    def __init__(self, core: ChatAccount) -> None:
        self.core = core

    async def typing(self, chat: str, thread: str | None, on: bool) -> None:
        return None

    def may_send(self, chat: str) -> bool:
        return True

    async def attachment(self, received: Received, group: str) -> Attachment:
        return None

    async def send_file(
        self, chat: str, thread: str | None, reply_to: str | None, file: OutgoingFile, key: str
    ) -> list[str]:
        """This app takes no files from the bot: the chat gets a line saying so."""
        text = cannot_send_file(self.core.kind.title, file)
        return await self.core.adapter.send(chat, thread, reply_to, text, key)

    async def close(self) -> None:
        return None


class ChatAccount:
    """One account of a chat app: its adapter's receive loop, its sender of replies, its
    typing indicators and its health."""

    def __init__(
        self,
        daemon: Daemon,
        account: ChannelAccount,
        loop: asyncio.AbstractEventLoop,
        kind: AccountKind,
    ) -> None:
        self.daemon = daemon
        self.account = account
        self.kind = kind
        self.loop = loop
        self.chats = daemon.chats
        self.health = Health()
        self.rate = SenderRate(account.rate_messages, account.rate_seconds)
        self.wake: asyncio.Queue[str] = asyncio.Queue()
        self.tasks: list[asyncio.Task[None]] = []
        self.typing: dict[str, asyncio.Task[None]] = {}
        self.stopped = False
        module, _, name = kind.adapter.partition(":")
        self.adapter: ChatAdapter = getattr(importlib.import_module(module), name)(self)

    @property
    def name(self) -> str:
        return self.account.name

    def line(self, text: str) -> str:
        """``text`` as a log line of this account starts."""
        return f"{self.kind.title} account {self.name}: {text}"

    # life

    async def start(self) -> None:
        self.tasks = [asyncio.create_task(self._run(), name=f"{self.account.channel}")]

    async def stop(self) -> None:
        self.stopped = True
        for task in [*self.tasks, *self.typing.values()]:
            task.cancel()
        for task in [*self.tasks, *list(self.typing.values())]:
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):
            await self.adapter.close()
        await asyncio.to_thread(self.save_health)

    def wake_soon(self, message_id: str) -> None:
        """From a worker thread: look at this message's replies."""
        if not self.stopped:
            self.loop.call_soon_threadsafe(self.wake.put_nowait, message_id)

    async def _run(self) -> None:
        """Log in (again and again, with backoff, until it works), then receive, send
        and sweep until stopped."""
        backoff = Backoff()
        while True:
            try:
                who = await self.adapter.connect()
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self.read_failed("connecting", describe(exc), backoff)
        self.health.state, self.health.since = "connected", time.time()
        await asyncio.to_thread(self.save_health)
        log.info(self.line("connected as %s"), who)
        # Claims not confirmed at the last stop: sent again with the same keys when the
        # app drops a piece it has already (and still remembers the key); else marked
        # unknown and never sent again, rather than posted twice.
        window = self.adapter.resend_window if self.adapter.resends_safely else 0.0
        if window is not None:
            stale = await asyncio.to_thread(self.chats.unconfirmed, self.name, time.time() - window)
            for message_id, seq in stale:
                log.warning(
                    self.line(
                        "reply %d of message %s may not have been sent (the daemon stopped "
                        "while sending it); it is not sent again"
                    ),
                    seq,
                    message_id,
                )
        if self.adapter.resends_safely:
            for message_id, _seq in await asyncio.to_thread(self.chats.in_flight_sends, self.name):
                self.wake.put_nowait(message_id)
        self.tasks += [
            asyncio.create_task(self._outbound(), name=f"{self.account.channel}-out"),
            asyncio.create_task(self._sweep(), name=f"{self.account.channel}-sweep"),
        ]
        await self.adapter.receive()

    # health

    def error(self, text: str) -> None:
        self.health.last_error, self.health.last_error_at = redact(text), time.time()

    def save_health(self) -> None:
        with contextlib.suppress(OrchestratorError):
            self.chats.set_state(self.name, "health", json.dumps(asdict(self.health)))

    def polled(self) -> None:
        """A read from the app succeeded."""
        self.health.state, self.health.last_poll = "connected", time.time()

    async def read_failed(self, what: str, error: str, backoff: Backoff) -> None:
        """``what`` (a read from the app, the login) failed: the health says so, a line
        is logged, and the backoff is waited out."""
        self.health.state = "error"
        self.error(f"{what} failed: {error}")
        await asyncio.to_thread(self.save_health)
        log.warning(
            self.line("%s failed (%s); trying again in %.0fs"),
            what,
            self.health.last_error,
            backoff.seconds,
        )
        await backoff.wait()

    async def not_queued(self, what: str, exc: OrchestratorError, backoff: Backoff) -> None:
        """The queue could not take what was read (a full disk): it is read again after
        the backoff."""
        self.error(f"{what} not queued: {exc.message}")
        log.error(
            self.line("%s not queued (%s); reading it again in %.0fs"),
            what,
            exc.message,
            backoff.seconds,
        )
        await backoff.wait()

    # inbound

    async def route(self, received: Received) -> None:
        """Route one message: to its bound group, to a pairing request, or nowhere (with
        a debug line saying why). OrchestratorError when the queue cannot take it (the
        adapter reads it again), DaemonStopping when the daemon stops."""
        binding = await asyncio.to_thread(self.chats.binding, self.name, received.chat)
        sender = self.account.prefix + received.sender
        if binding is None:
            await self.ask_pairing(received.chat, received.title, sender, received.thread)
            return
        if (
            received.group_chat
            and binding.activation == "mention"
            and not self.adapter.addressed(received)
        ):
            log.debug(
                self.line(
                    "message %s in %s %s ignored: activation is mention and it neither "
                    "mentions the bot nor replies to it"
                ),
                received.message_id,
                self.adapter.chat_word,
                received.chat,
            )
            return
        reply_to = received.message_id
        allowed, tell = self.rate.check(binding.group, sender, time.monotonic())
        if not allowed:
            log.info(
                self.line("%s is over its rate in group %s (%d per %ds)"),
                sender,
                binding.group,
                self.rate.messages,
                self.rate.seconds,
            )
            if tell:
                wait = self.rate.wait(binding.group, sender, time.monotonic())
                await self.notice(
                    received.chat,
                    received.thread,
                    reply_to,
                    f"You are sending messages faster than I can take them "
                    f"({self.rate.messages} per {self.rate.seconds // 60 or 1} minutes). "
                    f"I will read your messages again in about {max(1, round(wait / 60))} "
                    "minutes.",
                )
            return
        said = received.text
        text = strip_mention(said, self.adapter.mention_forms(received))
        try:
            stored = await self.adapter.attachment(received, binding.group)
        except OSError as exc:
            # files/inbox is not a real folder (the container may have planted a link):
            # nothing is written through it.
            log.warning(self.line("a file for group %s was not stored: %s"), binding.group, exc)
            stored = Refusal("Sorry, I could not store that file.")
        if isinstance(stored, Refusal):
            await self.notice(received.chat, received.thread, reply_to, stored.text)
            return
        media = files_of(stored)
        if isinstance(stored, str) and stored:
            text, said = f"{text}\n\n{stored}".strip(), f"{said}\n\n{stored}".strip()
        if not text.strip() and not media:
            log.debug(
                self.line("message %s in %s has no text or file it takes"),
                received.message_id,
                received.chat,
            )
            return
        queued: tuple[StoredFile, ...] = ()
        try:
            queued = await self._queue(received, binding, sender, text, said, media)
        finally:
            # The files of a message that was not queued (refused, or read again later,
            # when they are stored anew), or of a repeat of one queued before, would
            # stay in the inbox with nothing pointing at them.
            kept = {file.name for file in queued}
            left = [file.name for file in media if file.name not in kept]
            if left:
                await asyncio.to_thread(
                    discard_inbox_files, self.daemon.runtime.store.root, binding.group, left
                )

    async def _queue(
        self,
        received: Received,
        binding: Binding,
        sender: str,
        text: str,
        said: str,
        media: tuple[StoredFile, ...],
    ) -> tuple[StoredFile, ...]:
        """Hand the message to the daemon; the files of the message queued for it (an
        earlier one's when the app delivered it twice), or () when it was refused (told
        in the chat or logged)."""
        reply_to = received.message_id
        if len(said) > INBOUND_TEXT_MAX_CHARS:
            await self.notice(
                received.chat,
                received.thread,
                reply_to,
                f"That message is {len(said)} characters; I take at most {INBOUND_TEXT_MAX_CHARS}.",
            )
            return ()
        claim = self.chats.inbound_claim(
            self.name, received.event_id, received.chat, received.message_id
        )
        inbound = Inbound(
            binding.group,
            text,
            received.chat,
            sender,
            self.account.channel,
            received.thread,
            binding.trust,
            said=said if said != text else None,
            media=media,
        )
        try:
            message = await asyncio.to_thread(self.daemon.accept, inbound, claim)
        except GroupNotFound:
            log.warning(
                self.line(
                    "%s %s is bound to group %r, which does not exist; message dropped "
                    "(orchestrator unbind %s:%s)"
                ),
                self.adapter.chat_word,
                received.chat,
                binding.group,
                self.name,
                received.chat,
            )
            return ()
        except SenderRefused as exc:
            log.warning(self.line("%s"), exc.message)
            return ()
        except GroupPaused as exc:
            await self.notice(
                received.chat, received.thread, reply_to, f"I am paused: {exc.message}"
            )
            return ()
        except DaemonStopping:
            raise
        except BadInput as exc:
            log.info(self.line("message refused: %s"), exc.message)
            await self.notice(received.chat, received.thread, reply_to, exc.message)
            return ()
        self.health.messages_in += 1
        return message.media

    async def ask_pairing(
        self, chat: str, title: str | None, requester: str, thread: str | None
    ) -> None:
        """Give an unbound chat a pairing code, once (a chat that has one gets none)."""
        pairing, fresh = await asyncio.to_thread(
            self.chats.request_pairing, self.name, chat, title=title, requested_by=requester
        )
        word = self.adapter.chat_word
        if pairing is None:
            log.warning(
                self.line(
                    "%s %s is not bound, and as many pairing codes as allowed wait already; "
                    "it gets none (orchestrator pair --list)"
                ),
                word,
                chat,
            )
            return
        if not fresh:
            log.debug(
                self.line("%s %s is not bound; it has code %s already"), word, chat, pairing.code
            )
            return
        log.info(
            self.line(
                "%s %s (%s) is not bound; pairing code %s issued (approve: orchestrator pair "
                "%s GROUP)"
            ),
            word,
            chat,
            title,
            pairing.code,
            pairing.code,
        )
        await self.notice(
            chat,
            thread,
            None,
            f"This {word} is not connected to an assistant yet. Pairing code: {pairing.code}\n"
            f"The operator connects it with: orchestrator pair {pairing.code} GROUP\n"
            "The code is good once, for one hour.",
            key=f"orch.pair.{pairing.code}",
        )

    # outbound

    async def notice(
        self,
        chat: str,
        thread: str | None,
        reply_to: str | None,
        text: str,
        key: str | None = None,
    ) -> None:
        """A short message from the host itself (a pairing code, a refusal); failures are
        logged, not raised."""
        try:
            await self.adapter.send(chat, thread, reply_to, text, key or f"orch.n.{time.time_ns()}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(self.line("notice not sent: %s"), describe(exc))

    async def _outbound(self) -> None:
        while True:
            message_id = await self.wake.get()
            try:
                await self.deliver(message_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(self.line("sending replies of %s failed"), message_id)

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
                await asyncio.to_thread(self.save_health)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(self.line("sweep failed"))

    async def deliver(self, message_id: str) -> None:
        """Send the replies of a message of this account that are not sent yet (and,
        when the app drops repeated sends, those claimed but not confirmed)."""
        message = await asyncio.to_thread(self.daemon.queue.get, message_id)
        if message is None or message.channel != self.account.channel:
            return
        if not self.adapter.may_send(message.chat):
            return
        if message.state == INFLIGHT:
            self._start_typing(message)
        origin = await asyncio.to_thread(self.chats.inbound_of, message_id)
        reply_to = origin[1] if origin and origin[1] else None
        replies = await asyncio.to_thread(self.daemon.queue.replies_of, message_id)
        files = await asyncio.to_thread(self.daemon.queue.files_of, message_id) if replies else {}
        if message.state == DEAD and not replies:
            replies = [(DEAD_NOTICE_SEQ, DEAD_NOTICE)]
        sent = (
            await asyncio.to_thread(self.chats.sent, message_id)
            if self.adapter.resends_safely
            else {}
        )
        for seq, text in replies:
            state = sent.get(seq, (None, []))[0]
            if state is None:
                if not await asyncio.to_thread(self.chats.claim_send, message_id, seq, self.name):
                    continue
            elif state != "sending":
                continue
            await self._send_one(message, reply_to, seq, text, files.get(seq))
        if message.state != INFLIGHT:
            await self._stop_typing(message)

    async def _send_one(
        self,
        message: Message,
        reply_to: str | None,
        seq: int,
        text: str,
        file: ReplyFile | None = None,
    ) -> None:
        key = send_key(message.id, seq)
        try:
            if file is None:
                ids = await self.adapter.send(message.chat, message.thread, reply_to, text, key)
            else:
                caption = "" if text == file_line(file) else text
                outgoing = OutgoingFile(
                    Path(file.path), file.name, file.mime, file.size, file.kind, caption
                )
                ids = await self.adapter.send_file(
                    message.chat, message.thread, reply_to, outgoing, key
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outcome = self.adapter.classify(exc)
            if outcome == RETRY:
                if not self.adapter.resends_safely:
                    await asyncio.to_thread(self.chats.release_send, message.id, seq)
                # (a claim kept is sent again with the same key: the app drops a copy)
                self.error(f"send failed: {describe(exc)}")
                log.warning(
                    self.line("cannot reach %s to send a reply (%s); trying again in %.0fs"),
                    self.kind.title,
                    self.health.last_error,
                    CHANNEL_SWEEP_SECONDS,
                )
                self.loop.call_later(CHANNEL_SWEEP_SECONDS, self.wake_soon, message.id)
                return
            error = (
                f"no answer from {self.kind.title} ({describe(exc)}); not sent again"
                if outcome == UNKNOWN
                else f"{self.kind.title} refused the reply: {describe(exc)}"
            )
            await asyncio.to_thread(self.chats.finish_send, message.id, seq, outcome, error=error)
            self.error(error)
            log.warning(self.line("reply %d of %s: %s"), seq, message.id, error)
            return
        await asyncio.to_thread(self.chats.finish_send, message.id, seq, SENT, platform_ids=ids)
        self.health.messages_out += 1

    # typing

    def _start_typing(self, message: Message) -> None:
        if message.id in self.typing or len(self.typing) >= TYPING_MAX:
            return
        self.typing[message.id] = asyncio.create_task(self._keep_typing(message))

    async def _stop_typing(self, message: Message) -> None:
        task = self.typing.pop(message.id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(Exception):
                await self.adapter.typing(message.chat, message.thread, False)

    async def _keep_typing(self, message: Message) -> None:
        try:
            while True:
                try:
                    await self.adapter.typing(message.chat, message.thread, True)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.debug(self.line("typing: %s"), describe(exc))
                await asyncio.sleep(self.adapter.typing_every)
                current = await asyncio.to_thread(self.daemon.queue.get, message.id)
                if current is None or current.state != INFLIGHT:
                    return
        finally:
            self.typing.pop(message.id, None)
