"""The dashboard in a real browser: Debian's chromium, headless, driven by Selenium
through chromium-driver, against the real HTTP server of a real daemon (runners on real
sockets: no engine). Screenshots of each page go to test-artifacts/dashboard/.

Skipped with the reason on a machine without chromium and chromium-driver
(scripts/setup-browser installs them); under CI=true their absence is a failure."""

from __future__ import annotations

import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import OrchestratorConfig
from orchestrator.daemon.core import Daemon
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.service.web import WebServer as HttpChannel
from orchestrator.store.messages import open_queue
from orchestrator.store.usage import Call
from tests.fakerunner import FakeRunner

TOKEN = "operator-token-for-the-browser-0123"
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "dashboard"
CONCEPT = """---
type: note
title: Family facts
---
# Family facts

- Ann's birthday is in **May**.
- <script>alert("memory")</script> stays text.
- [a bad link](javascript:alert(1)) stays text too.
"""


def _browser() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        reason = "no chromium and chromium-driver: run scripts/setup-browser"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; under CI=true the browser tests must run")
        pytest.skip(reason)
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    return chromium, driver


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def site(home: Path) -> Iterator[dict[str, Any]]:
    h = Home(home)
    store = GroupStore(h)
    store.add(GroupConfig(name="Family", creators=("operator",)))
    (store.root / "family" / "memory" / "facts.md").write_text(CONCEPT)
    listen = f"127.0.0.1:{_port()}"
    config = OrchestratorConfig(
        project="t",
        mount_allowlist=home / "none.yaml",
        http_token=TOKEN,
        http_listen=listen,
        http_dashboard=True,
    )
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runner = FakeRunner(h.runtime_dir("family") / "runner.sock")
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    dead = daemon.queue.enqueue(
        group="family", session="dashboard.chat-x", chat="x", thread=None, sender="operator",
        trust="creator", text="try me again", channel="cli",
    )  # fmt: skip
    daemon.queue.transaction(
        lambda db: db.execute(
            "UPDATE messages SET state='dead', attempts=5, last_error=? WHERE id=?",
            ("the runner refused the turn <b>(test)</b>", dead.id),
        )
    )
    for day in range(3):
        daemon.relay.usage.record(
            Call(f"m{day}", "family", "offline", "offline-rules", "turn",
                 time.time() - day * 86400, 12.0, 1000 * (day + 1), 200, "ok")
        )  # fmt: skip
    daemon.start()
    http = HttpChannel(daemon)
    http.start()
    try:
        yield {"url": f"http://{listen}", "daemon": daemon, "dead": dead.id}
    finally:
        http.stop()
        daemon.drain(1)
        runner.close()
        daemon.queue.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium, driver_path = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--disable-gpu",
    ):
        options.add_argument(arg)  # fmt: skip
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def wait_until(predicate: Any, timeout: float = 20) -> Any:
    """``predicate()`` once it is true; a page being replaced meanwhile (an element gone
    stale, or not there yet) counts as not yet. Chromium sometimes reports a stale
    element as an inspector error about a node no longer in the document: the same."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        WebDriverException,
    )

    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except (StaleElementReferenceException, NoSuchElementException):
            value = None
        except WebDriverException as exc:
            if "does not belong to the document" not in str(exc):
                raise
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def no_alert(driver: Any) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        _ = driver.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def test_an_operator_uses_the_dashboard_in_a_browser(site: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    url, daemon = site["url"], site["daemon"]
    browser.get(url + "/ui/")
    assert browser.current_url.endswith("/ui/login")
    shot(browser, "1-login")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "login").click()
    wait_until(lambda: browser.find_elements(By.ID, "groups"))
    assert "Family" in browser.find_element(By.ID, "groups").text
    shot(browser, "2-groups")

    browser.find_element(By.LINK_TEXT, "Family").click()
    browser.find_element(By.LINK_TEXT, "facts.md").click()
    concept = wait_until(lambda: browser.find_elements(By.ID, "concept"))[0]
    assert "Ann's birthday is in May." in concept.text
    assert '<script>alert("memory")</script> stays text.' in concept.text
    assert concept.find_elements(By.TAG_NAME, "script") == []
    assert [a.get_attribute("href") for a in concept.find_elements(By.TAG_NAME, "a")] == []
    assert no_alert(browser)
    shot(browser, "3-group-concept")

    browser.find_element(By.ID, "chat-text").send_keys("hello from the dashboard")
    browser.find_element(By.ID, "chat-send").click()
    wait_until(
        lambda: "echo: hello from the dashboard" in browser.find_element(By.ID, "chat-log").text
    )
    shot(browser, "4-chat-reply")

    browser.find_element(By.LINK_TEXT, "Queue").click()
    dead = browser.find_element(By.ID, "dead")
    assert "the runner refused the turn <b>(test)</b>" in dead.text  # shown as text
    shot(browser, "5-queue-dead")
    dead.find_element(By.CLASS_NAME, "retry").click()
    wait_until(lambda: "none" in browser.find_element(By.ID, "dead").text)
    wait_until(lambda: daemon.queue.get(site["dead"]).state == "done")
    shot(browser, "6-queue-retried")

    browser.find_element(By.LINK_TEXT, "Usage").click()
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) == 2
    shot(browser, "7-usage")

    cookie = browser.get_cookie("orchestrator_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui/"
    # A form post with the session but without the CSRF token is refused.
    request = urllib.request.Request(
        url + f"/ui/queue/{site['dead']}/retry",
        data=b"",
        method="POST",
        headers={"Cookie": f"orchestrator_session={cookie['value']}"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    refused.value.close()

    browser.find_element(By.ID, "logout").click()
    wait_until(lambda: browser.current_url.endswith("/ui/login"))
    browser.get(url + "/ui/queue")
    assert browser.current_url.endswith("/ui/login")
    shot(browser, "8-logged-out")
    # Without a session: pages send you to the login; the API part is refused.
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(url + f"/ui/api/messages/{site['dead']}", timeout=10)
    assert anonymous.value.code == 401
    anonymous.value.close()
    assert no_alert(browser)
