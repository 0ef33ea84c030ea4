"""The Matrix channel: every Matrix account in orchestrator.yaml ``channels``, each a
client-server API client (matrix-nio) logged in with an access token kept on the host,
in one event loop on a thread of its own.

Inbound: a long-poll ``/sync``. Each event is handled, and the account's ``since`` token
is committed (in the queue's database) only after the whole batch: a message is queued
with its event id in the same transaction, so a crash re-reads the batch and the queue
drops what it has. The first sync of an account (no token yet) only learns the rooms:
history is not answered. Rooms are chats and ``m.thread`` threads are threads; in a room
of more than two members, activation ``mention`` starts a turn only for messages that
mention the bot (its user id or name, or ``m.mentions``) or reply to it. Edits start
nothing.

Invites: the bot joins a room when the inviter is one of the account's
``allow_inviters``, or the room is bound already. Any other invite is refused, with the
pairing code as the refusal's reason (the only way to answer without joining): the
operator approves it with ``orchestrator pair CODE GROUP`` and the inviter invites the
bot again. A joined room that is not bound gets the code once, in the room.

Outbound: replies are ``m.notice`` events (bots should not set off other bots), with a
plain ``body`` and the Markdown rendered as ``formatted_body``, rich replies to the
message they answer (in its thread when it has one), split into pieces. The transaction
id of each piece is derived from (message id, reply sequence, piece), so a resend after
a crash is idempotent on the server: a reply claimed but not confirmed when the daemon
stopped is sent again at the next start, and nobody sees it twice. A typing notification
is held while the turn runs.

End-to-end encrypted rooms are not supported: the bot says so once in such a room and
never acts there (nothing from it is routed, no reply is sent into it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import urllib.parse
from collections import OrderedDict
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from orchestrator.channels.chatapp import ChatAppChannel
from orchestrator.channels.telegram import Health, SenderRate
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
    CHANNEL_SWEEP_SECONDS,
    INBOUND_TEXT_MAX_CHARS,
    MATRIX_TEXT_MAX,
)
from orchestrator.redact import redact
from orchestrator.store.chats import DEAD_NOTICE_SEQ, FAILED, SENT, Binding
from orchestrator.store.messages import DEAD, INFLIGHT, Message

if TYPE_CHECKING:
    import nio

    from orchestrator.daemon.core import Daemon

log = logging.getLogger("orchestrator.channels.matrix")
KIND = "matrix"
TYPING_HOLD_MS = 30_000
SENT_REMEMBERED = 2_000  # event ids of our own messages kept to recognize replies to them


def txn_id(message_id: str, seq: int, piece: int) -> str:
    """The transaction id of one piece of one reply: the same on every try."""
    return f"orch.{message_id}.{'m' if seq < 0 else ''}{abs(seq)}.{piece}"


def relation(thread: str | None, reply_to: str | None) -> dict[str, Any] | None:
    """``m.relates_to`` of a reply: in its thread (with a reply fallback for clients
    without threads), or a rich reply."""
    if thread:
        return {
            "rel_type": "m.thread",
            "event_id": thread,
            "is_falling_back": reply_to is None,
            "m.in_reply_to": {"event_id": reply_to or thread},
        }
    if reply_to:
        return {"m.in_reply_to": {"event_id": reply_to}}
    return None


def notice_content(text: str, thread: str | None, reply_to: str | None) -> dict[str, Any]:
    content: dict[str, Any] = {
        "msgtype": "m.notice",
        "body": text,
        "format": "org.matrix.custom.html",
        "formatted_body": markdown_to_html(text),
    }
    relates = relation(thread, reply_to)
    if relates:
        content["m.relates_to"] = relates
    return content


class MatrixChannel(ChatAppChannel):
    """All Matrix accounts of the configuration, in one event loop thread."""

    name = KIND
    kind = KIND

    def make_account(self, definition: ChannelAccount) -> MatrixAccount:
        return MatrixAccount(self.daemon, definition, self.loop)


class MatrixAccount:
    """One bot user: its sync loop, its sender of replies, its typing notifications."""

    def __init__(
        self, daemon: Daemon, account: ChannelAccount, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.daemon = daemon
        self.account = account
        self.loop = loop
        self.chats = daemon.chats
        self.health = Health(bot=account.user_id)
        self.rate = SenderRate(account.rate_messages, account.rate_seconds)
        self.client: nio.AsyncClient | None = None
        self.wake: asyncio.Queue[str] = asyncio.Queue()
        self.tasks: list[asyncio.Task[None]] = []
        self.typing: dict[str, asyncio.Task[None]] = {}
        self.own_events: OrderedDict[str, None] = OrderedDict()
        self.stopped = False

    @property
    def name(self) -> str:
        return self.account.name

    @property
    def user_id(self) -> str:
        return str(self.account.user_id)

    async def start(self) -> None:
        self.tasks = [asyncio.create_task(self._run(), name=f"matrix-{self.name}")]

    async def stop(self) -> None:
        self.stopped = True
        for task in [*self.tasks, *self.typing.values()]:
            task.cancel()
        for task in [*self.tasks, *list(self.typing.values())]:
            with contextlib.suppress(BaseException):
                await task
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()
        await asyncio.to_thread(self._save_health)

    def wake_soon(self, message_id: str) -> None:
        if not self.stopped:
            self.loop.call_soon_threadsafe(self.wake.put_nowait, message_id)

    def _describe(self, error: object) -> str:
        return redact(str(error))[:500]

    def _error(self, text: str) -> None:
        self.health.last_error, self.health.last_error_at = redact(text), time.time()

    def _save_health(self) -> None:
        with contextlib.suppress(OrchestratorError):
            self.chats.set_state(self.name, "health", json.dumps(asdict(self.health)))

    # life

    async def _run(self) -> None:
        import nio

        backoff = 1.0
        while True:
            try:
                client = nio.AsyncClient(str(self.account.homeserver), self.user_id)
                client.access_token = account_token(self.account, self.daemon.config.secrets_file)
                who = await client.whoami()
                if not isinstance(who, nio.WhoamiResponse):
                    await client.close()
                    raise OrchestratorError(f"whoami failed: {getattr(who, 'message', who)}")
                if who.user_id != self.user_id:
                    await client.close()
                    raise OrchestratorError(
                        f"the token belongs to {who.user_id}, not to {self.user_id}"
                    )
                client.user_id = who.user_id
                client.device_id = who.device_id or ""
                self.client = client
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.health.state = "error"
                self._error(f"cannot log in: {self._describe(exc)}")
                await asyncio.to_thread(self._save_health)
                log.warning(
                    "Matrix account %s: cannot log in (%s); trying again in %.0fs",
                    self.name,
                    self.health.last_error,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, CHANNEL_BACKOFF_MAX_SECONDS)
        self.health.state, self.health.since = "connected", time.time()
        await asyncio.to_thread(self._save_health)
        log.info("Matrix account %s connected as %s", self.name, self.user_id)
        # Claims not confirmed at the last stop are sent again with the same transaction
        # ids: the server drops a piece it has already.
        for message_id, _seq in await asyncio.to_thread(self.chats.in_flight_sends, self.name):
            self.wake.put_nowait(message_id)
        self.tasks += [
            asyncio.create_task(self._outbound(), name=f"matrix-{self.name}-out"),
            asyncio.create_task(self._sweep(), name=f"matrix-{self.name}-sweep"),
        ]
        await self._sync_loop()

    # inbound

    async def _sync_loop(self) -> None:
        import nio

        assert self.client is not None
        client = self.client
        since = await asyncio.to_thread(self.chats.get_state, self.name, "since")
        first = since is None
        backoff = 1.0
        while True:
            try:
                response = await client.sync(
                    timeout=CHANNEL_POLL_TIMEOUT_SECONDS * 1000,
                    since=since,
                    full_state=first,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                response = exc
            if not isinstance(response, nio.SyncResponse):
                self.health.state = "error"
                self._error(
                    f"sync failed: {self._describe(getattr(response, 'message', response))}"
                )
                await asyncio.to_thread(self._save_health)
                log.warning(
                    "Matrix account %s: sync failed (%s); retrying in %.0fs",
                    self.name,
                    self.health.last_error,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, CHANNEL_BACKOFF_MAX_SECONDS)
                continue
            backoff = 1.0
            self.health.state, self.health.last_poll = "connected", time.time()
            try:
                await self.handle_sync(response, history=first)
            except DaemonStopping:
                return  # not committed: read again at the next start
            except OrchestratorError as exc:
                self._error(f"events not queued: {exc.message}")
                log.error(
                    "Matrix account %s: events not queued (%s); reading them again",
                    self.name,
                    exc.message,
                )
                await asyncio.sleep(backoff)
                continue
            since, first = response.next_batch, False
            await asyncio.to_thread(self.chats.set_state, self.name, "since", since)
            await asyncio.to_thread(self._save_health)

    async def handle_sync(self, response: nio.SyncResponse, *, history: bool) -> None:
        """Invites, then each joined room's events. ``history``: the account's first
        sync, whose timeline is history and is not answered."""
        for room_id, info in response.rooms.invite.items():
            await self._invite(room_id, info)
        for room_id, info in response.rooms.join.items():
            room = self.client.rooms.get(room_id) if self.client else None
            if room is not None and room.encrypted:
                await self._refuse_encrypted(room_id)
                continue
            if history:
                continue
            for event in info.timeline.events:
                await self._event(room_id, room, event)

    async def _invite(self, room_id: str, info: Any) -> None:
        import nio

        inviter = None
        title = None
        for event in info.invite_state:
            if (
                isinstance(event, nio.InviteMemberEvent)
                and event.state_key == self.user_id
                and event.membership == "invite"
            ):
                inviter = event.sender
            if isinstance(event, nio.InviteNameEvent):
                title = event.name
        if inviter is None:
            return
        bound = await asyncio.to_thread(self.chats.binding, self.name, room_id)
        if inviter in self.account.allow_inviters or bound is not None:
            assert self.client is not None
            joined = await self.client.join(room_id)
            log.info(
                "Matrix account %s: joined %s, invited by %s (%s)",
                self.name,
                room_id,
                inviter,
                "an allowed inviter" if bound is None else "the room is bound",
            )
            if not isinstance(joined, nio.JoinResponse):
                self._error(f"join {room_id} failed: {getattr(joined, 'message', joined)}")
            return
        pairing, fresh = await asyncio.to_thread(
            self.chats.request_pairing,
            self.name,
            room_id,
            title=title,
            requested_by=f"{KIND}:{inviter}",
        )
        if pairing is not None and fresh:
            reason = (
                f"Not connected to an assistant yet. Pairing code: {pairing.code}. The "
                f"operator connects this room with: orchestrator pair {pairing.code} GROUP; "
                "then invite me again. The code is good once, for one hour."
            )
            log.info(
                "Matrix account %s: invite to %s by %s refused; pairing code %s issued "
                "(approve: orchestrator pair %s GROUP)",
                self.name,
                room_id,
                inviter,
                pairing.code,
                pairing.code,
            )
        else:
            reason = None
            log.info(
                "Matrix account %s: invite to %s by %s refused (%s)",
                self.name,
                room_id,
                inviter,
                "its code was given already" if pairing else "too many pairing codes wait",
            )
        await self._leave(room_id, reason)

    async def _leave(self, room_id: str, reason: str | None) -> None:
        """Refuse an invite (or leave a room), with a reason the inviter sees."""
        assert self.client is not None
        path = f"/_matrix/client/v3/rooms/{urllib.parse.quote(room_id, safe='')}/leave"
        response = await self.client.send(
            "POST",
            path,
            json.dumps({"reason": reason} if reason else {}),
            headers={
                "Authorization": f"Bearer {self.client.access_token}",
                "Content-Type": "application/json",
            },
        )
        if response.status != 200:
            self._error(f"leave {room_id}: HTTP {response.status}")
        response.release()

    async def _refuse_encrypted(self, room_id: str) -> None:
        key = f"e2e-notice:{room_id}"
        if await asyncio.to_thread(self.chats.get_state, self.name, key):
            return
        await asyncio.to_thread(self.chats.set_state, self.name, key, str(time.time()))
        log.warning(
            "Matrix account %s: %s is end-to-end encrypted; the bot does not act there",
            self.name,
            room_id,
        )
        await self._notice(
            room_id,
            None,
            None,
            "This room is end-to-end encrypted, which I do not support: I cannot read it, "
            "and I will not answer here. Talk to me in a room without encryption.",
            txn=f"orch.e2e.{room_id}",
        )

    def _mentions_me(self, content: dict[str, Any], body: str) -> bool:
        mentions = content.get("m.mentions")
        if isinstance(mentions, dict) and self.user_id in (mentions.get("user_ids") or []):
            return True
        localpart = self.user_id.split(":")[0].lstrip("@")
        lowered = body.lower()
        if self.user_id.lower() in lowered or re.search(
            rf"(^|\W)@?{re.escape(localpart.lower())}(\W|$)", lowered
        ):
            return True
        relates = content.get("m.relates_to")
        if isinstance(relates, dict):
            replied = (relates.get("m.in_reply_to") or {}).get("event_id")
            if replied in self.own_events and not relates.get("is_falling_back"):
                return True
        return False

    async def _event(self, room_id: str, room: Any, event: Any) -> None:
        import nio

        if getattr(event, "sender", None) == self.user_id:
            return
        if isinstance(event, nio.MegolmEvent):
            await self._refuse_encrypted(room_id)
            return
        if not isinstance(event, nio.RoomMessageText):
            log.debug(
                "Matrix account %s: %s in %s starts no turn",
                self.name,
                type(event).__name__,
                room_id,
            )
            return
        content = event.source.get("content") or {}
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace":
            log.debug("Matrix account %s: an edit in %s starts no turn", self.name, room_id)
            return
        thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
        binding = await asyncio.to_thread(self.chats.binding, self.name, room_id)
        if binding is None:
            await self._ask_pairing(room_id, room, f"{KIND}:{event.sender}", thread)
            return
        members = room.member_count if room is not None else 3
        if (
            members > 2
            and binding.activation == "mention"
            and not self._mentions_me(content, event.body or "")
        ):
            log.debug(
                "Matrix account %s: %s in %s ignored: activation is mention and it neither "
                "mentions the bot nor replies to it",
                self.name,
                event.event_id,
                room_id,
            )
            return
        await self._route(room_id, event, binding, thread)

    async def _route(self, room_id: str, event: Any, binding: Binding, thread: str | None) -> None:
        sender = f"{KIND}:{event.sender}"
        allowed, tell = self.rate.check(binding.group, sender, time.monotonic())
        if not allowed:
            if tell:
                await self._notice(
                    room_id,
                    thread,
                    event.event_id,
                    f"You are sending messages faster than I can take them "
                    f"({self.rate.messages} per {self.rate.seconds // 60 or 1} minutes).",
                )
            return
        text = event.body or ""
        if not text.strip():
            return
        if len(text) > INBOUND_TEXT_MAX_CHARS:
            await self._notice(
                room_id,
                thread,
                event.event_id,
                f"That message is {len(text)} characters; I take at most {INBOUND_TEXT_MAX_CHARS}.",
            )
            return
        claim = self.chats.inbound_claim(self.name, event.event_id, room_id, event.event_id)
        try:
            await asyncio.to_thread(
                self.daemon.accept,
                Inbound(
                    binding.group,
                    text,
                    room_id,
                    sender,
                    self.account.channel,
                    thread,
                    binding.trust,
                ),
                claim,
            )
        except GroupNotFound:
            log.warning(
                "Matrix account %s: %s is bound to group %r, which does not exist",
                self.name,
                room_id,
                binding.group,
            )
            return
        except SenderRefused as exc:
            log.warning("Matrix account %s: %s", self.name, exc.message)
            return
        except GroupPaused as exc:
            await self._notice(room_id, thread, event.event_id, f"I am paused: {exc.message}")
            return
        except DaemonStopping:
            raise
        except BadInput as exc:
            await self._notice(room_id, thread, event.event_id, exc.message)
            return
        self.health.messages_in += 1

    async def _ask_pairing(
        self, room_id: str, room: Any, requester: str, thread: str | None
    ) -> None:
        title = room.display_name if room is not None else None
        pairing, fresh = await asyncio.to_thread(
            self.chats.request_pairing, self.name, room_id, title=title, requested_by=requester
        )
        if pairing is None or not fresh:
            return
        log.info(
            "Matrix account %s: %s is not bound; pairing code %s issued (approve: "
            "orchestrator pair %s GROUP)",
            self.name,
            room_id,
            pairing.code,
            pairing.code,
        )
        await self._notice(
            room_id,
            thread,
            None,
            f"This room is not connected to an assistant yet. Pairing code: {pairing.code}\n"
            f"The operator connects it with: orchestrator pair {pairing.code} GROUP\n"
            "The code is good once, for one hour.",
            txn=f"orch.pair.{pairing.code}",
        )

    # outbound

    async def _notice(
        self,
        room_id: str,
        thread: str | None,
        reply_to: str | None,
        text: str,
        txn: str | None = None,
    ) -> None:
        try:
            await self._send(room_id, thread, reply_to, text, txn or f"orch.n.{time.time_ns()}")
        except OrchestratorError as exc:
            log.warning("Matrix account %s: notice not sent: %s", self.name, exc.message)

    async def _send(
        self, room_id: str, thread: str | None, reply_to: str | None, text: str, txn: str
    ) -> list[str]:
        """Send ``text`` in pieces, each with a transaction id derived from ``txn``; the
        event ids. OrchestratorError when the server refuses."""
        import nio

        assert self.client is not None
        ids: list[str] = []
        for index, piece in enumerate(split_message(text, MATRIX_TEXT_MAX)):
            content = notice_content(piece, thread, reply_to if index == 0 else None)
            response = await self.client.room_send(
                room_id, "m.room.message", content, tx_id=f"{txn}.{index}" if index else txn
            )
            if not isinstance(response, nio.RoomSendResponse):
                raise OrchestratorError(
                    f"sending to {room_id} failed: {getattr(response, 'message', response)}"
                )
            ids.append(response.event_id)
            self.own_events[response.event_id] = None
            while len(self.own_events) > SENT_REMEMBERED:
                self.own_events.popitem(last=False)
        return ids

    async def _outbound(self) -> None:
        while True:
            message_id = await self.wake.get()
            try:
                await self.deliver(message_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "Matrix account %s: sending replies of %s failed", self.name, message_id
                )

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(CHANNEL_SWEEP_SECONDS)
            try:
                for message_id in await asyncio.to_thread(
                    self.chats.unsent, self.account.channel, time.time() - CHANNEL_KEEP_SECONDS
                ):
                    self.wake.put_nowait(message_id)
                await asyncio.to_thread(self._save_health)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Matrix account %s: sweep failed", self.name)

    async def deliver(self, message_id: str) -> None:
        """Send the replies of a message of this account not confirmed sent yet (those
        claimed before a crash are sent again: their transaction ids make it safe)."""
        message = await asyncio.to_thread(self.daemon.queue.get, message_id)
        if message is None or message.channel != self.account.channel:
            return
        room = self.client.rooms.get(message.chat) if self.client else None
        if room is not None and room.encrypted:
            return  # never a reply in clear text inside an encrypted room
        if message.state == INFLIGHT:
            self._start_typing(message)
        replies = await asyncio.to_thread(self.daemon.queue.replies_of, message_id)
        if message.state == DEAD and not replies:
            replies = [
                (
                    DEAD_NOTICE_SEQ,
                    "Sorry, I could not answer that message. The operator can see why.",
                )
            ]
        sent = await asyncio.to_thread(self.chats.sent, message_id)
        for seq, text in replies:
            state = sent.get(seq, (None, []))[0]
            if state is None:
                if not await asyncio.to_thread(self.chats.claim_send, message_id, seq, self.name):
                    continue
            elif state != "sending":
                continue
            await self._send_one(message, seq, text)
        if message.state != INFLIGHT:
            await self._stop_typing(message)

    async def _send_one(self, message: Message, seq: int, text: str) -> None:
        try:
            ids = await self._send(
                message.chat,
                message.thread,
                await asyncio.to_thread(self._origin, message.id),
                text,
                txn_id(message.id, seq, 0),
            )
        except OrchestratorError as exc:
            error = self._describe(exc.message)
            await asyncio.to_thread(self.chats.finish_send, message.id, seq, FAILED, error=error)
            self._error(error)
            log.warning("Matrix account %s: reply %d of %s: %s", self.name, seq, message.id, error)
            return
        except Exception as exc:  # the connection: sent again (same transaction id)
            self._error(f"send failed: {self._describe(exc)}")
            log.warning(
                "Matrix account %s: cannot reach the homeserver to send a reply (%s); "
                "trying again in %.0fs",
                self.name,
                self.health.last_error,
                CHANNEL_SWEEP_SECONDS,
            )
            # The claim stays: the next try sends the same transaction id again.
            self.loop.call_later(CHANNEL_SWEEP_SECONDS, self.wake_soon, message.id)
            return
        await asyncio.to_thread(self.chats.finish_send, message.id, seq, SENT, platform_ids=ids)
        self.health.messages_out += 1

    def _origin(self, message_id: str) -> str | None:
        origin = self.chats.inbound_of(message_id)
        return origin[1] if origin else None

    def _start_typing(self, message: Message) -> None:
        if message.id in self.typing or len(self.typing) >= 64:
            return
        self.typing[message.id] = asyncio.create_task(self._keep_typing(message))

    async def _stop_typing(self, message: Message) -> None:
        task = self.typing.pop(message.id, None)
        if task is not None:
            task.cancel()
            if self.client is not None:
                with contextlib.suppress(Exception):
                    await self.client.room_typing(message.chat, typing_state=False)

    async def _keep_typing(self, message: Message) -> None:
        assert self.client is not None
        try:
            while True:
                try:
                    answer = await self.client.room_typing(
                        message.chat, typing_state=True, timeout=TYPING_HOLD_MS
                    )
                    if not type(answer).__name__.endswith("Response"):
                        log.debug("Matrix account %s: typing refused: %s", self.name, answer)
                except Exception as exc:
                    log.debug("Matrix account %s: typing: %s", self.name, self._describe(exc))
                await asyncio.sleep(TYPING_HOLD_MS / 2000)
                current = await asyncio.to_thread(self.daemon.queue.get, message.id)
                if current is None or current.state != INFLIGHT:
                    return
        finally:
            self.typing.pop(message.id, None)
