"""A fake Telegram Bot API server on loopback for tests: it checks each call's method
name, token and parameters the way the real one does, answers in the real shapes
(``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code", "description"}``), and
records every call. Updates are pushed by the test and served by a real long poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import html.parser
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

BOT_ID = 777000111
BOT_USERNAME = "family_helper_bot"
# The parameters each method takes (Bot API 7+); an unknown one is a 400, as a real
# server would reject a misspelled required one.
METHODS: dict[str, tuple[set[str], set[str]]] = {
    # method: (required, optional)
    "getMe": (set(), set()),
    "getUpdates": (set(), {"offset", "limit", "timeout", "allowed_updates"}),
    "sendMessage": (
        {"chat_id", "text"},
        {
            "parse_mode",
            "message_thread_id",
            "reply_parameters",
            "entities",
            "disable_notification",
            "link_preview_options",
        },
    ),
    "sendChatAction": ({"chat_id", "action"}, {"message_thread_id"}),
    "getFile": ({"file_id"}, set()),
    "sendPhoto": (
        {"chat_id", "photo"},
        {"caption", "parse_mode", "message_thread_id", "reply_parameters"},
    ),
    "sendDocument": (
        {"chat_id", "document"},
        {"caption", "parse_mode", "message_thread_id", "reply_parameters"},
    ),
    "sendVoice": (
        {"chat_id", "voice"},
        {"caption", "parse_mode", "message_thread_id", "reply_parameters", "duration"},
    ),
    "close": (set(), set()),
    "logOut": (set(), set()),
}
TELEGRAM_HTML_TAGS = {
    "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre",
    "tg-spoiler", "span", "blockquote", "tg-emoji",
}  # fmt: skip


class _HtmlCheck(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problem: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TELEGRAM_HTML_TAGS:
            self.problem = f'Unsupported start tag "{tag}"'
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.problem = f'Unmatched end tag "{tag}"'


def html_problem(text: str) -> str | None:
    checker = _HtmlCheck()
    checker.feed(text)
    checker.close()
    if checker.problem:
        return checker.problem
    if checker.stack:
        return f'Can\'t find end tag corresponding to start tag "{checker.stack[-1]}"'
    return None


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.time)


class FakeTelegram:
    """The server, its state, and the knobs a test turns."""

    def __init__(self, token: str, *, can_read_all_group_messages: bool = False) -> None:
        self.token = token
        self.can_read_all = can_read_all_group_messages
        self.calls: list[Call] = []
        self.updates: list[dict[str, Any]] = []
        self.confirmed = 0  # updates below this id are confirmed (offset passed)
        self.update_ids = itertools.count(1000)
        self.message_ids = itertools.count(1)
        self.files: dict[str, bytes] = {}
        self.migrated: dict[int, int] = {}  # old chat id -> new (sending there fails)
        self.fail_next: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.reject_entities = 0  # the next N HTML messages are refused as bad entities
        self.polls_served = 0
        self.served: set[int] = set()  # update ids a getUpdates has returned
        self.send_event = threading.Event()  # set at each sendMessage that succeeds
        self.last_send = 0.0  # time.perf_counter() of the last one
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.new_update = asyncio.Event()
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
            await self.runner.cleanup()
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    # what the test does

    def push(self, update: dict[str, Any]) -> int:
        """Queue an update for getUpdates; returns its update_id."""
        with self.lock:
            update_id = next(self.update_ids)
            self.updates.append({"update_id": update_id, **update})
        self.loop.call_soon_threadsafe(self.new_update.set)
        return update_id

    def message(
        self,
        chat: dict[str, Any],
        user_id: int,
        text: str | None = None,
        *,
        first_name: str = "Ann",
        thread: int | None = None,
        reply_to_bot: bool = False,
        entities: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A ``message`` update's message in the real shape."""
        message: dict[str, Any] = {
            "message_id": next(self.message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name},
        }
        if text is not None:
            message["text"] = text
        if entities:
            message["entities"] = entities
        if thread is not None:
            message["message_thread_id"] = thread
            message["is_topic_message"] = True
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": next(self.message_ids),
                "date": int(time.time()),
                "chat": chat,
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Helper"},
                "text": "an earlier answer",
            }
        message.update(extra or {})
        return message

    def say(self, chat: dict[str, Any], user_id: int, text: str | None, **kw: Any) -> int:
        """Push a message update; returns its message's message_id."""
        message = self.message(chat, user_id, text, **kw)
        self.push({"message": message})
        return int(message["message_id"])

    def add_file(self, file_id: str, data: bytes) -> None:
        self.files[file_id] = data

    def fail(self, method: str, status: int, body: dict[str, Any]) -> None:
        """The next call of ``method`` gets this answer instead."""
        self.fail_next.setdefault(method, []).append((status, body))

    def sent(self, chat: int | None = None) -> list[Call]:
        with self.lock:
            return [
                c
                for c in self.calls
                if c.method == "sendMessage" and (chat is None or int(c.params["chat_id"]) == chat)
            ]

    def calls_of(self, method: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method]

    # the server

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._method)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        return app

    async def _params(self, request: web.Request) -> dict[str, Any]:
        """Parameters as the Bot API takes them: query string, form fields (each value a
        string, JSON for objects), or a JSON body."""
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST":
            if request.content_type == "application/json":
                params.update(await request.json())
            else:
                form = await request.post()
                for key, value in form.items():
                    params[key] = (
                        value
                        if isinstance(value, str)
                        else Upload(value.filename, value.content_type, value.file.read())
                    )
        for key in ("reply_parameters", "allowed_updates", "entities", "link_preview_options"):
            if isinstance(params.get(key), str):
                params[key] = json.loads(params[key])
        return params

    @staticmethod
    def _error(status: int, description: str, **extra: Any) -> web.Response:
        body = {"ok": False, "error_code": status, "description": description}
        if extra:
            body["parameters"] = extra
        return web.json_response(body, status=status)

    async def _method(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return self._error(401, "Unauthorized")
        # method names are case-insensitive in the Bot API ("All methods in the Bot API
        # are case-insensitive"): the spelling this fake knows is used from here on
        asked = request.match_info["method"]
        method = {m.lower(): m for m in METHODS}.get(asked.lower(), asked)
        params = await self._params(request)
        with self.lock:
            self.calls.append(Call(method, params))
        if method not in METHODS:
            return self._error(404, "Not Found")
        required, optional = METHODS[method]
        missing = required - set(params)
        if missing:
            return self._error(400, f"Bad Request: {sorted(missing)[0]} is empty")
        unknown = set(params) - required - optional
        if unknown:
            return self._error(400, f"Bad Request: unexpected parameter {sorted(unknown)[0]}")
        queued = self.fail_next.get(method)
        if queued:
            status, body = queued.pop(0)
            return web.json_response(body, status=status)
        handler = getattr(self, f"_m_{method}")
        result = await handler(params)
        if isinstance(result, web.Response):
            return result
        return web.json_response({"ok": True, "result": result})

    async def _m_getMe(self, params: dict[str, Any]) -> Any:
        return {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "Helper",
            "username": BOT_USERNAME,
            "can_join_groups": True,
            "can_read_all_group_messages": self.can_read_all,
            "supports_inline_queries": False,
        }

    async def _m_close(self, params: dict[str, Any]) -> Any:
        return True

    async def _m_logOut(self, params: dict[str, Any]) -> Any:
        return True

    async def _m_getUpdates(self, params: dict[str, Any]) -> Any:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        allowed = params.get("allowed_updates")
        if allowed is not None and not isinstance(allowed, list):
            return self._error(400, "Bad Request: allowed_updates must be an array")
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if offset:
                    self.confirmed = max(self.confirmed, offset)
                ready = [u for u in self.updates if u["update_id"] >= self.confirmed]
                self.new_update.clear()
            if ready or time.monotonic() >= deadline:
                self.polls_served += 1
                self.served.update(u["update_id"] for u in ready)
                return ready[: int(params.get("limit") or 100)]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.new_update.wait(), deadline - time.monotonic())

    async def _m_sendMessage(self, params: dict[str, Any]) -> Any:
        chat_id = int(params["chat_id"])
        if chat_id in self.migrated:
            return self._error(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                migrate_to_chat_id=self.migrated[chat_id],
            )
        text = str(params["text"])
        if not text.strip():
            return self._error(400, "Bad Request: message text is empty")
        mode = params.get("parse_mode")
        if mode not in (None, "HTML", "MarkdownV2", "Markdown"):
            return self._error(400, f"Bad Request: unsupported parse_mode {mode}")
        visible = text
        if mode == "HTML":
            if self.reject_entities:
                self.reject_entities -= 1
                return self._error(
                    400,
                    "Bad Request: can't parse entities: Can't find end of the entity "
                    "starting at byte offset 12",
                )
            problem = html_problem(text)
            if problem:
                return self._error(400, f"Bad Request: can't parse entities: {problem}")
            parser = _Visible()
            parser.feed(text)
            visible = "".join(parser.text)
        if utf16_len(visible) > 4096:
            return self._error(400, "Bad Request: message is too long")
        reply = params.get("reply_parameters")
        if reply is not None and not isinstance(reply, dict):
            return self._error(400, "Bad Request: reply_parameters must be an object")
        message: dict[str, Any] = {
            "message_id": next(self.message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Helper"},
            "text": visible,
        }
        if params.get("message_thread_id"):
            message["message_thread_id"] = int(params["message_thread_id"])
        self.last_send = time.perf_counter()
        self.send_event.set()
        return message

    async def _send_file(self, params: dict[str, Any], field: str, cap: int) -> Any:
        """sendPhoto, sendDocument, sendVoice: the file is a multipart upload (a new
        file, not an id), within the Bot API's size limit; the caption within 1024."""
        upload = params[field]
        if not isinstance(upload, Upload):
            return self._error(400, f"Bad Request: {field} must be a file upload here")
        if len(upload.data) > cap:
            return self._error(413, "Request Entity Too Large")
        caption = params.get("caption")
        if caption is not None and utf16_len(str(caption)) > 1024:
            return self._error(400, "Bad Request: message caption is too long")
        chat_id = int(params["chat_id"])
        described = {"file_id": f"f{len(self.calls)}", "file_unique_id": f"u{len(self.calls)}",
                     "file_size": len(upload.data)}  # fmt: skip
        message: dict[str, Any] = {
            "message_id": next(self.message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Helper"},
        }
        if field == "photo":
            message["photo"] = [{**described, "width": 100, "height": 100}]
        elif field == "voice":
            message["voice"] = {**described, "duration": 1, "mime_type": upload.content_type}
        else:
            message["document"] = {**described, "file_name": upload.filename,
                                   "mime_type": upload.content_type}  # fmt: skip
        if caption:
            message["caption"] = caption
        self.send_event.set()
        return message

    async def _m_sendPhoto(self, params: dict[str, Any]) -> Any:
        return await self._send_file(params, "photo", 10 * 1024**2)

    async def _m_sendDocument(self, params: dict[str, Any]) -> Any:
        return await self._send_file(params, "document", 50 * 1024**2)

    async def _m_sendVoice(self, params: dict[str, Any]) -> Any:
        return await self._send_file(params, "voice", 50 * 1024**2)

    async def _m_sendChatAction(self, params: dict[str, Any]) -> Any:
        if params["action"] not in ("typing", "upload_photo", "upload_document"):
            return self._error(400, "Bad Request: wrong parameter action in request")
        return True

    async def _m_getFile(self, params: dict[str, Any]) -> Any:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            return self._error(400, "Bad Request: invalid file_id")
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(self.files[file_id]),
            "file_path": f"documents/{file_id}.bin",
        }

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return self._error(401, "Unauthorized")
        path = request.match_info["path"]
        with self.lock:
            self.calls.append(Call("file", {"path": path}))
        file_id = path.rsplit("/", 1)[-1].removesuffix(".bin")
        if file_id not in self.files:
            return self._error(404, "Not Found")
        return web.Response(body=self.files[file_id])


@dataclass(frozen=True)
class Upload:
    """A file sent as a multipart part."""

    filename: str
    content_type: str
    data: bytes


class _Visible(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []

    def handle_data(self, data: str) -> None:
        self.text.append(data)
