"""The dashboard's web app, exactly: sessions and their expiry, the session cookie's flags,
the security headers, the refusals (status, words, log lines) and what each page is
given to show."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from http.cookies import SimpleCookie
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from orchestrator.config import OrchestratorConfig
from orchestrator.daemon.core import Daemon
from orchestrator.dashboard import app as dashboard_app
from orchestrator.dashboard.app import (
    CSP,
    Dashboard,
    Sessions,
    _ago,
    _duration,
    _environment,
    _size,
    see_other,
)
from orchestrator.dashboard.render import Bar, render_markdown
from orchestrator.errors import OrchestratorError
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.service.web import WebServer as HttpChannel
from orchestrator.store.messages import open_queue
from orchestrator.store.usage import Call
from orchestrator.versions import RELEASE

TOKEN = "operator-token-0123456789"
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
NOW = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC


@pytest.fixture
def daemon(home: Path) -> Iterator[Daemon]:
    h = Home(home)
    store = GroupStore(h)
    store.add(GroupConfig(name="fam", creators=("operator",)))
    (store.root / "broken").mkdir()
    (store.root / "broken" / "group.yaml").write_text("name: [unclosed\n")
    config = OrchestratorConfig(
        project="t", mount_allowlist=home / "none.yaml", http_token=TOKEN, http_dashboard=True
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    d = Daemon(h, config, runtime, open_queue(h), concurrency=1)  # not started
    yield d
    d.queue.close()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The dashboard's clock, set to NOW (and movable through its ``now``)."""
    fake = SimpleNamespace(now=NOW, strftime=time.strftime, gmtime=time.gmtime)
    fake.time = lambda: fake.now
    monkeypatch.setattr(dashboard_app, "time", fake)
    return fake


def browse(daemon: Daemon, steps: Any) -> Any:
    """Run ``steps(client, dashboard)`` against the daemon's web server."""

    async def go() -> Any:
        channel = HttpChannel(daemon)
        async with TestClient(TestServer(channel.app())) as client:
            return await steps(client, channel.dashboard)

    return asyncio.run(go())


async def login(client: TestClient, dashboard: Dashboard) -> Any:
    """Log in; the session."""
    response = await client.post("/ui/login", data={"token": TOKEN}, allow_redirects=False)
    assert response.status == 303
    return dashboard.sessions.get(response.cookies["orchestrator_session"].value)


def headers_of(response: Any) -> dict[str, str]:
    return {name: response.headers.get(name) for name in HEADERS}


def enqueue(daemon: Daemon, **fields: Any) -> Any:
    values = dict(
        group="fam", session="s", chat="c", thread=None, sender="operator", trust="creator",
        text="x", channel="cli",
    )  # fmt: skip
    values.update(fields)
    return daemon.queue.enqueue(**values)


def make_dead(daemon: Daemon, message_id: str) -> None:
    daemon.queue.transaction(
        lambda db: db.execute("UPDATE messages SET state='dead' WHERE id=?", (message_id,))
    )


def captured(dashboard: Dashboard) -> dict[str, Any]:
    """What the dashboard's pages are given, instead of rendering them."""
    seen: dict[str, Any] = {}

    def page(request: web.Request, template: str, **values: Any) -> web.Response:
        seen["template"] = template
        seen["values"] = values
        return web.Response(text="page")

    dashboard.page = page  # type: ignore[method-assign]
    return seen


# sessions


def test_a_session_lasts_its_ttl_and_is_forgotten_once_expired() -> None:
    sessions = Sessions(ttl=10)
    session = sessions.create(now=100.0)
    assert session.expires == 110.0
    assert len(session.id) == 43 and len(session.csrf) == 43 and session.id != session.csrf
    assert sessions.items == {session.id: session}
    assert sessions.get(session.id, now=109.5) is session
    assert sessions.get(session.id, now=110.0) is None  # expired at its expiry
    assert sessions.items == {}


def test_a_new_session_forgets_the_expired_ones() -> None:
    sessions = Sessions(ttl=10)
    old = sessions.create(now=100.0)
    kept = sessions.create(now=105.0)
    new = sessions.create(now=110.0)  # old expires at 110, kept at 115
    assert set(sessions.items) == {kept.id, new.id}
    assert old.id not in sessions.items


def test_sessions_last_twelve_hours_by_default_and_read_the_clock(clock: Any) -> None:
    sessions = Sessions()
    assert sessions.ttl == 12 * 3600
    session = sessions.create()
    assert session.expires == NOW + 12 * 3600
    clock.now = NOW + 12 * 3600 - 1
    assert sessions.get(session.id) is session
    clock.now = NOW + 12 * 3600
    assert sessions.get(session.id) is None
    assert sessions.items == {}


def test_no_id_an_unknown_id_and_a_dropped_session_find_nothing() -> None:
    sessions = Sessions(ttl=10)
    session = sessions.create(now=100.0)
    assert sessions.get(None, now=100.0) is None
    assert sessions.get("", now=100.0) is None
    assert sessions.get("unknown", now=100.0) is None
    assert sessions.items == {session.id: session}
    sessions.drop("unknown")
    assert sessions.items == {session.id: session}
    sessions.drop(session.id)
    assert sessions.items == {}
    assert sessions.get(session.id, now=100.0) is None


def test_see_other_is_a_303_to_the_location() -> None:
    response = see_other("/ui/somewhere")
    assert response.status == 303
    assert response.headers["Location"] == "/ui/somewhere"


# the templates' environment and filters


def test_templates_escape_refuse_undefined_names_and_show_non_utf8_names_escaped() -> None:
    env = _environment()
    show = env.from_string("{{ v }}")
    assert show.render(v="<b>&") == "&lt;b&gt;&amp;"
    assert show.render(v="a\udcffb") == "a\\xffb"
    assert show.render(v=5) == "5"
    assert show.render(v=None) == "None"
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing }}").render()
    assert "Log in" in env.get_template("login.html").render(
        csrf="", logged_in=False, release="r", error=None
    )


def test_the_when_filter_shows_utc_or_a_dash() -> None:
    when = _environment().filters["when"]
    assert when(90061) == "1970-01-02 01:01:01 UTC"
    assert when("90061") == "1970-01-02 01:01:01 UTC"
    assert when(0) == "-"
    assert when(None) == "-"


def test_the_ago_duration_and_size_filters(clock: Any) -> None:
    filters = _environment().filters
    assert filters["ago"] is _ago and filters["size"] is _size
    assert filters["duration"] is _duration
    assert _ago(None) == "never"
    assert _ago(0) == "never"
    assert _ago(NOW - 300) == "5m ago"
    assert _ago(str(NOW - 60)) == "60s ago"
    assert _ago(NOW + 100) == "0s ago"  # a clock ahead shows no negative time
    assert _duration(90.9) == "90s"
    assert _duration("7300") == "2h01m"  # type: ignore[arg-type]
    assert _size(None) == "-"
    assert _size(0) == "0 B"
    assert _size(1536) == "1.5 KiB"
    assert _size("2048") == "2.0 KiB"  # type: ignore[arg-type]


# the middleware: sessions, headers, CSRF


def test_without_a_session_pages_redirect_to_login_and_the_rest_is_refused(
    daemon: Daemon,
) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> list[Any]:
        out = []
        for method, path in [
            ("GET", "/ui/"),
            ("GET", "/ui"),
            ("GET", "/ui/queue"),
            ("GET", "/ui/api/messages/x"),
            ("POST", "/ui/queue/x/retry"),
            ("POST", "/ui/logout"),
        ]:
            response = await client.request(method, path, allow_redirects=False)
            out.append(
                (
                    path,
                    response.status,
                    response.headers.get("Location"),
                    await response.text(),
                    headers_of(response),
                )
            )
        return out

    assert browse(daemon, steps) == [
        ("/ui/", 303, "/ui/login", "", HEADERS),
        ("/ui", 302, "/ui/", "302: Found", HEADERS),  # on to /ui/, which the cookie reaches
        ("/ui/queue", 303, "/ui/login", "", HEADERS),
        ("/ui/api/messages/x", 401, None, "log in first", HEADERS),
        ("/ui/queue/x/retry", 401, None, "log in first", HEADERS),
        ("/ui/logout", 401, None, "log in first", HEADERS),
    ]


def test_login_and_static_files_need_no_session_and_other_paths_are_left_alone(
    daemon: Daemon,
) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> list[Any]:
        form = await client.get("/ui/login", allow_redirects=False)
        css = await client.get("/ui/static/dashboard.css", allow_redirects=False)
        api = await client.get("/v1/groups", allow_redirects=False)
        return [
            (form.status, form.headers["Content-Type"], headers_of(form), await form.text()),
            (css.status, headers_of(css)),
            (api.status, api.headers.get("Content-Security-Policy")),
        ]

    (form, css, api) = browse(daemon, steps)
    assert form[:3] == (200, "text/html; charset=utf-8", HEADERS)
    assert 'action="/ui/login"' in form[3] and 'id="login-error"' not in form[3]
    assert 'action="/ui/logout"' not in form[3] and RELEASE not in form[3]
    assert css == (200, HEADERS)
    assert api == (401, None)  # the bearer API's answer, without the dashboard's headers


def test_a_post_with_a_wrong_or_missing_csrf_token_is_refused_and_logged(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    message = enqueue(daemon)
    make_dead(daemon, message.id)

    async def steps(client: TestClient, dashboard: Dashboard) -> list[Any]:
        session = await login(client, dashboard)
        out = []
        for data in ({}, {"csrf": ""}, {"csrf": session.csrf[:-1]}, {"csrf": "x" * 43}):
            response = await client.post(f"/ui/queue/{message.id}/retry", data=data)
            out.append((response.status, await response.text(), headers_of(response)))
        return out

    with caplog.at_level(logging.WARNING, logger="orchestrator.dashboard"):
        results = browse(daemon, steps)
    assert results == [(403, "missing or wrong CSRF token", HEADERS)] * 4
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.dashboard"] == [
        f"dashboard: a POST to /ui/queue/{message.id}/retry without its CSRF token refused"
    ] * 4
    assert daemon.queue.get(message.id).state == "dead"  # type: ignore[union-attr]


def test_logging_in_again_needs_no_csrf_token(daemon: Daemon) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[int, str]:
        await login(client, dashboard)
        again = await client.post("/ui/login", data={"token": TOKEN}, allow_redirects=False)
        return again.status, again.headers["Location"]

    assert browse(daemon, steps) == (303, "/ui/")


def test_ui_without_its_slash_redirects_to_the_groups_with_the_headers(daemon: Daemon) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[Any, ...]:
        session = await login(client, dashboard)
        cookie = {"Cookie": f"orchestrator_session={session.id}"}
        response = await client.get("/ui", headers=cookie, allow_redirects=False)
        # the cookie's path is /ui/: a browser sends it to /ui/ and below only, so a
        # signed-in operator opening /ui comes without it and reaches the groups
        client.session.cookie_jar.clear()
        bare = await client.get("/ui", allow_redirects=False)
        groups = await client.get("/ui/", headers=cookie, allow_redirects=False)
        return (
            (response.status, response.headers["Location"], headers_of(response)),
            (bare.status, bare.headers["Location"]),
            groups.status,
        )

    assert browse(daemon, steps) == ((302, "/ui/", HEADERS), (302, "/ui/"), 200)


# login and logout


def test_a_wrong_token_is_refused_with_the_login_page_and_logged(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[Any, ...]:
        response = await client.post("/ui/login", data={"token": TOKEN[:-1]}, allow_redirects=False)
        empty = await client.post("/ui/login", data={}, allow_redirects=False)
        return (
            response.status,
            response.headers["Content-Type"],
            headers_of(response),
            "Set-Cookie" in response.headers,
            await response.text(),
            empty.status,
            dict(dashboard.sessions.items),
        )

    with caplog.at_level(logging.WARNING, logger="orchestrator.dashboard"):
        status, kind, headers, cookie, page, empty, sessions = browse(daemon, steps)
    assert (status, kind, headers, cookie, empty, sessions) == (
        401,
        "text/html; charset=utf-8",
        HEADERS,
        False,
        401,
        {},
    )
    assert '<p class="error" id="login-error">That is not the operator&#39;s token.</p>' in page
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.dashboard"] == [
        "dashboard: a login with a wrong token from 127.0.0.1"
    ] * 2


@pytest.mark.parametrize("given", ["", "None"])
def test_without_an_operators_token_nobody_logs_in(daemon: Daemon, given: str) -> None:
    daemon.config = replace(daemon.config, http_token=None)

    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[int, dict[str, Any]]:
        response = await client.post("/ui/login", data={"token": given}, allow_redirects=False)
        return response.status, dict(dashboard.sessions.items)

    assert browse(daemon, steps) == (401, {})


def test_the_session_cookie_is_http_only_strict_under_ui_and_lasts_the_session(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[Any, ...]:
        response = await client.post("/ui/login", data={"token": TOKEN}, allow_redirects=False)
        return (
            response.status,
            response.headers["Location"],
            headers_of(response),
            response.headers["Set-Cookie"],
            list(dashboard.sessions.items),
        )

    with caplog.at_level(logging.INFO, logger="orchestrator.dashboard"):
        status, location, headers, header, sessions = browse(daemon, steps)
    assert (status, location, headers) == (303, "/ui/", HEADERS)
    cookie = SimpleCookie()
    cookie.load(header)
    morsel = cookie["orchestrator_session"]
    assert [morsel.value] == sessions
    assert morsel["path"] == "/ui/"
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "Strict"
    assert morsel["max-age"] == "43200"
    assert morsel["secure"] == ""
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.dashboard"] == [
        f"dashboard: session {sessions[0][:8]}… logged in from 127.0.0.1"
    ]


@pytest.mark.parametrize(("proto", "secure"), [("https", True), ("http", False)])
def test_the_cookie_is_secure_behind_a_proxy_that_says_https(
    daemon: Daemon, proto: str, secure: bool
) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> str:
        response = await client.post(
            "/ui/login",
            data={"token": TOKEN},
            headers={"X-Forwarded-Proto": proto},
            allow_redirects=False,
        )
        return response.headers["Set-Cookie"]

    cookie = SimpleCookie()
    cookie.load(browse(daemon, steps))
    assert (cookie["orchestrator_session"]["secure"] is True) is secure


def test_logout_ends_the_session_clears_the_cookie_and_is_logged(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[Any, ...]:
        session = await login(client, dashboard)
        other = dashboard.sessions.create()
        response = await client.post(
            "/ui/logout", data={"csrf": session.csrf}, allow_redirects=False
        )
        return (
            session.id,
            other.id,
            response.status,
            response.headers["Location"],
            response.headers["Set-Cookie"],
            list(dashboard.sessions.items),
        )

    with caplog.at_level(logging.INFO, logger="orchestrator.dashboard"):
        session, other, status, location, header, sessions = browse(daemon, steps)
    assert (status, location, sessions) == (303, "/ui/login", [other])
    cookie = SimpleCookie()
    cookie.load(header)
    assert cookie["orchestrator_session"].value == ""
    assert cookie["orchestrator_session"]["path"] == "/ui/"
    assert cookie["orchestrator_session"]["max-age"] == "0"
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.dashboard"] == [
        f"dashboard: session {session[:8]}… logged in from 127.0.0.1",
        f"dashboard: session {session[:8]}… logged out",
    ]


# direct calls: the session of a request and the page


def request_with(dashboard: Dashboard, session_id: str | None, path: str = "/ui/") -> Any:
    headers = {"Cookie": f"orchestrator_session={session_id}"} if session_id else {}
    return make_mocked_request("GET", path, headers=headers)


def test_the_session_of_a_request_or_unauthorized(daemon: Daemon) -> None:
    dashboard = Dashboard(daemon)
    session = dashboard.sessions.create()
    assert dashboard.session_of(request_with(dashboard, session.id)) is session
    for session_id in (None, "unknown"):
        with pytest.raises(web.HTTPUnauthorized) as refused:
            dashboard.session_of(request_with(dashboard, session_id))
        assert refused.value.text == "log in first"


def test_a_page_carries_the_sessions_csrf_token_and_the_release_only_logged_in(
    daemon: Daemon,
) -> None:
    dashboard = Dashboard(daemon)
    session = dashboard.sessions.create()
    shown = dashboard.page(request_with(dashboard, session.id), "login.html", error="oops<")
    assert (shown.status, shown.content_type, shown.charset) == (200, "text/html", "utf-8")
    text = shown.text or ""
    assert f'<input type="hidden" name="csrf" value="{session.csrf}">' in text
    assert f">{RELEASE}</span>" in text
    assert '<p class="error" id="login-error">oops&lt;</p>' in text
    anonymous = dashboard.page(request_with(dashboard, None), "login.html", error=None).text
    assert 'name="csrf"' not in (anonymous or "") and RELEASE not in (anonymous or "")
    expired = dashboard.page(request_with(dashboard, "unknown"), "login.html", error=None).text
    assert expired == anonymous


# the groups page


def test_the_groups_page_is_given_each_groups_state_counts_chats_pauses_and_cost(
    daemon: Daemon, clock: Any
) -> None:
    store = daemon.runtime.store
    store.add(GroupConfig(name="east", timezone="Pacific/Kiritimati"))
    store.add(GroupConfig(name="quiet", model="other-model"))
    daemon.config = replace(daemon.config, currency="EUR")
    enqueue(daemon)
    enqueue(daemon)
    inflight = enqueue(daemon)
    assert daemon.queue.claim(inflight.id)
    dead = enqueue(daemon)
    make_dead(daemon, dead.id)
    make_dead(daemon, enqueue(daemon, group="east").id)
    done = enqueue(daemon, group="east")
    daemon.queue.complete(done.id, ["ok"])
    bound = daemon.chats.bind("tg", "c1", "fam", title="Family")
    east_bound = daemon.chats.bind("tg", "c2", "east")
    lease = daemon.queue.pause("fam", "budget", "over")
    # 2026-05-28 20:26:40 UTC is already 2026-05-29 10:26:40 on Kiritimati (UTC+14):
    # its day began at 10:00 UTC
    for group, started, cost in [
        ("fam", NOW - 3600, 0.25),
        ("fam", NOW - 60, 0.5),
        ("fam", NOW - 86400, 7.0),  # yesterday
        ("east", NOW - 11 * 3600, 3.0),  # 09:26 UTC: today in UTC, yesterday on Kiritimati
        ("east", NOW - 3600, 0.125),
        ("quiet", NOW - 60, None),
    ]:
        daemon.relay.usage.record(
            Call("m", group, "p", "m-1", "turn", started, 5.0, 1, 1, "ok", None, 0, 0, cost, "EUR")
        )
    status = {row.folder: row for row in daemon.runtime.status()}

    result = Dashboard(daemon)._groups()
    assert [item.folder for item in result["invalid"]] == ["broken"]
    assert result["groups"] == [
        {
            "folder": "east",
            "name": "east",
            "provider": GroupConfig(name="x").provider,
            "model": GroupConfig(name="x").model,
            "status": status["east"],
            "queued": 0,
            "dead": 1,
            "bindings": [east_bound],
            "pauses": [],
            "cost_today": "0.1250 EUR",
        },
        {
            "folder": "fam",
            "name": "fam",
            "provider": GroupConfig(name="x").provider,
            "model": GroupConfig(name="x").model,
            "status": status["fam"],
            "queued": 3,
            "dead": 1,
            "bindings": [bound],
            "pauses": [lease],
            "cost_today": "0.7500 EUR",
        },
        {
            "folder": "quiet",
            "name": "quiet",
            "provider": GroupConfig(name="x").provider,
            "model": "other-model",
            "status": status["quiet"],
            "queued": 0,
            "dead": 0,
            "bindings": [],
            "pauses": [],
            "cost_today": "-",
        },
    ]


def test_the_groups_page_renders_with_its_rows(daemon: Daemon) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[int, str]:
        await login(client, dashboard)
        response = await client.get("/ui/")
        return response.status, await response.text()

    status, page = browse(daemon, steps)
    assert status == 200
    assert '<td><a href="/ui/groups/fam">fam</a> <small>(fam)</small></td>' in page
    assert '<tr class="invalid"><td>broken</td>' in page


# a group's page


def test_an_unknown_group_is_a_404_saying_so(daemon: Daemon) -> None:
    with pytest.raises(OrchestratorError) as missing:
        daemon.runtime.store.find("nope")

    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[Any, ...]:
        await login(client, dashboard)
        response = await client.get("/ui/groups/nope")
        return response.status, await response.text(), headers_of(response)

    assert browse(daemon, steps) == (404, missing.value.message, HEADERS)


def memory_of(daemon: Daemon) -> Path:
    return daemon.runtime.store.root / "fam" / "memory"


def test_a_groups_page_lists_its_markdown_files_sorted_with_their_sizes(daemon: Daemon) -> None:
    memory = memory_of(daemon)
    (memory / "notes.md").write_text("# Notes\n")
    (memory / "sub").mkdir()
    (memory / "sub" / "b.md").write_text("---\ntype: note\n---\nbee\n")
    (memory / "a.txt").write_text("not markdown")
    (memory / ".hidden.md").write_text("hidden")
    (memory / "link.md").symlink_to(memory / "notes.md")
    (memory / "raw\udcff.md").write_text("raw")

    data = Dashboard(daemon)._group("fam", None)
    assert data["files"] == [
        {
            "path": "index.md",
            "shown": "index.md",
            "link": "index.md",
            "size": (memory / "index.md").stat().st_size,
        },
        {"path": "notes.md", "shown": "notes.md", "link": "notes.md", "size": 8},
        {"path": "raw\udcff.md", "shown": "raw\\xff.md", "link": None, "size": 3},
        {"path": "sub/b.md", "shown": "sub/b.md", "link": "sub/b.md", "size": 23},
        {
            "path": "system/definition.md",
            "shown": "system/definition.md",
            "link": "system/definition.md",
            "size": (memory / "system" / "definition.md").stat().st_size,
        },
        {
            "path": "system/index.md",
            "shown": "system/index.md",
            "link": "system/index.md",
            "size": (memory / "system" / "index.md").stat().st_size,
        },
    ]
    assert data["shown"] is None


def test_a_selected_file_is_shown_rendered_and_an_unlisted_one_is_not(daemon: Daemon) -> None:
    memory = memory_of(daemon)
    (memory / "sub").mkdir()
    text = "---\ntype: note\n---\n# Bee <b>x</b>\n"
    (memory / "sub" / "b.md").write_text(text)
    (memory / "a.txt").write_text("not markdown")
    html, front = render_markdown(text)

    dashboard = Dashboard(daemon)
    assert dashboard._group("fam", "sub/b.md")["shown"] == {
        "path": "sub/b.md",
        "html": html,
        "front": front,
        "problem": None,
    }
    assert front == "type: note"
    assert dashboard._group("fam", "a.txt")["shown"] is None
    assert dashboard._group("fam", "../group.yaml")["shown"] is None
    assert dashboard._group("fam", "")["shown"] is None


def test_a_file_that_cannot_be_read_shows_the_problem(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.confined import ConfinedDir

    def fail(*args: Any, **kwargs: Any) -> str:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ConfinedDir, "read_text", fail)
    assert Dashboard(daemon)._group("fam", "index.md")["shown"] == {
        "path": "index.md",
        "html": "",
        "front": None,
        "problem": "[Errno 5] Input/output error",
    }


def test_a_groups_page_is_given_its_config_findings_context_history_and_chat(
    daemon: Daemon,
) -> None:
    from orchestrator.agent.notes import reported
    from orchestrator.memory.history import open_history
    from orchestrator.memory.lint import lint_memory
    from orchestrator.memory.search import context_report

    store = daemon.runtime.store
    group = store.find("fam")
    (memory_of(daemon) / "loose.md").write_text("no frontmatter\n")
    (memory_of(daemon) / "sub").mkdir()
    (memory_of(daemon) / "sub" / "x.md").write_text("no frontmatter either\n")
    said = [enqueue(daemon, chat="dashboard", channel="dashboard", text=f"m{i}") for i in range(21)]
    enqueue(daemon, chat="dashboard", channel="cli", text="elsewhere")
    enqueue(daemon, chat="other", channel="dashboard", text="another chat")

    data = Dashboard(daemon)._group("fam", None)
    findings: dict[str, list[Any]] = {}
    for finding in lint_memory(group.memory_dir).findings:
        findings.setdefault(finding.path, []).append(finding)
    assert findings and data["findings"] == findings
    assert data["group"] == group
    assert data["config"] == yaml.safe_dump(group.config.to_dict(), sort_keys=False)
    assert data["context"] == context_report(
        store.root, "fam", zone=group.config.timezone, recent=reported
    )
    opened = open_history(store.root, "fam")
    assert data["history"] == opened.log()[:50]
    assert data["history_gap"] == opened.gap()
    assert [m.id for m in data["chat"]] == [m.id for m in said[1:]]
    assert sorted(data) == [
        "chat",
        "config",
        "context",
        "files",
        "findings",
        "group",
        "history",
        "history_gap",
        "shown",
    ]


# the chat box and its answers


def test_the_chat_box_queues_the_text_as_the_operator_and_redirects_to_it(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[Any, ...]:
        session = await login(client, dashboard)
        response = await client.post(
            "/ui/groups/fam/send",
            data={"text": "hello there", "csrf": session.csrf},
            allow_redirects=False,
        )
        return session.id, response.status, response.headers["Location"], headers_of(response)

    with caplog.at_level(logging.INFO, logger="orchestrator.dashboard"):
        session, status, location, headers = browse(daemon, steps)
    [message] = daemon.queue.recent()
    assert (status, location, headers) == (
        303,
        f"/ui/groups/fam?sent={message.id}#chat",
        HEADERS,
    )
    assert (message.group, message.text, message.chat, message.sender, message.channel) == (
        "fam",
        "hello there",
        "dashboard",
        "operator",
        "dashboard",
    )
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.dashboard"][
        -1
    ] == f"dashboard: session {session[:8]}… sent message {message.id} to group fam"


def test_the_chat_box_refuses_what_the_daemon_refuses_with_its_words(daemon: Daemon) -> None:
    with pytest.raises(OrchestratorError) as missing:
        daemon.runtime.store.find("nope")

    async def steps(client: TestClient, dashboard: Dashboard) -> list[Any]:
        session = await login(client, dashboard)
        out = []
        for path, data in [
            ("/ui/groups/nope/send", {"text": "hi", "csrf": session.csrf}),
            ("/ui/groups/fam/send", {"csrf": session.csrf}),
        ]:
            response = await client.post(path, data=data, allow_redirects=False)
            out.append((response.status, await response.text(), headers_of(response)))
        return out

    unknown, empty = browse(daemon, steps)
    assert unknown == (400, missing.value.message, HEADERS)
    assert empty[0] == 400 and empty[2] == HEADERS and empty[1]
    assert daemon.queue.recent() == []


def test_a_dashboard_messages_state_and_replies_as_json_and_others_are_404(
    daemon: Daemon,
) -> None:
    mine = enqueue(daemon, chat="dashboard", channel="dashboard")
    daemon.queue.complete(mine.id, ["one", "two <b>"])
    theirs = enqueue(daemon, chat="dashboard", channel="cli")

    async def steps(client: TestClient, dashboard: Dashboard) -> list[Any]:
        await login(client, dashboard)
        out = []
        for message_id in (mine.id, theirs.id, "unknown"):
            response = await client.get(f"/ui/api/messages/{message_id}")
            out.append((response.status, await response.text(), headers_of(response)))
        return out

    import json

    answer, other, unknown = browse(daemon, steps)
    assert answer[0] == 200 and answer[2] == HEADERS
    assert json.loads(answer[1]) == {"id": mine.id, "state": "done", "replies": ["one", "two <b>"]}
    assert other == (404, "no such message", HEADERS)
    assert unknown == (404, "no such message", HEADERS)


# the queue page and retry


def test_the_queue_page_is_given_the_newest_hundred_the_dead_and_the_counts(
    daemon: Daemon,
) -> None:
    messages = [enqueue(daemon, text=f"m{i}") for i in range(101)]
    make_dead(daemon, messages[0].id)
    dashboard = Dashboard(daemon)
    seen = captured(dashboard)
    asyncio.run(dashboard.queue(request_with(dashboard, None, "/ui/queue")))
    assert seen["template"] == "queue.html"
    values = seen["values"]
    assert sorted(values) == ["counts", "dead", "recent"]
    assert [m.id for m in values["recent"]] == [m.id for m in reversed(messages[1:])]
    assert [m.id for m in values["dead"]] == [messages[0].id]
    assert values["counts"] == {"queued": 100, "dead": 1}


def test_the_queue_page_renders_its_counts(daemon: Daemon) -> None:
    make_dead(daemon, enqueue(daemon).id)
    enqueue(daemon)

    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[int, str]:
        await login(client, dashboard)
        response = await client.get("/ui/queue")
        return response.status, await response.text()

    status, page = browse(daemon, steps)
    assert status == 200 and "<p>1 queued, 0 in flight, 0 done, 1 dead</p>" in page


def test_retry_queues_a_dead_message_again_and_logs_whether_it_was_dead(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    dead = enqueue(daemon)
    make_dead(daemon, dead.id)
    alive = enqueue(daemon)

    async def steps(client: TestClient, dashboard: Dashboard) -> tuple[Any, ...]:
        session = await login(client, dashboard)
        out = []
        for message in (dead, alive):
            response = await client.post(
                f"/ui/queue/{message.id}/retry",
                data={"csrf": session.csrf},
                allow_redirects=False,
            )
            out.append((response.status, response.headers["Location"], headers_of(response)))
        return session.id, out

    with caplog.at_level(logging.INFO, logger="orchestrator.dashboard"):
        session, results = browse(daemon, steps)
    assert results == [(303, "/ui/queue", HEADERS)] * 2
    assert daemon.queue.get(dead.id).state == "queued"  # type: ignore[union-attr]
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.dashboard"][1:] == [
        f"dashboard: session {session[:8]}… retried message {dead.id} (queued again)",
        f"dashboard: session {session[:8]}… retried message {alive.id} (not dead)",
    ]


# the usage page


def test_the_usage_page_charts_each_groups_last_fourteen_days(
    daemon: Daemon, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.dashboard import render

    charts: list[tuple[Any, ...]] = []

    def chart(title: str, bars: list[Bar], **options: Any) -> str:
        charts.append((title, bars, options))
        return f"chart {len(charts)}"

    monkeypatch.setattr(render, "bar_chart", chart)
    daemon.runtime.store.add(GroupConfig(name="east", timezone="Pacific/Kiritimati"))
    daemon.config = daemon.relay.config = replace(daemon.config, currency="EUR")
    since = NOW - 14 * 86400
    for group, started, cost, tokens in [
        ("fam", NOW - 3600, 0.25, (1, 10, 100, 1000)),
        ("fam", NOW - 86400, None, (2, 20, 200, 2000)),
        ("fam", since + 10, 0.5, (3, 0, 0, 0)),
        ("fam", since - 10, 9.0, (4, 0, 0, 0)),  # before the fortnight
        ("east", NOW - 3600, None, (5, 0, 0, 0)),
        ("gone", NOW - 3600, None, (6, 0, 0, 0)),  # a group no longer in the store
    ]:
        daemon.relay.usage.record(
            Call("m", group, "p", "m-1", "turn", started, 5.0, tokens[0], tokens[1], "ok", None,
                 tokens[2], tokens[3], cost, "EUR" if cost is not None else None)
        )  # fmt: skip
    dashboard = Dashboard(daemon)
    seen = captured(dashboard)
    asyncio.run(dashboard.usage(request_with(dashboard, None, "/ui/usage")))

    assert seen["template"] == "usage.html"
    assert seen["values"]["currency"] == "EUR"
    days = daemon.relay.usage.by_day(None, since, {"fam": "UTC", "east": "Pacific/Kiritimati"})
    fam = sorted((d for d in days if d.group == "fam"), key=lambda d: d.day)
    assert [d.day for d in fam] == ["2026-05-14", "2026-05-27", "2026-05-28"]
    east = [d for d in days if d.group == "east"]
    gone = [d for d in days if d.group == "gone"]
    assert [d.day for d in east] == ["2026-05-29"]
    assert seen["values"]["charts"] == [
        {"group": "east", "zone": "Pacific/Kiritimati", "cost": None, "tokens": "chart 1",
         "requests": "chart 2", "days": east},
        {"group": "fam", "zone": "UTC", "cost": "chart 3", "tokens": "chart 4",
         "requests": "chart 5", "days": fam},
        {"group": "gone", "zone": "UTC", "cost": None, "tokens": "chart 6",
         "requests": "chart 7", "days": gone},
    ]  # fmt: skip
    assert charts == [
        ("tokens per day, east", [Bar("2026-05-29", 5)], {}),
        ("requests per day, east", [Bar("2026-05-29", 1)], {}),
        (
            "cost per day, fam (EUR)",
            [Bar("2026-05-14", 0.5), Bar("2026-05-27", 0.0), Bar("2026-05-28", 0.25)],
            {"digits": 4},
        ),
        (
            "tokens per day, fam",
            [Bar("2026-05-14", 3), Bar("2026-05-27", 2222), Bar("2026-05-28", 1111)],
            {},
        ),
        (
            "requests per day, fam",
            [Bar("2026-05-14", 1), Bar("2026-05-27", 1), Bar("2026-05-28", 1)],
            {},
        ),
        ("tokens per day, gone", [Bar("2026-05-28", 6)], {}),
        ("requests per day, gone", [Bar("2026-05-28", 1)], {}),
    ]


# static files


def test_the_static_folder_is_not_listed(daemon: Daemon) -> None:
    async def steps(client: TestClient, dashboard: Dashboard) -> list[int]:
        await login(client, dashboard)
        listing = await client.get("/ui/static/", allow_redirects=False)
        script = await client.get("/ui/static/dashboard.js", allow_redirects=False)
        return [listing.status, script.status]

    assert browse(daemon, steps) == [403, 200]


def test_a_symlink_in_the_static_folder_is_not_followed(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "dashboard"
    (here / "static").mkdir(parents=True)
    (here / "templates").symlink_to(dashboard_app.HERE / "templates")
    (here / "static" / "plain.css").write_text("p {}")
    (tmp_path / "secret.txt").write_text("secret")
    (here / "static" / "link.css").symlink_to(tmp_path / "secret.txt")
    monkeypatch.setattr(dashboard_app, "HERE", here)

    async def steps(client: TestClient, dashboard: Dashboard) -> list[tuple[int, str]]:
        out = []
        for name in ("plain.css", "link.css"):
            response = await client.get(f"/ui/static/{name}", allow_redirects=False)
            out.append((response.status, await response.text()))
        return out

    plain, link = browse(daemon, steps)
    assert plain == (200, "p {}")
    assert link[0] == 404 and "secret" not in link[1]


# more of a group's page


def test_a_selected_file_longer_than_the_read_limit_is_shown_cut(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard_app, "MEMORY_FILE_READ_MAX_BYTES", 16)
    (memory_of(daemon) / "long.md").write_text("first line here\nsecond line cut off\n")
    html, front = render_markdown("first line here\n")
    assert Dashboard(daemon)._group("fam", "long.md")["shown"] == {
        "path": "long.md",
        "html": html,
        "front": front,
        "problem": None,
    }


def test_a_groups_page_shows_the_fifty_newest_changes_of_its_history(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.memory import history

    changes = [f"change {i}" for i in range(60)]
    opened = SimpleNamespace(log=lambda: list(changes), gap=lambda: None)
    monkeypatch.setattr(history, "open_history", lambda root, folder: opened)
    data = Dashboard(daemon)._group("fam", None)
    assert data["history"] == changes[:50]
    assert data["history_gap"] is None


def test_the_context_report_counts_the_daily_notes_of_the_groups_own_today(
    daemon: Daemon,
) -> None:
    from datetime import date, timedelta

    from orchestrator.agent.notes import reported
    from orchestrator.memory.search import context_report

    store = daemon.runtime.store
    # 26 hours apart: at any moment at least one of them is not on UTC's date
    zones = {"ahead": "Pacific/Kiritimati", "behind": "Etc/GMT+12"}
    today = date.fromtimestamp(time.time())
    for name, zone in zones.items():
        store.add(GroupConfig(name=name, timezone=zone))
        daily = store.root / name / "memory" / "daily"
        daily.mkdir(exist_ok=True)
        for offset in range(-3, 4):
            day = today + timedelta(days=offset)
            (daily / f"{day:%Y-%m-%d}.md").write_text("- a line\n" * (offset + 4))
    dashboard = Dashboard(daemon)
    differs = []
    for name, zone in zones.items():
        context = dashboard._group(name, None)["context"]
        assert context == context_report(store.root, name, zone=zone, recent=reported)
        differs.append(context != context_report(store.root, name, zone="UTC", recent=reported))
    assert any(differs)


def test_a_page_without_a_session_gives_its_forms_an_empty_csrf_token(daemon: Daemon) -> None:
    message = enqueue(daemon)
    make_dead(daemon, message.id)
    dashboard = Dashboard(daemon)
    page = dashboard.page(
        request_with(dashboard, None, "/ui/queue"),
        "queue.html",
        recent=[],
        dead=daemon.queue.dead_letters(),
        counts={},
    ).text
    assert f'action="/ui/queue/{message.id}/retry"><input type="hidden" name="csrf" value="">' in (
        page or ""
    )
