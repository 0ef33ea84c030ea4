"""The HTTP API, on loopback by default, with a bearer token (compared in constant time).

    POST /v1/groups/{name}/messages   {"text", "sender", "chat"?, "thread"?} -> 202 {"id", ...}
    GET  /v1/messages/{id}[?wait=S]    state and replies; with wait, a long poll until done
    GET  /v1/groups                    the groups
    GET  /healthz                      liveness, no token needed

Bad input gets a 4xx with a JSON body {"error": ...}; nothing is queued.
Enabled when a token is configured (orchestrator.yaml http.token or
ORCHESTRATOR_HTTP_TOKEN).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from orchestrator.channels.base import Channel
from orchestrator.errors import BadInput, GroupNotFound, OrchestratorError, SenderRefused
from orchestrator.limits import HTTP_BODY_MAX_BYTES, HTTP_LONG_POLL_MAX_SECONDS

log = logging.getLogger("orchestrator.channels.http")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class HttpChannel(Channel):
    name = "http"

    @classmethod
    def enabled(cls, daemon: Any) -> bool:
        return bool(daemon.config.http_token)

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=HTTP_BODY_MAX_BYTES, middlewares=[self._errors, self._auth]
        )
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/v1/groups", self.groups)
        app.router.add_post("/v1/groups/{name}/messages", self.post_message)
        app.router.add_get("/v1/messages/{id}", self.get_message)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"request body over {HTTP_BODY_MAX_BYTES} bytes")
        except web.HTTPException as exc:
            if exc.status >= 400:
                return _error(exc.status, exc.reason)
            raise

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/healthz":
            return await handler(request)
        given = request.headers.get("Authorization", "")
        expected = f"Bearer {self.daemon.config.http_token}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            return _error(401, "missing or wrong bearer token")
        return await handler(request)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "accepting": self.daemon.accepting})

    async def groups(self, request: web.Request) -> web.Response:
        groups = await asyncio.to_thread(self.daemon.runtime.store.groups)
        return web.json_response([{"folder": g.folder, "name": g.config.name} for g in groups])

    async def post_message(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        text, sender = body.get("text"), body.get("sender")
        if not isinstance(text, str) or not isinstance(sender, str):
            return _error(400, "text and sender are required strings")
        chat = body.get("chat", sender)
        thread = body.get("thread")
        if not isinstance(chat, str) or (thread is not None and not isinstance(thread, str)):
            return _error(400, "chat and thread must be strings")
        try:
            message = await asyncio.to_thread(
                self.daemon.submit,
                request.match_info["name"],
                text,
                chat=chat,
                sender=sender,
                thread=thread,
                channel=self.name,
            )
        except GroupNotFound as exc:
            return _error(404, exc.message)
        except SenderRefused as exc:
            return _error(403, exc.message)
        except BadInput as exc:
            return _error(400, exc.message)
        except OrchestratorError as exc:
            return _error(503, exc.message)
        return web.json_response({"id": message.id, "state": message.state}, status=202)

    async def get_message(self, request: web.Request) -> web.Response:
        message_id = request.match_info["id"]
        try:
            wait = min(float(request.query.get("wait", "0")), HTTP_LONG_POLL_MAX_SECONDS)
        except ValueError:
            return _error(400, "wait must be a number of seconds")
        if wait > 0:
            message = await asyncio.to_thread(self.daemon.wait, message_id, wait)
        else:
            message = await asyncio.to_thread(self.daemon.queue.get, message_id)
        if message is None:
            return _error(404, f"no message {message_id!r}")
        return web.json_response(message.to_dict())

    def start(self) -> None:
        host, _, port = (self.daemon.config.http_listen or "").rpartition(":")
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(self.app(), access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, host or "127.0.0.1", int(port))
        self.loop.run_until_complete(site.start())
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="http-channel", daemon=True
        )
        self.thread.start()
        log.info("HTTP API listening on %s", self.daemon.config.http_listen)

    def stop(self) -> None:
        future = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        try:
            future.result(timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
