"""Fake model provider servers on loopback for the relay's tests.

Each checks the exact request the real API expects (path, auth headers, model, messages,
tool schema, stream flag) and answers in the real response shapes, streamed (server-sent
events) or not, from a script: text, tool calls (arguments split across chunks), HTTP
errors (429 with Retry-After, 5xx), malformed bodies, and streams cut midway. A request
that does not look like the real API gets a 400 naming the problem, so the adapter's
error shows what was wrong.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web


class QuietStream:
    """A stream as an SDK reads it, for the adapters' read loops: it sends ``chunks``, then
    goes quiet until it is closed (as an SDK stream's read ends when its response is
    closed) and fails; AssertionError when nobody closes it within a minute."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks
        self.closed = threading.Event()

    def __iter__(self) -> Any:
        yield from self.chunks
        if not self.closed.wait(60):
            raise AssertionError("never closed")
        raise OSError("the response was closed")

    def close(self) -> None:
        self.closed.set()


@dataclass
class Text:
    text: str
    input_tokens: int = 11  # the prompt less its cached part
    output_tokens: int = 7
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0  # Anthropic's cache_creation_input_tokens


@dataclass
class ToolUse:
    name: str
    arguments: dict[str, Any]
    text: str | None = None  # text before the call
    call_id: str = "call_1"
    pieces: int = 3  # the arguments' JSON arrives in this many chunks


@dataclass
class Error:
    status: int
    message: str = "something went wrong"
    retry_after: str | None = None


@dataclass
class Malformed:
    """A 200 answer whose body is not what the API sends."""


@dataclass
class Cut:
    """A stream that ends midway, without its closing event."""

    text: str = "partial answ"


@dataclass
class Recorded:
    """A real server's recorded answer (tests/data/<server>/<name>.json or .sse with its
    .request.json beside it), replayed as it was: its status and body, or its stream of
    server-sent events, ``delay`` seconds between two of them."""

    server: str  # a folder of tests/data: llamacpp, llama-cpp-python
    name: str
    stream: bool = False
    delay: float = 0.0

    def files(self) -> tuple[dict[str, Any], bytes]:
        from pathlib import Path

        folder = Path(__file__).parent / "data" / self.server
        meta = json.loads((folder / f"{self.name}.request.json").read_text())
        body = (folder / f"{self.name}.{'sse' if self.stream else 'json'}").read_bytes()
        return meta, body


@dataclass
class Linger(Text):
    """A streamed text answer whose body does not end after its last event ([DONE])
    until ``release`` is set: a server that keeps the stream open."""

    release: threading.Event = field(default_factory=threading.Event)


@dataclass
class Hold:
    """A request that is answered (with ``then``) only once ``release`` is set; ``reached``
    is set when it arrives. A turn waiting on it is in flight for as long as the test
    wants (to stop a daemon under it)."""

    then: Step = field(default_factory=lambda: Text("ok"))
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


Step = Text | ToolUse | Error | Malformed | Cut | Recorded | Hold


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    peer: object = None  # the client's address and port: one per connection


@dataclass
class FakeProvider:
    kind: str  # "anthropic" | "openai"
    key: str | None = None
    script: deque[Step] = field(default_factory=deque)
    seen: list[Seen] = field(default_factory=list)
    default: Step = field(default_factory=lambda: Text("ok"))

    def __post_init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(self.app())
        self.loop.run_until_complete(self.runner.setup())
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.loop.run_until_complete(web.SockSite(self.runner, sock).start())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        root = f"http://127.0.0.1:{self.port}"
        return root if self.kind == "anthropic" else root + "/v1"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)  # real APIs take large contexts
        app.router.add_post("/v1/messages", self.anthropic)
        app.router.add_post("/v1/chat/completions", self.openai)
        app.router.add_post("/v1/audio/transcriptions", self.transcriptions)
        return app

    async def transcriptions(self, request: web.Request) -> web.Response:
        """OpenAI's ``POST /v1/audio/transcriptions``: multipart/form-data with ``file``
        (a file part: name and type) and ``model`` required; ``language``, ``prompt``,
        ``response_format`` (json, text, srt, verbose_json, vtt) and ``temperature``
        optional; the answer ``{"text": ...}`` (json). Anything else is a 400 in the
        API's error shape."""
        expected = f"Bearer {self.key}" if self.key else None
        if expected and request.headers.get("Authorization") != expected:
            return web.json_response(
                {"error": {"message": "Incorrect API key provided", "type":
                           "invalid_request_error", "param": None, "code": "invalid_api_key"}},
                status=401,
            )  # fmt: skip
        if not request.content_type.startswith("multipart/form-data"):
            return _problem(f"expected multipart/form-data, got {request.content_type}")
        fields: dict[str, Any] = {}
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            assert isinstance(part, BodyPartReader)
            if part.name == "file":
                if not part.filename:
                    return _problem("the file part has no filename")
                fields["file"] = (
                    part.filename,
                    part.headers.get("Content-Type"),
                    await part.read(),
                )
            elif part.name in ("model", "language", "prompt", "response_format", "temperature"):
                fields[str(part.name)] = await part.text()
            else:
                return _problem(f"unknown field {part.name!r}")
        self.seen.append(Seen(request.path, dict(request.headers), {
            k: v if k != "file" else {"filename": v[0], "type": v[1], "size": len(v[2])}
            for k, v in fields.items()
        }))  # fmt: skip
        if "file" not in fields or "model" not in fields:
            return _problem("file and model are required")
        if fields.get("response_format", "json") != "json":
            return _problem("this fake answers response_format json only")
        step = self.script.popleft() if self.script else self.default
        if isinstance(step, Error):
            return _error(step, {})
        text = step.text if isinstance(step, Text) else ""
        return web.json_response({"text": text, "usage": {"type": "duration", "seconds": 1}})

    # checking requests

    async def _take(self, request: web.Request) -> tuple[dict[str, Any], Step] | web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _problem("the body is not JSON")
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.seen.append(Seen(request.path, dict(request.headers), body, peer))
        problem = self._check(request, body)
        if problem:
            return _problem(problem)
        step = self.script.popleft() if self.script else self.default
        if isinstance(step, Hold):
            step.reached.set()
            await asyncio.get_running_loop().run_in_executor(None, step.release.wait)
            step = step.then
        return body, step

    def _check(self, request: web.Request, body: dict[str, Any]) -> str | None:
        if self.kind == "anthropic":
            if request.path != "/v1/messages":
                return f"wrong path {request.path}"
            given = request.headers.get("x-api-key") or request.headers.get(
                "Authorization", ""
            ).removeprefix("Bearer ")
            if self.key and given != self.key:
                return "missing or wrong key (x-api-key or Authorization: Bearer)"
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", request.headers.get("anthropic-version", "")):
                return "missing anthropic-version"
            if not isinstance(body.get("max_tokens"), int):
                return "max_tokens is required"
            for message in body.get("messages", []):
                if message.get("role") not in ("user", "assistant"):
                    return f"bad role {message.get('role')}"
                if (problem := _anthropic_blocks(message.get("content"))) is not None:
                    return problem
            roles = [m["role"] for m in body.get("messages", [])]
            if any(a == b for a, b in itertools.pairwise(roles)):
                return "roles must alternate"
            for tool in body.get("tools", []):
                if set(tool) != {"name", "description", "input_schema"}:
                    return f"bad tool {tool}"
        else:
            if request.path != "/v1/chat/completions":
                return f"wrong path {request.path}"
            expected = f"Bearer {self.key}" if self.key else None
            if expected and request.headers.get("Authorization") != expected:
                return "missing or wrong bearer token"
            if body.get("messages", [{}])[0].get("role") != "system":
                return "the first message must be the system prompt"
            for message in body.get("messages", []):
                if (problem := _openai_content(message)) is not None:
                    return problem
            for tool in body.get("tools", []):
                if tool.get("type") != "function" or set(tool["function"]) != {
                    "name",
                    "description",
                    "parameters",
                }:
                    return f"bad tool {tool}"
            if body.get("stream") and not body.get("stream_options", {}).get("include_usage"):
                return "stream_options.include_usage is missing"
        if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list):
            return "model and messages are required"
        return None

    # answering

    async def anthropic(self, request: web.Request) -> web.StreamResponse:
        taken = await self._take(request)
        if isinstance(taken, web.Response):
            return taken
        body, step = taken
        if isinstance(step, Recorded):
            return await self._replay(request, step)
        if isinstance(step, Error):
            return _error(step, {"type": "error", "error": {"type": "x", "message": step.message}})
        if isinstance(step, Malformed):
            return web.Response(text="<html>bad gateway</html>", content_type="application/json")
        blocks: list[dict[str, Any]] = []
        text = step.text
        if text:
            blocks.append({"type": "text", "text": text})
        if isinstance(step, ToolUse):
            blocks.append(
                {"type": "tool_use", "id": step.call_id, "name": step.name, "input": step.arguments}
            )
        usage_in = step.input_tokens if isinstance(step, Text) else 13
        usage_out = step.output_tokens if isinstance(step, Text) else 9
        cached = {
            "cache_read_input_tokens": step.cache_read_tokens if isinstance(step, Text) else 0,
            "cache_creation_input_tokens": step.cache_write_tokens if isinstance(step, Text) else 0,
        }
        stop = "tool_use" if isinstance(step, ToolUse) else "end_turn"
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": {"input_tokens": usage_in, "output_tokens": usage_out, **cached},
                }
            )
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "model": body["model"],
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": usage_in, "output_tokens": 1, **cached},
                    },
                },
            )
        ]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                events.append(_event("content_block_start", index, {"type": "text", "text": ""}))
                half = len(block["text"]) // 2
                for piece in (block["text"][:half], block["text"][half:]):
                    events.append(_delta(index, {"type": "text_delta", "text": piece}))
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                events.append(_event("content_block_start", index, start))
                for piece in _pieces(json.dumps(block["input"]), step.pieces):  # type: ignore[union-attr]
                    events.append(
                        _delta(index, {"type": "input_json_delta", "partial_json": piece})
                    )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": usage_out},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        if isinstance(step, Cut):
            events = events[:3]
        return await _sse(request, [f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events])

    async def _replay(self, request: web.Request, step: Recorded) -> web.StreamResponse:
        meta, raw = step.files()
        if meta["status"] != 200 or not step.stream:
            return web.Response(body=raw, status=meta["status"], content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in raw.split(b"\n\n"):
            if not event.strip():
                continue
            await response.write(event + b"\n\n")
            if step.delay:
                await asyncio.sleep(step.delay)
        await response.write_eof()
        return response

    async def openai(self, request: web.Request) -> web.StreamResponse:
        taken = await self._take(request)
        if isinstance(taken, web.Response):
            return taken
        body, step = taken
        if isinstance(step, Recorded):
            return await self._replay(request, step)
        if isinstance(step, Error):
            return _error(step, {"error": {"message": step.message, "type": "x", "code": None}})
        if isinstance(step, Malformed):
            return web.Response(text="<html>bad gateway</html>", content_type="application/json")
        cached = step.cache_read_tokens if isinstance(step, Text) else 0
        usage: dict[str, Any] = {
            "prompt_tokens": (step.input_tokens if isinstance(step, Text) else 13) + cached,
            "completion_tokens": step.output_tokens if isinstance(step, Text) else 9,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        text = step.text
        calls = (
            [
                {
                    "id": step.call_id,
                    "type": "function",
                    "function": {"name": step.name, "arguments": json.dumps(step.arguments)},
                }
            ]
            if isinstance(step, ToolUse)
            else None
        )
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            return web.json_response(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        chunks: list[dict[str, Any]] = []
        if text:
            half = len(text) // 2
            for piece in (text[:half], text[half:]):
                chunks.append({"role": "assistant", "content": piece})
        if isinstance(step, ToolUse):
            arguments = json.dumps(step.arguments)
            chunks.append(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": step.call_id,
                            "type": "function",
                            "function": {"name": step.name, "arguments": ""},
                        }
                    ]
                }
            )
            for piece in _pieces(arguments, step.pieces):
                chunks.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        lines = [
            _chunk(body["model"], {"index": 0, "delta": delta, "finish_reason": None})
            for delta in chunks
        ]
        if isinstance(step, Cut):
            return await _sse(request, lines[:1])
        lines.append(_chunk(body["model"], {"index": 0, "delta": {}, "finish_reason": finish}))
        lines.append(_chunk(body["model"], None, usage))
        lines.append("data: [DONE]\n\n")
        return await _sse(request, lines, step.release if isinstance(step, Linger) else None)


IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _anthropic_blocks(content: Any) -> str | None:
    """What is wrong with a Messages API message's content blocks, or None."""
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return "content must be text or a list of blocks"
    for block in content:
        kind = block.get("type")
        if kind == "image":
            source = block.get("source") or {}
            if source.get("type") != "base64" or source.get("media_type") not in IMAGE_TYPES:
                return f"bad image source {source.get('type')}/{source.get('media_type')}"
            try:
                base64.b64decode(source.get("data", ""), validate=True)
            except ValueError:
                return "an image's data is not base64"
        elif kind == "tool_result" and isinstance(block.get("content"), list):
            if (problem := _anthropic_blocks(block["content"])) is not None:
                return problem
        elif kind not in ("text", "tool_use", "tool_result"):
            return f"unknown block type {kind}"
    return None


def _openai_content(message: dict[str, Any]) -> str | None:
    """What is wrong with a Chat Completions message's content, or None."""
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return None
    if message.get("role") != "user" or not isinstance(content, list):
        return f"a {message.get('role')} message's content must be text"
    for part in content:
        if part.get("type") == "image_url":
            url = (part.get("image_url") or {}).get("url", "")
            match = re.fullmatch(r"data:(image/[a-z]+);base64,([A-Za-z0-9+/=]+)", url)
            if match is None or match[1] not in IMAGE_TYPES:
                return "an image_url must be a data URL of an image, base64"
        elif part.get("type") != "text":
            return f"unknown content part {part.get('type')}"
    return None


def _problem(text: str) -> web.Response:
    return web.json_response({"error": {"type": "invalid_request", "message": text}}, status=400)


def _error(step: Error, body: dict[str, Any]) -> web.Response:
    headers = {"retry-after": step.retry_after} if step.retry_after else {}
    return web.json_response(body, status=step.status, headers=headers)


def _event(kind: str, index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, "index": index, "content_block": block}


def _delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}


def _chunk(model: str, choice: dict[str, Any] | None, usage: Any = None) -> str:
    data: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [choice] if choice else [],
    }
    if usage:
        data["usage"] = usage
    return f"data: {json.dumps(data)}\n\n"


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // max(count, 1)))
    return [text[i : i + size] for i in range(0, len(text), size)]


async def _sse(
    request: web.Request, lines: list[str], linger: threading.Event | None = None
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for line in lines:
        await response.write(line.encode())
    while linger is not None and not linger.is_set():
        await asyncio.sleep(0.05)  # the body stays open
    await response.write_eof()
    return response


def _serve(kind: str, key: str | None, conn: Any) -> None:
    fake = FakeProvider(kind, key)
    conn.send(fake.base_url)
    conn.recv()  # until told to stop
    fake.close()


class FakeProviderProcess:
    """A FakeProvider answering ``default`` in a process of its own (benchmarks: a real
    provider does not share the daemon's interpreter)."""

    def __init__(self, kind: str, key: str | None) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(kind, key, child), daemon=True)
        self.process.start()
        self.base_url: str = self.conn.recv()

    def close(self) -> None:
        self.conn.send("stop")
        self.process.join(10)
        self.conn.close()
