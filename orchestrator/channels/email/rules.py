"""No loops, no backscatter: which inbound mail is never answered, not even with a
pairing code.

An answer to a machine starts a loop (two auto-responders answering each other) or
sends mail to someone who never wrote (a bounce's or a spam's forged sender gets our
answer: backscatter). RFC 3834 says how automatic mail marks itself; mailing lists add
their headers; bounces come from the null sender. A mail with any of these marks starts
no turn and gets no reply of any kind.
"""

from __future__ import annotations

from orchestrator.channels.email.reading import Mail

BULK_PRECEDENCE = ("bulk", "list", "junk")
LIST_HEADERS = (
    "List-Id",
    "List-Unsubscribe",
    "List-Post",
    "List-Help",
    "List-Owner",
    "List-Archive",
    "List-Subscribe",
)
# headers auto-responders outside RFC 3834 set (Exchange's, and older programs')
AUTO_REPLY_HEADERS = ("X-Autoreply", "X-Autorespond", "X-Auto-Reply", "X-Autoresponder")
MACHINE_LOCAL_PARTS = ("mailer-daemon", "mailerdaemon")


def _local(address: str) -> str:
    return address.rpartition("@")[0].lower() if "@" in address else address.lower()


def machine_sender(address: str) -> bool:
    """The null sender, a mailer daemon, or a list's administrative address (RFC 3834
    section 2: owner-*, *-request)."""
    local = _local(address.strip().strip("<>"))
    return (
        not local
        or local in MACHINE_LOCAL_PARTS
        or local.startswith("owner-")
        or local.endswith("-request")
    )


def automatic_reason(mail: Mail) -> str | None:
    """Why ``mail`` must not be answered, for a log line; None when a person wrote it."""
    auto = mail.header("Auto-Submitted")
    if auto is not None and auto.split(";")[0].strip().lower() != "no":
        return f"Auto-Submitted: {auto.strip()[:40]}"
    precedence = (mail.header("Precedence") or "").strip().lower()
    if precedence in BULK_PRECEDENCE:
        return f"Precedence: {precedence}"
    for name in LIST_HEADERS:
        if mail.has_header(name):
            return f"a mailing list's {name} header"
    for name in AUTO_REPLY_HEADERS:
        if mail.has_header(name):
            return f"an auto-responder's {name} header"
    return_path = mail.header("Return-Path")
    if return_path is not None and return_path.strip() in ("<>", ""):
        return "the null sender (a bounce)"
    content_type = (mail.header("Content-Type") or "").lower()
    if content_type.startswith("multipart/report"):
        return "a delivery or read report"
    if not mail.sender:
        return "no From: address"
    if machine_sender(mail.sender):
        return f"a machine's address ({mail.sender})"
    if return_path is not None and machine_sender(return_path):
        return f"a machine's envelope sender ({return_path.strip()[:80]})"
    return None
