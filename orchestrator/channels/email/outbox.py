"""The SMTP side of an email account: a reply's mails sent over one logged-in
connection (aiosmtplib), and what a failure means for the reply.

SMTP has no idempotency key a server honours: a mail handed over twice is delivered
twice. So a send is classified by when it failed: before the server took any of the
reply's mails (no connection, a refused login, a temporary 4xx answer) it surely did
not arrive and is tried again later; a permanent 5xx answer is a refusal; a connection
lost after the data was sent may have delivered it, and is never sent again.
"""

from __future__ import annotations

import ssl
from email.message import EmailMessage
from typing import TYPE_CHECKING

from orchestrator.channels.chatapp.adapter import RETRY
from orchestrator.channels.email.kind import Endpoint
from orchestrator.channels.email.mailbox import InsecureServer
from orchestrator.errors import OrchestratorError
from orchestrator.limits import EMAIL_TIMEOUT_SECONDS
from orchestrator.store.chats import FAILED, UNKNOWN

if TYPE_CHECKING:
    import aiosmtplib


class PartlySent(OrchestratorError):
    """Some of a reply's mails were taken by the server, then sending failed."""


class NotSent(OrchestratorError):
    """No mail of the reply was handed over: the connection or the login failed."""


async def _logged_in(
    server: Endpoint, user: str, password: str, context: ssl.SSLContext
) -> aiosmtplib.SMTP:
    """A connection (TLS, or STARTTLS; clear text only to this machine), logged in."""
    import aiosmtplib

    client = aiosmtplib.SMTP(
        hostname=server.host,
        port=server.port,
        use_tls=server.implicit_tls,
        start_tls=False,  # decided below, from what the server offers
        tls_context=context,
        timeout=EMAIL_TIMEOUT_SECONDS,
    )
    try:
        await client.connect()
        if not server.implicit_tls:
            await client.ehlo()
            if client.supports_extension("starttls"):
                await client.starttls(tls_context=context)
            elif not server.loopback:
                raise InsecureServer(
                    f"the SMTP server {server.host}:{server.port} offers no STARTTLS; the "
                    "password is not sent in clear text",
                    hint="use smtps:// (TLS from the start)",
                )
        await client.login(user, password)
    except InsecureServer:
        client.close()
        raise
    except (aiosmtplib.SMTPException, OSError) as exc:
        client.close()
        raise NotSent(f"SMTP {server.host}:{server.port}: {type(exc).__name__}: {exc}") from exc
    return client


async def check_login(server: Endpoint, user: str, password: str, context: ssl.SSLContext) -> None:
    """Log in to the SMTP server and leave (NotSent, InsecureServer when it fails)."""
    client = await _logged_in(server, user, password, context)
    try:
        await client.quit()
    except Exception:
        client.close()


async def send_mails(
    server: Endpoint,
    user: str,
    password: str,
    context: ssl.SSLContext,
    messages: list[EmailMessage],
    *,
    timeout: float = EMAIL_TIMEOUT_SECONDS,
) -> list[str]:
    """Send ``messages`` in order over one connection, each within ``timeout`` (a mail
    with a file takes longer to hand over); their Message-IDs. NotSent when none was
    handed over, PartlySent when the server took some."""
    client = await _logged_in(server, user, password, context)
    sent: list[str] = []
    try:
        for message in messages:
            try:
                await client.send_message(message, timeout=timeout)
            except Exception as exc:
                if sent:
                    raise PartlySent(
                        f"{len(sent)} of {len(messages)} mails of the reply were sent, then: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                raise
            sent.append(str(message["Message-ID"]))
    finally:
        try:
            await client.quit()
        except Exception:
            client.close()
    return sent


def classify(exc: BaseException) -> str:
    """How a send that raised ``exc`` ended: RETRY (nothing was taken), FAILED (the
    server refused it for good) or UNKNOWN (it may have been delivered)."""
    import aiosmtplib

    if isinstance(exc, PartlySent):
        return UNKNOWN
    if isinstance(exc, InsecureServer):
        return FAILED
    if isinstance(exc, NotSent):
        return RETRY  # (a wrong password too: retried, and the health says why)
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [e.code for e in exc.recipients]
        return RETRY if codes and all(400 <= c < 500 for c in codes) else FAILED
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return RETRY if 400 <= exc.code < 500 else FAILED
    if isinstance(exc, ConnectionRefusedError | ssl.SSLError):
        return RETRY
    return UNKNOWN  # a timeout or a lost connection after the data was sent
