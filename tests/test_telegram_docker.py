"""The Telegram channel in the real daemon process, with group containers on the real
engine and a fake Bot API on loopback: pairing, a round trip, a chat that is not bound,
a SIGKILL between receiving an update and committing its offset, and the token nowhere
under the home after a run at DEBUG."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.store.messages import MessageQueue
from tests.engineclean import remove_containers
from tests.faketelegram import FakeTelegram
from tests.serveproc import Serve, wait_for

pytestmark = pytest.mark.docker
TOKEN = "5550001:AAE-docker-test-token_0123456789xyz"
ALICE, STRANGER = 4242, 9999
PRIVATE = {"id": ALICE, "type": "private", "first_name": "Alice"}
STRANGER_CHAT = {"id": STRANGER, "type": "private", "first_name": "Mallory"}


def test_telegram_through_the_real_daemon_and_engine(
    tmp_path: Path, agent_image: str, test_project: str, docker_client: Any
) -> None:
    server = FakeTelegram(TOKEN)
    home = tmp_path / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(
        f"channels:\n  famb:\n    kind: telegram\n    token_env: TG_TOKEN\n"
        f"    api_url: {server.url}\n"
    )
    GroupStore(Home(home)).add(GroupConfig(name="fam", creators=(f"telegram:{ALICE}",)))
    daemon = Serve(home, test_project, {"TG_TOKEN": TOKEN})
    cli = [sys.executable, "-m", "orchestrator", "--home", str(home)]
    try:
        daemon.start()
        # Not bound yet: a pairing code, and nothing reaches a container.
        server.say(PRIVATE, ALICE, "hello?")
        notice = wait_for(lambda: server.sent(ALICE), log=daemon.log)[0].params["text"]
        code = re.search(r"Pairing code: ([A-Z0-9]{4}-[A-Z0-9]{4})", notice)
        assert code, notice
        paired = subprocess.run(
            [*cli, "pair", code[1], "fam"], capture_output=True, text=True, timeout=60
        )
        assert paired.returncode == 0 and "paired famb:4242" in paired.stdout, paired.stderr
        server.say(STRANGER_CHAT, STRANGER, "let me in")
        wait_for(lambda: server.sent(STRANGER), log=daemon.log)

        # Bound: a round trip through the group's container.
        asked = server.say(PRIVATE, ALICE, "hello, who are you?")
        reply = wait_for(lambda: server.sent(ALICE)[1:], log=daemon.log)[0]
        assert reply.params["reply_parameters"]["message_id"] == asked
        assert reply.params["text"].strip()

        # SIGKILL as soon as the update has been read, before or after its offset commit.
        update = server.push({"message": server.message(PRIVATE, ALICE, "after the crash?")})
        wait_for(lambda: update in server.served, log=daemon.log)
        daemon.kill()
        daemon.start()
        queue = MessageQueue(Home(home).state_dir / "queue.db")
        try:

            def crash_message() -> Any:
                rows = queue.read("SELECT id, state FROM messages WHERE text='after the crash?'")
                return rows if rows and rows[0][1] == "done" else None

            rows = wait_for(crash_message, log=daemon.log)
            assert len(rows) == 1, "the update read again is queued once"
            time.sleep(3)  # a second reply, were there one, would come within this
            answers = [c for c in server.sent(ALICE) if c.params.get("reply_parameters")]
            targets = [c.params["reply_parameters"]["message_id"] for c in answers]
            assert len(targets) == len(set(targets)), "no message answered twice"
            outbound = queue.read(
                "SELECT state FROM channel_outbound WHERE message_id=?", (rows[0][0],)
            )
            # Sent once; or lost in the crash window and marked unknown, never sent twice.
            assert outbound in ([("sent",)], [("unknown",)])
            senders = {r[0] for r in queue.read("SELECT DISTINCT sender FROM messages")}
            assert senders == {f"telegram:{ALICE}"}, "the stranger reached no group"
        finally:
            queue.close()
    finally:
        daemon.stop()
        server.close()
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")
    log = daemon.log.read_text()
    assert " DEBUG " in log, "the daemon ran at DEBUG"
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert TOKEN.encode() not in path.read_bytes(), f"the token is in {path}"
