"""The Slack channel's own latency, against a fake Slack on loopback (tests/fakeslack.py),
beside the HTTP API in the same run and the same daemon (bench/chatapps.py).

slack-inbound: an event pushed on the Socket Mode WebSocket until the message is
committed to the queue: the envelope, its acknowledgement, the redelivery check, binding
lookup, the queue commit with its key. slack-outbound: a reply stored until
chat.postMessage is called: the claim commit, mrkdwn rendering, the Web API call.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from bench.chatapps import Rig, inbound, outbound, served
from bench.harness import Result

if TYPE_CHECKING:
    from tests.fakeslack import FakeSlack

INBOUND = "slack-inbound"
OUTBOUND = "slack-outbound"
BOT_TOKEN = "xoxb-bench-not-a-real-token-0123456789"
APP_TOKEN = "xapp-1-bench-not-a-real-token-0123456789"
USER, DM = "U0BENCH", "D0BENCH"


@contextmanager
def _rig() -> Iterator[tuple[Rig, FakeSlack]]:
    from orchestrator.channels.slack.kind import SlackOptions
    from orchestrator.config.accounts import ChannelAccount
    from orchestrator.secrets import SecretRef
    from tests.fakeslack import TEAM, FakeSlack

    server = FakeSlack(BOT_TOKEN, APP_TOKEN)
    os.environ["BENCH_SLACK_BOT"], os.environ["BENCH_SLACK_APP"] = BOT_TOKEN, APP_TOKEN
    account = ChannelAccount(
        "bench",
        "slack",
        token_env="BENCH_SLACK_BOT",
        options=SlackOptions(
            api_url=server.api_url,
            app_token=SecretRef("BENCH_SLACK_APP", None, "app_token_env", "app_token_secret"),
        ),
        rate_messages=1_000_000,
    )
    try:
        with served(account, f"slack:{TEAM}:{USER}", DM) as rig:
            yield rig, server
    finally:
        server.close()


def run_inbound(quick: bool) -> Result:
    with _rig() as (rig, server):
        return inbound(
            INBOUND, "Slack", rig, lambda: server.say(DM, USER, "hello"), 100 if quick else 500
        )


def run_outbound(quick: bool) -> Result:
    with _rig() as (rig, server):
        return outbound(
            OUTBOUND,
            "Slack",
            rig,
            server.send_event,
            lambda: server.last_send,
            100 if quick else 500,
        )
