"""A fake Slack on loopback for tests: the Web API methods the Slack channel calls and
the Socket Mode WebSocket, in Slack's documented wire format.

Web API (``POST /api/<method>``, the token in ``Authorization: Bearer``): ``auth.test``
and ``chat.postMessage`` take the bot token, ``apps.connections.open`` only an app-level
token; each answers ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}`` (a 429 with
``Retry-After`` when a test asks), and checks its arguments as Slack does. Files are
served at their ``url_private_download`` to the bot token only.

Socket Mode (``GET /link/?ticket=...``, a ticket good once): ``hello`` first, then each
event in an ``events_api`` envelope (``envelope_id``, ``payload``, ``retry_attempt``,
``retry_reason``, ``accepts_response_payload``); the client acknowledges with
``{"envelope_id": ...}``. ``disconnect`` messages and dropped connections are sent when
a test asks. ``tests/test_slack.py`` drives this fake with slack_sdk's own clients.

Uploads, as Slack's Web API documents them: ``files.getUploadURLExternal`` (``filename``
and ``length``, the size in bytes, not 0) answers an ``upload_url`` and a ``file_id``;
the file's bytes are POSTed to that URL, raw or multipart form encoded, without a token
(200 when taken); ``files.completeUploadExternal`` (``files``: a JSON array of
``{"id", "title"}``; ``channel_id``, ``thread_ts``, ``initial_comment``) finishes the
upload and shares each file into the channel, in the thread, with the comment: what
``shares`` lists. A file not uploaded (or finished already) is refused there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

TEAM = "T0FAMILY"
APP = "A0HELPER"
BOT_USER = "U0HELPER"
BOT_ID = "B0HELPER"
BOT_NAME = "helper"
TEXT_MAX = 40_000  # Slack answers msg_too_long past this
# The arguments each method takes (beyond token); others are refused as Slack's
# invalid_arguments, so a misspelled one is seen.
METHODS: dict[str, tuple[set[str], set[str], str]] = {
    # method: (required, optional, token type)
    "auth.test": (set(), set(), "bot"),
    "apps.connections.open": (set(), set(), "app"),
    "chat.postMessage": (
        {"channel"},
        {"text", "blocks", "thread_ts", "mrkdwn", "unfurl_links", "unfurl_media"},
        "bot",
    ),
    "files.getUploadURLExternal": ({"filename", "length"}, {"alt_txt", "snippet_type"}, "bot"),
    "files.completeUploadExternal": (
        {"files"},
        {"channel_id", "channels", "thread_ts", "initial_comment", "blocks"},
        "bot",
    ),
}


@dataclass
class Upload:
    """A file whose upload URL was issued: its declared name and length, its bytes once
    posted, and whether files.completeUploadExternal finished it."""

    file_id: str
    filename: str
    length: int
    data: bytes | None = None
    completed: bool = False


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    token: str | None
    at: float = field(default_factory=time.time)


class FakeSlack:
    """The server, its state, and the knobs a test turns."""

    def __init__(self, bot_token: str, app_token: str) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.calls: list[Call] = []
        self.files: dict[str, bytes] = {}
        self.fail_next: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = {}
        self.tickets: set[str] = set()
        self.sockets: list[web.WebSocketResponse] = []
        self.connections = 0  # Socket Mode connections accepted so far
        self.sent_envelopes: dict[str, dict[str, Any]] = {}
        self.acks: list[str] = []
        self.unknown_acks: list[str] = []
        self.ts = itertools.count(1)
        self.uploads: dict[str, Upload] = {}  # by the upload URL's ticket
        self.shares: list[dict[str, Any]] = []  # files shared into channels
        self.file_ids = itertools.count(1)
        self.event_ids = itertools.count(1)
        self.send_event = threading.Event()  # set at each chat.postMessage that posts
        self.last_send = 0.0  # time.perf_counter() of the last one
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
        self.api_url = f"{self.url}/api/"

    def close(self) -> None:
        async def shut() -> None:
            for ws in list(self.sockets):
                await ws.close()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    # what a test does

    def new_ts(self) -> str:
        return f"{int(time.time())}.{next(self.ts):06d}"

    def message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        channel_type: str = "im",
        thread_ts: str | None = None,
        files: list[dict[str, Any]] | None = None,
        parent_user_id: str | None = None,
        subtype: str | None = None,
        team: str = TEAM,
    ) -> dict[str, Any]:
        """A ``message`` event as the Events API sends it."""
        ts = self.new_ts()
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": channel_type,
            "team": team,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        if parent_user_id:
            event["parent_user_id"] = parent_user_id
        if files:
            event["files"] = files
            event["subtype"] = "file_share"
        if subtype:
            event["subtype"] = subtype
        return event

    @staticmethod
    def mention_of(message: dict[str, Any]) -> dict[str, Any]:
        """The ``app_mention`` event Slack sends beside a message that mentions the app
        (same message, another event)."""
        keep = ("channel", "user", "text", "ts", "event_ts", "thread_ts", "team", "files")
        return {"type": "app_mention", **{k: message[k] for k in keep if k in message}}

    def push(self, event: dict[str, Any], *, retry_attempt: int = 0) -> str:
        """Send ``event`` in an events_api envelope on the newest connection; its
        envelope id."""
        payload = {
            "token": "legacy-verification-token",
            "team_id": TEAM,
            "api_app_id": APP,
            "event": event,
            "type": "event_callback",
            "event_id": f"Ev{next(self.event_ids):08d}",
            "event_time": int(time.time()),
            "authorizations": [
                {"team_id": TEAM, "user_id": BOT_USER, "is_bot": True, "enterprise_id": None}
            ],
            "is_ext_shared_channel": False,
        }
        return self.send_envelope(payload, retry_attempt=retry_attempt)

    def send_envelope(self, payload: dict[str, Any], *, retry_attempt: int = 0) -> str:
        envelope = {
            "envelope_id": str(uuid.uuid4()),
            "payload": payload,
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
        }
        with self.lock:
            self.sent_envelopes[envelope["envelope_id"]] = envelope
        self._on_loop(self._send_newest(envelope))
        return str(envelope["envelope_id"])

    def redeliver(self, envelope_id: str) -> str:
        """Deliver an envelope's payload again, as Slack does when no acknowledgement
        came in time (a new envelope, the same event id, retry_attempt 1)."""
        with self.lock:
            old = self.sent_envelopes[envelope_id]
        return self.send_envelope(old["payload"], retry_attempt=old["retry_attempt"] + 1)

    def say(self, channel: str, user: str, text: str, **kw: Any) -> str:
        """Push a message event; its ts."""
        event = self.message(channel, user, text, **kw)
        self.push(event)
        return str(event["ts"])

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the client to reconnect, as Slack does every few hours."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake"}}
        self._on_loop(self._send_newest(message))

    def drop(self) -> None:
        """Close the newest connection abruptly."""

        async def close() -> None:
            if self.sockets:
                await self.sockets[-1].close()

        self._on_loop(close())

    def add_file(self, file_id: str, name: str, mimetype: str, data: bytes) -> dict[str, Any]:
        """A file shared in Slack: its object as a message event carries it."""
        self.files[file_id] = data
        url = f"{self.url}/files-pri/{TEAM}-{file_id}/download/{urllib.parse.quote(name, safe='')}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(data),
            "mode": "hosted",
            "url_private": url,
            "url_private_download": url,
        }

    def fail(
        self, method: str, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        """The next call of ``method`` gets this answer instead."""
        self.fail_next.setdefault(method, []).append((status, body, headers or {}))

    def posted(self, channel: str | None = None) -> list[Call]:
        with self.lock:
            return [
                c
                for c in self.calls
                if c.method == "chat.postMessage"
                and "ts" in c.params
                and (channel is None or c.params.get("channel") == channel)
            ]

    def shared(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Files shared by files.completeUploadExternal: channel, thread_ts,
        initial_comment, and the file (id, name, data)."""
        with self.lock:
            return [s for s in self.shares if channel is None or s["channel"] == channel]

    def calls_of(self, method: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method]

    # the server

    def _on_loop(self, coroutine: Any) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    async def _send_newest(self, message: dict[str, Any]) -> None:
        live = [ws for ws in self.sockets if not ws.closed]
        assert live, "no Socket Mode connection is open"
        await live[-1].send_str(json.dumps(message))

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/{method}", self._method)
        app.router.add_get("/link/", self._link)
        app.router.add_get("/files-pri/{file}/download/{name}", self._file)
        app.router.add_post("/upload/v1/{ticket}", self._upload)
        return app

    @staticmethod
    def _token(request: web.Request) -> str | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" and token else None

    @staticmethod
    async def _params(request: web.Request) -> dict[str, Any]:
        """Arguments as the Web API takes them: a JSON body, form fields or the query."""
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            params.update(await request.json())
        elif request.can_read_body:
            params.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
        return params

    @staticmethod
    def _error(error: str, status: int = 200, **extra: Any) -> web.Response:
        return web.json_response({"ok": False, "error": error, **extra}, status=status)

    async def _method(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        token = self._token(request)
        params = await self._params(request)
        token = token or params.pop("token", None)
        with self.lock:
            self.calls.append(Call(method, params, token))
        if method not in METHODS:
            return self._error("unknown_method", 404)
        required, optional, token_type = METHODS[method]
        if token is None:
            return self._error("not_authed")
        expected = self.bot_token if token_type == "bot" else self.app_token
        if token not in (self.bot_token, self.app_token):
            return self._error("invalid_auth")
        if token != expected:
            return self._error("not_allowed_token_type")
        queued = self.fail_next.get(method)
        if queued:
            status, body, headers = queued.pop(0)
            return web.json_response(body, status=status, headers=headers)
        missing = required - set(params)
        if missing:
            return self._error("invalid_arguments", response_metadata={"messages": sorted(missing)})
        unknown = set(params) - required - optional
        if unknown:
            return self._error("invalid_arguments", response_metadata={"messages": sorted(unknown)})
        handler = getattr(self, "_m_" + method.replace(".", "_"))
        result: web.Response = await handler(params)
        return result

    async def _m_auth_test(self, params: dict[str, Any]) -> web.Response:
        return web.json_response(
            {
                "ok": True,
                "url": "https://family.slack.com/",
                "team": "Family",
                "user": BOT_NAME,
                "team_id": TEAM,
                "user_id": BOT_USER,
                "bot_id": BOT_ID,
                "is_enterprise_install": False,
            }
        )

    async def _m_apps_connections_open(self, params: dict[str, Any]) -> web.Response:
        ticket = uuid.uuid4().hex
        self.tickets.add(ticket)
        return web.json_response(
            {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}"}
        )

    async def _m_chat_postMessage(self, params: dict[str, Any]) -> web.Response:
        text = params.get("text")
        if not text and not params.get("blocks"):
            return self._error("no_text")
        if text is not None and len(str(text)) > TEXT_MAX:
            return self._error("msg_too_long")
        thread_ts = params.get("thread_ts")
        if thread_ts is not None and not _is_ts(str(thread_ts)):
            return self._error("invalid_thread_ts")
        ts = self.new_ts()
        params["ts"] = ts
        message = {"type": "message", "user": BOT_USER, "bot_id": BOT_ID, "text": text, "ts": ts}
        if thread_ts:
            message["thread_ts"] = thread_ts
        self.last_send = time.perf_counter()
        self.send_event.set()
        return web.json_response(
            {"ok": True, "channel": params["channel"], "ts": ts, "message": message}
        )

    async def _m_files_getUploadURLExternal(self, params: dict[str, Any]) -> web.Response:
        length = str(params["length"])
        if not length.isdigit() or int(length) == 0:
            return self._error("missing_argument")  # Slack's answer to a length of 0
        ticket = uuid.uuid4().hex
        upload = Upload(f"F0UP{next(self.file_ids):07d}", str(params["filename"]), int(length))
        with self.lock:
            self.uploads[ticket] = upload
        return web.json_response(
            {"ok": True, "upload_url": f"{self.url}/upload/v1/{ticket}", "file_id": upload.file_id}
        )

    async def _m_files_completeUploadExternal(self, params: dict[str, Any]) -> web.Response:
        try:
            wanted = json.loads(str(params["files"]))
        except ValueError:
            return self._error("invalid_arguments")
        if not isinstance(wanted, list) or not wanted:
            return self._error("invalid_arguments")
        thread_ts = params.get("thread_ts")
        if thread_ts is not None and not _is_ts(str(thread_ts)):
            return self._error("invalid_thread_ts")
        with self.lock:
            by_id = {u.file_id: u for u in self.uploads.values()}
            found = [by_id.get(str(f.get("id"))) if isinstance(f, dict) else None for f in wanted]
            if any(u is None or u.data is None or u.completed for u in found):
                return self._error("file_not_found")
            files = []
            for upload, item in zip(found, wanted, strict=True):
                assert upload is not None and upload.data is not None
                upload.completed = True
                title = str(item.get("title") or upload.filename)
                files.append({"id": upload.file_id, "name": upload.filename, "title": title,
                              "size": len(upload.data)})  # fmt: skip
                if params.get("channel_id"):
                    self.shares.append({
                        "channel": str(params["channel_id"]),
                        "thread_ts": thread_ts,
                        "initial_comment": params.get("initial_comment"),
                        "file": {"id": upload.file_id, "name": upload.filename,
                                 "data": upload.data},
                    })  # fmt: skip
        self.last_send = time.perf_counter()
        self.send_event.set()
        return web.json_response({"ok": True, "files": files})

    async def _upload(self, request: web.Request) -> web.Response:
        """The upload URL: the file's bytes, raw or as a multipart form's file part."""
        body = await request.read()
        with self.lock:
            self.calls.append(
                Call("upload", {"path": request.path, "size": len(body)}, self._token(request))
            )
            upload = self.uploads.get(request.match_info["ticket"])
        queued = self.fail_next.get("upload")
        if queued:
            status, answer, headers = queued.pop(0)
            return web.json_response(answer, status=status, headers=headers)
        if upload is None or upload.completed:
            return web.Response(status=404, text="no such upload")
        data = body
        if request.content_type.startswith("multipart/"):
            import email.parser
            import email.policy

            head = f"Content-Type: {request.headers['Content-Type']}\r\n\r\n".encode()
            parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
            parts = [p for p in parsed.iter_parts() if p.get_filename() or p.get_param("name")]
            payload = parts[0].get_payload(decode=True) if parts else None
            data = payload if isinstance(payload, bytes) else b""
        if len(data) != upload.length:
            return web.Response(status=400, text="the length differs from the one declared")
        with self.lock:
            upload.data = data
        return web.Response(text=f"OK - {len(data)}")

    async def _file(self, request: web.Request) -> web.StreamResponse:
        with self.lock:
            self.calls.append(Call("file", {"path": request.path}, self._token(request)))
        if self._token(request) != self.bot_token:
            return web.Response(status=403, text="no access")
        file_id = request.match_info["file"].removeprefix(f"{TEAM}-")
        if file_id == "F302":  # a redirect elsewhere, with a page of its own
            return web.Response(
                status=302, headers={"Location": "http://127.0.0.2:9/"}, text="moved"
            )
        if file_id not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[file_id], content_type="application/octet-stream")

    async def _link(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self.tickets:
            return web.Response(status=401, text="invalid ticket")
        self.tickets.discard(ticket)  # good once
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        self.connections += 1
        await ws.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": len([s for s in self.sockets if not s.closed]),
                    "debug_info": {"host": "fake-applink", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": APP},
                }
            )
        )
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            envelope_id = str(data.get("envelope_id"))
            with self.lock:
                if envelope_id in self.sent_envelopes:
                    self.acks.append(envelope_id)
                else:
                    self.unknown_acks.append(envelope_id)
        return ws


def _is_ts(value: str) -> bool:
    whole, dot, fraction = value.partition(".")
    return bool(dot) and whole.isdigit() and fraction.isdigit()
