"""The Discord channel's own latency, against a fake Discord on loopback
(tests/fakediscord.py), beside the HTTP API in the same run and the same daemon
(bench/chatapps.py).

discord-inbound: a MESSAGE_CREATE dispatched on the gateway (zlib-stream) until the
message is committed to the queue: discord.py's parsing, binding lookup, the queue
commit with the message id. discord-outbound: a reply stored until the REST create
message is called: the claim commit, the nonce, the HTTP call.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from bench.chatapps import Rig, inbound, outbound, served
from bench.harness import Result

if TYPE_CHECKING:
    from tests.fakediscord import FakeDiscord

INBOUND = "discord-inbound"
OUTBOUND = "discord-outbound"
TOKEN = "MTE.bench.not-a-real-discord-token-0123456789"
USER, DM = "1500000000000000009", "1600000000000000009"


@contextmanager
def _rig() -> Iterator[tuple[Rig, FakeDiscord]]:
    from orchestrator.channels.discord.kind import DiscordOptions
    from orchestrator.config.accounts import ChannelAccount
    from tests.fakediscord import FakeDiscord

    server = FakeDiscord(TOKEN)
    os.environ["BENCH_DISCORD_TOKEN"] = TOKEN
    account = ChannelAccount(
        "bench",
        "discord",
        token_env="BENCH_DISCORD_TOKEN",
        options=DiscordOptions(api_url=server.url),
        rate_messages=1_000_000,
    )
    try:
        with served(account, f"discord:{USER}", DM) as rig:
            yield rig, server
    finally:
        server.close()


def run_inbound(quick: bool) -> Result:
    from tests.fakediscord import FakeDiscord

    user = FakeDiscord.user(USER, "bench")
    with _rig() as (rig, server):
        return inbound(
            INBOUND,
            "Discord",
            rig,
            lambda: server.say(DM, user, "hello", guild=False),
            100 if quick else 500,
        )


def run_outbound(quick: bool) -> Result:
    with _rig() as (rig, server):
        return outbound(
            OUTBOUND,
            "Discord",
            rig,
            server.send_event,
            lambda: server.last_send,
            100 if quick else 500,
        )
