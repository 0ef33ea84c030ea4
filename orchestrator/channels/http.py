"""The HTTP API, on loopback by default, with a bearer token (compared in constant time).

    POST /v1/groups/{name}/messages[?wait=S]
                                       {"text", "sender", "chat"?, "thread"?, "channel"?}
                                       -> 202 {"id", "state"}; with wait, 200 and the
                                       message once done (or as it is after S seconds):
                                       one request instead of a POST and a long poll
    GET  /v1/messages/{id}[?wait=S&after=N]  state and replies; with wait, a long poll until
                                       done (or, with after, until it has more than N replies)
    GET  /v1/messages/{id}/files/{seq} a file a reply carries (sent by the agent), from the
                                       host's outbox
    GET  /v1/groups                    the groups
    GET  /v1/groups/{name}/chats/{chat}/messages[?since=T&channel=C]
                                       a chat's messages (what a bridge polls)
    GET  /v1/openapi.yaml              this API's OpenAPI description (openapi.yaml
                                       beside this module), to any valid token
    GET  /metrics                      Prometheus metrics (the operator's token only)
    GET  /healthz                      liveness, no token needed

Bad input gets a 4xx with a JSON body {"error": ...}; nothing is queued.
Enabled when a token is configured: the operator's (orchestrator.yaml http.token or
ORCHESTRATOR_HTTP_TOKEN), which may name any sender, or named ones (http.tokens), each
allowed one sender prefix (a bridge for one app names that app's senders only: a token
naming a sender outside its prefix gets 403 and nothing is queued; it reads only
messages of senders under its prefix). A named token's chats are its own channel's
(``http:<name>``): whatever chat id it names, it never joins a conversation of another
channel (the dashboard's, a CLI chat, a Telegram chat). The operator's token may name
any channel of the daemon (``channel``) and so any chat.

It cannot be starved: a connection must send its request head within
HTTP_HEADER_TIMEOUT_SECONDS (aiohttp's keep-alive timer covers a connection that has not
sent a whole request), a body within HTTP_BODY_TIMEOUT_SECONDS, and at most
HTTP_MAX_CONNECTIONS are open (more are closed at once). Long polls wait on events from
the daemon, not on threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from orchestrator.config.accounts import HttpToken, http_tokens
from orchestrator.daemon.core import Inbound
from orchestrator.errors import (
    BadInput,
    GroupNotFound,
    GroupPaused,
    OrchestratorError,
    SenderRefused,
)
from orchestrator.limits import (
    HTTP_BODY_MAX_BYTES,
    HTTP_BODY_TIMEOUT_SECONDS,
    HTTP_CHAT_MESSAGES_MAX,
    HTTP_LONG_POLL_MAX_SECONDS,
)
from orchestrator.store.messages import DEAD, DONE, Message

if TYPE_CHECKING:
    from orchestrator.daemon.core import Daemon

log = logging.getLogger("orchestrator.channels.http")
# The API's OpenAPI description, shipped in the package beside this module and served
# as it is; tests hold it and the routes below to each other.
OPENAPI_DESCRIPTION = Path(__file__).with_name("openapi.yaml")


def shown(message: Message) -> dict[str, object]:
    """A message as the API shows it: each file its replies carry with the path it is
    fetched from."""
    data = message.to_dict()
    if message.files:
        data["files"] = [
            {**f.to_dict(), "path": f"/v1/messages/{message.id}/files/{f.seq}"}
            for f in message.files
        ]
    return data


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def long_poll_seconds(value: str) -> float | None:
    """How long a long poll may wait: the asked ``wait``, at most
    HTTP_LONG_POLL_MAX_SECONDS; None when it is not a number from 0."""
    try:
        seconds = float(value)
    except ValueError:
        return None
    if seconds != seconds or seconds < 0:  # NaN, or negative
        return None
    return min(seconds, HTTP_LONG_POLL_MAX_SECONDS)


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme is
    case-insensitive, RFC 7235), or None."""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class HttpApi:
    """The HTTP API's routes on the daemon's web server (``service.web``), which owns the
    application, the listening socket and the connection cap."""

    name = "http"  # the channel of its messages (a named token's: ``http:<name>``)

    def __init__(self, daemon: Any) -> None:
        self.daemon: Daemon = daemon
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.named: dict[str, HttpToken] = {}  # token value -> its definition
        self.loop: asyncio.AbstractEventLoop | None = None
        self.description: bytes | None = None  # openapi.yaml, read at its first request

    @classmethod
    def enabled(cls, config: Any) -> bool:
        return bool(config.http_token or config.http_tokens)

    @classmethod
    def settings(cls, config: Any) -> tuple[object, ...]:
        return (
            config.http_token,
            tuple(sorted(config.http_tokens.items())),
            config.secrets_file,
        )

    @property
    def middlewares(self) -> list[Any]:
        return [self._errors, self._auth]

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/v1/groups", self.groups)
        app.router.add_post("/v1/groups/{name}/messages", self.post_message)
        app.router.add_get("/v1/messages/{id}", self.get_message)
        app.router.add_get("/v1/messages/{id}/files/{seq}", self.get_file)
        app.router.add_get("/v1/groups/{name}/chats/{chat}/messages", self.chat_messages)
        app.router.add_get("/v1/openapi.yaml", self.openapi)
        app.router.add_get("/metrics", self.metrics)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the named tokens and follow the daemon's changes (long polls wake on
        them, on ``loop``)."""
        config = self.daemon.config
        self.loop = loop
        self.named, problems = http_tokens(config.http_tokens, config.secrets_file)
        for problem in problems:
            log.warning("%s; that token is not accepted", problem)
        self.daemon.add_listener(self._wake_soon)

    def stop(self) -> None:
        self.daemon.remove_listener(self._wake_soon)

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/ui/"):
            return await handler(request)  # the dashboard's pages answer for themselves
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"request body over {HTTP_BODY_MAX_BYTES} bytes")
        except web.HTTPException as exc:
            if exc.status >= 400:
                response = _error(exc.status, exc.reason)
                if "Allow" in exc.headers:  # a 405 names the methods the path takes
                    response.headers["Allow"] = exc.headers["Allow"]
                return response
            raise

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/healthz" or (
            self.daemon.config.http_dashboard
            and (request.path == "/ui" or request.path.startswith("/ui/"))
        ):
            return await handler(request)  # the dashboard checks its own sessions
        if self.principal(request) is False:
            response = _error(401, "missing or wrong bearer token")
            response.headers["WWW-Authenticate"] = "Bearer"  # the scheme to answer with
            return response
        return await handler(request)

    def principal(self, request: web.Request) -> HttpToken | bool | None:
        """Whose the request's bearer token is: None for the operator's, the named
        token's definition, or False for no token we know (each compared in constant
        time, every one of them)."""
        given = bearer_token(request.headers.get("Authorization", ""))
        if given is None:
            return False
        operator = self.daemon.config.http_token
        found: HttpToken | None = None
        is_operator = bool(operator) and hmac.compare_digest(given.encode(), str(operator).encode())
        for value, definition in self.named.items():
            if hmac.compare_digest(given.encode(), value.encode()):
                found = definition
        if is_operator:
            return None
        return found if found is not None else False

    def channel_of(self, token: HttpToken | bool | None) -> str:
        """The channel of messages a token posts: a named token's chats are its own
        (``http:<name>``), so it cannot name another channel's chat and join its
        conversation; the operator's are ``http`` unless it names a channel."""
        return f"{self.name}:{token.name}" if isinstance(token, HttpToken) else self.name

    def known_channels(self) -> set[str]:
        """The channels the operator's token may name: every channel of this daemon."""
        config = self.daemon.config
        return {
            "cli",
            self.name,
            "dashboard",
            *(f"{self.name}:{name}" for name in config.http_tokens),
            *(account.channel for account in config.channel_accounts.values()),
        }

    def may_read(self, request: web.Request, message: Message) -> bool:
        """Whether the request's token may read ``message``: the operator's any, a named
        token those of its own chats whose sender is under its prefix."""
        token = self.principal(request)
        if token is None:
            return True
        return (
            isinstance(token, HttpToken)
            and message.channel == self.channel_of(token)
            and message.sender.startswith(token.senders)
        )

    def may_name(self, request: web.Request, sender: str) -> bool:
        """Whether the request's token may speak for (or read the messages of) ``sender``:
        the operator's may name anyone, a named token senders under its prefix."""
        token = self.principal(request)
        if token is None:
            return True
        return isinstance(token, HttpToken) and sender.startswith(token.senders)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "accepting": self.daemon.accepting})

    async def openapi(self, request: web.Request) -> web.Response:
        """The API's OpenAPI description, for any valid token."""
        if self.description is None:
            self.description = await asyncio.to_thread(OPENAPI_DESCRIPTION.read_bytes)
        return web.Response(body=self.description, content_type="application/yaml")

    async def metrics(self, request: web.Request) -> web.Response:
        """The daemon's metrics, in the format the Accept header asks for (Prometheus's
        text format by default), for the operator's token: they cover every group."""
        if self.principal(request) is not None:
            return _error(403, "only the operator's token (http.token) may read /metrics")
        metrics = self.daemon.metrics
        if not metrics.enabled:
            return _error(404, "metrics are off (metrics.enabled: false in orchestrator.yaml)")
        body, content_type = await asyncio.to_thread(
            metrics.exposition, request.headers.get("Accept", "")
        )
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def groups(self, request: web.Request) -> web.Response:
        """Every group folder; one whose group.yaml is invalid is listed with its errors."""
        listing = await asyncio.to_thread(self.daemon.runtime.store.listing)
        return web.json_response(
            [
                {
                    "folder": item.folder,
                    "name": item.group.config.name if item.group else None,
                    "valid": item.group is not None,
                    "problem": item.problem,
                }
                for item in listing
            ]
        )

    async def post_message(self, request: web.Request) -> web.Response:
        wait = None
        if "wait" in request.query:
            wait = long_poll_seconds(request.query["wait"])
            if wait is None:
                return _error(400, "wait must be a number of seconds from 0")
        try:
            raw = await asyncio.wait_for(request.read(), HTTP_BODY_TIMEOUT_SECONDS)
        except TimeoutError:
            return _error(408, f"the body did not arrive within {HTTP_BODY_TIMEOUT_SECONDS:g}s")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return _error(400, "the body is not valid JSON (UTF-8)")
        except RecursionError:
            return _error(400, "the body is JSON nested too deeply")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        text, sender = body.get("text"), body.get("sender")
        if not isinstance(text, str) or not isinstance(sender, str):
            return _error(400, "text and sender are required strings")
        chat = body.get("chat", sender)
        thread = body.get("thread")
        if not isinstance(chat, str) or (thread is not None and not isinstance(thread, str)):
            return _error(400, "chat and thread must be strings")
        token = self.principal(request)
        channel = self.channel_of(token)
        asked = body.get("channel")
        if asked is not None:
            if isinstance(token, HttpToken):
                return _error(
                    403,
                    f"token {token.name!r} speaks in its own chats only; it may not name a channel",
                )
            known = self.known_channels()
            if not isinstance(asked, str) or asked not in known:
                return _error(
                    400, f"channel must be one of {', '.join(sorted(known))}; got {asked!r}"
                )
            channel = asked
        if isinstance(token, HttpToken) and not self.may_name(request, sender):
            log.warning(
                "HTTP token %r named sender %r outside its prefix %r; refused",
                token.name,
                sender,
                token.senders,
            )
            return _error(
                403,
                f"token {token.name!r} may name senders starting with {token.senders!r} only; "
                f"got {sender!r}",
            )
        try:
            message = await asyncio.to_thread(
                self.daemon.accept,
                Inbound(request.match_info["name"], text, chat, sender, channel, thread),
            )
        except GroupNotFound as exc:
            return _error(404, exc.message)
        except SenderRefused as exc:
            return _error(403, exc.message)
        except BadInput as exc:
            return _error(400, exc.message)
        except GroupPaused as exc:
            return _error(503, exc.message)
        except OrchestratorError as exc:
            return _error(503, exc.message)
        if wait is not None:
            # the sender is the token's own (checked above), so it may read its message
            waited = await self._wait(message.id, wait)
            if waited is not None:  # None only if it was deleted meanwhile
                return web.json_response(shown(waited))
        return web.json_response({"id": message.id, "state": message.state}, status=202)

    async def chat_messages(self, request: web.Request) -> web.Response:
        """A chat's messages since a time (scheduled tasks' runs among them, marked with
        their task): a bridge polls this to pass on what arrived on its own."""
        try:
            since = float(request.query.get("since", "0"))
        except ValueError:
            since = math.nan
        if not math.isfinite(since) or since < 0:
            return _error(400, "since must be a time in seconds (Unix time) from 0")
        try:
            group = await asyncio.to_thread(
                self.daemon.runtime.store.find, request.match_info["name"]
            )
        except GroupNotFound as exc:
            return _error(404, exc.message)
        chat = request.match_info["chat"]
        token = self.principal(request)
        # a bridge sees its own chats; the operator every channel's, or the one it names
        channel = (
            self.channel_of(token)
            if isinstance(token, HttpToken)
            else request.query.get("channel") or None
        )
        messages = await asyncio.to_thread(
            self.daemon.queue.chat_messages,
            group.folder,
            chat,
            since,
            HTTP_CHAT_MESSAGES_MAX,
            channel,
        )
        tasks = dict(
            (mid, tid)
            for tid, mid in await asyncio.to_thread(
                self.daemon.tasks.runs_in_chat,
                group.folder,
                chat,
                since,
                HTTP_CHAT_MESSAGES_MAX,
                channel,
            )
        )
        return web.json_response(
            {
                "messages": [
                    {**shown(m), "task": tasks.get(m.id)}
                    for m in messages
                    if self.may_read(request, m)
                ]
            }
        )

    async def get_message(self, request: web.Request) -> web.Response:
        message_id = request.match_info["id"]
        wait = long_poll_seconds(request.query.get("wait", "0"))
        if wait is None:
            return _error(400, "wait must be a number of seconds from 0")
        try:
            after = int(request.query["after"]) if "after" in request.query else None
        except ValueError:
            after = -1
        if after is not None and after < 0:
            return _error(400, "after must be a whole number of replies")
        message = await self._wait(message_id, wait, after)
        if message is None or not self.may_read(request, message):
            return _error(404, f"no message {message_id!r}")
        return web.json_response(shown(message))

    async def get_file(self, request: web.Request) -> web.StreamResponse:
        """A file one of the message's replies carries, as the agent sent it (the host's
        copy in its outbox), for a token that may read the message."""
        message_id = request.match_info["id"]
        message = await asyncio.to_thread(self.daemon.queue.get, message_id)
        if message is None or not self.may_read(request, message):
            return _error(404, f"no message {message_id!r}")
        found = [f for f in message.files if str(f.seq) == request.match_info["seq"]]
        if not found:
            return _error(404, f"message {message_id!r} has no file {request.match_info['seq']!r}")
        file = found[0]
        outbox = self.daemon.home.state_dir / "outbox"
        path = Path(file.path)
        if outbox not in path.parents or not path.is_file():
            return _error(410, f"{file.name} is no longer kept (files are kept a week)")
        quoted = urllib.parse.quote(file.name)
        return web.FileResponse(
            path,
            headers={
                "Content-Type": file.mime,
                "Content-Disposition": f"attachment; filename*=UTF-8''{quoted}",
                "X-Content-Type-Options": "nosniff",
            },
        )

    async def _wait(self, message_id: str, wait: float, after: int | None = None) -> Message | None:
        """The message once done or dead (or once it has more than ``after`` replies),
        or as it is after ``wait`` seconds; waits on the daemon's change events, holding
        no thread."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        event = asyncio.Event()
        self.waiters.setdefault(message_id, set()).add(event)
        try:
            while True:
                event.clear()
                message = await asyncio.to_thread(self.daemon.queue.get, message_id)
                remaining = deadline - loop.time()
                if message is None or message.state in (DONE, DEAD) or remaining <= 0:
                    return message
                if after is not None and len(message.replies) > after:
                    return message
                await self._next_change(message_id, event, deadline, after is not None)
        finally:
            waiting = self.waiters.get(message_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self.waiters[message_id]

    async def _next_change(
        self, message_id: str, event: asyncio.Event, deadline: float, waits_for_replies: bool
    ) -> None:
        """Until ``event`` is set by a change worth reading the message again for, or
        the deadline. A wait for the answer alone reads nothing at a change while the
        message's turn runs unanswered (its start, which a chat app shows as typing):
        the answer's own change follows."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                while True:
                    await event.wait()
                    if waits_for_replies or not self._unanswered(message_id):
                        return
                    event.clear()

    def _unanswered(self, message_id: str) -> bool:
        """Whether the message's turn runs and has not stored its answer yet."""
        delivery = self.daemon.active.get(message_id)
        return delivery is not None and not delivery.answered

    def _wake_soon(self, message_id: str) -> None:
        """From a worker thread: wake the long polls waiting on ``message_id``."""
        if message_id in self.waiters and self.loop is not None:
            self.loop.call_soon_threadsafe(self._wake, message_id)

    def _wake(self, message_id: str) -> None:
        for event in self.waiters.get(message_id, ()):
            event.set()
