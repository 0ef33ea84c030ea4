"""A fake Matrix homeserver on loopback for tests that need every request exactly: it
records each one (method, path as sent, query, JSON body or bytes, headers) and answers
the client-server API calls the adapter makes in their real shapes; a test queues other
answers. (tests/homeserver.py runs a real Synapse, for tests of the behaviour end to end.)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Request:
    method: str
    path: str  # as sent, percent-encoded
    query: dict[str, str]
    body: Any  # the JSON sent, or the bytes when not JSON
    headers: dict[str, str] = field(default_factory=dict)


class FakeHomeserver:
    def __init__(self, user_id: str, token: str) -> None:
        self.user_id = user_id
        self.token = token
        self.requests: list[Request] = []
        self.answers: list[tuple[str, str, int, Any]] = []  # (method, path regex, status, body)
        self.syncs: list[dict[str, Any]] = []  # answers of the next /sync calls, in order
        self.media: dict[str, bytes] = {}  # "server/media_id" -> bytes
        self.chunked: set[str] = set()  # media sent without a Content-Length
        self.events = itertools.count(1)
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", self._serve)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result(10)
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result(10)
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    def answer(self, method: str, path: str, status: int, body: Any) -> None:
        """The next request of ``method`` whose path matches the regex ``path`` gets this."""
        with self.lock:
            self.answers.append((method, path, status, body))

    def of(self, method: str, path: str) -> list[Request]:
        """The requests of ``method`` whose path matches the regex ``path``."""
        with self.lock:
            return [r for r in self.requests if r.method == method and re.search(path, r.path)]

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        path = request.raw_path.split("?", 1)[0]
        seen = Request(request.method, path, dict(request.query), body, dict(request.headers))
        with self.lock:
            self.requests.append(seen)
            for index, (method, pattern, status, answer) in enumerate(self.answers):
                if method == request.method and re.search(pattern, path):
                    del self.answers[index]
                    return web.json_response(answer, status=status)
        if request.headers.get("Authorization") != f"Bearer {self.token}" and (
            request.query.get("access_token") != self.token
        ):
            return web.json_response(
                {"errcode": "M_UNKNOWN_TOKEN", "error": "Invalid access token passed."}, status=401
            )
        return await self._default(request, path)

    async def _default(self, request: web.Request, path: str) -> web.StreamResponse:
        client = "/_matrix/client/v3"
        if path == f"{client}/account/whoami":
            return web.json_response({"user_id": self.user_id, "device_id": "FAKEDEVICE"})
        if path == f"{client}/sync":
            with self.lock:
                answer = self.syncs.pop(0) if self.syncs else None
            if answer is None:
                await asyncio.sleep(0.05)
                answer = {"next_batch": request.query.get("since") or "s0"}
            return web.json_response(answer)
        if request.method == "POST" and path.startswith(f"{client}/join/"):
            return web.json_response({"room_id": path.rsplit("/", 1)[1]})
        if request.method == "PUT" and "/send/" in path:
            return web.json_response({"event_id": f"$event{next(self.events)}"})
        if path.startswith("/_matrix/media/v3/upload"):
            return web.json_response({"content_uri": f"mxc://fake.example/up{next(self.events)}"})
        if path.startswith("/_matrix/client/v1/media/download/"):
            key = path[len("/_matrix/client/v1/media/download/") :]
            if key not in self.media:
                return web.json_response({"errcode": "M_NOT_FOUND"}, status=404)
            data = self.media[key]
            if key not in self.chunked:
                return web.Response(body=data)
            response = web.StreamResponse()
            response.enable_chunked_encoding()
            await response.prepare(request)
            for at in range(0, len(data), 1000):
                await response.write(data[at : at + 1000])
            await response.write_eof()
            return response
        return web.json_response({})
