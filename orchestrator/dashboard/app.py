"""The operators' dashboard, served by the daemon's HTTP server under ``/ui/`` when
``http.dashboard: true``.

Login exchanges the operator's token (``http.token``; a bridge's named token cannot log
in) for a session cookie: HttpOnly, SameSite=Strict, path ``/ui/``, Secure when the
request came over TLS (directly or through a proxy that says so), expiring after
DASHBOARD_SESSION_SECONDS. Every form carries the session's CSRF token, and every state
change is a POST that checks it and is logged with the session. Pages are jinja2
templates with autoescape on; everything they show (replies, errors, sender ids, chat
titles, memory) is treated as hostile. Memory files are rendered from Markdown with raw
HTML escaped and unsafe links dropped. The Content-Security-Policy allows only the
dashboard's own script and style; there is no inline script.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from orchestrator.daemon.core import Inbound
from orchestrator.errors import OrchestratorError
from orchestrator.limits import DASHBOARD_SESSION_SECONDS, MEMORY_FILE_READ_MAX_BYTES
from orchestrator.money import day_start, format_money
from orchestrator.units import human_bytes, human_seconds
from orchestrator.validate import NOT_UTF8, escape_not_utf8, shown_name
from orchestrator.versions import RELEASE

log = logging.getLogger("orchestrator.dashboard")
HERE = Path(__file__).parent
COOKIE = "orchestrator_session"
PREFIX = "/ui/"
OPEN_PATHS = ("/ui/login", "/ui/static/")
CHAT = "dashboard"  # the chat the dashboard's chat box talks in ...
CHANNEL = "dashboard"  # ... of its own channel: no other channel's chat of that name
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


@dataclass
class Session:
    id: str
    csrf: str
    expires: float


class Sessions:
    """Sessions in memory: a daemon restart logs everyone out."""

    def __init__(self, ttl: float = DASHBOARD_SESSION_SECONDS) -> None:
        self.ttl = ttl
        self.items: dict[str, Session] = {}

    def create(self, now: float | None = None) -> Session:
        now = time.time() if now is None else now
        self.items = {k: s for k, s in self.items.items() if s.expires > now}
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now + self.ttl)
        self.items[session.id] = session
        return session

    def get(self, session_id: str | None, now: float | None = None) -> Session | None:
        if not session_id:
            return None
        session = self.items.get(session_id)
        if session is None or session.expires <= (time.time() if now is None else now):
            self.items.pop(session_id or "", None)
            return None
        return session

    def drop(self, session_id: str) -> None:
        self.items.pop(session_id, None)


def see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        # a file name that is not UTF-8 (lone surrogates) is shown escaped, never a 500
        finalize=lambda value: escape_not_utf8(value) if isinstance(value, str) else value,
    )
    env.filters["when"] = lambda t: (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(t))) if t else "-"
    )
    env.filters["ago"] = _ago
    env.filters["size"] = _size
    env.filters["duration"] = _duration
    return env


def _ago(t: float | None) -> str:
    if not t:
        return "never"
    return human_seconds(max(0.0, time.time() - float(t))) + " ago"


def _duration(seconds: float) -> str:
    return human_seconds(float(seconds))


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    return human_bytes(int(n))


class Dashboard:
    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        self.sessions = Sessions()
        self.env = _environment()

    # wiring

    def add_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/ui", self.root)
        r.add_get("/ui/", self.groups)
        r.add_get("/ui/login", self.login_form)
        r.add_post("/ui/login", self.login)
        r.add_post("/ui/logout", self.logout)
        r.add_get("/ui/groups/{name}", self.group)
        r.add_post("/ui/groups/{name}/send", self.send)
        r.add_get("/ui/queue", self.queue)
        r.add_post("/ui/queue/{id}/retry", self.retry)
        r.add_get("/ui/usage", self.usage)
        r.add_get("/ui/api/messages/{id}", self.message_json)
        r.add_static("/ui/static/", HERE / "static", show_index=False, follow_symlinks=False)

    @property
    def middlewares(self) -> list[Any]:
        return [self.middleware]

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Security headers on every page; a session for all but login and static
        files; the CSRF token on every POST."""
        if not (request.path.startswith(PREFIX) or request.path == "/ui"):
            return await handler(request)
        # /ui only sends the browser on to /ui/: the session cookie's path is /ui/, so
        # a browser does not send it to /ui, and asking for one there would loop a
        # signed-in operator through the login page
        open_path = request.path.startswith(OPEN_PATHS) or request.path == "/ui"
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is None and not open_path:
            if request.method == "GET" and not request.path.startswith("/ui/api/"):
                return self._headers(see_other("/ui/login"))
            return self._headers(web.Response(status=401, text="log in first"))
        if request.method == "POST" and session is not None and request.path != "/ui/login":
            form = await request.post()
            given = str(form.get("csrf", ""))
            if not hmac.compare_digest(given.encode(), session.csrf.encode()):
                log.warning("dashboard: a POST to %s without its CSRF token refused", request.path)
                return self._headers(web.Response(status=403, text="missing or wrong CSRF token"))
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self._set_headers(exc.headers)
            raise
        return self._headers(response)

    @staticmethod
    def _set_headers(headers: Any) -> None:
        headers["Content-Security-Policy"] = CSP
        headers["X-Content-Type-Options"] = "nosniff"
        headers["X-Frame-Options"] = "DENY"
        headers["Referrer-Policy"] = "no-referrer"
        headers["Cache-Control"] = "no-store"

    def _headers(self, response: web.StreamResponse) -> web.StreamResponse:
        self._set_headers(response.headers)
        return response

    def session_of(self, request: web.Request) -> Session:
        """The request's session (the middleware let the request through only with one)."""
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            raise web.HTTPUnauthorized(text="log in first")
        return session

    def page(self, request: web.Request, template: str, **values: Any) -> web.Response:
        session = self.sessions.get(request.cookies.get(COOKIE))
        body = self.env.get_template(template).render(
            csrf=session.csrf if session else "",
            logged_in=session is not None,
            release=RELEASE,
            **values,
        )
        return web.Response(text=body, content_type="text/html", charset="utf-8")

    async def root(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui/")

    # login

    async def login_form(self, request: web.Request) -> web.Response:
        return self.page(request, "login.html", error=None)

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        given = str(form.get("token", ""))
        expected = self.daemon.config.http_token
        if not expected or not hmac.compare_digest(given.encode(), str(expected).encode()):
            log.warning("dashboard: a login with a wrong token from %s", request.remote)
            response = self.page(request, "login.html", error="That is not the operator's token.")
            response.set_status(401)
            return response
        session = self.sessions.create()
        log.info("dashboard: session %s… logged in from %s", session.id[:8], request.remote)
        response = see_other("/ui/")
        secure = request.secure or request.headers.get("X-Forwarded-Proto", "") == "https"
        response.set_cookie(
            COOKIE,
            session.id,
            path=PREFIX,
            httponly=True,
            samesite="Strict",
            secure=secure,
            max_age=int(self.sessions.ttl),
        )
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        session = self.session_of(request)
        self.sessions.drop(session.id)
        log.info("dashboard: session %s… logged out", session.id[:8])
        response = see_other("/ui/login")
        response.del_cookie(COOKIE, path=PREFIX)
        return response

    # pages

    async def groups(self, request: web.Request) -> web.Response:
        rows = await asyncio.to_thread(self._groups)
        return self.page(request, "groups.html", **rows)

    def _groups(self) -> dict[str, Any]:
        runtime = self.daemon.runtime
        status = {row.folder: row for row in runtime.status()}
        counts = self.daemon.queue.counts_by_group()
        bindings: dict[str, list[Any]] = {}
        for binding in self.daemon.chats.bindings():
            bindings.setdefault(binding.group, []).append(binding)
        groups, invalid = [], []
        pauses: dict[str, list[Any]] = {}
        for lease in self.daemon.queue.pauses():
            pauses.setdefault(lease.group, []).append(lease)
        zones = {g.folder: g.config.timezone for g in runtime.store.groups()}
        now = time.time()
        costs = self.daemon.relay.usage.priced_since(
            {f: day_start(now, z) for f, z in zones.items()}
        )
        currency = self.daemon.config.currency
        for item in runtime.store.listing():
            if item.group is None:
                invalid.append(item)
                continue
            groups.append(
                {
                    "folder": item.folder,
                    "name": item.group.config.name,
                    "provider": item.group.config.provider,
                    "model": item.group.config.model,
                    "status": status.get(item.folder),
                    "queued": counts.get(item.folder, {}).get("queued", 0)
                    + counts.get(item.folder, {}).get("inflight", 0),
                    "dead": counts.get(item.folder, {}).get("dead", 0),
                    "bindings": bindings.get(item.folder, []),
                    "pauses": pauses.get(item.folder, []),
                    "cost_today": format_money(costs.get(item.folder), currency),
                }
            )
        return {"groups": groups, "invalid": invalid}

    async def group(self, request: web.Request) -> web.Response:
        try:
            data = await asyncio.to_thread(
                self._group, request.match_info["name"], request.query.get("file")
            )
        except OrchestratorError as exc:
            raise web.HTTPNotFound(text=exc.message) from None
        return self.page(request, "group.html", **data)

    def _group(self, name: str, selected: str | None) -> dict[str, Any]:
        import yaml

        from orchestrator.agent.notes import reported
        from orchestrator.confined import ConfinedDir, UnsafePath
        from orchestrator.memory.history import open_history
        from orchestrator.memory.lint import lint_memory
        from orchestrator.memory.search import context_report

        store = self.daemon.runtime.store
        group = store.find(name)
        files: list[dict[str, Any]] = []
        with ConfinedDir.open(store.root, f"{group.folder}/memory") as memory:
            for rel, _folder, entries in memory.walk(hidden=False):
                for entry in entries:
                    if entry.is_file(follow_symlinks=False) and entry.name.endswith(".md"):
                        path = f"{rel}/{entry.name}" if rel else entry.name
                        files.append(
                            {
                                "path": path,
                                "shown": shown_name(path),
                                # a name that is not UTF-8 cannot be asked for in a URL
                                "link": None if NOT_UTF8.search(path) else path,
                                "size": entry.stat(follow_symlinks=False).st_size,
                            }
                        )
            files.sort(key=lambda f: f["path"])
            shown = None
            if selected and any(f["path"] == selected for f in files):
                from orchestrator.dashboard.render import render_markdown

                try:
                    text = memory.read_text(selected, MEMORY_FILE_READ_MAX_BYTES, truncate=True)
                    body, front = render_markdown(text)
                    shown = {"path": selected, "html": body, "front": front, "problem": None}
                except (OSError, UnsafePath) as exc:
                    shown = {"path": selected, "html": "", "front": None, "problem": str(exc)}
        findings: dict[str, list[Any]] = {}
        for finding in lint_memory(group.memory_dir).findings:
            findings.setdefault(finding.path, []).append(finding)
        opened = open_history(store.root, group.folder)
        history = opened.log()[:50]
        chat = self.daemon.queue.chat_messages(group.folder, CHAT, 0.0, 20, channel=CHANNEL)
        return {
            "group": group,
            "config": yaml.safe_dump(group.config.to_dict(), sort_keys=False),
            "files": files,
            "shown": shown,
            "findings": findings,
            "context": context_report(
                store.root, group.folder, zone=group.config.timezone, recent=reported
            ),
            "history": history,
            "history_gap": opened.gap(),
            "chat": chat,
        }

    async def send(self, request: web.Request) -> web.StreamResponse:
        session = self.session_of(request)
        form = await request.post()
        name = request.match_info["name"]
        text = str(form.get("text", ""))
        try:
            message = await asyncio.to_thread(
                self.daemon.accept, Inbound(name, text, CHAT, "operator", CHANNEL)
            )
        except OrchestratorError as exc:
            raise web.HTTPBadRequest(text=exc.message) from None
        log.info(
            "dashboard: session %s… sent message %s to group %s",
            session.id[:8],
            message.id,
            message.group,
        )
        raise web.HTTPSeeOther(f"/ui/groups/{message.group}?sent={message.id}#chat")

    async def message_json(self, request: web.Request) -> web.Response:
        message = await asyncio.to_thread(self.daemon.queue.get, request.match_info["id"])
        if message is None or message.channel != "dashboard":
            raise web.HTTPNotFound(text="no such message")
        return web.json_response(
            {"id": message.id, "state": message.state, "replies": list(message.replies)}
        )

    async def queue(self, request: web.Request) -> web.Response:
        def read() -> dict[str, Any]:
            return {
                "recent": self.daemon.queue.recent(100),
                "dead": self.daemon.queue.dead_letters(),
                "counts": self.daemon.queue.counts(),
            }

        return self.page(request, "queue.html", **await asyncio.to_thread(read))

    async def retry(self, request: web.Request) -> web.StreamResponse:
        session = self.session_of(request)
        message_id = request.match_info["id"]
        ok = await asyncio.to_thread(self.daemon.retry, message_id)
        log.info(
            "dashboard: session %s… retried message %s (%s)",
            session.id[:8],
            message_id,
            "queued again" if ok else "not dead",
        )
        raise web.HTTPSeeOther("/ui/queue")

    async def usage(self, request: web.Request) -> web.Response:
        from orchestrator.dashboard.render import Bar, bar_chart

        def read() -> dict[str, Any]:
            zones = {g.folder: g.config.timezone for g in self.daemon.runtime.store.groups()}
            days = self.daemon.relay.usage.by_day(None, time.time() - 14 * 86400, zones)
            currency = self.daemon.config.currency
            charts = []
            for group in sorted({d.group for d in days}):
                mine = sorted((d for d in days if d.group == group), key=lambda d: d.day)
                priced = any(d.cost is not None for d in mine)
                charts.append(
                    {
                        "group": group,
                        "zone": zones.get(group, "UTC"),
                        "cost": bar_chart(
                            f"cost per day, {group} ({currency})",
                            [Bar(d.day, d.cost or 0.0) for d in mine],
                            digits=4,
                        )
                        if priced
                        else None,
                        "tokens": bar_chart(
                            f"tokens per day, {group}",
                            [
                                Bar(
                                    d.day,
                                    d.input_tokens
                                    + d.output_tokens
                                    + d.cache_read_tokens
                                    + d.cache_write_tokens,
                                )
                                for d in mine
                            ],
                        ),
                        "requests": bar_chart(
                            f"requests per day, {group}", [Bar(d.day, d.requests) for d in mine]
                        ),
                        "days": mine,
                    }
                )
            return {"charts": charts, "currency": currency}

        return self.page(request, "usage.html", **await asyncio.to_thread(read))
