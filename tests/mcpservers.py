"""MCP servers for the tests, on the official SDK: ``stdio`` (a hostile one: tools
that echo, hang, crash, flood, or a listing of many tools) and ``http`` (a server on
loopback over streamable HTTP that answers only a bearer token).

    python -m tests.mcpservers stdio [--tools N]
    python -m tests.mcpservers http PORT TOKEN
    python -m tests.mcpservers sse PORT TOKEN      (the older SSE transport)
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from mcp.server.mcpserver import MCPServer


def stdio_server(tools: int) -> MCPServer:
    server: MCPServer = MCPServer("hostile")

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return f"echo: {text}"

    @server.tool()
    def hang() -> str:
        """Never answer."""
        time.sleep(3600)
        return "late"

    @server.tool()
    def crash() -> str:
        """Exit at once."""
        os._exit(3)

    @server.tool()
    def flood() -> str:
        """Answer five million characters."""
        return "x" * 5_000_000

    @server.tool()
    def secret() -> str:
        """A tool nobody approved."""
        return "the secret"

    @server.tool()
    def pid() -> str:
        """This server's process id."""
        return str(os.getpid())

    for n in range(tools):
        server.add_tool(lambda: "ok", name=f"extra_{n}", description=f"extra tool {n}")
    return server


def http_app(token: str, transport: str = "http") -> Any:
    server: MCPServer = MCPServer("tracker")

    @server.tool()
    def find(q: str) -> str:
        """Find issues about q."""
        return f"issue 7: {q} is broken"

    app = server.sse_app() if transport == "sse" else server.streamable_http_app()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"bad token"})
                return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    if sys.argv[1] == "stdio":
        tools = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--tools" else 0
        print("hostile server starting", file=sys.stderr)
        stdio_server(tools).run("stdio")
    else:
        import uvicorn

        port, token = int(sys.argv[2]), sys.argv[3]
        transport = "sse" if sys.argv[1] == "sse" else "http"
        uvicorn.run(http_app(token, transport), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
