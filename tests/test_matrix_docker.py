"""The Matrix channel in the real daemon process, with the group's container on the real
engine and a real homeserver: a member's message answered in the room, then the daemon
SIGKILLed while it syncs, restarted, and the room's timeline checked: every message
answered, none twice; the token nowhere under the home."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.store.chats import ChatStore
from orchestrator.store.messages import MessageQueue
from tests.engineclean import remove_containers
from tests.homeserver import Homeserver, User
from tests.serveproc import Serve, wait_for

pytestmark = pytest.mark.docker


def test_matrix_through_the_real_daemon_killed_mid_sync(
    tmp_path: Path,
    agent_image: str,
    test_project: str,
    docker_client: Any,
    homeserver: Homeserver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bot = User(homeserver, "dockerbot")
    operator = User(homeserver, "dockerop")
    member = User(homeserver, "dockermember")
    home = tmp_path / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(
        "channels:\n  mx:\n    kind: matrix\n    token_env: MX_TOKEN\n"
        f"    homeserver: {homeserver.url}\n    user_id: '{bot.user_id}'\n"
        f"    allow_inviters: ['{operator.user_id}']\n"
    )
    GroupStore(Home(home)).add(GroupConfig(name="fam", creators=(f"matrix:{operator.user_id}",)))
    monkeypatch.setenv("MX_TOKEN", bot.token)
    daemon = Serve(home, test_project, {"MX_TOKEN": bot.token})
    try:
        daemon.start()
        room = operator.create_room(invite=[member.user_id, bot.user_id])
        member.join(room)
        wait_for(
            lambda: (
                bot.user_id
                in operator.call("GET", f"/_matrix/client/v3/rooms/{_q(room)}/joined_members")[
                    "joined"
                ]
            ),
            log=daemon.log,
        )
        queue = MessageQueue(Home(home).state_dir / "queue.db")
        ChatStore(queue).bind("mx", room, "fam", activation="always")
        asked = [member.say(room, "hello, who are you?")]
        wait_for(lambda: replies(member, room, bot), log=daemon.log)
        # Messages arrive while the daemon dies: SIGKILL during the next syncs.
        for text in ("one", "two", "three"):
            asked.append(member.say(room, f"message {text}"))
        time.sleep(0.3)
        daemon.kill()
        asked.append(member.say(room, "message four, while it is down"))
        daemon.start()
        wait_for(lambda: len(replies(member, room, bot)) >= len(asked), log=daemon.log)
        time.sleep(3)  # a reply posted twice would show by now
        answered = [
            r["content"]["m.relates_to"]["m.in_reply_to"]["event_id"]
            for r in replies(member, room, bot)
        ]
        assert sorted(answered) == sorted(asked), "every message answered once, none twice"
        rows = queue.read("SELECT COUNT(*) FROM messages")
        assert rows == [(len(asked),)]
        queue.close()
    finally:
        daemon.stop()
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert bot.token.encode() not in path.read_bytes(), f"the token is in {path}"


def replies(member: User, room: str, bot: User) -> list[dict[str, Any]]:
    return member.notices_from(room, bot.user_id)


def _q(room: str) -> str:
    import urllib.parse

    return urllib.parse.quote(room, safe="")
