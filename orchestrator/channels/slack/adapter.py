"""The Slack adapter: an app in Socket Mode (the official ``slack_sdk``: its asyncio
``SocketModeClient`` on aiohttp for events, ``AsyncWebClient`` for the Web API), so no
public URL is needed. The chat-app core does the rest
(``orchestrator.channels.chatapp.core``).

Inbound: Slack sends each event in an envelope over a WebSocket and asks for an
acknowledgement within 3 s, delivering it again otherwise. Each envelope is acknowledged
at once, before any work (a turn's file download would be too slow), and its events are
then handled in order. Direct messages, ``app_mention`` events and, where a conversation
is bound with activation ``always``, every channel message are routed; a conversation is
a chat and a ``thread_ts`` a thread. The same message can come twice: Slack delivers an
envelope again when an acknowledgement was lost, and a mention in a channel the app
reads comes both as ``message`` and as ``app_mention`` (two event ids). So the key of a
message is its conversation and ``ts``, recorded with it in the queue: a message seen
again is dropped before anything is done with it. An acknowledged event whose message
was not queued yet when the daemon stopped is not delivered again: at most one message
can be lost that way. Edits, deletions, joins and other apps' messages start nothing.
Files up to ``attachments_max_bytes`` are stored under ``groups/<folder>/files/inbox/``
(the bot token goes only to Slack's file host) and described to the core, which
transcribes, extracts and shows them; an audio clip recorded in Slack is a voice note.

Outbound: replies go into the thread of the message they answer (a message outside a
thread is answered outside one), as mrkdwn rendered from the Markdown with everything
else escaped, in pieces of at most ``SLACK_TEXT_MAX`` characters. ``chat.postMessage``
has no idempotency key: a repeated send would post twice, so a claimed reply is never
sent again (as for Telegram), and the Web API client retries nothing on its own. A 429
is waited out for its ``Retry-After``. Slack shows apps no typing indicator. A file the
agent sends is uploaded with Slack's upload flow and shared into the thread answered,
its caption as the file's comment; it is sent once as text is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from orchestrator.channels.chatapp.adapter import (
    NO_FILES,
    RETRY,
    Attachment,
    OutgoingFile,
    Received,
    Refusal,
    StoredFile,
)
from orchestrator.channels.chatapp.core import AdapterBase, Backoff
from orchestrator.channels.chatapp.files import store_received
from orchestrator.channels.slack.kind import DEFAULT_API_URL, SlackOptions
from orchestrator.channels.slack.mrkdwn import mrkdwn_pieces, slack_to_text
from orchestrator.config.accounts import account_token
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.limits import CHANNEL_RETRY_AFTER_MAX_SECONDS, FILE_UPLOAD_TIMEOUT_SECONDS
from orchestrator.media.inbox import VOICE
from orchestrator.store.chats import FAILED, UNKNOWN
from orchestrator.units import human_bytes

if TYPE_CHECKING:
    import aiohttp
    from slack_sdk.socket_mode.aiohttp import SocketModeClient
    from slack_sdk.socket_mode.request import SocketModeRequest
    from slack_sdk.web.async_client import AsyncWebClient

    from orchestrator.channels.chatapp.core import ChatAccount

log = logging.getLogger("orchestrator.channels.slack")
T = TypeVar("T")
SEEN_REMEMBERED = 2_000  # message keys kept in memory to drop a second delivery at once
# subtypes of a message event that are a person's message; others (edits, deletions,
# joins, other apps) start nothing
PERSON_SUBTYPES = (None, "file_share", "thread_broadcast")
FILE_HOST = "files.slack.com"  # where Slack serves files; the bot token goes nowhere else
CONNECTION_CHECK_SECONDS = 10.0  # how often the health looks at the Socket Mode link
FILES_PER_MESSAGE = 10  # Slack's own limit on files shared in one message


class FileElsewhere(Exception):
    """A file's URL is not on Slack's file host: the bot token is not sent there."""


class NotShared(Exception):
    """A file out did not reach the conversation: its upload failed before the share
    (``retry``: the connection, not Slack's refusal)."""

    def __init__(self, text: str, *, retry: bool) -> None:
        super().__init__(text)
        self.retry = retry


def described(item: dict[str, Any]) -> dict[str, Any]:
    """What ``store_received`` is told of a Slack file object: an audio clip recorded
    in Slack (``subtype: slack_audio``) is a voice note, its length from
    ``duration_ms`` and its type audio (Slack may name a clip's container video/mp4 or
    video/webm); any other file is described by its type and name."""
    found = item.get("mimetype")
    mime = found if isinstance(found, str) and found else None
    if item.get("subtype") != "slack_audio":
        return {"mime": mime, "label": "file"}
    if mime is not None and mime.startswith("video/"):
        mime = "audio/" + mime.removeprefix("video/")
    ms = item.get("duration_ms")
    seconds = ms / 1000 if isinstance(ms, int | float) and not isinstance(ms, bool) else None
    return {
        "mime": mime or "audio/mp4",
        "kind": VOICE,
        "duration": seconds if seconds and seconds > 0 else None,
        "label": "audio clip",
    }


def retry_after(exc: Any) -> float:
    """A 429's ``Retry-After`` in seconds (1 when it has none)."""
    headers = getattr(exc.response, "headers", None) or {}
    for name, value in dict(headers).items():
        if str(name).lower() == "retry-after":
            with contextlib.suppress(ValueError):
                return float(value)
    return 1.0


class SlackAdapter(AdapterBase):
    """One Slack app in one workspace: its Socket Mode link and its Web API calls."""

    chat_word = "conversation"

    def __init__(self, core: ChatAccount) -> None:
        super().__init__(core)
        self.options = cast(SlackOptions, core.account.options)
        self.web: AsyncWebClient | None = None
        self.socket: SocketModeClient | None = None
        self.http: aiohttp.ClientSession | None = None
        self.bot_token = ""
        self.me = ""  # the bot's user id
        self.team = ""
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.seen: OrderedDict[str, None] = OrderedDict()

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def api_url(self) -> str:
        return self.options.api_url or DEFAULT_API_URL

    # life

    async def connect(self) -> str:
        """Check both tokens (``auth.test`` with the bot token, ``apps.connections.open``
        with the app token: the SDK's own reconnects would retry a bad one unseen)."""
        import aiohttp
        from slack_sdk.socket_mode.aiohttp import SocketModeClient
        from slack_sdk.web.async_client import AsyncWebClient

        secrets = self.core.daemon.config.secrets_file
        self.bot_token = account_token(self.core.account, secrets)
        app_token = self.options.app_token.require(
            f"channel account {self.name!r} (app token)", secrets
        )
        await self.close()
        # retry_handlers=[]: the SDK would repeat a POST after a dropped connection, and
        # chat.postMessage posts again when repeated
        web = AsyncWebClient(
            token=self.bot_token, base_url=self.api_url, timeout=30, retry_handlers=[]
        )
        auth = await self.call(web.auth_test)
        opened = await self.call(lambda: web.apps_connections_open(app_token=app_token))
        self.me, self.team = str(auth["user_id"]), str(auth["team_id"])
        self.core.health.bot = str(auth.get("user") or self.me)
        self.web = web
        self.http = aiohttp.ClientSession()
        self.socket = SocketModeClient(
            app_token,
            web_client=web,
            logger=logging.getLogger("slack_sdk.socket_mode"),
            on_close_listeners=[self._closed],
        )
        self.socket.wss_uri = str(opened["url"])
        self.socket.socket_mode_request_listeners.append(self._envelope)
        self.socket.message_listeners.append(self._any_message)
        return f"@{self.core.health.bot} ({auth.get('team') or self.team})"

    async def close(self) -> None:
        socket, http = self.socket, self.http
        self.socket = self.http = None
        if socket is not None:
            await socket.close()  # type: ignore[no-untyped-call]
        if http is not None:
            await http.close()

    # inbound

    async def _envelope(self, client: Any, request: SocketModeRequest) -> None:
        """Take an envelope's events and acknowledge it at once, before any work."""
        from slack_sdk.socket_mode.response import SocketModeResponse

        if request.type == "events_api":
            self.events.put_nowait(request.payload)  # (in order: no await before this)
        await client.send_socket_mode_response(SocketModeResponse(request.envelope_id))

    async def _any_message(self, client: Any, message: dict[str, Any], raw: str | None) -> None:
        self.core.polled()

    async def _closed(self, message: Any) -> None:
        self.core.error("the Socket Mode connection closed; reconnecting")

    async def receive(self) -> None:
        assert self.socket is not None
        core = self.core
        await self.socket.connect()  # type: ignore[no-untyped-call]
        backoff = Backoff()
        while True:
            try:
                payload = await asyncio.wait_for(self.events.get(), CONNECTION_CHECK_SECONDS)
            except TimeoutError:
                await self._check_link()
                continue
            while True:
                try:
                    await self.handle(payload)
                    backoff.reset()
                    break
                except asyncio.CancelledError:
                    raise
                except DaemonStopping:
                    return  # acknowledged, not queued: lost (see the module's docstring)
                except OrchestratorError as exc:
                    await core.not_queued(f"event {payload.get('event_id')}", exc, backoff)
                except Exception:
                    log.exception(
                        "Slack account %s: event %s could not be handled; skipped",
                        self.name,
                        payload.get("event_id"),
                    )
                    break

    async def _check_link(self) -> None:
        socket = self.socket
        if socket is not None and not await socket.is_connected():
            self.core.health.state = "error"
            self.core.error("the Socket Mode connection is down; reconnecting")
        await asyncio.to_thread(self.core.save_health)

    async def handle(self, payload: dict[str, Any]) -> None:
        """One Events API payload: a person's message for the core, or nothing."""
        event = payload.get("event") or {}
        kind, subtype = event.get("type"), event.get("subtype")
        if kind not in ("message", "app_mention") or subtype not in PERSON_SUBTYPES:
            log.debug(
                "Slack account %s: %s event %s (%s) starts no turn",
                self.name,
                kind,
                payload.get("event_id"),
                subtype or "-",
            )
            return
        user, chat, ts = event.get("user"), event.get("channel"), event.get("ts")
        if not user or not chat or not ts or event.get("bot_id") or user == self.me:
            return
        key = f"{chat}:{ts}"
        if key in self.seen or await asyncio.to_thread(self.core.chats.was_queued, self.name, key):
            log.debug(
                "Slack account %s: message %s came again (event %s, retry %s); dropped",
                self.name,
                key,
                payload.get("event_id"),
                payload.get("retry_attempt", "-"),
            )
            return
        thread = event.get("thread_ts")
        team = event.get("user_team") or event.get("team") or payload.get("team_id") or self.team
        await self.core.route(
            Received(
                chat=str(chat),
                sender=f"{team}:{user}",
                text=slack_to_text(str(event.get("text") or "")),
                message_id=str(ts),
                event_id=key,
                thread=str(thread) if thread and thread != ts else None,
                group_chat=kind == "app_mention" or event.get("channel_type") != "im",
                raw=event,
            )
        )
        self.seen[key] = None
        while len(self.seen) > SEEN_REMEMBERED:
            self.seen.popitem(last=False)

    def addressed(self, received: Received) -> bool:
        """An ``app_mention``, a message naming the bot, or a reply in a thread the bot
        started."""
        event: dict[str, Any] = received.raw
        if event.get("type") == "app_mention":
            return True
        if self.me and f"<@{self.me}" in str(event.get("text") or ""):
            return True
        return bool(self.me) and event.get("parent_user_id") == self.me

    def mention_forms(self, received: Received) -> tuple[str, ...]:
        return (f"@{self.me}",) if self.me else ()

    async def attachment(self, received: Received, group: str) -> Attachment:
        """Store a message's files (up to the limit each) in the group's files/inbox and
        describe them (an audio clip recorded in Slack as a voice note, with its length);
        a Refusal for one over the limit (nothing downloaded), or None."""
        event: dict[str, Any] = received.raw
        files = [f for f in event.get("files") or [] if isinstance(f, dict)][:FILES_PER_MESSAGE]
        if not files:
            return None
        import aiohttp

        limit = self.options.attachments_max_bytes
        for item in files:
            if int(item.get("size") or 0) > limit:
                return self._too_large(int(item.get("size") or 0))
        stored: list[StoredFile] = []
        for item in files:
            url = str(item.get("url_private_download") or item.get("url_private") or "")
            if not url or item.get("mode") in ("external", "tombstone"):
                continue  # a link to elsewhere, or a file deleted since
            if not limit:
                return NO_FILES
            try:
                data = await self._download(url, limit)
            except (aiohttp.ClientError, TimeoutError, FileElsewhere) as exc:
                log.warning("Slack account %s: file %s not fetched: %s", self.name, url, exc)
                return Refusal("Sorry, I could not fetch that file from Slack.")
            if data is None:
                return self._too_large(limit + 1)
            original = item.get("name")
            stored.append(
                await asyncio.to_thread(
                    store_received,
                    self.core.daemon.runtime.store.root,
                    group,
                    data,
                    original=str(original) if original else None,
                    **described(item),
                )
            )
        return stored or None

    async def _download(self, url: str, limit: int) -> bytes | None:
        """A file from Slack's file host, with the bot token; None when it is larger than
        ``limit``. FileElsewhere for a URL anywhere else (the token is not sent)."""
        allowed = {FILE_HOST, urllib.parse.urlsplit(self.api_url).netloc}
        if urllib.parse.urlsplit(url).netloc not in allowed:
            raise FileElsewhere("it is not on Slack's file host")
        assert self.http is not None
        headers = {"Authorization": f"Bearer {self.bot_token}"}
        async with self.http.get(url, headers=headers, allow_redirects=False) as response:
            response.raise_for_status()
            if response.status != 200:  # a redirect, not followed: the token would go along
                raise FileElsewhere(f"Slack answered HTTP {response.status}, not the file")
            data = bytearray()
            async for chunk in response.content.iter_chunked(65536):
                data += chunk
                if len(data) > limit:
                    return None
        return bytes(data)

    def _too_large(self, size: int) -> Refusal:
        limit = self.options.attachments_max_bytes
        return Refusal(
            f"Sorry, that file is {human_bytes(size)}; I take files up to {human_bytes(limit)}."
            if limit
            else "Sorry, I do not take files here."
        )

    # outbound

    async def call(self, make: Callable[[], Awaitable[T]]) -> T:
        """One Web API call; a 429 is waited out (its Retry-After, capped) and tried
        again (Slack refused it: nothing was posted)."""
        from slack_sdk.errors import SlackApiError

        while True:
            try:
                return await make()
            except SlackApiError as exc:
                if getattr(exc.response, "status_code", None) != 429:
                    raise
                wait = min(retry_after(exc), CHANNEL_RETRY_AFTER_MAX_SECONDS)
                log.info("Slack account %s: rate-limited; waiting %.0fs", self.name, wait)
                await asyncio.sleep(wait)

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        """Send ``text`` as mrkdwn pieces into ``chat`` (in ``thread`` when the message
        answered was in one); the ``ts`` of each message posted."""
        web = self.web
        assert web is not None
        ids: list[str] = []
        for piece in mrkdwn_pieces(text):
            posted = await self.call(
                lambda piece=piece: web.chat_postMessage(  # type: ignore[misc]
                    channel=chat,
                    text=piece,
                    thread_ts=thread,
                    mrkdwn=True,
                    unfurl_links=False,
                    unfurl_media=False,
                )
            )
            ids.append(str(posted["ts"]))
        return ids

    async def send_file(
        self, chat: str, thread: str | None, reply_to: str | None, file: OutgoingFile, key: str
    ) -> list[str]:
        """Upload the file as Slack's Web API does (files_upload_v2's three steps, one by
        one: ``files.getUploadURLExternal``, the bytes to the URL it gives, then
        ``files.completeUploadExternal``, which shares it into ``chat``, in ``thread``,
        with the caption as its comment). Only the last step posts, so a failure before
        it is known to have posted nothing (NotShared). Sent once: a claim is never sent
        again, as for text. The file ids shared (and the ts of a caption's rest)."""
        import aiohttp

        web = self.web
        assert web is not None
        data = await asyncio.to_thread(file.path.read_bytes)
        try:
            issued = await self.call(
                lambda: web.files_getUploadURLExternal(filename=file.name, length=len(data))
            )
            await self._upload(str(issued["upload_url"]), data)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise NotShared(f"uploading {file.name} failed: {exc!r}", retry=True) from exc
        file_id = str(issued["file_id"])
        pieces = mrkdwn_pieces(file.caption) if file.caption.strip() else []
        done = await self.call(
            lambda: web.files_completeUploadExternal(
                files=[{"id": file_id, "title": file.name}],
                channel_id=chat,
                thread_ts=thread,
                initial_comment=pieces[0] if pieces else None,
            )
        )
        ids = [str(f.get("id")) for f in done.get("files") or [] if isinstance(f, dict)]
        for piece in pieces[1:]:  # a caption longer than one message, after it
            posted = await self.call(
                lambda piece=piece: web.chat_postMessage(  # type: ignore[misc]
                    channel=chat, text=piece, thread_ts=thread, mrkdwn=True, unfurl_links=False
                )
            )
            ids.append(str(posted["ts"]))
        return ids or [file_id]

    async def _upload(self, url: str, data: bytes) -> None:
        """The file's bytes to the upload URL Slack issued (no token goes with them);
        NotShared when it refuses them."""
        import aiohttp

        if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
            raise NotShared(f"Slack gave an upload URL that is not HTTP: {url[:80]!r}", retry=False)
        assert self.http is not None
        timeout = aiohttp.ClientTimeout(total=FILE_UPLOAD_TIMEOUT_SECONDS)
        async with self.http.post(
            url, data=data, timeout=timeout, allow_redirects=False
        ) as response:
            if response.status != 200:
                text = (await response.text(errors="replace"))[:200]
                raise NotShared(
                    f"Slack's file upload answered HTTP {response.status}: {text}",
                    retry=response.status >= 500,
                )

    def classify(self, exc: BaseException) -> str:
        """By the exception's type: no connection made surely posted nothing, nor did a
        file that was not shared (NotShared: tried again unless Slack refused it);
        Slack's answer of an error is a refusal; anything else (a timeout, a dropped
        connection) may have posted."""
        import aiohttp
        from slack_sdk.errors import SlackApiError

        if isinstance(exc, NotShared):
            return RETRY if exc.retry else FAILED
        if isinstance(exc, aiohttp.ClientConnectorError):
            return RETRY
        if isinstance(exc, SlackApiError):
            return FAILED
        return UNKNOWN
