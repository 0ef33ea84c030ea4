"""The email channel against real mail servers (Dovecot and Postfix on loopback, as in
the tests: tests/mailserver.py; they need scripts/setup-mail and root), beside the HTTP
API in the same daemon.

email-inbound: a mail handed to Postfix over SMTP until the message is committed to the
queue: Postfix's queue, LMTP into Dovecot, the IDLE push, the fetch, reading the mail,
the loop rules, the binding, the queue commit with its UID. Floor: POST
/v1/groups/{name}/messages until its 202 (the message committed).

email-outbound: a reply stored (the queue commit and the daemon's change event, as a
finished turn makes them) until Postfix has taken its mail (SMTP's 250 after DATA): the
claim commit, composing the mail, the SMTP connection with STARTTLS, the login and the
send. Floor: the same reply stored until a waiting GET /v1/messages/{id}?wait=...
long poll answers.

email-round-trip: a person's mail sent until the reply is in their mailbox (seen by an
IDLE on it): both deliveries, the turn (an echo runner on a real socket: no engine, no
model). Floor: the SMTP delivery time alone: a mail sent to the same mailbox until the
same IDLE sees it.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.harness import Result, Series
from bench.telegram import HTTP_TOKEN, _alternate, _port, _post

INBOUND = "email-inbound"
OUTBOUND = "email-outbound"
ROUND_TRIP = "email-round-trip"


@contextmanager
def _rig(turns: bool) -> Iterator[dict[str, Any]]:
    """Mail servers, a daemon with an email account (and its dispatcher and an echo
    runner when ``turns``) and the HTTP API."""
    from orchestrator.channels.chatapp import ChatAppChannel
    from orchestrator.channels.email.kind import KIND, EmailOptions
    from orchestrator.config import OrchestratorConfig
    from orchestrator.config.accounts import ChannelAccount
    from orchestrator.daemon.core import Daemon
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.runtime.fake import FakeBackend
    from orchestrator.runtime.lifecycle import GroupRuntime
    from orchestrator.service.web import WebServer
    from orchestrator.store.messages import open_queue
    from tests import mailserver
    from tests.fakerunner import FakeRunner

    reason = mailserver.unavailable()
    if reason is not None:
        raise RuntimeError(f"no mail servers: {reason}")
    with mailserver.running() as servers, tempfile.TemporaryDirectory(prefix="bench-email-") as tmp:
        bot, alice = servers.add_user("benchbot"), servers.add_user("benchalice")
        os.environ["BENCH_MAIL_PASSWORD"] = servers.passwords[bot]
        home = Home(Path(tmp) / "home")
        home.ensure_writable()
        GroupStore(home).add(GroupConfig(name="fam", creators=("op",)))
        account = ChannelAccount(
            "bench",
            "email",
            token_env="BENCH_MAIL_PASSWORD",
            options=EmailOptions(
                imap_url=servers.imap_url(tls=False),
                smtp_url=servers.smtp_url(tls=False),
                user=bot,
                address=bot,
                ca_file=str(servers.ca_file),
            ),
            rate_messages=1_000_000,
        )
        config = OrchestratorConfig(
            project="bench",
            mount_allowlist=Path(tmp) / "none",
            channel_accounts={"bench": account},
            http_token=HTTP_TOKEN,
            http_listen=f"127.0.0.1:{_port()}",
        )
        runtime = GroupRuntime(home, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
        runner = FakeRunner(home.runtime_dir("fam") / "runner.sock") if turns else None
        daemon = Daemon(home, config, runtime, open_queue(home), concurrency=2)
        if turns:
            daemon.start()
        daemon.chats.bind("bench", alice, "fam")
        channel = ChatAppChannel.of_kind(KIND)(daemon)
        http = WebServer(daemon)
        channel.start()
        http.start()
        deadline = time.monotonic() + 30
        while (daemon.chats.health("bench") or {}).get("state") != "connected":
            assert time.monotonic() < deadline, "the email channel did not connect"
            time.sleep(0.05)
        try:
            yield {
                "daemon": daemon,
                "servers": servers,
                "http": config.http_listen,
                "bot": bot,
                "alice": alice,
                "channel": channel,
            }
        finally:
            channel.stop()
            http.stop()
            if turns:
                daemon.drain(1)
            if runner is not None:
                runner.close()
            daemon.queue.close()


def inbound(quick: bool) -> Result:
    from tests.mailserver import message

    rounds = 30 if quick else 200
    with _rig(turns=False) as rig:
        daemon, servers, listen = rig["daemon"], rig["servers"], rig["http"]
        committed = threading.Event()
        stamp = [0.0]
        accept = daemon.accept

        def timed(*args: Any, **kwargs: Any) -> Any:
            queued = accept(*args, **kwargs)
            stamp[0] = time.perf_counter()
            committed.set()
            return queued

        daemon.accept = timed  # type: ignore[method-assign]

        def email() -> float:
            committed.clear()
            made = message(rig["alice"], rig["bot"], "Bench", "hello")
            started = time.perf_counter()
            servers.send(made)
            assert committed.wait(30), "the mail was not queued"
            time.sleep(0.02)  # the channel commits the UID and is in IDLE again
            return stamp[0] - started

        def http() -> float:
            started = time.perf_counter()
            _post(listen, "/v1/groups/fam/messages", {"text": "hello", "sender": "op"})
            return time.perf_counter() - started

        t, f = _alternate(rounds, email, http)
    return Result(
        INBOUND,
        Series("mail handed to SMTP -> queued", t),
        Series("HTTP POST -> 202 (queued)", f),
        note="Postfix and Dovecot on loopback, IMAP IDLE; the dispatcher is not started",
    )


def outbound(quick: bool) -> Result:
    from orchestrator.channels.email import outbox

    rounds = 30 if quick else 200
    with _rig(turns=False) as rig:
        daemon, listen = rig["daemon"], rig["http"]
        queue = daemon.queue
        handed = threading.Event()
        stamp = [0.0]
        send_mails = outbox.send_mails

        async def timed(*args: Any, **kwargs: Any) -> list[str]:
            ids = await send_mails(*args, **kwargs)
            stamp[0] = time.perf_counter()
            handed.set()
            return ids

        outbox.send_mails = timed  # type: ignore[assignment]
        try:

            def fresh(channel: str) -> str:
                made = queue.enqueue(
                    group="fam",
                    session="s",
                    chat=rig["alice"],
                    thread=None,
                    sender=f"email:{rig['alice']}",
                    trust="member",
                    text="hello",
                    channel=channel,
                )
                return made.id

            def store(message_id: str) -> float:
                started = time.perf_counter()
                queue.complete(message_id, ["**Sure**, here is `the answer`."])
                daemon._changed(message_id)
                return started

            def email() -> float:
                message_id = fresh("email:bench")
                handed.clear()
                started = store(message_id)
                assert handed.wait(30), "no mail sent"
                return stamp[0] - started

            def http() -> float:
                message_id = fresh("http")
                done: list[float] = []
                poller = threading.Thread(
                    target=lambda: (
                        _post(listen, f"/v1/messages/{message_id}?wait=10"),
                        done.append(time.perf_counter()),
                    )
                )
                poller.start()
                time.sleep(0.005)  # the long poll is waiting
                started = store(message_id)
                poller.join(15)
                return done[0] - started

            t, f = _alternate(rounds, email, http)
        finally:
            outbox.send_mails = send_mails  # type: ignore[assignment]
    return Result(
        OUTBOUND,
        Series("reply stored -> Postfix took its mail", t),
        Series("reply stored -> HTTP long poll answered", f),
        note="a new SMTP connection and login per reply, on loopback",
    )


class _Arrivals:
    """An IDLE on a mailbox's INBOX, counting the mails that arrive."""

    def __init__(self, servers: Any, address: str) -> None:
        import imapclient

        self.client = imapclient.IMAPClient("127.0.0.1", port=servers.imap_port, ssl=False)
        self.client.login(address, servers.passwords[address])
        self.count = int(self.client.select_folder("INBOX")[b"EXISTS"])
        self.client.idle()

    def wait_for(self, count: int, timeout: float = 60) -> float:
        """The time the mailbox held ``count`` mails (the IDLE push seen)."""
        deadline = time.monotonic() + timeout
        while self.count < count:
            assert time.monotonic() < deadline, "the mail did not arrive"
            for response in self.client.idle_check(timeout=1):
                if len(response) > 1 and response[1] == b"EXISTS":
                    self.count = max(self.count, int(response[0]))
        return time.perf_counter()

    def close(self) -> None:
        self.client.idle_done()
        self.client.logout()


def round_trip(quick: bool) -> Result:
    from tests.mailserver import message

    rounds = 10 if quick else 50
    with _rig(turns=True) as rig:
        servers, alice, bot = rig["servers"], rig["alice"], rig["bot"]
        sender = servers.add_user("benchbob")
        arrivals = _Arrivals(servers, alice)
        try:

            def email() -> float:
                started = time.perf_counter()
                servers.send(message(alice, bot, "Ping", "ping"))
                return arrivals.wait_for(arrivals.count + 1) - started

            def smtp() -> float:
                started = time.perf_counter()
                servers.send(message(sender, alice, "Direct", "direct"))
                return arrivals.wait_for(arrivals.count + 1) - started

            t, f = _alternate(rounds, email, smtp)
        finally:
            arrivals.close()
    return Result(
        ROUND_TRIP,
        Series("mail sent -> its reply in the sender's mailbox", t),
        Series("mail sent -> in the mailbox (SMTP delivery alone)", f),
        note="Postfix and Dovecot on loopback; an echo runner, no engine, no model",
    )
