"""The dashboard through aiohttp's test client (no browser, no engine): login, sessions,
CSRF, headers, and that what containers and chat users wrote renders inert."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from orchestrator.config import OrchestratorConfig
from orchestrator.daemon.core import Daemon
from orchestrator.dashboard.app import CSP, Sessions
from orchestrator.dashboard.render import Bar, bar_chart, render_markdown
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.service.web import WebServer as HttpChannel
from orchestrator.store.messages import open_queue
from orchestrator.versions import RELEASE

TOKEN = "operator-token-0123456789"
HOSTILE = """---
type: note
title: "<script>alert('front')</script>"
---
# Notes <script>alert(1)</script>

<img src=x onerror="alert(2)">

[click](javascript:alert(3)) and [data](data:text/html;base64,PHNjcmlwdD4=) and
[fine](https://example.org/a?b=1&c=2) and ![pixel](https://evil.example/p.png)

<a href="#" onclick="alert(4)">x</a>
"""


@pytest.fixture
def daemon(home: Path) -> Iterator[Daemon]:
    h = Home(home)
    store = GroupStore(h)
    store.add(GroupConfig(name="fam", creators=("operator",)))
    (store.root / "fam" / "memory" / "notes.md").write_text(HOSTILE)
    (store.root / "broken").mkdir()
    (store.root / "broken" / "group.yaml").write_text("name: [unclosed\n")
    config = OrchestratorConfig(
        project="t", mount_allowlist=home / "none.yaml", http_token=TOKEN, http_dashboard=True
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    d = Daemon(h, config, runtime, open_queue(h), concurrency=1)  # not started
    yield d
    d.queue.close()


def browse(daemon: Daemon, steps: Any) -> Any:
    async def go() -> Any:
        async with TestClient(TestServer(HttpChannel(daemon).app())) as client:
            return await steps(client)

    return asyncio.run(go())


async def login(client: TestClient) -> str:
    """Log in; the CSRF token of the session."""
    response = await client.post("/ui/login", data={"token": TOKEN}, allow_redirects=False)
    assert response.status == 303
    page = await (await client.get("/ui/")).text()
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found
    return found[1]


def test_pages_need_a_session_and_only_the_operators_token_logs_in(daemon: Daemon) -> None:
    async def steps(client: TestClient) -> None:
        response = await client.get("/ui/", allow_redirects=False)
        assert response.status == 303 and response.headers["Location"] == "/ui/login"
        assert (await client.get("/ui/api/messages/x")).status == 401
        assert (await client.post("/ui/queue/x/retry", data={"csrf": "x"})).status == 401
        wrong = await client.post("/ui/login", data={"token": "nope"}, allow_redirects=False)
        assert wrong.status == 401 and "not the operator" in await wrong.text()
        assert RELEASE not in await wrong.text()  # the release is shown to the operator only
        ok = await client.post("/ui/login", data={"token": TOKEN}, allow_redirects=False)
        cookie = ok.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui/" in cookie
        assert "Secure" not in cookie  # plain HTTP here; behind a TLS proxy it is set
        page = await client.get("/ui/")
        assert page.status == 200 and page.headers["Content-Security-Policy"] == CSP
        text = await page.text()
        assert "fam" in text and "invalid group.yaml" in text and "broken" in text
        assert '<span class="release" id="release"' in text and f">{RELEASE}</span>" in text
        # The bearer API is unchanged beside it.
        assert (await client.get("/v1/groups")).status == 401

    browse(daemon, steps)


def test_a_bridge_token_cannot_log_in(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.config.accounts import HttpToken

    monkeypatch.setenv("BRIDGE", "b" * 24)
    daemon.config = replace(
        daemon.config, http_tokens={"b": HttpToken("b", "slack:", token_env="BRIDGE")}
    )

    async def steps(client: TestClient) -> int:
        response = await client.post("/ui/login", data={"token": "b" * 24})
        return response.status

    assert browse(daemon, steps) == 401


def test_a_post_without_the_csrf_token_changes_nothing(daemon: Daemon) -> None:
    message = daemon.queue.enqueue(
        group="fam", session="s", chat="c", thread=None, sender="operator", trust="creator",
        text="x", channel="cli",
    )  # fmt: skip
    daemon.queue.transaction(
        lambda db: db.execute("UPDATE messages SET state='dead' WHERE id=?", (message.id,))
    )

    async def steps(client: TestClient) -> list[int]:
        csrf = await login(client)
        refused = await client.post(f"/ui/queue/{message.id}/retry", data={})
        wrong = await client.post(f"/ui/queue/{message.id}/retry", data={"csrf": "x" * 43})
        sent = await client.post("/ui/groups/fam/send", data={"text": "hi"})
        done = await client.post(
            f"/ui/queue/{message.id}/retry", data={"csrf": csrf}, allow_redirects=False
        )
        return [refused.status, wrong.status, sent.status, done.status]

    assert browse(daemon, steps) == [403, 403, 403, 303]
    assert daemon.queue.get(message.id).state == "queued"  # type: ignore[union-attr]
    assert daemon.queue.read("SELECT COUNT(*) FROM messages") == [(1,)]


def test_memory_and_untrusted_text_render_inert(daemon: Daemon) -> None:
    message = daemon.queue.enqueue(
        group="fam", session="s", chat="c", thread=None, sender="<b>eve</b>", trust="member",
        text="x", channel="cli",
    )  # fmt: skip
    daemon.queue.fail(message.id, "<img src=x onerror=alert(5)>")
    daemon.queue.transaction(
        lambda db: db.execute("UPDATE messages SET state='dead' WHERE id=?", (message.id,))
    )

    async def steps(client: TestClient) -> tuple[str, str]:
        await login(client)
        group = await (await client.get("/ui/groups/fam?file=notes.md")).text()
        queue = await (await client.get("/ui/queue")).text()
        return group, queue

    group, queue = browse(daemon, steps)
    article = group[group.index('<article id="concept"') :]
    article = article[: article.index("</article>")]
    assert "<script" not in article and "onerror=" not in article.replace("onerror=&quot;", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in article
    assert 'href="javascript:' not in article and 'href="data:' not in article
    assert '<a href="https://example.org/a?b=1&amp;c=2">fine</a>' in article
    assert "<img" not in article.replace("&lt;img", "")
    assert "&lt;script&gt;alert(&#39;front&#39;)" in group  # the frontmatter, as text
    assert "<script>" not in group.replace('<script src="/ui/static/dashboard.js" defer>', "")
    assert "&lt;img src=x onerror=alert(5)&gt;" in queue and "<b>eve</b>" not in queue


def test_the_chat_box_sends_as_the_operator_and_the_reply_is_readable(daemon: Daemon) -> None:
    async def steps(client: TestClient) -> tuple[int, str, dict[str, Any]]:
        csrf = await login(client)
        sent = await client.post(
            "/ui/groups/fam/send", data={"text": "hello", "csrf": csrf}, allow_redirects=False
        )
        location = sent.headers["Location"]
        message_id = location.split("sent=")[1].split("#")[0]
        daemon.queue.complete(message_id, ["hi <there>"])
        page = await (await client.get(location)).text()
        answer = await (await client.get(f"/ui/api/messages/{message_id}")).json()
        return sent.status, page, answer

    status, page, answer = browse(daemon, steps)
    assert status == 303
    assert "hi &lt;there&gt;" in page
    assert answer["replies"] == ["hi <there>"] and answer["state"] == "done"
    row = daemon.queue.read("SELECT sender, chat, channel FROM messages")[0]
    assert row == ("operator", "dashboard", "dashboard")


def test_sessions_expire_and_logout_ends_one(daemon: Daemon) -> None:
    sessions = Sessions(ttl=10)
    session = sessions.create(now=100)
    assert sessions.get(session.id, now=109) is session
    assert sessions.get(session.id, now=111) is None
    assert sessions.get(None) is None

    async def steps(client: TestClient) -> int:
        csrf = await login(client)
        await client.post("/ui/logout", data={"csrf": csrf})
        response = await client.get("/ui/", allow_redirects=False)
        return response.status

    assert browse(daemon, steps) == 303


def test_the_markdown_sanitizer_and_the_chart() -> None:
    body, front = render_markdown("---\na: 1\n---\n[x](vbscript:msgbox) [y](/relative)")
    assert front == "a: 1"
    assert "vbscript" not in body.replace("[x](vbscript:msgbox)", "")
    assert '<a href="/relative">y</a>' in body
    svg = bar_chart("t<x>", [Bar("2026-11-30", 5), Bar("<evil>", 0)])
    assert "<evil>" not in svg and "&lt;evil&gt;" in svg and "t&lt;x&gt;" in svg


def test_the_dashboard_is_off_unless_enabled(daemon: Daemon) -> None:
    daemon.config = replace(daemon.config, http_dashboard=False)

    async def steps(client: TestClient) -> int:
        return (await client.get("/ui/", allow_redirects=False)).status

    assert browse(daemon, steps) == 401  # no such pages: the bearer API answers


def test_a_name_that_is_not_utf8_is_shown_escaped_not_a_500(daemon: Daemon) -> None:
    memory = daemon.runtime.store.root / "fam" / "memory"
    (memory / "raw\udcff\udcfe.md").write_text("---\ntype: note\n---\npoison\n")

    async def steps(client: TestClient) -> tuple[int, str, int]:
        await login(client)
        response = await client.get("/ui/groups/fam")
        groups = await client.get("/ui/")
        return response.status, await response.text(), groups.status

    status, page, groups = browse(daemon, steps)
    assert (status, groups) == (200, 200)
    assert "raw\\xff\\xfe.md" in page


@pytest.mark.parametrize(
    "link",
    [
        "//evil.example/p",
        " //evil.example/p",
        "\\\\evil.example/p",
        "/\\evil.example/p",
        "\\/evil.example/p",
        "/\t/evil.example/p",
        "https:evil.example",
    ],
)
def test_off_site_links_without_a_scheme_are_dropped(link: str) -> None:
    body, _ = render_markdown(f"[x](<{link}>) and [y](/fine) and [z](#top)")
    first = body.split(" and ")[0]
    href = re.search(r'href="([^"]*)"', first)
    # shown as Markdown source, or a path on this site (Markdown's own escapes turn
    # "\\/" into "/", and a backslash left is percent-encoded, which browsers read as a
    # character, not as a slash)
    assert href is None or not re.match(r"[/\\]{2}|[a-zA-Z][a-zA-Z0-9+.-]*:", href[1]), first
    assert '<a href="/fine">y</a>' in body and '<a href="#top">z</a>' in body
    kept, _ = render_markdown("[a](https://example.org/x) [b](mailto:a@example.org)")
    assert 'href="https://example.org/x"' in kept and 'href="mailto:a@example.org"' in kept


def test_a_history_that_cannot_record_says_so_on_the_group_page(daemon: Daemon) -> None:
    from orchestrator.memory.history import History

    History(daemon.runtime.store.root, "fam")._note_gap(OSError(28, "No space left on device"))

    async def steps(client: TestClient) -> str:
        await login(client)
        return await (await client.get("/ui/groups/fam")).text()

    page = browse(daemon, steps)
    assert 'id="history-gap"' in page and "No space left on device" in page


def test_costs_and_a_budget_pause_show_on_the_groups_and_usage_pages(daemon: Daemon) -> None:
    import time

    from orchestrator.relay.ops.model import BUDGET_HOLDER
    from orchestrator.store.usage import Call

    daemon.config = daemon.relay.config = replace(daemon.config, currency="EUR")
    daemon.relay.usage.record(
        Call("m", "fam", "p", "m-1", "turn", time.time(), 5.0, 10, 5, "ok", None, 0, 0, 0.25, "EUR")
    )
    daemon.queue.pause("fam", BUDGET_HOLDER, "budget: <b>cap</b> reached", expires=time.time() + 60)

    async def steps(client: TestClient) -> tuple[str, str]:
        await login(client)
        groups = await (await client.get("/ui/")).text()
        usage = await (await client.get("/ui/usage")).text()
        return groups, usage

    groups, usage = browse(daemon, steps)
    assert "paused (budget)" in groups and "0.2500 EUR" in groups
    assert "<b>cap</b>" not in groups and "&lt;b&gt;cap&lt;/b&gt;" in groups  # inert
    assert "cost per day, fam (EUR)" in usage and "0.2500</text>" in usage
