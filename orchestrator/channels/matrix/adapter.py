"""The Matrix adapter: a client-server API client (matrix-nio) logged in with an access
token kept on the host. The chat-app core does the rest
(``orchestrator.channels.chatapp.core``).

Inbound: a long-poll ``/sync``. Each event is handled, and the account's ``since`` token
is committed (in the queue's database) only after the whole batch: a message is queued
with its event id in the same transaction, so a crash re-reads the batch and the queue
drops what it has. The first sync of an account (no token yet) only learns the rooms:
history is not answered. Rooms are chats and ``m.thread`` threads are threads; a room of
more than two members is a group chat, where a message addresses the bot when it
mentions it (its user id or name, or ``m.mentions``) or replies to it. Edits start
nothing. Images, files, audio and video (``m.image``, ``m.file``, ``m.audio``,
``m.video``) up to ``attachments_max_bytes`` are downloaded from the homeserver's
authenticated media API (``/_matrix/client/v1/media/download``, with the bot's token; the
size the event claims is checked first and the download is cut at the cap whatever it
claimed), stored under ``files/inbox/`` and described to the core.

Invites: the bot joins a room when the inviter is one of the account's
``allow_inviters``, or the room is bound already. Any other invite is refused, with the
pairing code as the refusal's reason (the only way to answer without joining): the
operator approves it with ``orchestrator pair CODE GROUP`` and the inviter invites the
bot again. The inviter is the sender of the last event of the invite's state about the
bot's membership (the invite event, which the homeserver puts after the state the
inviting server describes the room with); an invite whose event nio cannot read is not
answered, and one whose state nio fails on is left out of the sync it came in
(``read_sync``). A joined room that is not bound gets the code once, in the room.

Outbound: replies are ``m.notice`` events (bots should not set off other bots), with a
plain ``body`` and the Markdown rendered as ``formatted_body``, rich replies to the
message they answer (in its thread when it has one), split into pieces. The transaction
id of each piece is derived from the reply's key, so a resend after a crash is
idempotent on the server: the core sends a reply claimed but not confirmed again, and
nobody sees it twice. A typing notification is held while the turn runs. A file the
agent sends is uploaded (its ``mxc://`` URI kept in the account's state, so a resend
after a crash does not upload it again) and sent as ``m.image``, ``m.audio`` or
``m.file`` with the reply's transaction id: it arrives once.

End-to-end encrypted rooms are not supported: the bot says so once in such a room and
never acts there (nothing from it is routed, no reply is sent into it).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import logging
import re
import time
import urllib.parse
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, cast

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
from orchestrator.channels.matrix.kind import MatrixOptions
from orchestrator.channels.textfmt import markdown_to_html, split_message
from orchestrator.config.accounts import account_token
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.limits import (
    CHANNEL_POLL_TIMEOUT_SECONDS,
    MATRIX_TEXT_MAX,
)
from orchestrator.media.inbox import AUDIO, IMAGE, VOICE
from orchestrator.store.chats import FAILED
from orchestrator.units import human_bytes

if TYPE_CHECKING:
    import nio

    from orchestrator.channels.chatapp.core import ChatAccount

log = logging.getLogger("orchestrator.channels.matrix")
TYPING_HOLD_MS = 30_000
SENT_REMEMBERED = 2_000  # event ids of our own messages kept to recognize replies to them


class SendRefused(OrchestratorError):
    """The homeserver answered a send with an error."""


def _object(value: Any) -> dict[str, Any]:
    """A value of an event's content that should be an object: the sender's client may
    have put anything there."""
    return value if isinstance(value, dict) else {}


def _caption(content: dict[str, Any]) -> str:
    """A file event's words: its body when a ``filename`` beside it says the body is a
    caption (the newer form), else none (the body is the file's name)."""
    body, name = content.get("body"), content.get("filename")
    return body if isinstance(body, str) and isinstance(name, str) and body != name else ""


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


def read_sync(answer: Any) -> Any:
    """nio's reading of a ``/sync`` answer (a fresh one: nio changes what it reads) that
    it failed on, without the invites it cannot read (each logged): an invite's state is
    what the inviting user's server sent, and one event nio fails on (an ``unsigned``
    that is not an object) failed every sync, so the account read nothing more until
    the invite was withdrawn. Raises as nio does when the rest cannot be read."""
    import nio

    rooms = answer.get("rooms") if isinstance(answer, dict) else None
    if isinstance(rooms, dict) and isinstance(rooms.get("invite"), dict):
        kept = {}
        for room_id, invite in rooms["invite"].items():
            alone = {"next_batch": "", "rooms": {"invite": {room_id: copy.deepcopy(invite)}}}
            try:
                readable = isinstance(nio.SyncResponse.from_dict(alone), nio.SyncResponse)
            except Exception:
                readable = False
            if readable:
                kept[room_id] = invite
            else:
                log.warning("Matrix: the invite to %s could not be read; left out", room_id)
        answer = {**answer, "rooms": {**rooms, "invite": kept}}
    return nio.SyncResponse.from_dict(answer)


@functools.cache
def client_class() -> type[nio.AsyncClient]:
    """nio's client, reading a ``/sync`` answer it fails on with read_sync()."""
    import nio

    class Client(nio.AsyncClient):  # type: ignore[misc]  # nio has no type hints
        async def create_matrix_response(
            self,
            response_class: type,
            transport_response: Any,
            data: tuple[Any, ...] | None = None,
            save_to: Any = None,
        ) -> Any:
            try:
                return await super().create_matrix_response(
                    response_class, transport_response, data, save_to
                )
            except Exception:
                if response_class is not nio.SyncResponse:
                    raise
                response = read_sync(await self.parse_body(transport_response))
                response.transport_response = transport_response
                return response

    return Client


class MatrixAdapter(AdapterBase):
    """One bot user: its sync loop, its invites and its sends."""

    chat_word = "room"
    resends_safely = True  # a transaction id repeated posts once
    typing_every = TYPING_HOLD_MS / 2000

    def __init__(self, core: ChatAccount) -> None:
        super().__init__(core)
        self.options = cast(MatrixOptions, core.account.options)
        core.health.bot = self.options.user_id
        self.client: nio.AsyncClient | None = None
        self.own_events: OrderedDict[str, None] = OrderedDict()

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def user_id(self) -> str:
        return self.options.user_id

    # life

    async def connect(self) -> str:
        import nio

        client = client_class()(self.options.homeserver, self.user_id)
        client.access_token = account_token(self.core.account, self.core.daemon.config.secrets_file)
        who = await client.whoami()
        if not isinstance(who, nio.WhoamiResponse):
            await client.close()
            raise OrchestratorError(f"whoami failed: {getattr(who, 'message', who)}")
        if who.user_id != self.user_id:
            await client.close()
            raise OrchestratorError(f"the token belongs to {who.user_id}, not to {self.user_id}")
        client.user_id = who.user_id
        client.device_id = who.device_id or ""
        self.client = client
        return self.user_id

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    # inbound

    async def receive(self) -> None:
        import nio

        assert self.client is not None
        core, client = self.core, self.client
        since = await asyncio.to_thread(core.chats.get_state, self.name, "since")
        first = since is None
        backoff = Backoff()
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
                error = describe(str(getattr(response, "message", response)))
                await core.read_failed("sync", error, backoff)
                continue
            backoff.reset()
            core.polled()
            try:
                await self.handle_sync(response, history=first)
            except DaemonStopping:
                return  # not committed: read again at the next start
            except OrchestratorError as exc:
                await core.not_queued("events", exc, backoff)
                continue
            since, first = response.next_batch, False
            await asyncio.to_thread(core.chats.set_state, self.name, "since", since)
            await asyncio.to_thread(core.save_health)

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
                try:
                    await self._event(room_id, room, event)
                except (DaemonStopping, OrchestratorError):
                    raise  # the batch is read again
                except Exception:  # anything else would stop the account at every start
                    log.exception(
                        "Matrix account %s: event %s in %s could not be handled; skipped",
                        self.name,
                        getattr(event, "event_id", "?"),
                        room_id,
                    )

    async def _invite(self, room_id: str, info: Any) -> None:
        import nio

        chats = self.core.chats
        membership = None
        title = None
        for event in info.invite_state:
            # The last event about the bot's membership says it: the homeserver appends
            # the invite event after the stripped state the inviting server sent, which
            # may claim anything (nio gives a BadEvent for one it cannot read).
            source = getattr(event, "source", None)
            if isinstance(source, dict) and (source.get("type"), source.get("state_key")) == (
                "m.room.member",
                self.user_id,
            ):
                membership = event
            if isinstance(event, nio.InviteNameEvent):
                title = event.name
        if membership is not None and not isinstance(membership, nio.InviteMemberEvent):
            log.info(
                "Matrix account %s: the invite to %s could not be read; not answered",
                self.name,
                room_id,
            )
            return
        if membership is None or membership.membership != "invite":
            return
        inviter = membership.sender
        bound = await asyncio.to_thread(chats.binding, self.name, room_id)
        if inviter in self.options.allow_inviters or bound is not None:
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
                self.core.error(f"join {room_id} failed: {getattr(joined, 'message', joined)}")
            return
        pairing, fresh = await asyncio.to_thread(
            chats.request_pairing,
            self.name,
            room_id,
            title=title,
            requested_by=f"{self.core.account.prefix}{inviter}",
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
            self.core.error(f"leave {room_id}: HTTP {response.status}")
        response.release()

    async def _refuse_encrypted(self, room_id: str) -> None:
        chats = self.core.chats
        key = f"e2e-notice:{room_id}"
        if await asyncio.to_thread(chats.get_state, self.name, key):
            return
        await asyncio.to_thread(chats.set_state, self.name, key, str(time.time()))
        log.warning(
            "Matrix account %s: %s is end-to-end encrypted; the bot does not act there",
            self.name,
            room_id,
        )
        await self.core.notice(
            room_id,
            None,
            None,
            "This room is end-to-end encrypted, which I do not support: I cannot read it, "
            "and I will not answer here. Talk to me in a room without encryption.",
            key=f"orch.e2e.{room_id}",
        )

    def addressed(self, received: Received) -> bool:
        content: dict[str, Any] = received.raw
        mentions = content.get("m.mentions")
        users = mentions.get("user_ids") if isinstance(mentions, dict) else None
        if isinstance(users, list) and self.user_id in users:
            return True
        localpart = self.user_id.split(":")[0].lstrip("@")
        lowered = received.text.lower()
        if self.user_id.lower() in lowered or re.search(
            rf"(^|\W)@?{re.escape(localpart.lower())}(\W|$)", lowered
        ):
            return True
        relates = _object(content.get("m.relates_to"))
        replied = _object(relates.get("m.in_reply_to")).get("event_id")
        return (
            isinstance(replied, str)
            and replied in self.own_events
            and not relates.get("is_falling_back")
        )

    def mention_forms(self, received: Received) -> tuple[str, ...]:
        """The user id, ``@localpart``, and the name the room shows for the bot (what a
        client's pill puts in the plain body)."""
        localpart = self.user_id.split(":")[0].lstrip("@")
        room = self.client.rooms.get(received.chat) if self.client else None
        shown = room.user_name(self.user_id) if room is not None else None
        return tuple(f for f in (self.user_id, f"@{localpart}", shown or localpart) if f)

    async def _event(self, room_id: str, room: Any, event: Any) -> None:
        import nio

        if getattr(event, "sender", None) == self.user_id:
            return
        if isinstance(event, nio.MegolmEvent):
            await self._refuse_encrypted(room_id)
            return
        if isinstance(event, nio.RoomEncryptedMedia):
            log.debug(
                "Matrix account %s: an encrypted file in %s starts no turn", self.name, room_id
            )
            return
        if not isinstance(event, nio.RoomMessageText | nio.RoomMessageMedia):
            log.debug(
                "Matrix account %s: %s in %s starts no turn",
                self.name,
                type(event).__name__,
                room_id,
            )
            return
        content = event.source.get("content") or {}
        relates = _object(content.get("m.relates_to"))
        if relates.get("rel_type") == "m.replace":
            log.debug("Matrix account %s: an edit in %s starts no turn", self.name, room_id)
            return
        root = relates.get("event_id")
        thread = root if relates.get("rel_type") == "m.thread" and isinstance(root, str) else None
        members = room.member_count if room is not None else 3
        media = isinstance(event, nio.RoomMessageMedia)
        await self.core.route(
            Received(
                chat=room_id,
                sender=event.sender,
                # a file's body is its name (or a caption, with ``filename`` beside it)
                text=_caption(content) if media else event.body or "",
                message_id=event.event_id,
                event_id=event.event_id,
                thread=thread,
                group_chat=members > 2,
                title=room.display_name if room is not None else None,
                raw=content,
            )
        )

    async def attachment(self, received: Received, group: str) -> Attachment:
        """Download the event's file (m.image, m.file, m.audio, m.video) from the
        authenticated media API into the group's files/inbox and describe it; a Refusal
        for one over the limit, or None for a text message."""
        content: dict[str, Any] = received.raw
        msgtype = content.get("msgtype")
        if msgtype not in ("m.image", "m.file", "m.audio", "m.video"):
            return None
        url = content.get("url")
        found = content.get("info")
        info: dict[str, Any] = found if isinstance(found, dict) else {}
        limit = self.options.attachments_max_bytes
        claimed = info.get("size")
        if isinstance(claimed, int) and claimed > limit:
            return self._too_large(claimed)
        if not limit:
            return NO_FILES
        if not isinstance(url, str) or not url.startswith("mxc://"):
            return Refusal("Sorry, I could not read that file (it has no mxc:// address).")
        try:
            data = await self._download(url, limit)
        except (OrchestratorError, OSError) as exc:
            log.warning("Matrix account %s: %s not downloaded: %s", self.name, url, exc)
            return Refusal("Sorry, I could not download that file.")
        if data is None:
            return self._too_large(limit + 1)
        mime = info.get("mimetype") if isinstance(info.get("mimetype"), str) else None
        original = content.get("filename") or content.get("body")
        duration = info.get("duration")
        voice = "org.matrix.msc3245.voice" in content or "m.voice" in content
        kind = {"m.image": IMAGE, "m.audio": VOICE if voice else AUDIO}.get(msgtype)
        return await asyncio.to_thread(
            store_received,
            self.core.daemon.runtime.store.root,
            group,
            data,
            original=original if isinstance(original, str) else None,
            mime=mime,
            kind=kind,
            duration=duration / 1000 if isinstance(duration, int | float) else None,
            label="voice note" if voice else msgtype[2:],
        )

    async def _download(self, url: str, limit: int) -> bytes | None:
        """The media at ``url`` from the authenticated media API, or None when it is
        over ``limit`` bytes (the download is stopped there). OrchestratorError when the
        server refuses it."""
        assert self.client is not None
        server, _, media_id = url[len("mxc://") :].partition("/")
        path = (
            "/_matrix/client/v1/media/download/"
            f"{urllib.parse.quote(server, safe='')}/{urllib.parse.quote(media_id, safe='')}"
        )
        response = await self.client.send(
            "GET", path, headers={"Authorization": f"Bearer {self.client.access_token}"}
        )
        try:
            if response.status != 200:
                raise OrchestratorError(
                    f"the homeserver refused the download: HTTP {response.status}"
                )
            declared = response.content_length
            if declared is not None and declared > limit:
                return None
            chunks, size = [], 0
            async for chunk in response.content.iter_chunked(1 << 16):
                size += len(chunk)
                if size > limit:
                    return None
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            response.release()

    def _too_large(self, size: int) -> Refusal:
        limit = self.options.attachments_max_bytes
        return Refusal(
            f"Sorry, that file is {human_bytes(size)}; I take files up to {human_bytes(limit)}."
            if limit
            else "Sorry, I do not take files here."
        )

    # outbound

    def may_send(self, chat: str) -> bool:
        room = self.client.rooms.get(chat) if self.client else None
        return not (room is not None and room.encrypted)  # never in clear into one

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        """Send ``text`` in pieces, the first with transaction id ``key``, the others
        ``key.N``; the event ids. SendRefused when the server refuses."""
        import nio

        assert self.client is not None
        ids: list[str] = []
        for index, piece in enumerate(split_message(text, MATRIX_TEXT_MAX)):
            content = notice_content(piece, thread, reply_to if index == 0 else None)
            response = await self.client.room_send(
                chat, "m.room.message", content, tx_id=f"{key}.{index}" if index else key
            )
            if not isinstance(response, nio.RoomSendResponse):
                raise SendRefused(
                    f"sending to {chat} failed: {getattr(response, 'message', response)}"
                )
            ids.append(response.event_id)
            self.own_events[response.event_id] = None
            while len(self.own_events) > SENT_REMEMBERED:
                self.own_events.popitem(last=False)
        return ids

    async def send_file(
        self, chat: str, thread: str | None, reply_to: str | None, file: OutgoingFile, key: str
    ) -> list[str]:
        """Upload the file (once: its mxc:// URI is kept in the account's state under the
        reply's key) and send it as m.image, m.audio or m.file, with the key as the
        transaction id; a caption follows as a notice. SendRefused when the server
        refuses (an upload over its size limit among them)."""
        import nio

        assert self.client is not None
        state_key = f"upload:{key}"
        chats = self.core.chats
        uri = await asyncio.to_thread(chats.get_state, self.name, state_key)
        if uri is None:
            data = await asyncio.to_thread(file.path.read_bytes)
            answer, _ = await self.client.upload(
                lambda *_: data, content_type=file.mime, filename=file.name, filesize=len(data)
            )
            if not isinstance(answer, nio.UploadResponse):
                raise SendRefused(
                    f"uploading {file.name} failed: {getattr(answer, 'message', answer)}"
                )
            uri = answer.content_uri
            await asyncio.to_thread(chats.set_state, self.name, state_key, uri)
        msgtype = {IMAGE: "m.image", AUDIO: "m.audio", VOICE: "m.audio"}.get(file.kind, "m.file")
        content: dict[str, Any] = {
            "msgtype": msgtype,
            "body": file.name,
            "filename": file.name,
            "url": uri,
            "info": {"mimetype": file.mime, "size": file.size},
        }
        relates = relation(thread, reply_to)
        if relates:
            content["m.relates_to"] = relates
        response = await self.client.room_send(chat, "m.room.message", content, tx_id=key)
        if not isinstance(response, nio.RoomSendResponse):
            raise SendRefused(f"sending to {chat} failed: {getattr(response, 'message', response)}")
        ids = [response.event_id]
        self.own_events[response.event_id] = None
        if file.caption:
            ids += await self.send(chat, thread, None, file.caption, f"{key}.caption")
        return ids

    def classify(self, exc: BaseException) -> str:
        """The server's refusal failed the reply; anything else is the connection, and
        the same transaction id is sent again."""
        return FAILED if isinstance(exc, SendRefused) else RETRY

    async def typing(self, chat: str, thread: str | None, on: bool) -> None:
        if self.client is None:
            return
        answer = await self.client.room_typing(chat, typing_state=on, timeout=TYPING_HOLD_MS)
        if on and not type(answer).__name__.endswith("Response"):
            log.debug("Matrix account %s: typing refused: %s", self.name, answer)
