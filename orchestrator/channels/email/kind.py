"""Email accounts in orchestrator.yaml:

channels:
  mailbot:
    kind: email
    password_env: MAIL_PASSWORD           # or password_secret: NAME
    imap_url: imaps://mail.example.org    # imaps:// (TLS), or imap:// (STARTTLS)
    smtp_url: smtps://mail.example.org    # smtps:// (TLS), or smtp:// (STARTTLS)
    user: helper@example.org              # the login of both
    address: helper@example.org           # From: of replies (default: user)
    folder: INBOX                         # the folder read
    verify: dkim                          # DKIM-verified From: only (default: none)
    ca_file: /etc/ssl/my-mail-ca.pem      # a CA the servers' certificates chain to
    poll_interval: 60s                    # when the server offers no IMAP IDLE
    attachments_max_bytes: 10m            # each file stored from a mail
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass

from orchestrator.config.kinds import AccountKind, KindOption, KindOptions
from orchestrator.limits import (
    DEFAULT_ATTACHMENT_MAX_BYTES,
    EMAIL_FILE_MAX_BYTES,
    EMAIL_POLL_SECONDS,
)
from orchestrator.validate import MappingReader

ADDRESS_PATTERN = r"[^@\s<>\"]{1,64}@[A-Za-z0-9.-]{1,253}"
FOLDER_PATTERN = r"[^\x00-\x1f\x7f\"\\]{1,200}"
VERIFY = ("none", "dkim")
DEFAULT_PORTS = {"imaps": 993, "imap": 143, "smtps": 465, "smtp": 587}


@dataclass(frozen=True)
class Endpoint:
    """A mail server: its host and port, and whether the connection is TLS from the
    start (imaps, smtps) or is upgraded with STARTTLS (imap, smtp)."""

    host: str
    port: int
    implicit_tls: bool

    @property
    def loopback(self) -> bool:
        """On this machine: the only place a connection may stay in clear text."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False


def endpoint(url: str) -> Endpoint:
    """``imaps://host:port`` and the like; ValueError saying what is wrong."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS:
        raise ValueError(f"{url!r}: the scheme must be one of {', '.join(DEFAULT_PORTS)}")
    if parts.username or parts.password:
        raise ValueError(f"{url!r}: no login in the URL (user and password_env say it)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: a server URL has a host and a port only")
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number from 1 to 65535") from None
    return Endpoint(parts.hostname, port, parts.scheme in ("imaps", "smtps"))


@dataclass(frozen=True)
class EmailOptions(KindOptions):
    imap_url: str = ""
    smtp_url: str = ""
    user: str = ""
    address: str = ""  # From: of replies; the chats' correspondents write to it
    folder: str = "INBOX"
    verify: str = "none"  # dkim: only mail whose From: a DKIM signature proves
    ca_file: str | None = None
    poll_interval: int = EMAIL_POLL_SECONDS
    attachments_max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES

    @property
    def imap(self) -> Endpoint:
        return endpoint(self.imap_url)

    @property
    def smtp(self) -> Endpoint:
        return endpoint(self.smtp_url)

    @property
    def default_trust(self) -> str:
        """A From: line proves nothing: guest unless DKIM verification is on."""
        return "member" if self.verify == "dkim" else "guest"


def _url(item: MappingReader, key: str, schemes: tuple[str, str]) -> str:
    url = item.text(key, max_chars=512).rstrip("/")
    try:
        endpoint(url)
    except ValueError as exc:
        raise item.fail(key, str(exc)) from None
    if urllib.parse.urlsplit(url).scheme not in schemes:
        raise item.fail(key, f"{url!r}: expected {schemes[0]}://HOST[:PORT] or {schemes[1]}://...")
    return url


def parse(item: MappingReader) -> EmailOptions:
    from orchestrator.units import parse_duration, parse_size

    imap_url = _url(item, "imap_url", ("imaps", "imap"))
    smtp_url = _url(item, "smtp_url", ("smtps", "smtp"))
    user = item.text("user", max_chars=320)
    if "address" in item.data:
        address = item.text("address", pattern=ADDRESS_PATTERN, max_chars=320)
    elif re.fullmatch(ADDRESS_PATTERN, user):
        address = user
    else:
        raise item.fail(
            "address", f"user {user!r} is not an email address: give address (the From: of replies)"
        )
    folder = item.text("folder", "INBOX", pattern=FOLDER_PATTERN, max_chars=200)
    verify = item.choice("verify", VERIFY, "none")
    ca_file = item.text("ca_file", max_chars=1024) if "ca_file" in item.data else None
    if ca_file is not None and not ca_file.startswith("/"):
        raise item.fail("ca_file", f"{ca_file!r}: give an absolute path to a PEM file")
    poll = parse_duration(item.raw("poll_interval", EMAIL_POLL_SECONDS))
    if poll is None or not 5 <= poll <= 3600:
        raise item.fail(
            "poll_interval",
            f"got {item.data.get('poll_interval')!r}; expected a duration from 5s to 1h",
        )
    size = parse_size(item.raw("attachments_max_bytes", DEFAULT_ATTACHMENT_MAX_BYTES))
    if size is None or not 0 <= size <= 2 * 1024**3:
        raise item.fail(
            "attachments_max_bytes",
            f"got {item.data.get('attachments_max_bytes')!r}; expected a size up to 2g "
            "(such as 10m; 0 refuses every file)",
        )
    return EmailOptions(
        imap_url, smtp_url, user, address.lower(), folder, verify, ca_file, poll, size
    )


KIND = AccountKind(
    name="email",
    title="Email",
    summary="Email: a mailbox's IMAP and SMTP servers (--imap-url, --smtp-url), its login "
    "(--user) and password (--password-env or --password-secret); a From: line is not "
    "proof, so chats are bound as guests unless --verify dkim.",
    options=(
        KindOption(
            "imap_url",
            "URL",
            "Email: the IMAP server, imaps://HOST[:PORT] (or imap:// with STARTTLS).",
            required=True,
        ),
        KindOption(
            "smtp_url",
            "URL",
            "Email: the SMTP server, smtps://HOST[:PORT] (or smtp:// with STARTTLS).",
            required=True,
        ),
        KindOption("user", "LOGIN", "Email: the login of both servers.", required=True),
        KindOption("address", "ADDRESS", "Email: the From: of replies (default: the login)."),
        KindOption("folder", "FOLDER", "Email: the IMAP folder read (default INBOX)."),
        KindOption(
            "verify",
            "none|dkim",
            "Email: dkim takes only mail whose From: a DKIM signature proves (bindings "
            "then default to member); default none.",
        ),
        KindOption("ca_file", "PATH", "Email: a CA file the servers' certificates chain to."),
        KindOption(
            "poll_interval",
            "DURATION",
            "Email: how often a server without IMAP IDLE is asked (default 60s).",
        ),
        KindOption(
            "attachments_max_bytes",
            "SIZE",
            "Telegram and Email: the largest file stored per message (default 10m; 0 "
            "refuses files).",
            cli_flag="--attachments-max",
        ),
    ),
    parse=parse,
    adapter="orchestrator.channels.email.adapter:EmailAdapter",
    loggers=("imapclient", "aiosmtplib"),
    example="orchestrator channel add email mailbot --imap-url imaps://mail.example.org \\\n"
    "      --smtp-url smtps://mail.example.org --user helper@example.org "
    "--password-env MAIL_PASSWORD",
    credential="password",
    proves_senders=False,
    files_out_max_bytes=EMAIL_FILE_MAX_BYTES,
)
