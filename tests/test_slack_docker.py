"""The Slack channel in the real daemon process, with group containers on the real engine
and a fake Slack on loopback (tests/fakeslack.py): a conversation that is not bound gets
a pairing code, a round trip through the group's container in a thread, a SIGKILL and a
restart after which Slack's redelivery of an acknowledged event is not answered again,
and neither token anywhere under the home after a run at DEBUG."""

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
from tests.fakeslack import TEAM, FakeSlack
from tests.serveproc import Serve, no_secret_under, wait_for

pytestmark = pytest.mark.docker
BOT_TOKEN = "xoxb-5550-docker-test-bot-token-0123456789"
APP_TOKEN = "xapp-1-A0HELPER-5550-docker-test-app-token-xyz"
ALICE, DM = "U0ALICE", "D0ALICE"


def test_slack_through_the_real_daemon_and_engine(
    tmp_path: Path, agent_image: str, test_project: str, docker_client: Any
) -> None:
    server = FakeSlack(BOT_TOKEN, APP_TOKEN)
    home = tmp_path / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(
        "channels:\n  team:\n    kind: slack\n    bot_token_env: SLACK_BOT\n"
        f"    app_token_env: SLACK_APP\n    api_url: {server.api_url}\n"
    )
    GroupStore(Home(home)).add(GroupConfig(name="fam", creators=(f"slack:{TEAM}:{ALICE}",)))
    daemon = Serve(home, test_project, {"SLACK_BOT": BOT_TOKEN, "SLACK_APP": APP_TOKEN})
    cli = [sys.executable, "-m", "orchestrator", "--home", str(home)]
    try:
        daemon.start()
        wait_for(lambda: server.sockets and not server.sockets[-1].closed, log=daemon.log)
        # Not bound yet: a pairing code, and nothing reaches a container.
        server.say(DM, ALICE, "hello?")
        notice = wait_for(lambda: server.posted(DM), log=daemon.log)[0].params["text"]
        code = re.search(r"Pairing code: ([A-Z0-9]{4}-[A-Z0-9]{4})", notice)
        assert code, notice
        paired = subprocess.run(
            [*cli, "pair", code[1], "fam"], capture_output=True, text=True, timeout=60
        )
        assert paired.returncode == 0 and f"paired team:{DM}" in paired.stdout, paired.stderr

        # Bound: a round trip through the group's container, in the thread asked in.
        root = "1700000000.000100"
        first = server.push(server.message(DM, ALICE, "hello, who are you?", thread_ts=root))
        reply = wait_for(lambda: server.posted(DM)[1:], log=daemon.log)[0]
        assert reply.params["thread_ts"] == root and reply.params["text"].strip()
        assert first in server.acks

        # A SIGKILL, a restart, and Slack delivering the acknowledged event again.
        daemon.kill()
        connections = server.connections
        daemon.start()
        wait_for(lambda: server.connections > connections, log=daemon.log)
        again = server.redeliver(first)
        wait_for(lambda: again in server.acks, log=daemon.log)
        time.sleep(3)  # a second answer, were there one, would come within this
        assert len(server.posted(DM)) == 2, "the redelivered event is not answered again"
        queue = MessageQueue(Home(home).state_dir / "queue.db")
        try:
            assert queue.read("SELECT COUNT(*) FROM messages") == [(1,)]
        finally:
            queue.close()
    finally:
        daemon.stop()
        server.close()
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")
    assert " DEBUG " in daemon.log.read_text(), "the daemon ran at DEBUG"
    no_secret_under(home, BOT_TOKEN, APP_TOKEN)
