"""The shell's egress gate: an HTTP proxy on the host, one Unix socket per group with
the web enabled, in a host-owned folder mounted read-only into the group's container
(``state/egress/<folder>/proxy.sock``; a forwarder in the container puts it on
127.0.0.1 for the shell's ``HTTP_PROXY``/``HTTPS_PROXY``).

CONNECT carries HTTPS (no TLS interception) and plain requests carry HTTP, both to
destinations the group's ``allow`` list names (an empty list reaches nothing), through
the same guard as ``web_fetch``: the name resolved once here, the address checked and
connected to. The gate accepts connections only while a turn of the group whose trust
allows the web runs, and closes them all when the last such turn ends: processes the
shell leaves behind, and MCP servers, outlive a turn; its trust must not. At most
EGRESS_CONNECTIONS_MAX connections per group at once; every one is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.limits import EGRESS_CONNECTIONS_MAX, EGRESS_HEAD_MAX_BYTES
from orchestrator.web.fetch import Connector, tcp_connector
from orchestrator.web.guard import Refused, Resolver, Rules, check, system_resolver

log = logging.getLogger("orchestrator.egress")
SOCKET_NAME = "proxy.sock"
HEAD_TIMEOUT_SECONDS = 10
# A connection past the bound is refused after its head (or this long): a client that is
# still writing its request when the gate closes gets a broken pipe, not the 429
OVER_BOUND_HEAD_SECONDS = 1
HOP_HEADERS = ("proxy-connection", "proxy-authorization", "connection", "keep-alive")


@dataclass
class _Group:
    folder: str
    rules: Rules
    server: asyncio.AbstractServer | None = None
    turns: int = 0  # turns running that allow the web
    connections: set[asyncio.StreamWriter] = field(default_factory=set)  # the shell's side
    upstreams: set[asyncio.StreamWriter] = field(default_factory=set)  # the far side
    opened: int = 0  # connections made, for the log
    refused: int = 0


class Gate:
    """The gate's event loop (a thread of the daemon) and each group's socket."""

    def __init__(
        self,
        root: Path,
        *,
        resolver: Resolver = system_resolver,
        connector: Connector = tcp_connector,
        max_connections: int = EGRESS_CONNECTIONS_MAX,
    ) -> None:
        self.root = root  # state/egress
        self.resolver, self.connector = resolver, connector
        self.max_connections = max_connections
        self.groups: dict[str, _Group] = {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="egress", daemon=True)
        self.thread.start()
        self.lock = threading.Lock()

    def socket_path(self, folder: str) -> Path:
        return self.root / folder / SOCKET_NAME

    def _call(self, make: Callable[[], object], timeout: float = 10) -> object:
        async def run() -> object:
            result = make()
            if asyncio.iscoroutine(result):
                return await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def serve(self, folder: str, rules: Rules) -> None:
        """Serve ``folder``'s socket under ``rules`` (the rules replaced if it is served)."""
        with self.lock:
            known = self.groups.get(folder)
            if known is not None and known.server is not None:
                known.rules = rules
                return
            group = known or _Group(folder, rules)
            group.rules = rules
            self.groups[folder] = group
        path = self.socket_path(folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o755)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

        async def start() -> asyncio.AbstractServer:
            return await asyncio.start_unix_server(
                lambda r, w: self._handle(group, r, w), path=str(path)
            )

        group.server = self._call(start)  # type: ignore[assignment]
        os.chmod(path, 0o666)  # the container's user connects; the folder is read-only to it
        log.info("egress gate of %s listening at %s", folder, path)

    def stop(self, folder: str) -> None:
        with self.lock:
            group = self.groups.pop(folder, None)
        if group is None:
            return

        async def close() -> None:
            if group.server is not None:
                group.server.close()
            for writer in [*group.connections, *group.upstreams]:
                writer.close()

        self._call(close)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path(folder).unlink()

    def served(self) -> list[str]:
        with self.lock:
            return sorted(self.groups)

    def turn_started(self, folder: str, allowed: bool) -> Callable[[], None]:
        """Note a turn of ``folder`` (one whose trust allows the web when ``allowed``);
        the function returned ends it."""
        group = self.groups.get(folder)
        if group is None or not allowed:
            return lambda: None

        def start() -> None:
            group.turns += 1

        self._call(start)
        ended = threading.Event()

        def end() -> None:
            if ended.is_set():
                return
            ended.set()

            def finish() -> None:
                group.turns -= 1
                if group.turns <= 0:
                    group.turns = 0
                    for writer in [*group.connections, *group.upstreams]:
                        writer.close()  # the turn's trust ends with it

            self._call(finish)

        return end

    def close(self) -> None:
        for folder in self.served():
            self.stop(folder)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()

    # one connection

    async def _handle(
        self, group: _Group, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            await self._serve_one(group, reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except Exception:
            log.exception("egress gate of %s: a connection failed", group.folder)
        finally:
            group.connections.discard(writer)
            writer.close()

    async def _serve_one(
        self, group: _Group, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if len(group.connections) >= self.max_connections:
            with contextlib.suppress(
                TimeoutError, asyncio.LimitOverrunError, OSError, asyncio.IncompleteReadError
            ):
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), OVER_BOUND_HEAD_SECONDS)
            return await _refuse(
                writer, 429, f"too many connections (at most {self.max_connections} at once)"
            )
        group.connections.add(writer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
        except (TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):
            return await _refuse(writer, 400, "a proxy request head, please")
        if len(head) > EGRESS_HEAD_MAX_BYTES:
            return await _refuse(writer, 431, "the request head is too large")
        if group.turns <= 0:  # answered once the head is in: a client reads a clean refusal
            group.refused += 1
            return await _refuse(writer, 403, "no turn that may use the web is running")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            return await _refuse(writer, 400, "not an HTTP request line")
        method, target, version = parts
        url = f"https://{target}/" if method == "CONNECT" else target
        loop = asyncio.get_running_loop()
        try:
            checked = await loop.run_in_executor(None, check, url, group.rules, self.resolver)
            if method != "CONNECT" and checked.scheme != "http":
                raise Refused("use CONNECT for https")
        except Refused as exc:
            group.refused += 1
            log.info("egress gate of %s: %s %s refused: %s", group.folder, method,
                     target[:200], exc)  # fmt: skip
            return await _refuse(writer, 403, str(exc))
        try:
            sock = await loop.run_in_executor(
                None, self.connector, checked.address, checked.port, 10.0
            )
            sock.setblocking(False)
            up_reader, up_writer = await asyncio.open_connection(sock=sock)
        except OSError as exc:
            return await _refuse(writer, 502, f"{checked.host}: {exc}")
        group.opened += 1
        log.info("egress gate of %s: %s %s:%d (%s)", group.folder, method, checked.host,
                 checked.port, checked.address)  # fmt: skip
        group.upstreams.add(up_writer)
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                kept = [
                    line for line in lines[1:]
                    if line and line.split(":", 1)[0].strip().lower() not in HOP_HEADERS
                ]  # fmt: skip
                first = f"{method} {checked.path} {version}"
                up_writer.write(
                    ("\r\n".join([first, *kept, "Connection: close"]) + "\r\n\r\n").encode(
                        "latin-1"
                    )
                )
                await up_writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            group.upstreams.discard(up_writer)
            up_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(64 * 1024):
            writer.write(chunk)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()


async def _refuse(writer: asyncio.StreamWriter, status: int, why: str) -> None:
    body = f"orchestrator egress gate: {why}\n".encode()
    writer.write(
        f"HTTP/1.1 {status} Refused\r\nContent-Type: text/plain\r\nContent-Length: "
        f"{len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()
