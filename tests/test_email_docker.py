"""The email channel in the real daemon process, with group containers on the real
engine and real mail servers on loopback (Dovecot and Postfix, tests/mailserver.py):
an account added with the command line, a pairing code by mail, a round trip through
the group's container, a SIGKILL between reading a mail and committing its UID, and the
password nowhere under the home after a run at DEBUG."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.store.messages import MessageQueue
from tests.engineclean import remove_containers
from tests.mailserver import MailServers, message
from tests.serveproc import Serve, wait_for

pytestmark = pytest.mark.docker


def text_of(mail: EmailMessage) -> str:
    part = mail.get_body(("plain",))
    assert part is not None
    return str(part.get_content())  # type: ignore[attr-defined]


def test_email_through_the_real_daemon_and_engine(
    tmp_path: Path,
    agent_image: str,
    test_project: str,
    docker_client: Any,
    mail_servers: MailServers,
) -> None:
    servers = mail_servers
    bot = servers.add_user("dockerbot")
    alice = servers.add_user("dockeralice")
    password = servers.passwords[bot]
    home = tmp_path / "home"
    home.mkdir()
    cli = [sys.executable, "-m", "orchestrator", "--home", str(home)]
    added = subprocess.run(
        [
            *cli, "channel", "add", "email", "mail", "--imap-url", servers.imap_url(),
            "--smtp-url", servers.smtp_url(), "--user", bot, "--ca-file", str(servers.ca_file),
            "--password-env", "ORCH_TEST_MAIL_PASSWORD",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    GroupStore(Home(home)).add(GroupConfig(name="fam"))
    daemon = Serve(home, test_project, {"ORCH_TEST_MAIL_PASSWORD": password})

    def from_bot() -> list[EmailMessage]:
        return [m for m in servers.inbox(alice) if str(m["From"]) == bot]

    try:
        daemon.start()
        wait_for(lambda: "connected as" in daemon.log.read_text(), log=daemon.log)
        # Not bound yet: a pairing code by mail, and nothing reaches a container.
        servers.send(message(alice, bot, "Hello", "hello?"))
        notice = text_of(wait_for(from_bot, log=daemon.log)[0])
        code = re.search(r"Pairing code: ([A-Z0-9]{4}-[A-Z0-9]{4})", notice)
        assert code, notice
        paired = subprocess.run(
            [*cli, "pair", code[1], "fam"], capture_output=True, text=True, timeout=60
        )
        assert paired.returncode == 0 and "its people are guests" in paired.stdout, paired.stderr

        # Bound: a round trip through the group's container.
        asked = message(alice, bot, "Question", "hello, who are you?")
        servers.send(asked)
        reply = wait_for(lambda: from_bot()[1:], log=daemon.log)[0]
        assert reply["In-Reply-To"] == asked["Message-ID"]
        assert reply["Subject"] == "Re: Question" and text_of(reply).strip()

        # SIGKILL as soon as the mail is queued, before or after its UID is committed.
        queue = MessageQueue(Home(home).state_dir / "queue.db")
        try:
            servers.send(message(alice, bot, "Crash", "after the crash?"))

            def queued() -> Any:
                return queue.read("SELECT id FROM messages WHERE text LIKE '%after the crash?'")

            wait_for(queued, log=daemon.log)
            daemon.kill()
            daemon.start()

            def answered() -> Any:
                rows = queue.read(
                    "SELECT id, state FROM messages WHERE text LIKE '%after the crash?'"
                )
                return rows if rows and rows[0][1] == "done" else None

            rows = wait_for(answered, log=daemon.log)
            assert len(rows) == 1, "the mail read again is queued once"

            def claimed() -> Any:
                return queue.read(
                    "SELECT state FROM channel_outbound WHERE message_id=? AND state<>'sending'",
                    (rows[0][0],),
                )

            # a reply stored before the kill is found by the sweep, within seconds
            wait_for(claimed, log=daemon.log)
            time.sleep(3)  # a second reply, were there one, would come within this
            replies = [m for m in from_bot() if m["In-Reply-To"]]
            answered_ids = [str(m["In-Reply-To"]) for m in replies]
            assert len(answered_ids) == len(set(answered_ids)), "no mail answered twice"
            outbound = queue.read(
                "SELECT state FROM channel_outbound WHERE message_id=?", (rows[0][0],)
            )
            # Sent once; or lost in the crash window and marked unknown, never sent twice.
            assert outbound in ([("sent",)], [("unknown",)])
            senders = {r[0] for r in queue.read("SELECT DISTINCT sender FROM messages")}
            assert senders == {f"email:{alice}"}
        finally:
            queue.close()
    finally:
        daemon.stop()
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")
    log = daemon.log.read_text()
    assert " DEBUG " in log, "the daemon ran at DEBUG"
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert password.encode() not in path.read_bytes(), f"the password is in {path}"
