"""The Discord channel in the real daemon process, with group containers on the real
engine and a fake Discord on loopback (tests/fakediscord.py): a direct message that is
not bound gets a pairing code, a round trip through the group's container in a server
channel with a mention, a SIGKILL and a restart after which a replayed message is not
answered again, and the token nowhere under the home after a run at DEBUG."""

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
from tests.fakediscord import BOT_USER, TEXT_CHANNEL, FakeDiscord
from tests.serveproc import Serve, no_secret_under, wait_for

pytestmark = pytest.mark.docker
TOKEN = "MTU1NTAwMDE.docker.discord-test-token-0123456789"
ALICE_ID, DM = "1500000000000000001", "1600000000000000001"
ALICE = FakeDiscord.user(ALICE_ID, "alice")
BOT = FakeDiscord.user(BOT_USER, "helper", bot=True)


def test_discord_through_the_real_daemon_and_engine(
    tmp_path: Path, agent_image: str, test_project: str, docker_client: Any
) -> None:
    server = FakeDiscord(TOKEN)
    home = tmp_path / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(
        "channels:\n  server:\n    kind: discord\n    token_env: DISCORD_TOKEN\n"
        f"    api_url: {server.url}\n"
    )
    GroupStore(Home(home)).add(GroupConfig(name="fam", creators=(f"discord:{ALICE_ID}",)))
    daemon = Serve(home, test_project, {"DISCORD_TOKEN": TOKEN})
    cli = [sys.executable, "-m", "orchestrator", "--home", str(home)]
    try:
        daemon.start()
        wait_for(lambda: server._newest() is not None, log=daemon.log)
        # Not bound yet: a pairing code, and nothing reaches a container.
        server.say(DM, ALICE, "hello?", guild=False)
        notice = wait_for(lambda: server.posted(DM), log=daemon.log)[0]["content"]
        code = re.search(r"Pairing code: ([A-Z0-9]{4}-[A-Z0-9]{4})", notice)
        assert code, notice
        paired = subprocess.run(
            [*cli, "pair", code[1], "fam"], capture_output=True, text=True, timeout=60
        )
        assert paired.returncode == 0 and f"paired server:{DM}" in paired.stdout, paired.stderr
        bound = subprocess.run(
            [*cli, "bind", "fam", f"server:{TEXT_CHANNEL}"], capture_output=True, text=True
        )
        assert bound.returncode == 0, bound.stderr

        # Bound: a round trip through the group's container, answering the mention.
        data = server.message(
            TEXT_CHANNEL, ALICE, f"<@{BOT_USER}> hello, who are you?", mentions=[BOT]
        )
        server.dispatch("MESSAGE_CREATE", data)
        reply = wait_for(lambda: server.posted(TEXT_CHANNEL), log=daemon.log)[0]
        assert str(reply["message_reference"]["message_id"]) == data["id"]
        assert reply["content"].strip() and reply["nonce"]

        # A SIGKILL, a restart, and the same message dispatched again.
        daemon.kill()
        identifies = server.identifies
        daemon.start()
        wait_for(lambda: server.identifies > identifies and server._newest(), log=daemon.log)
        server.dispatch("MESSAGE_CREATE", data)
        time.sleep(3)  # a second answer, were there one, would come within this
        assert len(server.posted(TEXT_CHANNEL)) == 1, "the replayed message is answered once"
        queue = MessageQueue(Home(home).state_dir / "queue.db")
        try:
            senders = {r[0] for r in queue.read("SELECT sender FROM messages")}
            assert senders == {f"discord:{ALICE_ID}"}
        finally:
            queue.close()
    finally:
        daemon.stop()
        server.close()
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")
    assert " DEBUG " in daemon.log.read_text(), "the daemon ran at DEBUG"
    no_secret_under(home, TOKEN)
