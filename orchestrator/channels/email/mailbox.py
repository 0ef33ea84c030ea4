"""The IMAP side of an email account: one logged-in connection to its folder
(IMAPClient), used from one thread of its own (an IMAP connection answers one command
at a time, and IDLE blocks until the server speaks).

Mail is found by UID: each mailbox numbers its messages upward and never reuses a
number while its UIDVALIDITY stays the same, so (UIDVALIDITY, UID) names one mail
for good and "the UIDs above the last one handled" is what is new.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.channels.email.kind import Endpoint
from orchestrator.errors import OrchestratorError
from orchestrator.limits import EMAIL_FETCH_MAX_BYTES, EMAIL_TIMEOUT_SECONDS

if TYPE_CHECKING:
    import imapclient

log = logging.getLogger("orchestrator.channels.email")


class InsecureServer(OrchestratorError):
    """A server that offers no TLS, away from this machine: the password is not sent."""


@dataclass(frozen=True)
class Opened:
    uidvalidity: int
    uidnext: int  # the UID the next mail will get
    idle: bool  # the server offers IMAP IDLE


@dataclass(frozen=True)
class Fetched:
    uid: int
    raw: bytes  # the whole mail; its header only when it is larger than we download
    size: int
    whole: bool


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificates verified against the system's CAs, or ``ca_file``'s."""
    return ssl.create_default_context(cafile=ca_file)


class Mailbox:
    """One connection to one folder; every method blocks (call it from the account's
    IMAP thread)."""

    def __init__(
        self, server: Endpoint, user: str, password: str, folder: str, context: ssl.SSLContext
    ) -> None:
        self.server = server
        self.user = user
        self.password = password
        self.folder = folder
        self.context = context
        self.client: imapclient.IMAPClient | None = None
        self.idling = False

    def open(self) -> Opened:
        """Connect (TLS, or STARTTLS; clear text only to this machine), log in and
        select the folder."""
        import imapclient

        self.close()
        server = self.server
        client = imapclient.IMAPClient(
            server.host,
            port=server.port,
            ssl=server.implicit_tls,
            ssl_context=self.context,
            timeout=EMAIL_TIMEOUT_SECONDS,
        )
        try:
            if not server.implicit_tls:
                if client.has_capability("STARTTLS"):
                    client.starttls(self.context)
                elif not server.loopback:
                    raise InsecureServer(
                        f"the IMAP server {server.host}:{server.port} offers no STARTTLS; "
                        "the password is not sent in clear text",
                        hint="use imaps:// (TLS from the start)",
                    )
            client.login(self.user, self.password)
            selected = client.select_folder(self.folder)
        except BaseException:
            with contextlib.suppress(Exception):
                client.shutdown()
            raise
        self.client = client
        validity = int(selected.get(b"UIDVALIDITY", 0))
        uidnext = selected.get(b"UIDNEXT")
        if uidnext is None:
            uids = client.search("ALL")
            uidnext = max(uids, default=0) + 1
        return Opened(validity, int(uidnext), bool(client.has_capability("IDLE")))

    def _client(self) -> imapclient.IMAPClient:
        if self.client is None:
            raise OrchestratorError("the IMAP connection is closed")
        return self.client

    def new_uids(self, after: int) -> list[int]:
        """The UIDs above ``after``, lowest first."""
        found = self._client().search(["UID", f"{after + 1}:*"])
        return sorted(int(u) for u in found if int(u) > after)

    def fetch(self, uid: int) -> Fetched | None:
        """Mail ``uid`` (None when it is gone), without marking it seen; only its
        header when it is over EMAIL_FETCH_MAX_BYTES."""
        client = self._client()
        sizes = client.fetch([uid], ["RFC822.SIZE"])
        if uid not in sizes:
            return None
        size = int(sizes[uid].get(b"RFC822.SIZE", 0))
        whole = size <= EMAIL_FETCH_MAX_BYTES
        part = "BODY.PEEK[]" if whole else "BODY.PEEK[HEADER]"
        data = client.fetch([uid], [part])
        if uid not in data:
            return None
        key = b"BODY[]" if whole else b"BODY[HEADER]"
        raw = data[uid].get(key)
        if not isinstance(raw, bytes):
            return None
        return Fetched(uid, raw, size, whole)

    def mark_seen(self, uid: int) -> None:
        self._client().add_flags([uid], [b"\\Seen"], silent=True)

    def wait(self, seconds: float) -> bool:
        """IDLE until the server reports new mail or ``seconds`` pass; whether it did.
        A mail that came after the caller's last search is reported first, by that
        search's answer or by a NOOP (the server tells an IDLE only what it has not told
        already)."""
        client = self._client()
        # A mail that came while an earlier command ran (the search that found nothing
        # new, say) was announced in that command's answer: imapclient leaves such an
        # EXISTS among imaplib's stored responses, and neither the NOOP nor the IDLE
        # tells it again.
        stored = getattr(getattr(client, "_imap", None), "untagged_responses", None)
        announced = isinstance(stored, dict) and bool(stored.pop("EXISTS", None))
        _, pending = client.noop()
        if announced or _announces_mail(pending):
            return True
        client.idle()
        self.idling = True
        try:
            responses: list[Any] = client.idle_check(timeout=seconds)
        finally:
            self.idling = False
            client.idle_done()
        return _announces_mail(responses)

    def noop(self) -> None:
        self._client().noop()

    def interrupt(self) -> None:
        """From another thread: end a blocked IDLE at once (the connection with it)."""
        client = self.client
        if client is not None:
            with contextlib.suppress(Exception):
                import socket

                client.socket().shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        client, self.client = self.client, None
        if client is None:
            return
        with contextlib.suppress(Exception):
            if self.idling:
                client.shutdown()
            else:
                client.logout()
        with contextlib.suppress(Exception):
            client.shutdown()


def _announces_mail(responses: list[Any]) -> bool:
    """Whether untagged responses (``(2, b"EXISTS")``) say the folder has new mail."""
    return any(
        isinstance(r, tuple) and len(r) > 1 and r[1] in (b"EXISTS", b"RECENT") for r in responses
    )
