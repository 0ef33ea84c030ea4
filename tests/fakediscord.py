"""A fake Discord on loopback for tests: the REST routes the Discord channel calls and
the gateway WebSocket, in Discord's documented wire format (API v10).

REST (``/api/v10``, ``Authorization: Bot <token>``): ``GET /users/@me``, ``GET
/oauth2/applications/@me`` (its ``flags`` say whether the Message Content intent is
on), ``GET /gateway/bot``, ``POST /channels/{id}/messages`` (content of at most 2,000
characters, a ``nonce`` of at most 25 characters; with ``enforce_nonce`` a nonce the bot
used within ``nonce_window`` seconds returns that message and posts nothing),
``POST /channels/{id}/typing``; a 429 with ``retry_after`` when a test asks.
Attachments are served from their ``url`` as a CDN would. A message with files comes as
``multipart/form-data``: its JSON in ``payload_json`` and each file a part named
``files[n]`` with a filename (Discord's "Uploading Files"); a file over ``file_limit``
(10 MiB, a server without boosts) is refused with 413 and code 40005, and the message
made lists its ``attachments``. A voice message has flag ``IS_VOICE_MESSAGE`` and its
attachment ``duration_secs`` and ``waveform``.

Gateway (``?v=10&encoding=json&compress=zlib-stream``): HELLO (op 10); IDENTIFY (op 2)
checked (a wrong token closes with 4004, a privileged intent the application lacks with
4014); READY then GUILD_CREATE dispatches (op 0, with sequence numbers); heartbeats
(op 1) answered with HEARTBEAT_ACK (op 11); RESUME (op 6) replays what was missed and
sends RESUMED; RECONNECT (op 7) when a test asks. Payloads go out as one zlib stream
per connection, each flushed with Z_SYNC_FLUSH, as Discord sends them with
``compress=zlib-stream``. ``tests/test_discord.py`` drives this fake with discord.py's
own client.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import itertools
import json
import re
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

APPLICATION = "1100000000000000001"
BOT_USER = "1100000000000000002"
GUILD = "1200000000000000001"
TEXT_CHANNEL = "1200000000000000010"
CONTENT_MAX = 2000
NONCE_MAX = 25
MESSAGE_CONTENT = 1 << 15  # the privileged intent
# GATEWAY_MESSAGE_CONTENT_LIMITED: an unverified application (under 100 servers) with the
# intent turned on in the Developer Portal
APP_FLAG_MESSAGE_CONTENT = 1 << 19
PRIVILEGED = (1 << 1) | (1 << 8) | MESSAGE_CONTENT
IS_VOICE_MESSAGE = 1 << 13  # a message flag
FILE_LIMIT = 10 * 1024 * 1024  # a file a bot uploads to a server without boosts


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON as Discord sends it: ``Content-Type: application/json``, no charset (which
    discord.py compares exactly)."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        # Discord's answers come through Google's front end (discord.py takes a 429 without
        # Via for a Cloudflare ban)
        headers={**(headers or {}), "Content-Type": "application/json", "Via": "1.1 google"},
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any]
    at: float = field(default_factory=time.time)


@dataclass
class Connection:
    ws: web.WebSocketResponse
    compressor: Any
    identified: bool = False
    intents: int | None = None
    heartbeats: int = 0


class FakeDiscord:
    """The server, its state, and the knobs a test turns."""

    def __init__(
        self, token: str, *, message_content: bool = True, heartbeat_ms: int = 41250
    ) -> None:
        self.token = token
        self.message_content = message_content
        self.heartbeat_ms = heartbeat_ms
        self.nonce_window = 300.0
        self.file_limit = FILE_LIMIT
        self.uploaded: dict[str, bytes] = {}  # an attachment's id -> the bytes the bot sent
        self.calls: list[Call] = []
        self.files: dict[str, bytes] = {}
        self.fail_next: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = {}
        self.connections: list[Connection] = []
        self.identifies = 0
        self.resumes = 0
        self.close_codes: list[int] = []
        self.sequence = 0
        self.sent: list[tuple[int, dict[str, Any]]] = []  # (seq, payload) of dispatches
        self.session_id = "fake-session-1"
        self.nonces: dict[str, tuple[float, dict[str, Any]]] = {}
        self.messages: list[dict[str, Any]] = []  # what the bot posted
        self.threads: dict[str, str] = {}  # thread id -> parent channel id
        self.ids = itertools.count(1300000000000000001)
        self.send_event = threading.Event()  # set at each message the bot posts
        self.last_send = 0.0
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.5)
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result(10)
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result(10)
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        async def shut() -> None:
            for connection in list(self.connections):
                await connection.ws.close()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    # objects in Discord's shapes

    def new_id(self) -> str:
        return str(next(self.ids))

    @staticmethod
    def user(user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
        return {
            "id": user_id,
            "username": name,
            "discriminator": "0",
            "global_name": name.title(),
            "avatar": None,
            "bot": bot,
        }

    def bot_user(self) -> dict[str, Any]:
        return self.user(BOT_USER, "helper", bot=True)

    def channel(self, channel_id: str, name: str) -> dict[str, Any]:
        return {
            "id": channel_id,
            "type": 0,
            "guild_id": GUILD,
            "name": name,
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
        }

    def thread_object(self, thread_id: str, parent: str, name: str) -> dict[str, Any]:
        return {
            "id": thread_id,
            "type": 11,
            "guild_id": GUILD,
            "parent_id": parent,
            "owner_id": BOT_USER,
            "name": name,
            "last_message_id": None,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _now(),
                "locked": False,
            },
        }

    def guild(self) -> dict[str, Any]:
        return {
            "id": GUILD,
            "name": "Family",
            "icon": None,
            "owner_id": "1400000000000000001",
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [
                {
                    "id": GUILD,
                    "name": "@everyone",
                    "color": 0,
                    "hoist": False,
                    "position": 0,
                    "permissions": "1071698660929",
                    "managed": False,
                    "mentionable": False,
                }
            ],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "vanity_url_code": None,
            "description": None,
            "banner": None,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "public_updates_channel_id": None,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
            "joined_at": _now(),
            "large": False,
            "unavailable": False,
            "member_count": 3,
            "members": [],
            "voice_states": [],
            "presences": [],
            "channels": [self.channel(TEXT_CHANNEL, "general")],
            "threads": [
                self.thread_object(t, p, f"thread {t[-3:]}") for t, p in self.threads.items()
            ],
            "stage_instances": [],
            "guild_scheduled_events": [],
        }

    def message(
        self,
        channel_id: str,
        author: dict[str, Any],
        content: str,
        *,
        guild: bool = True,
        mentions: list[dict[str, Any]] | None = None,
        reply_to: dict[str, Any] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        flags: int = 0,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE event's data."""
        data: dict[str, Any] = {
            "id": self.new_id(),
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions or [],
            "mention_roles": [],
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "type": 19 if reply_to else 0,
            "flags": flags,
        }
        if reply_to is not None:
            data["message_reference"] = {
                "message_id": reply_to["id"],
                "channel_id": channel_id,
                "type": 0,
            }
            data["referenced_message"] = reply_to
        if guild:
            data["guild_id"] = GUILD
            data["member"] = {"roles": [], "joined_at": _now(), "deaf": False, "mute": False}
        if (
            not self.message_content
            and guild
            and not any(m["id"] == BOT_USER for m in mentions or [])
        ):
            # without the intent, a server message that does not mention the app comes empty
            data.update(content="", attachments=[], embeds=[])
        return data

    # what a test does

    def say(self, channel_id: str, author: dict[str, Any], content: str, **kw: Any) -> str:
        """A person's message dispatched on the gateway; its id."""
        data = self.message(channel_id, author, content, **kw)
        self.dispatch("MESSAGE_CREATE", data)
        return str(data["id"])

    def add_thread(self, parent: str, name: str = "a thread") -> str:
        """A thread under ``parent``, made known with THREAD_CREATE; its id."""
        thread_id = self.new_id()
        self.threads[thread_id] = parent
        self.dispatch("THREAD_CREATE", {**self.thread_object(thread_id, parent, name)})
        return thread_id

    def voice_message(self, channel: str, author: dict[str, Any], ogg: bytes,
                      seconds: float) -> dict[str, Any]:  # fmt: skip
        """A voice message as Discord's clients record it: no content, the message flag,
        one attachment ``voice-message.ogg`` with ``duration_secs`` and a ``waveform``."""
        item = self.add_file("voice-message.ogg", "audio/ogg", ogg, channel)
        item.update(
            duration_secs=seconds, waveform=base64.b64encode(bytes(range(0, 256, 4))).decode()
        )
        return self.message(
            channel, author, "", guild=False, attachments=[item], flags=IS_VOICE_MESSAGE
        )

    def add_file(self, name: str, content_type: str, data: bytes, channel: str) -> dict[str, Any]:
        """An attachment object, its file served at its url."""
        file_id = self.new_id()
        self.files[file_id] = data
        url = f"{self.url}/attachments/{channel}/{file_id}/{urllib.parse.quote(name, safe='')}"
        return {
            "id": file_id,
            "filename": name,
            "content_type": content_type,
            "size": len(data),
            "url": url,
            "proxy_url": url,
        }

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        self._on_loop(self._dispatch(event, data))

    def reconnect(self) -> None:
        """Ask the client to reconnect and resume (op 7)."""
        self._on_loop(self._send_newest({"op": 7, "d": None}))

    def fail(
        self, route: str, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        """The next request to ``route`` ("POST messages") gets this answer instead."""
        self.fail_next.setdefault(route, []).append((status, body, headers or {}))

    def posted(self, channel: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.messages if channel is None or m["channel_id"] == channel]

    def calls_of(self, method: str, path_part: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method and path_part in c.path]

    # the gateway

    def _on_loop(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def _newest(self) -> Connection | None:
        live = [c for c in self.connections if not c.ws.closed and c.identified]
        return live[-1] if live else None

    async def _send(self, connection: Connection, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        compressed = connection.compressor.compress(data)
        compressed += connection.compressor.flush(zlib.Z_SYNC_FLUSH)
        await connection.ws.send_bytes(compressed)

    async def _send_newest(self, payload: dict[str, Any]) -> None:
        connection = self._newest()
        assert connection is not None, "no gateway connection is identified"
        await self._send(connection, payload)

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        self.sequence += 1
        payload = {"op": 0, "t": event, "s": self.sequence, "d": data}
        self.sent.append((self.sequence, payload))
        connection = self._newest()
        if connection is not None:
            await self._send(connection, payload)

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        if query.get("v") != "10" or query.get("encoding") != "json":
            return web.Response(status=400, text="v=10 and encoding=json are expected")
        if query.get("compress") not in (None, "zlib-stream"):
            return web.Response(status=400, text="only zlib-stream compression is offered")
        ws = web.WebSocketResponse(max_msg_size=4096 * 4)
        await ws.prepare(request)
        connection = Connection(ws, zlib.compressobj())
        self.connections.append(connection)
        await self._send(connection, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}})
        async for frame in ws:
            if frame.type != WSMsgType.TEXT:
                continue
            payload = json.loads(frame.data)
            op, data = payload.get("op"), payload.get("d")
            if op == 1:
                connection.heartbeats += 1
                await self._send(connection, {"op": 11})
            elif op == 2:
                await self._identify(connection, data)
            elif op == 6:
                await self._resume(connection, data)
        return ws

    async def _identify(self, connection: Connection, data: dict[str, Any]) -> None:
        if data.get("token") != self.token:
            await self._close(connection, 4004, "Authentication failed.")
            return
        intents = int(data.get("intents") or 0)
        if intents & MESSAGE_CONTENT and not self.message_content:
            await self._close(connection, 4014, "Disallowed intent(s).")
            return
        self.identifies += 1
        connection.identified, connection.intents = True, intents
        self.session_id = f"fake-session-{self.identifies}"
        await self._dispatch(
            "READY",
            {
                "v": 10,
                "user": self.bot_user(),
                "guilds": [{"id": GUILD, "unavailable": True}],
                "session_id": self.session_id,
                "resume_gateway_url": f"ws://127.0.0.1:{self.port}",
                "shard": [0, 1],
                "application": {"id": APPLICATION, "flags": self._app_flags()},
            },
        )
        await self._dispatch("GUILD_CREATE", self.guild())

    async def _resume(self, connection: Connection, data: dict[str, Any]) -> None:
        if data.get("token") != self.token or data.get("session_id") != self.session_id:
            await self._send(connection, {"op": 9, "d": False})
            return
        self.resumes += 1
        connection.identified = True
        missed = [p for s, p in self.sent if s > int(data.get("seq") or 0)]
        for payload in missed:
            await self._send(connection, payload)
        await self._dispatch("RESUMED", {})

    async def _close(self, connection: Connection, code: int, reason: str) -> None:
        self.close_codes.append(code)
        await connection.ws.close(code=code, message=reason.encode())

    def _app_flags(self) -> int:
        return APP_FLAG_MESSAGE_CONTENT if self.message_content else 0

    # REST

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)  # files up to the limit and more
        app.router.add_get("/", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.+}", self._rest)
        app.router.add_get("/attachments/{channel}/{file}/{name}", self._file)
        return app

    @staticmethod
    def _error(status: int, message: str, code: int = 0) -> web.Response:
        return _json({"message": message, "code": code}, status=status)

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = {}
        files: list[tuple[str, str | None, bytes]] = []  # (filename, type, bytes)
        if request.content_type == "application/json":
            body = await request.json()
        elif request.content_type.startswith("multipart/"):
            form = await request.post()
            body = json.loads(str(form.get("payload_json") or "{}"))
            for name, value in form.items():
                if isinstance(value, web.FileField):
                    if not re.fullmatch(r"files\[\d+\]", name) or not value.filename:
                        return self._error(400, f"Invalid Form Body: {name}: not a file part")
                    files.append((value.filename, value.content_type, value.file.read()))
        path = "/" + request.match_info["path"]
        with self.lock:
            self.calls.append(Call(request.method, path, {**body, "files": [f[0] for f in files]}))
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return self._error(401, "401: Unauthorized")
        route = f"{request.method} {path.rsplit('/', 1)[-1]}"
        queued = self.fail_next.get(route)
        if queued:
            status, answer, headers = queued.pop(0)
            return _json(answer, status=status, headers=headers)
        if request.method == "GET" and path == "/users/@me":
            return _json(self.bot_user())
        if request.method == "GET" and path == "/oauth2/applications/@me":
            return _json(self._application())
        if request.method == "GET" and path == "/gateway/bot":
            return _json(
                {
                    "url": f"ws://127.0.0.1:{self.port}",
                    "shards": 1,
                    "session_start_limit": {
                        "total": 1000,
                        "remaining": 999,
                        "reset_after": 14400000,
                        "max_concurrency": 1,
                    },
                }
            )
        parts = path.strip("/").split("/")
        if request.method == "POST" and len(parts) == 3 and parts[0] == "channels":
            if parts[2] == "typing":
                return web.Response(status=204)
            if parts[2] == "messages":
                return self._create_message(parts[1], body, files)
        return self._error(404, "404: Not Found")

    def _application(self) -> dict[str, Any]:
        return {
            "id": APPLICATION,
            "name": "Helper",
            "icon": None,
            "description": "",
            "bot_public": False,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "owner": self.user("1400000000000000001", "owner"),
            "team": None,
            "flags": self._app_flags(),
        }

    def _create_message(
        self, channel_id: str, body: dict[str, Any], files: list[tuple[str, str | None, bytes]]
    ) -> web.Response:
        content = body.get("content")
        if not content and not body.get("embeds") and not files:
            return self._error(400, "Cannot send an empty message", 50006)
        if any(len(data) > self.file_limit for _, _, data in files):
            return self._error(413, "Request entity too large", 40005)
        if content is not None and len(str(content)) > CONTENT_MAX:
            return self._error(400, "Invalid Form Body: content: Must be 2000 or fewer in length.")
        nonce = body.get("nonce")
        if nonce is not None and len(str(nonce)) > NONCE_MAX:
            return self._error(400, "Invalid Form Body: nonce: Must be 25 or fewer in length.")
        if body.get("enforce_nonce") and nonce is not None:
            with self.lock:
                seen = self.nonces.get(str(nonce))
            if seen is not None and time.time() - seen[0] <= self.nonce_window:
                return _json(seen[1])  # the message made with this nonce
        data = self.message(channel_id, self.bot_user(), str(content or ""), guild=False)
        data.update(content=str(content or ""), nonce=nonce)
        if channel_id in self.threads or channel_id == TEXT_CHANNEL:
            data["guild_id"] = GUILD
        reference = body.get("message_reference")
        if reference is not None:
            data["message_reference"] = reference
            data["type"] = 19
        data["allowed_mentions"] = body.get("allowed_mentions")
        attachments = []
        for filename, content_type, blob in files:
            made = self.add_file(filename, content_type or "application/octet-stream", blob,
                                 channel_id)  # fmt: skip
            attachments.append(made)
            self.uploaded[made["id"]] = blob
        data["attachments"] = attachments
        with self.lock:
            if nonce is not None:
                self.nonces[str(nonce)] = (time.time(), data)
            self.messages.append(data)
        self.last_send = time.perf_counter()
        self.send_event.set()
        return _json(data)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        with self.lock:
            self.calls.append(Call("GET", request.path, {}))
        data = self.files.get(request.match_info["file"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")
